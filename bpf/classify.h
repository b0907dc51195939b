/* SPDX-License-Identifier: Apache-2.0 */
/*
 * classify.h: the classifier stage (Meridio-2's resource model). For a
 * packet to a classifier VIP (cls_vip_map(6): a whole address), in order:
 *
 *  1. Parse: TCP, UDP, SCTP (ports and the fixed header's bytes), ICMP
 *     echo and the other informational types (hashed on the identifier),
 *     ICMP errors (classified and hashed as the flow they quote, turned
 *     back to the client's direction, so an error follows its flow), later
 *     fragments (follow their first fragment). Other protocols match no
 *     rule. NDP and MLD to the address stay the kernel's.
 *  2. Classify: the VIP's rules, in the order the control plane wrote them
 *     (priority high to low, then name), the first that matches wins:
 *     protocol, source prefix (cls_src_map(6)), destination and source
 *     port ranges, byte matches of the packet's protocol. Echo matches on
 *     addresses only (nfqlb's promiscuous ping); an ICMP error never
 *     matches a rule with byte matches for its protocol (the quote is the
 *     reply's header, not the request's). No match: dropped, counted.
 *  3. Pick: the rule's group's table of the packet's family (cls_table,
 *     a Maglev table of the group's stable slots, the same on every
 *     replica) at hash % size names a slot, cls_target_map the slot's
 *     address. A group without a target of the family drops the packet at
 *     this rule's priority: it never falls through to a lower rule.
 *  4. Forward without NAT: the destination stays the VIP (the target owns
 *     it); the FIB routes to the target's address as next hop, out of
 *     whatever interface it says, as a router would (TTL down, MACs of the
 *     hop). Over the route's MTU: fragmentation needed / packet too big
 *     from the VIP (IPv4 with DF, IPv6); TTL expiring: the kernel answers.
 *
 * The stage is its own program (stages.h): xdp_ingress only checks that
 * the destination is a classifier VIP (one array read when there are none)
 * and jumps. The rule loop runs in bpf_loop so the verifier checks one
 * rule's evaluation once, not once per position.
 */
#ifndef RIVORA_CLASSIFY_H
#define RIVORA_CLASSIFY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "rivora_abi.h"
#include "cls_maps.h"
#include "parse.h"
#include "hash.h"
#include "icmp.h"
#include "route.h"

#define RV_IPPROTO_SCTP 132
#define RV_ICMP_SOURCE_QUENCH 4
#define RV_ICMP_REDIRECT 5
#define RV_ICMPV6_MLD_FIRST 130
#define RV_ICMPV6_NDP_LAST 137
#define RV_ICMPV6_MLD2_REPORT 143
#define RV_IP_DF 0x4000

/* What the parse found (rv_cls_pkt.kind). */
enum rv_cls_kind {
	/* TCP, UDP or SCTP with its ports: unfragmented, or a first fragment. */
	RV_CLS_KIND_L4 = 0,
	/* Informational ICMP (echo...): hashed on its identifier. */
	RV_CLS_KIND_ECHO = 1,
	/* An ICMP error quoting a TCP, UDP or SCTP packet the VIP sent. */
	RV_CLS_KIND_ICMP_ERR = 2,
	/* A later fragment (no L4 header). */
	RV_CLS_KIND_FRAG = 3,
	/* Any other protocol: no rule matches it. */
	RV_CLS_KIND_OTHER = 4,
};

enum rv_cls_parse_result {
	RV_CLS_PARSE_OK = 0,
	/* Not ours to touch (NDP, MLD, a VLAN-tagged frame): the kernel's. */
	RV_CLS_PARSE_KERNEL = 1,
	/* Truncated or inconsistent headers: dropped, counted. */
	RV_CLS_PARSE_BAD = 2,
};

/* Room for a byte match at the largest offset the mask allows (31) plus
 * its 4 bytes, so a masked offset never reads outside the array; the
 * match is still checked against hdr_len, the bytes really copied. */
#define RV_CLS_HDR_ROOM 36

/* One packet as the classifier sees it. src/dst/ports/proto are the
 * flow's in the client's direction (for an ICMP error, the quoted
 * packet's, swapped); vip is the address the packet was sent to. */
