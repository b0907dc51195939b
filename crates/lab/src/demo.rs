//! The README demo: lab topology + `rivorad` + traffic to four VIPs.
//!
//! Why a library function: the binary's `demo` subcommand prints it for a
//! human, and end-to-end tests can call [`run`] and assert on the
//! [`DemoReport`] once `rivorad` exists.
//!
//! `rivorad` contract used here: `rivorad --config FILE --interface eth0
//! --pin-dir /sys/fs/bpf/<unique> --api-socket <dir>/rivorad.sock`, started
//! in the lb namespace; ready once the API socket file exists.

use std::fmt;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use crate::rivorad::Rivorad;
use crate::topology::{self, Topology};
use crate::traffic::{IdentityServer, RoundReport, tcp_round, udp_round};
use crate::{BPFFS, interrupted};

/// Port every backend identity server listens on (TCP and UDP).
pub const BACKEND_PORT: u16 = 8080;
/// Backend weights b1, b2, b3 in the demo config.
pub const WEIGHTS: [u32; 3] = [1, 1, 2];

/// Knobs of the demo; [`DemoOptions::new`] gives the README defaults.
///
/// Why a struct: tests will want fewer flows and shorter timeouts than a
/// human running the README.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Path to the `rivorad` binary.
    pub rivorad: PathBuf,
    /// Keep the lab (and rivorad, config, logs) up after the traffic until
    /// Enter or Ctrl-C, for poking around by hand.
    pub keep: bool,
    /// TCP connections per TCP VIP.
    pub tcp_count: usize,
    /// UDP exchanges per UDP VIP.
    pub udp_count: usize,
    /// Concurrent flows.
    pub parallel: usize,
    /// Per-operation timeout of the traffic rounds.
    pub timeout: Duration,
    /// How long rivorad may take to create its API socket.
    pub ready_timeout: Duration,
    /// Print progress to stderr.
    pub progress: bool,
    /// Path to `rivoractl`: when set, the demo shows what the daemon itself
    /// reports (`rivoractl vips` and `rivoractl stats`) after the traffic.
    pub rivoractl: Option<PathBuf>,
}

impl DemoOptions {
    /// README defaults: 600 TCP connections and 600 UDP exchanges per VIP.
    pub fn new(rivorad: impl Into<PathBuf>) -> DemoOptions {
        DemoOptions {
            rivorad: rivorad.into(),
            keep: false,
            tcp_count: 600,
            udp_count: 600,
            parallel: 16,
            timeout: Duration::from_secs(2),
            ready_timeout: Duration::from_secs(20),
            progress: true,
            rivoractl: None,
        }
    }
}

/// Transport protocol of a VIP.
///
/// Why not a string: the demo picks tcp_round or udp_round from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// TCP service.
    Tcp,
    /// UDP service.
    Udp,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        })
    }
}

/// One backend of a demo VIP.
///
/// Why `name`: identity servers answer with it, which maps observed counts
/// back to configured weights.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoBackend {
    /// Identity name (`b1`..).
    pub name: String,
    /// Backend socket address.
    pub addr: SocketAddr,
    /// Configured weight.
    pub weight: u32,
}

/// One VIP of the demo config.
///
/// Why: the same list generates the YAML and drives the traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoVip {
    /// VIP name in the config.
    pub name: String,
    /// VIP socket address.
    pub addr: SocketAddr,
    /// Protocol.
    pub protocol: Protocol,
    /// Forwarding mode (`nat`).
    pub mode: String,
    /// Backends with weights.
    pub backends: Vec<DemoBackend>,
}

impl DemoVip {
    /// Expected share of backend `b` given the weights.
    ///
    /// Why: printed next to the observed share.
    pub fn expected_share(&self, b: &DemoBackend) -> f64 {
        let total: u32 = self.backends.iter().map(|b| b.weight).sum();
        if total == 0 {
            0.0
        } else {
            f64::from(b.weight) / f64::from(total)
        }
    }
}

