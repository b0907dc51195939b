//! Port-range VIPs, session affinity and SYN rate limits in the real maps
//! (no packets: the packet tests cover the datapath): what the writer puts
//! in vip_range_map(6), service_config_map, svc_rl_config_map and
//! rl_config_map, that removal takes it out again, and that a restart
//! adopts it with the same service IDs.

mod common;

use std::collections::BTreeMap;

use common::*;
use rivora_abi as abi;
use rivora_dataplane::maps::{RangeData4, abi_key4, abi_key6, lpm_key4};
use rivora_dataplane::model::RateLimit;
use rivora_dataplane::writer::port_range_prefixes;
use rivora_dataplane::{BackendKey, LoadOutcome, VipKey, VipSpec, proto};

const VIP4: &str = "10.200.100.7";
const VIP6: &str = "fd00:200:100::7";

const LIMIT: RateLimit = RateLimit {
    rate: 100,
    burst: 200,
};

fn config() -> Vec<VipSpec> {
    // Backend port 0 keeps the client's destination port; 9000 maps the
    // whole range to one port.
    let mut range4 = range_vip(
        "range4",
        VIP4,
        8000,
        8099,
        proto::TCP,
        vec![
            backend("10.200.1.11", 0, 1),
            backend("10.200.1.12", 9000, 2),
        ],
    );
    range4.syn_rate_limit = Some(LIMIT);
    // An exact VIP inside the range: vip_map, looked up first.
    let exact4 = vip(
        "exact4",
        VIP4,
        8050,
        proto::TCP,
        vec![backend("10.200.1.13", 8080, 1)],
    );
    let mut any6 = range_vip(
        "any6",
        VIP6,
        0,
        65535,
        proto::UDP,
        vec![
            backend("fd00:200:1::11", 0, 1),
            backend("fd00:200:1::12", 0, 1),
        ],
    );
    any6.affinity_client_ip = true;
    let ports6 = range_vip(
        "ports6",
        VIP6,
        1000,
        1003,
        proto::TCP,
        vec![backend("fd00:200:1::11", 0, 1)],
    );
    vec![range4, exact4, any6, ports6]
}

/// One trie entry: (prefixlen, address, protocol, port prefix) -> service ID.
type Trie = BTreeMap<(u32, Vec<u8>, u8, u16), u32>;

fn trie(r: &Rig) -> Trie {
    let mut out = Trie::new();
    for item in r.dataplane.maps().vip_range_map.iter() {
        let (k, v) = item.unwrap();
        let k = abi_key4(&k);
        assert_eq!(k.pad, 0);
        out.insert(
            (
                k.prefixlen,
                k.addr.to_vec(),
                k.proto,
                u16::from_be_bytes(k.port),
            ),
            v.service_id,
        );
    }
    for item in r.dataplane.maps().vip_range_map6.iter() {
        let (k, v) = item.unwrap();
        let k = abi_key6(&k);
        assert_eq!(k.pad, 0);
        out.insert(
            (
                k.prefixlen,
                k.addr.to_vec(),
                k.proto,
                u16::from_be_bytes(k.port),
            ),
            v.service_id,
        );
    }
    out
}

/// The trie entries a range VIP should have.
fn expected(key: &VipKey, service_id: u32) -> Trie {
    let (addr, head) = match key.addr {
        std::net::IpAddr::V4(a) => (a.octets().to_vec(), 8 + 32),
        std::net::IpAddr::V6(a) => (a.octets().to_vec(), 8 + 128),
    };
    port_range_prefixes(key.port, key.port_last)
        .into_iter()
        .map(|(port, bits)| {
            (
                (head + u32::from(bits), addr.clone(), key.proto, port),
                service_id,
            )
        })
        .collect()
}

fn sid(r: &Rig, name: &str) -> u32 {
    r.dataplane
        .vips()
        .find(|v| v.spec.name == name)
        .unwrap_or_else(|| panic!("no VIP {name}"))
        .service_id
}

fn key_of(r: &Rig, name: &str) -> VipKey {
    r.dataplane
        .vips()
        .find(|v| v.spec.name == name)
        .unwrap()
        .spec
        .key
}

fn service(r: &Rig, service_id: u32) -> abi::Service {
    r.dataplane
        .maps()
        .service_config
        .get(&service_id, 0)
        .unwrap()
}

fn svc_limit(r: &Rig, service_id: u32) -> abi::RlConfig {
    r.dataplane
        .maps()
        .svc_rl_config
        .get(&service_id, 0)
        .unwrap()
}

