/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nat.h: full-NAT rewrites. The ingress side (XDP) rewrites the destination
 * to the backend with incremental checksums; the egress side (TCX) restores
 * the VIP as the reply's source with the skb checksum helpers, which also
 * handle CHECKSUM_PARTIAL skbs correctly.
 */
#ifndef RIVORA_NAT_H
#define RIVORA_NAT_H

#include "parse.h"
#include "csum.h"

/* Where the L4 checksum sits, relative to the L4 header. */
static __always_inline __u32 rv_l4_csum_off(__u8 proto)
{
	return proto == IPPROTO_TCP ? offsetof(struct tcphdr, check) : offsetof(struct udphdr, check);
}

/* Applies an L4 checksum difference in place. A UDP/IPv4 datagram without a
 * checksum (0) keeps none; a UDP result of 0 is sent as 0xffff (RFC 768). */
static __always_inline int rv_l4_csum_update(struct rv_pkt *p, void *data_end, __u32 diff)
{
	__u16 *check = p->l4 + rv_l4_csum_off(p->proto);

	if ((void *)(check + 1) > data_end)
		return -1;
	if (p->proto == IPPROTO_UDP) {
		if (*check == 0 && p->family == 4)
			return 0;
		*check = rv_csum_apply(*check, diff);
		if (*check == 0)
			*check = 0xffff;
		return 0;
	}
	*check = rv_csum_apply(*check, diff);
	return 0;
}

/* Sets the L4 destination port (TCP and UDP keep it at the same offset). */
static __always_inline int rv_set_dport(struct rv_pkt *p, void *data_end, __be16 port)
{
	struct udphdr *uh = p->l4;

	if ((void *)(uh + 1) > data_end)
		return -1;
	uh->dest = port;
	return 0;
}

/* XDP: destination NAT of an IPv4 packet to (addr, port). */
static __always_inline int rv_dnat4(struct rv_pkt *p, void *data_end, __be32 addr, __be16 port)
{
	struct iphdr *ip = p->l3;
	__u32 l3diff, l4diff;

	if ((void *)(ip + 1) > data_end)
		return -1;
	l3diff = rv_csum_diff32(0, ip->daddr, addr);
	l4diff = rv_csum_diff16(l3diff, p->dport, port);
	if (rv_l4_csum_update(p, data_end, l4diff))
		return -1;
	if (rv_set_dport(p, data_end, port))
		return -1;
	ip->check = rv_csum_apply(ip->check, l3diff);
	ip->daddr = addr;
	return 0;
}

/* XDP: destination NAT of an IPv6 packet (no IP header checksum in v6). */
static __always_inline int rv_dnat6(struct rv_pkt *p, void *data_end, const __u8 *addr, __be16 port)
{
	struct ipv6hdr *ip6 = p->l3;
	__u32 diff;

	if ((void *)(ip6 + 1) > data_end)
		return -1;
	diff = rv_csum_diff128(0, (const __u32 *)&ip6->daddr, (const __u32 *)addr);
	diff = rv_csum_diff16(diff, p->dport, port);
	if (rv_l4_csum_update(p, data_end, diff))
		return -1;
	if (rv_set_dport(p, data_end, port))
		return -1;
	__builtin_memcpy(&ip6->daddr, addr, 16);
	return 0;
}

#endif /* RIVORA_NAT_H */
