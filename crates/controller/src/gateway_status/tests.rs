//! The status rules of [`super`], from objects as the API server returns them.

use super::*;
use crate::ipam::blocks::Family;
use rivora_gateway::{Evaluation, Snapshot, evaluate};
use rivora_k8s_api::class::GATEWAY_CONTROLLER_NAME;
use rivora_k8s_api::gateway_view;
use rivora_k8s_api::{ListenerReport, RivoraNode, TcpRoute};
use serde_json::{Value, json};

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn gateway(listeners: Value) -> Gateway {
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"namespace": "gw", "name": "edge", "generation": 2},
        "spec": {"gatewayClassName": "rivora", "listeners": listeners},
    }))
    .unwrap()
}

fn class(params: bool) -> GatewayClass {
    let mut spec = json!({"controllerName": GATEWAY_CONTROLLER_NAME});
    if params {
        spec["parametersRef"] = json!({"group": "", "kind": "ConfigMap", "name": "x"});
    }
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "rivora", "generation": 1},
        "spec": spec,
    }))
    .unwrap()
}

fn tcp_route(name: &str, parents: Value) -> TcpRoute {
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TCPRoute",
        "metadata": {"namespace": "gw", "name": name, "generation": 3,
                     "creationTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {"parentRefs": parents, "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]},
    }))
    .unwrap()
}

fn eval(gw: &Gateway, routes: &[TcpRoute]) -> Evaluation {
    let classes = vec![gateway_view::class_view(&class(false))];
    let gateways = vec![gateway_view::gateway_view(gw)];
    let routes: Vec<_> = routes.iter().map(gateway_view::tcp_route_view).collect();
    let services = vec![rivora_gateway::ServiceView {
        key: ObjKey::new("gw", "web"),
        ports: vec![(80, "TCP".into())],
    }];
    evaluate(&Snapshot {
        controller_name: GATEWAY_CONTROLLER_NAME,
        classes: &classes,
        gateways: &gateways,
        routes: &routes,
        grants: &[],
        namespaces: &[],
        services: &services,
    })
}

fn key() -> ObjKey {
    ObjKey::new("gw", "edge")
}

fn assigned(ip: &str) -> Addressing {
    Addressing::Assigned(Assignment {
        addresses: vec![(ip.parse().unwrap(), "pool".into())],
        failures: vec![],
    })
}

fn node(name: &str, ready: bool, reports: Vec<GatewayReport>) -> NodeView {
    NodeView {
        name: name.into(),
        ready,
        gateways: reports
            .into_iter()
            .map(|r| (ObjKey::new(&r.namespace, &r.name), r))
            .collect(),
    }
}

fn report(generation: i64, listeners: Vec<ListenerReport>) -> GatewayReport {
    GatewayReport {
        namespace: "gw".into(),
        name: "edge".into(),
        generation,
        digest: None,
        listeners,
    }
}

/// A report in the compact form of today's rivorad: `programmed` (listener, route, VIPs) in
/// the digest, `failed` listed.
fn compact(
    generation: i64,
    programmed: &[(&str, &str, &[&str])],
    failed: Vec<ListenerReport>,
) -> GatewayReport {
    GatewayReport {
        digest: Some(listeners_digest(programmed.iter().map(
            |(name, route, vips)| DigestListener {
                name: name.to_string(),
                route: route.to_string(),
                vips: vips.iter().map(|v| v.to_string()).collect(),
            },
        ))),
        ..report(generation, failed)
    }
}

fn programmed_listener(name: &str, route: &str, vips: &[&str], ok: bool) -> ListenerReport {
    ListenerReport {
        name: name.into(),
        route: Some(route.into()),
        vips: vips.iter().map(|v| v.to_string()).collect(),
        ready_backends: 1,
        programmed: ok,
        message: (!ok).then(|| "not programmed: the last apply failed: vip map full".into()),
        reason: None,
    }
}

fn cond<'a>(cs: &'a [Condition], type_: &str) -> &'a Condition {
    cs.iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} in {cs:?}"))
}

