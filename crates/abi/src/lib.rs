//! Rust mirror of `bpf/rivora_abi.h`, the one C header that defines every map
//! key and value layout of the datapath.
//!
//! Pinned maps outlive rivorad and are read by programs compiled from C, so a
//! layout mismatch would silently misroute traffic. The test in
//! `tests/layout.rs` reads the BTF that clang emits for the header and checks
//! every size, field offset and constant here against it.
//!
//! Addresses and ports are kept in network byte order, exactly as in the
//! packet: use the constructors rather than filling fields by hand.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Bumped with every layout or meaning change (`RV_ABI_VERSION`).
pub const ABI_VERSION: u32 = 14;
/// Capacity of the VIP tables and of the per-service arrays.
pub const MAX_VIPS: u32 = 4096;
/// Capacity of the backend arrays; also the backend ID space.
pub const MAX_BACKENDS: u32 = 8192;
/// Default capacity of each affinity and NAT table (the spec's figure;
/// `--flow-table-size` changes it at start).
pub const MAX_FLOWS: u32 = 65536;
/// Smallest `--flow-table-size`: below it a handful of clients evict each
/// other's state.
pub const MIN_FLOW_TABLE: u32 = 1024;
/// Largest `--flow-table-size`: 16 Mi flows per table. The kernel
/// allocates LRU tables whole, at creation: the four flow tables took 880
/// MiB at 1 Mi flows (measured, e2e_hardening), so about 14 GiB here.
pub const MAX_FLOW_TABLE: u32 = 1 << 24;
/// Default length of the shared Maglev table (a prime, the largest below 2^22: 16 MiB of
/// backend IDs). Sized for the spec's 4,096 VIPs: at most half the table goes to slices (a
/// rebuilt slice needs room for its copy), 2,097,150 slots, about 512 per VIP, so 4,096 VIPs of
/// up to 5 backends each get Maglev's preferred ~100 slots per backend (docs/maglev.md).
pub const MAGLEV_TABLE_DEFAULT: u32 = 4_194_301;
/// Slots the hot path probes past unusable backends before dropping.
pub const MAGLEV_PROBE_WINDOW: u32 = 16;
/// Units of [`Affinity::nat_checked`] (and of the L3 DSR next-hop cache's
/// tick, `rv_nexthop.tick`, not mirrored: that cache is not pinned):
/// jiffies shifted right by this much (2^7 jiffies: 0.51 s at HZ=250, 0.13 s
/// at HZ=1000, 1.28 s at HZ=100), so the hot path rechecks a flow's reverse
/// NAT entry, and an L3 DSR backend's route, a few times a second at most
/// instead of per packet. Jiffies because the verifier inlines
/// bpf_jiffies64 into a load, where bpf_ktime_get_coarse_ns is a helper call.
pub const NAT_CHECK_JIFFIES_SHIFT: u32 = 7;
/// Length of `drop_stats_map`.
pub const DROP_REASON_SLOTS: u32 = 16;
/// Capacity of each fragment table.
pub const MAX_FRAGS: u32 = 16384;
/// Capacity of each SYN rate-limit bucket table.
pub const MAX_RL_BUCKETS: u32 = 65536;
/// Capacity of each port-range trie (prefixes, not VIPs).
pub const MAX_RANGE_PREFIXES: u32 = 16384;
/// IPv6 extension headers the parser steps over, at most.
pub const MAX_IPV6_EXT_HEADERS: u32 = 4;
/// Their total size, at most.
pub const MAX_IPV6_EXT_BYTES: u32 = 248;
/// `service_id` of the node-wide rate-limit bucket of a source.
pub const RL_NODE_SERVICE: u32 = 0xffff_ffff;
/// Slots of each half of `vip_index_map` (a power of two); the map holds
/// two halves.
pub const VIP_INDEX_SLOTS: u32 = 16384;
/// Slots a lookup in `vip_index_map` probes from a key's home slot.
pub const VIP_INDEX_PROBES: u32 = 8;
/// Capacity of nat_endpoint_map(6) (`RV_MAX_NAT_ENDPOINTS`).
pub const MAX_NAT_ENDPOINTS: u32 = 16384;
/// Slots of the per-CPU UDP seen filter (`RV_UDP_SEEN_SLOTS`).
pub const UDP_SEEN_SLOTS: u32 = 4096;
/// Prefixes each source-range trie holds, all VIPs of the family together
/// (`RV_MAX_SRC_RANGES`).
pub const MAX_SRC_RANGES: u32 = 16384;
/// Source ranges one VIP may list (`RV_MAX_SRC_RANGES_PER_VIP`).
pub const MAX_SRC_RANGES_PER_VIP: u32 = 256;
/// Or'ed into a source-range key's tag for bank 1 (`RV_SRC_RANGE_BANK`).
pub const SRC_RANGE_BANK: u32 = 0x10000;

/// `enum rv_nat_ep_flags`: how replies of a NAT backend endpoint find
/// their VIP.
pub mod nat_ep_flags {
    /// The endpoint serves one VIP: no per-flow reverse entry is needed.
    pub const EXCLUSIVE: u8 = 1 << 0;
    /// Shared now, but the VIP it served alone before is kept as the
    /// answer for replies without a per-flow entry.
    pub const FALLBACK: u8 = 1 << 1;
}

/// `enum rv_vip_slot_flags`: bits of [`VipSlot::flags`].
pub mod vip_slot_flags {
    /// The slot holds a VIP; an unused slot ends a probe.
    pub const USED: u8 = 1 << 0;
    /// The VIP is IPv6 (all 16 address bytes count).
    pub const IPV6: u8 = 1 << 1;
}

/// `enum rv_vip_index_flags`: bits of [`VipIndexCtl::flags`].
pub mod vip_index_flags {
    /// Every exact VIP is in the active half within the probe window: a
    /// miss in the index is a miss in vip_map. Unset: the index is unused.
    pub const COMPLETE: u32 = 1 << 0;
    /// An IPv4 port-range VIP exists: exact misses consult vip_range_map.
    pub const RANGES4: u32 = 1 << 1;
    /// An IPv6 port-range VIP exists: exact misses consult vip_range_map6.
    pub const RANGES6: u32 = 1 << 2;
}

/// Home slot hash of `vip_index_map` (`rv_vip_index_hash` in
/// `bpf/hash.h`): the two must agree bit for bit, it is part of the ABI.
/// `addr` is the 16 address bytes (IPv4 in the first 4), `port` the
/// network-order value as stored in [`VipKey4::port`]. The program reads
/// the address as native-endian 32-bit words, and so does this.
pub fn vip_index_hash(addr: &[u8; 16], port: u16, proto: u8, v6: bool) -> u32 {
    let h = 0x2f0b_3c5d ^ (u32::from(port) << 16) ^ (u32::from(proto) << 8) ^ u32::from(v6);
    lowbias32(index_addr(h, addr, v6))
}

/// The address's native-endian words into `h` (`rv_vip_index_addr`): one
/// for IPv4, four for IPv6.
fn index_addr(mut h: u32, addr: &[u8; 16], v6: bool) -> u32 {
    let words = if v6 { 4 } else { 1 };
    for i in 0..words {
        h = index_word(
            h,
            u32::from_ne_bytes(addr[4 * i..4 * i + 4].try_into().unwrap()),
        );
    }
    h
}

