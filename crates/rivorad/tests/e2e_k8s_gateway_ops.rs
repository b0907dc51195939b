//! Issue 18, acceptance 2-4: Gateways in operation, against the real API server, the real
//! rivora-controller (in process, as the ServiceAccount of deploy/rbac/rivora-controller.yaml)
//! and real `rivorad --kubernetes` on the two nodes of the cluster lab, with real traffic:
//! - two Gateways (one IPv4, one IPv6), each with a TCP listener on 80 and a UDP listener on
//!   53 on its one address: 600 connections and 600 exchanges each, all answered; a route's
//!   backendRefs and then its weights changed while long-lived connections run: new flows
//!   move, every established connection keeps echoing from its backend;
//! - pool exhaustion (AddressNotAssigned), a requested address outside every pool
//!   (AddressNotUsable), an unsupported listener protocol (UnsupportedProtocol) and a route
//!   from a namespace the listener does not allow (NotAllowedByListeners), each with its
//!   condition and reason while the working Gateway keeps forwarding;
//! - the controller's leader replaced after all that: no Gateway, GatewayClass or route
//!   changes its resourceVersion (no address and no status is written a second time);
//! - the node agent SIGKILLed under traffic with `--persist-datapath` and a Gateway deleted
//!   while it is down: nothing fails, the deleted Gateway's VIP goes only after the initial
//!   sync, the other Gateway's `Programmed` never changes.
//!
//! The test plays the controller-manager (EndpointSlices of the backend Services). Needs root
//! and the test dependencies (scripts/build-testdeps.sh).

mod k8s_common;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use k8s_common::gateway::{GatewayTest, GwLab, all_to, kind, listener, route_spec};
use k8s_common::*;
use kube::ResourceExt;
use kube::api::Api;
use rivora_k8s_api::TcpRoute;
use rivora_lab::LongLivedTcp;
use serde_json::json;

const V4: &str = "10.99.18.40";
const V6: &str = "fd00:99:18::40";

