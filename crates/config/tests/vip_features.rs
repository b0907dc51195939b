//! Port ranges and `any` VIPs, overlaps, `sessionAffinity`, `synRateLimit`
//! (per VIP and node-wide under `settings:`): one test (at least) per rule,
//! checking the path, line, column and wording an operator will see.

use rivora_config::{
    Config, FieldError, KEEP_DESTINATION_PORT, MAX_SYN_RATE, NatForwarding, PortRange, RateLimit,
    SessionAffinity, Settings, parse,
};

fn errors(text: &str) -> Vec<FieldError> {
    match parse(text, "t.yaml") {
        Ok(config) => panic!("expected errors, parsed {config:#?}"),
        Err(e) => {
            println!("{e}");
            e.errors
        }
    }
}

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

fn ok(text: &str) -> Config {
    parse(text, "t.yaml").unwrap_or_else(|e| panic!("unexpected errors:\n{e}"))
}

/// One VIP `web` on 10.0.0.1 with `port: {port}` (value at line 4, column
/// 11) and `extra` as more VIP keys (indented 4).
fn vip_port(port: &str, extra: &str) -> String {
    format!("vips:\n  - name: web\n    address: 10.0.0.1\n    port: {port}\n{extra}")
}

// ------------------------------------------------------------ port forms

#[test]
fn port_forms() {
    let ports = |p: &str| ok(&vip_port(p, "")).vips[0].ports;
    assert_eq!(ports("80"), PortRange::single(80));
    assert_eq!(
        ports("8000-8099"),
        PortRange {
            first: 8000,
            last: 8099
        }
    );
    assert_eq!(
        ports("\"8000-8099\""),
        PortRange {
            first: 8000,
            last: 8099
        }
    );
    assert_eq!(
        ports("\"8000 - 8099\""),
        PortRange {
            first: 8000,
            last: 8099
        }
    );
    assert_eq!(
        ports("1-65535"),
        PortRange {
            first: 1,
            last: 65535
        }
    );
    assert_eq!(ports("any"), PortRange::ANY);
    assert_eq!(ports("\"any\""), PortRange::ANY);
    // A one-port range is a single port (an exact VIP).
    assert_eq!(ports("8000-8000"), PortRange::single(8000));

    assert!(PortRange::single(80).is_single());
    assert!(!PortRange { first: 1, last: 2 }.is_single());
    assert!(PortRange::ANY.is_any() && !PortRange::ANY.is_single());
    assert_eq!((PortRange::ANY.first, PortRange::ANY.last), (0, 65535));
    assert!(PortRange::ANY.contains(0));
    assert_eq!(PortRange::single(80).single_port(), Some(80));
    assert_eq!(PortRange { first: 1, last: 2 }.single_port(), None);
    assert_eq!(PortRange::single(80).to_string(), "80");
    assert_eq!(
        PortRange {
            first: 8000,
            last: 8099
        }
        .to_string(),
        "8000-8099"
    );
    assert_eq!(PortRange::ANY.to_string(), "any");
    let r = PortRange {
        first: 10,
        last: 20,
    };
    assert!(r.overlaps(&PortRange {
        first: 20,
        last: 30
    }));
    assert!(r.overlaps(&PortRange { first: 0, last: 10 }));
    assert!(r.overlaps(&PortRange::single(15)));
    assert!(!r.overlaps(&PortRange {
        first: 21,
        last: 30
    }));
    assert!(!r.overlaps(&PortRange::single(9)));
}

#[test]
fn invalid_port_forms() {
    for (port, message) in [
        (
            "8100-8000",
            "port range 8100-8000 is reversed: write the lower port first (8000-8100)",
        ),
        (
            "0-80",
            "port range 0-80 is not valid: both ends must be ports (1-65535)",
        ),
        (
            "1-70000",
            "port range 1-70000 is not valid: both ends must be ports (1-65535)",
        ),
        (
            "1-99999999999999999999",
            "port range 1-99999999999999999999 is not valid: both ends must be ports (1-65535)",
        ),
        (
            "80-",
            "\"80-\" is not a valid port: write a port (1-65535), a port range such as 8000-8099, or `any`",
        ),
        ("-80", "-80 is not a valid port (1-65535)"),
        (
            "\"-80\"",
            "\"-80\" is not a valid port: write a port (1-65535)",
        ),
        ("80-90-100", "\"80-90-100\" is not a valid port"),
        ("all", "\"all\" is not a valid port"),
        ("ANY", "\"ANY\" is not a valid port"),
        ("http", "\"http\" is not a valid port"),
        (
            "\"80\"",
            "expected an integer port (1-65535), found the string \"80\"; write it without quotes",
        ),
        (
            "[80, 81]",
            "expected a port (1-65535), a port range such as 8000-8099, or `any`, found a list",
        ),
        (
            "true",
            "expected a port (1-65535), a port range such as 8000-8099, or `any`, found the boolean `true`",
        ),
        ("0", "0 is not a valid port (1-65535)"),
    ] {
        let e = one(&vip_port(port, ""));
        check(&e, "vips[0].port", 4, 11, message);
    }
}

