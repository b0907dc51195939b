//! `evaluate` on hand-built observations: a healthy cluster, then each rule of "wrong" alone.

use serde_json::{Value, json};

use super::*;

const NOW: &str = "2026-01-01T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

/// `NOW` minus `secs`, as an RFC 3339 string.
fn ago(secs: i64) -> String {
    Timestamp::from_second(now().as_second() - secs)
        .unwrap()
        .to_string()
}

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn daemonset(desired: i32, ready: i32, updated: i32) -> DaemonSet {
    from(json!({
        "metadata": {"name": "rivorad", "namespace": "rivora-system"},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/component": "rivorad"}},
            "template": {}
        },
        "status": {
            "desiredNumberScheduled": desired, "currentNumberScheduled": desired,
            "numberMisscheduled": 0, "numberReady": ready,
            "updatedNumberScheduled": updated, "numberAvailable": ready
        }
    }))
}

fn deployment(replicas: i32, ready: i32) -> Deployment {
    from(json!({
        "metadata": {"name": "rivora-controller", "namespace": "rivora-system"},
        "spec": {"replicas": replicas, "selector": {}, "template": {}},
        "status": {"replicas": replicas, "readyReplicas": ready, "updatedReplicas": replicas,
                   "availableReplicas": ready}
    }))
}

fn lease(holder: Option<&str>, renewed_ago: i64, duration: i32) -> Lease {
    from(json!({
        "metadata": {"name": "rivora-controller", "namespace": "rivora-system"},
        "spec": {"holderIdentity": holder, "renewTime": ago(renewed_ago),
                 "leaseDurationSeconds": duration}
    }))
}

fn pod(name: &str, node: &str) -> Pod {
    from(json!({
        "metadata": {"name": name, "namespace": "rivora-system"},
        "spec": {"nodeName": node, "containers": []}
    }))
}

fn node_status(name: &str, heartbeat_ago: i64) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                 "lastTransitionTime": ago(600)},
                {"type": "InitialSyncComplete", "status": "True", "reason": "Complete",
                 "message": "", "lastTransitionTime": ago(600)}
            ],
            "datapath": {"interface": "eth0", "xdpMode": "native", "abiVersion": 3,
                         "persistent": true},
            "vipCount": 4,
            "heartbeatTime": ago(heartbeat_ago),
            "announce": {
                "mode": "bgp",
                "bgpSessions": [
                    {"peer": "tor-a", "address": "10.0.0.1", "port": 179, "state": "Established"},
                    {"peer": "tor-b", "address": "10.0.0.2", "port": 179, "state": "Established"}
                ]
            }
        }
    })
}

fn rivora_node(v: Value) -> RivoraNode {
    from(v)
}

fn pool(name: &str, used: i64, total: i64, exhausted: bool) -> AddressPool {
    from(json!({
        "metadata": {"name": name},
        "spec": {"addresses": ["10.9.0.0/28"]},
        "status": {
            "conditions": [
                {"type": "Valid", "status": "True", "reason": "Valid", "message": "",
                 "lastTransitionTime": ago(600)},
                {"type": "Exhausted", "status": if exhausted {"True"} else {"False"},
                 "reason": if exhausted {"NoFreeAddress"} else {"FreeAddresses"}, "message": "",
                 "lastTransitionTime": ago(600)}
            ],
            "ipv4": {"total": total, "used": used, "available": total - used}
        }
    }))
}

/// A dual-stack pool as rivora-controller writes it: `(used, total)` per family, and the
/// `Valid` and `Exhausted` conditions as `(status, reason, message)`.
fn dual_pool(
    name: &str,
    ipv4: (i64, i64),
    ipv6: (i64, i64),
    valid: (&str, &str, &str),
    exhausted: (&str, &str, &str),
) -> AddressPool {
    let cond = |type_: &str, (status, reason, message): (&str, &str, &str)| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": ago(600)})
    };
    let counts = |(used, total): (i64, i64)| json!({"total": total, "used": used, "available": total - used});
    from(json!({
        "metadata": {"name": name},
        "spec": {"addresses": ["10.8.0.0/31", "fd00:8::/126"]},
        "status": {
            "conditions": [
                cond("Valid", valid),
                cond("Overlapping", ("False", "NoOverlap", "no other pool shares its addresses")),
                cond("Exhausted", exhausted)
            ],
            "ipv4": counts(ipv4),
            "ipv6": counts(ipv6)
        }
    }))
}

