//! What the map layouts cannot express, checked before anything is planned: each VIP's own
//! rules ([`validate_vip`]), and those between VIPs ([`validate`]: names and keys used once,
//! port ranges of one address and protocol disjoint, the range tries' capacity). Kept apart
//! from the writer so that the refuse-alone admission ([`super::admit`]) applies exactly the
//! rules the strict apply does, one VIP at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use rivora_abi as abi;

use super::RangePrefix;
use crate::Error;
use crate::model::{Mode, RateLimit, SourceRange, VipKey, VipSpec};

/// Checks what the map layouts cannot express and canonicalises backends: every VIP's own
/// rules, then those between VIPs. Any broken rule fails the whole call.
pub(super) fn validate(desired: &[VipSpec]) -> Result<BTreeMap<VipKey, VipSpec>, Error> {
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
        let canon = validate_vip(spec)?;
        if out.insert(spec.key, canon).is_some() {
            return Err(Error::Invalid(format!("VIP {} defined twice", spec.key)));
        }
    }
    let ranges: Vec<&VipSpec> = out.values().filter(|s| !s.key.is_exact()).collect();
    if let Some((a, b)) = first_overlap(&ranges) {
        return Err(overlap_error(a, b));
    }
    check_range_capacity(out.keys(), "for this configuration")?;
    Ok(out)
}

