//! Static YAML configuration of rivorad: parsed and fully validated.
//!
//! The file is the whole desired state of the load balancer: a list of
//! virtual IPs (VIPs), each with its backends.
//!
//! ```yaml
//! vips:
//!   - name: web             # required, unique, [a-z0-9][a-z0-9-_.]{0,62}
//!     address: 10.200.100.1 # IPv4 or IPv6, no prefix length
//!     port: 80              # 1-65535
//!     protocol: tcp         # tcp | udp (default tcp)
//!     mode: nat             # nat | dsr | dsr-ipip | dsr-gre (default nat)
//!     backends:             # optional, may be empty
//!       - address: 10.200.1.11      # same family as the VIP
//!         port: 8080                # default: the VIP's port
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
    /// The virtual services, in file order. Names are unique, and so are
    /// (address, port, protocol) triples. May be empty.
    pub vips: Vec<VipConfig>,
}

/// One virtual service: traffic to `address:port/protocol` is spread over
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
    /// Destination port clients connect to (1-65535).
    pub port: u16,
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
    /// Port to probe instead of the backend's own port.
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
    /// Port on the server (defaults to the VIP's port in the file).
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
