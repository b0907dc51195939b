//! Issue 18, acceptance 1: Gateway API v1.6's TCPRoute and UDPRoute conformance cases
//! (`conformance/tests/{tcp,udp}route-*.go` at conformance/v1.6.1), one test each, against the
//! real API server with the upstream standard CRDs, the real rivora-controller (in process, as
//! the ServiceAccount of deploy/rbac/rivora-controller.yaml) and real `rivorad --kubernetes`
//! node agents in the cluster lab (crates/lab cluster.rs). Each test asserts the statuses the
//! conformance test asserts (for the object's current observedGeneration, with the parentRef's
//! group and kind, listener by listener: k8s_common/gateway.rs), then sends real TCP connections and UDP exchanges from the lab's
//! client to the Gateway's address and checks which backend answered.
//!
//! The test plays the controller-manager (it writes the backend Services' EndpointSlices, with
//! the lab's pods as endpoints); everything else is the product. Source ports are fixed per
//! round, so each round's flows, and so their spread, are the same on every run. Needs root
//! and the test dependencies (scripts/build-testdeps.sh).

mod k8s_common;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_common::gateway::{GatewayTest, GwLab as Lab, all_to, kind, listener, route_spec};
use serde_json::{Value, json};

/// TCPRouteWeightedRouting / UDPRouteWeightedRouting: backends weighted 70/30/0 (one pod
/// each); 1,000 connections (exchanges) split within 3 points of 70/30, none to the weight-0
/// backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_routing_splits_by_weight_and_weight_zero_gets_none() {
    let g = GatewayTest::new("gwwt", &["10.99.18.0/30"]).await;
    let lab = Lab::new(&g, "gwwt", &[3]).await;
    let ns = g.t.ns.clone();
    for (proto, port) in [("TCP", 3000u16), ("UDP", 3001)] {
        for (i, v) in ["v1", "v2", "v3"].iter().enumerate() {
            let svc = format!("{v}-{}", proto.to_lowercase());
            g.backend(&ns, &svc, port, proto).await;
            g.endpoints(&ns, &svc, proto, &[(lab.pod(i), &lab.node)])
                .await;
        }
    }
    g.gateway(
        "gw",
        json!([listener("tcp", 9300, "TCP"), listener("udp", 9301, "UDP")]),
        json!({}),
    )
    .await;
    for (proto, port, section) in [("TCP", 3000, "tcp"), ("UDP", 3001, "udp")] {
        let p = proto.to_lowercase();
        g.route(
            kind(proto),
            &ns,
            "weighted",
            route_spec(
                json!({"name": "gw", "sectionName": section}),
                json!([{"name": format!("v1-{p}"), "port": port, "weight": 70},
                       {"name": format!("v2-{p}"), "port": port, "weight": 30},
                       {"name": format!("v3-{p}"), "port": port, "weight": 0}]),
            ),
        )
        .await;
    }
    let addr = g.addresses("gw", 1).await[0];
    for (proto, section) in [("TCP", "tcp"), ("UDP", "udp")] {
        g.route_condition(
            kind(proto),
            &ns,
            "weighted",
            "gw",
            Some(section),
            "Accepted",
            "True",
            "Accepted",
        )
        .await;
        g.route_condition(
            kind(proto),
            &ns,
            "weighted",
            "gw",
            Some(section),
            "ResolvedRefs",
            "True",
            "ResolvedRefs",
        )
        .await;
    }
    g.gateway_condition("gw", "Programmed", "True", "Programmed")
        .await;
    for (proto, port, first) in [("TCP", 9300u16, 20000u16), ("UDP", 9301, 22000)] {
        lab.programmed(addr, port, proto, &[lab.pod(0), lab.pod(1)])
            .await;
        let r = lab.round(proto, addr, port, first, 1000);
        assert!(r.all_ok(), "{proto}: {r}");
        let shares = r.shares();
        let share = |i: usize| shares.get(&lab.pod_name(i)).copied().unwrap_or(0.0);
        eprintln!(
            "{proto} weighted 70/30/0: {:.1}% / {:.1}% / {:.1}%",
            share(0) * 100.0,
            share(1) * 100.0,
            share(2) * 100.0
        );
        assert!(
            (share(0) - 0.7).abs() <= 0.03,
            "{proto}: v1 {:.3}: {r}",
            share(0)
        );
        assert!(
            (share(1) - 0.3).abs() <= 0.03,
            "{proto}: v2 {:.3}: {r}",
            share(1)
        );
        assert_eq!(
            share(2),
            0.0,
            "{proto}: the weight-0 backend got flows: {r}"
        );
    }
}

