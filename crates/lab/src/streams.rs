//! Long-running traffic streams: proof that the datapath keeps forwarding
//! while something around it changes (the daemon restarting, a backend
//! going away).
//!
//! Why these exist next to [`crate::traffic`]: a round ([`crate::tcp_round`],
//! [`crate::udp_round`]) asks "does a new flow work right now?". A zero-gap
//! restart test asks something else: "did anything break *while* `rivorad`
//! was SIGKILLed, down for seconds and restarted?". That needs traffic that
//! runs the whole time and remembers every hiccup:
//!
//! * [`LongLivedTcp`]: established connections exchanging numbered lines at a
//!   steady pace (existing flows must keep their backend and keep flowing).
//! * [`ConnectionChurn`]: new short connections at a steady rate (new flows
//!   must keep being balanced while the control plane is gone).
//! * [`UdpSequence`]: numbered datagrams over fixed flows, so every single
//!   lost or duplicated datagram is accounted for, with where the gap was.
//!
//! All of them pace against absolute deadlines (no drift from fixed sleeps),
//! use socket timeouts everywhere so no thread can block forever, and stop
//! every thread on `stop()` and on drop. Sockets are created inside the
//! given namespace; traffic only goes to `target`.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};

use crate::netns::{Netns, panic_message};

/// Failure descriptions kept in a stream report; the rest are only counted.
///
/// Why a cap: an outage can produce thousands of identical errors; the
/// first few say what happened, the counters say how much.
pub const MAX_STREAM_FAILURES: usize = 16;

/// Longest a stream thread sleeps or blocks between looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(20);

/// How far a pacer may fall behind before it drops the missed ticks instead
/// of firing them back to back.
const CATCH_UP: Duration = Duration::from_millis(250);

/// Upper bound on the wait for a clean close (our FIN, then the peer's).
const CLOSE_WAIT: Duration = Duration::from_millis(500);

/// Longest a [`UdpSequence`] send may block on a full socket buffer.
const UDP_SEND_TIMEOUT: Duration = Duration::from_millis(500);

/// Most worker threads a [`ConnectionChurn`] uses.
const MAX_CHURN_WORKERS: usize = 64;

/// How long start-up waits for churn workers to enter the namespace.
const WORKER_READY_TIMEOUT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------

/// Fires ticks at `origin + k * num / den` nanoseconds.
///
/// Deadlines are absolute, so time spent working between ticks (or a
/// slightly late wake-up) does not accumulate into a lower rate. When the
/// caller is more than [`CATCH_UP`] late (a slow exchange, a stalled host)
/// the schedule restarts from now rather than bursting out every missed
/// tick.
struct Pacer {
    origin: Instant,
    num: u128,
    den: u128,
    k: u64,
}

impl Pacer {
    /// One tick every `interval`, the first at `now + phase`.
    fn every(interval: Duration, phase: Duration) -> Pacer {
        Pacer {
            origin: Instant::now() + phase,
            num: interval.as_nanos().max(1),
            den: 1,
            k: 0,
        }
    }

    /// `per_second` ticks per second, the first one immediately.
    fn rate(per_second: u32) -> Pacer {
        Pacer {
            origin: Instant::now(),
            num: 1_000_000_000,
            den: u128::from(per_second.max(1)),
            k: 0,
        }
    }

