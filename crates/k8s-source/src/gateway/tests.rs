use super::*;
use crate::endpoints::tests::slice;
use crate::translate::translate_all;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rivora_k8s_api::class::{ClassConfig, GATEWAY_CONTROLLER_NAME};
use serde_json::{Value, json};

const NS: &str = "infra";

fn class() -> Arc<GatewayClass> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "rivora", "generation": 1},
            "spec": {"controllerName": GATEWAY_CONTROLLER_NAME},
        }))
        .unwrap(),
    )
}

fn other_class() -> Arc<GatewayClass> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "theirs"},
            "spec": {"controllerName": "example.com/other"},
        }))
        .unwrap(),
    )
}

/// A Gateway of `class` with `listeners` and bound `addresses`, as the API server serves it.
fn gateway(name: &str, class: &str, listeners: Value, addresses: &[&str]) -> Arc<Gateway> {
    let addrs: Vec<Value> = addresses
        .iter()
        .map(|a| json!({"type": "IPAddress", "value": a}))
        .collect();
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"namespace": NS, "name": name, "generation": 3, "uid": format!("uid-{name}"),
                         "creationTimestamp": "2026-12-01T00:00:00Z"},
            "spec": {"gatewayClassName": class, "listeners": listeners},
            "status": {"addresses": addrs},
        }))
        .unwrap(),
    )
}

fn tcp_listener(name: &str, port: u16) -> Value {
    json!({"name": name, "port": port, "protocol": "TCP"})
}

fn tcp_route(name: &str, created: &str, parent: &str, backends: Value) -> Arc<TcpRoute> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TCPRoute",
            "metadata": {"namespace": NS, "name": name, "generation": 1, "creationTimestamp": created},
            "spec": {"parentRefs": [{"name": parent}], "rules": [{"backendRefs": backends}]},
        }))
        .unwrap(),
    )
}

/// A ClusterIP Service with one port `tcp` (3000 -> slices' 8080), as backends are.
fn backend_service(name: &str, protocol: &str) -> Arc<Service> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": NS, "name": name},
            "spec": {"type": "ClusterIP", "ports": [
                {"name": "p", "port": 3000, "targetPort": 8080, "protocol": protocol}]},
        }))
        .unwrap(),
    )
}

fn endpoints(
    service: &str,
    family: &str,
    protocol: &str,
    eps: &[(&str, &str)],
) -> Arc<EndpointSlice> {
    let list: Vec<Value> = eps
        .iter()
        .map(|(a, node)| json!({"addresses": [a], "conditions": {"ready": true}, "nodeName": node}))
        .collect();
    slice(
        NS,
        &format!("{service}-{family}"),
        Some(service),
        json!({"addressType": family, "ports": [{"name": "p", "port": 8080, "protocol": protocol}],
               "endpoints": list}),
    )
}

fn node() -> NodeIdentity {
    NodeIdentity {
        name: "n1".into(),
        addresses: vec!["10.220.0.11".parse().unwrap()],
    }
}

fn snapshot(
    gateways: Vec<Arc<Gateway>>,
    tcp_routes: Vec<Arc<TcpRoute>>,
    services: Vec<Arc<Service>>,
    slices: impl Into<crate::endpoints::SliceIndex>,
) -> Snapshot {
    Snapshot {
        services,
        slices: slices.into(),
        policies: vec![],
        gateway_objects: GatewayObjects {
            classes: vec![class(), other_class()],
            gateways,
            tcp_routes,
            ..GatewayObjects::default()
        },
    }
}

fn run(s: &Snapshot) -> BTreeMap<ObjKey, GatewayOutcome> {
    translate_all(s, &node(), &ClassConfig::default()).gateways
}

/// (backend, weight) of a VIP, and its reject weight.
fn weights(v: &K8sVip) -> (Vec<(String, u32)>, u32) {
    (
        v.spec
            .backends
            .iter()
            .map(|b| (b.key.to_string(), b.weight))
            .collect(),
        v.reject_weight,
    )
}

fn only_vips(out: &BTreeMap<ObjKey, GatewayOutcome>, gw: &str) -> Vec<K8sVip> {
    let o = &out[&ObjKey::new(NS, gw)];
    assert_eq!(o.listeners.len(), 1, "{o:?}");
    o.listeners[0].result.clone().expect("translated")
}

