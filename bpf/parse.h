/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parse.h: packet parsing shared by xdp_ingress and tc_nat. One parser for
 * both directions, so what the ingress program keys a flow on is exactly
 * what the egress program looks up.
 *
 * Shapes it understands (everything else is RV_PARSE_PASS: handed to the
 * kernel untouched):
 *  - Ethernet with up to two VLAN tags (802.1Q, 802.1ad);
 *  - IPv4 with options; IPv6 with up to RV_MAX_IPV6_EXT_HEADERS Hop-by-Hop,
 *    Destination Options and Fragment headers (RV_MAX_IPV6_EXT_BYTES in all);
 *  - TCP and UDP, including first fragments (which carry the ports);
 *  - later fragments (no L4 header): RV_PKT_FRAG_LATER;
 *  - ICMP and ICMPv6 errors quoting a TCP or UDP packet: RV_PKT_ICMP_ERR.
 */
#ifndef RIVORA_PARSE_H
#define RIVORA_PARSE_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "rivora_abi.h"

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#define RV_IP_MF 0x2000
#define RV_IP_OFFSET 0x1FFF
#define RV_IP6_MF 0x0001
#define RV_IP6_OFFSET 0xFFF8
/* How many VLAN tags are stepped over (802.1Q, and QinQ's outer 802.1ad). */
#define RV_MAX_VLAN_TAGS 2
#define RV_TCP_FLAG_FIN 0x01
#define RV_TCP_FLAG_SYN 0x02
#define RV_TCP_FLAG_RST 0x04
#define RV_TCP_FLAG_ACK 0x10

/* ICMP and ICMPv6 share this 8-byte header shape (linux/icmp.h is not
 * usable for the BPF target: it pulls in libc socket headers). */
struct rv_icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be32 rest;
};

#define RV_ICMP_DEST_UNREACH 3
#define RV_ICMP_TIME_EXCEEDED 11
#define RV_ICMP_PARAMETERPROB 12
#define RV_ICMPV6_DEST_UNREACH 1
#define RV_ICMPV6_PARAMPROB 4

struct rv_vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

struct rv_ipv6_frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;
	__be32 identification;
};

enum rv_pkt_kind {
	/* TCP or UDP with ports (unfragmented, or a first fragment). */
	RV_PKT_L4 = 0,
	/* A later fragment: no L4 header, follows its first fragment. */
	RV_PKT_FRAG_LATER = 1,
	/* An ICMP/ICMPv6 error quoting a TCP or UDP packet. */
	RV_PKT_ICMP_ERR = 2,
};

/* What the parser found. Pointers are into the packet and stay valid until
 * the packet is resized or (for skbs) written through a helper. Addresses
 * are copied as they sit in the packet; IPv4 uses word 0 only. */
struct rv_pkt {
	void *l3;
	void *l4;               /* TCP/UDP header, or the ICMP header */
	__u16 l3_off;
	__u16 l4_off;
	__u8 family;            /* 4 or 6 */
	__u8 proto;             /* IPPROTO_TCP/UDP, or IPPROTO_ICMP(V6) */
	__u8 kind;              /* enum rv_pkt_kind */
	__u8 first_frag;        /* RV_PKT_L4 that is the first of several fragments */
	__u8 tcp_flags;
	__be16 sport;
	__be16 dport;
	__be32 frag_id;         /* fragments: IPv4 id (zero-extended) or IPv6 id */
	__u32 src[4];
	__u32 dst[4];
	/* RV_PKT_ICMP_ERR: the quoted packet (same family as the outer one). */
	void *in_l3;
	void *in_l4;
	__u8 in_proto;
	__be16 in_sport;
	__be16 in_dport;
	__u32 in_src[4];
	__u32 in_dst[4];
};

enum rv_parse_result {
	RV_PARSE_OK = 0,
	/* Not a packet Rivora handles: hand it to the kernel untouched. */
	RV_PARSE_PASS = 1,
};

static __always_inline int rv_parse_ports(void *data_end, void *l4, __u8 proto, __be16 *sport, __be16 *dport)
{
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return RV_PARSE_PASS;
	/* Source and destination ports are the first four bytes of both. */
	__be16 *ports = l4;
	if ((void *)(ports + 2) > data_end)
		return RV_PARSE_PASS;
	*sport = ports[0];
	*dport = ports[1];
	return RV_PARSE_OK;
}

