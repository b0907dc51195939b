//! Traffic tools: identity servers on backends, TCP/UDP rounds from clients.
//!
//! Everything is blocking `std::net` on plain threads: sockets are created by
//! a thread that joined the namespace (a socket belongs to the namespace it
//! was created in) and can then be used from any thread.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::netns::Netns;

/// How often server threads look at their stop flag.
const POLL: Duration = Duration::from_millis(20);
/// Failure descriptions kept in a [`RoundReport`]; the rest are only counted.
pub const MAX_FAILURE_DETAILS: usize = 16;

/// A TCP + UDP server that tells every client who answered and whom it saw.
///
/// Why: a load-balancer test needs to know which backend served each flow
/// (to check spreading and stickiness) and what client address the backend
/// saw (to check NAT vs. SNAT). TCP: on accept it writes
/// `"{name} {peer_addr}\n"`, then echoes everything until the peer closes
/// (so data in both directions crosses the balancer). UDP: every datagram
/// gets `"{name} {peer_addr} {payload}"` back. Threads stop, and sockets
/// close, when the server is dropped.
pub struct IdentityServer {
    name: String,
    addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl IdentityServer {
    /// Binds a TCP listener and a UDP socket on each of `addrs` inside `ns`
    /// and starts serving.
    ///
    /// Why both protocols on the same address: a VIP test can then use one
    /// backend list for TCP and UDP services. Port 0 picks a free TCP port
    /// and uses the same number for UDP.
    pub fn start(ns: &Netns, name: &str, addrs: &[SocketAddr]) -> Result<IdentityServer> {
        anyhow::ensure!(
            !name.is_empty() && !name.contains(char::is_whitespace),
            "identity name must be one non-empty word, got {name:?}"
        );
        let sockets = ns.within(|| -> Result<Vec<(TcpListener, UdpSocket)>> {
            let mut v = Vec::new();
            for a in addrs {
                let l = TcpListener::bind(a).with_context(|| format!("binding tcp {a}"))?;
                let bound = l.local_addr()?;
                let u = UdpSocket::bind(bound).with_context(|| format!("binding udp {bound}"))?;
                v.push((l, u));
            }
            Ok(v)
        })??;
        let stop = Arc::new(AtomicBool::new(false));
        let mut server = IdentityServer {
            name: name.to_string(),
            addrs: Vec::new(),
            stop: Arc::clone(&stop),
            threads: Vec::new(),
        };
        for (l, u) in sockets {
            server.addrs.push(l.local_addr()?);
            l.set_nonblocking(true)?;
            u.set_read_timeout(Some(POLL * 5))?;
            let (n, s) = (name.to_string(), Arc::clone(&stop));
            server
                .threads
                .push(spawn_named("id-tcp", move || tcp_accept_loop(l, n, s))?);
            let (n, s) = (name.to_string(), Arc::clone(&stop));
            server
                .threads
                .push(spawn_named("id-udp", move || udp_loop(u, n, s))?);
        }
        Ok(server)
    }

    /// The identity this server announces.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The addresses actually bound (ports resolved if 0 was given).
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }
}

impl Drop for IdentityServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn spawn_named<F: FnOnce() + Send + 'static>(name: &str, f: F) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .context("spawning server thread")
}

fn tcp_accept_loop(l: TcpListener, name: String, stop: Arc<AtomicBool>) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match l.accept() {
            Ok((s, peer)) => {
                let (n, st) = (name.clone(), Arc::clone(&stop));
                match std::thread::Builder::new()
                    .name("id-conn".into())
                    .spawn(move || serve_tcp_conn(s, peer, &n, &st))
                {
                    Ok(h) => conns.push(h),
                    Err(e) => eprintln!("rivora-lab identity {name}: no thread for {peer}: {e}"),
                }
                conns.retain(|h| !h.is_finished());
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                // e.g. ECONNABORTED, EMFILE: keep serving, but do not spin.
                eprintln!("rivora-lab identity {name}: accept: {e}");
                std::thread::sleep(POLL);
            }
        }
    }
    for h in conns {
        let _ = h.join();
    }
}

