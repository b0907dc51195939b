//! The map writer: the one place that turns a desired set of VIPs into map
//! contents. A change is planned on copies of the allocators first; only when
//! every ID and slice could be allocated are the maps written, in an order
//! that never lets a packet see a half-built VIP:
//!
//! 1. new backends get their address entry and health before any slice
//!    names them;
//! 2. a new or changed VIP's Maglev slice is written into free slots, then
//!    its service entry is rewritten in one update (the flip), then a new
//!    VIP's vip_map entry is inserted;
//! 3. removed VIPs lose their vip_map entry before their service entry;
//! 4. only then are old slices, service IDs and backend IDs released.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use aya::maps::PerCpuValues;
use rivora_abi as abi;
use rivora_maglev::{self as maglev, MaglevBackend};

use crate::Error;
use crate::alloc::{IdAllocator, Slice, SliceAllocator};
use crate::maps::Maps;
use crate::model::{BackendKey, BackendSpec, Mode, VipKey, VipSpec};

/// A programmed VIP.
#[derive(Clone, Debug)]
pub struct VipState {
    /// The spec it was programmed from (backends in canonical order).
    pub spec: VipSpec,
    /// Its service ID (index of service_config_map and stats_map).
    pub service_id: u32,
    /// Its slice of the Maglev table.
    pub slice: Slice,
    /// Generation written with its service entry.
    pub generation: u32,
    /// Worst relative deviation of a backend's slot share from its weight
    /// share (0.01 = 1%), reported because crowded tables shrink slices.
    pub worst_imbalance: f64,
    /// Read back from pinned maps at start and not yet matched with the
    /// configuration: name and weights are unknown until then.
    pub adopted: bool,
}

/// What a start found in pinned maps and took over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdoptReport {
    /// VIPs adopted with their service ID, slice and backends.
    pub vips: usize,
    /// Backends adopted with their ID, generation and state.
    pub backends: usize,
    /// Adopted backends no VIP uses: they retire (drain) as after a removal.
    pub retiring: usize,
    /// Inconsistent entries that were removed instead, and why.
    pub dropped: Vec<String>,
}

/// A programmed backend, shared by every VIP that lists it.
#[derive(Clone, Debug)]
pub struct BackendState {
    /// Address and port.
    pub key: BackendKey,
    /// Its backend ID.
    pub id: u32,
    /// Generation written with its entry (flows check it).
    pub generation: u32,
    /// MAC (DSR modes).
    pub mac: [u8; 6],
    /// Effective health state as written to the map
    /// (`rivora_abi::backend_state`): down if the probes say so, else
    /// draining if drained or retiring, else healthy.
    pub state: u32,
    /// Drained by an operator.
    pub drained: bool,
    /// The health probes consider it down.
    pub probe_down: bool,
    /// When `state` last changed in this process (None: not since start).
    pub last_change: Option<std::time::SystemTime>,
    /// VIPs that list it.
    pub vips: BTreeSet<VipKey>,
    /// Set when no VIP lists it any more: it keeps its ID (in the draining
    /// state, so established flows finish) until the retire grace passes.
    pub retired_at: Option<Instant>,
}

/// What an apply changed, for logs and the API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// VIPs added.
    pub added: Vec<String>,
    /// VIPs removed.
    pub removed: Vec<String>,
    /// VIPs whose backends, weights or mode changed (slice rebuilt).
    pub rebuilt: Vec<String>,
    /// VIPs only renamed.
    pub renamed: Vec<String>,
    /// Adopted VIPs whose maps already held exactly what the config asks
    /// for: kept as they were (same service ID, slice and backend IDs).
    pub adopted: Vec<String>,
    /// Backends that got a new ID.
    pub backends_added: usize,
    /// Backends whose ID was released.
    pub backends_removed: usize,
    /// Backends no VIP lists any more, kept draining for the retire grace.
    pub backends_retired: usize,
    /// Retiring backends listed again before their grace ran out.
    pub backends_revived: usize,
}

