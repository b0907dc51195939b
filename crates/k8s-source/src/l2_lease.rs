//! The L2 speaker election: one cluster-wide `coordination.k8s.io/v1` Lease whose holder
//! answers ARP and NDP for every VIP, with self-fencing.
//!
//! Why our own elector (and not kube-lease-manager, which rivora-controller uses): the holder
//! of this Lease *acts on the network*, and two nodes answering for one VIP make the neighbours'
//! caches flap between them (kube-vip #665, #996). No fencing token exists, so the holder must
//! stop answering on its own before any other node can take the Lease, measured on its own
//! clock, whatever the API server or its renew task are doing. That needs the moment each
//! renewal *started*, which kube-lease-manager does not expose. The rules, as client-go's
//! leader election has them:
//!
//! * A candidate takes a Lease held by another node only after it has seen the same record
//!   (holder, renew time, transitions) unchanged for the record's `leaseDurationSeconds`,
//!   counted on the candidate's monotonic clock from the moment it first saw that record. No
//!   wall clock is compared across nodes.
//! * The holder renews every `retry_period`; a renewal that started at `t` lets it answer
//!   until `t + renew_deadline`. Since any other node saw that renewal no earlier than `t`, it
//!   cannot take the Lease before `t + lease_duration`: the holder has stopped answering
//!   `lease_duration - renew_deadline` earlier (the margin for clock-rate differences and the
//!   responder's reaction). The responder checks the deadline before every frame it sends
//!   (`Responder::set_active_until` in rivora-speaker), so a stuck renew task fences too.
//! * A node that cannot serve (its Node is excluded from external load balancers, its
//!   interface has no carrier, its responder or datapath failed) stops answering at once and
//!   releases the Lease (empty holder), which another node may take at its next look.
//!
//! The failover budget follows: a holder that dies right after renewing at `t` is replaced by
//! `t + lease_duration + retry_period` (the candidate's first look after expiry) plus the
//! `retry_period` it may have taken the candidate to see that renewal, plus the API round trip
//! and the first gratuitous ARP: [`LeaseTiming::failover_budget`].

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{info, warn};

/// The Lease's name when none is given: one per cluster (per rivorad namespace).
pub const DEFAULT_LEASE_NAME: &str = "rivora-l2-speaker";

/// The time allowed, in [`LeaseTiming::failover_budget`], for the new holder's Lease write and
/// its first gratuitous ARP / unsolicited NA to reach the neighbours.
pub const TAKEOVER_ALLOWANCE: Duration = Duration::from_secs(1);

/// The Lease's timing (rivorad's `--l2-lease-*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// `leaseDurationSeconds`: how long a record must stay unchanged before another node may
    /// take the Lease. Whole seconds (the API's unit).
    pub duration: Duration,
    /// How long after the start of its last successful renewal the holder keeps answering.
    /// Less than `duration`.
    pub renew_deadline: Duration,
    /// How often every node looks at the Lease (and the holder renews it).
    pub retry_period: Duration,
}

impl Default for LeaseTiming {
    /// client-go's defaults (15 s, 10 s, 2 s): a 20 s failover budget.
    fn default() -> Self {
        LeaseTiming {
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaseTiming {
    /// Refuses timings under which two nodes could answer at once, or the holder could not
    /// renew in time: whole seconds of at least 1 s for the duration, `retry_period <
    /// renew_deadline < duration`.
    pub fn validate(&self) -> Result<(), String> {
        if self.duration < Duration::from_secs(1) || self.duration.subsec_nanos() != 0 {
            return Err(format!(
                "the L2 lease duration must be a whole number of seconds, at least 1s (got {:?})",
                self.duration
            ));
        }
        if self.renew_deadline >= self.duration {
            return Err(format!(
                "the L2 renew deadline ({:?}) must be shorter than the lease duration ({:?}): the holder must stop answering before another node may take the Lease",
                self.renew_deadline, self.duration
            ));
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err(format!(
                "the L2 retry period ({:?}) must be more than zero and shorter than the renew deadline ({:?}), so the holder renews before it fences itself",
                self.retry_period, self.renew_deadline
            ));
        }
        Ok(())
    }

    /// The longest a VIP can go unanswered when its holder dies: `duration + 2 × retry_period +`
    /// [`TAKEOVER_ALLOWANCE`] (see the module documentation).
    pub fn failover_budget(&self) -> Duration {
        self.duration + self.retry_period * 2 + TAKEOVER_ALLOWANCE
    }

    /// How long one API request may take: a renewal that takes longer than this is given up
    /// (the holder has fenced itself by then anyway).
    fn request_timeout(&self) -> Duration {
        self.renew_deadline.saturating_sub(self.retry_period)
    }
}

/// Where the Lease lives and who this node is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The Lease's namespace (rivorad's own).
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This node's identity in `holderIdentity`: its Node name.
    pub identity: String,
    /// The timing.
    pub timing: LeaseTiming,
}

/// The part of a Lease that says who holds it; a change of any field is a sign of life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `holderIdentity` (None or empty: nobody).
    pub holder: Option<String>,
    /// `renewTime` as written (compared, never used as a clock).
    pub renew_time: Option<String>,
    /// `leaseTransitions`.
    pub transitions: i32,
    /// `leaseDurationSeconds`.
    pub duration: Option<Duration>,
}

impl Record {
    /// The record of `lease`.
    pub fn of(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            renew_time: spec.renew_time.map(|t| t.0.to_string()),
            transitions: spec.lease_transitions.unwrap_or(0),
            duration: spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs),
        }
    }
}

