//! The real rivora-doctor binary on this machine and in network namespaces
//! with deliberately broken settings (root required; never skipped): each
//! broken setting must show up as its finding with its fix, and applying
//! exactly the fix printed must turn the finding into a PASS.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rivora_dataplane::{AttachOptions, Datapath, LoadOptions, XdpModeRequest};
use rivora_lab::{Netns, StrayXdp, link};
use serde_json::Value;

const DOCTOR: &str = env!("CARGO_BIN_EXE_rivora-doctor");

/// Fails (never skips) when not root, with a message saying why.
fn root() {
    if let Err(e) = rivora_lab::require_root() {
        panic!("THIS TEST NEEDS ROOT, refusing to skip: {e:#}");
    }
    rivora_lab::ensure_bpffs().unwrap();
}

/// A pin directory and a scratch directory of this test, removed on drop.
struct Scratch {
    pin_dir: PathBuf,
    dir: PathBuf,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let name = format!("rv-doctor-{}-{tag}", std::process::id());
        let s = Scratch {
            pin_dir: Path::new("/sys/fs/bpf").join(&name),
            dir: std::env::temp_dir().join(&name),
        };
        std::fs::create_dir_all(&s.dir).unwrap();
        s
    }

    fn pins(&self) -> &str {
        self.pin_dir.to_str().unwrap()
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = rivora_dataplane::remove_pins(&self.pin_dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs rivora-doctor (in `ns` when given): exit code, stdout, stderr.
fn doctor(ns: Option<&Netns>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(DOCTOR);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = match ns {
        Some(ns) => ns.spawn(&mut cmd).unwrap(),
        None => cmd.spawn().unwrap(),
    };
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// rivora-doctor -o json: exit code and the report.
fn report(ns: Option<&Netns>, args: &[&str]) -> (i32, Value) {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (code, out, err) = doctor(ns, &all);
    let v: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {out}\nstderr: {err}"));
    eprintln!("rivora-doctor {}: exit {code}", args.join(" "));
    for f in v["findings"].as_array().unwrap() {
        eprintln!(
            "  {} {}: {} | {}",
            f["status"], f["id"], f["reason"], f["fix"]
        );
    }
    (code, v)
}

fn finding<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no finding {id} in {r:#}"))
}

/// Asserts finding `id` has `status`, its reason every text of `reason`
/// and its fix every text of `fix`; returns the fix.
fn expect(r: &Value, id: &str, status: &str, reason: &[&str], fix: &[&str]) -> String {
    let f = finding(r, id);
    assert_eq!(f["status"], status, "{id}: {f:#}");
    let (why, how) = (f["reason"].as_str().unwrap(), f["fix"].as_str().unwrap());
    for want in reason {
        assert!(why.contains(want), "{id}: reason lacks {want:?}: {why}");
    }
    for want in fix {
        assert!(how.contains(want), "{id}: fix lacks {want:?}: {how}");
    }
    how.to_string()
}

/// The command of a fix that starts with `start`: a `backticked` one, or
/// the fix's own text up to its first " (".
fn command_in(fix: &str, start: &str) -> Vec<String> {
    let quoted = fix
        .split('`')
        .skip(1)
        .step_by(2)
        .find(|c| c.starts_with(start));
    let text = match quoted {
        Some(c) => c.to_string(),
        None => {
            assert!(fix.starts_with(start), "no `{start}...` command in {fix:?}");
            fix.split(" (").next().unwrap().to_string()
        }
    };
    text.split_whitespace().map(str::to_string).collect()
}

/// Runs a fix's command in `ns`.
fn apply(ns: &Netns, fix: &str, start: &str) {
    let argv = command_in(fix, start);
    eprintln!("applying: {}", argv.join(" "));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    ns.run(&argv).unwrap();
}

/// Whether this kernel has the ipip module, looked up independently of
/// the doctor's probe.
fn kernel_has_ipip() -> bool {
    if Path::new("/sys/module/ipip").exists() {
        return true;
    }
    let release = Command::new("uname").arg("-r").output().unwrap().stdout;
    let dir = format!("/lib/modules/{}", String::from_utf8_lossy(&release).trim());
    Command::new("find")
        .args([&dir, "-name", "ipip.ko*"])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false)
}

fn clock_unsynchronised() -> bool {
    // SAFETY: adjtimex with modes 0 only reads.
    unsafe {
        let mut t: libc::timex = std::mem::zeroed();
        let state = libc::adjtimex(&mut t);
        state == libc::TIME_ERROR || t.status & libc::STA_UNSYNC != 0
    }
}

#[test]
fn on_this_machine_the_kernel_checks_pass_and_the_table_sums_up() {
    root();
    let s = Scratch::new("host");
    let (code, r) = report(None, &["--pin-dir", s.pins()]);
    // This kernel (docs: PLATFORM) has all of it.
    for id in [
        "kernel",
        "bpf-syscall",
        "bpf-jit",
        "btf",
        "bpffs",
        "bpf-test-run",
    ] {
        expect(&r, id, "PASS", &[], &[]);
    }
    expect(&r, "kernel", "PASS", &["TCX answers"], &[]);
    expect(&r, "bpf-test-run", "PASS", &["XDP_PASS"], &[]);
    expect(
        &r,
        "pinned-maps",
        "PASS",
        &["nothing pinned in", s.pins()],
        &[],
    );
    let clock = if clock_unsynchronised() {
        "WARN"
    } else {
        "PASS"
    };
    expect(&r, "clock", clock, &["adjtimex"], &[]);
    for id in [
        "xdp-driver",
        "xdp-attached",
        "rp-filter",
        "tunnels",
        "mtu",
        "firewall",
        "kube-api",
        "kube-rbac",
    ] {
        expect(&r, id, "SKIP", &[], &[]);
    }
    assert_eq!(code, 0, "nothing fails on this host without a workload");
    assert_eq!(r["ready"], true);
    assert_eq!(r["findings"].as_array().unwrap().len(), 21);

    // The table: every check, and the summary line with the same counts.
    let (code, table, _) = doctor(None, &["--pin-dir", s.pins()]);
    assert_eq!(code, 0);
    for f in r["findings"].as_array().unwrap() {
        assert!(table.contains(f["title"].as_str().unwrap()), "{table}");
    }
    let sum = &r["summary"];
    let line = format!(
        "{} PASS, {} WARN, 0 FAIL, {} SKIP: ready for rivorad",
        sum["pass"], sum["warn"], sum["skip"]
    );
    assert!(
        table.trim_end().ends_with(&line),
        "{line:?} not last in\n{table}"
    );

    // An interface that is not there.
    let (code, r) = report(None, &["--interface", "rvdoc-none0", "--pin-dir", s.pins()]);
    assert_eq!(code, 1);
    expect(
        &r,
        "xdp-driver",
        "FAIL",
        &["no interface rvdoc-none0"],
        &["ip link show"],
    );
    expect(
        &r,
        "xdp-attached",
        "SKIP",
        &["no interface rvdoc-none0"],
        &[],
    );
}

#[test]
fn usage_errors_exit_2_and_help_lists_every_option() {
    root();
    let (code, help, _) = doctor(None, &["--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--interface",
        "--config",
        "--pin-dir",
        "--maglev-table-size",
        "--flow-table-size",
        "--upstream-mtu",
        "--fix",
        "--kubernetes",
        "--kubeconfig",
        "--namespace",
        "--output",
        "Exit status: 0 when no check fails, 1 when one does, 2 for usage errors",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
    for args in [
        &["--bogus"][..],
        &["--kubeconfig", "/etc/hostname"],
        &["--config", "/nonexistent/rivora.yaml"],
        &["--kubernetes", "--config", "/etc/hostname"],
        &["-o", "yaml"],
        &["--flow-table-size", "10"],
    ] {
        let (code, _, err) = doctor(None, args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(!err.is_empty());
    }
}

/// An lb namespace with `v0` (10.0.0.1/24, MTU 1500) to a peer namespace.
fn lb_with_veth(tag: &str) -> (Netns, Netns) {
    let lb = Netns::new(tag).unwrap();
    let peer = Netns::new(tag).unwrap();
    link::veth(&lb, "v0", &peer, "v1").unwrap();
    link::addr(&lb, "v0", "10.0.0.1/24").unwrap();
    link::up(&lb, "v0").unwrap();
    link::up(&peer, "v1").unwrap();
    (lb, peer)
}

const BROKEN_CONFIG: &str = "settings:
  tunnelSource: { ipv4: 10.0.0.1 }
vips:
  - name: tun
    address: 10.200.100.1
    port: 80
    protocol: tcp
    mode: dsr-ipip
    backends: [ { address: 10.0.1.11, port: 80 } ]
  - name: web
    address: 10.200.100.2
    port: 80
    protocol: tcp
    mode: nat
    backends: [ { address: 10.0.1.12, port: 8080 } ]
";

#[test]
fn broken_settings_in_a_namespace_are_named_and_their_fixes_work() {
    root();
    let s = Scratch::new("brk");
    let (lb, peer) = lb_with_veth("dbrk");
    let config = s.file("rivora.yaml", BROKEN_CONFIG);
    // The broken settings.
    lb.sysctl("net.ipv4.ip_forward", "0").unwrap();
    lb.sysctl("net.ipv4.conf.all.rp_filter", "1").unwrap();
    lb.sysctl("net.ipv4.conf.v0.rp_filter", "1").unwrap();
    let stray = StrayXdp::attach(&lb, "v0", "xdpgeneric").unwrap();
    lb.run(&["nft", "add", "table", "inet", "rvdoc"]).unwrap();
    lb.run(&[
        "nft",
        "add",
        "chain",
        "inet",
        "rvdoc",
        "pre",
        "{ type nat hook prerouting priority -100 ; }",
    ])
    .unwrap();
    lb.run(&[
        "nft",
        "add",
        "rule",
        "inet",
        "rvdoc",
        "pre",
        "ip",
        "daddr",
        "10.200.100.2",
        "tcp",
        "dport",
        "80",
        "dnat",
        "ip",
        "to",
        "10.0.1.5",
    ])
    .unwrap();
    let args = [
        "--interface",
        "v0",
        "--config",
        &config,
        "--pin-dir",
        s.pins(),
        "--upstream-mtu",
        "1500",
    ];

    let (code, r) = report(Some(&lb), &args);
    assert_eq!(code, 1, "broken settings fail");
    assert_eq!(r["ready"], false);
    expect(&r, "config", "PASS", &["2 VIPs (1 nat, 1 dsr-ipip)"], &[]);
    let fwd = expect(
        &r,
        "forwarding-ipv4",
        "FAIL",
        &["net.ipv4.ip_forward = 0", "tun, web"],
        &["sysctl -w net.ipv4.ip_forward=1"],
    );
    expect(&r, "forwarding-ipv6", "PASS", &["not needed"], &[]);
    let rp = expect(
        &r,
        "rp-filter",
        "FAIL",
        &[
            "net.ipv4.conf.all.rp_filter = 1",
            "net.ipv4.conf.v0.rp_filter = 1",
            "IPv4 L3 DSR VIPs tun",
        ],
        &["sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.v0.rp_filter=2"],
    );
    expect(
        &r,
        "accept-local",
        "PASS",
        &["net.ipv4.conf.v0.accept_local = 0", "rivorad sets it to 1"],
        &[],
    );
    let attached = expect(
        &r,
        "xdp-attached",
        "FAIL",
        &[
            "\"stray_pass\"",
            "generic mode, attached with netlink (no bpf_link)",
        ],
        &[
            "ip -d link show dev v0",
            "`ip link set dev v0 xdpgeneric off`",
        ],
    );
    expect(
        &r,
        "xdp-driver",
        "WARN",
        &[
            "v0 is a veth",
            "attaches generic (auto: driver veth)",
            "neither an XDP program nor GRO",
            "does not reliably cross a bridge",
        ],
        &["ethtool -K PEER gro on"],
    );
    let mtu = expect(
        &r,
        "mtu",
        "WARN",
        &[
            "v0 MTU 1500 < upstream MTU 1500 + 20",
            "dsr-ipip IPv4: 20",
            "over 1480 bytes",
        ],
        &["ip link set dev v0 mtu 1520"],
    );
    let fw = expect(
        &r,
        "firewall",
        "FAIL",
        &[
            "nft inet rvdoc pre handle",
            "daddr 10.200.100.2 tcp dport 80 dnat",
            "VIP web",
        ],
        &["`nft delete rule inet rvdoc pre handle"],
    );
    if kernel_has_ipip() {
        expect(&r, "tunnels", "PASS", &["ipip ("], &[]);
    } else {
        expect(
            &r,
            "tunnels",
            "WARN",
            &["no ipip module", "backends of tun"],
            &["rivora-decap attach --interface IF"],
        );
    }
    expect(&r, "bpffs", "PASS", &[], &[]);
    expect(&r, "pinned-maps", "PASS", &["nothing pinned"], &[]);
    // net.core.bpf_jit_enable does not exist outside the initial network
    // namespace: the test-run program's JIT image tells instead.
    expect(&r, "bpf-jit", "PASS", &["JIT-compiled"], &[]);

    // Each fix, exactly as printed.
    apply(&lb, &fwd, "sysctl");
    apply(&lb, &rp, "sysctl");
    apply(&lb, &attached, "ip link set dev v0");
    apply(&lb, &fw, "nft delete rule");
    apply(&lb, &mtu, "ip link set dev v0 mtu");
    let (code, r) = report(Some(&lb), &args);
    expect(&r, "forwarding-ipv4", "PASS", &["= 1"], &[]);
    expect(&r, "rp-filter", "PASS", &["not strict"], &[]);
    expect(
        &r,
        "xdp-attached",
        "PASS",
        &["no XDP or TCX program on v0"],
        &[],
    );
    expect(&r, "firewall", "PASS", &["no rule among 0"], &[]);
    expect(
        &r,
        "mtu",
        "PASS",
        &["v0 MTU 1520 >= upstream MTU 1500 + 20"],
        &[],
    );
    assert_eq!(code, 0, "every FAIL fixed");
    assert_eq!(r["ready"], true);
    drop(stray);

    // GRO on the peer lets the veth take XDP frames (the kernel's
    // xdp-features gain ndo-xmit), and the finding says so.
    peer.run(&["ethtool", "-K", "v1", "gro", "on"]).unwrap();
    let (_, r) = report(Some(&lb), &args);
    expect(
        &r,
        "xdp-driver",
        "WARN",
        &["ndo-xmit", "its peer has an XDP program or GRO on"],
        &[],
    );
}

#[test]
fn rivoras_own_datapath_passes_and_other_pins_or_sizes_do_not() {
    root();
    let mine = Scratch::new("own");
    let other = Scratch::new("oth");
    let (lb, _peer) = lb_with_veth("down");
    let (mut datapath, _maps, _) = Datapath::load(&LoadOptions {
        pin_dir: mine.pin_dir.clone(),
        maglev_table_size: rivora_abi::MAGLEV_TABLE_DEFAULT,
        flow_table_size: 1024,
        reset_incompatible: false,
        object_dir: None,
    })
    .unwrap();
    let attached = lb
        .within(|| {
            datapath
                .attach(&AttachOptions {
                    interface: "v0".into(),
                    xdp_mode: XdpModeRequest::Generic,
                    persist: false,
                    egress: true,
                })
                .map(|a| (a.xdp_program_id, a.tc_program_id))
        })
        .unwrap()
        .unwrap();

    let (code, r) = report(
        Some(&lb),
        &[
            "--interface",
            "v0",
            "--pin-dir",
            mine.pins(),
            "--flow-table-size",
            "1024",
        ],
    );
    expect(
        &r,
        "xdp-attached",
        "PASS",
        &[
            "only Rivora's own",
            &format!("\"xdp_ingress\" (id {})", attached.0),
            &format!("TCX egress program \"tc_nat\" (id {})", attached.1),
            mine.pins(),
        ],
        &[],
    );
    expect(
        &r,
        "pinned-maps",
        "PASS",
        &[
            "this build's layout",
            &format!("ABI {}", rivora_abi::ABI_VERSION),
            "--flow-table-size 1024",
        ],
        &[],
    );
    assert_eq!(code, 0, "{r:#}");

    // Another size than the pins were made with: rivorad would refuse, and
    // says which size keeps them.
    let (code, r) = report(
        Some(&lb),
        &[
            "--interface",
            "v0",
            "--pin-dir",
            mine.pins(),
            "--flow-table-size",
            "2048",
        ],
    );
    assert_eq!(code, 1);
    expect(
        &r,
        "pinned-maps",
        "FAIL",
        &["would refuse", "holds 1024 flows", "--flow-table-size 1024"],
        &[
            "--reset-pinned-state",
            &format!("rivorad --uninstall --pin-dir {}", mine.pins()),
        ],
    );

    // Seen from another pin directory, the same programs are another
    // rivorad's.
    let (code, r) = report(Some(&lb), &["--interface", "v0", "--pin-dir", other.pins()]);
    assert_eq!(code, 1);
    expect(
        &r,
        "xdp-attached",
        "FAIL",
        &[
            "\"xdp_ingress\"",
            "held by bpf_link",
            "TCX egress program \"tc_nat\"",
        ],
        &[
            "another Rivora datapath",
            "rivorad --uninstall --pin-dir DIR",
        ],
    );
    drop(datapath);
}

#[test]
fn an_unmounted_bpffs_is_named_and_fix_mounts_it_without_touching_the_hosts() {
    root();
    let s = Scratch::new("bpffs");
    let first = s.dir.join("first.json");
    let fixed = s.dir.join("fixed.json");
    let mounts = s.dir.join("mounts.txt");
    // A mount namespace of a child, with /sys made a slave there: unmounting
    // and mounting in it never reach the host's /sys/fs/bpf, which other
    // processes use. (`--propagation private` would remake `/`, which
    // fails where `/` is no mount point, as in a chroot.)
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "unchanged", "sh", "-c"])
        .arg(
            r#"mount --make-rslave /sys || exit 8
umount /sys/fs/bpf || exit 9
readlink /proc/1/ns/mnt > /dev/null 2>&1 && echo "pid1=visible"
"$0" --pin-dir "$1" -o json > "$2"; echo "first=$?"
"$0" --pin-dir "$1" --fix -o json > "$3"; echo "fixed=$?"
grep ' /sys/fs/bpf ' /proc/self/mountinfo > "$4"; true"#,
        )
        .args([DOCTOR, s.pins()])
        .arg(&first)
        .arg(&fixed)
        .arg(&mounts)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        rivora_dataplane::bpffs::is_bpffs(Path::new("/sys/fs/bpf")),
        "the host's bpffs stays"
    );
    let first: Value = serde_json::from_str(&std::fs::read_to_string(&first).unwrap()).unwrap();
    let fixed: Value = serde_json::from_str(&std::fs::read_to_string(&fixed).unwrap()).unwrap();
    eprintln!(
        "{said}{:#}\n{:#}",
        finding(&first, "bpffs"),
        finding(&fixed, "bpffs")
    );
    expect(
        &first,
        "pinned-maps",
        "SKIP",
        &["no bpffs at /sys/fs/bpf"],
        &[],
    );
    expect(&fixed, "pinned-maps", "PASS", &["nothing pinned"], &[]);
    if said.contains("pid1=visible") {
        // The namespace can be told apart from PID 1's: pins made here
        // would vanish with it, before and after --fix.
        assert!(
            said.contains("first=1") && said.contains("fixed=1"),
            "{said}"
        );
        expect(
            &first,
            "bpffs",
            "FAIL",
            &[
                "private mount namespace",
                "is not a mounted bpffs",
                "pins made here would vanish",
            ],
            &[
                "mount -t bpf bpf /sys/fs/bpf",
                "nsenter --net=/run/netns/NAME",
                "--fix",
            ],
        );
        expect(
            &fixed,
            "bpffs",
            "FAIL",
            &[
                "mounted bpffs at /sys/fs/bpf (--fix)",
                "another bpffs than PID 1's",
            ],
            &["nsenter --net=/run/netns/NAME"],
        );
    } else {
        // PID 1's namespaces are not readable from here (as on the machines
        // this is developed on): the doctor cannot tell this namespace from
        // the host's and judges the mount alone.
        assert!(
            said.contains("first=0") && said.contains("fixed=0"),
            "{said}"
        );
        expect(
            &first,
            "bpffs",
            "WARN",
            &[
                "no bpffs at /sys/fs/bpf",
                "rivorad mounts one when it starts",
            ],
            &["`mount -t bpf bpf /sys/fs/bpf`", "--fix"],
        );
        expect(
            &fixed,
            "bpffs",
            "PASS",
            &["mounted bpffs at /sys/fs/bpf (--fix)"],
            &[],
        );
    }
    let m = std::fs::read_to_string(&mounts).unwrap();
    assert!(m.contains(" - bpf "), "--fix mounted a bpffs there: {m}");
}