impl ApplyReport {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        *self == ApplyReport::default()
    }
}

impl fmt::Display for ApplyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return write!(f, "no change");
        }
        let mut parts = Vec::new();
        for (label, list) in [
            ("added", &self.added),
            ("removed", &self.removed),
            ("rebuilt", &self.rebuilt),
            ("renamed", &self.renamed),
            ("kept from pinned maps", &self.adopted),
        ] {
            if !list.is_empty() {
                parts.push(format!("{label} {}", list.join(",")));
            }
        }
        if self.backends_added > 0 {
            parts.push(format!("{} new backend(s)", self.backends_added));
        }
        if self.backends_removed > 0 {
            parts.push(format!("{} backend(s) released", self.backends_removed));
        }
        if self.backends_retired > 0 {
            parts.push(format!(
                "{} backend(s) retiring (draining)",
                self.backends_retired
            ));
        }
        if self.backends_revived > 0 {
            parts.push(format!(
                "{} retiring backend(s) revived",
                self.backends_revived
            ));
        }
        write!(f, "{}", parts.join("; "))
    }
}

/// Summed (over CPUs) counters of one VIP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VipCounters {
    /// VIP name.
    pub name: String,
    /// Service ID.
    pub service_id: u32,
    /// Counters summed over CPUs.
    pub stats: abi::VipStats,
}

/// Owner of the maps and of the bookkeeping that explains them.
pub struct Dataplane {
    maps: Maps,
    vips: BTreeMap<VipKey, VipState>,
    backends: BTreeMap<BackendKey, BackendState>,
    service_ids: IdAllocator,
    backend_ids: IdAllocator,
    slices: SliceAllocator,
    next_generation: u32,
    retire_grace: Duration,
}

enum VipChange {
    Add,
    Rebuild,
    Rename,
    Adopt,
}

struct PlannedVip {
    spec: VipSpec,
    change: VipChange,
    service_id: u32,
    slice: Slice,
    table: Vec<u32>,
    worst_imbalance: f64,
}

impl Dataplane {
    /// Takes ownership of freshly loaded maps (empty bookkeeping).
    pub fn new(maps: Maps) -> Self {
        let table_len = maps.maglev.len();
        Self {
            maps,
            vips: BTreeMap::new(),
            backends: BTreeMap::new(),
            service_ids: IdAllocator::new(abi::MAX_VIPS),
            backend_ids: IdAllocator::new(abi::MAX_BACKENDS),
            slices: SliceAllocator::new(table_len),
            next_generation: 1,
            retire_grace: Duration::ZERO,
        }
    }

    /// How long a backend that no VIP lists any more keeps its ID in the
    /// draining state, so that its established flows can finish instead of
    /// being re-balanced mid-connection. Zero releases it at once.
    pub fn set_retire_grace(&mut self, grace: Duration) {
        self.retire_grace = grace;
    }

    /// Releases retiring backends whose grace has run out; returns how many.
    /// Called periodically by the daemon.
    pub fn release_retired(&mut self) -> Result<usize, Error> {
        let now = Instant::now();
        let grace = self.retire_grace;
        let expired: Vec<BackendKey> = self
            .backends
            .values()
            .filter(|b| b.retired_at.is_some_and(|t| now.duration_since(t) >= grace))
            .map(|b| b.key)
            .collect();
        for key in &expired {
            self.release_backend(*key)?;
        }
        Ok(expired.len())
    }

    fn release_backend(&mut self, key: BackendKey) -> Result<(), Error> {
        let b = self.backends.remove(&key).expect("caller checked");
        self.set_health(b.id, abi::backend_state::NONE)?;
        self.clear_backend(key, b.id)?;
        self.backend_ids.release(b.id);
        Ok(())
    }

    /// Programmed VIPs.
    pub fn vips(&self) -> impl Iterator<Item = &VipState> {
        self.vips.values()
    }

