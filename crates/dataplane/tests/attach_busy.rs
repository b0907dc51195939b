//! A refused XDP attach says who holds the interface and the way out
//! (issue 14: "bpf_link_create failed: bpf_link_create failed: Device or
//! resource busy"). In a namespace of its own, with a real veth: a foreign
//! XDP_PASS program attached the way `ip link set ... xdp obj` does
//! (netlink), then another Rivora datapath holding the hook with a bpf_link.

mod common;

use common::*;
use rivora_dataplane::{AttachOptions, XdpModeRequest};
use rivora_lab::Netns;

/// The XDP program ID `ip -d link` shows for `ifname` ("prog/xdp id N").
fn xdp_prog_id(ns: &Netns, ifname: &str) -> Option<u64> {
    let out = ns
        .run(&["ip", "-d", "link", "show", "dev", ifname])
        .unwrap();
    let at = out.find("prog/xdp id ")? + "prog/xdp id ".len();
    out[at..].split_whitespace().next()?.parse().ok()
}

fn attach(mode: XdpModeRequest) -> AttachOptions {
    AttachOptions {
        interface: "v0".into(),
        xdp_mode: mode,
        persist: false,
        egress: false,
    }
}

#[test]
fn a_foreign_xdp_program_is_named_with_the_command_that_removes_it() {
    let mut r = rig("busy-stray");
    let ns = Netns::new("busy-stray").unwrap();
    ns.run(&[
        "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1",
    ])
    .unwrap();
    ns.run(&["ip", "link", "set", "v0", "up"]).unwrap();
    ns.run(&["ip", "link", "set", "v1", "up"]).unwrap();
    let _stray = rivora_lab::StrayXdp::attach(&ns, "v0", "xdpgeneric").unwrap();
    let stray = xdp_prog_id(&ns, "v0").expect("stray program attached");

    // Same mode: EBUSY.
    let err = ns
        .within(|| r.datapath.attach(&attach(XdpModeRequest::Generic)).err())
        .unwrap()
        .expect("refused")
        .to_string();
    eprintln!("{err}");
    assert_eq!(err.matches("bpf_link_create failed").count(), 1, "{err}");
    for want in [
        "attaching xdp_ingress (generic) on v0: bpf_link_create failed: Device or resource busy",
        &format!(
            "v0 already has XDP program \"stray_pass\" (id {stray}) in generic mode, attached with netlink (no bpf_link)"
        ),
        "If it is a stray program, remove it with `ip link set dev v0 xdpgeneric off`",
        "--xdp-mode",
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }

    // The other mode: EEXIST, and the message says why.
    let err = ns
        .within(|| r.datapath.attach(&attach(XdpModeRequest::Native)).err())
        .unwrap()
        .expect("refused")
        .to_string();
    eprintln!("{err}");
    for want in [
        "File exists",
        "\"stray_pass\"",
        "native and generic XDP cannot be active on one interface at once, and native was asked for",
        "`ip link set dev v0 xdpgeneric off`",
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }

    // The advice works: after the suggested command the attach succeeds.
    ns.run(&["ip", "link", "set", "dev", "v0", "xdpgeneric", "off"])
        .unwrap();
    assert_eq!(xdp_prog_id(&ns, "v0"), None);
    ns.within(|| {
        r.datapath
            .attach(&attach(XdpModeRequest::Generic))
            .map(|_| ())
    })
    .unwrap()
    .expect("attaches once the stray program is gone");
    drop(r);
}

#[test]
fn another_rivora_datapath_is_named_as_such() {
    let mut first = rig("busy-first");
    let mut second = rig("busy-second");
    let ns = Netns::new("busy-two").unwrap();
    ns.run(&[
        "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1",
    ])
    .unwrap();
    ns.run(&["ip", "link", "set", "v0", "up"]).unwrap();
    ns.within(|| {
        first
            .datapath
            .attach(&attach(XdpModeRequest::Generic))
            .map(|a| a.xdp_link_id)
    })
    .unwrap()
    .expect("first attach");
    let link = first.datapath.attachment().unwrap().xdp_link_id;
    let err = ns
        .within(|| {
            second
                .datapath
                .attach(&attach(XdpModeRequest::Generic))
                .err()
        })
        .unwrap()
        .expect("refused")
        .to_string();
    eprintln!("{err}");
    for want in [
        "v0 already has XDP program \"xdp_ingress\"",
        &format!("held by bpf_link {link}"),
        "It is Rivora's xdp_ingress: another rivorad runs on this interface (stop it)",
        "rivorad --uninstall --pin-dir DIR",
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }
    assert_eq!(err.matches("bpf_link_create failed").count(), 1, "{err}");
}
