//! `rivora-cluster`: a local Kubernetes cluster of namespace nodes with Rivora installed on it,
//! as a newcomer's demo (`scripts/demo --kubernetes`).
//!
//! Why a binary of the test bed's crate: the demo runs exactly the cluster the tests run (real
//! API server, controller-manager, scheduler, kubelets and containerd; Rivora's image from
//! `scripts/image`; `rivora install` as a user types it), so what it shows is what is tested.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use comfy_table::Table;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use rivora_kube_testbed::cluster::{Cluster, ClusterOptions, images, workload};
use rivora_kube_testbed::{SERVER_PORT, SERVER_V4};

/// A local Kubernetes cluster (network-namespace nodes with containerd and a kubelet each)
/// with Rivora on it. Needs root and the test dependencies (scripts/setup.sh --with-testdeps).
#[derive(Parser)]
#[command(name = "rivora-cluster", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the cluster, build and load Rivora's image, `rivora install`, serve three echo Pods
    /// behind a LoadBalancer Service, send real traffic through every node, show `rivora status`
    /// and `rivoractl` on a node, then tear it all down.
    Demo {
        /// The `rivora` binary (install, status).
        #[arg(long)]
        rivora: PathBuf,
        /// The `rivoractl` binary, run on a node.
        #[arg(long)]
        rivoractl: PathBuf,
        /// Nodes (each runs containerd and a kubelet).
        #[arg(long, default_value_t = 2)]
        nodes: usize,
        /// TCP connections and UDP exchanges per node.
        #[arg(long, default_value_t = 600)]
        flows: usize,
        /// Leave the cluster up until Enter or Ctrl-C, printing how to reach it.
        #[arg(long)]
        keep: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rivora-cluster: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.cmd {
        Cmd::Demo {
            rivora,
            rivoractl,
            nodes,
            flows,
            keep,
        } => rt.block_on(demo(&rivora, &rivoractl, nodes, flows, keep)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rivora-cluster: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Numbered steps with their duration: the slow ones (images, the cluster) show progress.
struct Steps {
    total: usize,
    n: usize,
    started: Instant,
}

impl Steps {
    fn begin(&mut self, what: &str) -> Instant {
        self.n += 1;
        println!(
            "\n[{}/{}] {what} ({:.0} s in)",
            self.n,
            self.total,
            self.started.elapsed().as_secs_f64()
        );
        Instant::now()
    }
}

fn done(t: Instant) {
    println!("      done in {:.1} s", t.elapsed().as_secs_f64());
}

async fn demo(
    rivora: &Path,
    rivoractl: &Path,
    nodes: usize,
    flows: usize,
    keep: bool,
) -> Result<()> {
    // Absolute: rivoractl runs inside a node's mount namespace, where the working directory is /.
    let rivora = &std::fs::canonicalize(rivora).with_context(|| format!("{}", rivora.display()))?;
    let rivoractl =
        &std::fs::canonicalize(rivoractl).with_context(|| format!("{}", rivoractl.display()))?;
    let mut steps = Steps {
        total: 7,
        n: 0,
        started: Instant::now(),
    };
    let t = steps.begin("building Rivora's image (scripts/image rivora: this checkout's binaries)");
    let image_dir =
        std::env::temp_dir().join(format!("rivora-cluster-demo-{}", std::process::id()));
    let version = chart_app_version()?;
    let image = images::rivora_image(&image_dir, &version)?;
    println!(
        "      ghcr.io/rivora/rivora:{version}, {:.1} MB",
        std::fs::metadata(&image)?.len() as f64 / 1e6
    );
    done(t);

    let t = steps.begin(&format!(
        "starting the cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and \
         {nodes} nodes with containerd and a kubelet, the image imported on each"
    ));
    let cluster = Cluster::start(ClusterOptions {
        nodes,
        images: vec![image],
    })
    .await?;
    let _ = std::fs::remove_dir_all(&image_dir);
    for n in cluster.nodes() {
        println!("      {} Ready, InternalIP {} {}", n.name(), n.v4(), n.v6());
    }
    done(t);
    let kubeconfig = cluster.bed().dir().join("admin.kubeconfig");
    std::fs::write(
        &kubeconfig,
        cluster.bed().admin_kubeconfig(&cluster.bed().url()),
    )?;

    let t = steps
        .begin("rivora install --wait (the chart's defaults; apiServer.host: no kube-proxy here)");
    run(
        rivora,
        &[
            "install",
            "--wait",
            "--set",
            &format!("apiServer.host={SERVER_V4}"),
            "--set",
            &format!("apiServer.port={SERVER_PORT}"),
        ],
        &kubeconfig,
        true,
    )?;
    done(t);

    let t = steps.begin(
        "an AddressPool (10.99.0.0/28), a Deployment of 3 echo Pods and a LoadBalancer Service",
    );
    let client = cluster.admin_client().await?;
    workload::address_pool(&client, "demo", &["10.99.0.0/28"]).await?;
    workload::echo_app(&client, "demo", 3).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "demo");
    let echoes = workload::poll("3 echo Pods running", Duration::from_secs(120), || {
        workload::running_pods(&pods, "app=echo", 3)
    })
    .await?;
    let vip = workload::service_address(&client, "demo", "echo", Duration::from_secs(60)).await?;
    println!("      Service demo/echo: {vip} (TCP and UDP port 80)");
    done(t);

    let t = steps.begin(&format!(
        "real traffic from the client to {vip}:80 through each node: {flows} TCP connections and \
         {flows} UDP exchanges per node"
    ));
    let target = SocketAddr::new(vip, 80);
    let mut table = Table::new();
    let mut header = vec!["Pod".to_string(), "runs on".to_string()];
    let mut columns = Vec::new();
    for node in cluster.nodes() {
        cluster.route_via(vip, node)?;
        let tcp =
            rivora_lab::tcp_round(cluster.client(), target, flows, 16, Duration::from_secs(2));
        let udp =
            rivora_lab::udp_round(cluster.client(), target, flows, 16, Duration::from_secs(2));
        if !tcp.all_ok() || !udp.all_ok() {
            bail!(
                "traffic through {} failed:\n{tcp}\n{udp}\n{}",
                node.name(),
                cluster.diagnostics(10)
            );
        }
        header.push(format!("TCP via {}", node.name()));
        header.push(format!("UDP via {}", node.name()));
        columns.push(tcp.shares());
        columns.push(udp.shares());
    }
    table.set_header(header);
    for p in &echoes {
        let mut row = vec![p.name.clone(), p.node.clone()];
        for c in &columns {
            row.push(format!(
                "{:.1}%",
                c.get(&p.name).copied().unwrap_or(0.0) * 100.0
            ));
        }
        table.add_row(row);
    }
    println!("{table}");
    println!(
        "      every flow answered by the VIP; flows to Pods on the other node leave with the \
         receiving node's address (ETP Cluster), so their replies come back through it"
    );
    done(t);

    let t = steps.begin("rivora status");
    run(rivora, &["status"], &kubeconfig, true)?;
    done(t);

    let first = &cluster.nodes()[0];
    let t = steps.begin(&format!(
        "rivoractl on {} (its rivorad's view)",
        first.name()
    ));
    let ctl = rivoractl.to_string_lossy();
    for args in [["status"], ["vips"]] {
        let mut argv = vec![ctl.as_ref()];
        argv.extend_from_slice(&args);
        println!("$ rivoractl {}", args.join(" "));
        print!("{}", first.exec(&argv)?);
    }
    done(t);

    if keep {
        println!(
            "\nThe cluster stays up until you press Enter (or Ctrl-C). From another shell (as root):\n\
             \x20 export KUBECONFIG={kc}\n\
             \x20 {rivora} status\n\
             \x20 nsenter --mount={mnt} --net={net} {ctl} watch     # rivoractl on {node}\n\
             \x20 nsenter --net={client} bash                          # the client; VIP {vip}:80\n\
             Node logs: {dir}",
            kc = kubeconfig.display(),
            rivora = rivora.display(),
            mnt = first.mount_ns().display(),
            net = first.netns().path().display(),
            node = first.name(),
            client = cluster.client().path().display(),
            dir = first.dir().parent().unwrap_or(first.dir()).display(),
        );
        let enter = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
        });
        tokio::select! {
            _ = enter => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    println!(
        "\nTearing down (containers, kubelets, containerd, control plane, namespaces); the demo \
         took {:.0} s",
        steps.started.elapsed().as_secs_f64()
    );
    drop(cluster);
    Ok(())
}

/// Runs `bin ARGS --kubeconfig K`; with `show`, its output goes to the terminal as it comes.
fn run(bin: &Path, args: &[&str], kubeconfig: &Path, show: bool) -> Result<()> {
    let mut cmd = Command::new(bin);
    cmd.args(args).arg("--kubeconfig").arg(kubeconfig);
    let status = if show {
        cmd.status()
    } else {
        cmd.output().map(|o| o.status)
    }
    .with_context(|| format!("running {}", bin.display()))?;
    if !status.success() {
        bail!("{} {} exited {status}", bin.display(), args.join(" "));
    }
    Ok(())
}

/// The chart's appVersion: the image tag `rivora install` deploys.
fn chart_app_version() -> Result<String> {
    let chart = images::repo_root().join("deploy/chart/Chart.yaml");
    let text =
        std::fs::read_to_string(&chart).with_context(|| format!("reading {}", chart.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_string())
        .context("no appVersion in deploy/chart/Chart.yaml")
}
