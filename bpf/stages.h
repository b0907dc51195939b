/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stages.h: the rare paths of xdp_ingress as programs of their own, joined
 * by tail calls. Why: the verifier checks a program once per way into each
 * instruction it cannot prove equivalent, so code reached from many ways
 * (every parse shape, both families) is checked many times. A path moved
 * into a stage is checked once, on its own (docs/design/verifier-headroom.md
 * measured it: every program far below the 1M limit, where xdp_ingress
 * alone had reached 706k).
 *
 * Only paths that are really rare, or too large for xdp_ingress's stack,
 * are stages: step 2's ICMP errors and later fragments, step 6's FIB slow
 * path (a natForwarding fib packet whose backend's next hop is not cached
 * this tick, about once a second per backend), both directions of the
 * source translation of flows to other nodes' backends (snat.h), the
 * reset that refuses a new TCP flow of a VIP's refused share (reset.h), and
 * the classifier (classify.h), whose VIPs never take the other paths. A tail
 * call costs the packet that takes it a few nanoseconds, so forwarding
 * modes (DSR) and IPv6 stay in xdp_ingress.
 *
 * What crosses a jump: the frame itself, and for the route stage the
 * decision (the backend) in this CPU's rv_stage_state (an XDP program never
 * runs twice at once on one CPU and a tail call stays on it). The ICMP and
 * fragment stages parse the frame again rather than receive the parse: the
 * verifier forbids packet pointers in maps, and re-parsing a short frame
 * was measured cheaper than a round trip of the parse through the map.
 *
 * stage_map is not pinned by name: each load of the object gets its own
 * array, so during a hot upgrade the old xdp_ingress never jumps into the
 * new object's stages (another layout of rv_stage_state, of the maps). The
 * loader fills it before anything runs xdp_ingress and pins it under a
 * per-load name (crates/dataplane/src/stages.rs says why and when).
 */
#ifndef RIVORA_STAGES_H
#define RIVORA_STAGES_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "rivora_abi.h"
#include "maps.h"
#include "route.h"

/* The slots of stage_map. The loader (crates/dataplane/src/stages.rs)
 * fills slot N with program xdp_stage_<name> by the same table; keep the
 * two in step. */
enum rv_stage {
	/* Step 2: an ICMP error about one of our flows (rv_ingress_icmp). */
	RV_STAGE_ICMP4 = 0,
	RV_STAGE_ICMP6 = 1,
	/* Step 2: a later fragment (rv_ingress_frag). */
	RV_STAGE_FRAG4 = 2,
	RV_STAGE_FRAG6 = 3,
	/* Step 6, natForwarding fib, next hop not cached: rv_forward_routed. */
	RV_STAGE_ROUTE4 = 4,
	RV_STAGE_ROUTE6 = 5,
	/* Step 6 for a flow to a backend on another node: the source becomes
	 * this node's (snat.h), then the FIB routes it. */
	RV_STAGE_SNAT4 = 6,
	RV_STAGE_SNAT6 = 7,
	/* Step 3's miss for a packet to this node's translation address in its
	 * port range: a translated flow's reply, back to its client. */
	RV_STAGE_SNAT_REPLY4 = 8,
	RV_STAGE_SNAT_REPLY6 = 9,
	/* Step 5's refusal of a new TCP flow of a VIP's refused share: the
	 * segment becomes a reset back to the client (reset.h). */
	RV_STAGE_RESET4 = 10,
	RV_STAGE_RESET6 = 11,
	/* Step 3 for a packet to a classifier VIP (classify.h): the whole
	 * classifier path (Meridio-2's rules and groups). */
	RV_STAGE_CLS4 = 12,
	RV_STAGE_CLS6 = 13,
	RV_STAGE_COUNT = 14,
};

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, RV_STAGE_COUNT);
	__type(key, __u32);
	__type(value, __u32);
} stage_map SEC(".maps");

/* The decision that crosses into a stage: the route and SNAT stages'
 * backend (the frame is already rewritten for it), and for the SNAT stage
 * what the rewrite took from the frame (the VIP side of the flow), the
 * service and the new-flow guard's answer so far (guard.h). */
struct rv_stage_state {
	struct rv_be be;
	__u32 vip[4];
	__be16 vip_port;
	__u16 pad;
	__u32 service_id;
	int admit;
};

/* Per CPU, valid only between a jump and its target: not pinned, not
 * adopted (each loaded object has its own). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_stage_state);
} stage_state_map SEC(".maps");

static __always_inline struct rv_stage_state *rv_stage_state(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&stage_state_map, &zero);
}

/* Continues the packet in program `stage` (a constant). Returns only when
 * that slot is empty (a loader fault, or a removed array: see the loader):
 * the frame then goes to the kernel as it is, counted as
 * RV_PASS_STAGE_MISSING so the fault is visible. bpf_tail_call_static keeps
 * an immediate index at each call site (clang would otherwise merge the
 * sites into one with a variable index), which the JIT turns into a direct
 * jump instead of an indirect one behind a retpoline. */
static __always_inline int rv_stage_jump(struct xdp_md *ctx, const __u32 stage)
{
	__u32 reason = RV_PASS_STAGE_MISSING;
	struct rv_drop_stats *d;

	bpf_tail_call_static(ctx, &stage_map, stage);
	d = bpf_map_lookup_elem(&drop_stats_map, &reason);
	if (d)
		d->packets++;
	return XDP_PASS;
}

#endif /* RIVORA_STAGES_H */
