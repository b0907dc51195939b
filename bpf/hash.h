/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash.h: the flow hash that picks a Maglev slot. It only has to spread
 * flows evenly and be cheap; it is not exposed to the control plane. A
 * murmur3-style mix over 32-bit words.
 */
#ifndef RIVORA_HASH_H
#define RIVORA_HASH_H

#include <linux/types.h>

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

#endif /* RIVORA_HASH_H */
