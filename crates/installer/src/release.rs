//! The record of what was installed, kept in the cluster in helm's own format (a Secret
//! `sh.helm.release.v1.<name>.v<revision>` of type `helm.sh/release.v1` holding the release as
//! base64 of gzipped JSON), so `rivora upgrade` and `rivora uninstall` know what they manage,
//! and `helm list` / `helm get values` see a Rivora installed by `rivora`.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chart::{Chart, ChartMeta};

/// Label selecting helm release Secrets (helm's own).
pub const OWNER_LABEL: &str = "owner";
/// The Secret type helm stores releases under.
pub const SECRET_TYPE: &str = "helm.sh/release.v1";

/// A release's lifecycle state, as helm names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReleaseStatus {
    /// The current revision.
    Deployed,
    /// An older revision an upgrade replaced.
    Superseded,
    /// An apply that did not complete (the objects may be partly updated).
    Failed,
    /// Being installed.
    PendingInstall,
    /// Being upgraded.
    PendingUpgrade,
    /// Anything else helm writes (uninstalling, ...).
    #[serde(other)]
    Unknown,
}

impl ReleaseStatus {
    /// The label value helm uses (`deployed`, `superseded`, ...).
    pub fn label(self) -> &'static str {
        match self {
            ReleaseStatus::Deployed => "deployed",
            ReleaseStatus::Superseded => "superseded",
            ReleaseStatus::Failed => "failed",
            ReleaseStatus::PendingInstall => "pending-install",
            ReleaseStatus::PendingUpgrade => "pending-upgrade",
            ReleaseStatus::Unknown => "unknown",
        }
    }
}

/// `info` of a helm release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Info {
    /// RFC 3339.
    pub first_deployed: String,
    /// RFC 3339.
    pub last_deployed: String,
    /// RFC 3339, or "" while not deleted.
    #[serde(default)]
    pub deleted: String,
    /// What the last operation did ("Install complete", "Upgrade complete").
    #[serde(default)]
    pub description: String,
    /// Lifecycle state.
    pub status: ReleaseStatus,
    /// Rendered NOTES.txt.
    #[serde(default)]
    pub notes: String,
}

/// A named file of the chart, base64 encoded as helm stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct File {
    /// Path relative to the chart.
    pub name: String,
    /// Contents, base64.
    pub data: String,
}

/// The chart as stored in a release (helm's chart.Chart JSON form).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredChart {
    /// Chart.yaml.
    pub metadata: ChartMeta,
    /// `templates/` files.
    #[serde(default)]
    pub templates: Vec<File>,
    /// values.yaml as data.
    #[serde(default)]
    pub values: Value,
    /// values.schema.json, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Every other file (`crds/` among them).
    #[serde(default)]
    pub files: Vec<File>,
}

/// One revision of a release (helm's release.Release JSON form).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Release {
    /// Release name.
    pub name: String,
    /// Lifecycle and timestamps.
    pub info: Info,
    /// The chart it was rendered from.
    pub chart: StoredChart,
    /// The values the user supplied (what an upgrade reuses), not the merged ones.
    #[serde(default)]
    pub config: Value,
    /// The rendered templated objects (CRDs are not part of it: helm never manages them).
    pub manifest: String,
    /// Helm hooks (the chart has none).
    #[serde(default)]
    pub hooks: Vec<Value>,
    /// Revision, from 1.
    pub version: u32,
    /// Namespace.
    pub namespace: String,
}

