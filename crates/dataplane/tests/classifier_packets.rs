//! The classifier (Meridio-2's rules and distribution groups) through the
//! real program: maps written by the dataplane crate's writer, frames run
//! with BPF_PROG_TEST_RUN in a namespace whose FIB knows the targets (each
//! on-link with its own permanent neighbour, so the destination MAC of an
//! output frame names the target it went to), outputs read by an
//! independent parser (etherparse and the RFC checksums of common::raw).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use common::raw;
use common::*;
use rivora_abi as abi;
use rivora_dataplane::classifier::{
    ByteMatch, ClassifierSpec, GroupSpec, PortRange, RuleProto, RuleSpec, SctpHash, TargetSpec,
};
use rivora_dataplane::{Dataplane, SourceRange};

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const XDP_REDIRECT: u32 = 4;
const SCTP: u8 = 132;

const V4: &str = "10.200.100.5";
const V6: &str = "fd00:200:100::5";
const V4_PORT_ONLY: &str = "10.200.100.6";
const NOT_A_VIP: &str = "10.200.100.7";
const V4_MTU: &str = "10.200.100.8";
const V6_MTU: &str = "fd00:200:100::8";
const V4_NO_NEIGH: &str = "10.200.100.9";

/// The MAC of the on-link target whose addresses end in `n` (10.200.9.n,
/// fd00:200:9::n with n in hex digits as written).
fn target_mac(n: u8) -> [u8; 6] {
    [0x02, 0xaa, 0, 0, 0, n]
}

/// The namespace of rivora_lab::fib plus the targets on up0's subnet, each
/// with a permanent neighbour entry of its own MAC; the MTU targets behind
/// host routes of MTU 1200 (IPv4) and 1300 (IPv6), locked (forwarding, and
/// so bpf_fib_lookup, takes a route's MTU only when locked or with
/// ip_forward_use_pmtu; an interface's MTU always); 10.200.9.64 without a
/// neighbour entry.
fn lab(name: &str) -> (rivora_lab::Netns, u32) {
    let lab = rivora_lab::fib::FibLab::new(name).unwrap();
    for n in [0x10u8, 0x11, 0x15, 0x20, 0x30] {
        let mac = target_mac(n)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":");
        for addr in [format!("10.200.9.{n}"), format!("fd00:200:9::{n:x}")] {
            lab.ns
                .run(&[
                    "ip",
                    "neigh",
                    "add",
                    &addr,
                    "lladdr",
                    &mac,
                    "dev",
                    "up0",
                    "nud",
                    "permanent",
                ])
                .unwrap();
        }
    }
    for cmd in [
        "ip route add 10.200.9.48/32 dev up0 mtu lock 1200",
        "ip -6 route add fd00:200:9::30/128 dev up0 mtu lock 1300",
    ] {
        lab.ns.run(&cmd.split(' ').collect::<Vec<_>>()).unwrap();
    }
    (lab.ns, lab.ingress_ifindex)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn target(slot: u16, n: u8, v6: bool) -> TargetSpec {
    TargetSpec {
        slot,
        v4: Some(format!("10.200.9.{n}").parse().unwrap()),
        v6: v6.then(|| format!("fd00:200:9::{n:x}").parse().unwrap()),
    }
}

fn group(name: &str, max: u16, targets: Vec<TargetSpec>) -> GroupSpec {
    GroupSpec {
        name: name.into(),
        max_endpoints: max,
        sctp_hash: SctpHash::Ports,
        targets,
    }
}

fn rule(name: &str, priority: i32, group: &str, vips: &[&str], protos: &[RuleProto]) -> RuleSpec {
    RuleSpec {
        name: name.into(),
        priority,
        group: group.into(),
        vips: vips.iter().map(|v| ip(v)).collect(),
        sources: vec![],
        source_ports: vec![],
        destination_ports: vec![],
        protocols: protos.iter().copied().collect(),
        byte_matches: vec![],
    }
}

