//! `Dataplane::apply_keeping` through the real programs: VIPs adopted from
//! pinned maps and named in `keep` go on forwarding, untouched, through
//! applies that do not list them (the Kubernetes source's initial sync),
//! until an apply lists them (claimed) or a plain apply prunes them.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use common::*;
use rivora_dataplane::{BackendKey, VipKey, VipSpec, proto};

const VIP4: &str = "10.201.100.1";
const VIP6: &str = "fd00:201:100::1";

fn web() -> VipSpec {
    vip(
        "web",
        VIP4,
        80,
        proto::TCP,
        vec![
            backend("10.201.1.11", 8080, 1),
            backend("10.201.1.12", 8080, 1),
            backend("10.201.1.13", 8080, 1),
        ],
    )
}

fn dns() -> VipSpec {
    vip(
        "dns",
        VIP4,
        53,
        proto::UDP,
        vec![backend("10.201.1.21", 53, 1), backend("10.201.1.22", 53, 1)],
    )
}

fn web6() -> VipSpec {
    vip(
        "web6",
        VIP6,
        443,
        proto::TCP,
        vec![
            backend("fd00:201:1::11", 8443, 1),
            backend("fd00:201:1::12", 8443, 1),
        ],
    )
}

fn key(spec: &VipSpec) -> VipKey {
    spec.key
}

/// Where each of `flows` is sent (the rewritten destination); the
/// destination unchanged means the packet was not balanced.
fn destinations(r: &mut Rig, flows: &[FrameSpec]) -> Vec<IpAddr> {
    flows
        .iter()
        .map(|f| {
            let (v, out) = r.datapath.run_xdp(&f.build()).unwrap();
            assert_eq!(v, XDP_PASS);
            parse_checked(&out).dst
        })
        .collect()
}

fn flows(dst: &str, port: u16, proto: u8) -> Vec<FrameSpec> {
    let client = if dst.contains(':') {
        "fd00:201::2"
    } else {
        "10.201.0.2"
    };
    (0..64u16)
        .map(|i| FrameSpec::new(client, 6000 + i, dst, port, proto))
        .collect()
}

/// (service ID, slice offset, slice size, Maglev slots) of a VIP.
fn layout(r: &Rig, k: &VipKey) -> (u32, u32, u32, Vec<u32>) {
    let v = r.dataplane.vips().find(|v| v.spec.key == *k).unwrap();
    (
        v.service_id,
        v.slice.offset,
        v.slice.size,
        r.dataplane.maps().maglev.read(v.slice.offset, v.slice.size),
    )
}

fn adopted(r: &Rig) -> BTreeMap<VipKey, bool> {
    r.dataplane
        .vips()
        .map(|v| (v.spec.key, v.adopted))
        .collect()
}

/// A rivorad that programmed `specs` and died, and the next one that
/// adopted its pins.
fn restarted(test: &str, specs: &[VipSpec]) -> Rig {
    let dir = pin_dir(test);
    let mut first = rig_at(&dir).0;
    first.dataplane.apply(specs).unwrap();
    first.keep_pins = true;
    drop(first);
    let (second, _, report) = rig_at(&dir);
    assert_eq!(report.vips, specs.len(), "{report:?}");
    second
}

