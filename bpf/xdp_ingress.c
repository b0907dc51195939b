/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xdp_ingress: the forwarding program. For every frame on the attached
 * interface: parse, match a VIP, check its source ranges, rate-limit SYNs,
 * pick a backend (affinity, else Maglev), then forward by the VIP's mode.
 * Full NAT: rewrite the destination to the backend, record the reverse
 * mapping for tc_nat when the backend endpoint is shared by several VIPs
 * (reverse.h), and XDP_PASS so the kernel routes the packet on (or, for
 * `natForwarding: fib`, route it here and redirect it: route.h).
 *
 * A flow's state is made by the packet that shows it is one: not by a SYN
 * or a UDP flow's first datagram (balance.h), and within the new-flow
 * guard's budget (guard.h), so floods of unproven flows evict nothing.
 *
 * Around that path: a later fragment follows the backend its first fragment
 * chose (frag_map); an ICMP error about a reply goes to the backend that
 * owns the flow, with the quoted packet rewritten to match. Those two
 * shapes, and the FIB slow path of natForwarding fib, run as programs of
 * their own, reached by tail call (stages.h says why), defined at the end
 * of this file.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "rivora_abi.h"
#include "maps.h"
#include "parse.h"
#include "hash.h"
#include "balance.h"
#include "nat.h"
#include "route.h"
#include "encap.h"
#include "icmp.h"
#include "backend_stats.h"
#include "guard.h"
#include "reverse.h"
#include "flow_filter.h"
#include "source_ranges.h"
#include "snat.h"
#include "client_affinity.h"
#include "stages.h"
#include "reset.h"
#include "classify.h"

char LICENSE[] SEC("license") = "GPL";

#define RV_NANO 1000000000ULL
/* Refill at most this much time at once, so elapsed * rate cannot overflow
 * (rate is at most 1,000,000 SYNs/s, enforced by the control plane). */
#define RV_RL_MAX_ELAPSED_NS (1000ULL * RV_NANO)


/* A packet forwarded to backend `backend_id`: the VIP's and the backend's
 * counters. */
static __always_inline void rv_count_forward(__u32 service_id, __u32 backend_id, __u64 bytes, int new_flow)
{
	struct rv_vip_stats *s = bpf_map_lookup_elem(&stats_map, &service_id);

	rv_backend_count(backend_id, bytes, new_flow);

	if (s) {
		s->packets++;
		s->bytes += bytes;
		if (new_flow)
			s->new_flows++;
	}
}

