//! Binding a shipped RBAC file (deploy/rbac/*.yaml) to a ServiceAccount of a test.
//!
//! Why here: every test that runs a component "as deployed" (rivorad, rivora-controller) must
//! bind exactly the roles the chart ships and nothing else, so the test proves they are
//! enough; one function keeps the binding rules (ClusterRoles cluster-wide, Roles in the
//! ServiceAccount's namespace, binding names unique per test) in one place.

use anyhow::{Context, Result, bail};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::FIELD_MANAGER;

/// Applies every ClusterRole and Role of `yaml` and binds each to ServiceAccount
/// `sa_ns/sa_name`: ClusterRoles by a ClusterRoleBinding named `<role>-<sa_ns>`, Roles (put into
/// `sa_ns`) by a RoleBinding there. Returns the role names. Anything else in the file is an
/// error: an RBAC file holds roles only.
pub async fn bind_rbac(
    admin: &Client,
    yaml: &str,
    sa_ns: &str,
    sa_name: &str,
) -> Result<Vec<String>> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let subject = json!([{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_ns}]);
    let mut names = Vec::new();
    for doc in serde_norway::Deserializer::from_str(yaml) {
        let v: serde_json::Value =
            serde::Deserialize::deserialize(doc).context("reading an RBAC document")?;
        let role_ref = |kind: &str, name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name});
        match v["kind"].as_str() {
            Some("ClusterRole") => {
                let cr: ClusterRole = serde_json::from_value(v)?;
                let name = cr.name_any();
                Api::<ClusterRole>::all(admin.clone())
                    .patch(&name, &pp, &Patch::Apply(&cr))
                    .await
                    .with_context(|| format!("applying ClusterRole {name}"))?;
                let binding = format!("{name}-{sa_ns}");
                let b: ClusterRoleBinding = serde_json::from_value(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": binding},
                    "roleRef": role_ref("ClusterRole", &name), "subjects": subject,
                }))?;
                Api::<ClusterRoleBinding>::all(admin.clone())
                    .patch(&binding, &pp, &Patch::Apply(&b))
                    .await
                    .with_context(|| format!("binding ClusterRole {name}"))?;
                names.push(name);
            }
            Some("Role") => {
                let mut role: Role = serde_json::from_value(v)?;
                role.metadata.namespace = Some(sa_ns.into());
                let name = role.name_any();
                Api::<Role>::namespaced(admin.clone(), sa_ns)
                    .patch(&name, &pp, &Patch::Apply(&role))
                    .await
                    .with_context(|| format!("applying Role {sa_ns}/{name}"))?;
                let b: RoleBinding = serde_json::from_value(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": name, "namespace": sa_ns},
                    "roleRef": role_ref("Role", &name), "subjects": subject,
                }))?;
                Api::<RoleBinding>::namespaced(admin.clone(), sa_ns)
                    .patch(&name, &pp, &Patch::Apply(&b))
                    .await
                    .with_context(|| format!("binding Role {sa_ns}/{name}"))?;
                names.push(name);
            }
            other => bail!("an RBAC file holds ClusterRoles and Roles only, not {other:?}"),
        }
    }
    Ok(names)
}
