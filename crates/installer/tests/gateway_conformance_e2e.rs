//! Issue 42: Gateway API's own conformance suite (`sigs.k8s.io/gateway-api/conformance`, the
//! version of the CRDs), run for real against Rivora on the test cluster. The chart is
//! installed as a user installs it for Gateway API (`rivora install --gateway-api-crds DIR --set
//! gatewayAPI.gatewayClass.create=true`) from Rivora's image on two kubelet nodes; the suite's
//! backends run from images built locally from the same module (echo-basic, CoreDNS:
//! `scripts/image conformance`). An AddressPool gives the Gateways their addresses, routed
//! from the client segment through node 1, and the suite's test binary runs in the client
//! namespace: it writes the Gateways and routes, reads their status and sends TCP and UDP to
//! their addresses, as upstream runs it against any implementation.
//!
//! Profiles GATEWAY-TCP and GATEWAY-UDP; the test fails when the suite does (any test of a
//! claimed feature failed) and when a profile's report is not a success. The features the
//! suite runs are those the GatewayClass publishes in `status.supportedFeatures`.
//! [`NOT_APPLICABLE`] lists the tests skipped, each with its reason (HTTPS certificateRefs and
//! HTTPRoute attachment, which an L4 load balancer does not have); `RIVORA_CONFORMANCE_ALL=1`
//! runs them too. The report and the suite's log go to `$RIVORA_CONFORMANCE_DIR` (default
//! `target/gateway-conformance/`): report.yaml, suite.log;
//! docs/conformance/ holds the report committed, with the command that made it.
//!
//! Needs root and the test dependencies (scripts/build-testdeps.sh, scripts/setup.sh).

mod cluster_common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cluster_common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use rivora_kube_testbed::cluster::{images, workload};
use rivora_kube_testbed::{Assets, ConformanceAssets, GatewayChannel, SERVER_PORT, SERVER_V4};

