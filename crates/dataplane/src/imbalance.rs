//! One warning per apply when the shared Maglev table is too small for the
//! VIPs it holds.
//!
//! Slices shrink in proportion when the VIPs' preferred sizes exceed half
//! the table (docs/maglev.md), and a slice of a few slots per backend
//! balances coarsely: 4,000 VIPs of 2 backends in the default 65,537-slot
//! table get 7 slots each (half the table split 4,000 ways), 4 and 3 per
//! backend: 14.3% worst imbalance. `rivoractl vips`
//! shows it per VIP, but nobody reads 4,000 rows, so rivorad logs one line
//! that counts the VIPs over a threshold and names the table size that
//! would give them their preferred slices.

use std::fmt;

use rivora_maglev::{preferred_slice_size, prime_at_least};

use crate::writer::thousands;

/// Worst imbalance (0.05 = 5%) above which a VIP counts towards the
/// warning. The slice rule aims at about 1%; 5% is a spread an operator
/// notices on a dashboard, and well above the rounding noise of slices
/// near their preferred size.
pub const IMBALANCE_WARN_THRESHOLD: f64 = 0.05;

/// What the warning needs to know about one programmed VIP.
#[derive(Clone, Debug, PartialEq)]
pub struct VipBalance {
    /// VIP name.
    pub name: String,
    /// Its worst imbalance (0.01 = 1%); NaN when unknown.
    pub worst_imbalance: f64,
    /// Its slice size now.
    pub slots: u32,
    /// The slice size it asks for when the table has room
    /// ([`preferred_slice_size`]).
    pub preferred_slots: u32,
}

impl VipBalance {
    /// From a VIP's backend weights, so callers cannot get the preferred
    /// size rule wrong.
    pub fn new(name: &str, worst_imbalance: f64, slots: u32, weights: &[u32]) -> Self {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let min = weights.iter().copied().min().unwrap_or(1);
        VipBalance {
            name: name.to_string(),
            worst_imbalance,
            slots,
            preferred_slots: preferred_slice_size(weights.len() as u32, total, min),
        }
    }
}

/// The warning: how many VIPs are over the threshold and the fix.
#[derive(Clone, Debug, PartialEq)]
pub struct ImbalanceWarning {
    /// VIPs over the threshold.
    pub over: usize,
    /// VIPs with backends.
    pub total: usize,
    /// The threshold (0.05 = 5%).
    pub threshold: f64,
    /// The worst VIP and its imbalance.
    pub worst: (String, f64),
    /// Average slice size of the VIPs over the threshold.
    pub average_slots: u32,
    /// The current table length.
    pub table_len: u32,
    /// The smallest prime table length that fits every VIP's preferred
    /// slice twice over (the allocator keeps half the table free for
    /// rebuilds); None if it does not fit in 32 bits.
    pub suggested_table_len: Option<u32>,
}

/// The warning for `vips` in a table of `table_len` slots, or None when no
/// VIP's worst imbalance exceeds `threshold`. VIPs without backends (no
/// slice) and with an unknown imbalance are left out.
pub fn imbalance_warning(
    vips: &[VipBalance],
    table_len: u32,
    threshold: f64,
) -> Option<ImbalanceWarning> {
    let sliced: Vec<&VipBalance> = vips
        .iter()
        .filter(|v| v.slots > 0 && v.worst_imbalance.is_finite())
        .collect();
    let over: Vec<&&VipBalance> = sliced
        .iter()
        .filter(|v| v.worst_imbalance > threshold)
        .collect();
    let worst = over
        .iter()
        .max_by(|a, b| a.worst_imbalance.total_cmp(&b.worst_imbalance))?;
    let slots: u64 = over.iter().map(|v| u64::from(v.slots)).sum();
    let preferred: u64 = sliced.iter().map(|v| u64::from(v.preferred_slots)).sum();
    let suggested_table_len = u32::try_from(preferred * 2)
        .ok()
        .and_then(prime_at_least)
        .map(|p| p.max(table_len));
    Some(ImbalanceWarning {
        over: over.len(),
        total: sliced.len(),
        threshold,
        worst: (worst.name.clone(), worst.worst_imbalance),
        average_slots: (slots / over.len() as u64) as u32,
        table_len,
        suggested_table_len,
    })
}

