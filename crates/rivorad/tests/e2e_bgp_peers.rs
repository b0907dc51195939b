//! End-to-end BGP against GoBGP and FRR: the same rivorad-level behaviour
//! that `e2e_bgp.rs` shows with BIRD, with the real rivorad on the balancer
//! of rivora-lab's `Segment` and the peer daemon (gobgpd, or FRR's bgpd
//! alone) on the segment's router. For each peer: the session comes up and
//! the peer's RIB holds the /32 and /128 VIP routes with the balancer as
//! next hop; a VIP whose backends all stop is withdrawn (latency printed);
//! removing a VIP from the YAML withdraws it; a SIGTERM and a new start of
//! rivorad re-establish the session and re-advertise; a wrong TCP-MD5
//! password keeps the session down.
//!
//! Needs root (fails loudly without); installs Debian's `gobgpd` and `frr`
//! with apt-get when missing, as the rivora-bgp interop tests do, whose
//! daemon invocations and RIB queries (`crates/bgp/tests/interop.rs`) this
//! file copies.

mod segment_lab;

use segment_lab::*;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rivora_lab::Netns;
use rivora_lab::segment::{SEG_LB_V4, SEG_LB_V6, SEG_ROUTER_V4};
use rivora_lab::topology::{backend_v4, backend_v6};

const WEB4: &str = "10.200.100.1";
const WEB6: &str = "fd00:200:100::1";
const SOLO4: &str = "10.200.100.3";

