//! Applying a desired state in rounds, so that one VIP that does not fit never holds the
//! others back, and slices follow the table's share.
//!
//! Strict mode (the YAML file: a refused file stays refused whole) applies in one round or
//! not at all. Refuse-alone mode (the Kubernetes source, where each VIP is some Service's or
//! Gateway's and one must not stop the rest) plans the whole state; the VIPs that do not fit
//! (no service ID, no room for a slice of at least their member count) are taken out (a new
//! one) or kept as they are (a programmed one), and the rest is planned again and committed.
//! When that commit gave slots back (slices shrunk to the table's share, VIPs removed or
//! rebuilt smaller), the refused VIPs are tried once more, after an RCU grace period so that
//! no packet still reads the released slots through an old service entry: each VIP's own
//! change stays atomic for its lookups, while the node's change as a whole comes in steps.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use rivora_abi as abi;

use super::{ApplyPhases, ApplyReport, Dataplane, RangePrefix, plan_slice, slice_budget, validate};
use crate::Error;
use crate::model::{BackendKey, VipKey, VipSpec};

/// Most commits one apply makes in refuse-alone mode: the first, and retries of refused VIPs
/// while earlier commits keep giving slots back.
const MAX_COMMITS: usize = 3;

/// A VIP an apply left out because it did not fit ([`ApplyReport::refused`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedVip {
    /// The VIP's key.
    pub key: VipKey,
    /// Its name (for the Kubernetes source, `k8s/NAMESPACE/NAME/...`: it names the object).
    pub name: String,
    /// Why, naming the capacity (`maglev_table: ...`, `VIPs: ...`) or the rule it breaks.
    pub reason: String,
    /// Whether a capacity refused it (it fits once room is made); otherwise it breaks a rule
    /// (of its own, the node's set-up, or another VIP's port range) and must be changed.
    pub capacity: bool,
}

impl RefusedVip {
    /// Refused for a capacity.
    pub(super) fn new(spec: &VipSpec, reason: String) -> Self {
        Self {
            key: spec.key,
            name: spec.name.clone(),
            reason,
            capacity: true,
        }
    }

    /// Refused for a rule it breaks.
    pub(super) fn invalid(spec: &VipSpec, reason: String) -> Self {
        Self {
            capacity: false,
            ..Self::new(spec, reason)
        }
    }
}

impl Dataplane {
    /// Whether a VIP that does not fit is refused alone (listed in
    /// [`ApplyReport::refused`], everything else applied) instead of the
    /// whole apply failing with nothing changed. Off by default (a config
    /// file is applied whole or not at all); the Kubernetes source turns it
    /// on, because there each VIP is one object's and one object must not
    /// stop a node.
    pub fn set_refuse_alone(&mut self, on: bool) {
        self.refuse_alone = on;
    }

    /// Makes the maps hold `desired`. Strict mode: either every VIP is
    /// programmed or, on a planning error (capacity, invalid spec), nothing
    /// is touched. Refuse-alone mode ([`Dataplane::set_refuse_alone`]): a VIP
    /// that breaks a rule of its own or exceeds a capacity is refused alone
    /// (see the module documentation and [`Dataplane::admit`]).
    pub fn apply(&mut self, desired: &[VipSpec]) -> Result<ApplyReport, Error> {
        self.apply_keeping(desired, &BTreeSet::new())
    }

    /// [`Dataplane::apply`] of VIPs admitted: those within the service table, room made for
    /// them, then the rounds.
    pub(super) fn apply_admitted(&mut self, desired: &[VipSpec]) -> Result<Rounds, Error> {
        let (desired, over) = self.within_vip_capacity(desired);
        let t = Instant::now();
        let shrunk = self.shrink_to_share(&desired)?;
        self.phases.shrink += t.elapsed();
        let mut rounds = self.apply_rounds(&desired)?;
        let report = match &mut rounds {
            Rounds::Done(r) | Rounds::Keep(_, _, r) => r,
        };
        // Shrunk first, so listed first.
        report.resized.splice(0..0, shrunk);
        report.refused.extend(over);
        Ok(rounds)
    }

