//! [`Netns`]: a named network namespace owned by the test that created it.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

use crate::sys;

/// Prefix of every namespace the lab creates, so leftovers are recognisable
/// (and reapable by [`Netns::reap_stale`]) after a crash.
pub const NAME_PREFIX: &str = "rv";

/// Directory where `ip netns` keeps its bind-mounted namespace handles.
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// Longest tag kept in a namespace name; keeps names short enough to read in
/// `ip netns list` and close to the 15-character interface-name budget.
pub const MAX_TAG_LEN: usize = 4;

/// Grace period between SIGTERM and SIGKILL for processes spawned into a
/// namespace when it is dropped.
const TERM_GRACE: Duration = Duration::from_millis(1500);

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A network namespace created with `ip netns add` and deleted on drop.
///
/// Why: end-to-end tests need isolated client/balancer/backend hosts on one
/// machine, tests run in parallel threads *and* in several test processes, and
/// a failed test must never leave namespaces or processes behind. The name
/// embeds the tag, the PID and a per-process counter, so it is unique across
/// concurrent processes; `Drop` terminates every process started inside (by
/// pidfd, so never a recycled PID) and then deletes the namespace, which also
/// runs during unwinding when a test panics.
#[derive(Debug)]
pub struct Netns {
    name: String,
    path: PathBuf,
    /// An open handle on the namespace: used for setns(2) and to identify
    /// which processes live in it (by nsfs inode).
    fd: Arc<OwnedFd>,
    /// pidfds of processes started through [`Netns::spawn`].
    children: Mutex<Vec<OwnedFd>>,
}