/// The path of `binary`, installing Debian `package` with apt-get when it
/// is missing (serialised by the lock file the rivora-bgp interop tests
/// use; `apt-get update` only if the first attempt fails).
fn ensure_tool(binary: &str, package: &str) -> PathBuf {
    if let Some(p) = find_binary(binary) {
        return p;
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/run/rivora-bgp-apt.lock")
        .expect("opening /run/rivora-bgp-apt.lock");
    // SAFETY: flock on an fd we own.
    let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
    if let Some(p) = find_binary(binary) {
        return p;
    }
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running apt-get to install {package}: {e}"))
    };
    eprintln!("installing Debian package {package} for {binary} (apt-get install)");
    let mut out = install();
    if !out.status.success() {
        let _ = Command::new("apt-get")
            .args(["update", "-q"])
            .stdin(Stdio::null())
            .output();
        out = install();
    }
    assert!(
        out.status.success(),
        "apt-get install {package} (needed for {binary}) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    find_binary(binary)
        .unwrap_or_else(|| panic!("Debian package {package} installed but {binary} not found"))
}

/// Runs a command and returns its stdout, or the error text.
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

/// A peer daemon started in a namespace; SIGTERM and reaped on drop (by
/// PID, which is ours until we reap it).
struct Daemon {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn spawn(ns: &Netns, name: &'static str, mut cmd: Command, log: PathBuf) -> Daemon {
        let f = File::create(&log).unwrap();
        cmd.stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f);
        let child = ns
            .spawn(&mut cmd)
            .unwrap_or_else(|e| panic!("starting {name}: {e:#}"));
        Daemon { name, child, log }
    }

    fn assert_running(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("{} exited ({st}); its log:\n{}", self.name, self.log_text());
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: the child is not reaped yet, so the PID is still ours.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(3);
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

/// What the tests need from a peer daemon.
trait Peer {
    fn name(&self) -> &'static str;
    /// Whether the session with the balancer is Established (Err: the
    /// daemon's answer, when it is not).
    fn established(&self) -> Result<String, String>;
    /// The routes learned from the balancer: prefix -> next hop, both
    /// families.
    fn routes(&self) -> Result<BTreeMap<String, String>, String>;
    /// The daemon's own RIB listing, for the test output.
    fn show(&self) -> String;
    fn log_text(&self) -> String;
}

// ---------------------------------------------------------------------------
// GoBGP

/// gRPC port of gobgpd, on the router namespace's loopback.
const GOBGP_API_PORT: u16 = 50051;

struct GoBgp {
    daemon: Daemon,
    ns_name: String,
    gobgp: PathBuf,
}

impl GoBgp {
    /// gobgpd in the router namespace: one passive eBGP session with the
    /// lb (TCP-MD5), IPv4 and IPv6 unicast over it.
    fn start(ns: &Netns, dir: &Path) -> GoBgp {
        let gobgpd = ensure_tool("gobgpd", "gobgpd");
        let gobgp = ensure_tool("gobgp", "gobgpd");
        let conf = dir.join("gobgpd.toml");
        std::fs::write(
            &conf,
            format!(
                r#"[global.config]
  as = {ROUTER_AS}
  router-id = "{SEG_ROUTER_V4}"
  port = 179

[[neighbors]]
  [neighbors.config]
    neighbor-address = "{SEG_LB_V4}"
    peer-as = {OUR_AS}
    auth-password = "{PASSWORD}"
  [neighbors.transport.config]
    passive-mode = true
  [neighbors.timers.config]
    hold-time = 9
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-unicast"
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv6-unicast"
"#
            ),
        )
        .unwrap();
        let mut cmd = Command::new(gobgpd);
        cmd.arg("-f")
            .arg(&conf)
            .args(["-t", "toml", "-p", "--log-level=info", "--pprof-disable"])
            .arg(format!("--api-hosts=127.0.0.1:{GOBGP_API_PORT}"));
        let daemon = Daemon::spawn(ns, "gobgpd", cmd, dir.join("gobgpd.log"));
        let mut g = GoBgp {
            daemon,
            ns_name: ns.name().to_string(),
            gobgp,
        };
        wait_for("gobgp to answer", Duration::from_secs(10), || {
            g.daemon.assert_running();
            g.cli(&["global"])
        });
        g
    }

    /// `gobgp -p PORT ARGS...` inside the router namespace (the API is on
    /// its loopback).
    fn cli(&self, args: &[&str]) -> Result<String, String> {
        run(Command::new("ip")
            .args(["netns", "exec", &self.ns_name])
            .arg(&self.gobgp)
            .args(["-p", &GOBGP_API_PORT.to_string()])
            .args(args))
    }
}

impl Peer for GoBgp {
    fn name(&self) -> &'static str {
        "GoBGP"
    }

    fn established(&self) -> Result<String, String> {
        let out = self.cli(&["neighbor", &SEG_LB_V4.to_string()])?;
        if out.contains("BGP state = established") || out.contains("BGP state = ESTABLISHED") {
            Ok(out)
        } else {
            Err(out)
        }
    }

    /// `gobgp global rib -a FAMILY -j`; the next hop is the NEXT_HOP
    /// attribute (IPv4) or MP_REACH_NLRI's (IPv6).
    fn routes(&self) -> Result<BTreeMap<String, String>, String> {
        let mut m = BTreeMap::new();
        for family in ["ipv4", "ipv6"] {
            let out = self.cli(&["global", "rib", "-a", family, "-j"])?;
            let v: serde_json::Value = if out.trim().is_empty() {
                serde_json::Value::Null
            } else {
                serde_json::from_str(out.trim()).map_err(|e| format!("{e}: {out}"))?
            };
            if let Some(obj) = v.as_object() {
                for (prefix, paths) in obj {
                    let nh = paths[0]["attrs"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|a| a["type"] == 3 || a["type"] == 14)
                        .and_then(|a| a["nexthop"].as_str())
                        .unwrap_or("")
                        .to_string();
                    m.insert(prefix.clone(), nh);
                }
            }
        }
        Ok(m)
    }

    fn show(&self) -> String {
        let mut s = String::new();
        for family in ["ipv4", "ipv6"] {
            s.push_str(
                &self
                    .cli(&["global", "rib", "-a", family])
                    .unwrap_or_else(|e| e),
            );
        }
        s
    }

    fn log_text(&self) -> String {
        self.daemon.log_text()
    }
}

// ---------------------------------------------------------------------------
// FRR

struct Frr {
    daemon: Daemon,
    vty_dir: PathBuf,
    vtysh: PathBuf,
}

impl Frr {
    /// FRR's bgpd alone in the router namespace (`-Z`: no zebra, nothing
    /// installed in a kernel; `-S`: no privilege switching; `-P 0`: no vty
    /// TCP port), its vty socket, pid file and config in `dir`; one passive
    /// eBGP session with the lb (TCP-MD5), IPv4 and IPv6 unicast over it.
    fn start(ns: &Netns, dir: &Path) -> Frr {
        let vtysh = ensure_tool("vtysh", "frr");
        let bgpd = ensure_tool("bgpd", "frr");
        let conf = dir.join("bgpd.conf");
        std::fs::write(
            &conf,
            format!(
                r#"frr defaults traditional
hostname rivora-router
log stdout informational
!
router bgp {ROUTER_AS}
 bgp router-id {SEG_ROUTER_V4}
 no bgp ebgp-requires-policy
 neighbor {SEG_LB_V4} remote-as {OUR_AS}
 neighbor {SEG_LB_V4} passive
 neighbor {SEG_LB_V4} password {PASSWORD}
 neighbor {SEG_LB_V4} timers 3 9
 !
 address-family ipv4 unicast
  neighbor {SEG_LB_V4} activate
 exit-address-family
 !
 address-family ipv6 unicast
  neighbor {SEG_LB_V4} activate
 exit-address-family
exit
!
"#
            ),
        )
        .unwrap();
        let vty_dir = dir.join("frr");
        std::fs::create_dir_all(&vty_dir).unwrap();
        let mut cmd = Command::new(bgpd);
        cmd.args(["-Z", "-S", "-P", "0", "--log", "stdout"])
            .arg("-f")
            .arg(&conf)
            .arg("-i")
            .arg(dir.join("bgpd.pid"))
            .arg("--vty_socket")
            .arg(&vty_dir);
        let daemon = Daemon::spawn(ns, "bgpd", cmd, dir.join("bgpd.log"));
        let mut f = Frr {
            daemon,
            vty_dir,
            vtysh,
        };
        wait_for("vtysh to answer", Duration::from_secs(15), || {
            f.daemon.assert_running();
            f.cli("show bgp summary")
        });
        f
    }

    /// `vtysh --vty_socket DIR -d bgpd -c CMD` (a Unix socket path, so
    /// from the root namespace).
    fn cli(&self, command: &str) -> Result<String, String> {
        run(Command::new(&self.vtysh)
            .arg("--vty_socket")
            .arg(&self.vty_dir)
            .args(["-d", "bgpd", "-c", command]))
    }

    fn json(&self, command: &str) -> Result<serde_json::Value, String> {
        let out = self.cli(command)?;
        serde_json::from_str(&out).map_err(|e| format!("{command}: {e}: {out}"))
    }

    fn neighbor(&self) -> Result<serde_json::Value, String> {
        let n = SEG_LB_V4.to_string();
        Ok(self.json(&format!("show bgp neighbors {n} json"))?[&n].clone())
    }
}

impl Peer for Frr {
    fn name(&self) -> &'static str {
        "FRR"
    }

    fn established(&self) -> Result<String, String> {
        let n = self.neighbor()?;
        let state = n["bgpState"].as_str().unwrap_or("?").to_string();
        if state == "Established" {
            Ok(state)
        } else {
            Err(format!("bgpState {state}: {n}"))
        }
    }

    /// `show bgp FAMILY unicast json`: prefix -> first path's first next
    /// hop (the global one for IPv6).
    fn routes(&self) -> Result<BTreeMap<String, String>, String> {
        let mut m = BTreeMap::new();
        for family in ["ipv4", "ipv6"] {
            let v = self.json(&format!("show bgp {family} unicast json"))?;
            if let Some(obj) = v["routes"].as_object() {
                for (p, paths) in obj {
                    let nh = paths[0]["nexthops"][0]["ip"]
                        .as_str()
                        .unwrap_or("")
                        .to_string();
                    m.insert(p.clone(), nh);
                }
            }
        }
        Ok(m)
    }

    fn show(&self) -> String {
        let mut s = String::new();
        for family in ["ipv4", "ipv6"] {
            s.push_str(
                &self
                    .cli(&format!("show bgp {family} unicast"))
                    .unwrap_or_else(|e| e),
            );
        }
        s
    }

    fn log_text(&self) -> String {
        self.daemon.log_text()
    }
}

