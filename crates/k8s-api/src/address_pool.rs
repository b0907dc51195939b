//! `AddressPool`: where rivora-controller takes LoadBalancer addresses from.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::schema::{Rule, add_rules, cel_ipv4_int, set, set_items};

/// Most address blocks one pool may list (keeps the pairwise overlap rules within the API
/// server's CEL cost budget).
pub const MAX_ADDRESS_BLOCKS: usize = 32;

/// A set of addresses rivora-controller assigns to `type: LoadBalancer` Services and to Gateways.
///
/// Why cluster-scoped: addresses are a cluster-wide resource (two namespaces must never get the
/// same one by accident); who may use a pool is said by its selectors.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "rivora.dev",
    version = "v1alpha1",
    kind = "AddressPool",
    plural = "addresspools",
    shortname = "rvpool",
    category = "rivora",
    status = "AddressPoolStatus",
    printcolumn = r#"{"name":"Addresses","type":"string","jsonPath":".spec.addresses","description":"CIDRs and ranges of the pool"}"#,
    printcolumn = r#"{"name":"Auto Assign","type":"boolean","jsonPath":".spec.autoAssign"}"#,
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"Disabled","type":"boolean","jsonPath":".spec.disabled"}"#,
    printcolumn = r#"{"name":"IPv4 Free","type":"integer","jsonPath":".status.ipv4.available","description":"IPv4 addresses not assigned"}"#,
    printcolumn = r#"{"name":"IPv6 Free","type":"integer","jsonPath":".status.ipv6.available","description":"IPv6 addresses not assigned (saturates at 2^63-1)"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AddressPoolSpec {
    /// Address blocks: CIDRs (`10.0.0.0/24`, `fd00:1::/120`, no host bits set) and inclusive
    /// ranges `start-end` of one family (`10.0.0.10-10.0.0.20`, no spaces). Blocks of one pool
    /// must not overlap. The API server checks the format, families and IPv4 ordering and
    /// overlaps; for IPv6 it checks CIDR/CIDR overlaps and range ends inside CIDRs, and
    /// rivora-controller reports what remains (an IPv6 range whose start is above its end, or
    /// two overlapping IPv6 ranges) in the `Valid` condition.
    #[schemars(transform = addresses_schema)]
    pub addresses: Vec<String>,
    /// Whether Services that ask for no particular pool may get addresses from this one.
    #[serde(default = "default_true")]
    pub auto_assign: bool,
    /// Skip IPv4 addresses ending in .0 and .255, which some old clients and routers mishandle.
    #[serde(default)]
    pub avoid_buggy_ips: bool,
    /// Only Services whose labels match may get addresses from this pool (unset: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_selector: Option<LabelSelector>,
    /// Only Services in namespaces whose labels match may get addresses from this pool (unset:
    /// all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Pools are tried from the highest priority down (0-1000, default 0); among equal
    /// priorities, by name.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1000))]
    pub priority: i32,
    /// No new allocations from this pool; the addresses already assigned stay.
    #[serde(default)]
    pub disabled: bool,
}

fn default_true() -> bool {
    true
}

/// What rivora-controller observed about a pool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddressPoolStatus {
    /// `Valid` (the blocks are usable), `Overlapping` (True: shares addresses with another pool;
    /// the newer pool of the two is not allocated from), `Exhausted` (True: nothing left).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = conditions_schema)]
    pub conditions: Vec<Condition>,
    /// IPv4 address counts (absent: the pool has no IPv4 block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<AddressCounts>,
    /// IPv6 address counts (absent: the pool has no IPv6 block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<AddressCounts>,
}

/// Counts of one address family in a pool; saturate at 2^63-1 (an IPv6 /64 holds 2^64).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddressCounts {
    /// Addresses in the pool's blocks (after `avoidBuggyIPs`).
    pub total: i64,
    /// Addresses assigned to Services or Gateways.
    pub used: i64,
    /// `total - used`.
    pub available: i64,
}

/// Condition types of [`AddressPoolStatus::conditions`].
pub mod condition {
    /// True when every block is valid (the checks the API server cannot make included).
    pub const VALID: &str = "Valid";
    /// True when a block overlaps a block of another pool.
    pub const OVERLAPPING: &str = "Overlapping";
    /// True when no address is left to assign.
    pub const EXHAUSTED: &str = "Exhausted";
}

/// Conditions are a map keyed by `type`, as in every Kubernetes API.
pub(crate) fn conditions_schema(schema: &mut Schema) {
    set(
        schema,
        &[
            ("x-kubernetes-list-type", json!("map")),
            ("x-kubernetes-list-map-keys", json!(["type"])),
            ("maxItems", json!(16)),
        ],
    );
}