fn serve_tcp_conn(mut s: TcpStream, peer: SocketAddr, name: &str, stop: &AtomicBool) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(POLL * 5));
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    if s.write_all(format!("{name} {peer}\n").as_bytes()).is_err() {
        return;
    }
    let mut buf = [0u8; 16 * 1024];
    while !stop.load(Ordering::SeqCst) {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn udp_loop(u: UdpSocket, name: String, stop: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::SeqCst) {
        match u.recv_from(&mut buf) {
            Ok((n, peer)) => {
                let payload = String::from_utf8_lossy(&buf[..n]);
                let reply = format!("{name} {peer} {payload}");
                if let Err(e) = u.send_to(reply.as_bytes(), peer) {
                    eprintln!("rivora-lab identity {name}: udp reply to {peer}: {e}");
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                // ICMP errors from earlier sends surface here; not fatal.
                if e.kind() != ErrorKind::ConnectionRefused {
                    eprintln!("rivora-lab identity {name}: udp recv: {e}");
                }
                std::thread::sleep(POLL);
            }
        }
    }
}

/// Result of a TCP or UDP round: how many flows worked and where they went.
///
/// Why: load-balancer assertions are about counts (all flows served, right
/// peer address, spread across backends), and a failing assertion should
/// print a readable summary with the first few error messages.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundReport {
    /// "tcp" or "udp".
    pub protocol: String,
    /// Where the round sent its flows (VIP or backend address).
    pub target: SocketAddr,
    /// Flows attempted.
    pub attempted: usize,
    /// Flows that got a well-formed identity answer from `target`.
    pub ok: usize,
    /// Descriptions of the first [`MAX_FAILURE_DETAILS`] failures.
    pub failed: Vec<String>,
    /// Total number of failed flows (not counting `wrong_peer`).
    pub failed_total: usize,
    /// Flows answered from an address other than `target` (for UDP: the
    /// reply's source; for TCP: the connected socket's peer). A balancer that
    /// forgets to rewrite the source of replies shows up here.
    pub wrong_peer: usize,
    /// Successful flows per identity (backend) name.
    pub per_backend: BTreeMap<String, usize>,
    /// Successful flows where the backend saw a client address different
    /// from the client socket's local address (SNAT or proxying in between).
    pub source_rewritten: usize,
    /// The client addresses each backend saw (what source translation, or
    /// its absence, looks like from the backend: the client's own, or a
    /// node's).
    pub seen_by_backend: BTreeMap<String, std::collections::BTreeSet<std::net::IpAddr>>,
    /// UDP exchanges that needed their one retry.
    pub retried: usize,
    /// Wall time of the round.
    pub elapsed: Duration,
}

impl RoundReport {
    fn new(protocol: &str, target: SocketAddr) -> RoundReport {
        RoundReport {
            protocol: protocol.to_string(),
            target,
            attempted: 0,
            ok: 0,
            failed: Vec::new(),
            failed_total: 0,
            wrong_peer: 0,
            per_backend: BTreeMap::new(),
            source_rewritten: 0,
            seen_by_backend: BTreeMap::new(),
            retried: 0,
            elapsed: Duration::ZERO,
        }
    }

    fn record(&mut self, outcome: Outcome) {
        self.attempted += 1;
        match outcome {
            Outcome::Ok {
                backend,
                source_rewritten,
                seen,
                retried,
            } => {
                self.ok += 1;
                self.seen_by_backend
                    .entry(backend.clone())
                    .or_default()
                    .insert(seen);
                *self.per_backend.entry(backend).or_default() += 1;
                self.source_rewritten += usize::from(source_rewritten);
                self.retried += usize::from(retried);
            }
            Outcome::WrongPeer(desc) => {
                self.wrong_peer += 1;
                self.push_failure(desc);
            }
            Outcome::Failed(desc) => {
                self.failed_total += 1;
                self.push_failure(desc);
            }
        }
    }

    fn push_failure(&mut self, desc: String) {
        if self.failed.len() < MAX_FAILURE_DETAILS {
            self.failed.push(desc);
        }
    }

    fn merge(&mut self, other: RoundReport) {
        self.attempted += other.attempted;
        self.ok += other.ok;
        self.failed_total += other.failed_total;
        self.wrong_peer += other.wrong_peer;
        self.source_rewritten += other.source_rewritten;
        self.retried += other.retried;
        for f in other.failed {
            self.push_failure(f);
        }
        for (k, v) in other.per_backend {
            *self.per_backend.entry(k).or_default() += v;
        }
        for (k, v) in other.seen_by_backend {
            self.seen_by_backend.entry(k).or_default().extend(v);
        }
    }

