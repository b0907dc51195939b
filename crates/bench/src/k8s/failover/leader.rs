//! Controller leader loss: two rivora-controller replicas (the release binary, as the shipped
//! ServiceAccount) with the Lease timing the chart deploys; the leader is SIGKILLed and a
//! LoadBalancer Service created at once. Timed from the kill to the Lease naming the other
//! replica and to the Service's first address (written by the new leader), beside the budget
//! the code allows and the same create-to-address time under a healthy leader.
//!
//! Why the kill moment is chosen: how long a dead leader keeps the Lease depends on when it
//! last renewed (it renews when `grace` is left, so its Lease has between `grace` and the full
//! duration to run). The kills are spread over the renewal period, the first right after a
//! renewal (the worst case), so the figures show both the worst and a typical failover.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use rivora_k8s_api::AddressPool;
use rivora_kube_testbed::unique_name;
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::Measured;
use crate::k8s::harness::{Controller, Ctx, Launch, apply, lb_service, ms, wait_until};
use crate::report::Row;
use crate::stats::{fmt_ratio, quantile, ratio};

/// The loadBalancerClass the two replicas serve.
const CLASS: &str = "rivora.dev/bench-failover";
/// The pool the Services take their addresses from.
const CIDR: &str = "10.164.0.0/24";
/// The controller's default `--lease-name`.
const LEASE_NAME: &str = "rivora-controller";
/// The two replicas' identities (pod names in a cluster).
const IDS: [&str; 2] = ["replica-a", "replica-b"];
/// kube-lease-manager 0.12 (manager.rs, `MAX_RELEASE_WAITING_MILLIS`): after clearing an
/// expired Lease, a replica waits a random 0.1-1 s before taking it.
const RELEASE_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The requests between expiry and the first status: the Lease read, cleared, taken (two
/// patches) and read back, the leadership confirmed, the status applied; a few milliseconds
/// each on an idle API server, 1 s allowed.
const REQUESTS: Duration = Duration::from_secs(1);
/// The chart's values, for the Lease timing it deploys.
const VALUES: &str = include_str!("../../../../../deploy/chart/values.yaml");

/// `controller.leaseDuration` and `controller.leaseGrace` (seconds) from the chart's values.
fn chart_lease_timing() -> Result<(u64, u64)> {
    let section: Vec<&str> = VALUES
        .lines()
        .skip_while(|l| *l != "controller:")
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' ') || l.starts_with('#'))
        .collect();
    let value = |key: &str| -> Result<u64> {
        section
            .iter()
            .find_map(|l| l.trim().strip_prefix(key)?.trim().parse().ok())
            .ok_or_else(|| anyhow!("deploy/chart/values.yaml: no controller.{key} in seconds"))
    };
    Ok((value("leaseDuration:")?, value("leaseGrace:")?))
}

/// One failover's figures.
struct Failover {
    /// How long after the leader's last renewal it was killed.
    phase: Duration,
    /// How long its Lease still had to run at the kill.
    left: Duration,
    /// Kill to the Lease naming the other replica.
    lease: Duration,
    /// Kill to the Service's first address.
    address: Duration,
}

/// The namespaces and objects of one run, removed at the end.
struct Setup {
    services: Api<Service>,
    leases: Api<Lease>,
    kubeconfig: std::path::PathBuf,
    lease_ns: String,
    /// The pool's name, also the label value its selector wants.
    pool: String,
    lease: Duration,
    grace: Duration,
}