/// The test's classifier (the module doc of each test says which rule it
/// exercises).
fn spec() -> ClassifierSpec {
    use RuleProto::*;
    let mut src = rule("r-src", 20, "dg-b", &[V4, V6], &[Tcp, Udp]);
    src.sources = vec![
        "10.200.0.128/25".parse::<SourceRange>().unwrap(),
        "fd00:200::8000/113".parse::<SourceRange>().unwrap(),
    ];
    let mut syn = rule("r-syn", 30, "dg-b", &[V4, V6], &[Tcp]);
    syn.byte_matches = vec!["tcp[13:1]&0x02=0x02".parse::<ByteMatch>().unwrap()];
    let mut dead = rule("r-dead", 40, "dg-empty", &[V4, V6], &[Udp]);
    dead.destination_ports = vec![PortRange {
        first: 9999,
        last: 9999,
    }];
    let mut init = rule("r-init", 50, "dg-b", &[V4, V6], &[Sctp]);
    init.byte_matches = vec!["sctp[4:4]=0".parse::<ByteMatch>().unwrap()];
    let mut port = rule("r-port", 5, "dg-a", &[V4_PORT_ONLY], &[Udp]);
    port.destination_ports = vec![PortRange {
        first: 80,
        last: 80,
    }];
    ClassifierSpec {
        groups: vec![
            group(
                "dg-a",
                32,
                vec![
                    target(0, 0x10, true),
                    target(1, 0x11, true),
                    target(5, 0x15, false),
                ],
            ),
            group("dg-b", 4, vec![target(2, 0x20, true)]),
            group("dg-empty", 8, vec![]),
            group(
                "dg-mtu",
                2,
                vec![TargetSpec {
                    slot: 0,
                    v4: Some("10.200.9.48".parse().unwrap()),
                    v6: Some("fd00:200:9::30".parse().unwrap()),
                }],
            ),
            group(
                "dg-noneigh",
                2,
                vec![TargetSpec {
                    slot: 1,
                    v4: Some("10.200.9.64".parse().unwrap()),
                    v6: None,
                }],
            ),
        ],
        rules: vec![
            rule("r-low", 10, "dg-a", &[V4, V6], &[Tcp, Udp, Sctp]),
            src,
            syn,
            dead,
            init,
            port,
            rule("r-mtu", 1, "dg-mtu", &[V4_MTU, V6_MTU], &[Tcp, Udp]),
            rule("r-nn", 1, "dg-noneigh", &[V4_NO_NEIGH], &[Udp]),
        ],
    }
}

fn classifier_rig(name: &str) -> Rig {
    let mut r = rig(name);
    r.dataplane.apply_classifier(&spec(), true).unwrap();
    r
}

fn tcp_frame(src: &str, sport: u16, dst: &str, dport: u16, flags: u8) -> Vec<u8> {
    let (s, d) = (ip(src), ip(dst));
    raw::frame(
        s,
        d,
        raw::TCP,
        &[],
        &raw::tcp(s, d, sport, dport, flags, b"payload"),
    )
}

fn udp_frame(src: &str, sport: u16, dst: &str, dport: u16) -> Vec<u8> {
    let (s, d) = (ip(src), ip(dst));
    raw::frame(
        s,
        d,
        raw::UDP,
        &[],
        &raw::udp(s, d, sport, dport, b"payload"),
    )
}

/// An SCTP packet: common header (ports, verification tag, a checksum the
/// datapath does not check) and a DATA-shaped chunk.
fn sctp_frame(src: &str, sport: u16, dst: &str, dport: u16, vtag: u32) -> Vec<u8> {
    let mut l4 = Vec::new();
    l4.extend_from_slice(&sport.to_be_bytes());
    l4.extend_from_slice(&dport.to_be_bytes());
    l4.extend_from_slice(&vtag.to_be_bytes());
    l4.extend_from_slice(&[0, 0, 0, 0]);
    l4.extend_from_slice(&[0, 3, 0, 20]);
    l4.extend_from_slice(&[0u8; 16]);
    raw::frame(ip(src), ip(dst), SCTP, &[], &l4)
}

