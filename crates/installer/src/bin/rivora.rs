//! rivora: installs Rivora on a Kubernetes cluster from the chart built into this binary.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use std::time::Duration;

use rivora_installer::chart::Chart;
use rivora_installer::lifecycle::{self, Target, UpgradeMode, ValuesMode, Waiting};
use rivora_installer::{ValueInputs, apply, diff, release, render, status};
use rivora_k8s_api::class::{ClassConfig, GATEWAY_CONTROLLER_NAME, LOAD_BALANCER_CLASS};

/// Rivora's cluster lifecycle over its Helm chart (embedded; no helm needed): the chart's
/// values are set with `-f` and `--set` as with helm, checked against the chart's schema, and
/// rendered to the same objects as `helm template` renders.
#[derive(Parser, Debug)]
#[command(name = "rivora", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Install Rivora: the CRDs first (waiting until the API server serves them), then the
    /// ServiceAccounts, RBAC, the rivorad DaemonSet and the rivora-controller Deployment, by
    /// server-side apply. `--dry-run` prints the objects instead and needs no cluster.
    Install(InstallArgs),
    /// Upgrade the release: the recorded values are reused (with `-f`/`--set` merged over them)
    /// unless --reset-values; prints what changes in the live objects (edits made to them since
    /// included, which the upgrade undoes), and with --dry-run only prints it.
    /// CRDs are applied (never deleted) and no custom resource is touched.
    Upgrade(UpgradeArgs),
    /// Uninstall the release: every object it created, in reverse order, and its records. The
    /// CRDs stay unless --delete-crds, and the chart's GatewayClass while Gateways use it unless
    /// --delete-gateway-class.
    Uninstall(UninstallArgs),
    /// How Rivora stands: chart version, DaemonSet and Deployment readiness, the controller
    /// leader, each node's report (datapath, XDP mode, VIPs, BGP sessions or L2 holder,
    /// errors), pools and their usage, Services and Gateways without an address and why.
    /// Exits 1 when anything is wrong.
    Status(StatusArgs),
}

#[derive(Args, Debug)]
struct StatusArgs {
    /// Release name.
    #[arg(long, default_value = "rivora")]
    release: String,
    /// Namespace of the release.
    #[arg(short = 'n', long, default_value = "rivora-system")]
    namespace: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

/// How `status` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Output {
    /// Tables for people.
    Table,
    /// JSON for scripts (the same sections, plus `healthy`).
    Json,
}

/// Flags of the commands that talk to a cluster.
#[derive(Args, Debug)]
struct ClusterArgs {
    /// kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Wait until the DaemonSet and Deployment are ready, showing progress.
    #[arg(long)]
    wait: bool,
    /// Also apply these Gateway API CRDs first (upstream's standard-channel files: a file such as
    /// standard-install.yaml, or a directory of them; only CRDs of gateway.networking.k8s.io
    /// are accepted). Never deleted by `rivora uninstall`.
    #[arg(long, value_name = "PATH")]
    gateway_api_crds: Vec<PathBuf>,
    /// Bound on each wait (CRDs served, workloads ready), e.g. 300s or 5m.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    timeout: Duration,
}

