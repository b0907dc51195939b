//! Behaviour of `rivora_config::parse`/`load`: one test (at least) per rule,
//! checking the path, line, column and wording an operator will see.

use std::net::IpAddr;
use std::path::Path;

use rivora_config::{
    BackendConfig, Config, ConfigError, FieldError, MAX_BACKENDS, MAX_VIPS, Mode, NatForwarding,
    PortRange, Protocol, RateLimit, SessionAffinity, Settings, VipConfig, load, parse,
};

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn errors(text: &str) -> Vec<FieldError> {
    match parse(text, "t.yaml") {
        Ok(config) => panic!("expected errors, parsed {config:#?}"),
        Err(e) => {
            assert!(!e.errors.is_empty());
            // Printed so `cargo test -- --nocapture` shows real messages.
            println!("{e}");
            e.errors
        }
    }
}

/// The single error the text produces.
fn one(text: &str) -> FieldError {
    let mut errors = errors(text);
    assert_eq!(errors.len(), 1, "expected exactly one error: {errors:#?}");
    errors.remove(0)
}

#[track_caller]
fn check(e: &FieldError, path: &str, line: usize, column: usize, message: &str) {
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

/// A valid one-VIP file with `extra` inserted as more VIP keys (indented 4).
fn vip_with(extra: &str) -> String {
    format!("vips:\n  - name: web\n    address: 10.0.0.1\n    port: 80\n{extra}")
}

fn ok(text: &str) -> Config {
    parse(text, "t.yaml").unwrap_or_else(|e| panic!("unexpected errors:\n{e}"))
}

// ---------------------------------------------------------------- valid input

#[test]
fn example_file_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/example.yaml");
    let config = load(&path).unwrap_or_else(|e| panic!("{e}"));
    let backend = |a: &str, port: u16, weight: u32| BackendConfig {
        address: ip(a),
        port,
        weight,
        mac: None,
        health_check: None,
    };
    let expected = Config {
        vips: vec![
            VipConfig {
                name: "web".into(),
                address: ip("10.200.100.1"),
                ports: PortRange::single(80),
                protocol: Protocol::Tcp,
                mode: Mode::Nat,
                backends: vec![
                    BackendConfig {
                        mac: Some([2, 0, 0, 0, 0, 1]),
                        ..backend("10.200.1.11", 8080, 1)
                    },
                    backend("10.200.1.12", 8080, 1),
                ],
                health_check: None,
                session_affinity: SessionAffinity::None,
                nat_forwarding: NatForwarding::Kernel,
                advertise: true,
                communities: vec![],
                syn_rate_limit: None,
            },
            VipConfig {
                name: "dns".into(),
                address: ip("10.200.100.2"),
                ports: PortRange::single(53),
                protocol: Protocol::Udp,
                mode: Mode::Nat,
                backends: vec![backend("10.200.1.21", 53, 1), backend("10.200.1.22", 53, 1)],
                health_check: None,
                session_affinity: SessionAffinity::None,
                nat_forwarding: NatForwarding::Kernel,
                advertise: true,
                communities: vec![],
                syn_rate_limit: None,
            },
            VipConfig {
                name: "web6".into(),
                address: ip("2001:db8:100::1"),
                ports: PortRange::single(443),
                protocol: Protocol::Tcp,
                mode: Mode::Nat,
                backends: vec![
                    backend("2001:db8:1::11", 443, 1),
                    backend("2001:db8:1::12", 443, 1),
                    backend("2001:db8:1::13", 443, 2),
                ],
                health_check: None,
                session_affinity: SessionAffinity::None,
                nat_forwarding: NatForwarding::Kernel,
                advertise: true,
                communities: vec![],
                syn_rate_limit: None,
            },
            VipConfig {
                name: "ports".into(),
                address: ip("10.200.100.3"),
                ports: PortRange {
                    first: 8000,
                    last: 8099,
                },
                protocol: Protocol::Tcp,
                mode: Mode::Nat,
                backends: vec![backend("10.200.1.31", 0, 1), backend("10.200.1.32", 0, 1)],
                health_check: None,
                session_affinity: SessionAffinity::ClientIp,
                nat_forwarding: NatForwarding::Kernel,
                advertise: true,
                communities: vec![],
                syn_rate_limit: Some(RateLimit {
                    rate: 50,
                    burst: 50,
                }),
            },
            VipConfig {
                name: "udp-all".into(),
                address: ip("10.200.100.4"),
                ports: PortRange::ANY,
                protocol: Protocol::Udp,
                mode: Mode::Nat,
                backends: vec![backend("10.200.1.41", 5000, 1)],
                health_check: None,
                session_affinity: SessionAffinity::None,
                nat_forwarding: NatForwarding::Kernel,
                advertise: true,
                communities: vec![],
                syn_rate_limit: None,
            },
        ],
        settings: Settings {
            syn_rate_limit: Some(RateLimit {
                rate: 200,
                burst: 400,
            }),
            tunnel_source_v4: None,
            tunnel_source_v6: None,
        },
        bgp: None,
        l2_announce: None,
        classifier: Default::default(),
    };
    assert_eq!(config, expected);
}

