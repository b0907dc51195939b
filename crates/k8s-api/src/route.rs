//! What Gateway API v1's TCPRoute and UDPRoute share: how a route names its parents (Gateways
//! and their listeners) and its backends, its one rule, and its status.
//!
//! Why Rivora has its own copies: the `gateway-api` crate (0.22) has TCPRoute and UDPRoute only
//! as `v1alpha2` (behind its `experimental` feature), and Gateway API v1.6's standard channel no
//! longer serves `v1alpha2` (`served: false`). Its standard (v1) types name every struct after
//! one kind (`HttpRouteParentRefs`, `GrpcRouteStatusParents`, ...), so there is no shared
//! `ParentReference` to reuse either. The shapes here follow the v1.6 CRDs
//! (`config/crd/standard/gateway.networking.k8s.io_{tcp,udp}routes.yaml`, whose `spec` and
//! `status` schemas are identical for the two kinds); `crates/k8s-api/tests/gateway_routes.rs`
//! proves them against a real API server serving those CRDs. Conditions are k8s-openapi's
//! `Condition`, as in every other Gateway API status.
//!
//! Optional fields the API server defaults (`group`, `kind`, `weight`) stay `Option`s: an object
//! written with them left out reads back with the defaults filled in, and a server-side apply
//! that leaves them out does not claim them. The `*_or_default` methods give the effective value.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::{Deserialize, Serialize};

/// The API group of Gateway API (and the default group of a [`ParentReference`]).
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
/// The version of Gateway API these types are (TCPRoute and UDPRoute are GA in v1.6).
pub const GATEWAY_VERSION: &str = "v1";
/// The kind a [`ParentReference`] names when `kind` is left out.
pub const DEFAULT_PARENT_KIND: &str = "Gateway";
/// The kind a [`BackendRef`] names when `kind` is left out (with group `""`, the core group).
pub const DEFAULT_BACKEND_KIND: &str = "Service";
/// The weight a [`BackendRef`] has when `weight` is left out.
pub const DEFAULT_WEIGHT: i32 = 1;
/// Most rules a v1 TCPRoute/UDPRoute may have (`maxItems: 1`; v1alpha2 allowed 16).
pub const MAX_RULES: usize = 1;
/// Most `backendRefs` in one rule (`maxItems: 16`).
pub const MAX_BACKEND_REFS: usize = 16;
/// Most `parentRefs` of a route, and most `status.parents` entries (`maxItems: 32`).
pub const MAX_PARENTS: usize = 32;
/// Most conditions in one `status.parents` entry (`maxItems: 8`).
pub const MAX_CONDITIONS: usize = 8;

/// Condition type on a route parent: whether the parent (a Gateway listener) accepted the route.
pub const ROUTE_ACCEPTED: &str = "Accepted";
/// Condition type on a route parent: whether every `backendRef` resolved to something usable.
pub const ROUTE_RESOLVED_REFS: &str = "ResolvedRefs";

/// A parent a route attaches to: a Gateway, or one listener of it (Gateway API
/// `ParentReference`).
///
/// Why both `section_name` and `port`: a route may pick a listener by name, by port, or both
/// (then the listener must match both); with neither it asks for every listener that admits it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// API group of the parent; the server fills in `gateway.networking.k8s.io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the parent; the server fills in `Gateway`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Namespace of the parent; the route's own when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the parent.
    pub name: String,
    /// The listener's name (for a Gateway parent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// The listener's port (1-65535), to select listeners by port instead of (or as well as) by
    /// name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

impl ParentReference {
    /// The group this reference means (`gateway.networking.k8s.io` when left out).
    pub fn group_or_default(&self) -> &str {
        self.group.as_deref().unwrap_or(GATEWAY_GROUP)
    }

    /// The kind this reference means (`Gateway` when left out).
    pub fn kind_or_default(&self) -> &str {
        self.kind.as_deref().unwrap_or(DEFAULT_PARENT_KIND)
    }

    /// The namespace this reference means for a route in `route_namespace`.
    pub fn namespace_or<'a>(&'a self, route_namespace: &'a str) -> &'a str {
        self.namespace.as_deref().unwrap_or(route_namespace)
    }
}

