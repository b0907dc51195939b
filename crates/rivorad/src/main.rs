//! rivorad: the per-node daemon. Loads and pins the BPF datapath, programs
//! its maps from a static YAML file (re-applied on SIGHUP or when it
//! changes) or, with `--kubernetes`, from the cluster's LoadBalancer
//! Services, and serves the local API that rivoractl talks to.

mod announce;
mod apply;
mod check;
mod daemon;
mod health;
mod instance;
mod kernel;
mod metrics;
mod neighbours;
mod readiness;
mod source;
mod state;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// Command line of rivorad.
#[derive(Parser, Debug)]
#[command(
    name = "rivorad",
    version,
    about = "Rivora's per-node daemon: loads the XDP/TCX datapath, programs VIPs from a YAML file or from Kubernetes, serves the local API",
    long_about = "Rivora's per-node daemon. It loads the XDP ingress and TCX egress programs, pins their maps, \
programs the VIPs listed in --config, attaches to --interface, and serves the local API (rivoractl) on a \
root-only Unix socket. The file is re-applied on SIGHUP and whenever it changes; an invalid file is rejected \
with a log line naming the field and line, and the previous configuration keeps forwarding. On start, maps pinned \
by an earlier rivorad are adopted (every VIP keeps its IDs and flows keep their backends). SIGTERM or SIGINT \
detaches the programs and removes the pins, unless --persist-datapath keeps the datapath forwarding. \
With --kubernetes instead of --config, the VIPs are the cluster's LoadBalancer Services of Rivora's class \
and their EndpointSlices (docs/kubernetes.md): a node runs static-YAML VIPs or Kubernetes VIPs, never both."
)]
pub struct Args {
    /// YAML file listing the VIPs (the whole desired state).
    #[arg(long, value_name = "FILE", required_unless_present_any = ["uninstall", "check_config", "kubernetes"])]
    pub config: Option<PathBuf>,

    /// Take the VIPs from Kubernetes instead of --config: every LoadBalancer Service of
    /// --load-balancer-class that rivora-controller gave an address, fed by its EndpointSlices
    /// (NAT VIPs). Needs --node-name; reads --kubeconfig, else KUBECONFIG, else the in-cluster
    /// config. Excludes --config and --check-config: a node runs static-YAML VIPs or Kubernetes
    /// VIPs, never both.
    #[arg(long)]
    pub kubernetes: bool,

