//! Shared harness of the interop tests: the two-namespace lab, and the
//! speaker on its own runtime inside a namespace. The peer daemons
//! themselves (installing, starting, querying, stopping them) are
//! `rivora_lab::bgp_peers`, shared with rivorad's end-to-end BGP tests.
//!
//! Why a harness: each interop test is "peer daemon in namespace A, our
//! speaker in namespace B, assert on what the daemon learned"; only the
//! daemon's config and query commands differ.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rivora_bgp::{PeerStatus, Prefix, RouteAttrs, Speaker, SpeakerConfig};
use rivora_lab::{Netns, link, poll_until};

/// The peer daemon's side of the veth.
pub const PEER_V4: &str = "192.0.2.1";
/// The peer daemon's IPv6 address.
pub const PEER_V6: &str = "2001:db8::1";
/// Our speaker's side of the veth.
pub const US_V4: &str = "192.0.2.2";
/// Our speaker's IPv6 address.
pub const US_V6: &str = "2001:db8::2";
/// A second address on our side, used as a configured next hop.
pub const US_V4_ALT: &str = "192.0.2.3";
/// A second IPv6 address on our side, used as a configured next hop.
pub const US_V6_ALT: &str = "2001:db8::3";

/// Fails the test (never skips it) unless we are root.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the BGP interop tests need root (network namespaces, veths, routing daemons); \
         run them as root, as scripts/test does"
    );
}

/// A directory under /tmp removed on drop (config files, sockets, logs).
pub struct TempDir(PathBuf);

static DIRS: AtomicU32 = AtomicU32::new(0);

