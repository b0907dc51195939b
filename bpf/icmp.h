/* SPDX-License-Identifier: Apache-2.0 */
/*
 * icmp.h: answering a packet that does not fit the L3 DSR tunnel. XDP
 * cannot fragment, so the client is told the path MTU instead: ICMP
 * "fragmentation needed" (IPv4, DF set) or ICMPv6 "packet too big", sent
 * from the VIP back out of the interface it came in on, quoting the
 * offending packet's headers so the client's stack finds the connection.
 */
#ifndef RIVORA_ICMP_H
#define RIVORA_ICMP_H

#include "parse.h"
#include "csum.h"
#include "encap.h"

/* Bytes of the offending packet's payload quoted after its headers: the
 * ports and TCP sequence number the receiver needs. */
#define RV_QUOTE_L4 8
/* IPv6 headers (fixed + extensions) quoted, at most. */
#define RV_QUOTE_MAX (40 + RV_MAX_IPV6_EXT_BYTES + RV_QUOTE_L4)

/* Sum of 16-bit words of [start, start + len) (len even, <= RV_QUOTE_MAX + 8). */
static __always_inline __u32 rv_sum_words(void *start, __u32 len, void *data_end, __u32 sum)
{
	for (__u32 i = 0; i < (RV_QUOTE_MAX + 8) / 2; i++) {
		if (i * 2 >= len)
			break;
		__u16 *w = start + i * 2;
		if ((void *)(w + 1) > data_end)
			break;
		sum += *w;
	}
	return sum;
}

/* Moves the link-layer header (Ethernet and up to two VLAN tags) from
 * `from` to the new frame start, swapping the MAC addresses. */
static __always_inline int rv_move_l2(void *data, void *data_end, __u32 from, __u32 l2)
{
	if (data + from + 22 > data_end)
		return -1;
	__u8 tmp[22];
	__builtin_memcpy(tmp, data + from, 22);
	if (l2 == 14)
		__builtin_memcpy(data, tmp, 14);
	else if (l2 == 18)
		__builtin_memcpy(data, tmp, 18);
	else if (l2 == 22)
		__builtin_memcpy(data, tmp, 22);
	else
		return -1;
	struct ethhdr *eth = data;
	__builtin_memcpy(eth->h_dest, tmp + 6, ETH_ALEN);
	__builtin_memcpy(eth->h_source, tmp, ETH_ALEN);
	return 0;
}

/* Turns the frame into an ICMP error back to its sender (same VLAN), from
 * the address it was sent to, reporting `mtu`. Returns XDP_TX, or XDP_DROP
 * when the frame cannot be reshaped. */
static __always_inline int rv_reply_too_big(struct xdp_md *ctx, struct rv_pkt *p, __u32 mtu, const int v6)
{
	__u32 l2 = p->l3_off;
	__u32 hdr = v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);
	__u32 quote = (p->l4_off - p->l3_off) + RV_QUOTE_L4;
	__u32 add = hdr + 8;
	void *data, *data_end;

	if (quote > RV_QUOTE_MAX || (quote & 1))
		return XDP_DROP;
	if (bpf_xdp_adjust_head(ctx, -(int)add))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (rv_move_l2(data, data_end, add, l2))
		return XDP_DROP;
	/* [l2][new ip][icmp 8][quoted packet...]: trim to the quote. */
	__u32 want = l2 + add + quote;
	if (bpf_xdp_adjust_tail(ctx, (int)want - (int)(data_end - data)))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (l2 > 22)
		return XDP_DROP;
	void *ip = data + l2;
	if (ip + sizeof(struct ipv6hdr) + 8 > data_end)
		return XDP_DROP;
	struct rv_icmphdr *icmp = ip + hdr;
	void *quoted = (void *)(icmp + 1);

	if (!v6) {
		struct iphdr *n = ip;
		struct iphdr *q = quoted;
		if ((void *)(q + 1) > data_end)
			return XDP_DROP;
		n->version = 4;
		n->ihl = 5;
		n->tos = 0;
		n->tot_len = bpf_htons(add + quote);
		n->id = 0;
		n->frag_off = 0;
		n->ttl = 64;
		n->protocol = IPPROTO_ICMP;
		n->check = 0;
		n->saddr = q->daddr;
		n->daddr = q->saddr;
		n->check = rv_ip4_header_csum(n);
		icmp->type = RV_ICMP_DEST_UNREACH;
		icmp->code = 4; /* fragmentation needed and DF set */
		icmp->checksum = 0;
		icmp->rest = bpf_htonl(mtu & 0xffff);
		__u32 sum = rv_sum_words(icmp, 8 + quote, data_end, 0);
		icmp->checksum = ~rv_csum_fold(sum);
		return XDP_TX;
	}
	struct ipv6hdr *n = ip;
	struct ipv6hdr *q = quoted;
	if ((void *)(q + 1) > data_end)
		return XDP_DROP;
	n->version = 6;
	n->priority = 0;
	n->flow_lbl[0] = 0;
	n->flow_lbl[1] = 0;
	n->flow_lbl[2] = 0;
	n->payload_len = bpf_htons(8 + quote);
	n->nexthdr = IPPROTO_ICMPV6;
	n->hop_limit = 64;
	__builtin_memcpy(&n->saddr, &q->daddr, 16);
	__builtin_memcpy(&n->daddr, &q->saddr, 16);
	icmp->type = 2; /* packet too big */
	icmp->code = 0;
	icmp->checksum = 0;
	icmp->rest = bpf_htonl(mtu < 1280 ? 1280 : mtu);
	/* Pseudo-header: addresses, length, next header. */
	__u32 sum = rv_sum_words(&n->saddr, 32, data_end, 0);
	sum += bpf_htons(8 + quote) + bpf_htons(IPPROTO_ICMPV6);
	sum = rv_sum_words(icmp, 8 + quote, data_end, sum);
	icmp->checksum = ~rv_csum_fold(sum);
	return XDP_TX;
}

#endif /* RIVORA_ICMP_H */
