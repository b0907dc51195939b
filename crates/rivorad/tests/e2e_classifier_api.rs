//! The classifier made visible, end to end: the real rivorad on the lab's lb
//! with a `classifier:` section in its YAML (as in e2e_classifier.rs:
//! targets that own the VIPs on their loopback), exact numbers of UDP
//! datagrams from the client that a rule forwards, that match no rule, and
//! that a rule sends to a group without targets; then the same counters in
//! `GET /v1/classifier`, in the Prometheus text and in `rivoractl rules` /
//! `rivoractl groups` (and the classifier's lines of `rivoractl status` and
//! `rivoractl vips`).
//!
//! rivoractl is run as a binary from the same target directory as rivorad
//! (`cargo test --workspace` builds it; alone, build it first: `cargo build
//! -p rivoractl`).

mod common;

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

use common::*;
use openmetrics_parser::PrometheusValue;
use openmetrics_parser::prometheus::parse_prometheus;
use rivora_api::{ClassifierStatus, ClsCounters};
use rivora_lab::IdentityServer;
use rivora_lab::topology::{backend_v4, backend_v6};

const VIP4: &str = "10.200.100.5";
const VIP6: &str = "fd00:200:100::5";
/// Listed only by `udp-range`, whose group has no target: not ready.
const LONE4: &str = "10.200.100.6";
const METRICS: &str = "127.0.0.1:9469";
/// UDP payload of the counted datagrams: frames of 14 + 20 + 8 + 100 = 142
/// bytes (IPv4) and 14 + 40 + 8 + 100 = 162 bytes (IPv6).
const PAYLOAD: usize = 100;
const FRAME4: u64 = 142;
const FRAME6: u64 = 162;

fn config() -> String {
    format!(
        r#"vips: []
classifier:
  groups:
    - name: dg-a
      maxEndpoints: 32
      targets:
        - identifier: 0
          addresses: [{b1v4}, "{b1v6}"]
        - identifier: 5
          addresses: [{b2v4}, "{b2v6}"]
    - name: dg-b
      maxEndpoints: 8
      sctpHash: five-tuple
      targets: []
  rules:
    - name: web
      group: dg-a
      priority: 10
      destinationCIDRs: [{VIP4}/32, "{VIP6}/128"]
      destinationPorts: ["80"]
      protocols: [TCP, UDP]
    - name: udp-range
      group: dg-b
      priority: 20
      destinationCIDRs: [{VIP4}/32, "{VIP6}/128", {LONE4}]
      sourcePorts: ["1024-65535"]
      destinationPorts: ["9000-9100"]
      protocols: [UDP]
"#,
        b1v4 = backend_v4(1),
        b1v6 = backend_v6(1),
        b2v4 = backend_v4(2),
        b2v6 = backend_v6(2),
    )
}

/// The VIPs on the loopback of the group's targets (b1, b2), with an
/// identity server on port 80 of each.
fn targets_own_the_vips(lab: &Lab) -> Vec<IdentityServer> {
    let mut servers = Vec::new();
    for (i, ns) in lab.topo.backends.iter().enumerate().take(2) {
        for cmd in [
            "ip link set lo up".to_string(),
            format!("ip addr add {VIP4}/32 dev lo"),
            format!("ip -6 addr add {VIP6}/128 dev lo nodad"),
        ] {
            ns.run(&cmd.split(' ').collect::<Vec<_>>()).unwrap();
        }
        let addrs: Vec<SocketAddr> = [VIP4, VIP6]
            .iter()
            .map(|v| SocketAddr::new(v.parse().unwrap(), 80))
            .collect();
        servers.push(IdentityServer::start(ns, &format!("b{}", i + 1), &addrs).unwrap());
    }
    servers
}

/// Sends `count` datagrams of [`PAYLOAD`] bytes from the client to
/// `vip:port` from one socket, and keeps the socket until the targets'
/// replies (if any) stop coming: a reply to a closed port would make the
/// client send an ICMP port unreachable to the VIP, which the classifier
/// forwards as part of the flow and counts.
fn send(lab: &Lab, vip: &str, port: u16, count: usize) {
    let to = SocketAddr::new(vip.parse().unwrap(), port);
    lab.topo
        .client
        .within(move || {
            let any = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
            let s = UdpSocket::bind(any).expect("bind");
            for _ in 0..count {
                s.send_to(&[0x5a; PAYLOAD], to).expect("send");
            }
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut buf = [0u8; 2048];
            while s.recv_from(&mut buf).is_ok() {}
        })
        .expect("enter client namespace");
}

