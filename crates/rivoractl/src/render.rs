//! Turning API answers into text: ASCII tables for humans, pretty JSON for
//! scripts.
//!
//! Kept free of I/O and of the clock (callers pass `now`) so every table can
//! be unit-tested for its exact cells.
//!
//! One module per command or concern, the views main.rs calls re-exported
//! here (`render::stats(..)`, `render::bgp(..)`): `format` (units,
//! times, addresses and the table helpers every view uses), `status`,
//! `vips`, `backends` (with `drain` and `undrain`), `announce` (`bgp` and
//! `speaker`), `stats`, `watch` and `classifier` (`rules`, `groups` and the
//! classifier's part of `vips` and `status`). What the views share (the
//! placeholder for absent values, the flow-table warning level, the row
//! limits) and `json` stay in this file.

mod announce;
mod backends;
mod classifier;
mod format;
mod stats;
mod status;
#[cfg(test)]
mod test_support;
mod vips;
mod watch;

use serde::Serialize;

pub use announce::{bgp, speaker};
pub use backends::{backends, drain_result};
pub use classifier::{ClassifierView, classifier_row, groups, rules, vips_with_classifier};
pub use stats::stats;
#[cfg(test)]
pub use status::status;
pub use status::status_with;
pub use watch::watch;

/// Placeholder for absent values, so empty cells are never ambiguous.
const NONE: &str = "-";

/// Flow-table fill level (percent) from which a table is flagged: an LRU
/// table that fills up evicts live flows, so it is worth noticing before.
const FULL_WARN_PCT: u64 = 90;

/// Backend rows `rivoractl stats` shows at most; the rest are summed up in
/// one line (all of them: `rivoractl backends`, `-o json`).
pub const STATS_BACKEND_ROWS: usize = 50;

/// Backend rows `rivoractl watch` shows at most (a screen).
pub const WATCH_BACKEND_ROWS: usize = 20;

/// Pretty JSON of any API answer, newline-terminated.
pub fn json<T: Serialize + ?Sized>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).expect("API types always serialize");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::test_support::sample_vips;
    use rivora_api::VipInfo;

    #[test]
    fn json_is_pretty_dto() {
        let v = sample_vips();
        let out = json(&v);
        assert!(out.starts_with("[\n  {\n    \"name\": \"web\""));
        assert!(out.ends_with("]\n"));
        let back: Vec<VipInfo> = serde_json::from_str(&out).unwrap();
        assert_eq!(back, v);
    }
}
