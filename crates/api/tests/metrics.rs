//! Tests of the Prometheus metrics: the rendered text is read back with an
//! independent parser (`openmetrics-parser`, which implements the 0.0.4
//! grammar including label unescaping), and `serve_metrics` is driven with
//! raw HTTP/1.1 over a real TCP socket.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use openmetrics_parser::prometheus::parse_prometheus;
use openmetrics_parser::{MetricsExposition, PrometheusType, PrometheusValue};
use rivora_api::metrics::{
    BackendMetrics, BgpPeerMetrics, CONTENT_TYPE, MetricsSnapshot, VipMetrics, render,
    serve_metrics,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

type Exposition = MetricsExposition<PrometheusType, PrometheusValue>;
/// (label name, label value) pairs, sorted by name.
type Labels = Vec<(String, String)>;
/// family name -> (type, label set -> value).
type Parsed = BTreeMap<String, (Kind, BTreeMap<Labels, f64>)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

fn sample_snapshot() -> MetricsSnapshot {
    MetricsSnapshot {
        flow_guard_rate: 100_000,
        flow_filter: Some((4_194_304, 70_123, true, 3)),
        snat: vec![("allocated".into(), 12), ("replied".into(), 345)],
        vips: vec![
            VipMetrics {
                name: "web".into(),
                address: "192.0.2.10".into(),
                port: "80".into(),
                protocol: "tcp".into(),
                mode: "gue".into(),
                packets: 1_000_001,
                bytes: 1_500_000_123,
                new_flows: 4_242,
                drops: 7,
                reply_packets: 900_000,
                reply_bytes: 1_200_000_000_000,
            },
            VipMetrics {
                name: "dns".into(),
                address: "2001:db8::53".into(),
                port: "5300-5399".into(),
                protocol: "udp".into(),
                mode: "ipip".into(),
                packets: 12,
                bytes: 960,
                new_flows: 3,
                drops: 0,
                reply_packets: 0,
                reply_bytes: 0,
            },
        ],
        drops: vec![
            ("no_backend".into(), 5),
            ("malformed".into(), 11),
            ("flow_table_full".into(), 0),
        ],
        backends: vec![
            BackendMetrics {
                backend: "10.0.0.1:8080".into(),
                backend_id: 1,
                state: "healthy".into(),
                drained: false,
                probe_up: Some(true),
                probe_latency_seconds: Some(0.0025),
                probes_total: 120,
                probe_failures_total: 2,
                packets: 123_456_789_012_345,
                bytes: 123_456_789_012,
                new_flows: 4_321,
                last_packet_unix: Some(1_700_000_099.996),
            },
            BackendMetrics {
                backend: "10.0.0.2:8080".into(),
                backend_id: 2,
                state: "draining".into(),
                drained: true,
                probe_up: None,
                probe_latency_seconds: None,
                probes_total: 0,
                probe_failures_total: 0,
                packets: 17,
                bytes: 1_700,
                new_flows: 3,
                last_packet_unix: Some(1_699_999_000.0),
            },
            BackendMetrics {
                backend: "[2001:db8::2]:53".into(),
                backend_id: 7,
                state: "down".into(),
                drained: false,
                probe_up: Some(false),
                probe_latency_seconds: Some(1.5),
                probes_total: 60,
                probe_failures_total: 60,
                packets: 0,
                bytes: 0,
                new_flows: 0,
                last_packet_unix: None,
            },
        ],
        tables: vec![
            ("flows".into(), 1_234, 1_048_576),
            ("backends".into(), 3, 4_096),
        ],
        config_generation: 9,
        last_reload_ok: false,
        last_reload_unix: 1_700_000_100,
        start_unix: 1_700_000_000,
        bgp_peers: vec![
            BgpPeerMetrics {
                peer: "192.0.2.1".into(),
                peer_as: 65000,
                established: true,
                prefixes_advertised: 2,
            },
            BgpPeerMetrics {
                peer: "2001:db8::1".into(),
                peer_as: 65001,
                established: false,
                prefixes_advertised: 0,
            },
        ],
        kubernetes: Some(rivora_api::KubernetesStatus {
            node: "n1".into(),
            api_server: "https://10.0.0.1:6443".into(),
            watches: vec![
                rivora_api::WatchInfo {
                    kind: "Service".into(),
                    listed: true,
                    objects: 4,
                    events: 9,
                    errors: 1,
                    last_error: None,
                    absent: false,
                    undecodable: vec!["a/odd: bad".into()],
                },
                rivora_api::WatchInfo {
                    kind: "Node".into(),
                    listed: false,
                    objects: 0,
                    events: 0,
                    errors: 3,
                    last_error: Some("connection refused".into()),
                    absent: false,
                    undecodable: Vec::new(),
                },
            ],
            initial_sync_complete: false,
            blocking: vec!["Service a/b fails: x".into()],
            unclaimed_vips: 2,
            services: BTreeMap::from([("programmed".into(), 3), ("failing".into(), 1)]),
            failures: BTreeMap::from([("endpoint_is_vip".into(), 1)]),
            gateway_listeners: BTreeMap::from([("programmed".into(), 2)]),
            failing: vec!["a/b: x".into()],
            offered_generation: 5,
            translations_reused: 40,
            translations_done: 9,
            node_report_writes: 7,
            node_report_write_failures: 2,
            node_report_error: None,
            health_check_node_ports: Vec::new(),
            health_check_requests: BTreeMap::from([("200".into(), 4), ("503".into(), 1)]),
            announce: "bgp".into(),
            bgp_peers: Vec::new(),
            bgp_problems: Vec::new(),
            l2_holder: None,
            l2_ineligible: None,
        }),
        classifier: None,
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    let mut v: Labels = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.sort();
    v
}

/// What `render` must emit for `s`, written out independently of the
/// implementation: family name -> (type, label set -> value).
fn expected(s: &MetricsSnapshot) -> Parsed {
    let mut out = Parsed::new();
    let mut put = |family: &str, kind: Kind, l: Labels, value: f64| {
        let entry = out
            .entry(family.to_string())
            .or_insert_with(|| (kind, BTreeMap::new()));
        assert_eq!(entry.0, kind, "{family}");
        assert!(entry.1.insert(l, value).is_none(), "duplicate in {family}");
    };
    for v in &s.vips {
        let port = v.port.to_string();
        let id = [
            ("vip", v.name.as_str()),
            ("address", v.address.as_str()),
            ("port", port.as_str()),
            ("protocol", v.protocol.as_str()),
        ];
        let mut info = id.to_vec();
        info.push(("mode", v.mode.as_str()));
        put("rivora_vip_info", Kind::Gauge, labels(&info), 1.0);
        for (family, value) in [
            ("rivora_vip_packets_total", v.packets),
            ("rivora_vip_bytes_total", v.bytes),
            ("rivora_vip_connections_total", v.new_flows),
            ("rivora_vip_drops_total", v.drops),
            ("rivora_vip_reply_packets_total", v.reply_packets),
            ("rivora_vip_reply_bytes_total", v.reply_bytes),
        ] {
            put(family, Kind::Counter, labels(&id), value as f64);
        }
    }
    for (reason, n) in &s.drops {
        put(
            "rivora_drops_total",
            Kind::Counter,
            labels(&[("reason", reason)]),
            *n as f64,
        );
    }
    for b in &s.backends {
        let be = labels(&[("backend", &b.backend)]);
        let id = b.backend_id.to_string();
        put(
            "rivora_backend_info",
            Kind::Gauge,
            labels(&[("backend", &b.backend), ("backend_id", &id)]),
            1.0,
        );
        for state in ["healthy", "draining", "down"] {
            put(
                "rivora_backend_state",
                Kind::Gauge,
                labels(&[("backend", &b.backend), ("state", state)]),
                if b.state == state { 1.0 } else { 0.0 },
            );
        }
        put(
            "rivora_backend_drained",
            Kind::Gauge,
            be.clone(),
            if b.drained { 1.0 } else { 0.0 },
        );
        if let Some(up) = b.probe_up {
            put(
                "rivora_backend_probe_up",
                Kind::Gauge,
                be.clone(),
                if up { 1.0 } else { 0.0 },
            );
        }
        if let Some(d) = b.probe_latency_seconds {
            put(
                "rivora_backend_probe_duration_seconds",
                Kind::Gauge,
                be.clone(),
                d,
            );
        }
        put(
            "rivora_backend_probes_total",
            Kind::Counter,
            be.clone(),
            b.probes_total as f64,
        );
        put(
            "rivora_backend_probe_failures_total",
            Kind::Counter,
            be.clone(),
            b.probe_failures_total as f64,
        );
        for (family, value) in [
            ("rivora_backend_packets_total", b.packets),
            ("rivora_backend_bytes_total", b.bytes),
            ("rivora_backend_connections_total", b.new_flows),
        ] {
            put(family, Kind::Counter, be.clone(), value as f64);
        }
        if let Some(t) = b.last_packet_unix {
            put(
                "rivora_backend_last_packet_timestamp_seconds",
                Kind::Gauge,
                be,
                t,
            );
        }
    }
    for (table, entries, capacity) in &s.tables {
        let l = labels(&[("table", table)]);
        put(
            "rivora_table_entries",
            Kind::Gauge,
            l.clone(),
            *entries as f64,
        );
        put("rivora_table_capacity", Kind::Gauge, l, *capacity as f64);
    }
    let none = Labels::new();
    put(
        "rivora_config_generation",
        Kind::Gauge,
        none.clone(),
        s.config_generation as f64,
    );
    put(
        "rivora_config_last_reload_success",
        Kind::Gauge,
        none.clone(),
        if s.last_reload_ok { 1.0 } else { 0.0 },
    );
    put(
        "rivora_config_last_reload_timestamp_seconds",
        Kind::Gauge,
        none.clone(),
        s.last_reload_unix as f64,
    );
    put(
        "rivora_flow_guard_rate",
        Kind::Gauge,
        none.clone(),
        s.flow_guard_rate as f64,
    );
    if let Some((bits, set, exact, rebuilds)) = s.flow_filter {
        put(
            "rivora_flow_filter_bits",
            Kind::Gauge,
            none.clone(),
            bits as f64,
        );
        put(
            "rivora_flow_filter_bits_set",
            Kind::Gauge,
            none.clone(),
            set as f64,
        );
        put(
            "rivora_flow_filter_exact",
            Kind::Gauge,
            none.clone(),
            if exact { 1.0 } else { 0.0 },
        );
        put(
            "rivora_flow_filter_rebuilds_total",
            Kind::Counter,
            none.clone(),
            rebuilds as f64,
        );
    }
    for (event, v) in &s.snat {
        put(
            "rivora_snat_events_total",
            Kind::Counter,
            labels(&[("event", event)]),
            *v as f64,
        );
    }
    put(
        "rivora_start_time_seconds",
        Kind::Gauge,
        none,
        s.start_unix as f64,
    );
    for p in &s.bgp_peers {
        let asn = p.peer_as.to_string();
        let l = labels(&[("peer", &p.peer), ("peer_as", &asn)]);
        put(
            "rivora_bgp_peer_established",
            Kind::Gauge,
            l.clone(),
            if p.established { 1.0 } else { 0.0 },
        );
        put(
            "rivora_bgp_peer_prefixes_advertised",
            Kind::Gauge,
            l,
            p.prefixes_advertised as f64,
        );
    }
    if let Some(k) = &s.kubernetes {
        let none = labels(&[]);
        put(
            "rivora_k8s_initial_sync_complete",
            Kind::Gauge,
            none.clone(),
            if k.initial_sync_complete { 1.0 } else { 0.0 },
        );
        put(
            "rivora_k8s_unclaimed_vips",
            Kind::Gauge,
            none,
            k.unclaimed_vips as f64,
        );
        for st in ["programmed", "refused", "failing"] {
            put(
                "rivora_k8s_services",
                Kind::Gauge,
                labels(&[("state", st)]),
                k.services.get(st).copied().unwrap_or(0) as f64,
            );
        }
        for st in ["programmed", "failing"] {
            put(
                "rivora_k8s_gateway_listeners",
                Kind::Gauge,
                labels(&[("state", st)]),
                k.gateway_listeners.get(st).copied().unwrap_or(0) as f64,
            );
        }
        for (r, n) in &k.failures {
            put(
                "rivora_k8s_service_failures",
                Kind::Gauge,
                labels(&[("reason", r)]),
                *n as f64,
            );
        }
        for (result, n) in [
            ("reused", k.translations_reused),
            ("translated", k.translations_done),
        ] {
            put(
                "rivora_k8s_translations_total",
                Kind::Counter,
                labels(&[("result", result)]),
                n as f64,
            );
        }
        for w in &k.watches {
            let l = labels(&[("kind", &w.kind)]);
            put(
                "rivora_k8s_watch_events_total",
                Kind::Counter,
                l.clone(),
                w.events as f64,
            );
            put(
                "rivora_k8s_watch_errors_total",
                Kind::Counter,
                l.clone(),
                w.errors as f64,
            );
            put(
                "rivora_k8s_undecodable_objects",
                Kind::Gauge,
                l.clone(),
                w.undecodable.len() as f64,
            );
            put("rivora_k8s_store_objects", Kind::Gauge, l, w.objects as f64);
        }
        for (c, n) in &k.health_check_requests {
            put(
                "rivora_healthcheck_nodeport_requests_total",
                Kind::Counter,
                labels(&[("code", c)]),
                *n as f64,
            );
        }
        for (r, n) in [
            ("ok", k.node_report_writes),
            ("error", k.node_report_write_failures),
        ] {
            put(
                "rivora_k8s_node_report_writes_total",
                Kind::Counter,
                labels(&[("result", r)]),
                n as f64,
            );
        }
    }
    out
}

fn parse(text: &str) -> (Exposition, Parsed) {
    let exposition = parse_prometheus(text)
        .unwrap_or_else(|e| panic!("rendered text does not parse: {e:?}\n{text}"));
    let mut parsed = Parsed::new();
    for (name, family) in &exposition.families {
        assert_eq!(name, &family.family_name);
        assert!(
            !family.help.trim().is_empty(),
            "family {name} has no HELP text"
        );
        let kind = match family.family_type {
            PrometheusType::Counter => Kind::Counter,
            PrometheusType::Gauge => Kind::Gauge,
            ref other => panic!("family {name} has unexpected type {other:?}"),
        };
        let mut samples = BTreeMap::new();
        for sample in family.iter_samples() {
            let mut l: Labels = sample
                .get_labelset()
                .expect("labelset")
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            l.sort();
            let value = match (&sample.value, kind) {
                (PrometheusValue::Counter(c), Kind::Counter) => c.value.as_f64(),
                (PrometheusValue::Gauge(g), Kind::Gauge) => g.as_f64(),
                (v, _) => panic!("family {name}: value {v:?} does not match its type"),
            };
            assert!(samples.insert(l, value).is_none(), "duplicate in {name}");
        }
        parsed.insert(name.clone(), (kind, samples));
    }
    (exposition, parsed)
}

#[test]
fn render_round_trips_through_an_independent_parser() {
    let snapshot = sample_snapshot();
    let text = render(&snapshot);
    println!("{text}");
    let (_, parsed) = parse(&text);
    let want = expected(&snapshot);
    // Same families...
    assert_eq!(
        parsed.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    // ...and in each, the same type, label sets and values.
    for (name, (kind, samples)) in &want {
        let (got_kind, got_samples) = &parsed[name];
        assert_eq!(got_kind, kind, "type of {name}");
        assert_eq!(got_samples, samples, "samples of {name}");
    }
    // The text is the 0.0.4 format, not OpenMetrics.
    assert!(!text.contains("# EOF"));
    assert!(!text.contains("# UNIT"));
    assert!(text.ends_with('\n'));
    assert!(text.contains("# TYPE rivora_vip_packets_total counter\n"));
    assert!(text.contains("# TYPE rivora_vip_info gauge\n"));
    assert_eq!(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
}

#[test]
fn every_family_has_help_and_type_before_its_samples() {
    let text = render(&sample_snapshot());
    let mut seen_help = BTreeSet::new();
    let mut seen_type = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP has text");
            assert!(!help.is_empty());
            assert!(name.starts_with("rivora_"), "{name}");
            assert!(seen_help.insert(name.to_string()), "HELP twice for {name}");
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert_eq!(
                kind == "counter",
                name.ends_with("_total"),
                "counters, and only counters, end in _total: {line}"
            );
            assert!(seen_type.insert(name.to_string()));
        } else {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(seen_help.contains(name), "sample before HELP: {line}");
            assert!(seen_type.contains(name), "sample before TYPE: {line}");
        }
    }
    assert_eq!(seen_help, seen_type);
}

#[test]
fn backend_state_set_sums_to_one_per_backend() {
    let mut snapshot = sample_snapshot();
    // An unexpected state is still reported, and the set still sums to 1.
    snapshot.backends[1].state = "retired".into();
    let (_, parsed) = parse(&render(&snapshot));
    let (_, samples) = &parsed["rivora_backend_state"];
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    let mut states: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (l, v) in samples {
        assert!(*v == 0.0 || *v == 1.0, "{l:?} = {v}");
        let get = |k: &str| l.iter().find(|(n, _)| n == k).unwrap().1.clone();
        *sums.entry(get("backend")).or_default() += v;
        states
            .entry(get("backend"))
            .or_default()
            .insert(get("state"));
    }
    assert_eq!(sums.len(), 3);
    for (backend, sum) in &sums {
        assert_eq!(*sum, 1.0, "{backend}");
    }
    let base: BTreeSet<String> = ["healthy", "draining", "down"].map(String::from).into();
    assert_eq!(states["10.0.0.1:8080"], base);
    let mut with_retired = base.clone();
    with_retired.insert("retired".into());
    assert_eq!(states["10.0.0.2:8080"], with_retired);
    assert_eq!(
        samples[&labels(&[("backend", "10.0.0.2:8080"), ("state", "retired")])],
        1.0
    );
}

#[test]
fn label_values_are_escaped() {
    let nasty = "we\"ird\\name\nwith newline";
    let mut snapshot = sample_snapshot();
    snapshot.vips[0].name = nasty.into();
    snapshot.backends[0].backend = "a\\\"b".into();
    snapshot.drops[0].0 = "quote\"".into();
    let text = render(&snapshot);

    // The exact escaped forms of the 0.0.4 format...
    assert!(
        text.contains(r#"vip="we\"ird\\name\nwith newline""#),
        "{text}"
    );
    assert!(text.contains(r#"backend="a\\\"b""#), "{text}");
    assert!(text.contains(r#"reason="quote\"""#), "{text}");
    // ...every sample still one line...
    for line in text.lines() {
        assert!(
            line.starts_with("# ") || line.starts_with("rivora_"),
            "{line}"
        );
    }
    // ...and the parser recovers the original values.
    let (_, parsed) = parse(&text);
    assert_eq!(parsed, expected(&snapshot));
    let (_, packets) = &parsed["rivora_vip_packets_total"];
    assert!(
        packets
            .keys()
            .any(|l| l.contains(&("vip".to_string(), nasty.to_string())))
    );
}

#[test]
fn empty_snapshot_has_only_daemon_families() {
    let (_, parsed) = parse(&render(&MetricsSnapshot::default()));
    assert_eq!(
        parsed.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "rivora_config_generation",
            "rivora_config_last_reload_success",
            "rivora_config_last_reload_timestamp_seconds",
            "rivora_flow_guard_rate",
            "rivora_start_time_seconds",
        ]
    );
    assert_eq!(parsed, expected(&MetricsSnapshot::default()));
}

// ---------------------------------------------------------------- HTTP ---

struct HttpResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl HttpResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One raw HTTP/1.1 request with `Connection: close`; reads to EOF.
async fn http(addr: std::net::SocketAddr, method: &str, path: &str) -> HttpResponse {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("response within 10s")
        .unwrap();
    let raw = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("header/body separator");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let mut parts = status_line.splitn(3, ' ');
    assert_eq!(parts.next(), Some("HTTP/1.1"));
    let status = parts.next().unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').expect("header line");
            (n.trim().to_string(), v.trim().to_string())
        })
        .collect();
    let response = HttpResponse {
        status,
        headers,
        body: body.to_string(),
    };
    if let Some(len) = response.header("content-length") {
        assert_eq!(len.parse::<usize>().unwrap(), response.body.len());
    }
    response
}

struct Server {
    addr: std::net::SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(snapshot: Arc<dyn Fn() -> Result<MetricsSnapshot, String> + Send + Sync>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_metrics(listener, snapshot, async {
        let _ = stopped.await;
    }));
    Server {
        addr,
        stop: Some(stop),
        task,
    }
}

impl Server {
    async fn shutdown(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("server stops within 10s after shutdown")
            .unwrap()
            .expect("serve_metrics returns Ok");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_metrics_over_http() {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let server = start(Arc::new(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(sample_snapshot())
    }))
    .await;

    let r = http(server.addr, "GET", "/metrics").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let (_, parsed) = parse(&r.body);
    assert_eq!(parsed, expected(&sample_snapshot()));
    assert_eq!(r.body, render(&sample_snapshot()));
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A fresh snapshot for every scrape.
    let r = http(server.addr, "GET", "/metrics").await;
    assert_eq!(r.status, 200);
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    for path in ["/", "/metrics/", "/v1/status", "/metricsx"] {
        let r = http(server.addr, "GET", path).await;
        assert_eq!(r.status, 404, "{path}");
        assert!(r.body.contains("/metrics"), "{path}: {}", r.body);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "404s take no snapshot");

    let r = http(server.addr, "POST", "/metrics").await;
    assert_eq!(r.status, 405);

    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_error_is_a_500_with_the_message() {
    let server = start(Arc::new(|| {
        Err("reading map rivora_stats: EPERM".to_string())
    }))
    .await;
    let r = http(server.addr, "GET", "/metrics").await;
    assert_eq!(r.status, 500);
    assert_eq!(r.body, "reading map rivora_stats: EPERM\n");
    assert!(
        r.header("content-type")
            .is_some_and(|t| t.starts_with("text/plain"))
    );
    server.shutdown().await;
}

/// The chart's probes: /healthz is 200 while the datapath reads, 503 with the reason when not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_follows_whether_the_datapath_reads() {
    let broken = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let state = broken.clone();
    let server = start(Arc::new(move || {
        if state.load(Ordering::SeqCst) {
            Err("reading map rivora_stats: ENOENT".to_string())
        } else {
            Ok(MetricsSnapshot::default())
        }
    }))
    .await;
    let r = http(server.addr, "GET", "/healthz").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
    broken.store(true, Ordering::SeqCst);
    let r = http(server.addr, "GET", "/healthz").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.body, "reading map rivora_stats: ENOENT\n");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_panic_is_a_500_and_the_server_keeps_serving() {
    let first = Arc::new(AtomicU32::new(0));
    let server = start(Arc::new(move || {
        if first.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("snapshot blew up");
        }
        Ok(MetricsSnapshot::default())
    }))
    .await;
    let r = http(server.addr, "GET", "/metrics").await;
    assert_eq!(r.status, 500);
    let r = http(server.addr, "GET", "/metrics").await;
    assert_eq!(r.status, 200);
    parse(&r.body);
    server.shutdown().await;
}
