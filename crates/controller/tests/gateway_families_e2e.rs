//! A Gateway without requested addresses takes one address of each family its pools offer;
//! with IPv4-only backends the nodes refuse every connection to its IPv6 address. Against the
//! real API server: the listener says so (`rivora.dev/AddressFamiliesServed` False, naming the
//! IPv6 address, the route and the backend's family), and says True once the backend is
//! dual-stack. Needs root and `scripts/build-testdeps.sh`.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rivora_controller::gateway_families::CONDITION;
use rivora_controller::metrics::Metrics;
use rivora_k8s_api::class::GATEWAY_CONTROLLER_NAME;
use rivora_k8s_api::{AddressPool, TcpRoute};
use rivora_kube_testbed::{GatewayChannel, TestBed, ensure_namespace, unique_name};
use serde_json::{Value, json};

mod common;

/// How long the status may take to appear.
const LIMIT: Duration = Duration::from_secs(20);

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// Waits until the Gateway has two addresses and listener `tcp` has [`CONDITION`] with
/// `status`; returns the addresses and the condition (panics with what it last saw).
async fn wait_condition(api: &Api<Gateway>, name: &str, status: &str) -> (Vec<IpAddr>, Condition) {
    let start = Instant::now();
    let mut last = String::from("nothing read yet");
    while start.elapsed() < LIMIT {
        let gw = api.get(name).await.unwrap();
        let st = gw.status.unwrap_or_default();
        let addrs: Vec<IpAddr> = st
            .addresses
            .iter()
            .flatten()
            .filter_map(|a| a.value.parse().ok())
            .collect();
        let cond = st
            .listeners
            .iter()
            .flatten()
            .find(|l| l.name == "tcp")
            .and_then(|l| l.conditions.iter().find(|c| c.type_ == CONDITION).cloned());
        match cond {
            Some(c) if addrs.len() == 2 && c.status == status => {
                println!("{CONDITION}={status} after {:?}", start.elapsed());
                return (addrs, c);
            }
            other => last = format!("addresses {addrs:?}, condition {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no {CONDITION}={status} within {LIMIT:?}; last seen: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_gateway_with_ipv4_backends_says_its_ipv6_address_is_refused() {
    let bed = TestBed::shared();
    bed.install_crds(&rivora_k8s_api::crds()).await.unwrap();
    bed.install_gateway_api(GatewayChannel::Standard)
        .await
        .unwrap();
    let admin = bed.admin_client().await.unwrap();
    let lease_ns = unique_name("gwfam-ctl");
    let ns = unique_name("gwfam");
    for n in [&lease_ns, &ns] {
        ensure_namespace(&admin, n).await.unwrap();
    }
    let pp = PostParams::default();
    let pool: AddressPool = obj(json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": unique_name("gwfam-dual")},
        "spec": {"addresses": ["10.78.0.0/28", "fd00:78::/124"]},
    }));
    Api::<AddressPool>::all(admin.clone())
        .create(&pp, &pool)
        .await
        .unwrap();
    let class = unique_name("rivora");
    Api::<GatewayClass>::all(admin.clone())
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
    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    services
        .create(
            &pp,
            &obj(json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {"ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                         "ports": [{"port": 80, "protocol": "TCP"}]},
            })),
        )
        .await
        .unwrap();
    let gateways: Api<Gateway> = Api::namespaced(admin.clone(), &ns);
    gateways
        .create(
            &pp,
            &obj(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "edge"},
                "spec": {"gatewayClassName": class,
                         "listeners": [{"name": "tcp", "port": 8080, "protocol": "TCP"}]},
            })),
        )
        .await
        .unwrap();
    Api::<TcpRoute>::namespaced(admin.clone(), &ns)
        .create(
            &pp,
            &obj(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TCPRoute",
                "metadata": {"name": "r"},
                "spec": {"parentRefs": [{"name": "edge", "sectionName": "tcp"}],
                         "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]},
            })),
        )
        .await
        .unwrap();
    let client = common::controller_identity(bed, &admin, &lease_ns).await;
    let controller =
        common::spawn_replica(client, &lease_ns, "replica-a", Arc::new(Metrics::new()));

    let (addrs, c) = wait_condition(&gateways, "edge", "False").await;
    let v6 = addrs.iter().find(|a| a.is_ipv6()).expect("an IPv6 address");
    let v4 = addrs.iter().find(|a| a.is_ipv4()).expect("an IPv4 address");
    println!(
        "IPv4-only backend: {} {}: {}",
        c.status, c.reason, c.message
    );
    assert_eq!(c.reason, "BackendFamilyMissing");
    assert!(
        c.message
            .contains(&format!("connections to {v6} (IPv6) are refused"))
            && c.message.contains(&format!("route {ns}/r"))
            && c.message.contains(&format!("Service {ns}/web: IPv4"))
            && !c.message.contains(&v4.to_string()),
        "{}",
        c.message
    );

    // The backend made dual-stack: every address is served, the addresses did not move.
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ipFamilyPolicy": "PreferDualStack",
                                          "ipFamilies": ["IPv4", "IPv6"]}})),
        )
        .await
        .unwrap();
    let (after, c) = wait_condition(&gateways, "edge", "True").await;
    println!(
        "dual-stack backend: {} {}: {}",
        c.status, c.reason, c.message
    );
    assert_eq!(c.reason, "AllFamiliesServed");
    assert_eq!(after, addrs, "the Gateway's addresses moved");
    controller.abort();
}