struct rv_cls_pkt {
	__u32 src[4];
	__u32 dst[4];
	__u32 vip[4];
	__be32 frag_id;
	__u16 l3_off;
	__u16 l4_off;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 kind;       /* enum rv_cls_kind */
	__u8 first_frag; /* an L4 packet that is the first of several fragments */
	__u8 hdr_len;    /* bytes of hdr copied from the L4 header */
	/* The protocol a datagram's fragments are keyed by: IPv4's protocol
	 * field, IPv6's Fragment header's next header (the same in the first
	 * and the later fragments, where the final protocol may sit behind
	 * more extension headers in the first). */
	__u8 frag_proto;
	__u8 pad[3];
	__u8 hdr[RV_CLS_HDR_ROOM];
};

/* One packet's working memory, per CPU: the parse, a copy of the VIP's
 * rule list and the rule loop's answer. In a map rather than on the
 * stack: the bpf_loop callback reads it (its context argument could only
 * point at the stack, whose 512 bytes the parse and the FIB share). */
struct rv_cls_scratch {
	struct rv_cls_pkt pkt;
	struct rv_cls_vip vip;
	__u32 rule_id;  /* the matching rule, or RV_CLS_NONE */
	__u32 group_id; /* its group */
	__u32 v6;
};

#define RV_CLS_NONE 0xffffffffu
_Static_assert((RV_CLS_MAX_RULES_PER_VIP & (RV_CLS_MAX_RULES_PER_VIP - 1)) == 0,
	       "rv_cls_rule_step masks the rule index with RV_CLS_MAX_RULES_PER_VIP - 1");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_cls_scratch);
} cls_scratch_map SEC(".maps");

static __always_inline struct rv_cls_scratch *rv_cls_scratch(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&cls_scratch_map, &zero);
}

static __always_inline void rv_cls_event(__u32 event)
{
	__u64 *n = bpf_map_lookup_elem(&cls_event_map, &event);

	if (n)
		*n += 1;
}

/* Whether xdp_ingress should hand the packet to the classifier stage:
 * classifier VIPs of the family exist (one inlined array read) and the
 * destination is one of them. */
static __always_inline int rv_cls_wants(const __u32 *dst, const int v6)
{
	__u32 zero = 0;
	struct rv_cls_ctl *ctl = bpf_map_lookup_elem(&cls_ctl_map, &zero);

	if (!ctl || !(ctl->flags & (v6 ? RV_CLS_CTL_V6 : RV_CLS_CTL_V4)))
		return 0;
	/* Keys of their own: the caller's parse holds packet pointers the
	 * verifier must keep tracking, and a helper reading the parse's
	 * stack slots in place loses them (nat.h's access through p->l4
	 * was refused as a scalar). */
	if (v6) {
		__u32 k6[4];
#pragma unroll
		for (int i = 0; i < 4; i++) {
			__u32 w = dst[i];
			barrier_var(w);
			k6[i] = w;
		}
		return bpf_map_lookup_elem(&cls_vip_map6, k6) != 0;
	}
	__u32 w = dst[0];
	barrier_var(w);
	struct rv_cls_vip_key4 k4 = { .addr = w };
	return bpf_map_lookup_elem(&cls_vip_map, &k4) != 0;
}

/* The fixed header of a balanced protocol: how many bytes byte matches may
 * read (RuleProto::header_len in the control plane), 0 for the others. */
static __always_inline __u32 rv_cls_header_len(__u8 proto)
{
	if (proto == IPPROTO_TCP)
		return 20;
	if (proto == IPPROTO_UDP)
		return 8;
	if (proto == RV_IPPROTO_SCTP)
		return 12;
	return 0;
}

/* The quoted packet of an ICMP error: its IP header (IPv4 with options,
 * IPv6 fixed) and its ports, stored as the flow in the client's
 * direction. */
