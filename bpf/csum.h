/* SPDX-License-Identifier: Apache-2.0 */
/*
 * csum.h: incremental Internet checksum updates (RFC 1624) for XDP, where
 * the skb checksum helpers do not exist. All values are taken as they sit in
 * the packet (network order): one's-complement sums are byte-order neutral
 * as long as the checksum field is treated the same way.
 */
#ifndef RIVORA_CSUM_H
#define RIVORA_CSUM_H

#include <linux/types.h>

/* One's-complement 32-bit addition with end-around carry. */
static __always_inline __u32 rv_csum_add(__u32 a, __u32 b)
{
	a += b;
	return a + (a < b);
}

static __always_inline __u16 rv_csum_fold(__u32 c)
{
	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	return (__u16)c;
}

/* The difference that replacing a 32-bit field from -> to makes. */
static __always_inline __u32 rv_csum_diff32(__u32 diff, __be32 from, __be32 to)
{
	return rv_csum_add(rv_csum_add(diff, ~from), to);
}

/* The difference that replacing a 16-bit field from -> to makes. */
static __always_inline __u32 rv_csum_diff16(__u32 diff, __be16 from, __be16 to)
{
	return rv_csum_add(rv_csum_add(diff, (__u16)~from), to);
}

/* The difference that replacing a 128-bit address from -> to makes. */
static __always_inline __u32 rv_csum_diff128(__u32 diff, const __u32 *from, const __u32 *to)
{
#pragma unroll
	for (int i = 0; i < 4; i++)
		diff = rv_csum_diff32(diff, from[i], to[i]);
	return diff;
}

/* Applies a difference to a checksum field: HC' = ~(~HC + diff). */
static __always_inline __u16 rv_csum_apply(__u16 check, __u32 diff)
{
	return ~rv_csum_fold(rv_csum_add((__u16)~check, diff));
}

#endif /* RIVORA_CSUM_H */
