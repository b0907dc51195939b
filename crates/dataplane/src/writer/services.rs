//! A VIP's service entry (service_map: slice, flags, bank, affinity and SYN rate limit) and its
//! Maglev slice: how much of the table each VIP gets, which backend IDs fill it, and the plan of
//! a new slice before anything is written.

use super::*;

/// The service flags of a programmed VIP whose source ranges (if any) are
/// in `bank`.
pub(super) fn service_flags(spec: &VipSpec, bank: u32) -> u8 {
    let mut flags = abi::service_flags::ACTIVE;
    if spec.key.addr.is_ipv6() {
        flags |= abi::service_flags::IPV6;
    }
    if spec.affinity_client_ip {
        flags |= abi::service_flags::AFFINITY_CLIENT_IP;
    }
    if spec.syn_rate_limit.is_some() {
        flags |= abi::service_flags::SYN_RATE_LIMIT;
    }
    if spec.nat_fib {
        flags |= abi::service_flags::NAT_FIB;
    }
    if !spec.snat.is_empty() {
        flags |= abi::service_flags::SNAT;
    }
    if spec.source_ranges.is_some() {
        flags |= abi::service_flags::SOURCE_RANGES;
        if bank == 1 {
            flags |= abi::service_flags::SOURCE_BANK;
        }
    }
    flags
}

/// Slice-size targets for every desired VIP. Each VIP asks for Maglev's
/// preferred size (about 100 slots per backend, see rivora-maglev); when the
/// requests add up to more than half the table, all are scaled down in
/// proportion. Half, because a rebuilt slice is written into free slots
/// before the old one is released, so the table must have room for a second
/// copy of any slice.
pub(super) fn slice_budget<'a>(
    desired: impl IntoIterator<Item = &'a VipSpec>,
    table_len: u32,
) -> BTreeMap<VipKey, u32> {
    let preferred: BTreeMap<VipKey, u32> = desired
        .into_iter()
        .filter(|s| !s.backends.is_empty() || s.reject_weight > 0)
        .map(|s| (s.key, preferred_size(s)))
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

/// [`maglev::preferred_slice_size_for`] of a VIP's [`maglev_members`], from their weights
/// alone: the size depends on the count and weights only, and building the members' keys
/// (text) for every VIP of every apply cost a fifth of an apply's time at 2,000 VIPs.
fn preferred_size(spec: &VipSpec) -> u32 {
    let weights = spec
        .backends
        .iter()
        .map(|b| b.weight)
        .chain((spec.reject_weight > 0).then_some(spec.reject_weight));
    let (mut count, mut total, mut min) = (0u32, 0u64, u32::MAX);
    for w in weights {
        count += 1;
        total += u64::from(w);
        min = min.min(w);
    }
    maglev::preferred_slice_size(count, total, if count == 0 { 1 } else { min })
}

/// The Maglev key of a VIP's refused share (`VipSpec::reject_weight`): a
/// fixed pseudo key, so the slice is a pure function of the backends, their
/// weights and the refused weight, and a restarted writer builds the same
/// slots. No backend's key can equal it: a backend's is its address and
/// port (`10.0.0.1:80`, `[2001:db8::1]:80`). Part of the slice layout:
/// changing it moves every refused slot (and some of the backends').
pub const REJECT_MAGLEV_KEY: &str = "rivora:reject";

/// The members of a VIP's Maglev slice, keys and weights in the same
/// order: its backends, then the refused share's pseudo key with its
/// weight when `reject_weight` > 0 (absent otherwise, so a VIP without one
/// has exactly the slice it had before refused shares existed).
pub fn maglev_members(spec: &VipSpec) -> (Vec<String>, Vec<u32>) {
    let mut keys: Vec<String> = spec.backends.iter().map(|b| b.key.to_string()).collect();
    let mut weights: Vec<u32> = spec.backends.iter().map(|b| b.weight).collect();
    if spec.reject_weight > 0 {
        keys.push(REJECT_MAGLEV_KEY.to_string());
        weights.push(spec.reject_weight);
    }
    (keys, weights)
}

/// [`maglev_members`] as the Maglev builder takes them.
pub(super) fn maglev_backends<'a>(keys: &'a [String], weights: &[u32]) -> Vec<MaglevBackend<'a>> {
    keys.iter()
        .zip(weights)
        .map(|(k, &weight)| MaglevBackend {
            key: k.as_bytes(),
            weight,
        })
        .collect()
}

