//! Two replicas, one Lease, against the real API server: exactly one leads; after a step-down the
//! other leads at once (it watches the Lease and sees it released); a replica that vanishes without releasing is replaced after the
//! Lease expires, and it stops confirming its leadership before the other one can take over.
//! Needs root and `scripts/build-testdeps.sh`.

use std::time::{Duration, Instant};

use rivora_controller::leader::{LeaderConfig, Leadership};
use rivora_kube_testbed::{TestBed, ensure_namespace, unique_name};

const DURATION: Duration = Duration::from_secs(4);
const GRACE: Duration = Duration::from_secs(1);

async fn replicas(lease: &str) -> (Leadership, Leadership) {
    let bed = TestBed::shared();
    let client = bed.admin_client().await.unwrap();
    let namespace = unique_name("lease");
    ensure_namespace(&client, &namespace).await.unwrap();
    let config = |id: &str| LeaderConfig {
        lease_name: lease.into(),
        namespace: namespace.clone(),
        identity: id.into(),
        duration: DURATION,
        grace: GRACE,
    };
    let a = Leadership::start(client.clone(), config("replica-a"))
        .await
        .unwrap();
    let b = Leadership::start(client, config("replica-b"))
        .await
        .unwrap();
    (a, b)
}

/// Waits until one of the two leads; returns (leader, follower).
async fn settle(mut a: Leadership, mut b: Leadership) -> (Leadership, Leadership) {
    let deadline = Duration::from_secs(15);
    tokio::time::timeout(deadline, async {
        tokio::select! {
            r = a.wait_until_leader() => r.unwrap(),
            r = b.wait_until_leader() => r.unwrap(),
        }
    })
    .await
    .expect("nobody became leader within 15 s");
    if a.is_leader() { (a, b) } else { (b, a) }
}

async fn wait_leader(f: &mut Leadership, limit: Duration) -> Duration {
    let t = Instant::now();
    tokio::time::timeout(limit, f.wait_until_leader())
        .await
        .unwrap_or_else(|_| panic!("no takeover within {limit:?}"))
        .unwrap();
    t.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_and_a_hand_over_within_the_lease_duration_on_step_down() {
    let (a, b) = replicas("rivora-controller").await;
    let (leader, mut follower) = settle(a, b).await;
    assert!(leader.confirm().await.unwrap(), "the leader confirms");
    assert!(!follower.is_leader());
    assert!(
        !follower.confirm().await.unwrap(),
        "the follower never confirms"
    );
    leader.step_down().await.unwrap();
    let took = wait_leader(&mut follower, DURATION * 2).await;
    println!("hand-over after step-down: {took:?} (lease {DURATION:?})");
    // Not when the released term would have ended (up to DURATION): the follower sees the
    // release and competes at once.
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(follower.confirm().await.unwrap());
    follower.step_down().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_leader_confirms_through_its_renewals() {
    let (a, b) = replicas("rivora-controller").await;
    let (leader, follower) = settle(a, b).await;
    // Several renewals (every DURATION - GRACE): confirm must never drop in between.
    let start = Instant::now();
    let mut checks = 0;
    while start.elapsed() < DURATION * 3 {
        assert!(
            leader.confirm().await.unwrap(),
            "the healthy leader stopped confirming after {:?}",
            start.elapsed()
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    println!(
        "the leader confirmed {checks} times over {:?}",
        start.elapsed()
    );
    assert!(!follower.is_leader());
    leader.step_down().await.unwrap();
    follower.step_down().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_stops_confirming_before_the_other_takes_over() {
    let (a, b) = replicas("rivora-controller").await;
    let (leader, follower) = settle(a, b).await;
    leader.stop_renewing();
    let cut = Instant::now();
    assert!(leader.is_leader(), "the election hint does not notice");
    let mut stopped_confirming = None;
    let mut took_over = None;
    while took_over.is_none() {
        assert!(
            cut.elapsed() < DURATION * 3,
            "no takeover within {:?}",
            DURATION * 3
        );
        if stopped_confirming.is_none() && !leader.confirm().await.unwrap() {
            stopped_confirming = Some(cut.elapsed());
        }
        if follower.is_leader() {
            took_over = Some(cut.elapsed());
            // At the moment the other replica leads, the old one must already refuse to write.
            assert!(
                !leader.confirm().await.unwrap(),
                "two replicas confirm at once"
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (stopped, took) = (stopped_confirming.unwrap(), took_over.unwrap());
    println!(
        "after the leader stopped renewing: it stopped confirming at {stopped:?}, \
         the other replica led at {took:?} (lease {DURATION:?}, grace {GRACE:?})"
    );
    assert!(
        stopped < took,
        "stopped confirming at {stopped:?}, other led at {took:?}"
    );
    assert!(follower.confirm().await.unwrap());
    follower.step_down().await.unwrap();
}
