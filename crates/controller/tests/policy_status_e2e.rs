//! ServicePolicy status against the real API server: rivora-controller's leader says per target
//! whether the nodes apply a policy (Accepted), or why not (TargetNotFound, Invalid, Conflicted),
//! follows changes (a Service created, a winner deleted, a spec fixed), and writes nothing when
//! nothing changed.
//!
//! The controller runs as a ServiceAccount bound only to deploy/rbac, which proves the RBAC is
//! enough for the status writes; at the end that identity is refused a write to a policy's spec.
//!
//! One controller per test binary (it watches every namespace), so this is one test in phases.
//! Needs root and `scripts/build-testdeps.sh`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rivora_controller::metrics::Metrics;
use rivora_controller::observe::LOAD_BALANCER_CLASS;
use rivora_k8s_api::ServicePolicy;
use rivora_kube_testbed::{TestBed, ensure_namespace, unique_name};
use serde_json::{Value, json};

mod common;
use common::controller_identity;

/// How long any one status may take to appear (the controller reacts within a debounce).
const LIMIT: Duration = Duration::from_secs(15);

async fn start_controller(
    client: Client,
    lease_ns: &str,
    metrics: Arc<Metrics>,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    common::spawn_replica(client, lease_ns, "policy-replica", metrics)
}

fn service(name: &str, spec: Value) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

fn lb_service(name: &str) -> Service {
    service(
        name,
        json!({
            "type": "LoadBalancer", "loadBalancerClass": LOAD_BALANCER_CLASS,
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                      {"name": "https", "port": 443, "protocol": "TCP"}],
        }),
    )
}