/// TCPRouteMultipleRoutesAttachment / UDPRouteMultipleRoutesAttachment: two routes on one
/// listener are both Accepted, the listener counts 2 attached routes and lists the kind, and
/// 100 connections reach only the older route's backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_routes_on_one_listener_are_accepted_and_the_oldest_carries_traffic() {
    let g = GatewayTest::new("gwmr", &["10.99.18.4/30"]).await;
    let lab = Lab::new(&g, "gwmr", &[2]).await;
    let ns = g.t.ns.clone();
    for (proto, port) in [("TCP", 3000u16), ("UDP", 3001)] {
        for (i, v) in ["old", "new"].iter().enumerate() {
            let svc = format!("{v}-{}", proto.to_lowercase());
            g.backend(&ns, &svc, port, proto).await;
            g.endpoints(&ns, &svc, proto, &[(lab.pod(i), &lab.node)])
                .await;
        }
    }
    g.gateway(
        "gw",
        json!([listener("tcp", 9300, "TCP"), listener("udp", 9301, "UDP")]),
        json!({}),
    )
    .await;
    for (proto, port, section) in [("TCP", 3000, "tcp"), ("UDP", 3001, "udp")] {
        let p = proto.to_lowercase();
        for v in ["old", "new"] {
            g.route(
                kind(proto),
                &ns,
                &format!("{v}-route"),
                route_spec(
                    json!({"name": "gw", "sectionName": section}),
                    json!([{"name": format!("{v}-{p}"), "port": port}]),
                ),
            )
            .await;
            // creationTimestamp has a resolution of one second: make "old" older.
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
    }
    let addr = g.addresses("gw", 1).await[0];
    for (proto, port, section, first) in [
        ("TCP", 9300u16, "tcp", 24000u16),
        ("UDP", 9301, "udp", 24200),
    ] {
        for v in ["old", "new"] {
            g.route_condition(
                kind(proto),
                &ns,
                &format!("{v}-route"),
                "gw",
                Some(section),
                "Accepted",
                "True",
                "Accepted",
            )
            .await;
        }
        let l = g
            .listener_condition("gw", section, "Accepted", "True", "Accepted", 2)
            .await;
        assert_eq!(l["supportedKinds"][0]["kind"], kind(proto), "{l}");
        lab.programmed(addr, port, proto, &[lab.pod(0)]).await;
        let r = lab.round(proto, addr, port, first, 100);
        all_to(&format!("{proto} to the older route"), &r, &lab.pod_name(0));
    }
}

