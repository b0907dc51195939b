//! `LoadBalancerEndpointSlice`: the targets of one DistributionGroup on one Gateway, each with
//! its Maglev slot.
//!
//! Why Rivora has it: it is where Meridio-2's DistributionGroup controller publishes a group's
//! targets (since Meridio-2 #178; before, core EndpointSlices with the slot in `zone`, see
//! [`super::parse_maglev_zone`]). A load balancer reads the slices of its Gateway, controlled by
//! the group, and puts each ready endpoint's addresses into slot `identifier`. The shape and
//! validation follow Meridio-2's v1alpha1 API as `shared/research/meridio2.md` §1.3 and §2.1
//! document it.

use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::schema::{Rule, add_rules, set};

/// Most addresses of one endpoint: one per family.
pub const MAX_ADDRESSES: usize = 2;

/// Some of the targets of one DistributionGroup for one Gateway (a group has one or more
/// slices, each owned by the group through a controller ownerReference).
///
/// Why field selectors (`selectableFields`): a load balancer lists the slices of its Gateway and
/// group (`spec.gatewayRef.name`, `spec.distributionGroupName`) without reading every slice of
/// the namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "meridio-2.nordix.org",
    version = "v1alpha1",
    kind = "LoadBalancerEndpointSlice",
    plural = "loadbalancerendpointslices",
    shortname = "lbeslice",
    category = "meridio",
    category = "all",
    namespaced,
    selectable = ".spec.distributionGroupName",
    selectable = ".spec.gatewayRef.name",
    printcolumn = r#"{"name":"Distribution-Group","type":"string","jsonPath":".spec.distributionGroupName"}"#,
    printcolumn = r#"{"name":"Gateway","type":"string","jsonPath":".spec.gatewayRef.name"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerEndpointSliceSpec {
    /// The DistributionGroup (in the slice's namespace) these are targets of; immutable.
    #[schemars(length(min = 1), transform = immutable_name)]
    pub distribution_group_name: String,
    /// The Gateway the slots were allocated for (slots are per group per Gateway).
    pub gateway_ref: GatewayRef,
    /// The targets; replaced as a whole on update (an atomic list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = atomic_list)]
    pub endpoints: Vec<LoadBalancerEndpoint>,
}

/// The Gateway a slice is for.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayRef {
    /// Name of the Gateway.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Namespace of the Gateway.
    #[schemars(length(min = 1))]
    pub namespace: String,
}

/// One target Pod: its addresses on the Gateway's internal networks and its Maglev slot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerEndpoint {
    /// The Pod.
    pub target: EndpointTarget,
    /// Its addresses, at most one per family (a dual-stack Pod has one slot for both).
    #[schemars(transform = addresses_schema)]
    pub addresses: Vec<EndpointAddress>,
    /// The Maglev slot, `0..maxEndpoints` of the group, shared by both families; absent for
    /// distribution types without slots (and then the endpoint is not used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identifier: Option<i32>,
    /// Whether the Pod is Ready (false while it terminates); a load balancer uses ready
    /// endpoints only, and the slot stays the Pod's while it is not ready.
    pub ready: bool,
}

impl LoadBalancerEndpoint {
    /// The slot a load balancer puts this endpoint in: its identifier when it is ready and has
    /// one (Meridio-2's load balancer skips the others).
    pub fn active_slot(&self) -> Option<i32> {
        self.identifier.filter(|_| self.ready)
    }

    /// The address of `family`, if the endpoint has one.
    pub fn address(&self, family: IpFamily) -> Option<&str> {
        self.addresses
            .iter()
            .find(|a| a.family == family)
            .map(|a| a.ip.as_str())
    }
}

/// The Pod an endpoint is.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointTarget {
    /// Name of the Pod.
    #[schemars(length(min = 1))]
    pub name: String,
    /// UID of the Pod: slots are kept per UID, so a re-created Pod of the same name is a new
    /// target.
    #[schemars(length(min = 1))]
    pub uid: String,
}

/// One address of an endpoint.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointAddress {
    /// The address (on a secondary, internal network of the Gateway).
    #[schemars(length(min = 1, max = 45))]
    pub ip: String,
    /// Its family (the key of the list: one address per family).
    pub family: IpFamily,
}

