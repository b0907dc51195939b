/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xdp_ingress: the forwarding program. For every frame on the attached
 * interface: parse, match a VIP, pick a backend (affinity, else Maglev),
 * then forward by the VIP's mode. Only full NAT exists so far: rewrite the
 * destination to the backend, record the reverse mapping for tc_nat, and
 * XDP_PASS so the kernel routes the packet on.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "rivora_abi.h"
#include "maps.h"
#include "parse.h"
#include "hash.h"
#include "balance.h"
#include "nat.h"

char LICENSE[] SEC("license") = "GPL";

static __always_inline void rv_count_forward(__u32 service_id, __u64 bytes, int new_flow)
{
	struct rv_vip_stats *s = bpf_map_lookup_elem(&stats_map, &service_id);

	if (s) {
		s->packets++;
		s->bytes += bytes;
		if (new_flow)
			s->new_flows++;
	}
}

static __always_inline const struct rv_service *rv_service_of(__u32 service_id)
{
	const struct rv_service *svc = bpf_map_lookup_elem(&service_config_map, &service_id);

	if (!svc || !(svc->flags & RV_SVC_F_ACTIVE)) {
		rv_count_drop(RV_DROP_NO_SERVICE, service_id);
		return 0;
	}
	return svc;
}

static __always_inline int rv_ingress4(struct xdp_md *ctx, struct rv_pkt *p)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = p->l3;
	struct rv_vip_key4 vk = {};
	struct rv_flow4 flow = {};
	struct rv_vip_value *vip;
	const struct rv_service *svc;
	struct rv_affinity *aff;
	struct rv_backend4 *be;
	__u32 backend_id = 0, service_id;
	int new_flow = 0;

	if ((void *)(ip + 1) > data_end)
		return XDP_PASS;
	vk.addr = ip->daddr;
	vk.port = p->dport;
	vk.proto = p->proto;
	vip = bpf_map_lookup_elem(&vip_map, &vk);
	if (!vip)
		return XDP_PASS;
	service_id = vip->service_id;
	svc = rv_service_of(service_id);
	if (!svc)
		return XDP_DROP;

	flow.src = ip->saddr;
	flow.dst = ip->daddr;
	flow.sport = p->sport;
	flow.dport = p->dport;
	flow.proto = p->proto;

	aff = bpf_map_lookup_elem(&connection_affinity_map, &flow);
	if (aff) {
		backend_id = aff->backend_id;
		be = bpf_map_lookup_elem(&backend_map, &backend_id);
		if (!be || !rv_affinity_usable(aff, be->generation))
			aff = 0;
	}
	if (!aff) {
		__u32 h = RV_HASH_SEED;
		struct rv_affinity na = {};

		h = rv_hash_mix(h, flow.src);
		h = rv_hash_mix(h, flow.dst);
		h = rv_hash_mix(h, ((__u32)flow.sport << 16) | flow.dport);
		h = rv_hash_final(rv_hash_mix(h, flow.proto));
		if (rv_maglev_pick(svc, h, &backend_id)) {
			rv_count_drop(RV_DROP_NO_HEALTHY_BACKEND, service_id);
			return XDP_DROP;
		}
		be = bpf_map_lookup_elem(&backend_map, &backend_id);
		if (!be) {
			rv_count_drop(RV_DROP_NO_BACKEND, service_id);
			return XDP_DROP;
		}
		na.backend_id = backend_id;
		na.backend_generation = be->generation;
		bpf_map_update_elem(&connection_affinity_map, &flow, &na, BPF_ANY);
		new_flow = 1;
	}

	/* The reply leaves the backend as backend:port -> client:sport. */
	struct rv_nat_key4 nk = {
		.src = be->addr,
		.dst = flow.src,
		.sport = be->port,
		.dport = flow.sport,
		.proto = flow.proto,
	};
	if (new_flow || !bpf_map_lookup_elem(&nat_reverse_map, &nk)) {
		struct rv_nat_value4 nv = {
			.vip = flow.dst,
			.vip_port = flow.dport,
			.service_id = service_id,
		};
		bpf_map_update_elem(&nat_reverse_map, &nk, &nv, BPF_ANY);
	}

	if (rv_dnat4(p, data_end, be->addr, be->port)) {
		rv_count_drop(RV_DROP_REWRITE_FAILED, service_id);
		return XDP_DROP;
	}
	rv_count_forward(service_id, (void *)(long)ctx->data_end - (void *)(long)ctx->data, new_flow);
	return XDP_PASS;
}

