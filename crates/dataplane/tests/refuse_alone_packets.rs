//! Refuse-alone mode (the Kubernetes source) for every per-VIP rule and capacity besides the
//! Maglev table, backend IDs and the service table (table_share_packets.rs): a VIP that breaks
//! a rule of its own (too many source ranges, a weight of 0, a DSR backend without a MAC), needs
//! a node address that is not set (an L3 DSR VIP without a tunnel source), overlaps another's
//! port range or finds no room in the range or source-range tries is refused alone, named with
//! the reason; a programmed one keeps forwarding as it was; every other change reaches the
//! datapath (checked with packets through the real program). Strict mode (the YAML file)
//! refuses each of these states whole, as before.

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;

use common::*;
use rivora_abi as abi;
use rivora_dataplane::{Mode, SourceRange, VipSpec, proto};

/// An exact NAT VIP `name` at 10.230.0.`host`:80 with three backends 10.231.`host`.`first..`.
fn web(name: &str, host: u8, first: u8) -> VipSpec {
    vip(
        name,
        &format!("10.230.0.{host}"),
        80,
        proto::TCP,
        (first..first + 3)
            .map(|b| backend(&format!("10.231.{host}.{b}"), 8080, 1))
            .collect(),
    )
}

/// `n` distinct /32 source ranges starting at 10.`base`.0.0.
fn sources(base: u8, n: u32) -> Option<Vec<SourceRange>> {
    Some(
        (0..n)
            .map(|i| SourceRange::new(IpAddr::from([10, base, (i / 256) as u8, i as u8]), 32))
            .collect(),
    )
}

/// The backends 64 new flows to 10.230.0.`host`:80 reach (from a source every range admits
/// or, with `from`, that source).
fn picks(r: &mut Rig, host: u8, from: &str) -> BTreeSet<String> {
    (0..64u16)
        .filter_map(|i| {
            let f = FrameSpec::new(from, 20000 + i, &format!("10.230.0.{host}"), 80, proto::TCP)
                .syn()
                .build();
            let (v, out) = r.datapath.run_xdp(&f).unwrap();
            (v == XDP_PASS && out != f).then(|| parse_checked(&out).dst.to_string())
        })
        .collect()
}

fn set(addrs: &[&str]) -> BTreeSet<String> {
    addrs.iter().map(|a| a.to_string()).collect()
}

/// A VIP with more source ranges than one VIP may list, a backend of weight 0, and a DSR VIP
/// whose backend has no MAC: each refused alone, named with its rule; the good VIP beside them
/// is programmed, and its later backend change is too.
#[test]
fn vips_that_break_their_own_rules_are_refused_alone() {
    let mut too_many = web("too-many", 2, 1);
    too_many.source_ranges = sources(50, abi::MAX_SRC_RANGES_PER_VIP + 1);
    let mut weight0 = web("weight0", 3, 1);
    weight0.backends[1].weight = 0;
    let mut no_mac = web("no-mac", 4, 1);
    no_mac.mode = Mode::Dsr;
    for b in &mut no_mac.backends {
        b.key.port = 80;
    }
    let state = |good: VipSpec| vec![good, too_many.clone(), weight0.clone(), no_mac.clone()];

    let mut strict = rig("ownrules-strict");
    let err = strict
        .dataplane
        .apply(&state(web("good", 1, 1)))
        .unwrap_err();
    assert!(err.to_string().contains("VIP "), "{err}");
    assert_eq!(
        strict.dataplane.vips().count(),
        0,
        "strict: nothing applied"
    );
    drop(strict);

    let mut r = rig("ownrules-alone");
    r.dataplane.set_refuse_alone(true);
    let report = r.dataplane.apply(&state(web("good", 1, 1))).unwrap();
    assert_eq!(report.added, ["good"], "{report}");
    let reasons: Vec<(String, String)> = report
        .refused
        .iter()
        .map(|v| (v.name.clone(), v.reason.clone()))
        .collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    let reason = |name: &str| {
        reasons
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, r)| r.as_str())
            .unwrap_or_else(|| panic!("{name} not refused: {reasons:?}"))
    };
    assert!(
        reason("too-many").contains("257 distinct ranges, at most 256 per VIP"),
        "{reasons:?}"
    );
    assert!(reason("weight0").contains("has weight 0"), "{reasons:?}");
    assert!(
        reason("no-mac").contains("needs a mac in mode dsr"),
        "{reasons:?}"
    );
    assert!(report.to_string().contains("refused "), "{report}");
    assert_eq!(r.dataplane.refused().len(), 3);
    assert_eq!(
        picks(&mut r, 1, "10.232.0.9"),
        set(&["10.231.1.1", "10.231.1.2", "10.231.1.3"])
    );
    assert!(
        picks(&mut r, 2, "10.50.0.1").is_empty(),
        "too-many is not programmed"
    );
    // The good VIP's backends move on while the others stay refused.
    let report = r.dataplane.apply(&state(web("good", 1, 4))).unwrap();
    assert_eq!(report.rebuilt, ["good"], "{report}");
    assert_eq!(report.refused.len(), 3, "{report}");
    assert_eq!(
        picks(&mut r, 1, "10.232.0.9"),
        set(&["10.231.1.4", "10.231.1.5", "10.231.1.6"])
    );
    // Fixed, they are programmed; nothing is refused any more.
    let mut fixed = web("too-many", 2, 1);
    fixed.source_ranges = sources(50, abi::MAX_SRC_RANGES_PER_VIP);
    let report = r
        .dataplane
        .apply(&[web("good", 1, 4), fixed, web("weight0", 3, 1)])
        .unwrap();
    assert!(report.refused.is_empty(), "{report}");
    assert_eq!(
        picks(&mut r, 2, "10.50.0.1"),
        set(&["10.231.2.1", "10.231.2.2", "10.231.2.3"])
    );
}

