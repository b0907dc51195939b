//! Rivora lab: network-namespace harness for end-to-end tests and the demo.
//!
//! Why it exists: the balancer is an XDP program plus a daemon; the only
//! honest test is real packets crossing real (virtual) links between a
//! client, the balancer host and backends. This crate builds that world out
//! of network namespaces and veths on one machine, drives TCP/UDP traffic
//! through it, and cleans up after itself (namespaces and processes are
//! removed on drop, also when a test panics).
//!
//! Needs root (namespaces, veths, bpffs). Traffic only ever goes to
//! addresses inside namespaces the lab created.
//!
//! * [`Netns`]: one namespace; run/spawn commands and threads inside it.
//! * [`link`]: veth, bridge, address, route and offload helpers.
//! * [`Topology`]: the standard client -- lb -- backends lab.
//! * [`front::FrontClients`]: more clients on a bridge in front of the lb.
//! * [`dsr::DsrLab`]: client segment, L2 and routed L3 DSR backends, a NAT
//!   backend; DSR replies bypass the balancer.
//! * [`cluster::Cluster`]: Kubernetes-like nodes on a segment, pods behind
//!   each node routed as a routed CNI does, and clients.
//! * [`segment::Segment`]: the balancer on a shared L2 segment with a
//!   client and a router (ARP/NDP and BGP announcement tests).
//! * [`traffic`]: [`IdentityServer`], [`tcp_round`], [`udp_round`].
//! * [`Trafgen`]: netsniff-ng's packet generator, pinned and stopped by PID.
//! * [`streams`]: long-running [`LongLivedTcp`], [`ConnectionChurn`] and
//!   [`UdpSequence`] traffic for restart and outage tests.
//! * [`bgp_peers`]: real BGP daemons (BIRD 2, GoBGP, FRR's bgpd) as peers
//!   in a namespace, started from a config and queried through their CLIs.
//! * [`memory`]: a process's peak RSS and the kernel memory of the BPF
//!   maps it holds (rivorad's flow tables), from /proc.
//! * [`demo`]: the README demo against a real `rivorad`.

#![warn(missing_docs)]

pub mod bgp_peers;
pub mod cluster;
pub mod demo;
pub mod dsr;
pub mod ecmp;
pub mod fib;
pub mod front;
pub mod http;
pub mod link;
pub mod memory;
pub mod netns;
pub mod rivorad;
pub mod segment;
pub mod sniff;
pub mod stray;
pub mod streams;
mod sys;
pub mod topology;
pub mod traffic;
pub mod trafgen;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

pub use netns::Netns;
pub use rivorad::Rivorad;
pub use stray::StrayXdp;
pub use streams::{
    ChurnReport, ConnectionChurn, LongLivedReport, LongLivedTcp, SeqReport, UdpSequence,
};
pub use topology::Topology;
pub use traffic::{
    IdentityServer, RoundReport, tcp_round, tcp_round_from_ports, tcp_round_reusing_ports,
    udp_round, udp_round_from_ports,
};
pub use trafgen::Trafgen;

/// A lab's namespace tag: the first three ASCII alphanumerics of `tag`, so
/// the names its namespaces get stay short.
pub(crate) fn lab_tag(tag: &str) -> String {
    tag.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(3)
        .collect()
}

/// Where the BPF filesystem must be mounted for pinned maps and links.
pub const BPFFS: &str = "/sys/fs/bpf";
/// `statfs` magic of bpffs.
const BPF_FS_MAGIC: u64 = 0xcafe_4a11;
/// Lock file serialising the bpffs check-and-mount across processes.
const BPFFS_LOCK: &str = "/run/rivora-lab-bpffs.lock";

/// Makes sure bpffs is mounted at `/sys/fs/bpf` (mounting it if not).
///
/// Why: `rivorad` pins its maps and XDP link under /sys/fs/bpf so they
/// survive restarts; on a minimal VM nothing mounts bpffs, and pinning into
/// plain sysfs fails with a confusing error. The check-and-mount runs under
/// a file lock so parallel test processes do not stack two mounts.
pub fn ensure_bpffs() -> Result<()> {
    if sys::fs_magic(BPFFS).ok() == Some(BPF_FS_MAGIC) {
        return Ok(());
    }
    let _lock = sys::lock_file(BPFFS_LOCK)
        .with_context(|| format!("locking {BPFFS_LOCK} (bpffs mount)"))?;
    if sys::fs_magic(BPFFS).ok() == Some(BPF_FS_MAGIC) {
        return Ok(());
    }
    std::fs::create_dir_all(BPFFS).with_context(|| format!("creating {BPFFS}"))?;
    sys::mount("bpf", BPFFS, "bpf").with_context(|| format!("mount -t bpf bpf {BPFFS}"))?;
    match sys::fs_magic(BPFFS) {
        Ok(BPF_FS_MAGIC) => Ok(()),
        Ok(m) => bail!("{BPFFS} has filesystem magic {m:#x} after mounting bpffs"),
        Err(e) => Err(e).with_context(|| format!("statfs {BPFFS}")),
    }
}

/// Fails with a clear message unless running as root.
///
/// Why: the lab needs CAP_SYS_ADMIN and CAP_NET_ADMIN; tests call this first
/// and must fail loudly, never skip, when not root, so a green run always
/// means the network tests really ran.
pub fn require_root() -> Result<()> {
    let euid = sys::euid();
    if euid != 0 {
        bail!(
            "rivora-lab needs root (it creates network namespaces, veths and mounts bpffs), \
             but euid is {euid}; run e.g. `sudo -E cargo test -p rivora-lab`"
        );
    }
    Ok(())
}

/// Calls `f` every `every` until it returns `Ok`, giving up after `limit`.
///
/// Why: namespace tests wait on things that settle asynchronously (a BGP
/// session, a route in a daemon's RIB, a reload); one loop with one timeout
/// message ("timed out after LIMIT waiting for WHAT; last: ERR", the last
/// `Err` being what the check last saw) serves them all, and each test
/// suite keeps its own polling interval. The `Err` is that message, for
/// the caller to panic with or pass on.
pub fn poll_until<T>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut f: impl FnMut() -> std::result::Result<T, String>,
) -> std::result::Result<T, String> {
    let deadline = Instant::now() + limit;
    let mut last = String::new();
    while Instant::now() < deadline {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) => last = e,
        }
        std::thread::sleep(every);
    }
    Err(format!(
        "timed out after {limit:?} waiting for {what}; last: {last}"
    ))
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Turns SIGINT/SIGTERM into a flag readable with [`interrupted`].
///
/// Why: the default action kills the process without running destructors,
/// which would leak namespaces and leave `rivorad` running; with the flag,
/// long-running commands (the demo, `up`) stop at the next step and tear
/// down cleanly.
pub fn install_interrupt_handler() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: sigaction is zeroable POD; the handler only touches an
        // atomic, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// True once SIGINT/SIGTERM arrived after [`install_interrupt_handler`].
///
/// Why: lets library code (the demo) stop between steps when asked.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Blocks until a line (or EOF) on stdin, or an interrupt.
///
/// Why: `--keep` modes leave the lab up for a human to poke at, and still
/// need an orderly way to tear it down afterwards.
pub fn wait_for_enter_or_interrupt() {
    let (tx, rx) = std::sync::mpsc::channel();
    let _ = std::thread::Builder::new()
        .name("stdin-wait".into())
        .spawn(move || {
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
            let _ = tx.send(());
        });
    while !interrupted() {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}