/* The quoted packet of an ICMPv4 error: an IPv4 header (with options) and at
 * least the eight L4 bytes RFC 792 guarantees. */
static __always_inline int rv_parse_icmp4_quote(void *data_end, struct rv_pkt *p, struct rv_icmphdr *icmp)
{
	struct iphdr *in = (void *)(icmp + 1);
	__u32 hlen;

	if ((void *)(in + 1) > data_end || in->version != 4 || in->ihl < 5)
		return RV_PARSE_PASS;
	if (in->frag_off & bpf_htons(RV_IP_OFFSET))
		return RV_PARSE_PASS; /* a quoted later fragment has no ports */
	hlen = in->ihl * 4;
	p->in_l3 = in;
	p->in_l4 = (void *)in + hlen;
	p->in_proto = in->protocol;
	p->in_src[0] = in->saddr;
	p->in_dst[0] = in->daddr;
	return rv_parse_ports(data_end, p->in_l4, in->protocol, &p->in_sport, &p->in_dport);
}

/* The quoted packet of an ICMPv6 error: a fixed IPv6 header directly
 * followed by TCP or UDP (quotes with extension headers are passed). */
static __always_inline int rv_parse_icmp6_quote(void *data_end, struct rv_pkt *p, struct rv_icmphdr *icmp)
{
	struct ipv6hdr *in = (void *)(icmp + 1);

	if ((void *)(in + 1) > data_end || in->version != 6)
		return RV_PARSE_PASS;
	p->in_l3 = in;
	p->in_l4 = in + 1;
	p->in_proto = in->nexthdr;
	__builtin_memcpy(p->in_src, &in->saddr, 16);
	__builtin_memcpy(p->in_dst, &in->daddr, 16);
	return rv_parse_ports(data_end, p->in_l4, in->nexthdr, &p->in_sport, &p->in_dport);
}

/* After the network header: TCP/UDP ports, or an ICMP error's quote. */
static __always_inline int rv_parse_l4(void *data_end, struct rv_pkt *p, void *l4, __u8 proto)
{
	p->l4 = l4;
	p->proto = proto;
	if (proto == IPPROTO_ICMP && p->family == 4 && !p->first_frag) {
		struct rv_icmphdr *icmp = l4;
		if ((void *)(icmp + 1) > data_end)
			return RV_PARSE_PASS;
		if (icmp->type != RV_ICMP_DEST_UNREACH && icmp->type != RV_ICMP_TIME_EXCEEDED &&
		    icmp->type != RV_ICMP_PARAMETERPROB)
			return RV_PARSE_PASS; /* echo and the like: the kernel's */
		p->kind = RV_PKT_ICMP_ERR;
		return rv_parse_icmp4_quote(data_end, p, icmp);
	}
	if (proto == IPPROTO_ICMPV6 && p->family == 6 && !p->first_frag) {
		struct rv_icmphdr *icmp = l4;
		if ((void *)(icmp + 1) > data_end)
			return RV_PARSE_PASS;
		if (icmp->type < RV_ICMPV6_DEST_UNREACH || icmp->type > RV_ICMPV6_PARAMPROB)
			return RV_PARSE_PASS; /* informational (echo, ND, ...): the kernel's */
		p->kind = RV_PKT_ICMP_ERR;
		return rv_parse_icmp6_quote(data_end, p, icmp);
	}
	if (rv_parse_ports(data_end, l4, proto, &p->sport, &p->dport))
		return RV_PARSE_PASS;
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end)
			return RV_PARSE_PASS;
		p->tcp_flags = ((__u8 *)th)[13];
	} else {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > data_end)
			return RV_PARSE_PASS;
	}
	p->kind = RV_PKT_L4;
	return RV_PARSE_OK;
}

