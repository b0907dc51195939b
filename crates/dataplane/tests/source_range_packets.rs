//! loadBalancerSourceRanges through the real programs (BPF_PROG_TEST_RUN),
//! the maps written by the real map writer, the frames read back by the
//! independent parser: a VIP with source ranges is reached only from inside
//! them, the others are dropped and counted (node-wide and per VIP, with the
//! reason), before the SYN limit spends anything on them; a changed list
//! switches banks in one update, and nothing of a removed VIP stays behind.

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;

use common::*;
use rivora_abi as abi;
use rivora_dataplane::{BackendKey, Error, RateLimit, SourceRange, VipSpec, proto};

const VIP4: &str = "10.210.100.1";
const VIP6: &str = "fd00:210:100::1";

fn ranges(list: &[&str]) -> Option<Vec<SourceRange>> {
    Some(list.iter().map(|s| s.parse().unwrap()).collect())
}

fn vip4(list: Option<Vec<SourceRange>>) -> VipSpec {
    let mut v = vip(
        "web4",
        VIP4,
        80,
        proto::TCP,
        vec![
            backend("10.210.1.11", 8080, 1),
            backend("10.210.1.12", 8080, 1),
        ],
    );
    v.source_ranges = list;
    v
}

fn vip6(list: Option<Vec<SourceRange>>) -> VipSpec {
    let mut v = vip(
        "web6",
        VIP6,
        80,
        proto::TCP,
        vec![backend("fd00:210:1::11", 8080, 1)],
    );
    v.source_ranges = list;
    v
}

/// Runs `f` through xdp_ingress: Some(backend) when it was forwarded (NAT:
/// XDP_PASS with the destination rewritten, checked by the parser), None
/// when it was dropped.
fn send(r: &mut Rig, f: &FrameSpec) -> Option<BackendKey> {
    let (verdict, out) = r.datapath.run_xdp(&f.build()).unwrap();
    match verdict {
        XDP_DROP => None,
        XDP_PASS => {
            let p = parse_checked(&out);
            assert_eq!((p.src, p.sport), (f.src, f.sport), "source kept");
            assert_ne!(p.dst, f.dst, "rewritten to a backend");
            Some(BackendKey {
                addr: p.dst,
                port: p.dport,
            })
        }
        v => panic!("unexpected verdict {v}"),
    }
}

/// (node-wide source_range drops, the VIP's drops, the VIP's source_range
/// drops).
fn counts(r: &Rig, name: &str) -> (u64, u64, u64) {
    let node = r.dataplane.drop_counters().unwrap()[abi::drop_reason::SOURCE_RANGE as usize];
    let c = r
        .dataplane
        .vip_counters()
        .unwrap()
        .into_iter()
        .find(|c| c.name == name)
        .expect("VIP counted");
    (
        node,
        c.stats.drops,
        c.drops_by_reason[abi::drop_reason::SOURCE_RANGE as usize],
    )
}

/// Every (tag, prefix length) in both tries, read from the maps directly.
fn trie_entries(r: &Rig) -> BTreeSet<(u32, u32)> {
    let m = r.dataplane.maps();
    let mut out = BTreeSet::new();
    for item in m.src_range.iter() {
        let (k, _) = item.unwrap();
        out.insert((k.data().tag, k.prefix_len()));
    }
    for item in m.src_range6.iter() {
        let (k, _) = item.unwrap();
        out.insert((k.data().tag, k.prefix_len()));
    }
    out
}

fn service_flags(r: &Rig, name: &str) -> (u32, u8) {
    let v = r
        .dataplane
        .vips()
        .find(|v| v.spec.name == name)
        .expect("VIP programmed");
    let svc = r
        .dataplane
        .maps()
        .service_config
        .get(&v.service_id, 0)
        .unwrap();
    (v.service_id, svc.flags)
}

#[test]
fn only_sources_inside_the_ranges_reach_an_ipv4_vip_and_the_others_are_counted_per_vip() {
    let mut r = rig("srcrange4");
    // Host bits of 10.211.0.77/24 are cleared by the writer.
    r.dataplane
        .apply(&[vip4(ranges(&["10.211.0.77/24", "192.0.2.7/32"]))])
        .unwrap();
    let (_, flags) = service_flags(&r, "web4");
    assert_ne!(flags & abi::service_flags::SOURCE_RANGES, 0);
    for (src, sport) in [
        ("10.211.0.9", 40000),
        ("10.211.0.255", 40001),
        ("192.0.2.7", 40002),
    ] {
        let syn = FrameSpec::new(src, sport, VIP4, 80, proto::TCP).syn();
        assert!(send(&mut r, &syn).is_some(), "{src} is inside a range");
        // And the connection's next segment.
        let seg = FrameSpec::new(src, sport, VIP4, 80, proto::TCP);
        assert!(send(&mut r, &seg).is_some(), "{src}: established segment");
    }
    assert_eq!(counts(&r, "web4"), (0, 0, 0));
    for (src, sport) in [
        ("10.211.1.9", 40003),
        ("192.0.2.8", 40004),
        ("10.0.0.1", 40005),
    ] {
        let syn = FrameSpec::new(src, sport, VIP4, 80, proto::TCP).syn();
        assert_eq!(send(&mut r, &syn), None, "{src} is outside every range");
        let seg = FrameSpec::new(src, sport, VIP4, 80, proto::TCP);
        assert_eq!(send(&mut r, &seg), None, "{src}: a non-SYN segment too");
    }
    assert_eq!(counts(&r, "web4"), (6, 6, 6));
    // Nothing of a refused flow was recorded.
    let flows: Vec<_> = r
        .dataplane
        .maps()
        .affinity
        .keys()
        .map(|k| k.unwrap())
        .collect();
    assert_eq!(flows.len(), 3, "only the allowed connections have entries");
}

