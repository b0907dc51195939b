//! Gateway API status against the real API server serving the upstream v1.6 standard CRDs:
//! rivora-controller's leader writes GatewayClass, Gateway, listener and TCPRoute status as the
//! Gateway API conformance suite (v1.6.1 `conformance/tests/tcproute-*.go`) asserts it, leaves
//! another controller's route parent entry alone, and writes nothing again after a leader
//! restart.
//!
//! No rivorad runs here: the test plays the nodes by writing RivoraNode objects and their
//! status itself (what rivorad reports per Gateway and listener), to show that `Programmed`
//! turns True only once a Ready node reports the Gateway's current generation programmed.
//!
//! The controller runs as the ServiceAccount bound to deploy/rbac only. One controller per test
//! binary (it watches every namespace), so this is one test in phases; every object has a
//! unique name. Needs root and `scripts/build-testdeps.sh`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rivora_controller::metrics::Metrics;
use rivora_controller::observe::ANNOTATION_POOL;
use rivora_k8s_api::class::GATEWAY_CONTROLLER_NAME;
use rivora_k8s_api::{AddressPool, RivoraNode, RouteParentStatus, TcpRoute, UdpRoute};
use rivora_kube_testbed::{GatewayChannel, TestBed, ensure_namespace, unique_name};
use serde_json::{Value, json};

mod common;
use common::controller_identity;

/// How long any one status may take to appear.
const LIMIT: Duration = Duration::from_secs(20);
const OTHER_CONTROLLER: &str = "example.com/other-gateway-controller";

async fn start_controller(
    client: Client,
    lease_ns: &str,
    identity: &str,
    metrics: Arc<Metrics>,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    common::spawn_replica(client, lease_ns, identity, metrics)
}

/// Polls `check` every 100 ms until it returns Ok; panics after [`LIMIT`] with the last Err.
async fn wait<T>(what: &str, mut check: impl AsyncFnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    let mut last = String::from("nothing read yet");
    while start.elapsed() < LIMIT {
        match check().await {
            Ok(v) => {
                println!("{what}: after {:?}", start.elapsed());
                return v;
            }
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within {LIMIT:?}; last seen: {last}");
}

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// `(status, reason)` of condition `type_`, if it is for `generation`.
fn cond(
    cs: &[Condition],
    type_: &str,
    generation: Option<i64>,
) -> Result<(String, String), String> {
    let c = cs
        .iter()
        .find(|c| c.type_ == type_)
        .ok_or_else(|| format!("no {type_} in {cs:?}"))?;
    if c.observed_generation != generation {
        return Err(format!(
            "{type_} is for generation {:?}, not {generation:?}: {c:?}",
            c.observed_generation
        ));
    }
    Ok((c.status.clone(), c.reason.clone()))
}

fn expect_cond(
    cs: &[Condition],
    type_: &str,
    generation: Option<i64>,
    want: (&str, &str),
) -> Result<(), String> {
    let got = cond(cs, type_, generation)?;
    if (got.0.as_str(), got.1.as_str()) == want {
        Ok(())
    } else {
        Err(format!("{type_} is {got:?}, want {want:?}: {cs:?}"))
    }
}

struct Bed {
    admin: Client,
    ns: String,
    class: String,
}

impl Bed {
    fn gateways(&self) -> Api<Gateway> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    fn routes(&self, ns: &str) -> Api<TcpRoute> {
        Api::namespaced(self.admin.clone(), ns)
    }

    async fn gateway(&self, name: &str, listeners: Value, extra: Value) -> String {
        let name = unique_name(name);
        let mut spec = json!({"gatewayClassName": self.class, "listeners": listeners});
        spec.as_object_mut()
            .unwrap()
            .extend(extra["spec"].as_object().cloned().unwrap_or_default());
        let gw: Gateway = obj(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "annotations": extra["annotations"]},
            "spec": spec,
        }));
        self.gateways()
            .create(&PostParams::default(), &gw)
            .await
            .unwrap();
        name
    }

    async fn route(&self, ns: &str, name: &str, parents: Value, backends: Value) -> String {
        let name = unique_name(name);
        let r: TcpRoute = obj(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TCPRoute",
            "metadata": {"name": name},
            "spec": {"parentRefs": parents, "rules": [{"backendRefs": backends}]},
        }));
        self.routes(ns)
            .create(&PostParams::default(), &r)
            .await
            .unwrap();
        name
    }

    /// Waits until Gateway `name`'s status, for its current generation, passes `check`.
    async fn gateway_until(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&Gateway) -> Result<(), String>,
    ) -> Gateway {
        let api = self.gateways();
        wait(&format!("Gateway {name}: {what}"), async || {
            let gw = api.get(name).await.map_err(|e| e.to_string())?;
            check(&gw)?;
            Ok(gw)
        })
        .await
    }

    /// Waits until our parent entry of route `ns/name` for Gateway `gw` (and `section`) has
    /// Accepted and ResolvedRefs as given, for the route's generation.
    async fn route_until(
        &self,
        ns: &str,
        name: &str,
        gw: &str,
        section: Option<&str>,
        accepted: (&str, &str),
        resolved: (&str, &str),
    ) -> TcpRoute {
        let api = self.routes(ns);
        wait(
            &format!("TCPRoute {ns}/{name} -> {gw}/{section:?}: Accepted={accepted:?} ResolvedRefs={resolved:?}"),
            async || {
                let r = api.get(name).await.map_err(|e| e.to_string())?;
                let p = our_parent(&r, gw, section)?;
                let g = r.metadata.generation;
                expect_cond(&p.conditions, "Accepted", g, accepted)?;
                expect_cond(&p.conditions, "ResolvedRefs", g, resolved)?;
                Ok(r)
            },
        )
        .await
    }
}

