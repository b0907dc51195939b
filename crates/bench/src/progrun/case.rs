//! One row of part 1: what a family's case is ([`Case`]: frame, hook, the
//! path every iteration must take, the output expected), its measurement
//! against the floor, the counter proof of the path and the check of the
//! frame the last iteration left. Separate from `harness` because it judges
//! what the rig measured rather than measuring it; every family builds its
//! rows with it.

use std::net::IpAddr;

use anyhow::{Context, Result, bail, ensure};
use rivora_abi as abi;

use super::harness::{Hook, Rig, Slot, Snapshot, Timed, Vary, XDP_TX};
use crate::frames::{self, Frame};
use crate::report::Row;
use crate::stats::{fmt_count, fmt_ratio, ratio};

/// What every iteration of a case must have done, checked with counters.
#[derive(Clone, Debug)]
pub(super) enum Expect {
    /// Forwarded by xdp_ingress for `vip`; `new_flow`: an affinity miss.
    Forward {
        vip: String,
        new_flow: bool,
        /// A `drop_stats_map` event every iteration must also count (a
        /// "passed_*" path, which is not a drop).
        event: Option<&'static str>,
    },
    /// Not a VIP: no counter anywhere may move.
    Pass,
    /// A reply restored by tc_nat for `vip`.
    Reply { vip: String },
    /// Forwarded by xdp_ingress for `vip` to a backend on another node,
    /// source-translated (bpf/snat.h): the VIP's counters as for
    /// `Forward`, and `snat_stats_map`'s `forwarded` every iteration;
    /// `new_flow`: also a new flow that took a node port (`allocated`).
    Snat { vip: String, new_flow: bool },
    /// A translated flow's reply, turned back into `vip`'s (snat.h counts
    /// it in `snat_stats_map`'s `replied` and in the VIP's
    /// `reply_packets`, as tc_nat counts the replies it restores).
    SnatReply { vip: String },
    /// A packet to classifier VIP `vip` (bpf/classify.h). `rule`: the rule
    /// (and `group` its group) that must have forwarded every iteration,
    /// `frame_len` bytes each; None: matched no rule, dropped (`no_rule`).
    /// Every other classifier VIP, rule and group counter, every other
    /// `cls_event_map` counter and every NAT VIP counter must stay put.
    Cls {
        vip: IpAddr,
        rule: Option<String>,
        group: Option<String>,
        frame_len: u64,
    },
}

pub(super) fn delta(before: &Snapshot, after: &Snapshot, vip: &str) -> abi::VipStats {
    let get = |s: &Snapshot| {
        s.vips
            .iter()
            .find(|(n, _)| n == vip)
            .map(|(_, v)| *v)
            .unwrap_or_default()
    };
    let (b, a) = (get(before), get(after));
    abi::VipStats {
        packets: a.packets - b.packets,
        bytes: a.bytes - b.bytes,
        new_flows: a.new_flows - b.new_flows,
        drops: a.drops - b.drops,
        reply_packets: a.reply_packets - b.reply_packets,
        reply_bytes: a.reply_bytes - b.reply_bytes,
    }
}

/// After minus before, of the classifier counters listed under `key` (a
/// VIP, rule or group that appears in only one snapshot counts from 0).
fn cls_delta<K: PartialEq>(
    before: &[(K, abi::ClsStats)],
    after: &[(K, abi::ClsStats)],
    key: &K,
) -> abi::ClsStats {
    let get = |l: &[(K, abi::ClsStats)]| {
        l.iter()
            .find(|(k, _)| k == key)
            .map(|(_, s)| *s)
            .unwrap_or_default()
    };
    let (b, a) = (get(before), get(after));
    abi::ClsStats {
        packets: a.packets.wrapping_sub(b.packets),
        bytes: a.bytes.wrapping_sub(b.bytes),
        no_target: a.no_target.wrapping_sub(b.no_target),
        other: a.other.wrapping_sub(b.other),
    }
}