static __always_inline int rv_cls_parse_quote(void *data_end, struct rv_cls_pkt *p, void *in, const int v6)
{
	__be16 *ports;
	__u8 proto;

	if (v6) {
		struct ipv6hdr *q = in;
		if ((void *)(q + 1) > data_end || q->version != 6)
			return RV_CLS_PARSE_BAD;
		proto = q->nexthdr;
		__builtin_memcpy(p->src, &q->daddr, 16);
		__builtin_memcpy(p->dst, &q->saddr, 16);
		ports = (void *)(q + 1);
	} else {
		struct iphdr *q = in;
		if ((void *)(q + 1) > data_end || q->version != 4 || q->ihl < 5)
			return RV_CLS_PARSE_BAD;
		if (q->frag_off & bpf_htons(RV_IP_OFFSET))
			return RV_CLS_PARSE_BAD; /* a quoted later fragment has no ports */
		proto = q->protocol;
		p->src[0] = q->daddr;
		p->dst[0] = q->saddr;
		ports = in + q->ihl * 4;
	}
	if (!rv_cls_header_len(proto))
		return RV_CLS_PARSE_BAD;
	if ((void *)(ports + 2) > data_end)
		return RV_CLS_PARSE_BAD;
	p->proto = proto;
	p->sport = ports[1];
	p->dport = ports[0];
	p->kind = RV_CLS_KIND_ICMP_ERR;
	return RV_CLS_PARSE_OK;
}

/* After the network header (p->l4_off set): the L4 shape. */
static __always_inline int rv_cls_parse_l4(struct xdp_md *ctx, struct rv_cls_pkt *p, __u8 proto, const int v6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	void *l4 = data + (p->l4_off & RV_PARSE_MAX_OFF);
	__u32 len = rv_cls_header_len(proto);

	p->proto = proto;
	if (len) {
		/* Three constant lengths, so the helper's size is known. */
		long rc;
		if (len == 20)
			rc = bpf_xdp_load_bytes(ctx, p->l4_off, p->hdr, 20);
		else if (len == 12)
			rc = bpf_xdp_load_bytes(ctx, p->l4_off, p->hdr, 12);
		else
			rc = bpf_xdp_load_bytes(ctx, p->l4_off, p->hdr, 8);
		if (rc)
			return RV_CLS_PARSE_BAD;
		p->hdr_len = len;
		p->sport = ((__be16 *)p->hdr)[0];
		p->dport = ((__be16 *)p->hdr)[1];
		p->kind = RV_CLS_KIND_L4;
		return RV_CLS_PARSE_OK;
	}
	if (proto == (v6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP)) {
		struct rv_icmphdr *icmp = l4;
		__u8 type;

		if ((void *)(icmp + 1) > data_end)
			return RV_CLS_PARSE_BAD;
		type = icmp->type;
		if (v6 ? (type >= RV_ICMPV6_DEST_UNREACH && type <= RV_ICMPV6_PARAMPROB)
		       : (type == RV_ICMP_DEST_UNREACH || type == RV_ICMP_SOURCE_QUENCH || type == RV_ICMP_REDIRECT ||
			  type == RV_ICMP_TIME_EXCEEDED || type == RV_ICMP_PARAMETERPROB)) {
			if (p->first_frag)
				return RV_CLS_PARSE_BAD; /* a fragmented error: nfqlb drops it too */
			return rv_cls_parse_quote(data_end, p, icmp + 1, v6);
		}
		if (v6 && ((type >= RV_ICMPV6_MLD_FIRST && type <= RV_ICMPV6_NDP_LAST) || type == RV_ICMPV6_MLD2_REPORT))
			return RV_CLS_PARSE_KERNEL;
		/* Echo and the other informational types: the identifier (the
		 * first half of the rest word) takes the source port's place. */
		p->sport = *(__be16 *)&icmp->rest;
		p->dport = 0;
		p->kind = RV_CLS_KIND_ECHO;
		return RV_CLS_PARSE_OK;
	}
	p->kind = RV_CLS_KIND_OTHER;
	return RV_CLS_PARSE_OK;
}

