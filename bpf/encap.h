/* SPDX-License-Identifier: Apache-2.0 */
/*
 * encap.h: direct server return. L2 DSR rewrites the destination MAC to the
 * backend's and sends the frame back out (XDP_TX). L3 DSR wraps the packet
 * in an outer header to the backend (IP-in-IP / IPv6-in-IPv6, or GRE with
 * a per-flow key), routes it with bpf_fib_lookup (cached per backend for a
 * short tick) and redirects it out of the egress interface, or hands it to
 * the kernel when the FIB cannot answer (no neighbour entry yet, ...). A packet that fits the client's
 * path but not the tunnel is answered with ICMP fragmentation needed /
 * packet too big (icmp.h); an IPv4 packet without DF is encapsulated and
 * left to the kernel to fragment.
 */
#ifndef RIVORA_ENCAP_H
#define RIVORA_ENCAP_H

#include "maps.h"
#include "parse.h"
#include "csum.h"

#define RV_AF_INET 2
#define RV_AF_INET6 10
#define RV_IPPROTO_IPIP 4
#define RV_IPPROTO_IPV6 41
#define RV_IPPROTO_GRE 47
#define RV_IP_DF 0x4000
/* GRE with the key bit set (RFC 2890): 4 bytes of flags and protocol, 4 of key. */
#define RV_GRE_FLAG_KEY 0x2000
#define RV_GRE_LEN 8

/* Next hops of L3 DSR backends, per CPU (see struct rv_nexthop). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct rv_nexthop);
} nexthop_cache_map SEC(".maps");

/* Verdicts beyond the XDP ones, for the caller's counters. */
enum rv_encap_result {
	RV_ENCAP_REDIRECT = 0,  /* sent out of the egress interface */
	RV_ENCAP_TO_KERNEL = 1, /* encapsulated, XDP_PASS */
	RV_ENCAP_TOO_BIG = 2,   /* does not fit: the caller answers with ICMP */
	RV_ENCAP_FRAGMENT = 3,  /* IPv4 without DF: encapsulated, the kernel fragments */
	RV_ENCAP_FAILED = 4,
};

static __always_inline const struct rv_iface *rv_iface(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&iface_mac_map, &zero);
}

/* L2 DSR: the backend owns the VIP and sits on this segment; only the
 * destination MAC changes (the source becomes ours). */
static __always_inline int rv_dsr_l2(struct xdp_md *ctx, const __u8 *backend_mac)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	const struct rv_iface *ifc = rv_iface();

	if ((void *)(eth + 1) > data_end || !ifc)
		return XDP_DROP;
	__builtin_memcpy(eth->h_source, ifc->mac, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, backend_mac, ETH_ALEN);
	return XDP_TX;
}

static __always_inline __u16 rv_ip4_header_csum(struct iphdr *ip)
{
	__u32 sum = 0;
	__u16 *w = (__u16 *)ip;

#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	return ~rv_csum_fold(sum);
}

/* Encapsulates the IP packet at p->l3 (VLAN tags are dropped: the outer
 * packet is routed, not bridged) towards `dst`, and routes it. `inner_df`
 * says whether the inner packet may not be fragmented. *mtu receives the
 * room left for the inner packet when it does not fit. */
static __always_inline void rv_fib_params(struct bpf_fib_lookup *fib, struct xdp_md *ctx,
					  const struct rv_tunnel_config *tun, const __u32 *dst, __u32 tot_len,
					  int v6)
{
	fib->ifindex = ctx->ingress_ifindex;
	fib->tot_len = tot_len;
	if (v6) {
		fib->family = RV_AF_INET6;
		__builtin_memcpy(fib->ipv6_src, tun->src6, 16);
		__builtin_memcpy(fib->ipv6_dst, dst, 16);
	} else {
		fib->family = RV_AF_INET;
		fib->ipv4_src = tun->src4;
		fib->ipv4_dst = dst[0];
	}
}

/* rv_route's question and answer: a plain struct, so that a global
 * function can take it. */
struct rv_route_req {
	/* In. */
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

/* Routes the outer packet of r->tot_len bytes to r->dst: from the backend's
 * cached next hop while it is fresh (same tick, same backend), else with
 * bpf_fib_lookup, whose success is cached together with the route's MTU (a
 * second lookup with an oversized length reports it). Returns a
 * BPF_FIB_LKUP_RET_* code; on success r's MACs and ifindex are set, on
 * FRAG_NEEDED r->mtu.
 *
 * A global (non-inlined) function: the verifier checks the FIB lookups
 * once instead of once per packet shape and family of the caller. */
__attribute__((noinline)) int rv_route(struct xdp_md *ctx, struct rv_route_req *r)
{
	struct bpf_fib_lookup fib = {};
	__u32 zero = 0;
	struct rv_tunnel_config *tun = bpf_map_lookup_elem(&tunnel_config_map, &zero);
	struct rv_nexthop *nh;
	/* Jiffies: an inlined load, where bpf_ktime_get_coarse_ns was a helper
	 * call costing ~25 ns of every L3 DSR packet (see rv_nat_tick). */
	__u32 tick = bpf_jiffies64() >> RV_NAT_CHECK_JIFFIES_SHIFT;
	__u32 id;
	int rc;

	if (!ctx || !r || !tun)
		return BPF_FIB_LKUP_RET_NOT_FWDED;
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
	rv_fib_params(&fib, ctx, tun, r->dst, r->tot_len, r->v6);
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		r->mtu = fib.mtu_result;
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return rc;
	__builtin_memcpy(r->dmac, fib.dmac, ETH_ALEN);
	__builtin_memcpy(r->smac, fib.smac, ETH_ALEN);
	r->ifindex = fib.ifindex;
	if (!nh)
		return rc;
	/* Learn the route's MTU: a lookup for the largest packet fails the MTU
	 * check and reports it (or passes: no MTU below 64 KiB). */
	__builtin_memcpy(nh->dmac, fib.dmac, ETH_ALEN);
	__builtin_memcpy(nh->smac, fib.smac, ETH_ALEN);
	nh->ifindex = fib.ifindex;
	__builtin_memset(&fib, 0, sizeof(fib));
	rv_fib_params(&fib, ctx, tun, r->dst, 0xffff, r->v6);
	nh->mtu = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) == BPF_FIB_LKUP_RET_FRAG_NEEDED ? fib.mtu_result : 0xffff;
	nh->backend_generation = r->generation;
	nh->tick = tick;
	return rc;
}