/// The classifier's part of [`prove`]: `vip`'s counters, `rule`'s and
/// `group`'s (None: no rule matched) moved by exactly `n` iterations and
/// nothing else of the classifier's moved.
fn prove_cls(
    b: &Snapshot,
    a: &Snapshot,
    n: u64,
    vip: &IpAddr,
    rule: Option<&str>,
    group: Option<&str>,
    frame_len: u64,
) -> Result<String> {
    let zero = abi::ClsStats::default();
    // Events: only `no_rule`, and only when no rule may match.
    for i in 0..abi::cls_event::COUNT as usize {
        let d =
            a.cls_events.get(i).copied().unwrap_or(0) - b.cls_events.get(i).copied().unwrap_or(0);
        let want = if rule.is_none() && i == abi::cls_event::NO_RULE as usize {
            n
        } else {
            0
        };
        ensure!(
            d == want,
            "cls_event_map: {} +{d}, expected +{want} for {n} iterations",
            abi::cls_event::NAMES[i]
        );
    }
    // The VIP, and no other.
    let dv = cls_delta(&b.cls_vips, &a.cls_vips, vip);
    let want_vip = match rule {
        Some(_) => abi::ClsStats {
            packets: n,
            bytes: n * frame_len,
            ..zero
        },
        None => abi::ClsStats { other: n, ..zero },
    };
    ensure!(
        dv == want_vip,
        "classifier VIP {vip}: {dv:?} for {n} iterations, expected {want_vip:?}"
    );
    for (other, _) in &a.cls_vips {
        if other != vip {
            let d = cls_delta(&b.cls_vips, &a.cls_vips, other);
            ensure!(d == zero, "classifier VIP {other} moved: {d:?}");
        }
    }
    // The rule that matched and its group, and no other rule or group.
    let fwd = abi::ClsStats {
        packets: n,
        bytes: n * frame_len,
        ..zero
    };
    for (list_b, list_a, named, what) in [
        (&b.cls_rules, &a.cls_rules, rule, "rule"),
        (&b.cls_groups, &a.cls_groups, group, "group"),
    ] {
        if let Some(name) = named {
            ensure!(
                list_a.iter().any(|(k, _)| k == name),
                "no classifier {what} {name} is programmed"
            );
        }
        for (k, _) in list_a {
            let d = cls_delta(list_b, list_a, k);
            let want = if Some(k.as_str()) == named { fwd } else { zero };
            ensure!(
                d == want,
                "classifier {what} {k}: {d:?} for {n} iterations, expected {want:?}"
            );
        }
    }
    let others = a.cls_rules.len().saturating_sub(1);
    Ok(match (rule, group) {
        (Some(rule), Some(group)) => format!(
            "{} iterations: classifier VIP packets +{} (bytes +{}), rule {rule} packets +{}, \
             group {group} packets +{}, the {others} other rules (of every classifier VIP) +0, \
             every cls_event_map counter +0",
            fmt_count(n as f64),
            fmt_count(dv.packets as f64),
            fmt_count(dv.bytes as f64),
            fmt_count(n as f64),
            fmt_count(n as f64),
        ),
        _ => format!(
            "{} iterations: cls_event_map no_rule +{} (every other event +0), classifier VIP \
             other +{}, packets +0, all {} rules and every group +0",
            fmt_count(n as f64),
            fmt_count(n as f64),
            fmt_count(dv.other as f64),
            a.cls_rules.len()
        ),
    })
}

