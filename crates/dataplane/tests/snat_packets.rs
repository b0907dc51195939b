//! Source translation of flows to backends on other nodes (bpf/snat.h)
//! through the real programs: a flow to a backend flagged `snat` leaves
//! with the node's address and a node port as source, routed by the FIB;
//! the backend's reply to that port goes back to the client as the VIP;
//! ports are per backend endpoint, run out with a count, and come back
//! from idle mappings. Every frame the programs emit is read by the
//! independent parser, which checks every checksum.

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::*;
use rivora_abi as abi;
use rivora_dataplane::snat::SnatSource;
use rivora_dataplane::{BackendKey, proto};

const XDP_REDIRECT: u32 = 4;
use rivora_lab::fib::{BACKEND_HOP_MAC, CLIENT_HOP_MAC, NODE4, NODE6};

/// The FIB namespace (rivora_lab::fib: backends and clients routed via
/// two next hops, NODE4/NODE6 the node's) and its ingress ifindex.
fn snat_ns(name: &str) -> (rivora_lab::Netns, u32) {
    let lab = rivora_lab::fib::FibLab::new(name).unwrap();
    (lab.ns, lab.ingress_ifindex)
}

fn key(s: &str) -> BackendKey {
    s.parse::<std::net::SocketAddr>()
        .map(|a| BackendKey {
            addr: a.ip(),
            port: a.port(),
        })
        .unwrap()
}