#[test]
fn backends_of_a_range_keep_the_destination_port_by_default() {
    let text = "\
vips:
  - name: range
    address: 10.0.0.1
    port: 8000-8099
    backends:
      - address: 10.0.1.1
      - address: 10.0.1.2
        port: 9000
  - name: all
    address: 10.0.0.2
    port: any
    protocol: udp
    backends:
      - address: 10.0.1.1
  - name: one
    address: 10.0.0.3
    port: 80
    backends:
      - address: 10.0.1.1
";
    let config = ok(text);
    let range = &config.vips[0].backends;
    assert_eq!(range[0].port, KEEP_DESTINATION_PORT);
    assert!(range[0].keeps_destination_port());
    assert_eq!(range[1].port, 9000, "an explicit port maps the whole range");
    assert!(!range[1].keeps_destination_port());
    assert_eq!(config.vips[1].backends[0].port, 0);
    assert_eq!(
        config.vips[2].backends[0].port, 80,
        "single port: the VIP's"
    );
    // `port: 0` stays invalid for a backend: 0 is only the default.
    let e = one(&vip_port(
        "8000-8099",
        "    backends:\n      - address: 10.0.1.1\n        port: 0\n",
    ));
    check(
        &e,
        "vips[0].backends[0].port",
        7,
        15,
        "0 is not a valid port (1-65535)",
    );
    // A backend port is one port, never a range.
    let e = one(&vip_port(
        "8000-8099",
        "    backends:\n      - address: 10.0.1.1\n        port: 9000-9099\n",
    ));
    check(
        &e,
        "vips[0].backends[0].port",
        7,
        15,
        "expected an integer port (1-65535), found the string \"9000-9099\"",
    );
}

#[test]
fn destination_port_backends_are_one_backend_per_address() {
    let e = one(&vip_port(
        "8000-8099",
        "    backends:\n      - address: 10.0.1.1\n      - address: 10.0.1.1\n",
    ));
    check(
        &e,
        "vips[0].backends[1]",
        7,
        9,
        "backend 10.0.1.1 (destination port) is listed twice in this VIP (also backends[0] at line 6)",
    );
}

// ---------------------------------------------------------------- overlaps

#[test]
fn overlapping_ranges_are_rejected_naming_both() {
    let text = "\
vips:
  - name: a
    address: 10.0.0.1
    port: 8000-8099
  - name: b
    address: 10.0.0.1
    port: 8050-8150
";
    let e = one(text);
    check(
        &e,
        "vips[1].port",
        7,
        11,
        "VIP 10.0.0.1:8050-8150/tcp overlaps vips[0] (10.0.0.1:8000-8099/tcp, line 2): port ranges of one address and protocol must not overlap",
    );

    // `any` overlaps every range of its address and protocol.
    let text = "\
vips:
  - {name: a, address: 2001:db8::1, port: 10-20, protocol: udp}
  - {name: b, address: 2001:db8::1, port: any, protocol: udp}
";
    let e = one(text);
    check(
        &e,
        "vips[1].port",
        3,
        43,
        "VIP [2001:db8::1]:any/udp overlaps vips[0] ([2001:db8::1]:10-20/udp, line 2)",
    );

    // Sharing one end port is an overlap too.
    let text = "\
vips:
  - {name: a, address: 10.0.0.1, port: 8000-8099}
  - {name: b, address: 10.0.0.1, port: 8099-8199}
";
    check(&one(text), "vips[1].port", 3, 40, "overlaps vips[0]");
}

#[test]
fn each_overlapping_vip_is_reported() {
    let text = "\
vips:
  - {name: a, address: 10.0.0.1, port: 100-200}
  - {name: b, address: 10.0.0.1, port: 150-250}
  - {name: c, address: 10.0.0.1, port: 50-120}
";
    let errors = errors(text);
    assert_eq!(errors.len(), 2, "{errors:#?}");
    check(&errors[0], "vips[1].port", 3, 40, "overlaps vips[0]");
    check(&errors[1], "vips[2].port", 4, 40, "overlaps vips[0]");
}