/// Checks the counters against `expect`; returns the evidence text, or an
/// error naming what did not add up.
fn prove(t: &Timed, expect: &Expect) -> Result<String> {
    let n = t.iterations;
    let (b, a) = (&t.before, &t.after);
    let it = a.iterations - b.iterations;
    ensure!(
        it == t.harness_iterations,
        "harness counted {it} iterations, expected {} (measured + harness-only runs)",
        t.harness_iterations
    );
    ensure!(a.tailcall_miss == b.tailcall_miss, "tail calls missed");
    ensure!(a.restore_fail == b.restore_fail, "frame restores failed");
    let allowed = match expect {
        Expect::Forward {
            event: Some(name), ..
        } => abi::drop_reason::NAMES.iter().position(|n| n == name),
        _ => None,
    };
    let mut events = Vec::new();
    for (i, (x, y)) in a.drops.iter().zip(&b.drops).enumerate() {
        let d = x - y;
        let name = abi::drop_reason::NAMES.get(i).copied().unwrap_or("?");
        if Some(i) == allowed {
            ensure!(d == n, "{name} +{d} for {n} iterations");
            events.push(format!("{name} +{d}"));
        } else if d > 0 {
            bail!("drop_stats_map: {name} +{d}");
        }
    }
    // Source translation's counters: each must move by exactly what the
    // path predicts (nothing, for every path that is not a translated one).
    let mut want_snat = vec![0u64; abi::snat_counter::COUNT as usize];
    match expect {
        Expect::Snat { new_flow, .. } => {
            want_snat[abi::snat_counter::FORWARDED as usize] = n;
            if *new_flow {
                want_snat[abi::snat_counter::ALLOCATED as usize] = n;
            }
        }
        Expect::SnatReply { .. } => want_snat[abi::snat_counter::REPLIED as usize] = n,
        _ => {}
    }
    let mut snat_moved = Vec::new();
    for (i, want) in want_snat.iter().enumerate() {
        let d = a.snat.get(i).copied().unwrap_or(0) - b.snat.get(i).copied().unwrap_or(0);
        let name = abi::snat_counter::NAMES[i];
        ensure!(
            d == *want,
            "snat_stats_map: {name} +{d}, expected +{want} for {n} iterations"
        );
        if d > 0 {
            snat_moved.push(format!("snat {name} +{}", fmt_count(d as f64)));
        }
    }
    let snat_note = if snat_moved.is_empty() {
        String::new()
    } else {
        format!(", {} (every other snat counter +0)", snat_moved.join(", "))
    };
    let others_moved = |except: Option<&str>| {
        a.vips.iter().any(|(name, _)| {
            Some(name.as_str()) != except && {
                let d = delta(b, a, name);
                d.packets + d.new_flows + d.reply_packets + d.drops > 0
            }
        })
    };
    match expect {
        Expect::Forward { vip, new_flow, .. } | Expect::Snat { vip, new_flow } => {
            let d = delta(b, a, vip);
            ensure!(
                d.packets == n,
                "VIP {vip}: packets +{} for {n} iterations",
                d.packets
            );
            let want_new = if *new_flow { n } else { 0 };
            ensure!(
                d.new_flows == want_new,
                "VIP {vip}: new_flows +{} (expected +{want_new})",
                d.new_flows
            );
            ensure!(!others_moved(Some(vip)), "another VIP's counters moved");
            Ok(format!(
                "{} iterations: packets +{}, new_flows +{}, drops +0{}{snat_note}",
                fmt_count(n as f64),
                fmt_count(d.packets as f64),
                fmt_count(d.new_flows as f64),
                events.iter().map(|e| format!(", {e}")).collect::<String>()
            ))
        }
        Expect::SnatReply { vip } => {
            let d = delta(b, a, vip);
            ensure!(
                d.reply_packets == n && d.packets == 0 && d.drops == 0,
                "VIP {vip}: reply_packets +{}, packets +{}, drops +{} for {n} iterations",
                d.reply_packets,
                d.packets,
                d.drops
            );
            ensure!(!others_moved(Some(vip)), "another VIP's counters moved");
            Ok(format!(
                "{} iterations: VIP reply_packets +{}{snat_note}",
                fmt_count(n as f64),
                fmt_count(d.reply_packets as f64)
            ))
        }
        Expect::Reply { vip } => {
            let d = delta(b, a, vip);
            ensure!(
                d.reply_packets == n,
                "VIP {vip}: reply_packets +{} for {n} iterations",
                d.reply_packets
            );
            ensure!(!others_moved(Some(vip)), "another VIP's counters moved");
            Ok(format!(
                "{} iterations: reply_packets +{}",
                fmt_count(n as f64),
                fmt_count(d.reply_packets as f64)
            ))
        }
        Expect::Pass => {
            ensure!(!others_moved(None), "a VIP counter moved");
            Ok(format!(
                "{} iterations: no VIP or drop counter moved",
                fmt_count(n as f64)
            ))
        }
        Expect::Cls {
            vip,
            rule,
            group,
            frame_len,
        } => {
            ensure!(!others_moved(None), "a NAT VIP's counters moved");
            let ev = prove_cls(b, a, n, vip, rule.as_deref(), group.as_deref(), *frame_len)?;
            Ok(format!("{ev}, no NAT VIP, drop or snat counter moved"))
        }
    }
}