/// The four demo VIPs: web4/dns4 on 10.200.100.1, web6/dns6 on
/// fd00:200:100::1, TCP 80 and UDP 53, backends b1..b3 on 8080 with weights
/// 1, 1, 2.
///
/// Why public: tests and docs use the same definitions as the demo.
pub fn demo_vips() -> Vec<DemoVip> {
    let v4 = IpAddr::V4(topology::VIP_V4);
    let v6 = IpAddr::V6(topology::VIP_V6);
    let backends = |six: bool| -> Vec<DemoBackend> {
        WEIGHTS
            .iter()
            .enumerate()
            .map(|(idx, w)| {
                let i = idx + 1;
                let ip = if six {
                    IpAddr::V6(topology::backend_v6(i))
                } else {
                    IpAddr::V4(topology::backend_v4(i))
                };
                DemoBackend {
                    name: Topology::backend_name(i),
                    addr: SocketAddr::new(ip, BACKEND_PORT),
                    weight: *w,
                }
            })
            .collect()
    };
    let vip = |name: &str, ip: IpAddr, port: u16, protocol: Protocol| DemoVip {
        name: name.to_string(),
        addr: SocketAddr::new(ip, port),
        protocol,
        mode: "nat".to_string(),
        backends: backends(ip.is_ipv6()),
    };
    vec![
        vip("web4", v4, 80, Protocol::Tcp),
        vip("dns4", v4, 53, Protocol::Udp),
        vip("web6", v6, 80, Protocol::Tcp),
        vip("dns6", v6, 53, Protocol::Udp),
    ]
}

/// Renders the rivorad YAML config for `vips`.
///
/// Why hand-written: the format is tiny and this avoids a YAML dependency.
/// Addresses are quoted so IPv6 (`::`) can never be misread by a parser.
pub fn config_yaml(vips: &[DemoVip]) -> String {
    let mut s = String::from("# Generated by `rivora-lab demo`.\nvips:\n");
    for v in vips {
        s.push_str(&format!("  - name: {}\n", v.name));
        s.push_str(&format!("    address: \"{}\"\n", v.addr.ip()));
        s.push_str(&format!("    port: {}\n", v.addr.port()));
        s.push_str(&format!("    protocol: {}\n", v.protocol));
        s.push_str(&format!("    mode: {}\n", v.mode));
        s.push_str("    backends:\n");
        for b in &v.backends {
            s.push_str(&format!(
                "      - {{ address: \"{}\", port: {}, weight: {} }}\n",
                b.addr.ip(),
                b.addr.port(),
                b.weight
            ));
        }
    }
    s
}

/// Traffic outcome of one VIP.
///
/// Why keep the VIP next to the report: the table needs weights and names.
#[derive(Debug, Clone)]
pub struct VipOutcome {
    /// The VIP as configured.
    pub vip: DemoVip,
    /// What the traffic round saw.
    pub report: RoundReport,
}

/// Everything the demo measured.
///
/// Why: `Display` is the README output; fields are for tests.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// One entry per VIP, in config order.
    pub vips: Vec<VipOutcome>,
    /// What `rivoractl vips` and `rivoractl stats` printed, if asked for.
    pub rivoractl_output: Option<String>,
}

impl DemoReport {
    /// True when every flow to every VIP succeeded.
    ///
    /// Why: the binary's exit code and the simplest test assertion.
    pub fn all_ok(&self) -> bool {
        self.vips.iter().all(|v| v.report.all_ok())
    }
}

/// Runs `rivoractl vips` and `rivoractl stats` against the demo's daemon.
fn rivoractl_views(bin: &Path, socket: &Path) -> Result<String> {
    let mut out = String::new();
    for cmd in ["vips", "stats"] {
        let o = std::process::Command::new(bin)
            .arg("--socket")
            .arg(socket)
            .arg(cmd)
            .output()
            .with_context(|| format!("running {}", bin.display()))?;
        if !o.status.success() {
            bail!(
                "rivoractl {cmd} failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        out.push_str(&format!(
            "$ rivoractl {cmd}\n{}\n",
            String::from_utf8_lossy(&o.stdout)
        ));
    }
    Ok(out)
}

