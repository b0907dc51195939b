/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tc_nat: TCX egress program, full NAT only. A backend's reply that matches
 * nat_reverse_map leaves with the VIP address and port as its source, so the
 * client only ever sees the VIP.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "rivora_abi.h"
#include "maps.h"
#include "parse.h"

char LICENSE[] SEC("license") = "GPL";

/* TCX verdicts (linux/bpf.h of 6.6+; the 6.1 UAPI headers here lack them).
 * TCX_NEXT hands the packet to the next program on the link, or lets it
 * through when there is none: we never stop other programs' processing. */
#ifndef TCX_NEXT
#define TCX_NEXT -1
#endif

/* Enough linear data for Ethernet, two VLAN tags, IPv6 and TCP. */
#define RV_TC_PULL_LEN 128

static __always_inline void rv_count_reply(__u32 service_id, __u64 bytes)
{
	struct rv_vip_stats *s = bpf_map_lookup_elem(&stats_map, &service_id);

	if (s) {
		s->reply_packets++;
		s->reply_bytes += bytes;
	}
}

static __always_inline __u64 rv_l4_csum_flags(__u8 proto)
{
	/* UDP: keep a zero (absent) IPv4 checksum, never produce a zero one. */
	return proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
}

static __always_inline __u32 rv_l4_check_off(const struct rv_pkt *p)
{
	return p->l4_off + (p->proto == IPPROTO_TCP ? offsetof(struct tcphdr, check)
						    : offsetof(struct udphdr, check));
}

/* L4 source port: same offset in TCP and UDP. */
static __always_inline __u32 rv_l4_sport_off(const struct rv_pkt *p)
{
	return p->l4_off + offsetof(struct udphdr, source);
}

static __always_inline int rv_snat4(struct __sk_buff *skb, struct rv_pkt *p)
{
	void *data_end = (void *)(long)skb->data_end;
	struct iphdr *ip = p->l3;
	struct rv_nat_key4 nk = {};
	struct rv_nat_value4 *nv;
	__be32 old_addr, new_addr;
	__be16 old_port, new_port;
	__u64 flags = rv_l4_csum_flags(p->proto);
	__u32 check_off = rv_l4_check_off(p);

	if ((void *)(ip + 1) > data_end)
		return TCX_NEXT;
	nk.src = ip->saddr;
	nk.dst = ip->daddr;
	nk.sport = p->sport;
	nk.dport = p->dport;
	nk.proto = p->proto;
	nv = bpf_map_lookup_elem(&nat_reverse_map, &nk);
	if (!nv)
		return TCX_NEXT;

	old_addr = ip->saddr;
	new_addr = nv->vip;
	old_port = p->sport;
	new_port = nv->vip_port;
	rv_count_reply(nv->service_id, skb->len);

	bpf_l4_csum_replace(skb, check_off, old_addr, new_addr, flags | BPF_F_PSEUDO_HDR | sizeof(new_addr));
	bpf_l4_csum_replace(skb, check_off, old_port, new_port, flags | sizeof(new_port));
	bpf_l3_csum_replace(skb, p->l3_off + offsetof(struct iphdr, check), old_addr, new_addr, sizeof(new_addr));
	bpf_skb_store_bytes(skb, p->l3_off + offsetof(struct iphdr, saddr), &new_addr, sizeof(new_addr), 0);
	bpf_skb_store_bytes(skb, rv_l4_sport_off(p), &new_port, sizeof(new_port), 0);
	return TCX_NEXT;
}

static __always_inline int rv_snat6(struct __sk_buff *skb, struct rv_pkt *p)
{
	void *data_end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip6 = p->l3;
	struct rv_nat_key6 nk = {};
	struct rv_nat_value6 *nv;
	__u8 old_addr[16], new_addr[16];
	__be16 old_port, new_port;
	__u64 flags = rv_l4_csum_flags(p->proto);
	__u32 check_off = rv_l4_check_off(p);
	__s64 diff;

	if ((void *)(ip6 + 1) > data_end)
		return TCX_NEXT;
	__builtin_memcpy(nk.src, &ip6->saddr, 16);
	__builtin_memcpy(nk.dst, &ip6->daddr, 16);
	nk.sport = p->sport;
	nk.dport = p->dport;
	nk.proto = p->proto;
	nv = bpf_map_lookup_elem(&nat_reverse_map6, &nk);
	if (!nv)
		return TCX_NEXT;

	__builtin_memcpy(old_addr, nk.src, 16);
	__builtin_memcpy(new_addr, nv->vip, 16);
	old_port = p->sport;
	new_port = nv->vip_port;
	rv_count_reply(nv->service_id, skb->len);

	diff = bpf_csum_diff((__be32 *)old_addr, 16, (__be32 *)new_addr, 16, 0);
	if (diff < 0)
		return TCX_NEXT;
	bpf_l4_csum_replace(skb, check_off, 0, diff, flags | BPF_F_PSEUDO_HDR);
	bpf_l4_csum_replace(skb, check_off, old_port, new_port, flags | sizeof(new_port));
	bpf_skb_store_bytes(skb, p->l3_off + offsetof(struct ipv6hdr, saddr), new_addr, 16, 0);
	bpf_skb_store_bytes(skb, rv_l4_sport_off(p), &new_port, sizeof(new_port), 0);
	return TCX_NEXT;
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
		return rv_snat4(skb, &p);
	return rv_snat6(skb, &p);
}
