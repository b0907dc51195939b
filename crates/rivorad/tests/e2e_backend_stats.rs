//! Per-backend counters against real traffic through a real rivorad: the
//! backends' new flows are exactly the connections and exchanges each
//! backend answered (the identity servers tell the client who answered), and
//! their packets add up to what the client's own counters say it sent; the
//! same numbers in the JSON API, in Prometheus and in rivoractl's tables.
//! Then a drain: the drained backend takes no new flow and `rivoractl
//! watch` shows it going quiet.
//!
//! rivoractl is run as a binary from the same target directory as rivorad
//! (`cargo test --workspace` builds it; with `-p rivorad` alone, build it
//! first: `cargo build -p rivoractl`).

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use openmetrics_parser::PrometheusValue;
use openmetrics_parser::prometheus::parse_prometheus;
use rivora_lab::topology::backend_v4;

const METRICS: &str = "127.0.0.1:9471";

/// The backend's `address:port` and its identity server's name.
fn backend(i: usize) -> (String, String) {
    (format!("{}:{BACKEND_PORT}", backend_v4(i)), format!("b{i}"))
}

/// `rivora_backend_*` series by (family, backend label).
fn scrape(lab: &Lab) -> BTreeMap<(String, String), f64> {
    let (status, _, body) = lab.http_get_in_lb(METRICS.parse().unwrap(), "/metrics");
    assert_eq!(status, 200, "{body}");
    let exposition =
        parse_prometheus(&body).unwrap_or_else(|e| panic!("metrics do not parse: {e:?}\n{body}"));
    let mut out = BTreeMap::new();
    for (name, family) in &exposition.families {
        if !name.starts_with("rivora_backend_") {
            continue;
        }
        for sample in family.iter_samples() {
            let labels = sample.get_labelset().unwrap();
            let Some((_, backend)) = labels.iter().find(|(k, _)| k.as_str() == "backend") else {
                continue;
            };
            if labels.iter().any(|(k, _)| k.as_str() == "state") {
                continue;
            }
            let v = match &sample.value {
                PrometheusValue::Counter(c) => c.value.as_f64(),
                PrometheusValue::Gauge(g) => g.as_f64(),
                other => panic!("{name}: unexpected value {other:?}"),
            };
            out.insert((name.clone(), backend.clone()), v);
        }
    }
    out
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

/// (packets, new flows) of each lab backend from the JSON API.
fn api_counters(lab: &Lab) -> BTreeMap<String, (u64, u64)> {
    lab.stats()
        .backends
        .iter()
        .map(|b| {
            (
                format!("{}:{}", b.address, b.port),
                (b.counters.packets, b.counters.new_flows),
            )
        })
        .collect()
}

fn rivoractl_bin() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rivorad")).with_file_name("rivoractl");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build -p rivoractl), or run the workspace's tests",
        bin.display()
    );
    bin
}

