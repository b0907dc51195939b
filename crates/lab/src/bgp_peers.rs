//! Real BGP peer daemons for tests: BIRD 2, GoBGP's `gobgpd` and FRR's
//! `bgpd`, each started in a namespace from a config the test writes, asked
//! what it learned through its own CLI, and stopped by PID on drop.
//!
//! Why here: the rivora-bgp interop tests (the speaker alone) and the
//! rivorad end-to-end BGP tests (the whole daemon) peer with the same
//! daemons the same way; only the configs and the assertions differ. One
//! copy of the daemon invocations, readiness waits and RIB queries keeps
//! both suites talking to the daemons identically.
//!
//! Every file a daemon needs (config, control socket, pid file, log) lives
//! in a directory the caller owns, so parallel tests do not clash; gobgpd's
//! API listens on the loopback of the daemon's namespace, which is private
//! to that test too. The daemons come from Debian: [`ensure_tool`] installs
//! a missing one with apt-get.
//!
//! The query methods return `Result<_, String>`: the `Err` is the daemon's
//! answer or the failed command, ready to be the "last seen" part of a
//! [`crate::poll_until`] timeout message.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::{Netns, netns, poll_until, sys};

/// The lock file that serialises apt-get across parallel tests and test
/// processes.
///
/// Why public: every suite that installs a peer daemon must take the same
/// lock, or two `apt-get install` runs collide on dpkg's own lock.
pub const APT_LOCK: &str = "/run/rivora-bgp-apt.lock";

/// The gRPC port of gobgpd, on the loopback of the daemon's namespace.
///
/// Why fixed: each namespace has its own loopback, so parallel tests never
/// clash on it, and the `gobgp` CLI must be told the same port.
pub const GOBGP_API_PORT: u16 = 50051;

/// How often a freshly started daemon's CLI is asked whether it answers.
const READY_POLL: Duration = Duration::from_millis(100);

/// How long a daemon gets between SIGTERM and SIGKILL when dropped.
const TERM_GRACE: Duration = Duration::from_secs(3);

