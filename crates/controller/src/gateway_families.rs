//! Whether every address of a Gateway reaches a backend of its family, per listener (pure).
//!
//! A Gateway that requests no address gets one of every family its pools offer
//! ([`crate::observe::gateway_view`]), while a backend Service has endpoints only of its own
//! `ipFamilies`. The nodes forward a VIP only to endpoints of the VIP's family, so with IPv4-only
//! backends every connection to the Gateway's IPv6 address is refused, and `Programmed` (which
//! says the nodes programmed the listener, as they did) stayed True. This adds to each listener
//! with an active route the condition [`CONDITION`], False naming the unserved addresses, the
//! route and its backends' families.
//!
//! Why a condition and not fewer addresses: the routes, and so the backends, change after the
//! Gateway got its addresses, and taking an address back when a route changes would move a
//! Gateway's addresses under its clients; an address also must not depend on which route is
//! attached first. So the addresses stay, and the status says what each one reaches.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use gateway_api::gateways::GatewayStatus;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use rivora_gateway::{GatewayEval, ListenerEval, ObjKey};

use crate::ipam::blocks::Family;

/// The listener condition type (Rivora's own, so domain-prefixed as Gateway API asks).
pub const CONDITION: &str = "rivora.dev/AddressFamiliesServed";

/// `spec.ipFamilies` of every Service, by namespace/name (IPv4 when unset, as for a Service
/// without a ClusterIP family the API server defaulted).
pub fn service_families(services: &[Arc<Service>]) -> BTreeMap<ObjKey, Vec<Family>> {
    services
        .iter()
        .map(|s| {
            let fams = s
                .spec
                .as_ref()
                .and_then(|s| s.ip_families.clone())
                .unwrap_or_default()
                .iter()
                .map(|f| if f == "IPv6" { Family::V6 } else { Family::V4 })
                .collect::<Vec<_>>();
            let fams = if fams.is_empty() {
                vec![Family::V4]
            } else {
                fams
            };
            (
                ObjKey::new(
                    s.metadata.namespace.clone().unwrap_or_default(),
                    s.metadata.name.clone().unwrap_or_default(),
                ),
                fams,
            )
        })
        .collect()
}

/// The condition of `listener` given the Gateway's `addresses`; None when it has no active
/// route or none of its backends is a known Service (nothing to say).
pub fn listener_condition(
    listener: &ListenerEval,
    addresses: &[IpAddr],
    families: &BTreeMap<ObjKey, Vec<Family>>,
    generation: i64,
    previous: &[Condition],
    now: Timestamp,
) -> Option<Condition> {
    let active = listener.active.as_ref()?;
    let backends: Vec<(&ObjKey, &Vec<Family>)> = active
        .backends
        .iter()
        .filter(|b| b.valid && b.weight > 0)
        .filter_map(|b| families.get(&b.service).map(|f| (&b.service, f)))
        .collect();
    if backends.is_empty() || addresses.is_empty() {
        return None;
    }
    let served = |a: &IpAddr| backends.iter().any(|(_, f)| f.contains(&Family::of(a)));
    let unserved: Vec<String> = addresses
        .iter()
        .filter(|a| !served(a))
        .map(|a| format!("{a} ({})", Family::of(a)))
        .collect();
    let (status, reason, message) = if unserved.is_empty() {
        (
            "True",
            "AllFamiliesServed",
            "every address of the Gateway reaches a backend of its family".to_string(),
        )
    } else {
        let have: Vec<String> = backends
            .iter()
            .map(|(k, f)| {
                let f: Vec<String> = f.iter().map(Family::to_string).collect();
                format!("Service {k}: {}", f.join(", "))
            })
            .collect();
        (
            "False",
            "BackendFamilyMissing",
            format!(
                "connections to {} are refused: no backend of route {} has endpoints of that \
                 family ({}); request addresses of the backends' families in spec.addresses, \
                 or make a backend dual-stack",
                unserved.join(", "),
                active.route,
                have.join("; ")
            ),
        )
    };
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == CONDITION && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Some(Condition {
        type_: CONDITION.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: Some(generation),
        last_transition_time,
    })
}

