//! The classifier's layouts (`rv_cls_*` of `bpf/rivora_abi.h`): Meridio-2's
//! rules and distribution groups on the XDP datapath (`bpf/classify.h` says
//! how the program reads them).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::StructLayout;

/// `RV_CLS_MAX_VIPS`: classifier VIPs per family.
pub const CLS_MAX_VIPS: u32 = 4096;
/// `RV_CLS_MAX_VIP_IDS`: per-VIP counter slots, both families.
pub const CLS_MAX_VIP_IDS: u32 = 8192;
/// `RV_CLS_MAX_RULES`: rule IDs (a changed rule takes a new one first).
pub const CLS_MAX_RULES: u32 = 8192;
/// `RV_CLS_MAX_RULES_PER_VIP`: rules one VIP evaluates.
pub const CLS_MAX_RULES_PER_VIP: usize = 32;
/// `RV_CLS_MAX_PORT_RANGES`: port ranges per side of a rule.
pub const CLS_MAX_PORT_RANGES: usize = 20;
/// `RV_CLS_MAX_BYTE_MATCHES`: byte matches of a rule.
pub const CLS_MAX_BYTE_MATCHES: usize = 10;
/// `RV_CLS_MAX_GROUPS`: group IDs.
pub const CLS_MAX_GROUPS: u32 = 2048;
/// `RV_CLS_MAX_TARGETS`: (group, slot) entries of all groups.
pub const CLS_MAX_TARGETS: u32 = 65536;
/// `RV_CLS_TABLE_SLOTS`: entries of `cls_table`, every group's tables.
pub const CLS_TABLE_SLOTS: u32 = 1_048_576;
/// `RV_CLS_MAX_SRC_PREFIXES`: source prefixes of all rules, per family.
pub const CLS_MAX_SRC_PREFIXES: u32 = 16384;
/// `RV_CLS_EVENT_SLOTS`: slots of `cls_event_map`.
pub const CLS_EVENT_SLOTS: u32 = 16;
/// `RV_CLS_HDR_BYTES`: the longest fixed L4 header a byte match reads.
pub const CLS_HDR_BYTES: u32 = 20;

/// `enum rv_cls_ctl_flags`: which families have classifier VIPs.
pub mod cls_ctl_flags {
    /// IPv4 classifier VIPs exist.
    pub const V4: u32 = 1 << 0;
    /// IPv6 classifier VIPs exist.
    pub const V6: u32 = 1 << 1;
}

/// `enum rv_cls_proto_bits`: a rule's protocols.
pub mod cls_proto {
    /// TCP.
    pub const TCP: u8 = 1 << 0;
    /// UDP.
    pub const UDP: u8 = 1 << 1;
    /// SCTP.
    pub const SCTP: u8 = 1 << 2;
}

/// `enum rv_cls_rule_flags`.
pub mod cls_rule_flags {
    /// Written and usable.
    pub const ACTIVE: u32 = 1 << 0;
    /// Only sources in the rule's prefixes match.
    pub const SOURCES: u32 = 1 << 1;
}

/// `enum rv_cls_group_flags`.
pub mod cls_group_flags {
    /// SCTP hashes on ports and protocol only (multihoming).
    pub const SCTP_PORTS: u32 = 1 << 0;
}

/// `enum rv_cls_target_flags`.
pub mod cls_target_flags {
    /// The target has an IPv4 address.
    pub const V4: u32 = 1 << 0;
    /// The target has an IPv6 address.
    pub const V6: u32 = 1 << 1;
}

/// `enum rv_cls_event`: indices of `cls_event_map`.
pub mod cls_event {
    /// Matched no rule of its VIP: dropped.
    pub const NO_RULE: u32 = 0;
    /// Its rule's group had no target of the family: dropped.
    pub const NO_TARGET: u32 = 1;
    /// The target's neighbour is not resolved: dropped.
    pub const NO_NEIGH: u32 = 2;
    /// No usable route to the target: dropped.
    pub const NO_ROUTE: u32 = 3;
    /// Answered with fragmentation needed / packet too big.
    pub const TOO_BIG_ICMP: u32 = 4;
    /// IPv4 without DF over the MTU: dropped.
    pub const TOO_BIG_DROP: u32 = 5;
    /// TTL expiring: handed to the kernel.
    pub const TTL_TO_KERNEL: u32 = 6;
    /// Later fragment without its first: dropped.
    pub const FRAG_UNMATCHED: u32 = 7;
    /// Truncated headers: dropped.
    pub const MALFORMED: u32 = 8;
    /// Informational ICMP sent to a target.
    pub const ECHO: u32 = 9;
    /// ICMP error sent to its flow's target.
    pub const ICMP_ERROR: u32 = 10;
    /// The VIP vanished between the gate and the stage.
    pub const NO_VIP: u32 = 11;
    /// Number of events.
    pub const COUNT: u32 = 12;
    /// Names for display, by index.
    pub const NAMES: [&str; COUNT as usize] = [
        "no_rule",
        "no_target",
        "no_neighbour",
        "no_route",
        "too_big_icmp",
        "too_big_dropped",
        "ttl_to_kernel",
        "fragment_unmatched",
        "malformed",
        "echo",
        "icmp_error",
        "vip_gone",
    ];
}

