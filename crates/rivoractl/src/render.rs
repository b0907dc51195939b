//! Turning API answers into text: ASCII tables for humans, pretty JSON for
//! scripts.
//!
//! Kept free of I/O and of the clock (callers pass `now`) so every table can
//! be unit-tested for its exact cells.

use std::fmt::Write as _;
use std::net::Ipv6Addr;

use comfy_table::presets::ASCII_FULL_CONDENSED;
use comfy_table::{CellAlignment, Table};
use rivora_api::{
    BackendCounters, BackendInfo, BackendStats, BgpStatus, ClassifierStatus, ClsCounters,
    SpeakerStatus, Status, TableUsage, VipInfo, VipStats,
};
use serde::Serialize;

use crate::rates::{BackendRates, StatsReport, VipRates, WatchFrame};

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

/// [`status_with`] without a classifier row.
#[cfg(test)]
pub fn status(s: &Status, now_unix: u64) -> String {
    status_with(s, None, now_unix)
}

/// `rivoractl status`: one key/value table, programs included, with a
/// `Classifier` row after the VIP and backend counts when `classifier` is
/// given (see [`classifier_row`]).
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

/// `rivoractl backends`: one row per backend, with why it is in its state
/// (operator drain, retiring, health probe) and since when.
pub fn backends(backends: &[BackendInfo], now_unix: u64) -> String {
    if backends.is_empty() {
        return "No backends configured.\n".into();
    }
    let mut t = table();
    t.set_header(vec![
        "BACKEND ID",
        "BACKEND",
        "STATE",
        "PACKETS",
        "BYTES",
        "NEW FLOWS",
        "LAST PACKET",
        "PROBE",
        "LAST RESULT",
        "LAST CHANGE",
        "VIPS",
    ]);
    for b in backends {
        let vips = if b.vips.is_empty() {
            NONE.to_string()
        } else {
            b.vips.join(", ")
        };
        let c = b.counters.as_ref();
        t.add_row(vec![
            b.backend_id.to_string(),
            backend_endpoint(&b.address, b.port),
            backend_state(b),
            c.map_or_else(|| NONE.to_string(), |c| c.packets.to_string()),
            c.map_or_else(|| NONE.to_string(), |c| human_bytes(c.bytes)),
            c.map_or_else(|| NONE.to_string(), |c| c.new_flows.to_string()),
            c.map_or_else(|| NONE.to_string(), last_packet),
            b.probe
                .as_ref()
                .map_or_else(|| NONE.to_string(), |p| format!("{} {}", p.kind, p.target)),
            b.probe.as_ref().map_or_else(
                || NONE.to_string(),
                |p| probe_result(&p.last_result, p.last_latency_ms),
            ),
            ago(b.last_change_unix, now_unix),
            vips,
        ]);
    }
    right_align(&mut t, &[0, 3, 4, 5]);
    finish(t)
}

/// When a backend's latest packet was: `0.3s ago`, `12s ago`, `3m ago`;
/// `never` before its first packet; `-` when the daemon could not tell.
pub fn last_packet(c: &BackendCounters) -> String {
    match c.last_packet_age_ms {
        None if c.packets == 0 => "never".into(),
        None => NONE.to_string(),
        Some(ms) if ms < 10_000 => format!("{:.1}s ago", ms as f64 / 1000.0),
        Some(ms) => ago(1, 1 + ms / 1000),
    }
}

/// Which backends a table of at most `cap` rows shows: all when they fit;
/// otherwise those not healthy first (a drain or an outage is what an
/// operator looks for), then the busiest (by `busy`). Returned in backend id
/// order, with the number left out.
fn pick_backends(
    backends: &[BackendStats],
    cap: usize,
    busy: impl Fn(&BackendStats) -> f64,
) -> (Vec<&BackendStats>, usize) {
    let mut picked: Vec<&BackendStats> = backends.iter().collect();
    if picked.len() > cap {
        picked.sort_by(|a, b| {
            (a.state == "healthy")
                .cmp(&(b.state == "healthy"))
                .then(busy(b).total_cmp(&busy(a)))
        });
        picked.truncate(cap);
    }
    picked.sort_by_key(|b| b.backend_id);
    let hidden = backends.len() - picked.len();
    (picked, hidden)
}

fn backend_rates_of<'a>(r: &'a StatsReport, b: &BackendStats) -> Option<&'a BackendRates> {
    r.backend_rates
        .iter()
        .find(|x| x.backend_id == b.backend_id)
}

/// A line summing up the backends a table left out.
fn hidden_backends(r: &StatsReport, shown: &[&BackendStats], hidden: usize) -> String {
    if hidden == 0 {
        return String::new();
    }
    let rest = r
        .stats
        .backends
        .iter()
        .filter(|b| !shown.iter().any(|s| s.backend_id == b.backend_id));
    let (mut packets, mut pps) = (0u64, 0f64);
    for b in rest {
        packets += b.counters.packets;
        pps += backend_rates_of(r, b)
            .and_then(|x| x.packets_per_sec)
            .unwrap_or(0.0);
    }
    let rate = if r.interval_secs.is_some() {
        format!(", {}", per_sec(Some(pps)))
    } else {
        String::new()
    };
    format!(
        "... and {hidden} more backends ({packets} packets{rate}); all: rivoractl backends, or -o json\n"
    )
}

/// `rivoractl bgp`: the speaker, one row per peer, then the announced routes. With
/// Kubernetes (`k8s`), each peer is named by its BGPPeer and refused BGPPeers are listed.
pub fn bgp(b: &BgpStatus, k8s: Option<&rivora_api::KubernetesStatus>) -> String {
    let peer_names = k8s.map(|k| k.bgp_peers.as_slice()).unwrap_or_default();
    let problems = k8s.map(|k| k.bgp_problems.as_slice()).unwrap_or_default();
    if !b.enabled {
        let mut out = match k8s {
            Some(k) if k.announce == "bgp" => {
                "BGP: no BGPPeer selects this node (or none is usable).\n".to_string()
            }
            Some(k) => format!("BGP is off (rivorad --announce {}).\n", k.announce),
            None => "BGP is not configured (no `bgp:` section in the config file).\n".into(),
        };
        for p in problems {
            let _ = writeln!(out, "Refused: {p}");
        }
        return out;
    }
    let mut out = format!(
        "Local AS {}, router ID {}\n",
        b.local_as
            .map_or_else(|| NONE.to_string(), |a| a.to_string()),
        b.router_id.as_deref().unwrap_or(NONE)
    );
    let mut t = table();
    let named = !peer_names.is_empty();
    let mut header = vec![
        "PEER",
        "AS",
        "STATE",
        "UPTIME",
        "PREFIXES SENT",
        "LAST ERROR",
    ];
    if named {
        header.insert(0, "BGPPEER");
    }
    t.set_header(header);
    for (i, p) in b.peers.iter().enumerate() {
        let mut row = Vec::new();
        if named {
            row.push(
                peer_names
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| NONE.to_string()),
            );
        }
        row.extend([
            endpoint(&p.address, p.port, None),
            p.remote_as.to_string(),
            p.state.clone(),
            p.uptime_secs.map_or_else(|| NONE.to_string(), duration),
            p.prefixes_sent.to_string(),
            p.last_error.clone().unwrap_or_else(|| NONE.to_string()),
        ]);
        t.add_row(row);
    }
    right_align(&mut t, if named { &[2, 5] } else { &[1, 4] });
    out.push_str(&finish(t));
    for p in problems {
        let _ = writeln!(out, "Refused: {p}");
    }
    if b.routes.is_empty() {
        out.push_str("\nNo routes announced (no advertised VIP has a healthy backend).\n");
    } else {
        let mut r = table();
        r.set_header(vec!["ROUTE", "COMMUNITIES", "VIPS"]);
        for route in &b.routes {
            r.add_row(vec![
                route.prefix.clone(),
                if route.communities.is_empty() {
                    NONE.to_string()
                } else {
                    route.communities.join(" ")
                },
                route.vips.join(", "),
            ]);
        }
        out.push_str("\nAnnounced routes:\n");
        out.push_str(&finish(r));
    }
    out
}

/// `rivoractl speaker`: the ARP/NDP responder and its VIPs. With Kubernetes (`k8s`), the L2
/// Lease's holder and why this node does not compete, if it does not.
pub fn speaker(
    s: &SpeakerStatus,
    k8s: Option<&rivora_api::KubernetesStatus>,
    now_unix: u64,
) -> String {
    let lease = k8s.filter(|k| k.announce == "l2").map(|k| {
        let mut l = format!(
            "L2 Lease held by {}",
            k.l2_holder.as_deref().unwrap_or("nobody")
        );
        if let Some(why) = &k.l2_ineligible {
            let _ = write!(l, "; this node does not compete: {why}");
        }
        l.push('\n');
        l
    });
    if !s.enabled {
        return match (k8s, lease) {
            (_, Some(l)) => format!("{l}The ARP/NDP responder is not running yet.\n"),
            (Some(k), None) => format!(
                "L2 announcement is off (rivorad --announce {}).\n",
                k.announce
            ),
            (None, None) => {
                "L2 announcement is not configured (no `l2Announce:` section in the config file).\n"
                    .into()
            }
        };
    }
    let mut out = format!(
        "Interface {} ({}), {}, announcing every {}\n",
        s.interface.as_deref().unwrap_or(NONE),
        s.mac.as_deref().unwrap_or("no MAC"),
        if s.active { "active" } else { "INACTIVE" },
        duration(s.announce_interval_secs)
    );
    if let Some(l) = &lease {
        out.insert_str(0, l);
    }
    if s.link_up == Some(false) {
        out.push_str("The interface is down or has no carrier.\n");
    }
    if s.fenced > 0 {
        let _ = writeln!(
            out,
            "Stopped answering {} time(s) because the Lease was not renewed in time (slow or unreachable API server).",
            s.fenced
        );
    }
    if let Some(e) = &s.error {
        let _ = writeln!(out, "Error: {e}");
    }
    if s.vips.is_empty() {
        out.push_str("No VIP addresses to answer for.\n");
        return out;
    }
    let mut t = table();
    t.set_header(vec![
        "VIP",
        "ANSWERING",
        "SINCE",
        "REPLIES",
        "ANNOUNCEMENTS",
        "LAST ANNOUNCEMENT",
    ]);
    for v in &s.vips {
        t.add_row(vec![
            v.address.clone(),
            if v.answering { "yes" } else { "no" }.to_string(),
            v.since_unix
                .map_or_else(|| NONE.to_string(), |t| ago(t, now_unix)),
            v.replies_sent.to_string(),
            v.announcements_sent.to_string(),
            v.last_announce_unix
                .map_or_else(|| NONE.to_string(), |t| ago(t, now_unix)),
        ]);
    }
    right_align(&mut t, &[3, 4]);
    out.push_str(&finish(t));
    out
}

