/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_xdp: XDP programs used only by rivora-bench.
 *
 *  - bench_harness: BPF_PROG_TEST_RUN with repeat=N runs a program N times
 *    on the same buffer, so a program that rewrites the frame would see its
 *    own output from the second iteration on. The harness writes the
 *    original frame back (optionally as a new flow, see BENCH_F_VARY),
 *    counts the iteration and tail-calls slot 0 of bench_progs: the program
 *    under test (the real xdp_ingress, the floor, or bench_sink for the
 *    harness's own cost).
 *  - bench_sink: only returns XDP_TX; tail-called to measure the harness.
 *  - bench_floor: the reference per-packet cost: parse Ethernet/IP/L4, one
 *    hash lookup, swap MACs, XDP_TX.
 *  - bench_count_drop: counts and drops UDP (and IPv4 IP-in-IP / GRE, what
 *    L3 DSR delivers); the traffic benchmark's sink
 *    on the backends and its generator ceiling on the balancer.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "bench_common.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} bench_progs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_frame);
} bench_frame SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BC_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} bench_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct bench_floor_key);
	__type(value, __u32);
} bench_floor_map SEC(".maps");

/* An IPv4 packet carrying IP-in-IP or GRE (untagged): what the L3 DSR
 * modes deliver to a backend. */
static __always_inline int bench_is_ipv4_tunnel(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	return ip->protocol == IPPROTO_IPIP || ip->protocol == IPPROTO_GRE;
}

/* bench_count_drop's counter: index 0, packets seen. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} bench_sink_count SEC(".maps");

/* Turns the restored frame into flow number k (see BENCH_F_VARY): the
 * field and the checksums are computed from the stored original. */
static __always_inline int bench_vary(struct xdp_md *ctx, struct bench_frame *f, __u32 k)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 off = f->vary_off & (BENCH_PATCH_SPAN - 1);
	__u32 from = *(__u32 *)&f->data[off];
	__u32 to = bpf_htonl(bpf_ntohl(from) + k);

	if (data + off + 4 > data_end)
		return -1;
	*(__u32 *)(data + off) = to;
	if (f->ip_csum_off) {
		off = f->ip_csum_off & (BENCH_PATCH_SPAN - 1);
		if (data + off + 2 > data_end)
			return -1;
		*(__u16 *)(data + off) = bench_csum_replace4(*(__u16 *)&f->data[off], from, to);
	}
	if (f->l4_csum_off) {
		off = f->l4_csum_off & (BENCH_PATCH_SPAN - 1);
		if (data + off + 2 > data_end)
			return -1;
		__u16 v = bench_csum_replace4(*(__u16 *)&f->data[off], from, to);
		if (v == 0 && (f->flags & BENCH_F_UDP))
			v = 0xffff;
		*(__u16 *)(data + off) = v;
	}
	return 0;
}

static __always_inline void bench_count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&bench_counters, &idx);

	if (c)
		(*c)++;
}

SEC("xdp")
int bench_harness(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct bench_frame *f = bpf_map_lookup_elem(&bench_frame, &zero);
	__u32 len;
	long cur;

	if (!f)
		return XDP_ABORTED;
	len = f->len;
	if (len == 0 || len > BENCH_FRAME_MAX)
		return XDP_ABORTED;
	cur = (long)ctx->data_end - (long)ctx->data;
	if (cur != len) {
		/* The program under test pushed or pulled headers (an
		 * encapsulating mode): move the start back, then the end. */
		bpf_xdp_adjust_head(ctx, (int)(cur - (long)len));
		cur = (long)ctx->data_end - (long)ctx->data;
		if (cur != len)
			bpf_xdp_adjust_tail(ctx, (int)((long)len - cur));
		cur = (long)ctx->data_end - (long)ctx->data;
		if (cur != len) {
			bench_count(BC_RESTORE_FAIL);
			return XDP_ABORTED;
		}
	}
	if (bpf_xdp_store_bytes(ctx, 0, f->data, len)) {
		bench_count(BC_RESTORE_FAIL);
		return XDP_ABORTED;
	}
	if (f->flags & BENCH_F_VARY) {
		__u64 seq = f->seq++;
		__u32 k = f->vary_mod ? (__u32)(seq % f->vary_mod) : (__u32)seq;

		if (bench_vary(ctx, f, k)) {
			bench_count(BC_RESTORE_FAIL);
			return XDP_ABORTED;
		}
	}
	bench_count(BC_ITERATIONS);
	bpf_tail_call(ctx, &bench_progs, 0);
	bench_count(BC_TAILCALL_MISS);
	return XDP_ABORTED;
}

