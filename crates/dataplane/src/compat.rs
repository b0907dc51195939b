//! Deciding whether maps pinned by an earlier rivorad can be adopted. Pinned
//! maps outlive the daemon, and the kernel would happily hand a new daemon a
//! map whose layout it no longer understands: every map is checked (type,
//! key and value size, capacity) and the writer's ABI version is read from
//! `rivora_meta` before anything is read or written.

use std::mem::size_of;
use std::path::Path;

use aya::maps::{MapInfo, MapType};
use rivora_abi as abi;

/// What one pinned map must look like.
#[derive(Clone, Debug, PartialEq)]
pub struct MapSpec {
    /// Pin name.
    pub name: &'static str,
    /// Map type.
    pub map_type: MapType,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Capacity.
    pub max_entries: u32,
}

/// The capacities an operator chooses at start (`--maglev-table-size`,
/// `--flow-table-size`): pinned maps of other sizes cannot be adopted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableSizes {
    /// Length of the shared Maglev table (a prime).
    pub maglev_table: u32,
    /// Capacity of each flow table (affinity and reverse NAT, per family).
    pub flow_table: u32,
}

impl TableSizes {
    /// The defaults: the spec's Maglev table and flow-table capacities.
    pub fn defaults() -> Self {
        Self {
            maglev_table: abi::MAGLEV_TABLE_DEFAULT,
            flow_table: abi::MAX_FLOWS,
        }
    }
}

/// The flow tables, sized by [`TableSizes::flow_table`].
pub const FLOW_TABLES: [&str; 4] = [
    "connection_affinity_map",
    "connection_affinity_map6",
    "nat_reverse_map",
    "nat_reverse_map6",
];

/// The source-translation tables (bpf/snat.h). They hold a subset of the
/// flows (those to backends on other nodes), so `--flow-table-size` sizes
/// them too; apart from [`FLOW_TABLES`] because they are only used by
/// Kubernetes `externalTrafficPolicy: Cluster` VIPs.
pub const SNAT_TABLES: [&str; 4] = [
    "snat_flow_map",
    "snat_flow_map6",
    "snat_rev_map",
    "snat_rev_map6",
];

