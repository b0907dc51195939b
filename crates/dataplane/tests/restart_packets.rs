//! Restart adoption through the real programs: a datapath is loaded, its
//! maps programmed, and then dropped without removing its pins (a daemon
//! killed with SIGKILL); a new one loads over the same pins and adopts them.

mod common;

use std::collections::BTreeMap;

use common::*;
use rivora_abi as abi;
use rivora_dataplane::{BackendKey, Datapath, Error, LoadOptions, LoadOutcome, VipKey, proto};

const VIP4: &str = "10.200.100.1";
const VIP6: &str = "fd00:200:100::1";

fn config() -> Vec<rivora_dataplane::VipSpec> {
    vec![
        vip(
            "web4",
            VIP4,
            80,
            proto::TCP,
            vec![
                backend("10.200.1.11", 8080, 1),
                backend("10.200.1.12", 8080, 1),
                backend("10.200.1.13", 8080, 2),
            ],
        ),
        vip(
            "dns4",
            VIP4,
            53,
            proto::UDP,
            vec![backend("10.200.1.11", 53, 1), backend("10.200.1.12", 53, 3)],
        ),
        vip(
            "web6",
            VIP6,
            80,
            proto::TCP,
            vec![
                backend("fd00:200:1::11", 8080, 1),
                backend("fd00:200:1::12", 8080, 1),
            ],
        ),
        vip("empty", VIP4, 81, proto::TCP, vec![]),
    ]
}

/// (service ID, slice, backend IDs) of one VIP.
type Layout = (u32, (u32, u32), Vec<u32>);

/// The layout of every VIP, by key.
fn ids(r: &Rig) -> BTreeMap<VipKey, Layout> {
    let by_key: BTreeMap<BackendKey, u32> = r.dataplane.backends().map(|b| (b.key, b.id)).collect();
    r.dataplane
        .vips()
        .map(|v| {
            let backend_ids = v.spec.backends.iter().map(|b| by_key[&b.key]).collect();
            (
                v.spec.key,
                (v.service_id, (v.slice.offset, v.slice.size), backend_ids),
            )
        })
        .collect()
}

fn forward(r: &mut Rig, f: &FrameSpec) -> std::net::IpAddr {
    let (v, out) = r.datapath.run_xdp(&f.build()).unwrap();
    assert_eq!(v, XDP_PASS);
    parse_checked(&out).dst
}

