//! rivora-controller: assigns addresses from AddressPools to Rivora's LoadBalancer Services and
//! Gateways, and writes ServicePolicy and Gateway API (GatewayClass, Gateway, route) status, and
//! with `--distribution-group-status` the status of Meridio-2's DistributionGroups.
//! Run two replicas; one leads through a Lease and is the only writer.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use rivora_controller::leader::LeaderConfig;
use rivora_controller::metrics::Metrics;
use rivora_controller::observe::{ClassConfig, LOAD_BALANCER_CLASS};
use rivora_controller::run::{self, OptIn, Settings};
use tracing::{error, info};

/// Assigns addresses from Rivora's AddressPools to LoadBalancer Services and writes
/// Service.status.loadBalancer, and says in each ServicePolicy's status whether the nodes apply
/// it to its targets; only the replica holding the Lease writes.
#[derive(Parser, Debug)]
#[command(name = "rivora-controller", version)]
struct Args {
    /// Namespace of the leader-election Lease (the controller's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "rivora-system")]
    lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "rivora-controller")]
    lease_name: String,
    /// This replica's identity in the Lease and in Events (default: the pod name, else the host
    /// name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// How long a leader that stopped renewing keeps the Lease, in seconds.
    #[arg(long, default_value_t = 15)]
    lease_duration: u64,
    /// Seconds before expiry at which the leader renews; with half of it left and no renewal it
    /// stops writing.
    #[arg(long, default_value_t = 5)]
    lease_grace: u64,
    /// spec.loadBalancerClass of the Services this controller serves (and the nodes program;
    /// a ServicePolicy targeting another Service is Invalid).
    #[arg(long, default_value = LOAD_BALANCER_CLASS)]
    load_balancer_class: String,
    /// Also serve LoadBalancer Services without a loadBalancerClass (Rivora is the default).
    #[arg(long)]
    default_class: bool,
    /// spec.controllerName of the GatewayClasses this controller serves (their Gateways get
    /// addresses and status; the nodes' rivorad takes the same flag).
    #[arg(long, default_value = rivora_k8s_api::class::GATEWAY_CONTROLLER_NAME)]
    gateway_controller_name: String,
    /// Also write the Ready and CapacityExceeded conditions of the DistributionGroups of
    /// Meridio-2's Gateways (GatewayClass controllerName
    /// meridio-2.nordix.org/gateway-controller), as Meridio-2 defines them. Off by default: a
    /// cluster running Meridio-2's own controller-manager already owns these conditions (its
    /// DistributionGroup controller writes them), and two writers would fight over them. Turn
    /// it on only where Rivora serves Meridio-2's model without that controller.
    #[arg(long)]
    distribution_group_status: bool,
    /// Address of the HTTP server with /metrics (Prometheus) and /healthz.
    #[arg(long, default_value = "0.0.0.0:9090")]
    metrics_address: std::net::SocketAddr,
}

#[tokio::main]
async fn main() {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if !std::env::var("RUST_LOG").is_ok_and(|v| v.contains("kube_client")) {
        filter = filter.add_directive(
            rivora_k8s_source::backoff::QUIET_KUBE_CLIENT
                .parse()
                .expect("a valid directive"),
        );
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: a Pod's log (containerd writes it to a file) stays text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Err(e) = run_main(Args::parse()).await {
        error!("{e:#}");
        std::process::exit(1);
    }
}

async fn run_main(args: Args) -> Result<()> {
    let identity = match args.identity {
        Some(id) => id,
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .context("no --identity/POD_NAME and no host name")?,
    };
    let client = kube::Client::try_default()
        .await
        .context("connecting to the API server (in-cluster config or KUBECONFIG)")?;
    let metrics = Arc::new(Metrics::new());
    serve_metrics(args.metrics_address, Arc::clone(&metrics)).await?;
    let settings = Settings {
        class: ClassConfig {
            class: args.load_balancer_class,
            default_class: args.default_class,
            gateway_controller: args.gateway_controller_name,
        },
        identity: identity.clone(),
        debounce: Duration::from_millis(50),
        resync: Duration::from_secs(30),
        metrics,
    };
    if args.distribution_group_status {
        info!("--distribution-group-status: writing the status of Meridio-2's DistributionGroups");
    }
    run::replica_with(
        client,
        LeaderConfig {
            lease_name: args.lease_name,
            namespace: args.lease_namespace,
            identity,
            duration: Duration::from_secs(args.lease_duration),
            grace: Duration::from_secs(args.lease_grace),
        },
        settings,
        OptIn {
            distribution_group_status: args.distribution_group_status,
        },
        shutdown_signal()?,
    )
    .await
}

/// Resolves at SIGTERM (what the kubelet sends to stop a pod) or SIGINT. Why both: the leader
/// must release its Lease on the way out, or the next leader waits a whole Lease duration; and
/// without a handler SIGTERM ends the process at once.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => info!("SIGTERM: stopping"),
            _ = int.recv() => info!("SIGINT: stopping"),
        }
    })
}

/// Serves /metrics and /healthz on `addr` in the background.
async fn serve_metrics(addr: std::net::SocketAddr, metrics: Arc<Metrics>) -> Result<()> {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics server on {addr}"))?;
    info!(address = %listener.local_addr()?, "serving /metrics");
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = Arc::clone(&metrics);
                async move {
                    (
                        [(
                            "content-type",
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        m.encode(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            error!("metrics server: {e}");
        }
    });
    Ok(())
}