/// Where a rule sends traffic, with its share (Gateway API `BackendRef` without filters, which
/// L4 routes do not have).
///
/// Why the weight matters to Rivora: the rule's connections (TCP) or datagrams (UDP) are split in
/// proportion `weight / sum of weights`; 0 sends nothing, and a backend that does not resolve
/// still takes its share, which is then refused (TCP) or dropped (UDP).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct BackendRef {
    /// API group of the backend; the server fills in `""` (core).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the backend; the server fills in `Service`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the backend.
    pub name: String,
    /// Namespace of the backend; the route's own when left out (another one needs a
    /// ReferenceGrant there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Port of the backend (the Service port, not the target port); required for a Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Share of the traffic, 0-1,000,000; the server fills in 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

impl BackendRef {
    /// The group this reference means (`""`, the core group, when left out).
    pub fn group_or_default(&self) -> &str {
        self.group.as_deref().unwrap_or("")
    }

    /// The kind this reference means (`Service` when left out).
    pub fn kind_or_default(&self) -> &str {
        self.kind.as_deref().unwrap_or(DEFAULT_BACKEND_KIND)
    }

    /// The weight this reference has (1 when left out).
    pub fn weight_or_default(&self) -> i32 {
        self.weight.unwrap_or(DEFAULT_WEIGHT)
    }
}

/// The one rule of a v1 TCPRoute or UDPRoute (`TCPRouteRule` and `UDPRouteRule` upstream,
/// identical in shape).
///
/// Why one type for both kinds: L4 rules have no matches, only backends, so the two kinds differ
/// in what Rivora does with them (TCP or UDP listeners), not in what they hold.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct L4RouteRule {
    /// Optional name of the rule (a DNS subdomain), for status messages and policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The backends, 1 to [`MAX_BACKEND_REFS`].
    pub backend_refs: Vec<BackendRef>,
}

/// What the controllers of a route's parents say about it (Gateway API `RouteStatus`).
///
/// Why per parent: each parent (Gateway or listener) accepts or refuses the route on its own, and
/// several controllers may own parents of one route. `parents` is an atomic list in the CRD
/// (`x-kubernetes-list-type: atomic`), so a server-side apply of it replaces the whole list:
/// a controller that must leave other controllers' entries alone reads them and writes them back.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatus {
    /// One entry per (parent, controller), at most [`MAX_PARENTS`].
    pub parents: Vec<RouteParentStatus>,
}

/// One parent's verdict on a route (Gateway API `RouteParentStatus`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    /// The parent this entry is about, as the route's `parentRefs` names it.
    pub parent_ref: ParentReference,
    /// The controller that wrote this entry (the GatewayClass's `controllerName`); a controller
    /// only ever changes its own entries.
    pub controller_name: String,
    /// Conditions such as [`ROUTE_ACCEPTED`] and [`ROUTE_RESOLVED_REFS`] (1 to
    /// [`MAX_CONDITIONS`], one per type).
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn left_out_defaults_stay_out_and_mean_the_documented_values() {
        let p: ParentReference = serde_json::from_value(json!({"name": "gw"})).unwrap();
        assert_eq!(serde_json::to_value(&p).unwrap(), json!({"name": "gw"}));
        assert_eq!(
            (p.group_or_default(), p.kind_or_default()),
            (GATEWAY_GROUP, "Gateway")
        );
        assert_eq!(p.namespace_or("apps"), "apps");
        let b: BackendRef = serde_json::from_value(json!({"name": "web", "port": 80})).unwrap();
        assert_eq!(
            (
                b.group_or_default(),
                b.kind_or_default(),
                b.weight_or_default()
            ),
            ("", "Service", 1)
        );
        let b0 = BackendRef {
            weight: Some(0),
            ..b
        };
        assert_eq!(b0.weight_or_default(), 0);
    }

    #[test]
    fn field_names_are_the_crds_camel_case() {
        let p = ParentReference {
            name: "gw".into(),
            section_name: Some("tcp-80".into()),
            port: Some(80),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!({"name": "gw", "sectionName": "tcp-80", "port": 80})
        );
        let s = RouteStatus {
            parents: vec![RouteParentStatus {
                parent_ref: p,
                controller_name: "rivora.dev/gateway".into(),
                conditions: vec![],
            }],
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["parents"][0]["controllerName"], "rivora.dev/gateway");
        assert_eq!(v["parents"][0]["parentRef"]["sectionName"], "tcp-80");
        // `parents` is required by the CRD, so an empty list is still written.
        assert_eq!(
            serde_json::to_value(RouteStatus::default()).unwrap(),
            json!({"parents": []})
        );
    }
}