impl Netns {
    /// Creates a fresh namespace named `rv{tag}-{pid}-{counter}` with `lo` up.
    ///
    /// Why `lo` up: almost every test binds or talks to loopback at some
    /// point, and a namespace starts with `lo` down.
    /// `tag` is reduced to at most [`MAX_TAG_LEN`] ASCII alphanumerics so the
    /// name stays short and parseable.
    pub fn new(tag: &str) -> Result<Netns> {
        let tag = sanitize_tag(tag);
        let pid = std::process::id();
        let mut last_err = None;
        // A leftover namespace from a crashed process that had our PID can
        // clash with the name; skip over it instead of failing.
        for _ in 0..64 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let name = format_name(&tag, pid, n);
            let out = Command::new("ip")
                .args(["netns", "add", &name])
                .stdin(Stdio::null())
                .output()
                .context("running `ip netns add` (is iproute2 installed?)")?;
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
                if stderr.contains("File exists") {
                    last_err = Some(anyhow!("`ip netns add {name}`: {stderr}"));
                    continue;
                }
                bail!("`ip netns add {name}` failed ({}): {stderr}", out.status);
            }
            let path = Path::new(NETNS_RUN_DIR).join(&name);
            let fd = match File::open(&path) {
                Ok(f) => OwnedFd::from(f),
                Err(e) => {
                    let _ = Command::new("ip").args(["netns", "del", &name]).output();
                    return Err(e).with_context(|| format!("opening {}", path.display()));
                }
            };
            // From here on Drop cleans up if anything fails.
            let ns = Netns {
                name,
                path,
                fd: Arc::new(fd),
                children: Mutex::new(Vec::new()),
            };
            ns.run(&["ip", "link", "set", "lo", "up"])?;
            return Ok(ns);
        }
        Err(last_err.unwrap_or_else(|| anyhow!("could not allocate a namespace name")))
    }

    /// The namespace name as shown by `ip netns list`; pass it to `ip -n`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/NAME`: what `nsenter --net=` and other tools take.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs a command inside the namespace and returns its stdout.
    ///
    /// Why an error with everything in it: a failing `ip`/`ethtool` call in a
    /// topology build is otherwise very hard to diagnose from a test log, so
    /// the error names the namespace, the full command, the exit status and
    /// stderr. The child enters the namespace exactly like
    /// `nsenter --net=/run/netns/NAME` (setns then exec), deliberately not
    /// like `ip netns exec`, which remounts /sys and would hide bpffs pins.
    pub fn run(&self, argv: &[&str]) -> Result<String> {
        let (prog, args) = argv.split_first().context("Netns::run: empty command")?;
        let mut cmd = Command::new(prog);
        cmd.args(args).stdin(Stdio::null());
        self.attach(&mut cmd);
        let shown = format!("nsenter --net={} {}", self.path.display(), argv.join(" "));
        let out = cmd
            .output()
            .with_context(|| format!("could not start `{shown}`"))?;
        if !out.status.success() {
            bail!(
                "`{shown}` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        String::from_utf8(out.stdout).with_context(|| format!("`{shown}` printed non-UTF-8"))
    }

    /// Sets a sysctl inside the namespace (`sysctl -w key=value`).
    ///
    /// Why inside: `net.*` sysctls are per network namespace; writing them
    /// from the root namespace would change the host instead. `key` may use
    /// `.` or `/` separators (use `/` when an interface name has a dot).
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        self.run(&["sysctl", "-q", "-w", &format!("{key}={value}")])?;
        Ok(())
    }

    /// Starts `cmd` inside the namespace and remembers it so that dropping the
    /// namespace terminates it.
    ///
    /// Why not `ip netns exec`: it remounts /sys in a private mount namespace,
    /// so a daemon pinning BPF objects under /sys/fs/bpf would pin them where
    /// nobody else can see them. Like `nsenter --net=`, only the network
    /// namespace changes (the setns happens in the forked child just before
    /// exec, so the caller's stdio, env and cwd settings are kept). The
    /// caller still owns the returned [`Child`] and should `wait` it.
    pub fn spawn(&self, cmd: &mut Command) -> Result<Child> {
        self.attach(cmd);
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {:?} in netns {}", cmd.get_program(), self.name))?;
        // The child is not reaped before we own it, so its PID cannot have
        // been recycled yet: the pidfd is race-free.
        match sys::pidfd_open(child.id()) {
            Ok(pidfd) => {
                let mut kids = self.children.lock().unwrap_or_else(|p| p.into_inner());
                kids.retain(|fd| !sys::pidfd_wait_exit(fd, Duration::ZERO));
                kids.push(pidfd);
            }
            Err(e) => eprintln!("rivora-lab: pidfd_open({}) failed: {e}", child.id()),
        }
        Ok(child)
    }

    /// Spawns a thread that joins this namespace, then runs `f`.
    ///
    /// Why: sockets belong to the namespace of the thread that creates them,
    /// so this is how in-process servers and clients live "on" a lab host.
    /// Only that thread moves (network namespaces are per thread). If joining
    /// the namespace fails the thread panics with the reason, which surfaces
    /// through `join()`.
    pub fn enter_thread<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let fd = Arc::clone(&self.fd);
        let name = self.name.clone();
        std::thread::Builder::new()
            .name(format!("ns-{name}"))
            .spawn(move || {
                if let Err(e) = sys::setns_net(fd.as_raw_fd()) {
                    panic!("setns into netns {name} failed: {e}");
                }
                drop(fd);
                f()
            })
            .expect("spawning a thread")
    }

    /// Runs `f` on a short-lived thread inside the namespace and waits for it.
    ///
    /// Why: the scoped variant of [`Netns::enter_thread`]; `f` may borrow from
    /// the caller, and setns failures and panics come back as errors instead
    /// of tearing down the test thread.
    pub fn within<F, T>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        std::thread::scope(|s| {
            let h = s.spawn(|| -> Result<T> {
                self.enter_current_thread()?;
                Ok(f())
            });
            match h.join() {
                Ok(r) => r,
                Err(p) => Err(anyhow!(
                    "thread in netns {} panicked: {}",
                    self.name,
                    panic_message(&*p)
                )),
            }
        })
    }

    /// Moves the calling thread into the namespace, for good.
    ///
    /// Crate-private: only for threads the lab itself spawned and will end.
    pub(crate) fn enter_current_thread(&self) -> Result<()> {
        sys::setns_net(self.fd.as_raw_fd())
            .with_context(|| format!("setns into netns {}", self.name))
    }

    /// Makes `cmd` enter this namespace in the child right before exec.
    fn attach(&self, cmd: &mut Command) {
        attach_fd(cmd, self.handle());
    }

    /// Makes `cmd` enter this namespace when it is spawned, without spawning it: for callers
    /// that must fork from a thread of their own (a test cluster's long-lived spawner, so
    /// `PR_SET_PDEATHSIG` ties its kubelets to that thread). Unlike [`Netns::spawn`], the
    /// process is not stopped when the namespace is dropped: the caller owns it.
    pub fn attach_command(&self, cmd: &mut Command) {
        self.attach(cmd);
    }

    /// A shared handle on the namespace, for [`attach_fd`].
    ///
    /// Crate-private: for lab helpers that run commands in the namespace
    /// later without borrowing the `Netns` (a peer daemon's CLI, while the
    /// test holds the lab that owns the namespace mutably).
    pub(crate) fn handle(&self) -> Arc<OwnedFd> {
        Arc::clone(&self.fd)
    }

    /// (device, inode) of the namespace: how /proc/PID/ns/net identifies it.
    fn identity(&self) -> Option<(u64, u64)> {
        let f = File::from(self.fd.try_clone().ok()?);
        let m = f.metadata().ok()?;
        Some((m.dev(), m.ino()))
    }

    /// Deletes leftover lab namespaces whose creating process is gone.
    ///
    /// Why: `Drop` cannot run when a test process is SIGKILLed (e.g. a CI
    /// timeout); this lets the next run or `rivora-lab cleanup` remove what
    /// such a run left, killing processes still inside them. Namespaces of
    /// live processes (including ours) are never touched. Returns the names
    /// removed.
    pub fn reap_stale() -> Result<Vec<String>> {
        let mut removed = Vec::new();
        let entries = match std::fs::read_dir(NETNS_RUN_DIR) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
            Err(e) => return Err(e).context("reading /run/netns"),
        };
        let me = std::process::id();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = parse_name_pid(&name) else {
                continue;
            };
            if pid == me || Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            let path = entry.path();
            if let Ok(f) = File::open(&path)
                && let Ok(m) = f.metadata()
            {
                kill_processes_in((m.dev(), m.ino()));
            }
            let out = Command::new("ip").args(["netns", "del", &name]).output()?;
            if out.status.success() {
                removed.push(name);
            } else {
                eprintln!(
                    "rivora-lab: could not delete stale netns {name}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Ok(removed)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // 1. Processes we spawned: SIGTERM, short grace, then SIGKILL.
        let kids = std::mem::take(self.children.get_mut().unwrap_or_else(|p| p.into_inner()));
        for fd in &kids {
            let _ = sys::pidfd_signal(fd, libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + TERM_GRACE;
        for fd in &kids {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !sys::pidfd_wait_exit(fd, left) {
                let _ = sys::pidfd_signal(fd, libc::SIGKILL);
            }
        }
        // 2. Anything else still living in the namespace (children of the
        //    above, daemons that forked): all descend from what we started.
        if let Some(id) = self.identity() {
            kill_processes_in(id);
        }
        // 3. The namespace itself.
        match Command::new("ip")
            .args(["netns", "del", &self.name])
            .stdin(Stdio::null())
            .output()
        {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "rivora-lab: `ip netns del {}` failed: {}",
                self.name,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => eprintln!("rivora-lab: `ip netns del {}`: {e}", self.name),
        }
    }
}

/// SIGKILLs every process (other than ourselves) whose network namespace is
/// `id`, via pidfd after re-checking the namespace so a PID recycled in
/// between is never hit.
fn kill_processes_in(id: (u64, u64)) {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return;
    };
    let in_ns = |pid: u32| {
        std::fs::metadata(format!("/proc/{pid}/ns/net"))
            .map(|m| (m.dev(), m.ino()) == id)
            .unwrap_or(false)
    };
    let mut victims = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || !in_ns(pid) {
            continue;
        }
        if let Ok(fd) = sys::pidfd_open(pid)
            && in_ns(pid)
        {
            let _ = sys::pidfd_signal(&fd, libc::SIGKILL);
            victims.push(fd);
        }
    }
    for fd in &victims {
        sys::pidfd_wait_exit(fd, Duration::from_secs(2));
    }
}

