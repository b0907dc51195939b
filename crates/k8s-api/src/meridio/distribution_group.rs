//! `DistributionGroup`: a set of target Pods that share one Maglev table.
//!
//! Why Rivora has it: it is Meridio-2's backend group, the unit Rivora would load-balance over
//! when it serves Meridio-2's model (one Maglev slice of `maxEndpoints` stable slots per group).
//! The shape, defaults and validation follow Meridio-2's v1alpha1 API as
//! `shared/research/meridio2.md` §1.1 documents it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::route::{DEFAULT_PARENT_KIND, GATEWAY_GROUP};
use crate::schema::{Rule, add_rules, set};

/// Target slots of a group whose `maglev` block is left out: Meridio-2's controller default
/// (`DefaultMaglevMaxEndpoints`). The CRD has no default, because `maglev: {}` is refused.
pub const DEFAULT_MAX_ENDPOINTS: u32 = 102;

/// Most parent Gateways a group may name (a group belongs to exactly one Gateway).
pub const MAX_PARENT_REFS: usize = 1;

/// A group of target Pods, chosen by a label selector in the group's namespace, over which one
/// Gateway's load balancer spreads the flows its L34Routes send here.
///
/// Why namespaced: Meridio-2 keeps a group, its Gateway and its routes in one namespace, and the
/// selector only picks Pods of that namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "meridio-2.nordix.org",
    version = "v1alpha1",
    kind = "DistributionGroup",
    plural = "distributiongroups",
    shortname = "distg",
    category = "meridio",
    category = "all",
    namespaced,
    status = "DistributionGroupStatus",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = spec_schema)]
pub struct DistributionGroupSpec {
    /// The Pods (of this namespace) that are the group's targets; unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = atomic_map)]
    pub selector: Option<LabelSelector>,
    /// How flows are spread over the targets (only `Maglev`, the default); immutable.
    #[serde(rename = "type", default)]
    #[schemars(transform = immutable_type)]
    pub type_: DistributionGroupType,
    /// Maglev settings; only with type `Maglev`. Left out: 102 slots (Meridio-2's controller
    /// default, [`DEFAULT_MAX_ENDPOINTS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maglev: Option<MaglevConfig>,
    /// The Gateway this group belongs to, when no L34Route links them (at most one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = parent_refs_schema)]
    pub parent_refs: Vec<DistributionGroupParentRef>,
}

impl DistributionGroupSpec {
    /// The number of target slots (Maglev identifiers `0..n`) in effect: `maglev.maxEndpoints`,
    /// or [`DEFAULT_MAX_ENDPOINTS`] when the block is left out. A value below 1, which the API
    /// server refuses, reads as 1.
    pub fn max_endpoints(&self) -> u32 {
        self.maglev
            .as_ref()
            .map_or(DEFAULT_MAX_ENDPOINTS, |m| m.max_endpoints.max(1) as u32)
    }
}

impl DistributionGroup {
    /// [`DistributionGroupSpec::max_endpoints`] of this group.
    pub fn max_endpoints(&self) -> u32 {
        self.spec.max_endpoints()
    }
}

/// How a group spreads flows over its targets.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DistributionGroupType {
    /// Consistent hashing over a Maglev table of `maxEndpoints` stable slots, each target Pod
    /// holding one slot (its `identifier` in the LoadBalancerEndpointSlices).
    #[default]
    Maglev,
}

/// The Maglev settings of a group.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaglevConfig {
    /// Most targets (table slots) the group holds, at least 1; immutable, because a new value
    /// rebuilds the table and moves flows. Pods beyond it get no slot (`CapacityExceeded`).
    #[schemars(range(min = 1), transform = immutable_value)]
    pub max_endpoints: i32,
}

