//! `BGPPeer`: a BGP neighbour the nodes' speakers peer with (used from part 4 on).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::schema::{Rule, add_rules, communities, set, set_items};

/// A BGP neighbour of the nodes a selector picks.
///
/// Why cluster-scoped with the password only by Secret reference: peers are infrastructure, and
/// a TCP-MD5 key in an object every reader of BGPPeers can see would leak it; the Secret's RBAC
/// decides who reads the key. An inline `password` field is refused by the API server.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "rivora.dev",
    version = "v1alpha1",
    kind = "BGPPeer",
    plural = "bgppeers",
    shortname = "rvpeer",
    category = "rivora",
    status = "BGPPeerStatus",
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".spec.address"}"#,
    printcolumn = r#"{"name":"Peer ASN","type":"integer","jsonPath":".spec.peerASN"}"#,
    printcolumn = r#"{"name":"Local ASN","type":"integer","jsonPath":".spec.localASN"}"#,
    printcolumn = r#"{"name":"Port","type":"integer","jsonPath":".spec.port"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = bgp_peer_spec_schema)]
pub struct BGPPeerSpec {
    /// The peer's address (IPv4 or IPv6).
    #[schemars(length(max = 45), transform = ip_schema)]
    pub address: String,
    /// The peer's AS number (1-4294967295).
    #[serde(rename = "peerASN")]
    #[schemars(range(min = 1, max = 4_294_967_295u32))]
    pub peer_asn: i64,
    /// The nodes' own AS number (1-4294967295).
    #[serde(rename = "localASN")]
    #[schemars(range(min = 1, max = 4_294_967_295u32))]
    pub local_asn: i64,
    /// TCP port of the peer (default 179).
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Proposed hold time in seconds: 0 (no keepalives) or 3-65535 (RFC 4271); default 90.
    #[serde(default = "default_hold_time")]
    #[schemars(range(min = 0, max = 65535))]
    pub hold_time_seconds: i32,
    /// Source address of the session on the node (same family as `address`; default: chosen by
    /// the routing table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 45), transform = ip_schema)]
    pub local_address: Option<String>,
    /// The TCP-MD5 key (RFC 2385), from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret_ref: Option<SecretKeyRef>,
    /// Nodes that peer with it (unset: every node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// Next-hop addresses to advertise instead of the node's session address (e.g. a shared
    /// router address); at most 8, each once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = next_hops_schema)]
    pub next_hops: Vec<String>,
    /// Communities (`AS:VALUE`) attached to every route sent to this peer, besides each VIP's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = communities)]
    pub communities: Vec<String>,
}

fn default_port() -> i32 {
    179
}

fn default_hold_time() -> i32 {
    90
}

/// A key of a Secret in a named namespace (the BGPPeer itself has none).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Namespace of the Secret.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in the Secret's data holding the password (default `password`).
    #[serde(default = "default_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

fn default_key() -> String {
    "password".into()
}

/// What the speakers report about a peer (filled from part 4 on).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BGPPeerStatus {
    /// `Established` (True when every selected node has a session up) and `Valid`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = crate::address_pool::conditions_schema)]
    pub conditions: Vec<Condition>,
}

fn ip_schema(schema: &mut Schema) {
    add_rules(
        schema,
        vec![Rule::new(
            "isIP(self)",
            "must be an IPv4 or IPv6 address (no zone, no prefix length)",
        )],
    );
}

fn next_hops_schema(schema: &mut Schema) {
    set(
        schema,
        &[
            ("maxItems", json!(8)),
            ("x-kubernetes-list-type", json!("set")),
        ],
    );
    set_items(schema, &[("maxLength", json!(45))]);
    add_rules(
        schema,
        vec![Rule::new(
            "self.all(h, isIP(h))",
            "each next hop must be an IPv4 or IPv6 address",
        )],
    );
}

fn bgp_peer_spec_schema(schema: &mut Schema) {
    // Declared only so the API server refuses it by name instead of pruning it silently.
    if let Some(props) = schema
        .ensure_object()
        .get_mut("properties")
        .and_then(|p| p.as_object_mut())
    {
        props.insert(
            "password".into(),
            json!({
                "type": "string",
                "description": "Never set: an inline password is refused; use passwordSecretRef."
            }),
        );
    }
    add_rules(
        schema,
        vec![
            Rule::at(
                "!has(self.password)",
                "an inline password is not accepted: put it in a Secret and set passwordSecretRef",
                ".password",
            ),
            Rule::at(
                "self.holdTimeSeconds == 0 || self.holdTimeSeconds >= 3",
                "holdTimeSeconds must be 0 or 3-65535 (RFC 4271)",
                ".holdTimeSeconds",
            ),
            Rule::at(
                "!has(self.localAddress) || !isIP(self.localAddress) || !isIP(self.address) || \
                 ip(self.localAddress).family() == ip(self.address).family()",
                "localAddress must be of the same address family as address",
                ".localAddress",
            ),
        ],
    );
}