/// One case of the table.
pub(super) struct Case {
    pub(super) label: String,
    pub(super) hook: Hook,
    pub(super) frame: Frame,
    pub(super) vary: Vary,
    pub(super) expect: Expect,
    pub(super) repeat: u32,
    pub(super) want_retval: u32,
    /// Check of the output frame.
    pub(super) out: OutCheck,
    pub(super) limit: f64,
}

/// What the frame the last iteration left must look like.
pub(super) enum OutCheck {
    /// NAT: the destination is one of these backends.
    DstIn(Vec<IpAddr>),
    /// Egress: the source is the VIP again.
    SrcIs(IpAddr, u16),
    /// Pass-through: untouched.
    Unchanged,
    /// L2 DSR: destination IP still the VIP, destination MAC a backend's.
    DsrL2(IpAddr, Vec<[u8; 6]>),
    /// L3 DSR: an outer IPv4 header of this protocol (4 IPIP, 47 GRE)
    /// to one of these backends.
    Encap(u8, Vec<IpAddr>),
    /// Source translation (both directions rewrite both ends): exactly
    /// this source address with a port in `sports`, to one of `dsts` on
    /// a port in `dports`, sent to the next hop the FIB names (destination
    /// MAC).
    Translated {
        src: IpAddr,
        sports: std::ops::RangeInclusive<u16>,
        dsts: Vec<IpAddr>,
        dports: std::ops::RangeInclusive<u16>,
        next_hop: [u8; 6],
    },
    /// Routed without NAT (the classifier): the same addresses and ports,
    /// the same length, TTL / hop limit one lower, to the MAC of one of
    /// these targets (address, MAC).
    Routed(Vec<(IpAddr, [u8; 6])>),
}

pub(super) struct CaseResult {
    pub(super) row: Row,
    pub(super) ratio: f64,
    pub(super) ns: f64,
}

