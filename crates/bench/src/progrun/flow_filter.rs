//! Part 1's one control-plane row: the rebuild of the flow filter over the
//! table the `table full` new-flow rows left. Separate because it times the
//! control plane's code with the clock, not a program under
//! BPF_PROG_TEST_RUN.

use anyhow::{Result, anyhow};

use super::harness::Rig;
use crate::report::Row;
use crate::stats::{fmt_count, median};

/// The control plane's rebuild of the flow filter (flow_filter.rs) over
/// the table the `table full` rows left: its duration (median of 5) and
/// what it read and kept.
pub(super) fn flow_filter_rebuild_row(rig: &mut Rig) -> Result<Row> {
    let mut took = Vec::new();
    let mut last = None;
    for _ in 0..5 {
        let r = rig.dp.rebuild_flow_filter().map_err(|e| anyhow!("{e}"))?;
        took.push(r.took.as_secs_f64() * 1000.0);
        last = Some(r);
    }
    let r = last.expect("five rebuilds");
    let st = rig.dp.flow_filter_status();
    Ok(Row::info(
        "Control plane: flow filter rebuild, table full of established flows",
        format!("{:.1} ms", median(&took)),
    )
    .evidence(format!(
        "median of 5 rebuilds (batched walk of connection_affinity_map(6), clear and refill of one half of {} bits, switch): {} keys read, {} bits set after (was {}), exact {}; runs {:.1}-{:.1} ms",
        fmt_count(st.bits as f64),
        fmt_count(r.keys as f64),
        fmt_count(r.ones as f64),
        fmt_count(r.ones_before as f64),
        st.exact,
        took.iter().cloned().fold(f64::INFINITY, f64::min),
        took.iter().cloned().fold(0.0, f64::max),
    )))
}
