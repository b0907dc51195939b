//! Compiles the benchmark-only BPF programs in bpf/bench/ with clang-19,
//! the same way crates/dataplane/build.rs compiles the datapath.

use std::{env, path::PathBuf, process::Command};

const PROGRAMS: &[&str] = &["bench_xdp", "bench_tc"];

fn main() {
    let dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../bpf/bench");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let clang = env::var("RIVORA_CLANG").unwrap_or_else(|_| "clang-19".into());
    println!("cargo:rerun-if-env-changed=RIVORA_CLANG");
    println!("cargo:rerun-if-changed={}", dir.display());
    for entry in std::fs::read_dir(&dir).unwrap() {
        println!("cargo:rerun-if-changed={}", entry.unwrap().path().display());
    }
    for prog in PROGRAMS {
        let out = out_dir.join(format!("{prog}.o"));
        let output = Command::new(&clang)
            .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
            .arg(format!("-I/usr/include/{}-linux-gnu", env::consts::ARCH))
            .arg("-c")
            .arg(dir.join(format!("{prog}.c")))
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run {clang} (scripts/setup.sh installs clang-19): {e}")
            });
        if !output.status.success() {
            panic!(
                "{clang} failed on bpf/bench/{prog}.c:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}
