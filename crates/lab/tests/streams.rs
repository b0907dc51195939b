//! End-to-end tests of the long-running traffic streams (root required;
//! never skipped).
//!
//! No load balancer: the client talks straight to backend addresses through
//! the lb's kernel forwarding. A clean path must give zero failures and
//! zero loss; an outage (a backend's link down for a second) must show up
//! as failures and lost datagrams, or the streams could not prove a
//! zero-gap restart either.

use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rivora_lab::{ConnectionChurn, IdentityServer, LongLivedTcp, Topology, UdpSequence, tcp_round};

const PORT: u16 = 8080;
const RUN: Duration = Duration::from_secs(2);

/// Held while streams run, so the thread-leak check sees only its own
/// threads (stream threads have fixed names, shared by all tests here).
static STREAMS: Mutex<()> = Mutex::new(());

fn streams_lock() -> MutexGuard<'static, ()> {
    STREAMS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Names of this process's threads that start with any of `prefixes`
/// (as in /proc/self/task/*/comm, i.e. cut to 15 bytes).
fn threads_named(prefixes: &[&str]) -> Vec<String> {
    let mut v = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        if let Ok(comm) = std::fs::read_to_string(t.path().join("comm")) {
            let comm = comm.trim().to_string();
            if prefixes.iter().any(|p| comm.starts_with(p)) {
                v.push(comm);
            }
        }
    }
    v
}

/// Fails (never skips) when not root, with a message saying why.
fn root() {
    if let Err(e) = rivora_lab::require_root() {
        panic!("THIS TEST NEEDS ROOT, refusing to skip: {e:#}");
    }
}

fn start_servers(topo: &Topology) -> Vec<IdentityServer> {
    topo.backends
        .iter()
        .enumerate()
        .map(|(idx, ns)| {
            let addr = SocketAddr::new(IpAddr::V4(topo.backend_v4[idx]), PORT);
            IdentityServer::start(ns, &Topology::backend_name(idx + 1), &[addr]).unwrap()
        })
        .collect()
}

fn backend(topo: &Topology, i: usize) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(topo.backend_v4[i - 1]), PORT)
}

