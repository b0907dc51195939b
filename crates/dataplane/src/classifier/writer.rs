//! The classifier's map writer: makes the maps hold a [`ClassifierSpec`]
//! without a packet ever seeing a half-written state.
//!
//! Ordering, per apply:
//! 1. groups: a changed table is built in free space of `cls_table`, the
//!    targets of new slots are written, then the group entry (a hash map
//!    update, atomic for readers) switches to the new tables; only then
//!    are removed slots' targets deleted and the old space freed;
//! 2. rules are never rewritten in place: a new or changed rule is written
//!    under a fresh ID (entry and source prefixes) before any VIP names it;
//! 3. each VIP's rule list is replaced by one hash map update, then the
//!    family flags of `cls_ctl_map` say which families to look at;
//! 4. what no VIP names any more (VIPs, rules, groups) is removed last.
//!
//! Restarts: the maps are pinned and outlive rivorad, but the names behind
//! IDs are not in them. [`Classifier::adopt`] therefore marks what the maps
//! hold as in use ("legacy") and the first apply writes the whole spec
//! anew next to it and switches each VIP over. The tables are a function
//! of (length, slot set), so the new ones equal the old ones and no flow
//! moves; the legacy objects are freed by the first pruning apply.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use aya::maps::lpm_trie::Key as LpmKey;
use rivora_abi as abi;

use super::maps::{ClsMaps, ClsSrcData4, ClsSrcData6};
use super::model::{ClassifierSpec, GroupSpec, RuleProto, RuleSpec, SctpHash};
use super::table::group_table;
use crate::Error;
use crate::alloc::{IdAllocator, Slice, SliceAllocator};

fn map_err(map: &'static str) -> impl FnOnce(aya::maps::MapError) -> Error {
    move |source| Error::Map { map, source }
}

/// What one apply changed, for logs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ClsReport {
    /// Groups written for the first time.
    pub groups_added: usize,
    /// Groups whose tables or targets changed.
    pub groups_changed: usize,
    /// Groups removed.
    pub groups_removed: usize,
    /// Rules written under a new ID (new or changed).
    pub rules_written: usize,
    /// Rules freed.
    pub rules_removed: usize,
    /// VIPs whose rule list was written.
    pub vips_written: usize,
    /// VIPs removed.
    pub vips_removed: usize,
    /// Objects adopted from pinned maps that this apply freed.
    pub legacy_freed: usize,
}

impl ClsReport {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        *self == ClsReport::default()
    }
}

#[derive(Debug, Clone)]
struct GroupState {
    id: u32,
    spec: GroupSpec,
    size: u32,
    t4: Option<Slice>,
    t6: Option<Slice>,
}