#[test]
fn only_an_explicit_empty_list_means_no_vips() {
    for text in ["vips: []\n", "# none yet\nvips: [] # all disabled\n"] {
        assert_eq!(ok(text), Config::default(), "{text:?}");
    }
}

/// A file that says nothing is what a non-atomic writer leaves for a moment
/// (shell `>`, an editor writing in place): it is refused, never read as
/// "remove every VIP".
#[test]
fn files_that_say_nothing_are_refused() {
    for (text, line, column, message) in [
        ("", 1, 1, "the file is empty (or holds only comments)"),
        ("\n\n", 1, 1, "the file is empty"),
        ("# nothing configured\n", 1, 1, "the file is empty"),
        ("---\n", 2, 1, "the document is empty (null)"),
        ("~\n", 1, 1, "the document is empty (null)"),
        ("{}\n", 1, 1, "missing required key `vips`"),
        ("vips:\n", 1, 5, "`vips` is empty (null)"),
        (
            "vips: # all disabled\n#  - name: web\n",
            1,
            5,
            "`vips` is empty (null)",
        ),
        (
            "settings:\n  synRateLimit: { rate: 10 }\n",
            1,
            1,
            "missing required key `vips`",
        ),
    ] {
        let e = one(text);
        check(&e, "vips", line, column, message);
        assert!(
            e.message.contains("`vips: []`"),
            "the way out is named: {e:?}"
        );
    }
}

#[test]
fn defaults_are_applied() {
    let config = ok(&vip_with("    backends:\n      - address: 10.0.1.1\n"));
    let vip = &config.vips[0];
    assert_eq!(vip.protocol, Protocol::Tcp);
    assert_eq!(vip.mode, Mode::Nat);
    assert_eq!(
        vip.backends,
        vec![BackendConfig {
            address: ip("10.0.1.1"),
            port: 80,
            weight: 1,
            mac: None,
            health_check: None,
        }]
    );
    // Without a `backends` key the VIP has none (and drops its traffic).
    assert!(ok(&vip_with("")).vips[0].backends.is_empty());
    assert!(
        ok(&vip_with("    backends: []\n")).vips[0]
            .backends
            .is_empty()
    );
}

#[test]
fn aliases_are_followed() {
    let text = "\
vips:
  - name: a
    address: 10.0.0.1
    port: 80
    backends: &pool
      - address: 10.0.1.1
      - address: 10.0.1.2
  - name: b
    address: 10.0.0.1
    port: 81
    backends: *pool
";
    let config = ok(text);
    assert_eq!(config.vips[1].backends.len(), 2);
    assert_eq!(config.vips[1].backends[0].port, 81);
}

#[test]
fn names_at_the_limits_are_valid() {
    let name = format!("a{}", "b".repeat(62));
    let config = ok(&format!(
        "vips:\n  - name: {name}\n    address: 10.0.0.1\n    port: 80\n  - name: 0a-b_c.d\n    address: 10.0.0.1\n    port: 81\n"
    ));
    assert_eq!(config.vips[0].name.len(), 63);
    assert_eq!(config.vips[1].name, "0a-b_c.d");
}

#[test]
fn same_address_and_port_with_another_protocol_is_another_vip() {
    let text = "\
vips:
  - {name: dns-tcp, address: 10.0.0.1, port: 53, protocol: tcp}
  - {name: dns-udp, address: 10.0.0.1, port: 53, protocol: udp}
";
    assert_eq!(ok(text).vips.len(), 2);
}

