//! Every packet shape the datapath handles, as a fixture table run through
//! the real programs: VLAN and QinQ, IPv4 options, each IPv6 extension
//! header and the chain limits, first/later/out-of-order fragments in both
//! directions, each ICMP and ICMPv6 error type with its quoted packet
//! rewritten, and the traffic that must be left alone.

mod common;

use std::net::IpAddr;

use common::raw::*;
use common::*;
use rivora_abi as abi;
use rivora_dataplane::proto;

const VIP4: &str = "10.200.100.1";
const VIP6: &str = "fd00:200:100::1";
const CLIENT4: &str = "10.200.0.2";
const CLIENT6: &str = "fd00:200::2";
const ROUTER4: &str = "10.200.0.254";
const ROUTER6: &str = "fd00:200::fe";
const BACKEND4: &str = "10.200.1.11";
const BACKEND6: &str = "fd00:200:1::11";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// One backend per VIP, so every forwarded packet's destination is known.
fn rig_one_backend(name: &str) -> Rig {
    let mut r = rig(name);
    r.dataplane
        .apply(&[
            vip("t4", VIP4, 80, proto::TCP, vec![backend(BACKEND4, 8080, 1)]),
            vip("u4", VIP4, 53, proto::UDP, vec![backend(BACKEND4, 5353, 1)]),
            vip("t6", VIP6, 80, proto::TCP, vec![backend(BACKEND6, 8080, 1)]),
            vip("u6", VIP6, 53, proto::UDP, vec![backend(BACKEND6, 5353, 1)]),
        ])
        .unwrap();
    r
}