    fn deadline(&self) -> Instant {
        let ns = u128::from(self.k) * self.num / self.den;
        self.origin + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Sleeps until the next tick; false if `stop` was raised first.
    fn wait(&mut self, stop: &AtomicBool) -> bool {
        let due = self.deadline();
        loop {
            if stop.load(Ordering::SeqCst) {
                return false;
            }
            let now = Instant::now();
            if now >= due {
                break;
            }
            std::thread::sleep((due - now).min(STOP_POLL));
        }
        let now = Instant::now();
        if now.saturating_duration_since(due) > CATCH_UP {
            self.origin = now;
            self.k = 1;
        } else {
            self.k += 1;
        }
        true
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn push_capped(list: &Mutex<Vec<String>>, desc: String) {
    let mut l = lock(list);
    if l.len() < MAX_STREAM_FAILURES {
        l.push(desc);
    }
}

fn spawn_named<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .with_context(|| format!("spawning thread {name}"))
}

fn unspecified(target: SocketAddr) -> IpAddr {
    match target {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    }
}

/// An I/O error in words; timeouts say how long was waited.
fn describe(e: &std::io::Error, timeout: Duration) -> String {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => format!("timed out after {timeout:?}"),
        _ => e.to_string(),
    }
}

/// Backend name from a TCP identity line `"{name} {peer}\n"`.
fn identity_name(line: &str) -> Option<&str> {
    let line = line.strip_suffix('\n')?;
    let (name, peer) = line.split_once(' ')?;
    (!name.is_empty() && peer.parse::<SocketAddr>().is_ok()).then_some(name)
}

/// `(backend, flow, seq)` from a UDP identity reply
/// `"{name} {peer} rvseq {flow} {seq}"`.
fn parse_seq_reply(reply: &str) -> Option<(&str, usize, u64)> {
    let mut parts = reply.splitn(3, ' ');
    let name = parts.next().filter(|n| !n.is_empty())?;
    parts.next()?.parse::<SocketAddr>().ok()?;
    let payload = parts.next()?;
    let mut p = payload.split(' ');
    if p.next()? != "rvseq" {
        return None;
    }
    let flow = p.next()?.parse().ok()?;
    let seq = p.next()?.parse().ok()?;
    if p.next().is_some() {
        return None;
    }
    Some((name, flow, seq))
}

/// Connects to `target` with every socket timeout set, checks the peer and
/// reads the identity line. Returns the buffered stream and backend name.
fn open_identity_conn(
    target: SocketAddr,
    timeout: Duration,
) -> std::result::Result<(BufReader<TcpStream>, String), String> {
    let s = TcpStream::connect_timeout(&target, timeout)
        .map_err(|e| format!("connect: {}", describe(&e, timeout)))?;
    s.set_nodelay(true)
        .and_then(|_| s.set_read_timeout(Some(timeout)))
        .and_then(|_| s.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("socket options: {e}"))?;
    match s.peer_addr() {
        Ok(p) if p == target => {}
        Ok(p) => return Err(format!("connected to {target} but peer is {p}")),
        Err(e) => return Err(format!("peer address: {e}")),
    }
    let mut r = BufReader::new(s);
    let mut line = String::new();
    match r.read_line(&mut line) {
        Ok(0) => Err("closed before the identity line (EOF)".to_string()),
        Ok(_) => match identity_name(&line) {
            Some(name) => Ok((r, name.to_string())),
            None => Err(format!("malformed identity line {line:?}")),
        },
        Err(e) => Err(format!("reading identity: {}", describe(&e, timeout))),
    }
}

/// Sends `msg` (one line) and checks that exactly it comes back.
fn echo_exchange(
    r: &mut BufReader<TcpStream>,
    msg: &str,
    line: &mut String,
    timeout: Duration,
) -> std::result::Result<(), String> {
    r.get_ref()
        .write_all(msg.as_bytes())
        .map_err(|e| format!("sending: {}", describe(&e, timeout)))?;
    line.clear();
    match r.read_line(line) {
        Ok(0) => Err("connection closed by peer (EOF) instead of echo".to_string()),
        Ok(_) if line == msg => Ok(()),
        Ok(_) => Err(format!("echo mismatch: sent {msg:?}, got {line:?}")),
        Err(e) if line.is_empty() => Err(format!("reading echo: {}", describe(&e, timeout))),
        Err(e) => Err(format!(
            "reading echo: {} after partial {line:?}",
            describe(&e, timeout)
        )),
    }
}

/// Half-closes, then waits (bounded) for the peer's FIN so both sides end
/// with an orderly close rather than a reset.
fn close_cleanly(s: &TcpStream, wait: Duration) {
    if s.shutdown(Shutdown::Write).is_err() {
        return;
    }
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 512];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match (&*s).read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn write_failures(f: &mut fmt::Formatter<'_>, kept: &[String], total: u64) -> fmt::Result {
    for e in kept {
        writeln!(f, "  ! {e}")?;
    }
    let more = total.saturating_sub(kept.len() as u64);
    if more > 0 {
        writeln!(f, "  ! ... and {more} more")?;
    }
    Ok(())
}

fn write_backends(f: &mut fmt::Formatter<'_>, per: &BTreeMap<String, usize>) -> fmt::Result {
    if per.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = per.iter().map(|(k, v)| format!("{k}={v}")).collect();
    writeln!(f, "  per backend: {}", list.join(" "))
}

// ---------------------------------------------------------------------------
// LongLivedTcp
// ---------------------------------------------------------------------------

struct LongShared {
    stop: AtomicBool,
    exchanges: AtomicU64,
    failed: AtomicUsize,
    max_rtt_ns: AtomicU64,
    failures: Mutex<Vec<String>>,
}

/// Established TCP connections that keep exchanging numbered lines until
/// stopped, each recording the first thing that goes wrong.
///
/// Why: a balancer restart must not disturb flows that already exist (their
/// state lives in pinned maps, not in the daemon). A connection that
/// survives must keep echoing every line, in order, within `timeout`; a
/// reset, a stall, a short or wrong echo or an EOF is a failure of that
/// connection, which then stops (after a failure its later behaviour says
/// nothing new). Each connection runs on its own thread, so one stalled
/// connection does not slow the others.
pub struct LongLivedTcp {
    target: SocketAddr,
    connections: usize,
    started: Instant,
    per_backend: BTreeMap<String, usize>,
    shared: Arc<LongShared>,
    threads: Vec<JoinHandle<()>>,
}

impl LongLivedTcp {
    /// Opens `connections` connections from `ns` to `target`, reads each
    /// identity line, then starts one thread per connection that sends a
    /// numbered line every `interval` and expects it echoed within
    /// `timeout`.
    ///
    /// Why start fails if any connect fails: the stream measures what
    /// happens to *established* flows; if they cannot even be set up, the
    /// test is broken before the interesting part. `timeout` also bounds
    /// connect, the identity read and every write. Connections are phased
    /// evenly over one interval so the load is smooth.
    pub fn start(
        ns: &Netns,
        target: SocketAddr,
        connections: usize,
        interval: Duration,
        timeout: Duration,
    ) -> Result<LongLivedTcp> {
        ensure!(
            connections > 0,
            "LongLivedTcp needs at least one connection"
        );
        ensure!(!interval.is_zero(), "LongLivedTcp interval must be > 0");
        ensure!(!timeout.is_zero(), "LongLivedTcp timeout must be > 0");
        let conns = ns.within(|| -> Result<Vec<(BufReader<TcpStream>, String)>> {
            (0..connections)
                .map(|i| {
                    open_identity_conn(target, timeout)
                        .map_err(|e| anyhow!("long-lived tcp #{i} to {target}: {e}"))
                })
                .collect()
        })??;
        let started = Instant::now();
        let shared = Arc::new(LongShared {
            stop: AtomicBool::new(false),
            exchanges: AtomicU64::new(0),
            failed: AtomicUsize::new(0),
            max_rtt_ns: AtomicU64::new(0),
            failures: Mutex::new(Vec::new()),
        });
        let mut me = LongLivedTcp {
            target,
            connections,
            started,
            per_backend: BTreeMap::new(),
            shared,
            threads: Vec::with_capacity(connections),
        };
        for (idx, (reader, backend)) in conns.into_iter().enumerate() {
            *me.per_backend.entry(backend.clone()).or_default() += 1;
            let phase = interval.mul_f64(idx as f64 / connections as f64);
            let shared = Arc::clone(&me.shared);
            // On error `me` is dropped, which stops the threads already
            // running; the unstarted connections close with their sockets.
            me.threads.push(spawn_named("rv-long-tcp", move || {
                long_conn_loop(
                    idx, reader, &backend, interval, phase, timeout, started, &shared,
                )
            })?);
        }
        Ok(me)
    }

