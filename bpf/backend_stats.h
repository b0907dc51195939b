/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_stats.h: per-backend counters (backend_stats_map), so an operator
 * sees how traffic spreads over the backends and when a draining backend's
 * last flow has gone quiet.
 *
 * Counted for client->backend packets only, in every mode, at the point
 * where xdp_ingress has decided to send the packet to the backend (the same
 * points as the VIP's packets counter). Replies are not counted per
 * backend: in the DSR modes they never cross the balancer, and for full NAT
 * the per-VIP reply counters of tc_nat already show them (its reverse entry
 * does not name the backend ID).
 *
 * Everything here is a per-CPU array lookup, which the verifier inlines,
 * and an inlined jiffies load: no helper call on the hot path.
 */
#ifndef RIVORA_BACKEND_STATS_H
#define RIVORA_BACKEND_STATS_H

#include "maps.h"

/* Counts one packet of `bytes` sent to backend `backend_id`; `new_flow`:
 * it is the flow's first (its backend was just chosen). The last-packet
 * time is this CPU's jiffies: the control plane takes the largest over CPUs
 * and turns it into an age with the kernel's current jiffies. */
static __always_inline void rv_backend_count(__u32 backend_id, __u64 bytes, int new_flow)
{
	struct rv_backend_stats *s = bpf_map_lookup_elem(&backend_stats_map, &backend_id);

	if (s) {
		s->packets++;
		s->bytes += bytes;
		if (new_flow)
			s->new_flows++;
		s->last_jiffies = bpf_jiffies64();
	}
}

#endif /* RIVORA_BACKEND_STATS_H */