/// Runs the controller leader-loss failover (3 kills; 1 with --quick).
pub async fn run(ctx: &Ctx) -> Result<Measured> {
    let (lease_secs, grace_secs) = chart_lease_timing()?;
    let ns = unique_name("bench-fo-svc");
    let lease_ns = unique_name("bench-fo-ctl");
    rivora_kube_testbed::ensure_namespace(&ctx.admin, &ns).await?;
    let kubeconfig = ctx.controller_kubeconfig(&lease_ns).await?;
    let pool = unique_name("bench-failover");
    let pools: Api<AddressPool> = Api::all(ctx.admin.clone());
    let body = json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": pool},
        "spec": {"addresses": [CIDR], "autoAssign": true,
                 "serviceSelector": {"matchLabels": {"pool": pool}}},
    });
    apply(&pools, body).await?;
    let setup = Setup {
        services: Api::namespaced(ctx.admin.clone(), &ns),
        leases: Api::namespaced(ctx.admin.clone(), &lease_ns),
        kubeconfig,
        lease_ns,
        pool,
        lease: Duration::from_secs(lease_secs),
        grace: Duration::from_secs(grace_secs),
    };
    let mut replicas = Vec::new();
    for id in IDS {
        replicas.push(setup.start(ctx, id)?);
    }
    let result = measure(ctx, &setup, &mut replicas).await;
    let logs: Vec<String> = IDS
        .iter()
        .zip(&replicas)
        .map(|(id, r)| format!("{id}: {}", r.log_tail(4)))
        .collect();
    drop(replicas);
    let _ = setup
        .services
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let _ = pools.delete(&setup.pool, &DeleteParams::default()).await;
    result.with_context(|| format!("controller logs: {}", logs.join(" | ")))
}

impl Setup {
    /// Starts replica `id` with the chart's Lease timing.
    fn start(&self, ctx: &Ctx, id: &str) -> Result<Controller> {
        let launch = Launch {
            id,
            class: CLASS,
            lease_secs: self.lease.as_secs(),
            grace_secs: self.grace.as_secs(),
            extra: &[],
        };
        Controller::launch(ctx, &self.kubeconfig, &self.lease_ns, &launch)
    }

    /// The Lease's holder and its last renewal.
    async fn holder(&self) -> Result<(String, Timestamp), String> {
        let l = self
            .leases
            .get(LEASE_NAME)
            .await
            .map_err(|e| e.to_string())?;
        let spec = l.spec.ok_or("the Lease has no spec")?;
        match (spec.holder_identity, spec.renew_time) {
            (Some(h), Some(t)) => Ok((h, t.0)),
            other => Err(format!("holder, renewed: {other:?}")),
        }
    }

    /// Creates Service `name` and waits for its first address; the time from `from` (the
    /// create, or the kill before it) and the create's own round trip.
    async fn create_until_addressed(
        &self,
        name: &str,
        from: Option<Instant>,
        limit: Duration,
    ) -> Result<(Duration, Duration)> {
        let (ready, addressed) =
            first_seen(self.services.clone(), name, |s: &Service| has_address(s));
        ready.await.context("the Service watch never listed")?;
        let sent = Instant::now();
        let svc = lb_service(name, CLASS, json!({"pool": self.pool}))?;
        self.services
            .create(&PostParams::default(), &svc)
            .await
            .with_context(|| format!("creating Service {name}"))?;
        let create = sent.elapsed();
        let at = until(addressed, limit, || {
            format!("Service {name} has no address")
        })
        .await?;
        Ok((at - from.unwrap_or(sent), create))
    }
}

/// Whether the Service's status gives it an address.
fn has_address(s: &Service) -> bool {
    s.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|i| i.iter().any(|x| x.ip.is_some()))
}

/// Watches object `name` of `api` (from before it exists, if need be); the receiver fires once
/// the watch's initial list is in, the task ends with the moment `done` first held.
fn first_seen<K>(
    api: Api<K>,
    name: &str,
    done: impl Fn(&K) -> bool + Send + 'static,
) -> (oneshot::Receiver<()>, JoinHandle<Result<Instant>>)
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
{
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut tx = Some(tx);
        let mut events = watcher(api, cfg).default_backoff().boxed();
        while let Some(ev) = events.next().await {
            let now = Instant::now();
            match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) if done(&o) => {
                    return Ok(now);
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(());
                    }
                }
                // A failed watch is retried (with back-off) by the stream itself.
                _ => {}
            }
        }
        bail!("the watch ended")
    });
    (rx, task)
}