/// `rivoractl drain` / `undrain`: what the change means, then the affected
/// backends.
pub fn drain_result(backends_hit: &[BackendInfo], drain: bool, now_unix: u64) -> String {
    if backends_hit.is_empty() {
        return "No backend matched.\n".into();
    }
    let n = backends_hit.len();
    let what = if n == 1 {
        "1 backend".to_string()
    } else {
        format!("{n} backends")
    };
    let mut out = if drain {
        format!(
            "Drained {what}: established flows continue, no new flows are sent to {}.\n",
            if n == 1 { "it" } else { "them" }
        )
    } else {
        format!(
            "Undrained {what}: new flows are sent to {} again unless down or retiring.\n",
            if n == 1 { "it" } else { "them" }
        )
    };
    out.push_str(&backends(backends_hit, now_unix));
    out
}

/// `rivoractl stats`: per-VIP counters (with rates when two samples were
/// taken), drops by reason, then flow-table usage.
pub fn stats(r: &StatsReport) -> String {
    let s = &r.stats;
    let mut out = String::new();
    if s.vips.is_empty() {
        out.push_str("No VIP counters.\n");
    } else {
        let mut t = table();
        if let Some(secs) = r.interval_secs {
            let _ = writeln!(
                out,
                "Totals since the programs were loaded; rates over the last {}.",
                seconds(secs)
            );
            t.set_header(vec![
                "VIP",
                "SERVICE ID",
                "PACKETS",
                "PKT/S",
                "BYTES",
                "BYTES/S",
                "NEW FLOWS",
                "FLOWS/S",
                "DROPS",
                "REPLY PACKETS",
                "REPLY BYTES",
            ]);
            for v in &s.vips {
                let rate = rates_of(r, v);
                t.add_row(vec![
                    v.name.clone(),
                    v.service_id.to_string(),
                    v.packets.to_string(),
                    per_sec(rate.and_then(|x| x.packets_per_sec)),
                    human_bytes(v.bytes),
                    bytes_per_sec(rate.and_then(|x| x.bytes_per_sec)),
                    v.new_flows.to_string(),
                    per_sec(rate.and_then(|x| x.new_flows_per_sec)),
                    v.drops.to_string(),
                    v.reply_packets.to_string(),
                    human_bytes(v.reply_bytes),
                ]);
            }
            right_align(&mut t, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        } else {
            t.set_header(vec![
                "VIP",
                "SERVICE ID",
                "PACKETS",
                "BYTES",
                "NEW FLOWS",
                "DROPS",
                "REPLY PACKETS",
                "REPLY BYTES",
            ]);
            for v in &s.vips {
                t.add_row(vec![
                    v.name.clone(),
                    v.service_id.to_string(),
                    v.packets.to_string(),
                    human_bytes(v.bytes),
                    v.new_flows.to_string(),
                    v.drops.to_string(),
                    v.reply_packets.to_string(),
                    human_bytes(v.reply_bytes),
                ]);
            }
            right_align(&mut t, &[1, 2, 3, 4, 5, 6, 7]);
        }
        out.push_str(&finish(t));
    }
    out.push_str(&backend_traffic(r));
    if s.drops.is_empty() {
        out.push_str("\nDrops by reason: none\n");
    } else {
        let mut d = table();
        d.set_header(vec!["DROP REASON", "PACKETS"]);
        for dc in &s.drops {
            d.add_row(vec![dc.reason.clone(), dc.packets.to_string()]);
        }
        right_align(&mut d, &[1]);
        out.push_str("\nDrops by reason:\n");
        out.push_str(&finish(d));
    }
    out.push_str(&flow_tables(&s.tables));
    out.push_str(&flow_guard(s));
    out.push_str(&flow_filter(s));
    out.push_str(&snat(s));
    out
}

/// Source translation's line, once it has done anything (a node without
/// ETP Cluster Services never shows it).
fn snat(s: &rivora_api::Stats) -> String {
    let Some(n) = &s.snat else {
        return String::new();
    };
    let c = |k: &str| n.counters.get(k).copied().unwrap_or(0);
    let exhausted = s
        .drops
        .iter()
        .find(|d| d.reason == "snat_exhausted")
        .map(|d| d.packets)
        .unwrap_or(0);
    if n.counters.values().all(|v| *v == 0) && exhausted == 0 {
        return String::new();
    }
    let from: Vec<&str> = [n.source_v4.as_deref(), n.source_v6.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    format!(
        "Source translation (backends on other nodes): from {} ports {}; {} flows mapped ({} by taking over idle ports, {} refused: no port), {} packets out, {} replies back, {} unmatched, {} via the kernel\n",
        if from.is_empty() {
            "no address".to_string()
        } else {
            from.join(" and ")
        },
        n.ports,
        c("allocated"),
        c("reused_idle"),
        exhausted,
        c("forwarded"),
        c("replied"),
        c("reply_unmatched"),
        c("to_kernel"),
    )
}

/// The flow filter's line: how full it is, whether it is trusted yet.
fn flow_filter(s: &rivora_api::Stats) -> String {
    let Some(f) = &s.flow_filter else {
        return String::new();
    };
    let pct = if f.bits == 0 {
        0.0
    } else {
        f.bits_set as f64 * 100.0 / f.bits as f64
    };
    let state = if f.exact {
        "exact: new flows whose bit is clear skip the affinity lookup"
    } else {
        "not exact yet (upgraded pins, rebuilt within seconds): every new flow is looked up"
    };
    format!(
        "Flow filter: {} of {} bits set ({pct:.2}%), {state}; {} rebuilds\n",
        f.bits_set, f.bits, f.rebuilds
    )
}

/// The new-flow guard's line: its setting and what it held back.
fn flow_guard(s: &rivora_api::Stats) -> String {
    let Some(g) = &s.flow_guard else {
        return String::new();
    };
    let guarded = s
        .drops
        .iter()
        .find(|d| d.reason == "flow_guarded")
        .map(|d| d.packets)
        .unwrap_or(0);
    if g.rate_per_s == 0 {
        return format!("\nNew-flow guard: off; {guarded} packets guarded\n");
    }
    format!(
        "\nNew-flow guard: {} state entries/s node-wide ({} per CPU per {} ms); {} packets guarded (forwarded without state)\n",
        g.rate_per_s, g.per_cpu_limit, g.window_ms, guarded
    )
}

/// `rivoractl stats`' per-backend table (empty from an older daemon).
fn backend_traffic(r: &StatsReport) -> String {
    let bs = &r.stats.backends;
    if bs.is_empty() {
        return String::new();
    }
    let rated = r.interval_secs.is_some();
    let (shown, hidden) = pick_backends(bs, STATS_BACKEND_ROWS, |b| {
        if rated {
            backend_rates_of(r, b)
                .and_then(|x| x.packets_per_sec)
                .unwrap_or(0.0)
        } else {
            b.counters.packets as f64
        }
    });
    let mut t = table();
    if rated {
        t.set_header(vec![
            "BACKEND ID",
            "BACKEND",
            "STATE",
            "PACKETS",
            "PKT/S",
            "BYTES",
            "BYTES/S",
            "NEW FLOWS",
            "FLOWS/S",
            "LAST PACKET",
        ]);
        for b in &shown {
            let rate = backend_rates_of(r, b);
            let c = &b.counters;
            t.add_row(vec![
                b.backend_id.to_string(),
                backend_endpoint(&b.address, b.port),
                b.state.clone(),
                c.packets.to_string(),
                per_sec(rate.and_then(|x| x.packets_per_sec)),
                human_bytes(c.bytes),
                bytes_per_sec(rate.and_then(|x| x.bytes_per_sec)),
                c.new_flows.to_string(),
                per_sec(rate.and_then(|x| x.new_flows_per_sec)),
                last_packet(c),
            ]);
        }
        right_align(&mut t, &[0, 3, 4, 5, 6, 7, 8]);
    } else {
        t.set_header(vec![
            "BACKEND ID",
            "BACKEND",
            "STATE",
            "PACKETS",
            "BYTES",
            "NEW FLOWS",
            "LAST PACKET",
        ]);
        for b in &shown {
            let c = &b.counters;
            t.add_row(vec![
                b.backend_id.to_string(),
                backend_endpoint(&b.address, b.port),
                b.state.clone(),
                c.packets.to_string(),
                human_bytes(c.bytes),
                c.new_flows.to_string(),
                last_packet(c),
            ]);
        }
        right_align(&mut t, &[0, 3, 4, 5]);
    }
    let mut out =
        String::from("\nBackends (client->backend traffic, every VIP that lists them):\n");
    out.push_str(&finish(t));
    out.push_str(&hidden_backends(r, &shown, hidden));
    out
}

/// `rivoractl watch`'s DRAIN cell of a draining backend: `active` while
/// packets still reach it, `quiet for 12s` once none has for a whole
/// interval (the drain is over when that exceeds the clients' idle time);
/// `-` for other backends.
fn drain_progress(b: &BackendStats, rate: Option<&BackendRates>) -> String {
    if b.state != "draining" {
        return NONE.to_string();
    }
    let pps = rate.and_then(|x| x.packets_per_sec);
    match (pps, b.counters.last_packet_age_ms) {
        (Some(x), _) if x > 0.0 => "active".into(),
        (_, None) if b.counters.packets == 0 => "quiet (no packets yet)".into(),
        (Some(_), Some(ms)) => format!("quiet for {}", quiet_for(ms)),
        _ => NONE.to_string(),
    }
}

/// `0.4s`, `12s`, `3m 20s`, `2h 5m`.
fn quiet_for(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..10 => format!("{:.1}s", ms as f64 / 1000.0),
        10..60 => format!("{secs}s"),
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        _ => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
    }
}

/// `rivoractl watch`'s backend table: rates, last packet and the progress
/// of drains; state reasons (drained, retiring) from `info`.
fn watch_backends(r: &StatsReport, info: &[BackendInfo]) -> String {
    let (shown, hidden) = pick_backends(&r.stats.backends, WATCH_BACKEND_ROWS, |b| {
        backend_rates_of(r, b)
            .and_then(|x| x.packets_per_sec)
            .unwrap_or(0.0)
    });
    let mut t = table();
    t.set_header(vec![
        "BACKEND ID",
        "BACKEND",
        "STATE",
        "PKT/S",
        "BYTES/S",
        "NEW FLOWS/S",
        "PACKETS",
        "LAST PACKET",
        "DRAIN",
    ]);
    for b in &shown {
        let rate = backend_rates_of(r, b);
        let state = info
            .iter()
            .find(|i| i.backend_id == b.backend_id && i.address == b.address && i.port == b.port)
            .map_or_else(|| b.state.clone(), backend_state);
        t.add_row(vec![
            b.backend_id.to_string(),
            backend_endpoint(&b.address, b.port),
            state,
            per_sec(rate.and_then(|x| x.packets_per_sec)),
            bytes_per_sec(rate.and_then(|x| x.bytes_per_sec)),
            per_sec(rate.and_then(|x| x.new_flows_per_sec)),
            b.counters.packets.to_string(),
            last_packet(&b.counters),
            drain_progress(b, rate),
        ]);
    }
    right_align(&mut t, &[0, 3, 4, 5, 6]);
    let mut out = finish(t);
    out.push_str(&hidden_backends(r, &shown, hidden));
    out
}

/// `rivoractl watch`: one refresh, current rates first (what an operator
/// watches), then flow tables and backend states.
pub fn watch(f: &WatchFrame, now_unix: u64) -> String {
    let r = &f.stats;
    let mut out = format!(
        "rivorad at {}: rates over the last {} (q or Ctrl-C to stop)\n",
        utc(now_unix),
        r.interval_secs.map_or_else(|| NONE.to_string(), seconds)
    );
    if r.stats.vips.is_empty() {
        out.push_str("No VIP counters.\n");
    } else {
        let mut t = table();
        t.set_header(vec![
            "VIP",
            "PKT/S",
            "BYTES/S",
            "NEW FLOWS/S",
            "DROPS/S",
            "REPLY PKT/S",
            "REPLY BYTES/S",
            "PACKETS",
            "NEW FLOWS",
        ]);
        for v in &r.stats.vips {
            let rate = rates_of(r, v);
            t.add_row(vec![
                v.name.clone(),
                per_sec(rate.and_then(|x| x.packets_per_sec)),
                bytes_per_sec(rate.and_then(|x| x.bytes_per_sec)),
                per_sec(rate.and_then(|x| x.new_flows_per_sec)),
                per_sec(rate.and_then(|x| x.drops_per_sec)),
                per_sec(rate.and_then(|x| x.reply_packets_per_sec)),
                bytes_per_sec(rate.and_then(|x| x.reply_bytes_per_sec)),
                v.packets.to_string(),
                v.new_flows.to_string(),
            ]);
        }
        right_align(&mut t, &[1, 2, 3, 4, 5, 6, 7, 8]);
        out.push_str(&finish(t));
    }
    out.push_str(&flow_tables(&r.stats.tables));
    out.push('\n');
    if r.stats.backends.is_empty() {
        // An older daemon: no per-backend counters.
        out.push_str(&backends(&f.backends, now_unix));
    } else {
        out.push_str(&watch_backends(r, &f.backends));
    }
    out
}

/// Flow-table fill levels, flagging tables close to full; empty when the
/// daemon reports none.
fn flow_tables(tables: &[TableUsage]) -> String {
    if tables.is_empty() {
        return String::new();
    }
    let mut t = table();
    t.set_header(vec!["FLOW TABLE", "ENTRIES", "CAPACITY", "FULL"]);
    let mut flagged = false;
    for u in tables {
        let (full, warn) = fill(u.entries, u.capacity);
        flagged |= warn;
        t.add_row(vec![
            u.name.clone(),
            u.entries.to_string(),
            u.capacity.to_string(),
            full,
        ]);
    }
    right_align(&mut t, &[1, 2, 3]);
    let mut out = String::from("\nFlow tables:\n");
    out.push_str(&finish(t));
    if flagged {
        let _ = writeln!(
            out,
            "! = at least {FULL_WARN_PCT}% full: once full, new flows evict live ones."
        );
    }
    out
}

/// `42.0%`, with a ` !` marker at [`FULL_WARN_PCT`] or more; the flag is
/// decided on exact integers so 89.99% is never rounded into a warning.
fn fill(entries: u64, capacity: u64) -> (String, bool) {
    if capacity == 0 {
        return (NONE.to_string(), false);
    }
    let pct = entries as f64 * 100.0 / capacity as f64;
    let warn = u128::from(entries) * 100 >= u128::from(capacity) * u128::from(FULL_WARN_PCT);
    // Never show "90.0%" without the marker (or "100.0%" when not full).
    let text = if warn {
        format!("{pct:.1}% !")
    } else {
        format!("{:.1}%", (pct * 10.0).floor() / 10.0)
    };
    (text, warn)
}

fn rates_of<'a>(r: &'a StatsReport, v: &VipStats) -> Option<&'a VipRates> {
    r.rates
        .iter()
        .find(|x| x.service_id == v.service_id && x.name == v.name)
}

