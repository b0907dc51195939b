//! Unit tests of the wire format: exact bytes for each message type, round
//! trips, and every error path with its NOTIFICATION code, subcode and data.

use super::*;

const C2: Context = Context {
    four_octet_as: false,
};
const C4: Context = Context {
    four_octet_as: true,
};

fn p(s: &str) -> Prefix {
    s.parse().unwrap()
}

/// A message with the given type and body, header computed.
fn raw(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut v = MARKER.to_vec();
    v.extend_from_slice(&((HEADER_LEN + body.len()) as u16).to_be_bytes());
    v.push(kind);
    v.extend_from_slice(body);
    v
}

/// An UPDATE body from withdrawn bytes, attribute bytes and NLRI bytes.
fn update_body(withdrawn: &[u8], attrs: &[u8], nlri: &[u8]) -> Vec<u8> {
    let mut b = (withdrawn.len() as u16).to_be_bytes().to_vec();
    b.extend_from_slice(withdrawn);
    b.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    b.extend_from_slice(attrs);
    b.extend_from_slice(nlri);
    b
}

/// ORIGIN IGP, AS_PATH [65001] (2-octet), NEXT_HOP 192.0.2.1.
const GOOD_ATTRS_2: &[u8] = &[
    0x40, 1, 1, 0, //
    0x40, 2, 4, 2, 1, 0xfd, 0xe9, //
    0x40, 3, 4, 192, 0, 2, 1,
];

fn expect_err(bytes: &[u8], ctx: Context, code: u8, subcode: u8) -> DecodeError {
    match decode(bytes, ctx) {
        Ok(m) => panic!("decoded {m:?}, expected error {code}/{subcode}"),
        Err(e) => {
            assert_eq!(
                (e.notification.code, e.notification.subcode),
                (code, subcode),
                "{e}"
            );
            e
        }
    }
}

fn update_err(attrs: &[u8], nlri: &[u8], ctx: Context, subcode: u8) -> DecodeError {
    expect_err(
        &raw(kind::UPDATE, &update_body(&[], attrs, nlri)),
        ctx,
        err::UPDATE,
        subcode,
    )
}

fn roundtrip(m: &Message, ctx: Context) {
    let b = m.encode(ctx);
    assert_eq!(frame(&b).unwrap(), Some(b.len()));
    assert_eq!(&decode(&b, ctx).unwrap(), m);
}

// -- the message types ------------------------------------------------------

#[test]
fn keepalive_bytes() {
    let b = Message::Keepalive.encode(C4);
    let mut want = vec![0xff; 16];
    want.extend_from_slice(&[0, 19, 4]);
    assert_eq!(b, want);
    assert_eq!(decode(&b, C4).unwrap(), Message::Keepalive);
}

#[test]
fn open_bytes_and_roundtrip() {
    let o = Open {
        version: 4,
        my_as: 65000,
        hold_time: 90,
        bgp_id: "192.0.2.1".parse().unwrap(),
        capabilities: vec![
            Capability::Multiprotocol { afi: 1, safi: 1 },
            Capability::Multiprotocol { afi: 2, safi: 1 },
            Capability::RouteRefresh,
            Capability::FourOctetAs(65000),
        ],
    };
    let b = Message::Open(o.clone()).encode(C2);
    let mut want = vec![0xff; 16];
    #[rustfmt::skip]
    want.extend_from_slice(&[
        0, 51, 1,             // length 51, OPEN
        4, 0xfd, 0xe8, 0, 90, // version, AS 65000, hold 90
        192, 0, 2, 1,         // BGP ID
        22,                   // optional parameters length
        2, 20,                // capabilities parameter
        1, 4, 0, 1, 0, 1,     // MP IPv4 unicast
        1, 4, 0, 2, 0, 1,     // MP IPv6 unicast
        2, 0,                 // route refresh
        65, 4, 0, 0, 0xfd, 0xe8, // 4-octet AS 65000
    ]);
    assert_eq!(b, want);
    roundtrip(&Message::Open(o.clone()), C2);
    assert_eq!(o.peer_as(), 65000);
    assert!(o.has_family(2, 1));
}