    /// With --kubernetes: also serve this Meridio-2 Gateway (NAMESPACE/NAME) on the
    /// classifier: the DistributionGroups and L34Routes that belong to it, with targets from
    /// LoadBalancerEndpointSlices or EndpointSlices labelled with a group, all read in the
    /// Gateway's namespace (docs/meridio.md).
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        requires = "kubernetes",
        env = "RIVORA_GATEWAY"
    )]
    pub gateway: Option<String>,

    /// With --kubernetes: this node's Node name (its local endpoints, its RivoraNode report).
    #[arg(
        long,
        env = "NODE_NAME",
        value_name = "NAME",
        required_if_eq("kubernetes", "true")
    )]
    pub node_name: Option<String>,

    /// With --kubernetes: the kubeconfig to reach the API server with (default: the files of
    /// KUBECONFIG if set, as kubectl reads them, else the in-cluster ServiceAccount config).
    #[arg(long, value_name = "FILE", requires = "kubernetes")]
    pub kubeconfig: Option<PathBuf>,

    /// With --kubernetes: spec.loadBalancerClass of the Services this node programs (the same
    /// as rivora-controller's flag).
    #[arg(long, value_name = "CLASS", default_value = rivora_k8s_api::class::LOAD_BALANCER_CLASS)]
    pub load_balancer_class: String,

    /// With --kubernetes: also program LoadBalancer Services without a loadBalancerClass
    /// (Rivora is the cluster's default, as rivora-controller's flag).
    #[arg(long)]
    pub default_class: bool,

    /// With --kubernetes: spec.controllerName of the GatewayClasses whose Gateways this node
    /// programs (the same as rivora-controller's flag).
    #[arg(long, value_name = "NAME", default_value = rivora_k8s_api::class::GATEWAY_CONTROLLER_NAME)]
    pub gateway_controller_name: String,

    /// With --kubernetes: how this node announces its VIPs. `bgp`: the BGP speaker peers with
    /// the BGPPeers whose nodeSelector matches this Node and announces each VIP it can serve;
    /// `l2`: the holder of the cluster-wide L2 Lease answers ARP/NDP for every VIP on
    /// --interface; `none`: nothing is announced (docs/kubernetes.md, "Announcing").
    #[arg(long, value_enum, default_value_t = AnnounceArg::None, env = "RIVORA_ANNOUNCE")]
    pub announce: AnnounceArg,

    /// With --kubernetes: rivorad's own namespace. The BGPPeers' password Secrets are read only
    /// here (rivorad's RBAC Role for Secrets and Leases is namespaced here), and the L2 speaker
    /// Lease lives here.
    #[arg(
        long,
        value_name = "NS",
        default_value = "rivora-system",
        env = "POD_NAMESPACE"
    )]
    pub namespace: String,

    /// With --announce l2: the name of the cluster-wide Lease whose holder answers ARP/NDP.
    #[arg(long, value_name = "NAME", default_value = rivora_k8s_source::l2_lease::DEFAULT_LEASE_NAME)]
    pub l2_lease_name: String,

    /// With --announce l2: the Lease's duration (`leaseDurationSeconds`, whole seconds): how
    /// long its record must stay unchanged before another node takes it over.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub l2_lease_duration: Duration,

    /// With --announce l2: how long after the start of its last successful renewal the holder
    /// keeps answering (less than the lease duration: it stops before anyone can take over).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub l2_renew_deadline: Duration,

    /// With --announce l2: how often each node looks at the Lease (the holder renews it). The
    /// failover budget is lease duration + 2 x retry period + 1 s (docs/kubernetes.md).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub l2_retry_period: Duration,

    /// With --announce l2: how often the holder announces every VIP again unasked (gratuitous
    /// ARP, unsolicited NA), so switches' and hosts' caches never age out.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub l2_refresh_interval: Duration,

    /// Interface to attach to: XDP on its ingress, TCX on its egress (the side facing clients).
    #[arg(long, value_name = "IF", required_unless_present_any = ["uninstall", "check_config"])]
    pub interface: Option<String>,

    /// Validate FILE without touching the datapath, print every problem (exit 1) or, when a
    /// rivorad runs on --api-socket, what applying FILE would change against what it forwards,
    /// and exit. The safe way to try a file: a second rivorad on the same pin directory is
    /// refused.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["config", "interface", "uninstall", "persist_datapath"])]
    pub check_config: Option<PathBuf>,

    /// Pin the XDP and TCX links too, so the datapath keeps forwarding while rivorad is down;
    /// the next start adopts the maps and swaps its programs into the pinned links atomically.
    /// Without it, stopping rivorad detaches everything and removes the pins.
    #[arg(long)]
    pub persist_datapath: bool,

    /// If the pinned maps were written by an incompatible rivorad (another map ABI or Maglev
    /// table size), replace them with empty ones instead of refusing to start. Flow state is
    /// lost: NAT connections in progress break.
    #[arg(long)]
    pub reset_pinned_state: bool,

    /// Remove everything rivorad left in --pin-dir (pinned links, which detaches the programs,
    /// and pinned maps) and exit. The clean uninstall of a --persist-datapath installation.
    /// Refused while a rivorad runs on that pin directory (stop it first).
    #[arg(long, conflicts_with_all = ["config", "interface", "persist_datapath"])]
    pub uninstall: bool,

    /// Load xdp_ingress.o and tc_nat.o from this directory instead of the programs built into
    /// rivorad (for testing a rebuilt program or staging a program-only upgrade).
    #[arg(long, value_name = "DIR")]
    pub bpf_object_dir: Option<PathBuf>,

    /// XDP attach mode. auto: generic on veth, bridges and bridge ports, native elsewhere
    /// (falling back to generic if the driver refuses).
    #[arg(long, value_enum, default_value_t = XdpModeArg::Auto)]
    pub xdp_mode: XdpModeArg,

    /// bpffs directory for the pinned maps (bpffs is mounted at /sys/fs/bpf if missing).
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/bpf/rivora-lb")]
    pub pin_dir: PathBuf,

    /// Unix socket of the local API (created mode 0600).
    #[arg(long, value_name = "PATH", default_value = rivora_api::DEFAULT_SOCKET)]
    pub api_socket: PathBuf,

    /// Length of the shared Maglev table in slots (a prime), shared by all VIPs: at most half
    /// of it goes to slices, each VIP's sized by its backends and scaled down when all do not
    /// fit. Default: the length of the table pinned in --pin-dir if there is one (a restart or
    /// upgrade keeps it), else 4,194,301 (16 MiB; 4,096 VIPs of up to 5 backends at Maglev's
    /// preferred ~100 slots per backend). See docs/maglev.md.
    #[arg(long, value_name = "SLOTS")]
    pub maglev_table_size: Option<u32>,

    /// Capacity of each flow table (per family: the affinity table and the NAT reverse table),
    /// in flows. Flows beyond it evict the least recently used ones' state (a NAT connection
    /// whose state is evicted breaks). Memory grows with it (docs/operations.md). Pinned tables
    /// of another size are refused at start: keep the old size, or --reset-pinned-state.
    #[arg(long, value_name = "FLOWS", default_value_t = rivora_abi::MAX_FLOWS,
          value_parser = clap::value_parser!(u32).range(rivora_abi::MIN_FLOW_TABLE as i64..=rivora_abi::MAX_FLOW_TABLE as i64))]
    pub flow_table_size: u32,

    /// New-flow guard: how many flow-state entries per second (node-wide, split evenly over
    /// the CPUs) packets of flows without state may create. A SYN or a one-packet UDP flow
    /// creates none; a connection creates one with its handshake's ACK. Beyond the rate,
    /// such packets are forwarded by Maglev alone and counted (drop reason flow_guarded),
    /// so a flood cannot evict established flows. 0 turns the guard off.
    #[arg(long, value_name = "ENTRIES_PER_S", default_value_t = rivora_dataplane::guard::DEFAULT_RATE)]
    pub new_flow_guard_rate: u64,

    /// Node ports (FIRST-LAST) that flows to backends on other nodes (Kubernetes
    /// externalTrafficPolicy Cluster) leave from, with the node's address as source. A port
    /// is unique per backend endpoint and protocol, so the range bounds concurrent flows to
    /// one endpoint. Keep it outside net.ipv4.ip_local_port_range (32768-60999 by default).
    #[arg(long, value_name = "FIRST-LAST", default_value = "61000-65535",
          value_parser = rivora_dataplane::snat::parse_ports)]
    pub snat_ports: std::ops::RangeInclusive<u16>,

    /// Seconds a backend that the config no longer lists keeps draining (its established
    /// flows continue, it takes no new ones) before its ID is released. 0 releases at once.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub backend_retire_secs: u64,

    /// Serve Prometheus metrics on this TCP address (e.g. 127.0.0.1:9469); off by default.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_listen: Option<std::net::SocketAddr>,

    /// How often the config file is checked for changes, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub config_poll_ms: u64,

    /// Keep Meridio-2's readiness files here: `lb-ready-<group>` for each classifier
    /// distribution group with a target to forward to, removed when it has none and when
    /// rivorad stops without --persist-datapath (Meridio-2's router container reads them).
    #[arg(long, value_name = "DIR", env = "RIVORA_READINESS_DIR")]
    pub readiness_dir: Option<PathBuf>,
}

