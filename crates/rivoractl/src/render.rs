//! Turning API answers into text: ASCII tables for humans, pretty JSON for
//! scripts.
//!
//! Kept free of I/O and of the clock (callers pass `now`) so every table can
//! be unit-tested for its exact cells.

use std::fmt::Write as _;
use std::net::Ipv6Addr;

use comfy_table::presets::ASCII_FULL_CONDENSED;
use comfy_table::{CellAlignment, Table};
use rivora_api::{BackendInfo, Stats, Status, VipInfo};
use serde::Serialize;

/// Placeholder for absent values, so empty cells are never ambiguous.
const NONE: &str = "-";

/// Pretty JSON of any API answer, newline-terminated.
pub fn json<T: Serialize + ?Sized>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).expect("API types always serialize");
    s.push('\n');
    s
}

/// `rivoractl status`: one key/value table, programs included.
pub fn status(s: &Status, now_unix: u64) -> String {
    let mut t = table();
    let mut kv = |k: &str, v: String| {
        t.add_row(vec![k.to_string(), v]);
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
    finish(t)
}

/// `rivoractl vips`: a VIP table, then a table of every VIP's backends.
pub fn vips(vips: &[VipInfo]) -> String {
    if vips.is_empty() {
        return "No VIPs configured.\n".into();
    }
    let mut t = table();
    t.set_header(vec![
        "VIP",
        "FRONTEND",
        "MODE",
        "SERVICE ID",
        "BACKENDS",
        "MAGLEV SLICE",
        "IMBALANCE",
    ]);
    for v in vips {
        t.add_row(vec![
            v.name.clone(),
            endpoint(&v.address, v.port, Some(&v.protocol)),
            v.mode.clone(),
            v.service_id.to_string(),
            v.backends.len().to_string(),
            format!("{}+{}", v.maglev_offset, v.maglev_size),
            format!("{:.2}%", v.worst_imbalance_pct),
        ]);
    }
    right_align(&mut t, &[3, 4, 6]);

    let mut b = table();
    b.set_header(vec!["VIP", "BACKEND", "WEIGHT", "BACKEND ID", "STATE"]);
    for v in vips {
        if v.backends.is_empty() {
            b.add_row(vec![v.name.as_str(), "(no backends)", NONE, NONE, NONE]);
        }
        for be in &v.backends {
            b.add_row(vec![
                v.name.clone(),
                endpoint(&be.address, be.port, None),
                be.weight.to_string(),
                be.backend_id.to_string(),
                be.state.clone(),
            ]);
        }
    }
    right_align(&mut b, &[2, 3]);

    let mut out = finish(t);
    out.push_str("\nBackends per VIP:\n");
    out.push_str(&finish(b));
    out
}

/// `rivoractl backends`: one row per backend.
pub fn backends(backends: &[BackendInfo]) -> String {
    if backends.is_empty() {
        return "No backends configured.\n".into();
    }
    let mut t = table();
    t.set_header(vec!["BACKEND ID", "BACKEND", "STATE", "VIPS"]);
    for b in backends {
        let vips = if b.vips.is_empty() {
            NONE.to_string()
        } else {
            b.vips.join(", ")
        };
        t.add_row(vec![
            b.backend_id.to_string(),
            endpoint(&b.address, b.port, None),
            b.state.clone(),
            vips,
        ]);
    }
    right_align(&mut t, &[0]);
    finish(t)
}

/// `rivoractl stats`: per-VIP counters, then drops by reason.
pub fn stats(s: &Stats) -> String {
    let mut out = String::new();
    if s.vips.is_empty() {
        out.push_str("No VIP counters.\n");
    } else {
        let mut t = table();
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
        out.push_str(&finish(t));
    }
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
    out
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

/// Binary-prefixed size with one decimal (`512 B`, `1.2 MiB`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
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
    use rivora_api::{DropCount, ProgramInfo, ReloadInfo, VipBackend, VipStats};

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
            persist_datapath: false,
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
                protocol: "tcp".into(),
                mode: "ipip".into(),
                service_id: 1,
                maglev_offset: 0,
                maglev_size: 65537,
                worst_imbalance_pct: 0.372,
                backends: vec![
                    VipBackend {
                        address: "192.168.1.10".into(),
                        port: 8080,
                        weight: 100,
                        backend_id: 1,
                        state: "healthy".into(),
                    },
                    VipBackend {
                        address: "192.168.1.11".into(),
                        port: 8080,
                        weight: 50,
                        backend_id: 2,
                        state: "draining".into(),
                    },
                ],
            },
            VipInfo {
                name: "dns6".into(),
                address: "2001:db8::53".into(),
                port: 53,
                protocol: "udp".into(),
                mode: "dsr".into(),
                service_id: 2,
                maglev_offset: 65537,
                maglev_size: 251,
                worst_imbalance_pct: 12.5,
                backends: vec![VipBackend {
                    address: "2001:db8::1:10".into(),
                    port: 53,
                    weight: 1,
                    backend_id: 3,
                    state: "down".into(),
                }],
            },
            VipInfo {
                name: "empty".into(),
                address: "10.0.0.11".into(),
                port: 443,
                protocol: "tcp".into(),
                mode: "ipip".into(),
                service_id: 3,
                maglev_offset: 65788,
                maglev_size: 251,
                worst_imbalance_pct: 0.0,
                backends: vec![],
            },
        ]
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
    fn vips_tables() {
        let out = vips(&sample_vips());
        println!("{out}");
        assert_eq!(
            row(&out, "VIP"),
            [
                "VIP",
                "FRONTEND",
                "MODE",
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
                "[2001:db8::53]:53/udp",
                "dsr",
                "2",
                "1",
                "65537+251",
                "12.50%"
            ]
        );
        assert_eq!(dns[1], ["dns6", "[2001:db8::1:10]:53", "1", "3", "down"]);
        let empty = rows(&out, "empty");
        assert_eq!(empty[0][4], "0");
        assert_eq!(empty[1], ["empty", "(no backends)", "-", "-", "-"]);
        assert!(out.contains("\nBackends per VIP:\n"));
        assert_eq!(vips(&[]), "No VIPs configured.\n");
    }

    #[test]
    fn backends_table() {
        let bs = vec![
            BackendInfo {
                backend_id: 1,
                address: "192.168.1.10".into(),
                port: 8080,
                state: "healthy".into(),
                vips: vec!["web".into(), "api".into()],
            },
            BackendInfo {
                backend_id: 12,
                address: "2001:db8::1:10".into(),
                port: 53,
                state: "down".into(),
                vips: vec![],
            },
        ];
        let out = backends(&bs);
        println!("{out}");
        assert_eq!(
            row(&out, "BACKEND ID"),
            ["BACKEND ID", "BACKEND", "STATE", "VIPS"]
        );
        assert_eq!(
            row(&out, "1"),
            ["1", "192.168.1.10:8080", "healthy", "web, api"]
        );
        assert_eq!(row(&out, "12"), ["12", "[2001:db8::1:10]:53", "down", "-"]);
        assert_eq!(backends(&[]), "No backends configured.\n");
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
        };
        let out = stats(&s);
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

        let none = stats(&Stats {
            vips: vec![],
            drops: vec![],
        });
        assert_eq!(none, "No VIP counters.\n\nDrops by reason: none\n");
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
}
