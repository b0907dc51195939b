//! AddressPool status from the allocator's [`PoolReport`] (pure): the conditions `Valid`,
//! `Overlapping` and `Exhausted`, and the counts per family.
//!
//! Why apart from the write ([`crate::run`]): what a pool says about itself is what operators
//! and `rivora status` read when Services get no address, so each case is proven by a unit test.

use rivora_k8s_api::AddressCounts;
use rivora_k8s_api::address_pool::condition as pc;

use crate::ipam::PoolReport;
use crate::ipam::blocks::Family;

/// One condition as it should be (the caller adds the generation and transition time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolCondition {
    /// `Valid`, `Overlapping` or `Exhausted`.
    pub type_: &'static str,
    /// True or False.
    pub on: bool,
    /// Machine-readable reason.
    pub reason: String,
    /// What it means, naming the blocks, the other pool or the family.
    pub message: String,
}

fn cond(type_: &'static str, on: bool, reason: &str, message: String) -> PoolCondition {
    PoolCondition {
        type_,
        on,
        reason: reason.into(),
        message,
    }
}

/// The three conditions of a pool.
///
/// `Exhausted` is True only when no address of any family is left (as the CRD documents); a
/// dual-stack pool out of one family says so with `Exhausted=False`, reason `IPv4Exhausted`
/// or `IPv6Exhausted`, since every claimant wanting that family is refused while the other
/// half is free.
pub fn conditions(r: &PoolReport) -> [PoolCondition; 3] {
    let valid = match &r.invalid {
        Some(e) => cond(pc::VALID, false, "InvalidAddresses", e.clone()),
        None => cond(
            pc::VALID,
            true,
            "Valid",
            "every address block is usable".into(),
        ),
    };
    let overlapping = match &r.overlaps {
        Some(o) => cond(
            pc::OVERLAPPING,
            true,
            "OverlapsOlderPool",
            format!(
                "shares addresses with the older AddressPool {o}; nothing is assigned from this one"
            ),
        ),
        None => cond(
            pc::OVERLAPPING,
            false,
            "NoOverlap",
            "no other pool shares its addresses".into(),
        ),
    };
    let out = r.exhausted_families();
    let exhausted = if r.exhausted() {
        cond(
            pc::EXHAUSTED,
            true,
            "NoFreeAddress",
            "every address is assigned".into(),
        )
    } else if let &[fam] = out.as_slice() {
        let other = match fam {
            Family::V4 => Family::V6,
            Family::V6 => Family::V4,
        };
        cond(
            pc::EXHAUSTED,
            false,
            &format!("{fam}Exhausted"),
            format!(
                "every {fam} address is assigned ({} {other} left): Services and Gateways that \
                 want {fam} get none from this pool",
                r.available(other)
            ),
        )
    } else {
        cond(
            pc::EXHAUSTED,
            false,
            "FreeAddresses",
            "addresses are left".into(),
        )
    };
    [valid, overlapping, exhausted]
}

/// The counts of `family` (None: the pool has no block of it), saturating at 2^63-1.
pub fn counts(r: &PoolReport, family: Family) -> Option<AddressCounts> {
    let sat = |n: u128| i64::try_from(n).unwrap_or(i64::MAX);
    r.total.get(&family).map(|t| AddressCounts {
        total: sat(*t),
        used: sat(r.used.get(&family).copied().unwrap_or(0)),
        available: sat(r.available(family)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::{ClaimKind, ClaimView, FamilyPolicy, PoolView, allocate};

    fn pool(addresses: &[&str]) -> PoolView {
        PoolView {
            name: "p".into(),
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
            auto_assign: true,
            avoid_buggy_ips: false,
            service_selector: None,
            namespace_selector: None,
            priority: 0,
            disabled: false,
            created: "2026-01-01T00:00:00Z".into(),
        }
    }

    fn services(n: usize, fam: Family) -> Vec<ClaimView> {
        (0..n)
            .map(|i| ClaimView {
                kind: ClaimKind::Service,
                namespace: "ns".into(),
                name: format!("s{i}"),
                labels: Default::default(),
                namespace_labels: Default::default(),
                families: vec![fam],
                family_policy: FamilyPolicy::SingleStack,
                requested: Vec::new(),
                requested_pool: None,
                current: Vec::new(),
                unsupported: None,
                sharing: None,
            })
            .collect()
    }

    #[test]
    fn a_dual_stack_pool_out_of_ipv4_says_so() {
        let out = allocate(
            &[pool(&["10.0.0.0/31", "fd00::/126"])],
            &services(3, Family::V4),
        );
        let r = &out.pools["p"];
        let [valid, _, exhausted] = conditions(r);
        assert!(valid.on);
        assert!(!exhausted.on, "IPv6 is left: {exhausted:?}");
        assert_eq!(exhausted.reason, "IPv4Exhausted");
        assert!(
            exhausted
                .message
                .contains("every IPv4 address is assigned (4 IPv6 left)"),
            "{}",
            exhausted.message
        );
        let v4 = counts(r, Family::V4).unwrap();
        assert_eq!((v4.total, v4.used, v4.available), (2, 2, 0));
    }

    #[test]
    fn overlapping_ranges_of_one_pool_are_invalid_and_counted_once() {
        let out = allocate(
            &[pool(&["fd00::1-fd00::20", "fd00::15-fd00::21"])],
            &services(1, Family::V6),
        );
        let r = &out.pools["p"];
        let [valid, ..] = conditions(r);
        assert!(!valid.on);
        assert_eq!(valid.reason, "InvalidAddresses");
        assert!(valid.message.contains("overlap"), "{}", valid.message);
        let v6 = counts(r, Family::V6).unwrap();
        assert_eq!((v6.total, v6.used, v6.available), (33, 0, 33));
    }

    #[test]
    fn a_pool_with_nothing_left_is_exhausted() {
        let out = allocate(&[pool(&["10.0.0.0/31"])], &services(2, Family::V4));
        let [_, _, exhausted] = conditions(&out.pools["p"]);
        assert!(exhausted.on);
        assert_eq!(exhausted.reason, "NoFreeAddress");
    }
}
