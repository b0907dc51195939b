//! Issue 17, acceptance 2: `externalTrafficPolicy: Local` end to end. Two nodes of the
//! Kubernetes lab (crates/lab cluster.rs: node 1 with two pods, node 2 with one), each running
//! the real `rivorad --kubernetes` against the real API server (kube-testbed) as the
//! ServiceAccount of deploy/rbac/rivorad.yaml; the test writes the Nodes, a LoadBalancer
//! Service with its status (as rivora-controller would) and its EndpointSlice (as the
//! controller-manager would). Real TCP and UDP from a client namespace, routed to the VIP
//! through one node and then the other:
//! - each node sends the VIP's flows to its own pods only, and every pod sees the client's
//!   address (no source translation for Local);
//! - healthCheckNodePort answers 200 (kube-proxy's body, weight = local endpoints) on a node
//!   with local ready endpoints and 503 on one without, and flips to 503 when the node's last
//!   local endpoint turns terminating, while its traffic still reaches that endpoint (the
//!   terminating fallback).
//!
//! Needs root and the test dependencies (scripts/build-testdeps.sh).

mod k8s_common;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_common::*;
use rivora_lab::cluster::Cluster;
use rivora_lab::{tcp_round, udp_round};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(3);
const FLOWS: usize = 600;

/// The slice's endpoints: (pod address, its node, terminating); TCP and UDP on 8080.
async fn write_slice(t: &K8sTest, endpoints: &[(IpAddr, &str, bool)]) {
    let eps: Vec<Ep> = endpoints
        .iter()
        .map(|(addr, node, terminating)| Ep {
            addr: *addr,
            node,
            terminating: *terminating,
        })
        .collect();
    let ports = json!([
        {"name": "tcp", "port": 8080, "protocol": "TCP"},
        {"name": "udp", "port": 8080, "protocol": "UDP"},
    ]);
    t.slice("web", &eps, ports).await;
}

/// The VIP's backends on `node` as `addr:port` for `proto`, or what is there instead.
async fn backends_of(node: &NodeAgent, vip: &str, proto: &str) -> Result<Vec<String>, String> {
    let vips = node.vips().await?;
    let v = vips
        .iter()
        .find(|v| v.address == vip && v.port == 80 && v.protocol == proto)
        .ok_or_else(|| format!("{}: no {proto} VIP {vip}:80 yet", node.name))?;
    let mut b: Vec<String> = v
        .backends
        .iter()
        .filter(|b| b.state != "draining")
        .map(|b| format!("{}:{}", b.address, b.port))
        .collect();
    b.sort();
    Ok(b)
}

/// 600 TCP connections and 600 UDP exchanges to the VIP from the client: (per pod, TCP; per
/// pod, UDP), after checking every flow succeeded, came back from the VIP and reached a pod
/// that saw the client's own address.
fn traffic(lab: &Cluster, vip: SocketAddr) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let t = tcp_round(&lab.client, vip, FLOWS, 16, TIMEOUT);
    assert!(t.all_ok(), "{t}");
    assert_eq!(t.wrong_peer, 0, "the client always sees the VIP: {t}");
    assert_eq!(
        t.source_rewritten, 0,
        "ETP Local keeps the client's address: {t}"
    );
    let u = udp_round(&lab.client, vip, FLOWS, 16, TIMEOUT);
    assert!(u.all_ok(), "{u}");
    assert_eq!(u.wrong_peer, 0, "{u}");
    assert_eq!(u.source_rewritten, 0, "{u}");
    (t.per_backend, u.per_backend)
}