    /// Refuse-alone mode: `desired` cut to the VIPs the service table holds
    /// (`rivora_abi::MAX_VIPS`; those programmed now first, then by key), and the refusals of
    /// the rest, which are all new. Strict mode, or within the capacity: `desired` as it is
    /// (validation refuses too many VIPs as a whole).
    fn within_vip_capacity<'a>(
        &self,
        desired: &'a [VipSpec],
    ) -> (std::borrow::Cow<'a, [VipSpec]>, Vec<RefusedVip>) {
        let max = rivora_abi::MAX_VIPS as usize;
        if !self.refuse_alone || desired.len() <= max {
            return (std::borrow::Cow::Borrowed(desired), Vec::new());
        }
        let mut order: Vec<&VipSpec> = desired.iter().collect();
        order.sort_by_key(|s| (!self.vips.contains_key(&s.key), s.key));
        let refused = order[max..]
            .iter()
            .map(|s| {
                RefusedVip::new(
                    s,
                    format!(
                        "VIPs: {} requested, the service table holds at most {max}",
                        desired.len()
                    ),
                )
            })
            .collect();
        let kept = order[..max].iter().map(|s| (*s).clone()).collect();
        (std::borrow::Cow::Owned(kept), refused)
    }

    /// The VIPs the last successful apply refused alone (none in strict mode): not programmed,
    /// or kept as they were. For the status and the Kubernetes source's reports.
    pub fn refused(&self) -> &[RefusedVip] {
        &self.refused
    }

    /// Where the last apply's time went ([`ApplyPhases`]).
    pub fn last_apply_phases(&self) -> ApplyPhases {
        self.phases
    }

    /// Gives room back before the plan: every programmed VIP whose slice holds far more than
    /// its share of the table as `desired` divides it ([`wants_resize`]) gets a slice of its
    /// share now, each VIP atomically (the new slice written, the service entry switched),
    /// and the old slices are released after an RCU grace period. Without it a plan places
    /// every new and rebuilt slice while the large old ones still hold the table. Only the
    /// slice size changes (same backends); an invalid `desired` shrinks nothing (the apply
    /// refuses it). Returns the VIPs resized.
    fn shrink_to_share(&mut self, desired: &[VipSpec]) -> Result<Vec<String>, Error> {
        let budget = if self.refuse_alone {
            // Admission (admit.rs) refused alone what validation would refuse.
            slice_budget(desired, self.slices.len())
        } else {
            let Ok(desired) = validate(desired) else {
                return Ok(Vec::new());
            };
            slice_budget(desired.values(), self.slices.len())
        };
        let oversized: Vec<(VipKey, u32)> = self
            .vips
            .iter()
            .filter(|(_, v)| !v.adopted)
            .filter_map(|(k, v)| {
                let t = *budget.get(k)?;
                (v.slice.size > t && wants_resize(v.slice.size, Some(t), 0)).then_some((*k, t))
            })
            .collect();
        if oversized.is_empty() {
            return Ok(Vec::new());
        }
        let id_of: BTreeMap<BackendKey, u32> =
            self.backends.iter().map(|(k, b)| (*k, b.id)).collect();
        let mut old = Vec::new();
        let mut resized = Vec::new();
        for (key, target) in oversized {
            let v = &self.vips[&key];
            let (spec, service_id) = (v.spec.clone(), v.service_id);
            let mut slices = self.slices.clone();
            // No room even for a small copy: it keeps what it has.
            let Ok((slice, table, worst_imbalance)) =
                plan_slice(&spec, &id_of, self.reject_id, &mut slices, Some(target))
            else {
                continue;
            };
            self.slices = slices;
            self.maps.maglev.write(slice.offset, &table);
            let generation = self.generation();
            let cur = self.src_ranges_in_force(&key);
            let src_bank = self.write_service(service_id, slice, &spec, generation, cur)?;
            let v = self.vips.get_mut(&key).expect("listed above");
            old.push(v.slice);
            v.slice = slice;
            v.generation = generation;
            v.src_bank = src_bank;
            v.worst_imbalance = worst_imbalance;
            resized.push(spec.name);
        }
        if !old.is_empty() {
            // No packet may still read an old slice through the entry it replaced.
            rcu_grace();
            for slice in old {
                self.slices.release(slice);
            }
        }
        Ok(resized)
    }

    /// [`Dataplane::apply`] after the room is made: one round in strict mode, rounds that
    /// refuse VIPs alone in refuse-alone mode.
    fn apply_rounds(&mut self, desired: &[VipSpec]) -> Result<Rounds, Error> {
        if !self.refuse_alone {
            return self
                .apply_round(desired, None)
                .map(|r| Rounds::Done(r.expect("a round without refusals commits")));
        }
        let mut total = ApplyReport::default();
        let mut refused: BTreeMap<VipKey, RefusedVip> = BTreeMap::new();
        let mut commits = 0;
        // Plans that refuse a VIP touch nothing, and each takes at least one VIP out: at most
        // one per VIP between two commits.
        loop {
            let effective = self.without(desired, &refused);
            let mut found = Vec::new();
            let Some(report) = self.apply_round(&effective, Some(&mut found))? else {
                // An adopted VIP cannot stand for itself in the next plan (its weights are
                // unknown): the caller keeps it by a stand-in and applies again.
                let (adopted, others): (Vec<RefusedVip>, Vec<RefusedVip>) = found
                    .into_iter()
                    .partition(|r| self.vips.get(&r.key).is_some_and(|v| v.adopted));
                if !adopted.is_empty() {
                    let keys = adopted.iter().map(|r| r.key).collect();
                    return Ok(Rounds::Keep(keys, adopted, total));
                }
                for r in others {
                    refused.insert(r.key, r);
                }
                continue;
            };
            commits += 1;
            let gave_back = !report.resized.is_empty()
                || !report.removed.is_empty()
                || !report.rebuilt.is_empty();
            total.merge(report);
            if refused.is_empty() || !gave_back || commits == MAX_COMMITS {
                total.refused = refused.into_values().collect();
                return Ok(Rounds::Done(total));
            }
            // The slots given back may hold a refused VIP now.
            rcu_grace();
            refused.clear();
        }
    }

    /// `desired` without the refused VIPs: a new one left out, a programmed one as it is
    /// programmed (so the plan leaves it alone).
    fn without(&self, desired: &[VipSpec], refused: &BTreeMap<VipKey, RefusedVip>) -> Vec<VipSpec> {
        if refused.is_empty() {
            return desired.to_vec();
        }
        desired
            .iter()
            .filter_map(|spec| match refused.contains_key(&spec.key) {
                false => Some(spec.clone()),
                true => self.vips.get(&spec.key).map(|v| v.spec.clone()),
            })
            .collect()
    }
}

