//! `rivora install`, `upgrade` and `uninstall` against the real kube-apiserver of the test bed.
//!
//! No kubelet or kube-controller-manager runs there, so THIS TEST PLAYS THEM: once the
//! DaemonSet and Deployment exist it writes their status (Pods scheduled, updated and ready),
//! which is what `--wait` waits for. It also plays rivora-controller by writing a Service's
//! address. Everything else (SSA, CRD establishment, discovery, the release Secrets that real
//! `helm list` reads) is the API server's own behaviour.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, Resource};
use rivora_k8s_api::{AddressPool, BGPPeer, RivoraNode, ServicePolicy};
use rivora_kube_testbed::{TestBed, ensure_namespace, unique_name};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const FM: &str = "lifecycle-e2e";
const RIVORA_CRDS: [&str; 4] = [
    "addresspools.rivora.dev",
    "bgppeers.rivora.dev",
    "rivoranodes.rivora.dev",
    "servicepolicies.rivora.dev",
];

struct Cli {
    kubeconfig: PathBuf,
    namespace: String,
}

impl Cli {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rivora"));
        c.args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["-n", &self.namespace]);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("rivora runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "rivora {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn helm(&self, args: &[&str]) -> Value {
        let helm = TestBed::shared().assets().helm().unwrap().to_path_buf();
        let out = Command::new(helm)
            .args(args)
            .args(["-n", &self.namespace, "-o", "json", "--kubeconfig"])
            .arg(&self.kubeconfig)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "helm {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

async fn get<K>(api: &Api<K>, name: &str) -> Option<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.unwrap()
}

/// Waits for `cond` with a deadline, failing with what was last seen.
async fn eventually<T: std::fmt::Debug, F: std::future::Future<Output = (bool, T)>>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let (done, seen) = probe().await;
        if done {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {timeout:?}; last seen {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Plays kubelet + controller-manager: the DaemonSet on 2 nodes and the Deployment's replicas,
/// all of the current generation and ready.
async fn mark_ready(client: &Client, ns: &str) {
    let ds: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    let d = eventually("DaemonSet created", Duration::from_secs(60), || async {
        let d = get(&ds, "rivorad").await;
        (d.is_some(), d)
    })
    .await
    .unwrap();
    let generation = d.metadata.generation.unwrap();
    ds.patch_status(
        "rivorad",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "desiredNumberScheduled": 2, "currentNumberScheduled": 2, "numberMisscheduled": 0,
            "numberReady": 2, "updatedNumberScheduled": 2, "numberAvailable": 2,
            "observedGeneration": generation,
        }})),
    )
    .await
    .unwrap();
    let deploy: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = eventually("Deployment created", Duration::from_secs(60), || async {
        let d = get(&deploy, "rivora-controller").await;
        (d.is_some(), d)
    })
    .await
    .unwrap();
    deploy
        .patch_status(
            "rivora-controller",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2,
                "observedGeneration": d.metadata.generation.unwrap(),
            }})),
        )
        .await
        .unwrap();
}

fn managers(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .map(|m| {
            format!(
                "{}:{}",
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default()
            )
        })
        .collect()
}

