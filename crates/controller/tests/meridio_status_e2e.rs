//! DistributionGroup status against the real API server serving Meridio-2's CRDs and Gateway
//! API's: with `--distribution-group-status` (`OptIn::distribution_group_status`) the leader
//! writes the `Ready` and `CapacityExceeded` conditions of every group a Meridio-2 Gateway
//! claims, as Meridio-2 defines them; without it, nothing.
//!
//! The test writes what Meridio-2's controllers and its users would: a GatewayClass with
//! Meridio-2's controllerName, Gateways, DistributionGroups, L34Routes and the targets of one
//! group in a LoadBalancerEndpointSlice. No rivorad runs: the status is the controller's alone.
//!
//! The controller runs as the ServiceAccount bound to deploy/rbac only. One controller at a time
//! per test binary (it watches every namespace), so this is one test in phases: first a replica
//! without the flag, which steps down, then one with it. Needs root and
//! `scripts/build-testdeps.sh`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rivora_controller::leader::LeaderConfig;
use rivora_controller::metrics::Metrics;
use rivora_controller::observe::{ClassConfig, FIELD_MANAGER};
use rivora_controller::run::{self, OptIn, Settings};
use rivora_k8s_api::meridio::{
    DistributionGroup, GATEWAY_CONTROLLER_NAME, L34Route, LoadBalancerEndpointSlice,
};
use rivora_kube_testbed::{GatewayChannel, TestBed, ensure_namespace, unique_name};
use serde_json::{Value, json};

mod common;
use common::controller_identity;

/// How long any one status may take to appear.
const LIMIT: Duration = Duration::from_secs(20);
const PASSES: &str = "rivora_controller_passes_total";

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
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

