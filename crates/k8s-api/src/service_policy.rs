//! `ServicePolicy`: the per-VIP settings of the static YAML, attached to Services.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::schema::{DURATION_PATTERN, Rule, add_rules, communities, set};

/// Most Services one policy may target.
pub const MAX_TARGET_REFS: usize = 16;
/// Largest SYN rate and burst (the datapath's limit, as in the static YAML).
pub const MAX_SYN_RATE: i64 = 1_000_000;

/// Settings for the NAT VIPs of the Services it targets: what a VIP entry of the static YAML sets
/// beyond addresses, ports and backends (those come from the Service and its EndpointSlices).
///
/// Why policy attachment (Gateway API GEP-713) instead of annotations: the settings are typed and
/// validated by the API server, one policy can serve many Services, and its status says per
/// Service whether it took effect.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "rivora.dev",
    version = "v1alpha1",
    kind = "ServicePolicy",
    plural = "servicepolicies",
    shortname = "rvpol",
    category = "rivora",
    namespaced,
    status = "ServicePolicyStatus",
    printcolumn = r#"{"name":"Targets","type":"string","jsonPath":".spec.targetRefs[*].name","description":"Services this policy attaches to"}"#,
    printcolumn = r#"{"name":"Health Check","type":"string","jsonPath":".spec.healthCheck.type"}"#,
    printcolumn = r#"{"name":"NAT Forwarding","type":"string","jsonPath":".spec.natForwarding"}"#,
    printcolumn = r#"{"name":"SYN Rate","type":"integer","jsonPath":".spec.synRateLimit.rate"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ServicePolicySpec {
    /// The Services (in the policy's namespace) this policy applies to, 1-16, each once.
    #[schemars(transform = target_refs_schema)]
    pub target_refs: Vec<PolicyTargetRef>,
    /// Active health check of the backends (default: none, every ready endpoint is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    /// Per-client-address SYN rate limit for the TCP ports of the VIP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syn_rate_limit: Option<SynRateLimit>,
    /// Who routes the rewritten packets on to the backend (default kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat_forwarding: Option<NatForwarding>,
    /// Whether the VIP is announced (BGP, L2); default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertise: Option<bool>,
    /// BGP communities (`AS:VALUE`) attached to the VIP's routes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = communities)]
    pub communities: Vec<String>,
}

/// A reference to a Service in the policy's namespace (GEP-713
/// `LocalPolicyTargetReferenceWithSectionName`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = target_ref_schema)]
pub struct PolicyTargetRef {
    /// API group of the target: `""` (core).
    #[serde(default)]
    pub group: String,
    /// Kind of the target: `Service`.
    pub kind: String,
    /// Name of the Service.
    pub name: String,
    /// A port name of the Service: the policy then applies to that port only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// How backends are probed (as `healthCheck` in the static YAML).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = health_check_schema)]
pub struct HealthCheck {
    /// What a probe does.
    #[serde(rename = "type")]
    pub kind: CheckType,
    /// Port to probe instead of the endpoint's port (1-65535).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// HTTP only: request path, starting with `/` (default `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub path: Option<String>,
    /// HTTP only: Host header (default: the probed address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub host: Option<String>,
    /// HTTP only: accepted status codes, inclusive (default 200-399).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_status: Option<StatusRange>,
    /// Time between probes, 100ms-1h (default 2s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = DURATION_PATTERN))]
    pub interval: Option<String>,
    /// Longest a probe may take, at most the interval (default 1s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = DURATION_PATTERN))]
    pub timeout: Option<String>,
    /// Consecutive successes that bring a backend back, 1-100 (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub rise: Option<i32>,
    /// Consecutive failures that take a backend down, 1-100 (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub fall: Option<i32>,
}

/// Defaults of the optional [`HealthCheck`] fields, as the CRD documents them (and as the
/// static YAML's `healthCheck` uses them).
pub mod check_defaults {
    use std::time::Duration;
    /// Time between probes.
    pub const INTERVAL: Duration = Duration::from_secs(2);
    /// Longest a probe may take.
    pub const TIMEOUT: Duration = Duration::from_secs(1);
    /// Consecutive successes that bring a backend back.
    pub const RISE: u32 = 2;
    /// Consecutive failures that take a backend down.
    pub const FALL: u32 = 3;
    /// HTTP request path.
    pub const PATH: &str = "/";
    /// Accepted HTTP status codes, inclusive.
    pub const EXPECT_STATUS: (u16, u16) = (200, 399);
}

impl HealthCheck {
    /// `interval` with its default; `Err` names the field when it is not a duration (the CRD's
    /// pattern refuses that already, but a reader must not trust every writer).
    pub fn interval(&self) -> Result<std::time::Duration, String> {
        field_duration(
            "interval",
            self.interval.as_deref(),
            check_defaults::INTERVAL,
        )
    }

