//! The API edge: watch Services, AddressPools, Namespaces and ServicePolicies (and Gateway API's
//! kinds and RivoraNodes, in [`crate::gateway_run`]; with [`OptIn::distribution_group_status`]
//! Meridio-2's, in [`crate::meridio_status`]), and — while this replica leads — recompute every
//! assignment, every ServicePolicy status and every Gateway API status (and DistributionGroup
//! status) from the whole snapshot and write what differs.
//!
//! Why "recompute everything" instead of per-event patches: the allocator is a pure function of
//! the snapshot, so a restart, a failover and a missed event all end in the same state, and the
//! import-first rule holds by construction once the stores have their first full list (nothing is
//! computed before every store is ready).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use rivora_k8s_api::{AddressPool, RivoraNode, ServicePolicy};
use rivora_k8s_source::lenient::{Decoded, Undecodable, decoded_event};
use serde_json::json;
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::gateway_run::{self, GatewayWatch, GatewayWrites};
use crate::ipam::{self, ClaimKey, ClaimView, Outcome};
use crate::l2_reach;
use crate::leader::Leadership;
use crate::meridio_status::watch::{MeridioWatch, MeridioWrites};
use crate::metrics::{Metrics, StatusWrites};
use crate::observe::{self, ClassConfig, FIELD_MANAGER};
use crate::policy_status::{self, ServiceIndex};
use crate::undecodable::UndecodableObjects;

/// How the loop behaves.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Which Services are ours.
    pub class: ClassConfig,
    /// This replica's identity (in Events).
    pub identity: String,
    /// Quiet time after a change before recomputing (batches bursts of events).
    pub debounce: Duration,
    /// Recompute at least this often even without events.
    pub resync: Duration,
    /// Where passes are recorded.
    pub metrics: Arc<Metrics>,
}

/// Writers a replica runs only when asked to (the binary's opt-in flags; all off by default).
///
/// Why apart from [`Settings`]: they are additions to what every replica does, and
/// [`replica`] (what the tests of the rest call) runs without them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OptIn {
    /// `--distribution-group-status`: write the `Ready` and `CapacityExceeded` conditions of the
    /// DistributionGroups of Meridio-2's Gateways ([`crate::meridio_status`]). Off by default:
    /// Meridio-2's own DistributionGroup controller writes them, and two writers would fight.
    pub distribution_group_status: bool,
}

/// The watched objects.
#[derive(Clone)]
pub struct Stores {
    services: Store<Service>,
    pools: Store<AddressPool>,
    namespaces: Store<Namespace>,
    policies: Store<ServicePolicy>,
    /// The nodes' reports: who is the L2 speaker and what it cannot serve.
    nodes: Store<RivoraNode>,
    gateway: Arc<GatewayWatch>,
    /// Meridio-2's kinds, with [`OptIn::distribution_group_status`] only.
    meridio: Option<Arc<MeridioWatch>>,
    /// What every watch left out, for the leader's Warning Events.
    undecodable: Arc<UndecodableObjects>,
}

/// What every watch of a replica shares: whom to wake on an event, and where objects that do
/// not decode are counted.
#[derive(Clone)]
pub struct WatchContext {
    /// Notified on every event (the leader's loop waits on it).
    pub changed: Arc<Notify>,
    /// Where `rivora_controller_undecodable_objects` is kept.
    pub metrics: Arc<Metrics>,
    /// The objects each watch leaves out, for the leader's Warning Events on them.
    pub undecodable: Arc<UndecodableObjects>,
}

/// Starts one watch into a store (lenient: see [`spawn_watch_with`]); `ctx.changed` is
/// notified on every event (the Gateway and Meridio-2 halves' watches use it too).
pub(crate) fn spawn_watch<K>(api: Api<Decoded<K>>, ctx: &WatchContext) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    spawn_watch_with(api, watcher::Config::default(), ctx)
}

