/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rivora_abi.h: the single source of truth for every key and value that the
 * BPF programs and the Rust control plane exchange through maps.
 *
 * The Rust mirror lives in crates/abi; a test there reads the layouts back
 * from the BTF that clang emits for the compiled programs and compares every
 * struct's size and every field's offset, so the two can never drift silently.
 *
 * Rules for editing this file:
 *  - every struct is naturally aligned and has explicit padding fields, so
 *    its layout is the same for the BPF target and x86_64/aarch64 hosts;
 *  - addresses and ports are stored in network byte order, exactly as they
 *    sit in the packet, so the hot path never swaps bytes;
 *  - any change to a layout or to the meaning of a field bumps
 *    RV_ABI_VERSION: pinned maps outlive rivorad, and a daemon must never
 *    silently misread maps written by another layout.
 */
#ifndef RIVORA_ABI_H
#define RIVORA_ABI_H

#include <linux/types.h>

/* Every constant the control plane must agree on is an enum, not a
 * #define, so that it reaches the BTF and the Rust mirror test checks it. */
enum rv_abi_consts {
	/* Bumped on any layout or meaning change of a map key or value. */
	RV_ABI_VERSION = 14,
	/* Capacities (the architecture spec's Maps table). */
	RV_MAX_VIPS = 4096,
	RV_MAX_BACKENDS = 8192,
	RV_MAX_FLOWS = 65536,
	/* Default size of the shared Maglev table (a prime); rivorad may size
	 * the map differently at load time (--maglev-table-size). */
	RV_MAGLEV_TABLE_DEFAULT = 4194301,
	/* How many consecutive Maglev slots the hot path inspects before it
	 * gives up on finding a usable backend (bounded for the verifier). */
	RV_MAGLEV_PROBE_WINDOW = 16,
	/* rv_affinity.nat_checked and rv_nexthop.tick count in units of 2^7
	 * jiffies: 0.51 s at HZ=250, 0.13 s at HZ=1000, 1.28 s at HZ=100. */
	RV_NAT_CHECK_JIFFIES_SHIFT = 7,
	/* Size of drop_stats_map: room for enum rv_drop_reason to grow. */
	RV_DROP_REASON_SLOTS = 16,
	/* Fragment tracking tables (first fragment -> its backend). */
	RV_MAX_FRAGS = 16384,
	/* SYN rate-limit buckets (per source, per VIP or node-wide). */
	RV_MAX_RL_BUCKETS = 65536,
	/* Entries of each port-range trie (a range becomes several prefixes). */
	RV_MAX_RANGE_PREFIXES = 16384,
	/* IPv6 extension headers stepped over, at most, and their total size. */
	RV_MAX_IPV6_EXT_HEADERS = 4,
	RV_MAX_IPV6_EXT_BYTES = 248,
	/* service_id used for the node-wide rate-limit bucket of a source. */
	RV_RL_NODE_SERVICE = 0xffffffff,
	/* Slots of each half of vip_index_map (a power of two, 4x
	 * RV_MAX_VIPS); the map holds two halves. */
	RV_VIP_INDEX_SLOTS = 16384,
	/* Slots a lookup probes from a key's home slot, at most. */
	RV_VIP_INDEX_PROBES = 8,
	/* NAT backend endpoints (address, port the replies leave from,
	 * protocol) of nat_endpoint_map(6): a backend ID per VIP port at most. */
	RV_MAX_NAT_ENDPOINTS = 16384,
	/* Slots of the per-CPU filter that lets a UDP flow earn an affinity
	 * entry on its second packet (a power of two). */
	RV_UDP_SEEN_SLOTS = 4096,
	/* Bits of nat_backend_filter_map (a power of two; 64 per entry). */
	RV_NAT_FILTER_BITS = 65536,
	/* Bits of each half of flow_filter_map per flow-table entry: a half
	 * has as many 64-bit words as the flow-table size rounded up to a
	 * power of two, so with both families' tables full one bit in 32 is
	 * set (flow_filter.h). */
	RV_FLOW_FILTER_BITS_PER_FLOW = 64,
	/* Prefixes of each source-range trie (src_range_map(6)), all VIPs of
	 * the family together, and the most one VIP may list (per family: a
	 * VIP has one). A VIP whose list changes holds its old and its new
	 * list at once for a moment (RV_SVC_F_SOURCE_BANK), so the writer
	 * checks the sum of both against the trie's size. */
	RV_MAX_SRC_RANGES = 16384,
	RV_MAX_SRC_RANGES_PER_VIP = 256,
	/* Or'ed into a source-range key's tag for the prefixes of bank 1
	 * (RV_SVC_F_SOURCE_BANK); service IDs stay below RV_MAX_VIPS. */
	RV_SRC_RANGE_BANK = 0x10000,
	/* Ports a source-translated flow's first packet tries (snat.h). */
	RV_SNAT_PORT_PROBES = 8,
	/* Slots of snat_stats_map (enum rv_snat_counter, room to grow). */
	RV_SNAT_COUNTER_SLOTS = 8,
	/* Clients remembered per family for sessionAffinity ClientIP with a
	 * timeout (client_affinity_map(6)), all VIPs together. */
	RV_MAX_CLIENTS = 65536,
	/* Slots of syn_hint_map (a power of two): the backend of each recent
	 * SYN, for its handshake's ACK (balance.h rv_syn_hint). 32 KiB, so
	 * it stays in the CPU's cache: with 64 Ki slots (512 KiB) a SYN's
	 * store missed the cache and cost a new flow 60-180 ns (bench A/B). */
	RV_SYN_HINT_SLOTS = 4096,
};

/* rv_vip_slot.flags bits. */
enum rv_vip_slot_flags {
	RV_VIP_SLOT_USED = 1 << 0,
	RV_VIP_SLOT_IPV6 = 1 << 1,
};