impl Release {
    /// A new revision of `chart` rendered with `config` into `manifest`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: &str,
        namespace: &str,
        version: u32,
        chart: &Chart,
        config: Value,
        manifest: String,
        notes: String,
        first_deployed: Option<String>,
        description: &str,
    ) -> Release {
        let now = now_rfc3339();
        let mut templates = Vec::new();
        let mut files = Vec::new();
        for (path, text) in &chart.files {
            let f = File {
                name: path.clone(),
                data: B64.encode(text),
            };
            if path.starts_with("templates/") {
                templates.push(f);
            } else if !matches!(
                path.as_str(),
                "Chart.yaml" | "values.yaml" | "values.schema.json"
            ) {
                files.push(f);
            }
        }
        Release {
            name: name.to_string(),
            info: Info {
                first_deployed: first_deployed.unwrap_or_else(|| now.clone()),
                last_deployed: now,
                deleted: String::new(),
                description: description.to_string(),
                status: ReleaseStatus::Deployed,
                notes,
            },
            chart: StoredChart {
                metadata: chart.meta.clone(),
                templates,
                values: chart.default_values.clone(),
                schema: chart.files.get("values.schema.json").map(|s| B64.encode(s)),
                files,
            },
            config,
            manifest,
            hooks: Vec::new(),
            version,
            namespace: namespace.to_string(),
        }
    }

    /// The Secret's name: `sh.helm.release.v1.<name>.v<version>`.
    pub fn secret_name(&self) -> String {
        secret_name(&self.name, self.version)
    }

    /// The release as helm's storage Secret.
    pub fn to_secret(&self) -> Result<Secret> {
        let json = serde_json::to_vec(self)?;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&json)?;
        let encoded = B64.encode(gz.finish()?);
        let labels = BTreeMap::from([
            ("name".to_string(), self.name.clone()),
            (OWNER_LABEL.to_string(), "helm".to_string()),
            ("status".to_string(), self.info.status.label().to_string()),
            ("version".to_string(), self.version.to_string()),
        ]);
        Ok(Secret {
            metadata: ObjectMeta {
                name: Some(self.secret_name()),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels),
                ..Default::default()
            },
            type_: Some(SECRET_TYPE.to_string()),
            data: Some(BTreeMap::from([(
                "release".to_string(),
                ByteString(encoded.into_bytes()),
            )])),
            ..Default::default()
        })
    }

    /// Reads a release back from its Secret (gzipped or, as helm also accepts, plain JSON).
    pub fn from_secret(secret: &Secret) -> Result<Release> {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let raw = secret
            .data
            .as_ref()
            .and_then(|d| d.get("release"))
            .with_context(|| format!("Secret {name} has no release data"))?;
        let decoded = B64
            .decode(&raw.0)
            .with_context(|| format!("Secret {name}: release is not base64"))?;
        let json = if decoded.starts_with(&[0x1f, 0x8b]) {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(decoded.as_slice())
                .read_to_end(&mut out)
                .with_context(|| format!("Secret {name}: release is not gzip"))?;
            out
        } else {
            decoded
        };
        serde_json::from_slice(&json).with_context(|| format!("Secret {name}: not a helm release"))
    }

    /// The chart files as stored, for rendering an old revision again.
    pub fn chart_files(&self) -> Result<BTreeMap<String, String>> {
        let mut files = BTreeMap::new();
        for f in self.chart.templates.iter().chain(&self.chart.files) {
            let bytes = B64
                .decode(&f.data)
                .with_context(|| format!("{}: not base64", f.name))?;
            files.insert(f.name.clone(), String::from_utf8(bytes)?);
        }
        Ok(files)
    }
}

/// `sh.helm.release.v1.<name>.v<version>`.
pub fn secret_name(name: &str, version: u32) -> String {
    format!("sh.helm.release.v1.{name}.v{version}")
}

/// The label selector of a release's Secrets.
pub fn selector(name: &str) -> String {
    format!("{OWNER_LABEL}=helm,name={name}")
}

/// Picks the newest revision among a release's records.
pub fn latest(releases: Vec<Release>) -> Option<Release> {
    releases.into_iter().max_by_key(|r| r.version)
}

/// A release name must be a DNS label of at most 53 characters (helm's rule: the Secret name
/// and labels derived from it must stay valid).
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 53
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !ok {
        bail!(
            "--release {name:?}: must be 1-53 lower-case letters, digits and '-', starting and ending with a letter or digit"
        );
    }
    Ok(())
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_release_survives_its_secret() {
        let chart = Chart::embedded();
        let r = Release::new(
            "rivora",
            "lb",
            3,
            &chart,
            json!({"rivorad": {"announce": "bgp"}}),
            "---\n# Source: x\n".into(),
            "notes".into(),
            Some("2026-01-01T00:00:00Z".into()),
            "Upgrade complete",
        );
        let s = r.to_secret().unwrap();
        assert_eq!(
            s.metadata.name.as_deref(),
            Some("sh.helm.release.v1.rivora.v3")
        );
        assert_eq!(s.type_.as_deref(), Some(SECRET_TYPE));
        let labels = s.metadata.labels.clone().unwrap();
        assert_eq!(labels["status"], "deployed");
        assert_eq!(labels["version"], "3");
        let back = Release::from_secret(&s).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.chart_files().unwrap().len(), chart.files.len() - 3);
        assert_eq!(back.info.first_deployed, "2026-01-01T00:00:00Z");
    }

    #[test]
    fn uncompressed_records_are_read_too() {
        let chart = Chart::embedded();
        let r = Release::new(
            "a",
            "b",
            1,
            &chart,
            json!({}),
            String::new(),
            String::new(),
            None,
            "Install complete",
        );
        let mut s = r.to_secret().unwrap();
        let plain = B64.encode(serde_json::to_vec(&r).unwrap());
        s.data = Some(BTreeMap::from([(
            "release".into(),
            ByteString(plain.into_bytes()),
        )]));
        assert_eq!(Release::from_secret(&s).unwrap(), r);
    }

    #[test]
    fn release_names_are_dns_labels() {
        assert!(check_name("rivora").is_ok());
        for bad in ["", "Rivora", "-a", "a_b", &"a".repeat(54)] {
            let e = check_name(bad).unwrap_err();
            assert!(e.to_string().contains("--release"), "{e}");
        }
    }
}
