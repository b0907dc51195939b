//! Issue 17, acceptance 3: a rollout under traffic. One node of the Kubernetes lab with six
//! pods, the real `rivorad --kubernetes` against the real API server; a Service (ETP Cluster,
//! every endpoint on this node) starts with pods 1-3, and the test replaces them one by one as
//! a Deployment's rollout does through the EndpointSlice: the old endpoint turns
//! ready=false, serving=true, terminating=true for 5 s beside its ready replacement, then
//! leaves the slice and its pod stops. Meanwhile 30 long-lived connections exchange a line
//! every 100 ms and a second stream opens 20 connections per second:
//! - no new connection fails (a terminating endpoint takes no new flows, its replacement does);
//! - a long-lived connection on a terminating pod lives until its pod is removed, and not a
//!   moment less: before each removal, exactly the connections of the pods removed earlier
//!   have ended.
//!
//! Needs root and the test dependencies (scripts/build-testdeps.sh).

mod k8s_common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_common::*;
use rivora_lab::cluster::Cluster;
use rivora_lab::{ConnectionChurn, LongLivedTcp};
use serde_json::json;

/// The slice: (pod address, terminating) for each endpoint listed, all on `node`.
async fn write_slice(t: &K8sTest, node: &str, endpoints: &[(IpAddr, bool)]) {
    let eps: Vec<Ep> = endpoints
        .iter()
        .map(|(addr, terminating)| Ep {
            addr: *addr,
            node,
            terminating: *terminating,
        })
        .collect();
    t.slice("web", &eps, http_slice_port()).await;
}

/// The VIP's backends as (`addr:port`, state), sorted.
async fn backends(node: &NodeAgent, vip: &str) -> Result<Vec<(String, String)>, String> {
    let vips = node.vips().await?;
    let v = vips
        .iter()
        .find(|v| v.address == vip && v.port == 80)
        .ok_or_else(|| format!("no VIP {vip}:80 yet"))?;
    let mut b: Vec<(String, String)> = v
        .backends
        .iter()
        .map(|b| (format!("{}:{}", b.address, b.port), b.state.clone()))
        .collect();
    b.sort();
    Ok(b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_fails_no_new_connection_and_ends_old_ones_only_with_their_pods() {
    let t = K8sTest::new("roll").await;
    let lab = Cluster::build("kr", &[6]).expect("building the cluster lab");
    let node = &lab.nodes[0];
    let mut servers: Vec<Option<_>> = identity_servers(node).into_iter().map(Some).collect();
    let node_name = t.node_name(1);
    let mut agent = t.agent(&lab, 1).await;
    let vip = "10.99.18.1";
    t.service("web", vip, http_port(), json!({})).await;
    let pod = |i: usize| IpAddr::V4(node.pods[i].v4);
    let key = |i: usize| format!("{}:8080", node.pods[i].v4);
    // Pods 0-2 serve; 3-5 are their replacements.
    let mut slice: Vec<(IpAddr, bool)> = (0..3).map(|i| (pod(i), false)).collect();
    write_slice(&t, &node_name, &slice).await;
    agent.start_in(&node.ns, &[]);
    wait_for("the VIP lists pods 1-3", WAIT, || async {
        let b = backends(&agent, vip).await?;
        let want: Vec<(String, String)> = (0..3).map(|i| (key(i), "healthy".into())).collect();
        if b == want {
            Ok(())
        } else {
            Err(format!("{b:?}"))
        }
    })
    .await;

    let target = SocketAddr::new(vip.parse().unwrap(), 80);
    lab.route_vip_via(target.ip(), 1).unwrap();
    let timeout = Duration::from_secs(2);
    let long = LongLivedTcp::start(&lab.client, target, 30, Duration::from_millis(100), timeout)
        .expect("30 long-lived connections");
    let churn = ConnectionChurn::start(&lab.client2, target, 20, timeout).unwrap();
    let on_pod = |i: usize| {
        long.per_backend()
            .get(&node.pods[i].name)
            .copied()
            .unwrap_or(0)
    };
    let mut ended_expected = 0;
    // Indexes: `old` names a pod, its server and its replacement (old + 3).
    #[allow(clippy::needless_range_loop)]
    for old in 0..3 {
        let new = old + 3;
        // The old endpoint terminates beside its ready replacement.
        for e in slice.iter_mut().filter(|e| e.0 == pod(old)) {
            e.1 = true;
        }
        slice.push((pod(new), false));
        write_slice(&t, &node_name, &slice).await;
        wait_for(
            "the old pod drains, its replacement serves",
            WAIT,
            || async {
                let b = backends(&agent, vip).await?;
                let drains = b.contains(&(key(old), "draining".into()));
                let serves = b.contains(&(key(new), "healthy".into()));
                if drains && serves {
                    Ok(())
                } else {
                    Err(format!("{b:?}"))
                }
            },
        )
        .await;
        // Five seconds of terminating: its connections keep going.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (_, ended) = long.snapshot();
        assert_eq!(
            ended,
            ended_expected,
            "before pod {} left, {ended} long-lived connections had ended (the removed pods had {ended_expected})",
            old + 1
        );
        // It leaves the slice and its pod stops.
        slice.retain(|e| e.0 != pod(old));
        write_slice(&t, &node_name, &slice).await;
        servers[old].take();
        ended_expected += on_pod(old);
        wait_for("the removed pod's connections end", WAIT, || async {
            let (_, ended) = long.snapshot();
            if ended == ended_expected {
                Ok(())
            } else {
                Err(format!("{ended} ended, {ended_expected} expected"))
            }
        })
        .await;
    }
    let c = churn.stop();
    let l = long.stop();
    eprintln!("churn: {c}\nlong-lived: {l}");
    assert!(
        c.all_ok(),
        "no new connection may fail during the rollout: {c}"
    );
    assert!(c.attempted >= 20 * 15, "the churn ran: {c}");
    assert!(
        (3..6).all(|i| c.per_backend.contains_key(&node.pods[i].name)),
        "the replacements took new connections: {c}"
    );
    assert_eq!(
        l.failed_connections, 30,
        "every initial connection was on a replaced pod: {l}"
    );
    assert!(!agent.log().contains("ERROR"), "{}", agent.log());
    drop(agent);
    drop(servers);
}
