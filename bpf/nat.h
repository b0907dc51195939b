/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nat.h: full-NAT rewrites with incremental checksums (RFC 1624), for
 * frames written in place (XDP, and skbs made writable). The skb path for
 * unfragmented TCP/UDP uses the kernel's checksum helpers instead (tc_nat.c),
 * because those skbs may carry a partial (offloaded) checksum.
 *
 * All rewrites come in one shape: some addresses and ports of the frame
 * change; every checksum covering them is adjusted by the same difference.
 * `v6` is a compile-time constant at every call site, so each program gets
 * a family-specific copy without run-time branches.
 */
#ifndef RIVORA_NAT_H
#define RIVORA_NAT_H

#include "parse.h"
#include "csum.h"

/* Offset of the L4 checksum within its header. */
static __always_inline __u32 rv_l4_csum_off(__u8 proto)
{
	return proto == IPPROTO_TCP ? offsetof(struct tcphdr, check) : offsetof(struct udphdr, check);
}

/* Difference that replacing an address makes (4 or 16 bytes). */
static __always_inline __u32 rv_addr_diff(__u32 diff, const __u32 *from, const __u32 *to, const int v6)
{
	if (v6)
		return rv_csum_diff128(diff, from, to);
	return rv_csum_diff32(diff, from[0], to[0]);
}

static __always_inline void rv_addr_store(void *at, const __u32 *addr, const int v6)
{
	if (v6)
		__builtin_memcpy(at, addr, 16);
	else
		__builtin_memcpy(at, addr, 4);
}

/* Applies `diff` to the L4 checksum at `check` (TCP or UDP). A UDP/IPv4
 * datagram without a checksum keeps none; a UDP result of 0 is sent as
 * 0xffff (RFC 768). Returns the checksum's own change, for an enclosing
 * checksum (ICMP) that covers it. */
static __always_inline __u32 rv_l4_csum_fix(__u16 *check, __u8 proto, __u32 diff, const int v6)
{
	__u16 old = *check;

	if (proto == IPPROTO_UDP && old == 0 && !v6)
		return 0;
	*check = rv_csum_apply(old, diff);
	if (proto == IPPROTO_UDP && *check == 0)
		*check = 0xffff;
	return rv_csum_diff16(0, old, *check);
}

/* NAT of one side of a TCP/UDP packet or first fragment: its destination
 * (`src` 0) or source (`src` 1, a compile-time constant) address, and port
 * unless `port` is 0, become `addr`/`port`. The diff is taken from the
 * parse (p->src / p->dst), so a packet may be rewritten on both sides with
 * two calls. */
static __always_inline int rv_nat_l4(struct rv_pkt *p, void *data_end, const __u32 *addr, __be16 port, const int src,
				     const int v6)
{
	__be16 *ports = p->l4;
	__u16 *check = p->l4 + rv_l4_csum_off(p->proto);
	__u32 diff;

	if ((void *)(ports + 2) > data_end || (void *)(check + 1) > data_end)
		return -1;
	diff = rv_addr_diff(0, src ? p->src : p->dst, addr, v6);
	if (!v6) {
		struct iphdr *ip = p->l3;
		if ((void *)(ip + 1) > data_end)
			return -1;
		ip->check = rv_csum_apply(ip->check, diff);
		if (src)
			ip->saddr = addr[0];
		else
			ip->daddr = addr[0];
	} else {
		struct ipv6hdr *ip6 = p->l3;
		if ((void *)(ip6 + 1) > data_end)
			return -1;
		__builtin_memcpy(src ? (void *)&ip6->saddr : (void *)&ip6->daddr, addr, 16);
	}
	__be16 *pf = &ports[src ? 0 : 1];
	if (port && port != *pf) {
		diff = rv_csum_diff16(diff, *pf, port);
		*pf = port;
	}
	rv_l4_csum_fix(check, p->proto, diff, v6);
	return 0;
}

/* Destination NAT of a TCP/UDP packet or first fragment: destination
 * address (and port unless `port` is 0) become the backend's. */
static __always_inline int rv_dnat_l4(struct rv_pkt *p, void *data_end, const __u32 *addr, __be16 port, const int v6)
{
	return rv_nat_l4(p, data_end, addr, port, 0, v6);
}

/* Rewrites the source (outgoing replies) or destination (incoming packets)
 * address of a later fragment: only the IPv4 header checksum covers it. */
