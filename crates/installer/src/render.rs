//! Renders the chart to Kubernetes objects as `helm template` does: the same inputs (`.Values`,
//! `.Release`, `.Chart`, `.Files`, `.Template`), the same split into documents, and the same
//! install order, so a cluster installed by `rivora` and one by `helm` hold the same objects.

use std::collections::BTreeMap;

use anyhow::{Context, Result, anyhow, bail};
use rivora_gotmpl::{Templates, Value as T};
use serde_json::{Value, json};

use crate::chart::Chart;

/// Who the release is and whether it is a first install (`.Release`).
#[derive(Debug, Clone)]
pub struct ReleaseInfo {
    /// Release name (`rivora` by default).
    pub name: String,
    /// Namespace everything namespaced goes to.
    pub namespace: String,
    /// Revision being rendered (1 for an install).
    pub revision: u32,
    /// True for an install, false for an upgrade.
    pub is_install: bool,
}

/// One object of the rendered chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// The file it came from, as helm's `# Source:` comment names it (`rivora/templates/x.yaml`).
    pub source: String,
    /// The object.
    pub object: Value,
}

impl Document {
    /// `apiVersion`.
    pub fn api_version(&self) -> &str {
        self.object["apiVersion"].as_str().unwrap_or_default()
    }
    /// `kind`.
    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or_default()
    }
    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }
    /// `metadata.namespace` (empty for cluster-scoped objects).
    pub fn namespace(&self) -> &str {
        self.object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
    }
    /// Whether the object asks to outlive its release (`helm.sh/resource-policy: keep`, as
    /// Helm honours it): uninstall and upgrade leave it in place. The chart's optional
    /// Meridio-2 CRDs carry it, since deleting a CRD deletes every object of its kind.
    pub fn kept(&self) -> bool {
        self.object["metadata"]["annotations"]["helm.sh/resource-policy"].as_str() == Some("keep")
    }

    /// `Kind namespace/name`, for messages and progress lines.
    pub fn describe(&self) -> String {
        match self.namespace() {
            "" => format!("{} {}", self.kind(), self.name()),
            ns => format!("{} {ns}/{}", self.kind(), self.name()),
        }
    }
}

/// The rendered chart: CRDs (applied first, never templated) and the templated objects in
/// helm's install order, plus the rendered NOTES.txt.
#[derive(Debug, Clone, Default)]
pub struct Manifest {
    /// The chart's `crds/` objects.
    pub crds: Vec<Document>,
    /// Everything else, in install order (reverse it to uninstall).
    pub objects: Vec<Document>,
    /// NOTES.txt as rendered (shown after an install).
    pub notes: String,
}

impl Manifest {
    /// The templated objects as helm's manifest text (`---` + `# Source:` + YAML per object),
    /// which `--dry-run` prints and the release record stores; every string a YAML 1.1 reader
    /// (kubectl, helm) would retype is quoted ([`crate::yaml::to_string`]).
    pub fn objects_yaml(&self) -> String {
        to_yaml_stream(&self.objects)
    }

    /// The CRDs in the same form.
    pub fn crds_yaml(&self) -> String {
        to_yaml_stream(&self.crds)
    }
}

fn to_yaml_stream(docs: &[Document]) -> String {
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n# Source: ");
        out.push_str(&d.source);
        out.push('\n');
        // Quoted for YAML 1.1 readers: kubectl applies this text, helm reads the record.
        out.push_str(&crate::yaml::to_string(&d.object));
    }
    out
}