/// The first `name` on PATH or in the usual system directories (FRR keeps
/// its daemons in /usr/lib/frr).
fn find_binary(name: &str) -> Option<PathBuf> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/lib/frr"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// The path of `binary`, installing Debian `package` with apt-get when it
/// is missing.
///
/// Why: the peer daemons are test dependencies, not build dependencies; a
/// fresh machine gets them on the first run instead of failing. Installs
/// are serialised by [`APT_LOCK`], and `apt-get update` runs only if the
/// first attempt fails (stale or missing package lists).
pub fn ensure_tool(binary: &str, package: &str) -> Result<PathBuf> {
    if let Some(p) = find_binary(binary) {
        return Ok(p);
    }
    let _lock = sys::lock_file(APT_LOCK).with_context(|| format!("locking {APT_LOCK}"))?;
    if let Some(p) = find_binary(binary) {
        return Ok(p);
    }
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running apt-get to install {package} (is this Debian?)"))
    };
    eprintln!("installing Debian package {package} for {binary} (apt-get install)");
    let mut out = install()?;
    if !out.status.success() {
        let _ = Command::new("apt-get")
            .args(["update", "-q"])
            .stdin(Stdio::null())
            .output();
        out = install()?;
    }
    if !out.status.success() {
        bail!(
            "apt-get install {package} (needed for {binary}) failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    find_binary(binary)
        .with_context(|| format!("Debian package {package} installed but {binary} not found"))
}

/// Writes a daemon's config file to `path` and returns the path.
fn write_config(path: PathBuf, text: &str) -> Result<PathBuf> {
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Runs a CLI command and returns its stdout, or the command, its status
/// and its output as the error.
fn run(cmd: &mut Command) -> Result<String, String> {
    match cmd.stdin(Stdio::null()).output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(format!(
            "{cmd:?} failed ({}): {}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => Err(format!("{cmd:?}: {e}")),
    }
}

/// A daemon process started in a namespace, its stdout and stderr in a log
/// file; SIGTERM (SIGKILL after 3 s) and reaped on drop.
///
/// Why: a test that fails must not leave a routing daemon behind, and the
/// log is what explains a daemon that died or never answered. It is
/// stopped by PID, which stays ours until we reap the child.
pub struct Daemon {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    /// Starts `cmd` in `ns` with stdout and stderr going to `log`; `name`
    /// is how errors call it.
    pub fn spawn(ns: &Netns, name: &str, mut cmd: Command, log: PathBuf) -> Result<Daemon> {
        let f = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(f.try_clone().context("duplicating the log fd")?)
            .stderr(f);
        let child = ns
            .spawn(&mut cmd)
            .with_context(|| format!("starting {name}"))?;
        Ok(Daemon {
            name: name.to_string(),
            child,
            log,
        })
    }

    /// The name given to [`Daemon::spawn`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The daemon's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The daemon's log so far (empty if unreadable).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// An error with the exit status and the whole log if the daemon has
    /// exited: it will never answer, so waiting on it is pointless.
    pub fn check_running(&mut self) -> Result<()> {
        if let Ok(Some(st)) = self.child.try_wait() {
            bail!("{} exited ({st}); its log:\n{}", self.name, self.log_text());
        }
        Ok(())
    }

    /// Polls `ask` (the daemon's CLI) until it succeeds; fails at once if
    /// the daemon exits, and with the log after `limit`.
    fn wait_answering(
        &mut self,
        what: &str,
        limit: Duration,
        mut ask: impl FnMut() -> Result<String, String>,
    ) -> Result<()> {
        let outcome = poll_until(what, limit, READY_POLL, || {
            // Ok(Err) stops the polling: an exited daemon will not answer.
            if let Err(exited) = self.check_running() {
                return Ok(Err(exited));
            }
            ask().map(|_| Ok(()))
        });
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(exited)) => Err(exited),
            Err(timeout) => bail!("{timeout}\n{} log:\n{}", self.name, self.log_text()),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: the child is not reaped yet, so the PID is still ours.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + TERM_GRACE;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// BIRD 2

/// BIRD 2 in the foreground in a namespace, driven through `birdc`.
///
/// Why: BIRD is the reference router the Rivora BGP tests peer with; its
/// control socket is a path, so `birdc` works from the root namespace.
pub struct Bird {
    daemon: Daemon,
    birdc: PathBuf,
    sock: PathBuf,
}

impl Bird {
    /// Writes `config` to `dir/bird.conf` and runs `bird -f` in `ns` with
    /// its control socket, pid file and log in `dir`; returns once `birdc`
    /// answers (within 10 s).
    pub fn start(ns: &Netns, dir: &Path, config: &str) -> Result<Bird> {
        let bird = ensure_tool("bird", "bird2")?;
        let birdc = ensure_tool("birdc", "bird2")?;
        let conf = write_config(dir.join("bird.conf"), config)?;
        let sock = dir.join("bird.ctl");
        let mut cmd = Command::new(bird);
        cmd.arg("-f")
            .arg("-c")
            .arg(&conf)
            .arg("-s")
            .arg(&sock)
            .arg("-P")
            .arg(dir.join("bird.pid"));
        let mut daemon = Daemon::spawn(ns, "bird", cmd, dir.join("bird.log"))?;
        daemon.wait_answering("birdc to answer", Duration::from_secs(10), || {
            birdc_cli(&birdc, &sock, &["show", "status"])
        })?;
        Ok(Bird {
            daemon,
            birdc,
            sock,
        })
    }

    /// `birdc -s SOCK ARGS...`.
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        birdc_cli(&self.birdc, &self.sock, args)
    }

    /// `show protocols PROTO`, `Ok` when the session is Established.
    pub fn protocol_established(&self, proto: &str) -> Result<String, String> {
        let out = self.cli(&["show", "protocols", proto])?;
        if out.contains("Established") {
            Ok(out)
        } else {
            Err(out)
        }
    }

    /// `show route all protocol PROTO` as prefix -> that route's block of
    /// lines (next hop, BGP attributes).
    pub fn routes(&self, proto: &str) -> Result<BTreeMap<String, String>, String> {
        let out = self.cli(&["show", "route", "all", "protocol", proto])?;
        let mut m: BTreeMap<String, String> = BTreeMap::new();
        let mut cur: Option<String> = None;
        for line in out.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if !line.starts_with(char::is_whitespace) && first.contains('/') {
                cur = Some(first.to_string());
            }
            if let Some(p) = &cur {
                let e = m.entry(p.clone()).or_default();
                e.push_str(line);
                e.push('\n');
            }
        }
        Ok(m)
    }

    /// BIRD's log so far.
    pub fn log_text(&self) -> String {
        self.daemon.log_text()
    }
}

fn birdc_cli(birdc: &Path, sock: &Path, args: &[&str]) -> Result<String, String> {
    run(Command::new(birdc).arg("-s").arg(sock).args(args))
}

// ---------------------------------------------------------------------------
// GoBGP

/// A route in gobgpd's RIB: its next hop and all its path attributes.
#[derive(Clone, Debug)]
pub struct GoBgpPath {
    /// NEXT_HOP (IPv4) or MP_REACH_NLRI's next hop (IPv6); empty if none.
    pub next_hop: String,
    /// The path attributes as `gobgp -j` prints them: an array of objects
    /// with a numeric `type` (2 AS_PATH, 5 LOCAL_PREF, 8 COMMUNITIES, ...).
    pub attrs: serde_json::Value,
}

/// gobgpd in a namespace, driven through the `gobgp` CLI.
///
/// Why: GoBGP is a strict, widely deployed peer; its API listens on the
/// namespace's loopback ([`GOBGP_API_PORT`]), so the CLI runs inside the
/// namespace (entered by setns, as [`Netns::run`] does) without borrowing
/// the [`Netns`], which the test's lab may need mutably meanwhile.
pub struct GoBgp {
    daemon: Daemon,
    ns: Arc<OwnedFd>,
    gobgp: PathBuf,
}

impl GoBgp {
    /// Writes `config` (TOML) to `dir/gobgpd.toml` and runs gobgpd in `ns`
    /// with its log in `dir`; returns once `gobgp global` answers (within
    /// 10 s).
    pub fn start(ns: &Netns, dir: &Path, config: &str) -> Result<GoBgp> {
        let gobgpd = ensure_tool("gobgpd", "gobgpd")?;
        let gobgp = ensure_tool("gobgp", "gobgpd")?;
        let conf = write_config(dir.join("gobgpd.toml"), config)?;
        let mut cmd = Command::new(gobgpd);
        cmd.arg("-f")
            .arg(&conf)
            .args(["-t", "toml", "-p", "--log-level=info", "--pprof-disable"])
            .arg(format!("--api-hosts=127.0.0.1:{GOBGP_API_PORT}"));
        let mut daemon = Daemon::spawn(ns, "gobgpd", cmd, dir.join("gobgpd.log"))?;
        let ns = ns.handle();
        daemon.wait_answering("gobgp to answer", Duration::from_secs(10), || {
            gobgp_cli(&gobgp, &ns, &["global"])
        })?;
        Ok(GoBgp { daemon, ns, gobgp })
    }

    /// `gobgp -p PORT ARGS...`, inside the daemon's namespace.
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        gobgp_cli(&self.gobgp, &self.ns, args)
    }

    /// `gobgp neighbor NEIGHBOR`, `Ok` when the session is established.
    pub fn established(&self, neighbor: &str) -> Result<String, String> {
        let out = self.cli(&["neighbor", neighbor])?;
        if out.contains("BGP state = established") || out.contains("BGP state = ESTABLISHED") {
            Ok(out)
        } else {
            Err(out)
        }
    }

    /// `gobgp global rib -a FAMILY -j` as prefix -> best path (the first
    /// one listed); an empty answer is an empty RIB.
    pub fn rib(&self, family: &str) -> Result<BTreeMap<String, GoBgpPath>, String> {
        let out = self.cli(&["global", "rib", "-a", family, "-j"])?;
        let v: serde_json::Value = if out.trim().is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(out.trim()).map_err(|e| format!("{e}: {out}"))?
        };
        let mut m = BTreeMap::new();
        if let Some(obj) = v.as_object() {
            for (prefix, paths) in obj {
                let attrs = paths[0]["attrs"].clone();
                let next_hop = attrs
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|a| a["type"] == 3 || a["type"] == 14)
                    .and_then(|a| a["nexthop"].as_str())
                    .unwrap_or("")
                    .to_string();
                m.insert(prefix.clone(), GoBgpPath { next_hop, attrs });
            }
        }
        Ok(m)
    }

    /// gobgpd's log so far.
    pub fn log_text(&self) -> String {
        self.daemon.log_text()
    }
}

