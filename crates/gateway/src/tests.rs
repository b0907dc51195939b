//! The rules case by case, named after the Gateway API v1.6 conformance
//! tests for TCPRoute and UDPRoute where one applies (what they assert about
//! status; the traffic half is the e2e tests').

use std::collections::BTreeMap;

use crate::view::*;
use crate::*;

const CTRL: &str = "rivora.dev/gateway-controller";

struct World {
    classes: Vec<GatewayClassView>,
    gateways: Vec<GatewayView>,
    routes: Vec<RouteView>,
    grants: Vec<ReferenceGrantView>,
    namespaces: Vec<NamespaceView>,
    services: Vec<ServiceView>,
}

impl World {
    /// Class `rivora` (ours), Gateway gw/gw with a TCP listener `tcp` on 8080,
    /// a second TCP listener `tcp2` on 8081 and a UDP listener `udp` on 53;
    /// Services gw/web (port 80) and other/web (port 80).
    fn new() -> Self {
        World {
            classes: vec![GatewayClassView {
                name: "rivora".into(),
                controller_name: CTRL.into(),
                has_parameters: false,
                generation: 1,
            }],
            gateways: vec![GatewayView {
                key: ObjKey::new("gw", "gw"),
                class: "rivora".into(),
                generation: 3,
                listeners: vec![
                    listener("tcp", 8080, "TCP"),
                    listener("tcp2", 8081, "TCP"),
                    listener("udp", 53, "UDP"),
                ],
            }],
            routes: vec![],
            grants: vec![],
            namespaces: vec![
                ns("gw", &[]),
                ns("other", &[("team", "blue")]),
                ns("third", &[]),
            ],
            services: vec![svc("gw", "web", &[80]), svc("other", "web", &[80])],
        }
    }

    fn eval(&self) -> Evaluation {
        evaluate(&Snapshot {
            controller_name: CTRL,
            classes: &self.classes,
            gateways: &self.gateways,
            routes: &self.routes,
            grants: &self.grants,
            namespaces: &self.namespaces,
            services: &self.services,
        })
    }
}

fn listener(name: &str, port: u16, protocol: &str) -> ListenerView {
    ListenerView {
        name: name.into(),
        port,
        protocol: protocol.into(),
        hostname: None,
        namespaces: AllowedNamespaces::Same,
        kinds: vec![],
    }
}

fn ns(name: &str, labels: &[(&str, &str)]) -> NamespaceView {
    NamespaceView {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// A Service listing each of `ports` for TCP and for UDP.
fn svc(ns: &str, name: &str, ports: &[u16]) -> ServiceView {
    ServiceView {
        key: ObjKey::new(ns, name),
        ports: ports
            .iter()
            .flat_map(|p| [(*p, "TCP".to_string()), (*p, "UDP".to_string())])
            .collect(),
    }
}

fn parent(section: Option<&str>, port: Option<u16>) -> ParentRefView {
    ParentRefView {
        group: GATEWAY_GROUP.into(),
        kind: "Gateway".into(),
        namespace: "gw".into(),
        name: "gw".into(),
        section_name: section.map(Into::into),
        port,
    }
}

fn backend(ns: &str, name: &str, weight: u32) -> BackendRefView {
    BackendRefView {
        group: String::new(),
        kind: "Service".into(),
        namespace: ns.into(),
        name: name.into(),
        port: Some(80),
        weight,
    }
}

fn route(
    kind: RouteKind,
    ns: &str,
    name: &str,
    created: i64,
    parents: Vec<ParentRefView>,
    backends: Vec<BackendRefView>,
) -> RouteView {
    RouteView {
        kind,
        key: ObjKey::new(ns, name),
        created: Some(created),
        generation: 1,
        parent_refs: parents,
        backend_refs: backends,
    }
}

fn parent_of<'a>(e: &'a Evaluation, kind: RouteKind, ns: &str, name: &str) -> &'a RouteParentEval {
    &e.routes[&(kind, ObjKey::new(ns, name))][0]
}