/// One address word into the index hash (`rv_vip_index_word`).
fn index_word(h: u32, w: u32) -> u32 {
    let h = (h ^ w).wrapping_mul(0x9e37_79b1);
    h ^ (h >> 16)
}

/// `rv_lowbias32`: the finaliser both ABI hashes share.
fn lowbias32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x7feb_352d);
    h ^= h >> 15;
    h = h.wrapping_mul(0x846c_a68b);
    h ^= h >> 16;
    h
}

/// Bits of `nat_backend_filter_map` (`RV_NAT_FILTER_BITS`).
pub const NAT_FILTER_BITS: u32 = 65536;

/// The bit of `nat_backend_filter_map` for a backend address
/// (`rv_nat_backend_bit` in `bpf/hash.h`, ABI): `addr` as in
/// [`vip_index_hash`].
pub fn nat_backend_bit(addr: &[u8; 16], v6: bool) -> u32 {
    lowbias32(index_addr(0x6c8e_9cf5 ^ u32::from(v6), addr, v6)) & (NAT_FILTER_BITS - 1)
}

/// Bits of each half of `flow_filter_map` per flow-table entry
/// (`RV_FLOW_FILTER_BITS_PER_FLOW`): a half has as many 64-bit words as the
/// flow-table size rounded up to a power of two.
pub const FLOW_FILTER_BITS_PER_FLOW: u32 = 64;

/// `rv_word_pair`: two 32-bit words as one 64-bit one, `hi` on top.
fn word_pair(hi: u32, lo: u32) -> u64 {
    (u64::from(hi) << 32) | u64::from(lo)
}

/// `rv_flow_filter_hash` (`bpf/hash.h`) over the address words and ports
/// exactly as they sit in a flow key (network byte order in memory, read as
/// native words): ABI since version 10, because it places a flow's bit in
/// `flow_filter_map`, which the control plane rebuilds from the affinity
/// tables' keys.
fn flow_filter_hash_words(
    src: &[u32; 4],
    dst: &[u32; 4],
    sport: u16,
    dport: u16,
    proto: u8,
    v6: bool,
) -> u32 {
    let mut x = word_pair(src[0], dst[0]).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= word_pair(
        (u32::from(sport) << 16) | u32::from(dport),
        u32::from(proto),
    )
    .wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    if v6 {
        x ^= word_pair(src[1], dst[1]).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= word_pair(src[2], dst[2]).wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= word_pair(src[3], dst[3]).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    }
    x ^= x >> 29;
    (x.wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 32) as u32
}

/// The flow filter hash of an IPv4 affinity key (see
/// [`flow_filter_hash_words`]).
pub fn flow_filter_hash4(f: &Flow4) -> u32 {
    flow_filter_hash_words(
        &[f.src, 0, 0, 0],
        &[f.dst, 0, 0, 0],
        f.sport,
        f.dport,
        f.proto,
        false,
    )
}

/// The flow filter hash of an IPv6 affinity key (see
/// [`flow_filter_hash_words`]).
pub fn flow_filter_hash6(f: &Flow6) -> u32 {
    let words = |a: &[u8; 16]| -> [u32; 4] {
        std::array::from_fn(|i| u32::from_ne_bytes(a[4 * i..4 * i + 4].try_into().unwrap()))
    };
    flow_filter_hash_words(
        &words(&f.src),
        &words(&f.dst),
        f.sport,
        f.dport,
        f.proto,
        true,
    )
}

/// `enum rv_mode`: how a service forwards.
pub mod mode {
    /// Full NAT: destination rewritten, replies restored by tc_nat.
    pub const NAT: u8 = 0;
    /// L2 direct server return.
    pub const DSR: u8 = 1;
    /// L3 direct server return over IP-in-IP.
    pub const DSR_IPIP: u8 = 2;
    /// L3 direct server return over GRE.
    pub const DSR_GRE: u8 = 3;
}

/// `enum rv_service_flags`: bits of [`Service::flags`].
pub mod service_flags {
    /// The service is an IPv6 VIP (its backends are in backend_map6).
    pub const IPV6: u8 = 1 << 0;
    /// The entry is programmed; an all-zero array slot is not.
    pub const ACTIVE: u8 = 1 << 1;
    /// sessionAffinity clientIP: Maglev hashes the source address only.
    pub const AFFINITY_CLIENT_IP: u8 = 1 << 2;
    /// The service has its own SYN rate limit (svc_rl_config_map).
    pub const SYN_RATE_LIMIT: u8 = 1 << 3;
    /// NAT VIP with `natForwarding: fib`: xdp_ingress routes the rewritten
    /// packet itself (FIB lookup + redirect) instead of the kernel.
    pub const NAT_FIB: u8 = 1 << 4;
    /// loadBalancerSourceRanges: only sources in the VIP's prefixes of
    /// src_range_map(6) may reach it.
    pub const SOURCE_RANGES: u8 = 1 << 5;
    /// The VIP's source prefixes in force are bank 1's (tag |
    /// [`super::SRC_RANGE_BANK`]), else bank 0's.
    pub const SOURCE_BANK: u8 = 1 << 6;
    /// NAT VIP with backends flagged [`super::backend_flags::SNAT`]: their
    /// flows also get the node's address as source.
    pub const SNAT: u8 = 1 << 7;
}

/// `enum rv_backend_state`: values of [`BackendHealth::state`].
pub mod backend_state {
    /// No backend holds this ID (the zero value of a fresh array slot).
    pub const NONE: u32 = 0;
    /// Takes new and established flows.
    pub const HEALTHY: u32 = 1;
    /// Keeps established flows, takes no new ones.
    pub const DRAINING: u32 = 2;
    /// Takes nothing.
    pub const DOWN: u32 = 3;
}

/// `enum rv_drop_reason`: indices of `drop_stats_map`.
pub mod drop_reason {
    /// No healthy backend within the probe window.
    pub const NO_HEALTHY_BACKEND: u32 = 0;
    /// VIP matched but its service entry was not active.
    pub const NO_SERVICE: u32 = 1;
    /// Chosen backend ID had no address entry, or the flow's slot is the
    /// VIP's refused share ([`super::backend_flags::REJECT`]): a new TCP
    /// flow got a reset, any other packet was dropped.
    pub const NO_BACKEND: u32 = 2;
    /// Bounds check failed while rewriting.
    pub const REWRITE_FAILED: u32 = 3;
    /// A TCP SYN over its source's rate limit.
    pub const RATE_LIMITED: u32 = 4;
    /// Not a drop: a later fragment without its first was passed.
    pub const PASS_FRAG_UNMATCHED: u32 = 5;
    /// Not a drop: an ICMP error quoting an unknown flow was passed.
    pub const PASS_ICMP_UNMATCHED: u32 = 6;
    /// Not a drop: an encapsulated packet was handed to the kernel to route.
    pub const PASS_TUNNEL_TO_KERNEL: u32 = 7;
    /// Not a drop: a packet too big for the tunnel got an ICMP answer.
    pub const TOO_BIG_ICMP: u32 = 8;
    /// Not a drop: a too-big IPv4 packet without DF went to the kernel to fragment.
    pub const PASS_TOO_BIG_FRAGMENTED: u32 = 9;
    /// The frame could not be resized for encapsulation.
    pub const ENCAP_FAILED: u32 = 10;
    /// Not a drop: a rewritten packet of a `natForwarding: fib` VIP went to
    /// the kernel to route (no FIB answer yet, TTL expiring, too big, VLAN).
    pub const PASS_NAT_TO_KERNEL: u32 = 11;
    /// Not a drop: the tail-call stage a packet continues in was missing
    /// from xdp_ingress's stage array (a loader fault); the packet went to
    /// the kernel as it was.
    pub const PASS_STAGE_MISSING: u32 = 12;
    /// Not a drop: a flow without state was forwarded by Maglev alone
    /// because the CPU's new-flow guard budget was spent (no entry made).
    pub const FLOW_GUARDED: u32 = 13;
    /// A packet to a VIP with source ranges from a source outside them.
    pub const SOURCE_RANGE: u32 = 14;
    /// A flow to a source-translated backend got no node port (the range
    /// is full of live flows to that endpoint, or the new-flow guard said
    /// no to the mapping).
    pub const SNAT_EXHAUSTED: u32 = 15;
    /// Number of reasons defined so far.
    pub const COUNT: u32 = 16;
    /// Stable, Prometheus-friendly names, indexed by reason. The `passed_`
    /// ones count packets handed to the kernel untouched, not drops.
    pub const NAMES: [&str; COUNT as usize] = [
        "no_healthy_backend",
        "no_service",
        "no_backend",
        "rewrite_failed",
        "rate_limited",
        "passed_unmatched_fragment",
        "passed_unmatched_icmp_error",
        "passed_tunnel_to_kernel",
        "icmp_too_big_sent",
        "passed_too_big_for_fragmentation",
        "encap_failed",
        "passed_nat_to_kernel",
        "passed_stage_missing",
        "flow_guarded",
        "source_range",
        "snat_exhausted",
    ];
}