    /// The connections per backend identity, as they were opened.
    ///
    /// Why: a rollout test knows which connections must end when a pod goes.
    pub fn per_backend(&self) -> &BTreeMap<String, usize> {
        &self.per_backend
    }

    /// `(exchanges so far, connections failed so far)`.
    ///
    /// Why: a restart test checks that exchanges keep increasing while the
    /// daemon is down, and can bail out early once a connection failed.
    pub fn snapshot(&self) -> (u64, usize) {
        (
            self.shared.exchanges.load(Ordering::SeqCst),
            self.shared.failed.load(Ordering::SeqCst),
        )
    }

    /// Stops every connection thread, closes the connections cleanly and
    /// reports.
    ///
    /// Why it waits: an exchange in flight finishes (or times out) first,
    /// so the report is final and no thread outlives the stream.
    pub fn stop(mut self) -> LongLivedReport {
        self.halt();
        let s = &self.shared;
        LongLivedReport {
            target: self.target,
            connections: self.connections,
            exchanges: s.exchanges.load(Ordering::SeqCst),
            failed_connections: s.failed.load(Ordering::SeqCst),
            failures: lock(&s.failures).clone(),
            per_backend: self.per_backend.clone(),
            max_rtt: Duration::from_nanos(s.max_rtt_ns.load(Ordering::SeqCst)),
            elapsed: self.started.elapsed(),
        }
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for LongLivedTcp {
    fn drop(&mut self) {
        self.halt();
    }
}

#[allow(clippy::too_many_arguments)]
fn long_conn_loop(
    idx: usize,
    mut r: BufReader<TcpStream>,
    backend: &str,
    interval: Duration,
    phase: Duration,
    timeout: Duration,
    started: Instant,
    shared: &LongShared,
) {
    let local = r
        .get_ref()
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let mut pacer = Pacer::every(interval, phase);
    let mut line = String::new();
    let mut seq: u64 = 0;
    while pacer.wait(&shared.stop) {
        let msg = format!("rvlong {idx} {seq}\n");
        let t0 = Instant::now();
        match echo_exchange(&mut r, &msg, &mut line, timeout) {
            Ok(()) => {
                let rtt = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
                shared.max_rtt_ns.fetch_max(rtt, Ordering::SeqCst);
                shared.exchanges.fetch_add(1, Ordering::SeqCst);
                seq += 1;
            }
            Err(e) => {
                push_capped(
                    &shared.failures,
                    format!(
                        "conn #{idx} (from {local}, backend {backend}) at {:.3}s, seq {seq}: {e}",
                        started.elapsed().as_secs_f64()
                    ),
                );
                shared.failed.fetch_add(1, Ordering::SeqCst);
                return;
            }
        }
    }
    close_cleanly(r.get_ref(), CLOSE_WAIT.min(timeout));
}

/// What happened to a [`LongLivedTcp`] stream.
///
/// Why: the restart test asserts `failed_connections == 0` and prints this
/// (with the first failures, timestamped from the stream start) when not.
#[derive(Debug, Clone, PartialEq)]
pub struct LongLivedReport {
    /// Where the connections went (VIP or backend address).
    pub target: SocketAddr,
    /// Connections opened at start.
    pub connections: usize,
    /// Successful line/echo exchanges over all connections.
    pub exchanges: u64,
    /// Connections that hit an error (each stops at its first one).
    pub failed_connections: usize,
    /// The first [`MAX_STREAM_FAILURES`] failure descriptions.
    pub failures: Vec<String>,
    /// Connections per backend (from the identity lines at start).
    pub per_backend: BTreeMap<String, usize>,
    /// Slowest successful exchange (send to full echo).
    pub max_rtt: Duration,
    /// Time from start to stop.
    pub elapsed: Duration,
}

impl LongLivedReport {
    /// True when no connection failed and at least one exchange happened.
    ///
    /// Why: the common assertion, `assert!(r.all_ok(), "{r}")`.
    pub fn all_ok(&self) -> bool {
        self.failed_connections == 0 && self.exchanges > 0
    }
}

impl fmt::Display for LongLivedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "long-lived tcp to {}: {} connections, {} exchanges, {} failed, max rtt {:.2?}, {:.2?}",
            self.target,
            self.connections,
            self.exchanges,
            self.failed_connections,
            self.max_rtt,
            self.elapsed
        )?;
        write_backends(f, &self.per_backend)?;
        write_failures(f, &self.failures, self.failed_connections as u64)
    }
}

// ---------------------------------------------------------------------------
// ConnectionChurn
// ---------------------------------------------------------------------------

struct ChurnShared {
    stop: AtomicBool,
    attempted: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    failures: Mutex<Vec<String>>,
    per_backend: Mutex<BTreeMap<String, usize>>,
}

impl ChurnShared {
    fn fail(&self, desc: String) {
        self.failed.fetch_add(1, Ordering::SeqCst);
        push_capped(&self.failures, desc);
    }
}