static __always_inline int rv_encap(struct xdp_md *ctx, struct rv_pkt *p, const __u32 *dst, __u32 backend_id,
				    __u32 generation, __u8 gre, __u32 flow_hash, __u32 *inner_room, __u32 *egress,
				    const int v6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct rv_tunnel_config *tun = bpf_map_lookup_elem(&tunnel_config_map, &zero);
	const struct rv_iface *ifc = rv_iface();
	__u32 ip_len = v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);
	__u32 outer_len = ip_len + (gre ? RV_GRE_LEN : 0);
	__u32 l3_off = p->l3_off;
	__u32 inner_len;
	int inner_df = 1;
	struct rv_route_req route = {
		.backend_id = backend_id, .generation = generation, .v6 = v6
	};
	int rc;

	if (!tun || !ifc || l3_off > 22)
		return RV_ENCAP_FAILED;
	/* A scalar length (not pointer arithmetic) for the verifier. */
	inner_len = (__u32)bpf_xdp_get_buff_len(ctx) - l3_off;
	if (!v6) {
		struct iphdr *in = p->l3;
		if ((void *)(in + 1) > data_end)
			return RV_ENCAP_FAILED;
		inner_df = !!(in->frag_off & bpf_htons(RV_IP_DF));
	}

	/* Route the outer packet first: the MTU check needs its final size. */
	__builtin_memcpy(route.dst, dst, v6 ? 16 : 4);
	route.tot_len = outer_len + inner_len;
	rc = rv_route(ctx, &route);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED && inner_df) {
		*inner_room = route.mtu > outer_len ? route.mtu - outer_len : 0;
		return RV_ENCAP_TOO_BIG;
	}

	/* Make room: [eth][outer][inner], without the VLAN tags. */
	int delta = (int)outer_len - (int)(l3_off - sizeof(struct ethhdr));
	if (bpf_xdp_adjust_head(ctx, -delta))
		return RV_ENCAP_FAILED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *outer = eth + 1;
	if (outer + sizeof(struct ipv6hdr) + RV_GRE_LEN > data_end)
		return RV_ENCAP_FAILED;
	eth->h_proto = bpf_htons(v6 ? ETH_P_IPV6 : ETH_P_IP);

	if (v6) {
		struct ipv6hdr *o = outer;
		__u32 label = flow_hash & 0xfffff;
		o->version = 6;
		o->priority = 0;
		o->flow_lbl[0] = label >> 16;
		o->flow_lbl[1] = label >> 8;
		o->flow_lbl[2] = label;
		o->payload_len = bpf_htons(outer_len - ip_len + inner_len);
		o->nexthdr = gre ? RV_IPPROTO_GRE : RV_IPPROTO_IPV6;
		o->hop_limit = 64;
		__builtin_memcpy(&o->saddr, tun->src6, 16);
		__builtin_memcpy(&o->daddr, dst, 16);
	} else {
		struct iphdr *o = outer;
		o->version = 4;
		o->ihl = 5;
		o->tos = 0;
		o->tot_len = bpf_htons(outer_len + inner_len);
		o->id = 0;
		o->frag_off = inner_df ? bpf_htons(RV_IP_DF) : 0;
		o->ttl = 64;
		o->protocol = gre ? RV_IPPROTO_GRE : RV_IPPROTO_IPIP;
		o->check = 0;
		o->saddr = tun->src4;
		o->daddr = dst[0];
		o->check = rv_ip4_header_csum(o);
	}
	if (gre) {
		__be16 *g = outer + ip_len;
		g[0] = bpf_htons(RV_GRE_FLAG_KEY);
		g[1] = bpf_htons(v6 ? ETH_P_IPV6 : ETH_P_IP);
		*(__be32 *)(g + 2) = bpf_htonl(flow_hash);
	}

	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		__builtin_memcpy(eth->h_dest, route.dmac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, route.smac, ETH_ALEN);
		*egress = route.ifindex;
		return RV_ENCAP_REDIRECT;
	}
	/* The kernel routes it: addressed to us so it is not taken for
	 * someone else's frame. */
	__builtin_memcpy(eth->h_dest, ifc->mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, ifc->mac, ETH_ALEN);
	return rc == BPF_FIB_LKUP_RET_FRAG_NEEDED ? RV_ENCAP_FRAGMENT : RV_ENCAP_TO_KERNEL;
}

#endif /* RIVORA_ENCAP_H */