/// [`spawn_watch`] with a watcher configuration (a label selector, say).
///
/// Every object is decoded on its own (rivora_k8s_source::lenient, as the node agent's
/// watches do): a typed watch decodes a whole list page at once, so one object the Rust type
/// refuses (a value another tool wrote, a field of a newer schema) failed the list, the
/// watcher retried for ever and the store never filled, which stopped every pass (nothing is
/// computed before every store has listed). Now such an object is left out (an earlier
/// version of it that decoded stays), logged once per object version, counted in
/// `rivora_controller_undecodable_objects{kind}`, and the leader records a Warning Event on it
/// ([`crate::undecodable`]); everything else is served.
pub(crate) fn spawn_watch_with<K>(
    api: Api<Decoded<K>>,
    config: watcher::Config,
    ctx: &WatchContext,
) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let held = store.clone();
    let kind = K::kind(&()).to_string();
    let gauge = ctx.metrics.undecodable_objects(&kind);
    let shared = Arc::clone(&ctx.undecodable);
    let mut bad = Undecodable::new();
    // Waits that grow, also for a kind whose CRD is absent (rivora_k8s_source::backoff).
    let decoded = rivora_k8s_source::backoff::with_backoff(watcher(api, config))
        // managedFields are the largest part of most objects, and only our own entries are
        // read (whether we hold status to keep or take back): the others are dropped before
        // the store.
        .modify(|o: &mut Decoded<K>| {
            o.managed_fields_mut()
                .retain(|m| m.manager.as_deref() == Some(FIELD_MANAGER))
        })
        .filter_map(move |ev| {
            let out = match ev {
                Ok(ev) => {
                    let e = decoded_event(&kind, ev, &held, &mut bad);
                    gauge.set(i64::try_from(bad.len()).unwrap_or(i64::MAX));
                    if !bad.relisting() {
                        shared.set(&kind, bad.objects());
                    }
                    e.map(Ok)
                }
                Err(e) => Some(Err(e)),
            };
            std::future::ready(out)
        });
    let stream = reflector::reflector(writer, decoded).touched_objects();
    let changed = Arc::clone(&ctx.changed);
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        // One line when a watch starts failing and one when it works again, not one per retry.
        let mut failing = false;
        while let Some(ev) = stream.next().await {
            match ev {
                Err(e) if !failing => {
                    failing = true;
                    warn!(error = %e, "watch error (retrying with back-off; logged once until it works)");
                }
                Err(_) => {}
                Ok(_) if failing => {
                    failing = false;
                    info!("watch works again");
                }
                Ok(_) => {}
            }
            changed.notify_one();
        }
    });
    store
}

/// Starts the four watches of the Service half, and the Gateway half's once Gateway API is
/// served ([`GatewayWatch`]); `ctx.changed` is notified on every event.
pub fn watch_all(client: &Client, ctx: &WatchContext) -> Stores {
    watch_all_with(client, ctx, OptIn::default())
}

/// [`watch_all`], and what `opt_in` asks for (Meridio-2's kinds once they are served,
/// [`MeridioWatch`]).
pub fn watch_all_with(client: &Client, ctx: &WatchContext, opt_in: OptIn) -> Stores {
    Stores {
        services: spawn_watch(Api::all(client.clone()), ctx),
        pools: spawn_watch(Api::all(client.clone()), ctx),
        namespaces: spawn_watch(Api::all(client.clone()), ctx),
        policies: spawn_watch(Api::all(client.clone()), ctx),
        nodes: spawn_watch(Api::all(client.clone()), ctx),
        meridio: opt_in
            .distribution_group_status
            .then(|| Arc::new(MeridioWatch::new(client.clone(), ctx.clone()))),
        gateway: Arc::new(GatewayWatch::new(client.clone(), ctx.clone())),
        undecodable: Arc::clone(&ctx.undecodable),
    }
}

