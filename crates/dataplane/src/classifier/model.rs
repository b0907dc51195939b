//! The classifier's desired state: distribution groups (a Maglev table of
//! stable slots whose targets own the VIP) and the rules that send a VIP's
//! packets to them (Meridio-2's DistributionGroup and L34Route, also
//! writable in rivorad's YAML). Plain Rust, no I/O: a source builds a
//! [`ClassifierSpec`], the dataplane's writer programs it.
//!
//! Why a model of its own next to [`crate::VipSpec`]: a VipSpec is one
//! (address, port, protocol) with its own backends, picked by an exact or
//! port-range match. A classifier VIP is a whole address whose packets are
//! sorted by ordered rules (source prefixes, port ranges on both sides,
//! protocols, header bytes, priority) into groups that several VIPs and
//! rules share, and forwarded without NAT to the target that owns the VIP.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::SourceRange;

/// The protocols a rule may list (Meridio-2's `TCP | UDP | SCTP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RuleProto {
    /// TCP (IP protocol 6).
    Tcp,
    /// UDP (17).
    Udp,
    /// SCTP (132).
    Sctp,
}

impl RuleProto {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            RuleProto::Tcp => 6,
            RuleProto::Udp => 17,
            RuleProto::Sctp => 132,
        }
    }

    /// `tcp`, `udp`, `sctp`: the names byte matches use.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleProto::Tcp => "tcp",
            RuleProto::Udp => "udp",
            RuleProto::Sctp => "sctp",
        }
    }

    /// Length of the fixed L4 header a byte match may read: SCTP's common
    /// header is 12 bytes, TCP's header without options 20, UDP's 8
    /// (nfqlb's limits, so a Meridio-2 route means the same here).
    pub fn header_len(self) -> u8 {
        match self {
            RuleProto::Tcp => 20,
            RuleProto::Udp => 8,
            RuleProto::Sctp => 12,
        }
    }
}

impl fmt::Display for RuleProto {
    /// `TCP`, `UDP`, `SCTP` (as Meridio-2's API spells them).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuleProto::Tcp => "TCP",
            RuleProto::Udp => "UDP",
            RuleProto::Sctp => "SCTP",
        })
    }
}

/// An inclusive port range (`80`, `1000-2000`; `any` is 0-65535).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Last port, >= first.
    pub last: u16,
}

impl PortRange {
    /// Every port.
    pub const ANY: PortRange = PortRange {
        first: 0,
        last: u16::MAX,
    };

    /// Whether `port` is inside.
    pub fn contains(&self, port: u16) -> bool {
        self.first <= port && port <= self.last
    }
}

impl fmt::Display for PortRange {
    /// `80` or `1000-2000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// One byte match on the fixed L4 header (tcpdump-like
/// `sctp[4:4] = 0`, `tcp[13:1] & 0x02 = 0x02`): the `len` bytes at
/// `offset` (big-endian), ANDed with `mask`, equal `value`. Only the
/// matches of the packet's own protocol are evaluated; a rule's are ANDed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteMatch {
    /// Whose header: a packet of another protocol skips this match.
    pub proto: RuleProto,
    /// Byte offset into the L4 header; `offset + len` is at most the
    /// protocol's [`RuleProto::header_len`].
    pub offset: u8,
    /// 1, 2 or 4 bytes.
    pub len: u8,
    /// Applied before comparing; all ones of `len` bytes when none given.
    pub mask: u32,
    /// What the masked bytes must equal (fits in `len` bytes).
    pub value: u32,
}

impl fmt::Display for ByteMatch {
    /// The tcpdump-like form Meridio-2's API takes: `sctp[4:4]=0`,
    /// `tcp[13:1]&0x12=0x2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}:{}]", self.proto.as_str(), self.offset, self.len)?;
        let full = if self.len >= 4 {
            u32::MAX
        } else {
            (1u32 << (8 * u32::from(self.len))) - 1
        };
        if self.mask != full {
            write!(f, "&{:#x}", self.mask)?;
        }
        if self.value > 9 {
            write!(f, "={:#x}", self.value)
        } else {
            write!(f, "={}", self.value)
        }
    }
}

/// How a group hashes SCTP packets. TCP and UDP always hash the
/// addresses, ports and protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum SctpHash {
    /// Ports and protocol only, not the addresses (nfqlb's default
    /// `hash_mode`, which Meridio-2 keeps): the paths of a multihomed
    /// association, which differ in addresses, reach one target.
    #[default]
    Ports,
    /// Addresses, ports and protocol, like TCP and UDP.
    FiveTuple,
}

impl SctpHash {
    /// `ports` or `five-tuple`.
    pub fn as_str(self) -> &'static str {
        match self {
            SctpHash::Ports => "ports",
            SctpHash::FiveTuple => "five-tuple",
        }
    }
}

/// One target of a group: the endpoint in slot `slot`, with at most one
/// address per family (a dual-stack endpoint uses one slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetSpec {
    /// Its Maglev identifier: always the same slot, below the group's
    /// `max_endpoints`.
    pub slot: u16,
    /// IPv4 next hop, if it has one.
    pub v4: Option<Ipv4Addr>,
    /// IPv6 next hop, if it has one.
    pub v6: Option<Ipv6Addr>,
}