const VALID: (&str, &str, &str) = ("True", "Valid", "every address block is usable");

/// The State column of `pool`'s row in the Pools table.
fn pool_state(text: &str, pool: &str) -> String {
    let row = text
        .lines()
        .find(|l| l.starts_with(&format!("| {pool} ")))
        .unwrap_or_else(|| panic!("no row of {pool} in\n{text}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    cells[cells.len() - 2].to_string()
}

fn service(
    ns: &str,
    name: &str,
    ip: Option<&str>,
    condition: Option<(&str, &str, &str)>,
) -> Service {
    let ingress: Vec<Value> = ip.iter().map(|ip| json!({"ip": ip})).collect();
    let conditions: Vec<Value> = condition
        .iter()
        .map(|(status, reason, message)| {
            json!({"type": "rivora.dev/AddressAssigned", "status": status, "reason": reason,
                   "message": message, "lastTransitionTime": ago(60)})
        })
        .collect();
    from(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "rivora.dev/lb"},
        "status": {"loadBalancer": {"ingress": ingress}, "conditions": conditions}
    }))
}

fn gateway(ns: &str, name: &str, address: Option<&str>, conditions: Value) -> Gateway {
    let addresses: Vec<Value> = address
        .iter()
        .map(|a| json!({"type": "IPAddress", "value": a}))
        .collect();
    from(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"gatewayClassName": "rivora", "listeners": []},
        "status": {"addresses": addresses, "conditions": conditions}
    }))
}

fn programmed_conditions() -> Value {
    json!([
        {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
         "lastTransitionTime": ago(60)},
        {"type": "Programmed", "status": "True", "reason": "Programmed", "message": "",
         "lastTransitionTime": ago(60)}
    ])
}

/// A healthy two-node cluster.
fn healthy() -> Observed {
    Observed {
        namespace: "rivora-system".into(),
        chart_version: Some("0.1.0".into()),
        now: now(),
        daemonset: Lookup::Found(daemonset(2, 2, 2)),
        deployment: Lookup::Found(deployment(2, 2)),
        lease_ref: LeaseRef::default_in("rivora-system"),
        lease: Lookup::Found(lease(Some("rivora-controller-abc"), 5, 15)),
        rivorad_pods: Lookup::Found(vec![
            pod("rivorad-x1", "node-a"),
            pod("rivorad-x2", "node-b"),
        ]),
        nodes: Lookup::Found(vec![
            rivora_node(node_status("node-a", 10)),
            rivora_node(node_status("node-b", 20)),
        ]),
        pools: Lookup::Found(vec![pool("default", 3, 16, false)]),
        services: Lookup::Found(vec![service(
            "web",
            "frontend",
            Some("10.9.0.1"),
            Some((
                "True",
                "Assigned",
                "assigned 10.9.0.1 from AddressPool default",
            )),
        )]),
        gateways: Lookup::Found(vec![gateway(
            "infra",
            "edge",
            Some("10.9.0.2"),
            programmed_conditions(),
        )]),
    }
}

/// The report's single problem, asserting there is exactly one.
fn only_problem(o: &Observed) -> String {
    let r = evaluate(o);
    assert!(!r.healthy());
    assert_eq!(r.problems.len(), 1, "{:#?}", r.problems);
    r.problems[0].clone()
}

#[test]
fn a_healthy_cluster_is_healthy() {
    let r = evaluate(&healthy());
    assert!(r.healthy(), "{:#?}", r.problems);
    assert_eq!(r.components.len(), 2);
    assert_eq!(r.components[0].ready, 2);
    assert_eq!(r.leader.holder.as_deref(), Some("rivora-controller-abc"));
    assert!(!r.leader.expired);
    assert_eq!(r.nodes.len(), 2);
    let a = &r.nodes[0];
    assert_eq!(a.name, "node-a");
    assert!(a.reported && a.datapath_attached && !a.stale);
    assert_eq!(a.xdp_mode.as_deref(), Some("native"));
    assert_eq!(a.vips, 4);
    assert_eq!(a.announce(), "BGP 2/2 established");
    assert_eq!(r.pools[0].used, 3);
    assert_eq!(r.pools[0].total, 16);
    assert!(r.unaddressed.is_empty());
    assert_eq!(r.services, Some(1));
    assert_eq!(r.gateways, Some(1));
}

