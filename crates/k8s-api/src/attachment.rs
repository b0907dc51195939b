//! Which [`ServicePolicy`] applies to which Service port (Gateway API GEP-713 style attachment).
//!
//! Why it lives here: rivora-controller reports per target whether a policy is Accepted or
//! Conflicted, and every rivorad node applies the winning policy's settings. Both read these
//! functions, so a node never applies a policy the controller reports as Conflicted.
//!
//! Rules: a policy targets a Service through `targetRefs` (kind `Service`, group `""`, in the
//! policy's own namespace). A reference with `sectionName` applies to the Service port of that
//! name only, and beats a reference to the whole Service for that port. Among policies of equal
//! specificity the oldest (creationTimestamp, then name) wins; the others are conflicted.

use crate::ServicePolicy;

/// How precisely a policy names a Service port; the more specific one wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Specificity {
    /// A targetRef naming the whole Service.
    Service,
    /// A targetRef whose `sectionName` is the port's name.
    Section,
}

/// How `policy` names the port `port_name` of Service `namespace/service`, if at all.
/// `port_name` is the ServicePort's name (`None` or `""` for an unnamed port, which only a
/// whole-Service reference reaches).
pub fn specificity(
    policy: &ServicePolicy,
    namespace: &str,
    service: &str,
    port_name: Option<&str>,
) -> Option<Specificity> {
    if policy.metadata.namespace.as_deref() != Some(namespace) {
        return None;
    }
    let port_name = port_name.filter(|n| !n.is_empty());
    policy
        .spec
        .target_refs
        .iter()
        .filter(|r| r.kind == "Service" && r.group.is_empty() && r.name == service)
        .filter_map(|r| match r.section_name.as_deref() {
            None | Some("") => Some(Specificity::Service),
            Some(s) if Some(s) == port_name => Some(Specificity::Section),
            Some(_) => None,
        })
        .max()
}

/// The order in which equally specific policies win: oldest first, then by name (a policy
/// without a creationTimestamp, which the API server always sets, sorts last).
fn age_key(policy: &ServicePolicy) -> (bool, Option<&k8s_openapi::jiff::Timestamp>, &str) {
    let ts = policy.metadata.creation_timestamp.as_ref().map(|t| &t.0);
    (
        ts.is_none(),
        ts,
        policy.metadata.name.as_deref().unwrap_or(""),
    )
}

/// The policy whose settings apply to the port `port_name` of Service `namespace/service`:
/// the most specific, then the oldest. `None` when no policy targets it.
pub fn attached_policy<'a>(
    policies: impl IntoIterator<Item = &'a ServicePolicy>,
    namespace: &str,
    service: &str,
    port_name: Option<&str>,
) -> Option<&'a ServicePolicy> {
    policies
        .into_iter()
        .filter_map(|p| specificity(p, namespace, service, port_name).map(|s| (s, p)))
        .min_by(|(sa, a), (sb, b)| sb.cmp(sa).then_with(|| age_key(a).cmp(&age_key(b))))
        .map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(name: &str, created: &str, refs: serde_json::Value) -> ServicePolicy {
        serde_json::from_value(json!({
            "apiVersion": "rivora.dev/v1alpha1", "kind": "ServicePolicy",
            "metadata": {"namespace": "ns", "name": name, "creationTimestamp": created},
            "spec": {"targetRefs": refs}
        }))
        .unwrap()
    }

    fn svc_ref(name: &str) -> serde_json::Value {
        json!({"group": "", "kind": "Service", "name": name})
    }

    fn section_ref(name: &str, section: &str) -> serde_json::Value {
        json!({"group": "", "kind": "Service", "name": name, "sectionName": section})
    }

    fn name(p: Option<&ServicePolicy>) -> Option<&str> {
        p.and_then(|p| p.metadata.name.as_deref())
    }

    #[test]
    fn section_name_beats_whole_service_and_the_oldest_wins_among_equals() {
        let old_whole = policy("a-whole", "2026-01-01T00:00:00Z", json!([svc_ref("web")]));
        let new_whole = policy("b-whole", "2026-02-01T00:00:00Z", json!([svc_ref("web")]));
        let new_section = policy(
            "c-section",
            "2026-03-01T00:00:00Z",
            json!([section_ref("web", "https")]),
        );
        let all = [new_section.clone(), new_whole.clone(), old_whole.clone()];
        assert_eq!(
            name(attached_policy(&all, "ns", "web", Some("https"))),
            Some("c-section")
        );
        assert_eq!(
            name(attached_policy(&all, "ns", "web", Some("http"))),
            Some("a-whole")
        );
        // An unnamed port is reached by whole-Service references only.
        assert_eq!(
            name(attached_policy(&all, "ns", "web", None)),
            Some("a-whole")
        );
        assert_eq!(
            name(attached_policy(&all, "ns", "web", Some(""))),
            Some("a-whole")
        );
        // Other Service, other namespace: nothing.
        assert_eq!(name(attached_policy(&all, "ns", "db", Some("https"))), None);
        assert_eq!(name(attached_policy(&all, "other", "web", None)), None);
    }

    #[test]
    fn equal_ages_fall_back_to_the_name() {
        let b = policy("b", "2026-01-01T00:00:00Z", json!([svc_ref("web")]));
        let a = policy("a", "2026-01-01T00:00:00Z", json!([svc_ref("web")]));
        assert_eq!(
            name(attached_policy([&b, &a], "ns", "web", None)),
            Some("a")
        );
        assert_eq!(
            name(attached_policy([&a, &b], "ns", "web", None)),
            Some("a")
        );
    }

    #[test]
    fn only_core_services_are_targets() {
        let wrong_kind = policy(
            "p",
            "2026-01-01T00:00:00Z",
            json!([{"group": "", "kind": "Gateway", "name": "web"}]),
        );
        let wrong_group = policy(
            "q",
            "2026-01-01T00:00:00Z",
            json!([{"group": "x.io", "kind": "Service", "name": "web"}]),
        );
        assert_eq!(specificity(&wrong_kind, "ns", "web", None), None);
        assert_eq!(specificity(&wrong_group, "ns", "web", None), None);
        let both = policy(
            "r",
            "2026-01-01T00:00:00Z",
            json!([svc_ref("web"), section_ref("web", "dns")]),
        );
        assert_eq!(
            specificity(&both, "ns", "web", Some("dns")),
            Some(Specificity::Section)
        );
        assert_eq!(
            specificity(&both, "ns", "web", Some("http")),
            Some(Specificity::Service)
        );
    }
}
