//! Issue 40: a burst of Services at cluster scale on the chart's default flags. The real
//! `rivorad --kubernetes` runs with the arguments the chart renders from its default values
//! (no `--maglev-table-size`: rivorad's default table), as the ServiceAccount of
//! deploy/rbac/rivorad.yaml, against the real API server. 1,000 LoadBalancer Services of 5
//! endpoints each (with their status, as rivora-controller writes it, and their
//! EndpointSlices, as the controller-manager writes them) are created in one burst:
//! - every one is programmed, none refused, and the node's report (`rivoractl status`'s
//!   counts) says so; each VIP's Maglev slice and its imbalance are reported (the balance
//!   figures are printed, the shares checked against the table);
//! - an endpoint change of one Service afterwards still reaches the datapath.
//!
//! Before the fix a few hundred Services filled the chart's 65,537-slot table and every later
//! apply was refused. Needs root and the test dependencies (scripts/build-testdeps.sh).

mod k8s_common;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_common::*;
use rivora_installer::chart::Chart;
use rivora_installer::render::{ReleaseInfo, render};
use rivora_lab::cluster::Cluster;
use serde_json::json;

const SERVICES: usize = 1000;
const ENDPOINTS: usize = 5;
/// Long enough for a loaded 2-core machine to create 2,000 objects and the agent to program
/// them; reported when it is not met.
const BURST_WAIT: Duration = Duration::from_secs(300);
/// Writes in flight while creating the burst.
const IN_FLIGHT: usize = 24;

/// The arguments the chart gives rivorad with its default values (and the one required value,
/// `rivorad.interface`), minus those the harness sets for the lab itself (the node name and
/// kubeconfig, the interface, the class, the metrics address).
fn chart_default_args() -> Vec<String> {
    let chart = Chart::embedded();
    let user = json!({"rivorad": {"interface": "up0"}});
    let values = rivora_installer::effective_values(&chart, &user).expect("the chart's defaults");
    let release = ReleaseInfo {
        name: "rivora".into(),
        namespace: "rivora-system".into(),
        revision: 1,
        is_install: true,
    };
    let manifest = render(&chart, &values, &release).expect("rendering the chart");
    let ds = manifest
        .objects
        .iter()
        .find(|d| d.kind() == "DaemonSet")
        .expect("the chart's rivorad DaemonSet");
    let args = ds.object["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("rivorad's args")
        .iter()
        .map(|a| a.as_str().expect("a string argument").to_string())
        .collect::<Vec<_>>();
    let harness = [
        "--kubernetes",
        "--interface",
        "--load-balancer-class",
        "--metrics-listen",
    ];
    args.into_iter()
        .filter(|a| !harness.iter().any(|h| a.split('=').next() == Some(*h)))
        .collect()
}

/// Pod `i`'s address: 10.201.0.0/16 (never a VIP or a node address).
fn pod(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 201, (i / 250) as u8, (i % 250 + 1) as u8))
}

/// Service `s`'s VIP: 10.171.0.0/16.
fn vip(s: usize) -> String {
    Ipv4Addr::new(10, 171, (s / 250) as u8, (s % 250 + 1) as u8).to_string()
}

