//! `stateless_reverse: false` through the real programs (BPF_PROG_TEST_RUN,
//! maps written by the real map writer, frames read back by the independent
//! parser): a VIP's backend endpoints are never exclusive in
//! nat_endpoint_map(6), its replies are restored from per-flow
//! nat_reverse_map entries, and other traffic of the backend (a pod's
//! pod-to-pod packets, its ClusterIP replies) leaves tc_nat untouched, where
//! an exclusive endpoint would have rewritten it to the VIP. An endpoint a
//! stateless and a stateful VIP share answers both through per-flow entries.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::*;
use rivora_abi as abi;
use rivora_dataplane::{BackendKey, VipSpec, proto};

const VIP4: &str = "10.220.100.1";
const VIP4B: &str = "10.220.100.2";
const VIP6: &str = "fd00:220:100::1";
const CLIENT4: &str = "10.220.0.2";
const CLIENT6: &str = "fd00:220::2";
const POD4: &str = "10.220.1.11";
const POD6: &str = "fd00:220:1::11";

fn web(name: &str, addr: &str, pod: &str, stateless: bool) -> VipSpec {
    let mut v = vip(name, addr, 80, proto::TCP, vec![backend(pod, 8080, 1)]);
    v.stateless_reverse = stateless;
    v
}

/// Sends a client segment (SYN, then the handshake's ACK) through
/// xdp_ingress; returns the backend it was rewritten to.
fn connect(r: &mut Rig, client: &str, sport: u16, vip: &str) -> BackendKey {
    let mut chosen = None;
    for f in [
        FrameSpec::new(client, sport, vip, 80, proto::TCP).syn(),
        FrameSpec::new(client, sport, vip, 80, proto::TCP),
    ] {
        let (verdict, out) = r.datapath.run_xdp(&f.build()).unwrap();
        assert_eq!(verdict, XDP_PASS);
        let p = parse_checked(&out);
        let b = BackendKey {
            addr: p.dst,
            port: p.dport,
        };
        assert_eq!(*chosen.get_or_insert(b), b, "the ACK follows the SYN");
    }
    chosen.unwrap()
}

/// A packet the backend sends from `from` (its serving port) to `to`
/// through tc_nat: (source, source port) as it leaves, checked by the
/// parser, and whether the frame was left exactly as it was.
fn egress(r: &mut Rig, from: BackendKey, to: &str, dport: u16) -> (IpAddr, u16, bool) {
    let mut f = FrameSpec::new("0.0.0.0", from.port, to, dport, proto::TCP);
    f.src = from.addr;
    let frame = f.build();
    let (tcx, out) = r.datapath.run_tc(&frame).unwrap();
    assert_eq!(tcx, TCX_NEXT, "tc_nat never ends the chain");
    let q = parse_checked(&out);
    (q.src, q.sport, out == frame)
}

fn endpoint_map_len(r: &Rig) -> usize {
    r.dataplane.maps().nat_endpoint.keys().count() + r.dataplane.maps().nat_endpoint6.keys().count()
}