/// `draining (drained)`: the state, plus why when an operator drain or a
/// retirement is behind it.
fn backend_state(b: &BackendInfo) -> String {
    let why: Vec<&str> = [(b.drained, "drained"), (b.retiring, "retiring")]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
    if why.is_empty() {
        b.state.clone()
    } else {
        format!("{} ({})", b.state, why.join(", "))
    }
}

/// `ok 0.4 ms`, `fail: connect: refused`, `pending`.
fn probe_result(result: &str, latency_ms: f64) -> String {
    if result == "ok" {
        format!("ok {}", millis(latency_ms))
    } else {
        result.to_string()
    }
}

/// Probe latency: `0.4 ms`, `12 ms`, `1.50 s`.
pub fn millis(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", ms / 1000.0)
    }
}

/// A sampling interval: `1s`, `0.2s`, `2.5s`.
fn seconds(secs: f64) -> String {
    let s = format!("{secs:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}s")
}

/// Coarse age for a table cell: `45s ago`, `3m ago`, `2h ago`, `4d ago`;
/// `-` for 0 (no change since start).
pub fn ago(unix: u64, now_unix: u64) -> String {
    if unix == 0 {
        return NONE.to_string();
    }
    let Some(secs) = now_unix.checked_sub(unix) else {
        // Clock skew between daemon and client.
        return "just now".into();
    };
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86_400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

/// Event rate: `0/s`, `0.5/s`, `250/s`, `12.3k/s`, `1.2M/s`; `-` when
/// unknown.
pub fn per_sec(rate: Option<f64>) -> String {
    const UNITS: [&str; 4] = ["k", "M", "G", "T"];
    let Some(x) = rate else {
        return NONE.to_string();
    };
    if x == 0.0 {
        return "0/s".into();
    }
    if x < 9.95 {
        return format!("{x:.1}/s");
    }
    if x < 999.5 {
        return format!("{x:.0}/s");
    }
    let mut v = x / 1000.0;
    let mut unit = 0;
    while v >= 999.95 && unit < UNITS.len() - 1 {
        v /= 1000.0;
        unit += 1;
    }
    format!("{v:.1}{}/s", UNITS[unit])
}

/// Byte rate in the binary units of [`human_bytes`]: `512 B/s`,
/// `1.2 MiB/s`; `-` when unknown.
pub fn bytes_per_sec(rate: Option<f64>) -> String {
    match rate {
        None => NONE.to_string(),
        Some(x) if x < 1023.5 => format!("{x:.0} B/s"),
        Some(x) => format!("{}/s", scaled_bytes(x / 1024.0)),
    }
}

/// `addr:port[/proto]`, with IPv6 addresses in brackets so the port is
/// unambiguous.
pub fn endpoint(address: &str, port: u16, protocol: Option<&str>) -> String {
    let mut s = if address.parse::<Ipv6Addr>().is_ok() {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    };
    if let Some(p) = protocol {
        let _ = write!(s, "/{p}");
    }
    s
}

/// A VIP's `addr:ports/proto`: `10.0.0.1:80/tcp`, `10.0.0.1:8000-8099/tcp`,
/// `[2001:db8::1]:any/udp` (`port_last` 0, from an older rivorad, or equal
/// to `port` is a single port).
pub fn frontend(address: &str, port: u16, port_last: u16, protocol: &str) -> String {
    let ports = if port == 0 && port_last == u16::MAX {
        "any".to_string()
    } else if port_last > port {
        format!("{port}-{port_last}")
    } else {
        port.to_string()
    };
    if address.parse::<Ipv6Addr>().is_ok() {
        format!("[{address}]:{ports}/{protocol}")
    } else {
        format!("{address}:{ports}/{protocol}")
    }
}

/// A backend's `addr:port`; port 0 (a backend of a port-range VIP that
/// keeps the client's destination port) is `addr (dest port)`.
pub fn backend_endpoint(address: &str, port: u16) -> String {
    if port == 0 {
        format!("{address} (dest port)")
    } else {
        endpoint(address, port, None)
    }
}

/// Binary-prefixed size with one decimal (`512 B`, `1.2 MiB`).
pub fn human_bytes(n: u64) -> String {
    if n < 1024 {
        return format!("{n} B");
    }
    scaled_bytes(n as f64 / 1024.0)
}

/// `kib` (at least 1) in the largest binary unit that keeps it below 1024.
fn scaled_bytes(kib: f64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = kib;
    let mut unit = 0;
    // 1023.95+ would print as "1024.0", so move to the next unit instead.
    while v >= 1023.95 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// Compact duration: `45s`, `5m 3s`, `3h 2m`, `2d 4h`.
pub fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// `YYYY-MM-DD HH:MM:SS UTC` for a Unix timestamp.
pub fn utc(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Absolute time plus how long ago, e.g. `2023-11-14 22:15:00 UTC (5m ago)`.
fn when(unix: u64, now_unix: u64) -> String {
    if now_unix >= unix {
        format!("{} ({} ago)", utc(unix), duration(now_unix - unix))
    } else {
        utc(unix)
    }
}

/// Proleptic Gregorian (year, month, day) for days since 1970-01-01, using
/// 400-year eras (146097 days) whose years start on March 1st so that the
/// leap day falls at the end of the year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // shift epoch to 0000-03-01
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

/// What rivoractl knows of the classifier for a summary: `Ok(None)` from a
/// rivorad without one (HTTP 501, or 404 from one older than the
/// endpoint), `Err` with the reason when reading it failed.
pub type ClassifierView = Result<Option<ClassifierStatus>, String>;

/// Whether the classifier has nothing to show.
fn classifier_is_empty(c: &ClassifierStatus) -> bool {
    c.vips.is_empty() && c.rules.is_empty() && c.groups.is_empty() && c.unclaimed_vips.is_empty()
}

/// The `Classifier` row of `rivoractl status`: `2 VIPs (1 ready), 3 rules,
/// 2 groups`; None where there is no classifier to speak of.
pub fn classifier_row(c: &ClassifierView) -> Option<String> {
    let c = match c {
        Ok(Some(c)) if !classifier_is_empty(c) => c,
        Ok(_) => return None,
        Err(e) => return Some(format!("cannot read: {e}")),
    };
    let ready = c.vips.iter().filter(|v| v.ready).count();
    let mut out = format!(
        "{} ({ready} ready), {}, {}",
        plural(c.vips.len(), "VIP"),
        plural(c.rules.len(), "rule"),
        plural(c.groups.len(), "group")
    );
    if !c.unclaimed_vips.is_empty() {
        let _ = write!(
            out,
            "; {} adopted and unclaimed",
            plural(c.unclaimed_vips.len(), "VIP")
        );
    }
    Some(out)
}

/// `1 rule`, `2 rules`.
fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// `rivoractl vips` with the classifier's VIPs after the others' tables
/// (only the classifier's when there are no others).
pub fn vips_with_classifier(list: &[VipInfo], c: &ClassifierView) -> String {
    match c {
        Ok(Some(c)) if !c.vips.is_empty() => {
            let mut out = if list.is_empty() {
                String::new()
            } else {
                let mut o = vips(list);
                o.push('\n');
                o
            };
            out.push_str(
                "Classifier VIPs (rules in evaluation order; see rivoractl rules and rivoractl groups):\n",
            );
            out.push_str(&classifier_vips(c));
            out
        }
        Err(e) => format!("{}\nClassifier: cannot read: {e}\n", vips(list)),
        Ok(_) => vips(list),
    }
}

/// The four counter cells of a classifier VIP, rule or group: packets,
/// bytes, drops for want of a target, other drops.
fn cls_counter_cells(c: &ClsCounters) -> [String; 4] {
    [
        c.packets.to_string(),
        human_bytes(c.bytes),
        c.no_target.to_string(),
        c.other.to_string(),
    ]
}

/// Headers of [`cls_counter_cells`].
const CLS_COUNTER_HEADERS: [&str; 4] = ["PACKETS", "BYTES", "NO-TARGET DROPS", "OTHER DROPS"];

/// Items joined with `, `, or `empty` when there are none.
fn joined_or(items: &[String], empty: &str) -> String {
    if items.is_empty() {
        empty.to_string()
    } else {
        items.join(", ")
    }
}

/// The classifier VIPs' table: whether each can forward, its rules in
/// evaluation order, and its counters.
fn classifier_vips(c: &ClassifierStatus) -> String {
    let mut t = table();
    let mut header = vec!["VIP", "READY", "RULES"];
    header.extend(CLS_COUNTER_HEADERS);
    t.set_header(header);
    for v in &c.vips {
        let mut row = vec![
            v.address.clone(),
            if v.ready {
                "yes".to_string()
            } else {
                "no (no target of its family)".to_string()
            },
            joined_or(&v.rules, NONE),
        ];
        row.extend(cls_counter_cells(&v.counters));
        t.add_row(row);
    }
    right_align(&mut t, &[3, 4, 5, 6]);
    finish(t)
}

/// The classifier's events that happened, `no_rule 7, no_target 5`, or
/// `none`.
fn classifier_events(c: &ClassifierStatus) -> String {
    let seen: Vec<String> = c
        .events
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(e, n)| format!("{e} {n}"))
        .collect();
    joined_or(&seen, "none")
}

/// `rivoractl rules`: one row per rule (highest priority first, as the
/// datapath tries them), then each VIP's rules in evaluation order with its
/// counters, then the classifier's events.
pub fn rules(c: &ClassifierStatus) -> String {
    let mut out = String::new();
    if c.rules.is_empty() {
        out.push_str("No classifier rules programmed.\n");
    } else {
        let mut list: Vec<_> = c.rules.iter().collect();
        list.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.name.cmp(&b.name))
        });
        // Columns most rules leave empty are shown only when one uses them.
        let show_sources = list.iter().any(|r| !r.sources.is_empty());
        let show_sports = list.iter().any(|r| !r.source_ports.is_empty());
        let show_bytes = list.iter().any(|r| !r.byte_matches.is_empty());
        let mut header = vec!["RULE", "PRIORITY", "GROUP", "VIPS", "PROTOCOLS"];
        if show_sources {
            header.push("SOURCES");
        }
        if show_sports {
            header.push("SOURCE PORTS");
        }
        header.push("DEST PORTS");
        if show_bytes {
            header.push("BYTE MATCHES");
        }
        let first_counter = header.len();
        header.extend(CLS_COUNTER_HEADERS);
        let mut t = table();
        t.set_header(header);
        for r in list {
            let mut row = vec![
                r.name.clone(),
                r.priority.to_string(),
                r.group.clone(),
                joined_or(&r.vips, NONE),
                r.protocols.join(","),
            ];
            if show_sources {
                row.push(joined_or(&r.sources, "any"));
            }
            if show_sports {
                row.push(joined_or(&r.source_ports, "any"));
            }
            row.push(joined_or(&r.destination_ports, "any"));
            if show_bytes {
                row.push(joined_or(&r.byte_matches, NONE));
            }
            row.extend(cls_counter_cells(&r.counters));
            t.add_row(row);
        }
        let mut right = vec![1];
        right.extend(first_counter..first_counter + 4);
        right_align(&mut t, &right);
        out.push_str(&finish(t));
    }
    if !c.vips.is_empty() {
        out.push_str("\nRules per VIP, in evaluation order (the first that matches wins):\n");
        out.push_str(&classifier_vips(c));
    }
    if !c.unclaimed_vips.is_empty() {
        let _ = writeln!(
            out,
            "Adopted from pinned maps and not claimed yet (forwarding with an earlier rivorad's rules): {}",
            c.unclaimed_vips.join(", ")
        );
    }
    if !classifier_is_empty(c) {
        let _ = writeln!(out, "Classifier events: {}", classifier_events(c));
    }
    out
}