#[test]
fn open_four_octet_as_and_unknown_capabilities() {
    let o = Open {
        version: 4,
        my_as: AS_TRANS,
        hold_time: 0,
        bgp_id: "10.0.0.1".parse().unwrap(),
        capabilities: vec![
            Capability::FourOctetAs(4_200_000_001),
            Capability::Unknown {
                code: 64,
                value: vec![0, 120],
            },
        ],
    };
    roundtrip(&Message::Open(o.clone()), C2);
    assert_eq!(o.peer_as(), 4_200_000_001);
    assert!(!o.has_any_family());
    // Several capability parameters (as some implementations send) merge.
    let body = open_body(4, &[2, 2, 2, 0, 2, 6, 1, 4, 0, 1, 0, 1]);
    let Message::Open(o) = decode(&raw(kind::OPEN, &body), C2).unwrap() else {
        panic!()
    };
    assert_eq!(
        o.capabilities,
        vec![
            Capability::RouteRefresh,
            Capability::Multiprotocol { afi: 1, safi: 1 }
        ]
    );
}

#[test]
fn many_capabilities() {
    let caps: Vec<Capability> = (0..50)
        .map(|i| Capability::Unknown {
            code: 200,
            value: vec![i; 3],
        })
        .collect();
    let o = Open {
        version: 4,
        my_as: 1,
        hold_time: 3,
        bgp_id: "10.0.0.1".parse().unwrap(),
        capabilities: caps,
    };
    roundtrip(&Message::Open(o), C4);
}

#[test]
fn update_ipv4_bytes_and_roundtrip() {
    let u = Update {
        withdrawn: vec![p("198.51.100.0/24")],
        attributes: vec![
            Attribute::Origin(origin::IGP),
            Attribute::AsPath(vec![AsSegment {
                kind: segment::AS_SEQUENCE,
                asns: vec![65000],
            }]),
            Attribute::NextHop("192.0.2.1".parse().unwrap()),
            Attribute::Communities(vec![(65000 << 16) | 100]),
        ],
        nlri: vec![p("203.0.113.10/32")],
    };
    let b = Message::Update(u.clone()).encode(C4);
    let mut want = vec![0xff; 16];
    #[rustfmt::skip]
    want.extend_from_slice(&[
        0, 59, 2,
        0, 4, 24, 198, 51, 100,          // withdrawn
        0, 27,                           // attributes length
        0x40, 1, 1, 0,                   // ORIGIN IGP
        0x40, 2, 6, 2, 1, 0, 0, 0xfd, 0xe8, // AS_PATH SEQ [65000]
        0x40, 3, 4, 192, 0, 2, 1,        // NEXT_HOP
        0xc0, 8, 4, 0xfd, 0xe8, 0, 100,  // COMMUNITIES 65000:100
        32, 203, 0, 113, 10,             // NLRI
    ]);
    assert_eq!(b, want);
    roundtrip(&Message::Update(u.clone()), C4);
    // With 2-octet AS numbers the AS_PATH shrinks.
    roundtrip(&Message::Update(u), C2);
}

#[test]
fn update_ipv6_mp_reach_and_unreach() {
    let u = Update {
        withdrawn: vec![],
        attributes: vec![
            Attribute::Origin(origin::IGP),
            Attribute::AsPath(vec![]),
            Attribute::LocalPref(100),
            Attribute::MpReach {
                afi: AFI_IPV6,
                safi: SAFI_UNICAST,
                next_hops: vec!["2001:db8::1".parse().unwrap()],
                nlri: vec![p("2001:db8:100::10/128"), p("2001:db8:200::/48")],
            },
        ],
        nlri: vec![],
    };
    roundtrip(&Message::Update(u.clone()), C4);
    let b = Message::Update(u).encode(C4);
    // MP_REACH_NLRI: optional non-transitive, AFI 2 SAFI 1, NH length 16.
    let at = b
        .windows(6)
        .position(|w| w == [0x80, 14, 45, 0, 2, 1])
        .unwrap();
    assert_eq!(b[at + 6], 16);

    let w = Update {
        attributes: vec![Attribute::MpUnreach {
            afi: AFI_IPV6,
            safi: SAFI_UNICAST,
            withdrawn: vec![p("2001:db8:100::10/128")],
        }],
        ..Update::default()
    };
    roundtrip(&Message::Update(w), C4);
    // End-of-RIB markers.
    roundtrip(&Message::Update(Update::default()), C4);
    assert_eq!(Message::Update(Update::default()).encode(C4).len(), 23);
    // Global plus link-local next hop, and an IPv4 MP_REACH.
    let u = Update {
        attributes: vec![
            Attribute::Origin(origin::INCOMPLETE),
            Attribute::AsPath(vec![]),
            Attribute::MpReach {
                afi: AFI_IPV6,
                safi: SAFI_UNICAST,
                next_hops: vec!["2001:db8::1".parse().unwrap(), "fe80::1".parse().unwrap()],
                nlri: vec![p("::/0")],
            },
        ],
        ..Update::default()
    };
    roundtrip(&Message::Update(u), C4);
    let u = Update {
        attributes: vec![
            Attribute::Origin(origin::EGP),
            Attribute::AsPath(vec![]),
            Attribute::MpReach {
                afi: AFI_IPV4,
                safi: SAFI_UNICAST,
                next_hops: vec!["192.0.2.1".parse().unwrap()],
                nlri: vec![p("10.0.0.0/8")],
            },
        ],
        ..Update::default()
    };
    roundtrip(&Message::Update(u), C4);
}