/// TCPRouteInvalidBackendRefNonexistent / UDPRouteInvalidBackendRefNonexistent: a route to a
/// Service that does not exist has ResolvedRefs=False, BackendNotFound; its (whole) share is
/// refused: TCP connections are reset, UDP datagrams dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nonexistent_backend_is_backend_not_found_and_its_share_is_refused() {
    let g = GatewayTest::new("gwnx", &["10.99.18.8/30"]).await;
    let lab = Lab::new(&g, "gwnx", &[1]).await;
    let ns = g.t.ns.clone();
    g.gateway(
        "gw",
        json!([listener("tcp", 9300, "TCP"), listener("udp", 9301, "UDP")]),
        json!({}),
    )
    .await;
    for (proto, section) in [("TCP", "tcp"), ("UDP", "udp")] {
        g.route(
            kind(proto),
            &ns,
            "nx",
            route_spec(
                json!({"name": "gw", "sectionName": section}),
                json!([{"name": "nonexistent-service", "port": 8080}]),
            ),
        )
        .await;
    }
    let addr = g.addresses("gw", 1).await[0];
    for (proto, port, section, first) in [
        ("TCP", 9300u16, "tcp", 24400u16),
        ("UDP", 9301, "udp", 24500),
    ] {
        g.route_condition(
            kind(proto),
            &ns,
            "nx",
            "gw",
            Some(section),
            "ResolvedRefs",
            "False",
            "BackendNotFound",
        )
        .await;
        lab.programmed(addr, port, proto, &[]).await;
        let r = lab.round(proto, addr, port, first, 20);
        assert_eq!(
            r.ok, 0,
            "{proto}: nothing answers for a backend that does not exist: {r}"
        );
        if proto == "TCP" {
            assert!(
                r.failed.iter().all(|e| e.contains("refused")),
                "TCP connections are reset, not left to time out: {r}"
            );
        }
    }
}

/// TCPRouteReferenceGrant / UDPRouteReferenceGrant and the InvalidCrossNamespaceBackendRef
/// cases: a backendRef to another namespace is RefNotPermitted (and refused) without a
/// ReferenceGrant there, ResolvedRefs with one (traffic reaches the other namespace's pod), and
/// RefNotPermitted again once the grant is deleted (traffic refused again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_namespace_backend_needs_a_reference_grant_and_loses_it_with_the_grant() {
    let g = GatewayTest::new("gwrg", &["10.99.18.12/30"]).await;
    let lab = Lab::new(&g, "gwrg", &[1]).await;
    let ns = g.t.ns.clone();
    let other = rivora_kube_testbed::unique_name("gwrg-be");
    rivora_kube_testbed::ensure_namespace(&g.t.admin, &other)
        .await
        .unwrap();
    for (proto, port) in [("TCP", 3000u16), ("UDP", 3001)] {
        let svc = format!("be-{}", proto.to_lowercase());
        g.backend(&other, &svc, port, proto).await;
        g.endpoints(&other, &svc, proto, &[(lab.pod(0), &lab.node)])
            .await;
    }
    g.gateway(
        "gw",
        json!([listener("tcp", 9300, "TCP"), listener("udp", 9301, "UDP")]),
        json!({}),
    )
    .await;
    for (proto, port, section) in [("TCP", 3000, "tcp"), ("UDP", 3001, "udp")] {
        g.route(
            kind(proto),
            &ns,
            "xns",
            route_spec(
                json!({"name": "gw", "sectionName": section}),
                json!([{"name": format!("be-{}", proto.to_lowercase()), "namespace": other, "port": port}]),
            ),
        )
        .await;
    }
    let addr = g.addresses("gw", 1).await[0];
    let cases = [
        ("TCP", 9300u16, "tcp", 25000u16),
        ("UDP", 9301, "udp", 25300),
    ];
    // No grant.
    for (proto, port, section, first) in cases {
        g.route_condition(
            kind(proto),
            &ns,
            "xns",
            "gw",
            Some(section),
            "ResolvedRefs",
            "False",
            "RefNotPermitted",
        )
        .await;
        lab.programmed(addr, port, proto, &[]).await;
        let r = lab.round(proto, addr, port, first, 10);
        assert_eq!(r.ok, 0, "{proto} without a grant: {r}");
    }
    // Granted.
    for proto in ["TCP", "UDP"] {
        g.grant(
            &other,
            &format!("allow-{}", proto.to_lowercase()),
            kind(proto),
            &ns,
        )
        .await;
    }
    for (proto, port, section, first) in cases {
        g.route_condition(
            kind(proto),
            &ns,
            "xns",
            "gw",
            Some(section),
            "ResolvedRefs",
            "True",
            "ResolvedRefs",
        )
        .await;
        lab.programmed(addr, port, proto, &[lab.pod(0)]).await;
        let r = lab.round(proto, addr, port, first + 100, 50);
        all_to(&format!("{proto} with a grant"), &r, &lab.pod_name(0));
    }
    // Revoked.
    for proto in ["TCP", "UDP"] {
        g.delete_grant(&other, &format!("allow-{}", proto.to_lowercase()))
            .await;
    }
    for (proto, port, section, first) in cases {
        g.route_condition(
            kind(proto),
            &ns,
            "xns",
            "gw",
            Some(section),
            "ResolvedRefs",
            "False",
            "RefNotPermitted",
        )
        .await;
        lab.programmed(addr, port, proto, &[]).await;
        let r = lab.round(proto, addr, port, first + 200, 10);
        assert_eq!(r.ok, 0, "{proto} after the grant was deleted: {r}");
    }
}

