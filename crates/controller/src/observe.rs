//! From Kubernetes objects to the allocator's views, and from its result to the status to write.
//! Pure functions: the API calls are in [`crate::run`].
//!
//! Services ([`service_view`]) and Gateways ([`gateway_view`]) both become a
//! [`ClaimView`], allocated in one call; the Gateway status built from the result is
//! [`crate::gateway_status`]'s.

use std::collections::BTreeMap;
use std::net::IpAddr;

use gateway_api::gateways::Gateway;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use rivora_k8s_api::AddressPool;
use serde_json::{Value, json};

use crate::ipam::blocks::Family;
use crate::ipam::{Assignment, ClaimKind, ClaimView, FamilyPolicy, PoolView, Sharing, Unsupported};

/// Annotation with requested addresses, comma-separated (one per family, for dual-stack).
pub const ANNOTATION_IPS: &str = "rivora.dev/load-balancer-ips";
/// Annotation naming the AddressPool to take the address from (on a Service or a Gateway).
pub const ANNOTATION_POOL: &str = "rivora.dev/address-pool";
/// Annotation: Services with the same value may share one address (when compatible).
pub const ANNOTATION_SHARING_KEY: &str = "rivora.dev/sharing-key";
/// Annotation: comma-separated namespaces (or `*`) whose Services may share with this one.
pub const ANNOTATION_SHARING_NAMESPACES: &str = "rivora.dev/sharing-cross-namespace";
/// The Service condition rivora-controller owns.
pub const CONDITION_TYPE: &str = "rivora.dev/AddressAssigned";
/// The field manager of every write (one, so server-side apply tracks one owner).
pub const FIELD_MANAGER: &str = "rivora-controller";

/// Which Services are ours: one definition, in rivora-k8s-api, shared with rivorad's node agent
/// so the two can never disagree about a Service.
pub use rivora_k8s_api::class::{ClassConfig, LOAD_BALANCER_CLASS, is_ours};

