//! Rivora's BGP-4 speaker: announces VIPs as /32 and /128 routes.
//!
//! Why a speaker of our own: a Rivora node only ever *announces* a handful
//! of host routes (the VIPs it has healthy backends for) and withdraws them
//! when health changes. That needs a small, well-tested subset of BGP that
//! runs inside `rivorad` on its tokio runtime, not a routing daemon with its
//! own configuration language and lifecycle.
//!
//! What it does: RFC 4271 sessions to several peers (iBGP and eBGP) with the
//! capabilities 4-octet AS (RFC 6793), multiprotocol IPv4 and IPv6 unicast
//! (RFC 4760) and route refresh (RFC 2918); hold and keepalive timers; connect
//! retry with capped exponential backoff; optional TCP-MD5 (RFC 2385) per
//! peer; optional communities (RFC 1997) per route and per peer (a peer's
//! [`PeerConfig::communities`] are added to every route it is sent). It
//! connects actively and never listens; incoming routes are validated and
//! ignored.
//!
//! Configuration changes are applied per peer by [`Speaker::reconfigure`]:
//! a peer added, changed (in any field) or removed gets its session started,
//! reset or closed, and every other session is left alone, so editing one
//! Kubernetes BGPPeer does not flap the sessions to the other routers. Only
//! a new `local_as` or `router_id` needs a new speaker ([`NeedsRestart`]).
//!
//! ```no_run
//! # async fn demo() {
//! use std::collections::BTreeMap;
//! use rivora_bgp::{PeerConfig, Prefix, RouteAttrs, Speaker, SpeakerConfig};
//!
//! let mut config = SpeakerConfig {
//!     local_as: 65010,
//!     router_id: "192.0.2.1".parse().unwrap(),
//!     peers: vec![PeerConfig::new("192.0.2.254".parse().unwrap(), 65000)],
//! };
//! let speaker = Speaker::start(config.clone());
//! let mut routes = BTreeMap::new();
//! routes.insert(Prefix::host("203.0.113.10".parse().unwrap()), RouteAttrs::default());
//! speaker.set_routes(routes);
//! // A second router; the first session stays up.
//! config.peers.push(PeerConfig::new("192.0.2.253".parse().unwrap(), 65000));
//! match speaker.reconfigure(config).await {
//!     Ok(done) => tracing::info!("{done}"),
//!     Err(e) => tracing::warn!("{e}"), // shut down, start a new speaker
//! }
//! // ... later
//! speaker.shutdown().await;
//! # }
//! ```
//!
//! Modules: [`msg`] is the wire format (pure), [`session`] the per-connection
//! state machine (pure, driven by bytes and clock readings; public so that it
//! can be fuzzed and tested without sockets), `peer` the tokio task per peer
//! (which also merges the peer's communities into the routes it hands its
//! session).

#![warn(missing_docs)]

mod md5;
pub mod msg;
mod peer;
mod prefix;
pub mod session;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use prefix::{Prefix, PrefixError};

/// Default BGP port.
pub const DEFAULT_PORT: u16 = 179;
/// Default proposed hold time in seconds (RFC 4271 suggests 90).
pub const DEFAULT_HOLD_TIME: u16 = 90;
/// How long [`Speaker::shutdown`] waits for peers to say goodbye.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Speaker-wide configuration.
///
/// Why this shape: it is what an operator writes in `rivorad`'s config (one
/// local AS and router ID per node, a list of peers), deserialisable as is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeakerConfig {
    /// Our AS number (4-octet capable; 1..=4294967295).
    pub local_as: u32,
    /// Our BGP identifier; must not be 0.0.0.0. Conventionally a node IPv4.
    pub router_id: Ipv4Addr,
    /// The peers to connect to.
    #[serde(default)]
    pub peers: Vec<PeerConfig>,
}