impl Stores {
    /// Waits for the first full list of every kind (before that, nothing is computed),
    /// Gateway API's included when it is served.
    pub async fn ready(&self) -> Result<()> {
        self.services.wait_until_ready().await?;
        self.pools.wait_until_ready().await?;
        self.namespaces.wait_until_ready().await?;
        self.policies.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        if let Some(gw) = self.gateway.stores(true).await? {
            gw.ready().await?;
        }
        Ok(())
    }
}

/// Counters of one pass, for logs and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PassReport {
    /// Services of ours seen.
    pub services: usize,
    /// Service status writes.
    pub service_writes: usize,
    /// Pool status writes.
    pub pool_writes: usize,
    /// ServicePolicy status writes.
    pub policy_writes: usize,
    /// ServicePolicy status writes the API server refused (logged; the pass goes on, so one
    /// policy cannot hold up the others or the address assignments).
    pub policy_write_errors: usize,
    /// What the Gateway half wrote (GatewayClass, Gateway, route status).
    pub gateway: GatewayWrites,
    /// What the DistributionGroup status writer wrote ([`OptIn::distribution_group_status`]).
    pub meridio: MeridioWrites,
    /// Whether the pass stopped because leadership could not be confirmed.
    pub not_leader: bool,
}

impl PassReport {
    fn wrote_or_failed(&self) -> bool {
        let g = &self.gateway;
        self.service_writes + self.pool_writes + self.policy_writes > 0
            || self.policy_write_errors > 0
            || g.classes + g.gateways + g.routes + g.errors + g.conflicts > 0
            || self.meridio.groups + self.meridio.errors > 0
    }
}

/// A whole replica, as the binary runs it: the watches, the Lease election and [`serve`], until
/// `shutdown` resolves; then it stops writing (the pass in progress is dropped, so no write
/// starts after this point) and releases the Lease (within [`RELEASE_TIMEOUT`]) so another
/// replica leads at once instead of a whole Lease duration later. Tests run
/// replicas with this too (with `std::future::pending()` and a task abort for a crash), so the
/// start-up order they prove is the one deployed.
pub async fn replica(
    client: Client,
    leader: crate::leader::LeaderConfig,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    replica_with(client, leader, settings, OptIn::default(), shutdown).await
}

/// [`replica`] with the writers `opt_in` asks for (as the binary runs it).
pub async fn replica_with(
    client: Client,
    leader: crate::leader::LeaderConfig,
    settings: Settings,
    opt_in: OptIn,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let ctx = WatchContext {
        changed: Arc::new(Notify::new()),
        metrics: Arc::clone(&settings.metrics),
        undecodable: Arc::new(UndecodableObjects::new()),
    };
    let stores = watch_all_with(&client, &ctx, opt_in);
    let changed = ctx.changed;
    let mut leadership = Leadership::start(client.clone(), leader).await?;
    info!(identity = %settings.identity, "waiting for leadership");
    tokio::select! {
        r = serve(client.clone(), &mut leadership, &stores, &changed, &settings) => r?,
        _ = shutdown => {}
    }
    settings.metrics.set_leader(false);
    info!("stopped writing; releasing the Lease");
    match tokio::time::timeout(RELEASE_TIMEOUT, leadership.step_down()).await {
        Ok(r) => r.map(|()| info!("Lease released")),
        Err(_) => anyhow::bail!(
            "releasing the Lease took over {RELEASE_TIMEOUT:?}; it runs out on its own"
        ),
    }
}

