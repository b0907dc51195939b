//! Active health checks of the configured backends: which backend gets which
//! probe, and turning the prober's verdicts into dataplane state. A backend
//! shared by several VIPs has one effective check (the config guarantees it)
//! and is probed once.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use rivora_api::ProbeInfo;
use rivora_config::{CheckKind, Config};
use rivora_dataplane::{BackendKey, Dataplane};
use rivora_health::{Initial, ProbeKind, ProbeSpec, ProbeStatus};

/// The probe targets `config` asks for, each with the state it starts from:
/// down if the probes had it down (also across a restart, from the maps),
/// up if the backend was already serving before this change, and otherwise
/// unknown, so a new backend's first probe decides at once.
pub fn targets(
    config: &Config,
    dataplane: &Dataplane,
    existed_before: &BTreeSet<BackendKey>,
) -> Vec<(BackendKey, ProbeSpec, Initial)> {
    let current: BTreeMap<BackendKey, bool> = dataplane
        .backends()
        .map(|b| (b.key, b.probe_down))
        .collect();
    let mut out: BTreeMap<BackendKey, (ProbeSpec, Initial)> = BTreeMap::new();
    for vip in &config.vips {
        for b in &vip.backends {
            let Some(hc) = &b.health_check else { continue };
            let key = BackendKey {
                addr: b.address,
                port: b.port,
            };
            let kind = match &hc.kind {
                CheckKind::Tcp => ProbeKind::Tcp,
                CheckKind::Http { path, expect, host } => ProbeKind::Http {
                    path: path.clone(),
                    expect: *expect,
                    host: host.clone(),
                },
            };
            let spec = ProbeSpec {
                kind,
                target: SocketAddr::new(b.address, hc.port.unwrap_or(b.port)),
                interval: hc.interval,
                timeout: hc.timeout,
                rise: hc.rise,
                fall: hc.fall,
            };
            let initial = match current.get(&key) {
                Some(true) => Initial::Down,
                Some(false) if existed_before.contains(&key) => Initial::Up,
                _ => Initial::Unknown,
            };
            out.insert(key, (spec, initial));
        }
    }
    out.into_iter().map(|(k, (s, i))| (k, s, i)).collect()
}

/// Backends the probes hold down but that no longer have a check: they
/// must come back (a removed check cannot keep anything down).
pub fn unchecked_but_down(
    targets: &[(BackendKey, ProbeSpec, Initial)],
    dataplane: &Dataplane,
) -> Vec<BackendKey> {
    let probed: BTreeSet<BackendKey> = targets.iter().map(|(k, _, _)| *k).collect();
    dataplane
        .backends()
        .filter(|b| b.probe_down && !probed.contains(&b.key))
        .map(|b| b.key)
        .collect()
}

/// The API view of a target's probe.
pub fn probe_info(status: &ProbeStatus) -> ProbeInfo {
    let s = &status.spec;
    ProbeInfo {
        kind: match s.kind {
            ProbeKind::Tcp => "tcp".into(),
            ProbeKind::Http { .. } => "http".into(),
        },
        target: s.target_display(),
        interval_ms: s.interval.as_millis() as u64,
        timeout_ms: s.timeout.as_millis() as u64,
        rise: s.rise,
        fall: s.fall,
        up: status.up.unwrap_or(true),
        last_result: match &status.last {
            None => "pending".into(),
            Some(o) if o.ok => "ok".into(),
            Some(o) => format!("fail: {}", o.detail),
        },
        last_latency_ms: status
            .last
            .as_ref()
            .map(|o| o.latency.as_secs_f64() * 1000.0)
            .unwrap_or(0.0),
        consecutive: status.consecutive,
        last_probe_unix: status
            .last_at
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs())
            .unwrap_or(0),
    }
}
