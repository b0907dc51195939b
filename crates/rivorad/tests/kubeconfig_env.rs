//! `rivorad --kubernetes` without `--kubeconfig` reads KUBECONFIG, as kubectl and
//! rivora-controller do, before the in-cluster config (it ignored it: a node agent run by hand
//! with KUBECONFIG set said there was no in-cluster config).

use std::process::Command;

#[test]
fn kubeconfig_from_the_environment_is_read() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "rivorad refuses to start without root: run the suite as root"
    );
    let dir = std::env::temp_dir().join(format!("rivorad-kcenv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("no-such-kubeconfig");
    let out = Command::new(env!("CARGO_BIN_EXE_rivorad"))
        .args(["--kubernetes", "--node-name", "n1", "--interface", "lo"])
        .arg("--pin-dir")
        .arg(format!(
            "/sys/fs/bpf/rivora-test-kcenv-{}",
            std::process::id()
        ))
        .arg("--api-socket")
        .arg(dir.join("api.sock"))
        .env("KUBECONFIG", &missing)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("KUBECONFIG") && !err.contains("no in-cluster config"),
        "the KUBECONFIG file is what failed: {err}"
    );
}
