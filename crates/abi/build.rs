//! Compiles bpf/abi_btf.c so the layout test can read the C side's BTF.
//! The same clang as the datapath build is used, so both see one layout.

use std::{env, path::PathBuf, process::Command};

fn main() {
    let bpf_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../bpf");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("abi_btf.o");
    let clang = env::var("RIVORA_CLANG").unwrap_or_else(|_| "clang-19".into());
    println!("cargo:rerun-if-env-changed=RIVORA_CLANG");
    println!(
        "cargo:rerun-if-changed={}",
        bpf_dir.join("abi_btf.c").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        bpf_dir.join("rivora_abi.h").display()
    );
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-I/usr/include/{}-linux-gnu", env::consts::ARCH))
        .arg("-c")
        .arg(bpf_dir.join("abi_btf.c"))
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {clang} (install clang-19: scripts/setup.sh): {e}"));
    assert!(status.success(), "{clang} failed to compile bpf/abi_btf.c");
}
