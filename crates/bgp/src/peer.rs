//! The tokio task behind each configured peer: connects (Idle, Connect,
//! Active with capped exponential backoff), then drives a [`Session`] over
//! the TCP connection until it ends, and starts over.
//!
//! Why the split: everything protocol-related is in `session.rs` and fully
//! testable without sockets; this file is only sockets, clocks and status
//! bookkeeping.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::PeerConfig;
use crate::md5::set_tcp_md5;
use crate::session::{Routes, Session, SessionConfig, State};

/// How long one TCP connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// First connect-retry delay.
pub const RETRY_INITIAL: Duration = Duration::from_secs(1);
/// Cap of the exponential connect-retry backoff.
pub const RETRY_MAX: Duration = Duration::from_secs(30);
/// A session that stayed Established this long resets the backoff.
pub const STABLE_SESSION: Duration = Duration::from_secs(30);
/// How long one write may block before the connection is considered dead.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Text of the Cease we send on shutdown (shown by most peers).
pub const SHUTDOWN_TEXT: &str = "rivora BGP speaker shutting down";
/// Text of the Cease we send to a peer removed by a reconfiguration.
pub const REMOVED_TEXT: &str = "rivora BGP speaker: peer removed from the configuration";
/// Text of the Cease we send to a peer whose configuration changed, before
/// reconnecting with the new one.
pub const CHANGED_TEXT: &str = "rivora BGP speaker: peer configuration changed, reconnecting";

/// Speaker-wide settings every peer task needs.
#[derive(Debug, Clone, Copy)]
pub struct Global {
    pub local_as: u32,
    pub router_id: std::net::Ipv4Addr,
}

/// Status shared between a peer task and `Speaker::peers`.
#[derive(Debug)]
pub struct PeerShared {
    pub cfg: PeerConfig,
    status: Mutex<Status>,
}

#[derive(Debug, Clone)]
struct Status {
    state: &'static str,
    established_at: Option<Instant>,
    prefixes_sent: usize,
    last_error: Option<String>,
}

impl PeerShared {
    pub fn new(cfg: PeerConfig) -> PeerShared {
        PeerShared {
            cfg,
            status: Mutex::new(Status {
                state: "Idle",
                established_at: None,
                prefixes_sent: 0,
                last_error: None,
            }),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Status) -> R) -> R {
        let mut g = self.status.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    pub fn set_error(&self, e: String) {
        self.with(|s| s.last_error = Some(e));
    }

    fn set_state(&self, state: &'static str) {
        self.with(|s| {
            s.state = state;
            if state != "Established" {
                s.established_at = None;
                s.prefixes_sent = 0;
            }
        });
    }

    pub fn snapshot(&self) -> crate::PeerStatus {
        let s = self.with(|s| s.clone());
        crate::PeerStatus {
            address: self.cfg.address,
            remote_as: self.cfg.remote_as,
            state: s.state.to_string(),
            uptime_secs: s.established_at.map(|t| t.elapsed().as_secs()),
            prefixes_sent: s.prefixes_sent,
            last_error: s.last_error,
        }
    }
}

/// The route set as this peer is to be told it: every route with the
/// peer's configured communities merged into its own.
///
/// Why here and not in the session: the session stays a pure function of
/// the routes it is given, and per-peer tagging is configuration. The merged
/// set is cached per route set (the speaker replaces the `Arc` on every
/// change), so reading the peer's bytes does not rebuild it.
struct PeerRoutes {
    /// The peer's communities, sorted and deduplicated.
    extra: Vec<u32>,
    /// The speaker's set `merged` was built from.
    seen: Option<Arc<Routes>>,
    merged: Arc<Routes>,
}

impl PeerRoutes {
    fn new(communities: &[u32]) -> PeerRoutes {
        let mut extra = communities.to_vec();
        extra.sort_unstable();
        extra.dedup();
        PeerRoutes {
            extra,
            seen: None,
            merged: Arc::new(Routes::new()),
        }
    }

