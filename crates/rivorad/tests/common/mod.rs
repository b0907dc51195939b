//! Harness of rivorad's end-to-end tests: the namespace lab from rivora-lab
//! (client, lb, three backends), identity servers on every backend, and the
//! real rivorad binary started in the lb namespace with its own pin
//! directory, API socket and config file, so tests run in parallel.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rivora_lab::topology::{backend_v4, backend_v6};
use rivora_lab::{IdentityServer, Rivorad, RoundReport, Topology};

pub const VIP4: &str = "10.200.100.1";
pub const VIP6: &str = "fd00:200:100::1";
pub const BACKEND_PORT: u16 = 8080;

/// A backend line of the YAML: (backend index 1..=3, weight).
pub fn backends_yaml(v6: bool, list: &[(usize, u32)]) -> String {
    list.iter()
        .map(|(i, w)| {
            let addr = if v6 {
                backend_v6(*i).to_string()
            } else {
                backend_v4(*i).to_string()
            };
            format!("      - {{ address: \"{addr}\", port: {BACKEND_PORT}, weight: {w} }}\n")
        })
        .collect()
}

/// One VIP of the YAML.
pub fn vip_yaml(name: &str, addr: &str, port: u16, proto: &str, backends: &str) -> String {
    format!(
        "  - name: {name}\n    address: \"{addr}\"\n    port: {port}\n    protocol: {proto}\n    mode: nat\n    backends:\n{backends}"
    )
}

/// The command line of a rivorad on the lb's `eth0` with the given file,
/// pin directory and API socket, for [`Lab::run_rivorad`].
pub fn daemon_args<'a>(config: &'a str, pin_dir: &'a str, socket: &'a str) -> [&'a str; 8] {
    [
        "--config",
        config,
        "--interface",
        "eth0",
        "--pin-dir",
        pin_dir,
        "--api-socket",
        socket,
    ]
}

/// Seconds since the epoch, as rivorad's reload times are stamped.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub struct Lab {
    pub topo: Topology,
    servers: Vec<Option<IdentityServer>>,
    pub work: PathBuf,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub pin_dir: PathBuf,
    pub rivorad: Option<Rivorad>,
    pub rt: tokio::runtime::Runtime,
}

impl Lab {
    /// Builds the topology and starts identity servers (TCP and UDP, v4 and
    /// v6, port 8080) named b1..b3 on the backends.
    pub fn new(tag: &str) -> Lab {
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "end-to-end tests create namespaces and must run as root"
        );
        rivora_lab::ensure_bpffs().expect("bpffs");
        static N: AtomicU32 = AtomicU32::new(0);
        let unique = format!(
            "{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let topo = Topology::build(tag).expect("topology");
        let servers = (1..=topo.backends.len())
            .map(|i| Some(start_server(&topo, i)))
            .collect();
        let work = std::env::temp_dir().join(format!("rivora-e2e-{unique}"));
        std::fs::create_dir_all(&work).unwrap();
        Lab {
            topo,
            servers,
            config: work.join("rivorad.yaml"),
            socket: work.join("api.sock"),
            pin_dir: PathBuf::from(format!("/sys/fs/bpf/rivora-e2e-{unique}")),
            work,
            rivorad: None,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    /// Stops backend `i`'s servers (1-based): its port refuses connections.
    pub fn stop_server(&mut self, i: usize) {
        self.servers[i - 1] = None;
    }

    /// Starts backend `i`'s servers again.
    pub fn start_server(&mut self, i: usize) {
        self.servers[i - 1] = Some(start_server(&self.topo, i));
    }

    /// GET `path` from `addr` inside the lb namespace; (status, content type, body).
    pub fn http_get_in_lb(&self, addr: SocketAddr, path: &str) -> (u16, String, String) {
        let r = rivora_lab::http::http_get(&self.topo.lb, addr, path)
            .unwrap_or_else(|e| panic!("GET {path} from {addr}: {e}"));
        let ctype = r.header("content-type").to_ascii_lowercase();
        (r.status, ctype, r.body)
    }

    /// Writes the config file (atomically, as an editor or tool would).
    pub fn write_config(&self, vips: &[String]) {
        let tmp = self.config.with_extension("tmp");
        let text = if vips.is_empty() {
            "vips: []\n".to_string()
        } else {
            format!("vips:\n{}", vips.concat())
        };
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.config).unwrap();
    }

    /// Writes raw text as the config file.
    pub fn write_raw_config(&self, text: &str) {
        let tmp = self.config.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.config).unwrap();
    }

