/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_common.h: what the benchmark-only programs (bench_xdp.c, bench_tc.c)
 * share: the frame the harness restores on every iteration, its counters,
 * and the floor program's parser and lookup key. None of this is part of the
 * datapath; crates/bench mirrors these layouts by hand (they are small and
 * only the bench reads them).
 */
#ifndef RIVORA_BENCH_COMMON_H
#define RIVORA_BENCH_COMMON_H

#include <linux/types.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* Longest frame the harness can restore. */
#define BENCH_FRAME_MAX 256

/* bench_frame.flags */
enum bench_frame_flags {
	/* Before every iteration, add k to the 32-bit field at vary_off of the
	 * restored frame and patch the checksums, where k counts iterations
	 * (modulo vary_mod when it is not 0): every iteration is a flow never
	 * seen before, or one of vary_mod flows in turn. */
	BENCH_F_VARY = 1 << 0,
	/* The L4 checksum is UDP's: a computed 0 is sent as 0xffff. */
	BENCH_F_UDP = 1 << 1,
};

/* The frame the harness writes back before every iteration (index 0 of the
 * bench_frame array). */
struct bench_frame {
	__u32 len;         /* bytes of data[] in use, 1..BENCH_FRAME_MAX */
	__u32 flags;       /* enum bench_frame_flags */
	__u32 vary_off;    /* offset of the 32-bit field bumped per iteration */
	__u32 ip_csum_off; /* offset of the IPv4 header checksum, 0 = none */
	__u32 l4_csum_off; /* offset of the TCP/UDP checksum, 0 = none */
	__u32 vary_mod;    /* 0, or how many flows BENCH_F_VARY cycles through */
	__u64 seq;         /* iterations so far (BENCH_F_VARY) */
	__u8 data[BENCH_FRAME_MAX];
};

/* Indices of the bench_counters per-CPU array. */
enum bench_counter {
	BC_ITERATIONS = 0,   /* harness iterations that reached the tail call */
	BC_TAILCALL_MISS = 1, /* the tail call did not happen (empty slot) */
	BC_RESTORE_FAIL = 2, /* the frame could not be put back */
	BC_SLOTS = 8,
};

/* Key of the floor program's one hash lookup: the flow's addresses, ports
 * and protocol (IPv4 addresses use the first 4 bytes of each field). */
struct bench_floor_key {
	__u8 src[16];
	__u8 dst[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct bench_vlan {
	__be16 tci;
	__be16 proto;
};

/* The floor's parser: Ethernet, up to two VLAN tags, IPv4 (any header
 * length, no fragments) or IPv6 (fixed header), TCP or UDP ports. Fills
 * `key` and returns 0, or returns -1 for anything else. */
static __always_inline int bench_parse(void *data, void *data_end, struct bench_floor_key *key)
{
	struct ethhdr *eth = data;
	void *cur = eth + 1;
	__be16 proto;
	__u8 l4proto;

	if (cur > data_end)
		return -1;
	proto = eth->h_proto;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		struct bench_vlan *v = cur;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(0x88A8))
			break;
		if ((void *)(v + 1) > data_end)
			return -1;
		proto = v->proto;
		cur = v + 1;
	}
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = cur;

		if ((void *)(ip + 1) > data_end || ip->ihl < 5)
			return -1;
		if (ip->frag_off & bpf_htons(0x3fff))
			return -1;
		__builtin_memcpy(key->src, &ip->saddr, 4);
		__builtin_memcpy(key->dst, &ip->daddr, 4);
		l4proto = ip->protocol;
		cur += ip->ihl * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cur;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		__builtin_memcpy(key->src, &ip6->saddr, 16);
		__builtin_memcpy(key->dst, &ip6->daddr, 16);
		l4proto = ip6->nexthdr;
		cur = ip6 + 1;
	} else {
		return -1;
	}
	if (l4proto != IPPROTO_TCP && l4proto != IPPROTO_UDP)
		return -1;
	/* Source and destination port sit at the same offsets in both. */
	struct udphdr *uh = cur;
	if ((void *)(uh + 1) > data_end)
		return -1;
	key->sport = uh->source;
	key->dport = uh->dest;
	key->proto = l4proto;
	return 0;
}

static __always_inline void bench_swap_macs(struct ethhdr *eth)
{
	__u8 tmp[ETH_ALEN];

	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
}

/* RFC 1624 eqn. 3 for a 32-bit field: HC' = ~(~HC + ~m + m'), taking every
 * value as it sits in memory (one's-complement sums are byte-order neutral). */
static __always_inline __u16 bench_csum_replace4(__u16 check, __u32 from, __u32 to)
{
	__u32 sum = (__u16)~check;

	sum += (__u16)~from + (__u16)~(from >> 16);
	sum += (__u16)to + (__u16)(to >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* Fields the harness patches must sit in the first BENCH_PATCH_SPAN bytes;
 * offsets are masked with it so the verifier sees them bounded. */
#define BENCH_PATCH_SPAN 128

#endif /* RIVORA_BENCH_COMMON_H */
