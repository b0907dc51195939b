//! The `classifier:` section: a full example decoded into the expected
//! ClassifierSpec, and each kind of error with the path, line, column and
//! wording an operator will see.

use std::collections::BTreeSet;
use std::net::IpAddr;

use rivora_config::{Config, FieldError, parse};
use rivora_dataplane::SourceRange;
use rivora_dataplane::classifier::{
    ClassifierSpec, GroupSpec, PortRange, RuleProto, RuleSpec, SctpHash, TargetSpec,
};

fn ok(text: &str) -> Config {
    parse(text, "t.yaml").unwrap_or_else(|e| panic!("unexpected errors:\n{e}"))
}

fn errors(text: &str) -> Vec<FieldError> {
    match parse(text, "t.yaml") {
        Ok(config) => panic!("expected errors, parsed {:#?}", config.classifier),
        Err(e) => {
            println!("{e}");
            e.errors
        }
    }
}

/// Line and column of the `|` in `marked`, a piece of `text` with one `|`
/// inserted where the position should be.
#[track_caller]
fn pos(text: &str, marked: &str) -> (usize, usize) {
    let at = marked.find('|').expect("a | marker");
    let needle = marked.replace('|', "");
    let start = text
        .find(&needle)
        .unwrap_or_else(|| panic!("{needle:?} not in the text"));
    assert_eq!(text.matches(&needle).count(), 1, "{needle:?} is not unique");
    let offset = start + at;
    let line = text[..offset].matches('\n').count() + 1;
    let column = text[..offset].rsplit('\n').next().unwrap().chars().count() + 1;
    (line, column)
}

/// The only error of `text` is at `path`, at the `|` of `marked`, and says
/// `message`.
#[track_caller]
fn one(text: &str, path: &str, marked: &str, message: &str) {
    let errs = errors(text);
    assert_eq!(errs.len(), 1, "expected exactly one error: {errs:#?}");
    check(&errs[0], text, path, marked, message);
}

#[track_caller]
fn check(e: &FieldError, text: &str, path: &str, marked: &str, message: &str) {
    assert_eq!(e.path, path, "path of {e:?}");
    let (line, column) = pos(text, marked);
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

const FULL: &str = r#"vips:
  - name: web
    address: 10.0.0.99
    port: 80
classifier:
  groups:
    - name: dg-a
      maxEndpoints: 32
      sctpHash: five-tuple
      targets:
        - identifier: 0
          addresses: [192.168.10.2, "fd00::2"]
        - identifier: 31
          addresses: ["fd00::5"]
    - name: dg-b
      targets: []
  rules:
    - name: r-web
      group: dg-a
      priority: 10
      destinationCIDRs: [10.0.0.1/32, "2001:db8::1/128", 10.0.0.2]
      sourceCIDRs: [192.0.2.0/24, "2001:db8:ff::/48"]
      sourcePorts: ["1024-65535"]
      destinationPorts: [80, "443", " 8000 - 8099 ", any]
      protocols: [TCP, UDP, SCTP]
      byteMatches: ["tcp[13:1]&0x02=0x02", "sctp[4 : 4] = 0"]
    - name: r-default
      group: dg-b
      priority: 1
      destinationCIDRs:
        - 10.0.0.1
      protocols: [UDP]
"#;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn full_example() {
    let config = ok(FULL);
    let expected = ClassifierSpec {
        groups: vec![
            GroupSpec {
                name: "dg-a".into(),
                max_endpoints: 32,
                sctp_hash: SctpHash::FiveTuple,
                targets: vec![
                    TargetSpec {
                        slot: 0,
                        v4: Some("192.168.10.2".parse().unwrap()),
                        v6: Some("fd00::2".parse().unwrap()),
                    },
                    TargetSpec {
                        slot: 31,
                        v4: None,
                        v6: Some("fd00::5".parse().unwrap()),
                    },
                ],
            },
            GroupSpec {
                name: "dg-b".into(),
                max_endpoints: 102,
                sctp_hash: SctpHash::Ports,
                targets: vec![],
            },
        ],
        rules: vec![
            RuleSpec {
                name: "r-web".into(),
                priority: 10,
                group: "dg-a".into(),
                vips: vec![ip("10.0.0.1"), ip("2001:db8::1"), ip("10.0.0.2")],
                sources: vec![
                    SourceRange::new(ip("192.0.2.0"), 24),
                    SourceRange::new(ip("2001:db8:ff::"), 48),
                ],
                source_ports: vec![PortRange {
                    first: 1024,
                    last: 65535,
                }],
                destination_ports: vec![
                    PortRange {
                        first: 80,
                        last: 80,
                    },
                    PortRange {
                        first: 443,
                        last: 443,
                    },
                    PortRange {
                        first: 8000,
                        last: 8099,
                    },
                    PortRange::ANY,
                ],
                protocols: BTreeSet::from([RuleProto::Tcp, RuleProto::Udp, RuleProto::Sctp]),
                byte_matches: vec![
                    "tcp[13:1]&0x2=2".parse().unwrap(),
                    "sctp[4:4]=0".parse().unwrap(),
                ],
            },
            RuleSpec {
                name: "r-default".into(),
                priority: 1,
                group: "dg-b".into(),
                vips: vec![ip("10.0.0.1")],
                sources: vec![],
                source_ports: vec![],
                destination_ports: vec![],
                protocols: BTreeSet::from([RuleProto::Udp]),
                byte_matches: vec![],
            },
        ],
    };
    assert_eq!(config.classifier, expected);
    assert_eq!(config.vips.len(), 1);
}