/// Runs frames inside the namespace (FIB lookups there), on one CPU so the
/// per-CPU counters are read back from where they were counted.
fn run(
    ns: &rivora_lab::Netns,
    ifindex: u32,
    r: &mut Rig,
    frames: &[Vec<u8>],
) -> Vec<(u32, Vec<u8>)> {
    ns.within(|| {
        pin_to_one_cpu();
        frames
            .iter()
            .map(|f| r.datapath.run_xdp_on(f, ifindex).unwrap())
            .collect::<Vec<_>>()
    })
    .unwrap()
}

/// The target a forwarded frame went to (the last byte of its destination
/// MAC), checked: redirected out of up0, destination still the VIP, TTL
/// down by one, checksums valid.
fn forwarded_to(input: &[u8], (verdict, out): &(u32, Vec<u8>)) -> u8 {
    assert_eq!(*verdict, XDP_REDIRECT, "forwarded by xdp itself");
    assert_eq!(out.len(), input.len(), "no NAT, no encapsulation");
    assert_eq!(out[0..5], target_mac(0)[0..5], "to a target's MAC");
    let (ttl_in, ttl_out) = if out[12..14] == [0x86, 0xdd] {
        (input[21], out[21])
    } else {
        (input[22], out[22])
    };
    assert_eq!(ttl_out, ttl_in - 1, "TTL / hop limit lowered");
    // Everything from the IP header on but the TTL (and the IPv4 header
    // checksum) is unchanged: the VIP stays the destination.
    let l3 = 14;
    let skip: &[usize] = if out[12..14] == [0x86, 0xdd] {
        &[l3 + 7]
    } else {
        &[l3 + 8, l3 + 10, l3 + 11]
    };
    for (i, (a, b)) in input.iter().zip(out.iter()).enumerate().skip(l3) {
        if !skip.contains(&i) {
            assert_eq!(a, b, "byte {i} changed");
        }
    }
    if out[12..14] == [0x08, 0x00] {
        assert_eq!(raw::checksum(&out[14..34], 0), 0, "IPv4 header checksum");
    }
    out[5]
}

fn event(r: &Rig, index: u32) -> u64 {
    r.dataplane
        .maps()
        .cls
        .events
        .get(&index, 0)
        .unwrap()
        .iter()
        .sum()
}

fn stats(
    map: &aya::maps::PerCpuArray<aya::maps::MapData, abi::ClsStats>,
    id: u32,
) -> abi::ClsStats {
    map.get(&id, 0)
        .unwrap()
        .iter()
        .fold(abi::ClsStats::default(), |a, s| abi::ClsStats {
            packets: a.packets + s.packets,
            bytes: a.bytes + s.bytes,
            no_target: a.no_target + s.no_target,
            other: a.other + s.other,
        })
}

