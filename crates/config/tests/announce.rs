//! The announcement schema: `bgp:`, `l2Announce:` and the per-VIP
//! `advertise` and `communities`, their defaults, and one test per error an
//! operator can get (path, line, column and reason).

use std::time::Duration;

use rivora_config::{BgpPeer, Community, ConfigError, FieldError, L2Announce};

/// Parses an announcement section on its own: the file-level `vips: []`
/// (required since an empty file is refused) goes after it, so the line
/// numbers the tests check are those of the section.
fn parse(text: &str, source: &str) -> Result<rivora_config::Config, ConfigError> {
    if text.lines().any(|l| l.starts_with("vips:")) {
        return rivora_config::parse(text, source);
    }
    let sep = if text.is_empty() || text.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    rivora_config::parse(&format!("{text}{sep}vips: []\n"), source)
}

fn errors(text: &str) -> Vec<FieldError> {
    match parse(text, "t.yaml") {
        Ok(config) => panic!("expected errors, parsed {config:#?}"),
        Err(e) => {
            println!("{e}");
            e.errors
        }
    }
}

#[track_caller]
fn one(text: &str, path: &str, line: usize, column: usize, message: &str) {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "expected exactly one error: {errors:#?}");
    let e = &errors[0];
    assert_eq!(e.path, path, "path of {e:?}");
    assert_eq!(
        (e.line, e.column),
        (Some(line), Some(column)),
        "position of {e:?}"
    );
    assert!(
        e.message.contains(message),
        "message {:?} does not contain {message:?}",
        e.message
    );
}

/// A `bgp:` section with one peer whose mapping is `peer` (written on line 5).
fn bgp_with_peer(peer: &str) -> String {
    format!("bgp:\n  localAS: 65010\n  routerID: 10.0.0.2\n  peers:\n    - {peer}\n")
}

#[test]
fn a_full_bgp_section_and_its_defaults() {
    let cfg = parse(
        r#"
bgp:
  localAS: 4200000001
  routerID: 192.0.2.2
  peers:
    - address: 192.0.2.1
      as: 65000
    - address: 2001:db8::1
      as: 65001
      port: 1790
      password: "s3cret"
      holdTime: 0
      nextHop: { ipv4: 192.0.2.2, ipv6: "2001:db8::2" }
      localAddress: "2001:db8::2"
vips:
  - name: web
    address: 203.0.113.10
    port: 80
    communities: ["65010:100", "0:0", "65535:65535", "65010:100"]
  - name: quiet
    address: 203.0.113.11
    port: 80
    advertise: false
"#,
        "t.yaml",
    )
    .unwrap();
    let bgp = cfg.bgp.expect("bgp section");
    assert_eq!(bgp.local_as, 4_200_000_001);
    assert_eq!(
        bgp.router_id,
        "192.0.2.2".parse::<std::net::Ipv4Addr>().unwrap()
    );
    assert_eq!(
        bgp.peers[0],
        BgpPeer {
            address: "192.0.2.1".parse().unwrap(),
            remote_as: 65000,
            port: 179,
            password: None,
            hold_time: 90,
            next_hop_v4: None,
            next_hop_v6: None,
            local_address: None,
        },
        "defaults: port 179, hold time 90, no MD5"
    );
    let p = &bgp.peers[1];
    assert_eq!(
        (p.port, p.password.as_deref(), p.hold_time),
        (1790, Some("s3cret"), 0)
    );
    assert_eq!(p.next_hop_v4, Some("192.0.2.2".parse().unwrap()));
    assert_eq!(p.next_hop_v6, Some("2001:db8::2".parse().unwrap()));
    assert_eq!(p.local_address, Some("2001:db8::2".parse().unwrap()));
    assert!(
        !format!("{p:?}").contains("s3cret"),
        "Debug never shows the password"
    );

    let web = &cfg.vips[0];
    assert!(web.advertise, "advertise defaults to true");
    assert_eq!(
        web.communities,
        vec![
            Community(0),
            Community((65010 << 16) | 100),
            Community(0xffff_ffff)
        ],
        "sorted, duplicates dropped"
    );
    assert_eq!(web.communities[1].to_string(), "65010:100");
    assert!(!cfg.vips[1].advertise);
    assert!(cfg.vips[1].communities.is_empty());
    assert_eq!(cfg.l2_announce, None, "no l2Announce: no L2 answers");
}

