//! Refuse-alone admission: before anything is planned, the VIPs of a desired state that no
//! plan could take whatever else is asked are refused, each alone, so that one Service's or
//! Gateway's bad VIP never fails a node's whole apply (the Kubernetes source). What is checked
//! is exactly what the strict apply checks ([`super::validate`]), one VIP at a time:
//!
//! - the VIP's own rules ([`validate_vip`]: ports, mode, backends, weights, limits, at most
//!   [`abi::MAX_SRC_RANGES_PER_VIP`] source ranges);
//! - the node addresses its mode needs (an L3 DSR VIP's tunnel source, a translated one's
//!   source address);
//! - what it shares with the others: a name and a key used once, a port range disjoint from
//!   the others of its address and protocol, room in the port-range tries.
//!
//! Who keeps a shared name, key, range or trie room: VIPs programmed now first, then the
//! others by key, so a new VIP never pushes out one that is forwarding. A programmed VIP that
//! is refused stays exactly as programmed ([`Dataplane::apply_keeping`]'s stand-ins), still
//! holding its range; a new one is left out.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use rivora_abi as abi;

use super::validate::{overlap_error, validate_vip};
use super::{Dataplane, RangePrefix, RefusedVip};
use crate::model::{Mode, VipKey, VipSpec};

/// What [`Dataplane::admit`] decided.
pub(super) struct Admission<'a> {
    /// The VIPs to plan.
    pub admitted: Cow<'a, [VipSpec]>,
    /// The VIPs refused, with the reason.
    pub refused: Vec<RefusedVip>,
    /// Programmed VIPs refused: kept exactly as they are.
    pub keep: BTreeSet<VipKey>,
}

/// The names, keys, port ranges and trie prefixes taken by the VIPs admitted so far.
#[derive(Default)]
struct Taken {
    names: BTreeSet<String>,
    keys: BTreeSet<VipKey>,
    ranges: BTreeMap<(IpAddr, u8), Vec<VipSpec>>,
    prefixes: [BTreeSet<RangePrefix>; 2],
}

impl Taken {
    /// Why `spec` cannot join what is taken (None: it can).
    fn conflict(&self, spec: &VipSpec) -> Option<RefusedVip> {
        if self.keys.contains(&spec.key) {
            let why = format!("VIP {} defined twice", spec.key);
            return Some(RefusedVip::invalid(spec, why));
        }
        if self.names.contains(&spec.name) {
            let why = format!("VIP name {} used twice", spec.name);
            return Some(RefusedVip::invalid(spec, why));
        }
        if spec.key.is_exact() {
            return None;
        }
        let same_target = self.ranges.get(&(spec.key.addr, spec.key.proto));
        if let Some(other) = same_target
            .into_iter()
            .flatten()
            .find(|o| spec.key.port <= o.key.port_last && o.key.port <= spec.key.port_last)
        {
            let (earlier, later) = if other.key.port <= spec.key.port {
                (other, spec)
            } else {
                (spec, other)
            };
            let why = overlap_error(earlier, later).to_string();
            return Some(RefusedVip::invalid(spec, why));
        }
        let fam = usize::from(spec.key.addr.is_ipv6());
        let new = RangePrefix::of(&spec.key)
            .into_iter()
            .filter(|p| !self.prefixes[fam].contains(p))
            .count();
        let after = self.prefixes[fam].len() + new;
        if after > abi::MAX_RANGE_PREFIXES as usize {
            let map = ["vip_range_map", "vip_range_map6"][fam];
            let why = format!(
                "{map}: port-range VIPs need {after} prefixes with this one, at most {} fit",
                abi::MAX_RANGE_PREFIXES
            );
            return Some(RefusedVip::new(spec, why));
        }
        None
    }

