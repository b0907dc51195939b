//! End-to-end health checking and draining: real probes against the
//! backends' servers, real traffic through the VIP while backends fail,
//! come back, drain and flap.

mod common;

use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use common::*;
use rivora_lab::{ConnectionChurn, LongLivedTcp};

const B1: &str = "10.200.1.11";
const B2: &str = "10.200.1.12";
const B3: &str = "10.200.1.13";

fn web4_with_check(check: &str) -> String {
    let mut v = vip_yaml(
        "web4",
        VIP4,
        80,
        "tcp",
        &backends_yaml(false, &[(1, 1), (2, 1), (3, 1)]),
    );
    v.push_str(&format!("    healthCheck: {check}\n"));
    v
}

fn vip_addr() -> SocketAddr {
    format!("{VIP4}:80").parse().unwrap()
}

/// Acceptance 1: with continuous new connections, a backend whose server
/// stops is marked down within fall x interval + timeout, after which no new
/// connection fails; when it comes back it returns after `rise` probes.
#[test]
fn a_dead_backend_goes_down_in_time_and_returns_after_rise() {
    let (interval, timeout, fall, rise) = (
        Duration::from_millis(300),
        Duration::from_millis(150),
        2u32,
        3u32,
    );
    let mut lab = Lab::new("hdown");
    lab.write_config(&[web4_with_check(
        "{ type: tcp, interval: 300ms, timeout: 150ms, fall: 2, rise: 3 }",
    )]);
    lab.start(&[]);
    for b in [B1, B2, B3] {
        lab.wait_backend(b, Duration::from_secs(5), "probed ok", |b| {
            b.probe.as_ref().is_some_and(|p| p.last_result == "ok")
        });
    }

    let churn =
        ConnectionChurn::start(&lab.topo.client, vip_addr(), 50, Duration::from_secs(2)).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    lab.stop_server(2);
    let bound = interval * fall + timeout;
    let took = lab.wait_backend(B2, bound * 4, "down", |b| b.state == "down");
    let before = churn.stop();
    eprintln!(
        "b2 marked down {took:?} after its server stopped (bound fall x interval + timeout = {bound:?})"
    );
    eprintln!("connections while it was failing: {before}");
    // The poll itself adds up to 10 ms; scheduling a little more.
    assert!(
        took <= bound + Duration::from_millis(100),
        "down after {took:?}, bound {bound:?}"
    );
    let b2 = lab.backend(B2);
    assert!(
        b2.probe
            .as_ref()
            .unwrap()
            .last_result
            .starts_with("fail: connect"),
        "{b2:?}"
    );

    // From now on nothing fails.
    let after =
        ConnectionChurn::start(&lab.topo.client, vip_addr(), 50, Duration::from_secs(2)).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let after = after.stop();
    assert!(
        after.all_ok() && after.attempted > 100,
        "connections after the down mark:\n{after}"
    );
    assert!(!after.per_backend.contains_key("b2"), "{after}");

    // Back: up after `rise` successful probes.
    lab.start_server(2);
    let took = lab.wait_backend(B2, interval * (rise + 4), "healthy", |b| {
        b.state == "healthy"
    });
    eprintln!(
        "b2 healthy {took:?} after its server came back (rise {rise} x interval {interval:?})"
    );
    assert!(
        took >= interval * (rise - 1),
        "came back after {took:?}: fewer than {rise} probes?"
    );
    let r = lab.tcp(VIP4, 80, 30000, 300);
    assert!(r.all_ok(), "{r}");
    assert!(
        r.per_backend.get("b2").copied().unwrap_or(0) > 50,
        "b2 takes new flows again:\n{r}"
    );
}