static __always_inline void rv_count_event(__u32 reason)
{
	struct rv_drop_stats *d = bpf_map_lookup_elem(&drop_stats_map, &reason);

	if (d)
		d->packets++;
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

/* Looks (proto, addr, port) up in the active half of vip_index_map, the
 * inlined copy of vip_map/vip_map6 (maps.h says why it exists). Returns the
 * slot on a hit, null on a miss: the probe reached an unused slot or the
 * end of the window, where the control plane never places a key. The
 * comparison is branch-free and every exit leaves through one point, so the
 * verifier sees few distinct paths into the rest of the program. */
static __always_inline const struct rv_vip_slot *rv_vip_index_find(__u32 half, __u8 proto, const __u32 *addr,
								   __be16 port, const int v6)
{
	struct {
		__be16 port;
		__u8 proto;
		__u8 flags;
	} want = { .port = port, .proto = proto, .flags = RV_VIP_SLOT_USED | (v6 ? RV_VIP_SLOT_IPV6 : 0) };
	const struct rv_vip_slot *found = 0;
	__u32 tag, h, base = (half & 1) * RV_VIP_INDEX_SLOTS;

	__builtin_memcpy(&tag, &want, 4);
	h = rv_vip_index_hash(addr, port, proto, v6);
#pragma unroll
	for (int i = 0; i < RV_VIP_INDEX_PROBES; i++) {
		__u32 idx = base + ((h + i) & (RV_VIP_INDEX_SLOTS - 1));
		const struct rv_vip_slot *s = bpf_map_lookup_elem(&vip_index_map, &idx);
		const __u32 *w;
		__u32 diff;

		if (!s || !(s->flags & RV_VIP_SLOT_USED))
			break;
		w = (const __u32 *)s->addr;
		diff = (*(const __u32 *)&s->port ^ tag) | (w[0] ^ addr[0]);
		if (v6)
			diff |= (w[1] ^ addr[1]) | (w[2] ^ addr[2]) | (w[3] ^ addr[3]);
		if (!diff) {
			found = s;
			break;
		}
	}
	return found;
}

/* The service of (proto, addr, port): an exact VIP, else a port-range or
 * whole-address VIP (longest prefix). Returns -1 when there is none.
 *
 * Exact VIPs are looked up in vip_index_map while vip_index_ctl_map says
 * it is complete (no helper call: the verifier inlines array lookups),
 * otherwise in vip_map/vip_map6 as before. The tries are consulted only
 * if the family has a range VIP (or the index is not in use). `indexed` 0:
 * vip_map only, for paths too rare to be worth the verifier's time on a
 * second inlined copy of the probe loop (ICMP errors). */
static __always_inline int rv_find_vip(__u8 proto, const __u32 *addr, __be16 port, __u32 *service_id, const int v6,
				       const int indexed)
{
	const struct rv_vip_index_ctl *ctl = 0;
	struct rv_vip_value *v = 0;
	__u32 zero = 0;

	if (indexed)
		ctl = bpf_map_lookup_elem(&vip_index_ctl_map, &zero);
	if (ctl && (ctl->flags & RV_VIP_INDEX_COMPLETE)) {
		__u32 flags = ctl->flags;
		const struct rv_vip_slot *s = rv_vip_index_find(ctl->half, proto, addr, port, v6);

		if (s) {
			*service_id = s->service_id;
			return 0;
		}
		if (!(flags & (v6 ? RV_VIP_INDEX_RANGES6 : RV_VIP_INDEX_RANGES4)))
			return -1;
	} else if (v6) {
		struct rv_vip_key6 k = { .port = port, .proto = proto };
		__builtin_memcpy(k.addr, addr, 16);
		v = bpf_map_lookup_elem(&vip_map6, &k);
	} else {
		struct rv_vip_key4 k = { .addr = addr[0], .port = port, .proto = proto };
		v = bpf_map_lookup_elem(&vip_map, &k);
	}
	if (!v) {
		if (v6) {
			struct rv_vip_range_key6 r = { .prefixlen = 8 + 128 + 16, .proto = proto };
			__builtin_memcpy(r.addr, addr, 16);
			__builtin_memcpy(r.port, &port, 2);
			v = bpf_map_lookup_elem(&vip_range_map6, &r);
		} else {
			struct rv_vip_range_key4 r = { .prefixlen = 8 + 32 + 16, .proto = proto };
			__builtin_memcpy(r.addr, addr, 4);
			__builtin_memcpy(r.port, &port, 2);
			v = bpf_map_lookup_elem(&vip_range_map, &r);
		}
	}
	if (!v)
		return -1;
	*service_id = v->service_id;
	return 0;
}

static __always_inline int rv_backend(__u32 id, struct rv_be *out, const int v6)
{
	if (v6) {
		struct rv_backend6 *b = bpf_map_lookup_elem(&backend_map6, &id);
		if (!b || !b->generation)
			return -1;
		__builtin_memcpy(out->addr, b->addr, 16);
		__builtin_memcpy(out->mac, b->mac, 6);
		out->port = b->port;
		out->generation = b->generation;
		out->id = id;
	} else {
		struct rv_backend4 *b = bpf_map_lookup_elem(&backend_map, &id);
		if (!b || !b->generation)
			return -1;
		out->addr[0] = b->addr;
		__builtin_memcpy(out->mac, b->mac, 6);
		out->port = b->port;
		out->generation = b->generation;
		out->id = id;
	}
	return 0;
}

/* Whether a TCP SYN from this source is within its token bucket: the
 * service's own limit if it has one, else the node-wide one if enabled. */
static __always_inline int rv_syn_allowed(const struct rv_pkt *p, const struct rv_service *svc, __u32 service_id,
					  int *admit, const int v6)
{
	struct rv_rl_config *cfg;
	struct rv_rl_bucket *b;
	__u32 key_service = service_id, zero = 0;
	__u64 now, elapsed, tokens, cap;

	if (svc->flags & RV_SVC_F_SYN_RATE_LIMIT) {
		cfg = bpf_map_lookup_elem(&svc_rl_config_map, &service_id);
	} else {
		cfg = bpf_map_lookup_elem(&rl_config_map, &zero);
		key_service = RV_RL_NODE_SERVICE;
	}
	if (!cfg || !cfg->enabled || !cfg->rate)
		return 1;
	now = bpf_ktime_get_ns();
	cap = cfg->burst * RV_NANO;
	if (v6) {
		struct rv_rl_key6 k = { .service_id = key_service };
		__builtin_memcpy(k.src, p->src, 16);
		b = bpf_map_lookup_elem(&rl_buckets_map6, &k);
		if (!b) {
			/* A new source's bucket is an insert like any other. */
			if (!rv_guard_ask(admit))
				return 1;
			struct rv_rl_bucket nb = { .nanotokens = cap - RV_NANO, .last_ns = now };
			bpf_map_update_elem(&rl_buckets_map6, &k, &nb, BPF_ANY);
			return 1;
		}
	} else {
		struct rv_rl_key4 k = { .src = p->src[0], .service_id = key_service };
		b = bpf_map_lookup_elem(&rl_buckets_map, &k);
		if (!b) {
			if (!rv_guard_ask(admit))
				return 1;
			struct rv_rl_bucket nb = { .nanotokens = cap - RV_NANO, .last_ns = now };
			bpf_map_update_elem(&rl_buckets_map, &k, &nb, BPF_ANY);
			return 1;
		}
	}
	elapsed = now - b->last_ns;
	if (elapsed > RV_RL_MAX_ELAPSED_NS)
		elapsed = RV_RL_MAX_ELAPSED_NS;
	tokens = b->nanotokens + elapsed * cfg->rate;
	if (tokens > cap)
		tokens = cap;
	b->last_ns = now;
	if (tokens < RV_NANO) {
		b->nanotokens = tokens;
		return 0;
	}
	b->nanotokens = tokens - RV_NANO;
	return 1;
}

/* The backend of an established flow, if its affinity entry still names a
 * usable backend (healthy or draining, same generation). `entry` (may be
 * null) receives the affinity entry itself, also when it is not used (a
 * SYN's, or a stale one), or null. `opens` (a TCP SYN, balance.h
 * rv_tcp_opens) makes it a miss whatever the table holds. The lookup is made
 * even then and its result dropped at the miss test: skipping it gives the
 * verifier one more path into the whole forwarding code (measured with
 * clang-19: 860k processed instructions of the 1M limit, against 711k for
 * this form and 776k before SYNs were special), while the lookup costs a
 * SYN one LRU probe beside the two map updates a new flow makes anyway. */
static __always_inline int rv_affinity_backend(const __u32 *src, const __u32 *dst, __be16 sport, __be16 dport,
					       __u8 proto, int opens, __u32 *backend_id, struct rv_be *be,
					       struct rv_affinity **entry, const int v6)
{
	struct rv_affinity *aff;

	if (v6) {
		struct rv_flow6 f = { .sport = sport, .dport = dport, .proto = proto };
		__builtin_memcpy(f.src, src, 16);
		__builtin_memcpy(f.dst, dst, 16);
		aff = bpf_map_lookup_elem(&connection_affinity_map6, &f);
	} else {
		struct rv_flow4 f = { .src = src[0], .dst = dst[0], .sport = sport, .dport = dport, .proto = proto };
		aff = bpf_map_lookup_elem(&connection_affinity_map, &f);
	}
	if (entry)
		*entry = aff;
	if (!aff || opens)
		return -1;
	*backend_id = aff->backend_id;
	if (rv_backend(aff->backend_id, be, v6) || !rv_affinity_usable(aff, be->generation))
		return -1;
	return 0;
}

/* The clock in rv_affinity.nat_checked units. Jiffies, not the coarse
 * clock: the verifier inlines bpf_jiffies64 into one load, while
 * bpf_ktime_get_coarse_ns is a helper call into the timekeeping code, which
 * cost 15-20 ns of the ~110 ns of an established NAT packet (interleaved
 * BPF_PROG_TEST_RUN A/B). The tick only has to be short (see
 * RV_NAT_CHECK_JIFFIES_SHIFT), not of a known length. */
static __always_inline __u32 rv_nat_tick(void)
{
	return rv_route_tick();
}

/* Makes the flow's affinity entry, and sets its bit in the flow filter
 * after it (`hf`: hash.h rv_flow_filter_hash), the order flow_filter.h
 * relies on. */
static __always_inline void rv_affinity_record(const struct rv_pkt *p, __u32 backend_id, __u32 generation,
					       __u32 nat_tick, __u32 hf, const int v6)
{
	struct rv_affinity a = {
		.backend_id = backend_id, .backend_generation = generation, .nat_checked = nat_tick
	};

	if (v6) {
		struct rv_flow6 f = { .sport = p->sport, .dport = p->dport, .proto = p->proto };
		__builtin_memcpy(f.src, p->src, 16);
		__builtin_memcpy(f.dst, p->dst, 16);
		bpf_map_update_elem(&connection_affinity_map6, &f, &a, BPF_ANY);
	} else {
		struct rv_flow4 f = {
			.src = p->src[0], .dst = p->dst[0], .sport = p->sport, .dport = p->dport, .proto = p->proto
		};
		bpf_map_update_elem(&connection_affinity_map, &f, &a, BPF_ANY);
	}
	rv_flow_filter_add(hf);
}

/* A first fragment's choice, for the later fragments of its datagram. The
 * key holds the VIP (the later fragments' destination). */
static __always_inline void rv_frag_record(const struct rv_pkt *p, __u32 backend_id, __u32 generation,
					   __u32 service_id, const int v6)
{
	struct rv_frag_value v = {
		.backend_id = backend_id, .backend_generation = generation, .service_id = service_id
	};

	if (v6) {
		struct rv_frag_key6 k = { .id = p->frag_id, .proto = p->proto };
		__builtin_memcpy(k.src, p->src, 16);
		__builtin_memcpy(k.dst, p->dst, 16);
		bpf_map_update_elem(&frag_map6, &k, &v, BPF_ANY);
	} else {
		struct rv_frag_key4 k = { .src = p->src[0], .dst = p->dst[0], .id = p->frag_id, .proto = p->proto };
		bpf_map_update_elem(&frag_map, &k, &v, BPF_ANY);
	}
}

static __always_inline __u64 rv_frame_len(struct xdp_md *ctx)
{
	return (void *)(long)ctx->data_end - (void *)(long)ctx->data;
}

/* A packet of a DSR service ready to go to its backend: handed back to
 * rv_ingress so the (large) DSR path exists once per family, not once per
 * packet shape. */
struct rv_dsr_job {
	struct rv_be be;
	const struct rv_service *svc;
	__u32 service_id;
	int new_flow;
	__u32 tick; /* RV_ACT_ROUTE: the packet's rv_route_tick() */
	int admit;  /* RV_ACT_SNAT: the new-flow guard's answer so far */
};

/* Returned by the shape handlers instead of an XDP verdict: "forward the
 * job by DSR", "route the rewritten packet" (natForwarding: fib; job->be
 * is set), "translate the source too" (a backend on another node: job->be,
 * service_id and admit are set), "a translated flow's reply" (no VIP
 * matched). Not valid XDP actions. */
#define RV_ACT_DSR 100
#define RV_ACT_ROUTE 101
#define RV_ACT_SNAT 102
#define RV_ACT_SNAT_REPLY 103
/* "Refuse with a TCP reset" (the reset stage, reset.h). */
#define RV_ACT_RESET 104

static __always_inline int rv_dsr_defer(struct rv_dsr_job *job, const struct rv_service *svc, const struct rv_be *be,
					__u32 service_id, int new_flow)
{
	if (&job->be != be)
		job->be = *be;
	job->svc = svc;
	job->service_id = service_id;
	job->new_flow = new_flow;
	return RV_ACT_DSR;
}

/* Direct server return of any packet of a DSR service: the frame goes to
 * the backend unchanged (the backend owns the VIP), by MAC (dsr) or in a
 * tunnel (dsr-ipip, dsr-gre). Counted before it changes size. */
static __always_inline int rv_forward_dsr(struct xdp_md *ctx, struct rv_pkt *p, const struct rv_service *svc,
					  const struct rv_be *be, __u32 service_id, int new_flow, const int v6)
{
	__u32 room = 0, egress = 0;
	__u64 len = rv_frame_len(ctx);
	int rc;

	if (svc->mode == RV_MODE_DSR) {
		rv_count_forward(service_id, be->id, len, new_flow);
		return rv_dsr_l2(ctx, be->mac);
	}
	/* Per-flow entropy for the GRE key or the outer IPv6 flow label; an
	 * IPv4 IP-in-IP header has no field for it. */
	__u32 h = 0;
	if (v6 || svc->mode == RV_MODE_DSR_GRE)
		h = rv_flow_hash(p->src, p->dst, p->sport, p->dport, p->proto, 0, v6);
	rc = rv_encap(ctx, p, be->addr, be->id, be->generation, svc->mode == RV_MODE_DSR_GRE, h, &room, &egress, v6);
	switch (rc) {
	case RV_ENCAP_REDIRECT:
		rv_count_forward(service_id, be->id, len, new_flow);
		return bpf_redirect(egress, 0);
	case RV_ENCAP_TO_KERNEL:
		rv_count_forward(service_id, be->id, len, new_flow);
		rv_count_event(RV_PASS_TUNNEL_TO_KERNEL);
		return XDP_PASS;
	case RV_ENCAP_FRAGMENT:
		rv_count_forward(service_id, be->id, len, new_flow);
		rv_count_event(RV_PASS_TOO_BIG_FRAGMENTED);
		return XDP_PASS;
	case RV_ENCAP_TOO_BIG:
		rv_count_event(RV_EVENT_TOO_BIG_ICMP);
		return rv_reply_too_big(ctx, p, room, v6);
	default:
		rv_count_drop(RV_DROP_ENCAP_FAILED, service_id);
		return XDP_DROP;
	}
}

/* TCP or UDP (unfragmented, or a first fragment) to a VIP. */
static __always_inline int rv_ingress_l4(struct xdp_md *ctx, struct rv_pkt *p, struct rv_dsr_job *job, const int v6)
{
	void *data_end = (void *)(long)ctx->data_end;
	const struct rv_service *svc;
	/* The chosen backend lives in the job (no second copy on the
	 * stack: xdp_ingress's frame is at the verifier's limit). */
	struct rv_be *be = &job->be;
	struct rv_affinity *aff = 0;
	__u32 service_id, backend_id = 0;
	int new_flow = 0;

	if (rv_find_vip(p->proto, p->dst, p->dport, &service_id, v6, 1))
		return rv_snat_reply_candidate(p, v6) ? RV_ACT_SNAT_REPLY : XDP_PASS;
	svc = rv_service_of(service_id);
	if (!svc)
		return XDP_DROP;
	/* loadBalancerSourceRanges (source_ranges.h), before the SYN limit. */
	if ((svc->flags & RV_SVC_F_SOURCE_RANGES) && !rv_source_allowed(p->src, service_id, svc->flags, v6)) {
		rv_count_drop(RV_DROP_SOURCE_RANGE, service_id);
		return XDP_DROP;
	}
	int opens = rv_tcp_opens(p);
	int admit = RV_GUARD_UNASKED;
	if (opens && !rv_syn_allowed(p, svc, service_id, &admit, v6)) {
		rv_count_drop(RV_DROP_RATE_LIMITED, service_id);
		return XDP_DROP;
	}

	/* A SYN is a new connection: balanced, never follows an entry
	 * (balance.h). A SYN and a UDP datagram are the packets that are most
	 * often a new flow's: they ask the flow filter first and skip the
	 * lookup when it says no entry exists (flow_filter.h). Other TCP
	 * segments almost always have an entry and go straight to it. */
	int asks_filter = opens || p->proto == IPPROTO_UDP;
	__u32 hf = 0;
	int unpinned = -1;
	if (asks_filter)
		hf = rv_flow_filter_hash(p->src, p->dst, p->sport, p->dport, p->proto, v6);
	if (!asks_filter || rv_flow_maybe_recorded(hf))
		unpinned = rv_affinity_backend(p->src, p->dst, p->sport, p->dport, p->proto, opens, &backend_id, be,
					       &aff, v6);
	if (unpinned) {
		int client_ip = svc->flags & RV_SVC_F_AFFINITY_CLIENT_IP;
		__u32 h5 = rv_flow_hash(p->src, p->dst, p->sport, p->dport, p->proto, 0, v6);
		__u32 h = client_ip ? rv_flow_hash(p->src, p->dst, p->sport, p->dport, p->proto, 1, v6) : h5;
		/* A TCP segment without an entry: the backend of its SYN if that
		 * was just now (balance.h rv_syn_hint). Else ClientIP (with a
		 * timeout: the client's recent choice first, client_affinity.h),
		 * else the hash. */
		if (client_ip)
			rv_client_set(p->src, v6);
		__u64 hint = !opens && p->proto == IPPROTO_TCP ? (1ULL << 32) | h5 : 0;
		int picked = rv_maglev_pick(svc, h, client_ip ? service_id : RV_CLIENT_NONE, hint, &backend_id, v6);
		if (picked) {
			/* The VIP's refused share (balance.h) counts as no_backend
			 * and makes no state; the reset stage answers TCP with a
			 * reset and drops anything else (reset.h), so this path
			 * adds one branch to xdp_ingress. One count site for both
			 * reasons: fewer instructions to verify. */
			int refuse = picked == RV_PICK_REFUSE;
			rv_count_drop(refuse ? RV_DROP_NO_BACKEND : RV_DROP_NO_HEALTHY_BACKEND, service_id);
			return refuse ? RV_ACT_RESET : XDP_DROP;
		}
		if (rv_backend(backend_id, be, v6)) {
			rv_count_drop(RV_DROP_NO_BACKEND, service_id);
			return XDP_DROP;
		}
		/* Which packet of a flow creates its affinity entry: never a SYN
		 * (it only re-points an entry that a reused 5-tuple left behind,
		 * in place), a UDP flow's second packet (or any of a flow whose
		 * entry is stale: it has proven itself), and at once any other TCP
		 * packet without one (the handshake's ACK, or a flow whose entry
		 * was evicted), if the new-flow guard admits it. A SYN and a UDP
		 * flow's first packet are its new flows. */
		if (opens) {
			new_flow = 1;
			rv_syn_hint_set(h5, backend_id, rv_nat_tick());
			if (aff && (aff->backend_id != backend_id || aff->backend_generation != be->generation)) {
				aff->backend_id = backend_id;
				aff->backend_generation = be->generation;
			}
		} else if (p->proto == IPPROTO_UDP && !aff && !rv_udp_seen_before(h5)) {
			new_flow = 1;
		} else if (rv_guard_ask(&admit)) {
			rv_affinity_record(p, backend_id, be->generation, rv_nat_tick(),
					   asks_filter ? hf : rv_flow_filter_hash(p->src, p->dst, p->sport, p->dport,
										  p->proto, v6),
					   v6);
		}
	}

	if (p->first_frag)
		rv_frag_record(p, backend_id, be->generation, service_id, v6);
	if (svc->mode != RV_MODE_NAT)
		return rv_dsr_defer(job, svc, be, service_id, new_flow);

	/* Port 0: the backend serves whatever port the client asked for. */
	__be16 be_port = be->port ? be->port : p->dport;
	/* A backend on another node: its replies come back to the node
	 * address the SNAT stage gives the flow, not through tc_nat, so there
	 * is no reverse entry to keep. */
	int snat = (svc->flags & RV_SVC_F_SNAT) && rv_backend_snat(be->id);
	/* The reply's way back (reverse.h): nothing to record when the
	 * backend endpoint serves this VIP alone. Otherwise a flow without an
	 * affinity entry records its reverse entry (guarded, like any entry);
	 * an established flow looks its entry up (and re-creates it if the LRU
	 * evicted it) once per tick, not on every packet: that lookup was a
	 * third hash-table walk on the hottest path. The entry can only be
	 * evicted while it is idle, and the first packet after an idle tick (at
	 * most about a second) always rechecks it. */
	__u32 tick = rv_nat_tick();
	if (!snat && unpinned) {
		if (!rv_nat_endpoint_exclusive(be->addr, be_port, p->proto, v6))
			rv_nat_record(p, be->addr, be_port, service_id, &admit, v6);
	} else if (!snat && aff && aff->nat_checked != tick) {
		if (!rv_nat_endpoint_exclusive(be->addr, be_port, p->proto, v6))
			rv_nat_record(p, be->addr, be_port, service_id, 0, v6);
		aff->nat_checked = tick;
	}
	if (rv_dnat_l4(p, data_end, be->addr, be_port, v6)) {
		rv_count_drop(RV_DROP_REWRITE_FAILED, service_id);
		return XDP_DROP;
	}
	rv_count_forward(service_id, be->id, rv_frame_len(ctx), new_flow);
	if (snat) {
		be->port = be_port;
		job->service_id = service_id;
		job->admit = admit;
		return RV_ACT_SNAT;
	}
	if (svc->flags & RV_SVC_F_NAT_FIB) {
		job->tick = tick;
		return RV_ACT_ROUTE;
	}
	return XDP_PASS;
}

/* A later fragment: it goes where its first fragment went, or, if that was
 * not seen, to the kernel untouched (never guessed). */
static __always_inline int rv_ingress_frag(struct xdp_md *ctx, struct rv_pkt *p, struct rv_dsr_job *job, const int v6)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct rv_frag_value *fv;
	struct rv_be be = {};

	if (v6) {
		struct rv_frag_key6 k = { .id = p->frag_id, .proto = p->proto };
		__builtin_memcpy(k.src, p->src, 16);
		__builtin_memcpy(k.dst, p->dst, 16);
		fv = bpf_map_lookup_elem(&frag_map6, &k);
	} else {
		struct rv_frag_key4 k = { .src = p->src[0], .dst = p->dst[0], .id = p->frag_id, .proto = p->proto };
		fv = bpf_map_lookup_elem(&frag_map, &k);
	}
	if (!fv || rv_backend(fv->backend_id, &be, v6) || be.generation != fv->backend_generation ||
	    rv_backend_state(fv->backend_id) == RV_BACKEND_DOWN) {
		rv_count_event(RV_PASS_FRAG_UNMATCHED);
		return XDP_PASS;
	}
	__u32 service_id = fv->service_id;
	const struct rv_service *svc = bpf_map_lookup_elem(&service_config_map, &service_id);
	if (svc && svc->mode != RV_MODE_NAT)
		return rv_dsr_defer(job, svc, &be, service_id, 0);
	if (rv_nat_frag(p, data_end, be.addr, 0, v6)) {
		rv_count_drop(RV_DROP_REWRITE_FAILED, service_id);
		return XDP_DROP;
	}
	rv_count_forward(service_id, be.id, rv_frame_len(ctx), 0);
	return XDP_PASS;
}