#[test]
fn l2_announce_defaults_and_values() {
    let cfg = parse("l2Announce: {}\n", "t.yaml").unwrap();
    assert_eq!(
        cfg.l2_announce,
        Some(L2Announce {
            interface: None,
            announce_interval: Duration::from_secs(60)
        })
    );
    let cfg = parse(
        "l2Announce:\n  interface: eth0.100\n  announceInterval: 10s\n",
        "t.yaml",
    )
    .unwrap();
    assert_eq!(
        cfg.l2_announce,
        Some(L2Announce {
            interface: Some("eth0.100".into()),
            announce_interval: Duration::from_secs(10)
        })
    );
    // `l2Announce:` with nothing is "not configured", like every other
    // optional key written empty.
    assert_eq!(parse("l2Announce:\n", "t.yaml").unwrap().l2_announce, None);
}

#[test]
fn bgp_must_be_a_mapping_with_known_keys() {
    one(
        "bgp: [1]\n",
        "bgp",
        1,
        6,
        "expected a BGP section (a mapping with the keys localAS, routerID, peers), found a list",
    );
    one(
        "bgp:\n  localAS: 65010\n  routerID: 10.0.0.2\n  peers: [{ address: 10.0.0.1, as: 65000 }]\n  asn: 1\n",
        "bgp.asn",
        5,
        3,
        "unknown key `asn`; allowed keys: localAS, routerID, peers",
    );
}

#[test]
fn bgp_required_keys() {
    let e = errors("bgp:\n  peers: [{ address: 10.0.0.1, as: 65000 }]\n");
    let paths: Vec<_> = e.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["bgp.localAS", "bgp.routerID"], "{e:#?}");
    assert!(
        e.iter()
            .all(|e| e.message.starts_with("missing required key"))
    );
    one(
        "bgp:\n  localAS: 65010\n  routerID: 10.0.0.2\n",
        "bgp.peers",
        2,
        3,
        "missing required key `peers`",
    );
}

#[test]
fn local_as_range() {
    for (value, message) in [
        (
            "0",
            "0 is not a valid AS number (1-4294967295; 0 is reserved)",
        ),
        ("4294967296", "4294967296 is not a valid AS number"),
        ("-1", "-1 is not a valid AS number"),
        (
            "AS65000",
            "expected an AS number (an integer, 1-4294967295), found the string \"AS65000\"",
        ),
    ] {
        one(
            &format!(
                "bgp:\n  localAS: {value}\n  routerID: 10.0.0.2\n  peers: [{{ address: 10.0.0.1, as: 65000 }}]\n"
            ),
            "bgp.localAS",
            2,
            12,
            message,
        );
    }
}

#[test]
fn router_id_must_be_a_nonzero_ipv4_address() {
    for (value, message) in [
        ("0.0.0.0", "0.0.0.0 is not a valid BGP router ID"),
        (
            "2001:db8::1",
            "\"2001:db8::1\" is not a router ID: write an IPv4 address",
        ),
        ("node1", "\"node1\" is not a router ID"),
    ] {
        one(
            &format!(
                "bgp:\n  localAS: 65010\n  routerID: {value}\n  peers: [{{ address: 10.0.0.1, as: 65000 }}]\n"
            ),
            "bgp.routerID",
            3,
            13,
            message,
        );
    }
}

#[test]
fn peers_must_be_a_nonempty_list_without_duplicates() {
    one(
        "bgp:\n  localAS: 65010\n  routerID: 10.0.0.2\n  peers: []\n",
        "bgp.peers",
        4,
        10,
        "no peers: list at least one BGP peer",
    );
    one(
        "bgp:\n  localAS: 65010\n  routerID: 10.0.0.2\n  peers: 10.0.0.1\n",
        "bgp.peers",
        4,
        10,
        "expected a list of BGP peers, found the string \"10.0.0.1\"",
    );
    one(
        "bgp:\n  localAS: 65010\n  routerID: 10.0.0.2\n  peers:\n    - { address: 10.0.0.1, as: 65000 }\n    - { address: 10.0.0.1, as: 65001, port: 179 }\n",
        "bgp.peers[1]",
        6,
        7,
        "peer 10.0.0.1:179 is listed twice (also peers[0] at line 5)",
    );
    // Same address, another port: two sessions, allowed.
    assert!(
        parse(
            "bgp:\n  localAS: 65010\n  routerID: 10.0.0.2\n  peers:\n    - { address: 10.0.0.1, as: 65000 }\n    - { address: 10.0.0.1, as: 65000, port: 1179 }\n",
            "t.yaml"
        )
        .is_ok()
    );
}