#[test]
fn absent_or_empty_classifier_is_empty() {
    assert!(ok("vips: []\n").classifier.is_empty());
    assert!(ok("vips: []\nclassifier:\n").classifier.is_empty());
    assert!(ok("vips: []\nclassifier: {}\n").classifier.is_empty());
    assert!(
        ok("vips: []\nclassifier: { groups: [], rules: [] }\n")
            .classifier
            .is_empty()
    );
}

// ------------------------------------------------------------ structure

#[test]
fn structure_errors() {
    let t = "vips: []\nclassifier: [a]\n";
    one(
        t,
        "classifier",
        "classifier: |[a]",
        "expected the classifier (a mapping",
    );
    let t = "vips: []\nclassifier:\n  colour: red\n";
    one(
        t,
        "classifier.colour",
        "|colour",
        "unknown key `colour`; allowed keys: groups, rules",
    );
    let t = "vips: []\nclassifier:\n  groups: dg-a\n";
    one(
        t,
        "classifier.groups",
        "groups: |dg-a",
        "expected a list of groups, found the string \"dg-a\"",
    );
    let t = "vips: []\nclassifier:\n  rules: 3\n";
    one(
        t,
        "classifier.rules",
        "rules: |3",
        "expected a list of rules, found the integer `3`",
    );
    let t = "vips: []\nclassifier:\n  groups: [x]\n";
    one(
        t,
        "classifier.groups[0]",
        "[|x]",
        "expected a group (a mapping",
    );
    let t = "vips: []\nclassifier:\n  rules: [x]\n";
    one(
        t,
        "classifier.rules[0]",
        "[|x]",
        "expected a rule (a mapping",
    );
    let t = FULL.replace("sctpHash:", "hash:");
    one(
        &t,
        "classifier.groups[0].hash",
        "|hash",
        "unknown key `hash`; allowed keys: name, maxEndpoints, sctpHash, targets",
    );
    let t = FULL.replace("- identifier: 31", "- id: 31");
    let errs = errors(&t);
    assert_eq!(errs.len(), 2, "{errs:#?}");
    check(
        &errs[0],
        &t,
        "classifier.groups[0].targets[1].id",
        "|id: 31",
        "unknown key `id`; allowed keys: identifier, addresses",
    );
    check(
        &errs[1],
        &t,
        "classifier.groups[0].targets[1].identifier",
        "- |id: 31",
        "missing required key `identifier`",
    );
    let t = FULL.replace("priority: 10", "priority: 10\n      weight: 3");
    one(
        &t,
        "classifier.rules[0].weight",
        "|weight",
        "unknown key `weight`; allowed keys: name, group, priority, destinationCIDRs",
    );
}

