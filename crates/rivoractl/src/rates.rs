//! Rates from two counter samples, and the JSON shapes of `rivoractl stats`
//! and `rivoractl watch`.
//!
//! The daemon only serves counters since program load; "how much traffic
//! now" needs two samples and the time between them. Kept free of I/O and of
//! the clock (callers pass the measured interval) so it can be unit-tested.

use std::time::Duration;

use rivora_api::{BackendInfo, BackendStats, Stats, VipStats};
use serde::{Deserialize, Serialize};

/// `rivoractl stats -o json`: the API's [`Stats`] (the later sample), with
/// the rates computed against the earlier one.
///
/// `Stats` is flattened, so `.vips`, `.drops` and `.tables` are where they
/// are in the raw API answer.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct StatsReport {
    /// The later sample.
    #[serde(flatten)]
    pub stats: Stats,
    /// Seconds between the two samples; None when only totals were asked
    /// for (`--interval 0`).
    pub interval_secs: Option<f64>,
    /// Per-VIP rates, in the order of `vips`; empty without an interval.
    pub rates: Vec<VipRates>,
    /// Per-backend rates, in the order of `backends`; empty without an
    /// interval.
    #[serde(default)]
    pub backend_rates: Vec<BackendRates>,
}

/// Per-second rates of one backend's counters; None as for [`VipRates`]
/// (and when the backend id now names another backend).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BackendRates {
    /// Dataplane backend id.
    pub backend_id: u32,
    /// Packets forwarded to it per second.
    pub packets_per_sec: Option<f64>,
    /// Bytes forwarded to it per second.
    pub bytes_per_sec: Option<f64>,
    /// New flows scheduled onto it per second.
    pub new_flows_per_sec: Option<f64>,
}

/// Per-second rates of one VIP's counters.
///
/// A rate is None when it cannot be known: the VIP is not in the earlier
/// sample (just added), or the counter went backwards (programs reloaded,
/// counters reset).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct VipRates {
    /// VIP name from the config.
    pub name: String,
    /// Dataplane service id.
    pub service_id: u32,
    /// Packets forwarded per second.
    pub packets_per_sec: Option<f64>,
    /// Bytes forwarded per second.
    pub bytes_per_sec: Option<f64>,
    /// New flows (backend selections) per second.
    pub new_flows_per_sec: Option<f64>,
    /// Packets dropped per second.
    pub drops_per_sec: Option<f64>,
    /// Reply packets per second.
    pub reply_packets_per_sec: Option<f64>,
    /// Reply bytes per second.
    pub reply_bytes_per_sec: Option<f64>,
}

/// One refresh of `rivoractl watch -o json` (printed as one line).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WatchFrame {
    /// Counters, rates since the previous refresh and flow-table usage.
    pub stats: StatsReport,
    /// Backends and their states.
    pub backends: Vec<BackendInfo>,
}

/// Totals only, no rates (`--interval 0`).
pub fn totals_only(stats: Stats) -> StatsReport {
    StatsReport {
        stats,
        interval_secs: None,
        rates: Vec::new(),
        backend_rates: Vec::new(),
    }
}

/// Rates of `later` against `earlier`.
///
/// The interval is taken from the daemon's read timestamps
/// (`at_unix_ms`) when both samples have one, since that is when the
/// counters were actually read; otherwise (older daemon) from `measured`,
/// the time the client saw between the two answers.
pub fn with_rates(earlier: &Stats, later: Stats, measured: Duration) -> StatsReport {
    let secs = interval_secs(earlier, &later, measured);
    let rates = later
        .vips
        .iter()
        .map(|v| {
            // Same name and id: a VIP removed and re-added under another id
            // has fresh counters that cannot be compared.
            let before = earlier
                .vips
                .iter()
                .find(|p| p.service_id == v.service_id && p.name == v.name);
            vip_rates(before, v, secs)
        })
        .collect();
    let backend_rates = later
        .backends
        .iter()
        .map(|b| {
            // Same id and address: a reused id has fresh counters.
            let before = earlier.backends.iter().find(|p| {
                p.backend_id == b.backend_id && p.address == b.address && p.port == b.port
            });
            backend_rates(before, b, secs)
        })
        .collect();
    StatsReport {
        stats: later,
        interval_secs: Some(secs),
        rates,
        backend_rates,
    }
}

fn backend_rates(before: Option<&BackendStats>, now: &BackendStats, secs: f64) -> BackendRates {
    let rate = |get: fn(&BackendStats) -> u64| {
        let before = before?;
        if secs <= 0.0 {
            return None;
        }
        Some(get(now).checked_sub(get(before))? as f64 / secs)
    };
    BackendRates {
        backend_id: now.backend_id,
        packets_per_sec: rate(|b| b.counters.packets),
        bytes_per_sec: rate(|b| b.counters.bytes),
        new_flows_per_sec: rate(|b| b.counters.new_flows),
    }
}

fn interval_secs(earlier: &Stats, later: &Stats, measured: Duration) -> f64 {
    if earlier.at_unix_ms != 0 && later.at_unix_ms > earlier.at_unix_ms {
        (later.at_unix_ms - earlier.at_unix_ms) as f64 / 1000.0
    } else {
        measured.as_secs_f64()
    }
}