/// Every map this build pins, as this build defines it (`bpf/maps.h`) with
/// the operator's `sizes`; a test checks the table against freshly created
/// maps.
pub fn expected_maps(sizes: &TableSizes) -> Vec<MapSpec> {
    let maglev_table_size = sizes.maglev_table;
    let s = |name, map_type, key: usize, value: usize, max_entries| MapSpec {
        name,
        map_type,
        key_size: key as u32,
        value_size: value as u32,
        max_entries,
    };
    vec![
        s(
            "vip_map",
            MapType::Hash,
            size_of::<abi::VipKey4>(),
            size_of::<abi::VipValue>(),
            abi::MAX_VIPS,
        ),
        s(
            "vip_map6",
            MapType::Hash,
            size_of::<abi::VipKey6>(),
            size_of::<abi::VipValue>(),
            abi::MAX_VIPS,
        ),
        s(
            "service_config_map",
            MapType::Array,
            4,
            size_of::<abi::Service>(),
            abi::MAX_VIPS,
        ),
        s("maglev_table", MapType::Array, 4, 4, maglev_table_size),
        s(
            "backend_map",
            MapType::Array,
            4,
            size_of::<abi::Backend4>(),
            abi::MAX_BACKENDS,
        ),
        s(
            "backend_map6",
            MapType::Array,
            4,
            size_of::<abi::Backend6>(),
            abi::MAX_BACKENDS,
        ),
        s(
            "backend_health_map",
            MapType::Array,
            4,
            size_of::<abi::BackendHealth>(),
            abi::MAX_BACKENDS,
        ),
        s(
            "connection_affinity_map",
            MapType::LruHash,
            size_of::<abi::Flow4>(),
            size_of::<abi::Affinity>(),
            sizes.flow_table,
        ),
        s(
            "connection_affinity_map6",
            MapType::LruHash,
            size_of::<abi::Flow6>(),
            size_of::<abi::Affinity>(),
            sizes.flow_table,
        ),
        s(
            "nat_reverse_map",
            MapType::LruHash,
            size_of::<abi::NatKey4>(),
            size_of::<abi::NatValue4>(),
            sizes.flow_table,
        ),
        s(
            "nat_reverse_map6",
            MapType::LruHash,
            size_of::<abi::NatKey6>(),
            size_of::<abi::NatValue6>(),
            sizes.flow_table,
        ),
        s("syn_hint_map", MapType::Array, 4, 8, abi::SYN_HINT_SLOTS),
        s(
            "svc_affinity_timeout_map",
            MapType::Array,
            4,
            size_of::<abi::AffinityTimeout>(),
            abi::MAX_VIPS,
        ),
        s(
            "client_affinity_map",
            MapType::LruHash,
            size_of::<abi::ClientKey4>(),
            size_of::<abi::ClientAffinity>(),
            abi::MAX_CLIENTS,
        ),
        s(
            "client_affinity_map6",
            MapType::LruHash,
            size_of::<abi::ClientKey6>(),
            size_of::<abi::ClientAffinity>(),
            abi::MAX_CLIENTS,
        ),
        s(
            "snat_config_map",
            MapType::Array,
            4,
            size_of::<abi::SnatConfig>(),
            1,
        ),
        s(
            "snat_flow_map",
            MapType::LruHash,
            size_of::<abi::Flow4>(),
            size_of::<abi::SnatFlow>(),
            sizes.flow_table,
        ),
        s(
            "snat_flow_map6",
            MapType::LruHash,
            size_of::<abi::Flow6>(),
            size_of::<abi::SnatFlow>(),
            sizes.flow_table,
        ),
        s(
            "snat_rev_map",
            MapType::LruHash,
            size_of::<abi::SnatRevKey4>(),
            size_of::<abi::SnatRev4>(),
            sizes.flow_table,
        ),
        s(
            "snat_rev_map6",
            MapType::LruHash,
            size_of::<abi::SnatRevKey6>(),
            size_of::<abi::SnatRev6>(),
            sizes.flow_table,
        ),
        s(
            "snat_stats_map",
            MapType::PerCpuArray,
            4,
            8,
            abi::SNAT_COUNTER_SLOTS,
        ),
        s(
            "stats_map",
            MapType::PerCpuArray,
            4,
            size_of::<abi::VipStats>(),
            abi::MAX_VIPS,
        ),
        s(
            "backend_stats_map",
            MapType::PerCpuArray,
            4,
            size_of::<abi::BackendStats>(),
            abi::MAX_BACKENDS,
        ),
        s(
            "drop_stats_map",
            MapType::PerCpuArray,
            4,
            size_of::<abi::DropStats>(),
            abi::DROP_REASON_SLOTS,
        ),
        s("rivora_meta", MapType::Array, 4, size_of::<abi::Meta>(), 1),
        s(
            "iface_mac_map",
            MapType::Array,
            4,
            size_of::<abi::Iface>(),
            1,
        ),
        s(
            "tunnel_config_map",
            MapType::Array,
            4,
            size_of::<abi::TunnelConfig>(),
            1,
        ),
        s(
            "vip_range_map",
            MapType::LpmTrie,
            size_of::<abi::VipRangeKey4>(),
            size_of::<abi::VipValue>(),
            abi::MAX_RANGE_PREFIXES,
        ),
        s(
            "vip_range_map6",
            MapType::LpmTrie,
            size_of::<abi::VipRangeKey6>(),
            size_of::<abi::VipValue>(),
            abi::MAX_RANGE_PREFIXES,
        ),
        s(
            "frag_map",
            MapType::LruHash,
            size_of::<abi::FragKey4>(),
            size_of::<abi::FragValue>(),
            abi::MAX_FRAGS,
        ),
        s(
            "frag_map6",
            MapType::LruHash,
            size_of::<abi::FragKey6>(),
            size_of::<abi::FragValue>(),
            abi::MAX_FRAGS,
        ),
        s(
            "frag_rev_map",
            MapType::LruHash,
            size_of::<abi::FragKey4>(),
            size_of::<abi::FragRevValue4>(),
            abi::MAX_FRAGS,
        ),
        s(
            "frag_rev_map6",
            MapType::LruHash,
            size_of::<abi::FragKey6>(),
            size_of::<abi::FragRevValue6>(),
            abi::MAX_FRAGS,
        ),
        s(
            "nat_endpoint_map",
            MapType::Hash,
            size_of::<abi::NatEpKey4>(),
            size_of::<abi::NatEpValue4>(),
            abi::MAX_NAT_ENDPOINTS,
        ),
        s(
            "nat_endpoint_map6",
            MapType::Hash,
            size_of::<abi::NatEpKey6>(),
            size_of::<abi::NatEpValue6>(),
            abi::MAX_NAT_ENDPOINTS,
        ),
        s(
            "flow_guard_config_map",
            MapType::Array,
            4,
            size_of::<abi::FlowGuardConfig>(),
            1,
        ),
        s(
            "nat_backend_filter_map",
            MapType::Array,
            4,
            8,
            abi::NAT_FILTER_BITS / 64,
        ),
        s(
            "flow_filter_map",
            MapType::Array,
            4,
            8,
            2 * flow_filter_words(sizes.flow_table),
        ),
        s(
            "flow_filter_ctl_map",
            MapType::Array,
            4,
            size_of::<abi::FlowFilterCtl>(),
            1,
        ),
        s(
            "rl_config_map",
            MapType::Array,
            4,
            size_of::<abi::RlConfig>(),
            1,
        ),
        s(
            "svc_rl_config_map",
            MapType::Array,
            4,
            size_of::<abi::RlConfig>(),
            abi::MAX_VIPS,
        ),
        s(
            "rl_buckets_map",
            MapType::LruHash,
            size_of::<abi::RlKey4>(),
            size_of::<abi::RlBucket>(),
            abi::MAX_RL_BUCKETS,
        ),
        s(
            "rl_buckets_map6",
            MapType::LruHash,
            size_of::<abi::RlKey6>(),
            size_of::<abi::RlBucket>(),
            abi::MAX_RL_BUCKETS,
        ),
        s(
            "src_range_map",
            MapType::LpmTrie,
            size_of::<abi::SrcRangeKey4>(),
            4,
            abi::MAX_SRC_RANGES,
        ),
        s(
            "src_range_map6",
            MapType::LpmTrie,
            size_of::<abi::SrcRangeKey6>(),
            4,
            abi::MAX_SRC_RANGES,
        ),
        s(
            "vip_drop_stats_map",
            MapType::PerCpuArray,
            4,
            size_of::<abi::DropStats>(),
            abi::MAX_VIPS * abi::DROP_REASON_SLOTS,
        ),
        s(
            "vip_index_map",
            MapType::Array,
            4,
            size_of::<abi::VipSlot>(),
            2 * abi::VIP_INDEX_SLOTS,
        ),
        s(
            "vip_index_ctl_map",
            MapType::Array,
            4,
            size_of::<abi::VipIndexCtl>(),
            1,
        ),
        s(
            "cls_ctl_map",
            MapType::Array,
            4,
            size_of::<abi::ClsCtl>(),
            1,
        ),
        s(
            "cls_vip_map",
            MapType::Hash,
            size_of::<abi::ClsVipKey4>(),
            size_of::<abi::ClsVip>(),
            abi::CLS_MAX_VIPS,
        ),
        s(
            "cls_vip_map6",
            MapType::Hash,
            size_of::<abi::ClsVipKey6>(),
            size_of::<abi::ClsVip>(),
            abi::CLS_MAX_VIPS,
        ),
        s(
            "cls_rule_map",
            MapType::Array,
            4,
            size_of::<abi::ClsRule>(),
            abi::CLS_MAX_RULES,
        ),
        s(
            "cls_src_map",
            MapType::LpmTrie,
            size_of::<abi::ClsSrcKey4>(),
            4,
            abi::CLS_MAX_SRC_PREFIXES,
        ),
        s(
            "cls_src_map6",
            MapType::LpmTrie,
            size_of::<abi::ClsSrcKey6>(),
            4,
            abi::CLS_MAX_SRC_PREFIXES,
        ),
        s(
            "cls_group_map",
            MapType::Hash,
            4,
            size_of::<abi::ClsGroup>(),
            abi::CLS_MAX_GROUPS,
        ),
        s("cls_table", MapType::Array, 4, 4, abi::CLS_TABLE_SLOTS),
        s(
            "cls_target_map",
            MapType::Hash,
            size_of::<abi::ClsTargetKey>(),
            size_of::<abi::ClsTarget>(),
            abi::CLS_MAX_TARGETS,
        ),
        s(
            "cls_frag_map",
            MapType::LruHash,
            size_of::<abi::FragKey4>(),
            size_of::<abi::ClsFrag>(),
            abi::MAX_FRAGS,
        ),
        s(
            "cls_frag_map6",
            MapType::LruHash,
            size_of::<abi::FragKey6>(),
            size_of::<abi::ClsFrag>(),
            abi::MAX_FRAGS,
        ),
        s(
            "cls_vip_stats_map",
            MapType::PerCpuArray,
            4,
            size_of::<abi::ClsStats>(),
            abi::CLS_MAX_VIP_IDS,
        ),
        s(
            "cls_rule_stats_map",
            MapType::PerCpuArray,
            4,
            size_of::<abi::ClsStats>(),
            abi::CLS_MAX_RULES,
        ),
        s(
            "cls_group_stats_map",
            MapType::PerCpuArray,
            4,
            size_of::<abi::ClsStats>(),
            abi::CLS_MAX_GROUPS,
        ),
        s(
            "cls_event_map",
            MapType::PerCpuArray,
            4,
            8,
            abi::CLS_EVENT_SLOTS,
        ),
    ]
}

