//! Issue 41, acceptance 2: upgrades as users do them, on a real cluster of two nodes (containerd
//! and a kubelet each) running the chart from Rivora's image, with an echo Deployment behind a
//! LoadBalancer Service and load through node 1 (12 long-lived TCP connections exchanging a
//! line every 100 ms, 20 new connections a second):
//! - `rivora upgrade --wait --set image.tag=<another version>`: the rivorad DaemonSet rolls node
//!   by node (never both down), the controller Deployment rolls too, `persistDatapath` is on (the
//!   chart's default): 0 established connections broken, 0 new connections failed; every new
//!   rivorad adopted the VIPs from the pinned maps (counted and printed); the Service keeps its
//!   address and a new Service gets one from the upgraded controller;
//! - node 2 drained (cordoned, its Pods evicted through the Eviction API, which honours the
//!   controller's PodDisruptionBudget), its kubelet stopped and its Node deleted, under the same
//!   load: 0 new connections failed, and established connections broke only to the Pods that
//!   left node 2, never before their Pod went.
//!
//! Needs root and the test dependencies (scripts/build-testdeps.sh, scripts/setup.sh).

mod cluster_common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use cluster_common::*;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use rivora_kube_testbed::cluster::KubeNode;
use serde_json::json;

const NEXT: &str = "0.1.0-next";

/// `rivoractl ARGS -o json` on `node` (the host's build, in the node's namespaces: it talks to
/// that node's rivorad over /run/rivora).
fn rivoractl(node: &KubeNode, args: &[&str]) -> serde_json::Value {
    let bin = rivora_kube_testbed::cluster::images::repo_root().join("target/debug/rivoractl");
    let bin = bin.to_string_lossy();
    let mut argv = vec![bin.as_ref()];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["-o", "json"]);
    let out = node.exec(&argv).unwrap();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("rivoractl {args:?}: {e}: {out}"))
}