/// Acceptance 2: TCP 80 and UDP 53 on one address, per family, 600 flows each; backendRefs
/// and weights changed under long-lived connections move only new flows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_listeners_per_family_forward_and_route_changes_move_only_new_flows() {
    let g = GatewayTest::new("gwop", &["10.99.18.40/30", "fd00:99:18::40/126"]).await;
    // Removed backends drain for the whole test: established flows stay on them.
    let lab = GwLab::with_retire(&g, "gwop", &[2, 1], 600).await;
    let ns = g.t.ns.clone();
    // blue: pods 0 and 1 (node 1); green: pod 2 (node 2). Both families, TCP and UDP.
    for (svc, pods) in [("blue", vec![0, 1]), ("green", vec![2])] {
        for (proto, port) in [("TCP", 80u16), ("UDP", 53)] {
            let name = format!("{svc}-{}", proto.to_lowercase());
            g.backend(&ns, &name, port, proto).await;
            let v4: Vec<(IpAddr, String)> = pods
                .iter()
                .map(|i| (lab.pod(*i), lab.node_of(*i)))
                .collect();
            let v6: Vec<(IpAddr, String)> = pods
                .iter()
                .map(|i| (lab.pod6(*i), lab.node_of(*i)))
                .collect();
            for eps in [v4, v6] {
                let eps: Vec<(IpAddr, &str)> = eps.iter().map(|(a, n)| (*a, n.as_str())).collect();
                g.endpoints(&ns, &name, proto, &eps).await;
            }
        }
    }
    for (gw, addr) in [("gw4", V4), ("gw6", V6)] {
        g.gateway(
            gw,
            json!([listener("tcp", 80, "TCP"), listener("udp", 53, "UDP")]),
            json!({"addresses": [{"type": "IPAddress", "value": addr}]}),
        )
        .await;
        for (proto, port) in [("TCP", 80u16), ("UDP", 53)] {
            g.route(
                kind(proto),
                &ns,
                &format!("{gw}-{}", proto.to_lowercase()),
                route_spec(
                    json!({"name": gw, "sectionName": proto.to_lowercase()}),
                    json!([{"name": format!("blue-{}", proto.to_lowercase()), "port": port}]),
                ),
            )
            .await;
        }
    }
    let blue4 = [lab.pod(0), lab.pod(1)];
    let blue6 = [lab.pod6(0), lab.pod6(1)];
    let mut first = 20000u16;
    for (gw, addr, blue) in [("gw4", V4, &blue4), ("gw6", V6, &blue6)] {
        let addr: IpAddr = addr.parse().unwrap();
        assert_eq!(
            g.addresses(gw, 1).await,
            [addr],
            "{gw}: the requested address is bound"
        );
        g.gateway_condition(gw, "Programmed", "True", "Programmed")
            .await;
        for (proto, port) in [("TCP", 80u16), ("UDP", 53)] {
            lab.programmed(addr, port, proto, blue).await;
            let r = lab.round(proto, addr, port, first, 600);
            first += 600;
            assert!(r.all_ok(), "{gw} {proto}: {r}");
            assert_eq!(
                r.per_backend.len(),
                2,
                "{gw} {proto}: both blue pods serve: {r}"
            );
            eprintln!("{gw} {proto}: {r}");
        }
    }

    // Long-lived connections to the IPv4 TCP listener, then the route moves to green.
    let target = SocketAddr::new(V4.parse().unwrap(), 80);
    lab.lab.route_vip_via(target.ip(), 1).unwrap();
    let long = LongLivedTcp::start(
        &lab.lab.client,
        target,
        20,
        Duration::from_millis(100),
        Duration::from_secs(2),
    )
    .unwrap();
    g.route(
        "TCPRoute",
        &ns,
        "gw4-tcp",
        route_spec(
            json!({"name": "gw4", "sectionName": "tcp"}),
            json!([{"name": "green-tcp", "port": 80}]),
        ),
    )
    .await;
    lab.programmed(target.ip(), 80, "TCP", &[lab.pod(2)]).await;
    let r = lab.round("TCP", target.ip(), 80, first, 100);
    first += 100;
    all_to(
        "new connections after the backendRefs change",
        &r,
        &lab.pod_name(2),
    );

    // Weights: blue 1, green 3; new connections split about 1:3 (400 flows), the old ones stay.
    g.route(
        "TCPRoute",
        &ns,
        "gw4-tcp",
        route_spec(
            json!({"name": "gw4", "sectionName": "tcp"}),
            json!([{"name": "blue-tcp", "port": 80, "weight": 1}, {"name": "green-tcp", "port": 80, "weight": 3}]),
        ),
    )
    .await;
    lab.programmed(
        target.ip(),
        80,
        "TCP",
        &[lab.pod(0), lab.pod(1), lab.pod(2)],
    )
    .await;
    let r = lab.round("TCP", target.ip(), 80, first, 400);
    assert!(r.all_ok(), "{r}");
    let green = r.shares().get(&lab.pod_name(2)).copied().unwrap_or(0.0);
    eprintln!(
        "weights blue 1 / green 3: green took {:.1}% of 400 new connections",
        green * 100.0
    );
    assert!(
        (green - 0.75).abs() <= 0.05,
        "green's share {green:.3}, want 0.75 +- 0.05: {r}"
    );
    // Let the long-lived connections exchange for a while longer, then check every one.
    let (before, _) = long.snapshot();
    wait_for(
        "the long-lived connections keep exchanging",
        WAIT,
        || async {
            let (now, _) = long.snapshot();
            if now >= before + 200 {
                Ok(())
            } else {
                Err(format!("{now} exchanges, {before} before"))
            }
        },
    )
    .await;
    let report = long.stop();
    eprintln!(
        "long-lived: {} connections, {} exchanges, {} failed, per backend {:?}",
        report.connections, report.exchanges, report.failed_connections, report.per_backend
    );
    assert!(
        report.all_ok(),
        "every established connection keeps its backend: {report:?}"
    );
    assert!(
        report
            .per_backend
            .keys()
            .all(|p| *p == lab.pod_name(0) || *p == lab.pod_name(1)),
        "the long-lived connections were all opened to blue: {report:?}"
    );
}

