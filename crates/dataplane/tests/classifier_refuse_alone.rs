//! Refuse-alone mode for the classifier (the Kubernetes source: each group a DistributionGroup,
//! each rule an L34Route), against the real writer and maps: a group that does not fit in
//! `cls_table` and a rule that is invalid (its group is unknown, or refused) are refused alone,
//! named with the reason; the rest is programmed, and a later change of an admitted rule still
//! is. A programmed rule whose new version is refused keeps its programmed version. Strict mode
//! (the YAML file) refuses the same spec whole.

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;

use common::*;
use rivora_dataplane::classifier::{
    ClassifierSpec, GroupSpec, RuleProto, RuleSpec, SctpHash, TargetSpec,
};

/// A group of the largest table (4,096 slots: 409,597 entries per family) with one IPv4
/// target: two fit in cls_table's 1,048,576 entries, a third does not.
fn big_group(name: &str, n: u8) -> GroupSpec {
    GroupSpec {
        name: name.into(),
        max_endpoints: 4096,
        sctp_hash: SctpHash::Ports,
        targets: vec![TargetSpec {
            slot: 0,
            v4: Some(format!("10.240.0.{n}").parse().unwrap()),
            v6: None,
        }],
    }
}

fn rule(name: &str, group: &str, vips: &[&str]) -> RuleSpec {
    RuleSpec {
        name: name.into(),
        priority: 1,
        group: group.into(),
        vips: vips.iter().map(|v| v.parse::<IpAddr>().unwrap()).collect(),
        sources: vec![],
        source_ports: vec![],
        destination_ports: vec![],
        protocols: [RuleProto::Tcp].into(),
        byte_matches: vec![],
    }
}

fn spec(r0_vips: &[&str]) -> ClassifierSpec {
    ClassifierSpec {
        groups: vec![
            big_group("g-0", 1),
            big_group("g-1", 2),
            big_group("g-2", 3),
        ],
        rules: vec![
            rule("r-0", "g-0", r0_vips),
            rule("r-1", "g-1", &["20.0.0.2"]),
            rule("r-2", "g-2", &["20.0.0.3"]),
            rule("r-lost", "no-such-group", &["20.0.0.4"]),
        ],
    }
}

fn applied(r: &Rig) -> (BTreeSet<String>, BTreeSet<String>) {
    let a = r.dataplane.classifier().applied();
    (
        a.groups.iter().map(|g| g.name.clone()).collect(),
        a.rules.iter().map(|r| r.name.clone()).collect(),
    )
}

fn names(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_group_that_does_not_fit_and_an_invalid_rule_are_refused_alone() {
    let mut strict = rig("clsalone-strict");
    let err = strict
        .dataplane
        .check_classifier(&spec(&["20.0.0.1"]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no-such-group"), "{err}");
    assert!(
        strict
            .dataplane
            .apply_classifier(&spec(&["20.0.0.1"]), true)
            .is_err()
    );
    assert!(strict.dataplane.classifier().applied().is_empty());
    drop(strict);

    let mut r = rig("clsalone");
    r.dataplane.set_refuse_alone(true);
    let report = r
        .dataplane
        .apply_classifier_alone(&spec(&["20.0.0.1"]), true)
        .unwrap();
    assert_eq!(report.groups_added, 2, "{report:?}");
    assert_eq!(
        applied(&r),
        (names(&["g-0", "g-1"]), names(&["r-0", "r-1"]))
    );
    let refused: Vec<(String, String, String)> = r
        .dataplane
        .classifier_refused()
        .iter()
        .map(|o| (o.kind.to_string(), o.name.clone(), o.reason.clone()))
        .collect();
    let kinds: BTreeSet<(String, String)> = refused
        .iter()
        .map(|(k, n, _)| (k.clone(), n.clone()))
        .collect();
    assert_eq!(
        kinds,
        [("group", "g-2"), ("rule", "r-2"), ("rule", "r-lost")]
            .map(|(k, n)| (k.to_string(), n.to_string()))
            .into(),
        "{refused:#?}"
    );
    let why = |name: &str| &refused.iter().find(|(_, n, _)| n == name).unwrap().2;
    assert!(why("g-2").contains("cls_table"), "{}", why("g-2"));
    assert!(why("r-lost").contains("no-such-group"), "{}", why("r-lost"));
    assert!(why("r-2").contains("g-2"), "{}", why("r-2"));

    // r-0 gains a VIP while the others stay refused: programmed.
    r.dataplane
        .apply_classifier_alone(&spec(&["20.0.0.1", "20.0.0.5"]), true)
        .unwrap();
    let r0 = r
        .dataplane
        .classifier()
        .applied()
        .rules
        .iter()
        .find(|x| x.name == "r-0")
        .unwrap()
        .clone();
    assert_eq!(r0.vips.len(), 2, "{r0:?}");
    assert_eq!(r.dataplane.classifier_refused().len(), 3);

    // A programmed rule whose new version is invalid keeps its programmed version.
    let mut broken = spec(&["20.0.0.1", "20.0.0.5"]);
    broken.rules[1].group = "no-such-group".into();
    r.dataplane.apply_classifier_alone(&broken, true).unwrap();
    let r1 = r
        .dataplane
        .classifier()
        .applied()
        .rules
        .iter()
        .find(|x| x.name == "r-1")
        .unwrap()
        .clone();
    assert_eq!(r1.group, "g-1", "r-1 keeps its programmed version");
    assert!(
        r.dataplane
            .classifier_refused()
            .iter()
            .any(|o| o.name == "r-1"),
        "{:?}",
        r.dataplane.classifier_refused()
    );

    // Room made (g-1 and its rule gone): g-2 and r-2 are programmed in the same call, tried
    // again once the removal gave g-1's table back.
    let mut fewer = spec(&["20.0.0.1"]);
    fewer.groups.retain(|g| g.name != "g-1");
    fewer
        .rules
        .retain(|x| x.name != "r-1" && x.name != "r-lost");
    r.dataplane.apply_classifier_alone(&fewer, true).unwrap();
    assert_eq!(
        applied(&r),
        (names(&["g-0", "g-2"]), names(&["r-0", "r-2"]))
    );
    assert!(r.dataplane.classifier_refused().is_empty());
}