    /// `timeout` with its default; `Err` names the field when it is not a duration.
    pub fn timeout(&self) -> Result<std::time::Duration, String> {
        field_duration("timeout", self.timeout.as_deref(), check_defaults::TIMEOUT)
    }

    /// `rise` with its default (values below 1 read as 1, which the schema refuses anyway).
    pub fn rise(&self) -> u32 {
        self.rise.map_or(check_defaults::RISE, |r| r.max(1) as u32)
    }

    /// `fall` with its default (values below 1 read as 1).
    pub fn fall(&self) -> u32 {
        self.fall.map_or(check_defaults::FALL, |f| f.max(1) as u32)
    }
}

fn field_duration(
    field: &str,
    value: Option<&str>,
    default: std::time::Duration,
) -> Result<std::time::Duration, String> {
    match value {
        None => Ok(default),
        Some(v) => parse_duration(v).map_err(|e| format!("healthCheck.{field}: {e}")),
    }
}

/// Parses a duration as the CRD's pattern writes them: one or more `<number><unit>` with units
/// `ms`, `s`, `m`, `h` and an optional decimal fraction (`1.5s`, `1m30s`, `250ms`).
///
/// Why our own: these are Go `time.ParseDuration` strings restricted by the schema, and no
/// crate already in the workspace parses exactly that subset.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("{s:?} is not a duration like 2s, 500ms or 1m30s");
    if s.is_empty() {
        return Err(bad());
    }
    let mut rest = s;
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (num, tail) = rest.split_at(num_len);
        let (unit_nanos, unit_len): (u128, usize) = if tail.starts_with("ms") {
            (1_000_000, 2)
        } else if tail.starts_with('s') {
            (1_000_000_000, 1)
        } else if tail.starts_with('m') {
            (60_000_000_000, 1)
        } else if tail.starts_with('h') {
            (3_600_000_000_000, 1)
        } else {
            return Err(bad());
        };
        let (int, frac) = match num.split_once('.') {
            Some((i, f)) if !i.is_empty() && !f.is_empty() => (i, f),
            None if !num.is_empty() => (num, ""),
            _ => return Err(bad()),
        };
        if frac.contains('.') {
            return Err(bad());
        }
        let int: u128 = int.parse().map_err(|_| bad())?;
        let mut part = int.checked_mul(unit_nanos).ok_or_else(bad)?;
        let mut scale = unit_nanos;
        for d in frac.bytes() {
            scale /= 10;
            part += u128::from(d - b'0') * scale;
        }
        total_nanos = total_nanos.checked_add(part).ok_or_else(bad)?;
        rest = &tail[unit_len..];
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| bad())?;
    Ok(std::time::Duration::new(
        secs,
        (total_nanos % 1_000_000_000) as u32,
    ))
}

/// The probe of a [`HealthCheck`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CheckType {
    /// A TCP connection that completes.
    Tcp,
    /// An HTTP/1.1 GET whose status is in `expectStatus`.
    Http,
    /// No probing: every ready endpoint is used.
    None,
}

/// An inclusive range of HTTP status codes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = status_range_schema)]
pub struct StatusRange {
    /// Lowest accepted status (100-599).
    #[schemars(range(min = 100, max = 599))]
    pub from: i32,
    /// Highest accepted status (100-599, at least `from`).
    #[schemars(range(min = 100, max = 599))]
    pub to: i32,
}

/// A per-source token bucket for TCP SYNs.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SynRateLimit {
    /// New connections per second per client address (1-1000000).
    #[schemars(range(min = 1, max = 1_000_000))]
    pub rate: i64,
    /// Bucket depth (1-1000000; default: the rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub burst: Option<i64>,
}

/// Who routes a NAT VIP's rewritten packet on to its backend (as `natForwarding` in the YAML).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NatForwarding {
    /// The kernel's forwarding path (netfilter, policy routing apply).
    Kernel,
    /// The XDP program's own FIB lookup and redirect.
    Fib,
}

/// Whether the policy took effect, per target. Written by rivora-controller's leader only (one
/// writer with the cluster view; every node reads the same policies, so N nodes would fight over
/// one status), through the status subresource.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePolicyStatus {
    /// One entry per target reference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub targets: Vec<TargetStatus>,
}

/// The status of a policy for one of its targets (as Gateway API's `PolicyAncestorStatus`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetStatus {
    /// The target this entry is about.
    pub target_ref: PolicyTargetRef,
    /// `Accepted`: True (reason `Accepted`) when the nodes apply this policy to the target (to at
    /// least one of its ports), else False with reason `TargetNotFound` (no such Service in the
    /// policy's namespace, or no port named `sectionName`), `Invalid` (not a LoadBalancer
    /// Service of Rivora's class, or a value the nodes refuse) or `Conflicted` (another policy
    /// wins every port: it names the port by `sectionName`, or it is older). The message names
    /// the field or the winning policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = crate::address_pool::conditions_schema)]
    pub conditions: Vec<Condition>,
}

