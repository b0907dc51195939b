//! NAT backend endpoints (nat_endpoint_map, bpf/reverse.h): which backend
//! replies need no per-flow reverse entry.
//!
//! An endpoint (backend address, the port its replies leave from, protocol)
//! that serves exactly one VIP is marked exclusive: the datapath then writes
//! no nat_reverse_map entry for its flows and tc_nat restores the VIP from
//! the endpoint alone. That takes one LRU insert off every new NAT flow and
//! makes the replies independent of an entry a flood could evict.
//!
//! Everything here is a pure function of what is programmed, so the rules
//! that keep a reply from ever getting the wrong VIP are unit-tested:
//!
//! * A missing entry means "use the per-flow entry", so leaving an entry
//!   out (capacity, a port-range VIP) is always safe.
//! * An endpoint becomes shared (a second VIP, or a different one) before
//!   that VIP can reach it (the writer writes demotions before it programs
//!   the VIPs) and keeps its former VIP as a fallback for the flows of its
//!   exclusive time, which have no per-flow entry until their next packet
//!   makes one (xdp_ingress rechecks once per tick).
//! * A shared endpoint is promoted back to exclusive only after it has
//!   served a single VIP for the retire grace: flows of the VIP it left
//!   finish first, as on a retired backend.
//! * An endpoint whose VIPs have all gone keeps its entry while its backend
//!   is programmed (retiring: its flows are finishing); the entry goes with
//!   the backend.
//! * An endpoint a VIP with `stateless_reverse: false` reaches is never
//!   exclusive, whatever other VIPs it serves (a Kubernetes pod: every
//!   packet it sends through this node would otherwise be rewritten to the
//!   VIP, its pod-to-pod traffic and ClusterIP replies too). A stateless VIP
//!   sharing it gets per-flow entries like any shared endpoint. A fallback
//!   it had from an exclusive time is kept for the retire grace (the flows
//!   of that time re-create their entries on their next packet within a
//!   tick), then removed, so no reply is rewritten without an entry of its
//!   own. The planner remembers such an endpoint without a map entry (an
//!   entry of flags 0, never written): if it later serves one stateless VIP
//!   alone, it becomes exclusive only after the grace, as a shared one would,
//!   because flows of the stateful VIP may still be on it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use rivora_abi::nat_ep_flags;

use crate::model::{BackendKey, Mode, VipKey, VipSpec};

/// Where a backend's replies leave from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    /// The backend's address.
    pub addr: IpAddr,
    /// The port the replies leave from: the backend's, or the VIP's for a
    /// backend that keeps the destination port.
    pub port: u16,
    /// IPPROTO_TCP or IPPROTO_UDP.
    pub proto: u8,
}

/// The VIP replies of an endpoint are restored to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    /// VIP address.
    pub vip: IpAddr,
    /// VIP port.
    pub vip_port: u16,
    /// Its service ID (the reply counters').
    pub service_id: u32,
}

/// What the endpoint map holds (or should hold) for one endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointEntry {
    /// The VIP named by the entry.
    pub target: Target,
    /// `rivora_abi::nat_ep_flags` bits. 0: nothing in the map (per-flow
    /// entries only), but the planner remembers that the endpoint served a
    /// stateful VIP (see the module doc); such an entry is never written.
    pub flags: u8,
    /// The backend the endpoint belongs to (its entry goes with it).
    pub backend: BackendKey,
    /// When the entry's waiting phase began: not exclusive but serving one
    /// stateless VIP since then (promoted once the retire grace has
    /// passed), or a fallback of an endpoint a stateful VIP reaches (removed
    /// once the grace has passed).
    pub single_since: Option<Instant>,
}

impl EndpointEntry {
    /// Whether replies need no per-flow entry.
    pub fn exclusive(&self) -> bool {
        self.flags & nat_ep_flags::EXCLUSIVE != 0
    }
}

