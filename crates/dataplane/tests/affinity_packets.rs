//! Packet tests of what an affinity entry may and may not do once its
//! backend is draining, down or no longer in the VIP (issue 14, item 2):
//! a TCP SYN (SYN without ACK) is a new connection and is balanced as one,
//! whatever the affinity table says; an established packet keeps its
//! backend while it is draining or retiring; a UDP entry is dropped when its
//! backend leaves the VIP. The maps are written by the real map writer, the
//! frames go through the real programs (BPF_PROG_TEST_RUN), and every
//! emitted frame is checked by an independent parser.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use common::raw::{TCP, UDP, frame, tcp, udp};
use common::send_flow as send;
use common::*;
use rivora_abi as abi;
use rivora_dataplane::{BackendKey, BackendSpec, proto};

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH_ACK: u8 = 0x18;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Three backends of one family (weights 1, 1, 1).
fn three(v6: bool) -> Vec<BackendSpec> {
    (11..14)
        .map(|i| {
            if v6 {
                backend(&format!("fd00:210:1::{i}"), 8080, 1)
            } else {
                backend(&format!("10.210.1.{i}"), 8080, 1)
            }
        })
        .collect()
}

fn addrs(v6: bool) -> (IpAddr, IpAddr) {
    if v6 {
        (ip("fd00:210::2"), ip("fd00:210:100::1"))
    } else {
        (ip("10.210.0.2"), ip("10.210.100.1"))
    }
}

/// The backend's reply to `client:sport` goes through tc_nat and must come
/// out with the VIP as its source: the flow's reverse NAT entry exists.
fn assert_reply_restored(
    r: &mut Rig,
    be: BackendKey,
    client: IpAddr,
    sport: u16,
    vip: IpAddr,
    vport: u16,
    l4: u8,
) {
    let seg = if l4 == TCP {
        tcp(be.addr, client, be.port, sport, PSH_ACK, b"reply")
    } else {
        udp(be.addr, client, be.port, sport, b"reply")
    };
    let (v, out) = r
        .datapath
        .run_tc(&frame(be.addr, client, l4, &[], &seg))
        .unwrap();
    assert_eq!(v, TCX_NEXT);
    let q = parse_checked(&out);
    assert_eq!(
        (q.src, q.sport),
        (vip, vport),
        "the reply of {be} to {client}:{sport} is restored to the VIP"
    );
}

fn new_flows(r: &Rig, name: &str) -> u64 {
    r.dataplane
        .vip_counters()
        .unwrap()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap()
        .stats
        .new_flows
}

/// Opens `n` connections (SYN, then an ACK) from ports `first..` and
/// returns each port's backend.
fn open(r: &mut Rig, client: IpAddr, vip: IpAddr, first: u16, n: u16) -> BTreeMap<u16, BackendKey> {
    (first..first + n)
        .map(|sport| {
            let a = send(r, client, sport, vip, 80, TCP, SYN);
            let b = send(r, client, sport, vip, 80, TCP, ACK);
            assert_eq!(a, b, "the handshake's ACK follows the SYN");
            (sport, a)
        })
        .collect()
}

/// For every port whose connection was on `gone`: an established packet
/// still reaches it when `established_stays` (draining, retiring), and a SYN
/// from the same port (a new connection reusing the 5-tuple) reaches one of
/// `allowed`, after which the flow's packets and replies follow the new
/// backend. Returns how many ports were checked.
#[allow(clippy::too_many_arguments)]
fn check_reuse(
    r: &mut Rig,
    name: &str,
    client: IpAddr,
    vip: IpAddr,
    ports: &BTreeMap<u16, BackendKey>,
    gone: BackendKey,
    allowed: &[BackendKey],
    established_stays: bool,
) -> usize {
    let reused: Vec<u16> = ports
        .iter()
        .filter(|(_, b)| **b == gone)
        .map(|(p, _)| *p)
        .collect();
    assert!(
        reused.len() >= 10,
        "too few flows on {gone} to mean anything: {}",
        reused.len()
    );
    let flows_before = new_flows(r, name);
    let mut spread: BTreeMap<BackendKey, usize> = BTreeMap::new();
    for &sport in &reused {
        let est = send(r, client, sport, vip, 80, TCP, PSH_ACK);
        if established_stays {
            assert_eq!(
                est, gone,
                "an established packet of :{sport} left its backend"
            );
        } else {
            assert_ne!(
                est, gone,
                "an established packet of :{sport} reached a down backend"
            );
        }
        let now = send(r, client, sport, vip, 80, TCP, SYN);
        assert!(
            now != gone && allowed.contains(&now),
            "{name}: a SYN from :{sport} reusing a stale affinity entry went to {now}, not to one of {allowed:?}"
        );
        *spread.entry(now).or_default() += 1;
        // The entry now names the new backend; so does its reverse NAT entry.
        assert_eq!(send(r, client, sport, vip, 80, TCP, ACK), now);
        assert_reply_restored(r, now, client, sport, vip, 80, TCP);
    }
    assert_eq!(
        new_flows(r, name) - flows_before,
        reused.len() as u64,
        "each re-balanced SYN counts as a new flow"
    );
    eprintln!(
        "{name}: {} SYNs reusing entries of {gone}: 0 reached it, spread {spread:?}",
        reused.len()
    );
    reused.len()
}