fn node_limit(r: &Rig) -> abi::RlConfig {
    r.dataplane.maps().rl_config.get(&0, 0).unwrap()
}

/// Every range VIP's prefixes, and nothing else.
fn all_expected(r: &Rig) -> Trie {
    r.dataplane
        .vips()
        .filter(|v| !v.spec.key.is_exact())
        .flat_map(|v| expected(&v.spec.key, v.service_id))
        .collect()
}

/// The exact VIPs in vip_map(6), by (port, proto).
fn exact_entries(r: &Rig) -> BTreeMap<(u16, u8), u32> {
    let mut out = BTreeMap::new();
    for item in r.dataplane.maps().vip_map.iter() {
        let (k, v) = item.unwrap();
        out.insert((abi::port_from_be(k.port), k.proto), v.service_id);
    }
    for item in r.dataplane.maps().vip_map6.iter() {
        let (k, v) = item.unwrap();
        out.insert((abi::port_from_be(k.port), k.proto), v.service_id);
    }
    out
}

const F: u8 = abi::service_flags::ACTIVE;
const V6: u8 = abi::service_flags::IPV6;
const AFF: u8 = abi::service_flags::AFFINITY_CLIENT_IP;
const RL: u8 = abi::service_flags::SYN_RATE_LIMIT;

/// The maps hold exactly what `config()` asks for.
#[track_caller]
fn check_config_programmed(r: &Rig) {
    let range4 = key_of(r, "range4");
    assert_eq!(range4.to_string(), "10.200.100.7:8000-8099/tcp");
    assert_eq!(key_of(r, "any6").to_string(), "[fd00:200:100::7]:any/udp");
    let mut want = expected(&range4, sid(r, "range4"));
    // 8000-8063, 8064-8095, 8096-8099.
    assert_eq!(
        want.keys().map(|k| (k.0, k.3)).collect::<Vec<_>>(),
        [(50, 8000), (51, 8064), (54, 8096)]
    );
    want.extend(expected(&key_of(r, "any6"), sid(r, "any6")));
    want.extend(expected(&key_of(r, "ports6"), sid(r, "ports6")));
    let got = trie(r);
    assert_eq!(got, want);
    // `any` is one 0-bit port prefix: the whole address.
    assert!(
        got.contains_key(&(
            136,
            VIP6.parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets()
                .to_vec(),
            proto::UDP,
            0
        ))
    );
    // Only the exact VIP is in vip_map.
    assert_eq!(
        exact_entries(r),
        BTreeMap::from([((8050, proto::TCP), sid(r, "exact4"))])
    );

    assert_eq!(service(r, sid(r, "range4")).flags, F | RL);
    assert_eq!(
        svc_limit(r, sid(r, "range4")),
        abi::RlConfig {
            rate: 100,
            burst: 200,
            enabled: 1,
            pad: 0
        }
    );
    assert_eq!(service(r, sid(r, "exact4")).flags, F);
    assert_eq!(service(r, sid(r, "any6")).flags, F | V6 | AFF);
    assert_eq!(service(r, sid(r, "ports6")).flags, F | V6);
    for name in ["exact4", "any6", "ports6"] {
        assert_eq!(
            svc_limit(r, sid(r, name)),
            abi::RlConfig::default(),
            "{name}"
        );
    }
    // A backend keeping the destination port has port 0 in its entry.
    let keep = r
        .dataplane
        .backends()
        .find(|b| b.key.addr == "10.200.1.11".parse::<std::net::IpAddr>().unwrap())
        .unwrap();
    assert!(keep.key.keeps_destination_port());
    let entry = r.dataplane.maps().backend_map.get(&keep.id, 0).unwrap();
    assert_eq!(entry.port, 0);
}

