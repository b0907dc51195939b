//! The checks: pure functions from observed facts ([`crate::facts`]) to a
//! [`Finding`]. Nothing here reads the system, so every verdict below is
//! unit-tested with facts written by hand.

use rivora_config::{Config, Mode, VipConfig};
use rivora_dataplane::BridgeRole;
use rivora_dataplane::compat::PinnedState;

use crate::facts::*;
use crate::finding::{Finding, Status};
use crate::firewall::Rule;

/// Every check's id and title, in report order.
pub mod ids {
    use crate::finding::Check;
    /// The configuration file.
    pub const CONFIG: Check = ("config", "Configuration file");
    /// Kernel version and TCX.
    pub const KERNEL: Check = ("kernel", "Kernel version and TCX");
    /// bpf(2).
    pub const BPF_SYSCALL: Check = ("bpf-syscall", "BPF system call");
    /// The JIT.
    pub const BPF_JIT: Check = ("bpf-jit", "BPF JIT compiler");
    /// Kernel BTF.
    pub const BTF: Check = ("btf", "Kernel BTF");
    /// bpffs.
    pub const BPFFS: Check = ("bpffs", "BPF filesystem at /sys/fs/bpf");
    /// RLIMIT_MEMLOCK.
    pub const MEMLOCK: Check = ("memlock", "Locked-memory limit");
    /// BPF_PROG_TEST_RUN.
    pub const TEST_RUN: Check = ("bpf-test-run", "XDP program load and BPF_PROG_TEST_RUN");
    /// XDP support of --interface.
    pub const XDP_DRIVER: Check = ("xdp-driver", "XDP support of the interface");
    /// Programs already on --interface.
    pub const XDP_ATTACHED: Check = ("xdp-attached", "Other XDP/TCX programs on the interface");
    /// net.ipv4.ip_forward.
    pub const FORWARDING_V4: Check = ("forwarding-ipv4", "IPv4 forwarding");
    /// net.ipv6.conf.all.forwarding.
    pub const FORWARDING_V6: Check = ("forwarding-ipv6", "IPv6 forwarding");
    /// rp_filter.
    pub const RP_FILTER: Check = ("rp-filter", "Reverse-path filtering (L3 DSR)");
    /// accept_local.
    pub const ACCEPT_LOCAL: Check = ("accept-local", "accept_local on the interface (L3 DSR)");
    /// Tunnel modules / rivora-decap.
    pub const TUNNELS: Check = ("tunnels", "Decapsulation for L3 DSR backends");
    /// MTU headroom.
    pub const MTU: Check = ("mtu", "MTU headroom for encapsulation");
    /// Pinned maps' ABI.
    pub const PINNED_MAPS: Check = ("pinned-maps", "Pinned maps versus this build");
    /// nftables/iptables.
    pub const FIREWALL: Check = ("firewall", "nftables/iptables rules on VIP traffic");
    /// The clock.
    pub const CLOCK: Check = ("clock", "System clock synchronised");
    /// The API server.
    pub const KUBE_API: Check = ("kube-api", "Kubernetes API server reachable");
    /// RBAC.
    pub const KUBE_RBAC: Check = ("kube-rbac", "rivorad's RBAC permissions");
}

use ids::*;

/// XDP_PASS, what the test-run program returns.
const XDP_PASS: u32 = 2;

/// Bytes an L3 DSR mode adds in front of the client's packet, by the VIP's
/// family. GRE carries a key (the flow's hash, for receive-side scaling):
/// 4 bytes of flags and protocol plus 4 of key (`RV_GRE_LEN` in
/// bpf/encap.h; a test checks the two agree).
pub fn encap_overhead(mode: Mode, v6: bool) -> Option<u32> {
    let ip = if v6 { 40 } else { 20 };
    match mode {
        Mode::DsrIpip => Some(ip),
        Mode::DsrGre => Some(ip + GRE_LEN),
        Mode::Nat | Mode::Dsr => None,
    }
}

/// GRE header with the key field.
pub const GRE_LEN: u32 = 8;

/// The (major, minor) of a kernel release string (`6.18.44-fc` -> (6, 18)).
pub fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

impl<'a> Workload<'a> {
    fn config(&self) -> Option<&'a Config> {
        match self {
            Workload::File(c) => Some(c),
            _ => None,
        }
    }

    fn vips(&self) -> &'a [VipConfig] {
        self.config().map(|c| c.vips.as_slice()).unwrap_or(&[])
    }

    /// IPv4 L3 DSR VIPs (whose kernel-fallback packets carry a local
    /// source): rivorad's `needs_ipv4_tunnel_fallback`, which Kubernetes
    /// source translation (ETP Cluster) needs as well.
    fn ipv4_fallback(&self) -> Option<String> {
        match self {
            Workload::Unspecified => None,
            Workload::Kubernetes => Some(
                "--kubernetes (ETP Cluster Services' source-translated flows have the same \
                 kernel fallback)"
                    .into(),
            ),
            Workload::File(c) => {
                let names: Vec<&str> = c
                    .vips
                    .iter()
                    .filter(|v| v.address.is_ipv4() && is_l3_dsr(v.mode))
                    .map(|v| v.name.as_str())
                    .collect();
                (!names.is_empty()).then(|| format!("IPv4 L3 DSR VIPs {}", names.join(", ")))
            }
        }
    }

    fn l3_dsr(&self) -> Vec<&'a VipConfig> {
        self.vips().iter().filter(|v| is_l3_dsr(v.mode)).collect()
    }
}

fn is_l3_dsr(mode: Mode) -> bool {
    matches!(mode, Mode::DsrIpip | Mode::DsrGre)
}

fn names(vips: &[&VipConfig]) -> String {
    let mut n: Vec<&str> = vips.iter().map(|v| v.name.as_str()).collect();
    if n.len() > 5 {
        let more = n.len() - 5;
        n.truncate(5);
        return format!("{} and {more} more", n.join(", "));
    }
    n.join(", ")
}