fn gw_cond<'a>(s: &'a GatewayStatus, type_: &str) -> (&'a str, &'a str) {
    let c = cond(s.conditions.as_deref().unwrap(), type_);
    (c.status.as_str(), c.reason.as_str())
}

fn listener_cond<'a>(s: &'a GatewayStatus, listener: &str, type_: &str) -> (&'a str, &'a str) {
    let l = s
        .listeners
        .as_deref()
        .unwrap()
        .iter()
        .find(|l| l.name == listener)
        .unwrap();
    let c = cond(&l.conditions, type_);
    (c.status.as_str(), c.reason.as_str())
}

/// The Gateway and its listener `tcp` are Pending, the message naming node n1 (which lags with
/// `report`).
fn assert_pending_on_n1(s: &GatewayStatus, report: &GatewayReport) {
    assert_eq!(gw_cond(s, "Programmed"), ("False", "Pending"), "{report:?}");
    assert_eq!(listener_cond(s, "tcp", "Programmed"), ("False", "Pending"));
    let m = &cond(s.conditions.as_deref().unwrap(), "Programmed").message;
    assert!(m.contains("RivoraNode n1"), "{m}");
}

fn tcp_listeners() -> Value {
    json!([{"name": "tcp", "port": 8080, "protocol": "TCP"},
           {"name": "idle", "port": 9090, "protocol": "TCP"}])
}

#[test]
fn a_gateway_class_is_accepted_unless_it_has_parameters() {
    let now = t("2026-12-01T10:00:00Z");
    let e = evaluate(&Snapshot {
        controller_name: GATEWAY_CONTROLLER_NAME,
        classes: &[gateway_view::class_view(&class(true))],
        gateways: &[],
        routes: &[],
        grants: &[],
        namespaces: &[],
        services: &[],
    });
    let v163: Result<String, String> = Ok("v1.6.3".into());
    let s = class_status(&class(true), &e.classes["rivora"], &v163, now);
    let c = &s.conditions.as_ref().unwrap()[0];
    assert_eq!(
        (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
        ("Accepted", "False", "InvalidParameters")
    );
    assert_eq!(c.observed_generation, Some(1));
    let accepted = eval(&gateway(tcp_listeners()), &[]).classes["rivora"].clone();
    let mut gc = class(false);
    let s = class_status(&gc, &accepted, &v163, now);
    assert!(!class_status_is_current(&gc, &s));
    gc.status = Some(s.clone());
    let later = class_status(&gc, &accepted, &v163, t("2026-12-01T11:00:00Z"));
    assert_eq!(later, s, "the transition time is kept");
    assert!(class_status_is_current(&gc, &later));
}

/// The class says which Gateway API release it supports (SupportedVersion, from the CRDs'
/// bundle-version) and publishes its features, sorted, so the conformance suite can infer them.
#[test]
fn a_gateway_class_publishes_its_supported_version_and_features() {
    let now = t("2026-12-01T10:00:00Z");
    let accepted = eval(&gateway(tcp_listeners()), &[]).classes["rivora"].clone();
    let version = |installed: Result<String, String>| {
        let s = class_status(&class(false), &accepted, &installed, now);
        let c = cond(s.conditions.as_deref().unwrap(), "SupportedVersion").clone();
        assert_eq!(c.observed_generation, Some(1));
        assert_eq!(
            cond(s.conditions.as_deref().unwrap(), "Accepted").status,
            "True",
            "the class is served whatever the release"
        );
        (c.status, c.reason, c.message, s.supported_features)
    };
    let (status, reason, message, features) = version(Ok("v1.6.3".into()));
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "SupportedVersion")
    );
    assert!(message.contains("v1.6.3"), "{message}");
    let names: Vec<String> = features.unwrap().into_iter().map(|f| f.name).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "sorted by name, as the spec requires");
    for f in [
        "Gateway",
        "ReferenceGrant",
        "TCPRoute",
        "UDPRoute",
        "GatewayStaticAddresses",
    ] {
        assert!(names.iter().any(|n| n == f), "{f} in {names:?}");
    }
    assert!(
        !names.iter().any(|n| n.starts_with("HTTPRoute")),
        "{names:?}"
    );
    for installed in [
        Ok("v1.7.0".to_string()),
        Ok("v1.60.0".to_string()),
        Err("forbidden".to_string()),
    ] {
        let (status, reason, message, _) = version(installed.clone());
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "UnsupportedVersion"),
            "{installed:?}"
        );
        assert!(message.contains("v1.6.x"), "{message}");
    }
    // A class whose features differ (an older Rivora wrote none) is not current.
    let mut gc = class(false);
    let mut s = class_status(&gc, &accepted, &Ok("v1.6.3".into()), now);
    s.supported_features = None;
    gc.status = Some(s);
    let want = class_status(&gc, &accepted, &Ok("v1.6.3".into()), now);
    assert!(!class_status_is_current(&gc, &want));
}