/// IPv4 address in the network-order representation the maps use.
pub fn be_addr4(addr: Ipv4Addr) -> u32 {
    u32::from_ne_bytes(addr.octets())
}

/// Inverse of [`be_addr4`].
pub fn addr4_from_be(addr: u32) -> Ipv4Addr {
    Ipv4Addr::from(addr.to_ne_bytes())
}

/// Port in the network-order representation the maps use.
pub fn be_port(port: u16) -> u16 {
    port.to_be()
}

/// Inverse of [`be_port`].
pub fn port_from_be(port: u16) -> u16 {
    u16::from_be(port)
}

macro_rules! pod {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: repr(C), only integer fields and explicit padding, so
            // every bit pattern is valid and there are no implicit holes.
            unsafe impl aya::Pod for $t {}
        )*
    };
}

/// `struct rv_vip_key4`: an exact IPv4 VIP (vip_map key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipKey4 {
    pub addr: u32,
    pub port: u16,
    pub proto: u8,
    pub pad: u8,
}

impl VipKey4 {
    /// Key for `addr:port` over IP protocol `proto`.
    pub fn new(addr: Ipv4Addr, port: u16, proto: u8) -> Self {
        Self {
            addr: be_addr4(addr),
            port: be_port(port),
            proto,
            pad: 0,
        }
    }
}

/// `struct rv_vip_key6`: an exact IPv6 VIP (vip_map6 key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipKey6 {
    pub addr: [u8; 16],
    pub port: u16,
    pub proto: u8,
    pub pad: u8,
}

impl VipKey6 {
    /// Key for `[addr]:port` over IP protocol `proto`.
    pub fn new(addr: Ipv6Addr, port: u16, proto: u8) -> Self {
        Self {
            addr: addr.octets(),
            port: be_port(port),
            proto,
            pad: 0,
        }
    }
}

/// `struct rv_vip_value`: the service a VIP maps to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipValue {
    pub service_id: u32,
}

/// `struct rv_vip_slot`: one exact VIP in `vip_index_map`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipSlot {
    /// Address bytes; IPv4 in the first 4, the rest zero.
    pub addr: [u8; 16],
    /// Network order.
    pub port: u16,
    pub proto: u8,
    /// [`vip_slot_flags`].
    pub flags: u8,
    pub service_id: u32,
}

impl VipSlot {
    /// The slot of an IPv4 VIP.
    pub fn v4(key: &VipKey4, service_id: u32) -> Self {
        let mut addr = [0; 16];
        addr[..4].copy_from_slice(&key.addr.to_ne_bytes());
        Self {
            addr,
            port: key.port,
            proto: key.proto,
            flags: vip_slot_flags::USED,
            service_id,
        }
    }

    /// The slot of an IPv6 VIP.
    pub fn v6(key: &VipKey6, service_id: u32) -> Self {
        Self {
            addr: key.addr,
            port: key.port,
            proto: key.proto,
            flags: vip_slot_flags::USED | vip_slot_flags::IPV6,
            service_id,
        }
    }

    /// Whether the slot holds a VIP.
    pub fn used(&self) -> bool {
        self.flags & vip_slot_flags::USED != 0
    }

    /// [`vip_index_hash`] of the slot's key.
    pub fn hash(&self) -> u32 {
        vip_index_hash(
            &self.addr,
            self.port,
            self.proto,
            self.flags & vip_slot_flags::IPV6 != 0,
        )
    }
}

/// `struct rv_vip_index_ctl`: the half of `vip_index_map` in use and what
/// it promises ([`vip_index_flags`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipIndexCtl {
    /// 0 or 1.
    pub half: u32,
    pub flags: u32,
}

/// `struct rv_service`: per-service config, rewritten whole to flip slices.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Service {
    pub maglev_offset: u32,
    pub maglev_size: u32,
    pub backend_count: u16,
    pub mode: u8,
    pub flags: u8,
    pub generation: u32,
}

/// `struct rv_backend4`: an IPv4 backend (backend_map value).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Backend4 {
    pub addr: u32,
    pub port: u16,
    pub mac: [u8; 6],
    pub generation: u32,
}

/// `struct rv_backend6`: an IPv6 backend (backend_map6 value).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Backend6 {
    pub addr: [u8; 16],
    pub port: u16,
    pub mac: [u8; 6],
    pub generation: u32,
}

/// `struct rv_backend_health`: one of [`backend_state`], and the control
/// plane's reasons for it ([`backend_flags`]), kept across restarts.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BackendHealth {
    pub state: u32,
    pub flags: u32,
}

/// `enum rv_backend_flags`: bits of [`BackendHealth::flags`].
pub mod backend_flags {
    /// Drained by an operator.
    pub const DRAINED: u32 = 1 << 0;
    /// The health probes consider it down.
    pub const PROBE_DOWN: u32 = 1 << 1;
    /// Its source asks for no new flows (a terminating endpoint) in every
    /// VIP that lists it.
    pub const TERMINATING: u32 = 1 << 2;
    /// Not a health reason: a backend on another node, whose flows get the
    /// node's address as source in a [`super::service_flags::SNAT`] VIP.
    pub const SNAT: u32 = 1 << 3;
    /// Not a real backend: the pseudo-backend owning VIPs' refused shares
    /// of their Maglev slices (`VipSpec::reject_weight`). No address entry,
    /// state healthy; a new flow whose own slot names it is refused (TCP
    /// reset, else dropped), a down backend's probe steps over it.
    pub const REJECT: u32 = 1 << 4;
}

/// `struct rv_flow4`: a client's flow (connection_affinity_map key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flow4 {
    pub src: u32,
    pub dst: u32,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub pad: [u8; 3],
}

/// `struct rv_flow6`: a client's flow (connection_affinity_map6 key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flow6 {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub pad: [u8; 3],
}