/// ABI versions whose maps are those of the version before plus the maps
/// listed (none: only a meaning was added, such as a new counter index in
/// a map that had room for it): (version, maps it added). Maps pinned by an
/// earlier version reachable through a chain of such versions are adopted
/// as they are and the added maps are created empty, so an upgrade keeps
/// the flow tables (no `--reset-pinned-state`).
pub const ADDITIVE_UPGRADES: &[(u32, &[&str])] = &[
    (7, &["backend_stats_map"]),
    // drop_stats_map index RV_PASS_STAGE_MISSING (slot 12 of 16).
    (8, &[]),
    // Stateless reverse NAT for exclusive endpoints, the new-flow guard
    // (and drop_stats_map index RV_EVENT_FLOW_GUARDED, slot 13 of 16).
    (
        9,
        &[
            "nat_endpoint_map",
            "nat_endpoint_map6",
            "flow_guard_config_map",
            "nat_backend_filter_map",
        ],
    ),
    // The flow filter that lets SYNs and new UDP flows skip the affinity
    // lookup. Created empty and "not exact": the first rebuild after the
    // new programs run makes it exact (flow_filter.rs).
    (10, &["flow_filter_map", "flow_filter_ctl_map"]),
    // loadBalancerSourceRanges (the source-range tries, service flags
    // SOURCE_RANGES and SOURCE_BANK, unknown to and unset by ABI 10, and
    // drop_stats_map index RV_DROP_SOURCE_RANGE, slot 14 of 16), drops per
    // VIP and reason, and backend_health_map flag TERMINATING (ignored by
    // an ABI 10 rivorad, which would read such a backend as healthy).
    (
        11,
        &["src_range_map", "src_range_map6", "vip_drop_stats_map"],
    ),
    // Source translation for ETP Cluster (bpf/snat.h): its maps, service
    // flag SNAT and backend flag SNAT (unset by and unknown to ABI 11), and
    // drop_stats_map index RV_DROP_SNAT_EXHAUSTED (slot 15 of 16); the
    // ClientIP timeout (bpf/client_affinity.h: an all-zero timeout map is
    // "no timeout", as ABI 11 behaved); the SYN hints (balance.h: an empty
    // slot matches no flow).
    (
        12,
        &[
            "syn_hint_map",
            "svc_affinity_timeout_map",
            "client_affinity_map",
            "client_affinity_map6",
            "snat_config_map",
            "snat_flow_map",
            "snat_flow_map6",
            "snat_rev_map",
            "snat_rev_map6",
            "snat_stats_map",
        ],
    ),
    // A VIP's refused share (VipSpec::reject_weight): backend_health_map
    // flag REJECT (bit 4) marks the pseudo-backend whose Maglev slots are
    // refused, and drop reason NO_BACKEND also counts those refusals; no
    // map added. An ABI 12 rivorad would drop the pseudo-backend at
    // adoption (health set, no address): the version bump keeps it away
    // from these maps. An ABI 12 program still attached until a hot swap's
    // link update takes the pseudo-backend for a healthy backend without an
    // address: it drops the share as no_backend (never forwards it), where
    // the new program resets it (docs/restarts.md, ABI 13).
    (13, &[]),
    // The classifier (bpf/classify.h, Meridio-2's rules and groups): its
    // maps only. An all-zero cls_ctl_map means no classifier VIP, which is
    // what an ABI 13 rivorad's maps hold.
    (14, crate::classifier::maps::CLS_MAP_NAMES),
];