/// New short TCP connections at a steady rate until stopped.
///
/// Why: while the daemon is down, *new* flows must still be balanced by the
/// XDP program on its own. One thread keeps the pace and hands attempts to
/// a pool of workers inside the namespace, so a connection that hangs (up
/// to `timeout` per step) does not lower the rate. If every worker is busy
/// and the hand-off queue (as long as the pool) is full when an attempt is
/// due, that attempt counts as failed ("not started") rather than silently
/// lowering the rate.
pub struct ConnectionChurn {
    target: SocketAddr,
    started: Instant,
    shared: Arc<ChurnShared>,
    pacer: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl ConnectionChurn {
    /// Starts opening `per_second` connections per second from `ns` to
    /// `target`; each reads the identity line, sends a probe line, checks
    /// the echo and closes. `timeout` bounds connect and every read/write.
    ///
    /// Why the pool size: about `per_second * timeout` workers (2..=64)
    /// are enough to keep the rate even if every attempt takes `timeout`
    /// (an outage), without a thread per connection.
    pub fn start(
        ns: &Netns,
        target: SocketAddr,
        per_second: u32,
        timeout: Duration,
    ) -> Result<ConnectionChurn> {
        ensure!(per_second > 0, "ConnectionChurn rate must be > 0");
        ensure!(!timeout.is_zero(), "ConnectionChurn timeout must be > 0");
        let workers = ((f64::from(per_second) * timeout.as_secs_f64()).ceil() as usize + 2)
            .clamp(2, MAX_CHURN_WORKERS);
        let started = Instant::now();
        let shared = Arc::new(ChurnShared {
            stop: AtomicBool::new(false),
            attempted: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            failures: Mutex::new(Vec::new()),
            per_backend: Mutex::new(BTreeMap::new()),
        });
        let mut me = ConnectionChurn {
            target,
            started,
            shared,
            pacer: None,
            workers: Vec::with_capacity(workers),
        };
        let (tx, rx) = mpsc::sync_channel::<u64>(workers);
        let rx = Arc::new(Mutex::new(rx));
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        for _ in 0..workers {
            let (rx, shared, ready) = (Arc::clone(&rx), Arc::clone(&me.shared), ready_tx.clone());
            me.workers.push(ns.enter_thread(move || {
                let _ = ready.send(());
                drop(ready);
                churn_worker(&rx, target, timeout, started, &shared);
            }));
        }
        drop(ready_tx);
        for _ in 0..workers {
            if ready_rx.recv_timeout(WORKER_READY_TIMEOUT).is_err() {
                me.shared.stop.store(true, Ordering::SeqCst);
                drop(tx);
                let why: Vec<String> = me
                    .workers
                    .drain(..)
                    .filter_map(|h| h.join().err())
                    .map(|p| panic_message(&*p))
                    .collect();
                bail!(
                    "churn workers did not start in netns {}: {}",
                    ns.name(),
                    why.join("; ")
                );
            }
        }
        let shared = Arc::clone(&me.shared);
        me.pacer = Some(spawn_named("rv-churn-pace", move || {
            churn_pacer(tx, per_second, workers, started, &shared)
        })?);
        Ok(me)
    }

    /// `(attempted so far, failed so far)`.
    ///
    /// Why: lets a restart test watch that attempts keep succeeding while
    /// the daemon is down.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.shared.attempted.load(Ordering::SeqCst),
            self.shared.failed.load(Ordering::SeqCst),
        )
    }

    /// Stops the pacing, lets attempts in progress finish, and reports.
    ///
    /// Why attempts queued but not begun are dropped: they were never
    /// tried, so counting them either way would be a lie; `attempted`
    /// always equals `ok + failed`.
    pub fn stop(mut self) -> ChurnReport {
        self.halt();
        let s = &self.shared;
        ChurnReport {
            target: self.target,
            attempted: s.attempted.load(Ordering::SeqCst),
            ok: s.ok.load(Ordering::SeqCst),
            failed: s.failed.load(Ordering::SeqCst),
            failures: lock(&s.failures).clone(),
            per_backend: lock(&s.per_backend).clone(),
            elapsed: self.started.elapsed(),
        }
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(p) = self.pacer.take() {
            let _ = p.join();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Drop for ConnectionChurn {
    fn drop(&mut self) {
        self.halt();
    }
}

fn churn_pacer(
    tx: mpsc::SyncSender<u64>,
    per_second: u32,
    workers: usize,
    started: Instant,
    shared: &ChurnShared,
) {
    let mut pacer = Pacer::rate(per_second);
    let mut k: u64 = 0;
    while pacer.wait(&shared.stop) {
        match tx.try_send(k) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                shared.attempted.fetch_add(1, Ordering::SeqCst);
                shared.fail(format!(
                    "churn #{k} at {:.3}s: not started, all {workers} workers busy with earlier connections",
                    started.elapsed().as_secs_f64()
                ));
            }
            Err(TrySendError::Disconnected(_)) => break,
        }
        k += 1;
    }
    // Dropping `tx` tells idle workers to finish.
}

fn churn_worker(
    rx: &Mutex<mpsc::Receiver<u64>>,
    target: SocketAddr,
    timeout: Duration,
    started: Instant,
    shared: &ChurnShared,
) {
    loop {
        let job = lock(rx).recv_timeout(STOP_POLL);
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let k = match job {
            Ok(k) => k,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        shared.attempted.fetch_add(1, Ordering::SeqCst);
        let at = started.elapsed();
        match churn_once(target, k, timeout) {
            Ok(backend) => {
                *lock(&shared.per_backend).entry(backend).or_default() += 1;
                shared.ok.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => shared.fail(format!(
                "churn #{k} started at {:.3}s: {e}",
                at.as_secs_f64()
            )),
        }
    }
}

fn churn_once(
    target: SocketAddr,
    k: u64,
    timeout: Duration,
) -> std::result::Result<String, String> {
    let (mut r, backend) = open_identity_conn(target, timeout)?;
    let msg = format!("rvchurn {k}\n");
    let mut line = String::new();
    echo_exchange(&mut r, &msg, &mut line, timeout)?;
    close_cleanly(r.get_ref(), CLOSE_WAIT.min(timeout));
    Ok(backend)
}

/// What happened to a [`ConnectionChurn`] stream.
///
/// Why: the restart test asserts `failed == 0` with a rate-sized
/// `attempted`, and prints the first failures (timestamped) when not.
#[derive(Debug, Clone, PartialEq)]
pub struct ChurnReport {
    /// Where the connections went (VIP or backend address).
    pub target: SocketAddr,
    /// Connections attempted (always `ok + failed`).
    pub attempted: u64,
    /// Connections that got identity and echo right and closed.
    pub ok: u64,
    /// Connections that failed at any step, or could not be started.
    pub failed: u64,
    /// The first [`MAX_STREAM_FAILURES`] failure descriptions.
    pub failures: Vec<String>,
    /// Successful connections per backend.
    pub per_backend: BTreeMap<String, usize>,
    /// Time from start to stop.
    pub elapsed: Duration,
}

impl ChurnReport {
    /// True when nothing failed and at least one connection was attempted.
    ///
    /// Why: the common assertion, `assert!(r.all_ok(), "{r}")`.
    pub fn all_ok(&self) -> bool {
        self.failed == 0 && self.attempted > 0 && self.ok == self.attempted
    }
}

impl fmt::Display for ChurnReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "connection churn to {}: {}/{} ok, {} failed, {:.2?}",
            self.target, self.ok, self.attempted, self.failed, self.elapsed
        )?;
        write_backends(f, &self.per_backend)?;
        write_failures(f, &self.failures, self.failed)
    }
}