/// One BGP neighbour.
///
/// Why each field: `address`/`port` is where we connect (we never listen),
/// `remote_as` decides iBGP vs eBGP and is checked against the peer's OPEN,
/// `password` enables TCP-MD5, `hold_time` is our proposal (the session uses
/// the smaller of both), the next hops override the session's own addresses
/// (needed to announce IPv6 over an IPv4 session and vice versa, or to point
/// traffic elsewhere), `local_address` pins the source address,
/// `communities` tags everything sent to this peer (what a Kubernetes
/// BGPPeer's `spec.communities` asks for).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// The peer's address.
    pub address: IpAddr,
    /// The peer's AS; equal to `local_as` means iBGP.
    pub remote_as: u32,
    /// The peer's BGP port (default 179).
    #[serde(default = "default_port")]
    pub port: u16,
    /// TCP-MD5 password (RFC 2385), at most 80 bytes.
    #[serde(default)]
    pub password: Option<String>,
    /// Proposed hold time in seconds: 0 (no keepalives) or 3 and more
    /// (default 90).
    #[serde(default = "default_hold_time")]
    pub hold_time: u16,
    /// NEXT_HOP for IPv4 routes; default: the session's local IPv4 address.
    #[serde(default)]
    pub next_hop_v4: Option<Ipv4Addr>,
    /// Next hop for IPv6 routes; default: the session's local IPv6 address.
    #[serde(default)]
    pub next_hop_v6: Option<Ipv6Addr>,
    /// Source address of the TCP connection; default: chosen by routing.
    #[serde(default)]
    pub local_address: Option<IpAddr>,
    /// RFC 1997 communities, each `(AS << 16) | value` as in [`RouteAttrs`],
    /// added to every route announced to this peer (merged with the route's
    /// own, sorted and deduplicated). Default: none.
    #[serde(default)]
    pub communities: Vec<u32>,
}

fn default_port() -> u16 {
    DEFAULT_PORT
}

fn default_hold_time() -> u16 {
    DEFAULT_HOLD_TIME
}

impl PeerConfig {
    /// A peer at `address` in `remote_as` with every other field defaulted.
    ///
    /// Why: `IpAddr` has no default, so this is the shortest way to a valid
    /// config; set the other public fields as needed.
    pub fn new(address: IpAddr, remote_as: u32) -> PeerConfig {
        PeerConfig {
            address,
            remote_as,
            port: DEFAULT_PORT,
            password: None,
            hold_time: DEFAULT_HOLD_TIME,
            next_hop_v4: None,
            next_hop_v6: None,
            local_address: None,
            communities: Vec::new(),
        }
    }
}

impl fmt::Debug for PeerConfig {
    /// Like a derived `Debug`, but the password is never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerConfig")
            .field("address", &self.address)
            .field("remote_as", &self.remote_as)
            .field("port", &self.port)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("hold_time", &self.hold_time)
            .field("next_hop_v4", &self.next_hop_v4)
            .field("next_hop_v6", &self.next_hop_v6)
            .field("local_address", &self.local_address)
            .field("communities", &self.communities)
            .finish()
    }
}

/// A configuration problem found by [`SpeakerConfig::validate`].
///
/// Why a list of strings: the daemon reports every problem at once, the way
/// `rivora-config` does for the YAML file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid BGP configuration: {}", problems.join("; "))]
pub struct ConfigError {
    /// One sentence per problem.
    pub problems: Vec<String>,
}

