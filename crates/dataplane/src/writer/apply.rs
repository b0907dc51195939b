//! One apply: validate, plan every VIP's change on copies of the allocators, then write the maps in
//! the order the module doc of [`super`] gives, refusing alone what does not fit when asked to.

use super::*;

impl Dataplane {
    pub(super) fn generation(&mut self) -> u32 {
        let g = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        g
    }

    /// Refuses the whole set when one VIP needs a node address that is not set (strict mode:
    /// [`Self::missing_node_address`] says which).
    pub(super) fn check_node_addresses<'a>(
        &self,
        specs: impl Iterator<Item = &'a VipSpec>,
    ) -> Result<(), Error> {
        for spec in specs {
            if let Some(why) = self.missing_node_address(spec) {
                return Err(Error::Invalid(why));
            }
        }
        Ok(())
    }

    /// One planning and commit of `desired` ([`Dataplane::apply`]). With
    /// `refusals`, a VIP that does not fit (no service ID, no room for its
    /// slice) is listed there instead of failing the call, and the call
    /// returns `Ok(None)` having touched nothing, for the caller to plan
    /// again without it.
    pub(super) fn apply_round(
        &mut self,
        desired: &[VipSpec],
        mut refusals: Option<&mut Vec<RefusedVip>>,
    ) -> Result<Option<ApplyReport>, Error> {
        self.phases.rounds += 1;
        let started = Instant::now();
        let desired = validate(desired)?;
        if refusals.is_none() {
            // Refuse-alone mode admitted each VIP against these (a kept one has what it needs
            // in the maps already).
            self.check_node_addresses(desired.values())?;
        }
        // New prefixes are inserted before removed VIPs lose theirs, so the
        // tries must hold both at once.
        if let Some(found) = refusals.as_deref_mut() {
            let refused = self.trie_refusals(&desired);
            if !refused.is_empty() {
                found.extend(refused);
                return Ok(None);
            }
        } else {
            check_range_capacity(self.vips.keys().chain(desired.keys()), "while applying")?;
            self.check_src_range_capacity(&desired)?;
        }
        let mut report = ApplyReport::default();

        // --- plan: backends
        let mut wanted: BTreeMap<BackendKey, [u8; 6]> = BTreeMap::new();
        for spec in desired.values() {
            for b in &spec.backends {
                let mac = wanted.entry(b.key).or_insert(b.mac);
                if *mac == [0; 6] {
                    *mac = b.mac;
                }
            }
        }
        // A refused share needs the pseudo-backend (one ID for all VIPs).
        let needs_reject = desired.values().any(|s| s.reject_weight > 0);
        let new_reject = needs_reject && self.reject_id.is_none();
        // Retiring backends give their IDs up early when new ones need them.
        let needed = wanted
            .keys()
            .filter(|k| !self.backends.contains_key(k))
            .count() as u32
            + u32::from(new_reject);
        if needed > self.backend_ids.available() {
            let mut retiring: Vec<(Instant, BackendKey)> = self
                .backends
                .values()
                .filter(|b| !wanted.contains_key(&b.key))
                .filter_map(|b| b.retired_at.map(|t| (t, b.key)))
                .collect();
            retiring.sort();
            let short = (needed - self.backend_ids.available()) as usize;
            for (_, key) in retiring.into_iter().take(short) {
                self.release_backend(key)?;
                report.backends_removed += 1;
            }
        }
        // Refuse-alone mode: the VIPs whose new backends find no ID are refused alone.
        if needed > self.backend_ids.available()
            && let Some(found) = refusals.as_deref_mut()
        {
            let available = self
                .backend_ids
                .available()
                .saturating_sub(u32::from(new_reject));
            let refused = rounds::backend_id_refusals(
                &desired,
                |k| self.vips.contains_key(k),
                self.backends.keys(),
                available,
            );
            if !refused.is_empty() {
                found.extend(refused);
                return Ok(None);
            }
        }
        let mut backend_ids = self.backend_ids.clone();
        let mut new_backends: Vec<(BackendKey, u32, [u8; 6])> = Vec::new();
        let mut id_of: BTreeMap<BackendKey, u32> =
            self.backends.iter().map(|(k, b)| (*k, b.id)).collect();
        let reject_id = match self.reject_id {
            None if new_reject => Some(backend_ids.allocate().ok_or_else(|| {
                Error::Capacity(format!(
                    "backends: all {} backend IDs are in use (a refused share needs one)",
                    abi::MAX_BACKENDS
                ))
            })?),
            id => id,
        };
        for (key, mac) in &wanted {
            if !self.backends.contains_key(key) {
                let id = backend_ids.allocate().ok_or_else(|| {
                    Error::Capacity(format!(
                        "backends: all {} backend IDs are in use",
                        abi::MAX_BACKENDS
                    ))
                })?;
                new_backends.push((*key, id, *mac));
                id_of.insert(*key, id);
            }
        }
        let terminating_next = source_drained(&desired);
        let snat_next: BTreeSet<BackendKey> = desired
            .values()
            .flat_map(|s| s.snat.iter().copied())
            .collect();
        let mac_changes: Vec<(BackendKey, [u8; 6])> = wanted
            .iter()
            .filter(|(k, mac)| self.backends.get(*k).is_some_and(|b| b.mac != **mac))
            .map(|(k, m)| (*k, *m))
            .collect();

        // --- plan: VIPs
        let mut service_ids = self.service_ids.clone();
        let mut slices = self.slices.clone();
        let budget = slice_budget(desired.values(), self.slices.len());
        let mut planned: Vec<PlannedVip> = Vec::new();
        for (key, spec) in &desired {
            let change = match self.vips.get(key) {
                None => VipChange::Add,
                Some(cur) if cur.adopted => {
                    if !self.adopted_matches(cur, spec, &id_of, reject_id) {
                        VipChange::Rebuild
                    } else if same_options(&cur.spec, spec) {
                        VipChange::Adopt
                    } else {
                        VipChange::Reconfigure
                    }
                }
                Some(cur)
                    if cur.spec.backends != spec.backends
                        || cur.spec.reject_weight != spec.reject_weight
                        || cur.spec.mode != spec.mode =>
                {
                    VipChange::Rebuild
                }
                Some(cur) if !same_options(&cur.spec, spec) => VipChange::Reconfigure,
                Some(cur)
                    if cur.spec.name != spec.name
                        || cur.spec.stateless_reverse != spec.stateless_reverse
                        || cur.spec.draining != spec.draining =>
                {
                    VipChange::Rename
                }
                Some(cur)
                    if wants_resize(
                        cur.slice.size,
                        budget.get(key).copied(),
                        slices.largest_free(),
                    ) =>
                {
                    VipChange::Resize
                }
                Some(_) => continue,
            };
            let service_id = match (&change, self.vips.get(key)) {
                (VipChange::Add, _) => match service_ids.allocate() {
                    Some(id) => id,
                    None => {
                        let why = format!("VIPs: all {} service IDs are in use", abi::MAX_VIPS);
                        match refusals.as_deref_mut() {
                            Some(found) => {
                                found.push(RefusedVip::new(spec, why));
                                continue;
                            }
                            None => return Err(Error::Capacity(why)),
                        }
                    }
                },
                (_, Some(cur)) => cur.service_id,
                _ => unreachable!(),
            };
            if let VipChange::Rename | VipChange::Adopt | VipChange::Reconfigure = change {
                let cur = &self.vips[key];
                let worst_imbalance = if cur.adopted {
                    imbalance_of(spec, cur.slice.size)
                } else {
                    cur.worst_imbalance
                };
                planned.push(PlannedVip {
                    spec: spec.clone(),
                    change,
                    service_id,
                    slice: cur.slice,
                    table: Vec::new(),
                    worst_imbalance,
                });
                continue;
            }
            // A rebuilt VIP keeps its slice size while that size is still
            // reasonable (at least the backend count and close to its share,
            // [`rounds::within_share`]): a new size changes `hash % size` for
            // nearly every flow, a kept one moves only about 1/N of them.
            let target = budget.get(key).copied();
            let target = match (self.vips.get(key), target) {
                _ if matches!(change, VipChange::Resize) => target,
                (Some(cur), Some(t))
                    if cur.slice.size >= maglev_members(spec).0.len() as u32
                        && rounds::within_share(cur.slice.size, t) =>
                {
                    Some(cur.slice.size)
                }
                _ => target,
            };
            let (slice, table, worst_imbalance) =
                match plan_slice(spec, &id_of, reject_id, &mut slices, target) {
                    Ok(planned) => planned,
                    // A resize that finds no room waits: the slice it has works.
                    Err(Error::Capacity(_)) if matches!(change, VipChange::Resize) => continue,
                    Err(Error::Capacity(why)) if refusals.is_some() => {
                        if let Some(found) = refusals.as_deref_mut() {
                            found.push(RefusedVip::new(spec, why));
                        }
                        continue;
                    }
                    Err(e) => return Err(e),
                };
            planned.push(PlannedVip {
                spec: spec.clone(),
                change,
                service_id,
                slice,
                table,
                worst_imbalance,
            });
        }
        if refusals.as_deref().is_some_and(|f| !f.is_empty()) {
            // Nothing is written yet: the caller plans again without them.
            self.phases.plan += started.elapsed();
            return Ok(None);
        }
        let removed: Vec<VipKey> = self
            .vips
            .keys()
            .filter(|k| !desired.contains_key(k))
            .copied()
            .collect();
        let leaving: BTreeSet<VipKey> = removed.iter().copied().collect();
        let udp_losing = udp_vips_losing_backends(&self.vips, &desired);
        let clients_losing = client_vips_losing_backends(&self.vips, &desired);

        // Backend endpoints that another VIP is about to reach stop being
        // exclusive first (endpoints.rs).
        let demand = Demand::of(desired.values().map(|spec| (spec, 0)));
        for (ep, entry) in endpoints::demotions(&self.endpoints, &demand, Instant::now()) {
            self.write_endpoint(ep, entry)?;
        }
        // tc_nat must know every backend address before a VIP can send it
        // a flow (reverse.h); released ones are cleared after the commit.
        let coming: Vec<BackendKey> = wanted.keys().copied().collect();
        self.sync_backend_filter(&coming)?;

        // --- commit
        let planned_at = Instant::now();
        self.phases.plan += planned_at - started;
        self.backend_ids = backend_ids;
        self.service_ids = service_ids;
        // Slices allocated in the plan are now owned; frees happen below.
        self.slices = slices;
        if new_reject {
            let id = reject_id.expect("allocated in the plan");
            self.write_reject_backend(id)?;
            self.reject_id = Some(id);
        }
        for (key, id, mac) in new_backends {
            let generation = self.generation();
            // A reused ID must not hand its previous owner's counts on.
            self.zero_backend_stats(id)?;
            self.write_backend(key, id, mac, generation)?;
            self.backends.insert(
                key,
                BackendState {
                    key,
                    id,
                    generation,
                    mac,
                    state: abi::backend_state::NONE,
                    drained: false,
                    terminating: terminating_next.contains(&key),
                    probe_down: false,
                    snat: snat_next.contains(&key),
                    last_change: None,
                    vips: BTreeSet::new(),
                    retired_at: None,
                },
            );
            self.sync_health(&key)?;
            report.backends_added += 1;
        }
        let revived: Vec<BackendKey> = wanted
            .keys()
            .filter(|k| {
                self.backends
                    .get(*k)
                    .is_some_and(|b| b.retired_at.is_some())
            })
            .copied()
            .collect();
        for key in revived {
            self.backends
                .get_mut(&key)
                .expect("listed above")
                .retired_at = None;
            self.sync_health(&key)?;
            report.backends_revived += 1;
        }
        for (key, mac) in mac_changes {
            let b = self
                .backends
                .get_mut(&key)
                .expect("planned from current backends");
            b.mac = mac;
            let (id, generation) = (b.id, b.generation);
            self.write_backend(key, id, mac, generation)?;
        }
        // Sources' drains, before any new slice is written: a backend its
        // VIPs drain takes no new flow from them at any point.
        let keys: Vec<BackendKey> = self.backends.keys().copied().collect();
        for key in keys {
            let t = terminating_next.contains(&key);
            let b = self.backends.get_mut(&key).expect("listed above");
            // A backend no VIP lists any more (retiring) keeps its SNAT flag: its established
            // flows left with this node's address and must go on doing so until they end (or
            // the retire grace does), else their next packet reaches the pod with the client's
            // address and the pod answers the client directly: a stalled connection.
            let snat = if wanted.contains_key(&key) {
                snat_next.contains(&key)
            } else {
                b.snat
            };
            if b.terminating != t || b.snat != snat {
                b.terminating = t;
                b.snat = snat;
                self.sync_health(&key)?;
            }
        }
        let mut old_slices = Vec::new();
        for p in planned {
            let key = p.spec.key;
            match p.change {
                VipChange::Rename => {
                    let v = self.vips.get_mut(&key).expect("renamed VIP exists");
                    if v.spec.name != p.spec.name {
                        report.renamed.push(p.spec.name.clone());
                    } else {
                        report.reconfigured.push(p.spec.name.clone());
                    }
                    // What only the writer's bookkeeping holds: the name,
                    // and how replies are matched (sync_endpoints below).
                    v.spec.name = p.spec.name;
                    v.spec.stateless_reverse = p.spec.stateless_reverse;
                    v.spec.draining = p.spec.draining;
                    continue;
                }
                VipChange::Adopt => {
                    report.adopted.push(p.spec.name.clone());
                    let v = self.vips.get_mut(&key).expect("adopted VIP exists");
                    v.spec = p.spec;
                    v.adopted = false;
                    v.worst_imbalance = p.worst_imbalance;
                    continue;
                }
                VipChange::Reconfigure => {
                    report.reconfigured.push(p.spec.name.clone());
                    let generation = self.generation();
                    let cur = self.src_ranges_in_force(&key);
                    let bank =
                        self.write_service(p.service_id, p.slice, &p.spec, generation, cur)?;
                    let v = self.vips.get_mut(&key).expect("reconfigured VIP exists");
                    v.spec = p.spec;
                    v.generation = generation;
                    v.src_bank = bank;
                    v.adopted = false;
                    v.worst_imbalance = p.worst_imbalance;
                    continue;
                }
                VipChange::Add => report.added.push(p.spec.name.clone()),
                VipChange::Rebuild => report.rebuilt.push(p.spec.name.clone()),
                VipChange::Resize => report.resized.push(p.spec.name.clone()),
            }
            self.maps.maglev.write(p.slice.offset, &p.table);
            let generation = self.generation();
            let cur = self.src_ranges_in_force(&key);
            let src_bank = self.write_service(p.service_id, p.slice, &p.spec, generation, cur)?;
            if let VipChange::Add = p.change {
                self.insert_vip_key(&key, p.service_id)?;
            }
            if let Some(old) = self.vips.get(&key) {
                old_slices.push(old.slice);
                for b in &old.spec.backends {
                    if let Some(bs) = self.backends.get_mut(&b.key) {
                        bs.vips.remove(&key);
                    }
                }
            }
            for b in &p.spec.backends {
                self.backends
                    .get_mut(&b.key)
                    .expect("backend programmed above")
                    .vips
                    .insert(key);
            }
            self.vips.insert(
                key,
                VipState {
                    spec: p.spec,
                    service_id: p.service_id,
                    slice: p.slice,
                    generation,
                    worst_imbalance: p.worst_imbalance,
                    adopted: false,
                    src_bank,
                },
            );
        }
        // Added VIPs are complete (service entry, vip_map entry or range
        // prefixes): the index may point at them. Removed ones leave it
        // before anything of theirs is cleared.
        let written_at = Instant::now();
        self.phases.write += written_at - planned_at;
        self.sync_vip_index(&leaving)?;
        for key in removed {
            let state = self.vips.remove(&key).expect("removed VIP exists");
            self.remove_vip_key(&key)?;
            self.maps
                .service_config
                .set(state.service_id, abi::Service::default(), 0)
                .map_err(|e| map_err("service_config_map", e))?;
            self.set_svc_rate_limit(state.service_id, None)?;
            for bank in [0, 1] {
                self.write_src_ranges(src_tag(state.service_id, bank), &BTreeSet::new())?;
            }
            self.zero_stats(state.service_id)?;
            self.service_ids.release(state.service_id);
            old_slices.push(state.slice);
            for b in &state.spec.backends {
                if let Some(bs) = self.backends.get_mut(&b.key) {
                    bs.vips.remove(&key);
                }
            }
            report.removed.push(state.spec.name);
        }
        for slice in old_slices {
            self.slices.release(slice);
        }
        // No slice names the pseudo-backend any more.
        if !needs_reject && let Some(id) = self.reject_id.take() {
            self.set_health(id, abi::backend_state::NONE)?;
            self.backend_ids.release(id);
        }
        let indexed_at = Instant::now();
        self.phases.index += indexed_at - written_at;
        self.sync_endpoints()?;
        self.sync_backend_filter(&[])?;
        // The slices no longer name the backends that left: no new entry can
        // point at them, so the old ones can go.
        if !udp_losing.is_empty() {
            report.udp_flows_forgotten = self.forget_udp_flows(&udp_losing);
        }
        // Likewise the ClientIP timeout's client entries (a backend still
        // healthy in another VIP would otherwise keep this VIP's clients).
        if !clients_losing.is_empty() {
            self.forget_clients(&clients_losing);
        }
        let unused: Vec<BackendKey> = self
            .backends
            .values()
            .filter(|b| b.vips.is_empty() && b.retired_at.is_none())
            .map(|b| b.key)
            .collect();
        for key in unused {
            if self.retire_grace.is_zero() {
                self.release_backend(key)?;
                report.backends_removed += 1;
            } else {
                self.backends
                    .get_mut(&key)
                    .expect("listed above")
                    .retired_at = Some(Instant::now());
                self.sync_health(&key)?;
                report.backends_retired += 1;
            }
        }
        self.phases.endpoints += indexed_at.elapsed();
        Ok(Some(report))
    }

    /// [`Dataplane::apply`], except that the programmed VIPs whose keys are
    /// in `keep` and that `desired` does not list stay exactly as they are:
    /// not removed, not rebuilt, their backends not retired, and an adopted
    /// one stays adopted (unclaimed), so a later apply that lists it claims
    /// it as after a restart. Keys of `keep` that `desired` lists, or that
    /// are not programmed, change nothing. The report does not name kept
    /// VIPs.
    ///
    /// Why: the Kubernetes source must not remove the VIPs it adopted from
    /// the pinned maps until its initial sync says nothing will claim them
    /// (rivora-architecture.txt, "State, restarts and adoption"); feeding
    /// their adopted specs back to `apply` instead would rebuild them
    /// (their weights are unknown, their names made up).
    ///
    /// How: each kept VIP stands in for itself. Its current spec (weight 1
    /// for an adopted one's unknown weights, a name no source can give) is
    /// added to `desired` and set
    /// as its bookkeeping for the duration of the call, so `apply` finds it
    /// unchanged and leaves its maps, its slice and its backends alone; its
    /// real spec and adopted mark are restored afterwards, whatever `apply`
    /// returned. A kept L3 DSR VIP does not need a tunnel source set (its
    /// outer source is still in the maps); a desired one still does.
    pub fn apply_keeping(
        &mut self,
        desired: &[VipSpec],
        keep: &BTreeSet<VipKey>,
    ) -> Result<ApplyReport, Error> {
        self.phases = ApplyPhases::default();
        let t = Instant::now();
        let admission = self.admit(desired, keep);
        self.phases.admit = t.elapsed();
        let mut keep = keep.clone();
        keep.extend(admission.keep.iter().copied());
        let mut refused = admission.refused;
        let mut desired: Vec<VipSpec> = admission.admitted.into_owned();
        let mut so_far = ApplyReport::default();
        // An adopted VIP refused in a round is kept by a stand-in (its adopted spec, of
        // unknown weights, cannot be planned): each pass keeps at least one more, so this ends.
        let mut report = loop {
            match self.apply_kept(&desired, &keep)? {
                Rounds::Done(report) => break report,
                Rounds::Keep(keys, refusals, partial) => {
                    so_far.merge(partial);
                    refused.extend(refusals);
                    desired.retain(|s| !keys.contains(&s.key));
                    keep.extend(keys);
                }
            }
        };
        so_far.merge(std::mem::take(&mut report));
        let mut report = so_far;
        refused.append(&mut report.refused);
        report.refused = refused;
        self.refused = report.refused.clone();
        Ok(report)
    }

    /// [`Self::apply_keeping`] of VIPs admitted.
    pub(super) fn apply_kept(
        &mut self,
        desired: &[VipSpec],
        keep: &BTreeSet<VipKey>,
    ) -> Result<Rounds, Error> {
        let listed: BTreeSet<VipKey> = desired.iter().map(|s| s.key).collect();
        let kept: Vec<VipKey> = keep
            .iter()
            .filter(|k| !listed.contains(k) && self.vips.contains_key(k))
            .copied()
            .collect();
        if kept.is_empty() {
            return self.apply_admitted(desired);
        }
        if !self.refuse_alone {
            self.check_node_addresses(desired.iter())?;
        }
        let mut all = desired.to_vec();
        let mut saved = Vec::with_capacity(kept.len());
        let tunnel = self.tunnel_source;
        let snat = self.snat_source.clone();
        for key in &kept {
            let v = self.vips.get_mut(key).expect("filtered above");
            let mut stand_in = v.spec.clone();
            // A name no source gives, so it cannot collide with a desired
            // VIP's (a kept VIP's own name may now belong to another key).
            stand_in.name = format!("\u{0}kept-{}", v.service_id);
            if v.adopted {
                for b in &mut stand_in.backends {
                    b.weight = 1;
                }
            }
            if matches!(stand_in.mode, Mode::DsrIpip | Mode::DsrGre) {
                // Only apply's check reads this field; the maps keep theirs.
                let unspecified = std::net::Ipv4Addr::UNSPECIFIED;
                if key.addr.is_ipv6() {
                    self.tunnel_source
                        .1
                        .get_or_insert(unspecified.to_ipv6_mapped());
                } else {
                    self.tunnel_source.0.get_or_insert(unspecified);
                }
            }
            if !stand_in.snat.is_empty() {
                // As for tunnels: only apply's check reads it; the map
                // keeps what it holds.
                if key.addr.is_ipv6() {
                    self.snat_source
                        .v6
                        .get_or_insert(std::net::Ipv6Addr::UNSPECIFIED);
                } else {
                    self.snat_source
                        .v4
                        .get_or_insert(std::net::Ipv4Addr::UNSPECIFIED);
                }
            }
            saved.push((
                *key,
                std::mem::replace(&mut v.spec, stand_in.clone()),
                v.adopted,
            ));
            v.adopted = false;
            all.push(stand_in);
        }
        let result = self.apply_admitted(&all);
        self.tunnel_source = tunnel;
        self.snat_source = snat;
        for (key, spec, adopted) in saved {
            if let Some(v) = self.vips.get_mut(&key) {
                v.spec = spec;
                v.adopted = adopted;
            }
        }
        result
    }

    /// Whether an adopted VIP's maps already hold exactly what `spec` asks
    /// for: same mode, same backends, and the slice content equals the table
    /// the spec's backends and weights give at the adopted slice size.
    pub(super) fn adopted_matches(
        &self,
        cur: &VipState,
        spec: &VipSpec,
        id_of: &BTreeMap<BackendKey, u32>,
        reject_id: Option<u32>,
    ) -> bool {
        let same_set = cur
            .spec
            .backends
            .iter()
            .map(|b| b.key)
            .eq(spec.backends.iter().map(|b| b.key));
        // An adopted spec's reject_weight only says whether the slice has
        // a refused share (its weight is unknown, as the backends' are).
        let same_reject = (cur.spec.reject_weight > 0) == (spec.reject_weight > 0);
        if cur.spec.mode != spec.mode || !same_set || !same_reject {
            return false;
        }
        let (keys, weights) = maglev_members(spec);
        if keys.is_empty() {
            return cur.slice.size == 0;
        }
        let mb = maglev_backends(&keys, &weights);
        let Ok(table) = maglev::build(&mb, cur.slice.size) else {
            return false;
        };
        let Some(want) = member_ids(spec, &table, id_of, reject_id) else {
            return false;
        };
        want == self.maps.maglev.read(cur.slice.offset, cur.slice.size)
    }
}
