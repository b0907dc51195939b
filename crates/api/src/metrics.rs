//! Prometheus metrics of rivorad: a plain [`MetricsSnapshot`] the daemon
//! fills from its BPF maps and prober, [`render`] to turn it into the
//! Prometheus text exposition format (version 0.0.4), and [`serve_metrics`]
//! to answer `GET /metrics` over TCP.
//!
//! # Why a snapshot and a collector
//!
//! Every value here already lives somewhere else: packet counters in per-CPU
//! BPF maps, backend states and probe results in the daemon. Mirroring them
//! into `prometheus_client` `Counter`/`Gauge` objects would mean a second copy
//! that must be kept in sync (and pruned when a VIP or backend disappears).
//! Instead each scrape takes one snapshot and a [`Registry`] built for that
//! scrape encodes it through a [`Collector`] that emits `ConstCounter` /
//! `ConstGauge` values: the pattern `prometheus_client` documents for
//! "metrics retrieved ad hoc on each scrape". Series of a VIP or backend that
//! no longer exists simply stop being emitted, and all families of one
//! scrape come from the same instant.
//!
//! # Families
//!
//! | family | type | labels |
//! |---|---|---|
//! | `rivora_vip_info` | gauge (always 1) | `vip`, `address`, `port`, `protocol`, `mode` |
//! | `rivora_vip_packets_total` | counter | `vip`, `address`, `port`, `protocol` |
//! | `rivora_vip_bytes_total` | counter | same |
//! | `rivora_vip_connections_total` | counter | same |
//! | `rivora_vip_drops_total` | counter | same |
//! | `rivora_vip_reply_packets_total` | counter | same |
//! | `rivora_vip_reply_bytes_total` | counter | same |
//! | `rivora_drops_total` | counter | `reason` |
//! | `rivora_backend_info` | gauge (always 1) | `backend`, `backend_id` |
//! | `rivora_backend_state` | gauge (state set) | `backend`, `state` |
//! | `rivora_backend_drained` | gauge (0/1) | `backend` |
//! | `rivora_backend_probe_up` | gauge (0/1) | `backend` |
//! | `rivora_backend_probe_duration_seconds` | gauge | `backend` |
//! | `rivora_backend_probes_total` | counter | `backend` |
//! | `rivora_backend_probe_failures_total` | counter | `backend` |
//! | `rivora_backend_packets_total` | counter | `backend` |
//! | `rivora_backend_bytes_total` | counter | `backend` |
//! | `rivora_backend_connections_total` | counter | `backend` |
//! | `rivora_backend_last_packet_timestamp_seconds` | gauge | `backend` |
//! | `rivora_table_entries` | gauge | `table` |
//! | `rivora_table_capacity` | gauge | `table` |
//! | `rivora_flow_guard_rate` | gauge | |
//! | `rivora_flow_filter_bits` | gauge | |
//! | `rivora_flow_filter_bits_set` | gauge | |
//! | `rivora_flow_filter_exact` | gauge (0/1) | |
//! | `rivora_flow_filter_rebuilds_total` | counter | |
//! | `rivora_snat_events_total` | counter | `event` (`allocated`, `reused_idle`, `forwarded`, `replied`, `reply_unmatched`, `to_kernel`) |
//! | `rivora_classifier_vip_ready` | gauge (0/1) | `vip` |
//! | `rivora_classifier_vip_packets_total` | counter | `vip` |
//! | `rivora_classifier_vip_bytes_total` | counter | `vip` |
//! | `rivora_classifier_vip_drops_total` | counter | `vip`, `reason` (`no_target`, `other`) |
//! | `rivora_classifier_rule_packets_total` | counter | `rule`, `group` |
//! | `rivora_classifier_rule_bytes_total` | counter | `rule`, `group` |
//! | `rivora_classifier_rule_drops_total` | counter | `rule`, `group`, `reason` |
//! | `rivora_classifier_group_packets_total` | counter | `group` |
//! | `rivora_classifier_group_bytes_total` | counter | `group` |
//! | `rivora_classifier_group_drops_total` | counter | `group`, `reason` |
//! | `rivora_classifier_group_targets` | gauge | `group`, `family` (`ipv4`, `ipv6`) |
//! | `rivora_classifier_group_slots` | gauge | `group` |
//! | `rivora_classifier_events_total` | counter | `event` |
//! | `rivora_config_generation` | gauge | |
//! | `rivora_config_last_reload_success` | gauge (0/1) | |
//! | `rivora_config_last_reload_timestamp_seconds` | gauge | |
//! | `rivora_start_time_seconds` | gauge | |
//! | `rivora_bgp_peer_established` | gauge (0/1) | `peer`, `peer_as` |
//! | `rivora_bgp_peer_prefixes_advertised` | gauge | `peer`, `peer_as` |
//! | `rivora_k8s_initial_sync_complete` | gauge (0/1) | |
//! | `rivora_k8s_unclaimed_vips` | gauge | |
//! | `rivora_k8s_services` | gauge | `state` (`programmed`, `refused`, `failing`) |
//! | `rivora_k8s_gateway_listeners` | gauge | `state` (`programmed`, `failing`) |
//! | `rivora_k8s_service_failures` | gauge | `reason` |
//! | `rivora_k8s_translations_total` | counter | `result` (`reused`, `translated`) |
//! | `rivora_k8s_watch_events_total` | counter | `kind` |
//! | `rivora_k8s_watch_errors_total` | counter | `kind` |
//! | `rivora_k8s_store_objects` | gauge | `kind` |
//! | `rivora_k8s_undecodable_objects` | gauge | `kind` |
//! | `rivora_k8s_node_report_writes_total` | counter | `result` (`ok`, `error`) |
//! | `rivora_healthcheck_nodeport_requests_total` | counter | `code` (`200`, `503`) |
//!
//! The `rivora_k8s_` and `rivora_healthcheck_` families exist only on a `rivorad --kubernetes`
//! node; the `rivora_classifier_` families only where a classifier is programmed.
//!
//! A family with no series (e.g. no VIPs configured yet) is left out
//! entirely, as the Go client does. The forwarding mode and the dataplane
//! backend id are exposed once in the `_info` families rather than on every
//! series, so changing them does not fork every counter's time series; join
//! on `vip` / `backend` to use them.

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeMetric, prometheus_text,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