static __always_inline int rv_cls_parse_ipv4(struct xdp_md *ctx, struct rv_cls_pkt *p, void *cur)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = cur;
	__u32 hlen;

	if ((void *)(ip + 1) > data_end || ip->version != 4 || ip->ihl < 5)
		return RV_CLS_PARSE_BAD;
	hlen = ip->ihl * 4;
	p->src[0] = ip->saddr;
	p->dst[0] = ip->daddr;
	p->vip[0] = ip->daddr;
	cur += hlen;
	if (cur > data_end)
		return RV_CLS_PARSE_BAD;
	p->frag_proto = ip->protocol;
	/* Where the L4 header is, or a later fragment's data starts (what a
	 * too-big answer quotes 8 bytes of). */
	p->l4_off = cur - data;
	if (ip->frag_off & bpf_htons(RV_IP_MF | RV_IP_OFFSET)) {
		p->frag_id = (__be32)ip->id;
		if (ip->frag_off & bpf_htons(RV_IP_OFFSET)) {
			p->proto = ip->protocol;
			p->kind = RV_CLS_KIND_FRAG;
			return RV_CLS_PARSE_OK;
		}
		p->first_frag = 1;
	}
	p->l4_off = cur - data;
	return rv_cls_parse_l4(ctx, p, ip->protocol, 0);
}

static __always_inline int rv_cls_parse_ipv6(struct xdp_md *ctx, struct rv_cls_pkt *p, void *cur)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = cur;
	__u32 ext_bytes = 0;
	int seen_frag = 0;
	__u8 nexthdr;

	if ((void *)(ip6 + 1) > data_end || ip6->version != 6)
		return RV_CLS_PARSE_BAD;
	__builtin_memcpy(p->src, &ip6->saddr, 16);
	__builtin_memcpy(p->dst, &ip6->daddr, 16);
	__builtin_memcpy(p->vip, &ip6->daddr, 16);
	nexthdr = ip6->nexthdr;
	cur = ip6 + 1;
#pragma unroll
	for (int i = 0; i < RV_MAX_IPV6_EXT_HEADERS; i++) {
		if (nexthdr == IPPROTO_HOPOPTS || nexthdr == IPPROTO_DSTOPTS) {
			__u8 *opt = cur;
			__u32 len;

			if ((void *)(opt + 2) > data_end)
				return RV_CLS_PARSE_BAD;
			len = ((__u32)opt[1] + 1) * 8;
			ext_bytes += len;
			if (ext_bytes > RV_MAX_IPV6_EXT_BYTES)
				return RV_CLS_PARSE_BAD;
			nexthdr = opt[0];
			cur += len;
		} else if (nexthdr == IPPROTO_FRAGMENT) {
			struct rv_ipv6_frag_hdr *fh = cur;
			__u16 off;

			if ((void *)(fh + 1) > data_end)
				return RV_CLS_PARSE_BAD;
			/* At most one (RFC 8200 4.1): a second one would give the
			 * datagram two identities. */
			if (seen_frag)
				return RV_CLS_PARSE_BAD;
			seen_frag = 1;
			ext_bytes += sizeof(*fh);
			if (ext_bytes > RV_MAX_IPV6_EXT_BYTES)
				return RV_CLS_PARSE_BAD;
			off = bpf_ntohs(fh->frag_off);
			nexthdr = fh->nexthdr;
			p->frag_proto = nexthdr;
			cur = fh + 1;
			if (off & (RV_IP6_OFFSET | RV_IP6_MF))
				p->frag_id = fh->identification;
			if (off & RV_IP6_OFFSET) {
				p->proto = nexthdr;
				p->kind = RV_CLS_KIND_FRAG;
				p->l4_off = cur - data;
				return RV_CLS_PARSE_OK;
			}
			if (off & RV_IP6_MF)
				p->first_frag = 1;
		} else {
			break;
		}
	}
	if (nexthdr == IPPROTO_HOPOPTS || nexthdr == IPPROTO_DSTOPTS || nexthdr == IPPROTO_FRAGMENT)
		return RV_CLS_PARSE_BAD;
	if (cur > data_end)
		return RV_CLS_PARSE_BAD;
	p->l4_off = cur - data;
	return rv_cls_parse_l4(ctx, p, nexthdr, 1);
}

/* Parses the frame into p (zeroed by the caller). Untagged frames only:
 * a tagged one is the kernel's (its VLAN device), as everywhere in
 * Rivora. */
