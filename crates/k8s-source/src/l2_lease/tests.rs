use super::*;

fn timing() -> LeaseTiming {
    LeaseTiming {
        duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(500),
    }
}

fn record(holder: Option<&str>, renew: &str) -> Record {
    Record {
        holder: holder.map(str::to_string),
        renew_time: Some(renew.to_string()),
        transitions: 1,
        duration: Some(Duration::from_secs(4)),
    }
}

fn config(identity: &str) -> LeaseConfig {
    LeaseConfig {
        namespace: "rivora-system".into(),
        name: DEFAULT_LEASE_NAME.into(),
        identity: identity.into(),
        timing: timing(),
    }
}

#[test]
fn another_holder_is_followed_until_its_record_is_unchanged_for_the_duration() {
    let t0 = Instant::now();
    let r = record(Some("node-a"), "2026-12-02T10:00:00Z");
    let t = timing();
    assert_eq!(decide(&r, t0, "node-b", t0, &t), Step::Follow);
    assert_eq!(
        decide(&r, t0, "node-b", t0 + Duration::from_millis(3999), &t),
        Step::Follow
    );
    assert_eq!(
        decide(&r, t0, "node-b", t0 + Duration::from_secs(4), &t),
        Step::Acquire
    );
    // The record's own duration counts, not this node's setting.
    let long = Record {
        duration: Some(Duration::from_secs(30)),
        ..r.clone()
    };
    assert_eq!(
        decide(&long, t0, "node-b", t0 + Duration::from_secs(10), &t),
        Step::Follow
    );
    // Ours: renew; nobody's: take at once.
    assert_eq!(decide(&r, t0, "node-a", t0, &t), Step::Renew);
    assert_eq!(
        decide(&record(None, "x"), t0, "node-b", t0, &t),
        Step::Acquire
    );
}

#[test]
fn the_holder_fences_itself_before_any_other_node_may_take_over() {
    // The holder renews at `t` and answers until t + renew_deadline; another node saw the
    // renewal at the earliest at `t` and takes over at t + duration at the earliest.
    let t = timing();
    t.validate().unwrap();
    let renewal = Instant::now();
    let holder_stops = renewal + t.renew_deadline;
    let seen_at = renewal; // the earliest another node can have seen it
    let r = record(Some("node-a"), "2026-12-02T10:00:00Z");
    let mut now = seen_at;
    while decide(&r, seen_at, "node-b", now, &t) == Step::Follow {
        now += Duration::from_millis(10);
    }
    assert!(
        now > holder_stops,
        "taken at {:?}, holder answers until {:?}",
        now - renewal,
        holder_stops - renewal
    );
    assert_eq!(now - renewal, t.duration);
}

#[test]
fn timing_is_validated_and_gives_the_budget() {
    assert!(LeaseTiming::default().validate().is_ok());
    assert_eq!(
        LeaseTiming::default().failover_budget(),
        Duration::from_secs(15 + 2 * 2 + 1)
    );
    assert_eq!(timing().failover_budget(), Duration::from_secs(6));
    let bad = |d: u64, r: u64, p: u64| LeaseTiming {
        duration: Duration::from_millis(d),
        renew_deadline: Duration::from_millis(r),
        retry_period: Duration::from_millis(p),
    };
    let e = bad(4000, 4000, 500).validate().unwrap_err();
    assert!(e.contains("renew deadline"), "{e}");
    let e = bad(4000, 3000, 3000).validate().unwrap_err();
    assert!(e.contains("retry period"), "{e}");
    let e = bad(4000, 3000, 0).validate().unwrap_err();
    assert!(e.contains("retry period"), "{e}");
    let e = bad(1500, 1000, 500).validate().unwrap_err();
    assert!(e.contains("whole number"), "{e}");
}

#[test]
fn taking_counts_a_transition_and_renewing_does_not() {
    let now: Timestamp = "2026-12-02T10:00:00Z".parse().unwrap();
    let later: Timestamp = "2026-12-02T10:00:02Z".parse().unwrap();
    let fresh = renewed(None, &config("node-a"), true, now);
    let spec = fresh.spec.clone().unwrap();
    assert_eq!(fresh.metadata.name.as_deref(), Some(DEFAULT_LEASE_NAME));
    assert_eq!(spec.holder_identity.as_deref(), Some("node-a"));
    assert_eq!(spec.lease_duration_seconds, Some(4));
    assert_eq!(spec.lease_transitions, Some(1));
    assert_eq!(spec.acquire_time.map(|t| t.0), Some(now));
    let again = renewed(Some(&fresh), &config("node-a"), false, later);
    let s = again.spec.clone().unwrap();
    assert_eq!(s.lease_transitions, Some(1));
    assert_eq!(s.acquire_time.map(|t| t.0), Some(now));
    assert_eq!(s.renew_time.map(|t| t.0), Some(later));
    // Another node takes it: a transition, a new acquire time.
    let taken = renewed(Some(&again), &config("node-b"), true, later);
    let s = taken.spec.clone().unwrap();
    assert_eq!(s.holder_identity.as_deref(), Some("node-b"));
    assert_eq!(s.lease_transitions, Some(2));
    assert_eq!(s.acquire_time.map(|t| t.0), Some(later));
    // Released: nobody holds it, and a different record (a sign of life).
    let gone = released(&taken, later);
    let r = Record::of(&gone);
    assert_eq!(r.holder, None);
    assert_eq!(r.duration, Some(Duration::from_secs(1)));
    assert_ne!(r, Record::of(&taken));
    // Taking a released Lease is a transition too.
    let retaken = renewed(Some(&gone), &config("node-b"), true, later);
    assert_eq!(retaken.spec.unwrap().lease_transitions, Some(3));
}