#[test]
fn without_an_address_the_gateway_is_not_programmed_and_says_why() {
    let gw = gateway(tcp_listeners());
    let e = &eval(&gw, &[]).gateways[&key()];
    let now = t("2026-12-01T10:00:00Z");
    for (addressing, reason) in [
        (
            Addressing::Assigned(Assignment {
                addresses: vec![],
                failures: vec![Failure::PoolExhausted(Family::V4)],
            }),
            "AddressNotAssigned",
        ),
        (
            Addressing::Assigned(Assignment {
                addresses: vec![],
                failures: vec![Failure::NoPool(Family::V4)],
            }),
            "AddressNotAssigned",
        ),
        (
            Addressing::Assigned(Assignment::default()),
            "AddressNotAssigned",
        ),
        (
            Addressing::Assigned(Assignment {
                addresses: vec![],
                failures: vec![Failure::AddressOutsidePools("192.0.2.1".parse().unwrap())],
            }),
            "AddressNotUsable",
        ),
        (
            Addressing::Refused("spec.addresses[0].value \"ten\" is not an IP address".into()),
            "AddressNotUsable",
        ),
    ] {
        let s = gateway_status(&gw, e, &addressing, &[], now);
        assert_eq!(gw_cond(&s, "Accepted"), ("True", "Accepted"));
        assert_eq!(
            gw_cond(&s, "Programmed"),
            ("False", reason),
            "{addressing:?}"
        );
        assert_eq!(s.addresses.as_deref(), Some(&[][..]));
        assert_eq!(listener_cond(&s, "tcp", "Programmed"), ("False", "Pending"));
        let c = cond(s.conditions.as_deref().unwrap(), "Programmed");
        assert!(!c.message.is_empty());
        assert_eq!(c.observed_generation, Some(2));
    }
}

#[test]
fn an_unsupported_address_type_is_not_accepted() {
    let gw = gateway(tcp_listeners());
    let e = &eval(&gw, &[]).gateways[&key()];
    let a = Addressing::Assigned(Assignment {
        addresses: vec![],
        failures: vec![Failure::UnsupportedAddressType("Hostname".into())],
    });
    let s = gateway_status(&gw, e, &a, &[], t("2026-12-01T10:00:00Z"));
    assert_eq!(gw_cond(&s, "Accepted"), ("False", "UnsupportedAddress"));
    assert_eq!(gw_cond(&s, "Programmed"), ("False", "Invalid"));
    assert_eq!(listener_cond(&s, "tcp", "Programmed"), ("False", "Invalid"));
}

