//! `rivorad --kubernetes` against a real API server (kube-testbed), no packet traffic: the real
//! rivorad binary runs in a node namespace of its own (its own pin directory and socket),
//! attached to the test bed's bridge, as the ServiceAccount bound to deploy/rbac/rivorad.yaml.
//! The test writes Services (with the status rivora-controller would write) and EndpointSlices
//! (as the controller-manager would) and reads what rivorad programmed through its API and its
//! RivoraNode.
//!
//! Every test has its own namespaces, object names, node name, pin directory and
//! `--load-balancer-class`, so the rivorads of tests running in parallel on the one API server
//! of this binary never see each other's Services. Needs root and `scripts/build-testdeps.sh`.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use rivora_k8s_api::RivoraNode;
use rivora_kube_testbed::{TestBed, ensure_namespace, unique_name};
use serde_json::json;

mod k8s_common;
use k8s_common::*;

/// A LoadBalancer Service of `class` with one TCP port `http` 80, and the status
/// rivora-controller would give it (`ingress` as its address).
async fn lb_service(admin: &Client, ns: &str, name: &str, class: &str, ingress: &str) {
    put_lb_service(admin, ns, class, name, ingress, http_port(), json!({})).await;
}

/// The EndpointSlice `name` of Service `service`: ready endpoints at `addrs`, port `http` 8080.
async fn slice(admin: &Client, ns: &str, name: &str, service: &str, addrs: &[&str], node: &str) {
    let api: Api<EndpointSlice> = Api::namespaced(admin.clone(), ns);
    let endpoints: Vec<serde_json::Value> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            json!({
                "addresses": [a],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": node,
                "targetRef": {"kind": "Pod", "namespace": ns, "name": format!("{service}-{i}")},
            })
        })
        .collect();
    let s: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
    .unwrap();
    api.patch(name, &PatchParams::apply(FM).force(), &Patch::Apply(&s))
        .await
        .unwrap();
}

fn vip_name(ns: &str, svc: &str, addr: &str) -> String {
    format!("k8s/{ns}/{svc}/http/tcp/{addr}")
}

/// The backends (`addr:port`) of the VIP at `addr`:80/tcp, and its name; Err says what is
/// there instead.
fn vip_at(vips: &[rivora_api::VipInfo], addr: &str) -> Result<(String, BTreeSet<String>), String> {
    vips.iter()
        .find(|v| v.address == addr && v.port == 80 && v.protocol == "tcp")
        .map(|v| {
            (
                v.name.clone(),
                v.backends
                    .iter()
                    .map(|b| format!("{}:{}", b.address, b.port))
                    .collect(),
            )
        })
        .ok_or_else(|| {
            format!(
                "no VIP at {addr}:80; VIPs: {:?}",
                vips.iter()
                    .map(|v| format!("{} {}:{}", v.name, v.address, v.port))
                    .collect::<Vec<_>>()
            )
        })
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

async fn rivora_node(
    admin: &Client,
    name: &str,
) -> Result<rivora_k8s_api::RivoraNodeStatus, String> {
    Api::<RivoraNode>::all(admin.clone())
        .get(name)
        .await
        .map_err(|e| e.to_string())?
        .status
        .ok_or_else(|| format!("RivoraNode {name} has no status yet"))
}

fn condition(s: &rivora_k8s_api::RivoraNodeStatus, t: &str) -> String {
    s.conditions
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| format!("{} {}", c.status, c.reason))
        .unwrap_or_else(|| "absent".into())
}