    /// True when every attempted flow succeeded with the right peer.
    ///
    /// Why: the common assertion, `assert!(r.all_ok(), "{r}")`.
    pub fn all_ok(&self) -> bool {
        self.ok == self.attempted && self.attempted > 0
    }

    /// Fraction of successful flows per backend (sums to 1 when any
    /// succeeded).
    ///
    /// Why: weight checks compare observed shares to expected ones.
    pub fn shares(&self) -> BTreeMap<String, f64> {
        let total: usize = self.per_backend.values().sum();
        if total == 0 {
            return BTreeMap::new();
        }
        self.per_backend
            .iter()
            .map(|(k, v)| (k.clone(), *v as f64 / total as f64))
            .collect()
    }
}

impl fmt::Display for RoundReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} round to {}: {}/{} ok, {} failed, {} wrong peer, {} source-rewritten, {} retried, {:.2?}",
            self.protocol,
            self.target,
            self.ok,
            self.attempted,
            self.failed_total,
            self.wrong_peer,
            self.source_rewritten,
            self.retried,
            self.elapsed
        )?;
        let shares = self.shares();
        let width = self
            .per_backend
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(7)
            .max(7);
        if !self.per_backend.is_empty() {
            writeln!(f, "  {:<width$}  {:>7}  {:>6}", "backend", "flows", "share")?;
        }
        for (name, n) in &self.per_backend {
            let share = shares.get(name).copied().unwrap_or(0.0) * 100.0;
            writeln!(f, "  {name:<width$}  {n:>7}  {share:>5.1}%")?;
        }
        let more = (self.failed_total + self.wrong_peer).saturating_sub(self.failed.len());
        for e in &self.failed {
            writeln!(f, "  ! {e}")?;
        }
        if more > 0 {
            writeln!(f, "  ! ... and {more} more")?;
        }
        Ok(())
    }
}

enum Outcome {
    Ok {
        backend: String,
        source_rewritten: bool,
        /// The client address the backend saw.
        seen: std::net::IpAddr,
        retried: bool,
    },
    WrongPeer(String),
    Failed(String),
}

/// Runs `count` flows with up to `parallel` workers, each worker a thread
/// inside `ns`, and collects the outcomes.
fn run_round<F>(
    ns: &Netns,
    protocol: &str,
    target: SocketAddr,
    count: usize,
    parallel: usize,
    one: F,
) -> RoundReport
where
    F: Fn(usize) -> Outcome + Sync,
{
    let start = Instant::now();
    let next = AtomicUsize::new(0);
    let workers = parallel.clamp(1, count.max(1));
    let mut report = RoundReport::new(protocol, target);
    let parts: Vec<RoundReport> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut part = RoundReport::new(protocol, target);
                    // Could not enter the namespace: charge the flows this
                    // worker takes to that error rather than run them in
                    // the wrong namespace.
                    let entered = ns.enter_current_thread();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= count {
                            break;
                        }
                        match &entered {
                            Ok(()) => part.record(one(i)),
                            Err(e) => part.record(Outcome::Failed(format!("{e:#}"))),
                        }
                    }
                    part
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    for p in parts {
        report.merge(p);
    }
    report.elapsed = start.elapsed();
    report
}

/// Opens `count` TCP connections from `ns` to `target`, `parallel` at a
/// time, and reports which backend answered each.
///
/// Why this shape: each connection is a new flow (new source port), so the
/// balancer's per-flow choice is exercised `count` times. Per connection it
/// reads the identity line, checks that the socket's peer is `target` (the
/// client must see the VIP, never the backend), sends a probe and expects
/// it echoed back (payload crossing the balancer both ways after the
/// handshake), then closes. `timeout` bounds connect, each read and write.
pub fn tcp_round(
    ns: &Netns,
    target: SocketAddr,
    count: usize,
    parallel: usize,
    timeout: Duration,
) -> RoundReport {
    run_round(ns, "tcp", target, count, parallel, |i| {
        tcp_once(target, i, None, timeout)
    })
}

