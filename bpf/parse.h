/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parse.h: packet parsing shared by xdp_ingress and tc_nat. One parser for
 * both directions so that what the ingress program keys a flow on is exactly
 * what the egress program looks up.
 */
#ifndef RIVORA_PARSE_H
#define RIVORA_PARSE_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#define RV_IP_MF 0x2000
#define RV_IP_OFFSET 0x1FFF
/* How many VLAN tags are stepped over (802.1Q, and QinQ's outer 802.1ad). */
#define RV_MAX_VLAN_TAGS 2

struct rv_vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

/* What the parser found. Pointers are into the packet and stay valid until
 * the packet is resized or (for skbs) written through a helper. */
struct rv_pkt {
	void *l3;               /* IPv4 or IPv6 header */
	void *l4;               /* TCP or UDP header */
	__u16 l3_off;           /* offsets from the start of the frame */
	__u16 l4_off;
	__u8 family;            /* 4 or 6 */
	__u8 proto;             /* IPPROTO_TCP or IPPROTO_UDP */
	__be16 sport;
	__be16 dport;
};

enum rv_parse_result {
	RV_PARSE_OK = 0,
	/* Not a packet Rivora balances (other protocol, fragment, truncated):
	 * hand it to the kernel untouched. */
	RV_PARSE_PASS = 1,
};

static __always_inline int rv_parse_l4(void *data_end, struct rv_pkt *p, void *l4, __u8 proto)
{
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end)
			return RV_PARSE_PASS;
		p->sport = th->source;
		p->dport = th->dest;
	} else if (proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > data_end)
			return RV_PARSE_PASS;
		p->sport = uh->source;
		p->dport = uh->dest;
	} else {
		return RV_PARSE_PASS;
	}
	p->l4 = l4;
	p->proto = proto;
	return RV_PARSE_OK;
}

/* Parses Ethernet, up to two VLAN tags, IPv4 (with options) or the fixed
 * IPv6 header, then TCP or UDP. */
static __always_inline int rv_parse(void *data, void *data_end, struct rv_pkt *p)
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
	if (ethertype == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = cur;
		__u32 hlen;

		if ((void *)(ip + 1) > data_end)
			return RV_PARSE_PASS;
		if (ip->version != 4 || ip->ihl < 5)
			return RV_PARSE_PASS;
		/* Fragments are passed to the kernel for now. */
		if (ip->frag_off & bpf_htons(RV_IP_MF | RV_IP_OFFSET))
			return RV_PARSE_PASS;
		hlen = ip->ihl * 4;
		cur += hlen;
		if (cur > data_end)
			return RV_PARSE_PASS;
		p->family = 4;
		p->l4_off = cur - data;
		return rv_parse_l4(data_end, p, cur, ip->protocol);
	}
	if (ethertype == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cur;

		if ((void *)(ip6 + 1) > data_end)
			return RV_PARSE_PASS;
		if (ip6->version != 6)
			return RV_PARSE_PASS;
		cur = ip6 + 1;
		p->family = 6;
		p->l4_off = cur - data;
		return rv_parse_l4(data_end, p, cur, ip6->nexthdr);
	}
	return RV_PARSE_PASS;
}

#endif /* RIVORA_PARSE_H */