/// URL path the metrics are served on: the conventional one, so a default
/// Prometheus scrape config finds it.
pub const METRICS_PATH: &str = "/metrics";

/// URL path of the liveness/readiness answer (the chart's probes): 200 once the daemon can read
/// its datapath (the same snapshot a scrape takes), 503 with the reason otherwise.
pub const HEALTHZ_PATH: &str = "/healthz";

/// `Content-Type` of [`render`]'s output (Prometheus text format 0.0.4), so
/// scrapers parse it with the right parser.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The three values of [`BackendMetrics::state`] that
/// `rivora_backend_state` always reports, so a dashboard can count backends
/// per state even when none is currently in one of them.
pub const BACKEND_STATES: [&str; 3] = ["healthy", "draining", "down"];

/// Everything one scrape reports, read by the daemon at a single instant.
///
/// Plain data with no behaviour, so the daemon can fill it from BPF maps and
/// its prober without depending on any metrics library, and tests can build
/// one by hand.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// Per-VIP traffic counters, one entry per programmed VIP.
    pub vips: Vec<VipMetrics>,
    /// Node-wide drop counters: (reason, packets). Kept apart from the
    /// per-VIP drops because many drops (malformed packets, no VIP matched)
    /// cannot be attributed to a VIP.
    pub drops: Vec<(String, u64)>,
    /// Per-backend health and probe data, one entry per backend.
    pub backends: Vec<BackendMetrics>,
    /// BPF map fill levels: (table, entries, capacity), so an operator is
    /// warned before a full map starts refusing new flows.
    pub tables: Vec<(String, u64, u64)>,
    /// Generation of the applied configuration, bumped on every successful
    /// reload, so a change can be correlated with traffic shifts.
    pub config_generation: u64,
    /// Whether the last reload attempt succeeded; a failed reload leaves the
    /// old config running, which is worth alerting on.
    pub last_reload_ok: bool,
    /// When the last reload attempt happened (Unix seconds).
    pub last_reload_unix: u64,
    /// When the daemon started (Unix seconds), to spot restarts.
    pub start_unix: u64,
    /// BGP peers, when a speaker runs (empty otherwise).
    pub bgp_peers: Vec<BgpPeerMetrics>,
    /// The new-flow guard's node-wide rate (state entries per second; 0:
    /// off), beside `rivora_drops_total{reason="flow_guarded"}` which counts
    /// what it held back.
    pub flow_guard_rate: u64,
    /// The flow filter (bits, bits set, exact, rebuilds); None: not read.
    pub flow_filter: Option<(u64, u64, bool, u64)>,
    /// Source translation's counters by event name (empty: not read).
    pub snat: Vec<(String, u64)>,
    /// The Kubernetes source's state (`rivorad --kubernetes` only): its
    /// gate, watches and failing Services, the `rivora_k8s_` families.
    pub kubernetes: Option<crate::KubernetesStatus>,
    /// The classifier (VIPs, rules, groups, events and their counters), the
    /// `rivora_classifier_` families; None where none is programmed.
    pub classifier: Option<crate::ClassifierStatus>,
}

/// One BGP peer's session, so a down session (no traffic attracted) can be
/// alerted on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BgpPeerMetrics {
    /// The peer's `address:port` (label `peer`; `[v6]:port` for IPv6).
    pub peer: String,
    /// The peer's AS (label `peer_as`).
    pub peer_as: u32,
    /// Whether the session is Established.
    pub established: bool,
    /// Prefixes currently announced to the peer.
    pub prefixes_advertised: u64,
}

/// Traffic counters of one VIP, read from the dataplane's per-VIP stats.
///
/// Exists so per-service traffic and drops can be graphed and alerted on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VipMetrics {
    /// VIP name from the config file (label `vip`), the operators' handle.
    pub name: String,
    /// VIP address in textual form (label `address`).
    pub address: String,
    /// VIP port, port range (`8000-8099`) or `any` (label `port`).
    pub port: String,
    /// L4 protocol, `tcp` or `udp` (label `protocol`).
    pub protocol: String,
    /// Forwarding mode; only on `rivora_vip_info`, see the module docs.
    pub mode: String,
    /// Packets forwarded towards backends.
    pub packets: u64,
    /// Bytes forwarded towards backends.
    pub bytes: u64,
    /// New flows (connections) scheduled onto a backend.
    pub new_flows: u64,
    /// Packets to this VIP that were dropped.
    pub drops: u64,
    /// Reply packets seen on the way back to clients.
    pub reply_packets: u64,
    /// Reply bytes seen on the way back to clients.
    pub reply_bytes: u64,
}