// ------------------------------------------------------------ groups

#[test]
fn group_name_errors() {
    let t = FULL.replace("- name: dg-b\n", "- maxEndpoints: 4\n");
    let errs = errors(&t);
    // The name is missing; the rule naming dg-b finds no group.
    assert_eq!(errs.len(), 2, "{errs:#?}");
    check(
        &errs[0],
        &t,
        "classifier.groups[1].name",
        "- |maxEndpoints: 4",
        "missing required key `name`",
    );
    check(
        &errs[1],
        &t,
        "classifier.rules[1].group",
        "group: |dg-b",
        "\"dg-b\" is not the name of any group",
    );
    let t = FULL.replace("name: dg-a", "name: DG_A");
    let errs = errors(&t);
    check(
        &errs[0],
        &t,
        "classifier.groups[0].name",
        "name: |DG_A",
        "\"DG_A\" is not a valid group name",
    );
    let t = FULL.replace("name: dg-b", "name: dg-a");
    let errs = errors(&t);
    check(
        &errs[0],
        &t,
        "classifier.groups[1].name",
        "    - name: |dg-a\n      targets: []",
        "\"dg-a\" is also the name of groups[0]",
    );
}

#[test]
fn group_max_endpoints_and_sctp_hash() {
    for (value, message) in [
        ("0", "0 is not a valid maxEndpoints (1-4096)"),
        ("4097", "4097 is not a valid maxEndpoints (1-4096)"),
        (
            "\"32\"",
            "expected an integer maxEndpoints (1-4096), found the string",
        ),
    ] {
        let t = FULL.replace("maxEndpoints: 32", &format!("maxEndpoints: {value}"));
        // A failed maxEndpoints hides the targets' identifier checks.
        one(
            &t,
            "classifier.groups[0].maxEndpoints",
            &format!("maxEndpoints: |{value}"),
            message,
        );
    }
    let t = FULL.replace("sctpHash: five-tuple", "sctpHash: addresses");
    one(
        &t,
        "classifier.groups[0].sctpHash",
        "sctpHash: |addresses",
        "\"addresses\" is not a valid sctpHash; valid values: ports, five-tuple",
    );
}

#[test]
fn target_errors() {
    let t = FULL.replace("identifier: 31", "identifier: 32");
    one(
        &t,
        "classifier.groups[0].targets[1].identifier",
        "identifier: |32",
        "identifier 32 is not below maxEndpoints 32",
    );
    let t = FULL.replace("identifier: 31", "identifier: 0");
    one(
        &t,
        "classifier.groups[0].targets[1].identifier",
        "identifier: |0\n          addresses: [\"fd00::5\"]",
        "identifier 0 is also the identifier of targets[0]",
    );
    let t = FULL.replace("identifier: 31", "identifier: 5000");
    one(
        &t,
        "classifier.groups[0].targets[1].identifier",
        "identifier: |5000",
        "5000 is not a valid identifier (0-4095)",
    );
    let t = FULL.replace("[\"fd00::5\"]", "[\"fd00::5\", \"fd00::6\"]");
    one(
        &t,
        "classifier.groups[0].targets[1].addresses[1]",
        "\"fd00::5\", |\"fd00::6\"",
        "fd00::6 is a second IPv6 address: a target has at most one address per family",
    );
    let t = FULL.replace("[\"fd00::5\"]", "[fd00::5/64]");
    one(
        &t,
        "classifier.groups[0].targets[1].addresses[0]",
        "[|fd00::5/64]",
        "write a single address, without a prefix length",
    );
    let t = FULL.replace("[\"fd00::5\"]", "[nope]");
    one(
        &t,
        "classifier.groups[0].targets[1].addresses[0]",
        "[|nope]",
        "not a valid IPv4 or IPv6 address",
    );
    let t = FULL.replace("[\"fd00::5\"]", "[]");
    one(
        &t,
        "classifier.groups[0].targets[1].addresses",
        "addresses: |[]",
        "a target needs at least one address",
    );
    let t = FULL.replace("[\"fd00::5\"]", "[\"::1\"]");
    one(
        &t,
        "classifier.groups[0].targets[1].addresses",
        "addresses: |[\"::1\"]",
        "::1 is a loopback address, not a target's address",
    );
}