/// A distribution group: `max_endpoints` stable slots, of which the listed
/// targets are usable. Its Maglev table length is fixed by `max_endpoints`
/// ([`GroupSpec::table_size`]), never by the count of targets, so scaling
/// moves only the flows Maglev must move, and the table is a function of
/// (length, slot set) alone: every replica and every restart computes the
/// same one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSpec {
    /// Unique among the groups (Kubernetes: `NAMESPACE/NAME`).
    pub name: String,
    /// Slots 0..max_endpoints (Meridio-2's `maglev.maxEndpoints`, 102 by
    /// default there).
    pub max_endpoints: u16,
    /// How SCTP is hashed.
    pub sctp_hash: SctpHash,
    /// The usable targets (ready, with an identifier below
    /// `max_endpoints`), at most one per slot.
    pub targets: Vec<TargetSpec>,
}

impl GroupSpec {
    /// The Maglev table length: the largest prime <= 100 x max_endpoints,
    /// as Meridio-2's nfqlb rounds it (102 -> 10193, 32 -> 3191), so a
    /// group balances and moves flows as it did there. None when
    /// max_endpoints is 0.
    pub fn table_size(&self) -> Option<u32> {
        table_size_for(self.max_endpoints)
    }

    /// The slots that have an address of this family, ascending: the
    /// family's table is built from these.
    pub fn slots(&self, v6: bool) -> BTreeSet<u16> {
        self.targets
            .iter()
            .filter(|t| if v6 { t.v6.is_some() } else { t.v4.is_some() })
            .map(|t| t.slot)
            .collect()
    }
}

/// The table length of a group of `max_endpoints` slots (see
/// [`GroupSpec::table_size`]).
pub fn table_size_for(max_endpoints: u16) -> Option<u32> {
    if max_endpoints == 0 {
        return None;
    }
    rivora_maglev::prime_at_most(100 * u32::from(max_endpoints))
}

/// One rule: packets to one of `vips` that match every other field go to
/// `group`. Of a VIP's rules the one with the highest `priority` that
/// matches wins; equal priorities are ordered by `name` (byte order,
/// first wins), so the outcome never depends on the order rules were
/// written in. A rule whose group has no usable target of the packet's
/// family drops the packet (counted) and never lets it fall through to a
/// lower rule, as Meridio-2 does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSpec {
    /// Unique among the rules (Kubernetes: `NAMESPACE/NAME`).
    pub name: String,
    /// Higher wins; Meridio-2 requires >= 1.
    pub priority: i32,
    /// The group's [`GroupSpec::name`].
    pub group: String,
    /// The VIPs (whole addresses, either family).
    pub vips: Vec<IpAddr>,
    /// Allowed source prefixes; empty: any source.
    pub sources: Vec<SourceRange>,
    /// Allowed source ports; empty: any.
    pub source_ports: Vec<PortRange>,
    /// Allowed destination ports; empty: any.
    pub destination_ports: Vec<PortRange>,
    /// The protocols (at least one).
    pub protocols: BTreeSet<RuleProto>,
    /// Header byte matches, ANDed (those of the packet's protocol).
    pub byte_matches: Vec<ByteMatch>,
}

impl RuleSpec {
    /// Whether `self` comes before `other` in a VIP's evaluation order:
    /// higher priority first, then name.
    pub fn precedes(&self, other: &RuleSpec) -> bool {
        (std::cmp::Reverse(self.priority), &self.name)
            < (std::cmp::Reverse(other.priority), &other.name)
    }
}

/// Everything the classifier serves: groups and the rules into them. Empty
/// (the default): no classifier VIPs, and xdp_ingress never consults it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ClassifierSpec {
    /// The groups, names unique.
    pub groups: Vec<GroupSpec>,
    /// The rules, names unique, each naming a listed group.
    pub rules: Vec<RuleSpec>,
}

impl ClassifierSpec {
    /// Whether there is nothing to serve.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.rules.is_empty()
    }

    /// Every VIP some rule lists, once.
    pub fn vips(&self) -> BTreeSet<IpAddr> {
        self.rules
            .iter()
            .flat_map(|r| r.vips.iter().copied())
            .collect()
    }

    /// A VIP's rules in evaluation order (see [`RuleSpec`]).
    pub fn rules_of(&self, vip: IpAddr) -> Vec<&RuleSpec> {
        let mut rules: Vec<&RuleSpec> = self
            .rules
            .iter()
            .filter(|r| r.vips.contains(&vip))
            .collect();
        rules.sort_by(|a, b| {
            (std::cmp::Reverse(a.priority), &a.name).cmp(&(std::cmp::Reverse(b.priority), &b.name))
        });
        rules
    }

    /// The VIPs that can forward: some rule lists the VIP and leads to a
    /// group with a usable target of the VIP's family. These are the ones
    /// to announce; the rest are withdrawn (per VIP, not all or nothing).
    pub fn ready_vips(&self) -> BTreeSet<IpAddr> {
        self.rules
            .iter()
            .flat_map(|r| {
                let group = self.groups.iter().find(|g| g.name == r.group);
                r.vips
                    .iter()
                    .copied()
                    .filter(move |v| group.is_some_and(|g| !g.slots(v.is_ipv6()).is_empty()))
            })
            .collect()
    }

    /// The groups with at least one usable target (either family): the
    /// ones whose `lb-ready-<group>` file exists.
    pub fn ready_groups(&self) -> BTreeSet<&str> {
        self.groups
            .iter()
            .filter(|g| !g.targets.is_empty())
            .map(|g| g.name.as_str())
            .collect()
    }
}