#[test]
fn update_every_attribute_and_extended_length() {
    let u = Update {
        withdrawn: vec![],
        attributes: vec![
            Attribute::Origin(origin::IGP),
            Attribute::AsPath(vec![
                AsSegment {
                    kind: segment::AS_SEQUENCE,
                    asns: vec![65001, 4_200_000_000],
                },
                AsSegment {
                    kind: segment::AS_SET,
                    asns: vec![1, 2, 3],
                },
                AsSegment {
                    kind: segment::AS_CONFED_SEQUENCE,
                    asns: vec![7],
                },
                AsSegment {
                    kind: segment::AS_CONFED_SET,
                    asns: vec![8],
                },
            ]),
            Attribute::NextHop("192.0.2.1".parse().unwrap()),
            Attribute::Med(10),
            Attribute::LocalPref(200),
            Attribute::AtomicAggregate,
            Attribute::Aggregator {
                asn: 65001,
                address: "192.0.2.9".parse().unwrap(),
            },
            // 100 communities: 400 bytes, needs the extended length.
            Attribute::Communities((0..100).collect()),
            Attribute::Other {
                flags: flag::OPTIONAL | flag::TRANSITIVE | flag::PARTIAL,
                code: 32,
                value: vec![1; 12],
            },
            Attribute::Other {
                flags: flag::OPTIONAL,
                code: 99,
                value: vec![],
            },
        ],
        nlri: vec![p("0.0.0.0/0"), p("10.0.0.0/8"), p("10.1.128.0/17")],
    };
    roundtrip(&Message::Update(u.clone()), C4);
    let b = Message::Update(u).encode(C4);
    assert!(
        b.windows(4).any(|w| w == [0xd0, 8, 1, 144]),
        "extended length"
    );
}

#[test]
fn notification_and_route_refresh() {
    let n = Notification::new(err::UPDATE, err::MISSING_WELL_KNOWN, vec![3]);
    roundtrip(&Message::Notification(n.clone()), C4);
    assert_eq!(
        n.describe(),
        "UPDATE Message Error / Missing Well-known Attribute (3/3) data 03"
    );
    let c = Notification::administrative_shutdown("maintenance");
    roundtrip(&Message::Notification(c.clone()), C4);
    assert_eq!(
        c.describe(),
        "Cease / Administrative Shutdown (6/2): \"maintenance\""
    );
    let long = Notification::administrative_shutdown(&"é".repeat(200));
    assert!(long.data.len() <= 256 && long.data[0] as usize == long.data.len() - 1);
    let r = RouteRefresh {
        afi: AFI_IPV6,
        subtype: 0,
        safi: SAFI_UNICAST,
    };
    roundtrip(&Message::RouteRefresh(r), C4);
    assert_eq!(Message::RouteRefresh(r).encode(C4).len(), 23);
}

#[test]
fn framing_waits_for_whole_messages() {
    let b = Message::Keepalive.encode(C4);
    for i in 0..b.len() {
        assert_eq!(frame(&b[..i]).unwrap(), None, "prefix of {i} bytes");
    }
    let mut two = b.clone();
    two.extend_from_slice(&b);
    assert_eq!(frame(&two).unwrap(), Some(19));
    // A partial marker that is already wrong fails at once.
    assert!(frame(&[0xff, 0xfe]).is_err());
}