fn our_parent<'a>(
    r: &'a TcpRoute,
    gw: &str,
    section: Option<&str>,
) -> Result<&'a RouteParentStatus, String> {
    let parents = r
        .status
        .as_ref()
        .map(|s| &s.parents[..])
        .unwrap_or_default();
    parents
        .iter()
        .find(|p| {
            p.controller_name == GATEWAY_CONTROLLER_NAME
                && p.parent_ref.name == gw
                && p.parent_ref.section_name.as_deref() == section
        })
        .ok_or_else(|| format!("no parent entry of ours for {gw}/{section:?}: {parents:?}"))
        .and_then(|p| {
            // As the conformance suite's parentsForRouteMatch: group and kind are written out.
            let gk = (p.parent_ref.group.as_deref(), p.parent_ref.kind.as_deref());
            if gk == (Some("gateway.networking.k8s.io"), Some("Gateway")) {
                Ok(p)
            } else {
                Err(format!(
                    "parentRef group/kind {gk:?}, want gateway.networking.k8s.io/Gateway"
                ))
            }
        })
}

fn gw_conditions(gw: &Gateway) -> &[Condition] {
    gw.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

fn listener<'a>(
    gw: &'a Gateway,
    name: &str,
) -> Result<&'a gateway_api::gateways::GatewayStatusListeners, String> {
    gw.status
        .as_ref()
        .and_then(|s| s.listeners.as_ref())
        .and_then(|ls| ls.iter().find(|l| l.name == name))
        .ok_or_else(|| format!("no listener {name} in {:?}", gw.status))
}

/// Listener `name` has `attached` routes, supports exactly `kinds`, and its conditions are as
/// given (for the Gateway's generation).
fn expect_listener(
    gw: &Gateway,
    name: &str,
    attached: i32,
    kinds: &[&str],
    conds: &[(&str, (&str, &str))],
) -> Result<(), String> {
    let l = listener(gw, name)?;
    if l.attached_routes != attached {
        return Err(format!(
            "{name}: attachedRoutes {} not {attached}",
            l.attached_routes
        ));
    }
    let got: Vec<(String, String)> = l
        .supported_kinds
        .iter()
        .flatten()
        .map(|k| (k.group.clone().unwrap_or_default(), k.kind.clone()))
        .collect();
    let want: Vec<(String, String)> = kinds
        .iter()
        .map(|k| ("gateway.networking.k8s.io".to_string(), k.to_string()))
        .collect();
    if got != want {
        return Err(format!("{name}: supportedKinds {got:?}"));
    }
    for (t, w) in conds {
        expect_cond(&l.conditions, t, gw.metadata.generation, *w)?;
    }
    Ok(())
}