#[test]
fn programmed_waits_for_every_ready_node_at_the_current_generation() {
    let gw = gateway(tcp_listeners());
    let route = tcp_route("r", json!([{"name": "edge", "sectionName": "tcp"}]));
    let e = &eval(&gw, std::slice::from_ref(&route)).gateways[&key()];
    let now = t("2026-12-01T10:00:00Z");
    let a = assigned("10.0.0.1");
    let good = || programmed_listener("tcp", "gw/r", &["10.0.0.1:8080/TCP"], true);

    // No node at all, then a node that is not Ready: Pending.
    let s = gateway_status(&gw, e, &a, &[], now);
    assert_eq!(gw_cond(&s, "Programmed"), ("False", "Pending"));
    assert_eq!(
        s.addresses.as_ref().unwrap()[0],
        GatewayStatusAddresses {
            r#type: Some("IPAddress".into()),
            value: "10.0.0.1".into()
        }
    );
    let down = node("n0", false, vec![report(2, vec![good()])]);
    let s = gateway_status(&gw, e, &a, std::slice::from_ref(&down), now);
    assert_eq!(gw_cond(&s, "Programmed"), ("False", "Pending"));

    // A Ready node at an older generation, or without the listener, or with the VIP of an
    // old address: Pending, naming the node.
    for lagging in [
        report(1, vec![good()]),
        report(2, vec![]),
        report(
            2,
            vec![programmed_listener(
                "tcp",
                "gw/r",
                &["10.0.0.9:8080/TCP"],
                true,
            )],
        ),
        report(
            2,
            vec![programmed_listener(
                "tcp",
                "gw/other",
                &["10.0.0.1:8080/TCP"],
                true,
            )],
        ),
    ] {
        let nodes = [node("n1", true, vec![lagging.clone()]), down.clone()];
        assert_pending_on_n1(&gateway_status(&gw, e, &a, &nodes, now), &lagging);
    }

    // Every Ready node programs it: True, the idle listener (no route) too.
    let nodes = [
        node("n1", true, vec![report(2, vec![good()])]),
        node("n2", true, vec![report(2, vec![good()])]),
        down.clone(),
    ];
    let s = gateway_status(&gw, e, &a, &nodes, now);
    assert_eq!(gw_cond(&s, "Programmed"), ("True", "Programmed"));
    assert_eq!(
        listener_cond(&s, "tcp", "Programmed"),
        ("True", "Programmed")
    );
    assert_eq!(
        listener_cond(&s, "idle", "Programmed"),
        ("True", "Programmed")
    );
    let l = &s.listeners.as_ref().unwrap()[0];
    assert_eq!(l.attached_routes, 1);
    assert_eq!(
        l.supported_kinds.as_deref().unwrap(),
        [GatewayStatusListenersSupportedKinds {
            group: Some(GATEWAY_GROUP.into()),
            kind: "TCPRoute".into()
        }]
    );

    // One node fails the listener: Invalid, with its message, on the listener and the Gateway.
    let nodes = [
        node("n1", true, vec![report(2, vec![good()])]),
        node(
            "n2",
            true,
            vec![report(
                2,
                vec![programmed_listener("tcp", "gw/r", &[], false)],
            )],
        ),
    ];
    let s = gateway_status(&gw, e, &a, &nodes, now);
    assert_eq!(gw_cond(&s, "Programmed"), ("False", "Invalid"));
    assert_eq!(listener_cond(&s, "tcp", "Programmed"), ("False", "Invalid"));
    let m = &cond(s.conditions.as_deref().unwrap(), "Programmed").message;
    assert!(m.contains("n2") && m.contains("vip map full"), "{m}");
    assert_eq!(
        listener_cond(&s, "idle", "Programmed"),
        ("True", "Programmed")
    );
    assert_eq!(gw_cond(&s, "Accepted"), ("True", "Accepted"));

    // The node finds the listener's port held by another object: the listener is not
    // Accepted (PortUnavailable, the node's message), the Gateway says ListenersNotValid, and
    // the rest of it is programmed.
    let held = ListenerReport {
        message: Some("VIP 10.0.0.1:8080/TCP is already held by Service x/y".into()),
        reason: Some("PortUnavailable".into()),
        ..programmed_listener("tcp", "gw/r", &[], false)
    };
    let nodes = [
        node("n1", true, vec![report(2, vec![good()])]),
        node("n2", true, vec![report(2, vec![held])]),
    ];
    let s = gateway_status(&gw, e, &a, &nodes, now);
    assert_eq!(
        listener_cond(&s, "tcp", "Accepted"),
        ("False", "PortUnavailable")
    );
    let l = &s.listeners.as_ref().unwrap()[0];
    let m = &cond(&l.conditions, "Accepted").message;
    assert!(m.contains("n2") && m.contains("held by Service x/y"), "{m}");
    assert_eq!(listener_cond(&s, "tcp", "Programmed"), ("False", "Invalid"));
    assert_eq!(gw_cond(&s, "Accepted"), ("True", "ListenersNotValid"));
    assert_eq!(gw_cond(&s, "Programmed"), ("True", "Programmed"));
}