fn sanitize_tag(tag: &str) -> String {
    tag.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .take(MAX_TAG_LEN)
        .collect()
}

/// Makes `cmd` enter the namespace `fd` refers to in the child right before
/// exec, as [`Netns::run`] and [`Netns::spawn`] do.
pub(crate) fn attach_fd(cmd: &mut Command, fd: Arc<OwnedFd>) {
    // SAFETY: the closure runs between fork and exec and only issues the
    // async-signal-safe setns(2) syscall on an fd kept alive by the Arc
    // (the Arc lives as long as the Command, so the fd number cannot be
    // reused for something else).
    unsafe {
        cmd.pre_exec(move || sys::setns_net(fd.as_raw_fd()));
    }
}

fn format_name(tag: &str, pid: u32, n: u32) -> String {
    format!("{NAME_PREFIX}{tag}-{pid}-{n}")
}

/// PID embedded in a lab namespace name, or None if `name` is not one.
fn parse_name_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    let mut parts = rest.rsplitn(3, '-');
    let n = parts.next()?;
    let pid = parts.next()?;
    let tag = parts.next()?;
    if tag.len() > MAX_TAG_LEN
        || !tag.chars().all(|c| c.is_ascii_alphanumeric())
        || n.is_empty()
        || !n.chars().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    pid.parse().ok()
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_and_parseable() {
        let t = sanitize_tag("E2E-web/test");
        assert_eq!(t, "e2ew");
        let name = format_name(&t, 4_194_304, 7);
        assert_eq!(name, "rve2ew-4194304-7");
        assert_eq!(parse_name_pid(&name), Some(4_194_304));
        assert_eq!(parse_name_pid(&format_name("", 42, 0)), Some(42));
        assert_eq!(parse_name_pid("rvfoo"), None);
        assert_eq!(parse_name_pid("other-1-2"), None);
        assert_eq!(parse_name_pid("rvtoolong-1-2"), None);
    }
}
