//! The chart `rivora` installs: deploy/chart as embedded at build time, or a chart directory
//! given on the command line (to try a changed chart without rebuilding).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/chart_files.rs"));
}

/// Chart.yaml's fields (Helm's chart metadata; the release record stores them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChartMeta {
    /// Chart API version (`v2`).
    pub api_version: String,
    /// Chart name (`rivora`).
    pub name: String,
    /// Chart version (SemVer), shown by `rivora status` and `helm list`.
    pub version: String,
    /// Version of the Rivora binaries the chart deploys (the default image tag).
    #[serde(default)]
    pub app_version: String,
    /// One-line description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// `application`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Project home page.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub home: String,
    /// Search keywords.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keywords: Vec<String>,
}

/// A chart's files by path relative to its root, with its parsed metadata and default values.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Every file (`Chart.yaml`, `values.yaml`, `templates/...`, `crds/...`).
    pub files: BTreeMap<String, String>,
    /// Chart.yaml.
    pub meta: ChartMeta,
    /// values.yaml, as JSON data.
    pub default_values: serde_json::Value,
    /// values.schema.json, when the chart has one.
    pub schema: Option<serde_json::Value>,
}

impl Chart {
    /// The chart built into this binary (deploy/chart of its source tree).
    pub fn embedded() -> Chart {
        let files = embedded::CHART_FILES
            .iter()
            .map(|(p, c)| (p.to_string(), c.to_string()))
            .collect();
        Chart::from_files(files).expect("the embedded chart is checked by the tests")
    }

    /// A chart directory on disk (the layout `helm` reads).
    pub fn from_dir(dir: &Path) -> Result<Chart> {
        let mut files = BTreeMap::new();
        read_dir(dir, dir, &mut files)?;
        Chart::from_files(files).with_context(|| format!("chart {}", dir.display()))
    }

    /// Parses the metadata, default values and schema out of a chart's files.
    pub fn from_files(files: BTreeMap<String, String>) -> Result<Chart> {
        let meta_text = files
            .get("Chart.yaml")
            .context("the chart has no Chart.yaml")?;
        let meta: ChartMeta = serde_norway::from_str(meta_text).context("Chart.yaml")?;
        if meta.api_version != "v2" {
            bail!("Chart.yaml: apiVersion {} is not v2", meta.api_version);
        }
        let default_values = match files.get("values.yaml") {
            Some(text) => crate::values::parse_yaml("values.yaml", text)?,
            None => serde_json::Value::Object(Default::default()),
        };
        let schema = files
            .get("values.schema.json")
            .map(|s| serde_json::from_str(s).context("values.schema.json"))
            .transpose()?;
        Ok(Chart {
            files,
            meta,
            default_values,
            schema,
        })
    }

    /// The CRD files (Helm's `crds/` directory: applied before everything else, never templated,
    /// never deleted by an upgrade).
    pub fn crd_files(&self) -> impl Iterator<Item = (&str, &str)> {
        self.files
            .iter()
            .filter(|(p, _)| p.starts_with("crds/") && is_yaml(p))
            .map(|(p, c)| (p.as_str(), c.as_str()))
    }

    /// The template files, helpers (`_*.tpl`) included.
    pub fn template_files(&self) -> impl Iterator<Item = (&str, &str)> {
        self.files
            .iter()
            .filter(|(p, _)| p.starts_with("templates/"))
            .map(|(p, c)| (p.as_str(), c.as_str()))
    }
}

fn is_yaml(path: &str) -> bool {
    path.ends_with(".yaml") || path.ends_with(".yml") || path.ends_with(".json")
}

fn read_dir(root: &Path, dir: &Path, files: &mut BTreeMap<String, String>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            read_dir(root, &path, files)?;
        } else {
            let rel = path
                .strip_prefix(root)
                .expect("under root")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            files.insert(rel, text);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_chart_is_deploy_chart() {
        let embedded = Chart::embedded();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/chart");
        let on_disk = Chart::from_dir(&dir).unwrap();
        assert_eq!(embedded.files, on_disk.files);
        assert_eq!(embedded.meta.name, "rivora");
        assert!(embedded.crd_files().count() >= 4);
        assert!(
            embedded
                .template_files()
                .any(|(p, _)| p == "templates/_helpers.tpl")
        );
    }
}
