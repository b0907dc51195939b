//! `rivoractl backends`, `drain` and `undrain`: one row per backend with its
//! state and why, counters, last packet and health probe.
//!
//! Separate from `vips` (per VIP, as configured): this is the per-backend
//! view, whose state and last-packet cells `stats` and `watch` reuse.

use rivora_api::{BackendCounters, BackendInfo};

use super::NONE;
use super::format::{ago, backend_endpoint, finish, human_bytes, millis, right_align, table};

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

/// `draining (drained)`: the state, plus why when an operator drain or a
/// retirement is behind it.
pub(super) fn backend_state(b: &BackendInfo) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::format::quiet_for;
    use crate::render::test_support::{row, rows, sample_backends};

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
}
