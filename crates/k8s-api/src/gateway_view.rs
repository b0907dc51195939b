//! Gateway API objects as the pure evaluation ([`rivora_gateway`]) reads them.
//!
//! Why here: rivora-controller (the status) and rivorad (the VIPs) both evaluate the same
//! objects, and one conversion keeps them from reading a field two ways. Defaults the API server
//! fills in are applied again here (a reader does not trust every writer): a parentRef's group
//! and kind, a backendRef's group, kind, namespace and weight, a listener's allowed namespaces.

use std::collections::BTreeMap;

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::{Gateway, GatewayListenersAllowedRoutesNamespacesFrom as From};
use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::jiff::Timestamp;
use rivora_gateway::view::{
    AllowedNamespaces, BackendRefView, GatewayClassView, GatewayView, ListenerView, NamespaceView,
    ObjKey, ParentRefView, ReferenceGrantView, RouteKind, RouteView, Selector, ServiceView,
};

use crate::route::{BackendRef, L4RouteRule, ParentReference};
use crate::{TcpRoute, UdpRoute};

fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ObjKey {
    ObjKey::new(
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

fn created(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<i64> {
    meta.creation_timestamp
        .as_ref()
        .map(|t| Timestamp::as_second(t.0))
}

/// The IP addresses in a Gateway's `status.addresses` (entries of type `IPAddress`, the
/// default, whose value parses), in order: what rivora-controller bound, read back by the
/// controller (imported before anything new is allocated) and by the nodes (their VIPs).
pub fn status_ip_addresses(g: &Gateway) -> Vec<std::net::IpAddr> {
    g.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.r#type.as_deref().unwrap_or("IPAddress") == "IPAddress")
        .filter_map(|a| a.value.parse().ok())
        .collect()
}

/// A GatewayClass.
pub fn class_view(c: &GatewayClass) -> GatewayClassView {
    GatewayClassView {
        name: c.metadata.name.clone().unwrap_or_default(),
        controller_name: c.spec.controller_name.clone(),
        has_parameters: c.spec.parameters_ref.is_some(),
        generation: c.metadata.generation.unwrap_or(0),
    }
}

/// A Gateway and its listeners.
pub fn gateway_view(g: &Gateway) -> GatewayView {
    let listeners = g
        .spec
        .listeners
        .iter()
        .map(|l| {
            let allowed = l.allowed_routes.as_ref();
            let ns = allowed.and_then(|a| a.namespaces.as_ref());
            let namespaces = match ns.and_then(|n| n.from.as_ref()) {
                None | Some(From::Same) => AllowedNamespaces::Same,
                Some(From::All) => AllowedNamespaces::All,
                Some(From::Selector) => {
                    let s = ns.and_then(|n| n.selector.as_ref());
                    AllowedNamespaces::Selector(Selector {
                        match_labels: s.and_then(|s| s.match_labels.clone()).unwrap_or_default(),
                        match_expressions: s
                            .and_then(|s| s.match_expressions.as_ref())
                            .into_iter()
                            .flatten()
                            .map(|e| {
                                (
                                    e.key.clone(),
                                    e.operator.clone(),
                                    e.values.clone().unwrap_or_default(),
                                )
                            })
                            .collect(),
                    })
                }
            };
            ListenerView {
                name: l.name.clone(),
                port: u16::try_from(l.port).unwrap_or(0),
                protocol: l.protocol.clone(),
                hostname: l.hostname.clone().filter(|h| !h.is_empty()),
                namespaces,
                kinds: allowed
                    .and_then(|a| a.kinds.as_ref())
                    .into_iter()
                    .flatten()
                    .map(|k| {
                        (
                            k.group
                                .clone()
                                .unwrap_or_else(|| crate::route::GATEWAY_GROUP.to_string()),
                            k.kind.clone(),
                        )
                    })
                    .collect(),
            }
        })
        .collect();
    GatewayView {
        key: key(&g.metadata),
        class: g.spec.gateway_class_name.clone(),
        generation: g.metadata.generation.unwrap_or(0),
        listeners,
    }
}

fn parent_view(p: &ParentReference, route_ns: &str) -> ParentRefView {
    ParentRefView {
        group: p.group_or_default().to_string(),
        kind: p.kind_or_default().to_string(),
        namespace: p.namespace_or(route_ns).to_string(),
        name: p.name.clone(),
        section_name: p.section_name.clone(),
        port: p.port.and_then(|p| u16::try_from(p).ok()),
    }
}

fn backend_view(b: &BackendRef, route_ns: &str) -> BackendRefView {
    BackendRefView {
        group: b.group_or_default().to_string(),
        kind: b.kind_or_default().to_string(),
        namespace: b.namespace.clone().unwrap_or_else(|| route_ns.to_string()),
        name: b.name.clone(),
        port: b.port.and_then(|p| u16::try_from(p).ok()),
        weight: u32::try_from(b.weight_or_default()).unwrap_or(0),
    }
}

fn route_view(
    kind: RouteKind,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    parents: &[ParentReference],
    rules: &[L4RouteRule],
) -> RouteView {
    let key = key(meta);
    RouteView {
        kind,
        created: created(meta),
        generation: meta.generation.unwrap_or(0),
        parent_refs: parents
            .iter()
            .map(|p| parent_view(p, &key.namespace))
            .collect(),
        // v1 has exactly one rule (the schema says so).
        backend_refs: rules
            .first()
            .map(|r| {
                r.backend_refs
                    .iter()
                    .map(|b| backend_view(b, &key.namespace))
                    .collect()
            })
            .unwrap_or_default(),
        key,
    }
}

/// A TCPRoute.
pub fn tcp_route_view(r: &TcpRoute) -> RouteView {
    route_view(
        RouteKind::Tcp,
        &r.metadata,
        &r.spec.parent_refs,
        &r.spec.rules,
    )
}

/// A UDPRoute.
pub fn udp_route_view(r: &UdpRoute) -> RouteView {
    route_view(
        RouteKind::Udp,
        &r.metadata,
        &r.spec.parent_refs,
        &r.spec.rules,
    )
}

/// A ReferenceGrant.
pub fn grant_view(g: &ReferenceGrant) -> ReferenceGrantView {
    ReferenceGrantView {
        namespace: g.metadata.namespace.clone().unwrap_or_default(),
        from: g
            .spec
            .from
            .iter()
            .map(|f| (f.group.clone(), f.kind.clone(), f.namespace.clone()))
            .collect(),
        to: g
            .spec
            .to
            .iter()
            .map(|t| (t.group.clone(), t.kind.clone(), t.name.clone()))
            .collect(),
    }
}

/// A Namespace's labels.
pub fn namespace_view(n: &Namespace) -> NamespaceView {
    NamespaceView {
        name: n.metadata.name.clone().unwrap_or_default(),
        labels: n
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
    }
}

/// A Service's ports.
pub fn service_view(s: &Service) -> ServiceView {
    ServiceView {
        key: key(&s.metadata),
        ports: s
            .spec
            .iter()
            .flat_map(|spec| spec.ports.iter().flatten())
            .filter_map(|p| {
                let number = u16::try_from(p.port).ok()?;
                Some((number, p.protocol.clone().unwrap_or_else(|| "TCP".into())))
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_convert_with_the_servers_defaults() {
        let gw: Gateway = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"namespace": "infra", "name": "edge", "generation": 4},
            "spec": {"gatewayClassName": "rivora", "listeners": [
                {"name": "tcp", "port": 80, "protocol": "TCP"},
                {"name": "udp", "port": 53, "protocol": "UDP", "allowedRoutes": {
                    "namespaces": {"from": "Selector", "selector": {
                        "matchLabels": {"team": "a"},
                        "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}},
                    "kinds": [{"kind": "UDPRoute"}]}},
            ]},
        }))
        .unwrap();
        let v = gateway_view(&gw);
        assert_eq!(
            (v.key.to_string(), v.class.as_str(), v.generation),
            ("infra/edge".into(), "rivora", 4)
        );
        assert_eq!(
            v.listeners[0].namespaces,
            AllowedNamespaces::Same,
            "the default"
        );
        let AllowedNamespaces::Selector(s) = &v.listeners[1].namespaces else {
            panic!("{:?}", v.listeners[1].namespaces)
        };
        assert_eq!(s.match_labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(
            s.match_expressions,
            [("env".into(), "In".into(), vec!["prod".into()])]
        );
        assert_eq!(
            v.listeners[1].kinds,
            [(
                crate::route::GATEWAY_GROUP.to_string(),
                "UDPRoute".to_string()
            )]
        );

        let r: TcpRoute = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TCPRoute",
            "metadata": {"namespace": "app", "name": "r", "generation": 2,
                         "creationTimestamp": "2026-12-01T00:00:10Z"},
            "spec": {"parentRefs": [{"name": "edge", "namespace": "infra", "sectionName": "tcp"}],
                     "rules": [{"backendRefs": [{"name": "web", "port": 8080},
                                                {"name": "db", "namespace": "data", "port": 5432, "weight": 0}]}]},
        }))
        .unwrap();
        let v = tcp_route_view(&r);
        assert_eq!(v.kind, RouteKind::Tcp);
        assert_eq!(v.created, Some(1_796_083_210));
        let p = &v.parent_refs[0];
        assert_eq!(
            (
                p.group.as_str(),
                p.kind.as_str(),
                p.namespace.as_str(),
                p.section_name.as_deref()
            ),
            (crate::route::GATEWAY_GROUP, "Gateway", "infra", Some("tcp"))
        );
        let b: Vec<_> = v
            .backend_refs
            .iter()
            .map(|b| {
                (
                    b.kind.as_str(),
                    b.namespace.as_str(),
                    b.name.as_str(),
                    b.port,
                    b.weight,
                )
            })
            .collect();
        assert_eq!(
            b,
            [
                ("Service", "app", "web", Some(8080), 1),
                ("Service", "data", "db", Some(5432), 0)
            ]
        );
    }
}
