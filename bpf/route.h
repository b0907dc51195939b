/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route.h: sending a packet on from XDP without the kernel's forwarding
 * path. The next hop of a backend comes from bpf_fib_lookup, kept per
 * backend and CPU for one tick (at most about a second), so the FIB is
 * asked about once per tick per backend instead of once per packet. Used by L3
 * DSR (encap.h: the outer packet) and by NAT VIPs with `natForwarding: fib`
 * (the rewritten packet itself). Whenever the FIB cannot answer (no
 * neighbour entry yet, forwarding disabled, a local destination, a packet
 * over the route's MTU) the caller hands the packet to the kernel, which
 * resolves the neighbour, answers with ICMP or fragments as usual.
 */
#ifndef RIVORA_ROUTE_H
#define RIVORA_ROUTE_H

#include "maps.h"
#include "parse.h"

#define RV_AF_INET 2
#define RV_AF_INET6 10

/* A backend as the hot path needs it, whatever its family. */
struct rv_be {
	__u32 addr[4];
	__be16 port;
	__u8 mac[6];
	__u32 generation;
	__u32 id;
};

/* Next hops of backends, per CPU (see struct rv_nexthop). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct rv_nexthop);
} nexthop_cache_map SEC(".maps");

static __always_inline void rv_fib_params(struct bpf_fib_lookup *fib, struct xdp_md *ctx, const __u32 *src,
					  const __u32 *dst, __u32 tot_len, int v6)
{
	fib->ifindex = ctx->ingress_ifindex;
	fib->tot_len = tot_len;
	if (v6) {
		fib->family = RV_AF_INET6;
		__builtin_memcpy(fib->ipv6_src, src, 16);
		__builtin_memcpy(fib->ipv6_dst, dst, 16);
	} else {
		fib->family = RV_AF_INET;
		fib->ipv4_src = src[0];
		fib->ipv4_dst = dst[0];
	}
}

/* rv_route's question and answer: a plain struct, so that a global
 * function can take it. */
struct rv_route_req {
	/* In. */
	__u32 src[4];
	__u32 dst[4];
	__u32 backend_id;
	__u32 generation;
	__u32 tot_len;
	__u32 v6;
	/* Out. */
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
	__u32 ifindex;
	__u32 mtu;
};

/* rv_route's and rv_forward_routed's working memory. In a map, not on
 * the stack: both run below xdp_ingress's large frame, and the verifier
 * limits the stack of a whole call chain to 512 bytes. One per CPU; an XDP
 * program never runs twice at once on one CPU. */
struct rv_route_scratch {
	struct bpf_fib_lookup fib;
	struct rv_route_req req;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_route_scratch);
} route_scratch_map SEC(".maps");

/* The clock in next-hop cache units (rv_nexthop.tick; the same units as
 * rv_affinity.nat_checked): jiffies >> RV_NAT_CHECK_JIFFIES_SHIFT, at most
 * about a second. Jiffies because the verifier inlines bpf_jiffies64 into
 * one load, where bpf_ktime_get_coarse_ns is a helper call (15-25 ns per
 * packet here). */
static __always_inline __u32 rv_route_tick(void)
{
	return bpf_jiffies64() >> RV_NAT_CHECK_JIFFIES_SHIFT;
}

/* The next hop of backend `id` if it was learnt in this tick for this
 * generation of the ID: the hot path's whole routing cost, inlined (an
 * array lookup the verifier turns into pointer arithmetic) because every
 * call and return is expensive on CPUs that need return-stack mitigations.
 * Null when stale or empty: the caller then takes rv_route. */
static __always_inline const struct rv_nexthop *rv_nexthop_fresh(__u32 id, __u32 generation, __u32 tick)
{
	struct rv_nexthop *nh = bpf_map_lookup_elem(&nexthop_cache_map, &id);

	if (nh && nh->ifindex && nh->tick == tick && nh->backend_generation == generation)
		return nh;
	return 0;
}