/// The condition type of [`TargetStatus::conditions`] and its reasons (Gateway API's
/// `PolicyConditionType` and `PolicyConditionReason`, so tools that read policy status read
/// ours).
pub mod condition {
    /// True when the nodes apply the policy to the target.
    pub const ACCEPTED: &str = "Accepted";

    /// Reasons of the `Accepted` condition.
    pub mod reason {
        /// True: the policy applies.
        pub const ACCEPTED: &str = "Accepted";
        /// False: no such Service in the policy's namespace (or no port named `sectionName`).
        pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
        /// False: the target is not a LoadBalancer Service of Rivora's class, or a value of the
        /// policy is one the nodes refuse.
        pub const INVALID: &str = "Invalid";
        /// False: another policy wins every port of the target (more specific, or older).
        pub const CONFLICTED: &str = "Conflicted";
    }
}

fn target_refs_schema(schema: &mut Schema) {
    set(
        schema,
        &[("minItems", json!(1)), ("maxItems", json!(MAX_TARGET_REFS))],
    );
    add_rules(
        schema,
        vec![Rule::new(
            "self.all(a, self.exists_one(b, a.group == b.group && a.kind == b.kind && \
             a.name == b.name && (has(a.sectionName) ? a.sectionName : '') == \
             (has(b.sectionName) ? b.sectionName : '')))",
            "each target may be listed once",
        )],
    );
}

fn target_ref_schema(schema: &mut Schema) {
    if let Some(props) = schema
        .ensure_object()
        .get_mut("properties")
        .and_then(|p| p.as_object_mut())
    {
        for (field, max) in [
            ("name", 253),
            ("sectionName", 63),
            ("kind", 63),
            ("group", 253),
        ] {
            if let Some(serde_json::Value::Object(p)) = props.get_mut(field) {
                p.insert("maxLength".into(), json!(max));
                if field == "name" {
                    p.insert("minLength".into(), json!(1));
                }
            }
        }
    }
    add_rules(
        schema,
        vec![
            Rule::at(
                "self.kind == 'Service'",
                "a ServicePolicy attaches to Services only (kind: Service)",
                ".kind",
            ),
            Rule::at(
                "self.group == ''",
                "a Service is in the core API group (group: \"\")",
                ".group",
            ),
        ],
    );
}

fn health_check_schema(schema: &mut Schema) {
    // duration() fails on a malformed string; the pattern already reports those, so each
    // duration rule only looks at well-formed values (and falls back to the defaults).
    let well_formed =
        |f: &str| format!("(has(self.{f}) && self.{f}.matches(r'{DURATION_PATTERN}'))");
    let iv = format!(
        "({} ? duration(self.interval) : duration('2s'))",
        well_formed("interval")
    );
    let to = format!(
        "({} ? duration(self.timeout) : duration('1s'))",
        well_formed("timeout")
    );
    add_rules(
        schema,
        vec![
            Rule::at(
                "!has(self.path) || self.type == 'http'",
                "path is only for type: http",
                ".path",
            ),
            Rule::at(
                "!has(self.host) || self.type == 'http'",
                "host is only for type: http",
                ".host",
            ),
            Rule::at(
                "!has(self.expectStatus) || self.type == 'http'",
                "expectStatus is only for type: http",
                ".expectStatus",
            ),
            Rule::at(
                "!has(self.path) || self.path.startsWith('/')",
                "path must start with /",
                ".path",
            ),
            Rule::at(
                format!(
                    "!{} || (duration(self.interval) >= duration('100ms') && \
                     duration(self.interval) <= duration('1h'))",
                    well_formed("interval")
                ),
                "interval must be between 100ms and 1h",
                ".interval",
            ),
            Rule::at(
                format!(
                    "!{} || duration(self.timeout) >= duration('1ms')",
                    well_formed("timeout")
                ),
                "timeout must be at least 1ms",
                ".timeout",
            ),
            Rule::at(
                format!("{to} <= {iv}"),
                "timeout must not be longer than interval (defaults: 1s and 2s)",
                ".timeout",
            ),
        ],
    );
}

fn status_range_schema(schema: &mut Schema) {
    add_rules(
        schema,
        vec![Rule::at(
            "self.from <= self.to",
            "from must not be above to",
            ".to",
        )],
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_parse_as_the_pattern_writes_them() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "2", "s", "2x", "1.s", ".5s", "1..5s", "-1s", "2 s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn health_check_defaults_are_the_documented_ones() {
        let hc: HealthCheck = serde_json::from_value(json!({"type": "tcp"})).unwrap();
        assert_eq!(hc.interval(), Ok(Duration::from_secs(2)));
        assert_eq!(hc.timeout(), Ok(Duration::from_secs(1)));
        assert_eq!((hc.rise(), hc.fall()), (2, 3));
        let bad: HealthCheck =
            serde_json::from_value(json!({"type": "tcp", "interval": "soon"})).unwrap();
        let err = bad.interval().unwrap_err();
        assert!(err.contains("healthCheck.interval"), "{err}");
    }
}