#[test]
fn weights_split_over_endpoints_exactly_and_reduced() {
    assert_eq!(share_weights(&[(70, 1), (30, 2)], 0), (vec![14, 3], 0));
    assert_eq!(
        share_weights(&[(1, 3)], 1),
        (vec![1], 3),
        "1/3 each, 1 refused"
    );
    assert_eq!(share_weights(&[], 5), (vec![], 1));
    // lcm(7, 11, 13, 17) > 1,000: rounded at scale 1,000, still in proportion.
    let (per, rej) = share_weights(&[(1, 7), (1, 11), (1, 13), (1, 17)], 0);
    assert_eq!((per, rej), (vec![143, 91, 77, 59], 0));
    // Route weights up to 1,000,000 stay within the dataplane's bound.
    let (per, rej) = share_weights(&[(1_000_000, 2), (999_999, 3)], 1_000_000);
    assert!(
        per.iter()
            .chain([&rej])
            .all(|w| u64::from(*w) <= MAX_ENDPOINT_WEIGHT)
    );
    assert!(per[0] > per[1] && rej > per[0], "{per:?} {rej}");
}

#[test]
fn a_weighted_route_becomes_maglev_weights_and_weight_zero_gets_no_slot() {
    let s = snapshot(
        vec![gateway(
            "gw",
            "rivora",
            json!([tcp_listener("tcp", 9300)]),
            &["203.0.113.10"],
        )],
        vec![tcp_route(
            "r",
            "2026-12-01T00:00:01Z",
            "gw",
            json!([{"name": "v1", "port": 3000, "weight": 70},
                   {"name": "v2", "port": 3000, "weight": 30},
                   {"name": "v3", "port": 3000, "weight": 0}]),
        )],
        vec![
            backend_service("v1", "TCP"),
            backend_service("v2", "TCP"),
            backend_service("v3", "TCP"),
        ],
        vec![
            endpoints("v1", "IPv4", "TCP", &[("10.1.0.1", "n1")]),
            endpoints(
                "v2",
                "IPv4",
                "TCP",
                &[("10.1.0.2", "n1"), ("10.1.0.3", "n2")],
            ),
            endpoints("v3", "IPv4", "TCP", &[("10.1.0.4", "n1")]),
        ],
    );
    let out = run(&s);
    let vips = only_vips(&out, "gw");
    assert_eq!(vips.len(), 1);
    let v = &vips[0];
    assert_eq!(v.spec.name, "gw/infra/gw/tcp/tcp/203.0.113.10");
    assert_eq!(
        v.spec.key,
        VipKey::exact("203.0.113.10".parse().unwrap(), 9300, proto::TCP)
    );
    assert_eq!(
        weights(v),
        (
            vec![
                ("10.1.0.1:8080".into(), 14),
                ("10.1.0.2:8080".into(), 3),
                ("10.1.0.3:8080".into(), 3)
            ],
            0
        ),
        "70 on one endpoint, 30 over two, the weight-0 Service absent"
    );
    assert!(
        v.backends
            .iter()
            .any(|b| b.key.port == 8080 && b.snat && !b.local),
        "the endpoint on n2 is source-translated (Cluster locality)"
    );
    let VipOrigin::Gateway(o) = &v.origin else {
        panic!("{:?}", v.origin)
    };
    assert_eq!(
        (o.listener.as_str(), o.route.to_string(), o.generation),
        ("tcp", "infra/r".to_string(), 3)
    );
    assert!(out[&ObjKey::new(NS, "gw")].reconciled());
}

#[test]
fn unresolved_backends_and_backends_without_endpoints_keep_their_share_as_refused() {
    let s = snapshot(
        vec![gateway(
            "gw",
            "rivora",
            json!([tcp_listener("tcp", 9300)]),
            &["203.0.113.10"],
        )],
        vec![tcp_route(
            "r",
            "2026-12-01T00:00:01Z",
            "gw",
            json!([{"name": "v1", "port": 3000, "weight": 2},
                   {"name": "missing", "port": 3000, "weight": 1},
                   {"name": "empty", "port": 3000, "weight": 1},
                   {"name": "udp-only", "port": 3000, "weight": 1}]),
        )],
        vec![
            backend_service("v1", "TCP"),
            backend_service("empty", "TCP"),
            backend_service("udp-only", "UDP"),
        ],
        vec![
            endpoints("v1", "IPv4", "TCP", &[("10.1.0.1", "n1")]),
            endpoints("udp-only", "IPv4", "UDP", &[("10.1.0.9", "n1")]),
        ],
    );
    let vips = only_vips(&run(&s), "gw");
    assert_eq!(
        weights(&vips[0]),
        (vec![("10.1.0.1:8080".into(), 2)], 3),
        "2 of 5 forwarded; the missing Service, the one without endpoints and the one without a TCP port refuse theirs"
    );

    let s = snapshot(
        vec![gateway(
            "gw",
            "rivora",
            json!([tcp_listener("tcp", 9300)]),
            &["203.0.113.10"],
        )],
        vec![tcp_route(
            "r",
            "2026-12-01T00:00:01Z",
            "gw",
            json!([{"name": "missing", "port": 3000}]),
        )],
        vec![],
        vec![],
    );
    let vips = only_vips(&run(&s), "gw");
    assert_eq!(
        weights(&vips[0]),
        (vec![], 1),
        "nothing to forward to: every flow refused"
    );
}