/// 64-bit words of each half of `flow_filter_map` for flow tables of
/// `flow_table` entries: [`abi::FLOW_FILTER_BITS_PER_FLOW`] bits per entry,
/// rounded up to a power of two (the datapath masks the hash).
pub fn flow_filter_words(flow_table: u32) -> u32 {
    let bits = u64::from(flow_table.max(1)) * u64::from(abi::FLOW_FILTER_BITS_PER_FLOW);
    (bits / 64).next_power_of_two().min(1 << 30) as u32
}

/// The maps created since ABI version `from` if every version after it up
/// to this build's is an additive one, else None.
fn additive_since(from: u32) -> Option<Vec<&'static str>> {
    let mut added = Vec::new();
    for v in from + 1..=abi::ABI_VERSION {
        let (_, maps) = ADDITIVE_UPGRADES.iter().find(|(u, _)| *u == v)?;
        added.extend_from_slice(maps);
    }
    Some(added)
}

/// What the pin directory holds.
#[derive(Debug, PartialEq, Eq)]
pub enum PinnedState {
    /// No Rivora map is pinned there: a fresh start.
    Empty,
    /// Every map is pinned and matches this build: adopt them.
    Compatible,
    /// Maps of an earlier ABI version, which differs from this one only
    /// by the versions [`ADDITIVE_UPGRADES`] lists (their maps missing or
    /// already created): adopt them, create the missing ones and record
    /// this version. Holds the version found.
    Upgradable(u32),
    /// Maps are pinned but cannot be used by this build; each line says why.
    Incompatible(Vec<String>),
}