/// The Gateways' addresses: the AddressPool, routed from the client through node 1.
const POOL: &str = "10.99.44.0/26";
/// An address of the pool for GatewayStaticAddresses' usable address; one outside every pool
/// for its unusable one.
const USABLE: &str = "10.99.44.60";
const UNUSABLE: &str = "10.99.45.1";
/// The profiles Rivora claims.
const PROFILES: &str = "GATEWAY-TCP,GATEWAY-UDP";
/// Extended features the suite must find in the GatewayClass's `status.supportedFeatures`
/// (it infers what to run from there: no `-supported-features` is passed).
const EXTENDED_CLAIMED: [&str; 3] = [
    "GatewayAddressEmpty",
    "GatewayPort8080",
    "GatewayStaticAddresses",
];
/// Core tests skipped, with the reason: they assert HTTPS or HTTPRoute behaviour that an L4
/// load balancer does not have, by design (issue 42 decided it). The report lists them as
/// skipped; docs/conformance/README.md explains them. `RIVORA_CONFORMANCE_ALL=1` runs them.
const NOT_APPLICABLE: &[(&str, &str)] = &[
    (
        "GatewayInvalidTLSConfiguration",
        "wants ResolvedRefs False/InvalidCertificateRef for a missing, malformed or unsupported certificateRef of an HTTPS listener: Rivora terminates no TLS, so it resolves no certificateRefs; checking them would take read access to every Secret of the cluster for data it never uses",
    ),
    (
        "GatewayModifyListeners",
        "counts the HTTPRoutes attached to the HTTP listeners it adds and removes (attachedRoutes 1): Rivora forwards TCPRoute and UDPRoute only and attaches no HTTPRoute",
    ),
    (
        "GatewaySecretInvalidReferenceGrant",
        "wants ResolvedRefs False/RefNotPermitted for a Secret in another namespace no ReferenceGrant permits: Rivora resolves no certificateRefs (it terminates no TLS and reads no Secrets)",
    ),
    (
        "GatewaySecretMissingReferenceGrant",
        "wants ResolvedRefs False/RefNotPermitted for a Secret in another namespace without a ReferenceGrant: Rivora resolves no certificateRefs (it terminates no TLS and reads no Secrets)",
    ),
    (
        "GatewaySecretReferenceGrantAllInNamespace",
        "wants ResolvedRefs True for a Secret a ReferenceGrant permits: Rivora resolves no certificateRefs (it terminates no TLS and reads no Secrets)",
    ),
    (
        "GatewaySecretReferenceGrantSpecific",
        "wants ResolvedRefs True for a Secret a ReferenceGrant permits: Rivora resolves no certificateRefs (it terminates no TLS and reads no Secrets)",
    ),
];
/// The whole run's bound (the suite's own per-step timeouts are far shorter).
const SUITE_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// Runs the suite's binary in the client namespace; returns (success, its output).
fn run_suite(
    cluster: &rivora_kube_testbed::cluster::Cluster,
    suite: &Path,
    kubeconfig: &Path,
    report: &Path,
    log: &Path,
) -> (bool, String) {
    let mut cmd = Command::new(suite);
    cmd.args([
        "-test.v",
        "-test.timeout=40m",
        "-test.run=TestConformance",
        "-gateway-class=rivora",
        &format!("-conformance-profiles={PROFILES}"),
        &format!("-usable-address={USABLE}"),
        &format!("-unusable-address={UNUSABLE}"),
        "-organization=rivora",
        "-project=rivora",
        "-url=https://github.com/rivora/rivora",
        &format!("-version={}", app_version()),
        "-contact=https://github.com/rivora/rivora/issues",
        &format!("-report-output={}", report.display()),
    ]);
    if std::env::var_os("RIVORA_CONFORMANCE_ALL").is_none() {
        let skip: Vec<&str> = NOT_APPLICABLE.iter().map(|(t, _)| *t).collect();
        cmd.arg(format!("-skip-tests={}", skip.join(",")));
    }
    cmd.env("KUBECONFIG", kubeconfig)
        .env("HOME", kubeconfig.parent().unwrap())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(Stdio::from(
            std::fs::File::create(log.with_extension("stderr")).unwrap(),
        ));
    cluster.client().attach_command(&mut cmd);
    let started = Instant::now();
    let mut child = cmd.spawn().expect("starting the conformance suite");
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > SUITE_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let mut out = String::new();
    for f in [log.to_path_buf(), log.with_extension("stderr")] {
        if let Ok(mut file) = std::fs::File::open(&f) {
            let _ = file.read_to_string(&mut out);
        }
    }
    println!(
        "conformance suite: {} after {:.0}s",
        match status {
            Some(s) => s.to_string(),
            None => format!("killed at the {SUITE_DEADLINE:?} deadline"),
        },
        started.elapsed().as_secs_f64()
    );
    (status.is_some_and(|s| s.success()), out)
}