#[test]
fn a_missing_daemonset_is_a_problem() {
    let mut o = healthy();
    o.daemonset = Lookup::Missing;
    let r = evaluate(&o);
    assert!(
        r.problems
            .iter()
            .any(|p| p.contains("DaemonSet rivora-system/rivorad is missing")),
        "{:#?}",
        r.problems
    );
    assert!(!r.components[0].present);
}

#[test]
fn an_unready_or_outdated_daemonset_is_a_problem() {
    let mut o = healthy();
    o.daemonset = Lookup::Found(daemonset(2, 1, 2));
    let p = only_problem(&o);
    assert!(
        p.contains("DaemonSet rivora-system/rivorad") && p.contains("1 of 2 Pods are ready"),
        "{p}"
    );

    o.daemonset = Lookup::Found(daemonset(2, 2, 1));
    let p = only_problem(&o);
    assert!(p.contains("1 of 2 Pods run the current template"), "{p}");
}

#[test]
fn a_missing_or_unready_deployment_is_a_problem() {
    let mut o = healthy();
    o.deployment = Lookup::Found(deployment(2, 1));
    let p = only_problem(&o);
    assert!(
        p.contains("Deployment rivora-system/rivora-controller") && p.contains("1 of 2 replicas"),
        "{p}"
    );

    o.deployment = Lookup::Missing;
    let p = only_problem(&o);
    assert!(
        p.contains("Deployment rivora-system/rivora-controller is missing"),
        "{p}"
    );

    o.deployment = Lookup::Unreadable("forbidden".into());
    let p = only_problem(&o);
    assert!(
        p.contains("could not read Deployment rivora-system/rivora-controller: forbidden"),
        "{p}"
    );
}

#[test]
fn no_lease_holder_or_an_expired_lease_is_a_problem() {
    let mut o = healthy();
    o.lease = Lookup::Found(lease(None, 5, 15));
    let p = only_problem(&o);
    assert!(
        p.contains("Lease rivora-system/rivora-controller has no holder"),
        "{p}"
    );

    o.lease = Lookup::Found(lease(Some("rivora-controller-abc"), 60, 15));
    let p = only_problem(&o);
    assert!(
        p.contains(
            "Lease rivora-system/rivora-controller of rivora-controller-abc expired 45s ago"
        ),
        "{p}"
    );
    assert!(evaluate(&o).leader.expired);

    o.lease = Lookup::Missing;
    let p = only_problem(&o);
    assert!(
        p.contains("Lease rivora-system/rivora-controller does not exist"),
        "{p}"
    );
}

#[test]
fn a_node_with_a_pod_but_no_report_is_a_problem() {
    let mut o = healthy();
    let Lookup::Found(nodes) = &mut o.nodes else {
        unreachable!()
    };
    nodes.retain(|n| n.metadata.name.as_deref() != Some("node-b"));
    let r = evaluate(&o);
    let p = only_problem(&o);
    assert!(
        p.contains(
            "node node-b runs rivorad Pod rivora-system/rivorad-x2 but has no RivoraNode report"
        ),
        "{p}"
    );
    let b = r.nodes.iter().find(|n| n.name == "node-b").unwrap();
    assert!(!b.reported);
}

#[test]
fn a_detached_datapath_is_a_problem() {
    let mut o = healthy();
    let mut v = node_status("node-a", 10);
    v["status"].as_object_mut().unwrap().remove("datapath");
    v["status"]["conditions"][0] = json!({"type": "Ready", "status": "False",
        "reason": "AttachFailed", "message": "eth9: no such interface",
        "lastTransitionTime": ago(60)});
    let Lookup::Found(nodes) = &mut o.nodes else {
        unreachable!()
    };
    nodes[0] = rivora_node(v);
    let r = evaluate(&o);
    assert_eq!(r.problems.len(), 2, "{:#?}", r.problems);
    assert!(
        r.problems[0].contains("node node-a: the datapath is not attached"),
        "{:#?}",
        r.problems
    );
    assert!(
        r.problems[1].contains(
            "node node-a reports errors: not Ready (AttachFailed): eth9: no such interface"
        ),
        "{:#?}",
        r.problems
    );
    assert!(!r.nodes[0].datapath_attached);
}