#[test]
fn mac_forms() {
    let parsed = |mac: &str| {
        ok(&vip_with(&format!(
            "    backends:\n      - address: 10.0.1.1\n        mac: {mac}\n"
        )))
        .vips[0]
            .backends[0]
            .mac
    };
    // Unquoted is a string under YAML 1.2 (not a sexagesimal number).
    assert_eq!(parsed("02:00:00:00:00:01"), Some([2, 0, 0, 0, 0, 1]));
    assert_eq!(
        parsed("\"0a:BC:de:F0:12:34\""),
        Some([0x0a, 0xbc, 0xde, 0xf0, 0x12, 0x34])
    );
    assert_eq!(parsed("~"), None);
}

#[test]
fn enum_names_and_numbers() {
    assert_eq!(Protocol::Tcp.as_str(), "tcp");
    assert_eq!(Protocol::Udp.as_str(), "udp");
    assert_eq!(Protocol::Tcp.ip_proto(), 6);
    assert_eq!(Protocol::Udp.ip_proto(), 17);
    let modes: Vec<_> = Mode::ALL.iter().map(|m| m.as_str()).collect();
    assert_eq!(modes, ["nat", "dsr", "dsr-ipip", "dsr-gre"]);
    assert_eq!(Mode::DsrIpip.to_string(), "dsr-ipip");
}

// ------------------------------------------------------------- error format

#[test]
fn display_is_file_line_column_path_message() {
    let text = "\
vips:
  - name: a
    address: 10.0.0.1
    port: 80
    backends: []
  - name: b
    address: 10.0.0.2
    port: 80
    backends:
      - address: 10.0.1.1
        weight: 1
        port: 70000
";
    let err = parse(text, "rivora.yaml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "rivora.yaml:12:15: vips[1].backends[0].port: 70000 is not a valid port (1-65535)"
    );
}

#[test]
fn all_errors_are_reported_in_file_order() {
    let text = "\
vips:
  - name: Web
    address: 10.0.0.1/24
    port: 0
    protocol: sctp
    colour: blue
    backends:
      - address: 2001:db8::1
        weight: 0
        mac: zz
  - name: ok
    address: 10.0.0.9
    port: 80
    mode: direct
";
    let err = parse(text, "rivora.yaml").unwrap_err();
    println!("{err}");
    let lines: Vec<String> = err.to_string().lines().map(String::from).collect();
    assert_eq!(
        lines,
        [
            "rivora.yaml:2:11: vips[0].name: \"Web\" is not a valid VIP name: use 1-63 characters from a-z, 0-9, '-', '_' and '.', starting with a letter or digit",
            "rivora.yaml:3:14: vips[0].address: 10.0.0.1/24 has a prefix length: write a single address (10.0.0.1 without /24)",
            "rivora.yaml:4:11: vips[0].port: 0 is not a valid port (1-65535)",
            "rivora.yaml:5:15: vips[0].protocol: \"sctp\" is not a valid protocol; valid values: tcp, udp",
            "rivora.yaml:6:5: vips[0].colour: unknown key `colour`; allowed keys: name, address, port, protocol, mode, sessionAffinity, natForwarding, synRateLimit, backends, healthCheck, advertise, communities",
            "rivora.yaml:9:17: vips[0].backends[0].weight: 0 is not a valid weight (1-65535)",
            "rivora.yaml:10:14: vips[0].backends[0].mac: \"zz\" is not a valid MAC address: expected six hex octets separated by colons, like 02:00:00:00:00:01",
            "rivora.yaml:14:11: vips[1].mode: \"direct\" is not a valid mode; valid values: nat, dsr, dsr-ipip, dsr-gre",
        ]
    );
}

#[test]
fn family_is_checked_against_a_valid_vip_address_only() {
    // The VIP address is bad, so the backend's family is not compared to it:
    // one error, not a cascade.
    let e = one(
        "vips:\n  - name: web\n    address: 10.0.0.300\n    port: 80\n    backends:\n      - address: 2001:db8::1\n",
    );
    check(
        &e,
        "vips[0].address",
        3,
        14,
        "\"10.0.0.300\" is not a valid IPv4 or IPv6 address",
    );
}

// ------------------------------------------------------------ YAML / shape

