//! Flow state beyond the VIPs: the node's flow guard and SYN rate limit, the flow filter, and
//! forgetting client affinity and UDP flows of backends that leave.

use super::*;

pub(super) fn source_drained(desired: &BTreeMap<VipKey, VipSpec>) -> BTreeSet<BackendKey> {
    let mut serving = BTreeSet::new();
    let mut drained = BTreeSet::new();
    for spec in desired.values() {
        for b in &spec.backends {
            if spec.draining.contains(&b.key) {
                drained.insert(b.key);
            } else {
                serving.insert(b.key);
            }
        }
    }
    drained.difference(&serving).copied().collect()
}

/// The UDP VIPs (programmed now) that `desired` removes or takes a backend
/// from: their flows on the backends that leave must be re-balanced.
/// The service IDs of ClientIP VIPs with a timeout (programmed now) whose
/// client entries may name a backend they no longer have: VIPs removed,
/// losing a backend, or changing their timeout (which restarts it).
pub(super) fn client_vips_losing_backends(
    current: &BTreeMap<VipKey, VipState>,
    desired: &BTreeMap<VipKey, VipSpec>,
) -> BTreeSet<u32> {
    current
        .iter()
        .filter(|(_, cur)| cur.spec.affinity_timeout.is_some())
        .filter(|(k, cur)| match desired.get(*k) {
            None => true,
            Some(want) => {
                want.affinity_timeout != cur.spec.affinity_timeout
                    || cur
                        .spec
                        .backends
                        .iter()
                        .any(|b| !want.backends.iter().any(|w| w.key == b.key))
            }
        })
        .map(|(_, cur)| cur.service_id)
        .collect()
}

pub(super) fn udp_vips_losing_backends(
    current: &BTreeMap<VipKey, VipState>,
    desired: &BTreeMap<VipKey, VipSpec>,
) -> BTreeSet<VipKey> {
    current
        .iter()
        .filter(|(k, _)| k.proto == crate::proto::UDP)
        .filter(|(k, cur)| match desired.get(*k) {
            None => true,
            Some(want) => cur
                .spec
                .backends
                .iter()
                .any(|b| !want.backends.iter().any(|w| w.key == b.key)),
        })
        .map(|(k, _)| *k)
        .collect()
}

impl Dataplane {
    /// Sets the new-flow guard (bpf/guard.h) to `rate` state entries per
    /// second node-wide (0: off), split over the online CPUs; returns what
    /// was written. The kernel's tick rate must be known (jiffies.rs).
    pub fn set_flow_guard(&mut self, rate: u64) -> Result<abi::FlowGuardConfig, Error> {
        let hz = crate::jiffies::hz().ok_or_else(|| {
            Error::Invalid(
                "new-flow guard: the kernel's tick rate (HZ) is unknown, so no window can be set"
                    .into(),
            )
        })?;
        let cpus = aya::util::online_cpus().map(|c| c.len()).unwrap_or(1) as u32;
        let cfg = crate::guard::config(rate, hz, cpus);
        self.maps
            .flow_guard
            .set(0, cfg, 0)
            .map_err(|e| map_err("flow_guard_config_map", e))?;
        Ok(cfg)
    }

    /// The new-flow guard as the map holds it.
    pub fn flow_guard(&self) -> Result<abi::FlowGuardConfig, Error> {
        self.maps
            .flow_guard
            .get(&0, 0)
            .map_err(|e| map_err("flow_guard_config_map", e))
    }

    /// Sets (or, with None, removes) the node-wide SYN rate limit in
    /// rl_config_map: it applies to every VIP without a limit of its own.
    pub fn set_node_syn_rate_limit(&mut self, limit: Option<RateLimit>) -> Result<(), Error> {
        if let Some(l) = limit {
            check_rate_limit(&l, "node-wide SYN rate limit")?;
        }
        let value = limit.map(RateLimit::abi).unwrap_or_default();
        self.maps
            .rl_config
            .set(0, value, 0)
            .map_err(|e| map_err("rl_config_map", e))?;
        self.node_syn_rate_limit = limit;
        Ok(())
    }

    /// The node-wide SYN rate limit in force (read back from the maps by
    /// [`Dataplane::adopt`]).
    pub fn node_syn_rate_limit(&self) -> Option<RateLimit> {
        self.node_syn_rate_limit
    }

    /// Deletes the ClientIP timeout's entries of `services` (service IDs)
    /// that name a backend the service's VIP no longer has (all of them for
    /// a service no VIP holds, or one whose timeout changed and is gone).
    /// Returns how many were deleted. Why and how as for
    /// [`Self::forget_udp_flows`]: the datapath does not check that a
    /// client's backend is still the VIP's (a lookup per new flow).
    pub(super) fn forget_clients(&mut self, services: &BTreeSet<u32>) -> usize {
        let members: BTreeMap<u32, BTreeSet<u32>> = self
            .vips
            .values()
            .filter(|v| services.contains(&v.service_id) && v.spec.affinity_timeout.is_some())
            .map(|v| {
                let ids = v
                    .spec
                    .backends
                    .iter()
                    .filter_map(|b| self.backends.get(&b.key).map(|s| s.id))
                    .collect();
                (v.service_id, ids)
            })
            .collect();
        let stale = |service_id: u32, backend_id: u32| {
            services.contains(&service_id)
                && members
                    .get(&service_id)
                    .is_none_or(|ids| !ids.contains(&backend_id))
        };
        let bound = 4 * abi::MAX_CLIENTS as usize;
        let doomed4: Vec<abi::ClientKey4> = self
            .maps
            .client_affinity
            .iter()
            .take(bound)
            .map_while(|e| {
                e.map_err(|e| tracing::warn!("reading client_affinity_map: {e}"))
                    .ok()
            })
            .filter(|(k, a)| stale(k.service_id, a.backend_id))
            .map(|(k, _)| k)
            .collect();
        let doomed6: Vec<abi::ClientKey6> = self
            .maps
            .client_affinity6
            .iter()
            .take(bound)
            .map_while(|e| {
                e.map_err(|e| tracing::warn!("reading client_affinity_map6: {e}"))
                    .ok()
            })
            .filter(|(k, a)| stale(k.service_id, a.backend_id))
            .map(|(k, _)| k)
            .collect();
        // Already gone (evicted meanwhile) is fine.
        let gone4 = doomed4
            .iter()
            .filter(|k| self.maps.client_affinity.remove(k).is_ok())
            .count();
        let gone6 = doomed6
            .iter()
            .filter(|k| self.maps.client_affinity6.remove(k).is_ok())
            .count();
        gone4 + gone6
    }