#[test]
fn a_restart_adopts_every_id_slice_and_flow() {
    let dir = pin_dir("adopt");
    let mut first = rig_at(&dir).0;
    first.dataplane.apply(&config()).unwrap();
    // Leave a backend draining: operator state must survive a restart.
    let drained = BackendKey {
        addr: "10.200.1.13".parse().unwrap(),
        port: 8080,
    };
    let flows: Vec<FrameSpec> = (0..100u16)
        .map(|i| FrameSpec::new("10.200.0.2", 5000 + i, VIP4, 80, proto::TCP))
        .collect();
    let chosen: Vec<_> = flows.iter().map(|f| forward(&mut first, f)).collect();
    first
        .dataplane
        .set_backend_state(&drained, abi::backend_state::DRAINING)
        .unwrap();
    let before = ids(&first);
    let max_sid = before.values().map(|v| v.0).max().unwrap();
    let endpoints = first.dataplane.nat_endpoints().clone();
    assert!(!endpoints.is_empty());
    first.keep_pins = true;
    drop(first);

    let (mut second, outcome, report) = rig_at(&dir);
    assert_eq!(outcome, LoadOutcome::Reused);
    assert_eq!(
        (report.vips, report.backends, report.retiring),
        (4, 7, 0),
        "{report:?}"
    );
    assert!(report.dropped.is_empty(), "{report:?}");
    // Before any config is applied, established flows still go where they went.
    let again: Vec<_> = flows.iter().map(|f| forward(&mut second, f)).collect();
    assert_eq!(chosen, again);
    // The endpoint table is read back as it was written.
    let flags = |m: &std::collections::BTreeMap<_, rivora_dataplane::endpoints::EndpointEntry>| {
        m.iter()
            .map(|(k, e)| (*k, e.flags, e.target, e.backend))
            .collect::<Vec<_>>()
    };
    assert_eq!(flags(second.dataplane.nat_endpoints()), flags(&endpoints));
    // The same config keeps everything as it was.
    let rep = second.dataplane.apply(&config()).unwrap();
    assert_eq!(rep.adopted.len(), 4, "{rep:?}");
    assert!(
        rep.added.is_empty() && rep.rebuilt.is_empty() && rep.removed.is_empty(),
        "{rep:?}"
    );
    assert_eq!(
        ids(&second),
        before,
        "service IDs, slices and backend IDs kept"
    );
    assert_eq!(
        flags(second.dataplane.nat_endpoints()),
        flags(&endpoints),
        "the same config leaves the endpoint table as it was"
    );
    let state = second
        .dataplane
        .backends()
        .find(|b| b.key == drained)
        .unwrap()
        .state;
    assert_eq!(
        state,
        abi::backend_state::DRAINING,
        "drain state survives the restart"
    );
    assert!(
        second.dataplane.vips().all(|v| v.worst_imbalance < 0.01),
        "imbalance known again after matching"
    );

    // A file that drops one VIP and adds another.
    let mut next = config();
    next.retain(|v| v.name != "dns4");
    next.push(vip(
        "new4",
        VIP4,
        8443,
        proto::TCP,
        vec![backend("10.200.1.14", 8443, 1)],
    ));
    let rep = second.dataplane.apply(&next).unwrap();
    assert_eq!(
        (rep.added.clone(), rep.removed.clone()),
        (vec!["new4".to_string()], vec!["dns4".to_string()])
    );
    let after = ids(&second);
    let dns4 = VipKey::exact(VIP4.parse().unwrap(), 53, proto::UDP);
    assert!(!after.contains_key(&dns4));
    let new4 = after[&VipKey::exact(VIP4.parse().unwrap(), 8443, proto::TCP)].0;
    assert!(
        new4 > max_sid,
        "the new VIP gets an ID never in use (got {new4}, highest before {max_sid})"
    );
    // dns4 is gone from every map.
    let old = before[&dns4].0;
    assert_eq!(
        second.dataplane.maps().service_config.get(&old, 0).unwrap(),
        abi::Service::default()
    );
    assert!(
        second
            .dataplane
            .maps()
            .vip_map
            .iter()
            .all(|e| e.unwrap().1.service_id != old)
    );
    let dns_backend = BackendKey {
        addr: "10.200.1.12".parse().unwrap(),
        port: 53,
    };
    assert!(
        second.dataplane.backends().all(|b| b.key != dns_backend),
        "its backends released"
    );
}

#[test]
fn a_changed_config_at_restart_rebuilds_only_what_changed() {
    let dir = pin_dir("adoptchg");
    let mut first = rig_at(&dir).0;
    first.dataplane.apply(&config()).unwrap();
    let before = ids(&first);
    first.keep_pins = true;
    drop(first);
    let (mut second, _, _) = rig_at(&dir);
    let mut next = config();
    next[0].backends[2].weight = 5; // web4: weight change
    let rep = second.dataplane.apply(&next).unwrap();
    assert_eq!(rep.rebuilt, vec!["web4".to_string()]);
    assert_eq!(rep.adopted.len(), 3);
    let after = ids(&second);
    let web4 = VipKey::exact(VIP4.parse().unwrap(), 80, proto::TCP);
    assert_eq!(
        after[&web4].0, before[&web4].0,
        "rebuilt VIP keeps its service ID"
    );
    assert_eq!(after[&web4].2, before[&web4].2, "and its backend IDs");
    assert_ne!(after[&web4].1, before[&web4].1, "but gets a new slice");
}

