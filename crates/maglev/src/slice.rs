//! How big a VIP's slice of the shared `maglev_table` should be.
//!
//! See the crate documentation for the reasoning; in short: a backend's share
//! is quantised to whole slots, so the rounding error relative to its share is
//! about `1 / slots_it_expects`. Giving the *least*-weighted backend at least
//! [`SLOTS_PER_BACKEND`] expected slots keeps every backend within about 1%.

use crate::MaglevBackend;
use crate::prime::{prime_at_least, prime_at_most};

/// Expected slots we want the least-weighted backend of a VIP to own. Each
/// backend's slot count is its exact share rounded to a whole number (error at
/// most about one slot), so 100 slots bounds the load imbalance at about 1%,
/// the figure the Maglev paper targets with `M >= 100 N`.
pub const SLOTS_PER_BACKEND: u32 = 100;

/// Floor for [`preferred_slice_size`]. Small VIPs (one to a couple of
/// backends) would otherwise get slices like 101 or 211; a slightly larger
/// prime costs little in the 65,537-slot default table, and keeps room for a
/// backend to be added without the slice having to grow (growing changes
/// `hash % size` for every flow of the VIP).
pub const MIN_SLICE_SIZE: u32 = 251;

/// Ceiling for [`preferred_slice_size`]: the largest prime below 2^22
/// (16 MiB of `u32` slots). Without it a VIP with extreme weight ratios
/// (say 1 : 1,000,000) would ask for hundreds of millions of slots, more than
/// any sensible shared table, and computing that wish would be slow.
pub const MAX_PREFERRED_SLICE_SIZE: u32 = 4_194_301;

/// The slice size a VIP would like if the shared table had room.
///
/// Rule (all arithmetic exact, in 128 bits):
///
/// ```text
/// target    = max(MIN_SLICE_SIZE,
///                 SLOTS_PER_BACKEND * backend_count,
///                 ceil(SLOTS_PER_BACKEND * total_weight / max(min_weight, 1)))
/// preferred = smallest prime >= min(target, MAX_PREFERRED_SLICE_SIZE)
/// ```
///
/// Why `total_weight / min_weight`: the least-weighted backend expects
/// `size * min_weight / total_weight` slots, and that backend is the one whose
/// relative error (about one slot out of its share) is largest. Sizing on the
/// backend count alone would leave a weight-1 backend next to weight-10
/// backends with ~10 slots, i.e. ~10% error. With equal weights the term
/// equals `SLOTS_PER_BACKEND * backend_count`; that count term is kept anyway
/// so inconsistent inputs (e.g. a `min_weight` larger than the real one) still
/// give every backend room. The result is always prime, so it can be used
/// directly when space allows.
///
/// `min_weight` is the smallest weight among the VIP's backends (0 is treated
/// as 1); `total_weight` is the sum of all weights.
pub fn preferred_slice_size(backend_count: u32, total_weight: u64, min_weight: u32) -> u32 {
    let per = u128::from(SLOTS_PER_BACKEND);
    let by_count = per * u128::from(backend_count);
    let min_weight = u128::from(min_weight.max(1));
    let by_weight = (per * u128::from(total_weight)).div_ceil(min_weight);
    let target = by_count
        .max(by_weight)
        .max(u128::from(MIN_SLICE_SIZE))
        .min(u128::from(MAX_PREFERRED_SLICE_SIZE));
    // target <= MAX_PREFERRED_SLICE_SIZE, which is prime, so this always finds
    // a prime no larger than the cap.
    let target = u32::try_from(target).expect("capped below u32::MAX");
    prime_at_least(target).unwrap_or(MAX_PREFERRED_SLICE_SIZE)
}