#[derive(Debug, Clone)]
struct RuleState {
    id: u32,
    spec: RuleSpec,
    group_id: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct VipState {
    stats_id: u32,
    rules: Vec<u32>,
}

/// What the pinned maps held at adoption, freed by the first pruning apply.
#[derive(Debug, Default)]
struct Legacy {
    vips: BTreeMap<IpAddr, VipState>,
    rules: BTreeSet<u32>,
    groups: BTreeMap<u32, abi::ClsGroup>,
    targets: Vec<abi::ClsTargetKey>,
}

impl Legacy {
    fn is_empty(&self) -> bool {
        self.vips.is_empty()
            && self.rules.is_empty()
            && self.groups.is_empty()
            && self.targets.is_empty()
    }
}

/// The classifier's bookkeeping: which ID and which part of `cls_table`
/// each named group, rule and VIP has.
#[derive(Debug)]
pub struct Classifier {
    group_ids: IdAllocator,
    rule_ids: IdAllocator,
    stats_ids: IdAllocator,
    regions: SliceAllocator,
    groups: BTreeMap<String, GroupState>,
    rules: BTreeMap<String, RuleState>,
    vips: BTreeMap<IpAddr, VipState>,
    legacy: Legacy,
    generation: u32,
    /// The spec the maps hold (the last successful apply).
    applied: ClassifierSpec,
}

impl Default for Classifier {
    fn default() -> Self {
        Self::new()
    }
}

/// A group's flags in the map.
fn group_flags(g: &GroupSpec) -> u32 {
    match g.sctp_hash {
        SctpHash::Ports => abi::cls_group_flags::SCTP_PORTS,
        SctpHash::FiveTuple => 0,
    }
}

fn proto_bits(r: &RuleSpec) -> u8 {
    r.protocols
        .iter()
        .map(|p| match p {
            RuleProto::Tcp => abi::cls_proto::TCP,
            RuleProto::Udp => abi::cls_proto::UDP,
            RuleProto::Sctp => abi::cls_proto::SCTP,
        })
        .fold(0, |a, b| a | b)
}

/// The map entry of a rule (without its generation).
fn rule_entry(r: &RuleSpec, group_id: u32) -> abi::ClsRule {
    let mut e = abi::ClsRule {
        group_id,
        flags: abi::cls_rule_flags::ACTIVE,
        protos: proto_bits(r),
        ..Default::default()
    };
    if !r.sources.is_empty() {
        e.flags |= abi::cls_rule_flags::SOURCES;
    }
    for (i, p) in r
        .source_ports
        .iter()
        .take(abi::CLS_MAX_PORT_RANGES)
        .enumerate()
    {
        e.sports[i] = abi::ClsPorts {
            first: p.first,
            last: p.last,
        };
        e.n_sports = (i + 1) as u8;
    }
    for (i, p) in r
        .destination_ports
        .iter()
        .take(abi::CLS_MAX_PORT_RANGES)
        .enumerate()
    {
        e.dports[i] = abi::ClsPorts {
            first: p.first,
            last: p.last,
        };
        e.n_dports = (i + 1) as u8;
    }
    for (i, m) in r
        .byte_matches
        .iter()
        .take(abi::CLS_MAX_BYTE_MATCHES)
        .enumerate()
    {
        e.bytes[i] = abi::ClsByteMatch {
            mask: m.mask,
            value: m.value,
            proto: m.proto.number(),
            offset: m.offset,
            len: m.len,
            pad: 0,
        };
        e.n_bytes = (i + 1) as u8;
    }
    e
}

impl Classifier {
    /// Empty bookkeeping over empty maps.
    pub fn new() -> Self {
        Self {
            group_ids: IdAllocator::new(abi::CLS_MAX_GROUPS),
            rule_ids: IdAllocator::new(abi::CLS_MAX_RULES),
            stats_ids: IdAllocator::new(abi::CLS_MAX_VIP_IDS),
            regions: SliceAllocator::new(abi::CLS_TABLE_SLOTS),
            groups: BTreeMap::new(),
            rules: BTreeMap::new(),
            vips: BTreeMap::new(),
            legacy: Legacy::default(),
            generation: 0,
            applied: ClassifierSpec::default(),
        }
    }

