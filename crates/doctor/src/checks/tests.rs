//! Every verdict of every check, from facts written by hand.

use std::path::PathBuf;

use super::*;
use crate::firewall::{Action, Rule};

fn cfg(vips: &str) -> Config {
    let text = format!(
        "settings:\n  tunnelSource: {{ ipv4: \"10.0.0.1\", ipv6: \"fd00::1\" }}\nvips:\n{vips}"
    );
    rivora_config::parse(&text, "t.yaml").unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn vip(name: &str, addr: &str, mode: &str) -> String {
    let backend = if addr.contains(':') {
        "fd00:1::1"
    } else {
        "10.0.1.1"
    };
    let mac = if mode == "dsr" {
        ", mac: \"02:00:00:00:00:01\""
    } else {
        ""
    };
    format!(
        "  - name: {name}\n    address: \"{addr}\"\n    port: 80\n    protocol: tcp\n    mode: {mode}\n    \
         backends: [ {{ address: \"{backend}\", port: 80{mac} }} ]\n"
    )
}

fn nat4() -> Config {
    cfg(&vip("web", "10.200.100.1", "nat"))
}

fn ipip4() -> Config {
    cfg(&vip("tun", "10.200.100.1", "dsr-ipip"))
}

fn assert_finding(f: &Finding, status: Status, reason: &[&str], fix: &[&str]) {
    assert_eq!(f.status, status, "{f:#?}");
    for r in reason {
        assert!(f.reason.contains(r), "reason lacks {r:?}: {f:#?}");
    }
    for x in fix {
        assert!(f.fix.contains(x), "fix lacks {x:?}: {f:#?}");
    }
    if status == Status::Pass || status == Status::Skip {
        assert!(f.fix.is_empty(), "nothing to fix: {f:#?}");
    }
}

#[test]
fn config_findings() {
    assert_finding(&config(None, None), Status::Skip, &["no --config"], &[]);
    let c = nat4();
    assert_finding(
        &config(Some("a.yaml"), Some(&Ok(c))),
        Status::Pass,
        &["a.yaml: 1 VIPs (1 nat)"],
        &[],
    );
    assert_finding(
        &config(Some("a.yaml"), Some(&Ok(Config::default()))),
        Status::Warn,
        &["lists no VIP"],
        &["add the VIPs"],
    );
    assert_finding(
        &config(Some("a.yaml"), Some(&Err("3:4: vips[0].port: bad".into()))),
        Status::Fail,
        &["not a valid", "3:4: vips[0].port: bad"],
        &["rivorad --check-config a.yaml"],
    );
}

#[test]
fn kernel_versions() {
    let k = |release: &str, tcx: Result<(), String>| KernelFacts {
        release: release.into(),
        tcx_query: tcx,
    };
    assert_eq!(parse_release("6.18.44-fc-v1045"), Some((6, 18)));
    assert_eq!(parse_release("5.4"), Some((5, 4)));
    assert_eq!(parse_release("garbage"), None);
    assert_finding(
        &kernel(&k("6.18.44-fc", Ok(())), Workload::Unspecified),
        Status::Pass,
        &["Linux 6.18.44-fc: TCX answers"],
        &[],
    );
    assert_finding(
        &kernel(
            &k("6.6.0", Err("Invalid argument".into())),
            Workload::Unspecified,
        ),
        Status::Fail,
        &["CONFIG_NET_XGRESS", "Invalid argument"],
        &["CONFIG_NET_XGRESS=y"],
    );
    assert_finding(
        &kernel(&k("6.1.0-13-amd64", Err("x".into())), Workload::Unspecified),
        Status::Fail,
        &["no TCX (6.6)", "tc_nat", "refuses to start with a NAT VIP"],
        &["Linux 6.6 or later"],
    );
    let c = nat4();
    assert_eq!(
        kernel(&k("6.1.0", Err("x".into())), Workload::File(&c)).status,
        Status::Fail
    );
    assert_eq!(
        kernel(&k("6.1.0", Err("x".into())), Workload::Kubernetes).status,
        Status::Fail
    );
    let dsr = cfg(&vip("l2", "10.200.100.1", "dsr"));
    assert_finding(
        &kernel(&k("6.1.0", Err("x".into())), Workload::File(&dsr)),
        Status::Warn,
        &["only DSR VIPs", "first NAT VIP is refused"],
        &["Linux 6.6 or later"],
    );
    assert_finding(
        &kernel(&k("5.15.0", Err("x".into())), Workload::File(&dsr)),
        Status::Fail,
        &["bpf_xdp_get_buff_len", "5.18"],
        &["Linux 6.6 or later"],
    );
    assert_finding(
        &kernel(&k("weird", Ok(())), Workload::Unspecified),
        Status::Warn,
        &["cannot read a version", "answered"],
        &[],
    );
}

#[test]
fn bpf_syscall_answers() {
    assert_finding(
        &bpf_syscall(&Ok(())),
        Status::Pass,
        &["BPF_MAP_CREATE"],
        &[],
    );
    assert_finding(
        &bpf_syscall(&Err(libc::EPERM)),
        Status::Fail,
        &["refused", "root"],
        &["as root"],
    );
    assert_finding(
        &bpf_syscall(&Err(libc::ENOSYS)),
        Status::Fail,
        &["no bpf(2)"],
        &["CONFIG_BPF_SYSCALL=y"],
    );
    assert_eq!(bpf_syscall(&Err(libc::EINVAL)).status, Status::Fail);
}

#[test]
fn jit_settings() {
    assert_finding(
        &bpf_jit(&Some("1".into()), None),
        Status::Pass,
        &["= 1"],
        &[],
    );
    assert_finding(
        &bpf_jit(&Some("2\n".into()), Some(true)),
        Status::Pass,
        &["= 2"],
        &[],
    );
    assert_finding(
        &bpf_jit(&Some("0".into()), Some(false)),
        Status::Fail,
        &["interpreter", "tail calls"],
        &["sysctl -w net.core.bpf_jit_enable=1"],
    );
    // In a network namespace other than the initial one the sysctl is
    // absent: the test-run program says.
    assert_finding(
        &bpf_jit(&None, Some(true)),
        Status::Pass,
        &["was JIT-compiled", "initial network namespace"],
        &[],
    );
    assert_finding(
        &bpf_jit(&None, Some(false)),
        Status::Fail,
        &["not JIT-compiled", "interpreter"],
        &["sysctl -w net.core.bpf_jit_enable=1"],
    );
    assert_finding(
        &bpf_jit(&None, None),
        Status::Warn,
        &["cannot tell"],
        &["initial network namespace"],
    );
}

#[test]
fn btf_presence() {
    assert_finding(&btf(true), Status::Pass, &["present"], &[]);
    assert_finding(
        &btf(false),
        Status::Warn,
        &["no CO-RE"],
        &["CONFIG_DEBUG_INFO_BTF=y"],
    );
}

#[test]
fn bpffs_states() {
    let b = |mounted, private: Option<&str>, fixed| BpffsFacts {
        mounted,
        private_reason: private.map(str::to_string),
        fixed,
    };
    assert_finding(
        &bpffs(&b(true, None, None)),
        Status::Pass,
        &["is mounted"],
        &[],
    );
    assert_finding(
        &bpffs(&b(true, None, Some(Ok(())))),
        Status::Pass,
        &["mounted bpffs at /sys/fs/bpf (--fix)"],
        &[],
    );
    assert_finding(
        &bpffs(&b(false, None, None)),
        Status::Warn,
        &["rivorad mounts one when it starts"],
        &["mount -t bpf bpf /sys/fs/bpf", "--fix", "/etc/fstab"],
    );
    assert_finding(
        &bpffs(&b(false, Some("pins would vanish"), None)),
        Status::Fail,
        &["pins would vanish"],
        &[
            "mount -t bpf bpf /sys/fs/bpf",
            "nsenter --net=/run/netns/NAME",
        ],
    );
    assert_finding(
        &bpffs(&b(true, Some("another bpffs than PID 1's"), Some(Ok(())))),
        Status::Fail,
        &["(--fix), but another bpffs"],
        &["nsenter"],
    );
    assert_finding(
        &bpffs(&b(false, None, Some(Err("EPERM".into())))),
        Status::Fail,
        &["--fix could not mount one: EPERM"],
        &["mount -t bpf bpf /sys/fs/bpf"],
    );
}

#[test]
fn memlock_limits() {
    assert_finding(
        &memlock(&MemlockFacts {
            soft: None,
            kernel: Some((5, 4)),
        }),
        Status::Pass,
        &["unlimited"],
        &[],
    );
    assert_finding(
        &memlock(&MemlockFacts {
            soft: Some(8 << 20),
            kernel: Some((6, 18)),
        }),
        Status::Warn,
        &["8192 KiB", "memory cgroup"],
        &["nothing needed", "LimitMEMLOCK=infinity"],
    );
    assert_finding(
        &memlock(&MemlockFacts {
            soft: Some(64 << 10),
            kernel: Some((5, 10)),
        }),
        Status::Fail,
        &["64 KiB", "before 5.11"],
        &["ulimit -l unlimited"],
    );
}

#[test]
fn test_run_outcomes() {
    let t = |load, run| TestRunFacts {
        load,
        jited: None,
        run,
    };
    assert_finding(
        &test_run(&t(Ok(()), Some(Ok(2)))),
        Status::Pass,
        &["XDP_PASS"],
        &[],
    );
    assert_finding(
        &test_run(&t(Ok(()), Some(Ok(1)))),
        Status::Fail,
        &["returned 1"],
        &[],
    );
    assert_finding(
        &test_run(&t(Ok(()), Some(Err(libc::ENOTSUP)))),
        Status::Warn,
        &["rivorad does not need it", "rivora-bench"],
        &["BPF_PROG_TEST_RUN"],
    );
    assert_finding(
        &test_run(&t(Err((libc::EPERM, String::new())), None)),
        Status::Fail,
        &["refused", "cannot load xdp_ingress"],
        &["run as root"],
    );
    assert_finding(
        &test_run(&t(Err((libc::EINVAL, "0: R0 !read_ok\n".into())), None)),
        Status::Fail,
        &["verifier: 0: R0 !read_ok"],
        &["CONFIG_BPF_SYSCALL"],
    );
}

fn iface(name: &str, driver: &str, features: Option<u64>) -> InterfaceFacts {
    let native = driver != "veth" && features.is_some_and(|f| f & xdp_act::BASIC != 0);
    InterfaceFacts {
        name: name.into(),
        exists: true,
        driver: Some(driver.into()),
        bridge: None,
        xdp_features: features,
        auto_mode: if native {
            ("native".into(), format!("auto: driver {driver}"))
        } else {
            ("generic".into(), format!("auto: driver {driver}"))
        },
        mtu: Some(1500),
    }
}

#[test]
fn xdp_driver_verdicts() {
    let w = Workload::Unspecified;
    assert_finding(&xdp_driver(None, w), Status::Skip, &["no --interface"], &[]);
    let mut gone = iface("eth9", "virtio_net", None);
    gone.exists = false;
    assert_finding(
        &xdp_driver(Some(&gone), w),
        Status::Fail,
        &["no interface eth9"],
        &["nsenter --net=/run/netns/NAME"],
    );
    let full = xdp_act::BASIC | xdp_act::REDIRECT | xdp_act::NDO_XMIT;
    assert_finding(
        &xdp_driver(Some(&iface("eth0", "ixgbe", Some(full))), w),
        Status::Pass,
        &[
            "eth0 (driver ixgbe) has native XDP",
            "basic, redirect, ndo-xmit",
            "attaches native",
        ],
        &[],
    );
    // No ndo-xmit: matters only for VIPs whose packets xdp_ingress redirects.
    let no_xmit = iface(
        "eth0",
        "virtio_net",
        Some(xdp_act::BASIC | xdp_act::REDIRECT),
    );
    assert_eq!(
        xdp_driver(Some(&no_xmit), Workload::File(&nat4())).status,
        Status::Pass
    );
    assert_finding(
        &xdp_driver(Some(&no_xmit), Workload::File(&ipip4())),
        Status::Warn,
        &["no ndo-xmit", "dropped in native mode"],
        &["--xdp-mode generic"],
    );
    assert_finding(
        &xdp_driver(Some(&iface("eth0", "r8169", Some(0))), w),
        Status::Warn,
        &["has no native XDP", "generic"],
        &["--xdp-mode generic"],
    );
    let mut native_refused = iface("eth0", "r8169", Some(0));
    native_refused.auto_mode = ("native".into(), "auto: driver r8169".into());
    assert!(
        xdp_driver(Some(&native_refused), w)
            .reason
            .contains("falls back to generic")
    );
    assert_finding(
        &xdp_driver(Some(&iface("eth0", "mlx5_core", None)), w),
        Status::Pass,
        &["not reported"],
        &[],
    );
    // veth: the spec's caveats, and what the peer has.
    let veth = |f| iface("v0", "veth", Some(f));
    let lonely = veth(xdp_act::BASIC | xdp_act::REDIRECT | xdp_act::RX_SG);
    assert_finding(
        &xdp_driver(Some(&lonely), w),
        Status::Warn,
        &[
            "v0 is a veth",
            "attaches generic",
            "neither an XDP program nor GRO",
            "does not reliably cross a bridge",
        ],
        &["--xdp-mode auto", "ethtool -K PEER gro on"],
    );
    let peered = veth(xdp_act::BASIC | xdp_act::REDIRECT | xdp_act::NDO_XMIT);
    assert!(
        xdp_driver(Some(&peered), w)
            .reason
            .contains("its peer has an XDP program or GRO on")
    );
    let mut port = iface("eth1", "e1000e", Some(xdp_act::BASIC));
    port.bridge = Some(BridgeRole::Port);
    assert_finding(
        &xdp_driver(Some(&port), w),
        Status::Warn,
        &["bridge port", "does not reliably cross the bridge"],
        &["--xdp-mode auto (generic)"],
    );
    let mut br = iface("br0", "bridge", Some(0));
    br.bridge = Some(BridgeRole::Bridge);
    assert_finding(
        &xdp_driver(Some(&br), w),
        Status::Warn,
        &["br0 is a bridge", "no native XDP"],
        &["uplink NIC"],
    );
}

fn prog(id: u32, name: &str, link: Option<u32>, ours: bool) -> AttachedProgram {
    AttachedProgram {
        id,
        name: name.into(),
        link_id: link,
        ours,
    }
}

fn hooks(
    xdp: Vec<(XdpMode, AttachedProgram)>,
    tcx: Vec<(&'static str, AttachedProgram)>,
) -> HookFacts {
    HookFacts {
        interface: "v0".into(),
        pin_dir: PathBuf::from("/sys/fs/bpf/rivora-lb"),
        xdp: Ok(xdp),
        tcx,
    }
}

#[test]
fn attached_program_verdicts() {
    assert_finding(&xdp_attached(None), Status::Skip, &["no --interface"], &[]);
    assert_finding(
        &xdp_attached(Some(&hooks(vec![], vec![]))),
        Status::Pass,
        &["no XDP or TCX program on v0"],
        &[],
    );
    assert_finding(
        &xdp_attached(Some(&hooks(
            vec![(XdpMode::Generic, prog(7, "xdp_ingress", Some(3), true))],
            vec![("egress", prog(8, "tc_nat", Some(4), true))],
        ))),
        Status::Pass,
        &[
            "only Rivora's own",
            "\"xdp_ingress\" (id 7)",
            "\"tc_nat\" (id 8)",
            "/sys/fs/bpf/rivora-lb",
        ],
        &[],
    );
    assert_finding(
        &xdp_attached(Some(&hooks(
            vec![(XdpMode::Generic, prog(9, "stray_pass", None, false))],
            vec![],
        ))),
        Status::Fail,
        &[
            "\"stray_pass\" (id 9) in generic mode, attached with netlink (no bpf_link)",
            "refused",
        ],
        &[
            "ip -d link show dev v0",
            "bpftool net show dev v0",
            "`ip link set dev v0 xdpgeneric off`",
        ],
    );
    assert!(
        xdp_attached(Some(&hooks(
            vec![(XdpMode::Native, prog(9, "", None, false))],
            vec![]
        )))
        .fix
        .contains("`ip link set dev v0 xdpdrv off`")
    );
    assert_finding(
        &xdp_attached(Some(&hooks(
            vec![(XdpMode::Generic, prog(9, "xdp_ingress", Some(5), false))],
            vec![],
        ))),
        Status::Fail,
        &["held by bpf_link 5"],
        &[
            "another Rivora datapath",
            "rivorad --uninstall --pin-dir DIR",
        ],
    );
    assert_finding(
        &xdp_attached(Some(&hooks(
            vec![(XdpMode::Native, prog(9, "rv_decap", Some(5), false))],
            vec![],
        ))),
        Status::Fail,
        &["\"rv_decap\""],
        &["rivora-decap detach --interface v0"],
    );
    assert_finding(
        &xdp_attached(Some(&hooks(
            vec![(XdpMode::Native, prog(9, "cilium_xdp", Some(6), false))],
            vec![],
        ))),
        Status::Fail,
        &["bpf_link 6"],
        &["bpftool link show id 6"],
    );
    assert_finding(
        &xdp_attached(Some(&hooks(
            vec![],
            vec![("egress", prog(11, "fw_egress", None, false))],
        ))),
        Status::Fail,
        &["TCX egress program \"fw_egress\" (id 11)", "before tc_nat"],
        &["program 11", "type 11"],
    );
    assert_finding(
        &xdp_attached(Some(&hooks(
            vec![],
            vec![("ingress", prog(12, "mon", None, false))],
        ))),
        Status::Warn,
        &[
            "TCX ingress program \"mon\" (id 12)",
            "rewritten NAT packets",
        ],
        &["bpftool net show dev v0"],
    );
    let mut broken = hooks(vec![], vec![]);
    broken.xdp = Err("Operation not permitted".into());
    assert_finding(
        &xdp_attached(Some(&broken)),
        Status::Warn,
        &["could not ask", "Operation not permitted"],
        &["ip -d link show dev v0"],
    );
}

#[test]
fn forwarding_by_workload() {
    let f = |v4: Option<&str>, v6: Option<&str>| ForwardingFacts {
        ipv4: v4.map(str::to_string),
        ipv6: v6.map(str::to_string),
    };
    let on = f(Some("1"), Some("1"));
    let off = f(Some("0"), Some("0"));
    let nat = nat4();
    let w = Workload::File(&nat);
    assert_finding(
        &forwarding(&on, w, false),
        Status::Pass,
        &["net.ipv4.ip_forward = 1"],
        &[],
    );
    assert_finding(
        &forwarding(&off, w, false),
        Status::Fail,
        &["net.ipv4.ip_forward = 0", "VIPs web", "cannot forward"],
        &["sysctl -w net.ipv4.ip_forward=1", "/etc/sysctl.d/"],
    );
    assert_finding(
        &forwarding(&off, w, true),
        Status::Pass,
        &["not needed", "no IPv6 NAT or L3 DSR VIP"],
        &[],
    );
    // L3 DSR needs it for the kernel fallback; L2 DSR does not.
    let mixed = cfg(&format!(
        "{}{}",
        vip("tun6", "fd00:200::1", "dsr-gre"),
        vip("l2", "10.200.100.2", "dsr")
    ));
    let w = Workload::File(&mixed);
    assert_finding(
        &forwarding(&off, w, true),
        Status::Fail,
        &["net.ipv6.conf.all.forwarding = 0", "tun6"],
        &["sysctl -w net.ipv6.conf.all.forwarding=1"],
    );
    assert_eq!(forwarding(&off, w, false).status, Status::Pass);
    assert_finding(
        &forwarding(&off, Workload::Unspecified, false),
        Status::Warn,
        &["give --config"],
        &["sysctl -w net.ipv4.ip_forward=1"],
    );
    assert_eq!(
        forwarding(&off, Workload::Kubernetes, false).status,
        Status::Fail
    );
    assert_finding(
        &forwarding(&off, Workload::Kubernetes, true),
        Status::Warn,
        &["IPv6 Services will not forward"],
        &["net.ipv6.conf.all.forwarding=1"],
    );
    let no_v6 = f(Some("1"), None);
    assert_finding(
        &forwarding(&no_v6, Workload::Unspecified, true),
        Status::Skip,
        &["IPv6 is disabled"],
        &[],
    );
    assert_finding(
        &forwarding(&no_v6, w, true),
        Status::Fail,
        &["disabled", "tun6"],
        &["ipv6.disable=1"],
    );
}

fn rp(all: u32, iface: Option<u32>, accept: u32, writable: bool) -> RpFilterFacts {
    RpFilterFacts {
        interface: iface.map(|_| "v0".to_string()),
        all: Some(all),
        iface,
        accept_local: Some(accept),
        accept_local_writable: writable,
    }
}

#[test]
fn rp_filter_only_for_ipv4_l3_dsr() {
    let strict = rp(1, Some(0), 0, true);
    let nat = nat4();
    assert_finding(
        &rp_filter(&strict, Workload::File(&nat)),
        Status::Skip,
        &["only relevant"],
        &[],
    );
    assert_eq!(
        rp_filter(&strict, Workload::Unspecified).status,
        Status::Skip
    );
    let v6 = cfg(&vip("t6", "fd00:200::1", "dsr-ipip"));
    assert_eq!(
        rp_filter(&strict, Workload::File(&v6)).status,
        Status::Skip,
        "rp_filter is IPv4"
    );
    let c = ipip4();
    let w = Workload::File(&c);
    assert_finding(
        &rp_filter(&strict, w),
        Status::Fail,
        &[
            "all.rp_filter = 1",
            "v0.rp_filter = 0",
            "IPv4 L3 DSR VIPs tun",
            "backends",
        ],
        &["sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.v0.rp_filter=2"],
    );
    assert_eq!(
        rp_filter(&rp(0, Some(1), 0, true), w).status,
        Status::Fail,
        "the larger counts"
    );
    assert_finding(
        &rp_filter(&rp(2, Some(0), 0, true), w),
        Status::Pass,
        &["not strict"],
        &[],
    );
    assert_finding(
        &rp_filter(&rp(0, None, 0, true), w),
        Status::Warn,
        &["not known"],
        &["--interface"],
    );
    assert_finding(
        &rp_filter(&rp(1, None, 0, true), w),
        Status::Fail,
        &["all.rp_filter = 1"],
        &["net.ipv4.conf.IF.rp_filter=2"],
    );
    assert_eq!(
        rp_filter(&strict, Workload::Kubernetes).status,
        Status::Fail,
        "SNAT fallback"
    );
}

#[test]
fn accept_local_verdicts() {
    let c = ipip4();
    let w = Workload::File(&c);
    assert_eq!(
        accept_local(&rp(0, Some(0), 0, true), Workload::File(&nat4())).status,
        Status::Skip
    );
    assert_finding(
        &accept_local(&rp(0, None, 0, true), w),
        Status::Skip,
        &["no --interface"],
        &[],
    );
    assert_finding(
        &accept_local(&rp(0, Some(0), 1, true), w),
        Status::Pass,
        &["accept_local = 1"],
        &[],
    );
    assert_finding(
        &accept_local(&rp(0, Some(0), 0, true), w),
        Status::Pass,
        &["= 0", "rivorad sets it to 1 when it starts"],
        &[],
    );
    assert_finding(
        &accept_local(&rp(0, Some(0), 0, false), w),
        Status::Fail,
        &["not writable", "martians"],
        &["sysctl -w net.ipv4.conf.v0.accept_local=1"],
    );
}

#[test]
fn tunnel_modules_or_decap() {
    let t = |states: &[(&'static str, ModuleState)], decap: &[&str]| TunnelFacts {
        modules: states.to_vec(),
        decap_attached: decap.iter().map(|s| s.to_string()).collect(),
    };
    let absent = t(
        &[
            ("ipip", ModuleState::Absent),
            ("ip6_tunnel", ModuleState::Absent),
            ("ip_gre", ModuleState::Absent),
            ("ip6_gre", ModuleState::Absent),
        ],
        &[],
    );
    assert_eq!(
        tunnels(&absent, Workload::File(&nat4())).status,
        Status::Skip
    );
    let c = cfg(&format!(
        "{}{}",
        vip("a", "10.200.100.1", "dsr-ipip"),
        vip("b", "fd00:200::1", "dsr-gre")
    ));
    let w = Workload::File(&c);
    assert_finding(
        &tunnels(&absent, w),
        Status::Warn,
        &["needs no tunnel module", "no ip6_gre, ipip module"],
        &["rivora-decap attach --interface IF"],
    );
    assert_finding(
        &tunnels(
            &t(
                &[
                    ("ipip", ModuleState::Loadable),
                    ("ip6_gre", ModuleState::Builtin),
                ],
                &[],
            ),
            w,
        ),
        Status::Pass,
        &["ip6_gre (built in)", "ipip (loadable: `modprobe ipip`)"],
        &[],
    );
    assert_finding(
        &tunnels(&t(&[("ipip", ModuleState::Loaded)], &["eth0"]), w),
        Status::Pass,
        &["lacks ip6_gre", "rivora-decap is attached on eth0"],
        &[],
    );
}

#[test]
fn gre_overhead_matches_the_datapath() {
    let encap = include_str!("../../../../bpf/encap.h");
    assert!(
        encap.contains(&format!("#define RV_GRE_LEN {GRE_LEN}")),
        "bpf/encap.h's RV_GRE_LEN differs from GRE_LEN"
    );
    assert_eq!(encap_overhead(Mode::DsrIpip, false), Some(20));
    assert_eq!(encap_overhead(Mode::DsrGre, false), Some(28));
    assert_eq!(encap_overhead(Mode::DsrIpip, true), Some(40));
    assert_eq!(encap_overhead(Mode::DsrGre, true), Some(48));
    assert_eq!(encap_overhead(Mode::Nat, false), None);
}

#[test]
fn mtu_headroom() {
    let c = ipip4();
    let w = Workload::File(&c);
    assert_eq!(
        mtu(Some(("v0", Some(1500))), None, Workload::File(&nat4())).status,
        Status::Skip
    );
    assert_finding(&mtu(None, None, w), Status::Skip, &["no --interface"], &[]);
    assert_finding(
        &mtu(Some(("v0", None)), None, w),
        Status::Skip,
        &["could not be read"],
        &[],
    );
    assert_finding(
        &mtu(Some(("v0", Some(1500))), None, w),
        Status::Warn,
        &[
            "v0 MTU 1500",
            "dsr-ipip IPv4: 20",
            "over 1480 bytes",
            "packet-too-big",
        ],
        &["ip link set dev v0 mtu 1520", "--upstream-mtu"],
    );
    assert_finding(
        &mtu(Some(("v0", Some(1500))), Some(1500), w),
        Status::Warn,
        &["< upstream MTU 1500 + 20"],
        &["ip link set dev v0 mtu 1520"],
    );
    assert_finding(
        &mtu(Some(("v0", Some(1520))), Some(1500), w),
        Status::Pass,
        &[">= upstream MTU 1500 + 20"],
        &[],
    );
    let gre6 = cfg(&format!(
        "{}{}",
        vip("a", "10.200.100.1", "dsr-ipip"),
        vip("b", "fd00:200::1", "dsr-gre")
    ));
    assert_finding(
        &mtu(Some(("v0", Some(1500))), Some(1500), Workload::File(&gre6)),
        Status::Warn,
        &["+ 48 bytes", "dsr-gre IPv6: 48", "dsr-ipip IPv4: 20"],
        &["mtu 1548"],
    );
}

#[test]
fn pinned_map_states() {
    let p = |state, mounted| PinFacts {
        pin_dir: PathBuf::from("/sys/fs/bpf/rv"),
        bpffs_mounted: mounted,
        state,
        recorded_abi: Some(4),
        sizes: (65537, 65536),
    };
    assert_finding(
        &pinned_maps(&p(PinnedState::Empty, false)),
        Status::Skip,
        &["no bpffs"],
        &[],
    );
    assert_finding(
        &pinned_maps(&p(PinnedState::Empty, true)),
        Status::Pass,
        &["nothing pinned in /sys/fs/bpf/rv"],
        &[],
    );
    assert_finding(
        &pinned_maps(&p(PinnedState::Compatible, true)),
        Status::Pass,
        &["this build's layout", "adopts them"],
        &[],
    );
    assert_finding(
        &pinned_maps(&p(PinnedState::Upgradable(12), true)),
        Status::Pass,
        &["ABI 12", "upgrades them in place"],
        &[],
    );
    assert_finding(
        &pinned_maps(&p(
            PinnedState::Incompatible(vec![
                "maps were written by ABI version 4, this build uses version 13".into(),
            ]),
            true,
        )),
        Status::Fail,
        &[
            "would refuse",
            "the pins record ABI 4",
            "written by ABI version 4",
        ],
        &[
            "--reset-pinned-state",
            "rivorad --uninstall --pin-dir /sys/fs/bpf/rv",
        ],
    );
}

fn rule(daddr: Option<&str>, dports: &[(u16, u16)], action: Action) -> Rule {
    Rule {
        tool: "nft",
        family: "inet".into(),
        table: "fw".into(),
        chain: "pre".into(),
        handle: Some(4),
        spec: String::new(),
        daddrs: daddr
            .map(|a| {
                vec![Net {
                    addr: a.parse().unwrap(),
                    len: 32,
                }]
            })
            .unwrap_or_default(),
        dports: dports.to_vec(),
        proto: Some("tcp".into()),
        action,
    }
}

#[test]
fn firewall_rules_on_vips() {
    let nat = nat4();
    let w = Workload::File(&nat);
    let facts = |rules: Vec<Rule>| FirewallFacts {
        nft: ToolRules::Rules(rules),
        iptables: ToolRules::Missing,
    };
    assert_eq!(
        firewall(&facts(vec![]), Workload::Unspecified).status,
        Status::Skip
    );
    assert_finding(
        &firewall(
            &facts(vec![rule(Some("10.9.9.9"), &[(80, 80)], Action::Drop)]),
            w,
        ),
        Status::Pass,
        &[
            "no rule among 1",
            "not checked: iptables-save is not installed",
        ],
        &[],
    );
    assert_finding(
        &firewall(
            &facts(vec![rule(
                Some("10.200.100.1"),
                &[(80, 80)],
                Action::Nat("dnat".into()),
            )]),
            w,
        ),
        Status::Fail,
        &[
            "nft inet fw pre handle 4",
            "matches VIP web (10.200.100.1 80/tcp)",
            "rewritten or dropped",
        ],
        &["nft delete rule inet fw pre handle 4"],
    );
    assert_finding(
        &firewall(&facts(vec![rule(None, &[(1, 1024)], Action::Drop)]), w),
        Status::Fail,
        &["its port 80/tcp on any address"],
        &["nft delete rule"],
    );
    // A port-only rule that lets packets pass is no conflict.
    assert_eq!(
        firewall(&facts(vec![rule(None, &[(80, 80)], Action::Accept)]), w).status,
        Status::Pass
    );
    assert_finding(
        &firewall(
            &facts(vec![rule(Some("10.200.100.1"), &[], Action::Other)]),
            w,
        ),
        Status::Warn,
        &["neither rewrite nor drop"],
        &["check they are meant"],
    );
    assert_finding(
        &firewall(
            &FirewallFacts {
                nft: ToolRules::Missing,
                iptables: ToolRules::Missing,
            },
            w,
        ),
        Status::Warn,
        &["could not be checked", "nft is not installed"],
        &["install nftables"],
    );
    assert_finding(
        &firewall(
            &FirewallFacts {
                nft: ToolRules::Missing,
                iptables: ToolRules::Rules(vec![]),
            },
            w,
        ),
        Status::Warn,
        &["not checked: nft is not installed"],
        &[],
    );
    assert_eq!(
        firewall(
            &FirewallFacts {
                nft: ToolRules::Rules(vec![]),
                iptables: ToolRules::NotNeeded("iptables-nft".into()),
            },
            w
        )
        .reason,
        "no rule among 0 mentions a VIP's address, or rewrites or drops a VIP's port"
    );
}

#[test]
fn clock_sync() {
    assert_finding(
        &clock(&ClockFacts {
            state: 0,
            status: 0x2001,
            maxerror_us: 12_000,
        }),
        Status::Pass,
        &["synchronised", "12 ms"],
        &[],
    );
    assert_finding(
        &clock(&ClockFacts {
            state: libc::TIME_ERROR,
            status: libc::STA_UNSYNC,
            maxerror_us: 16_000_000,
        }),
        Status::Warn,
        &["not synchronised", "STA_UNSYNC, TIME_ERROR"],
        &["NTP client"],
    );
}

fn perm(verb: &str, ns: Option<&str>) -> Permission {
    Permission {
        namespace: ns.map(str::to_string),
        group: "coordination.k8s.io".into(),
        resource: "leases".into(),
        subresource: None,
        verb: verb.into(),
    }
}

#[test]
fn kubernetes_api_and_rbac() {
    assert_eq!(kube_api(None).status, Status::Skip);
    assert_eq!(kube_rbac(None, "ns").status, Status::Skip);
    let up = |reviews| KubeFacts {
        server: Some("https://10.0.0.1:6443/".into()),
        version: Ok("v1.35.4".into()),
        reviews,
    };
    assert_finding(
        &kube_api(Some(&up(vec![]))),
        Status::Pass,
        &["https://10.0.0.1:6443/ answers: Kubernetes v1.35.4"],
        &[],
    );
    let down = KubeFacts {
        server: Some("https://10.0.0.1:6443/".into()),
        version: Err("connection refused".into()),
        reviews: vec![],
    };
    assert_finding(
        &kube_api(Some(&down)),
        Status::Fail,
        &["did not answer", "connection refused"],
        &["kubectl --kubeconfig FILE version"],
    );
    assert_finding(
        &kube_rbac(Some(&down), "ns"),
        Status::Skip,
        &["not reached"],
        &[],
    );
    // It answered, refusing the token: not "did not answer".
    let refused = KubeFacts {
        server: Some("https://10.0.0.1:6443/".into()),
        version: Err(format!(
            "{}401: Unauthorized",
            crate::probe::kube::ANSWERED_HTTP
        )),
        reviews: vec![],
    };
    let f = kube_api(Some(&refused));
    assert_finding(
        &f,
        Status::Fail,
        &["refused the credentials (HTTP 401 Unauthorized)"],
        &["expired, revoked"],
    );
    assert!(!f.reason.contains("did not answer"), "{}", f.reason);
    assert_finding(
        &kube_rbac(Some(&up(vec![(perm("get", Some("ns")), Ok(true))])), "ns"),
        Status::Pass,
        &["all 1 permissions"],
        &[],
    );
    assert_finding(
        &kube_rbac(
            Some(&up(vec![
                (perm("get", Some("ns")), Ok(true)),
                (perm("create", Some("ns")), Ok(false)),
                (perm("update", None), Ok(false)),
            ])),
            "ns",
        ),
        Status::Fail,
        &[
            "lacks 2 of the 3",
            "create leases.coordination.k8s.io in ns",
            "update leases.coordination.k8s.io (cluster-wide)",
        ],
        &["deploy/rbac/rivorad.yaml", "RoleBinding in ns"],
    );
    assert_finding(
        &kube_rbac(
            Some(&up(vec![(perm("get", None), Err("forbidden".into()))])),
            "ns",
        ),
        Status::Fail,
        &["did not answer 1 of 1", "forbidden"],
        &["selfsubjectaccessreviews"],
    );
}