/* An ICMP error about one of our replies (a router on the way to the client
 * could not deliver VIP -> client): it belongs to the backend that owns the
 * flow. The quoted packet is the reply, VIP:vport -> client:cport, so the
 * flow is client:cport -> VIP:vport. */
static __always_inline int rv_ingress_icmp(struct xdp_md *ctx, struct rv_pkt *p, struct rv_dsr_job *job, const int v6)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct rv_be be = {};
	__u32 service_id, backend_id;

	if (rv_find_vip(p->in_proto, p->in_src, p->in_sport, &service_id, v6, 0))
		return XDP_PASS;
	const struct rv_service *svc = bpf_map_lookup_elem(&service_config_map, &service_id);
	if (rv_affinity_backend(p->in_dst, p->in_src, p->in_dport, p->in_sport, p->in_proto, 0, &backend_id, &be, 0,
				v6)) {
		/* No entry: a flow that has none (yet), such as a connection
		 * still in its handshake or a one-datagram UDP flow, is where
		 * Maglev sends it. */
		if (!svc || !(svc->flags & RV_SVC_F_ACTIVE) ||
		    rv_maglev_pick(svc,
				   rv_flow_hash(p->in_dst, p->in_src, p->in_dport, p->in_sport, p->in_proto,
						svc->flags & RV_SVC_F_AFFINITY_CLIENT_IP, v6),
				   RV_CLIENT_NONE, 0, &backend_id, v6) ||
		    rv_backend(backend_id, &be, v6)) {
			rv_count_event(RV_PASS_ICMP_UNMATCHED);
			return XDP_PASS;
		}
	}
	if (svc && svc->mode != RV_MODE_NAT)
		return rv_dsr_defer(job, svc, &be, service_id, 0);
	__be16 be_port = be.port ? be.port : p->in_sport;
	if (rv_nat_icmp(p, data_end, be.addr, be_port, 0, 1, v6)) {
		rv_count_drop(RV_DROP_REWRITE_FAILED, service_id);
		return XDP_DROP;
	}
	rv_count_forward(service_id, be.id, rv_frame_len(ctx), 0);
	return XDP_PASS;
}

