//! The segment lab shared by the BGP end-to-end tests (e2e_bgp.rs with
//! BIRD, e2e_bgp_peers.rs with GoBGP and FRR): rivora-lab's `Segment`,
//! identity servers on its backends, and the real rivorad on its balancer.
#![allow(dead_code)] // each test file uses its own part

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rivora_lab::segment::Segment;
use rivora_lab::topology::{backend_v4, backend_v6};
use rivora_lab::{IdentityServer, Netns, Rivorad, RoundReport};

pub const PORT: u16 = 8080;
pub const PASSWORD: &str = "rivora-e2e-md5";
pub const ROUTER_AS: u32 = 65000;
pub const OUR_AS: u32 = 65010;

/// Polls `f` every 50 ms until it returns Ok, or panics after `limit`
/// with `what` and the last error `f` returned.
pub fn wait_for<T>(what: &str, limit: Duration, f: impl FnMut() -> Result<T, String>) -> T {
    rivora_lab::poll_until(what, limit, Duration::from_millis(50), f)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The segment lab, identity servers b1..b3 on the backends, a work
/// directory, a pin directory and (when started) rivorad in the lb
/// namespace. Everything is removed on drop, also when a test fails.
pub struct Lab {
    // Field order is drop order: rivorad stops before the namespaces go.
    pub rivorad: Option<Rivorad>,
    pub servers: Vec<Option<IdentityServer>>,
    pub seg: Segment,
    pub work: PathBuf,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub pin_dir: PathBuf,
    pub rt: tokio::runtime::Runtime,
}

impl Lab {
    /// `peer` names the routing daemon the test runs (for the root check's
    /// message); `work_prefix` starts the work directory's path, kept short
    /// because BIRD's and FRR's control sockets live there and their paths
    /// must fit a sockaddr_un.
    pub fn new(tag: &str, peer: &str, work_prefix: &str) -> Lab {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "end-to-end tests create namespaces, run rivorad and {peer}: they must run as root"
        );
        rivora_lab::ensure_bpffs().expect("bpffs");
        static N: AtomicU32 = AtomicU32::new(0);
        let unique = format!(
            "{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let seg = Segment::build(tag, 3).expect("segment lab");
        let servers = (1..=3).map(|i| Some(start_server(&seg, i))).collect();
        let work = PathBuf::from(format!("{work_prefix}-{unique}"));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).unwrap();
        Lab {
            rivorad: None,
            servers,
            seg,
            config: work.join("rivorad.yaml"),
            socket: work.join("api.sock"),
            pin_dir: PathBuf::from(format!("/sys/fs/bpf/rivora-e2e-{unique}")),
            work,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    pub fn write_config(&self, text: &str) {
        let tmp = self.config.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.config).unwrap();
    }

    /// Starts rivorad (config polled every 100 ms) with `extra` arguments.
    pub fn start(&mut self, extra: &[&str]) {
        let bin = Path::new(env!("CARGO_BIN_EXE_rivorad"));
        let mut d = Rivorad::start(
            &self.seg.lb,
            &self.seg.lb_if,
            bin,
            &self.config,
            &self.pin_dir,
            &self.socket,
            &self.work,
            &[&["--config-poll-ms", "100"], extra].concat(),
        )
        .expect("start rivorad");
        d.wait_ready(&self.socket, Duration::from_secs(30))
            .expect("rivorad ready");
        self.rivorad = Some(d);
    }

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

    pub fn bgp(&self) -> rivora_api::BgpStatus {
        self.rt.block_on(self.client().bgp()).expect("API bgp")
    }

    pub fn speaker(&self) -> rivora_api::SpeakerStatus {
        self.rt
            .block_on(self.client().speaker())
            .expect("API speaker")
    }

    pub fn generation(&self) -> u64 {
        self.rt
            .block_on(self.client().status())
            .expect("API status")
            .config_generation
    }

    /// Waits (up to 20 s) until rivorad's API reports, as the first BGP
    /// peer's last error, the hint that a TCP-MD5 password is wrong, and
    /// returns that peer: what a wrong password looks like to an operator.
    pub fn wait_md5_hint(&self) -> rivora_api::BgpPeerInfo {
        wait_for("the MD5 hint in the API", Duration::from_secs(20), || {
            let b = self.bgp();
            match b.peers.first() {
                Some(p) if p.last_error.as_deref().is_some_and(|e| e.contains("MD5")) => {
                    Ok(p.clone())
                }
                other => Err(format!("{other:?}")),
            }
        })
    }

    /// Writes `text` and waits until rivorad applied it.
    pub fn reload(&self, text: &str) {
        let before = self.generation();
        self.write_config(text);
        wait_for("the reload", Duration::from_secs(10), || {
            if self.generation() > before {
                Ok(())
            } else {
                Err(self.log())
            }
        });
    }

    /// The Prometheus text from rivorad's metrics endpoint, when it was
    /// started with `--metrics-listen 127.0.0.1:9469` (the lb namespace's
    /// loopback: no clash between parallel tests).
    pub fn metrics(&self) -> String {
        use std::io::{Read, Write};
        self.seg
            .lb
            .within(|| {
                let mut s = std::net::TcpStream::connect("127.0.0.1:9469").expect("metrics");
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                write!(
                    s,
                    "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                )
                .unwrap();
                let mut out = String::new();
                s.read_to_string(&mut out).unwrap();
                out
            })
            .expect("enter lb namespace")
    }

    pub fn tcp(&self, from: &Netns, vip: &str, count: usize) -> RoundReport {
        let target = SocketAddr::new(vip.parse().unwrap(), 80);
        rivora_lab::tcp_round(from, target, count, 4, Duration::from_secs(3))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut d) = self.rivorad.take() {
            let _ = d.stop();
        }
        self.servers.clear();
        let _ = std::fs::remove_dir_all(&self.work);
        if self.pin_dir.exists() {
            let _ = std::fs::remove_dir_all(&self.pin_dir);
        }
    }
}

pub fn start_server(seg: &Segment, i: usize) -> IdentityServer {
    let addrs = [
        SocketAddr::new(backend_v4(i).into(), PORT),
        SocketAddr::new(backend_v6(i).into(), PORT),
    ];
    IdentityServer::start(&seg.backends[i - 1], &format!("b{i}"), &addrs).expect("identity server")
}

/// A VIP of rivorad's YAML on port 80 whose backends are `b{i}:8080` for
/// `backends`; `extra` (whole, indented lines) goes before `backends:`.
pub fn vip(name: &str, addr: &str, backends: &[usize], extra: &str) -> String {
    let v6 = addr.contains(':');
    let mut s =
        format!("  - name: {name}\n    address: \"{addr}\"\n    port: 80\n{extra}    backends:\n");
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
