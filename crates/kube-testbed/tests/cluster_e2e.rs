//! Issue 41, points 1 and 2: a real cluster of namespace nodes. Two nodes with containerd and a
//! kubelet each, the controller-manager and the scheduler: a Deployment of three echo Pods (the
//! image built by scripts/image, imported on every node) is scheduled, its containers run (not
//! restarting), their readiness probes pass, the real EndpointSlice controller lists exactly their
//! addresses, and each answers real TCP and UDP from the client segment with its own name. Then
//! the Deployment is scaled to 0 and the slice empties, and the cluster, once dropped, leaves no
//! process, cgroup, mount or namespace behind. Needs root and the test dependencies.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use rivora_kube_testbed::cluster::{Cluster, ClusterOptions, ECHO_IMAGE};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

/// Polls `f` every 250 ms until it gives `Some`, or fails with what it last said.
async fn wait<T, F, Fut>(what: &str, cluster: &Cluster, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(last) if Instant::now() > deadline => {
                panic!(
                    "{what}: not within {WAIT:?}; last seen: {last}\n{}",
                    cluster.diagnostics(20)
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// One TCP connection and one UDP exchange to `addr` from the client: the names that answered.
fn ask(cluster: &Cluster, addr: SocketAddr) -> Result<(String, String), String> {
    cluster
        .client()
        .within(move || -> Result<(String, String), String> {
            let t = Duration::from_secs(2);
            let mut s =
                TcpStream::connect_timeout(&addr, t).map_err(|e| format!("tcp {addr}: {e}"))?;
            s.set_read_timeout(Some(t)).unwrap();
            let mut line = String::new();
            BufReader::new(s.try_clone().unwrap())
                .read_line(&mut line)
                .map_err(|e| format!("tcp {addr}: {e}"))?;
            s.write_all(b"ping").map_err(|e| e.to_string())?;
            let bind: SocketAddr = if addr.is_ipv6() {
                "[::]:0"
            } else {
                "0.0.0.0:0"
            }
            .parse()
            .unwrap();
            let u = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
            u.set_read_timeout(Some(t)).unwrap();
            u.send_to(b"hello", addr).map_err(|e| e.to_string())?;
            let mut buf = [0u8; 512];
            let n = u.recv(&mut buf).map_err(|e| format!("udp {addr}: {e}"))?;
            let udp = String::from_utf8_lossy(&buf[..n]).into_owned();
            Ok((
                line.split_whitespace().next().unwrap_or("").to_string(),
                udp.split_whitespace().next().unwrap_or("").to_string(),
            ))
        })
        .map_err(|e| e.to_string())?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_runs_on_real_kubelets_and_the_real_controller_lists_its_endpoints() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let client = cluster.admin_client().await.unwrap();
    let ns = "echo";
    rivora_kube_testbed::ensure_namespace(&client, ns)
        .await
        .unwrap();
    // The namespace's default ServiceAccount comes from the controller-manager.
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), ns);
    wait(
        "the namespace's default ServiceAccount",
        &cluster,
        || async {
            sas.get_opt("default")
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "missing".to_string())
        },
    )
    .await;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "echo"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "echo"}},
            "template": {
                "metadata": {"labels": {"app": "echo"}},
                "spec": {
                    "containers": [{
                        "name": "echo",
                        "image": ECHO_IMAGE,
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "ports": [{"containerPort": 8080, "name": "tcp"}, {"containerPort": 8080, "protocol": "UDP", "name": "udp"}],
                        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                    }],
                    "terminationGracePeriodSeconds": 10,
                },
            },
        },
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "echo"},
        "spec": {
            "selector": {"app": "echo"},
            "ipFamilyPolicy": "PreferDualStack",
            "ports": [{"name": "tcp", "port": 80, "targetPort": 8080}],
        },
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();

    // Three Pods Running and Ready on real kubelets, not restarting, each with a pod address of
    // the node it runs on.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let running: Vec<(String, String, Vec<IpAddr>)> =
        wait("3 echo Pods Ready", &cluster, || async {
            let list = pods
                .list(&ListParams::default().labels("app=echo"))
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
                let cs = status.container_statuses.iter().flatten().next();
                let running =
                    cs.is_some_and(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
                if !ready || !running {
                    return Err(format!(
                        "{name}: ready={ready} running={running} {status:?}"
                    ));
                }
                let node = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                let ips: Vec<IpAddr> = status
                    .pod_ips
                    .iter()
                    .flatten()
                    .map(|i| i.ip.parse().unwrap())
                    .collect();
                out.push((name, node, ips));
            }
            if out.len() != 3 {
                return Err(format!("{} Pods Ready of 3", out.len()));
            }
            Ok(out)
        })
        .await;
    for (name, node, ips) in &running {
        let n = cluster
            .node(node)
            .unwrap_or_else(|| panic!("{name} on unknown node {node}"));
        assert_eq!(
            ips.len(),
            2,
            "{name}: one IPv4 and one IPv6 address: {ips:?}"
        );
        let want = [
            format!("10.244.{}.", n.index()),
            format!("fd00:244:{:x}::", n.index()),
        ];
        for ip in ips {
            assert!(
                want.iter().any(|w| ip.to_string().starts_with(w.as_str())),
                "{name}'s {ip} is in {node}'s pod ranges {want:?}"
            );
        }
    }
    let nodes_used: std::collections::BTreeSet<&String> = running.iter().map(|r| &r.1).collect();
    println!("pods: {running:?} on {} nodes", nodes_used.len());

    // The real EndpointSlice controller lists exactly the Pods' addresses, ready.
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let want: std::collections::BTreeSet<IpAddr> =
        running.iter().flat_map(|r| r.2.iter().copied()).collect();
    wait(
        "the EndpointSlices list the 3 Pods, ready",
        &cluster,
        || async {
            let list = slices
                .list(&ListParams::default().labels("kubernetes.io/service-name=echo"))
                .await
                .map_err(|e| e.to_string())?;
            let mut seen = std::collections::BTreeSet::new();
            for s in &list.items {
                let by = s
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("endpointslice.kubernetes.io/managed-by"));
                if by.map(String::as_str) != Some("endpointslice-controller.k8s.io") {
                    return Err(format!("a slice managed by {by:?}"));
                }
                for e in &s.endpoints {
                    if e.conditions.as_ref().and_then(|c| c.ready) == Some(true) {
                        seen.extend(e.addresses.iter().map(|a| a.parse::<IpAddr>().unwrap()));
                    }
                }
            }
            if seen == want {
                Ok(())
            } else {
                Err(format!("ready endpoints {seen:?}, want {want:?}"))
            }
        },
    )
    .await;

    // Real TCP and UDP from the client segment to every Pod address: each answers with its name.
    let mut answered = BTreeMap::new();
    for (name, _, ips) in &running {
        for ip in ips {
            let (tcp, udp) = ask(&cluster, SocketAddr::new(*ip, 8080))
                .unwrap_or_else(|e| panic!("{name} at {ip}: {e}\n{}", cluster.diagnostics(10)));
            assert_eq!((&tcp, &udp), (name, name), "{ip} answered as itself");
            *answered.entry(name.clone()).or_insert(0) += 1;
        }
    }
    assert_eq!(answered.len(), 3, "{answered:?}");

    // Scaled to 0: the Pods go and the slices empty.
    deployments
        .patch(
            "echo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    wait("the slices empty after scaling to 0", &cluster, || async {
        let list = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=echo"))
            .await
            .map_err(|e| e.to_string())?;
        let left: usize = list.items.iter().map(|s| s.endpoints.len()).sum();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} endpoints left"))
        }
    })
    .await;

    // Dropped: nothing of the nodes is left.
    let dirs: Vec<std::path::PathBuf> = cluster
        .nodes()
        .iter()
        .map(|n| n.dir().to_path_buf())
        .collect();
    let netns: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| n.netns().name().to_string())
        .collect();
    drop(cluster);
    for d in &dirs {
        assert!(!d.exists(), "{} removed", d.display());
    }
    for n in &netns {
        assert!(
            !std::path::Path::new("/run/netns").join(n).exists(),
            "netns {n} removed"
        );
    }
    let leftover: Vec<String> = std::fs::read_dir("/sys/fs/cgroup/pids")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("rvk-{}-", std::process::id())))
        .collect();
    assert!(leftover.is_empty(), "cgroups left: {leftover:?}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for d in &dirs {
        assert!(
            !mounts.contains(&d.display().to_string()),
            "a mount under {} is left",
            d.display()
        );
    }
}
