//! Embeds deploy/chart into the binary: `rivora` must install without the repository or helm at
//! hand, and the chart it installs must be exactly the one in the source tree it was built from.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/chart");
    let chart = chart.canonicalize().expect("deploy/chart exists");
    println!("cargo:rerun-if-changed={}", chart.display());
    let mut files = Vec::new();
    walk(&chart, &chart, &mut files);
    files.sort();
    let mut out = String::from(
        "/// Every file of deploy/chart: (path relative to the chart, contents).\n\
         pub static CHART_FILES: &[(&str, &str)] = &[\n",
    );
    for (rel, abs) in &files {
        println!("cargo:rerun-if-changed={}", abs.display());
        writeln!(
            out,
            "    ({rel:?}, include_str!({:?})),",
            abs.display().to_string()
        )
        .unwrap();
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("chart_files.rs");
    std::fs::write(dest, out).unwrap();
}

fn walk(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            println!("cargo:rerun-if-changed={}", path.display());
            walk(root, &path, files);
        } else {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            files.push((rel, path));
        }
    }
}
