//! `rivoractl status`: the daemon's key/value table (programs, reloads,
//! uptime) and, when rivorad watches a cluster, the Kubernetes source's rows.
//!
//! Separate because it is the one key/value view: its rows share nothing
//! with the other commands' tables but the formatters.

use rivora_api::Status;

use super::format::{duration, finish, table, utc, when};

/// [`status_with`] without a classifier row.
#[cfg(test)]
pub fn status(s: &Status, now_unix: u64) -> String {
    status_with(s, None, now_unix)
}

/// `rivoractl status`: one key/value table, programs included, with a
/// `Classifier` row after the VIP and backend counts when `classifier` is
/// given (see [`classifier_row`](super::classifier_row)).
pub fn status_with(s: &Status, classifier: Option<String>, now_unix: u64) -> String {
    let mut t = table();
    let mut kv = |k: &str, v: String| {
        t.add_row(vec![k.to_string(), crate::summary::row_value(&v)]);
    };
    kv("Version", s.version.clone());
    kv("ABI version", s.abi_version.to_string());
    kv(
        "Interface",
        format!("{} (ifindex {})", s.interface, s.ifindex),
    );
    let xdp = if s.xdp_mode == s.xdp_mode_requested {
        s.xdp_mode.clone()
    } else {
        format!("{} (requested: {})", s.xdp_mode, s.xdp_mode_requested)
    };
    kv("XDP mode", xdp);
    kv("Pin dir", s.pin_dir.clone());
    kv("Config", s.config_path.clone());
    kv("Config generation", s.config_generation.to_string());
    let r = &s.last_reload;
    if r.at_unix == 0 {
        kv("Last reload", "none since start".into());
    } else {
        let outcome = if r.ok { "ok" } else { "FAILED" };
        kv(
            "Last reload",
            format!("{outcome} at {}", when(r.at_unix, now_unix)),
        );
    }
    if let Some(e) = &r.error {
        kv("Reload error", e.clone());
    }
    if let Some(c) = &r.changes {
        kv("Reload changes", c.clone());
    }
    kv("VIPs", s.vip_count.to_string());
    kv("Backends", s.backend_count.to_string());
    if s.maglev_table_size > 0 {
        kv(
            "Maglev table",
            format!(
                "{} of {} slots in VIP slices ({:.1}%)",
                s.maglev_slots_used,
                s.maglev_table_size,
                100.0 * s.maglev_slots_used as f64 / f64::from(s.maglev_table_size)
            ),
        );
    }
    if let Some(c) = classifier {
        kv("Classifier", c);
    }
    let started = if now_unix >= s.started_at_unix {
        format!(
            "{} (up {})",
            utc(s.started_at_unix),
            duration(now_unix - s.started_at_unix)
        )
    } else {
        utc(s.started_at_unix)
    };
    kv("Started", started);
    if !s.start.is_empty() {
        kv("Start", s.start.clone());
    }
    kv(
        "Persist datapath",
        if s.persist_datapath {
            "yes: links pinned, the datapath keeps forwarding while rivorad is down".into()
        } else {
            "no: stopping rivorad detaches the programs".into()
        },
    );
    if s.programs.is_empty() {
        kv("Programs", "none attached".into());
    }
    for (i, p) in s.programs.iter().enumerate() {
        let mut link = p
            .link_id
            .map_or_else(|| "no link".to_string(), |id| format!("link id {id}"));
        if p.link_pinned {
            link.push_str(" pinned");
        }
        if p.loaded_at_unix != 0 {
            link.push_str(&format!(", loaded {}", when(p.loaded_at_unix, now_unix)));
        }
        kv(
            if i == 0 { "Programs" } else { "" },
            format!(
                "{}: {} (prog id {}, {link})",
                p.name, p.attach, p.program_id
            ),
        );
    }
    if let Some(k) = &s.kubernetes {
        kubernetes_rows(k, &mut kv);
    }
    finish(t)
}