    fn view(&mut self, current: Arc<Routes>) -> Arc<Routes> {
        if self.extra.is_empty() {
            return current;
        }
        if let Some(seen) = &self.seen
            && Arc::ptr_eq(seen, &current)
        {
            return Arc::clone(&self.merged);
        }
        self.merged = Arc::new(with_communities(&current, &self.extra));
        self.seen = Some(current);
        Arc::clone(&self.merged)
    }
}

/// `routes` with `extra` added to every route's communities (sorted and
/// deduplicated, as `Speaker::set_routes` normalises them).
fn with_communities(routes: &Routes, extra: &[u32]) -> Routes {
    routes
        .iter()
        .map(|(p, a)| {
            let mut a = a.clone();
            a.communities.extend_from_slice(extra);
            (*p, a.normalized())
        })
        .collect()
}

/// Connect-retry delay before attempt number `attempt` (1-based): doubles
/// from [`RETRY_INITIAL`] up to [`RETRY_MAX`], times a jitter in [0.75, 1]
/// (RFC 4271 10) so peers restarted together do not retry in lockstep.
pub fn backoff(attempt: u32, seed: u64) -> Duration {
    let exp = attempt.saturating_sub(1).min(16);
    let base = RETRY_INITIAL.saturating_mul(1 << exp).min(RETRY_MAX);
    // splitmix64 of the seed: cheap, deterministic per call site.
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let frac = 0.75 + 0.25 * ((z >> 11) as f64 / (1u64 << 53) as f64);
    base.mul_f64(frac)
}

enum Outcome {
    /// The speaker or this peer is stopping; the task ends.
    Stopped,
    /// The connection is over; retry.
    Ended { established_for: Option<Duration> },
}

/// What ends a peer task: the speaker stopping (shutdown or drop) or this
/// peer alone being stopped (removed or changed by a reconfiguration).
///
/// Why two channels: a reconfiguration must stop one peer without touching
/// the others, while shutdown must still reach every task, including one
/// started by a reconfiguration racing with it.
pub struct Stop {
    /// The speaker-wide signal.
    pub speaker: watch::Receiver<bool>,
    /// This peer's own signal, carrying the text of the Cease to send.
    pub peer: watch::Receiver<Option<&'static str>>,
}

impl Stop {
    fn is_set(&self) -> bool {
        *self.speaker.borrow() || self.peer.borrow().is_some()
    }
}

/// The peer task: runs until the speaker or this peer is stopped.
pub async fn run(
    global: Global,
    shared: Arc<PeerShared>,
    mut routes: watch::Receiver<Arc<Routes>>,
    mut stop: Stop,
) {
    let peer = SocketAddr::new(shared.cfg.address, shared.cfg.port);
    let mut attempt: u32 = 0;
    loop {
        if stop.is_set() {
            break;
        }
        shared.set_state("Connect");
        debug!(%peer, "BGP: connecting");
        let conn = tokio::select! {
            r = connect(&shared.cfg) => r,
            _ = stopped(&mut stop) => break,
        };
        match conn {
            Ok(stream) => {
                match run_session(global, &shared, stream, &mut routes, &mut stop).await {
                    Outcome::Stopped => break,
                    Outcome::Ended { established_for } => {
                        if established_for.is_some_and(|d| d >= STABLE_SESSION) {
                            attempt = 0;
                        }
                    }
                }
            }
            Err(e) => {
                warn!(%peer, "BGP: {e}");
                shared.set_error(e);
            }
        }
        attempt = attempt.saturating_add(1);
        shared.set_state("Active");
        let seed = (u64::from(global.router_id.to_bits()) << 16)
            ^ u64::from(shared.cfg.port)
            ^ addr_bits(shared.cfg.address)
            ^ now_nanos();
        let delay = backoff(attempt, seed);
        debug!(%peer, "BGP: retrying in {:.1} s", delay.as_secs_f64());
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stopped(&mut stop) => break,
        }
    }
    shared.set_state("Idle");
}

