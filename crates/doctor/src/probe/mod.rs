//! The observation layer: reads /proc, /sys, sysctls, bpffs, asks the
//! kernel (bpf(2), rtnetlink, generic netlink, adjtimex) and runs nft and
//! iptables-save, filling the facts the checks judge. Everything runs in
//! the calling process's network and mount namespace, as rivorad would.
//! Nothing is changed, except bpffs mounted by [`bpffs`] when asked to
//! (`--fix`).

pub mod bpf;
pub mod kube;
pub mod netdev;

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

use rivora_dataplane::compat::{self, PinnedState, TableSizes};
use rivora_dataplane::holder::{self, HookMode};
use rivora_dataplane::loader::map_names;

use crate::facts::*;
use crate::firewall;

/// Where rivorad mounts bpffs.
pub const BPFFS: &str = "/sys/fs/bpf";

/// `uname -r` and a TCX query on `lo`.
pub fn kernel() -> KernelFacts {
    use aya::programs::SchedClassifier;
    use aya::programs::tc::TcAttachType;
    KernelFacts {
        release: release(),
        tcx_query: SchedClassifier::query_tcx("lo", TcAttachType::Egress)
            .map(|_| ())
            .map_err(|e| holder::flatten(&e)),
    }
}

/// The kernel release (`uname -r`).
pub fn release() -> String {
    // SAFETY: uname fills a zeroed struct of the right type.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return String::new();
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

/// A file under /proc/sys (or anywhere), trimmed; None if unreadable.
pub fn read_trimmed(path: &str) -> Sysctl {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn read_u32(path: &str) -> Option<u32> {
    read_trimmed(path)?.parse().ok()
}

/// net.core.bpf_jit_enable.
pub fn bpf_jit() -> Sysctl {
    read_trimmed("/proc/sys/net/core/bpf_jit_enable")
}

/// Whether the kernel exposes its BTF.
pub fn btf() -> bool {
    Path::new("/sys/kernel/btf/vmlinux").exists()
}

/// bpffs at /sys/fs/bpf; with `fix`, mounts one if none is there (as
/// rivorad does at start), then looks again.
pub fn bpffs(fix: bool) -> BpffsFacts {
    let at = Path::new(BPFFS);
    let fixed = if fix && !rivora_dataplane::bpffs::is_bpffs(at) {
        Some(
            rivora_dataplane::ensure_bpffs(at)
                .map(|_| ())
                .map_err(|e| e.to_string()),
        )
    } else {
        None
    };
    BpffsFacts {
        mounted: rivora_dataplane::bpffs::is_bpffs(at),
        private_reason: rivora_dataplane::private_bpffs_reason(at),
        fixed,
    }
}

/// RLIMIT_MEMLOCK.
pub fn memlock() -> MemlockFacts {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a live struct.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } == 0;
    MemlockFacts {
        soft: (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur),
        kernel: crate::checks::parse_release(&release()),
    }
}

/// The interface's MTU (SIOCGIFMTU, in this network namespace).
fn mtu(interface: &str) -> Option<u32> {
    #[repr(C)]
    struct IfReqMtu {
        name: [u8; libc::IFNAMSIZ],
        mtu: libc::c_int,
        _pad: [u8; 20],
    }
    let bytes = interface.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ {
        return None;
    }
    let mut req = IfReqMtu {
        name: [0; libc::IFNAMSIZ],
        mtu: 0,
        _pad: [0; 20],
    };
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: plain socket + ioctl with a correctly sized, live buffer.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let rc = libc::ioctl(fd, libc::SIOCGIFMTU, &mut req);
        libc::close(fd);
        if rc != 0 {
            return None;
        }
    }
    u32::try_from(req.mtu).ok()
}

/// `--interface` as the XDP hook sees it.
pub fn interface(name: &str) -> InterfaceFacts {
    let ifindex = rivora_dataplane::interface_index(name).ok();
    let (mode, reason) = rivora_dataplane::auto_xdp_mode(name);
    InterfaceFacts {
        name: name.to_string(),
        exists: ifindex.is_some(),
        driver: rivora_dataplane::interface_driver(name),
        bridge: rivora_dataplane::bridge_role(name),
        xdp_features: ifindex.and_then(|i| netdev::xdp_features(i).ok()),
        auto_mode: (mode.as_str().to_string(), reason),
        mtu: mtu(name),
    }
}