// ------------------------------------------------------------ rules

#[test]
fn rule_required_keys() {
    let t = "vips: []\nclassifier:\n  rules:\n    - {}\n";
    let errs = errors(t);
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "classifier.rules[0].name",
            "classifier.rules[0].group",
            "classifier.rules[0].priority",
            "classifier.rules[0].destinationCIDRs",
            "classifier.rules[0].protocols",
        ]
    );
    for e in &errs {
        check(e, t, &e.path, "- |{}", "missing required key");
    }
}

#[test]
fn rule_name_group_priority() {
    let t = FULL.replace("name: r-default", "name: r-web");
    one(
        &t,
        "classifier.rules[1].name",
        "- name: |r-web\n      group: dg-b",
        "\"r-web\" is also the name of rules[0]",
    );
    let t = FULL.replace("group: dg-b", "group: dg-c");
    one(
        &t,
        "classifier.rules[1].group",
        "group: |dg-c",
        "\"dg-c\" is not the name of any group",
    );
    let t = FULL.replace("name: r-web", "name: \"r web\"");
    one(
        &t,
        "classifier.rules[0].name",
        "name: |\"r web\"",
        "\"r web\" is not a valid rule name",
    );
    for (value, message) in [
        ("0", "0 is not a valid priority (1-2147483647)"),
        ("-3", "-3 is not a valid priority"),
        ("2147483648", "2147483648 is not a valid priority"),
        (
            "high",
            "expected an integer priority (1-2147483647), found the string",
        ),
    ] {
        let t = FULL.replace("priority: 10", &format!("priority: {value}"));
        one(
            &t,
            "classifier.rules[0].priority",
            &format!("priority: |{value}"),
            message,
        );
    }
}

#[test]
fn destination_cidr_errors() {
    let t = FULL.replace("10.0.0.1/32,", "10.0.0.0/24,");
    one(
        &t,
        "classifier.rules[0].destinationCIDRs[0]",
        "[|10.0.0.0/24",
        "10.0.0.0/24 is not a single address: a VIP is a /32 (IPv4) or /128 (IPv6)",
    );
    let t = FULL.replace("\"2001:db8::1/128\"", "\"2001:db8::1/64\"");
    one(
        &t,
        "classifier.rules[0].destinationCIDRs[1]",
        "|\"2001:db8::1/64\"",
        "write 2001:db8::1/128 or 2001:db8::1",
    );
    let t = FULL.replace("10.0.0.1/32,", "10.0.0.300,");
    one(
        &t,
        "classifier.rules[0].destinationCIDRs[0]",
        "[|10.0.0.300",
        "\"10.0.0.300\" is not an IPv4 or IPv6 address",
    );
    let t = FULL.replace("10.0.0.2]", "10.0.0.1]");
    one(
        &t,
        "classifier.rules[0].destinationCIDRs[2]",
        "\"2001:db8::1/128\", |10.0.0.1]",
        "10.0.0.1 is listed twice (also destinationCIDRs[0])",
    );
    let t = FULL.replace("10.0.0.2]", "224.0.0.9]");
    one(
        &t,
        "classifier.rules[0].destinationCIDRs[2]",
        "|224.0.0.9",
        "224.0.0.9 is a multicast address, not a VIP",
    );
    let t = FULL.replace(
        "destinationCIDRs:\n        - 10.0.0.1",
        "destinationCIDRs: []",
    );
    one(
        &t,
        "classifier.rules[1].destinationCIDRs",
        "destinationCIDRs: |[]",
        "a rule needs at least one VIP",
    );
    let many: Vec<String> = (1..=101).map(|n| format!("10.1.0.{n}")).collect();
    let t = FULL.replace(
        "destinationCIDRs:\n        - 10.0.0.1",
        &format!("destinationCIDRs: [{}]", many.join(", ")),
    );
    one(
        &t,
        "classifier.rules[1].destinationCIDRs",
        "destinationCIDRs: |[10.1.0.1,",
        "101 VIPs; at most 100 are allowed",
    );
}

