//! Static YAML configuration of rivorad: parsed and fully validated.
//!
//! The file is the whole desired state of the load balancer: a list of
//! virtual IPs (VIPs), each with its backends, and optional node-wide
//! settings.
//!
//! ```yaml
//! settings:                 # optional
//!   synRateLimit: { rate: 50, burst: 100 }  # node-wide default for TCP VIPs
//! bgp:                      # optional: announce VIPs with healthy backends
//!   localAS: 65010
//!   routerID: 192.0.2.2
//!   peers:
//!     - { address: 192.0.2.1, as: 65000, port: 179, password: "x", holdTime: 90,
//!         nextHop: { ipv4: 192.0.2.2, ipv6: "2001:db8::2" }, localAddress: 192.0.2.2 }
//! l2Announce: { interface: eth0, announceInterval: 60s }  # optional: ARP/NDP
//! vips:
//!   - name: web             # required, unique, [a-z0-9][a-z0-9-_.]{0,62}
//!     address: 10.200.100.1 # IPv4 or IPv6, no prefix length
//!     port: 80              # 1-65535, a range "8000-8099", or any
//!     protocol: tcp         # tcp | udp (default tcp)
//!     mode: nat             # nat | dsr | dsr-ipip | dsr-gre (default nat)
//!     sessionAffinity: none # none | clientIP (default none)
//!     natForwarding: kernel # mode nat: kernel | fib (default kernel)
//!     synRateLimit: { rate: 100, burst: 200 }  # TCP only; SYNs/s per source
//!     advertise: true       # announce it (BGP, ARP/NDP); default true
//!     communities: ["65010:100"]  # on its BGP route
//!     backends:             # optional, may be empty
//!       - address: 10.200.1.11      # same family as the VIP
//!         port: 8080                # default: the VIP's port (single-port
//!                                   # VIPs) or the client's destination
//!                                   # port (range and `any` VIPs)
//!         weight: 1                 # 1-65535, default 1
//!         mac: "02:00:00:00:00:01"  # optional
//! ```
//!
//! Everything a running rivorad relies on is checked here, so the rest of
//! the daemon can trust a [`Config`] without re-validating it. A bad file is
//! rejected with *every* problem found, each naming the field, its line and
//! column, and the reason (see [`ConfigError`]).
//!
//! How positions are obtained: the text is parsed with the `saphyr-parser`
//! event parser into a small tree whose nodes remember their line and
//! column, and that tree is decoded by hand (no serde), which lets the
//! decoder report wrong types, unknown keys and semantic problems together,
//! each at its own position.

#![warn(missing_docs)]

mod decode;
mod error;
mod yaml;

use std::fmt;
use std::net::IpAddr;
use std::path::Path;

pub use error::{ConfigError, FieldError};

/// Most VIPs one configuration may define. Bounds the size of the dataplane's
/// VIP map, which is allocated up front.
pub const MAX_VIPS: usize = 4096;

/// Most distinct backends, counted as distinct (address, port) pairs across
/// all VIPs, one configuration may define. Bounds the dataplane's backend
/// map; a backend shared by several VIPs takes one slot.
pub const MAX_BACKENDS: usize = 8192;

/// A validated configuration: the whole desired state of rivorad.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// The virtual services, in file order. Names are unique; no two VIPs
    /// of one address and protocol have the same port, and no two port
    /// ranges of one address and protocol overlap (a single port inside
    /// another VIP's range is allowed: the single-port VIP takes that port).
    /// May be empty.
    pub vips: Vec<VipConfig>,
    /// Node-wide settings (the `settings:` mapping; all optional).
    pub settings: Settings,
    /// BGP: announce VIPs with healthy backends as host routes (the `bgp:`
    /// mapping). None: no BGP speaker runs.
    pub bgp: Option<BgpConfig>,
    /// ARP/NDP answers for the VIPs on one interface (the `l2Announce:`
    /// mapping). None: nothing answers for the VIPs at layer 2.
    pub l2_announce: Option<L2Announce>,
    /// Meridio-2-style distribution groups and rules (the `classifier:`
    /// mapping), checked by the dataplane's classifier validation; no
    /// address is both a classifier VIP and a `vips:` address. Empty when
    /// absent.
    pub classifier: rivora_dataplane::classifier::ClassifierSpec,
}