/// Today's rivorad reports a programmed listener only through the digest: Programmed when it
/// equals what the controller's own evaluation gives, Pending (naming the node) when the node
/// programmed another route, another address or generation, or nothing; a failed listener is
/// still listed, and an older rivorad's full listing is still read beside compact reports.
#[test]
fn the_compact_report_is_read_through_its_digest() {
    let gw = gateway(tcp_listeners());
    let route = tcp_route("r", json!([{"name": "edge", "sectionName": "tcp"}]));
    let e = &eval(&gw, std::slice::from_ref(&route)).gateways[&key()];
    let now = t("2026-12-01T10:00:00Z");
    let a = assigned("10.0.0.1");
    let vip: &[&str] = &["10.0.0.1:8080/TCP"];

    let good = compact(2, &[("tcp", "gw/r", vip)], vec![]);
    let old_style = report(2, vec![programmed_listener("tcp", "gw/r", vip, true)]);
    let nodes = [
        node("n1", true, vec![good.clone()]),
        node("n2", true, vec![old_style]),
    ];
    let s = gateway_status(&gw, e, &a, &nodes, now);
    assert_eq!(gw_cond(&s, "Programmed"), ("True", "Programmed"));
    assert_eq!(
        listener_cond(&s, "tcp", "Programmed"),
        ("True", "Programmed")
    );

    for lagging in [
        compact(2, &[("tcp", "gw/other", vip)], vec![]),
        compact(2, &[("tcp", "gw/r", &["10.0.0.9:8080/TCP"])], vec![]),
        compact(
            2,
            &[("tcp", "gw/r", &["10.0.0.1:8080/TCP", "10.0.0.9:8080/TCP"])],
            vec![],
        ),
        compact(2, &[], vec![]),
        compact(1, &[("tcp", "gw/r", vip)], vec![]),
        GatewayReport {
            digest: None,
            ..good.clone()
        },
    ] {
        let nodes = [node("n1", true, vec![lagging.clone()])];
        assert_pending_on_n1(&gateway_status(&gw, e, &a, &nodes, now), &lagging);
    }

    // A failed listener is listed (and left out of the digest): Invalid with the node's word.
    let failed = compact(2, &[], vec![programmed_listener("tcp", "gw/r", &[], false)]);
    let s = gateway_status(&gw, e, &a, &[node("n1", true, vec![failed])], now);
    assert_eq!(listener_cond(&s, "tcp", "Programmed"), ("False", "Invalid"));
    let m = &cond(s.conditions.as_deref().unwrap(), "Programmed").message;
    assert!(m.contains("vip map full"), "{m}");
}

#[test]
fn an_ipv6_vip_is_matched_in_socket_address_form() {
    let gw = gateway(json!([{"name": "dns", "port": 53, "protocol": "UDP"}]));
    let route: TcpRoute = tcp_route("r", json!([{"name": "edge"}]));
    // A TCPRoute on a UDP listener attaches to nothing: use an idle listener plus a node report.
    let e = &eval(&gw, &[route]).gateways[&key()];
    let a = assigned("fd00::1");
    let nodes = [node("n1", true, vec![report(2, vec![])])];
    let s = gateway_status(&gw, e, &a, &nodes, t("2026-12-01T10:00:00Z"));
    assert_eq!(gw_cond(&s, "Programmed"), ("True", "Programmed"));
    assert_eq!(s.addresses.as_ref().unwrap()[0].value, "fd00::1");
    // With a route the VIP must read [fd00::1]:53/UDP.
    let mut listener = e.listeners[0].clone();
    listener.active = Some(rivora_gateway::ActiveRoute {
        route: ObjKey::new("gw", "u"),
        backends: vec![],
    });
    let ips = ["fd00::1".parse().unwrap()];
    let ok = [node(
        "n1",
        true,
        vec![report(
            2,
            vec![programmed_listener(
                "dns",
                "gw/u",
                &["[fd00::1]:53/UDP"],
                true,
            )],
        )],
    )];
    assert_eq!(
        on_nodes(&key(), 2, Some(&listener), e, &ips, &ok),
        OnNodes::Programmed(1)
    );
}