/// The backend IDs of a table of member indices ([`maglev_members`]
/// order): a backend's ID, or the pseudo-backend's for the refused share.
/// None when the table has a refused share and `reject_id` is None.
pub(super) fn member_ids(
    spec: &VipSpec,
    table: &[u32],
    id_of: &BTreeMap<BackendKey, u32>,
    reject_id: Option<u32>,
) -> Option<Vec<u32>> {
    table
        .iter()
        .map(|&i| match spec.backends.get(i as usize) {
            Some(b) => Some(id_of[&b.key]),
            None => reject_id,
        })
        .collect()
}

/// Sizes, places and fills one VIP's slice (on the planning copy).
pub(super) fn plan_slice(
    spec: &VipSpec,
    id_of: &BTreeMap<BackendKey, u32>,
    reject_id: Option<u32>,
    slices: &mut SliceAllocator,
    target: Option<u32>,
) -> Result<(Slice, Vec<u32>, f64), Error> {
    let (keys, weights) = maglev_members(spec);
    if keys.is_empty() {
        return Ok((Slice { offset: 0, size: 0 }, Vec::new(), 0.0));
    }
    let count = keys.len() as u32;
    let mb = maglev_backends(&keys, &weights);
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
    let ids = member_ids(spec, &table, id_of, reject_id)
        .expect("apply allocates the refusing pseudo-backend before planning slices");
    Ok((slice, ids, worst_imbalance))
}

/// The worst imbalance of `spec`'s table at `size` slots.
pub(super) fn imbalance_of(spec: &VipSpec, size: u32) -> f64 {
    let (keys, weights) = maglev_members(spec);
    if keys.is_empty() {
        return 0.0;
    }
    let mb = maglev_backends(&keys, &weights);
    maglev::build(&mb, size)
        .map(|t| maglev::worst_imbalance(&t, &mb))
        .unwrap_or(f64::NAN)
}

impl Dataplane {
    /// Writes a service entry (with its flags) and the service's own rate
    /// limit and source ranges: the limit before the entry that flags it, a
    /// cleared limit after the entry that no longer does; a new list of
    /// source ranges into the bank not in force before the entry that
    /// switches to it, the bank left emptied after. `cur`: the VIP's source
    /// ranges and bank in force now (None: a new VIP). Returns the bank in
    /// force after.
    pub(super) fn write_service(
        &mut self,
        service_id: u32,
        slice: Slice,
        spec: &VipSpec,
        generation: u32,
        cur: Option<(Option<Vec<SourceRange>>, u32)>,
    ) -> Result<u32, Error> {
        if spec.syn_rate_limit.is_some() {
            self.set_svc_rate_limit(service_id, spec.syn_rate_limit)?;
        }
        // Before the service entry, so a ClientIP VIP never runs without
        // the timeout it is given.
        self.set_affinity_timeout(service_id, spec.affinity_timeout)?;
        let bank = match (&spec.source_ranges, &cur) {
            (None, _) => 0,
            (Some(want), Some((Some(have), b))) if want == have => *b,
            (Some(_), Some((_, b))) => b ^ 1,
            (Some(_), None) => 0,
        };
        if let Some(want) = &spec.source_ranges {
            let want: BTreeSet<SourceRange> = want.iter().copied().collect();
            self.write_src_ranges(src_tag(service_id, bank), &want)?;
        }
        let entry = abi::Service {
            maglev_offset: slice.offset,
            maglev_size: slice.size,
            // The distinct IDs of the slice (Maglev gives every member a
            // slot), the refusing pseudo-backend included.
            backend_count: maglev_members(spec).0.len() as u16,
            mode: spec.mode.abi(),
            flags: service_flags(spec, bank) | self.kept_snat_flag(service_id, spec)?,
            generation,
        };
        self.maps
            .service_config
            .set(service_id, entry, 0)
            .map_err(|e| map_err("service_config_map", e))?;
        if spec.syn_rate_limit.is_none() {
            self.set_svc_rate_limit(service_id, None)?;
        }
        for b in [0, 1] {
            if spec.source_ranges.is_none() || b != bank {
                self.write_src_ranges(src_tag(service_id, b), &BTreeSet::new())?;
            }
        }
        Ok(bank)
    }

