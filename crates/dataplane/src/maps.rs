//! Typed handles on every pinned map, taken from the loaded ingress object.

use aya::Ebpf;
use aya::maps::lpm_trie::Key as LpmKey;
use aya::maps::{Array, HashMap, LpmTrie, Map, MapData, PerCpuArray};
use rivora_abi as abi;

use crate::Error;
use crate::flow_filter::FlowFilter;
use crate::mmap::MappedMap;

/// All maps the control plane writes or reads.
pub struct Maps {
    /// Capacity of each flow table as created (or pinned): what
    /// `--flow-table-size` asked for when the maps were made.
    pub flow_capacity: u32,
    /// IPv4 exact VIPs.
    pub vip_map: HashMap<MapData, abi::VipKey4, abi::VipValue>,
    /// IPv6 exact VIPs.
    pub vip_map6: HashMap<MapData, abi::VipKey6, abi::VipValue>,
    /// Per-service config.
    pub service_config: Array<MapData, abi::Service>,
    /// The shared Maglev table, written through a memory mapping.
    pub maglev: MaglevTable,
    /// IPv4 backends by ID.
    pub backend_map: Array<MapData, abi::Backend4>,
    /// IPv6 backends by ID.
    pub backend_map6: Array<MapData, abi::Backend6>,
    /// Health state by backend ID.
    pub backend_health: Array<MapData, abi::BackendHealth>,
    /// IPv4 flow affinity (LRU).
    pub affinity: HashMap<MapData, abi::Flow4, abi::Affinity>,
    /// IPv6 flow affinity (LRU).
    pub affinity6: HashMap<MapData, abi::Flow6, abi::Affinity>,
    /// IPv4 NAT reverse mappings (LRU).
    pub nat_reverse: HashMap<MapData, abi::NatKey4, abi::NatValue4>,
    /// IPv6 NAT reverse mappings (LRU).
    pub nat_reverse6: HashMap<MapData, abi::NatKey6, abi::NatValue6>,
    /// IPv4 NAT backend endpoints: which replies need no per-flow entry.
    pub nat_endpoint: HashMap<MapData, abi::NatEpKey4, abi::NatEpValue4>,
    /// IPv6 NAT backend endpoints.
    pub nat_endpoint6: HashMap<MapData, abi::NatEpKey6, abi::NatEpValue6>,
    /// The new-flow guard's setting (index 0).
    pub flow_guard: Array<MapData, abi::FlowGuardConfig>,
    /// Backend addresses as bits (`abi::nat_backend_bit`), 64 per entry.
    pub nat_backend_filter: Array<MapData, u64>,
    /// Which flows may have an affinity entry (flow_filter.rs), mapped.
    pub flow_filter: FlowFilter,
    /// Per-service per-CPU counters.
    pub stats: PerCpuArray<MapData, abi::VipStats>,
    /// Per-backend per-CPU counters, by backend ID.
    pub backend_stats: PerCpuArray<MapData, abi::BackendStats>,
    /// Per-reason per-CPU drop counters.
    pub drop_stats: PerCpuArray<MapData, abi::DropStats>,
    /// Who wrote the maps (ABI version, table size, XDP mode).
    pub meta: Array<MapData, abi::Meta>,
    /// The attached interface's MAC (source of XDP_TX frames).
    pub iface: Array<MapData, abi::Iface>,
    /// Outer source addresses of L3 DSR.
    pub tunnel: Array<MapData, abi::TunnelConfig>,
    /// IPv4 port-range VIPs: (proto, addr, port prefix) -> service.
    pub vip_range_map: LpmTrie<MapData, RangeData4, abi::VipValue>,
    /// IPv6 port-range VIPs.
    pub vip_range_map6: LpmTrie<MapData, RangeData6, abi::VipValue>,
    /// The node-wide SYN rate limit (index 0).
    pub rl_config: Array<MapData, abi::RlConfig>,
    /// Per-service SYN rate limits, by service ID.
    pub svc_rl_config: Array<MapData, abi::RlConfig>,
    /// IPv4 allowed source prefixes of VIPs with source ranges.
    pub src_range: LpmTrie<MapData, SrcRangeData4, u32>,
    /// IPv6 allowed source prefixes.
    pub src_range6: LpmTrie<MapData, SrcRangeData6, u32>,
    /// Per-VIP per-reason per-CPU drop counters (index service ID *
    /// [`abi::DROP_REASON_SLOTS`] + reason).
    pub vip_drop_stats: PerCpuArray<MapData, abi::DropStats>,
    /// The exact VIPs again, as the open-addressing table the program reads
    /// (two halves of [`abi::VIP_INDEX_SLOTS`]).
    pub vip_index: Array<MapData, abi::VipSlot>,
    /// Which half of `vip_index` is in use, and whether it is complete.
    pub vip_index_ctl: Array<MapData, abi::VipIndexCtl>,
    /// ClientIP timeouts by service ID (bpf/client_affinity.h).
    pub affinity_timeout: Array<MapData, abi::AffinityTimeout>,
    /// IPv4 clients' recent choices of ClientIP VIPs with a timeout (LRU).
    pub client_affinity: HashMap<MapData, abi::ClientKey4, abi::ClientAffinity>,
    /// IPv6 clients' recent choices (LRU).
    pub client_affinity6: HashMap<MapData, abi::ClientKey6, abi::ClientAffinity>,
    /// This node's source for translated flows (index 0; bpf/snat.h).
    pub snat_config: Array<MapData, abi::SnatConfig>,
    /// Translated IPv4 flows -> node port (LRU).
    pub snat_flow: HashMap<MapData, abi::Flow4, abi::SnatFlow>,
    /// Translated IPv6 flows -> node port (LRU).
    pub snat_flow6: HashMap<MapData, abi::Flow6, abi::SnatFlow>,
    /// IPv4 replies of translated flows -> client and VIP (LRU).
    pub snat_rev: HashMap<MapData, abi::SnatRevKey4, abi::SnatRev4>,
    /// IPv6 replies of translated flows (LRU).
    pub snat_rev6: HashMap<MapData, abi::SnatRevKey6, abi::SnatRev6>,
    /// Per-CPU source-translation counters (`abi::snat_counter`).
    pub snat_stats: PerCpuArray<MapData, u64>,
    /// The classifier's maps (Meridio-2's rules and groups).
    pub cls: crate::classifier::maps::ClsMaps,
}

