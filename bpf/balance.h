/* SPDX-License-Identifier: Apache-2.0 */
/*
 * balance.h: choosing a backend for a flow: the affinity table first (except
 * for a TCP SYN, which opens a new connection), then the VIP's Maglev slice
 * with a bounded probe past unusable backends.
 */
#ifndef RIVORA_BALANCE_H
#define RIVORA_BALANCE_H

#include "maps.h"
#include "hash.h"
#include "parse.h"

/* A packet to VIP `service_id` dropped for `reason`: the node-wide reason,
 * the VIP's drops, and the VIP's count of that reason (vip_drop_stats_map;
 * all three are array lookups the verifier inlines). */
static __always_inline void rv_count_drop(__u32 reason, __u32 service_id)
{
	struct rv_drop_stats *d = bpf_map_lookup_elem(&drop_stats_map, &reason);
	if (d)
		d->packets++;
	struct rv_vip_stats *s = bpf_map_lookup_elem(&stats_map, &service_id);
	if (s)
		s->drops++;
	if (service_id < RV_MAX_VIPS && reason < RV_DROP_REASON_SLOTS) {
		__u32 idx = service_id * RV_DROP_REASON_SLOTS + reason;
		struct rv_drop_stats *v = bpf_map_lookup_elem(&vip_drop_stats_map, &idx);
		if (v)
			v->packets++;
	}
}

static __always_inline __u32 rv_backend_state(__u32 backend_id)
{
	struct rv_backend_health *h = bpf_map_lookup_elem(&backend_health_map, &backend_id);
	return h ? h->state : RV_BACKEND_NONE;
}

/* The handshake's missing state. A SYN makes no affinity entry (a flood of
 * them would evict established flows), so its ACK walks Maglev again; if
 * the SYN's backend turned draining in between (a Kubernetes endpoint
 * turning terminating), that walk skips it and the ACK reaches a backend
 * that never saw the SYN, which resets the connection. So a SYN leaves its
 * backend in a slot of syn_hint_map (an array: a store, no insert, nothing
 * evicted; a flood only overwrites other SYNs' hints), and an ACK without
 * an entry follows a hint of its own flow that is at most two ticks old,
 * to a backend that is healthy or draining. The flow's 5-tuple hash `h`
 * (the one Maglev uses) gives the slot (its low 12 bits) and the tag (the
 * 20 bits above them): a stranger's hint matches only with the same 32-bit
 * hash. Under many concurrent handshakes a hint may be overwritten before
 * its ACK comes: that handshake is then balanced as before the hints. */
static __always_inline void rv_syn_hint_set(__u32 h, __u32 backend_id, __u32 tick)
{
	__u32 slot = h & (RV_SYN_HINT_SLOTS - 1);
	__u64 *hint = bpf_map_lookup_elem(&syn_hint_map, &slot);

	if (hint)
		*hint = ((__u64)(h >> 12) << 32) | ((__u64)(tick & 0xffff) << 16) | (backend_id & 0xffff);
}

/* The backend of the flow's recent SYN, or -1. */
static __always_inline __u32 rv_nat_tick_now(void)
{
	return bpf_jiffies64() >> RV_NAT_CHECK_JIFFIES_SHIFT;
}

static __always_inline int rv_syn_hint_get(__u32 h, __u32 tick)
{
	__u32 slot = h & (RV_SYN_HINT_SLOTS - 1);
	__u64 *hint = bpf_map_lookup_elem(&syn_hint_map, &slot);
	__u64 v;
	__u32 id, state;

	if (!hint)
		return -1;
	v = *hint;
	if ((__u32)(v >> 32) != (h >> 12) || ((tick - (__u32)(v >> 16)) & 0xffff) > 2)
		return -1;
	id = v & 0xffff;
	struct rv_backend_health *bh = bpf_map_lookup_elem(&backend_health_map, &id);
	state = bh ? bh->state : RV_BACKEND_NONE;
	/* A hint never names the refusing pseudo-backend (a refused SYN sets
	 * none), unless its ID was a real backend's a tick ago. */
	if ((state != RV_BACKEND_HEALTHY && state != RV_BACKEND_DRAINING) || (bh->flags & RV_BACKEND_F_REJECT))
		return -1;
	return id;
}

/* rv_maglev_pick_slot's (and rv_maglev_pick's) answers besides an ID. */
#define RV_PICK_NONE (-1)   /* no usable backend in the probe window */
#define RV_PICK_REFUSE (-2) /* the flow's own slot is the VIP's refused share */

/* Walks at most RV_MAGLEV_PROBE_WINDOW slots of a slice from the flow's
 * slot and returns the first healthy backend's ID, or RV_PICK_NONE.
 * Draining and down backends take no new flows. `hint` (1 << 32 | the
 * flow's 5-tuple hash; 0 for none): a TCP segment without an entry, which
 * first follows its SYN's backend if the SYN was just now
 * (rv_syn_hint_get).
 *
 * The refused share (VipSpec::reject_weight: the pseudo-backend of
 * RV_BACKEND_F_REJECT, healthy): a flow whose own slot (the first probed)
 * names it gets RV_PICK_REFUSE, so the share refused is the pseudo-
 * backend's weight share of the slots, as a real backend's share is its
 * weight's. A later slot that names it is stepped over: the flows of a
 * down or draining backend go to the next real healthy backend, so its
 * share is redistributed over valid backends only, never refused (Gateway
 * API: the valid backends keep their shares; the refused share does not
 * grow because a valid backend failed).
 *
 * A global (non-inlined) function: the verifier checks it once, on its own,
 * instead of once per path of every caller. Arguments are plain scalars for
 * that reason. */