/// Renders `chart` with `values` (already merged and validated) for `release`.
pub fn render(chart: &Chart, values: &Value, release: &ReleaseInfo) -> Result<Manifest> {
    let mut templates = Templates::new();
    for (path, text) in chart.template_files() {
        templates.add(path, text).map_err(|e| anyhow!("{e}"))?;
    }
    let files: BTreeMap<String, String> = chart
        .files
        .iter()
        .filter(|(p, _)| {
            !p.starts_with("templates/")
                && !matches!(
                    p.as_str(),
                    "Chart.yaml" | "values.yaml" | "values.schema.json"
                )
        })
        .map(|(p, c)| (p.clone(), c.clone()))
        .collect();
    let meta = &chart.meta;
    let base = json!({
        "Values": values,
        "Release": {
            "Name": release.name,
            "Namespace": release.namespace,
            "Revision": release.revision,
            "IsInstall": release.is_install,
            "IsUpgrade": !release.is_install,
            "Service": "Helm",
        },
        "Chart": {
            "APIVersion": meta.api_version,
            "Name": meta.name,
            "Version": meta.version,
            "AppVersion": meta.app_version,
            "Description": meta.description,
            "Type": meta.kind,
            "Home": meta.home,
            "Keywords": meta.keywords,
        },
        "Capabilities": {
            "KubeVersion": {"Version": "v1.35.0", "Major": "1", "Minor": "35"},
        },
    });
    let mut manifest = Manifest::default();
    for (path, _) in chart.template_files() {
        let file_name = path.rsplit('/').next().unwrap_or(path);
        if file_name.starts_with('_') {
            continue;
        }
        let mut data = base.clone();
        data["Template"] = json!({"Name": format!("{}/{path}", meta.name), "BasePath": format!("{}/templates", meta.name)});
        let T::Map(mut dot) = T::from_json_helm(&data) else {
            unreachable!("a JSON object")
        };
        dot.insert("Files".into(), T::Files(files.clone()));
        let text = templates
            .render(path, &T::Map(dot))
            .map_err(|e| anyhow!("{e}"))?;
        if file_name == "NOTES.txt" {
            manifest.notes = text;
            continue;
        }
        if !(file_name.ends_with(".yaml") || file_name.ends_with(".yml")) {
            continue;
        }
        let source = format!("{}/{path}", meta.name);
        manifest
            .objects
            .extend(split_documents(&source, &text).with_context(|| format!("rendering {path}"))?);
    }
    manifest.objects.sort_by_key(|d| install_rank(d.kind()));
    for (path, text) in chart.crd_files() {
        manifest
            .crds
            .extend(split_documents(&format!("{}/{path}", meta.name), text)?);
    }
    check_unique(manifest.crds.iter().chain(&manifest.objects))?;
    Ok(manifest)
}

/// Splits a YAML stream into its objects; documents holding only comments or whitespace are
/// dropped (as helm drops them), anything else must be an object with apiVersion, kind and name.
pub fn split_documents(source: &str, text: &str) -> Result<Vec<Document>> {
    let mut docs = Vec::new();
    for (i, raw) in split_yaml_stream(text).into_iter().enumerate() {
        let meaningful = raw
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        if !meaningful {
            continue;
        }
        // As kubectl and helm read a manifest: YAML 1.1 scalars.
        let object: Value = crate::yaml::from_str(&raw)
            .with_context(|| format!("{source}: document {} is not valid YAML", i + 1))?;
        if object.is_null() {
            continue;
        }
        let doc = Document {
            source: source.to_string(),
            object,
        };
        if doc.api_version().is_empty() || doc.kind().is_empty() || doc.name().is_empty() {
            bail!(
                "{source}: document {} lacks apiVersion, kind or metadata.name",
                i + 1
            );
        }
        docs.push(doc);
    }
    Ok(docs)
}

/// Splits on lines that are exactly `---` (optionally followed by a comment), YAML's document
/// separator.
pub fn split_yaml_stream(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        let t = line.trim_end();
        if t == "---" || t.starts_with("--- ") {
            docs.push(String::new());
            continue;
        }
        let cur = docs.last_mut().expect("one document at least");
        cur.push_str(line);
        cur.push('\n');
    }
    docs
}

fn check_unique<'a>(docs: impl Iterator<Item = &'a Document>) -> Result<()> {
    let mut seen = BTreeMap::new();
    for d in docs {
        let key = (d.api_version().to_string(), d.describe());
        if let Some(first) = seen.insert(key, d.source.clone()) {
            bail!(
                "{} is rendered twice ({first} and {})",
                d.describe(),
                d.source
            );
        }
    }
    Ok(())
}