/// The longest a stopping replica waits for its Lease release (an unreachable API server must
/// not hold up the exit past the pod's termination grace period).
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a replica does for its whole life: wait for leadership, lead until it cannot confirm it
/// (or a write fails), pause briefly, and start over. Never returns unless the election ends.
pub async fn serve(
    client: Client,
    leadership: &mut Leadership,
    stores: &Stores,
    changed: &Notify,
    settings: &Settings,
) -> Result<()> {
    loop {
        leadership.wait_until_leader().await?;
        info!(identity = %settings.identity, "leading");
        if let Err(e) = lead(client.clone(), leadership, stores, changed, settings).await {
            warn!("{e:#}");
        }
        // Not confirmed (renewal late, or lost) or a failed write: look again shortly.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs passes until leadership cannot be confirmed (returns Ok) or a write fails.
pub async fn lead(
    client: Client,
    leadership: &Leadership,
    stores: &Stores,
    changed: &Notify,
    settings: &Settings,
) -> Result<()> {
    stores.ready().await?;
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(settings.identity.clone()),
        },
    );
    settings.metrics.set_leader(true);
    let result = lead_passes(&client, leadership, stores, changed, settings, &recorder).await;
    settings.metrics.set_leader(false);
    result
}

async fn lead_passes(
    client: &Client,
    leadership: &Leadership,
    stores: &Stores,
    changed: &Notify,
    settings: &Settings,
    recorder: &Recorder,
) -> Result<()> {
    loop {
        let report = pass(client, leadership, stores, recorder, settings).await?;
        if report.not_leader {
            info!("leadership not confirmed; stopping writes");
            return Ok(());
        }
        stores.undecodable.record(recorder).await;
        if report.wrote_or_failed() {
            info!(?report, "pass");
        }
        let _ = tokio::time::timeout(settings.resync, changed.notified()).await;
        tokio::time::sleep(settings.debounce).await;
    }
}