/// The allocator's view of a Service of ours; `Err` names a bad annotation (reported as a
/// failure by the caller, like any other).
pub fn service_view(
    svc: &Service,
    namespace_labels: &BTreeMap<String, String>,
) -> Result<ClaimView, String> {
    let spec = svc.spec.clone().unwrap_or_default();
    let annotations = svc.metadata.annotations.clone().unwrap_or_default();
    let mut requested = Vec::new();
    if let Some(ip) = spec.load_balancer_ip.as_deref().filter(|s| !s.is_empty()) {
        requested.push(
            ip.parse::<IpAddr>()
                .map_err(|_| format!("spec.loadBalancerIP {ip:?} is not an IP address"))?,
        );
    }
    if let Some(list) = annotations.get(ANNOTATION_IPS) {
        if !requested.is_empty() {
            return Err(format!(
                "set either spec.loadBalancerIP or the {ANNOTATION_IPS} annotation, not both"
            ));
        }
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            requested.push(part.parse::<IpAddr>().map_err(|_| {
                format!("annotation {ANNOTATION_IPS}: {part:?} is not an IP address")
            })?);
        }
    }
    let families = spec
        .ip_families
        .unwrap_or_default()
        .iter()
        .map(|f| if f == "IPv6" { Family::V6 } else { Family::V4 })
        .collect();
    let family_policy = match spec.ip_family_policy.as_deref() {
        Some("PreferDualStack") => FamilyPolicy::PreferDualStack,
        Some("RequireDualStack") => FamilyPolicy::RequireDualStack,
        _ => FamilyPolicy::SingleStack,
    };
    let ports = spec.ports.clone().unwrap_or_default();
    let unsupported = ports
        .iter()
        .filter_map(|p| p.protocol.clone())
        .find(|p| p != "TCP" && p != "UDP")
        .map(Unsupported::Protocol);
    let sharing = annotations
        .get(ANNOTATION_SHARING_KEY)
        .filter(|k| !k.is_empty())
        .map(|key| Sharing {
            key: key.clone(),
            cross_namespace: annotations
                .get(ANNOTATION_SHARING_NAMESPACES)
                .map(|l| {
                    l.split(',')
                        .map(|n| n.trim().to_string())
                        .filter(|n| !n.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            ports: ports
                .iter()
                .map(|p| (p.protocol.clone().unwrap_or_else(|| "TCP".into()), p.port))
                .collect(),
            external_traffic_policy: spec
                .external_traffic_policy
                .clone()
                .unwrap_or_else(|| "Cluster".into()),
            selector: spec.selector.clone().unwrap_or_default(),
        });
    Ok(ClaimView {
        kind: ClaimKind::Service,
        namespace: svc.metadata.namespace.clone().unwrap_or_default(),
        name: svc.metadata.name.clone().unwrap_or_default(),
        labels: svc.metadata.labels.clone().unwrap_or_default(),
        namespace_labels: namespace_labels.clone(),
        families,
        family_policy,
        requested,
        requested_pool: annotations.get(ANNOTATION_POOL).cloned(),
        current: current_ingress(svc),
        unsupported,
        sharing,
    })
}

/// The Gateway API address type Rivora assigns (the default when `type` is unset).
pub const GATEWAY_ADDRESS_TYPE_IP: &str = "IPAddress";

/// The allocator's view of a Gateway of Rivora's GatewayClass (the caller checks the class);
/// `Err` names a malformed `spec.addresses` entry (reported like a Service's bad annotation).
///
/// The mapping, and why:
/// - requested addresses: the `spec.addresses` entries of type `IPAddress` (or no type) with a
///   value, at most one per family (all listeners are bound to every address, and Rivora gives
///   one per family). Entries of type `IPAddress` without a value mean "assign one"; they
///   cannot be mixed with specific addresses (which family would the empty one be?);
/// - any other type (`Hostname`, `NamedAddress`, ...) makes the Gateway unsupported (reason
///   `UnsupportedAddress`, Gateway API's own reason for it): Rivora hands out IP addresses only;
/// - current addresses: `status.addresses` of type `IPAddress` that parse, imported before
///   anything new is allocated, exactly like a Service's ingress;
/// - families: those of the requested addresses (both requested: both or none, like
///   `RequireDualStack`, so the Gateway is never bound to half of what it asked for); with no
///   request, IPv4 then IPv6 with `PreferDualStack`. A Gateway has no `ipFamilies`; Cilium and
///   Envoy Gateway derive its family from the Service they create, i.e. the cluster's default
///   (single stack unless configured), so a dual-stack Gateway there needs extra
///   configuration. Rivora serves the Gateway itself, so by default it takes an address of
///   every family its pools offer: one family is enough (IPv4-only and IPv6-only pools just
///   work), and a dual-stack pool set gives a dual-stack Gateway without a knob;
/// - requested pool: the same annotation as Services (`rivora.dev/address-pool`); pool
///   selectors match the Gateway's labels and its namespace's labels;
/// - sharing: never. A Gateway owns its address: its listeners (ports) change whenever
///   someone edits the Gateway, and every listener binds to every address it has, so an
///   address shared with a Service or another Gateway would turn a listener edit into a
///   (protocol, port) collision on somebody else's address; merging listeners of several
///   objects is what Gateway API's ListenerSets are for, not address sharing;
/// - listeners: not looked at. Whether Rivora can serve a listener's protocol at L4 is a
///   listener condition (part 3), not a reason to withhold the Gateway's address.
pub fn gateway_view(
    gw: &Gateway,
    namespace_labels: &BTreeMap<String, String>,
) -> Result<ClaimView, String> {
    let annotations = gw.metadata.annotations.clone().unwrap_or_default();
    let mut requested: Vec<IpAddr> = Vec::new();
    let mut any_address = false;
    // An address of a type Rivora does not serve decides first: the Gateway is not Accepted
    // (UnsupportedAddress) whatever its IP entries say, as Gateway API's
    // GatewayStaticAddresses asserts for an unsupported type beside two IPv4 addresses.
    let unsupported = gw
        .spec
        .addresses
        .iter()
        .flatten()
        .map(|a| a.r#type.as_deref().unwrap_or(GATEWAY_ADDRESS_TYPE_IP))
        .find(|ty| *ty != GATEWAY_ADDRESS_TYPE_IP)
        .map(|ty| Unsupported::AddressType(ty.to_string()));
    for (i, a) in gw.spec.addresses.iter().flatten().enumerate() {
        let ty = a.r#type.as_deref().unwrap_or(GATEWAY_ADDRESS_TYPE_IP);
        if ty != GATEWAY_ADDRESS_TYPE_IP || unsupported.is_some() {
            continue;
        }
        let Some(value) = a.value.as_deref().filter(|v| !v.is_empty()) else {
            any_address = true;
            continue;
        };
        let ip: IpAddr = value
            .parse()
            .map_err(|_| format!("spec.addresses[{i}].value {value:?} is not an IP address"))?;
        if let Some(other) = requested.iter().find(|r| Family::of(r) == Family::of(&ip)) {
            return Err(format!(
                "spec.addresses[{i}].value {ip}: Rivora gives a Gateway one address per family, \
                 and {other} (an earlier entry) is of the same family"
            ));
        }
        requested.push(ip);
    }
    if any_address && !requested.is_empty() {
        return Err(
            "spec.addresses: an IPAddress entry without a value (assign one) cannot be combined with specific addresses".into(),
        );
    }
    let (families, family_policy) = match requested.len() {
        0 => (vec![Family::V4, Family::V6], FamilyPolicy::PreferDualStack),
        1 => (vec![Family::of(&requested[0])], FamilyPolicy::SingleStack),
        _ => (
            requested.iter().map(Family::of).collect(),
            FamilyPolicy::RequireDualStack,
        ),
    };
    Ok(ClaimView {
        kind: ClaimKind::Gateway,
        namespace: gw.metadata.namespace.clone().unwrap_or_default(),
        name: gw.metadata.name.clone().unwrap_or_default(),
        labels: gw.metadata.labels.clone().unwrap_or_default(),
        namespace_labels: namespace_labels.clone(),
        families,
        family_policy,
        requested,
        requested_pool: annotations.get(ANNOTATION_POOL).cloned(),
        current: current_gateway_addresses(gw),
        unsupported,
        sharing: None,
    })
}

/// The IP addresses in a Gateway's `status.addresses` (other types are not ours to import).
pub fn current_gateway_addresses(gw: &Gateway) -> Vec<IpAddr> {
    rivora_k8s_api::gateway_view::status_ip_addresses(gw)
}

/// The addresses in `status.loadBalancer.ingress`.
pub fn current_ingress(svc: &Service) -> Vec<IpAddr> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|ing| {
            ing.iter()
                .filter_map(|i| i.ip.as_deref()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The allocator's view of a pool.
pub fn pool_view(pool: &AddressPool) -> PoolView {
    PoolView {
        name: pool.metadata.name.clone().unwrap_or_default(),
        addresses: pool.spec.addresses.clone(),
        auto_assign: pool.spec.auto_assign,
        avoid_buggy_ips: pool.spec.avoid_buggy_ips,
        service_selector: pool.spec.service_selector.clone(),
        namespace_selector: pool.spec.namespace_selector.clone(),
        priority: pool.spec.priority,
        disabled: pool.spec.disabled,
        created: pool
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
    }
}

/// Our condition as it should be: True with the addresses, or False with the first failure.
/// `lastTransitionTime` is kept from `previous` when the status did not change.
pub fn desired_condition(
    assignment: &Assignment,
    generation: Option<i64>,
    previous: Option<&Condition>,
    now: Timestamp,
) -> Condition {
    let (status, reason, message) = match assignment.failures.first() {
        None => (
            "True",
            "Assigned".to_string(),
            format!(
                "assigned {}",
                assignment
                    .addresses
                    .iter()
                    .map(|(a, p)| format!("{a} from AddressPool {p}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Some(f) if !assignment.addresses.is_empty() => (
            "True",
            "PartiallyAssigned".to_string(),
            format!("assigned {} address(es); {f}", assignment.addresses.len()),
        ),
        Some(f) => ("False", f.reason().to_string(), f.to_string()),
    };
    let last_transition_time = previous
        .filter(|c| c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    Condition {
        type_: CONDITION_TYPE.into(),
        status: status.into(),
        reason,
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// The status body rivora-controller applies to a Service (server-side apply, one manager):
/// the whole ingress list (it is atomic) and our condition, and the L2Reachable one when it
/// applies (left out, server-side apply removes it).
pub fn service_status_patch(
    assignment: &Assignment,
    condition: &Condition,
    l2: Option<&Condition>,
) -> Value {
    let ingress: Vec<Value> = assignment
        .addresses
        .iter()
        .map(|(ip, _)| json!({ "ip": ip.to_string(), "ipMode": "VIP" }))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "status": {
            "loadBalancer": { "ingress": ingress },
            "conditions": std::iter::once(condition).chain(l2).collect::<Vec<_>>(),
        }
    })
}

/// Our condition on a Service, if it has one.
pub fn our_condition(svc: &Service) -> Option<&Condition> {
    service_condition(svc, CONDITION_TYPE)
}

/// The Service's condition of type `type_`, if it has one.
pub fn service_condition<'a>(svc: &'a Service, type_: &str) -> Option<&'a Condition> {
    svc.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether the Service's status already says what `patch` would write (then nothing is sent).
pub fn status_is_current(svc: &Service, assignment: &Assignment, condition: &Condition) -> bool {
    let ips: Vec<IpAddr> = assignment.addresses.iter().map(|(a, _)| *a).collect();
    current_ingress(svc) == ips && our_condition(svc).is_some_and(|c| same_condition(c, condition))
}

/// Whether two conditions say the same (status, reason, message, generation; the transition
/// time is not compared): then nothing needs writing.
pub fn same_condition(a: &Condition, b: &Condition) -> bool {
    a.status == b.status
        && a.reason == b.reason
        && a.message == b.message
        && a.observed_generation == b.observed_generation
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::Failure;

    fn service(value: Value) -> Service {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn requests_families_and_protocols_are_read() {
        let svc = service(json!({
            "metadata": {"namespace": "n", "name": "s", "annotations": {
                ANNOTATION_IPS: "10.0.0.5, fd00::5", ANNOTATION_POOL: "p"}},
            "spec": {"type": "LoadBalancer", "ipFamilies": ["IPv6", "IPv4"],
                     "ipFamilyPolicy": "RequireDualStack",
                     "ports": [{"port": 80, "protocol": "TCP"}, {"port": 9, "protocol": "SCTP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.5"}]}}
        }));
        let v = service_view(&svc, &BTreeMap::new()).unwrap();
        assert_eq!(v.families, [Family::V6, Family::V4]);
        assert_eq!(v.family_policy, FamilyPolicy::RequireDualStack);
        assert_eq!(v.requested.len(), 2);
        assert_eq!(v.requested_pool.as_deref(), Some("p"));
        assert_eq!(v.current, ["10.0.0.5".parse::<IpAddr>().unwrap()]);
        assert_eq!(v.kind, ClaimKind::Service);
        assert_eq!(v.unsupported, Some(Unsupported::Protocol("SCTP".into())));

        let both = service(
            json!({"metadata": {"annotations": {ANNOTATION_IPS: "10.0.0.5"}},
                                  "spec": {"loadBalancerIP": "10.0.0.6"}}),
        );
        assert!(
            service_view(&both, &BTreeMap::new())
                .unwrap_err()
                .contains("not both")
        );
        let bad = service(json!({"metadata": {"annotations": {ANNOTATION_IPS: "ten"}}}));
        assert!(
            service_view(&bad, &BTreeMap::new())
                .unwrap_err()
                .contains("\"ten\"")
        );
    }

    fn gateway(value: Value) -> Gateway {
        serde_json::from_value(value).unwrap()
    }

    fn gateway_with(addresses: Value) -> Gateway {
        gateway(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"namespace": "n", "name": "g"},
            "spec": {"gatewayClassName": "rivora", "listeners": [], "addresses": addresses}
        }))
    }

    #[test]
    fn a_gateway_maps_requests_status_families_and_pool() {
        let gw = gateway(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"namespace": "n", "name": "g", "labels": {"tier": "edge"},
                         "annotations": {ANNOTATION_POOL: "p"}},
            "spec": {"gatewayClassName": "rivora",
                     "listeners": [{"name": "dns", "port": 53, "protocol": "UDP"}],
                     "addresses": [{"type": "IPAddress", "value": "fd00::7"},
                                   {"value": "10.0.0.7"}]},
            "status": {"addresses": [{"type": "IPAddress", "value": "10.0.0.7"},
                                     {"type": "Hostname", "value": "lb.example"}]}
        }));
        let v = gateway_view(&gw, &BTreeMap::new()).unwrap();
        assert_eq!(v.kind, ClaimKind::Gateway);
        assert_eq!(v.key(), crate::ipam::ClaimKey::gateway("n", "g"));
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(v.requested, [ip("fd00::7"), ip("10.0.0.7")]);
        assert_eq!(v.families, [Family::V6, Family::V4], "in the order asked");
        assert_eq!(v.family_policy, FamilyPolicy::RequireDualStack);
        assert_eq!(
            v.current,
            [ip("10.0.0.7")],
            "only IP addresses are imported"
        );
        assert_eq!(v.requested_pool.as_deref(), Some("p"));
        assert_eq!(v.labels["tier"], "edge");
        assert_eq!((v.sharing, v.unsupported), (None, None));

        let one = gateway_view(
            &gateway_with(json!([{"value": "10.0.0.8"}])),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(
            (one.families, one.family_policy),
            (vec![Family::V4], FamilyPolicy::SingleStack)
        );
        for auto in [json!([]), json!([{"type": "IPAddress"}])] {
            let v = gateway_view(&gateway_with(auto), &BTreeMap::new()).unwrap();
            assert!(v.requested.is_empty());
            assert_eq!(
                (v.families, v.family_policy),
                (vec![Family::V4, Family::V6], FamilyPolicy::PreferDualStack)
            );
        }
    }

    #[test]
    fn a_gateway_with_bad_or_unsupported_addresses_says_which() {
        let named = gateway_with(json!([{"type": "NamedAddress", "value": "pool-a"}]));
        assert_eq!(
            gateway_view(&named, &BTreeMap::new()).unwrap().unsupported,
            Some(Unsupported::AddressType("NamedAddress".into()))
        );
        // The unsupported type wins over IP entries that would be refused on their own (as
        // in Gateway API's GatewayStaticAddresses: a fake type, then two IPv4 addresses).
        let mixed = gateway_with(json!([
            {"type": "test/fake-invalid-type", "value": "fake address teehee!"},
            {"value": "10.99.45.1"}, {"value": "10.99.44.60"}]));
        let v = gateway_view(&mixed, &BTreeMap::new()).expect("not refused: unsupported");
        assert_eq!(
            v.unsupported,
            Some(Unsupported::AddressType("test/fake-invalid-type".into()))
        );
        assert!(
            v.requested.is_empty(),
            "nothing requested: {:?}",
            v.requested
        );
        for (addresses, says) in [
            (json!([{"value": "ten"}]), "spec.addresses[0].value \"ten\""),
            (
                json!([{"value": "10.0.0.1"}, {"value": "10.0.0.2"}]),
                "spec.addresses[1].value 10.0.0.2",
            ),
            (
                json!([{"value": "10.0.0.1"}, {"type": "IPAddress"}]),
                "cannot be combined",
            ),
        ] {
            let e = gateway_view(&gateway_with(addresses.clone()), &BTreeMap::new()).unwrap_err();
            assert!(e.contains(says), "{addresses}: {e}");
        }
    }

    #[test]
    fn the_condition_keeps_its_transition_time_while_unchanged() {
        let t0: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-12-01T11:00:00Z".parse().unwrap();
        let failed = Assignment {
            addresses: vec![],
            failures: vec![Failure::PoolExhausted(Family::V4)],
        };
        let c0 = desired_condition(&failed, Some(3), None, t0);
        assert_eq!(
            (c0.status.as_str(), c0.reason.as_str()),
            ("False", "PoolExhausted")
        );
        assert_eq!(c0.observed_generation, Some(3));
        let c1 = desired_condition(&failed, Some(3), Some(&c0), t1);
        assert_eq!(c1.last_transition_time.0, t0);
        let ok = Assignment {
            addresses: vec![("10.0.0.1".parse().unwrap(), "p".into())],
            failures: vec![],
        };
        let c2 = desired_condition(&ok, Some(3), Some(&c1), t1);
        assert_eq!(
            (c2.status.as_str(), c2.last_transition_time.0),
            ("True", t1)
        );
        let patch = service_status_patch(&ok, &c2, None);
        assert_eq!(
            patch["status"]["loadBalancer"]["ingress"],
            json!([{"ip": "10.0.0.1", "ipMode": "VIP"}])
        );
    }
}