#[test]
fn rules_select_their_groups_and_packets_keep_the_vip() {
    let (ns, up1) = lab("clsrules");
    let mut r = classifier_rig("clsrules");
    let (dg_a, dg_b) = (
        BTreeSet::from([0x10u8, 0x11, 0x15]),
        BTreeSet::from([0x20u8]),
    );

    // r-low: plain TCP and UDP from clients outside r-src's prefix, both
    // families, spread over dg-a's targets; IPv6 never to slot 5 (IPv4
    // only), IPv4 to all three.
    for (client, vip, want) in [
        ("10.200.0.2", V4, dg_a.clone()),
        ("fd00:200::2", V6, BTreeSet::from([0x10u8, 0x11])),
    ] {
        let frames: Vec<Vec<u8>> = (0..150u16)
            .flat_map(|i| {
                [
                    tcp_frame(client, 20000 + i, vip, 80, 0x10),
                    udp_frame(client, 20000 + i, vip, 53),
                ]
            })
            .collect();
        let out = run(&ns, up1, &mut r, &frames);
        let seen: BTreeSet<u8> = frames
            .iter()
            .zip(&out)
            .map(|(f, o)| forwarded_to(f, o))
            .collect();
        assert_eq!(
            seen, want,
            "{vip}: r-low spreads over dg-a's targets of the family"
        );
        // The same flow always reaches the same target (stateless hash).
        let again = run(&ns, up1, &mut r, &frames[..20]);
        for (i, o) in again.iter().enumerate() {
            assert_eq!(o.1[5], out[i].1[5], "{vip}: flow {i} moved");
        }
    }

    // r-syn (priority 30, tcp[13:1]&0x02=0x02) over r-low; r-src
    // (priority 20, the client's /25) over r-low.
    let cases = [
        (tcp_frame("10.200.0.2", 30000, V4, 80, 0x02), &dg_b, "SYN"),
        (
            tcp_frame("fd00:200::2", 30000, V6, 80, 0x02),
            &dg_b,
            "SYN v6",
        ),
        (
            tcp_frame("10.200.0.200", 30001, V4, 80, 0x10),
            &dg_b,
            "source in r-src",
        ),
        (
            udp_frame("fd00:200::8001", 30001, V6, 53),
            &dg_b,
            "source in r-src v6",
        ),
        (
            tcp_frame("10.200.0.100", 30002, V4, 80, 0x10),
            &dg_a,
            "source outside r-src",
        ),
        (udp_frame(V4, 1, V4_PORT_ONLY, 80), &dg_a, "r-port's port"),
    ];
    let frames: Vec<Vec<u8>> = cases.iter().map(|c| c.0.clone()).collect();
    let out = run(&ns, up1, &mut r, &frames);
    for ((frame, want, what), o) in cases.iter().zip(&out) {
        let got = forwarded_to(frame, o);
        assert!(want.contains(&got), "{what}: went to .{got:x}");
    }

    // r-dead: its group has no target, so UDP 9999 is dropped at its
    // priority (never falls to r-low), counted; no rule for UDP 81 on
    // V4_PORT_ONLY: dropped, counted; a non-VIP is not touched.
    let no_target = event(&r, abi::cls_event::NO_TARGET);
    let no_rule = event(&r, abi::cls_event::NO_RULE);
    let frames = [
        udp_frame("10.200.0.2", 40000, V4, 9999),
        udp_frame("fd00:200::2", 40000, V6, 9999),
        udp_frame("10.200.0.2", 40000, V4_PORT_ONLY, 81),
        tcp_frame("10.200.0.2", 40000, NOT_A_VIP, 80, 0x10),
    ];
    let out = run(&ns, up1, &mut r, &frames);
    assert_eq!(out[0].0, XDP_DROP, "r-dead drops");
    assert_eq!(out[1].0, XDP_DROP, "r-dead drops v6");
    assert_eq!(out[2].0, XDP_DROP, "no rule");
    assert_eq!(
        out[3],
        (XDP_PASS, frames[3].clone()),
        "not a VIP: untouched"
    );
    assert_eq!(event(&r, abi::cls_event::NO_TARGET), no_target + 2);
    assert_eq!(event(&r, abi::cls_event::NO_RULE), no_rule + 1);
    let cls = r.dataplane.classifier();
    let dead = cls.rule_id("r-dead").unwrap();
    let maps = &r.dataplane.maps().cls;
    assert_eq!(stats(&maps.rule_stats, dead).no_target, 2);
    assert_eq!(stats(&maps.rule_stats, dead).packets, 0);
    let port_vip = cls.vip_stats_id(ip(V4_PORT_ONLY)).unwrap();
    assert_eq!(
        stats(&maps.vip_stats, port_vip).other,
        1,
        "unmatched counted on the VIP"
    );
    assert_eq!(
        stats(&maps.vip_stats, port_vip).packets,
        1,
        "r-port's packet"
    );
    let low = cls.rule_id("r-low").unwrap();
    assert_eq!(
        stats(&maps.rule_stats, low).packets,
        641,
        "150 TCP + 150 UDP + 20 repeats per family, and one from outside r-src"
    );
}

