//! Leader election over a `coordination.k8s.io/v1` Lease, with a check before every write.
//!
//! Why the extra check ([`Leadership::confirm`]): kube-lease-manager tells when this replica
//! *became* or *stopped being* the holder, but a replica cut off from the API server keeps its
//! last answer while its Lease runs out, and another replica may take the Lease once it has
//! expired. Writes must stop before that point, so before each batch of writes the leader reads
//! the Lease and writes only while it is still the holder and more than half of `grace` away
//! from expiry. Half, because a healthy holder renews when `grace` is left: the other half is the
//! time its renewal may take without the leader pausing. (A write itself is bounded by the
//! client's timeout, which must stay below `grace / 2`.)
//!
//! Why a supervisor around kube-lease-manager ([`supervise`]): a replica that does not hold
//! the Lease sleeps until the holder's term would end before it looks again, so a leader that
//! releases the Lease on shutdown (SIGTERM) was followed only a whole term later, as after a
//! crash. Each replica therefore also watches the Lease, and a follower that sees it released
//! (no `holderIdentity`, as kube-lease-manager and client-go's `ReleaseOnCancel` leave it)
//! replaces its sleeping manager with a fresh one, which takes the free Lease at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::{AbortHandle, JoinHandle};
use tracing::{debug, info, warn};

/// Who competes for which Lease, and its timing.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Name of the Lease (all replicas use the same one).
    pub lease_name: String,
    /// Namespace of the Lease (the controller's own).
    pub namespace: String,
    /// This replica's identity (its pod name), recorded as `holderIdentity`.
    pub identity: String,
    /// `leaseDurationSeconds`: how long a holder that stopped renewing keeps the Lease.
    pub duration: Duration,
    /// How long before expiry the holder renews; [`Leadership::confirm`] stops saying yes when
    /// half of it is left.
    pub grace: Duration,
}

/// This replica's place in the election.
#[derive(Debug)]
pub struct Leadership {
    config: LeaderConfig,
    leases: Api<Lease>,
    state: watch::Receiver<bool>,
    /// Tells [`supervise`] to leave the election (releasing the Lease if held).
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<()>>,
    /// The running manager's task, for [`Leadership::stop_renewing`].
    manager: Arc<Mutex<Option<AbortHandle>>>,
    /// The Lease watch of [`supervise`].
    lease_watch: AbortHandle,
}

/// A kube-lease-manager task and what it says.
type Running = (
    watch::Receiver<bool>,
    JoinHandle<Result<LeaseManager, LeaseManagerError>>,
);

/// Builds a manager for `config` and starts it.
async fn start_manager(client: &Client, config: &LeaderConfig) -> Result<Running> {
    let manager = LeaseManagerBuilder::new(client.clone(), &config.lease_name)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_duration(config.duration.as_secs().max(1))
        .with_grace(config.grace.as_secs().max(1))
        .build()
        .await
        .with_context(|| {
            format!(
                "joining the election for Lease {}/{}",
                config.namespace, config.lease_name
            )
        })?;
    Ok(manager.watch().await)
}

/// Whether `lease` is released: nobody is named as holder (kube-lease-manager clears
/// `holderIdentity`; client-go's `ReleaseOnCancel` sets it to "").
pub fn is_released(lease: &Lease) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .is_none_or(str::is_empty)
}

/// Watches the Lease and notifies `released` whenever it is seen released.
fn watch_releases(leases: Api<Lease>, name: &str, released: Arc<Notify>) -> AbortHandle {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream =
        rivora_k8s_source::backoff::with_backoff(watcher(leases, config)).applied_objects();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(lease) if is_released(&lease) => released.notify_one(),
                Ok(_) => {}
                Err(e) => debug!(error = %e, "Lease watch error (retrying)"),
            }
        }
    })
    .abort_handle()
}

/// What [`supervise`] works with.
struct Supervised {
    client: Client,
    config: LeaderConfig,
    /// Where the election's answer is forwarded ([`Leadership::is_leader`] reads it).
    state: watch::Sender<bool>,
    /// The running manager's task (replaced on a restart).
    current: Arc<Mutex<Option<AbortHandle>>>,
    /// Notified when the Lease is seen released.
    released: Arc<Notify>,
    /// The Lease watch, ended with the supervisor.
    lease_watch: AbortHandle,
}

