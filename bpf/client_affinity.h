/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client_affinity.h: sessionAffinity ClientIP with a timeout, as
 * kube-proxy applies sessionAffinityConfig.clientIP.timeoutSeconds: a
 * client's new flows go to the backend its last new flow went to, while
 * that was less than the timeout ago and the backend is healthy.
 *
 * Why a table and not only the hash: RV_SVC_F_AFFINITY_CLIENT_IP already
 * hashes the client address alone, which keeps a client on one backend
 * while the backend set stays as it is. When a backend is added, Maglev
 * moves about 1/N of the clients to it; the table keeps them where they
 * were until they have been quiet for the timeout (their next flow after
 * it follows the hash). A backend that is removed, draining or down loses
 * its clients at once (they follow the hash to a healthy one).
 *
 * Only VIPs with a timeout in svc_affinity_timeout_map pay for it: one
 * array lookup for a ClientIP VIP's packet without an affinity entry, one
 * LRU lookup when it has a timeout, one update when the client's choice is
 * new (within the new-flow guard, guard.h) or a tick old.
 *
 * The client's address crosses into the (global, once-verified) function
 * through a per-CPU scratch slot, which also holds the keys and value it
 * hands to the map helpers: xdp_ingress's frame is close to the verifier's
 * 512 bytes for the whole call chain.
 */
#ifndef RIVORA_CLIENT_AFFINITY_H
#define RIVORA_CLIENT_AFFINITY_H

#include "maps.h"
#include "route.h"
#include "guard.h"

/* What crosses into rv_client_pick4/6, and the keys and value they hand
 * to the map helpers: in a map value, not on their stack, which adds to
 * xdp_ingress's (and arguments live across calls are spilled there). */
struct rv_client_scratch {
	struct rv_client_key4 k4;
	struct rv_client_key6 k6;
	struct rv_client_affinity v;
	/* The VIP's Maglev slice and the flow's hash. */
	__u32 offset;
	__u32 size;
	__u32 hash;
	__u32 pad;
	__u64 hint; /* rv_maglev_pick_slot's */
};

/* Per CPU, valid from rv_client_set to the call after it in one packet. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_client_scratch);
} client_scratch_map SEC(".maps");

/* rv_maglev_pick's "not a ClientIP VIP" (service IDs stay below
 * RV_MAX_VIPS). */
#define RV_CLIENT_NONE 0xffffffff

/* Puts the packet's client address where rv_client_pick4/6 read it. */
static __always_inline void rv_client_set(const __u32 *src, const int v6)
{
	__u32 zero = 0;
	struct rv_client_scratch *s = bpf_map_lookup_elem(&client_scratch_map, &zero);

	if (!s)
		return;
	if (v6)
		__builtin_memcpy(s->k6.addr, src, 16);
	else
		s->k4.addr = src[0];
}

/* The backend's generation, 0 if the ID is free. */
static __always_inline __u32 rv_client_backend_generation(__u32 id, const int v6)
{
	if (v6) {
		struct rv_backend6 *b = bpf_map_lookup_elem(&backend_map6, &id);
		return b ? b->generation : 0;
	}
	struct rv_backend4 *b = bpf_map_lookup_elem(&backend_map, &id);
	return b ? b->generation : 0;
}

/* The backend for a new flow of the client (rv_client_set) of ClientIP VIP
 * `service_id`, slice and hash in the scratch: the client's recent choice
 * while it is within the VIP's timeout and healthy (a hit counts as the
 * client's latest new flow: the timeout runs from it, as kube-proxy's
 * `recent` match is set by every new connection), else the hash's pick,
 * recorded as the client's choice if the new-flow guard admits a new
 * entry. -1 when no backend is healthy. */
static __always_inline int rv_client_pick(__u32 service_id, const int v6)
{
	__u32 zero = 0;
	struct rv_client_scratch *s = bpf_map_lookup_elem(&client_scratch_map, &zero);
	const struct rv_affinity_timeout *timeout;
	struct rv_client_affinity *a;
	void *key;
	int id;

	if (!s)
		return -1;
	timeout = bpf_map_lookup_elem(&svc_affinity_timeout_map, &service_id);
	if (!timeout || !timeout->ticks)
		return rv_maglev_pick_slot(s->offset, s->size, s->hash, s->hint);
	s->k4.service_id = service_id;
	s->k6.service_id = service_id;
	key = v6 ? (void *)&s->k6 : (void *)&s->k4;
	a = bpf_map_lookup_elem(v6 ? (void *)&client_affinity_map6 : (void *)&client_affinity_map, key);
	if (a && rv_route_tick() - a->last_seen < timeout->ticks) {
		__u32 bid = a->backend_id;
		struct rv_backend_health *h = bpf_map_lookup_elem(&backend_health_map, &bid);

		if (h && h->state == RV_BACKEND_HEALTHY && a->backend_generation &&
		    a->backend_generation == rv_client_backend_generation(bid, v6)) {
			a->last_seen = rv_route_tick();
			return bid & 0xffff;
		}
	}
	id = rv_maglev_pick_slot(s->offset, s->size, s->hash, s->hint);
	if (id < 0)
		return id;
	/* An existing entry is rewritten in place; a new client's is an
	 * insert like any other flow state. */
	if (a || rv_guard_admit()) {
		s->v.backend_id = id;
		s->v.backend_generation = rv_client_backend_generation(id, v6);
		s->v.last_seen = rv_route_tick();
		s->v.pad = 0;
		bpf_map_update_elem(v6 ? (void *)&client_affinity_map6 : (void *)&client_affinity_map, key, &s->v,
				    BPF_ANY);
	}
	return id;
}

/* rv_client_pick per family. Global: verified once each, apart from
 * xdp_ingress's paths. */
__attribute__((noinline)) int rv_client_pick4(__u32 service_id)
{
	return rv_client_pick(service_id, 0);
}

__attribute__((noinline)) int rv_client_pick6(__u32 service_id)
{
	return rv_client_pick(service_id, 1);
}

/* Stores the slice and hash for rv_client_pick4/6 (an inlined lookup). */
static __always_inline int rv_client_pick_slice(__u32 offset, __u32 size, __u32 hash, __u32 service_id, __u64 hint,
						const int v6)
{
	__u32 zero = 0;
	struct rv_client_scratch *s = bpf_map_lookup_elem(&client_scratch_map, &zero);

	if (!s)
		return -1;
	s->offset = offset;
	s->size = size;
	s->hash = hash;
	s->hint = hint;
	return v6 ? rv_client_pick6(service_id) : rv_client_pick4(service_id);
}

#endif /* RIVORA_CLIENT_AFFINITY_H */