// -- header errors ----------------------------------------------------------

#[test]
fn header_errors() {
    let mut b = Message::Keepalive.encode(C4);
    b[3] = 0;
    expect_err(&b, C4, err::HEADER, err::CONNECTION_NOT_SYNCHRONIZED);

    for (kind, len) in [
        (4u8, 18u16),
        (4, 4097),
        (4, 20),
        (1, 28),
        (2, 22),
        (3, 20),
        (5, 22),
        (5, 24),
        (2, 0),
        (2, 65535),
    ] {
        let mut b = MARKER.to_vec();
        b.extend_from_slice(&len.to_be_bytes());
        b.push(kind);
        let e = frame(&b).unwrap_err();
        assert_eq!(
            (e.notification.code, e.notification.subcode),
            (err::HEADER, err::BAD_MESSAGE_LENGTH),
            "type {kind} length {len}"
        );
        assert_eq!(e.notification.data, len.to_be_bytes().to_vec());
    }
    for t in [0u8, 6, 7, 128, 255] {
        let e = expect_err(&raw(t, &[]), C4, err::HEADER, err::BAD_MESSAGE_TYPE);
        assert_eq!(e.notification.data, vec![t]);
    }
    // decode() insists on exactly one message.
    let mut two = Message::Keepalive.encode(C4);
    two.push(0);
    expect_err(&two, C4, err::HEADER, err::BAD_MESSAGE_LENGTH);
}

// -- OPEN errors ------------------------------------------------------------

fn open_body(version: u8, params: &[u8]) -> Vec<u8> {
    let mut b = vec![version, 0xfd, 0xe9, 0, 90, 10, 0, 0, 2, params.len() as u8];
    b.extend_from_slice(params);
    b
}

#[test]
fn open_errors() {
    let e = expect_err(
        &raw(kind::OPEN, &open_body(3, &[])),
        C4,
        err::OPEN,
        err::UNSUPPORTED_VERSION,
    );
    assert_eq!(e.notification.data, vec![0, 4]);

    // Optional parameters length disagrees with the message length.
    let mut b = open_body(4, &[2, 0]);
    b[9] = 5;
    expect_err(
        &raw(kind::OPEN, &b),
        C4,
        err::HEADER,
        err::BAD_MESSAGE_LENGTH,
    );
    let mut b = open_body(4, &[2, 0]);
    b[9] = 1;
    expect_err(
        &raw(kind::OPEN, &b),
        C4,
        err::HEADER,
        err::BAD_MESSAGE_LENGTH,
    );

    // Parameter overruns, unsupported parameter type.
    for params in [&[2u8][..], &[2, 3, 1, 0]] {
        expect_err(
            &raw(kind::OPEN, &open_body(4, params)),
            C4,
            err::OPEN,
            err::UNSPECIFIC,
        );
    }
    expect_err(
        &raw(kind::OPEN, &open_body(4, &[1, 0])),
        C4,
        err::OPEN,
        err::UNSUPPORTED_OPTIONAL_PARAMETER,
    );
    expect_err(
        &raw(kind::OPEN, &open_body(4, &[255, 1, 0])),
        C4,
        err::OPEN,
        err::UNSUPPORTED_OPTIONAL_PARAMETER,
    );
    // Malformed known capabilities, capability overrunning its parameter.
    for caps in [
        &[1u8, 3, 0, 1, 0][..],
        &[1, 5, 0, 1, 0, 1, 0],
        &[2, 1, 0],
        &[65, 2, 0, 1],
        &[65, 5, 0, 0, 0, 1, 0],
        &[70, 4, 1],
        &[70],
    ] {
        let mut params = vec![2, caps.len() as u8];
        params.extend_from_slice(caps);
        expect_err(
            &raw(kind::OPEN, &open_body(4, &params)),
            C4,
            err::OPEN,
            err::UNSPECIFIC,
        );
    }
    // Empty capability parameters are fine.
    decode(&raw(kind::OPEN, &open_body(4, &[2, 0, 2, 0])), C4).unwrap();
}

// -- UPDATE errors ----------------------------------------------------------