/// TCPRouteInvalidNonTCPListener / UDPRouteNotAllowedByListeners: a route whose sectionName
/// names a listener that cannot carry it (an HTTP listener for a TCPRoute, a TLS passthrough
/// listener for a UDPRoute) is Accepted=False, NotAllowedByListeners, and those listeners count
/// no route; they are Accepted (Rivora lists their kinds and forwards nothing for them) while
/// the Gateway's TCP listener forwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_to_a_listener_of_another_protocol_is_not_allowed_and_the_rest_forwards() {
    let g = GatewayTest::new("gwna", &["10.99.18.16/30"]).await;
    let lab = Lab::new(&g, "gwna", &[1]).await;
    let ns = g.t.ns.clone();
    g.backend(&ns, "echo", 3000, "TCP").await;
    g.endpoints(&ns, "echo", "TCP", &[(lab.pod(0), &lab.node)])
        .await;
    g.gateway(
        "gw",
        json!([
            {"name": "only-allow-http-routes", "port": 5300, "protocol": "HTTP",
             "allowedRoutes": {"kinds": [{"kind": "HTTPRoute"}]}},
            {"name": "tls", "port": 443, "protocol": "TLS", "tls": {"mode": "Passthrough"},
             "allowedRoutes": {"namespaces": {"from": "Same"}}},
            listener("tcp", 9300, "TCP"),
        ]),
        json!({}),
    )
    .await;
    g.route(
        "TCPRoute",
        &ns,
        "to-http",
        route_spec(
            json!({"name": "gw", "sectionName": "only-allow-http-routes"}),
            json!([{"name": "echo", "port": 3000}]),
        ),
    )
    .await;
    g.route(
        "UDPRoute",
        &ns,
        "to-tls",
        route_spec(
            json!({"name": "gw", "sectionName": "tls"}),
            json!([{"name": "echo", "port": 3000}]),
        ),
    )
    .await;
    g.route(
        "TCPRoute",
        &ns,
        "ok",
        route_spec(
            json!({"name": "gw", "sectionName": "tcp"}),
            json!([{"name": "echo", "port": 3000}]),
        ),
    )
    .await;
    let addr = g.addresses("gw", 1).await[0];
    g.route_condition(
        "TCPRoute",
        &ns,
        "to-http",
        "gw",
        None,
        "Accepted",
        "False",
        "NotAllowedByListeners",
    )
    .await;
    g.route_condition(
        "UDPRoute",
        &ns,
        "to-tls",
        "gw",
        None,
        "Accepted",
        "False",
        "NotAllowedByListeners",
    )
    .await;
    g.listener_condition(
        "gw",
        "only-allow-http-routes",
        "Accepted",
        "True",
        "Accepted",
        0,
    )
    .await;
    g.listener_condition("gw", "tls", "Accepted", "True", "Accepted", 0)
        .await;
    g.listener_condition("gw", "tcp", "Accepted", "True", "Accepted", 1)
        .await;
    lab.programmed(addr, 9300, "TCP", &[lab.pod(0)]).await;
    let r = lab.round("TCP", addr, 9300, 26000, 50);
    all_to("the TCP listener forwards", &r, &lab.pod_name(0));
    let vips = lab.agents[0].vips().await.unwrap();
    assert!(
        !vips.iter().any(|v| v.port == 5300 || v.port == 443),
        "nothing is programmed for the HTTP and TLS listeners: {:?}",
        k8s_common::gateway::vip_names(&vips)
    );
}