#[test]
fn syntax_error_has_line_and_column() {
    let e = one("vips:\n  - name: web\n    address: [10.0.0.1\n    port: 80\n");
    assert_eq!(e.path, "");
    assert!(e.line.is_some() && e.column.is_some(), "{e:?}");
    assert!(e.message.starts_with("YAML syntax error: "), "{e:?}");

    let e = one("vips:\n  - name: web\n   address: 10.0.0.1\n");
    assert_eq!((e.line, e.column), (Some(3), Some(4)), "{e:?}");
    assert!(e.message.starts_with("YAML syntax error: "), "{e:?}");

    let e = one("vips:\n\t- name: web\n");
    assert_eq!(e.line, Some(2), "{e:?}");
}

#[test]
fn multiple_documents_are_rejected() {
    let e = one("vips: []\n---\nvips: []\n");
    assert_eq!(e.line, Some(2), "{e:?}");
    assert!(e.message.contains("more than one YAML document"), "{e:?}");
}

#[test]
fn top_level_must_be_a_mapping() {
    let e = one("- name: web\n");
    check(
        &e,
        "",
        1,
        1,
        "expected the top level to be a mapping with the keys `vips`, `settings`, `bgp` and `l2Announce`, found a list",
    );
    let e = one("hello\n");
    check(&e, "", 1, 1, "found the string \"hello\"");
}

#[test]
fn unknown_top_level_key() {
    let e = one("vips: []\nvip: []\n");
    check(
        &e,
        "vip",
        2,
        1,
        "unknown key `vip`; allowed keys: vips, settings",
    );
}

#[test]
fn unknown_vip_key() {
    let e = one(&vip_with("    weight: 3\n"));
    check(
        &e,
        "vips[0].weight",
        5,
        5,
        "unknown key `weight`; allowed keys: name, address, port, protocol, mode, sessionAffinity, natForwarding, synRateLimit, backends, healthCheck, advertise, communities",
    );
}

#[test]
fn unknown_backend_key() {
    let e = one(&vip_with(
        "    backends:\n      - address: 10.0.1.1\n        prot: 81\n",
    ));
    check(
        &e,
        "vips[0].backends[0].prot",
        7,
        9,
        "unknown key `prot`; allowed keys: address, port, weight, mac, healthCheck",
    );
}

#[test]
fn merge_keys_are_explained() {
    let e = one(&vip_with("    <<: {mode: nat}\n"));
    check(
        &e,
        "vips[0].<<",
        5,
        5,
        "YAML merge keys (`<<`) are not supported",
    );
}

#[test]
fn duplicate_keys() {
    let e = one(&vip_with("    port: 81\n"));
    check(
        &e,
        "vips[0].port",
        5,
        5,
        "duplicate key `port` (first given at line 4)",
    );
}

#[test]
fn non_string_keys() {
    let e = one(&vip_with("    [a, b]: 1\n"));
    check(&e, "vips[0]", 5, 5, "expected a key name, found a list");
}

#[test]
fn unsupported_tags() {
    let e = one(&vip_with("    protocol: !proto tcp\n"));
    check(
        &e,
        "vips[0].protocol",
        5,
        15,
        "unsupported YAML tag `!proto`",
    );
}

#[test]
fn missing_required_fields() {
    let errors = errors("vips:\n  - protocol: udp\n");
    assert_eq!(errors.len(), 3, "{errors:#?}");
    check(
        &errors[0],
        "vips[0].name",
        2,
        5,
        "missing required key `name`",
    );
    check(
        &errors[1],
        "vips[0].address",
        2,
        5,
        "missing required key `address`",
    );
    check(
        &errors[2],
        "vips[0].port",
        2,
        5,
        "missing required key `port`",
    );

    let e = one(&vip_with("    backends:\n      - port: 8080\n"));
    check(
        &e,
        "vips[0].backends[0].address",
        6,
        9,
        "missing required key `address`",
    );
}

