//! Helpers shared by the controller's API-server tests.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use rivora_kube_testbed::TestBed;
use serde_json::json;

/// Applies deploy/rbac/rivora-controller.yaml (the Role into `lease_ns`), binds it to
/// ServiceAccount `lease_ns/rivora-controller`, and returns a client with that identity once
/// RBAC lets it list Services.
pub async fn controller_identity(bed: &TestBed, admin: &Client, lease_ns: &str) -> Client {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/rbac/rivora-controller.yaml"),
    )
    .unwrap();
    let pp = PatchParams::apply("rivora-test").force();
    let subject =
        json!([{"kind": "ServiceAccount", "name": "rivora-controller", "namespace": lease_ns}]);
    for doc in serde_norway::Deserializer::from_str(&text) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        match v["kind"].as_str().unwrap() {
            "ClusterRole" => {
                let cr: ClusterRole = serde_json::from_value(v).unwrap();
                let name = cr.name_any();
                Api::<ClusterRole>::all(admin.clone())
                    .patch(&name, &pp, &Patch::Apply(&cr))
                    .await
                    .unwrap();
                let b: ClusterRoleBinding = serde_json::from_value(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                    "subjects": subject,
                }))
                .unwrap();
                Api::<ClusterRoleBinding>::all(admin.clone())
                    .patch(&name, &pp, &Patch::Apply(&b))
                    .await
                    .unwrap();
            }
            "Role" => {
                let mut role: Role = serde_json::from_value(v).unwrap();
                role.metadata.namespace = Some(lease_ns.into());
                let name = role.name_any();
                Api::<Role>::namespaced(admin.clone(), lease_ns)
                    .patch(&name, &pp, &Patch::Apply(&role))
                    .await
                    .unwrap();
                let b: RoleBinding = serde_json::from_value(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": name, "namespace": lease_ns},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                    "subjects": subject,
                }))
                .unwrap();
                Api::<RoleBinding>::namespaced(admin.clone(), lease_ns)
                    .patch(&name, &pp, &Patch::Apply(&b))
                    .await
                    .unwrap();
            }
            other => panic!("unexpected kind {other} in deploy/rbac"),
        }
    }
    let client = bed
        .service_account_client(lease_ns, "rivora-controller")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Api::<Service>::all(client.clone())
        .list(&ListParams::default().limit(1))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the ServiceAccount cannot list Services 10 s after binding"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client
}

/// Runs a controller replica (`run::replica`, as the binary does) in a task: Lease
/// `rivora-controller` in `lease_ns` (4 s, renewed 1 s before expiry), Services of the default
/// class, short debounce and resync. Abort the task for a crash. (Not every test binary that
/// shares this module runs a replica in process.)
#[allow(dead_code)]
pub fn spawn_replica(
    client: Client,
    lease_ns: &str,
    identity: &str,
    metrics: std::sync::Arc<rivora_controller::metrics::Metrics>,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    let leader = rivora_controller::leader::LeaderConfig {
        lease_name: "rivora-controller".into(),
        namespace: lease_ns.into(),
        identity: identity.into(),
        duration: Duration::from_secs(4),
        grace: Duration::from_secs(1),
    };
    let settings = rivora_controller::run::Settings {
        class: rivora_controller::observe::ClassConfig::default(),
        identity: identity.into(),
        debounce: Duration::from_millis(20),
        resync: Duration::from_secs(5),
        metrics,
    };
    tokio::spawn(rivora_controller::run::replica(
        client,
        leader,
        settings,
        std::future::pending(),
    ))
}