#[test]
fn identical_ranges_are_duplicates() {
    let text = "\
vips:
  - {name: a, address: 10.0.0.1, port: 8000-8099}
  - {name: b, address: 10.0.0.1, port: 8000-8099}
  - {name: c, address: 10.0.0.2, port: any}
  - {name: d, address: 10.0.0.2, port: any}
";
    let errors = errors(text);
    assert_eq!(errors.len(), 2, "{errors:#?}");
    check(
        &errors[0],
        "vips[1]",
        3,
        5,
        "VIP 10.0.0.1:8000-8099/tcp is already defined by vips[0] at line 2",
    );
    check(
        &errors[1],
        "vips[3]",
        5,
        5,
        "VIP 10.0.0.2:any/tcp is already defined by vips[2] at line 4",
    );
}

#[test]
fn ranges_that_do_not_overlap_are_fine() {
    let text = "\
vips:
  # Adjacent ranges.
  - {name: a, address: 10.0.0.1, port: 8000-8099}
  - {name: b, address: 10.0.0.1, port: 8100-8199}
  # A single port inside a range: the exact VIP takes that port.
  - {name: c, address: 10.0.0.1, port: 8050}
  # Another protocol, another address.
  - {name: d, address: 10.0.0.1, port: 8000-8099, protocol: udp}
  - {name: e, address: 10.0.0.2, port: 8000-8099}
  # A single port next to `any` on the same address.
  - {name: f, address: 10.0.0.3, port: any}
  - {name: g, address: 10.0.0.3, port: 443}
";
    assert_eq!(ok(text).vips.len(), 7);
}

// -------------------------------------------------------- health checks

#[test]
fn destination_port_backends_need_a_probe_port() {
    // Inherited from the VIP: reported once, at the VIP's check.
    let text = vip_port(
        "8000-8099",
        "    healthCheck: { type: tcp }\n    backends:\n      - address: 10.0.1.1\n      - address: 10.0.1.2\n",
    );
    let e = one(&text);
    check(
        &e,
        "vips[0].healthCheck",
        5,
        18,
        "backends[0] gives no `port`, so it keeps the client's destination port (this VIP has a port range) and has no port of its own to probe: give the health check a `port`, or the backend a `port`",
    );

    // The backend's own check.
    let text = vip_port(
        "any",
        "    backends:\n      - address: 10.0.1.1\n        healthCheck: { type: http }\n",
    );
    let e = one(&text);
    check(
        &e,
        "vips[0].backends[0].healthCheck",
        7,
        22,
        "this backend gives no `port`, so it keeps the client's destination port",
    );

    // A probe port, a backend port, or no check at all are fine.
    let config = ok(&vip_port(
        "8000-8099",
        "    healthCheck: { type: tcp, port: 9000 }\n    backends:\n      - address: 10.0.1.1\n",
    ));
    assert_eq!(
        config.vips[0].backends[0]
            .health_check
            .as_ref()
            .unwrap()
            .port,
        Some(9000)
    );
    ok(&vip_port(
        "8000-8099",
        "    healthCheck: { type: tcp }\n    backends:\n      - address: 10.0.1.1\n        port: 8080\n",
    ));
    ok(&vip_port(
        "8000-8099",
        "    healthCheck: { type: tcp }\n    backends:\n      - address: 10.0.1.1\n        healthCheck: { type: none }\n",
    ));
    ok(&vip_port(
        "8000-8099",
        "    backends:\n      - address: 10.0.1.1\n",
    ));
}

// ------------------------------------------------------ session affinity

#[test]
fn session_affinity_values() {
    let affinity = |extra: &str| ok(&vip_port("80", extra)).vips[0].session_affinity;
    assert_eq!(affinity(""), SessionAffinity::None);
    assert_eq!(
        affinity("    sessionAffinity: none\n"),
        SessionAffinity::None
    );
    assert_eq!(affinity("    sessionAffinity: ~\n"), SessionAffinity::None);
    assert_eq!(
        affinity("    sessionAffinity: clientIP\n"),
        SessionAffinity::ClientIp
    );
    assert_eq!(SessionAffinity::ClientIp.to_string(), "clientIP");

    for (value, message) in [
        (
            "ClientIP",
            "\"ClientIP\" is not a valid session affinity; valid values: none, clientIP",
        ),
        ("cookie", "\"cookie\" is not a valid session affinity"),
        (
            "{ type: clientIP }",
            "expected a session affinity, found a mapping",
        ),
    ] {
        let e = one(&vip_port("80", &format!("    sessionAffinity: {value}\n")));
        check(&e, "vips[0].sessionAffinity", 5, 22, message);
    }
}

