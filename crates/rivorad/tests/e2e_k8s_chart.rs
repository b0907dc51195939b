//! The chart's RBAC is enough, as installed: after `rivora install` (the installer library the
//! `rivora` binary runs) against the real API server, rivora-controller runs as the chart's
//! ServiceAccount `rivora-controller` (its Lease in the release namespace) and assigns a Service
//! an address, and the real `rivorad --kubernetes --announce l2` runs in a node namespace as the
//! chart's ServiceAccount `rivorad`: it programs that Service's VIP, takes the L2 Lease in the
//! release namespace and writes its RivoraNode report. No RBAC is applied by the test; what the
//! chart installed is all there is. Needs root and `scripts/build-testdeps.sh`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use rivora_controller::leader::LeaderConfig;
use rivora_controller::run::{self, Settings};
use rivora_installer::ValueInputs;
use rivora_installer::chart::Chart;
use rivora_installer::lifecycle::{self, Target, Waiting};
use rivora_k8s_api::RivoraNode;
use rivora_k8s_api::class::{ClassConfig, GATEWAY_CONTROLLER_NAME, LOAD_BALANCER_CLASS};
use rivora_kube_testbed::{TestBed, ensure_namespace, unique_name};
use serde_json::json;

mod k8s_common;
use k8s_common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_and_node_agent_work_with_the_charts_service_accounts() {
    let bed = TestBed::shared();
    let admin = bed.admin_client().await.unwrap();
    let release_ns = unique_name("chart-sys");
    let target = Target {
        release: "rivora".into(),
        namespace: release_ns.clone(),
    };
    let inputs = ValueInputs {
        set: vec!["rivorad.interface=up0,rivorad.announce=l2".into()],
        ..Default::default()
    };
    let waiting = Waiting {
        wait: false,
        timeout: Duration::from_secs(60),
    };
    lifecycle::install(&admin, &Chart::embedded(), &inputs, &[], &target, waiting)
        .await
        .unwrap();

    // rivora-controller as the chart's ServiceAccount, leading over the Lease in the release
    // namespace (where the chart's Role lets it).
    let controller_client = bed
        .service_account_client(&release_ns, "rivora-controller")
        .await
        .unwrap();
    let settings = Settings {
        class: ClassConfig {
            class: LOAD_BALANCER_CLASS.into(),
            default_class: false,
            gateway_controller: GATEWAY_CONTROLLER_NAME.into(),
        },
        identity: "controller-0".into(),
        debounce: Duration::from_millis(20),
        resync: Duration::from_secs(5),
        metrics: Arc::new(rivora_controller::metrics::Metrics::new()),
    };
    let leader = LeaderConfig {
        lease_name: "rivora-controller".into(),
        namespace: release_ns.clone(),
        identity: "controller-0".into(),
        duration: Duration::from_secs(4),
        grace: Duration::from_secs(1),
    };
    let controller = tokio::spawn(run::replica(
        controller_client,
        leader,
        settings,
        std::future::pending(),
    ));

    // A pool and a Service of the default class; the controller must give it an address.
    k8s_common::gateway::apply(
        &admin,
        None,
        json!({
            "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "chart-pool"}, "spec": {"addresses": ["198.51.100.16/28"]},
        }),
    )
    .await;
    let app_ns = unique_name("chart-app");
    ensure_namespace(&admin, &app_ns).await.unwrap();
    k8s_common::gateway::apply(&admin, Some(&app_ns), json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": LOAD_BALANCER_CLASS,
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]},
    }))
    .await;
    let services: Api<Service> = Api::namespaced(admin.clone(), &app_ns);
    let vip = wait_for("the controller assigns an address", WAIT, || async {
        let s = services.get("web").await.map_err(|e| e.to_string())?;
        s.status
            .and_then(|st| st.load_balancer)
            .and_then(|lb| lb.ingress)
            .and_then(|i| i.first().and_then(|i| i.ip.clone()))
            .ok_or_else(|| "no ingress yet".to_string())
    })
    .await;
    assert!(vip.starts_with("198.51.100."), "{vip}");

    // rivorad as the chart's ServiceAccount, on a node of its own.
    let token = bed
        .service_account_token(&release_ns, "rivorad")
        .await
        .unwrap();
    let mut agent = NodeAgent::new(bed, &admin, "chart-node", &token).await;
    agent.class = LOAD_BALANCER_CLASS.into();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.9.10"], "nodeName": agent.name,
                       "conditions": {"ready": true, "serving": true, "terminating": false}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
    .unwrap();
    Api::<EndpointSlice>::namespaced(admin.clone(), &app_ns)
        .patch(
            "web-1",
            &PatchParams::apply(FM).force(),
            &Patch::Apply(&slice),
        )
        .await
        .unwrap();
    agent.start_with(&["--namespace", &release_ns, "--announce", "l2"]);
    let programmed = wait_for("rivorad programs the VIP", WAIT, || async {
        let vips = agent.vips().await?;
        vips.iter()
            .find(|v| v.address == vip && v.port == 80)
            .map(|v| v.address.clone())
            .ok_or_else(|| format!("{:?}", vips.iter().map(|v| &v.address).collect::<Vec<_>>()))
    })
    .await;
    assert_eq!(programmed, vip);
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &release_ns);
    let holder = wait_for("rivorad takes the L2 Lease", WAIT, || async {
        let l = leases
            .get("rivora-l2-speaker")
            .await
            .map_err(|e| e.to_string())?;
        l.spec
            .and_then(|s| s.holder_identity)
            .ok_or_else(|| "no holder".to_string())
    })
    .await;
    assert_eq!(holder, agent.name);
    let nodes: Api<RivoraNode> = Api::all(admin.clone());
    let vip_count = wait_for(
        "rivorad reports its VIPs in its RivoraNode",
        WAIT,
        || async {
            let n = nodes.get(&agent.name).await.map_err(|e| e.to_string())?;
            match n.status {
                Some(st) if st.vip_count > 0 => Ok(st.vip_count),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert_eq!(vip_count, 1);
    let log = agent.stop();
    // An RBAC refusal reads "... is forbidden: User ..." with `code: 403`; a bare "403" would
    // also match timestamps such as 16:43:29.071403Z.
    let refused = log.lines().find(|l| {
        let l = l.to_ascii_lowercase();
        l.contains("forbidden") || l.contains("code: 403")
    });
    assert!(
        refused.is_none(),
        "an API call was refused: {refused:?}\n{log}"
    );
    controller.abort();
}