/// The part of `struct rv_vip_range_key4` after `prefixlen`: aya's
/// [`LpmKey`] holds the prefix length itself, followed by this data.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RangeData4 {
    /// IP protocol.
    pub proto: u8,
    /// Address, network order.
    pub addr: [u8; 4],
    /// Port prefix, network order.
    pub port: [u8; 2],
    /// Zero.
    pub pad: u8,
}

/// The part of `struct rv_vip_range_key6` after `prefixlen`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RangeData6 {
    /// IP protocol.
    pub proto: u8,
    /// Address.
    pub addr: [u8; 16],
    /// Port prefix, network order.
    pub port: [u8; 2],
    /// Zero.
    pub pad: u8,
}

/// The part of `struct rv_src_range_key4` after `prefixlen`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrcRangeData4 {
    /// Service ID, | [`abi::SRC_RANGE_BANK`] for bank 1.
    pub tag: u32,
    /// Address prefix, network order.
    pub addr: [u8; 4],
}

/// The part of `struct rv_src_range_key6` after `prefixlen`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrcRangeData6 {
    /// As in [`SrcRangeData4`].
    pub tag: u32,
    /// Address prefix.
    pub addr: [u8; 16],
}

// SAFETY: repr(C), a u32 then u8s making a multiple of 4: no padding.
unsafe impl aya::Pod for SrcRangeData4 {}
// SAFETY: as above.
unsafe impl aya::Pod for SrcRangeData6 {}

// SAFETY: repr(C), u8 fields only: no padding, every bit pattern valid.
unsafe impl aya::Pod for RangeData4 {}
// SAFETY: as above.
unsafe impl aya::Pod for RangeData6 {}

// aya's key (u32 prefix length, then the data, packed) must be the C key
// byte for byte: the ABI mirror is the single source of truth.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<LpmKey<RangeData4>>() == size_of::<abi::VipRangeKey4>());
    assert!(size_of::<LpmKey<RangeData6>>() == size_of::<abi::VipRangeKey6>());
    assert!(offset_of!(abi::VipRangeKey4, proto) == 4);
    assert!(offset_of!(abi::VipRangeKey4, addr) == 4 + offset_of!(RangeData4, addr));
    assert!(offset_of!(abi::VipRangeKey4, port) == 4 + offset_of!(RangeData4, port));
    assert!(offset_of!(abi::VipRangeKey6, proto) == 4);
    assert!(offset_of!(abi::VipRangeKey6, addr) == 4 + offset_of!(RangeData6, addr));
    assert!(offset_of!(abi::VipRangeKey6, port) == 4 + offset_of!(RangeData6, port));
    assert!(size_of::<LpmKey<SrcRangeData4>>() == size_of::<abi::SrcRangeKey4>());
    assert!(size_of::<LpmKey<SrcRangeData6>>() == size_of::<abi::SrcRangeKey6>());
    assert!(offset_of!(abi::SrcRangeKey4, addr) == 4 + offset_of!(SrcRangeData4, addr));
    assert!(offset_of!(abi::SrcRangeKey6, addr) == 4 + offset_of!(SrcRangeData6, addr));
};

