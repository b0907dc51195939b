/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decap.c: rivora-decap, the backends' side of L3 DSR. An XDP program that
 * removes the outer header of tunnel packets addressed to one of this
 * host's tunnel endpoints (decap_addr4 / decap_addr6) and passes the inner
 * packet to the local stack, as if it had arrived on this interface:
 *
 *  - IPv4 outer, protocol 4 (IPv4 inside) or 41 (IPv6 inside);
 *  - IPv6 outer, next header 41 or 4, directly or after one Destination
 *    Options header (the tunnel encapsulation limit Linux ip6tnl adds);
 *  - GRE (RFC 2784/2890) over either, with optional checksum, key and
 *    sequence number, carrying IPv4 (0x0800) or IPv6 (0x86DD).
 *
 * Up to two VLAN tags in front of the outer header are kept. Everything
 * else, and every tunnel packet to an address not listed, is passed
 * untouched (so kernel tunnel devices for other addresses keep working).
 * Not done here: outer fragments (XDP cannot reassemble: counted and
 * passed), GRE checksum verification (the inner packet's own checksums are
 * still checked by the stack), GRE key matching (every key is accepted),
 * ECN propagation from the outer header.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "rivora_abi.h"
#include "csum.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RV_DECAP_MAX_ADDRS);
	__type(key, struct rv_decap_addr4);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} decap_addr4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RV_DECAP_MAX_ADDRS);
	__type(key, struct rv_decap_addr6);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} decap_addr6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_DECAP_KIND_COUNT);
	__type(key, __u32);
	__type(value, struct rv_decap_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} decap_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rv_decap_meta);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} decap_meta SEC(".maps");

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#define RV_IPPROTO_IPIP 4
#define RV_IPPROTO_IPV6 41
#define RV_IPPROTO_GRE 47
#define RV_IPPROTO_DSTOPTS 60
#define RV_IPPROTO_FRAGMENT 44
#define RV_IP_MF 0x2000
#define RV_IP_OFFSET 0x1FFF

/* GRE flags and version (first 16 bits, RFC 2784 and 2890). */
#define RV_GRE_C 0x8000
#define RV_GRE_K 0x2000
#define RV_GRE_S 0x1000
/* Bits a receiver must not accept: routing present and strict source
 * route (RFC 1701), the top recursion-control bit, and any version but 0. */
#define RV_GRE_REJECT 0x4C07

enum rv_stat_field {
	RV_ST_DECAP,
	RV_ST_PASSED,
	RV_ST_MALFORMED,
	RV_ST_FRAGMENT,
};

static __always_inline int count(__u32 kind, int field)
{
	struct rv_decap_stats *s = bpf_map_lookup_elem(&decap_stats, &kind);

	if (s) {
		if (field == RV_ST_DECAP)
			s->decapsulated++;
		else if (field == RV_ST_PASSED)
			s->passed++;
		else if (field == RV_ST_MALFORMED)
			s->malformed++;
		else
			s->fragments++;
	}
	return XDP_PASS;
}

struct rv_vlan {
	__be16 tci;
	__be16 proto;
};

/* Removes `outer_len` bytes after the L2 header (Ethernet and `tags` VLAN
 * tags, a constant per call site), and sets the innermost EtherType to
 * `inner_proto`. */
static __always_inline int strip(struct xdp_md *ctx, const int tags, __u32 outer_len, __be16 inner_proto)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const __u32 l2_len = sizeof(struct ethhdr) + tags * sizeof(struct rv_vlan);
	__u8 l2[sizeof(struct ethhdr) + 2 * sizeof(struct rv_vlan)];

	if (data + l2_len > data_end)
		return -1;
	__builtin_memcpy(l2, data, l2_len);
	if (bpf_xdp_adjust_head(ctx, (int)outer_len))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + l2_len > data_end)
		return -1;
	__builtin_memcpy(data, l2, l2_len);
	*(__be16 *)(data + l2_len - 2) = inner_proto;
	return 0;
}

/* The inner packet at `inner` must be the IP version its carrier
 * announced, with its fixed header in the frame. */