    /// Programmed backends.
    pub fn backends(&self) -> impl Iterator<Item = &BackendState> {
        self.backends.values()
    }

    /// The map handles, for readers such as tests and stats.
    pub fn maps(&self) -> &Maps {
        &self.maps
    }

    /// Mutable map handles (tests use it to plant odd states).
    pub fn maps_mut(&mut self) -> &mut Maps {
        &mut self.maps
    }

    /// Length of the shared Maglev table.
    pub fn maglev_table_len(&self) -> u32 {
        self.slices.len()
    }

    fn generation(&mut self) -> u32 {
        let g = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        g
    }

    /// Makes the maps hold exactly `desired`. Either every VIP is programmed
    /// or, on a planning error (capacity, invalid spec), nothing is touched.
    pub fn apply(&mut self, desired: &[VipSpec]) -> Result<ApplyReport, Error> {
        let desired = validate(desired)?;
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
        // Retiring backends give their IDs up early when new ones need them.
        let needed = wanted
            .keys()
            .filter(|k| !self.backends.contains_key(k))
            .count() as u32;
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
        let mut backend_ids = self.backend_ids.clone();
        let mut new_backends: Vec<(BackendKey, u32, [u8; 6])> = Vec::new();
        let mut id_of: BTreeMap<BackendKey, u32> =
            self.backends.iter().map(|(k, b)| (*k, b.id)).collect();
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
        let mac_changes: Vec<(BackendKey, [u8; 6])> = wanted
            .iter()
            .filter(|(k, mac)| self.backends.get(*k).is_some_and(|b| b.mac != **mac))
            .map(|(k, m)| (*k, *m))
            .collect();

        // --- plan: VIPs
        let mut service_ids = self.service_ids.clone();
        let mut slices = self.slices.clone();
        let budget = slice_budget(&desired, self.slices.len());
        let mut planned: Vec<PlannedVip> = Vec::new();
        for (key, spec) in &desired {
            let change = match self.vips.get(key) {
                None => VipChange::Add,
                Some(cur) if cur.adopted => {
                    if self.adopted_matches(cur, spec, &id_of) {
                        VipChange::Adopt
                    } else {
                        VipChange::Rebuild
                    }
                }
                Some(cur) if cur.spec.backends != spec.backends || cur.spec.mode != spec.mode => {
                    VipChange::Rebuild
                }
                Some(cur) if cur.spec.name != spec.name => VipChange::Rename,
                Some(_) => continue,
            };
            let service_id = match (&change, self.vips.get(key)) {
                (VipChange::Add, _) => service_ids.allocate().ok_or_else(|| {
                    Error::Capacity(format!(
                        "VIPs: all {} service IDs are in use",
                        abi::MAX_VIPS
                    ))
                })?,
                (_, Some(cur)) => cur.service_id,
                _ => unreachable!(),
            };
            if let VipChange::Rename | VipChange::Adopt = change {
                let cur = &self.vips[key];
                let worst_imbalance = match change {
                    VipChange::Adopt => imbalance_of(spec, cur.slice.size),
                    _ => cur.worst_imbalance,
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
            let (slice, table, worst_imbalance) =
                plan_slice(spec, &id_of, &mut slices, budget.get(key).copied())?;
            planned.push(PlannedVip {
                spec: spec.clone(),
                change,
                service_id,
                slice,
                table,
                worst_imbalance,
            });
        }
        let removed: Vec<VipKey> = self
            .vips
            .keys()
            .filter(|k| !desired.contains_key(k))
            .copied()
            .collect();

        // --- commit
        self.backend_ids = backend_ids;
        self.service_ids = service_ids;
        // Slices allocated in the plan are now owned; frees happen below.
        self.slices = slices;
        for (key, id, mac) in new_backends {
            let generation = self.generation();
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
                    probe_down: false,
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
        let mut old_slices = Vec::new();
        for p in planned {
            let key = p.spec.key;
            match p.change {
                VipChange::Rename => {
                    report.renamed.push(p.spec.name.clone());
                    self.vips
                        .get_mut(&key)
                        .expect("renamed VIP exists")
                        .spec
                        .name = p.spec.name;
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
                VipChange::Add => report.added.push(p.spec.name.clone()),
                VipChange::Rebuild => report.rebuilt.push(p.spec.name.clone()),
            }
            self.maps.maglev.write(p.slice.offset, &p.table);
            let generation = self.generation();
            let mut flags = abi::service_flags::ACTIVE;
            if key.addr.is_ipv6() {
                flags |= abi::service_flags::IPV6;
            }
            let entry = abi::Service {
                maglev_offset: p.slice.offset,
                maglev_size: p.slice.size,
                backend_count: p.spec.backends.len() as u16,
                mode: p.spec.mode.abi(),
                flags,
                generation,
            };
            self.maps
                .service_config
                .set(p.service_id, entry, 0)
                .map_err(|e| map_err("service_config_map", e))?;
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
                },
            );
        }
        for key in removed {
            let state = self.vips.remove(&key).expect("removed VIP exists");
            self.remove_vip_key(&key)?;
            self.maps
                .service_config
                .set(state.service_id, abi::Service::default(), 0)
                .map_err(|e| map_err("service_config_map", e))?;
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
        Ok(report)
    }

    /// Whether an adopted VIP's maps already hold exactly what `spec` asks
    /// for: same mode, same backends, and the slice content equals the table
    /// the spec's backends and weights give at the adopted slice size.
    fn adopted_matches(
        &self,
        cur: &VipState,
        spec: &VipSpec,
        id_of: &BTreeMap<BackendKey, u32>,
    ) -> bool {
        let same_set = cur
            .spec
            .backends
            .iter()
            .map(|b| b.key)
            .eq(spec.backends.iter().map(|b| b.key));
        if cur.spec.mode != spec.mode || !same_set {
            return false;
        }
        if spec.backends.is_empty() {
            return cur.slice.size == 0;
        }
        let keys: Vec<String> = spec.backends.iter().map(|b| b.key.to_string()).collect();
        let mb: Vec<MaglevBackend> = keys
            .iter()
            .zip(&spec.backends)
            .map(|(k, b)| MaglevBackend {
                key: k.as_bytes(),
                weight: b.weight,
            })
            .collect();
        let Ok(table) = maglev::build(&mb, cur.slice.size) else {
            return false;
        };
        let want: Vec<u32> = table
            .iter()
            .map(|&i| id_of[&spec.backends[i as usize].key])
            .collect();
        want == self.maps.maglev.read(cur.slice.offset, cur.slice.size)
    }

    /// Takes over maps pinned by an earlier rivorad: reads back every VIP's
    /// service ID, slice and backends and every backend's ID, generation and
    /// state, so nothing is renumbered and no ID in use is handed out again.
    /// Flow tables and counters are left as they are. Entries that do not
    /// add up (a VIP whose service entry is inactive, whose slice overlaps
    /// another, or names unknown backends) are removed and reported; the
    /// configuration applied next re-creates what it lists.
    pub fn adopt(maps: Maps) -> Result<(Self, AdoptReport), Error> {
        let mut dp = Dataplane::new(maps);
        let mut report = AdoptReport::default();
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
                    probe_down: health.flags & abi::backend_flags::PROBE_DOWN != 0
                        || state == abi::backend_state::DOWN,
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
            let key = VipKey {
                addr: abi::addr4_from_be(k.addr).into(),
                port: abi::port_from_be(k.port),
                proto: k.proto,
            };
            entries.push((key, v.service_id));
        }
        for item in dp.maps.vip_map6.iter() {
            let (k, v) = item.map_err(|e| map_err("vip_map6", e))?;
            let key = VipKey {
                addr: std::net::Ipv6Addr::from(k.addr).into(),
                port: abi::port_from_be(k.port),
                proto: k.proto,
            };
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
                    dp.remove_vip_key(&key)?;
                }
            }
        }
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
        let backend_ids: BTreeSet<u32> = dp.backends.values().map(|b| b.id).collect();
        dp.backend_ids = IdAllocator::adopt(abi::MAX_BACKENDS, &backend_ids);
        dp.service_ids = IdAllocator::adopt(abi::MAX_VIPS, &service_ids_used);
        dp.next_generation = max_generation.wrapping_add(1).max(1);
        Ok((dp, report))
    }