#[test]
fn a_syn_reusing_an_entry_of_a_draining_backend_goes_to_a_healthy_one() {
    for v6 in [false, true] {
        let mut r = rig("affdrain");
        let (client, vip_addr) = addrs(v6);
        let bs = three(v6);
        r.dataplane
            .apply(&[vip(
                "web",
                &vip_addr.to_string(),
                80,
                proto::TCP,
                bs.clone(),
            )])
            .unwrap();
        let ports = open(&mut r, client, vip_addr, 20000, 300);
        let drained = bs[0].key;
        r.dataplane
            .set_backend_state(&drained, abi::backend_state::DRAINING)
            .unwrap();
        let healthy = [bs[1].key, bs[2].key];
        check_reuse(
            &mut r, "web", client, vip_addr, &ports, drained, &healthy, true,
        );
        // Connections on healthy backends: a SYN reusing their 5-tuple
        // lands where Maglev puts it, which is where they already were.
        for (sport, b) in ports.iter().filter(|(_, b)| **b != drained) {
            assert_eq!(send(&mut r, client, *sport, vip_addr, 80, TCP, SYN), *b);
        }
    }
}

#[test]
fn a_syn_reusing_an_entry_of_a_removed_backend_goes_to_a_member() {
    for v6 in [false, true] {
        let mut r = rig("affremove");
        r.dataplane.set_retire_grace(Duration::from_secs(600));
        let (client, vip_addr) = addrs(v6);
        let va = vip_addr.to_string();
        let bs = three(v6);
        let alt = || vip("alt", &va, 81, proto::TCP, vec![bs[0].clone()]);
        r.dataplane
            .apply(&[vip("web", &va, 80, proto::TCP, bs.clone()), alt()])
            .unwrap();
        let ports = open(&mut r, client, vip_addr, 21000, 300);
        let gone = bs[0].key;
        let (first, second): (BTreeMap<u16, BackendKey>, BTreeMap<u16, BackendKey>) = ports
            .iter()
            .map(|(p, b)| (*p, *b))
            .partition(|(p, _)| p % 2 == 0);
        let members = [bs[1].key, bs[2].key];

        // Removed from web but still in alt: healthy, yet not web's.
        r.dataplane
            .apply(&[vip("web", &va, 80, proto::TCP, bs[1..].to_vec()), alt()])
            .unwrap();
        assert_eq!(
            r.dataplane
                .backends()
                .find(|b| b.key == gone)
                .unwrap()
                .state,
            abi::backend_state::HEALTHY
        );
        check_reuse(
            &mut r, "web", client, vip_addr, &first, gone, &members, true,
        );

        // Removed from its last VIP: retiring (draining for the grace).
        let rep = r
            .dataplane
            .apply(&[vip("web", &va, 80, proto::TCP, bs[1..].to_vec())])
            .unwrap();
        assert_eq!(rep.backends_retired, 1, "{rep}");
        check_reuse(
            &mut r, "web", client, vip_addr, &second, gone, &members, true,
        );
    }
}