SEC("xdp")
int bench_sink(struct xdp_md *ctx)
{
	return XDP_TX;
}

SEC("xdp")
int bench_floor(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct bench_floor_key key = {};

	if (bench_parse(data, data_end, &key))
		return XDP_PASS;
	if (!bpf_map_lookup_elem(&bench_floor_map, &key))
		return XDP_PASS;
	bench_swap_macs(data);
	return XDP_TX;
}

/* Counts and drops UDP; everything else (ARP above all: a backend must
 * keep answering its neighbours) goes to the kernel. */
SEC("xdp")
int bench_count_drop(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct bench_floor_key key = {};
	__u32 zero = 0;
	__u64 *c;
	int udp = !bench_parse(data, data_end, &key) && key.proto == IPPROTO_UDP;

	if (!udp && !bench_is_ipv4_tunnel(data, data_end))
		return XDP_PASS;
	c = bpf_map_lookup_elem(&bench_sink_count, &zero);
	if (c)
		(*c)++;
	return XDP_DROP;
}

/*
 * Probes: one map operation each, on the flow of the frame, for the
 * "where the time goes" notes. The key has the layout of rv_flow4 (the
 * affinity and NAT tables' IPv4 key, 16 bytes).
 */
struct bench_probe_key {
	__be32 src;
	__be32 dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct bench_probe_value {
	__u32 a;
	__u32 b;
};

#define BENCH_PROBE_MAP(name, maptype, mapflags)                 \
	struct {                                                 \
		__uint(type, maptype);                           \
		__uint(max_entries, 65536);                      \
		__uint(map_flags, mapflags);                     \
		__type(key, struct bench_probe_key);             \
		__type(value, struct bench_probe_value);         \
	} name SEC(".maps")

BENCH_PROBE_MAP(bench_probe_lru, BPF_MAP_TYPE_LRU_HASH, 0);
BENCH_PROBE_MAP(bench_probe_lru_pcpu, BPF_MAP_TYPE_LRU_HASH, BPF_F_NO_COMMON_LRU);
BENCH_PROBE_MAP(bench_probe_hash, BPF_MAP_TYPE_HASH, 0);

static __always_inline int bench_probe_key_of(struct xdp_md *ctx, struct bench_probe_key *k)
{
	struct bench_floor_key fk = {};

	if (bench_parse((void *)(long)ctx->data, (void *)(long)ctx->data_end, &fk))
		return -1;
	__builtin_memcpy(&k->src, fk.src, 4);
	__builtin_memcpy(&k->dst, fk.dst, 4);
	k->sport = fk.sport;
	k->dport = fk.dport;
	k->proto = fk.proto;
	return 0;
}

#define BENCH_PROBE_INSERT(prog, map)                                   \
	SEC("xdp") int prog(struct xdp_md *ctx)                         \
	{                                                               \
		struct bench_probe_key k = {};                          \
		struct bench_probe_value v = { .a = 1, .b = 2 };        \
		if (bench_probe_key_of(ctx, &k))                        \
			return XDP_PASS;                                \
		if (bpf_map_update_elem(&map, &k, &v, BPF_ANY))         \
			return XDP_ABORTED;                             \
		return XDP_TX;                                          \
	}

#define BENCH_PROBE_LOOKUP(prog, map)                                   \
	SEC("xdp") int prog(struct xdp_md *ctx)                         \
	{                                                               \
		struct bench_probe_key k = {};                          \
		if (bench_probe_key_of(ctx, &k))                        \
			return XDP_PASS;                                \
		if (!bpf_map_lookup_elem(&map, &k))                     \
			return XDP_PASS;                                \
		return XDP_TX;                                          \
	}

/* Parse and build the key only: the probes' own floor. */
SEC("xdp")
int bench_probe_parse(struct xdp_md *ctx)
{
	struct bench_probe_key k = {};

	if (bench_probe_key_of(ctx, &k))
		return XDP_PASS;
	return k.proto ? XDP_TX : XDP_PASS;
}

BENCH_PROBE_INSERT(bench_probe_lru_insert, bench_probe_lru)
BENCH_PROBE_INSERT(bench_probe_lru_pcpu_insert, bench_probe_lru_pcpu)
BENCH_PROBE_INSERT(bench_probe_hash_insert, bench_probe_hash)
BENCH_PROBE_LOOKUP(bench_probe_lru_lookup, bench_probe_lru)
BENCH_PROBE_LOOKUP(bench_probe_hash_lookup, bench_probe_hash)

/* Only lets the packet through: what attaching any XDP program costs on its
 * own (the traffic benchmark's "routing + XDP_PASS" phase). */
SEC("xdp")
int bench_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