/* Step 6 for a packet rv_ingress_l4 decided (or a shape stage, by DSR):
 * NAT packets are already rewritten; `natForwarding: fib` ones are sent
 * to the cached next hop, or continue in the route stage when it is not
 * cached this tick; DSR packets go to their backend. */
static __always_inline int rv_forward(struct xdp_md *ctx, struct rv_pkt *p, struct rv_dsr_job *job, int verdict,
				      const int v6)
{
	if (verdict == RV_ACT_ROUTE) {
		struct rv_stage_state *st;

		verdict = rv_forward_cached(ctx, &job->be, job->tick, v6);
		if (verdict >= 0)
			return verdict;
		st = rv_stage_state();
		if (!st)
			return XDP_PASS;
		st->be = job->be;
		return rv_stage_jump(ctx, v6 ? RV_STAGE_ROUTE6 : RV_STAGE_ROUTE4);
	}
	if (verdict == RV_ACT_SNAT) {
		struct rv_stage_state *st = rv_stage_state();

		if (!st)
			return XDP_DROP;
		st->be = job->be;
		__builtin_memcpy(st->vip, p->dst, 16);
		st->vip_port = p->dport;
		st->service_id = job->service_id;
		st->admit = job->admit;
		return rv_stage_jump(ctx, v6 ? RV_STAGE_SNAT6 : RV_STAGE_SNAT4);
	}
	if (verdict == RV_ACT_SNAT_REPLY)
		return rv_stage_jump(ctx, v6 ? RV_STAGE_SNAT_REPLY6 : RV_STAGE_SNAT_REPLY4);
	if (verdict == RV_ACT_RESET)
		return rv_stage_jump(ctx, v6 ? RV_STAGE_RESET6 : RV_STAGE_RESET4);
	if (verdict != RV_ACT_DSR)
		return verdict;
	if (!job->svc)
		return XDP_DROP;
	return rv_forward_dsr(ctx, p, job->svc, &job->be, job->service_id, job->new_flow, v6);
}

