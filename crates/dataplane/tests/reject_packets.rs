//! A VIP's refused share (`VipSpec::reject_weight`, Gateway API's invalid
//! backendRef) through the real programs: maps written by the real map
//! writer, frames run with BPF_PROG_TEST_RUN, what comes back read by an
//! independent parser (etherparse, which also checks both checksums). A
//! new TCP flow of the share is answered with a reset (RFC 793 section 3.4:
//! seq/ack from the segment, no options or payload, fresh TTL), anything
//! else of it is dropped, both counted per VIP as no_backend; the share is
//! the weight's share of new flows; established flows never meet it; a
//! down backend's flows go to valid backends only; 0 changes nothing.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;

use common::raw;
use common::*;
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use rivora_abi as abi;
use rivora_dataplane::{BackendKey, VipSpec, proto};

const VIP4: &str = "10.231.100.1";
const VIP6: &str = "fd00:231:100::1";
const CLIENT4: &str = "10.231.0.2";
const CLIENT6: &str = "fd00:231::2";
const B1: &str = "10.231.1.11";
const B2: &str = "10.231.1.12";
const B1_6: &str = "fd00:231:1::11";
const B2_6: &str = "fd00:231:1::12";

const SYN: u8 = 0x02;
const FIN: u8 = 0x01;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;

fn ip(a: &str) -> IpAddr {
    a.parse().unwrap()
}

/// A TCP VIP on port 80 with `backends` (port 8080, weight 1 each) and a
/// refused share of `reject`.
fn web(name: &str, addr: &str, proto_: u8, backends: &[&str], reject: u32) -> VipSpec {
    let mut v = vip(
        name,
        addr,
        80,
        proto_,
        backends.iter().map(|a| backend(a, 8080, 1)).collect(),
    );
    v.reject_weight = reject;
    v
}

/// A TCP segment with the given sequence numbers, options (a multiple of
/// 4 bytes) and payload, and a correct checksum (RFC 793 layout, written
/// here, independently of the program).
#[allow(clippy::too_many_arguments)]
fn segment(
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    flags: u8,
    seq: u32,
    ack: u32,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    assert!(options.len().is_multiple_of(4));
    let mut s = Vec::new();
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&seq.to_be_bytes());
    s.extend_from_slice(&ack.to_be_bytes());
    s.push(((5 + options.len() / 4) as u8) << 4);
    s.push(flags);
    s.extend_from_slice(&64240u16.to_be_bytes());
    s.extend_from_slice(&[0, 0, 0, 0]);
    s.extend_from_slice(options);
    s.extend_from_slice(payload);
    let c = raw::checksum(&s, raw::pseudo(src, dst, raw::TCP, s.len()));
    s[16..18].copy_from_slice(&c.to_be_bytes());
    s
}

/// What a reset the program sent back says, read by etherparse (which
/// must find both checksums right).
#[derive(Debug, PartialEq, Eq)]
struct Reset {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    /// RST, ACK and every other flag, as (rst, ack, syn, fin, psh).
    flags: (bool, bool, bool, bool, bool),
    ttl: u8,
    ip_and_tcp_len: usize,
    options_len: usize,
    payload_len: usize,
}

fn read_reset(frame: &[u8]) -> Reset {
    // parse_checked asserts the IPv4 header checksum and the TCP checksum.
    let p = parse_checked(frame);
    let s = SlicedPacket::from_ethernet(frame).expect("the reset parses");
    let (ttl, ip_len) = match s.net.as_ref().expect("IP") {
        NetSlice::Ipv4(i) => {
            let h = i.header().to_header();
            assert!(i.header().options().is_empty(), "no IPv4 options");
            (h.time_to_live, h.total_len as usize)
        }
        NetSlice::Ipv6(i) => {
            let h = i.header().to_header();
            assert!(i.extensions().is_empty(), "no extension headers");
            (h.hop_limit, 40 + h.payload_length as usize)
        }
        other => panic!("unexpected {other:?}"),
    };
    let Some(TransportSlice::Tcp(t)) = s.transport.as_ref() else {
        panic!("not TCP")
    };
    let h = t.to_header();
    Reset {
        src: p.src,
        dst: p.dst,
        sport: p.sport,
        dport: p.dport,
        seq: h.sequence_number,
        ack: h.acknowledgment_number,
        flags: (h.rst, h.ack, h.syn, h.fin, h.psh),
        ttl,
        ip_and_tcp_len: ip_len,
        options_len: h.options.len(),
        payload_len: t.payload().len(),
    }
}

