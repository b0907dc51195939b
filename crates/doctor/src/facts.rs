//! What the probes observed, as plain data. The checks ([`crate::checks`])
//! are pure functions of these, so every verdict is unit-tested with facts
//! written by hand; [`crate::probe`] fills them from this machine.

use std::net::IpAddr;
use std::path::PathBuf;

use rivora_config::Config;
use rivora_dataplane::compat::PinnedState;

use crate::firewall::Ruleset;

/// What rivorad is going to serve on this host, as far as the command line
/// tells: it decides which checks apply and how strict they are.
#[derive(Clone, Copy, Debug)]
pub enum Workload<'a> {
    /// Neither `--config` nor `--kubernetes`: checks that depend on the VIPs
    /// warn where a NAT VIP would need something.
    Unspecified,
    /// `--config FILE`, valid.
    File(&'a Config),
    /// `--kubernetes`: NAT VIPs of both families from Services, ETP Cluster
    /// source translation.
    Kubernetes,
}

/// `uname -r` and whether the kernel answers a TCX query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFacts {
    /// The release string (`6.18.44-...`).
    pub release: String,
    /// The TCX egress query on `lo` (BPF_PROG_QUERY with BPF_TCX_EGRESS):
    /// Ok, or the kernel's error.
    pub tcx_query: Result<(), String>,
}

/// The answer of one bpf(2) call: Ok, or the errno.
pub type BpfResult<T> = Result<T, i32>;

/// BPF_PROG_TEST_RUN of a two-instruction XDP program returning XDP_PASS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRunFacts {
    /// Loading the program: Ok, or the errno and the verifier log.
    pub load: Result<(), (i32, String)>,
    /// The kernel JIT-compiled it (`jited_prog_len` of its info is not 0);
    /// None when the load failed or the info could not be read.
    pub jited: Option<bool>,
    /// The test run's return value (None when the load failed).
    pub run: Option<BpfResult<u32>>,
}

/// The BPF filesystem where rivorad pins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BpffsFacts {
    /// /sys/fs/bpf is a mounted bpffs (after `--fix`, if it ran).
    pub mounted: bool,
    /// Why pins made here would vanish with this process's mount namespace
    /// (`ip netns exec`, a container), from
    /// [`rivora_dataplane::private_bpffs_reason`]; None when they would not.
    pub private_reason: Option<String>,
    /// `--fix` tried to mount it: the outcome. None: not tried (not asked,
    /// or already mounted).
    pub fixed: Option<Result<(), String>>,
}

/// RLIMIT_MEMLOCK of this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemlockFacts {
    /// Soft limit in bytes; None = unlimited.
    pub soft: Option<u64>,
    /// The kernel's (major, minor), if known.
    pub kernel: Option<(u32, u32)>,
}

/// What the kernel's netdev netlink family says an interface's XDP can do
/// (`NETDEV_A_DEV_XDP_FEATURES`, Linux 6.3).
pub mod xdp_act {
    /// XDP_PASS/DROP/TX/ABORTED in the driver: native XDP.
    pub const BASIC: u64 = 1;
    /// XDP_REDIRECT out of this device's programs.
    pub const REDIRECT: u64 = 2;
    /// The device accepts frames redirected to it (ndo_xdp_xmit). On a
    /// veth: its peer has an XDP program or GRO on.
    pub const NDO_XMIT: u64 = 4;
    /// AF_XDP zero copy.
    pub const XSK_ZEROCOPY: u64 = 8;
    /// Offloaded to the NIC.
    pub const HW_OFFLOAD: u64 = 16;
    /// Multi-buffer frames.
    pub const RX_SG: u64 = 32;
    /// Multi-buffer frames redirected to it.
    pub const NDO_XMIT_SG: u64 = 64;

    /// The names of the bits of `f`, as the kernel's YAML spec names them.
    pub fn names(f: u64) -> Vec<&'static str> {
        [
            (BASIC, "basic"),
            (REDIRECT, "redirect"),
            (NDO_XMIT, "ndo-xmit"),
            (XSK_ZEROCOPY, "xsk-zerocopy"),
            (HW_OFFLOAD, "hw-offload"),
            (RX_SG, "rx-sg"),
            (NDO_XMIT_SG, "ndo-xmit-sg"),
        ]
        .into_iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, n)| n)
        .collect()
    }
}

/// `--interface IF` as the XDP hook sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceFacts {
    /// The name given.
    pub name: String,
    /// It exists in this network namespace.
    pub exists: bool,
    /// Its driver (`ethtool -i`), if it has one.
    pub driver: Option<String>,
    /// It is a bridge, or a bridge port ([`rivora_dataplane::bridge_role`]).
    pub bridge: Option<rivora_dataplane::BridgeRole>,
    /// Its XDP features ([`xdp_act`]); None when the kernel has no netdev
    /// netlink family (before 6.3) or did not answer.
    pub xdp_features: Option<u64>,
    /// What `--xdp-mode auto` picks, and why ([`rivora_dataplane::auto_xdp_mode`]).
    pub auto_mode: (String, String),
    /// Its MTU.
    pub mtu: Option<u32>,
}

/// Mode of an attached XDP program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver.
    Native,
    /// In the generic skb path.
    Generic,
    /// Offloaded.
    Offload,
}

impl XdpMode {
    /// The `ip link set dev IF <keyword> off` keyword for this mode.
    pub fn ip_keyword(self) -> &'static str {
        match self {
            XdpMode::Native => "xdpdrv",
            XdpMode::Generic => "xdpgeneric",
            XdpMode::Offload => "xdpoffload",
        }
    }

    /// `native`, `generic`, `offload`.
    pub fn as_str(self) -> &'static str {
        match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
            XdpMode::Offload => "offload",
        }
    }
}