#[test]
fn sctp_init_by_byte_match_and_multihomed_paths_stay_together() {
    let (ns, up1) = lab("clssctp");
    let mut r = classifier_rig("clssctp");
    // INIT (verification tag 0): r-init (priority 50) -> dg-b; DATA -> r-low.
    let frames = [
        sctp_frame("10.200.0.2", 5000, V4, 9001, 0),
        sctp_frame("fd00:200::2", 5000, V6, 9001, 0),
    ];
    let out = run(&ns, up1, &mut r, &frames);
    assert_eq!(forwarded_to(&frames[0], &out[0]), 0x20);
    assert_eq!(forwarded_to(&frames[1], &out[1]), 0x20);
    // One association, two client addresses (multihoming): dg-a hashes
    // SCTP on ports only, so both paths reach one target, for every port
    // pair; and different port pairs spread.
    let mut targets = BTreeSet::new();
    for p in 0..60u16 {
        let a = sctp_frame("10.200.0.2", 6000 + p, V4, 9001, 0xdead_beef);
        let b = sctp_frame("10.200.0.3", 6000 + p, V4, 9001, 0xdead_beef);
        let out = run(&ns, up1, &mut r, &[a.clone(), b.clone()]);
        let (ta, tb) = (forwarded_to(&a, &out[0]), forwarded_to(&b, &out[1]));
        assert_eq!(ta, tb, "ports {p}: the two paths of one association split");
        targets.insert(ta);
    }
    assert!(targets.len() > 1, "port pairs spread: {targets:?}");
}

#[test]
fn icmp_echo_goes_to_a_target_and_errors_follow_their_flow() {
    let (ns, up1) = lab("clsicmp");
    let mut r = classifier_rig("clsicmp");
    // Echo: the first rule whose addresses match (r-init, priority 50,
    // no sources) whatever its protocols: dg-b.
    let echo4 = raw::frame(
        ip("10.200.0.2"),
        ip(V4),
        raw::ICMP,
        &[],
        &raw::icmp4(8, 0, [0x12, 0x34, 0, 1], b"ping"),
    );
    let echo6 = raw::frame(
        ip("fd00:200::2"),
        ip(V6),
        raw::ICMP6,
        &[],
        &raw::icmp6(
            ip("fd00:200::2"),
            ip(V6),
            128,
            0,
            [0x12, 0x34, 0, 1],
            b"ping",
        ),
    );
    let out = run(&ns, up1, &mut r, &[echo4.clone(), echo6.clone()]);
    assert_eq!(out[0].0, XDP_REDIRECT);
    assert_eq!(out[0].1[5], 0x20, "echo to dg-b");
    assert_eq!(out[1].0, XDP_REDIRECT);
    assert_eq!(out[1].1[5], 0x20, "echo v6 to dg-b");

    // An error from a router about a reply the target sent (VIP:80 ->
    // client:port) reaches the target of the client's flow, over many
    // flows of dg-a.
    for port in 41000..41040u16 {
        let flow = tcp_frame("10.200.0.2", port, V4, 80, 0x10);
        let reply = raw::tcp(ip(V4), ip("10.200.0.2"), 80, port, 0x10, b"reply");
        let mut quoted = raw::ipv4(
            ip(V4),
            ip("10.200.0.2"),
            raw::TCP,
            7,
            false,
            0,
            &[],
            reply.len(),
        );
        quoted.extend_from_slice(&reply[..8]);
        let err = raw::frame(
            ip("10.200.0.1"),
            ip(V4),
            raw::ICMP,
            &[],
            &raw::icmp4(3, 4, [0, 0, 0x05, 0x00], &quoted),
        );
        let out = run(&ns, up1, &mut r, &[flow.clone(), err.clone()]);
        let t = forwarded_to(&flow, &out[0]);
        assert_eq!(out[1].0, XDP_REDIRECT, "port {port}: error forwarded");
        assert_eq!(
            out[1].1[5], t,
            "port {port}: the error went elsewhere than its flow"
        );
    }
    assert!(event(&r, abi::cls_event::ICMP_ERROR) >= 40);
    assert!(event(&r, abi::cls_event::ECHO) >= 2);
}

