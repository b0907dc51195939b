//! Settings of the node as a whole.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use rivora_bgp::SpeakerConfig;
use rivora_dataplane::RateLimit;

/// What applies to the node rather than to one VIP.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeSettings {
    /// SYN rate limit per client address for every TCP VIP without one of
    /// its own. None: no node-wide limit.
    pub syn_rate_limit: Option<RateLimit>,
    /// Outer source addresses of L3 DSR tunnels.
    pub tunnel_source: TunnelSource,
    /// The source address of flows sent to backends on other nodes
    /// (`VipSpec::snat`: a Kubernetes ETP Cluster Service's remote
    /// endpoints): the node's own, which those backends answer to. A
    /// family left None cannot have such backends.
    pub snat: SnatAddresses,
    /// The BGP speaker's configuration. None: no speaker runs.
    pub bgp: Option<SpeakerConfig>,
    /// ARP/NDP answers for the VIPs. None: nothing answers at layer 2.
    pub l2: Option<L2Settings>,
}

/// The outer source address of IPIP/GRE packets, per family: an address
/// of this node that the backends can reach and answer to. A family left
/// None cannot carry L3 DSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TunnelSource {
    /// For IPv4 tunnels.
    pub v4: Option<Ipv4Addr>,
    /// For IPv6 tunnels.
    pub v6: Option<Ipv6Addr>,
}

/// This node's address per family as the source of translated flows
/// (the Kubernetes Node's InternalIP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SnatAddresses {
    /// For IPv4 VIPs.
    pub v4: Option<Ipv4Addr>,
    /// For IPv6 VIPs.
    pub v6: Option<Ipv6Addr>,
}

/// The ARP/NDP responder's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L2Settings {
    /// Interface to answer on. None: rivorad's own `--interface`, which a
    /// source does not know (and need not).
    pub interface: Option<String>,
    /// How often each VIP is announced again unasked (gratuitous ARP,
    /// unsolicited neighbour advertisement).
    pub announce_interval: Duration,
}
