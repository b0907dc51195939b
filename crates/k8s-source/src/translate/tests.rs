//! Translation of Services case by case (kube-proxy's semantics, policies, conflicts, failures).
use super::*;
use crate::endpoints::tests::slice;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rivora_dataplane::Mode;
use rivora_health::ProbeKind;
use serde_json::{Value, json};

const CLASS: &str = rivora_k8s_api::class::LOAD_BALANCER_CLASS;

/// A Service of ours from its spec and ingress addresses, as the API server serves it.
fn service(ns: &str, name: &str, created: &str, spec: Value, ingress: Value) -> Arc<Service> {
    let mut s = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": ns, "name": name, "creationTimestamp": created,
                     "uid": format!("uid-{name}"), "resourceVersion": "7"},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS},
        "status": {"loadBalancer": {"ingress": ingress}},
    });
    for (k, v) in spec.as_object().unwrap() {
        s["spec"][k] = v.clone();
    }
    Arc::new(serde_json::from_value(s).unwrap())
}

fn web(spec: Value, ingress: Value) -> Arc<Service> {
    service("shop", "web", "2026-01-01T00:00:00Z", spec, ingress)
}

fn http_port() -> Value {
    json!([{"name": "http", "port": 80, "protocol": "TCP"}])
}

fn v4_slice(name: &str, service: &str, port: u16, endpoints: Value) -> Arc<EndpointSlice> {
    slice(
        "shop",
        name,
        Some(service),
        json!({
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": endpoints,
        }),
    )
}

fn ready(addr: &str, node: &str) -> Value {
    json!({"addresses": [addr], "conditions": {"ready": true}, "nodeName": node,
           "targetRef": {"kind": "Pod", "namespace": "shop", "name": format!("pod-{addr}")}})
}

fn terminating(addr: &str, node: &str) -> Value {
    json!({"addresses": [addr], "nodeName": node,
           "conditions": {"ready": false, "serving": true, "terminating": true}})
}

fn node() -> NodeIdentity {
    NodeIdentity {
        name: "node-a".into(),
        addresses: vec!["192.0.2.10".parse().unwrap()],
    }
}

fn run(
    services: Vec<Arc<Service>>,
    slices: Vec<Arc<EndpointSlice>>,
) -> BTreeMap<ServiceKey, Outcome> {
    run_with(services, slices, vec![])
}

fn run_with(
    services: Vec<Arc<Service>>,
    slices: Vec<Arc<EndpointSlice>>,
    policies: Vec<Arc<ServicePolicy>>,
) -> BTreeMap<ServiceKey, Outcome> {
    let snap = Snapshot {
        services,
        slices: slices.into(),
        policies,
        ..Snapshot::default()
    };
    translate(&snap, &node(), &ClassConfig::default())
}

fn key(ns: &str, name: &str) -> ServiceKey {
    ServiceKey {
        namespace: ns.into(),
        name: name.into(),
    }
}

fn vips_of<'a>(out: &'a BTreeMap<ServiceKey, Outcome>, ns: &str, name: &str) -> &'a ServiceVips {
    match &out[&key(ns, name)] {
        Outcome::Translated(v) => v,
        other => panic!("{ns}/{name}: {other:?}"),
    }
}

fn error_of(out: &BTreeMap<ServiceKey, Outcome>, ns: &str, name: &str) -> TranslateError {
    match &out[&key(ns, name)] {
        Outcome::Failed(e) => e.clone(),
        other => panic!("{ns}/{name} did not fail: {other:?}"),
    }
}

fn backends(v: &K8sVip) -> Vec<String> {
    v.spec.backends.iter().map(|b| b.key.to_string()).collect()
}