/// Acceptance 3: each failure has its condition and reason, and the working Gateway keeps
/// forwarding through all of them; acceptance 4: a new leader writes nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_reported_precisely_the_rest_forwards_and_a_new_leader_rewrites_nothing() {
    // One IPv4 address in the pool.
    let mut g = GatewayTest::new("gwfl", &["10.99.18.50/32"]).await;
    let lab = GwLab::new(&g, "gwfl", &[1]).await;
    let ns = g.t.ns.clone();
    g.backend(&ns, "echo", 3000, "TCP").await;
    g.endpoints(&ns, "echo", "TCP", &[(lab.pod(0), lab.node.as_str())])
        .await;
    g.gateway(
        "good",
        json!([listener("tcp", 9300, "TCP"),
               {"name": "web", "port": 8080, "protocol": "INVALID"},
               {"name": "same-ns-only", "port": 9301, "protocol": "TCP"}]),
        json!({}),
    )
    .await;
    g.route(
        "TCPRoute",
        &ns,
        "good",
        route_spec(
            json!({"name": "good", "sectionName": "tcp"}),
            json!([{"name": "echo", "port": 3000}]),
        ),
    )
    .await;
    let addr = g.addresses("good", 1).await[0];
    lab.programmed(addr, 9300, "TCP", &[lab.pod(0)]).await;
    let mut first = 30000u16;
    let mut still_forwards = |what: &str| {
        let r = lab.round("TCP", addr, 9300, first, 30);
        first += 30;
        all_to(
            &format!("the good Gateway forwards ({what})"),
            &r,
            &lab.pod_name(0),
        );
    };
    still_forwards("at first");

    // A protocol Gateway API does not define: that listener only.
    g.listener_condition("good", "web", "Accepted", "False", "UnsupportedProtocol", 0)
        .await;
    g.listener_condition("good", "tcp", "Programmed", "True", "Programmed", 1)
        .await;
    g.gateway_condition("good", "Accepted", "True", "ListenersNotValid")
        .await;
    still_forwards("beside a listener of an unknown protocol");

    // A route from a namespace the listener does not allow (allowedRoutes: Same).
    let other = rivora_kube_testbed::unique_name("gwfl-other");
    rivora_kube_testbed::ensure_namespace(&g.t.admin, &other)
        .await
        .unwrap();
    g.route(
        "TCPRoute",
        &other,
        "foreign",
        route_spec(
            json!({"name": "good", "namespace": ns, "sectionName": "same-ns-only"}),
            json!([{"name": "echo", "namespace": ns, "port": 3000}]),
        ),
    )
    .await;
    g.route_condition(
        "TCPRoute",
        &other,
        "foreign",
        "good",
        None,
        "Accepted",
        "False",
        "NotAllowedByListeners",
    )
    .await;
    g.listener_condition("good", "same-ns-only", "Accepted", "True", "Accepted", 0)
        .await;
    assert!(
        !lab.agents[0]
            .vips()
            .await
            .unwrap()
            .iter()
            .any(|v| v.port == 9301),
        "nothing forwards for the refused route"
    );
    still_forwards("beside a refused route");

    // Pool exhaustion: the one address is taken.
    g.gateway("starved", json!([listener("tcp", 9300, "TCP")]), json!({}))
        .await;
    g.gateway_condition("starved", "Programmed", "False", "AddressNotAssigned")
        .await;
    // A requested address outside every pool.
    g.gateway(
        "outside",
        json!([listener("tcp", 9300, "TCP")]),
        json!({"addresses": [{"type": "IPAddress", "value": "192.0.2.77"}]}),
    )
    .await;
    g.gateway_condition("outside", "Programmed", "False", "AddressNotUsable")
        .await;
    still_forwards("beside an exhausted pool and an unusable address");

    // Acceptance 4: a new leader after all that writes nothing again.
    let versions = |g: &GatewayTest| {
        let admin = g.t.admin.clone();
        let ns = ns.clone();
        let other = other.clone();
        let class_name = g.class_name.clone();
        async move {
            let mut v = BTreeMap::new();
            for gw in Api::<gateway_api::gateways::Gateway>::namespaced(admin.clone(), &ns)
                .list(&Default::default())
                .await
                .unwrap()
            {
                v.insert(
                    format!("Gateway {}", gw.name_any()),
                    gw.resource_version().unwrap(),
                );
            }
            for (n, rns) in [("good", &ns), ("foreign", &other)] {
                let r = Api::<TcpRoute>::namespaced(admin.clone(), rns)
                    .get(n)
                    .await
                    .unwrap();
                v.insert(format!("TCPRoute {rns}/{n}"), r.resource_version().unwrap());
            }
            let class = Api::<gateway_api::gatewayclasses::GatewayClass>::all(admin.clone())
                .get(&class_name)
                .await
                .unwrap();
            v.insert(
                format!("GatewayClass {class_name}"),
                class.resource_version().unwrap(),
            );
            v
        }
    };
    let before = versions(&g).await;
    let passes_before = g.passes();
    assert!(passes_before > 0, "the first leader made passes");
    g.stop_controller();
    g.start_controller("controller-2").await;
    // The new replica leads once the old Lease expires (4 s), then passes; wait for two.
    let started = Instant::now();
    wait_for(
        "the new leader passes twice",
        Duration::from_secs(40),
        || async {
            let p = g.passes();
            if p >= 2 {
                Ok(())
            } else {
                Err(format!("{p} passes after {:?}", started.elapsed()))
            }
        },
    )
    .await;
    let after = versions(&g).await;
    eprintln!(
        "new leader: {} passes, {} objects' resourceVersions compared",
        g.passes(),
        after.len()
    );
    assert_eq!(
        before, after,
        "no status written a second time by the new leader"
    );
    still_forwards("after the leader changed");

    // Acceptance 5: the roles are enough (all of the above ran under them) and no broader.
    let forbidden = |what: &str, r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what} must be forbidden, got {other:?}"),
    };
    let status = json!({"status": {"conditions": []}});
    let merge = kube::api::Patch::Merge(&status);
    let pp = kube::api::PatchParams::default();
    let gws = |c: &kube::Client| Api::<gateway_api::gateways::Gateway>::namespaced(c.clone(), &ns);
    let routes = |c: &kube::Client| Api::<TcpRoute>::namespaced(c.clone(), &ns);
    // rivorad reads Gateway API objects and writes none of them.
    assert!(gws(&g.t.rivorad).list(&Default::default()).await.is_ok());
    forbidden(
        "rivorad: gateways/status",
        gws(&g.t.rivorad)
            .patch_status("good", &pp, &merge)
            .await
            .map(drop),
    );
    forbidden(
        "rivorad: tcproutes/status",
        routes(&g.t.rivorad)
            .patch_status("good", &pp, &merge)
            .await
            .map(drop),
    );
    // The controller writes status only: not a Gateway's or a route's spec, and no deletes.
    let spec = json!({"spec": {"listeners": []}});
    forbidden(
        "controller: gateways (spec)",
        gws(&g.controller_client)
            .patch("good", &pp, &kube::api::Patch::Merge(&spec))
            .await
            .map(drop),
    );
    forbidden(
        "controller: delete tcproutes",
        routes(&g.controller_client)
            .delete("good", &Default::default())
            .await
            .map(drop),
    );
    forbidden(
        "controller: referencegrants writes",
        Api::<gateway_api::referencegrants::ReferenceGrant>::namespaced(
            g.controller_client.clone(),
            &ns,
        )
        .delete("none", &Default::default())
        .await
        .map(drop),
    );
}