impl fmt::Display for DemoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "What the client saw (one line per VIP, then the spread over backends):"
        )?;
        for o in &self.vips {
            let r = &o.report;
            writeln!(
                f,
                "{} ({} {}, {}): {}/{} ok, {} failed, {} wrong peer, {} seen with rewritten client address",
                o.vip.name,
                o.vip.protocol,
                o.vip.addr,
                o.vip.mode,
                r.ok,
                r.attempted,
                r.failed_total,
                r.wrong_peer,
                r.source_rewritten
            )?;
            writeln!(
                f,
                "  {:<8} {:<24} {:>6} {:>9} {:>9} {:>7}",
                "backend", "address", "weight", "expected", "observed", "share"
            )?;
            let shares = r.shares();
            for b in &o.vip.backends {
                let n = r.per_backend.get(&b.name).copied().unwrap_or(0);
                let share = shares.get(&b.name).copied().unwrap_or(0.0);
                writeln!(
                    f,
                    "  {:<8} {:<24} {:>6} {:>8.1}% {:>9} {:>6.1}%",
                    b.name,
                    b.addr.to_string(),
                    b.weight,
                    o.vip.expected_share(b) * 100.0,
                    n,
                    share * 100.0
                )?;
            }
            for (name, n) in &r.per_backend {
                if !o.vip.backends.iter().any(|b| &b.name == name) {
                    writeln!(
                        f,
                        "  {name:<8} {:<24} {:>6} {:>9} {n:>9}",
                        "(unexpected)", "-", "-"
                    )?;
                }
            }
            for e in &r.failed {
                writeln!(f, "  ! {e}")?;
            }
            writeln!(f)?;
        }
        if let Some(views) = &self.rivoractl_output {
            writeln!(
                f,
                "What rivorad itself reports (its local API, through rivoractl):\n{views}"
            )?;
        }
        Ok(())
    }
}

/// Runs the whole demo and tears everything down again.
///
/// Why one call: build the topology, start identity servers (b1..b3, v4+v6,
/// port 8080), write the config, start rivorad in the lb namespace, wait for
/// its API socket, send the flows, optionally wait (`keep`), then stop
/// rivorad with SIGTERM (SIGKILL after 10 s), remove its pin dir if left,
/// delete the namespaces and the work dir. Cleanup also happens on error
/// and on panic (guards), and after Ctrl-C if
/// [`crate::install_interrupt_handler`] was called.
pub fn run(opts: &DemoOptions) -> Result<DemoReport> {
    crate::require_root()?;
    crate::ensure_bpffs()?;
    let say = |m: &str| {
        if opts.progress {
            eprintln!("rivora-lab demo: {m}");
        }
    };
    let rivorad_bin = opts
        .rivorad
        .canonicalize()
        .with_context(|| format!("rivorad binary {}", opts.rivorad.display()))?;

    let unique = unique_suffix();
    let work = WorkDir::create(
        std::env::temp_dir().join(format!("rivora-demo-{unique}")),
        opts.keep,
    )?;
    let config_path = work.path.join("rivorad.yaml");
    let socket_path = work.path.join("rivorad.sock");
    if socket_path.as_os_str().len() > 100 {
        bail!(
            "API socket path {} is too long for a unix socket; set TMPDIR to a shorter directory",
            socket_path.display()
        );
    }
    let pin_dir = Path::new(BPFFS).join(format!("rivora-demo-{unique}"));
    let vips = demo_vips();
    std::fs::write(&config_path, config_yaml(&vips))
        .with_context(|| format!("writing {}", config_path.display()))?;

    say("building topology (client, lb, b1..b3)");
    let topo = Topology::build("demo")?;
    let mut servers = Vec::new();
    for (idx, ns) in topo.backends.iter().enumerate() {
        let i = idx + 1;
        let addrs = [
            SocketAddr::new(IpAddr::V4(topology::backend_v4(i)), BACKEND_PORT),
            SocketAddr::new(IpAddr::V6(topology::backend_v6(i)), BACKEND_PORT),
        ];
        servers.push(IdentityServer::start(
            ns,
            &Topology::backend_name(i),
            &addrs,
        )?);
    }
    check_interrupt()?;

    say(&format!(
        "starting {} in netns {}",
        rivorad_bin.display(),
        topo.lb.name()
    ));
    let mut rivorad = Rivorad::start(
        &topo.lb,
        &topo.lb_if,
        &rivorad_bin,
        &config_path,
        &pin_dir,
        &socket_path,
        &work.path,
        &[],
    )?;
    rivorad.wait_ready(&socket_path, opts.ready_timeout)?;
    say("rivorad is ready");

    let mut outcomes = Vec::new();
    for vip in vips {
        check_interrupt()?;
        let report = match vip.protocol {
            Protocol::Tcp => {
                say(&format!(
                    "{}: {} TCP connections to {}",
                    vip.name, opts.tcp_count, vip.addr
                ));
                tcp_round(
                    &topo.client,
                    vip.addr,
                    opts.tcp_count,
                    opts.parallel,
                    opts.timeout,
                )
            }
            Protocol::Udp => {
                say(&format!(
                    "{}: {} UDP exchanges to {}",
                    vip.name, opts.udp_count, vip.addr
                ));
                udp_round(
                    &topo.client,
                    vip.addr,
                    opts.udp_count,
                    opts.parallel,
                    opts.timeout,
                )
            }
        };
        outcomes.push(VipOutcome { vip, report });
    }
    let rivoractl_output = match &opts.rivoractl {
        Some(bin) => Some(rivoractl_views(bin, &socket_path)?),
        None => None,
    };
    let report = DemoReport {
        vips: outcomes,
        rivoractl_output,
    };

    if opts.keep {
        println!("{report}");
        println!("Lab is up. Namespaces (enter with `nsenter --net=/run/netns/NAME`):");
        println!("  client:   {}", topo.client.name());
        println!(
            "  lb:       {}  (rivorad pid {})",
            topo.lb.name(),
            rivorad.pid()
        );
        for (i, b) in topo.backends.iter().enumerate() {
            println!("  b{}:       {}", i + 1, b.name());
        }
        println!("  config:   {}", config_path.display());
        println!("  logs:     {}", work.path.display());
        println!("  api:      {}", socket_path.display());
        println!("Press Enter (or Ctrl-C) to tear down.");
        crate::wait_for_enter_or_interrupt();
    }

    say("stopping rivorad and tearing down");
    let status = rivorad.stop()?;
    if !status.success() {
        say(&format!("rivorad exited with {status}"));
    }
    drop(servers);
    drop(topo);
    Ok(report)
}