/* Steps 2 to 6 of a parsed packet. */
static __always_inline int rv_ingress(struct xdp_md *ctx, struct rv_pkt *p, const int v6)
{
	struct rv_dsr_job job = {};
	int verdict;

	/* 2. The special shapes continue in their own programs. */
	if (p->kind == RV_PKT_ICMP_ERR)
		return rv_stage_jump(ctx, v6 ? RV_STAGE_ICMP6 : RV_STAGE_ICMP4);
	if (p->kind == RV_PKT_FRAG_LATER)
		return rv_stage_jump(ctx, v6 ? RV_STAGE_FRAG6 : RV_STAGE_FRAG4);
	/* 3. Match a VIP (and check its source ranges), 4. rate-limit,
	 * 5. pick a backend (and, for NAT, rewrite). */
	verdict = rv_ingress_l4(ctx, p, &job, v6);
	/* 6. Forward by the VIP's mode. */
	return rv_forward(ctx, p, &job, verdict, v6);
}

/* 1. Parse, then steps 2-6 per family. */
SEC("xdp")
int xdp_ingress(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct rv_pkt p = {};
	int rc = rv_parse(data, data_end, &p);

	/* A classifier VIP's packets (any protocol: the parse may have
	 * passed on it) continue in the classifier stage. */
	if (p.family == 4 && rv_cls_wants(p.dst, 0))
		return rv_stage_jump(ctx, RV_STAGE_CLS4);
	if (p.family == 6 && rv_cls_wants(p.dst, 1))
		return rv_stage_jump(ctx, RV_STAGE_CLS6);
	if (rc != RV_PARSE_OK)
		return XDP_PASS;
	if (p.family == 4)
		return rv_ingress(ctx, &p, 0);
	return rv_ingress(ctx, &p, 1);
}