/// The VIP's drops of reason `no_backend` and all its drops.
fn refused(r: &Rig, name: &str) -> (u64, u64) {
    let c = r
        .dataplane
        .vip_counters()
        .unwrap()
        .into_iter()
        .find(|c| c.name == name)
        .expect("VIP counted");
    let by = if c.drops_by_reason.is_empty() {
        0
    } else {
        c.drops_by_reason[abi::drop_reason::NO_BACKEND as usize]
    };
    (by, c.stats.drops)
}

fn slice_of(r: &Rig, name: &str) -> Vec<u32> {
    let v = r.dataplane.vips().find(|v| v.spec.name == name).unwrap();
    r.dataplane.maps().maglev.read(v.slice.offset, v.slice.size)
}

#[test]
fn a_syn_to_a_reject_only_vip_comes_back_as_a_reset_ipv4() {
    let mut r = rig("rejsyn4");
    r.dataplane
        .apply(&[web("gone", VIP4, proto::TCP, &[], 1)])
        .unwrap();
    let (c, v) = (ip(CLIENT4), ip(VIP4));
    let syn = segment(c, v, 40000, 80, SYN, 0x1234_5678, 0, &[], &[]);
    let f = raw::frame(c, v, raw::TCP, &[], &syn);
    let (verdict, out) = r.datapath.run_xdp(&f).unwrap();
    assert_eq!(verdict, XDP_TX, "a refused SYN is answered");
    assert_eq!(out.len(), 14 + 40, "Ethernet + 40 bytes of IPv4 and TCP");
    assert_eq!(&out[0..6], &CLIENT_MAC, "back to the client's MAC");
    assert_eq!(&out[6..12], &LB_MAC, "from the MAC it was sent to");
    assert_eq!(
        read_reset(&out),
        Reset {
            src: v,
            dst: c,
            sport: 80,
            dport: 40000,
            seq: 0,
            ack: 0x1234_5679,
            flags: (true, true, false, false, false),
            ttl: 64,
            ip_and_tcp_len: 40,
            options_len: 0,
            payload_len: 0,
        }
    );
    assert_eq!(
        refused(&r, "gone"),
        (1, 1),
        "counted as the VIP's no_backend"
    );
    assert_eq!(
        r.dataplane.drop_counters().unwrap()[abi::drop_reason::NO_BACKEND as usize],
        1
    );
    assert_eq!(
        r.dataplane.drop_counters().unwrap()[abi::drop_reason::NO_HEALTHY_BACKEND as usize],
        0,
        "a reject-only VIP refuses, it does not drop as no_healthy_backend"
    );
    // No flow state for a refused flow.
    assert!(affinity_keys4(&r).is_empty());
}

#[test]
fn a_syn_to_a_reject_only_vip_comes_back_as_a_reset_ipv6() {
    let mut r = rig("rejsyn6");
    r.dataplane
        .apply(&[web("gone6", VIP6, proto::TCP, &[], 3)])
        .unwrap();
    let (c, v) = (ip(CLIENT6), ip(VIP6));
    let syn = segment(c, v, 40001, 80, SYN, 0xffff_ffff, 0, &[], &[]);
    let f = raw::frame(c, v, raw::TCP, &[], &syn);
    let (verdict, out) = r.datapath.run_xdp(&f).unwrap();
    assert_eq!(verdict, XDP_TX);
    assert_eq!(out.len(), 14 + 60, "Ethernet + 60 bytes of IPv6 and TCP");
    assert_eq!(&out[0..6], &CLIENT_MAC);
    assert_eq!(
        read_reset(&out),
        Reset {
            src: v,
            dst: c,
            sport: 80,
            dport: 40001,
            seq: 0,
            // SEG.SEQ + 1 for the SYN, modulo 2^32.
            ack: 0,
            flags: (true, true, false, false, false),
            ttl: 64,
            ip_and_tcp_len: 60,
            options_len: 0,
            payload_len: 0,
        }
    );
    assert_eq!(refused(&r, "gone6"), (1, 1));
}

