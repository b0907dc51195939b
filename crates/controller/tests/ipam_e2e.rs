//! rivora-controller's write loop against the real API server: 200 Services over three pools get
//! distinct addresses from the right pools, a failure is a Service condition plus an Event, a
//! freed address goes to the waiting Service, a replaced controller changes nothing, and a
//! Service that stops being a LoadBalancer gives its address back.
//!
//! The controller runs as a ServiceAccount bound only to the roles in deploy/rbac, which proves
//! they are enough; at the end that identity is refused other writes.
//!
//! One controller per test binary (pools are cluster-wide), so this is one test in phases.
//! Needs root and `scripts/build-testdeps.sh`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Event, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rivora_controller::ipam::blocks::Block;
use rivora_controller::observe::{self, ANNOTATION_POOL, LOAD_BALANCER_CLASS};
use rivora_k8s_api::AddressPool;
use rivora_kube_testbed::{TestBed, ensure_namespace, unique_name};
use serde_json::json;

mod common;
use common::controller_identity;

struct Controller {
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start_controller(client: Client, lease_ns: &str, identity: &str) -> Controller {
    let metrics = Arc::new(rivora_controller::metrics::Metrics::new());
    Controller {
        task: common::spawn_replica(client, lease_ns, identity, metrics),
    }
}

fn pool(name: &str, addresses: &[&str], want: Option<&str>, auto: bool) -> AddressPool {
    serde_json::from_value(json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
        "metadata": { "name": name },
        "spec": {
            "addresses": addresses,
            "autoAssign": auto,
            "serviceSelector": want.map(|w| json!({"matchLabels": {"want": w}})),
        }
    }))
    .unwrap()
}

fn lb_service(name: &str, want: &str, annotations: serde_json::Value) -> Service {
    lb_service_port(name, want, annotations, 80)
}

fn lb_service_port(name: &str, want: &str, annotations: serde_json::Value, port: i32) -> Service {
    let (families, policy) = match want {
        "v6" => (json!(["IPv6"]), "SingleStack"),
        "dual" => (json!(["IPv4", "IPv6"]), "RequireDualStack"),
        _ => (json!(["IPv4"]), "SingleStack"),
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": name, "labels": {"want": want}, "annotations": annotations },
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": LOAD_BALANCER_CLASS,
            "ipFamilies": families,
            "ipFamilyPolicy": policy,
            "ports": [{ "port": port, "protocol": "TCP" }],
        }
    }))
    .unwrap()
}

