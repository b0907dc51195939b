//! Issue 17, acceptance 1: `externalTrafficPolicy: Cluster` end to end, IPv4 and IPv6. Two
//! nodes of the Kubernetes lab (crates/lab cluster.rs: node 1 with two pods, node 2 with one),
//! each running the real `rivorad --kubernetes` against the real API server as the
//! ServiceAccount of deploy/rbac/rivorad.yaml. A dual-stack LoadBalancer Service (TCP and UDP
//! on 80) with one EndpointSlice per family; real TCP connections and UDP exchanges from the
//! client, routed to the VIP through one node and then the other:
//! - each node spreads the flows over the pods of both nodes in proportion to their number
//!   (each of the three pods within 5 points of a third);
//! - pods on the receiving node see the client's address; the pod on the other node sees the
//!   receiving node's address (the node translated the source, bpf/snat.h, so the pod's reply
//!   came back through it instead of leaving its own node straight for the client);
//! - the client always sees the VIP.
//!
//! The source ports are fixed per round, so the flows (and so their spread) are the same on
//! every run. Needs root and the test dependencies (scripts/build-testdeps.sh).

mod k8s_common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_common::*;
use rivora_lab::cluster::{CLIENT_V4, CLIENT_V6, Cluster};
use rivora_lab::{tcp_round_from_ports, udp_round_from_ports};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(3);
const FLOWS: usize = 600;
const VIP4: &str = "10.99.19.1";
const VIP6: &str = "fd00:99:19::1";

/// The VIP's backends on `node` for (`vip`, `proto`), sorted, or what is there instead.
async fn backends_of(node: &NodeAgent, vip: &str, proto: &str) -> Result<Vec<String>, String> {
    let vips = node.vips().await?;
    let v = vips
        .iter()
        .find(|v| v.address == vip && v.port == 80 && v.protocol == proto)
        .ok_or_else(|| format!("{}: no {proto} VIP {vip}:80 yet", node.name))?;
    let mut b: Vec<String> = v
        .backends
        .iter()
        .map(|b| SocketAddr::new(b.address.parse().unwrap(), b.port).to_string())
        .collect();
    b.sort();
    Ok(b)
}

