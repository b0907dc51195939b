//! Test objects, built from their JSON form as the API server serves them. Everything lives in
//! namespace `red`; the served Gateway is `red/gw-a`.

use std::sync::Arc;

use gateway_api::gateways::Gateway;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rivora_k8s_api::meridio::{
    DISTRIBUTION_GROUP_LABEL, DistributionGroup, L34Route, LoadBalancerEndpointSlice,
};
use serde_json::{Value, json};

use super::GatewayRef;

pub(crate) const NS: &str = "red";

/// The served Gateway.
pub(crate) fn gw() -> GatewayRef {
    GatewayRef::new(NS, "gw-a")
}

/// A Gateway of Meridio-2's class.
pub(crate) fn gateway(ns: &str, name: &str) -> Arc<Gateway> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"namespace": ns, "name": name},
            "spec": {"gatewayClassName": "meridio-2",
                     "listeners": [{"name": "dummy", "port": 80, "protocol": "TCP"}]},
        }))
        .unwrap(),
    )
}

/// A DistributionGroup in `red` with uid `uid-<name>` and generation 3.
pub(crate) fn dg(name: &str, spec: Value) -> Arc<DistributionGroup> {
    dg_with(name, spec, json!({}))
}

/// [`dg`] with annotations.
pub(crate) fn dg_with(name: &str, spec: Value, annotations: Value) -> Arc<DistributionGroup> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "DistributionGroup",
            "metadata": {"namespace": NS, "name": name, "uid": format!("uid-{name}"),
                         "generation": 3, "annotations": annotations},
            "spec": spec,
        }))
        .unwrap(),
    )
}

/// An L34Route in `red` from its whole spec.
pub(crate) fn route(name: &str, spec: Value) -> Arc<L34Route> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "L34Route",
            "metadata": {"namespace": NS, "name": name},
            "spec": spec,
        }))
        .unwrap(),
    )
}

/// The spec of a TCP route of Gateway `gateway` to group `group` for `vips`, priority 10,
/// parentRef and backendRef written in full, as the API server returns them.
pub(crate) fn route_spec(gateway: &str, group: &str, vips: &[&str]) -> Value {
    json!({
        "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway}],
        "backendRefs": [{"group": "meridio-2.nordix.org", "kind": "DistributionGroup",
                         "name": group, "port": 1, "weight": 1}],
        "destinationCIDRs": vips,
        "protocols": ["TCP"],
        "priority": 10,
    })
}

/// A LoadBalancerEndpointSlice in `red` for `group` and Gateway `red/<gateway>`, controlled by
/// the object of uid `controller` (a DistributionGroup), if any.
pub(crate) fn lbes(
    name: &str,
    group: &str,
    gateway: &str,
    controller: Option<&str>,
    endpoints: Value,
) -> Arc<LoadBalancerEndpointSlice> {
    let mut v = json!({
        "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "LoadBalancerEndpointSlice",
        "metadata": {"namespace": NS, "name": name,
                     "labels": {DISTRIBUTION_GROUP_LABEL: group}},
        "spec": {"distributionGroupName": group,
                 "gatewayRef": {"namespace": NS, "name": gateway},
                 "endpoints": endpoints},
    });
    if let Some(uid) = controller {
        v["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "DistributionGroup",
            "name": group, "uid": uid, "controller": true, "blockOwnerDeletion": true,
        }]);
    }
    Arc::new(serde_json::from_value(v).unwrap())
}

/// A LoadBalancerEndpoint of Pod `pod` (uid `uid-<pod>`); each address's family is its
/// parsed one.
pub(crate) fn lb_ep(pod: &str, identifier: Option<i32>, ready: bool, addrs: &[&str]) -> Value {
    let addresses: Vec<Value> = addrs
        .iter()
        .map(|a| {
            let family = if a.contains(':') { "IPv6" } else { "IPv4" };
            json!({"ip": a, "family": family})
        })
        .collect();
    let mut v = json!({"target": {"name": pod, "uid": format!("uid-{pod}")},
                       "addresses": addresses, "ready": ready});
    if let Some(id) = identifier {
        v["identifier"] = json!(id);
    }
    v
}

/// A core EndpointSlice in `red` labelled for `group`, of `address_type`.
pub(crate) fn core_slice(
    name: &str,
    group: &str,
    address_type: &str,
    endpoints: Value,
) -> Arc<EndpointSlice> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"namespace": NS, "name": name,
                         "labels": {DISTRIBUTION_GROUP_LABEL: group}},
            "addressType": address_type,
            "endpoints": endpoints,
        }))
        .unwrap(),
    )
}

/// A core endpoint with one address, an optional zone and `conditions.ready` as given (None:
/// absent).
pub(crate) fn core_ep(addr: &str, zone: Option<&str>, ready: Option<bool>) -> Value {
    let mut v = json!({"addresses": [addr]});
    if let Some(z) = zone {
        v["zone"] = json!(z);
    }
    if let Some(r) = ready {
        v["conditions"] = json!({"ready": r});
    }
    v
}

/// A ready core endpoint of Pod `pod` (uid `uid-<pod>`), as Meridio-2 wrote them before #178.
pub(crate) fn core_ep_of(addr: &str, zone: &str, pod: &str) -> Value {
    json!({"addresses": [addr], "zone": zone, "conditions": {"ready": true},
           "targetRef": {"kind": "Pod", "namespace": NS, "name": pod, "uid": format!("uid-{pod}")}})
}
