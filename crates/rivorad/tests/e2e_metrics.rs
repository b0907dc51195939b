//! Acceptance 4 of the observability work: the Prometheus endpoint serves
//! valid text (checked by an independent parser) whose counters match the
//! traffic the test sent, under the rules docs/metrics.md states.

mod common;

use std::collections::BTreeMap;

use common::*;
use openmetrics_parser::PrometheusValue;
use openmetrics_parser::prometheus::parse_prometheus;

type Series = BTreeMap<(String, Vec<(String, String)>), f64>;

fn scrape(lab: &Lab) -> Series {
    let (status, ctype, body) = lab.http_get_in_lb("127.0.0.1:9469".parse().unwrap(), "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let exposition =
        parse_prometheus(&body).unwrap_or_else(|e| panic!("metrics do not parse: {e:?}\n{body}"));
    let mut out = Series::new();
    for (name, family) in &exposition.families {
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
                other => panic!("{name}: unexpected value {other:?}"),
            };
            out.insert((name.clone(), labels), v);
        }
    }
    out
}

/// The value of the first series `name` carrying all of `labels`, if any.
fn find(m: &Series, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    m.iter()
        .find(|((n, l), _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, v)| *v)
}

fn get(m: &Series, name: &str, labels: &[(&str, &str)]) -> f64 {
    find(m, name, labels).unwrap_or_else(|| panic!("no series {name}{labels:?}"))
}

/// The client namespace's TCP segments sent (new and retransmitted).
fn client_tcp_segments(lab: &Lab) -> u64 {
    let snmp = lab.topo.client.run(&["cat", "/proc/net/snmp"]).unwrap();
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let names: Vec<&str> = tcp.next().unwrap().split_whitespace().collect();
    let values: Vec<&str> = tcp.next().unwrap().split_whitespace().collect();
    let field = |f: &str| {
        values[names.iter().position(|n| *n == f).unwrap()]
            .parse::<u64>()
            .unwrap()
    };
    field("OutSegs") + field("RetransSegs")
}

