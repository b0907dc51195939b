//! Unit tests of the session state machine: OPEN exchange, timers, FSM
//! errors, route diffs, UPDATE packing and shutdown.

use super::*;
use crate::msg::{Context, decode, frame};

const PEER_ID: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn cfg(local_as: u32, remote_as: u32) -> SessionConfig {
    SessionConfig {
        local_as,
        router_id: Ipv4Addr::new(10, 0, 0, 1),
        remote_as,
        hold_time: 90,
        next_hop_v4: Some(Ipv4Addr::new(10, 0, 0, 1)),
        next_hop_v6: Some("2001:db8::1".parse().unwrap()),
    }
}

fn peer_open(asn: u32, hold: u16, caps: Vec<Capability>) -> Vec<u8> {
    Message::Open(Open {
        version: 4,
        my_as: u16::try_from(asn).unwrap_or(AS_TRANS),
        hold_time: hold,
        bgp_id: PEER_ID,
        capabilities: caps,
    })
    .encode(C4)
}

fn full_caps(asn: u32) -> Vec<Capability> {
    vec![
        Capability::Multiprotocol { afi: 1, safi: 1 },
        Capability::Multiprotocol { afi: 2, safi: 1 },
        Capability::RouteRefresh,
        Capability::FourOctetAs(asn),
    ]
}

const C4: Context = Context {
    four_octet_as: true,
};

/// Splits a byte stream into decoded messages.
fn messages(mut b: &[u8], ctx: Context) -> Vec<Message> {
    let mut v = Vec::new();
    while !b.is_empty() {
        let len = frame(b).unwrap().expect("whole messages only");
        assert!(len <= MAX_MESSAGE_LEN);
        v.push(decode(&b[..len], ctx).unwrap());
        b = &b[len..];
    }
    v
}

fn routes(list: &[(&str, &[u32])]) -> Routes {
    list.iter()
        .map(|(p, c)| {
            (
                p.parse().unwrap(),
                RouteAttrs::with_communities(c.iter().copied()),
            )
        })
        .collect()
}

/// A session taken to Established with `r`; returns it, the start instant
/// and the messages sent once established.
fn established(c: SessionConfig, r: &Routes) -> (Session, Instant, Vec<Message>) {
    let t0 = Instant::now();
    let remote = c.remote_as;
    let mut s = Session::new(c, t0);
    let out = messages(&s.take_output(), C4);
    assert!(matches!(out[..], [Message::Open(_)]));
    s.receive(&peer_open(remote, 30, full_caps(remote)), t0, r);
    assert_eq!(s.state(), State::OpenConfirm);
    assert_eq!(messages(&s.take_output(), C4), vec![Message::Keepalive]);
    s.receive(&Message::Keepalive.encode(C4), t0, r);
    assert_eq!(s.state(), State::Established);
    let out = messages(&s.take_output(), C4);
    (s, t0, out)
}

fn announced(msgs: &[Message]) -> Vec<Prefix> {
    let mut v = Vec::new();
    for m in msgs {
        if let Message::Update(u) = m {
            v.extend(u.nlri.iter().copied());
            for a in &u.attributes {
                if let Attribute::MpReach { nlri, .. } = a {
                    v.extend(nlri.iter().copied());
                }
            }
        }
    }
    v
}

fn withdrawn(msgs: &[Message]) -> Vec<Prefix> {
    let mut v = Vec::new();
    for m in msgs {
        if let Message::Update(u) = m {
            v.extend(u.withdrawn.iter().copied());
            for a in &u.attributes {
                if let Attribute::MpUnreach { withdrawn, .. } = a {
                    v.extend(withdrawn.iter().copied());
                }
            }
        }
    }
    v
}

fn sent_notification(s: &mut Session) -> (u8, u8) {
    let msgs = messages(&s.take_output(), C4);
    match msgs.last() {
        Some(Message::Notification(n)) => (n.code, n.subcode),
        other => panic!("expected a NOTIFICATION, got {other:?}"),
    }
}

#[test]
fn our_open_advertises_the_capabilities() {
    let mut s = Session::new(cfg(4_200_000_000, 65001), Instant::now());
    let Message::Open(o) = &messages(&s.take_output(), C4)[0] else {
        panic!()
    };
    assert_eq!(o.my_as, AS_TRANS);
    assert_eq!(o.peer_as(), 4_200_000_000);
    assert_eq!(o.hold_time, 90);
    assert!(o.has_family(1, 1) && o.has_family(2, 1));
    assert!(o.capabilities.contains(&Capability::RouteRefresh));
}