impl Dataplane {
    /// Refuse-alone mode: the VIPs whose port-range prefixes or source ranges do not fit in
    /// their tries while `desired` is applied (the tries hold the old and the new at once: see
    /// [`Dataplane::check_src_range_capacity`]). What is programmed counts first; then the
    /// changes of programmed VIPs, then new VIPs, by key; a VIP refused keeps what it has.
    pub(super) fn trie_refusals(&self, desired: &BTreeMap<VipKey, VipSpec>) -> Vec<RefusedVip> {
        let fam = |k: &VipKey| usize::from(k.addr.is_ipv6());
        let mut prefixes: [BTreeSet<RangePrefix>; 2] = Default::default();
        let mut sources = [0usize; 2];
        for (k, v) in &self.vips {
            prefixes[fam(k)].extend(RangePrefix::of(k));
            sources[fam(k)] += v.spec.source_ranges.as_ref().map_or(0, Vec::len);
        }
        let programmed = |k: &VipKey| self.vips.contains_key(k);
        let order = desired
            .iter()
            .filter(|(k, _)| programmed(k))
            .chain(desired.iter().filter(|(k, _)| !programmed(k)));
        let mut refused = Vec::new();
        for (key, spec) in order {
            let f = fam(key);
            let new: Vec<RangePrefix> = RangePrefix::of(key)
                .into_iter()
                .filter(|p| !prefixes[f].contains(p))
                .collect();
            let cur = self
                .vips
                .get(key)
                .and_then(|v| v.spec.source_ranges.as_ref());
            let added_sources = match &spec.source_ranges {
                Some(want) if cur != Some(want) => want.len(),
                _ => 0,
            };
            let (range_map, src_map) = [
                ("vip_range_map", "src_range_map"),
                ("vip_range_map6", "src_range_map6"),
            ][f];
            let why = if prefixes[f].len() + new.len() > abi::MAX_RANGE_PREFIXES as usize {
                format!(
                    "{range_map}: port-range VIPs need {} prefixes with this one while \
                     applying, at most {} fit",
                    prefixes[f].len() + new.len(),
                    abi::MAX_RANGE_PREFIXES
                )
            } else if sources[f] + added_sources > abi::MAX_SRC_RANGES as usize {
                format!(
                    "{src_map}: source ranges need {} prefixes with this VIP's while \
                     applying, at most {} fit",
                    sources[f] + added_sources,
                    abi::MAX_SRC_RANGES
                )
            } else {
                prefixes[f].extend(new);
                sources[f] += added_sources;
                continue;
            };
            refused.push(RefusedVip::new(spec, why));
        }
        refused
    }
}