#[derive(Debug, Clone, Copy)]
enum Expect {
    /// XDP_PASS / TCX_NEXT and not one byte changed.
    Untouched,
    /// Untouched, and this event counter went up by one.
    UntouchedCounted(u32),
    /// XDP_DROP with this reason counted.
    Dropped(u32),
    /// Destination rewritten to this backend address and port; checksums
    /// valid (checked by etherparse).
    ToBackend(&'static str, u16),
    /// Source restored to this VIP address and port (reply path).
    FromVip(&'static str, u16),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Prog {
    Xdp,
    Tc,
}

fn drops(r: &Rig, reason: u32) -> u64 {
    r.dataplane.drop_counters().unwrap()[reason as usize]
}

fn run(r: &mut Rig, name: &str, prog: Prog, frame: &[u8], expect: Expect) {
    let before: Vec<u64> = r.dataplane.drop_counters().unwrap();
    let (verdict, out) = match prog {
        Prog::Xdp => r.datapath.run_xdp(frame).unwrap(),
        Prog::Tc => {
            let (v, out) = r.datapath.run_tc(frame).unwrap();
            (if v == TCX_NEXT { XDP_PASS } else { 99 }, out)
        }
    };
    let after: Vec<u64> = r.dataplane.drop_counters().unwrap();
    let changed: Vec<usize> = (0..after.len())
        .filter(|&i| after[i] != before[i])
        .collect();
    match expect {
        Expect::Untouched => {
            assert_eq!(verdict, XDP_PASS, "{name}: verdict");
            assert_eq!(out, frame, "{name}: frame must be untouched");
            assert!(
                changed.is_empty(),
                "{name}: no counter may move: {changed:?}"
            );
        }
        Expect::UntouchedCounted(reason) => {
            assert_eq!(verdict, XDP_PASS, "{name}: verdict");
            assert_eq!(out, frame, "{name}: frame must be untouched");
            assert_eq!(
                changed,
                vec![reason as usize],
                "{name}: counted as {}",
                abi::drop_reason::NAMES[reason as usize]
            );
        }
        Expect::Dropped(reason) => {
            assert_eq!(verdict, XDP_DROP, "{name}: verdict");
            assert_eq!(changed, vec![reason as usize], "{name}: drop reason");
        }
        Expect::ToBackend(addr, port) => {
            assert_eq!(verdict, XDP_PASS, "{name}: verdict");
            let p = parse_checked(&out);
            assert_eq!(
                (p.dst, p.dport),
                (ip(addr), port),
                "{name}: rewritten destination"
            );
            let q = parse_checked(frame);
            assert_eq!(
                (p.src, p.sport, p.payload, p.vlan_ids),
                (q.src, q.sport, q.payload, q.vlan_ids),
                "{name}"
            );
        }
        Expect::FromVip(addr, port) => {
            assert_eq!(verdict, XDP_PASS, "{name}: verdict");
            let p = parse_checked(&out);
            assert_eq!(
                (p.src, p.sport),
                (ip(addr), port),
                "{name}: restored source"
            );
            let q = parse_checked(frame);
            assert_eq!(
                (p.dst, p.dport, p.payload),
                (q.dst, q.dport, q.payload),
                "{name}"
            );
        }
    }
}

/// The stateless table: one frame in, one expectation out.
#[test]
fn fixture_table_of_single_frames() {
    let mut r = rig_one_backend("shapes");
    let (c4, v4, c6, v6, b4, b6) = (
        ip(CLIENT4),
        ip(VIP4),
        ip(CLIENT6),
        ip(VIP6),
        ip(BACKEND4),
        ip(BACKEND6),
    );
    let t4 = tcp(c4, v4, 40000, 80, 0x02, b"hello");
    let u4 = udp(c4, v4, 40001, 53, b"query");
    let t6 = tcp(c6, v6, 40000, 80, 0x02, b"hello");
    let u6 = udp(c6, v6, 40001, 53, b"query");
    let v4_frame = |opts: &[u8], vlans: &[u16], p: u8, l4: &[u8]| {
        let mut pk = ipv4(c4, v4, p, 7, false, 0, opts, l4.len());
        pk.extend_from_slice(l4);
        eth(0x0800, vlans, &pk)
    };
    let v6_frame = |first: u8, exts: Vec<u8>, vlans: &[u16], l4: &[u8]| {
        let mut pk = ipv6(c6, v6, first, &exts, l4.len());
        pk.extend_from_slice(l4);
        eth(0x86dd, vlans, &pk)
    };
    let chain = |headers: &[u8], last: u8| -> (u8, Vec<u8>) {
        // headers: kinds in order; each HBH/DSTOPTS is one 8-byte unit.
        let mut out = Vec::new();
        for (i, &h) in headers.iter().enumerate() {
            let next = *headers.get(i + 1).unwrap_or(&last);
            out.extend(match h {
                FRAGMENT => frag_ext(next, 0, false, 99),
                HOPOPTS | DSTOPTS => opts_ext(next, 1),
                _ => plain_ext(next),
            });
        }
        (headers.first().copied().unwrap_or(last), out)
    };
    let echo4 = icmp4(8, 0, [0, 1, 0, 1], b"ping");
    let echo6 = icmp6(c6, v6, 128, 0, [0, 1, 0, 1], b"ping");
    let ns6 = icmp6(c6, v6, 135, 0, [0; 4], &[0u8; 16]);

    let mut cases: Vec<(&str, Prog, Vec<u8>, Expect)> = vec![
        (
            "v4 tcp",
            Prog::Xdp,
            v4_frame(&[], &[], TCP, &t4),
            Expect::ToBackend(BACKEND4, 8080),
        ),
        (
            "v4 udp",
            Prog::Xdp,
            v4_frame(&[], &[], UDP, &u4),
            Expect::ToBackend(BACKEND4, 5353),
        ),
        (
            "v4 tcp 802.1Q",
            Prog::Xdp,
            v4_frame(&[], &[100], TCP, &t4),
            Expect::ToBackend(BACKEND4, 8080),
        ),
        (
            "v4 tcp QinQ",
            Prog::Xdp,
            v4_frame(&[], &[200, 300], TCP, &t4),
            Expect::ToBackend(BACKEND4, 8080),
        ),
        (
            "v4 udp QinQ",
            Prog::Xdp,
            v4_frame(&[], &[200, 300], UDP, &u4),
            Expect::ToBackend(BACKEND4, 5353),
        ),
        (
            "v4 tcp options",
            Prog::Xdp,
            v4_frame(&[1, 1, 7, 7, 4], &[], TCP, &t4),
            Expect::ToBackend(BACKEND4, 8080),
        ),
        (
            "v4 udp max options",
            Prog::Xdp,
            v4_frame(&[1; 40], &[], UDP, &u4),
            Expect::ToBackend(BACKEND4, 5353),
        ),
        (
            "v4 options QinQ",
            Prog::Xdp,
            v4_frame(&[1, 1, 1, 1], &[5, 6], TCP, &t4),
            Expect::ToBackend(BACKEND4, 8080),
        ),
        (
            "v4 other address",
            Prog::Xdp,
            frame(
                c4,
                ip("10.200.100.9"),
                TCP,
                &[],
                &tcp(c4, ip("10.200.100.9"), 1, 80, 2, b""),
            ),
            Expect::Untouched,
        ),
        (
            "v4 other port",
            Prog::Xdp,
            frame(c4, v4, TCP, &[], &tcp(c4, v4, 1, 81, 2, b"")),
            Expect::Untouched,
        ),
        (
            "v4 sctp to VIP",
            Prog::Xdp,
            v4_frame(&[], &[], 132, &[0, 1, 0, 80, 0, 0, 0, 0, 0, 0, 0, 0]),
            Expect::Untouched,
        ),
        (
            "v4 icmp echo to VIP",
            Prog::Xdp,
            v4_frame(&[], &[], ICMP, &echo4),
            Expect::Untouched,
        ),
        (
            "v4 truncated tcp",
            Prog::Xdp,
            v4_frame(&[], &[], TCP, &t4)[..14 + 20 + 10].to_vec(),
            Expect::Untouched,
        ),
        (
            "v4 arp",
            Prog::Xdp,
            eth(0x0806, &[], &[0u8; 28]),
            Expect::Untouched,
        ),
        (
            // The endpoint serves one VIP: every reply of it is the VIP's
            // (bpf/reverse.h), with or without flow state.
            "v4 reply of a flow without state",
            Prog::Tc,
            frame(b4, c4, TCP, &[], &tcp(b4, c4, 8080, 1, 0x12, b"")),
            Expect::FromVip(VIP4, 80),
        ),
        (
            "v4 reply from a port that is no VIP's endpoint",
            Prog::Tc,
            frame(b4, c4, TCP, &[], &tcp(b4, c4, 9999, 1, 0x12, b"")),
            Expect::Untouched,
        ),
        (
            "v6 tcp",
            Prog::Xdp,
            v6_frame(TCP, vec![], &[], &t6),
            Expect::ToBackend(BACKEND6, 8080),
        ),
        (
            "v6 udp",
            Prog::Xdp,
            v6_frame(UDP, vec![], &[], &u6),
            Expect::ToBackend(BACKEND6, 5353),
        ),
        (
            "v6 tcp 802.1Q",
            Prog::Xdp,
            v6_frame(TCP, vec![], &[7], &t6),
            Expect::ToBackend(BACKEND6, 8080),
        ),
        (
            "v6 udp QinQ",
            Prog::Xdp,
            v6_frame(UDP, vec![], &[7, 8], &u6),
            Expect::ToBackend(BACKEND6, 5353),
        ),
        {
            let (f, e) = chain(&[HOPOPTS], TCP);
            (
                "v6 hop-by-hop",
                Prog::Xdp,
                v6_frame(f, e, &[], &t6),
                Expect::ToBackend(BACKEND6, 8080),
            )
        },
        {
            let (f, e) = chain(&[DSTOPTS], UDP);
            (
                "v6 destination options",
                Prog::Xdp,
                v6_frame(f, e, &[], &u6),
                Expect::ToBackend(BACKEND6, 5353),
            )
        },
        {
            let (f, e) = chain(&[FRAGMENT], TCP);
            (
                "v6 atomic fragment",
                Prog::Xdp,
                v6_frame(f, e, &[], &t6),
                Expect::ToBackend(BACKEND6, 8080),
            )
        },
        {
            let (f, e) = chain(&[HOPOPTS, DSTOPTS, FRAGMENT], TCP);
            (
                "v6 three headers",
                Prog::Xdp,
                v6_frame(f, e, &[], &t6),
                Expect::ToBackend(BACKEND6, 8080),
            )
        },
        {
            let (f, e) = chain(&[HOPOPTS, DSTOPTS, DSTOPTS, DSTOPTS], UDP);
            (
                "v6 four headers (the limit)",
                Prog::Xdp,
                v6_frame(f, e, &[9], &u6),
                Expect::ToBackend(BACKEND6, 5353),
            )
        },
        {
            let (f, e) = chain(&[HOPOPTS, DSTOPTS, DSTOPTS, DSTOPTS, DSTOPTS], TCP);
            (
                "v6 five headers",
                Prog::Xdp,
                v6_frame(f, e, &[], &t6),
                Expect::Untouched,
            )
        },
        {
            let mut e = opts_ext(DSTOPTS, 31); // 248 bytes
            e.extend(opts_ext(TCP, 1)); // 256 in all
            (
                "v6 headers over 248 bytes",
                Prog::Xdp,
                v6_frame(HOPOPTS, e, &[], &t6),
                Expect::Untouched,
            )
        },
        {
            let e = opts_ext(TCP, 31);
            (
                "v6 headers of exactly 248 bytes",
                Prog::Xdp,
                v6_frame(HOPOPTS, e, &[], &t6),
                Expect::ToBackend(BACKEND6, 8080),
            )
        },
        {
            let (f, e) = chain(&[ROUTING], TCP);
            (
                "v6 routing header",
                Prog::Xdp,
                v6_frame(f, e, &[], &t6),
                Expect::Untouched,
            )
        },
        {
            let (f, e) = chain(&[HOPOPTS, AH], TCP);
            (
                "v6 authentication header",
                Prog::Xdp,
                v6_frame(f, e, &[], &t6),
                Expect::Untouched,
            )
        },
        (
            "v6 esp",
            Prog::Xdp,
            v6_frame(ESP, vec![0; 16], &[], &[]),
            Expect::Untouched,
        ),
        (
            "v6 echo request to VIP",
            Prog::Xdp,
            v6_frame(ICMP6, vec![], &[], &echo6),
            Expect::Untouched,
        ),
        (
            "v6 neighbour solicitation",
            Prog::Xdp,
            v6_frame(ICMP6, vec![], &[], &ns6),
            Expect::Untouched,
        ),
        (
            "v6 truncated header",
            Prog::Xdp,
            v6_frame(TCP, vec![], &[], &t6)[..14 + 30].to_vec(),
            Expect::Untouched,
        ),
        (
            // The endpoint serves one VIP: every reply of it is the VIP's
            // (bpf/reverse.h), with or without flow state.
            "v6 reply of a flow without state",
            Prog::Tc,
            frame(b6, c6, TCP, &[], &tcp(b6, c6, 8080, 1, 0x12, b"")),
            Expect::FromVip(VIP6, 80),
        ),
        (
            "v6 reply from a port that is no VIP's endpoint",
            Prog::Tc,
            frame(b6, c6, TCP, &[], &tcp(b6, c6, 9999, 1, 0x12, b"")),
            Expect::Untouched,
        ),
    ];
    let n = cases.len();
    for (name, prog, f, e) in cases.drain(..) {
        run(&mut r, name, prog, &f, e);
    }
    // Replies of the flows forwarded above come back from the VIP.
    let replies: Vec<(&str, Vec<u8>, Expect)> = vec![
        (
            "v4 tcp reply",
            frame(b4, c4, TCP, &[], &tcp(b4, c4, 8080, 40000, 0x12, b"hi")),
            Expect::FromVip(VIP4, 80),
        ),
        (
            "v4 udp reply",
            frame(b4, c4, UDP, &[], &udp(b4, c4, 5353, 40001, b"answer")),
            Expect::FromVip(VIP4, 53),
        ),
        (
            "v4 reply QinQ",
            frame(b4, c4, TCP, &[1, 2], &tcp(b4, c4, 8080, 40000, 0x10, b"")),
            Expect::FromVip(VIP4, 80),
        ),
        (
            "v6 tcp reply",
            frame(b6, c6, TCP, &[], &tcp(b6, c6, 8080, 40000, 0x12, b"hi")),
            Expect::FromVip(VIP6, 80),
        ),
        (
            "v6 udp reply",
            frame(b6, c6, UDP, &[], &udp(b6, c6, 5353, 40001, b"answer")),
            Expect::FromVip(VIP6, 53),
        ),
    ];
    let m = replies.len();
    for (name, f, e) in replies {
        run(&mut r, name, Prog::Tc, &f, e);
    }
    // A VIP whose only backend is down drops, counted.
    let key = rivora_dataplane::BackendKey {
        addr: b4,
        port: 8080,
    };
    r.dataplane
        .set_backend_state(&key, abi::backend_state::DOWN)
        .unwrap();
    run(
        &mut r,
        "v4 no healthy backend",
        Prog::Xdp,
        &v4_frame(&[], &[], TCP, &tcp(c4, v4, 1234, 80, 2, b"")),
        Expect::Dropped(abi::drop_reason::NO_HEALTHY_BACKEND),
    );
    eprintln!("{} single-frame cases", n + m + 1);
    assert!(n + m + 1 >= 40);
}

/// Splits an IPv4 datagram (L4 bytes `l4`) into two fragments at `at`
/// (a multiple of 8) and returns the frames.
fn v4_fragments(
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    id: u16,
    l4: &[u8],
    at: usize,
) -> (Vec<u8>, Vec<u8>) {
    let mut a = ipv4(src, dst, proto, id, true, 0, &[], at);
    a.extend_from_slice(&l4[..at]);
    let mut b = ipv4(
        src,
        dst,
        proto,
        id,
        false,
        (at / 8) as u16,
        &[],
        l4.len() - at,
    );
    b.extend_from_slice(&l4[at..]);
    (eth(0x0800, &[], &a), eth(0x0800, &[], &b))
}

fn v6_fragments(
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    id: u32,
    l4: &[u8],
    at: usize,
) -> (Vec<u8>, Vec<u8>) {
    let mut a = ipv6(src, dst, FRAGMENT, &frag_ext(proto, 0, true, id), at);
    a.extend_from_slice(&l4[..at]);
    let mut b = ipv6(
        src,
        dst,
        FRAGMENT,
        &frag_ext(proto, (at / 8) as u16, false, id),
        l4.len() - at,
    );
    b.extend_from_slice(&l4[at..]);
    (eth(0x86dd, &[], &a), eth(0x86dd, &[], &b))
}

/// Checks two output fragments: IPv4 header checksums, the rewritten
/// address, and the reassembled datagram's UDP checksum.
fn check_fragments(
    first: &[u8],
    later: &[u8],
    src: IpAddr,
    dst: IpAddr,
    v6: bool,
    l4_before_len: usize,
) {
    let (hl, src_at, dst_at, alen) = if v6 {
        (40 + 8, 8, 24, 16)
    } else {
        (20, 12, 16, 4)
    };
    let l3a = l3_offset(first);
    let l3b = l3_offset(later);
    for f in [first, later] {
        let l3 = l3_offset(f);
        if !v6 {
            assert_eq!(
                checksum(&f[l3..l3 + 20], 0),
                0,
                "IPv4 header checksum of a fragment"
            );
        }
        assert_eq!(
            &f[l3 + src_at..l3 + src_at + alen],
            &octets_of(src)[..],
            "fragment source"
        );
        assert_eq!(
            &f[l3 + dst_at..l3 + dst_at + alen],
            &octets_of(dst)[..],
            "fragment destination"
        );
    }
    let mut whole = first[l3a + hl..].to_vec();
    whole.extend_from_slice(&later[l3b + hl..]);
    assert_eq!(whole.len(), l4_before_len);
    assert_eq!(
        checksum(&whole, pseudo(src, dst, UDP, whole.len())),
        0,
        "reassembled UDP checksum"
    );
}

fn octets_of(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// Fragments in both directions, in order and out of order.
#[test]
fn fragments_follow_their_first_both_ways() {
    let mut r = rig_one_backend("frags");
    let mut cases = 0;
    for v6 in [false, true] {
        let (c, v, b) = if v6 {
            (ip(CLIENT6), ip(VIP6), ip(BACKEND6))
        } else {
            (ip(CLIENT4), ip(VIP4), ip(BACKEND4))
        };
        let payload = vec![0xab; 3000];
        let req = udp(c, v, 40100, 53, &payload);
        let split = |id: u32, l4: &[u8], s: IpAddr, d: IpAddr| {
            if v6 {
                v6_fragments(s, d, UDP, id, l4, 1448)
            } else {
                v4_fragments(s, d, UDP, id as u16, l4, 1480)
            }
        };
        // In order: first, then later.
        let (f1, f2) = split(77, &req, c, v);
        let (v1, o1) = r.datapath.run_xdp(&f1).unwrap();
        let (v2, o2) = r.datapath.run_xdp(&f2).unwrap();
        assert_eq!((v1, v2), (XDP_PASS, XDP_PASS));
        let req_after = udp(c, b, 40100, 5353, &payload);
        check_fragments(&o1, &o2, c, b, v6, req_after.len());
        cases += 2;

        // Out of order: the later fragment first is passed untouched and
        // counted, never guessed.
        let (g1, g2) = split(78, &req, c, v);
        run(
            &mut r,
            "later fragment before its first",
            Prog::Xdp,
            &g2,
            Expect::UntouchedCounted(abi::drop_reason::PASS_FRAG_UNMATCHED),
        );
        let (_, h1) = r.datapath.run_xdp(&g1).unwrap();
        let (_, h2) = r.datapath.run_xdp(&g2).unwrap(); // a retransmitted later fragment now follows
        check_fragments(&h1, &h2, c, b, v6, req_after.len());
        cases += 3;

        // A later fragment of an unknown datagram.
        let (_, x2) = split(4242, &req, c, v);
        run(
            &mut r,
            "unmatched later fragment",
            Prog::Xdp,
            &x2,
            Expect::UntouchedCounted(abi::drop_reason::PASS_FRAG_UNMATCHED),
        );
        cases += 1;

        // The reply, fragmented by the backend: both fragments leave from the VIP.
        let reply = udp(b, c, 5353, 40100, &payload);
        let (y1, y2) = split(9, &reply, b, c);
        let (t1, z1) = r.datapath.run_tc(&y1).unwrap();
        let (t2, z2) = r.datapath.run_tc(&y2).unwrap();
        assert_eq!((t1, t2), (TCX_NEXT, TCX_NEXT));
        let reply_after = udp(v, c, 53, 40100, &payload);
        check_fragments(&z1, &z2, v, c, v6, reply_after.len());
        cases += 2;
        // A reply's later fragment without its first is left alone.
        let (_, w2) = split(10, &reply, b, c);
        run(
            &mut r,
            "unmatched reply fragment",
            Prog::Tc,
            &w2,
            Expect::Untouched,
        );
        cases += 1;
    }
    eprintln!("{cases} fragment cases");
}

/// Checks an ICMP error the programs rewrote: outer addresses, checksums
/// (outer IPv4, ICMP with pseudo-header for v6, quoted IPv4 header, quoted
/// L4 when complete), and the quoted packet's addresses and ports.
#[allow(clippy::too_many_arguments)]
fn check_icmp(
    out: &[u8],
    v6: bool,
    outer_src: IpAddr,
    outer_dst: IpAddr,
    in_src: IpAddr,
    in_sport: u16,
    in_dst: IpAddr,
    in_dport: u16,
    in_proto: u8,
) {
    let l3 = l3_offset(out);
    let (hl, src_at, dst_at, alen) = if v6 { (40, 8, 24, 16) } else { (20, 12, 16, 4) };
    assert_eq!(
        &out[l3 + src_at..l3 + src_at + alen],
        &octets_of(outer_src)[..],
        "outer source"
    );
    assert_eq!(
        &out[l3 + dst_at..l3 + dst_at + alen],
        &octets_of(outer_dst)[..],
        "outer destination"
    );
    let icmp = &out[l3 + hl..];
    if v6 {
        assert_eq!(
            checksum(icmp, pseudo(outer_src, outer_dst, ICMP6, icmp.len())),
            0,
            "ICMPv6 checksum"
        );
    } else {
        assert_eq!(
            checksum(&out[l3..l3 + 20], 0),
            0,
            "outer IPv4 header checksum"
        );
        assert_eq!(checksum(icmp, 0), 0, "ICMP checksum");
    }
    let q = &icmp[8..];
    let (qhl, qsrc, qdst) = if v6 {
        (40, 8, 24)
    } else {
        ((q[0] & 0xf) as usize * 4, 12, 16)
    };
    if !v6 {
        assert_eq!(checksum(&q[..qhl], 0), 0, "quoted IPv4 header checksum");
    }
    assert_eq!(
        &q[qsrc..qsrc + alen],
        &octets_of(in_src)[..],
        "quoted source"
    );
    assert_eq!(
        &q[qdst..qdst + alen],
        &octets_of(in_dst)[..],
        "quoted destination"
    );
    let l4 = &q[qhl..];
    assert_eq!(
        u16::from_be_bytes([l4[0], l4[1]]),
        in_sport,
        "quoted source port"
    );
    assert_eq!(
        u16::from_be_bytes([l4[2], l4[3]]),
        in_dport,
        "quoted destination port"
    );
    let full = if v6 {
        u16::from_be_bytes([q[4], q[5]]) as usize
    } else {
        u16::from_be_bytes([q[2], q[3]]) as usize - qhl
    };
    if l4.len() >= full {
        assert_eq!(
            checksum(&l4[..full], pseudo(in_src, in_dst, in_proto, full)),
            0,
            "quoted L4 checksum"
        );
    }
}

/// Each ICMP error type, both directions, full and minimal quotes.
#[test]
fn icmp_errors_reach_the_flow_owner_with_the_quote_rewritten() {
    let mut r = rig_one_backend("icmp");
    let mut cases = 0;
    for v6 in [false, true] {
        let (c, v, b, rt) = if v6 {
            (ip(CLIENT6), ip(VIP6), ip(BACKEND6), ip(ROUTER6))
        } else {
            (ip(CLIENT4), ip(VIP4), ip(BACKEND4), ip(ROUTER4))
        };
        // Open the flows: TCP 40200 -> 80 (a SYN) and UDP 40201 -> 53 (one
        // datagram). Neither leaves an affinity entry (balance.h): errors
        // about them go where Maglev sent them.
        for (p, l4) in [
            (TCP, tcp(c, v, 40200, 80, 2, b"")),
            (UDP, udp(c, v, 40201, 53, b"q")),
        ] {
            let (verdict, _) = r.datapath.run_xdp(&frame(c, v, p, &[], &l4)).unwrap();
            assert_eq!(verdict, XDP_PASS);
        }
        // Errors from a router about our replies (VIP -> client).
        let types: &[(u8, u8, &str)] = if v6 {
            &[
                (1, 4, "destination unreachable"),
                (2, 0, "packet too big"),
                (3, 0, "time exceeded"),
                (4, 0, "parameter problem"),
            ]
        } else {
            &[
                (3, 4, "fragmentation needed"),
                (3, 3, "port unreachable"),
                (11, 0, "time exceeded"),
                (12, 0, "parameter problem"),
            ]
        };
        for &(t, code, what) in types {
            for (p, reply, cport, bport, full) in [
                (TCP, tcp(v, c, 80, 40200, 0x18, &[7; 64]), 40200, 8080, true),
                (UDP, udp(v, c, 53, 40201, &[7; 32]), 40201, 5353, true),
                (
                    TCP,
                    tcp(v, c, 80, 40200, 0x18, &[7; 64]),
                    40200,
                    8080,
                    false,
                ),
            ] {
                let mut quoted = if v6 {
                    ipv6(v, c, p, &[], reply.len())
                } else {
                    ipv4(v, c, p, 3, false, 0, &[], reply.len())
                };
                quoted.extend_from_slice(if full { &reply } else { &reply[..8] });
                let msg = if v6 {
                    icmp6(rt, v, t, code, [0, 0, 5, 0x28], &quoted)
                } else {
                    icmp4(t, code, [0, 0, 5, 0x28], &quoted)
                };
                let f = frame(rt, v, if v6 { ICMP6 } else { ICMP }, &[], &msg);
                let (verdict, out) = r.datapath.run_xdp(&f).unwrap();
                assert_eq!(verdict, XDP_PASS, "{what}");
                check_icmp(&out, v6, rt, b, b, bport, c, cport, p);
                cases += 1;
            }
        }
        // An error about a flow without state goes where Maglev sends the
        // flow; with no healthy backend it is passed and counted.
        let reply = tcp(v, c, 80, 1, 0x18, b"");
        let mut quoted = if v6 {
            ipv6(v, c, TCP, &[], reply.len())
        } else {
            ipv4(v, c, TCP, 3, false, 0, &[], reply.len())
        };
        quoted.extend_from_slice(&reply);
        let msg = if v6 {
            icmp6(rt, v, 1, 0, [0; 4], &quoted)
        } else {
            icmp4(3, 1, [0; 4], &quoted)
        };
        let f = frame(rt, v, if v6 { ICMP6 } else { ICMP }, &[], &msg);
        let (verdict, out) = r.datapath.run_xdp(&f).unwrap();
        assert_eq!(verdict, XDP_PASS, "error about a flow without state");
        check_icmp(&out, v6, rt, b, b, 8080, c, 1, TCP);
        let backend_key = rivora_dataplane::BackendKey {
            addr: b,
            port: 8080,
        };
        r.dataplane
            .set_backend_state(&backend_key, abi::backend_state::DOWN)
            .unwrap();
        run(
            &mut r,
            "error about a flow without state, no healthy backend",
            Prog::Xdp,
            &f,
            Expect::UntouchedCounted(abi::drop_reason::PASS_ICMP_UNMATCHED),
        );
        r.dataplane
            .set_backend_state(&backend_key, abi::backend_state::HEALTHY)
            .unwrap();
        cases += 2;
        // The backend's own error about the client's datagram (port unreachable)
        // leaves from the VIP, quoting what the client sent to the VIP.
        let sent = udp(c, b, 40201, 5353, b"q");
        let mut quoted = if v6 {
            ipv6(c, b, UDP, &[], sent.len())
        } else {
            ipv4(c, b, UDP, 4, false, 0, &[], sent.len())
        };
        quoted.extend_from_slice(&sent);
        let msg = if v6 {
            icmp6(b, c, 1, 4, [0; 4], &quoted)
        } else {
            icmp4(3, 3, [0; 4], &quoted)
        };
        let (tcx, out) = r
            .datapath
            .run_tc(&frame(b, c, if v6 { ICMP6 } else { ICMP }, &[], &msg))
            .unwrap();
        assert_eq!(tcx, TCX_NEXT);
        check_icmp(&out, v6, v, c, c, 40201, v, 53, UDP);
        cases += 1;
    }
    eprintln!("{cases} ICMP cases");
    assert!(drops(&r, abi::drop_reason::REWRITE_FAILED) == 0);
}

/// Port-range and whole-address VIPs through the real program: the longest
/// prefix matches, exact VIPs win, and a backend without a port keeps the
/// client's destination port.
#[test]
fn port_range_and_whole_address_vips() {
    use rivora_dataplane::{VipKey, VipSpec};
    let mut r = rig("ranges");
    let (c, v) = (ip(CLIENT4), ip("10.200.100.5"));
    let keep = |a: &str| backend(a, 0, 1);
    r.dataplane
        .apply(&[
            VipSpec::new(
                "range",
                VipKey::range(v, 8000, 8099, proto::TCP),
                vec![keep("10.200.1.21")],
            ),
            VipSpec::new(
                "exact",
                VipKey::exact(v, 8050, proto::TCP),
                vec![backend("10.200.1.22", 9000, 1)],
            ),
            VipSpec::new(
                "any-udp",
                VipKey::any_port(v, proto::UDP),
                vec![keep("10.200.1.23")],
            ),
            VipSpec::new(
                "range6",
                VipKey::range(ip(VIP6), 1000, 1999, proto::UDP),
                vec![keep("fd00:200:1::21")],
            ),
        ])
        .unwrap();
    let t = |port: u16| frame(c, v, TCP, &[], &tcp(c, v, 40000, port, 2, b""));
    run(
        &mut r,
        "range first port",
        Prog::Xdp,
        &t(8000),
        Expect::ToBackend("10.200.1.21", 8000),
    );
    run(
        &mut r,
        "range middle port",
        Prog::Xdp,
        &t(8063),
        Expect::ToBackend("10.200.1.21", 8063),
    );
    run(
        &mut r,
        "range last port",
        Prog::Xdp,
        &t(8099),
        Expect::ToBackend("10.200.1.21", 8099),
    );
    run(
        &mut r,
        "exact inside a range wins",
        Prog::Xdp,
        &t(8050),
        Expect::ToBackend("10.200.1.22", 9000),
    );
    run(
        &mut r,
        "just above the range",
        Prog::Xdp,
        &t(8100),
        Expect::Untouched,
    );
    run(
        &mut r,
        "just below the range",
        Prog::Xdp,
        &t(7999),
        Expect::Untouched,
    );
    for port in [1u16, 53, 65535] {
        let f = frame(c, v, UDP, &[], &udp(c, v, 40000, port, b"x"));
        run(
            &mut r,
            "whole-address UDP",
            Prog::Xdp,
            &f,
            Expect::ToBackend("10.200.1.23", port),
        );
    }
    let (c6, v6) = (ip(CLIENT6), ip(VIP6));
    let f = frame(c6, v6, UDP, &[], &udp(c6, v6, 40000, 1500, b"x"));
    run(
        &mut r,
        "v6 range",
        Prog::Xdp,
        &f,
        Expect::ToBackend("fd00:200:1::21", 1500),
    );
    let f = frame(c6, v6, UDP, &[], &udp(c6, v6, 40000, 2000, b"x"));
    run(&mut r, "v6 above range", Prog::Xdp, &f, Expect::Untouched);
    // The reply of a kept-port flow comes back from the VIP's same port.
    let b = ip("10.200.1.21");
    let reply = frame(b, c, TCP, &[], &tcp(b, c, 8063, 40000, 0x12, b""));
    run(
        &mut r,
        "range reply",
        Prog::Tc,
        &reply,
        Expect::FromVip("10.200.100.5", 8063),
    );
}

/// sessionAffinity clientIP: every flow of a client to one backend.
#[test]
fn client_ip_affinity_pins_a_client() {
    let mut r = rig("clientip");
    let backends = vec![
        backend("10.200.1.11", 80, 1),
        backend("10.200.1.12", 80, 1),
        backend("10.200.1.13", 80, 1),
    ];
    let mut spec = vip("web", VIP4, 80, proto::TCP, backends);
    spec.affinity_client_ip = true;
    r.dataplane.apply(&[spec]).unwrap();
    let v = ip(VIP4);
    let mut seen_per_client = Vec::new();
    for client in 1..=20u8 {
        let c = IpAddr::from([10, 200, 0, client]);
        let mut seen = std::collections::BTreeSet::new();
        for sport in 0..30u16 {
            let (verdict, out) = r
                .datapath
                .run_xdp(&frame(
                    c,
                    v,
                    TCP,
                    &[],
                    &tcp(c, v, 20000 + sport, 80, 2, b""),
                ))
                .unwrap();
            assert_eq!(verdict, XDP_PASS);
            seen.insert(parse_checked(&out).dst);
        }
        assert_eq!(seen.len(), 1, "client {c} spread over {seen:?}");
        seen_per_client.push(*seen.iter().next().unwrap());
    }
    let distinct: std::collections::BTreeSet<_> = seen_per_client.into_iter().collect();
    assert!(
        distinct.len() > 1,
        "different clients still spread over backends"
    );
}

/// A per-VIP SYN token bucket: `burst` SYNs pass, then SYNs drop as
/// rate_limited; non-SYN packets and other sources are not limited.
#[test]
fn syn_rate_limit_per_source() {
    use rivora_dataplane::RateLimit;
    let mut r = rig("synrl");
    let mut spec = vip("web", VIP4, 80, proto::TCP, vec![backend(BACKEND4, 80, 1)]);
    spec.syn_rate_limit = Some(RateLimit { rate: 1, burst: 5 });
    r.dataplane.apply(&[spec]).unwrap();
    let (c, v) = (ip(CLIENT4), ip(VIP4));
    let syn = |c: IpAddr, sport: u16| frame(c, v, TCP, &[], &tcp(c, v, sport, 80, 0x02, b""));
    for sport in 0..5 {
        run(
            &mut r,
            "SYN within the burst",
            Prog::Xdp,
            &syn(c, 30000 + sport),
            Expect::ToBackend(BACKEND4, 80),
        );
    }
    for sport in 5..10 {
        run(
            &mut r,
            "SYN over the limit",
            Prog::Xdp,
            &syn(c, 30000 + sport),
            Expect::Dropped(abi::drop_reason::RATE_LIMITED),
        );
    }
    let ack = frame(c, v, TCP, &[], &tcp(c, v, 30000, 80, 0x10, b"data"));
    run(
        &mut r,
        "an established flow's packets are never limited",
        Prog::Xdp,
        &ack,
        Expect::ToBackend(BACKEND4, 80),
    );
    let other = ip("10.200.0.3");
    run(
        &mut r,
        "another source has its own bucket",
        Prog::Xdp,
        &syn(other, 30000),
        Expect::ToBackend(BACKEND4, 80),
    );
    let drops = r.dataplane.vip_counters().unwrap()[0].stats.drops;
    assert_eq!(drops, 5, "rate-limited SYNs count as the VIP's drops");
    // Node-wide limit for a VIP without its own.
    r.dataplane
        .apply(&[vip(
            "web",
            VIP4,
            80,
            proto::TCP,
            vec![backend(BACKEND4, 80, 1)],
        )])
        .unwrap();
    r.dataplane
        .set_node_syn_rate_limit(Some(RateLimit { rate: 1, burst: 2 }))
        .unwrap();
    let c2 = ip("10.200.0.9");
    run(
        &mut r,
        "node-wide burst 1",
        Prog::Xdp,
        &syn(c2, 1),
        Expect::ToBackend(BACKEND4, 80),
    );
    run(
        &mut r,
        "node-wide burst 2",
        Prog::Xdp,
        &syn(c2, 2),
        Expect::ToBackend(BACKEND4, 80),
    );
    run(
        &mut r,
        "node-wide limit",
        Prog::Xdp,
        &syn(c2, 3),
        Expect::Dropped(abi::drop_reason::RATE_LIMITED),
    );
    r.dataplane.set_node_syn_rate_limit(None).unwrap();
    run(
        &mut r,
        "limit lifted",
        Prog::Xdp,
        &syn(c2, 4),
        Expect::ToBackend(BACKEND4, 80),
    );
}