static __always_inline int inner_ok(void *inner, void *data_end, __be16 proto)
{
	__u8 *v = inner;

	if (proto == bpf_htons(ETH_P_IP))
		return inner + sizeof(struct iphdr) <= data_end && (v[0] >> 4) == 4 && (v[0] & 0xf) >= 5;
	return inner + sizeof(struct ipv6hdr) <= data_end && (v[0] >> 4) == 6;
}

/* A GRE header at `g`: its length, and the carried protocol in *proto.
 * -1: malformed; 0 with *proto 0: GRE carrying something else. */
static __always_inline int gre_len(void *g, void *data_end, __be16 *proto)
{
	__be16 *h = g;
	__u16 flags;
	int len = 4;

	if (g + 4 > data_end)
		return -1;
	flags = bpf_ntohs(h[0]);
	if (flags & RV_GRE_REJECT)
		return -1;
	if (flags & RV_GRE_C)
		len += 4;
	if (flags & RV_GRE_K)
		len += 4;
	if (flags & RV_GRE_S)
		len += 4;
	if (g + len > data_end)
		return -1;
	*proto = h[1];
	if (h[1] != bpf_htons(ETH_P_IP) && h[1] != bpf_htons(ETH_P_IPV6))
		*proto = 0;
	return len;
}

/* The outer IPv4 header's checksum, over its ihl words: the header is
 * copied into a zeroed 60-byte buffer (zeros add nothing to the sum), so
 * the sum is a fixed loop the verifier needs no packet bounds for. */
static __always_inline int ip4_csum_ok(struct xdp_md *ctx, __u32 l3_off, __u32 hlen)
{
	__u16 w[30] = {};
	__u32 sum = 0;

	if (hlen < 20 || hlen > 60 || bpf_xdp_load_bytes(ctx, l3_off, w, hlen))
		return 0;
#pragma unroll
	for (int i = 0; i < 30; i++)
		sum += w[i];
	return rv_csum_fold(sum) == 0xffff;
}

static __always_inline int decap4(struct xdp_md *ctx, const int tags)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const __u32 l3_off = sizeof(struct ethhdr) + tags * sizeof(struct rv_vlan);
	struct iphdr *ip = data + l3_off;
	__u32 kind, hlen, outer_len;
	__be16 inner_proto;

	if ((void *)(ip + 1) > data_end || ip->version != 4)
		return XDP_PASS;
	if (ip->protocol == RV_IPPROTO_IPIP || ip->protocol == RV_IPPROTO_IPV6)
		kind = RV_DECAP_IPIP;
	else if (ip->protocol == RV_IPPROTO_GRE)
		kind = RV_DECAP_GRE;
	else
		return XDP_PASS; /* not a tunnel: not ours, not counted */

	struct rv_decap_addr4 key = { .addr = ip->daddr };
	if (!bpf_map_lookup_elem(&decap_addr4, &key))
		return count(kind, RV_ST_PASSED);

	hlen = ip->ihl * 4;
	if (hlen < sizeof(struct iphdr) || (void *)ip + hlen > data_end)
		return count(kind, RV_ST_MALFORMED);
	if (!ip4_csum_ok(ctx, l3_off, hlen))
		return count(kind, RV_ST_MALFORMED);
	if (bpf_ntohs(ip->tot_len) < hlen || (void *)ip + bpf_ntohs(ip->tot_len) > data_end)
		return count(kind, RV_ST_MALFORMED);
	if (ip->frag_off & bpf_htons(RV_IP_MF | RV_IP_OFFSET))
		return count(kind, RV_ST_FRAGMENT);

	outer_len = hlen;
	if (kind == RV_DECAP_GRE) {
		int g = gre_len((void *)ip + hlen, data_end, &inner_proto);
		if (g < 0)
			return count(kind, RV_ST_MALFORMED);
		if (!inner_proto)
			return count(kind, RV_ST_PASSED);
		outer_len += g;
	} else {
		inner_proto = ip->protocol == RV_IPPROTO_IPIP ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
	}
	if (outer_len > 60 + 16)
		return count(kind, RV_ST_MALFORMED);
	if (!inner_ok((void *)ip + outer_len, data_end, inner_proto))
		return count(kind, RV_ST_MALFORMED);
	if (strip(ctx, tags, outer_len, inner_proto))
		return count(kind, RV_ST_MALFORMED);
	return count(kind, RV_ST_DECAP);
}

