//! Issue 40: without the optional CRDs (no Gateway API, the chart's default, and no
//! Meridio-2) the node agent serves Services, logs each absent kind once and costs no steady
//! API load; when Gateway API's CRDs are installed later, a Gateway is served within seconds,
//! not after the minutes-long retry wait of an absent kind.
//!
//! Before the fix each rivorad re-listed the 5 absent kinds every ~1.2 s (4.2 failed lists and
//! 12.7 WARN lines a second per node). The real `rivorad --kubernetes --gateway ...` runs as
//! the ServiceAccount of deploy/rbac/rivorad.yaml against a test bed of its own, which writes
//! an audit log: the requests are counted by the API server's own record. Needs root and the
//! test dependencies (scripts/build-testdeps.sh).

mod k8s_common;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use k8s_common::gateway::apply;
use k8s_common::*;
use rivora_kube_testbed::audit::{AuditCursor, Request};
use rivora_kube_testbed::{GatewayChannel, Options, TestBed};
use rivora_lab::cluster::Cluster;
use serde_json::json;

/// How long the quiet is measured (the figure).
const QUIET: Duration = Duration::from_secs(60);

/// Stops the test's own bed however the test ends.
struct Stop(&'static TestBed);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The requests of `user` on the optional kinds' resources.
fn optional_requests<'a>(all: &'a [Request], user: &str) -> Vec<&'a Request> {
    const OPTIONAL: [&str; 8] = [
        "gatewayclasses",
        "gateways",
        "tcproutes",
        "udproutes",
        "referencegrants",
        "distributiongroups",
        "l34routes",
        "loadbalancerendpointslices",
    ];
    all.iter()
        .filter(|r| r.user == user && OPTIONAL.iter().any(|k| r.resource.starts_with(k)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_optional_kinds_cost_no_steady_load_and_are_served_once_installed() {
    let bed: &'static TestBed = Box::leak(Box::new(
        TestBed::start_with(&Options {
            audit_log: true,
            ..Options::default()
        })
        .expect("starting the test bed"),
    ));
    let _stop = Stop(bed);
    let t = K8sTest::new_on(bed, "absent").await;
    let user = format!("system:serviceaccount:{}:rivorad", t.sa_ns);
    let lab = Cluster::build("kab", &[1]).expect("building the cluster lab");
    let mut agent = t.agent(&lab, 1).await;
    let node = agent.name.clone();
    let vip = "10.99.41.1";
    t.service("web", vip, http_port(), json!({})).await;
    let pod: IpAddr = "10.203.0.1".parse().unwrap();
    t.slice("web", &ready(&[pod], &node), http_slice_port())
        .await;
    let controller = format!("rivora.dev/{}", t.ns);
    let gateway_ns = format!("{}/gw", t.ns);
    agent.start_in(
        &lab.node(1).unwrap().ns,
        &[
            "--gateway-controller-name",
            &controller,
            "--gateway",
            &gateway_ns,
        ],
    );

    // Services are served without the optional CRDs.
    wait_for("web programmed without the optional CRDs", WAIT, || async {
        let vips = agent.vips().await?;
        if vips.iter().any(|v| v.address == vip) {
            Ok(())
        } else {
            Err(format!("{} VIPs", vips.len()))
        }
    })
    .await;

    // A minute of quiet: how many lists of the absent kinds, how many warnings.
    let mut audit = AuditCursor::at_end(&bed.audit_log()).unwrap();
    let warns_before = agent.log().matches(" WARN ").count();
    tokio::time::sleep(QUIET).await;
    let requests = audit.take().unwrap();
    let optional = optional_requests(&requests, &user);
    let warns = agent.log().matches(" WARN ").count() - warns_before;
    let by_kind = rivora_kube_testbed::audit::count_of(
        &optional.iter().map(|r| (*r).clone()).collect::<Vec<_>>(),
        &user,
    );
    eprintln!(
        "{:.0} s without the CRDs: {} requests on the 8 absent kinds ({by_kind:?}), {warns} \
         WARN lines",
        QUIET.as_secs_f64(),
        optional.len()
    );
    // Waits that double from 0.8 s reach 25 s within a minute: about 6 lists per kind at most
    // (the old behaviour was ~50 per kind).
    assert!(
        optional.len() <= 8 * 8,
        "{} requests in {QUIET:?}: {by_kind:?}",
        optional.len()
    );
    assert_eq!(
        warns,
        0,
        "every absent kind was logged once, before this minute:\n{}",
        agent.log()
    );
    // The status says the kinds are not served, not that their watches fail.
    let status = agent.kubernetes().await.unwrap();
    for kind in ["Gateway", "TCPRoute", "L34Route"] {
        let w = status
            .watches
            .iter()
            .find(|w| w.kind == kind)
            .unwrap_or_else(|| panic!("no {kind} watch in {status:?}"));
        assert!(
            w.absent && w.errors == 0 && w.last_error.is_none(),
            "{kind}: absent, no error: {w:?}"
        );
    }
    let log = agent.log();
    for kind in ["Gateway", "TCPRoute", "L34Route"] {
        let lines = log
            .lines()
            .filter(|l| {
                l.contains("not served by the API server")
                    && l.split_whitespace().any(|w| w == format!("kind={kind}"))
            })
            .count();
        assert_eq!(lines, 1, "{kind} absent: {lines} lines\n{log}");
    }

    // Gateway API installed: a Gateway (its address written as rivora-controller would) with a
    // TCPRoute to `web` is programmed within seconds.
    let installed = Instant::now();
    bed.install_gateway_api(GatewayChannel::Standard)
        .await
        .expect("installing Gateway API's standard CRDs");
    apply(
        &t.admin,
        None,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": format!("gc-{}", t.ns)},
            "spec": {"controllerName": controller},
        }),
    )
    .await;
    apply(
        &t.admin,
        Some(&t.ns),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "edge"},
            "spec": {"gatewayClassName": format!("gc-{}", t.ns),
                     "listeners": [{"name": "tcp", "port": 9000, "protocol": "TCP"}]},
        }),
    )
    .await;
    let gw_vip = "10.99.41.9";
    let gateways: kube::Api<gateway_api::gateways::Gateway> =
        kube::Api::namespaced(t.admin.clone(), &t.ns);
    gateways
        .patch_status(
            "edge",
            &kube::api::PatchParams::apply("rivora-controller").force(),
            &kube::api::Patch::Apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "status": {"addresses": [{"type": "IPAddress", "value": gw_vip}]},
            })),
        )
        .await
        .unwrap();
    apply(
        &t.admin,
        Some(&t.ns),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TCPRoute",
            "metadata": {"name": "to-web"},
            "spec": {"parentRefs": [{"name": "edge", "sectionName": "tcp"}],
                     "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]},
        }),
    )
    .await;
    wait_for(
        "the Gateway served after the CRDs were installed",
        Duration::from_secs(30),
        || async {
            let vips = agent.vips().await?;
            match vips.iter().find(|v| v.address == gw_vip && v.port == 9000) {
                Some(v) if v.backends.iter().any(|b| b.address == pod.to_string()) => Ok(()),
                _ => Err(format!(
                    "VIPs {:?}",
                    vips.iter()
                        .map(|v| format!("{}:{}", v.address, v.port))
                        .collect::<Vec<_>>()
                )),
            }
        },
    )
    .await;
    eprintln!(
        "Gateway programmed {:.1} s after the CRDs were installed",
        installed.elapsed().as_secs_f64()
    );
}
