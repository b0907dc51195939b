//! `rivoractl rules` and `rivoractl groups`, and the classifier's part of
//! `rivoractl vips` (its VIPs' table) and of `rivoractl status` (one row).
//!
//! Separate because the classifier (Meridio-2's model: ordered rules sort a
//! VIP's packets into groups of targets) has its own API answer,
//! `GET /v1/classifier`, which no other view reads.

use std::fmt::Write as _;

use rivora_api::{ClassifierStatus, ClsCounters, VipInfo};

use super::NONE;
use super::format::{finish, human_bytes, right_align, table};
use super::vips::vips;

/// What rivoractl knows of the classifier for a summary: `Ok(None)` from a
/// rivorad without one (HTTP 501, or 404 from one older than the
/// endpoint), `Err` with the reason when reading it failed.
pub type ClassifierView = Result<Option<ClassifierStatus>, String>;

/// Whether the classifier has nothing to show.
fn classifier_is_empty(c: &ClassifierStatus) -> bool {
    c.vips.is_empty() && c.rules.is_empty() && c.groups.is_empty() && c.unclaimed_vips.is_empty()
}

/// The `Classifier` row of `rivoractl status`: `2 VIPs (1 ready), 3 rules,
/// 2 groups`; None where there is no classifier to speak of.
pub fn classifier_row(c: &ClassifierView) -> Option<String> {
    let c = match c {
        Ok(Some(c)) if !classifier_is_empty(c) => c,
        Ok(_) => return None,
        Err(e) => return Some(format!("cannot read: {e}")),
    };
    let ready = c.vips.iter().filter(|v| v.ready).count();
    let mut out = format!(
        "{} ({ready} ready), {}, {}",
        plural(c.vips.len(), "VIP"),
        plural(c.rules.len(), "rule"),
        plural(c.groups.len(), "group")
    );
    if !c.unclaimed_vips.is_empty() {
        let _ = write!(
            out,
            "; {} adopted and unclaimed",
            plural(c.unclaimed_vips.len(), "VIP")
        );
    }
    Some(out)
}

/// `1 rule`, `2 rules`.
fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// `rivoractl vips` with the classifier's VIPs after the others' tables
/// (only the classifier's when there are no others).
pub fn vips_with_classifier(list: &[VipInfo], c: &ClassifierView) -> String {
    match c {
        Ok(Some(c)) if !c.vips.is_empty() => {
            let mut out = if list.is_empty() {
                String::new()
            } else {
                let mut o = vips(list);
                o.push('\n');
                o
            };
            out.push_str(
                "Classifier VIPs (rules in evaluation order; see rivoractl rules and rivoractl groups):\n",
            );
            out.push_str(&classifier_vips(c));
            out
        }
        Err(e) => format!("{}\nClassifier: cannot read: {e}\n", vips(list)),
        Ok(_) => vips(list),
    }
}

/// The four counter cells of a classifier VIP, rule or group: packets,
/// bytes, drops for want of a target, other drops.
fn cls_counter_cells(c: &ClsCounters) -> [String; 4] {
    [
        c.packets.to_string(),
        human_bytes(c.bytes),
        c.no_target.to_string(),
        c.other.to_string(),
    ]
}

/// Headers of [`cls_counter_cells`].
const CLS_COUNTER_HEADERS: [&str; 4] = ["PACKETS", "BYTES", "NO-TARGET DROPS", "OTHER DROPS"];

/// Items joined with `, `, or `empty` when there are none.
fn joined_or(items: &[String], empty: &str) -> String {
    if items.is_empty() {
        empty.to_string()
    } else {
        items.join(", ")
    }
}

/// The classifier VIPs' table: whether each can forward, its rules in
/// evaluation order, and its counters.
fn classifier_vips(c: &ClassifierStatus) -> String {
    let mut t = table();
    let mut header = vec!["VIP", "READY", "RULES"];
    header.extend(CLS_COUNTER_HEADERS);
    t.set_header(header);
    for v in &c.vips {
        let mut row = vec![
            v.address.clone(),
            if v.ready {
                "yes".to_string()
            } else {
                "no (no target of its family)".to_string()
            },
            joined_or(&v.rules, NONE),
        ];
        row.extend(cls_counter_cells(&v.counters));
        t.add_row(row);
    }
    right_align(&mut t, &[3, 4, 5, 6]);
    finish(t)
}

