//! The human output of `rivora status`: a header, one table per section, then the problems.

use comfy_table::presets::ASCII_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table};
use rivora_k8s_api::AddressCounts;

use super::report::Report;

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(ASCII_FULL_CONDENSED);
    t.set_content_arrangement(ContentArrangement::Dynamic);
    t.set_width(120);
    t.set_header(header.to_vec());
    t
}

fn counts(c: &Option<AddressCounts>) -> String {
    match c {
        Some(c) => format!("{}/{}", c.used, c.total),
        None => "-".into(),
    }
}

impl Report {
    /// The human tables: header (chart version, namespace), Components, Controller leader,
    /// Nodes, Pools, Unaddressed, then Problems (or "everything is healthy").
    pub fn render_table(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "Rivora {} in namespace {}\n",
            self.chart_version
                .as_deref()
                .map(|v| format!("chart {v}"))
                .unwrap_or_else(|| "(chart version unknown: no release record)".into()),
            self.namespace
        ));
        out.push_str(&format!(
            "Services of ours: {}, Gateways of ours: {}\n",
            self.services
                .map(|n| n.to_string())
                .unwrap_or_else(|| "unknown".into()),
            self.gateways
                .map(|n| n.to_string())
                .unwrap_or_else(|| "not checked".into()),
        ));

        let mut t = table(&["Kind", "Name", "Desired", "Ready", "Updated", "Available"]);
        for c in &self.components {
            if c.present {
                t.add_row(vec![
                    c.kind.clone(),
                    c.name.clone(),
                    c.desired.to_string(),
                    c.ready.to_string(),
                    c.updated.to_string(),
                    c.available.to_string(),
                ]);
            } else {
                t.add_row(vec![
                    c.kind.clone(),
                    c.name.clone(),
                    "missing".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]);
            }
        }
        out.push_str(&format!("\nComponents\n{t}\n"));

        let l = &self.leader;
        let mut t = table(&["Holder", "Renewed", "Expires", "State"]);
        let state = if !l.lease_present {
            "no Lease"
        } else if l.holder.is_none() {
            "no holder"
        } else if l.expired {
            "expired"
        } else {
            "leading"
        };
        t.add_row(vec![
            l.holder.clone().unwrap_or_else(|| "-".into()),
            l.renewed.clone().unwrap_or_else(|| "-".into()),
            l.expires.clone().unwrap_or_else(|| "-".into()),
            state.into(),
        ]);
        out.push_str(&format!("\nController leader\n{t}\n"));

        let mut t = table(&[
            "Node", "Report", "Datapath", "XDP mode", "VIPs", "Announce", "Errors",
        ]);
        for n in &self.nodes {
            let report = if !n.reported {
                "missing".to_string()
            } else if n.stale {
                format!("stale ({}s)", n.heartbeat_age_secs.unwrap_or_default())
            } else {
                match n.heartbeat_age_secs {
                    Some(a) => format!("ok ({a}s)"),
                    None => "ok".into(),
                }
            };
            let datapath = if !n.reported {
                "-".to_string()
            } else if n.datapath_attached {
                format!("attached ({})", n.interface.as_deref().unwrap_or("?"))
            } else {
                "NOT attached".into()
            };
            t.add_row(vec![
                n.name.clone(),
                report,
                datapath,
                n.xdp_mode.clone().unwrap_or_else(|| "-".into()),
                if n.reported {
                    n.vips.to_string()
                } else {
                    "-".into()
                },
                n.announce(),
                if n.errors.is_empty() {
                    "-".into()
                } else {
                    n.errors.join("\n")
                },
            ]);
        }
        out.push_str(&format!("\nNodes\n{t}\n"));

        let mut t = table(&["Pool", "IPv4 used/total", "IPv6 used/total", "State"]);
        for p in &self.pools {
            let mut state = Vec::new();
            if p.exhausted {
                state.push("exhausted");
            } else {
                // A dual-stack pool out of one family still refuses everyone who wants it.
                if p.ipv4_exhausted {
                    state.push("IPv4 exhausted");
                }
                if p.ipv6_exhausted {
                    state.push("IPv6 exhausted");
                }
            }
            if !p.valid {
                state.push("invalid");
            }
            if p.overlapping {
                state.push("overlapping");
            }
            if p.disabled {
                state.push("disabled");
            }
            if !p.counted {
                state.push("not counted yet");
            }
            if state.is_empty() {
                state.push("ok");
            }
            t.add_row(vec![
                p.name.clone(),
                counts(&p.ipv4),
                counts(&p.ipv6),
                state.join(", "),
            ]);
        }
        out.push_str(&format!("\nPools\n{t}\n"));

        if self.unaddressed.is_empty() {
            out.push_str(
                "\nUnaddressed: none (every Service and Gateway of ours has an address)\n",
            );
        } else {
            let mut t = table(&["Kind", "Namespace/Name", "Reason"]);
            for u in &self.unaddressed {
                t.add_row(vec![
                    u.kind.clone(),
                    format!("{}/{}", u.namespace, u.name),
                    u.reason.clone(),
                ]);
            }
            out.push_str(&format!("\nUnaddressed\n{t}\n"));
        }

        if !self.notes.is_empty() {
            out.push_str("\nNotes\n");
            for n in &self.notes {
                out.push_str(&format!("  - {n}\n"));
            }
        }
        if self.problems.is_empty() {
            out.push_str("\neverything is healthy\n");
        } else {
            out.push_str(&format!("\nProblems ({})\n", self.problems.len()));
            for p in &self.problems {
                out.push_str(&format!("  - {p}\n"));
            }
        }
        out
    }
}
