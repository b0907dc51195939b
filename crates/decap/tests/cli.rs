//! The rivora-decap binary on a real interface in a network namespace:
//! attach (addresses from the interface, then replaced by --address),
//! status, detach; the program really sits on the interface in between and
//! is gone afterwards, and so are its pins.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use rivora_lab::Netns;

const BIN: &str = env!("CARGO_BIN_EXE_rivora-decap");

fn xdp_prog_on(ns: &Netns, ifname: &str) -> Option<u64> {
    let out = ns
        .run(&["ip", "-d", "-j", "link", "show", "dev", ifname])
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v[0]["xdp"]["prog"]["id"].as_u64()
}

struct Root(PathBuf);

impl Drop for Root {
    fn drop(&mut self) {
        for e in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
            let _ = rivora_decap::remove_pins(&e.path());
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn help_describes_every_subcommand() {
    let out = std::process::Command::new(BIN)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for word in [
        "attach",
        "detach",
        "status",
        "--pin-root",
        "GRE",
        "IP-in-IP",
    ] {
        assert!(text.contains(word), "--help mentions {word}:\n{text}");
    }
    let out = std::process::Command::new(BIN)
        .args(["attach", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for word in ["--interface", "--address", "--mode", "skb", "driver"] {
        assert!(
            text.contains(word),
            "attach --help mentions {word}:\n{text}"
        );
    }
}

#[test]
fn attach_status_detach_on_a_real_interface() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test attaches XDP programs and must run as root"
    );
    rivora_lab::ensure_bpffs().unwrap();
    let ns = Netns::new("dcli").unwrap();
    ns.run(&[
        "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1",
    ])
    .unwrap();
    ns.run(&["ip", "link", "set", "v0", "up"]).unwrap();
    ns.run(&["ip", "link", "set", "v1", "up"]).unwrap();
    ns.run(&["ip", "addr", "add", "10.77.0.1/24", "dev", "v0"])
        .unwrap();
    ns.run(&["ip", "addr", "add", "fd00:77::1/64", "dev", "v0", "nodad"])
        .unwrap();
    static N: AtomicU32 = AtomicU32::new(0);
    let root = Root(PathBuf::from(format!(
        "/sys/fs/bpf/rivora-decap-cli-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )));
    let pin_root = root.0.to_str().unwrap();
    let run = |args: &[&str]| -> String {
        let mut argv = vec![BIN, "--pin-root", pin_root];
        argv.extend_from_slice(args);
        ns.run(&argv).unwrap()
    };

    let out = run(&["attach", "--interface", "v0", "--mode", "skb"]);
    assert!(out.contains("attached to v0 (skb mode)"), "{out}");
    assert!(
        out.contains("10.77.0.1") && out.contains("fd00:77::1"),
        "endpoints default to the interface's addresses: {out}"
    );
    assert!(!out.contains("fe80"), "link-local left out: {out}");
    let prog = xdp_prog_on(&ns, "v0").expect("an XDP program on v0 after the command exited");
    assert!(Path::new(pin_root).join("v0/link").exists());

    let status = run(&["status"]);
    assert!(status.contains("v0: attached"), "{status}");
    assert!(status.contains(&format!("program {prog}")), "{status}");
    assert!(status.contains("skb mode"), "{status}");
    assert!(
        status.contains("endpoints: 10.77.0.1, fd00:77::1"),
        "{status}"
    );
    for kind in ["ipip", "ip6tnl", "gre", "ip6gre"] {
        assert!(status.contains(kind), "{status}");
    }

    let out = run(&[
        "attach",
        "--interface",
        "v0",
        "--address",
        "10.77.0.9",
        "--address",
        "fd00:77::9",
    ]);
    assert!(out.contains("updated endpoints on v0"), "{out}");
    assert_eq!(
        xdp_prog_on(&ns, "v0"),
        Some(prog),
        "same program, only the addresses changed"
    );
    let status = run(&["status", "--interface", "v0"]);
    assert!(
        status.contains("endpoints: 10.77.0.9, fd00:77::9"),
        "{status}"
    );

    let out = run(&["detach", "--interface", "v0"]);
    assert!(out.contains("detached from v0"), "{out}");
    // The link goes when its pin's inode is freed, after an RCU grace
    // period: the program leaves the interface shortly after the command.
    let every = std::time::Duration::from_millis(10);
    rivora_lab::poll_until(
        "the program gone from v0",
        std::time::Duration::from_secs(5),
        every,
        || match xdp_prog_on(&ns, "v0") {
            None => Ok(()),
            Some(id) => Err(format!("program {id} still on v0")),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!Path::new(pin_root).join("v0").exists(), "pins removed");
    let out = run(&["detach", "--interface", "v0"]);
    assert!(out.contains("was not attached"), "{out}");
    let out = run(&["status"]);
    assert!(out.contains("no attachments"), "{out}");
}

/// `ip netns exec NS rivora-decap attach` would pin into the private /sys
/// that `ip netns exec` mounts, where the attachment vanishes when the
/// command exits: it is refused with the nsenter command to use instead,
/// and nothing is left on the interface; the same attach through nsenter
/// works and stays.
#[test]
fn attach_under_ip_netns_exec_is_refused_with_the_way_out() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test attaches XDP programs and must run as root"
    );
    rivora_lab::ensure_bpffs().unwrap();
    let ns = Netns::new("dnse").unwrap();
    ns.run(&["ip", "link", "set", "lo", "up"]).unwrap();
    static N: AtomicU32 = AtomicU32::new(0);
    let root = Root(PathBuf::from(format!(
        "/sys/fs/bpf/rivora-decap-nse-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )));
    let pin_root = root.0.display().to_string();
    let attach = [
        "attach",
        "--interface",
        "lo",
        "--address",
        "127.0.0.1",
        "--pin-root",
        &pin_root,
    ];
    let mut out = std::process::Command::new("ip")
        .args(["netns", "exec", ns.name(), BIN])
        .args(attach)
        .output()
        .unwrap();
    if String::from_utf8_lossy(&out.stderr).contains("mount --make-rslave") {
        // In a chroot "/" is no mount point and `ip netns exec` cannot set
        // up its mount namespace. Do what it does by hand: a private mount
        // namespace whose /sys is a fresh sysfs named after the network
        // namespace (made private first, so nothing propagates back).
        eprintln!("ip netns exec cannot run here (chroot?); reproducing its mounts with unshare");
        let script = format!(
            "mount --make-rprivate /sys && mount -t sysfs {} /sys && exec \"$@\"",
            ns.name()
        );
        let netns = format!("--net=/run/netns/{}", ns.name());
        out = std::process::Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "unchanged",
                "--",
                "nsenter",
                &netns,
                "--",
            ])
            .args(["sh", "-c", &script, "sh", BIN])
            .args(attach)
            .output()
            .unwrap();
    }
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{err}");
    assert!(!out.status.success(), "must refuse: {err}");
    assert!(
        err.contains(&format!("nsenter --net=/run/netns/{}", ns.name())),
        "names the way out: {err}"
    );
    assert_eq!(xdp_prog_on(&ns, "lo"), None, "nothing attached");
    assert!(!Path::new(&pin_root).join("lo").exists());

    let out = std::process::Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", ns.name()))
        .arg(BIN)
        .args(attach)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(xdp_prog_on(&ns, "lo").is_some(), "attached and still there");
    let out = std::process::Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", ns.name()))
        .args([BIN, "detach", "--interface", "lo", "--pin-root", &pin_root])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