/// Helm's install order by kind (releaseutil.InstallOrder): what others depend on first, so a
/// DaemonSet never starts before its ServiceAccount and RBAC exist. Unknown kinds go last.
pub fn install_rank(kind: &str) -> usize {
    const ORDER: &[&str] = &[
        "PriorityClass",
        "Namespace",
        "NetworkPolicy",
        "ResourceQuota",
        "LimitRange",
        "PodSecurityPolicy",
        "PodDisruptionBudget",
        "ServiceAccount",
        "Secret",
        "SecretList",
        "ConfigMap",
        "StorageClass",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleList",
        "ClusterRoleBinding",
        "ClusterRoleBindingList",
        "Role",
        "RoleList",
        "RoleBinding",
        "RoleBindingList",
        "Service",
        "DaemonSet",
        "Pod",
        "ReplicationController",
        "ReplicaSet",
        "Deployment",
        "HorizontalPodAutoscaler",
        "StatefulSet",
        "Job",
        "CronJob",
        "IngressClass",
        "Ingress",
        "APIService",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ];
    ORDER.iter().position(|k| *k == kind).unwrap_or(ORDER.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release() -> ReleaseInfo {
        ReleaseInfo {
            name: "rivora".into(),
            namespace: "rivora-system".into(),
            revision: 1,
            is_install: true,
        }
    }

    #[test]
    fn the_meridio_crds_ask_to_be_kept_and_other_objects_do_not() {
        let chart = Chart::embedded();
        let mut values = chart.default_values.clone();
        values["meridio"]["installCRDs"] = serde_json::json!(true);
        let m = render(&chart, &values, &release()).unwrap();
        let crds: Vec<&Document> = m
            .objects
            .iter()
            .filter(|d| d.kind() == "CustomResourceDefinition")
            .collect();
        assert_eq!(crds.len(), 3, "Meridio-2's three CRDs");
        assert!(
            crds.iter().all(|d| d.kept()),
            "deleting them deletes every object of theirs"
        );
        assert!(
            m.objects
                .iter()
                .filter(|d| d.kind() != "CustomResourceDefinition")
                .all(|d| !d.kept())
        );
    }

    #[test]
    fn the_default_chart_renders_every_component_in_install_order() {
        let chart = Chart::embedded();
        let m = render(&chart, &chart.default_values, &release()).unwrap();
        let kinds: Vec<&str> = m.objects.iter().map(|d| d.kind()).collect();
        assert_eq!(
            kinds,
            [
                "PodDisruptionBudget",
                "ServiceAccount",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRole",
                "ClusterRoleBinding",
                "ClusterRoleBinding",
                "Role",
                "Role",
                "RoleBinding",
                "RoleBinding",
                "DaemonSet",
                "Deployment",
            ]
        );
        assert_eq!(m.crds.len(), 4);
        assert!(
            m.crds
                .iter()
                .all(|d| d.kind() == "CustomResourceDefinition")
        );
        let ds = m.objects.iter().find(|d| d.kind() == "DaemonSet").unwrap();
        assert_eq!(ds.namespace(), "rivora-system");
        let args = &ds.object["spec"]["template"]["spec"]["containers"][0]["args"];
        assert!(
            args.as_array()
                .unwrap()
                .contains(&json!("--interface=eth0"))
        );
        assert!(m.notes.contains("rivora-system"));
    }

    #[test]
    fn a_missing_required_value_is_refused_naming_it() {
        let chart = Chart::embedded();
        let mut values = chart.default_values.clone();
        values["rivorad"]["interface"] = json!("");
        let e = render(&chart, &values, &release()).unwrap_err();
        assert!(
            format!("{e:#}").contains("rivorad.interface must name"),
            "{e:#}"
        );
    }

    #[test]
    fn streams_split_on_separator_lines_only() {
        let docs = split_documents(
            "t",
            "# c\n---\napiVersion: v1\nkind: A\nmetadata: {name: a}\n---\n# only a comment\n--- # x\napiVersion: v1\nkind: B\nmetadata:\n  name: 'b---'\n",
        )
        .unwrap();
        let names: Vec<&str> = docs.iter().map(|d| d.name()).collect();
        assert_eq!(names, ["a", "b---"]);
        let e = split_documents("t.yaml", "kind: A\n").unwrap_err();
        assert!(
            format!("{e:#}").contains("t.yaml: document 1 lacks"),
            "{e:#}"
        );
    }
}