#[derive(Args, Debug)]
struct UpgradeArgs {
    #[command(flatten)]
    chart: ChartArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Start from the chart's defaults instead of the recorded values.
    #[arg(long)]
    reset_values: bool,
    /// Print the changes to the live objects (a server-side dry run) and change nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Args, Debug)]
struct UninstallArgs {
    /// Release name.
    #[arg(long, default_value = "rivora")]
    release: String,
    /// Namespace of the release.
    #[arg(short = 'n', long, default_value = "rivora-system")]
    namespace: String,
    /// Also delete Rivora's CRDs, and with them EVERY AddressPool, ServicePolicy, BGPPeer and
    /// RivoraNode in the cluster (Services lose their Rivora addresses).
    #[arg(long)]
    delete_crds: bool,
    /// Also delete the chart's GatewayClass while Gateways use it (they lose their addresses);
    /// without it such a GatewayClass is kept, naming the Gateways.
    #[arg(long)]
    delete_gateway_class: bool,
    /// kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

/// Flags shared by the commands that render the chart.
#[derive(Args, Debug)]
struct ChartArgs {
    /// Release name (the helm release record and the `app.kubernetes.io/instance` label).
    #[arg(long, default_value = "rivora")]
    release: String,
    /// Namespace of Rivora's Pods, Leases and the BGP password Secrets.
    #[arg(short = 'n', long, default_value = "rivora-system")]
    namespace: String,
    /// A values file (YAML), merged over the chart's defaults; repeatable, later files win.
    #[arg(short = 'f', long = "values", value_name = "FILE")]
    values: Vec<PathBuf>,
    /// Set a value (`rivorad.announce=bgp`, `a.b={x,y}`); repeatable, wins over `-f`.
    #[arg(long, value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Set a value as a string whatever it looks like.
    #[arg(long, value_name = "KEY=VALUE")]
    set_string: Vec<String>,
    /// Use the chart in this directory instead of the one built in (to try a changed chart).
    #[arg(long, value_name = "DIR")]
    chart: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct InstallArgs {
    #[command(flatten)]
    chart: ChartArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Print the objects that would be applied (CRDs first), as `helm template --include-crds`
    /// prints them, and change nothing (no cluster needed).
    #[arg(long)]
    dry_run: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: expected e.g. 300s or 5m"))?;
    match unit {
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "ms" => Ok(Duration::from_millis(n)),
        _ => Err(format!("{s:?}: unit must be ms, s or m")),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rivora: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Install(args) => install(args).await,
        Command::Upgrade(args) => upgrade(args).await,
        Command::Status(args) => status(args).await,
        Command::Uninstall(args) => {
            let client = apply::connect(args.kubeconfig.as_deref()).await?;
            let target = Target {
                release: args.release,
                namespace: args.namespace,
            };
            let how = lifecycle::UninstallMode {
                delete_crds: args.delete_crds,
                delete_gateway_class: args.delete_gateway_class,
            };
            lifecycle::uninstall(&client, &Chart::embedded(), &target, how).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn target(args: &ChartArgs) -> Target {
    Target {
        release: args.release.clone(),
        namespace: args.namespace.clone(),
    }
}

fn waiting(args: &ClusterArgs) -> Waiting {
    Waiting {
        wait: args.wait,
        timeout: args.timeout,
    }
}

fn load_chart(args: &ChartArgs) -> Result<Chart> {
    match &args.chart {
        Some(dir) => Chart::from_dir(dir),
        None => Ok(Chart::embedded()),
    }
}

fn value_inputs(args: &ChartArgs) -> Result<ValueInputs> {
    let mut files = Vec::new();
    for f in &args.values {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        files.push((f.display().to_string(), text));
    }
    Ok(ValueInputs {
        files,
        set: args.set.clone(),
        set_string: args.set_string.clone(),
    })
}

async fn install(args: InstallArgs) -> Result<ExitCode> {
    let chart = load_chart(&args.chart)?;
    let inputs = value_inputs(&args.chart)?;
    let target = target(&args.chart);
    let extra = lifecycle::read_gateway_api_crds(&args.cluster.gateway_api_crds)?;
    if args.dry_run {
        let manifest = lifecycle::render_for(&chart, &inputs.user_values()?, &target, 1)?;
        let extra = render::Manifest {
            crds: extra,
            ..Default::default()
        };
        print!(
            "{}{}{}",
            extra.crds_yaml(),
            manifest.crds_yaml(),
            manifest.objects_yaml()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let client = apply::connect(args.cluster.kubeconfig.as_deref()).await?;
    let manifest = lifecycle::install(
        &client,
        &chart,
        &inputs,
        &extra,
        &target,
        waiting(&args.cluster),
    )
    .await?;
    println!("{}", manifest.notes.trim_end());
    Ok(ExitCode::SUCCESS)
}

async fn upgrade(args: UpgradeArgs) -> Result<ExitCode> {
    let chart = load_chart(&args.chart)?;
    let inputs = value_inputs(&args.chart)?;
    let mode = if args.reset_values {
        ValuesMode::Reset
    } else {
        ValuesMode::Reuse
    };
    let client = apply::connect(args.cluster.kubeconfig.as_deref()).await?;
    let extra = lifecycle::read_gateway_api_crds(&args.cluster.gateway_api_crds)?;
    let plan = lifecycle::upgrade(
        &client,
        &chart,
        &inputs,
        &extra,
        UpgradeMode {
            values: mode,
            dry_run: args.dry_run,
        },
        &target(&args.chart),
        waiting(&args.cluster),
    )
    .await?;
    print!("{}", diff::render(&plan.changes));
    if !args.dry_run {
        println!("upgraded to revision {}", plan.revision);
    }
    Ok(ExitCode::SUCCESS)
}

async fn status(args: StatusArgs) -> Result<ExitCode> {
    let client = apply::connect(args.kubeconfig.as_deref()).await?;
    let recorded =
        release::latest(apply::read_releases(&client, &args.namespace, &args.release).await?);
    // The classes the release serves come from its values (the chart's defaults otherwise).
    let chart = Chart::embedded();
    let values = match &recorded {
        Some(r) => {
            let mut v = r.chart.values.clone();
            rivora_installer::values::merge(&mut v, &r.config);
            v
        }
        None => chart.default_values.clone(),
    };
    let class = ClassConfig {
        class: values["loadBalancerClass"]
            .as_str()
            .unwrap_or(LOAD_BALANCER_CLASS)
            .to_string(),
        default_class: values["defaultClass"].as_bool().unwrap_or(false),
        gateway_controller: values["gatewayAPI"]["controllerName"]
            .as_str()
            .unwrap_or(GATEWAY_CONTROLLER_NAME)
            .to_string(),
    };
    let observed = status::observe(
        &client,
        &args.namespace,
        &class,
        recorded.as_ref().map(|r| r.chart.metadata.version.clone()),
        status::LeaseRef::from_values(&values, &args.namespace),
    )
    .await?;
    let mut report = status::evaluate(&observed);
    if recorded.is_none() {
        report.problems.insert(
            0,
            format!(
                "no release {} in namespace {}: install with `rivora install -n {}` (or pass -n/--release)",
                args.release, args.namespace, args.namespace
            ),
        );
    }
    match args.output {
        Output::Table => print!("{}", report.render_table()),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report.to_json())?),
    }
    Ok(if report.healthy() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
