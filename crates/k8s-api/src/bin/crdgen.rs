//! Writes Rivora's CRDs as YAML into a directory (default `deploy/chart/crds`), one file per CRD.
//!
//! Why a binary: regenerating must be one command after changing a type, and the test
//! `committed_crds_match_the_types` tells when someone forgot.

use std::path::PathBuf;

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
    Ok(())
}
