/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flow_filter.h: which 5-tuples may have an affinity entry, so that the
 * packets that are almost always new (a SYN, a UDP datagram of a flow not
 * seen yet) skip the affinity lookup. With the table full of established
 * flows that lookup walks a hash bucket and chain that no longer fit the
 * CPU caches: two cache misses, the biggest cost of a new flow. The filter
 * is one bit per 5-tuple hash (hash.h rv_flow_filter_hash) in an array the
 * verifier inlines, 64 bits per flow-table entry, small enough to stay in
 * the L2 cache.
 *
 * A set bit means "maybe": the lookup is made, as before. A clear bit in an
 * exact filter means "surely no entry", which is what keeps every guarantee
 * that needs the lookup (a SYN re-points an entry that a reused 5-tuple
 * left behind, balance.h; a UDP flow follows its entry): a false positive
 * costs one lookup, a false negative cannot happen.
 *
 * Why no false negative: the datapath sets a flow's bit in both halves
 * right after it creates the entry (rv_affinity_record), and it is the only
 * writer of affinity entries. Bits are never cleared in the active half.
 * Entries leave (LRU eviction, idle deletion, drains) without telling the
 * filter, so bits of gone flows pile up: the control plane rebuilds the
 * idle half (clear it, then set the bit of every entry the tables hold,
 * with atomic ORs, while the datapath keeps setting bits in both halves)
 * and then makes it the active one (flow_filter.rs). An entry made during
 * the rebuild has its bit set by the datapath; one made before is found by
 * the scan, which starts after the clearing. Until a rebuild has run over
 * tables the datapath did not fill itself (pins adopted from an ABI before
 * version 10), the control word says "not exact" and every packet is
 * looked up.
 */
#ifndef RIVORA_FLOW_FILTER_H
#define RIVORA_FLOW_FILTER_H

#include "maps.h"

/* The word of flow_filter_map that holds hash `h` in half `half`. */
static __always_inline __u32 rv_flow_filter_word(const struct rv_flow_filter_ctl *c, __u32 half, __u32 h)
{
	return half * c->words + ((h >> 6) & (c->words - 1));
}

/* Whether the flow of 5-tuple hash `h` may have an affinity entry: 0 only
 * when the active half is exact and the flow's bit is clear. */
static __always_inline int rv_flow_maybe_recorded(__u32 h)
{
	__u32 zero = 0;
	const struct rv_flow_filter_ctl *c = bpf_map_lookup_elem(&flow_filter_ctl_map, &zero);

	if (!c || !c->exact || !c->words)
		return 1;
	__u32 idx = rv_flow_filter_word(c, c->active & 1, h);
	const __u64 *w = bpf_map_lookup_elem(&flow_filter_map, &idx);

	return !w || ((*w >> (h & 63)) & 1);
}

/* Records that the flow of 5-tuple hash `h` has an entry now: its bit in
 * both halves (the idle one may be under rebuild). An atomic OR, and only
 * when the bit is clear, so a flow whose bit is set dirties no cache line
 * shared with the other CPUs. */
static __always_inline void rv_flow_filter_add(__u32 h)
{
	__u32 zero = 0;
	const struct rv_flow_filter_ctl *c = bpf_map_lookup_elem(&flow_filter_ctl_map, &zero);

	if (!c || !c->words)
		return;
	__u64 bit = 1ULL << (h & 63);
#pragma unroll
	for (__u32 half = 0; half < 2; half++) {
		__u32 idx = rv_flow_filter_word(c, half, h);
		__u64 *w = bpf_map_lookup_elem(&flow_filter_map, &idx);

		if (w && !(*w & bit))
			__sync_fetch_and_or(w, bit);
	}
}

#endif /* RIVORA_FLOW_FILTER_H */
