//! `rivora-doctor --kubernetes` against a real kube-apiserver (the test bed
//! of crates/kube-testbed; root required, never skipped): the binary runs in
//! a node namespace attached to the test bed, with kubeconfigs of
//! ServiceAccounts bound to deploy/rbac/rivorad.yaml as shipped, to part of
//! it, or to nothing.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use rivora_kube_testbed::{TestBed, bind_rbac, unique_name};
use rivora_lab::Netns;
use serde_json::Value;

const DOCTOR: &str = env!("CARGO_BIN_EXE_rivora-doctor");
const RBAC: &str = include_str!("../../../deploy/rbac/rivorad.yaml");

fn root() {
    if let Err(e) = rivora_lab::require_root() {
        panic!("THIS TEST NEEDS ROOT, refusing to skip: {e:#}");
    }
}

/// A node namespace on the test bed's bridge, with forwarding on (as a
/// Kubernetes node needs), and a scratch directory for kubeconfigs.
struct Node {
    ns: Netns,
    dir: PathBuf,
}

impl Node {
    fn new(bed: &TestBed) -> Node {
        let ns = Netns::new("dock").unwrap();
        bed.attach(&ns, "kapi").unwrap();
        ns.sysctl("net.ipv4.ip_forward", "1").unwrap();
        ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        let dir = std::env::temp_dir().join(unique_name("rv-doctor-k8s"));
        std::fs::create_dir_all(&dir).unwrap();
        Node { ns, dir }
    }

    /// rivora-doctor --kubernetes with a kubeconfig for `token` at `server`.
    fn doctor(&self, bed: &TestBed, server: &str, token: &str, extra: &[&str]) -> (i32, Value) {
        let kubeconfig = self.dir.join(unique_name("kubeconfig"));
        std::fs::write(&kubeconfig, bed.token_kubeconfig(server, token)).unwrap();
        let pins = format!("/sys/fs/bpf/rv-doctor-k8s-{}", std::process::id());
        let mut cmd = Command::new(DOCTOR);
        cmd.args(["--kubernetes", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--pin-dir", &pins, "-o", "json"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = self.ns.spawn(&mut cmd).unwrap().wait_with_output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let code = out.status.code().unwrap_or(-1);
        for f in v["findings"].as_array().unwrap() {
            if f["id"].as_str().unwrap().starts_with("kube") || f["status"] == "FAIL" {
                eprintln!(
                    "  {} {}: {} | {}",
                    f["status"], f["id"], f["reason"], f["fix"]
                );
            }
        }
        (code, v)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn finding<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no finding {id}"))
}

fn reason(r: &Value, id: &str) -> String {
    finding(r, id)["reason"].as_str().unwrap().to_string()
}

/// The permissions a finding lists as missing, after "needs: ".
fn missing(r: &Value) -> Vec<String> {
    let why = reason(r, "kube-rbac");
    let list = why.split("rivorad needs: ").nth(1).unwrap_or("");
    list.split(", ").map(str::to_string).collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_shipped_role_passes_and_what_is_not_bound_is_listed() {
    root();
    let bed = TestBed::shared();
    let rt = runtime();
    let node = Node::new(bed);
    let server = bed.in_cluster_url();
    let (sa_ns, other_ns) = (unique_name("doc"), unique_name("doc"));
    let (bound, nothing) = rt.block_on(async {
        let admin = bed.admin_client().await.unwrap();
        // The token first: it creates the namespace and the ServiceAccount.
        let bound = bed.service_account_token(&sa_ns, "rivorad").await.unwrap();
        bind_rbac(&admin, RBAC, &sa_ns, "rivorad").await.unwrap();
        // The same ServiceAccount name elsewhere, bound to nothing.
        let nothing = bed
            .service_account_token(&other_ns, "rivorad")
            .await
            .unwrap();
        (bound, nothing)
    });

    // Bound as shipped, its Role in the namespace given: every review
    // allowed, and nothing else on this node fails either.
    let (code, r) = node.doctor(bed, &server, &bound, &["--namespace", &sa_ns]);
    assert_eq!(finding(&r, "kube-api")["status"], "PASS");
    assert!(
        reason(&r, "kube-api").contains("Kubernetes v1.35"),
        "{}",
        reason(&r, "kube-api")
    );
    assert_eq!(
        finding(&r, "kube-rbac")["status"],
        "PASS",
        "{}",
        reason(&r, "kube-rbac")
    );
    assert!(reason(&r, "kube-rbac").contains("all 45 permissions"));
    assert_eq!(code, 0, "{r:#}");

    // The same identity with another --namespace: the Role's five
    // permissions are missing there, and only they.
    let (code, r) = node.doctor(bed, &server, &bound, &["--namespace", &other_ns]);
    assert_eq!(code, 1);
    assert_eq!(finding(&r, "kube-rbac")["status"], "FAIL");
    let mut want: Vec<String> = ["list secrets", "watch secrets"]
        .iter()
        .map(|v| format!("{v} in {other_ns}"))
        .chain(
            ["get", "create", "update"]
                .iter()
                .map(|v| format!("{v} leases.coordination.k8s.io in {other_ns}")),
        )
        .collect();
    let mut got = missing(&r);
    want.sort();
    got.sort();
    assert_eq!(got, want, "{}", reason(&r, "kube-rbac"));
    assert!(
        finding(&r, "kube-rbac")["fix"]
            .as_str()
            .unwrap()
            .contains(&format!("RoleBinding in {other_ns}"))
    );

    // Bound to nothing: every permission is listed.
    let (code, r) = node.doctor(bed, &server, &nothing, &["--namespace", &other_ns]);
    assert_eq!(code, 1);
    let got = missing(&r);
    assert!(
        reason(&r, "kube-rbac").contains("lacks 45 of the 45"),
        "{}",
        reason(&r, "kube-rbac")
    );
    for p in [
        "watch services (cluster-wide)",
        "list endpointslices.discovery.k8s.io (cluster-wide)",
        "patch rivoranodes.rivora.dev/status (cluster-wide)",
        "create events.events.k8s.io (cluster-wide)",
    ] {
        assert!(got.iter().any(|g| g == p), "{p:?} not in {got:?}");
    }
    assert_eq!(got.len(), 45);

    // An address nothing answers on: the API check fails, RBAC is not asked.
    let (code, r) = node.doctor(bed, "https://127.0.0.1:9", &bound, &[]);
    assert_eq!(code, 1);
    assert_eq!(finding(&r, "kube-api")["status"], "FAIL");
    let why = reason(&r, "kube-api");
    assert!(
        why.contains("https://127.0.0.1:9/ did not answer") && why.contains("Connection refused"),
        "{why}"
    );
    assert_eq!(finding(&r, "kube-rbac")["status"], "SKIP");

    // A token the API server does not accept: it answered (401), which is not "did not answer".
    let (code, r) = node.doctor(bed, &server, "not-a-token-of-this-cluster", &[]);
    assert_eq!(code, 1);
    assert_eq!(finding(&r, "kube-api")["status"], "FAIL");
    let why = reason(&r, "kube-api");
    assert!(
        why.contains("refused the credentials (HTTP 401 Unauthorized)")
            && !why.contains("did not answer"),
        "{why}"
    );
    assert_eq!(finding(&r, "kube-rbac")["status"], "SKIP");
}