#[test]
fn a_report_with_errors_is_a_problem() {
    let mut o = healthy();
    let mut v = node_status("node-b", 10);
    v["status"]["announce"]["bgpSessions"][1]["state"] = json!("Active");
    v["status"]["announce"]["bgpSessions"][1]["lastError"] = json!("connection refused");
    v["status"]["services"] = json!([{"namespace": "web", "name": "api", "programmed": false,
        "message": "port 80/TCP is held by web/frontend"}]);
    let Lookup::Found(nodes) = &mut o.nodes else {
        unreachable!()
    };
    nodes[1] = rivora_node(v);
    let r = evaluate(&o);
    let p = only_problem(&o);
    assert!(p.starts_with("node node-b reports errors: "), "{p}");
    assert!(
        p.contains("BGP session to tor-b (10.0.0.2:179) is Active: connection refused"),
        "{p}"
    );
    assert!(
        p.contains("Service web/api not programmed: port 80/TCP is held by web/frontend"),
        "{p}"
    );
    assert_eq!(r.nodes[1].announce(), "BGP 1/2 established");
    assert_eq!(r.nodes[1].errors.len(), 2);
}

#[test]
fn a_stale_report_is_a_problem() {
    let mut o = healthy();
    let Lookup::Found(nodes) = &mut o.nodes else {
        unreachable!()
    };
    nodes[0] = rivora_node(node_status("node-a", 300));
    let p = only_problem(&o);
    assert!(
        p.contains("node node-a: its RivoraNode report is stale (last heartbeat 300s ago"),
        "{p}"
    );
    assert!(evaluate(&o).nodes[0].stale);
}

#[test]
fn an_l2_node_shows_the_holder() {
    let mut o = healthy();
    let mut v = node_status("node-a", 10);
    v["status"]["announce"] = json!({"mode": "l2", "l2Holder": "node-b", "l2Answering": false});
    let Lookup::Found(nodes) = &mut o.nodes else {
        unreachable!()
    };
    nodes[0] = rivora_node(v);
    let r = evaluate(&o);
    assert!(r.healthy(), "{:#?}", r.problems);
    assert_eq!(r.nodes[0].announce(), "L2 holder node-b");
    assert!(r.render_table().contains("L2 holder node-b"));
}

#[test]
fn an_exhausted_pool_is_a_problem() {
    let mut o = healthy();
    o.pools = Lookup::Found(vec![
        pool("default", 3, 16, false),
        pool("small", 4, 4, true),
    ]);
    let p = only_problem(&o);
    assert!(
        p.contains("AddressPool small is exhausted (4/4 addresses used)"),
        "{p}"
    );
    let r = evaluate(&o);
    assert!(r.pools.iter().any(|p| p.name == "small" && p.exhausted));
}

#[test]
fn a_pool_out_of_one_family_shows_which_in_the_table() {
    let mut o = healthy();
    o.pools = Lookup::Found(vec![
        pool("default", 3, 16, false),
        // The controller's own words for a dual-stack pool out of IPv4.
        dual_pool(
            "by-reason",
            (2, 2),
            (0, 4),
            VALID,
            (
                "False",
                "IPv4Exhausted",
                "every IPv4 address is assigned (4 IPv6 left): Services and Gateways that want \
                 IPv4 get none from this pool",
            ),
        ),
        // Counts alone (a status without the reason) say it too.
        dual_pool(
            "by-counts",
            (1, 2),
            (4, 4),
            VALID,
            ("False", "FreeAddresses", "addresses are left"),
        ),
        dual_pool(
            "full",
            (2, 2),
            (4, 4),
            VALID,
            ("True", "NoFreeAddress", "every address is assigned"),
        ),
        dual_pool(
            "broken",
            (0, 2),
            (0, 33),
            (
                "False",
                "InvalidAddresses",
                "fd00::1-fd00::20 and fd00::15-fd00::21 overlap",
            ),
            ("False", "FreeAddresses", "addresses are left"),
        ),
    ]);
    let text = evaluate(&o).render_table();
    assert_eq!(pool_state(&text, "by-reason"), "IPv4 exhausted", "{text}");
    assert_eq!(pool_state(&text, "by-counts"), "IPv6 exhausted", "{text}");
    assert_eq!(pool_state(&text, "full"), "exhausted", "{text}");
    assert_eq!(pool_state(&text, "broken"), "invalid", "{text}");
    assert_eq!(pool_state(&text, "default"), "ok", "{text}");
    assert!(text.contains("Problems (4)"), "{text}");
}