// ---------------------------------------------------------------------------
// UdpSequence
// ---------------------------------------------------------------------------

struct SeqShared {
    stop_send: AtomicBool,
    stop_recv: AtomicBool,
    /// Datagrams handed to the kernel (or attempted) per flow; incremented
    /// before the send, so a reply can never be "ahead" of it.
    sent: Vec<AtomicU64>,
    send_errors: AtomicU64,
    received_unique: AtomicU64,
    errors: Mutex<Vec<String>>,
}

/// What one flow's receiver saw.
#[derive(Default)]
struct FlowSeen {
    got: Vec<u64>,
    duplicated: u64,
    wrong_source: u64,
    malformed: u64,
    /// Backends that answered, in order of first appearance.
    backends: Vec<String>,
}

impl FlowSeen {
    fn has(&self, seq: u64) -> bool {
        let (w, b) = ((seq / 64) as usize, seq % 64);
        self.got.get(w).is_some_and(|x| x & (1 << b) != 0)
    }

    /// Marks `seq`; false if it was already there.
    fn mark(&mut self, seq: u64) -> bool {
        let (w, b) = ((seq / 64) as usize, seq % 64);
        if self.got.len() <= w {
            self.got.resize(w + 1, 0);
        }
        let fresh = self.got[w] & (1 << b) == 0;
        self.got[w] |= 1 << b;
        fresh
    }
}

/// Numbered UDP datagrams over a fixed set of flows at a steady total rate,
/// with every reply checked off.
///
/// Why: UDP has no retransmission to hide a gap, so a numbered stream shows
/// exactly which datagrams a restart cost (none, for a zero-gap restart),
/// whether any came back twice, and whether replies carry the right source
/// address. Each flow is its own socket (own source port, so own flow for
/// the balancer); one sender thread sends round-robin over the flows, so
/// datagram `i` overall is flow `i % flows`, sequence `i / flows`, and a
/// loss run in that order maps directly to a time gap.
pub struct UdpSequence {
    target: SocketAddr,
    flows: usize,
    per_second: u32,
    started: Instant,
    shared: Arc<SeqShared>,
    sender: Option<JoinHandle<()>>,
    receivers: Vec<JoinHandle<FlowSeen>>,
    send_elapsed: Option<Duration>,
}

impl UdpSequence {
    /// Binds `flows` UDP sockets in `ns` and starts sending `per_second`
    /// datagrams per second in total to `target`, payload
    /// `"rvseq {flow} {seq}"`, with one receiver thread per socket.
    ///
    /// Why sockets are not `connect`ed: a connected socket would let the
    /// kernel drop replies from other addresses, hiding exactly the
    /// wrong-source bug (a reply not rewritten back to the VIP) this
    /// stream must catch.
    pub fn start(
        ns: &Netns,
        target: SocketAddr,
        flows: usize,
        per_second: u32,
    ) -> Result<UdpSequence> {
        ensure!(flows > 0, "UdpSequence needs at least one flow");
        ensure!(per_second > 0, "UdpSequence rate must be > 0");
        let socks = ns.within(|| -> Result<Vec<UdpSocket>> {
            (0..flows)
                .map(|i| {
                    let s = UdpSocket::bind(SocketAddr::new(unspecified(target), 0))
                        .with_context(|| format!("binding udp flow {i}"))?;
                    s.set_read_timeout(Some(STOP_POLL))?;
                    // A full send buffer must not wedge the sender for good.
                    s.set_write_timeout(Some(UDP_SEND_TIMEOUT))?;
                    Ok(s)
                })
                .collect()
        })??;
        let shared = Arc::new(SeqShared {
            stop_send: AtomicBool::new(false),
            stop_recv: AtomicBool::new(false),
            sent: (0..flows).map(|_| AtomicU64::new(0)).collect(),
            send_errors: AtomicU64::new(0),
            received_unique: AtomicU64::new(0),
            errors: Mutex::new(Vec::new()),
        });
        let socks: Vec<Arc<UdpSocket>> = socks.into_iter().map(Arc::new).collect();
        let started = Instant::now();
        let mut me = UdpSequence {
            target,
            flows,
            per_second,
            started,
            shared,
            sender: None,
            receivers: Vec::with_capacity(flows),
            send_elapsed: None,
        };
        for (flow, s) in socks.iter().enumerate() {
            let (s, shared) = (Arc::clone(s), Arc::clone(&me.shared));
            me.receivers.push(spawn_named("rv-seq-recv", move || {
                seq_receiver(flow, &s, target, &shared)
            })?);
        }
        let shared = Arc::clone(&me.shared);
        me.sender = Some(spawn_named("rv-seq-send", move || {
            seq_sender(&socks, target, per_second, started, &shared)
        })?);
        Ok(me)
    }