    /// Takes `spec`'s key, its range and prefixes, and (unless `name` is false) its name.
    fn take(&mut self, spec: &VipSpec, name: bool) {
        self.keys.insert(spec.key);
        if name {
            self.names.insert(spec.name.clone());
        }
        if !spec.key.is_exact() {
            self.ranges
                .entry((spec.key.addr, spec.key.proto))
                .or_default()
                .push(spec.clone());
            let fam = usize::from(spec.key.addr.is_ipv6());
            self.prefixes[fam].extend(RangePrefix::of(&spec.key));
        }
    }
}

impl Dataplane {
    /// Refuse-alone mode: `desired` without the VIPs that cannot be programmed whatever else
    /// is asked (see the module documentation), their refusals, and the programmed ones among
    /// them, which stay as they are. The programmed VIPs in `keep` that `desired` does not
    /// list stay too, so they hold their key and range first. Strict mode: `desired` as it is
    /// (the apply refuses it whole if any rule is broken).
    pub(super) fn admit<'a>(
        &self,
        desired: &'a [VipSpec],
        keep: &BTreeSet<VipKey>,
    ) -> Admission<'a> {
        let mut out = Admission {
            admitted: Cow::Borrowed(desired),
            refused: Vec::new(),
            keep: BTreeSet::new(),
        };
        if !self.refuse_alone {
            return out;
        }
        let programmed = |k: &VipKey| self.vips.contains_key(k);
        let mut order: Vec<(usize, &VipSpec)> = desired.iter().enumerate().collect();
        order.sort_by_key(|(i, s)| (!programmed(&s.key), s.key, *i));
        let mut taken = Taken::default();
        let listed: BTreeSet<VipKey> = desired.iter().map(|s| s.key).collect();
        for key in keep.iter().filter(|k| !listed.contains(k)) {
            if let Some(cur) = self.vips.get(key) {
                taken.take(&cur.spec, false);
            }
        }
        let mut admitted: BTreeMap<usize, VipSpec> = BTreeMap::new();
        for (i, spec) in order {
            let problem = validate_vip(spec)
                .err()
                .map(|e| e.to_string())
                .or_else(|| self.missing_node_address(spec))
                .map(|why| RefusedVip::invalid(spec, why))
                .or_else(|| taken.conflict(spec));
            match problem {
                None => {
                    taken.take(spec, true);
                    admitted.insert(i, spec.clone());
                }
                Some(refusal) => {
                    out.refused.push(refusal);
                    // Kept as programmed: it still holds its key and range (its stand-in
                    // carries a name of its own).
                    if let Some(cur) = self.vips.get(&spec.key)
                        && !taken.keys.contains(&spec.key)
                    {
                        taken.take(&cur.spec, false);
                        out.keep.insert(spec.key);
                    }
                }
            }
        }
        if !out.refused.is_empty() {
            out.admitted = Cow::Owned(admitted.into_values().collect());
        }
        out
    }

    /// Why `spec` cannot be forwarded on this node as it is set up: an L3 DSR VIP of a family
    /// without a tunnel source (its packets could not be encapsulated), a VIP with translated
    /// backends of a family without the node's source address. None: nothing is missing.
    pub(super) fn missing_node_address(&self, spec: &VipSpec) -> Option<String> {
        let v6 = spec.key.addr.is_ipv6();
        let family = if v6 { 6 } else { 4 };
        let tunnel = if v6 {
            self.tunnel_source.1.is_some()
        } else {
            self.tunnel_source.0.is_some()
        };
        if matches!(spec.mode, Mode::DsrIpip | Mode::DsrGre) && !tunnel {
            return Some(format!(
                "VIP {}: mode {} needs an IPv{family} tunnelSource (the outer source address)",
                spec.name,
                spec.mode.as_str(),
            ));
        }
        if !spec.snat.is_empty() && !self.snat_source.has_family(v6) {
            return Some(format!(
                "VIP {}: snat: backends on other nodes need this node's IPv{family} address as \
                 their flows' source, and none is set",
                spec.name,
            ));
        }
        None
    }
}