fn listener_of<'a>(e: &'a Evaluation, name: &str) -> &'a ListenerEval {
    e.gateways[&ObjKey::new("gw", "gw")]
        .listeners
        .iter()
        .find(|l| l.name == name)
        .unwrap()
}

fn reasons(c: &Condition) -> (bool, &'static str) {
    (c.status, c.reason)
}

#[test]
fn a_simple_route_is_accepted_resolved_and_carried() {
    let mut w = World::new();
    w.routes.push(route(
        RouteKind::Udp,
        "gw",
        "dns",
        1,
        vec![parent(Some("udp"), None)],
        vec![backend("gw", "web", 1)],
    ));
    let e = w.eval();
    assert_eq!(reasons(&e.classes["rivora"]), (true, "Accepted"));
    let p = parent_of(&e, RouteKind::Udp, "gw", "dns");
    assert_eq!(reasons(&p.accepted), (true, "Accepted"));
    assert_eq!(reasons(&p.resolved_refs), (true, "ResolvedRefs"));
    let l = listener_of(&e, "udp");
    assert_eq!(
        (l.attached_routes, l.supported_kinds.clone()),
        (1, vec!["UDPRoute"])
    );
    let active = l.active.as_ref().unwrap();
    assert_eq!(active.route, ObjKey::new("gw", "dns"));
    assert_eq!(
        active.backends,
        [ResolvedBackend {
            service: ObjKey::new("gw", "web"),
            port: 80,
            weight: 1,
            valid: true
        }]
    );
    assert_eq!(listener_of(&e, "tcp").attached_routes, 0);
    assert_eq!(
        reasons(&e.gateways[&ObjKey::new("gw", "gw")].accepted),
        (true, "Accepted")
    );
}

#[test]
fn invalid_backend_ref_nonexistent() {
    let mut w = World::new();
    w.routes.push(route(
        RouteKind::Tcp,
        "gw",
        "r",
        1,
        vec![parent(Some("tcp"), None)],
        vec![backend("gw", "nope", 1), backend("gw", "web", 1)],
    ));
    let e = w.eval();
    let p = parent_of(&e, RouteKind::Tcp, "gw", "r");
    assert_eq!(reasons(&p.accepted), (true, "Accepted"), "still attached");
    assert_eq!(reasons(&p.resolved_refs), (false, "BackendNotFound"));
    assert!(
        p.resolved_refs.message.contains("gw/nope"),
        "{}",
        p.resolved_refs.message
    );
    // The invalid backend keeps its weight: half the connections refused.
    let b = &listener_of(&e, "tcp").active.as_ref().unwrap().backends;
    assert_eq!(
        b.iter().map(|b| (b.weight, b.valid)).collect::<Vec<_>>(),
        [(1, false), (1, true)]
    );
    // A port the Service lacks is not found either.
    w.routes[0].backend_refs = vec![BackendRefView {
        port: Some(81),
        ..backend("gw", "web", 1)
    }];
    let e = w.eval();
    assert_eq!(
        reasons(&parent_of(&e, RouteKind::Tcp, "gw", "r").resolved_refs),
        (false, "BackendNotFound")
    );
}

#[test]
fn invalid_cross_namespace_backend_ref_then_reference_grant_added_and_deleted() {
    let mut w = World::new();
    w.routes.push(route(
        RouteKind::Tcp,
        "gw",
        "r",
        1,
        vec![parent(Some("tcp"), None)],
        vec![backend("other", "web", 1)],
    ));
    let e = w.eval();
    let p = parent_of(&e, RouteKind::Tcp, "gw", "r");
    assert_eq!(reasons(&p.resolved_refs), (false, "RefNotPermitted"));
    // A grant for another kind, or from another namespace, does not count.
    w.grants.push(ReferenceGrantView {
        namespace: "other".into(),
        from: vec![(GATEWAY_GROUP.into(), "UDPRoute".into(), "gw".into())],
        to: vec![(String::new(), "Service".into(), None)],
    });
    assert_eq!(
        reasons(&parent_of(&w.eval(), RouteKind::Tcp, "gw", "r").resolved_refs),
        (false, "RefNotPermitted")
    );
    w.grants.push(ReferenceGrantView {
        namespace: "other".into(),
        from: vec![(GATEWAY_GROUP.into(), "TCPRoute".into(), "gw".into())],
        to: vec![(String::new(), "Service".into(), Some("web".into()))],
    });
    let e = w.eval();
    assert_eq!(
        reasons(&parent_of(&e, RouteKind::Tcp, "gw", "r").resolved_refs),
        (true, "ResolvedRefs")
    );
    assert!(listener_of(&e, "tcp").active.as_ref().unwrap().backends[0].valid);
    // Deleting the grant revokes it.
    w.grants.pop();
    let e = w.eval();
    assert_eq!(
        reasons(&parent_of(&e, RouteKind::Tcp, "gw", "r").resolved_refs),
        (false, "RefNotPermitted")
    );
    assert!(!listener_of(&e, "tcp").active.as_ref().unwrap().backends[0].valid);
}