static __always_inline int rv_cls_parse(struct xdp_md *ctx, struct rv_cls_pkt *p, const int v6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return RV_CLS_PARSE_BAD;
	if (eth->h_proto != bpf_htons(v6 ? ETH_P_IPV6 : ETH_P_IP))
		return RV_CLS_PARSE_KERNEL;
	p->l3_off = sizeof(*eth);
	if (v6)
		return rv_cls_parse_ipv6(ctx, p, eth + 1);
	return rv_cls_parse_ipv4(ctx, p, eth + 1);
}

static __always_inline __u8 rv_cls_proto_bit(__u8 proto)
{
	if (proto == IPPROTO_TCP)
		return RV_CLS_PROTO_TCP;
	if (proto == IPPROTO_UDP)
		return RV_CLS_PROTO_UDP;
	if (proto == RV_IPPROTO_SCTP)
		return RV_CLS_PROTO_SCTP;
	return 0;
}

static __always_inline int rv_cls_port_in(const struct rv_cls_ports *ranges, __u32 n, __u16 port)
{
	for (__u32 k = 0; k < RV_CLS_MAX_PORT_RANGES; k++) {
		if (k >= n)
			break;
		if (port >= ranges[k].first && port <= ranges[k].last)
			return 1;
	}
	return 0;
}

/* The byte matches of the packet's protocol, ANDed. */
static __always_inline int rv_cls_bytes_match(const struct rv_cls_rule *r, const struct rv_cls_pkt *p)
{
	for (__u32 j = 0; j < RV_CLS_MAX_BYTE_MATCHES; j++) {
		const struct rv_cls_byte_match *m;
		__u32 off, v;

		if (j >= r->n_bytes)
			break;
		m = &r->bytes[j];
		if (m->proto != p->proto)
			continue;
		/* The quote of an ICMP error is the reply's header, not the
		 * request's: a rule that inspects this protocol's bytes does
		 * not match the error. */
		if (p->kind != RV_CLS_KIND_L4)
			return 0;
		off = m->offset & 31;
		if (off + m->len > p->hdr_len)
			return 0;
		if (m->len == 1)
			v = p->hdr[off];
		else if (m->len == 2)
			v = ((__u32)p->hdr[off] << 8) | p->hdr[off + 1];
		else
			v = ((__u32)p->hdr[off] << 24) | ((__u32)p->hdr[off + 1] << 16) |
			    ((__u32)p->hdr[off + 2] << 8) | p->hdr[off + 3];
		if ((v & m->mask) != m->value)
			return 0;
	}
	return 1;
}

static __always_inline int rv_cls_source_in(__u32 rule_id, const struct rv_cls_pkt *p, __u32 v6)
{
	if (v6) {
		struct rv_cls_src_key6 k = { .prefixlen = 32 + 128, .rule_id = rule_id };
		__builtin_memcpy(k.addr, p->src, 16);
		return bpf_map_lookup_elem(&cls_src_map6, &k) != 0;
	}
	struct rv_cls_src_key4 k = { .prefixlen = 32 + 32, .rule_id = rule_id };
	__builtin_memcpy(k.addr, p->src, 4);
	return bpf_map_lookup_elem(&cls_src_map, &k) != 0;
}

static __always_inline int rv_cls_rule_matches(const struct rv_cls_rule *r, __u32 id, const struct rv_cls_scratch *s)
{
	const struct rv_cls_pkt *p = &s->pkt;

	if (p->kind != RV_CLS_KIND_ECHO && !(r->protos & rv_cls_proto_bit(p->proto)))
		return 0;
	if ((r->flags & RV_CLS_RULE_F_SOURCES) && !rv_cls_source_in(id, p, s->v6))
		return 0;
	if (p->kind == RV_CLS_KIND_ECHO)
		return 1; /* addresses only: nfqlb's promiscuous ping */
	if (r->n_dports && !rv_cls_port_in(r->dports, r->n_dports, bpf_ntohs(p->dport)))
		return 0;
	if (r->n_sports && !rv_cls_port_in(r->sports, r->n_sports, bpf_ntohs(p->sport)))
		return 0;
	return rv_cls_bytes_match(r, p);
}