#[test]
fn incompatible_pins_are_refused_with_the_reason() {
    let dir = pin_dir("compat");
    let mut first = rig_at(&dir).0;
    first.dataplane.apply(&config()).unwrap();
    first.keep_pins = true;
    drop(first);
    // Another Maglev table size is another layout.
    let opts = |size, reset| LoadOptions {
        pin_dir: dir.clone(),
        maglev_table_size: size,
        flow_table_size: rivora_abi::MAX_FLOWS,
        reset_incompatible: reset,
        object_dir: None,
    };
    let err = Datapath::load(&opts(65521, false)).err().expect("refused");
    let msg = err.to_string();
    assert!(matches!(err, Error::Incompatible { .. }), "{msg}");
    assert!(
        msg.contains("maglev_table")
            && msg.contains(&rivora_abi::MAGLEV_TABLE_DEFAULT.to_string())
            && msg.contains("--reset-pinned-state"),
        "{msg}"
    );
    // The pins are untouched by the refusal.
    let (mut ok, outcome, report) = rig_at(&dir);
    assert_eq!(outcome, LoadOutcome::Reused);
    assert_eq!(report.vips, 4);
    ok.keep_pins = true;
    drop(ok);

    // Another ABI version recorded in rivora_meta.
    {
        let data = aya::maps::MapData::from_pin(dir.join("rivora_meta")).unwrap();
        let mut meta: aya::maps::Array<_, abi::Meta> =
            aya::maps::Map::Array(data).try_into().unwrap();
        let mut m = meta.get(&0, 0).unwrap();
        m.abi_version = 99;
        meta.set(0, m, 0).unwrap();
    }
    let msg = Datapath::load(&opts(rivora_abi::MAGLEV_TABLE_DEFAULT, false))
        .err()
        .expect("refused")
        .to_string();
    assert!(msg.contains("ABI version 99"), "{msg}");
    // With reset, the old maps are replaced by empty ones.
    let (dp, maps, outcome) =
        Datapath::load(&opts(rivora_abi::MAGLEV_TABLE_DEFAULT, true)).unwrap();
    assert!(
        matches!(outcome, LoadOutcome::Reset(ref why) if why.iter().any(|w| w.contains("ABI version 99")))
    );
    let (adopted, report) = rivora_dataplane::Dataplane::adopt(maps).unwrap();
    assert_eq!(report.vips, 0);
    drop((dp, adopted));
    rivora_dataplane::remove_pins(&dir).unwrap();
}

#[test]
fn the_expected_map_table_matches_what_the_objects_create() {
    let r = rig("mapspec");
    assert_eq!(
        rivora_dataplane::compat::inspect(
            &r.pin_dir,
            &rivora_dataplane::compat::TableSizes::defaults()
        ),
        rivora_dataplane::compat::PinnedState::Compatible
    );
    for spec in
        rivora_dataplane::compat::expected_maps(&rivora_dataplane::compat::TableSizes::defaults())
    {
        assert!(r.pin_dir.join(spec.name).exists(), "{} pinned", spec.name);
    }
}

/// Pins this build's maps with `config()` and one flow from `sport`, then
/// makes them look like an older ABI's: `version` in rivora_meta and the
/// maps it did not have (`lacking`) unpinned. Checks that they inspect as
/// upgradable, and returns (pin directory, the flow, its backend).
fn pinned_as_older_abi(
    test: &str,
    version: u32,
    sport: u16,
    lacking: &[&str],
) -> (std::path::PathBuf, FrameSpec, std::net::IpAddr) {
    let dir = pin_dir(test);
    let (mut r, _, _) = rig_at(&dir);
    r.dataplane.apply(&config()).unwrap();
    let flow = FrameSpec::new("10.201.0.9", sport, VIP4, 80, proto::TCP);
    let first = forward(&mut r, &flow);
    r.keep_pins = true;
    drop(r);
    for name in lacking {
        std::fs::remove_file(dir.join(name)).unwrap();
    }
    let data = aya::maps::MapData::from_pin(dir.join("rivora_meta")).unwrap();
    let mut meta: aya::maps::Array<_, abi::Meta> = aya::maps::Map::Array(data).try_into().unwrap();
    let mut m = meta.get(&0, 0).unwrap();
    m.abi_version = version;
    meta.set(0, m, 0).unwrap();
    assert_eq!(
        rivora_dataplane::compat::inspect(&dir, &rivora_dataplane::compat::TableSizes::defaults()),
        rivora_dataplane::compat::PinnedState::Upgradable(version)
    );
    (dir, flow, first)
}