/*
 * The stages (stages.h), in stage_map order. Each is a whole XDP program:
 * the ICMP and fragment stages parse the frame again (only the shape that
 * brought it here is theirs; anything else goes to the kernel), the route
 * stage takes its backend from rv_stage_state.
 */

/* Step 2 for a shape stage, then step 6 (a NAT packet is rewritten and
 * goes to the kernel; a DSR VIP's goes to its backend). */
static __always_inline int rv_stage_shape(struct xdp_md *ctx, const int kind, const int v6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct rv_dsr_job job = {};
	struct rv_pkt p = {};
	int verdict;

	if (rv_parse(data, data_end, &p) != RV_PARSE_OK || p.kind != kind || p.family != (v6 ? 6 : 4))
		return XDP_PASS;
	if (kind == RV_PKT_ICMP_ERR)
		verdict = rv_ingress_icmp(ctx, &p, &job, v6);
	else
		verdict = rv_ingress_frag(ctx, &p, &job, v6);
	if (verdict != RV_ACT_DSR)
		return verdict;
	if (!job.svc)
		return XDP_DROP;
	return rv_forward_dsr(ctx, &p, job.svc, &job.be, job.service_id, job.new_flow, v6);
}

/* Step 6, natForwarding fib, next hop not cached: the FIB decides. The
 * frame is already rewritten for the backend in rv_stage_state. */