/// `rivoractl groups`: one row per group (slots, table length, targets per
/// family, the rules that lead to it, counters), then every group's targets
/// by slot.
pub fn groups(c: &ClassifierStatus) -> String {
    if c.groups.is_empty() {
        return "No classifier groups programmed.\n".into();
    }
    let mut t = table();
    let mut header = vec![
        "GROUP",
        "SLOTS",
        "TABLE SIZE",
        "SCTP HASH",
        "IPV4 TARGETS",
        "IPV6 TARGETS",
        "RULES",
    ];
    header.extend(CLS_COUNTER_HEADERS);
    t.set_header(header);
    for g in &c.groups {
        let rules: Vec<String> = c
            .rules
            .iter()
            .filter(|r| r.group == g.name)
            .map(|r| r.name.clone())
            .collect();
        let mut row = vec![
            g.name.clone(),
            g.max_endpoints.to_string(),
            g.table_size.to_string(),
            g.sctp_hash.clone(),
            g.slots_v4.to_string(),
            g.slots_v6.to_string(),
            joined_or(&rules, NONE),
        ];
        row.extend(cls_counter_cells(&g.counters));
        t.add_row(row);
    }
    right_align(&mut t, &[1, 2, 4, 5, 7, 8, 9, 10]);

    let mut s = table();
    s.set_header(vec!["GROUP", "SLOT", "IPV4", "IPV6"]);
    for g in &c.groups {
        if g.targets.is_empty() {
            s.add_row(vec![g.name.as_str(), "(no targets)", NONE, NONE]);
        }
        for tg in &g.targets {
            s.add_row(vec![
                g.name.clone(),
                tg.slot.to_string(),
                tg.v4.clone().unwrap_or_else(|| NONE.to_string()),
                tg.v6.clone().unwrap_or_else(|| NONE.to_string()),
            ]);
        }
    }

    let mut out = finish(t);
    out.push_str("\nTargets per group (a target always takes its slot):\n");
    out.push_str(&finish(s));
    out
}

fn table() -> Table {
    let mut t = Table::new();
    t.load_style(ASCII_FULL_CONDENSED);
    t
}