/// What a node does after reading the Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Another node holds it and its record is fresh: stay silent.
    Follow,
    /// It is ours: renew it.
    Renew,
    /// Nobody holds it, or its holder stopped renewing: take it.
    Acquire,
}

/// The decision of one look at the Lease, a pure function: `record` was first seen (unchanged
/// since) at `seen_at`; `now` is this node's monotonic clock.
pub fn decide(
    record: &Record,
    seen_at: Instant,
    me: &str,
    now: Instant,
    timing: &LeaseTiming,
) -> Step {
    match record.holder.as_deref() {
        None => Step::Acquire,
        Some(h) if h == me => Step::Renew,
        Some(_) => {
            let duration = record.duration.unwrap_or(timing.duration);
            if now.saturating_duration_since(seen_at) >= duration {
                Step::Acquire
            } else {
                Step::Follow
            }
        }
    }
}

/// The Lease written by a holder that renews (or takes) `previous`, as of `now`.
pub fn renewed(
    previous: Option<&Lease>,
    config: &LeaseConfig,
    acquiring: bool,
    now: Timestamp,
) -> Lease {
    let mut lease = previous.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(config.name.clone()),
            namespace: Some(config.namespace.clone()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let old = lease.spec.take().unwrap_or_default();
    let was = old.holder_identity.clone().filter(|h| !h.is_empty());
    let changed_hands = was.as_deref() != Some(config.identity.as_str());
    lease.spec = Some(LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        lease_duration_seconds: Some(
            i32::try_from(config.timing.duration.as_secs()).unwrap_or(i32::MAX),
        ),
        acquire_time: if acquiring && changed_hands {
            Some(MicroTime(now))
        } else {
            old.acquire_time.clone()
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(
            old.lease_transitions.unwrap_or(0) + i32::from(acquiring && changed_hands),
        ),
        ..old
    });
    lease
}

/// The Lease written by a holder that gives it up: nobody holds it, so the next node to look
/// takes it without waiting for it to expire.
pub fn released(previous: &Lease, now: Timestamp) -> Lease {
    let mut lease = previous.clone();
    let old = lease.spec.take().unwrap_or_default();
    lease.spec = Some(LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        renew_time: Some(MicroTime(now)),
        ..old
    });
    lease
}

/// What the election says now, for status output and the node's report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Election {
    /// The holder as last read (None: nobody, or not read yet).
    pub holder: Option<String>,
    /// Whether this node holds the Lease and may answer.
    pub leading: bool,
    /// Why this node does not compete (None: it does).
    pub ineligible: Option<String>,
    /// The last failed API request, if the last one failed.
    pub error: Option<String>,
    /// `leaseTransitions` as last read.
    pub transitions: i32,
}

/// What [`start`] returns.
pub struct ElectionHandles {
    /// Until when this node may answer (None: it may not): what the responder follows.
    pub answer_until: watch::Receiver<Option<Instant>>,
    /// The election's state.
    pub state: watch::Receiver<Election>,
    /// Why this node cannot serve (None: it can). The elector releases the Lease while set.
    pub ineligible: watch::Sender<Option<String>>,
    /// Set to true to release the Lease and stop; the task ends after the release.
    pub stop: watch::Sender<bool>,
    /// The elector task.
    pub task: tokio::task::JoinHandle<()>,
}

