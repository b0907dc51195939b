//! The desired state the map writer is given: VIPs and their backends, in
//! plain Rust types, independent of where they came from (static YAML today,
//! Kubernetes later). Both paths converge here.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// IP protocol numbers Rivora balances.
pub mod proto {
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
}

/// Forwarding mode of a VIP, as the datapath encodes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// Full NAT.
    Nat,
    /// L2 direct server return.
    Dsr,
    /// L3 direct server return over IP-in-IP.
    DsrIpip,
    /// L3 direct server return over GRE.
    DsrGre,
}

impl Mode {
    /// The `enum rv_mode` value the BPF program switches on.
    pub fn abi(self) -> u8 {
        match self {
            Mode::Nat => rivora_abi::mode::NAT,
            Mode::Dsr => rivora_abi::mode::DSR,
            Mode::DsrIpip => rivora_abi::mode::DSR_IPIP,
            Mode::DsrGre => rivora_abi::mode::DSR_GRE,
        }
    }

    /// The name used in config, API and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Nat => "nat",
            Mode::Dsr => "dsr",
            Mode::DsrIpip => "dsr-ipip",
            Mode::DsrGre => "dsr-gre",
        }
    }
}

/// What identifies a VIP in the datapath: an address, a protocol and the
/// inclusive destination port range `port..=port_last`.
///
/// An exact VIP (`port == port_last`) lives in vip_map(6); any other range
/// is written to the port-range trie vip_range_map(6) as the prefixes
/// covering it (see [`crate::writer::port_range_prefixes`]), and the whole
/// address (`any`) is `0..=65535`. An exact VIP takes its port even inside
/// another VIP's range; two ranges of one address and protocol never
/// overlap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VipKey {
    /// The VIP address.
    pub addr: IpAddr,
    /// The VIP port, or the first port of its range.
    pub port: u16,
    /// The last port of its range (`== port` for an exact VIP).
    pub port_last: u16,
    /// IP protocol number ([`proto`]).
    pub proto: u8,
}

impl VipKey {
    /// The ports as operators write them: `80`, `8000-8099` or `any`; what
    /// logs, the CLI and the metrics' `port` label show for the VIP.
    pub fn ports_label(&self) -> String {
        if self.is_any_port() {
            "any".to_string()
        } else if self.is_exact() {
            self.port.to_string()
        } else {
            format!("{}-{}", self.port, self.port_last)
        }
    }

    /// An exact VIP `addr:port`.
    pub fn exact(addr: IpAddr, port: u16, proto: u8) -> Self {
        Self {
            addr,
            port,
            port_last: port,
            proto,
        }
    }

    /// A VIP matching the ports `first..=last` of `addr`.
    pub fn range(addr: IpAddr, first: u16, last: u16, proto: u8) -> Self {
        Self {
            addr,
            port: first,
            port_last: last,
            proto,
        }
    }

    /// A VIP matching every port of `addr` (`port: any`).
    pub fn any_port(addr: IpAddr, proto: u8) -> Self {
        Self::range(addr, 0, u16::MAX, proto)
    }

    /// Whether it is one port (vip_map), not a range (vip_range_map).
    pub fn is_exact(&self) -> bool {
        self.port == self.port_last
    }

    /// Whether it matches every port.
    pub fn is_any_port(&self) -> bool {
        self.port == 0 && self.port_last == u16::MAX
    }

    /// Whether `port` is one of its ports.
    pub fn contains_port(&self, port: u16) -> bool {
        (self.port..=self.port_last).contains(&port)
    }

    /// Whether the two keys are of one address and protocol and share a port.
    pub fn overlaps(&self, other: &VipKey) -> bool {
        self.addr == other.addr
            && self.proto == other.proto
            && self.port <= other.port_last
            && other.port <= self.port_last
    }
}

impl fmt::Display for VipKey {
    /// `10.0.0.1:80/tcp`, `10.0.0.1:8000-8099/tcp`, `[2001:db8::1]:any/udp`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = match self.proto {
            proto::TCP => "tcp",
            proto::UDP => "udp",
            _ => "?",
        };
        let ports = self.ports_label();
        match self.addr {
            IpAddr::V4(a) => write!(f, "{a}:{ports}/{p}"),
            IpAddr::V6(a) => write!(f, "[{a}]:{ports}/{p}"),
        }
    }
}

/// What identifies a backend: one server process, shared by every VIP that
/// lists it, so it gets one backend ID (and later one health probe).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendKey {
    /// The backend's own address.
    pub addr: IpAddr,
    /// The port packets are rewritten to; [`KEEP_DESTINATION_PORT`] (0)
    /// keeps the client's destination port, for port-range VIPs only.
    pub port: u16,
}

/// Backend port meaning "keep the client's destination port" (the datapath
/// does not rewrite the port of such a backend's packets).
pub const KEEP_DESTINATION_PORT: u16 = 0;

impl BackendKey {
    /// Whether packets keep the client's destination port.
    pub fn keeps_destination_port(&self) -> bool {
        self.port == KEEP_DESTINATION_PORT
    }
}

