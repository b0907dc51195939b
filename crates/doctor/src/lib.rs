//! rivora-doctor: is this host ready for rivorad?
//!
//! Three layers, kept apart so every verdict is testable without a host:
//!
//! * [`probe`] observes: /proc, /sys, sysctls, bpffs, bpf(2), rtnetlink and
//!   generic netlink, adjtimex, `nft`/`iptables-save`, the API server;
//! * [`checks`] judges: one pure function per check from those [`facts`] to
//!   a [`Finding`] (PASS, WARN, FAIL or SKIP, with the reason and the exact
//!   fix);
//! * [`finding`] shows them: a table and a summary line, or JSON.
//!
//! [`run`] wires the three for the binary. The only change it makes to the
//! host is mounting bpffs when asked to (`--fix`).

#![warn(missing_docs)]

pub mod checks;
pub mod facts;
pub mod finding;
pub mod firewall;
pub mod probe;
pub mod rbac;

use std::path::PathBuf;

pub use finding::{Finding, Report, Status};

use facts::Workload;

/// What to check (the command line).
#[derive(Clone, Debug)]
pub struct Options {
    /// `--interface`.
    pub interface: Option<String>,
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--pin-dir`.
    pub pin_dir: PathBuf,
    /// `--maglev-table-size` (None: as rivorad, the pinned table's length or the default).
    pub maglev_table_size: Option<u32>,
    /// `--flow-table-size`.
    pub flow_table_size: u32,
    /// `--upstream-mtu`.
    pub upstream_mtu: Option<u32>,
    /// `--fix`.
    pub fix: bool,
    /// `--kubernetes`.
    pub kubernetes: bool,
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `--namespace`.
    pub namespace: String,
}

/// Observes this host and judges every check, in report order.
pub fn run(o: &Options) -> Report {
    let parsed = o.config.as_ref().map(|p| {
        rivora_config::load(p).map_err(|e| {
            e.errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })
    });
    let workload = match (&parsed, o.kubernetes) {
        (Some(Ok(c)), _) => Workload::File(c),
        (_, true) => Workload::Kubernetes,
        _ => Workload::Unspecified,
    };
    let config_path = o.config.as_ref().map(|p| p.display().to_string());
    let iface = o.interface.as_deref();

    let mut f = Vec::new();
    f.push(checks::config(config_path.as_deref(), parsed.as_ref()));
    f.push(checks::kernel(&probe::kernel(), workload));
    f.push(checks::bpf_syscall(&probe::bpf::map_create()));
    let test_run = probe::bpf::xdp_test_run();
    f.push(checks::bpf_jit(&probe::bpf_jit(), test_run.jited));
    f.push(checks::btf(probe::btf()));
    f.push(checks::bpffs(&probe::bpffs(o.fix)));
    f.push(checks::memlock(&probe::memlock()));
    f.push(checks::test_run(&test_run));
    let interface = iface.map(probe::interface);
    f.push(checks::xdp_driver(interface.as_ref(), workload));
    let hooks = match (iface, &interface) {
        (Some(i), Some(facts)) if facts.exists => probe::hooks(i, &o.pin_dir),
        _ => None,
    };
    f.push(match (&interface, &hooks) {
        (Some(i), None) if !i.exists => Finding::skip(
            checks::ids::XDP_ATTACHED,
            format!("no interface {} here", i.name),
        ),
        _ => checks::xdp_attached(hooks.as_ref()),
    });
    let fwd = probe::forwarding();
    f.push(checks::forwarding(&fwd, workload, false));
    f.push(checks::forwarding(&fwd, workload, true));
    let rp = probe::rp_filter(iface);
    f.push(checks::rp_filter(&rp, workload));
    f.push(checks::accept_local(&rp, workload));
    f.push(checks::tunnels(&probe::tunnels(), workload));
    f.push(checks::mtu(
        interface.as_ref().map(|i| (i.name.as_str(), i.mtu)),
        o.upstream_mtu,
        workload,
    ));
    f.push(checks::pinned_maps(&probe::pins(
        &o.pin_dir,
        o.maglev_table_size.unwrap_or_else(|| {
            rivora_dataplane::compat::pinned_maglev_table_len(&o.pin_dir)
                .unwrap_or(rivora_abi::MAGLEV_TABLE_DEFAULT)
        }),
        o.flow_table_size,
    )));
    f.push(checks::firewall(
        &match workload {
            Workload::File(_) => probe::firewall(),
            _ => facts::FirewallFacts {
                nft: facts::ToolRules::NotNeeded("no --config".into()),
                iptables: facts::ToolRules::NotNeeded("no --config".into()),
            },
        },
        workload,
    ));
    f.push(checks::clock(&probe::clock()));
    let kube = o.kubernetes.then(|| kube_facts(o));
    f.push(checks::kube_api(kube.as_ref()));
    f.push(checks::kube_rbac(kube.as_ref(), &o.namespace));
    Report::new(f)
}

fn kube_facts(o: &Options) -> facts::KubeFacts {
    let permissions = match rbac::permissions(rbac::RIVORAD_RBAC, &o.namespace) {
        Ok(p) => p,
        Err(e) => {
            return facts::KubeFacts {
                server: None,
                version: Err(e),
                reviews: Vec::new(),
            };
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return facts::KubeFacts {
                server: None,
                version: Err(format!("starting a runtime: {e}")),
                reviews: Vec::new(),
            };
        }
    };
    rt.block_on(probe::kube::probe(o.kubeconfig.as_deref(), &permissions))
}