/// Polls until `check` is Ok over the Services of `ns`, reporting what it last saw.
async fn wait_for<T>(
    what: &str,
    limit: Duration,
    api: &Api<Service>,
    mut check: impl FnMut(&[Service]) -> Result<T, String>,
) -> (T, Duration) {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < limit {
        let list = api.list(&ListParams::default()).await.unwrap().items;
        match check(&list) {
            Ok(v) => return (v, start.elapsed()),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out after {limit:?} waiting for {what}; last: {last}");
}

/// Waits until Service `name` has no address, our condition False with `reason`, and a Warning
/// Event with that reason; returns the condition's message.
async fn expect_failure(client: &Client, ns: &str, name: &str, reason: &str) -> String {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let (message, _) = wait_for(
        &format!("{name}: {reason}"),
        Duration::from_secs(10),
        &services,
        |list| {
            let s = list
                .iter()
                .find(|s| s.name_any() == name)
                .ok_or("not listed")?;
            let c = observe::our_condition(s).ok_or("no condition yet")?;
            if c.status == "False" && c.reason == reason && ingress(s).is_empty() {
                Ok(c.message.clone())
            } else {
                Err(format!("{:?} {c:?}", ingress(s)))
            }
        },
    )
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let evs = events.list(&ListParams::default()).await.unwrap().items;
        if let Some(e) = evs.iter().find(|e| {
            e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason)
        }) {
            assert_eq!(e.type_.as_deref(), Some("Warning"));
            println!(
                "{name}: condition False/{reason}, Warning Event: {}",
                e.message.as_deref().unwrap_or("")
            );
            return message;
        }
        assert!(Instant::now() < deadline, "no {reason} Event for {name}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn ingress(svc: &Service) -> Vec<IpAddr> {
    observe::current_ingress(svc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_assigns_reports_frees_and_survives_a_restart() {
    let bed = TestBed::shared();
    bed.install_crds(&rivora_k8s_api::crds()).await.unwrap();
    let client = bed.admin_client().await.unwrap();
    let lease_ns = unique_name("ctrl");
    let ns = unique_name("svc");
    ensure_namespace(&client, &lease_ns).await.unwrap();
    ensure_namespace(&client, &ns).await.unwrap();

    let pools: Api<AddressPool> = Api::all(client.clone());
    let pp = PostParams::default();
    let blocks: BTreeMap<&str, Vec<&str>> = [
        ("v4", vec!["10.10.0.0/24"]),
        ("v6", vec!["fd00:10::/120"]),
        ("dual", vec!["10.20.0.0/25", "fd00:20::/121"]),
    ]
    .into();
    for (want, addrs) in &blocks {
        pools
            .create(&pp, &pool(&format!("pool-{want}"), addrs, Some(want), true))
            .await
            .unwrap();
    }
    pools
        .create(&pp, &pool("pool-small", &["10.30.0.0/30"], None, false))
        .await
        .unwrap();

    let identity = controller_identity(bed, &client, &lease_ns).await;
    let mut controller = start_controller(identity.clone(), &lease_ns, "replica-1").await;

    // Phase 1: 200 Services over three pools.
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let created = Instant::now();
    for i in 0..200 {
        let want = ["v4", "v6", "dual"][i % 3];
        services
            .create(&pp, &lb_service(&format!("s{i:03}"), want, json!({})))
            .await
            .unwrap();
    }
    let parsed: BTreeMap<&str, Vec<Block>> = blocks
        .iter()
        .map(|(w, a)| (*w, a.iter().map(|b| Block::parse(b).unwrap()).collect()))
        .collect();
    let (first, waited) = wait_for(
        "200 Services assigned",
        Duration::from_secs(60),
        &services,
        |list| {
            let mut seen = BTreeSet::new();
            let mut by_name = BTreeMap::new();
            let mut done = 0;
            for s in list.iter().filter(|s| s.name_any().starts_with('s')) {
                let want = s.labels()["want"].clone();
                let ips = ingress(s);
                let expected = if want == "dual" { 2 } else { 1 };
                if ips.len() != expected {
                    continue;
                }
                for ip in &ips {
                    if !parsed[want.as_str()].iter().any(|b| b.contains(ip)) {
                        return Err(format!("{} got {ip}, outside pool-{want}", s.name_any()));
                    }
                    if !seen.insert(*ip) {
                        return Err(format!("{ip} given twice"));
                    }
                }
                by_name.insert(s.name_any(), ips);
                done += 1;
            }
            if done == 200 {
                Ok(by_name)
            } else {
                Err(format!("{done}/200 assigned"))
            }
        },
    )
    .await;
    println!(
        "200 Services created and assigned in {:?} (assignment wait {waited:?})",
        created.elapsed()
    );
    let s000 = services.get("s000").await.unwrap();
    let condition = observe::our_condition(&s000).cloned().unwrap();
    println!(
        "s000 generation {:?}, condition {condition:?}",
        s000.metadata.generation
    );
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "Assigned")
    );
    // kube-apiserver 1.35 keeps no metadata.generation on Services: observedGeneration follows
    // whatever the Service carries (absent here), never an invented number.
    assert_eq!(condition.observed_generation, s000.metadata.generation);

    // Phase 2: each failure is a condition and an Event; sharing works when compatible.
    services
        .create(
            &pp,
            &lb_service(
                "outside",
                "v4",
                json!({"rivora.dev/load-balancer-ips": "192.0.2.77"}),
            ),
        )
        .await
        .unwrap();
    expect_failure(&client, &ns, "outside", "AddressOutsidePools").await;
    let s000_ip = first["s000"][0];
    services
        .create(
            &pp,
            &lb_service(
                "taken",
                "v4",
                json!({"rivora.dev/load-balancer-ips": s000_ip.to_string()}),
            ),
        )
        .await
        .unwrap();
    let msg = expect_failure(&client, &ns, "taken", "AddressInUse").await;
    assert!(msg.contains(&format!("{ns}/s000")), "{msg}");
    let mut nov6 = lb_service("nov6", "v4", json!({}));
    if let Some(spec) = nov6.spec.as_mut() {
        spec.ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
        spec.ip_family_policy = Some("RequireDualStack".into());
    }
    services.create(&pp, &nov6).await.unwrap();
    expect_failure(&client, &ns, "nov6", "NoPool").await;
    let key = json!({"rivora.dev/sharing-key": "web"});
    services
        .create(&pp, &lb_service_port("share-a", "v4", key.clone(), 80))
        .await
        .unwrap();
    services
        .create(&pp, &lb_service_port("share-b", "v4", key.clone(), 443))
        .await
        .unwrap();
    let (shared, _) = wait_for(
        "share-a and share-b on one address",
        Duration::from_secs(10),
        &services,
        |list| {
            let get = |n: &str| {
                list.iter()
                    .find(|s| s.name_any() == n)
                    .map(ingress)
                    .unwrap_or_default()
            };
            let (a, b) = (get("share-a"), get("share-b"));
            if !a.is_empty() && a == b {
                Ok(a)
            } else {
                Err(format!("{a:?} {b:?}"))
            }
        },
    )
    .await;
    println!("share-a and share-b share {shared:?}");
    let mut clash = json!({"rivora.dev/sharing-key": "web"});
    clash["rivora.dev/load-balancer-ips"] = json!(shared[0].to_string());
    services
        .create(&pp, &lb_service_port("share-c", "v4", clash, 80))
        .await
        .unwrap();
    let msg = expect_failure(&client, &ns, "share-c", "SharingRefused").await;
    assert!(msg.contains("TCP/80"), "{msg}");

    // Phase 3: exhaust the small pool, free one address, the waiting Service gets it.
    for i in 0..5 {
        services
            .create(
                &pp,
                &lb_service(
                    &format!("small{i}"),
                    "v4",
                    json!({ANNOTATION_POOL: "pool-small"}),
                ),
            )
            .await
            .unwrap();
    }
    let (waiting, _) = wait_for(
        "the small pool exhausted",
        Duration::from_secs(10),
        &services,
        |list| {
            let smalls: Vec<&Service> = list
                .iter()
                .filter(|s| s.name_any().starts_with("small"))
                .collect();
            let assigned = smalls.iter().filter(|s| !ingress(s).is_empty()).count();
            let exhausted: Vec<&&Service> = smalls
                .iter()
                .filter(|s| observe::our_condition(s).is_some_and(|c| c.reason == "PoolExhausted"))
                .collect();
            if assigned == 4 && exhausted.len() == 1 {
                Ok(exhausted[0].name_any())
            } else {
                Err(format!(
                    "{assigned} assigned, {} exhausted",
                    exhausted.len()
                ))
            }
        },
    )
    .await;
    let victim = (0..5)
        .map(|i| format!("small{i}"))
        .find(|n| *n != waiting)
        .unwrap();
    let freed = ingress(&services.get(&victim).await.unwrap());
    services
        .delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    let (_, took) = wait_for(
        "the freed address reassigned",
        Duration::from_secs(5),
        &services,
        |list| {
            let s = list
                .iter()
                .find(|s| s.name_any() == waiting)
                .ok_or("gone")?;
            if ingress(s) == freed {
                Ok(())
            } else {
                Err(format!("{:?}", ingress(s)))
            }
        },
    )
    .await;
    println!("freed {freed:?} from {victim}; {waiting} got it {took:?} after the delete");
    assert!(took < Duration::from_secs(1), "took {took:?}");

    // Phase 3b: two overlapping IPv6 ranges in one pool pass the CRD (CEL cannot compare IPv6
    // ranges): the controller says Valid=False naming both, and counts each address once
    // (32 + 13 listed, 33 distinct).
    pools
        .create(
            &pp,
            &pool(
                "pool-v6-overlap",
                &["fd00:31::1-fd00:31::20", "fd00:31::15-fd00:31::21"],
                None,
                false,
            ),
        )
        .await
        .expect("the CRD admits overlapping IPv6 ranges");
    let start = Instant::now();
    let (valid, v6) = loop {
        let p = pools.get("pool-v6-overlap").await.unwrap();
        let st = p.status.unwrap_or_default();
        let valid = st.conditions.iter().find(|c| c.type_ == "Valid").cloned();
        if let (Some(c), Some(v6)) = (&valid, st.ipv6)
            && c.status == "False"
        {
            break (c.clone(), v6);
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "pool-v6-overlap not flagged within 10 s; last status: {valid:?} {:?}",
            st.ipv6
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    println!(
        "pool-v6-overlap: Valid={} {}: {}; ipv6 {v6:?}",
        valid.status, valid.reason, valid.message
    );
    assert_eq!(valid.reason, "InvalidAddresses");
    assert!(
        valid.message.contains("fd00:31::1-fd00:31::20")
            && valid.message.contains("fd00:31::15-fd00:31::21"),
        "{}",
        valid.message
    );
    assert_eq!((v6.total, v6.available), (33, 33));

    // Phase 4: replace the controller: nothing changes.
    controller.task.abort();
    let _ = (&mut controller.task).await;
    let before: BTreeMap<String, (Vec<IpAddr>, String)> = services
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|s| {
            (
                s.name_any(),
                (ingress(s), s.resource_version().unwrap_or_default()),
            )
        })
        .collect();
    let controller = start_controller(identity.clone(), &lease_ns, "replica-2").await;
    // The new replica waits for the old Lease to expire, then makes its passes.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let after = services.list(&ListParams::default()).await.unwrap().items;
    for s in &after {
        let (ips, rv) = &before[&s.name_any()];
        assert_eq!(&ingress(s), ips, "{} moved after the restart", s.name_any());
        assert_eq!(
            &s.resource_version().unwrap_or_default(),
            rv,
            "{} rewritten",
            s.name_any()
        );
    }
    for (name, ips) in &first {
        assert_eq!(
            &ingress(after.iter().find(|s| &s.name_any() == name).unwrap()),
            ips
        );
    }

    // Phase 5: a Service that stops being a LoadBalancer gives its address back.
    services
        .patch(
            "s001",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "ClusterIP", "loadBalancerClass": null}})),
        )
        .await
        .unwrap();
    wait_for(
        "s001's address released",
        Duration::from_secs(10),
        &services,
        |list| {
            let s = list.iter().find(|s| s.name_any() == "s001").ok_or("gone")?;
            if ingress(s).is_empty() && observe::our_condition(s).is_none() {
                Ok(())
            } else {
                Err(format!("{:?} {:?}", ingress(s), observe::our_condition(s)))
            }
        },
    )
    .await;
    println!("s001 (now ClusterIP) released its address");

    // Phase 6: L2 mode, one speaker. The test writes the nodes' reports as rivorad would: the
    // holder of the speaker Lease lists the ETP Local Services it cannot serve. Such a Service
    // gets L2Reachable False naming the node, and an Event; a served one True; an ETP
    // Cluster one no such condition; when the holder gets an endpoint it turns True.
    use rivora_controller::l2_reach;
    use rivora_k8s_api::RivoraNode;
    let local = |name: &str| {
        let mut s = lb_service(name, "v4", json!({}));
        s.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
        s
    };
    services.create(&pp, &local("l2-unserved")).await.unwrap();
    services.create(&pp, &local("l2-served")).await.unwrap();
    services
        .create(&pp, &lb_service("l2-cluster", "v4", json!({})))
        .await
        .unwrap();
    let nodes: Api<RivoraNode> = Api::all(client.clone());
    let holder = unique_name("l2-holder");
    let standby = unique_name("l2-standby");
    let report = |answering: bool, unserved: Vec<String>| {
        json!({"apiVersion": "rivora.dev/v1alpha1", "kind": "RivoraNode",
            "status": {"announce": {"mode": "l2", "l2Answering": answering,
                "l2Unserved": unserved}}})
    };
    for (name, answering) in [(&holder, true), (&standby, false)] {
        let n: RivoraNode = serde_json::from_value(json!({
            "apiVersion": "rivora.dev/v1alpha1", "kind": "RivoraNode",
            "metadata": {"name": name}, "spec": {},
        }))
        .unwrap();
        nodes.create(&pp, &n).await.unwrap();
        let unserved = vec![format!("{ns}/l2-unserved")];
        nodes
            .patch_status(
                name,
                &PatchParams::apply("rivorad").force(),
                &Patch::Apply(report(answering, unserved)),
            )
            .await
            .unwrap();
    }
    let l2_of = |list: &[Service],
                 name: &str|
     -> Result<Option<(String, String, String)>, String> {
        let s = list
            .iter()
            .find(|s| s.name_any() == name)
            .ok_or("not listed")?;
        if ingress(s).is_empty() {
            return Err(format!("{name} has no address yet"));
        }
        Ok(l2_reach::current(s).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone())))
    };
    let (message, took) = wait_for(
        "L2Reachable on the ETP Local Services",
        Duration::from_secs(10),
        &services,
        |list| {
            let unserved = l2_of(list, "l2-unserved")?;
            let served = l2_of(list, "l2-served")?;
            let cluster = l2_of(list, "l2-cluster")?;
            match (&unserved, &served, &cluster) {
                (Some((f, r, m)), Some((t, _, _)), None)
                    if f == "False" && r == l2_reach::REASON_NO_LOCAL_ENDPOINT && t == "True" =>
                {
                    Ok(m.clone())
                }
                _ => Err(format!("{unserved:?} {served:?} {cluster:?}")),
            }
        },
    )
    .await;
    assert!(
        message.contains(&holder),
        "names the speaker node: {message}"
    );
    println!("L2Reachable False after {took:?}: {message}");
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let evs = events.list(&ListParams::default()).await.unwrap().items;
        if evs.iter().any(|e| {
            e.involved_object.name.as_deref() == Some("l2-unserved")
                && e.reason.as_deref() == Some(l2_reach::REASON_NO_LOCAL_ENDPOINT)
                && e.type_.as_deref() == Some("Warning")
        }) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no {} Event",
            l2_reach::REASON_NO_LOCAL_ENDPOINT
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The holder gets a local endpoint: its report no longer lists the Service.
    nodes
        .patch_status(
            &holder,
            &PatchParams::apply("rivorad").force(),
            &Patch::Apply(report(true, vec![])),
        )
        .await
        .unwrap();
    wait_for(
        "L2Reachable turns True",
        Duration::from_secs(10),
        &services,
        |list| match l2_of(list, "l2-unserved")? {
            Some((t, _, _)) if t == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    // No node in L2 mode any more: the condition goes.
    for n in [&holder, &standby] {
        nodes.delete(n, &DeleteParams::default()).await.unwrap();
    }
    wait_for(
        "L2Reachable removed",
        Duration::from_secs(10),
        &services,
        |list| match l2_of(list, "l2-unserved")? {
            None => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    controller.task.abort();

    // The controller's identity may do nothing else.
    let forbidden = |r: Result<(), kube::Error>, what: &str| match r {
        Err(kube::Error::Api(s)) if s.code == 403 => println!("forbidden as expected: {what}"),
        other => panic!("{what}: expected 403, got {other:?}"),
    };
    let cms: Api<ConfigMap> = Api::namespaced(identity.clone(), &ns);
    forbidden(
        cms.create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap(),
        )
        .await
        .map(|_| ()),
        "creating a ConfigMap",
    );
    let as_controller: Api<Service> = Api::namespaced(identity.clone(), &ns);
    forbidden(
        as_controller
            .patch(
                "s000",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
            )
            .await
            .map(|_| ()),
        "changing a Service's metadata",
    );
    forbidden(
        Api::<AddressPool>::all(identity.clone())
            .patch(
                "pool-v4",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"disabled": true}})),
            )
            .await
            .map(|_| ()),
        "changing an AddressPool's spec",
    );
    forbidden(
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(identity.clone(), &ns)
            .create(
                &pp,
                &serde_json::from_value(json!({"metadata": {"name": "l"}})).unwrap(),
            )
            .await
            .map(|_| ()),
        "a Lease outside its namespace",
    );
}
