/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tc_nat: TCX egress program, full NAT only. A backend's reply leaves with
 * the VIP address and port as its source (found as reverse.h says: by its
 * endpoint when that serves one VIP, else by nat_reverse_map), so the client
 * only ever sees the VIP. The later fragments of a reply follow its
 * first fragment (frag_rev_map), and an ICMP error a backend sends about a
 * client's packet is rewritten to come from the VIP, quoted packet included.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "rivora_abi.h"
#include "maps.h"
#include "parse.h"
#include "nat.h"
#include "reverse.h"

char LICENSE[] SEC("license") = "GPL";

/* TCX verdicts (linux/bpf.h of 6.6+; the 6.1 UAPI headers here lack them).
 * TCX_NEXT hands the packet to the next program on the link, or lets it
 * through when there is none: we never stop other programs' processing. */
#ifndef TCX_NEXT
#define TCX_NEXT -1
#endif

/* Enough linear data for Ethernet, two VLAN tags, IPv6 with extension
 * headers and TCP, or an ICMPv6 error quoting IPv6 and TCP. */
#define RV_TC_PULL_LEN 256

static __always_inline void rv_count_reply(__u32 service_id, __u64 bytes)
{
	struct rv_vip_stats *s = bpf_map_lookup_elem(&stats_map, &service_id);

	if (s) {
		s->reply_packets++;
		s->reply_bytes += bytes;
	}
}

static __always_inline void rv_frag_rev_record(const struct rv_pkt *p, const __u32 *vip, __u32 service_id,
					       const int v6)
{
	if (v6) {
		struct rv_frag_key6 k = { .id = p->frag_id, .proto = p->proto };
		struct rv_frag_rev_value6 v = { .service_id = service_id };
		__builtin_memcpy(k.src, p->src, 16);
		__builtin_memcpy(k.dst, p->dst, 16);
		__builtin_memcpy(v.vip, vip, 16);
		bpf_map_update_elem(&frag_rev_map6, &k, &v, BPF_ANY);
	} else {
		struct rv_frag_key4 k = { .src = p->src[0], .dst = p->dst[0], .id = p->frag_id, .proto = p->proto };
		struct rv_frag_rev_value4 v = { .vip = vip[0], .service_id = service_id };
		bpf_map_update_elem(&frag_rev_map, &k, &v, BPF_ANY);
	}
}

/* An unfragmented reply or a first fragment. The addresses, the port and
 * the IPv4 header checksum are written in place (the verifier's prologue
 * un-clones the skb first, because this program writes packet data). The
 * L4 checksum is left to bpf_l4_csum_replace: a forwarded skb may carry a
 * partial (offloaded) checksum, which holds only the pseudo-header sum, and
 * only the kernel knows which kind it has. Each call gets a precomputed
 * difference, so there is one call for the address (part of the
 * pseudo-header) and one for the port, skipped when the port stays. */
static __always_inline int rv_egress_l4(struct __sk_buff *skb, struct rv_pkt *p, const int v6)
{
	void *data_end = (void *)(long)skb->data_end;
	__u32 vip[4] = {};
	__be16 vip_port;
	__u32 service_id, addr_diff;
	__u64 flags = p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 check_off = p->l4_off + rv_l4_csum_off(p->proto);
	__be16 *ports = p->l4;
	__be16 old_port = p->sport;

	if (rv_reverse(p->src, p->dst, p->sport, p->dport, p->proto, vip, &vip_port, &service_id, v6))
		return TCX_NEXT;
	rv_count_reply(service_id, skb->len);
	if (p->first_frag)
		rv_frag_rev_record(p, vip, service_id, v6);

	if ((void *)(ports + 2) > data_end)
		return TCX_NEXT;
	addr_diff = rv_addr_diff(0, p->src, vip, v6);
	if (v6) {
		struct ipv6hdr *ip6 = p->l3;
		if ((void *)(ip6 + 1) > data_end)
			return TCX_NEXT;
		__builtin_memcpy(&ip6->saddr, vip, 16);
	} else {
		struct iphdr *ip = p->l3;
		if ((void *)(ip + 1) > data_end)
			return TCX_NEXT;
		ip->check = rv_csum_apply(ip->check, addr_diff);
		ip->saddr = vip[0];
	}
	ports[0] = vip_port;
	/* Packet pointers are invalid after the first helper call. */
	bpf_l4_csum_replace(skb, check_off, 0, addr_diff, flags | BPF_F_PSEUDO_HDR);
	if (vip_port != old_port)
		bpf_l4_csum_replace(skb, check_off, 0, rv_csum_diff16(0, old_port, vip_port), flags);
	return TCX_NEXT;
}