/// Runs the election: forwards the manager's state to `state`, replaces a follower's manager
/// when the Lease is seen released (see the module doc), and on `stop` drops the manager's
/// receiver, which makes kube-lease-manager release the Lease if held, and waits for that.
async fn supervise(s: Supervised, first: Running, mut stop: oneshot::Receiver<()>) -> Result<()> {
    let Supervised {
        client,
        config,
        state,
        current,
        released,
        lease_watch,
    } = s;
    /// Ends the Lease watch with the supervisor, however it ends.
    struct AbortOnDrop(AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _lease_watch = AbortOnDrop(lease_watch);
    let (mut rx, mut task) = first;
    loop {
        let leads = *rx.borrow_and_update();
        state.send_if_modified(|s| std::mem::replace(s, leads) != leads);
        tokio::select! {
            _ = &mut stop => {
                drop(rx);
                return match task.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(e).context("releasing the Lease"),
                    Err(e) => Err(e).context("the election task panicked"),
                };
            }
            changed = rx.changed() => {
                if changed.is_err() {
                    // The manager ended on its own: an error of the election.
                    return match task.await {
                        Ok(Ok(_)) => Err(anyhow::anyhow!("the election ended")),
                        Ok(Err(e)) => Err(e).context("the election failed"),
                        Err(e) => Err(e).context("the election task panicked"),
                    };
                }
            }
            _ = released.notified(), if !leads => {
                info!(
                    lease = %config.lease_name,
                    "the Lease was released: competing for it now, not when the old term ends"
                );
                task.abort();
                let _ = task.await;
                let next = loop {
                    match start_manager(&client, &config).await {
                        Ok(n) => break n,
                        Err(e) => {
                            warn!("{e:#}");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                };
                (rx, task) = next;
                *current.lock().unwrap_or_else(|p| p.into_inner()) = Some(task.abort_handle());
            }
        }
    }
}

impl Leadership {
    /// Joins the election (creating the Lease if needed); keeps competing in the background.
    pub async fn start(client: Client, config: LeaderConfig) -> Result<Leadership> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
        let first = start_manager(&client, &config).await?;
        let released = Arc::new(Notify::new());
        let lease_watch = watch_releases(leases.clone(), &config.lease_name, Arc::clone(&released));
        let manager = Arc::new(Mutex::new(Some(first.1.abort_handle())));
        let (tx, state) = watch::channel(false);
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(supervise(
            Supervised {
                client,
                config: config.clone(),
                state: tx,
                current: Arc::clone(&manager),
                released,
                lease_watch: lease_watch.clone(),
            },
            first,
            stop_rx,
        ));
        Ok(Leadership {
            leases,
            config,
            state,
            stop,
            task,
            manager,
            lease_watch,
        })
    }

    /// What the election last said (true: this replica holds the Lease). A hint: writers use
    /// [`Leadership::confirm`].
    pub fn is_leader(&self) -> bool {
        *self.state.borrow()
    }

    /// Waits until the election says this replica leads (or the election task ended).
    pub async fn wait_until_leader(&mut self) -> Result<()> {
        self.state
            .wait_for(|leads| *leads)
            .await
            .map(|_| ())
            .context("the election task ended")
    }

    /// Waits for the next change of [`Leadership::is_leader`].
    pub async fn changed(&mut self) -> Result<bool> {
        self.state
            .changed()
            .await
            .context("the election task ended")?;
        Ok(*self.state.borrow())
    }

    /// Whether this replica may write now: the election says it leads, and the Lease read just
    /// now names it as holder with more than `grace / 2` left before it expires.
    pub async fn confirm(&self) -> Result<bool> {
        if !self.is_leader() {
            return Ok(false);
        }
        let lease = self
            .leases
            .get(&self.config.lease_name)
            .await
            .context("reading the Lease")?;
        Ok(
            lease_valid_for(&lease, &self.config.identity, Timestamp::now())
                > self.config.grace / 2,
        )
    }

    /// Leaves the election, releasing the Lease if held (its `holderIdentity` cleared). The
    /// other replicas see the release through their Lease watch and take the Lease at once
    /// (see the module doc), not when the old term would have ended.
    pub async fn step_down(self) -> Result<()> {
        let _ = self.stop.send(());
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(e).context("the election task panicked"),
        }
    }

    /// Stops renewing without releasing anything or telling [`Leadership::is_leader`], as a
    /// replica cut off from the API server would: only [`Leadership::confirm`] notices, when
    /// the Lease gets within `grace / 2` of expiring. For tests of the hand-over.
    pub fn stop_renewing(&self) {
        // The manager first: once the supervisor is gone, a manager still running would see
        // its receiver dropped and release the Lease.
        if let Some(m) = self
            .manager
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            m.abort();
        }
        self.task.abort();
        self.lease_watch.abort();
    }
}

/// How much longer `lease` is held by `identity` as of `now` (zero: not held by it, or expired).
pub fn lease_valid_for(lease: &Lease, identity: &str, now: Timestamp) -> Duration {
    let Some(spec) = &lease.spec else {
        return Duration::ZERO;
    };
    if spec.holder_identity.as_deref() != Some(identity) {
        return Duration::ZERO;
    }
    let (Some(renewed), Some(secs)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return Duration::ZERO;
    };
    let expires = renewed.0 + Duration::from_secs(u64::try_from(secs).unwrap_or(0));
    expires
        .duration_since(now)
        .try_into()
        .unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: &str, renewed: Timestamp, secs: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(secs),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn validity_counts_down_to_zero_and_is_zero_for_others() {
        let t0: Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
        let l = lease("a", t0, 10);
        let at = |s: i64| t0 + Duration::from_secs(s as u64);
        assert_eq!(lease_valid_for(&l, "a", t0), Duration::from_secs(10));
        assert_eq!(lease_valid_for(&l, "a", at(7)), Duration::from_secs(3));
        assert_eq!(lease_valid_for(&l, "a", at(11)), Duration::ZERO);
        assert_eq!(lease_valid_for(&l, "b", t0), Duration::ZERO);
        assert_eq!(lease_valid_for(&Lease::default(), "a", t0), Duration::ZERO);
    }
}