/// IPv4 with DF set (byte 6 of the header, bit 0x40), checksum redone.
fn with_df(mut frame: Vec<u8>) -> Vec<u8> {
    frame[20] |= 0x40;
    frame[24] = 0;
    frame[25] = 0;
    let c = raw::checksum(&frame[14..34], 0);
    frame[24..26].copy_from_slice(&c.to_be_bytes());
    frame
}

#[test]
fn too_big_for_the_target_network_is_answered_from_the_vip() {
    let (ns, up1) = lab("clsmtu");
    let mut r = classifier_rig("clsmtu");
    let payload = vec![0x5a; 1400 - 20 - 20];
    let (c4, v4) = (ip("10.200.0.2"), ip(V4_MTU));
    let big4 = with_df(raw::frame(
        c4,
        v4,
        raw::TCP,
        &[],
        &raw::tcp(c4, v4, 40000, 80, 0x10, &payload),
    ));
    assert_eq!(big4.len(), 14 + 1400);
    let (c6, v6) = (ip("fd00:200::2"), ip(V6_MTU));
    let big6 = raw::frame(
        c6,
        v6,
        raw::TCP,
        &[],
        &raw::tcp(c6, v6, 40000, 80, 0x10, &payload),
    );
    let mut no_df = big4.clone();
    no_df[20] &= !0x40;
    no_df[24] = 0;
    no_df[25] = 0;
    let c = raw::checksum(&no_df[14..34], 0);
    no_df[24..26].copy_from_slice(&c.to_be_bytes());
    let small = tcp_frame("10.200.0.2", 40001, V4_MTU, 80, 0x10);
    let out = run(
        &ns,
        up1,
        &mut r,
        &[big4.clone(), big6.clone(), no_df, small.clone()],
    );

    assert_eq!(
        out[0].0, XDP_TX,
        "IPv4 DF: answered back out of the ingress"
    );
    let p = etherparse::SlicedPacket::from_ethernet(&out[0].1).unwrap();
    let Some(etherparse::NetSlice::Ipv4(ip4)) = &p.net else {
        panic!("IPv4 answer")
    };
    assert_eq!(
        ip4.header().source_addr().to_string(),
        V4_MTU,
        "from the VIP"
    );
    assert_eq!(ip4.header().destination_addr().to_string(), "10.200.0.2");
    let icmp = &out[0].1[34..];
    assert_eq!((icmp[0], icmp[1]), (3, 4), "fragmentation needed");
    assert_eq!(
        u16::from_be_bytes([icmp[6], icmp[7]]),
        1200,
        "the target route's MTU"
    );
    assert_eq!(raw::checksum(icmp, 0), 0, "ICMP checksum");
    assert_eq!(&icmp[8..28], &big4[14..34], "quotes the packet's header");

    assert_eq!(out[1].0, XDP_TX, "IPv6: packet too big");
    let o6 = &out[1].1;
    assert_eq!(&o6[22..38], &v6_octets(V6_MTU), "from the VIP");
    assert_eq!(&o6[38..54], &v6_octets("fd00:200::2"));
    let icmp6 = &o6[54..];
    assert_eq!(icmp6[0], 2, "packet too big");
    assert_eq!(
        u32::from_be_bytes([icmp6[4], icmp6[5], icmp6[6], icmp6[7]]),
        1300
    );
    let sum = raw::pseudo(ip(V6_MTU), c6, raw::ICMP6, icmp6.len());
    assert_eq!(raw::checksum(icmp6, sum), 0, "ICMPv6 checksum");

    assert_eq!(out[2].0, XDP_DROP, "IPv4 without DF: XDP cannot fragment");
    assert_eq!(event(&r, abi::cls_event::TOO_BIG_DROP), 1);
    assert_eq!(event(&r, abi::cls_event::TOO_BIG_ICMP), 2);
    assert_eq!(
        forwarded_to(&small, &out[3]),
        0x30,
        "a packet that fits is forwarded"
    );
}

