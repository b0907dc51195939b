//! The CRD YAML committed under deploy/chart/crds is exactly what the types generate, and nothing else
//! lives there; so is Meridio-2's CRD template (deploy/chart/templates/meridio-crds.yaml).
//! Regenerate with `cargo run -p rivora-k8s-api --bin rivora-crdgen -- deploy/chart/crds`.

use std::collections::BTreeSet;
use std::path::PathBuf;

fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/chart/crds")
}

/// The first line where `committed` and `generated` differ (1-based).
fn first_difference(committed: &str, generated: &str) -> usize {
    committed
        .lines()
        .zip(generated.lines())
        .position(|(a, b)| a != b)
        .map(|i| i + 1)
        .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()) + 1)
}

#[test]
fn committed_meridio_template_matches_the_types() {
    let path = crd_dir()
        .join("..")
        .join(rivora_k8s_api::meridio::CHART_TEMPLATE);
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{} missing ({e}); run `cargo run -p rivora-k8s-api --bin rivora-crdgen -- deploy/chart/crds`",
            path.display()
        )
    });
    let generated = rivora_k8s_api::meridio::chart_template().unwrap();
    assert!(
        committed == generated,
        "{} differs from the types from line {} on; run \
         `cargo run -p rivora-k8s-api --bin rivora-crdgen -- deploy/chart/crds`",
        path.display(),
        first_difference(&committed, &generated)
    );
}

#[test]
fn committed_crds_match_the_types() {
    let dir = crd_dir();
    let mut expected = BTreeSet::new();
    for crd in rivora_k8s_api::crds() {
        let name = rivora_k8s_api::crd_file_name(&crd);
        let path = dir.join(&name);
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{} missing ({e}); run `cargo run -p rivora-k8s-api --bin rivora-crdgen -- deploy/chart/crds`",
                path.display()
            )
        });
        let generated = rivora_k8s_api::crd_yaml(&crd).unwrap();
        if committed != generated {
            let line = first_difference(&committed, &generated);
            panic!(
                "{} differs from the types from line {line} on; run \
                 `cargo run -p rivora-k8s-api --bin rivora-crdgen -- deploy/chart/crds`",
                path.display()
            );
        }
        expected.insert(name);
    }
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        present, expected,
        "files in deploy/chart/crds that no type generates"
    );
}