    /// `(sent so far, unique replies so far)`.
    ///
    /// Why: lets a restart test check that replies keep arriving while the
    /// daemon is down.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.shared
                .sent
                .iter()
                .map(|s| s.load(Ordering::SeqCst))
                .sum(),
            self.shared.received_unique.load(Ordering::SeqCst),
        )
    }

    /// Stops sending, waits up to `drain` for late replies (less if all
    /// are in), stops the receivers and reports.
    ///
    /// Why a drain: replies to the last datagrams are still in flight when
    /// sending stops; without waiting they would count as lost.
    pub fn stop(mut self, drain: Duration) -> SeqReport {
        self.stop_sender();
        let sent: u64 = self
            .shared
            .sent
            .iter()
            .map(|s| s.load(Ordering::SeqCst))
            .sum();
        let deadline = Instant::now() + drain;
        while self.shared.received_unique.load(Ordering::SeqCst) < sent && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5).min(drain));
        }
        let seen = self.stop_receivers();
        let sent_per_flow: Vec<u64> = self
            .shared
            .sent
            .iter()
            .map(|s| s.load(Ordering::SeqCst))
            .collect();
        let mut report = summarize(
            self.target,
            self.per_second,
            &sent_per_flow,
            &seen,
            self.send_elapsed.unwrap_or_default(),
        );
        report.send_errors = self.shared.send_errors.load(Ordering::SeqCst);
        report.errors = lock(&self.shared.errors).clone();
        report
    }

    fn stop_sender(&mut self) {
        self.shared.stop_send.store(true, Ordering::SeqCst);
        if let Some(s) = self.sender.take() {
            let _ = s.join();
            self.send_elapsed = Some(self.started.elapsed());
        }
    }

    fn stop_receivers(&mut self) -> Vec<FlowSeen> {
        self.shared.stop_recv.store(true, Ordering::SeqCst);
        let mut seen: Vec<FlowSeen> = self
            .receivers
            .drain(..)
            .map(|h| h.join().unwrap_or_default())
            .collect();
        seen.resize_with(self.flows, FlowSeen::default);
        seen
    }
}

impl Drop for UdpSequence {
    fn drop(&mut self) {
        self.stop_sender();
        self.stop_receivers();
    }
}

fn seq_sender(
    socks: &[Arc<UdpSocket>],
    target: SocketAddr,
    per_second: u32,
    started: Instant,
    shared: &SeqShared,
) {
    let flows = socks.len() as u64;
    let mut pacer = Pacer::rate(per_second);
    let mut i: u64 = 0;
    while pacer.wait(&shared.stop_send) {
        let (flow, seq) = ((i % flows) as usize, i / flows);
        shared.sent[flow].fetch_add(1, Ordering::SeqCst);
        let payload = format!("rvseq {flow} {seq}");
        if let Err(e) = socks[flow].send_to(payload.as_bytes(), target) {
            shared.send_errors.fetch_add(1, Ordering::SeqCst);
            push_capped(
                &shared.errors,
                format!(
                    "flow {flow} seq {seq} at {:.3}s: send: {e}",
                    started.elapsed().as_secs_f64()
                ),
            );
        }
        i += 1;
    }
}

fn seq_receiver(flow: usize, sock: &UdpSocket, target: SocketAddr, shared: &SeqShared) -> FlowSeen {
    let mut seen = FlowSeen::default();
    let mut buf = vec![0u8; 2048];
    while !shared.stop_recv.load(Ordering::SeqCst) {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => {
                push_capped(&shared.errors, format!("flow {flow}: recv: {e}"));
                std::thread::sleep(STOP_POLL);
                continue;
            }
        };
        let reply = String::from_utf8_lossy(&buf[..n]);
        if from != target {
            seen.wrong_source += 1;
            push_capped(
                &shared.errors,
                format!("flow {flow}: reply from {from}, expected {target}: {reply:?}"),
            );
            continue;
        }
        let sent = shared.sent[flow].load(Ordering::SeqCst);
        let parsed = parse_seq_reply(&reply).filter(|&(_, f, s)| f == flow && s < sent);
        let Some((backend, _, seq)) = parsed else {
            seen.malformed += 1;
            push_capped(
                &shared.errors,
                format!("flow {flow}: unexpected reply {reply:?}"),
            );
            continue;
        };
        if !seen.backends.iter().any(|b| b == backend) {
            seen.backends.push(backend.to_string());
        }
        if seen.mark(seq) {
            shared.received_unique.fetch_add(1, Ordering::SeqCst);
        } else {
            seen.duplicated += 1;
        }
    }
    seen
}

/// Turns per-flow sent counts and receptions into a report (pure, so the
/// accounting is unit-tested without a network).
fn summarize(
    target: SocketAddr,
    per_second: u32,
    sent_per_flow: &[u64],
    seen: &[FlowSeen],
    elapsed: Duration,
) -> SeqReport {
    let flows = sent_per_flow.len();
    let mut r = SeqReport {
        target,
        flows,
        per_second,
        sent: sent_per_flow.iter().sum(),
        received_unique: 0,
        lost: 0,
        duplicated: 0,
        wrong_source: 0,
        malformed: 0,
        send_errors: 0,
        per_flow_lost: vec![0; flows],
        lost_ranges: Vec::new(),
        lost_ranges_total: 0,
        max_consecutive_lost: 0,
        per_backend: BTreeMap::new(),
        flows_switched_backend: 0,
        errors: Vec::new(),
        elapsed,
    };
    for (flow, (&sent, s)) in sent_per_flow.iter().zip(seen).enumerate() {
        r.duplicated += s.duplicated;
        r.wrong_source += s.wrong_source;
        r.malformed += s.malformed;
        if let Some(first) = s.backends.first() {
            *r.per_backend.entry(first.clone()).or_default() += 1;
        }
        if s.backends.len() > 1 {
            r.flows_switched_backend += 1;
        }
        let mut run: Option<u64> = None;
        for seq in 0..=sent {
            let lost = seq < sent && !s.has(seq);
            if lost {
                r.per_flow_lost[flow] += 1;
                run.get_or_insert(seq);
            } else if let Some(first) = run.take() {
                r.lost_ranges_total += 1;
                if r.lost_ranges.len() < MAX_STREAM_FAILURES {
                    r.lost_ranges.push((flow, first, seq - 1));
                }
            }
        }
    }
    r.lost = r.per_flow_lost.iter().sum();
    r.received_unique = r.sent - r.lost;
    // Longest run of lost datagrams in sending order (i -> flow i % flows,
    // seq i / flows).
    let mut current = 0u64;
    for i in 0..r.sent {
        let (flow, seq) = ((i % flows as u64) as usize, i / flows as u64);
        if seq < sent_per_flow[flow] && !seen[flow].has(seq) {
            current += 1;
            r.max_consecutive_lost = r.max_consecutive_lost.max(current);
        } else {
            current = 0;
        }
    }
    r
}