pub(super) fn run_case(rig: &mut Rig, c: &Case) -> Result<CaseResult> {
    // The floor on the same frame, over the same flows when the case
    // cycles through many (a new flow each time would only make the
    // floor's lookup miss: it keeps no state, so it gets the frame as is).
    let (floor_vary, keys) = match c.vary {
        Vary::Cycle(n) => (Vary::Cycle(n), n),
        _ => (Vary::No, 1),
    };
    rig.floor_key(c.hook, &c.frame, keys)?;
    // Same frame and flows for both: measure them in the same runs. New
    // flows too: the floor's runs then see the fixed frame.
    let (floor, t) = if floor_vary == c.vary && c.repeat == rig.opts.repeat {
        let (floor, t) = rig.timed_with_floor(c.hook, &c.frame, c.vary, Slot::Real, c.repeat)?;
        (floor, Some(t))
    } else if c.vary == Vary::New {
        let (floor, t) =
            rig.timed_with_floor_on(c.hook, &c.frame, c.vary, Slot::Real, c.repeat, true)?;
        (floor, Some(t))
    } else {
        let floor = rig.timed(c.hook, &c.frame, floor_vary, Slot::Floor, rig.opts.repeat)?;
        (floor, None)
    };
    let floor_ret = match c.hook {
        Hook::Xdp => XDP_TX,
        Hook::Tc => 0,
    };
    ensure!(
        floor.retval == floor_ret,
        "floor returned {} on this frame, expected {floor_ret}",
        floor.retval
    );
    let t = match t {
        Some(t) => t,
        None => rig.timed(c.hook, &c.frame, c.vary, Slot::Real, c.repeat)?,
    };
    ensure!(
        t.retval == c.want_retval,
        "verdict {} (expected {})",
        t.retval,
        c.want_retval
    );
    let proof = prove(&t, &c.expect)?;
    if let OutCheck::Encap(outer, set) = &c.out {
        // Ethernet + outer IPv4: protocol at byte 9, destination at 16.
        let ip = t.out.get(14..34).context("output frame too short")?;
        let dst = IpAddr::from(<[u8; 4]>::try_from(&ip[16..20]).unwrap());
        ensure!(
            ip[0] >> 4 == 4 && ip[9] == *outer && set.contains(&dst),
            "output is not IPv4 protocol {outer} to a backend"
        );
        let grew = t.out.len() as i64 - c.frame.bytes.len() as i64;
        return finish_case(
            c,
            &t,
            &floor,
            proof,
            format!("out: outer IPv4 protocol {outer} to {dst}, {grew:+} bytes"),
        );
    }
    let p = frames::parse_checked(&t.out).context("output frame")?;
    let out_note = match &c.out {
        OutCheck::DstIn(set) => {
            ensure!(
                set.contains(&p.dst),
                "output destination {} is not a backend",
                p.dst
            );
            format!("out: dst {}:{}, checksums ok", p.dst, p.dport)
        }
        OutCheck::SrcIs(addr, port) => {
            ensure!(
                (p.src, p.sport) == (*addr, *port),
                "reply source {}:{} is not the VIP",
                p.src,
                p.sport
            );
            format!("out: src {}:{}, checksums ok", p.src, p.sport)
        }
        OutCheck::Unchanged => {
            ensure!(t.out == c.frame.bytes, "frame changed");
            "out: frame unchanged".to_string()
        }
        OutCheck::DsrL2(vip, macs) => {
            ensure!(
                p.dst == *vip,
                "DSR output destination {} is not the VIP",
                p.dst
            );
            let mac: [u8; 6] = t.out[..6].try_into().unwrap();
            ensure!(macs.contains(&mac), "DSR output MAC is not a backend's");
            format!(
                "out: dst {} kept, dst MAC {} (a backend's)",
                p.dst,
                mac.iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(":")
            )
        }
        OutCheck::Translated {
            src,
            sports,
            dsts,
            dports,
            next_hop,
        } => {
            ensure!(
                p.src == *src && sports.contains(&p.sport),
                "translated source {}:{} is not {src} with a port in {}-{}",
                p.src,
                p.sport,
                sports.start(),
                sports.end()
            );
            ensure!(
                dsts.contains(&p.dst) && dports.contains(&p.dport),
                "translated destination {}:{} is not the expected one",
                p.dst,
                p.dport
            );
            ensure!(
                t.out[..6] == next_hop[..],
                "destination MAC is not the FIB's next hop"
            );
            format!(
                "out: src {}:{}, dst {}:{}, dst MAC the FIB's next hop, checksums ok",
                p.src, p.sport, p.dst, p.dport
            )
        }
        OutCheck::Routed(targets) => {
            let inp = frames::parse_checked(&c.frame.bytes)?;
            ensure!(
                t.out.len() == c.frame.bytes.len(),
                "routed frame is {} bytes, sent {} (no NAT, no encapsulation)",
                t.out.len(),
                c.frame.bytes.len()
            );
            ensure!(
                (p.src, p.sport, p.dst, p.dport) == (inp.src, inp.sport, inp.dst, inp.dport),
                "routed frame's addresses or ports changed: {}:{} -> {}:{}",
                p.src,
                p.sport,
                p.dst,
                p.dport
            );
            ensure!(
                p.ttl + 1 == inp.ttl,
                "TTL / hop limit {} after, {} before",
                p.ttl,
                inp.ttl
            );
            let mac: [u8; 6] = t.out[..6].try_into().unwrap();
            let to = targets
                .iter()
                .find(|(_, m)| *m == mac)
                .map(|(a, _)| *a)
                .context("destination MAC is no target's")?;
            format!(
                "out: dst {} kept (no NAT), TTL {} -> {}, dst MAC of target {to} (its permanent \
                 neighbour), checksums ok",
                p.dst, inp.ttl, p.ttl
            )
        }
        OutCheck::Encap(..) => unreachable!("handled above"),
    };
    finish_case(c, &t, &floor, proof, out_note)
}