/// Health and probe data of one backend.
///
/// Exists so operators can see which backends take traffic and why a
/// backend was taken out (probe failures vs. an operator drain).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackendMetrics {
    /// Backend as `address:port` (label `backend`), e.g. `10.0.0.1:8080`.
    pub backend: String,
    /// Dataplane backend id; only on `rivora_backend_info`, to relate the
    /// series to BPF map contents.
    pub backend_id: u32,
    /// Current state: `healthy`, `draining` or `down`.
    pub state: String,
    /// Drained by an operator (`rivoractl drain`).
    pub drained: bool,
    /// Result of the latest probe; `None` when the backend has no health
    /// check or has not been probed yet (then no series is emitted, rather
    /// than a misleading 0).
    pub probe_up: Option<bool>,
    /// How long the latest probe took, in seconds; `None` as for `probe_up`.
    pub probe_latency_seconds: Option<f64>,
    /// Probes run since the daemon started.
    pub probes_total: u64,
    /// Probes that failed since the daemon started.
    pub probe_failures_total: u64,
    /// Client->backend packets the datapath forwarded to it, every mode and
    /// VIP, since it got its backend id.
    pub packets: u64,
    /// Their frame sizes as received.
    pub bytes: u64,
    /// New flows (connections) scheduled onto it.
    pub new_flows: u64,
    /// When its latest packet was (Unix seconds, tick resolution); `None`
    /// (no series) before its first packet.
    pub last_packet_unix: Option<f64>,
}

/// Renders `s` in the Prometheus text exposition format, version 0.0.4
/// (served with [`CONTENT_TYPE`]).
///
/// A [`Registry`] is built for this one call with a collector over a copy of
/// the snapshot (a registered collector must be `'static`); see the module
/// docs for why.
pub fn render(s: &MetricsSnapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector(s.clone())));
    let mut out = String::new();
    // Writing to a String cannot fail and our collector only propagates
    // writer errors, so an error here is a bug.
    prometheus_text::encode(&mut out, &registry).expect("encoding metrics into a String");
    out
}

/// Encodes one [`MetricsSnapshot`] at scrape time.
#[derive(Debug)]
struct SnapshotCollector(MetricsSnapshot);

/// An empty label set, for metrics whose labels all come from elsewhere.
const NO_LABELS: [(&str, &str); 0] = [];

fn bool_gauge(b: bool) -> u64 {
    u64::from(b)
}