#[test]
fn ipv6_ranges_an_empty_list_and_no_list() {
    let mut r = rig("srcrange6");
    r.dataplane
        .apply(&[vip6(ranges(&["fd00:211::/48"]))])
        .unwrap();
    let inside = FrameSpec::new("fd00:211:0:5::9", 40000, VIP6, 80, proto::TCP).syn();
    let outside = FrameSpec::new("fd00:212::9", 40001, VIP6, 80, proto::TCP).syn();
    assert!(send(&mut r, &inside).is_some());
    assert_eq!(send(&mut r, &outside), None);
    assert_eq!(counts(&r, "web6"), (1, 1, 1));
    // An empty list: nobody.
    r.dataplane.apply(&[vip6(Some(Vec::new()))]).unwrap();
    let (_, flags) = service_flags(&r, "web6");
    assert_ne!(flags & abi::service_flags::SOURCE_RANGES, 0);
    assert!(trie_entries(&r).is_empty(), "no prefix at all");
    assert_eq!(
        send(&mut r, &inside.clone()),
        None,
        "an empty list denies all"
    );
    // No list: anyone, and the flag is off.
    r.dataplane.apply(&[vip6(None)]).unwrap();
    let (_, flags) = service_flags(&r, "web6");
    assert_eq!(flags & abi::service_flags::SOURCE_RANGES, 0);
    assert!(send(&mut r, &outside).is_some(), "no list: any source");
}

#[test]
fn a_changed_list_switches_banks_and_a_removed_vip_leaves_nothing() {
    let mut r = rig("srcrangebank");
    let other = vip(
        "other",
        "10.210.100.2",
        80,
        proto::TCP,
        vec![backend("10.210.1.13", 8080, 1)],
    );
    r.dataplane
        .apply(&[vip4(ranges(&["10.211.0.0/24"])), other.clone()])
        .unwrap();
    let (id, flags) = service_flags(&r, "web4");
    assert_eq!(flags & abi::service_flags::SOURCE_BANK, 0, "bank 0 first");
    assert_eq!(trie_entries(&r), BTreeSet::from([(id, 32 + 24)]));
    let a = FrameSpec::new("10.211.0.9", 40000, VIP4, 80, proto::TCP).syn();
    let b = FrameSpec::new("10.212.0.9", 40001, VIP4, 80, proto::TCP).syn();
    assert!(send(&mut r, &a).is_some());
    assert_eq!(send(&mut r, &b), None);

    // A new list: written into bank 1, switched to, bank 0 emptied. The
    // VIP is reconfigured, its slice kept.
    let slice = r
        .dataplane
        .vips()
        .find(|v| v.spec.name == "web4")
        .unwrap()
        .slice;
    let report = r
        .dataplane
        .apply(&[
            vip4(ranges(&["10.212.0.0/16", "10.213.0.0/16"])),
            other.clone(),
        ])
        .unwrap();
    assert_eq!(report.reconfigured, vec!["web4".to_string()]);
    let (id2, flags) = service_flags(&r, "web4");
    assert_eq!(id2, id);
    assert_ne!(flags & abi::service_flags::SOURCE_BANK, 0, "bank 1 now");
    assert_eq!(
        trie_entries(&r),
        BTreeSet::from([(id | abi::SRC_RANGE_BANK, 32 + 16)]),
        "two /16 prefixes of bank 1 (one (tag, length) pair), nothing of bank 0"
    );
    assert_eq!(r.dataplane.maps().src_range.keys().count(), 2);
    assert_eq!(
        r.dataplane
            .vips()
            .find(|v| v.spec.name == "web4")
            .unwrap()
            .slice,
        slice
    );
    assert_eq!(send(&mut r, &a), None, "the old range no longer admits");
    assert!(send(&mut r, &b).is_some(), "the new one does");
    // The same list again changes nothing.
    let report = r
        .dataplane
        .apply(&[
            vip4(ranges(&["10.213.0.0/16", "10.212.0.0/16"])),
            other.clone(),
        ])
        .unwrap();
    assert!(report.is_empty(), "{report}");
    // Removing the VIP removes its prefixes; the other VIP is untouched.
    r.dataplane.apply(&[other]).unwrap();
    assert!(trie_entries(&r).is_empty());
}