/* A later fragment of a reply: the source its first fragment got. */
static __always_inline int rv_egress_frag(struct __sk_buff *skb, struct rv_pkt *p, const int v6)
{
	void *data_end = (void *)(long)skb->data_end;
	__u32 vip[4] = {};
	__u32 service_id;

	if (v6) {
		struct rv_frag_key6 k = { .id = p->frag_id, .proto = p->proto };
		__builtin_memcpy(k.src, p->src, 16);
		__builtin_memcpy(k.dst, p->dst, 16);
		struct rv_frag_rev_value6 *v = bpf_map_lookup_elem(&frag_rev_map6, &k);
		if (!v)
			return TCX_NEXT;
		__builtin_memcpy(vip, v->vip, 16);
		service_id = v->service_id;
	} else {
		struct rv_frag_key4 k = { .src = p->src[0], .dst = p->dst[0], .id = p->frag_id, .proto = p->proto };
		struct rv_frag_rev_value4 *v = bpf_map_lookup_elem(&frag_rev_map, &k);
		if (!v)
			return TCX_NEXT;
		vip[0] = v->vip;
		service_id = v->service_id;
	}
	rv_count_reply(service_id, skb->len);
	rv_nat_frag(p, data_end, vip, 1, v6);
	return TCX_NEXT;
}

/* An ICMP error a backend sends about a client's packet (e.g. port
 * unreachable for a UDP datagram): the quote is client:cport ->
 * backend:bport, which is the reverse of the reply flow. It must leave from
 * the VIP and quote the packet the client actually sent (to the VIP). */
static __always_inline int rv_egress_icmp(struct __sk_buff *skb, struct rv_pkt *p, const int v6)
{
	void *data_end = (void *)(long)skb->data_end;
	__u32 vip[4] = {};
	__be16 vip_port;
	__u32 service_id;

	if (rv_reverse(p->in_dst, p->in_src, p->in_dport, p->in_sport, p->in_proto, vip, &vip_port, &service_id, v6))
		return TCX_NEXT;
	rv_count_reply(service_id, skb->len);
	rv_nat_icmp(p, data_end, vip, vip_port, 1, 0, v6);
	return TCX_NEXT;
}

static __always_inline int rv_egress(struct __sk_buff *skb, struct rv_pkt *p, const int v6)
{
	if (p->kind == RV_PKT_L4)
		return rv_egress_l4(skb, p, v6);
	if (p->kind == RV_PKT_FRAG_LATER)
		return rv_egress_frag(skb, p, v6);
	return rv_egress_icmp(skb, p, v6);
}

SEC("classifier")
int tc_nat(struct __sk_buff *skb)
{
	struct rv_pkt p = {};

	if (skb->data_end - skb->data < RV_TC_PULL_LEN && skb->len > skb->data_end - skb->data)
		bpf_skb_pull_data(skb, skb->len < RV_TC_PULL_LEN ? skb->len : RV_TC_PULL_LEN);
	if (rv_parse((void *)(long)skb->data, (void *)(long)skb->data_end, &p) != RV_PARSE_OK)
		return TCX_NEXT;
	if (p.family == 4)
		return rv_egress(skb, &p, 0);
	return rv_egress(skb, &p, 1);
}