    /// The service SNAT flag a VIP keeps although its spec lists no backend on another node:
    /// while it had the flag and a backend flagged SNAT that it does not list (retiring, or
    /// removed from it) still exists, that backend's established flows of this VIP need the
    /// flag to keep leaving with this node's address. Costs such a VIP one array lookup per
    /// packet until its next write after those backends are released.
    pub(super) fn kept_snat_flag(&self, service_id: u32, spec: &VipSpec) -> Result<u8, Error> {
        if !spec.snat.is_empty() {
            return Ok(0);
        }
        let had = self
            .maps
            .service_config
            .get(&service_id, 0)
            .map_err(|e| map_err("service_config_map", e))?
            .flags
            & abi::service_flags::SNAT
            != 0;
        let removed_remote = self
            .backends
            .values()
            .any(|b| b.snat && !spec.backends.iter().any(|sb| sb.key == b.key));
        Ok(if had && removed_remote {
            abi::service_flags::SNAT
        } else {
            0
        })
    }

    /// Writes a ClientIP VIP's timeout (None: no timeout), in ticks at the
    /// kernel's HZ (1000 if it cannot be learnt: the longest in real time).
    pub(super) fn set_affinity_timeout(
        &mut self,
        service_id: u32,
        timeout: Option<Duration>,
    ) -> Result<(), Error> {
        let value = match timeout {
            None => abi::AffinityTimeout::default(),
            Some(d) => abi::AffinityTimeout {
                ticks: crate::jiffies::ticks_at_least(d, crate::jiffies::hz().unwrap_or(1000)),
                seconds: u32::try_from(d.as_secs()).unwrap_or(u32::MAX),
            },
        };
        self.maps
            .affinity_timeout
            .set(service_id, value, 0)
            .map_err(|e| map_err("svc_affinity_timeout_map", e))
    }

    pub(super) fn set_svc_rate_limit(
        &mut self,
        service_id: u32,
        limit: Option<RateLimit>,
    ) -> Result<(), Error> {
        self.maps
            .svc_rl_config
            .set(service_id, limit.map(RateLimit::abi).unwrap_or_default(), 0)
            .map_err(|e| map_err("svc_rl_config_map", e))
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// The weights-only size is the size of the members the slice is built from.
    #[test]
    fn the_preferred_size_from_weights_is_the_members_size() {
        let addr = |i: u8| IpAddr::V4(Ipv4Addr::new(10, 0, 0, i));
        for (weights, reject) in [
            (vec![], 0),
            (vec![], 3),
            (vec![1], 0),
            (vec![1, 1, 1], 0),
            (vec![5, 1, 200], 0),
            (vec![2, 4], 7),
            (vec![1; 40], 1),
        ] {
            let backends = weights
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let mut b = BackendSpec::new(addr(i as u8 + 1), 80);
                    b.weight = *w;
                    b
                })
                .collect();
            let mut spec = VipSpec::new("v", VipKey::exact(addr(200), 80, 6), backends);
            spec.reject_weight = reject;
            let (keys, w) = maglev_members(&spec);
            assert_eq!(
                preferred_size(&spec),
                maglev::preferred_slice_size_for(&maglev_backends(&keys, &w)),
                "{weights:?} reject {reject}"
            );
        }
    }
}