#[test]
fn a_syn_with_options_and_payload_shrinks_to_a_bare_reset() {
    let mut r = rig("rejshrink");
    r.dataplane
        .apply(&[
            web("gone", VIP4, proto::TCP, &[], 1),
            web("gone6", VIP6, proto::TCP, &[], 1),
        ])
        .unwrap();
    // MSS, SACK permitted, timestamps, window scale: 20 bytes of options.
    let opts = [
        2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
    ];
    let payload = vec![0x5a; 100];
    for (c, v, ip_hdr) in [(ip(CLIENT4), ip(VIP4), 20), (ip(CLIENT6), ip(VIP6), 40)] {
        let syn = segment(c, v, 40002, 80, SYN, 5000, 0, &opts, &payload);
        // IPv4 with options, IPv6 with a Destination Options header, both
        // in a VLAN: the link layer stays, the rest is written fresh.
        let f = match c {
            IpAddr::V4(_) => {
                let mut p = raw::ipv4(c, v, raw::TCP, 7, false, 0, &[1, 1, 1, 1], syn.len());
                p.extend_from_slice(&syn);
                raw::eth(0x0800, &[42], &p)
            }
            IpAddr::V6(_) => {
                let ext = raw::opts_ext(raw::TCP, 2);
                let mut p = raw::ipv6(c, v, raw::DSTOPTS, &ext, syn.len());
                p.extend_from_slice(&syn);
                raw::eth(0x86dd, &[42], &p)
            }
        };
        let (verdict, out) = r.datapath.run_xdp(&f).unwrap();
        assert_eq!(verdict, XDP_TX, "{c}");
        assert_eq!(
            out.len(),
            18 + ip_hdr + 20,
            "{c}: VLAN tag kept, the rest bare"
        );
        assert_eq!(parse_checked(&out).vlan_ids, vec![42], "{c}");
        let got = read_reset(&out);
        assert_eq!(got.ip_and_tcp_len, ip_hdr + 20, "{c}");
        assert_eq!((got.options_len, got.payload_len), (0, 0), "{c}");
        // SEG.LEN: 100 bytes of payload and the SYN.
        assert_eq!((got.seq, got.ack), (0, 5000 + 100 + 1), "{c}");
        assert_eq!(got.flags, (true, true, false, false, false), "{c}");
        assert_eq!((got.src, got.dst, got.sport, got.dport), (v, c, 80, 40002));
    }
}

#[test]
fn segments_without_a_flow_get_the_reset_rfc_793_asks_for() {
    let mut r = rig("rejseg");
    r.dataplane
        .apply(&[
            web("gone", VIP4, proto::TCP, &[], 1),
            web("gone6", VIP6, proto::TCP, &[], 1),
        ])
        .unwrap();
    for (c, v) in [(ip(CLIENT4), ip(VIP4)), (ip(CLIENT6), ip(VIP6))] {
        // ACK set: the reset's sequence number is the segment's ACK, no ACK.
        let seg = segment(c, v, 40003, 80, ACK | PSH, 7000, 0xdead_beef, &[], b"GET /");
        let (verdict, out) = r
            .datapath
            .run_xdp(&raw::frame(c, v, raw::TCP, &[], &seg))
            .unwrap();
        assert_eq!(verdict, XDP_TX, "{c}");
        let got = read_reset(&out);
        assert_eq!((got.seq, got.ack), (0xdead_beef, 0), "{c}");
        assert_eq!(
            got.flags,
            (true, false, false, false, false),
            "{c}: RST alone"
        );
        assert_eq!(got.payload_len, 0);

        // No ACK, a FIN with data: ack = SEG.SEQ + data + 1 for the FIN.
        let seg = segment(c, v, 40004, 80, FIN, 9000, 0, &[], b"bye");
        let (verdict, out) = r
            .datapath
            .run_xdp(&raw::frame(c, v, raw::TCP, &[], &seg))
            .unwrap();
        assert_eq!(verdict, XDP_TX, "{c}");
        let got = read_reset(&out);
        assert_eq!((got.seq, got.ack), (0, 9000 + 3 + 1), "{c}");
        assert_eq!(got.flags, (true, true, false, false, false), "{c}");

        // A reset is never answered: dropped.
        let seg = segment(c, v, 40005, 80, RST | ACK, 1, 2, &[], &[]);
        let (verdict, _) = r
            .datapath
            .run_xdp(&raw::frame(c, v, raw::TCP, &[], &seg))
            .unwrap();
        assert_eq!(verdict, XDP_DROP, "{c}: a reset is not answered");
    }
    // Three refused per family, all counted.
    assert_eq!(refused(&r, "gone"), (3, 3));
    assert_eq!(refused(&r, "gone6"), (3, 3));
}

#[test]
fn udp_of_the_refused_share_is_dropped_and_counted_per_vip() {
    let mut r = rig("rejudp");
    r.dataplane
        .apply(&[
            web("dns", VIP4, proto::UDP, &[], 1),
            web("dns6", VIP6, proto::UDP, &[], 1),
            // Another VIP, so per-VIP counting is seen to be per VIP.
            web("web", VIP4, proto::TCP, &[B1], 0),
        ])
        .unwrap();
    for i in 0..5u16 {
        for (c, v) in [(ip(CLIENT4), ip(VIP4)), (ip(CLIENT6), ip(VIP6))] {
            let d = raw::udp(c, v, 41000 + i, 80, b"query");
            let (verdict, _) = r
                .datapath
                .run_xdp(&raw::frame(c, v, raw::UDP, &[], &d))
                .unwrap();
            assert_eq!(verdict, XDP_DROP, "{c}");
        }
    }
    assert_eq!(refused(&r, "dns"), (5, 5));
    assert_eq!(refused(&r, "dns6"), (5, 5));
    assert_eq!(refused(&r, "web"), (0, 0));
}