fn classifier(lab: &Lab) -> ClassifierStatus {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(lab.client().classifier())
        .expect("API classifier")
}

/// Every counters slot of the answer by `vip:ADDR`, `rule:NAME` and
/// `group:NAME`.
fn all_counters(c: &ClassifierStatus) -> BTreeMap<String, ClsCounters> {
    let mut m = BTreeMap::new();
    for v in &c.vips {
        m.insert(format!("vip:{}", v.address), v.counters);
    }
    for r in &c.rules {
        m.insert(format!("rule:{}", r.name), r.counters);
    }
    for g in &c.groups {
        m.insert(format!("group:{}", g.name), g.counters);
    }
    for (e, n) in &c.events {
        m.insert(
            format!("event:{e}"),
            ClsCounters {
                packets: *n,
                ..Default::default()
            },
        );
    }
    m
}

/// `after - before`, per slot.
fn deltas(
    before: &BTreeMap<String, ClsCounters>,
    after: &BTreeMap<String, ClsCounters>,
) -> BTreeMap<String, ClsCounters> {
    after
        .iter()
        .map(|(k, a)| {
            let b = before.get(k).copied().unwrap_or_default();
            (
                k.clone(),
                ClsCounters {
                    packets: a.packets - b.packets,
                    bytes: a.bytes - b.bytes,
                    no_target: a.no_target - b.no_target,
                    other: a.other - b.other,
                },
            )
        })
        .collect()
}

fn c(packets: u64, bytes: u64, no_target: u64, other: u64) -> ClsCounters {
    ClsCounters {
        packets,
        bytes,
        no_target,
        other,
    }
}

type Series = BTreeMap<(String, Vec<(String, String)>), f64>;