fn policy(name: &str, target: &str, extra: Value) -> ServicePolicy {
    let mut spec = json!({"targetRefs": [{"group": "", "kind": "Service", "name": target}]});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "ServicePolicy",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// The Accepted condition of a policy's only target: (status, reason, message, generation seen,
/// the policy's generation, lastTransitionTime).
#[derive(Debug, Clone)]
struct Verdict {
    status: String,
    reason: String,
    message: String,
    observed: Option<i64>,
    generation: Option<i64>,
    since: Timestamp,
}

fn verdict(p: &ServicePolicy) -> Result<Verdict, String> {
    let status = p.status.as_ref().ok_or("no status yet")?;
    if status.targets.len() != 1 {
        return Err(format!(
            "{} target entries: {status:?}",
            status.targets.len()
        ));
    }
    let t = &status.targets[0];
    if t.target_ref != p.spec.target_refs[0] {
        return Err(format!("entry for {:?}", t.target_ref));
    }
    let c = t
        .conditions
        .iter()
        .find(|c| c.type_ == "Accepted")
        .ok_or_else(|| format!("no Accepted condition: {t:?}"))?;
    Ok(Verdict {
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        observed: c.observed_generation,
        generation: p.metadata.generation,
        since: c.last_transition_time.0,
    })
}

/// Polls policy `name` until its verdict is `status`/`reason` for its current generation;
/// panics after [`LIMIT`] with what it last saw.
async fn expect(api: &Api<ServicePolicy>, name: &str, status: &str, reason: &str) -> Verdict {
    let start = Instant::now();
    let mut last = String::from("nothing read yet");
    while start.elapsed() < LIMIT {
        match api.get(name).await {
            Ok(p) => match verdict(&p) {
                Ok(v) if v.status == status && v.reason == reason && v.observed == v.generation => {
                    println!(
                        "{name}: Accepted={status}/{reason} after {:?}: {}",
                        start.elapsed(),
                        v.message
                    );
                    return v;
                }
                Ok(v) => last = format!("{v:?}"),
                Err(e) => last = e,
            },
            Err(e) => last = format!("get: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{name}: no Accepted={status}/{reason} within {LIMIT:?}; last seen: {last}");
}

/// `name value` of one line of the metrics text.
fn metric(metrics: &Metrics, name: &str) -> u64 {
    let text = metrics.encode();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

const POLICY_WRITES: &str = "rivora_controller_status_writes_total{kind=\"servicepolicy\"}";
const PASSES: &str = "rivora_controller_passes_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_says_per_target_whether_a_policy_applies_and_why_not() {
    let bed = TestBed::shared();
    bed.install_crds(&rivora_k8s_api::crds()).await.unwrap();
    let admin = bed.admin_client().await.unwrap();
    let lease_ns = unique_name("polctl");
    let ns = unique_name("pol");
    ensure_namespace(&admin, &lease_ns).await.unwrap();
    ensure_namespace(&admin, &ns).await.unwrap();
    let identity = controller_identity(bed, &admin, &lease_ns).await;
    let metrics = Arc::new(Metrics::new());
    let controller = start_controller(identity.clone(), &lease_ns, Arc::clone(&metrics)).await;

    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let policies: Api<ServicePolicy> = Api::namespaced(admin.clone(), &ns);
    let pp = PostParams::default();

    // Phase 1: a policy on an existing LoadBalancer Service of ours is Accepted.
    services.create(&pp, &lb_service("web")).await.unwrap();
    policies
        .create(
            &pp,
            &policy("web-policy", "web", json!({"synRateLimit": {"rate": 100}})),
        )
        .await
        .unwrap();
    let v = expect(&policies, "web-policy", "True", "Accepted").await;
    assert_eq!(v.message, format!("applies to Service {ns}/web"));
    assert_eq!(v.observed, Some(1));

    // Phase 2: a missing Service is TargetNotFound until it is created.
    policies
        .create(&pp, &policy("early", "later", json!({})))
        .await
        .unwrap();
    let missing = expect(&policies, "early", "False", "TargetNotFound").await;
    assert_eq!(missing.message, format!("Service {ns}/later not found"));
    services.create(&pp, &lb_service("later")).await.unwrap();
    let found = expect(&policies, "early", "True", "Accepted").await;
    assert!(
        found.since >= missing.since,
        "lastTransitionTime went back: {missing:?} then {found:?}"
    );

    // Phase 3: two policies on one Service: the older applies, the newer is Conflicted. The
    // newer one sorts first by name, so only age can make the older win.
    services.create(&pp, &lb_service("shared")).await.unwrap();
    let older = policies
        .create(&pp, &policy("zz-older", "shared", json!({})))
        .await
        .unwrap();
    let older_ts = older.metadata.creation_timestamp.clone().unwrap().0;
    // creationTimestamp has whole seconds: wait (bounded) for the next second to begin.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Timestamp::now().as_second() <= older_ts.as_second() {
        assert!(
            Instant::now() < deadline,
            "the clock did not pass {older_ts}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let newer = policies
        .create(&pp, &policy("aa-newer", "shared", json!({})))
        .await
        .unwrap();
    let newer_ts = newer.metadata.creation_timestamp.clone().unwrap().0;
    assert!(newer_ts > older_ts, "{newer_ts} is not after {older_ts}");
    expect(&policies, "zz-older", "True", "Accepted").await;
    let conflicted = expect(&policies, "aa-newer", "False", "Conflicted").await;
    assert!(
        conflicted.message.contains(&format!(
            "ServicePolicy {ns}/zz-older applies to ports http, https instead (it is older)"
        )),
        "{}",
        conflicted.message
    );
    // The winner goes away: the other one applies now.
    policies
        .delete("zz-older", &DeleteParams::default())
        .await
        .unwrap();
    expect(&policies, "aa-newer", "True", "Accepted").await;

    // Phase 4: what the nodes refuse is Invalid. A SYN rate above the datapath's limit never
    // gets that far: the API server refuses it, naming the field.
    match policies
        .create(
            &pp,
            &policy(
                "too-fast",
                "web",
                json!({"synRateLimit": {"rate": 2000000}}),
            ),
        )
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 422 && e.message.contains("synRateLimit.rate") => {
            println!("API server refused rate 2000000: {}", e.message)
        }
        other => panic!("a rate of 2000000 was not refused: {other:?}"),
    }
    // A path with a space passes the schema (it starts with /) but not the nodes' prober.
    services.create(&pp, &lb_service("probed")).await.unwrap();
    policies
        .create(
            &pp,
            &policy(
                "bad-path",
                "probed",
                json!({"healthCheck": {"type": "http", "path": "/has space"}}),
            ),
        )
        .await
        .unwrap();
    let bad = expect(&policies, "bad-path", "False", "Invalid").await;
    assert!(
        bad.message.starts_with("healthCheck.path: "),
        "{}",
        bad.message
    );
    assert_eq!(bad.observed, Some(1));
    // Fixed: Accepted, for the new generation.
    policies
        .patch(
            "bad-path",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"healthCheck": {"path": "/healthz"}}})),
        )
        .await
        .unwrap();
    let fixed = expect(&policies, "bad-path", "True", "Accepted").await;
    assert_eq!(fixed.observed, Some(2));
    // A Service the nodes do not serve is Invalid too.
    services
        .create(
            &pp,
            &service(
                "internal",
                json!({"type": "ClusterIP", "ports": [{"port": 80, "protocol": "TCP"}]}),
            ),
        )
        .await
        .unwrap();
    policies
        .create(&pp, &policy("on-cluster-ip", "internal", json!({})))
        .await
        .unwrap();
    let not_lb = expect(&policies, "on-cluster-ip", "False", "Invalid").await;
    assert_eq!(
        not_lb.message,
        format!("Service {ns}/internal is type ClusterIP, not LoadBalancer")
    );

    // Phase 5: nothing changes, nothing is written. Touch an unrelated Service (an event, so
    // the controller makes passes) and wait for two passes to be counted.
    let list = policies.list(&ListParams::default()).await.unwrap().items;
    let versions = |items: &[ServicePolicy]| -> Vec<(String, Option<String>)> {
        let mut v: Vec<_> = items
            .iter()
            .map(|p| (p.name_any(), p.resource_version()))
            .collect();
        v.sort();
        v
    };
    let before = versions(&list);
    let writes_before = metric(&metrics, POLICY_WRITES);
    let passes_before = metric(&metrics, PASSES);
    let deadline = Instant::now() + LIMIT;
    let mut touch = 0;
    while metric(&metrics, PASSES) < passes_before + 2 {
        assert!(
            Instant::now() < deadline,
            "only {} passes in {LIMIT:?}",
            metric(&metrics, PASSES) - passes_before
        );
        touch += 1;
        services
            .patch(
                "internal",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"touch": touch.to_string()}}})),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = versions(&policies.list(&ListParams::default()).await.unwrap().items);
    let writes_after = metric(&metrics, POLICY_WRITES);
    println!(
        "{} passes with no change: policy status writes {writes_before} -> {writes_after}, \
         {} policies' resourceVersions unchanged",
        metric(&metrics, PASSES) - passes_before,
        after.len()
    );
    assert_eq!(after, before, "a pass with no change rewrote a policy");
    assert_eq!(writes_after, writes_before);

    // Phase 6: the controller's identity writes status only, never a policy's spec.
    let as_controller: Api<ServicePolicy> = Api::namespaced(identity.clone(), &ns);
    match as_controller
        .patch(
            "web-policy",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"advertise": false}})),
        )
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 403 => {
            println!("forbidden as expected: the controller patching a ServicePolicy's spec")
        }
        other => panic!("the controller patched a ServicePolicy's spec: {other:?}"),
    }

    controller.abort();
    let _ = controller.await;
}