/// Waits at most `limit` for a [`first_seen`] task; on timeout the error is `what()`.
async fn until(
    task: JoinHandle<Result<Instant>>,
    limit: Duration,
    what: impl FnOnce() -> String,
) -> Result<Instant> {
    let abort = task.abort_handle();
    match tokio::time::timeout(limit, task).await {
        Ok(joined) => joined.context("the watch task failed")?,
        Err(_) => {
            abort.abort();
            bail!("not within {limit:?}: {}", what())
        }
    }
}

async fn measure(ctx: &Ctx, s: &Setup, replicas: &mut [Controller]) -> Result<Measured> {
    let (baselines, kills) = if ctx.quick { (3, 1) } else { (5, 3) };
    let period = s.lease - s.grace;
    let budget = s.lease + RELEASE_BACKOFF_MAX + REQUESTS;
    let (first, _) = wait_until("a replica holds the Lease", Duration::from_secs(60), || {
        s.holder()
    })
    .await
    .map_err(|e| match replicas.iter_mut().find_map(Controller::exited) {
        Some(why) => anyhow!("{e}; {why}"),
        None => e,
    })?;

    // Baseline: create to address under a healthy leader (after one warm-up Service).
    let mut healthy = Vec::new();
    let mut create_ms = Vec::new();
    for i in 0..=baselines {
        let (took, create) = s
            .create_until_addressed(&format!("healthy-{i}"), None, Duration::from_secs(30))
            .await?;
        if i > 0 {
            healthy.push(ms(took));
            create_ms.push(ms(create));
        }
    }

    let mut done: Vec<Failover> = Vec::new();
    let mut holders = vec![first];
    for k in 0..kills {
        // Kill k of n this long after a renewal: 0 (the worst case), then spread over the period.
        let phase = period.mul_f64(k as f64 / kills as f64);
        let (leader, renewed) = at_phase(s, phase, period + Duration::from_secs(5)).await?;
        let i = IDS
            .iter()
            .position(|id| *id == leader)
            .ok_or_else(|| anyhow!("the Lease names {leader}, not one of {IDS:?}"))?;
        let left = (renewed + s.lease)
            .duration_since(Timestamp::now())
            .try_into()
            .unwrap_or(Duration::ZERO);
        let old = leader.clone();
        let (ready, taken) = first_seen(s.leases.clone(), LEASE_NAME, move |l: &Lease| {
            let h = l.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
            h.is_some_and(|h| h != old)
        });
        ready.await.context("the Lease watch never listed")?;
        let killed = Instant::now();
        replicas[i].kill();
        let name = format!("after-kill-{k}");
        let (address, _) = s
            .create_until_addressed(&name, Some(killed), 2 * budget)
            .await
            .with_context(|| format!("failover {k}, {leader} killed"))?;
        let lease_at = until(taken, Duration::from_secs(5), || {
            "the Lease still names the killed leader".into()
        })
        .await?;
        done.push(Failover {
            phase,
            left,
            lease: lease_at - killed,
            address,
        });
        // Its Deployment would start it again: it rejoins as the follower.
        replicas[i] = s.start(ctx, IDS[i])?;
        holders.push(s.holder().await.map_err(|e| anyhow!(e))?.0);
    }
    Ok(report(s, &done, &healthy, &create_ms, budget, &holders))
}

/// Waits until the Lease's holder renewed between `phase` and `phase` + 0.2 s ago; its holder
/// and that renewal.
async fn at_phase(s: &Setup, phase: Duration, limit: Duration) -> Result<(String, Timestamp)> {
    let window = Duration::from_millis(200);
    wait_until("the leader's renewal phase", limit, || async {
        let (h, renewed) = s.holder().await?;
        let age = Timestamp::now().duration_since(renewed).as_secs_f64();
        if (phase.as_secs_f64()..(phase + window).as_secs_f64()).contains(&age) {
            Ok((h, renewed))
        } else {
            Err(format!("{h} renewed {age:.2} s ago"))
        }
    })
    .await
}