/// `--config`: valid (how many VIPs of which modes) or every problem.
pub fn config(path: Option<&str>, parsed: Option<&Result<Config, String>>) -> Finding {
    match (path, parsed) {
        (None, _) | (_, None) => Finding::skip(
            CONFIG,
            "no --config given: checks that depend on the VIPs assume NAT VIPs may come",
        ),
        (Some(p), Some(Err(e))) => Finding::new(
            CONFIG,
            Status::Fail,
            format!("{p} is not a valid rivorad configuration: {e}"),
            format!(
                "correct the file (`rivorad --check-config {p}` lists every problem by line and field)"
            ),
        ),
        (Some(p), Some(Ok(c))) => {
            let mut modes: Vec<String> = Vec::new();
            for m in Mode::ALL {
                let n = c.vips.iter().filter(|v| v.mode == m).count();
                if n > 0 {
                    modes.push(format!("{n} {m}"));
                }
            }
            if c.vips.is_empty() {
                Finding::new(
                    CONFIG,
                    Status::Warn,
                    format!("{p} is valid but lists no VIP: rivorad forwards nothing with it"),
                    "add the VIPs to the file (docs/configuration.md)",
                )
            } else {
                Finding::pass(
                    CONFIG,
                    format!("{p}: {} VIPs ({})", c.vips.len(), modes.join(", ")),
                )
            }
        }
    }
}

/// Kernel version: xdp_ingress needs 5.18 (bpf_xdp_get_buff_len,
/// bpf_xdp_load_bytes), tc_nat needs TCX (6.6).
pub fn kernel(f: &KernelFacts, w: Workload) -> Finding {
    let fix = "upgrade to Linux 6.6 or later (with CONFIG_NET_XGRESS=y, which gives TCX)";
    let Some(v) = parse_release(&f.release) else {
        return Finding::new(
            KERNEL,
            Status::Warn,
            format!(
                "cannot read a version from release \"{}\"; TCX query on lo: {}",
                f.release,
                match &f.tcx_query {
                    Ok(()) => "answered".to_string(),
                    Err(e) => e.clone(),
                }
            ),
            "",
        );
    };
    let rel = &f.release;
    if v < (5, 18) {
        return Finding::new(
            KERNEL,
            Status::Fail,
            format!(
                "Linux {rel}: xdp_ingress uses bpf_xdp_get_buff_len and bpf_xdp_load_bytes \
                 (Linux 5.18), so the kernel refuses the program and rivorad cannot start; tc_nat \
                 also needs TCX (6.6)"
            ),
            fix,
        );
    }
    if v < (6, 6) {
        let dsr_only = w
            .config()
            .is_some_and(|c| !c.vips.is_empty() && c.vips.iter().all(|v| v.mode != Mode::Nat));
        let reason = format!(
            "Linux {rel} has no TCX (6.6): tc_nat, which turns NAT VIPs' replies back into the \
             VIP's, cannot attach to the interface's egress"
        );
        return if dsr_only {
            Finding::new(
                KERNEL,
                Status::Warn,
                format!(
                    "{reason}. This file has only DSR VIPs, which do not need it, but a reload \
                     that adds the first NAT VIP is refused"
                ),
                fix,
            )
        } else {
            Finding::new(
                KERNEL,
                Status::Fail,
                format!(
                    "{reason}: rivorad refuses to start with a NAT VIP (Kubernetes VIPs are NAT VIPs)"
                ),
                fix,
            )
        };
    }
    match &f.tcx_query {
        Ok(()) => Finding::pass(
            KERNEL,
            format!("Linux {rel}: TCX answers (egress query on lo)"),
        ),
        Err(e) => Finding::new(
            KERNEL,
            Status::Fail,
            format!(
                "Linux {rel}, but the TCX query on lo failed ({e}): the kernel seems built \
                 without CONFIG_NET_XGRESS, so tc_nat (NAT VIPs' replies) cannot attach"
            ),
            "a kernel built with CONFIG_NET_XGRESS=y",
        ),
    }
}

fn errno_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

/// bpf(2): creating a one-entry array map.
pub fn bpf_syscall(f: &BpfResult<()>) -> Finding {
    match f {
        Ok(()) => Finding::pass(
            BPF_SYSCALL,
            "BPF_MAP_CREATE answered (an array map was created and closed)",
        ),
        Err(e) if *e == libc::EPERM || *e == libc::EACCES => Finding::new(
            BPF_SYSCALL,
            Status::Fail,
            format!(
                "BPF_MAP_CREATE refused ({}): rivorad needs root (CAP_BPF, CAP_NET_ADMIN and \
                 CAP_SYS_ADMIN to mount bpffs); a container also needs them and no seccomp \
                 filter on bpf(2)",
                errno_text(*e)
            ),
            "run rivorad (and rivora-doctor) as root",
        ),
        Err(e) if *e == libc::ENOSYS => Finding::new(
            BPF_SYSCALL,
            Status::Fail,
            "this kernel has no bpf(2) system call",
            "a kernel built with CONFIG_BPF_SYSCALL=y",
        ),
        Err(e) => Finding::new(
            BPF_SYSCALL,
            Status::Fail,
            format!("BPF_MAP_CREATE failed: {}", errno_text(*e)),
            "",
        ),
    }
}

/// /proc/sys/net/core/bpf_jit_enable, and whether the test-run program was
/// JIT-compiled (`jited`): the sysctl exists only in the initial network
/// namespace. xdp_ingress mixes tail calls with BPF-to-BPF calls, which the
/// verifier allows only for JIT-compiled programs.
pub fn bpf_jit(value: &Sysctl, jited: Option<bool>) -> Finding {
    let fix = "sysctl -w net.core.bpf_jit_enable=1 in the initial network namespace (and \
               net.core.bpf_jit_enable = 1 in /etc/sysctl.d/)";
    let refused = "programs would run in the interpreter, which refuses xdp_ingress (it \
                   combines tail calls with BPF-to-BPF calls, allowed only when JIT-compiled)";
    match (value.as_deref().map(str::trim), jited) {
        (Some("1"), _) => Finding::pass(BPF_JIT, "net.core.bpf_jit_enable = 1"),
        (Some("2"), _) => Finding::pass(
            BPF_JIT,
            "net.core.bpf_jit_enable = 2 (on, and dumping every JIT image to the kernel log)",
        ),
        (Some(v), _) => Finding::new(
            BPF_JIT,
            Status::Fail,
            format!("net.core.bpf_jit_enable = {v}: {refused}"),
            fix,
        ),
        (None, Some(true)) => Finding::pass(
            BPF_JIT,
            "the test-run program was JIT-compiled (net.core.bpf_jit_enable is only visible from \
             the initial network namespace)",
        ),
        (None, Some(false)) => Finding::new(
            BPF_JIT,
            Status::Fail,
            format!("the test-run program was not JIT-compiled: {refused}"),
            fix,
        ),
        (None, None) => Finding::new(
            BPF_JIT,
            Status::Warn,
            "cannot tell: no net.core.bpf_jit_enable here (it is only visible from the initial \
             network namespace) and no program could be loaded to look",
            "run rivora-doctor in the initial network namespace, or as root",
        ),
    }
}