/// The classifier's events that happened, `no_rule 7, no_target 5`, or
/// `none`.
fn classifier_events(c: &ClassifierStatus) -> String {
    let seen: Vec<String> = c
        .events
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(e, n)| format!("{e} {n}"))
        .collect();
    joined_or(&seen, "none")
}

/// `rivoractl rules`: one row per rule (highest priority first, as the
/// datapath tries them), then each VIP's rules in evaluation order with its
/// counters, then the classifier's events.
pub fn rules(c: &ClassifierStatus) -> String {
    let mut out = String::new();
    if c.rules.is_empty() {
        out.push_str("No classifier rules programmed.\n");
    } else {
        let mut list: Vec<_> = c.rules.iter().collect();
        list.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.name.cmp(&b.name))
        });
        // Columns most rules leave empty are shown only when one uses them.
        let show_sources = list.iter().any(|r| !r.sources.is_empty());
        let show_sports = list.iter().any(|r| !r.source_ports.is_empty());
        let show_bytes = list.iter().any(|r| !r.byte_matches.is_empty());
        let mut header = vec!["RULE", "PRIORITY", "GROUP", "VIPS", "PROTOCOLS"];
        if show_sources {
            header.push("SOURCES");
        }
        if show_sports {
            header.push("SOURCE PORTS");
        }
        header.push("DEST PORTS");
        if show_bytes {
            header.push("BYTE MATCHES");
        }
        let first_counter = header.len();
        header.extend(CLS_COUNTER_HEADERS);
        let mut t = table();
        t.set_header(header);
        for r in list {
            let mut row = vec![
                r.name.clone(),
                r.priority.to_string(),
                r.group.clone(),
                joined_or(&r.vips, NONE),
                r.protocols.join(","),
            ];
            if show_sources {
                row.push(joined_or(&r.sources, "any"));
            }
            if show_sports {
                row.push(joined_or(&r.source_ports, "any"));
            }
            row.push(joined_or(&r.destination_ports, "any"));
            if show_bytes {
                row.push(joined_or(&r.byte_matches, NONE));
            }
            row.extend(cls_counter_cells(&r.counters));
            t.add_row(row);
        }
        let mut right = vec![1];
        right.extend(first_counter..first_counter + 4);
        right_align(&mut t, &right);
        out.push_str(&finish(t));
    }
    if !c.vips.is_empty() {
        out.push_str("\nRules per VIP, in evaluation order (the first that matches wins):\n");
        out.push_str(&classifier_vips(c));
    }
    if !c.unclaimed_vips.is_empty() {
        let _ = writeln!(
            out,
            "Adopted from pinned maps and not claimed yet (forwarding with an earlier rivorad's rules): {}",
            c.unclaimed_vips.join(", ")
        );
    }
    if !classifier_is_empty(c) {
        let _ = writeln!(out, "Classifier events: {}", classifier_events(c));
    }
    out
}

