/* SPDX-License-Identifier: Apache-2.0 */
/*
 * snat.h: source translation for flows to backends on other nodes
 * (externalTrafficPolicy: Cluster), as kube-proxy masquerades them.
 *
 * Why: a pod on another node answers through its own node, straight to the
 * client, with its own address: the client would drop that reply, and this
 * node's tc_nat never sees it. So a flow to such a backend (flag
 * RV_BACKEND_F_SNAT, in a RV_SVC_F_SNAT VIP) also leaves with this node's
 * address and a node port as its source; the backend answers to that, the
 * reply comes back here, and xdp_ingress restores the client and the VIP.
 * The backend sees the node's address, never the client's (what Kubernetes
 * documents for Cluster); local backends keep the client's.
 *
 * State, per family:
 *  - snat_flow_map(6), keyed by the flow as the client sent it: the node
 *    port it leaves from, valid for one backend (ID and generation);
 *  - snat_rev_map(6), keyed by the reply as it arrives (backend endpoint,
 *    node port, protocol): the client and VIP it belongs to. A node port is
 *    unique per backend endpoint and protocol: the range limits concurrent
 *    flows per backend endpoint, not per node.
 * A flow's first packet (of any kind: a SYN must have the mapping its
 * SYN-ACK needs) takes a port: up to RV_SNAT_PORT_PROBES random tries, each
 * free if no mapping holds it or its mapping is idle beyond the config's
 * limit for its state (a FIN or RST seen: closed_idle). Inserts pass the
 * new-flow guard like every other flow state (guard.h). An established
 * flow rechecks that it still owns its port once per tick (a mapping may
 * have been evicted or, idle, taken over), the way NAT flows recheck their
 * reverse entries.
 *
 * Both directions run as stages (stages.h): xdp_ingress has no stack left
 * for them, and the verifier checks them once on their own. Translated
 * packets leave by FIB redirect (route.h): a packet whose source is a local
 * address must not come back into the kernel's forwarding path from the
 * uplink, where it is a martian (IPv4 accept_local aside).
 *
 * Not handled (docs/design/etp-cluster-snat.md): ICMP errors about these
 * flows, and later fragments of a fragmented datagram to such a backend
 * (they keep the client's source).
 */
#ifndef RIVORA_SNAT_H
#define RIVORA_SNAT_H

#include "maps.h"
#include "parse.h"
#include "hash.h"
#include "guard.h"
#include "route.h"

static __always_inline void rv_snat_count(__u32 counter)
{
	__u64 *c = bpf_map_lookup_elem(&snat_stats_map, &counter);

	if (c)
		(*c)++;
}

static __always_inline const struct rv_snat_config *rv_snat_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&snat_config_map, &zero);
}

/* Whether backend `id`'s flows are source-translated (an array lookup,
 * inlined). */
static __always_inline int rv_backend_snat(__u32 id)
{
	const struct rv_backend_health *h = bpf_map_lookup_elem(&backend_health_map, &id);

	return h && (h->flags & RV_BACKEND_F_SNAT);
}

/* Whether a TCP/UDP packet that matched no VIP may be a translated flow's
 * reply: to this node's translation address, into its port range. One
 * inlined lookup for other traffic to the node. */
static __always_inline int rv_snat_reply_candidate(const struct rv_pkt *p, const int v6)
{
	const struct rv_snat_config *cfg = rv_snat_config();
	__u16 port = bpf_ntohs(p->dport);

	if (!cfg || port < cfg->port_min || port > cfg->port_max)
		return 0;
	if (v6) {
		const __u32 *a = (const __u32 *)cfg->addr6;
		return (cfg->flags & RV_SNAT_F_ADDR6) &&
		       !((a[0] ^ p->dst[0]) | (a[1] ^ p->dst[1]) | (a[2] ^ p->dst[2]) | (a[3] ^ p->dst[3]));
	}
	return (cfg->flags & RV_SNAT_F_ADDR4) && cfg->addr4 == p->dst[0];
}

/* A TCP FIN or RST: the mapping may give its port up sooner. */
static __always_inline __u32 rv_snat_closing(const struct rv_pkt *p)
{
	return p->proto == IPPROTO_TCP && (p->tcp_flags & (RV_TCP_FLAG_FIN | RV_TCP_FLAG_RST)) ? RV_SNAT_REV_F_CLOSING
											       : 0;
}