/// /sys/kernel/btf/vmlinux.
pub fn btf(present: bool) -> Finding {
    if present {
        Finding::pass(BTF, "/sys/kernel/btf/vmlinux is present")
    } else {
        Finding::new(
            BTF,
            Status::Warn,
            "no /sys/kernel/btf/vmlinux: Rivora's programs use no CO-RE relocations and load \
             without it, but bpftool cannot show the kernel's types (and `bpftool prog show` \
             loses detail) when debugging",
            "a kernel built with CONFIG_DEBUG_INFO_BTF=y",
        )
    }
}

/// bpffs at /sys/fs/bpf.
pub fn bpffs(f: &BpffsFacts) -> Finding {
    let mount = "mount -t bpf bpf /sys/fs/bpf";
    if let Some(Err(e)) = &f.fixed {
        return Finding::new(
            BPFFS,
            Status::Fail,
            format!("no bpffs at /sys/fs/bpf, and --fix could not mount one: {e}"),
            format!("`{mount}` as root"),
        );
    }
    let fixed = matches!(f.fixed, Some(Ok(())));
    match (&f.private_reason, f.mounted) {
        (None, true) if fixed => Finding::pass(BPFFS, "mounted bpffs at /sys/fs/bpf (--fix)"),
        (None, true) => Finding::pass(BPFFS, "bpffs is mounted at /sys/fs/bpf"),
        (Some(why), mounted) => Finding::new(
            BPFFS,
            Status::Fail,
            if fixed {
                format!("mounted bpffs at /sys/fs/bpf (--fix), but {why}")
            } else {
                why.clone()
            },
            if mounted {
                "run rivorad with `nsenter --net=/run/netns/NAME rivorad ...` (network namespace only, \
                 the host's bpffs) instead of `ip netns exec`"
                    .to_string()
            } else {
                format!(
                    "`{mount}` in the host's mount namespace, and run rivorad with `nsenter \
                     --net=/run/netns/NAME rivorad ...` instead of `ip netns exec` (or \
                     rivora-doctor --fix to mount it here)"
                )
            },
        ),
        (None, false) => Finding::new(
            BPFFS,
            Status::Warn,
            "no bpffs at /sys/fs/bpf: rivorad mounts one when it starts, but until then \
             nothing can be pinned and the pinned-maps check sees nothing",
            format!(
                "`{mount}` (or rivora-doctor --fix); at every boot: `bpf /sys/fs/bpf bpf defaults 0 0` in /etc/fstab"
            ),
        ),
    }
}

/// RLIMIT_MEMLOCK. Since 5.11 BPF memory is charged to the memory cgroup.
pub fn memlock(f: &MemlockFacts) -> Finding {
    let Some(soft) = f.soft else {
        return Finding::pass(MEMLOCK, "RLIMIT_MEMLOCK is unlimited");
    };
    let fix = "`ulimit -l unlimited` before starting rivorad, or LimitMEMLOCK=infinity in its systemd unit";
    let kib = soft / 1024;
    match f.kernel {
        Some(v) if v >= (5, 11) => Finding::new(
            MEMLOCK,
            Status::Warn,
            format!(
                "RLIMIT_MEMLOCK is {kib} KiB. Since Linux 5.11 BPF maps are charged to the memory \
                 cgroup, not to this limit, so it does not bound rivorad's maps here (about \
                 97 MiB at the default table sizes, docs/benchmarks.md); make sure rivorad's \
                 cgroup allows that much"
            ),
            format!("nothing needed on this kernel; to lift it anyway: {fix}"),
        ),
        _ => Finding::new(
            MEMLOCK,
            Status::Fail,
            format!(
                "RLIMIT_MEMLOCK is {kib} KiB and this kernel (before 5.11) charges BPF maps to \
                 it: rivorad's maps (about 97 MiB at the default table sizes) cannot be created"
            ),
            fix,
        ),
    }
}

/// Loading a two-instruction XDP program and BPF_PROG_TEST_RUN on it.
pub fn test_run(f: &TestRunFacts) -> Finding {
    match (&f.load, &f.run) {
        (Err((e, log)), _) => Finding::new(
            TEST_RUN,
            Status::Fail,
            format!(
                "the kernel refused a two-instruction XDP program ({}){}: rivorad cannot load \
                 xdp_ingress either",
                errno_text(*e),
                if log.trim().is_empty() {
                    String::new()
                } else {
                    format!("; verifier: {}", log.trim())
                }
            ),
            if *e == libc::EPERM {
                "run as root (CAP_BPF and CAP_NET_ADMIN)"
            } else {
                "a kernel with CONFIG_BPF_SYSCALL=y and XDP (CONFIG_XDP_SOCKETS is not needed)"
            },
        ),
        (Ok(()), Some(Ok(r))) if *r == XDP_PASS => Finding::pass(
            TEST_RUN,
            "an XDP program loaded and BPF_PROG_TEST_RUN returned XDP_PASS",
        ),
        (Ok(()), Some(Ok(r))) => Finding::new(
            TEST_RUN,
            Status::Fail,
            format!("BPF_PROG_TEST_RUN of a program returning XDP_PASS (2) returned {r}"),
            "",
        ),
        (Ok(()), Some(Err(e))) => Finding::new(
            TEST_RUN,
            Status::Warn,
            format!(
                "XDP programs load, but BPF_PROG_TEST_RUN failed ({}): rivorad does not need it, \
                 the packet tests (crates/dataplane/tests) and rivora-bench do",
                errno_text(*e)
            ),
            "a kernel with BPF_PROG_TEST_RUN for XDP (Linux 4.12 or later, not disabled by a \
             security module)",
        ),
        (Ok(()), None) => Finding::skip(TEST_RUN, "the test run was not attempted"),
    }
}

