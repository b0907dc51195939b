//! The engine: one task per target on the current tokio runtime.

use std::collections::BTreeMap;
use std::fmt::{self, Debug};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::runtime::Handle;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::probe::{ProbeOutcome, probe};
use crate::spec::ProbeSpec;
use crate::tracker::{Initial, Tracker};

/// Shortest interval actually used, so a zero interval cannot busy-loop.
const MIN_INTERVAL: Duration = Duration::from_millis(10);
/// Longest interval actually used, so deadline arithmetic cannot overflow.
const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// A change of a target's up/down state, sent so the caller can update the
/// dataplane only when something changed instead of polling every target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition<K> {
    /// The target's key as given to [`Prober::set_targets`].
    pub key: K,
    /// The new state.
    pub up: bool,
    /// Detail of the probe that caused the change (`ok`, `connect:
    /// Connection refused`, ...), for the log line that explains it.
    pub detail: String,
    /// When that probe finished.
    pub at: SystemTime,
}

/// The current view of one target, for status output (`rivoractl`) that
/// needs more than the transitions: last result, latency and progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeStatus {
    /// The spec the target is probed with.
    pub spec: ProbeSpec,
    /// Current state; `None` until the first probe of a target started as
    /// [`Initial::Unknown`].
    pub up: Option<bool>,
    /// The most recent probe outcome, if any. After a spec change it stays
    /// from the old spec until the new one's first probe (which runs at
    /// once).
    pub last: Option<ProbeOutcome>,
    /// When the most recent probe finished.
    pub last_at: Option<SystemTime>,
    /// Identical results in a row ending with `last` (see
    /// [`Tracker::consecutive`]); 0 after a (re)start.
    pub consecutive: u32,
    /// Probes completed since the target was first added (kept across spec
    /// changes), for the Prometheus counters.
    pub probes: u64,
    /// Of those, the failed ones.
    pub failures: u64,
}

/// A target's status plus the generation of the task allowed to update it.
struct Slot {
    status: ProbeStatus,
    generation: u64,
}

type Shared<K> = Arc<Mutex<BTreeMap<K, Slot>>>;

/// A running target: its spec (to detect changes) and its task.
struct Running {
    spec: ProbeSpec,
    task: AbortHandle,
}

/// Runs the health checks of a set of targets, each independently on its own
/// task so a slow probe (up to its timeout) never delays another target.
///
/// `K` identifies a target, typically a backend. A backend used by several
/// VIPs must be given once, under one key: the caller deduplicates, so it is
/// probed once and its [`Transition`]s apply to every VIP that uses it.
///
/// Each target probes once as soon as it starts, then every `interval`
/// (measured start to start; if a probe takes longer than the interval the
/// next one starts right after it). After the first probe a random phase of
/// up to half an interval is added once, so hundreds of targets added
/// together do not keep probing in lockstep.
///
/// Dropping the `Prober` (or [`shutdown`](Self::shutdown)) stops every task.
pub struct Prober<K> {
    runtime: Handle,
    shared: Shared<K>,
    running: BTreeMap<K, Running>,
    tx: UnboundedSender<Transition<K>>,
    next_generation: u64,
}

impl<K> Prober<K>
where
    K: Clone + Ord + Send + Sync + Debug + 'static,
{
    /// An engine with no targets, and the receiver of its transitions. The
    /// tasks run on the tokio runtime current at this call, so later calls
    /// (e.g. [`set_targets`](Self::set_targets)) may come from any thread.
    ///
    /// The receiver yields `None` once the `Prober` is dropped and its tasks
    /// have ended. If the receiver is dropped, probing continues and
    /// [`snapshot`](Self::snapshot) stays current.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn new() -> (Self, UnboundedReceiver<Transition<K>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let prober = Prober {
            runtime: Handle::current(),
            shared: Arc::new(Mutex::new(BTreeMap::new())),
            running: BTreeMap::new(),
            tx,
            next_generation: 0,
        };
        (prober, rx)
    }

    /// Makes `targets` the complete set of probed targets, so the caller can
    /// pass its whole desired state after every configuration change.
    ///
    /// * A key with a spec equal to its current one keeps running untouched,
    ///   with its state and schedule; its `Initial` is ignored.
    /// * A key whose spec changed restarts at once, starting from its current
    ///   state (so e.g. a new interval does not flap it); only if it has no
    ///   state yet is the given `Initial` used.
    /// * A key no longer listed stops.
    /// * A new key starts from its `Initial` and probes at once.
    ///
    /// If a key appears more than once, the last entry wins. When this
    /// returns, no [`Transition`] of a removed target or of a replaced spec
    /// will be sent anymore (a probe already in flight is abandoned).
    pub fn set_targets(&mut self, targets: Vec<(K, ProbeSpec, Initial)>) {
        let mut wanted: BTreeMap<K, (ProbeSpec, Initial)> = BTreeMap::new();
        for (key, spec, initial) in targets {
            wanted.insert(key, (spec, initial));
        }
        let mut shared = lock(&self.shared);

        self.running.retain(|key, running| {
            let keep = wanted.contains_key(key);
            if !keep {
                running.task.abort();
                shared.remove(key);
                tracing::debug!(key = ?key, "health check stopped");
            }
            keep
        });

        for (key, (spec, initial)) in wanted {
            if let Some(running) = self.running.get(&key) {
                if running.spec == spec {
                    continue;
                }
                running.task.abort();
            }
            let previous = shared.get(&key).map(|slot| &slot.status);
            let initial = match previous.and_then(|status| status.up) {
                Some(up) => Initial::from(Some(up)),
                None => initial,
            };
            let (last, last_at) = previous
                .map(|s| (s.last.clone(), s.last_at))
                .unwrap_or_default();
            let (probes, failures) = shared
                .get(&key)
                .map(|s| (s.status.probes, s.status.failures))
                .unwrap_or_default();
            let tracker = Tracker::new(spec.rise, spec.fall, initial);
            let generation = self.next_generation;
            self.next_generation += 1;
            let status = ProbeStatus {
                spec: spec.clone(),
                up: tracker.is_up(),
                last,
                last_at,
                consecutive: 0,
                probes,
                failures,
            };
            shared.insert(key.clone(), Slot { status, generation });
            tracing::debug!(key = ?key, target = %spec.target_display(), ?initial, "health check started");
            let task = Target {
                key: key.clone(),
                spec: spec.clone(),
                tracker,
                generation,
                shared: Arc::clone(&self.shared),
                tx: self.tx.clone(),
            };
            let task = self.runtime.spawn(task.run()).abort_handle();
            self.running.insert(key, Running { spec, task });
        }
    }

    /// The status of every target, ordered by key, for status output.
    pub fn snapshot(&self) -> Vec<(K, ProbeStatus)> {
        lock(&self.shared)
            .iter()
            .map(|(k, slot)| (k.clone(), slot.status.clone()))
            .collect()
    }

    /// The status of one target, if it is probed.
    pub fn status(&self, key: &K) -> Option<ProbeStatus> {
        lock(&self.shared).get(key).map(|slot| slot.status.clone())
    }
}