    /// Deletes the UDP affinity entries of `vips` whose backend is no
    /// longer one of the VIP's (all of them for a VIP no longer programmed);
    /// returns how many.
    ///
    /// Why: UDP has no opening packet, so the datapath cannot tell a new
    /// flow from an established one; it follows an entry while its backend
    /// is healthy or draining (drain lets established flows finish) and
    /// does not check VIP membership, which would take a lookup per packet.
    /// A backend removed from the VIP (retiring, or still in another VIP
    /// and so still healthy) must not keep getting a VIP's datagrams, so its
    /// entries are removed here, after the new slice is in place, and the
    /// flows' next datagrams are balanced over the VIP's healthy members.
    /// TCP entries stay: a connection on a removed backend finishes there
    /// (the retire grace), and a new connection's SYN never follows an entry.
    ///
    /// Best effort: the VIPs are already programmed, so a failed read ends
    /// the sweep with a warning instead of failing the apply. The scan is
    /// bounded (the LRU may restart a walk whose key the datapath evicted).
    pub fn forget_udp_flows(&mut self, vips: &BTreeSet<VipKey>) -> usize {
        let members: BTreeMap<VipKey, Option<BTreeSet<u32>>> = vips
            .iter()
            .map(|k| {
                let ids = self.vips.get(k).map(|v| {
                    v.spec
                        .backends
                        .iter()
                        .filter_map(|b| self.backends.get(&b.key).map(|s| s.id))
                        .collect()
                });
                (*k, ids)
            })
            .collect();
        // Whether a flow to (addr, port) of `vip`'s must leave `backend_id`.
        let stale = |addr: IpAddr, port: u16, backend_id: u32| {
            members.iter().any(|(k, ids)| {
                k.addr == addr
                    && (k.port..=k.port_last).contains(&port)
                    && ids.as_ref().is_none_or(|ids| !ids.contains(&backend_id))
            })
        };
        let bound = 4 * self.maps.flow_capacity as usize;
        let mut forgotten = 0;
        if members.keys().any(|k| k.addr.is_ipv4()) {
            let doomed: Vec<abi::Flow4> = self
                .maps
                .affinity
                .iter()
                .take(bound)
                .map_while(|e| {
                    e.map_err(|e| tracing::warn!("reading connection_affinity_map: {e}"))
                        .ok()
                })
                .filter(|(f, a)| {
                    f.proto == crate::proto::UDP
                        && stale(
                            abi::addr4_from_be(f.dst).into(),
                            abi::port_from_be(f.dport),
                            a.backend_id,
                        )
                })
                .map(|(f, _)| f)
                .collect();
            for f in &doomed {
                // Already gone (evicted meanwhile) is fine.
                if self.maps.affinity.remove(f).is_ok() {
                    forgotten += 1;
                }
            }
        }
        if members.keys().any(|k| k.addr.is_ipv6()) {
            let doomed: Vec<abi::Flow6> = self
                .maps
                .affinity6
                .iter()
                .take(bound)
                .map_while(|e| {
                    e.map_err(|e| tracing::warn!("reading connection_affinity_map6: {e}"))
                        .ok()
                })
                .filter(|(f, a)| {
                    f.proto == crate::proto::UDP
                        && stale(
                            Ipv6Addr::from(f.dst).into(),
                            abi::port_from_be(f.dport),
                            a.backend_id,
                        )
                })
                .map(|(f, _)| f)
                .collect();
            for f in &doomed {
                if self.maps.affinity6.remove(f).is_ok() {
                    forgotten += 1;
                }
            }
        }
        forgotten
    }

    /// Keeps the flow filter useful (flow_filter.rs): rebuilds it when it
    /// has too many stale bits or was never exact. Cheap when nothing is
    /// due (the bits are counted at most once a second), so rivorad calls
    /// it on every tick; call it only while this build's programs are the
    /// ones attached.
    pub fn maintain_flow_filter(
        &mut self,
    ) -> Result<Option<crate::flow_filter::RebuildReport>, Error> {
        let (filter, v4, v6) = self.maps.flow_filter_parts();
        filter.maintain(v4, v6)
    }

    /// Rebuilds the flow filter now, due or not (tests, benchmarks).
    pub fn rebuild_flow_filter(&mut self) -> Result<crate::flow_filter::RebuildReport, Error> {
        let (filter, v4, v6) = self.maps.flow_filter_parts();
        filter.rebuild(v4, v6)
    }

    /// The flow filter's size, fill and whether it is exact.
    pub fn flow_filter_status(&self) -> crate::flow_filter::FilterStatus {
        self.maps.flow_filter.status()
    }
}