/// A programmed VIP whose new spec breaks a rule keeps forwarding exactly as programmed; an L3
/// DSR VIP without a tunnel source is refused alone (strict mode refuses the whole state).
#[test]
fn a_programmed_vip_refused_keeps_forwarding_as_it_was() {
    let mut r = rig("keepprog-alone");
    r.dataplane.set_refuse_alone(true);
    r.dataplane
        .apply(&[web("a", 1, 1), web("b", 2, 1)])
        .unwrap();
    let mut bad_a = web("a", 1, 4);
    bad_a.backends[0].weight = 0;
    let mut ipip = web("tunnel", 3, 1);
    ipip.mode = Mode::DsrIpip;
    for b in &mut ipip.backends {
        b.key.port = 80;
    }
    let report = r
        .dataplane
        .apply(&[bad_a.clone(), web("b", 2, 4), ipip.clone()])
        .unwrap();
    assert_eq!(report.rebuilt, ["b"], "{report}");
    let refused: BTreeSet<&str> = report.refused.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(refused, BTreeSet::from(["a", "tunnel"]), "{report}");
    let tunnel = report.refused.iter().find(|v| v.name == "tunnel").unwrap();
    assert!(
        tunnel.reason.contains("needs an IPv4 tunnelSource"),
        "{}",
        tunnel.reason
    );
    assert_eq!(
        picks(&mut r, 1, "10.232.0.9"),
        set(&["10.231.1.1", "10.231.1.2", "10.231.1.3"]),
        "a forwards as programmed"
    );
    assert_eq!(
        picks(&mut r, 2, "10.232.0.9"),
        set(&["10.231.2.4", "10.231.2.5", "10.231.2.6"])
    );
    let a = r
        .dataplane
        .vips()
        .find(|v| v.spec.key == bad_a.key)
        .unwrap();
    assert_eq!(a.spec.name, "a", "a keeps its name");

    let mut strict = rig("keepprog-strict");
    strict.dataplane.apply(&[web("b", 2, 1)]).unwrap();
    let err = strict
        .dataplane
        .apply(&[web("b", 2, 4), ipip])
        .unwrap_err()
        .to_string();
    assert!(err.contains("tunnelSource"), "{err}");
    assert_eq!(
        picks(&mut strict, 2, "10.232.0.9"),
        set(&["10.231.2.1", "10.231.2.2", "10.231.2.3"]),
        "strict: nothing applied"
    );
}