#[test]
fn a_pool_out_of_one_family_is_a_problem() {
    let mut o = healthy();
    o.pools = Lookup::Found(vec![
        pool("default", 3, 16, false),
        dual_pool(
            "dual",
            (2, 2),
            (1, 4),
            VALID,
            (
                "False",
                "IPv4Exhausted",
                "every IPv4 address is assigned (3 IPv6 left): Services and Gateways that want \
                 IPv4 get none from this pool",
            ),
        ),
    ]);
    let p = only_problem(&o);
    assert!(
        p.contains(
            "AddressPool dual is out of IPv4 addresses (2/2 IPv4 addresses used, 3 IPv6 left)"
        ),
        "{p}"
    );
    assert!(
        p.contains("add IPv4 addresses to its spec.addresses"),
        "{p}"
    );

    // Out of both: one line, the pool's, as before.
    o.pools = Lookup::Found(vec![dual_pool(
        "dual",
        (2, 2),
        (4, 4),
        VALID,
        ("True", "NoFreeAddress", "every address is assigned"),
    )]);
    let p = only_problem(&o);
    assert!(
        p.contains("AddressPool dual is exhausted (6/6 addresses used)"),
        "{p}"
    );
}

#[test]
fn an_invalid_request_says_the_address_must_fit_the_families() {
    let mut o = healthy();
    let Lookup::Found(services) = &mut o.services else {
        unreachable!()
    };
    services.push(service(
        "shop",
        "v4-only",
        None,
        Some((
            "False",
            "InvalidRequest",
            "the requested address fd00:7::1 is IPv6, a family its ipFamilies and \
             ipFamilyPolicy do not give it",
        )),
    ));
    let p = only_problem(&o);
    assert!(
        p.contains("Service shop/v4-only has no address: InvalidRequest: the requested address fd00:7::1 is IPv6"),
        "{p}"
    );
    assert!(
        p.contains("spec.ipFamilies") && p.contains("spec.ipFamilyPolicy"),
        "the hint names the families the address must fit: {p}"
    );
}

#[test]
fn a_service_without_an_address_names_the_reason() {
    let mut o = healthy();
    let Lookup::Found(services) = &mut o.services else {
        unreachable!()
    };
    services.push(service(
        "shop",
        "checkout",
        None,
        Some((
            "False",
            "PoolExhausted",
            "every AddressPool that may serve it is out of IPv4 addresses",
        )),
    ));
    services.push(service("shop", "new", None, None));
    let r = evaluate(&o);
    assert_eq!(r.problems.len(), 2, "{:#?}", r.problems);
    assert!(r.problems[0].contains(
        "Service shop/checkout has no address: PoolExhausted: every AddressPool that may serve it is out of IPv4 addresses"
    ), "{:#?}", r.problems);
    assert!(r.problems[0].contains("add addresses"), "{:#?}", r.problems);
    assert!(
        r.problems[1]
            .contains("Service shop/new has no address: no rivora.dev/AddressAssigned condition"),
        "{:#?}",
        r.problems
    );
    assert_eq!(r.unaddressed.len(), 2);
    assert_eq!(r.unaddressed[0].kind, "Service");
    assert_eq!(r.unaddressed[0].name, "checkout");
}

#[test]
fn a_gateway_without_an_address_names_the_reason() {
    let mut o = healthy();
    let Lookup::Found(gateways) = &mut o.gateways else {
        unreachable!()
    };
    gateways.push(gateway(
        "infra",
        "internal",
        None,
        json!([
            {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
             "lastTransitionTime": ago(60)},
            {"type": "Programmed", "status": "False", "reason": "AddressNotAssigned",
             "message": "no AddressPool that may serve it has IPv4 addresses",
             "lastTransitionTime": ago(60)}
        ]),
    ));
    let p = only_problem(&o);
    assert!(p.contains(
        "Gateway infra/internal has no address: not Programmed (AddressNotAssigned): no AddressPool that may serve it has IPv4 addresses"
    ), "{p}");
    assert_eq!(evaluate(&o).unaddressed[0].kind, "Gateway");
}

#[test]
fn missing_crds_are_findings_not_failures() {
    let mut o = healthy();
    o.gateways = Lookup::Missing;
    let r = evaluate(&o);
    assert!(r.healthy(), "Gateway API is optional: {:#?}", r.problems);
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("Gateway API CRDs are not installed"))
    );

    o.nodes = Lookup::Missing;
    o.pools = Lookup::Missing;
    let r = evaluate(&o);
    assert_eq!(r.problems.len(), 2, "{:#?}", r.problems);
    assert!(r.problems[0].contains("RivoraNode CRD (rivoranodes.rivora.dev) is not installed"));
    assert!(r.problems[1].contains("AddressPool CRD (addresspools.rivora.dev) is not installed"));
    // Without reports, the nodes still show (from their Pods), just unreported.
    assert_eq!(r.nodes.len(), 2);
    assert!(r.nodes.iter().all(|n| !n.reported));
}

