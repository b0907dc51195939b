//! Adoption: a new rivorad reads what the pinned maps hold (left by the one before it) back into
//! the writer's bookkeeping, so the next apply changes only what differs and no flow breaks.

use super::*;

impl Dataplane {
    /// Takes over maps pinned by an earlier rivorad: reads back every VIP's
    /// service ID, slice, backends, affinity and rate limit (exact VIPs from
    /// vip_map(6), port ranges from the prefixes in vip_range_map(6)), every
    /// backend's ID, generation and state, and the node-wide rate limit, so
    /// nothing is renumbered and no ID in use is handed out again.
    /// Flow tables and counters are left as they are. Entries that do not
    /// add up (a VIP whose service entry is inactive, whose slice overlaps
    /// another, or names unknown backends; range prefixes that do not form
    /// one range) are removed and reported; the configuration applied next
    /// re-creates what it lists.
    pub fn adopt(maps: Maps) -> Result<(Self, AdoptReport), Error> {
        let mut dp = Dataplane::new(maps);
        dp.cls = crate::classifier::Classifier::adopt(&dp.maps.cls)?;
        dp.read_vip_index()?;
        dp.read_snat_source()?;
        let mut report = AdoptReport::default();
        dp.read_src_ranges(&mut report)?;
        let mut max_generation = 0u32;

        // Backends: every ID whose health slot is set.
        let mut by_id: BTreeMap<u32, BackendState> = BTreeMap::new();
        let mut seen_keys: BTreeSet<BackendKey> = BTreeSet::new();
        for id in 0..abi::MAX_BACKENDS {
            let health = dp
                .maps
                .backend_health
                .get(&id, 0)
                .map_err(|e| map_err("backend_health_map", e))?;
            let state = health.state;
            if state == abi::backend_state::NONE {
                continue;
            }
            if health.flags & abi::backend_flags::REJECT != 0 {
                // The refusing pseudo-backend: no address by design. One
                // is all a writer makes; a second is stale.
                if dp.reject_id.is_some() {
                    report
                        .dropped
                        .push(format!("backend ID {id}: a second refusing pseudo-backend"));
                    dp.set_health(id, abi::backend_state::NONE)?;
                } else {
                    dp.reject_id = Some(id);
                }
                continue;
            }
            let b4 = dp
                .maps
                .backend_map
                .get(&id, 0)
                .map_err(|e| map_err("backend_map", e))?;
            let b6 = dp
                .maps
                .backend_map6
                .get(&id, 0)
                .map_err(|e| map_err("backend_map6", e))?;
            let (key, mac, generation) = if b4.generation != 0 {
                (
                    BackendKey {
                        addr: abi::addr4_from_be(b4.addr).into(),
                        port: abi::port_from_be(b4.port),
                    },
                    b4.mac,
                    b4.generation,
                )
            } else if b6.generation != 0 {
                (
                    BackendKey {
                        addr: std::net::Ipv6Addr::from(b6.addr).into(),
                        port: abi::port_from_be(b6.port),
                    },
                    b6.mac,
                    b6.generation,
                )
            } else {
                report
                    .dropped
                    .push(format!("backend ID {id}: health set but no address entry"));
                dp.set_health(id, abi::backend_state::NONE)?;
                continue;
            };
            if !seen_keys.insert(key) {
                report
                    .dropped
                    .push(format!("backend ID {id}: {key} already has another ID"));
                dp.set_health(id, abi::backend_state::NONE)?;
                dp.clear_backend(key, id)?;
                continue;
            }
            max_generation = max_generation.max(generation);
            by_id.insert(
                id,
                BackendState {
                    key,
                    id,
                    generation,
                    mac,
                    state,
                    drained: health.flags & abi::backend_flags::DRAINED != 0,
                    terminating: health.flags & abi::backend_flags::TERMINATING != 0,
                    probe_down: health.flags & abi::backend_flags::PROBE_DOWN != 0
                        || state == abi::backend_state::DOWN,
                    snat: health.flags & abi::backend_flags::SNAT != 0,
                    last_change: None,
                    vips: BTreeSet::new(),
                    retired_at: None,
                },
            );
        }

        // VIPs: every vip_map(6) entry and the service entry it points to.
        let mut entries: Vec<(VipKey, u32)> = Vec::new();
        for item in dp.maps.vip_map.iter() {
            let (k, v) = item.map_err(|e| map_err("vip_map", e))?;
            let key = VipKey::exact(
                abi::addr4_from_be(k.addr).into(),
                abi::port_from_be(k.port),
                k.proto,
            );
            entries.push((key, v.service_id));
        }
        for item in dp.maps.vip_map6.iter() {
            let (k, v) = item.map_err(|e| map_err("vip_map6", e))?;
            let key = VipKey::exact(
                Ipv6Addr::from(k.addr).into(),
                abi::port_from_be(k.port),
                k.proto,
            );
            entries.push((key, v.service_id));
        }
        let mut service_ids_used = BTreeSet::new();
        for (key, service_id) in entries {
            match dp.adopt_vip(key, service_id, &mut by_id, &service_ids_used) {
                Ok(generation) => {
                    service_ids_used.insert(service_id);
                    max_generation = max_generation.max(generation);
                    report.vips += 1;
                }
                Err(why) => {
                    report
                        .dropped
                        .push(format!("VIP {key} (service ID {service_id}): {why}"));
                    // The index may point at it: off until rebuilt below.
                    dp.disable_vip_index()?;
                    dp.remove_vip_key(&key)?;
                }
            }
        }
        // Port-range VIPs: the trie prefixes, grouped into ranges.
        let (groups, bad) = dp.read_range_prefixes()?;
        for (prefix, why) in bad {
            report
                .dropped
                .push(format!("vip_range_map prefix {prefix}: {why}"));
            dp.remove_prefix(&prefix)?;
        }
        for ((addr, proto, service_id), prefixes) in groups {
            let adopted = match range_of(&prefixes) {
                Some((first, last)) => {
                    let key = VipKey::range(addr, first, last, proto);
                    dp.adopt_vip(key, service_id, &mut by_id, &service_ids_used)
                        .map_err(|why| format!("VIP {key} (service ID {service_id}): {why}"))
                }
                None => Err(format!(
                    "vip_range_map prefixes of service ID {service_id} ({}) do not form one port range",
                    prefixes
                        .iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            };
            match adopted {
                Ok(generation) => {
                    service_ids_used.insert(service_id);
                    max_generation = max_generation.max(generation);
                    report.vips += 1;
                }
                Err(why) => {
                    report.dropped.push(why);
                    for prefix in &prefixes {
                        dp.remove_prefix(prefix)?;
                    }
                }
            }
        }
        // Source ranges of no adopted VIP's bank in force (a change that did
        // not finish, a removed VIP) are stale: clear them.
        let in_force: BTreeSet<u32> = dp
            .vips
            .values()
            .filter(|v| v.spec.source_ranges.is_some())
            .map(|v| src_tag(v.service_id, v.src_bank))
            .collect();
        let stale: Vec<u32> = dp
            .src_ranges
            .keys()
            .filter(|t| !in_force.contains(t))
            .copied()
            .collect();
        for tag in stale {
            dp.write_src_ranges(tag, &BTreeSet::new())?;
        }
        // Per-service rate limits nothing asks for are stale: clear them.
        let limited: BTreeSet<u32> = dp
            .vips
            .values()
            .filter(|v| v.spec.syn_rate_limit.is_some())
            .map(|v| v.service_id)
            .collect();
        for id in 0..abi::MAX_VIPS {
            if limited.contains(&id) {
                continue;
            }
            let rl = dp
                .maps
                .svc_rl_config
                .get(&id, 0)
                .map_err(|e| map_err("svc_rl_config_map", e))?;
            if rl != abi::RlConfig::default() {
                dp.set_svc_rate_limit(id, None)?;
            }
        }
        dp.node_syn_rate_limit = RateLimit::from_abi(
            dp.maps
                .rl_config
                .get(&0, 0)
                .map_err(|e| map_err("rl_config_map", e))?,
        );
        // Service entries no adopted VIP points to are stale: clear them.
        for id in 0..abi::MAX_VIPS {
            if service_ids_used.contains(&id) {
                continue;
            }
            let svc = dp
                .maps
                .service_config
                .get(&id, 0)
                .map_err(|e| map_err("service_config_map", e))?;
            if svc != abi::Service::default() {
                dp.maps
                    .service_config
                    .set(id, abi::Service::default(), 0)
                    .map_err(|e| map_err("service_config_map", e))?;
                report
                    .dropped
                    .push(format!("service ID {id}: entry without a VIP"));
            }
        }

        let now = Instant::now();
        for (_, mut b) in by_id {
            if b.vips.is_empty() {
                // Nothing routes new flows to it: it retires like a removed backend.
                b.retired_at = Some(now);
                report.retiring += 1;
            }
            report.backends += 1;
            let key = b.key;
            dp.backends.insert(key, b);
            dp.sync_health(&key)?;
        }
        // A pseudo-backend no adopted slice names (a VIP dropped above,
        // an apply that did not finish) is released.
        if let Some(id) = dp.reject_id
            && !dp.vips.values().any(|v| v.spec.reject_weight > 0)
        {
            dp.set_health(id, abi::backend_state::NONE)?;
            dp.reject_id = None;
        }
        let mut backend_ids: BTreeSet<u32> = dp.backends.values().map(|b| b.id).collect();
        backend_ids.extend(dp.reject_id);
        dp.backend_ids = IdAllocator::adopt(abi::MAX_BACKENDS, &backend_ids);
        dp.service_ids = IdAllocator::adopt(abi::MAX_VIPS, &service_ids_used);
        dp.next_generation = max_generation.wrapping_add(1).max(1);
        // The index of what was adopted: unchanged (nothing written) when
        // the pinned one already matches.
        dp.sync_vip_index(&BTreeSet::new())?;
        dp.adopt_endpoints()?;
        // stateless_reverse is not in the maps: a NAT VIP that some
        // endpoint serves exclusively was stateless; any other is taken as
        // stateful, the safe reading (a missing endpoint entry only costs
        // per-flow entries, a wrong exclusive one rewrites a pod's other
        // traffic), until a spec says otherwise. Matters while an adopted
        // VIP is kept unclaimed: the endpoint plan reads its spec.
        let exclusive: BTreeSet<u32> = dp
            .endpoints
            .values()
            .filter(|e| e.exclusive())
            .map(|e| e.target.service_id)
            .collect();
        for v in dp.vips.values_mut() {
            v.spec.stateless_reverse =
                v.spec.mode != Mode::Nat || exclusive.contains(&v.service_id);
        }
        // Maps of an older ABI have no filter yet: set it from the adopted
        // backends before the new tc_nat can see a reply.
        dp.sync_backend_filter(&[])?;
        Ok((dp, report))
    }

    /// Adopts one VIP; on Err nothing of it was taken.
    pub(super) fn adopt_vip(
        &mut self,
        key: VipKey,
        service_id: u32,
        by_id: &mut BTreeMap<u32, BackendState>,
        taken: &BTreeSet<u32>,
    ) -> Result<u32, String> {
        if service_id >= abi::MAX_VIPS || taken.contains(&service_id) {
            return Err("service ID out of range or used twice".into());
        }
        let svc = self
            .maps
            .service_config
            .get(&service_id, 0)
            .map_err(|e| e.to_string())?;
        if svc.flags & abi::service_flags::ACTIVE == 0 {
            return Err("service entry is not active".into());
        }
        if (svc.flags & abi::service_flags::IPV6 != 0) != key.addr.is_ipv6() {
            return Err("service entry is of the other address family".into());
        }
        let mode = match svc.mode {
            abi::mode::NAT => Mode::Nat,
            abi::mode::DSR => Mode::Dsr,
            abi::mode::DSR_IPIP => Mode::DsrIpip,
            abi::mode::DSR_GRE => Mode::DsrGre,
            m => return Err(format!("unknown mode {m}")),
        };
        let affinity_timeout = if svc.flags & abi::service_flags::AFFINITY_CLIENT_IP != 0 {
            let t = self
                .maps
                .affinity_timeout
                .get(&service_id, 0)
                .map_err(|e| e.to_string())?;
            (t.ticks != 0).then(|| Duration::from_secs(u64::from(t.seconds)))
        } else {
            None
        };
        let syn_rate_limit = if svc.flags & abi::service_flags::SYN_RATE_LIMIT != 0 {
            let rl = self
                .maps
                .svc_rl_config
                .get(&service_id, 0)
                .map_err(|e| e.to_string())?;
            match RateLimit::from_abi(rl) {
                Some(l) if l.rate > 0 && l.burst > 0 => Some(l),
                _ => return Err("rate-limit flag set but no valid rate limit".into()),
            }
        } else {
            None
        };
        let slice = Slice {
            offset: svc.maglev_offset,
            size: svc.maglev_size,
        };
        if slice.offset as u64 + slice.size as u64 > self.slices.len() as u64 {
            return Err("Maglev slice beyond the table".into());
        }
        let slots = self.maps.maglev.read(slice.offset, slice.size);
        let ids: BTreeSet<u32> = slots.iter().copied().collect();
        if ids.len() != svc.backend_count as usize {
            return Err(format!(
                "slice names {} backends, entry says {}",
                ids.len(),
                svc.backend_count
            ));
        }
        let reject = self.reject_id.filter(|r| ids.contains(r));
        for id in ids.iter().filter(|id| Some(**id) != reject) {
            match by_id.get(id) {
                Some(b) if b.key.addr.is_ipv6() == key.addr.is_ipv6() => {}
                _ => {
                    return Err(format!(
                        "slice names backend ID {id}, which is not a backend of its family"
                    ));
                }
            }
        }
        if !self.slices.reserve(slice) {
            return Err("Maglev slice overlaps another VIP's".into());
        }
        let mut backends = Vec::new();
        let mut draining = BTreeSet::new();
        let mut snat = BTreeSet::new();
        for id in ids.iter().filter(|id| Some(**id) != reject) {
            let b = by_id.get_mut(id).expect("checked above");
            b.vips.insert(key);
            backends.push(BackendSpec {
                key: b.key,
                weight: 0,
                mac: b.mac,
            });
            if b.terminating {
                draining.insert(b.key);
            }
            if b.snat && svc.flags & abi::service_flags::SNAT != 0 {
                snat.insert(b.key);
            }
        }
        backends.sort();
        let src_bank = u32::from(
            source_ranges_set(svc.flags) && svc.flags & abi::service_flags::SOURCE_BANK != 0,
        );
        let source_ranges = source_ranges_set(svc.flags).then(|| {
            let tag = src_tag(service_id, src_bank);
            let list = self.src_ranges.get(&tag).cloned().unwrap_or_default();
            list.into_iter()
                .filter(|r| r.addr.is_ipv6() == key.addr.is_ipv6())
                .collect::<Vec<_>>()
        });
        self.vips.insert(
            key,
            VipState {
                spec: VipSpec {
                    name: format!("adopted-{service_id}"),
                    key,
                    mode,
                    backends,
                    // Its weight is unknown, like the backends' (0 there):
                    // 1 says the slice has a refused share.
                    reject_weight: u32::from(reject.is_some()),
                    affinity_client_ip: svc.flags & abi::service_flags::AFFINITY_CLIENT_IP != 0,
                    affinity_timeout,
                    syn_rate_limit,
                    nat_fib: svc.flags & abi::service_flags::NAT_FIB != 0,
                    source_ranges,
                    // Not in the maps: read from the endpoint entries once
                    // they are adopted (adopt), and the next apply's spec
                    // says it (nothing rewritten either way).
                    stateless_reverse: true,
                    draining,
                    snat,
                },
                service_id,
                slice,
                generation: svc.generation,
                worst_imbalance: 0.0,
                adopted: true,
                src_bank,
            },
        );
        Ok(svc.generation)
    }
}