/* rv_vip_index_ctl.flags bits. */
enum rv_vip_index_flags {
	/* Every exact VIP of vip_map/vip_map6 is in the active half within
	 * RV_VIP_INDEX_PROBES slots of its home: a miss in the index is a miss
	 * in vip_map. Unset (an all-zero entry: a fresh load, an older writer,
	 * a placement that failed): the index is not used at all. */
	RV_VIP_INDEX_COMPLETE = 1 << 0,
	/* A port-range VIP of that family exists: an exact miss must still
	 * consult vip_range_map(6). */
	RV_VIP_INDEX_RANGES4 = 1 << 1,
	RV_VIP_INDEX_RANGES6 = 1 << 2,
};

/* Forwarding mode of a service (rv_service.mode). */
enum rv_mode {
	RV_MODE_NAT = 0,
	RV_MODE_DSR = 1,
	RV_MODE_DSR_IPIP = 2,
	RV_MODE_DSR_GRE = 3,
};

/* rv_service.flags bits. */
enum rv_service_flags {
	RV_SVC_F_IPV6 = 1 << 0,
	/* The entry is programmed and may be used (an all-zero slot is not). */
	RV_SVC_F_ACTIVE = 1 << 1,
	/* sessionAffinity: clientIP: the Maglev hash covers the source address
	 * only, so every connection of a client lands on the same backend. */
	RV_SVC_F_AFFINITY_CLIENT_IP = 1 << 2,
	/* The service has its own SYN rate limit in svc_rl_config_map. */
	RV_SVC_F_SYN_RATE_LIMIT = 1 << 3,
	/* NAT only (`natForwarding: fib`): the rewritten packet is routed by
	 * xdp_ingress itself (bpf_fib_lookup, XDP_REDIRECT) instead of being
	 * handed to the kernel's forwarding path. */
	RV_SVC_F_NAT_FIB = 1 << 4,
	/* loadBalancerSourceRanges: only sources inside one of the VIP's
	 * prefixes in src_range_map(6) may reach it; the others are dropped
	 * (RV_DROP_SOURCE_RANGE). Set with no prefix at all: nobody may. */
	RV_SVC_F_SOURCE_RANGES = 1 << 5,
	/* Which bank of the VIP's source prefixes is in force: the tag of its
	 * keys is service_id, or service_id | RV_SRC_RANGE_BANK when set. A
	 * new list is written into the other bank and switched to with the
	 * service entry's one update, so a packet sees the old list or the
	 * new one, never a mix. */
	RV_SVC_F_SOURCE_BANK = 1 << 6,
	/* NAT only: some backends carry RV_BACKEND_F_SNAT (endpoints on other
	 * nodes of an externalTrafficPolicy Cluster Service): their flows also
	 * get the node's address as source (snat.h). Lets every other VIP skip
	 * the backend's flag lookup. */
	RV_SVC_F_SNAT = 1 << 7,
};

/* backend_health_map values. 0 means "no backend with this ID": a freed ID
 * reads as unusable without any extra lookup. */
enum rv_backend_state {
	RV_BACKEND_NONE = 0,
	RV_BACKEND_HEALTHY = 1,
	RV_BACKEND_DRAINING = 2,
	RV_BACKEND_DOWN = 3,
};

/* Indices of drop_stats_map. Append only (bump RV_ABI_VERSION otherwise). */
enum rv_drop_reason {
	/* Every backend in the probe window was draining, down or absent. */
	RV_DROP_NO_HEALTHY_BACKEND = 0,
	/* vip_map matched but the service config was not active: a VIP being
	 * removed, or maps out of step with each other. */
	RV_DROP_NO_SERVICE = 1,
	/* A chosen backend ID had no address entry, or the flow's Maglev
	 * slot is the VIP's refused share (a backend with RV_BACKEND_F_REJECT:
	 * VipSpec::reject_weight, a Gateway API backendRef that resolves to no
	 * backend): a new TCP flow got a reset back (XDP_TX), any other packet
	 * was dropped. Both count here, per VIP too: the share is what "no
	 * backend" would have served. */
	RV_DROP_NO_BACKEND = 2,
	/* The packet could not be rewritten (bounds check failed after parse). */
	RV_DROP_REWRITE_FAILED = 3,
	/* A TCP SYN over its source's rate limit. */
	RV_DROP_RATE_LIMITED = 4,
	/* Not a drop: a later fragment whose first fragment was not seen was
	 * passed to the kernel untouched (counted so it is visible). */
	RV_PASS_FRAG_UNMATCHED = 5,
	/* Not a drop: an ICMP error quoting a flow the tables do not know was
	 * passed to the kernel untouched. */
	RV_PASS_ICMP_UNMATCHED = 6,
	/* Not a drop: an L3 DSR packet was encapsulated but the FIB could not
	 * answer (no neighbour yet...): handed to the kernel to route. */
	RV_PASS_TUNNEL_TO_KERNEL = 7,
	/* Not a drop: a packet too big for the tunnel was answered with ICMP
	 * fragmentation needed / packet too big. */
	RV_EVENT_TOO_BIG_ICMP = 8,
	/* Not a drop: an IPv4 packet without DF too big for the tunnel was
	 * encapsulated and handed to the kernel, which fragments it. */
	RV_PASS_TOO_BIG_FRAGMENTED = 9,
	/* The frame could not be resized for encapsulation. */
	RV_DROP_ENCAP_FAILED = 10,
	/* Not a drop: a rewritten packet of a `natForwarding: fib` VIP was
	 * handed to the kernel to route (no FIB answer yet, TTL expiring, over
	 * the route's MTU, VLAN tagged). */
	RV_PASS_NAT_TO_KERNEL = 11,
	/* Not a drop: xdp_ingress found the stage a packet continues in
	 * missing from its stage_map (bpf/stages.h; a loader fault) and handed
	 * the packet to the kernel as it was. */
	RV_PASS_STAGE_MISSING = 12,
	/* Not a drop: a packet of a flow without state would have created it
	 * (affinity, reverse NAT or SYN bucket entry), but this CPU's new-flow
	 * guard budget was spent (flow_guard_config_map): it was forwarded by
	 * Maglev alone, and no established entry was evicted for it. */
	RV_EVENT_FLOW_GUARDED = 13,
	/* A packet to a VIP with source ranges from a source outside them. */
	RV_DROP_SOURCE_RANGE = 14,
	/* A flow to a source-translated backend found no free node port for
	 * it within RV_SNAT_PORT_PROBES tries (the port range is full of live
	 * flows to that backend endpoint), or the new-flow guard refused the
	 * mapping a SYN needs. */
	RV_DROP_SNAT_EXHAUSTED = 15,
	RV_DROP_REASON_COUNT = 16,
};

