//! rivora-controller's watches against the real API server when one object does not decode:
//! an AddressPool whose status holds a value another tool wrote (a condition whose
//! `lastTransitionTime` the CRD's `date-time` format admits but the Rust type refuses). A typed
//! watch failed the whole list and retried for ever, so no pass ever ran; now the pool is left
//! out, counted in `rivora_controller_undecodable_objects`, named in one Warning Event on the
//! pool (not one per pass), and a Service beside it gets its address from the other pool.
//! Needs root and `scripts/build-testdeps.sh`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use rivora_controller::ipam::blocks::Block;
use rivora_controller::observe::{self, LOAD_BALANCER_CLASS};
use rivora_k8s_api::AddressPool;
use rivora_kube_testbed::{TestBed, ensure_namespace, unique_name};
use serde_json::json;

mod common;

/// A time the API server's `date-time` format accepts (any number of fraction digits) and the
/// Rust type does not (nanoseconds at most: a tenth digit fails the decode).
const FOREIGN_TIME: &str = "2026-01-01T00:00:00.1234567891Z";

fn pool(name: &str, addresses: &[&str]) -> AddressPool {
    serde_json::from_value(json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
        "metadata": { "name": name },
        "spec": { "addresses": addresses }
    }))
    .unwrap()
}

/// Polls `check` until it is Ok, reporting what it last saw.
async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> (T, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < limit {
        match check().await {
            Ok(v) => return (v, start.elapsed()),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out after {limit:?} waiting for {what}; last: {last}");
}

/// The controller's Warning Events on AddressPool `name`: (reason, note, repeats in a series).
async fn pool_warnings(admin: &kube::Client, name: &str) -> Vec<(String, String, i32)> {
    let events: Api<Event> = Api::all(admin.clone());
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            let r = e.regarding.clone().unwrap_or_default();
            e.reporting_controller.as_deref() == Some(observe::FIELD_MANAGER)
                && e.type_.as_deref() == Some("Warning")
                && r.kind.as_deref() == Some("AddressPool")
                && r.name.as_deref() == Some(name)
        })
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
                e.series.map_or(1, |s| s.count),
            )
        })
        .collect()
}

fn gauge(metrics: &rivora_controller::metrics::Metrics, kind: &str) -> Option<String> {
    let prefix = format!("rivora_controller_undecodable_objects{{kind=\"{kind}\"}} ");
    metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_undecodable_pool_is_left_out_and_the_service_beside_it_is_served() {
    let bed = TestBed::shared();
    bed.install_crds(&rivora_k8s_api::crds()).await.unwrap();
    let admin = bed.admin_client().await.unwrap();
    let lease_ns = unique_name("ctrl");
    let ns = unique_name("svc");
    ensure_namespace(&admin, &lease_ns).await.unwrap();
    ensure_namespace(&admin, &ns).await.unwrap();
    let pools: Api<AddressPool> = Api::all(admin.clone());
    let pp = PostParams::default();

    // The bad pool: created through the typed API, then given a status another tool wrote,
    // through the unstructured API (which the Rust type cannot stand in the way of).
    pools
        .create(&pp, &pool("foreign", &["10.61.0.0/24"]))
        .await
        .unwrap();
    let ar = ApiResource::erase::<AddressPool>(&());
    let raw: Api<DynamicObject> = Api::all_with(admin.clone(), &ar);
    raw.patch_status(
        "foreign",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [{
            "type": "ExternalCheck", "status": "True", "reason": "Checked",
            "message": "written by another tool", "lastTransitionTime": FOREIGN_TIME,
        }]}})),
    )
    .await
    .expect("the CRD schema admits the foreign status");
    let stored = raw.get("foreign").await.unwrap();
    let err = serde_json::from_value::<AddressPool>(serde_json::to_value(&stored).unwrap())
        .expect_err("the stored pool must not decode as AddressPool, or this proves nothing");
    println!("the stored pool does not decode: {err}");
    // The typed list fails as a whole: what a typed watch did for ever.
    let typed = pools.list(&Default::default()).await;
    assert!(typed.is_err(), "a typed list decoded every pool");

    pools
        .create(&pp, &pool("good", &["10.62.0.0/24"]))
        .await
        .unwrap();
    let client = common::controller_identity(bed, &admin, &lease_ns).await;
    let metrics = Arc::new(rivora_controller::metrics::Metrics::new());
    let controller = common::spawn_replica(client, &lease_ns, "replica-a", Arc::clone(&metrics));

    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "beside" },
        "spec": { "type": "LoadBalancer", "loadBalancerClass": LOAD_BALANCER_CLASS,
                  "ports": [{ "port": 80, "protocol": "TCP" }] }
    }))
    .unwrap();
    services.create(&pp, &svc).await.unwrap();
    let good = Block::parse("10.62.0.0/24").unwrap();
    let (addr, took) = wait_for(
        "an address for the Service",
        Duration::from_secs(30),
        || {
            let services = services.clone();
            async move {
                let s = services.get("beside").await.map_err(|e| e.to_string())?;
                let ips = observe::current_ingress(&s);
                match ips.first() {
                    Some(ip) if good.contains(ip) => Ok(*ip),
                    _ => Err(format!(
                        "ingress {ips:?}, condition {:?}",
                        observe::our_condition(&s)
                    )),
                }
            }
        },
    )
    .await;
    println!("the Service beside the undecodable pool got {addr} after {took:?}");
    assert!(!controller.is_finished(), "the replica ended");
    let (n, _) = wait_for("the undecodable gauge", Duration::from_secs(5), || {
        let g = gauge(&metrics, "AddressPool");
        let seen = format!("gauge {g:?}");
        async move { g.filter(|v| v == "1").ok_or(seen) }
    })
    .await;
    println!("rivora_controller_undecodable_objects{{kind=\"AddressPool\"}} {n}");
    // The good pool's status is written; the foreign one is left alone.
    let (used, _) = wait_for("the good pool's counts", Duration::from_secs(10), || {
        let pools = pools.clone();
        async move {
            let p = pools.get("good").await.map_err(|e| e.to_string())?;
            let v4 = p.status.and_then(|s| s.ipv4).ok_or("no counts")?;
            (v4.used == 1).then_some(v4.used).ok_or(format!("{v4:?}"))
        }
    })
    .await;
    assert_eq!(used, 1);
    // One Warning Event on the foreign pool naming the field, recorded once over the passes.
    let (warned, _) = wait_for(
        "a Warning Event on the pool",
        Duration::from_secs(10),
        || {
            let admin = admin.clone();
            async move {
                let w = pool_warnings(&admin, "foreign").await;
                (!w.is_empty()).then_some(w.clone()).ok_or(format!("{w:?}"))
            }
        },
    )
    .await;
    assert_eq!(warned.len(), 1, "{warned:?}");
    let (reason, note, count) = &warned[0];
    assert_eq!(reason, "Undecodable");
    assert!(
        note.contains("status.conditions[0].lastTransitionTime: "),
        "the note names the field: {note}"
    );
    assert_eq!(*count, 1, "recorded once: {warned:?}");

    // Fixed by its writer: the pool decodes again and the gauge goes back to 0.
    raw.patch_status(
        "foreign",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": null}})),
    )
    .await
    .unwrap();
    wait_for("the gauge back at 0", Duration::from_secs(10), || {
        let g = gauge(&metrics, "AddressPool");
        let seen = format!("gauge {g:?}");
        async move { g.filter(|v| v == "0").ok_or(seen) }
    })
    .await;
    controller.abort();
}