// ---------------------------------------------------------------------------
// The lab

/// A VIP on port 80 whose backends are `b{i}:8080`, with a fast TCP check.
fn vip(name: &str, addr: &str, backends: &[usize]) -> String {
    let v6 = addr.contains(':');
    let mut s = format!(
        "  - name: {name}\n    address: \"{addr}\"\n    port: 80\n    healthCheck: {{ type: tcp, interval: 200ms, timeout: 100ms, fall: 2, rise: 1 }}\n    backends:\n"
    );
    for &i in backends {
        let a = if v6 {
            backend_v6(i).to_string()
        } else {
            backend_v4(i).to_string()
        };
        s.push_str(&format!("      - {{ address: \"{a}\", port: {PORT} }}\n"));
    }
    s
}

fn bgp_config(password: &str, with_web6: bool) -> String {
    let mut s = format!(
        "bgp:\n  localAS: {OUR_AS}\n  routerID: {SEG_LB_V4}\n  peers:\n    - address: {SEG_ROUTER_V4}\n      as: {ROUTER_AS}\n      password: \"{password}\"\n      holdTime: 9\n      nextHop: {{ ipv6: \"{SEG_LB_V6}\" }}\nvips:\n"
    );
    s.push_str(&vip("web4", WEB4, &[1, 2]));
    if with_web6 {
        s.push_str(&vip("web6", WEB6, &[1, 2]));
    }
    s.push_str(&vip("solo4", SOLO4, &[3]));
    s
}