    /// Bookkeeping over maps an earlier rivorad wrote: everything they hold
    /// is kept in use (and forwarding) until the first pruning apply has
    /// written the spec anew and freed it (see the module doc).
    pub fn adopt(maps: &ClsMaps) -> Result<Self, Error> {
        let mut legacy = Legacy::default();
        let mut stats = BTreeSet::new();
        for item in maps.vips4.iter() {
            let (k, v) = item.map_err(map_err("cls_vip_map"))?;
            legacy.vips.insert(IpAddr::V4(k.addr()), vip_state(&v));
        }
        for item in maps.vips6.iter() {
            let (k, v) = item.map_err(map_err("cls_vip_map6"))?;
            legacy.vips.insert(IpAddr::V6(k.addr()), vip_state(&v));
        }
        for v in legacy.vips.values() {
            stats.insert(v.stats_id);
            legacy.rules.extend(v.rules.iter().copied());
        }
        let mut group_ids = BTreeSet::new();
        for id in &legacy.rules {
            if let Ok(r) = maps.rules.get(id, 0)
                && r.flags & abi::cls_rule_flags::ACTIVE != 0
            {
                group_ids.insert(r.group_id);
            }
        }
        for item in maps.groups.iter() {
            let (id, g) = item.map_err(map_err("cls_group_map"))?;
            group_ids.insert(id);
            legacy.groups.insert(id, g);
        }
        for item in maps.targets.keys() {
            legacy
                .targets
                .push(item.map_err(map_err("cls_target_map"))?);
        }
        let mut regions = SliceAllocator::new(abi::CLS_TABLE_SLOTS);
        for g in legacy.groups.values() {
            for (offset, count) in [(g.offset4, g.count4), (g.offset6, g.count6)] {
                if count > 0 && g.size > 0 {
                    regions.reserve(Slice {
                        offset,
                        size: g.size,
                    });
                }
            }
        }
        let generation = legacy
            .groups
            .values()
            .map(|g| g.generation)
            .max()
            .unwrap_or(0);
        Ok(Self {
            group_ids: IdAllocator::adopt(abi::CLS_MAX_GROUPS, &group_ids),
            rule_ids: IdAllocator::adopt(abi::CLS_MAX_RULES, &legacy.rules),
            stats_ids: IdAllocator::adopt(abi::CLS_MAX_VIP_IDS, &stats),
            regions,
            groups: BTreeMap::new(),
            rules: BTreeMap::new(),
            vips: BTreeMap::new(),
            legacy,
            generation,
            applied: ClassifierSpec::default(),
        })
    }

    /// The spec the maps hold: what the last successful apply asked for
    /// (empty after adoption until the first apply). What announcements
    /// and readiness follow.
    pub fn applied(&self) -> &ClassifierSpec {
        &self.applied
    }

    /// VIPs adopted from pinned maps that no apply has claimed yet.
    pub fn unclaimed(&self) -> Vec<IpAddr> {
        self.legacy
            .vips
            .keys()
            .filter(|v| !self.vips.contains_key(v))
            .copied()
            .collect()
    }

    /// Every programmed group: (name, ID, its spec, table length), by name.
    pub fn groups(&self) -> impl Iterator<Item = (&str, u32, &GroupSpec, u32)> {
        self.groups
            .iter()
            .map(|(n, g)| (n.as_str(), g.id, &g.spec, g.size))
    }

    /// Every programmed rule: (name, ID, its spec), by name.
    pub fn rules(&self) -> impl Iterator<Item = (&str, u32, &RuleSpec)> {
        self.rules.iter().map(|(n, r)| (n.as_str(), r.id, &r.spec))
    }

    /// Every programmed VIP: (address, counters slot, its rule IDs in
    /// evaluation order), by address.
    pub fn vips(&self) -> impl Iterator<Item = (IpAddr, u32, &[u32])> {
        self.vips
            .iter()
            .map(|(a, v)| (*a, v.stats_id, v.rules.as_slice()))
    }

    /// The group ID of `name`, if programmed.
    pub fn group_id(&self, name: &str) -> Option<u32> {
        self.groups.get(name).map(|g| g.id)
    }

    /// The rule ID of `name`, if programmed.
    pub fn rule_id(&self, name: &str) -> Option<u32> {
        self.rules.get(name).map(|r| r.id)
    }

    /// The counters slot of VIP `vip`, if programmed.
    pub fn vip_stats_id(&self, vip: IpAddr) -> Option<u32> {
        self.vips.get(&vip).map(|v| v.stats_id)
    }

    /// The per-family table regions of group `name`: (IPv4, IPv6) as
    /// (offset, length), for reading a group's tables back.
    pub fn group_tables(&self, name: &str) -> Option<(Option<Slice>, Option<Slice>)> {
        self.groups.get(name).map(|g| (g.t4, g.t6))
    }

