/* SPDX-License-Identifier: Apache-2.0 */
/*
 * encap.h: direct server return. L2 DSR rewrites the destination MAC to the
 * backend's and sends the frame back out (XDP_TX). L3 DSR wraps the packet
 * in an outer header to the backend (IP-in-IP / IPv6-in-IPv6, or GRE with
 * a per-flow key), routes it (route.h) and redirects it out of the egress
 * interface, or hands it to the kernel when the FIB cannot answer (no
 * neighbour entry yet, ...). A packet that fits the client's
 * path but not the tunnel is answered with ICMP fragmentation needed /
 * packet too big (icmp.h); an IPv4 packet without DF is encapsulated and
 * left to the kernel to fragment.
 */
#ifndef RIVORA_ENCAP_H
#define RIVORA_ENCAP_H

#include "maps.h"
#include "parse.h"
#include "csum.h"
#include "route.h"

#define RV_IPPROTO_IPIP 4
#define RV_IPPROTO_IPV6 41
#define RV_IPPROTO_GRE 47
#define RV_IP_DF 0x4000
/* GRE with the key bit set (RFC 2890): 4 bytes of flags and protocol, 4 of key. */
#define RV_GRE_FLAG_KEY 0x2000
#define RV_GRE_LEN 8

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
	if (v6)
		__builtin_memcpy(route.src, tun->src6, 16);
	else
		route.src[0] = tun->src4;
	__builtin_memcpy(route.dst, dst, v6 ? 16 : 4);
	route.tot_len = outer_len + inner_len;
	/* The cached next hop inline; rv_route (a call) only when it is stale. */
	const struct rv_nexthop *nh = rv_nexthop_fresh(backend_id, generation, rv_route_tick());
	if (nh && route.tot_len > nh->mtu) {
		route.mtu = nh->mtu;
		rc = BPF_FIB_LKUP_RET_FRAG_NEEDED;
	} else if (nh) {
		__builtin_memcpy(route.dmac, nh->dmac, ETH_ALEN);
		__builtin_memcpy(route.smac, nh->smac, ETH_ALEN);
		route.ifindex = nh->ifindex;
		rc = BPF_FIB_LKUP_RET_SUCCESS;
	} else {
		rc = rv_route(ctx, &route);
	}
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
