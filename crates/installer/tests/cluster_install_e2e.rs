//! Issue 41, acceptance 1: the chart deployed as users deploy it. Rivora's image is built by
//! scripts/image from this checkout's binaries and imported on two nodes of a real cluster
//! (containerd + kubelet per node, controller-manager, scheduler: crates/kube-testbed's
//! cluster); `rivora install --wait` applies the chart with its default values, except
//! `apiServer.host` (there is no kube-proxy, so the `kubernetes` Service's ClusterIP does not
//! answer). Then:
//! - the rivorad DaemonSet's Pod runs on every node and the controller's two replicas run, all
//!   from Rivora's image, Ready (so their probes pass), not restarting;
//! - an AddressPool and a Deployment of three echo Pods behind a LoadBalancer Service: the
//!   controller assigns the address, the real EndpointSlice controller lists the Pods, and real
//!   TCP and UDP from the client segment, sent to the VIP through each node in turn, reach all
//!   three Pods (spread printed) with the VIP answering.
//!
//! Needs root and the test dependencies (scripts/build-testdeps.sh, scripts/setup.sh).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams, PostParams};
use rivora_k8s_api::AddressPool;
use rivora_kube_testbed::cluster::{Cluster, ClusterOptions, ECHO_IMAGE, images};
use rivora_kube_testbed::{SERVER_PORT, SERVER_V4};
use serde_json::json;

const NS: &str = "rivora-system";
const WAIT: Duration = Duration::from_secs(120);
const FLOWS: usize = 300;