/// What happened to a [`UdpSequence`] stream.
///
/// Why so detailed: "lost 37" says a restart was not zero-gap;
/// `lost_ranges` and `max_consecutive_lost` say when and for how long, and
/// `duplicated`/`wrong_source`/`flows_switched_backend` catch the subtler
/// ways a datapath can misbehave across a restart.
#[derive(Debug, Clone, PartialEq)]
pub struct SeqReport {
    /// Where the datagrams went (VIP or backend address).
    pub target: SocketAddr,
    /// Number of flows (sockets).
    pub flows: usize,
    /// Configured total send rate.
    pub per_second: u32,
    /// Datagrams sent (attempted) over all flows.
    pub sent: u64,
    /// Distinct (flow, seq) pairs answered from `target`.
    pub received_unique: u64,
    /// `sent - received_unique`. A reply from a wrong source does not count
    /// as received, so it shows up here as well as in `wrong_source`.
    pub lost: u64,
    /// Replies for an already answered (flow, seq).
    pub duplicated: u64,
    /// Replies whose source address was not `target`.
    pub wrong_source: u64,
    /// Replies from `target` that did not parse, or named another flow or a
    /// sequence number never sent.
    pub malformed: u64,
    /// `send_to` calls that failed (counted in `sent`, and normally lost).
    pub send_errors: u64,
    /// Lost datagrams per flow, indexed by flow.
    pub per_flow_lost: Vec<u64>,
    /// The first [`MAX_STREAM_FAILURES`] runs of lost datagrams as
    /// `(flow, first_seq, last_seq)`, inclusive, by flow then sequence.
    pub lost_ranges: Vec<(usize, u64, u64)>,
    /// Number of loss runs in total (`lost_ranges` keeps only the first).
    pub lost_ranges_total: u64,
    /// Longest run of consecutive lost datagrams in sending order; divided
    /// by `per_second` it approximates the longest outage.
    pub max_consecutive_lost: u64,
    /// Flows per backend, by the backend that answered a flow first.
    pub per_backend: BTreeMap<String, usize>,
    /// Flows answered by more than one backend (a flow that moved).
    pub flows_switched_backend: usize,
    /// The first [`MAX_STREAM_FAILURES`] send/receive/reply problems.
    pub errors: Vec<String>,
    /// Time spent sending (start to stop of the sender).
    pub elapsed: Duration,
}

impl SeqReport {
    /// True when every datagram came back exactly once from `target` and
    /// at least one was sent.
    ///
    /// Why: the common assertion, `assert!(r.all_ok(), "{r}")`.
    pub fn all_ok(&self) -> bool {
        self.sent > 0
            && self.lost == 0
            && self.duplicated == 0
            && self.wrong_source == 0
            && self.malformed == 0
            && self.send_errors == 0
    }

    /// Longest outage as seen by this stream:
    /// `max_consecutive_lost / per_second`.
    ///
    /// Why: a restart test reads "lost 0.42 s of traffic" more easily than
    /// a datagram count.
    pub fn longest_gap(&self) -> Duration {
        Duration::from_secs_f64(
            self.max_consecutive_lost as f64 / f64::from(self.per_second.max(1)),
        )
    }
}