fn report(
    s: &Setup,
    done: &[Failover],
    healthy: &[f64],
    create_ms: &[f64],
    budget: Duration,
    holders: &[String],
) -> Measured {
    let secs = |f: fn(&Failover) -> Duration| -> Vec<f64> {
        done.iter().map(|x| f(x).as_secs_f64()).collect()
    };
    let (address, lease) = (secs(|x| x.address), secs(|x| x.lease));
    let over: Vec<f64> = done
        .iter()
        .map(|x| x.address.as_secs_f64() - x.left.as_secs_f64())
        .collect();
    let max = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
    let b = budget.as_secs_f64();
    let (lease_s, grace_s) = (s.lease.as_secs(), s.grace.as_secs());
    let target = format!(
        "< {b:.0} s (Lease {lease_s} s + take-over back-off <= {:.0} s + {:.0} s of requests)",
        RELEASE_BACKOFF_MAX.as_secs_f64(),
        REQUESTS.as_secs_f64()
    );
    let each: Vec<String> = done
        .iter()
        .map(|x| {
            format!(
                "killed {:.1} s after a renewal, Lease left {:.1} s: new holder {:.2} s, address {:.2} s",
                x.phase.as_secs_f64(),
                x.left.as_secs_f64(),
                x.lease.as_secs_f64(),
                x.address.as_secs_f64()
            )
        })
        .collect();
    let figure = |v: &[f64]| {
        if v.len() > 1 {
            format!("{:.2} / {:.2} s", quantile(v, 0.5), max(v))
        } else {
            format!("{:.2} s", max(v))
        }
    };
    let which = if done.len() > 1 { ", p50 / max" } else { "" };
    let mut m = Measured {
        method: format!(
            "Controller leader loss: two rivora-controller replicas (the release binary, as \
             the shipped ServiceAccount and RBAC) with the chart's Lease timing \
             (`--lease-duration {lease_s}` `--lease-grace {grace_s}`, from \
             deploy/chart/values.yaml), one AddressPool. The leader (the Lease's \
             holderIdentity) is SIGKILLed and a LoadBalancer Service created at once; watches \
             in the benchmark time the kill to the Lease naming the other replica and to the \
             Service's first address (only the leader writes status). A leader renews when \
             {grace_s} s are left, so a dead one's Lease runs out {grace_s}-{lease_s} s after \
             the kill depending on when it last renewed: the {} kills are spread over the \
             {} s renewal period, the first right after a renewal (the worst case); the killed \
             replica is restarted as the follower after each. Budget from the code: the \
             follower sleeps until the Lease expires, clears it, waits a random 0.1-1 s \
             (kube-lease-manager 0.12) and takes it, then confirms the Lease and applies the \
             status. Baseline: create to address under a healthy leader, {} Services in the \
             same run. Holders in turn: {}.",
            done.len(),
            (s.lease - s.grace).as_secs(),
            healthy.len(),
            holders.join(" -> ")
        ),
        ..Default::default()
    };
    let met = max(&address) < b;
    m.rows.push(
        Row::info(
            format!("leader killed to first status by the new leader{which}"),
            figure(&address),
        )
        .ratio(fmt_ratio(ratio(max(&address), b)))
        .target(target.clone(), met)
        .evidence(each.join("; ")),
    );
    m.rows.push(
        Row::info(
            format!("leader killed to Lease held by the other replica{which}"),
            figure(&lease),
        )
        .ratio(fmt_ratio(ratio(max(&lease), b)))
        .target(target, max(&lease) < b)
        .evidence(format!(
            "first status {:.2} s at most after the Lease expired (back-off and requests)",
            max(&over)
        )),
    );
    m.rows.push(
        Row::info(
            "Service create to address, healthy leader (baseline), p50",
            format!("{:.0} ms", quantile(healthy, 0.5)),
        )
        .evidence(format!(
            "{} Services, slowest {:.0} ms; the create request itself p50 {:.1} ms",
            healthy.len(),
            max(healthy),
            quantile(create_ms, 0.5)
        )),
    );
    if !met {
        m.notes.push(format!(
            "Leader loss: the slowest failover took {:.2} s, {:.2} s over the {b:.0} s budget: {}.",
            max(&address),
            max(&address) - b,
            each.join("; ")
        ));
    }
    m
}
