//! The workload tests, the benchmark and the demo run on a test cluster: an AddressPool, a
//! Deployment of echo Pods (the lab's identity protocol, images/echo/echo.c) and a LoadBalancer
//! Service of Rivora's class in front of them, plus the waits that go with them.
//!
//! Why here: the same objects, written the same way, are what each of them measures; a user
//! would write the same ones (nothing here is test-only but the echo image).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::json;

use super::ECHO_IMAGE;

/// The echo Pods' terminationGracePeriodSeconds: how long a terminating one may hold its
/// established connections (the echo server keeps them until the kubelet's SIGKILL).
pub const ECHO_GRACE: Duration = Duration::from_secs(15);
/// Rivora's default `loadBalancerClass` (the chart's `loadBalancerClass`).
pub const LB_CLASS: &str = "rivora.dev/lb";

/// Creates the cluster-wide AddressPool `name` over `cidr` (any Service may take from it).
pub async fn address_pool(client: &Client, name: &str, cidr: &str) -> Result<()> {
    let gvk = GroupVersionKind::gvk("rivora.dev", "v1alpha1", "AddressPool");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let pool: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": name},
        "spec": {"addresses": [cidr]},
    }))?;
    api.create(&PostParams::default(), &pool)
        .await
        .with_context(|| format!("creating AddressPool {name}"))?;
    Ok(())
}

/// Creates namespace `ns` (waiting for its `default` ServiceAccount, which the
/// controller-manager creates and every Pod needs), a Deployment `echo` of `replicas` echo Pods
/// and a LoadBalancer Service `echo` of Rivora's class: TCP and UDP 80 to the Pods' 8080.
pub async fn echo_app(client: &Client, ns: &str, replicas: i32) -> Result<()> {
    crate::ensure_namespace(client, ns).await?;
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    poll(
        &format!("namespace {ns}'s default ServiceAccount"),
        Duration::from_secs(60),
        || async {
            sa.get_opt("default")
                .await
                .map_err(|e| e.to_string())?
                .map(|_| ())
                .ok_or_else(|| "missing".to_string())
        },
    )
    .await?;
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "echo"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "echo"}},
            "template": {
                "metadata": {"labels": {"app": "echo"}},
                "spec": {
                    "containers": [{
                        "name": "echo",
                        "image": ECHO_IMAGE,
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                    }],
                    "terminationGracePeriodSeconds": ECHO_GRACE.as_secs(),
                },
            },
        },
    }))?;
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &deployment)
        .await
        .context("creating Deployment echo")?;
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "echo"},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": LB_CLASS,
            "selector": {"app": "echo"},
            "ports": [
                {"name": "tcp", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                {"name": "udp", "port": 80, "targetPort": 8080, "protocol": "UDP"},
            ],
        },
    }))?;
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await
        .context("creating Service echo")?;
    Ok(())
}

/// One Pod as [`running_pods`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningPod {
    /// The Pod's name.
    pub name: String,
    /// The node it runs on.
    pub node: String,
    /// Its first container's image.
    pub image: String,
}

/// The Pods matching `selector` when there are `want` of them, every one Running and Ready with
/// every container running, ready and never restarted; else what is wrong, for a poll.
pub async fn running_pods(
    pods: &Api<Pod>,
    selector: &str,
    want: usize,
) -> std::result::Result<Vec<RunningPod>, String> {
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for p in &list.items {
        let name = p.metadata.name.clone().unwrap_or_default();
        let status = p.status.as_ref().ok_or(format!("{name}: no status"))?;
        for c in status.container_statuses.iter().flatten() {
            let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
            if !running || !c.ready || c.restart_count != 0 {
                return Err(format!(
                    "{name}/{}: running={running} ready={} restarts={} state={:?} last={:?}",
                    c.name, c.ready, c.restart_count, c.state, c.last_state
                ));
            }
        }
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if !ready || p.metadata.deletion_timestamp.is_some() {
            return Err(format!(
                "{name}: not Ready (or terminating): {:?}",
                status.conditions
            ));
        }
        let spec = p.spec.as_ref();
        out.push(RunningPod {
            name,
            node: spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
            image: spec
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default(),
        });
    }
    if out.len() != want {
        return Err(format!("{} of {want} Pods running: {out:?}", out.len()));
    }
    Ok(out)
}

/// The first ingress address of Service `ns/name`, once the controller wrote one.
pub async fn service_address(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<IpAddr> {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    poll(
        &format!("Service {ns}/{name}'s address"),
        timeout,
        || async {
            let s = services.get(name).await.map_err(|e| e.to_string())?;
            s.status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|l| l.ingress.as_ref())
                .and_then(|i| i.first())
                .and_then(|i| i.ip.as_ref())
                .and_then(|ip| ip.parse().ok())
                .ok_or_else(|| format!("no address yet: {:?}", s.status))
        },
    )
    .await
}

/// Polls `f` every 250 ms until it is Ok or `timeout` passes; then fails with what it last said.
pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(last) if Instant::now() > deadline => {
                bail!("{what}: not within {timeout:?}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}