/// (a) and (c): a Service with an address and slices becomes a VIP with those backends, a
/// slice change follows, a deleted Service's VIP goes; the RivoraNode says what is programmed;
/// the ServiceAccount can do what rivorad does and is refused Service status writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_and_slices_become_vips_and_follow_changes() {
    let bed = TestBed::shared();
    let admin = bed.admin_client().await.unwrap();
    install_shipped_crds(bed).await;
    let sa_ns = unique_name("rvd");
    let ns = unique_name("svc");
    ensure_namespace(&admin, &ns).await.unwrap();
    let (token, sa) = rivorad_identity(bed, &admin, &sa_ns).await;
    let mut node = NodeAgent::new(bed, &admin, "node-a", &token).await;
    let vip = "192.0.2.10";
    lb_service(&admin, &ns, "web", &node.class, vip).await;
    slice(
        &admin,
        &ns,
        "web-1",
        "web",
        &["10.60.0.1", "10.60.0.2"],
        &node.name,
    )
    .await;
    // A Service of another class is not ours: no VIP for it.
    lb_service(&admin, &ns, "other", "example.com/lb", "192.0.2.11").await;
    node.start();

    let started = Instant::now();
    let (name, backends) = wait_for("the Service's VIP is programmed", WAIT, || async {
        let v = node.vips().await?;
        let got = vip_at(&v, vip)?;
        if got.1 == set(&["10.60.0.1:8080", "10.60.0.2:8080"]) {
            Ok(got)
        } else {
            Err(format!("backends {:?}", got.1))
        }
    })
    .await;
    eprintln!("VIP programmed {:?} after start", started.elapsed());
    assert_eq!(name, vip_name(&ns, "web", vip));
    assert_eq!(backends.len(), 2);
    // What rivoractl shows: the Service, and each backend's pod and node.
    let info = node
        .vips()
        .await
        .unwrap()
        .into_iter()
        .find(|v| v.address == vip)
        .unwrap();
    assert_eq!(
        info.origin.as_deref(),
        Some(format!("service {ns}/web port http").as_str())
    );
    let targets: BTreeSet<String> = info
        .backends
        .iter()
        .map(|b| format!("{:?} {:?} {}", b.target, b.node, b.terminating))
        .collect();
    assert_eq!(
        targets,
        (0..2)
            .map(|i| format!("Some(\"Pod {ns}/web-{i}\") Some({:?}) false", node.name))
            .collect::<BTreeSet<_>>()
    );
    let v = node.vips().await.unwrap();
    assert!(
        vip_at(&v, "192.0.2.11").is_err(),
        "another class's Service is not programmed"
    );
    let k = node.kubernetes().await.unwrap();
    assert!(k.initial_sync_complete, "{k:?}");
    assert!(k.watches.iter().all(|w| w.listed), "{:?}", k.watches);
    assert_eq!(k.services.get("programmed"), Some(&1), "{k:?}");

    // An EndpointSlice change shows up (one endpoint replaced).
    let changed = Instant::now();
    slice(
        &admin,
        &ns,
        "web-1",
        "web",
        &["10.60.0.2", "10.60.0.3"],
        &node.name,
    )
    .await;
    wait_for("the slice change reaches the VIP", WAIT, || async {
        let got = vip_at(&node.vips().await?, vip)?;
        if got.1 == set(&["10.60.0.2:8080", "10.60.0.3:8080"]) {
            Ok(())
        } else {
            Err(format!("backends {:?}", got.1))
        }
    })
    .await;
    eprintln!(
        "slice change applied {:?} after the write",
        changed.elapsed()
    );

    // The node's report, written by rivorad as the ServiceAccount.
    let report = wait_for("RivoraNode reports the Service", WAIT, || async {
        let s = rivora_node(&admin, &node.name).await?;
        // A Service programmed as asked is counted, not listed (the list holds problems).
        if s.services_programmed == 1 && condition(&s, "Ready") == "True Applied" {
            Ok(s)
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    assert_eq!(condition(&report, "InitialSyncComplete"), "True Complete");
    assert!(report.services.is_empty(), "no problem to list: {report:?}");
    assert_eq!(
        report.services_total, 1,
        "only this class's Services: {report:?}"
    );
    let dp = report.datapath.as_ref().expect("datapath reported");
    assert_eq!((dp.interface.as_str(), dp.persistent), ("up0", false));
    // The report carries a heartbeat, written again within the heartbeat period with nothing
    // changed (so rivora-controller can tell a gone rivorad from a quiet one).
    let first_beat = report.heartbeat_time.clone().expect("heartbeatTime set");
    assert_eq!(
        report.gateway_controller.as_deref(),
        Some(rivora_k8s_api::class::GATEWAY_CONTROLLER_NAME)
    );
    let beat = wait_for(
        "a heartbeat with nothing changed",
        // The period plus a write's timeout and retry (k8s-source agent.rs, WRITE_TIMEOUT),
        // with room for a loaded machine.
        Duration::from_secs(rivora_k8s_api::rivora_node::HEARTBEAT_SECS as u64 + 30),
        || async {
            let s = rivora_node(&admin, &node.name).await?;
            match s.heartbeat_time {
                Some(t) if t.0 > first_beat.0 => Ok(t),
                other => Err(format!("heartbeat {other:?}, first {first_beat:?}")),
            }
        },
    )
    .await;
    eprintln!(
        "heartbeat after {} s",
        beat.0.as_second() - first_beat.0.as_second()
    );
    let managers: Vec<String> = Api::<RivoraNode>::all(admin.clone())
        .get(&node.name)
        .await
        .unwrap()
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(
        managers,
        ["rivorad", "rivorad"],
        "object and status, both by rivorad"
    );
    let node_uid = Api::<Node>::all(admin.clone())
        .get(&node.name)
        .await
        .unwrap()
        .metadata
        .uid;
    let owners: Vec<(String, String, Option<String>)> = Api::<RivoraNode>::all(admin.clone())
        .get(&node.name)
        .await
        .unwrap()
        .owner_references()
        .iter()
        .map(|o| (o.kind.clone(), o.name.clone(), Some(o.uid.clone())))
        .collect();
    assert_eq!(
        owners,
        [("Node".to_string(), node.name.clone(), node_uid)],
        "the RivoraNode goes with its Node"
    );

    // The same through the metrics.
    let (code, _, metrics) = http_get(&node, 9469, "/metrics").unwrap();
    assert_eq!(code, 200);
    for line in [
        "rivora_k8s_initial_sync_complete 1",
        "rivora_k8s_unclaimed_vips 0",
        "rivora_k8s_services{state=\"programmed\"} 1",
        "rivora_k8s_services{state=\"failing\"} 0",
        "rivora_k8s_store_objects{kind=\"Node\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} missing:\n{metrics}"
        );
    }
    assert!(
        metrics.contains("rivora_k8s_watch_events_total{kind=\"EndpointSlice\"}")
            && metrics.contains("rivora_k8s_node_report_writes_total{result=\"ok\"}"),
        "{metrics}"
    );

    // Deleting the Service removes its VIP.
    Api::<Service>::namespaced(admin.clone(), &ns)
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the deleted Service's VIP is removed", WAIT, || async {
        let v = node.vips().await?;
        match vip_at(&v, vip) {
            Err(_) => Ok(()),
            Ok(got) => Err(format!("still programmed: {got:?}")),
        }
    })
    .await;

    // (c) What rivorad needs, the ServiceAccount may; Service status it may not write.
    for (what, ok) in [
        (
            "list endpointslices",
            Api::<EndpointSlice>::all(sa.clone())
                .list(&ListParams::default().limit(1))
                .await
                .is_ok(),
        ),
        (
            "list servicepolicies",
            Api::<rivora_k8s_api::ServicePolicy>::all(sa.clone())
                .list(&ListParams::default().limit(1))
                .await
                .is_ok(),
        ),
        (
            "get nodes",
            Api::<Node>::all(sa.clone()).get(&node.name).await.is_ok(),
        ),
    ] {
        assert!(ok, "the ServiceAccount cannot {what}");
    }
    let status_write = Api::<Service>::namespaced(sa.clone(), &ns)
        .patch_status(
            "other",
            &PatchParams::apply("rivorad").force(),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Service",
                "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.99"}]}},
            })),
        )
        .await;
    match status_write {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("services/status must be forbidden to rivorad, got {other:?}"),
    }
    let slice_write = Api::<EndpointSlice>::namespaced(sa.clone(), &ns)
        .delete("web-1", &DeleteParams::default())
        .await;
    assert!(
        matches!(slice_write, Err(kube::Error::Api(ref e)) if e.code == 403),
        "endpointslice writes must be forbidden: {slice_write:?}"
    );
    assert!(!node.log().contains("ERROR"), "{}", node.log());
}

