//! An audited test bed records who made each request: a ServiceAccount's ConfigMap writes are
//! counted under its name, the admin's under the admin's, and a cursor counts only what came
//! after it. Needs root and `scripts/build-testdeps.sh`.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use rivora_kube_testbed::audit::{AuditCursor, count_of};
use rivora_kube_testbed::{Options, TestBed, ensure_namespace, unique_name};

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_counts_requests_by_user() {
    let bed = TestBed::start_with(&Options {
        audit_log: true,
        ..Options::default()
    })
    .unwrap();
    let admin = bed.admin_client().await.unwrap();
    let ns = unique_name("audit");
    ensure_namespace(&admin, &ns).await.unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "writer"}})).unwrap(),
        )
        .await
        .unwrap();
    // Let the writer create ConfigMaps in its namespace.
    rivora_kube_testbed::rbac::bind_rbac(
        &admin,
        "kind: Role\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: cm-writer}\n\
         rules: [{apiGroups: [\"\"], resources: [configmaps], verbs: [create]}]\n",
        &ns,
        "writer",
    )
    .await
    .unwrap();
    let writer = bed.service_account_client(&ns, "writer").await.unwrap();

    let mut cursor = AuditCursor::at_end(&bed.audit_log()).unwrap();
    let writer_api = Api::<ConfigMap>::namespaced(writer, &ns);
    let deadline = Instant::now() + Duration::from_secs(10);
    // RBAC takes effect asynchronously: retry the first create until it is allowed.
    while writer_api
        .create(&PostParams::default(), &config_map("w0"))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "RBAC never let the writer create"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 1..5 {
        writer_api
            .create(&PostParams::default(), &config_map(&format!("w{i}")))
            .await
            .unwrap();
    }
    let admin_api = Api::<ConfigMap>::namespaced(admin, &ns);
    admin_api
        .create(&PostParams::default(), &config_map("a0"))
        .await
        .unwrap();

    let who = format!("system:serviceaccount:{ns}:writer");
    // The log is written as requests complete; wait for the last one to appear.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        seen.extend(cursor.take().unwrap());
        let admin_creates = seen
            .iter()
            .filter(|r| r.verb == "create" && r.resource == "configmaps" && r.user != who)
            .count();
        if admin_creates >= 1 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mine = count_of(&seen, &who);
    let ok = seen
        .iter()
        .filter(|r| r.user == who && r.verb == "create" && r.code == 201)
        .count();
    assert_eq!(ok, 5, "the writer's successful creates: {mine:?}");
    assert!(mine["create configmaps"] >= 5, "{mine:?}");
    assert!(
        seen.iter()
            .any(|r| r.user != who && r.verb == "create" && r.resource == "configmaps"),
        "the admin's create is logged under another user"
    );
    // Nothing from before the cursor: the namespace's creation is not in it.
    assert!(
        !seen
            .iter()
            .any(|r| r.verb == "create" && r.resource == "namespaces"),
        "requests from before the cursor were counted"
    );
}
