//! `L34Route`: which packets to a Gateway's VIPs go to which DistributionGroup.
//!
//! Why Rivora has it: it is Meridio-2's classifier rule (VIPs, source CIDRs, ports, protocols,
//! byte matches and a priority, highest first), and the Gateway's VIP set is the union of its
//! routes' `destinationCIDRs`. The shape, defaults and validation follow Meridio-2's v1alpha1 API
//! as `shared/research/meridio2.md` §1.2 documents it; `parentRefs` and `backendRefs` have Gateway
//! API v1's `ParentReference` and `BackendRef` shapes and validation.

use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::GROUP;
use super::distribution_group::{default_gateway_group, default_gateway_kind};
use crate::route::{DEFAULT_BACKEND_KIND, DEFAULT_PARENT_KIND, DEFAULT_WEIGHT, GATEWAY_GROUP};
use crate::schema::{Rule, add_rules, set, set_items};

/// Most `destinationCIDRs` (VIPs) and `sourceCIDRs` of one route.
pub const MAX_CIDRS: usize = 100;
/// Most `sourcePorts` and `destinationPorts` entries of one route.
pub const MAX_PORT_RANGES: usize = 20;
/// Most `byteMatches` of one route.
pub const MAX_BYTE_MATCHES: usize = 10;
/// What one `sourcePorts`/`destinationPorts` entry looks like: a port `N`, an inclusive range
/// `N-M`, or `any` (0-65535). CEL rules add `N <= M <= 65535`.
pub const PORT_PATTERN: &str = "^(any|[0-9]+(-[0-9]+)?)$";
/// What one `byteMatches` entry looks like, tcpdump-like: `proto[offset:size] (& mask)? = value`
/// with size 1, 2 or 4 bytes, e.g. `sctp[4:4]=0` or `tcp[13:1] & 0x02 = 0x02`.
pub const BYTE_MATCH_PATTERN: &str =
    r"^(sctp|tcp|udp)\[[0-9]+ *: *[124]\]( *& *0x[0-9a-f]+)? *= *([0-9]+|0x[0-9a-f]+)$";
/// The kind a backend must be for the load balancer to use it (with group
/// `meridio-2.nordix.org`).
pub const DISTRIBUTION_GROUP_KIND: &str = "DistributionGroup";

/// A classifier rule of one Gateway: packets to one of `destinationCIDRs`, with one of
/// `protocols`, from `sourceCIDRs` and the given ports and bytes, go to the DistributionGroup of
/// `backendRefs`. Among the routes a packet matches, the highest `priority` wins.
///
/// Why a route per rule (not per VIP): Meridio-2 spreads one VIP over several groups by priority
/// (e.g. SCTP INIT chunks, `sctp[4:4]=0`, to one group and the rest to another).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "meridio-2.nordix.org",
    version = "v1alpha1",
    kind = "L34Route",
    plural = "l34routes",
    namespaced,
    status = "L34RouteStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct L34RouteSpec {
    /// The Gateway the route (and so its VIPs) belongs to: exactly one.
    #[schemars(transform = exactly_one)]
    pub parent_refs: Vec<L34ParentReference>,
    /// Where matching packets go: exactly one when set, a DistributionGroup (`group:
    /// meridio-2.nordix.org`, `kind: DistributionGroup`; `port` and `weight` are ignored).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = exactly_one)]
    pub backend_refs: Vec<L34BackendRef>,
    /// The VIPs, each a host prefix (IPv4 `/32`, IPv6 `/128`); at most 100.
    #[serde(rename = "destinationCIDRs")]
    #[schemars(transform = destination_cidrs_schema)]
    pub destination_cidrs: Vec<String>,
    /// Source prefixes the packet must come from (unset: any source); at most 100.
    #[serde(rename = "sourceCIDRs", default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = source_cidrs_schema)]
    pub source_cidrs: Vec<String>,
    /// Source ports (`N`, `N-M` or `any`; unset: any); at most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = ports_schema)]
    pub source_ports: Vec<String>,
    /// Destination ports (`N`, `N-M` or `any`; unset: any); at most 20. No port translation:
    /// the packet keeps its port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = ports_schema)]
    pub destination_ports: Vec<String>,
    /// Transport protocols the route matches, 1-3, each once (there is no "any protocol").
    #[schemars(transform = protocols_schema)]
    pub protocols: Vec<TransportProtocol>,
    /// Among the routes a packet matches, the highest priority wins (at least 1).
    #[schemars(range(min = 1))]
    pub priority: i32,
    /// Bytes of the L4 header the packet must have (all of them), e.g. `sctp[4:4]=0`; at most
    /// 10.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = byte_matches_schema)]
    pub byte_matches: Vec<String>,
}

