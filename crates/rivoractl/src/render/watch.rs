//! `rivoractl watch`: one refresh of the live view, current rates per VIP,
//! flow-table fill, then the backends with the progress of drains.
//!
//! Separate from `stats` (totals and every table): this view is a screenful
//! redrawn every interval, and its DRAIN column exists only here.

use rivora_api::{BackendInfo, BackendStats};

use super::backends::{backend_state, backends, last_packet};
use super::format::{
    backend_endpoint, bytes_per_sec, finish, per_sec, quiet_for, right_align, seconds, table, utc,
};
use super::stats::{backend_rates_of, flow_tables, hidden_backends, pick_backends, rates_of};
use super::{NONE, WATCH_BACKEND_ROWS};
use crate::rates::{BackendRates, StatsReport, WatchFrame};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rates::tests::{sample, vip};
    use crate::rates::with_rates;
    use crate::render::test_support::{row, sample_backends};
    use std::time::Duration;

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
}