fn v6_octets(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

#[test]
fn later_fragments_follow_the_first_and_odd_packets_are_counted() {
    let (ns, up1) = lab("clsfrag");
    let mut r = classifier_rig("clsfrag");
    let (c, v) = (ip("10.200.0.2"), ip(V4));
    let mut firsts = Vec::new();
    let mut laters = Vec::new();
    for id in 1..=30u16 {
        let udp = raw::udp(c, v, 50000 + id, 53, &[7u8; 32]);
        let mut first = raw::ipv4(c, v, raw::UDP, id, true, 0, &[], 16);
        first.extend_from_slice(&udp[..16]);
        firsts.push(raw::eth(0x0800, &[], &first));
        let mut later = raw::ipv4(c, v, raw::UDP, id, false, 2, &[], udp.len() - 16);
        later.extend_from_slice(&udp[16..]);
        laters.push(raw::eth(0x0800, &[], &later));
    }
    let mut frames = firsts.clone();
    frames.extend(laters.iter().cloned());
    let out = run(&ns, up1, &mut r, &frames);
    let mut spread = BTreeSet::new();
    for i in 0..30 {
        assert_eq!(out[i].0, XDP_REDIRECT, "first fragment {i}");
        assert_eq!(out[30 + i].0, XDP_REDIRECT, "later fragment {i}");
        assert_eq!(
            out[30 + i].1[5],
            out[i].1[5],
            "fragment {i} split from its first"
        );
        spread.insert(out[i].1[5]);
    }
    assert!(spread.len() > 1, "datagrams spread: {spread:?}");

    // A later fragment whose first was never seen; TTL 1; a target
    // without a neighbour entry.
    let mut stray = raw::ipv4(c, v, raw::UDP, 999, false, 2, &[], 8);
    stray.extend_from_slice(&[0u8; 8]);
    let stray = raw::eth(0x0800, &[], &stray);
    let mut ttl1 = udp_frame("10.200.0.2", 1234, V4, 53);
    ttl1[22] = 1;
    ttl1[24] = 0;
    ttl1[25] = 0;
    let cs = raw::checksum(&ttl1[14..34], 0);
    ttl1[24..26].copy_from_slice(&cs.to_be_bytes());
    let nn = udp_frame("10.200.0.2", 1234, V4_NO_NEIGH, 53);
    let out = run(&ns, up1, &mut r, &[stray, ttl1.clone(), nn]);
    assert_eq!(out[0].0, XDP_DROP);
    assert_eq!(event(&r, abi::cls_event::FRAG_UNMATCHED), 1);
    assert_eq!(out[1], (XDP_PASS, ttl1), "TTL 1: the kernel answers");
    assert_eq!(event(&r, abi::cls_event::TTL_TO_KERNEL), 1);
    assert_eq!(out[2].0, XDP_DROP);
    assert_eq!(event(&r, abi::cls_event::NO_NEIGH), 1);
}

/// Every group's tables as (group, family) -> entries, read from the maps.
fn tables(dp: &Dataplane, spec: &ClassifierSpec) -> BTreeMap<(String, bool), Vec<u32>> {
    let mut out = BTreeMap::new();
    for g in &spec.groups {
        let (t4, t6) = dp.classifier().group_tables(&g.name).unwrap();
        for (v6, t) in [(false, t4), (true, t6)] {
            if let Some(s) = t {
                out.insert(
                    (g.name.clone(), v6),
                    dp.maps().cls.table.read(s.offset, s.size),
                );
            }
        }
    }
    out
}

fn big_group(slots: impl IntoIterator<Item = u16>) -> ClassifierSpec {
    ClassifierSpec {
        groups: vec![GroupSpec {
            name: "dg".into(),
            max_endpoints: 102,
            sctp_hash: SctpHash::Ports,
            targets: slots
                .into_iter()
                .map(|s| TargetSpec {
                    slot: s,
                    v4: Some(
                        format!("10.201.{}.{}", s / 200, s % 200 + 1)
                            .parse()
                            .unwrap(),
                    ),
                    v6: Some(format!("fd00:201::{s:x}").parse().unwrap()),
                })
                .collect(),
        }],
        rules: vec![rule("r", 1, "dg", &[V4, V6], &[RuleProto::Tcp])],
    }
}

/// Acceptance 2 of the Meridio-2 issue at the map level: replicas with
/// different histories, and a restarted one, hold byte-identical tables;
/// removing slot 7 of 32 changes what Maglev must; slot 7 back restores
/// the table exactly.
#[test]
fn tables_are_identical_across_histories_and_restarts() {
    let want = big_group(0..32);
    let mut a = rig("clstabA");
    a.dataplane.apply_classifier(&want, true).unwrap();
    let mut b = rig("clstabB");
    for step in [
        big_group(0..3),
        big_group(10..40),
        big_group((0..32).filter(|s| *s != 7)),
        want.clone(),
    ] {
        b.dataplane.apply_classifier(&step, true).unwrap();
    }
    let ta = tables(&a.dataplane, &want);
    assert_eq!(ta.len(), 2, "one table per family");
    assert_eq!(
        ta,
        tables(&b.dataplane, &want),
        "replicas with different histories differ"
    );

    let without7 = big_group((0..32).filter(|s| *s != 7));
    a.dataplane.apply_classifier(&without7, true).unwrap();
    let t7 = tables(&a.dataplane, &without7);
    for v6 in [false, true] {
        let (x, y) = (&ta[&("dg".to_string(), v6)], &t7[&("dg".to_string(), v6)]);
        let changed = x.iter().zip(y).filter(|(p, q)| p != q).count();
        let own = x.iter().filter(|s| **s == 7).count();
        eprintln!(
            "v6={v6}: removing slot 7 of 32 (102 max, {} entries) changed {changed} entries ({:.2}%), {own} its own",
            x.len(),
            100.0 * changed as f64 / x.len() as f64
        );
        assert!(changed >= own && (changed as f64) < 0.05 * x.len() as f64);
    }
    a.dataplane.apply_classifier(&want, true).unwrap();
    assert_eq!(
        tables(&a.dataplane, &want),
        ta,
        "slot 7 back: the previous table exactly"
    );

    // Restart: the maps stay pinned, a new writer adopts them and writes
    // the same spec anew: the same tables, and the old objects are freed.
    a.keep_pins = true;
    let pin = a.pin_dir.clone();
    drop(a);
    let (mut again, _, _) = rig_at(&pin);
    assert_eq!(again.dataplane.classifier().unclaimed().len(), 2);
    let report = again.dataplane.apply_classifier(&want, true).unwrap();
    assert!(report.legacy_freed > 0, "{report:?}");
    assert!(again.dataplane.classifier().unclaimed().is_empty());
    assert_eq!(
        tables(&again.dataplane, &want),
        ta,
        "restart changed a table"
    );
    assert_eq!(
        again.dataplane.maps().cls.groups.keys().count(),
        1,
        "old group freed"
    );
}