impl SpeakerConfig {
    /// Checks everything that can be checked without a network.
    ///
    /// Why separate from [`Speaker::start`]: the daemon should reject a bad
    /// file before touching a running speaker; `start` itself never fails
    /// and instead leaves an invalid peer Idle with the problem as its
    /// `last_error`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = self.global_problems();
        for (i, p) in self.peers.iter().enumerate() {
            for e in peer_problems(p) {
                problems.push(format!("peers[{i}] ({}): {e}", p.address));
            }
            if self.peers[..i]
                .iter()
                .any(|q| q.address == p.address && q.port == p.port)
            {
                problems.push(format!(
                    "peers[{i}] ({}): the same address and port are listed twice",
                    p.address
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
    }

    fn global_problems(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.local_as == 0 {
            v.push("local_as must not be 0 (RFC 7607)".to_string());
        }
        if self.router_id.is_unspecified() {
            v.push("router_id must not be 0.0.0.0".to_string());
        }
        v
    }
}

fn peer_problems(p: &PeerConfig) -> Vec<String> {
    let mut v = Vec::new();
    if p.remote_as == 0 {
        v.push("remote_as must not be 0 (RFC 7607)".to_string());
    }
    if p.port == 0 {
        v.push("port must not be 0".to_string());
    }
    if p.hold_time == 1 || p.hold_time == 2 {
        v.push(format!(
            "hold_time {} is not allowed (use 0 or at least 3)",
            p.hold_time
        ));
    }
    if let Some(pw) = &p.password {
        if pw.is_empty() {
            v.push("password must not be empty (omit it to disable TCP-MD5)".to_string());
        }
        if pw.len() > md5::MAX_KEY_LEN {
            v.push(format!(
                "password is {} bytes, TCP-MD5 allows at most {}",
                pw.len(),
                md5::MAX_KEY_LEN
            ));
        }
    }
    if let Some(l) = p.local_address
        && l.is_ipv4() != p.address.is_ipv4()
    {
        v.push(format!(
            "local_address {l} is not of the same family as the peer address"
        ));
    }
    if p.address.is_unspecified() || p.address.is_multicast() {
        v.push("address must be a unicast address".to_string());
    }
    if let Some(nh) = p.next_hop_v4
        && (nh.is_unspecified() || nh.is_multicast() || nh.is_broadcast())
    {
        v.push(format!("next_hop_v4 {nh} is not a unicast address"));
    }
    if let Some(nh) = p.next_hop_v6
        && (nh.is_unspecified() || nh.is_multicast())
    {
        v.push(format!("next_hop_v6 {nh} is not a unicast address"));
    }
    v
}

/// Per-route attributes.
///
/// Why only communities: origin, AS_PATH, next hop and LOCAL_PREF follow
/// from the session (see the crate documentation); communities are what
/// operators use to tag and filter announcements upstream.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteAttrs {
    /// RFC 1997 communities, each `(AS << 16) | value`. Order and
    /// duplicates do not matter (they are sorted and deduplicated).
    #[serde(default)]
    pub communities: Vec<u32>,
}

impl RouteAttrs {
    /// Attributes with these communities.
    pub fn with_communities(communities: impl IntoIterator<Item = u32>) -> RouteAttrs {
        RouteAttrs {
            communities: communities.into_iter().collect(),
        }
    }

    fn normalized(mut self) -> RouteAttrs {
        self.communities.sort_unstable();
        self.communities.dedup();
        self
    }
}

/// A peer's state as `rivoractl bgp` shows it.
///
/// Why these fields: enough to answer "is the session up, since when, is it
/// carrying our routes, and if not, why".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerStatus {
    /// The peer's address.
    pub address: IpAddr,
    /// The peer's configured AS.
    pub remote_as: u32,
    /// RFC 4271 state: Idle, Connect, Active, OpenSent, OpenConfirm or
    /// Established. Active means "waiting to retry the connection" (this
    /// speaker does not listen).
    pub state: String,
    /// Seconds since the session became Established (None otherwise).
    pub uptime_secs: Option<u64>,
    /// Prefixes currently announced to this peer.
    pub prefixes_sent: usize,
    /// The most recent problem: a connect failure, a NOTIFICATION sent or
    /// received, a family held back for lack of a next hop. Kept after the
    /// session recovers, so a flap leaves a trace.
    pub last_error: Option<String>,
}

/// A running BGP speaker.
///
/// Why a handle with a route set: the daemon recomputes "which VIPs have
/// healthy backends" and hands the whole answer over; the speaker works out
/// what each peer must be told. [`Speaker::set_routes`] is cheap when
/// nothing changed, so it can be called on every health event.
pub struct Speaker {
    handle: tokio::runtime::Handle,
    global: peer::Global,
    routes: watch::Sender<Arc<session::Routes>>,
    /// Speaker-wide stop: shutdown and drop stop every task through it.
    stop: watch::Sender<bool>,
    /// The peers in configuration order.
    peers: Mutex<Vec<PeerEntry>>,
    /// Serialises [`Speaker::reconfigure`] calls, and lets `shutdown` wait
    /// for one in progress (whose tasks it would otherwise not see).
    reconfiguring: tokio::sync::Mutex<()>,
}

/// One configured peer: its status and, when started, its task and the
/// channel that stops it alone.
struct PeerEntry {
    shared: Arc<peer::PeerShared>,
    /// Stops this peer only, with the text of the Cease to send; `None` for
    /// a peer never started (invalid configuration).
    stop: Option<watch::Sender<Option<&'static str>>>,
    /// `None` once taken by shutdown or reconfigure, or never started.
    task: Option<JoinHandle<()>>,
    /// Being (or already) stopped by a reconfiguration: never reused. Stays
    /// set if that reconfiguration was cancelled, so the next one starts
    /// the peer afresh instead of keeping a stopped task.
    retired: bool,
}

impl PeerEntry {
    fn key(&self) -> SocketAddr {
        peer_key(&self.shared.cfg)
    }
}

/// What identifies a peer across reconfigurations: where we connect.
fn peer_key(p: &PeerConfig) -> SocketAddr {
    SocketAddr::new(p.address, p.port)
}

/// The peers of `config` in order, each with every reason not to start it
/// (global problems, its own, being a repeat of an earlier address and
/// port: one session per peer, the first entry wins).
fn checked_peers(config: SpeakerConfig) -> Vec<(PeerConfig, Vec<String>)> {
    let global = config.global_problems();
    let mut seen = HashSet::new();
    config
        .peers
        .into_iter()
        .map(|p| {
            let mut problems = global.clone();
            problems.extend(peer_problems(&p));
            if !seen.insert(peer_key(&p)) {
                problems.push("the same address and port are listed twice".to_string());
            }
            (p, problems)
        })
        .collect()
}

/// What [`Speaker::reconfigure`] did, peer by peer (`address:port`).
///
/// Why: the daemon logs it, so an operator can tell which sessions were
/// reset by a configuration change and which were left alone. `added`,
/// `changed` and `kept` follow the new configuration's order, `removed` the
/// old one's. Repeated address and port entries (left Idle) are not listed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconfigured {
    /// Peers that were not configured before; started.
    pub added: Vec<SocketAddr>,
    /// Peers whose configuration changed in any field; their session was
    /// closed (routes withdrawn, Cease sent) and a new one started.
    pub changed: Vec<SocketAddr>,
    /// Peers no longer configured; routes withdrawn, Cease sent, stopped.
    pub removed: Vec<SocketAddr>,
    /// Peers with an identical configuration; their task and session were
    /// not touched.
    pub kept: Vec<SocketAddr>,
}