fn addresses_schema(schema: &mut Schema) {
    set(
        schema,
        &[
            ("minItems", json!(1)),
            ("maxItems", json!(MAX_ADDRESS_BLOCKS)),
            ("x-kubernetes-list-type", json!("set")),
        ],
    );
    set_items(schema, &[("maxLength", json!(80)), ("minLength", json!(1))]);
    let part = |a: &str, i: usize| format!("{a}.split('-')[{i}]");
    let is_range = |a: &str| {
        format!(
            "({a}.split('-').size() == 2 && isIP({p0}) && isIP({p1}))",
            p0 = part(a, 0),
            p1 = part(a, 1)
        )
    };
    let is_v4_range = |a: &str| {
        format!(
            "({r} && ip({p0}).family() == 4 && ip({p1}).family() == 4)",
            r = is_range(a),
            p0 = part(a, 0),
            p1 = part(a, 1)
        )
    };
    let is_v6_range = |a: &str| {
        format!(
            "({r} && ip({p0}).family() == 6 && ip({p1}).family() == 6)",
            r = is_range(a),
            p0 = part(a, 0),
            p1 = part(a, 1)
        )
    };
    let is_cidr_of =
        |a: &str, family: u8| format!("(isCIDR({a}) && cidr({a}).ip().family() == {family})");
    // IPv4 blocks as inclusive integer intervals [lo, hi].
    let pow2: Vec<String> = (0..=32).map(|i| (1u64 << i).to_string()).collect();
    let pow2 = format!("[{}]", pow2.join(", "));
    let lo = |a: &str| {
        format!(
            "(isCIDR({a}) ? {c} : {r})",
            c = cel_ipv4_int(&format!("{a}.split('/')[0]")),
            r = cel_ipv4_int(&part(a, 0))
        )
    };
    let hi = |a: &str| {
        format!(
            "(isCIDR({a}) ? {c} + {pow2}[32 - cidr({a}).prefixLength()] - 1 : {r})",
            c = cel_ipv4_int(&format!("{a}.split('/')[0]")),
            r = cel_ipv4_int(&part(a, 1))
        )
    };
    let is_v4 = |a: &str| format!("({} || {})", is_cidr_of(a, 4), is_v4_range(a));
    add_rules(
        schema,
        vec![
            Rule::new(
                format!("self.all(a, isCIDR(a) || {})", is_range("a")),
                "each address block must be a CIDR (10.0.0.0/24, fd00::/120) or a range \
                 start-end of two IP addresses without spaces (10.0.0.10-10.0.0.20)",
            ),
            Rule::new(
                "self.all(a, !isCIDR(a) || cidr(a) == cidr(a).masked())",
                "a CIDR must not have host bits set (10.0.0.0/24, not 10.0.0.1/24)",
            ),
            Rule::new(
                format!(
                    "self.all(a, !{r} || ip({p0}).family() == ip({p1}).family())",
                    r = is_range("a"),
                    p0 = part("a", 0),
                    p1 = part("a", 1)
                ),
                "both ends of a range must be of one address family",
            ),
            Rule::new(
                format!(
                    "self.all(a, !{r} || {s} <= {e})",
                    r = is_v4_range("a"),
                    s = cel_ipv4_int(&part("a", 0)),
                    e = cel_ipv4_int(&part("a", 1))
                ),
                "the start of a range must not be above its end",
            ),
            Rule::new(
                format!(
                    "self.all(a, !{va} || self.all(b, a == b || !{vb} || {ha} < {lb} || {hb} < {la}))",
                    va = is_v4("a"),
                    vb = is_v4("b"),
                    ha = hi("a"),
                    hb = hi("b"),
                    la = lo("a"),
                    lb = lo("b")
                ),
                "the IPv4 address blocks of one pool must not overlap",
            ),
            Rule::new(
                format!(
                    "self.all(a, !{ca} || self.all(b, a == b || !{cb} || \
                     (!cidr(a).containsCIDR(cidr(b)) && !cidr(b).containsCIDR(cidr(a)))))",
                    ca = is_cidr_of("a", 6),
                    cb = is_cidr_of("b", 6)
                ),
                "the IPv6 CIDRs of one pool must not overlap",
            ),
            Rule::new(
                format!(
                    "self.all(a, !{ra} || self.all(b, !{cb} || \
                     (!cidr(b).containsIP({p0}) && !cidr(b).containsIP({p1}))))",
                    ra = is_v6_range("a"),
                    cb = is_cidr_of("b", 6),
                    p0 = part("a", 0),
                    p1 = part("a", 1)
                ),
                "an IPv6 range of a pool must not overlap one of its CIDRs",
            ),
        ],
    );
}
