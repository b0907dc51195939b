//! The Gateway API half of the leader's pass: watch GatewayClasses, Gateways, TCPRoutes,
//! UDPRoutes, ReferenceGrants and RivoraNodes, evaluate them ([`rivora_gateway::evaluate()`]),
//! hand the Gateways of Rivora's accepted classes to the allocator with the Services, and write
//! the GatewayClass, Gateway and route status that differs ([`crate::gateway_status`]).
//!
//! Why the watches start only once the API server serves Gateway API v1 (`gatewayclasses`,
//! `gateways`, `referencegrants`, `tcproutes`, `udproutes` in `gateway.networking.k8s.io/v1`,
//! i.e. v1.6's standard channel): a watch of a kind that is not served never lists, and nothing
//! may be computed before every store has listed (the import-first rule of
//! [`crate::run`]), so a cluster without Gateway API would never get a Service address. Without
//! those kinds there can be no Gateway holding an address, so Services alone are safe; the check
//! is repeated at most every [`RECHECK`] and the watches start when the kinds appear (the pass
//! then waits for their first list, as at start).
//!
//! Writes: GatewayClass and Gateway status by server-side apply (field manager
//! `rivora-controller`, forced), route `status.parents` by a JSON merge patch of the whole list
//! carrying `metadata.resourceVersion` (the list is atomic, so an apply would take other
//! controllers' entries too; a 409 means another writer got in first, and the next pass tries
//! again). What differs is decided from the caches; each such write then re-reads the object, so
//! a stale cache neither rewrites a status that is already right nor moves a lastTransitionTime.
//! Writes go in batches of [`WRITES_IN_FLIGHT`] at once, leadership confirmed between batches. A
//! failed write is logged and counted and the pass goes on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::future::join_all;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use rivora_gateway::{Evaluation, ObjKey, RouteKind, Snapshot, evaluate};
use rivora_k8s_api::gateway_view;
use rivora_k8s_api::{ParentReference, RivoraNode, RouteParentStatus, TcpRoute, UdpRoute};
use serde_json::json;
use tracing::{info, warn};

use crate::gateway_families;
use crate::gateway_status::{self, Addressing};
use crate::ipam::{ClaimKey, ClaimView, Outcome};
use crate::leader::Leadership;
use crate::observe::{self, FIELD_MANAGER};
use crate::run::{WatchContext, spawn_watch};

/// The Gateway API version Rivora reads and writes.
pub const GATEWAY_API_VERSION: &str = "gateway.networking.k8s.io/v1";
/// The resources of [`GATEWAY_API_VERSION`] that must be served before the watches start.
pub const REQUIRED_RESOURCES: [&str; 5] = [
    "gatewayclasses",
    "gateways",
    "referencegrants",
    "tcproutes",
    "udproutes",
];
/// How often a controller without Gateway API looks again.
pub const RECHECK: Duration = Duration::from_secs(30);
/// How long a leader writes before it confirms its Lease again (as the Service half does).
const CONFIRM_EVERY: Duration = Duration::from_millis(500);

/// The CRD whose [`BUNDLE_VERSION_ANNOTATION`] says which Gateway API release is installed.
pub const VERSION_CRD: &str = "gatewayclasses.gateway.networking.k8s.io";
/// Gateway API's annotation on its CRDs naming their release (`v1.6.3`).
pub const BUNDLE_VERSION_ANNOTATION: &str = "gateway.networking.k8s.io/bundle-version";

/// The installed Gateway API release as [`VERSION_CRD`] names it, or why it is not known.
pub type InstalledVersion = std::result::Result<String, String>;

/// The Gateway API watches (and the RivoraNode one, whose reports only Gateways need).
#[derive(Clone)]
pub struct GatewayStores {
    classes: Store<GatewayClass>,
    gateways: Store<Gateway>,
    tcp_routes: Store<TcpRoute>,
    udp_routes: Store<UdpRoute>,
    grants: Store<ReferenceGrant>,
    nodes: Store<RivoraNode>,
}

