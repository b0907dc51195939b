//! Acceptance of the persistent datapath: under steady traffic (50
//! long-lived TCP connections exchanging data, new connections, sequenced
//! UDP), rivorad is SIGKILLed, left down 5 s and started again, and then
//! restarted onto a rebuilt program object. Nothing may fail or be lost
//! beyond what the same traffic loses without restarts, and the programs
//! must change on the same links.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use rivora_lab::{ConnectionChurn, LongLivedTcp, UdpSequence};

struct Traffic {
    long: LongLivedTcp,
    churn: ConnectionChurn,
    seq: UdpSequence,
}

fn start_traffic(lab: &Lab) -> Traffic {
    let tcp: SocketAddr = format!("{VIP4}:80").parse().unwrap();
    let udp: SocketAddr = format!("{VIP4}:53").parse().unwrap();
    let ns = &lab.topo.client;
    Traffic {
        long: LongLivedTcp::start(
            ns,
            tcp,
            50,
            Duration::from_millis(100),
            Duration::from_secs(2),
        )
        .expect("long-lived"),
        churn: ConnectionChurn::start(ns, tcp, 20, Duration::from_secs(2)).expect("churn"),
        seq: UdpSequence::start(ns, udp, 4, 200).expect("udp sequence"),
    }
}

/// (lost, duplicated) UDP of the run, after asserting that no TCP failed.
fn stop_traffic(t: Traffic, what: &str) -> (u64, u64) {
    let long = t.long.stop();
    let churn = t.churn.stop();
    let seq = t.seq.stop(Duration::from_secs(2));
    eprintln!("{what}:\n{long}\n{churn}\n{seq}");
    assert_eq!(
        long.failed_connections, 0,
        "{what}: long-lived connections failed:\n{long}"
    );
    assert!(
        long.exchanges > 50 * 20,
        "{what}: long-lived connections exchanged data:\n{long}"
    );
    assert_eq!(churn.failed, 0, "{what}: new connections failed:\n{churn}");
    assert!(churn.ok > 50, "{what}: {churn}");
    assert_eq!(seq.wrong_source, 0, "{what}: {seq}");
    assert!(seq.sent > 500, "{what}: {seq}");
    (seq.lost, seq.duplicated)
}

/// The kernel's tag (hash of the instructions) of a loaded program.
fn tag(program_id: u32) -> u64 {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .find(|p| p.id() == program_id)
        .map(|p| p.tag())
        .expect("program loaded")
}

/// Builds the datapath's programs again from bpf/, for another CPU target:
/// the same behaviour in different instructions.
fn rebuilt_objects(dir: &Path) -> PathBuf {
    let bpf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bpf");
    for prog in ["xdp_ingress", "tc_nat"] {
        let status = std::process::Command::new("clang-19")
            .args(["-O2", "-g", "-target", "bpf", "-mcpu=v2"])
            .arg(format!(
                "-I/usr/include/{}-linux-gnu",
                std::env::consts::ARCH
            ))
            .arg("-c")
            .arg(bpf.join(format!("{prog}.c")))
            .arg("-o")
            .arg(dir.join(format!("{prog}.o")))
            .status()
            .expect("run clang-19");
        assert!(status.success(), "rebuilding {prog}");
    }
    dir.to_path_buf()
}

#[test]
fn sigkill_and_hot_swap_under_load_lose_nothing() {
    let mut lab = Lab::new("zgap");
    let w = [(1, 1), (2, 1), (3, 2)];
    lab.write_config(&[
        vip_yaml("web4", VIP4, 80, "tcp", &backends_yaml(false, &w)),
        vip_yaml("dns4", VIP4, 53, "udp", &backends_yaml(false, &w)),
    ]);
    lab.start(&["--persist-datapath"]);
    let s0 = lab.status();

    // Baseline: the same traffic, no restart.
    let t = start_traffic(&lab);
    std::thread::sleep(Duration::from_secs(6));
    let (base_lost, base_dup) = stop_traffic(t, "baseline");

    // SIGKILL, 5 s down, start again.
    let t = start_traffic(&lab);
    std::thread::sleep(Duration::from_secs(1));
    lab.kill(libc::SIGKILL);
    std::thread::sleep(Duration::from_secs(5));
    lab.start(&["--persist-datapath"]);
    std::thread::sleep(Duration::from_secs(2));
    let (lost, dup) = stop_traffic(t, "SIGKILL, 5 s down, restart");
    assert!(
        lost <= base_lost,
        "UDP lost {lost} across the restart, {base_lost} without"
    );
    assert!(
        dup <= base_dup,
        "UDP duplicated {dup} across the restart, {base_dup} without"
    );
    let s1 = lab.status();
    for (a, b) in s0.programs.iter().zip(&s1.programs) {
        assert_ne!(a.program_id, b.program_id, "{}: a new program", a.name);
        assert_eq!(a.link_id, b.link_id, "{}: on the same link", a.name);
    }
    assert_eq!(
        lab.attached_programs(),
        (
            Some(s1.programs[0].program_id),
            vec![s1.programs[1].program_id]
        )
    );

    // Hot swap onto a rebuilt object (the replaced program is unloaded, so
    // its tag is taken now).
    let builtin_tag = tag(s1.programs[0].program_id);
    let objects = rebuilt_objects(&lab.work);
    let dir = objects.display().to_string();
    let t = start_traffic(&lab);
    std::thread::sleep(Duration::from_secs(1));
    lab.kill(libc::SIGKILL);
    lab.start(&["--persist-datapath", "--bpf-object-dir", &dir]);
    std::thread::sleep(Duration::from_secs(2));
    let (lost, dup) = stop_traffic(t, "restart onto a rebuilt object");
    assert!(
        lost <= base_lost,
        "UDP lost {lost} across the hot swap, {base_lost} without"
    );
    assert!(
        dup <= base_dup,
        "UDP duplicated {dup} across the hot swap, {base_dup} without"
    );
    let s2 = lab.status();
    for (a, b) in s1.programs.iter().zip(&s2.programs) {
        assert_ne!(a.program_id, b.program_id, "{}: a new program", a.name);
        assert_eq!(a.link_id, b.link_id, "{}: on the same link", a.name);
    }
    assert_ne!(
        tag(s2.programs[0].program_id),
        builtin_tag,
        "the rebuilt XDP program differs from the built-in one"
    );
    assert_eq!(
        lab.attached_programs(),
        (
            Some(s2.programs[0].program_id),
            vec![s2.programs[1].program_id]
        )
    );
}