fn finish_case(
    c: &Case,
    t: &Timed,
    floor: &Timed,
    proof: String,
    out_note: String,
) -> Result<CaseResult> {
    let r = t
        .ratio_to_floor
        .unwrap_or_else(|| ratio(t.net_ns, floor.net_ns));
    let mut row = Row::info(c.label.clone(), format!("{:.1} ns", t.net_ns)).ratio(fmt_ratio(r));
    if c.limit > 0.0 {
        row = row.target(format!("<= {:.0}x floor", c.limit), r <= c.limit);
    }
    let row = row.evidence(format!(
        "{proof}; verdict {}; {out_note}; runs' middle half {:.0}-{:.0} ns; floor on this frame \
             {:.1} ns; harness {:.1} ns subtracted",
        verdict_name(c.hook, t.retval),
        t.iqr.0,
        t.iqr.1,
        floor.net_ns,
        t.harness_ns
    ));
    Ok(CaseResult {
        row,
        ratio: r,
        ns: t.net_ns,
    })
}

pub(super) fn verdict_name(hook: Hook, v: u32) -> String {
    match (hook, v) {
        (Hook::Xdp, 0) => "XDP_ABORTED".into(),
        (Hook::Xdp, 1) => "XDP_DROP".into(),
        (Hook::Xdp, 2) => "XDP_PASS".into(),
        (Hook::Xdp, 3) => "XDP_TX".into(),
        (Hook::Xdp, 4) => "XDP_REDIRECT".into(),
        (Hook::Tc, u32::MAX) => "TCX_NEXT".into(),
        (Hook::Tc, 0) => "TCX_PASS".into(),
        (Hook::Tc, 2) => "TCX_DROP".into(),
        (_, v) => format!("{}", v as i32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(packets: u64, bytes: u64, other: u64) -> abi::ClsStats {
        abi::ClsStats {
            packets,
            bytes,
            no_target: 0,
            other,
        }
    }

    /// Counters of a classifier with VIP `vip`, rules `r1`, `r2` and group
    /// `g`; `events[no_rule]` as given.
    fn snap(vip: abi::ClsStats, r1: abi::ClsStats, r2: abi::ClsStats, no_rule: u64) -> Snapshot {
        let mut events = vec![0; abi::cls_event::COUNT as usize];
        events[abi::cls_event::NO_RULE as usize] = no_rule;
        Snapshot {
            cls_vips: vec![
                ("10.200.103.1".parse().unwrap(), vip),
                ("10.200.103.2".parse().unwrap(), abi::ClsStats::default()),
            ],
            cls_rules: vec![("r1".into(), r1), ("r2".into(), r2)],
            cls_groups: vec![("g".into(), r1)],
            cls_events: events,
            ..Snapshot::default()
        }
    }

    #[test]
    fn classifier_proof_accepts_only_the_intended_path() {
        let vip: IpAddr = "10.200.103.1".parse().unwrap();
        let zero = abi::ClsStats::default();
        let before = snap(zero, zero, zero, 0);
        // Forwarded by r1: 10 packets of 100 bytes.
        let fwd = snap(st(10, 1000, 0), st(10, 1000, 0), zero, 0);
        assert!(prove_cls(&before, &fwd, 10, &vip, Some("r1"), Some("g"), 100).is_ok());
        // Claimed for r2, or one iteration short, or the wrong length: refused.
        assert!(prove_cls(&before, &fwd, 10, &vip, Some("r2"), Some("g"), 100).is_err());
        assert!(prove_cls(&before, &fwd, 11, &vip, Some("r1"), Some("g"), 100).is_err());
        assert!(prove_cls(&before, &fwd, 10, &vip, Some("r1"), Some("g"), 90).is_err());
        // Another rule moved too: refused.
        let both = snap(st(10, 1000, 0), st(10, 1000, 0), st(1, 100, 0), 0);
        assert!(prove_cls(&before, &both, 10, &vip, Some("r1"), Some("g"), 100).is_err());
        // An event moved on a forwarded path: refused.
        let ev = snap(st(10, 1000, 0), st(10, 1000, 0), zero, 1);
        assert!(prove_cls(&before, &ev, 10, &vip, Some("r1"), Some("g"), 100).is_err());
        // No rule: no_rule and the VIP's `other`, nothing else.
        let none = snap(st(0, 0, 10), zero, zero, 10);
        assert!(prove_cls(&before, &none, 10, &vip, None, None, 100).is_ok());
        assert!(prove_cls(&before, &fwd, 10, &vip, None, None, 100).is_err());
        let short = snap(st(0, 0, 9), zero, zero, 10);
        assert!(prove_cls(&before, &short, 10, &vip, None, None, 100).is_err());
    }
}
