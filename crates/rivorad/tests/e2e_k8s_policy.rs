//! Issue 17, acceptance 4 (the Service fields): `loadBalancerSourceRanges` and
//! `sessionAffinity: ClientIP` end to end. One node of the Kubernetes lab with three pods, the
//! real `rivorad --kubernetes` against the real API server, real TCP from two clients:
//! - the client inside the Service's source ranges gets through, the one outside is dropped
//!   by the datapath and counted (drop reason `source_range`, and in the VIP's drops);
//! - with ClientIP affinity, 100 connections of one client land on one pod;
//! - a ServicePolicy's HTTP health check takes a pod whose HTTP server stops down within
//!   fall x interval + timeout (plus the stated slack), while its EndpointSlice still says
//!   ready, and new connections avoid it.
//!
//! Needs root and the test dependencies (scripts/build-testdeps.sh).

mod k8s_common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_common::*;
use kube::api::{Api, Patch, PatchParams};
use rivora_lab::cluster::{self, Cluster};
use rivora_lab::tcp_round;
use serde_json::json;

/// A minimal HTTP server on `addr` inside `ns`: 200 to every request, until dropped (its
/// listener closes, so a probe then gets a refused connection).
struct HttpOk {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HttpOk {
    fn start(ns: &rivora_lab::Netns, addr: SocketAddr) -> HttpOk {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = ns
            .within(move || std::net::TcpListener::bind(addr))
            .unwrap()
            .unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut c, _)) => {
                        c.set_nonblocking(false).unwrap();
                        c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                        let mut buf = [0u8; 1024];
                        let _ = c.read(&mut buf);
                        let _ = c.write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        HttpOk {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for HttpOk {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The state rivorad shows for backend `addr:8080` of the VIP at `vip`:80.
async fn backend_state(agent: &NodeAgent, vip: &str, addr: IpAddr) -> Result<String, String> {
    let vips = agent.vips().await?;
    let v = vips
        .iter()
        .find(|v| v.address == vip && v.port == 80)
        .ok_or_else(|| format!("no VIP {vip}"))?;
    v.backends
        .iter()
        .find(|b| b.address == addr.to_string() && b.port == 8080)
        .map(|b| b.state.clone())
        .ok_or_else(|| format!("no backend {addr}:8080"))
}

/// Waits until the VIP at `vip`:80 is programmed with `n` backends.
async fn programmed(agent: &NodeAgent, vip: &str, n: usize) {
    wait_for("the VIP is programmed", WAIT, || async {
        let vips = agent.vips().await?;
        match vips.iter().find(|v| v.address == vip && v.port == 80) {
            Some(v) if v.backends.len() == n => Ok(()),
            Some(v) => Err(format!("{} backends", v.backends.len())),
            None => Err(format!("no VIP {vip} yet")),
        }
    })
    .await;
}

/// The node-wide count of a drop reason, and the VIP's drops, from rivorad's API.
async fn drops(agent: &NodeAgent, reason: &str, vip: &str) -> (u64, u64) {
    let s = agent.api().stats().await.unwrap();
    let node = s
        .drops
        .iter()
        .find(|d| d.reason == reason)
        .map(|d| d.packets)
        .unwrap_or(0);
    let v = s
        .vips
        .iter()
        .find(|v| v.name.ends_with(&format!("/{vip}")))
        .map(|v| v.drops)
        .unwrap_or(0);
    (node, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_ranges_admit_only_listed_clients_and_client_ip_affinity_pins_a_client() {
    let t = K8sTest::new("pol").await;
    // Pods 1-3 serve "ranged" and "sticky"; 4-5 serve "checked" alone (a backend shared with a
    // Service without a check would be probed the older Service's way: not at all).
    let lab = Cluster::build("kp", &[5]).expect("building the cluster lab");
    let node = &lab.nodes[0];
    let _servers = identity_servers(node);
    let mut agent = t.agent(&lab, 1).await;
    let node_name = t.node_name(1);
    let all = pod_addrs(node);
    let (pods, own) = (all[..3].to_vec(), all[3..].to_vec());
    let service =
        |name: &'static str, vip: &'static str, extra: serde_json::Value, eps: Vec<IpAddr>| {
            let (t, node_name) = (&t, &node_name);
            async move {
                t.service(name, vip, http_port(), extra).await;
                t.slice(name, &ready(&eps, node_name), http_slice_port())
                    .await;
            }
        };

    // Only the first client's /32 may reach "ranged"; "sticky" pins each client to a pod.
    let ranged = "10.99.19.1";
    let sticky = "10.99.19.2";
    service(
        "ranged",
        ranged,
        json!({"loadBalancerSourceRanges": [format!("{}/32", cluster::CLIENT_V4)]}),
        pods.clone(),
    )
    .await;
    service(
        "sticky",
        sticky,
        json!({"sessionAffinity": "ClientIP"}),
        pods.clone(),
    )
    .await;
    agent.start_in(&node.ns, &[]);
    programmed(&agent, ranged, 3).await;
    programmed(&agent, sticky, 3).await;
    for v in [ranged, sticky] {
        lab.route_vip_via(v.parse().unwrap(), 1).unwrap();
    }

    // Source ranges: inside gets through, outside is dropped and counted.
    let target = SocketAddr::new(ranged.parse().unwrap(), 80);
    let inside = tcp_round(&lab.client, target, 60, 8, Duration::from_secs(3));
    assert!(inside.all_ok(), "the listed client: {inside}");
    let before = drops(&agent, "source_range", ranged).await;
    let outside = tcp_round(&lab.client2, target, 5, 5, Duration::from_millis(800));
    assert_eq!(
        outside.ok, 0,
        "the unlisted client must not get through: {outside}"
    );
    let after = wait_for("the refused SYNs are counted", WAIT, || async {
        let d = drops(&agent, "source_range", ranged).await;
        if d.0 >= before.0 + 5 && d.1 >= before.1 + 5 {
            Ok(d)
        } else {
            Err(format!("source_range drops {d:?}, before {before:?}"))
        }
    })
    .await;
    eprintln!(
        "source ranges: listed client 60/60 ok, unlisted 0/5; source_range drops {} -> {} (VIP drops {} -> {})",
        before.0, after.0, before.1, after.1
    );

    // ClientIP: 100 connections of one client, one pod; the other client too, on its own.
    let target = SocketAddr::new(sticky.parse().unwrap(), 80);
    for c in [&lab.client, &lab.client2] {
        let r = tcp_round(c, target, 100, 8, Duration::from_secs(3));
        assert!(r.all_ok(), "{r}");
        assert_eq!(
            r.per_backend.len(),
            1,
            "ClientIP affinity: one pod per client: {r}"
        );
        eprintln!("ClientIP: {:?}", r.per_backend);
    }
    // ServicePolicy HTTP check (probes on port 8081): a pod whose HTTP server stops goes down
    // within fall x interval + timeout, while its slice still says ready.
    let checked = "10.99.19.3";
    let mut http: Vec<HttpOk> = node.pods[3..]
        .iter()
        .map(|p| HttpOk::start(&p.ns, SocketAddr::new(p.v4.into(), 8081)))
        .collect();
    let policy = json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "ServicePolicy",
        "metadata": {"name": "checked"},
        "spec": {
            "targetRefs": [{"group": "", "kind": "Service", "name": "checked"}],
            "healthCheck": {"type": "http", "port": 8081, "path": "/healthz",
                            "interval": "300ms", "timeout": "150ms", "rise": 2, "fall": 2},
        },
    });
    let pol: Api<kube::api::DynamicObject> = Api::namespaced_with(
        t.admin.clone(),
        &t.ns,
        &kube::discovery::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "rivora.dev",
            "v1alpha1",
            "ServicePolicy",
        )),
    );
    pol.patch(
        "checked",
        &PatchParams::apply(FM).force(),
        &Patch::Apply(&policy),
    )
    .await
    .unwrap();
    service("checked", checked, json!({}), own.clone()).await;
    programmed(&agent, checked, 2).await;
    lab.route_vip_via(checked.parse().unwrap(), 1).unwrap();
    // Probed (not merely healthy by default): each backend has a passing HTTP probe.
    for p in &own {
        wait_for("every pod's HTTP probe passes", WAIT, || async {
            let bs = agent.api().backends().await.map_err(|e| e.to_string())?;
            let b = bs
                .iter()
                .find(|b| b.address == p.to_string() && b.port == 8080)
                .ok_or_else(|| format!("no backend {p}"))?;
            match &b.probe {
                Some(probe) if probe.last_result == "ok" && b.state == "healthy" => Ok(()),
                other => Err(format!("{p}: state {} probe {other:?}", b.state)),
            }
        })
        .await;
    }
    let stopped = std::time::Instant::now();
    drop(http.remove(0));
    let (interval, timeout, fall) = (Duration::from_millis(300), Duration::from_millis(150), 2u32);
    let bound = interval * fall + timeout;
    // Slack: one interval of phase (the stop can land just after a probe) plus scheduling.
    let slack = interval + Duration::from_millis(200);
    wait_for(
        "the stopped pod is probed down",
        bound + slack + Duration::from_secs(2),
        || async {
            match backend_state(&agent, checked, own[0]).await?.as_str() {
                "down" => Ok(()),
                other => Err(format!("{}: {other}", own[0])),
            }
        },
    )
    .await;
    let took = stopped.elapsed();
    eprintln!("HTTP check: down after {took:?} (bound {bound:?} + slack {slack:?})");
    assert!(
        took <= bound + slack,
        "down after {took:?}, over {bound:?} + {slack:?}"
    );
    let target = SocketAddr::new(checked.parse().unwrap(), 80);
    let r = tcp_round(&lab.client, target, 60, 8, Duration::from_secs(3));
    assert!(r.all_ok(), "{r}");
    assert!(
        !r.per_backend.contains_key(&node.pods[3].name),
        "new connections avoid the down pod: {r}"
    );
    assert_eq!(r.per_backend.get(&node.pods[4].name), Some(&60), "{r}");
    drop(http);
    assert!(!agent.log().contains("ERROR"), "{}", agent.log());
}