    /// Starts rivorad on the lb's client-facing interface and waits for it.
    pub fn start(&mut self, extra: &[&str]) {
        self.spawn(extra);
        self.rivorad
            .as_mut()
            .expect("just spawned")
            .wait_ready(&self.socket, Duration::from_secs(30))
            .expect("rivorad ready");
    }

    /// Starts rivorad as [`Lab::start`] does, without waiting for its API.
    pub fn spawn(&mut self, extra: &[&str]) {
        let bin = Path::new(env!("CARGO_BIN_EXE_rivorad"));
        let mut args = vec!["--config-poll-ms", "200"];
        args.extend_from_slice(extra);
        let d = Rivorad::start(
            &self.topo.lb,
            &self.topo.lb_if,
            bin,
            &self.config,
            &self.pin_dir,
            &self.socket,
            &self.work,
            &args,
        )
        .expect("start rivorad");
        self.rivorad = Some(d);
    }

    /// Sends `signal` to rivorad and waits for it, leaving its pins alone.
    pub fn kill(&mut self, signal: i32) -> std::process::ExitStatus {
        let mut d = self.rivorad.take().expect("rivorad running");
        d.signal_and_wait(signal).expect("signal rivorad")
    }

    /// Runs the rivorad binary to completion with `args` (in the lb
    /// namespace), returning its exit status and stderr.
    pub fn run_rivorad(&self, args: &[&str]) -> (bool, String) {
        let out = self
            .topo
            .lb
            .within(|| {
                std::process::Command::new(env!("CARGO_BIN_EXE_rivorad"))
                    .args(args)
                    .output()
            })
            .expect("enter lb namespace")
            .expect("run rivorad");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Program IDs attached to the lb interface: (XDP, TCX egress).
    pub fn attached_programs(&self) -> (Option<u32>, Vec<u32>) {
        let link = self
            .topo
            .lb
            .run(&["ip", "-d", "-j", "link", "show", "dev", "eth0"])
            .expect("ip link");
        let v: serde_json::Value = serde_json::from_str(&link).expect("ip -j output");
        let xdp = v[0]["xdp"]["prog"]["id"].as_u64().map(|i| i as u32);
        let tcx = self
            .topo
            .lb
            .within(|| {
                aya::programs::SchedClassifier::query_tcx(
                    "eth0",
                    aya::programs::TcAttachType::Egress,
                )
                .map(|(_, progs)| progs.iter().map(|p| p.id()).collect::<Vec<_>>())
                .unwrap_or_default()
            })
            .expect("enter lb namespace");
        (xdp, tcx)
    }

    /// Waits (up to 5 s) until neither XDP nor TCX has a program on the lb
    /// interface. After `--uninstall` the links go when their pins' inodes
    /// are freed, an RCU grace period after the command returned, so the
    /// check must wait rather than look once.
    pub fn wait_detached(&self) {
        let every = Duration::from_millis(10);
        rivora_lab::poll_until(
            "XDP and TCX detached",
            Duration::from_secs(5),
            every,
            || match self.attached_programs() {
                (None, tcx) if tcx.is_empty() => Ok(()),
                other => Err(format!("attached: {other:?}")),
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Stops rivorad with SIGTERM and returns whether it exited cleanly.
    pub fn stop(&mut self) -> bool {
        let mut d = self.rivorad.take().expect("rivorad running");
        d.stop().expect("stop rivorad").success()
    }

    pub fn log(&self) -> String {
        self.rivorad.as_ref().map(|d| d.log()).unwrap_or_default()
    }

    pub fn client(&self) -> rivora_api::Client {
        rivora_api::Client::new(&self.socket)
    }

    pub fn status(&self) -> rivora_api::Status {
        self.rt
            .block_on(self.client().status())
            .expect("API status")
    }

    pub fn stats(&self) -> rivora_api::Stats {
        self.rt.block_on(self.client().stats()).expect("API stats")
    }

    pub fn vips(&self) -> Vec<rivora_api::VipInfo> {
        self.rt.block_on(self.client().vips()).expect("API vips")
    }

    pub fn backends(&self) -> Vec<rivora_api::BackendInfo> {
        self.rt
            .block_on(self.client().backends())
            .expect("API backends")
    }

    /// The API's view of the backend at `addr:8080`.
    pub fn backend(&self, addr: &str) -> rivora_api::BackendInfo {
        self.backends()
            .into_iter()
            .find(|b| b.address == addr && b.port == BACKEND_PORT)
            .expect("backend listed")
    }

    pub fn drain(&self, selector: &str, on: bool) -> Vec<rivora_api::BackendInfo> {
        self.try_drain(selector, on).expect("API drain")
    }

    /// [`Lab::drain`] that returns the daemon's refusal instead of failing.
    pub fn try_drain(
        &self,
        selector: &str,
        on: bool,
    ) -> Result<Vec<rivora_api::BackendInfo>, rivora_api::ClientError> {
        let c = self.client();
        self.rt.block_on(async {
            if on {
                c.drain(selector).await
            } else {
                c.undrain(selector).await
            }
        })
    }

    /// Polls until `pred` holds for the backend at `addr`, returning how long
    /// it took; panics after `limit`.
    pub fn wait_backend(
        &self,
        addr: &str,
        limit: Duration,
        what: &str,
        pred: impl Fn(&rivora_api::BackendInfo) -> bool,
    ) -> Duration {
        let start = Instant::now();
        loop {
            let b = self.backend(addr);
            if pred(&b) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < limit,
                "{addr} not {what} within {limit:?}: {b:?}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until the daemon reports a config generation above `after`
    /// (a successful reload) or a failed reload newer than `since_unix`
    /// (`u64::MAX`: a successful reload only; reload times have a
    /// resolution of one second, so an earlier failure in the same second
    /// would otherwise count).
    pub fn wait_reload(&self, after_generation: u64, since_unix: u64) -> rivora_api::Status {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let s = self.status();
            if s.config_generation > after_generation
                || (!s.last_reload.ok && s.last_reload.at_unix >= since_unix)
            {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "no reload seen within 15 s (after generation {after_generation}); \
                 last status: {s:?}\nlog:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (up to 15 s) until the last reload is reported as a success,
    /// e.g. after a rejected file was replaced by a good one.
    pub fn wait_reload_ok(&self) -> rivora_api::Status {
        let every = Duration::from_millis(50);
        rivora_lab::poll_until(
            "a successful reload",
            Duration::from_secs(15),
            every,
            || {
                let s = self.status();
                if s.last_reload.ok {
                    Ok(s)
                } else {
                    Err(format!("{:?}", s.last_reload))
                }
            },
        )
        .unwrap_or_else(|e| panic!("{e}; log:\n{}", self.log()))
    }

    pub fn tcp(&self, vip: &str, port: u16, first_src_port: u16, count: usize) -> RoundReport {
        let target = SocketAddr::new(vip.parse().unwrap(), port);
        rivora_lab::tcp_round_from_ports(
            &self.topo.client,
            target,
            first_src_port,
            count,
            8,
            Duration::from_secs(3),
        )
    }

    pub fn udp(&self, vip: &str, port: u16, first_src_port: u16, count: usize) -> RoundReport {
        let target = SocketAddr::new(vip.parse().unwrap(), port);
        rivora_lab::udp_round_from_ports(
            &self.topo.client,
            target,
            first_src_port,
            count,
            8,
            Duration::from_secs(2),
        )
    }
}

fn start_server(topo: &Topology, i: usize) -> IdentityServer {
    let addrs = [
        SocketAddr::new(backend_v4(i).into(), BACKEND_PORT),
        SocketAddr::new(backend_v6(i).into(), BACKEND_PORT),
    ];
    IdentityServer::start(&topo.backends[i - 1], &format!("b{i}"), &addrs).expect("identity server")
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut d) = self.rivorad.take() {
            let _ = d.stop();
        }
        self.servers.clear();
        let _ = std::fs::remove_dir_all(&self.work);
        let _ = rivora_dataplane_pins_gone(&self.pin_dir);
    }
}

fn rivora_dataplane_pins_gone(dir: &Path) -> std::io::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)
    } else {
        Ok(())
    }
}

/// Asserts that every exchange succeeded, the client always saw the VIP as
/// its peer and its own address arrived unchanged, and that each backend's
/// share is within `tolerance` (absolute) of `expected`.
pub fn assert_round(report: &RoundReport, expected: &[(&str, f64)], tolerance: f64) {
    assert!(report.all_ok(), "exchanges failed:\n{report}");
    assert_eq!(report.ok, report.attempted, "{report}");
    assert_eq!(
        report.wrong_peer, 0,
        "client saw a peer other than the VIP:\n{report}"
    );
    assert_eq!(
        report.source_rewritten, 0,
        "backend saw a rewritten client address:\n{report}"
    );
    let shares = report.shares();
    for (name, want) in expected {
        let got = shares.get(*name).copied().unwrap_or(0.0);
        assert!(
            (got - want).abs() <= tolerance,
            "backend {name}: share {:.1}% expected {:.1}% +/- {:.0} points\n{report}",
            got * 100.0,
            want * 100.0,
            tolerance * 100.0
        );
    }
    for name in shares.keys() {
        assert!(
            expected.iter().any(|(n, _)| n == name),
            "unexpected backend {name} answered:\n{report}"
        );
    }
}