static __always_inline int rv_stage_route(struct xdp_md *ctx, const int v6)
{
	struct rv_stage_state *st = rv_stage_state();
	struct rv_be be;
	int verdict;

	if (!st)
		return XDP_PASS;
	be = st->be;
	verdict = rv_forward_routed(ctx, &be, v6);
	if (verdict == XDP_PASS)
		rv_count_event(RV_PASS_NAT_TO_KERNEL);
	return verdict;
}

SEC("xdp")
int xdp_stage_icmp4(struct xdp_md *ctx)
{
	return rv_stage_shape(ctx, RV_PKT_ICMP_ERR, 0);
}

SEC("xdp")
int xdp_stage_icmp6(struct xdp_md *ctx)
{
	return rv_stage_shape(ctx, RV_PKT_ICMP_ERR, 1);
}

SEC("xdp")
int xdp_stage_frag4(struct xdp_md *ctx)
{
	return rv_stage_shape(ctx, RV_PKT_FRAG_LATER, 0);
}

SEC("xdp")
int xdp_stage_frag6(struct xdp_md *ctx)
{
	return rv_stage_shape(ctx, RV_PKT_FRAG_LATER, 1);
}

SEC("xdp")
int xdp_stage_route4(struct xdp_md *ctx)
{
	return rv_stage_route(ctx, 0);
}

SEC("xdp")
int xdp_stage_route6(struct xdp_md *ctx)
{
	return rv_stage_route(ctx, 1);
}

/* Step 6 for a flow to a backend on another node (snat.h): the frame is
 * already rewritten for the backend in rv_stage_state; its source becomes
 * this node's address and the flow's node port, and the FIB routes it. A
 * packet that cannot get a port is dropped: sent with the client's source
 * its reply would bypass this node. */
static __always_inline int rv_stage_snat(struct xdp_md *ctx, const int v6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct rv_stage_state *st = rv_stage_state();
	const struct rv_snat_config *cfg = rv_snat_config();
	struct rv_snat_side side = {};
	struct rv_pkt p = {};
	struct rv_be be;
	__be16 nport = 0;
	__u32 tick = rv_route_tick();
	int verdict;

	if (!st)
		return XDP_DROP;
	if (!cfg || !(cfg->flags & (v6 ? RV_SNAT_F_ADDR6 : RV_SNAT_F_ADDR4)) || rv_parse(data, data_end, &p) != RV_PARSE_OK ||
	    p.kind != RV_PKT_L4 || p.family != (v6 ? 6 : 4)) {
		rv_count_drop(RV_DROP_REWRITE_FAILED, st->service_id);
		return XDP_DROP;
	}
	be = st->be;
	__builtin_memcpy(side.client, p.src, 16);
	__builtin_memcpy(side.vip, st->vip, 16);
	side.client_port = p.sport;
	side.vip_port = st->vip_port;
	if (rv_snat_port(&p, &side, &be, st->service_id, &st->admit, cfg, tick, &nport, v6)) {
		rv_count_drop(RV_DROP_SNAT_EXHAUSTED, st->service_id);
		return XDP_DROP;
	}
	if (rv_nat_l4(&p, data_end, v6 ? (const __u32 *)cfg->addr6 : &cfg->addr4, nport, 1, v6)) {
		rv_count_drop(RV_DROP_REWRITE_FAILED, st->service_id);
		return XDP_DROP;
	}
	rv_snat_count(RV_SNAT_FORWARDED);
	verdict = rv_forward_cached(ctx, &be, tick, v6);
	if (verdict >= 0)
		return verdict;
	verdict = rv_forward_routed(ctx, &be, v6);
	if (verdict == XDP_PASS)
		rv_snat_count(RV_SNAT_TO_KERNEL);
	return verdict;
}