/// The part-2 restart rules hold for Gateways: with `--persist-datapath`, SIGKILL the node
/// agent under traffic to a Gateway and delete another Gateway while it is down. Through the
/// kill and the restart every new and long-lived connection to the first Gateway succeeds,
/// the deleted Gateway's VIP is adopted and kept until the initial sync is complete, then
/// removed, and the first Gateway's `Programmed` never changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_agent_keeps_gateways_forwarding_and_prunes_only_after_a_full_pass() {
    let g = GatewayTest::new("gwrs", &["10.99.18.60/30"]).await;
    let mut lab = GwLab::start(&g, "gwrs", &[2], 0, &["--persist-datapath"]).await;
    let ns = g.t.ns.clone();
    g.backend(&ns, "echo", 3000, "TCP").await;
    g.endpoints(
        &ns,
        "echo",
        "TCP",
        &[
            (lab.pod(0), lab.node.as_str()),
            (lab.pod(1), lab.node.as_str()),
        ],
    )
    .await;
    for gw in ["kept", "gone"] {
        g.gateway(gw, json!([listener("tcp", 9300, "TCP")]), json!({}))
            .await;
        g.route(
            "TCPRoute",
            &ns,
            gw,
            route_spec(json!({"name": gw}), json!([{"name": "echo", "port": 3000}])),
        )
        .await;
    }
    let kept = g.addresses("kept", 1).await[0];
    let gone = g.addresses("gone", 1).await[0];
    for (gw, addr) in [("kept", kept), ("gone", gone)] {
        lab.programmed(addr, 9300, "TCP", &[lab.pod(0), lab.pod(1)])
            .await;
        g.gateway_condition(gw, "Programmed", "True", "Programmed")
            .await;
    }
    let programmed_at = |gw: gateway_api::gateways::Gateway| {
        gw.status
            .and_then(|s| s.conditions)
            .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Programmed"))
            .map(|c| (c.status, c.last_transition_time))
    };
    let before = programmed_at(g.get_gateway("kept").await.unwrap());

    let target = SocketAddr::new(kept, 9300);
    lab.lab.route_vip_via(kept, 1).unwrap();
    let timeout = Duration::from_secs(2);
    let long = LongLivedTcp::start(
        &lab.lab.client,
        target,
        10,
        Duration::from_millis(100),
        timeout,
    )
    .unwrap();
    let churn = rivora_lab::ConnectionChurn::start(&lab.lab.client2, target, 20, timeout).unwrap();

    // Down: Gateway "gone" deleted.
    lab.agents[0].kill();
    Api::<gateway_api::gateways::Gateway>::namespaced(g.t.admin.clone(), &ns)
        .delete("gone", &Default::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let args: Vec<&str> = g
        .agent_args()
        .into_iter()
        .chain(["--persist-datapath"])
        .collect();
    lab.agents[0].start_in(&lab.lab.nodes[0].ns, &args);

    // The deleted Gateway's VIP stays until the initial sync is complete, then goes.
    wait_for(
        "the initial sync completes and the deleted Gateway's VIP goes",
        WAIT,
        || async {
            let k = lab.agents[0].kubernetes().await?;
            let vips = lab.agents[0].vips().await?;
            let gone_there = vips.iter().any(|v| v.address == gone.to_string());
            if k.initial_sync_complete && !gone_there {
                Ok(())
            } else {
                Err(format!(
                    "sync {}, gone's VIP there {gone_there}, blocking {:?}",
                    k.initial_sync_complete, k.blocking
                ))
            }
        },
    )
    .await;
    lab.programmed(kept, 9300, "TCP", &[lab.pod(0), lab.pod(1)])
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let churn = churn.stop();
    let long = long.stop();
    eprintln!("gateway restart: churn {churn}\nlong-lived {long:?}");
    assert!(
        churn.all_ok(),
        "new connections through kill and restart: {churn}"
    );
    assert!(churn.attempted >= 40, "{churn}");
    assert!(
        long.all_ok(),
        "long-lived connections through kill and restart: {long:?}"
    );
    let after = programmed_at(g.get_gateway("kept").await.unwrap());
    assert_eq!(before, after, "the kept Gateway's Programmed never changed");
}