fn addresses(gw: &Gateway) -> Vec<String> {
    gw.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(|a| {
            a.iter()
                .map(|a| {
                    assert_eq!(a.r#type.as_deref(), Some("IPAddress"));
                    a.value.clone()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `name value` of one line of the metrics text (0 when the series does not exist yet).
fn metric(metrics: &Metrics, name: &str) -> u64 {
    metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

fn ready_condition() -> Value {
    json!([{"type": "Ready", "status": "True", "reason": "Applied", "message": "test node",
            "lastTransitionTime": Timestamp::now().to_string()}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_writes_gateway_api_status_as_conformance_asserts_it() {
    // The controller's warnings (refused writes, watch errors) belong in the test output.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_test_writer()
        .try_init();
    let bed = TestBed::shared();
    bed.install_crds(&rivora_k8s_api::crds()).await.unwrap();
    bed.install_gateway_api(GatewayChannel::Standard)
        .await
        .unwrap();
    let admin = bed.admin_client().await.unwrap();
    let lease_ns = unique_name("gwctl");
    let ns = unique_name("gw");
    let other = unique_name("gw-backends");
    let far = unique_name("gw-far");
    for n in [&lease_ns, &ns, &other, &far] {
        ensure_namespace(&admin, n).await.unwrap();
    }
    let identity = controller_identity(bed, &admin, &lease_ns).await;

    // Pools: a general one, and a one-address pool only Gateways that ask for it use.
    let pools: Api<AddressPool> = Api::all(admin.clone());
    let pp = PostParams::default();
    let main_pool = unique_name("gw-main");
    let tiny_pool = unique_name("gw-tiny");
    for (name, addresses, auto) in [
        (&main_pool, "10.77.0.0/27", true),
        (&tiny_pool, "10.77.1.1/32", false),
    ] {
        let p: AddressPool = obj(json!({
            "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": name},
            "spec": {"addresses": [addresses], "autoAssign": auto},
        }));
        pools.create(&pp, &p).await.unwrap();
    }
    let class = unique_name("rivora");
    let classes: Api<GatewayClass> = Api::all(admin.clone());
    classes
        .create(
            &pp,
            &obj(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                "metadata": {"name": class},
                "spec": {"controllerName": GATEWAY_CONTROLLER_NAME},
            })),
        )
        .await
        .unwrap();
    // Backends: Services the routes name (ClusterIP is enough: a backendRef is any Service),
    // serving port 80 for TCP and UDP (a backendRef's port is the one of its route's protocol).
    for (n, name) in [(&ns, "echo"), (&ns, "echo2"), (&other, "far-echo")] {
        let svc: Service = obj(json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"ports": [
                {"name": "tcp", "port": 80, "protocol": "TCP"},
                {"name": "udp", "port": 80, "protocol": "UDP"}]},
        }));
        Api::<Service>::namespaced(admin.clone(), n)
            .create(&pp, &svc)
            .await
            .unwrap();
    }

    let metrics = Arc::new(Metrics::new());
    let controller = start_controller(
        identity.clone(),
        &lease_ns,
        "gw-replica-1",
        Arc::clone(&metrics),
    )
    .await;
    let b = Bed {
        admin: admin.clone(),
        ns: ns.clone(),
        class: class.clone(),
    };

    // Phase 1: the GatewayClass is Accepted for its generation, says the installed CRDs
    // (v1.6.3, read from their bundle-version through the controller's RBAC) are supported, and
    // publishes its features, as the conformance suite reads them.
    wait("GatewayClass Accepted", async || {
        let c = classes.get(&class).await.map_err(|e| e.to_string())?;
        let cs = c
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        expect_cond(cs, "Accepted", c.metadata.generation, ("True", "Accepted"))?;
        expect_cond(
            cs,
            "SupportedVersion",
            c.metadata.generation,
            ("True", "SupportedVersion"),
        )?;
        let features: Vec<String> = c
            .status
            .as_ref()
            .and_then(|s| s.supported_features.as_ref())
            .into_iter()
            .flatten()
            .map(|f| f.name.clone())
            .collect();
        let want = rivora_controller::gateway_status::SUPPORTED_FEATURES;
        if features != want {
            return Err(format!("supportedFeatures {features:?}, want {want:?}"));
        }
        Ok(())
    })
    .await;

    // Phase 2 (TCPRouteInvalidNonTCPListener): a TCPRoute naming an HTTP listener by
    // sectionName is NotAllowedByListeners; that listener is Accepted with HTTPRoute as its
    // kind and carries nothing, while the TCP listener of the same Gateway works. Its other route
    // names a Service that does not exist (TCPRouteInvalidBackendRefNonexistent).
    let mixed = b
        .gateway(
            "mixed",
            json!([{"name": "tcp", "port": 8080, "protocol": "TCP"},
                   {"name": "web", "port": 80, "protocol": "HTTP",
                    "allowedRoutes": {"kinds": [{"kind": "HTTPRoute"}]}}]),
            json!({}),
        )
        .await;
    let r_http = b
        .route(
            &ns,
            "to-http",
            json!([{"name": mixed, "sectionName": "web"}]),
            json!([{"name": "echo", "port": 80}]),
        )
        .await;
    let r_missing = b
        .route(
            &ns,
            "missing-backend",
            json!([{"name": mixed, "sectionName": "tcp"}]),
            json!([{"name": "not-there", "port": 80}]),
        )
        .await;
    b.route_until(
        &ns,
        &r_http,
        &mixed,
        Some("web"),
        ("False", "NotAllowedByListeners"),
        ("True", "ResolvedRefs"),
    )
    .await;
    b.route_until(
        &ns,
        &r_missing,
        &mixed,
        Some("tcp"),
        ("True", "Accepted"),
        ("False", "BackendNotFound"),
    )
    .await;
    let mixed_gw = b
        .gateway_until(&mixed, "addressed, Pending without nodes", |gw| {
            let g = gw.metadata.generation;
            expect_cond(gw_conditions(gw), "Accepted", g, ("True", "Accepted"))?;
            expect_cond(gw_conditions(gw), "Programmed", g, ("False", "Pending"))?;
            expect_listener(
                gw,
                "web",
                0,
                &["HTTPRoute"],
                &[
                    ("Accepted", ("True", "Accepted")),
                    ("Programmed", ("False", "Pending")),
                ],
            )?;
            expect_listener(
                gw,
                "tcp",
                1,
                &["TCPRoute"],
                &[
                    ("Accepted", ("True", "Accepted")),
                    ("ResolvedRefs", ("True", "ResolvedRefs")),
                    ("Conflicted", ("False", "NoConflicts")),
                    ("Programmed", ("False", "Pending")),
                ],
            )?;
            if addresses(gw).len() == 1 {
                Ok(())
            } else {
                Err(format!("addresses {:?}", addresses(gw)))
            }
        })
        .await;
    let mixed_addr = addresses(&mixed_gw)[0].clone();
    assert!(mixed_addr.starts_with("10.77.0."), "{mixed_addr}");

    // Phase 3 (TCPRouteMultipleRoutesAttachment): two routes on one listener are both
    // Accepted and the listener counts 2; the older carries the traffic (what the node is
    // asked to program, checked in phase 7).
    let multi = b
        .gateway(
            "multi",
            json!([{"name": "tcp", "port": 9000, "protocol": "TCP"}]),
            json!({}),
        )
        .await;
    let r_old = b
        .route(
            &ns,
            "older",
            json!([{"name": multi, "sectionName": "tcp"}]),
            json!([{"name": "echo", "port": 80}]),
        )
        .await;
    let old_ts = b
        .routes(&ns)
        .get(&r_old)
        .await
        .unwrap()
        .metadata
        .creation_timestamp
        .unwrap()
        .0;
    wait("the clock passes the older route's second", async || {
        if Timestamp::now().as_second() > old_ts.as_second() {
            Ok(())
        } else {
            Err(old_ts.to_string())
        }
    })
    .await;
    let r_new = b
        .route(
            &ns,
            "newer",
            json!([{"name": multi, "sectionName": "tcp"}]),
            json!([{"name": "echo2", "port": 80}]),
        )
        .await;
    for r in [&r_old, &r_new] {
        b.route_until(
            &ns,
            r,
            &multi,
            Some("tcp"),
            ("True", "Accepted"),
            ("True", "ResolvedRefs"),
        )
        .await;
    }
    b.gateway_until(&multi, "2 routes on listener tcp", |gw| {
        expect_listener(
            gw,
            "tcp",
            2,
            &["TCPRoute"],
            &[("Accepted", ("True", "Accepted"))],
        )
    })
    .await;

    // Phase 4 (TCPRouteParentRefAttachAll, TCPRouteParentRefPortAndSectionName): no
    // sectionName/port attaches to every TCP listener; by port, by sectionName, by both; a
    // sectionName and port that match no one listener is NoMatchingParent; a route from a
    // namespace the listener does not admit is NotAllowedByListeners.
    let attach = b
        .gateway(
            "attach",
            json!([{"name": "a", "port": 7001, "protocol": "TCP"},
                   {"name": "b", "port": 7002, "protocol": "TCP"},
                   {"name": "c", "port": 7003, "protocol": "TCP"},
                   {"name": "u", "port": 7004, "protocol": "UDP"}]),
            json!({}),
        )
        .await;
    let echo = json!([{"name": "echo", "port": 80}]);
    let r_all = b
        .route(&ns, "all", json!([{"name": attach}]), echo.clone())
        .await;
    let r_port = b
        .route(
            &ns,
            "by-port",
            json!([{"name": attach, "port": 7002}]),
            echo.clone(),
        )
        .await;
    let r_name = b
        .route(
            &ns,
            "by-name",
            json!([{"name": attach, "sectionName": "c"}]),
            echo.clone(),
        )
        .await;
    let r_both = b
        .route(
            &ns,
            "by-both",
            json!([{"name": attach, "sectionName": "b", "port": 7002}]),
            echo.clone(),
        )
        .await;
    let r_mismatch = b
        .route(
            &ns,
            "mismatch",
            json!([{"name": attach, "sectionName": "a", "port": 7002}]),
            echo.clone(),
        )
        .await;
    let r_far = b
        .route(
            &far,
            "from-far",
            json!([{"name": attach, "namespace": ns, "sectionName": "a"}]),
            json!([{"name": "echo", "namespace": ns, "port": 80}]),
        )
        .await;
    for (r, section) in [
        (&r_all, None),
        (&r_port, None),
        (&r_name, Some("c")),
        (&r_both, Some("b")),
    ] {
        b.route_until(
            &ns,
            r,
            &attach,
            section,
            ("True", "Accepted"),
            ("True", "ResolvedRefs"),
        )
        .await;
    }
    b.route_until(
        &ns,
        &r_mismatch,
        &attach,
        Some("a"),
        ("False", "NoMatchingParent"),
        ("True", "ResolvedRefs"),
    )
    .await;
    // (its backend is in the Gateway's namespace without a grant, so RefNotPermitted too)
    let far_route = b
        .route_until(
            &far,
            &r_far,
            &attach,
            Some("a"),
            ("False", "NotAllowedByListeners"),
            ("False", "RefNotPermitted"),
        )
        .await;
    assert_eq!(
        our_parent(&far_route, &attach, Some("a"))
            .unwrap()
            .parent_ref
            .namespace
            .as_deref(),
        Some(ns.as_str()),
        "the parentRef is echoed as the route wrote it"
    );
    // A UDPRoute with no sectionName reaches the UDP listener only.
    let udp: Api<UdpRoute> = Api::namespaced(admin.clone(), &ns);
    let r_udp = unique_name("udp-all");
    udp.create(
        &pp,
        &obj(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "UDPRoute",
            "metadata": {"name": r_udp},
            "spec": {"parentRefs": [{"name": attach}],
                     "rules": [{"backendRefs": [{"name": "echo", "port": 80}]}]},
        })),
    )
    .await
    .unwrap();
    wait("UDPRoute Accepted", async || {
        let r = udp.get(&r_udp).await.map_err(|e| e.to_string())?;
        let parents = r
            .status
            .as_ref()
            .map(|s| &s.parents[..])
            .unwrap_or_default();
        let p = parents
            .iter()
            .find(|p| p.controller_name == GATEWAY_CONTROLLER_NAME)
            .ok_or_else(|| format!("{parents:?}"))?;
        expect_cond(
            &p.conditions,
            "Accepted",
            r.metadata.generation,
            ("True", "Accepted"),
        )?;
        expect_cond(
            &p.conditions,
            "ResolvedRefs",
            r.metadata.generation,
            ("True", "ResolvedRefs"),
        )
    })
    .await;
    b.gateway_until(&attach, "attachedRoutes a=1 b=3 c=2 u=1", |gw| {
        let ok = [("Accepted", ("True", "Accepted"))];
        expect_listener(gw, "a", 1, &["TCPRoute"], &ok)?;
        expect_listener(gw, "b", 3, &["TCPRoute"], &ok)?;
        expect_listener(gw, "c", 2, &["TCPRoute"], &ok)?;
        expect_listener(gw, "u", 1, &["UDPRoute"], &ok)
    })
    .await;

    // Phase 5 (TCPRouteInvalidCrossNamespaceBackendRef, TCPRouteReferenceGrant): a backend in
    // another namespace is RefNotPermitted, allowed by a ReferenceGrant there, and refused
    // again once the grant is deleted.
    let cross = b
        .gateway(
            "cross",
            json!([{"name": "tcp", "port": 8443, "protocol": "TCP"}]),
            json!({}),
        )
        .await;
    let r_cross = b
        .route(
            &ns,
            "cross",
            json!([{"name": cross, "sectionName": "tcp"}]),
            json!([{"name": "far-echo", "namespace": other, "port": 80}]),
        )
        .await;
    b.route_until(
        &ns,
        &r_cross,
        &cross,
        Some("tcp"),
        ("True", "Accepted"),
        ("False", "RefNotPermitted"),
    )
    .await;
    let grants: Api<ReferenceGrant> = Api::namespaced(admin.clone(), &other);
    let grant = unique_name("grant");
    grants
        .create(
            &pp,
            &obj(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
                "metadata": {"name": grant},
                "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "TCPRoute", "namespace": ns}],
                         "to": [{"group": "", "kind": "Service"}]},
            })),
        )
        .await
        .unwrap();
    b.route_until(
        &ns,
        &r_cross,
        &cross,
        Some("tcp"),
        ("True", "Accepted"),
        ("True", "ResolvedRefs"),
    )
    .await;
    grants
        .delete(&grant, &DeleteParams::default())
        .await
        .unwrap();
    b.route_until(
        &ns,
        &r_cross,
        &cross,
        Some("tcp"),
        ("True", "Accepted"),
        ("False", "RefNotPermitted"),
    )
    .await;

    // Phase 6: addresses. The one-address pool goes to the first Gateway asking for it; the
    // second is AddressNotAssigned. An address in no pool is AddressNotUsable.
    let tiny_ann = json!({"annotations": {ANNOTATION_POOL: tiny_pool}});
    let tiny1 = b
        .gateway(
            "tiny1",
            json!([{"name": "tcp", "port": 80, "protocol": "TCP"}]),
            tiny_ann.clone(),
        )
        .await;
    b.gateway_until(&tiny1, "the tiny pool's address", |gw| {
        if addresses(gw) == ["10.77.1.1"] {
            Ok(())
        } else {
            Err(format!(
                "{:?} {}",
                gw.status,
                serde_json::to_string(&gw.metadata.managed_fields).unwrap()
            ))
        }
    })
    .await;
    let tiny2 = b
        .gateway(
            "tiny2",
            json!([{"name": "tcp", "port": 80, "protocol": "TCP"}]),
            tiny_ann,
        )
        .await;
    let t2 = b
        .gateway_until(&tiny2, "Programmed=False/AddressNotAssigned", |gw| {
            expect_cond(
                gw_conditions(gw),
                "Accepted",
                gw.metadata.generation,
                ("True", "Accepted"),
            )?;
            expect_cond(
                gw_conditions(gw),
                "Programmed",
                gw.metadata.generation,
                ("False", "AddressNotAssigned"),
            )?;
            if addresses(gw).is_empty() {
                Ok(())
            } else {
                Err(format!("{:?}", addresses(gw)))
            }
        })
        .await;
    println!(
        "tiny2: {:?}",
        cond(gw_conditions(&t2), "Programmed", t2.metadata.generation)
    );
    let outside = b
        .gateway(
            "outside",
            json!([{"name": "tcp", "port": 80, "protocol": "TCP"}]),
            json!({"spec": {"addresses": [{"type": "IPAddress", "value": "192.0.2.77"}]}}),
        )
        .await;
    let o = b
        .gateway_until(&outside, "Programmed=False/AddressNotUsable", |gw| {
            expect_cond(
                gw_conditions(gw),
                "Programmed",
                gw.metadata.generation,
                ("False", "AddressNotUsable"),
            )
        })
        .await;
    let msg = &gw_conditions(&o)
        .iter()
        .find(|c| c.type_ == "Programmed")
        .unwrap()
        .message;
    assert!(msg.contains("192.0.2.77"), "{msg}");
    // A Gateway moved to another controller's class loses the status Rivora wrote.
    b.gateways()
        .patch(
            &outside,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gatewayClassName": "someone-elses"}})),
        )
        .await
        .unwrap();
    b.gateway_until(
        &outside,
        "nothing of ours left once it is another class's",
        |gw| {
            let ours: Vec<&Condition> = gw_conditions(gw)
                .iter()
                .filter(|c| c.observed_generation.is_some())
                .collect();
            // Our manager may stay listed, owning nothing but `f:status` itself.
            let managed = gw.metadata.managed_fields.iter().flatten().any(|m| {
                m.manager.as_deref() == Some("rivora-controller")
                    && m.fields_v1.as_ref().is_some_and(|f| {
                        f.0.get("f:status")
                            .and_then(|s| s.as_object())
                            .is_some_and(|o| o.keys().any(|k| k != "."))
                    })
            });
            if ours.is_empty() && !managed && addresses(gw).is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{:?} {}",
                    gw.status,
                    serde_json::to_string(&gw.metadata.managed_fields).unwrap()
                ))
            }
        },
    )
    .await;

    // Phase 7: Programmed follows the nodes. A Ready node reporting an older generation
    // leaves it Pending; the current generation with the active route's listener programmed
    // (the older route on `multi`) makes it True. The test writes the RivoraNode itself.
    let multi_gw = b.gateways().get(&multi).await.unwrap();
    let multi_addr = addresses(&multi_gw)[0].clone();
    let generation = |gw: &Gateway| gw.metadata.generation.unwrap();
    let nodes: Api<RivoraNode> = Api::all(admin.clone());
    let node = unique_name("node");
    nodes
        .create(
            &pp,
            &obj(
                json!({"apiVersion": "rivora.dev/v1alpha1", "kind": "RivoraNode",
                                 "metadata": {"name": node}, "spec": {}}),
            ),
        )
        .await
        .unwrap();
    let write_report = async |reports: Value| {
        nodes
            .patch_status(
                &node,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": ready_condition(),
                                                "gatewayController": GATEWAY_CONTROLLER_NAME,
                                                "gateways": reports}})),
            )
            .await
            .unwrap();
    };
    let report = |gw: &str, generation: i64, listeners: Value| json!({"namespace": ns, "name": gw, "generation": generation, "listeners": listeners});
    let listener_report = |name: &str, route: &str, vip: String| {
        json!({"name": name, "route": format!("{ns}/{route}"), "vips": [vip],
               "readyBackends": 1, "programmed": true})
    };
    write_report(json!([report(
        &mixed,
        generation(&mixed_gw) - 1,
        json!([listener_report(
            "tcp",
            &r_missing,
            format!("{mixed_addr}:8080/TCP")
        )])
    ),]))
    .await;
    b.gateway_until(&mixed, "Pending while the node lags a generation", |gw| {
        expect_cond(
            gw_conditions(gw),
            "Programmed",
            gw.metadata.generation,
            ("False", "Pending"),
        )?;
        let m = &gw_conditions(gw)
            .iter()
            .find(|c| c.type_ == "Programmed")
            .unwrap()
            .message;
        if m.contains(&node) && m.contains("generation") {
            Ok(())
        } else {
            Err(m.clone())
        }
    })
    .await;
    // The node forwards the newer route on `multi`: not what the listener should carry.
    write_report(json!([
        report(
            &mixed,
            generation(&mixed_gw),
            json!([listener_report(
                "tcp",
                &r_missing,
                format!("{mixed_addr}:8080/TCP")
            )])
        ),
        report(
            &multi,
            generation(&multi_gw),
            json!([listener_report(
                "tcp",
                &r_new,
                format!("{multi_addr}:9000/TCP")
            )])
        ),
    ]))
    .await;
    b.gateway_until(
        &mixed,
        "Programmed=True once the node has the generation",
        |gw| {
            expect_cond(
                gw_conditions(gw),
                "Programmed",
                gw.metadata.generation,
                ("True", "Programmed"),
            )?;
            expect_listener(
                gw,
                "tcp",
                1,
                &["TCPRoute"],
                &[("Programmed", ("True", "Programmed"))],
            )?;
            expect_listener(
                gw,
                "web",
                0,
                &["HTTPRoute"],
                &[
                    ("Accepted", ("True", "Accepted")),
                    ("Programmed", ("True", "Programmed")),
                ],
            )
        },
    )
    .await;
    b.gateway_until(
        &multi,
        "Pending while the node forwards the newer route",
        |gw| {
            expect_cond(
                gw_conditions(gw),
                "Programmed",
                gw.metadata.generation,
                ("False", "Pending"),
            )?;
            let m = &gw_conditions(gw)
                .iter()
                .find(|c| c.type_ == "Programmed")
                .unwrap()
                .message;
            if m.contains(&format!("for route {ns}/{r_new}, not {ns}/{r_old}")) {
                Ok(())
            } else {
                Err(m.clone())
            }
        },
    )
    .await;
    write_report(json!([
        report(
            &mixed,
            generation(&mixed_gw),
            json!([listener_report(
                "tcp",
                &r_missing,
                format!("{mixed_addr}:8080/TCP")
            )])
        ),
        report(
            &multi,
            generation(&multi_gw),
            json!([listener_report(
                "tcp",
                &r_old,
                format!("{multi_addr}:9000/TCP")
            )])
        ),
    ]))
    .await;
    b.gateway_until(&multi, "Programmed=True with the older route", |gw| {
        expect_cond(
            gw_conditions(gw),
            "Programmed",
            gw.metadata.generation,
            ("True", "Programmed"),
        )
    })
    .await;

    // Phase 8: another controller's parent entry on a route of ours is left alone, also when
    // ours changes. It is written as that controller would: the whole list, ours kept.
    let routes = b.routes(&ns);
    let r = routes.get(&r_missing).await.unwrap();
    let mut parents = r.status.clone().unwrap().parents;
    let theirs: RouteParentStatus = obj(json!({
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "their-gateway"},
        "controllerName": OTHER_CONTROLLER,
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "theirs",
                        "observedGeneration": r.metadata.generation,
                        "lastTransitionTime": "2026-01-02T03:04:05Z"}],
    }));
    parents.insert(0, theirs.clone());
    routes
        .patch_status(
            &r_missing,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"parents": parents}})),
        )
        .await
        .unwrap();
    // Now the missing backend appears: our entry turns ResolvedRefs=True, theirs stays.
    Api::<Service>::namespaced(admin.clone(), &ns)
        .create(
            &pp,
            &obj(json!({"apiVersion": "v1", "kind": "Service",
                                 "metadata": {"name": "not-there"},
                                 "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}})),
        )
        .await
        .unwrap();
    let r = b
        .route_until(
            &ns,
            &r_missing,
            &mixed,
            Some("tcp"),
            ("True", "Accepted"),
            ("True", "ResolvedRefs"),
        )
        .await;
    let kept: Vec<&RouteParentStatus> = r
        .status
        .as_ref()
        .unwrap()
        .parents
        .iter()
        .filter(|p| p.controller_name == OTHER_CONTROLLER)
        .collect();
    assert_eq!(kept, [&theirs], "the other controller's entry changed");

    // Phase 9: a new leader writes nothing: every status is current. Stop this controller,
    // start another replica, and compare resourceVersions after it made two passes.
    let gw_names = [&mixed, &multi, &attach, &cross, &tiny1, &tiny2, &outside];
    let route_names: Vec<(&String, &String)> = [
        &r_http,
        &r_missing,
        &r_old,
        &r_new,
        &r_all,
        &r_port,
        &r_name,
        &r_both,
        &r_mismatch,
        &r_cross,
    ]
    .into_iter()
    .map(|r| (&ns, r))
    .chain([(&far, &r_far)])
    .collect();
    let versions = async || -> BTreeMap<String, String> {
        let mut v = BTreeMap::new();
        let u = udp.get(&r_udp).await.unwrap();
        v.insert(format!("UDPRoute {r_udp}"), u.resource_version().unwrap());
        for g in gw_names {
            let gw = b.gateways().get(g).await.unwrap();
            v.insert(format!("Gateway {g}"), gw.resource_version().unwrap());
        }
        for (n, r) in &route_names {
            let rt = b.routes(n).get(r).await.unwrap();
            v.insert(format!("TCPRoute {n}/{r}"), rt.resource_version().unwrap());
        }
        let c = classes.get(&class).await.unwrap();
        v.insert(
            format!("GatewayClass {class}"),
            c.resource_version().unwrap(),
        );
        v
    };
    // Settle: nothing written by the first leader for two passes in a row.
    let writes = |m: &Metrics| {
        ["gatewayclass", "gateway", "route"]
            .iter()
            .map(|k| {
                metric(
                    m,
                    &format!("rivora_controller_status_writes_total{{kind=\"{k}\"}}"),
                )
            })
            .sum::<u64>()
    };
    let passes = |m: &Metrics| metric(m, "rivora_controller_passes_total");
    let (w0, p0) = (writes(&metrics), passes(&metrics));
    wait("the first leader settles", async || {
        let (w, p) = (writes(&metrics), passes(&metrics));
        if w == w0 && p >= p0 + 2 {
            Ok(())
        } else {
            Err(format!("writes {w0}->{w}, passes {p0}->{p}"))
        }
    })
    .await;
    controller.abort();
    let _ = controller.await;
    let before = versions().await;
    let metrics2 = Arc::new(Metrics::new());
    let controller = start_controller(
        identity.clone(),
        &lease_ns,
        "gw-replica-2",
        Arc::clone(&metrics2),
    )
    .await;
    // The new replica waits for the old Lease to expire (4 s), then makes its passes; poke an
    // unrelated object so passes keep coming.
    let start = Instant::now();
    let deadline = start + LIMIT;
    let mut touch = 0;
    while passes(&metrics2) < 3 {
        assert!(
            Instant::now() < deadline,
            "the new leader made {} passes in {LIMIT:?}",
            passes(&metrics2)
        );
        touch += 1;
        Api::<Service>::namespaced(admin.clone(), &ns)
            .patch(
                "echo",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"touch": touch.to_string()}}})),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = versions().await;
    println!(
        "new leader: {} passes after {:?}, {} Gateway API status writes, {} objects unchanged",
        passes(&metrics2),
        start.elapsed(),
        writes(&metrics2),
        after.len()
    );
    assert_eq!(after, before, "a new leader rewrote a status");
    assert_eq!(writes(&metrics2), 0);
    assert_eq!(
        metric(
            &metrics2,
            "rivora_controller_gateway_status_write_failures_total{reason=\"error\"}"
        ),
        0
    );

    // Phase 10: the controller's identity may write status, not a Gateway's spec.
    let as_controller: Api<Gateway> = Api::namespaced(identity.clone(), &ns);
    match as_controller
        .patch(
            &multi,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"listeners": []}})),
        )
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 403 => {
            println!("forbidden as expected: patching a Gateway's spec")
        }
        other => panic!("the controller patched a Gateway's spec: {other:?}"),
    }
    controller.abort();
    let _ = controller.await;

    // Clean up what is cluster-scoped (namespaced objects go with the test bed).
    nodes.delete(&node, &DeleteParams::default()).await.unwrap();
    classes
        .delete(&class, &DeleteParams::default())
        .await
        .unwrap();
    for p in [&main_pool, &tiny_pool] {
        pools.delete(p, &DeleteParams::default()).await.unwrap();
    }
}
