//! Typed handles on the classifier's maps (`bpf/cls_maps.h`).

use aya::Ebpf;
use aya::maps::lpm_trie::Key as LpmKey;
use aya::maps::{Array, HashMap, LpmTrie, Map, MapData, PerCpuArray};
use rivora_abi as abi;

use crate::Error;
use crate::maps::MaglevTable;

/// The part of `struct rv_cls_src_key4` after `prefixlen` (aya's
/// [`LpmKey`] holds the prefix length).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClsSrcData4 {
    /// The rule ID (matched exactly: always within the prefix).
    pub rule_id: u32,
    /// Source prefix, network order.
    pub addr: [u8; 4],
}

/// The part of `struct rv_cls_src_key6` after `prefixlen`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClsSrcData6 {
    /// The rule ID.
    pub rule_id: u32,
    /// Source prefix.
    pub addr: [u8; 16],
}

// SAFETY: repr(C), a u32 then u8s making a multiple of 4: no padding.
unsafe impl aya::Pod for ClsSrcData4 {}
// SAFETY: as above.
unsafe impl aya::Pod for ClsSrcData6 {}

// aya's key must be the C key byte for byte.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<LpmKey<ClsSrcData4>>() == size_of::<abi::ClsSrcKey4>());
    assert!(size_of::<LpmKey<ClsSrcData6>>() == size_of::<abi::ClsSrcKey6>());
    assert!(offset_of!(abi::ClsSrcKey4, rule_id) == 4 + offset_of!(ClsSrcData4, rule_id));
    assert!(offset_of!(abi::ClsSrcKey4, addr) == 4 + offset_of!(ClsSrcData4, addr));
    assert!(offset_of!(abi::ClsSrcKey6, addr) == 4 + offset_of!(ClsSrcData6, addr));
};

/// The classifier's pinned maps, by name: what ABI 14 added (compat.rs)
/// and what clean-up removes (loader.rs).
pub const CLS_MAP_NAMES: &[&str] = &[
    "cls_ctl_map",
    "cls_vip_map",
    "cls_vip_map6",
    "cls_rule_map",
    "cls_src_map",
    "cls_src_map6",
    "cls_group_map",
    "cls_table",
    "cls_target_map",
    "cls_frag_map",
    "cls_frag_map6",
    "cls_vip_stats_map",
    "cls_rule_stats_map",
    "cls_group_stats_map",
    "cls_event_map",
];

/// Every classifier map the control plane writes or reads.
pub struct ClsMaps {
    /// Which families have classifier VIPs (index 0).
    pub ctl: Array<MapData, abi::ClsCtl>,
    /// IPv4 VIPs and their rule lists.
    pub vips4: HashMap<MapData, abi::ClsVipKey4, abi::ClsVip>,
    /// IPv6 VIPs.
    pub vips6: HashMap<MapData, abi::ClsVipKey6, abi::ClsVip>,
    /// Rules by ID.
    pub rules: Array<MapData, abi::ClsRule>,
    /// IPv4 source prefixes of rules.
    pub src4: LpmTrie<MapData, ClsSrcData4, u32>,
    /// IPv6 source prefixes of rules.
    pub src6: LpmTrie<MapData, ClsSrcData6, u32>,
    /// Groups by ID.
    pub groups: HashMap<MapData, u32, abi::ClsGroup>,
    /// Every group's tables (slot numbers), mapped.
    pub table: MaglevTable,
    /// (group, slot) -> next hops.
    pub targets: HashMap<MapData, abi::ClsTargetKey, abi::ClsTarget>,
    /// Per-VIP counters (per CPU).
    pub vip_stats: PerCpuArray<MapData, abi::ClsStats>,
    /// Per-rule counters.
    pub rule_stats: PerCpuArray<MapData, abi::ClsStats>,
    /// Per-group counters.
    pub group_stats: PerCpuArray<MapData, abi::ClsStats>,
    /// Classifier events (`abi::cls_event`).
    pub events: PerCpuArray<MapData, u64>,
}

fn take(ebpf: &mut Ebpf, name: &'static str) -> Result<Map, Error> {
    ebpf.take_map(name).ok_or(Error::MissingMap(name))
}

macro_rules! typed {
    ($ebpf:expr, $name:literal) => {
        take($ebpf, $name)?.try_into().map_err(|e| Error::Map {
            map: $name,
            source: e,
        })?
    };
}

impl ClsMaps {
    /// Takes the classifier's maps out of the loaded ingress object.
    pub fn take_from(ebpf: &mut Ebpf) -> Result<Self, Error> {
        let table = match take(ebpf, "cls_table")? {
            Map::Array(data) => MaglevTable::map_named(data, "cls_table")?,
            _ => return Err(Error::MissingMap("cls_table")),
        };
        Ok(Self {
            ctl: typed!(ebpf, "cls_ctl_map"),
            vips4: typed!(ebpf, "cls_vip_map"),
            vips6: typed!(ebpf, "cls_vip_map6"),
            rules: typed!(ebpf, "cls_rule_map"),
            src4: typed!(ebpf, "cls_src_map"),
            src6: typed!(ebpf, "cls_src_map6"),
            groups: typed!(ebpf, "cls_group_map"),
            table,
            targets: typed!(ebpf, "cls_target_map"),
            vip_stats: typed!(ebpf, "cls_vip_stats_map"),
            rule_stats: typed!(ebpf, "cls_rule_stats_map"),
            group_stats: typed!(ebpf, "cls_group_stats_map"),
            events: typed!(ebpf, "cls_event_map"),
        })
    }
}