/// The status of a Gateway with a TCP listener and a listener `web` of `protocol`, a TCPRoute
/// naming `route_to`, on one node that programmed it.
fn tcp_and_web_status(protocol: &str, route_to: &str) -> GatewayStatus {
    let gw = gateway(json!([
        {"name": "tcp", "port": 8080, "protocol": "TCP"},
        {"name": "web", "port": 80, "protocol": protocol},
    ]));
    let route = tcp_route("r", json!([{"name": "edge", "sectionName": route_to}]));
    let ev = eval(&gw, std::slice::from_ref(&route));
    let e = &ev.gateways[&key()];
    let nodes = [node("n1", true, vec![report(2, vec![])])];
    gateway_status(
        &gw,
        e,
        &assigned("10.0.0.1"),
        &nodes,
        t("2026-12-01T10:00:00Z"),
    )
}

#[test]
fn an_unaccepted_listener_is_invalid_while_the_rest_of_the_gateway_is_programmed() {
    let s = tcp_and_web_status("INVALID", "web");
    assert_eq!(gw_cond(&s, "Accepted"), ("True", "ListenersNotValid"));
    assert_eq!(gw_cond(&s, "Programmed"), ("True", "Programmed"));
    assert_eq!(
        listener_cond(&s, "web", "Accepted"),
        ("False", "UnsupportedProtocol")
    );
    assert_eq!(listener_cond(&s, "web", "Programmed"), ("False", "Invalid"));
    assert_eq!(
        listener_cond(&s, "tcp", "Programmed"),
        ("True", "Programmed")
    );
    let web = &s.listeners.as_ref().unwrap()[1];
    assert_eq!(web.attached_routes, 0);
    assert_eq!(web.supported_kinds.as_deref(), Some(&[][..]));
}

#[test]
fn an_http_listener_is_accepted_and_programmed_with_nothing_to_forward() {
    let s = tcp_and_web_status("HTTP", "tcp");
    assert_eq!(gw_cond(&s, "Accepted"), ("True", "Accepted"));
    assert_eq!(listener_cond(&s, "web", "Accepted"), ("True", "Accepted"));
    assert_eq!(
        listener_cond(&s, "web", "ResolvedRefs"),
        ("True", "ResolvedRefs")
    );
    let web = &s.listeners.as_ref().unwrap()[1];
    let kinds: Vec<&str> = web
        .supported_kinds
        .iter()
        .flatten()
        .map(|k| k.kind.as_str())
        .collect();
    assert_eq!((web.attached_routes, kinds), (0, vec!["HTTPRoute"]));
    let programmed = web
        .conditions
        .iter()
        .find(|c| c.type_ == "Programmed")
        .unwrap();
    assert_eq!(
        (programmed.status.as_str(), programmed.reason.as_str()),
        ("True", "Programmed")
    );
    assert!(
        programmed.message.contains("nothing to program"),
        "{}",
        programmed.message
    );
}