/// The `bgp:` section: this node's BGP identity and the peers it connects
/// to (it never listens: peers must be passive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BgpConfig {
    /// Our AS number (`localAS`, 1-4294967295).
    pub local_as: u32,
    /// Our BGP identifier (`routerID`): an IPv4 address, not 0.0.0.0.
    pub router_id: std::net::Ipv4Addr,
    /// The peers, at least one; no two with the same address and port.
    pub peers: Vec<BgpPeer>,
}

/// One BGP neighbour (`bgp.peers[]`).
#[derive(Clone, PartialEq, Eq)]
pub struct BgpPeer {
    /// Where to connect (`address`).
    pub address: IpAddr,
    /// The peer's AS (`as`); equal to `localAS` is iBGP.
    pub remote_as: u32,
    /// The peer's BGP port (`port`, default 179).
    pub port: u16,
    /// TCP-MD5 password (`password`, 1-80 bytes); None: no MD5.
    pub password: Option<String>,
    /// Proposed hold time in seconds (`holdTime`, default 90; 0 or 3-65535).
    pub hold_time: u16,
    /// Next hop of IPv4 routes (`nextHop.ipv4`); default: the session's own
    /// IPv4 address.
    pub next_hop_v4: Option<std::net::Ipv4Addr>,
    /// Next hop of IPv6 routes (`nextHop.ipv6`); default: the session's own
    /// IPv6 address (so IPv6 routes over an IPv4 session need it).
    pub next_hop_v6: Option<std::net::Ipv6Addr>,
    /// Source address of the TCP connection (`localAddress`), of the peer's
    /// family; default: chosen by routing.
    pub local_address: Option<IpAddr>,
}

impl fmt::Debug for BgpPeer {
    /// Like a derived `Debug`, without the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BgpPeer")
            .field("address", &self.address)
            .field("remote_as", &self.remote_as)
            .field("port", &self.port)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("hold_time", &self.hold_time)
            .field("next_hop_v4", &self.next_hop_v4)
            .field("next_hop_v6", &self.next_hop_v6)
            .field("local_address", &self.local_address)
            .finish()
    }
}

/// Default BGP port of a peer.
pub const DEFAULT_BGP_PORT: u16 = 179;
/// Default proposed hold time, seconds.
pub const DEFAULT_HOLD_TIME: u16 = 90;
/// Longest TCP-MD5 key (RFC 2385, as Linux accepts it).
pub const MAX_MD5_PASSWORD: usize = 80;

/// The `l2Announce:` section: answer ARP and NDP for the VIPs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L2Announce {
    /// Interface to answer on (`interface`); None: rivorad's `--interface`.
    pub interface: Option<String>,
    /// How often each VIP is announced again with a gratuitous ARP or an
    /// unsolicited neighbour advertisement (`announceInterval`, 1s-1h,
    /// default 60s).
    pub announce_interval: std::time::Duration,
}

/// Default `l2Announce.announceInterval`.
pub const DEFAULT_ANNOUNCE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// An RFC 1997 community, written `AS:VALUE` (each 0-65535); stored as
/// `(AS << 16) | VALUE`, the form on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Community(pub u32);

impl fmt::Display for Community {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.0 >> 16, self.0 & 0xffff)
    }
}

/// Node-wide settings, applying to every VIP unless it says otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    /// SYN rate limit per client source address applying to every TCP VIP
    /// without a `synRateLimit` of its own. None = no node-wide limit.
    pub syn_rate_limit: Option<RateLimit>,
    /// Outer source address of IPv4 L3 DSR tunnels (`tunnelSource.ipv4`):
    /// an address of this node the backends can reach and answer to.
    pub tunnel_source_v4: Option<IpAddr>,
    /// Outer source address of IPv6 L3 DSR tunnels (`tunnelSource.ipv6`).
    pub tunnel_source_v6: Option<IpAddr>,
}