    /// Adopts one VIP; on Err nothing of it was taken.
    fn adopt_vip(
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
        for id in &ids {
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
        for id in &ids {
            let b = by_id.get_mut(id).expect("checked above");
            b.vips.insert(key);
            backends.push(BackendSpec {
                key: b.key,
                weight: 0,
                mac: b.mac,
            });
        }
        backends.sort();
        self.vips.insert(
            key,
            VipState {
                spec: VipSpec {
                    name: format!("adopted-{service_id}"),
                    key,
                    mode,
                    backends,
                },
                service_id,
                slice,
                generation: svc.generation,
                worst_imbalance: 0.0,
                adopted: true,
            },
        );
        Ok(svc.generation)
    }

    /// Records an operator's drain (or its end). Returns whether the
    /// effective state changed. A backend the probes consider down stays down.
    pub fn set_drained(&mut self, key: &BackendKey, drained: bool) -> Result<bool, Error> {
        self.backend_mut(key)?.drained = drained;
        self.sync_health(key)
    }

    /// Records the health probes' verdict. Returns whether the effective
    /// state changed. Slices are not rebuilt: the health map alone steers
    /// new flows, so a flapping backend reshuffles nobody else's flows.
    pub fn set_probe_down(&mut self, key: &BackendKey, down: bool) -> Result<bool, Error> {
        self.backend_mut(key)?.probe_down = down;
        self.sync_health(key)
    }

    /// Forces a state, for tests and tools: `HEALTHY` clears drain and
    /// probe verdict, `DRAINING` drains, `DOWN` marks the probes down.
    pub fn set_backend_state(&mut self, key: &BackendKey, state: u32) -> Result<(), Error> {
        let b = self.backend_mut(key)?;
        match state {
            abi::backend_state::HEALTHY => (b.drained, b.probe_down) = (false, false),
            abi::backend_state::DRAINING => (b.drained, b.probe_down) = (true, false),
            abi::backend_state::DOWN => b.probe_down = true,
            s => return Err(Error::Invalid(format!("state {s} cannot be set"))),
        }
        self.sync_health(key).map(|_| ())
    }

    fn backend_mut(&mut self, key: &BackendKey) -> Result<&mut BackendState, Error> {
        self.backends
            .get_mut(key)
            .ok_or_else(|| Error::Invalid(format!("no backend {key}")))
    }

    /// Writes a backend's effective state and its reasons to the health map
    /// when they changed; returns whether the state changed.
    fn sync_health(&mut self, key: &BackendKey) -> Result<bool, Error> {
        let b = self.backends.get(key).expect("caller checked");
        let state = if b.probe_down {
            abi::backend_state::DOWN
        } else if b.drained || b.retired_at.is_some() {
            abi::backend_state::DRAINING
        } else {
            abi::backend_state::HEALTHY
        };
        let mut flags = 0;
        if b.drained {
            flags |= abi::backend_flags::DRAINED;
        }
        if b.probe_down {
            flags |= abi::backend_flags::PROBE_DOWN;
        }
        let id = b.id;
        let changed = b.state != state;
        self.maps
            .backend_health
            .set(id, abi::BackendHealth { state, flags }, 0)
            .map_err(|e| map_err("backend_health_map", e))?;
        let b = self.backends.get_mut(key).expect("caller checked");
        if changed {
            b.state = state;
            b.last_change = Some(std::time::SystemTime::now());
        }
        Ok(changed)
    }

    /// Per-VIP counters summed over CPUs, in VIP order.
    pub fn vip_counters(&self) -> Result<Vec<VipCounters>, Error> {
        let mut out = Vec::new();
        for v in self.vips.values() {
            let per_cpu = self
                .maps
                .stats
                .get(&v.service_id, 0)
                .map_err(|e| map_err("stats_map", e))?;
            let mut s = abi::VipStats::default();
            for c in per_cpu.iter() {
                s.packets += c.packets;
                s.bytes += c.bytes;
                s.new_flows += c.new_flows;
                s.drops += c.drops;
                s.reply_packets += c.reply_packets;
                s.reply_bytes += c.reply_bytes;
            }
            out.push(VipCounters {
                name: v.spec.name.clone(),
                service_id: v.service_id,
                stats: s,
            });
        }
        Ok(out)
    }

    /// Entries in use in each flow table and its capacity, so an operator
    /// sees a table filling before LRU eviction starts dropping live flows.
    /// Counts by walking the keys: one syscall per entry, so call it at
    /// scrape or CLI rate, not in a loop.
    pub fn table_usage(&self) -> Vec<(&'static str, u64, u64)> {
        let cap = abi::MAX_FLOWS as u64;
        vec![
            (
                "connection_affinity_map",
                self.maps.affinity.keys().count() as u64,
                cap,
            ),
            (
                "connection_affinity_map6",
                self.maps.affinity6.keys().count() as u64,
                cap,
            ),
            (
                "nat_reverse_map",
                self.maps.nat_reverse.keys().count() as u64,
                cap,
            ),
            (
                "nat_reverse_map6",
                self.maps.nat_reverse6.keys().count() as u64,
                cap,
            ),
        ]
    }

    /// Drop counters by reason (index = `rivora_abi::drop_reason`).
    pub fn drop_counters(&self) -> Result<Vec<u64>, Error> {
        (0..abi::drop_reason::COUNT)
            .map(|r| {
                let per_cpu = self
                    .maps
                    .drop_stats
                    .get(&r, 0)
                    .map_err(|e| map_err("drop_stats_map", e))?;
                Ok(per_cpu.iter().map(|c| c.packets).sum())
            })
            .collect()
    }

    fn write_backend(
        &mut self,
        key: BackendKey,
        id: u32,
        mac: [u8; 6],
        generation: u32,
    ) -> Result<(), Error> {
        let port = abi::be_port(key.port);
        match key.addr {
            IpAddr::V4(a) => self
                .maps
                .backend_map
                .set(
                    id,
                    abi::Backend4 {
                        addr: abi::be_addr4(a),
                        port,
                        mac,
                        generation,
                    },
                    0,
                )
                .map_err(|e| map_err("backend_map", e)),
            IpAddr::V6(a) => self
                .maps
                .backend_map6
                .set(
                    id,
                    abi::Backend6 {
                        addr: a.octets(),
                        port,
                        mac,
                        generation,
                    },
                    0,
                )
                .map_err(|e| map_err("backend_map6", e)),
        }
    }

    fn clear_backend(&mut self, key: BackendKey, id: u32) -> Result<(), Error> {
        match key.addr {
            IpAddr::V4(_) => self
                .maps
                .backend_map
                .set(id, abi::Backend4::default(), 0)
                .map_err(|e| map_err("backend_map", e)),
            IpAddr::V6(_) => self
                .maps
                .backend_map6
                .set(id, abi::Backend6::default(), 0)
                .map_err(|e| map_err("backend_map6", e)),
        }
    }

    fn set_health(&mut self, id: u32, state: u32) -> Result<(), Error> {
        self.maps
            .backend_health
            .set(id, abi::BackendHealth { state, flags: 0 }, 0)
            .map_err(|e| map_err("backend_health_map", e))
    }

    fn insert_vip_key(&mut self, key: &VipKey, service_id: u32) -> Result<(), Error> {
        let value = abi::VipValue { service_id };
        match key.addr {
            IpAddr::V4(a) => self
                .maps
                .vip_map
                .insert(abi::VipKey4::new(a, key.port, key.proto), value, 0)
                .map_err(|e| map_err("vip_map", e)),
            IpAddr::V6(a) => self
                .maps
                .vip_map6
                .insert(abi::VipKey6::new(a, key.port, key.proto), value, 0)
                .map_err(|e| map_err("vip_map6", e)),
        }
    }

    fn remove_vip_key(&mut self, key: &VipKey) -> Result<(), Error> {
        let res = match key.addr {
            IpAddr::V4(a) => self
                .maps
                .vip_map
                .remove(&abi::VipKey4::new(a, key.port, key.proto)),
            IpAddr::V6(a) => self
                .maps
                .vip_map6
                .remove(&abi::VipKey6::new(a, key.port, key.proto)),
        };
        match res {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) => Err(map_err("vip_map", e)),
        }
    }

