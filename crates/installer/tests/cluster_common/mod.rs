//! What the tests on a real cluster share: Rivora's image and the cluster it runs on, `rivora`
//! run as a user runs it, bounded waits, and the echo workload behind a LoadBalancer Service.

#![allow(dead_code)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use rivora_kube_testbed::cluster::{Cluster, ClusterOptions, images, workload};
use rivora_kube_testbed::{SERVER_PORT, SERVER_V4};

pub const NS: &str = "rivora-system";
pub const WAIT: Duration = Duration::from_secs(120);
pub const FLOWS: usize = 300;

/// The chart's appVersion: the tag `rivora install` deploys by default.
pub fn app_version() -> String {
    let chart = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/chart/Chart.yaml"),
    )
    .unwrap();
    chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_string())
        .expect("Chart.yaml has an appVersion")
}

/// Polls `f` every 250 ms until Ok, or panics with what it last said and the nodes' logs.
pub async fn wait<T, F, Fut>(what: &str, cluster: &Cluster, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(last) if Instant::now() > deadline => panic!(
                "{what}: not within {WAIT:?}; last seen: {last}\n{}",
                cluster.diagnostics(20)
            ),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Every Pod matching `selector` once there are `want` of them, all running and ready with no
/// restart (crates/kube-testbed's `workload::running_pods`).
pub use rivora_kube_testbed::cluster::workload::{ECHO_GRACE, running_pods};

/// A cluster of `nodes` nodes with Rivora's image imported on each, tagged with the chart's
/// appVersion and each of `more_versions` (same binaries: what an upgrade test upgrades to),
/// and an admin kubeconfig file for `rivora`.
pub async fn cluster_with_rivora(nodes: usize, more_versions: &[&str]) -> (Cluster, PathBuf) {
    rivora_lab::require_root().unwrap();
    let dir = std::env::temp_dir().join(format!("rivora-cluster-images-{}", std::process::id()));
    let mut archives = vec![images::rivora_image(&dir, &app_version()).unwrap()];
    for v in more_versions {
        archives.push(images::rivora_image(&dir, v).unwrap());
    }
    let cluster = Cluster::start(ClusterOptions {
        nodes,
        images: archives,
    })
    .await
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let kubeconfig = cluster.bed().dir().join("admin.kubeconfig");
    std::fs::write(
        &kubeconfig,
        cluster.bed().admin_kubeconfig(&cluster.bed().url()),
    )
    .unwrap();
    (cluster, kubeconfig)
}

/// Runs `rivora ARGS -n rivora-system --kubeconfig K` and returns its output; panics with it,
/// and the nodes' logs, when it fails.
pub fn rivora(cluster: &Cluster, kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rivora"))
        .args(args)
        .args(["-n", NS])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rivora {args:?} failed:\n{}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout),
        cluster.diagnostics(30)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `rivora install --wait` as a user runs it: the chart's defaults, plus where the API server
/// is (no kube-proxy here, so the `kubernetes` Service's ClusterIP does not answer).
pub fn install(cluster: &Cluster, kubeconfig: &Path) -> String {
    install_with(cluster, kubeconfig, &[])
}

/// [`install`] with more arguments of the user's (`--set`, `--gateway-api-crds`, ...).
pub fn install_with(cluster: &Cluster, kubeconfig: &Path, more: &[&str]) -> String {
    let host = format!("apiServer.host={SERVER_V4}");
    let port = format!("apiServer.port={SERVER_PORT}");
    let mut args = vec![
        "install",
        "--wait",
        "--timeout",
        "180s",
        "--set",
        &host,
        "--set",
        &port,
    ];
    args.extend_from_slice(more);
    rivora(cluster, kubeconfig, &args)
}

/// Creates AddressPool `pool` over `cidr`, namespace `ns` with a Deployment of `replicas` echo
/// Pods and a LoadBalancer Service `echo` of Rivora's class (TCP and UDP 80 -> 8080); waits for
/// the Pods and the address, and returns it.
pub async fn echo_service(
    cluster: &Cluster,
    client: &Client,
    pool: &str,
    cidr: &str,
    ns: &str,
    replicas: i32,
) -> IpAddr {
    workload::address_pool(client, pool, &[cidr]).await.unwrap();
    workload::echo_app(client, ns, replicas).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let echoes = wait("the echo Pods", cluster, || {
        running_pods(&pods, "app=echo", replicas as usize)
    })
    .await;
    let vip = service_address(cluster, client, ns, "echo").await;
    println!("VIP {vip}, echo Pods {echoes:?}");
    vip
}

/// The first ingress address of Service `ns/name`, once the controller wrote one.
pub async fn service_address(cluster: &Cluster, client: &Client, ns: &str, name: &str) -> IpAddr {
    workload::service_address(client, ns, name, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.diagnostics(20)))
}