#[test]
fn a_stateful_vips_replies_use_per_flow_entries_and_other_pod_traffic_is_left_alone() {
    let mut r = rig("statefulrev");
    r.dataplane
        .apply(&[
            web("web4", VIP4, POD4, false),
            web("web6", VIP6, POD6, false),
        ])
        .unwrap();
    assert_eq!(endpoint_map_len(&r), 0, "no endpoint entry at all");
    assert!(
        r.dataplane.nat_endpoints().values().all(|e| e.flags == 0),
        "remembered only: {:?}",
        r.dataplane.nat_endpoints()
    );
    for (client, vip, other) in [
        (CLIENT4, VIP4, "10.220.9.9"),
        (CLIENT6, VIP6, "fd00:220:9::9"),
    ] {
        let be = connect(&mut r, client, 40000, vip);
        let (src, sport, _) = egress(&mut r, be, client, 40000);
        assert_eq!(
            (src, sport),
            (vip.parse().unwrap(), 80),
            "the reply comes from the VIP"
        );
        // The same pod talking to another pod (or answering a ClusterIP
        // client) from the same port: not the VIP's.
        let (src, sport, same) = egress(&mut r, be, other, 5555);
        assert_eq!((src, sport), (be.addr, 8080), "left as the pod sent it");
        assert!(same, "frame untouched");
        // A client port without a flow: also untouched.
        assert!(egress(&mut r, be, client, 40001).2);
    }
    assert_eq!(r.dataplane.maps().nat_reverse.keys().count(), 1);
    assert_eq!(r.dataplane.maps().nat_reverse6.keys().count(), 1);

    // What stateless reverse (the static default) does instead: the
    // endpoint is exclusive, and every packet from it is rewritten.
    r.dataplane
        .apply(&[
            web("web4", VIP4, POD4, true),
            web("web6", VIP6, POD6, false),
        ])
        .unwrap();
    r.dataplane.set_retire_grace(Duration::ZERO);
    r.dataplane.release_retired().unwrap();
    let pod = BackendKey {
        addr: POD4.parse().unwrap(),
        port: 8080,
    };
    assert!(
        r.dataplane.nat_endpoints()[&rivora_dataplane::endpoints::Endpoint {
            addr: pod.addr,
            port: 8080,
            proto: proto::TCP
        }]
            .exclusive()
    );
    let (src, _, _) = egress(&mut r, pod, "10.220.9.9", 5555);
    assert_eq!(
        src,
        VIP4.parse::<IpAddr>().unwrap(),
        "hijacked: why Kubernetes VIPs turn it off"
    );
}

#[test]
fn an_endpoint_shared_by_a_stateless_and_a_stateful_vip_answers_both_per_flow() {
    let mut r = rig("statefulshared");
    // 60 s grace: a fallback would outlive this test if one were written.
    r.dataplane.set_retire_grace(Duration::from_secs(60));
    r.dataplane
        .apply(&[web("a", VIP4, POD4, true), web("b", VIP4B, POD4, false)])
        .unwrap();
    assert_eq!(endpoint_map_len(&r), 0);
    let be_a = connect(&mut r, CLIENT4, 41000, VIP4);
    let be_b = connect(&mut r, CLIENT4, 41001, VIP4B);
    assert_eq!(be_a, be_b, "one pod behind both");
    assert_eq!(
        egress(&mut r, be_a, CLIENT4, 41000).0,
        VIP4.parse::<IpAddr>().unwrap()
    );
    assert_eq!(
        egress(&mut r, be_b, CLIENT4, 41001).0,
        VIP4B.parse::<IpAddr>().unwrap()
    );
    assert!(
        egress(&mut r, be_a, "10.220.9.9", 5555).2,
        "other traffic untouched"
    );
    assert_eq!(
        r.dataplane.maps().nat_reverse.keys().count(),
        2,
        "both flows per flow"
    );

    // The stateful VIP goes: the endpoint serves the stateless VIP alone,
    // but b's connection may still run on it (its own entry would lose to
    // an exclusive one), so it is not exclusive before the grace.
    let report = r.dataplane.apply(&[web("a", VIP4, POD4, true)]).unwrap();
    assert_eq!(report.removed, vec!["b".to_string()]);
    assert_eq!(endpoint_map_len(&r), 0);
    assert_eq!(
        egress(&mut r, be_b, CLIENT4, 41001).0,
        VIP4B.parse::<IpAddr>().unwrap()
    );
}