#[test]
fn an_unchanged_status_keeps_its_times_and_is_current() {
    let mut gw = gateway(tcp_listeners());
    let e = eval(&gw, &[]).gateways[&key()].clone();
    let nodes = [node("n1", true, vec![report(2, vec![])])];
    let a = assigned("10.0.0.1");
    let s0 = gateway_status(&gw, &e, &a, &nodes, t("2026-12-01T10:00:00Z"));
    assert!(!gateway_status_is_current(&gw, &s0));
    gw.status = Some(s0.clone());
    let s1 = gateway_status(&gw, &e, &a, &nodes, t("2026-12-01T11:00:00Z"));
    assert_eq!(s1, s0, "every lastTransitionTime kept");
    assert!(gateway_status_is_current(&gw, &s1));
    // A node going away: Programmed flips (new time), the rest keeps its times.
    let s2 = gateway_status(&gw, &e, &a, &[], t("2026-12-01T12:00:00Z"));
    assert!(!gateway_status_is_current(&gw, &s2));
    let p = cond(s2.conditions.as_deref().unwrap(), "Programmed");
    assert_eq!(p.last_transition_time.0, t("2026-12-01T12:00:00Z"));
    let acc = cond(s2.conditions.as_deref().unwrap(), "Accepted");
    assert_eq!(acc.last_transition_time.0, t("2026-12-01T10:00:00Z"));
}

fn parent_status(controller: &str, name: &str, status: &str) -> RouteParentStatus {
    serde_json::from_value(json!({
        "parentRef": {"group": GATEWAY_GROUP, "kind": "Gateway", "name": name},
        "controllerName": controller,
        "conditions": [{"type": "Accepted", "status": status, "reason": "Whatever",
                        "message": "", "observedGeneration": 1,
                        "lastTransitionTime": "2026-11-01T00:00:00Z"}],
    }))
    .unwrap()
}

#[test]
fn route_parents_keep_other_controllers_entries_and_replace_ours() {
    let route = tcp_route(
        "r",
        json!([{"name": "edge", "sectionName": "tcp"}, {"name": "theirs"}]),
    );
    let gw = gateway(tcp_listeners());
    let ev = eval(&gw, std::slice::from_ref(&route));
    let ours = ev
        .routes
        .get(&(RouteKind::Tcp, ObjKey::new("gw", "r")))
        .map(Vec::as_slice);
    let theirs = parent_status("example.com/other", "theirs", "True");
    // A controllerName that differs only in a trailing slash is someone else's.
    let lookalike = parent_status(&format!("{GATEWAY_CONTROLLER_NAME}/"), "edge", "False");
    let stale_ours = parent_status(GATEWAY_CONTROLLER_NAME, "gone", "True");
    let current = vec![theirs.clone(), stale_ours, lookalike.clone()];
    let now = t("2026-12-01T10:00:00Z");
    let spec = &route.spec.parent_refs;
    let want = route_parents(GATEWAY_CONTROLLER_NAME, "gw", 3, spec, &current, ours, now)
        .expect("ours are missing");
    assert_eq!(want.len(), 3);
    assert_eq!(want[0], theirs, "untouched, byte for byte");
    assert_eq!(want[1], lookalike);
    let mine = &want[2];
    assert_eq!(mine.controller_name, GATEWAY_CONTROLLER_NAME);
    assert_eq!(
        mine.parent_ref,
        ParentReference {
            group: Some(GATEWAY_GROUP.into()),
            kind: Some("Gateway".into()),
            namespace: None,
            name: "edge".into(),
            section_name: Some("tcp".into()),
            port: None,
        }
    );
    let types: Vec<_> = mine
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.observed_generation))
        .collect();
    assert_eq!(
        types,
        [
            ("Accepted", "True", Some(3)),
            ("ResolvedRefs", "True", Some(3))
        ]
    );
    // Written: nothing more to write, even later.
    assert_eq!(
        route_parents(
            GATEWAY_CONTROLLER_NAME,
            "gw",
            3,
            spec,
            &want,
            ours,
            t("2026-12-01T11:00:00Z")
        ),
        None
    );
    // The route stops naming our Gateway: our entry goes, theirs stays.
    let dropped = route_parents(GATEWAY_CONTROLLER_NAME, "gw", 4, spec, &want, None, now).unwrap();
    assert_eq!(dropped, vec![theirs.clone(), lookalike]);
    // Nothing of ours and nothing to say: nothing written.
    assert_eq!(
        route_parents(GATEWAY_CONTROLLER_NAME, "gw", 4, spec, &[theirs], None, now),
        None
    );
}