/// A transport protocol an L34Route matches. Read in any case (`tcp`, `Tcp`, `TCP`): Meridio-2's
/// CRD has no enum there and its load balancer lower-cases the value, so objects written for
/// it say `tcp`; written back in upper case.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
#[schemars(transform = protocol_schema)]
pub enum TransportProtocol {
    /// TCP (IP protocol 6).
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
    /// SCTP (IP protocol 132).
    Sctp,
}

impl<'de> Deserialize<'de> for TransportProtocol {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.to_ascii_uppercase().as_str() {
            "TCP" => Ok(TransportProtocol::Tcp),
            "UDP" => Ok(TransportProtocol::Udp),
            "SCTP" => Ok(TransportProtocol::Sctp),
            _ => Err(serde::de::Error::custom(format!(
                "protocol {s:?} is not served: TCP, UDP or SCTP (in any case)"
            ))),
        }
    }
}

/// The protocol's schema: TCP, UDP or SCTP in any case (a pattern, not an enum, which would
/// refuse Meridio-2's lower-case objects).
fn protocol_schema(schema: &mut Schema) {
    if let Some(o) = schema.as_object_mut() {
        // Variants with doc comments come as oneOf of consts (kube turns them into an enum).
        o.remove("enum");
        o.remove("oneOf");
        o.insert("type".into(), json!("string"));
        o.insert(
            "pattern".into(),
            json!("^([Tt][Cc][Pp]|[Uu][Dd][Pp]|[Ss][Cc][Tt][Pp])$"),
        );
    }
}

/// What an L34Route reports: nothing yet (an empty object, as upstream), kept so the status
/// subresource exists and a later field is not a breaking change.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct L34RouteStatus {}

/// The Gateway an L34Route attaches to (Gateway API v1 `ParentReference`).
///
/// Why not the route module's `ParentReference`: that one carries no schema (the CRDs of its
/// kinds are Gateway API's own), and this CRD is generated here, so its parts need one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct L34ParentReference {
    /// API group of the parent; the server fills in `gateway.networking.k8s.io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = gateway_group_field)]
    pub group: Option<String>,
    /// Kind of the parent; the server fills in `Gateway`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = gateway_kind_field)]
    pub kind: Option<String>,
    /// Namespace of the parent; the route's own when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = namespace_field)]
    pub namespace: Option<String>,
    /// Name of the parent.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// A listener of the Gateway, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = section_name_field)]
    pub section_name: Option<String>,
    /// A listener of the Gateway, by port (1-65535).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
}

impl L34ParentReference {
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

/// Where an L34Route sends its packets (Gateway API v1 `BackendRef`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = backend_ref_schema)]
pub struct L34BackendRef {
    /// API group of the backend; the server fills in `""` (core). Meridio-2:
    /// `meridio-2.nordix.org`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = backend_group_field)]
    pub group: Option<String>,
    /// Kind of the backend; the server fills in `Service`. Meridio-2: `DistributionGroup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = backend_kind_field)]
    pub kind: Option<String>,
    /// Name of the backend.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the backend; the route's own when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = namespace_field)]
    pub namespace: Option<String>,
    /// Port of the backend (1-65535); required for a Service, ignored by Meridio-2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// Share of the traffic, 0-1,000,000; the server fills in 1. Ignored by Meridio-2 (one
    /// backend per route).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1_000_000), transform = weight_field)]
    pub weight: Option<i32>,
}

impl L34BackendRef {
    /// The group this reference means (`""`, the core group, when left out).
    pub fn group_or_default(&self) -> &str {
        self.group.as_deref().unwrap_or("")
    }

    /// The kind this reference means (`Service` when left out).
    pub fn kind_or_default(&self) -> &str {
        self.kind.as_deref().unwrap_or(DEFAULT_BACKEND_KIND)
    }

    /// The namespace this reference means for a route in `route_namespace`.
    pub fn namespace_or<'a>(&'a self, route_namespace: &'a str) -> &'a str {
        self.namespace.as_deref().unwrap_or(route_namespace)
    }

    /// The weight this reference has (1 when left out).
    pub fn weight_or_default(&self) -> i32 {
        self.weight.unwrap_or(DEFAULT_WEIGHT)
    }

