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
//! ```no_run
//! # async fn demo() {
//! use std::collections::BTreeMap;
//! use rivora_bgp::{PeerConfig, Prefix, RouteAttrs, Speaker, SpeakerConfig};
//!
//! let speaker = Speaker::start(SpeakerConfig {
//!     local_as: 65010,
//!     router_id: "192.0.2.1".parse().unwrap(),
//!     peers: vec![PeerConfig::new("192.0.2.254".parse().unwrap(), 65000)],
//! });
//! let mut routes = BTreeMap::new();
//! routes.insert(Prefix::host("203.0.113.10".parse().unwrap()), RouteAttrs::default());
//! speaker.set_routes(routes);
//! // ... later
//! speaker.shutdown().await;
//! # }
//! ```
//!
//! Modules: [`msg`] is the wire format (pure), [`session`] the per-connection
//! state machine (pure, driven by bytes and clock readings; public so that it
//! can be fuzzed and tested without sockets), `peer` the tokio task per peer.

#![warn(missing_docs)]

mod md5;
pub mod msg;
mod peer;
mod prefix;
pub mod session;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
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
    routes: watch::Sender<Arc<session::Routes>>,
    stop: watch::Sender<bool>,
    peers: Vec<Arc<peer::PeerShared>>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

impl fmt::Debug for Speaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Speaker")
            .field("peers", &self.peers.len())
            .field("routes", &self.routes.borrow().len())
            .finish()
    }
}

impl Speaker {
    /// Starts one task per peer on the current tokio runtime and returns at
    /// once; sessions come up in the background.
    ///
    /// Never fails: a peer whose configuration is invalid (see
    /// [`SpeakerConfig::validate`]) stays Idle with the problem as its
    /// `last_error`, and the others run. Panics if called outside a tokio
    /// runtime.
    pub fn start(config: SpeakerConfig) -> Speaker {
        let handle = tokio::runtime::Handle::current();
        let (routes, _) = watch::channel(Arc::new(session::Routes::new()));
        let (stop, _) = watch::channel(false);
        let global = peer::Global {
            local_as: config.local_as,
            router_id: config.router_id,
        };
        let global_problems = config.global_problems();
        let mut peers = Vec::new();
        let mut tasks = Vec::new();
        for p in config.peers {
            let mut problems = global_problems.clone();
            problems.extend(peer_problems(&p));
            let shared = Arc::new(peer::PeerShared::new(p));
            if problems.is_empty() {
                tasks.push(handle.spawn(peer::run(
                    global,
                    Arc::clone(&shared),
                    routes.subscribe(),
                    stop.subscribe(),
                )));
            } else {
                let msg = format!("not started: {}", problems.join("; "));
                tracing::error!(peer = %shared.cfg.address, "BGP: {msg}");
                shared.set_error(msg);
            }
            peers.push(shared);
        }
        Speaker {
            routes,
            stop,
            peers,
            tasks: std::sync::Mutex::new(tasks),
        }
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

    /// Status of every configured peer, in configuration order.
    pub fn peers(&self) -> Vec<PeerStatus> {
        self.peers.iter().map(|p| p.snapshot()).collect()
    }

    /// Withdraws every route from every Established peer, sends each a
    /// Cease / Administrative Shutdown NOTIFICATION, closes all connections
    /// and stops the tasks (waiting at most [`SHUTDOWN_TIMEOUT`]).
    ///
    /// Why explicit: dropping a `Speaker` also stops it, but abruptly
    /// (connections just close, peers notice via TCP), because `Drop`
    /// cannot wait for the goodbye messages to go out. Takes `&self` so a
    /// speaker shared through an `Arc` can be shut down; afterwards it stays
    /// stopped (`set_routes` is accepted but nobody is told).
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let tasks = std::mem::take(&mut *self.lock_tasks());
        let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
        let all = async {
            for t in tasks {
                let _ = t.await;
            }
        };
        if tokio::time::timeout(SHUTDOWN_TIMEOUT, all).await.is_err() {
            tracing::warn!("BGP: peers did not finish shutting down in time; aborting");
            for a in aborts {
                a.abort();
            }
        }
    }

    fn lock_tasks(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Speaker {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in self.lock_tasks().iter() {
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
}
