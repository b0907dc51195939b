//! `rivoractl stats`: per-VIP and per-backend counters (with rates when two
//! samples were taken), drops by reason, flow-table fill, and the new-flow
//! guard, flow filter and source translation lines.
//!
//! Separate from `watch` (a screenful of current rates), which reuses the
//! backend picking, rate look-ups and flow-table table defined here.

use std::fmt::Write as _;

use rivora_api::{BackendStats, TableUsage, VipStats};

use super::backends::last_packet;
use super::format::{
    backend_endpoint, bytes_per_sec, finish, human_bytes, per_sec, right_align, seconds, table,
};
use super::{FULL_WARN_PCT, NONE, STATS_BACKEND_ROWS};
use crate::rates::{BackendRates, StatsReport, VipRates};

/// Which backends a table of at most `cap` rows shows: all when they fit;
/// otherwise those not healthy first (a drain or an outage is what an
/// operator looks for), then the busiest (by `busy`). Returned in backend id
/// order, with the number left out.
pub(super) fn pick_backends(
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

pub(super) fn backend_rates_of<'a>(
    r: &'a StatsReport,
    b: &BackendStats,
) -> Option<&'a BackendRates> {
    r.backend_rates
        .iter()
        .find(|x| x.backend_id == b.backend_id)
}

/// A line summing up the backends a table left out.
pub(super) fn hidden_backends(r: &StatsReport, shown: &[&BackendStats], hidden: usize) -> String {
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

/// Flow-table fill levels, flagging tables close to full; empty when the
/// daemon reports none.
pub(super) fn flow_tables(tables: &[TableUsage]) -> String {
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

pub(super) fn rates_of<'a>(r: &'a StatsReport, v: &VipStats) -> Option<&'a VipRates> {
    r.rates
        .iter()
        .find(|x| x.service_id == v.service_id && x.name == v.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rates::tests::{sample, vip};
    use crate::rates::{WatchFrame, totals_only, with_rates};
    use crate::render::WATCH_BACKEND_ROWS;
    use crate::render::test_support::row;
    use crate::render::watch::watch;
    use rivora_api::{BackendCounters, DropCount, Stats};
    use std::time::Duration;

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
}
