//! Two real rivora-controller processes against the real API server, as the ServiceAccount of
//! deploy/rbac: with 200 Services assigned, SIGKILL the leader while 50 more are being created.
//! The other replica takes over within the Lease duration plus its retry time, none of the 200
//! addresses changes, no address is given twice, every new Service gets one; restarting both
//! replicas then changes nothing. Needs root and `scripts/build-testdeps.sh`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use rivora_controller::observe::{self, LOAD_BALANCER_CLASS};
use rivora_k8s_api::AddressPool;
use rivora_kube_testbed::{TestBed, ensure_namespace, unique_name};
use serde_json::json;

mod common;

const LEASE_SECONDS: u64 = 4;
const GRACE_SECONDS: u64 = 1;

/// A controller process, SIGKILLed by PID when dropped.
struct Replica {
    id: String,
    child: Child,
    log: PathBuf,
    metrics: std::net::SocketAddr,
}

impl Replica {
    fn start(id: &str, dir: &Path, kubeconfig: &Path, lease_ns: &str) -> Replica {
        let log = dir.join(format!("{id}.log"));
        // A free loopback port for its metrics server.
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_rivora-controller"))
            .args(["--lease-namespace", lease_ns, "--identity", id])
            .args(["--lease-duration", &LEASE_SECONDS.to_string()])
            .args(["--lease-grace", &GRACE_SECONDS.to_string()])
            .args(["--metrics-address", &metrics.to_string()])
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Replica {
            id: id.into(),
            child,
            log,
            metrics,
        }
    }

    /// GET /metrics of the process (plain HTTP/1.0 on loopback).
    fn scrape(&self) -> String {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(self.metrics).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut body = String::new();
        c.read_to_string(&mut body).unwrap();
        body
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "--- {} log ---\n{}",
                self.id,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}

fn lb_service(name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": name },
        "spec": { "type": "LoadBalancer", "loadBalancerClass": LOAD_BALANCER_CLASS,
                  "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack",
                  "ports": [{ "port": 443, "protocol": "TCP" }] }
    }))
    .unwrap()
}