impl GatewayStores {
    fn start(client: &Client, ctx: &WatchContext) -> GatewayStores {
        GatewayStores {
            classes: spawn_watch(Api::all(client.clone()), ctx),
            gateways: spawn_watch(Api::all(client.clone()), ctx),
            tcp_routes: spawn_watch(Api::all(client.clone()), ctx),
            udp_routes: spawn_watch(Api::all(client.clone()), ctx),
            grants: spawn_watch(Api::all(client.clone()), ctx),
            nodes: spawn_watch(Api::all(client.clone()), ctx),
        }
    }

    /// Waits for the first full list of every kind.
    pub async fn ready(&self) -> Result<()> {
        self.classes.wait_until_ready().await?;
        self.gateways.wait_until_ready().await?;
        self.tcp_routes.wait_until_ready().await?;
        self.udp_routes.wait_until_ready().await?;
        self.grants.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        Ok(())
    }
}

/// Starts [`GatewayStores`] once Gateway API v1 is served (see the module doc).
pub struct GatewayWatch {
    client: Client,
    ctx: WatchContext,
    stores: OnceLock<GatewayStores>,
    checked: Mutex<Option<Instant>>,
    /// The installed release and when it was read (read again after [`RECHECK`]).
    version: Mutex<Option<(Instant, InstalledVersion)>>,
}

impl GatewayWatch {
    /// Nothing is watched until [`GatewayWatch::stores`] finds the kinds served.
    pub fn new(client: Client, ctx: WatchContext) -> GatewayWatch {
        GatewayWatch {
            client,
            ctx,
            stores: OnceLock::new(),
            checked: Mutex::new(None),
            version: Mutex::new(None),
        }
    }

    /// The installed Gateway API release: [`BUNDLE_VERSION_ANNOTATION`] of [`VERSION_CRD`],
    /// read (metadata only) at most every [`RECHECK`], so an upgrade of the CRDs shows in the
    /// GatewayClass's `SupportedVersion` within that. A failed read is an `Err` saying why (it
    /// is logged when it first happens or changes), never a guess.
    pub async fn installed_version(&self) -> InstalledVersion {
        if let Some((at, v)) = self
            .version
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            && at.elapsed() < RECHECK
        {
            return v.clone();
        }
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let read = match crds.get_metadata(VERSION_CRD).await {
            Ok(m) => m
                .metadata
                .annotations
                .and_then(|a| a.get(BUNDLE_VERSION_ANNOTATION).cloned())
                .ok_or_else(|| {
                    format!("CRD {VERSION_CRD} has no {BUNDLE_VERSION_ANNOTATION} annotation")
                }),
            Err(e) => Err(format!("reading CRD {VERSION_CRD}: {e}")),
        };
        let mut cached = self.version.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = &read
            && cached.as_ref().map(|(_, v)| v) != Some(&read)
        {
            warn!("the installed Gateway API release is not known: {e}");
        }
        *cached = Some((Instant::now(), read.clone()));
        read
    }

    /// The stores, started if Gateway API v1 is served now; None when it is not. Asks the API
    /// server at most every [`RECHECK`] unless `now` (the first check of a leader, which must
    /// not allocate before it knows). A discovery error other than "not served" is an error:
    /// guessing "no Gateways" could hand a Gateway's address to a Service.
    pub async fn stores(&self, now: bool) -> Result<Option<&GatewayStores>> {
        if let Some(s) = self.stores.get() {
            return Ok(Some(s));
        }
        {
            let mut checked = self.checked.lock().unwrap_or_else(|p| p.into_inner());
            if !now && checked.is_some_and(|t| t.elapsed() < RECHECK) {
                return Ok(None);
            }
            *checked = Some(Instant::now());
        }
        let missing: Vec<&str> = match self
            .client
            .list_api_group_resources(GATEWAY_API_VERSION)
            .await
        {
            Ok(list) => REQUIRED_RESOURCES
                .into_iter()
                .filter(|r| !list.resources.iter().any(|x| x.name == *r))
                .collect(),
            Err(kube::Error::Api(e)) if e.code == 404 => REQUIRED_RESOURCES.to_vec(),
            Err(e) => {
                return Err(e).with_context(|| format!("discovering {GATEWAY_API_VERSION}"));
            }
        };
        if !missing.is_empty() {
            warn!(
                missing = missing.join(","),
                "Gateway API {GATEWAY_API_VERSION} (v1.6 standard channel) is not served: \
                 no Gateway status is written (looking again every {RECHECK:?})"
            );
            return Ok(None);
        }
        info!("Gateway API {GATEWAY_API_VERSION} is served: watching Gateways and routes");
        Ok(Some(self.stores.get_or_init(|| {
            GatewayStores::start(&self.client, &self.ctx)
        })))
    }
}

