//! sessionAffinity ClientIP with a timeout (bpf/client_affinity.h) through
//! the real program: a client's new connections stay on its backend when a
//! backend is added (where the hash alone moves about a third of the
//! clients), leave it at once when it goes, and follow the hash again once
//! the client has been quiet for the timeout.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use common::*;
use rivora_dataplane::{BackendKey, VipSpec, proto};

const SYN: u8 = 0x02;
const STICKY: &str = "10.200.100.5";
const HASHED: &str = "10.200.100.6";

fn clientip_vip(name: &str, addr: &str, timeout: Option<Duration>, backends: &[&str]) -> VipSpec {
    let mut v = vip(
        name,
        addr,
        80,
        proto::TCP,
        backends.iter().map(|b| backend(b, 8080, 1)).collect(),
    );
    v.affinity_client_ip = true;
    v.affinity_timeout = timeout;
    v
}

/// The VIP with the timeout `t` over `sticky` and the one without over
/// `hashed`, applied together.
fn apply_pair(r: &mut Rig, t: Option<Duration>, sticky: &[&str], hashed: &[&str]) {
    r.dataplane
        .apply(&[
            clientip_vip("sticky", STICKY, t, sticky),
            clientip_vip("hashed", HASHED, None, hashed),
        ])
        .unwrap();
}

/// Each of `clients` opens one connection (a SYN from a new port) to `vip`:
/// the backend it got.
fn choices(r: &mut Rig, clients: &[IpAddr], vip: &str, sport: u16) -> BTreeMap<IpAddr, BackendKey> {
    clients
        .iter()
        .map(|c| {
            (
                *c,
                send_flow(r, *c, sport, vip.parse().unwrap(), 80, raw::TCP, SYN),
            )
        })
        .collect()
}

fn moved(a: &BTreeMap<IpAddr, BackendKey>, b: &BTreeMap<IpAddr, BackendKey>) -> usize {
    a.iter().filter(|(c, k)| b[*c] != **k).count()
}

fn clients(n: u32) -> Vec<IpAddr> {
    (0..n)
        .map(|i| IpAddr::V4(std::net::Ipv4Addr::from(0x0ac8_0000 + 10 + i)))
        .collect()
}

#[test]
fn clients_stay_through_a_backend_addition_and_leave_a_removed_backend() {
    let mut r = rig("cliaff");
    let t = Some(Duration::from_secs(60));
    let ab = ["10.200.1.11", "10.200.1.12"];
    let abc = ["10.200.1.11", "10.200.1.12", "10.200.1.13"];
    apply_pair(&mut r, t, &ab, &ab);
    let cs = clients(200);
    let sticky0 = choices(&mut r, &cs, STICKY, 40000);
    let hashed0 = choices(&mut r, &cs, HASHED, 40000);
    assert_eq!(
        sticky0, hashed0,
        "before any change the two agree (same hash)"
    );
    assert_eq!(
        r.dataplane.maps().client_affinity.keys().count(),
        200,
        "one entry per client of the VIP with a timeout, none for the other"
    );

    apply_pair(&mut r, t, &abc, &abc);
    let sticky1 = choices(&mut r, &cs, STICKY, 41000);
    let hashed1 = choices(&mut r, &cs, HASHED, 41000);
    let hash_moved = moved(&hashed0, &hashed1);
    assert!(
        (40..=95).contains(&hash_moved),
        "the hash alone moves about a third of 200 clients to the new backend: {hash_moved}"
    );
    assert_eq!(
        moved(&sticky0, &sticky1),
        0,
        "with the timeout nobody moves"
    );

    // Backend .11 leaves the sticky VIP: its clients go where the hash
    // sends them now; the others stay.
    apply_pair(&mut r, t, &["10.200.1.12", "10.200.1.13"], &abc);
    let sticky2 = choices(&mut r, &cs, STICKY, 42000);
    let gone: IpAddr = "10.200.1.11".parse().unwrap();
    for c in &cs {
        if sticky1[c].addr == gone {
            assert_ne!(sticky2[c].addr, gone, "{c} left the removed backend");
        } else {
            assert_eq!(sticky2[c], sticky1[c], "{c} kept its backend");
        }
    }
}

#[test]
fn a_quiet_client_follows_the_hash_after_the_timeout() {
    let mut r = rig("cliaffx");
    let t = Some(Duration::from_secs(1));
    let ab = ["10.200.1.11", "10.200.1.12"];
    let abc = ["10.200.1.11", "10.200.1.12", "10.200.1.13"];
    apply_pair(&mut r, t, &ab, &ab);
    let cs = clients(60);
    let before = choices(&mut r, &cs, STICKY, 40000);
    apply_pair(&mut r, t, &abc, &abc);
    let hashed = choices(&mut r, &cs, HASHED, 41000);
    let movers: Vec<IpAddr> = cs
        .iter()
        .filter(|c| hashed[*c] != before[*c])
        .copied()
        .collect();
    assert!(!movers.is_empty(), "some client's hash choice changed");
    // Quiet for the timeout: any probe before it has passed would count as
    // a new flow and restart it, so wait out the ticks the writer gave the
    // timeout (the datapath's clock) plus one, once, then look.
    let hz = rivora_dataplane::jiffies::hz().expect("the kernel's HZ");
    let ticks = u64::from(rivora_dataplane::jiffies::ticks_at_least(
        Duration::from_secs(1),
        hz,
    )) + 1;
    std::thread::sleep(Duration::from_millis(ticks * 128 * 1000 / u64::from(hz)));
    let after = choices(&mut r, &movers, STICKY, 42000);
    for c in &movers {
        assert_eq!(
            after[c], hashed[c],
            "{c}: quiet past the timeout, it follows the hash"
        );
    }
}