/// name -> (addresses, resourceVersion) of every Service in `api`.
async fn snapshot(api: &Api<Service>) -> BTreeMap<String, (Vec<IpAddr>, String)> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|s| {
            (
                s.name_any(),
                (
                    observe::current_ingress(s),
                    s.resource_version().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

async fn wait_all_assigned(
    api: &Api<Service>,
    count: usize,
    limit: Duration,
) -> BTreeMap<String, (Vec<IpAddr>, String)> {
    let start = Instant::now();
    loop {
        let snap = snapshot(api).await;
        let assigned = snap.values().filter(|(ips, _)| ips.len() == 2).count();
        if snap.len() == count && assigned == count {
            return snap;
        }
        assert!(
            start.elapsed() < limit,
            "after {limit:?}: {assigned} of {} Services have both addresses",
            snap.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("rivora-controller")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
}

fn assert_distinct(snap: &BTreeMap<String, (Vec<IpAddr>, String)>) {
    let mut seen = BTreeSet::new();
    for (name, (ips, _)) in snap {
        for ip in ips {
            assert!(seen.insert(*ip), "{ip} given twice (again to {name})");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_leader_moves_no_address_and_the_other_takes_over() {
    let bed = TestBed::shared();
    bed.install_crds(&rivora_k8s_api::crds()).await.unwrap();
    let admin = bed.admin_client().await.unwrap();
    let lease_ns = unique_name("ctrl");
    let ns = unique_name("svc");
    ensure_namespace(&admin, &lease_ns).await.unwrap();
    ensure_namespace(&admin, &ns).await.unwrap();
    let pp = PostParams::default();
    let pool: AddressPool = serde_json::from_value(json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": "dual"},
        "spec": {"addresses": ["10.40.0.0/23", "fd00:40::/119"]}
    }))
    .unwrap();
    Api::<AddressPool>::all(admin.clone())
        .create(&pp, &pool)
        .await
        .unwrap();

    let _identity: Client = common::controller_identity(bed, &admin, &lease_ns).await;
    let token = bed
        .service_account_token(&lease_ns, "rivora-controller")
        .await
        .unwrap();
    let dir = bed.dir().join(unique_name("failover"));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, bed.token_kubeconfig(&bed.url(), &token)).unwrap();

    let mut a = Replica::start("replica-a", &dir, &kubeconfig, &lease_ns);
    let mut b = Replica::start("replica-b", &dir, &kubeconfig, &lease_ns);
    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    for i in 0..200 {
        services
            .create(&pp, &lb_service(&format!("old{i:03}")))
            .await
            .unwrap();
    }
    let before = wait_all_assigned(&services, 200, Duration::from_secs(60)).await;
    assert_distinct(&before);

    let leases: Api<Lease> = Api::namespaced(admin.clone(), &lease_ns);
    let leader = holder(&leases).await.expect("a leader");
    println!("200 Services assigned; leader {leader}");
    let (lead_replica, other_replica) = if leader == a.id { (&a, &b) } else { (&b, &a) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let used = "rivora_controller_pool_addresses{pool=\"dual\",family=\"ipv4\",state=\"used\"} 200";
    loop {
        let text = lead_replica.scrape();
        if text.contains("rivora_controller_leader 1") && text.contains(used) {
            println!(
                "leader metrics: {}",
                text.lines()
                    .filter(|l| l.starts_with("rivora_controller_pool")
                        || l.starts_with("rivora_controller_services"))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leader metrics never showed {used:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        other_replica
            .scrape()
            .contains("rivora_controller_leader 0")
    );

    // Create 50 more while killing the leader after the first 10.
    let creator = {
        let services = services.clone();
        tokio::spawn(async move {
            for i in 0..50 {
                services
                    .create(&PostParams::default(), &lb_service(&format!("new{i:02}")))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let mut created = 0;
    while created < 10 {
        created = snapshot(&services)
            .await
            .keys()
            .filter(|k| k.starts_with("new"))
            .count();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (victim, survivor) = if leader == a.id {
        (&mut a, &b)
    } else {
        (&mut b, &a)
    };
    victim.kill();
    let killed = Instant::now();
    let limit = Duration::from_secs(LEASE_SECONDS + 5);
    let took = loop {
        if holder(&leases).await.as_deref() == Some(survivor.id.as_str()) {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < limit,
            "{} did not take the Lease within {limit:?}",
            survivor.id
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "SIGKILLed {leader} after {created} of 50 new Services; {} holds the Lease {took:?} later (Lease {LEASE_SECONDS} s, grace {GRACE_SECONDS} s)",
        survivor.id
    );
    creator.await.unwrap();
    let after = wait_all_assigned(&services, 250, Duration::from_secs(30)).await;
    assert_distinct(&after);
    for (name, (ips, _)) in &before {
        assert_eq!(&after[name].0, ips, "{name} moved in the failover");
    }
    println!("all 250 assigned, none of the 200 moved, no address twice");

    // Restart both replicas: nothing is rewritten.
    a.kill();
    b.kill();
    let settled = snapshot(&services).await;
    let _c = Replica::start("replica-c", &dir, &kubeconfig, &lease_ns);
    let _d = Replica::start("replica-d", &dir, &kubeconfig, &lease_ns);
    let start = Instant::now();
    while holder(&leases)
        .await
        .is_none_or(|h| h != "replica-c" && h != "replica-d")
    {
        assert!(start.elapsed() < limit, "no new leader within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Give the new leader time for several passes, then compare.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let restarted = snapshot(&services).await;
    assert_eq!(
        restarted, settled,
        "restarting both replicas changed something"
    );
    println!(
        "restarted both replicas: {} Services unchanged (addresses and resourceVersions)",
        restarted.len()
    );
}