#[test]
fn not_allowed_by_listeners_a_tcp_route_on_a_udp_listener() {
    let mut w = World::new();
    w.routes.push(route(
        RouteKind::Tcp,
        "gw",
        "r",
        1,
        vec![parent(Some("udp"), None)],
        vec![backend("gw", "web", 1)],
    ));
    let e = w.eval();
    let p = parent_of(&e, RouteKind::Tcp, "gw", "r");
    assert_eq!(reasons(&p.accepted), (false, "NotAllowedByListeners"));
    let l = listener_of(&e, "udp");
    assert_eq!((l.attached_routes, l.active.is_none()), (0, true));
}

#[test]
fn multiple_routes_on_one_listener_are_all_accepted_and_the_oldest_carries_traffic() {
    let mut w = World::new();
    // Names sorted the other way round from their age: age decides.
    w.routes.push(route(
        RouteKind::Tcp,
        "gw",
        "aa-newer",
        20,
        vec![parent(Some("tcp"), None)],
        vec![backend("gw", "web", 1)],
    ));
    w.routes.push(route(
        RouteKind::Tcp,
        "gw",
        "zz-older",
        10,
        vec![parent(Some("tcp"), None)],
        vec![backend("gw", "web", 7)],
    ));
    let e = w.eval();
    for name in ["aa-newer", "zz-older"] {
        assert_eq!(
            reasons(&parent_of(&e, RouteKind::Tcp, "gw", name).accepted),
            (true, "Accepted")
        );
    }
    let l = listener_of(&e, "tcp");
    assert_eq!(l.attached_routes, 2);
    assert_eq!(l.supported_kinds, ["TCPRoute"]);
    assert_eq!(
        l.active.as_ref().unwrap().route,
        ObjKey::new("gw", "zz-older")
    );
    // Same age: namespace/name decides.
    w.routes[0].created = Some(10);
    let e = w.eval();
    assert_eq!(
        listener_of(&e, "tcp").active.as_ref().unwrap().route,
        ObjKey::new("gw", "aa-newer")
    );
}

#[test]
fn parent_ref_attach_all_reaches_every_listener_of_the_kind() {
    let mut w = World::new();
    w.routes.push(route(
        RouteKind::Tcp,
        "gw",
        "r",
        1,
        vec![parent(None, None)],
        vec![backend("gw", "web", 1)],
    ));
    let e = w.eval();
    assert_eq!(
        reasons(&parent_of(&e, RouteKind::Tcp, "gw", "r").accepted),
        (true, "Accepted")
    );
    for l in ["tcp", "tcp2"] {
        let l = listener_of(&e, l);
        assert_eq!(l.attached_routes, 1, "{}", l.name);
        assert!(l.accepted.status && l.resolved_refs.status);
    }
    assert_eq!(listener_of(&e, "udp").attached_routes, 0);
}