fn addr_bits(a: IpAddr) -> u64 {
    match a {
        IpAddr::V4(v) => u64::from(v.to_bits()),
        IpAddr::V6(v) => {
            let b = v.to_bits();
            (b as u64) ^ ((b >> 64) as u64)
        }
    }
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// One TCP connection attempt, with TCP-MD5 and the local address applied.
/// Errors are complete sentences for the log and `last_error`.
async fn connect(cfg: &PeerConfig) -> Result<TcpStream, String> {
    let peer = SocketAddr::new(cfg.address, cfg.port);
    let sock = match cfg.address {
        IpAddr::V4(_) => TcpSocket::new_v4(),
        IpAddr::V6(_) => TcpSocket::new_v6(),
    }
    .map_err(|e| format!("cannot create a socket for {peer}: {e}"))?;
    if let Some(pw) = &cfg.password {
        set_tcp_md5(sock.as_raw_fd(), cfg.address, pw.as_bytes()).map_err(|e| {
            format!(
                "cannot enable TCP-MD5 for {peer} (setsockopt TCP_MD5SIG: {e}); \
                 is CONFIG_TCP_MD5SIG enabled in this kernel?"
            )
        })?;
    }
    if let Some(local) = cfg.local_address {
        sock.bind(SocketAddr::new(local, 0))
            .map_err(|e| format!("cannot bind local address {local} for {peer}: {e}"))?;
    }
    match tokio::time::timeout(CONNECT_TIMEOUT, sock.connect(peer)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(match e.kind() {
            std::io::ErrorKind::ConnectionRefused => format!(
                "TCP connection to {peer} refused (is the peer's BGP daemon running and listening?)"
            ),
            _ => format!("TCP connection to {peer} failed: {e}"),
        }),
        Err(_) => Err(if cfg.password.is_some() {
            format!(
                "TCP connection to {peer} timed out after {} s; TCP-MD5 is configured for \
                 this peer, and a peer whose MD5 password differs (or that has none) drops \
                 our SYNs without answering: check that both sides use the same password",
                CONNECT_TIMEOUT.as_secs()
            )
        } else {
            format!(
                "TCP connection to {peer} timed out after {} s (peer unreachable, or it \
                 requires a TCP-MD5 password that is not configured here)",
                CONNECT_TIMEOUT.as_secs()
            )
        }),
    }
}

async fn write_out(wr: &mut OwnedWriteHalf, session: &mut Session) -> Result<(), String> {
    let bytes = session.take_output();
    if bytes.is_empty() {
        return Ok(());
    }
    match tokio::time::timeout(WRITE_TIMEOUT, wr.write_all(&bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("write failed: {e}")),
        Err(_) => Err(format!(
            "write blocked for {} s (peer not reading)",
            WRITE_TIMEOUT.as_secs()
        )),
    }
}

/// Closes after our last message: FIN first, then read until the peer
/// closes too (briefly), so a NOTIFICATION is not lost to a reset.
async fn close_gracefully(mut wr: OwnedWriteHalf, mut rd: OwnedReadHalf) {
    let _ = wr.shutdown().await;
    let drain = async {
        let mut buf = [0u8; 4096];
        while let Ok(n) = rd.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

/// Resolves once the speaker or this peer is asked to stop (or the sender
/// is gone), with the text of the Cease to send.
async fn stopped(stop: &mut Stop) -> &'static str {
    tokio::select! {
        _ = stop.speaker.wait_for(|s| *s) => SHUTDOWN_TEXT,
        r = stop.peer.wait_for(|s| s.is_some()) => {
            // The guard is not Send: copy the text out right here.
            r.ok().and_then(|g| *g).unwrap_or(SHUTDOWN_TEXT)
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

async fn run_session(
    global: Global,
    shared: &PeerShared,
    stream: TcpStream,
    routes: &mut watch::Receiver<Arc<Routes>>,
    stop: &mut Stop,
) -> Outcome {
    let cfg = &shared.cfg;
    let peer = SocketAddr::new(cfg.address, cfg.port);
    let local = stream.local_addr().ok();
    let local_v4 = match local.map(|l| l.ip()) {
        Some(IpAddr::V4(a)) => Some(a),
        _ => None,
    };
    let local_v6 = match local.map(|l| l.ip()) {
        // A link-local address is no use as a global next hop.
        Some(IpAddr::V6(a)) if !a.is_unicast_link_local() && !a.is_unspecified() => Some(a),
        _ => None,
    };
    let scfg = SessionConfig {
        local_as: global.local_as,
        router_id: global.router_id,
        remote_as: cfg.remote_as,
        hold_time: cfg.hold_time,
        next_hop_v4: cfg.next_hop_v4.or(local_v4),
        next_hop_v6: cfg.next_hop_v6.or(local_v6),
    };
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let mut session = Session::new(scfg, Instant::now());
    let mut peer_routes = PeerRoutes::new(&cfg.communities);
    shared.set_state("OpenSent");
    info!(%peer, local = ?local, "BGP: TCP connected, OPEN sent");
    let mut established_at: Option<Instant> = None;
    let mut buf = vec![0u8; 16 * 1024];
    let mut io_error: Option<String> = write_out(&mut wr, &mut session).await.err();
    while io_error.is_none() {
        tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(0) => io_error = Some("the peer closed the TCP connection".to_string()),
                Ok(n) => {
                    // `borrow`, not `borrow_and_update`: the session only
                    // uses the routes here when it becomes Established (the
                    // full table); a change that arrived meanwhile must stay
                    // unseen so the `changed()` branch still sends it
                    // (sync_routes diffs against the Adj-RIB-Out, so a
                    // change already covered by the full table sends
                    // nothing).
                    let current = peer_routes.view(routes.borrow().clone());
                    session.receive(&buf[..n], Instant::now(), &current);
                }
                Err(e) => io_error = Some(format!("read failed: {e}")),
            },
            _ = sleep_until(session.next_deadline()) => session.tick(Instant::now()),
            r = routes.changed() => {
                if r.is_err() {
                    // The speaker is gone; behave as on shutdown.
                    session.shutdown(SHUTDOWN_TEXT, Instant::now());
                } else {
                    let current = peer_routes.view(routes.borrow_and_update().clone());
                    session.sync_routes(&current, Instant::now());
                }
            }
            text = stopped(stop) => {
                let sent = session.prefixes_sent();
                session.shutdown(text, Instant::now());
                if let Err(e) = write_out(&mut wr, &mut session).await {
                    warn!(%peer, "BGP: could not send withdrawals and Cease on shutdown: {e}");
                } else {
                    info!(%peer, withdrawn = sent, "BGP: routes withdrawn, Cease sent");
                }
                close_gracefully(wr, rd).await;
                return Outcome::Stopped;
            }
        }
        if let Err(e) = write_out(&mut wr, &mut session).await {
            io_error = Some(e);
        }
        for note in session.take_notes() {
            warn!(%peer, "BGP: {note}");
            shared.set_error(note);
        }
        let state = session.state();
        if state == State::Established && established_at.is_none() {
            established_at = Some(Instant::now());
            let n = session.negotiated().copied();
            info!(
                %peer,
                hold_time = n.map(|n| n.hold_time),
                ipv4 = n.map(|n| n.ipv4),
                ipv6 = n.map(|n| n.ipv6),
                prefixes = session.prefixes_sent(),
                "BGP: session Established"
            );
            shared.with(|s| s.established_at = Some(Instant::now()));
        }
        if state != State::Closed {
            shared.with(|s| s.state = state.name());
        }
        if state == State::Established {
            let n = session.prefixes_sent();
            shared.with(|s| s.prefixes_sent = n);
        }
        if let Some(c) = session.closed() {
            let reason = c.reason.clone();
            warn!(%peer, "BGP: session closed: {reason}");
            shared.set_error(reason);
            close_gracefully(wr, rd).await;
            return Outcome::Ended {
                established_for: established_at.map(|t| t.elapsed()),
            };
        }
    }
    let reason = io_error.unwrap_or_default();
    warn!(%peer, state = session.state().name(), "BGP: connection lost: {reason}");
    shared.set_error(format!(
        "connection lost in {}: {reason}",
        session.state().name()
    ));
    Outcome::Ended {
        established_for: established_at.map(|t| t.elapsed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Prefix, RouteAttrs};

    fn routes(list: &[(&str, &[u32])]) -> Routes {
        list.iter()
            .map(|(p, c)| {
                (
                    p.parse().unwrap(),
                    RouteAttrs::with_communities(c.iter().copied()),
                )
            })
            .collect()
    }

    #[test]
    fn peer_communities_are_merged_sorted_and_deduplicated() {
        let mut v = PeerRoutes::new(&[9, 2, 9]);
        let r = Arc::new(routes(&[
            ("203.0.113.10/32", &[5, 2]),
            ("2001:db8:100::10/128", &[]),
        ]));
        let got = v.view(Arc::clone(&r));
        assert_eq!(
            *got,
            routes(&[
                ("203.0.113.10/32", &[2, 5, 9]),
                ("2001:db8:100::10/128", &[2, 9]),
            ])
        );
        // The speaker's own set is untouched.
        assert_eq!(
            r[&"203.0.113.10/32".parse::<Prefix>().unwrap()].communities,
            [5, 2]
        );
    }

    #[test]
    fn merged_set_is_rebuilt_only_when_the_route_set_changes() {
        let mut v = PeerRoutes::new(&[7]);
        let r = Arc::new(routes(&[("203.0.113.10/32", &[])]));
        let a = v.view(Arc::clone(&r));
        let b = v.view(Arc::clone(&r));
        assert!(Arc::ptr_eq(&a, &b), "same set, same merged Arc");
        let r2 = Arc::new(routes(&[("203.0.113.11/32", &[])]));
        let c = v.view(r2);
        assert_eq!(*c, routes(&[("203.0.113.11/32", &[7])]));
    }

    #[test]
    fn without_peer_communities_the_set_is_passed_through() {
        let mut v = PeerRoutes::new(&[]);
        let r = Arc::new(routes(&[("203.0.113.10/32", &[1])]));
        assert!(Arc::ptr_eq(&v.view(Arc::clone(&r)), &r));
    }
}