fn scrape(lab: &Lab) -> Series {
    let (status, ctype, body) = lab.http_get_in_lb(METRICS.parse().unwrap(), "/metrics");
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

/// The series `name` with exactly `labels`.
fn metric(m: &Series, name: &str, labels: &[(&str, &str)]) -> u64 {
    let mut want: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    want.sort();
    let v = m
        .get(&(name.to_string(), want))
        .unwrap_or_else(|| panic!("no series {name}{labels:?}"));
    *v as u64
}

fn rivoractl(lab: &Lab, args: &[&str]) -> String {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rivorad")).with_file_name("rivoractl");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build -p rivoractl), or run the workspace's tests",
        bin.display()
    );
    let out = std::process::Command::new(bin)
        .arg("--socket")
        .arg(&lab.socket)
        .args(args)
        .output()
        .expect("run rivoractl");
    assert!(out.status.success(), "rivoractl {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The trimmed cells of the first table line whose first cell is `first`.
fn row(text: &str, first: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .find(|cells| cells[0] == first)
        .unwrap_or_else(|| panic!("no row starting with {first:?} in\n{text}"))
}

/// The counter cells rivoractl shows for `k`: packets, bytes (as
/// rivoractl prints them), no-target drops, other drops.
fn cells(k: &ClsCounters) -> [String; 4] {
    let bytes = if k.bytes < 1024 {
        format!("{} B", k.bytes)
    } else {
        format!("{:.1} KiB", k.bytes as f64 / 1024.0)
    };
    [
        k.packets.to_string(),
        bytes,
        k.no_target.to_string(),
        k.other.to_string(),
    ]
}

#[test]
fn classifier_counters_in_the_api_metrics_and_rivoractl() {
    let mut lab = Lab::new("clsapi");
    let _servers = targets_own_the_vips(&lab);
    lab.write_raw_config(&config());
    lab.start(&["--metrics-listen", METRICS]);

    // --- What was programmed, before any traffic.
    let start = classifier(&lab);
    let vips: Vec<(&str, bool, Vec<&str>)> = start
        .vips
        .iter()
        .map(|v| {
            (
                v.address.as_str(),
                v.ready,
                v.rules.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        vips,
        [
            (VIP4, true, vec!["udp-range", "web"]),
            (LONE4, false, vec!["udp-range"]),
            (VIP6, true, vec!["udp-range", "web"]),
        ],
        "{start:#?}"
    );
    let range = start.rules.iter().find(|r| r.name == "udp-range").unwrap();
    assert_eq!(
        (
            range.priority,
            range.group.as_str(),
            range.protocols.clone(),
            range.source_ports.clone(),
            range.destination_ports.clone(),
            range.vips.clone()
        ),
        (
            20,
            "dg-b",
            vec!["UDP".to_string()],
            vec!["1024-65535".to_string()],
            vec!["9000-9100".to_string()],
            vec![VIP4.to_string(), VIP6.to_string(), LONE4.to_string()]
        )
    );
    let groups: Vec<_> = start
        .groups
        .iter()
        .map(|g| {
            (
                g.name.as_str(),
                g.max_endpoints,
                g.table_size,
                g.sctp_hash.as_str(),
                g.slots_v4,
                g.slots_v6,
                g.targets.iter().map(|t| t.slot).collect::<Vec<_>>(),
            )
        })
        .collect();
    assert_eq!(
        groups,
        [
            ("dg-a", 32, 3191, "ports", 2, 2, vec![0, 5]),
            ("dg-b", 8, 797, "five-tuple", 0, 0, vec![]),
        ]
    );
    let t5 = &start.groups[0].targets[1];
    assert_eq!(
        (t5.v4.clone(), t5.v6.clone()),
        (
            Some(backend_v4(2).to_string()),
            Some(backend_v6(2).to_string())
        )
    );
    assert_eq!(
        start.events.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "echo",
            "fragment_unmatched",
            "icmp_error",
            "malformed",
            "no_neighbour",
            "no_route",
            "no_rule",
            "no_target",
            "too_big_dropped",
            "too_big_icmp",
            "ttl_to_kernel",
            "vip_gone",
        ]
    );

    // --- Traffic. First real exchanges through rule `web`, so the targets'
    // next hops are resolved before anything is counted exactly.
    for vip in [VIP4, VIP6] {
        let r = lab.udp(vip, 80, 20000, 20);
        assert!(r.all_ok(), "{vip} udp 80: {r}\n{}", lab.log());
        assert_eq!(
            r.per_backend.keys().collect::<Vec<_>>(),
            ["b1", "b2"],
            "{vip}: dg-a is b1 and b2: {r}"
        );
    }
    let before = all_counters(&classifier(&lab));
    send(&lab, VIP4, 80, 40); // web -> dg-a: forwarded
    send(&lab, VIP6, 80, 10); // web -> dg-a: forwarded
    send(&lab, VIP4, 7000, 7); // no rule: dropped
    send(&lab, VIP4, 9000, 5); // udp-range -> dg-b, no target: dropped
    send(&lab, LONE4, 9050, 3); // udp-range -> dg-b, no target: dropped
    let mut want = BTreeMap::new();
    want.insert(format!("vip:{VIP4}"), c(40, 40 * FRAME4, 5, 7));
    want.insert(format!("vip:{VIP6}"), c(10, 10 * FRAME6, 0, 0));
    want.insert(format!("vip:{LONE4}"), c(0, 0, 3, 0));
    want.insert("rule:web".into(), c(50, 40 * FRAME4 + 10 * FRAME6, 0, 0));
    want.insert("rule:udp-range".into(), c(0, 0, 8, 0));
    want.insert("group:dg-a".into(), c(50, 40 * FRAME4 + 10 * FRAME6, 0, 0));
    want.insert("group:dg-b".into(), c(0, 0, 8, 0));
    for e in abi_events() {
        let n = match e {
            "no_rule" => 7,
            "no_target" => 8,
            _ => 0,
        };
        want.insert(format!("event:{e}"), c(n, 0, 0, 0));
    }
    // The datagrams are in flight: wait until they are all counted, then
    // the counts are exact.
    let got = rivora_lab::poll_until(
        "the classifier counters to count the datagrams sent",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {
            let d = deltas(&before, &all_counters(&classifier(&lab)));
            if d == want {
                Ok(d)
            } else {
                Err(format!("{d:#?}"))
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}\nwanted {want:#?}\n{}", lab.log()));
    // Nothing more arrives later.
    std::thread::sleep(Duration::from_millis(300));
    let now = classifier(&lab);
    assert_eq!(deltas(&before, &all_counters(&now)), got);

    // --- Prometheus: the same counters, the targets per family, events.
    let m = scrape(&lab);
    for v in &now.vips {
        let vip = [("vip", v.address.as_str())];
        assert_eq!(
            metric(&m, "rivora_classifier_vip_packets_total", &vip),
            v.counters.packets
        );
        assert_eq!(
            metric(&m, "rivora_classifier_vip_bytes_total", &vip),
            v.counters.bytes
        );
        for (reason, n) in [
            ("no_target", v.counters.no_target),
            ("other", v.counters.other),
        ] {
            assert_eq!(
                metric(
                    &m,
                    "rivora_classifier_vip_drops_total",
                    &[("vip", v.address.as_str()), ("reason", reason)]
                ),
                n,
                "{} {reason}",
                v.address
            );
        }
        assert_eq!(
            metric(&m, "rivora_classifier_vip_ready", &vip),
            u64::from(v.ready)
        );
    }
    for r in &now.rules {
        let l = [("rule", r.name.as_str()), ("group", r.group.as_str())];
        assert_eq!(
            metric(&m, "rivora_classifier_rule_packets_total", &l),
            r.counters.packets
        );
        assert_eq!(
            metric(&m, "rivora_classifier_rule_bytes_total", &l),
            r.counters.bytes
        );
        assert_eq!(
            metric(
                &m,
                "rivora_classifier_rule_drops_total",
                &[l[0], l[1], ("reason", "no_target")]
            ),
            r.counters.no_target
        );
    }
    for g in &now.groups {
        let l = [("group", g.name.as_str())];
        assert_eq!(
            metric(&m, "rivora_classifier_group_packets_total", &l),
            g.counters.packets
        );
        assert_eq!(
            metric(
                &m,
                "rivora_classifier_group_drops_total",
                &[l[0], ("reason", "no_target")]
            ),
            g.counters.no_target
        );
        assert_eq!(
            metric(&m, "rivora_classifier_group_slots", &l),
            u64::from(g.max_endpoints)
        );
    }
    for (group, family, n) in [
        ("dg-a", "ipv4", 2),
        ("dg-a", "ipv6", 2),
        ("dg-b", "ipv4", 0),
        ("dg-b", "ipv6", 0),
    ] {
        assert_eq!(
            metric(
                &m,
                "rivora_classifier_group_targets",
                &[("group", group), ("family", family)]
            ),
            n,
            "{group} {family}"
        );
    }
    for (e, n) in &now.events {
        assert_eq!(
            metric(&m, "rivora_classifier_events_total", &[("event", e)]),
            *n,
            "{e}"
        );
    }
    assert_eq!(
        metric(
            &m,
            "rivora_classifier_events_total",
            &[("event", "no_rule")]
        ),
        before["event:no_rule"].packets + 7
    );

    // --- rivoractl: the same numbers in its tables.
    let web = now.rules.iter().find(|r| r.name == "web").unwrap();
    let text = rivoractl(&lab, &["rules"]);
    eprintln!("rivoractl rules:\n{text}");
    assert_eq!(
        row(&text, "RULE"),
        [
            "RULE",
            "PRIORITY",
            "GROUP",
            "VIPS",
            "PROTOCOLS",
            "SOURCE PORTS",
            "DEST PORTS",
            "PACKETS",
            "BYTES",
            "NO-TARGET DROPS",
            "OTHER DROPS"
        ],
        "{text}"
    );
    let mut want_row = vec![
        "web".to_string(),
        "10".into(),
        "dg-a".into(),
        format!("{VIP4}, {VIP6}"),
        "TCP,UDP".into(),
        "any".into(),
        "80".into(),
    ];
    want_row.extend(cells(&web.counters));
    assert_eq!(row(&text, "web"), want_row, "{text}");
    let range = now.rules.iter().find(|r| r.name == "udp-range").unwrap();
    let r = row(&text, "udp-range");
    let mut want_row = vec![
        "udp-range".to_string(),
        "20".into(),
        "dg-b".into(),
        format!("{VIP4}, {VIP6}, {LONE4}"),
        "UDP".into(),
        "1024-65535".into(),
        "9000-9100".into(),
    ];
    want_row.extend(cells(&range.counters));
    assert_eq!(r, want_row, "{text}");
    let v4 = now.vips.iter().find(|v| v.address == VIP4).unwrap();
    let v = row(&text, VIP4);
    assert_eq!(v[..3], [VIP4, "yes", "udp-range, web"], "{text}");
    assert_eq!(v[3..], cells(&v4.counters), "{text}");
    assert_eq!(row(&text, LONE4)[1], "no (no target of its family)");
    let events = text
        .lines()
        .find_map(|l| l.strip_prefix("Classifier events: "))
        .unwrap_or_else(|| panic!("no events line in\n{text}"));
    assert!(
        events.contains(&format!("no_rule {}", now.events["no_rule"]))
            && events.contains(&format!("no_target {}", now.events["no_target"])),
        "{events}"
    );

    let text = rivoractl(&lab, &["groups"]);
    eprintln!("rivoractl groups:\n{text}");
    let rows: Vec<Vec<String>> = text
        .lines()
        .filter(|l| l.starts_with("| dg-"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    let dga = &now.groups[0];
    let mut want_row = vec![
        "dg-a".to_string(),
        "32".into(),
        "3191".into(),
        "ports".into(),
        "2".into(),
        "2".into(),
        "web".into(),
    ];
    want_row.extend(cells(&dga.counters));
    assert_eq!(rows[0], want_row, "{text}");
    let dgb = &now.groups[1];
    let mut want_row = vec![
        "dg-b".to_string(),
        "8".into(),
        "797".into(),
        "five-tuple".into(),
        "0".into(),
        "0".into(),
        "udp-range".into(),
    ];
    want_row.extend(cells(&dgb.counters));
    assert_eq!(rows[1], want_row, "{text}");
    // The targets table: dg-a's by slot, dg-b has none.
    assert_eq!(
        rows[2..],
        [
            vec![
                "dg-a".to_string(),
                "0".into(),
                backend_v4(1).to_string(),
                backend_v6(1).to_string()
            ],
            vec![
                "dg-a".to_string(),
                "5".into(),
                backend_v4(2).to_string(),
                backend_v6(2).to_string()
            ],
            vec![
                "dg-b".to_string(),
                "(no targets)".into(),
                "-".into(),
                "-".into()
            ],
        ],
        "{text}"
    );

    // JSON is the API's answer (no traffic since: the same counters).
    let json: ClassifierStatus =
        serde_json::from_str(&rivoractl(&lab, &["groups", "-o", "json"])).unwrap();
    assert_eq!(json, now);

    // status and vips sum the classifier up.
    let text = rivoractl(&lab, &["status"]);
    assert_eq!(
        row(&text, "Classifier"),
        ["Classifier", "3 VIPs (2 ready), 2 rules, 2 groups"],
        "{text}"
    );
    let text = rivoractl(&lab, &["vips"]);
    assert!(
        text.starts_with("Classifier VIPs (rules in evaluation order;"),
        "{text}"
    );
    assert_eq!(row(&text, VIP6)[..3], [VIP6, "yes", "udp-range, web"]);

    let log = lab.log();
    assert!(lab.stop(), "rivorad stops cleanly:\n{log}");
}

/// The classifier's event names (`rivora_abi::cls_event::NAMES`, which
/// this test crate does not depend on).
fn abi_events() -> [&'static str; 12] {
    [
        "no_rule",
        "no_target",
        "no_neighbour",
        "no_route",
        "too_big_icmp",
        "too_big_dropped",
        "ttl_to_kernel",
        "fragment_unmatched",
        "malformed",
        "echo",
        "icmp_error",
        "vip_gone",
    ]
}