/// `struct rv_cls_ctl` (cls_ctl_map, one entry).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClsCtl {
    pub flags: u32,
    pub pad: u32,
}

/// `struct rv_cls_vip_key4`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClsVipKey4 {
    pub addr: u32,
}

impl ClsVipKey4 {
    /// The key of `addr` (network order, as in the packet).
    pub fn new(addr: Ipv4Addr) -> Self {
        Self {
            addr: u32::from_ne_bytes(addr.octets()),
        }
    }

    /// The address back.
    pub fn addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.addr.to_ne_bytes())
    }
}

/// `struct rv_cls_vip_key6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClsVipKey6 {
    pub addr: [u8; 16],
}

impl ClsVipKey6 {
    /// The key of `addr`.
    pub fn new(addr: Ipv6Addr) -> Self {
        Self {
            addr: addr.octets(),
        }
    }

    /// The address back.
    pub fn addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.addr)
    }
}

/// `struct rv_cls_vip`: a VIP's rules in evaluation order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClsVip {
    pub stats_id: u32,
    pub count: u32,
    pub rules: [u32; CLS_MAX_RULES_PER_VIP],
}

/// `struct rv_cls_ports`: an inclusive range, host order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClsPorts {
    pub first: u16,
    pub last: u16,
}

/// `struct rv_cls_byte_match`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClsByteMatch {
    pub mask: u32,
    pub value: u32,
    pub proto: u8,
    pub offset: u8,
    pub len: u8,
    pub pad: u8,
}

/// `struct rv_cls_rule` (cls_rule_map, by rule ID).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClsRule {
    pub group_id: u32,
    pub flags: u32,
    pub protos: u8,
    pub n_sports: u8,
    pub n_dports: u8,
    pub n_bytes: u8,
    pub generation: u32,
    pub sports: [ClsPorts; CLS_MAX_PORT_RANGES],
    pub dports: [ClsPorts; CLS_MAX_PORT_RANGES],
    pub bytes: [ClsByteMatch; CLS_MAX_BYTE_MATCHES],
}

/// `struct rv_cls_src_key4` (LPM trie key: rule ID exact, address by
/// prefix).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClsSrcKey4 {
    pub prefixlen: u32,
    pub rule_id: u32,
    pub addr: [u8; 4],
}

/// `struct rv_cls_src_key6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClsSrcKey6 {
    pub prefixlen: u32,
    pub rule_id: u32,
    pub addr: [u8; 16],
}

/// `struct rv_cls_group` (cls_group_map, by group ID).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClsGroup {
    pub offset4: u32,
    pub offset6: u32,
    pub size: u32,
    pub count4: u16,
    pub count6: u16,
    pub flags: u32,
    pub generation: u32,
}

/// `struct rv_cls_target_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClsTargetKey {
    pub group_id: u32,
    pub slot: u32,
}

/// `struct rv_cls_target`: a slot's next hops.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClsTarget {
    pub addr4: u32,
    pub addr6: [u8; 16],
    pub flags: u32,
}

impl ClsTarget {
    /// A target with the given next hops.
    pub fn new(v4: Option<Ipv4Addr>, v6: Option<Ipv6Addr>) -> Self {
        let mut t = Self::default();
        if let Some(a) = v4 {
            t.addr4 = u32::from_ne_bytes(a.octets());
            t.flags |= cls_target_flags::V4;
        }
        if let Some(a) = v6 {
            t.addr6 = a.octets();
            t.flags |= cls_target_flags::V6;
        }
        t
    }
}

/// `struct rv_cls_frag`: where a datagram's first fragment went.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClsFrag {
    pub group_id: u32,
    pub slot: u32,
    pub rule_id: u32,
    pub stats_id: u32,
}

/// `struct rv_cls_stats`: per-CPU counters of a VIP, rule or group.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClsStats {
    pub packets: u64,
    pub bytes: u64,
    pub no_target: u64,
    pub other: u64,
}

pod!(
    ClsCtl,
    ClsVipKey4,
    ClsVipKey6,
    ClsVip,
    ClsPorts,
    ClsByteMatch,
    ClsRule,
    ClsSrcKey4,
    ClsSrcKey6,
    ClsGroup,
    ClsTargetKey,
    ClsTarget,
    ClsFrag,
    ClsStats,
);