    /// Makes the maps hold `spec`. `prune`: also free what the pinned
    /// maps held at adoption and nothing claims (false keeps adopted VIPs
    /// forwarding, for a source that has not seen everything yet). On an
    /// invalid spec or a full capacity nothing is changed.
    pub fn apply(
        &mut self,
        maps: &mut ClsMaps,
        spec: &ClassifierSpec,
        prune: bool,
    ) -> Result<ClsReport, Error> {
        self.check(spec)?;
        self.generation = self.generation.wrapping_add(1);
        let mut report = ClsReport::default();

        // 1. Groups.
        let mut retired_regions = Vec::new();
        let mut retired_targets = Vec::new();
        for g in &spec.groups {
            self.write_group(
                maps,
                g,
                &mut report,
                &mut retired_regions,
                &mut retired_targets,
            )?;
        }

        // 2. Rules: a fresh ID for every new or changed one.
        let mut retired_rules = Vec::new();
        for r in &spec.rules {
            let group_id = self.groups[&r.group].id;
            let unchanged = self
                .rules
                .get(&r.name)
                .is_some_and(|old| old.spec == *r && old.group_id == group_id);
            if unchanged {
                continue;
            }
            let id = self
                .rule_ids
                .allocate()
                .ok_or_else(|| Error::Capacity("classifier rule IDs".into()))?;
            write_rule(maps, id, r, group_id, self.generation)?;
            report.rules_written += 1;
            if let Some(old) = self.rules.insert(
                r.name.clone(),
                RuleState {
                    id,
                    spec: r.clone(),
                    group_id,
                },
            ) {
                retired_rules.push(old);
            }
        }

        // 3. VIPs.
        let mut flags = maps.ctl.get(&0, 0).map_err(map_err("cls_ctl_map"))?.flags;
        for vip in spec.vips() {
            let rules: Vec<u32> = spec
                .rules_of(vip)
                .iter()
                .map(|r| self.rules[&r.name].id)
                .collect();
            let stats_id = match self.vips.get(&vip) {
                Some(v) if v.rules == rules => continue,
                Some(v) => v.stats_id,
                None => {
                    let id = self
                        .stats_ids
                        .allocate()
                        .ok_or_else(|| Error::Capacity("classifier VIP counters".into()))?;
                    zero_stats(&mut maps.vip_stats, id, "cls_vip_stats_map")?;
                    id
                }
            };
            let entry = vip_entry(stats_id, &rules);
            write_vip(maps, vip, &entry)?;
            flags |= if vip.is_ipv6() {
                abi::cls_ctl_flags::V6
            } else {
                abi::cls_ctl_flags::V4
            };
            self.vips.insert(vip, VipState { stats_id, rules });
            report.vips_written += 1;
        }
        write_ctl(maps, flags)?;

        // 4. Removals: VIPs, then rules, then groups nobody names.
        let desired_vips = spec.vips();
        let gone: Vec<IpAddr> = self
            .vips
            .keys()
            .filter(|v| !desired_vips.contains(v))
            .copied()
            .collect();
        for vip in gone {
            let state = self.vips.remove(&vip).expect("listed");
            delete_vip(maps, vip)?;
            self.stats_ids.release(state.stats_id);
            report.vips_removed += 1;
        }
        let desired_rules: BTreeSet<&str> = spec.rules.iter().map(|r| r.name.as_str()).collect();
        let gone: Vec<String> = self
            .rules
            .keys()
            .filter(|n| !desired_rules.contains(n.as_str()))
            .cloned()
            .collect();
        for name in gone {
            retired_rules.push(self.rules.remove(&name).expect("listed"));
        }
        for r in retired_rules {
            clear_rule(maps, r.id, &r.spec)?;
            self.rule_ids.release(r.id);
            report.rules_removed += 1;
        }
        let desired_groups: BTreeSet<&str> = spec.groups.iter().map(|g| g.name.as_str()).collect();
        let gone: Vec<String> = self
            .groups
            .keys()
            .filter(|n| !desired_groups.contains(n.as_str()))
            .cloned()
            .collect();
        for name in gone {
            let g = self.groups.remove(&name).expect("listed");
            maps.groups
                .remove(&g.id)
                .map_err(map_err("cls_group_map"))?;
            for t in &g.spec.targets {
                retired_targets.push(abi::ClsTargetKey {
                    group_id: g.id,
                    slot: u32::from(t.slot),
                });
            }
            retired_regions.extend(g.t4);
            retired_regions.extend(g.t6);
            self.group_ids.release(g.id);
            report.groups_removed += 1;
        }
        for k in retired_targets {
            let _ = maps.targets.remove(&k);
        }
        for r in retired_regions {
            self.regions.release(r);
        }
        if prune {
            report.legacy_freed = self.free_legacy(maps)?;
        }
        // The families' flags exactly as the VIPs now are.
        let mut exact = 0;
        for vip in self.vips.keys().chain(self.legacy.vips.keys()) {
            exact |= if vip.is_ipv6() {
                abi::cls_ctl_flags::V6
            } else {
                abi::cls_ctl_flags::V4
            };
        }
        if exact != flags {
            write_ctl(maps, exact)?;
        }
        self.applied = spec.clone();
        Ok(report)
    }