#[test]
fn range_vips_are_written_to_the_tries_and_removed() {
    let mut r = rig("ranges");
    let rep = r.dataplane.apply(&config()).unwrap();
    assert_eq!(rep.added.len(), 4, "{rep:?}");
    check_config_programmed(&r);

    // The node-wide limit, set and cleared.
    assert_eq!(node_limit(&r), abi::RlConfig::default());
    r.dataplane
        .set_node_syn_rate_limit(Some(RateLimit { rate: 7, burst: 9 }))
        .unwrap();
    assert_eq!(
        node_limit(&r),
        abi::RlConfig {
            rate: 7,
            burst: 9,
            enabled: 1,
            pad: 0
        }
    );
    assert!(
        r.dataplane
            .set_node_syn_rate_limit(Some(RateLimit { rate: 0, burst: 9 }))
            .is_err()
    );
    r.dataplane.set_node_syn_rate_limit(None).unwrap();
    assert_eq!(node_limit(&r), abi::RlConfig::default());
    assert_eq!(r.dataplane.node_syn_rate_limit(), None);

    // Affinity and limit changes rewrite the service entry, keep the slice.
    let before = r
        .dataplane
        .vips()
        .find(|v| v.spec.name == "range4")
        .map(|v| (v.service_id, v.slice))
        .unwrap();
    let mut next = config();
    next[0].syn_rate_limit = None;
    next[0].affinity_client_ip = true;
    let rep = r.dataplane.apply(&next).unwrap();
    assert_eq!(rep.reconfigured, vec!["range4".to_string()], "{rep:?}");
    assert!(rep.added.is_empty() && rep.rebuilt.is_empty(), "{rep:?}");
    let after = r
        .dataplane
        .vips()
        .find(|v| v.spec.name == "range4")
        .map(|v| (v.service_id, v.slice))
        .unwrap();
    assert_eq!(before, after);
    assert_eq!(service(&r, before.0).flags, F | AFF);
    assert_eq!(svc_limit(&r, before.0), abi::RlConfig::default());

    // Widening the range makes a new VIP. The old and new ranges share the
    // prefix 8000/10: the new VIP must keep it when the old one goes.
    let mut wider = next.clone();
    wider[0] = range_vip(
        "range4",
        VIP4,
        8000,
        8199,
        proto::TCP,
        vec![backend("10.200.1.11", 0, 1)],
    );
    let rep = r.dataplane.apply(&wider).unwrap();
    assert_eq!(
        (rep.added.clone(), rep.removed.clone()),
        (vec!["range4".to_string()], vec!["range4".to_string()])
    );
    let new_sid = sid(&r, "range4");
    assert_ne!(new_sid, before.0);
    assert_eq!(trie(&r), all_expected(&r));
    assert_eq!(
        trie(&r).iter().filter(|(_, s)| **s == new_sid).count(),
        port_range_prefixes(8000, 8199).len()
    );
    assert_eq!(service(&r, before.0), abi::Service::default());

    // Removing everything empties the tries and the service entries.
    let sids: Vec<u32> = r.dataplane.vips().map(|v| v.service_id).collect();
    let rep = r.dataplane.apply(&[]).unwrap();
    assert_eq!(rep.removed.len(), 4, "{rep:?}");
    assert!(trie(&r).is_empty(), "{:?}", trie(&r));
    assert!(exact_entries(&r).is_empty());
    for s in sids {
        assert_eq!(service(&r, s), abi::Service::default());
        assert_eq!(svc_limit(&r, s), abi::RlConfig::default());
    }
}

#[test]
fn overlapping_ranges_are_refused_and_nothing_changes() {
    let mut r = rig("ranges-overlap");
    r.dataplane.apply(&config()).unwrap();
    let before = trie(&r);
    let mut bad = config();
    bad.push(range_vip("overlap", VIP4, 8099, 8100, proto::TCP, vec![]));
    let err = r.dataplane.apply(&bad).unwrap_err().to_string();
    assert!(err.contains("overlaps"), "{err}");
    assert_eq!(trie(&r), before);
    // Port 0 backends belong to range VIPs only.
    let mut bad = config();
    bad[1].backends.push(backend("10.200.1.14", 0, 1));
    assert!(r.dataplane.apply(&bad).is_err());
}