/* bpf_loop body: rule i of the VIP; stops at the first match. */
static long rv_cls_rule_step(__u32 i, void *unused)
{
	struct rv_cls_scratch *s = rv_cls_scratch();
	struct rv_cls_rule *r;
	__u32 id;

	if (!s || i >= s->vip.count)
		return 1;
	/* A mask the verifier sees (RV_CLS_MAX_RULES_PER_VIP is 2^n and
	 * bpf_loop runs at most that many steps). */
	barrier_var(i);
	id = s->vip.rules[i & (RV_CLS_MAX_RULES_PER_VIP - 1)];
	r = bpf_map_lookup_elem(&cls_rule_map, &id);
	if (!r || !(r->flags & RV_CLS_RULE_F_ACTIVE))
		return 0;
	if (!rv_cls_rule_matches(r, id, s))
		return 0;
	s->rule_id = id;
	s->group_id = r->group_id;
	return 1;
}

/* The flow hash that picks a slot. SCTP of a ports-hashed group leaves
 * the addresses out, so a multihomed association's paths agree. Like the
 * tables, it must be the same on every replica and across versions: a
 * change moves flows behind ECMP. */
static __always_inline __u32 rv_cls_hash(const struct rv_cls_pkt *p, __u32 group_flags, const int v6)
{
	if (p->proto == RV_IPPROTO_SCTP && (group_flags & RV_CLS_GROUP_F_SCTP_PORTS)) {
		__u32 h = rv_hash_mix(RV_HASH_SEED, ((__u32)p->sport << 16) | p->dport);
		return rv_hash_final(rv_hash_mix(h, p->proto));
	}
	return rv_flow_hash(p->src, p->dst, p->sport, p->dport, p->proto, 0, v6);
}

static __always_inline void rv_cls_count(void *map, __u32 id, __u64 bytes, int what)
{
	struct rv_cls_stats *st = bpf_map_lookup_elem(map, &id);

	if (!st)
		return;
	if (what == 0) {
		st->packets++;
		st->bytes += bytes;
	} else if (what == 1) {
		st->no_target++;
	} else {
		st->other++;
	}
}

#define RV_CLS_COUNT_FWD 0
#define RV_CLS_COUNT_NO_TARGET 1
#define RV_CLS_COUNT_OTHER 2

/* Counts one outcome on the VIP, its rule and its group. */
static __always_inline void rv_cls_count_all(const struct rv_cls_frag *at, __u64 bytes, int what)
{
	rv_cls_count(&cls_vip_stats_map, at->stats_id, bytes, what);
	rv_cls_count(&cls_rule_stats_map, at->rule_id, bytes, what);
	rv_cls_count(&cls_group_stats_map, at->group_id, bytes, what);
}

/* Step 4: to `t` as next hop. `at` names the VIP, rule and group the
 * packet counts on. */