    /// Whether [`Self::apply`] would accept `spec`: valid and within every
    /// capacity. Writes nothing.
    pub fn check(&self, spec: &ClassifierSpec) -> Result<(), Error> {
        if let Err(problems) = super::validate::validate(spec) {
            return Err(Error::Invalid(format!(
                "classifier: {}",
                problems.join("; ")
            )));
        }
        self.check_capacity(spec)
    }

    /// Refuses a spec that cannot fit, before anything is written: the
    /// worst case holds the old and the new of every changed object.
    fn check_capacity(&self, spec: &ClassifierSpec) -> Result<(), Error> {
        let new_rules = spec
            .rules
            .iter()
            .filter(|r| !self.rules.get(&r.name).is_some_and(|o| o.spec == **r))
            .count() as u32;
        if new_rules > self.rule_ids.available() {
            return Err(Error::Capacity(format!(
                "{new_rules} new or changed classifier rules, {} rule IDs free of {}",
                self.rule_ids.available(),
                abi::CLS_MAX_RULES
            )));
        }
        let new_groups = spec
            .groups
            .iter()
            .filter(|g| !self.groups.contains_key(&g.name))
            .count() as u32;
        if new_groups > self.group_ids.available() {
            return Err(Error::Capacity(format!(
                "{new_groups} new classifier groups, {} group IDs free of {}",
                self.group_ids.available(),
                abi::CLS_MAX_GROUPS
            )));
        }
        let vips = spec.vips();
        for (v6, family) in [(false, "IPv4"), (true, "IPv6")] {
            let n = vips.iter().filter(|v| v.is_ipv6() == v6).count() as u32;
            if n > abi::CLS_MAX_VIPS {
                return Err(Error::Capacity(format!(
                    "{n} {family} classifier VIPs, at most {}",
                    abi::CLS_MAX_VIPS
                )));
            }
        }
        let new_vips = vips.iter().filter(|v| !self.vips.contains_key(v)).count() as u32;
        if new_vips > self.stats_ids.available() {
            return Err(Error::Capacity(format!(
                "{new_vips} new classifier VIPs, {} counter slots free of {}",
                self.stats_ids.available(),
                abi::CLS_MAX_VIP_IDS
            )));
        }
        let targets: usize =
            spec.groups.iter().map(|g| g.targets.len()).sum::<usize>() + self.legacy.targets.len();
        if targets > abi::CLS_MAX_TARGETS as usize {
            return Err(Error::Capacity(format!(
                "{targets} classifier targets (with those adopted at start), at most {}",
                abi::CLS_MAX_TARGETS
            )));
        }
        // Source prefixes: a changed rule's new ones sit next to its old
        // ones until the VIPs switch.
        for v6 in [false, true] {
            let count = |r: &RuleSpec| r.sources.iter().filter(|s| s.addr.is_ipv6() == v6).count();
            let kept: usize = self.rules.values().map(|r| count(&r.spec)).sum();
            let added: usize = spec
                .rules
                .iter()
                .filter(|r| !self.rules.get(&r.name).is_some_and(|o| o.spec == **r))
                .map(count)
                .sum();
            if kept + added > abi::CLS_MAX_SRC_PREFIXES as usize {
                return Err(Error::Capacity(format!(
                    "{} classifier source prefixes of one family during the change, at most {}",
                    kept + added,
                    abi::CLS_MAX_SRC_PREFIXES
                )));
            }
        }
        let mut need = 0u64;
        for g in &spec.groups {
            let size = g.table_size().unwrap_or(0);
            let old = self.groups.get(&g.name);
            for v6 in [false, true] {
                let slots = g.slots(v6);
                let same = old.is_some_and(|o| o.size == size && o.spec.slots(v6) == slots);
                if !slots.is_empty() && !same {
                    need += u64::from(size);
                }
            }
        }
        let free = u64::from(self.regions.free_slots());
        if need > free {
            return Err(Error::Capacity(format!(
                "classifier tables need {need} more entries of cls_table, {free} free of {} \
                 (a group of N slots takes the largest prime <= 100 N per family)",
                abi::CLS_TABLE_SLOTS
            )));
        }
        Ok(())
    }