/// Starts the elector on the current runtime; it looks at the Lease at once.
pub fn start(client: Client, config: LeaseConfig) -> ElectionHandles {
    let (until_tx, answer_until) = watch::channel(None);
    let (state_tx, state) = watch::channel(Election::default());
    // Not eligible until the agent says so: a node whose datapath is not attached and whose
    // initial sync is not complete cannot answer for the VIPs, and a Lease taken at start
    // would be given back a moment later.
    let (ineligible, ineligible_rx) = watch::channel(Some(
        "rivorad is starting: the node agent has not judged this node yet".to_string(),
    ));
    let (stop, stop_rx) = watch::channel(false);
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let task = tokio::spawn(run(api, config, until_tx, state_tx, ineligible_rx, stop_rx));
    ElectionHandles {
        answer_until,
        state,
        ineligible,
        stop,
        task,
    }
}

/// The elector's memory between looks.
struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    until: watch::Sender<Option<Instant>>,
    state: watch::Sender<Election>,
    /// The record last seen and when (this node's clock) it was first seen.
    seen: Option<(Record, Instant)>,
    /// The Lease as last read or written.
    last: Option<Lease>,
    /// The last error logged (so a lasting failure is logged once).
    logged_error: Option<String>,
}

async fn run(
    api: Api<Lease>,
    config: LeaseConfig,
    until: watch::Sender<Option<Instant>>,
    state: watch::Sender<Election>,
    mut ineligible: watch::Receiver<Option<String>>,
    mut stop: watch::Receiver<bool>,
) {
    info!(
        lease = %format!("{}/{}", config.namespace, config.name),
        identity = %config.identity,
        duration = ?config.timing.duration,
        renew_deadline = ?config.timing.renew_deadline,
        retry_period = ?config.timing.retry_period,
        budget = ?config.timing.failover_budget(),
        "L2 speaker election started"
    );
    let mut e = Elector {
        api,
        config,
        until,
        state,
        seen: None,
        last: None,
        logged_error: None,
    };
    loop {
        if *stop.borrow() {
            e.give_up("rivorad is stopping").await;
            return;
        }
        let started = Instant::now();
        let why_not = ineligible.borrow_and_update().clone();
        match why_not {
            Some(why) => e.stand_aside(&why).await,
            None => e.look(started).await,
        }
        let next = started + e.config.timing.retry_period;
        tokio::select! {
            _ = tokio::time::sleep_until(next.into()) => {}
            r = ineligible.changed() => if r.is_err() { e.give_up("the agent stopped").await; return; },
            _ = stop.changed() => {}
        }
    }
}

impl Elector {
    fn holds(&self) -> bool {
        self.last
            .as_ref()
            .is_some_and(|l| Record::of(l).holder.as_deref() == Some(self.config.identity.as_str()))
    }

    fn publish(&self, f: impl FnOnce(&mut Election)) {
        self.state.send_if_modified(|s| {
            let before = s.clone();
            f(s);
            *s != before
        });
    }

    fn failed(&mut self, what: &str, e: String) {
        let msg = format!("{what} the L2 speaker Lease: {e}");
        if self.logged_error.as_deref() != Some(msg.as_str()) {
            warn!("{msg}");
            self.logged_error = Some(msg.clone());
        }
        self.publish(|s| s.error = Some(msg));
    }

    fn succeeded(&mut self) {
        self.logged_error = None;
        self.publish(|s| s.error = None);
    }

    /// Stops answering at once and, if this node holds the Lease, releases it.
    async fn stand_aside(&mut self, why: &str) {
        let was_leading = self.until.borrow().is_some();
        self.until.send_replace(None);
        if was_leading || self.holds() {
            warn!(
                "L2 speaker: this node cannot serve ({why}): no longer answering, releasing the Lease"
            );
            self.release().await;
        }
        let why = why.to_string();
        self.publish(|s| {
            s.leading = false;
            s.ineligible = Some(why);
        });
        self.observe().await;
    }

    /// Reads the Lease without competing for it: the holder as this node sees it (the
    /// report's `l2Holder`, also while this node may not hold it: before its initial sync,
    /// excluded, without carrier) and when the record was first seen, for when it competes
    /// again. A failed read is left to the next look that competes to report.
    async fn observe(&mut self) {
        let started = Instant::now();
        let timeout = self.config.timing.request_timeout();
        let Ok(Ok(current)) =
            tokio::time::timeout(timeout, self.api.get_opt(&self.config.name)).await
        else {
            return;
        };
        match &current {
            None => self.publish(|s| s.holder = None),
            Some(l) => {
                let record = Record::of(l);
                let seen_at = match &self.seen {
                    Some((r, at)) if *r == record => *at,
                    _ => started,
                };
                self.seen = Some((record.clone(), seen_at));
                self.publish(|s| {
                    s.holder = record.holder.clone();
                    s.transitions = record.transitions;
                });
            }
        }
        self.last = current;
    }

