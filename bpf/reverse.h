/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reverse.h: how a full-NAT backend's reply finds the VIP it must come from.
 *
 * Most backend endpoints (address, the port they answer from, protocol)
 * serve exactly one VIP: then every reply of the endpoint is that VIP's, and
 * the control plane says so in nat_endpoint_map (RV_NAT_EP_EXCLUSIVE). Such
 * flows get no per-flow reverse entry at all: a new flow costs no insert for
 * it, and its replies never depend on an LRU entry that a flood could evict.
 * An endpoint that several VIPs share (the same backend port behind two VIP
 * addresses, or behind a port-range VIP) needs the per-flow entry in
 * nat_reverse_map, written by xdp_ingress as before.
 *
 * Changes of sharing are ordered by the control plane (writer.rs,
 * sync_nat_endpoints): an endpoint that becomes shared loses
 * RV_NAT_EP_EXCLUSIVE before a second VIP can reach it, and keeps its VIP as
 * a fallback (RV_NAT_EP_FALLBACK) for the flows of the time it was
 * exclusive, which have no per-flow entry until their next packet re-creates
 * one; an endpoint becomes exclusive only once the other VIP has gone. An
 * endpoint missing from the map (a VIP just added) is treated as shared.
 *
 * A consequence an operator must know: every packet leaving the egress
 * interface from an exclusive endpoint is rewritten to its VIP, also a reply
 * to a client that reached the backend's own address directly through this
 * node (docs/operations.md, "Flow state"). That is why the control plane
 * never makes an endpoint exclusive when a VIP with `stateless_reverse:
 * false` reaches it (Kubernetes VIPs: a pod's other traffic leaves through
 * the same node): such flows all use per-flow entries.
 */
#ifndef RIVORA_REVERSE_H
#define RIVORA_REVERSE_H

#include "maps.h"
#include "parse.h"
#include "guard.h"
#include "hash.h"

/* The endpoint entry of (addr, port, proto), or null. The two families'
 * values share their layout after the address, so one pointer type serves
 * the flags (rv_nat_ep_flags_of). */
static __always_inline void *rv_nat_endpoint(const __u32 *addr, __be16 port, __u8 proto, const int v6)
{
	if (v6) {
		struct rv_nat_ep_key6 k = { .port = port, .proto = proto };
		__builtin_memcpy(k.addr, addr, 16);
		return bpf_map_lookup_elem(&nat_endpoint_map6, &k);
	}
	struct rv_nat_ep_key4 k = { .addr = addr[0], .port = port, .proto = proto };
	return bpf_map_lookup_elem(&nat_endpoint_map, &k);
}

static __always_inline __u8 rv_nat_ep_flags_of(const void *ep, const int v6)
{
	if (v6)
		return ((const struct rv_nat_ep_value6 *)ep)->flags;
	return ((const struct rv_nat_ep_value4 *)ep)->flags;
}

/* Whether the flows of endpoint (addr, port, proto) need no per-flow
 * reverse entry (the endpoint serves one VIP). */
static __always_inline int rv_nat_endpoint_exclusive(const __u32 *addr, __be16 port, __u8 proto, const int v6)
{
	void *ep = rv_nat_endpoint(addr, port, proto, v6);

	return ep && (rv_nat_ep_flags_of(ep, v6) & RV_NAT_EP_EXCLUSIVE);
}

/* Records how the backend's reply is turned back into the VIP's: the reply
 * leaves as backend:port -> client:sport. Written only when the entry is
 * missing or names another service (a client port reused towards another
 * VIP of the same shared endpoint), so a flow's later packets cost a lookup,
 * not an insert. `admit` (null: unguarded) is the packet's new-flow guard
 * decision, asked before an insert (guard.h rv_guard_ask); returns whether
 * the entry now holds. */