/// Emits one counter family; nothing when `samples` is empty.
fn counters<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: impl IntoIterator<Item = (L, u64)>,
) -> fmt::Result {
    let mut samples = samples.into_iter().peekable();
    if samples.peek().is_none() {
        return Ok(());
    }
    let mut family = enc.encode_descriptor(name, help, unit, MetricType::Counter)?;
    for (labels, value) in samples {
        ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Emits one gauge family; nothing when `samples` is empty.
fn gauges<L: EncodeLabelSet, N: EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: impl IntoIterator<Item = (L, N)>,
) -> fmt::Result {
    let mut samples = samples.into_iter().peekable();
    if samples.peek().is_none() {
        return Ok(());
    }
    let mut family = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for (labels, value) in samples {
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Emits one info family (`<name>_info{...} 1`, a gauge in the 0.0.4
/// format); nothing when `samples` is empty.
fn infos<L: EncodeLabelSet + Clone + std::hash::Hash + Eq>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = L>,
) -> fmt::Result {
    let mut samples = samples.into_iter().peekable();
    if samples.peek().is_none() {
        return Ok(());
    }
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Info)?;
    for labels in samples {
        Info::new(labels).encode(family.encode_family(&NO_LABELS)?)?;
    }
    Ok(())
}

/// A VIP's identifying labels on every per-VIP series.
type VipLabels<'a> = [(&'static str, &'a str); 4];
/// Reads one counter of a VIP.
type VipCounter = fn(&VipMetrics) -> u64;
/// Reads one counter of a backend.
type BackendCounter = fn(&BackendMetrics) -> u64;

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let s = &self.0;
        let bytes = Unit::Bytes;
        let seconds = Unit::Seconds;

        // --- VIPs ---
        let ports: Vec<String> = s.vips.iter().map(|v| v.port.clone()).collect();
        let vip_labels: Vec<VipLabels<'_>> = s
            .vips
            .iter()
            .zip(&ports)
            .map(|(v, port)| {
                [
                    ("vip", v.name.as_str()),
                    ("address", v.address.as_str()),
                    ("port", port.as_str()),
                    ("protocol", v.protocol.as_str()),
                ]
            })
            .collect();
        infos(
            &mut enc,
            "rivora_vip",
            "Programmed VIPs (always 1), carrying the forwarding mode; join on vip",
            vip_labels.iter().zip(&s.vips).map(|(l, v)| {
                let [vip, address, port, protocol] = *l;
                [vip, address, port, protocol, ("mode", v.mode.as_str())]
            }),
        )?;
        let vip_counters: [(&str, Option<&Unit>, &str, VipCounter); 6] = [
            (
                "rivora_vip_packets",
                None,
                "Packets forwarded from clients to the VIP's backends",
                |v| v.packets,
            ),
            (
                "rivora_vip",
                Some(&bytes),
                "Bytes forwarded from clients to the VIP's backends",
                |v| v.bytes,
            ),
            (
                "rivora_vip_connections",
                None,
                "New flows (connections) scheduled onto a backend of the VIP",
                |v| v.new_flows,
            ),
            (
                "rivora_vip_drops",
                None,
                "Packets addressed to the VIP that the dataplane dropped",
                |v| v.drops,
            ),
            (
                "rivora_vip_reply_packets",
                None,
                "Reply packets from the VIP's backends to clients",
                |v| v.reply_packets,
            ),
            (
                "rivora_vip_reply",
                Some(&bytes),
                "Reply bytes from the VIP's backends to clients",
                |v| v.reply_bytes,
            ),
        ];
        for (name, unit, help, read) in vip_counters {
            counters(
                &mut enc,
                name,
                help,
                unit,
                vip_labels.iter().zip(&s.vips).map(|(l, v)| (*l, read(v))),
            )?;
        }

        // --- node-wide drops ---
        counters(
            &mut enc,
            "rivora_drops",
            "Packets dropped by the dataplane on this node, by reason",
            None,
            s.drops
                .iter()
                .map(|(reason, n)| ([("reason", reason.as_str())], *n)),
        )?;

        // --- backends ---
        let backend_ids: Vec<String> = s
            .backends
            .iter()
            .map(|b| b.backend_id.to_string())
            .collect();
        infos(
            &mut enc,
            "rivora_backend",
            "Known backends (always 1), carrying the dataplane backend id; join on backend",
            s.backends
                .iter()
                .zip(&backend_ids)
                .map(|(b, id)| [("backend", b.backend.as_str()), ("backend_id", id.as_str())]),
        )?;
        gauges(
            &mut enc,
            "rivora_backend_state",
            "Backend state as a state set: 1 for the current state (healthy, draining or down), 0 for the others",
            None,
            s.backends.iter().flat_map(|b| {
                // The fixed states always appear; an unexpected state is
                // reported as well so the set still sums to 1.
                let extra =
                    (!BACKEND_STATES.contains(&b.state.as_str())).then_some(b.state.as_str());
                BACKEND_STATES.into_iter().chain(extra).map(move |state| {
                    (
                        [("backend", b.backend.as_str()), ("state", state)],
                        bool_gauge(b.state == state),
                    )
                })
            }),
        )?;
        gauges(
            &mut enc,
            "rivora_backend_drained",
            "Whether an operator drained the backend (rivoractl drain): 1 drained, 0 not",
            None,
            s.backends
                .iter()
                .map(|b| ([("backend", b.backend.as_str())], bool_gauge(b.drained))),
        )?;
        gauges(
            &mut enc,
            "rivora_backend_probe_up",
            "Result of the backend's latest health probe: 1 success, 0 failure; absent without a health check",
            None,
            s.backends.iter().filter_map(|b| {
                b.probe_up
                    .map(|up| ([("backend", b.backend.as_str())], bool_gauge(up)))
            }),
        )?;
        gauges(
            &mut enc,
            "rivora_backend_probe_duration",
            "Duration of the backend's latest health probe",
            Some(&seconds),
            s.backends.iter().filter_map(|b| {
                b.probe_latency_seconds
                    .map(|d| ([("backend", b.backend.as_str())], d))
            }),
        )?;
        counters(
            &mut enc,
            "rivora_backend_probes",
            "Health probes run against the backend",
            None,
            s.backends
                .iter()
                .map(|b| ([("backend", b.backend.as_str())], b.probes_total)),
        )?;
        counters(
            &mut enc,
            "rivora_backend_probe_failures",
            "Health probes against the backend that failed",
            None,
            s.backends
                .iter()
                .map(|b| ([("backend", b.backend.as_str())], b.probe_failures_total)),
        )?;

        let backend_counters: [(&str, Option<&Unit>, &str, BackendCounter); 3] = [
            (
                "rivora_backend_packets",
                None,
                "Packets forwarded from clients to the backend (every VIP that lists it)",
                |b| b.packets,
            ),
            (
                "rivora_backend",
                Some(&bytes),
                "Bytes forwarded from clients to the backend, as whole frames as received",
                |b| b.bytes,
            ),
            (
                "rivora_backend_connections",
                None,
                "New flows (connections) scheduled onto the backend",
                |b| b.new_flows,
            ),
        ];
        for (name, unit, help, read) in backend_counters {
            counters(
                &mut enc,
                name,
                help,
                unit,
                s.backends
                    .iter()
                    .map(|b| ([("backend", b.backend.as_str())], read(b))),
            )?;
        }
        gauges(
            &mut enc,
            "rivora_backend_last_packet_timestamp",
            "Unix time of the latest packet forwarded to the backend (kernel tick resolution); absent before the first",
            Some(&seconds),
            s.backends.iter().filter_map(|b| {
                b.last_packet_unix
                    .map(|t| ([("backend", b.backend.as_str())], t))
            }),
        )?;

        // --- BPF tables ---
        gauges(
            &mut enc,
            "rivora_table_entries",
            "Entries currently in the dataplane table (BPF map)",
            None,
            s.tables
                .iter()
                .map(|(t, entries, _)| ([("table", t.as_str())], *entries)),
        )?;
        gauges(
            &mut enc,
            "rivora_table_capacity",
            "Maximum entries of the dataplane table (BPF map)",
            None,
            s.tables
                .iter()
                .map(|(t, _, capacity)| ([("table", t.as_str())], *capacity)),
        )?;

        gauges(
            &mut enc,
            "rivora_flow_guard_rate",
            "New-flow guard: state entries per second node-wide that flows without state may create (0: off); beyond it they are forwarded by Maglev alone, counted as drops reason flow_guarded",
            None,
            [(NO_LABELS, s.flow_guard_rate)],
        )?;
        if let Some((bits, set, exact, rebuilds)) = s.flow_filter {
            gauges(
                &mut enc,
                "rivora_flow_filter_bits",
                "Bits of the flow filter's half in use (one per 5-tuple hash; a SYN or UDP datagram whose bit is clear skips the affinity lookup)",
                None,
                [(NO_LABELS, bits)],
            )?;
            gauges(
                &mut enc,
                "rivora_flow_filter_bits_set",
                "Bits set in the flow filter as last counted: flows that may have an affinity entry, including gone ones until the next rebuild",
                None,
                [(NO_LABELS, set)],
            )?;
            gauges(
                &mut enc,
                "rivora_flow_filter_exact",
                "1 when a clear bit of the flow filter is trusted; 0 after an upgrade from an ABI without the filter, until its first rebuild",
                None,
                [(NO_LABELS, u64::from(exact))],
            )?;
            counters(
                &mut enc,
                "rivora_flow_filter_rebuilds",
                "Rebuilds of the flow filter from the flow tables since rivorad started",
                None,
                [(NO_LABELS, rebuilds)],
            )?;
        }

        counters(
            &mut enc,
            "rivora_snat_events",
            "Source translation of flows to backends on other nodes (ETP Cluster): node ports allocated (reused_idle: taken over from idle mappings), packets forwarded with the node as source, replies translated back, replies to the node port range without a mapping (reply_unmatched), translated packets handed to the kernel to route (to_kernel)",
            None,
            s.snat.iter().map(|(e, v)| ([("event", e.as_str())], *v)),
        )?;

        if let Some(c) = &s.classifier {
            classifier(&mut enc, c)?;
        }

        // --- daemon ---
        gauges(
            &mut enc,
            "rivora_config_generation",
            "Generation of the applied configuration, bumped by every successful reload",
            None,
            [(NO_LABELS, s.config_generation)],
        )?;
        gauges(
            &mut enc,
            "rivora_config_last_reload_success",
            "Whether the last configuration reload succeeded: 1 yes, 0 no (the previous config stays applied)",
            None,
            [(NO_LABELS, bool_gauge(s.last_reload_ok))],
        )?;
        gauges(
            &mut enc,
            "rivora_config_last_reload_timestamp",
            "Unix time of the last configuration reload attempt",
            Some(&seconds),
            [(NO_LABELS, s.last_reload_unix)],
        )?;
        gauges(
            &mut enc,
            "rivora_start_time",
            "Unix time when rivorad started",
            Some(&seconds),
            [(NO_LABELS, s.start_unix)],
        )?;

        if let Some(k) = &s.kubernetes {
            kubernetes(&mut enc, k)?;
        }

        // --- BGP ---
        let peer_as: Vec<String> = s.bgp_peers.iter().map(|p| p.peer_as.to_string()).collect();
        gauges(
            &mut enc,
            "rivora_bgp_peer_established",
            "Whether the BGP session with the peer is Established: 1 yes, 0 no",
            None,
            s.bgp_peers.iter().zip(&peer_as).map(|(p, a)| {
                (
                    [("peer", p.peer.as_str()), ("peer_as", a.as_str())],
                    bool_gauge(p.established),
                )
            }),
        )?;
        gauges(
            &mut enc,
            "rivora_bgp_peer_prefixes_advertised",
            "VIP host routes currently announced to the BGP peer",
            None,
            s.bgp_peers.iter().zip(&peer_as).map(|(p, a)| {
                (
                    [("peer", p.peer.as_str()), ("peer_as", a.as_str())],
                    p.prefixes_advertised,
                )
            }),
        )?;
        Ok(())
    }
}