#[test]
fn turning_stateless_reverse_off_keeps_established_replies_through_the_fallback() {
    let mut r = rig("statefulswitch");
    r.dataplane.set_retire_grace(Duration::from_secs(60));
    r.dataplane.apply(&[web("web4", VIP4, POD4, true)]).unwrap();
    let be = connect(&mut r, CLIENT4, 42000, VIP4);
    assert_eq!(
        r.dataplane.maps().nat_reverse.keys().count(),
        0,
        "exclusive: no entry"
    );
    let report = r
        .dataplane
        .apply(&[web("web4", VIP4, POD4, false)])
        .unwrap();
    assert_eq!(report.reconfigured, vec!["web4".to_string()], "{report}");
    let flags: Vec<u8> = r
        .dataplane
        .maps()
        .nat_endpoint
        .iter()
        .map(|e| e.unwrap().1.flags)
        .collect();
    assert_eq!(
        flags,
        vec![abi::nat_ep_flags::FALLBACK],
        "demoted, fallback for the grace"
    );
    assert_eq!(
        egress(&mut r, be, CLIENT4, 42000).0,
        VIP4.parse::<IpAddr>().unwrap(),
        "the established connection's replies still come from the VIP"
    );
    // A new connection records its own entry at once.
    let be2 = connect(&mut r, CLIENT4, 42001, VIP4);
    assert_eq!(be2, be);
    assert_eq!(r.dataplane.maps().nat_reverse.keys().count(), 1);
    // With the grace over the fallback goes: only flows with entries are
    // rewritten.
    r.dataplane.set_retire_grace(Duration::ZERO);
    r.dataplane.release_retired().unwrap();
    assert_eq!(endpoint_map_len(&r), 0);
    assert_eq!(
        egress(&mut r, be2, CLIENT4, 42001).0,
        VIP4.parse::<IpAddr>().unwrap()
    );
    assert!(
        egress(&mut r, be, "10.220.9.9", 5555).2,
        "other traffic untouched"
    );
}

/// stateless_reverse is not in the maps: adoption reads it from the
/// endpoint entries (an exclusive one: stateless; none: stateful, the safe
/// reading), so an adopted VIP kept as it is does not make a stateful
/// VIP's endpoints exclusive, and the same config adopts without a change.
#[test]
fn adoption_reads_stateless_reverse_from_the_endpoint_entries() {
    let dir = pin_dir("statefuladopt");
    let config = || {
        vec![
            web("stateful", VIP4, POD4, false),
            web("stateless", VIP4B, "10.220.1.12", true),
        ]
    };
    let (mut r, _, _) = rig_at(&dir);
    r.dataplane.apply(&config()).unwrap();
    let be = connect(&mut r, CLIENT4, 43000, VIP4);
    r.keep_pins = true;
    drop(r);
    let (mut r, _, report) = rig_at(&dir);
    assert!(report.dropped.is_empty(), "{:?}", report.dropped);
    let read: Vec<(IpAddr, bool)> = r
        .dataplane
        .vips()
        .map(|v| (v.spec.key.addr, v.spec.stateless_reverse))
        .collect();
    assert!(read.contains(&(VIP4.parse().unwrap(), false)), "{read:?}");
    assert!(read.contains(&(VIP4B.parse().unwrap(), true)), "{read:?}");
    let report = r.dataplane.apply(&config()).unwrap();
    assert_eq!(report.adopted.len(), 2, "{report}");
    assert!(report.reconfigured.is_empty(), "{report}");
    assert_eq!(
        r.dataplane.maps().nat_endpoint.keys().count(),
        1,
        "only the stateless VIP's"
    );
    assert_eq!(
        egress(&mut r, be, CLIENT4, 43000).0,
        VIP4.parse::<IpAddr>().unwrap()
    );
    assert!(
        egress(&mut r, be, "10.220.9.9", 5555).2,
        "other traffic untouched"
    );
    r.keep_pins = false;
}

/// A stateful VIP's endpoints are only remembered, never written to
/// nat_endpoint_map: changing the VIP's backends and removing it must not
/// trip over the map entries that were never there (the first Kubernetes
/// end-to-end run did: "nat_endpoint_map: bpf_map_delete_elem failed").
#[test]
fn a_stateful_vip_changes_and_goes_without_touching_absent_endpoint_entries() {
    for (addr, pod, other) in [(VIP4, POD4, "10.220.1.12"), (VIP6, POD6, "fd00:220:1::12")] {
        let mut r = rig("sfgone");
        r.dataplane.apply(&[web("web", addr, pod, false)]).unwrap();
        assert_eq!(endpoint_map_len(&r), 0);
        let mut two = web("web", addr, pod, false);
        two.backends.push(backend(other, 8080, 1));
        r.dataplane.apply(&[two]).unwrap();
        r.dataplane
            .apply(&[web("web", addr, other, false)])
            .expect("a backend leaving a stateful VIP");
        r.dataplane.apply(&[]).expect("the stateful VIP removed");
        assert_eq!(endpoint_map_len(&r), 0);
        assert!(r.dataplane.vips().next().is_none());
    }
}
