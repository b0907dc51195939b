//! Rivora's Kubernetes custom resources, API group `rivora.dev`, version `v1alpha1`:
//! [`AddressPool`] (cluster-scoped), [`ServicePolicy`] (namespaced), [`BGPPeer`]
//! (cluster-scoped) and [`RivoraNode`] (cluster-scoped, each node's report), and the CRD YAML
//! generated from them; and the Gateway API v1 L4 routes Rivora implements, [`TcpRoute`] and
//! [`UdpRoute`] ([`route`] says why they are here and not taken from the `gateway-api` crate).
//!
//! Why the CRDs are generated from these types (and checked in under `deploy/chart/crds/`): the Rust
//! types are what rivora-controller and rivorad read and write, so the schema the API server
//! enforces can never drift from them; a test fails when the committed YAML is stale.
//! Regenerate with `cargo run -p rivora-k8s-api --bin rivora-crdgen -- deploy/chart/crds`. The route
//! kinds are the exception: their CRDs are Gateway API's own (v1.6), never generated here.
//! Meridio-2's resource model ([`meridio`], group `meridio-2.nordix.org`) is generated here too,
//! into a chart template installed only on request, for clusters that do not run Meridio-2.
//!
//! The rules rivora-controller and rivorad must agree on live here too, so there is one copy of
//! each: which Services are Rivora's ([`class`]), which ServicePolicy applies to a Service port
//! ([`attachment`]) and what a node refuses in one ([`policy_check`]).
//!
//! Validation lives in the schemas (types, ranges, enums, patterns) and in CEL rules
//! (`x-kubernetes-validations`), so the API server itself refuses a bad object with a message
//! that names the field.

#![warn(missing_docs)]

pub mod address_pool;
pub mod attachment;
pub mod bgp_peer;
pub mod class;
pub mod gateway_view;
pub mod meridio;
pub mod policy_check;
pub mod rivora_node;
pub mod route;
mod schema;
pub mod selector;
pub mod service_policy;
pub mod tcp_route;
pub mod udp_route;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use address_pool::{AddressCounts, AddressPool, AddressPoolSpec, AddressPoolStatus};
pub use bgp_peer::{BGPPeer, BGPPeerSpec, BGPPeerStatus, SecretKeyRef};
pub use rivora_node::{
    AnnounceReport, BgpSessionReport, DatapathSummary, DigestListener, GatewayReport,
    ListenerReport, RivoraNode, RivoraNodeSpec, RivoraNodeStatus, ServiceReport, listeners_digest,
};
pub use route::{BackendRef, L4RouteRule, ParentReference, RouteParentStatus, RouteStatus};
pub use service_policy::{
    CheckType, HealthCheck, NatForwarding, PolicyTargetRef, ServicePolicy, ServicePolicySpec,
    ServicePolicyStatus, StatusRange, SynRateLimit, TargetStatus,
};
pub use tcp_route::{TcpRoute, TcpRouteSpec};
pub use udp_route::{UdpRoute, UdpRouteSpec};

/// The API group of every Rivora resource.
pub const GROUP: &str = "rivora.dev";
/// The version of this crate's types.
pub const VERSION: &str = "v1alpha1";

/// Every CRD of this crate, in a stable order (Rivora's own; not the Gateway API routes).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        AddressPool::crd(),
        BGPPeer::crd(),
        RivoraNode::crd(),
        ServicePolicy::crd(),
    ]
}

/// The file name a CRD is committed under: `<group>_<plural>.yaml`, as controller-gen names them.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// A CRD as the YAML committed in `deploy/chart/crds/` (with a header saying it is generated).
pub fn crd_yaml(crd: &CustomResourceDefinition) -> anyhow::Result<String> {
    let body = serde_norway::to_string(crd)?;
    Ok(format!(
        "# Generated from crates/k8s-api by `cargo run -p rivora-k8s-api --bin rivora-crdgen -- deploy/chart/crds`.\n\
         # Do not edit: change the Rust types and regenerate.\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_and_names_are_as_documented() {
        let scopes: Vec<(String, String)> = crds()
            .into_iter()
            .map(|c| (c.spec.names.kind, c.spec.scope))
            .collect();
        assert_eq!(
            scopes,
            [
                ("AddressPool".into(), "Cluster".into()),
                ("BGPPeer".into(), "Cluster".into()),
                ("RivoraNode".into(), "Cluster".into()),
                ("ServicePolicy".into(), "Namespaced".into()),
            ]
        );
        for crd in crds() {
            assert_eq!(crd.spec.group, GROUP);
            assert_eq!(crd.spec.versions.len(), 1);
            assert_eq!(crd.spec.versions[0].name, VERSION);
            let v = &crd.spec.versions[0];
            assert!(
                v.subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some(),
                "{}: status is a subresource, so only its one writer (controller or node) writes it",
                crd.spec.names.kind
            );
        }
    }

    #[test]
    fn omitted_fields_take_their_documented_defaults() {
        let pool: AddressPoolSpec =
            serde_json::from_value(serde_json::json!({"addresses": ["10.0.0.0/24"]})).unwrap();
        assert!(pool.auto_assign);
        assert!(!pool.avoid_buggy_ips && !pool.disabled);
        assert_eq!(pool.priority, 0);
        let peer: BGPPeerSpec = serde_json::from_value(
            serde_json::json!({"address": "192.0.2.1", "peerASN": 1, "localASN": 2}),
        )
        .unwrap();
        assert_eq!((peer.port, peer.hold_time_seconds), (179, 90));
        let r: SecretKeyRef =
            serde_json::from_value(serde_json::json!({"namespace": "n", "name": "s"})).unwrap();
        assert_eq!(r.key, "password");
    }
}