fn assert_gone(names: &[String]) {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    let left: Vec<_> = names
        .iter()
        .filter(|n| {
            listed
                .lines()
                .any(|l| l.split_whitespace().next() == Some(n))
        })
        .collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

#[test]
fn streams_direct_to_backends_are_clean() {
    root();
    let topo = Topology::build("stc").expect("building topology");
    let names = topo.netns_names();
    let servers = start_servers(&topo);
    let _serial = streams_lock();

    let interval = Duration::from_millis(50);
    let timeout = Duration::from_secs(1);
    let conns = 4;
    let long = LongLivedTcp::start(&topo.client, backend(&topo, 1), conns, interval, timeout)
        .expect("starting long-lived tcp");
    let churn_rate = 40;
    let churn = ConnectionChurn::start(&topo.client, backend(&topo, 2), churn_rate, timeout)
        .expect("starting churn");
    let udp_rate = 500;
    let flows = 4;
    let udp = UdpSequence::start(&topo.client, backend(&topo, 3), flows, udp_rate)
        .expect("starting udp sequence");

    std::thread::sleep(RUN / 2);
    let (ex1, f1) = long.snapshot();
    let (sent1, recv1) = udp.snapshot();
    let (att1, cf1) = churn.snapshot();
    std::thread::sleep(RUN / 2);
    let (ex2, _) = long.snapshot();
    let (sent2, recv2) = udp.snapshot();
    let (att2, _) = churn.snapshot();
    assert!(
        ex1 > 0 && ex2 > ex1,
        "exchanges must progress: {ex1} -> {ex2}"
    );
    assert!(
        sent2 > sent1 && recv2 > recv1,
        "{sent1}/{recv1} -> {sent2}/{recv2}"
    );
    assert!(att2 > att1, "churn must progress: {att1} -> {att2}");
    assert_eq!((f1, cf1), (0, 0));

    let l = long.stop();
    let c = churn.stop();
    let u = udp.stop(Duration::from_millis(500));
    eprintln!("{l}{c}{u}");

    // Long-lived: every connection on b1, no failures, steady exchanges.
    assert!(l.all_ok(), "{l}");
    assert_eq!(l.connections, conns);
    assert_eq!(l.failed_connections, 0, "{l}");
    assert!(l.failures.is_empty(), "{l}");
    assert_eq!(l.per_backend, [("b1".to_string(), conns)].into(), "{l}");
    let expected = conns as f64 * (RUN.as_secs_f64() / interval.as_secs_f64());
    assert!(l.exchanges as f64 >= expected * 0.5, "{l}");
    assert!(l.exchanges as f64 <= expected * 1.3, "pacing too fast: {l}");
    assert!(l.max_rtt < timeout, "{l}");

    // Churn: steady rate, every connection fine, all on b2.
    assert!(c.all_ok(), "{c}");
    assert_eq!(c.failed, 0, "{c}");
    assert_eq!(c.ok, c.attempted, "{c}");
    let expected = f64::from(churn_rate) * RUN.as_secs_f64();
    assert!(c.attempted as f64 >= expected * 0.5, "{c}");
    assert!(c.attempted as f64 <= expected * 1.3, "pacing too fast: {c}");
    assert_eq!(
        c.per_backend,
        [("b2".to_string(), c.ok as usize)].into(),
        "{c}"
    );

    // UDP: nothing lost, duplicated or from the wrong source; steady rate.
    assert!(u.all_ok(), "{u}");
    assert_eq!(u.lost, 0, "{u}");
    assert_eq!(u.duplicated, 0, "{u}");
    assert_eq!(u.wrong_source, 0, "{u}");
    assert_eq!(u.malformed, 0, "{u}");
    assert_eq!(u.received_unique, u.sent, "{u}");
    assert_eq!(u.per_flow_lost, vec![0; flows], "{u}");
    assert!(u.lost_ranges.is_empty(), "{u}");
    let expected = f64::from(udp_rate) * RUN.as_secs_f64();
    assert!(u.sent as f64 >= expected * 0.5, "{u}");
    assert!(u.sent as f64 <= expected * 1.3, "pacing too fast: {u}");
    assert_eq!(u.per_backend, [("b3".to_string(), flows)].into(), "{u}");
    assert_eq!(u.flows_switched_backend, 0, "{u}");

    drop(servers);
    drop(topo);
    assert_gone(&names);
}

#[test]
fn streams_detect_an_outage() {
    root();
    let topo = Topology::build("sto").expect("building topology");
    let names = topo.netns_names();
    let servers = start_servers(&topo);
    let target = backend(&topo, 1);
    let _serial = streams_lock();

    let conns = 3;
    let timeout = Duration::from_millis(300);
    let long = LongLivedTcp::start(
        &topo.client,
        target,
        conns,
        Duration::from_millis(50),
        timeout,
    )
    .expect("starting long-lived tcp");
    let churn = ConnectionChurn::start(&topo.client, target, 20, timeout).expect("starting churn");
    let udp_rate = 400;
    let flows = 2;
    let udp =
        UdpSequence::start(&topo.client, target, flows, udp_rate).expect("starting udp sequence");

    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(long.snapshot().1, 0, "failure before the outage");
    let (_, recv_before) = udp.snapshot();
    assert!(recv_before > 0);

    // Outage: b1's port on the lb bridge goes down for one second (the
    // backend's own link loses carrier with it), then comes back.
    let down_at = Instant::now();
    topo.lb
        .run(&["ip", "link", "set", "dev", "b1", "down"])
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    topo.lb
        .run(&["ip", "link", "set", "dev", "b1", "up"])
        .unwrap();
    let outage = down_at.elapsed();

    // Let traffic recover, and prove it did. How long that takes is the
    // kernel's business: an lb neighbour entry left INCOMPLETE by the
    // outage sends its next ARP probe only when its retransmit timer (1 s)
    // fires, so replies can stay away for up to a second after the link is
    // back. Wait for them with a deadline, not a fixed window.
    let (_, recv_up) = udp.snapshot();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut recv_after = recv_up;
    while recv_after <= recv_up + 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        recv_after = udp.snapshot().1;
    }
    assert!(
        recv_after > recv_up + 10,
        "udp replies must resume after the outage: {recv_up} -> {recv_after} within 5 s"
    );

    let l = long.stop();
    let c = churn.stop();
    let u = udp.stop(Duration::from_millis(300));
    eprintln!("outage {outage:.2?}\n{l}{c}{u}");

    // Every long-lived connection exchanges every 50 ms and waits 300 ms for
    // an echo, so each one must have hit the 1 s outage.
    assert!(!l.all_ok(), "{l}");
    assert_eq!(l.failed_connections, conns, "{l}");
    assert_eq!(l.failures.len(), conns, "{l}");
    assert!(
        l.failures.iter().all(|f| f.contains("timed out")),
        "outage should show as timeouts: {l}"
    );

    // Churn: attempts during the outage fail, those before and after work.
    assert!(c.failed > 0, "{c}");
    assert!(c.ok > 0, "{c}");
    assert_eq!(c.ok + c.failed, c.attempted, "{c}");
    assert!(!c.failures.is_empty(), "{c}");

    // UDP: about a second's worth (400) lost, in one run per flow.
    assert!(!u.all_ok(), "{u}");
    assert!(u.lost >= u64::from(udp_rate) / 2, "{u}");
    assert!(u.lost < u.sent, "{u}");
    assert_eq!(u.lost, u.sent - u.received_unique, "{u}");
    assert!(u.per_flow_lost.iter().all(|&n| n > 0), "{u}");
    assert!(!u.lost_ranges.is_empty(), "{u}");
    assert!(u.max_consecutive_lost >= u64::from(udp_rate) / 2, "{u}");
    assert!(
        u.longest_gap() >= Duration::from_millis(500) && u.longest_gap() <= outage * 2,
        "{u}"
    );
    assert_eq!(u.duplicated, 0, "{u}");
    assert_eq!(u.wrong_source, 0, "{u}");

    // Back to normal: new connections to the backend work again.
    let t = tcp_round(&topo.client, target, 10, 4, Duration::from_secs(2));
    assert!(t.all_ok(), "{t}");

    drop(servers);
    drop(topo);
    assert_gone(&names);
}