/// TCPRouteParentRefAttachAll / UDPRouteParentRefAttachAllListeners: a parentRef without
/// sectionName or port attaches to every listener of its kind; traffic flows through each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_ref_without_section_or_port_attaches_to_every_listener() {
    let g = GatewayTest::new("gwaa", &["10.99.18.20/30"]).await;
    let lab = Lab::new(&g, "gwaa", &[1]).await;
    let ns = g.t.ns.clone();
    for (proto, port) in [("TCP", 3000u16), ("UDP", 3001)] {
        let svc = format!("echo-{}", proto.to_lowercase());
        g.backend(&ns, &svc, port, proto).await;
        g.endpoints(&ns, &svc, proto, &[(lab.pod(0), &lab.node)])
            .await;
    }
    g.gateway(
        "gw",
        json!([
            listener("tcp-a", 9300, "TCP"),
            listener("tcp-b", 9310, "TCP"),
            listener("udp-a", 9301, "UDP"),
            listener("udp-b", 9311, "UDP")
        ]),
        json!({}),
    )
    .await;
    g.route(
        "TCPRoute",
        &ns,
        "all",
        route_spec(
            json!({"name": "gw"}),
            json!([{"name": "echo-tcp", "port": 3000}]),
        ),
    )
    .await;
    g.route(
        "UDPRoute",
        &ns,
        "all",
        route_spec(
            json!({"name": "gw"}),
            json!([{"name": "echo-udp", "port": 3001}]),
        ),
    )
    .await;
    let addr = g.addresses("gw", 1).await[0];
    for (proto, l, port, first) in [
        ("TCP", "tcp-a", 9300u16, 27000u16),
        ("TCP", "tcp-b", 9310, 27100),
        ("UDP", "udp-a", 9301, 27200),
        ("UDP", "udp-b", 9311, 27300),
    ] {
        g.route_condition(
            kind(proto),
            &ns,
            "all",
            "gw",
            None,
            "Accepted",
            "True",
            "Accepted",
        )
        .await;
        g.listener_condition("gw", l, "Accepted", "True", "Accepted", 1)
            .await;
        g.listener_condition("gw", l, "ResolvedRefs", "True", "ResolvedRefs", 1)
            .await;
        lab.programmed(addr, port, proto, &[lab.pod(0)]).await;
        let r = lab.round(proto, addr, port, first, 50);
        all_to(&format!("{proto} via {l}"), &r, &lab.pod_name(0));
    }
}

