//! Units and text every view shares: durations, ages and dates, event and
//! byte rates, byte sizes, endpoints, and the ASCII table helpers.
//!
//! Separate from the views so each formatter is defined and tested once,
//! and every table spells a rate, a size or an address the same way.

use std::fmt::Write as _;
use std::net::Ipv6Addr;

use comfy_table::presets::ASCII_FULL_CONDENSED;
use comfy_table::{CellAlignment, Table};

use super::NONE;

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
pub(super) fn seconds(secs: f64) -> String {
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

/// `0.4s`, `12s`, `3m 20s`, `2h 5m`.
pub(super) fn quiet_for(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..10 => format!("{:.1}s", ms as f64 / 1000.0),
        10..60 => format!("{secs}s"),
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        _ => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
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
pub(super) fn when(unix: u64, now_unix: u64) -> String {
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

pub(super) fn table() -> Table {
    let mut t = Table::new();
    t.load_style(ASCII_FULL_CONDENSED);
    t
}

pub(super) fn right_align(t: &mut Table, columns: &[usize]) {
    for &i in columns {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

pub(super) fn finish(t: Table) -> String {
    let mut s = t.to_string();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