static __always_inline int rv_ingress6(struct xdp_md *ctx, struct rv_pkt *p)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = p->l3;
	struct rv_vip_key6 vk = {};
	struct rv_flow6 flow = {};
	struct rv_vip_value *vip;
	const struct rv_service *svc;
	struct rv_affinity *aff;
	struct rv_backend6 *be;
	__u32 backend_id = 0, service_id;
	int new_flow = 0;

	if ((void *)(ip6 + 1) > data_end)
		return XDP_PASS;
	__builtin_memcpy(vk.addr, &ip6->daddr, 16);
	vk.port = p->dport;
	vk.proto = p->proto;
	vip = bpf_map_lookup_elem(&vip_map6, &vk);
	if (!vip)
		return XDP_PASS;
	service_id = vip->service_id;
	svc = rv_service_of(service_id);
	if (!svc)
		return XDP_DROP;

	__builtin_memcpy(flow.src, &ip6->saddr, 16);
	__builtin_memcpy(flow.dst, &ip6->daddr, 16);
	flow.sport = p->sport;
	flow.dport = p->dport;
	flow.proto = p->proto;

	aff = bpf_map_lookup_elem(&connection_affinity_map6, &flow);
	if (aff) {
		backend_id = aff->backend_id;
		be = bpf_map_lookup_elem(&backend_map6, &backend_id);
		if (!be || !rv_affinity_usable(aff, be->generation))
			aff = 0;
	}
	if (!aff) {
		__u32 h = RV_HASH_SEED;
		const __u32 *s = (const __u32 *)flow.src;
		const __u32 *d = (const __u32 *)flow.dst;
		struct rv_affinity na = {};

#pragma unroll
		for (int i = 0; i < 4; i++)
			h = rv_hash_mix(h, s[i]);
#pragma unroll
		for (int i = 0; i < 4; i++)
			h = rv_hash_mix(h, d[i]);
		h = rv_hash_mix(h, ((__u32)flow.sport << 16) | flow.dport);
		h = rv_hash_final(rv_hash_mix(h, flow.proto));
		if (rv_maglev_pick(svc, h, &backend_id)) {
			rv_count_drop(RV_DROP_NO_HEALTHY_BACKEND, service_id);
			return XDP_DROP;
		}
		be = bpf_map_lookup_elem(&backend_map6, &backend_id);
		if (!be) {
			rv_count_drop(RV_DROP_NO_BACKEND, service_id);
			return XDP_DROP;
		}
		na.backend_id = backend_id;
		na.backend_generation = be->generation;
		bpf_map_update_elem(&connection_affinity_map6, &flow, &na, BPF_ANY);
		new_flow = 1;
	}

	struct rv_nat_key6 nk = {
		.sport = be->port,
		.dport = flow.sport,
		.proto = flow.proto,
	};
	__builtin_memcpy(nk.src, be->addr, 16);
	__builtin_memcpy(nk.dst, flow.src, 16);
	if (new_flow || !bpf_map_lookup_elem(&nat_reverse_map6, &nk)) {
		struct rv_nat_value6 nv = {
			.vip_port = flow.dport,
			.service_id = service_id,
		};
		__builtin_memcpy(nv.vip, flow.dst, 16);
		bpf_map_update_elem(&nat_reverse_map6, &nk, &nv, BPF_ANY);
	}

	if (rv_dnat6(p, data_end, be->addr, be->port)) {
		rv_count_drop(RV_DROP_REWRITE_FAILED, service_id);
		return XDP_DROP;
	}
	rv_count_forward(service_id, (void *)(long)ctx->data_end - (void *)(long)ctx->data, new_flow);
	return XDP_PASS;
}

SEC("xdp")
int xdp_ingress(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct rv_pkt p = {};

	if (rv_parse(data, data_end, &p) != RV_PARSE_OK)
		return XDP_PASS;
	if (p.family == 4)
		return rv_ingress4(ctx, &p);
	return rv_ingress6(ctx, &p);
}