#[test]
fn one_nat_vip_per_address_port_and_protocol_with_the_slice_port_as_backend_port() {
    let svc = web(
        json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                         {"name": "dns", "port": 53, "protocol": "UDP"}]}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let s = slice(
        "shop",
        "web-1",
        Some("web"),
        json!({
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                      {"name": "dns", "port": 5353, "protocol": "UDP"}],
            "endpoints": [ready("10.1.0.2", "node-a"), ready("10.1.0.1", "node-b")],
        }),
    );
    let out = run(vec![svc], vec![s]);
    let v = vips_of(&out, "shop", "web");
    assert_eq!(out[&key("shop", "web")].state(), ServiceState::Programmed);
    let summary: Vec<_> = v
        .vips
        .iter()
        .map(|v| (v.spec.name.clone(), v.spec.key.to_string()))
        .collect();
    assert_eq!(
        summary,
        // Sorted by key: 53/udp before 80/tcp.
        [
            (
                "k8s/shop/web/dns/udp/203.0.113.5".to_string(),
                "203.0.113.5:53/udp".to_string()
            ),
            (
                "k8s/shop/web/http/tcp/203.0.113.5".to_string(),
                "203.0.113.5:80/tcp".to_string()
            ),
        ]
    );
    let http = &v.vips[1];
    assert_eq!(http.spec.mode, Mode::Nat);
    assert_eq!(backends(http), ["10.1.0.1:8080", "10.1.0.2:8080"]);
    assert!(http.spec.backends.iter().all(|b| b.weight == 1));
    assert_eq!(backends(&v.vips[0]), ["10.1.0.1:5353", "10.1.0.2:5353"]);
    // Metadata lines up with spec.backends.
    let meta: Vec<_> = http
        .backends
        .iter()
        .map(|b| (b.key.to_string(), b.local, b.snat, b.node.clone()))
        .collect();
    assert_eq!(
        meta,
        [
            (
                "10.1.0.1:8080".to_string(),
                false,
                true,
                Some("node-b".to_string())
            ),
            (
                "10.1.0.2:8080".to_string(),
                true,
                false,
                Some("node-a".to_string())
            ),
        ]
    );
    assert_eq!(
        http.backends[0].target.as_ref().unwrap().to_string(),
        "Pod shop/pod-10.1.0.1"
    );
    let origin = http.origin.service().expect("a Service VIP");
    assert_eq!(origin.service, key("shop", "web"));
    assert_eq!(origin.port_name.as_deref(), Some("http"));
    assert_eq!(origin.uid.as_deref(), Some("uid-web"));
    assert_eq!(origin.resource_version.as_deref(), Some("7"));
    assert_eq!(http.traffic_policy, TrafficPolicy::Cluster);
    assert_eq!(
        (
            http.source_ranges.clone(),
            http.affinity_timeout,
            http.health_check_node_port
        ),
        (None, None, None)
    );
    assert_eq!(http.announce, Announce::default());
    assert!(
        !http.spec.affinity_client_ip && !http.spec.nat_fib && http.spec.syn_rate_limit.is_none()
    );
}

#[test]
fn dual_stack_gives_one_vip_set_per_family_fed_by_its_own_slices() {
    let svc = web(
        json!({"ports": http_port()}),
        json!([{"ip": "203.0.113.5"}, {"ip": "2001:db8::5"}]),
    );
    let v4 = v4_slice("web-4", "web", 8080, json!([ready("10.1.0.1", "node-a")]));
    let v6 = slice(
        "shop",
        "web-6",
        Some("web"),
        json!({
            "addressType": "IPv6",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [ready("fd00::1", "node-a")],
        }),
    );
    let out = run(vec![svc], vec![v4, v6]);
    let v = vips_of(&out, "shop", "web");
    let got: Vec<_> = v
        .vips
        .iter()
        .map(|v| (v.spec.name.clone(), backends(v)))
        .collect();
    assert_eq!(
        got,
        [
            (
                "k8s/shop/web/http/tcp/203.0.113.5".to_string(),
                vec!["10.1.0.1:8080".to_string()]
            ),
            (
                "k8s/shop/web/http/tcp/2001:db8::5".to_string(),
                vec!["[fd00::1]:8080".to_string()]
            ),
        ]
    );
}

