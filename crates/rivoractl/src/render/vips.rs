//! `rivoractl vips`: the VIP table, then every VIP's backends as
//! configured, with origin and target columns when Kubernetes sets them.
//!
//! Separate from `backends` (one row per backend, with counters and
//! probes): this view is per VIP.

use rivora_api::VipInfo;

use super::NONE;
use super::format::{backend_endpoint, finish, frontend, right_align, table};

/// What a Kubernetes backend is: `Pod NS/NAME @ NODE`, `(terminating)` when
/// it is, `(source: this node)` when its flows are source-translated (it
/// runs on another node and sees this node's address, not the client's).
fn backend_target(b: &rivora_api::VipBackend) -> String {
    let mut out = match (&b.target, &b.node) {
        (Some(t), Some(n)) => format!("{t} @ {n}"),
        (Some(t), None) => t.clone(),
        (None, Some(n)) => format!("@ {n}"),
        (None, None) => NONE.to_string(),
    };
    if b.terminating {
        out.push_str(" (terminating)");
    }
    if b.snat {
        out.push_str(" (source: this node)");
    }
    out
}

/// The BACKENDS cell: how many, and the refused share of new flows when there is one
/// (`2, refuses 3/5`: weight 3 of a total 5 is reset or dropped).
fn backend_count(v: &VipInfo) -> String {
    if v.reject_weight == 0 {
        return v.backends.len().to_string();
    }
    let total: u64 =
        v.backends.iter().map(|b| u64::from(b.weight)).sum::<u64>() + u64::from(v.reject_weight);
    format!("{}, refuses {}/{total}", v.backends.len(), v.reject_weight)
}