#[test]
fn refused_sources_spend_no_syn_bucket() {
    let mut r = rig("srcrangerl");
    let mut v = vip4(ranges(&["10.211.0.0/24"]));
    v.syn_rate_limit = Some(RateLimit { rate: 1, burst: 1 });
    r.dataplane.apply(&[v]).unwrap();
    for i in 0..5 {
        let syn = FrameSpec::new("10.212.0.9", 41000 + i, VIP4, 80, proto::TCP).syn();
        assert_eq!(send(&mut r, &syn), None);
    }
    let data = aya::maps::MapData::from_pin(r.pin_dir.join("rl_buckets_map")).unwrap();
    let buckets: aya::maps::HashMap<_, abi::RlKey4, abi::RlBucket> =
        aya::maps::Map::from_map_data(data)
            .unwrap()
            .try_into()
            .unwrap();
    assert_eq!(buckets.keys().count(), 0, "no bucket made");
    assert_eq!(
        r.dataplane.drop_counters().unwrap()[abi::drop_reason::RATE_LIMITED as usize],
        0,
        "dropped as source_range, before the limit"
    );
    assert_eq!(counts(&r, "web4"), (5, 5, 5));
}

#[test]
fn bad_source_ranges_are_refused_naming_the_field_and_nothing_changes() {
    let mut r = rig("srcrangebad");
    r.dataplane
        .apply(&[vip4(ranges(&["10.211.0.0/24"]))])
        .unwrap();
    let ok = FrameSpec::new("10.211.0.9", 40000, VIP4, 80, proto::TCP).syn();
    let before = trie_entries(&r);
    let other_family = vip4(ranges(&["10.211.0.0/24", "fd00::/8"]));
    let too_long = vip4(Some(vec![SourceRange::new(
        "10.211.0.0".parse::<IpAddr>().unwrap(),
        33,
    )]));
    let too_many = vip4(Some(
        (0..=abi::MAX_SRC_RANGES_PER_VIP)
            .map(|i| SourceRange::new(IpAddr::from([10, 50, (i / 256) as u8, i as u8]), 32))
            .collect(),
    ));
    for (bad, want) in [
        (
            other_family,
            "source_ranges: fd00::/8 is not of the VIP's address family",
        ),
        (
            too_long,
            "source_ranges: 10.211.0.0/33: the prefix length is at most 32",
        ),
        (
            too_many,
            "source_ranges: 257 distinct ranges, at most 256 per VIP",
        ),
    ] {
        let err = r.dataplane.apply(&[bad]).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err}");
        assert!(err.to_string().contains(want), "{err}");
        assert!(err.to_string().contains("VIP web4"), "{err}");
        assert_eq!(trie_entries(&r), before, "nothing half-applied");
        assert!(send(&mut r, &ok).is_some(), "still forwarding as before");
    }
    // Exactly the per-VIP limit is fine.
    let at_limit = vip4(Some(
        (0..abi::MAX_SRC_RANGES_PER_VIP)
            .map(|i| SourceRange::new(IpAddr::from([10, 50, (i / 256) as u8, i as u8]), 32))
            .collect(),
    ));
    r.dataplane.apply(&[at_limit]).unwrap();
    assert_eq!(
        r.dataplane.maps().src_range.keys().count(),
        abi::MAX_SRC_RANGES_PER_VIP as usize
    );
}

#[test]
fn source_ranges_survive_a_restart_and_are_adopted_unchanged() {
    let dir = pin_dir("srcrangerestart");
    let config = || {
        vec![
            vip4(ranges(&["10.211.0.0/24"])),
            vip6(ranges(&["fd00:211::/48"])),
        ]
    };
    let (mut r, _, _) = rig_at(&dir);
    r.dataplane.apply(&config()).unwrap();
    // Move web4 to bank 1, so adoption must read the bank from the flags.
    let mut moved = config();
    moved[0].source_ranges = ranges(&["10.212.0.0/24"]);
    r.dataplane.apply(&moved).unwrap();
    let entries = trie_entries(&r);
    r.keep_pins = true;
    drop(r);

    let (mut r, outcome, report) = rig_at(&dir);
    assert_eq!(outcome, rivora_dataplane::LoadOutcome::Reused);
    assert!(report.dropped.is_empty(), "{:?}", report.dropped);
    let adopted: Vec<_> = r
        .dataplane
        .vips()
        .map(|v| (v.spec.key.addr, v.spec.source_ranges.clone(), v.src_bank))
        .collect();
    assert!(adopted.contains(&(VIP4.parse().unwrap(), ranges(&["10.212.0.0/24"]), 1)));
    assert!(adopted.contains(&(VIP6.parse().unwrap(), ranges(&["fd00:211::/48"]), 0)));
    let in_range = FrameSpec::new("10.212.0.9", 40000, VIP4, 80, proto::TCP).syn();
    let out_of_range = FrameSpec::new("10.211.0.9", 40001, VIP4, 80, proto::TCP).syn();
    assert!(
        send(&mut r, &in_range).is_some(),
        "forwarding through the restart"
    );
    assert_eq!(send(&mut r, &out_of_range), None);
    let report = r.dataplane.apply(&moved).unwrap();
    assert_eq!(report.adopted.len(), 2, "{report}");
    assert!(report.reconfigured.is_empty(), "{report}");
    assert_eq!(trie_entries(&r), entries);
}
