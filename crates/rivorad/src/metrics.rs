//! The Prometheus view of the daemon: the same counters and states as the
//! local API, read at scrape time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rivora_abi as abi;
use rivora_api::metrics::{BackendMetrics, BgpPeerMetrics, MetricsSnapshot, VipMetrics};
use rivora_dataplane::{BackendKey, proto};

use crate::state::{Shared, state_name};

/// Reads everything a scrape reports.
pub fn snapshot(shared: &Arc<Mutex<Shared>>) -> Result<MetricsSnapshot, String> {
    let s = shared
        .lock()
        .map_err(|_| "state lock poisoned".to_string())?;
    let dp = &s.dataplane;
    let counters: BTreeMap<String, abi::VipStats> = dp
        .vip_counters()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|c| (c.name, c.stats))
        .collect();
    let vips = dp
        .vips()
        .map(|v| {
            let c = counters.get(&v.spec.name).copied().unwrap_or_default();
            VipMetrics {
                name: v.spec.name.clone(),
                address: v.spec.key.addr.to_string(),
                port: v.spec.key.ports_label(),
                protocol: if v.spec.key.proto == proto::UDP {
                    "udp"
                } else {
                    "tcp"
                }
                .to_string(),
                mode: v.spec.mode.as_str().to_string(),
                packets: c.packets,
                bytes: c.bytes,
                new_flows: c.new_flows,
                drops: c.drops,
                reply_packets: c.reply_packets,
                reply_bytes: c.reply_bytes,
            }
        })
        .collect();
    let drops = dp
        .drop_counters()
        .map_err(|e| e.to_string())?
        .into_iter()
        .enumerate()
        .map(|(i, n)| (abi::drop_reason::NAMES[i].to_string(), n))
        .collect();
    let probes: BTreeMap<BackendKey, rivora_health::ProbeStatus> =
        s.prober.snapshot().into_iter().collect();
    let traffic = crate::state::backend_counters(dp)?;
    let backends = dp
        .backends()
        .map(|b| {
            let p = probes.get(&b.key);
            let t = traffic.get(&b.key).cloned().unwrap_or_default();
            BackendMetrics {
                backend: b.key.to_string(),
                backend_id: b.id,
                state: state_name(b.state).to_string(),
                drained: b.drained,
                probe_up: p.and_then(|p| p.up),
                probe_latency_seconds: p
                    .and_then(|p| p.last.as_ref())
                    .map(|o| o.latency.as_secs_f64()),
                probes_total: p.map(|p| p.probes).unwrap_or(0),
                probe_failures_total: p.map(|p| p.failures).unwrap_or(0),
                packets: t.packets,
                bytes: t.bytes,
                new_flows: t.new_flows,
                last_packet_unix: t.last_packet_unix_ms.map(|ms| ms as f64 / 1000.0),
            }
        })
        .collect();
    let tables = dp
        .table_usage()
        .into_iter()
        .map(|(n, e, c)| (n.to_string(), e, c))
        .collect();
    // Nothing is read where no classifier is programmed (nor adopted): its
    // families stay out of the scrape.
    let cls = dp.classifier();
    let classifier = if cls.vips().next().is_none()
        && cls.rules().next().is_none()
        && cls.groups().next().is_none()
        && cls.unclaimed().is_empty()
    {
        None
    } else {
        Some(crate::state::classifier_status(dp)?)
    };
    let flow_guard_rate = dp.flow_guard().map(|g| g.rate).unwrap_or(0);
    let f = dp.flow_filter_status();
    Ok(MetricsSnapshot {
        flow_guard_rate,
        flow_filter: Some((f.bits, f.ones, f.exact, f.rebuilds)),
        snat: dp
            .snat_counters()
            .map(|c| {
                rivora_abi::snat_counter::NAMES
                    .iter()
                    .zip(c)
                    .map(|(n, v)| (n.to_string(), v))
                    .collect()
            })
            .unwrap_or_default(),
        kubernetes: s.source_status.as_ref().map(|read| read(dp)),
        classifier,
        vips,
        drops,
        backends,
        tables,
        config_generation: s.status.config_generation,
        last_reload_ok: s.status.last_reload.ok,
        last_reload_unix: s.status.last_reload.at_unix,
        start_unix: s.status.started_at_unix,
        bgp_peers: s
            .announcer
            .peer_metrics()
            .into_iter()
            .map(
                |(peer, peer_as, established, prefixes_advertised)| BgpPeerMetrics {
                    peer,
                    peer_as,
                    established,
                    prefixes_advertised,
                },
            )
            .collect(),
    })
}