/// A per-source token bucket for TCP SYNs: `rate` SYNs per second on
/// average, up to `burst` at once (both >= 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RateLimit {
    /// SYNs per second per source address.
    pub rate: u64,
    /// Bucket depth in SYNs.
    pub burst: u64,
}

impl RateLimit {
    /// The map value enabling this limit.
    pub fn abi(self) -> rivora_abi::RlConfig {
        rivora_abi::RlConfig {
            rate: self.rate,
            burst: self.burst,
            enabled: 1,
            pad: 0,
        }
    }

    /// The limit a map value holds; None when disabled.
    pub fn from_abi(c: rivora_abi::RlConfig) -> Option<Self> {
        (c.enabled != 0).then_some(RateLimit {
            rate: c.rate,
            burst: c.burst,
        })
    }
}

impl fmt::Display for RateLimit {
    /// `100/s burst 200`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s burst {}", self.rate, self.burst)
    }
}

impl fmt::Display for BackendKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            IpAddr::V4(a) => write!(f, "{a}:{}", self.port),
            IpAddr::V6(a) => write!(f, "[{a}]:{}", self.port),
        }
    }
}

/// One backend of a VIP.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendSpec {
    /// Address and port.
    pub key: BackendKey,
    /// Relative share of new flows (>= 1).
    pub weight: u32,
    /// Needed by DSR modes; zero when unknown.
    pub mac: [u8; 6],
}

/// One source prefix that may reach a VIP (loadBalancerSourceRanges): the
/// sources whose first `prefix_len` bits equal `addr`'s. Bits of `addr`
/// beyond the prefix are ignored (the writer clears them), as the kernel's
/// trie ignores them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceRange {
    /// The prefix's address.
    pub addr: IpAddr,
    /// Prefix length: 0..=32 (IPv4) or 0..=128 (IPv6).
    pub prefix_len: u8,
}

impl SourceRange {
    /// `addr/prefix_len` (not checked: the writer's validation is).
    pub fn new(addr: IpAddr, prefix_len: u8) -> Self {
        Self { addr, prefix_len }
    }

    /// The longest prefix of the address's family.
    pub fn max_len(&self) -> u8 {
        if self.addr.is_ipv4() { 32 } else { 128 }
    }

    /// The same prefix with the bits beyond `prefix_len` cleared (a prefix
    /// length too long for the family is left as it is).
    pub fn canonical(&self) -> Self {
        let len = u32::from(self.prefix_len);
        let addr = match self.addr {
            IpAddr::V4(a) if len <= 32 => {
                let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) if len <= 128 => {
                let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
            other => other,
        };
        Self { addr, ..*self }
    }

    /// Whether `ip` is inside the prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let c = self.canonical();
        SourceRange::new(ip, self.prefix_len).canonical() == c && ip.is_ipv4() == c.addr.is_ipv4()
    }
}

impl fmt::Display for SourceRange {
    /// `10.0.0.0/8`, `2001:db8::/32`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

impl FromStr for SourceRange {
    type Err = String;

    /// `10.0.0.0/8`, or a bare address (a /32 or /128).
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|e| format!("source range {s}: address: {e}"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix_len = match len {
            None => max,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| format!("source range {s}: prefix length must be 0..={max}"))?,
        };
        Ok(Self { addr, prefix_len })
    }
}