fn rivoractl(lab: &Lab, args: &[&str]) -> String {
    let out = std::process::Command::new(rivoractl_bin())
        .arg("--socket")
        .arg(&lab.socket)
        .args(args)
        .output()
        .expect("run rivoractl");
    assert!(out.status.success(), "rivoractl {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The trimmed cells of the table line whose second cell is `second`.
fn row(text: &str, second: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.len() > 1 && cells[1] == second)
        .unwrap_or_else(|| panic!("no row for {second:?} in\n{text}"))
}

#[test]
fn backend_counters_match_the_traffic_everywhere() {
    let mut lab = Lab::new("bstat");
    // Both VIPs list the same three backends (address:port), so each
    // backend's counters hold its TCP and its UDP traffic.
    let all = [(1, 1), (2, 1), (3, 2)];
    lab.write_config(&[
        vip_yaml("web4", VIP4, 80, "tcp", &backends_yaml(false, &all)),
        vip_yaml("dns4", VIP4, 53, "udp", &backends_yaml(false, &all)),
    ]);
    lab.start(&["--metrics-listen", METRICS]);
    let before = api_counters(&lab);
    assert_eq!(before.len(), 3);
    assert!(
        before.values().all(|c| *c == (0, 0)),
        "fresh backends start at zero: {before:?}"
    );

    // --- TCP: 150 connections, each from its own source port.
    let segs_before = client_tcp_segments(&lab);
    let tcp = lab.tcp(VIP4, 80, 21000, 150);
    assert!(tcp.all_ok(), "{tcp}");
    // Wait until every segment the client sent (FINs and last ACKs
    // included) has been counted, bounded.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (segments, after_tcp) = loop {
        let segments = client_tcp_segments(&lab) - segs_before;
        let c = api_counters(&lab);
        let packets: u64 = c.values().map(|c| c.0).sum();
        if packets == segments || Instant::now() > deadline {
            break (segments, c);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let packets: u64 = after_tcp.values().map(|c| c.0).sum();
    assert_eq!(
        packets, segments,
        "backends' packets vs the client's TCP segments sent: {after_tcp:?}"
    );
    for i in 1..=3 {
        let (key, name) = backend(i);
        let answered = tcp.per_backend.get(&name).copied().unwrap_or(0) as u64;
        assert_eq!(
            after_tcp[&key].1, answered,
            "{key}: new flows = TCP connections it answered ({tcp})"
        );
    }

    // --- UDP: 90 exchanges, each from its own source port.
    let udp = lab.udp(VIP4, 53, 22000, 90);
    assert!(udp.all_ok(), "{udp}");
    let after_udp = api_counters(&lab);
    let mut udp_packets = 0;
    for i in 1..=3 {
        let (key, name) = backend(i);
        let answered = udp.per_backend.get(&name).copied().unwrap_or(0) as u64;
        let (p0, f0) = after_tcp[&key];
        let (p1, f1) = after_udp[&key];
        assert_eq!(
            f1 - f0,
            answered,
            "{key}: new flows = UDP exchanges ({udp})"
        );
        if udp.retried == 0 {
            assert_eq!(p1 - p0, answered, "{key}: one datagram per exchange");
        } else {
            assert!(p1 - p0 >= answered, "{key}: {} < {answered}", p1 - p0);
        }
        udp_packets += p1 - p0;
    }
    assert_eq!(udp_packets, 90 + udp.retried as u64);
    let total_flows: u64 = after_udp.values().map(|c| c.1).sum();
    assert_eq!(total_flows, 150 + 90, "new flows sum to the flows sent");

    // The per-VIP counters agree with the backends' sums.
    let stats = lab.stats();
    let vip_packets: u64 = stats.vips.iter().map(|v| v.packets).sum();
    let vip_flows: u64 = stats.vips.iter().map(|v| v.new_flows).sum();
    let backend_bytes: u64 = stats.backends.iter().map(|b| b.counters.bytes).sum();
    let vip_bytes: u64 = stats.vips.iter().map(|v| v.bytes).sum();
    assert_eq!(vip_packets, segments + udp_packets);
    assert_eq!(vip_flows, total_flows);
    assert_eq!(backend_bytes, vip_bytes);
    for b in &stats.backends {
        assert!(b.counters.packets > 0, "{b:?}");
        let age = b.counters.last_packet_age_ms.expect("a last-packet age");
        assert!(age < 30_000, "{b:?}");
        assert!(b.counters.last_packet_unix_ms.is_some(), "{b:?}");
    }
    // GET /v1/backends carries the same counters.
    for b in lab.backends() {
        let c = b.counters.expect("counters in /v1/backends");
        let key = format!("{}:{}", b.address, b.port);
        assert_eq!((c.packets, c.new_flows), after_udp[&key], "{key}");
    }

    // --- Prometheus: the same numbers.
    let m = scrape(&lab);
    for b in &stats.backends {
        let key = format!("{}:{}", b.address, b.port);
        let get = |family: &str| {
            *m.get(&(family.to_string(), key.clone()))
                .unwrap_or_else(|| panic!("no {family}{{backend=\"{key}\"}} in {m:?}"))
        };
        assert_eq!(
            get("rivora_backend_packets_total"),
            b.counters.packets as f64
        );
        assert_eq!(get("rivora_backend_bytes_total"), b.counters.bytes as f64);
        assert_eq!(
            get("rivora_backend_connections_total"),
            b.counters.new_flows as f64
        );
        let last = get("rivora_backend_last_packet_timestamp_seconds");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            now - last < 30.0 && last <= now + 1.0,
            "{key}: {last} vs {now}"
        );
    }

    // --- rivoractl: backends and stats show the same totals.
    let text = rivoractl(&lab, &["backends"]);
    println!("{text}");
    for i in 1..=3 {
        let (key, _) = backend(i);
        let r = row(&text, &key);
        let (packets, flows) = after_udp[&key];
        assert_eq!(
            (r[3].as_str(), r[5].as_str()),
            (packets.to_string().as_str(), flows.to_string().as_str()),
            "{text}"
        );
        assert!(r[6].ends_with(" ago"), "{text}");
    }
    let text = rivoractl(&lab, &["stats", "--interval", "0.5"]);
    println!("{text}");
    for i in 1..=3 {
        let (key, _) = backend(i);
        let r = row(&text, &key);
        let (packets, flows) = after_udp[&key];
        assert_eq!(r[3], packets.to_string(), "{text}");
        assert_eq!(r[4], "0/s", "no traffic during the interval: {text}");
        assert_eq!(r[7], flows.to_string(), "{text}");
    }

    // --- A drain: no new flow for b1; watch shows it quiet.
    lab.drain(&backend(1).0, true);
    let tcp2 = lab.tcp(VIP4, 80, 23000, 60);
    assert!(tcp2.all_ok(), "{tcp2}");
    assert_eq!(
        tcp2.per_backend.get("b1"),
        None,
        "a drained backend takes no new connection: {tcp2}"
    );
    let after_drain = api_counters(&lab);
    assert_eq!(
        after_drain[&backend(1).0].1,
        after_udp[&backend(1).0].1,
        "b1's new flows did not move"
    );
    let flows_b23: u64 = [2, 3]
        .iter()
        .map(|i| after_drain[&backend(*i).0].1 - after_udp[&backend(*i).0].1)
        .sum();
    assert_eq!(flows_b23, 60);
    let text = rivoractl(&lab, &["watch", "--count", "1", "--interval", "0.5"]);
    println!("{text}");
    let b1 = row(&text, &backend(1).0);
    assert_eq!(b1[2], "draining (drained)", "{text}");
    assert_eq!(b1[3], "0/s", "{text}");
    assert!(b1[8].starts_with("quiet for "), "{text}");
    assert_eq!(row(&text, &backend(2).0)[8], "-", "{text}");
}
