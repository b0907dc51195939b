//! Issue 21 (Meridio-2's resource model), acceptance 1 and 7 against the real API server: two
//! Gateways' worth of objects in one namespace; the real `rivorad --kubernetes --gateway NS/gw`
//! on node 1 of the Kubernetes lab (three pods, the targets, which own the VIPs on their
//! loopback) and `--gateway NS/gw2` on node 2 (one pod), as the ServiceAccount of
//! deploy/rbac/rivorad.yaml. The test writes what Meridio-2 would: DistributionGroups,
//! L34Routes, and the targets with their Maglev identifiers, in both endpoint forms
//! (LoadBalancerEndpointSlices, and the seed's EndpointSlices labelled with the group whose
//! zone is `maglev:<N>`). Real TCP and UDP from two clients, both families:
//! - each rule's traffic reaches exactly the targets of its group, without NAT;
//! - a higher-priority rule with a source CIDR takes its client, the other client falls to the
//!   lower rule;
//! - a TCP-flags byte match (`tcp[13:1]&0x02=0x02`) selects its rule for exactly the SYNs;
//! - a packet that matches no rule goes nowhere, and is counted;
//! - each node serves its own Gateway's VIPs only;
//! - moving a group's targets from one endpoint form to the other keeps every flow on its
//!   target (the same table).
//!
//! Needs root and the test dependencies (scripts/build-testdeps.sh).

mod k8s_common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use k8s_common::*;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use rivora_lab::cluster::{CLIENT_V4, CLIENT_V6, CLIENT2_V4, CLIENT2_V6, Cluster};
use rivora_lab::{IdentityServer, RoundReport, tcp_round_from_ports, udp_round_from_ports};
use serde_json::{Value, json};

const VIP4: &str = "10.220.100.21";
const VIP6: &str = "fd00:220:100::21";
/// gw2's VIPs.
const VIP2: &str = "10.220.100.22";
const VIP2_6: &str = "fd00:220:100::22";
const TIMEOUT: Duration = Duration::from_secs(2);

fn meridio_api(t: &K8sTest, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(
        rivora_k8s_api::meridio::GROUP,
        rivora_k8s_api::meridio::VERSION,
        kind,
    );
    Api::namespaced_with(
        t.admin.clone(),
        &t.ns,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

async fn apply(api: &Api<DynamicObject>, obj: Value) {
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let o: DynamicObject = serde_json::from_value(obj).unwrap();
    api.patch(&name, &PatchParams::apply(FM).force(), &Patch::Apply(&o))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

fn group(name: &str, max: u32) -> Value {
    json!({
        "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "DistributionGroup",
        "metadata": {"name": name},
        "spec": {"type": "Maglev", "maglev": {"maxEndpoints": max}},
    })
}

fn route(name: &str, group: &str, priority: i32, extra: Value) -> Value {
    let mut spec = json!({
        "parentRefs": [{"name": extra.get("gateway").and_then(Value::as_str).unwrap_or("gw")}],
        "backendRefs": [{"group": "meridio-2.nordix.org", "kind": "DistributionGroup", "name": group}],
        "destinationCIDRs": [format!("{VIP4}/32"), format!("{VIP6}/128")],
        "priority": priority,
    });
    for (k, v) in extra.as_object().unwrap() {
        if k != "gateway" {
            spec[k] = v.clone();
        }
    }
    json!({
        "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "L34Route",
        "metadata": {"name": name}, "spec": spec,
    })
}

/// The current endpoint form: one LoadBalancerEndpointSlice of `group` with the pods at
/// (identifier, pod index) pairs, both families each.
fn lb_slice(t: &K8sTest, lab: &Cluster, group: &str, members: &[(i32, usize)]) -> Value {
    lb_slice_on(t, lab, 1, "gw", group, members)
}

/// [`lb_slice`] for pods of node `n`, of Gateway `gw`.
fn lb_slice_on(
    t: &K8sTest,
    lab: &Cluster,
    n: usize,
    gw: &str,
    group: &str,
    members: &[(i32, usize)],
) -> Value {
    let node = lab.node(n).unwrap();
    let eps: Vec<Value> = members
        .iter()
        .map(|(id, i)| {
            let p = &node.pods[*i];
            json!({
                "target": {"name": p.name, "uid": format!("uid-{}", p.name)},
                "addresses": [
                    {"ip": p.v4.to_string(), "family": "IPv4"},
                    {"ip": p.v6.to_string(), "family": "IPv6"},
                ],
                "identifier": id, "ready": true,
            })
        })
        .collect();
    json!({
        "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "LoadBalancerEndpointSlice",
        "metadata": {"name": format!("{group}-1"),
                     "labels": {"meridio-2.nordix.org/distribution-group": group}},
        "spec": {"distributionGroupName": group,
                 "gatewayRef": {"name": gw, "namespace": t.ns}, "endpoints": eps},
    })
}

/// The seed's older form: core EndpointSlices (one per family) labelled with `group`, the
/// identifier in each endpoint's zone as `maglev:<N>`.
async fn core_slices(t: &K8sTest, lab: &Cluster, group: &str, members: &[(i32, usize)]) {
    let node = lab.node(1).unwrap();
    let api: Api<EndpointSlice> = Api::namespaced(t.admin.clone(), &t.ns);
    for (family, v6) in [("IPv4", false), ("IPv6", true)] {
        let eps: Vec<Value> = members
            .iter()
            .map(|(id, i)| {
                let p = &node.pods[*i];
                let addr = if v6 {
                    p.v6.to_string()
                } else {
                    p.v4.to_string()
                };
                json!({"addresses": [addr], "zone": format!("maglev:{id}"),
                       "conditions": {"ready": true}})
            })
            .collect();
        let name = format!("{group}-{}", family.to_lowercase());
        let s: EndpointSlice = serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name,
                         "labels": {"meridio-2.nordix.org/distribution-group": group}},
            "addressType": family, "endpoints": eps,
        }))
        .unwrap();
        api.patch(&name, &PatchParams::apply(FM).force(), &Patch::Apply(&s))
            .await
            .unwrap();
    }
}