/// [`preferred_slice_size`] computed from the backends themselves, so callers
/// cannot mix up which weight (minimum, not maximum) the rule needs.
pub fn preferred_slice_size_for(backends: &[MaglevBackend<'_>]) -> u32 {
    let count = u32::try_from(backends.len()).unwrap_or(u32::MAX);
    let total: u64 = backends.iter().map(|b| u64::from(b.weight)).sum();
    let min = backends.iter().map(|b| b.weight).min().unwrap_or(1);
    preferred_slice_size(count, total, min)
}

/// The slice size to actually allocate when only `available` contiguous slots
/// are free: the largest prime `<= min(preferred, available)` that is still
/// `>= backend_count` (so [`crate::build`] can give every backend a slot).
///
/// Shrinking keeps the VIP serving when the shared table is crowded (the
/// default 65,537 slots shared by up to 4,096 VIPs is ~16 slots per VIP at
/// full load), at the cost of coarser balance; the caller should report
/// [`crate::worst_imbalance`] of the resulting table when the result is below
/// `preferred`. `None` means not even `backend_count` slots fit. A
/// `backend_count` of 0 is treated as 1.
pub fn fit_slice_size(preferred: u32, backend_count: u32, available: u32) -> Option<u32> {
    let p = prime_at_most(preferred.min(available))?;
    (p >= backend_count.max(1)).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prime::is_prime;

    #[test]
    fn cap_and_floor_are_prime() {
        assert!(is_prime(MIN_SLICE_SIZE));
        assert!(is_prime(MAX_PREFERRED_SLICE_SIZE));
        assert_eq!(prime_at_most(1 << 22), Some(MAX_PREFERRED_SLICE_SIZE));
    }

    #[test]
    fn preferred_examples() {
        // Floor for tiny VIPs.
        assert_eq!(preferred_slice_size(0, 0, 0), 251);
        assert_eq!(preferred_slice_size(1, 1, 1), 251);
        assert_eq!(preferred_slice_size(2, 2, 1), 251);
        // Equal weights: 100 per backend, rounded up to a prime.
        assert_eq!(preferred_slice_size(3, 3, 1), 307);
        assert_eq!(preferred_slice_size(10, 10, 1), 1009);
        assert_eq!(preferred_slice_size(10, 50, 5), 1009);
        assert_eq!(preferred_slice_size(100, 100, 1), 10_007);
        assert_eq!(preferred_slice_size(1000, 1000, 1), 100_003);
        // Weighted: the weight-1 backend of 1,1,2 gets >= 100 slots.
        assert_eq!(preferred_slice_size(3, 4, 1), 401);
        // 1..=5: total 15, min 1.
        assert_eq!(preferred_slice_size(5, 15, 1), 1511);
        // Count term dominates if min_weight is overstated.
        assert_eq!(preferred_slice_size(10, 10, 1000), 1009);
        // Extreme ratios and huge inputs are capped, never overflow.
        assert_eq!(
            preferred_slice_size(2, 1_000_001, 1),
            MAX_PREFERRED_SLICE_SIZE
        );
        assert_eq!(
            preferred_slice_size(u32::MAX, u64::MAX, 1),
            MAX_PREFERRED_SLICE_SIZE
        );
    }

    #[test]
    fn preferred_for_backends() {
        let keys = [b"a".as_slice(), b"b", b"c"];
        let weights = [2, 1, 1];
        let backends: Vec<_> = keys
            .iter()
            .zip(weights)
            .map(|(k, w)| MaglevBackend { key: k, weight: w })
            .collect();
        assert_eq!(preferred_slice_size_for(&backends), 401);
    }

    #[test]
    fn fit_examples() {
        assert_eq!(fit_slice_size(1009, 10, 65_537), Some(1009));
        assert_eq!(fit_slice_size(1009, 10, 1000), Some(997));
        assert_eq!(fit_slice_size(1009, 10, 16), Some(13));
        assert_eq!(fit_slice_size(1009, 10, 11), Some(11));
        assert_eq!(fit_slice_size(1009, 10, 10), None);
        assert_eq!(fit_slice_size(1009, 14, 16), None);
        assert_eq!(fit_slice_size(251, 1, 2), Some(2));
        assert_eq!(fit_slice_size(251, 1, 1), None);
        assert_eq!(fit_slice_size(251, 0, 3), Some(3));
        assert_eq!(fit_slice_size(0, 0, 100), None);
    }
}