/// Checks one round: every flow answered by the VIP, spread over the three pods within 5
/// points of a third each, and each pod saw `want_seen[pod]` as the client.
fn check_round(
    what: &str,
    r: &rivora_lab::RoundReport,
    want_seen: &BTreeMap<String, IpAddr>,
) -> BTreeMap<String, f64> {
    assert!(r.all_ok(), "{what}: {r}");
    assert_eq!(
        r.wrong_peer, 0,
        "{what}: the client always sees the VIP: {r}"
    );
    let shares = r.shares();
    assert_eq!(
        shares.len(),
        want_seen.len(),
        "{what}: every pod of both nodes served: {r}"
    );
    for (pod, share) in &shares {
        assert!(
            (share - 1.0 / 3.0).abs() <= 0.05,
            "{what}: {pod} took {:.1}% of the flows, want 33.3% +- 5: {r}",
            share * 100.0
        );
    }
    for (pod, seen) in &r.seen_by_backend {
        assert_eq!(
            seen,
            &BTreeSet::from([want_seen[pod]]),
            "{what}: the client address {pod} saw"
        );
    }
    shares
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etp_cluster_spreads_over_both_nodes_and_translates_the_source_for_remote_pods() {
    let t = K8sTest::new("etpc").await;
    let lab = Cluster::build("kc", &[2, 1]).expect("building the cluster lab");
    let servers: Vec<_> = lab.nodes.iter().flat_map(identity_servers).collect();
    let mut agents = Vec::new();
    for n in 1..=lab.nodes.len() {
        agents.push(t.agent(&lab, n).await);
    }
    let node_names: Vec<String> = agents.iter().map(|a| a.name.clone()).collect();

    // The Service (dual-stack, ETP Cluster) with its two addresses, and a slice per family.
    let ports = json!([
        {"name": "tcp", "port": 80, "protocol": "TCP", "targetPort": 8080},
        {"name": "udp", "port": 80, "protocol": "UDP", "targetPort": 8080},
    ]);
    t.service(
        "web",
        &format!("{VIP4},{VIP6}"),
        ports,
        json!({
            "externalTrafficPolicy": "Cluster",
            "ipFamilyPolicy": "RequireDualStack",
            "ipFamilies": ["IPv4", "IPv6"],
        }),
    )
    .await;
    let slice_ports = json!([
        {"name": "tcp", "port": 8080, "protocol": "TCP"},
        {"name": "udp", "port": 8080, "protocol": "UDP"},
    ]);
    let mut eps4 = Vec::new();
    let mut eps6 = Vec::new();
    for (node, name) in lab.nodes.iter().zip(&node_names) {
        for p in &node.pods {
            for (eps, addr) in [(&mut eps4, IpAddr::V4(p.v4)), (&mut eps6, IpAddr::V6(p.v6))] {
                eps.push(Ep {
                    addr,
                    node: name,
                    terminating: false,
                });
            }
        }
    }
    t.slice("web", &eps4, slice_ports.clone()).await;
    t.slice6("web", &eps6, slice_ports).await;
    for (agent, node) in agents.iter_mut().zip(&lab.nodes) {
        agent.start_in(&node.ns, &[]);
    }

    // Every node programs every pod of the cluster, in both families.
    for agent in &agents {
        for (vip, v6) in [(VIP4, false), (VIP6, true)] {
            let mut want: Vec<String> = lab
                .nodes
                .iter()
                .flat_map(|n| &n.pods)
                .map(|p| {
                    let a: IpAddr = if v6 { p.v6.into() } else { p.v4.into() };
                    SocketAddr::new(a, 8080).to_string()
                })
                .collect();
            want.sort();
            for proto in ["tcp", "udp"] {
                wait_for(
                    "each node's VIP lists the pods of both nodes",
                    WAIT,
                    || async {
                        let got = backends_of(agent, vip, proto).await?;
                        if got == want {
                            Ok(())
                        } else {
                            Err(format!(
                                "{}: {proto} {vip}: {got:?}, want {want:?}",
                                agent.name
                            ))
                        }
                    },
                )
                .await;
            }
        }
    }

    // rivoractl's view: the other node's pods are marked source-translated, this node's not.
    for (i, agent) in agents.iter().enumerate() {
        for v in agent.vips().await.unwrap() {
            for b in &v.backends {
                let here = lab.nodes[i]
                    .pods
                    .iter()
                    .any(|p| b.address == p.v4.to_string() || b.address == p.v6.to_string());
                assert_eq!(
                    b.snat, !here,
                    "{}: {} {}:{} snat flag (node {:?})",
                    agent.name, v.name, b.address, b.port, b.node
                );
            }
        }
    }

    let mut first_port = 20000u16;
    for (vip, client) in [(VIP4, IpAddr::V4(CLIENT_V4)), (VIP6, IpAddr::V6(CLIENT_V6))] {
        let target = SocketAddr::new(vip.parse().unwrap(), 80);
        for n in [1, 2] {
            lab.route_vip_via(target.ip(), n).unwrap();
            let node = lab.node(n).unwrap();
            let node_addr: IpAddr = if client.is_ipv6() {
                node.v6.into()
            } else {
                node.v4.into()
            };
            // Pods of the receiving node see the client; the others see the node.
            let want_seen: BTreeMap<String, IpAddr> = lab
                .nodes
                .iter()
                .enumerate()
                .flat_map(|(i, nd)| {
                    let seen = if i + 1 == n { client } else { node_addr };
                    nd.pods.iter().map(move |p| (p.name.clone(), seen))
                })
                .collect();
            let tcp = tcp_round_from_ports(&lab.client, target, first_port, FLOWS, 16, TIMEOUT);
            let udp = udp_round_from_ports(&lab.client, target, first_port, FLOWS, 16, TIMEOUT);
            first_port += FLOWS as u16;
            let ts = check_round(&format!("tcp {vip} via node {n}"), &tcp, &want_seen);
            let us = check_round(&format!("udp {vip} via node {n}"), &udp, &want_seen);
            eprintln!("{vip} via node {n}: tcp shares {ts:.3?}, udp shares {us:.3?}");
        }
    }

    // What each node's datapath says it translated: as many mappings as flows it sent to the
    // other node's pod (a third of 4 x 600, give or take the spread), every one answered, no
    // port refused, nothing handed to the kernel.
    for (i, a) in agents.iter().enumerate() {
        let s = a.api().stats().await.unwrap();
        let snat = s.snat.expect("stats carry the source translation");
        let want_from = lab.node(i + 1).unwrap();
        assert_eq!(
            (snat.source_v4.as_deref(), snat.source_v6.as_deref()),
            (
                Some(want_from.v4.to_string().as_str()),
                Some(want_from.v6.to_string().as_str())
            ),
            "{}: the Node's InternalIPs are the source",
            a.name
        );
        let c = |k: &str| snat.counters.get(k).copied().unwrap_or(0);
        let remote_pods = lab.nodes[1 - i].pods.len() as f64 / 3.0;
        let expected = 4.0 * FLOWS as f64 * remote_pods;
        assert!(
            (c("allocated") as f64 - expected).abs() <= 0.05 * 4.0 * FLOWS as f64,
            "{}: {} mappings, about {expected} expected: {snat:?}",
            a.name,
            c("allocated")
        );
        assert!(
            c("replied") > 0 && c("forwarded") > c("allocated"),
            "{snat:?}"
        );
        assert_eq!(c("to_kernel"), 0, "{}: {snat:?}", a.name);
        let exhausted = s.drops.iter().find(|d| d.reason == "snat_exhausted");
        assert_eq!(exhausted.map(|d| d.packets), Some(0), "{}", a.name);
        eprintln!("{}: source translation {:?}", a.name, snat.counters);
    }

    for a in &agents {
        assert!(!a.log().contains("ERROR"), "{}: {}", a.name, a.log());
    }
    drop(agents);
    drop(servers);
    assert_lab_removed(lab);
}
