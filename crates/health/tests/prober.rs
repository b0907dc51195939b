//! The `Prober` engine against real loopback listeners. Intervals are short
//! (30-60 ms); time bounds are loose (several times the theoretical value)
//! while the order and number of transitions are asserted exactly.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use common::{Counting, Http, Reply};
use rivora_health::{Initial, ProbeKind, ProbeSpec, ProbeStatus, Prober, Transition};
use rivora_lab::poll_until;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn tcp(target: SocketAddr, interval: u64, timeout: u64, rise: u32, fall: u32) -> ProbeSpec {
    ProbeSpec {
        kind: ProbeKind::Tcp,
        target,
        interval: ms(interval),
        timeout: ms(timeout),
        rise,
        fall,
    }
}

/// The next transition, failing the test if none comes within `within`.
async fn next<K: std::fmt::Debug>(
    rx: &mut UnboundedReceiver<Transition<K>>,
    within: Duration,
) -> Transition<K> {
    match tokio::time::timeout(within, rx.recv()).await {
        Ok(Some(t)) => t,
        Ok(None) => panic!("transition channel closed"),
        Err(_) => panic!("no transition within {within:?}"),
    }
}

/// Fails the test if a transition arrives within `period`.
async fn quiet<K: std::fmt::Debug>(rx: &mut UnboundedReceiver<Transition<K>>, period: Duration) {
    if let Ok(t) = tokio::time::timeout(period, rx.recv()).await {
        panic!("unexpected transition {t:?}");
    }
}

fn status<K: Ord + Clone + Send + Sync + std::fmt::Debug + 'static>(
    p: &Prober<K>,
    key: K,
) -> ProbeStatus {
    p.status(&key).expect("target is probed")
}