/// One pass's view of the Gateway side: the objects, their evaluation, and the Gateways'
/// address claims.
pub struct GatewaySnapshot {
    classes: Vec<Arc<GatewayClass>>,
    gateways: Vec<Arc<Gateway>>,
    tcp_routes: Vec<Arc<TcpRoute>>,
    udp_routes: Vec<Arc<UdpRoute>>,
    nodes: Vec<gateway_status::NodeView>,
    /// The controllerName of Rivora's GatewayClasses (`--gateway-controller-name`).
    controller_name: String,
    /// The evaluation.
    pub eval: Evaluation,
    /// The allocator's views of the Gateways of Rivora's accepted classes (allocated with the
    /// Services, in one call).
    pub claims: Vec<ClaimView>,
    refused: BTreeMap<ObjKey, String>,
    /// Every Service's families, for [`gateway_families`].
    families: BTreeMap<ObjKey, Vec<crate::ipam::blocks::Family>>,
    /// The installed Gateway API release (set by the caller from
    /// [`GatewayWatch::installed_version`]), for the GatewayClasses' `SupportedVersion`.
    pub installed_version: InstalledVersion,
}

fn obj_key<K: ResourceExt>(o: &K) -> ObjKey {
    ObjKey::new(o.namespace().unwrap_or_default(), o.name_any())
}

