//! Part 1's classifier rows (Meridio-2's model, bpf/classify.h, stages
//! cls4/6): the first rule matching, 32 rules with only the last matching,
//! and no rule matching. Separate because they program a classifier of their
//! own, prove their path with the classifier's own counters, run in the FIB
//! namespace and remove the classifier before the rows after them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{Result, anyhow, bail, ensure};
use rivora_abi as abi;
use rivora_dataplane::SourceRange;
use rivora_dataplane::classifier::{
    ClassifierSpec, GroupSpec, PortRange, RuleProto, RuleSpec, SctpHash, TargetSpec,
};

use super::case::{Case, CaseResult, Expect, OutCheck, run_case, verdict_name};
#[cfg(doc)]
use super::harness::fib_lab;
use super::harness::{CLIENT4, CLIENT6, Hook, Rig, Slot, Vary, XDP_DROP, XDP_REDIRECT, addrs};
use crate::frames::{self, Frame, FrameSpec};

/// Labels of the classifier rows, in the order [`cls_cases`] returns them
/// (also the rows shown as not run when their setup fails).
pub(super) const CLS_LABELS: [&str; 5] = [
    "Classifier (Meridio-2) IPv4 TCP, first rule matches: no NAT, FIB lookup + redirect to the target",
    "Classifier IPv4 TCP, 32 rules, only the last matches (31 misses after a source-prefix hit and every port range scanned)",
    "Classifier IPv4 TCP, 32 rules, only the last matches (31 misses on the source prefix)",
    "Classifier (Meridio-2) IPv6 TCP, first rule matches: no NAT, FIB lookup + redirect to the target",
    "Classifier IPv4 TCP, no rule matches (dropped, counted)",
];

/// The classifier rows' VIPs: one rule for both families; 32 rules whose
/// 31 first hit the source prefix and miss on ports; 32 rules whose 31
/// first miss the source prefix.
const CLS_VIP4: &str = "10.200.103.1";
const CLS_VIP6: &str = "fd00:200:103::1";
const CLS_VIP4_32: &str = "10.200.103.2";
const CLS_VIP4_32_SRC: &str = "10.200.103.3";
/// The clients' source port in the classifier rows.
const CLS_SPORT: u16 = 43000;
/// On-link targets (slots 0..CLS_TARGETS of the group) in the FIB
/// namespace's up0 subnet.
const CLS_TARGETS: u8 = 4;

/// Target `i`: 10.200.9.(16 + i), fd00:200:9::(16 + i, in hex), and the MAC
/// of its permanent neighbour entries.
fn cls_target(i: u8) -> (Ipv4Addr, Ipv6Addr, [u8; 6]) {
    (
        Ipv4Addr::new(10, 200, 9, 16 + i),
        Ipv6Addr::new(0xfd00, 0x200, 9, 0, 0, 0, 0, u16::from(16 + i)),
        [0x02, 0xaa, 0, 0, 0, 16 + i],
    )
}

/// Destination port ranges of the 32-rule VIPs' rules: 19 below port 80
/// (each range test reads both bounds), then 80: the scan reaches the end
/// before it matches.
fn cls_dports() -> Vec<PortRange> {
    (0..19u16)
        .map(|k| PortRange {
            first: 1 + 3 * k,
            last: 2 + 3 * k,
        })
        .chain([PortRange {
            first: 80,
            last: 80,
        }])
        .collect()
}

/// Source port ranges of the 32-rule VIPs' rules: 19 below the clients'
/// port, then one that holds it (`hit`) or, again, one below it.
fn cls_sports(hit: bool) -> Vec<PortRange> {
    (0..19u16)
        .map(|k| PortRange {
            first: 1024 + 1000 * k,
            last: 1024 + 1000 * k + 499,
        })
        .chain([if hit {
            PortRange {
                first: 32768,
                last: 60999,
            }
        } else {
            PortRange {
                first: 20000,
                last: CLS_SPORT - 1,
            }
        }])
        .collect()
}

fn cls_rule(name: String, priority: i32, group: &str, vip: &[&str]) -> RuleSpec {
    RuleSpec {
        name,
        priority,
        group: group.into(),
        vips: addrs(vip),
        sources: vec![],
        source_ports: vec![],
        destination_ports: vec![],
        protocols: [RuleProto::Tcp].into_iter().collect(),
        byte_matches: vec![],
    }
}