/// A per-source token bucket for TCP SYNs (new connections): each client
/// address may open `rate` connections per second on average, and up to
/// `burst` at once. SYNs over the limit are dropped (`rate_limited`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// SYNs per second per source address (1 to [`MAX_SYN_RATE`]).
    pub rate: u64,
    /// Bucket depth in SYNs (1 to [`MAX_SYN_RATE`]; default: the rate).
    pub burst: u64,
}

/// Largest accepted `rate` and `burst` of a [`RateLimit`]: far above what a
/// single client needs, and small enough that the datapath's nano-token
/// arithmetic cannot overflow.
pub const MAX_SYN_RATE: u64 = 1_000_000;

/// The destination ports a VIP matches, inclusive. A single port has
/// `first == last`; `port: any` is [`PortRange::ANY`] (0-65535, every port
/// of the address, port 0 included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRange {
    /// First port matched.
    pub first: u16,
    /// Last port matched (>= `first`).
    pub last: u16,
}

impl PortRange {
    /// Every port (`port: any`).
    pub const ANY: PortRange = PortRange {
        first: 0,
        last: u16::MAX,
    };

    /// One port.
    pub fn single(port: u16) -> Self {
        PortRange {
            first: port,
            last: port,
        }
    }

    /// Whether this is exactly one port (an exact VIP).
    pub fn is_single(&self) -> bool {
        self.first == self.last
    }

    /// Whether this is `any` (every port).
    pub fn is_any(&self) -> bool {
        *self == Self::ANY
    }

    /// The port of a single-port range.
    pub fn single_port(&self) -> Option<u16> {
        self.is_single().then_some(self.first)
    }

    /// Whether `port` is in the range.
    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }

    /// Whether the two ranges share a port.
    pub fn overlaps(&self, other: &PortRange) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

impl fmt::Display for PortRange {
    /// `80`, `8000-8099` or `any`, as written in the file.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_any() {
            f.write_str("any")
        } else if self.is_single() {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// Whether all connections of a client go to one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum SessionAffinity {
    /// Each flow (5-tuple) is balanced on its own. The default.
    #[default]
    None,
    /// `clientIP`: the backend is chosen from the client's address only, so
    /// every connection of a client lands on the same backend (while the
    /// backend set does not change).
    ClientIp,
}

impl SessionAffinity {
    /// Every value, in the order used when listing valid values.
    pub const ALL: [SessionAffinity; 2] = [SessionAffinity::None, SessionAffinity::ClientIp];

    /// The name used in the configuration file and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionAffinity::None => "none",
            SessionAffinity::ClientIp => "clientIP",
        }
    }
}

impl fmt::Display for SessionAffinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who routes a NAT VIP's rewritten packet on to its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum NatForwarding {
    /// `kernel`: the packet is handed to the kernel (XDP_PASS), which routes
    /// it like any forwarded packet: netfilter's forward hooks, policy
    /// routing and the neighbour table all apply. The default.
    #[default]
    Kernel,
    /// `fib`: the ingress program looks the backend's next hop up in the
    /// kernel's FIB (cached per backend for at most about a second), lowers the TTL
    /// and sends the packet out itself (XDP_REDIRECT), skipping the
    /// kernel's forwarding path and with it netfilter's forward and
    /// postrouting hooks for the client-to-backend direction. Packets the
    /// FIB cannot route yet (no neighbour entry, TTL expiring, over the
    /// MTU, VLAN tagged) still go to the kernel.
    Fib,
}

impl NatForwarding {
    /// Every value, in the order used when listing valid values.
    pub const ALL: [NatForwarding; 2] = [NatForwarding::Kernel, NatForwarding::Fib];