/// Reads one counter of a classifier VIP, rule or group.
type ClsCounter = fn(&crate::ClsCounters) -> u64;

/// The reasons of the `rivora_classifier_*_drops_total` families.
const CLS_DROP_REASONS: [(&str, ClsCounter); 2] =
    [("no_target", |c| c.no_target), ("other", |c| c.other)];

/// The `rivora_classifier_` families: per VIP, per rule, per group, then
/// the classifier-wide events.
fn classifier(enc: &mut DescriptorEncoder, c: &crate::ClassifierStatus) -> fmt::Result {
    let bytes = Unit::Bytes;

    // --- VIPs ---
    gauges(
        enc,
        "rivora_classifier_vip_ready",
        "Whether a rule of the classifier VIP leads to a group with a target of its family: 1 yes (the VIP is announced), 0 no",
        None,
        c.vips
            .iter()
            .map(|v| ([("vip", v.address.as_str())], bool_gauge(v.ready))),
    )?;
    let forwarded: [(&str, Option<&Unit>, &str, ClsCounter); 2] = [
        (
            "rivora_classifier_vip_packets",
            None,
            "Packets to the classifier VIP forwarded to a target",
            |c| c.packets,
        ),
        (
            "rivora_classifier_vip",
            Some(&bytes),
            "Bytes to the classifier VIP forwarded to a target, as whole frames as received",
            |c| c.bytes,
        ),
    ];
    for (name, unit, help, read) in forwarded {
        counters(
            enc,
            name,
            help,
            unit,
            c.vips
                .iter()
                .map(|v| ([("vip", v.address.as_str())], read(&v.counters))),
        )?;
    }
    counters(
        enc,
        "rivora_classifier_vip_drops",
        "Packets to the classifier VIP dropped, by reason: no_target (the matched rule's group had no target of the packet's family), other (mostly no rule matched; also truncated headers, unmatched later fragments, no route or neighbour to the target)",
        None,
        c.vips.iter().flat_map(|v| {
            CLS_DROP_REASONS.iter().map(|(reason, read)| {
                (
                    [("vip", v.address.as_str()), ("reason", *reason)],
                    read(&v.counters),
                )
            })
        }),
    )?;

    // --- rules ---
    let forwarded: [(&str, Option<&Unit>, &str, ClsCounter); 2] = [
        (
            "rivora_classifier_rule_packets",
            None,
            "Packets the classifier rule matched that were forwarded to a target of its group",
            |c| c.packets,
        ),
        (
            "rivora_classifier_rule",
            Some(&bytes),
            "Bytes the classifier rule matched that were forwarded, as whole frames as received",
            |c| c.bytes,
        ),
    ];
    for (name, unit, help, read) in forwarded {
        counters(
            enc,
            name,
            help,
            unit,
            c.rules.iter().map(|r| {
                (
                    [("rule", r.name.as_str()), ("group", r.group.as_str())],
                    read(&r.counters),
                )
            }),
        )?;
    }
    counters(
        enc,
        "rivora_classifier_rule_drops",
        "Packets the classifier rule matched that were dropped, by reason: no_target (its group had no target of the packet's family), other (no route or neighbour to the target, or over the route's MTU)",
        None,
        c.rules.iter().flat_map(|r| {
            CLS_DROP_REASONS.iter().map(|(reason, read)| {
                (
                    [
                        ("rule", r.name.as_str()),
                        ("group", r.group.as_str()),
                        ("reason", *reason),
                    ],
                    read(&r.counters),
                )
            })
        }),
    )?;

    // --- groups ---
    let forwarded: [(&str, Option<&Unit>, &str, ClsCounter); 2] = [
        (
            "rivora_classifier_group_packets",
            None,
            "Packets forwarded to a target of the classifier group",
            |c| c.packets,
        ),
        (
            "rivora_classifier_group",
            Some(&bytes),
            "Bytes forwarded to a target of the classifier group, as whole frames as received",
            |c| c.bytes,
        ),
    ];
    for (name, unit, help, read) in forwarded {
        counters(
            enc,
            name,
            help,
            unit,
            c.groups
                .iter()
                .map(|g| ([("group", g.name.as_str())], read(&g.counters))),
        )?;
    }
    counters(
        enc,
        "rivora_classifier_group_drops",
        "Packets its rules sent to the classifier group that were dropped, by reason: no_target (no target of the packet's family), other (no route or neighbour to the target, or over the route's MTU)",
        None,
        c.groups.iter().flat_map(|g| {
            CLS_DROP_REASONS.iter().map(|(reason, read)| {
                (
                    [("group", g.name.as_str()), ("reason", *reason)],
                    read(&g.counters),
                )
            })
        }),
    )?;
    gauges(
        enc,
        "rivora_classifier_group_targets",
        "Targets in the classifier group's table of the family (slots with an address of it); 0: packets of the family its rules match are dropped",
        None,
        c.groups.iter().flat_map(|g| {
            [("ipv4", g.slots_v4), ("ipv6", g.slots_v6)].map(|(family, n)| {
                (
                    [("group", g.name.as_str()), ("family", family)],
                    u64::from(n),
                )
            })
        }),
    )?;
    gauges(
        enc,
        "rivora_classifier_group_slots",
        "Slots of the classifier group (maxEndpoints): the most targets it can hold",
        None,
        c.groups
            .iter()
            .map(|g| ([("group", g.name.as_str())], u64::from(g.max_endpoints))),
    )?;

    counters(
        enc,
        "rivora_classifier_events",
        "Classifier events on this node, by event: drops by reason (no_rule, no_target, no_neighbour, no_route, too_big_dropped, fragment_unmatched, malformed), packets answered or handed to the kernel (too_big_icmp, ttl_to_kernel, vip_gone) and ICMP forwarded (echo, icmp_error)",
        None,
        c.events.iter().map(|(e, n)| ([("event", e.as_str())], *n)),
    )
}