/* Routes a packet of r->tot_len bytes to r->dst: from the backend's cached
 * next hop while it is fresh (same tick, same backend), else with
 * bpf_fib_lookup, whose success is cached together with the route's MTU (a
 * second lookup with an oversized length reports it). Returns a
 * BPF_FIB_LKUP_RET_* code; on success r's MACs and ifindex are set, on
 * FRAG_NEEDED r->mtu. The cache is keyed by backend, not by source: source
 * based policy routing is not followed within a tick.
 *
 * A global (non-inlined) function: the verifier checks the FIB lookups
 * once instead of once per packet shape and family of the caller. */
__attribute__((noinline)) int rv_route(struct xdp_md *ctx, struct rv_route_req *r)
{
	__u32 zero = 0;
	struct rv_route_scratch *scratch = bpf_map_lookup_elem(&route_scratch_map, &zero);
	struct bpf_fib_lookup *fib;
	struct rv_nexthop *nh;
	__u32 tick = rv_route_tick();
	__u32 id;
	int rc;

	if (!ctx || !r || !scratch)
		return BPF_FIB_LKUP_RET_NOT_FWDED;
	fib = &scratch->fib;
	id = r->backend_id;
	nh = bpf_map_lookup_elem(&nexthop_cache_map, &id);
	if (nh && nh->ifindex && nh->tick == tick && nh->backend_generation == r->generation) {
		if (r->tot_len > nh->mtu) {
			r->mtu = nh->mtu;
			return BPF_FIB_LKUP_RET_FRAG_NEEDED;
		}
		__builtin_memcpy(r->dmac, nh->dmac, ETH_ALEN);
		__builtin_memcpy(r->smac, nh->smac, ETH_ALEN);
		r->ifindex = nh->ifindex;
		return BPF_FIB_LKUP_RET_SUCCESS;
	}
	__builtin_memset(fib, 0, sizeof(*fib));
	rv_fib_params(fib, ctx, r->src, r->dst, r->tot_len, r->v6);
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		r->mtu = fib->mtu_result;
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return rc;
	__builtin_memcpy(r->dmac, fib->dmac, ETH_ALEN);
	__builtin_memcpy(r->smac, fib->smac, ETH_ALEN);
	r->ifindex = fib->ifindex;
	if (!nh)
		return rc;
	/* Learn the route's MTU: a lookup for the largest packet fails the MTU
	 * check and reports it (or passes: no MTU below 64 KiB). */
	__builtin_memcpy(nh->dmac, fib->dmac, ETH_ALEN);
	__builtin_memcpy(nh->smac, fib->smac, ETH_ALEN);
	nh->ifindex = fib->ifindex;
	__builtin_memset(fib, 0, sizeof(*fib));
	rv_fib_params(fib, ctx, r->src, r->dst, 0xffff, r->v6);
	nh->mtu = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0) == BPF_FIB_LKUP_RET_FRAG_NEEDED ? fib->mtu_result : 0xffff;
	nh->backend_generation = r->generation;
	nh->tick = tick;
	return rc;
}

/* A router's TTL decrement: the IPv4 header checksum follows (RFC 1141:
 * the TTL is the high byte of its 16-bit word). */
static __always_inline void rv_ip4_ttl_down(struct iphdr *ip)
{
	__u32 check = ip->check + bpf_htons(0x0100);

	ip->check = (__u16)(check + (check >= 0xffff));
	ip->ttl--;
}

/* Sends an untagged IP frame (already checked: TTL above 1, fits the
 * route) to the next hop as a router does: TTL / hop limit down by one, the
 * next hop's MACs, out of `ifindex`. */
static __always_inline int rv_route_send(struct xdp_md *ctx, const __u8 *dmac, const __u8 *smac, __u32 ifindex,
					 const int v6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (v6) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > data_end)
			return XDP_PASS;
		ip6->hop_limit--;
	} else {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end)
			return XDP_PASS;
		rv_ip4_ttl_down(ip);
	}
	__builtin_memcpy(eth->h_dest, dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, smac, ETH_ALEN);
	return bpf_redirect(ifindex, 0);
}

