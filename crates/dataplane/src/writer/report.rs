//! What an apply or an adoption did, as the daemon logs and `rivoractl` shows it: [`ApplyReport`],
//! [`AdoptReport`] and the helpers that keep their lists short.

use super::*;

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
    /// VIPs whose session affinity, SYN rate limit, FIB forwarding or
    /// source ranges changed (service entry rewritten, slice kept), or only
    /// how their replies are matched (`stateless_reverse`: the endpoint
    /// table changes) or which backends their source drains (`draining`:
    /// health states change).
    pub reconfigured: Vec<String>,
    /// Adopted VIPs whose maps already held exactly what the config asks
    /// for: kept as they were (same service ID, slice and backend IDs).
    pub adopted: Vec<String>,
    /// VIPs whose backends did not change but whose slice was sized anew to
    /// its share of the table: shrunk because more VIPs share it now, or
    /// grown back because fewer do.
    pub resized: Vec<String>,
    /// VIPs left out because they did not fit or broke a rule of their own
    /// (refuse-alone mode only, see [`Dataplane::set_refuse_alone`]): a new
    /// one is not programmed, a programmed one keeps what it had. Everything
    /// else was applied.
    pub refused: Vec<RefusedVip>,
    /// Backends that got a new ID.
    pub backends_added: usize,
    /// Backends whose ID was released.
    pub backends_removed: usize,
    /// Backends no VIP lists any more, kept draining for the retire grace.
    pub backends_retired: usize,
    /// Retiring backends listed again before their grace ran out.
    pub backends_revived: usize,
    /// UDP affinity entries deleted because their backend left the VIP
    /// (see [`Dataplane::forget_udp_flows`]).
    pub udp_flows_forgotten: usize,
}

impl ApplyReport {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        *self == ApplyReport::default()
    }
}

/// How many names of one list [`ApplyReport`]'s Display shows before
/// "and N more": with thousands of VIPs a full list made one log line (and
/// the status row built from it) over 20,000 characters.
pub const REPORT_NAMES_SHOWN: usize = 10;

/// `names` joined with commas, the first `shown` of them only, then
/// " and N more" (N with thousands separators) for the rest.
pub fn summarize_names(names: &[String], shown: usize) -> String {
    if names.len() <= shown {
        return names.join(",");
    }
    format!(
        "{} and {} more",
        names[..shown].join(","),
        thousands((names.len() - shown) as u64)
    )
}

/// `n` with a comma every three digits: 3990 -> "3,990".
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The one-line summary logged after every apply: each list shows at most
/// [`REPORT_NAMES_SHOWN`] names; the alternate form (`{:#}`) shows them all.
impl fmt::Display for ApplyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return write!(f, "no change");
        }
        let shown = if f.alternate() {
            usize::MAX
        } else {
            REPORT_NAMES_SHOWN
        };
        let mut parts = Vec::new();
        for (label, list) in [
            ("added", &self.added),
            ("removed", &self.removed),
            ("rebuilt", &self.rebuilt),
            ("renamed", &self.renamed),
            ("reconfigured", &self.reconfigured),
            ("kept from pinned maps", &self.adopted),
            ("resized", &self.resized),
        ] {
            if !list.is_empty() {
                parts.push(format!("{label} {}", summarize_names(list, shown)));
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
        if self.udp_flows_forgotten > 0 {
            parts.push(format!(
                "{} UDP flow(s) of removed backends re-balanced",
                self.udp_flows_forgotten
            ));
        }
        if !self.refused.is_empty() {
            let names: Vec<String> = self.refused.iter().map(|r| r.name.clone()).collect();
            parts.push(format!("refused {}", summarize_names(&names, shown)));
        }
        write!(f, "{}", parts.join("; "))
    }
}

/// Where the last apply's time went, phase by phase (summed over its rounds), for the daemon's
/// log and the benchmark: an apply compares the whole desired state with the maps, and these
/// say which part of that comparison grows with the number of VIPs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplyPhases {
    /// Refuse-alone admission: each VIP's own rules and the keys taken.
    pub admit: Duration,
    /// Giving oversized slices back before the plan.
    pub shrink: Duration,
    /// Validation and the plan of backends and VIPs, on copies (nothing written).
    pub plan: Duration,
    /// Backends, health, slices and service entries written.
    pub write: Duration,
    /// The VIP index rebuilt and removed VIPs cleared.
    pub index: Duration,
    /// Endpoint and backend-filter tables, forgotten flows, retired backends.
    pub endpoints: Duration,
    /// Planning rounds (refuse-alone mode plans again without what it refuses).
    pub rounds: u32,
}

impl fmt::Display for ApplyPhases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "admit {:.1} ms, shrink {:.1} ms, plan {:.1} ms, write {:.1} ms, index {:.1} ms, \
             endpoints {:.1} ms ({} round{})",
            ms(self.admit),
            ms(self.shrink),
            ms(self.plan),
            ms(self.write),
            ms(self.index),
            ms(self.endpoints),
            self.rounds,
            if self.rounds == 1 { "" } else { "s" }
        )
    }
}