#[test]
fn parent_ref_port_and_section_name() {
    let mut w = World::new();
    let mk = |name: &str, section: Option<&str>, port: Option<u16>| {
        route(
            RouteKind::Tcp,
            "gw",
            name,
            1,
            vec![parent(section, port)],
            vec![backend("gw", "web", 1)],
        )
    };
    w.routes = vec![
        mk("by-port", None, Some(8081)),
        mk("by-name", Some("tcp"), None),
        mk("by-both", Some("tcp2"), Some(8081)),
        mk("mismatch", Some("tcp"), Some(8081)),
        mk("no-port", None, Some(9999)),
    ];
    let e = w.eval();
    for ok in ["by-port", "by-name", "by-both"] {
        assert_eq!(
            reasons(&parent_of(&e, RouteKind::Tcp, "gw", ok).accepted),
            (true, "Accepted"),
            "{ok}"
        );
    }
    for bad in ["mismatch", "no-port"] {
        let p = parent_of(&e, RouteKind::Tcp, "gw", bad);
        assert_eq!(reasons(&p.accepted), (false, "NoMatchingParent"), "{bad}");
    }
    assert_eq!(listener_of(&e, "tcp").attached_routes, 1);
    assert_eq!(listener_of(&e, "tcp2").attached_routes, 2);
}

#[test]
fn weighted_routing_carries_the_weights_including_zero() {
    let mut w = World::new();
    w.services.push(svc("gw", "b", &[80]));
    w.services.push(svc("gw", "c", &[80]));
    w.routes.push(route(
        RouteKind::Udp,
        "gw",
        "r",
        1,
        vec![parent(Some("udp"), Some(53))],
        vec![
            backend("gw", "web", 70),
            backend("gw", "b", 30),
            backend("gw", "c", 0),
        ],
    ));
    let e = w.eval();
    let b = &listener_of(&e, "udp").active.as_ref().unwrap().backends;
    assert_eq!(
        b.iter()
            .map(|b| (b.service.name.as_str(), b.weight, b.valid))
            .collect::<Vec<_>>(),
        [("web", 70, true), ("b", 30, true), ("c", 0, true)]
    );
}

#[test]
fn allowed_routes_namespaces_same_all_and_selector() {
    let mut w = World::new();
    w.routes.push(route(
        RouteKind::Tcp,
        "other",
        "r",
        1,
        vec![parent(Some("tcp"), None)],
        vec![backend("other", "web", 1)],
    ));
    // Same (the default): another namespace is not allowed.
    assert_eq!(
        reasons(&parent_of(&w.eval(), RouteKind::Tcp, "other", "r").accepted),
        (false, "NotAllowedByListeners")
    );
    w.gateways[0].listeners[0].namespaces = AllowedNamespaces::All;
    assert_eq!(
        reasons(&parent_of(&w.eval(), RouteKind::Tcp, "other", "r").accepted),
        (true, "Accepted")
    );
    let mut sel = Selector::default();
    sel.match_labels.insert("team".into(), "blue".into());
    w.gateways[0].listeners[0].namespaces = AllowedNamespaces::Selector(sel.clone());
    assert_eq!(
        reasons(&parent_of(&w.eval(), RouteKind::Tcp, "other", "r").accepted),
        (true, "Accepted"),
        "namespace other has team=blue"
    );
    w.routes[0].key.namespace = "third".into();
    w.routes[0].parent_refs[0].namespace = "gw".into();
    assert_eq!(
        reasons(&parent_of(&w.eval(), RouteKind::Tcp, "third", "r").accepted),
        (false, "NotAllowedByListeners")
    );
    let expr = Selector {
        match_labels: BTreeMap::new(),
        match_expressions: vec![("team".into(), "DoesNotExist".into(), vec![])],
    };
    w.gateways[0].listeners[0].namespaces = AllowedNamespaces::Selector(expr);
    assert_eq!(
        reasons(&parent_of(&w.eval(), RouteKind::Tcp, "third", "r").accepted),
        (true, "Accepted")
    );
}