/// Adds [`CONDITION`] to every listener of `status` (as [`crate::gateway_status`] built it)
/// that has something to say, keeping the transition time of `previous` (the Gateway's
/// current status).
pub fn annotate(
    status: &mut GatewayStatus,
    eval: &GatewayEval,
    families: &BTreeMap<ObjKey, Vec<Family>>,
    previous: Option<&GatewayStatus>,
    now: Timestamp,
) {
    let addresses: Vec<IpAddr> = status
        .addresses
        .iter()
        .flatten()
        .filter_map(|a| a.value.parse().ok())
        .collect();
    for l in status.listeners.iter_mut().flatten() {
        let Some(e) = eval.listeners.iter().find(|e| e.name == l.name) else {
            continue;
        };
        let prev: Vec<Condition> = previous
            .and_then(|p| p.listeners.as_ref())
            .and_then(|ls| ls.iter().find(|p| p.name == l.name))
            .map(|p| p.conditions.clone())
            .unwrap_or_default();
        if let Some(c) = listener_condition(e, &addresses, families, eval.generation, &prev, now) {
            l.conditions.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_api::gatewayclasses::GatewayClass;
    use gateway_api::gateways::Gateway;
    use rivora_gateway::{Snapshot, evaluate};
    use rivora_k8s_api::TcpRoute;
    use rivora_k8s_api::class::GATEWAY_CONTROLLER_NAME;
    use rivora_k8s_api::gateway_view;
    use serde_json::json;

    fn eval() -> GatewayEval {
        let gw: Gateway = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"namespace": "gw", "name": "edge", "generation": 2},
            "spec": {"gatewayClassName": "rivora", "listeners": [
                {"name": "tcp", "port": 80, "protocol": "TCP"},
                {"name": "idle", "port": 81, "protocol": "TCP",
                 "allowedRoutes": {"kinds": [{"kind": "UDPRoute"}]}},
            ]},
        }))
        .unwrap();
        let class: GatewayClass = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "rivora", "generation": 1},
            "spec": {"controllerName": GATEWAY_CONTROLLER_NAME},
        }))
        .unwrap();
        let route: TcpRoute = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TCPRoute",
            "metadata": {"namespace": "gw", "name": "r", "generation": 1,
                         "creationTimestamp": "2026-12-01T00:00:00Z"},
            "spec": {"parentRefs": [{"name": "edge", "sectionName": "tcp"}],
                     "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]},
        }))
        .unwrap();
        let services = vec![rivora_gateway::ServiceView {
            key: ObjKey::new("gw", "web"),
            ports: vec![(80, "TCP".into())],
        }];
        let mut e = evaluate(&Snapshot {
            controller_name: GATEWAY_CONTROLLER_NAME,
            classes: &[gateway_view::class_view(&class)],
            gateways: &[gateway_view::gateway_view(&gw)],
            routes: &[gateway_view::tcp_route_view(&route)],
            grants: &[],
            namespaces: &[],
            services: &services,
        });
        e.gateways.remove(&ObjKey::new("gw", "edge")).unwrap()
    }

    fn web(families: &[&str]) -> BTreeMap<ObjKey, Vec<Family>> {
        let svc: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": "gw", "name": "web"},
            "spec": {"ipFamilies": families, "ports": [{"port": 80}]},
        }))
        .unwrap();
        service_families(&[Arc::new(svc)])
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn an_ipv6_address_with_ipv4_only_backends_is_said_to_be_refused() {
        let e = eval();
        let l = e.listeners.iter().find(|l| l.name == "tcp").unwrap();
        let now: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let dual = ips(&["10.0.0.1", "fd00::1"]);
        let c = listener_condition(l, &dual, &web(&["IPv4"]), 2, &[], now).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "BackendFamilyMissing")
        );
        assert!(
            c.message
                .contains("connections to fd00::1 (IPv6) are refused")
                && c.message.contains("route gw/r")
                && c.message.contains("Service gw/web: IPv4"),
            "{}",
            c.message
        );
        assert!(!c.message.contains("10.0.0.1"), "{}", c.message);
        // Dual-stack backends serve both; an IPv4-only Gateway is served by IPv4 backends.
        let c = listener_condition(l, &dual, &web(&["IPv6", "IPv4"]), 2, &[], now).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "AllFamiliesServed")
        );
        let c = listener_condition(l, &ips(&["10.0.0.1"]), &web(&["IPv4"]), 2, &[], now).unwrap();
        assert_eq!(c.status, "True");
        // Nothing to say without a route or without a known backend.
        let idle = e.listeners.iter().find(|l| l.name == "idle").unwrap();
        assert_eq!(
            listener_condition(idle, &dual, &web(&["IPv4"]), 2, &[], now),
            None
        );
        assert_eq!(
            listener_condition(l, &dual, &BTreeMap::new(), 2, &[], now),
            None
        );
    }
}