    /// Whether it names a DistributionGroup, the only backend Meridio-2's load balancer uses.
    pub fn is_distribution_group(&self) -> bool {
        self.group_or_default() == GROUP && self.kind_or_default() == DISTRIBUTION_GROUP_KIND
    }
}

/// Gateway API's patterns for group, kind, namespace and section names.
const GROUP_PATTERN: &str = r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
const KIND_PATTERN: &str = "^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$";
const NAMESPACE_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
const SECTION_NAME_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

fn group_field(schema: &mut Schema) {
    set(
        schema,
        &[("maxLength", json!(253)), ("pattern", json!(GROUP_PATTERN))],
    );
}

fn kind_field(schema: &mut Schema) {
    set(
        schema,
        &[
            ("minLength", json!(1)),
            ("maxLength", json!(63)),
            ("pattern", json!(KIND_PATTERN)),
        ],
    );
}

fn gateway_group_field(schema: &mut Schema) {
    group_field(schema);
    default_gateway_group(schema);
}

fn gateway_kind_field(schema: &mut Schema) {
    kind_field(schema);
    default_gateway_kind(schema);
}

fn backend_group_field(schema: &mut Schema) {
    group_field(schema);
    set(schema, &[("default", json!(""))]);
}

fn backend_kind_field(schema: &mut Schema) {
    kind_field(schema);
    set(schema, &[("default", json!(DEFAULT_BACKEND_KIND))]);
}

fn namespace_field(schema: &mut Schema) {
    set(
        schema,
        &[
            ("minLength", json!(1)),
            ("maxLength", json!(63)),
            ("pattern", json!(NAMESPACE_PATTERN)),
        ],
    );
}

fn section_name_field(schema: &mut Schema) {
    set(
        schema,
        &[
            ("minLength", json!(1)),
            ("maxLength", json!(253)),
            ("pattern", json!(SECTION_NAME_PATTERN)),
        ],
    );
}

fn weight_field(schema: &mut Schema) {
    set(schema, &[("default", json!(DEFAULT_WEIGHT))]);
}

fn backend_ref_schema(schema: &mut Schema) {
    add_rules(
        schema,
        vec![Rule::at(
            "(has(self.group) && size(self.group) == 0 && has(self.kind) && \
             self.kind == 'Service') ? has(self.port) : true",
            "a Service backend (group \"\", kind Service) needs a port",
            ".port",
        )],
    );
}

fn exactly_one(schema: &mut Schema) {
    set(schema, &[("minItems", json!(1)), ("maxItems", json!(1))]);
}

fn cidr_list(schema: &mut Schema) {
    set(schema, &[("maxItems", json!(MAX_CIDRS))]);
    set_items(schema, &[("maxLength", json!(50))]);
}

fn destination_cidrs_schema(schema: &mut Schema) {
    cidr_list(schema);
    add_rules(
        schema,
        vec![Rule::new(
            "self.all(c, isCIDR(c) && cidr(c).prefixLength() == \
             (cidr(c).ip().family() == 4 ? 32 : 128))",
            "each destinationCIDR must be one address: an IPv4 /32 or an IPv6 /128 CIDR",
        )],
    );
}

fn source_cidrs_schema(schema: &mut Schema) {
    cidr_list(schema);
    add_rules(
        schema,
        vec![Rule::new(
            "self.all(c, isCIDR(c))",
            "each sourceCIDR must be a CIDR (10.0.0.0/8, fd00::/64)",
        )],
    );
}

fn ports_schema(schema: &mut Schema) {
    set(schema, &[("maxItems", json!(MAX_PORT_RANGES))]);
    set_items(
        schema,
        &[("maxLength", json!(11)), ("pattern", json!(PORT_PATTERN))],
    );
    // The pattern reports malformed entries; the rule checks the numbers of well-formed ones
    // only, so int() never sees anything but digits.
    set_items(
        schema,
        &[(
            "x-kubernetes-validations",
            json!([{
                "rule": "self == 'any' || !self.matches('^[0-9]+(-[0-9]+)?$') || \
                         (self.split('-').all(n, int(n) <= 65535) && int(self.split('-')[0]) <= \
                         int(self.split('-')[size(self.split('-')) - 1]))",
                "message": "a port must be 0-65535, and a range N-M must have N <= M"
            }]),
        )],
    );
}

fn protocols_schema(schema: &mut Schema) {
    set(schema, &[("minItems", json!(1)), ("maxItems", json!(3))]);
    add_rules(
        schema,
        vec![Rule::new(
            "self.all(p, self.exists_one(q, q == p))",
            "each protocol may be listed once",
        )],
    );
}

fn byte_matches_schema(schema: &mut Schema) {
    set(schema, &[("maxItems", json!(MAX_BYTE_MATCHES))]);
    set_items(
        schema,
        &[
            ("maxLength", json!(80)),
            ("pattern", json!(BYTE_MATCH_PATTERN)),
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_read_in_any_case_and_write_in_upper_case() {
        let p: Vec<TransportProtocol> =
            serde_json::from_value(json!(["tcp", "Udp", "SCTP"])).unwrap();
        assert_eq!(
            p,
            [
                TransportProtocol::Tcp,
                TransportProtocol::Udp,
                TransportProtocol::Sctp
            ]
        );
        assert_eq!(
            serde_json::to_value(p).unwrap(),
            json!(["TCP", "UDP", "SCTP"])
        );
        let e = serde_json::from_value::<TransportProtocol>(json!("ICMP")).unwrap_err();
        assert!(e.to_string().contains("\"ICMP\" is not served"), "{e}");
    }

    /// The SCTP suite's INIT route (Meridio-2 e2e), every optional field set.
    const FULL: &str = r#"
apiVersion: meridio-2.nordix.org/v1alpha1
kind: L34Route
metadata:
  name: sctp-init
  namespace: red
spec:
  parentRefs:
  - group: gateway.networking.k8s.io
    kind: Gateway
    name: gw-s1
    namespace: red
    sectionName: dummy
    port: 80
  backendRefs:
  - group: meridio-2.nordix.org
    kind: DistributionGroup
    name: dg-s1-init
    namespace: red
    port: 9000
    weight: 1
  destinationCIDRs:
  - 30.0.0.1/32
  - fd00:cafe::1/128
  sourceCIDRs:
  - 0.0.0.0/0
  - ::/0
  sourcePorts:
  - any
  destinationPorts:
  - "9000"
  - 9100-9200
  protocols:
  - SCTP
  - TCP
  priority: 30
  byteMatches:
  - sctp[4:4]=0
status: {}
"#;

    #[test]
    fn a_meridio_shaped_route_round_trips() {
        let yaml: serde_json::Value = serde_norway::from_str(FULL).unwrap();
        let r: L34Route = serde_json::from_value(yaml.clone()).unwrap();
        assert_eq!(
            r.spec.destination_cidrs,
            ["30.0.0.1/32", "fd00:cafe::1/128"]
        );
        assert_eq!(r.spec.source_cidrs, ["0.0.0.0/0", "::/0"]);
        assert_eq!(r.spec.destination_ports, ["9000", "9100-9200"]);
        assert_eq!(
            r.spec.protocols,
            [TransportProtocol::Sctp, TransportProtocol::Tcp]
        );
        assert_eq!(r.spec.priority, 30);
        assert_eq!(r.spec.byte_matches, ["sctp[4:4]=0"]);
        assert!(r.spec.backend_refs[0].is_distribution_group());
        assert_eq!(r.spec.parent_refs[0].section_name.as_deref(), Some("dummy"));
        assert_eq!(r.status, Some(L34RouteStatus {}));
        assert_eq!(serde_json::to_value(&r).unwrap(), yaml);
    }

    #[test]
    fn left_out_fields_mean_the_gateway_api_defaults() {
        let spec: L34RouteSpec = serde_json::from_value(json!({
            "parentRefs": [{"name": "gw"}],
            "backendRefs": [{"name": "web", "port": 80}],
            "destinationCIDRs": ["10.0.0.1/32"],
            "protocols": ["UDP"],
            "priority": 1
        }))
        .unwrap();
        let (p, b) = (&spec.parent_refs[0], &spec.backend_refs[0]);
        assert_eq!(
            (
                p.group_or_default(),
                p.kind_or_default(),
                p.namespace_or("red")
            ),
            (GATEWAY_GROUP, "Gateway", "red")
        );
        assert_eq!(
            (
                b.group_or_default(),
                b.kind_or_default(),
                b.weight_or_default()
            ),
            ("", "Service", 1)
        );
        assert!(!b.is_distribution_group(), "a Service is not a group");
        assert!(spec.source_cidrs.is_empty() && spec.byte_matches.is_empty());
        // Nothing the server defaults is written back.
        let v = serde_json::to_value(&spec).unwrap();
        assert_eq!(v["parentRefs"], json!([{"name": "gw"}]));
        assert_eq!(v.as_object().unwrap().len(), 5, "{v}");
        let dg = L34BackendRef {
            group: Some(GROUP.into()),
            kind: Some(DISTRIBUTION_GROUP_KIND.into()),
            name: "dg".into(),
            ..Default::default()
        };
        assert!(dg.is_distribution_group());
    }
}