impl fmt::Display for SeqReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "udp sequence to {}: {} flows at {}/s, sent {}, received {}, lost {}, duplicated {}, \
             wrong source {}, malformed {}, send errors {}, longest gap {} ({:.3?}), {:.2?}",
            self.target,
            self.flows,
            self.per_second,
            self.sent,
            self.received_unique,
            self.lost,
            self.duplicated,
            self.wrong_source,
            self.malformed,
            self.send_errors,
            self.max_consecutive_lost,
            self.longest_gap(),
            self.elapsed
        )?;
        write_backends(f, &self.per_backend)?;
        if self.flows_switched_backend > 0 {
            writeln!(
                f,
                "  ! {} flows were answered by more than one backend",
                self.flows_switched_backend
            )?;
        }
        if self.lost > 0 {
            let per: Vec<String> = self.per_flow_lost.iter().map(u64::to_string).collect();
            writeln!(f, "  lost per flow: {}", per.join(" "))?;
        }
        for (flow, a, b) in &self.lost_ranges {
            writeln!(f, "  lost flow {flow} seq {a}..={b} ({})", b - a + 1)?;
        }
        let more = self
            .lost_ranges_total
            .saturating_sub(self.lost_ranges.len() as u64);
        if more > 0 {
            writeln!(f, "  lost ... and {more} more ranges")?;
        }
        for e in &self.errors {
            writeln!(f, "  ! {e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacer_keeps_absolute_deadlines() {
        let stop = AtomicBool::new(false);
        let mut p = Pacer::every(Duration::from_millis(2), Duration::ZERO);
        let t0 = Instant::now();
        for _ in 0..100 {
            assert!(p.wait(&stop));
            // Work between ticks must not stretch the schedule.
            std::thread::sleep(Duration::from_millis(1));
        }
        let el = t0.elapsed();
        // Tick 99 is due at 198 ms; fixed sleeps would need >= 300 ms.
        assert!(el >= Duration::from_millis(198), "{el:?}");
        assert!(el < Duration::from_millis(290), "{el:?}");

        let mut r = Pacer::rate(1000);
        let t0 = Instant::now();
        for _ in 0..201 {
            assert!(r.wait(&stop));
        }
        let el = t0.elapsed();
        assert!(
            el >= Duration::from_millis(200) && el < Duration::from_millis(290),
            "{el:?}"
        );
    }

    #[test]
    fn pacer_drops_ticks_after_a_long_stall_and_stops() {
        let stop = AtomicBool::new(false);
        let mut p = Pacer::rate(1000);
        assert!(p.wait(&stop));
        std::thread::sleep(CATCH_UP + Duration::from_millis(50));
        assert!(p.wait(&stop));
        // No burst of ~300 catch-up ticks: the next one is a period away.
        let t0 = Instant::now();
        assert!(p.wait(&stop));
        assert!(
            t0.elapsed() >= Duration::from_micros(500),
            "{:?}",
            t0.elapsed()
        );
        stop.store(true, Ordering::SeqCst);
        let mut slow = Pacer::every(Duration::from_secs(60), Duration::from_secs(60));
        let t0 = Instant::now();
        assert!(!slow.wait(&stop));
        assert!(t0.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn parses_identity_and_seq_replies() {
        assert_eq!(identity_name("b1 10.200.0.2:4242\n"), Some("b1"));
        assert_eq!(identity_name("b1 10.200.0.2:4242"), None, "no newline");
        assert_eq!(identity_name("b1 junk\n"), None);
        assert_eq!(
            parse_seq_reply("b2 [fd00:200::2]:5000 rvseq 3 17"),
            Some(("b2", 3, 17))
        );
        assert_eq!(parse_seq_reply("b2 10.0.0.1:1 rvseq 3"), None);
        assert_eq!(parse_seq_reply("b2 10.0.0.1:1 rvseq 3 4 5"), None);
        assert_eq!(parse_seq_reply("b2 10.0.0.1:1 other 3 4"), None);
        assert_eq!(parse_seq_reply("b2 nope rvseq 3 4"), None);
    }

    fn seen_with(seqs: &[u64], backends: &[&str]) -> FlowSeen {
        let mut s = FlowSeen::default();
        for &q in seqs {
            assert!(s.mark(q));
        }
        s.backends = backends.iter().map(|b| b.to_string()).collect();
        s
    }

    #[test]
    fn summary_counts_losses_ranges_and_gap() {
        let t: SocketAddr = "10.200.100.1:53".parse().unwrap();
        // 2 flows, 10 datagrams each (20 sent, i = seq * 2 + flow).
        // Flow 0 lost 3..=5, flow 1 lost 4..=5 and 9.
        let f0: Vec<u64> = (0..10).filter(|q| !(3..=5).contains(q)).collect();
        let f1: Vec<u64> = (0..10)
            .filter(|q| !(4..=5).contains(q) && *q != 9)
            .collect();
        let mut s1 = seen_with(&f1, &["b2", "b3"]);
        assert!(!s1.mark(0));
        s1.duplicated += 1;
        let seen = vec![seen_with(&f0, &["b1"]), s1];
        let r = summarize(t, 100, &[10, 10], &seen, Duration::from_secs(1));
        assert_eq!(r.sent, 20);
        assert_eq!(r.lost, 6);
        assert_eq!(r.received_unique, 14);
        assert_eq!(r.per_flow_lost, vec![3, 3]);
        assert_eq!(r.lost_ranges, vec![(0, 3, 5), (1, 4, 5), (1, 9, 9)]);
        assert_eq!(r.lost_ranges_total, 3);
        // Sending order: i=6 (f0 s3), 7 (f1 s3, ok), 8..=11 (f0 s4, f1 s4,
        // f0 s5, f1 s5) lost: a run of 4.
        assert_eq!(r.max_consecutive_lost, 4);
        assert_eq!(r.longest_gap(), Duration::from_millis(40));
        assert_eq!(r.duplicated, 1);
        assert_eq!(r.flows_switched_backend, 1);
        assert_eq!(r.per_backend["b1"], 1);
        assert_eq!(r.per_backend["b2"], 1);
        assert!(!r.all_ok());
        let text = r.to_string();
        assert!(text.contains("lost 6"), "{text}");
        assert!(text.contains("seq 3..=5 (3)"), "{text}");
        assert!(text.contains("more than one backend"), "{text}");

        let all: Vec<u64> = (0..5).collect();
        let ok = summarize(
            t,
            10,
            &[5, 4],
            &[seen_with(&all, &["b1"]), seen_with(&all[..4], &["b1"])],
            Duration::ZERO,
        );
        assert!(ok.all_ok(), "{ok}");
        assert_eq!(ok.sent, 9);
        assert!(ok.lost_ranges.is_empty());
        assert_eq!(ok.max_consecutive_lost, 0);
    }

    #[test]
    fn lost_ranges_are_capped() {
        let t: SocketAddr = "10.200.100.1:53".parse().unwrap();
        let even: Vec<u64> = (0..100).filter(|q| q % 2 == 0).collect();
        let r = summarize(t, 100, &[100], &[seen_with(&even, &["b1"])], Duration::ZERO);
        assert_eq!(r.lost, 50);
        assert_eq!(r.lost_ranges.len(), MAX_STREAM_FAILURES);
        assert_eq!(r.lost_ranges_total, 50);
        assert!(r.to_string().contains("and 34 more ranges"));
    }

    #[test]
    fn reports_display_failures() {
        let t: SocketAddr = "10.200.1.11:8080".parse().unwrap();
        let r = LongLivedReport {
            target: t,
            connections: 2,
            exchanges: 10,
            failed_connections: 1,
            failures: vec!["conn #1 boom".into()],
            per_backend: [("b1".to_string(), 2)].into(),
            max_rtt: Duration::from_millis(3),
            elapsed: Duration::from_secs(1),
        };
        assert!(!r.all_ok());
        let text = r.to_string();
        assert!(
            text.contains("1 failed") && text.contains("! conn #1 boom"),
            "{text}"
        );
        assert!(text.contains("b1=2"), "{text}");
        let c = ChurnReport {
            target: t,
            attempted: 20,
            ok: 20,
            failed: 0,
            failures: Vec::new(),
            per_backend: [("b1".to_string(), 20)].into(),
            elapsed: Duration::from_secs(1),
        };
        assert!(c.all_ok());
        assert!(c.to_string().contains("20/20 ok"), "{c}");
    }
}