/// The trie key of an ABI range key.
pub fn lpm_key4(k: &abi::VipRangeKey4) -> LpmKey<RangeData4> {
    LpmKey::new(
        k.prefixlen,
        RangeData4 {
            proto: k.proto,
            addr: k.addr,
            port: k.port,
            pad: k.pad,
        },
    )
}

/// The trie key of an ABI range key (IPv6).
pub fn lpm_key6(k: &abi::VipRangeKey6) -> LpmKey<RangeData6> {
    LpmKey::new(
        k.prefixlen,
        RangeData6 {
            proto: k.proto,
            addr: k.addr,
            port: k.port,
            pad: k.pad,
        },
    )
}

/// The ABI range key of a trie key.
pub fn abi_key4(k: &LpmKey<RangeData4>) -> abi::VipRangeKey4 {
    let d = k.data();
    abi::VipRangeKey4 {
        prefixlen: k.prefix_len(),
        proto: d.proto,
        addr: d.addr,
        port: d.port,
        pad: d.pad,
    }
}

/// The ABI range key of a trie key (IPv6).
pub fn abi_key6(k: &LpmKey<RangeData6>) -> abi::VipRangeKey6 {
    let d = k.data();
    abi::VipRangeKey6 {
        prefixlen: k.prefix_len(),
        proto: d.proto,
        addr: d.addr,
        port: d.port,
        pad: d.pad,
    }
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

/// The IPv4 affinity table's handle.
pub type Affinity4 = HashMap<MapData, abi::Flow4, abi::Affinity>;
/// The IPv6 affinity table's handle.
pub type Affinity6 = HashMap<MapData, abi::Flow6, abi::Affinity>;

impl Maps {
    /// The flow filter and the two affinity tables it is rebuilt from.
    pub fn flow_filter_parts(&mut self) -> (&mut FlowFilter, &Affinity4, &Affinity6) {
        (&mut self.flow_filter, &self.affinity, &self.affinity6)
    }

    /// Takes every map out of the loaded ingress object.
    pub fn take_from(ebpf: &mut Ebpf) -> Result<Self, Error> {
        let maglev_map = take(ebpf, "maglev_table")?;
        let maglev = match maglev_map {
            Map::Array(data) => MaglevTable::map(data)?,
            _ => return Err(Error::MissingMap("maglev_table")),
        };
        let affinity: HashMap<MapData, abi::Flow4, abi::Affinity> =
            typed!(ebpf, "connection_affinity_map");
        let flow_capacity = aya::maps::IterableMap::map(&affinity)
            .info()
            .map(|i| i.max_entries())
            .map_err(|e| Error::Map {
                map: "connection_affinity_map",
                source: e,
            })?;
        Ok(Self {
            flow_capacity,
            vip_map: typed!(ebpf, "vip_map"),
            vip_map6: typed!(ebpf, "vip_map6"),
            service_config: typed!(ebpf, "service_config_map"),
            maglev,
            backend_map: typed!(ebpf, "backend_map"),
            backend_map6: typed!(ebpf, "backend_map6"),
            backend_health: typed!(ebpf, "backend_health_map"),
            affinity,
            affinity6: typed!(ebpf, "connection_affinity_map6"),
            nat_reverse: typed!(ebpf, "nat_reverse_map"),
            nat_reverse6: typed!(ebpf, "nat_reverse_map6"),
            nat_endpoint: typed!(ebpf, "nat_endpoint_map"),
            nat_endpoint6: typed!(ebpf, "nat_endpoint_map6"),
            flow_guard: typed!(ebpf, "flow_guard_config_map"),
            nat_backend_filter: typed!(ebpf, "nat_backend_filter_map"),
            flow_filter: FlowFilter::map(
                take(ebpf, "flow_filter_map").and_then(|m| match m {
                    Map::Array(data) => Ok(data),
                    _ => Err(Error::MissingMap("flow_filter_map")),
                })?,
                typed!(ebpf, "flow_filter_ctl_map"),
            )?,
            stats: typed!(ebpf, "stats_map"),
            backend_stats: typed!(ebpf, "backend_stats_map"),
            drop_stats: typed!(ebpf, "drop_stats_map"),
            meta: typed!(ebpf, "rivora_meta"),
            iface: typed!(ebpf, "iface_mac_map"),
            tunnel: typed!(ebpf, "tunnel_config_map"),
            vip_range_map: typed!(ebpf, "vip_range_map"),
            vip_range_map6: typed!(ebpf, "vip_range_map6"),
            rl_config: typed!(ebpf, "rl_config_map"),
            svc_rl_config: typed!(ebpf, "svc_rl_config_map"),
            src_range: typed!(ebpf, "src_range_map"),
            src_range6: typed!(ebpf, "src_range_map6"),
            vip_drop_stats: typed!(ebpf, "vip_drop_stats_map"),
            vip_index: typed!(ebpf, "vip_index_map"),
            vip_index_ctl: typed!(ebpf, "vip_index_ctl_map"),
            affinity_timeout: typed!(ebpf, "svc_affinity_timeout_map"),
            client_affinity: typed!(ebpf, "client_affinity_map"),
            client_affinity6: typed!(ebpf, "client_affinity_map6"),
            snat_config: typed!(ebpf, "snat_config_map"),
            snat_flow: typed!(ebpf, "snat_flow_map"),
            snat_flow6: typed!(ebpf, "snat_flow_map6"),
            snat_rev: typed!(ebpf, "snat_rev_map"),
            snat_rev6: typed!(ebpf, "snat_rev_map6"),
            snat_stats: typed!(ebpf, "snat_stats_map"),
            cls: crate::classifier::maps::ClsMaps::take_from(ebpf)?,
        })
    }
}

/// Array element stride in u32 units (8 bytes, see [`MaglevTable`]).
const SLOT_STRIDE_U32: usize = 2;

/// The shared Maglev table (`BPF_F_MMAPABLE` array of u32 backend IDs),
/// mapped into our address space: a slice of thousands of slots is written
/// with plain stores instead of one syscall per slot.
///
/// The kernel lays array elements out at a stride of the value size rounded
/// up to 8 bytes, so slot `i` is the u32 at byte `8 * i` of the mapping.
pub struct MaglevTable {
    /// Keeps the map and its mapping alive (`ptr` points into it).
    _mapping: MappedMap,
    ptr: *mut u32,
    len: u32,
}

// SAFETY: the mapping is owned by this value and only written through
// &mut self; the kernel side reads it concurrently, which is the point.
unsafe impl Send for MaglevTable {}
unsafe impl Sync for MaglevTable {}

impl MaglevTable {
    pub(crate) fn map(data: MapData) -> Result<Self, Error> {
        Self::map_named(data, "maglev_table")
    }

    /// Maps another array of u32 slots made like maglev_table (the
    /// classifier's `cls_table`).
    pub(crate) fn map_named(data: MapData, name: &'static str) -> Result<Self, Error> {
        let info = data.info().map_err(|e| Error::Map {
            map: name,
            source: e,
        })?;
        let len = info.max_entries();
        let mapping = MappedMap::new(data, len as usize * SLOT_STRIDE_U32 * 4, name)?;
        Ok(Self {
            ptr: mapping.ptr().cast(),
            _mapping: mapping,
            len,
        })
    }

    /// Number of slots.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the table has no slots.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes `ids` starting at `offset`. Each slot is an aligned u32 store,
    /// so a concurrent reader sees either the old or the new ID of a slot.
    pub fn write(&mut self, offset: u32, ids: &[u32]) {
        assert!(
            offset as usize + ids.len() <= self.len as usize,
            "slice beyond maglev_table"
        );
        for (i, id) in ids.iter().enumerate() {
            // SAFETY: bounds checked above; the mapping is live while self is.
            unsafe {
                self.ptr
                    .add((offset as usize + i) * SLOT_STRIDE_U32)
                    .write_volatile(*id)
            };
        }
    }

    /// Reads `size` slots starting at `offset`.
    pub fn read(&self, offset: u32, size: u32) -> Vec<u32> {
        assert!(
            offset as usize + size as usize <= self.len as usize,
            "slice beyond maglev_table"
        );
        (0..size as usize)
            // SAFETY: bounds checked above.
            .map(|i| unsafe {
                self.ptr
                    .add((offset as usize + i) * SLOT_STRIDE_U32)
                    .read_volatile()
            })
            .collect()
    }
}