#[test]
fn streams_stop_all_threads_on_drop_and_refuse_bad_starts() {
    root();
    let topo = Topology::build("drp").expect("building topology");
    let names = topo.netns_names();
    let servers = start_servers(&topo);
    let target = backend(&topo, 2);
    let _serial = streams_lock();
    // Churn workers are named after the client namespace by enter_thread.
    let worker_prefix = format!("ns-{}", topo.client.name());
    let worker_prefix = &worker_prefix[..worker_prefix.len().min(15)];
    let ours = [
        "rv-long-tcp",
        "rv-churn-pace",
        "rv-seq-send",
        "rv-seq-recv",
        worker_prefix,
    ];
    assert_eq!(threads_named(&ours), Vec::<String>::new());

    let timeout = Duration::from_secs(1);
    let long =
        LongLivedTcp::start(&topo.client, target, 2, Duration::from_millis(20), timeout).unwrap();
    let churn = ConnectionChurn::start(&topo.client, target, 50, timeout).unwrap();
    let udp = UdpSequence::start(&topo.client, target, 3, 300).unwrap();
    // All three running, with traffic: waited for with a deadline (the
    // threads and the namespace traffic get going in their own time).
    // 2 connections + pacer + >= 2 workers + sender + 3 receivers.
    rivora_lab::poll_until(
        "every stream's threads running and exchanging",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let running = threads_named(&ours);
            let progress = (long.snapshot().0, churn.snapshot().0, udp.snapshot().1);
            if running.len() >= 9 && progress.0 > 0 && progress.1 > 0 && progress.2 > 0 {
                Ok(())
            } else {
                Err(format!(
                    "threads {running:?}; (long exchanges, churn attempts, udp received) {progress:?}"
                ))
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));

    // Dropping without stop() must end every thread, promptly.
    let t0 = Instant::now();
    drop(long);
    drop(churn);
    drop(udp);
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(2), "drop took {took:?}");
    assert_eq!(threads_named(&ours), Vec::<String>::new());

    // A connection that cannot be made fails start (nothing listens on 9).
    let closed = SocketAddr::new(target.ip(), 9);
    let err = LongLivedTcp::start(&topo.client, closed, 2, Duration::from_millis(20), timeout)
        .err()
        .expect("start must fail when a connect fails");
    assert!(format!("{err:#}").contains("connect"), "{err:#}");
    assert!(LongLivedTcp::start(&topo.client, target, 0, timeout, timeout).is_err());
    assert!(ConnectionChurn::start(&topo.client, target, 0, timeout).is_err());
    assert!(UdpSequence::start(&topo.client, target, 0, 10).is_err());
    assert_eq!(threads_named(&ours), Vec::<String>::new());

    drop(servers);
    drop(topo);
    assert_gone(&names);
}