static __always_inline int rv_parse_ipv4(void *data, void *data_end, struct rv_pkt *p, void *cur)
{
	struct iphdr *ip = cur;
	__u32 hlen;

	if ((void *)(ip + 1) > data_end || ip->version != 4 || ip->ihl < 5)
		return RV_PARSE_PASS;
	hlen = ip->ihl * 4;
	p->family = 4;
	p->src[0] = ip->saddr;
	p->dst[0] = ip->daddr;
	if (ip->frag_off & bpf_htons(RV_IP_MF | RV_IP_OFFSET)) {
		p->frag_id = (__be32)ip->id;
		if (ip->frag_off & bpf_htons(RV_IP_OFFSET)) {
			if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
				return RV_PARSE_PASS;
			p->proto = ip->protocol;
			p->kind = RV_PKT_FRAG_LATER;
			return RV_PARSE_OK;
		}
		p->first_frag = 1;
	}
	cur += hlen;
	if (cur > data_end)
		return RV_PARSE_PASS;
	p->l4_off = cur - data;
	return rv_parse_l4(data_end, p, cur, ip->protocol);
}

static __always_inline int rv_parse_ipv6(void *data, void *data_end, struct rv_pkt *p, void *cur)
{
	struct ipv6hdr *ip6 = cur;
	__u32 ext_bytes = 0;
	__u8 nexthdr;

	if ((void *)(ip6 + 1) > data_end || ip6->version != 6)
		return RV_PARSE_PASS;
	p->family = 6;
	__builtin_memcpy(p->src, &ip6->saddr, 16);
	__builtin_memcpy(p->dst, &ip6->daddr, 16);
	nexthdr = ip6->nexthdr;
	cur = ip6 + 1;

#pragma unroll
	for (int i = 0; i < RV_MAX_IPV6_EXT_HEADERS; i++) {
		if (nexthdr == IPPROTO_HOPOPTS || nexthdr == IPPROTO_DSTOPTS) {
			__u8 *opt = cur;
			__u32 len;

			if ((void *)(opt + 2) > data_end)
				return RV_PARSE_PASS;
			len = ((__u32)opt[1] + 1) * 8;
			ext_bytes += len;
			if (ext_bytes > RV_MAX_IPV6_EXT_BYTES)
				return RV_PARSE_PASS;
			nexthdr = opt[0];
			cur += len;
		} else if (nexthdr == IPPROTO_FRAGMENT) {
			struct rv_ipv6_frag_hdr *fh = cur;
			__u16 off;

			if ((void *)(fh + 1) > data_end)
				return RV_PARSE_PASS;
			ext_bytes += sizeof(*fh);
			if (ext_bytes > RV_MAX_IPV6_EXT_BYTES)
				return RV_PARSE_PASS;
			off = bpf_ntohs(fh->frag_off);
			nexthdr = fh->nexthdr;
			cur = fh + 1;
			if (off & RV_IP6_OFFSET) {
				if (nexthdr != IPPROTO_TCP && nexthdr != IPPROTO_UDP)
					return RV_PARSE_PASS;
				p->frag_id = fh->identification;
				p->proto = nexthdr;
				p->kind = RV_PKT_FRAG_LATER;
				return RV_PARSE_OK;
			}
			if (off & RV_IP6_MF) {
				p->frag_id = fh->identification;
				p->first_frag = 1;
			}
			/* offset 0 and no more fragments: an atomic fragment. */
		} else {
			break;
		}
	}
	/* Still an extension header: the chain is longer than we step over. */
	if (nexthdr == IPPROTO_HOPOPTS || nexthdr == IPPROTO_DSTOPTS || nexthdr == IPPROTO_FRAGMENT)
		return RV_PARSE_PASS;
	if (cur > data_end)
		return RV_PARSE_PASS;
	p->l4_off = cur - data;
	/* Routing, AH, ESP and the rest fall through rv_parse_l4 as PASS. */
	return rv_parse_l4(data_end, p, cur, nexthdr);
}

/* Every header the parser accepts ends within the first RV_PARSE_MAX_OFF
 * + 1 bytes of the frame: the mask of rv_parse_rebase. A power of two
 * minus one, so the mask is one AND. */
#define RV_PARSE_MAX_OFF 511
/* The deepest pointer the parser can leave: the ports of an ICMPv6 error's
 * quote (2 VLAN tags, IPv6 with the most extension bytes allowed, the ICMP
 * header, the quoted fixed IPv6 header). IPv4's deepest (options in both
 * the outer and the quoted header) is shallower. A parser change that
 * allows deeper headers must raise the mask, or the rebase would wrap a
 * pointer to the wrong byte. */
#define RV_PARSE_DEEPEST_OFF                                                                                  \
	(sizeof(struct ethhdr) + RV_MAX_VLAN_TAGS * sizeof(struct rv_vlan_hdr) + sizeof(struct ipv6hdr) +    \
	 RV_MAX_IPV6_EXT_BYTES + sizeof(struct rv_icmphdr) + sizeof(struct ipv6hdr))