/// One VIP's own rules (ports, modes, backends, weights, limits, source ranges); returns it
/// canonical (backends sorted, source ranges canonical). Why apart: in refuse-alone mode a VIP
/// that breaks them is refused alone.
pub(super) fn validate_vip(spec: &VipSpec) -> Result<VipSpec, Error> {
    if spec.key.port > spec.key.port_last {
        return Err(Error::Invalid(format!(
            "VIP {}: port range {}-{} is reversed",
            spec.name, spec.key.port, spec.key.port_last
        )));
    }
    if spec.key.is_exact() && spec.key.port == 0 {
        return Err(Error::Invalid(format!(
            "VIP {}: port 0 is not a VIP port",
            spec.name
        )));
    }
    if let Some(l) = &spec.syn_rate_limit {
        check_rate_limit(l, &format!("VIP {}: SYN rate limit", spec.name))?;
    }
    if spec.nat_fib && spec.mode != Mode::Nat {
        return Err(Error::Invalid(format!(
            "VIP {}: NAT forwarding by FIB applies to mode nat, not {}",
            spec.name,
            spec.mode.as_str()
        )));
    }
    if spec.mode != Mode::Nat {
        for b in &spec.backends {
            // The packet keeps the VIP as its destination: the backend
            // must listen on the VIP's port.
            if b.key.port != 0 && (!spec.key.is_exact() || !spec.key.contains_port(b.key.port)) {
                return Err(Error::Invalid(format!(
                    "VIP {}: backend {} must use the VIP's port in mode {} (the packet is not rewritten)",
                    spec.name,
                    b.key,
                    spec.mode.as_str()
                )));
            }
            if spec.mode == Mode::Dsr && b.mac == [0; 6] {
                return Err(Error::Invalid(format!(
                    "VIP {}: backend {} needs a mac in mode dsr (frames are sent to it by MAC)",
                    spec.name, b.key
                )));
            }
        }
    }
    // The refused share is a member of the slice like a backend
    // (backend_count counts it); its weight follows the backends'
    // rules except that 0 means "none" instead of an error.
    if spec.backends.len() + usize::from(spec.reject_weight > 0) > u16::MAX as usize {
        return Err(Error::Invalid(format!(
            "VIP {}: too many backends",
            spec.name
        )));
    }
    let mut canon = spec.clone();
    canon.backends = spec.sorted_backends();
    if let Some(list) = &spec.source_ranges {
        canon.source_ranges = Some(check_source_ranges(spec, list)?);
    }
    if let Some(k) = spec
        .draining
        .iter()
        .find(|k| !spec.backends.iter().any(|b| b.key == **k))
    {
        return Err(Error::Invalid(format!(
            "VIP {}: draining: {k} is not one of its backends",
            spec.name
        )));
    }
    if let Some(k) = spec
        .snat
        .iter()
        .find(|k| !spec.backends.iter().any(|b| b.key == **k))
    {
        return Err(Error::Invalid(format!(
            "VIP {}: snat: {k} is not one of its backends",
            spec.name
        )));
    }
    if let Some(t) = spec.affinity_timeout {
        if !spec.affinity_client_ip {
            return Err(Error::Invalid(format!(
                "VIP {}: affinity_timeout needs sessionAffinity clientIP",
                spec.name
            )));
        }
        if t < Duration::from_secs(1) || t > Duration::from_secs(86_400) {
            return Err(Error::Invalid(format!(
                "VIP {}: affinity_timeout {}s: must be 1 to 86400 seconds",
                spec.name,
                t.as_secs_f64()
            )));
        }
    }
    if !spec.snat.is_empty() && spec.mode != Mode::Nat {
        return Err(Error::Invalid(format!(
            "VIP {}: snat: source translation is for NAT VIPs (mode {})",
            spec.name,
            spec.mode.as_str()
        )));
    }
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
        if b.key.keeps_destination_port() && spec.key.is_exact() {
            return Err(Error::Invalid(format!(
                "VIP {}: backend {} has port 0 (keep the destination port), \
                 which only a port-range VIP may use",
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
    Ok(canon)
}

/// Two ranges of one address and protocol would claim the same ports; the trie cannot say
/// which VIP a port belongs to. (An exact VIP inside a range is fine: vip_map is looked up
/// first.) Sorted by first port, ranges are disjoint exactly when each ends before the next
/// starts. Returns the first pair that overlaps (the earlier range first).
fn first_overlap<'a>(ranges: &[&'a VipSpec]) -> Option<(&'a VipSpec, &'a VipSpec)> {
    let mut by_target: BTreeMap<(IpAddr, u8), Vec<&VipSpec>> = BTreeMap::new();
    for spec in ranges.iter().filter(|s| !s.key.is_exact()) {
        by_target
            .entry((spec.key.addr, spec.key.proto))
            .or_default()
            .push(spec);
    }
    for list in by_target.values_mut() {
        list.sort_by_key(|s| s.key.port);
        for pair in list.windows(2) {
            if pair[1].key.port <= pair[0].key.port_last {
                return Some((pair[0], pair[1]));
            }
        }
    }
    None
}

/// The error for range `b` overlapping the earlier range `a`.
pub(super) fn overlap_error(a: &VipSpec, b: &VipSpec) -> Error {
    Error::Invalid(format!(
        "VIP {} ({}) overlaps VIP {} ({}): port ranges of one address and \
         protocol must not overlap",
        b.name, b.key, a.name, a.key
    ))
}

/// A VIP's source ranges checked (family, prefix length, count) and made
/// canonical: host bits cleared, sorted, duplicates dropped.
pub(super) fn check_source_ranges(
    spec: &VipSpec,
    list: &[SourceRange],
) -> Result<Vec<SourceRange>, Error> {
    let v6 = spec.key.addr.is_ipv6();
    for r in list {
        if r.addr.is_ipv6() != v6 {
            return Err(Error::Invalid(format!(
                "VIP {}: source_ranges: {r} is not of the VIP's address family (IPv{})",
                spec.name,
                if v6 { 6 } else { 4 }
            )));
        }
        if r.prefix_len > r.max_len() {
            return Err(Error::Invalid(format!(
                "VIP {}: source_ranges: {r}: the prefix length is at most {}",
                spec.name,
                r.max_len()
            )));
        }
    }
    let canon: BTreeSet<SourceRange> = list.iter().map(SourceRange::canonical).collect();
    if canon.len() > abi::MAX_SRC_RANGES_PER_VIP as usize {
        return Err(Error::Invalid(format!(
            "VIP {}: source_ranges: {} distinct ranges, at most {} per VIP",
            spec.name,
            canon.len(),
            abi::MAX_SRC_RANGES_PER_VIP
        )));
    }
    Ok(canon.into_iter().collect())
}

pub(super) fn check_rate_limit(l: &RateLimit, what: &str) -> Result<(), Error> {
    if l.rate == 0 || l.burst == 0 {
        return Err(Error::Invalid(format!(
            "{what}: rate and burst must be at least 1 (got {l})"
        )));
    }
    Ok(())
}

/// Fails when the range VIPs among `keys` need more distinct prefixes in
/// either trie than it holds.
pub(super) fn check_range_capacity<'k>(
    keys: impl Iterator<Item = &'k VipKey>,
    when: &str,
) -> Result<(), Error> {
    let mut v4 = BTreeSet::new();
    let mut v6 = BTreeSet::new();
    for key in keys.filter(|k| !k.is_exact()) {
        let set = if key.addr.is_ipv4() { &mut v4 } else { &mut v6 };
        set.extend(RangePrefix::of(key));
    }
    for (map, n) in [("vip_range_map", v4.len()), ("vip_range_map6", v6.len())] {
        if n > abi::MAX_RANGE_PREFIXES as usize {
            return Err(Error::Capacity(format!(
                "{map}: port-range VIPs need {n} prefixes {when}, at most {} fit",
                abi::MAX_RANGE_PREFIXES
            )));
        }
    }
    Ok(())
}