/// The XDP capability of `--interface`.
pub fn xdp_driver(f: Option<&InterfaceFacts>, w: Workload) -> Finding {
    let Some(f) = f else {
        return Finding::skip(XDP_DRIVER, "no --interface given");
    };
    let ifname = &f.name;
    if !f.exists {
        return Finding::new(
            XDP_DRIVER,
            Status::Fail,
            format!("no interface {ifname} in this network namespace"),
            "`ip link show` lists the interfaces; for one in another network namespace run \
             rivora-doctor and rivorad with `nsenter --net=/run/netns/NAME` (or give the right --interface)",
        );
    }
    let driver = f.driver.clone().unwrap_or_else(|| "unknown".into());
    let features = f
        .xdp_features
        .map(|x| {
            let n = xdp_act::names(x);
            if n.is_empty() {
                "xdp-features: none".to_string()
            } else {
                format!("xdp-features: {}", n.join(", "))
            }
        })
        .unwrap_or_else(|| "xdp-features: not reported (netdev netlink, Linux 6.3)".into());
    let (auto_mode, auto_reason) = &f.auto_mode;
    let auto = format!("--xdp-mode auto attaches {auto_mode} ({auto_reason})");
    let redirects = w
        .vips()
        .iter()
        .any(|v| is_l3_dsr(v.mode) || v.nat_forwarding == rivora_config::NatForwarding::Fib);
    match f.bridge {
        Some(BridgeRole::Bridge) => {
            return Finding::new(
                XDP_DRIVER,
                Status::Warn,
                format!(
                    "{ifname} is a bridge (driver {driver}, {features}): {auto}, which works but \
                     costs more per packet; a bridge has no native XDP, and XDP_TX (dsr VIPs) \
                     does not reliably cross a bridge"
                ),
                format!(
                    "attach rivorad to the uplink NIC behind {ifname} rather than the bridge, or \
                     keep generic mode and test DSR VIPs on it first"
                ),
            );
        }
        Some(BridgeRole::Port) => {
            return Finding::new(
                XDP_DRIVER,
                Status::Warn,
                format!(
                    "{ifname} is a bridge port (driver {driver}, {features}): {auto}. XDP_TX \
                     (dsr VIPs) out of a bridge port does not reliably cross the bridge"
                ),
                "keep --xdp-mode auto (generic) here, and test DSR VIPs under native mode on \
                 your own hardware before forcing --xdp-mode native",
            );
        }
        None => {}
    }
    if driver == "veth" {
        let peer = match f.xdp_features {
            Some(x) if x & xdp_act::NDO_XMIT != 0 => {
                "its peer has an XDP program or GRO on, so native XDP_TX and redirects into it work"
            }
            Some(_) => {
                "its peer has neither an XDP program nor GRO on, so in native mode XDP_TX and \
                 redirects into this veth are dropped"
            }
            None => "whether its peer has an XDP program or GRO on is not known",
        };
        return Finding::new(
            XDP_DRIVER,
            Status::Warn,
            format!(
                "{ifname} is a veth ({features}): {auto}, which works but costs more per packet. \
                 Native XDP on a veth needs XDP or GRO on the peer ({peer}), and XDP_TX on a \
                 veth does not reliably cross a bridge"
            ),
            "keep --xdp-mode auto (generic) on veth; for native mode give the peer an XDP \
             program or GRO (`ethtool -K PEER gro on`) and test DSR VIPs under native mode first",
        );
    }
    match f.xdp_features {
        Some(x) if x & xdp_act::BASIC == 0 => Finding::new(
            XDP_DRIVER,
            Status::Warn,
            format!(
                "{ifname} (driver {driver}) has no native XDP ({features}): {auto}{}, which works \
                 but costs more per packet",
                if auto_mode == "native" {
                    ", which the driver refuses, so rivorad falls back to generic (skb) mode"
                } else {
                    ""
                }
            ),
            "a NIC whose driver has native XDP, or `--xdp-mode generic` to skip the native attempt",
        ),
        Some(x) if redirects && x & xdp_act::NDO_XMIT == 0 => Finding::new(
            XDP_DRIVER,
            Status::Warn,
            format!(
                "{ifname} (driver {driver}) has native XDP ({features}; {auto}) but accepts no \
                 redirected frames (no ndo-xmit): the L3 DSR or natForwarding: fib packets \
                 xdp_ingress sends out of {ifname} itself are dropped in native mode"
            ),
            format!(
                "route the backends' traffic out of a device with ndo-xmit, or run --xdp-mode generic on {ifname}"
            ),
        ),
        Some(_) => Finding::pass(
            XDP_DRIVER,
            format!("{ifname} (driver {driver}) has native XDP ({features}): {auto}"),
        ),
        None => Finding::pass(
            XDP_DRIVER,
            format!(
                "{ifname} (driver {driver}, {features}): {auto}{}",
                if auto_mode == "native" {
                    ", falling back to generic if the driver refuses native XDP"
                } else {
                    ""
                }
            ),
        ),
    }
}

fn program_name(p: &AttachedProgram) -> String {
    if p.name.is_empty() {
        "(unnamed)".into()
    } else {
        format!("\"{}\"", p.name)
    }
}