_Static_assert(RV_PARSE_DEEPEST_OFF <= RV_PARSE_MAX_OFF, "RV_PARSE_MAX_OFF does not cover the deepest header");
_Static_assert(sizeof(struct ethhdr) + RV_MAX_VLAN_TAGS * sizeof(struct rv_vlan_hdr) + 2 * 60 +
			       sizeof(struct rv_icmphdr) <=
		       RV_PARSE_MAX_OFF,
	       "RV_PARSE_MAX_OFF does not cover the deepest IPv4 header");
_Static_assert((RV_PARSE_MAX_OFF & (RV_PARSE_MAX_OFF + 1)) == 0, "RV_PARSE_MAX_OFF must be 2^n - 1");

/* The parse's packet pointers rebuilt from their offsets: the same
 * addresses at run time. For the verifier, each way through the VLAN and
 * IPv6 extension-header loops leaves a pointer of its own constant offset,
 * it cannot merge those states, and it verified the whole rest of
 * xdp_ingress once per combination (706k processed instructions). Rebuilt
 * as data + (offset & RV_PARSE_MAX_OFF), every way leaves one pointer of a
 * bounded unknown offset, checked against data_end wherever it is used
 * (as every access already is). barrier_var keeps clang from proving the
 * mask a no-op (it knows the offsets' bounds) and dropping the rebase,
 * which it did in some builds (docs/design/verifier-headroom.md). */
static __always_inline void rv_parse_rebase(void *data, struct rv_pkt *p)
{
	__u32 o3 = p->l3_off, o4 = p->l4_off;

	barrier_var(o3);
	barrier_var(o4);
	p->l3 = data + (o3 & RV_PARSE_MAX_OFF);
	p->l4 = data + (o4 & RV_PARSE_MAX_OFF);
	if (p->kind == RV_PKT_ICMP_ERR) {
		__u32 q3 = p->in_l3 - data, q4 = p->in_l4 - data;

		barrier_var(q3);
		barrier_var(q4);
		p->in_l3 = data + (q3 & RV_PARSE_MAX_OFF);
		p->in_l4 = data + (q4 & RV_PARSE_MAX_OFF);
	}
}

static __always_inline int rv_parse_frame(void *data, void *data_end, struct rv_pkt *p);

/* Parses one frame. On RV_PARSE_OK, p->kind says which shape it is.
 * IPv6 frames get their pointers rebased (rv_parse_rebase): only the IPv6
 * parse has loops whose ways leave different offsets worth merging (IPv4's
 * only variable is the header length), and rebasing IPv4 too cost the
 * ICMP-error row 10% for no verifier gain that mattered (the design note's
 * set D). */
static __always_inline int rv_parse(void *data, void *data_end, struct rv_pkt *p)
{
	int rc = rv_parse_frame(data, data_end, p);

	if (rc == RV_PARSE_OK && p->family == 6)
		rv_parse_rebase(data, p);
	return rc;
}

/* rv_parse without the rebase. */
static __always_inline int rv_parse_frame(void *data, void *data_end, struct rv_pkt *p)
{
	struct ethhdr *eth = data;
	void *cur;
	__be16 ethertype;

	if ((void *)(eth + 1) > data_end)
		return RV_PARSE_PASS;
	ethertype = eth->h_proto;
	cur = eth + 1;

#pragma unroll
	for (int i = 0; i < RV_MAX_VLAN_TAGS; i++) {
		if (ethertype != bpf_htons(ETH_P_8021Q) && ethertype != bpf_htons(ETH_P_8021AD))
			break;
		struct rv_vlan_hdr *vh = cur;
		if ((void *)(vh + 1) > data_end)
			return RV_PARSE_PASS;
		ethertype = vh->encap_proto;
		cur = vh + 1;
	}

	p->l3 = cur;
	p->l3_off = cur - data;
	if (ethertype == bpf_htons(ETH_P_IP))
		return rv_parse_ipv4(data, data_end, p, cur);
	if (ethertype == bpf_htons(ETH_P_IPV6))
		return rv_parse_ipv6(data, data_end, p, cur);
	return RV_PARSE_PASS;
}

#endif /* RIVORA_PARSE_H */
