//! A source's drain (`VipSpec::draining`, a terminating Kubernetes endpoint)
//! through the real programs (BPF_PROG_TEST_RUN, maps written by the real
//! map writer, frames read back by the independent parser): the backend
//! stays in the VIP's Maglev slice (the slice does not move), its
//! established flows keep it, new flows skip it; the reason persists in
//! backend_health_map's flags across a restart and combines with an
//! operator's drain and the probes (down wins); a backend shared by two
//! VIPs drains only while both ask for it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use common::*;
use rivora_abi as abi;
use rivora_dataplane::{BackendKey, Error, VipSpec, proto};

const VIP4: &str = "10.230.100.1";
const VIP4B: &str = "10.230.100.2";
const CLIENT4: &str = "10.230.0.2";
const B1: &str = "10.230.1.11";
const B2: &str = "10.230.1.12";
const B3: &str = "10.230.1.13";

fn key(addr: &str) -> BackendKey {
    BackendKey {
        addr: addr.parse().unwrap(),
        port: 8080,
    }
}

fn web(name: &str, addr: &str, draining: &[&str]) -> VipSpec {
    let mut v = vip(
        name,
        addr,
        80,
        proto::TCP,
        vec![
            backend(B1, 8080, 1),
            backend(B2, 8080, 1),
            backend(B3, 8080, 1),
        ],
    );
    v.draining = draining.iter().map(|a| key(a)).collect();
    v
}

/// Where a segment of `sport` (a SYN when `syn`) is sent.
fn send(r: &mut Rig, sport: u16, vip: &str, syn: bool) -> IpAddr {
    let mut f = FrameSpec::new(CLIENT4, sport, vip, 80, proto::TCP);
    f.syn = syn;
    let (verdict, out) = r.datapath.run_xdp(&f.build()).unwrap();
    assert_eq!(verdict, XDP_PASS);
    parse_checked(&out).dst
}

/// (state, flags) of a backend as the health map holds it.
fn health(r: &Rig, addr: &str) -> (u32, u32) {
    let b = r
        .dataplane
        .backends()
        .find(|b| b.key == key(addr))
        .expect("backend programmed");
    let h = r.dataplane.maps().backend_health.get(&b.id, 0).unwrap();
    (h.state, h.flags)
}

fn slice_content(r: &Rig, name: &str) -> Vec<u32> {
    let v = r.dataplane.vips().find(|v| v.spec.name == name).unwrap();
    r.dataplane.maps().maglev.read(v.slice.offset, v.slice.size)
}

/// 300 new connections (SYNs): how many went to each backend address.
fn spread(r: &mut Rig, base: u16, vip: &str) -> BTreeMap<IpAddr, u32> {
    let mut n = BTreeMap::new();
    for i in 0..300 {
        *n.entry(send(r, base + i, vip, true)).or_insert(0) += 1;
    }
    n
}

#[test]
fn a_draining_backend_keeps_its_slice_and_flows_and_takes_no_new_ones() {
    let mut r = rig("drainsrc");
    r.dataplane.apply(&[web("web", VIP4, &[])]).unwrap();
    // Established connections on every backend, one per backend at least.
    let mut on: BTreeMap<IpAddr, u16> = BTreeMap::new();
    for sport in 40000..40100 {
        let dst = send(&mut r, sport, VIP4, false);
        on.entry(dst).or_insert(sport);
    }
    assert_eq!(on.len(), 3, "flows on every backend: {on:?}");
    let slice = slice_content(&r, "web");

    let report = r.dataplane.apply(&[web("web", VIP4, &[B2])]).unwrap();
    assert_eq!(report.reconfigured, vec!["web".to_string()], "{report}");
    assert!(report.rebuilt.is_empty(), "{report}");
    assert_eq!(slice_content(&r, "web"), slice, "the slice did not move");
    assert_eq!(
        health(&r, B2),
        (
            abi::backend_state::DRAINING,
            abi::backend_flags::TERMINATING
        )
    );
    assert_eq!(health(&r, B1), (abi::backend_state::HEALTHY, 0));
    let b2: IpAddr = B2.parse().unwrap();
    for (dst, sport) in &on {
        assert_eq!(
            send(&mut r, *sport, VIP4, false),
            *dst,
            "established flow kept its backend"
        );
    }
    let n = spread(&mut r, 50000, VIP4);
    assert_eq!(
        n.get(&b2),
        None,
        "no new connection on the draining backend: {n:?}"
    );
    assert_eq!(n.values().sum::<u32>(), 300);

    // The source serves from it again.
    r.dataplane.apply(&[web("web", VIP4, &[])]).unwrap();
    assert_eq!(health(&r, B2), (abi::backend_state::HEALTHY, 0));
    assert!(spread(&mut r, 51000, VIP4).contains_key(&b2));
}