/// healthCheckNodePort of `node` (its uplink address), asked from the client.
fn healthz(lab: &Cluster, n: usize, port: u16) -> Result<(u16, String, String), String> {
    let addr = SocketAddr::new(lab.node(n).unwrap().v4.into(), port);
    http_get_in(&lab.client, addr, "/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etp_local_uses_local_pods_only_keeps_the_client_address_and_serves_health() {
    let t = K8sTest::new("etpl").await;
    let lab = Cluster::build("kl", &[2, 1]).expect("building the cluster lab");
    let servers: Vec<_> = lab.nodes.iter().flat_map(identity_servers).collect();
    let mut agents = Vec::new();
    for n in 1..=lab.nodes.len() {
        agents.push(t.agent(&lab, n).await);
    }
    let node_names: Vec<String> = agents.iter().map(|a| a.name.clone()).collect();

    // The Service: ETP Local, TCP and UDP on 80, and its address (rivora-controller's job).
    let vip = "10.99.17.1";
    let ports = json!([
        {"name": "tcp", "port": 80, "protocol": "TCP", "targetPort": 8080},
        {"name": "udp", "port": 80, "protocol": "UDP", "targetPort": 8080},
    ]);
    let created = t
        .service("web", vip, ports, json!({"externalTrafficPolicy": "Local"}))
        .await;
    let hc_port = created
        .spec
        .and_then(|s| s.health_check_node_port)
        .expect("the API server allocates a healthCheckNodePort") as u16;
    let pods: Vec<(IpAddr, String)> = lab
        .nodes
        .iter()
        .zip(&node_names)
        .flat_map(|(n, name)| n.pods.iter().map(move |p| (IpAddr::V4(p.v4), name.clone())))
        .collect();
    let all_ready: Vec<(IpAddr, &str, bool)> =
        pods.iter().map(|(a, n)| (*a, n.as_str(), false)).collect();
    write_slice(&t, &all_ready).await;
    for (agent, node) in agents.iter_mut().zip(&lab.nodes) {
        agent.start_in(&node.ns, &[]);
    }

    // Each node programs its own pods only.
    for (i, agent) in agents.iter().enumerate() {
        let want: Vec<String> = lab.nodes[i]
            .pods
            .iter()
            .map(|p| format!("{}:8080", p.v4))
            .collect();
        for proto in ["tcp", "udp"] {
            wait_for("each node's VIP lists its local pods", WAIT, || async {
                let got = backends_of(agent, vip, proto).await?;
                if got == want {
                    Ok(())
                } else {
                    Err(format!(
                        "{}: {proto} backends {got:?}, want {want:?}",
                        agent.name
                    ))
                }
            })
            .await;
        }
    }

    let target = SocketAddr::new(vip.parse().unwrap(), 80);
    for n in [1, 2] {
        lab.route_vip_via(target.ip(), n).unwrap();
        let (tcp, udp) = traffic(&lab, target);
        let local: Vec<&str> = lab.nodes[n - 1]
            .pods
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        for (proto, per) in [("tcp", &tcp), ("udp", &udp)] {
            assert!(
                per.keys().all(|k| local.contains(&k.as_str())),
                "via node {n}, {proto} reached {per:?}; local pods {local:?}"
            );
            assert_eq!(per.values().sum::<usize>(), FLOWS);
            assert_eq!(per.len(), local.len(), "every local pod served: {per:?}");
        }
        eprintln!("via node {n}: tcp {tcp:?}, udp {udp:?}");
    }

    // healthCheckNodePort: weight = the node's ready local endpoints.
    for (n, pods_here) in [(1, 2), (2, 1)] {
        let (status, weight, body) = wait_for("healthz answers 200", WAIT, || async {
            match healthz(&lab, n, hc_port)? {
                r if r.0 == 200 => Ok(r),
                r => Err(format!("node {n}: {r:?}")),
            }
        })
        .await;
        assert_eq!(
            (status, weight.as_str()),
            (200, pods_here.to_string().as_str())
        );
        assert!(
            body.contains(&format!("\"localEndpoints\": {pods_here}"))
                && body.contains("\"serviceProxyHealthy\": true"),
            "node {n}: {body}"
        );
    }

    // Node 2's only pod turns terminating: 503 there, while node 2 still sends the VIP's
    // flows to it (no ready local endpoint left: the terminating fallback), and node 1 is
    // unchanged.
    let mut terminating = all_ready.clone();
    terminating[2].2 = true;
    write_slice(&t, &terminating).await;
    let (status, _, body) = wait_for("node 2's healthz turns 503", WAIT, || async {
        match healthz(&lab, 2, hc_port)? {
            r if r.0 == 503 => Ok(r),
            r => Err(format!("node 2: {r:?}")),
        }
    })
    .await;
    assert_eq!(status, 503);
    assert!(body.contains("\"localEndpoints\": 0"), "{body}");
    assert_eq!(healthz(&lab, 1, hc_port).unwrap().0, 200);
    lab.route_vip_via(target.ip(), 2).unwrap();
    let (tcp, udp) = traffic(&lab, target);
    assert_eq!(tcp.get("pod-2-1"), Some(&FLOWS), "{tcp:?}");
    assert_eq!(udp.get("pod-2-1"), Some(&FLOWS), "{udp:?}");

    for a in &agents {
        assert!(!a.log().contains("ERROR"), "{}: {}", a.name, a.log());
    }
    drop(agents);
    drop(servers);
    assert_lab_removed(lab);
}