fn right_align(t: &mut Table, columns: &[usize]) {
    for &i in columns {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

fn finish(t: Table) -> String {
    let mut s = t.to_string();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rates::tests::{sample, vip};
    use crate::rates::{totals_only, with_rates};
    use rivora_api::{DropCount, ProbeInfo, ProgramInfo, ReloadInfo, Stats, VipBackend};
    use std::time::Duration;

    /// The trimmed cells of the table line whose first cell is `first`.
    fn row(out: &str, first: &str) -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with('|'))
            .map(|l| {
                l.trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().to_string())
                    .collect::<Vec<_>>()
            })
            .find(|cells| cells[0] == first)
            .unwrap_or_else(|| panic!("no row starting with {first:?} in\n{out}"))
    }

    fn rows(out: &str, first: &str) -> Vec<Vec<String>> {
        out.lines()
            .filter(|l| l.starts_with('|'))
            .map(|l| {
                l.trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().to_string())
                    .collect::<Vec<_>>()
            })
            .filter(|cells| cells[0] == first)
            .collect()
    }

    fn sample_status() -> Status {
        Status {
            version: "0.1.0".into(),
            abi_version: 3,
            interface: "eth0".into(),
            ifindex: 2,
            xdp_mode_requested: "native".into(),
            xdp_mode: "generic".into(),
            pin_dir: "/sys/fs/bpf/rivora".into(),
            config_path: "/etc/rivora/rivora.yaml".into(),
            config_generation: 7,
            last_reload: ReloadInfo {
                at_unix: 1_700_003_600,
                ok: true,
                error: None,
                changes: Some("+1 vip, -2 backends".into()),
            },
            vip_count: 2,
            backend_count: 3,
            started_at_unix: 1_700_000_000,
            maglev_table_size: 0,
            maglev_slots_used: 0,
            persist_datapath: false,
            kubernetes: None,
            start: String::new(),
            programs: vec![
                ProgramInfo {
                    name: "rivora_xdp".into(),
                    attach: "xdp generic on eth0".into(),
                    program_id: 41,
                    link_id: Some(9),
                    link_pinned: false,
                    loaded_at_unix: 0,
                },
                ProgramInfo {
                    name: "rivora_egress".into(),
                    attach: "tcx egress on eth0".into(),
                    program_id: 42,
                    link_id: None,
                    link_pinned: false,
                    loaded_at_unix: 0,
                },
            ],
        }
    }

    fn sample_vips() -> Vec<VipInfo> {
        vec![
            VipInfo {
                name: "web".into(),
                address: "10.0.0.10".into(),
                port: 80,
                port_last: 80,
                protocol: "tcp".into(),
                mode: "ipip".into(),
                service_id: 1,
                maglev_offset: 0,
                maglev_size: 65537,
                worst_imbalance_pct: 0.372,
                reject_weight: 0,
                session_affinity: "clientIP".into(),
                nat_forwarding: "kernel".into(),
                syn_rate_limit: "100/s burst 200".into(),
                origin: None,
                backends: vec![
                    VipBackend {
                        address: "192.168.1.10".into(),
                        port: 8080,
                        weight: 100,
                        backend_id: 1,
                        state: "healthy".into(),
                        target: None,
                        node: None,
                        terminating: false,
                        snat: false,
                    },
                    VipBackend {
                        address: "192.168.1.11".into(),
                        port: 8080,
                        weight: 50,
                        backend_id: 2,
                        state: "draining".into(),
                        target: None,
                        node: None,
                        terminating: false,
                        snat: false,
                    },
                ],
            },
            VipInfo {
                name: "dns6".into(),
                address: "2001:db8::53".into(),
                port: 0,
                port_last: 65535,
                protocol: "udp".into(),
                mode: "dsr".into(),
                service_id: 2,
                maglev_offset: 65537,
                maglev_size: 251,
                worst_imbalance_pct: 12.5,
                reject_weight: 0,
                session_affinity: "none".into(),
                nat_forwarding: "kernel".into(),
                syn_rate_limit: "none".into(),
                origin: None,
                backends: vec![VipBackend {
                    address: "2001:db8::1:10".into(),
                    port: 0,
                    weight: 1,
                    backend_id: 3,
                    state: "down".into(),
                    target: None,
                    node: None,
                    terminating: false,
                    snat: false,
                }],
            },
            VipInfo {
                name: "empty".into(),
                address: "10.0.0.11".into(),
                port: 8000,
                port_last: 8099,
                protocol: "tcp".into(),
                mode: "ipip".into(),
                service_id: 3,
                maglev_offset: 65788,
                maglev_size: 251,
                worst_imbalance_pct: 0.0,
                reject_weight: 0,
                backends: vec![],
                // As an older rivorad answers: no affinity or limit fields.
                session_affinity: String::new(),
                nat_forwarding: String::new(),
                syn_rate_limit: String::new(),
                origin: None,
            },
        ]
    }

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

    fn probe(kind: &str, target: &str, last_result: &str, latency: f64) -> ProbeInfo {
        ProbeInfo {
            kind: kind.into(),
            target: target.into(),
            interval_ms: 1000,
            timeout_ms: 500,
            rise: 2,
            fall: 3,
            up: last_result == "ok",
            last_result: last_result.into(),
            last_latency_ms: latency,
            consecutive: 1,
            last_probe_unix: 1_700_000_000,
        }
    }

    fn sample_backends() -> Vec<BackendInfo> {
        vec![
            BackendInfo {
                backend_id: 1,
                address: "192.168.1.10".into(),
                port: 8080,
                state: "healthy".into(),
                vips: vec!["web".into(), "api".into()],
                drained: false,
                retiring: false,
                probe: Some(probe(
                    "http",
                    "http://192.168.1.10:8080/healthz",
                    "ok",
                    0.42,
                )),
                last_change_unix: 1_700_000_000 - 180,
                counters: Some(BackendCounters {
                    packets: 1_234_567,
                    bytes: 1_258_291,
                    new_flows: 4_321,
                    last_packet_age_ms: Some(300),
                    last_packet_unix_ms: None,
                }),
            },
            BackendInfo {
                backend_id: 2,
                address: "192.168.1.11".into(),
                port: 8080,
                state: "draining".into(),
                vips: vec!["web".into()],
                drained: true,
                retiring: false,
                probe: Some(probe("tcp", "192.168.1.11:8080", "ok", 12.3)),
                last_change_unix: 1_700_000_000 - 45,
                counters: Some(BackendCounters {
                    packets: 20,
                    bytes: 2_000,
                    new_flows: 2,
                    last_packet_age_ms: Some(45_000),
                    last_packet_unix_ms: None,
                }),
            },
            BackendInfo {
                backend_id: 3,
                address: "192.168.1.12".into(),
                port: 8080,
                state: "down".into(),
                vips: vec!["web".into()],
                drained: true,
                retiring: true,
                probe: Some(probe(
                    "tcp",
                    "192.168.1.12:8080",
                    "fail: connect: refused",
                    0.1,
                )),
                last_change_unix: 1_700_000_000 - 2 * 86_400,
                counters: Some(BackendCounters {
                    packets: 0,
                    bytes: 0,
                    new_flows: 0,
                    last_packet_age_ms: None,
                    last_packet_unix_ms: None,
                }),
            },
            BackendInfo {
                backend_id: 4,
                address: "192.168.1.13".into(),
                port: 8080,
                state: "draining".into(),
                vips: vec![],
                drained: false,
                retiring: true,
                probe: Some(probe("tcp", "192.168.1.13:8080", "pending", 0.0)),
                last_change_unix: 1_700_000_000 - 7200,
                counters: Some(BackendCounters {
                    packets: 9,
                    bytes: 900,
                    new_flows: 1,
                    last_packet_age_ms: Some(7_200_000),
                    last_packet_unix_ms: None,
                }),
            },
            BackendInfo {
                backend_id: 12,
                address: "2001:db8::1:10".into(),
                port: 53,
                state: "healthy".into(),
                vips: vec!["dns6".into()],
                drained: false,
                retiring: false,
                probe: None,
                last_change_unix: 0,
                counters: None,
            },
        ]
    }

    #[test]
    fn backends_table() {
        let out = backends(&sample_backends(), 1_700_000_000);
        println!("{out}");
        assert_eq!(
            row(&out, "BACKEND ID"),
            [
                "BACKEND ID",
                "BACKEND",
                "STATE",
                "PACKETS",
                "BYTES",
                "NEW FLOWS",
                "LAST PACKET",
                "PROBE",
                "LAST RESULT",
                "LAST CHANGE",
                "VIPS"
            ]
        );
        assert_eq!(
            row(&out, "1"),
            [
                "1",
                "192.168.1.10:8080",
                "healthy",
                "1234567",
                "1.2 MiB",
                "4321",
                "0.3s ago",
                "http http://192.168.1.10:8080/healthz",
                "ok 0.4 ms",
                "3m ago",
                "web, api"
            ]
        );
        assert_eq!(
            row(&out, "2"),
            [
                "2",
                "192.168.1.11:8080",
                "draining (drained)",
                "20",
                "2.0 KiB",
                "2",
                "45s ago",
                "tcp 192.168.1.11:8080",
                "ok 12 ms",
                "45s ago",
                "web"
            ]
        );
        assert_eq!(
            row(&out, "3"),
            [
                "3",
                "192.168.1.12:8080",
                "down (drained, retiring)",
                "0",
                "0 B",
                "0",
                "never",
                "tcp 192.168.1.12:8080",
                "fail: connect: refused",
                "2d ago",
                "web"
            ]
        );
        assert_eq!(
            row(&out, "4"),
            [
                "4",
                "192.168.1.13:8080",
                "draining (retiring)",
                "9",
                "900 B",
                "1",
                "2h ago",
                "tcp 192.168.1.13:8080",
                "pending",
                "2h ago",
                "-"
            ]
        );
        assert_eq!(
            row(&out, "12"),
            [
                "12",
                "[2001:db8::1:10]:53",
                "healthy",
                "-",
                "-",
                "-",
                "-",
                "-",
                "-",
                "-",
                "dns6"
            ]
        );
        assert_eq!(backends(&[], 0), "No backends configured.\n");
    }

    #[test]
    fn drain_and_undrain_messages() {
        let bs = sample_backends();
        let out = drain_result(&bs[1..2], true, 1_700_000_000);
        println!("{out}");
        assert!(out.starts_with(
            "Drained 1 backend: established flows continue, no new flows are sent to it.\n"
        ));
        assert_eq!(row(&out, "2")[2], "draining (drained)");
        let out = drain_result(&bs[..2], false, 1_700_000_000);
        assert!(out.starts_with(
            "Undrained 2 backends: new flows are sent to them again unless down or retiring.\n"
        ));
        assert_eq!(rows(&out, "1").len(), 1);
        assert_eq!(drain_result(&[], true, 0), "No backend matched.\n");
    }

    #[test]
    fn stats_tables() {
        let s = Stats {
            vips: vec![
                VipStats {
                    name: "web".into(),
                    service_id: 1,
                    packets: 1_234_567,
                    bytes: 1_258_291, // 1.2 MiB
                    new_flows: 4_321,
                    drops: 3,
                    reply_packets: 1_100_000,
                    reply_bytes: 900,
                },
                VipStats {
                    name: "dns6".into(),
                    service_id: 2,
                    packets: 0,
                    bytes: 0,
                    new_flows: 0,
                    drops: 0,
                    reply_packets: 0,
                    reply_bytes: 0,
                },
            ],
            drops: vec![
                DropCount {
                    reason: "no_backend".into(),
                    packets: 17,
                },
                DropCount {
                    reason: "bad_header".into(),
                    packets: 2,
                },
            ],
            at_unix_ms: 1_700_000_000_000,
            tables: vec![],
            backends: vec![],
            flow_guard: None,
            flow_filter: None,
            snat: None,
        };
        let out = stats(&totals_only(s));
        println!("{out}");
        assert_eq!(
            row(&out, "VIP"),
            [
                "VIP",
                "SERVICE ID",
                "PACKETS",
                "BYTES",
                "NEW FLOWS",
                "DROPS",
                "REPLY PACKETS",
                "REPLY BYTES"
            ]
        );
        assert_eq!(
            row(&out, "web"),
            [
                "web", "1", "1234567", "1.2 MiB", "4321", "3", "1100000", "900 B"
            ]
        );
        assert_eq!(
            row(&out, "dns6"),
            ["dns6", "2", "0", "0 B", "0", "0", "0", "0 B"]
        );
        assert!(out.contains("\nDrops by reason:\n"));
        assert_eq!(row(&out, "DROP REASON"), ["DROP REASON", "PACKETS"]);
        assert_eq!(row(&out, "no_backend"), ["no_backend", "17"]);
        assert_eq!(row(&out, "bad_header"), ["bad_header", "2"]);

        // No rates without an interval, and no flow tables when none are
        // reported (older daemon).
        assert!(!out.contains("PKT/S") && !out.contains("rates over"));
        assert!(!out.contains("Flow tables"));

        let none = stats(&totals_only(Stats {
            vips: vec![],
            drops: vec![],
            at_unix_ms: 0,
            tables: vec![],
            backends: vec![],
            flow_guard: None,
            flow_filter: None,
            snat: None,
        }));
        assert_eq!(none, "No VIP counters.\n\nDrops by reason: none\n");
    }

    #[test]
    fn stats_show_source_translation_once_it_did_something() {
        let mut s = Stats {
            vips: vec![],
            drops: vec![rivora_api::DropCount {
                reason: "snat_exhausted".into(),
                packets: 2,
            }],
            at_unix_ms: 0,
            tables: vec![],
            backends: vec![],
            flow_guard: None,
            flow_filter: None,
            snat: Some(rivora_api::SnatStats {
                source_v4: Some("10.220.0.11".into()),
                source_v6: Some("fd00:220::11".into()),
                ports: "61000-65535".into(),
                counters: [("allocated", 7), ("forwarded", 70), ("replied", 65)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            }),
        };
        let out = stats(&totals_only(s.clone()));
        assert!(
            out.contains(
                "Source translation (backends on other nodes): from 10.220.0.11 and fd00:220::11 \
                 ports 61000-65535; 7 flows mapped (0 by taking over idle ports, 2 refused: no \
                 port), 70 packets out, 65 replies back, 0 unmatched, 0 via the kernel"
            ),
            "{out}"
        );
        s.drops.clear();
        s.snat.as_mut().unwrap().counters.clear();
        assert!(!stats(&totals_only(s)).contains("Source translation"));
    }

    #[test]
    fn stats_rates_from_two_samples() {
        let earlier = sample(
            1_700_000_000_000,
            vec![
                vip("web", 1, 1_000_000, 1_000_000_000, 40_000),
                vip("dns6", 2, 70, 7_000, 70),
            ],
        );
        let mut later = sample(
            1_700_000_000_500,
            vec![
                // +6,150 pkt, +629,146 B (0.6 MiB), +250 flows in 0.5 s.
                vip("web", 1, 1_006_150, 1_000_629_146, 40_250),
                // Counters went backwards: the programs were reloaded.
                vip("dns6", 2, 5, 500, 5),
                // Appeared between the samples.
                vip("new", 3, 9, 900, 9),
            ],
        );
        later.tables = vec![
            TableUsage {
                name: "connection_affinity_map".into(),
                entries: 950_000,
                capacity: 1_000_000,
            },
            TableUsage {
                name: "snat_map".into(),
                entries: 32_768,
                capacity: 65_536,
            },
        ];
        let r = with_rates(&earlier, later, Duration::from_millis(700));
        let out = stats(&r);
        println!("{out}");
        assert!(
            out.starts_with("Totals since the programs were loaded; rates over the last 0.5s.\n"),
            "{out}"
        );
        assert_eq!(
            row(&out, "VIP"),
            [
                "VIP",
                "SERVICE ID",
                "PACKETS",
                "PKT/S",
                "BYTES",
                "BYTES/S",
                "NEW FLOWS",
                "FLOWS/S",
                "DROPS",
                "REPLY PACKETS",
                "REPLY BYTES"
            ]
        );
        assert_eq!(
            row(&out, "web"),
            [
                "web",
                "1",
                "1006150",
                "12.3k/s",
                "954.3 MiB",
                "1.2 MiB/s",
                "40250",
                "500/s",
                "10061",
                "503075",
                "477.1 MiB"
            ]
        );
        assert_eq!(
            row(&out, "dns6"),
            [
                "dns6", "2", "5", "-", "500 B", "-", "5", "-", "0", "2", "250 B"
            ]
        );
        assert_eq!(row(&out, "new")[3], "-");
        assert_eq!(
            row(&out, "FLOW TABLE"),
            ["FLOW TABLE", "ENTRIES", "CAPACITY", "FULL"]
        );
        assert_eq!(
            row(&out, "connection_affinity_map"),
            ["connection_affinity_map", "950000", "1000000", "95.0% !"]
        );
        assert_eq!(
            row(&out, "snat_map"),
            ["snat_map", "32768", "65536", "50.0%"]
        );
        assert!(out.ends_with("! = at least 90% full: once full, new flows evict live ones.\n"));
    }

    #[test]
    fn table_fill_marker() {
        assert_eq!(fill(0, 100), ("0.0%".to_string(), false));
        assert_eq!(fill(899_999, 1_000_000), ("89.9%".to_string(), false));
        assert_eq!(fill(9, 10), ("90.0% !".to_string(), true));
        assert_eq!(fill(100, 100), ("100.0% !".to_string(), true));
        assert_eq!(fill(5, 0), ("-".to_string(), false));
        assert_eq!(fill(u64::MAX, u64::MAX), ("100.0% !".to_string(), true));
        // Below the threshold, no flag and no footnote.
        let out = flow_tables(&[TableUsage {
            name: "t".into(),
            entries: 1,
            capacity: 2,
        }]);
        assert!(!out.contains('!'), "{out}");
        assert_eq!(flow_tables(&[]), "");
    }

    #[test]
    fn watch_view() {
        let earlier = sample(1_000, vec![vip("web", 1, 0, 0, 0)]);
        let later = sample(3_000, vec![vip("web", 1, 200, 4096, 10)]);
        let frame = WatchFrame {
            stats: with_rates(&earlier, later, Duration::from_secs(2)),
            backends: sample_backends(),
        };
        let out = watch(&frame, 1_700_000_000);
        println!("{out}");
        assert!(out.starts_with(
            "rivorad at 2023-11-14 22:13:20 UTC: rates over the last 2s (q or Ctrl-C to stop)\n"
        ));
        assert_eq!(
            row(&out, "web"),
            [
                "web",
                "100/s",
                "2.0 KiB/s",
                "5.0/s",
                "1.0/s",
                "50/s",
                "1.0 KiB/s",
                "200",
                "10"
            ]
        );
        assert_eq!(row(&out, "connection_affinity_map")[3], "10.0%");
        assert_eq!(row(&out, "2")[2], "draining (drained)");
    }

    /// 200 backends: `stats` shows 50 rows, the draining and down ones
    /// first, then the busiest, and sums the rest up in one line.
    #[test]
    fn many_backends_are_summed_up() {
        let b = |id: u32, state: &str, packets: u64| BackendStats {
            backend_id: id,
            address: format!("10.0.{}.{}", id / 256, id % 256),
            port: 80,
            state: state.into(),
            counters: BackendCounters {
                packets,
                bytes: packets * 100,
                new_flows: packets / 10,
                last_packet_age_ms: (packets > 0).then_some(1_000),
                last_packet_unix_ms: None,
            },
        };
        let backends = |step: u64| -> Vec<BackendStats> {
            (0..200u32)
                .map(|id| match id {
                    7 => b(id, "draining", 5),
                    150 => b(id, "down", 0),
                    // Backend id N gets N packets per step.
                    _ => b(id, "healthy", 1_000 + u64::from(id) * step),
                })
                .collect()
        };
        let mut earlier = sample(1_000, vec![]);
        earlier.backends = backends(0);
        let mut later = sample(2_000, vec![]);
        later.backends = backends(1);
        let r = with_rates(&earlier, later.clone(), Duration::from_secs(1));
        let out = stats(&r);
        println!("{out}");
        let ids: Vec<u32> = out
            .lines()
            .filter(|l| l.starts_with('|'))
            .filter_map(|l| l.trim_matches('|').split('|').next()?.trim().parse().ok())
            .collect();
        // Not healthy first, then the 48 busiest (ids 199 down to 152, 150
        // being down), shown in id order.
        let mut want: Vec<u32> = vec![7, 150];
        want.extend((151..200).filter(|id| *id != 150).rev().take(48));
        want.sort();
        assert_eq!(ids, want);
        // The 150 others: ids 0..151 but 7 and 150, 1,000 + id packets each.
        let rest: Vec<u64> = (0..152u64).filter(|id| *id != 7 && *id != 150).collect();
        let packets: u64 = rest.iter().map(|id| 1_000 + id).sum();
        let pps: u64 = rest.iter().sum();
        assert!(
            out.contains(&format!(
                "... and 150 more backends ({packets} packets, {}); all: rivoractl backends, or -o json\n",
                per_sec(Some(pps as f64))
            )),
            "{out}"
        );
        assert_eq!(row(&out, "7")[2], "draining");
        assert_eq!(row(&out, "199")[4], "199/s");

        // watch: 20 rows, the draining one's drain shown as quiet.
        let frame = WatchFrame {
            stats: r,
            backends: vec![],
        };
        let out = watch(&frame, 1_700_000_000);
        println!("{out}");
        let seven = row(&out, "7");
        assert_eq!(seven[3], "0/s");
        assert_eq!(seven[8], "quiet for 1.0s");
        assert!(out.contains("... and 180 more backends"), "{out}");
        assert_eq!(
            out.lines()
                .filter(|l| l.starts_with('|'))
                .filter(|l| l.contains("10.0."))
                .count(),
            WATCH_BACKEND_ROWS
        );
        // Totals only (no interval): the busiest by packets.
        let out = stats(&totals_only(later));
        assert!(out.contains("... and 150 more backends ("), "{out}");
        assert!(!out.contains("pkt/s"), "{out}");
    }

    #[test]
    fn last_packet_ages() {
        let c = |packets, age| BackendCounters {
            packets,
            last_packet_age_ms: age,
            ..Default::default()
        };
        assert_eq!(last_packet(&c(0, None)), "never");
        assert_eq!(last_packet(&c(5, None)), "-");
        assert_eq!(last_packet(&c(5, Some(40))), "0.0s ago");
        assert_eq!(last_packet(&c(5, Some(9_949))), "9.9s ago");
        assert_eq!(last_packet(&c(5, Some(12_000))), "12s ago");
        assert_eq!(last_packet(&c(5, Some(7_200_000))), "2h ago");
        assert_eq!(quiet_for(125_000), "2m 5s");
        assert_eq!(quiet_for(7_500_000), "2h 5m");
    }

    #[test]
    fn rate_units() {
        assert_eq!(per_sec(None), "-");
        assert_eq!(per_sec(Some(0.0)), "0/s");
        assert_eq!(per_sec(Some(0.25)), "0.2/s");
        assert_eq!(per_sec(Some(9.96)), "10/s");
        assert_eq!(per_sec(Some(999.4)), "999/s");
        assert_eq!(per_sec(Some(999.6)), "1.0k/s");
        assert_eq!(per_sec(Some(12_345.0)), "12.3k/s");
        assert_eq!(per_sec(Some(999_960.0)), "1.0M/s");
        assert_eq!(per_sec(Some(2.5e9)), "2.5G/s");
        assert_eq!(bytes_per_sec(None), "-");
        assert_eq!(bytes_per_sec(Some(0.0)), "0 B/s");
        assert_eq!(bytes_per_sec(Some(512.4)), "512 B/s");
        assert_eq!(bytes_per_sec(Some(1023.6)), "1.0 KiB/s");
        assert_eq!(bytes_per_sec(Some(1_258_291.0)), "1.2 MiB/s");
        assert_eq!(millis(0.42), "0.4 ms");
        assert_eq!(millis(12.3), "12 ms");
        assert_eq!(millis(1500.0), "1.50 s");
        assert_eq!(seconds(1.0), "1s");
        assert_eq!(seconds(0.2), "0.2s");
        assert_eq!(seconds(2.25), "2.25s");
    }

    #[test]
    fn relative_times() {
        assert_eq!(ago(0, 100), "-");
        assert_eq!(ago(100, 100), "0s ago");
        assert_eq!(ago(100, 159), "59s ago");
        assert_eq!(ago(100, 160), "1m ago");
        assert_eq!(ago(100, 100 + 3599), "59m ago");
        assert_eq!(ago(100, 100 + 3600), "1h ago");
        assert_eq!(ago(100, 100 + 86_400 * 3), "3d ago");
        assert_eq!(ago(200, 100), "just now");
    }

    #[test]
    fn json_is_pretty_dto() {
        let v = sample_vips();
        let out = json(&v);
        assert!(out.starts_with("[\n  {\n    \"name\": \"web\""));
        assert!(out.ends_with("]\n"));
        let back: Vec<VipInfo> = serde_json::from_str(&out).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn byte_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.0 KiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(1_048_575), "1.0 MiB");
        assert_eq!(human_bytes(5 * 1024 * 1024 * 1024), "5.0 GiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn endpoints() {
        assert_eq!(endpoint("10.0.0.1", 80, Some("tcp")), "10.0.0.1:80/tcp");
        assert_eq!(endpoint("::1", 443, None), "[::1]:443");
        assert_eq!(endpoint("fe80::1", 53, Some("udp")), "[fe80::1]:53/udp");
        assert_eq!(frontend("10.0.0.1", 80, 80, "tcp"), "10.0.0.1:80/tcp");
        assert_eq!(frontend("10.0.0.1", 80, 0, "tcp"), "10.0.0.1:80/tcp");
        assert_eq!(
            frontend("10.0.0.1", 8000, 8099, "tcp"),
            "10.0.0.1:8000-8099/tcp"
        );
        assert_eq!(
            frontend("2001:db8::1", 0, 65535, "udp"),
            "[2001:db8::1]:any/udp"
        );
        assert_eq!(
            frontend("10.0.0.1", 1, 65535, "tcp"),
            "10.0.0.1:1-65535/tcp"
        );
        assert_eq!(backend_endpoint("10.0.0.1", 8080), "10.0.0.1:8080");
        assert_eq!(backend_endpoint("::1", 0), "::1 (dest port)");
    }

    #[test]
    fn dates_and_durations() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc(4_102_444_799), "2099-12-31 23:59:59 UTC");
        assert_eq!(duration(45), "45s");
        assert_eq!(duration(303), "5m 3s");
        assert_eq!(duration(3 * 3600 + 120), "3h 2m");
        assert_eq!(duration(2 * 86_400 + 4 * 3600 + 5), "2d 4h");
    }

    #[test]
    fn bgp_table_shows_peers_and_routes() {
        use rivora_api::{BgpPeerInfo, BgpRouteInfo};
        assert!(bgp(&BgpStatus::default(), None).contains("BGP is not configured"));
        let b = BgpStatus {
            enabled: true,
            local_as: Some(65010),
            router_id: Some("192.0.2.2".into()),
            peers: vec![
                BgpPeerInfo {
                    address: "192.0.2.1".into(),
                    port: 179,
                    remote_as: 65000,
                    state: "Established".into(),
                    uptime_secs: Some(125),
                    prefixes_sent: 2,
                    last_error: None,
                },
                BgpPeerInfo {
                    address: "2001:db8::1".into(),
                    port: 1179,
                    remote_as: 65001,
                    state: "Active".into(),
                    uptime_secs: None,
                    prefixes_sent: 0,
                    last_error: Some("TCP-MD5 is configured".into()),
                },
            ],
            routes: vec![BgpRouteInfo {
                prefix: "203.0.113.10/32".into(),
                communities: vec!["65010:100".into(), "65010:200".into()],
                vips: vec!["web".into(), "web-tls".into()],
            }],
        };
        let out = bgp(&b, None);
        assert!(
            out.starts_with("Local AS 65010, router ID 192.0.2.2\n"),
            "{out}"
        );
        assert_eq!(
            row(&out, "192.0.2.1:179"),
            ["192.0.2.1:179", "65000", "Established", "2m 5s", "2", "-"]
        );
        assert_eq!(
            row(&out, "[2001:db8::1]:1179"),
            [
                "[2001:db8::1]:1179",
                "65001",
                "Active",
                "-",
                "0",
                "TCP-MD5 is configured"
            ]
        );
        assert_eq!(
            row(&out, "203.0.113.10/32"),
            ["203.0.113.10/32", "65010:100 65010:200", "web, web-tls"]
        );
        // Kubernetes: each session named by its BGPPeer, refused ones listed.
        let k = rivora_api::KubernetesStatus {
            announce: "bgp".into(),
            bgp_peers: vec!["tor-a".into(), "tor-b".into()],
            bgp_problems: vec![
                "BGPPeer tor-c: spec.passwordSecretRef: Secret x/y not found".into(),
            ],
            ..Default::default()
        };
        let out = bgp(&b, Some(&k));
        assert_eq!(
            row(&out, "tor-a"),
            [
                "tor-a",
                "192.0.2.1:179",
                "65000",
                "Established",
                "2m 5s",
                "2",
                "-"
            ]
        );
        assert_eq!(row(&out, "tor-b")[1], "[2001:db8::1]:1179");
        assert!(
            out.contains("Refused: BGPPeer tor-c: spec.passwordSecretRef"),
            "{out}"
        );
        let off = bgp(&BgpStatus::default(), Some(&k));
        assert!(
            off.starts_with("BGP: no BGPPeer selects this node"),
            "{off}"
        );
        assert!(off.contains("Refused: BGPPeer tor-c"), "{off}");
        let none = bgp(
            &BgpStatus {
                routes: vec![],
                ..b
            },
            None,
        );
        assert!(none.contains("No routes announced"), "{none}");
    }

    #[test]
    fn speaker_table_shows_vips() {
        use rivora_api::SpeakerVipInfo;
        assert!(speaker(&SpeakerStatus::default(), None, 0).contains("not configured"));
        let s = SpeakerStatus {
            enabled: true,
            interface: Some("eth0".into()),
            mac: Some("02:00:00:00:00:01".into()),
            active: true,
            announce_interval_secs: 60,
            vips: vec![
                SpeakerVipInfo {
                    address: "10.0.0.100".into(),
                    answering: true,
                    since_unix: Some(1000),
                    replies_sent: 4,
                    announcements_sent: 2,
                    last_announce_unix: Some(1050),
                },
                SpeakerVipInfo {
                    address: "fd00::100".into(),
                    answering: false,
                    since_unix: None,
                    replies_sent: 0,
                    announcements_sent: 0,
                    last_announce_unix: None,
                },
            ],
            error: None,
            link_up: None,
            fenced: 0,
        };
        let out = speaker(&s, None, 1060);
        assert!(
            out.starts_with("Interface eth0 (02:00:00:00:00:01), active, announcing every 1m 0s\n"),
            "{out}"
        );
        assert_eq!(
            row(&out, "10.0.0.100"),
            ["10.0.0.100", "yes", "1m ago", "4", "2", "10s ago"]
        );
        assert_eq!(
            row(&out, "fd00::100"),
            ["fd00::100", "no", "-", "0", "0", "-"]
        );
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

    fn cls_counters(packets: u64, bytes: u64, no_target: u64, other: u64) -> ClsCounters {
        ClsCounters {
            packets,
            bytes,
            no_target,
            other,
        }
    }

    /// Two groups (one without targets), three rules (one with every kind
    /// of match), two VIPs (one that cannot forward).
    fn sample_classifier() -> ClassifierStatus {
        use rivora_api::{ClsGroupInfo, ClsRuleInfo, ClsTargetInfo, ClsVipInfo};
        let rule = |name: &str, priority: i32, group: &str, vips: &[&str]| ClsRuleInfo {
            name: name.into(),
            rule_id: priority as u32,
            priority,
            group: group.into(),
            vips: vips.iter().map(|v| v.to_string()).collect(),
            sources: vec![],
            source_ports: vec![],
            destination_ports: vec![],
            protocols: vec!["TCP".into(), "UDP".into()],
            byte_matches: vec![],
            counters: ClsCounters::default(),
        };
        let mut web = rule("web", 10, "dg-a", &["10.200.100.5", "fd00:200:100::5"]);
        web.destination_ports = vec!["80".into()];
        web.counters = cls_counters(1_234, 150_000, 0, 2);
        let mut range = rule("udp-range", 20, "dg-b", &["10.200.100.5"]);
        range.protocols = vec!["UDP".into()];
        range.destination_ports = vec!["9000-9100".into()];
        range.counters = cls_counters(0, 0, 5, 0);
        let mut sctp = rule("ns/sctp", 10, "dg-a", &["fd00:200:100::9"]);
        sctp.protocols = vec!["SCTP".into()];
        sctp.sources = vec!["192.0.2.0/24".into(), "2001:db8::/32".into()];
        sctp.source_ports = vec!["1024-65535".into()];
        sctp.byte_matches = vec!["sctp[4:4]=0".into()];
        ClassifierStatus {
            vips: vec![
                ClsVipInfo {
                    address: "10.200.100.5".into(),
                    stats_id: 0,
                    rules: vec!["udp-range".into(), "web".into()],
                    ready: true,
                    counters: cls_counters(1_000, 140_000, 5, 7),
                },
                ClsVipInfo {
                    address: "fd00:200:100::9".into(),
                    stats_id: 1,
                    rules: vec!["ns/sctp".into()],
                    ready: false,
                    counters: ClsCounters::default(),
                },
            ],
            rules: vec![sctp, range, web],
            groups: vec![
                ClsGroupInfo {
                    name: "dg-a".into(),
                    group_id: 0,
                    max_endpoints: 32,
                    table_size: 3191,
                    sctp_hash: "ports".into(),
                    targets: vec![
                        ClsTargetInfo {
                            slot: 0,
                            v4: Some("10.200.1.11".into()),
                            v6: Some("fd00:200:1::11".into()),
                        },
                        ClsTargetInfo {
                            slot: 7,
                            v4: Some("10.200.1.12".into()),
                            v6: None,
                        },
                    ],
                    slots_v4: 2,
                    slots_v6: 1,
                    counters: cls_counters(1_234, 150_000, 0, 2),
                },
                ClsGroupInfo {
                    name: "dg-b".into(),
                    group_id: 1,
                    max_endpoints: 8,
                    table_size: 797,
                    sctp_hash: "five-tuple".into(),
                    targets: vec![],
                    slots_v4: 0,
                    slots_v6: 0,
                    counters: cls_counters(0, 0, 5, 0),
                },
            ],
            events: [("no_rule", 7), ("no_target", 5), ("echo", 0)]
                .map(|(e, n)| (e.to_string(), n))
                .into(),
            unclaimed_vips: vec![],
        }
    }

    #[test]
    fn rules_table_in_priority_order_with_counters() {
        let out = rules(&sample_classifier());
        println!("{out}");
        assert_eq!(
            row(&out, "RULE"),
            [
                "RULE",
                "PRIORITY",
                "GROUP",
                "VIPS",
                "PROTOCOLS",
                "SOURCES",
                "SOURCE PORTS",
                "DEST PORTS",
                "BYTE MATCHES",
                "PACKETS",
                "BYTES",
                "NO-TARGET DROPS",
                "OTHER DROPS"
            ]
        );
        // Highest priority first, then by name.
        let names: Vec<String> = out
            .lines()
            .filter(|l| l.starts_with('|'))
            .map(|l| {
                l.trim_matches('|')
                    .split('|')
                    .next()
                    .unwrap()
                    .trim()
                    .to_string()
            })
            .take_while(|n| n != "VIP")
            .skip(1)
            .collect();
        assert_eq!(names, ["udp-range", "ns/sctp", "web"]);
        assert_eq!(
            row(&out, "web"),
            [
                "web",
                "10",
                "dg-a",
                "10.200.100.5, fd00:200:100::5",
                "TCP,UDP",
                "any",
                "any",
                "80",
                "-",
                "1234",
                "146.5 KiB",
                "0",
                "2"
            ]
        );
        assert_eq!(
            row(&out, "ns/sctp")[4..9],
            [
                "SCTP",
                "192.0.2.0/24, 2001:db8::/32",
                "1024-65535",
                "any",
                "sctp[4:4]=0"
            ]
        );
        assert_eq!(row(&out, "udp-range")[9..], ["0", "0 B", "5", "0"]);
        // Each VIP's rules in evaluation order, whether it forwards, counters.
        assert!(
            out.contains("\nRules per VIP, in evaluation order (the first that matches wins):\n")
        );
        assert_eq!(
            row(&out, "VIP"),
            [
                "VIP",
                "READY",
                "RULES",
                "PACKETS",
                "BYTES",
                "NO-TARGET DROPS",
                "OTHER DROPS"
            ]
        );
        assert_eq!(
            row(&out, "10.200.100.5"),
            [
                "10.200.100.5",
                "yes",
                "udp-range, web",
                "1000",
                "136.7 KiB",
                "5",
                "7"
            ]
        );
        assert_eq!(
            row(&out, "fd00:200:100::9")[1],
            "no (no target of its family)"
        );
        // Events that happened, by name.
        assert!(
            out.ends_with("Classifier events: no_rule 7, no_target 5\n"),
            "{out}"
        );
    }

    #[test]
    fn rules_table_hides_match_columns_no_rule_uses() {
        let mut c = sample_classifier();
        c.rules.retain(|r| r.name != "ns/sctp");
        c.vips.truncate(1);
        c.events.clear();
        let out = rules(&c);
        println!("{out}");
        assert_eq!(
            row(&out, "RULE")[..6],
            [
                "RULE",
                "PRIORITY",
                "GROUP",
                "VIPS",
                "PROTOCOLS",
                "DEST PORTS"
            ]
        );
        assert_eq!(row(&out, "web")[5], "80");
        assert!(out.ends_with("Classifier events: none\n"), "{out}");
        c.unclaimed_vips = vec!["10.9.9.9".into()];
        assert!(rules(&c).contains(
            "Adopted from pinned maps and not claimed yet (forwarding with an earlier rivorad's rules): 10.9.9.9\n"
        ));
        assert_eq!(
            rules(&ClassifierStatus::default()),
            "No classifier rules programmed.\n"
        );
    }

    #[test]
    fn groups_table_and_targets() {
        let out = groups(&sample_classifier());
        println!("{out}");
        assert_eq!(
            row(&out, "GROUP"),
            [
                "GROUP",
                "SLOTS",
                "TABLE SIZE",
                "SCTP HASH",
                "IPV4 TARGETS",
                "IPV6 TARGETS",
                "RULES",
                "PACKETS",
                "BYTES",
                "NO-TARGET DROPS",
                "OTHER DROPS"
            ]
        );
        let a = rows(&out, "dg-a");
        assert_eq!(
            a[0],
            [
                "dg-a",
                "32",
                "3191",
                "ports",
                "2",
                "1",
                "ns/sctp, web",
                "1234",
                "146.5 KiB",
                "0",
                "2"
            ]
        );
        let b = rows(&out, "dg-b");
        assert_eq!(
            b[0],
            [
                "dg-b",
                "8",
                "797",
                "five-tuple",
                "0",
                "0",
                "udp-range",
                "0",
                "0 B",
                "5",
                "0"
            ]
        );
        // The targets table, by slot; a group without any says so.
        assert!(out.contains("\nTargets per group (a target always takes its slot):\n"));
        assert_eq!(a[1], ["dg-a", "0", "10.200.1.11", "fd00:200:1::11"]);
        assert_eq!(a[2], ["dg-a", "7", "10.200.1.12", "-"]);
        assert_eq!(b[1], ["dg-b", "(no targets)", "-", "-"]);
        assert_eq!(
            groups(&ClassifierStatus::default()),
            "No classifier groups programmed.\n"
        );
    }

    #[test]
    fn vips_and_status_show_the_classifier_when_there_is_one() {
        let c = sample_classifier();
        // After the other VIPs' tables.
        let out = vips_with_classifier(&sample_vips(), &Ok(Some(c.clone())));
        println!("{out}");
        assert!(out.starts_with(&vips(&sample_vips())), "{out}");
        assert!(out.contains(
            "\nClassifier VIPs (rules in evaluation order; see rivoractl rules and rivoractl groups):\n"
        ));
        assert_eq!(row(&out, "10.200.100.5")[2], "udp-range, web");
        // Alone when there are no others (not "No VIPs configured.").
        let alone = vips_with_classifier(&[], &Ok(Some(c.clone())));
        assert!(alone.starts_with("Classifier VIPs "), "{alone}");
        // No classifier (a rivorad without one, or an empty one): unchanged.
        assert_eq!(
            vips_with_classifier(&sample_vips(), &Ok(None)),
            vips(&sample_vips())
        );
        assert_eq!(
            vips_with_classifier(&[], &Ok(Some(ClassifierStatus::default()))),
            "No VIPs configured.\n"
        );
        assert!(
            vips_with_classifier(&[], &Err("HTTP 500: map".into()))
                .ends_with("\nClassifier: cannot read: HTTP 500: map\n")
        );

        assert_eq!(
            classifier_row(&Ok(Some(c.clone()))).as_deref(),
            Some("2 VIPs (1 ready), 3 rules, 2 groups")
        );
        let mut one = c.clone();
        one.vips.truncate(1);
        one.rules.truncate(1);
        one.groups.truncate(1);
        one.unclaimed_vips = vec!["10.9.9.9".into()];
        assert_eq!(
            classifier_row(&Ok(Some(one))).as_deref(),
            Some("1 VIP (1 ready), 1 rule, 1 group; 1 VIP adopted and unclaimed")
        );
        assert_eq!(classifier_row(&Ok(None)), None);
        assert_eq!(classifier_row(&Ok(Some(ClassifierStatus::default()))), None);
        let s = sample_status();
        let out = status_with(&s, classifier_row(&Ok(Some(c))), 1_700_003_660);
        assert_eq!(
            row(&out, "Classifier"),
            ["Classifier", "2 VIPs (1 ready), 3 rules, 2 groups"]
        );
        assert_eq!(
            status_with(&s, None, 1_700_003_660),
            status(&s, 1_700_003_660)
        );
        assert!(!status(&s, 1_700_003_660).contains("Classifier"));
    }
}