impl<K> Prober<K> {
    /// Stops every target, as on drop, e.g. before the control plane exits.
    /// No transition is sent after this returns; [`Prober::set_targets`] may
    /// start targets again.
    pub fn shutdown(&mut self) {
        let mut shared = lock(&self.shared);
        for running in self.running.values() {
            running.task.abort();
        }
        self.running.clear();
        shared.clear();
    }

    /// How many targets are probed.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    /// Whether no target is probed.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }
}

impl<K> Drop for Prober<K> {
    /// Stops all tasks, so probing never outlives its owner.
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl<K: Debug> Debug for Prober<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prober")
            .field("targets", &self.running.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The state owned by one target's task.
struct Target<K> {
    key: K,
    spec: ProbeSpec,
    tracker: Tracker,
    generation: u64,
    shared: Shared<K>,
    tx: UnboundedSender<Transition<K>>,
}

impl<K: Clone + Ord + Debug> Target<K> {
    async fn run(mut self) {
        let period = self.spec.interval.clamp(MIN_INTERVAL, MAX_INTERVAL);
        let mut next = Instant::now();
        let mut phase = Some(random_phase(period));
        loop {
            tokio::time::sleep_until(next).await;
            let outcome = probe(&self.spec).await;
            let at = SystemTime::now();
            let change = self.tracker.observe(outcome.ok);
            tracing::trace!(key = ?self.key, ok = outcome.ok, detail = %outcome.detail, "health probe");
            {
                let mut shared = lock(&self.shared);
                // A newer spec or a removal replaced this task: it may have
                // been aborted while not at an await point. Stop silently.
                let Some(slot) = shared
                    .get_mut(&self.key)
                    .filter(|s| s.generation == self.generation)
                else {
                    return;
                };
                if let Some(up) = change {
                    tracing::debug!(
                        key = ?self.key,
                        target = %self.spec.target_display(),
                        up,
                        detail = %outcome.detail,
                        "health transition"
                    );
                    // Sent under the lock so transitions are ordered with the
                    // generation check above; a closed receiver is fine.
                    let _ = self.tx.send(Transition {
                        key: self.key.clone(),
                        up,
                        detail: outcome.detail.clone(),
                        at,
                    });
                }
                let status = &mut slot.status;
                status.up = self.tracker.is_up();
                status.consecutive = self.tracker.consecutive();
                status.probes += 1;
                if !outcome.ok {
                    status.failures += 1;
                }
                status.last = Some(outcome);
                status.last_at = Some(at);
            }
            next += period + phase.take().unwrap_or_default();
            next = next.max(Instant::now());
        }
    }
}

/// A random offset in `[0, period / 2)`, different for every call.
fn random_phase(period: Duration) -> Duration {
    // Each RandomState has fresh keys, so hashing nothing yields a new
    // pseudo-random value without a dependency on a random number crate.
    let r = RandomState::new().hash_one(());
    period.mul_f64((r % 1000) as f64 / 2000.0)
}

/// Locks the shared map, ignoring poisoning: the critical sections only
/// assign fields, so the map is consistent even after a panic elsewhere.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_is_within_half_an_interval_and_varies() {
        let period = Duration::from_millis(100);
        let phases: Vec<_> = (0..50).map(|_| random_phase(period)).collect();
        assert!(phases.iter().all(|p| *p < period / 2));
        assert!(phases.iter().any(|p| *p != phases[0]));
        assert!(random_phase(MAX_INTERVAL) < MAX_INTERVAL / 2);
    }
}