/// The `rivora_k8s_` families.
fn kubernetes(enc: &mut DescriptorEncoder, k: &crate::KubernetesStatus) -> fmt::Result {
    gauges(
        enc,
        "rivora_k8s_initial_sync_complete",
        "Whether the initial sync is complete (adopted VIPs nothing claimed are removed): 1 yes, 0 no",
        None,
        [(NO_LABELS, bool_gauge(k.initial_sync_complete))],
    )?;
    gauges(
        enc,
        "rivora_k8s_unclaimed_vips",
        "VIPs adopted from pinned maps that no Service claimed yet",
        None,
        [(NO_LABELS, u64::from(k.unclaimed_vips))],
    )?;
    let states = ["programmed", "refused", "failing"];
    gauges(
        enc,
        "rivora_k8s_services",
        "LoadBalancer Services of ours, by state",
        None,
        states
            .iter()
            .map(|st| ([("state", *st)], k.services.get(*st).copied().unwrap_or(0))),
    )?;
    gauges(
        enc,
        "rivora_k8s_gateway_listeners",
        "Gateway listeners carrying a route, by state",
        None,
        ["programmed", "failing"].iter().map(|st| {
            (
                [("state", *st)],
                k.gateway_listeners.get(*st).copied().unwrap_or(0),
            )
        }),
    )?;
    gauges(
        enc,
        "rivora_k8s_service_failures",
        "Services that cannot be programmed, by reason",
        None,
        k.failures
            .iter()
            .map(|(r, n)| ([("reason", r.as_str())], *n)),
    )?;
    counters(
        enc,
        "rivora_k8s_translations",
        "Services per pass whose translation was reused (nothing it reads changed) or made",
        None,
        [
            ([("result", "reused")], k.translations_reused),
            ([("result", "translated")], k.translations_done),
        ],
    )?;
    counters(
        enc,
        "rivora_k8s_watch_events",
        "Events received per watched kind",
        None,
        k.watches
            .iter()
            .map(|w| ([("kind", w.kind.as_str())], w.events)),
    )?;
    counters(
        enc,
        "rivora_k8s_watch_errors",
        "Watch errors per watched kind (each retried after a backoff)",
        None,
        k.watches
            .iter()
            .map(|w| ([("kind", w.kind.as_str())], w.errors)),
    )?;
    gauges(
        enc,
        "rivora_k8s_undecodable_objects",
        "Objects left out per watched kind because they do not decode",
        None,
        k.watches
            .iter()
            .map(|w| ([("kind", w.kind.as_str())], w.undecodable.len() as u64)),
    )?;
    gauges(
        enc,
        "rivora_k8s_store_objects",
        "Objects held per watched kind",
        None,
        k.watches
            .iter()
            .map(|w| ([("kind", w.kind.as_str())], w.objects)),
    )?;
    counters(
        enc,
        "rivora_healthcheck_nodeport_requests",
        "healthCheckNodePort requests answered, by status code",
        None,
        k.health_check_requests
            .iter()
            .map(|(c, n)| ([("code", c.as_str())], *n)),
    )?;
    counters(
        enc,
        "rivora_k8s_node_report_writes",
        "Writes of this node's RivoraNode status, by result",
        None,
        [
            ([("result", "ok")], k.node_report_writes),
            ([("result", "error")], k.node_report_write_failures),
        ],
    )
}

