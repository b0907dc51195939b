//! rivora-decap refused by an occupied XDP hook says what holds it and what
//! to do (issue 14: a bare "File exists (os error 17)"). The real binary in
//! a namespace of its own: a foreign XDP_PASS program attached like `ip
//! link set ... xdp obj` does, then another rivora-decap attachment made
//! under a different pin root.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use rivora_lab::Netns;

const BIN: &str = env!("CARGO_BIN_EXE_rivora-decap");

/// Pin roots whose attachments are removed on drop, also when an
/// assertion fails.
struct Scratch(Vec<PathBuf>);

impl Drop for Scratch {
    fn drop(&mut self) {
        for root in &self.0 {
            for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
                let _ = rivora_decap::remove_pins(&e.path());
            }
            let _ = std::fs::remove_dir(root);
        }
    }
}

fn unique(what: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Runs rivora-decap in `ns`; (success, stderr).
fn decap(ns: &Netns, root: &str, args: &[&str]) -> (bool, String) {
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("--pin-root").arg(root).args(args);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = ns.spawn(&mut cmd).unwrap().wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_occupied_hook_is_named_with_the_way_out() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "attaches XDP programs: run as root"
    );
    rivora_lab::ensure_bpffs().unwrap();
    let ns = Netns::new("dbusy").unwrap();
    ns.run(&[
        "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1",
    ])
    .unwrap();
    ns.run(&["ip", "link", "set", "v0", "up"]).unwrap();
    ns.run(&["ip", "addr", "add", "10.78.0.1/24", "dev", "v0"])
        .unwrap();
    let roots = Scratch(vec![
        PathBuf::from(format!("/sys/fs/bpf/{}", unique("rivora-decap-busy-a"))),
        PathBuf::from(format!("/sys/fs/bpf/{}", unique("rivora-decap-busy-b"))),
    ]);
    let (a, b) = (roots.0[0].to_str().unwrap(), roots.0[1].to_str().unwrap());

    // A stray netlink-attached program in driver mode; auto tries driver
    // (EBUSY) then skb (EEXIST: the other mode is taken).
    let _stray = rivora_lab::StrayXdp::attach(&ns, "v0", "xdpdrv").unwrap();
    let (ok, err) = decap(&ns, a, &["attach", "--interface", "v0"]);
    eprintln!("{err}");
    assert!(!ok);
    for want in [
        "cannot attach rv_decap (generic mode) to v0: bpf_link_create failed: File exists (os error 17)",
        "v0 already has XDP program \"stray_pass\"",
        "in native mode, attached with netlink (no bpf_link)",
        "native and generic XDP cannot be active on one interface at once",
        "If it is a stray program, remove it with `ip link set dev v0 xdpdrv off`",
        "rivora-decap status",
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }
    assert_eq!(err.matches("bpf_link_create failed").count(), 1, "{err}");
    assert!(
        !roots.0[0].join("v0").exists(),
        "nothing left pinned by the refusal"
    );
    ns.run(&["ip", "link", "set", "dev", "v0", "xdpdrv", "off"])
        .unwrap();

    // rivora-decap already attached under another pin root.
    let (ok, err) = decap(&ns, b, &["attach", "--interface", "v0", "--mode", "skb"]);
    assert!(ok, "{err}");
    let (ok, err) = decap(&ns, a, &["attach", "--interface", "v0", "--mode", "skb"]);
    eprintln!("{err}");
    assert!(!ok);
    for want in [
        "Device or resource busy",
        "v0 already has XDP program \"rv_decap\"",
        "held by bpf_link",
        "It is rivora-decap: `rivora-decap status` shows it, `rivora-decap detach --interface v0` removes it",
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }
    let (ok, _) = decap(&ns, b, &["detach", "--interface", "v0"]);
    assert!(ok);
}