    /// Stops answering and releases the Lease (graceful stop).
    async fn give_up(&mut self, why: &str) {
        self.until.send_replace(None);
        if self.holds() {
            info!("L2 speaker: {why}: releasing the Lease");
            self.release().await;
        }
        self.publish(|s| s.leading = false);
    }

    async fn release(&mut self) {
        // Read first: only a Lease that still names us is released.
        let timeout = self.config.timing.request_timeout();
        let current = match tokio::time::timeout(timeout, self.api.get_opt(&self.config.name)).await
        {
            Ok(Ok(Some(l))) => l,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => return self.failed("reading", e.to_string()),
            Err(_) => return self.failed("reading", format!("no answer in {timeout:?}")),
        };
        if Record::of(&current).holder.as_deref() != Some(self.config.identity.as_str()) {
            self.last = Some(current);
            return;
        }
        let lease = released(&current, Timestamp::now());
        match tokio::time::timeout(
            timeout,
            self.api
                .replace(&self.config.name, &PostParams::default(), &lease),
        )
        .await
        {
            Ok(Ok(l)) => {
                self.last = Some(l);
                self.succeeded();
                self.publish(|s| s.holder = None);
            }
            Ok(Err(e)) => self.failed("releasing", e.to_string()),
            Err(_) => self.failed("releasing", format!("no answer in {timeout:?}")),
        }
    }

    /// One look: read, decide, renew or take if due.
    async fn look(&mut self, started: Instant) {
        self.publish(|s| s.ineligible = None);
        let timeout = self.config.timing.request_timeout();
        let read = tokio::time::timeout(timeout, self.api.get_opt(&self.config.name)).await;
        let current = match read {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => return self.failed("reading", e.to_string()),
            Err(_) => return self.failed("reading", format!("no answer in {timeout:?}")),
        };
        let step = match &current {
            None => Step::Acquire,
            Some(l) => {
                let record = Record::of(l);
                let seen_at = match &self.seen {
                    Some((r, at)) if *r == record => *at,
                    _ => started,
                };
                self.seen = Some((record.clone(), seen_at));
                let step = decide(
                    &record,
                    seen_at,
                    &self.config.identity,
                    Instant::now(),
                    &self.config.timing,
                );
                self.publish(|s| {
                    s.holder = record.holder.clone();
                    s.transitions = record.transitions;
                });
                step
            }
        };
        self.last = current.clone();
        if step == Step::Follow {
            if self.until.borrow().is_some() {
                // The Lease names another node: whatever our deadline says, stop now.
                warn!("L2 speaker: the Lease is held by another node: no longer answering");
                self.until.send_replace(None);
            }
            self.succeeded();
            self.publish(|s| s.leading = false);
            return;
        }
        let acquiring = step == Step::Acquire;
        let lease = renewed(current.as_ref(), &self.config, acquiring, Timestamp::now());
        let write = async {
            match &current {
                None => self.api.create(&PostParams::default(), &lease).await,
                // The read's resourceVersion makes this a compare-and-swap: a node that wrote
                // in between wins and we see a Conflict.
                Some(_) => {
                    self.api
                        .replace(&self.config.name, &PostParams::default(), &lease)
                        .await
                }
            }
        };
        match tokio::time::timeout(timeout, write).await {
            Ok(Ok(written)) => {
                let deadline = started + self.config.timing.renew_deadline;
                let was = self.until.send_replace(Some(deadline));
                if was.is_none() {
                    info!(
                        identity = %self.config.identity,
                        transitions = Record::of(&written).transitions,
                        "L2 speaker: this node holds the Lease: answering ARP/NDP for the VIPs"
                    );
                }
                self.seen = Some((Record::of(&written), started));
                self.last = Some(written);
                self.succeeded();
                let me = self.config.identity.clone();
                self.publish(|s| {
                    s.holder = Some(me);
                    s.leading = true;
                });
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => {
                // Someone else wrote first: their record is fresh; look again next time.
                self.seen = None;
                self.succeeded();
            }
            Ok(Err(e)) => self.failed(if acquiring { "taking" } else { "renewing" }, e.to_string()),
            Err(_) => self.failed(
                if acquiring { "taking" } else { "renewing" },
                format!("no answer in {timeout:?}"),
            ),
        }
        // A failed renewal changes nothing here: the deadline given to the responder at the
        // last successful one runs out on its own.
        if self.until.borrow().is_some_and(|t| t <= Instant::now()) {
            self.until.send_replace(None);
            self.publish(|s| s.leading = false);
        }
    }
}

#[cfg(test)]
mod tests;