/* vip_map key: an exact IPv4 VIP. */
struct rv_vip_key4 {
	__be32 addr;
	__be16 port;
	__u8 proto; /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;
};

/* vip_map6 key: an exact IPv6 VIP. */
struct rv_vip_key6 {
	__u8 addr[16];
	__be16 port;
	__u8 proto;
	__u8 pad;
};

/* vip_range_map key (LPM trie): protocol and address match exactly, the
 * port by prefix, so a port range is stored as the few prefixes covering it
 * and a whole-address VIP as a 0-bit port prefix. prefixlen counts bits of
 * proto + addr + port. */
struct rv_vip_range_key4 {
	__u32 prefixlen;
	__u8 proto;
	__u8 addr[4];
	__u8 port[2]; /* network order */
	__u8 pad;
};

/* vip_range_map6 key. */
struct rv_vip_range_key6 {
	__u32 prefixlen;
	__u8 proto;
	__u8 addr[16];
	__u8 port[2];
	__u8 pad;
};

/* src_range_map key (LPM trie): one allowed source prefix of a VIP
 * (loadBalancerSourceRanges). The tag (service ID, plus RV_SRC_RANGE_BANK
 * for bank 1) matches exactly, the address by prefix: prefixlen counts
 * the tag's 32 bits and the address prefix. Value: the service ID. */
struct rv_src_range_key4 {
	__u32 prefixlen;
	__u32 tag;
	__u8 addr[4];
};

/* src_range_map6 key. */
struct rv_src_range_key6 {
	__u32 prefixlen;
	__u32 tag;
	__u8 addr[16];
};

/* vip_map / vip_map6 value. */
struct rv_vip_value {
	__u32 service_id;
};

/* vip_index_map value: a copy of one exact VIP of vip_map/vip_map6 in an
 * open-addressing table the hot path reads without a helper call (array
 * lookups are inlined by the verifier; a hash map lookup is a call, costly
 * under retpolines and Safe RET). Index: half * RV_VIP_INDEX_SLOTS +
 * ((rv_vip_index_hash(key) + i) & (RV_VIP_INDEX_SLOTS - 1)), i <
 * RV_VIP_INDEX_PROBES; a slot without RV_VIP_SLOT_USED ends the probe.
 * The hash is part of this ABI (bpf/hash.h, crates/abi vip_index_hash). */
struct rv_vip_slot {
	__u8 addr[16]; /* IPv4: the first 4 bytes, the rest zero */
	__be16 port;
	__u8 proto;
	__u8 flags; /* RV_VIP_SLOT_* */
	__u32 service_id;
};

/* vip_index_ctl_map value (one entry): which half of vip_index_map is in
 * use and what it promises. Rewritten in one map update to switch halves. */
struct rv_vip_index_ctl {
	__u32 half;  /* 0 or 1 */
	__u32 flags; /* RV_VIP_INDEX_* */
};

/* flow_filter_ctl_map value (one entry): the shape of flow_filter_map and
 * what its active half promises (flow_filter.h). All zero (a map just added
 * by an upgrade): no filter, every flow is looked up. */
struct rv_flow_filter_ctl {
	__u32 words;  /* 64-bit words per half, a power of two; 0: no filter */
	__u32 active; /* the half lookups read: 0 or 1 */
	__u32 exact;  /* 1: the active half has the bit of every entry of
		       * connection_affinity_map(6), so a clear bit means no
		       * entry; 0: bits are recorded, not trusted yet */
	__u32 pad;
};

/* service_config_map value, indexed by service ID. The control plane
 * rebuilds a slice elsewhere in maglev_table and then rewrites this entry in
 * one map update, so a lookup sees the old slice or the new one. */
struct rv_service {
	__u32 maglev_offset; /* first slot of this service's slice */
	__u32 maglev_size;   /* slice length, a prime; 0 = inactive */
	__u16 backend_count;
	__u8 mode;  /* enum rv_mode */
	__u8 flags; /* RV_SVC_F_* */
	__u32 generation; /* bumped on every rewrite, for debugging and adoption */
};

/* backend_map value (IPv4 backends), indexed by backend ID. */
struct rv_backend4 {
	__be32 addr;
	__be16 port;
	__u8 mac[6];
	__u32 generation; /* bumped each time the ID is given to a new backend */
};

/* backend_map6 value (IPv6 backends), indexed by backend ID. */
struct rv_backend6 {
	__u8 addr[16];
	__be16 port;
	__u8 mac[6];
	__u32 generation;
};

/* backend_health_map value, indexed by backend ID. The programs read only
 * `state`; `flags` keeps the control plane's reasons for it (an operator's
 * drain, a probe's verdict, a source's drain) across restarts. */