/// VIPs (each a NAT VIP whose backends are all on other nodes unless
/// named "local"):
/// - t4 10.200.100.1:80/TCP -> 10.200.1.12:8080 (remote)
/// - m4 10.200.100.1:81/TCP -> 10.200.1.11:8080 (local), 10.200.1.12:8081 (remote)
/// - u4 10.200.100.1:53/UDP -> 10.200.1.13:5353, 10.200.1.14:5353 (remote, weight
///   shares picked per test)
/// - t6 [fd00:200:100::1]:80/TCP -> [fd00:200:1::12]:8080 (remote)
///
/// with the node's source NODE4/NODE6 and node ports `ports`.
fn snat_rig(name: &str, ports: std::ops::RangeInclusive<u16>, udp_idle: Duration) -> Rig {
    let mut r = rig(name);
    r.dataplane
        .set_snat_source(SnatSource {
            v4: Some(NODE4.parse().unwrap()),
            v6: Some(NODE6.parse().unwrap()),
            ports,
            udp_idle,
            ..SnatSource::default()
        })
        .unwrap();
    let mut t4 = vip(
        "t4",
        "10.200.100.1",
        80,
        proto::TCP,
        vec![backend("10.200.1.12", 8080, 1)],
    );
    t4.snat = BTreeSet::from([key("10.200.1.12:8080")]);
    let mut m4 = vip(
        "m4",
        "10.200.100.1",
        81,
        proto::TCP,
        vec![
            backend("10.200.1.11", 8080, 1),
            backend("10.200.1.12", 8081, 1),
        ],
    );
    m4.snat = BTreeSet::from([key("10.200.1.12:8081")]);
    // Per-flow reverse entries for the local backend (as Kubernetes VIPs
    // have), so the test can count what tc_nat was given.
    m4.stateless_reverse = false;
    let mut u4 = vip(
        "u4",
        "10.200.100.1",
        53,
        proto::UDP,
        vec![backend("10.200.1.13", 5353, 1)],
    );
    u4.snat = BTreeSet::from([key("10.200.1.13:5353")]);
    let mut t6 = vip(
        "t6",
        "fd00:200:100::1",
        80,
        proto::TCP,
        vec![backend("fd00:200:1::12", 8080, 1)],
    );
    t6.snat = BTreeSet::from([key("[fd00:200:1::12]:8080")]);
    r.dataplane.apply(&[t4, m4, u4, t6]).unwrap();
    r
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// One TCP segment (`flags`) or UDP datagram from `src:sport` to
/// `dst:dport`, as an Ethernet frame.
fn frame(src: &str, sport: u16, dst: &str, dport: u16, l4: u8, flags: u8) -> Vec<u8> {
    let (s, d) = (ip(src), ip(dst));
    let seg = if l4 == raw::TCP {
        raw::tcp(s, d, sport, dport, flags, b"rivora snat test")
    } else {
        raw::udp(s, d, sport, dport, b"rivora snat test")
    };
    raw::frame(s, d, l4, &[], &seg)
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const SYN_ACK: u8 = 0x12;
const FIN_ACK: u8 = 0x11;

/// The SNAT counters by name.
fn counters(r: &Rig) -> std::collections::BTreeMap<&'static str, u64> {
    abi::snat_counter::NAMES
        .into_iter()
        .zip(r.dataplane.snat_counters().unwrap())
        .collect()
}

#[test]
fn a_remote_flow_leaves_from_the_node_and_its_reply_returns_as_the_vip() {
    let (ns, up1) = snat_ns("snatfwd");
    let mut r = snat_rig("snatfwd", 61000..=61999, Duration::from_secs(120));
    let cases = [
        ("10.200.0.2", "10.200.100.1", "10.200.1.12", NODE4),
        ("fd00:200::2", "fd00:200:100::1", "fd00:200:1::12", NODE6),
    ];
    for (client, vip, backend, node) in cases {
        let (syn, ack, reply, fin) = ns
            .within(|| {
                pin_to_cpu0();
                let syn = r
                    .datapath
                    .run_xdp_on(&frame(client, 40000, vip, 80, raw::TCP, SYN), up1)
                    .unwrap();
                let ack = r
                    .datapath
                    .run_xdp_on(&frame(client, 40000, vip, 80, raw::TCP, ACK), up1)
                    .unwrap();
                let nport = parse_checked(&syn.1).sport;
                let reply = r
                    .datapath
                    .run_xdp_on(&frame(backend, 8080, node, nport, raw::TCP, SYN_ACK), up1)
                    .unwrap();
                // The second reply takes the client's cached next hop
                // (snat.h rv_snat_reply_send): the same frame out.
                let again = r
                    .datapath
                    .run_xdp_on(&frame(backend, 8080, node, nport, raw::TCP, SYN_ACK), up1)
                    .unwrap();
                assert_eq!(again, reply, "{vip}: the cached next hop sends it alike");
                let fin = r
                    .datapath
                    .run_xdp_on(&frame(client, 40000, vip, 80, raw::TCP, FIN_ACK), up1)
                    .unwrap();
                (syn, ack, reply, fin)
            })
            .unwrap();
        assert_eq!(syn.0, XDP_REDIRECT, "{vip}: the SYN is routed here");
        let s = parse_checked(&syn.1);
        assert_eq!(
            (s.src, s.dst, s.dport),
            (ip(node), ip(backend), 8080),
            "{vip}: from the node, to the backend"
        );
        assert!(
            (61000..=61999).contains(&s.sport),
            "{vip}: node port {}",
            s.sport
        );
        assert_eq!(
            &syn.1[0..6],
            &BACKEND_HOP_MAC,
            "{vip}: to the backend's next hop"
        );
        assert_eq!(ack.0, XDP_REDIRECT);
        let a = parse_checked(&ack.1);
        assert_eq!(
            (a.src, a.sport),
            (s.src, s.sport),
            "{vip}: the flow keeps its port"
        );
        assert_eq!(
            reply.0, XDP_REDIRECT,
            "{vip}: the reply is routed back here"
        );
        let p = parse_checked(&reply.1);
        assert_eq!(
            (p.src, p.sport, p.dst, p.dport),
            (ip(vip), 80, ip(client), 40000),
            "{vip}: the client sees the VIP"
        );
        assert_eq!(
            &reply.1[0..6],
            &CLIENT_HOP_MAC,
            "{vip}: to the client's next hop"
        );
        assert_eq!(fin.0, XDP_REDIRECT);
        assert_eq!(
            parse_checked(&fin.1).sport,
            s.sport,
            "{vip}: FIN on the same port"
        );
    }
    let c = counters(&r);
    assert_eq!(c["allocated"], 2, "one mapping per family: {c:?}");
    assert_eq!(c["forwarded"], 6, "{c:?}");
    assert_eq!(c["replied"], 4, "{c:?}");
    assert_eq!(c["to_kernel"], 0, "{c:?}");
    // The FIN marked the mapping closing.
    let rev: Vec<_> = r
        .dataplane
        .maps()
        .snat_rev
        .iter()
        .map(|e| e.unwrap().1)
        .collect();
    assert_eq!(rev.len(), 1, "{rev:?}");
    assert_eq!(rev[0].flags, abi::snat_rev_flags::CLOSING);
}

#[test]
fn local_backends_keep_the_client_and_unknown_replies_go_to_the_kernel() {
    let (ns, up1) = snat_ns("snatmix");
    let mut r = snat_rig("snatmix", 61000..=61999, Duration::from_secs(120));
    let (by_backend, stray, outside) = ns
        .within(|| {
            pin_to_cpu0();
            let mut by_backend = std::collections::BTreeMap::new();
            for sport in 40000..40064 {
                let (v, out) = r
                    .datapath
                    .run_xdp_on(
                        &frame("10.200.0.2", sport, "10.200.100.1", 81, raw::TCP, SYN),
                        up1,
                    )
                    .unwrap();
                let p = parse_checked(&out);
                by_backend
                    .entry((p.dst, p.dport))
                    .or_insert_with(Vec::new)
                    .push((v, p));
            }
            // A packet to the node in the range without a mapping, and one
            // outside the range.
            let stray = r
                .datapath
                .run_xdp_on(
                    &frame("10.200.1.12", 8080, NODE4, 61500, raw::TCP, ACK),
                    up1,
                )
                .unwrap();
            let outside = r
                .datapath
                .run_xdp_on(&frame("10.200.1.12", 8080, NODE4, 22, raw::TCP, ACK), up1)
                .unwrap();
            (by_backend, stray, outside)
        })
        .unwrap();
    assert_eq!(
        by_backend.len(),
        2,
        "both backends were picked: {by_backend:?}"
    );
    for (v, p) in &by_backend[&(ip("10.200.1.11"), 8080)] {
        assert_eq!(
            *v, XDP_PASS,
            "the local backend: NAT as ever, to the kernel"
        );
        assert_eq!(p.src, ip("10.200.0.2"), "the local backend sees the client");
    }
    for (v, p) in &by_backend[&(ip("10.200.1.12"), 8081)] {
        assert_eq!(*v, XDP_REDIRECT);
        assert_eq!(p.src, ip(NODE4), "the remote backend sees the node");
    }
    let remote = by_backend[&(ip("10.200.1.12"), 8081)].len() as u64;
    let c = counters(&r);
    assert_eq!(c["allocated"], remote, "{c:?}");
    assert_eq!(stray.0, XDP_PASS, "no mapping: the kernel's");
    assert_eq!(
        parse_checked(&stray.1).dst,
        ip(NODE4),
        "handed over untouched"
    );
    assert_eq!(outside.0, XDP_PASS);
    assert_eq!(c["reply_unmatched"], 1, "only the one in the range: {c:?}");
    // tc_nat got a reverse entry for each local flow and none for the
    // remote ones: their replies never pass it.
    let reverse = r.dataplane.maps().nat_reverse.keys().count() as u64;
    assert_eq!(reverse, 64 - remote, "{remote} remote flows of 64");
}

#[test]
fn ports_are_per_backend_endpoint_run_out_with_a_count_and_return_when_idle() {
    let (ns, up1) = snat_ns("snatport");
    // Four node ports; UDP mappings idle after a tick.
    let mut r = snat_rig("snatport", 62000..=62003, Duration::ZERO);
    let send = |r: &mut Rig, src: &str, sport: u16, dst: &str, dport: u16, l4: u8| {
        ns.within(|| {
            pin_to_cpu0();
            r.datapath
                .run_xdp_on(&frame(src, sport, dst, dport, l4, SYN), up1)
                .unwrap()
        })
        .unwrap()
    };
    // TCP clients of t4 take the four ports of 10.200.1.12:8080 (random
    // tries: a client may miss the last free port and be refused, which
    // counts).
    let mut ports = BTreeSet::new();
    let mut refused = 0;
    for c in 2..60 {
        if ports.len() == 4 {
            break;
        }
        let client = format!("10.200.0.{c}");
        match send(&mut r, &client, 40000, "10.200.100.1", 80, raw::TCP) {
            (XDP_REDIRECT, out) => assert!(ports.insert(parse_checked(&out).sport), "a port twice"),
            (XDP_DROP, _) => refused += 1,
            (v, _) => panic!("client {c}: verdict {v}"),
        }
    }
    assert_eq!(ports, BTreeSet::from([62000, 62001, 62002, 62003]));
    // Then every new flow finds them all held by live flows: dropped, counted.
    for more in 0..5 {
        let client = format!("10.200.0.{}", 100 + more);
        let (v, _) = send(&mut r, &client, 40000, "10.200.100.1", 80, raw::TCP);
        assert_eq!(v, XDP_DROP, "no port left for {client}");
    }
    let drops = r.dataplane.drop_counters().unwrap();
    assert_eq!(
        drops[abi::drop_reason::SNAT_EXHAUSTED as usize],
        refused + 5
    );
    // Another backend endpoint has its own ports (m4's remote backend
    // 10.200.1.12:8081): the same client and port get one.
    let mut got = None;
    for sport in 40000..40064 {
        let (v, out) = send(&mut r, "10.200.0.6", sport, "10.200.100.1", 81, raw::TCP);
        let p = parse_checked(&out);
        if p.dport == 8081 {
            got = Some((v, p.sport));
            break;
        }
    }
    let (v, port) = got.expect("m4 picked its remote backend for some port");
    assert_eq!(v, XDP_REDIRECT);
    assert!((62000..=62003).contains(&port));
    // UDP: flows of new clients map the four ports of 10.200.1.13:5353
    // (one tick of idleness frees a port: some may already be taken over) ...
    let mut udp_ports = BTreeSet::new();
    for c in 2..60 {
        if udp_ports.len() == 4 {
            break;
        }
        let client = format!("10.200.0.{c}");
        if let (XDP_REDIRECT, out) = send(&mut r, &client, 5000, "10.200.100.1", 53, raw::UDP) {
            udp_ports.insert(parse_checked(&out).sport);
        }
    }
    assert_eq!(udp_ports.len(), 4, "UDP flows mapped every port");
    // ... so a new client can only get one by taking over an idle mapping:
    // it does within 10 s (udp_idle 0 s is the next tick, at most 1.28 s
    // at HZ=100).
    let reused_before = counters(&r)["reused_idle"];
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last;
    loop {
        last = send(&mut r, "10.200.2.1", 5000, "10.200.100.1", 53, raw::UDP).0;
        if last == XDP_REDIRECT || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        last, XDP_REDIRECT,
        "an idle UDP mapping gave its port up within 10 s"
    );
    let c = counters(&r);
    assert!(c["reused_idle"] > reused_before, "{c:?}");
}

/// A remote backend leaving its VIP (its Pod terminating: the endpoint drops out of the slice)
/// retires, and its established flows keep leaving from the node's address and port until
/// they end: first when the VIP still has another remote backend, then when what remains is
/// local only (the VIP's own SNAT flag must stay for them). Before the fix the retiring
/// backend lost its SNAT flag, and the flow's next packet reached the pod with the client's
/// address: the pod answered the client directly and the connection stalled (found by the
/// rollout test on the real cluster, crates/installer/tests/cluster_install_e2e.rs).
#[test]
fn a_retiring_remote_backend_keeps_translating_its_established_flows() {
    let (ns, up1) = snat_ns("snatretire");
    let mut r = snat_rig("snatretire", 61000..=61999, Duration::from_secs(120));
    r.dataplane.set_retire_grace(Duration::from_secs(30));
    let send = |r: &mut Rig, sport: u16, dport: u16, flags: u8| {
        ns.within(|| {
            pin_to_cpu0();
            r.datapath
                .run_xdp_on(
                    &frame("10.200.0.2", sport, "10.200.100.1", dport, raw::TCP, flags),
                    up1,
                )
                .unwrap()
        })
        .unwrap()
    };
    // Established flows: one to t4's remote backend, one to m4's remote backend (found by
    // trying source ports until m4's Maglev picks the remote one).
    let t4_syn = send(&mut r, 40000, 80, SYN);
    send(&mut r, 40000, 80, ACK);
    let t4 = parse_checked(&t4_syn.1);
    assert_eq!((t4.src, t4.dst), (ip(NODE4), ip("10.200.1.12")));
    let (m4_port, m4) = (41000..41200)
        .find_map(|p| {
            let out = send(&mut r, p, 81, SYN);
            let f = parse_checked(&out.1);
            (f.dst == ip("10.200.1.12")).then_some((p, f))
        })
        .expect("some source port picks m4's remote backend");
    send(&mut r, m4_port, 81, ACK);
    assert_eq!(m4.src, ip(NODE4));

    // t4's remote backend is replaced by a local one; m4 loses its remote one.
    let t4_local = vip(
        "t4",
        "10.200.100.1",
        80,
        proto::TCP,
        vec![backend("10.200.1.11", 8080, 1)],
    );
    let mut m4_local = vip(
        "m4",
        "10.200.100.1",
        81,
        proto::TCP,
        vec![backend("10.200.1.11", 8080, 1)],
    );
    m4_local.stateless_reverse = false;
    let mut u4 = vip(
        "u4",
        "10.200.100.1",
        53,
        proto::UDP,
        vec![backend("10.200.1.13", 5353, 1)],
    );
    u4.snat = BTreeSet::from([key("10.200.1.13:5353")]);
    let mut t6 = vip(
        "t6",
        "fd00:200:100::1",
        80,
        proto::TCP,
        vec![backend("fd00:200:1::12", 8080, 1)],
    );
    t6.snat = BTreeSet::from([key("[fd00:200:1::12]:8080")]);
    let report = r.dataplane.apply(&[t4_local, m4_local, u4, t6]).unwrap();
    assert_eq!(
        report.backends_retired, 2,
        "both remote backends retire: {report:?}"
    );

    for (what, sport, dport, want) in [("t4", 40000, 80, &t4), ("m4", m4_port, 81, &m4)] {
        let (verdict, out) = send(&mut r, sport, dport, ACK);
        assert_eq!(
            verdict, XDP_REDIRECT,
            "{what}: the established flow is forwarded"
        );
        let f = parse_checked(&out);
        assert_eq!(
            (f.src, f.sport, f.dst, f.dport),
            (want.src, want.sport, want.dst, want.dport),
            "{what}: the established flow still leaves from the node's port to its retiring backend"
        );
    }
    // A new flow of t4 goes to the local backend, with the client's address.
    let (_, out) = send(&mut r, 40001, 80, SYN);
    let f = parse_checked(&out);
    assert_eq!((f.src, f.dst), (ip("10.200.0.2"), ip("10.200.1.11")));
}