/// The Kubernetes source's rows of `rivoractl status`: the gate first (what
/// an operator needs when adopted VIPs linger), then the watches, the
/// Services and the node report.
fn kubernetes_rows(k: &rivora_api::KubernetesStatus, kv: &mut impl FnMut(&str, String)) {
    kv("Node", format!("{} (API server {})", k.node, k.api_server));
    if k.initial_sync_complete {
        kv("Initial sync", "complete".into());
    } else {
        kv(
            "Initial sync",
            format!(
                "NOT complete: {} unclaimed adopted VIP(s) kept",
                k.unclaimed_vips
            ),
        );
        for (i, b) in k.blocking.iter().enumerate() {
            kv(if i == 0 { "Blocked by" } else { "" }, b.clone());
        }
    }
    for (i, w) in k.watches.iter().enumerate() {
        if w.absent {
            kv(
                if i == 0 { "Watches" } else { "" },
                format!(
                    "{}: not served (its CRD is not installed), counted as empty",
                    w.kind
                ),
            );
            continue;
        }
        let mut v = format!(
            "{}: {}, {} object(s), {} event(s), {} error(s)",
            w.kind,
            if w.listed { "listed" } else { "NOT listed" },
            w.objects,
            w.events,
            w.errors
        );
        if let Some(e) = &w.last_error {
            v.push_str(&format!(", last error: {e}"));
        }
        if !w.undecodable.is_empty() {
            v.push_str(&format!(
                ", {} left out (do not decode)",
                w.undecodable.len()
            ));
        }
        kv(if i == 0 { "Watches" } else { "" }, v);
        for u in &w.undecodable {
            kv("", format!("  left out: {} {u}", w.kind));
        }
    }
    let count = |state: &str| k.services.get(state).copied().unwrap_or(0);
    kv(
        "Services",
        format!(
            "{} programmed, {} refused, {} failing",
            count("programmed"),
            count("refused"),
            count("failing")
        ),
    );
    if !k.gateway_listeners.is_empty() {
        let count = |state: &str| k.gateway_listeners.get(state).copied().unwrap_or(0);
        kv(
            "Gateway listeners",
            format!(
                "{} programmed, {} failing",
                count("programmed"),
                count("failing")
            ),
        );
    }
    for (i, f) in k.failing.iter().enumerate() {
        kv(if i == 0 { "Failing" } else { "" }, f.clone());
    }
    let mut report = format!(
        "{} write(s), {} failed",
        k.node_report_writes, k.node_report_write_failures
    );
    if let Some(e) = &k.node_report_error {
        report.push_str(&format!(", last error: {e}"));
    }
    kv("RivoraNode", report);
    for (i, p) in k.health_check_node_ports.iter().enumerate() {
        let state = match (&p.error, p.serving) {
            (Some(e), _) => format!("NOT served: {e}"),
            (None, true) => format!("{} local endpoint(s)", p.local_endpoints),
            (None, false) => "not served".to_string(),
        };
        kv(
            if i == 0 { "Health check ports" } else { "" },
            format!("{} ({}): {state}", p.port, p.service),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::test_support::{row, sample_status};
    use rivora_api::ReloadInfo;

    #[test]
    fn status_shows_the_kubernetes_gate_and_what_blocks_it() {
        let mut s = sample_status();
        assert!(!status(&s, 1_700_003_660).contains("Initial sync"));
        s.kubernetes = Some(rivora_api::KubernetesStatus {
            node: "n1".into(),
            api_server: "https://10.250.0.1:6443/".into(),
            watches: vec![rivora_api::WatchInfo {
                kind: "Service".into(),
                listed: true,
                objects: 3,
                events: 5,
                errors: 1,
                last_error: Some("timed out".into()),
                absent: false,
                undecodable: vec!["a/odd: spec.ports[0].port: invalid type".into()],
            }],
            initial_sync_complete: false,
            blocking: vec!["Service a/f fails: loop".into()],
            unclaimed_vips: 2,
            services: [("programmed".to_string(), 2), ("failing".to_string(), 1)]
                .into_iter()
                .collect(),
            failures: Default::default(),
            gateway_listeners: Default::default(),
            failing: vec!["a/f: loop".into()],
            offered_generation: 4,
            node_report_writes: 3,
            node_report_write_failures: 0,
            node_report_error: None,
            health_check_node_ports: vec![rivora_api::HealthCheckPortInfo {
                port: 31000,
                service: "a/l".into(),
                local_endpoints: 0,
                serving: false,
                error: Some("address in use".into()),
            }],
            health_check_requests: Default::default(),
            ..Default::default()
        });
        let out = status(&s, 1_700_003_660);
        assert_eq!(
            row(&out, "Initial sync"),
            [
                "Initial sync",
                "NOT complete: 2 unclaimed adopted VIP(s) kept"
            ]
        );
        assert_eq!(
            row(&out, "Blocked by"),
            ["Blocked by", "Service a/f fails: loop"]
        );
        assert_eq!(
            row(&out, "Services"),
            ["Services", "2 programmed, 0 refused, 1 failing"]
        );
        assert_eq!(
            row(&out, "Health check ports"),
            [
                "Health check ports",
                "31000 (a/l): NOT served: address in use"
            ]
        );
        assert_eq!(
            row(&out, "Watches"),
            [
                "Watches",
                "Service: listed, 3 object(s), 5 event(s), 1 error(s), last error: timed out, \
                 1 left out (do not decode)"
            ]
        );
        assert!(
            out.contains("left out: Service a/odd: spec.ports[0].port: invalid type"),
            "{out}"
        );
    }

    #[test]
    fn status_rows() {
        // One hour and one minute after start, one minute after the reload.
        let out = status(&sample_status(), 1_700_003_660);
        println!("{out}");
        assert_eq!(row(&out, "Version"), ["Version", "0.1.0"]);
        assert_eq!(row(&out, "ABI version"), ["ABI version", "3"]);
        assert_eq!(row(&out, "Interface"), ["Interface", "eth0 (ifindex 2)"]);
        assert_eq!(
            row(&out, "XDP mode"),
            ["XDP mode", "generic (requested: native)"]
        );
        assert_eq!(row(&out, "Pin dir"), ["Pin dir", "/sys/fs/bpf/rivora"]);
        assert_eq!(row(&out, "Config"), ["Config", "/etc/rivora/rivora.yaml"]);
        assert_eq!(row(&out, "Config generation"), ["Config generation", "7"]);
        assert_eq!(
            row(&out, "Last reload"),
            ["Last reload", "ok at 2023-11-14 23:13:20 UTC (1m 0s ago)"]
        );
        assert_eq!(
            row(&out, "Reload changes"),
            ["Reload changes", "+1 vip, -2 backends"]
        );
        assert!(!out.contains("Reload error"));
        assert_eq!(row(&out, "VIPs"), ["VIPs", "2"]);
        assert_eq!(row(&out, "Backends"), ["Backends", "3"]);
        let mut s = sample_status();
        s.maglev_table_size = 4_194_301;
        s.maglev_slots_used = 1_006;
        assert_eq!(
            row(&status(&s, 1_700_003_660), "Maglev table"),
            ["Maglev table", "1006 of 4194301 slots in VIP slices (0.0%)"]
        );
        assert_eq!(
            row(&out, "Started"),
            ["Started", "2023-11-14 22:13:20 UTC (up 1h 1m)"]
        );
        assert_eq!(
            row(&out, "Programs"),
            [
                "Programs",
                "rivora_xdp: xdp generic on eth0 (prog id 41, link id 9)"
            ]
        );
        assert_eq!(
            row(&out, ""),
            [
                "",
                "rivora_egress: tcx egress on eth0 (prog id 42, no link)"
            ]
        );
    }

    #[test]
    fn status_summarises_a_long_reload_report() {
        let mut s = sample_status();
        let names: Vec<String> = (0..4000).map(|i| format!("vip-{i}")).collect();
        s.last_reload.changes = Some(format!("added {}", names.join(",")));
        let out = status(&s, 1_700_003_660);
        assert_eq!(
            row(&out, "Reload changes")[1],
            "added vip-0,vip-1,vip-2,vip-3,vip-4,vip-5,vip-6,vip-7,vip-8,vip-9 and 3,990 more"
        );
        let longest = out.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(longest < 200, "{longest} characters");
    }

    #[test]
    fn status_failed_reload_and_same_mode() {
        let mut s = sample_status();
        s.xdp_mode_requested = "generic".into();
        s.last_reload = ReloadInfo {
            at_unix: 1_700_000_000,
            ok: false,
            error: Some("vip web: port 0 is invalid".into()),
            changes: None,
        };
        s.programs.clear();
        let out = status(&s, 1_700_000_005);
        assert_eq!(row(&out, "XDP mode"), ["XDP mode", "generic"]);
        assert_eq!(
            row(&out, "Last reload"),
            ["Last reload", "FAILED at 2023-11-14 22:13:20 UTC (5s ago)"]
        );
        assert_eq!(
            row(&out, "Reload error"),
            ["Reload error", "vip web: port 0 is invalid"]
        );
        assert_eq!(row(&out, "Programs"), ["Programs", "none attached"]);

        s.last_reload = ReloadInfo {
            at_unix: 0,
            ok: true,
            error: None,
            changes: None,
        };
        let out = status(&s, 1_700_000_005);
        assert_eq!(
            row(&out, "Last reload"),
            ["Last reload", "none since start"]
        );
    }
}