static __always_inline int rv_nat_record(const struct rv_pkt *p, const __u32 *be_addr, __be16 be_port,
					 __u32 service_id, int *admit, const int v6)
{
	if (v6) {
		struct rv_nat_key6 k = { .sport = be_port, .dport = p->sport, .proto = p->proto };
		__builtin_memcpy(k.src, be_addr, 16);
		__builtin_memcpy(k.dst, p->src, 16);
		struct rv_nat_value6 *cur = bpf_map_lookup_elem(&nat_reverse_map6, &k);
		if (cur && cur->service_id == service_id)
			return 1;
		if (admit && !rv_guard_ask(admit))
			return 0;
		struct rv_nat_value6 v = { .vip_port = p->dport, .service_id = service_id };
		__builtin_memcpy(v.vip, p->dst, 16);
		bpf_map_update_elem(&nat_reverse_map6, &k, &v, BPF_ANY);
	} else {
		struct rv_nat_key4 k = {
			.src = be_addr[0], .dst = p->src[0], .sport = be_port, .dport = p->sport, .proto = p->proto
		};
		struct rv_nat_value4 *cur = bpf_map_lookup_elem(&nat_reverse_map, &k);
		if (cur && cur->service_id == service_id)
			return 1;
		if (admit && !rv_guard_ask(admit))
			return 0;
		struct rv_nat_value4 v = { .vip = p->dst[0], .vip_port = p->dport, .service_id = service_id };
		bpf_map_update_elem(&nat_reverse_map, &k, &v, BPF_ANY);
	}
	return 1;
}

/* Copies an endpoint entry's VIP out. */
static __always_inline void rv_nat_ep_vip(const void *ep, __u32 *vip, __be16 *vip_port, __u32 *service_id,
					  const int v6)
{
	if (v6) {
		const struct rv_nat_ep_value6 *e = ep;
		__builtin_memcpy(vip, e->vip, 16);
		*vip_port = e->vip_port;
		*service_id = e->service_id;
	} else {
		const struct rv_nat_ep_value4 *e = ep;
		vip[0] = e->vip;
		*vip_port = e->vip_port;
		*service_id = e->service_id;
	}
}

/* Whether `addr` may be a backend's: its bit in nat_backend_filter_map,
 * which the control plane sets for every programmed backend address before
 * a VIP can send it traffic and clears only once the backend is released.
 * A clear bit means surely not: other egress traffic costs one inlined
 * array lookup instead of two hash-map walks. */
static __always_inline int rv_nat_backend_maybe(const __u32 *addr, const int v6)
{
	__u32 bit = rv_nat_backend_bit(addr, v6);
	__u32 word = bit >> 6;
	const __u64 *w = bpf_map_lookup_elem(&nat_backend_filter_map, &word);

	return w && ((*w >> (bit & 63)) & 1);
}

/* The VIP (address, port) a backend's reply from src:sport to dst:dport
 * must come from, if the flow is ours: the endpoint's VIP when it is
 * exclusive, else the flow's own entry, else the endpoint's fallback. */
static __always_inline int rv_reverse(const __u32 *src, const __u32 *dst, __be16 sport, __be16 dport, __u8 proto,
				      __u32 *vip, __be16 *vip_port, __u32 *service_id, const int v6)
{
	if (!rv_nat_backend_maybe(src, v6))
		return -1;
	void *ep = rv_nat_endpoint(src, sport, proto, v6);
	__u8 flags = ep ? rv_nat_ep_flags_of(ep, v6) : 0;

	if (ep && (flags & RV_NAT_EP_EXCLUSIVE)) {
		rv_nat_ep_vip(ep, vip, vip_port, service_id, v6);
		return 0;
	}
	if (v6) {
		struct rv_nat_key6 k = { .sport = sport, .dport = dport, .proto = proto };
		__builtin_memcpy(k.src, src, 16);
		__builtin_memcpy(k.dst, dst, 16);
		struct rv_nat_value6 *v = bpf_map_lookup_elem(&nat_reverse_map6, &k);
		if (v) {
			__builtin_memcpy(vip, v->vip, 16);
			*vip_port = v->vip_port;
			*service_id = v->service_id;
			return 0;
		}
	} else {
		struct rv_nat_key4 k = { .src = src[0], .dst = dst[0], .sport = sport, .dport = dport, .proto = proto };
		struct rv_nat_value4 *v = bpf_map_lookup_elem(&nat_reverse_map, &k);
		if (v) {
			vip[0] = v->vip;
			*vip_port = v->vip_port;
			*service_id = v->service_id;
			return 0;
		}
	}
	if (ep && (flags & RV_NAT_EP_FALLBACK)) {
		rv_nat_ep_vip(ep, vip, vip_port, service_id, v6);
		return 0;
	}
	return -1;
}

#endif /* RIVORA_REVERSE_H */