#[test]
fn wrong_types() {
    let e = one("vips:\n  web: {}\n");
    check(&e, "vips", 2, 3, "expected a list of VIPs, found a mapping");

    let e = one("vips:\n  - web\n");
    check(
        &e,
        "vips[0]",
        2,
        5,
        "expected a VIP (a mapping with the keys name, address, port, protocol, mode, backends), found the string \"web\"",
    );

    let e = one("vips:\n  - name: [web]\n    address: 10.0.0.1\n    port: 80\n");
    check(
        &e,
        "vips[0].name",
        2,
        11,
        "expected a VIP name, found a list",
    );

    let e = one("vips:\n  - name:\n    address: 10.0.0.1\n    port: 80\n");
    check(
        &e,
        "vips[0].name",
        2,
        9,
        "expected a VIP name, found an empty value (null)",
    );

    let e = one("vips:\n  - name: web\n    address: 10.0.0.1\n    port: \"80\"\n");
    check(
        &e,
        "vips[0].port",
        4,
        11,
        "expected an integer port (1-65535), found the string \"80\"",
    );

    let e = one("vips:\n  - name: web\n    address: 10.0.0.1\n    port: 80.5\n");
    check(
        &e,
        "vips[0].port",
        4,
        11,
        "expected a port (1-65535), a port range such as 8000-8099, or `any`, found the number `80.5`",
    );

    let e = one(&vip_with("    backends: 10.0.1.1\n"));
    check(
        &e,
        "vips[0].backends",
        5,
        15,
        "expected a list of backends, found the string \"10.0.1.1\"",
    );

    let e = one(&vip_with("    backends:\n      - 10.0.1.1\n"));
    check(
        &e,
        "vips[0].backends[0]",
        6,
        9,
        "expected a backend (a mapping with the keys address, port, weight, mac), found the string \"10.0.1.1\"",
    );

    let e = one(&vip_with(
        "    backends:\n      - address: 10.0.1.1\n        weight: true\n",
    ));
    check(
        &e,
        "vips[0].backends[0].weight",
        7,
        17,
        "expected an integer weight (1-65535), found the boolean `true`",
    );

    let e = one(&vip_with("    protocol: {tcp: true}\n"));
    check(
        &e,
        "vips[0].protocol",
        5,
        15,
        "expected a protocol, found a mapping",
    );
}

// ---------------------------------------------------------------- values

#[test]
fn invalid_vip_names() {
    for (name, column) in [
        ("Web", 11),
        ("-web", 11),
        ("web server", 11),
        ("\"\"", 11),
        ("wéb", 11),
    ] {
        let e = one(&format!(
            "vips:\n  - name: {name}\n    address: 10.0.0.1\n    port: 80\n"
        ));
        check(&e, "vips[0].name", 2, column, "is not a valid VIP name");
    }
    let long = "a".repeat(64);
    let e = one(&format!(
        "vips:\n  - name: {long}\n    address: 10.0.0.1\n    port: 80\n"
    ));
    check(&e, "vips[0].name", 2, 11, "use 1-63 characters");
}

#[test]
fn invalid_ip_addresses() {
    for bad in [
        "10.0.0.256",
        "10.0.0",
        "web.example.com",
        "2001:db8::g",
        "fe80::1%eth0",
        "\"\"",
    ] {
        let e = one(&format!(
            "vips:\n  - name: web\n    address: {bad}\n    port: 80\n"
        ));
        check(
            &e,
            "vips[0].address",
            3,
            14,
            "is not a valid IPv4 or IPv6 address",
        );
    }
    let e = one(&vip_with("    backends:\n      - address: 10.0.1\n"));
    check(
        &e,
        "vips[0].backends[0].address",
        6,
        18,
        "\"10.0.1\" is not a valid IPv4 or IPv6 address",
    );
}

#[test]
fn addresses_with_a_prefix_length() {
    let e = one("vips:\n  - name: web\n    address: 10.0.0.1/32\n    port: 80\n");
    check(
        &e,
        "vips[0].address",
        3,
        14,
        "10.0.0.1/32 has a prefix length: write a single address (10.0.0.1 without /32)",
    );
    let e = one(&vip_with("    backends:\n      - address: 10.0.1.0/24\n"));
    check(
        &e,
        "vips[0].backends[0].address",
        6,
        18,
        "10.0.1.0/24 has a prefix length",
    );
    let e = one("vips:\n  - name: web\n    address: 2001:db8::1/128\n    port: 80\n");
    check(
        &e,
        "vips[0].address",
        3,
        14,
        "2001:db8::1/128 has a prefix length",
    );
}