#[test]
fn metrics_are_valid_prometheus_text_and_match_the_traffic() {
    let mut lab = Lab::new("metr");
    // The UDP VIP's backends are the same address:port as the TCP VIP's, so
    // they are the same backends with the same (one) health check.
    let check = "    healthCheck: { type: tcp, interval: 200ms, timeout: 100ms }\n";
    let mut web = vip_yaml(
        "web4",
        VIP4,
        80,
        "tcp",
        &backends_yaml(false, &[(1, 1), (2, 1), (3, 2)]),
    );
    web.push_str(check);
    let mut dns = vip_yaml(
        "dns4",
        VIP4,
        53,
        "udp",
        &backends_yaml(false, &[(1, 1), (2, 1)]),
    );
    dns.push_str(check);
    lab.write_config(&[web, dns]);
    lab.start(&["--metrics-listen", "127.0.0.1:9469"]);

    let segs_before = client_tcp_segments(&lab);
    let tcp = lab.tcp(VIP4, 80, 20000, 200);
    let udp = lab.udp(VIP4, 53, 20000, 100);
    assert!(tcp.all_ok() && udp.all_ok(), "{tcp}\n{udp}");
    let tcp_segments = client_tcp_segments(&lab) - segs_before;
    // The checked backends' probes run on their own schedule: wait (with a
    // deadline) until each has run at least twice rather than sleeping and
    // hoping; the timeout names the counts last scraped.
    let checked = ["10.200.1.11:8080", "10.200.1.12:8080", "10.200.1.13:8080"];
    let m = rivora_lab::poll_until(
        "two probes of every checked backend in the metrics",
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(100),
        || {
            let m = scrape(&lab);
            let probes: Vec<Option<f64>> = checked
                .iter()
                .map(|b| find(&m, "rivora_backend_probes_total", &[("backend", b)]))
                .collect();
            if probes.iter().all(|n| n.is_some_and(|n| n >= 2.0)) {
                Ok(m)
            } else {
                Err(format!(
                    "rivora_backend_probes_total {checked:?} = {probes:?}"
                ))
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));

    let web4 = [("vip", "web4")];
    let dns4 = [("vip", "dns4")];
    // One new flow per TCP connection and per UDP exchange (each from its own port).
    assert_eq!(get(&m, "rivora_vip_connections_total", &web4), 200.0);
    assert_eq!(get(&m, "rivora_vip_connections_total", &dns4), 100.0);
    // Every segment the client sent to the VIP was forwarded by XDP.
    assert_eq!(
        get(&m, "rivora_vip_packets_total", &web4),
        tcp_segments as f64
    );
    assert_eq!(
        get(&m, "rivora_vip_packets_total", &dns4),
        (100 + udp.retried) as f64
    );
    // Replies pass tc_nat: at least one per exchange.
    assert!(get(&m, "rivora_vip_reply_packets_total", &web4) >= 200.0 * 3.0);
    assert!(get(&m, "rivora_vip_reply_packets_total", &dns4) >= 100.0);
    // Bytes are whole Ethernet frames: at least headers (14 + 20 + 8) per packet.
    assert!(get(&m, "rivora_vip_bytes_total", &dns4) >= (100.0 * 42.0));
    assert_eq!(get(&m, "rivora_vip_drops_total", &web4), 0.0);
    assert_eq!(
        get(
            &m,
            "rivora_drops_total",
            &[("reason", "no_healthy_backend")]
        ),
        0.0
    );
    // Backend states: one state per backend; probes ran for the checked ones.
    for b in checked {
        assert_eq!(
            get(
                &m,
                "rivora_backend_state",
                &[("backend", b), ("state", "healthy")]
            ),
            1.0
        );
        assert_eq!(
            get(
                &m,
                "rivora_backend_state",
                &[("backend", b), ("state", "down")]
            ),
            0.0
        );
        assert_eq!(get(&m, "rivora_backend_probe_up", &[("backend", b)]), 1.0);
        assert!(get(&m, "rivora_backend_probes_total", &[("backend", b)]) >= 2.0);
        assert_eq!(
            get(&m, "rivora_backend_probe_failures_total", &[("backend", b)]),
            0.0
        );
        assert!(
            get(
                &m,
                "rivora_backend_probe_duration_seconds",
                &[("backend", b)]
            ) < 0.1
        );
    }
    // The flow table holds an entry per TCP connection just made (made by
    // its handshake's ACK); the one-datagram UDP exchanges made none.
    let entries = get(
        &m,
        "rivora_table_entries",
        &[("table", "connection_affinity_map")],
    );
    assert!((200.0..300.0).contains(&entries), "{entries} entries");
    assert_eq!(
        get(
            &m,
            "rivora_table_capacity",
            &[("table", "connection_affinity_map")]
        ),
        65536.0
    );
    // The flow filter holds a bit for each of those entries (counted by
    // rivorad's tick at most once a second: wait for a count that covers
    // them), and is exact on fresh maps.
    assert_eq!(get(&m, "rivora_flow_filter_bits", &[]), 4_194_304.0);
    assert_eq!(get(&m, "rivora_flow_filter_exact", &[]), 1.0);
    let bits = rivora_lab::poll_until(
        "the flow filter's count to cover the TCP connections' entries",
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(100),
        || {
            let set = get(&scrape(&lab), "rivora_flow_filter_bits_set", &[]);
            // Distinct flows may share a bit (a few in 4 million).
            if set >= entries - 2.0 && set <= entries {
                Ok(set)
            } else {
                Err(format!(
                    "rivora_flow_filter_bits_set {set}, {entries} entries"
                ))
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("flow filter: {bits} bits set for {entries} affinity entries");
    assert_eq!(get(&m, "rivora_config_generation", &[]), 1.0);
    assert_eq!(get(&m, "rivora_config_last_reload_success", &[]), 1.0);
    // The API reports the same counters.
    let stats = lab.stats();
    let api_web = stats.vips.iter().find(|v| v.name == "web4").unwrap();
    assert_eq!(
        api_web.new_flows as f64,
        get(&m, "rivora_vip_connections_total", &web4)
    );
    assert_eq!(
        api_web.packets as f64,
        get(&m, "rivora_vip_packets_total", &web4)
    );

    // A drain shows in the next scrape.
    lab.drain("10.200.1.11:8080", true);
    let m = scrape(&lab);
    assert_eq!(
        get(
            &m,
            "rivora_backend_state",
            &[("backend", "10.200.1.11:8080"), ("state", "draining")]
        ),
        1.0
    );
    assert_eq!(
        get(
            &m,
            "rivora_backend_drained",
            &[("backend", "10.200.1.11:8080")]
        ),
        1.0
    );
    let (status, _, _) = lab.http_get_in_lb("127.0.0.1:9469".parse().unwrap(), "/nope");
    assert_eq!(status, 404);
}
