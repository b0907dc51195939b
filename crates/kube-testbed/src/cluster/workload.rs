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

/// Creates the cluster-wide AddressPool `name` over `cidrs` (any Service may take from it; a
/// pool with an IPv4 and an IPv6 range serves dual-stack Services).
pub async fn address_pool(client: &Client, name: &str, cidrs: &[&str]) -> Result<()> {
    let gvk = GroupVersionKind::gvk("rivora.dev", "v1alpha1", "AddressPool");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let pool: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": name},
        "spec": {"addresses": cidrs},
    }))?;
    api.create(&PostParams::default(), &pool)
        .await
        .with_context(|| format!("creating AddressPool {name}"))?;
    Ok(())
}

/// How the echo Deployment's Pods are laid out and how they end: what a test of endpoints
/// per node or of terminating endpoints needs to hold still while it looks.
#[derive(Debug, Clone)]
pub struct EchoPods {
    /// The Deployment's replicas.
    pub replicas: i32,
    /// Spread the Pods evenly over the nodes (a topologySpreadConstraint on the host name
    /// with `DoNotSchedule`, so no node holds two more than another), for tests that expect
    /// a known number of Pods per node. Off by default: a drained node's Pods must be free to
    /// go anywhere.
    pub spread: bool,
    /// How long a terminating Pod keeps accepting new connections (echo's DRAIN_SECONDS):
    /// while it does, its readiness probe passes and its endpoint is terminating but serving.
    pub drain: Duration,
    /// terminationGracePeriodSeconds: the bound on how long a terminating Pod holds its
    /// established connections.
    pub grace: Duration,
}

impl EchoPods {
    /// `replicas` Pods placed by the scheduler's defaults, draining 5 s, with [`ECHO_GRACE`].
    pub fn new(replicas: i32) -> EchoPods {
        EchoPods {
            replicas,
            spread: false,
            drain: Duration::from_secs(5),
            grace: ECHO_GRACE,
        }
    }
}

/// Creates namespace `ns` (waiting for its `default` ServiceAccount, which the
/// controller-manager creates and every Pod needs) and a Deployment `echo` of echo Pods laid
/// out as `pods` says, labelled `app=echo`, serving TCP and UDP on 8080.
pub async fn echo_deployment(client: &Client, ns: &str, pods: &EchoPods) -> Result<()> {
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
    let spread = if pods.spread {
        json!([{
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "echo"}},
        }])
    } else {
        json!([])
    };
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "echo"},
        "spec": {
            "replicas": pods.replicas,
            "selector": {"matchLabels": {"app": "echo"}},
            "template": {
                "metadata": {"labels": {"app": "echo"}},
                "spec": {
                    "containers": [{
                        "name": "echo",
                        "image": ECHO_IMAGE,
                        "env": [
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "DRAIN_SECONDS", "value": pods.drain.as_secs_f64().to_string()},
                        ],
                        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                    }],
                    "terminationGracePeriodSeconds": pods.grace.as_secs(),
                    "topologySpreadConstraints": spread,
                },
            },
        },
    }))?;
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &deployment)
        .await
        .context("creating Deployment echo")?;
    Ok(())
}

/// Creates the LoadBalancer Service `ns/name` of Rivora's class in front of the echo Pods: TCP
/// and UDP 80 to their 8080, with `spec` merged over that (e.g. `externalTrafficPolicy`,
/// `ipFamilyPolicy`). Returns the Service as the API server stored it (its allocated
/// healthCheckNodePort, its families).
pub async fn echo_service(
    client: &Client,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) -> Result<Service> {
    let mut service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": LB_CLASS,
            "selector": {"app": "echo"},
            "ports": [
                {"name": "tcp", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                {"name": "udp", "port": 80, "targetPort": 8080, "protocol": "UDP"},
            ],
        },
    });
    if let (Some(base), Some(more)) = (service["spec"].as_object_mut(), spec.as_object()) {
        base.extend(more.clone());
    }
    let service: Service = serde_json::from_value(service)?;
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await
        .with_context(|| format!("creating Service {ns}/{name}"))
}

/// The echo workload as a user's first try has it: `replicas` Pods placed by the scheduler
/// (Deployment `echo`, [`EchoPods::new`]) behind the LoadBalancer Service `echo`.
pub async fn echo_app(client: &Client, ns: &str, replicas: i32) -> Result<()> {
    echo_deployment(client, ns, &EchoPods::new(replicas)).await?;
    echo_service(client, ns, "echo", json!({})).await?;
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
    Ok(service_addresses(client, ns, name, 1, timeout).await?[0])
}

/// The ingress addresses of Service `ns/name` once the controller wrote at least `want` (a
/// dual-stack Service gets one per family, in `ipFamilies` order).
pub async fn service_addresses(
    client: &Client,
    ns: &str,
    name: &str,
    want: usize,
    timeout: Duration,
) -> Result<Vec<IpAddr>> {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    poll(
        &format!("Service {ns}/{name}'s {want} address(es)"),
        timeout,
        || async {
            let s = services.get(name).await.map_err(|e| e.to_string())?;
            let got: Vec<IpAddr> = s
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|l| l.ingress.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|i| i.ip.as_ref()?.parse().ok())
                .collect();
            if got.len() >= want {
                Ok(got)
            } else {
                Err(format!("{} of {want} addresses: {:?}", got.len(), s.status))
            }
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