#[test]
fn a_syn_reusing_an_entry_of_a_down_backend_goes_to_a_healthy_one() {
    for v6 in [false, true] {
        let mut r = rig("affdown");
        let (client, vip_addr) = addrs(v6);
        let bs = three(v6);
        r.dataplane
            .apply(&[vip(
                "web",
                &vip_addr.to_string(),
                80,
                proto::TCP,
                bs.clone(),
            )])
            .unwrap();
        let ports = open(&mut r, client, vip_addr, 22000, 300);
        let down = bs[2].key;
        r.dataplane
            .set_backend_state(&down, abi::backend_state::DOWN)
            .unwrap();
        // A down backend takes nothing: established packets move too (and,
        // being re-balanced, count as new flows: so the count is checked
        // only over the SYNs, by sending the established packet first).
        let reused: Vec<u16> = ports
            .iter()
            .filter(|(_, b)| **b == down)
            .map(|(p, _)| *p)
            .collect();
        assert!(reused.len() >= 10);
        for &sport in &reused {
            let est = send(&mut r, client, sport, vip_addr, 80, TCP, PSH_ACK);
            assert_ne!(est, down);
            let now = send(&mut r, client, sport, vip_addr, 80, TCP, SYN);
            assert!(
                now != down && bs.iter().any(|b| b.key == now),
                "SYN from :{sport} went to {now}"
            );
            assert_eq!(send(&mut r, client, sport, vip_addr, 80, TCP, ACK), now);
            assert_reply_restored(&mut r, now, client, sport, vip_addr, 80, TCP);
        }
        eprintln!(
            "down (v6 {v6}): {} SYNs reusing entries of {down}: 0 reached it",
            reused.len()
        );
    }
}

/// UDP has no SYN: an entry (made by a flow's second datagram) is the flow. It keeps a draining backend (drain
/// lets established flows finish), leaves a down one, and is dropped by the
/// writer when its backend leaves the VIP (removed from it, or retiring).
#[test]
fn udp_entries_keep_draining_backends_and_leave_removed_ones() {
    for v6 in [false, true] {
        let mut r = rig("affudp");
        r.dataplane.set_retire_grace(Duration::from_secs(600));
        let (client, vip_addr) = addrs(v6);
        let va = vip_addr.to_string();
        let bs = three(v6);
        // b2 is also in "alt", so removing it from "dns" leaves it healthy.
        let alt = || vip("alt", &va, 54, proto::UDP, vec![bs[1].clone()]);
        r.dataplane
            .apply(&[vip("dns", &va, 53, proto::UDP, bs.clone()), alt()])
            .unwrap();
        // A UDP flow earns its entry with its second datagram (balance.h).
        let flows: BTreeMap<u16, BackendKey> = (23000..23300u16)
            .map(|p| {
                let first = send(&mut r, client, p, vip_addr, 53, UDP, 0);
                assert_eq!(send(&mut r, client, p, vip_addr, 53, UDP, 0), first);
                (p, first)
            })
            .collect();
        let on = |b: BackendKey| flows.iter().filter(move |(_, x)| **x == b).map(|(p, _)| *p);
        for b in &bs {
            assert!(on(b.key).count() >= 10, "too few flows on {}", b.key);
        }

        // Draining: every flow stays where it is.
        r.dataplane
            .set_backend_state(&bs[0].key, abi::backend_state::DRAINING)
            .unwrap();
        for (p, b) in &flows {
            assert_eq!(
                send(&mut r, client, *p, vip_addr, 53, UDP, 0),
                *b,
                "UDP flow :{p} moved off a draining backend"
            );
        }

        // Down: its flows move to a healthy backend, and stay there.
        r.dataplane
            .set_backend_state(&bs[2].key, abi::backend_state::DOWN)
            .unwrap();
        for p in on(bs[2].key) {
            let now = send(&mut r, client, p, vip_addr, 53, UDP, 0);
            assert_eq!(now, bs[1].key, "the only healthy backend left");
            assert_reply_restored(&mut r, now, client, p, vip_addr, 53, UDP);
        }
        r.dataplane
            .set_backend_state(&bs[2].key, abi::backend_state::HEALTHY)
            .unwrap();
        for p in on(bs[2].key) {
            assert_eq!(
                send(&mut r, client, p, vip_addr, 53, UDP, 0),
                bs[1].key,
                "a re-balanced flow stays put"
            );
        }

        // Removed from dns (still healthy in alt): its dns flows move to a
        // member; the alt flow it serves is untouched.
        let alt_flow = send(&mut r, client, 23999, vip_addr, 54, UDP, 0);
        assert_eq!(alt_flow, bs[1].key);
        let t = std::time::Instant::now();
        let rep = r
            .dataplane
            .apply(&[
                vip(
                    "dns",
                    &va,
                    53,
                    proto::UDP,
                    vec![bs[0].clone(), bs[2].clone()],
                ),
                alt(),
            ])
            .unwrap();
        let on_b2 = flows.values().filter(|b| **b != bs[0].key).count();
        assert_eq!(
            rep.udp_flows_forgotten, on_b2,
            "dns's entries on b2, not alt's: {rep}"
        );
        eprintln!(
            "udp (v6 {v6}): apply that removed a backend from a UDP VIP took {:?}",
            t.elapsed()
        );
        let mut moved = 0;
        for (p, b) in &flows {
            let now = send(&mut r, client, *p, vip_addr, 53, UDP, 0);
            if *b == bs[0].key {
                assert_eq!(now, *b, "UDP flow :{p} on the draining member stays");
            } else {
                // b2's own flows, and b3's that went to b2 while b3 was
                // down: re-balanced over dns's healthy members (b3 only).
                assert_eq!(
                    now, bs[2].key,
                    "UDP flow :{p} of a removed backend went to {now}"
                );
                moved += 1;
            }
        }
        assert_eq!(
            send(&mut r, client, 23999, vip_addr, 54, UDP, 0),
            bs[1].key,
            "alt keeps b2"
        );

        // Removed from its last VIP (b1, draining): retiring; its UDP flows
        // leave it as well.
        r.dataplane
            .apply(&[vip("dns", &va, 53, proto::UDP, vec![bs[2].clone()]), alt()])
            .unwrap();
        for p in on(bs[0].key) {
            assert_eq!(
                send(&mut r, client, p, vip_addr, 53, UDP, 0),
                bs[2].key,
                "UDP flow :{p} of a retiring backend"
            );
            moved += 1;
        }
        eprintln!("udp (v6 {v6}): {moved} flows of removed or retiring backends moved, 0 stayed");
    }
}