#[test]
fn peer_required_keys_and_unknown_keys() {
    let e = errors(&bgp_with_peer("{ port: 179 }"));
    let paths: Vec<_> = e.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["bgp.peers[0].address", "bgp.peers[0].as"], "{e:#?}");
    one(
        &bgp_with_peer("{ address: 10.0.0.1, as: 65000, remoteAS: 1 }"),
        "bgp.peers[0].remoteAS",
        5,
        39,
        "unknown key `remoteAS`; allowed keys: address, as, port, password, holdTime, nextHop, localAddress",
    );
}

#[test]
fn peer_address_must_be_unicast() {
    for (value, message) in [
        (
            "0.0.0.0",
            "0.0.0.0 cannot be a BGP peer address: it is the unspecified address",
        ),
        ("224.0.0.5", "it is a multicast address"),
        ("255.255.255.255", "it is the broadcast address"),
        ("\"fe80::1\"", "it is an IPv6 link-local address"),
        ("\"::ffff:10.0.0.1\"", "it is an IPv4-mapped IPv6 address"),
        ("router1", "\"router1\" is not a valid IPv4 or IPv6 address"),
    ] {
        one(
            &bgp_with_peer(&format!("{{ as: 65000, address: {value} }}")),
            "bgp.peers[0].address",
            5,
            29,
            message,
        );
    }
}

#[test]
fn peer_as_and_port() {
    one(
        &bgp_with_peer("{ address: 10.0.0.1, as: 0 }"),
        "bgp.peers[0].as",
        5,
        32,
        "0 is not a valid AS number",
    );
    one(
        &bgp_with_peer("{ address: 10.0.0.1, as: 65000, port: 0 }"),
        "bgp.peers[0].port",
        5,
        45,
        "0 is not a valid port (1-65535)",
    );
}

#[test]
fn peer_password_rules_never_echo_the_value() {
    one(
        &bgp_with_peer("{ address: 10.0.0.1, as: 65000, password: \"\" }"),
        "bgp.peers[0].password",
        5,
        49,
        "the password is empty",
    );
    let long = "x".repeat(81);
    one(
        &bgp_with_peer(&format!(
            "{{ address: 10.0.0.1, as: 65000, password: \"{long}\" }}"
        )),
        "bgp.peers[0].password",
        5,
        49,
        "the password is 81 bytes long; TCP-MD5 allows at most 80",
    );
    let e = errors(&bgp_with_peer(
        "{ address: 10.0.0.1, as: 65000, password: 12345678 }",
    ));
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].path, "bgp.peers[0].password");
    assert!(
        e[0].message
            .contains("expected the password as a string, found a number; quote it")
    );
    assert!(!e[0].message.contains("12345678"), "{e:?}");
}

#[test]
fn hold_time_is_zero_or_at_least_three() {
    for v in ["1", "2", "65536", "-3"] {
        one(
            &bgp_with_peer(&format!(
                "{{ address: 10.0.0.1, as: 65000, holdTime: {v} }}"
            )),
            "bgp.peers[0].holdTime",
            5,
            49,
            &format!("{v} is not a valid hold time: 0 (no keepalives) or 3-65535 seconds"),
        );
    }
    one(
        &bgp_with_peer("{ address: 10.0.0.1, as: 65000, holdTime: 90s }"),
        "bgp.peers[0].holdTime",
        5,
        49,
        "expected a hold time in seconds (0 or 3-65535), found the string \"90s\"",
    );
    for v in [0u16, 3, 65535] {
        let cfg = parse(
            &bgp_with_peer(&format!(
                "{{ address: 10.0.0.1, as: 65000, holdTime: {v} }}"
            )),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.bgp.unwrap().peers[0].hold_time, v);
    }
}

#[test]
fn next_hops_must_have_their_family() {
    one(
        &bgp_with_peer("{ address: 10.0.0.1, as: 65000, nextHop: { ipv4: \"2001:db8::2\" } }"),
        "bgp.peers[0].nextHop.ipv4",
        5,
        56,
        "2001:db8::2 is not an IPv4 address",
    );
    one(
        &bgp_with_peer("{ address: 10.0.0.1, as: 65000, nextHop: { ipv6: 10.0.0.2 } }"),
        "bgp.peers[0].nextHop.ipv6",
        5,
        56,
        "10.0.0.2 is not an IPv6 address",
    );
    one(
        &bgp_with_peer("{ address: 10.0.0.1, as: 65000, nextHop: 10.0.0.2 }"),
        "bgp.peers[0].nextHop",
        5,
        48,
        "expected next hops (a mapping with the keys ipv4, ipv6)",
    );
    one(
        &bgp_with_peer("{ address: 10.0.0.1, as: 65000, nextHop: { ipv4: 224.0.0.1 } }"),
        "bgp.peers[0].nextHop.ipv4",
        5,
        56,
        "224.0.0.1 cannot be a next hop address: it is a multicast address",
    );
}