/// The Gateway a group names directly (Meridio-2's own reference type, not Gateway API's).
///
/// Optional fields the API server defaults stay `Option`s, as in the Gateway API route types:
/// an object written without them reads back with them filled in, and a server-side apply that
/// leaves them out does not claim them. The `*_or_default` methods give the effective value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = parent_ref_schema)]
pub struct DistributionGroupParentRef {
    /// API group of the parent; the server fills in `gateway.networking.k8s.io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = default_gateway_group)]
    pub group: Option<String>,
    /// Kind of the parent; the server fills in `Gateway`, the only kind allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = default_gateway_kind)]
    pub kind: Option<String>,
    /// Name of the Gateway.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Namespace of the Gateway; the group's own when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl DistributionGroupParentRef {
    /// The group this reference means (`gateway.networking.k8s.io` when left out).
    pub fn group_or_default(&self) -> &str {
        self.group.as_deref().unwrap_or(GATEWAY_GROUP)
    }

    /// The kind this reference means (`Gateway` when left out).
    pub fn kind_or_default(&self) -> &str {
        self.kind.as_deref().unwrap_or(DEFAULT_PARENT_KIND)
    }

    /// The namespace this reference means for a group in `group_namespace`.
    pub fn namespace_or<'a>(&'a self, group_namespace: &'a str) -> &'a str {
        self.namespace.as_deref().unwrap_or(group_namespace)
    }
}

/// What Meridio-2's DistributionGroup controller reports about a group.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DistributionGroupStatus {
    /// `Ready` and `CapacityExceeded` (see [`condition`]), one entry per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = conditions_schema)]
    pub conditions: Vec<Condition>,
}

/// Condition types of [`DistributionGroupStatus::conditions`] and their reasons.
pub mod condition {
    /// True when the group has targets in its LoadBalancerEndpointSlices.
    pub const READY: &str = "Ready";
    /// True when more Pods match than `maxEndpoints` slots (the youngest are left out; the
    /// message says how many, e.g. "5/37 pods excluded (32 capacity)").
    pub const CAPACITY_EXCEEDED: &str = "CapacityExceeded";

    /// Reasons of the conditions.
    pub mod reason {
        /// `Ready=True`: the group has endpoints.
        pub const ENDPOINTS_AVAILABLE: &str = "EndpointsAvailable";
        /// `Ready=False`: no Pod matches, or none has an address on the Gateway's networks.
        pub const NO_ENDPOINTS: &str = "NoEndpoints";
        /// `Ready=False`: more than one accepted Gateway reaches the group, which is then not
        /// reconciled (its slices are kept).
        pub const MULTIPLE_GATEWAYS: &str = "MultipleGateways";
        /// `CapacityExceeded=True`: Pods beyond `maxEndpoints` got no slot.
        pub const MAGLEV_CAPACITY_EXCEEDED: &str = "MaglevCapacityExceeded";
    }
}

/// `metav1.LabelSelector` is atomic (`+structType=atomic` upstream): a server-side apply
/// replaces the whole selector instead of merging two writers' terms into one that neither meant.
fn atomic_map(schema: &mut Schema) {
    set(schema, &[("x-kubernetes-map-type", json!("atomic"))]);
}

fn immutable_type(schema: &mut Schema) {
    add_rules(
        schema,
        vec![Rule::new("self == oldSelf", "type is immutable")],
    );
}

fn immutable_value(schema: &mut Schema) {
    add_rules(
        schema,
        vec![Rule::new(
            "self == oldSelf",
            "maxEndpoints is immutable (a new value rebuilds the Maglev table): \
             create a new DistributionGroup instead",
        )],
    );
}

fn spec_schema(schema: &mut Schema) {
    add_rules(
        schema,
        vec![Rule::at(
            "self.type == 'Maglev' || !has(self.maglev)",
            "maglev may only be set when type is Maglev",
            ".maglev",
        )],
    );
}

fn parent_refs_schema(schema: &mut Schema) {
    set(
        schema,
        &[
            ("maxItems", json!(MAX_PARENT_REFS)),
            ("x-kubernetes-list-type", json!("atomic")),
        ],
    );
}

fn parent_ref_schema(schema: &mut Schema) {
    add_rules(
        schema,
        vec![Rule::at(
            "!has(self.kind) || self.kind == 'Gateway'",
            "a DistributionGroup's parent must be of kind Gateway",
            ".kind",
        )],
    );
}

pub(crate) fn default_gateway_group(schema: &mut Schema) {
    set(schema, &[("default", json!(GATEWAY_GROUP))]);
}