    fn zero_stats(&mut self, service_id: u32) -> Result<(), Error> {
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| Error::Io {
            what: what.to_string(),
            source: e,
        })?;
        let zeros = PerCpuValues::try_from(vec![abi::VipStats::default(); cpus]).map_err(|e| {
            Error::Io {
                what: "per-CPU stats buffer".into(),
                source: e,
            }
        })?;
        self.maps
            .stats
            .set(service_id, zeros, 0)
            .map_err(|e| map_err("stats_map", e))
    }
}

fn map_err(map: &'static str, source: aya::maps::MapError) -> Error {
    Error::Map { map, source }
}

/// Checks what the map layouts cannot express and canonicalises backends.
fn validate(desired: &[VipSpec]) -> Result<BTreeMap<VipKey, VipSpec>, Error> {
    if desired.len() > abi::MAX_VIPS as usize {
        return Err(Error::Capacity(format!(
            "{} VIPs requested, at most {}",
            desired.len(),
            abi::MAX_VIPS
        )));
    }
    let mut out = BTreeMap::new();
    let mut names = BTreeSet::new();
    for spec in desired {
        if !names.insert(spec.name.as_str()) {
            return Err(Error::Invalid(format!("VIP name {} used twice", spec.name)));
        }
        if spec.mode != Mode::Nat {
            return Err(Error::Invalid(format!(
                "VIP {}: mode {} is not supported by this datapath yet",
                spec.name,
                spec.mode.as_str()
            )));
        }
        if spec.backends.len() > u16::MAX as usize {
            return Err(Error::Invalid(format!(
                "VIP {}: too many backends",
                spec.name
            )));
        }
        let mut canon = spec.clone();
        canon.backends = spec.sorted_backends();
        let mut seen = BTreeSet::new();
        for b in &canon.backends {
            if b.key.addr.is_ipv6() != spec.key.addr.is_ipv6() {
                return Err(Error::Invalid(format!(
                    "VIP {}: backend {} is not of the VIP's address family",
                    spec.name, b.key
                )));
            }
            if b.weight == 0 {
                return Err(Error::Invalid(format!(
                    "VIP {}: backend {} has weight 0",
                    spec.name, b.key
                )));
            }
            if !seen.insert(b.key) {
                return Err(Error::Invalid(format!(
                    "VIP {}: backend {} listed twice",
                    spec.name, b.key
                )));
            }
        }
        if out.insert(spec.key, canon).is_some() {
            return Err(Error::Invalid(format!("VIP {} defined twice", spec.key)));
        }
    }
    Ok(out)
}

