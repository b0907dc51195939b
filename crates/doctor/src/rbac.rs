//! The permissions rivorad needs, read from the RBAC file the project ships
//! (deploy/rbac/rivorad.yaml, embedded at build time) so the doctor asks the
//! API server about exactly what the deployed role grants.

use crate::facts::Permission;

/// deploy/rbac/rivorad.yaml as shipped.
pub const RIVORAD_RBAC: &str = include_str!("../../../deploy/rbac/rivorad.yaml");

/// Every (resource, verb) the ClusterRole and Role of `yaml` grant; the
/// Role's in `namespace` (rivorad's `--namespace`, rivora-system by
/// default), the ClusterRole's cluster-wide.
pub fn permissions(yaml: &str, namespace: &str) -> Result<Vec<Permission>, String> {
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(yaml) {
        let v: serde_json::Value =
            serde::Deserialize::deserialize(doc).map_err(|e| format!("RBAC file: {e}"))?;
        let ns = match v["kind"].as_str() {
            Some("ClusterRole") => None,
            Some("Role") => Some(namespace.to_string()),
            other => return Err(format!("RBAC file: unexpected kind {other:?}")),
        };
        let strings = |x: &serde_json::Value| -> Vec<String> {
            x.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        };
        for rule in v["rules"].as_array().into_iter().flatten() {
            for group in strings(&rule["apiGroups"]) {
                for res in strings(&rule["resources"]) {
                    let (resource, subresource) = match res.split_once('/') {
                        Some((r, s)) => (r.to_string(), Some(s.to_string())),
                        None => (res.clone(), None),
                    };
                    for verb in strings(&rule["verbs"]) {
                        out.push(Permission {
                            namespace: ns.clone(),
                            group: group.clone(),
                            resource: resource.clone(),
                            subresource: subresource.clone(),
                            verb,
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_gives_every_verb_of_both_roles() {
        let p = permissions(RIVORAD_RBAC, "rv-ns").unwrap();
        let has = |ns: Option<&str>, group: &str, res: &str, sub: Option<&str>, verb: &str| {
            p.iter().any(|x| {
                x.namespace.as_deref() == ns
                    && x.group == group
                    && x.resource == res
                    && x.subresource.as_deref() == sub
                    && x.verb == verb
            })
        };
        assert!(has(None, "", "services", None, "watch"));
        assert!(has(
            None,
            "discovery.k8s.io",
            "endpointslices",
            None,
            "list"
        ));
        assert!(has(
            None,
            "rivora.dev",
            "rivoranodes",
            Some("status"),
            "patch"
        ));
        assert!(has(None, "events.k8s.io", "events", None, "create"));
        assert!(has(Some("rv-ns"), "", "secrets", None, "watch"));
        assert!(has(
            Some("rv-ns"),
            "coordination.k8s.io",
            "leases",
            None,
            "update"
        ));
        assert!(
            !has(Some("rv-ns"), "", "secrets", None, "get"),
            "deliberately absent"
        );
        assert!(!has(None, "", "services", Some("status"), "patch"));
        // Every rule's verbs x resources x groups, nothing twice.
        let mut sorted = p.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), p.len());
        // 40 from the ClusterRole, 5 from the Role.
        assert!(has(
            None,
            "meridio-2.nordix.org",
            "l34routes",
            None,
            "watch"
        ));
        assert!(has(
            None,
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            None,
            "watch"
        ));
        assert_eq!(p.len(), 45, "{p:#?}");
        assert_eq!(
            p.iter()
                .find(|x| x.subresource.is_some())
                .unwrap()
                .to_string(),
            "patch rivoranodes.rivora.dev/status (cluster-wide)"
        );
        assert_eq!(
            p.iter()
                .find(|x| x.resource == "leases")
                .unwrap()
                .to_string(),
            "get leases.coordination.k8s.io in rv-ns"
        );
    }

    #[test]
    fn other_kinds_are_refused() {
        assert!(permissions("kind: ServiceAccount\n", "x").is_err());
    }
}