/// IDs of the maps pinned in `pin_dir` under Rivora's names.
fn pinned_map_ids(pin_dir: &Path) -> HashSet<u32> {
    map_names()
        .filter_map(|n| aya::maps::MapInfo::from_pin(pin_dir.join(n)).ok())
        .map(|i| i.id())
        .collect()
}

/// Whether program `id` uses one of `maps`.
fn uses_maps(id: u32, maps: &HashSet<u32>) -> bool {
    if maps.is_empty() {
        return false;
    }
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .find(|p| p.id() == id)
        .and_then(|p| p.map_ids().ok().flatten())
        .is_some_and(|ids| ids.iter().any(|m| maps.contains(m)))
}

/// The programs on `interface`'s XDP and TCX hooks, each compared with the
/// maps pinned in `pin_dir`.
pub fn hooks(interface: &str, pin_dir: &Path) -> Option<HookFacts> {
    let ifindex = rivora_dataplane::interface_index(interface).ok()?;
    let ours = pinned_map_ids(pin_dir);
    let xdp = holder::xdp_holders(ifindex)
        .map(|hs| {
            hs.into_iter()
                .map(|h| {
                    let mode = match h.mode {
                        HookMode::Native => XdpMode::Native,
                        HookMode::Generic => XdpMode::Generic,
                        HookMode::Offload => XdpMode::Offload,
                    };
                    (
                        mode,
                        AttachedProgram {
                            id: h.program_id,
                            ours: uses_maps(h.program_id, &ours),
                            name: h.name,
                            link_id: h.link_id,
                        },
                    )
                })
                .collect()
        })
        .map_err(|e| e.to_string());
    let tcx = holder::tcx_programs(interface)
        .into_iter()
        .map(|t| {
            (
                t.direction,
                AttachedProgram {
                    id: t.program_id,
                    ours: uses_maps(t.program_id, &ours),
                    name: t.name,
                    link_id: None,
                },
            )
        })
        .collect();
    Some(HookFacts {
        interface: interface.to_string(),
        pin_dir: pin_dir.to_path_buf(),
        xdp,
        tcx,
    })
}

/// The forwarding sysctls.
pub fn forwarding() -> ForwardingFacts {
    ForwardingFacts {
        ipv4: read_trimmed("/proc/sys/net/ipv4/ip_forward"),
        ipv6: read_trimmed("/proc/sys/net/ipv6/conf/all/forwarding"),
    }
}

/// rp_filter of `all` and the interface, and its accept_local.
pub fn rp_filter(interface: Option<&str>) -> RpFilterFacts {
    let conf = |i: &str, key: &str| format!("/proc/sys/net/ipv4/conf/{i}/{key}");
    let accept_local = interface.map(|i| conf(i, "accept_local"));
    RpFilterFacts {
        interface: interface.map(str::to_string),
        all: read_u32(&conf("all", "rp_filter")),
        iface: interface.and_then(|i| read_u32(&conf(i, "rp_filter"))),
        accept_local: accept_local.as_deref().and_then(read_u32),
        accept_local_writable: accept_local.is_some_and(|p| {
            std::ffi::CString::new(p)
                // SAFETY: access(2) on a NUL-terminated path.
                .is_ok_and(|c| unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0)
        }),
    }
}

/// Whether `text` (modules.builtin or modules.dep) lists module `m`
/// (`kernel/net/ipv4/ipip.ko`, possibly compressed).
fn lists_module(text: &str, m: &str) -> bool {
    text.lines().any(|l| {
        let path = l.split(':').next().unwrap_or("");
        let base = path.rsplit('/').next().unwrap_or("");
        base.split(".ko").next() == Some(m) && base.contains(".ko")
    })
}

/// The tunnel modules L3 DSR backends use, and rivora-decap attachments.
pub fn tunnels() -> TunnelFacts {
    let loaded = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    let dir = format!("/lib/modules/{}", release());
    let builtin = std::fs::read_to_string(format!("{dir}/modules.builtin")).unwrap_or_default();
    let dep = std::fs::read_to_string(format!("{dir}/modules.dep")).unwrap_or_default();
    let modules = ["ipip", "ip6_tunnel", "ip_gre", "ip6_gre"]
        .into_iter()
        .map(|m| {
            let state = if loaded
                .lines()
                .any(|l| l.split_whitespace().next() == Some(m))
            {
                ModuleState::Loaded
            } else if lists_module(&builtin, m) {
                ModuleState::Builtin
            } else if lists_module(&dep, m) {
                ModuleState::Loadable
            } else {
                ModuleState::Absent
            };
            (m, state)
        })
        .collect();
    let decap_attached = rivora_decap::status(Path::new(rivora_decap::DEFAULT_PIN_ROOT), None)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.attached)
        .map(|s| s.interface)
        .collect();
    TunnelFacts {
        modules,
        decap_attached,
    }
}

