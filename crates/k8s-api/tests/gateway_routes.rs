//! Rivora's v1 TCPRoute and UDPRoute types against the upstream Gateway API CRDs (the standard
//! channel of the version `scripts/testdeps/gateway-api/go.mod` pins) in a real kube-apiserver:
//! objects written with our types read back equal (with the server's defaults filled in), status
//! written by server-side apply to `/status` reads back equal, and what the CRD's validation
//! refuses (a second rule, a 17th backendRef, a Service backendRef without a port) is refused,
//! so our types and the served schema agree. A Gateway and GatewayClass (the `gateway-api`
//! crate's v1 types) round-trip next to them. Needs root and `scripts/build-testdeps.sh`.

use gateway_api::gatewayclasses::{GatewayClass, GatewayClassSpec};
use gateway_api::gateways::{
    Gateway, GatewayListeners, GatewayListenersAllowedRoutes, GatewayListenersAllowedRoutesKinds,
    GatewayListenersAllowedRoutesNamespaces, GatewayListenersAllowedRoutesNamespacesFrom,
    GatewaySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use rivora_k8s_api::route::{GATEWAY_GROUP, ROUTE_ACCEPTED, ROUTE_RESOLVED_REFS};
use rivora_k8s_api::{
    BackendRef, L4RouteRule, ParentReference, RouteParentStatus, RouteStatus, TcpRoute,
    TcpRouteSpec, UdpRoute, UdpRouteSpec,
};
use rivora_kube_testbed::{GatewayChannel, TestBed, ensure_namespace, unique_name};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Written by this test only (the pattern wants `<domain>/<path>`).
const CONTROLLER: &str = "rivora.dev/gateway-routes-test";
const MANAGER: &str = "rivora-gateway-routes-test";

/// Installs the standard-channel CRDs (idempotent: every test of this binary may call it) and
/// returns an admin client and a fresh namespace.
async fn setup(prefix: &str) -> (Client, String) {
    let bed = TestBed::shared();
    let crds = bed
        .install_gateway_api(GatewayChannel::Standard)
        .await
        .unwrap();
    println!(
        "Gateway API {} standard channel: {} CRDs installed",
        bed.assets().gateway_api_version,
        crds.len()
    );
    let client = bed.admin_client().await.unwrap();
    let namespace = unique_name(prefix);
    ensure_namespace(&client, &namespace).await.unwrap();
    (client, namespace)
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        ..Default::default()
    }
}

fn parent(gateway: &str, section: &str, port: i32) -> ParentReference {
    ParentReference {
        name: gateway.into(),
        section_name: Some(section.into()),
        port: Some(port),
        ..Default::default()
    }
}

/// `n` Service backends `web-0`.. on port 8080; the first weighs 3, the second 1 and the rest
/// leave the weight out.
fn backends(n: usize) -> Vec<BackendRef> {
    (0..n)
        .map(|i| BackendRef {
            name: format!("web-{i}"),
            port: Some(8080),
            weight: [Some(3), Some(1)].get(i).copied().flatten(),
            ..Default::default()
        })
        .collect()
}

fn rule(backend_refs: Vec<BackendRef>) -> L4RouteRule {
    L4RouteRule {
        name: Some("main".into()),
        backend_refs,
    }
}

/// `sent` as the API server returns it: the CRD's defaults filled into every reference.
fn with_defaults(
    mut parents: Vec<ParentReference>,
    mut rules: Vec<L4RouteRule>,
) -> (Vec<ParentReference>, Vec<L4RouteRule>) {
    for p in &mut parents {
        p.group.get_or_insert_with(|| GATEWAY_GROUP.into());
        p.kind.get_or_insert_with(|| "Gateway".into());
    }
    for b in rules.iter_mut().flat_map(|r| &mut r.backend_refs) {
        b.group.get_or_insert_with(String::new);
        b.kind.get_or_insert_with(|| "Service".into());
        b.weight.get_or_insert(1);
    }
    (parents, rules)
}

fn condition(type_: &str, reason: &str, generation: Option<i64>) -> Condition {
    Condition {
        type_: type_.into(),
        status: "True".into(),
        reason: reason.into(),
        message: format!("{type_} by the gateway routes test"),
        // Whole seconds: the API server stores RFC 3339 without fractions.
        last_transition_time: Time(Timestamp::from_second(1_780_000_000).unwrap()),
        observed_generation: generation,
    }
}