/// Inspects `pin_dir` without modifying anything.
pub fn inspect(pin_dir: &Path, sizes: &TableSizes) -> PinnedState {
    let specs = expected_maps(sizes);
    let present: Vec<&MapSpec> = specs
        .iter()
        .filter(|s| pin_dir.join(s.name).exists())
        .collect();
    if present.is_empty() {
        return PinnedState::Empty;
    }
    // Maps an upgrade from some earlier version may lack: whether the
    // pinned version is one is decided once rivora_meta is read.
    let added: Vec<&str> = ADDITIVE_UPGRADES
        .iter()
        .filter(|(v, _)| *v <= abi::ABI_VERSION)
        .flat_map(|(_, maps)| maps.iter().copied())
        .collect();
    let mut problems = Vec::new();
    let mut missing_added = Vec::new();
    for spec in &specs {
        let path = pin_dir.join(spec.name);
        if !path.exists() && added.contains(&spec.name) {
            missing_added.push(spec.name);
            continue;
        }
        if !path.exists() {
            problems.push(format!(
                "map {} is missing while others are pinned",
                spec.name
            ));
            continue;
        }
        match MapInfo::from_pin(&path) {
            Err(e) => problems.push(format!("map {}: cannot open the pin: {e}", spec.name)),
            Ok(info) => {
                let ty = info.map_type().ok();
                if ty != Some(spec.map_type) {
                    problems.push(format!(
                        "map {}: type {ty:?}, this build needs {:?}",
                        spec.name, spec.map_type
                    ));
                }
                let got = (info.key_size(), info.value_size(), info.max_entries());
                let want = (spec.key_size, spec.value_size, spec.max_entries);
                let only_size = got.0 == want.0 && got.1 == want.1;
                if got != want
                    && only_size
                    && (FLOW_TABLES.contains(&spec.name) || SNAT_TABLES.contains(&spec.name))
                {
                    problems.push(format!(
                        "map {}: the pinned flow table holds {} flows, --flow-table-size asks for {} \
                         (start with --flow-table-size {} to keep the flows)",
                        spec.name, got.2, want.2, got.2
                    ));
                } else if got != want && only_size && spec.name == "maglev_table" {
                    problems.push(format!(
                        "map maglev_table: the pinned Maglev table has {} slots, \
                         --maglev-table-size asks for {} (start with --maglev-table-size {} to keep it)",
                        got.2, want.2, got.2
                    ));
                } else if got != want {
                    problems.push(format!(
                        "map {}: key/value size and capacity {}/{}/{}, this build needs {}/{}/{}",
                        spec.name, got.0, got.1, got.2, want.0, want.1, want.2
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        match read_meta(pin_dir) {
            Ok(meta) if meta.abi_version == abi::ABI_VERSION && missing_added.is_empty() => {}
            Ok(meta) if meta.abi_version == abi::ABI_VERSION => {
                for name in missing_added {
                    problems.push(format!("map {name} is missing while others are pinned"));
                }
            }
            Ok(meta) if meta.abi_version > 0 && meta.abi_version < abi::ABI_VERSION => {
                match additive_since(meta.abi_version) {
                    // Only maps the versions since then added may be missing.
                    Some(since) if missing_added.iter().all(|m| since.contains(m)) => {
                        return PinnedState::Upgradable(meta.abi_version);
                    }
                    Some(_) => {
                        for name in missing_added {
                            problems.push(format!("map {name} is missing while others are pinned"));
                        }
                    }
                    None => problems.push(format!(
                        "maps were written by ABI version {}, this build uses version {}",
                        meta.abi_version,
                        abi::ABI_VERSION
                    )),
                }
            }
            Ok(meta) if meta.abi_version == 0 => problems
                .push("rivora_meta records no ABI version (maps of an unfinished start)".into()),
            Ok(meta) => problems.push(format!(
                "maps were written by ABI version {}, this build uses version {}",
                meta.abi_version,
                abi::ABI_VERSION
            )),
            Err(e) => problems.push(format!("rivora_meta: {e}")),
        }
    }
    if problems.is_empty() {
        PinnedState::Compatible
    } else {
        PinnedState::Incompatible(problems)
    }
}

/// The length of the Maglev table pinned in `pin_dir`, if one is pinned and readable. A
/// rivorad started without `--maglev-table-size` keeps it: the table's length is part of the
/// pinned layout, so a new default must not turn an upgrade into a refused start (or a reset
/// that forgets every flow).
pub fn pinned_maglev_table_len(pin_dir: &Path) -> Option<u32> {
    MapInfo::from_pin(pin_dir.join("maglev_table"))
        .ok()
        .map(|info| info.max_entries())
}

/// Reads the pinned `rivora_meta` entry.
pub fn read_meta(pin_dir: &Path) -> Result<abi::Meta, String> {
    let data =
        aya::maps::MapData::from_pin(pin_dir.join("rivora_meta")).map_err(|e| e.to_string())?;
    let arr: aya::maps::Array<_, abi::Meta> = aya::maps::Map::Array(data)
        .try_into()
        .map_err(|e: aya::maps::MapError| e.to_string())?;
    arr.get(&0, 0).map_err(|e| e.to_string())
}