/// Acceptance 2: a drained backend keeps its established connections while
/// no new one lands on it; a failed probe turns a draining backend down.
#[test]
fn draining_keeps_established_flows_and_a_failed_probe_still_wins() {
    let mut lab = Lab::new("hdrain");
    lab.write_config(&[web4_with_check(
        "{ type: tcp, interval: 200ms, timeout: 100ms, fall: 2, rise: 2 }",
    )]);
    lab.start(&[]);
    lab.wait_backend(B1, Duration::from_secs(5), "probed", |b| {
        b.probe.as_ref().is_some_and(|p| p.last_result == "ok")
    });

    // Long-lived connections, a message every 100 ms for 10 s.
    let long = LongLivedTcp::start(
        &lab.topo.client,
        vip_addr(),
        30,
        Duration::from_millis(100),
        Duration::from_secs(2),
    )
    .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let drained = lab.drain(&format!("{B1}:{BACKEND_PORT}"), true);
    assert_eq!(drained.len(), 1);
    assert!(
        drained[0].drained && drained[0].state == "draining",
        "{drained:?}"
    );
    let r = lab.tcp(VIP4, 80, 10000, 300);
    assert!(r.all_ok(), "{r}");
    assert!(
        !r.per_backend.contains_key("b1"),
        "a new connection landed on the drained backend:\n{r}"
    );
    std::thread::sleep(Duration::from_secs(9));
    let long = long.stop();
    eprintln!("{long}");
    assert!(
        long.per_backend.get("b1").copied().unwrap_or(0) > 0,
        "some long-lived connections were on b1: {long}"
    );
    assert_eq!(
        long.failed_connections, 0,
        "established connections survive the drain:\n{long}"
    );
    assert!(
        long.exchanges >= 30 * 80,
        "they kept exchanging data: {long}"
    );

    // A failed probe on a draining backend turns it down; recovery leaves it
    // draining (the drain is the operator's), undrain makes it healthy.
    lab.stop_server(1);
    lab.wait_backend(B1, Duration::from_secs(3), "down", |b| {
        b.state == "down" && b.drained
    });
    lab.start_server(1);
    lab.wait_backend(B1, Duration::from_secs(3), "draining again", |b| {
        b.state == "draining"
    });
    lab.drain(B1, false);
    assert_eq!(lab.backend(B1).state, "healthy");
    let r = lab.tcp(VIP4, 80, 11000, 200);
    assert!(
        r.all_ok() && r.per_backend.get("b1").copied().unwrap_or(0) > 20,
        "{r}"
    );

    // The drain (here selected by backend ID) survives a restart.
    let id = lab.backend(B2).backend_id.to_string();
    lab.drain(&id, true);
    assert!(lab.kill(libc::SIGKILL).signal().is_some());
    lab.start(&[]);
    assert!(
        lab.backend(B2).drained && lab.backend(B2).state == "draining",
        "{:?}",
        lab.backend(B2)
    );
}

/// Acceptance 3: while one backend flaps every second, the established
/// connections on the other backends all survive.
#[test]
fn a_flapping_backend_disturbs_nobody_else() {
    let mut lab = Lab::new("hflap");
    lab.write_config(&[web4_with_check(
        "{ type: tcp, interval: 100ms, timeout: 50ms, fall: 1, rise: 1 }",
    )]);
    lab.start(&[]);
    lab.wait_backend(B3, Duration::from_secs(5), "probed", |b| {
        b.probe.as_ref().is_some_and(|p| p.last_result == "ok")
    });
    let slice_before = lab.vips()[0].maglev_offset;
    let long = LongLivedTcp::start(
        &lab.topo.client,
        vip_addr(),
        40,
        Duration::from_millis(100),
        Duration::from_secs(2),
    )
    .unwrap();
    let mut downs = 0;
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(500));
        lab.stop_server(3);
        lab.wait_backend(B3, Duration::from_secs(2), "down", |b| b.state == "down");
        downs += 1;
        std::thread::sleep(Duration::from_millis(500));
        lab.start_server(3);
        lab.wait_backend(B3, Duration::from_secs(2), "up", |b| b.state == "healthy");
    }
    std::thread::sleep(Duration::from_millis(500));
    let long = long.stop();
    eprintln!("{long}");
    let on_b3 = long.per_backend.get("b3").copied().unwrap_or(0);
    let others = long.connections - on_b3;
    assert!(others > 10, "{long}");
    assert!(
        long.failed_connections <= on_b3,
        "a connection on a stable backend failed:\n{long}"
    );
    assert!(
        long.failures.iter().all(|f| f.contains("backend b3")),
        "only b3's connections may fail:\n{long}"
    );
    assert_eq!(downs, 4);
    assert_eq!(
        lab.vips()[0].maglev_offset,
        slice_before,
        "health changes never rebuild the slice"
    );
}