#[test]
fn only_nodes_serving_our_controller_name_are_waited_for() {
    let rivora_node = |name: &str, controller: Option<&str>| -> RivoraNode {
        serde_json::from_value(json!({
            "apiVersion": "rivora.dev/v1alpha1", "kind": "RivoraNode",
            "metadata": {"name": name}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Applied",
                                       "message": "", "lastTransitionTime": "2026-12-01T10:00:00Z"}],
                       "gatewayController": controller},
        }))
        .unwrap()
    };
    let nodes = [
        rivora_node("b", Some(GATEWAY_CONTROLLER_NAME)),
        rivora_node("other", Some("example.com/another-install")),
        rivora_node("old", None),
        rivora_node("a", Some(GATEWAY_CONTROLLER_NAME)),
    ];
    let now: Timestamp = "2026-12-01T10:05:00Z".parse().unwrap();
    let views = node_views(GATEWAY_CONTROLLER_NAME, nodes.iter(), now);
    let names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        ["a", "b"],
        "sorted, and only nodes serving our Gateways"
    );
    assert!(
        views.iter().all(|v| v.ready),
        "no heartbeat (an older rivorad): Ready counts"
    );

    // A heartbeat 100 s old still counts; 101 s old, the node's rivorad is gone.
    let at = |t: &str| {
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            t.parse().unwrap(),
        ))
    };
    let mut beating = rivora_node("c", Some(GATEWAY_CONTROLLER_NAME));
    beating.status.as_mut().unwrap().heartbeat_time = at("2026-12-01T10:03:20Z");
    assert!(node_views(GATEWAY_CONTROLLER_NAME, [&beating], now)[0].ready);
    beating.status.as_mut().unwrap().heartbeat_time = at("2026-12-01T10:03:19Z");
    assert!(
        !node_views(GATEWAY_CONTROLLER_NAME, [&beating], now)[0].ready,
        "a stale report"
    );
}

/// Gateway API's indistinct listeners, as upstream's ListenerSetProtocolConflict asserts them
/// for a listener: Accepted False, Programmed False and Conflicted True, all ProtocolConflict,
/// at the Gateway's generation; the distinct listener beside them is programmed.
#[test]
fn conflicted_listeners_are_not_accepted_nor_programmed_and_say_protocol_conflict() {
    let gw = gateway(json!([
        {"name": "tcp", "port": 8080, "protocol": "TCP"},
        {"name": "web", "port": 8080, "protocol": "HTTP"},
        {"name": "dns", "port": 8080, "protocol": "UDP"},
    ]));
    let ev = eval(&gw, &[]);
    let nodes = [node("n1", true, vec![report(2, vec![])])];
    let s = gateway_status(
        &gw,
        &ev.gateways[&key()],
        &assigned("10.0.0.1"),
        &nodes,
        t("2026-12-01T10:00:00Z"),
    );
    assert_eq!(gw_cond(&s, "Accepted"), ("True", "ListenersNotValid"));
    assert_eq!(gw_cond(&s, "Programmed"), ("True", "Programmed"));
    for name in ["tcp", "web"] {
        for (type_, status) in [
            ("Accepted", "False"),
            ("Programmed", "False"),
            ("Conflicted", "True"),
        ] {
            assert_eq!(
                listener_cond(&s, name, type_),
                (status, "ProtocolConflict"),
                "{name} {type_}"
            );
        }
    }
    assert_eq!(
        listener_cond(&s, "dns", "Conflicted"),
        ("False", "NoConflicts")
    );
    assert_eq!(
        listener_cond(&s, "dns", "Programmed"),
        ("True", "Programmed")
    );
    for l in s.listeners.iter().flatten() {
        assert!(
            l.conditions
                .iter()
                .all(|c| c.observed_generation == Some(2)),
            "{l:?}"
        );
    }
}