/// Our status for `parent_ref`, applied server-side to `/status` as [`MANAGER`], then read back.
async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    parent_ref: ParentReference,
    generation: Option<i64>,
) -> RouteStatus
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Serialize + DeserializeOwned,
{
    let status = RouteStatus {
        parents: vec![RouteParentStatus {
            parent_ref,
            controller_name: CONTROLLER.into(),
            conditions: vec![
                condition(ROUTE_ACCEPTED, "Accepted", generation),
                condition(ROUTE_RESOLVED_REFS, "ResolvedRefs", generation),
            ],
        }],
    };
    // Only apiVersion, kind and status: an apply to /status owns nothing else.
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(name, &PatchParams::apply(MANAGER), &Patch::Apply(&patch))
        .await
        .unwrap_or_else(|e| panic!("applying the status of {} {name}: {e}", K::kind(&())));
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_gateway_and_class_round_trip_and_routes_take_status() {
    let (client, ns) = setup("gwroutes").await;

    // GatewayClass (cluster-scoped) and a Gateway with one TCP and one UDP listener.
    let class_name = unique_name("rivora-gwc");
    let class = GatewayClass {
        metadata: meta(&class_name),
        spec: GatewayClassSpec {
            controller_name: CONTROLLER.into(),
            description: Some("gateway routes test".into()),
            ..Default::default()
        },
        status: None,
    };
    let classes: Api<GatewayClass> = Api::all(client.clone());
    classes
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    let got = classes.get(&class_name).await.unwrap();
    assert_eq!(got.spec, class.spec);

    let listener = |name: &str, protocol: &str, port: i32, kind: &str| GatewayListeners {
        name: name.into(),
        protocol: protocol.into(),
        port,
        allowed_routes: Some(GatewayListenersAllowedRoutes {
            kinds: Some(vec![GatewayListenersAllowedRoutesKinds {
                group: Some(GATEWAY_GROUP.into()),
                kind: kind.into(),
            }]),
            namespaces: Some(GatewayListenersAllowedRoutesNamespaces {
                from: Some(GatewayListenersAllowedRoutesNamespacesFrom::Same),
                selector: None,
            }),
        }),
        ..Default::default()
    };
    let gateway = Gateway {
        metadata: meta("gw"),
        spec: GatewaySpec {
            gateway_class_name: class_name.clone(),
            listeners: vec![
                listener("tcp-80", "TCP", 80, "TCPRoute"),
                listener("udp-53", "UDP", 53, "UDPRoute"),
            ],
            ..Default::default()
        },
        status: None,
    };
    let gateways: Api<Gateway> = Api::namespaced(client.clone(), &ns);
    gateways
        .create(&PostParams::default(), &gateway)
        .await
        .unwrap();
    assert_eq!(gateways.get("gw").await.unwrap().spec, gateway.spec);

    // TCPRoute: one rule, two weighted backends, a parentRef with sectionName and port.
    let tcp_spec = TcpRouteSpec {
        parent_refs: vec![parent("gw", "tcp-80", 80)],
        rules: vec![rule(backends(2))],
    };
    let tcp = TcpRoute::new("tcp", tcp_spec.clone());
    let tcp_api: Api<TcpRoute> = Api::namespaced(client.clone(), &ns);
    tcp_api.create(&PostParams::default(), &tcp).await.unwrap();
    let got = tcp_api.get("tcp").await.unwrap();
    let (parents, rules) = with_defaults(tcp_spec.parent_refs, tcp_spec.rules);
    assert_eq!(
        got.spec,
        TcpRouteSpec {
            parent_refs: parents.clone(),
            rules
        }
    );
    println!(
        "TCPRoute read back: {}",
        serde_json::to_string(&got.spec).unwrap()
    );
    let sent = apply_status(&tcp_api, "tcp", parents[0].clone(), got.metadata.generation).await;
    let got = tcp_api.get_status("tcp").await.unwrap();
    assert_eq!(got.status.as_ref(), Some(&sent));
    let managers: Vec<_> = got
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, [MANAGER], "who owns the TCPRoute's status");

    // UDPRoute: the same shape on the UDP listener.
    let udp_spec = UdpRouteSpec {
        parent_refs: vec![parent("gw", "udp-53", 53)],
        rules: vec![rule(backends(2))],
    };
    let udp = UdpRoute::new("udp", udp_spec.clone());
    let udp_api: Api<UdpRoute> = Api::namespaced(client.clone(), &ns);
    udp_api.create(&PostParams::default(), &udp).await.unwrap();
    let got = udp_api.get("udp").await.unwrap();
    let (parents, rules) = with_defaults(udp_spec.parent_refs, udp_spec.rules);
    assert_eq!(
        got.spec,
        UdpRouteSpec {
            parent_refs: parents.clone(),
            rules
        }
    );
    let sent = apply_status(&udp_api, "udp", parents[0].clone(), got.metadata.generation).await;
    let got = udp_api.get_status("udp").await.unwrap();
    assert_eq!(got.status.as_ref(), Some(&sent));
    println!(
        "UDPRoute status read back: {}",
        serde_json::to_string(&got.status).unwrap()
    );
}