/// One program on the interface's XDP or TCX hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachedProgram {
    /// Kernel program ID.
    pub id: u32,
    /// Program name ("" when unreadable).
    pub name: String,
    /// The bpf_link holding it, if any (None: attached with netlink, as
    /// `ip link set ... xdp obj` does).
    pub link_id: Option<u32>,
    /// It uses maps pinned in `--pin-dir`: Rivora's own from that pin
    /// directory.
    pub ours: bool,
}

/// What holds the interface's XDP and TCX hooks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookFacts {
    /// The interface.
    pub interface: String,
    /// The pin directory programs were compared with.
    pub pin_dir: PathBuf,
    /// XDP programs with their modes; Err: the netlink query failed.
    pub xdp: Result<Vec<(XdpMode, AttachedProgram)>, String>,
    /// TCX programs: ("ingress" | "egress", program).
    pub tcx: Vec<(&'static str, AttachedProgram)>,
}

/// One sysctl as read from /proc/sys: None when the file does not exist.
pub type Sysctl = Option<String>;

/// `net.ipv4.ip_forward` and `net.ipv6.conf.all.forwarding`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardingFacts {
    /// net.ipv4.ip_forward.
    pub ipv4: Sysctl,
    /// net.ipv6.conf.all.forwarding (None: IPv6 disabled).
    pub ipv6: Sysctl,
}

/// Reverse-path filtering and accept_local for IPv4.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpFilterFacts {
    /// `--interface`, if given.
    pub interface: Option<String>,
    /// net.ipv4.conf.all.rp_filter.
    pub all: Option<u32>,
    /// net.ipv4.conf.IF.rp_filter.
    pub iface: Option<u32>,
    /// net.ipv4.conf.IF.accept_local.
    pub accept_local: Option<u32>,
    /// That file is writable here (rivorad sets it at start).
    pub accept_local_writable: bool,
}

/// Whether the kernel has a module, built in or loadable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleState {
    /// In /proc/modules.
    Loaded,
    /// In modules.builtin.
    Builtin,
    /// In modules.dep: `modprobe` (or the first `ip link add`) loads it.
    Loadable,
    /// In none of them.
    Absent,
}

/// Kernel tunnel modules and rivora-decap attachments on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelFacts {
    /// (module, state) for ipip, ip6_tunnel, ip_gre, ip6_gre.
    pub modules: Vec<(&'static str, ModuleState)>,
    /// Interfaces with rivora-decap attached (pins under
    /// /sys/fs/bpf/rivora-decap).
    pub decap_attached: Vec<String>,
}

/// The pinned maps in `--pin-dir`.
#[derive(Debug, PartialEq, Eq)]
pub struct PinFacts {
    /// The pin directory.
    pub pin_dir: PathBuf,
    /// bpffs is mounted at /sys/fs/bpf.
    pub bpffs_mounted: bool,
    /// What [`rivora_dataplane::compat::inspect`] (rivorad's own start-up
    /// check) says about it with the given table sizes.
    pub state: PinnedState,
    /// The ABI version `rivora_meta` records, when readable.
    pub recorded_abi: Option<u32>,
    /// `--maglev-table-size`, `--flow-table-size` compared with.
    pub sizes: (u32, u32),
}

/// One firewall tool's rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolRules {
    /// The tool is not installed.
    Missing,
    /// Not consulted, and why (e.g. iptables-nft, whose rules are in the nft ruleset).
    NotNeeded(String),
    /// It ran and failed.
    Failed(String),
    /// Its rules.
    Rules(Ruleset),
}

/// nftables and iptables rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirewallFacts {
    /// `nft -j list ruleset`.
    pub nft: ToolRules,
    /// `iptables-save` and `ip6tables-save` (legacy).
    pub iptables: ToolRules,
}

/// The kernel clock's NTP state (adjtimex).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockFacts {
    /// adjtimex's return value (TIME_OK ... TIME_ERROR).
    pub state: i32,
    /// The `status` bits (STA_UNSYNC = 0x40).
    pub status: i32,
    /// Maximum error, microseconds.
    pub maxerror_us: i64,
}

/// One permission rivorad needs, from deploy/rbac/rivorad.yaml.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Permission {
    /// None for the ClusterRole's (every namespace), else the namespace
    /// of the Role (`--namespace`).
    pub namespace: Option<String>,
    /// API group ("" = core).
    pub group: String,
    /// Resource.
    pub resource: String,
    /// Subresource (`status`), if any.
    pub subresource: Option<String>,
    /// Verb.
    pub verb: String,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            String::new()
        } else {
            format!(".{}", self.group)
        };
        let sub = self
            .subresource
            .as_ref()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        write!(f, "{} {}{group}{sub}", self.verb, self.resource)?;
        match &self.namespace {
            Some(ns) => write!(f, " in {ns}"),
            None => write!(f, " (cluster-wide)"),
        }
    }
}

/// The API server and rivorad's permissions there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeFacts {
    /// The server URL the client uses, when the configuration was read.
    pub server: Option<String>,
    /// The version call: the server's gitVersion, or why it failed (also
    /// a kubeconfig that could not be read).
    pub version: Result<String, String>,
    /// Each permission and the SelfSubjectAccessReview's answer (empty
    /// when the server was not reached).
    pub reviews: Vec<(Permission, Result<bool, String>)>,
}

/// An address or prefix a firewall rule matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net {
    /// Address.
    pub addr: IpAddr,
    /// Prefix length.
    pub len: u8,
}

impl Net {
    /// Whether `ip` is inside.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let len = u32::from(self.len.min(32));
                let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let len = u32::from(self.len.min(128));
                let mask = if len == 0 {
                    0
                } else {
                    u128::MAX << (128 - len)
                };
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}