/// ABI 8 only gave drop_stats_map's slot 12 a meaning (a missing tail-call
/// stage): maps an ABI 7 rivorad pinned are adopted as they are, flows
/// included, and the version recorded becomes 8.
#[test]
fn abi_7_maps_are_upgraded_in_place() {
    let (dir, flow, first) = pinned_as_older_abi("abi7", 7, 40000, &[]);
    let (mut r, outcome, report) = rig_at(&dir);
    assert_eq!(outcome, LoadOutcome::Reused);
    assert_eq!(report.vips, config().len());
    assert_eq!(
        rivora_dataplane::compat::read_meta(&dir)
            .unwrap()
            .abi_version,
        abi::ABI_VERSION
    );
    assert_eq!(
        rivora_dataplane::compat::inspect(&dir, &rivora_dataplane::compat::TableSizes::defaults()),
        rivora_dataplane::compat::PinnedState::Compatible
    );
    assert_eq!(forward(&mut r, &flow), first, "the flow kept its backend");
    r.keep_pins = false;
}

/// ABI 9 added nat_endpoint_map(6), flow_guard_config_map and
/// nat_backend_filter_map (and ABI 10 the flow filter): maps an ABI 8
/// rivorad pinned (without them, version 8 in rivora_meta) are adopted with
/// their flows, the six maps are created, and the next apply fills the
/// endpoint table.
#[test]
fn abi_8_maps_gain_the_endpoint_and_guard_maps_in_place() {
    let (dir, flow, first) = pinned_as_older_abi(
        "abi8",
        8,
        40001,
        &[
            "nat_endpoint_map",
            "nat_endpoint_map6",
            "flow_guard_config_map",
            "nat_backend_filter_map",
            "flow_filter_map",
            "flow_filter_ctl_map",
            "src_range_map",
            "src_range_map6",
            "vip_drop_stats_map",
        ],
    );
    let (mut r, outcome, _) = rig_at(&dir);
    assert_eq!(outcome, LoadOutcome::Reused);
    assert!(r.dataplane.nat_endpoints().is_empty(), "created empty");
    assert_eq!(forward(&mut r, &flow), first, "the flow kept its backend");
    r.dataplane.apply(&config()).unwrap();
    assert!(
        r.dataplane.nat_endpoints().values().any(|e| e.exclusive()),
        "the apply filled the endpoint table"
    );
    assert_eq!(
        rivora_dataplane::compat::read_meta(&dir)
            .unwrap()
            .abi_version,
        abi::ABI_VERSION
    );
    r.keep_pins = false;
}