#[test]
fn only_our_load_balancers_with_an_address_get_vips() {
    let mut cluster_ip = (*web(json!({"type": "ClusterIP"}), json!([]))).clone();
    cluster_ip.metadata.name = Some("internal".into());
    let mut other_class = (*web(
        json!({"loadBalancerClass": "x/y", "ports": http_port()}),
        json!([{"ip": "203.0.113.9"}]),
    ))
    .clone();
    other_class.metadata.name = Some("theirs".into());
    let pending = service(
        "shop",
        "pending",
        "2026-01-01T00:00:00Z",
        json!({"ports": http_port()}),
        json!([]),
    );
    let hostname = service(
        "shop",
        "named",
        "2026-01-01T00:00:00Z",
        json!({"ports": http_port()}),
        json!([{"hostname": "lb.example.com"}]),
    );
    let out = run(
        vec![
            Arc::new(cluster_ip),
            Arc::new(other_class),
            pending,
            hostname,
        ],
        vec![],
    );
    assert_eq!(out[&key("shop", "internal")], Outcome::NotOurs);
    assert_eq!(out[&key("shop", "theirs")], Outcome::NotOurs);
    assert!(out[&key("shop", "theirs")].reconciled());
    for name in ["pending", "named"] {
        let v = vips_of(&out, "shop", name);
        assert!(v.vips.is_empty() && v.warnings.is_empty(), "{name}: {v:?}");
        assert_eq!(out[&key("shop", name)].state(), ServiceState::Programmed);
    }
    // The other class's address is not ours to protect: an endpoint may use it.
    let s = v4_slice(
        "pending-1",
        "pending",
        80,
        json!([ready("203.0.113.9", "node-a")]),
    );
    let assigned = service(
        "shop",
        "pending",
        "2026-01-01T00:00:00Z",
        json!({"ports": http_port()}),
        json!([{"ip": "203.0.113.1"}]),
    );
    let out = run(
        vec![
            assigned,
            web(
                json!({"loadBalancerClass": "x/y"}),
                json!([{"ip": "203.0.113.9"}]),
            ),
        ],
        vec![s],
    );
    assert_eq!(
        backends(&vips_of(&out, "shop", "pending").vips[0]),
        ["203.0.113.9:80"]
    );
}

