//! The rest of a real control plane beside the test bed's API server: kube-controller-manager
//! and kube-scheduler, each with an identity of its own.
//!
//! Why these two: without the controller-manager nothing turns a Deployment into Pods, a
//! Service's selector into EndpointSlices, a deleted Node's Pods into evictions, or creates the
//! `default` ServiceAccount and `kube-root-ca.crt` every Pod mounts; without the scheduler no
//! Pod gets a node. Both run in the test bed's namespace and reach the API server on its
//! loopback; the test bed's keeper starts and stops them with etcd and the API server.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use super::NodeAssets;
use crate::{SERVER_PORT, b64, kubeconfig_yaml, pki::Pki};

/// kube-controller-manager's secure port (health), on the test bed's loopback.
pub const CONTROLLER_MANAGER_PORT: u16 = 10257;
/// kube-scheduler's secure port (health), on the test bed's loopback.
pub const SCHEDULER_PORT: u16 = 10259;

/// The two commands, with their kubeconfigs written into `dir` (the test bed's directory):
/// `(name, command, log file)` as the keeper takes them.
pub(crate) fn commands(dir: &Path, pki: &Pki) -> Result<Vec<(String, Command, PathBuf)>> {
    let assets = NodeAssets::locate()?;
    let pki_dir = dir.join("pki");
    let server = format!("https://127.0.0.1:{SERVER_PORT}");

    let kcm_kubeconfig = write_kubeconfig(dir, "kube-controller-manager", &server, pki)?;
    let mut kcm = Command::new(&assets.kube_controller_manager);
    kcm.arg(format!("--kubeconfig={}", kcm_kubeconfig.display()))
        // Each controller acts as a ServiceAccount of its own, as kubeadm sets it up, so RBAC
        // errors name the controller.
        .arg("--use-service-account-credentials=true")
        .arg(format!(
            "--service-account-private-key-file={}",
            pki_dir.join("sa.key").display()
        ))
        // Published as kube-root-ca.crt in every namespace: what Pods verify the API server with.
        .arg(format!(
            "--root-ca-file={}",
            pki_dir.join("ca.crt").display()
        ))
        .arg("--leader-elect=false")
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--secure-port={CONTROLLER_MANAGER_PORT}"))
        // Pods are evicted from a Node gone NotReady after this long (the default is 5 min via
        // taints; tests of a lost node should not wait that long, and neither would an operator
        // of a small cluster).
        .arg("--node-monitor-grace-period=20s")
        .arg("--profiling=false")
        .arg("--v=1");

    let scheduler_kubeconfig = write_kubeconfig(dir, "kube-scheduler", &server, pki)?;
    let mut scheduler = Command::new(&assets.kube_scheduler);
    scheduler
        .arg(format!("--kubeconfig={}", scheduler_kubeconfig.display()))
        .arg("--leader-elect=false")
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--secure-port={SCHEDULER_PORT}"))
        .arg("--profiling=false")
        .arg("--v=1");

    Ok(vec![
        (
            "kube-controller-manager".into(),
            kcm,
            dir.join("kube-controller-manager.log"),
        ),
        (
            "kube-scheduler".into(),
            scheduler,
            dir.join("kube-scheduler.log"),
        ),
    ])
}

/// A kubeconfig for `system:<component>` (the user the bootstrap RBAC roles are bound to).
fn write_kubeconfig(dir: &Path, component: &str, server: &str, pki: &Pki) -> Result<PathBuf> {
    let (cert, key) = pki.client_cert(&format!("system:{component}"), None)?;
    let path = dir.join(format!("{component}.kubeconfig"));
    let text = cert_kubeconfig(server, &pki.ca_cert_pem, &cert, &key);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// A kubeconfig (YAML) for `server` that authenticates with a client certificate.
pub fn cert_kubeconfig(server: &str, ca_pem: &str, cert_pem: &str, key_pem: &str) -> String {
    kubeconfig_yaml(
        server,
        ca_pem,
        serde_json::json!({
            "client-certificate-data": b64(cert_pem.as_bytes()),
            "client-key-data": b64(key_pem.as_bytes()),
        }),
    )
}