static __always_inline int rv_nat_frag(struct rv_pkt *p, void *data_end, const __u32 *addr, int src, const int v6)
{
	if (!v6) {
		struct iphdr *ip = p->l3;
		if ((void *)(ip + 1) > data_end)
			return -1;
		__be32 *field = src ? &ip->saddr : &ip->daddr;
		ip->check = rv_csum_apply(ip->check, rv_csum_diff32(0, *field, addr[0]));
		*field = addr[0];
		return 0;
	}
	struct ipv6hdr *ip6 = p->l3;
	if ((void *)(ip6 + 1) > data_end)
		return -1;
	rv_addr_store(src ? (void *)&ip6->saddr : (void *)&ip6->daddr, addr, 1);
	return 0;
}

/* NAT of an ICMP error and the packet it quotes. `outer_src` selects which
 * outer address changes (1: source, for errors leaving towards a client; 0:
 * destination, for errors arriving for a VIP); the quoted packet changes the
 * opposite side (`in_src` = !outer_src... see callers): the quoted address
 * at `in_addr_src` (1: its source, 0: its destination) becomes `addr` and
 * the quoted port on that side becomes `port` (unless 0). Every checksum is
 * kept valid: outer IPv4 header, quoted IPv4 header, quoted L4 (when the
 * quote holds it) and the ICMP checksum over all of it (for ICMPv6 also
 * over the pseudo-header). */
static __always_inline int rv_nat_icmp(struct rv_pkt *p, void *data_end, const __u32 *addr, __be16 port,
				       int outer_src, int in_addr_src, const int v6)
{
	__u16 *icmp_check;
	__u32 icmp_diff = 0, in_diff;
	const __u32 *old_outer = outer_src ? p->src : p->dst;
	const __u32 *old_in = in_addr_src ? p->in_src : p->in_dst;

	/* Outer header. */
	if (!v6) {
		struct iphdr *ip = p->l3;
		struct rv_icmphdr *icmp = p->l4;
		if ((void *)(ip + 1) > data_end || (void *)(icmp + 1) > data_end)
			return -1;
		__be32 *field = outer_src ? &ip->saddr : &ip->daddr;
		ip->check = rv_csum_apply(ip->check, rv_csum_diff32(0, *field, addr[0]));
		*field = addr[0];
		icmp_check = &icmp->checksum;
	} else {
		struct ipv6hdr *ip6 = p->l3;
		struct rv_icmphdr *icmp = p->l4;
		if ((void *)(ip6 + 1) > data_end || (void *)(icmp + 1) > data_end)
			return -1;
		/* The ICMPv6 checksum covers the pseudo-header's addresses. */
		icmp_diff = rv_csum_diff128(0, old_outer, addr);
		rv_addr_store(outer_src ? (void *)&ip6->saddr : (void *)&ip6->daddr, addr, 1);
		icmp_check = &icmp->checksum;
	}

	/* Quoted network header. */
	in_diff = rv_addr_diff(0, old_in, addr, v6);
	icmp_diff = rv_addr_diff(icmp_diff, old_in, addr, v6);
	if (!v6) {
		struct iphdr *in = p->in_l3;
		if ((void *)(in + 1) > data_end)
			return -1;
		__u16 old_check = in->check;
		in->check = rv_csum_apply(in->check, in_diff);
		icmp_diff = rv_csum_diff16(icmp_diff, old_check, in->check);
		rv_addr_store(in_addr_src ? (void *)&in->saddr : (void *)&in->daddr, addr, 0);
	} else {
		struct ipv6hdr *in = p->in_l3;
		if ((void *)(in + 1) > data_end)
			return -1;
		rv_addr_store(in_addr_src ? (void *)&in->saddr : (void *)&in->daddr, addr, 1);
	}

	/* Quoted ports (always within the quote) and L4 checksum (if quoted). */
	__be16 *ports = p->in_l4;
	if ((void *)(ports + 2) > data_end)
		return -1;
	__be16 *pf = in_addr_src ? &ports[0] : &ports[1];
	if (port && port != *pf) {
		in_diff = rv_csum_diff16(in_diff, *pf, port);
		icmp_diff = rv_csum_diff16(icmp_diff, *pf, port);
		*pf = port;
	}
	__u16 *in_check = p->in_l4 + rv_l4_csum_off(p->in_proto);
	if ((void *)(in_check + 1) <= data_end)
		icmp_diff = rv_csum_add(icmp_diff, rv_l4_csum_fix(in_check, p->in_proto, in_diff, v6));

	if ((void *)(icmp_check + 1) > data_end)
		return -1;
	*icmp_check = rv_csum_apply(*icmp_check, icmp_diff);
	return 0;
}

#endif /* RIVORA_NAT_H */
