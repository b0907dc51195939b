//! The classifier end to end with the static config: the real rivorad on
//! the lab's lb, Meridio-2-style rules and groups in its YAML, targets
//! (the lab's backends) that own the VIPs on their loopback and answer
//! real TCP and UDP from the client, both families. Checks that each rule
//! reaches exactly its group's targets without NAT (the client talks to
//! the VIP, the target sees the client's own address), that a packet
//! matching no rule goes nowhere, that other traffic through the lb is
//! untouched, and that Meridio-2's readiness files follow the groups.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use rivora_lab::IdentityServer;
use rivora_lab::topology::{backend_v4, backend_v6};

const VIP4: &str = "10.200.100.5";
const VIP6: &str = "fd00:200:100::5";

fn config(dg_b_targets: &str) -> String {
    format!(
        r#"vips: []
classifier:
  groups:
    - name: dg-a
      maxEndpoints: 32
      targets:
        - identifier: 0
          addresses: [{b1v4}, "{b1v6}"]
        - identifier: 1
          addresses: [{b2v4}, "{b2v6}"]
    - name: dg-b
      maxEndpoints: 8
      targets: {dg_b_targets}
  rules:
    - name: web
      group: dg-a
      priority: 10
      destinationCIDRs: [{VIP4}/32, "{VIP6}/128"]
      destinationPorts: ["80"]
      protocols: [TCP, UDP]
    - name: udp-range
      group: dg-b
      priority: 20
      destinationCIDRs: [{VIP4}/32, "{VIP6}/128"]
      destinationPorts: ["9000-9100"]
      protocols: [UDP]
"#,
        b1v4 = backend_v4(1),
        b1v6 = backend_v6(1),
        b2v4 = backend_v4(2),
        b2v6 = backend_v6(2),
    )
}

fn dg_b_with_b3() -> String {
    format!(
        "\n        - identifier: 3\n          addresses: [{}, \"{}\"]",
        backend_v4(3),
        backend_v6(3)
    )
}

/// The VIPs on every backend's loopback (a target owns the VIP) and an
/// identity server on them, ports 80 and 9000.
fn targets_own_the_vips(lab: &Lab) -> Vec<IdentityServer> {
    let mut servers = Vec::new();
    for (i, ns) in lab.topo.backends.iter().enumerate() {
        // nodad: a tentative address cannot be bound (the lab turns DAD
        // off, but an address added at once may still race it).
        for cmd in [
            "ip link set lo up".to_string(),
            format!("ip addr add {VIP4}/32 dev lo"),
            format!("ip -6 addr add {VIP6}/128 dev lo nodad"),
        ] {
            ns.run(&cmd.split(' ').collect::<Vec<_>>()).unwrap();
        }
        let addrs: Vec<SocketAddr> = [VIP4, VIP6]
            .iter()
            .flat_map(|v| [80u16, 9000].map(|p| SocketAddr::new(v.parse().unwrap(), p)))
            .collect();
        servers.push(IdentityServer::start(ns, &format!("b{}", i + 1), &addrs).unwrap());
    }
    servers
}

fn wait_for(what: &str, limit: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let start = Instant::now();
    loop {
        match check() {
            Ok(()) => return,
            Err(last) if start.elapsed() > limit => {
                panic!("{what}: not within {limit:?}; last seen: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn ready_files(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn rules_reach_exactly_their_groups_targets_without_nat() {
    let mut lab = Lab::new("cls");
    let _servers = targets_own_the_vips(&lab);
    lab.write_raw_config(&config(&dg_b_with_b3()));
    let ready = lab.work.join("ready");
    // No MAC is configured for a target: rivorad must have the kernel
    // resolve the next hops itself (managed neighbour entries), so start
    // with none resolved on the lb.
    lab.topo.lb.run(&["ip", "neigh", "flush", "all"]).unwrap();
    lab.topo
        .lb
        .run(&["ip", "-6", "neigh", "flush", "all"])
        .unwrap();
    lab.start(&["--readiness-dir", ready.to_str().unwrap()]);
    let neigh = lab
        .topo
        .lb
        .run(&["ip", "-d", "neigh", "show", "dev", "br0"])
        .unwrap();
    for b in [backend_v4(1).to_string(), backend_v6(3).to_string()] {
        assert!(
            neigh
                .lines()
                .any(|l| l.starts_with(&format!("{b} ")) && l.contains("managed")),
            "{b}: no managed neighbour entry:\n{neigh}"
        );
    }

    for vip in [VIP4, VIP6] {
        // Rule `web`: TCP and UDP port 80 to dg-a's targets b1 and b2 only.
        for (what, r) in [
            ("tcp 80", lab.tcp(vip, 80, 20000, 100)),
            ("udp 80", lab.udp(vip, 80, 20000, 100)),
        ] {
            assert!(
                r.all_ok() && r.ok == 100,
                "{vip} {what}: {r}\n{}",
                lab.log()
            );
            assert_eq!(r.wrong_peer, 0, "{vip} {what}: answered from the VIP: {r}");
            assert_eq!(r.source_rewritten, 0, "{vip} {what}: no NAT: {r}");
            let names: Vec<&String> = r.per_backend.keys().collect();
            assert_eq!(names, ["b1", "b2"], "{vip} {what}: dg-a is b1 and b2: {r}");
        }
        // Rule `udp-range` (priority 20): UDP 9000 to dg-b (b3) only.
        let r = lab.udp(vip, 9000, 21000, 100);
        assert!(
            r.all_ok() && r.ok == 100,
            "{vip} udp 9000: {r}\n{}",
            lab.log()
        );
        assert_eq!(
            r.per_backend.keys().collect::<Vec<_>>(),
            ["b3"],
            "{vip}: {r}"
        );
        // TCP 9000 matches no rule: dropped (never reaches a target).
        let r = rivora_lab::tcp_round_from_ports(
            &lab.topo.client,
            SocketAddr::new(vip.parse().unwrap(), 9000),
            22000,
            5,
            5,
            Duration::from_millis(500),
        );
        assert_eq!(r.ok, 0, "{vip}: TCP 9000 matches no rule: {r}");
    }
    // Traffic through the lb to a non-VIP address is not touched.
    let r = lab.tcp(&backend_v4(1).to_string(), 8080, 23000, 20);
    assert!(r.all_ok(), "direct to b1: {r}");
    assert_eq!(r.per_backend.keys().collect::<Vec<_>>(), ["b1"]);

    // Readiness: a file per group with a target.
    assert_eq!(ready_files(&ready), ["lb-ready-dg-a", "lb-ready-dg-b"]);
    // dg-b loses its last target: its file goes, UDP 9000 is dropped at
    // udp-range's priority (not handed to `web`), dg-a keeps serving.
    lab.write_raw_config(&config("[]"));
    wait_for("lb-ready-dg-b removed", Duration::from_secs(10), || {
        let f = ready_files(&ready);
        if f == ["lb-ready-dg-a"] {
            Ok(())
        } else {
            Err(format!("{f:?}"))
        }
    });
    let r = lab.udp(VIP4, 9000, 24000, 10);
    assert_eq!(r.ok, 0, "dg-b has no target: {r}");
    let r = lab.tcp(VIP4, 80, 24000, 20);
    assert!(r.all_ok(), "dg-a still serves: {r}\n{}", lab.log());

    // Stopping rivorad (no --persist-datapath) removes the files: nothing
    // forwards any more.
    let log = lab.log();
    assert!(lab.stop(), "rivorad stops cleanly:\n{log}");
    assert_eq!(ready_files(&ready), Vec::<String>::new());
}