struct rv_backend_health {
	__u32 state; /* enum rv_backend_state */
	__u32 flags; /* RV_BACKEND_F_* */
};

/* rv_backend_health.flags bits. */
enum rv_backend_flags {
	/* Drained by an operator: draining unless a probe says down. */
	RV_BACKEND_F_DRAINED = 1 << 0,
	/* The health probes consider it down. */
	RV_BACKEND_F_PROBE_DOWN = 1 << 1,
	/* Its source asks for it to take no new flows (a terminating
	 * Kubernetes endpoint) in every VIP that lists it: draining unless a
	 * probe says down. */
	RV_BACKEND_F_TERMINATING = 1 << 2,
	/* Not a health reason: the backend is on another node and cannot
	 * answer through this node's tc_nat (its replies leave through its own
	 * node), so a RV_SVC_F_SNAT VIP's flows to it also get this node's
	 * address and a node port as source (snat.h). */
	RV_BACKEND_F_SNAT = 1 << 3,
	/* Not a real backend: the pseudo-backend that owns a VIP's refused
	 * share of the Maglev slice (VipSpec::reject_weight). It has no
	 * address entry (backend_map(6) generation 0), state HEALTHY, and is
	 * one ID shared by every VIP with a refused share. A new flow whose
	 * own slot names it is refused (a TCP reset, else a drop: balance.h
	 * rv_maglev_pick_slot); the probe past a down backend's slot steps
	 * over it, so a down backend's share goes to real backends only. */
	RV_BACKEND_F_REJECT = 1 << 4,
};