    /// The name used in the configuration file and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            NatForwarding::Kernel => "kernel",
            NatForwarding::Fib => "fib",
        }
    }
}

impl fmt::Display for NatForwarding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The backend port meaning "keep the client's destination port": the
/// default for backends of port-range and `any` VIPs that give no port. The
/// datapath reads a backend port of 0 the same way.
pub const KEEP_DESTINATION_PORT: u16 = 0;

/// One virtual service: traffic to `address:ports/protocol` is spread over
/// `backends`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VipConfig {
    /// Unique, stable name used by the API, CLI and metrics to refer to the
    /// VIP; 1-63 characters `[a-z0-9][a-z0-9-_.]*`, so it is safe in metric
    /// labels and file names.
    pub name: String,
    /// Address clients connect to. Never unspecified, multicast, loopback or
    /// (IPv4) broadcast, and never an IPv4-mapped IPv6 address.
    pub address: IpAddr,
    /// Destination ports clients connect to: one port (1-65535), a range
    /// (`8000-8099`, both ends 1-65535), or [`PortRange::ANY`].
    pub ports: PortRange,
    /// Transport protocol matched by the VIP.
    pub protocol: Protocol,
    /// How packets are delivered to backends.
    pub mode: Mode,
    /// Where traffic goes. May be empty: the VIP then drops its traffic
    /// (counted as `no_healthy_backend`). Every backend has the VIP's address
    /// family and no (address, port) appears twice.
    pub backends: Vec<BackendConfig>,
    /// The VIP's default active health check for its backends, as written
    /// (each backend's effective check is in [`BackendConfig::health_check`]).
    pub health_check: Option<HealthCheck>,
    /// Whether a client's connections all go to one backend (default none).
    pub session_affinity: SessionAffinity,
    /// Who routes the rewritten packets of a NAT VIP (`natForwarding`,
    /// default kernel); always [`NatForwarding::Kernel`] in the DSR modes.
    pub nat_forwarding: NatForwarding,
    /// The VIP's own SYN rate limit (TCP VIPs only). None: the node-wide
    /// [`Settings::syn_rate_limit`] applies, if any.
    pub syn_rate_limit: Option<RateLimit>,
    /// Whether the VIP is announced to the network (`advertise`, default
    /// true): by BGP while it has a healthy backend, and by the L2
    /// responder. Without `bgp:` and `l2Announce:` nothing is announced.
    pub advertise: bool,
    /// Communities attached to the VIP's BGP route (`communities`), sorted,
    /// without duplicates.
    pub communities: Vec<Community>,
}

/// An active health check of a backend. Probes go to the backend's own
/// address (never from the VIP); a backend listed by several VIPs is probed
/// once, so every VIP must ask for the same check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// What a probe does.
    pub kind: CheckKind,
    /// Time between probes (100 ms - 1 h, default 2 s).
    pub interval: std::time::Duration,
    /// Longest a probe may take (at most the interval, default 1 s).
    pub timeout: std::time::Duration,
    /// Consecutive successes that bring a down backend back (default 2).
    pub rise: u32,
    /// Consecutive failures that take a backend down (default 3).
    pub fall: u32,
    /// Port to probe instead of the backend's own port. Always set when the
    /// backend keeps the client's destination port (it has no port of its
    /// own to probe).
    pub port: Option<u16>,
}

/// The probe of a [`HealthCheck`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckKind {
    /// A TCP connection that completes.
    Tcp,
    /// An HTTP/1.1 GET whose status is in `expect` (inclusive).
    Http {
        /// Request path, starting with `/` (default `/`).
        path: String,
        /// Accepted status range (default 200-399).
        expect: (u16, u16),
        /// Host header (default: the probed address).
        host: Option<String>,
    },
}

