/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_tc: the TC (TCX) counterparts of bench_xdp's harness, sink and
 * floor, for measuring tc_nat (the egress reply path) under
 * BPF_PROG_TEST_RUN. Tail calls only reach programs of the same type, so
 * the TC harness needs its own program array. (It only restores the frame:
 * BENCH_F_VARY is an XDP harness feature.)
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "bench_common.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} bench_tc_progs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_frame);
} bench_tc_frame SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BC_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} bench_tc_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct bench_floor_key);
	__type(value, __u32);
} bench_tc_floor_map SEC(".maps");

static __always_inline void bench_tc_count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&bench_tc_counters, &idx);

	if (c)
		(*c)++;
}

SEC("classifier")
int bench_tc_harness(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct bench_frame *f = bpf_map_lookup_elem(&bench_tc_frame, &zero);
	__u32 len;

	if (!f)
		return TC_ACT_SHOT;
	len = f->len;
	if (len == 0 || len > BENCH_FRAME_MAX)
		return TC_ACT_SHOT;
	if (skb->len != len) {
		bench_tc_count(BC_RESTORE_FAIL);
		return TC_ACT_SHOT;
	}
	if (bpf_skb_store_bytes(skb, 0, f->data, len, 0)) {
		bench_tc_count(BC_RESTORE_FAIL);
		return TC_ACT_SHOT;
	}
	bench_tc_count(BC_ITERATIONS);
	bpf_tail_call(skb, &bench_tc_progs, 0);
	bench_tc_count(BC_TAILCALL_MISS);
	return TC_ACT_SHOT;
}

SEC("classifier")
int bench_tc_sink(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}

SEC("classifier")
int bench_tc_floor(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct bench_floor_key key = {};

	if (bench_parse(data, data_end, &key))
		return TC_ACT_OK;
	if (!bpf_map_lookup_elem(&bench_tc_floor_map, &key))
		return TC_ACT_OK;
	bench_swap_macs(data);
	return TC_ACT_OK;
}