#[test]
fn kept_adopted_vips_forward_untouched_until_claimed_or_pruned() {
    let mut r = restarted("keep", &[web(), dns(), web6()]);
    r.dataplane
        .set_retire_grace(std::time::Duration::from_secs(60));
    let (web_flows, dns_flows, web6_flows) = (
        flows(VIP4, 80, proto::TCP),
        flows(VIP4, 53, proto::UDP),
        flows(VIP6, 443, proto::TCP),
    );
    let web_before = destinations(&mut r, &web_flows);
    let dns_before = destinations(&mut r, &dns_flows);
    let web6_before = destinations(&mut r, &web6_flows);
    assert!(web_before.iter().all(|d| d.to_string() != VIP4));
    let layouts: BTreeMap<VipKey, _> = [web(), dns(), web6()]
        .iter()
        .map(|s| (key(s), layout(&r, &key(s))))
        .collect();
    let keep: BTreeSet<VipKey> = layouts.keys().copied().collect();

    // Initial sync, nothing claimed yet: a new VIP is added, the adopted
    // ones are neither removed nor rebuilt and their backends stay.
    let new = vip(
        "new",
        VIP4,
        8443,
        proto::TCP,
        vec![backend("10.201.1.31", 8443, 1)],
    );
    let rep = r
        .dataplane
        .apply_keeping(std::slice::from_ref(&new), &keep)
        .unwrap();
    assert_eq!(rep.added, ["new"], "{rep:?}");
    assert!(
        rep.removed.is_empty()
            && rep.rebuilt.is_empty()
            && rep.renamed.is_empty()
            && rep.adopted.is_empty()
            && rep.backends_retired == 0
            && rep.backends_removed == 0,
        "kept VIPs are not in the report: {rep:?}"
    );
    for (k, l) in &layouts {
        assert_eq!(&layout(&r, k), l, "{k}: service ID, slice and table kept");
    }
    assert_eq!(
        adopted(&r),
        BTreeMap::from([
            (key(&web()), true),
            (key(&dns()), true),
            (key(&web6()), true),
            (key(&new), false),
        ]),
        "kept VIPs stay unclaimed"
    );
    assert!(
        r.dataplane.backends().all(|b| b.retired_at.is_none()),
        "no backend of a kept VIP retires"
    );
    assert!(
        r.dataplane
            .vips()
            .filter(|v| v.adopted)
            .all(|v| v.spec.name.starts_with("adopted-")
                && v.spec.backends.iter().all(|b| b.weight == 0)),
        "the adopted bookkeeping is restored"
    );
    let new_sid = layout(&r, &key(&new)).0;
    assert!(
        layouts.values().all(|l| l.0 != new_sid),
        "the new VIP does not take a kept VIP's service ID"
    );
    assert_eq!(destinations(&mut r, &web_flows), web_before);
    assert_eq!(destinations(&mut r, &dns_flows), dns_before);
    assert_eq!(destinations(&mut r, &web6_flows), web6_before);

    // A refused apply (weight 0) changes nothing, kept VIPs included.
    let mut bad = new.clone();
    bad.backends[0].weight = 0;
    assert!(
        r.dataplane
            .apply_keeping(std::slice::from_ref(&bad), &keep)
            .is_err()
    );
    assert!(adopted(&r)[&key(&web())]);
    assert_eq!(destinations(&mut r, &web_flows), web_before);

    // The web Service is reconciled: listed, it is claimed (same backends:
    // kept from the maps as after a restart), the others stay kept.
    let rep = r
        .dataplane
        .apply_keeping(&[web(), new.clone()], &keep)
        .unwrap();
    assert_eq!(rep.adopted, ["web"], "{rep:?}");
    assert!(rep.removed.is_empty() && rep.rebuilt.is_empty(), "{rep:?}");
    assert_eq!(
        adopted(&r),
        BTreeMap::from([
            (key(&web()), false),
            (key(&dns()), true),
            (key(&web6()), true),
            (key(&new), false),
        ])
    );
    assert_eq!(layout(&r, &key(&web())), layouts[&key(&web())]);
    assert_eq!(destinations(&mut r, &web_flows), web_before);

    // The gate opens: a plain apply prunes what nothing claimed.
    let rep = r.dataplane.apply(&[web(), new.clone()]).unwrap();
    let mut removed = rep.removed.clone();
    removed.sort();
    let names = |s: &VipSpec| format!("adopted-{}", layouts[&key(s)].0);
    let mut want = vec![names(&dns()), names(&web6())];
    want.sort();
    assert_eq!(removed, want, "{rep:?}");
    assert_eq!(
        rep.backends_retired, 4,
        "dns's and web6's backends retire: {rep:?}"
    );
    let unbalanced = destinations(&mut r, &dns_flows);
    assert!(
        unbalanced.iter().all(|d| d.to_string() == VIP4),
        "a pruned VIP is not balanced any more: {unbalanced:?}"
    );
    assert_eq!(destinations(&mut r, &web_flows), web_before);
}

#[test]
fn keep_spares_shared_backends_and_ignores_listed_or_unknown_keys() {
    // dns shares a backend address and port with web2 below.
    let shared = vip(
        "shared",
        VIP4,
        5353,
        proto::UDP,
        vec![backend("10.201.2.1", 53, 1), backend("10.201.2.2", 53, 1)],
    );
    let mut r = restarted("keepshare", std::slice::from_ref(&shared));
    r.dataplane
        .set_retire_grace(std::time::Duration::from_secs(60));
    let before = destinations(&mut r, &flows(VIP4, 5353, proto::UDP));
    let sid = layout(&r, &key(&shared)).0;
    // A desired VIP uses one of the kept VIP's backends, then drops it: the
    // backend stays (the kept VIP still lists it) and keeps its ID.
    let other = vip(
        "other",
        VIP4,
        54,
        proto::UDP,
        vec![backend("10.201.2.1", 53, 1)],
    );
    let shared_id = |r: &Rig| {
        r.dataplane
            .backends()
            .find(|b| {
                b.key
                    == BackendKey {
                        addr: "10.201.2.1".parse().unwrap(),
                        port: 53,
                    }
            })
            .map(|b| (b.id, b.retired_at.is_some()))
    };
    let id = shared_id(&r).unwrap().0;
    // Unknown keys in keep change nothing.
    let keep = BTreeSet::from([
        key(&shared),
        VipKey::exact("10.201.9.9".parse().unwrap(), 1, proto::TCP),
    ]);
    r.dataplane
        .apply_keeping(std::slice::from_ref(&other), &keep)
        .unwrap();
    let rep = r.dataplane.apply_keeping(&[], &keep).unwrap();
    assert_eq!(rep.removed, ["other"], "{rep:?}");
    assert_eq!(rep.backends_retired, 0, "{rep:?}");
    assert_eq!(shared_id(&r), Some((id, false)));
    assert_eq!(layout(&r, &key(&shared)).0, sid);
    assert_eq!(destinations(&mut r, &flows(VIP4, 5353, proto::UDP)), before);
    // A kept key that is listed is applied as listed: here rebuilt with
    // one backend fewer.
    let mut smaller = shared.clone();
    smaller.backends.pop();
    let rep = r
        .dataplane
        .apply_keeping(std::slice::from_ref(&smaller), &keep)
        .unwrap();
    assert_eq!(rep.rebuilt, ["shared"], "{rep:?}");
    assert!(!adopted(&r)[&key(&shared)]);
}