/// The pinned maps in `pin_dir` against this build, with rivorad's own
/// check.
pub fn pins(pin_dir: &Path, maglev_table_size: u32, flow_table_size: u32) -> PinFacts {
    let sizes = TableSizes {
        maglev_table: maglev_table_size,
        flow_table: flow_table_size,
    };
    let state = compat::inspect(pin_dir, &sizes);
    let recorded_abi = match state {
        PinnedState::Empty => None,
        _ => compat::read_meta(pin_dir).ok().map(|m| m.abi_version),
    };
    PinFacts {
        pin_dir: pin_dir.to_path_buf(),
        bpffs_mounted: rivora_dataplane::bpffs::is_bpffs(Path::new(BPFFS)),
        state,
        recorded_abi,
        sizes: (maglev_table_size, flow_table_size),
    }
}

/// Runs `cmd args`: Ok(stdout), or Err(None) when it is not installed,
/// Err(Some(why)) when it failed.
fn run(cmd: &str, args: &[&str]) -> Result<String, Option<String>> {
    match Command::new(cmd).args(args).output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(None),
        Err(e) => Err(Some(format!("{cmd}: {e}"))),
        Ok(o) if !o.status.success() => Err(Some(format!(
            "`{cmd} {}` exited {}: {}",
            args.join(" "),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ))),
        Ok(o) => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
    }
}

/// `nft -j list ruleset`, and `iptables-save`/`ip6tables-save` unless they
/// are the nf_tables variant (their rules are then in the nft ruleset).
pub fn firewall() -> FirewallFacts {
    let nft = match run("nft", &["-j", "list", "ruleset"]) {
        Ok(text) => match firewall::parse_nft_json(&text) {
            Ok(r) => ToolRules::Rules(r),
            Err(e) => ToolRules::Failed(e),
        },
        Err(None) => ToolRules::Missing,
        Err(Some(e)) => ToolRules::Failed(e),
    };
    let iptables = match run("iptables-save", &["--version"]) {
        Err(None) => ToolRules::Missing,
        Ok(v) if v.contains("nf_tables") && matches!(nft, ToolRules::Rules(_)) => {
            ToolRules::NotNeeded("iptables-nft: its rules are in the nft ruleset".into())
        }
        _ => {
            let mut rules = Vec::new();
            let mut failed = None;
            for (cmd, tool) in [
                ("iptables-save", "iptables"),
                ("ip6tables-save", "ip6tables"),
            ] {
                match run(cmd, &[]) {
                    Ok(text) => rules.extend(firewall::parse_iptables_save(&text, tool)),
                    Err(None) => {}
                    Err(Some(e)) => failed = Some(e),
                }
            }
            match failed {
                Some(e) if rules.is_empty() => ToolRules::Failed(e),
                _ => ToolRules::Rules(rules),
            }
        }
    };
    FirewallFacts { nft, iptables }
}

/// The kernel clock's NTP state (adjtimex, read only).
pub fn clock() -> ClockFacts {
    // SAFETY: adjtimex with modes 0 only reads into the zeroed struct.
    unsafe {
        let mut t: libc::timex = std::mem::zeroed();
        let state = libc::adjtimex(&mut t);
        ClockFacts {
            state,
            status: t.status,
            maxerror_us: t.maxerror,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_lists_name_modules_by_file() {
        let dep = "kernel/net/ipv4/ipip.ko.xz: kernel/net/ipv4/ip_tunnel.ko.xz\n\
                   kernel/net/ipv6/ip6_gre.ko: kernel/net/ipv6/ip6_tunnel.ko\n";
        assert!(lists_module(dep, "ipip"));
        assert!(lists_module(dep, "ip6_gre"));
        assert!(!lists_module(dep, "ip6_tunnel"), "only as a dependency");
        assert!(!lists_module(dep, "ip_gre"));
        assert!(lists_module("kernel/net/ipv4/ip_gre.ko\n", "ip_gre"));
    }
}