/// Where each of `n` SYNs from distinct source ports went: a backend, or
/// None for a reset.
fn syn_outcomes(r: &mut Rig, n: u16, base: u16) -> Vec<Option<IpAddr>> {
    let (c, v) = (ip(CLIENT4), ip(VIP4));
    (0..n)
        .map(|i| {
            let syn = segment(c, v, base + i, 80, SYN, 1, 0, &[], &[]);
            let (verdict, out) = r
                .datapath
                .run_xdp(&raw::frame(c, v, raw::TCP, &[], &syn))
                .unwrap();
            match verdict {
                XDP_TX => {
                    let got = read_reset(&out);
                    assert_eq!((got.dst, got.dport), (c, base + i));
                    None
                }
                XDP_PASS => Some(parse_checked(&out).dst),
                other => panic!("SYN {i}: verdict {other}"),
            }
        })
        .collect()
}

#[test]
fn the_refused_share_is_its_weight_share_and_a_down_backend_never_feeds_it() {
    let mut r = rig("rejshare");
    r.dataplane
        .apply(&[web("web", VIP4, proto::TCP, &[B1, B2], 1)])
        .unwrap();
    let outcomes = syn_outcomes(&mut r, 3000, 20000);
    let mut n: BTreeMap<Option<IpAddr>, u32> = BTreeMap::new();
    for o in &outcomes {
        *n.entry(*o).or_default() += 1;
    }
    eprintln!("3,000 SYNs, weights 1/1, reject_weight 1: {n:?}");
    // Expected 1,000 each; 130 is five standard deviations of a binomial
    // count with p = 1/3 over 3,000 (25.8), plus the slot rounding.
    for k in [None, Some(ip(B1)), Some(ip(B2))] {
        let got = n.get(&k).copied().unwrap_or(0);
        assert!(
            (870..=1130).contains(&got),
            "{k:?}: {got} of 3,000, expected 1,000 +- 130: {n:?}"
        );
    }
    assert_eq!(refused(&r, "web").0, u64::from(n[&None]));
    // The slice: a third of its slots name the pseudo-backend.
    let slice = slice_of(&r, "web");
    let reject = r.dataplane.reject_backend_id().expect("pseudo-backend");
    let share = slice.iter().filter(|id| **id == reject).count() as f64 / slice.len() as f64;
    assert!((share - 1.0 / 3.0).abs() < 0.01, "slot share {share}");
    let h = r.dataplane.maps().backend_health.get(&reject, 0).unwrap();
    assert_eq!(
        (h.state, h.flags),
        (abi::backend_state::HEALTHY, abi::backend_flags::REJECT)
    );

    // B2 goes down: its flows go to B1 only; exactly the same flows as
    // before are refused (the refused share neither grows nor shrinks).
    r.dataplane
        .set_backend_state(
            &BackendKey {
                addr: ip(B2),
                port: 8080,
            },
            abi::backend_state::DOWN,
        )
        .unwrap();
    let after = syn_outcomes(&mut r, 3000, 20000);
    for (i, (a, b)) in outcomes.iter().zip(&after).enumerate() {
        match a {
            None => assert_eq!(*b, None, "SYN {i} was refused, still is"),
            Some(_) => assert_eq!(*b, Some(ip(B1)), "SYN {i}: to the valid backend"),
        }
    }
}

#[test]
fn established_flows_are_never_refused_when_reject_weight_changes() {
    let mut r = rig("rejestab");
    r.dataplane
        .apply(&[web("web", VIP4, proto::TCP, &[B1, B2], 0)])
        .unwrap();
    let (c, v) = (ip(CLIENT4), ip(VIP4));
    // 300 established flows (their first non-SYN segment makes the entry).
    let mut on: Vec<(u16, BackendKey)> = Vec::new();
    for sport in 30000..30300 {
        on.push((sport, send_flow(&mut r, c, sport, v, 80, raw::TCP, ACK)));
    }
    for reject in [3, 1, 0] {
        r.dataplane
            .apply(&[web("web", VIP4, proto::TCP, &[B1, B2], reject)])
            .unwrap();
        for (sport, be) in &on {
            assert_eq!(
                send_flow(&mut r, c, *sport, v, 80, raw::TCP, ACK | PSH),
                *be,
                "reject_weight {reject}: flow {sport} keeps its backend"
            );
        }
    }
    // Meanwhile new flows did meet the share while it was there.
    r.dataplane
        .apply(&[web("web", VIP4, proto::TCP, &[B1, B2], 3)])
        .unwrap();
    let fresh = syn_outcomes(&mut r, 300, 50000);
    assert!(
        fresh.iter().filter(|o| o.is_none()).count() > 100,
        "about 60% of new flows refused at weight 3 of 5"
    );
}