#[test]
fn an_unsupported_listener_protocol_is_refused_while_the_rest_of_the_gateway_works() {
    let mut w = World::new();
    w.gateways[0]
        .listeners
        .push(listener("odd", 1111, "INVALID"));
    w.routes.push(route(
        RouteKind::Tcp,
        "gw",
        "r",
        1,
        vec![parent(Some("tcp"), None)],
        vec![backend("gw", "web", 1)],
    ));
    let e = w.eval();
    let odd = listener_of(&e, "odd");
    assert_eq!(reasons(&odd.accepted), (false, "UnsupportedProtocol"));
    assert!(odd.supported_kinds.is_empty());
    assert_eq!(
        reasons(&e.gateways[&ObjKey::new("gw", "gw")].accepted),
        (true, "ListenersNotValid")
    );
    assert!(
        listener_of(&e, "tcp").active.is_some(),
        "the TCP listener still forwards"
    );
}

#[test]
fn http_https_and_tls_listeners_are_accepted_with_their_kinds_and_carry_nothing() {
    let mut w = World::new();
    w.gateways[0].listeners.push(listener("web", 80, "HTTP"));
    w.gateways[0]
        .listeners
        .push(listener("secure", 443, "HTTPS"));
    w.gateways[0]
        .listeners
        .push(listener("passthrough", 8443, "TLS"));
    // A TCPRoute naming the HTTP listener is not admitted there.
    w.routes.push(route(
        RouteKind::Tcp,
        "gw",
        "r",
        1,
        vec![parent(Some("web"), None)],
        vec![backend("gw", "web", 1)],
    ));
    let e = w.eval();
    for (name, kind) in [
        ("web", "HTTPRoute"),
        ("secure", "HTTPRoute"),
        ("passthrough", "TLSRoute"),
    ] {
        let l = listener_of(&e, name);
        assert_eq!(reasons(&l.accepted), (true, "Accepted"), "{name}");
        assert!(
            l.accepted.message.contains("TCPRoute and UDPRoute only"),
            "{}",
            l.accepted.message
        );
        assert_eq!(l.supported_kinds, [kind], "{name}");
        assert_eq!(reasons(&l.resolved_refs), (true, "ResolvedRefs"), "{name}");
        assert_eq!(
            (l.kind, l.active.is_some(), l.attached_routes),
            (None, false, 0),
            "{name}"
        );
    }
    assert_eq!(
        reasons(&e.gateways[&ObjKey::new("gw", "gw")].accepted),
        (true, "Accepted")
    );
    assert_eq!(
        reasons(&parent_of(&e, RouteKind::Tcp, "gw", "r").accepted),
        (false, "NotAllowedByListeners")
    );
}

#[test]
fn a_gateway_with_no_valid_listener_is_not_accepted() {
    let mut w = World::new();
    w.gateways[0].listeners = vec![listener("invalid", 1111, "INVALID")];
    let e = w.eval();
    let gw = &e.gateways[&ObjKey::new("gw", "gw")];
    assert_eq!(reasons(&gw.accepted), (false, "ListenersNotValid"));
    assert!(
        gw.accepted.message.contains("invalid"),
        "{}",
        gw.accepted.message
    );
    let l = listener_of(&e, "invalid");
    assert_eq!(reasons(&l.accepted), (false, "UnsupportedProtocol"));
    assert!(l.supported_kinds.is_empty());
}

#[test]
fn unknown_allowed_route_kinds_on_an_http_listener_are_invalid_route_kinds() {
    let mut w = World::new();
    w.gateways[0].listeners = vec![
        ListenerView {
            kinds: vec![(GATEWAY_GROUP.into(), "FooRoute".into())],
            ..listener("only-foo", 80, "HTTP")
        },
        ListenerView {
            kinds: vec![
                (GATEWAY_GROUP.into(), "HTTPRoute".into()),
                (GATEWAY_GROUP.into(), "FooRoute".into()),
            ],
            ..listener("http-and-foo", 8080, "HTTP")
        },
    ];
    let e = w.eval();
    let only = listener_of(&e, "only-foo");
    assert_eq!(reasons(&only.resolved_refs), (false, "InvalidRouteKinds"));
    assert!(only.supported_kinds.is_empty());
    let both = listener_of(&e, "http-and-foo");
    assert_eq!(reasons(&both.resolved_refs), (false, "InvalidRouteKinds"));
    assert_eq!(both.supported_kinds, ["HTTPRoute"]);
}