struct rv_opt_hdr {
	__u8 nexthdr;
	__u8 len; /* in 8-byte units, not counting the first 8 */
};

static __always_inline int decap6(struct xdp_md *ctx, const int tags)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const __u32 l3_off = sizeof(struct ethhdr) + tags * sizeof(struct rv_vlan);
	struct ipv6hdr *ip = data + l3_off;
	__u32 kind, outer_len = sizeof(struct ipv6hdr);
	__u8 next;
	int frag = 0;
	__be16 inner_proto;

	if ((void *)(ip + 1) > data_end || ip->version != 6)
		return XDP_PASS;
	next = ip->nexthdr;
	if (next == RV_IPPROTO_DSTOPTS || next == RV_IPPROTO_FRAGMENT) {
		/* One extension header in front of the payload: a Destination
		 * Options header (encapsulation limit) or a fragment header. */
		struct rv_opt_hdr *o = (void *)(ip + 1);
		if ((void *)(o + 1) > data_end)
			return XDP_PASS;
		frag = next == RV_IPPROTO_FRAGMENT;
		outer_len += frag ? 8 : (o->len + 1) * 8;
		next = o->nexthdr;
	}
	if (next == RV_IPPROTO_IPIP || next == RV_IPPROTO_IPV6)
		kind = RV_DECAP_IP6TNL;
	else if (next == RV_IPPROTO_GRE)
		kind = RV_DECAP_GRE6;
	else
		return XDP_PASS;

	struct rv_decap_addr6 key;
	__builtin_memcpy(key.addr, &ip->daddr, 16);
	if (!bpf_map_lookup_elem(&decap_addr6, &key))
		return count(kind, RV_ST_PASSED);
	if (frag)
		return count(kind, RV_ST_FRAGMENT);
	if ((void *)(ip + 1) + bpf_ntohs(ip->payload_len) > data_end)
		return count(kind, RV_ST_MALFORMED);
	if (outer_len > sizeof(struct ipv6hdr) + 2048 || (void *)ip + outer_len > data_end ||
	    outer_len - sizeof(struct ipv6hdr) > bpf_ntohs(ip->payload_len))
		return count(kind, RV_ST_MALFORMED);

	if (kind == RV_DECAP_GRE6) {
		int g = gre_len((void *)ip + outer_len, data_end, &inner_proto);
		if (g < 0)
			return count(kind, RV_ST_MALFORMED);
		if (!inner_proto)
			return count(kind, RV_ST_PASSED);
		outer_len += g;
	} else {
		inner_proto = next == RV_IPPROTO_IPIP ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
	}
	if (outer_len > sizeof(struct ipv6hdr) + 2048 + 16)
		return count(kind, RV_ST_MALFORMED);
	if (!inner_ok((void *)ip + outer_len, data_end, inner_proto))
		return count(kind, RV_ST_MALFORMED);
	if (strip(ctx, tags, outer_len, inner_proto))
		return count(kind, RV_ST_MALFORMED);
	return count(kind, RV_ST_DECAP);
}

static __always_inline int decap_at(struct xdp_md *ctx, __be16 proto, const int tags)
{
	if (proto == bpf_htons(ETH_P_IP))
		return decap4(ctx, tags);
	if (proto == bpf_htons(ETH_P_IPV6))
		return decap6(ctx, tags);
	return XDP_PASS;
}

SEC("xdp")
int rv_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct rv_vlan *v;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_8021Q) && eth->h_proto != bpf_htons(ETH_P_8021AD))
		return decap_at(ctx, eth->h_proto, 0);
	v = (void *)(eth + 1);
	if ((void *)(v + 1) > data_end)
		return XDP_PASS;
	if (v->proto != bpf_htons(ETH_P_8021Q) && v->proto != bpf_htons(ETH_P_8021AD))
		return decap_at(ctx, v->proto, 1);
	v++;
	if ((void *)(v + 1) > data_end)
		return XDP_PASS;
	return decap_at(ctx, v->proto, 2);
}