#[test]
fn a_restart_adopts_range_vips_affinity_and_limits() {
    let dir = pin_dir("ranges-adopt");
    let mut first = rig_at(&dir).0;
    first.dataplane.apply(&config()).unwrap();
    first
        .dataplane
        .set_node_syn_rate_limit(Some(RateLimit { rate: 7, burst: 9 }))
        .unwrap();
    let layout = |r: &Rig| -> BTreeMap<VipKey, (u32, u32, u32, Vec<BackendKey>)> {
        r.dataplane
            .vips()
            .map(|v| {
                (
                    v.spec.key,
                    (
                        v.service_id,
                        v.slice.offset,
                        v.slice.size,
                        v.spec.backends.iter().map(|b| b.key).collect(),
                    ),
                )
            })
            .collect()
    };
    let before = layout(&first);
    let trie_before = trie(&first);
    first.keep_pins = true;
    drop(first);

    let (mut second, outcome, report) = rig_at(&dir);
    assert_eq!(outcome, LoadOutcome::Reused);
    assert!(report.dropped.is_empty(), "{report:?}");
    assert_eq!(report.vips, 4, "{report:?}");
    // Read back from the tries: the same keys, service IDs, slices.
    assert_eq!(layout(&second), before);
    let range4 = second
        .dataplane
        .vips()
        .find(|v| v.spec.key.port == 8000)
        .unwrap();
    assert_eq!(
        range4.spec.key,
        VipKey::range(VIP4.parse().unwrap(), 8000, 8099, proto::TCP)
    );
    assert_eq!(range4.spec.syn_rate_limit, Some(LIMIT));
    assert!(!range4.spec.affinity_client_ip);
    let any6 = second
        .dataplane
        .vips()
        .find(|v| v.spec.key.is_any_port())
        .unwrap();
    assert!(any6.spec.affinity_client_ip);
    assert_eq!(any6.spec.syn_rate_limit, None);
    assert_eq!(
        second.dataplane.node_syn_rate_limit(),
        Some(RateLimit { rate: 7, burst: 9 })
    );

    // The same config keeps it all as it was.
    let rep = second.dataplane.apply(&config()).unwrap();
    assert_eq!(rep.adopted.len(), 4, "{rep:?}");
    assert!(
        rep.added.is_empty()
            && rep.removed.is_empty()
            && rep.rebuilt.is_empty()
            && rep.reconfigured.is_empty(),
        "{rep:?}"
    );
    assert_eq!(layout(&second), before);
    assert_eq!(trie(&second), trie_before);
    check_config_programmed(&second);

    // A second restart, after an affinity change on an adopted VIP.
    second.keep_pins = true;
    drop(second);
    let (mut third, _, report) = rig_at(&dir);
    assert!(report.dropped.is_empty(), "{report:?}");
    let mut next = config();
    next[2].affinity_client_ip = false;
    let rep = third.dataplane.apply(&next).unwrap();
    assert_eq!(rep.reconfigured, vec!["any6".to_string()], "{rep:?}");
    assert_eq!(rep.adopted.len(), 3, "{rep:?}");
    assert_eq!(layout(&third), before, "kept its service ID and slice");
    assert_eq!(service(&third, sid(&third, "any6")).flags, F | V6);
}

#[test]
fn adoption_drops_prefixes_that_do_not_form_a_range() {
    let dir = pin_dir("ranges-stray");
    let mut first = rig_at(&dir).0;
    first.dataplane.apply(&config()).unwrap();
    let range_sid = sid(&first, "range4");
    let addr = VIP4.parse::<std::net::Ipv4Addr>().unwrap().octets();
    let key = |prefixlen: u32, port: u16, proto: u8| {
        lpm_key4(&abi::VipRangeKey4 {
            prefixlen,
            proto,
            addr,
            port: port.to_be_bytes(),
            pad: 0,
        })
    };
    let maps = first.dataplane.maps_mut();
    // A prefix of a service without a service entry, one that leaves a gap
    // in range4's range, and one with port bits beyond its length.
    let stray: [(aya::maps::lpm_trie::Key<RangeData4>, u32); 3] = [
        (key(40 + 16, 7000, proto::UDP), 4000),
        (key(40 + 16, 8200, proto::TCP), range_sid),
        (key(40 + 8, 8001, proto::TCP), 4001),
    ];
    for (k, s) in &stray {
        maps.vip_range_map
            .insert(k, abi::VipValue { service_id: *s }, 0)
            .unwrap();
    }
    first.keep_pins = true;
    drop(first);

    let (second, _, report) = rig_at(&dir);
    println!("{report:#?}");
    // The three prefixes, and range4's service entry left without a VIP.
    assert_eq!(report.dropped.len(), 4, "{report:?}");
    assert!(
        report
            .dropped
            .iter()
            .any(|d| d.contains("do not form one port range")),
        "{report:?}"
    );
    assert!(
        report
            .dropped
            .iter()
            .any(|d| d.contains("port bits set beyond the prefix")),
        "{report:?}"
    );
    assert_eq!(report.vips, 3, "range4 went with its broken range");
    // Only the consistent VIPs' prefixes are left.
    assert_eq!(trie(&second), all_expected(&second));
    assert!(second.dataplane.vips().all(|v| v.spec.name != "range4"));
    assert!(
        !trie(&second)
            .values()
            .any(|s| *s == range_sid || *s >= 4000)
    );
}