/// One real server behind a VIP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendConfig {
    /// Address of the server, of the same family as its VIP.
    pub address: IpAddr,
    /// Port packets are rewritten to. Without `port:` in the file: the VIP's
    /// port for a single-port VIP, and [`KEEP_DESTINATION_PORT`] (0: each
    /// packet keeps the destination port the client used) for a port-range
    /// or `any` VIP. 0 never appears otherwise.
    pub port: u16,
    /// Relative share of new flows (1-65535, default 1); a backend of weight
    /// 2 gets about twice the flows of one of weight 1.
    pub weight: u32,
    /// Unicast MAC address of the server, needed to deliver frames directly
    /// in the DSR modes; optional in NAT mode.
    pub mac: Option<[u8; 6]>,
    /// Its effective health check: its own `healthCheck` if it has one
    /// (`type: none` disables checking), else its VIP's; None = not probed
    /// (the backend counts as healthy).
    pub health_check: Option<HealthCheck>,
}

impl BackendConfig {
    /// Whether packets keep the client's destination port (port 0).
    pub fn keeps_destination_port(&self) -> bool {
        self.port == KEEP_DESTINATION_PORT
    }
}

/// Transport protocol of a VIP. Part of the VIP's identity: TCP and UDP on
/// the same address and port are two different VIPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Protocol {
    /// TCP (IP protocol 6). The default, as most load-balanced services are TCP.
    #[default]
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
}

impl Protocol {
    /// Every protocol, in the order used when listing valid values.
    pub const ALL: [Protocol; 2] = [Protocol::Tcp, Protocol::Udp];

    /// The name used in the configuration file and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }

    /// IANA IP protocol number, as found in the IPv4 protocol / IPv6 next
    /// header field the dataplane matches on.
    pub fn ip_proto(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a VIP forwards packets to its backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Mode {
    /// Destination NAT: rewrite the destination to the backend and reverse
    /// the rewrite on replies, which therefore must come back through the
    /// load balancer. The default, as it needs nothing from the backends.
    #[default]
    Nat,
    /// Direct server return at layer 2: only the destination MAC is
    /// rewritten; backends hold the VIP and reply to clients directly.
    Dsr,
    /// Direct server return with the packet encapsulated in IP-in-IP.
    DsrIpip,
    /// Direct server return with the packet encapsulated in GRE.
    DsrGre,
}

impl Mode {
    /// Every mode, in the order used when listing valid values.
    pub const ALL: [Mode; 4] = [Mode::Nat, Mode::Dsr, Mode::DsrIpip, Mode::DsrGre];

    /// The name used in the configuration file and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Nat => "nat",
            Mode::Dsr => "dsr",
            Mode::DsrIpip => "dsr-ipip",
            Mode::DsrGre => "dsr-gre",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses and validates a configuration held in memory.
///
/// `source` names where the text came from (usually the file name); it only
/// prefixes error messages. An empty text, or one holding only comments, is a
/// valid configuration with no VIPs.
pub fn parse(text: &str, source: &str) -> Result<Config, ConfigError> {
    let root = match yaml::load(text) {
        Ok(root) => root,
        Err(e) => {
            return Err(ConfigError::single(
                source,
                FieldError {
                    path: String::new(),
                    line: Some(e.pos.line),
                    column: Some(e.pos.column),
                    message: e.message,
                },
            ));
        }
    };
    decode::decode(root.as_ref()).map_err(|errors| ConfigError {
        file: source.to_string(),
        errors,
    })
}

/// Reads, parses and validates the configuration file at `path`.
///
/// A file that cannot be read is reported as a [`ConfigError`] too, so the
/// caller has a single error type to print.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with_text(path).map(|(config, _)| config)
}

/// [`load`], also returning the text that was validated, so a daemon can
/// tell whether a re-read file differs from the configuration in force.
pub fn load_with_text(path: &Path) -> Result<(Config, String), ConfigError> {
    let source = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text, &source).map(|config| (config, text)),
        Err(e) => Err(ConfigError::single(
            &source,
            FieldError {
                path: String::new(),
                line: None,
                column: None,
                message: format!("cannot read configuration file: {e}"),
            },
        )),
    }
}