/// How many VIPs `node`'s rivorad adopted at its start, from its start summary.
fn adopted_vips(node: &KubeNode) -> (usize, String) {
    let status = rivoractl(node, &["status"]);
    let start = status["start"].as_str().unwrap_or_default().to_string();
    let n = start
        .strip_prefix("adopted ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (n, start)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_under_load_breaks_nothing_and_a_drained_node_leaves_the_others_forwarding() {
    let (cluster, kubeconfig) = cluster_with_rivora(2, &[NEXT]).await;
    install(&cluster, &kubeconfig);
    let client = cluster.admin_client().await.unwrap();
    let system_pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    wait("rivorad on both nodes", &cluster, || {
        running_pods(&system_pods, "app.kubernetes.io/component=rivorad", 2)
    })
    .await;
    let vip = echo_service(&cluster, &client, "lab", "10.99.42.0/28", "echo", 3).await;
    let target = SocketAddr::new(vip, 80);
    for node in cluster.nodes() {
        cluster.route_via(vip, node).unwrap();
        round_reaches(&cluster, target, 3, &format!("through {}", node.name())).await;
    }
    cluster.route_via(vip, &cluster.nodes()[0]).unwrap();
    let vips_before: Vec<usize> = cluster
        .nodes()
        .iter()
        .map(|n| rivoractl(n, &["vips"]).as_array().map_or(0, Vec::len))
        .collect();
    assert!(
        vips_before.iter().all(|&v| v >= 2),
        "each node serves the Service's TCP and UDP VIPs: {vips_before:?}"
    );

    // The upgrade, under load; meanwhile, how many rivorad Pods are not ready at once.
    let (long, churn, _) = start_load(&cluster, target);
    let upgrade = {
        let kubeconfig = kubeconfig.clone();
        let bin = env!("CARGO_BIN_EXE_rivora");
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(bin)
                .args(["upgrade", "--wait", "--timeout", "300s", "-n", NS])
                .args(["--set", &format!("image.tag={NEXT}")])
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .output()
                .unwrap()
        })
    };
    let mut most_down = 0;
    while !upgrade.is_finished() {
        if let Ok(list) = system_pods
            .list(&ListParams::default().labels("app.kubernetes.io/component=rivorad"))
            .await
        {
            let ready = list
                .items
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|cs| {
                                cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                })
                .count();
            most_down = most_down.max(2usize.saturating_sub(ready));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out = upgrade.await.unwrap();
    assert!(
        out.status.success(),
        "rivora upgrade failed:\n{}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout),
        cluster.diagnostics(30)
    );
    // A few more seconds of load on the upgraded nodes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let churn = churn.stop();
    let long = long.stop();
    println!("upgrade to {NEXT}:\n  new connections: {churn}\n  established: {long}");
    assert_eq!(
        churn.failed, 0,
        "no new connection failed during the upgrade: {churn}"
    );
    assert!(churn.ok > 100, "the churn ran: {churn}");
    assert_eq!(
        long.failed_connections, 0,
        "no established connection broke during the upgrade: {long}"
    );
    assert_eq!(most_down, 1, "the DaemonSet rolled one node at a time");

    let want = format!("ghcr.io/rivora/rivora:{NEXT}");
    let rivorad = wait("rivorad upgraded on both nodes", &cluster, || {
        running_pods(&system_pods, "app.kubernetes.io/component=rivorad", 2)
    })
    .await;
    let controllers = wait("both controllers upgraded", &cluster, || async {
        let p = running_pods(&system_pods, "app.kubernetes.io/component=controller", 2).await?;
        if p.iter().all(|p| p.image == want) {
            Ok(p)
        } else {
            Err(format!("{p:?}"))
        }
    })
    .await;
    for p in rivorad.iter().chain(&controllers) {
        assert_eq!(p.image, want, "{} runs the upgraded image", p.name);
    }
    for (node, before) in cluster.nodes().iter().zip(&vips_before) {
        let (adopted, start) = adopted_vips(node);
        println!("{}: {start}", node.name());
        assert!(
            adopted >= *before,
            "{}'s new rivorad adopted the {before} VIPs it served: {start}",
            node.name()
        );
    }

    // The upgraded controller: the Service kept its address; a new one gets one.
    let services: Api<Service> = Api::namespaced(client.clone(), "echo");
    assert_eq!(
        service_address(&cluster, &client, "echo", "echo").await,
        vip
    );
    let second: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "echo2"},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "rivora.dev/lb",
                 "selector": {"app": "echo"},
                 "ports": [{"name": "tcp", "port": 80, "targetPort": 8080}]},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &second)
        .await
        .unwrap();
    let vip2 = service_address(&cluster, &client, "echo", "echo2").await;
    assert_ne!(vip2, vip);
    println!("the upgraded controller gave echo2 {vip2}");

    // Node 2 drained and deleted under load through node 1.
    let gone_node = &cluster.nodes()[1];
    let echo_pods: Api<Pod> = Api::namespaced(client.clone(), "echo");
    let (long, churn, started) = start_load(&cluster, target);
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            gone_node.name(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let mut deleted_at: BTreeMap<String, f64> = BTreeMap::new();
    for api in [&echo_pods, &system_pods] {
        let on_node = api
            .list(&ListParams::default().fields(&format!("spec.nodeName={}", gone_node.name())))
            .await
            .unwrap();
        for p in on_node.items {
            let name = p.metadata.name.clone().unwrap();
            let daemon = p
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "DaemonSet");
            if daemon {
                continue;
            }
            // The Eviction API honours PodDisruptionBudgets: retry while one says no.
            wait(&format!("evicting {name}"), &cluster, || async {
                api.evict(&name, &EvictParams::default())
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .await;
            deleted_at.insert(name, started.elapsed().as_secs_f64());
        }
    }
    println!("evicted from {}: {:?}", gone_node.name(), deleted_at.keys());
    let left = wait(
        "the echo Pods back to 3, all on node 1",
        &cluster,
        || async {
            let p = running_pods(&echo_pods, "app=echo", 3).await?;
            if p.iter().all(|p| p.node != gone_node.name()) {
                Ok(p)
            } else {
                Err(format!("{p:?}"))
            }
        },
    )
    .await;
    gone_node.kill_kubelet();
    nodes
        .delete(gone_node.name(), &DeleteParams::default())
        .await
        .unwrap();
    // Let every evicted Pod's grace run out under load, then a few seconds more.
    tokio::time::sleep(ECHO_GRACE + Duration::from_secs(3)).await;
    let churn = churn.stop();
    let long = long.stop();
    println!(
        "drain of {}: echo Pods now {left:?}\n  new connections: {churn}\n  established: {long}",
        gone_node.name()
    );
    assert_eq!(
        churn.failed, 0,
        "no new connection failed during the drain: {churn}"
    );
    assert!(
        long.failures.len() == long.failed_connections,
        "every failure is described: {long}"
    );
    check_failures("drain", &long.failures, &deleted_at);
    let spread = round_reaches(&cluster, target, 3, "through node 1 after the drain").await;
    println!(
        "after the drain, through {}: {spread}",
        cluster.nodes()[0].name()
    );
}