#[test]
fn local_address_must_match_the_peer_family() {
    one(
        &bgp_with_peer("{ address: 10.0.0.1, as: 65000, localAddress: \"2001:db8::2\" }"),
        "bgp.peers[0].localAddress",
        5,
        53,
        "local address 2001:db8::2 is IPv6 but the peer address 10.0.0.1 is IPv4",
    );
}

#[test]
fn l2_announce_errors() {
    one(
        "l2Announce: eth0\n",
        "l2Announce",
        1,
        13,
        "expected an L2 announcement section (a mapping with the keys interface, announceInterval",
    );
    one(
        "l2Announce: { iface: eth0 }\n",
        "l2Announce.iface",
        1,
        15,
        "unknown key `iface`; allowed keys: interface, announceInterval",
    );
    for name in ["averyveryverylongname", "a/b", "\"eth 0\""] {
        one(
            &format!("l2Announce: {{ interface: {name} }}\n"),
            "l2Announce.interface",
            1,
            26,
            "is not a valid interface name (1-15 characters, no spaces, `/` or `:`)",
        );
    }
    one(
        "l2Announce: { announceInterval: 500ms }\n",
        "l2Announce.announceInterval",
        1,
        33,
        "500ms is out of range (1s to 3600s)",
    );
    one(
        "l2Announce: { announceInterval: 60 }\n",
        "l2Announce.announceInterval",
        1,
        33,
        "\"60\" is not a duration",
    );
}

#[test]
fn advertise_must_be_a_boolean() {
    one(
        "vips:\n  - name: web\n    address: 10.0.0.1\n    port: 80\n    advertise: yes\n",
        "vips[0].advertise",
        5,
        16,
        "expected true or false, found the string \"yes\"",
    );
}

#[test]
fn communities_are_as_colon_value() {
    let vip = |c: &str| {
        format!("vips:\n  - name: web\n    address: 10.0.0.1\n    port: 80\n    communities: {c}\n")
    };
    one(
        &vip("\"65000:1\""),
        "vips[0].communities",
        5,
        18,
        "expected a list of communities such as [\"65000:100\"], found the string \"65000:1\"",
    );
    for (bad, col) in [
        ("\"65536:1\"", 19),
        ("\"1:65536\"", 19),
        ("\"65000\"", 19),
        ("\"a:b\"", 19),
        ("\"1:2:3\"", 19),
        ("\"-1:2\"", 19),
        ("\":5\"", 19),
    ] {
        one(
            &vip(&format!("[{bad}]")),
            "vips[0].communities[0]",
            5,
            col,
            "is not a community: write \"AS:VALUE\" with both parts 0-65535",
        );
    }
    // Every bad entry is reported, each at its place.
    let e = errors(&vip("[\"1:1\", \"x\", \"2:2\", \"70000:1\"]"));
    let paths: Vec<_> = e.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        ["vips[0].communities[1]", "vips[0].communities[3]"],
        "{e:#?}"
    );
}

#[test]
fn communities_with_advertise_false_contradict() {
    one(
        "vips:\n  - name: web\n    address: 10.0.0.1\n    port: 80\n    advertise: false\n    communities: [\"65000:1\"]\n",
        "vips[0].communities",
        6,
        18,
        "this VIP has `advertise: false`: remove one of the two",
    );
}

#[test]
fn a_bad_bgp_section_rejects_the_whole_file() {
    // Nothing half-applied: a file whose VIPs are fine but whose BGP section
    // is not is rejected as a whole, with every problem listed.
    let e = errors(
        "bgp:\n  localAS: 0\n  routerID: 0.0.0.0\n  peers:\n    - { address: 10.0.0.1, as: 65000, holdTime: 1 }\nvips:\n  - name: web\n    address: 10.0.0.1\n    port: 80\n    communities: [\"x\"]\n",
    );
    let paths: Vec<_> = e.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "bgp.localAS",
            "bgp.routerID",
            "bgp.peers[0].holdTime",
            "vips[0].communities[0]"
        ],
        "{e:#?}"
    );
}