/// The lines of the suite's output that say what passed, failed or was skipped.
fn verdicts(out: &str) -> String {
    out.lines()
        .filter(|l| {
            let t = l.trim_start();
            t.starts_with("--- ")
                || t.starts_with("FAIL")
                || t.starts_with("ok ")
                || t.contains("Error Trace")
                || t.contains("Error:")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_api_conformance_suite_passes_its_tcp_and_udp_profiles() {
    let conformance = ConformanceAssets::locate().unwrap();
    let crds = Assets::locate()
        .unwrap()
        .gateway_api_crd_files(GatewayChannel::Standard)
        .unwrap();
    let crd_dir = crds[0].parent().unwrap().to_path_buf();
    let (cluster, kubeconfig) = cluster_with_rivora(2, &[]).await;
    let dir = cluster.bed().dir().join("conformance-images");
    for archive in images::conformance_images(&dir, &conformance).unwrap() {
        cluster.import_image(&archive).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
    install_with(
        &cluster,
        &kubeconfig,
        &[
            "--gateway-api-crds",
            &crd_dir.to_string_lossy(),
            "--set",
            "gatewayAPI.gatewayClass.create=true",
        ],
    );
    let client = cluster.admin_client().await.unwrap();
    let system: Api<Pod> = Api::namespaced(client.clone(), NS);
    wait("a running rivorad on every node", &cluster, || {
        running_pods(&system, "app.kubernetes.io/component=rivorad", 2)
    })
    .await;
    workload::address_pool(&client, "conformance", &[POOL])
        .await
        .unwrap();
    rivora_lab::link::route(cluster.client(), POOL, &cluster.nodes()[0].v4().to_string()).unwrap();

    let out_dir: PathBuf = std::env::var_os("RIVORA_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| images::repo_root().join("target"))
                .join("gateway-conformance")
        });
    std::fs::create_dir_all(&out_dir).unwrap();
    let report = out_dir.join("report.yaml");
    let log = out_dir.join("suite.log");
    let _ = std::fs::remove_file(&report);
    // The suite runs in the client namespace: it reaches the API server on the bed's bridge.
    let suite_kubeconfig = cluster.bed().dir().join("conformance.kubeconfig");
    let url = format!("https://{SERVER_V4}:{SERVER_PORT}");
    std::fs::write(&suite_kubeconfig, cluster.bed().admin_kubeconfig(&url)).unwrap();
    let (ok, out) = tokio::task::block_in_place(|| {
        run_suite(
            &cluster,
            &conformance.suite(),
            &suite_kubeconfig,
            &report,
            &log,
        )
    });
    println!("{}", verdicts(&out));
    let report_text = std::fs::read_to_string(&report).unwrap_or_default();
    println!("report ({}):\n{report_text}", report.display());
    for (test, why) in NOT_APPLICABLE {
        println!("skipped {test}: {why}");
    }
    assert!(
        ok,
        "the conformance suite failed (log: {}):\n{}\n{}",
        log.display(),
        out.lines()
            .rev()
            .take(200)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n"),
        cluster.diagnostics(20)
    );
    let parsed: serde_json::Value =
        serde_norway::from_str(&report_text).expect("the report is YAML");
    let profiles = parsed["profiles"]
        .as_array()
        .expect("the report lists profiles");
    assert_eq!(profiles.len(), 2, "both profiles reported: {report_text}");
    assert!(
        out.contains("Supported features for GatewayClass rivora"),
        "the suite inferred the features from the GatewayClass's status"
    );
    let not_applicable: Vec<&str> = NOT_APPLICABLE.iter().map(|(t, _)| *t).collect();
    for p in profiles {
        let inferred: Vec<&str> = p["extended"]["supportedFeatures"]
            .as_array()
            .map(|f| f.iter().filter_map(|x| x.as_str()).collect())
            .unwrap_or_default();
        for f in EXTENDED_CLAIMED {
            assert!(
                inferred.contains(&f),
                "{}: {f} inferred from the GatewayClass: {inferred:?}",
                p["name"]
            );
        }
        for level in ["core", "extended"] {
            let r = &p[level];
            if r.is_null() {
                continue;
            }
            let what = format!("{} {level}", p["name"]);
            assert!(
                r["failedTests"].as_array().is_none_or(|f| f.is_empty()),
                "{what}: failed tests: {report_text}"
            );
            let skipped: Vec<&str> = r["skippedTests"]
                .as_array()
                .map(|s| s.iter().filter_map(|t| t.as_str()).collect())
                .unwrap_or_default();
            for t in &skipped {
                assert!(
                    not_applicable.contains(t),
                    "{what}: {t} skipped, but not by this test: {report_text}"
                );
            }
            let want = if skipped.is_empty() {
                "success"
            } else {
                "partial"
            };
            assert_eq!(r["result"], want, "{what}: {report_text}");
        }
    }
}