impl Reconfigured {
    /// True when no session was started, reset or stopped.
    pub fn is_noop(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }
}

impl fmt::Display for Reconfigured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list(v: &[SocketAddr]) -> String {
            v.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        }
        write!(
            f,
            "BGP peers added [{}], changed [{}], removed [{}], {} kept",
            list(&self.added),
            list(&self.changed),
            list(&self.removed),
            self.kept.len()
        )
    }
}

/// Why [`Speaker::reconfigure`] refused: only a new speaker can apply this
/// configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NeedsRestart {
    /// `local_as` or `router_id` differ from the running configuration.
    #[error(
        "BGP local_as/router_id change from {running_as}/{running_router_id} to \
         {new_as}/{new_router_id}: every session must be re-opened, restart the speaker"
    )]
    IdentityChanged {
        /// The running `local_as`.
        running_as: u32,
        /// The running `router_id`.
        running_router_id: Ipv4Addr,
        /// The requested `local_as`.
        new_as: u32,
        /// The requested `router_id`.
        new_router_id: Ipv4Addr,
    },
    /// [`Speaker::shutdown`] was called; a stopped speaker stays stopped.
    #[error("the BGP speaker has been shut down; start a new one")]
    ShutDown,
}

impl fmt::Debug for Speaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Speaker")
            .field("peers", &self.lock_peers().len())
            .field("routes", &self.routes.borrow().len())
            .finish()
    }
}

impl Speaker {
    /// Starts one task per peer on the current tokio runtime and returns at
    /// once; sessions come up in the background.
    ///
    /// Never fails: a peer whose configuration is invalid (see
    /// [`SpeakerConfig::validate`]; a repeated address and port counts,
    /// the first entry runs) stays Idle with the problem as its
    /// `last_error`, and the others run. Panics if called outside a tokio
    /// runtime.
    pub fn start(config: SpeakerConfig) -> Speaker {
        let (routes, _) = watch::channel(Arc::new(session::Routes::new()));
        let (stop, _) = watch::channel(false);
        let speaker = Speaker {
            handle: tokio::runtime::Handle::current(),
            global: peer::Global {
                local_as: config.local_as,
                router_id: config.router_id,
            },
            routes,
            stop,
            peers: Mutex::new(Vec::new()),
            reconfiguring: tokio::sync::Mutex::new(()),
        };
        let entries = checked_peers(config)
            .into_iter()
            .map(|(p, problems)| speaker.start_peer(p, problems))
            .collect();
        *speaker.lock_peers() = entries;
        speaker
    }

    /// A new entry for `cfg`: its task spawned, or Idle with `problems`.
    fn start_peer(&self, cfg: PeerConfig, problems: Vec<String>) -> PeerEntry {
        let shared = Arc::new(peer::PeerShared::new(cfg));
        if !problems.is_empty() {
            let msg = format!("not started: {}", problems.join("; "));
            tracing::error!(peer = %shared.cfg.address, "BGP: {msg}");
            shared.set_error(msg);
            return PeerEntry {
                shared,
                stop: None,
                task: None,
                retired: false,
            };
        }
        let (stop, stop_rx) = watch::channel(None);
        let task = self.handle.spawn(peer::run(
            self.global,
            Arc::clone(&shared),
            self.routes.subscribe(),
            peer::Stop {
                speaker: self.stop.subscribe(),
                peer: stop_rx,
            },
        ));
        PeerEntry {
            shared,
            stop: Some(stop),
            task: Some(task),
            retired: false,
        }
    }