#[test]
fn the_oldest_route_carries_traffic_and_other_classes_are_not_ours() {
    let s = snapshot(
        vec![
            gateway(
                "gw",
                "rivora",
                json!([tcp_listener("tcp", 9300)]),
                &["203.0.113.10"],
            ),
            gateway(
                "theirs",
                "theirs",
                json!([tcp_listener("tcp", 9300)]),
                &["203.0.113.11"],
            ),
        ],
        vec![
            tcp_route(
                "newer",
                "2026-12-01T00:00:09Z",
                "gw",
                json!([{"name": "v2", "port": 3000}]),
            ),
            tcp_route(
                "older",
                "2026-12-01T00:00:01Z",
                "gw",
                json!([{"name": "v1", "port": 3000}]),
            ),
            tcp_route(
                "t",
                "2026-12-01T00:00:01Z",
                "theirs",
                json!([{"name": "v1", "port": 3000}]),
            ),
        ],
        vec![backend_service("v1", "TCP"), backend_service("v2", "TCP")],
        vec![
            endpoints("v1", "IPv4", "TCP", &[("10.1.0.1", "n1")]),
            endpoints("v2", "IPv4", "TCP", &[("10.1.0.2", "n1")]),
        ],
    );
    let out = run(&s);
    assert_eq!(
        out.keys().cloned().collect::<Vec<_>>(),
        [ObjKey::new(NS, "gw")]
    );
    let o = &out[&ObjKey::new(NS, "gw")];
    assert_eq!(o.listeners[0].route, ObjKey::new(NS, "older"));
    let vips = o.listeners[0].result.as_ref().unwrap();
    assert_eq!(weights(&vips[0]).0, [("10.1.0.1:8080".to_string(), 1)]);
}

#[test]
fn each_address_gets_its_familys_endpoints_and_local_keeps_this_nodes_only() {
    let mut gw = (*gateway(
        "gw",
        "rivora",
        json!([tcp_listener("tcp", 80)]),
        &["203.0.113.10", "2001:db8::10"],
    ))
    .clone();
    gw.metadata.annotations =
        Some([(ANNOTATION_TRAFFIC_POLICY.to_string(), "Local".to_string())].into());
    let s = snapshot(
        vec![Arc::new(gw)],
        vec![tcp_route(
            "r",
            "2026-12-01T00:00:01Z",
            "gw",
            json!([{"name": "v1", "port": 3000}]),
        )],
        vec![backend_service("v1", "TCP")],
        vec![
            endpoints(
                "v1",
                "IPv4",
                "TCP",
                &[("10.1.0.1", "n1"), ("10.1.0.2", "n2")],
            ),
            endpoints("v1", "IPv6", "TCP", &[("fd00::1", "n1"), ("fd00::2", "n2")]),
        ],
    );
    let vips = only_vips(&run(&s), "gw");
    let got: Vec<_> = vips
        .iter()
        .map(|v| (v.spec.key.addr.to_string(), weights(v).0))
        .collect();
    assert_eq!(
        got,
        [
            (
                "203.0.113.10".to_string(),
                vec![("10.1.0.1:8080".to_string(), 1)]
            ),
            (
                "2001:db8::10".to_string(),
                vec![("[fd00::1]:8080".to_string(), 1)]
            ),
        ]
    );
    assert!(
        vips.iter()
            .flat_map(|v| &v.backends)
            .all(|b| b.local && !b.snat)
    );
}

