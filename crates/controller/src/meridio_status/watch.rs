//! The edge of [`crate::meridio_status`]: watch (all namespaces) GatewayClasses, Gateways,
//! DistributionGroups, L34Routes, LoadBalancerEndpointSlices and the EndpointSlices labelled
//! with a group, and, in the leader's pass, write each claimed group's conditions that differ.
//!
//! Why the watches start only once the kinds are served (`distributiongroups`, `l34routes`,
//! `loadbalancerendpointslices` in `meridio-2.nordix.org/v1alpha1`, `gatewayclasses` and
//! `gateways` in `gateway.networking.k8s.io/v1`): a watch of a kind that is not served never
//! lists. Until then the controller says so in its log, looks again every [`RECHECK`], and
//! the rest of its work goes on.
//!
//! Why a pass never waits for these watches' first list: they are an addition, and a watch
//! that cannot list (a ClusterRole without the Meridio-2 rules, say) must not hold back the
//! Service addresses. The pass skips the groups until every watch has listed; a task notifies
//! the loop when they have, so the first writes do not wait for the resync.
//!
//! Writes: the status subresource by server-side apply with the controller's field manager
//! (`rivora-controller`, forced), holding the conditions only. Each write first re-reads the
//! group, so a stale cache neither rewrites a status that is already right nor moves a
//! `lastTransitionTime`; a group whose generation moved since the snapshot waits for the next
//! pass. A refused write is logged and counted, and the pass goes on.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::FutureExt;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client};
use rivora_k8s_api::meridio::{
    DISTRIBUTION_GROUP_LABEL, DistributionGroup, GROUP, L34Route, LoadBalancerEndpointSlice,
    VERSION,
};
use rivora_k8s_source::meridio::MeridioSnapshot;
use tracing::{info, warn};

use super::{apply_body, claimed_groups, status_update};
use crate::gateway_run::GATEWAY_API_VERSION;
use crate::leader::Leadership;
use crate::observe::FIELD_MANAGER;
use crate::run::{WatchContext, spawn_watch, spawn_watch_with};

/// The resources that must be served before the watches start, by API group version.
pub const REQUIRED_RESOURCES: [(&str, &[&str]); 2] = [
    (
        "meridio-2.nordix.org/v1alpha1",
        &[
            "distributiongroups",
            "l34routes",
            "loadbalancerendpointslices",
        ],
    ),
    (GATEWAY_API_VERSION, &["gatewayclasses", "gateways"]),
];
/// How often a controller without those kinds looks again.
pub const RECHECK: Duration = Duration::from_secs(30);
/// How long a leader writes before it confirms its Lease again (as the other halves do).
const CONFIRM_EVERY: Duration = Duration::from_millis(500);

/// The watches.
#[derive(Clone)]
pub struct MeridioStores {
    classes: Store<GatewayClass>,
    gateways: Store<Gateway>,
    groups: Store<DistributionGroup>,
    routes: Store<L34Route>,
    lb_slices: Store<LoadBalancerEndpointSlice>,
    core_slices: Store<EndpointSlice>,
}

impl MeridioStores {
    fn start(client: &Client, ctx: &WatchContext) -> MeridioStores {
        let stores = MeridioStores {
            classes: spawn_watch(Api::all(client.clone()), ctx),
            gateways: spawn_watch(Api::all(client.clone()), ctx),
            groups: spawn_watch(Api::all(client.clone()), ctx),
            routes: spawn_watch(Api::all(client.clone()), ctx),
            lb_slices: spawn_watch(Api::all(client.clone()), ctx),
            // The older endpoint form only: EndpointSlices labelled with a group.
            core_slices: spawn_watch_with(
                Api::all(client.clone()),
                watcher::Config::default().labels(DISTRIBUTION_GROUP_LABEL),
                ctx,
            ),
        };
        let (s, changed) = (stores.clone(), Arc::clone(&ctx.changed));
        tokio::spawn(async move {
            if s.wait_until_ready().await.is_ok() {
                info!("Meridio-2's objects listed: writing DistributionGroup status");
                changed.notify_one();
            }
        });
        stores
    }

    async fn wait_until_ready(&self) -> Result<()> {
        self.classes.wait_until_ready().await?;
        self.gateways.wait_until_ready().await?;
        self.groups.wait_until_ready().await?;
        self.routes.wait_until_ready().await?;
        self.lb_slices.wait_until_ready().await?;
        self.core_slices.wait_until_ready().await?;
        Ok(())
    }

    /// Whether every watch has had its first full list.
    pub fn is_ready(&self) -> bool {
        matches!(self.wait_until_ready().now_or_never(), Some(Ok(())))
    }

    /// What the stores hold now: the GatewayClasses, and the snapshot of the rest.
    pub fn snapshot(&self) -> (Vec<Arc<GatewayClass>>, MeridioSnapshot) {
        (
            self.classes.state(),
            MeridioSnapshot {
                gateways: self.gateways.state(),
                distribution_groups: self.groups.state(),
                routes: self.routes.state(),
                lb_slices: self.lb_slices.state(),
                core_slices: self.core_slices.state(),
            },
        )
    }
}

/// Starts [`MeridioStores`] once the kinds are served (see the module doc).
pub struct MeridioWatch {
    client: Client,
    ctx: WatchContext,
    stores: OnceLock<MeridioStores>,
    checked: Mutex<Option<Instant>>,
}