/// TCPRouteParentRefPortAndSectionName / UDPRouteParentRefPortAndSectionName: routes attach by
/// port, by sectionName, and by both; each listener forwards to its own route's backend, and a
/// parentRef whose port and sectionName name different listeners matches none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_refs_select_listeners_by_port_by_section_name_and_by_both() {
    let g = GatewayTest::new("gwps", &["10.99.18.24/30"]).await;
    let lab = Lab::new(&g, "gwps", &[3]).await;
    let ns = g.t.ns.clone();
    let mut want: BTreeMap<(String, u16), usize> = BTreeMap::new();
    let mut listeners = Vec::new();
    for (proto, base) in [("TCP", 9400u16), ("UDP", 9500)] {
        let p = proto.to_lowercase();
        for (i, how) in ["port", "section", "both"].iter().enumerate() {
            let svc = format!("{how}-{p}");
            g.backend(&ns, &svc, 3000, proto).await;
            g.endpoints(&ns, &svc, proto, &[(lab.pod(i), &lab.node)])
                .await;
            listeners.push(listener(&format!("{p}-{how}"), base + i as u16, proto));
            want.insert((proto.to_string(), base + i as u16), i);
        }
    }
    g.gateway("gw", Value::Array(listeners), json!({})).await;
    for (proto, base) in [("TCP", 9400u16), ("UDP", 9500)] {
        let p = proto.to_lowercase();
        let parents = [
            ("port", json!({"name": "gw", "port": base})),
            (
                "section",
                json!({"name": "gw", "sectionName": format!("{p}-section")}),
            ),
            (
                "both",
                json!({"name": "gw", "sectionName": format!("{p}-both"), "port": base + 2}),
            ),
        ];
        for (how, parent) in parents {
            g.route(
                kind(proto),
                &ns,
                &format!("by-{how}"),
                route_spec(
                    parent,
                    json!([{"name": format!("{how}-{p}"), "port": 3000}]),
                ),
            )
            .await;
        }
        g.route(
            kind(proto),
            &ns,
            "mismatch",
            route_spec(
                json!({"name": "gw", "sectionName": format!("{p}-port"), "port": base + 1}),
                json!([{"name": format!("port-{p}"), "port": 3000}]),
            ),
        )
        .await;
    }
    let addr = g.addresses("gw", 1).await[0];
    for proto in ["TCP", "UDP"] {
        for how in ["port", "section", "both"] {
            g.route_condition(
                kind(proto),
                &ns,
                &format!("by-{how}"),
                "gw",
                None,
                "Accepted",
                "True",
                "Accepted",
            )
            .await;
        }
        g.route_condition(
            kind(proto),
            &ns,
            "mismatch",
            "gw",
            None,
            "Accepted",
            "False",
            "NoMatchingParent",
        )
        .await;
    }
    let mut first = 28000u16;
    for ((proto, port), i) in &want {
        lab.programmed(addr, *port, proto, &[lab.pod(*i)]).await;
        let r = lab.round(proto, addr, *port, first, 30);
        all_to(&format!("{proto} :{port}"), &r, &lab.pod_name(*i));
        first += 100;
    }
}

/// UDPRoute (udproute-simple): a UDP request through a UDPRoute is answered by its backend,
/// over IPv4 and IPv6 (a dual-stack pool gives the Gateway one address of each family).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simple_udp_route_answers_over_both_families() {
    let g = GatewayTest::new("gwud", &["10.99.18.28/30", "fd00:99:18::/126"]).await;
    let lab = Lab::new(&g, "gwud", &[1]).await;
    let ns = g.t.ns.clone();
    g.backend(&ns, "dns", 53, "UDP").await;
    g.endpoints(&ns, "dns", "UDP", &[(lab.pod(0), &lab.node)])
        .await;
    let v6 = lab.pod6(0);
    g.endpoints(&ns, "dns", "UDP", &[(v6, &lab.node)]).await;
    g.gateway("gw", json!([listener("dns", 53, "UDP")]), json!({}))
        .await;
    g.route(
        "UDPRoute",
        &ns,
        "dns",
        route_spec(json!({"name": "gw"}), json!([{"name": "dns", "port": 53}])),
    )
    .await;
    let addrs = g.addresses("gw", 2).await;
    g.route_condition(
        "UDPRoute", &ns, "dns", "gw", None, "Accepted", "True", "Accepted",
    )
    .await;
    g.gateway_condition("gw", "Programmed", "True", "Programmed")
        .await;
    for (i, addr) in addrs.iter().enumerate() {
        let pod = if addr.is_ipv6() { v6 } else { lab.pod(0) };
        lab.programmed(*addr, 53, "UDP", &[pod]).await;
        let r = lab.round("UDP", *addr, 53, 29000 + 100 * i as u16, 50);
        all_to(&format!("UDP to {addr}"), &r, &lab.pod_name(0));
    }
}
