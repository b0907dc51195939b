//! An owned test bed leaves nothing behind when the test using it panics: its processes, its
//! network namespace and its directory are gone once the panic has unwound. Needs root and
//! `scripts/build-testdeps.sh`.

use std::path::{Path, PathBuf};

use rivora_kube_testbed::TestBed;

#[test]
fn a_panicking_test_leaves_no_process_namespace_or_directory() {
    rivora_lab::require_root().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<(Vec<u32>, String, PathBuf)>();
    let joined = std::thread::spawn(move || {
        let bed = TestBed::start().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let version = rt
            .block_on(async {
                bed.admin_client()
                    .await?
                    .apiserver_version()
                    .await
                    .map_err(Into::into)
            })
            .map_err(|e: anyhow::Error| e.to_string())
            .unwrap();
        tx.send((
            bed.pids().to_vec(),
            bed.netns_name().to_string(),
            bed.dir().to_path_buf(),
        ))
        .unwrap();
        panic!(
            "deliberate panic with kube-apiserver {} running",
            version.git_version
        );
    })
    .join();
    assert!(joined.is_err(), "the thread was meant to panic");
    let (pids, netns, dir) = rx.recv().unwrap();
    println!(
        "after the panic: pids {pids:?}, netns {netns}, dir {}",
        dir.display()
    );
    assert_eq!(pids.len(), 2, "etcd and kube-apiserver");
    for pid in &pids {
        // Reaped by the test bed, so the PID is gone (unless recycled, which /proc/PID/cmdline tells).
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(
            !cmdline.contains("kube-apiserver") && !cmdline.contains("etcd"),
            "process {pid} still runs: {cmdline:?}"
        );
    }
    assert!(
        !Path::new("/run/netns").join(&netns).exists(),
        "netns {netns} left behind"
    );
    assert!(!dir.exists(), "{} left behind", dir.display());
}