#[test]
fn sctp_and_proxy_ip_mode_are_refused_with_warnings_and_count_as_reconciled() {
    let mixed = web(
        json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                         {"name": "sig", "port": 3868, "protocol": "SCTP"}]}),
        json!([{"ip": "203.0.113.5"}, {"ip": "203.0.113.6", "ipMode": "Proxy"}]),
    );
    let out = run(vec![mixed], vec![]);
    let v = vips_of(&out, "shop", "web");
    assert_eq!(v.vips.len(), 1);
    assert_eq!(v.vips[0].spec.name, "k8s/shop/web/http/tcp/203.0.113.5");
    assert_eq!(
        v.warnings,
        [
            Warning::ProxyIpMode {
                address: "203.0.113.6".parse().unwrap()
            },
            Warning::UnsupportedProtocol {
                port: "sig".into(),
                protocol: "SCTP".into()
            },
        ]
    );
    assert!(v.warnings[1].to_string().contains("SCTP is not supported"));
    let sctp_only = web(
        json!({"ports": [{"port": 3868, "protocol": "SCTP"}]}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let out = run(vec![sctp_only], vec![]);
    assert_eq!(out[&key("shop", "web")].state(), ServiceState::Refused);
    assert!(out[&key("shop", "web")].reconciled());
}

#[test]
fn a_key_conflict_goes_to_the_older_service_then_to_the_lower_name() {
    let old = service(
        "b",
        "old",
        "2026-01-01T00:00:00Z",
        json!({"ports": http_port()}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let new = service(
        "a",
        "new",
        "2026-02-01T00:00:00Z",
        json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                                       {"name": "alt", "port": 81, "protocol": "TCP"}]}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let out = run(vec![new, old], vec![]);
    assert_eq!(vips_of(&out, "b", "old").vips.len(), 1);
    let err = error_of(&out, "a", "new");
    assert_eq!(
        err,
        TranslateError::KeyConflict {
            key: VipKey::exact("203.0.113.5".parse().unwrap(), 80, proto::TCP),
            holder: key("b", "old"),
        }
    );
    assert_eq!(
        err.to_string(),
        "VIP 203.0.113.5:80/tcp is already Service b/old's (older); this Service gets none of its VIPs"
    );
    assert!(!out[&key("a", "new")].reconciled());
    // Same age: namespace/name decides.
    let x = service(
        "x",
        "same",
        "2026-01-01T00:00:00Z",
        json!({"ports": http_port()}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let y = service(
        "y",
        "same",
        "2026-01-01T00:00:00Z",
        json!({"ports": http_port()}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let out = run(vec![y, x], vec![]);
    assert!(out[&key("x", "same")].reconciled());
    assert!(matches!(
        error_of(&out, "y", "same"),
        TranslateError::KeyConflict { .. }
    ));
    // A failed Service claims nothing: a third, younger one gets the key the loser wanted.
    let broken = service(
        "a",
        "broken",
        "2026-01-01T00:00:00Z",
        json!({"ports": http_port(), "loadBalancerSourceRanges": ["nope"]}),
        json!([{"ip": "203.0.113.7"}]),
    );
    let later = service(
        "a",
        "later",
        "2026-03-01T00:00:00Z",
        json!({"ports": http_port()}),
        json!([{"ip": "203.0.113.7"}]),
    );
    let out = run(vec![broken, later], vec![]);
    assert_eq!(
        error_of(&out, "a", "broken"),
        TranslateError::SourceRange("nope".into())
    );
    assert_eq!(vips_of(&out, "a", "later").vips.len(), 1);
}

#[test]
fn source_ranges_are_split_by_family_and_a_family_without_ranges_is_closed() {
    let svc = web(
        json!({"ports": http_port(), "loadBalancerSourceRanges": ["10.0.0.0/8", " 192.168.1.7/24", "fd00::/8"]}),
        json!([{"ip": "203.0.113.5"}, {"ip": "2001:db8::5"}]),
    );
    let out = run(vec![svc], vec![]);
    let v = vips_of(&out, "shop", "web");
    let ranges: Vec<Vec<String>> = v
        .vips
        .iter()
        .map(|v| {
            v.source_ranges
                .clone()
                .unwrap()
                .iter()
                .map(|n| n.to_string())
                .collect()
        })
        .collect();
    assert_eq!(
        ranges,
        [
            vec!["10.0.0.0/8".to_string(), "192.168.1.0/24".to_string()],
            vec!["fd00::/8".to_string()]
        ]
    );
    let v4_only = web(
        json!({"ports": http_port(), "loadBalancerSourceRanges": ["10.0.0.0/8"]}),
        json!([{"ip": "2001:db8::5"}]),
    );
    let out = run(vec![v4_only], vec![]);
    assert_eq!(
        vips_of(&out, "shop", "web").vips[0].source_ranges,
        Some(vec![])
    );
}

#[test]
fn client_ip_affinity_carries_its_timeout() {
    let with = web(
        json!({"ports": http_port(), "sessionAffinity": "ClientIP",
                          "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let default = service(
        "shop",
        "dflt",
        "2026-01-01T00:00:00Z",
        json!({"ports": http_port(), "sessionAffinity": "ClientIP"}),
        json!([{"ip": "203.0.113.6"}]),
    );
    let none = service(
        "shop",
        "none",
        "2026-01-01T00:00:00Z",
        json!({"ports": http_port(), "sessionAffinity": "None"}),
        json!([{"ip": "203.0.113.7"}]),
    );
    let out = run(vec![with, default, none], vec![]);
    let w = &vips_of(&out, "shop", "web").vips[0];
    assert!(w.spec.affinity_client_ip);
    assert_eq!(w.affinity_timeout, Some(Duration::from_secs(60)));
    let d = &vips_of(&out, "shop", "dflt").vips[0];
    assert_eq!(d.affinity_timeout, Some(DEFAULT_AFFINITY_TIMEOUT));
    let n = &vips_of(&out, "shop", "none").vips[0];
    assert!(!n.spec.affinity_client_ip && n.affinity_timeout.is_none());
}

#[test]
fn local_traffic_policy_lists_local_endpoints_and_counts_them_for_healthz() {
    let svc = web(
        json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                         {"name": "https", "port": 443, "protocol": "TCP"}],
               "externalTrafficPolicy": "Local", "healthCheckNodePort": 31234}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let s = slice(
        "shop",
        "web-1",
        Some("web"),
        json!({
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                      {"name": "https", "port": 8443, "protocol": "TCP"}],
            "endpoints": [ready("10.1.0.1", "node-a"), ready("10.1.0.2", "node-b"),
                          terminating("10.1.0.3", "node-a")],
        }),
    );
    let out = run(vec![svc.clone()], vec![s.clone()]);
    let v = vips_of(&out, "shop", "web");
    let http = &v.vips[0];
    assert_eq!(http.traffic_policy, TrafficPolicy::Local);
    assert_eq!(backends(http), ["10.1.0.1:8080", "10.1.0.3:8080"]);
    let roles: Vec<_> = http
        .backends
        .iter()
        .map(|b| (b.role, b.local, b.snat, b.draining()))
        .collect();
    assert_eq!(
        roles,
        [
            (Role::Active, true, false, false),
            (Role::Draining, true, false, true)
        ]
    );
    assert_eq!(http.health_check_node_port, Some(31234));
    // 10.1.0.1 serves both ports and counts once; the terminating one does not count.
    assert_eq!(
        v.health_check,
        Some(HealthCheckNodePort {
            port: 31234,
            local_endpoints: 1
        })
    );

    // The last local ready endpoint starts terminating: healthz drops to 0, the fallback
    // keeps it serving new flows.
    let s2 = slice(
        "shop",
        "web-1",
        Some("web"),
        json!({
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [terminating("10.1.0.1", "node-a"), ready("10.1.0.2", "node-b")],
        }),
    );
    let out = run(vec![svc], vec![s2]);
    let v = vips_of(&out, "shop", "web");
    assert_eq!(v.health_check.as_ref().unwrap().local_endpoints, 0);
    assert_eq!(v.vips[0].backends[0].role, Role::Fallback);
    assert!(
        v.vips[1].backends.is_empty(),
        "https has no slice port: no backend"
    );
}

#[test]
fn cluster_policy_keeps_draining_endpoints_and_has_no_health_port() {
    let svc = web(
        json!({"ports": http_port(), "healthCheckNodePort": 31234}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let s = v4_slice(
        "web-1",
        "web",
        8080,
        json!([ready("10.1.0.1", "node-b"), terminating("10.1.0.2", "node-b"),
                                                   {"addresses": ["10.1.0.3"], "conditions": {"ready": false, "serving": false}}]),
    );
    let out = run(vec![svc], vec![s]);
    let v = vips_of(&out, "shop", "web");
    assert_eq!(backends(&v.vips[0]), ["10.1.0.1:8080", "10.1.0.2:8080"]);
    assert_eq!(v.vips[0].backends[1].role, Role::Draining);
    assert!(v.vips[0].backends.iter().all(|b| b.snat && !b.local));
    assert_eq!(
        (v.health_check.clone(), v.vips[0].health_check_node_port),
        (None, None)
    );
}

/// kube-proxy rejects a Service without any endpoint to use ("connection refused" at
/// once); with ETP Local and no local endpoint it drops. The VIP's refused share does the
/// first, and is absent for the second and whenever an endpoint is usable.
#[test]
fn no_endpoint_at_all_refuses_new_flows_but_local_without_local_endpoints_drops() {
    let ports = json!([{"name": "http", "port": 80, "protocol": "TCP"}]);
    let cluster = web(json!({"ports": ports}), json!([{"ip": "203.0.113.5"}]));
    let out = run(vec![cluster.clone()], vec![]);
    let v = &vips_of(&out, "shop", "web").vips[0];
    assert!(v.backends.is_empty());
    assert_eq!(v.reject_weight, 1, "no endpoint: refused");
    let s = v4_slice("web-1", "web", 8080, json!([ready("10.1.0.1", "node-b")]));
    let out = run(vec![cluster], vec![s.clone()]);
    assert_eq!(vips_of(&out, "shop", "web").vips[0].reject_weight, 0);
    // ETP Local, the only endpoint on another node: dropped, as kube-proxy does.
    let local = web(
        json!({"ports": ports, "externalTrafficPolicy": "Local", "healthCheckNodePort": 31234}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let out = run(vec![local], vec![s]);
    let v = &vips_of(&out, "shop", "web").vips[0];
    assert!(v.backends.is_empty());
    assert_eq!(
        v.reject_weight, 0,
        "ETP Local without a local endpoint drops"
    );
}

#[test]
fn loops_and_unparsable_addresses_fail_the_service() {
    let a = service(
        "shop",
        "a",
        "2026-01-01T00:00:00Z",
        json!({"ports": http_port()}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let b = service(
        "shop",
        "b",
        "2026-01-01T00:00:00Z",
        json!({"ports": http_port()}),
        json!([{"ip": "203.0.113.6"}]),
    );
    // a's endpoint is b's VIP; b's endpoint is this node.
    let sa = v4_slice("a-1", "a", 80, json!([ready("203.0.113.6", "node-b")]));
    let sb = v4_slice("b-1", "b", 80, json!([ready("192.0.2.10", "node-a")]));
    let out = run(vec![a.clone(), b], vec![sa, sb]);
    assert_eq!(
        error_of(&out, "shop", "a").to_string(),
        "endpoint 203.0.113.6 (EndpointSlice a-1) is a VIP address: it would loop through the balancer"
    );
    assert!(matches!(
        error_of(&out, "shop", "b"),
        TranslateError::EndpointIsNode { .. }
    ));
    // Even an endpoint that is not ready is refused: the slice is wrong.
    let own_vip = v4_slice(
        "a-1",
        "a",
        80,
        json!([{"addresses": ["203.0.113.5"], "conditions": {"ready": false}}]),
    );
    let out = run(vec![a.clone()], vec![own_vip]);
    assert!(matches!(
        error_of(&out, "shop", "a"),
        TranslateError::EndpointIsVip { .. }
    ));
    let garbage = v4_slice("a-1", "a", 80, json!([{"addresses": ["not-an-ip"]}]));
    let out = run(vec![a], vec![garbage]);
    assert!(matches!(
        error_of(&out, "shop", "a"),
        TranslateError::Endpoint(EndpointError::UnparsableAddress { .. })
    ));
    let bad_ingress = service(
        "shop",
        "c",
        "2026-01-01T00:00:00Z",
        json!({"ports": http_port()}),
        json!([{"ip": "203.0.113"}]),
    );
    let out = run(vec![bad_ingress], vec![]);
    assert_eq!(
        error_of(&out, "shop", "c").to_string(),
        "status.loadBalancer.ingress: \"203.0.113\" is not an IP address"
    );
}

fn policy(name: &str, created: &str, spec: Value) -> Arc<ServicePolicy> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "rivora.dev/v1alpha1", "kind": "ServicePolicy",
            "metadata": {"namespace": "shop", "name": name, "creationTimestamp": created},
            "spec": spec,
        }))
        .unwrap(),
    )
}

#[test]
fn service_policies_attach_per_port_with_section_name_first() {
    let svc = web(
        json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                         {"name": "dns", "port": 53, "protocol": "UDP"}]}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let s = slice(
        "shop",
        "web-1",
        Some("web"),
        json!({
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "dns", "port": 5353, "protocol": "UDP"}],
            "endpoints": [ready("10.1.0.1", "node-b")],
        }),
    );
    let whole = policy(
        "whole",
        "2026-01-01T00:00:00Z",
        json!({
            "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
            "healthCheck": {"type": "tcp", "port": 9000},
            "synRateLimit": {"rate": 100},
            "advertise": false, "communities": ["65000:1"],
        }),
    );
    let section = policy(
        "section",
        "2026-06-01T00:00:00Z",
        json!({
            "targetRefs": [{"group": "", "kind": "Service", "name": "web", "sectionName": "http"}],
            "healthCheck": {"type": "http", "path": "/ready", "interval": "500ms", "timeout": "250ms", "fall": 2},
            "synRateLimit": {"rate": 50, "burst": 80},
            "natForwarding": "fib",
        }),
    );
    let out = run_with(vec![svc], vec![s], vec![whole, section]);
    let v = vips_of(&out, "shop", "web");
    let (http, dns) = (&v.vips[1], &v.vips[0]);
    assert_eq!(http.spec.key.port, 80);
    assert_eq!(http.policy.as_deref(), Some("shop/section"));
    assert_eq!(
        http.spec.syn_rate_limit,
        Some(RateLimit {
            rate: 50,
            burst: 80
        })
    );
    assert!(http.spec.nat_fib);
    assert_eq!(http.announce, Announce::default());
    let check = http.backends[0].check.clone().unwrap();
    assert_eq!(check.target, "10.1.0.1:8080".parse().unwrap());
    assert_eq!(
        check.kind,
        ProbeKind::Http {
            path: "/ready".into(),
            expect: (200, 399),
            host: None
        }
    );
    assert_eq!(
        (check.interval, check.timeout, check.rise, check.fall),
        (Duration::from_millis(500), Duration::from_millis(250), 2, 2)
    );

    assert_eq!(dns.policy.as_deref(), Some("shop/whole"));
    // A SYN limit means nothing to UDP.
    assert_eq!(dns.spec.syn_rate_limit, None);
    assert!(!dns.spec.nat_fib);
    assert_eq!(
        dns.announce,
        Announce {
            advertise: false,
            communities: vec!["65000:1".into()]
        }
    );
    let check = dns.backends[0].check.clone().unwrap();
    assert_eq!(
        (check.kind, check.target),
        (ProbeKind::Tcp, "10.1.0.1:9000".parse().unwrap())
    );
    assert_eq!(
        (check.interval, check.timeout, check.rise, check.fall),
        (Duration::from_secs(2), Duration::from_secs(1), 2, 3)
    );
}

#[test]
fn a_policy_with_type_none_probes_nothing_and_a_bad_one_fails_naming_the_field() {
    let svc = web(
        json!({"ports": http_port()}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let s = v4_slice("web-1", "web", 8080, json!([ready("10.1.0.1", "node-b")]));
    let none = policy(
        "none",
        "2026-01-01T00:00:00Z",
        json!({
            "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
            "healthCheck": {"type": "none"}, "synRateLimit": {"rate": 10},
        }),
    );
    let out = run_with(vec![svc.clone()], vec![s.clone()], vec![none]);
    let v = &vips_of(&out, "shop", "web").vips[0];
    assert_eq!(v.backends[0].check, None);
    assert_eq!(
        v.spec.syn_rate_limit,
        Some(RateLimit {
            rate: 10,
            burst: 10
        })
    );
    let bad = policy(
        "bad",
        "2026-01-01T00:00:00Z",
        json!({
            "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
            "healthCheck": {"type": "tcp", "interval": "soon"},
        }),
    );
    let out = run_with(vec![svc.clone()], vec![s], vec![bad]);
    let err = error_of(&out, "shop", "web").to_string();
    assert!(
        err.starts_with("ServicePolicy shop/bad: healthCheck.interval:"),
        "{err}"
    );
    // Refused with no backend to probe too (the same check rivora-controller reports as
    // Invalid), and naming the field the prober refuses.
    let bad_path = policy(
        "bad-path",
        "2026-01-01T00:00:00Z",
        json!({
            "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
            "healthCheck": {"type": "http", "path": "/has space"},
        }),
    );
    let out = run_with(vec![svc], vec![], vec![bad_path]);
    let err = error_of(&out, "shop", "web").to_string();
    assert!(
        err.starts_with("ServicePolicy shop/bad-path: healthCheck.path: "),
        "{err}"
    );
}

#[test]
fn one_backend_in_two_services_is_probed_the_older_services_way() {
    let older = service(
        "shop",
        "older",
        "2026-01-01T00:00:00Z",
        json!({"ports": http_port()}),
        json!([{"ip": "203.0.113.5"}]),
    );
    let younger = service(
        "shop",
        "younger",
        "2026-02-01T00:00:00Z",
        json!({"ports": http_port()}),
        json!([{"ip": "203.0.113.6"}]),
    );
    let s1 = v4_slice(
        "older-1",
        "older",
        8080,
        json!([ready("10.1.0.1", "node-b")]),
    );
    let s2 = v4_slice(
        "younger-1",
        "younger",
        8080,
        json!([ready("10.1.0.1", "node-b"), ready("10.1.0.2", "node-b")]),
    );
    let p = policy(
        "p",
        "2026-01-01T00:00:00Z",
        json!({
            "targetRefs": [{"group": "", "kind": "Service", "name": "younger"}],
            "healthCheck": {"type": "tcp"},
        }),
    );
    let out = run_with(vec![younger, older], vec![s1, s2], vec![p]);
    let o = &vips_of(&out, "shop", "older").vips[0];
    assert_eq!(o.backends[0].check, None);
    let y = vips_of(&out, "shop", "younger");
    // The shared backend takes the older Service's (no) check; the other keeps its own.
    assert_eq!(y.vips[0].backends[0].check, None);
    assert!(y.vips[0].backends[1].check.is_some());
    assert_eq!(
        y.warnings,
        [Warning::CheckOverridden {
            backend: o.backends[0].key,
            by: key("shop", "older")
        }]
    );
    assert_eq!(
        out[&key("shop", "younger")].state(),
        ServiceState::Programmed
    );
}

#[test]
fn vip_names_are_unique_across_services_and_unnamed_ports_use_the_number() {
    let a = service(
        "shop",
        "a",
        "2026-01-01T00:00:00Z",
        json!({"ports": [{"port": 80, "protocol": "TCP"}]}),
        json!([{"ip": "203.0.113.5"}, {"ip": "2001:db8::5"}]),
    );
    let b = service(
        "shop",
        "b",
        "2026-01-01T00:00:00Z",
        json!({"ports": [{"name": "web", "port": 80, "protocol": "TCP"}, {"name": "web-udp", "port": 80, "protocol": "UDP"}]}),
        json!([{"ip": "203.0.113.6"}]),
    );
    let out = run(vec![a, b], vec![]);
    let names: Vec<String> = out
        .values()
        .filter_map(|o| match o {
            Outcome::Translated(v) => Some(v.vips.iter().map(|v| v.spec.name.clone())),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(
        names,
        [
            "k8s/shop/a/80/tcp/203.0.113.5",
            "k8s/shop/a/80/tcp/2001:db8::5",
            "k8s/shop/b/web/tcp/203.0.113.6",
            "k8s/shop/b/web-udp/udp/203.0.113.6",
        ]
    );
    assert_eq!(names.iter().collect::<BTreeSet<_>>().len(), names.len());
}