fn vip_rates(before: Option<&VipStats>, now: &VipStats, secs: f64) -> VipRates {
    let rate = |get: fn(&VipStats) -> u64| {
        let before = before?;
        if secs <= 0.0 {
            return None;
        }
        let delta = get(now).checked_sub(get(before))?;
        Some(delta as f64 / secs)
    };
    VipRates {
        name: now.name.clone(),
        service_id: now.service_id,
        packets_per_sec: rate(|v| v.packets),
        bytes_per_sec: rate(|v| v.bytes),
        new_flows_per_sec: rate(|v| v.new_flows),
        drops_per_sec: rate(|v| v.drops),
        reply_packets_per_sec: rate(|v| v.reply_packets),
        reply_bytes_per_sec: rate(|v| v.reply_bytes),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rivora_api::{DropCount, TableUsage};

    pub fn vip(name: &str, id: u32, packets: u64, bytes: u64, new_flows: u64) -> VipStats {
        VipStats {
            name: name.into(),
            service_id: id,
            packets,
            bytes,
            new_flows,
            drops: packets / 100,
            reply_packets: packets / 2,
            reply_bytes: bytes / 2,
        }
    }

    pub fn sample(at_unix_ms: u64, vips: Vec<VipStats>) -> Stats {
        Stats {
            vips,
            drops: vec![DropCount {
                reason: "no_backend".into(),
                packets: 3,
            }],
            at_unix_ms,
            tables: vec![TableUsage {
                name: "connection_affinity_map".into(),
                entries: 10,
                capacity: 100,
            }],
            backends: vec![],
            flow_guard: None,
            flow_filter: None,
            snat: None,
        }
    }

    #[test]
    fn rates_use_daemon_timestamps() {
        let a = sample(1_000_000, vec![vip("web", 1, 1_000, 100_000, 10)]);
        let b = sample(1_002_000, vec![vip("web", 1, 5_000, 2_197_152, 50)]);
        // The client saw 2.5 s, but the daemon read the counters 2 s apart.
        let r = with_rates(&a, b.clone(), Duration::from_millis(2500));
        assert_eq!(r.interval_secs, Some(2.0));
        assert_eq!(r.stats, b);
        assert_eq!(
            r.rates,
            [VipRates {
                name: "web".into(),
                service_id: 1,
                packets_per_sec: Some(2_000.0),
                bytes_per_sec: Some(1_048_576.0),
                new_flows_per_sec: Some(20.0),
                drops_per_sec: Some(20.0),
                reply_packets_per_sec: Some(1_000.0),
                reply_bytes_per_sec: Some(524_288.0),
            }]
        );
    }

    #[test]
    fn rates_fall_back_to_measured_interval() {
        // An older daemon without read timestamps.
        let a = sample(0, vec![vip("web", 1, 0, 0, 0)]);
        let b = sample(0, vec![vip("web", 1, 300, 0, 3)]);
        let r = with_rates(&a, b, Duration::from_millis(500));
        assert_eq!(r.interval_secs, Some(0.5));
        assert_eq!(r.rates[0].packets_per_sec, Some(600.0));
        assert_eq!(r.rates[0].new_flows_per_sec, Some(6.0));
        assert_eq!(r.rates[0].bytes_per_sec, Some(0.0));
    }

    #[test]
    fn unknown_rates_are_none() {
        let a = sample(
            1_000,
            vec![vip("web", 1, 500, 500, 5), vip("old", 2, 9, 9, 9)],
        );
        let b = sample(
            2_000,
            vec![
                // Counters reset (programs reloaded).
                vip("web", 1, 100, 600, 1),
                // Same name, new id: not comparable.
                vip("old", 7, 10, 10, 10),
                // Not in the first sample.
                vip("new", 3, 10, 10, 10),
            ],
        );
        let r = with_rates(&a, b, Duration::from_secs(1));
        assert_eq!(r.rates.len(), 3);
        assert_eq!(r.rates[0].packets_per_sec, None);
        assert_eq!(r.rates[0].bytes_per_sec, Some(100.0));
        assert!(r.rates[1..].iter().all(|v| v.packets_per_sec.is_none()
            && v.bytes_per_sec.is_none()
            && v.new_flows_per_sec.is_none()));
        assert_eq!(r.rates[2].name, "new");
    }

    #[test]
    fn report_json_keeps_api_layout() {
        let r = with_rates(
            &sample(1_000, vec![vip("web", 1, 0, 0, 0)]),
            sample(2_000, vec![vip("web", 1, 10, 10, 10)]),
            Duration::from_secs(1),
        );
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(v["vips"][0]["name"], "web");
        assert_eq!(v["at_unix_ms"], 2_000);
        assert_eq!(v["tables"][0]["capacity"], 100);
        assert_eq!(v["interval_secs"], 1.0);
        assert_eq!(v["rates"][0]["packets_per_sec"], 10.0);
        let back: StatsReport = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);

        let t = serde_json::to_value(totals_only(sample(5, vec![]))).unwrap();
        assert_eq!(t["interval_secs"], serde_json::Value::Null);
        assert_eq!(t["rates"], serde_json::json!([]));
    }
}
