//! ServicePolicy status: per target reference, whether the nodes apply the policy to it. Pure
//! functions of the watched ServicePolicies and Services; the API calls are in [`crate::run`].
//!
//! Why rivora-controller writes it and not the nodes: it is one writer with the cluster view,
//! while every rivorad node sees the same policies, so N nodes would fight over one status. The
//! nodes decide with the same code as this module ([`rivora_k8s_api::class`],
//! [`rivora_k8s_api::attachment`], [`rivora_k8s_api::policy_check`]), so what the status says
//! is what they do.
//!
//! Each target reference gets one `Accepted` condition, decided in this order:
//! 1. not a core `Service` reference (the schema refuses those; a reader does not trust every
//!    writer): False, `Invalid`;
//! 2. no Service of that name in the policy's namespace: False, `TargetNotFound`;
//! 3. the Service is not a `type: LoadBalancer` Service of Rivora's class (the nodes ignore
//!    it): False, `Invalid`;
//! 4. `sectionName` names no port of the Service: False, `TargetNotFound`;
//! 5. a value the nodes refuse: False, `Invalid`, the message naming the field;
//! 6. another policy wins every port the reference reaches (a `sectionName` reference beats a
//!    whole-Service one, then the oldest wins): False, `Conflicted`, naming the winner;
//! 7. otherwise True, `Accepted` (naming the ports other policies win, if any).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use rivora_k8s_api::attachment::{attached_policy, specificity};
use rivora_k8s_api::class::{ClassConfig, is_ours};
use rivora_k8s_api::policy_check;
use rivora_k8s_api::service_policy::MAX_TARGET_REFS;
use rivora_k8s_api::service_policy::condition::{self, reason};
use rivora_k8s_api::{PolicyTargetRef, ServicePolicy, ServicePolicyStatus, TargetStatus};

/// The Services of the cluster by (namespace, name), built once per pass.
pub struct ServiceIndex<'a> {
    by_key: BTreeMap<(&'a str, &'a str), &'a Service>,
}

impl<'a> ServiceIndex<'a> {
    /// Indexes `services` (objects without a namespace or name are left out).
    pub fn new(services: impl IntoIterator<Item = &'a Service>) -> Self {
        let by_key = services
            .into_iter()
            .filter_map(|s| {
                Some((
                    (
                        s.metadata.namespace.as_deref()?,
                        s.metadata.name.as_deref()?,
                    ),
                    s,
                ))
            })
            .collect();
        ServiceIndex { by_key }
    }

    fn get(&self, namespace: &str, name: &str) -> Option<&'a Service> {
        self.by_key.get(&(namespace, name)).copied()
    }
}

/// The status `policy` should have: one entry per target reference (in `spec.targetRefs`
/// order, at most [`MAX_TARGET_REFS`] as the schema allows), each with its `Accepted`
/// condition. `all` is every ServicePolicy (with `policy` among them): the rivals it may lose
/// to. `observedGeneration` is the policy's `metadata.generation`; `lastTransitionTime` is kept
/// from the current status when the condition's status does not change, else `now`.
pub fn desired_status<'a>(
    policy: &ServicePolicy,
    all: impl IntoIterator<Item = &'a ServicePolicy> + Clone,
    services: &ServiceIndex<'_>,
    class: &ClassConfig,
    now: Timestamp,
) -> ServicePolicyStatus {
    let targets = policy
        .spec
        .target_refs
        .iter()
        .take(MAX_TARGET_REFS)
        .map(|r| {
            let (accepted, why, message) = judge(policy, r, all.clone(), services, class);
            let status = if accepted { "True" } else { "False" };
            let previous = policy
                .status
                .as_ref()
                .and_then(|s| s.targets.iter().find(|t| &t.target_ref == r))
                .and_then(|t| t.conditions.iter().find(|c| c.type_ == condition::ACCEPTED));
            TargetStatus {
                target_ref: r.clone(),
                conditions: vec![Condition {
                    type_: condition::ACCEPTED.into(),
                    status: status.into(),
                    reason: why.into(),
                    message,
                    observed_generation: policy.metadata.generation,
                    last_transition_time: previous
                        .filter(|c| c.status == status)
                        .map(|c| c.last_transition_time.clone())
                        .unwrap_or(Time(now)),
                }],
            }
        })
        .collect();
    ServicePolicyStatus { targets }
}

/// Whether the policy's status already says what `want` says (so nothing is written).
pub fn status_is_current(policy: &ServicePolicy, want: &ServicePolicyStatus) -> bool {
    policy.status.as_ref() == Some(want)
}

/// `namespace/name` of a policy, as messages name it.
pub fn policy_key(p: &ServicePolicy) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or(""),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