/// `struct rv_affinity`: the backend a flow sticks to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Affinity {
    pub backend_id: u32,
    pub backend_generation: u32,
    /// Tick (jiffies >> [`NAT_CHECK_JIFFIES_SHIFT`]) of the last reverse-NAT
    /// check (NAT flows).
    pub nat_checked: u32,
}

/// `struct rv_nexthop`: the datapath's per-CPU cache of an L3 DSR
/// backend's next hop (nexthop_cache_map). The control plane never writes
/// it; mirrored so that tools and tests can read it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NextHop {
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
    pub ifindex: u32,
    pub mtu: u32,
    pub backend_generation: u32,
    pub tick: u32,
}

/// `struct rv_nat_key4`: a backend's reply (nat_reverse_map key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NatKey4 {
    pub src: u32,
    pub dst: u32,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub pad: [u8; 3],
}

/// `struct rv_nat_key6`: a backend's reply (nat_reverse_map6 key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NatKey6 {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub pad: [u8; 3],
}

/// `struct rv_nat_value4`: the VIP a reply's source is restored to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NatValue4 {
    pub vip: u32,
    pub vip_port: u16,
    pub pad: u16,
    pub service_id: u32,
}

/// `struct rv_nat_value6`: the VIP a reply's source is restored to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NatValue6 {
    pub vip: [u8; 16],
    pub vip_port: u16,
    pub pad: u16,
    pub service_id: u32,
}

/// `struct rv_vip_stats`: per-CPU counters of one service.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipStats {
    pub packets: u64,
    pub bytes: u64,
    pub new_flows: u64,
    pub drops: u64,
    pub reply_packets: u64,
    pub reply_bytes: u64,
}

/// `struct rv_backend_stats`: per-CPU counters of one backend ID
/// (`backend_stats_map`): client->backend packets and bytes in every mode,
/// new flows, and the jiffies of the CPU's latest packet (0 = none), so the
/// spread over backends and the end of a drain are visible.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BackendStats {
    pub packets: u64,
    pub bytes: u64,
    pub new_flows: u64,
    pub last_jiffies: u64,
}

/// `struct rv_meta`: who wrote the pinned maps (rivora_meta, index 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Meta {
    pub abi_version: u32,
    pub maglev_table_size: u32,
    pub xdp_mode: u32,
    pub pad: u32,
}

/// `enum rv_xdp_mode`: values of [`Meta::xdp_mode`].
pub mod xdp_mode {
    /// Not recorded (no persistent link yet).
    pub const UNKNOWN: u32 = 0;
    /// Driver mode.
    pub const NATIVE: u32 = 1;
    /// Generic (skb) mode.
    pub const GENERIC: u32 = 2;
}

/// `struct rv_vip_range_key4`: LPM key of a port-range VIP prefix.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipRangeKey4 {
    pub prefixlen: u32,
    pub proto: u8,
    pub addr: [u8; 4],
    pub port: [u8; 2],
    pub pad: u8,
}

/// `struct rv_vip_range_key6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipRangeKey6 {
    pub prefixlen: u32,
    pub proto: u8,
    pub addr: [u8; 16],
    pub port: [u8; 2],
    pub pad: u8,
}

/// `struct rv_src_range_key4`: LPM key of one allowed source prefix of a
/// VIP (tag = service ID, | [`SRC_RANGE_BANK`] for bank 1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SrcRangeKey4 {
    pub prefixlen: u32,
    pub tag: u32,
    pub addr: [u8; 4],
}

/// `struct rv_src_range_key6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SrcRangeKey6 {
    pub prefixlen: u32,
    pub tag: u32,
    pub addr: [u8; 16],
}

/// `struct rv_frag_key4`: the fragments of one IPv4 datagram.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FragKey4 {
    pub src: u32,
    pub dst: u32,
    pub id: u32,
    pub proto: u8,
    pub pad: [u8; 3],
}

/// `struct rv_frag_key6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FragKey6 {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub id: u32,
    pub proto: u8,
    pub pad: [u8; 3],
}

/// `struct rv_frag_value`: where a datagram's first fragment went.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FragValue {
    pub backend_id: u32,
    pub backend_generation: u32,
    pub service_id: u32,
    pub pad: u32,
}

/// `struct rv_frag_rev_value4`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FragRevValue4 {
    pub vip: u32,
    pub service_id: u32,
}

/// `struct rv_frag_rev_value6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FragRevValue6 {
    pub vip: [u8; 16],
    pub service_id: u32,
}

/// `struct rv_nat_ep_key4`: a NAT backend endpoint (nat_endpoint_map key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NatEpKey4 {
    pub addr: u32,
    pub port: u16,
    pub proto: u8,
    pub pad: u8,
}

/// `struct rv_nat_ep_key6` (nat_endpoint_map6 key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NatEpKey6 {
    pub addr: [u8; 16],
    pub port: u16,
    pub proto: u8,
    pub pad: u8,
}

/// `struct rv_nat_ep_value4`: the VIP an endpoint's replies come from.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NatEpValue4 {
    pub vip: u32,
    pub vip_port: u16,
    pub flags: u8,
    pub pad: u8,
    pub service_id: u32,
}

/// `struct rv_nat_ep_value6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NatEpValue6 {
    pub vip: [u8; 16],
    pub vip_port: u16,
    pub flags: u8,
    pub pad: u8,
    pub service_id: u32,
}

/// `struct rv_flow_filter_ctl`: the shape of `flow_filter_map` and whether
/// its active half is exact (every affinity entry's bit set), which is what
/// lets a clear bit skip the affinity lookup (`bpf/flow_filter.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowFilterCtl {
    pub words: u32,
    pub active: u32,
    pub exact: u32,
    pub pad: u32,
}

/// `struct rv_flow_guard_config`: the new-flow guard's setting.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowGuardConfig {
    pub limit: u32,
    pub window_jiffies: u32,
    pub rate: u64,
}

/// `struct rv_flow_guard_state`: one CPU's guard window (soft state of the
/// running program, never written by the control plane; mirrored so the
/// layout check covers it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowGuardState {
    pub window_start: u64,
    pub count: u64,
}

/// `struct rv_rl_config`: a per-source SYN token bucket's parameters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RlConfig {
    pub rate: u64,
    pub burst: u64,
    pub enabled: u32,
    pub pad: u32,
}

/// `struct rv_rl_key4`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RlKey4 {
    pub src: u32,
    pub service_id: u32,
}

/// `struct rv_rl_key6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RlKey6 {
    pub src: [u8; 16],
    pub service_id: u32,
}

/// `struct rv_rl_bucket`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RlBucket {
    pub nanotokens: u64,
    pub last_ns: u64,
}

/// `struct rv_iface`: the attached interface (iface_mac_map).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Iface {
    pub mac: [u8; 6],
    pub pad: u16,
    pub ifindex: u32,
}

/// `struct rv_tunnel_config`: outer source addresses of L3 DSR.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TunnelConfig {
    pub src4: u32,
    pub src6: [u8; 16],
    pub flags: u32,
}

/// `struct rv_snat_config`: this node's source for translated flows
/// (snat_config_map, one entry; bpf/snat.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SnatConfig {
    /// IPv4 source (network order), valid with [`snat_config_flags::ADDR4`].
    pub addr4: u32,
    /// IPv6 source, valid with [`snat_config_flags::ADDR6`].
    pub addr6: [u8; 16],
    /// Node ports, host order, inclusive.
    pub port_min: u16,
    pub port_max: u16,
    pub flags: u32,
    /// Idle ticks (jiffies >> [`NAT_CHECK_JIFFIES_SHIFT`]) after which a
    /// mapping's port may go to another flow: open TCP, TCP after a FIN or
    /// RST, UDP.
    pub tcp_idle: u32,
    pub closed_idle: u32,
    pub udp_idle: u32,
}

