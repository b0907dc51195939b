//! Compiles the datapath's C programs with clang-19 so that the objects the
//! crate embeds always match the sources (and the ABI header) of this tree.

use std::{env, path::PathBuf, process::Command};

/// The balancer's two programs, and rivora-decap's (bpf/decap.c), which the
/// rivora-decap crate embeds from here.
const PROGRAMS: &[&str] = &["xdp_ingress", "tc_nat", "decap"];

fn main() {
    let bpf_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../bpf");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let clang = env::var("RIVORA_CLANG").unwrap_or_else(|_| "clang-19".into());
    println!("cargo:rerun-if-env-changed=RIVORA_CLANG");
    println!("cargo:rerun-if-changed={}", bpf_dir.display());
    for entry in std::fs::read_dir(&bpf_dir).unwrap() {
        println!("cargo:rerun-if-changed={}", entry.unwrap().path().display());
    }
    for prog in PROGRAMS {
        let out = out_dir.join(format!("{prog}.o"));
        let output = Command::new(&clang)
            .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
            .arg(format!("-I/usr/include/{}-linux-gnu", env::consts::ARCH))
            .arg("-c")
            .arg(bpf_dir.join(format!("{prog}.c")))
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run {clang} (scripts/setup.sh installs clang-19): {e}")
            });
        if !output.status.success() {
            panic!(
                "{clang} failed on bpf/{prog}.c:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}