/// One pass: snapshot, allocate, judge every ServicePolicy, write what differs (re-confirming
/// leadership as it goes).
pub async fn pass(
    client: &Client,
    leadership: &Leadership,
    stores: &Stores,
    recorder: &Recorder,
    settings: &Settings,
) -> Result<PassReport> {
    let mut report = PassReport::default();
    let mut confirmed_at = Instant::now();
    if !leadership.confirm().await? {
        report.not_leader = true;
        return Ok(report);
    }
    let ns_labels: BTreeMap<String, BTreeMap<String, String>> = stores
        .namespaces
        .state()
        .iter()
        .map(|n| (n.name_any(), n.labels().clone()))
        .collect();
    let all_services = stores.services.state();
    let mut ours: Vec<Arc<Service>> = Vec::new();
    let mut views: Vec<ClaimView> = Vec::new();
    let mut bad: BTreeMap<String, String> = BTreeMap::new();
    for svc in &all_services {
        if !observe::is_ours(svc, &settings.class) {
            continue;
        }
        let empty = BTreeMap::new();
        let labels = ns_labels
            .get(svc.namespace().as_deref().unwrap_or_default())
            .unwrap_or(&empty);
        match observe::service_view(svc, labels) {
            Ok(v) => views.push(v),
            Err(e) => {
                bad.insert(key(svc), e);
            }
        }
        ours.push(Arc::clone(svc));
    }
    report.services = ours.len();
    // The Gateway half: its Gateways claim addresses in the same allocation as the Services,
    // so whichever kind holds an address in its status keeps it (import first).
    let gateway = match stores.gateway.stores(false).await? {
        Some(gw) => {
            gw.ready().await?;
            let mut snap = gw.snapshot(
                &settings.class.gateway_controller,
                &stores.namespaces.state(),
                &all_services,
                &ns_labels,
            );
            snap.installed_version = stores.gateway.installed_version().await;
            views.extend(snap.claims.iter().cloned());
            Some(snap)
        }
        None => None,
    };
    let pools = stores.pools.state();
    let pool_views: Vec<ipam::PoolView> = pools.iter().map(|p| observe::pool_view(p)).collect();
    let outcome: Outcome = ipam::allocate(&pool_views, &views);
    let reports = stores.nodes.state();
    let l2 = l2_reach::l2_mode(&reports);
    let speaker = l2_reach::speaker(&reports);

    for svc in &ours {
        if confirmed_at.elapsed() > Duration::from_millis(500) {
            if !leadership.confirm().await? {
                report.not_leader = true;
                return Ok(report);
            }
            confirmed_at = Instant::now();
        }
        let k = key(svc);
        let claim = ClaimKey::service(
            svc.namespace().as_deref().unwrap_or_default(),
            &svc.name_any(),
        );
        let assignment = match (outcome.claims.get(&claim), bad.get(&k)) {
            (Some(a), _) => a.clone(),
            (None, Some(_)) | (None, None) => ipam::Assignment::default(),
        };
        let previous = observe::our_condition(svc);
        let mut condition = observe::desired_condition(
            &assignment,
            svc.metadata.generation,
            previous,
            Timestamp::now(),
        );
        if let Some(e) = bad.get(&k) {
            condition.status = "False".into();
            condition.reason = "InvalidRequest".into();
            condition.message = e.clone();
        }
        let l2_previous = l2_reach::current(svc);
        let l2_condition = l2_reach::condition(
            svc,
            l2 && !assignment.addresses.is_empty(),
            speaker.as_ref(),
            l2_previous,
            Timestamp::now(),
        );
        let l2_current = match (&l2_condition, l2_previous) {
            (None, None) => true,
            (Some(w), Some(c)) => observe::same_condition(w, c),
            _ => false,
        };
        if l2_current && observe::status_is_current(svc, &assignment, &condition) {
            continue;
        }
        let api: Api<Service> = Api::namespaced(
            client.clone(),
            svc.namespace().as_deref().unwrap_or_default(),
        );
        api.patch_status(
            &svc.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(observe::service_status_patch(
                &assignment,
                &condition,
                l2_condition.as_ref(),
            )),
        )
        .await
        .with_context(|| format!("writing the status of Service {k}"))?;
        report.service_writes += 1;
        if let Some(c) = &l2_condition
            && c.status == "False"
            && l2_previous.map(|p| &p.reason) != Some(&c.reason)
        {
            let ev = Event {
                type_: EventType::Warning,
                reason: c.reason.clone(),
                note: Some(c.message.clone()),
                action: "AnnounceL2".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&ev, &svc.object_ref(&())).await {
                warn!(service = %k, error = %e, "could not record an Event");
            }
        }
        if condition.status == "False" && previous.map(|c| &c.reason) != Some(&condition.reason) {
            let ev = Event {
                type_: EventType::Warning,
                reason: condition.reason.clone(),
                note: Some(condition.message.clone()),
                action: "AssignAddress".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&ev, &svc.object_ref(&())).await {
                warn!(service = %k, error = %e, "could not record an Event");
            }
        }
    }
    // Services that stopped being ours (class or type changed) give their address back: an
    // empty apply by our field manager removes every field only we owned.
    for svc in &all_services {
        if observe::is_ours(svc, &settings.class) || !managed_by_us(svc) {
            continue;
        }
        if observe::current_ingress(svc).is_empty() && observe::our_condition(svc).is_none() {
            continue;
        }
        let api: Api<Service> = Api::namespaced(
            client.clone(),
            svc.namespace().as_deref().unwrap_or_default(),
        );
        api.patch_status(
            &svc.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service", "status": {}})),
        )
        .await
        .with_context(|| format!("releasing the address of Service {}", key(svc)))?;
        report.service_writes += 1;
    }
    report.pool_writes = write_pool_status(client, &pools, &outcome).await?;

    // ServicePolicy status: which policy the nodes apply to which Service, per target.
    let policies = stores.policies.state();
    let index = ServiceIndex::new(all_services.iter().map(Arc::as_ref));
    let now = Timestamp::now();
    for policy in &policies {
        let want = policy_status::desired_status(
            policy,
            policies.iter().map(Arc::as_ref),
            &index,
            &settings.class,
            now,
        );
        if policy_status::status_is_current(policy, &want) {
            continue;
        }
        if confirmed_at.elapsed() > Duration::from_millis(500) {
            if !leadership.confirm().await? {
                report.not_leader = true;
                return Ok(report);
            }
            confirmed_at = Instant::now();
        }
        let k = policy_status::policy_key(policy);
        let api: Api<ServicePolicy> = Api::namespaced(
            client.clone(),
            policy.namespace().as_deref().unwrap_or_default(),
        );
        let body = json!({
            "apiVersion": format!("{}/{}", rivora_k8s_api::GROUP, rivora_k8s_api::VERSION),
            "kind": "ServicePolicy",
            "status": want,
        });
        match api
            .patch_status(
                &policy.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
        {
            Ok(_) => report.policy_writes += 1,
            // Deleted since the snapshot: nothing to report on.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                warn!(policy = %k, error = %e, "could not write the ServicePolicy status");
                report.policy_write_errors += 1;
            }
        }
    }
    if let Some(snap) = &gateway {
        report.gateway =
            gateway_run::write(client, leadership, &mut confirmed_at, snap, &outcome).await?;
        settings.metrics.record_gateway_writes(&report.gateway);
        if report.gateway.not_leader {
            report.not_leader = true;
            return Ok(report);
        }
    }
    if let Some(meridio) = &stores.meridio {
        report.meridio = meridio.pass(client, leadership, &mut confirmed_at).await?;
        if report.meridio.not_leader {
            report.not_leader = true;
            return Ok(report);
        }
    }
    settings.metrics.record_pass(
        &outcome,
        StatusWrites {
            service: report.service_writes,
            pool: report.pool_writes,
            policy: report.policy_writes,
        },
    );
    Ok(report)
}