#[test]
fn reject_weight_zero_leaves_the_slice_as_it_was() {
    let mut r = rig("rejzero");
    let backends = [B1, B2, "10.231.1.13"];
    r.dataplane
        .apply(&[web("web", VIP4, proto::TCP, &backends, 0)])
        .unwrap();
    let before = slice_of(&r, "web");
    // What the slice was before refused shares existed: the backends'
    // keys and weights alone, built by the Maglev crate directly.
    let v = r.dataplane.vips().find(|v| v.spec.name == "web").unwrap();
    let keys: Vec<String> = v.spec.backends.iter().map(|b| b.key.to_string()).collect();
    let mb: Vec<rivora_maglev::MaglevBackend> = keys
        .iter()
        .map(|k| rivora_maglev::MaglevBackend {
            key: k.as_bytes(),
            weight: 1,
        })
        .collect();
    let table = rivora_maglev::build(&mb, v.slice.size).unwrap();
    let id = |k: &BackendKey| r.dataplane.backends().find(|b| b.key == *k).unwrap().id;
    let want: Vec<u32> = table
        .iter()
        .map(|&i| id(&v.spec.backends[i as usize].key))
        .collect();
    assert_eq!(before, want, "no pseudo key, no other slot");
    assert_eq!(r.dataplane.reject_backend_id(), None);

    // A refused share in and out again: the same bytes, and the
    // pseudo-backend's ID given back.
    r.dataplane
        .apply(&[web("web", VIP4, proto::TCP, &backends, 2)])
        .unwrap();
    let reject = r.dataplane.reject_backend_id().expect("pseudo-backend");
    assert!(slice_of(&r, "web").contains(&reject));
    r.dataplane
        .apply(&[web("web", VIP4, proto::TCP, &backends, 0)])
        .unwrap();
    assert_eq!(slice_of(&r, "web"), before);
    assert_eq!(r.dataplane.reject_backend_id(), None);
    let h = r.dataplane.maps().backend_health.get(&reject, 0).unwrap();
    assert_eq!(h.state, abi::backend_state::NONE, "pseudo-backend released");
}

#[test]
fn a_restart_adopts_the_refused_share_as_it_is() {
    let dir = pin_dir("rejrestart");
    let specs = [
        web("web", VIP4, proto::TCP, &[B1, B2], 2),
        web("web6", VIP6, proto::TCP, &[B1_6, B2_6], 1),
        web("gone", "10.231.100.2", proto::TCP, &[], 1),
    ];
    let mut first = rig_at(&dir).0;
    first.dataplane.apply(&specs).unwrap();
    let slices: Vec<Vec<u32>> = ["web", "web6", "gone"]
        .iter()
        .map(|n| slice_of(&first, n))
        .collect();
    let reject = first.dataplane.reject_backend_id().unwrap();
    first.keep_pins = true;
    drop(first);

    let (mut second, _, report) = rig_at(&dir);
    assert!(report.dropped.is_empty(), "{report:?}");
    assert_eq!(report.vips, 3);
    assert_eq!(second.dataplane.reject_backend_id(), Some(reject));
    let applied = second.dataplane.apply(&specs).unwrap();
    let mut adopted = applied.adopted.clone();
    adopted.sort();
    assert_eq!(adopted, vec!["gone", "web", "web6"], "{applied}");
    assert!(applied.rebuilt.is_empty(), "{applied}");
    for (n, s) in ["web", "web6", "gone"].iter().zip(&slices) {
        assert_eq!(&slice_of(&second, n), s, "{n}: the same slots");
    }
    // And it still refuses.
    let (c, v) = (ip(CLIENT4), ip("10.231.100.2"));
    let syn = segment(c, v, 40010, 80, SYN, 1, 0, &[], &[]);
    let (verdict, _) = second
        .datapath
        .run_xdp(&raw::frame(c, v, raw::TCP, &[], &syn))
        .unwrap();
    assert_eq!(verdict, XDP_TX);
}