fn check_interrupt() -> Result<()> {
    if interrupted() {
        bail!("interrupted");
    }
    Ok(())
}

fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{nanos:08x}", std::process::id())
}

/// Scratch directory for config, socket and logs; removed unless kept.
struct WorkDir {
    path: PathBuf,
    keep: bool,
}

impl WorkDir {
    fn create(path: PathBuf, keep: bool) -> Result<WorkDir> {
        std::fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(WorkDir { path, keep })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("rivora-lab demo: kept {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_config_matches_contract() {
        let vips = demo_vips();
        assert_eq!(vips.len(), 4);
        let y = config_yaml(&vips);
        assert!(y.starts_with("# Generated"));
        assert!(y.contains(
            "  - name: web4\n    address: \"10.200.100.1\"\n    port: 80\n    protocol: tcp\n    mode: nat\n"
        ));
        assert!(y.contains(
            "  - name: dns6\n    address: \"fd00:200:100::1\"\n    port: 53\n    protocol: udp\n"
        ));
        assert!(y.contains("      - { address: \"10.200.1.13\", port: 8080, weight: 2 }\n"));
        assert!(y.contains("      - { address: \"fd00:200:1::11\", port: 8080, weight: 1 }\n"));
        let web4 = &vips[0];
        assert_eq!(web4.expected_share(&web4.backends[2]), 0.5);
        assert_eq!(web4.expected_share(&web4.backends[0]), 0.25);
    }

    #[test]
    fn report_table_lists_every_backend() {
        let vip = demo_vips().remove(0);
        let report = RoundReport {
            protocol: "tcp".into(),
            target: vip.addr,
            attempted: 4,
            ok: 4,
            failed: vec![],
            failed_total: 0,
            wrong_peer: 0,
            per_backend: [("b1".to_string(), 1), ("b3".to_string(), 3)].into(),
            source_rewritten: 0,
            seen_by_backend: Default::default(),
            retried: 0,
            elapsed: Duration::ZERO,
        };
        let text = DemoReport {
            vips: vec![VipOutcome { vip, report }],
            rivoractl_output: None,
        }
        .to_string();
        assert!(
            text.contains("web4 (tcp 10.200.100.1:80, nat): 4/4 ok"),
            "{text}"
        );
        assert!(text.contains("b2"), "{text}");
        assert!(text.contains("75.0%"), "{text}");
        assert!(text.contains("50.0%"), "{text}");
    }
}