#[test]
fn source_cidr_errors() {
    let t = FULL.replace("192.0.2.0/24,", "192.0.2.0/33,");
    one(
        &t,
        "classifier.rules[0].sourceCIDRs[0]",
        "[|192.0.2.0/33",
        "source range 192.0.2.0/33: prefix length must be 0..=32",
    );
    // A rule whose VIPs are all IPv4 takes no IPv6 source.
    let t = FULL.replace("[10.0.0.1/32, \"2001:db8::1/128\", 10.0.0.2]", "[10.0.0.1]");
    one(
        &t,
        "classifier.rules[0].sourceCIDRs[1]",
        "|\"2001:db8:ff::/48\"",
        "2001:db8:ff::/48 is IPv6 but every VIP of the rule is IPv4",
    );
    let t = FULL.replace(
        "protocols: [UDP]",
        "protocols: [UDP]\n      sourceCIDRs: {}",
    );
    one(
        &t,
        "classifier.rules[1].sourceCIDRs",
        "sourceCIDRs: |{}",
        "expected a list of prefixes, found a mapping",
    );
}

#[test]
fn port_errors() {
    for (value, message) in [
        ("\"90-80\"", "port range 90-80: first port above last"),
        ("70000", "port range 70000: 70000 is not a port (0-65535)"),
        ("http", "\"http\" is not a port: expected N, N-M or any"),
        (
            "[1]",
            "expected a port, a range such as \"1024-65535\", or any; found a list",
        ),
    ] {
        let t = FULL.replace("[\"1024-65535\"]", &format!("[{value}]"));
        one(
            &t,
            "classifier.rules[0].sourcePorts[0]",
            &format!("sourcePorts: [|{value}]"),
            message,
        );
    }
    let t = FULL.replace("any]", "\"9-8\"]");
    one(
        &t,
        "classifier.rules[0].destinationPorts[3]",
        "|\"9-8\"",
        "port range 9-8: first port above last",
    );
    let many = vec!["any"; 21].join(", ");
    let t = FULL.replace("[\"1024-65535\"]", &format!("[{many}]"));
    one(
        &t,
        "classifier.rules[0].sourcePorts",
        "sourcePorts: |[any",
        "21 port ranges; at most 20 are allowed",
    );
}

#[test]
fn protocol_errors() {
    let t = FULL.replace("protocols: [UDP]", "protocols: [udp]");
    one(
        &t,
        "classifier.rules[1].protocols[0]",
        "[|udp]",
        "\"udp\" is not a valid protocol (write UDP); valid values: TCP, UDP, SCTP",
    );
    let t = FULL.replace("protocols: [UDP]", "protocols: [UDP, ICMP]");
    one(
        &t,
        "classifier.rules[1].protocols[1]",
        "|ICMP",
        "\"ICMP\" is not a valid protocol; valid values: TCP, UDP, SCTP",
    );
    let t = FULL.replace("protocols: [UDP]", "protocols: [UDP, UDP]");
    one(
        &t,
        "classifier.rules[1].protocols[1]",
        "[UDP, |UDP]",
        "UDP is listed twice (also classifier.rules[1].protocols[0])",
    );
    let t = FULL.replace("protocols: [UDP]", "protocols: []");
    one(
        &t,
        "classifier.rules[1].protocols",
        "protocols: |[]",
        "a rule needs at least one protocol",
    );
    // A protocol that failed hides the byte matches' protocol check.
    let t = FULL.replace("[TCP, UDP, SCTP]", "[TCP, UDP, STCP]");
    one(
        &t,
        "classifier.rules[0].protocols[2]",
        "|STCP",
        "\"STCP\" is not a valid protocol",
    );
}