/// Service `s`'s endpoints: pods shared by groups of Services, as Pods back several Services
/// (the backend table holds 8,192 address:port pairs).
fn endpoints(s: usize) -> Vec<IpAddr> {
    (0..ENDPOINTS)
        .map(|e| pod((s * ENDPOINTS + e) % 2000))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_a_thousand_services_is_programmed_on_the_charts_default_flags() {
    let args = chart_default_args();
    assert!(
        !args.iter().any(|a| a.starts_with("--maglev-table-size")),
        "the chart's default leaves the table size to rivorad: {args:?}"
    );
    let t = K8sTest::new("scale").await;
    let lab = Cluster::build("ksc", &[1]).expect("building the cluster lab");
    let mut agent = t.agent(&lab, 1).await;
    // rivorad's default, as the chart leaves it (the harness passes one explicitly).
    agent.retire_secs = "30".into();
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    agent.start_in(&lab.node(1).unwrap().ns, &arg_refs);
    let node = agent.name.clone();
    wait_for("the initial sync", WAIT, || async {
        let k = agent.kubernetes().await?;
        if k.initial_sync_complete {
            Ok(())
        } else {
            Err(format!("{:?}", k.blocking))
        }
    })
    .await;

    // The burst: every Service with its status and its slice, IN_FLIGHT at a time.
    let started = Instant::now();
    let created = futures::stream::iter(0..SERVICES)
        .map(|s| {
            let (t, node) = (&t, node.as_str());
            async move {
                let name = format!("s{s}");
                t.service(&name, &vip(s), http_port(), json!({})).await;
                let eps: Vec<Ep> = endpoints(s)
                    .into_iter()
                    .map(|addr| Ep {
                        addr,
                        node,
                        terminating: false,
                    })
                    .collect();
                t.slice(&name, &eps, http_slice_port()).await;
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .count()
        .await;
    assert_eq!(created, SERVICES);
    let written = started.elapsed();

    let vips = wait_for("every Service programmed", BURST_WAIT, || async {
        let k = agent.kubernetes().await?;
        let count = |s: &str| k.services.get(s).copied().unwrap_or(0);
        let vips = agent.vips().await?;
        let full = vips
            .iter()
            .filter(|v| v.backends.iter().filter(|b| b.state == "healthy").count() == ENDPOINTS)
            .count();
        if count("programmed") as usize == SERVICES && full == SERVICES {
            Ok(vips)
        } else {
            Err(format!(
                "{} programmed, {} refused, {} failing, {full} VIPs with all {ENDPOINTS} \
                 backends; failing: {:?}",
                count("programmed"),
                count("refused"),
                count("failing"),
                k.failing
            ))
        }
    })
    .await;
    let done = started.elapsed();
    let status = agent.api().status().await.unwrap();
    let table = status.maglev_table_size;
    let slots: u64 = vips.iter().map(|v| u64::from(v.maglev_size)).sum();
    let sizes: BTreeSet<u32> = vips.iter().map(|v| v.maglev_size).collect();
    let worst = vips
        .iter()
        .map(|v| v.worst_imbalance_pct)
        .fold(0.0, f64::max);
    eprintln!(
        "{SERVICES} Services x {ENDPOINTS} endpoints: written in {:.1} s, all programmed \
         {:.1} s after the first write; table {table} slots, {slots} in slices (sizes \
         {sizes:?}), worst imbalance {worst:.2}%",
        written.as_secs_f64(),
        done.as_secs_f64()
    );
    assert!(
        slots <= u64::from(table),
        "slices hold {slots} slots of {table}"
    );
    // Balance is reported for every VIP and is Maglev's, not a starved slice's: at least ~100
    // slots per backend leave every backend within a few percent of its share.
    assert!(
        worst < 10.0,
        "worst imbalance {worst:.2}% (slice sizes {sizes:?})"
    );
    let k = agent.kubernetes().await.unwrap();
    assert_eq!(
        k.services.get("refused").copied().unwrap_or(0),
        0,
        "{:?}",
        k.failing
    );

    // A later endpoint change of one Service reaches the datapath.
    let changed: Vec<Ep> = [pod(2500), pod(2501)]
        .into_iter()
        .map(|addr| Ep {
            addr,
            node: node.as_str(),
            terminating: false,
        })
        .collect();
    t.slice("s7", &changed, http_slice_port()).await;
    wait_for("the change of s7 in the datapath", WAIT, || async {
        let vips = agent.vips().await?;
        let v = vips
            .iter()
            .find(|v| v.address == vip(7))
            .ok_or("no VIP of s7")?;
        let active: BTreeSet<String> = v
            .backends
            .iter()
            .filter(|b| b.state == "healthy")
            .map(|b| b.address.clone())
            .collect();
        let want: BTreeSet<String> = ["10.201.10.1", "10.201.10.2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if active == want {
            Ok(())
        } else {
            Err(format!("active backends {active:?}"))
        }
    })
    .await;
}