/// Slice-size targets for every desired VIP. Each VIP asks for Maglev's
/// preferred size (about 100 slots per backend, see rivora-maglev); when the
/// requests add up to more than half the table, all are scaled down in
/// proportion. Half, because a rebuilt slice is written into free slots
/// before the old one is released, so the table must have room for a second
/// copy of any slice.
fn slice_budget(desired: &BTreeMap<VipKey, VipSpec>, table_len: u32) -> BTreeMap<VipKey, u32> {
    let preferred: BTreeMap<VipKey, u32> = desired
        .iter()
        .filter(|(_, s)| !s.backends.is_empty())
        .map(|(k, s)| {
            let keys: Vec<String> = s.backends.iter().map(|b| b.key.to_string()).collect();
            let mb: Vec<MaglevBackend> = keys
                .iter()
                .zip(&s.backends)
                .map(|(k, b)| MaglevBackend {
                    key: k.as_bytes(),
                    weight: b.weight,
                })
                .collect();
            (*k, maglev::preferred_slice_size_for(&mb))
        })
        .collect();
    let total: u64 = preferred.values().map(|&p| p as u64).sum();
    let half = (table_len / 2) as u64;
    if total <= half {
        return preferred;
    }
    preferred
        .into_iter()
        .map(|(k, p)| (k, ((p as u64 * half) / total).max(1) as u32))
        .collect()
}