/// (accepted, reason, message) for one target reference.
fn judge<'a>(
    policy: &ServicePolicy,
    r: &PolicyTargetRef,
    all: impl IntoIterator<Item = &'a ServicePolicy> + Clone,
    services: &ServiceIndex<'_>,
    class: &ClassConfig,
) -> (bool, &'static str, String) {
    let ns = policy.metadata.namespace.as_deref().unwrap_or("");
    let svc_key = format!("{ns}/{}", r.name);
    if r.kind != "Service" || !r.group.is_empty() {
        return (
            false,
            reason::INVALID,
            format!(
                "targetRefs: kind {:?} in group {:?} is not a Service (kind: Service, group: \"\")",
                r.kind, r.group
            ),
        );
    }
    let Some(svc) = services.get(ns, &r.name) else {
        return (
            false,
            reason::TARGET_NOT_FOUND,
            format!("Service {svc_key} not found"),
        );
    };
    if !is_ours(svc, class) {
        return (false, reason::INVALID, not_ours(svc, &svc_key, class));
    }
    let ports: Vec<&ServicePort> = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .collect();
    let section = r.section_name.as_deref().filter(|s| !s.is_empty());
    let reached: Vec<&ServicePort> = match section {
        None => ports,
        Some(s) => ports
            .into_iter()
            .filter(|p| p.name.as_deref() == Some(s))
            .collect(),
    };
    if let Some(s) = section
        && reached.is_empty()
    {
        return (
            false,
            reason::TARGET_NOT_FOUND,
            format!("Service {svc_key} has no port named {s:?} (sectionName)"),
        );
    }
    if let Err(e) = policy_check::check(&policy.spec) {
        return (
            false,
            reason::INVALID,
            format!("{e}; the nodes do not apply this policy"),
        );
    }
    let me = policy_key(policy);
    // Ports of the reference that another policy wins, grouped by the winner.
    let mut lost: BTreeMap<String, (Vec<String>, &'static str)> = BTreeMap::new();
    let mut won = 0;
    for port in &reached {
        let name = port.name.as_deref();
        // None only when `all` lacks the policy itself: then no rival names the port either.
        let Some(winner) = attached_policy(all.clone(), ns, &r.name, name) else {
            won += 1;
            continue;
        };
        if policy_key(winner) == me {
            won += 1;
            continue;
        }
        let why = if specificity(winner, ns, &r.name, name) > specificity(policy, ns, &r.name, name)
        {
            "it names the port by sectionName"
        } else if winner.metadata.creation_timestamp == policy.metadata.creation_timestamp {
            "it is as old and first by name"
        } else {
            "it is older"
        };
        let entry = lost
            .entry(policy_key(winner))
            .or_insert_with(|| (Vec::new(), why));
        entry.0.push(port_label(port));
    }
    let losses = lost
        .iter()
        .map(|(winner, (ports, why))| {
            format!(
                "ServicePolicy {winner} applies to {} {} instead ({why})",
                if ports.len() == 1 { "port" } else { "ports" },
                ports.join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    if won == 0 && !reached.is_empty() {
        (
            false,
            reason::CONFLICTED,
            format!("Service {svc_key}: {losses}"),
        )
    } else if lost.is_empty() {
        (
            true,
            reason::ACCEPTED,
            format!("applies to Service {svc_key}"),
        )
    } else {
        (
            true,
            reason::ACCEPTED,
            format!("applies to Service {svc_key}, except: {losses}"),
        )
    }
}

/// A port as messages name it: its name, else its number and protocol.
fn port_label(p: &ServicePort) -> String {
    match p.name.as_deref().filter(|n| !n.is_empty()) {
        Some(n) => n.to_string(),
        None => format!("{}/{}", p.port, p.protocol.as_deref().unwrap_or("TCP")),
    }
}

/// Why a Service is not one the nodes serve, naming the field.
fn not_ours(svc: &Service, key: &str, class: &ClassConfig) -> String {
    let spec = svc.spec.as_ref();
    let type_ = spec.and_then(|s| s.type_.as_deref()).unwrap_or("ClusterIP");
    if type_ != "LoadBalancer" {
        return format!("Service {key} is type {type_}, not LoadBalancer");
    }
    match spec.and_then(|s| s.load_balancer_class.as_deref()) {
        Some(c) => format!(
            "Service {key} has loadBalancerClass {c}, not {}: another implementation serves it",
            class.class
        ),
        None => format!(
            "Service {key} has no loadBalancerClass, and Rivora is not the default class \
             (--default-class): set loadBalancerClass {}",
            class.class
        ),
    }
}

#[cfg(test)]
mod tests;
