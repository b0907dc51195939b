/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cls_maps.h: the classifier's maps (layouts in rivora_abi.h, logic in
 * classify.h). Pinned by name next to the others; only xdp_ingress uses
 * them (the classifier forwards without NAT: nothing on the way back).
 */
#ifndef RIVORA_CLS_MAPS_H
#define RIVORA_CLS_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "rivora_abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_cls_ctl);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_ctl_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RV_CLS_MAX_VIPS);
	__type(key, struct rv_cls_vip_key4);
	__type(value, struct rv_cls_vip);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_vip_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RV_CLS_MAX_VIPS);
	__type(key, struct rv_cls_vip_key6);
	__type(value, struct rv_cls_vip);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_vip_map6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RV_CLS_MAX_RULES);
	__type(key, __u32);
	__type(value, struct rv_cls_rule);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_rule_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, RV_CLS_MAX_SRC_PREFIXES);
	__type(key, struct rv_cls_src_key4);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_src_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, RV_CLS_MAX_SRC_PREFIXES);
	__type(key, struct rv_cls_src_key6);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_src_map6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RV_CLS_MAX_GROUPS);
	__type(key, __u32);
	__type(value, struct rv_cls_group);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_group_map SEC(".maps");

/* Memory-mappable like maglev_table: a group's table is written with
 * plain stores. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RV_CLS_TABLE_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RV_CLS_MAX_TARGETS);
	__type(key, struct rv_cls_target_key);
	__type(value, struct rv_cls_target);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_target_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FRAGS);
	__type(key, struct rv_frag_key4);
	__type(value, struct rv_cls_frag);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_frag_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RV_MAX_FRAGS);
	__type(key, struct rv_frag_key6);
	__type(value, struct rv_cls_frag);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_frag_map6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_CLS_MAX_VIP_IDS);
	__type(key, __u32);
	__type(value, struct rv_cls_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_vip_stats_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_CLS_MAX_RULES);
	__type(key, __u32);
	__type(value, struct rv_cls_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_rule_stats_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_CLS_MAX_GROUPS);
	__type(key, __u32);
	__type(value, struct rv_cls_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_group_stats_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_CLS_EVENT_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cls_event_map SEC(".maps");

#endif /* RIVORA_CLS_MAPS_H */
