/* SPDX-License-Identifier: Apache-2.0 */
/*
 * guard.h: the new-flow guard. Every entry a flow without state creates
 * (its affinity entry, a per-flow reverse NAT entry, a SYN bucket for a new
 * source) goes into an LRU table that evicts the least recently used entry
 * when full, and that may be an established flow's. Under a flood of
 * unproven flows (spoofed ACKs or UDP, SYNs to a shared backend endpoint)
 * the guard caps how many such entries each CPU creates per window: beyond
 * the cap the packet is forwarded by Maglev alone (its backend is the one an
 * entry would have named while the backend set stays as it is) and counted
 * as RV_EVENT_FLOW_GUARDED, and nothing established is evicted for it.
 *
 * Per CPU, not node-wide: a shared counter would put one contended cache
 * line on the new-flow path of every CPU. The control plane divides the
 * node-wide setting by the number of CPUs (flow_guard_config_map.limit), so
 * the guard acts at that node-wide rate when the flood is spread over the
 * CPUs, and earlier on a CPU that receives more than its share.
 *
 * Both lookups are array lookups (inlined by the verifier) and the clock is
 * jiffies (an inlined load): a few instructions, and only on packets that
 * would insert anyway.
 */
#ifndef RIVORA_GUARD_H
#define RIVORA_GUARD_H

#include "maps.h"

/* Whether a flow without state may create an entry now; counts one entry
 * against this CPU's window when it may, and the refusal when not.
 *
 * A global (non-inlined) function, verified once on its own rather than on
 * every path of xdp_ingress that reaches it. */
__attribute__((noinline)) int rv_guard_admit(void)
{
	__u32 zero = 0;
	const struct rv_flow_guard_config *cfg = bpf_map_lookup_elem(&flow_guard_config_map, &zero);
	struct rv_flow_guard_state *st;
	__u64 now;

	if (!cfg || !cfg->limit)
		return 1;
	st = bpf_map_lookup_elem(&flow_guard_state_map, &zero);
	if (!st)
		return 1;
	now = bpf_jiffies64();
	if (now - st->window_start >= cfg->window_jiffies) {
		st->window_start = now;
		st->count = 0;
	}
	if (st->count >= cfg->limit) {
		struct rv_drop_stats *d;
		__u32 reason = RV_EVENT_FLOW_GUARDED;

		d = bpf_map_lookup_elem(&drop_stats_map, &reason);
		if (d)
			d->packets++;
		return 0;
	}
	st->count++;
	return 1;
}

/* The guard's decision for one packet, asked at most once however many
 * entries the packet would create: `*st` starts at RV_GUARD_UNASKED. */
#define RV_GUARD_UNASKED -1

static __always_inline int rv_guard_ask(int *st)
{
	if (*st == RV_GUARD_UNASKED)
		*st = rv_guard_admit();
	return *st;
}

#endif /* RIVORA_GUARD_H */
