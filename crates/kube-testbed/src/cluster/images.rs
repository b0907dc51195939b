//! The images a test cluster runs, built with `scripts/image` (OCI archives, no registry).
//!
//! Why the script and not Rust here: the script is what a release uses to build Rivora's image,
//! so a test cluster running that image tests the image users get (its libraries, its user,
//! its entrypoint), not a test-only copy.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The binaries Rivora's image holds.
pub const RIVORA_BINARIES: [&str; 4] =
    ["rivorad", "rivora-controller", "rivoractl", "rivora-doctor"];

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `scripts/image ARGS --out DIR` and returns the archives it printed (`REF ARCHIVE SIZE`).
fn run_image_script(dir: &Path, args: &[&str]) -> Result<Vec<PathBuf>> {
    let out = Command::new(repo_root().join("scripts/image"))
        .arg("--out")
        .arg(dir)
        .args(args)
        .output()
        .context("running scripts/image")?;
    if !out.status.success() {
        bail!(
            "scripts/image {args:?} exited {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(PathBuf::from))
        .collect())
}

/// The pause and echo images (two static C programs: a second or two) in `dir`.
pub fn test_images(dir: &Path) -> Result<Vec<PathBuf>> {
    let archives = run_image_script(dir, &["pause", "echo"])?;
    if archives.len() != 2 {
        bail!("scripts/image printed {} archives, want 2", archives.len());
    }
    Ok(archives)
}

/// Rivora's image, tagged `version`, in `dir`, from this checkout's debug build of its four
/// binaries (built first if needed: `cargo build`, a no-op after `cargo test --workspace`).
pub fn rivora_image(dir: &Path, version: &str) -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(repo_root())
        .args(["build", "--locked", "-q"]);
    for b in RIVORA_BINARIES {
        build.args(["--bin", b]);
    }
    let out = build.output().context("running cargo build")?;
    if !out.status.success() {
        bail!(
            "cargo build of {RIVORA_BINARIES:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    let bin_dir = target.join("debug");
    let archives = run_image_script(
        dir,
        &[
            "rivora",
            "--version",
            version,
            "--bin-dir",
            &bin_dir.to_string_lossy(),
        ],
    )?;
    archives
        .into_iter()
        .next()
        .context("scripts/image rivora printed no archive")
}

/// The images Gateway API's conformance suite runs (echo-basic under each tag its manifests
/// name, CoreDNS), in `dir`, from the binaries scripts/build-testdeps.sh built next to the suite.
pub fn conformance_images(dir: &Path, assets: &crate::ConformanceAssets) -> Result<Vec<PathBuf>> {
    let archives = run_image_script(
        dir,
        &["conformance", "--bin-dir", &assets.dir.to_string_lossy()],
    )?;
    if archives.is_empty() {
        bail!("scripts/image conformance printed no archive");
    }
    Ok(archives)
}