    /// Applies a new configuration peer by peer, without disturbing the
    /// sessions of peers whose configuration is unchanged.
    ///
    /// Why: in Kubernetes every BGPPeer object (and its password Secret)
    /// becomes one [`PeerConfig`]; editing one of them must not flap the
    /// sessions to every other router, which `shutdown` plus `start` would.
    ///
    /// Peers are matched by address and port. A peer no longer configured
    /// is stopped as [`Speaker::shutdown`] stops every peer (its routes
    /// withdrawn, a Cease / Administrative Shutdown sent, the connection
    /// closed); a peer whose configuration differs in any field is stopped
    /// the same way, then started with the new configuration; a new peer is
    /// started; an identical one keeps its task and session. Stopping waits
    /// at most [`SHUTDOWN_TIMEOUT`], after which the tasks are aborted.
    /// Invalid peers stay Idle with their problem as `last_error`, as with
    /// `start`. Afterwards [`Speaker::peers`] follows the new order, and
    /// every started peer is sent the current route set.
    ///
    /// Fails, changing nothing, when `local_as` or `router_id` differ (they
    /// are in every OPEN and AS_PATH, so every session would have to be
    /// re-opened anyway: the caller shuts this speaker down and starts a new
    /// one), or after `shutdown`. Calls are serialised. If the future is
    /// dropped midway, the peers it was stopping stay stopped and the next
    /// call starts whatever its configuration asks for.
    pub async fn reconfigure(&self, config: SpeakerConfig) -> Result<Reconfigured, NeedsRestart> {
        let _serial = self.reconfiguring.lock().await;
        if *self.stop.borrow() {
            return Err(NeedsRestart::ShutDown);
        }
        if config.local_as != self.global.local_as || config.router_id != self.global.router_id {
            return Err(NeedsRestart::IdentityChanged {
                running_as: self.global.local_as,
                running_router_id: self.global.router_id,
                new_as: config.local_as,
                new_router_id: config.router_id,
            });
        }
        let wanted = checked_peers(config);
        let mut report = Reconfigured::default();

        // 1. Decide, and signal the peers to stop. Only the first running
        // entry per address and port can be kept; every other entry
        // (changed, removed, repeated, left by a cancelled call) retires.
        let mut first_wanted: HashMap<SocketAddr, &PeerConfig> = HashMap::new();
        for (p, _) in &wanted {
            first_wanted.entry(peer_key(p)).or_insert(p);
        }
        let mut seen_old = HashSet::new();
        let mut was_running = HashSet::new();
        let mut stopping = Vec::new();
        for e in self.lock_peers().iter_mut() {
            let key = e.key();
            let first = seen_old.insert(key) && !e.retired;
            if first {
                was_running.insert(key);
            }
            let text = match first_wanted.get(&key) {
                Some(c) if first && **c == e.shared.cfg => continue,
                Some(_) => peer::CHANGED_TEXT,
                None => {
                    if first {
                        report.removed.push(key);
                    }
                    peer::REMOVED_TEXT
                }
            };
            e.retired = true;
            if let Some(s) = &e.stop {
                let _ = s.send(Some(text));
            }
            stopping.extend(e.task.take());
        }

        // 2. Let them withdraw their routes and say goodbye.
        join_bounded(stopping, "reconfiguring").await;

        // 3. The new list: kept entries moved over, the others started.
        let mut list = self.lock_peers();
        let mut kept: HashMap<SocketAddr, PeerEntry> = std::mem::take(&mut *list)
            .into_iter()
            .filter(|e| !e.retired)
            .map(|e| (e.key(), e))
            .collect();
        let mut seen = HashSet::new();
        for (p, problems) in wanted {
            let key = peer_key(&p);
            if seen.insert(key) {
                if let Some(e) = kept.remove(&key) {
                    report.kept.push(key);
                    list.push(e);
                    continue;
                }
                if was_running.contains(&key) {
                    report.changed.push(key);
                } else {
                    report.added.push(key);
                }
            }
            list.push(self.start_peer(p, problems));
        }
        Ok(report)
    }

    /// Replaces the whole set of routes to announce.
    ///
    /// Every Established peer is sent withdrawals for prefixes no longer
    /// present and announcements for new or changed ones; a peer that comes
    /// up later gets the full set. Returns false (and wakes nobody) when the
    /// set is unchanged, so calling it on every health event is cheap.
    pub fn set_routes(&self, routes: BTreeMap<Prefix, RouteAttrs>) -> bool {
        let routes: session::Routes = routes
            .into_iter()
            .map(|(p, a)| (p, a.normalized()))
            .collect();
        self.routes.send_if_modified(|cur| {
            if **cur == routes {
                false
            } else {
                *cur = Arc::new(routes);
                true
            }
        })
    }

