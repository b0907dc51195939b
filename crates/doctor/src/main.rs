//! rivora-doctor: checks whether this host is ready for rivorad and says
//! what to change when it is not. The checks live in the library.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// Command line of rivora-doctor.
#[derive(Parser, Debug)]
#[command(
    name = "rivora-doctor",
    version,
    about = "Checks whether this host is ready for rivorad: kernel, BPF, bpffs, the interface's XDP, sysctls, pinned maps, firewall rules, the clock and (with --kubernetes) the API server and RBAC",
    long_about = "Checks whether this host is ready for rivorad and prints one line per check: PASS, WARN \
(works, with the cost or risk named), FAIL (rivorad, or the part named, cannot work like this) or SKIP \
(not applicable to what was given), each with the reason and, when not PASS, the exact command or setting \
that fixes it. Give the same --interface, --config, --pin-dir and table sizes as rivorad (or --kubernetes) \
for the checks that depend on them. Run it as root, in the network and mount namespace rivorad will run in. \
It changes no setting and leaves nothing behind (a test map and an unattached test program are \
loaded and freed), except mounting bpffs at /sys/fs/bpf with --fix. \
Exit status: 0 when no check fails, 1 when one does, 2 for usage errors."
)]
struct Args {
    /// The interface rivorad attaches to: its driver's XDP support, programs already on its XDP
    /// and TCX hooks, its rp_filter and accept_local, its MTU.
    #[arg(long, value_name = "IF")]
    interface: Option<String>,

    /// rivorad's YAML file: decides which VIP families need forwarding, whether the L3 DSR checks
    /// (rp_filter, accept_local, tunnels, MTU) apply, and which addresses and ports the firewall
    /// check looks for.
    #[arg(long, value_name = "FILE", conflicts_with = "kubernetes")]
    config: Option<PathBuf>,

    /// rivorad's pin directory: pinned maps are checked against this build's layout (as rivorad's
    /// start does), and programs using them count as Rivora's own on the interface.
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/bpf/rivora-lb")]
    pin_dir: PathBuf,

    /// rivorad's --maglev-table-size, for the pinned-maps check. Default: as rivorad's, the
    /// pinned table's length if one is pinned, else rivorad's default.
    #[arg(long, value_name = "SLOTS")]
    maglev_table_size: Option<u32>,

    /// rivorad's --flow-table-size, for the pinned-maps check.
    #[arg(long, value_name = "FLOWS", default_value_t = rivora_abi::MAX_FLOWS,
          value_parser = clap::value_parser!(u32).range(rivora_abi::MIN_FLOW_TABLE as i64..=rivora_abi::MAX_FLOW_TABLE as i64))]
    flow_table_size: u32,

    /// MTU of the clients' side (upstream of the balancer), compared with the interface's MTU less
    /// the L3 DSR encapsulation; without it the MTU check warns with the numbers.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(68..=65535))]
    upstream_mtu: Option<u32>,

    /// Mount bpffs at /sys/fs/bpf if none is mounted there (the only change rivora-doctor makes).
    #[arg(long)]
    fix: bool,

    /// Check for `rivorad --kubernetes`: the API server answers a version call, and this identity
    /// has every permission of deploy/rbac/rivorad.yaml (SelfSubjectAccessReviews).
    #[arg(long)]
    kubernetes: bool,

    /// With --kubernetes: the kubeconfig to reach the API server with (default: the in-cluster
    /// ServiceAccount config, as rivorad).
    #[arg(long, value_name = "FILE", requires = "kubernetes")]
    kubeconfig: Option<PathBuf>,

    /// With --kubernetes: rivorad's namespace, where its Role (Secrets, the L2 Lease) applies.
    #[arg(
        long,
        value_name = "NS",
        default_value = "rivora-system",
        env = "POD_NAMESPACE"
    )]
    namespace: String,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    /// A table, then a summary line.
    Table,
    /// The findings as JSON.
    Json,
}

fn main() {
    let args = Args::parse();
    for (flag, path) in [
        ("--config", &args.config),
        ("--kubeconfig", &args.kubeconfig),
    ] {
        if let Some(p) = path
            && !p.exists()
        {
            eprintln!("rivora-doctor: {flag} {}: no such file", p.display());
            std::process::exit(2);
        }
    }
    let report = rivora_doctor::run(&rivora_doctor::Options {
        interface: args.interface,
        config: args.config,
        pin_dir: args.pin_dir,
        maglev_table_size: args.maglev_table_size,
        flow_table_size: args.flow_table_size,
        upstream_mtu: args.upstream_mtu,
        fix: args.fix,
        kubernetes: args.kubernetes,
        kubeconfig: args.kubeconfig,
        namespace: args.namespace,
    });
    let out = match args.output {
        Output::Json => report.render_json(),
        Output::Table => report.render_table(width()),
    };
    print!("{out}");
    std::process::exit(report.exit_code());
}

/// The terminal's width, or 160 columns when stdout is not a terminal.
fn width() -> u16 {
    if !std::io::stdout().is_terminal() {
        return 160;
    }
    // SAFETY: TIOCGWINSZ into a zeroed winsize.
    unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) == 0 && ws.ws_col >= 60 {
            return ws.ws_col;
        }
    }
    160
}