/* A reply of a translated flow (snat.h): from the backend to this node's
 * address and the flow's node port. It goes back to the client as the VIP
 * (source and destination both rewritten), routed by the FIB towards the
 * client. Without a mapping it is the kernel's (another local socket's, or
 * a flow the table forgot, which the kernel then resets). */
static __always_inline int rv_stage_snat_reply(struct xdp_md *ctx, const int v6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	union {
		struct rv_snat_rev_key4 k4;
		struct rv_snat_rev_key6 k6;
	} key = {};
	struct rv_pkt p = {};
	struct rv_be to = { .id = RV_MAX_BACKENDS };
	__u32 vip[4] = {}, service_id;
	__be16 vip_port, client_port;
	__u32 tick = rv_route_tick(), closing;

	if (rv_parse(data, data_end, &p) != RV_PARSE_OK || p.kind != RV_PKT_L4 || p.family != (v6 ? 6 : 4))
		return XDP_PASS;
	closing = rv_snat_closing(&p);
	if (v6) {
		__builtin_memcpy(key.k6.backend, p.src, 16);
		key.k6.backend_port = p.sport;
		key.k6.node_port = p.dport;
		key.k6.proto = p.proto;
		struct rv_snat_rev6 *r = bpf_map_lookup_elem(&snat_rev_map6, &key);
		if (!r) {
			rv_snat_count(RV_SNAT_REPLY_UNMATCHED);
			return XDP_PASS;
		}
		if (r->last_seen != tick)
			r->last_seen = tick;
		r->flags |= closing;
		__builtin_memcpy(to.addr, r->client, 16);
		__builtin_memcpy(vip, r->vip, 16);
		client_port = r->client_port;
		vip_port = r->vip_port;
		service_id = r->service_id;
	} else {
		key.k4.backend = p.src[0];
		key.k4.backend_port = p.sport;
		key.k4.node_port = p.dport;
		key.k4.proto = p.proto;
		struct rv_snat_rev4 *r = bpf_map_lookup_elem(&snat_rev_map, &key);
		if (!r) {
			rv_snat_count(RV_SNAT_REPLY_UNMATCHED);
			return XDP_PASS;
		}
		if (r->last_seen != tick)
			r->last_seen = tick;
		r->flags |= closing;
		to.addr[0] = r->client;
		vip[0] = r->vip;
		client_port = r->client_port;
		vip_port = r->vip_port;
		service_id = r->service_id;
	}
	if (rv_nat_l4(&p, data_end, vip, vip_port, 1, v6) || rv_nat_l4(&p, data_end, to.addr, client_port, 0, v6)) {
		rv_count_drop(RV_DROP_REWRITE_FAILED, service_id);
		return XDP_DROP;
	}
	rv_snat_count(RV_SNAT_REPLIED);
	/* The VIP's reply counters, as tc_nat counts the replies it restores. */
	struct rv_vip_stats *vs = bpf_map_lookup_elem(&stats_map, &service_id);
	if (vs) {
		vs->reply_packets++;
		vs->reply_bytes += rv_frame_len(ctx);
	}
	return rv_snat_reply_send(ctx, to.addr, vip, tick, v6);
}

SEC("xdp")
int xdp_stage_snat4(struct xdp_md *ctx)
{
	return rv_stage_snat(ctx, 0);
}

SEC("xdp")
int xdp_stage_snat6(struct xdp_md *ctx)
{
	return rv_stage_snat(ctx, 1);
}

SEC("xdp")
int xdp_stage_snat_reply4(struct xdp_md *ctx)
{
	return rv_stage_snat_reply(ctx, 0);
}

SEC("xdp")
int xdp_stage_snat_reply6(struct xdp_md *ctx)
{
	return rv_stage_snat_reply(ctx, 1);
}

/* Step 5's refusal of a new TCP flow (balance.h RV_PICK_REFUSE, counted
 * by xdp_ingress): the segment becomes the reset that refuses it. */
SEC("xdp")
int xdp_stage_reset4(struct xdp_md *ctx)
{
	return rv_tcp_reset(ctx, 0);
}

SEC("xdp")
int xdp_stage_reset6(struct xdp_md *ctx)
{
	return rv_tcp_reset(ctx, 1);
}

SEC("xdp")
int xdp_stage_cls4(struct xdp_md *ctx)
{
	return rv_cls_stage(ctx, 0);
}

SEC("xdp")
int xdp_stage_cls6(struct xdp_md *ctx)
{
	return rv_cls_stage(ctx, 1);
}
