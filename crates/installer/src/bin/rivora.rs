//! rivora: installs Rivora on a Kubernetes cluster from the chart built into this binary.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use rivora_installer::chart::Chart;
use rivora_installer::render::{self, ReleaseInfo};
use rivora_installer::{ValueInputs, effective_values};

/// Rivora's cluster lifecycle over its Helm chart (embedded; no helm needed): the chart's
/// values are set with `-f` and `--set` as with helm, checked against the chart's schema, and
/// rendered exactly as `helm template` renders them.
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
    /// Print the objects that would be applied (CRDs first), as `helm template --include-crds`
    /// prints them, and change nothing.
    #[arg(long)]
    dry_run: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rivora: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Install(args) => install(args),
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

fn install(args: InstallArgs) -> Result<ExitCode> {
    let chart = load_chart(&args.chart)?;
    let user = value_inputs(&args.chart)?.user_values()?;
    let values = effective_values(&chart, &user)?;
    let release = ReleaseInfo {
        name: args.chart.release.clone(),
        namespace: args.chart.namespace.clone(),
        revision: 1,
        is_install: true,
    };
    let manifest = render::render(&chart, &values, &release)?;
    if args.dry_run {
        print!("{}{}", manifest.crds_yaml(), manifest.objects_yaml());
        return Ok(ExitCode::SUCCESS);
    }
    anyhow::bail!("installing into a cluster is not built yet: use --dry-run")
}