impl GatewayStores {
    /// Evaluates what the stores hold now. `services` are every Service (backendRefs may name
    /// any); `ns_labels` feed pool selectors.
    pub fn snapshot(
        &self,
        controller_name: &str,
        namespaces: &[Arc<Namespace>],
        services: &[Arc<Service>],
        ns_labels: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> GatewaySnapshot {
        let classes = self.classes.state();
        let gateways = self.gateways.state();
        let tcp_routes = self.tcp_routes.state();
        let udp_routes = self.udp_routes.state();
        let grants = self.grants.state();
        let class_views: Vec<_> = classes
            .iter()
            .map(|c| gateway_view::class_view(c))
            .collect();
        let gateway_views: Vec<_> = gateways
            .iter()
            .map(|g| gateway_view::gateway_view(g))
            .collect();
        let route_views: Vec<_> = tcp_routes
            .iter()
            .map(|r| gateway_view::tcp_route_view(r))
            .chain(udp_routes.iter().map(|r| gateway_view::udp_route_view(r)))
            .collect();
        let grant_views: Vec<_> = grants.iter().map(|g| gateway_view::grant_view(g)).collect();
        let ns_views: Vec<_> = namespaces
            .iter()
            .map(|n| gateway_view::namespace_view(n))
            .collect();
        let svc_views: Vec<_> = services
            .iter()
            .map(|s| gateway_view::service_view(s))
            .collect();
        let eval = evaluate(&Snapshot {
            controller_name,
            classes: &class_views,
            gateways: &gateway_views,
            routes: &route_views,
            grants: &grant_views,
            namespaces: &ns_views,
            services: &svc_views,
        });
        let mut claims = Vec::new();
        let mut refused = BTreeMap::new();
        let empty = BTreeMap::new();
        for gw in gateways
            .iter()
            .filter(|g| eval.gateways.contains_key(&obj_key(g.as_ref())))
        {
            let labels = ns_labels
                .get(gw.namespace().as_deref().unwrap_or_default())
                .unwrap_or(&empty);
            match observe::gateway_view(gw, labels) {
                Ok(v) => claims.push(v),
                Err(e) => {
                    refused.insert(obj_key(gw.as_ref()), e);
                }
            }
        }
        GatewaySnapshot {
            classes,
            gateways,
            tcp_routes,
            udp_routes,
            nodes: gateway_status::node_views(
                controller_name,
                self.nodes.state().iter().map(|n| n.as_ref()),
                Timestamp::now(),
            ),
            controller_name: controller_name.to_string(),
            eval,
            claims,
            refused,
            families: gateway_families::service_families(services),
            installed_version: Err("not read yet".into()),
        }
    }
}

/// What the Gateway half of one pass wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GatewayWrites {
    /// GatewayClass status writes.
    pub classes: usize,
    /// Gateway status writes.
    pub gateways: usize,
    /// Route `status.parents` writes.
    pub routes: usize,
    /// Writes the API server refused (logged; the pass went on).
    pub errors: usize,
    /// Route writes refused with 409 Conflict (someone wrote the route since it was read; the
    /// next pass writes again).
    pub conflicts: usize,
    /// The pass stopped because leadership could not be confirmed.
    pub not_leader: bool,
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

/// A TCPRoute or UDPRoute, for the one code path that writes both.
trait L4Route:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
{
    const KIND: RouteKind;
    fn parent_refs(&self) -> &[ParentReference];
    fn parents(&self) -> &[RouteParentStatus];
}

impl L4Route for TcpRoute {
    const KIND: RouteKind = RouteKind::Tcp;
    fn parent_refs(&self) -> &[ParentReference] {
        &self.spec.parent_refs
    }
    fn parents(&self) -> &[RouteParentStatus] {
        self.status
            .as_ref()
            .map(|s| &s.parents[..])
            .unwrap_or_default()
    }
}

impl L4Route for UdpRoute {
    const KIND: RouteKind = RouteKind::Udp;
    fn parent_refs(&self) -> &[ParentReference] {
        &self.spec.parent_refs
    }
    fn parents(&self) -> &[RouteParentStatus] {
        self.status
            .as_ref()
            .map(|s| &s.parents[..])
            .unwrap_or_default()
    }
}

/// Whether our field manager owns fields of the object's status (then it has status of ours to
/// take back). After the empty apply that takes them back the entry stays, owning only
/// `{"f:status": {}}`: that is nothing, or every pass would apply again.
fn has_our_status<K: ResourceExt>(o: &K) -> bool {
    o.meta().managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(FIELD_MANAGER)
            && m.subresource.as_deref() == Some("status")
            && m.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:status"))
                .and_then(|s| s.as_object())
                .is_some_and(|fields| fields.keys().any(|k| k != "."))
    })
}

fn apply_body(kind: &str, status: impl serde::Serialize) -> serde_json::Value {
    json!({"apiVersion": GATEWAY_API_VERSION, "kind": kind, "status": status})
}