__attribute__((noinline)) int rv_maglev_pick_slot(__u32 offset, __u32 size, __u32 hash, __u64 hint)
{
	if (hint >> 32) {
		int id = rv_syn_hint_get((__u32)hint, rv_nat_tick_now());

		if (id >= 0)
			return id;
	}
	if (size == 0)
		return RV_PICK_NONE;
	__u32 slot = hash % size;
	for (__u32 i = 0; i < RV_MAGLEV_PROBE_WINDOW; i++) {
		/* A modulo rather than a wrap-around branch keeps the verifier's
		 * state count linear in the window size. */
		__u32 idx = offset + (slot + i) % size;
		__u32 *id = bpf_map_lookup_elem(&maglev_table, &idx);

		if (!id)
			return RV_PICK_NONE;
		__u32 bid = *id;
		struct rv_backend_health *h = bpf_map_lookup_elem(&backend_health_map, &bid);
		if (h && h->state == RV_BACKEND_HEALTHY) {
			if (!(h->flags & RV_BACKEND_F_REJECT))
				return bid & 0xffff;
			if (i == 0)
				return RV_PICK_REFUSE;
		}
	}
	return RV_PICK_NONE;
}

#include "client_affinity.h"

/* `client_service` (not RV_CLIENT_NONE): a ClientIP VIP's service ID, whose
 * client rv_client_set stored: its recent choice comes first when the VIP
 * has a timeout (client_affinity.h). Returns 0 with *backend_id set,
 * RV_PICK_NONE or RV_PICK_REFUSE (rv_maglev_pick_slot). backend_count
 * counts the refusing pseudo-backend too: a VIP with only a refused share
 * has a slice, all of it refused. */
static __always_inline int rv_maglev_pick(const struct rv_service *svc, __u32 hash, __u32 client_service,
					  __u64 hint, __u32 *backend_id, const int v6)
{
	if (svc->backend_count == 0)
		return RV_PICK_NONE;
	int id = client_service == RV_CLIENT_NONE
			 ? rv_maglev_pick_slot(svc->maglev_offset, svc->maglev_size, hash, hint)
			 : rv_client_pick_slice(svc->maglev_offset, svc->maglev_size, hash, client_service, hint, v6);
	if (id < 0)
		return id;
	*backend_id = id;
	return 0;
}

/* Whether a packet opens a TCP connection: SYN without ACK. Such a packet is
 * a new flow whatever connection_affinity_map holds for its 5-tuple, so it
 * is never looked up there (as in Katran): it is balanced through Maglev
 * over the VIP's healthy backends, and creates no entry: a SYN proves
 * nothing (a flood of them has random sources), and the entry is made by
 * the connection's next packet, the handshake's ACK, which the same Maglev
 * walk sends to the same backend while the backend set is unchanged. An entry with
 * the same 5-tuple can only belong to an earlier connection (clients reuse
 * source ports), whose backend may since have been drained, retired or
 * removed from the VIP: following it would hand a new connection to a
 * backend that must not get one, and a drain would never empty.
 * sessionAffinity clientIP keeps its meaning: the Maglev hash covers the
 * client's address only, so the SYN lands on the client's backend while it
 * is healthy. A SYN retransmission picks the same backend again (same hash,
 * same table). */
static __always_inline int rv_tcp_opens(const struct rv_pkt *p)
{
	return p->proto == IPPROTO_TCP && (p->tcp_flags & (RV_TCP_FLAG_SYN | RV_TCP_FLAG_ACK)) == RV_TCP_FLAG_SYN;
}

/* An established flow keeps its backend while that backend is healthy or
 * draining and its ID still names the same backend (generation match).
 * Membership of the VIP is not checked here: a TCP connection on a backend
 * removed from the VIP finishes on it (the writer keeps a retiring backend
 * draining for the retire grace), and a new TCP connection never gets here
 * (rv_tcp_opens). A UDP flow has no opening packet, so the map writer
 * deletes the UDP entries of a VIP whose backend left it (writer.rs,
 * forget_udp_flows). */
static __always_inline int rv_affinity_usable(const struct rv_affinity *a, __u32 generation)
{
	__u32 state = rv_backend_state(a->backend_id);

	return (state == RV_BACKEND_HEALTHY || state == RV_BACKEND_DRAINING) &&
	       a->backend_generation == generation;
}

/* Whether the UDP flow of 5-tuple hash `h` was seen on this CPU before
 * (and marks it seen). A UDP flow earns its affinity entry with its second
 * packet, not its first: a DNS query is a flow of one packet, and an entry
 * for it would cost an LRU insert (the most expensive thing on the path)
 * and push an established flow's entry out for nothing. Until then the
 * flow's backend is Maglev's answer, the one an entry would have recorded.
 *
 * One tag per slot: another flow that takes the slot in between only delays
 * the entry by a packet, and two flows with the same 32-bit hash make the
 * second one's first packet look like a second. Per CPU: a flow whose
 * packets land on different CPUs gets its entry a packet or two later.
 * Inlined: the per-CPU array lookup becomes a few instructions, where a
 * global function's call and return cost more than its body. */
static __always_inline int rv_udp_seen_before(__u32 h)
{
	__u32 slot = h & (RV_UDP_SEEN_SLOTS - 1);
	__u32 tag = h | 1;
	__u32 *seen = bpf_map_lookup_elem(&udp_seen_map, &slot);

	if (!seen)
		return 1;
	if (*seen == tag)
		return 1;
	*seen = tag;
	return 0;
}

#endif /* RIVORA_BALANCE_H */