#[test]
fn ebgp_full_table_on_establishment() {
    let r = routes(&[
        ("203.0.113.10/32", &[(65000 << 16) | 1]),
        ("203.0.113.11/32", &[]),
        ("2001:db8:100::10/128", &[]),
    ]);
    let (s, _, out) = established(cfg(65000, 65001), &r);
    assert_eq!(s.prefixes_sent(), 3);
    let mut got = announced(&out);
    got.sort();
    assert_eq!(got, r.keys().copied().collect::<Vec<_>>());
    // Two End-of-RIB markers at the end.
    let n = out.len();
    assert_eq!(out[n - 2], Message::Update(Update::default()));
    assert!(
        matches!(&out[n - 1], Message::Update(u) if u.attributes == vec![Attribute::MpUnreach { afi: 2, safi: 1, withdrawn: vec![] }])
    );
    for m in &out[..n - 2] {
        let Message::Update(u) = m else { panic!() };
        assert_eq!(u.attributes[0], Attribute::Origin(0));
        assert_eq!(
            u.attributes[1],
            Attribute::AsPath(vec![AsSegment {
                kind: 2,
                asns: vec![65000]
            }])
        );
        assert!(
            !u.attributes
                .iter()
                .any(|a| matches!(a, Attribute::LocalPref(_)))
        );
        if !u.nlri.is_empty() {
            assert!(
                u.attributes
                    .contains(&Attribute::NextHop(Ipv4Addr::new(10, 0, 0, 1)))
            );
        } else {
            assert!(u.attributes.iter().any(|a| matches!(a,
                Attribute::MpReach { next_hops, .. } if *next_hops == vec![IpAddr::V6("2001:db8::1".parse().unwrap())])));
        }
    }
    let n = s.negotiated().unwrap();
    assert_eq!((n.hold_time, n.keepalive), (30, 10));
    assert!(n.four_octet_as && n.ipv4 && n.ipv6);
}

#[test]
fn ibgp_gets_local_pref_and_empty_as_path() {
    let r = routes(&[("203.0.113.10/32", &[]), ("2001:db8::10/128", &[7])]);
    let (_, _, out) = established(cfg(65000, 65000), &r);
    let ups: Vec<&Update> = out
        .iter()
        .filter_map(|m| match m {
            Message::Update(u) if !u.attributes.is_empty() && !u.nlri.is_empty()
                || matches!(m, Message::Update(u) if u.attributes.iter().any(|a| matches!(a, Attribute::MpReach{..}))) =>
            {
                Some(u)
            }
            _ => None,
        })
        .collect();
    assert_eq!(ups.len(), 2);
    for u in ups {
        assert!(u.attributes.contains(&Attribute::AsPath(vec![])));
        assert!(u.attributes.contains(&Attribute::LocalPref(100)));
    }
}

#[test]
fn diffs_withdrawals_and_attribute_changes() {
    let r1 = routes(&[("203.0.113.10/32", &[1]), ("2001:db8::10/128", &[])]);
    let (mut s, t0, _) = established(cfg(65000, 65001), &r1);
    // Unchanged: nothing at all.
    s.sync_routes(&r1, t0);
    assert!(s.take_output().is_empty());
    // Change communities of one, add one, drop the IPv6 one.
    let r2 = routes(&[("203.0.113.10/32", &[2]), ("203.0.113.12/32", &[])]);
    s.sync_routes(&r2, t0);
    let out = messages(&s.take_output(), C4);
    assert_eq!(withdrawn(&out), vec!["2001:db8::10/128".parse().unwrap()]);
    let mut a = announced(&out);
    a.sort();
    assert_eq!(a, r2.keys().copied().collect::<Vec<_>>());
    assert_eq!(s.adj_rib_out(), &r2);
    // Everything gone.
    s.sync_routes(&Routes::new(), t0);
    let out = messages(&s.take_output(), C4);
    assert_eq!(withdrawn(&out).len(), 2);
    assert_eq!(s.prefixes_sent(), 0);
}

#[test]
fn routes_before_establishment_wait() {
    let t0 = Instant::now();
    let mut s = Session::new(cfg(65000, 65001), t0);
    s.take_output();
    s.sync_routes(&routes(&[("203.0.113.10/32", &[])]), t0);
    assert!(s.take_output().is_empty());
}