    /// The route set last passed to [`Speaker::set_routes`] (normalised).
    pub fn routes(&self) -> BTreeMap<Prefix, RouteAttrs> {
        (**self.routes.borrow()).clone()
    }

    /// Status of every configured peer, in configuration order (the order
    /// of the last [`Speaker::reconfigure`], if any).
    pub fn peers(&self) -> Vec<PeerStatus> {
        self.lock_peers()
            .iter()
            .map(|e| e.shared.snapshot())
            .collect()
    }

    /// Withdraws every route from every Established peer, sends each a
    /// Cease / Administrative Shutdown NOTIFICATION, closes all connections
    /// and stops the tasks (waiting at most [`SHUTDOWN_TIMEOUT`], plus the
    /// end of a [`Speaker::reconfigure`] in progress).
    ///
    /// Why explicit: dropping a `Speaker` also stops it, but abruptly
    /// (connections just close, peers notice via TCP), because `Drop`
    /// cannot wait for the goodbye messages to go out. Takes `&self` so a
    /// speaker shared through an `Arc` can be shut down; afterwards it stays
    /// stopped (`set_routes` is accepted but nobody is told, `reconfigure`
    /// fails).
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        // A reconfiguration in progress holds tasks of its own (already
        // told to stop by the line above); wait for it, then take the rest.
        let _serial = self.reconfiguring.lock().await;
        let tasks: Vec<_> = self
            .lock_peers()
            .iter_mut()
            .filter_map(|e| e.task.take())
            .collect();
        join_bounded(tasks, "shutting down").await;
    }

    fn lock_peers(&self) -> std::sync::MutexGuard<'_, Vec<PeerEntry>> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Waits for `tasks` to end, at most [`SHUTDOWN_TIMEOUT`]; then aborts them.
async fn join_bounded(tasks: Vec<JoinHandle<()>>, doing: &str) {
    if tasks.is_empty() {
        return;
    }
    let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
    let all = async {
        for t in tasks {
            let _ = t.await;
        }
    };
    if tokio::time::timeout(SHUTDOWN_TIMEOUT, all).await.is_err() {
        tracing::warn!("BGP: peers did not finish {doing} in time; aborting");
        for a in aborts {
            a.abort();
        }
    }
}

impl Drop for Speaker {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        let peers = self.peers.get_mut().unwrap_or_else(|p| p.into_inner());
        for t in peers.iter().filter_map(|e| e.task.as_ref()) {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_validation() {
        let p = PeerConfig::new("192.0.2.1".parse().unwrap(), 65001);
        assert_eq!(p.port, 179);
        assert_eq!(p.hold_time, 90);
        let mut c = SpeakerConfig {
            local_as: 65000,
            router_id: "192.0.2.2".parse().unwrap(),
            peers: vec![p.clone()],
        };
        c.validate().unwrap();
        c.peers[0].hold_time = 2;
        c.peers[0].password = Some("x".repeat(81));
        c.peers[0].local_address = Some("2001:db8::1".parse().unwrap());
        c.peers.push(p);
        c.router_id = Ipv4Addr::UNSPECIFIED;
        let e = c.validate().unwrap_err();
        assert_eq!(e.problems.len(), 5, "{e}");
    }

    #[test]
    fn speaker_can_be_shared_between_tasks() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Speaker>();
        send_sync::<PeerStatus>();
    }