static __always_inline int rv_cls_forward(struct xdp_md *ctx, const struct rv_cls_pkt *pk,
					  const struct rv_cls_target *t, const struct rv_cls_frag *at, const int v6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct bpf_fib_lookup fib = {};
	__u32 src[4] = {}, dst[4] = {};
	__u64 bytes = data_end - data;
	__u32 tot_len;
	int df = 1, rc;

	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	if (v6) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > data_end)
			return XDP_DROP;
		if (ip6->hop_limit <= 1) {
			rv_cls_event(RV_CLS_TTL_TO_KERNEL);
			return XDP_PASS;
		}
		tot_len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		__builtin_memcpy(src, &ip6->saddr, 16);
		__builtin_memcpy(dst, t->addr6, 16);
	} else {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end)
			return XDP_DROP;
		if (ip->ttl <= 1) {
			rv_cls_event(RV_CLS_TTL_TO_KERNEL);
			return XDP_PASS;
		}
		tot_len = bpf_ntohs(ip->tot_len);
		df = !!(ip->frag_off & bpf_htons(RV_IP_DF));
		src[0] = ip->saddr;
		dst[0] = t->addr4;
	}
	/* The lookup's source is the packet's own, so policy routing by
	 * source is honoured (for an ICMP error: the error's sender, not the
	 * quoted flow's client). bpf_fib_lookup's length is 16 bits: a header claiming more (only a
	 * lying one can) must still fail the MTU check, not wrap past it. */
	if (tot_len > 0xffff)
		tot_len = 0xffff;
	rv_fib_params(&fib, ctx, src, dst, tot_len, v6);
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		rv_cls_count_all(at, bytes, RV_CLS_COUNT_FWD);
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		eth = data;
		if ((void *)(eth + 1) > data_end)
			return XDP_DROP;
		if (v6) {
			struct ipv6hdr *ip6 = (void *)(eth + 1);
			if ((void *)(ip6 + 1) > data_end)
				return XDP_DROP;
			ip6->hop_limit--;
		} else {
			struct iphdr *ip = (void *)(eth + 1);
			if ((void *)(ip + 1) > data_end)
				return XDP_DROP;
			rv_ip4_ttl_down(ip);
		}
		__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
		if (pk->kind == RV_CLS_KIND_ECHO)
			rv_cls_event(RV_CLS_ECHO);
		else if (pk->kind == RV_CLS_KIND_ICMP_ERR)
			rv_cls_event(RV_CLS_ICMP_ERROR);
		if (fib.ifindex == ctx->ingress_ifindex)
			return XDP_TX;
		return bpf_redirect(fib.ifindex, 0);
	}
	rv_cls_count_all(at, 0, RV_CLS_COUNT_OTHER);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		struct rv_pkt q = {};

		/* XDP cannot fragment. A later fragment is answered too (as a
		 * router answers any packet too big for its next hop), quoting
		 * its IP header(s) and 8 bytes of its data. */
		if (!df) {
			rv_cls_event(RV_CLS_TOO_BIG_DROP);
			return XDP_DROP;
		}
		/* The answer quotes 8 bytes past the headers: a frame without
		 * them can be over the MTU only by a lying length. */
		if ((__u64)pk->l4_off + RV_QUOTE_L4 > (__u64)(data_end - data)) {
			rv_cls_event(RV_CLS_MALFORMED);
			return XDP_DROP;
		}
		rv_cls_event(RV_CLS_TOO_BIG_ICMP);
		q.l3_off = pk->l3_off;
		q.l4_off = pk->l4_off;
		return rv_reply_too_big(ctx, &q, fib.mtu_result, v6);
	}
	rv_cls_event(rc == BPF_FIB_LKUP_RET_NO_NEIGH ? RV_CLS_NO_NEIGH : RV_CLS_NO_ROUTE);
	return XDP_DROP;
}