fn at(vip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(vip.parse().unwrap(), port)
}

/// 100 exchanges from fixed source ports, checked: every one answered by the VIP itself, and
/// the target saw the client's own address (no NAT).
fn round(ns: &rivora_lab::Netns, tcp: bool, target: SocketAddr, first_port: u16) -> RoundReport {
    let r = if tcp {
        tcp_round_from_ports(ns, target, first_port, 100, 8, TIMEOUT)
    } else {
        udp_round_from_ports(ns, target, first_port, 100, 8, TIMEOUT)
    };
    assert!(r.all_ok() && r.ok == 100, "{target}: {r}");
    assert_eq!(r.wrong_peer, 0, "{target}: {r}");
    assert_eq!(r.source_rewritten, 0, "{target}: no NAT: {r}");
    r
}

fn names(r: &RoundReport) -> Vec<String> {
    r.per_backend.keys().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_meridio_gateway_on_the_classifier() {
    let t = K8sTest::new("mrd").await;
    let crds = serde_json::to_string(&rivora_k8s_api::meridio::crds()).unwrap();
    for crd in rivora_k8s_api::meridio::crds() {
        t.bed
            .install_crd_yaml(&serde_json::to_string(&crd).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{e}: {crds}"));
    }
    let lab = Cluster::build("mrd", &[3, 1]).unwrap();
    let node = lab.node(1).unwrap();
    let node2 = lab.node(2).unwrap();
    let pod = |i: usize| node.pods[i].name.clone();
    let mut servers: Vec<IdentityServer> = Vec::new();
    // gw's targets own VIP4/VIP6, gw2's VIP2.
    let owners = node
        .pods
        .iter()
        .map(|p| (p, vec![VIP4, VIP6]))
        .chain(node2.pods.iter().map(|p| (p, vec![VIP2, VIP2_6])));
    for (p, vips) in owners {
        p.ns.run(&["ip", "link", "set", "lo", "up"]).unwrap();
        for v in &vips {
            let cmd = if v.contains(':') {
                format!("ip -6 addr add {v}/128 dev lo nodad")
            } else {
                format!("ip addr add {v}/32 dev lo")
            };
            p.ns.run(&cmd.split(' ').collect::<Vec<_>>()).unwrap();
        }
        let addrs: Vec<SocketAddr> = vips
            .iter()
            .flat_map(|v| [80u16, 9000].map(|port| at(v, port)))
            .collect();
        servers.push(IdentityServer::start(&p.ns, &p.name, &addrs).unwrap());
    }
    for v in [VIP4, VIP6] {
        lab.route_vip_via(v.parse().unwrap(), 1).unwrap();
    }
    for v in [VIP2, VIP2_6] {
        lab.route_vip_via(v.parse().unwrap(), 2).unwrap();
    }

    let groups = meridio_api(&t, "DistributionGroup", "distributiongroups");
    let routes = meridio_api(&t, "L34Route", "l34routes");
    let lbes = meridio_api(
        &t,
        "LoadBalancerEndpointSlice",
        "loadbalancerendpointslices",
    );
    apply(&groups, group("dg-a", 32)).await;
    apply(&groups, group("dg-b", 8)).await;
    apply(
        &routes,
        route(
            "web",
            "dg-a",
            10,
            json!({"destinationPorts": ["80"], "protocols": ["TCP", "UDP"]}),
        ),
    )
    .await;
    apply(
        &routes,
        route(
            "udp-range",
            "dg-b",
            20,
            json!({"destinationPorts": ["9000-9100"], "protocols": ["UDP"]}),
        ),
    )
    .await;
    apply(
        &routes,
        route(
            "from-client2",
            "dg-b",
            30,
            json!({"destinationPorts": ["80"], "protocols": ["TCP"],
                   "sourceCIDRs": [format!("{CLIENT2_V4}/32"), format!("{CLIENT2_V6}/128")]}),
        ),
    )
    .await;
    // A TCP-flags byte match: the SYNs of the first client's `web` connections (to the same
    // group, so the connections work and only the counters tell the rules apart; client 2's
    // SYNs must stay with `from-client2`, or its connections would be split between groups).
    apply(
        &routes,
        route(
            "web-syn",
            "dg-a",
            40,
            json!({"destinationPorts": ["80"], "protocols": ["TCP"],
                   "sourceCIDRs": [format!("{CLIENT_V4}/32"), format!("{CLIENT_V6}/128")],
                   "byteMatches": ["tcp[13:1]&0x02=0x02"]}),
        ),
    )
    .await;
    // dg-a: pods 0 and 1 in the current form; dg-b: pod 2 in the older form.
    apply(&lbes, lb_slice(&t, &lab, "dg-a", &[(0, 0), (1, 1)])).await;
    core_slices(&t, &lab, "dg-b", &[(3, 2)]).await;
    // The second Gateway: its group, route and target on node 2.
    apply(&groups, group("dg-c", 4)).await;
    let mut gw2_route = route(
        "gw2-web",
        "dg-c",
        10,
        json!({"gateway": "gw2", "destinationPorts": ["80"], "protocols": ["TCP", "UDP"]}),
    );
    gw2_route["spec"]["destinationCIDRs"] = json!([format!("{VIP2}/32"), format!("{VIP2_6}/128")]);
    apply(&routes, gw2_route).await;
    apply(&lbes, lb_slice_on(&t, &lab, 2, "gw2", "dg-c", &[(0, 0)])).await;

    let mut agent = t.agent(&lab, 1).await;
    let gateway = format!("{}/gw", t.ns);
    agent.start_in(&node.ns, &["--gateway", &gateway]);
    let mut agent2 = t.agent(&lab, 2).await;
    let gateway2 = format!("{}/gw2", t.ns);
    agent2.start_in(&node2.ns, &["--gateway", &gateway2]);
    for (a, vip) in [(&agent, VIP4), (&agent2, VIP2)] {
        wait_for("the Gateway's rules forward", WAIT, || async {
            let r = tcp_round_from_ports(&lab.client, at(vip, 80), 30000, 1, 1, TIMEOUT);
            if r.ok == 1 {
                Ok(())
            } else {
                Err(format!("{r}\n{}", a.log()))
            }
        })
        .await;
    }
    // Each node serves its own Gateway only.
    let vips_of = |c: &rivora_api::ClassifierStatus| {
        c.vips.iter().map(|v| v.address.clone()).collect::<Vec<_>>()
    };
    let c1 = agent.api().classifier().await.unwrap();
    let c2 = agent2.api().classifier().await.unwrap();
    assert_eq!(vips_of(&c1), [VIP4, VIP6], "node 1 serves gw");
    assert_eq!(vips_of(&c2), [VIP2, VIP2_6], "node 2 serves gw2");
    for vip in [VIP2, VIP2_6] {
        for tcp in [true, false] {
            let r = round(&lab.client, tcp, at(vip, 80), 31000);
            assert_eq!(names(&r), [node2.pods[0].name.clone()], "gw2's target: {r}");
        }
    }

    let (dg_a, dg_b) = (vec![pod(0), pod(1)], vec![pod(2)]);
    for vip in [VIP4, VIP6] {
        // `web`: TCP and UDP 80 from the first client to dg-a only, spread over both.
        for tcp in [true, false] {
            let r = round(&lab.client, tcp, at(vip, 80), 20000);
            assert_eq!(names(&r), dg_a, "{vip} web tcp={tcp}: {r}");
        }
        // `from-client2` (priority 30, its source CIDR) takes client 2's TCP 80 to dg-b;
        // client 2's UDP 80 is not in it and falls to `web`.
        let r = round(&lab.client2, true, at(vip, 80), 21000);
        assert_eq!(names(&r), dg_b, "{vip} client 2 tcp: {r}");
        let r = round(&lab.client2, false, at(vip, 80), 21000);
        assert_eq!(names(&r), dg_a, "{vip} client 2 udp: {r}");
        // `udp-range`: UDP 9000 to dg-b.
        let r = round(&lab.client, false, at(vip, 9000), 22000);
        assert_eq!(names(&r), dg_b, "{vip} udp 9000: {r}");
        // TCP 9000 matches no rule: dropped, and counted on the VIP.
        let other = |c: &rivora_api::ClassifierStatus| {
            c.vips
                .iter()
                .find(|v| v.address == vip)
                .map(|v| v.counters.other)
                .unwrap()
        };
        let before = other(&agent.api().classifier().await.unwrap());
        let r = tcp_round_from_ports(&lab.client, at(vip, 9000), 23000, 5, 5, TIMEOUT);
        assert_eq!(r.ok, 0, "{vip}: TCP 9000 matches no rule: {r}");
        let after = other(&agent.api().classifier().await.unwrap());
        assert!(
            after >= before + 5,
            "{vip}: unmatched SYNs counted: {before} -> {after}"
        );
    }
    // `web-syn` counted exactly the connections' SYNs (one each, unless a SYN was resent),
    // `web` everything else of them.
    let syn = |c: &rivora_api::ClassifierStatus| {
        let name = format!("{}/web-syn", t.ns);
        c.rules
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.counters.packets)
            .unwrap()
    };
    let before = syn(&agent.api().classifier().await.unwrap());
    round(&lab.client, true, at(VIP4, 80), 25000);
    let syns = syn(&agent.api().classifier().await.unwrap()) - before;
    assert!(
        (100..=110).contains(&syns),
        "web-syn matched {syns} packets for 100 connections"
    );

    // Acceptance 7: the same targets in the other form give the same table. The flows of
    // fixed source ports are counted per target before and after dg-a moves to the older
    // form (and keeps its identifiers); any other table would move some of them.
    let before: BTreeMap<String, usize> = round(&lab.client, true, at(VIP4, 80), 24000).per_backend;
    core_slices(&t, &lab, "dg-a", &[(0, 0), (1, 1)]).await;
    lbes.delete("dg-a-1", &DeleteParams::default())
        .await
        .unwrap();
    // Both forms list the same targets, so the classifier does not change at all: wait until
    // rivorad's watches hold only gw2's LoadBalancerEndpointSlice and both older-form slices
    // of each group, then compare.
    wait_for("rivorad reads dg-a from the older form", WAIT, || async {
        let k = agent.kubernetes().await?;
        let objects = |kind: &str| k.watches.iter().find(|w| w.kind == kind).map(|w| w.objects);
        match (
            objects("LoadBalancerEndpointSlice"),
            objects("EndpointSlice (distribution group)"),
        ) {
            // gw2's slice stays.
            (Some(1), Some(4)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let after = round(&lab.client, true, at(VIP4, 80), 24000).per_backend;
    assert_eq!(before, after, "the older endpoint form moved flows");
    for a in [&mut agent, &mut agent2] {
        let log = a.stop();
        assert!(!log.contains("Meridio-2 object refused"), "{log}");
    }
    drop(servers);
    assert_lab_removed(lab);
}