/// The chart's appVersion: the tag `rivora install` deploys by default.
fn app_version() -> String {
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
async fn wait<T, F, Fut>(what: &str, cluster: &Cluster, mut f: F) -> T
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

/// Every Pod matching `selector` in `ns`: (name, node, image) once all are Running and Ready
/// with no restart, and there are `want` of them.
async fn running_pods(
    pods: &Api<Pod>,
    selector: &str,
    want: usize,
) -> Result<Vec<(String, String, String)>, String> {
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for p in &list.items {
        let name = p.metadata.name.clone().unwrap_or_default();
        let status = p.status.as_ref().ok_or(format!("{name}: no status"))?;
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        for c in status.container_statuses.iter().flatten() {
            let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
            if !running || !c.ready || c.restart_count != 0 {
                return Err(format!(
                    "{name}/{}: running={running} ready={} restarts={} state={:?} last={:?}",
                    c.name, c.ready, c.restart_count, c.state, c.last_state
                ));
            }
        }
        if !ready {
            return Err(format!("{name}: not Ready: {:?}", status.conditions));
        }
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let image = p
            .spec
            .as_ref()
            .map(|s| s.containers[0].image.clone().unwrap_or_default())
            .unwrap_or_default();
        out.push((name, node, image));
    }
    if out.len() != want {
        return Err(format!("{} of {want} Pods running: {out:?}", out.len()));
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_from_rivoras_image_on_real_kubelets_and_serves_a_load_balancer_service() {
    rivora_lab::require_root().unwrap();
    let version = app_version();
    let image_dir =
        std::env::temp_dir().join(format!("rivora-cluster-install-{}", std::process::id()));
    let image = images::rivora_image(&image_dir, &version).unwrap();
    let cluster = Cluster::start(ClusterOptions {
        nodes: 2,
        images: vec![image],
    })
    .await
    .unwrap();
    let _ = std::fs::remove_dir_all(&image_dir);
    let kubeconfig: PathBuf = cluster.bed().dir().join("admin.kubeconfig");
    std::fs::write(
        &kubeconfig,
        cluster.bed().admin_kubeconfig(&cluster.bed().url()),
    )
    .unwrap();

    // `rivora install` as a user runs it: chart defaults, plus where the API server is.
    let out = Command::new(env!("CARGO_BIN_EXE_rivora"))
        .args(["install", "--wait", "--timeout", "180s", "-n", NS])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--set",
            &format!("apiServer.host={SERVER_V4}"),
            "--set",
            &format!("apiServer.port={SERVER_PORT}"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rivora install failed:\n{}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout),
        cluster.diagnostics(30)
    );

    let client = cluster.admin_client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let want_image = format!("ghcr.io/rivora/rivora:{version}");
    let rivorad = wait("a running rivorad on every node", &cluster, || {
        running_pods(&pods, "app.kubernetes.io/component=rivorad", 2)
    })
    .await;
    let controllers = wait("two running controllers", &cluster, || {
        running_pods(&pods, "app.kubernetes.io/component=controller", 2)
    })
    .await;
    let nodes: std::collections::BTreeSet<&str> = rivorad.iter().map(|p| p.1.as_str()).collect();
    assert_eq!(nodes.len(), 2, "one rivorad per node: {rivorad:?}");
    for (name, _, image) in rivorad.iter().chain(&controllers) {
        assert_eq!(image, &want_image, "{name} runs Rivora's image");
    }
    println!("rivorad: {rivorad:?}\ncontrollers: {controllers:?}");

    // An AddressPool, three echo Pods and a LoadBalancer Service of Rivora's class.
    let pool: AddressPool = serde_json::from_value(json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": "lab"},
        "spec": {"addresses": ["10.99.41.0/28"]},
    }))
    .unwrap();
    Api::<AddressPool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();
    let app = "echo";
    rivora_kube_testbed::ensure_namespace(&client, app)
        .await
        .unwrap();
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "echo"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "echo"}},
            "template": {
                "metadata": {"labels": {"app": "echo"}},
                "spec": {"containers": [{
                    "name": "echo",
                    "image": ECHO_IMAGE,
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                }]},
            },
        },
    }))
    .unwrap();
    let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), app);
    wait(
        "the echo namespace's default ServiceAccount",
        &cluster,
        || async {
            sa.get_opt("default")
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "missing".to_string())
        },
    )
    .await;
    Api::<Deployment>::namespaced(client.clone(), app)
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "echo"},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": "rivora.dev/lb",
            "selector": {"app": "echo"},
            "ports": [
                {"name": "tcp", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                {"name": "udp", "port": 80, "targetPort": 8080, "protocol": "UDP"},
            ],
        },
    }))
    .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), app);
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let echo_pods: Api<Pod> = Api::namespaced(client.clone(), app);
    let echoes = wait("three echo Pods", &cluster, || {
        running_pods(&echo_pods, "app=echo", 3)
    })
    .await;
    let vip: IpAddr = wait("the Service's address", &cluster, || async {
        let s = services.get("echo").await.map_err(|e| e.to_string())?;
        s.status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .and_then(|i| i.first())
            .and_then(|i| i.ip.as_ref())
            .and_then(|ip| ip.parse().ok())
            .ok_or_else(|| format!("no address yet: {:?}", s.status))
    })
    .await;
    println!("VIP {vip}, echo Pods {echoes:?}");

    // Real TCP and UDP to the VIP through each node: every Pod of both nodes answers.
    let target = SocketAddr::new(vip, 80);
    for node in cluster.nodes() {
        cluster.route_via(vip, node).unwrap();
        let tcp = wait(
            &format!("TCP through {} reaches all 3 Pods", node.name()),
            &cluster,
            || async {
                let ns = cluster.client();
                let r = rivora_lab::tcp_round(ns, target, FLOWS, 8, Duration::from_secs(2));
                if r.all_ok() && r.shares().len() == 3 && r.wrong_peer == 0 {
                    Ok(r)
                } else {
                    Err(r.to_string())
                }
            },
        )
        .await;
        let udp = wait(
            &format!("UDP through {} reaches all 3 Pods", node.name()),
            &cluster,
            || async {
                let r = rivora_lab::udp_round(
                    cluster.client(),
                    target,
                    FLOWS,
                    8,
                    Duration::from_secs(2),
                );
                if r.all_ok() && r.shares().len() == 3 && r.wrong_peer == 0 {
                    Ok(r)
                } else {
                    Err(r.to_string())
                }
            },
        )
        .await;
        let pct = |s: BTreeMap<String, f64>| -> Vec<String> {
            s.iter()
                .map(|(k, v)| format!("{k} {:.0}%", v * 100.0))
                .collect()
        };
        println!(
            "through {}: TCP {:?}, UDP {:?}",
            node.name(),
            pct(tcp.shares()),
            pct(udp.shares())
        );
    }
}
