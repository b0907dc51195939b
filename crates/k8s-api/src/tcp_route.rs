//! `TCPRoute` (`gateway.networking.k8s.io/v1`): TCP connections arriving on a Gateway listener,
//! sent to weighted backends.
//!
//! Why a type of Rivora's own: the `gateway-api` crate only has the `v1alpha2` TCPRoute, which
//! Gateway API v1.6's standard channel does not serve (see [`crate::route`]). The CRD is the
//! upstream one (`scripts/build-testdeps.sh` fetches it); Rivora never generates or ships YAML
//! for this kind, so `TcpRoute::crd()` (which `CustomResource` derives, schema-less) must not be
//! installed.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use crate::route::{L4RouteRule, ParentReference, RouteStatus};

/// What a TCPRoute asks for: the listeners it attaches to and the one rule with its backends.
///
/// Why `rules` is a `Vec` when v1 allows exactly one: that is the wire shape (`rules[1]`), and the
/// API server refuses a second rule (`maxItems: 1`), so no object Rivora reads has more.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "TCPRoute",
    root = "TcpRoute",
    plural = "tcproutes",
    namespaced,
    status = "RouteStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct TcpRouteSpec {
    /// The Gateways (or listeners of them) this route attaches to, at most 32.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parent_refs: Vec<ParentReference>,
    /// Exactly one rule.
    pub rules: Vec<L4RouteRule>,
}