// ---------------------------------------------------------- NAT forwarding

#[test]
fn nat_forwarding_values() {
    let forwarding = |extra: &str| ok(&vip_port("80", extra)).vips[0].nat_forwarding;
    assert_eq!(forwarding(""), NatForwarding::Kernel);
    assert_eq!(
        forwarding("    natForwarding: kernel\n"),
        NatForwarding::Kernel
    );
    assert_eq!(forwarding("    natForwarding: fib\n"), NatForwarding::Fib);
    assert_eq!(
        forwarding("    mode: nat\n    natForwarding: fib\n"),
        NatForwarding::Fib
    );
    // Writing the default in a DSR mode is harmless.
    assert_eq!(
        forwarding("    mode: dsr\n    natForwarding: kernel\n"),
        NatForwarding::Kernel
    );
    assert_eq!(NatForwarding::Fib.to_string(), "fib");

    for (value, message) in [
        (
            "FIB",
            "\"FIB\" is not a valid NAT forwarding; valid values: kernel, fib",
        ),
        ("xdp", "\"xdp\" is not a valid NAT forwarding"),
        ("[fib]", "expected a NAT forwarding, found a list"),
    ] {
        let e = one(&vip_port("80", &format!("    natForwarding: {value}\n")));
        check(&e, "vips[0].natForwarding", 5, 20, message);
    }

    // fib in a DSR mode: named field, position and reason (the L3 DSR
    // modes are checked the same way; they also need a tunnel source).
    let e = one(&vip_port("80", "    mode: dsr\n    natForwarding: fib\n"));
    check(
        &e,
        "vips[0].natForwarding",
        6,
        20,
        "natForwarding applies to mode nat; mode dsr forwards without NAT",
    );
}

// --------------------------------------------------------- SYN rate limit

#[test]
fn vip_syn_rate_limit() {
    let limit = |extra: &str| ok(&vip_port("80", extra)).vips[0].syn_rate_limit;
    assert_eq!(limit(""), None);
    assert_eq!(limit("    synRateLimit: ~\n"), None);
    assert_eq!(
        limit("    synRateLimit: { rate: 100 }\n"),
        Some(RateLimit {
            rate: 100,
            burst: 100
        }),
        "burst defaults to the rate"
    );
    assert_eq!(
        limit("    synRateLimit:\n      rate: 10\n      burst: 50\n"),
        Some(RateLimit {
            rate: 10,
            burst: 50
        })
    );
    assert_eq!(
        limit(&format!(
            "    synRateLimit: {{ rate: {MAX_SYN_RATE}, burst: 1 }}\n"
        )),
        Some(RateLimit {
            rate: MAX_SYN_RATE,
            burst: 1
        })
    );
    // Range VIPs take limits and affinity too.
    let config = ok(&vip_port(
        "8000-8099",
        "    sessionAffinity: clientIP\n    synRateLimit: { rate: 5 }\n",
    ));
    assert_eq!(config.vips[0].session_affinity, SessionAffinity::ClientIp);
    assert_eq!(
        config.vips[0].syn_rate_limit,
        Some(RateLimit { rate: 5, burst: 5 })
    );
}

#[test]
fn invalid_syn_rate_limits() {
    for (value, path, column, message) in [
        (
            "{ rate: 0 }",
            "vips[0].synRateLimit.rate",
            27,
            "0 is not a valid rate (1-1000000)",
        ),
        (
            "{ rate: 1000001 }",
            "vips[0].synRateLimit.rate",
            27,
            "1000001 is not a valid rate (1-1000000)",
        ),
        (
            "{ rate: -5 }",
            "vips[0].synRateLimit.rate",
            27,
            "-5 is not a valid rate (1-1000000)",
        ),
        (
            "{ rate: 1.5 }",
            "vips[0].synRateLimit.rate",
            27,
            "expected an integer rate (1-1000000), found the number `1.5`",
        ),
        (
            "{ rate: 10, burst: 0 }",
            "vips[0].synRateLimit.burst",
            38,
            "0 is not a valid burst (1-1000000)",
        ),
        (
            "{ burst: 10 }",
            "vips[0].synRateLimit.rate",
            19,
            "missing required key `rate`",
        ),
        (
            "{ rate: 10, per: 1s }",
            "vips[0].synRateLimit.per",
            31,
            "unknown key `per`; allowed keys: rate, burst",
        ),
        (
            "100",
            "vips[0].synRateLimit",
            19,
            "expected a rate limit (a mapping with the keys rate, burst), found the integer `100`",
        ),
    ] {
        let e = one(&vip_port("80", &format!("    synRateLimit: {value}\n")));
        check(&e, path, 5, column, message);
    }
}