/// Programs on the XDP and TCX hooks of `--interface` that are not
/// Rivora's own from `--pin-dir`.
pub fn xdp_attached(f: Option<&HookFacts>) -> Finding {
    let Some(f) = f else {
        return Finding::skip(XDP_ATTACHED, "no --interface given");
    };
    let ifname = &f.interface;
    let pins = f.pin_dir.display();
    let xdp = match &f.xdp {
        Ok(x) => x,
        Err(e) => {
            return Finding::new(
                XDP_ATTACHED,
                Status::Warn,
                format!("could not ask the kernel for {ifname}'s XDP program: {e}"),
                format!("`ip -d link show dev {ifname}` shows it"),
            );
        }
    };
    let mut fails: Vec<String> = Vec::new();
    let mut fixes: Vec<String> = Vec::new();
    let mut warns: Vec<String> = Vec::new();
    let mut ours: Vec<String> = Vec::new();
    for (mode, p) in xdp {
        let held = match p.link_id {
            Some(l) => format!("held by bpf_link {l}"),
            None => "attached with netlink (no bpf_link)".into(),
        };
        let what = format!(
            "XDP program {} (id {}) in {} mode, {held}",
            program_name(p),
            p.id,
            mode.as_str()
        );
        if p.ours {
            ours.push(format!("{what}, is Rivora's from {pins}"));
            continue;
        }
        fails.push(what);
        fixes.push(match (p.name.as_str(), p.link_id) {
            ("xdp_ingress", _) => format!(
                "it is another Rivora datapath (not from {pins}): stop the rivorad running on \
                 {ifname}, or remove a --persist-datapath installation with `rivorad --uninstall \
                 --pin-dir DIR`"
            ),
            ("rv_decap", _) => format!(
                "it is rivora-decap (a backend's decapsulation): `rivora-decap status` shows it, \
                 `rivora-decap detach --interface {ifname}` removes it"
            ),
            (_, None) => format!(
                "remove it with `ip link set dev {ifname} {} off`",
                mode.ip_keyword()
            ),
            (_, Some(l)) => format!(
                "a bpf_link cannot be removed with `ip link`: `bpftool link show id {l}` names it; \
                 stop the process that owns it or delete its bpffs pin"
            ),
        });
    }
    for (dir, p) in &f.tcx {
        let what = format!("TCX {dir} program {} (id {})", program_name(p), p.id);
        if p.ours {
            ours.push(format!("{what} is Rivora's from {pins}"));
        } else if *dir == "egress" {
            fails.push(format!(
                "{what}: it runs before tc_nat on every reply, and a verdict other than \
                 TCX_NEXT keeps tc_nat from restoring NAT VIPs' replies"
            ));
            fixes.push(if p.name == "tc_nat" {
                format!(
                    "it is another Rivora datapath's tc_nat (not from {pins}): stop that rivorad \
                     or `rivorad --uninstall --pin-dir DIR`"
                )
            } else {
                format!(
                    "`bpftool link show` names the link of program {} (TCX links print as \"type 11\" \
                     with bpftool 7.1); stop its owner or delete its bpffs pin",
                    p.id
                )
            });
        } else {
            warns.push(format!(
                "{what}: it sees every packet xdp_ingress passes to the kernel, the rewritten NAT \
                 packets included"
            ));
        }
    }
    let see = format!(
        "see them with `ip -d link show dev {ifname}` (XDP) and `bpftool net show dev {ifname}` (XDP and TCX)"
    );
    if !fails.is_empty() {
        let mut reason = format!(
            "{ifname} has {}: rivorad's attach would be refused (an interface has one XDP hook; \
             native and generic cannot be active at once) or its replies would be changed",
            fails.join("; ")
        );
        if !warns.is_empty() {
            reason.push_str(&format!("; also {}", warns.join("; ")));
        }
        return Finding::new(
            XDP_ATTACHED,
            Status::Fail,
            reason,
            format!("{see}; {}", fixes.join("; ")),
        );
    }
    if !warns.is_empty() {
        return Finding::new(
            XDP_ATTACHED,
            Status::Warn,
            format!("{ifname} has {}", warns.join("; ")),
            format!("{see}; make sure it passes the VIPs' traffic (or remove it)"),
        );
    }
    if ours.is_empty() {
        Finding::pass(XDP_ATTACHED, format!("no XDP or TCX program on {ifname}"))
    } else {
        Finding::pass(
            XDP_ATTACHED,
            format!(
                "only Rivora's own: {} (a running rivorad or a --persist-datapath installation; \
                 a start onto {pins} takes them over)",
                ours.join("; ")
            ),
        )
    }
}

/// Which VIPs of the file need forwarding in `v6`'s family: NAT VIPs hand
/// rewritten packets to the kernel, L3 DSR VIPs their kernel-fallback
/// packets.
fn forwarding_vips<'a>(w: &Workload<'a>, v6: bool) -> Vec<&'a VipConfig> {
    w.vips()
        .iter()
        .filter(|v| v.address.is_ipv6() == v6 && v.mode != Mode::Dsr)
        .collect()
}

/// One family's forwarding sysctl.
pub fn forwarding(f: &ForwardingFacts, w: Workload, v6: bool) -> Finding {
    let (check, key, value) = if v6 {
        (FORWARDING_V6, "net.ipv6.conf.all.forwarding", &f.ipv6)
    } else {
        (FORWARDING_V4, "net.ipv4.ip_forward", &f.ipv4)
    };
    let fix = format!("sysctl -w {key}=1 (and `{key} = 1` in /etc/sysctl.d/ to keep it)");
    let family = if v6 { "IPv6" } else { "IPv4" };
    let needed: Option<String> = match w {
        Workload::Unspecified => None,
        Workload::Kubernetes => Some(format!(
            "--kubernetes: {family} Services are NAT VIPs, and ETP Cluster forwards to other nodes"
        )),
        Workload::File(_) => {
            let vips = forwarding_vips(&w, v6);
            (!vips.is_empty()).then(|| {
                format!(
                    "{family} NAT or L3 DSR VIPs {} (NAT hands the rewritten packets to the kernel to \
                     route, L3 DSR its kernel-fallback packets)",
                    names(&vips)
                )
            })
        }
    };
    match value.as_deref().map(str::trim) {
        Some("1") => Finding::pass(check, format!("{key} = 1")),
        Some(v) => match (&needed, w) {
            (Some(why), Workload::Kubernetes) if v6 => Finding::new(
                check,
                Status::Warn,
                format!("{key} = {v}: {why}; IPv6 Services will not forward"),
                fix,
            ),
            (Some(why), _) => Finding::new(
                check,
                Status::Fail,
                format!("{key} = {v}, but {why}: they cannot forward"),
                fix,
            ),
            (None, Workload::File(_)) => Finding::pass(
                check,
                format!("{key} = {v}: not needed, the file has no {family} NAT or L3 DSR VIP"),
            ),
            (None, _) => Finding::new(
                check,
                Status::Warn,
                format!(
                    "{key} = {v}: {family} NAT VIPs cannot forward (rivorad warns at start); \
                     give --config to check what the VIPs need"
                ),
                fix,
            ),
        },
        None => match needed {
            Some(why) => Finding::new(
                check,
                Status::Fail,
                format!("no {key} ({family} disabled in this kernel or namespace), but {why}"),
                format!(
                    "enable {family} (e.g. remove ipv6.disable=1 from the kernel command line)"
                ),
            ),
            None => Finding::skip(check, format!("no {key}: {family} is disabled here")),
        },
    }
}