#[test]
fn a_failing_listener_does_not_stop_the_others_and_services_keep_their_keys() {
    // Listener a's backend endpoint is the Gateway's own address (a loop); listener b's key
    // is held by a Service that asked for the Gateway's address by hand.
    let lb: Arc<Service> = Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": "shop", "name": "web", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": rivora_k8s_api::class::LOAD_BALANCER_CLASS,
                     "ports": [{"port": 81, "protocol": "TCP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}},
        }))
        .unwrap(),
    );
    let mut loop_svc = (*backend_service("loop", "TCP")).clone();
    loop_svc.metadata.name = Some("loop".into());
    let s = snapshot(
        vec![gateway(
            "gw",
            "rivora",
            json!([
                tcp_listener("a", 80),
                tcp_listener("b", 81),
                tcp_listener("c", 82)
            ]),
            &["203.0.113.10"],
        )],
        vec![tcp_route(
            "ra",
            "2026-12-01T00:00:01Z",
            "gw",
            json!([{"name": "loop", "port": 3000}]),
        )],
        vec![Arc::new(loop_svc), backend_service("v1", "TCP"), lb],
        vec![
            endpoints("loop", "IPv4", "TCP", &[("203.0.113.10", "n1")]),
            endpoints("v1", "IPv4", "TCP", &[("10.1.0.1", "n1")]),
        ],
    );
    // The route has no sectionName: it attaches to a, b and c.
    let out = run(&s);
    let o = &out[&ObjKey::new(NS, "gw")];
    assert_eq!(o.listeners.len(), 3);
    assert!(
        matches!(
            o.listeners[0].result,
            Err(TranslateError::EndpointIsVip { .. })
        ),
        "{:?}",
        o.listeners[0]
    );
    assert!(matches!(
        o.listeners[1].result,
        Err(TranslateError::EndpointIsVip { .. })
    ));
    assert!(!o.reconciled());

    let s2 = snapshot(
        s.gateway_objects.gateways.clone(),
        vec![tcp_route(
            "rv",
            "2026-12-01T00:00:01Z",
            "gw",
            json!([{"name": "v1", "port": 3000}]),
        )],
        s.services.clone(),
        s.slices.clone(),
    );
    let t = translate_all(&s2, &node(), &ClassConfig::default());
    let o = &t.gateways[&ObjKey::new(NS, "gw")];
    let results: Vec<_> = o
        .listeners
        .iter()
        .map(|l| (l.name.as_str(), l.result.is_ok()))
        .collect();
    assert_eq!(results, [("a", true), ("b", false), ("c", true)]);
    let err = o.listeners[1].result.as_ref().unwrap_err().to_string();
    assert!(err.contains("Service shop/web"), "{err}");
    assert!(
        matches!(
            t.services[&crate::translate::ServiceKey {
                namespace: "shop".into(),
                name: "web".into()
            }],
            crate::translate::Outcome::Translated(_)
        ),
        "the Service keeps its VIP"
    );
}

/// A kube-dns-style backend Service (53/TCP listed before 53/UDP): a UDPRoute to port 53 gets
/// the UDP port's endpoints (the slice's `dns` port), not the TCP one's nor none.
#[test]
fn a_udp_route_to_a_port_number_listed_for_both_protocols_takes_the_udp_port() {
    let svc: Arc<Service> = Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": NS, "name": "dns"},
            "spec": {"type": "ClusterIP", "ports": [
                {"name": "dns-tcp", "port": 53, "targetPort": 5353, "protocol": "TCP"},
                {"name": "dns", "port": 53, "targetPort": 5300, "protocol": "UDP"}]},
        }))
        .unwrap(),
    );
    let eps = slice(
        NS,
        "dns-ipv4",
        Some("dns"),
        json!({"addressType": "IPv4",
               "ports": [{"name": "dns-tcp", "port": 5353, "protocol": "TCP"},
                         {"name": "dns", "port": 5300, "protocol": "UDP"}],
               "endpoints": [{"addresses": ["10.244.1.5"], "conditions": {"ready": true},
                              "nodeName": "n1"}]}),
    );
    let route: Arc<UdpRoute> = Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "UDPRoute",
            "metadata": {"namespace": NS, "name": "dns", "generation": 1,
                         "creationTimestamp": "2026-12-01T00:00:00Z"},
            "spec": {"parentRefs": [{"name": "gw"}],
                     "rules": [{"backendRefs": [{"name": "dns", "port": 53}]}]},
        }))
        .unwrap(),
    );
    let mut s = snapshot(
        vec![gateway(
            "gw",
            "rivora",
            json!([{"name": "dns", "port": 53, "protocol": "UDP"}]),
            &["192.0.2.53"],
        )],
        vec![],
        vec![svc],
        vec![eps],
    );
    s.gateway_objects.udp_routes = vec![route];
    let vips = only_vips(&run(&s), "gw");
    assert_eq!(vips.len(), 1);
    assert_eq!(weights(&vips[0]), (vec![("10.244.1.5:5300".into(), 1)], 0));
}