/// [`tcp_round`] with connection `i` bound to source port `first_port + i`.
///
/// Why: with chosen ports the set of flows, and so the balancer's choices,
/// is the same on every run, so a test that checks how flows spread is
/// reproducible instead of depending on the kernel's random ephemeral ports.
/// Pick ports below the ephemeral range (`net.ipv4.ip_local_port_range`,
/// 32768 and up by default), or a concurrent connection that the kernel
/// gave one of them makes the bind fail with "address already in use".
pub fn tcp_round_from_ports(
    ns: &Netns,
    target: SocketAddr,
    first_port: u16,
    count: usize,
    parallel: usize,
    timeout: Duration,
) -> RoundReport {
    assert!(
        first_port as usize + count <= 65536,
        "source ports beyond 65535"
    );
    run_round(ns, "tcp", target, count, parallel, |i| {
        tcp_once(target, i, Some(first_port + i as u16), timeout)
    })
}

/// Opens `count` TCP connections from `ns` to `target`, cycling through the
/// source ports `ports` (connection `i` from `ports[i % ports.len()]`), so
/// every port is reused about `count / ports.len()` times, and reports which
/// backend answered each. Exchanges as [`tcp_round`] does.
///
/// Why: a client reusing a source port sends a SYN with the 5-tuple of an
/// earlier connection, which is how a balancer's stale per-flow state
/// (an affinity entry naming a since-drained or removed backend) gets hit.
/// Each connection is closed with an RST (SO_LINGER 0), not a FIN: a
/// client-side FIN close leaves the client's socket in TIME_WAIT for 60 s,
/// and connect() from the same port to the same VIP then fails with
/// "address not available" (SO_REUSEADDR lets the bind through, not the
/// connect; net.ipv4.tcp_tw_reuse only helps after a second and needs
/// timestamps). The server cannot be made to close first without changing
/// the identity servers. Up to `parallel` workers run at once, each with its
/// own share of the ports, so one port never has two connections at a time.
pub fn tcp_round_reusing_ports(
    ns: &Netns,
    target: SocketAddr,
    ports: &[u16],
    count: usize,
    parallel: usize,
    timeout: Duration,
) -> RoundReport {
    assert!(!ports.is_empty(), "tcp_round_reusing_ports needs ports");
    let start = Instant::now();
    let workers = parallel.clamp(1, ports.len());
    let mut report = RoundReport::new("tcp", target);
    let parts: Vec<RoundReport> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                s.spawn(move || {
                    let mut part = RoundReport::new("tcp", target);
                    let entered = ns.enter_current_thread();
                    // Port j belongs to worker j % workers, and so do the
                    // connections from it: one at a time per port.
                    for i in (0..count).filter(|i| (i % ports.len()) % workers == w) {
                        let port = ports[i % ports.len()];
                        match &entered {
                            Ok(()) => part.record(tcp_once_linger0(target, i, port, timeout)),
                            Err(e) => part.record(Outcome::Failed(format!("{e:#}"))),
                        }
                    }
                    part
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    for p in parts {
        report.merge(p);
    }
    report.elapsed = start.elapsed();
    report
}

fn tcp_once_linger0(target: SocketAddr, i: usize, port: u16, timeout: Duration) -> Outcome {
    tcp_once_with(target, i, Some(port), timeout, true)
}

fn connect_from(
    target: SocketAddr,
    port: Option<u16>,
    timeout: Duration,
    linger0: bool,
) -> std::io::Result<TcpStream> {
    let Some(port) = port else {
        return TcpStream::connect_timeout(&target, timeout);
    };
    let domain = socket2::Domain::for_address(target);
    let sock = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    if linger0 {
        sock.set_linger(Some(Duration::ZERO))?;
    }
    let any: IpAddr = match target {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    sock.bind(&SocketAddr::new(any, port).into())?;
    sock.connect_timeout(&target.into(), timeout)?;
    Ok(sock.into())
}

fn tcp_once(target: SocketAddr, i: usize, port: Option<u16>, timeout: Duration) -> Outcome {
    tcp_once_with(target, i, port, timeout, false)
}

fn tcp_once_with(
    target: SocketAddr,
    i: usize,
    port: Option<u16>,
    timeout: Duration,
    linger0: bool,
) -> Outcome {
    let fail = |what: &str, e: &dyn fmt::Display| {
        Outcome::Failed(format!("tcp #{i} to {target}: {what}: {e}"))
    };
    let s = match connect_from(target, port, timeout, linger0) {
        Ok(s) => s,
        Err(e) => return fail("connect", &e),
    };
    let _ = s.set_nodelay(true);
    if let Err(e) = s
        .set_read_timeout(Some(timeout))
        .and_then(|_| s.set_write_timeout(Some(timeout)))
    {
        return fail("set timeouts", &e);
    }
    let (local, peer) = match (s.local_addr(), s.peer_addr()) {
        (Ok(l), Ok(p)) => (l, p),
        (Err(e), _) | (_, Err(e)) => return fail("socket addresses", &e),
    };
    if peer != target {
        return Outcome::WrongPeer(format!(
            "tcp #{i}: connected to {target} but peer is {peer}"
        ));
    }
    let mut reader = BufReader::new(&s);
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(0) => return fail("identity", &"connection closed before identity line"),
        Ok(_) if !line.ends_with('\n') => {
            return fail("identity", &format!("truncated line {line:?}"));
        }
        Ok(_) => {}
        Err(e) => return fail("reading identity", &e),
    }
    let Some((backend, seen)) = parse_identity(line.trim_end()) else {
        return fail("identity", &format!("malformed line {line:?}"));
    };
    let probe = format!("rivora-lab probe {i}\n");
    if let Err(e) = (&s).write_all(probe.as_bytes()) {
        return fail("writing probe", &e);
    }
    let mut echo = String::new();
    match reader.read_line(&mut echo) {
        Ok(_) if echo == probe => {}
        Ok(_) => return fail("echo", &format!("sent {probe:?}, got {echo:?}")),
        Err(e) => return fail("reading echo", &e),
    }
    Outcome::Ok {
        backend: backend.to_string(),
        source_rewritten: seen != local,
        seen: seen.ip(),
        retried: false,
    }
}

/// Parses `"{name} {addr}"` (TCP identity line or UDP reply head).
fn parse_identity(line: &str) -> Option<(&str, SocketAddr)> {
    let (name, rest) = line.split_once(' ')?;
    let addr = rest.split(' ').next()?.parse().ok()?;
    Some((name, addr))
}

/// Makes `count` UDP exchanges from `ns` to `target`, each from a fresh
/// socket, `parallel` at a time, and reports which backend answered each.
///
/// Why a fresh socket per exchange: a new source port is a new flow for the
/// balancer, just like a new TCP connection. Each datagram carries a unique
/// sequence id; the reply must come from `target` (checked on the
/// `recv_from` source address: a backend answering with its own address
/// means the balancer did not rewrite the reply) and must echo the payload.
/// A lost datagram is retried once from the same socket (same flow) before
/// the exchange counts as failed. `timeout` bounds each wait for a reply.
pub fn udp_round(
    ns: &Netns,
    target: SocketAddr,
    count: usize,
    parallel: usize,
    timeout: Duration,
) -> RoundReport {
    static ROUND: AtomicUsize = AtomicUsize::new(0);
    let round = ROUND.fetch_add(1, Ordering::Relaxed);
    let tag = format!("{}.{round}", std::process::id());
    run_round(ns, "udp", target, count, parallel, |i| {
        udp_once(target, &tag, i, 0, timeout)
    })
}

/// [`udp_round`] with exchange `i` sent from source port `first_port + i`,
/// for the same reproducibility as [`tcp_round_from_ports`].
pub fn udp_round_from_ports(
    ns: &Netns,
    target: SocketAddr,
    first_port: u16,
    count: usize,
    parallel: usize,
    timeout: Duration,
) -> RoundReport {
    assert!(
        first_port as usize + count <= 65536,
        "source ports beyond 65535"
    );
    static ROUND: AtomicUsize = AtomicUsize::new(0);
    let round = ROUND.fetch_add(1, Ordering::Relaxed);
    let tag = format!("{}.p{round}", std::process::id());
    run_round(ns, "udp", target, count, parallel, |i| {
        udp_once(target, &tag, i, first_port + i as u16, timeout)
    })
}

fn udp_once(target: SocketAddr, tag: &str, i: usize, port: u16, timeout: Duration) -> Outcome {
    let fail = |what: &str, e: &dyn fmt::Display| {
        Outcome::Failed(format!("udp #{i} to {target}: {what}: {e}"))
    };
    let any: IpAddr = match target {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let sock = match UdpSocket::bind(SocketAddr::new(any, port)) {
        Ok(s) => s,
        Err(e) => return fail("bind", &e),
    };
    let local_port = sock.local_addr().map(|a| a.port()).unwrap_or(0);
    let payload = format!("rivora-lab-seq-{tag}-{i}");
    let mut buf = vec![0u8; 65536];
    let mut last_err = String::from("no reply");
    for attempt in 0..2 {
        if let Err(e) = sock.send_to(payload.as_bytes(), target) {
            last_err = format!("send: {e}");
            continue;
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                last_err = format!("no reply within {timeout:?}");
                break;
            }
            if let Err(e) = sock.set_read_timeout(Some(left)) {
                return fail("set timeout", &e);
            }
            match sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    let reply = String::from_utf8_lossy(&buf[..n]);
                    if from != target {
                        return Outcome::WrongPeer(format!(
                            "udp #{i}: sent to {target}, reply came from {from}: {reply:?}"
                        ));
                    }
                    let Some((backend, seen)) = parse_identity(&reply) else {
                        return fail("reply", &format!("malformed {reply:?}"));
                    };
                    let echoed = reply.splitn(3, ' ').nth(2).unwrap_or("");
                    if echoed != payload {
                        return fail(
                            "reply",
                            &format!("payload not echoed: sent {payload:?}, got {reply:?}"),
                        );
                    }
                    return Outcome::Ok {
                        backend: backend.to_string(),
                        source_rewritten: seen.port() != local_port
                            || !seen_matches_family(seen, target),
                        seen: seen.ip(),
                        retried: attempt > 0,
                    };
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    last_err = format!("no reply within {timeout:?}");
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    // e.g. ECONNREFUSED from an ICMP port unreachable.
                    last_err = format!("recv: {e}");
                    break;
                }
            }
        }
    }
    fail("after 1 retry", &last_err)
}