/// rp_filter on `all` and the interface, for the kernel fallback of IPv4
/// L3 DSR VIPs (and source-translated flows).
pub fn rp_filter(f: &RpFilterFacts, w: Workload) -> Finding {
    let Some(why) = w.ipv4_fallback() else {
        return Finding::skip(
            RP_FILTER,
            "only relevant with IPv4 L3 DSR VIPs (dsr-ipip, dsr-gre) in --config, or --kubernetes",
        );
    };
    let iface = f.interface.as_deref();
    let effective = [f.all, f.iface].into_iter().flatten().max();
    let shown = match iface {
        Some(i) => format!(
            "net.ipv4.conf.all.rp_filter = {}, net.ipv4.conf.{i}.rp_filter = {}",
            show(f.all),
            show(f.iface)
        ),
        None => format!("net.ipv4.conf.all.rp_filter = {}", show(f.all)),
    };
    if effective == Some(1) {
        let keys = match iface {
            Some(i) => format!("net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.{i}.rp_filter=2"),
            None => "net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.IF.rp_filter=2".into(),
        };
        return Finding::new(
            RP_FILTER,
            Status::Fail,
            format!(
                "{shown}: strict reverse-path filtering (the larger of the two counts) drops the \
                 encapsulated packets xdp_ingress hands to the kernel when it cannot route them \
                 itself (their source is the tunnelSource, an address of this node), so a \
                 backend whose neighbour entry is missing is never reached. Needed by {why}. \
                 L3 DSR backends need it off for the decapsulated packets too (docs/dsr.md)"
            ),
            format!("sysctl -w {keys} (2 = loose, or 0)"),
        );
    }
    if iface.is_none() {
        return Finding::new(
            RP_FILTER,
            Status::Warn,
            format!("{shown}; the interface's own value is not known without --interface"),
            "give --interface IF to check net.ipv4.conf.IF.rp_filter too",
        );
    }
    Finding::pass(RP_FILTER, format!("{shown}: not strict"))
}

fn show(v: Option<u32>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "?".into())
}

/// accept_local on the interface: rivorad sets it at start for IPv4 L3
/// DSR VIPs; only a read-only /proc/sys keeps it from doing so.
pub fn accept_local(f: &RpFilterFacts, w: Workload) -> Finding {
    let Some(why) = w.ipv4_fallback() else {
        return Finding::skip(
            ACCEPT_LOCAL,
            "only relevant with IPv4 L3 DSR VIPs (dsr-ipip, dsr-gre) in --config, or --kubernetes",
        );
    };
    let Some(i) = f.interface.as_deref() else {
        return Finding::skip(ACCEPT_LOCAL, "no --interface given");
    };
    let key = format!("net.ipv4.conf.{i}.accept_local");
    match f.accept_local {
        Some(1) => Finding::pass(ACCEPT_LOCAL, format!("{key} = 1")),
        _ if f.accept_local_writable => Finding::pass(
            ACCEPT_LOCAL,
            format!(
                "{key} = {}: rivorad sets it to 1 when it starts with {why} (logged; never set back)",
                show(f.accept_local)
            ),
        ),
        _ => Finding::new(
            ACCEPT_LOCAL,
            Status::Fail,
            format!(
                "{key} = {} and not writable here (a read-only /proc/sys, as in a container): \
                 rivorad cannot set it, and the kernel drops the encapsulated fallback packets of \
                 {why} as martians (their source is this node's tunnelSource)",
                show(f.accept_local)
            ),
            format!(
                "sysctl -w {key}=1 where /proc/sys is writable (the host, or the pod's sysctls)"
            ),
        ),
    }
}

/// The kernel tunnel modules an L3 DSR mode and family needs on a backend.
fn tunnel_module(mode: Mode, v6: bool) -> &'static str {
    match (mode, v6) {
        (Mode::DsrGre, false) => "ip_gre",
        (Mode::DsrGre, true) => "ip6_gre",
        (_, false) => "ipip",
        (_, true) => "ip6_tunnel",
    }
}

/// Whether L3 DSR backends like this host can decapsulate: kernel tunnel
/// modules or rivora-decap.
pub fn tunnels(f: &TunnelFacts, w: Workload) -> Finding {
    let l3 = w.l3_dsr();
    if l3.is_empty() {
        return Finding::skip(
            TUNNELS,
            "only relevant with L3 DSR VIPs (dsr-ipip, dsr-gre) in --config",
        );
    }
    let mut needed: Vec<&'static str> = l3
        .iter()
        .map(|v| tunnel_module(v.mode, v.address.is_ipv6()))
        .collect();
    needed.sort();
    needed.dedup();
    let state = |m: &str| {
        f.modules
            .iter()
            .find(|(n, _)| *n == m)
            .map(|(_, s)| *s)
            .unwrap_or(ModuleState::Absent)
    };
    let describe = |m: &str| -> String {
        match state(m) {
            ModuleState::Loaded => format!("{m} (loaded)"),
            ModuleState::Builtin => format!("{m} (built in)"),
            ModuleState::Loadable => format!("{m} (loadable: `modprobe {m}`)"),
            ModuleState::Absent => format!("{m} (absent)"),
        }
    };
    let list: Vec<String> = needed.iter().map(|m| describe(m)).collect();
    let missing: Vec<&str> = needed
        .iter()
        .copied()
        .filter(|m| state(m) == ModuleState::Absent)
        .collect();
    let context = format!(
        "the balancer needs no tunnel module (xdp_ingress encapsulates itself); backends of {} \
         must decapsulate",
        names(&l3)
    );
    if missing.is_empty() {
        return Finding::pass(
            TUNNELS,
            format!("{context}; this kernel has {}", list.join(", ")),
        );
    }
    if !f.decap_attached.is_empty() {
        return Finding::pass(
            TUNNELS,
            format!(
                "{context}; this kernel lacks {} but rivora-decap is attached on {}",
                missing.join(", "),
                f.decap_attached.join(", ")
            ),
        );
    }
    Finding::new(
        TUNNELS,
        Status::Warn,
        format!(
            "{context}; this kernel has no {} module, so a backend on a kernel like this one \
             cannot use kernel tunnel devices ({})",
            missing.join(", "),
            list.join(", ")
        ),
        "on such backends use rivora-decap, which needs no module: `rivora-decap attach \
         --interface IF` (docs/dsr.md, \"Preparing the backends\")",
    )
}