/// Produces a fresh snapshot for each scrape; an `Err` message is answered
/// as HTTP 500. Called on tokio's blocking pool, so it may read BPF maps.
pub type SnapshotFn = dyn Fn() -> Result<MetricsSnapshot, String> + Send + Sync;

/// Serves `GET /metrics` on `listener` until `shutdown` completes.
///
/// Each scrape runs `snapshot` and [`render`] on tokio's blocking pool
/// (reading BPF maps is a series of syscalls that must not stall the async
/// workers) and answers 200 with [`CONTENT_TYPE`], or 500 with the error
/// message as plain text. Other paths are 404. Plain TCP without auth is
/// the Prometheus convention; bind to an address only the scraper reaches.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    snapshot: Arc<SnapshotFn>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    axum::serve(listener, router(snapshot))
        .with_graceful_shutdown(shutdown)
        .await
}

fn router(snapshot: Arc<SnapshotFn>) -> Router {
    Router::new()
        .route(METRICS_PATH, get(scrape))
        .route(HEALTHZ_PATH, get(healthz))
        .fallback(not_found)
        .with_state(snapshot)
}

async fn scrape(State(snapshot): State<Arc<SnapshotFn>>) -> Response {
    let rendered = tokio::task::spawn_blocking(move || snapshot().map(|s| render(&s))).await;
    match rendered {
        Ok(Ok(body)) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
        Ok(Err(message)) => {
            tracing::warn!(error = %message, "metrics scrape failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, message)
        }
        Err(join) => {
            let message = format!("collecting metrics failed: {join}");
            tracing::warn!(error = %message, "metrics scrape failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, message)
        }
    }
}

async fn healthz(State(snapshot): State<Arc<SnapshotFn>>) -> Response {
    match tokio::task::spawn_blocking(move || snapshot().map(|_| ())).await {
        Ok(Ok(())) => (StatusCode::OK, "ok\n").into_response(),
        Ok(Err(message)) => error(StatusCode::SERVICE_UNAVAILABLE, message),
        Err(join) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("reading the datapath failed: {join}"),
        ),
    }
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("not found: metrics are served on {METRICS_PATH}, health on {HEALTHZ_PATH}"),
    )
}