#[test]
fn syn_rate_limit_is_for_tcp_vips() {
    let e = one(&vip_port(
        "53",
        "    protocol: udp\n    synRateLimit: { rate: 10 }\n",
    ));
    check(
        &e,
        "vips[0].synRateLimit",
        6,
        19,
        "a SYN rate limit applies to TCP connections; this VIP is udp",
    );
}

// ---------------------------------------------------------------- settings

#[test]
fn node_wide_settings() {
    let config = ok("settings:\n  synRateLimit: { rate: 20, burst: 40 }\nvips: []\n");
    assert_eq!(
        config.settings.syn_rate_limit,
        Some(RateLimit {
            rate: 20,
            burst: 40
        })
    );
    assert!(config.vips.is_empty());
    // Settings without any VIP, and either order of the keys.
    let config = ok("settings:\n  synRateLimit:\n    rate: 7\nvips: []\n");
    assert_eq!(
        config.settings.syn_rate_limit,
        Some(RateLimit { rate: 7, burst: 7 })
    );
    let config = ok(&format!(
        "{}settings:\n  synRateLimit: {{ rate: 3 }}\n",
        vip_port("80", "")
    ));
    assert_eq!(config.vips.len(), 1);
    assert_eq!(config.settings.syn_rate_limit.map(|l| l.rate), Some(3));
    // Empty settings mean the defaults.
    for text in [
        "settings:\nvips: []\n",
        "settings: {}\nvips: []\n",
        "settings:\n  synRateLimit: ~\nvips: []\n",
    ] {
        assert_eq!(ok(text).settings, Settings::default(), "{text:?}");
    }
}

#[test]
fn invalid_settings() {
    let e = one("settings:\n  synRateLimit: { rate: 0 }\nvips: []\n");
    check(
        &e,
        "settings.synRateLimit.rate",
        2,
        25,
        "0 is not a valid rate (1-1000000)",
    );
    let e = one("settings:\n  colour: blue\nvips: []\n");
    check(
        &e,
        "settings.colour",
        2,
        3,
        "unknown key `colour`; allowed keys: synRateLimit, tunnelSource",
    );
    let e = one("settings: [synRateLimit]\nvips: []\n");
    check(
        &e,
        "settings",
        1,
        11,
        "expected settings (a mapping with the keys synRateLimit, tunnelSource), found a list",
    );
    // Settings are checked even when the VIP list is broken, and the other
    // way round: all problems in one pass.
    let errors = errors("settings:\n  synRateLimit: { rate: x }\nvips: 3\n");
    assert_eq!(errors.len(), 2, "{errors:#?}");
    check(
        &errors[0],
        "settings.synRateLimit.rate",
        2,
        25,
        "expected an integer rate (1-1000000), found the string \"x\"",
    );
    check(&errors[1], "vips", 3, 7, "expected a list of VIPs");
}

#[test]
fn all_new_problems_are_reported_in_one_pass() {
    let text = "\
settings:
  synRateLimit: { rate: 0 }
vips:
  - name: a
    address: 10.0.0.1
    port: 9000-8000
    sessionAffinity: sticky
    synRateLimit: { burst: 2 }
  - name: b
    address: 10.0.0.1
    port: 100-200
    protocol: udp
    synRateLimit: { rate: 1 }
  - name: c
    address: 10.0.0.1
    port: 150-160
    protocol: udp
";
    let err = parse(text, "rivora.yaml").unwrap_err();
    let lines: Vec<String> = err.to_string().lines().map(String::from).collect();
    println!("{err}");
    assert_eq!(
        lines,
        [
            "rivora.yaml:2:25: settings.synRateLimit.rate: 0 is not a valid rate (1-1000000)",
            "rivora.yaml:6:11: vips[0].port: port range 9000-8000 is reversed: write the lower port first (8000-9000)",
            "rivora.yaml:7:22: vips[0].sessionAffinity: \"sticky\" is not a valid session affinity; valid values: none, clientIP",
            "rivora.yaml:8:19: vips[0].synRateLimit.rate: missing required key `rate`",
            "rivora.yaml:13:19: vips[1].synRateLimit: a SYN rate limit applies to TCP connections; this VIP is udp",
            "rivora.yaml:16:11: vips[2].port: VIP 10.0.0.1:150-160/udp overlaps vips[1] (10.0.0.1:100-200/udp, line 9): port ranges of one address and protocol must not overlap (a single port inside a range is fine: it takes that port)",
        ]
    );
}