    fn write_group(
        &mut self,
        maps: &mut ClsMaps,
        g: &GroupSpec,
        report: &mut ClsReport,
        retired_regions: &mut Vec<Slice>,
        retired_targets: &mut Vec<abi::ClsTargetKey>,
    ) -> Result<(), Error> {
        let size = g.table_size().expect("validated: max_endpoints >= 1");
        let flags = group_flags(g);
        let old = self.groups.get(&g.name).cloned();
        if old.as_ref().is_some_and(|o| o.spec == *g) {
            return Ok(());
        }
        let id = match &old {
            Some(o) => o.id,
            None => self
                .group_ids
                .allocate()
                .ok_or_else(|| Error::Capacity("classifier group IDs".into()))?,
        };
        // Tables: rebuilt where the family's slot set (or the length) moved.
        let mut tables = [None, None];
        for (i, v6) in [false, true].into_iter().enumerate() {
            let slots = g.slots(v6);
            let kept = old.as_ref().and_then(|o| {
                let t = if v6 { o.t6 } else { o.t4 };
                (o.size == size && o.spec.slots(v6) == slots).then_some(t)
            });
            tables[i] = match kept {
                Some(t) => t,
                None if slots.is_empty() => None,
                None => {
                    let region = self.regions.allocate(size).ok_or_else(|| {
                        Error::Capacity(format!("cls_table: no free run of {size} entries"))
                    })?;
                    let table = group_table(size, &slots)
                        .map_err(|e| Error::Invalid(format!("group {}: table: {e:?}", g.name)))?;
                    maps.table.write(region.offset, &table);
                    Some(region)
                }
            };
        }
        // Targets of every slot (new ones must exist before a table names
        // them; changed addresses are one atomic update each).
        for t in &g.targets {
            let key = abi::ClsTargetKey {
                group_id: id,
                slot: u32::from(t.slot),
            };
            let unchanged = old
                .as_ref()
                .is_some_and(|o| o.spec.targets.iter().any(|ot| ot == t));
            if !unchanged {
                maps.targets
                    .insert(key, abi::ClsTarget::new(t.v4, t.v6), 0)
                    .map_err(map_err("cls_target_map"))?;
            }
        }
        let entry = abi::ClsGroup {
            offset4: tables[0].map(|s| s.offset).unwrap_or(0),
            offset6: tables[1].map(|s| s.offset).unwrap_or(0),
            size,
            count4: g.slots(false).len() as u16,
            count6: g.slots(true).len() as u16,
            flags,
            generation: self.generation,
        };
        if old.is_none() {
            zero_stats(&mut maps.group_stats, id, "cls_group_stats_map")?;
        }
        maps.groups
            .insert(id, entry, 0)
            .map_err(map_err("cls_group_map"))?;
        if let Some(o) = &old {
            for (i, t) in [o.t4, o.t6].into_iter().enumerate() {
                if t.is_some() && t != tables[i] {
                    retired_regions.extend(t);
                }
            }
            let slots: BTreeSet<u16> = g.targets.iter().map(|t| t.slot).collect();
            for t in &o.spec.targets {
                if !slots.contains(&t.slot) {
                    retired_targets.push(abi::ClsTargetKey {
                        group_id: id,
                        slot: u32::from(t.slot),
                    });
                }
            }
            report.groups_changed += 1;
        } else {
            report.groups_added += 1;
        }
        self.groups.insert(
            g.name.clone(),
            GroupState {
                id,
                spec: g.clone(),
                size,
                t4: tables[0],
                t6: tables[1],
            },
        );
        Ok(())
    }

