//! `PinnedView` (a read-only view of another process's pins) says which backends a new flow
//! to a VIP can reach; packets through xdp_ingress check it: 300 new flows to each VIP land on
//! exactly the backends the view lists, before and after a drain, in both families.

mod common;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use common::{backend, raw, rig, send_flow, vip};
use rivora_dataplane::view::PinnedView;
use rivora_dataplane::{BackendKey, VipKey, proto};

/// The backends 300 new TCP flows from distinct client ports reached.
fn reached(r: &mut common::Rig, vip_addr: &str, port: u16, base: u16) -> BTreeSet<SocketAddr> {
    let client: IpAddr = if vip_addr.contains(':') {
        "2001:db8:c::1".parse().unwrap()
    } else {
        "192.0.2.10".parse().unwrap()
    };
    (0..300u16)
        .map(|i| {
            let b = send_flow(
                r,
                client,
                base + i,
                vip_addr.parse().unwrap(),
                port,
                raw::TCP,
                0x02,
            );
            SocketAddr::new(b.addr, b.port)
        })
        .collect()
}

fn addrs(v: &[(&str, u16)]) -> BTreeSet<SocketAddr> {
    v.iter()
        .map(|(a, p)| SocketAddr::new(a.parse().unwrap(), *p))
        .collect()
}

#[test]
fn the_view_lists_what_new_flows_reach() {
    let mut r = rig("pinned-view");
    let mut v4 = vip(
        "web",
        "10.200.0.1",
        80,
        proto::TCP,
        vec![
            backend("10.0.1.1", 8080, 1),
            backend("10.0.1.2", 8080, 1),
            backend("10.0.1.3", 8080, 1),
        ],
    );
    let v6 = vip(
        "web6",
        "2001:db8:200::1",
        443,
        proto::TCP,
        vec![
            backend("2001:db8:1::1", 8443, 1),
            backend("2001:db8:1::2", 8443, 1),
        ],
    );
    r.dataplane.apply(&[v4.clone(), v6.clone()]).unwrap();

    let view = PinnedView::open(&r.pin_dir).unwrap();
    let k4 = VipKey::exact("10.200.0.1".parse().unwrap(), 80, proto::TCP);
    let k6 = VipKey::exact("2001:db8:200::1".parse().unwrap(), 443, proto::TCP);
    let want4 = addrs(&[("10.0.1.1", 8080), ("10.0.1.2", 8080), ("10.0.1.3", 8080)]);
    let want6 = addrs(&[("2001:db8:1::1", 8443), ("2001:db8:1::2", 8443)]);
    assert_eq!(view.new_flow_backends(&k4).unwrap(), Some(want4.clone()));
    assert_eq!(view.new_flow_backends(&k6).unwrap(), Some(want6.clone()));
    assert_eq!(reached(&mut r, "10.200.0.1", 80, 10000), want4);
    assert_eq!(reached(&mut r, "2001:db8:200::1", 443, 10000), want6);

    // Not a VIP: None. Same address, other port: None.
    let other = VipKey::exact("10.200.0.1".parse().unwrap(), 81, proto::TCP);
    assert_eq!(view.new_flow_backends(&other).unwrap(), None);

    // A drained backend keeps its slots and takes no new flows: the view leaves it out, and
    // so do fresh flows (other client ports: the earlier flows have entries).
    v4.draining.insert(BackendKey {
        addr: "10.0.1.2".parse().unwrap(),
        port: 8080,
    });
    r.dataplane.apply(&[v4.clone(), v6]).unwrap();
    let drained = addrs(&[("10.0.1.1", 8080), ("10.0.1.3", 8080)]);
    assert_eq!(view.new_flow_backends(&k4).unwrap(), Some(drained.clone()));
    assert_eq!(reached(&mut r, "10.200.0.1", 80, 20000), drained);

    // Removed from the desired state: gone from the view too.
    r.dataplane.apply(&[v4]).unwrap();
    assert_eq!(view.new_flow_backends(&k6).unwrap(), None);
}