async fn apply<K>(api: &Api<K>, obj: Value) -> K
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    api.patch(&name, &PatchParams::apply(FM).force(), &Patch::Apply(&obj))
        .await
        .unwrap_or_else(|e| panic!("applying {name}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_status_upgrade_uninstall() {
    let bed = TestBed::shared();
    let client = bed.admin_client().await.unwrap();
    let ns = unique_name("rivora-lc");
    let dir = std::env::temp_dir().join(unique_name("rivora-lc"));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, bed.admin_kubeconfig(&bed.url())).unwrap();
    let cli = Cli {
        kubeconfig,
        namespace: ns.clone(),
    };
    // Upstream's standard-channel Gateway API CRDs, as the test dependencies hold them.
    let gateway_crds = bed.assets().gateway_api_crds.join("standard");

    // Install, waiting for the workloads the test then marks ready.
    let mut child = cli
        .command(&[
            "install",
            "--set",
            "rivorad.interface=eth1,gatewayAPI.gatewayClass.create=true",
            "--wait",
            "--timeout",
            "90s",
        ])
        .arg("--gateway-api-crds")
        .arg(&gateway_crds)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    mark_ready(&client, &ns).await;
    let out = {
        let deadline = Instant::now() + Duration::from_secs(120);
        while child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "rivora install --wait did not return"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        child.wait_with_output().unwrap()
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "install failed: {stderr}");
    assert!(
        stderr.contains("every DaemonSet and Deployment is ready"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("installed in namespace {ns}")));

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in RIVORA_CRDS {
        let crd = get(&crds, name)
            .await
            .unwrap_or_else(|| panic!("CRD {name}"));
        assert!(
            managers(&crd.metadata).contains(&"rivora:Apply".to_string()),
            "{name}"
        );
    }
    let ds: Api<DaemonSet> = Api::namespaced(client.clone(), &ns);
    let deploy: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let d = get(&ds, "rivorad").await.unwrap();
    assert!(
        managers(&d.metadata).contains(&"rivora:Apply".to_string()),
        "{:?}",
        managers(&d.metadata)
    );
    let args = d.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(args.contains(&"--interface=eth1".to_string()), "{args:?}");
    assert!(args.contains(&"--announce=none".to_string()), "{args:?}");
    let classes: Api<GatewayClass> = Api::all(client.clone());
    let class = get(&classes, "rivora")
        .await
        .expect("the chart's GatewayClass");
    assert_eq!(class.spec.controller_name, "rivora.dev/gateway-controller");
    assert!(
        get(&crds, "tcproutes.gateway.networking.k8s.io")
            .await
            .is_some()
    );
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    for sa in ["rivorad", "rivora-controller"] {
        assert!(get(&sas, sa).await.is_some(), "ServiceAccount {sa}");
    }
    let listed = cli.helm(&["list"]);
    assert_eq!(listed[0]["name"], "rivora", "{listed}");
    assert_eq!(listed[0]["status"], "deployed", "{listed}");
    assert_eq!(listed[0]["revision"], "1", "{listed}");
    assert_eq!(listed[0]["chart"], "rivora-0.1.0", "{listed}");

    let again = cli.run(&["install"]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));

    // The user's objects: a pool, a peer, a policy and a Service with an address (the test
    // writes the address, as rivora-controller would).
    let pool_name = unique_name("pool");
    apply(
        &Api::<AddressPool>::all(client.clone()),
        json!({
            "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": pool_name}, "spec": {"addresses": ["192.0.2.0/28"]},
        }),
    )
    .await;
    let peer_name = unique_name("peer");
    apply(
        &Api::<BGPPeer>::all(client.clone()),
        json!({
            "apiVersion": "rivora.dev/v1alpha1", "kind": "BGPPeer",
            "metadata": {"name": peer_name},
            "spec": {"address": "192.0.2.254", "peerASN": 65000, "localASN": 65001},
        }),
    )
    .await;
    ensure_namespace(&client, "lc-apps").await.unwrap();
    apply(
        &Api::<ServicePolicy>::namespaced(client.clone(), "lc-apps"),
        json!({
            "apiVersion": "rivora.dev/v1alpha1", "kind": "ServicePolicy",
            "metadata": {"name": "web"},
            "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": "web"}]},
        }),
    )
    .await;
    let services: Api<Service> = Api::namespaced(client.clone(), "lc-apps");
    apply(
        &services,
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "rivora.dev/lb",
                     "ports": [{"port": 80, "protocol": "TCP"}]},
        }),
    )
    .await;
    services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}}
            })),
        )
        .await
        .unwrap();

    // rivora status: without a controller leader it says so and exits 1.
    let out = cli.run(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("rivora-controller"), "{text}");
    assert!(text.contains("0.1.0"), "chart version shown: {text}");

    // The test plays the controller (its Lease) and two rivorads (their RivoraNode reports).
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let micro = format!("{}.000000Z", now.trim_end_matches('Z'));
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    apply(
        &leases,
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "rivora-controller"},
            "spec": {"holderIdentity": "rivora-controller-7d9f-x", "leaseDurationSeconds": 15,
                     "renewTime": micro, "acquireTime": micro},
        }),
    )
    .await;
    let reports: Api<RivoraNode> = Api::all(client.clone());
    let node_names = [format!("{ns}-a"), format!("{ns}-b")];
    for (i, node) in node_names.iter().enumerate() {
        apply(
            &reports,
            json!({
                "apiVersion": "rivora.dev/v1alpha1", "kind": "RivoraNode",
                "metadata": {"name": node}, "spec": {},
            }),
        )
        .await;
        reports
            .patch_status(node, &PatchParams::default(), &Patch::Merge(json!({"status": {
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                     "lastTransitionTime": now},
                    {"type": "InitialSyncComplete", "status": "True", "reason": "Complete",
                     "message": "", "lastTransitionTime": now},
                ],
                "datapath": {"interface": "eth1", "xdpMode": if i == 0 { "native" } else { "generic" },
                             "abiVersion": 3, "persistent": true},
                "vipCount": 1,
                "heartbeatTime": now,
                "announce": {"mode": "none"},
            }})))
            .await
            .unwrap();
    }
    let out = cli.run(&["status", "-o", "json"]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(report["healthy"], true, "{report:#}");
    let shown = report.to_string();
    for want in [
        node_names[0].as_str(),
        node_names[1].as_str(),
        "native",
        "generic",
        "rivora-controller-7d9f-x",
        &pool_name,
    ] {
        assert!(shown.contains(want), "{want} in {report:#}");
    }
    let table = cli.ok(&["status"]);
    eprintln!("rivora status:\n{table}");
    assert!(
        table.contains(&node_names[0]) && table.contains("rivora-controller-7d9f-x"),
        "{table}"
    );

    // A Service of ours without an address makes it unhealthy, naming the Service.
    apply(
        &services,
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "pending"},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "rivora.dev/lb",
                     "ports": [{"port": 81, "protocol": "TCP"}]},
        }),
    )
    .await;
    let out = cli.run(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("lc-apps/pending"), "{text}");

    // Upgrade --dry-run shows exactly the DaemonSet's change and changes nothing.
    let before_deploy = get(&deploy, "rivora-controller").await.unwrap();
    let before_ds = get(&ds, "rivorad").await.unwrap();
    let plan = cli.ok(&["upgrade", "--dry-run", "--set", "rivorad.announce=bgp"]);
    let headlines: Vec<&str> = plan.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(headlines, [format!("~ DaemonSet {ns}/rivorad")], "{plan}");
    let changed: Vec<String> = plan
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| l.starts_with(['-', '+']))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        changed,
        ["- - --announce=none", "+ - --announce=bgp"],
        "{plan}"
    );
    assert_eq!(
        get(&ds, "rivorad").await.unwrap().metadata.resource_version,
        before_ds.metadata.resource_version,
        "--dry-run changed the DaemonSet"
    );

    // The upgrade: reuses interface=eth1 from the install, changes only the DaemonSet.
    let out = cli.ok(&["upgrade", "--set", "rivorad.announce=bgp"]);
    assert!(out.contains("upgraded to revision 2"), "{out}");
    let d = get(&ds, "rivorad").await.unwrap();
    let args = d.spec.clone().unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(args.contains(&"--announce=bgp".to_string()), "{args:?}");
    assert!(
        args.contains(&"--interface=eth1".to_string()),
        "the install's value is reused: {args:?}"
    );
    assert_eq!(
        d.metadata.generation,
        before_ds.metadata.generation.map(|g| g + 1)
    );
    let after_deploy = get(&deploy, "rivora-controller").await.unwrap();
    assert_eq!(
        after_deploy.metadata.resource_version, before_deploy.metadata.resource_version,
        "the Deployment is untouched"
    );
    assert!(
        get(&Api::<AddressPool>::all(client.clone()), &pool_name)
            .await
            .is_some()
    );
    assert!(
        get(&Api::<BGPPeer>::all(client.clone()), &peer_name)
            .await
            .is_some()
    );
    assert!(
        get(
            &Api::<ServicePolicy>::namespaced(client.clone(), "lc-apps"),
            "web"
        )
        .await
        .is_some()
    );
    let svc = get(&services, "web").await.unwrap();
    assert_eq!(
        svc.status.unwrap().load_balancer.unwrap().ingress.unwrap()[0]
            .ip
            .as_deref(),
        Some("192.0.2.1")
    );
    let listed = cli.helm(&["list"]);
    assert_eq!(
        (listed[0]["revision"].as_str(), listed[0]["status"].as_str()),
        (Some("2"), Some("deployed")),
        "{listed}"
    );
    assert_eq!(
        cli.helm(&["get", "values", "rivora"]),
        json!({"rivorad": {"announce": "bgp", "interface": "eth1"}, "gatewayAPI": {"gatewayClass": {"create": true}}})
    );
    let history = cli.helm(&["history", "rivora"]);
    let states: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["status"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["superseded", "deployed"], "{history}");

    // Drift: someone edits the chart's ClusterRole. The previous manifest and the new one are
    // the same, but upgrade --dry-run compares with the live object and shows the change the
    // upgrade then makes (it reverts the edit).
    let croles: Api<ClusterRole> = Api::all(client.clone());
    let rendered_rules = get(&croles, "rivora-controller").await.unwrap().rules;
    croles
        .patch(
            "rivora-controller",
            &PatchParams::default(),
            &Patch::Merge(json!({"rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]}
            ]})),
        )
        .await
        .unwrap();
    let plan = cli.ok(&["upgrade", "--dry-run"]);
    let headlines: Vec<&str> = plan.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(headlines, ["~ ClusterRole rivora-controller"], "{plan}");
    assert!(
        plan.lines()
            .any(|l| l.starts_with("    -") && l.contains("delete")),
        "the edit is shown as undone: {plan}"
    );
    assert_ne!(
        get(&croles, "rivora-controller").await.unwrap().rules,
        rendered_rules,
        "--dry-run changed the ClusterRole"
    );
    let out = cli.ok(&["upgrade"]);
    assert!(out.contains("~ ClusterRole rivora-controller"), "{out}");
    assert!(out.contains("upgraded to revision 3"), "{out}");
    assert_eq!(
        get(&croles, "rivora-controller").await.unwrap().rules,
        rendered_rules,
        "the upgrade reverts the drift"
    );
    assert_eq!(
        cli.ok(&["upgrade", "--dry-run"]),
        "no object changes\n",
        "nothing drifts any more"
    );

    // A Gateway of the chart's GatewayClass: uninstall keeps the class, naming the Gateway.
    let gateways: Api<Gateway> = Api::namespaced(client.clone(), "lc-apps");
    apply(
        &gateways,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "edge"},
            "spec": {"gatewayClassName": "rivora",
                     "listeners": [{"name": "tcp", "port": 80, "protocol": "TCP"}]},
        }),
    )
    .await;

    // Uninstall: nothing of ours is left but the CRDs, the user's objects and the GatewayClass
    // their Gateway uses.
    let out = cli.run(&["uninstall"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("kept GatewayClass rivora: Gateways use it (lc-apps/edge)"),
        "{stderr}"
    );
    assert!(get(&ds, "rivorad").await.is_none());
    assert!(get(&deploy, "rivora-controller").await.is_none());
    for sa in ["rivorad", "rivora-controller"] {
        assert!(get(&sas, sa).await.is_none(), "ServiceAccount {sa} left");
    }
    assert!(get(&croles, "rivorad").await.is_none());
    assert!(get(&croles, "rivora-controller").await.is_none());
    let roles: Api<Role> = Api::namespaced(client.clone(), &ns);
    assert!(
        roles
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let left: Vec<String> = secrets
        .list(&ListParams::default().labels("owner=helm"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    assert!(left.is_empty(), "release records left: {left:?}");
    for name in RIVORA_CRDS {
        assert!(get(&crds, name).await.is_some(), "CRD {name} kept");
    }
    assert!(
        get(&classes, "rivora").await.is_some(),
        "the GatewayClass a Gateway uses is kept"
    );
    assert!(
        get(&crds, "gateways.gateway.networking.k8s.io")
            .await
            .is_some(),
        "Gateway API CRDs are never rivora's to delete"
    );
    assert!(
        get(&Api::<AddressPool>::all(client.clone()), &pool_name)
            .await
            .is_some()
    );
    assert!(cli.helm(&["list"]).as_array().unwrap().is_empty());

    // Installed again, and uninstalled with --delete-gateway-class: the class goes, Gateway or not.
    cli.ok(&[
        "install",
        "--set",
        "rivorad.interface=eth1,gatewayAPI.gatewayClass.create=true",
    ]);
    let out = cli.run(&["uninstall", "--delete-gateway-class"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = eventually("GatewayClass deleted", Duration::from_secs(30), || async {
        let c = get(&classes, "rivora").await;
        (c.is_none(), c)
    })
    .await;
    assert!(left.is_none());
    gateways.delete("edge", &Default::default()).await.unwrap();

    // With the flag, the CRDs go too (and the API server removes their objects).
    let out = cli.run(&["uninstall", "--delete-crds"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let remaining = eventually("CRDs deleted", Duration::from_secs(60), || async {
        let mut left = Vec::new();
        for name in RIVORA_CRDS {
            if get(&crds, name).await.is_some() {
                left.push(name);
            }
        }
        (left.is_empty(), left)
    })
    .await;
    assert!(remaining.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