/// (b) The initial-sync gate over adopted VIPs: after a restart the VIP of a Service deleted
/// while rivorad was down stays while a Service of the first list cannot be translated (its
/// endpoint is a VIP address: a loop), and the status says why; once that Service is fixed the
/// gate opens and the stale VIP goes. The other Service's VIP is claimed, never removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopted_vips_stay_until_the_initial_sync_completes() {
    let bed = TestBed::shared();
    let admin = bed.admin_client().await.unwrap();
    install_shipped_crds(bed).await;
    let sa_ns = unique_name("rvd");
    let ns = unique_name("svc");
    ensure_namespace(&admin, &ns).await.unwrap();
    let (token, _) = rivorad_identity(bed, &admin, &sa_ns).await;
    let mut node = NodeAgent::new(bed, &admin, "node-b", &token).await;
    let (keep_vip, gone_vip, bad_vip) = ("192.0.2.20", "192.0.2.21", "192.0.2.22");
    lb_service(&admin, &ns, "keep", &node.class, keep_vip).await;
    slice(&admin, &ns, "keep-1", "keep", &["10.61.0.1"], &node.name).await;
    lb_service(&admin, &ns, "gone", &node.class, gone_vip).await;
    slice(&admin, &ns, "gone-1", "gone", &["10.61.0.2"], &node.name).await;
    node.start();
    wait_for("both VIPs programmed", WAIT, || async {
        let v = node.vips().await?;
        vip_at(&v, keep_vip)?;
        vip_at(&v, gone_vip)?;
        Ok(())
    })
    .await;

    // rivorad dies; meanwhile one Service is deleted and a broken one appears.
    node.kill();
    Api::<Service>::namespaced(admin.clone(), &ns)
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    lb_service(&admin, &ns, "bad", &node.class, bad_vip).await;
    slice(&admin, &ns, "bad-1", "bad", &[keep_vip], &node.name).await;
    node.start();

    // The first full pass: keep is claimed, bad fails and holds the gate, gone's VIP stays.
    let k = wait_for("the gate is held by the failing Service", WAIT, || async {
        let k = node.kubernetes().await?;
        if !k.initial_sync_complete
            && k.offered_generation >= 1
            && k.blocking.iter().any(|b| b.contains(&format!("{ns}/bad")))
        {
            Ok(k)
        } else {
            Err(format!("{k:?}"))
        }
    })
    .await;
    assert!(
        k.blocking[0].contains("is a VIP address"),
        "the reason is shown: {:?}",
        k.blocking
    );
    assert_eq!(k.services.get("failing"), Some(&1), "{k:?}");
    assert_eq!(
        k.unclaimed_vips, 1,
        "gone's VIP, adopted and unclaimed: {k:?}"
    );
    wait_for("keep is claimed while gone stays", WAIT, || async {
        let v = node.vips().await?;
        let (keep_name, _) = vip_at(&v, keep_vip)?;
        let (gone_name, gone_backends) = vip_at(&v, gone_vip)?;
        let gone_origin = v
            .iter()
            .find(|x| x.address == gone_vip)
            .and_then(|x| x.origin.clone());
        if keep_name == vip_name(&ns, "keep", keep_vip)
            && gone_name.starts_with("adopted-")
            && gone_origin.as_deref() == Some("adopted, unclaimed")
        {
            assert_eq!(gone_backends, set(&["10.61.0.2:8080"]));
            Ok(())
        } else {
            Err(format!("keep {keep_name}, gone {gone_name}"))
        }
    })
    .await;
    assert!(
        vip_at(&node.vips().await.unwrap(), bad_vip).is_err(),
        "bad has no VIP"
    );
    let report = wait_for("RivoraNode says why the sync is blocked", WAIT, || async {
        let s = rivora_node(&admin, &node.name).await?;
        if condition(&s, "InitialSyncComplete") == "False Blocked"
            && s.blocking.iter().any(|b| b.contains("bad"))
        {
            Ok(s)
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    assert_eq!(report.unclaimed_vips, 1);
    // Still there a while later: nothing removes it while the gate is closed.
    tokio::time::sleep(Duration::from_secs(1)).await;
    vip_at(&node.vips().await.unwrap(), gone_vip)
        .expect("gone's VIP stays while the gate is closed");
    assert!(
        node.log().contains("initial sync not complete"),
        "{}",
        node.log()
    );

    // Fixing the slice opens the gate: gone's VIP goes, bad's arrives, keep stays.
    slice(&admin, &ns, "bad-1", "bad", &["10.61.0.3"], &node.name).await;
    wait_for("the gate opens and the stale VIP goes", WAIT, || async {
        let k = node.kubernetes().await?;
        let v = node.vips().await?;
        if k.initial_sync_complete
            && vip_at(&v, gone_vip).is_err()
            && vip_at(&v, bad_vip).is_ok()
            && vip_at(&v, keep_vip).is_ok()
        {
            Ok(())
        } else {
            Err(format!(
                "gate open {}, unclaimed {}, VIPs {:?}",
                k.initial_sync_complete,
                k.unclaimed_vips,
                v.iter().map(|v| &v.name).collect::<Vec<_>>()
            ))
        }
    })
    .await;
    assert!(
        node.log().contains("initial sync complete"),
        "{}",
        node.log()
    );
    wait_for("RivoraNode says the sync is complete", WAIT, || async {
        let s = rivora_node(&admin, &node.name).await?;
        if condition(&s, "InitialSyncComplete") == "True Complete" && s.unclaimed_vips == 0 {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
}

/// rivorad never waits for the API server: restarted over its pins while the node cannot reach
/// it, rivorad starts, keeps every adopted VIP as it was and shows the watch errors; once the
/// API server is reachable again the Service claims its VIP and the gate opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_changes_nothing() {
    let bed = TestBed::shared();
    let admin = bed.admin_client().await.unwrap();
    install_shipped_crds(bed).await;
    let sa_ns = unique_name("rvd");
    let ns = unique_name("svc");
    ensure_namespace(&admin, &ns).await.unwrap();
    let (token, _) = rivorad_identity(bed, &admin, &sa_ns).await;
    let mut node = NodeAgent::new(bed, &admin, "node-c", &token).await;
    let vip = "192.0.2.30";
    lb_service(&admin, &ns, "web", &node.class, vip).await;
    slice(
        &admin,
        &ns,
        "web-1",
        "web",
        &["10.62.0.1", "10.62.0.2"],
        &node.name,
    )
    .await;
    node.start();
    wait_for("the VIP is programmed", WAIT, || async {
        vip_at(&node.vips().await?, vip).map(|_| ())
    })
    .await;
    node.kill();
    node.node_ns()
        .run(&["ip", "link", "set", "kapi", "down"])
        .unwrap();
    node.start();
    let k = wait_for("watch errors are shown", WAIT, || async {
        let k = node.kubernetes().await?;
        if k.watches.iter().all(|w| !w.listed && w.errors > 0) {
            Ok(k)
        } else {
            Err(format!("{:?}", k.watches))
        }
    })
    .await;
    assert_eq!(
        k.offered_generation, 0,
        "nothing offered without a full list: {k:?}"
    );
    assert!(!k.initial_sync_complete);
    assert_eq!(k.unclaimed_vips, 1);
    let (name, backends) = vip_at(&node.vips().await.unwrap(), vip).unwrap();
    assert!(name.starts_with("adopted-"), "{name}");
    assert_eq!(backends, set(&["10.62.0.1:8080", "10.62.0.2:8080"]));

    node.node_ns()
        .run(&["ip", "link", "set", "kapi", "up"])
        .unwrap();
    wait_for(
        "the Service claims its VIP once the API server is back",
        Duration::from_secs(90),
        || async {
            let k = node.kubernetes().await?;
            let (name, _) = vip_at(&node.vips().await?, vip)?;
            if k.initial_sync_complete && name == vip_name(&ns, "web", vip) {
                Ok(())
            } else {
                Err(format!(
                    "gate {}, VIP {name}, watches {:?}",
                    k.initial_sync_complete, k.watches
                ))
            }
        },
    )
    .await;
}

/// GET /healthz on `port` of the node's loopback, from inside the node namespace: (status, the
/// weight header, body).
fn health_get(node: &NodeAgent, port: u16) -> Result<(u16, String, String), String> {
    // A port nobody serves says nothing of why: the end of rivorad's log does.
    http_get(node, port, "/healthz").map_err(|e| {
        let log = node.log();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        format!(
            "{e}; rivorad's last log lines:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    })
}

/// GET `path` on `port` of the node's loopback, from inside the node namespace.
fn http_get(node: &NodeAgent, port: u16, path: &str) -> Result<(u16, String, String), String> {
    http_get_in(
        node.node_ns(),
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        path,
    )
}

/// healthCheckNodePort of an ETP Local Service: 200 with kube-proxy's body and weight header
/// while this node has a ready local endpoint, 503 once it is terminating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_node_port_answers_as_kube_proxy() {
    let bed = TestBed::shared();
    let admin = bed.admin_client().await.unwrap();
    install_shipped_crds(bed).await;
    let sa_ns = unique_name("rvd");
    let ns = unique_name("svc");
    ensure_namespace(&admin, &ns).await.unwrap();
    let (token, _) = rivorad_identity(bed, &admin, &sa_ns).await;
    let mut node = NodeAgent::new(bed, &admin, "node-d", &token).await;
    let api: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "local"},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": node.class,
            "externalTrafficPolicy": "Local",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
        },
    }))
    .unwrap();
    let created = api
        .patch(
            "local",
            &PatchParams::apply(FM).force(),
            &Patch::Apply(&svc),
        )
        .await
        .unwrap();
    let port = created
        .spec
        .as_ref()
        .and_then(|s| s.health_check_node_port)
        .expect("the API server allocates a healthCheckNodePort") as u16;
    api.patch_status(
        "local",
        &PatchParams::apply("rivora-controller").force(),
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "Service",
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.40", "ipMode": "VIP"}]}},
        })),
    )
    .await
    .unwrap();
    let here = node.name.clone();
    let write_slice = |local_terminating: bool| {
        let admin = admin.clone();
        let ns = ns.clone();
        let here = here.clone();
        async move {
            let s: EndpointSlice = serde_json::from_value(json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "local-1", "labels": {"kubernetes.io/service-name": "local"}},
                "addressType": "IPv4",
                "endpoints": [
                    {"addresses": ["10.63.0.1"], "nodeName": here, "conditions": if local_terminating {
                        json!({"ready": false, "serving": true, "terminating": true})
                    } else {
                        json!({"ready": true, "serving": true, "terminating": false})
                    }},
                    {"addresses": ["10.63.0.2"], "nodeName": "elsewhere",
                     "conditions": {"ready": true, "serving": true, "terminating": false}},
                ],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }))
            .unwrap();
            Api::<EndpointSlice>::namespaced(admin, &ns)
                .patch(
                    "local-1",
                    &PatchParams::apply(FM).force(),
                    &Patch::Apply(&s),
                )
                .await
                .unwrap();
        }
    };
    write_slice(false).await;
    node.start();
    let (status, weight, body) = wait_for("the health check port answers 200", WAIT, || async {
        match health_get(&node, port)? {
            r if r.0 == 200 => Ok(r),
            r => Err(format!("{r:?}")),
        }
    })
    .await;
    assert_eq!((status, weight.as_str()), (200, "1"));
    assert_eq!(
        body,
        format!(
            "{{\n\t\"service\": {{\n\t\t\"namespace\": \"{ns}\",\n\t\t\"name\": \"local\"\n\t}},\n\t\"localEndpoints\": 1,\n\t\"serviceProxyHealthy\": true\n}}"
        )
    );
    // Only the local endpoint is a backend (ETP Local).
    let (_, backends) = vip_at(&node.vips().await.unwrap(), "192.0.2.40").unwrap();
    assert_eq!(backends, set(&["10.63.0.1:8080"]));

    // The last local endpoint starts terminating: 503, no local endpoint counted.
    write_slice(true).await;
    let (_, weight, body) = wait_for("the health check port answers 503", WAIT, || async {
        match health_get(&node, port)? {
            r if r.0 == 503 => Ok(r),
            r => Err(format!("{r:?}")),
        }
    })
    .await;
    assert_eq!(weight, "0");
    assert!(body.contains("\"localEndpoints\": 0"), "{body}");
    let k = node.kubernetes().await.unwrap();
    let p = k
        .health_check_node_ports
        .iter()
        .find(|p| p.port == port)
        .unwrap_or_else(|| panic!("{k:?}"));
    assert!(p.serving && p.error.is_none(), "{p:?}");
    assert_eq!(p.service, format!("{ns}/local"));
    assert!(
        k.health_check_requests.get("200").copied().unwrap_or(0) >= 1,
        "{k:?}"
    );
    assert!(
        k.health_check_requests.get("503").copied().unwrap_or(0) >= 1,
        "{k:?}"
    );
}

/// (d) `--kubernetes` with `--config` or `--check-config` exits with our message before
/// anything is touched: no pin directory appears.
#[test]
fn kubernetes_refuses_a_config_file_before_touching_anything() {
    let pin_dir = format!("/sys/fs/bpf/rivora-e2e-k8sconflict-{}", std::process::id());
    for flag in ["--config", "--check-config"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rivorad"))
            .args([
                "--kubernetes",
                "--node-name",
                "n1",
                flag,
                "/nonexistent/rivorad.yaml",
                "--pin-dir",
                &pin_dir,
                "--api-socket",
                &format!("/tmp/rivora-e2e-k8sconflict-{}.sock", std::process::id()),
            ])
            .args(if flag == "--config" {
                &["--interface", "lo"][..]
            } else {
                &[][..]
            })
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "--kubernetes and {flag} exclude each other: a node runs static-YAML VIPs or \
                 Kubernetes VIPs, never both"
            )),
            "{flag}: {stderr}"
        );
        assert!(
            !Path::new(&pin_dir).exists(),
            "{flag}: a pin directory was created"
        );
    }
}