/// ABI 10 added the flow filter (flow_filter_map, flow_filter_ctl_map):
/// maps an ABI 9 rivorad pinned are adopted with their flows, whose entries
/// have no bits. The new filter starts "not exact" (every SYN and UDP
/// datagram is looked up, so the adopted flow keeps its backend and a SYN
/// reusing its 5-tuple still finds its entry), and the first maintenance a
/// second after start rebuilds it from the tables and makes it exact.
#[test]
fn abi_9_maps_gain_the_flow_filter_and_it_becomes_exact_after_a_rebuild() {
    let (dir, flow, first) = pinned_as_older_abi(
        "abi9",
        9,
        40002,
        &[
            "flow_filter_map",
            "flow_filter_ctl_map",
            "src_range_map",
            "src_range_map6",
            "vip_drop_stats_map",
        ],
    );
    let (mut r, outcome, _) = rig_at(&dir);
    assert_eq!(outcome, LoadOutcome::Reused);
    let ctl = r.dataplane.maps().flow_filter.ctl().unwrap();
    assert_eq!(
        ctl.exact, 0,
        "an added filter is not trusted before a rebuild"
    );
    assert!(ctl.words > 0, "but it records bits from now on");
    assert_eq!(r.dataplane.maps().flow_filter.ones(ctl.active), 0);
    assert_eq!(forward(&mut r, &flow), first, "the flow kept its backend");
    assert!(
        r.dataplane.maintain_flow_filter().unwrap().is_none(),
        "no rebuild in the first second (an old program may still be finishing a packet)"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let report = loop {
        if let Some(rep) = r.dataplane.maintain_flow_filter().unwrap() {
            break rep;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no rebuild within 10 s; filter {:?}",
            r.dataplane.flow_filter_status()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(!report.was_exact);
    assert!(
        report.keys >= 1,
        "the adopted flow's entry was read: {report:?}"
    );
    let ctl = r.dataplane.maps().flow_filter.ctl().unwrap();
    assert_eq!(ctl.exact, 1);
    let entries: Vec<abi::Flow4> = affinity_keys4(&r);
    assert!(!entries.is_empty());
    for k in &entries {
        assert!(
            r.dataplane
                .maps()
                .flow_filter
                .has(abi::flow_filter_hash4(k))
                .unwrap()
        );
    }
    assert_eq!(forward(&mut r, &flow), first, "the flow kept its backend");
    assert!(
        r.dataplane.maintain_flow_filter().unwrap().is_none(),
        "an exact, sparse filter needs no rebuild"
    );
    r.keep_pins = false;
}

/// ABI 11 added loadBalancerSourceRanges (src_range_map(6), two service
/// flags, drop reason slot 14) and drops per VIP and reason
/// (vip_drop_stats_map): maps an ABI 10 rivorad pinned are adopted with
/// their flows, the three maps are created empty, and the next apply can
/// give a VIP source ranges, whose refusals are counted per VIP and reason.
#[test]
fn abi_10_maps_gain_the_source_range_tries_in_place() {
    let (dir, flow, first) = pinned_as_older_abi(
        "abi10",
        10,
        40003,
        &["src_range_map", "src_range_map6", "vip_drop_stats_map"],
    );
    let (mut r, outcome, report) = rig_at(&dir);
    assert_eq!(outcome, LoadOutcome::Reused);
    assert_eq!(report.vips, config().len());
    assert!(report.dropped.is_empty(), "{:?}", report.dropped);
    assert_eq!(
        r.dataplane.maps().src_range.keys().count(),
        0,
        "created empty"
    );
    assert_eq!(forward(&mut r, &flow), first, "the flow kept its backend");
    assert_eq!(
        rivora_dataplane::compat::read_meta(&dir)
            .unwrap()
            .abi_version,
        abi::ABI_VERSION
    );
    // The adopted VIPs match the config: kept, nothing rebuilt.
    let report = r.dataplane.apply(&config()).unwrap();
    assert_eq!(report.adopted.len(), config().len(), "{report}");
    // Source ranges on web4: the flow's client is inside, another is not.
    let mut ranged = config();
    ranged[0].source_ranges = Some(vec!["10.201.0.0/24".parse().unwrap()]);
    let report = r.dataplane.apply(&ranged).unwrap();
    assert_eq!(report.reconfigured, vec!["web4".to_string()], "{report}");
    assert_eq!(forward(&mut r, &flow), first, "the flow kept its backend");
    let outside = FrameSpec::new("10.202.0.9", 40004, VIP4, 80, proto::TCP);
    let (verdict, _) = r.datapath.run_xdp(&outside.build()).unwrap();
    assert_eq!(verdict, XDP_DROP);
    let web4 = r
        .dataplane
        .vip_counters()
        .unwrap()
        .into_iter()
        .find(|c| c.name == "web4")
        .unwrap();
    assert_eq!(
        web4.drops_by_reason[abi::drop_reason::SOURCE_RANGE as usize],
        1
    );
    r.keep_pins = false;
}