/* rv_forward_routed's fast path, inlined: the backend's next hop is in
 * the cache (`tick` is the caller's rv_route_tick()). Returns -1 when it is
 * not, or when the packet needs anything but the plain path (tagged,
 * expiring TTL, over the MTU): rv_forward_routed then decides. */
static __always_inline int rv_forward_nexthop(struct xdp_md *ctx, const struct rv_nexthop *nh, const int v6);

static __always_inline int rv_forward_cached(struct xdp_md *ctx, const struct rv_be *be, __u32 tick, const int v6)
{
	return rv_forward_nexthop(ctx, rv_nexthop_fresh(be->id, be->generation, tick), v6);
}

/* Sends the frame to next hop `nh` (null: -1) when it needs nothing but
 * the plain path: untagged, TTL above 1, within the hop's MTU; else -1. */
static __always_inline int rv_forward_nexthop(struct xdp_md *ctx, const struct rv_nexthop *nh, const int v6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if (!nh || (void *)(eth + 1) > data_end)
		return -1;
	if (v6) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if (eth->h_proto != bpf_htons(ETH_P_IPV6) || (void *)(ip6 + 1) > data_end || ip6->hop_limit <= 1 ||
		    bpf_ntohs(ip6->payload_len) + sizeof(*ip6) > nh->mtu)
			return -1;
	} else {
		struct iphdr *ip = (void *)(eth + 1);
		if (eth->h_proto != bpf_htons(ETH_P_IP) || (void *)(ip + 1) > data_end || ip->ttl <= 1 ||
		    bpf_ntohs(ip->tot_len) > nh->mtu)
			return -1;
	}
	return rv_route_send(ctx, nh->dmac, nh->smac, nh->ifindex, v6);
}

/* Forwards a NAT packet already rewritten to its backend `be` the way a
 * router would: TTL / hop limit down by one,
 * the next hop's MACs, XDP_REDIRECT out of the egress interface. Returns
 * XDP_PASS, untouched, for everything the kernel must see: a tagged frame
 * (the kernel owns the VLAN devices), a TTL about to expire (ICMP time
 * exceeded), and any FIB answer but success. Global, like rv_route: checked
 * once by the verifier instead of once per caller's packet shape. */
__attribute__((noinline)) int rv_forward_routed(struct xdp_md *ctx, const struct rv_be *be, int v6)
{
	void *data, *data_end;
	struct ethhdr *eth;
	__u32 zero = 0;
	struct rv_route_scratch *scratch = bpf_map_lookup_elem(&route_scratch_map, &zero);
	struct rv_route_req *route;
	int rc;

	if (!ctx || !be || !scratch)
		return XDP_PASS;
	route = &scratch->req;
	__builtin_memset(route, 0, sizeof(*route));
	route->v6 = v6;
	route->backend_id = be->id;
	route->generation = be->generation;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (v6) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if (eth->h_proto != bpf_htons(ETH_P_IPV6) || (void *)(ip6 + 1) > data_end || ip6->hop_limit <= 1)
			return XDP_PASS;
		__builtin_memcpy(route->src, &ip6->saddr, 16);
		__builtin_memcpy(route->dst, be->addr, 16);
		route->tot_len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
	} else {
		struct iphdr *ip = (void *)(eth + 1);
		if (eth->h_proto != bpf_htons(ETH_P_IP) || (void *)(ip + 1) > data_end || ip->ttl <= 1)
			return XDP_PASS;
		route->src[0] = ip->saddr;
		route->dst[0] = be->addr[0];
		route->tot_len = bpf_ntohs(ip->tot_len);
	}
	rc = rv_route(ctx, route);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;

	/* Bounds are checked again inside: the verifier forgets them across
	 * the call. */
	return rv_route_send(ctx, route->dmac, route->smac, route->ifindex, v6);
}

#endif /* RIVORA_ROUTE_H */
