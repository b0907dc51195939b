//! A SIGTERMed leader (what the kubelet sends to stop a pod) stops writing, releases its Lease
//! and exits; the other replica takes the Lease and writes at once, not a Lease duration later.
//! Two real rivora-controller processes against the real API server, with the chart's timing
//! (15 s Lease, 5 s grace). Needs root and `scripts/build-testdeps.sh`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use rivora_controller::observe::{self, LOAD_BALANCER_CLASS};
use rivora_k8s_api::AddressPool;
use rivora_kube_testbed::{TestBed, ensure_namespace, unique_name};
use serde_json::json;

mod common;

const LEASE_SECONDS: u64 = 15;
const GRACE_SECONDS: u64 = 5;

/// A controller process, SIGKILLed when dropped (its log printed if the test failed).
struct Replica {
    id: String,
    child: Child,
    log: PathBuf,
}

impl Replica {
    fn start(id: &str, dir: &Path, kubeconfig: &Path, lease_ns: &str) -> Replica {
        let log = dir.join(format!("{id}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_rivora-controller"))
            .args(["--lease-namespace", lease_ns, "--identity", id])
            .args(["--lease-duration", &LEASE_SECONDS.to_string()])
            .args(["--lease-grace", &GRACE_SECONDS.to_string()])
            .args(["--metrics-address", "127.0.0.1:0"])
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
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until its log has `line`.
    async fn wait_log(&self, line: &str, limit: Duration) {
        let start = Instant::now();
        while !self.log().contains(line) {
            assert!(
                start.elapsed() < limit,
                "{} did not log {line:?} within {limit:?}; log:\n{}",
                self.id,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- {} log ---\n{}", self.id, self.log());
        }
    }
}

fn holder(lease: &Option<Lease>) -> Option<String> {
    lease
        .as_ref()
        .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
        .filter(|h| !h.is_empty())
}

async fn wait_holder(leases: &Api<Lease>, id: &str, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let seen = holder(&leases.get_opt("rivora-controller").await.unwrap());
        if seen.as_deref() == Some(id) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "{id} did not hold the Lease within {limit:?}; last seen holder {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn lb_service(name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": name },
        "spec": { "type": "LoadBalancer", "loadBalancerClass": LOAD_BALANCER_CLASS,
                  "ports": [{ "port": 80, "protocol": "TCP" }] }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigtermed_leader_releases_its_lease_and_the_other_leads_at_once() {
    let bed = TestBed::shared();
    bed.install_crds(&rivora_k8s_api::crds()).await.unwrap();
    let admin = bed.admin_client().await.unwrap();
    let lease_ns = unique_name("ctrl");
    let ns = unique_name("svc");
    ensure_namespace(&admin, &lease_ns).await.unwrap();
    ensure_namespace(&admin, &ns).await.unwrap();
    let pool_name = unique_name("term");
    let pool: AddressPool = serde_json::from_value(json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": pool_name},
        "spec": {"addresses": ["10.41.0.0/24"],
                 "serviceSelector": {"matchLabels": {"pool": pool_name}}}
    }))
    .unwrap();
    Api::<AddressPool>::all(admin.clone())
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();
    common::controller_identity(bed, &admin, &lease_ns).await;
    let token = bed
        .service_account_token(&lease_ns, "rivora-controller")
        .await
        .unwrap();
    let dir = bed.dir().join(unique_name("sigterm"));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, bed.token_kubeconfig(&bed.url(), &token)).unwrap();
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &lease_ns);

    let mut a = Replica::start("replica-a", &dir, &kubeconfig, &lease_ns);
    wait_holder(&leases, "replica-a", Duration::from_secs(20)).await;
    a.wait_log("leading", Duration::from_secs(10)).await;
    let b = Replica::start("replica-b", &dir, &kubeconfig, &lease_ns);
    // In the election (and so asleep until a's term would end, without the fix).
    b.wait_log("waiting for leadership", Duration::from_secs(20))
        .await;

    let pid = a.child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success(), "kill -TERM {pid}");
    let termed = Instant::now();
    // Created right after: only the next leader can give it an address.
    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let mut svc = lb_service("after-term");
    svc.metadata.labels = Some([("pool".to_string(), pool_name.clone())].into());
    services.create(&PostParams::default(), &svc).await.unwrap();

    let limit = Duration::from_secs(LEASE_SECONDS);
    let mut released = None;
    let took = loop {
        let lease = leases.get_opt("rivora-controller").await.unwrap();
        let h = holder(&lease);
        if released.is_none() && h.as_deref() != Some("replica-a") {
            released = Some((termed.elapsed(), h.clone()));
        }
        if h.as_deref() == Some("replica-b") {
            break termed.elapsed();
        }
        assert!(
            termed.elapsed() < limit,
            "replica-b did not take the Lease within the Lease duration {limit:?} of the \
             SIGTERM; last seen {:?}",
            lease.and_then(|l| l.spec)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (released_at, seen) = released.unwrap();
    // The process exits by itself, successfully, after releasing.
    let exit = loop {
        if let Some(s) = a.child.try_wait().unwrap() {
            break (termed.elapsed(), s);
        }
        assert!(
            termed.elapsed() < Duration::from_secs(12),
            "replica-a still runs 12 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(exit.1.success(), "replica-a exited with {}", exit.1);
    assert!(a.log().contains("Lease released"), "log:\n{}", a.log());
    // The first status write of the new leader.
    let addressed = loop {
        let s = services.get("after-term").await.unwrap();
        if !observe::current_ingress(&s).is_empty() {
            break termed.elapsed();
        }
        assert!(
            termed.elapsed() < limit,
            "the Service created after the SIGTERM has no address after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "SIGTERM to the leader: Lease left replica-a after {released_at:?} (holder then \
         {seen:?}), replica-a exited after {:?}, replica-b held it after \
         {took:?} and addressed a new Service after {addressed:?} (Lease {LEASE_SECONDS} s, \
         grace {GRACE_SECONDS} s)",
        exit.0
    );
    let prompt = Duration::from_secs(GRACE_SECONDS);
    assert!(
        took < prompt,
        "took over {took:?} after the SIGTERM: not well before the {LEASE_SECONDS} s Lease"
    );
    assert!(
        addressed < prompt + Duration::from_secs(2),
        "new leader's first write {addressed:?}"
    );
}