#[test]
fn families_without_next_hop_or_capability_are_held_back() {
    let r = routes(&[("203.0.113.10/32", &[]), ("2001:db8::10/128", &[])]);
    let mut c = cfg(65000, 65001);
    c.next_hop_v6 = None;
    let (mut s, _, out) = established(c, &r);
    assert_eq!(announced(&out), vec!["203.0.113.10/32".parse().unwrap()]);
    let notes = s.take_notes();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("IPv6") && n.contains("next_hop_v6")),
        "{notes:?}"
    );

    // Peer without IPv6 unicast.
    let t0 = Instant::now();
    let mut s = Session::new(cfg(65000, 65001), t0);
    s.receive(
        &peer_open(
            65001,
            90,
            vec![Capability::Multiprotocol { afi: 1, safi: 1 }],
        ),
        t0,
        &r,
    );
    s.receive(&Message::Keepalive.encode(C4), t0, &r);
    assert_eq!(s.prefixes_sent(), 1);
    assert!(s.take_notes()[0].contains("did not negotiate IPv6"));

    // Peer without any multiprotocol capability: IPv4 implied, 2-octet AS.
    let t0 = Instant::now();
    let mut s = Session::new(cfg(65000, 65001), t0);
    s.take_output();
    s.receive(&peer_open(65001, 90, vec![]), t0, &r);
    s.receive(&Message::Keepalive.encode(C4), t0, &r);
    let out = messages(
        &s.take_output(),
        Context {
            four_octet_as: false,
        },
    );
    assert_eq!(
        announced(&out),
        vec!["203.0.113.10/32".parse::<Prefix>().unwrap()]
    );
}

#[test]
fn big_local_as_to_a_two_octet_peer_uses_as_trans_and_as4_path() {
    let r = routes(&[("203.0.113.10/32", &[])]);
    let t0 = Instant::now();
    let mut s = Session::new(cfg(4_200_000_000, 65001), t0);
    s.take_output();
    s.receive(&peer_open(65001, 90, vec![]), t0, &r);
    s.receive(&Message::Keepalive.encode(C4), t0, &r);
    let c2 = Context {
        four_octet_as: false,
    };
    let out = messages(&s.take_output(), c2);
    let Message::Update(u) = &out[1] else {
        panic!("{out:?}")
    };
    assert!(u.attributes.contains(&Attribute::AsPath(vec![AsSegment {
        kind: 2,
        asns: vec![u32::from(AS_TRANS)]
    }])));
    assert!(u.attributes.iter().any(|a| matches!(a,
        Attribute::Other { code: 17, value, .. } if value[..] == [2, 1, 0xfa, 0x56, 0xea, 0x00])));
}