/// `rivoractl groups`: one row per group (slots, table length, targets per
/// family, the rules that lead to it, counters), then every group's targets
/// by slot.
pub fn groups(c: &ClassifierStatus) -> String {
    if c.groups.is_empty() {
        return "No classifier groups programmed.\n".into();
    }
    let mut t = table();
    let mut header = vec![
        "GROUP",
        "SLOTS",
        "TABLE SIZE",
        "SCTP HASH",
        "IPV4 TARGETS",
        "IPV6 TARGETS",
        "RULES",
    ];
    header.extend(CLS_COUNTER_HEADERS);
    t.set_header(header);
    for g in &c.groups {
        let rules: Vec<String> = c
            .rules
            .iter()
            .filter(|r| r.group == g.name)
            .map(|r| r.name.clone())
            .collect();
        let mut row = vec![
            g.name.clone(),
            g.max_endpoints.to_string(),
            g.table_size.to_string(),
            g.sctp_hash.clone(),
            g.slots_v4.to_string(),
            g.slots_v6.to_string(),
            joined_or(&rules, NONE),
        ];
        row.extend(cls_counter_cells(&g.counters));
        t.add_row(row);
    }
    right_align(&mut t, &[1, 2, 4, 5, 7, 8, 9, 10]);

    let mut s = table();
    s.set_header(vec!["GROUP", "SLOT", "IPV4", "IPV6"]);
    for g in &c.groups {
        if g.targets.is_empty() {
            s.add_row(vec![g.name.as_str(), "(no targets)", NONE, NONE]);
        }
        for tg in &g.targets {
            s.add_row(vec![
                g.name.clone(),
                tg.slot.to_string(),
                tg.v4.clone().unwrap_or_else(|| NONE.to_string()),
                tg.v6.clone().unwrap_or_else(|| NONE.to_string()),
            ]);
        }
    }

    let mut out = finish(t);
    out.push_str("\nTargets per group (a target always takes its slot):\n");
    out.push_str(&finish(s));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::test_support::{row, rows, sample_status, sample_vips};
    use crate::render::{status, status_with};

    fn cls_counters(packets: u64, bytes: u64, no_target: u64, other: u64) -> ClsCounters {
        ClsCounters {
            packets,
            bytes,
            no_target,
            other,
        }
    }

    /// Two groups (one without targets), three rules (one with every kind
    /// of match), two VIPs (one that cannot forward).
    fn sample_classifier() -> ClassifierStatus {
        use rivora_api::{ClsGroupInfo, ClsRuleInfo, ClsTargetInfo, ClsVipInfo};
        let rule = |name: &str, priority: i32, group: &str, vips: &[&str]| ClsRuleInfo {
            name: name.into(),
            rule_id: priority as u32,
            priority,
            group: group.into(),
            vips: vips.iter().map(|v| v.to_string()).collect(),
            sources: vec![],
            source_ports: vec![],
            destination_ports: vec![],
            protocols: vec!["TCP".into(), "UDP".into()],
            byte_matches: vec![],
            counters: ClsCounters::default(),
        };
        let mut web = rule("web", 10, "dg-a", &["10.200.100.5", "fd00:200:100::5"]);
        web.destination_ports = vec!["80".into()];
        web.counters = cls_counters(1_234, 150_000, 0, 2);
        let mut range = rule("udp-range", 20, "dg-b", &["10.200.100.5"]);
        range.protocols = vec!["UDP".into()];
        range.destination_ports = vec!["9000-9100".into()];
        range.counters = cls_counters(0, 0, 5, 0);
        let mut sctp = rule("ns/sctp", 10, "dg-a", &["fd00:200:100::9"]);
        sctp.protocols = vec!["SCTP".into()];
        sctp.sources = vec!["192.0.2.0/24".into(), "2001:db8::/32".into()];
        sctp.source_ports = vec!["1024-65535".into()];
        sctp.byte_matches = vec!["sctp[4:4]=0".into()];
        ClassifierStatus {
            vips: vec![
                ClsVipInfo {
                    address: "10.200.100.5".into(),
                    stats_id: 0,
                    rules: vec!["udp-range".into(), "web".into()],
                    ready: true,
                    counters: cls_counters(1_000, 140_000, 5, 7),
                },
                ClsVipInfo {
                    address: "fd00:200:100::9".into(),
                    stats_id: 1,
                    rules: vec!["ns/sctp".into()],
                    ready: false,
                    counters: ClsCounters::default(),
                },
            ],
            rules: vec![sctp, range, web],
            groups: vec![
                ClsGroupInfo {
                    name: "dg-a".into(),
                    group_id: 0,
                    max_endpoints: 32,
                    table_size: 3191,
                    sctp_hash: "ports".into(),
                    targets: vec![
                        ClsTargetInfo {
                            slot: 0,
                            v4: Some("10.200.1.11".into()),
                            v6: Some("fd00:200:1::11".into()),
                        },
                        ClsTargetInfo {
                            slot: 7,
                            v4: Some("10.200.1.12".into()),
                            v6: None,
                        },
                    ],
                    slots_v4: 2,
                    slots_v6: 1,
                    counters: cls_counters(1_234, 150_000, 0, 2),
                },
                ClsGroupInfo {
                    name: "dg-b".into(),
                    group_id: 1,
                    max_endpoints: 8,
                    table_size: 797,
                    sctp_hash: "five-tuple".into(),
                    targets: vec![],
                    slots_v4: 0,
                    slots_v6: 0,
                    counters: cls_counters(0, 0, 5, 0),
                },
            ],
            events: [("no_rule", 7), ("no_target", 5), ("echo", 0)]
                .map(|(e, n)| (e.to_string(), n))
                .into(),
            unclaimed_vips: vec![],
        }
    }

    #[test]
    fn rules_table_in_priority_order_with_counters() {
        let out = rules(&sample_classifier());
        println!("{out}");
        assert_eq!(
            row(&out, "RULE"),
            [
                "RULE",
                "PRIORITY",
                "GROUP",
                "VIPS",
                "PROTOCOLS",
                "SOURCES",
                "SOURCE PORTS",
                "DEST PORTS",
                "BYTE MATCHES",
                "PACKETS",
                "BYTES",
                "NO-TARGET DROPS",
                "OTHER DROPS"
            ]
        );
        // Highest priority first, then by name.
        let names: Vec<String> = out
            .lines()
            .filter(|l| l.starts_with('|'))
            .map(|l| {
                l.trim_matches('|')
                    .split('|')
                    .next()
                    .unwrap()
                    .trim()
                    .to_string()
            })
            .take_while(|n| n != "VIP")
            .skip(1)
            .collect();
        assert_eq!(names, ["udp-range", "ns/sctp", "web"]);
        assert_eq!(
            row(&out, "web"),
            [
                "web",
                "10",
                "dg-a",
                "10.200.100.5, fd00:200:100::5",
                "TCP,UDP",
                "any",
                "any",
                "80",
                "-",
                "1234",
                "146.5 KiB",
                "0",
                "2"
            ]
        );
        assert_eq!(
            row(&out, "ns/sctp")[4..9],
            [
                "SCTP",
                "192.0.2.0/24, 2001:db8::/32",
                "1024-65535",
                "any",
                "sctp[4:4]=0"
            ]
        );
        assert_eq!(row(&out, "udp-range")[9..], ["0", "0 B", "5", "0"]);
        // Each VIP's rules in evaluation order, whether it forwards, counters.
        assert!(
            out.contains("\nRules per VIP, in evaluation order (the first that matches wins):\n")
        );
        assert_eq!(
            row(&out, "VIP"),
            [
                "VIP",
                "READY",
                "RULES",
                "PACKETS",
                "BYTES",
                "NO-TARGET DROPS",
                "OTHER DROPS"
            ]
        );
        assert_eq!(
            row(&out, "10.200.100.5"),
            [
                "10.200.100.5",
                "yes",
                "udp-range, web",
                "1000",
                "136.7 KiB",
                "5",
                "7"
            ]
        );
        assert_eq!(
            row(&out, "fd00:200:100::9")[1],
            "no (no target of its family)"
        );
        // Events that happened, by name.
        assert!(
            out.ends_with("Classifier events: no_rule 7, no_target 5\n"),
            "{out}"
        );
    }

    #[test]
    fn rules_table_hides_match_columns_no_rule_uses() {
        let mut c = sample_classifier();
        c.rules.retain(|r| r.name != "ns/sctp");
        c.vips.truncate(1);
        c.events.clear();
        let out = rules(&c);
        println!("{out}");
        assert_eq!(
            row(&out, "RULE")[..6],
            [
                "RULE",
                "PRIORITY",
                "GROUP",
                "VIPS",
                "PROTOCOLS",
                "DEST PORTS"
            ]
        );
        assert_eq!(row(&out, "web")[5], "80");
        assert!(out.ends_with("Classifier events: none\n"), "{out}");
        c.unclaimed_vips = vec!["10.9.9.9".into()];
        assert!(rules(&c).contains(
            "Adopted from pinned maps and not claimed yet (forwarding with an earlier rivorad's rules): 10.9.9.9\n"
        ));
        assert_eq!(
            rules(&ClassifierStatus::default()),
            "No classifier rules programmed.\n"
        );
    }

    #[test]
    fn groups_table_and_targets() {
        let out = groups(&sample_classifier());
        println!("{out}");
        assert_eq!(
            row(&out, "GROUP"),
            [
                "GROUP",
                "SLOTS",
                "TABLE SIZE",
                "SCTP HASH",
                "IPV4 TARGETS",
                "IPV6 TARGETS",
                "RULES",
                "PACKETS",
                "BYTES",
                "NO-TARGET DROPS",
                "OTHER DROPS"
            ]
        );
        let a = rows(&out, "dg-a");
        assert_eq!(
            a[0],
            [
                "dg-a",
                "32",
                "3191",
                "ports",
                "2",
                "1",
                "ns/sctp, web",
                "1234",
                "146.5 KiB",
                "0",
                "2"
            ]
        );
        let b = rows(&out, "dg-b");
        assert_eq!(
            b[0],
            [
                "dg-b",
                "8",
                "797",
                "five-tuple",
                "0",
                "0",
                "udp-range",
                "0",
                "0 B",
                "5",
                "0"
            ]
        );
        // The targets table, by slot; a group without any says so.
        assert!(out.contains("\nTargets per group (a target always takes its slot):\n"));
        assert_eq!(a[1], ["dg-a", "0", "10.200.1.11", "fd00:200:1::11"]);
        assert_eq!(a[2], ["dg-a", "7", "10.200.1.12", "-"]);
        assert_eq!(b[1], ["dg-b", "(no targets)", "-", "-"]);
        assert_eq!(
            groups(&ClassifierStatus::default()),
            "No classifier groups programmed.\n"
        );
    }

    #[test]
    fn vips_and_status_show_the_classifier_when_there_is_one() {
        let c = sample_classifier();
        // After the other VIPs' tables.
        let out = vips_with_classifier(&sample_vips(), &Ok(Some(c.clone())));
        println!("{out}");
        assert!(out.starts_with(&vips(&sample_vips())), "{out}");
        assert!(out.contains(
            "\nClassifier VIPs (rules in evaluation order; see rivoractl rules and rivoractl groups):\n"
        ));
        assert_eq!(row(&out, "10.200.100.5")[2], "udp-range, web");
        // Alone when there are no others (not "No VIPs configured.").
        let alone = vips_with_classifier(&[], &Ok(Some(c.clone())));
        assert!(alone.starts_with("Classifier VIPs "), "{alone}");
        // No classifier (a rivorad without one, or an empty one): unchanged.
        assert_eq!(
            vips_with_classifier(&sample_vips(), &Ok(None)),
            vips(&sample_vips())
        );
        assert_eq!(
            vips_with_classifier(&[], &Ok(Some(ClassifierStatus::default()))),
            "No VIPs configured.\n"
        );
        assert!(
            vips_with_classifier(&[], &Err("HTTP 500: map".into()))
                .ends_with("\nClassifier: cannot read: HTTP 500: map\n")
        );

        assert_eq!(
            classifier_row(&Ok(Some(c.clone()))).as_deref(),
            Some("2 VIPs (1 ready), 3 rules, 2 groups")
        );
        let mut one = c.clone();
        one.vips.truncate(1);
        one.rules.truncate(1);
        one.groups.truncate(1);
        one.unclaimed_vips = vec!["10.9.9.9".into()];
        assert_eq!(
            classifier_row(&Ok(Some(one))).as_deref(),
            Some("1 VIP (1 ready), 1 rule, 1 group; 1 VIP adopted and unclaimed")
        );
        assert_eq!(classifier_row(&Ok(None)), None);
        assert_eq!(classifier_row(&Ok(Some(ClassifierStatus::default()))), None);
        let s = sample_status();
        let out = status_with(&s, classifier_row(&Ok(Some(c))), 1_700_003_660);
        assert_eq!(
            row(&out, "Classifier"),
            ["Classifier", "2 VIPs (1 ready), 3 rules, 2 groups"]
        );
        assert_eq!(
            status_with(&s, None, 1_700_003_660),
            status(&s, 1_700_003_660)
        );
        assert!(!status(&s, 1_700_003_660).contains("Classifier"));
    }
}