/// Refuse-alone mode, when the backends of `desired` need more new backend IDs than
/// `available`: the VIPs whose new backends do not fit. VIPs already programmed
/// (`programmed`) are served first, then the others by key; each VIP admitted holds IDs for the
/// backends it adds (`held`: the backends that have an ID already), so a backend it shares with
/// a later VIP costs that one nothing. A VIP refused keeps what it has (the caller plans
/// without it).
pub(super) fn backend_id_refusals<'a>(
    desired: &BTreeMap<VipKey, VipSpec>,
    programmed: impl Fn(&VipKey) -> bool,
    held: impl Iterator<Item = &'a BackendKey>,
    available: u32,
) -> Vec<RefusedVip> {
    let mut held: BTreeSet<BackendKey> = held.copied().collect();
    let mut left = available as usize;
    let mut refused = Vec::new();
    let order = desired
        .iter()
        .filter(|(k, _)| programmed(k))
        .chain(desired.iter().filter(|(k, _)| !programmed(k)));
    for (_, spec) in order {
        let new: BTreeSet<BackendKey> = spec
            .backends
            .iter()
            .map(|b| b.key)
            .filter(|k| !held.contains(k))
            .collect();
        if new.len() <= left {
            left -= new.len();
            held.extend(new);
        } else {
            refused.push(RefusedVip::new(
                spec,
                format!(
                    "backends: all {} backend IDs are in use; this VIP needs {} more ({} left)",
                    rivora_abi::MAX_BACKENDS,
                    new.len(),
                    left
                ),
            ));
        }
    }
    refused
}

/// What the rounds of one apply came to.
pub(super) enum Rounds {
    /// Committed: the report (refusals included).
    Done(ApplyReport),
    /// Adopted VIPs were refused: keep them as they are (stand-ins) and apply again. With their
    /// refusals and what was committed before.
    Keep(BTreeSet<VipKey>, Vec<RefusedVip>, ApplyReport),
}

impl ApplyReport {
    /// Adds a later commit's changes to this report.
    pub(super) fn merge(&mut self, later: ApplyReport) {
        self.added.extend(later.added);
        self.removed.extend(later.removed);
        self.rebuilt.extend(later.rebuilt);
        self.renamed.extend(later.renamed);
        self.reconfigured.extend(later.reconfigured);
        self.adopted.extend(later.adopted);
        self.resized.extend(later.resized);
        self.refused.extend(later.refused);
        self.backends_added += later.backends_added;
        self.backends_removed += later.backends_removed;
        self.backends_retired += later.backends_retired;
        self.backends_revived += later.backends_revived;
        self.udp_flows_forgotten += later.udp_flows_forgotten;
    }
}

/// Whether a programmed slice of `size` slots should be sized anew for a budget target of
/// `target` ([`super::slice_budget`]): it holds more than 5/4 of its share (other VIPs need
/// the room: the budget is half the table, so slices kept within 5/4 of their shares leave at
/// least 3/8 of it free for new and rebuilt slices), or less than half of it while the table
/// has a free run of at least half (it can grow back). Between, it stays: a new size changes
/// `hash % size` for nearly every new flow, a kept one none. A VIP count growing one VIP at a
/// time moves each slice about once per 25% of growth.
pub(super) fn wants_resize(size: u32, target: Option<u32>, largest_free: u32) -> bool {
    let Some(t) = target else {
        return false;
    };
    !within_share(size, t) && (size > t || largest_free >= t / 2)
}

/// Whether a slice of `size` slots is close enough to its budget target `t` to stay: at
/// least half of it, at most 5/4 of it.
pub(super) fn within_share(size: u32, t: u32) -> bool {
    let (size, t) = (u64::from(size), u64::from(t));
    size * 2 >= t && size * 4 <= t * 5
}

/// Waits until no XDP program that began before the call still runs: XDP runs inside an RCU
/// read-side section, and `membarrier(MEMBARRIER_CMD_GLOBAL)` is `synchronize_rcu()` (with
/// one CPU no program can be running while this thread is). Where the kernel refuses it
/// (nohz_full), 20 ms, far beyond one packet's run, stand in for it.
fn rcu_grace() {
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: membarrier takes no pointers.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
    if rc != 0 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::wants_resize;

    #[test]
    fn a_slice_is_resized_only_far_from_its_share() {
        // From half to 5/4 of its share: kept.
        assert!(!wants_resize(503, Some(403), 0));
        assert!(!wants_resize(503, Some(1000), 1_000_000));
        // More than 5/4 of its share: shrunk, room or not.
        assert!(wants_resize(503, Some(401), 0));
        assert!(wants_resize(503, Some(109), 0));
        // Less than half: grown back only where a run of half the target is free.
        assert!(wants_resize(7, Some(503), 300));
        assert!(!wants_resize(7, Some(503), 200));
        // No budget (no members): nothing to size.
        assert!(!wants_resize(7, None, 1_000_000));
    }
}