/// Sizes, places and fills one VIP's slice (on the planning copy).
fn plan_slice(
    spec: &VipSpec,
    id_of: &BTreeMap<BackendKey, u32>,
    slices: &mut SliceAllocator,
    target: Option<u32>,
) -> Result<(Slice, Vec<u32>, f64), Error> {
    if spec.backends.is_empty() {
        return Ok((Slice { offset: 0, size: 0 }, Vec::new(), 0.0));
    }
    let count = spec.backends.len() as u32;
    let keys: Vec<String> = spec.backends.iter().map(|b| b.key.to_string()).collect();
    let mb: Vec<MaglevBackend> = keys
        .iter()
        .zip(&spec.backends)
        .map(|(k, b)| MaglevBackend {
            key: k.as_bytes(),
            weight: b.weight,
        })
        .collect();
    let want = target
        .unwrap_or_else(|| maglev::preferred_slice_size_for(&mb))
        .max(count);
    let size = maglev::fit_slice_size(want, count, slices.largest_free()).ok_or_else(|| {
        Error::Capacity(format!(
            "maglev_table: VIP {} needs at least {count} contiguous free slots, the largest free run is {} of {}; \
             raise --maglev-table-size",
            spec.name,
            slices.largest_free(),
            slices.len()
        ))
    })?;
    let slice = slices
        .allocate(size)
        .expect("fit_slice_size checked the largest free run");
    let table =
        maglev::build(&mb, size).map_err(|e| Error::Invalid(format!("VIP {}: {e}", spec.name)))?;
    let worst_imbalance = maglev::worst_imbalance(&table, &mb);
    let ids = table
        .iter()
        .map(|&i| id_of[&spec.backends[i as usize].key])
        .collect();
    Ok((slice, ids, worst_imbalance))
}

/// The worst imbalance of `spec`'s table at `size` slots.
fn imbalance_of(spec: &VipSpec, size: u32) -> f64 {
    if spec.backends.is_empty() {
        return 0.0;
    }
    let keys: Vec<String> = spec.backends.iter().map(|b| b.key.to_string()).collect();
    let mb: Vec<MaglevBackend> = keys
        .iter()
        .zip(&spec.backends)
        .map(|(k, b)| MaglevBackend {
            key: k.as_bytes(),
            weight: b.weight,
        })
        .collect();
    maglev::build(&mb, size)
        .map(|t| maglev::worst_imbalance(&t, &mb))
        .unwrap_or(f64::NAN)
}

impl BackendSpec {
    /// A backend with weight 1 and no MAC.
    pub fn new(addr: IpAddr, port: u16) -> Self {
        Self {
            key: BackendKey { addr, port },
            weight: 1,
            mac: [0; 6],
        }
    }
}