    /// Frees what the pinned maps held at adoption: VIPs nothing claimed
    /// are removed, then the legacy rules, targets, groups and tables
    /// (nothing names them any more: every claimed VIP was rewritten).
    fn free_legacy(&mut self, maps: &mut ClsMaps) -> Result<usize, Error> {
        if self.legacy.is_empty() {
            return Ok(0);
        }
        let legacy = std::mem::take(&mut self.legacy);
        let mut freed = 0;
        for (vip, state) in &legacy.vips {
            if !self.vips.contains_key(vip) {
                delete_vip(maps, *vip)?;
                self.stats_ids.release(state.stats_id);
                freed += 1;
            } else if self.vips[vip].stats_id != state.stats_id {
                self.stats_ids.release(state.stats_id);
            }
        }
        let live_rules: BTreeSet<u32> = self.rules.values().map(|r| r.id).collect();
        for id in &legacy.rules {
            if !live_rules.contains(id) {
                if let Ok(r) = maps.rules.get(id, 0) {
                    clear_rule_entry(maps, *id, &r)?;
                }
                self.rule_ids.release(*id);
                freed += 1;
            }
        }
        let live_groups: BTreeSet<u32> = self.groups.values().map(|g| g.id).collect();
        for k in &legacy.targets {
            if !live_groups.contains(&k.group_id) {
                let _ = maps.targets.remove(k);
            }
        }
        for (id, g) in &legacy.groups {
            if live_groups.contains(id) {
                continue;
            }
            maps.groups.remove(id).map_err(map_err("cls_group_map"))?;
            for (offset, count) in [(g.offset4, g.count4), (g.offset6, g.count6)] {
                if count > 0 && g.size > 0 {
                    self.regions.release(Slice {
                        offset,
                        size: g.size,
                    });
                }
            }
            self.group_ids.release(*id);
            freed += 1;
        }
        Ok(freed)
    }
}

fn vip_state(v: &abi::ClsVip) -> VipState {
    let n = (v.count as usize).min(abi::CLS_MAX_RULES_PER_VIP);
    VipState {
        stats_id: v.stats_id,
        rules: v.rules[..n].to_vec(),
    }
}

fn vip_entry(stats_id: u32, rules: &[u32]) -> abi::ClsVip {
    let mut e = abi::ClsVip {
        stats_id,
        count: rules.len() as u32,
        ..Default::default()
    };
    e.rules[..rules.len()].copy_from_slice(rules);
    e
}

fn write_vip(maps: &mut ClsMaps, vip: IpAddr, entry: &abi::ClsVip) -> Result<(), Error> {
    match vip {
        IpAddr::V4(a) => maps
            .vips4
            .insert(abi::ClsVipKey4::new(a), entry, 0)
            .map_err(map_err("cls_vip_map")),
        IpAddr::V6(a) => maps
            .vips6
            .insert(abi::ClsVipKey6::new(a), entry, 0)
            .map_err(map_err("cls_vip_map6")),
    }
}

fn delete_vip(maps: &mut ClsMaps, vip: IpAddr) -> Result<(), Error> {
    match vip {
        IpAddr::V4(a) => maps
            .vips4
            .remove(&abi::ClsVipKey4::new(a))
            .map_err(map_err("cls_vip_map")),
        IpAddr::V6(a) => maps
            .vips6
            .remove(&abi::ClsVipKey6::new(a))
            .map_err(map_err("cls_vip_map6")),
    }
}

fn write_ctl(maps: &mut ClsMaps, flags: u32) -> Result<(), Error> {
    maps.ctl
        .set(0, abi::ClsCtl { flags, pad: 0 }, 0)
        .map_err(map_err("cls_ctl_map"))
}

fn zero_stats(
    map: &mut aya::maps::PerCpuArray<aya::maps::MapData, abi::ClsStats>,
    id: u32,
    name: &'static str,
) -> Result<(), Error> {
    let cpus = aya::util::nr_cpus().map_err(|(what, source)| Error::Io {
        what: what.to_string(),
        source,
    })?;
    let zero = aya::maps::PerCpuValues::try_from(vec![abi::ClsStats::default(); cpus]).map_err(
        |source| Error::Io {
            what: "per-CPU zero values".into(),
            source,
        },
    )?;
    map.set(id, zero, 0).map_err(map_err(name))
}

fn src_keys(id: u32, r: &RuleSpec) -> (Vec<LpmKey<ClsSrcData4>>, Vec<LpmKey<ClsSrcData6>>) {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for s in &r.sources {
        let c = s.canonical();
        match c.addr {
            IpAddr::V4(a) => v4.push(LpmKey::new(
                32 + u32::from(c.prefix_len),
                ClsSrcData4 {
                    rule_id: id,
                    addr: a.octets(),
                },
            )),
            IpAddr::V6(a) => v6.push(LpmKey::new(
                32 + u32::from(c.prefix_len),
                ClsSrcData6 {
                    rule_id: id,
                    addr: a.octets(),
                },
            )),
        }
    }
    (v4, v6)
}

/// Writes rule `id`: its source prefixes first, then its entry (which
/// makes it usable), all before any VIP names the ID.
fn write_rule(
    maps: &mut ClsMaps,
    id: u32,
    r: &RuleSpec,
    group_id: u32,
    generation: u32,
) -> Result<(), Error> {
    let (v4, v6) = src_keys(id, r);
    for k in &v4 {
        maps.src4.insert(k, id, 0).map_err(map_err("cls_src_map"))?;
    }
    for k in &v6 {
        maps.src6
            .insert(k, id, 0)
            .map_err(map_err("cls_src_map6"))?;
    }
    zero_stats(&mut maps.rule_stats, id, "cls_rule_stats_map")?;
    let mut e = rule_entry(r, group_id);
    e.generation = generation;
    maps.rules.set(id, e, 0).map_err(map_err("cls_rule_map"))
}

/// Clears rule `id` (no VIP names it any more) and its source prefixes.
fn clear_rule(maps: &mut ClsMaps, id: u32, r: &RuleSpec) -> Result<(), Error> {
    maps.rules
        .set(id, abi::ClsRule::default(), 0)
        .map_err(map_err("cls_rule_map"))?;
    let (v4, v6) = src_keys(id, r);
    for k in &v4 {
        let _ = maps.src4.remove(k);
    }
    for k in &v6 {
        let _ = maps.src6.remove(k);
    }
    Ok(())
}

/// Clears an adopted rule whose spec is unknown: its prefixes are found by
/// walking the tries for its ID.
fn clear_rule_entry(maps: &mut ClsMaps, id: u32, _entry: &abi::ClsRule) -> Result<(), Error> {
    maps.rules
        .set(id, abi::ClsRule::default(), 0)
        .map_err(map_err("cls_rule_map"))?;
    let k4: Vec<_> = maps
        .src4
        .keys()
        .filter_map(Result::ok)
        .filter(|k| k.data().rule_id == id)
        .collect();
    for k in k4 {
        let _ = maps.src4.remove(&k);
    }
    let k6: Vec<_> = maps
        .src6
        .keys()
        .filter_map(Result::ok)
        .filter(|k| k.data().rule_id == id)
        .collect();
    for k in k6 {
        let _ = maps.src6.remove(&k);
    }
    Ok(())
}