fn key(svc: &Service) -> String {
    format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any())
}

fn managed_by_us(svc: &Service) -> bool {
    svc.metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|m| m.manager.as_deref() == Some(FIELD_MANAGER))
}

async fn write_pool_status(
    client: &Client,
    pools: &[Arc<AddressPool>],
    outcome: &Outcome,
) -> Result<usize> {
    use crate::ipam::blocks::Family;
    let mut writes = 0;
    let api: Api<AddressPool> = Api::all(client.clone());
    for pool in pools {
        let name = pool.name_any();
        let Some(r) = outcome.pools.get(&name) else {
            continue;
        };
        let cond = |c: crate::pool_status::PoolCondition| {
            let previous = pool
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|p| p.type_ == c.type_));
            let status = if c.on { "True" } else { "False" };
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: c.type_.into(),
                status: status.into(),
                reason: c.reason,
                message: c.message,
                observed_generation: pool.metadata.generation,
                last_transition_time: previous
                    .filter(|p| p.status == status)
                    .map(|p| p.last_transition_time.clone())
                    .unwrap_or(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        Timestamp::now(),
                    )),
            }
        };
        let status = rivora_k8s_api::AddressPoolStatus {
            conditions: crate::pool_status::conditions(r).map(cond).into(),
            ipv4: crate::pool_status::counts(r, Family::V4),
            ipv6: crate::pool_status::counts(r, Family::V6),
        };
        if pool_status_is_current(pool.status.as_ref(), &status) {
            continue;
        }
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": format!("{}/{}", rivora_k8s_api::GROUP, rivora_k8s_api::VERSION),
                "kind": "AddressPool",
                "status": status,
            })),
        )
        .await
        .with_context(|| format!("writing the status of AddressPool {name}"))?;
        writes += 1;
    }
    Ok(writes)
}

fn pool_status_is_current(
    current: Option<&rivora_k8s_api::AddressPoolStatus>,
    want: &rivora_k8s_api::AddressPoolStatus,
) -> bool {
    let Some(cur) = current else { return false };
    let same_conditions = cur.conditions.len() == want.conditions.len()
        && want.conditions.iter().all(|w| {
            cur.conditions.iter().any(|c| {
                c.type_ == w.type_
                    && c.status == w.status
                    && c.reason == w.reason
                    && c.message == w.message
                    && c.observed_generation == w.observed_generation
            })
        });
    same_conditions && cur.ipv4 == want.ipv4 && cur.ipv6 == want.ipv6
}