#[test]
fn update_list_errors() {
    // Withdrawn length overruns.
    let mut b = update_body(&[], &[], &[]);
    b[1] = 1;
    expect_err(
        &raw(kind::UPDATE, &b),
        C4,
        err::UPDATE,
        err::MALFORMED_ATTRIBUTE_LIST,
    );
    // Attribute length overruns.
    let mut b = update_body(&[], &[], &[]);
    b[3] = 1;
    expect_err(
        &raw(kind::UPDATE, &b),
        C4,
        err::UPDATE,
        err::MALFORMED_ATTRIBUTE_LIST,
    );
    // Attribute header truncated; value overruns; extended header truncated.
    update_err(&[0x40, 1], &[], C4, err::MALFORMED_ATTRIBUTE_LIST);
    update_err(&[0x40, 1, 2, 0], &[], C4, err::MALFORMED_ATTRIBUTE_LIST);
    update_err(&[0x50, 1, 0], &[], C4, err::MALFORMED_ATTRIBUTE_LIST);
    update_err(&[0x50, 1, 0, 2, 0], &[], C4, err::MALFORMED_ATTRIBUTE_LIST);
    // Repeated attribute.
    update_err(
        &[0x40, 1, 1, 0, 0x40, 1, 1, 0],
        &[],
        C4,
        err::MALFORMED_ATTRIBUTE_LIST,
    );
}

#[test]
fn update_network_field_errors() {
    for bad in [&[33u8, 1, 2, 3, 4, 5][..], &[24, 10, 0], &[8]] {
        let b = update_body(bad, &[], &[]);
        expect_err(
            &raw(kind::UPDATE, &b),
            C4,
            err::UPDATE,
            err::INVALID_NETWORK_FIELD,
        );
        update_err(GOOD_ATTRS_2, bad, C2, err::INVALID_NETWORK_FIELD);
    }
    // Trailing bits past the length are ignored, not an error.
    let m = decode(
        &raw(
            kind::UPDATE,
            &update_body(&[], GOOD_ATTRS_2, &[24, 10, 1, 2]),
        ),
        C2,
    )
    .unwrap();
    let Message::Update(u) = m else { panic!() };
    assert_eq!(u.nlri, vec![p("10.1.2.0/24")]);
}

#[test]
fn update_well_known_errors() {
    // Unknown attribute without the optional bit: data is the attribute.
    let e = update_err(&[0x40, 99, 1, 7], &[], C4, err::UNRECOGNIZED_WELL_KNOWN);
    assert_eq!(e.notification.data, vec![0x40, 99, 1, 7]);
    // Missing ORIGIN, AS_PATH or NEXT_HOP with NLRI present.
    let nlri = [32, 10, 0, 0, 1];
    for (skip, code) in [(0..4, 1u8), (4..11, 2), (11..18, 3)] {
        let mut a = GOOD_ATTRS_2.to_vec();
        a.drain(skip);
        let e = update_err(&a, &nlri, C2, err::MISSING_WELL_KNOWN);
        assert_eq!(e.notification.data, vec![code]);
    }
    // Without NLRI nothing is mandatory (withdrawal / End-of-RIB).
    decode(&raw(kind::UPDATE, &update_body(&[], &[], &[])), C2).unwrap();
    // MP_REACH_NLRI needs ORIGIN and AS_PATH but not NEXT_HOP.
    let mp = [0x80, 14, 9, 0, 1, 1, 4, 192, 0, 2, 1, 0];
    let e = update_err(&mp, &[], C4, err::MISSING_WELL_KNOWN);
    assert_eq!(e.notification.data, vec![1]);
    let mut ok = vec![0x40, 1, 1, 0, 0x40, 2, 0];
    ok.extend_from_slice(&mp);
    decode(&raw(kind::UPDATE, &update_body(&[], &ok, &[])), C4).unwrap();
}