/* The whole stage for one family. */
static __always_inline int rv_cls_stage(struct xdp_md *ctx, const int v6)
{
	struct rv_cls_scratch *s = rv_cls_scratch();
	struct rv_cls_pkt *p;
	struct rv_cls_vip *vip;
	struct rv_cls_group *g;
	struct rv_cls_target *t;
	struct rv_cls_target_key tk;
	struct rv_cls_frag at = {};
	__u32 size, offset, idx;
	__u32 *slot;
	int rc;

	if (!s)
		return XDP_PASS;
	__builtin_memset(&s->pkt, 0, sizeof(s->pkt));
	p = &s->pkt;
	s->v6 = v6;
	rc = rv_cls_parse(ctx, p, v6);
	if (rc == RV_CLS_PARSE_KERNEL)
		return XDP_PASS;
	vip = v6 ? bpf_map_lookup_elem(&cls_vip_map6, p->vip) : bpf_map_lookup_elem(&cls_vip_map, p->vip);
	if (!vip) {
		rv_cls_event(RV_CLS_NO_VIP);
		return XDP_PASS;
	}
	at.stats_id = vip->stats_id;
	if (rc != RV_CLS_PARSE_OK) {
		rv_cls_event(RV_CLS_MALFORMED);
		rv_cls_count(&cls_vip_stats_map, at.stats_id, 0, RV_CLS_COUNT_OTHER);
		return XDP_DROP;
	}

	if (p->kind == RV_CLS_KIND_FRAG) {
		struct rv_cls_frag *f;

		if (v6) {
			struct rv_frag_key6 k = { .id = p->frag_id, .proto = p->frag_proto };
			__builtin_memcpy(k.src, p->src, 16);
			__builtin_memcpy(k.dst, p->dst, 16);
			f = bpf_map_lookup_elem(&cls_frag_map6, &k);
		} else {
			struct rv_frag_key4 k = { .src = p->src[0], .dst = p->dst[0], .id = p->frag_id, .proto = p->frag_proto };
			f = bpf_map_lookup_elem(&cls_frag_map, &k);
		}
		if (!f) {
			rv_cls_event(RV_CLS_FRAG_UNMATCHED);
			rv_cls_count(&cls_vip_stats_map, at.stats_id, 0, RV_CLS_COUNT_OTHER);
			return XDP_DROP;
		}
		at = *f;
		tk.group_id = at.group_id;
		tk.slot = at.slot;
		t = bpf_map_lookup_elem(&cls_target_map, &tk);
		if (!t || !(t->flags & (v6 ? RV_CLS_TARGET_F_V6 : RV_CLS_TARGET_F_V4))) {
			rv_cls_event(RV_CLS_NO_TARGET);
			rv_cls_count_all(&at, 0, RV_CLS_COUNT_NO_TARGET);
			return XDP_DROP;
		}
		return rv_cls_forward(ctx, p, t, &at, v6);
	}

	/* 2. Classify. */
	__builtin_memcpy(&s->vip, vip, sizeof(s->vip));
	s->rule_id = RV_CLS_NONE;
	if (p->kind != RV_CLS_KIND_OTHER)
		bpf_loop(RV_CLS_MAX_RULES_PER_VIP, rv_cls_rule_step, 0, 0);
	if (s->rule_id == RV_CLS_NONE) {
		rv_cls_event(RV_CLS_NO_RULE);
		rv_cls_count(&cls_vip_stats_map, at.stats_id, 0, RV_CLS_COUNT_OTHER);
		return XDP_DROP;
	}
	at.rule_id = s->rule_id;
	at.group_id = s->group_id;

	/* 3. Pick. */
	g = bpf_map_lookup_elem(&cls_group_map, &at.group_id);
	size = g ? g->size : 0;
	offset = g ? (v6 ? g->offset6 : g->offset4) : 0;
	if (!g || !size || !(v6 ? g->count6 : g->count4)) {
		rv_cls_event(RV_CLS_NO_TARGET);
		rv_cls_count_all(&at, 0, RV_CLS_COUNT_NO_TARGET);
		return XDP_DROP;
	}
	idx = offset + rv_cls_hash(p, g->flags, v6) % size;
	slot = bpf_map_lookup_elem(&cls_table, &idx);
	if (!slot) {
		rv_cls_event(RV_CLS_NO_TARGET);
		rv_cls_count_all(&at, 0, RV_CLS_COUNT_NO_TARGET);
		return XDP_DROP;
	}
	at.slot = *slot;
	tk.group_id = at.group_id;
	tk.slot = at.slot;
	t = bpf_map_lookup_elem(&cls_target_map, &tk);
	if (!t || !(t->flags & (v6 ? RV_CLS_TARGET_F_V6 : RV_CLS_TARGET_F_V4))) {
		rv_cls_event(RV_CLS_NO_TARGET);
		rv_cls_count_all(&at, 0, RV_CLS_COUNT_NO_TARGET);
		return XDP_DROP;
	}
	if (p->first_frag) {
		if (v6) {
			struct rv_frag_key6 k = { .id = p->frag_id, .proto = p->frag_proto };
			__builtin_memcpy(k.src, p->src, 16);
			__builtin_memcpy(k.dst, p->dst, 16);
			bpf_map_update_elem(&cls_frag_map6, &k, &at, BPF_ANY);
		} else {
			struct rv_frag_key4 k = { .src = p->src[0], .dst = p->dst[0], .id = p->frag_id, .proto = p->frag_proto };
			bpf_map_update_elem(&cls_frag_map, &k, &at, BPF_ANY);
		}
	}
	return rv_cls_forward(ctx, p, t, &at, v6);
}

#endif /* RIVORA_CLASSIFY_H */