/// The classifier's structs, for [`crate::layouts`].
pub(crate) fn layouts() -> Vec<StructLayout> {
    vec![
        layout!(ClsCtl, "rv_cls_ctl", [flags, pad]),
        layout!(ClsVipKey4, "rv_cls_vip_key4", [addr]),
        layout!(ClsVipKey6, "rv_cls_vip_key6", [addr]),
        layout!(ClsVip, "rv_cls_vip", [stats_id, count, rules]),
        layout!(ClsPorts, "rv_cls_ports", [first, last]),
        layout!(
            ClsByteMatch,
            "rv_cls_byte_match",
            [mask, value, proto, offset, len, pad]
        ),
        layout!(
            ClsRule,
            "rv_cls_rule",
            [
                group_id, flags, protos, n_sports, n_dports, n_bytes, generation, sports, dports,
                bytes
            ]
        ),
        layout!(ClsSrcKey4, "rv_cls_src_key4", [prefixlen, rule_id, addr]),
        layout!(ClsSrcKey6, "rv_cls_src_key6", [prefixlen, rule_id, addr]),
        layout!(
            ClsGroup,
            "rv_cls_group",
            [offset4, offset6, size, count4, count6, flags, generation]
        ),
        layout!(ClsTargetKey, "rv_cls_target_key", [group_id, slot]),
        layout!(ClsTarget, "rv_cls_target", [addr4, addr6, flags]),
        layout!(ClsFrag, "rv_cls_frag", [group_id, slot, rule_id, stats_id]),
        layout!(ClsStats, "rv_cls_stats", [packets, bytes, no_target, other]),
    ]
}

/// The classifier's constants, for [`crate::constants`].
pub(crate) fn constants() -> Vec<(&'static str, i64)> {
    vec![
        ("RV_CLS_MAX_VIPS", CLS_MAX_VIPS as i64),
        ("RV_CLS_MAX_VIP_IDS", CLS_MAX_VIP_IDS as i64),
        ("RV_CLS_MAX_RULES", CLS_MAX_RULES as i64),
        ("RV_CLS_MAX_RULES_PER_VIP", CLS_MAX_RULES_PER_VIP as i64),
        ("RV_CLS_MAX_PORT_RANGES", CLS_MAX_PORT_RANGES as i64),
        ("RV_CLS_MAX_BYTE_MATCHES", CLS_MAX_BYTE_MATCHES as i64),
        ("RV_CLS_MAX_GROUPS", CLS_MAX_GROUPS as i64),
        ("RV_CLS_MAX_TARGETS", CLS_MAX_TARGETS as i64),
        ("RV_CLS_TABLE_SLOTS", CLS_TABLE_SLOTS as i64),
        ("RV_CLS_MAX_SRC_PREFIXES", CLS_MAX_SRC_PREFIXES as i64),
        ("RV_CLS_EVENT_SLOTS", CLS_EVENT_SLOTS as i64),
        ("RV_CLS_HDR_BYTES", CLS_HDR_BYTES as i64),
        ("RV_CLS_CTL_V4", cls_ctl_flags::V4 as i64),
        ("RV_CLS_CTL_V6", cls_ctl_flags::V6 as i64),
        ("RV_CLS_PROTO_TCP", cls_proto::TCP as i64),
        ("RV_CLS_PROTO_UDP", cls_proto::UDP as i64),
        ("RV_CLS_PROTO_SCTP", cls_proto::SCTP as i64),
        ("RV_CLS_RULE_F_ACTIVE", cls_rule_flags::ACTIVE as i64),
        ("RV_CLS_RULE_F_SOURCES", cls_rule_flags::SOURCES as i64),
        (
            "RV_CLS_GROUP_F_SCTP_PORTS",
            cls_group_flags::SCTP_PORTS as i64,
        ),
        ("RV_CLS_TARGET_F_V4", cls_target_flags::V4 as i64),
        ("RV_CLS_TARGET_F_V6", cls_target_flags::V6 as i64),
        ("RV_CLS_EVENT_COUNT", cls_event::COUNT as i64),
        ("RV_CLS_NO_RULE", cls_event::NO_RULE as i64),
        ("RV_CLS_NO_TARGET", cls_event::NO_TARGET as i64),
        ("RV_CLS_NO_NEIGH", cls_event::NO_NEIGH as i64),
        ("RV_CLS_NO_ROUTE", cls_event::NO_ROUTE as i64),
        ("RV_CLS_TOO_BIG_ICMP", cls_event::TOO_BIG_ICMP as i64),
        ("RV_CLS_TOO_BIG_DROP", cls_event::TOO_BIG_DROP as i64),
        ("RV_CLS_TTL_TO_KERNEL", cls_event::TTL_TO_KERNEL as i64),
        ("RV_CLS_FRAG_UNMATCHED", cls_event::FRAG_UNMATCHED as i64),
        ("RV_CLS_MALFORMED", cls_event::MALFORMED as i64),
        ("RV_CLS_ECHO", cls_event::ECHO as i64),
        ("RV_CLS_ICMP_ERROR", cls_event::ICMP_ERROR as i64),
        ("RV_CLS_NO_VIP", cls_event::NO_VIP as i64),
    ]
}