/// The refusal of `what` (HTTP 422) and its message, which must name `field` and say `reason`.
async fn refused<K>(api: &Api<K>, object: &K, what: &str, field: &str, reason: &str)
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Serialize + DeserializeOwned,
{
    let err = api
        .create(&PostParams::default(), object)
        .await
        .expect_err(what);
    let msg = err.to_string();
    println!("{what}: refused: {msg}");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "{what}: {msg}"
    );
    assert!(msg.contains(field) && msg.contains(reason), "{what}: {msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_refuses_what_v1_routes_may_not_hold() {
    let (client, ns) = setup("gwinvalid").await;
    let tcp: Api<TcpRoute> = Api::namespaced(client.clone(), &ns);
    let udp: Api<UdpRoute> = Api::namespaced(client, &ns);
    let parents = vec![parent("gw", "tcp-80", 80)];
    let tcp_route = |name: &str, rules: Vec<L4RouteRule>| {
        TcpRoute::new(
            name,
            TcpRouteSpec {
                parent_refs: parents.clone(),
                rules,
            },
        )
    };

    // The boundary itself is accepted: one rule with 16 backends.
    tcp.create(
        &PostParams::default(),
        &tcp_route("sixteen", vec![rule(backends(16))]),
    )
    .await
    .unwrap();
    refused(
        &tcp,
        &tcp_route("two-rules", vec![rule(backends(1)), rule(backends(1))]),
        "a TCPRoute with two rules",
        "spec.rules",
        "must have at most 1 item",
    )
    .await;
    refused(
        &tcp,
        &tcp_route("seventeen", vec![rule(backends(17))]),
        "a TCPRoute with 17 backendRefs",
        "spec.rules[0].backendRefs",
        "must have at most 16 items",
    )
    .await;
    refused(
        &tcp,
        &tcp_route("no-rules", vec![]),
        "a TCPRoute without rules",
        "spec.rules",
        "should have at least 1 item",
    )
    .await;
    let mut portless = backends(1);
    portless[0].port = None;
    refused(
        &tcp,
        &tcp_route("portless", vec![rule(portless)]),
        "a Service backendRef without a port",
        "spec.rules[0].backendRefs[0]",
        "Must have port for Service reference",
    )
    .await;
    refused(
        &udp,
        &UdpRoute::new(
            "two-rules",
            UdpRouteSpec {
                parent_refs: vec![parent("gw", "udp-53", 53)],
                rules: vec![rule(backends(1)), rule(backends(1))],
            },
        ),
        "a UDPRoute with two rules",
        "spec.rules",
        "must have at most 1 item",
    )
    .await;
    let mut heavy = backends(1);
    heavy[0].weight = Some(1_000_001);
    refused(
        &udp,
        &UdpRoute::new(
            "heavy",
            UdpRouteSpec {
                parent_refs: vec![parent("gw", "udp-53", 53)],
                rules: vec![rule(heavy)],
            },
        ),
        "a UDPRoute backend weighing 1,000,001",
        "spec.rules[0].backendRefs[0].weight",
        "less than or equal to 1000000",
    )
    .await;
}