#[test]
fn allowed_route_kinds_it_cannot_carry_are_invalid_route_kinds() {
    let mut w = World::new();
    w.gateways[0].listeners[0].kinds = vec![
        (GATEWAY_GROUP.into(), "TCPRoute".into()),
        (GATEWAY_GROUP.into(), "HTTPRoute".into()),
    ];
    w.gateways[0].listeners[1].kinds = vec![(GATEWAY_GROUP.into(), "UDPRoute".into())];
    let e = w.eval();
    let tcp = listener_of(&e, "tcp");
    assert_eq!(reasons(&tcp.resolved_refs), (false, "InvalidRouteKinds"));
    assert_eq!(tcp.supported_kinds, ["TCPRoute"], "the valid one stays");
    assert!(listener_of(&e, "tcp2").supported_kinds.is_empty());
}

#[test]
fn classes_and_gateways_of_others_are_left_alone() {
    let mut w = World::new();
    w.classes.push(GatewayClassView {
        name: "theirs".into(),
        controller_name: "example.com/other".into(),
        has_parameters: false,
        generation: 1,
    });
    w.classes.push(GatewayClassView {
        name: "param".into(),
        controller_name: CTRL.into(),
        has_parameters: true,
        generation: 1,
    });
    w.gateways.push(GatewayView {
        key: ObjKey::new("gw", "foreign"),
        class: "theirs".into(),
        generation: 1,
        listeners: vec![listener("tcp", 8080, "TCP")],
    });
    w.routes.push(route(
        RouteKind::Tcp,
        "gw",
        "r",
        1,
        vec![ParentRefView {
            name: "foreign".into(),
            ..parent(Some("tcp"), None)
        }],
        vec![backend("gw", "web", 1)],
    ));
    let e = w.eval();
    assert!(!e.classes.contains_key("theirs"));
    assert_eq!(reasons(&e.classes["param"]), (false, "InvalidParameters"));
    assert!(!e.gateways.contains_key(&ObjKey::new("gw", "foreign")));
    assert!(
        e.routes.is_empty(),
        "no parent entry of ours for another's Gateway"
    );
}

#[test]
fn a_backend_that_is_not_a_service_is_invalid_kind() {
    let mut w = World::new();
    w.routes.push(route(
        RouteKind::Tcp,
        "gw",
        "r",
        1,
        vec![parent(Some("tcp"), None)],
        vec![BackendRefView {
            group: "example.com".into(),
            kind: "Thing".into(),
            ..backend("gw", "web", 1)
        }],
    ));
    let p = parent_of(&w.eval(), RouteKind::Tcp, "gw", "r").clone();
    assert_eq!(reasons(&p.resolved_refs), (false, "InvalidKind"));
    assert!(
        p.resolved_refs.message.contains("example.com/Thing"),
        "{}",
        p.resolved_refs.message
    );
}

/// TCPRouteInvalidNonTCPListener: the Gateway has one HTTP listener only, and the suite waits
/// for it to be Accepted (any reason) before checking the route.
#[test]
fn an_http_only_gateway_is_accepted_and_admits_no_tcp_route() {
    let mut w = World::new();
    w.gateways[0].listeners = vec![ListenerView {
        kinds: vec![(GATEWAY_GROUP.into(), "HTTPRoute".into())],
        ..listener("only-allow-http-routes", 5300, "HTTP")
    }];
    w.routes.push(route(
        RouteKind::Tcp,
        "gw",
        "r",
        1,
        vec![parent(Some("only-allow-http-routes"), None)],
        vec![backend("gw", "web", 1)],
    ));
    let e = w.eval();
    let gw = &e.gateways[&ObjKey::new("gw", "gw")];
    assert_eq!(reasons(&gw.accepted), (true, "Accepted"));
    let l = listener_of(&e, "only-allow-http-routes");
    assert_eq!(reasons(&l.accepted), (true, "Accepted"));
    assert_eq!(
        (l.attached_routes, l.supported_kinds.clone()),
        (0, vec!["HTTPRoute"])
    );
    assert_eq!(
        reasons(&parent_of(&e, RouteKind::Tcp, "gw", "r").accepted),
        (false, "NotAllowedByListeners")
    );
}