/// `enum rv_snat_config_flags`: bits of [`SnatConfig::flags`].
pub mod snat_config_flags {
    /// `addr4` is set: IPv4 flows may be translated.
    pub const ADDR4: u32 = 1 << 0;
    /// `addr6` is set.
    pub const ADDR6: u32 = 1 << 1;
}

/// `struct rv_snat_flow`: a translated flow's node port (snat_flow_map(6)
/// value, keyed by [`Flow4`]/[`Flow6`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SnatFlow {
    /// Network order.
    pub node_port: u16,
    pub pad: u16,
    pub backend_id: u32,
    pub backend_generation: u32,
    /// Tick of the last ownership check of its reverse mapping.
    pub checked: u32,
}

/// `struct rv_snat_rev_key4`: a translated flow's reply as it arrives
/// (snat_rev_map key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SnatRevKey4 {
    pub backend: u32,
    pub backend_port: u16,
    pub node_port: u16,
    pub proto: u8,
    pub pad: [u8; 3],
}

/// `struct rv_snat_rev_key6` (snat_rev_map6 key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SnatRevKey6 {
    pub backend: [u8; 16],
    pub backend_port: u16,
    pub node_port: u16,
    pub proto: u8,
    pub pad: [u8; 3],
}

/// `struct rv_snat_rev4`: whom a reply is for and as whom it comes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SnatRev4 {
    pub client: u32,
    pub vip: u32,
    pub client_port: u16,
    pub vip_port: u16,
    pub service_id: u32,
    pub last_seen: u32,
    pub flags: u32,
}

/// `struct rv_snat_rev6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SnatRev6 {
    pub client: [u8; 16],
    pub vip: [u8; 16],
    pub client_port: u16,
    pub vip_port: u16,
    pub service_id: u32,
    pub last_seen: u32,
    pub flags: u32,
}

/// `enum rv_snat_rev_flags`: bits of [`SnatRev4::flags`].
pub mod snat_rev_flags {
    /// A FIN or RST was seen.
    pub const CLOSING: u32 = 1 << 0;
}

/// `enum rv_snat_counter`: indices of `snat_stats_map` (per-CPU u64).
pub mod snat_counter {
    /// Flows that got a node port.
    pub const ALLOCATED: u32 = 0;
    /// ... by taking over an idle mapping's port.
    pub const REUSED_IDLE: u32 = 1;
    /// Packets sent to a backend with a translated source.
    pub const FORWARDED: u32 = 2;
    /// Replies translated back to their client.
    pub const REPLIED: u32 = 3;
    /// Packets to the node address in the port range without a mapping.
    pub const REPLY_UNMATCHED: u32 = 4;
    /// Translated packets handed to the kernel to route.
    pub const TO_KERNEL: u32 = 5;
    /// Counters defined so far.
    pub const COUNT: u32 = 6;
    /// Names for metrics and `rivoractl stats`, by index.
    pub const NAMES: [&str; COUNT as usize] = [
        "allocated",
        "reused_idle",
        "forwarded",
        "replied",
        "reply_unmatched",
        "to_kernel",
    ];
}

/// Ports a translated flow's first packet tries (`RV_SNAT_PORT_PROBES`).
pub const SNAT_PORT_PROBES: u32 = 8;
/// Length of `snat_stats_map`.
pub const SNAT_COUNTER_SLOTS: u32 = 8;
/// Capacity of each client affinity table (`client_affinity_map(6)`).
pub const MAX_CLIENTS: u32 = 65536;
/// Slots of `syn_hint_map` (the backend of each recent SYN, for its ACK).
pub const SYN_HINT_SLOTS: u32 = 4096;

/// `struct rv_affinity_timeout`: a ClientIP VIP's timeout
/// (svc_affinity_timeout_map value, by service ID).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AffinityTimeout {
    /// Ticks (jiffies >> [`NAT_CHECK_JIFFIES_SHIFT`]); 0: no timeout.
    pub ticks: u32,
    /// The timeout asked for, read back on adoption.
    pub seconds: u32,
}

/// `struct rv_client_key4`: a client of a ClientIP VIP with a timeout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClientKey4 {
    pub service_id: u32,
    pub addr: u32,
}

/// `struct rv_client_key6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClientKey6 {
    pub service_id: u32,
    pub addr: [u8; 16],
}

/// `struct rv_client_affinity`: the backend of a client's last new flow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClientAffinity {
    pub backend_id: u32,
    pub backend_generation: u32,
    pub last_seen: u32,
    pub pad: u32,
}

/// rivora-decap's constants and kinds (`enum rv_decap_consts`,
/// `enum rv_decap_kind`). Its maps are its own, versioned apart from the
/// balancer's.
pub mod decap {
    /// `RV_DECAP_ABI_VERSION`: layout version of the decap maps.
    pub const ABI_VERSION: u32 = 1;
    /// Capacity of each endpoint-address map.
    pub const MAX_ADDRS: u32 = 256;
    /// IPv4 outer header, protocol 4 or 41.
    pub const IPIP: u32 = 0;
    /// IPv6 outer header, next header 41 or 4.
    pub const IP6TNL: u32 = 1;
    /// GRE over IPv4.
    pub const GRE: u32 = 2;
    /// GRE over IPv6.
    pub const GRE6: u32 = 3;
    /// Number of kinds (length of `decap_stats`).
    pub const KIND_COUNT: u32 = 4;
    /// Names of the kinds, indexed by kind (those of the kernel devices
    /// that would otherwise terminate them).
    pub const KIND_NAMES: [&str; KIND_COUNT as usize] = ["ipip", "ip6tnl", "gre", "ip6gre"];
}

/// `struct rv_decap_addr4`: a local IPv4 tunnel endpoint (decap_addr4 key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DecapAddr4 {
    pub addr: u32,
}

/// `struct rv_decap_addr6`: a local IPv6 tunnel endpoint (decap_addr6 key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DecapAddr6 {
    pub addr: [u8; 16],
}

/// `struct rv_decap_stats`: per-CPU counters of one tunnel kind.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DecapStats {
    pub decapsulated: u64,
    pub passed: u64,
    pub malformed: u64,
    pub fragments: u64,
}

/// `struct rv_decap_meta`: what the attach command recorded.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DecapMeta {
    pub abi_version: u32,
    pub ifindex: u32,
    pub xdp_mode: u32,
    pub pad: u32,
}

/// `struct rv_drop_stats`: per-CPU counter of one drop reason.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DropStats {
    pub packets: u64,
}