/// Waits (5 s at most) until `key`'s status satisfies `pred` and returns
/// it; the timeout names `what` and the status last seen. The probes run
/// on the runtime's other worker meanwhile (a multi-thread runtime).
fn wait_status<K: Ord + Clone + Send + Sync + std::fmt::Debug + 'static>(
    p: &Prober<K>,
    key: K,
    what: &str,
    pred: impl Fn(&ProbeStatus) -> bool,
) -> ProbeStatus {
    tokio::task::block_in_place(|| {
        poll_until(what, ms(5000), ms(10), || {
            let s = status(p, key.clone());
            if pred(&s) {
                Ok(s)
            } else {
                Err(format!("{s:?}"))
            }
        })
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goes_down_after_fall_and_up_after_rise() {
    let (interval, timeout, rise, fall) = (50, 200, 2, 3);
    let l = Counting::bind("127.0.0.1:0").await.unwrap();
    let (mut p, mut rx) = Prober::new();
    p.set_targets(vec![(
        "a",
        tcp(l.addr, interval, timeout, rise, fall),
        Initial::Unknown,
    )]);

    // Unknown: the first (immediate) probe decides.
    let t = next(&mut rx, ms(1000)).await;
    assert_eq!((t.key, t.up, t.detail.as_str()), ("a", true, "ok"));
    let s = wait_status(&p, "a", "a second successful probe", |s| s.consecutive >= 2);
    assert_eq!(s.up, Some(true));
    assert!(s.last.as_ref().unwrap().ok);

    // Closed: down after `fall` failures, i.e. at least (fall-1) intervals.
    let addr = l.close().await;
    let closed = Instant::now();
    let theory = ms(fall as u64 * interval + timeout);
    let t = next(&mut rx, theory * 5).await;
    let took = closed.elapsed();
    assert_eq!((t.key, t.up), ("a", false));
    assert_eq!(t.detail, "connect: Connection refused");
    // A probe started just before the close may fail right after it.
    assert!(
        took + ms(5) >= ms((fall as u64 - 1) * interval),
        "down too early: {took:?}"
    );
    assert!(took < theory * 5, "down too late: {took:?}");
    let s = status(&p, "a");
    assert_eq!((s.up, s.last.unwrap().ok), (Some(false), false));
    assert!(s.consecutive >= fall);

    // Reopened: up again after `rise` successes.
    let l = Counting::rebind(addr).await;
    let opened = Instant::now();
    let theory = ms(rise as u64 * interval + timeout);
    let t = next(&mut rx, theory * 5).await;
    let took = opened.elapsed();
    assert_eq!((t.key, t.up, t.detail.as_str()), ("a", true, "ok"));
    assert!(
        took + ms(5) >= ms((rise as u64 - 1) * interval),
        "up too early: {took:?}"
    );
    assert!(took < theory * 5, "up too late: {took:?}");

    // Steady again: no further transitions.
    quiet(&mut rx, ms(300)).await;
    assert!(l.count() >= 3);
    assert_eq!(status(&p, "a").up, Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_up_and_down_are_respected() {
    let up_l = Counting::bind("127.0.0.1:0").await.unwrap();
    let dead = common::closed_port().await;
    let (mut p, mut rx) = Prober::new();
    p.set_targets(vec![
        // Assumed up and really up: no transition at all.
        (1, tcp(up_l.addr, 40, 200, 2, 2), Initial::Up),
        // Assumed down and really down: no transition at all.
        (2, tcp(dead, 40, 200, 2, 2), Initial::Down),
        // Assumed up but dead: goes down after fall=2 failures.
        (3, tcp(dead, 40, 200, 2, 2), Initial::Up),
        // Assumed down but alive: comes up after rise=2 successes.
        (4, tcp(up_l.addr, 40, 200, 2, 2), Initial::Down),
    ]);
    assert_eq!(status(&p, 1).up, Some(true));
    assert_eq!(status(&p, 2).up, Some(false));
    let mut got = [next(&mut rx, ms(2000)).await, next(&mut rx, ms(2000)).await];
    got.sort_by_key(|t| t.key);
    assert_eq!(
        got.iter().map(|t| (t.key, t.up)).collect::<Vec<_>>(),
        vec![(3, false), (4, true)]
    );
    quiet(&mut rx, ms(250)).await;
    let snap = p.snapshot();
    assert_eq!(
        snap.iter().map(|(k, s)| (*k, s.up)).collect::<Vec<_>>(),
        vec![
            (1, Some(true)),
            (2, Some(false)),
            (3, Some(false)),
            (4, Some(true))
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_targets_keeps_unchanged_and_carries_state_over_changes() {
    let a = Counting::bind("127.0.0.1:0").await.unwrap();
    let b = Counting::bind("127.0.0.1:0").await.unwrap();
    let spec_a = tcp(a.addr, 40, 200, 2, 2);
    let spec_b = tcp(b.addr, 40, 200, 2, 2);
    let (mut p, mut rx) = Prober::new();
    p.set_targets(vec![
        ("a", spec_a.clone(), Initial::Unknown),
        ("b", spec_b.clone(), Initial::Unknown),
    ]);
    let mut first = [next(&mut rx, ms(1000)).await, next(&mut rx, ms(1000)).await];
    first.sort_by_key(|t| t.key);
    assert_eq!(
        first.iter().map(|t| (t.key, t.up)).collect::<Vec<_>>(),
        vec![("a", true), ("b", true)]
    );
    tokio::time::sleep(ms(150)).await;
    let before = status(&p, "a").consecutive;

    // Same specs (the Initial is ignored for running targets): untouched.
    p.set_targets(vec![
        ("a", spec_a.clone(), Initial::Down),
        ("b", spec_b.clone(), Initial::Down),
    ]);
    quiet(&mut rx, ms(200)).await;
    let s = status(&p, "a");
    assert_eq!(s.up, Some(true));
    assert!(
        s.consecutive > before,
        "state was reset: {} then {}",
        before,
        s.consecutive
    );

    // A new interval for b restarts it from its current state (up), even
    // though the caller passes Initial::Down: no flap.
    let mut spec_b2 = spec_b.clone();
    spec_b2.interval = ms(60);
    p.set_targets(vec![
        ("a", spec_a.clone(), Initial::Down),
        ("b", spec_b2.clone(), Initial::Down),
    ]);
    let s = status(&p, "b");
    assert_eq!((s.up, s.consecutive, &s.spec), (Some(true), 0, &spec_b2));
    assert!(s.last.is_some(), "history kept across a restart");
    quiet(&mut rx, ms(200)).await;
    let s = status(&p, "b");
    assert_eq!(s.up, Some(true));
    assert!(s.consecutive >= 1);

    // A down target whose spec changes stays down, even with Initial::Up.
    b.close().await;
    let t = next(&mut rx, ms(1500)).await;
    assert_eq!((t.key, t.up), ("b", false));
    let mut spec_b3 = spec_b2.clone();
    spec_b3.timeout = ms(150);
    p.set_targets(vec![
        ("a", spec_a.clone(), Initial::Up),
        ("b", spec_b3, Initial::Up),
    ]);
    assert_eq!(status(&p, "b").up, Some(false));
    quiet(&mut rx, ms(250)).await;
    assert_eq!(status(&p, "b").up, Some(false));
    assert_eq!(status(&p, "a").up, Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_target_stops_probing() {
    let l = Counting::bind("127.0.0.1:0").await.unwrap();
    let (mut p, mut rx) = Prober::new();
    p.set_targets(vec![("a", tcp(l.addr, 30, 200, 1, 1), Initial::Unknown)]);
    assert!(next(&mut rx, ms(1000)).await.up);
    tokio::task::block_in_place(|| {
        poll_until("three probes", ms(5000), ms(10), || {
            let n = l.count();
            if n >= 3 {
                Ok(())
            } else {
                Err(format!("{n} probes"))
            }
        })
    })
    .unwrap_or_else(|e| panic!("{e}"));

    p.set_targets(vec![]);
    assert!(p.snapshot().is_empty());
    assert!(p.is_empty());
    // Let a connection that was in flight at removal reach the listener.
    tokio::time::sleep(ms(100)).await;
    let after = l.count();
    tokio::time::sleep(ms(400)).await;
    assert_eq!(l.count(), after, "probing continued after removal");
    quiet(&mut rx, ms(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_are_independent_and_slow_probes_do_not_delay_others() {
    let a = Counting::bind("127.0.0.1:0").await.unwrap();
    let b = Counting::bind("127.0.0.1:0").await.unwrap();
    // c accepts but never answers: each of its probes takes the full timeout.
    let c = Http::start(Reply::Silent).await;
    let spec_c = ProbeSpec {
        kind: ProbeKind::Http {
            path: "/".into(),
            expect: (200, 399),
            host: None,
        },
        ..tcp(c.addr, 50, 400, 1, 1)
    };
    let (mut p, mut rx) = Prober::new();
    p.set_targets(vec![
        ("a", tcp(a.addr, 50, 200, 1, 2), Initial::Unknown),
        ("b", tcp(b.addr, 50, 200, 1, 2), Initial::Unknown),
        ("c", spec_c, Initial::Unknown),
    ]);
    let mut first = [next(&mut rx, ms(1000)).await, next(&mut rx, ms(1000)).await];
    first.sort_by_key(|t| t.key);
    assert_eq!(
        first.iter().map(|t| (t.key, t.up)).collect::<Vec<_>>(),
        vec![("a", true), ("b", true)]
    );

    // While c's probes hang, b keeps its pace.
    let b0 = b.count();
    let t = next(&mut rx, ms(2000)).await;
    assert_eq!(
        (t.key, t.up, t.detail.as_str()),
        ("c", false, "timeout after 400ms")
    );
    tokio::time::sleep(ms(200)).await;
    let probes = b.count() - b0;
    assert!(probes >= 5, "b probed only {probes} times while c was slow");

    // a going down does not touch b.
    a.close().await;
    let t = next(&mut rx, ms(1500)).await;
    assert_eq!((t.key, t.up), ("a", false));
    quiet(&mut rx, ms(300)).await;
    assert_eq!(status(&p, "b").up, Some(true));
    assert_eq!(status(&p, "c").up, Some(false));
    p.shutdown();
    assert!(p.snapshot().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_target_follows_status_code() {
    let code = Arc::new(AtomicU16::new(200));
    let s = Http::start(Reply::Status(Arc::clone(&code))).await;
    let spec = ProbeSpec {
        kind: ProbeKind::Http {
            path: "/healthz".into(),
            expect: (200, 299),
            host: None,
        },
        ..tcp(s.addr, 40, 300, 2, 2)
    };
    let (mut p, mut rx) = Prober::new();
    p.set_targets(vec![(7u32, spec, Initial::Unknown)]);
    assert!(next(&mut rx, ms(1000)).await.up);
    code.store(503, Ordering::SeqCst);
    let t = next(&mut rx, ms(1500)).await;
    assert_eq!((t.up, t.detail.as_str()), (false, "http status 503"));
    code.store(200, Ordering::SeqCst);
    let t = next(&mut rx, ms(1500)).await;
    assert_eq!((t.up, t.detail.as_str()), (true, "ok"));
    quiet(&mut rx, ms(150)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_stops_everything_and_closes_the_channel() {
    let l = Counting::bind("127.0.0.1:0").await.unwrap();
    let (mut p, mut rx) = Prober::new();
    p.set_targets(vec![(
        "a".to_string(),
        tcp(l.addr, 30, 200, 1, 1),
        Initial::Unknown,
    )]);
    assert!(next(&mut rx, ms(1000)).await.up);
    drop(p);
    let end = tokio::time::timeout(ms(1000), rx.recv()).await;
    assert!(matches!(end, Ok(None)), "channel not closed: {end:?}");
    tokio::time::sleep(ms(100)).await;
    let after = l.count();
    tokio::time::sleep(ms(300)).await;
    assert_eq!(l.count(), after, "probing continued after drop");
}