#[test]
fn a_backend_shared_by_two_vips_drains_only_while_both_ask() {
    let mut r = rig("drainshared");
    r.dataplane
        .apply(&[web("a", VIP4, &[B3]), web("b", VIP4B, &[])])
        .unwrap();
    // b still serves from it (it could be b's terminating fallback): one
    // health state per backend, and serving wins.
    assert_eq!(health(&r, B3), (abi::backend_state::HEALTHY, 0));
    let b3: IpAddr = B3.parse().unwrap();
    assert!(spread(&mut r, 40000, VIP4B).contains_key(&b3));
    r.dataplane
        .apply(&[web("a", VIP4, &[B3]), web("b", VIP4B, &[B3])])
        .unwrap();
    assert_eq!(
        health(&r, B3),
        (
            abi::backend_state::DRAINING,
            abi::backend_flags::TERMINATING
        )
    );
    assert!(!spread(&mut r, 41000, VIP4).contains_key(&b3));
    assert!(!spread(&mut r, 42000, VIP4B).contains_key(&b3));
    // A VIP that no longer lists it does not count: b alone decides.
    let mut a = web("a", VIP4, &[]);
    a.backends.retain(|b| b.key != key(B3));
    r.dataplane
        .apply(&[a.clone(), web("b", VIP4B, &[B3])])
        .unwrap();
    assert_eq!(health(&r, B3).0, abi::backend_state::DRAINING);
    r.dataplane.apply(&[a, web("b", VIP4B, &[])]).unwrap();
    assert_eq!(health(&r, B3), (abi::backend_state::HEALTHY, 0));
}

#[test]
fn a_sources_drain_combines_with_the_operators_and_the_probes() {
    let mut r = rig("draincombo");
    let k = key(B1);
    r.dataplane.apply(&[web("web", VIP4, &[B1])]).unwrap();
    use abi::backend_flags::{DRAINED, PROBE_DOWN, TERMINATING};
    use abi::backend_state::{DOWN, DRAINING, HEALTHY};
    assert_eq!(health(&r, B1), (DRAINING, TERMINATING));
    // An operator's drain on top; undrained, the source's drain remains.
    r.dataplane.set_drained(&k, true).unwrap();
    assert_eq!(health(&r, B1), (DRAINING, TERMINATING | DRAINED));
    r.dataplane.set_drained(&k, false).unwrap();
    assert_eq!(health(&r, B1), (DRAINING, TERMINATING));
    // Down wins; back up, still draining.
    r.dataplane.set_probe_down(&k, true).unwrap();
    assert_eq!(health(&r, B1), (DOWN, TERMINATING | PROBE_DOWN));
    let b1: IpAddr = B1.parse().unwrap();
    r.dataplane.set_probe_down(&k, false).unwrap();
    assert_eq!(health(&r, B1), (DRAINING, TERMINATING));
    // The source stops draining while the operator drains: drained.
    r.dataplane.set_drained(&k, true).unwrap();
    r.dataplane.apply(&[web("web", VIP4, &[])]).unwrap();
    assert_eq!(health(&r, B1), (DRAINING, DRAINED));
    r.dataplane.set_drained(&k, false).unwrap();
    assert_eq!(health(&r, B1), (HEALTHY, 0));
    assert!(spread(&mut r, 40000, VIP4).contains_key(&b1));
}

