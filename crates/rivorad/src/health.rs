//! Active health checks of the desired backends: which backend gets which
//! probe, and turning the prober's verdicts into dataplane state. A backend
//! shared by several VIPs has one effective check (the desired state
//! guarantees it) and is probed once.

use std::collections::{BTreeMap, BTreeSet};

use rivora_api::ProbeInfo;
use rivora_dataplane::{BackendKey, Dataplane};
use rivora_desired::DesiredState;
use rivora_health::{Initial, ProbeKind, ProbeSpec, ProbeStatus};

/// The probe targets `desired` asks for, each with the state it starts from:
/// down if the probes had it down (also across a restart, from the maps),
/// up if the backend was already serving before this change, and otherwise
/// unknown, so a new backend's first probe decides at once.
pub fn targets(
    desired: &DesiredState,
    dataplane: &Dataplane,
    existed_before: &BTreeSet<BackendKey>,
) -> Vec<(BackendKey, ProbeSpec, Initial)> {
    let probe_down: BTreeMap<BackendKey, bool> = dataplane
        .backends()
        .map(|b| (b.key, b.probe_down))
        .collect();
    targets_from(desired, &probe_down, existed_before)
}

/// [`targets`] given each programmed backend's probe-down flag.
fn targets_from(
    desired: &DesiredState,
    probe_down: &BTreeMap<BackendKey, bool>,
    existed_before: &BTreeSet<BackendKey>,
) -> Vec<(BackendKey, ProbeSpec, Initial)> {
    desired
        .checks()
        .into_iter()
        .map(|(key, spec)| {
            let initial = match probe_down.get(&key) {
                Some(true) => Initial::Down,
                Some(false) if existed_before.contains(&key) => Initial::Up,
                _ => Initial::Unknown,
            };
            (key, spec.clone(), initial)
        })
        .collect()
}

/// Backends the probes hold down but that no longer have a check: they
/// must come back (a removed check cannot keep anything down). A backend of
/// an adopted VIP nothing claimed yet is not among them: its check is not
/// known until its Service is translated (Kubernetes initial sync), and a
/// down backend must not come back by default in the meantime.
pub fn unchecked_but_down(
    targets: &[(BackendKey, ProbeSpec, Initial)],
    dataplane: &Dataplane,
) -> Vec<BackendKey> {
    let probed: BTreeSet<BackendKey> = targets.iter().map(|(k, _, _)| *k).collect();
    let unclaimed: BTreeSet<rivora_dataplane::VipKey> = dataplane
        .vips()
        .filter(|v| v.adopted)
        .map(|v| v.spec.key)
        .collect();
    dataplane
        .backends()
        .filter(|b| b.probe_down && !probed.contains(&b.key) && b.vips.is_disjoint(&unclaimed))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_start_down_up_or_unknown_as_the_backend_was() {
        let cfg = rivora_config::parse(
            "vips:\n  - name: a\n    address: 10.0.0.1\n    port: 80\n    healthCheck: { type: tcp, interval: 300ms, timeout: 150ms, fall: 2, rise: 3 }\n    backends:\n      - { address: 10.1.0.1 }\n      - { address: 10.1.0.2 }\n      - { address: 10.1.0.3 }\n      - { address: 10.1.0.4, healthCheck: { type: none } }\n  - name: b\n    address: 10.0.0.2\n    port: 80\n    backends:\n      - { address: 10.1.0.5, healthCheck: { type: http, port: 8081 } }\n",
            "t.yaml",
        )
        .unwrap();
        let desired = crate::source::file::from_config(&cfg);
        let key = |a: &str| BackendKey {
            addr: a.parse().unwrap(),
            port: 80,
        };
        // .1 was held down by its probes (kept across a restart), .2 was
        // serving, .3 and .5 are new (.5 is in the maps but not before).
        let probe_down = BTreeMap::from([
            (key("10.1.0.1"), true),
            (key("10.1.0.2"), false),
            (key("10.1.0.5"), false),
        ]);
        let existed = BTreeSet::from([key("10.1.0.1"), key("10.1.0.2")]);
        let t = targets_from(&desired, &probe_down, &existed);
        let shown: Vec<String> = t
            .iter()
            .map(|(k, s, i)| {
                format!(
                    "{k} {} {}ms {}/{} {i:?}",
                    s.target_display(),
                    s.interval.as_millis(),
                    s.rise,
                    s.fall
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                "10.1.0.1:80 10.1.0.1:80 300ms 3/2 Down",
                "10.1.0.2:80 10.1.0.2:80 300ms 3/2 Up",
                "10.1.0.3:80 10.1.0.3:80 300ms 3/2 Unknown",
                "10.1.0.5:80 http://10.1.0.5:8081/ 2000ms 2/3 Unknown",
            ]
        );
    }
}