/* The flow a translated packet belongs to, as the client sent it: the
 * parse of the DNATed frame gives the client side, the stage state the VIP
 * side. */
struct rv_snat_side {
	__u32 client[4];
	__u32 vip[4];
	__be16 client_port;
	__be16 vip_port;
};

/* The common part of rv_snat_rev4 and rv_snat_rev6 that the checks read
 * (addresses compared through `owner`). */
static __always_inline int rv_snat_owned(const void *rev, const struct rv_snat_side *s, const int v6)
{
	if (v6) {
		const struct rv_snat_rev6 *r = rev;
		const __u32 *c = (const __u32 *)r->client, *v = (const __u32 *)r->vip;
		__u32 diff = (c[0] ^ s->client[0]) | (c[1] ^ s->client[1]) | (c[2] ^ s->client[2]) |
			     (c[3] ^ s->client[3]) | (v[0] ^ s->vip[0]) | (v[1] ^ s->vip[1]) | (v[2] ^ s->vip[2]) |
			     (v[3] ^ s->vip[3]);
		return !diff && r->client_port == s->client_port && r->vip_port == s->vip_port;
	}
	const struct rv_snat_rev4 *r = rev;
	return r->client == s->client[0] && r->vip == s->vip[0] && r->client_port == s->client_port &&
	       r->vip_port == s->vip_port;
}

/* Whether a mapping last seen at `last_seen` may give its port to another
 * flow now. */
static __always_inline int rv_snat_idle(const struct rv_snat_config *cfg, __u32 last_seen, __u32 flags, __u8 proto,
					__u32 tick)
{
	__u32 limit = proto == IPPROTO_UDP ? cfg->udp_idle
			 : (flags & RV_SNAT_REV_F_CLOSING) ? cfg->closed_idle
							    : cfg->tcp_idle;

	return tick - last_seen >= limit;
}

/* The reverse mapping's key for backend `be`, node port `nport`. */
static __always_inline void rv_snat_rev_key(void *key, const struct rv_be *be, __be16 nport, __u8 proto, const int v6)
{
	if (v6) {
		struct rv_snat_rev_key6 *k = key;
		__builtin_memcpy(k->backend, be->addr, 16);
		k->backend_port = be->port;
		k->node_port = nport;
		k->proto = proto;
	} else {
		struct rv_snat_rev_key4 *k = key;
		k->backend = be->addr[0];
		k->backend_port = be->port;
		k->node_port = nport;
		k->proto = proto;
	}
}

/* Takes a node port for the flow `s` to backend `be`: writes the reverse
 * mapping, then the flow's. Returns -1 when every try is held by a live
 * mapping. */
