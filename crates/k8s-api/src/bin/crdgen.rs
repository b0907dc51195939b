//! Writes Rivora's CRDs as YAML into a directory (default `deploy/chart/crds`), one file per CRD,
//! and Meridio-2's CRDs into the chart template beside it (`<dir>/../templates/meridio-crds.yaml`).
//!
//! Why a binary: regenerating must be one command after changing a type, and the tests
//! `committed_crds_match_the_types` and `committed_meridio_template_matches_the_types` tell when
//! someone forgot. Why Meridio-2's go to a template: Helm installs everything in `crds/`, and
//! those must be installed only when the chart value `meridio.installCRDs` asks for them.

use std::path::{Path, PathBuf};

use anyhow::Context;

fn main() -> anyhow::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("deploy/chart/crds"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for crd in rivora_k8s_api::crds() {
        let path = dir.join(rivora_k8s_api::crd_file_name(&crd));
        std::fs::write(&path, rivora_k8s_api::crd_yaml(&crd)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
    }
    let chart = dir.parent().unwrap_or(Path::new("."));
    let template = chart.join(rivora_k8s_api::meridio::CHART_TEMPLATE);
    if let Some(parent) = template.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(&template, rivora_k8s_api::meridio::chart_template()?)
        .with_context(|| format!("writing {}", template.display()))?;
    println!("{}", template.display());
    Ok(())
}