#[test]
fn json_has_every_section() {
    let mut o = healthy();
    o.pools = Lookup::Found(vec![pool("small", 4, 4, true)]);
    let j = evaluate(&o).to_json();
    for key in [
        "namespace",
        "chartVersion",
        "components",
        "leader",
        "nodes",
        "pools",
        "unaddressed",
        "notes",
        "problems",
        "healthy",
    ] {
        assert!(j.get(key).is_some(), "no {key} in {j}");
    }
    assert_eq!(j["chartVersion"], "0.1.0");
    assert_eq!(j["healthy"], false);
    assert_eq!(j["components"][0]["kind"], "DaemonSet");
    assert_eq!(j["leader"]["holder"], "rivora-controller-abc");
    assert_eq!(j["nodes"][0]["name"], "node-a");
    assert_eq!(j["nodes"][0]["xdpMode"], "native");
    assert_eq!(j["nodes"][0]["bgpEstablished"], 2);
    assert_eq!(j["pools"][0]["name"], "small");
    assert_eq!(j["pools"][0]["exhausted"], true);
    assert_eq!(j["problems"].as_array().unwrap().len(), 1);
}

#[test]
fn the_tables_have_the_rows() {
    let mut o = healthy();
    let Lookup::Found(services) = &mut o.services else {
        unreachable!()
    };
    services.push(service(
        "shop",
        "checkout",
        None,
        Some((
            "False",
            "NoPool",
            "no AddressPool that may serve it has IPv4 addresses",
        )),
    ));
    let text = evaluate(&o).render_table();
    for want in [
        "Rivora chart 0.1.0 in namespace rivora-system",
        "Components",
        "DaemonSet",
        "rivorad",
        "Deployment",
        "rivora-controller",
        "Controller leader",
        "rivora-controller-abc",
        "leading",
        "Nodes",
        "node-a",
        "node-b",
        "attached (eth0)",
        "native",
        "BGP 2/2 established",
        "Pools",
        "default",
        "3/16",
        "Unaddressed",
        "shop/checkout",
        "NoPool",
        "Problems (1)",
        "Service shop/checkout has no address",
    ] {
        assert!(text.contains(want), "no {want:?} in\n{text}");
    }
    // One row per node: the node-a line carries its columns.
    let row = text.lines().find(|l| l.contains("node-a")).unwrap();
    assert!(row.contains("native") && row.contains("| 4 "), "{row}");

    let healthy_text = evaluate(&healthy()).render_table();
    assert!(
        healthy_text.contains("everything is healthy"),
        "{healthy_text}"
    );
    assert!(!healthy_text.contains("Problems"), "{healthy_text}");
}

#[test]
fn the_lease_is_the_one_the_controller_s_arguments_name() {
    let values = json!({"controller": {"extraArgs": ["--lease-name=ctl-x", "--v=2"]}});
    assert_eq!(
        LeaseRef::from_values(&values, "lb"),
        LeaseRef {
            namespace: "lb".into(),
            name: "ctl-x".into()
        }
    );
    assert_eq!(
        LeaseRef::from_args(["--lease-name", "a", "--lease-namespace=elect"], "lb").to_string(),
        "elect/a"
    );
    assert_eq!(
        LeaseRef::from_values(&json!({}), "lb"),
        LeaseRef::default_in("lb"),
        "rivora-controller's default"
    );
    let d: Deployment = from(json!({
        "metadata": {"name": "rivora-controller", "namespace": "lb"},
        "spec": {"selector": {}, "template": {"spec": {"containers": [
            {"name": "sidecar", "args": ["--lease-name=not-this"]},
            {"name": "controller", "command": ["rivora-controller"],
             "args": ["--lease-duration=15", "--lease-name", "from-deploy"]},
        ]}}}
    }));
    assert_eq!(
        LeaseRef::from_deployment(&d, "lb").unwrap().name,
        "from-deploy"
    );
}

#[test]
fn a_missing_lease_is_named_as_the_controller_names_it() {
    let mut o = healthy();
    o.lease_ref = LeaseRef::from_args(["--lease-name=ctl-x"], "rivora-system");
    o.lease = Lookup::Missing;
    let r = evaluate(&o);
    assert!(
        r.problems
            .iter()
            .any(|p| p.contains("Lease rivora-system/ctl-x does not exist")),
        "{:?}",
        r.problems
    );
}
