/* SPDX-License-Identifier: Apache-2.0 */
/*
 * abi_btf.c: never loaded. Compiled only so that clang emits BTF for every
 * struct of rivora_abi.h; crates/abi reads that BTF back and checks that its
 * Rust mirror has the same sizes and field offsets.
 */
#include "rivora_abi.h"

struct rv_abi_all {
	struct rv_vip_key4 vip_key4;
	struct rv_vip_key6 vip_key6;
	struct rv_vip_value vip_value;
	struct rv_vip_slot vip_slot;
	struct rv_vip_index_ctl vip_index_ctl;
	struct rv_service service;
	struct rv_backend4 backend4;
	struct rv_backend6 backend6;
	struct rv_backend_health backend_health;
	struct rv_flow4 flow4;
	struct rv_flow6 flow6;
	struct rv_affinity affinity;
	struct rv_nexthop nexthop;
	struct rv_nat_key4 nat_key4;
	struct rv_nat_key6 nat_key6;
	struct rv_nat_value4 nat_value4;
	struct rv_nat_value6 nat_value6;
	struct rv_nat_ep_key4 nat_ep_key4;
	struct rv_nat_ep_key6 nat_ep_key6;
	struct rv_nat_ep_value4 nat_ep_value4;
	struct rv_nat_ep_value6 nat_ep_value6;
	struct rv_flow_guard_config flow_guard_config;
	struct rv_flow_filter_ctl flow_filter_ctl;
	struct rv_flow_guard_state flow_guard_state;
	struct rv_vip_stats vip_stats;
	struct rv_backend_stats backend_stats;
	struct rv_drop_stats drop_stats;
	struct rv_meta meta;
	struct rv_vip_range_key4 vip_range_key4;
	struct rv_vip_range_key6 vip_range_key6;
	struct rv_src_range_key4 src_range_key4;
	struct rv_src_range_key6 src_range_key6;
	struct rv_frag_key4 frag_key4;
	struct rv_cls_ctl cls_ctl;
	struct rv_cls_vip_key4 cls_vip_key4;
	struct rv_cls_vip_key6 cls_vip_key6;
	struct rv_cls_vip cls_vip;
	struct rv_cls_ports cls_ports;
	struct rv_cls_byte_match cls_byte_match;
	struct rv_cls_rule cls_rule;
	struct rv_cls_src_key4 cls_src_key4;
	struct rv_cls_src_key6 cls_src_key6;
	struct rv_cls_group cls_group;
	struct rv_cls_target_key cls_target_key;
	struct rv_cls_target cls_target;
	struct rv_cls_frag cls_frag;
	struct rv_cls_stats cls_stats;
	struct rv_frag_key6 frag_key6;
	struct rv_frag_value frag_value;
	struct rv_frag_rev_value4 frag_rev_value4;
	struct rv_frag_rev_value6 frag_rev_value6;
	struct rv_rl_config rl_config;
	struct rv_rl_key4 rl_key4;
	struct rv_rl_key6 rl_key6;
	struct rv_rl_bucket rl_bucket;
	struct rv_iface iface;
	struct rv_tunnel_config tunnel_config;
	struct rv_snat_config snat_config;
	struct rv_affinity_timeout affinity_timeout;
	struct rv_client_key4 client_key4;
	struct rv_client_key6 client_key6;
	struct rv_client_affinity client_affinity;
	struct rv_snat_flow snat_flow;
	struct rv_snat_rev_key4 snat_rev_key4;
	struct rv_snat_rev_key6 snat_rev_key6;
	struct rv_snat_rev4 snat_rev4;
	struct rv_snat_rev6 snat_rev6;
	enum rv_snat_config_flags snat_config_flags;
	enum rv_snat_rev_flags snat_rev_flags;
	enum rv_snat_counter snat_counter;
	struct rv_decap_addr4 decap_addr4;
	struct rv_decap_addr6 decap_addr6;
	struct rv_decap_stats decap_stats;
	struct rv_decap_meta decap_meta;
	enum rv_decap_consts decap_consts;
	enum rv_decap_kind decap_kind;
	enum rv_xdp_mode xdp_mode;
	enum rv_backend_flags backend_flags;
	enum rv_abi_consts consts;
	enum rv_mode mode;
	enum rv_service_flags service_flags;
	enum rv_backend_state backend_state;
	enum rv_drop_reason drop_reason;
	enum rv_vip_slot_flags vip_slot_flags;
	enum rv_vip_index_flags vip_index_flags;
	enum rv_nat_ep_flags nat_ep_flags;
	enum rv_cls_consts cls_consts;
	enum rv_cls_ctl_flags cls_ctl_flags;
	enum rv_cls_proto_bits cls_proto_bits;
	enum rv_cls_rule_flags cls_rule_flags;
	enum rv_cls_group_flags cls_group_flags;
	enum rv_cls_target_flags cls_target_flags;
	enum rv_cls_event cls_event;
};

struct rv_abi_all rv_abi_all __attribute__((used));