/// Writes every GatewayClass, Gateway and route status that differs from what `snap` and
/// `outcome` say, confirming leadership as it goes.
pub async fn write(
    client: &Client,
    leadership: &Leadership,
    confirmed_at: &mut Instant,
    snap: &GatewaySnapshot,
    outcome: &Outcome,
) -> Result<GatewayWrites> {
    let mut w = GatewayWrites::default();
    let now = Timestamp::now();
    let apply = PatchParams::apply(FIELD_MANAGER).force();

    let classes: Api<GatewayClass> = Api::all(client.clone());
    for class in &snap.classes {
        let name = class.name_any();
        let Some(accepted) = snap.eval.classes.get(&name) else {
            continue;
        };
        if gateway_status::class_status_is_current(
            class,
            &gateway_status::class_status(class, accepted, &snap.installed_version, now),
        ) {
            continue;
        }
        if !still_leader(leadership, confirmed_at).await? {
            w.not_leader = true;
            return Ok(w);
        }
        let result = async {
            let fresh = classes.get(&name).await?;
            if fresh.metadata.generation != class.metadata.generation {
                return Ok(false); // changed since the snapshot: the next pass sees it
            }
            let want = gateway_status::class_status(&fresh, accepted, &snap.installed_version, now);
            if gateway_status::class_status_is_current(&fresh, &want) {
                return Ok(false);
            }
            classes
                .patch_status(
                    &name,
                    &apply,
                    &Patch::Apply(apply_body("GatewayClass", want)),
                )
                .await?;
            Ok::<_, kube::Error>(true)
        }
        .await;
        count(&mut w.classes, &mut w.errors, result, "GatewayClass", &name);
    }

    // What differs, decided from the cache (pure), then written in batches.
    let mut to_write: Vec<GatewayWrite<'_>> = Vec::new();
    for gw in &snap.gateways {
        let key = obj_key(gw.as_ref());
        let Some(eval) = snap.eval.gateways.get(&key) else {
            // Not (or no longer) of an accepted class of ours: take back what we wrote.
            if has_our_status(gw.as_ref()) {
                to_write.push(GatewayWrite::Clear(key));
            }
            continue;
        };
        let addressing = match snap.refused.get(&key) {
            Some(e) => Addressing::Refused(e.clone()),
            None => Addressing::Assigned(
                outcome
                    .claims
                    .get(&ClaimKey::gateway(&key.namespace, &key.name))
                    .cloned()
                    .unwrap_or_default(),
            ),
        };
        let mut want = gateway_status::gateway_status(gw, eval, &addressing, &snap.nodes, now);
        gateway_families::annotate(&mut want, eval, &snap.families, gw.status.as_ref(), now);
        if !gateway_status::gateway_status_is_current(gw, &want) {
            to_write.push(GatewayWrite::Status {
                key,
                gw,
                eval,
                addressing,
            });
        }
    }
    let apply = &apply;
    for batch in to_write.chunks(WRITES_IN_FLIGHT) {
        if !still_leader(leadership, confirmed_at).await? {
            w.not_leader = true;
            return Ok(w);
        }
        let results = join_all(batch.iter().map(|item| async move {
            let key = item.key();
            let api: Api<Gateway> = Api::namespaced(client.clone(), &key.namespace);
            let result = match item {
                GatewayWrite::Clear(_) => api
                    .patch_status(
                        &key.name,
                        apply,
                        &Patch::Apply(apply_body("Gateway", json!({}))),
                    )
                    .await
                    .map(|_| true),
                GatewayWrite::Status {
                    gw,
                    eval,
                    addressing,
                    ..
                } => {
                    async {
                        let fresh = api.get(&key.name).await?;
                        if fresh.metadata.generation != gw.metadata.generation {
                            return Ok(false);
                        }
                        let mut want = gateway_status::gateway_status(
                            &fresh,
                            eval,
                            addressing,
                            &snap.nodes,
                            now,
                        );
                        gateway_families::annotate(
                            &mut want,
                            eval,
                            &snap.families,
                            fresh.status.as_ref(),
                            now,
                        );
                        if gateway_status::gateway_status_is_current(&fresh, &want) {
                            return Ok(false);
                        }
                        api.patch_status(
                            &key.name,
                            apply,
                            &Patch::Apply(apply_body("Gateway", want)),
                        )
                        .await?;
                        Ok::<_, kube::Error>(true)
                    }
                    .await
                }
            };
            (key.to_string(), result)
        }))
        .await;
        for (name, result) in results {
            count(&mut w.gateways, &mut w.errors, result, "Gateway", &name);
        }
    }

    if write_routes(
        client,
        leadership,
        confirmed_at,
        &snap.tcp_routes,
        snap,
        now,
        &mut w,
    )
    .await?
        || write_routes(
            client,
            leadership,
            confirmed_at,
            &snap.udp_routes,
            snap,
            now,
            &mut w,
        )
        .await?
    {
        return Ok(w);
    }
    Ok(w)
}

/// How many status writes (each a GET and a patch) are in flight at once. One at a time, 1,000
/// Gateways with two routes each were all Accepted only 24.9 s after the last was created
/// (rivora-bench 5e, 2026-12-08): the writes, not the evaluation, set the pace. Leadership is
/// confirmed between batches.
const WRITES_IN_FLIGHT: usize = 16;