/// The classifier the rows run against (rules and groups named in
/// [`cls_cases`]).
fn cls_spec() -> Result<ClassifierSpec> {
    let targets = (0..CLS_TARGETS)
        .map(|i| {
            let (v4, v6, _) = cls_target(i);
            TargetSpec {
                slot: u16::from(i),
                v4: Some(v4),
                v6: Some(v6),
            }
        })
        .collect();
    let client_net: SourceRange = "10.200.0.0/24".parse().map_err(|e: String| anyhow!(e))?;
    let mut rules = Vec::new();
    let mut first = cls_rule("a-first".into(), 10, "bench-targets", &[CLS_VIP4, CLS_VIP6]);
    first.destination_ports = vec![PortRange {
        first: 80,
        last: 80,
    }];
    rules.push(first);
    for (prefix, vip) in [("b", CLS_VIP4_32), ("b2", CLS_VIP4_32_SRC)] {
        for k in 0..31 {
            let mut r = cls_rule(
                format!("{prefix}-miss-{k:02}"),
                100 - k,
                "bench-spare",
                &[vip],
            );
            r.sources = vec![if prefix == "b" {
                client_net
            } else {
                format!("10.201.{k}.0/24")
                    .parse()
                    .map_err(|e: String| anyhow!(e))?
            }];
            r.destination_ports = cls_dports();
            r.source_ports = cls_sports(false);
            rules.push(r);
        }
        let mut last = cls_rule(format!("{prefix}-last"), 1, "bench-targets", &[vip]);
        last.sources = vec![client_net];
        last.destination_ports = cls_dports();
        last.source_ports = cls_sports(true);
        rules.push(last);
    }
    Ok(ClassifierSpec {
        groups: vec![
            // Meridio-2's default maxEndpoints: a 10,193-entry table.
            GroupSpec {
                name: "bench-targets".into(),
                max_endpoints: 102,
                sctp_hash: SctpHash::Ports,
                targets,
            },
            // The missing rules' group: never reached (its target has no
            // neighbour entry, so a packet sent there would be dropped and
            // counted as no_neighbour).
            GroupSpec {
                name: "bench-spare".into(),
                max_endpoints: 2,
                sctp_hash: SctpHash::Ports,
                targets: vec![TargetSpec {
                    slot: 0,
                    v4: Some(Ipv4Addr::new(10, 200, 9, 64)),
                    v6: None,
                }],
            },
        ],
        rules,
    })
}

/// One iteration through the harness before the timed runs: the verdict
/// must be `want`, or the error says which classifier events moved.
fn cls_warm(rig: &mut Rig, f: &Frame, want: u32) -> Result<()> {
    rig.set_frame(Hook::Xdp, f, Vary::No)?;
    rig.set_slot(Hook::Xdp, Slot::Real)?;
    let before = rig.snapshot(Hook::Xdp)?;
    let (v, _, _) = rig.harness_run(Hook::Xdp, &f.bytes, 1)?;
    if v != want {
        let after = rig.snapshot(Hook::Xdp)?;
        let moved: Vec<String> = after
            .cls_events
            .iter()
            .zip(&before.cls_events)
            .enumerate()
            .filter(|(_, (a, b))| a > b)
            .map(|(i, (a, b))| format!("{} +{}", abi::cls_event::NAMES[i], a - b))
            .collect();
        bail!(
            "warm-up verdict {}, expected {}; classifier events: {}",
            verdict_name(Hook::Xdp, v),
            verdict_name(Hook::Xdp, want),
            if moved.is_empty() {
                "none".to_string()
            } else {
                moved.join(", ")
            }
        );
    }
    Ok(())
}

/// One classifier row: frame, VIP, the rule that must match (None: none
/// may), verdict, output check, the evidence's description of the rules.
type ClsCaseSpec = (
    FrameSpec,
    &'static str,
    Option<&'static str>,
    u32,
    OutCheck,
    &'static str,
);