fn gobgp_cli(gobgp: &Path, ns: &Arc<OwnedFd>, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(gobgp);
    cmd.args(["-p", &GOBGP_API_PORT.to_string()]).args(args);
    netns::attach_fd(&mut cmd, Arc::clone(ns));
    run(&mut cmd)
}

// ---------------------------------------------------------------------------
// FRR

/// FRR's bgpd alone in a namespace, driven through `vtysh`.
///
/// Why alone: `-Z` runs it without zebra, so nothing is installed in a
/// kernel and the test needs only the BGP daemon; `-S` skips privilege
/// switching (root in a throwaway namespace) and `-P 0` opens no vty TCP
/// port. Its vty socket is a path, so `vtysh` works from the root
/// namespace.
pub struct Frr {
    daemon: Daemon,
    vty_dir: PathBuf,
    vtysh: PathBuf,
}

impl Frr {
    /// Writes `config` to `dir/bgpd.conf` and runs bgpd in `ns` with its
    /// vty socket (in `dir/frr`), pid file and log in `dir`; returns once
    /// `show bgp summary` answers (within 15 s).
    pub fn start(ns: &Netns, dir: &Path, config: &str) -> Result<Frr> {
        let vtysh = ensure_tool("vtysh", "frr")?;
        let bgpd = ensure_tool("bgpd", "frr")?;
        let conf = write_config(dir.join("bgpd.conf"), config)?;
        let vty_dir = dir.join("frr");
        std::fs::create_dir_all(&vty_dir)
            .with_context(|| format!("creating {}", vty_dir.display()))?;
        let mut cmd = Command::new(bgpd);
        cmd.args(["-Z", "-S", "-P", "0", "--log", "stdout"])
            .arg("-f")
            .arg(&conf)
            .arg("-i")
            .arg(dir.join("bgpd.pid"))
            .arg("--vty_socket")
            .arg(&vty_dir);
        let mut daemon = Daemon::spawn(ns, "bgpd", cmd, dir.join("bgpd.log"))?;
        daemon.wait_answering("vtysh to answer", Duration::from_secs(15), || {
            vtysh_cli(&vtysh, &vty_dir, "show bgp summary")
        })?;
        Ok(Frr {
            daemon,
            vty_dir,
            vtysh,
        })
    }