    #[test]
    fn peer_communities_default_to_none() {
        let p: PeerConfig =
            serde_json::from_str(r#"{"address": "192.0.2.1", "remote_as": 65001}"#).unwrap();
        assert_eq!(p, PeerConfig::new("192.0.2.1".parse().unwrap(), 65001));
        assert!(p.communities.is_empty());
        let p: PeerConfig = serde_json::from_str(
            r#"{"address": "192.0.2.1", "remote_as": 65001, "communities": [4259840100]}"#,
        )
        .unwrap();
        assert_eq!(p.communities, vec![(65000 << 16) | 100]);
    }

    #[test]
    fn debug_hides_password() {
        let mut p = PeerConfig::new("192.0.2.1".parse().unwrap(), 65001);
        p.password = Some("hunter2".into());
        assert!(!format!("{p:?}").contains("hunter2"));
    }

    #[tokio::test]
    async fn set_routes_is_idempotent_and_normalises() {
        let s = Speaker::start(SpeakerConfig {
            local_as: 65000,
            router_id: "192.0.2.2".parse().unwrap(),
            peers: vec![],
        });
        let mut r = BTreeMap::new();
        r.insert(
            Prefix::host("192.0.2.10".parse().unwrap()),
            RouteAttrs::with_communities([3, 1, 3]),
        );
        assert!(s.set_routes(r.clone()));
        assert!(!s.set_routes(r.clone()));
        let mut r2 = r.clone();
        r2.insert(
            Prefix::host("192.0.2.10".parse().unwrap()),
            RouteAttrs::with_communities([1, 3]),
        );
        assert!(!s.set_routes(r2));
        assert_eq!(s.routes().values().next().unwrap().communities, vec![1, 3]);
        s.shutdown().await;
    }

    #[tokio::test]
    async fn invalid_peer_stays_idle_with_reason() {
        let mut p = PeerConfig::new("127.0.0.1".parse().unwrap(), 0);
        p.port = 1;
        let s = Speaker::start(SpeakerConfig {
            local_as: 65000,
            router_id: "192.0.2.2".parse().unwrap(),
            peers: vec![p],
        });
        let st = &s.peers()[0];
        assert_eq!(st.state, "Idle");
        assert!(st.last_error.as_deref().unwrap().contains("remote_as"));
        s.shutdown().await;
    }

    /// A port on 127.0.0.1 nobody listens on (so connects are refused and
    /// the peer tasks sit in their retry backoff).
    fn closed_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    /// Peers at 127.0.0.`n` (distinct addresses, so `peers()` shows the
    /// order) on `port`.
    fn cfg_with(port: u16, hosts: &[u8]) -> SpeakerConfig {
        SpeakerConfig {
            local_as: 65000,
            router_id: "192.0.2.2".parse().unwrap(),
            peers: hosts
                .iter()
                .map(|n| {
                    let mut p = PeerConfig::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, *n)), 65001);
                    p.port = port;
                    p
                })
                .collect(),
        }
    }

    fn key(n: u8, port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)), port)
    }

    /// Per entry: the status Arc and the task (id and abort handle).
    #[allow(clippy::type_complexity)]
    fn tasks(
        s: &Speaker,
    ) -> Vec<(
        Arc<peer::PeerShared>,
        Option<(tokio::task::Id, tokio::task::AbortHandle)>,
    )> {
        s.lock_peers()
            .iter()
            .map(|e| {
                (
                    Arc::clone(&e.shared),
                    e.task.as_ref().map(|t| (t.id(), t.abort_handle())),
                )
            })
            .collect()
    }

    fn addresses(s: &Speaker) -> Vec<IpAddr> {
        s.peers().iter().map(|p| p.address).collect()
    }

    #[tokio::test]
    async fn reconfigure_keeps_unchanged_peers_and_replaces_the_rest() {
        let port = closed_port();
        let s = Speaker::start(cfg_with(port, &[2, 3, 4]));
        let before = tasks(&s);
        assert!(before.iter().all(|(_, t)| t.is_some()));

        // 127.0.0.4 changes (hold time), .3 goes, .5 comes, .2 stays; the
        // order changes too.
        let mut new = cfg_with(port, &[4, 2, 5]);
        new.peers[0].hold_time = 30;
        let r = s.reconfigure(new.clone()).await.unwrap();
        assert_eq!(
            r,
            Reconfigured {
                added: vec![key(5, port)],
                changed: vec![key(4, port)],
                removed: vec![key(3, port)],
                kept: vec![key(2, port)],
            }
        );
        assert!(!r.is_noop());
        assert_eq!(
            r.to_string(),
            format!(
                "BGP peers added [127.0.0.5:{port}], changed [127.0.0.4:{port}], \
                 removed [127.0.0.3:{port}], 1 kept"
            )
        );
        assert_eq!(
            addresses(&s),
            ["127.0.0.4", "127.0.0.2", "127.0.0.5"]
                .map(|a| a.parse::<IpAddr>().unwrap())
                .to_vec()
        );

        let after = tasks(&s);
        // The kept peer: same status, same task, still running.
        assert!(Arc::ptr_eq(&after[1].0, &before[0].0));
        let (id, ref abort) = after[1].1.clone().unwrap();
        assert_eq!(id, before[0].1.as_ref().unwrap().0);
        assert!(!abort.is_finished());
        // The removed and the changed peer: their old tasks are over (the
        // call waited for them), the changed one runs anew with the new
        // configuration.
        assert!(before[1].1.as_ref().unwrap().1.is_finished());
        assert!(before[2].1.as_ref().unwrap().1.is_finished());
        assert!(!Arc::ptr_eq(&after[0].0, &before[2].0));
        assert_eq!(after[0].0.cfg, new.peers[0]);
        assert!(!after[0].1.as_ref().unwrap().1.is_finished());
        assert!(!after[2].1.as_ref().unwrap().1.is_finished());

        // The same configuration again touches nothing.
        let r = s.reconfigure(new).await.unwrap();
        assert!(r.is_noop(), "{r}");
        assert_eq!(r.kept.len(), 3);
        let again = tasks(&s);
        for (a, b) in after.iter().zip(&again) {
            assert!(Arc::ptr_eq(&a.0, &b.0));
            assert_eq!(a.1.as_ref().unwrap().0, b.1.as_ref().unwrap().0);
        }

        // Shutdown still reaches every task, including the ones started by
        // reconfigure.
        s.shutdown().await;
        assert!(
            again
                .iter()
                .all(|(_, t)| t.as_ref().unwrap().1.is_finished())
        );
        assert!(
            s.peers().iter().all(|p| p.state == "Idle"),
            "{:?}",
            s.peers()
        );
    }

    #[tokio::test]
    async fn reconfigure_refuses_a_new_identity_and_changes_nothing() {
        let port = closed_port();
        let cfg = cfg_with(port, &[2]);
        let s = Speaker::start(cfg.clone());
        let before = tasks(&s);

        let mut other_as = cfg_with(port, &[3]);
        other_as.local_as = 65100;
        let e = s.reconfigure(other_as).await.unwrap_err();
        assert_eq!(
            e,
            NeedsRestart::IdentityChanged {
                running_as: 65000,
                running_router_id: cfg.router_id,
                new_as: 65100,
                new_router_id: cfg.router_id,
            }
        );
        assert!(e.to_string().contains("restart"), "{e}");
        let mut other_id = cfg.clone();
        other_id.router_id = "192.0.2.9".parse().unwrap();
        assert!(matches!(
            s.reconfigure(other_id).await,
            Err(NeedsRestart::IdentityChanged { .. })
        ));

        let after = tasks(&s);
        assert_eq!(after.len(), 1);
        assert!(Arc::ptr_eq(&after[0].0, &before[0].0));
        assert!(!after[0].1.as_ref().unwrap().1.is_finished());
        s.shutdown().await;
        assert_eq!(s.reconfigure(cfg).await, Err(NeedsRestart::ShutDown));
        assert!(tasks(&s).iter().all(|(_, t)| t.is_none()));
    }

    #[tokio::test]
    async fn reconfigure_leaves_invalid_and_repeated_peers_idle() {
        let port = closed_port();
        let s = Speaker::start(cfg_with(port, &[2]));
        let mut new = cfg_with(port, &[2, 3, 2]);
        new.peers[1].remote_as = 0;
        new.peers[2].hold_time = 30; // a repeat, whatever its settings
        let r = s.reconfigure(new).await.unwrap();
        assert_eq!(r.kept, vec![key(2, port)]);
        assert_eq!(r.added, vec![key(3, port)]);
        assert!(r.changed.is_empty() && r.removed.is_empty());
        let st = s.peers();
        assert_eq!(st.len(), 3);
        assert_eq!(st[0].last_error, None);
        assert_eq!(st[1].state, "Idle");
        assert!(st[1].last_error.as_deref().unwrap().contains("remote_as"));
        assert_eq!(st[2].state, "Idle");
        assert!(
            st[2]
                .last_error
                .as_deref()
                .unwrap()
                .contains("listed twice"),
            "{st:?}"
        );
        let t = tasks(&s);
        assert!(t[0].1.is_some() && t[1].1.is_none() && t[2].1.is_none());

        // Fixing the invalid peer starts it; the repeat goes away quietly.
        let r = s.reconfigure(cfg_with(port, &[2, 3])).await.unwrap();
        assert_eq!(r.changed, vec![key(3, port)]);
        assert_eq!(r.kept, vec![key(2, port)]);
        assert!(r.added.is_empty() && r.removed.is_empty());
        let t2 = tasks(&s);
        assert_eq!(t2.len(), 2);
        assert!(Arc::ptr_eq(&t2[0].0, &t[0].0));
        assert!(!t2[1].1.as_ref().unwrap().1.is_finished());
        s.shutdown().await;
    }

    #[tokio::test]
    async fn start_runs_only_the_first_of_repeated_peers() {
        let port = closed_port();
        let s = Speaker::start(cfg_with(port, &[2, 2]));
        let t = tasks(&s);
        assert!(t[0].1.is_some() && t[1].1.is_none());
        assert!(
            s.peers()[1]
                .last_error
                .as_deref()
                .unwrap()
                .contains("listed twice")
        );
        s.shutdown().await;
    }

    #[test]
    fn reconfigure_can_run_on_a_spawned_task() {
        fn send<T: Send>(_: &T) {}
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _g = rt.enter();
        let s = Speaker::start(cfg_with(1, &[]));
        let f = s.reconfigure(cfg_with(1, &[]));
        send(&f);
    }
}