/// A backend seeing a client of another address family means translation.
fn seen_matches_family(seen: SocketAddr, target: SocketAddr) -> bool {
    seen.is_ipv4() == target.is_ipv4()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_identity_lines() {
        let (n, a) = parse_identity("b1 10.200.0.2:4242").unwrap();
        assert_eq!(n, "b1");
        assert_eq!(a, "10.200.0.2:4242".parse().unwrap());
        let (n, a) = parse_identity("b2 [fd00:200::2]:1 rivora-lab-seq-1").unwrap();
        assert_eq!(n, "b2");
        assert_eq!(a, "[fd00:200::2]:1".parse().unwrap());
        assert!(parse_identity("garbage").is_none());
        assert!(parse_identity("b1 notanaddr").is_none());
    }

    #[test]
    fn report_shares_merge_and_display() {
        let t: SocketAddr = "10.200.100.1:80".parse().unwrap();
        let mut a = RoundReport::new("tcp", t);
        for b in ["b1", "b2", "b3", "b3"] {
            a.record(Outcome::Ok {
                backend: b.into(),
                source_rewritten: false,
                seen: "10.200.0.2".parse().unwrap(),
                retried: b == "b2",
            });
        }
        let mut b = RoundReport::new("tcp", t);
        b.record(Outcome::Failed("boom".into()));
        b.record(Outcome::WrongPeer("wrong".into()));
        a.merge(b);
        assert_eq!(a.attempted, 6);
        assert_eq!(a.ok, 4);
        assert_eq!(a.failed_total, 1);
        assert_eq!(a.wrong_peer, 1);
        assert_eq!(a.retried, 1);
        assert!(!a.all_ok());
        let s = a.shares();
        assert_eq!(s["b1"], 0.25);
        assert_eq!(s["b3"], 0.5);
        let text = a.to_string();
        assert!(text.contains("4/6 ok"), "{text}");
        assert!(text.contains("b3"), "{text}");
        assert!(text.contains("50.0%"), "{text}");
        assert!(text.contains("! boom"), "{text}");
        assert!(RoundReport::new("udp", t).shares().is_empty());
    }

    #[test]
    fn failure_details_are_capped() {
        let t: SocketAddr = "[fd00:200:100::1]:53".parse().unwrap();
        let mut r = RoundReport::new("udp", t);
        for i in 0..(MAX_FAILURE_DETAILS + 5) {
            r.record(Outcome::Failed(format!("e{i}")));
        }
        assert_eq!(r.failed.len(), MAX_FAILURE_DETAILS);
        assert_eq!(r.failed_total, MAX_FAILURE_DETAILS + 5);
        assert!(r.to_string().contains("and 5 more"));
    }
}
