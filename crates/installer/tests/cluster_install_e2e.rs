//! Issue 41, acceptance 1: the chart deployed as users deploy it. Rivora's image is built by
//! scripts/image from this checkout's binaries and imported on two nodes of a real cluster
//! (containerd + kubelet per node, controller-manager, scheduler: crates/kube-testbed's
//! cluster); `rivora install --wait` applies the chart with its default values, except
//! `apiServer.host` (there is no kube-proxy, so the `kubernetes` Service's ClusterIP does not
//! answer). Then:
//! - the rivorad DaemonSet's Pod runs on every node and the controller's two replicas run, all
//!   from Rivora's image, Ready (so their probes pass), not restarting;
//! - an AddressPool and a Deployment of three echo Pods behind a LoadBalancer Service: the
//!   controller assigns the address, the real EndpointSlice controller lists the Pods, and real
//!   TCP and UDP from the client segment, sent to the VIP through each node in turn, reach all
//!   three Pods (spread printed) with the VIP answering;
//! - a rollout of the echo Deployment (a new Pod template) under load, through node 1: no new
//!   connection fails, and no established connection breaks except those to a Pod being
//!   replaced (which end when their Pod goes).
//!
//! Needs root and the test dependencies (scripts/build-testdeps.sh, scripts/setup.sh).

mod cluster_common;

use std::net::SocketAddr;
use std::time::Duration;

use cluster_common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_from_rivoras_image_on_real_kubelets_and_serves_a_load_balancer_service() {
    let (cluster, kubeconfig) = cluster_with_rivora(2, &[]).await;
    install(&cluster, &kubeconfig);

    let client = cluster.admin_client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let want_image = format!("ghcr.io/rivora/rivora:{}", app_version());
    let rivorad = wait("a running rivorad on every node", &cluster, || {
        running_pods(&pods, "app.kubernetes.io/component=rivorad", 2)
    })
    .await;
    let controllers = wait("two running controllers", &cluster, || {
        running_pods(&pods, "app.kubernetes.io/component=controller", 2)
    })
    .await;
    let nodes: std::collections::BTreeSet<&str> = rivorad.iter().map(|p| p.node.as_str()).collect();
    assert_eq!(nodes.len(), 2, "one rivorad per node: {rivorad:?}");
    for p in rivorad.iter().chain(&controllers) {
        assert_eq!(p.image, want_image, "{} runs Rivora's image", p.name);
    }
    println!("rivorad: {rivorad:?}\ncontrollers: {controllers:?}");

    let vip = echo_service(&cluster, &client, "lab", "10.99.41.0/28", "echo", 3).await;
    let target = SocketAddr::new(vip, 80);
    for node in cluster.nodes() {
        cluster.route_via(vip, node).unwrap();
        let spread = round_reaches(&cluster, target, 3, &format!("through {}", node.name())).await;
        println!("through {}: {spread}", node.name());
    }

    // A rollout under load through node 1.
    cluster.route_via(vip, &cluster.nodes()[0]).unwrap();
    let echo_pods: Api<Pod> = Api::namespaced(client.clone(), "echo");
    let before: Vec<String> = running_pods(&echo_pods, "app=echo", 3)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    let (long, churn, _) = start_load(&cluster, target);
    Api::<Deployment>::namespaced(client.clone(), "echo")
        .patch(
            "echo",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"template": {"metadata": {"annotations": {"rollout": "1"}}}}}),
            ),
        )
        .await
        .unwrap();
    // Poll until every old Pod is gone, noting when each got its deletion timestamp (the
    // kubelet's SIGTERM follows at once; its SIGKILL, GRACE later).
    let t0 = std::time::Instant::now();
    let mut deleted_at: std::collections::BTreeMap<String, f64> = Default::default();
    let deadline = t0 + WAIT;
    let after = loop {
        let now = echo_pods
            .list(&kube::api::ListParams::default().labels("app=echo"))
            .await
            .unwrap();
        for p in &now.items {
            let name = p.metadata.name.clone().unwrap_or_default();
            if before.contains(&name) && p.metadata.deletion_timestamp.is_some() {
                deleted_at
                    .entry(name)
                    .or_insert_with(|| t0.elapsed().as_secs_f64());
            }
        }
        let old_left = now
            .items
            .iter()
            .filter(|p| before.contains(p.metadata.name.as_ref().unwrap()))
            .count();
        if old_left == 0
            && let Ok(pods) = running_pods(&echo_pods, "app=echo", 3).await
        {
            break pods;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the rollout did not finish within {WAIT:?}: {:?}\n{}",
            now.items
                .iter()
                .map(|p| &p.metadata.name)
                .collect::<Vec<_>>(),
            cluster.diagnostics(20)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // New connections keep being made through the new Pods for a few seconds.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let churn = churn.stop();
    let long = long.stop();
    println!("rollout: {before:?} -> {after:?}\n  new connections: {churn}\n  established: {long}");
    assert_eq!(
        churn.failed, 0,
        "no new connection failed during the rollout: {churn}"
    );
    assert!(churn.ok > 100, "the churn ran: {churn}");
    // Every established connection went to a Pod of `before`, all gone now. A connection may
    // end only with its Pod: the echo server keeps it until the kubelet's SIGKILL, GRACE after
    // the deletion. So each failure names a replaced Pod and comes no earlier than that Pod's
    // deletion + GRACE (less the 250 ms polling and a second of slack): a reset or stall while
    // the Pod still ran would come earlier.
    assert!(
        long.failures.len() == long.failed_connections,
        "every failure is described (12 connections, fewer than the cap): {long}"
    );
    check_failures("rollout", &long.failures, &deleted_at);
}