fn error(status: StatusCode, mut message: String) -> Response {
    if !message.ends_with('\n') {
        message.push('\n');
    }
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    //! The `rivora_classifier_` families (the others are tested in
    //! `tests/metrics.rs`), read back with the same independent parser.

    use std::collections::BTreeMap;

    use openmetrics_parser::PrometheusValue;
    use openmetrics_parser::prometheus::parse_prometheus;

    use super::*;
    use crate::{ClassifierStatus, ClsCounters, ClsGroupInfo, ClsRuleInfo, ClsVipInfo};

    /// (family, sorted labels) -> value.
    type Series = BTreeMap<(String, Vec<(String, String)>), f64>;

    fn parse(text: &str) -> Series {
        let exposition = parse_prometheus(text)
            .unwrap_or_else(|e| panic!("rendered text does not parse: {e:?}\n{text}"));
        let mut out = Series::new();
        for (name, family) in &exposition.families {
            assert!(!family.help.trim().is_empty(), "{name}: no HELP");
            for sample in family.iter_samples() {
                let mut labels: Vec<(String, String)> = sample
                    .get_labelset()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                labels.sort();
                let v = match &sample.value {
                    PrometheusValue::Counter(c) => c.value.as_f64(),
                    PrometheusValue::Gauge(g) => g.as_f64(),
                    other => panic!("{name}: unexpected {other:?}"),
                };
                assert!(out.insert((name.clone(), labels), v).is_none());
            }
        }
        out
    }

    fn get(m: &Series, name: &str, labels: &[(&str, &str)]) -> f64 {
        let mut want: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        want.sort();
        *m.get(&(name.to_string(), want))
            .unwrap_or_else(|| panic!("no series {name}{labels:?} in {m:#?}"))
    }

    fn counters(packets: u64, bytes: u64, no_target: u64, other: u64) -> ClsCounters {
        ClsCounters {
            packets,
            bytes,
            no_target,
            other,
        }
    }

    fn sample() -> ClassifierStatus {
        ClassifierStatus {
            vips: vec![
                ClsVipInfo {
                    address: "10.200.100.5".into(),
                    stats_id: 0,
                    rules: vec!["udp-range".into(), "web".into()],
                    ready: true,
                    counters: counters(100, 14_200, 5, 7),
                },
                ClsVipInfo {
                    address: "fd00::5".into(),
                    stats_id: 1,
                    rules: vec!["ns/lone".into()],
                    ready: false,
                    counters: counters(0, 0, 3, 0),
                },
            ],
            rules: vec![
                ClsRuleInfo {
                    name: "web".into(),
                    rule_id: 0,
                    priority: 10,
                    group: "dg-a".into(),
                    vips: vec!["10.200.100.5".into()],
                    sources: vec![],
                    source_ports: vec![],
                    destination_ports: vec!["80".into()],
                    protocols: vec!["TCP".into(), "UDP".into()],
                    byte_matches: vec![],
                    counters: counters(100, 14_200, 0, 1),
                },
                ClsRuleInfo {
                    name: "ns/lone".into(),
                    rule_id: 1,
                    priority: 1,
                    group: "ns/dg-\"b\"".into(),
                    vips: vec!["fd00::5".into()],
                    sources: vec![],
                    source_ports: vec![],
                    destination_ports: vec![],
                    protocols: vec!["SCTP".into()],
                    byte_matches: vec!["sctp[4:4]=0".into()],
                    counters: counters(0, 0, 3, 0),
                },
            ],
            groups: vec![ClsGroupInfo {
                name: "dg-a".into(),
                group_id: 0,
                max_endpoints: 32,
                table_size: 3191,
                sctp_hash: "ports".into(),
                targets: vec![],
                slots_v4: 2,
                slots_v6: 1,
                counters: counters(100, 14_200, 0, 1),
            }],
            events: event_names()
                .iter()
                .enumerate()
                .map(|(i, n)| (n.to_string(), i as u64))
                .collect(),
            unclaimed_vips: vec![],
        }
    }

    fn event_names() -> [&'static str; 3] {
        ["no_rule", "no_target", "echo"]
    }

    #[test]
    fn classifier_families_carry_every_counter() {
        let snapshot = MetricsSnapshot {
            classifier: Some(sample()),
            ..Default::default()
        };
        let text = render(&snapshot);
        let m = parse(&text);
        let v4 = [("vip", "10.200.100.5")];
        assert_eq!(get(&m, "rivora_classifier_vip_ready", &v4), 1.0);
        assert_eq!(
            get(&m, "rivora_classifier_vip_ready", &[("vip", "fd00::5")]),
            0.0
        );
        assert_eq!(get(&m, "rivora_classifier_vip_packets_total", &v4), 100.0);
        assert_eq!(get(&m, "rivora_classifier_vip_bytes_total", &v4), 14_200.0);
        assert_eq!(
            get(
                &m,
                "rivora_classifier_vip_drops_total",
                &[("vip", "10.200.100.5"), ("reason", "no_target")]
            ),
            5.0
        );
        assert_eq!(
            get(
                &m,
                "rivora_classifier_vip_drops_total",
                &[("vip", "10.200.100.5"), ("reason", "other")]
            ),
            7.0
        );
        let web = [("rule", "web"), ("group", "dg-a")];
        assert_eq!(get(&m, "rivora_classifier_rule_packets_total", &web), 100.0);
        assert_eq!(
            get(&m, "rivora_classifier_rule_bytes_total", &web),
            14_200.0
        );
        // Label values are escaped and read back unchanged.
        assert_eq!(
            get(
                &m,
                "rivora_classifier_rule_drops_total",
                &[
                    ("rule", "ns/lone"),
                    ("group", "ns/dg-\"b\""),
                    ("reason", "no_target")
                ]
            ),
            3.0
        );
        assert_eq!(
            get(
                &m,
                "rivora_classifier_rule_drops_total",
                &[("rule", "web"), ("group", "dg-a"), ("reason", "other")]
            ),
            1.0
        );
        let dg = [("group", "dg-a")];
        assert_eq!(get(&m, "rivora_classifier_group_packets_total", &dg), 100.0);
        assert_eq!(
            get(&m, "rivora_classifier_group_bytes_total", &dg),
            14_200.0
        );
        assert_eq!(
            get(
                &m,
                "rivora_classifier_group_drops_total",
                &[("group", "dg-a"), ("reason", "no_target")]
            ),
            0.0
        );
        assert_eq!(
            get(
                &m,
                "rivora_classifier_group_targets",
                &[("group", "dg-a"), ("family", "ipv4")]
            ),
            2.0
        );
        assert_eq!(
            get(
                &m,
                "rivora_classifier_group_targets",
                &[("group", "dg-a"), ("family", "ipv6")]
            ),
            1.0
        );
        assert_eq!(get(&m, "rivora_classifier_group_slots", &dg), 32.0);
        for (i, e) in event_names().iter().enumerate() {
            assert_eq!(
                get(&m, "rivora_classifier_events_total", &[("event", e)]),
                i as f64
            );
        }
        // Counters, and only counters, end in _total; every family is typed.
        assert!(text.contains("# TYPE rivora_classifier_vip_packets_total counter\n"));
        assert!(text.contains("# TYPE rivora_classifier_group_targets gauge\n"));
        assert!(text.contains("# TYPE rivora_classifier_vip_ready gauge\n"));
        // Exactly these classifier families, nothing else of the classifier.
        let families: std::collections::BTreeSet<&str> = m
            .keys()
            .map(|(n, _)| n.as_str())
            .filter(|n| n.starts_with("rivora_classifier_"))
            .collect();
        assert_eq!(
            families.into_iter().collect::<Vec<_>>(),
            [
                "rivora_classifier_events_total",
                "rivora_classifier_group_bytes_total",
                "rivora_classifier_group_drops_total",
                "rivora_classifier_group_packets_total",
                "rivora_classifier_group_slots",
                "rivora_classifier_group_targets",
                "rivora_classifier_rule_bytes_total",
                "rivora_classifier_rule_drops_total",
                "rivora_classifier_rule_packets_total",
                "rivora_classifier_vip_bytes_total",
                "rivora_classifier_vip_drops_total",
                "rivora_classifier_vip_packets_total",
                "rivora_classifier_vip_ready",
            ]
        );
    }

    #[test]
    fn an_empty_classifier_emits_no_family() {
        let text = render(&MetricsSnapshot {
            classifier: Some(ClassifierStatus::default()),
            ..Default::default()
        });
        assert!(!text.contains("rivora_classifier_"), "{text}");
        let none = render(&MetricsSnapshot::default());
        assert_eq!(text, none);
    }
}
