//! Issue 17, acceptance 5: restart and initial sync under traffic. One node of the Kubernetes
//! lab, the real `rivorad --kubernetes --persist-datapath` against the real API server.
//! While connections run to Service A, rivorad is SIGKILLed; while it is down Service C is
//! deleted and Service F is created with an endpoint that cannot be translated (its address
//! is A's VIP). rivorad starts again:
//! - A's traffic never fails (new and long-lived connections), through the kill, the restart
//!   and the gate opening;
//! - the gate stays closed while F fails, and nothing is removed: C's VIP still forwards;
//! - once F's slice is fixed the gate opens and only then C's VIP goes.
//!
//! The slices are written by hand because only that reaches an untranslatable endpoint: this
//! tests the initial-sync gate at the API edge. A crash of the chart's rivorad under load on a
//! real cluster, restarted by its kubelet, is crates/installer/tests/cluster_endpoints_e2e.rs.
//!
//! Needs root and the test dependencies (scripts/build-testdeps.sh).

mod k8s_common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_common::*;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams};
use rivora_lab::cluster::Cluster;
use rivora_lab::{ConnectionChurn, LongLivedTcp, tcp_round};
use serde_json::json;

/// Whether rivorad has a VIP at `vip`:80 (Err: rivorad's API did not answer).
async fn has_vip(agent: &NodeAgent, vip: &str) -> Result<bool, String> {
    Ok(agent
        .vips()
        .await?
        .iter()
        .any(|v| v.address == vip && v.port == 80))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_agent_keeps_forwarding_and_removes_only_after_a_full_pass() {
    let t = K8sTest::new("rst").await;
    let lab = Cluster::build("ks", &[2]).expect("building the cluster lab");
    let node = &lab.nodes[0];
    let _servers = identity_servers(node);
    let mut agent = t.agent(&lab, 1).await;
    let node_name = t.node_name(1);
    let pods = pod_addrs(node);
    let service = |name: &'static str, vip: &'static str, eps: Vec<IpAddr>| {
        let (t, node_name) = (&t, &node_name);
        async move {
            t.service(name, vip, http_port(), json!({})).await;
            t.slice(name, &ready(&eps, node_name), http_slice_port())
                .await;
        }
    };
    let (a, c, f) = ("10.99.20.1", "10.99.20.3", "10.99.20.6");
    service("a", a, pods.clone()).await;
    service("c", c, pods.clone()).await;
    let persist = ["--persist-datapath"];
    agent.start_in(&node.ns, &persist);
    for v in [a, c] {
        wait_for("A's and C's VIPs are programmed", WAIT, || async {
            if has_vip(&agent, v).await? {
                Ok(())
            } else {
                Err(format!("no VIP {v}"))
            }
        })
        .await;
        lab.route_vip_via(v.parse().unwrap(), 1).unwrap();
    }
    let target_a = SocketAddr::new(a.parse().unwrap(), 80);
    let target_c = SocketAddr::new(c.parse().unwrap(), 80);
    let timeout = Duration::from_secs(2);
    let long = LongLivedTcp::start(
        &lab.client,
        target_a,
        10,
        Duration::from_millis(100),
        timeout,
    )
    .unwrap();
    let churn = ConnectionChurn::start(&lab.client2, target_a, 20, timeout).unwrap();

    // Down: C deleted, F created with A's VIP as its endpoint (the API server accepts it;
    // rivorad refuses to translate it: a loop).
    agent.kill();
    Api::<Service>::namespaced(t.admin.clone(), &t.ns)
        .delete("c", &DeleteParams::default())
        .await
        .unwrap();
    service("f", f, vec![a.parse().unwrap()]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    agent.start_in(&node.ns, &persist);

    // Phase 1: the gate is closed by F; C's VIP is kept and still forwards.
    let k = wait_for("the gate reports F blocking it", WAIT, || async {
        let k = agent.kubernetes().await?;
        if k.watches.iter().all(|w| w.listed)
            && k.blocking
                .iter()
                .any(|b| b.contains(&format!("{}/f", t.ns)))
        {
            Ok(k)
        } else {
            Err(format!("{k:?}"))
        }
    })
    .await;
    assert!(!k.initial_sync_complete, "{k:?}");
    assert_eq!(k.unclaimed_vips, 1, "C's VIP, adopted and unclaimed: {k:?}");
    assert!(
        has_vip(&agent, c).await.unwrap(),
        "nothing is removed while the gate is closed"
    );
    let r = tcp_round(&lab.client, target_c, 20, 4, Duration::from_secs(3));
    assert!(
        r.all_ok(),
        "the deleted Service's VIP still forwards until the gate opens: {r}"
    );

    // Phase 2: F fixed -> the gate opens -> C's VIP goes, A's stays.
    t.slice("f", &ready(&pods, &node_name), http_slice_port())
        .await;
    wait_for("the gate opens and C's VIP goes", WAIT, || async {
        let k = agent.kubernetes().await?;
        let c_there = has_vip(&agent, c).await?;
        if k.initial_sync_complete && !c_there {
            Ok(())
        } else {
            Err(format!(
                "gate open {}, C's VIP there {c_there}, blocking {:?}",
                k.initial_sync_complete, k.blocking
            ))
        }
    })
    .await;
    assert!(has_vip(&agent, a).await.unwrap());
    assert!(
        has_vip(&agent, f).await.unwrap(),
        "F is programmed once it translates"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let churn = churn.stop();
    let long = long.stop();
    eprintln!("churn: {churn}\nlong-lived: {long}");
    assert!(
        churn.all_ok(),
        "A's new connections through kill, restart and gate: {churn}"
    );
    assert!(long.all_ok(), "A's long-lived connections: {long}");
    assert!(churn.attempted >= 40, "{churn}");
}