/// MTU of `--interface` against the largest encapsulation in use.
pub fn mtu(iface: Option<(&str, Option<u32>)>, upstream: Option<u32>, w: Workload) -> Finding {
    let l3 = w.l3_dsr();
    if l3.is_empty() {
        return Finding::skip(
            MTU,
            "only relevant with L3 DSR VIPs (dsr-ipip, dsr-gre) in --config",
        );
    }
    let Some((ifname, mtu)) = iface else {
        return Finding::skip(MTU, "no --interface given");
    };
    let Some(mtu) = mtu else {
        return Finding::skip(MTU, format!("the MTU of {ifname} could not be read"));
    };
    let mut kinds: Vec<(u32, String)> = l3
        .iter()
        .filter_map(|v| {
            let v6 = v.address.is_ipv6();
            encap_overhead(v.mode, v6).map(|o| {
                (
                    o,
                    format!("{} {}: {o}", v.mode, if v6 { "IPv6" } else { "IPv4" }),
                )
            })
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    let overhead = kinds.iter().map(|(o, _)| *o).max().unwrap_or(0);
    let list: Vec<&str> = kinds.iter().map(|(_, t)| t.as_str()).collect();
    let consequence = "packets that do not fit are answered with ICMP fragmentation-needed \
                       (IPv4 with DF) or packet-too-big (IPv6), so the client's path-MTU \
                       discovery adapts, or fragmented by the kernel (IPv4 without DF)";
    match upstream {
        Some(up) if mtu >= up + overhead => Finding::pass(
            MTU,
            format!(
                "{ifname} MTU {mtu} >= upstream MTU {up} + {overhead} bytes of encapsulation ({})",
                list.join(", ")
            ),
        ),
        Some(up) => Finding::new(
            MTU,
            Status::Warn,
            format!(
                "{ifname} MTU {mtu} < upstream MTU {up} + {overhead} bytes of encapsulation ({}): \
                 client packets over {} bytes no longer fit once encapsulated; {consequence}",
                list.join(", "),
                mtu.saturating_sub(overhead)
            ),
            format!(
                "ip link set dev {ifname} mtu {} (and the same headroom on every link to the backends)",
                up + overhead
            ),
        ),
        None => Finding::new(
            MTU,
            Status::Warn,
            format!(
                "{ifname} MTU {mtu}; encapsulation adds up to {overhead} bytes ({}), so client \
                 packets over {} bytes no longer fit the path to the backends if it has the same \
                 MTU; {consequence}",
                list.join(", "),
                mtu.saturating_sub(overhead)
            ),
            format!(
                "give the path to the backends {overhead} bytes more MTU than the clients' \
                 (e.g. `ip link set dev {ifname} mtu {}` for {mtu}-byte client packets), or pass \
                 --upstream-mtu to compare",
                mtu + overhead
            ),
        ),
    }
}

/// The pinned maps against this build's layout (rivorad's own start-up
/// check, [`rivora_dataplane::compat::inspect`]).
pub fn pinned_maps(f: &PinFacts) -> Finding {
    let dir = f.pin_dir.display();
    let (maglev, flows) = f.sizes;
    match &f.state {
        PinnedState::Empty if !f.bpffs_mounted => Finding::skip(
            PINNED_MAPS,
            format!("no bpffs at /sys/fs/bpf: nothing can be pinned in {dir} yet"),
        ),
        PinnedState::Empty => Finding::pass(
            PINNED_MAPS,
            format!("nothing pinned in {dir}: rivorad starts with fresh maps"),
        ),
        PinnedState::Compatible => Finding::pass(
            PINNED_MAPS,
            format!(
                "the maps in {dir} have this build's layout (ABI {}, --maglev-table-size {maglev}, \
                 --flow-table-size {flows}): rivorad adopts them with their flows",
                rivora_abi::ABI_VERSION
            ),
        ),
        PinnedState::Upgradable(from) => Finding::pass(
            PINNED_MAPS,
            format!(
                "the maps in {dir} are ABI {from}; this build (ABI {}) upgrades them in place at \
                 start, keeping the flows (an ABI {from} rivorad then refuses them: \
                 docs/restarts.md, ABI history)",
                rivora_abi::ABI_VERSION
            ),
        ),
        PinnedState::Incompatible(problems) => Finding::new(
            PINNED_MAPS,
            Status::Fail,
            format!(
                "rivorad (ABI {}{}) would refuse the maps in {dir}: {}",
                rivora_abi::ABI_VERSION,
                f.recorded_abi
                    .map(|v| format!(", the pins record ABI {v}"))
                    .unwrap_or_default(),
                problems.join("; ")
            ),
            format!(
                "stop any rivorad using them, then start the rivorad version (or table sizes) that \
                 wrote them, or `rivorad --reset-pinned-state --pin-dir {dir} ...` (empties the flow \
                 tables: NAT connections in progress break), or remove the pins with `rivorad \
                 --uninstall --pin-dir {dir}` (docs/restarts.md)"
            ),
        ),
    }
}

/// nftables/iptables rules that concern a VIP of the file.
pub fn firewall(f: &FirewallFacts, w: Workload) -> Finding {
    let Some(c) = w.config() else {
        return Finding::skip(
            FIREWALL,
            "needs --config (the VIP addresses and ports to look for)",
        );
    };
    let mut not_checked: Vec<String> = Vec::new();
    let mut rules: Vec<&Rule> = Vec::new();
    for (tool, r) in [("nft", &f.nft), ("iptables-save", &f.iptables)] {
        match r {
            ToolRules::Missing => not_checked.push(format!("{tool} is not installed")),
            ToolRules::NotNeeded(_) => {}
            ToolRules::Failed(e) => not_checked.push(format!("{tool} failed: {e}")),
            ToolRules::Rules(rs) => rules.extend(rs.iter()),
        }
    }
    let mut fails: Vec<String> = Vec::new();
    let mut warns: Vec<String> = Vec::new();
    let mut fixes: Vec<String> = Vec::new();
    for rule in &rules {
        let hits: Vec<(&VipConfig, bool)> = c
            .vips
            .iter()
            .filter_map(|v| rule.concerns(v).map(|by_addr| (v, by_addr)))
            .collect();
        if hits.is_empty() {
            continue;
        }
        let interferes = rule.action.interferes();
        // A rule naming only a port matters when it rewrites or drops.
        if !interferes && hits.iter().all(|(_, by_addr)| !by_addr) {
            continue;
        }
        let vips: Vec<String> = hits
            .iter()
            .map(|(v, by_addr)| {
                if *by_addr {
                    format!("{} ({} {}/{})", v.name, v.address, v.ports, v.protocol)
                } else {
                    format!(
                        "{} (its port {}/{} on any address)",
                        v.name, v.ports, v.protocol
                    )
                }
            })
            .collect();
        let text = format!("{} matches VIP {}", rule.describe(), vips.join(", "));
        if interferes {
            fails.push(text);
            fixes.push(rule.removal());
        } else {
            warns.push(text);
        }
    }
    let unchecked = if not_checked.is_empty() {
        String::new()
    } else {
        format!(" (not checked: {})", not_checked.join("; "))
    };
    if !fails.is_empty() {
        return Finding::new(
            FIREWALL,
            Status::Fail,
            format!(
                "{}: XDP acts before netfilter, but the packets it hands to the kernel for these \
                 VIPs (NAT VIPs' rewritten packets, L3 DSR fallbacks, every packet while no \
                 datapath is attached) are rewritten or dropped by these rules{unchecked}",
                fails.join("; ")
            ),
            fixes.join("; "),
        );
    }
    if rules.is_empty() && not_checked.len() == 2 {
        return Finding::new(
            FIREWALL,
            Status::Warn,
            format!("could not be checked: {}", not_checked.join("; ")),
            "install nftables (`nft`) to let rivora-doctor read the ruleset",
        );
    }
    if !warns.is_empty() {
        return Finding::new(
            FIREWALL,
            Status::Warn,
            format!(
                "{}: they neither rewrite nor drop, but see the VIPs' packets the kernel \
                 handles{unchecked}",
                warns.join("; ")
            ),
            "check they are meant for these VIPs",
        );
    }
    let status = if not_checked.is_empty() || matches!(f.nft, ToolRules::Rules(_)) {
        Status::Pass
    } else {
        Status::Warn
    };
    Finding::new(
        FIREWALL,
        status,
        format!(
            "no rule among {} mentions a VIP's address, or rewrites or drops a VIP's port{unchecked}",
            rules.len()
        ),
        "",
    )
}

/// The kernel's NTP state.
pub fn clock(f: &ClockFacts) -> Finding {
    let unsync = f.status & libc::STA_UNSYNC != 0 || f.state == libc::TIME_ERROR;
    if unsync {
        Finding::new(
            CLOCK,
            Status::Warn,
            format!(
                "the kernel clock is not synchronised (adjtimex: STA_UNSYNC{}, max error {} ms): \
                 Lease times and TLS certificates of the API server are checked against it, and \
                 logs and metrics of several nodes cannot be compared",
                if f.state == libc::TIME_ERROR {
                    ", TIME_ERROR"
                } else {
                    ""
                },
                f.maxerror_us / 1000
            ),
            "run an NTP client (chrony, ntpd or systemd-timesyncd: `timedatectl set-ntp true`)",
        )
    } else {
        Finding::pass(
            CLOCK,
            format!(
                "synchronised (adjtimex: no STA_UNSYNC, max error {} ms)",
                f.maxerror_us / 1000
            ),
        )
    }
}

/// The API server's version call.
pub fn kube_api(f: Option<&KubeFacts>) -> Finding {
    let Some(f) = f else {
        return Finding::skip(KUBE_API, "no --kubernetes given");
    };
    let server = f.server.clone().unwrap_or_else(|| "the API server".into());
    match &f.version {
        Ok(v) => Finding::pass(KUBE_API, format!("{server} answers: Kubernetes {v}")),
        Err(e) if e.starts_with(&format!("{}401", crate::probe::kube::ANSWERED_HTTP)) => {
            Finding::new(
                KUBE_API,
                Status::Fail,
                format!("{server} refused the credentials (HTTP 401 Unauthorized): {e}"),
                "the token or client certificate of --kubeconfig (in a pod: the ServiceAccount \
                 token) is not accepted: expired, revoked, or made for another cluster",
            )
        }
        Err(e) if e.starts_with(crate::probe::kube::ANSWERED_HTTP) => Finding::new(
            KUBE_API,
            Status::Fail,
            format!("{server} refused the version call: {e}"),
            "`kubectl --kubeconfig FILE version` from this node shows the same refusal",
        ),
        Err(e) => Finding::new(
            KUBE_API,
            Status::Fail,
            format!("{server} did not answer the version call: {e}"),
            "check --kubeconfig (or, in a pod, the ServiceAccount token and \
             KUBERNETES_SERVICE_HOST): `kubectl --kubeconfig FILE version` must answer from this node",
        ),
    }
}

/// rivorad's permissions from deploy/rbac/rivorad.yaml, one
/// SelfSubjectAccessReview each.
pub fn kube_rbac(f: Option<&KubeFacts>, namespace: &str) -> Finding {
    let Some(f) = f else {
        return Finding::skip(KUBE_RBAC, "no --kubernetes given");
    };
    if f.version.is_err() || f.reviews.is_empty() {
        return Finding::skip(KUBE_RBAC, "the API server was not reached");
    }
    let denied: Vec<String> = f
        .reviews
        .iter()
        .filter(|(_, r)| matches!(r, Ok(false)))
        .map(|(p, _)| p.to_string())
        .collect();
    let errors: Vec<String> = f
        .reviews
        .iter()
        .filter_map(|(p, r)| r.as_ref().err().map(|e| format!("{p}: {e}")))
        .collect();
    let total = f.reviews.len();
    let fix = format!(
        "apply deploy/rbac/rivorad.yaml (its Role in namespace {namespace}) and bind it to this \
         identity: a ClusterRoleBinding to ClusterRole rivorad and a RoleBinding in {namespace} to \
         Role rivorad (`kubectl auth can-i --list` shows what it has)"
    );
    if !errors.is_empty() && denied.is_empty() {
        return Finding::new(
            KUBE_RBAC,
            Status::Fail,
            format!(
                "the API server did not answer {} of {total} SelfSubjectAccessReviews: {}",
                errors.len(),
                errors.join("; ")
            ),
            "the identity must be allowed to create selfsubjectaccessreviews \
             (system:basic-user grants it to every authenticated user)",
        );
    }
    if !denied.is_empty() {
        return Finding::new(
            KUBE_RBAC,
            Status::Fail,
            format!(
                "this identity lacks {} of the {total} permissions rivorad needs: {}{}",
                denied.len(),
                denied.join(", "),
                if errors.is_empty() {
                    String::new()
                } else {
                    format!("; not answered: {}", errors.join("; "))
                }
            ),
            fix,
        );
    }
    Finding::pass(
        KUBE_RBAC,
        format!(
            "all {total} permissions of deploy/rbac/rivorad.yaml are granted (namespace {namespace} for the Role's)"
        ),
    )
}

#[cfg(test)]
mod tests;