fn metric(m: &Metrics, name: &str) -> u64 {
    m.encode()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// Waits until the replica has finished `n` more passes while leading.
async fn passes(m: &Metrics, n: u64) {
    let before = metric(m, PASSES);
    wait(&format!("{n} more passes"), async || {
        let now = metric(m, PASSES);
        if now >= before + n {
            Ok(())
        } else {
            Err(format!("{} passes", now - before))
        }
    })
    .await;
}

fn replica(
    client: Client,
    lease_ns: &str,
    identity: &str,
    metrics: Arc<Metrics>,
    opt_in: OptIn,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    let leader = LeaderConfig {
        lease_name: "rivora-controller".into(),
        namespace: lease_ns.into(),
        identity: identity.into(),
        duration: Duration::from_secs(4),
        grace: Duration::from_secs(1),
    };
    let settings = Settings {
        class: ClassConfig::default(),
        identity: identity.into(),
        debounce: Duration::from_millis(20),
        resync: Duration::from_secs(5),
        metrics,
    };
    tokio::spawn(run::replica_with(
        client, leader, settings, opt_in, shutdown,
    ))
}

/// The conditions of a group, with the group.
fn conditions(dg: &DistributionGroup) -> &[Condition] {
    dg.status.as_ref().map_or(&[], |s| &s.conditions[..])
}

/// Condition `type_` of `dg` as (status, reason, message), checking its observedGeneration.
fn cond(dg: &DistributionGroup, type_: &str) -> Result<(String, String, String), String> {
    let cs = conditions(dg);
    let c = cs
        .iter()
        .find(|c| c.type_ == type_)
        .ok_or_else(|| format!("no {type_} in {cs:?}"))?;
    if c.observed_generation != dg.metadata.generation {
        return Err(format!(
            "{type_} is for generation {:?}, not {:?}: {c:?}",
            c.observed_generation, dg.metadata.generation
        ));
    }
    Ok((c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn time_of(dg: &DistributionGroup, type_: &str) -> Time {
    conditions(dg)
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_}"))
        .last_transition_time
        .clone()
}

struct Bed {
    ns: String,
    groups: Api<DistributionGroup>,
    routes: Api<L34Route>,
    slices: Api<LoadBalancerEndpointSlice>,
}

impl Bed {
    async fn group(&self, name: &str, max: i32) {
        let dg: DistributionGroup = obj(json!({
            "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "DistributionGroup",
            "metadata": {"name": name},
            "spec": {"type": "Maglev", "maglev": {"maxEndpoints": max}},
        }));
        self.groups
            .create(&PostParams::default(), &dg)
            .await
            .unwrap();
    }

    async fn route(&self, name: &str, gw: &str, group: &str) {
        let r: L34Route = obj(json!({
            "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "L34Route",
            "metadata": {"name": name},
            "spec": {
                "parentRefs": [{"name": gw}],
                "backendRefs": [{"group": "meridio-2.nordix.org", "kind": "DistributionGroup", "name": group}],
                "destinationCIDRs": ["10.230.0.1/32"],
                "protocols": ["TCP"],
                "priority": 1,
            },
        }));
        self.routes
            .create(&PostParams::default(), &r)
            .await
            .unwrap();
    }

    /// Writes the one slice of `group` for Gateway `gw`: ready targets at these identifiers.
    async fn targets(&self, group: &str, gw: &str, ids: &[i32]) {
        let eps: Vec<Value> = ids
            .iter()
            .map(|id| {
                json!({
                    "target": {"name": format!("pod-{id}"), "uid": format!("uid-{id}")},
                    "addresses": [{"ip": format!("10.231.0.{}", id + 1), "family": "IPv4"}],
                    "identifier": id, "ready": true,
                })
            })
            .collect();
        let name = format!("{group}-1");
        let s: LoadBalancerEndpointSlice = obj(json!({
            "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "LoadBalancerEndpointSlice",
            "metadata": {"name": name,
                         "labels": {"meridio-2.nordix.org/distribution-group": group}},
            "spec": {"distributionGroupName": group,
                     "gatewayRef": {"name": gw, "namespace": self.ns}, "endpoints": eps},
        }));
        self.slices
            .patch(
                &name,
                &PatchParams::apply("meridio-test").force(),
                &Patch::Apply(&s),
            )
            .await
            .unwrap();
    }

    /// Waits until group `name` passes `check`.
    async fn until(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&DistributionGroup) -> Result<(), String>,
    ) -> DistributionGroup {
        wait(&format!("DistributionGroup {name}: {what}"), async || {
            let dg = self.groups.get(name).await.map_err(|e| e.to_string())?;
            check(&dg)?;
            Ok(dg)
        })
        .await
    }
}

fn is(
    got: Result<(String, String, String), String>,
    status: &str,
    reason: &str,
    message: Option<&str>,
) -> Result<(), String> {
    let (s, r, m) = got?;
    if s == status && r == reason && message.is_none_or(|want| m == want) {
        Ok(())
    } else {
        Err(format!("{s}/{r} {m:?}, want {status}/{reason} {message:?}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_writes_distribution_group_status_only_when_asked() {
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
    bed.install_crds(&rivora_k8s_api::meridio::crds())
        .await
        .unwrap();
    let admin = bed.admin_client().await.unwrap();
    let lease_ns = unique_name("dgctl");
    let ns = unique_name("dg");
    for n in [&lease_ns, &ns] {
        ensure_namespace(&admin, n).await.unwrap();
    }
    let identity = controller_identity(bed, &admin, &lease_ns).await;
    let pp = PostParams::default();

    // Meridio-2's GatewayClass and another controller's; two Meridio-2 Gateways and one other.
    let meridio_class = unique_name("meridio");
    let other_class = unique_name("other");
    let classes: Api<GatewayClass> = Api::all(admin.clone());
    for (name, controller) in [
        (&meridio_class, GATEWAY_CONTROLLER_NAME),
        (&other_class, "example.com/other-gateway-controller"),
    ] {
        classes
            .create(
                &pp,
                &obj(json!({
                    "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                    "metadata": {"name": name},
                    "spec": {"controllerName": controller},
                })),
            )
            .await
            .unwrap();
    }
    let gateways: Api<Gateway> = Api::namespaced(admin.clone(), &ns);
    for (name, class) in [
        ("gw-a", &meridio_class),
        ("gw-b", &meridio_class),
        ("gw-o", &other_class),
    ] {
        // Meridio-2 ignores listeners; its e2e Gateways carry a dummy TCP one.
        gateways
            .create(
                &pp,
                &obj(json!({
                    "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                    "metadata": {"name": name},
                    "spec": {"gatewayClassName": class,
                             "listeners": [{"name": "tcp", "port": 80, "protocol": "TCP"}]},
                })),
            )
            .await
            .unwrap();
    }
    let b = Bed {
        ns: ns.clone(),
        groups: Api::namespaced(admin.clone(), &ns),
        routes: Api::namespaced(admin.clone(), &ns),
        slices: Api::namespaced(admin.clone(), &ns),
    };
    // dg-ready and dg-empty on gw-a, dg-ready with a target; dg-shared on gw-a for now;
    // dg-other on the other controller's Gateway; dg-orphan on none.
    for g in ["dg-ready", "dg-empty", "dg-shared", "dg-other", "dg-orphan"] {
        b.group(g, 4).await;
    }
    b.route("r-ready", "gw-a", "dg-ready").await;
    b.route("r-empty", "gw-a", "dg-empty").await;
    b.route("r-shared-a", "gw-a", "dg-shared").await;
    b.route("r-other", "gw-o", "dg-other").await;
    b.targets("dg-ready", "gw-a", &[0]).await;
    let versions = async || {
        let mut v = Vec::new();
        for g in ["dg-ready", "dg-empty", "dg-shared", "dg-other", "dg-orphan"] {
            let dg = b.groups.get(g).await.unwrap();
            v.push((g, dg.resource_version(), dg.status.clone()));
        }
        v
    };

    // Phase 1: a replica without the flag leads and passes, and writes no group's status.
    let before = versions().await;
    assert!(before.iter().all(|(_, _, s)| s.is_none()));
    let metrics = Arc::new(Metrics::new());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let plain = replica(
        identity.clone(),
        &lease_ns,
        "dg-replica-1",
        Arc::clone(&metrics),
        OptIn::default(),
        async {
            let _ = stopped.await;
        },
    );
    passes(&metrics, 2).await;
    assert_eq!(
        versions().await,
        before,
        "without --distribution-group-status a group was written"
    );
    // It steps down (releasing the Lease), so the next replica leads at once.
    stop.send(()).unwrap();
    plain.await.unwrap().unwrap();

    // Phase 2: with the flag, every group a Meridio-2 Gateway claims gets its conditions.
    let metrics = Arc::new(Metrics::new());
    let controller = replica(
        identity.clone(),
        &lease_ns,
        "dg-replica-2",
        Arc::clone(&metrics),
        OptIn {
            distribution_group_status: true,
        },
        std::future::pending(),
    );
    let ready = b
        .until("dg-ready", "Ready=True, within capacity", |dg| {
            is(
                cond(dg, "Ready"),
                "True",
                "EndpointsAvailable",
                Some("1 endpoint available"),
            )?;
            is(
                cond(dg, "CapacityExceeded"),
                "False",
                "WithinCapacity",
                None,
            )
        })
        .await;
    b.until("dg-empty", "Ready=False/NoEndpoints", |dg| {
        is(
            cond(dg, "Ready"),
            "False",
            "NoEndpoints",
            Some("No endpoints available"),
        )?;
        is(
            cond(dg, "CapacityExceeded"),
            "False",
            "WithinCapacity",
            None,
        )
    })
    .await;
    b.until("dg-shared", "Ready=False/NoEndpoints", |dg| {
        is(cond(dg, "Ready"), "False", "NoEndpoints", None)?;
        is(
            cond(dg, "CapacityExceeded"),
            "False",
            "WithinCapacity",
            None,
        )
    })
    .await;
    // Written by server-side apply of the status subresource, with the controller's manager.
    assert!(
        ready.managed_fields().iter().any(|m| {
            m.manager.as_deref() == Some(FIELD_MANAGER)
                && m.operation.as_deref() == Some("Apply")
                && m.subresource.as_deref() == Some("status")
        }),
        "{:?}",
        ready.managed_fields()
    );
    // Groups no Meridio-2 Gateway claims are left as they are (one pass wrote all the above,
    // and a later one has run).
    passes(&metrics, 2).await;
    for g in ["dg-other", "dg-orphan"] {
        let dg = b.groups.get(g).await.unwrap();
        assert_eq!(dg.status, None, "{g} is claimed by no Meridio-2 Gateway");
    }

    // Phase 3: an unrelated update (a label: no new generation) writes nothing, and a target
    // more changes Ready's message but not its lastTransitionTime.
    let since = time_of(&ready, "Ready");
    tokio::time::sleep(Duration::from_millis(1100)).await; // a new stamp would differ
    let labelled = b
        .groups
        .patch(
            "dg-ready",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    passes(&metrics, 2).await;
    let after = b.groups.get("dg-ready").await.unwrap();
    assert_eq!(
        after.resource_version(),
        labelled.resource_version(),
        "a pass with nothing new wrote the group"
    );
    b.targets("dg-ready", "gw-a", &[0, 1]).await;
    let two = b
        .until("dg-ready", "Ready=True with 2 endpoints", |dg| {
            is(
                cond(dg, "Ready"),
                "True",
                "EndpointsAvailable",
                Some("2 endpoints available"),
            )
        })
        .await;
    assert_eq!(time_of(&two, "Ready"), since, "Ready stayed True");

    // Phase 4: an identifier not below maxEndpoints (4) gets no slot: CapacityExceeded.
    b.targets("dg-ready", "gw-a", &[0, 1, 4]).await;
    let full = b
        .until("dg-ready", "CapacityExceeded=True", |dg| {
            is(
                cond(dg, "CapacityExceeded"),
                "True",
                "MaglevCapacityExceeded",
                Some("1/3 endpoints excluded (4 capacity)"),
            )?;
            is(
                cond(dg, "Ready"),
                "True",
                "EndpointsAvailable",
                Some("2 endpoints available"),
            )
        })
        .await;
    assert_eq!(time_of(&full, "Ready"), since);
    assert!(time_of(&full, "CapacityExceeded").0 > since.0);

    // Phase 5: a second Meridio-2 Gateway reaches dg-shared: MultipleGateways, and the
    // CapacityExceeded this controller wrote goes (Meridio-2 removes it for such a group).
    b.route("r-shared-b", "gw-b", "dg-shared").await;
    b.until("dg-shared", "Ready=False/MultipleGateways", |dg| {
        let (_, _, m) = cond(dg, "Ready")?;
        is(cond(dg, "Ready"), "False", "MultipleGateways", None)?;
        if !m.ends_with(&format!("({ns}/gw-a, {ns}/gw-b)")) {
            return Err(format!("message {m:?}"));
        }
        match conditions(dg)
            .iter()
            .find(|c| c.type_ == "CapacityExceeded")
        {
            Some(c) => Err(format!("CapacityExceeded is still there: {c:?}")),
            None => Ok(()),
        }
    })
    .await;

    // The controller's identity may write a group's status only, never the group.
    let as_controller: Api<DistributionGroup> = Api::namespaced(identity.clone(), &ns);
    match as_controller
        .patch(
            "dg-orphan",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"by": "controller"}}})),
        )
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("the controller changed a DistributionGroup: {other:?}"),
    }
    controller.abort();
}