/// What every programmed NAT VIP asks of the endpoints: for each endpoint
/// the VIPs it may answer for (more than one: shared), and the endpoints a
/// port-range VIP makes ambiguous.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Demand {
    /// Endpoint -> (its backend, the VIPs it serves).
    pub targets: BTreeMap<Endpoint, (BackendKey, BTreeSet<Target>)>,
    /// Endpoints that serve a port-range VIP with a fixed backend port:
    /// their replies' VIP port depends on the flow.
    pub ambiguous: BTreeSet<Endpoint>,
    /// (backend address, protocol) of port-range VIPs whose backends keep
    /// the destination port: every port of the address may serve it.
    pub ambiguous_addrs: BTreeSet<(IpAddr, u8)>,
    /// Endpoints a VIP with `stateless_reverse: false` reaches.
    pub stateful: BTreeSet<Endpoint>,
    /// (backend address, protocol) of such port-range VIPs whose backends
    /// keep the destination port.
    pub stateful_addrs: BTreeSet<(IpAddr, u8)>,
}

impl Demand {
    /// The demand of `vips`: (spec, service ID) of every programmed VIP
    /// (DSR VIPs have no replies through the balancer and are skipped).
    pub fn of<'a>(vips: impl IntoIterator<Item = (&'a VipSpec, u32)>) -> Self {
        let mut d = Demand::default();
        for (spec, service_id) in vips {
            if spec.mode != Mode::Nat {
                continue;
            }
            let key: &VipKey = &spec.key;
            for b in &spec.backends {
                if !spec.stateless_reverse {
                    if key.is_exact() || !b.key.keeps_destination_port() {
                        d.stateful.insert(Endpoint {
                            addr: b.key.addr,
                            port: if b.key.keeps_destination_port() {
                                key.port
                            } else {
                                b.key.port
                            },
                            proto: key.proto,
                        });
                    } else {
                        d.stateful_addrs.insert((b.key.addr, key.proto));
                    }
                }
                if key.is_exact() {
                    let port = if b.key.keeps_destination_port() {
                        key.port
                    } else {
                        b.key.port
                    };
                    let ep = Endpoint {
                        addr: b.key.addr,
                        port,
                        proto: key.proto,
                    };
                    d.targets
                        .entry(ep)
                        .or_insert_with(|| (b.key, BTreeSet::new()))
                        .1
                        .insert(Target {
                            vip: key.addr,
                            vip_port: key.port,
                            service_id,
                        });
                } else if b.key.keeps_destination_port() {
                    d.ambiguous_addrs.insert((b.key.addr, key.proto));
                } else {
                    d.ambiguous.insert(Endpoint {
                        addr: b.key.addr,
                        port: b.key.port,
                        proto: key.proto,
                    });
                }
            }
        }
        d
    }

    /// The single VIP an endpoint serves, if it serves exactly one, no
    /// range VIP makes it ambiguous and no stateful VIP reaches it.
    fn single(&self, ep: &Endpoint) -> Option<Target> {
        if self.is_ambiguous(ep) || self.is_stateful(ep) {
            return None;
        }
        let (_, t) = self.targets.get(ep)?;
        let mut it = t.iter();
        match (it.next(), it.next()) {
            (Some(one), None) => Some(*one),
            _ => None,
        }
    }

    /// Whether a port-range VIP makes the endpoint's replies depend on the
    /// flow.
    fn is_ambiguous(&self, ep: &Endpoint) -> bool {
        self.ambiguous.contains(ep) || self.ambiguous_addrs.contains(&(ep.addr, ep.proto))
    }

    /// Whether a VIP with `stateless_reverse: false` reaches the endpoint.
    pub fn is_stateful(&self, ep: &Endpoint) -> bool {
        self.stateful.contains(ep) || self.stateful_addrs.contains(&(ep.addr, ep.proto))
    }

    /// Whether the endpoint's VIP (address and port, whatever the service
    /// ID) is still `t` and no other.
    fn only(&self, ep: &Endpoint, t: &Target) -> bool {
        self.single(ep)
            .is_some_and(|s| s.vip == t.vip && s.vip_port == t.vip_port)
    }
}

