/* SPDX-License-Identifier: Apache-2.0 */
/*
 * maps.h: every map of the datapath, defined once and included by both
 * programs. All are pinned by name (LIBBPF_PIN_BY_NAME) in rivorad's pin
 * directory, which is how xdp_ingress and tc_nat share them and how they
 * outlive rivorad. Names and capacities follow the architecture spec.
 */
#ifndef RIVORA_MAPS_H
#define RIVORA_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "rivora_abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RV_MAX_VIPS);
	__type(key, struct rv_vip_key4);
	__type(value, struct rv_vip_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} vip_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RV_MAX_VIPS);
	__type(key, struct rv_vip_key6);
	__type(value, struct rv_vip_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} vip_map6 SEC(".maps");

/* A copy of the exact VIPs of vip_map/vip_map6 that xdp_ingress reads
 * instead of them: array lookups are inlined by the verifier into pointer
 * arithmetic, a hash map lookup is a helper call, which under this
 * kernel's retpolines and return-stack mitigation cost about a third of an
 * established NAT packet. Two halves: the control plane rebuilds the one
 * not in use and switches with one update of vip_index_ctl_map. vip_map
 * and vip_map6 stay the source of truth. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * RV_VIP_INDEX_SLOTS);
	__type(key, __u32);
	__type(value, struct rv_vip_slot);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} vip_index_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_vip_index_ctl);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} vip_index_ctl_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RV_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct rv_service);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} service_config_map SEC(".maps");

/* Memory-mappable so the control plane writes a whole slice with plain
 * stores instead of one syscall per slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RV_MAGLEV_TABLE_DEFAULT);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} maglev_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RV_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct rv_backend4);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backend_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RV_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct rv_backend6);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backend_map6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RV_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct rv_backend_health);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backend_health_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FLOWS);
	__type(key, struct rv_flow4);
	__type(value, struct rv_affinity);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} connection_affinity_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FLOWS);
	__type(key, struct rv_flow6);
	__type(value, struct rv_affinity);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} connection_affinity_map6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FLOWS);
	__type(key, struct rv_nat_key4);
	__type(value, struct rv_nat_value4);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat_reverse_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FLOWS);
	__type(key, struct rv_nat_key6);
	__type(value, struct rv_nat_value6);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat_reverse_map6 SEC(".maps");

/* NAT backend endpoints (struct rv_nat_ep_key4/6): which replies need no
 * per-flow state (reverse.h). Written by the control plane only. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RV_MAX_NAT_ENDPOINTS);
	__type(key, struct rv_nat_ep_key4);
	__type(value, struct rv_nat_ep_value4);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat_endpoint_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RV_MAX_NAT_ENDPOINTS);
	__type(key, struct rv_nat_ep_key6);
	__type(value, struct rv_nat_ep_value6);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat_endpoint_map6 SEC(".maps");

/* Every programmed backend address, as one bit of a 65,536-bit filter
 * (hash.h rv_nat_backend_bit): tc_nat's first test, so egress traffic that
 * is no backend's costs one inlined array lookup (reverse.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RV_NAT_FILTER_BITS / 64);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat_backend_filter_map SEC(".maps");

/* Which flows may have an affinity entry: one bit per 5-tuple hash, in two
 * halves (flow_filter.h). Sized at load from the flow-table size (the
 * default below is replaced); mmapped by the control plane, which rebuilds
 * the idle half while the datapath keeps recording into both. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * RV_MAX_FLOWS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} flow_filter_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_flow_filter_ctl);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} flow_filter_ctl_map SEC(".maps");

/* The new-flow guard's setting (guard.h), written by the control plane. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_flow_guard_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} flow_guard_config_map SEC(".maps");

/* The guard's per-CPU window. Soft state of the running program: not
 * pinned, a new program starts a fresh window. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_flow_guard_state);
} flow_guard_state_map SEC(".maps");

/* UDP flows seen once, per CPU, by a tag of their 5-tuple hash (balance.h
 * rv_udp_seen_before). Soft state: not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_UDP_SEEN_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} udp_seen_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct rv_vip_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stats_map SEC(".maps");

/* Per-backend counters (bpf/backend_stats.h), by backend ID. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct rv_backend_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backend_stats_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_DROP_REASON_SLOTS);
	__type(key, __u32);
	__type(value, struct rv_drop_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} drop_stats_map SEC(".maps");

/* Drops per VIP and reason (per CPU): index service_id *
 * RV_DROP_REASON_SLOTS + reason, so an operator sees why one VIP drops
 * (a source_range drop of one VIP among others' rate_limited ones). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_MAX_VIPS * RV_DROP_REASON_SLOTS);
	__type(key, __u32);
	__type(value, struct rv_drop_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} vip_drop_stats_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, RV_MAX_RANGE_PREFIXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rv_vip_range_key4);
	__type(value, struct rv_vip_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} vip_range_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, RV_MAX_RANGE_PREFIXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rv_vip_range_key6);
	__type(value, struct rv_vip_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} vip_range_map6 SEC(".maps");

/* The allowed source prefixes of VIPs with source ranges
 * (source_ranges.h), written by the control plane only. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, RV_MAX_SRC_RANGES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rv_src_range_key4);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} src_range_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, RV_MAX_SRC_RANGES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rv_src_range_key6);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} src_range_map6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FRAGS);
	__type(key, struct rv_frag_key4);
	__type(value, struct rv_frag_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} frag_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FRAGS);
	__type(key, struct rv_frag_key6);
	__type(value, struct rv_frag_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} frag_map6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FRAGS);
	__type(key, struct rv_frag_key4);
	__type(value, struct rv_frag_rev_value4);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} frag_rev_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FRAGS);
	__type(key, struct rv_frag_key6);
	__type(value, struct rv_frag_rev_value6);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} frag_rev_map6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_rl_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rl_config_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RV_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct rv_rl_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} svc_rl_config_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_RL_BUCKETS);
	__type(key, struct rv_rl_key4);
	__type(value, struct rv_rl_bucket);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rl_buckets_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_RL_BUCKETS);
	__type(key, struct rv_rl_key6);
	__type(value, struct rv_rl_bucket);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rl_buckets_map6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_iface);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} iface_mac_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_tunnel_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tunnel_config_map SEC(".maps");

/* Source translation of flows to backends on other nodes (snat.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_snat_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} snat_config_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FLOWS);
	__type(key, struct rv_flow4);
	__type(value, struct rv_snat_flow);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} snat_flow_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FLOWS);
	__type(key, struct rv_flow6);
	__type(value, struct rv_snat_flow);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} snat_flow_map6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FLOWS);
	__type(key, struct rv_snat_rev_key4);
	__type(value, struct rv_snat_rev4);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} snat_rev_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FLOWS);
	__type(key, struct rv_snat_rev_key6);
	__type(value, struct rv_snat_rev6);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} snat_rev_map6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_SNAT_COUNTER_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} snat_stats_map SEC(".maps");

/* The backend each recent SYN went to, for its handshake's ACK
 * (balance.h): one u64 per slot, (tag << 32) | (tick16 << 16) | backend.
 * Shared by the CPUs (a SYN and its ACK may be received on different
 * ones); overwritten, never evicting anything. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RV_SYN_HINT_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} syn_hint_map SEC(".maps");

/* sessionAffinity ClientIP with a timeout: per service, the timeout in
 * ticks (0: none, the client address's Maglev hash alone decides), and the
 * clients' recent choices (balance.h rv_client_sticky). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RV_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct rv_affinity_timeout);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} svc_affinity_timeout_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_CLIENTS);
	__type(key, struct rv_client_key4);
	__type(value, struct rv_client_affinity);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} client_affinity_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_CLIENTS);
	__type(key, struct rv_client_key6);
	__type(value, struct rv_client_affinity);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} client_affinity_map6 SEC(".maps");

/* Not read by the programs: the control plane's record of who wrote the
 * pinned maps (ABI version, table size, XDP mode). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_meta);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rivora_meta SEC(".maps");

#endif /* RIVORA_MAPS_H */