#[test]
fn timers() {
    let r = Routes::new();
    let (mut s, t0, _) = established(cfg(65000, 65001), &r);
    // Negotiated hold 30 s, keepalive 10 s.
    assert_eq!(s.next_deadline(), Some(t0 + Duration::from_secs(10)));
    s.tick(t0 + Duration::from_secs(9));
    assert!(s.take_output().is_empty());
    s.tick(t0 + Duration::from_secs(10));
    assert_eq!(messages(&s.take_output(), C4), vec![Message::Keepalive]);
    // A KEEPALIVE from the peer restarts the hold timer.
    s.receive(
        &Message::Keepalive.encode(C4),
        t0 + Duration::from_secs(25),
        &r,
    );
    s.tick(t0 + Duration::from_secs(31));
    assert!(s.closed().is_none());
    s.take_output();
    s.tick(t0 + Duration::from_secs(55));
    assert_eq!(sent_notification(&mut s), (err::HOLD_TIMER_EXPIRED, 0));
    assert!(s.closed().unwrap().reason.contains("hold timer expired"));
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn hold_time_zero_means_no_timers() {
    let t0 = Instant::now();
    let mut c = cfg(65000, 65001);
    c.hold_time = 0;
    let mut s = Session::new(c, t0);
    assert_eq!(s.next_deadline(), Some(t0 + OPEN_HOLD_TIME));
    s.receive(&peer_open(65001, 90, full_caps(65001)), t0, &Routes::new());
    s.receive(&Message::Keepalive.encode(C4), t0, &Routes::new());
    assert_eq!(s.state(), State::Established);
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn open_sent_hold_timer_expires() {
    let t0 = Instant::now();
    let mut s = Session::new(cfg(65000, 65001), t0);
    s.take_output();
    s.tick(t0 + OPEN_HOLD_TIME);
    assert_eq!(sent_notification(&mut s), (err::HOLD_TIMER_EXPIRED, 0));
}

#[test]
fn open_checks() {
    let cases: Vec<(SessionConfig, Vec<u8>, (u8, u8))> = vec![
        (
            cfg(65000, 65001),
            peer_open(65002, 90, full_caps(65002)),
            (2, 2),
        ),
        // 4-octet capability wins over the 2-octet field.
        (
            cfg(65000, 65001),
            peer_open(65001, 90, full_caps(65003)),
            (2, 2),
        ),
        (
            cfg(65000, 65001),
            peer_open(65001, 1, full_caps(65001)),
            (2, 6),
        ),
        (
            cfg(65000, 65001),
            peer_open(65001, 2, full_caps(65001)),
            (2, 6),
        ),
        (
            cfg(65000, 65000),
            {
                let mut b = peer_open(65000, 90, full_caps(65000));
                b[24..28].copy_from_slice(&[10, 0, 0, 1]); // our own ID on iBGP
                b
            },
            (2, 3),
        ),
        (
            cfg(65000, 65001),
            {
                let mut b = peer_open(65001, 90, full_caps(65001));
                b[24..28].copy_from_slice(&[0, 0, 0, 0]);
                b
            },
            (2, 3),
        ),
    ];
    for (c, open, want) in cases {
        let mut s = Session::new(c, Instant::now());
        s.take_output();
        s.receive(&open, Instant::now(), &Routes::new());
        assert_eq!(sent_notification(&mut s), want);
        assert_eq!(s.state(), State::Closed);
    }
    // eBGP may share our identifier (RFC 6286).
    let mut s = Session::new(cfg(65000, 65001), Instant::now());
    let mut b = peer_open(65001, 90, full_caps(65001));
    b[24..28].copy_from_slice(&[10, 0, 0, 1]);
    s.receive(&b, Instant::now(), &Routes::new());
    assert_eq!(s.state(), State::OpenConfirm);
}

#[test]
fn fsm_errors() {
    let r = Routes::new();
    let upd = Message::Update(Update::default()).encode(C4);
    // OpenSent: anything but OPEN.
    for m in [Message::Keepalive.encode(C4), upd.clone()] {
        let mut s = Session::new(cfg(65000, 65001), Instant::now());
        s.take_output();
        s.receive(&m, Instant::now(), &r);
        assert_eq!(sent_notification(&mut s), (5, 1));
    }
    // OpenConfirm: anything but KEEPALIVE.
    for m in [peer_open(65001, 90, vec![]), upd.clone()] {
        let mut s = Session::new(cfg(65000, 65001), Instant::now());
        s.receive(&peer_open(65001, 90, full_caps(65001)), Instant::now(), &r);
        s.take_output();
        s.receive(&m, Instant::now(), &r);
        assert_eq!(sent_notification(&mut s), (5, 2));
    }
    // Established: OPEN.
    let (mut s, t0, _) = established(cfg(65000, 65001), &r);
    s.receive(&peer_open(65001, 90, vec![]), t0, &r);
    assert_eq!(sent_notification(&mut s), (5, 3));
}

#[test]
fn notifications_end_the_session_without_reply() {
    let r = Routes::new();
    let (mut s, t0, _) = established(cfg(65000, 65001), &r);
    let n = Notification::administrative_shutdown("bye");
    s.receive(&Message::Notification(n.clone()).encode(C4), t0, &r);
    assert!(s.take_output().is_empty());
    let c = s.closed().unwrap();
    assert_eq!(c.received, Some(n));
    assert!(c.reason.contains("Administrative Shutdown"), "{}", c.reason);
    // Malformed NOTIFICATION (too short): closed, nothing sent back.
    let mut s = Session::new(cfg(65000, 65001), Instant::now());
    s.take_output();
    let mut b = vec![0xff; 16];
    b.extend_from_slice(&[0, 20, 3, 6]);
    s.receive(&b, Instant::now(), &r);
    assert!(s.take_output().is_empty());
    assert!(s.closed().is_some());
}

#[test]
fn inbound_updates_are_validated_and_ignored() {
    let r = Routes::new();
    let (mut s, t0, _) = established(cfg(65000, 65001), &r);
    let good = Message::Update(Update {
        withdrawn: vec![],
        attributes: vec![
            Attribute::Origin(0),
            Attribute::AsPath(vec![AsSegment {
                kind: 2,
                asns: vec![65001],
            }]),
            Attribute::NextHop(Ipv4Addr::new(10, 0, 0, 2)),
        ],
        nlri: vec!["198.51.100.0/24".parse().unwrap()],
    })
    .encode(C4);
    s.receive(&good, t0, &r);
    assert!(s.take_output().is_empty());
    assert_eq!(s.state(), State::Established);
    let mut bad = good.clone();
    let at = bad.windows(4).position(|w| w == [0x40, 1, 1, 0]).unwrap();
    bad[at + 3] = 7;
    s.receive(&bad, t0, &r);
    assert_eq!(sent_notification(&mut s), (3, 6));
}

#[test]
fn bytes_may_arrive_one_at_a_time() {
    let r = routes(&[("203.0.113.10/32", &[])]);
    let t0 = Instant::now();
    let mut s = Session::new(cfg(65000, 65001), t0);
    s.take_output();
    let mut stream = peer_open(65001, 90, full_caps(65001));
    stream.extend_from_slice(&Message::Keepalive.encode(C4));
    stream.extend_from_slice(&Message::Keepalive.encode(C4));
    for b in &stream {
        s.receive(std::slice::from_ref(b), t0, &r);
    }
    assert_eq!(s.state(), State::Established);
    assert_eq!(s.prefixes_sent(), 1);
}

#[test]
fn route_refresh_resends_the_family() {
    let r = routes(&[("203.0.113.10/32", &[]), ("2001:db8::10/128", &[])]);
    let (mut s, t0, _) = established(cfg(65000, 65001), &r);
    let rr = |afi| {
        Message::RouteRefresh(msg::RouteRefresh {
            afi,
            subtype: 0,
            safi: 1,
        })
        .encode(C4)
    };
    s.receive(&rr(2), t0, &r);
    assert_eq!(
        announced(&messages(&s.take_output(), C4)),
        vec!["2001:db8::10/128".parse().unwrap()]
    );
    s.receive(&rr(1), t0, &r);
    assert_eq!(
        announced(&messages(&s.take_output(), C4)),
        vec!["203.0.113.10/32".parse().unwrap()]
    );
    // Unknown family: ignored.
    s.receive(&rr(25), t0, &r);
    assert!(s.take_output().is_empty());
    assert!(s.closed().is_none());
}

#[test]
fn shutdown_withdraws_then_ceases() {
    let r = routes(&[("203.0.113.10/32", &[]), ("2001:db8::10/128", &[])]);
    let (mut s, t0, _) = established(cfg(65000, 65001), &r);
    s.shutdown("maintenance", t0);
    let out = messages(&s.take_output(), C4);
    let mut w = withdrawn(&out);
    w.sort();
    assert_eq!(w, r.keys().copied().collect::<Vec<_>>());
    assert_eq!(
        out.last(),
        Some(&Message::Notification(
            Notification::administrative_shutdown("maintenance")
        ))
    );
    assert!(s.closed().is_some());
    // Nothing more after closing.
    s.receive(&Message::Keepalive.encode(C4), t0, &r);
    s.tick(t0 + Duration::from_secs(1000));
    s.sync_routes(&Routes::new(), t0);
    assert!(s.take_output().is_empty());
}

#[test]
fn large_route_sets_are_packed_into_4096_byte_updates() {
    let mut r = Routes::new();
    for i in 0..3000u32 {
        let v4 = Ipv4Addr::from(0x0a00_0000 + i);
        r.insert(
            Prefix::host(IpAddr::V4(v4)),
            RouteAttrs::with_communities([i % 3]),
        );
        let v6 = Ipv6Addr::from(0x2001_0db8_0000_0000_0000_0000_0000_0000u128 + u128::from(i));
        r.insert(Prefix::host(IpAddr::V6(v6)), RouteAttrs::default());
    }
    let (mut s, t0, out) = established(cfg(65000, 65001), &r);
    let mut got = announced(&out);
    got.sort();
    assert_eq!(got, r.keys().copied().collect::<Vec<_>>());
    // messages() already checked each is <= 4096; make sure packing is dense.
    assert!(out.len() < 140, "{} messages", out.len());
    s.sync_routes(&Routes::new(), t0);
    let out = messages(&s.take_output(), C4);
    assert_eq!(withdrawn(&out).len(), 6000);
    assert!(out.len() < 20, "{} messages", out.len());
}
