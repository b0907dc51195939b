//! The test bed against itself: the shared API server starts, serves CRDs, does server-side apply
//! with real conflicts, enforces RBAC for ServiceAccount clients, and is reachable from a node
//! namespace attached to its bridge. Needs root and `scripts/build-testdeps.sh`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use rivora_kube_testbed::{GatewayChannel, TestBed, ensure_namespace, unique_name};
use rivora_lab::Netns;

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.testbed.rivora.dev
spec:
  group: testbed.rivora.dev
  scope: Namespaced
  names: { plural: widgets, singular: widget, kind: Widget, listKind: WidgetList }
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [size]
              properties:
                size: { type: integer, minimum: 1 }
"#;

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_and_reports_the_pinned_version() {
    let bed = TestBed::shared();
    let client = bed.admin_client().await.unwrap();
    let v = client.apiserver_version().await.unwrap();
    println!(
        "kube-apiserver {} (etcd {}) in netns {} at {}",
        v.git_version,
        bed.assets().etcd_version,
        bed.netns_name(),
        bed.url()
    );
    assert_eq!(v.git_version, bed.assets().kubernetes_version);
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "35"));
    // The namespace the API server bootstraps itself exists: it really ran its post-start hooks.
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    ns.get("default").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_are_served_and_validated() {
    let bed = TestBed::shared();
    let crds = bed.install_crd_yaml(WIDGET_CRD).await.unwrap();
    assert_eq!(crds.len(), 1);
    let client = bed.admin_client().await.unwrap();
    let namespace = unique_name("crd");
    ensure_namespace(&client, &namespace).await.unwrap();
    let gvk = GroupVersionKind::gvk("testbed.rivora.dev", "v1", "Widget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let api: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &ar);
    let good: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "testbed.rivora.dev/v1", "kind": "Widget",
        "metadata": { "name": "w1" }, "spec": { "size": 3 }
    }))
    .unwrap();
    api.create(&PostParams::default(), &good).await.unwrap();
    let bad: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "testbed.rivora.dev/v1", "kind": "Widget",
        "metadata": { "name": "w2" }, "spec": { "size": 0 }
    }))
    .unwrap();
    let err = api.create(&PostParams::default(), &bad).await.unwrap_err();
    let msg = err.to_string();
    println!("refused: {msg}");
    assert!(msg.contains("spec.size"), "{msg}");
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_api_v1_routes_are_served() {
    let bed = TestBed::shared();
    let crds = bed
        .install_gateway_api(GatewayChannel::Standard)
        .await
        .unwrap();
    let names: Vec<&str> = crds
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    println!(
        "Gateway API {}: {} CRDs",
        bed.assets().gateway_api_version,
        names.len()
    );
    assert!(
        names.contains(&"tcproutes.gateway.networking.k8s.io"),
        "{names:?}"
    );
    let client = bed.admin_client().await.unwrap();
    let served = client
        .list_api_group_resources("gateway.networking.k8s.io/v1")
        .await
        .unwrap();
    let kinds: Vec<&str> = served.resources.iter().map(|r| r.kind.as_str()).collect();
    for kind in ["Gateway", "GatewayClass", "TCPRoute", "UDPRoute"] {
        assert!(kinds.contains(&kind), "{kind} not served in v1: {kinds:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_tracks_owners_and_refuses_conflicts() {
    let bed = TestBed::shared();
    let client = bed.admin_client().await.unwrap();
    let namespace = unique_name("ssa");
    ensure_namespace(&client, &namespace).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);

    let a = PatchParams::apply("manager-a");
    api.patch("cm", &a, &Patch::Apply(config_map("cm", &[("x", "1")])))
        .await
        .unwrap();
    // A second manager adds its own field: both are kept.
    let b = PatchParams::apply("manager-b");
    api.patch("cm", &b, &Patch::Apply(config_map("cm", &[("y", "2")])))
        .await
        .unwrap();
    let got = api.get("cm").await.unwrap();
    let data = got.data.clone().unwrap();
    assert_eq!(data.get("x").map(String::as_str), Some("1"));
    assert_eq!(data.get("y").map(String::as_str), Some("2"));
    let managers: Vec<String> = got
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        managers.contains(&"manager-a".into()) && managers.contains(&"manager-b".into()),
        "{managers:?}"
    );
    // B changing A's field without force is a conflict naming the field.
    let err = api
        .patch("cm", &b, &Patch::Apply(config_map("cm", &[("x", "9")])))
        .await
        .unwrap_err();
    let msg = err.to_string();
    println!("conflict: {msg}");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409),
        "{msg}"
    );
    assert!(msg.contains("data.x"), "{msg}");
    // With force B takes it over; A's applied config no longer owns x.
    api.patch(
        "cm",
        &PatchParams::apply("manager-b").force(),
        &Patch::Apply(config_map("cm", &[("x", "9"), ("y", "2")])),
    )
    .await
    .unwrap();
    let data = api.get("cm").await.unwrap().data.unwrap();
    assert_eq!(data.get("x").map(String::as_str), Some("9"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_is_forbidden_until_a_role_grants_it() {
    let bed = TestBed::shared();
    let admin = bed.admin_client().await.unwrap();
    let namespace = unique_name("rbac");
    let sa_client = bed
        .service_account_client(&namespace, "reader")
        .await
        .unwrap();
    let as_sa: Api<ConfigMap> = Api::namespaced(sa_client.clone(), &namespace);
    let err = as_sa.list(&ListParams::default()).await.unwrap_err();
    println!("before the Role: {err}");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("system:serviceaccount:{namespace}:reader")),
        "{err}"
    );

    let pp = PatchParams::apply("rivora-test");
    let role = Role {
        metadata: ObjectMeta {
            name: Some("configmap-reader".into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["get".into(), "list".into()],
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), &namespace)
        .patch("configmap-reader", &pp, &Patch::Apply(&role))
        .await
        .unwrap();
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("reader".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: "configmap-reader".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "reader".into(),
            namespace: Some(namespace.clone()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin, &namespace)
        .patch("reader", &pp, &Patch::Apply(&binding))
        .await
        .unwrap();

    // The RBAC authorizer learns about the binding through its informer: wait for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let waited = Instant::now();
    loop {
        match as_sa.list(&ListParams::default()).await {
            Ok(_) => break,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("still refused 10 s after the RoleBinding: {e}"),
        }
    }
    println!("allowed {:?} after the RoleBinding", waited.elapsed());
    // Only what the Role grants: writing is still forbidden.
    let err = as_sa
        .create(&PostParams::default(), &config_map("nope", &[("a", "b")]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
}

#[test]
fn a_node_namespace_attached_to_the_bridge_reaches_the_api_server() {
    rivora_lab::require_root().unwrap();
    let bed = TestBed::shared();
    let node = Netns::new("knod").unwrap();
    let att = bed.attach(&node, "eth0").unwrap();
    println!(
        "node {} at {} / {} -> {}",
        node.name(),
        att.node_v4,
        att.node_v6,
        bed.in_cluster_url()
    );
    let kubeconfig = bed.admin_kubeconfig(&bed.in_cluster_url());
    let v6_kubeconfig = bed.admin_kubeconfig(&format!(
        "https://[{}]:{}",
        rivora_kube_testbed::SERVER_V6,
        rivora_kube_testbed::SERVER_PORT
    ));
    // The client's sockets are made by a runtime whose only thread is inside the node namespace.
    let versions = node
        .within(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut out = Vec::new();
                for kc in [kubeconfig, v6_kubeconfig] {
                    let kc = kube::config::Kubeconfig::from_yaml(&kc).unwrap();
                    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                        .await
                        .unwrap();
                    let client = kube::Client::try_from(cfg).unwrap();
                    out.push(client.apiserver_version().await.map(|v| v.git_version));
                }
                out
            })
        })
        .unwrap();
    for v in versions {
        assert_eq!(v.unwrap(), bed.assets().kubernetes_version);
    }
}