#[test]
fn unusable_vip_addresses() {
    for (address, reason) in [
        ("0.0.0.0", "the unspecified address"),
        ("\"::\"", "the unspecified address"),
        ("127.0.0.1", "a loopback address"),
        ("127.1.2.3", "a loopback address"),
        ("\"::1\"", "a loopback address"),
        ("224.0.0.1", "a multicast address"),
        ("239.1.1.1", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("255.255.255.255", "the broadcast address"),
        (
            "\"::ffff:10.0.0.1\"",
            "an IPv4-mapped IPv6 address (write 10.0.0.1 instead)",
        ),
    ] {
        let e = one(&format!(
            "vips:\n  - name: web\n    address: {address}\n    port: 80\n"
        ));
        check(
            &e,
            "vips[0].address",
            3,
            14,
            &format!("cannot be a VIP address: it is {reason}"),
        );
    }
}

#[test]
fn unusable_backend_addresses() {
    let e = one(&vip_with("    backends:\n      - address: 0.0.0.0\n"));
    check(
        &e,
        "vips[0].backends[0].address",
        6,
        18,
        "0.0.0.0 cannot be a backend address: it is the unspecified address",
    );
    let e = one(&vip_with("    backends:\n      - address: 224.0.0.5\n"));
    check(
        &e,
        "vips[0].backends[0].address",
        6,
        18,
        "224.0.0.5 cannot be a backend address: it is a multicast address",
    );
}

#[test]
fn invalid_ports() {
    for (port, shown) in [
        ("0", "0"),
        ("65536", "65536"),
        ("70000", "70000"),
        ("-1", "-1"),
        (
            "99999999999999999999999999999999999999999",
            "99999999999999999999999999999999999999999",
        ),
    ] {
        let e = one(&format!(
            "vips:\n  - name: web\n    address: 10.0.0.1\n    port: {port}\n"
        ));
        check(
            &e,
            "vips[0].port",
            4,
            11,
            &format!("{shown} is not a valid port (1-65535)"),
        );
    }
    let e = one(&vip_with(
        "    backends:\n      - address: 10.0.1.1\n        port: 0\n",
    ));
    check(
        &e,
        "vips[0].backends[0].port",
        7,
        15,
        "0 is not a valid port (1-65535)",
    );
    // Port 65535 and hex/octal forms are fine.
    let config = ok(
        "vips:\n  - {name: a, address: 10.0.0.1, port: 65535}\n  - {name: b, address: 10.0.0.1, port: 0x50}\n",
    );
    assert_eq!(
        (config.vips[0].ports, config.vips[1].ports),
        (PortRange::single(65535), PortRange::single(80))
    );
}

#[test]
fn invalid_protocol_lists_valid_values() {
    let e = one(&vip_with("    protocol: TCP\n"));
    check(
        &e,
        "vips[0].protocol",
        5,
        15,
        "\"TCP\" is not a valid protocol; valid values: tcp, udp",
    );
}

#[test]
fn invalid_mode_lists_valid_values() {
    let e = one(&vip_with("    mode: tunnel\n"));
    check(
        &e,
        "vips[0].mode",
        5,
        11,
        "\"tunnel\" is not a valid mode; valid values: nat, dsr, dsr-ipip, dsr-gre",
    );
}

/// TEMPORARY: remove with `reject_unsupported_mode` when DSR lands.
#[test]
fn dsr_modes_are_validated() {
    // L2 DSR needs every backend's MAC; DSR backends keep the VIP's port.
    let text = "vips:\n  - name: web\n    address: 10.0.0.1\n    port: 80\n    mode: dsr\n    backends:\n      - { address: 10.0.1.1, port: 8080 }\n";
    let e = errors(text);
    assert!(
        e.iter()
            .any(|f| f.path == "vips[0].backends[0].mac" && f.message.contains("mode dsr")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|f| f.path == "vips[0].backends[0].port" && f.message.contains("VIP's port")),
        "{e:?}"
    );
    let good = ok(
        "vips:\n  - name: web\n    address: 10.0.0.1\n    port: 80\n    mode: dsr\n    backends:\n      - { address: 10.0.1.1, mac: \"02:00:00:00:00:01\" }\n",
    );
    assert_eq!(good.vips[0].mode, Mode::Dsr);
    assert_eq!(good.vips[0].backends[0].port, 80);
    // L3 DSR needs a tunnel source of the VIP's family.
    for mode in ["dsr-ipip", "dsr-gre"] {
        let e = one(&vip_with(&format!("    mode: {mode}\n")));
        assert_eq!(e.path, "vips[0].mode");
        assert!(e.message.contains("settings.tunnelSource.ipv4"), "{e:?}");
        let cfg = ok(&format!(
            "settings:\n  tunnelSource: {{ ipv4: 10.0.9.1, ipv6: \"2001:db8::9\" }}\n{}",
            vip_with(&format!("    mode: {mode}\n"))
        ));
        assert_eq!(
            cfg.settings.tunnel_source_v4,
            Some("10.0.9.1".parse().unwrap())
        );
    }
    assert_eq!(ok(&vip_with("    mode: nat\n")).vips[0].mode, Mode::Nat);
}

#[test]
fn duplicate_vip_names() {
    let text = "\
vips:
  - name: web
    address: 10.0.0.1
    port: 80
  - name: web
    address: 10.0.0.2
    port: 80
";
    let e = one(text);
    check(
        &e,
        "vips[1].name",
        5,
        11,
        "duplicate VIP name `web`: already used by vips[0] at line 2",
    );
}

#[test]
fn duplicate_vip_endpoints() {
    let text = "\
vips:
  - name: web
    address: 10.0.0.1
    port: 80
  - name: web2
    address: 10.0.0.1
    port: 80
    protocol: tcp
  - name: web6
    address: 2001:db8::1
    port: 443
  - name: web6-again
    address: 2001:DB8:0::1
    port: 443
";
    let errors = errors(text);
    assert_eq!(errors.len(), 2, "{errors:#?}");
    check(
        &errors[0],
        "vips[1]",
        5,
        5,
        "VIP 10.0.0.1:80/tcp is already defined by vips[0] at line 2",
    );
    check(
        &errors[1],
        "vips[3]",
        12,
        5,
        "VIP [2001:db8::1]:443/tcp is already defined by vips[2] at line 9",
    );
}

#[test]
fn backend_listed_twice_in_one_vip() {
    // The second entry has the same port through the default (the VIP's port).
    let e = one(&vip_with(
        "    backends:\n      - address: 10.0.1.1\n        port: 80\n      - address: 10.0.1.2\n      - address: 10.0.1.1\n",
    ));
    check(
        &e,
        "vips[0].backends[2]",
        9,
        9,
        "backend 10.0.1.1:80 is listed twice in this VIP (also backends[0] at line 6)",
    );
    // Same address on another port is a different backend.
    let config = ok(&vip_with(
        "    backends:\n      - address: 10.0.1.1\n      - address: 10.0.1.1\n        port: 81\n",
    ));
    assert_eq!(config.vips[0].backends.len(), 2);
}

#[test]
fn the_same_backend_may_serve_several_vips() {
    let text = "\
vips:
  - {name: a, address: 10.0.0.1, port: 80, backends: [{address: 10.0.1.1}]}
  - {name: b, address: 10.0.0.2, port: 80, backends: [{address: 10.0.1.1}]}
";
    assert_eq!(ok(text).vips.len(), 2);
}

#[test]
fn backend_family_must_match_vip() {
    let e = one(&vip_with("    backends:\n      - address: 2001:db8::11\n"));
    check(
        &e,
        "vips[0].backends[0].address",
        6,
        18,
        "backend address 2001:db8::11 is IPv6 but the VIP address 10.0.0.1 is IPv4; a backend must have the address family of its VIP",
    );
    let e = one(
        "vips:\n  - name: v6\n    address: 2001:db8::1\n    port: 80\n    backends:\n      - address: 10.0.1.1\n",
    );
    check(
        &e,
        "vips[0].backends[0].address",
        6,
        18,
        "is IPv4 but the VIP address 2001:db8::1 is IPv6",
    );
}

#[test]
fn invalid_weights() {
    for (weight, message) in [
        ("0", "0 is not a valid weight (1-65535)"),
        ("65536", "65536 is not a valid weight (1-65535)"),
        ("-2", "-2 is not a valid weight (1-65535)"),
        (
            "1.5",
            "expected an integer weight (1-65535), found the number `1.5`",
        ),
    ] {
        let e = one(&vip_with(&format!(
            "    backends:\n      - address: 10.0.1.1\n        weight: {weight}\n"
        )));
        check(&e, "vips[0].backends[0].weight", 7, 17, message);
    }
    let config = ok(&vip_with(
        "    backends:\n      - address: 10.0.1.1\n        weight: 65535\n",
    ));
    assert_eq!(config.vips[0].backends[0].weight, 65535);
}

#[test]
fn invalid_macs() {
    for (mac, message) in [
        ("\"02:00:00:00:00\"", "is not a valid MAC address"),
        ("\"02:00:00:00:00:01:02\"", "is not a valid MAC address"),
        ("\"02-00-00-00-00-01\"", "is not a valid MAC address"),
        ("\"2:0:0:0:0:1\"", "is not a valid MAC address"),
        ("\"02:00:00:00:00:0g\"", "is not a valid MAC address"),
        (
            "020000000001",
            "\"020000000001\" is not a valid MAC address",
        ),
        (
            "\"00:00:00:00:00:00\"",
            "00:00:00:00:00:00 is not a usable MAC address (all zeros)",
        ),
        (
            "\"01:00:5e:00:00:01\"",
            "01:00:5e:00:00:01 is a multicast or broadcast MAC address",
        ),
        (
            "\"ff:ff:ff:ff:ff:ff\"",
            "is a multicast or broadcast MAC address; a backend needs a unicast MAC",
        ),
    ] {
        let e = one(&vip_with(&format!(
            "    backends:\n      - address: 10.0.1.1\n        mac: {mac}\n"
        )));
        check(&e, "vips[0].backends[0].mac", 7, 14, message);
    }
}

#[test]
fn too_many_vips() {
    let mut text = String::from("vips:\n");
    for i in 0..=MAX_VIPS {
        text.push_str(&format!(
            "  - {{name: v{i}, address: 10.0.{}.{}, port: 80}}\n",
            i / 250,
            i % 250 + 1
        ));
    }
    let e = one(&text);
    check(
        &e,
        "vips",
        2,
        3,
        "4097 VIPs are defined; at most 4096 are supported",
    );

    // Exactly the limit is fine.
    let at_limit: String = text
        .lines()
        .take(1 + MAX_VIPS)
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(ok(&at_limit).vips.len(), MAX_VIPS);
}

#[test]
fn too_many_backends() {
    // Distinct (address, port) pairs are counted across VIPs; a backend shared
    // by two VIPs counts once.
    let backends = |count: usize| {
        let mut list = String::new();
        for i in 0..count {
            list.push_str(&format!(
                "      - {{address: 10.1.{}.{}}}\n",
                i / 250,
                i % 250 + 1
            ));
        }
        list
    };
    let shared = format!(
        "vips:\n  - name: a\n    address: 10.0.0.1\n    port: 80\n    backends:\n{0}  - name: b\n    address: 10.0.0.2\n    port: 80\n    backends:\n{0}",
        backends(MAX_BACKENDS)
    );
    assert_eq!(ok(&shared).vips[1].backends.len(), MAX_BACKENDS);

    // One more distinct pair: the same addresses on another port.
    let too_many = format!(
        "vips:\n  - name: a\n    address: 10.0.0.1\n    port: 80\n    backends:\n{0}  - name: b\n    address: 10.0.0.2\n    port: 81\n    backends:\n      - {{address: 10.1.0.1}}\n",
        backends(MAX_BACKENDS)
    );
    let e = one(&too_many);
    check(
        &e,
        "vips",
        2,
        3,
        "8193 distinct backends (address, port) are defined across all VIPs; at most 8192 are supported",
    );
}

// ------------------------------------------------------------------- load

#[test]
fn load_reports_io_errors() {
    let err: ConfigError = load(Path::new("/nonexistent/rivora.yaml")).unwrap_err();
    assert_eq!(err.errors.len(), 1);
    assert_eq!((err.errors[0].line, err.errors[0].column), (None, None));
    let shown = err.to_string();
    println!("{shown}");
    assert!(
        shown.starts_with("/nonexistent/rivora.yaml: cannot read configuration file: "),
        "{shown}"
    );
}

#[test]
fn load_uses_the_path_in_messages() {
    let dir = std::env::temp_dir().join(format!("rivora-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.yaml");
    std::fs::write(
        &path,
        "vips:\n  - name: web\n    address: 10.0.0.1\n    port: 0\n",
    )
    .unwrap();
    let err = load(&path).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "{}:4:11: vips[0].port: 0 is not a valid port (1-65535)",
            path.display()
        )
    );
}

#[test]
fn crlf_line_endings() {
    let text = "vips:\r\n  - name: web\r\n    address: 10.0.0.1\r\n    port: 0\r\n";
    let e = one(text);
    check(&e, "vips[0].port", 4, 11, "0 is not a valid port (1-65535)");
}