fn p4(a: &str) -> String {
    format!("{a}/32")
}

fn p6(a: &str) -> String {
    format!("{a}/128")
}

/// Waits until the peer's RIB satisfies `pred`, returning it.
fn wait_rib(
    peer: &dyn Peer,
    lab: &Lab,
    what: &str,
    limit: Duration,
    pred: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    let name = peer.name();
    wait_for(&format!("{name}: {what}"), limit, || match peer.routes() {
        Ok(r) if pred(&r) => Ok(r),
        Ok(r) => Err(format!(
            "{name} RIB {r:?}\nsession: {:?}\nrivorad API: {:?}\nrivorad log:\n{}\n{name} log:\n{}",
            peer.established(),
            lab.rivorad.as_ref().map(|_| lab.bgp()),
            lab.log(),
            peer.log_text()
        )),
        Err(e) => Err(e),
    })
}

/// Steps 1-5 of the issue's acceptance against `peer`, which runs in the
/// router namespace of `lab`.
fn announce_withdraw_reload_restart_md5(lab: &mut Lab, peer: &dyn Peer) {
    let name = peer.name();
    lab.write_config(&bgp_config(PASSWORD, true));
    lab.start(&[]);

    // 1. Established, the /32s and the /128 with the balancer as next hop.
    let t0 = Instant::now();
    let rib = wait_rib(
        peer,
        lab,
        "all three VIP routes",
        Duration::from_secs(30),
        |r| r.len() == 3,
    );
    eprintln!(
        "{name} had all three routes {:?} after rivorad was ready:\n{}",
        t0.elapsed(),
        peer.show()
    );
    let out = wait_for(
        &format!("{name} Established"),
        Duration::from_secs(5),
        || peer.established(),
    );
    eprintln!("{name} session: {}", out.lines().next().unwrap_or(""));
    let lb4 = SEG_LB_V4.to_string();
    let lb6 = SEG_LB_V6.to_string();
    assert_eq!(rib.get(&p4(WEB4)), Some(&lb4), "{name}: {rib:?}");
    assert_eq!(rib.get(&p4(SOLO4)), Some(&lb4), "{name}: {rib:?}");
    assert_eq!(rib.get(&p6(WEB6)), Some(&lb6), "{name}: {rib:?}");
    let b = lab.bgp();
    assert_eq!(b.peers.len(), 1, "{b:?}");
    assert_eq!(b.peers[0].state, "Established", "{b:?}");
    assert_eq!(b.peers[0].prefixes_sent, 3, "{b:?}");

    // 2. The only backend of solo4 stops: the health check marks it down
    // (fall 2 x 200 ms, 100 ms timeout) and the route is withdrawn.
    let stopped = Instant::now();
    lab.servers[2] = None;
    wait_rib(
        peer,
        lab,
        "solo4 withdrawn after its backend stopped",
        Duration::from_secs(10),
        |r| !r.contains_key(&p4(SOLO4)) && r.len() == 2,
    );
    let withdraw = stopped.elapsed();
    eprintln!(
        "{name}: solo4 withdrawn {withdraw:?} after its only backend stopped \
         (probe bound about 500 ms; RIB polled every 50 ms plus the CLI's time)"
    );
    let started = Instant::now();
    lab.servers[2] = Some(start_server(&lab.seg, 3));
    wait_rib(
        peer,
        lab,
        "solo4 re-announced after its backend came back",
        Duration::from_secs(10),
        |r| r.contains_key(&p4(SOLO4)),
    );
    eprintln!(
        "{name}: solo4 back {:?} after its backend restarted",
        started.elapsed()
    );

    // 3. Removing web6 from the YAML withdraws its /128, the session stays.
    let t = Instant::now();
    lab.reload(&bgp_config(PASSWORD, false));
    wait_rib(
        peer,
        lab,
        "web6 withdrawn after its removal from the YAML",
        Duration::from_secs(10),
        |r| !r.contains_key(&p6(WEB6)) && r.contains_key(&p4(WEB4)) && r.len() == 2,
    );
    eprintln!(
        "{name}: web6 withdrawn {:?} after the YAML without it was written",
        t.elapsed()
    );
    assert!(
        peer.established().is_ok(),
        "{name}: a VIP change does not restart the session"
    );

    // 4. SIGTERM: the session closes and the routes go; a new start
    // re-establishes and re-advertises.
    assert!(lab.stop(), "rivorad exits cleanly");
    wait_for(
        &format!("{name} to see the session close"),
        Duration::from_secs(10),
        || match (peer.established(), peer.routes()) {
            (Err(_), Ok(r)) if r.is_empty() => Ok(()),
            (s, r) => Err(format!("{s:?} {r:?}")),
        },
    );
    let t = Instant::now();
    lab.start(&[]);
    wait_rib(
        peer,
        lab,
        "the routes after a restart",
        Duration::from_secs(40),
        |r| r.len() == 2 && r.get(&p4(WEB4)) == Some(&lb4) && r.get(&p4(SOLO4)) == Some(&lb4),
    );
    eprintln!(
        "{name}: re-advertised {:?} counted from launching rivorad again (its start-up included)",
        t.elapsed()
    );
    wait_for(
        &format!("{name} Established after the restart"),
        Duration::from_secs(5),
        || peer.established(),
    );

    // 5. A wrong TCP-MD5 password (by a reload) keeps the session down;
    // the right one brings the routes back.
    lab.reload(&bgp_config("not-the-password", true));
    wait_for(
        &format!("{name} to lose the session"),
        Duration::from_secs(15),
        || match (peer.established(), peer.routes()) {
            (Err(_), Ok(r)) if r.is_empty() => Ok(()),
            (s, r) => Err(format!("{s:?} {r:?}")),
        },
    );
    let p = wait_for("the MD5 hint in the API", Duration::from_secs(20), || {
        let b = lab.bgp();
        match b.peers.first() {
            Some(p) if p.last_error.as_deref().is_some_and(|e| e.contains("MD5")) => Ok(p.clone()),
            other => Err(format!("{other:?}")),
        }
    });
    eprintln!(
        "{name}, wrong password: rivorad state {}, last error: {}",
        p.state,
        p.last_error.as_deref().unwrap_or("")
    );
    assert!(p.state == "Connect" || p.state == "Active", "{p:?}");
    assert_eq!(p.prefixes_sent, 0, "{p:?}");
    assert!(peer.established().is_err(), "{name}: session up");
    assert!(
        peer.routes().is_ok_and(|r| r.is_empty()),
        "{name}: routes without a session"
    );
    lab.reload(&bgp_config(PASSWORD, true));
    wait_rib(
        peer,
        lab,
        "the routes with the right password again",
        Duration::from_secs(40),
        |r| r.len() == 3,
    );
    assert!(lab.stop(), "rivorad exits cleanly");
}

#[test]
fn gobgp_learns_and_loses_vip_routes_from_rivorad() {
    let mut lab = Lab::new("gob", "GoBGP", "/tmp/rvpeer");
    // Dropped before the lab (its namespaces), also on failure.
    let peer = GoBgp::start(&lab.seg.router, &lab.work);
    announce_withdraw_reload_restart_md5(&mut lab, &peer);
}

#[test]
fn frr_learns_and_loses_vip_routes_from_rivorad() {
    let mut lab = Lab::new("frr", "FRR", "/tmp/rvpeer");
    // Dropped before the lab (its namespaces), also on failure.
    let peer = Frr::start(&lab.seg.router, &lab.work);
    announce_withdraw_reload_restart_md5(&mut lab, &peer);
}