static __always_inline int rv_snat_alloc(const struct rv_pkt *p, const struct rv_snat_side *s, const struct rv_be *be,
					 __u32 service_id, const struct rv_snat_config *cfg, __u32 tick,
					 const void *flow_key, __be16 *out, const int v6)
{
	void *rev_map = v6 ? (void *)&snat_rev_map6 : (void *)&snat_rev_map;
	void *flow_map = v6 ? (void *)&snat_flow_map6 : (void *)&snat_flow_map;
	union {
		struct rv_snat_rev_key4 k4;
		struct rv_snat_rev_key6 k6;
	} key = {};
	union {
		struct rv_snat_rev4 v4;
		struct rv_snat_rev6 v6;
	} val = {};
	__u32 closing = rv_snat_closing(p);
	__u32 range;

	if (cfg->port_max < cfg->port_min)
		return -1;
	range = (__u32)cfg->port_max - cfg->port_min + 1;
	if (v6) {
		__builtin_memcpy(val.v6.client, s->client, 16);
		__builtin_memcpy(val.v6.vip, s->vip, 16);
		val.v6.client_port = s->client_port;
		val.v6.vip_port = s->vip_port;
		val.v6.service_id = service_id;
		val.v6.last_seen = tick;
		val.v6.flags = closing;
	} else {
		val.v4.client = s->client[0];
		val.v4.vip = s->vip[0];
		val.v4.client_port = s->client_port;
		val.v4.vip_port = s->vip_port;
		val.v4.service_id = service_id;
		val.v4.last_seen = tick;
		val.v4.flags = closing;
	}
	/* Random tries, not a stride from the flow's hash: a fixed stride
	 * meets the busy stretches of the range together (the bench found a
	 * SYN refused at 15% occupancy), and a retransmitted SYN would retry
	 * the very same ports. */
	for (int i = 0; i < RV_SNAT_PORT_PROBES; i++) {
		__be16 nport = bpf_htons((__u16)(cfg->port_min + bpf_get_prandom_u32() % range));
		const void *held;

		rv_snat_rev_key(&key, be, nport, p->proto, v6);
		held = bpf_map_lookup_elem(rev_map, &key);
		if (held) {
			int owned = rv_snat_owned(held, s, v6);
			__u32 last = v6 ? ((const struct rv_snat_rev6 *)held)->last_seen
					: ((const struct rv_snat_rev4 *)held)->last_seen;
			__u32 flags = v6 ? ((const struct rv_snat_rev6 *)held)->flags
					 : ((const struct rv_snat_rev4 *)held)->flags;

			if (!owned && !rv_snat_idle(cfg, last, flags, p->proto, tick))
				continue;
			if (bpf_map_update_elem(rev_map, &key, &val, BPF_ANY))
				continue;
			if (!owned)
				rv_snat_count(RV_SNAT_REUSED_IDLE);
		} else if (bpf_map_update_elem(rev_map, &key, &val, BPF_NOEXIST)) {
			continue;
		}
		struct rv_snat_flow f = {
			.node_port = nport, .backend_id = be->id, .backend_generation = be->generation, .checked = tick
		};
		bpf_map_update_elem(flow_map, flow_key, &f, BPF_ANY);
		rv_snat_count(RV_SNAT_ALLOCATED);
		*out = nport;
		return 0;
	}
	return -1;
}

/* The node port of flow `s` to backend `be`: its mapping's while the flow
 * still owns it (checked once per tick, and on a FIN or RST, which mark
 * the mapping closing), else a new one (within the new-flow guard,
 * `*admit`). Returns -1 when none can be had. */
static __always_inline int rv_snat_port(const struct rv_pkt *p, const struct rv_snat_side *s, const struct rv_be *be,
					__u32 service_id, int *admit, const struct rv_snat_config *cfg, __u32 tick,
					__be16 *out, const int v6)
{
	void *rev_map = v6 ? (void *)&snat_rev_map6 : (void *)&snat_rev_map;
	union {
		struct rv_flow4 f4;
		struct rv_flow6 f6;
	} fk = {};
	union {
		struct rv_snat_rev_key4 k4;
		struct rv_snat_rev_key6 k6;
	} rk = {};
	struct rv_snat_flow *f;
	__u32 closing = rv_snat_closing(p);

	if (v6) {
		__builtin_memcpy(fk.f6.src, s->client, 16);
		__builtin_memcpy(fk.f6.dst, s->vip, 16);
		fk.f6.sport = s->client_port;
		fk.f6.dport = s->vip_port;
		fk.f6.proto = p->proto;
		f = bpf_map_lookup_elem(&snat_flow_map6, &fk);
	} else {
		fk.f4.src = s->client[0];
		fk.f4.dst = s->vip[0];
		fk.f4.sport = s->client_port;
		fk.f4.dport = s->vip_port;
		fk.f4.proto = p->proto;
		f = bpf_map_lookup_elem(&snat_flow_map, &fk);
	}
	if (f && f->backend_id == be->id && f->backend_generation == be->generation) {
		__be16 nport = f->node_port;

		if (f->checked == tick && !closing) {
			*out = nport;
			return 0;
		}
		rv_snat_rev_key(&rk, be, nport, p->proto, v6);
		void *rev = bpf_map_lookup_elem(rev_map, &rk);
		if (rev && rv_snat_owned(rev, s, v6)) {
			if (v6) {
				((struct rv_snat_rev6 *)rev)->last_seen = tick;
				((struct rv_snat_rev6 *)rev)->flags |= closing;
			} else {
				((struct rv_snat_rev4 *)rev)->last_seen = tick;
				((struct rv_snat_rev4 *)rev)->flags |= closing;
			}
			f->checked = tick;
			*out = nport;
			return 0;
		}
		/* Evicted, or taken over while idle: the flow needs a new one. */
	}
	if (!rv_guard_ask(admit))
		return -1;
	return rv_snat_alloc(p, s, be, service_id, cfg, tick, &fk, out, v6);
}

