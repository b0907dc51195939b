//! End-to-end: a drain empties even when clients reuse source ports (issue
//! 14, acceptance 2). A client that reuses a port sends a SYN with the
//! 5-tuple of an earlier connection; the balancer must treat it as the new
//! connection it is, not follow the old affinity entry to a backend that is
//! draining or no longer in the VIP. Meanwhile the connections already
//! established on those backends must live on.
//!
//! The client closes every short connection with an RST (SO_LINGER 0, see
//! `rivora_lab::tcp_round_reusing_ports`): a FIN close would leave its port
//! in TIME_WAIT and the next connect from it would fail on the client, not
//! in the balancer.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use rivora_lab::{LongLivedTcp, RoundReport, tcp_round_reusing_ports};

const B1: &str = "10.200.1.11";

/// 60 fixed source ports, below the ephemeral range the long-lived
/// connections draw from.
fn ports() -> Vec<u16> {
    (21000..21060).collect()
}

fn web4(list: &[(usize, u32)]) -> String {
    vip_yaml("web4", VIP4, 80, "tcp", &backends_yaml(false, list))
}

fn round(lab: &Lab, count: usize) -> RoundReport {
    let target: SocketAddr = format!("{VIP4}:80").parse().unwrap();
    tcp_round_reusing_ports(
        &lab.topo.client,
        target,
        &ports(),
        count,
        6,
        Duration::from_secs(3),
    )
}

fn assert_served(r: &RoundReport, what: &str) {
    assert!(r.all_ok(), "{what}: exchanges failed:\n{r}");
    assert_eq!(r.ok, r.attempted, "{what}:\n{r}");
    assert_eq!(r.wrong_peer, 0, "{what}: a peer other than the VIP:\n{r}");
}

#[test]
fn drained_and_removed_backends_get_no_connection_from_reused_ports() {
    let mut lab = Lab::new("drreuse");
    lab.write_config(&[web4(&[(1, 1), (2, 1), (3, 1)])]);
    // A removed backend retires (drains) for 10 minutes: longer than the
    // test, so its established connections must survive on it.
    lab.start(&["--backend-retire-secs", "600"]);

    // Long-lived connections across the drain and the removal: a line
    // every 100 ms, each echo due within 2 s.
    let vip: SocketAddr = format!("{VIP4}:80").parse().unwrap();
    let long = LongLivedTcp::start(
        &lab.topo.client,
        vip,
        30,
        Duration::from_millis(100),
        Duration::from_secs(2),
    )
    .unwrap();

    // Every port used once before the drain: about a third of them now have
    // an affinity entry naming b1.
    let before = round(&lab, ports().len());
    eprintln!("before the drain: {before}");
    assert_served(&before, "before the drain");
    let on_b1 = before.per_backend.get("b1").copied().unwrap_or(0);
    assert!(
        on_b1 >= 5,
        "too few ports' flows on b1 to mean anything:\n{before}"
    );

    let drained = lab.drain(&format!("{B1}:{BACKEND_PORT}"), true);
    assert!(
        drained.len() == 1 && drained[0].state == "draining",
        "{drained:?}"
    );
    let during = round(&lab, 600);
    eprintln!("after draining b1, 600 connections from the same ports: {during}");
    assert_served(&during, "after the drain");
    assert_eq!(
        during.per_backend.get("b1").copied().unwrap_or(0),
        0,
        "a new connection from a reused port reached the drained backend:\n{during}"
    );

    // Undrain b1 and remove b2 from the VIP: the ports' entries now name
    // b2 or b3 (from the round above).
    lab.drain(B1, false);
    let on_b2 = during.per_backend.get("b2").copied().unwrap_or(0);
    assert!(
        on_b2 >= 50,
        "too few connections on b2 to mean anything:\n{during}"
    );
    let generation = lab.status().config_generation;
    lab.write_config(&[web4(&[(1, 1), (3, 1)])]);
    lab.wait_reload(generation, u64::MAX);
    let b2 = lab.backend("10.200.1.12");
    assert!(b2.retiring && b2.state == "draining", "{b2:?}");
    let after = round(&lab, 600);
    eprintln!("after removing b2 from web4, 600 connections from the same ports: {after}");
    assert_served(&after, "after the removal");
    assert_eq!(
        after.per_backend.get("b2").copied().unwrap_or(0),
        0,
        "a new connection from a reused port reached the removed backend:\n{after}"
    );
    assert!(
        after.per_backend.get("b1").copied().unwrap_or(0) > 100,
        "the undrained b1 takes new connections again:\n{after}"
    );

    let long = long.stop();
    eprintln!("long-lived connections: {long}");
    for b in ["b1", "b2"] {
        assert!(
            long.per_backend.get(b).copied().unwrap_or(0) > 0,
            "some long-lived connections were on {b}: {long}"
        );
    }
    assert_eq!(
        long.failed_connections, 0,
        "established connections on the drained and the removed backend live on:\n{long}"
    );
    let ticks = (long.elapsed.as_millis() / 100) as u64;
    assert!(
        long.exchanges >= 30 * ticks * 8 / 10,
        "they kept exchanging data ({ticks} intervals): {long}"
    );
}