#[test]
fn a_sources_drain_persists_across_a_restart() {
    let dir = pin_dir("drainrestart");
    let (mut r, _, _) = rig_at(&dir);
    r.dataplane.apply(&[web("web", VIP4, &[B2])]).unwrap();
    let established = send(&mut r, 40000, VIP4, false);
    let slice = slice_content(&r, "web");
    r.keep_pins = true;
    drop(r);

    let (mut r, _, report) = rig_at(&dir);
    assert!(report.dropped.is_empty(), "{:?}", report.dropped);
    assert_eq!(
        health(&r, B2),
        (
            abi::backend_state::DRAINING,
            abi::backend_flags::TERMINATING
        ),
        "read back from the health map"
    );
    let v = r.dataplane.vips().next().unwrap();
    assert_eq!(v.spec.draining, BTreeSet::from([key(B2)]));
    assert_eq!(send(&mut r, 40000, VIP4, false), established);
    let b2: IpAddr = B2.parse().unwrap();
    assert!(
        !spread(&mut r, 41000, VIP4).contains_key(&b2),
        "still no new flows"
    );
    // The same config: adopted as it is.
    let report = r.dataplane.apply(&[web("web", VIP4, &[B2])]).unwrap();
    assert_eq!(report.adopted, vec!["web".to_string()], "{report}");
    assert_eq!(slice_content(&r, "web"), slice);
    assert_eq!(health(&r, B2).0, abi::backend_state::DRAINING);
    r.keep_pins = false;
}

#[test]
fn a_drain_of_a_backend_the_vip_does_not_list_is_refused() {
    let mut r = rig("drainbad");
    let mut v = web("web", VIP4, &[]);
    v.draining.insert(key("10.230.1.99"));
    let err = r.dataplane.apply(&[v]).unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err}");
    assert!(
        err.to_string()
            .contains("VIP web: draining: 10.230.1.99:8080 is not one of its backends"),
        "{err}"
    );
    assert_eq!(r.dataplane.vips().count(), 0, "nothing applied");
}

/// A backend that arrives already draining (a VIP added with a terminating
/// endpoint) never takes a new flow: its health is written before the slice.
#[test]
fn a_new_backend_listed_as_draining_starts_draining() {
    let mut r = rig("drainnew");
    r.dataplane.apply(&[web("web", VIP4, &[B1])]).unwrap();
    assert_eq!(health(&r, B1).0, abi::backend_state::DRAINING);
    let b1: IpAddr = B1.parse().unwrap();
    assert!(!spread(&mut r, 40000, VIP4).contains_key(&b1));
}

/// The handshake race (balance.h rv_syn_hint): a SYN makes no affinity
/// entry, so its ACK is balanced again; when the SYN's backend turned
/// draining in between, Maglev skips it and would hand the ACK to a backend
/// that never saw the SYN (a reset connection). The SYN's hint keeps the
/// handshake on its backend, and what follows sticks to it, while new
/// connections skip it.
#[test]
fn a_handshake_finishes_on_its_backend_when_it_turns_draining_in_between() {
    let mut r = rig("drainhs");
    r.dataplane.apply(&[web("web", VIP4, &[])]).unwrap();
    for i in 0..50 {
        let sport = 41000 + i;
        let to = send(&mut r, sport, VIP4, true);
        r.dataplane
            .apply(&[web("web", VIP4, &[&to.to_string()])])
            .unwrap();
        assert_eq!(
            send(&mut r, sport, VIP4, false),
            to,
            "handshake {i}: the ACK follows its SYN to the now draining backend"
        );
        assert_eq!(
            send(&mut r, sport, VIP4, false),
            to,
            "handshake {i}: the connection stays there"
        );
        assert_ne!(
            send(&mut r, sport + 1000, VIP4, true),
            to,
            "handshake {i}: a new connection skips the draining backend"
        );
        r.dataplane.apply(&[web("web", VIP4, &[])]).unwrap();
    }
}