/// Waits until `FLOWS` TCP connections and UDP exchanges to `target` from the client all
/// succeed, reach `pods` Pods and see the VIP answer; returns the shares as text.
pub async fn round_reaches(
    cluster: &Cluster,
    target: std::net::SocketAddr,
    pods: usize,
    what: &str,
) -> String {
    let tcp = wait(
        &format!("{what}: TCP reaches {pods} Pods"),
        cluster,
        || async {
            let r =
                rivora_lab::tcp_round(cluster.client(), target, FLOWS, 8, Duration::from_secs(2));
            if r.all_ok() && r.shares().len() == pods && r.wrong_peer == 0 {
                Ok(r)
            } else {
                Err(r.to_string())
            }
        },
    )
    .await;
    let udp = wait(
        &format!("{what}: UDP reaches {pods} Pods"),
        cluster,
        || async {
            let r =
                rivora_lab::udp_round(cluster.client(), target, FLOWS, 8, Duration::from_secs(2));
            if r.all_ok() && r.shares().len() == pods && r.wrong_peer == 0 {
                Ok(r)
            } else {
                Err(r.to_string())
            }
        },
    )
    .await;
    let pct = |s: std::collections::BTreeMap<String, f64>| -> Vec<String> {
        s.iter()
            .map(|(k, v)| format!("{k} {:.0}%", v * 100.0))
            .collect()
    };
    format!("TCP {:?}, UDP {:?}", pct(tcp.shares()), pct(udp.shares()))
}

/// Failures of long-lived connections: each must name a Pod of `gone` and come no earlier
/// than that Pod's deletion (seconds since the streams started) plus the echo grace.
pub fn check_failures(
    what: &str,
    failures: &[String],
    deleted_at: &std::collections::BTreeMap<String, f64>,
) {
    for f in failures {
        let (pod, at_deletion) = deleted_at
            .iter()
            .find(|(p, _)| f.contains(p.as_str()))
            .unwrap_or_else(|| panic!("{what}: a connection to a Pod that stayed failed: {f}"));
        let at: f64 = f
            .split(" at ")
            .nth(1)
            .and_then(|r| r.split('s').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no time in {f}"));
        let gone = at_deletion + ECHO_GRACE.as_secs_f64() - 1.5;
        assert!(
            at >= gone,
            "{what}: a connection to {pod} broke at {at:.1}s, before its Pod went ({gone:.1}s): {f}"
        );
    }
}

/// The load the tests run while something changes: 12 long-lived TCP connections exchanging a
/// line every 100 ms and 20 new connections a second to `target`; with when they started.
pub fn start_load(
    cluster: &Cluster,
    target: std::net::SocketAddr,
) -> (
    rivora_lab::LongLivedTcp,
    rivora_lab::ConnectionChurn,
    Instant,
) {
    let long = rivora_lab::LongLivedTcp::start(
        cluster.client(),
        target,
        12,
        Duration::from_millis(100),
        Duration::from_secs(2),
    )
    .unwrap();
    let started = Instant::now();
    let churn =
        rivora_lab::ConnectionChurn::start(cluster.client(), target, 20, Duration::from_secs(2))
            .unwrap();
    (long, churn, started)
}