impl TempDir {
    /// Creates `/tmp/rvbgp-TAG-PID-N`; short, because Unix socket paths
    /// are limited to 107 bytes.
    pub fn new(tag: &str) -> TempDir {
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let p = PathBuf::from(format!("/tmp/rvbgp-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Two namespaces joined by a veth: `peer` (192.0.2.1, 2001:db8::1) and
/// `us` (192.0.2.2 and .3, 2001:db8::2 and ::3).
pub struct Lab {
    /// Where the peer daemon runs.
    pub peer: Netns,
    /// Where our speaker runs.
    pub us: Netns,
    /// Config files, sockets and logs.
    pub dir: TempDir,
}

impl Lab {
    /// Builds the lab; `tag` names namespaces and the temp directory.
    pub fn new(tag: &str) -> Lab {
        require_root();
        let peer = Netns::new(&format!("p{tag}")).expect("creating the peer namespace");
        let us = Netns::new(&format!("s{tag}")).expect("creating our namespace");
        link::veth(&peer, "eth0", &us, "eth0").unwrap();
        for (ns, addrs) in [
            (&peer, vec!["192.0.2.1/24", "2001:db8::1/64"]),
            (
                &us,
                vec![
                    "192.0.2.2/24",
                    "192.0.2.3/24",
                    "2001:db8::2/64",
                    "2001:db8::3/64",
                ],
            ),
        ] {
            for a in addrs {
                link::addr(ns, "eth0", a).unwrap();
            }
            link::up(ns, "eth0").unwrap();
        }
        for ns in [&peer, &us] {
            link::wait_ipv6_settled(ns, Duration::from_secs(5)).unwrap();
        }
        Lab {
            peer,
            us,
            dir: TempDir::new(tag),
        }
    }
}

/// Polls `f` every 100 ms until it returns Ok, or panics after `limit`
/// with `what` and the last error `f` returned.
pub fn wait_for<T>(what: &str, limit: Duration, f: impl FnMut() -> Result<T, String>) -> T {
    poll_until(what, limit, Duration::from_millis(100), f).unwrap_or_else(|e| panic!("{e}"))
}

/// Log lines written by the speaker's tracing, shared with the test.
#[derive(Clone, Default)]
pub struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        // Also to stderr, so a failing test shows what the speaker said.
        eprint!("{}", String::from_utf8_lossy(b));
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuffer {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

enum Cmd {
    Routes(BTreeMap<Prefix, RouteAttrs>),
    Peers(std::sync::mpsc::Sender<Vec<PeerStatus>>),
    Shutdown(std::sync::mpsc::Sender<()>),
}

/// Our speaker, running on its own current-thread tokio runtime on a thread
/// that entered the `us` namespace; driven from the test thread.
pub struct SpeakerHost {
    tx: tokio::sync::mpsc::UnboundedSender<Cmd>,
    thread: Option<JoinHandle<()>>,
    /// What the speaker logged.
    pub logs: LogBuffer,
}

impl SpeakerHost {
    /// Starts `cfg` inside `ns`.
    pub fn start(ns: &Netns, cfg: SpeakerConfig) -> SpeakerHost {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Cmd>();
        let logs = LogBuffer::default();
        let l = logs.clone();
        let thread = ns.enter_thread(move || {
            let sub = tracing_subscriber::fmt()
                .with_writer(move || l.clone())
                .with_ansi(false)
                .with_max_level(tracing::Level::INFO)
                .finish();
            let _guard = tracing::subscriber::set_default(sub);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let speaker = Speaker::start(cfg);
                while let Some(c) = rx.recv().await {
                    match c {
                        Cmd::Routes(r) => {
                            speaker.set_routes(r);
                        }
                        Cmd::Peers(reply) => {
                            let _ = reply.send(speaker.peers());
                        }
                        Cmd::Shutdown(reply) => {
                            speaker.shutdown().await;
                            let _ = reply.send(());
                            return;
                        }
                    }
                }
                // Sender dropped without shutdown: drop (abort) the speaker.
            });
        });
        SpeakerHost {
            tx,
            thread: Some(thread),
            logs,
        }
    }

    /// `Speaker::set_routes`.
    pub fn set_routes(&self, r: BTreeMap<Prefix, RouteAttrs>) {
        self.tx.send(Cmd::Routes(r)).expect("speaker thread alive");
    }

    /// `Speaker::peers`.
    pub fn peers(&self) -> Vec<PeerStatus> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.tx.send(Cmd::Peers(tx)).expect("speaker thread alive");
        rx.recv_timeout(Duration::from_secs(5))
            .expect("speaker answers")
    }

    /// Waits until every peer is Established and returns their status.
    pub fn wait_established(&self, limit: Duration) -> Vec<PeerStatus> {
        wait_for("all sessions Established", limit, || {
            let p = self.peers();
            if p.iter().all(|p| p.state == "Established") {
                Ok(p)
            } else {
                Err(format!("{p:#?}"))
            }
        })
    }

    /// `Speaker::shutdown`, waiting for it.
    pub fn shutdown(mut self) {
        let (tx, rx) = std::sync::mpsc::channel();
        self.tx
            .send(Cmd::Shutdown(tx))
            .expect("speaker thread alive");
        rx.recv_timeout(Duration::from_secs(10))
            .expect("speaker shuts down within 10 s");
        if let Some(t) = self.thread.take() {
            t.join().expect("speaker thread");
        }
    }
}

impl Drop for SpeakerHost {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            // Closing the channel ends the thread (and drops the speaker).
            let (tx, _) = tokio::sync::mpsc::unbounded_channel();
            drop(std::mem::replace(&mut self.tx, tx));
            let _ = t.join();
        }
    }
}

/// The route set the interop tests announce: two IPv4 and two IPv6 host
/// routes, one of each with communities 65010:100 and 65010:200.
pub fn test_routes() -> BTreeMap<Prefix, RouteAttrs> {
    let comm = RouteAttrs::with_communities([(65010 << 16) | 100, (65010 << 16) | 200]);
    let mut r = BTreeMap::new();
    r.insert("203.0.113.10/32".parse().unwrap(), comm.clone());
    r.insert("203.0.113.11/32".parse().unwrap(), RouteAttrs::default());
    r.insert("2001:db8:100::10/128".parse().unwrap(), comm);
    r.insert(
        "2001:db8:100::11/128".parse().unwrap(),
        RouteAttrs::default(),
    );
    r
}

/// `test_routes` without the `.11` routes.
pub fn fewer_routes() -> BTreeMap<Prefix, RouteAttrs> {
    let mut r = test_routes();
    r.retain(|p, _| !p.to_string().contains("::11/") && !p.to_string().contains(".11/"));
    r
}