/// Port ranges: a new range overlapping a programmed one is refused alone (the programmed one
/// keeps its ports), and so are the range VIPs beyond the range trie's room.
#[test]
fn overlapping_ranges_and_a_full_range_trie_refuse_the_newcomers_alone() {
    let backends = |host: u8| {
        (1..=2)
            .map(|b| backend(&format!("10.233.{host}.{b}"), 0, 1))
            .collect::<Vec<_>>()
    };
    let mut r = rig("ranges-alone");
    r.dataplane.set_refuse_alone(true);
    let low = range_vip("low", "10.234.0.1", 1000, 1999, proto::UDP, backends(1));
    r.dataplane.apply(std::slice::from_ref(&low)).unwrap();
    let clash = range_vip("clash", "10.234.0.1", 1500, 2500, proto::UDP, backends(2));
    let next = range_vip("next", "10.234.0.1", 2000, 2999, proto::UDP, backends(3));
    let report = r
        .dataplane
        .apply(&[low.clone(), clash, next.clone()])
        .unwrap();
    assert_eq!(report.added, ["next"], "{report}");
    assert_eq!(report.refused.len(), 1, "{report}");
    assert_eq!(report.refused[0].name, "clash");
    assert!(
        report.refused[0].reason.contains("overlaps VIP low"),
        "{}",
        report.refused[0].reason
    );

    // Ports 1..=65534 take 30 prefixes each: 546 such VIPs fill 16,380 of the 16,384.
    let wide = |i: u32| {
        range_vip(
            &format!("wide-{i}"),
            &format!("10.235.{}.{}", i / 250, i % 250 + 1),
            1,
            65534,
            proto::TCP,
            backends(9),
        )
    };
    let mut all = vec![low, next];
    all.extend((0..550).map(wide));
    let report = r.dataplane.apply(&all).unwrap();
    let own = |a: u16, b: u16| rivora_dataplane::writer::port_range_prefixes(a, b).len();
    let room = abi::MAX_RANGE_PREFIXES as usize - own(1000, 1999) - own(2000, 2999);
    let fit = room / own(1, 65534);
    assert!(fit < 550, "the test must overfill the trie");
    let refused: Vec<&str> = report.refused.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(refused.len(), 550 - fit, "{refused:?}");
    assert!(
        report
            .refused
            .iter()
            .all(|v| v.reason.contains("vip_range_map")
                && v.reason.contains(&abi::MAX_RANGE_PREFIXES.to_string())),
        "{report}"
    );
    assert_eq!(r.dataplane.vips().count(), 2 + fit);
}

/// The source-range trie shared by all VIPs of a family (16,384 prefixes): VIPs of 256
/// ranges each fill it; the ones beyond are refused alone, those programmed keep theirs, and
/// a programmed VIP's change still applies.
#[test]
fn vips_beyond_the_source_range_trie_are_refused_alone() {
    let limited = |i: u32| {
        let mut v = web(&format!("lim-{i}"), 10, 1);
        v.key = rivora_dataplane::VipKey::exact(
            IpAddr::from([10, 236, (i / 250) as u8, (i % 250 + 1) as u8]),
            80,
            proto::TCP,
        );
        v.source_ranges = sources(60 + (i % 100) as u8, abi::MAX_SRC_RANGES_PER_VIP);
        v
    };
    let fit = abi::MAX_SRC_RANGES / abi::MAX_SRC_RANGES_PER_VIP;
    let mut r = rig("srctrie-alone");
    r.dataplane.set_refuse_alone(true);
    let all: Vec<VipSpec> = (0..fit + 2)
        .map(limited)
        .chain([web("plain", 1, 1)])
        .collect();
    let report = r.dataplane.apply(&all).unwrap();
    assert_eq!(report.refused.len(), 2, "{report}");
    assert!(
        report
            .refused
            .iter()
            .all(|v| v.reason.contains("src_range_map") && v.reason.contains("16384")),
        "{report}"
    );
    assert_eq!(r.dataplane.vips().count() as u32, fit + 1);
    // plain (no ranges) changes while the two stay refused.
    let mut changed = all.clone();
    *changed.last_mut().unwrap() = web("plain", 1, 4);
    let report = r.dataplane.apply(&changed).unwrap();
    assert_eq!(report.rebuilt, ["plain"], "{report}");
    assert_eq!(report.refused.len(), 2, "{report}");
    assert_eq!(
        picks(&mut r, 1, "10.232.0.9"),
        set(&["10.231.1.4", "10.231.1.5", "10.231.1.6"])
    );

    let mut strict = rig("srctrie-strict");
    let err = strict.dataplane.apply(&all).unwrap_err().to_string();
    assert!(err.contains("src_range_map"), "{err}");
}