/// A duration with a unit: `500ms`, `2s`, `1m`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: write e.g. 500ms, 2s or 1m"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(value)),
        "s" => Ok(Duration::from_secs(value)),
        "m" => Ok(Duration::from_secs(value.saturating_mul(60))),
        _ => Err(format!("{text:?} has no unit: write e.g. 500ms, 2s or 1m")),
    }
}

/// `--announce` values.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum AnnounceArg {
    /// Nothing announces the VIPs.
    None,
    /// BGP from every node, per BGPPeer.
    Bgp,
    /// ARP/NDP from the holder of one Lease.
    L2,
}

/// `--xdp-mode` values.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum XdpModeArg {
    /// Native where the driver supports it well, generic on veth and bridge ports.
    Auto,
    /// Driver (native) mode only.
    Native,
    /// Generic (skb) mode only.
    Generic,
}

/// Why `--kubernetes` refuses `args`, if it does: checked before anything is touched, with our
/// own words (clap would only say that two flags conflict, not why).
fn source_conflict(args: &Args) -> Option<String> {
    if !args.kubernetes {
        return None;
    }
    let flag = if args.config.is_some() {
        "--config"
    } else if args.check_config.is_some() {
        "--check-config"
    } else {
        return None;
    };
    Some(format!(
        "rivorad: --kubernetes and {flag} exclude each other: a node runs static-YAML VIPs or \
         Kubernetes VIPs, never both (docs/kubernetes.md); drop one of them"
    ))
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if let Some(why) = source_conflict(&args) {
        eprintln!("{why}");
        return std::process::ExitCode::from(2);
    }
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
        // SAFETY: isatty has no preconditions.
        .with_ansi(unsafe { libc::isatty(2) } == 1)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rivorad: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Some(file) = &args.check_config {
        return match rt.block_on(check::run(file, &args.api_socket)) {
            Ok(report) => {
                print!("{report}");
                std::process::ExitCode::SUCCESS
            }
            Err(errors) => {
                eprintln!("{errors}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    match rt.block_on(daemon::run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
