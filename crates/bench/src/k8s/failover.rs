//! 5d. Failovers, each beside the budget the docs state: controller leader loss to the first
//! status the new leader writes ([`leader`]), L2 holder loss to the first ARP and NA answered
//! by the new holder ([`l2`]), last ready endpoint gone to the BGP withdraw seen by BIRD
//! ([`bgp`]). One table; a failover that could not be measured is a row saying why, and the
//! others still run.

mod bgp;
mod l2;
mod leader;

use anyhow::Result;

use super::harness::Ctx;
use crate::report::{Row, Section};

/// The table's title.
pub const TITLE: &str = "5d. Kubernetes: failovers";

/// What one failover measurement adds to the table.
#[derive(Debug, Default)]
pub struct Measured {
    /// Its rows (the figure against the documented budget).
    pub rows: Vec<Row>,
    /// A paragraph for the method text: what was done and how it was timed.
    pub method: String,
    /// Notes under the table (a missed budget: by how much and why).
    pub notes: Vec<String>,
}

/// Runs 5d.
pub async fn run(ctx: &Ctx) -> Result<Section> {
    let mut sec = Section {
        title: TITLE.into(),
        ratio_label: "vs budget".into(),
        ..Default::default()
    };
    let results = [
        ("controller leader loss", leader::run(ctx).await),
        ("L2 holder loss", l2::run(ctx).await),
        ("last ready endpoint to BGP withdraw", bgp::run(ctx).await),
    ];
    for (what, result) in results {
        match result {
            Ok(m) => {
                sec.rows.extend(m.rows);
                if !sec.method.is_empty() {
                    sec.method.push_str("\n\n");
                }
                sec.method.push_str(&m.method);
                sec.notes.extend(m.notes);
            }
            Err(e) => sec.rows.push(
                Row::info(what, "-")
                    .not_run()
                    .evidence(crate::util::short_error(&e)),
            ),
        }
    }
    Ok(sec)
}