impl fmt::Display for ImbalanceWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Maglev: {} of {} VIPs have a worst imbalance above {:.0}% (worst {:.1}%, VIP {}): \
             the {}-slot table leaves them about {} slots each (see rivoractl vips, IMBALANCE)",
            thousands(self.over as u64),
            thousands(self.total as u64),
            self.threshold * 100.0,
            self.worst.1 * 100.0,
            self.worst.0,
            thousands(u64::from(self.table_len)),
            thousands(u64::from(self.average_slots)),
        )?;
        match self.suggested_table_len {
            Some(p) if p > self.table_len => write!(
                f,
                "; restart rivorad with --maglev-table-size {p} (a prime) or larger so every VIP \
                 gets its preferred slice (docs/maglev.md: slice-size rule)"
            ),
            _ => write!(
                f,
                "; a larger --maglev-table-size (a prime) gives them more slots (docs/maglev.md: \
                 slice-size rule)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vip(name: &str, imbalance: f64, slots: u32, backends: usize) -> VipBalance {
        VipBalance::new(name, imbalance, slots, &vec![1; backends])
    }

    #[test]
    fn no_warning_when_every_vip_is_within_the_threshold() {
        let vips = vec![vip("a", 0.01, 701, 7), vip("b", 0.05, 307, 3)];
        assert_eq!(imbalance_warning(&vips, 65537, 0.05), None);
        // Empty VIPs and unknown imbalances never warn.
        let vips = vec![vip("e", 1.0, 0, 0), vip("n", f64::NAN, 17, 7)];
        assert_eq!(imbalance_warning(&vips, 65537, 0.05), None);
    }

    #[test]
    fn one_warning_counts_the_vips_and_names_a_table_size_that_fits() {
        // 4,000 VIPs of 2 backends in the default table: 7 slots, 14.3%.
        let mut vips: Vec<VipBalance> = (0..4000)
            .map(|i| vip(&format!("v{i}"), 1.0 / 7.0, 7, 2))
            .collect();
        vips[17].worst_imbalance = 0.2;
        let w = imbalance_warning(&vips, 65537, IMBALANCE_WARN_THRESHOLD).unwrap();
        assert_eq!((w.over, w.total, w.average_slots), (4000, 4000, 7));
        assert_eq!(w.worst, ("v17".to_string(), 0.2));
        // Preferred: 2 backends -> 251 slots; twice 4,000 x 251 = 2,008,000.
        assert_eq!(vips[0].preferred_slots, 251);
        let p = w.suggested_table_len.unwrap();
        assert!(rivora_maglev::is_prime(p) && p >= 2_008_000, "{p}");
        assert_eq!(prime_at_least(2_008_000), Some(p));
        assert_eq!(
            w.to_string(),
            format!(
                "Maglev: 4,000 of 4,000 VIPs have a worst imbalance above 5% (worst 20.0%, VIP \
                 v17): the 65,537-slot table leaves them about 7 slots each (see rivoractl \
                 vips, IMBALANCE); restart rivorad with --maglev-table-size {p} (a prime) or \
                 larger so every VIP gets its preferred slice (docs/maglev.md: slice-size rule)"
            )
        );
    }

    #[test]
    fn counts_only_the_vips_over_the_threshold() {
        let vips = vec![
            vip("fine", 0.004, 701, 7),
            vip("coarse", 0.08, 101, 7),
            vip("empty", 0.0, 0, 0),
        ];
        let w = imbalance_warning(&vips, 65537, 0.05).unwrap();
        assert_eq!((w.over, w.total), (1, 2));
        assert!(w.to_string().starts_with("Maglev: 1 of 2 VIPs"), "{w}");
    }
}
