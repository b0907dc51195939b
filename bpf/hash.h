/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash.h: the flow hash that picks a Maglev slot (a murmur3-style mix over
 * 32-bit words: it only has to spread flows evenly), and the hashes of the
 * flow filter, the VIP index and the NAT backend filter, which are ABI: the
 * control plane computes them too.
 */
#ifndef RIVORA_HASH_H
#define RIVORA_HASH_H

#include <linux/types.h>
#include "rivora_abi.h"

#define RV_HASH_SEED 0x5bd1e995u

static __always_inline __u32 rv_rotl32(__u32 x, int r)
{
	return (x << r) | (x >> (32 - r));
}

static __always_inline __u32 rv_hash_mix(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51u;
	k = rv_rotl32(k, 15);
	k *= 0x1b873593u;
	h ^= k;
	h = rv_rotl32(h, 13);
	return h * 5 + 0xe6546b64u;
}

static __always_inline __u32 rv_hash_final(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

/*
 * The home slot hash of vip_index_map. Unlike the flow hash this one is
 * ABI: the control plane places VIPs with the same function
 * (rivora_abi::vip_index_hash), and a change bumps RV_ABI_VERSION. The
 * address is taken as the 32-bit words the program loads from the packet
 * (network byte order in memory), the port as its network-order value.
 * One multiply per word, then a full-avalanche finaliser (lowbias32), so
 * the low bits that pick the slot depend on every input bit.
 */
#define RV_VIP_INDEX_SEED 0x2f0b3c5du

static __always_inline __u32 rv_vip_index_word(__u32 h, __u32 w)
{
	h = (h ^ w) * 0x9e3779b1u;
	return h ^ (h >> 16);
}

/* The address's words into h: one word for IPv4, four for IPv6. */
static __always_inline __u32 rv_vip_index_addr(__u32 h, const __u32 *addr, const int v6)
{
	h = rv_vip_index_word(h, addr[0]);
	if (v6) {
		h = rv_vip_index_word(h, addr[1]);
		h = rv_vip_index_word(h, addr[2]);
		h = rv_vip_index_word(h, addr[3]);
	}
	return h;
}

/* lowbias32: a full-avalanche finaliser, so the low bits depend on every
 * input bit. */
static __always_inline __u32 rv_lowbias32(__u32 h)
{
	h ^= h >> 16;
	h *= 0x7feb352du;
	h ^= h >> 15;
	h *= 0x846ca68bu;
	h ^= h >> 16;
	return h;
}

static __always_inline __u32 rv_vip_index_hash(const __u32 *addr, __be16 port, __u8 proto, const int v6)
{
	__u32 h = RV_VIP_INDEX_SEED ^ ((__u32)port << 16) ^ ((__u32)proto << 8) ^ (v6 ? 1u : 0u);

	return rv_lowbias32(rv_vip_index_addr(h, addr, v6));
}

/*
 * The bit of nat_backend_filter_map for a backend address (reverse.h). ABI
 * like the index hash: the control plane sets the bits with the same
 * function (rivora_abi::nat_backend_bit).
 */
#define RV_NAT_FILTER_SEED 0x6c8e9cf5u

static __always_inline __u32 rv_nat_backend_bit(const __u32 *addr, const int v6)
{
	__u32 h = RV_NAT_FILTER_SEED ^ (v6 ? 1u : 0u);

	return rv_lowbias32(rv_vip_index_addr(h, addr, v6)) & (RV_NAT_FILTER_BITS - 1);
}

/* The Maglev hash of a flow: the 5-tuple, or the source address alone for
 * sessionAffinity clientIP. Not ABI (the control plane never computes it). */
static __always_inline __u32 rv_flow_hash(const __u32 *src, const __u32 *dst, __be16 sport, __be16 dport, __u8 proto,
					  int client_ip, const int v6)
{
	__u32 h = RV_HASH_SEED;
	int words = v6 ? 4 : 1;

#pragma unroll
	for (int i = 0; i < 4; i++)
		if (i < words)
			h = rv_hash_mix(h, src[i]);
	if (client_ip)
		return rv_hash_final(h);
#pragma unroll
	for (int i = 0; i < 4; i++)
		if (i < words)
			h = rv_hash_mix(h, dst[i]);
	h = rv_hash_mix(h, ((__u32)sport << 16) | dport);
	return rv_hash_final(rv_hash_mix(h, proto));
}

/*
 * A flow's place in flow_filter_map (flow_filter.h). ABI since version 10:
 * the control plane sets the bits of the affinity tables' keys with the
 * same function when it rebuilds the filter (rivora_abi::flow_filter_hash4
 * and 6). Every UDP datagram computes it, established ones too, so it is
 * built for latency rather than the Maglev hash's word-by-word chain: the
 * (source, destination) word pairs and the ports with the protocol are
 * multiplied by odd constants independently (in parallel), folded with a
 * shift so the high bits reach the low ones, and multiplied once more.
 * Addresses are the 32-bit words the program loads from the packet, ports
 * their network-order values.
 */
static __always_inline __u64 rv_word_pair(__u32 hi, __u32 lo)
{
	return ((__u64)hi << 32) | lo;
}

static __always_inline __u32 rv_flow_filter_hash(const __u32 *src, const __u32 *dst, __be16 sport, __be16 dport,
						 __u8 proto, const int v6)
{
	__u64 x = rv_word_pair(src[0], dst[0]) * 0x9e3779b97f4a7c15ULL;

	x ^= rv_word_pair(((__u32)sport << 16) | dport, proto) * 0xc2b2ae3d27d4eb4fULL;
	if (v6) {
		x ^= rv_word_pair(src[1], dst[1]) * 0x94d049bb133111ebULL;
		x ^= rv_word_pair(src[2], dst[2]) * 0xff51afd7ed558ccdULL;
		x ^= rv_word_pair(src[3], dst[3]) * 0xc4ceb9fe1a85ec53ULL;
	}
	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ULL;
	return (__u32)(x >> 32);
}

#endif /* RIVORA_HASH_H */