#[test]
fn byte_match_errors() {
    let t = FULL.replace("\"sctp[4 : 4] = 0\"", "\"sctp[10:4]=0\"");
    one(
        &t,
        "classifier.rules[0].byteMatches[1]",
        "|\"sctp[10:4]=0\"",
        "byte match \"sctp[10:4]=0\": sctp[10:4] reads past the 12-byte SCTP header",
    );
    let t = FULL.replace("\"sctp[4 : 4] = 0\"", "\"tcp[0:1]=0x100\"");
    one(
        &t,
        "classifier.rules[0].byteMatches[1]",
        "|\"tcp[0:1]=0x100\"",
        "value 0x100 does not fit in 1 byte",
    );
    let t = FULL.replace("\"sctp[4 : 4] = 0\"", "7");
    one(
        &t,
        "classifier.rules[0].byteMatches[1]",
        "0x02\", |7]",
        "expected a byte match such as \"tcp[13:1]&0x02=0x02\", found the integer `7`",
    );
    let t = FULL.replace("[TCP, UDP, SCTP]", "[UDP, SCTP]");
    one(
        &t,
        "classifier.rules[0].byteMatches[0]",
        "|\"tcp[13:1]&0x02=0x02\"",
        "tcp[13:1]&0x2=2 matches TCP but the rule's protocols are [UDP, SCTP]",
    );
}

#[test]
fn rules_per_vip_limit() {
    let mut t =
        String::from("vips: []\nclassifier:\n  groups: [{ name: g, targets: [] }]\n  rules:\n");
    for n in 0..33 {
        t.push_str(&format!(
            "    - {{ name: r{n}, group: g, priority: 1, destinationCIDRs: [10.0.0.{n}, 10.9.9.9], protocols: [TCP] }}\n"
        ));
    }
    one(
        &t,
        "classifier.rules[32].destinationCIDRs[1]",
        "10.0.0.32, |10.9.9.9",
        "VIP 10.9.9.9 is listed by 33 rules; at most 32 rules may list one VIP",
    );
}

#[test]
fn classifier_vip_must_not_be_a_vips_address() {
    let t = FULL.replace("address: 10.0.0.99", "address: 10.0.0.2");
    one(
        &t,
        "classifier.rules[0].destinationCIDRs[2]",
        "|10.0.0.2]",
        "10.0.0.2 is also the address of VIP `web` under `vips:`",
    );
}

#[test]
fn every_problem_in_one_pass() {
    let t = FULL
        .replace("maxEndpoints: 32", "maxEndpoints: 0")
        .replace("group: dg-b", "group: dg-z")
        .replace("protocols: [UDP]", "protocols: [udp]")
        .replace("sctpHash: five-tuple", "sctpHash: 5");
    let errs = errors(&t);
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "classifier.groups[0].maxEndpoints",
            "classifier.groups[0].sctpHash",
            "classifier.rules[1].group",
            "classifier.rules[1].protocols[0]",
        ]
    );
}

/// The example of docs/configuration.md parses, and the errors quoted
/// there are what a broken copy of it gives.
#[test]
fn documented_example() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .unwrap();
    let section = &doc[doc.find("## Classifier").expect("classifier section")..];
    let start = section.find("```yaml\n").unwrap() + "```yaml\n".len();
    let example = &section[start..start + section[start..].find("```").unwrap()];
    let config = ok(&format!("{example}vips: []\n"));
    assert_eq!(config.classifier.groups.len(), 1);
    assert_eq!(config.classifier.rules[0].vips.len(), 2);
    let broken = example
        .replace("[10.0.0.1/32", "[10.0.0.0/24")
        .replace("group: dg-a", "group: dg-z");
    let err = parse(&format!("{broken}vips: []\n"), "rivora.yaml").unwrap_err();
    for line in err.to_string().lines() {
        assert!(section.contains(line), "docs do not quote {line:?}");
    }
}
