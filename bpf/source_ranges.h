/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_ranges.h: loadBalancerSourceRanges. A VIP whose service entry has
 * RV_SVC_F_SOURCE_RANGES may be reached only from sources inside one of its
 * prefixes in src_range_map(6); every other packet to it is dropped and
 * counted (RV_DROP_SOURCE_RANGE, per VIP too). Checked right after the VIP
 * match, before the SYN limit, so a refused source spends no bucket, no
 * affinity lookup and no state.
 *
 * One trie per family for all VIPs: the key's tag (the service ID, and the
 * bank bit of RV_SVC_F_SOURCE_BANK) matches exactly, the source by longest
 * prefix. Two banks let the control plane write a VIP's new list beside
 * the old one and switch with the service entry's single update.
 *
 * Not checked: ICMP errors about a flow (they come from routers on the
 * flow's path, not from the client, and refer to a flow that passed the
 * check) and later fragments (they follow the first fragment's decision:
 * no frag_map entry exists for a refused one).
 */
#ifndef RIVORA_SOURCE_RANGES_H
#define RIVORA_SOURCE_RANGES_H

#include "maps.h"

/* Whether `src` may reach service `service_id`, whose service flags are
 * `svc_flags` (RV_SVC_F_SOURCE_RANGES set). */
static __always_inline int rv_source_allowed(const __u32 *src, __u32 service_id, __u8 svc_flags, const int v6)
{
	__u32 tag = service_id | ((svc_flags & RV_SVC_F_SOURCE_BANK) ? RV_SRC_RANGE_BANK : 0);

	if (v6) {
		struct rv_src_range_key6 k = { .prefixlen = 32 + 128, .tag = tag };
		__builtin_memcpy(k.addr, src, 16);
		return bpf_map_lookup_elem(&src_range_map6, &k) != 0;
	}
	struct rv_src_range_key4 k = { .prefixlen = 32 + 32, .tag = tag };
	__builtin_memcpy(k.addr, src, 4);
	return bpf_map_lookup_elem(&src_range_map, &k) != 0;
}

#endif /* RIVORA_SOURCE_RANGES_H */