/* A flow as the client sent it (connection_affinity_map key, IPv4). */
struct rv_flow4 {
	__be32 src;
	__be32 dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* A flow as the client sent it (connection_affinity_map6 key, IPv6). */
struct rv_flow6 {
	__u8 src[16];
	__u8 dst[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* connection_affinity_map(6) value: the backend a flow is pinned to. The
 * generation must match the backend's current one; otherwise the ID was
 * reused for another backend and the flow is re-balanced. */
struct rv_affinity {
	__u32 backend_id;
	__u32 backend_generation;
	/* For NAT flows: the tick (jiffies >> RV_NAT_CHECK_JIFFIES_SHIFT, at
	 * most about a second) in which nat_reverse_map was last seen holding
	 * this flow's entry. The established path looks the entry up only when
	 * the tick has moved on, not on every packet (see xdp_ingress.c). Only
	 * ever compared for equality: a value in other units (written by an
	 * older program, which used the coarse clock) costs one early recheck. */
	__u32 nat_checked;
};

/* nat_reverse_map key: a backend's reply as it leaves, IPv4
 * (src = backend, dst = client). Same layout as rv_flow4. */
struct rv_nat_key4 {
	__be32 src;
	__be32 dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* nat_reverse_map6 key (IPv6). Same layout as rv_flow6. */
struct rv_nat_key6 {
	__u8 src[16];
	__u8 dst[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* nat_reverse_map value: what to put back as the reply's source (IPv4). */
struct rv_nat_value4 {
	__be32 vip;
	__be16 vip_port;
	__u16 pad;
	__u32 service_id;
};

/* nat_reverse_map6 value (IPv6). */
struct rv_nat_value6 {
	__u8 vip[16];
	__be16 vip_port;
	__u16 pad;
	__u32 service_id;
};

/* nat_endpoint_map key: a full-NAT backend endpoint as its replies leave
 * it (IPv4): the backend's address, the port it answers from (its own port,
 * or the VIP's for a port-0 backend) and the protocol. */
struct rv_nat_ep_key4 {
	__be32 addr;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

/* nat_endpoint_map6 key (IPv6). */
struct rv_nat_ep_key6 {
	__u8 addr[16];
	__be16 port;
	__u8 proto;
	__u8 pad;
};

/* rv_nat_ep_value*.flags bits. */
enum rv_nat_ep_flags {
	/* The endpoint serves exactly one VIP (address and port): every reply
	 * it sends is that VIP's, so no flow of it needs a nat_reverse_map
	 * entry, and xdp_ingress writes none. */
	RV_NAT_EP_EXCLUSIVE = 1 << 0,
	/* Not exclusive (any more), but `vip` is the VIP it served alone
	 * before: flows of that time have no per-flow entry until their next
	 * packet re-creates one, so a reply without one falls back to it. */
	RV_NAT_EP_FALLBACK = 1 << 1,
};

/* nat_endpoint_map value (IPv4): the VIP replies of the endpoint come from,
 * used per RV_NAT_EP_* flags. */
struct rv_nat_ep_value4 {
	__be32 vip;
	__be16 vip_port;
	__u8 flags; /* RV_NAT_EP_* */
	__u8 pad;
	__u32 service_id;
};

/* nat_endpoint_map6 value (IPv6). */
struct rv_nat_ep_value6 {
	__u8 vip[16];
	__be16 vip_port;
	__u8 flags;
	__u8 pad;
	__u32 service_id;
};

/* flow_guard_config_map value (one entry): the new-flow guard. Packets of
 * flows without state may create at most `limit` entries per CPU per
 * `window_jiffies`; beyond that they are forwarded by Maglev alone and
 * counted (RV_EVENT_FLOW_GUARDED), so a flood of unproven flows cannot evict
 * established ones. limit 0: no guard. */
struct rv_flow_guard_config {
	__u32 limit;          /* entries per CPU per window */
	__u32 window_jiffies; /* window length, > 0 when limit is */
	__u64 rate;           /* the node-wide setting it came from, per second */
};

/* flow_guard_state_map value (per CPU, one entry; not pinned: soft state). */
struct rv_flow_guard_state {
	__u64 window_start; /* jiffies64 */
	__u64 count;        /* entries created in the window */
};

/* frag_map / frag_rev_map key: the fragments of one datagram (IPv4). The
 * id is the IPv4 identification, zero-extended. */
struct rv_frag_key4 {
	__be32 src;
	__be32 dst;
	__be32 id;
	__u8 proto;
	__u8 pad[3];
};

/* frag_map6 / frag_rev_map6 key (IPv6 fragment header identification). */
struct rv_frag_key6 {
	__u8 src[16];
	__u8 dst[16];
	__be32 id;
	__u8 proto;
	__u8 pad[3];
};

/* frag_map(6) value: where the first fragment went, so the later ones
 * (which carry no ports) follow it. */
struct rv_frag_value {
	__u32 backend_id;
	__u32 backend_generation;
	__u32 service_id;
	__u32 pad;
};

/* frag_rev_map value (IPv4): the VIP a reply datagram's later fragments
 * get back as their source. */
struct rv_frag_rev_value4 {
	__be32 vip;
	__u32 service_id;
};

/* frag_rev_map6 value. */
struct rv_frag_rev_value6 {
	__u8 vip[16];
	__u32 service_id;
};

/* rl_config_map (one entry) and svc_rl_config_map (per service ID): a
 * token bucket per source for TCP SYNs. */
struct rv_rl_config {
	__u64 rate;  /* SYNs per second per source */
	__u64 burst; /* bucket depth in SYNs */
	__u32 enabled;
	__u32 pad;
};

/* rl_buckets_map key (IPv4 source); service_id is RV_RL_NODE_SERVICE for
 * the node-wide limit. */
struct rv_rl_key4 {
	__be32 src;
	__u32 service_id;
};

/* rl_buckets_map6 key. */
struct rv_rl_key6 {
	__u8 src[16];
	__u32 service_id;
};

/* rl_buckets_map(6) value. Tokens are kept in nano-tokens so a refill of
 * elapsed_ns * rate needs no division. */
struct rv_rl_bucket {
	__u64 nanotokens;
	__u64 last_ns;
};

/* iface_mac_map value (one entry): the attached interface, whose MAC is
 * the source of frames sent back out with XDP_TX (L2 DSR, ICMP replies). */
struct rv_iface {
	__u8 mac[6];
	__u16 pad;
	__u32 ifindex;
};

/* tunnel_config_map value (one entry): outer source addresses of L3 DSR
 * (the `tunnelSource` setting). */
struct rv_tunnel_config {
	__be32 src4;
	__u8 src6[16];
	__u32 flags;
};

/* nexthop_cache_map value (per CPU, by backend ID): where the last FIB
 * lookup for an L3 DSR backend's outer packet pointed, reused while the
 * tick (RV_NAT_CHECK_JIFFIES_SHIFT units, at most about a second) is the
 * same and the backend ID still names the same backend. Not pinned: soft state
 * of the running program. */
struct rv_nexthop {
	__u8 dmac[6];
	__u8 smac[6];
	__u32 ifindex;            /* egress interface; 0 = empty entry */
	__u32 mtu;                /* the route's MTU for the outer packet */
	__u32 backend_generation; /* the backend the entry was learnt for */
	__u32 tick;               /* when it was learnt */
};

/* rivora_meta value (one entry, index 0): what wrote the pinned maps. A
 * starting rivorad reads it before adopting anything, and refuses maps of
 * another ABI version or table size instead of misreading them. */
struct rv_meta {
	__u32 abi_version;       /* RV_ABI_VERSION of the writer; 0 = not yet written */
	__u32 maglev_table_size; /* length of maglev_table */
	__u32 xdp_mode;          /* enum rv_xdp_mode of the (pinned) XDP link */
	__u32 pad;
};

/* rv_meta.xdp_mode: recorded because a pinned XDP link keeps its mode and
 * the kernel does not report it through the link. */
enum rv_xdp_mode {
	RV_XDP_MODE_UNKNOWN = 0,
	RV_XDP_MODE_NATIVE = 1,
	RV_XDP_MODE_GENERIC = 2,
};

/* stats_map value (per CPU), indexed by service ID. */
struct rv_vip_stats {
	__u64 packets;     /* requests forwarded by xdp_ingress */
	__u64 bytes;
	__u64 new_flows;   /* backends chosen through Maglev (TCP SYNs, affinity misses) */
	__u64 drops;       /* packets to this VIP dropped, any reason */
	__u64 reply_packets; /* replies restored by tc_nat */
	__u64 reply_bytes;
};

/* backend_stats_map value (per CPU), indexed by backend ID: what
 * xdp_ingress sent to one backend, in every mode, counted where the packet
 * leaves for it (the same points as rv_vip_stats.packets). A backend listed
 * by several VIPs counts all of them together. The control plane zeroes
 * every CPU's entry when it gives the ID to a backend, so a reused ID never
 * starts with another backend's counts. */
struct rv_backend_stats {
	__u64 packets;      /* client->backend packets (frames) */
	__u64 bytes;        /* their frame sizes as received (before encapsulation) */
	__u64 new_flows;    /* affinity misses that chose this backend */
	__u64 last_jiffies; /* jiffies64 of this CPU's latest packet; 0 = none.
			     * The reader takes the largest over CPUs. */
};

/* drop_stats_map value (per CPU), indexed by enum rv_drop_reason. */
struct rv_drop_stats {
	__u64 packets;
};

/*
 * rivora-decap (bpf/decap.c): the backends' decapsulation program for L3
 * DSR. Its maps are its own, pinned per interface under the decap pin root
 * (default /sys/fs/bpf/rivora-decap/IF), never shared with the balancer's:
 * RV_ABI_VERSION does not cover them, RV_DECAP_ABI_VERSION does.
 */
enum rv_decap_consts {
	/* Bumped on any layout or meaning change of a decap map. */
	RV_DECAP_ABI_VERSION = 1,
	/* Local tunnel endpoint addresses per family (decap_addr4/6). */
	RV_DECAP_MAX_ADDRS = 256,
};

/* Indices of decap_stats: the tunnel kinds, named like the kernel's
 * devices that would otherwise terminate them. */
enum rv_decap_kind {
	/* IPv4 outer header, protocol 4 (IPv4 inner) or 41 (IPv6 inner). */
	RV_DECAP_IPIP = 0,
	/* IPv6 outer header, next header 41 (IPv6 inner) or 4 (IPv4 inner). */
	RV_DECAP_IP6TNL = 1,
	/* GRE (protocol 47) over IPv4. */
	RV_DECAP_GRE = 2,
	/* GRE (next header 47) over IPv6. */
	RV_DECAP_GRE6 = 3,
	RV_DECAP_KIND_COUNT = 4,
};

/* decap_addr4 key: a local IPv4 tunnel endpoint (value: __u32, unused). */
struct rv_decap_addr4 {
	__be32 addr;
};

/* decap_addr6 key: a local IPv6 tunnel endpoint. */
struct rv_decap_addr6 {
	__u8 addr[16];
};

/* decap_stats value (per CPU), indexed by enum rv_decap_kind. */
struct rv_decap_stats {
	__u64 decapsulated; /* outer header(s) removed, inner packet passed up */
	__u64 passed;       /* not addressed to a listed endpoint, or a GRE
			     * payload other than IPv4/IPv6: passed untouched */
	__u64 malformed;    /* addressed to us but truncated, bad outer IPv4
			     * checksum or lengths, unknown GRE flags or
			     * version, inner header not the announced IP
			     * version: passed untouched (the kernel drops it) */
	__u64 fragments;    /* outer packet is a fragment: XDP cannot
			     * reassemble, passed untouched */
};

/* decap_meta value (one entry): written by the attach command. */
struct rv_decap_meta {
	__u32 abi_version; /* RV_DECAP_ABI_VERSION of the writer */
	__u32 ifindex;     /* interface the program is attached to */
	__u32 xdp_mode;    /* enum rv_xdp_mode */
	__u32 pad;
};

/* snat_config_map value (one entry): this node's source for translated
 * flows and how long an idle mapping keeps its port. Ports are in host
 * order; idle times are in RV_NAT_CHECK_JIFFIES_SHIFT ticks (the control
 * plane converts from seconds with the kernel's HZ). */
struct rv_snat_config {
	__be32 addr4;       /* valid with RV_SNAT_F_ADDR4 */
	__u8 addr6[16];     /* valid with RV_SNAT_F_ADDR6 */
	__u16 port_min;
	__u16 port_max;     /* inclusive, >= port_min */
	__u32 flags;        /* RV_SNAT_F_* */
	__u32 tcp_idle;     /* an open TCP mapping's port is reusable after this */
	__u32 closed_idle;  /* after a FIN or RST */
	__u32 udp_idle;
};

enum rv_snat_config_flags {
	RV_SNAT_F_ADDR4 = 1 << 0,
	RV_SNAT_F_ADDR6 = 1 << 1,
};

/* snat_flow_map(6) value, keyed by the flow as the client sent it
 * (rv_flow4/rv_flow6): the node port the flow's packets leave from. Only
 * valid for the backend (and its generation) it was made for. */
struct rv_snat_flow {
	__be16 node_port;
	__u16 pad;
	__u32 backend_id;
	__u32 backend_generation;
	/* The tick in which the flow's snat_rev entry was last seen owned by
	 * it (checked once per tick, as rv_affinity.nat_checked). */
	__u32 checked;
};

/* snat_rev_map key (IPv4): a backend's reply as it arrives (source =
 * backend endpoint, destination port = node port). A node port is unique
 * per backend endpoint and protocol, not per node. */
struct rv_snat_rev_key4 {
	__be32 backend;
	__be16 backend_port;
	__be16 node_port;
	__u8 proto;
	__u8 pad[3];
};

struct rv_snat_rev_key6 {
	__u8 backend[16];
	__be16 backend_port;
	__be16 node_port;
	__u8 proto;
	__u8 pad[3];
};

/* snat_rev_map value (IPv4): who the reply is for, and as whom it comes. */
struct rv_snat_rev4 {
	__be32 client;
	__be32 vip;
	__be16 client_port;
	__be16 vip_port;
	__u32 service_id;
	__u32 last_seen;    /* tick of the last packet either way */
	__u32 flags;        /* RV_SNAT_REV_F_* */
};

struct rv_snat_rev6 {
	__u8 client[16];
	__u8 vip[16];
	__be16 client_port;
	__be16 vip_port;
	__u32 service_id;
	__u32 last_seen;
	__u32 flags;
};

enum rv_snat_rev_flags {
	/* A FIN or RST was seen: the port is reusable sooner (closed_idle). */
	RV_SNAT_REV_F_CLOSING = 1 << 0,
};

/* Indices of snat_stats_map (per CPU u64 packets). Append only. */
enum rv_snat_counter {
	/* A flow got a node port (a new mapping). */
	RV_SNAT_ALLOCATED = 0,
	/* ... by taking over the port of an idle mapping. */
	RV_SNAT_REUSED_IDLE = 1,
	/* Packets sent to a backend with a translated source. */
	RV_SNAT_FORWARDED = 2,
	/* Replies translated back to the client. */
	RV_SNAT_REPLIED = 3,
	/* Packets to the node address in the port range without a mapping:
	 * handed to the kernel untouched. */
	RV_SNAT_REPLY_UNMATCHED = 4,
	/* Translated packets (either way) handed to the kernel to route (no
	 * FIB answer yet, TTL expiring, over the MTU, tagged). */
	RV_SNAT_TO_KERNEL = 5,
	RV_SNAT_COUNTER_COUNT = 6,
};

/* svc_affinity_timeout_map value, by service ID: sessionAffinity
 * ClientIP's timeout. `ticks` (RV_NAT_CHECK_JIFFIES_SHIFT units) is what
 * the program compares; `seconds` is what the control plane asked for
 * (read back on adoption). ticks 0: no timeout (the hash alone). */
struct rv_affinity_timeout {
	__u32 ticks;
	__u32 seconds;
};

/* client_affinity_map key (IPv4): a client of a VIP with sessionAffinity
 * ClientIP and a timeout (svc_affinity_timeout_map). */
struct rv_client_key4 {
	__u32 service_id;
	__be32 addr;
};

struct rv_client_key6 {
	__u32 service_id;
	__u8 addr[16];
};

/* client_affinity_map(6) value: the backend the client's last new flow
 * went to, and when (RV_NAT_CHECK_JIFFIES_SHIFT ticks). A new flow within
 * the VIP's timeout goes there again while it is healthy, whatever Maglev
 * says now (kube-proxy's sessionAffinityConfig.clientIP.timeoutSeconds). */
struct rv_client_affinity {
	__u32 backend_id;
	__u32 backend_generation;
	__u32 last_seen;
	__u32 pad;
};

/*
 * The classifier (bpf/classify.h): Meridio-2's resource model. A
 * classifier VIP is a whole address whose packets ordered rules sort into
 * distribution groups; a group's per-family Maglev table names stable
 * slots, a slot names a target, and the packet goes to the target's
 * address as next hop, its destination (the VIP) untouched.
 */
enum rv_cls_consts {
	/* Classifier VIPs per family (cls_vip_map, cls_vip_map6). */
	RV_CLS_MAX_VIPS = 4096,
	/* Per-VIP counters (cls_vip_stats_map): both families' VIPs. */
	RV_CLS_MAX_VIP_IDS = 8192,
	/* Rule IDs (cls_rule_map). A rule is never rewritten in place: a
	 * changed rule gets a new ID and the VIPs switch to it, so a state
	 * may hold half of these. */
	RV_CLS_MAX_RULES = 8192,
	/* Rules of one VIP, evaluated in order (bpf_loop). */
	RV_CLS_MAX_RULES_PER_VIP = 32,
	/* Port ranges per side and byte matches of one rule (Meridio-2's
	 * API limits). */
	RV_CLS_MAX_PORT_RANGES = 20,
	RV_CLS_MAX_BYTE_MATCHES = 10,
	/* Group IDs (cls_group_map, cls_group_stats_map). */
	RV_CLS_MAX_GROUPS = 2048,
	/* (group, slot) targets of all groups (cls_target_map). */
	RV_CLS_MAX_TARGETS = 65536,
	/* Entries of cls_table: every group's per-family tables, plus room
	 * for a table being rebuilt next to the one in use. A group of N
	 * slots takes the largest prime <= 100 N per family with targets:
	 * 10,193 for Meridio-2's default N = 102. */
	RV_CLS_TABLE_SLOTS = 1048576,
	/* Source prefixes of all rules, per family (cls_src_map(6)). */
	RV_CLS_MAX_SRC_PREFIXES = 16384,
	/* Slots of cls_event_map (enum rv_cls_event, room to grow). */
	RV_CLS_EVENT_SLOTS = 16,
	/* Longest fixed L4 header a byte match reads (TCP's 20 bytes). */
	RV_CLS_HDR_BYTES = 20,
};

/* cls_ctl_map value (one entry): which families have classifier VIPs.
 * All zero: xdp_ingress never looks at the classifier. */
struct rv_cls_ctl {
	__u32 flags; /* RV_CLS_CTL_* */
	__u32 pad;
};

enum rv_cls_ctl_flags {
	RV_CLS_CTL_V4 = 1 << 0,
	RV_CLS_CTL_V6 = 1 << 1,
};

/* cls_vip_map key: an IPv4 classifier VIP (the whole address). */
struct rv_cls_vip_key4 {
	__be32 addr;
};

/* cls_vip_map6 key. */
struct rv_cls_vip_key6 {
	__u8 addr[16];
};

/* cls_vip_map(6) value: the VIP's rules in evaluation order (priority
 * high to low, then name), replaced whole by one map update (a hash map
 * update is atomic for readers). */
struct rv_cls_vip {
	__u32 stats_id; /* index of cls_vip_stats_map */
	__u32 count;    /* rules used, <= RV_CLS_MAX_RULES_PER_VIP */
	__u32 rules[RV_CLS_MAX_RULES_PER_VIP];
};

/* rv_cls_rule.protos bits. */
enum rv_cls_proto_bits {
	RV_CLS_PROTO_TCP = 1 << 0,
	RV_CLS_PROTO_UDP = 1 << 1,
	RV_CLS_PROTO_SCTP = 1 << 2,
};

/* rv_cls_rule.flags bits. */
enum rv_cls_rule_flags {
	/* The entry is written and may be used. */
	RV_CLS_RULE_F_ACTIVE = 1 << 0,
	/* Only sources in the rule's prefixes of cls_src_map(6) match. */
	RV_CLS_RULE_F_SOURCES = 1 << 1,
};

/* An inclusive port range, host byte order. */
struct rv_cls_ports {
	__u16 first;
	__u16 last;
};

/* One byte match: the `len` (1, 2, 4) bytes at `offset` of the fixed L4
 * header, read big-endian into a host-order number, ANDed with `mask`,
 * equal `value`. Only matches of the packet's protocol are evaluated. */
struct rv_cls_byte_match {
	__u32 mask;
	__u32 value;
	__u8 proto; /* IPPROTO_TCP, _UDP or _SCTP */
	__u8 offset;
	__u8 len;
	__u8 pad;
};

/* cls_rule_map value, by rule ID. Written once per ID, before any VIP
 * names the ID, and never changed while one does. */
struct rv_cls_rule {
	__u32 group_id;
	__u32 flags;  /* RV_CLS_RULE_F_* */
	__u8 protos;  /* RV_CLS_PROTO_* */
	__u8 n_sports; /* 0: any source port */
	__u8 n_dports; /* 0: any destination port */
	__u8 n_bytes;
	__u32 generation; /* bumped each time the ID is given to a rule */
	struct rv_cls_ports sports[RV_CLS_MAX_PORT_RANGES];
	struct rv_cls_ports dports[RV_CLS_MAX_PORT_RANGES];
	struct rv_cls_byte_match bytes[RV_CLS_MAX_BYTE_MATCHES];
};

/* cls_src_map key (LPM trie): one source prefix of a rule. The rule ID
 * matches exactly, the address by prefix (prefixlen counts the ID's 32
 * bits and the address prefix). Value: the rule ID. */
struct rv_cls_src_key4 {
	__u32 prefixlen;
	__u32 rule_id;
	__u8 addr[4];
};

/* cls_src_map6 key. */
struct rv_cls_src_key6 {
	__u32 prefixlen;
	__u32 rule_id;
	__u8 addr[16];
};

/* rv_cls_group.flags bits. */
enum rv_cls_group_flags {
	/* SCTP hashes on ports and protocol only, so the paths of a
	 * multihomed association reach one target (nfqlb's default). */
	RV_CLS_GROUP_F_SCTP_PORTS = 1 << 0,
};

/* cls_group_map value, by group ID: where the group's per-family tables
 * are in cls_table. Replaced whole by one map update when a table is
 * rebuilt elsewhere, so a lookup sees the old tables or the new ones. */
struct rv_cls_group {
	__u32 offset4; /* first entry of the IPv4 table */
	__u32 offset6; /* first entry of the IPv6 table */
	__u32 size;    /* table length (both families), a prime */
	__u16 count4;  /* slots in the IPv4 table; 0: no IPv4 target */
	__u16 count6;
	__u32 flags;   /* RV_CLS_GROUP_F_* */
	__u32 generation;
};

/* cls_target_map key: slot `slot` of group `group_id`. */
struct rv_cls_target_key {
	__u32 group_id;
	__u32 slot;
};

/* rv_cls_target.flags bits. */
enum rv_cls_target_flags {
	RV_CLS_TARGET_F_V4 = 1 << 0,
	RV_CLS_TARGET_F_V6 = 1 << 1,
};

/* cls_target_map value: the next hop(s) of a slot. */
struct rv_cls_target {
	__be32 addr4;
	__u8 addr6[16];
	__u32 flags; /* RV_CLS_TARGET_F_* */
};

/* cls_frag_map(6) value, keyed by rv_frag_key4/6: where a datagram's
 * first fragment went, so its later fragments (no ports) follow it. */
struct rv_cls_frag {
	__u32 group_id;
	__u32 slot;
	__u32 rule_id;
	__u32 stats_id;
};

/* cls_rule_stats_map / cls_group_stats_map value (per CPU), by rule or
 * group ID, and cls_vip_stats_map by the VIP's stats_id. */
struct rv_cls_stats {
	__u64 packets;   /* forwarded to a target */
	__u64 bytes;     /* their frame sizes as received */
	__u64 no_target; /* dropped: the group had no target of the family */
	__u64 other;     /* VIP: dropped matching no rule; rule, group: other drops */
};

/* Indices of cls_event_map (per CPU u64 packets). Append only. */
enum rv_cls_event {
	/* A packet to a classifier VIP matched none of its rules: dropped. */
	RV_CLS_NO_RULE = 0,
	/* Its rule's group has no target of the packet's family: dropped at
	 * the rule's priority (never falls through to a lower rule). */
	RV_CLS_NO_TARGET = 1,
	/* The FIB knows the target's route but not its neighbour yet:
	 * dropped (rivorad keeps the targets' neighbour entries resolved). */
	RV_CLS_NO_NEIGH = 2,
	/* The FIB has no usable route to the target (unreachable, blackhole,
	 * forwarding disabled on the interface...): dropped. */
	RV_CLS_NO_ROUTE = 3,
	/* Not a drop: a packet over the target route's MTU (IPv4 with DF,
	 * IPv6) was answered with fragmentation needed / packet too big,
	 * sourced from the VIP. */
	RV_CLS_TOO_BIG_ICMP = 4,
	/* An IPv4 packet without DF over the target route's MTU: XDP cannot
	 * fragment it, dropped. */
	RV_CLS_TOO_BIG_DROP = 5,
	/* Not a drop: TTL or hop limit would expire: handed to the kernel,
	 * which answers time exceeded as a router does. */
	RV_CLS_TTL_TO_KERNEL = 6,
	/* A later fragment whose first fragment was not seen: dropped. */
	RV_CLS_FRAG_UNMATCHED = 7,
	/* Truncated or unparsable headers to a classifier VIP: dropped. */
	RV_CLS_MALFORMED = 8,
	/* Not a drop: an ICMP echo or other informational ICMP to a VIP was
	 * sent to a target (hashed on its identifier). */
	RV_CLS_ECHO = 9,
	/* Not a drop: an ICMP error about a flow was sent to the flow's
	 * target (classified by the quoted packet). */
	RV_CLS_ICMP_ERROR = 10,
	/* The VIP vanished between the gate and the stage (a removal). */
	RV_CLS_NO_VIP = 11,
	RV_CLS_EVENT_COUNT = 12,
};

#endif /* RIVORA_ABI_H */