/// What one pass wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MeridioWrites {
    /// DistributionGroup status writes.
    pub groups: usize,
    /// Writes the API server refused (logged; the pass went on).
    pub errors: usize,
    /// The pass stopped because leadership could not be confirmed.
    pub not_leader: bool,
}

impl MeridioWatch {
    /// Nothing is watched until a pass finds the kinds served.
    pub fn new(client: Client, ctx: WatchContext) -> MeridioWatch {
        MeridioWatch {
            client,
            ctx,
            stores: OnceLock::new(),
            checked: Mutex::new(None),
        }
    }

    /// The stores, started if the kinds are served now; None when they are not (or discovery
    /// failed: logged, and asked again after [`RECHECK`]). Asks at most every [`RECHECK`].
    pub async fn stores(&self) -> Option<&MeridioStores> {
        if let Some(s) = self.stores.get() {
            return Some(s);
        }
        {
            let mut checked = self.checked.lock().unwrap_or_else(|p| p.into_inner());
            if checked.is_some_and(|t| t.elapsed() < RECHECK) {
                return None;
            }
            *checked = Some(Instant::now());
        }
        let mut missing: Vec<String> = Vec::new();
        for (version, resources) in REQUIRED_RESOURCES {
            match self.client.list_api_group_resources(version).await {
                Ok(list) => missing.extend(
                    resources
                        .iter()
                        .filter(|r| !list.resources.iter().any(|x| x.name == **r))
                        .map(|r| format!("{version}/{r}")),
                ),
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    missing.extend(resources.iter().map(|r| format!("{version}/{r}")));
                }
                Err(e) => {
                    warn!(error = %e, "discovering {version}: no DistributionGroup status is written (looking again in {RECHECK:?})");
                    return None;
                }
            }
        }
        if !missing.is_empty() {
            warn!(
                missing = missing.join(","),
                "--distribution-group-status: Meridio-2's kinds or Gateway API's are not \
                 served: no DistributionGroup status is written (looking again every {RECHECK:?})"
            );
            return None;
        }
        info!("Meridio-2's kinds are served: watching them for DistributionGroup status");
        Some(
            self.stores
                .get_or_init(|| MeridioStores::start(&self.client, &self.ctx)),
        )
    }

    /// The leader's DistributionGroup part of a pass: every group a Meridio-2 Gateway claims
    /// gets its conditions written when they differ (nothing before every watch has listed).
    pub async fn pass(
        &self,
        client: &Client,
        leadership: &Leadership,
        confirmed_at: &mut Instant,
    ) -> Result<MeridioWrites> {
        let Some(stores) = self.stores().await else {
            return Ok(MeridioWrites::default());
        };
        if !stores.is_ready() {
            return Ok(MeridioWrites::default());
        }
        write(client, leadership, confirmed_at, stores).await
    }
}

/// Confirms the Lease when the last confirmation is older than [`CONFIRM_EVERY`].
async fn still_leader(leadership: &Leadership, confirmed_at: &mut Instant) -> Result<bool> {
    if confirmed_at.elapsed() <= CONFIRM_EVERY {
        return Ok(true);
    }
    let ok = leadership.confirm().await?;
    *confirmed_at = Instant::now();
    Ok(ok)
}

/// Writes the conditions of every claimed group whose status differs, confirming leadership
/// as it goes.
pub async fn write(
    client: &Client,
    leadership: &Leadership,
    confirmed_at: &mut Instant,
    stores: &MeridioStores,
) -> Result<MeridioWrites> {
    let mut w = MeridioWrites::default();
    let (classes, snap) = stores.snapshot();
    let claimed = claimed_groups(&classes, &snap);
    let now = Timestamp::now();
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    for dg in &snap.distribution_groups {
        let ns = dg.metadata.namespace.clone().unwrap_or_default();
        let name = dg.metadata.name.clone().unwrap_or_default();
        let Some(c) = claimed.get(&(ns.clone(), name.clone())) else {
            continue; // no Meridio-2 Gateway claims it: left as it is
        };
        let desired = &c.report.conditions;
        if status_update(dg, desired, now).is_none() {
            continue;
        }
        if !still_leader(leadership, confirmed_at).await? {
            w.not_leader = true;
            return Ok(w);
        }
        let api: Api<DistributionGroup> = Api::namespaced(client.clone(), &ns);
        let result = async {
            let fresh = api.get(&name).await?;
            if fresh.metadata.generation != dg.metadata.generation {
                return Ok(false); // changed since the snapshot: the next pass sees it
            }
            let Some(conditions) = status_update(&fresh, desired, now) else {
                return Ok(false);
            };
            api.patch_status(&name, &apply, &Patch::Apply(apply_body(&conditions)))
                .await?;
            Ok::<_, kube::Error>(true)
        }
        .await;
        match result {
            Ok(true) => w.groups += 1,
            Ok(false) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {} // deleted since
            Err(e) => {
                warn!(
                    group = %format!("{ns}/{name}"),
                    gateway = %c.gateway,
                    error = %e,
                    "could not write the DistributionGroup status ({GROUP}/{VERSION})"
                );
                w.errors += 1;
            }
        }
    }
    Ok(w)
}