/// A kube-dns-style Service lists 53/TCP before 53/UDP: a UDPRoute's backendRef to port 53
/// means the UDP port and resolves; to a Service whose 53 is TCP only it is not found, and
/// the message says which protocol was missing.
#[test]
fn a_backend_port_is_matched_by_number_and_the_routes_protocol() {
    let mut w = World::new();
    w.services = vec![
        ServiceView {
            key: ObjKey::new("gw", "dns"),
            ports: vec![(53, "TCP".into()), (53, "UDP".into())],
        },
        ServiceView {
            key: ObjKey::new("gw", "tcp-only"),
            ports: vec![(53, "TCP".into())],
        },
    ];
    let udp_to = |svc: &str| {
        route(
            RouteKind::Udp,
            "gw",
            "r",
            1,
            vec![parent(Some("udp"), None)],
            vec![BackendRefView {
                port: Some(53),
                ..backend("gw", svc, 1)
            }],
        )
    };
    w.routes = vec![udp_to("dns")];
    let e = w.eval();
    let p = parent_of(&e, RouteKind::Udp, "gw", "r");
    assert_eq!(reasons(&p.resolved_refs), (true, "ResolvedRefs"));
    w.routes = vec![udp_to("tcp-only")];
    let e = w.eval();
    let p = parent_of(&e, RouteKind::Udp, "gw", "r");
    assert_eq!(reasons(&p.resolved_refs), (false, "BackendNotFound"));
    assert!(
        p.resolved_refs.message.contains("port 53 is not UDP"),
        "{}",
        p.resolved_refs.message
    );
}

/// Gateway API's "Handling indistinct Listeners": every conflicted listener is Conflicted and
/// not Accepted (no winner is picked), admits no route and forwards nothing; the rest of the
/// Gateway works, and the Gateway says ListenersNotValid (False when nothing is left).
#[test]
fn conflicted_listeners_are_refused_all_of_them_and_the_rest_works() {
    let mut w = World::new();
    w.gateways[0].listeners = vec![
        listener("tcp", 8080, "TCP"),
        listener("http", 8080, "HTTP"),
        listener("udp", 8080, "UDP"),
    ];
    w.routes.push(route(
        RouteKind::Tcp,
        "gw",
        "r",
        1,
        vec![parent(Some("tcp"), None)],
        vec![backend("gw", "web", 1)],
    ));
    w.routes.push(route(
        RouteKind::Udp,
        "gw",
        "u",
        1,
        vec![parent(Some("udp"), None)],
        vec![backend("gw", "web", 1)],
    ));
    let e = w.eval();
    for name in ["tcp", "http"] {
        let l = listener_of(&e, name);
        assert_eq!(reasons(&l.conflicted), (true, "ProtocolConflict"), "{name}");
        assert_eq!(reasons(&l.accepted), (false, "ProtocolConflict"), "{name}");
        assert_eq!((l.attached_routes, l.active.is_none()), (0, true), "{name}");
    }
    let udp = listener_of(&e, "udp");
    assert_eq!(reasons(&udp.conflicted), (false, "NoConflicts"));
    assert_eq!(reasons(&udp.accepted), (true, "Accepted"));
    assert!(udp.active.is_some());
    let gw = &e.gateways[&ObjKey::new("gw", "gw")];
    assert_eq!(reasons(&gw.accepted), (true, "ListenersNotValid"));
    assert!(
        gw.accepted.message.contains("tcp, http"),
        "{}",
        gw.accepted.message
    );
    let p = parent_of(&e, RouteKind::Tcp, "gw", "r");
    assert_eq!(reasons(&p.accepted), (false, "NotAllowedByListeners"));

    w.gateways[0].listeners.pop();
    let e = w.eval();
    let gw = &e.gateways[&ObjKey::new("gw", "gw")];
    assert_eq!(reasons(&gw.accepted), (false, "ListenersNotValid"));
}