pod!(
    AffinityTimeout,
    ClientKey4,
    ClientKey6,
    ClientAffinity,
    SnatConfig,
    SnatFlow,
    SnatRevKey4,
    SnatRevKey6,
    SnatRev4,
    SnatRev6,
    VipKey4,
    VipKey6,
    VipValue,
    VipSlot,
    VipIndexCtl,
    Service,
    Backend4,
    Backend6,
    BackendHealth,
    Flow4,
    Flow6,
    Affinity,
    NatKey4,
    NatKey6,
    NatValue4,
    NatValue6,
    VipStats,
    BackendStats,
    DropStats,
    Meta,
    VipRangeKey4,
    VipRangeKey6,
    SrcRangeKey4,
    SrcRangeKey6,
    FragKey4,
    FragKey6,
    FragValue,
    FragRevValue4,
    FragRevValue6,
    NatEpKey4,
    NatEpKey6,
    NatEpValue4,
    NatEpValue6,
    FlowGuardConfig,
    FlowFilterCtl,
    FlowGuardState,
    RlConfig,
    RlKey4,
    RlKey6,
    RlBucket,
    Iface,
    TunnelConfig,
    DecapAddr4,
    DecapAddr6,
    DecapStats,
    DecapMeta,
);

/// One struct's layout as the Rust side sees it: the test compares each
/// entry with the BTF of the C header.
#[derive(Debug)]
pub struct StructLayout {
    /// The C struct name.
    pub c_name: &'static str,
    /// `size_of` the Rust mirror.
    pub size: usize,
    /// (C field name, byte offset) for every field.
    pub fields: Vec<(&'static str, usize)>,
}

macro_rules! layout {
    ($t:ty, $c:literal, [$($f:ident),* $(,)?]) => {
        StructLayout {
            c_name: $c,
            size: core::mem::size_of::<$t>(),
            fields: vec![$((stringify!($f), core::mem::offset_of!($t, $f))),*],
        }
    };
}

mod cls;
pub use cls::*;

/// Every mirrored struct with its C name, for the layout check.
pub fn layouts() -> Vec<StructLayout> {
    vec![
        layout!(VipKey4, "rv_vip_key4", [addr, port, proto, pad]),
        layout!(VipKey6, "rv_vip_key6", [addr, port, proto, pad]),
        layout!(VipValue, "rv_vip_value", [service_id]),
        layout!(
            VipSlot,
            "rv_vip_slot",
            [addr, port, proto, flags, service_id]
        ),
        layout!(VipIndexCtl, "rv_vip_index_ctl", [half, flags]),
        layout!(
            Service,
            "rv_service",
            [
                maglev_offset,
                maglev_size,
                backend_count,
                mode,
                flags,
                generation
            ]
        ),
        layout!(Backend4, "rv_backend4", [addr, port, mac, generation]),
        layout!(Backend6, "rv_backend6", [addr, port, mac, generation]),
        layout!(BackendHealth, "rv_backend_health", [state, flags]),
        layout!(Flow4, "rv_flow4", [src, dst, sport, dport, proto, pad]),
        layout!(Flow6, "rv_flow6", [src, dst, sport, dport, proto, pad]),
        layout!(
            Affinity,
            "rv_affinity",
            [backend_id, backend_generation, nat_checked]
        ),
        layout!(
            NextHop,
            "rv_nexthop",
            [dmac, smac, ifindex, mtu, backend_generation, tick]
        ),
        layout!(NatKey4, "rv_nat_key4", [src, dst, sport, dport, proto, pad]),
        layout!(NatKey6, "rv_nat_key6", [src, dst, sport, dport, proto, pad]),
        layout!(NatValue4, "rv_nat_value4", [vip, vip_port, pad, service_id]),
        layout!(NatValue6, "rv_nat_value6", [vip, vip_port, pad, service_id]),
        layout!(NatEpKey4, "rv_nat_ep_key4", [addr, port, proto, pad]),
        layout!(NatEpKey6, "rv_nat_ep_key6", [addr, port, proto, pad]),
        layout!(
            NatEpValue4,
            "rv_nat_ep_value4",
            [vip, vip_port, flags, pad, service_id]
        ),
        layout!(
            NatEpValue6,
            "rv_nat_ep_value6",
            [vip, vip_port, flags, pad, service_id]
        ),
        layout!(
            FlowGuardConfig,
            "rv_flow_guard_config",
            [limit, window_jiffies, rate]
        ),
        layout!(FlowGuardState, "rv_flow_guard_state", [window_start, count]),
        layout!(
            FlowFilterCtl,
            "rv_flow_filter_ctl",
            [words, active, exact, pad]
        ),
        layout!(
            VipStats,
            "rv_vip_stats",
            [packets, bytes, new_flows, drops, reply_packets, reply_bytes]
        ),
        layout!(
            BackendStats,
            "rv_backend_stats",
            [packets, bytes, new_flows, last_jiffies]
        ),
        layout!(DropStats, "rv_drop_stats", [packets]),
        layout!(
            Meta,
            "rv_meta",
            [abi_version, maglev_table_size, xdp_mode, pad]
        ),
        layout!(
            VipRangeKey4,
            "rv_vip_range_key4",
            [prefixlen, proto, addr, port, pad]
        ),
        layout!(
            VipRangeKey6,
            "rv_vip_range_key6",
            [prefixlen, proto, addr, port, pad]
        ),
        layout!(SrcRangeKey4, "rv_src_range_key4", [prefixlen, tag, addr]),
        layout!(SrcRangeKey6, "rv_src_range_key6", [prefixlen, tag, addr]),
        layout!(FragKey4, "rv_frag_key4", [src, dst, id, proto, pad]),
        layout!(FragKey6, "rv_frag_key6", [src, dst, id, proto, pad]),
        layout!(
            FragValue,
            "rv_frag_value",
            [backend_id, backend_generation, service_id, pad]
        ),
        layout!(FragRevValue4, "rv_frag_rev_value4", [vip, service_id]),
        layout!(FragRevValue6, "rv_frag_rev_value6", [vip, service_id]),
        layout!(RlConfig, "rv_rl_config", [rate, burst, enabled, pad]),
        layout!(RlKey4, "rv_rl_key4", [src, service_id]),
        layout!(RlKey6, "rv_rl_key6", [src, service_id]),
        layout!(RlBucket, "rv_rl_bucket", [nanotokens, last_ns]),
        layout!(Iface, "rv_iface", [mac, pad, ifindex]),
        layout!(TunnelConfig, "rv_tunnel_config", [src4, src6, flags]),
        layout!(
            SnatConfig,
            "rv_snat_config",
            [
                addr4,
                addr6,
                port_min,
                port_max,
                flags,
                tcp_idle,
                closed_idle,
                udp_idle
            ]
        ),
        layout!(AffinityTimeout, "rv_affinity_timeout", [ticks, seconds]),
        layout!(ClientKey4, "rv_client_key4", [service_id, addr]),
        layout!(ClientKey6, "rv_client_key6", [service_id, addr]),
        layout!(
            ClientAffinity,
            "rv_client_affinity",
            [backend_id, backend_generation, last_seen, pad]
        ),
        layout!(
            SnatFlow,
            "rv_snat_flow",
            [node_port, pad, backend_id, backend_generation, checked]
        ),
        layout!(
            SnatRevKey4,
            "rv_snat_rev_key4",
            [backend, backend_port, node_port, proto, pad]
        ),
        layout!(
            SnatRevKey6,
            "rv_snat_rev_key6",
            [backend, backend_port, node_port, proto, pad]
        ),
        layout!(
            SnatRev4,
            "rv_snat_rev4",
            [
                client,
                vip,
                client_port,
                vip_port,
                service_id,
                last_seen,
                flags
            ]
        ),
        layout!(
            SnatRev6,
            "rv_snat_rev6",
            [
                client,
                vip,
                client_port,
                vip_port,
                service_id,
                last_seen,
                flags
            ]
        ),
        layout!(DecapAddr4, "rv_decap_addr4", [addr]),
        layout!(DecapAddr6, "rv_decap_addr6", [addr]),
        layout!(
            DecapStats,
            "rv_decap_stats",
            [decapsulated, passed, malformed, fragments]
        ),
        layout!(
            DecapMeta,
            "rv_decap_meta",
            [abi_version, ifindex, xdp_mode, pad]
        ),
    ]
    .into_iter()
    .chain(cls::layouts())
    .collect()
}

/// Every mirrored enum constant as (C enumerator name, value), for the check.
pub fn constants() -> Vec<(&'static str, i64)> {
    vec![
        ("RV_ABI_VERSION", ABI_VERSION as i64),
        ("RV_MAX_VIPS", MAX_VIPS as i64),
        ("RV_MAX_BACKENDS", MAX_BACKENDS as i64),
        ("RV_MAX_FLOWS", MAX_FLOWS as i64),
        ("RV_MAGLEV_TABLE_DEFAULT", MAGLEV_TABLE_DEFAULT as i64),
        ("RV_MAGLEV_PROBE_WINDOW", MAGLEV_PROBE_WINDOW as i64),
        ("RV_NAT_CHECK_JIFFIES_SHIFT", NAT_CHECK_JIFFIES_SHIFT as i64),
        ("RV_DROP_REASON_SLOTS", DROP_REASON_SLOTS as i64),
        ("RV_MODE_NAT", mode::NAT as i64),
        ("RV_MODE_DSR", mode::DSR as i64),
        ("RV_MODE_DSR_IPIP", mode::DSR_IPIP as i64),
        ("RV_MODE_DSR_GRE", mode::DSR_GRE as i64),
        ("RV_SVC_F_IPV6", service_flags::IPV6 as i64),
        ("RV_SVC_F_ACTIVE", service_flags::ACTIVE as i64),
        (
            "RV_SVC_F_AFFINITY_CLIENT_IP",
            service_flags::AFFINITY_CLIENT_IP as i64,
        ),
        (
            "RV_SVC_F_SYN_RATE_LIMIT",
            service_flags::SYN_RATE_LIMIT as i64,
        ),
        ("RV_SVC_F_NAT_FIB", service_flags::NAT_FIB as i64),
        (
            "RV_SVC_F_SOURCE_RANGES",
            service_flags::SOURCE_RANGES as i64,
        ),
        ("RV_SVC_F_SOURCE_BANK", service_flags::SOURCE_BANK as i64),
        ("RV_MAX_SRC_RANGES", MAX_SRC_RANGES as i64),
        ("RV_MAX_SRC_RANGES_PER_VIP", MAX_SRC_RANGES_PER_VIP as i64),
        ("RV_SRC_RANGE_BANK", SRC_RANGE_BANK as i64),
        ("RV_BACKEND_NONE", backend_state::NONE as i64),
        ("RV_BACKEND_HEALTHY", backend_state::HEALTHY as i64),
        ("RV_BACKEND_DRAINING", backend_state::DRAINING as i64),
        ("RV_BACKEND_DOWN", backend_state::DOWN as i64),
        (
            "RV_DROP_NO_HEALTHY_BACKEND",
            drop_reason::NO_HEALTHY_BACKEND as i64,
        ),
        ("RV_DROP_NO_SERVICE", drop_reason::NO_SERVICE as i64),
        ("RV_DROP_NO_BACKEND", drop_reason::NO_BACKEND as i64),
        ("RV_DROP_REWRITE_FAILED", drop_reason::REWRITE_FAILED as i64),
        ("RV_DROP_RATE_LIMITED", drop_reason::RATE_LIMITED as i64),
        (
            "RV_PASS_FRAG_UNMATCHED",
            drop_reason::PASS_FRAG_UNMATCHED as i64,
        ),
        (
            "RV_PASS_ICMP_UNMATCHED",
            drop_reason::PASS_ICMP_UNMATCHED as i64,
        ),
        (
            "RV_PASS_TUNNEL_TO_KERNEL",
            drop_reason::PASS_TUNNEL_TO_KERNEL as i64,
        ),
        ("RV_EVENT_TOO_BIG_ICMP", drop_reason::TOO_BIG_ICMP as i64),
        (
            "RV_PASS_TOO_BIG_FRAGMENTED",
            drop_reason::PASS_TOO_BIG_FRAGMENTED as i64,
        ),
        ("RV_DROP_ENCAP_FAILED", drop_reason::ENCAP_FAILED as i64),
        (
            "RV_PASS_NAT_TO_KERNEL",
            drop_reason::PASS_NAT_TO_KERNEL as i64,
        ),
        (
            "RV_PASS_STAGE_MISSING",
            drop_reason::PASS_STAGE_MISSING as i64,
        ),
        ("RV_EVENT_FLOW_GUARDED", drop_reason::FLOW_GUARDED as i64),
        ("RV_DROP_SOURCE_RANGE", drop_reason::SOURCE_RANGE as i64),
        ("RV_DROP_SNAT_EXHAUSTED", drop_reason::SNAT_EXHAUSTED as i64),
        ("RV_SVC_F_SNAT", service_flags::SNAT as i64),
        ("RV_BACKEND_F_SNAT", backend_flags::SNAT as i64),
        ("RV_BACKEND_F_REJECT", backend_flags::REJECT as i64),
        ("RV_SNAT_F_ADDR4", snat_config_flags::ADDR4 as i64),
        ("RV_SNAT_F_ADDR6", snat_config_flags::ADDR6 as i64),
        ("RV_SNAT_REV_F_CLOSING", snat_rev_flags::CLOSING as i64),
        ("RV_SNAT_PORT_PROBES", SNAT_PORT_PROBES as i64),
        ("RV_SNAT_COUNTER_SLOTS", SNAT_COUNTER_SLOTS as i64),
        ("RV_MAX_CLIENTS", MAX_CLIENTS as i64),
        ("RV_SYN_HINT_SLOTS", SYN_HINT_SLOTS as i64),
        ("RV_SNAT_ALLOCATED", snat_counter::ALLOCATED as i64),
        ("RV_SNAT_REUSED_IDLE", snat_counter::REUSED_IDLE as i64),
        ("RV_SNAT_FORWARDED", snat_counter::FORWARDED as i64),
        ("RV_SNAT_REPLIED", snat_counter::REPLIED as i64),
        (
            "RV_SNAT_REPLY_UNMATCHED",
            snat_counter::REPLY_UNMATCHED as i64,
        ),
        ("RV_SNAT_TO_KERNEL", snat_counter::TO_KERNEL as i64),
        ("RV_SNAT_COUNTER_COUNT", snat_counter::COUNT as i64),
        ("RV_DROP_REASON_COUNT", drop_reason::COUNT as i64),
        ("RV_MAX_NAT_ENDPOINTS", MAX_NAT_ENDPOINTS as i64),
        ("RV_UDP_SEEN_SLOTS", UDP_SEEN_SLOTS as i64),
        ("RV_NAT_FILTER_BITS", NAT_FILTER_BITS as i64),
        (
            "RV_FLOW_FILTER_BITS_PER_FLOW",
            FLOW_FILTER_BITS_PER_FLOW as i64,
        ),
        ("RV_NAT_EP_EXCLUSIVE", nat_ep_flags::EXCLUSIVE as i64),
        ("RV_NAT_EP_FALLBACK", nat_ep_flags::FALLBACK as i64),
        ("RV_MAX_FRAGS", MAX_FRAGS as i64),
        ("RV_MAX_RL_BUCKETS", MAX_RL_BUCKETS as i64),
        ("RV_MAX_RANGE_PREFIXES", MAX_RANGE_PREFIXES as i64),
        ("RV_MAX_IPV6_EXT_HEADERS", MAX_IPV6_EXT_HEADERS as i64),
        ("RV_MAX_IPV6_EXT_BYTES", MAX_IPV6_EXT_BYTES as i64),
        ("RV_RL_NODE_SERVICE", -1),
        ("RV_VIP_INDEX_SLOTS", VIP_INDEX_SLOTS as i64),
        ("RV_VIP_INDEX_PROBES", VIP_INDEX_PROBES as i64),
        ("RV_VIP_SLOT_USED", vip_slot_flags::USED as i64),
        ("RV_VIP_SLOT_IPV6", vip_slot_flags::IPV6 as i64),
        ("RV_VIP_INDEX_COMPLETE", vip_index_flags::COMPLETE as i64),
        ("RV_VIP_INDEX_RANGES4", vip_index_flags::RANGES4 as i64),
        ("RV_VIP_INDEX_RANGES6", vip_index_flags::RANGES6 as i64),
        ("RV_BACKEND_F_DRAINED", backend_flags::DRAINED as i64),
        ("RV_BACKEND_F_PROBE_DOWN", backend_flags::PROBE_DOWN as i64),
        (
            "RV_BACKEND_F_TERMINATING",
            backend_flags::TERMINATING as i64,
        ),
        ("RV_XDP_MODE_UNKNOWN", xdp_mode::UNKNOWN as i64),
        ("RV_XDP_MODE_NATIVE", xdp_mode::NATIVE as i64),
        ("RV_XDP_MODE_GENERIC", xdp_mode::GENERIC as i64),
        ("RV_DECAP_ABI_VERSION", decap::ABI_VERSION as i64),
        ("RV_DECAP_MAX_ADDRS", decap::MAX_ADDRS as i64),
        ("RV_DECAP_IPIP", decap::IPIP as i64),
        ("RV_DECAP_IP6TNL", decap::IP6TNL as i64),
        ("RV_DECAP_GRE", decap::GRE as i64),
        ("RV_DECAP_GRE6", decap::GRE6 as i64),
        ("RV_DECAP_KIND_COUNT", decap::KIND_COUNT as i64),
    ]
    .into_iter()
    .chain(cls::constants())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors computed by the C function itself (bpf/hash.h compiled for
    /// the host, little-endian): the hash is ABI, so these never change
    /// without an RV_ABI_VERSION bump.
    #[test]
    #[cfg(target_endian = "little")]
    fn vip_index_hash_known_vectors() {
        let v4 = |a: &str, port: u16, proto: u8| {
            let k = VipKey4::new(a.parse().unwrap(), port, proto);
            let s = VipSlot::v4(&k, 0);
            assert_eq!(s.hash(), vip_index_hash(&s.addr, k.port, proto, false));
            s.hash()
        };
        let v6 = |a: &str, port: u16, proto: u8| {
            VipSlot::v6(&VipKey6::new(a.parse().unwrap(), port, proto), 0).hash()
        };
        assert_eq!(v4("10.0.0.1", 80, 6), 0x6ef4_56d4);
        assert_eq!(v4("10.0.0.2", 80, 6), 0xfa6a_cc4a);
        assert_eq!(v4("10.0.0.1", 443, 17), 0x05bf_635a);
        assert_eq!(v4("0.0.0.0", 0, 0), 0x2923_faa4);
        assert_eq!(v4("192.168.255.254", 65535, 6), 0xe628_b12b);
        assert_eq!(v6("2001:db8::1", 80, 6), 0x0473_ba5c);
        assert_eq!(v6("fd00:200:100::1", 53, 17), 0xf775_b397);
        assert_eq!(v6("::", 0, 0), 0x948b_d269);
    }

    /// Vectors printed by bpf/hash.h's rv_nat_backend_bit compiled for the
    /// host (little-endian): ABI, like the index hash.
    #[test]
    #[cfg(target_endian = "little")]
    fn nat_backend_bit_known_vectors() {
        let v4 = |a: &str| {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&a.parse::<Ipv4Addr>().unwrap().octets());
            nat_backend_bit(&b, false)
        };
        let v6 =
            |a: &str| nat_backend_bit(&a.parse::<std::net::Ipv6Addr>().unwrap().octets(), true);
        assert_eq!(v4("10.200.1.11"), 39572);
        assert_eq!(v4("10.200.1.12"), 51863);
        assert_eq!(v4("192.168.255.254"), 57231);
        assert_eq!(v4("0.0.0.0"), 4180);
        assert_eq!(v6("fd00:200:1::11"), 42440);
        assert_eq!(v6("2001:db8::1"), 24162);
        assert_eq!(v6("::"), 27976);
    }

    /// Vectors printed by bpf/hash.h's rv_flow_filter_hash compiled for the
    /// host (little-endian): ABI since version 10.
    #[test]
    #[cfg(target_endian = "little")]
    fn flow_filter_hash_known_vectors() {
        let v4 = |s: &str, d: &str, sp: u16, dp: u16, proto: u8| {
            flow_filter_hash4(&Flow4 {
                src: u32::from_ne_bytes(s.parse::<Ipv4Addr>().unwrap().octets()),
                dst: u32::from_ne_bytes(d.parse::<Ipv4Addr>().unwrap().octets()),
                sport: sp.to_be(),
                dport: dp.to_be(),
                proto,
                pad: [0; 3],
            })
        };
        let v6 = |s: &str, d: &str, sp: u16, dp: u16, proto: u8| {
            flow_filter_hash6(&Flow6 {
                src: s.parse::<std::net::Ipv6Addr>().unwrap().octets(),
                dst: d.parse::<std::net::Ipv6Addr>().unwrap().octets(),
                sport: sp.to_be(),
                dport: dp.to_be(),
                proto,
                pad: [0; 3],
            })
        };
        assert_eq!(v4("10.128.0.1", "10.200.100.1", 40000, 80, 6), 0xbb35_4388);
        assert_eq!(v4("0.0.0.0", "0.0.0.0", 0, 0, 0), 0);
        assert_eq!(
            v4("192.168.255.254", "10.0.0.1", 65535, 53, 17),
            0x9b7b_e8a5
        );
        assert_eq!(
            v6("fd00:100::2", "fd00:200:100::1", 40000, 80, 6),
            0xdf02_3fa3
        );
        assert_eq!(v6("::", "::", 0, 0, 0), 0);
    }

    #[test]
    fn vip_index_hash_spreads_a_subnet_over_the_slots() {
        // 4,096 consecutive addresses on one port: the low bits that pick
        // the slot must vary (the last octet sits in the word's top byte).
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..4096u32 {
            let a = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            let s = VipSlot::v4(&VipKey4::new(a, 443, 6), 0);
            seen.insert(s.hash() & (VIP_INDEX_SLOTS - 1));
        }
        // A uniform hash gives about 16384 * (1 - e^-0.25) = 3,624 distinct.
        assert!(seen.len() > 3400, "{}", seen.len());
        const { assert!(VIP_INDEX_SLOTS.is_power_of_two()) };
        const { assert!(VIP_INDEX_SLOTS >= 4 * MAX_VIPS) };
    }
}