/// Part 1's rows for the classifier (bpf/classify.h, stages cls4/6):
/// programs [`cls_spec`] and times each case. The calling thread must be
/// in [`fib_lab`]'s namespace, with the targets' neighbour entries added
/// and `rig.ingress_ifindex` set: the classifier forwards only by
/// bpf_fib_lookup + redirect. Returns each row's label and result in the
/// order of [`CLS_LABELS`]; an error means the setup failed. The caller
/// removes the classifier afterwards.
fn cls_cases(rig: &mut Rig) -> Result<Vec<(&'static str, Result<CaseResult>)>> {
    let opts = rig.opts;
    rig.dp
        .apply_classifier(&cls_spec()?, true)
        .map_err(|e| anyhow!("programming the classifier: {e}"))?;
    let v4: Vec<(IpAddr, [u8; 6])> = (0..CLS_TARGETS)
        .map(cls_target)
        .map(|(a, _, m)| (IpAddr::V4(a), m))
        .collect();
    let v6: Vec<(IpAddr, [u8; 6])> = (0..CLS_TARGETS)
        .map(cls_target)
        .map(|(_, a, m)| (IpAddr::V6(a), m))
        .collect();
    let shape_hit = "; each of the 31 earlier rules: TCP, source 10.200.0.0/24 (its LPM lookup \
                     hits), 20 destination port ranges (the last holds 80, so all are read), 20 \
                     source port ranges (none holds the client's port): the most a rule without \
                     byte matches reads before it misses; the last rule the same, its 20th source \
                     range holding the port";
    let shape_src = "; each of the 31 earlier rules: TCP, source 10.201.k.0/24 (its LPM lookup \
                     misses and evaluation of the rule stops there), the same port ranges; the \
                     last rule as in the row above";
    // (frame, VIP, matching rule, verdict, output check, evidence).
    let specs: [ClsCaseSpec; 5] = [
        (
            FrameSpec::tcp(CLIENT4, CLS_SPORT, CLS_VIP4, 80),
            CLS_VIP4,
            Some("a-first"),
            XDP_REDIRECT,
            OutCheck::Routed(v4.clone()),
            "; one rule (TCP, destination port 80)",
        ),
        (
            FrameSpec::tcp(CLIENT4, CLS_SPORT, CLS_VIP4_32, 80),
            CLS_VIP4_32,
            Some("b-last"),
            XDP_REDIRECT,
            OutCheck::Routed(v4.clone()),
            shape_hit,
        ),
        (
            FrameSpec::tcp(CLIENT4, CLS_SPORT, CLS_VIP4_32_SRC, 80),
            CLS_VIP4_32_SRC,
            Some("b2-last"),
            XDP_REDIRECT,
            OutCheck::Routed(v4),
            shape_src,
        ),
        (
            FrameSpec::tcp(CLIENT6, CLS_SPORT, CLS_VIP6, 80),
            CLS_VIP6,
            Some("a-first"),
            XDP_REDIRECT,
            OutCheck::Routed(v6),
            "; one rule (TCP, destination port 80)",
        ),
        (
            FrameSpec::tcp(CLIENT4, CLS_SPORT, CLS_VIP4, 8080),
            CLS_VIP4,
            None,
            XDP_DROP,
            OutCheck::Unchanged,
            "; the VIP's one rule (TCP, destination port 80) misses on the port",
        ),
    ];
    let mut out = Vec::new();
    for ((spec, vip, rule, verdict, check, shape), label) in specs.into_iter().zip(CLS_LABELS) {
        let frame = frames::build(&spec);
        let c = Case {
            label: label.into(),
            hook: Hook::Xdp,
            expect: Expect::Cls {
                vip: vip.parse()?,
                rule: rule.map(String::from),
                group: rule.map(|_| "bench-targets".to_string()),
                frame_len: frame.bytes.len() as u64,
            },
            frame,
            vary: Vary::No,
            repeat: opts.repeat,
            want_retval: verdict,
            out: check,
            limit: 0.0,
        };
        let r = cls_warm(rig, &c.frame, verdict)
            .and_then(|_| run_case(rig, &c))
            .map(|mut r| {
                let group = if rule.is_some() {
                    "; group of 102 slots (Meridio-2's default: a 10,193-entry table), 4 on-link \
                     targets"
                } else {
                    ""
                };
                r.row.evidence.push_str(&format!(
                    "{shape}{group}; per core, the program alone: {:.1} Mpps (1 s / {:.1} ns; \
                     without the driver, and test_run does not transmit a redirected frame); \
                     no spec target",
                    if r.ns > 0.0 { 1e3 / r.ns } else { f64::NAN },
                    r.ns
                ));
                r
            });
        out.push((label, r));
    }
    Ok(out)
}

/// Runs [`cls_cases`] in the FIB namespace (adding the targets' permanent
/// neighbour entries on up0 first), then removes the classifier, so the
/// rows after these run as before: with no classifier VIP, xdp_ingress
/// reads one array entry per packet and never consults the classifier.
pub(super) fn cls_rows(
    rig: &mut Rig,
    fib: &Result<(rivora_lab::Netns, u32)>,
    cpu: usize,
) -> Result<Vec<(&'static str, Result<CaseResult>)>> {
    let rows = match fib {
        Ok((ns, ifindex)) => {
            let ifindex = *ifindex;
            let neighbours = (0..CLS_TARGETS).try_for_each(|i| {
                let (a4, a6, mac) = cls_target(i);
                let mac = mac
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(":");
                for a in [a4.to_string(), a6.to_string()] {
                    ns.run(&[
                        "ip",
                        "neigh",
                        "replace",
                        &a,
                        "lladdr",
                        &mac,
                        "dev",
                        "up0",
                        "nud",
                        "permanent",
                    ])?;
                }
                Ok::<_, anyhow::Error>(())
            });
            neighbours.and_then(|_| {
                let rig = &mut *rig;
                ns.within(move || {
                    let _ = crate::machine::pin_current_thread(cpu);
                    rig.ingress_ifindex = Some(ifindex);
                    let r = cls_cases(rig);
                    rig.ingress_ifindex = None;
                    r
                })
                .map_err(|e| anyhow!("{e}"))
                .and_then(|r| r)
            })
        }
        Err(e) => Err(anyhow!("no FIB namespace: {e}")),
    };
    rig.dp
        .apply_classifier(&ClassifierSpec::default(), true)
        .map_err(|e| anyhow!("removing the classifier: {e}"))?;
    let flags = rig.dp.maps().cls.ctl.get(&0, 0)?.flags;
    ensure!(
        flags == 0,
        "the classifier's families flags are {flags:#x} after removing it"
    );
    Ok(rows.unwrap_or_else(|e| {
        let e = crate::util::short_error(&e);
        CLS_LABELS
            .iter()
            .map(|l| (*l, Err(anyhow!("{e}"))))
            .collect()
    }))
}
