/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reset.h: refusing a new TCP flow of a VIP's refused share
 * (VipSpec::reject_weight; balance.h RV_PICK_REFUSE) with a reset, built in
 * place from the client's segment and sent back out of the interface it
 * came in on (XDP_TX), so the client learns at once that the connection
 * is refused instead of retrying a SYN into silence (Gateway API: "MUST
 * reject the connections", a TCPRoute's invalid backendRef share).
 *
 * The reset follows RFC 793 section 3.4, "Reset Generation", case 1 (no
 * connection exists): if the segment has ACK set, the reset's sequence
 * number is the segment's acknowledgment number and the reset carries no
 * ACK; otherwise its sequence number is 0 and it acknowledges SEG.SEQ +
 * SEG.LEN (the payload, plus one for SYN and one for FIN) with ACK set.
 * A reset is never answered (RFC 793: "an incoming segment containing a
 * RST is discarded"), nor a first fragment (SEG.LEN is the datagram's,
 * not known here): those are dropped, and so is any other packet of the
 * refused share (UDP): xdp_ingress sends all of it here, counted, so its
 * own path gains one branch instead of this decision.
 *
 * The frame keeps its link-layer header (Ethernet and up to two VLAN
 * tags), MACs swapped; the network header is written fresh (IPv4 without
 * options, IPv6 without extension headers, TTL or hop limit 64), addresses
 * and ports swapped, and the TCP header is 20 bytes without options or
 * payload, window 0: 40 bytes of IPv4 and TCP, 60 of IPv6 and TCP
 * (bpf_xdp_adjust_tail trims the rest). Both checksums are computed over
 * the new headers, not patched. Runs as a tail-call stage (stages.h): a
 * refused flow is rare, and xdp_ingress's stack and verifier budget have
 * no room for a second frame writer.
 */
#ifndef RIVORA_RESET_H
#define RIVORA_RESET_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "parse.h"
#include "csum.h"
#include "encap.h"

/* What the reset keeps of the client's segment, read before the frame is
 * trimmed and rewritten (the new headers overlap the old ones). */
struct rv_reset_of {
	__u32 src[4];
	__u32 dst[4];
	__be16 sport;
	__be16 dport;
	__be32 seq;
	__be32 ack;
	__u8 flags;
};

/* The one's-complement sum (of words as they sit in memory) of the
 * pseudo-header of IPv4 or IPv6 for a 20-byte TCP segment between the two
 * addresses (their order does not change the sum). */
static __always_inline __u32 rv_reset_pseudo(const __u32 *src, const __u32 *dst, const int v6)
{
	__u32 sum = 0;

	sum = rv_csum_add(sum, src[0]);
	sum = rv_csum_add(sum, dst[0]);
	if (v6) {
#pragma unroll
		for (int i = 1; i < 4; i++) {
			sum = rv_csum_add(sum, src[i]);
			sum = rv_csum_add(sum, dst[i]);
		}
	}
	/* Zero, protocol, TCP length (IPv4's 12-byte pseudo-header; IPv6's
	 * 32-bit length and next header sum to the same). */
	return rv_csum_add(sum, bpf_htonl((IPPROTO_TCP << 16) | sizeof(struct tcphdr)));
}

/* Turns the TCP segment in the frame into the reset that refuses it.
 * Returns XDP_TX, or XDP_DROP for anything it cannot answer (not a whole
 * TCP segment of the family, a reset, a fragment, lengths that do not add
 * up). */
static __always_inline int rv_tcp_reset(struct xdp_md *ctx, const int v6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct rv_reset_of r = {};
	struct rv_pkt p = {};
	__u32 l4_len, hdr = v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);

	if (rv_parse(data, data_end, &p) != RV_PARSE_OK || p.kind != RV_PKT_L4 || p.proto != IPPROTO_TCP ||
	    p.family != (v6 ? 6 : 4) || p.first_frag)
		return XDP_DROP;
	struct tcphdr *th = p.l4;
	if ((void *)(th + 1) > data_end)
		return XDP_DROP;
	if (v6) {
		struct ipv6hdr *ip6 = p.l3;
		if ((void *)(ip6 + 1) > data_end)
			return XDP_DROP;
		/* The payload length covers the extension headers too. */
		l4_len = bpf_ntohs(ip6->payload_len) - (__u32)(p.l4_off - p.l3_off - sizeof(struct ipv6hdr));
	} else {
		struct iphdr *ip = p.l3;
		if ((void *)(ip + 1) > data_end)
			return XDP_DROP;
		l4_len = bpf_ntohs(ip->tot_len) - (__u32)(p.l4_off - p.l3_off);
	}
	__u32 doff = th->doff * 4;
	if (doff < sizeof(struct tcphdr) || l4_len < doff || l4_len > 0xffff)
		return XDP_DROP;
	r.flags = ((__u8 *)th)[13];
	if (r.flags & RV_TCP_FLAG_RST)
		return XDP_DROP;
	__builtin_memcpy(r.src, p.src, 16);
	__builtin_memcpy(r.dst, p.dst, 16);
	r.sport = th->source;
	r.dport = th->dest;
	if (r.flags & RV_TCP_FLAG_ACK) {
		r.seq = th->ack_seq;
	} else {
		__u32 seg_len = l4_len - doff + !!(r.flags & RV_TCP_FLAG_SYN) + !!(r.flags & RV_TCP_FLAG_FIN);
		r.ack = bpf_htonl(bpf_ntohl(th->seq) + seg_len);
	}

	__u32 l2 = p.l3_off;
	if (l2 > sizeof(struct ethhdr) + RV_MAX_VLAN_TAGS * sizeof(struct rv_vlan_hdr))
		return XDP_DROP;
	/* The new frame is never longer than the old one: a TCP segment has
	 * at least these headers. */
	if (bpf_xdp_adjust_tail(ctx, (int)(l2 + hdr + sizeof(struct tcphdr)) - (int)(data_end - data)))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *l3 = data + l2;
	if ((void *)(eth + 1) > data_end || l3 + hdr + sizeof(struct tcphdr) > data_end)
		return XDP_DROP;
	__u8 mac[ETH_ALEN];
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);

	struct tcphdr *t = l3 + hdr;
	if (v6) {
		struct ipv6hdr *n = l3;
		n->version = 6;
		n->priority = 0;
		n->flow_lbl[0] = 0;
		n->flow_lbl[1] = 0;
		n->flow_lbl[2] = 0;
		n->payload_len = bpf_htons(sizeof(struct tcphdr));
		n->nexthdr = IPPROTO_TCP;
		n->hop_limit = 64;
		__builtin_memcpy(&n->saddr, r.dst, 16);
		__builtin_memcpy(&n->daddr, r.src, 16);
	} else {
		struct iphdr *n = l3;
		n->version = 4;
		n->ihl = 5;
		n->tos = 0;
		n->tot_len = bpf_htons(sizeof(struct iphdr) + sizeof(struct tcphdr));
		n->id = 0;
		n->frag_off = bpf_htons(0x4000); /* DF: a reset is never fragmented */
		n->ttl = 64;
		n->protocol = IPPROTO_TCP;
		n->check = 0;
		n->saddr = r.dst[0];
		n->daddr = r.src[0];
		n->check = rv_ip4_header_csum(n);
	}
	t->source = r.dport;
	t->dest = r.sport;
	t->seq = r.seq;
	t->ack_seq = r.ack;
	/* Data offset 5 words, then the flags byte: RST, and ACK when the
	 * client's segment had none. */
	((__u8 *)t)[12] = 5 << 4;
	((__u8 *)t)[13] = RV_TCP_FLAG_RST | (r.flags & RV_TCP_FLAG_ACK ? 0 : RV_TCP_FLAG_ACK);
	t->window = 0;
	t->check = 0;
	t->urg_ptr = 0;
	__u32 sum = rv_reset_pseudo(r.src, r.dst, v6);
	const __u32 *w = (const __u32 *)t;
#pragma unroll
	for (int i = 0; i < 5; i++)
		sum = rv_csum_add(sum, w[i]);
	t->check = ~rv_csum_fold(sum);
	return XDP_TX;
}

#endif /* RIVORA_RESET_H */