    /// `vtysh --vty_socket DIR -d bgpd -c COMMAND`.
    pub fn cli(&self, command: &str) -> Result<String, String> {
        vtysh_cli(&self.vtysh, &self.vty_dir, command)
    }

    /// A `... json` command's answer, parsed.
    pub fn json(&self, command: &str) -> Result<serde_json::Value, String> {
        let out = self.cli(command)?;
        serde_json::from_str(&out).map_err(|e| format!("{command}: {e}: {out}"))
    }

    /// `show bgp neighbors NEIGHBOR json`, the neighbor's own object
    /// (`bgpState`, `lastNotificationReason`, ...).
    pub fn neighbor(&self, neighbor: &str) -> Result<serde_json::Value, String> {
        Ok(self.json(&format!("show bgp neighbors {neighbor} json"))?[neighbor].clone())
    }

    /// `show bgp FAMILY unicast json` as prefix -> its first path
    /// (`nexthops`, `path`, `valid`, ...).
    pub fn routes(&self, family: &str) -> Result<BTreeMap<String, serde_json::Value>, String> {
        let v = self.json(&format!("show bgp {family} unicast json"))?;
        let mut m = BTreeMap::new();
        if let Some(obj) = v["routes"].as_object() {
            for (p, paths) in obj {
                m.insert(p.clone(), paths[0].clone());
            }
        }
        Ok(m)
    }

    /// bgpd's log so far.
    pub fn log_text(&self) -> String {
        self.daemon.log_text()
    }
}

fn vtysh_cli(vtysh: &Path, vty_dir: &Path, command: &str) -> Result<String, String> {
    run(Command::new(vtysh)
        .arg("--vty_socket")
        .arg(vty_dir)
        .args(["-d", "bgpd", "-c", command]))
}
