//! How a VIP is announced to the network.

use std::fmt;

/// What one VIP asks of the announcer. Per VIP, because several VIPs may
/// share an address: the address is announced when one of them advertises
/// (with a healthy backend, for BGP), with the union of their communities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnouncePolicy {
    /// Announce the VIP at all (BGP route while it has a healthy backend,
    /// ARP/NDP answers). True by default: a VIP nobody can reach is rarely
    /// what an operator wants, and without BGP or L2 settings on the node
    /// nothing is announced anyway.
    pub advertise: bool,
    /// Communities on the VIP's BGP route, sorted, without duplicates.
    pub communities: Vec<Community>,
}

impl Default for AnnouncePolicy {
    /// Advertised, no communities.
    fn default() -> Self {
        Self {
            advertise: true,
            communities: Vec::new(),
        }
    }
}

/// An RFC 1997 BGP community in its wire form, `(AS << 16) | VALUE`,
/// which is what the speaker sends; shown as `AS:VALUE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Community(pub u32);

impl fmt::Display for Community {
    /// `AS:VALUE`, as operators write it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.0 >> 16, self.0 & 0xffff)
    }
}