/// The entries that must change *before* the VIPs of `demand` are
/// programmed: exclusive endpoints that another VIP is about to reach (or
/// that move to another VIP) become shared, keeping their VIP as the
/// fallback. Compares VIP addresses and ports only (new VIPs have no
/// service ID yet).
pub fn demotions(
    current: &BTreeMap<Endpoint, EndpointEntry>,
    demand: &Demand,
    now: Instant,
) -> Vec<(Endpoint, EndpointEntry)> {
    current
        .iter()
        .filter(|(ep, e)| {
            e.exclusive() && (demand.targets.contains_key(ep) || demand.is_ambiguous(ep))
        })
        .filter(|(ep, e)| !demand.only(ep, &e.target))
        .map(|(ep, e)| {
            (
                *ep,
                EndpointEntry {
                    flags: nat_ep_flags::FALLBACK,
                    single_since: demand.single(ep).map(|_| now),
                    ..*e
                },
            )
        })
        .collect()
}

/// The whole endpoint table once the VIPs of `demand` are programmed.
/// `current` is what the map holds (after [`demotions`]); `programmed`
/// tells whether a backend still exists (entries of endpoints no VIP
/// names any more are kept while it does); `capacity` bounds the entries.
pub fn plan(
    current: &BTreeMap<Endpoint, EndpointEntry>,
    demand: &Demand,
    programmed: impl Fn(&BackendKey) -> bool,
    now: Instant,
    grace: Duration,
    capacity: usize,
) -> BTreeMap<Endpoint, EndpointEntry> {
    let mut next = BTreeMap::new();
    // Endpoints no VIP names: kept while their backend is programmed.
    for (ep, e) in current {
        if !demand.targets.contains_key(ep) && !demand.is_ambiguous(ep) && programmed(&e.backend) {
            next.insert(*ep, *e);
        }
    }
    let eps: BTreeSet<Endpoint> = demand
        .targets
        .keys()
        .chain(demand.ambiguous.iter())
        .copied()
        .chain(current.keys().copied().filter(|ep| demand.is_ambiguous(ep)))
        .collect();
    for ep in eps {
        let cur = current.get(&ep);
        let backend = demand
            .targets
            .get(&ep)
            .map(|(b, _)| *b)
            .or(cur.map(|c| c.backend));
        let Some(backend) = backend else { continue };
        let single = demand.single(&ep);
        let stateful = demand.is_stateful(&ep);
        let entry = match (single, cur) {
            // A new endpoint of one VIP: no flow of another VIP can be on it.
            (Some(t), None) => Some(EndpointEntry {
                target: t,
                flags: nat_ep_flags::EXCLUSIVE,
                backend,
                single_since: None,
            }),
            // Still exclusive for the same VIP (its service ID refreshed).
            (Some(t), Some(c))
                if c.exclusive() && c.target.vip == t.vip && c.target.vip_port == t.vip_port =>
            {
                Some(EndpointEntry { target: t, ..*c })
            }
            // Exclusive for another VIP, or shared: shared until a grace
            // has passed with one VIP, keeping the fallback.
            (Some(t), Some(c)) => {
                let since = if c.exclusive() {
                    now
                } else {
                    c.single_since.unwrap_or(now)
                };
                if !c.exclusive() && now.duration_since(since) >= grace {
                    Some(EndpointEntry {
                        target: t,
                        flags: nat_ep_flags::EXCLUSIVE,
                        backend,
                        single_since: None,
                    })
                } else {
                    Some(EndpointEntry {
                        // A remembered stateful endpoint waits without a
                        // map entry: its flows all have their own.
                        flags: if c.flags == 0 {
                            0
                        } else {
                            nat_ep_flags::FALLBACK
                        },
                        single_since: Some(since),
                        backend,
                        ..*c
                    })
                }
            }
            // Reached by a stateful VIP: a fallback of its exclusive time
            // lasts the grace, then only the planner remembers it.
            (None, Some(c)) if stateful => {
                let since = c.single_since.unwrap_or(now);
                if c.flags == 0 || now.duration_since(since) >= grace {
                    Some(EndpointEntry {
                        flags: 0,
                        single_since: None,
                        backend,
                        ..*c
                    })
                } else {
                    Some(EndpointEntry {
                        flags: nat_ep_flags::FALLBACK,
                        single_since: Some(since),
                        backend,
                        ..*c
                    })
                }
            }
            (None, None) if stateful => demand
                .targets
                .get(&ep)
                .and_then(|(_, t)| t.iter().next())
                .map(|t| EndpointEntry {
                    target: *t,
                    flags: 0,
                    backend,
                    single_since: None,
                }),
            // Shared, and remembered as having served a stateful VIP.
            (None, Some(c)) if c.flags == 0 => Some(EndpointEntry {
                single_since: None,
                backend,
                ..*c
            }),
            // Shared: a former exclusive VIP stays the fallback.
            (None, Some(c)) if c.flags != 0 => Some(EndpointEntry {
                flags: nat_ep_flags::FALLBACK,
                single_since: None,
                backend,
                ..*c
            }),
            (None, _) => None,
        };
        if let Some(e) = entry {
            next.insert(ep, e);
        }
    }
    // Over capacity: exclusive entries of endpoints not yet in the map are
    // left out (a missing entry is always safe: per-flow entries). Entries
    // of flags 0 take no room in the map.
    let in_map = next.values().filter(|e| e.flags != 0).count();
    if in_map > capacity {
        let extra: Vec<Endpoint> = next
            .iter()
            .filter(|(ep, e)| e.flags != 0 && current.get(ep).is_none_or(|c| c.flags == 0))
            .map(|(ep, _)| *ep)
            .rev()
            .take(in_map - capacity)
            .collect();
        for ep in extra {
            next.remove(&ep);
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BackendSpec, VipKey, proto};

    fn vip(addr: &str, port: u16, backends: &[(&str, u16)]) -> VipSpec {
        let mut s = VipSpec::new(
            "v",
            VipKey::exact(addr.parse().unwrap(), port, proto::TCP),
            Vec::new(),
        );
        s.backends = backends
            .iter()
            .map(|(a, p)| BackendSpec {
                key: BackendKey {
                    addr: a.parse().unwrap(),
                    port: *p,
                },
                weight: 1,
                mac: [0; 6],
            })
            .collect();
        s
    }

    fn ep(a: &str, port: u16) -> Endpoint {
        Endpoint {
            addr: a.parse().unwrap(),
            port,
            proto: proto::TCP,
        }
    }

    const GRACE: Duration = Duration::from_secs(30);

    fn plan_of(
        cur: &BTreeMap<Endpoint, EndpointEntry>,
        specs: &[(VipSpec, u32)],
        now: Instant,
    ) -> BTreeMap<Endpoint, EndpointEntry> {
        let d = Demand::of(specs.iter().map(|(s, id)| (s, *id)));
        plan(cur, &d, |_| true, now, GRACE, 100)
    }

    #[test]
    fn a_backend_of_one_vip_is_exclusive_and_one_of_two_is_not() {
        let t0 = Instant::now();
        let a = vip("10.0.0.1", 80, &[("10.1.0.1", 8080), ("10.1.0.2", 8080)]);
        let b = vip("10.0.0.2", 80, &[("10.1.0.2", 8080)]);
        let next = plan_of(&BTreeMap::new(), &[(a, 1), (b, 2)], t0);
        assert!(next[&ep("10.1.0.1", 8080)].exclusive());
        assert_eq!(next[&ep("10.1.0.1", 8080)].target.service_id, 1);
        // Shared from the start: no entry (per-flow entries only).
        assert!(!next.contains_key(&ep("10.1.0.2", 8080)));
    }

    #[test]
    fn port_zero_backends_are_keyed_by_the_vip_port() {
        let t0 = Instant::now();
        let a = vip("10.0.0.1", 80, &[("10.1.0.1", 0)]);
        let b = vip("10.0.0.1", 443, &[("10.1.0.1", 0)]);
        let next = plan_of(&BTreeMap::new(), &[(a, 1), (b, 2)], t0);
        assert_eq!(next[&ep("10.1.0.1", 80)].target.vip_port, 80);
        assert_eq!(next[&ep("10.1.0.1", 443)].target.vip_port, 443);
        assert!(next.values().all(|e| e.exclusive()));
    }

    #[test]
    fn a_second_vip_demotes_first_with_a_fallback_and_promotion_waits_for_the_grace() {
        let t0 = Instant::now();
        let a = vip("10.0.0.1", 80, &[("10.1.0.1", 8080)]);
        let b = vip("10.0.0.2", 80, &[("10.1.0.1", 8080)]);
        let cur = plan_of(&BTreeMap::new(), &[(a.clone(), 1)], t0);
        let both = [(a.clone(), 1), (b.clone(), 2)];
        let d = Demand::of(both.iter().map(|(s, id)| (s, *id)));
        let dem = demotions(&cur, &d, t0);
        assert_eq!(dem.len(), 1, "demoted before the second VIP is programmed");
        assert_eq!(dem[0].1.flags, nat_ep_flags::FALLBACK);
        assert_eq!(dem[0].1.target.vip, "10.0.0.1".parse::<IpAddr>().unwrap());
        let mut cur2 = cur.clone();
        cur2.extend(dem);
        let shared = plan_of(&cur2, &both, t0);
        let e = shared[&ep("10.1.0.1", 8080)];
        assert_eq!(e.flags, nat_ep_flags::FALLBACK);
        // The second VIP goes: one VIP again, but flows of the other may
        // still be on the endpoint, so no promotion before the grace.
        let t1 = t0 + Duration::from_secs(5);
        let alone = plan_of(&shared, &[(a.clone(), 1)], t1);
        assert_eq!(alone[&ep("10.1.0.1", 8080)].flags, nat_ep_flags::FALLBACK);
        let t2 = t1 + GRACE;
        let later = plan_of(&alone, &[(a, 1)], t2);
        assert!(later[&ep("10.1.0.1", 8080)].exclusive());
    }

    #[test]
    fn moving_a_backend_to_another_vip_keeps_the_old_vip_as_fallback() {
        let t0 = Instant::now();
        let a = vip("10.0.0.1", 80, &[("10.1.0.1", 8080)]);
        let b = vip("10.0.0.2", 80, &[("10.1.0.1", 8080)]);
        let cur = plan_of(&BTreeMap::new(), &[(a, 1)], t0);
        let d = Demand::of([(&b, 2)]);
        let dem = demotions(&cur, &d, t0);
        assert_eq!(dem.len(), 1);
        let mut cur2 = cur.clone();
        cur2.extend(dem);
        let next = plan_of(&cur2, &[(b.clone(), 2)], t0);
        let e = next[&ep("10.1.0.1", 8080)];
        assert_eq!(e.flags, nat_ep_flags::FALLBACK);
        assert_eq!(
            e.target.service_id, 1,
            "the old VIP answers replies without an entry"
        );
        let next = plan_of(&next, &[(b, 2)], t0 + GRACE);
        assert!(next[&ep("10.1.0.1", 8080)].exclusive());
        assert_eq!(next[&ep("10.1.0.1", 8080)].target.service_id, 2);
    }

    #[test]
    fn an_unchanged_exclusive_endpoint_is_not_demoted() {
        let t0 = Instant::now();
        let a = vip("10.0.0.1", 80, &[("10.1.0.1", 8080)]);
        let cur = plan_of(&BTreeMap::new(), &[(a.clone(), 1)], t0);
        let d = Demand::of([(&a, 1)]);
        assert!(demotions(&cur, &d, t0).is_empty());
        assert_eq!(plan_of(&cur, &[(a, 1)], t0), cur);
    }

    #[test]
    fn a_removed_vip_keeps_its_entries_while_the_backend_is_programmed() {
        let t0 = Instant::now();
        let a = vip("10.0.0.1", 80, &[("10.1.0.1", 8080)]);
        let cur = plan_of(&BTreeMap::new(), &[(a, 1)], t0);
        let d = Demand::of(std::iter::empty());
        let kept = plan(&cur, &d, |_| true, t0, GRACE, 100);
        assert_eq!(kept, cur, "retiring backend: its flows are finishing");
        let gone = plan(&cur, &d, |_| false, t0, GRACE, 100);
        assert!(gone.is_empty());
    }

    #[test]
    fn range_vips_make_their_endpoints_ambiguous() {
        let t0 = Instant::now();
        let a = vip("10.0.0.1", 80, &[("10.1.0.1", 8080), ("10.1.0.2", 0)]);
        let mut r = vip("10.0.0.9", 0, &[("10.1.0.1", 8080), ("10.1.0.2", 0)]);
        r.key = VipKey::range("10.0.0.9".parse().unwrap(), 1000, 2000, proto::TCP);
        let cur = plan_of(&BTreeMap::new(), &[(a.clone(), 1)], t0);
        assert_eq!(cur.len(), 2);
        let specs = [(a, 1), (r, 2)];
        let d = Demand::of(specs.iter().map(|(s, id)| (s, *id)));
        let dem = demotions(&cur, &d, t0);
        assert_eq!(dem.len(), 2, "both endpoints now also serve the range VIP");
        let mut cur2 = cur.clone();
        cur2.extend(dem);
        let next = plan_of(&cur2, &specs, t0 + GRACE);
        assert!(next.values().all(|e| !e.exclusive()));
    }

    #[test]
    fn over_capacity_new_entries_are_left_out() {
        let t0 = Instant::now();
        let backends: Vec<(String, u16)> = (1..=10).map(|i| (format!("10.1.0.{i}"), 80)).collect();
        let refs: Vec<(&str, u16)> = backends.iter().map(|(a, p)| (a.as_str(), *p)).collect();
        let a = vip("10.0.0.1", 80, &refs);
        let d = Demand::of([(&a, 1)]);
        let next = plan(&BTreeMap::new(), &d, |_| true, t0, GRACE, 4);
        assert_eq!(next.len(), 4);
    }

    fn stateful(mut v: VipSpec) -> VipSpec {
        v.stateless_reverse = false;
        v
    }

    /// What the map would hold: entries of flags 0 are never written.
    fn in_map(plan: &BTreeMap<Endpoint, EndpointEntry>) -> BTreeMap<Endpoint, u8> {
        plan.iter()
            .filter(|(_, e)| e.flags != 0)
            .map(|(ep, e)| (*ep, e.flags))
            .collect()
    }

    #[test]
    fn a_stateful_vips_endpoints_are_never_in_the_map() {
        let t0 = Instant::now();
        let a = stateful(vip(
            "10.0.0.1",
            80,
            &[("10.1.0.1", 8080), ("10.1.0.2", 8080)],
        ));
        let next = plan_of(&BTreeMap::new(), &[(a.clone(), 1)], t0);
        assert!(in_map(&next).is_empty(), "per-flow entries only");
        assert_eq!(next.len(), 2, "but remembered");
        // However long it stays so.
        let later = plan_of(&next, &[(a, 1)], t0 + 10 * GRACE);
        assert!(in_map(&later).is_empty());
    }

    #[test]
    fn an_endpoint_shared_by_a_stateless_and_a_stateful_vip_is_per_flow_and_its_fallback_expires() {
        let t0 = Instant::now();
        let a = vip("10.0.0.1", 80, &[("10.1.0.1", 8080)]);
        let b = stateful(vip("10.0.0.2", 80, &[("10.1.0.1", 8080)]));
        let cur = plan_of(&BTreeMap::new(), &[(a.clone(), 1)], t0);
        assert!(cur[&ep("10.1.0.1", 8080)].exclusive(), "A alone, stateless");
        // B arrives: demoted before B is programmed, A kept as fallback for
        // the flows of its exclusive time...
        let both = [(a.clone(), 1), (b.clone(), 2)];
        let d = Demand::of(both.iter().map(|(s, id)| (s, *id)));
        let dem = demotions(&cur, &d, t0);
        assert_eq!(dem.len(), 1);
        assert_eq!(dem[0].1.flags, nat_ep_flags::FALLBACK);
        let mut cur2 = cur.clone();
        cur2.extend(dem);
        let shared = plan_of(&cur2, &both, t0);
        assert_eq!(shared[&ep("10.1.0.1", 8080)].flags, nat_ep_flags::FALLBACK);
        // ...for the grace only: then no entry, so a reply without one of
        // its own (the pod's other traffic) is left alone.
        let t1 = t0 + GRACE;
        let settled = plan_of(&shared, &both, t1);
        assert!(in_map(&settled).is_empty(), "{settled:?}");
        // B goes: A alone again, but B's flows may still be on the endpoint
        // (their own entries; an exclusive entry would override them), so
        // no promotion before the grace.
        let t2 = t1 + Duration::from_secs(1);
        let alone = plan_of(&settled, &[(a.clone(), 1)], t2);
        assert!(in_map(&alone).is_empty(), "waits: {alone:?}");
        let promoted = plan_of(&alone, &[(a, 1)], t2 + GRACE);
        assert!(promoted[&ep("10.1.0.1", 8080)].exclusive());
    }

    #[test]
    fn turning_stateless_reverse_off_and_on_again() {
        let t0 = Instant::now();
        let a = vip("10.0.0.1", 80, &[("10.1.0.1", 8080)]);
        let cur = plan_of(&BTreeMap::new(), &[(a.clone(), 1)], t0);
        let off = stateful(a.clone());
        let d = Demand::of([(&off, 1)]);
        let mut cur2 = cur.clone();
        cur2.extend(demotions(&cur, &d, t0));
        let next = plan_of(&cur2, &[(off.clone(), 1)], t0);
        assert_eq!(
            in_map(&next).values().copied().collect::<Vec<_>>(),
            vec![nat_ep_flags::FALLBACK]
        );
        let next = plan_of(&next, &[(off, 1)], t0 + GRACE);
        assert!(in_map(&next).is_empty());
        // On again: the endpoint's flows all have entries of their own, so
        // the map stays empty for the grace, then the entry is exclusive.
        let t1 = t0 + 2 * GRACE;
        let on = plan_of(&next, &[(a.clone(), 1)], t1);
        assert!(in_map(&on).is_empty());
        let on = plan_of(&on, &[(a, 1)], t1 + GRACE);
        assert!(on[&ep("10.1.0.1", 8080)].exclusive());
    }

    #[test]
    fn a_stateful_range_vip_makes_its_backend_addresses_stateful() {
        let t0 = Instant::now();
        let a = vip("10.0.0.1", 80, &[("10.1.0.2", 0)]);
        let mut r = stateful(vip("10.0.0.9", 0, &[("10.1.0.2", 0)]));
        r.key = VipKey::range("10.0.0.9".parse().unwrap(), 1000, 2000, proto::TCP);
        let cur = plan_of(&BTreeMap::new(), &[(a.clone(), 1)], t0);
        let specs = [(a, 1), (r, 2)];
        let d = Demand::of(specs.iter().map(|(s, id)| (s, *id)));
        assert!(d.is_stateful(&ep("10.1.0.2", 80)));
        let mut cur2 = cur.clone();
        cur2.extend(demotions(&cur, &d, t0));
        let next = plan_of(&cur2, &specs, t0 + GRACE);
        let next = plan_of(&next, &specs, t0 + 2 * GRACE);
        assert!(in_map(&next).is_empty(), "{next:?}");
    }

    #[test]
    fn remembered_endpoints_take_no_capacity() {
        let t0 = Instant::now();
        let b: Vec<(String, u16)> = (1..=10).map(|i| (format!("10.1.0.{i}"), 80)).collect();
        let refs: Vec<(&str, u16)> = b.iter().map(|(a, p)| (a.as_str(), *p)).collect();
        let s = stateful(vip("10.0.0.1", 80, &refs));
        let e = vip("10.0.0.2", 80, &[("10.2.0.1", 80), ("10.2.0.2", 80)]);
        let d = Demand::of([(&s, 1), (&e, 2)]);
        let next = plan(&BTreeMap::new(), &d, |_| true, t0, GRACE, 2);
        assert_eq!(in_map(&next).len(), 2, "both exclusive entries fit");
    }

    #[test]
    fn dsr_vips_have_no_endpoints() {
        let mut a = vip("10.0.0.1", 80, &[("10.1.0.1", 8080)]);
        a.mode = Mode::Dsr;
        assert!(Demand::of([(&a, 1)]).targets.is_empty());
    }
}