/// One VIP as the control plane wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipSpec {
    /// Operator-facing name (unique), shown by the API.
    pub name: String,
    /// Address, port and protocol.
    pub key: VipKey,
    /// Forwarding mode.
    pub mode: Mode,
    /// Backends; may be empty (the VIP then drops as no_healthy_backend,
    /// or refuses every new flow with a `reject_weight`).
    pub backends: Vec<BackendSpec>,
    /// The weight, in the units of the backends' weights, of a share of
    /// new flows the VIP refuses: of `total = sum of weights +
    /// reject_weight`, about `reject_weight / total` of new flows are
    /// refused, each backend keeps its `weight / total`. A refused TCP
    /// segment that would open a flow (or any TCP segment without a flow
    /// entry) gets a reset back; any other packet (UDP) is dropped; both
    /// count as the VIP's drops of reason `no_backend`.
    ///
    /// Why: Gateway API's TCPRoute and UDPRoute must reject the
    /// connections (drop the packets) an invalid backendRef's weight would
    /// have received, while the valid backends keep their shares; spreading
    /// that share over the valid backends would silently change them.
    ///
    /// How: the share is a pseudo-backend in the VIP's Maglev slice
    /// ([`crate::writer::REJECT_MAGLEV_KEY`], one backend ID with health
    /// flag `REJECT` shared by every such VIP), so the slice stays a pure
    /// function of the backends, their weights and this weight, the same
    /// across restarts. Established flows (flow entries) are never
    /// refused, whatever this becomes; a down or draining backend's share
    /// goes to the valid backends only, never to the refused share.
    /// 0 (the default): nothing refused, the slice exactly as without it.
    pub reject_weight: u32,
    /// sessionAffinity clientIP: Maglev hashes the client address only
    /// (service flag `AFFINITY_CLIENT_IP`).
    pub affinity_client_ip: bool,
    /// With `affinity_client_ip`: how long a client's new flows keep going
    /// to the backend its last new flow went to, whatever Maglev says after
    /// a backend change (Kubernetes' sessionAffinityConfig.clientIP
    /// timeoutSeconds; svc_affinity_timeout_map, client_affinity_map(6)).
    /// None: the hash alone (a client moves when the backend set changes
    /// under it). 1 s to 1 day.
    pub affinity_timeout: Option<std::time::Duration>,
    /// The VIP's own SYN rate limit (svc_rl_config_map, service flag
    /// `SYN_RATE_LIMIT`); None: the node-wide limit applies, if any.
    pub syn_rate_limit: Option<RateLimit>,
    /// NAT only (`natForwarding: fib`, service flag `NAT_FIB`): the ingress
    /// program routes the rewritten packet itself (FIB lookup, redirect)
    /// instead of handing it to the kernel's forwarding path, which saves
    /// the kernel's routing and netfilter work per packet but also skips
    /// the node's forward firewall rules for these packets.
    pub nat_fib: bool,
    /// loadBalancerSourceRanges (service flag `SOURCE_RANGES`,
    /// src_range_map(6)): None, any source may reach the VIP; Some(list),
    /// only sources inside one of the prefixes (of the VIP's family, at most
    /// [`rivora_abi::MAX_SRC_RANGES_PER_VIP`]); an empty list, none. Others
    /// are dropped as `source_range`.
    pub source_ranges: Option<Vec<SourceRange>>,
    /// NAT only. true (the static YAML's behaviour): a backend endpoint that
    /// serves this VIP alone is registered as exclusive in
    /// nat_endpoint_map(6), and tc_nat rewrites *every* packet it sends to
    /// come from the VIP, with no per-flow state. false: its endpoints are
    /// never exclusive and replies are matched by per-flow nat_reverse_map
    /// entries only, so other traffic of the backend leaving through this
    /// node (a Kubernetes pod's pod-to-pod or ClusterIP replies) is left
    /// alone. An endpoint shared with a stateless VIP follows this one:
    /// per-flow entries for both (endpoints.rs).
    pub stateless_reverse: bool,
    /// Backends its source asks to drain for this VIP (a terminating
    /// Kubernetes endpoint): they stay in the VIP's Maglev slice, keep
    /// their established flows and take no new ones. A backend listed by
    /// several VIPs drains only while every one of them asks for it (one
    /// health state per backend: a VIP still serving from it wins, as
    /// kube-proxy's terminating fallback would). Keys not among
    /// `backends` are refused.
    pub draining: BTreeSet<BackendKey>,
    /// NAT only. Backends on other nodes (a Kubernetes ETP Cluster
    /// Service's remote endpoints): they answer through their own node, so
    /// the VIP's flows to them also get this node's address and a node port
    /// as source (`Dataplane::set_snat_source`), and their replies come back
    /// here (bpf/snat.h). They see the node's address, not the client's.
    /// One flag per backend: a backend any VIP lists here is translated in
    /// every VIP that has service flag SNAT. Keys not among `backends` are
    /// refused.
    pub snat: BTreeSet<BackendKey>,
}

impl VipSpec {
    /// A NAT VIP without affinity or rate limit.
    pub fn new(name: impl Into<String>, key: VipKey, backends: Vec<BackendSpec>) -> Self {
        Self {
            name: name.into(),
            key,
            mode: Mode::Nat,
            backends,
            reject_weight: 0,
            affinity_client_ip: false,
            affinity_timeout: None,
            syn_rate_limit: None,
            nat_fib: false,
            source_ranges: None,
            stateless_reverse: true,
            draining: BTreeSet::new(),
            snat: BTreeSet::new(),
        }
    }

    /// Backends in a canonical order, so that a reordered list is not
    /// mistaken for a change.
    pub fn sorted_backends(&self) -> Vec<BackendSpec> {
        let mut b = self.backends.clone();
        b.sort();
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_ranges_parse_canonicalise_and_contain() {
        let r: SourceRange = "10.1.2.3/8".parse().unwrap();
        assert_eq!(r.canonical().to_string(), "10.0.0.0/8");
        assert!(r.contains("10.255.0.1".parse().unwrap()));
        assert!(!r.contains("11.0.0.1".parse().unwrap()));
        assert!(!r.contains("::a00:1".parse().unwrap()), "other family");
        let host: SourceRange = "2001:db8::1".parse().unwrap();
        assert_eq!(host.prefix_len, 128);
        let any: SourceRange = "::/0".parse().unwrap();
        assert!(any.contains("2001:db8::1".parse().unwrap()));
        assert_eq!(
            "2001:db8:ffff::1/33"
                .parse::<SourceRange>()
                .unwrap()
                .canonical()
                .to_string(),
            "2001:db8:8000::/33"
        );
        assert!("10.0.0.0/33".parse::<SourceRange>().is_err());
        assert!("10.0.0/8".parse::<SourceRange>().is_err());
    }
}