#[test]
fn update_flag_errors() {
    for a in [
        &[0xc0u8, 1, 1, 0][..],          // ORIGIN marked optional
        &[0x00, 1, 1, 0],                // ORIGIN not transitive
        &[0x60, 2, 0],                   // AS_PATH partial
        &[0x80, 3, 4, 1, 2, 3, 4],       // NEXT_HOP optional
        &[0xc0, 4, 4, 0, 0, 0, 1],       // MED transitive
        &[0xa0, 4, 4, 0, 0, 0, 1],       // MED partial
        &[0x00, 5, 4, 0, 0, 0, 1],       // LOCAL_PREF not transitive
        &[0x80, 6, 0],                   // ATOMIC_AGGREGATE optional
        &[0x40, 7, 6, 0, 1, 1, 2, 3, 4], // AGGREGATOR not optional
        &[0x80, 8, 4, 0, 0, 0, 1],       // COMMUNITIES not transitive
        &[0xc0, 14, 5, 0, 2, 1, 0, 0],   // MP_REACH transitive
        &[0x40, 15, 3, 0, 2, 1],         // MP_UNREACH well-known
        &[0xa0, 99, 0],                  // unknown optional non-transitive, partial
    ] {
        let e = update_err(a, &[], C4, err::ATTRIBUTE_FLAGS);
        assert_eq!(e.notification.data, a.to_vec());
    }
    // Partial is fine on optional transitive attributes.
    decode(
        &raw(
            kind::UPDATE,
            &update_body(&[], &[0xe0, 8, 4, 0, 0, 0, 1], &[]),
        ),
        C4,
    )
    .unwrap();
}

#[test]
fn update_length_errors() {
    for (a, ctx) in [
        (&[0x40u8, 1, 0][..], C4),
        (&[0x40, 1, 2, 0, 0], C4),
        (&[0x40, 3, 3, 1, 2, 3], C4),
        (&[0x40, 3, 5, 1, 2, 3, 4, 5], C4),
        (&[0x80, 4, 3, 0, 0, 0], C4),
        (&[0x40, 5, 5, 0, 0, 0, 0, 1], C4),
        (&[0x40, 6, 1, 0], C4),
        (&[0xc0, 7, 6, 0, 1, 1, 2, 3, 4], C4),
        (&[0xc0, 7, 8, 0, 0, 0, 1, 1, 2, 3, 4], C2),
        (&[0xc0, 8, 0], C4),
        (&[0xc0, 8, 6, 0, 0, 0, 1, 0, 0], C4),
    ] {
        let e = update_err(a, &[], ctx, err::ATTRIBUTE_LENGTH);
        assert_eq!(e.notification.data, a.to_vec());
    }
    // The right lengths for each width.
    for (a, ctx) in [
        (&[0xc0u8, 7, 6, 0, 1, 1, 2, 3, 4][..], C2),
        (&[0xc0, 7, 8, 0, 0, 0, 1, 1, 2, 3, 4], C4),
    ] {
        decode(&raw(kind::UPDATE, &update_body(&[], a, &[])), ctx).unwrap();
    }
}

#[test]
fn update_value_errors() {
    let e = update_err(&[0x40, 1, 1, 3], &[], C4, err::INVALID_ORIGIN);
    assert_eq!(e.notification.data, vec![0x40, 1, 1, 3]);
    for nh in [
        [0u8, 0, 0, 0],
        [255, 255, 255, 255],
        [224, 0, 0, 5],
        [239, 1, 1, 1],
    ] {
        let mut a = vec![0x40, 3, 4];
        a.extend_from_slice(&nh);
        let e = update_err(&a, &[], C4, err::INVALID_NEXT_HOP);
        assert_eq!(e.notification.data, a);
    }
}

#[test]
fn update_as_path_errors() {
    for (v, ctx) in [
        (&[0u8, 1, 0, 1][..], C2), // segment type 0
        (&[5, 1, 0, 1], C2),       // segment type 5
        (&[2, 0], C2),             // empty segment
        (&[2, 2, 0, 1], C2),       // truncated
        (&[2], C2),                // truncated header
        (&[2, 1, 0, 0, 0], C4),    // 4-octet truncated
        (&[2, 1, 0, 1, 2, 1], C2), // second segment truncated
    ] {
        let mut a = vec![0x40, 2, v.len() as u8];
        a.extend_from_slice(v);
        update_err(&a, &[], ctx, err::MALFORMED_AS_PATH);
    }
    // The same bytes are fine with the other width where they fit.
    decode(
        &raw(
            kind::UPDATE,
            &update_body(&[], &[0x40, 2, 6, 2, 1, 0, 0, 0, 1], &[]),
        ),
        C4,
    )
    .unwrap();
}