/// sessionAffinity clientIP hashes the client's address only: a client's
/// SYNs all go to its backend while that backend is healthy, wherever its
/// old 5-tuples' entries point, and all to one other backend while it
/// drains.
#[test]
fn client_ip_affinity_survives_syn_rebalancing() {
    for v6 in [false, true] {
        let mut r = rig("affcip");
        let (_, vip_addr) = addrs(v6);
        let bs = three(v6);
        let mut spec = vip("cip", &vip_addr.to_string(), 80, proto::TCP, bs.clone());
        spec.affinity_client_ip = true;
        r.dataplane.apply(&[spec]).unwrap();
        for c in 2..8u8 {
            let client = if v6 {
                ip(&format!("fd00:210::{c}"))
            } else {
                ip(&format!("10.210.0.{c}"))
            };
            let first = 24000 + c as u16 * 100;
            let ports = open(&mut r, client, vip_addr, first, 20);
            let home = ports[&first];
            assert!(
                ports.values().all(|b| *b == home),
                "client {client} spread: {ports:?}"
            );

            r.dataplane
                .set_backend_state(&home, abi::backend_state::DRAINING)
                .unwrap();
            let mut during = std::collections::BTreeSet::new();
            for sport in ports.keys() {
                assert_eq!(
                    send(&mut r, client, *sport, vip_addr, 80, TCP, PSH_ACK),
                    home
                );
                during.insert(send(&mut r, client, *sport, vip_addr, 80, TCP, SYN));
            }
            assert_eq!(
                during.len(),
                1,
                "client {client}'s new connections stay together: {during:?}"
            );
            assert!(
                !during.contains(&home),
                "client {client}: a SYN reached its draining backend"
            );

            // Healthy again: its SYNs go home, though every entry of its
            // 5-tuples names the other backend now.
            r.dataplane
                .set_backend_state(&home, abi::backend_state::HEALTHY)
                .unwrap();
            for sport in ports.keys() {
                assert_eq!(
                    send(&mut r, client, *sport, vip_addr, 80, TCP, SYN),
                    home,
                    "client {client} :{sport}"
                );
                assert_eq!(send(&mut r, client, *sport, vip_addr, 80, TCP, ACK), home);
            }
        }
    }
}