/// One Gateway status write decided from the cache.
enum GatewayWrite<'a> {
    /// Take back the status we wrote (the Gateway is no longer of a class of ours).
    Clear(ObjKey),
    /// Write the status its evaluation and addresses give, if the fresh object still differs.
    Status {
        key: ObjKey,
        gw: &'a Arc<Gateway>,
        eval: &'a rivora_gateway::GatewayEval,
        addressing: Addressing,
    },
}

impl GatewayWrite<'_> {
    fn key(&self) -> &ObjKey {
        match self {
            GatewayWrite::Clear(key) | GatewayWrite::Status { key, .. } => key,
        }
    }
}

/// Counts one write's result: a write, nothing to do, a 404 (deleted since), or an error.
fn count(
    writes: &mut usize,
    errors: &mut usize,
    result: Result<bool, kube::Error>,
    kind: &str,
    name: &str,
) {
    match result {
        Ok(true) => *writes += 1,
        Ok(false) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => {
            warn!(%kind, %name, error = %e, "could not write the status");
            *errors += 1;
        }
    }
}

/// Writes the parents of every route of `routes` whose entries of ours are not current, in
/// batches of [`WRITES_IN_FLIGHT`]; true when leadership was lost.
async fn write_routes<R: L4Route>(
    client: &Client,
    leadership: &Leadership,
    confirmed_at: &mut Instant,
    routes: &[Arc<R>],
    snap: &GatewaySnapshot,
    now: Timestamp,
    w: &mut GatewayWrites,
) -> Result<bool> {
    let ours = |key: &ObjKey| {
        snap.eval
            .routes
            .get(&(R::KIND, key.clone()))
            .map(Vec::as_slice)
    };
    let stale: Vec<&R> = routes
        .iter()
        .map(|r| r.as_ref())
        .filter(|route| {
            let key = obj_key(*route);
            gateway_status::route_parents(
                &snap.controller_name,
                &key.namespace,
                route.meta().generation.unwrap_or(0),
                route.parent_refs(),
                route.parents(),
                ours(&key),
                now,
            )
            .is_some()
        })
        .collect();
    for batch in stale.chunks(WRITES_IN_FLIGHT) {
        if !still_leader(leadership, confirmed_at).await? {
            w.not_leader = true;
            return Ok(true);
        }
        let results = join_all(batch.iter().map(|route| async move {
            let key = obj_key(*route);
            let result = write_route(client, *route, &key, ours(&key), snap, now).await;
            (key, result)
        }))
        .await;
        for (key, result) in results {
            match result {
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    info!(route = %key, kind = R::KIND.as_str(), "route changed while writing its parents; the next pass writes again");
                    w.conflicts += 1;
                }
                other => count(
                    &mut w.routes,
                    &mut w.errors,
                    other,
                    R::KIND.as_str(),
                    &key.to_string(),
                ),
            }
        }
    }
    Ok(false)
}

/// Writes one route's parents from a fresh read, if ours are still not current: true when
/// written.
async fn write_route<R: L4Route>(
    client: &Client,
    route: &R,
    key: &ObjKey,
    ours: Option<&[rivora_gateway::RouteParentEval]>,
    snap: &GatewaySnapshot,
    now: Timestamp,
) -> Result<bool, kube::Error> {
    let generation = route.meta().generation.unwrap_or(0);
    let api: Api<R> = Api::namespaced(client.clone(), &key.namespace);
    let fresh = api.get(&key.name).await?;
    if fresh.meta().generation != route.meta().generation {
        return Ok(false);
    }
    let Some(parents) = gateway_status::route_parents(
        &snap.controller_name,
        &key.namespace,
        generation,
        fresh.parent_refs(),
        fresh.parents(),
        ours,
        now,
    ) else {
        return Ok(false);
    };
    let body = json!({
        "metadata": {"resourceVersion": fresh.resource_version()},
        "status": {"parents": parents},
    });
    api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(body))
        .await?;
    Ok(true)
}