#[test]
fn update_mp_errors() {
    for v in [
        &[0u8, 2, 1, 16][..],            // too short
        &[0, 2, 1, 16, 0],               // next hop overruns
        &[0, 2, 1, 5, 1, 2, 3, 4, 5, 0], // bad IPv6 next hop length
        &[
            0, 1, 1, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ], // IPv4 with 16
    ] {
        let mut a = vec![0x80, 14, v.len() as u8];
        a.extend_from_slice(v);
        let e = update_err(&a, &[], C4, err::OPTIONAL_ATTRIBUTE);
        assert_eq!(e.notification.data, a);
    }
    // Bad prefix inside MP_REACH.
    let mut v = vec![0, 2, 1, 16];
    v.extend_from_slice(&[0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    v.push(0);
    v.extend_from_slice(&[129, 0]);
    let mut a = vec![0x40, 1, 1, 0, 0x40, 2, 0, 0x80, 14, v.len() as u8];
    a.extend_from_slice(&v);
    update_err(&a, &[], C4, err::OPTIONAL_ATTRIBUTE);
    // MP_UNREACH too short, bad prefix.
    update_err(&[0x80, 15, 2, 0, 2], &[], C4, err::OPTIONAL_ATTRIBUTE);
    update_err(
        &[0x80, 15, 5, 0, 2, 1, 64, 1],
        &[],
        C4,
        err::OPTIONAL_ATTRIBUTE,
    );
    update_err(
        &[0x80, 15, 5, 0, 1, 1, 33, 1],
        &[],
        C4,
        err::OPTIONAL_ATTRIBUTE,
    );
    // Other families are kept opaque.
    let m = decode(
        &raw(
            kind::UPDATE,
            &update_body(&[], &[0x80, 15, 4, 0, 1, 128, 9], &[]),
        ),
        C4,
    )
    .unwrap();
    let Message::Update(u) = m else { panic!() };
    assert!(matches!(u.attributes[0], Attribute::Other { code: 15, .. }));
}

#[test]
fn names_cover_codes() {
    assert_eq!(names(1, 1).1, "Connection Not Synchronized");
    assert_eq!(names(5, 3).1, "Unexpected Message in Established");
    assert_eq!(names(6, 2).1, "Administrative Shutdown");
    assert_eq!(names(42, 0).0, "unknown error code");
    let n = Notification::new(6, 4, vec![0]);
    assert_eq!(n.describe(), "Cease / Administrative Reset (6/4) data 00");
}

#[test]
fn decode_body_is_safe_on_any_input() {
    for kind in 0..=7u8 {
        for len in [0usize, 1, 2, 3, 4, 9, 10, 11, 30, 5000] {
            let body = vec![0xaa; len];
            let _ = decode_body(kind, &body, C4);
            let _ = decode_body(kind, &body, C2);
        }
    }
    let e = decode_body(kind::NOTIFICATION, &[6], C4).unwrap_err();
    assert_eq!(
        (e.notification.code, e.notification.subcode),
        (err::HEADER, err::BAD_MESSAGE_LENGTH)
    );
}

/// Random and mutated buffers straight into `frame`/`decode`: no panics,
/// and whatever decodes re-encodes to something that decodes the same.
#[test]
fn decode_never_panics_on_random_input() {
    let mut x: u64 = 0x1234_5678;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let seeds: Vec<Vec<u8>> = vec![
        Message::Keepalive.encode(C4),
        raw(
            kind::UPDATE,
            &update_body(&[8, 10], GOOD_ATTRS_2, &[32, 10, 0, 0, 1]),
        ),
        raw(kind::OPEN, &open_body(4, &[2, 6, 1, 4, 0, 2, 0, 1])),
        Message::Notification(Notification::new(6, 2, vec![3, b'a', b'b', b'c'])).encode(C4),
    ];
    for i in 0..20_000 {
        let mut b = seeds[i % seeds.len()].clone();
        for _ in 0..(next() % 4 + 1) {
            let at = (next() as usize) % b.len().max(1);
            match next() % 3 {
                0 if !b.is_empty() => b[at] = next() as u8,
                1 => b.insert(at.min(b.len()), next() as u8),
                _ => b.truncate(at.max(1)),
            }
        }
        for ctx in [C2, C4] {
            let _ = frame(&b);
            if let Ok(m) = decode(&b, ctx) {
                let again = m.encode(ctx);
                assert_eq!(decode(&again, ctx).as_ref(), Ok(&m), "{b:02x?}");
            }
        }
    }
}