/// An IP address family.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum IpFamily {
    /// IPv4.
    IPv4,
    /// IPv6.
    IPv6,
}

fn immutable_name(schema: &mut Schema) {
    add_rules(
        schema,
        vec![Rule::new(
            "self == oldSelf",
            "distributionGroupName is immutable",
        )],
    );
}

fn atomic_list(schema: &mut Schema) {
    set(schema, &[("x-kubernetes-list-type", json!("atomic"))]);
}

fn addresses_schema(schema: &mut Schema) {
    set(
        schema,
        &[
            ("minItems", json!(1)),
            ("maxItems", json!(MAX_ADDRESSES)),
            ("x-kubernetes-list-type", json!("map")),
            ("x-kubernetes-list-map-keys", json!(["family"])),
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slice as Meridio-2's DistributionGroup controller writes it: a dual-stack target and
    /// an IPv4-only one that is not ready.
    const FULL: &str = r#"
apiVersion: meridio-2.nordix.org/v1alpha1
kind: LoadBalancerEndpointSlice
metadata:
  name: dg-ds-5c0ffee5c0ffee01-0
  namespace: red
  labels:
    app.kubernetes.io/managed-by: distributiongroup-controller.meridio-2.nordix.org
    meridio-2.nordix.org/distribution-group: dg-ds
spec:
  distributionGroupName: dg-ds
  gatewayRef:
    name: gw-ds
    namespace: red
  endpoints:
  - target:
      name: target-a-0
      uid: 0b7a4c8e-1111-4a4a-9c9c-000000000001
    addresses:
    - ip: 169.111.100.3
      family: IPv4
    - ip: fd00:cafe::3
      family: IPv6
    identifier: 0
    ready: true
  - target:
      name: target-a-1
      uid: 0b7a4c8e-1111-4a4a-9c9c-000000000002
    addresses:
    - ip: 169.111.100.4
      family: IPv4
    identifier: 1
    ready: false
"#;

    #[test]
    fn a_meridio_shaped_slice_round_trips() {
        let yaml: serde_json::Value = serde_norway::from_str(FULL).unwrap();
        let s: LoadBalancerEndpointSlice = serde_json::from_value(yaml.clone()).unwrap();
        assert_eq!(s.spec.distribution_group_name, "dg-ds");
        assert_eq!(s.spec.gateway_ref.name, "gw-ds");
        let (a, b) = (&s.spec.endpoints[0], &s.spec.endpoints[1]);
        assert_eq!(a.address(IpFamily::IPv4), Some("169.111.100.3"));
        assert_eq!(a.address(IpFamily::IPv6), Some("fd00:cafe::3"));
        assert_eq!(b.address(IpFamily::IPv6), None);
        assert_eq!((a.active_slot(), b.active_slot()), (Some(0), None));
        assert_eq!(
            s.metadata.labels.as_ref().unwrap()[super::super::DISTRIBUTION_GROUP_LABEL],
            "dg-ds"
        );
        assert_eq!(
            s.metadata.labels.as_ref().unwrap()[super::super::MANAGED_BY_LABEL],
            super::super::MANAGED_BY
        );
        assert_eq!(serde_json::to_value(&s).unwrap(), yaml);
    }

    #[test]
    fn an_endpoint_without_identifier_has_no_slot() {
        let e: LoadBalancerEndpoint = serde_json::from_value(json!({
            "target": {"name": "p", "uid": "u"},
            "addresses": [{"ip": "10.0.0.1", "family": "IPv4"}],
            "ready": true
        }))
        .unwrap();
        assert_eq!(e.identifier, None);
        assert_eq!(e.active_slot(), None);
        // `ready` is required, as in the CRD.
        assert!(
            serde_json::from_value::<LoadBalancerEndpoint>(json!({
                "target": {"name": "p", "uid": "u"},
                "addresses": [{"ip": "10.0.0.1", "family": "IPv4"}]
            }))
            .is_err()
        );
        assert!(serde_json::from_value::<IpFamily>(json!("ipv4")).is_err());
    }
}