/* Next hops towards clients of translated replies, per CPU: a small
 * direct-mapped cache keyed by the client's address, valid for the tick
 * it was learnt in (as the backends' next-hop cache). Without it every
 * reply asked the FIB (bench: 3-12 ns for IPv4, about 100 ns for IPv6).
 * Not pinned: a cache, rebuilt by the first replies after a load. */
struct rv_reply_hop {
	__u32 addr[4];
	struct rv_nexthop nh; /* nh.mtu: the largest packet the FIB passed */
};

#define RV_REPLY_HOP_SLOTS 256

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RV_REPLY_HOP_SLOTS);
	__type(key, __u32);
	__type(value, struct rv_reply_hop);
} reply_hop_map SEC(".maps");

/* Sends a translated reply (already rewritten: from `vip` to `client`)
 * towards the client: from the cache while fresh, else as the FIB says
 * (and cached), else to the kernel (counted RV_SNAT_TO_KERNEL). */
static __always_inline int rv_snat_reply_send(struct xdp_md *ctx, const __u32 *client, const __u32 *vip, __u32 tick,
					      const int v6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0, slot, tot_len;
	struct rv_reply_hop *hop;
	struct rv_route_scratch *scratch;
	struct rv_route_req *req;
	struct ethhdr *eth = data;
	int verdict;

	slot = ((client[0] ^ client[1] ^ client[2] ^ client[3]) * 2654435761u) >> 24;
	hop = bpf_map_lookup_elem(&reply_hop_map, &slot);
	if (!hop)
		return XDP_PASS;
	int same = hop->addr[0] == client[0] &&
		   (!v6 || (hop->addr[1] == client[1] && hop->addr[2] == client[2] && hop->addr[3] == client[3]));
	if (same && hop->nh.tick == tick && hop->nh.ifindex) {
		verdict = rv_forward_nexthop(ctx, &hop->nh, v6);
		if (verdict >= 0)
			return verdict;
	}
	/* Ask the FIB: the TTL, tags and the frame's length first. */
	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (v6) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if (eth->h_proto != bpf_htons(ETH_P_IPV6) || (void *)(ip6 + 1) > data_end || ip6->hop_limit <= 1)
			goto kernel;
		tot_len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
	} else {
		struct iphdr *ip = (void *)(eth + 1);
		if (eth->h_proto != bpf_htons(ETH_P_IP) || (void *)(ip + 1) > data_end || ip->ttl <= 1)
			goto kernel;
		tot_len = bpf_ntohs(ip->tot_len);
	}
	scratch = bpf_map_lookup_elem(&route_scratch_map, &zero);
	if (!scratch)
		goto kernel;
	req = &scratch->req;
	__builtin_memset(req, 0, sizeof(*req));
	__builtin_memcpy(req->src, vip, 16);
	__builtin_memcpy(req->dst, client, 16);
	/* No backend's next-hop slot: rv_route asks the FIB. */
	req->backend_id = RV_MAX_BACKENDS;
	req->tot_len = tot_len;
	req->v6 = v6;
	if (rv_route(ctx, req) != BPF_FIB_LKUP_RET_SUCCESS)
		goto kernel;
	__builtin_memcpy(hop->addr, client, 16);
	__builtin_memcpy(hop->nh.dmac, req->dmac, ETH_ALEN);
	__builtin_memcpy(hop->nh.smac, req->smac, ETH_ALEN);
	hop->nh.mtu = same && hop->nh.ifindex == req->ifindex && hop->nh.tick == tick && hop->nh.mtu > tot_len
			      ? hop->nh.mtu
			      : tot_len;
	hop->nh.ifindex = req->ifindex;
	hop->nh.tick = tick;
	return rv_route_send(ctx, req->dmac, req->smac, req->ifindex, v6);
kernel:
	rv_snat_count(RV_SNAT_TO_KERNEL);
	return XDP_PASS;
}

#endif /* RIVORA_SNAT_H */