/// `rivoractl vips`: a VIP table, then a table of every VIP's backends.
pub fn vips(vips: &[VipInfo]) -> String {
    if vips.is_empty() {
        return "No VIPs configured.\n".into();
    }
    let mut t = table();
    // Kubernetes VIPs say where they come from; a file's VIPs have no such
    // column (their name is the handle).
    let show_origin = vips.iter().any(|v| v.origin.is_some());
    let mut header = vec![
        "VIP",
        "FRONTEND",
        "MODE",
        "AFFINITY",
        "SYN LIMIT",
        "SERVICE ID",
        "BACKENDS",
        "MAGLEV SLICE",
        "IMBALANCE",
    ];
    if show_origin {
        header.push("ORIGIN");
    }
    t.set_header(header);
    let or_none = |s: &str| {
        if s.is_empty() {
            NONE.to_string()
        } else {
            s.to_string()
        }
    };
    for v in vips {
        let mut row = vec![
            v.name.clone(),
            frontend(&v.address, v.port, v.port_last, &v.protocol),
            if v.nat_forwarding == "fib" {
                format!("{} (fib)", v.mode)
            } else {
                v.mode.clone()
            },
            or_none(&v.session_affinity),
            or_none(&v.syn_rate_limit),
            v.service_id.to_string(),
            backend_count(v),
            format!("{}+{}", v.maglev_offset, v.maglev_size),
            format!("{:.2}%", v.worst_imbalance_pct),
        ];
        if show_origin {
            row.push(v.origin.clone().unwrap_or_else(|| NONE.to_string()));
        }
        t.add_row(row);
    }
    right_align(&mut t, &[5, 6, 8]);

    let mut b = table();
    let show_target = vips
        .iter()
        .flat_map(|v| &v.backends)
        .any(|b| b.target.is_some() || b.node.is_some() || b.terminating || b.snat);
    let mut header = vec!["VIP", "BACKEND", "WEIGHT", "BACKEND ID", "STATE"];
    if show_target {
        header.push("TARGET");
    }
    b.set_header(header);
    for v in vips {
        if v.backends.is_empty() {
            let mut row = vec![v.name.as_str(), "(no backends)", NONE, NONE, NONE];
            if show_target {
                row.push(NONE);
            }
            b.add_row(row);
        }
        for be in &v.backends {
            let mut row = vec![
                v.name.clone(),
                backend_endpoint(&be.address, be.port),
                be.weight.to_string(),
                be.backend_id.to_string(),
                be.state.clone(),
            ];
            if show_target {
                row.push(backend_target(be));
            }
            b.add_row(row);
        }
    }
    right_align(&mut b, &[2, 3]);

    let mut out = finish(t);
    out.push_str("\nBackends per VIP:\n");
    out.push_str(&finish(b));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::test_support::{row, rows, sample_vips};

    #[test]
    fn vips_tables_show_fib_forwarding_in_the_mode() {
        let mut list = sample_vips();
        list[0].mode = "nat".into();
        list[0].nat_forwarding = "fib".into();
        list[1].mode = "nat".into();
        let out = vips(&list);
        assert_eq!(rows(&out, "web")[0][2], "nat (fib)");
        assert_eq!(rows(&out, "dns6")[0][2], "nat", "kernel: the plain mode");
    }

    #[test]
    fn kubernetes_vips_show_their_service_and_each_backends_pod_and_node() {
        let mut list = sample_vips();
        assert!(
            !vips(&list).contains("ORIGIN"),
            "file VIPs have no origin column"
        );
        list[0].origin = Some("service shop/web port http".into());
        list[0].backends[0].target = Some("Pod shop/web-1".into());
        list[0].backends[0].node = Some("n1".into());
        list[0].backends[1].terminating = true;
        list[0].backends[1].snat = true;
        let out = vips(&list);
        println!("{out}");
        let web = rows(&out, "web");
        assert_eq!(web[0][9], "service shop/web port http");
        assert_eq!(rows(&out, "dns6")[0][9], "-");
        assert_eq!(web[1][5], "Pod shop/web-1 @ n1");
        assert_eq!(web[2][5], "- (terminating) (source: this node)");
    }

    #[test]
    fn vips_tables() {
        let out = vips(&sample_vips());
        println!("{out}");
        assert_eq!(
            row(&out, "VIP"),
            [
                "VIP",
                "FRONTEND",
                "MODE",
                "AFFINITY",
                "SYN LIMIT",
                "SERVICE ID",
                "BACKENDS",
                "MAGLEV SLICE",
                "IMBALANCE"
            ]
        );
        let web = rows(&out, "web");
        assert_eq!(
            web[0],
            [
                "web",
                "10.0.0.10:80/tcp",
                "ipip",
                "clientIP",
                "100/s burst 200",
                "1",
                "2",
                "0+65537",
                "0.37%"
            ]
        );
        assert_eq!(web[1], ["web", "192.168.1.10:8080", "100", "1", "healthy"]);
        assert_eq!(web[2], ["web", "192.168.1.11:8080", "50", "2", "draining"]);
        let dns = rows(&out, "dns6");
        assert_eq!(
            dns[0],
            [
                "dns6",
                "[2001:db8::53]:any/udp",
                "dsr",
                "none",
                "none",
                "2",
                "1",
                "65537+251",
                "12.50%"
            ]
        );
        assert_eq!(
            dns[1],
            ["dns6", "2001:db8::1:10 (dest port)", "1", "3", "down"]
        );
        let empty = rows(&out, "empty");
        assert_eq!(empty[0][1], "10.0.0.11:8000-8099/tcp");
        assert_eq!((empty[0][3].as_str(), empty[0][4].as_str()), ("-", "-"));
        assert_eq!(empty[0][6], "0");
        assert_eq!(empty[1], ["empty", "(no backends)", "-", "-", "-"]);
        assert!(out.contains("\nBackends per VIP:\n"));
        assert_eq!(vips(&[]), "No VIPs configured.\n");
    }

    #[test]
    fn a_refused_share_shows_in_the_backend_count() {
        let mut v = sample_vips().remove(0);
        assert_eq!(backend_count(&v), v.backends.len().to_string());
        v.reject_weight = 2;
        let total: u32 = v.backends.iter().map(|b| b.weight).sum::<u32>() + 2;
        assert_eq!(
            backend_count(&v),
            format!("{}, refuses 2/{total}", v.backends.len())
        );
    }
}