pub(crate) fn default_gateway_kind(schema: &mut Schema) {
    set(schema, &[("default", json!(DEFAULT_PARENT_KIND))]);
}

/// Conditions are a map keyed by `type`, as in every Kubernetes API (no item limit, as
/// upstream's CRD has none).
fn conditions_schema(schema: &mut Schema) {
    set(
        schema,
        &[
            ("x-kubernetes-list-type", json!("map")),
            ("x-kubernetes-list-map-keys", json!(["type"])),
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group as Meridio-2's e2e suites write one (camelCase names, every field set).
    const FULL: &str = r#"
apiVersion: meridio-2.nordix.org/v1alpha1
kind: DistributionGroup
metadata:
  name: dg-a
  namespace: red
spec:
  selector:
    matchLabels:
      app: target-a
  type: Maglev
  maglev:
    maxEndpoints: 32
  parentRefs:
  - group: gateway.networking.k8s.io
    kind: Gateway
    name: gw-a1
    namespace: red
status:
  conditions:
  - type: Ready
    status: "True"
    reason: EndpointsAvailable
    message: 2 endpoints
    lastTransitionTime: "2026-07-01T10:00:00Z"
"#;

    #[test]
    fn a_meridio_shaped_group_round_trips() {
        let yaml: serde_json::Value = serde_norway::from_str(FULL).unwrap();
        let dg: DistributionGroup = serde_json::from_value(yaml.clone()).unwrap();
        assert_eq!(dg.spec.type_, DistributionGroupType::Maglev);
        assert_eq!(dg.spec.maglev, Some(MaglevConfig { max_endpoints: 32 }));
        assert_eq!(dg.max_endpoints(), 32);
        assert_eq!(dg.spec.parent_refs[0].name, "gw-a1");
        assert_eq!(
            dg.spec
                .selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["app"],
            "target-a"
        );
        let status = dg.status.as_ref().unwrap();
        assert_eq!(status.conditions[0].type_, condition::READY);
        assert_eq!(
            status.conditions[0].reason,
            condition::reason::ENDPOINTS_AVAILABLE
        );
        assert_eq!(serde_json::to_value(&dg).unwrap(), yaml);
    }

    #[test]
    fn left_out_fields_mean_the_documented_defaults() {
        let spec: DistributionGroupSpec = serde_json::from_value(json!({
            "parentRefs": [{"name": "gw"}]
        }))
        .unwrap();
        assert_eq!(spec.type_, DistributionGroupType::Maglev);
        assert_eq!(spec.maglev, None);
        assert_eq!(spec.max_endpoints(), DEFAULT_MAX_ENDPOINTS);
        assert_eq!(DEFAULT_MAX_ENDPOINTS, 102);
        let p = &spec.parent_refs[0];
        assert_eq!(
            (
                p.group_or_default(),
                p.kind_or_default(),
                p.namespace_or("red")
            ),
            ("gateway.networking.k8s.io", "Gateway", "red")
        );
        // Written back, the defaults the server fills in are not claimed; the type is.
        assert_eq!(
            serde_json::to_value(&spec).unwrap(),
            json!({"type": "Maglev", "parentRefs": [{"name": "gw"}]})
        );
        let one: DistributionGroupSpec =
            serde_json::from_value(json!({"maglev": {"maxEndpoints": 1}})).unwrap();
        assert_eq!(one.max_endpoints(), 1);
        let zero = DistributionGroupSpec {
            maglev: Some(MaglevConfig { max_endpoints: 0 }),
            ..one
        };
        assert_eq!(zero.max_endpoints(), 1, "below 1 reads as 1");
    }

    #[test]
    fn an_empty_maglev_block_does_not_parse() {
        // maxEndpoints is required inside the block, as the CRD requires it.
        let e = serde_json::from_value::<DistributionGroupSpec>(json!({"maglev": {}}));
        assert!(e.unwrap_err().to_string().contains("maxEndpoints"));
        let e = serde_json::from_value::<DistributionGroupSpec>(json!({"type": "Random"}));
        assert!(e.is_err(), "only Maglev is a type");
    }
}
