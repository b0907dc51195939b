//! The static path's guard rails, end to end: a second rivorad (or an
//! `--uninstall`) on the pin directory of a running one is refused and the
//! running one keeps forwarding; files that say nothing (empty, comments
//! only, `vips:`) are refused at start and on reload; a config file
//! truncated and rewritten in place under load loses nothing;
//! `--check-config` shows what a file would change without touching
//! anything.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use rivora_lab::{ConnectionChurn, UdpSequence};

fn four_vips() -> Vec<String> {
    let w = [(1, 1), (2, 1), (3, 2)];
    vec![
        vip_yaml("web4", VIP4, 80, "tcp", &backends_yaml(false, &w)),
        vip_yaml("dns4", VIP4, 53, "udp", &backends_yaml(false, &w)),
        vip_yaml("web6", VIP6, 80, "tcp", &backends_yaml(true, &w)),
        vip_yaml("dns6", VIP6, 53, "udp", &backends_yaml(true, &w)),
    ]
}

/// Every VIP of [`four_vips`] answers every one of `n` connections or
/// exchanges, from source ports starting at `first`.
#[track_caller]
fn all_four_answer(lab: &Lab, first: u16, n: usize, when: &str) {
    for (i, (vip, port, udp)) in [
        (VIP4, 80, false),
        (VIP4, 53, true),
        (VIP6, 80, false),
        (VIP6, 53, true),
    ]
    .into_iter()
    .enumerate()
    {
        let from = first + (i * n) as u16;
        let r = if udp {
            lab.udp(vip, port, from, n)
        } else {
            lab.tcp(vip, port, from, n)
        };
        assert!(
            r.all_ok() && r.ok == n,
            "{when}: {vip} port {port} ({}):\n{r}",
            if udp { "udp" } else { "tcp" }
        );
    }
}

/// Acceptance 1: a second rivorad on the same pin directory refuses (naming
/// the first one's PID) before it touches anything; the first one's IPv4
/// and IPv6 VIPs keep answering every connection; `--uninstall` refuses
/// while it runs and works once it stopped.
#[test]
fn a_second_rivorad_and_uninstall_are_refused_while_one_runs() {
    let mut lab = Lab::new("twice");
    lab.write_config(&four_vips());
    lab.start(&["--persist-datapath"]);
    let pid = lab.rivorad.as_ref().unwrap().pid();
    let before = lab.status();
    all_four_answer(&lab, 20000, 100, "before the second rivorad");

    let other = lab.work.join("other.yaml");
    std::fs::write(
        &other,
        format!(
            "vips:\n{}",
            vip_yaml("echo4", VIP4, 7, "tcp", &backends_yaml(false, &[(1, 1)]))
        ),
    )
    .unwrap();
    let pin = lab.pin_dir.display().to_string();
    let other_socket = lab.work.join("other.sock").display().to_string();
    let cfg = other.display().to_string();
    // Same pin directory, its own socket: the mistake of the bug report.
    let (ok, err) = lab.run_rivorad(&daemon_args(&cfg, &pin, &other_socket));
    eprintln!("second rivorad, same pin directory:\n{err}");
    assert!(!ok, "the second rivorad must fail");
    assert!(
        err.contains(&format!("PID {pid}")) && err.contains("pin directory"),
        "the refusal names the holder and the pin directory: {err}"
    );
    assert!(err.contains("--check-config"), "and the way forward: {err}");
    assert!(!err.contains("programmed"), "nothing was programmed: {err}");
    // Its own pin directory, the first one's socket: refused too.
    let other_pin = format!("{pin}-second");
    let sock = lab.socket.display().to_string();
    let (ok, err) = lab.run_rivorad(&daemon_args(&cfg, &other_pin, &sock));
    eprintln!("second rivorad, same API socket:\n{err}");
    assert!(
        !ok && err.contains(&format!("PID {pid}")) && err.contains("API socket"),
        "{err}"
    );
    assert!(
        !std::path::Path::new(&other_pin).exists(),
        "a refused start leaves no pin directory"
    );

    all_four_answer(&lab, 21000, 100, "after the second rivorad was refused");
    let after = lab.status();
    assert_eq!(after.vip_count, 4);
    assert_eq!(after.config_generation, before.config_generation);
    assert_eq!(after.programs, before.programs, "same programs and links");
    assert_eq!(
        lab.rivorad.as_ref().unwrap().pid(),
        pid,
        "still the first rivorad"
    );

    let (ok, err) = lab.run_rivorad(&["--uninstall", "--pin-dir", &pin]);
    eprintln!("--uninstall while it runs:\n{err}");
    assert!(
        !ok && err.contains("refusing to uninstall") && err.contains(&format!("PID {pid}")),
        "{err}"
    );
    assert!(lab.pin_dir.join("vip_map").exists(), "the pins stay");
    all_four_answer(&lab, 22000, 50, "after the refused --uninstall");

    // Stopped (the persistent datapath stays and forwards), --uninstall works.
    lab.kill(libc::SIGTERM);
    assert!(
        lab.pin_dir.join("vip_map").exists(),
        "persistent pins stay after a stop"
    );
    assert!(lab.tcp(VIP4, 80, 23000, 20).all_ok(), "and forward");
    let (ok, err) = lab.run_rivorad(&["--uninstall", "--pin-dir", &pin]);
    assert!(ok, "--uninstall after the stop: {err}");
    assert!(!lab.pin_dir.exists(), "{err}");
    lab.wait_detached();
}

const SAY_NOTHING: [(&str, &str); 4] = [
    ("empty", ""),
    ("comments only", "# the VIPs will come back\n# soon\n"),
    ("vips:", "vips:\n"),
    ("no vips key", "settings:\n  synRateLimit: { rate: 100 }\n"),
];

/// Acceptance 3, first half: files that say nothing are refused at start
/// (nothing loaded, nothing attached, no pins) and on reload (nothing
/// changes, the VIPs keep answering), with the way out in the error.
#[test]
fn files_that_say_nothing_are_refused_at_start_and_on_reload() {
    let mut lab = Lab::new("nothing");
    let pin = lab.pin_dir.display().to_string();
    let sock = lab.socket.display().to_string();
    for (what, text) in SAY_NOTHING {
        lab.write_raw_config(text);
        let cfg = lab.config.display().to_string();
        let (ok, err) = lab.run_rivorad(&daemon_args(&cfg, &pin, &sock));
        eprintln!("start on a file that is {what}:\n{err}");
        assert!(!ok, "{what}: start must fail");
        assert!(
            err.contains("vips") && err.contains("`vips: []`"),
            "{what}: {err}"
        );
        assert!(!lab.pin_dir.exists(), "{what}: no pins left");
        assert_eq!(
            lab.attached_programs(),
            (None, vec![]),
            "{what}: nothing attached"
        );
    }

    lab.write_config(&four_vips());
    lab.start(&[]);
    all_four_answer(&lab, 20000, 50, "started");
    let generation = lab.status().config_generation;
    for (i, (what, text)) in SAY_NOTHING.into_iter().enumerate() {
        let since = unix_now();
        lab.write_raw_config(text);
        let s = lab.wait_reload(generation, since);
        assert!(!s.last_reload.ok, "{what}: reload must be refused");
        let err = s.last_reload.error.clone().unwrap_or_default();
        assert!(err.contains("`vips: []`"), "{what}: {err}");
        assert_eq!(s.config_generation, generation, "{what}: nothing applied");
        assert_eq!(lab.vips().len(), 4, "{what}: every VIP still programmed");
        all_four_answer(&lab, 21000 + (i * 400) as u16, 50, what);
        // Back to the file in force: the failure is over, nothing changes.
        lab.write_config(&four_vips());
        let s = lab.wait_reload_ok();
        assert_eq!(
            s.config_generation, generation,
            "{what}: same text, same generation"
        );
    }
    // `vips: []` on purpose does remove every VIP.
    let since = unix_now();
    lab.write_raw_config("vips: []\n");
    let s = lab.wait_reload(generation, since);
    assert!(s.last_reload.ok, "{:?}", s.last_reload);
    assert_eq!(lab.vips().len(), 0);
}

/// Acceptance 3, second half: under steady UDP and new TCP connections, the
/// config file is rewritten in place 20 times the way shell `>` does it
/// (truncated, a pause, then written), alternating between two valid files:
/// not one datagram or connection more is lost than without rewrites, and
/// every rewrite is applied.
#[test]
fn truncate_then_rewrite_under_load_loses_nothing() {
    let mut lab = Lab::new("rewrite");
    let files = [[(1, 1), (2, 1), (3, 2)], [(1, 2), (2, 1), (3, 1)]].map(|w| {
        let vips = [
            vip_yaml("web4", VIP4, 80, "tcp", &backends_yaml(false, &w)),
            vip_yaml("dns4", VIP4, 53, "udp", &backends_yaml(false, &w)),
        ];
        format!("vips:\n{}", vips.concat())
    });
    lab.write_raw_config(&files[0]);
    lab.start(&[]);
    let tcp: SocketAddr = format!("{VIP4}:80").parse().unwrap();
    let udp: SocketAddr = format!("{VIP4}:53").parse().unwrap();
    let run = |rewrites: usize| {
        let churn =
            ConnectionChurn::start(&lab.topo.client, tcp, 20, Duration::from_secs(2)).unwrap();
        let seq = UdpSequence::start(&lab.topo.client, udp, 4, 200).unwrap();
        let start_generation = lab.status().config_generation;
        for i in 0..rewrites {
            let text = &files[(i + 1) % 2];
            let mut f = std::fs::File::create(&lab.config).unwrap(); // truncates, as `>` does
            std::thread::sleep(Duration::from_millis(30));
            f.write_all(text.as_bytes()).unwrap();
            drop(f);
            let every = Duration::from_millis(20);
            // The next rewrite only once this one is in force.
            rivora_lab::poll_until(
                "the rewrite applied",
                Duration::from_secs(10),
                every,
                || {
                    let s = lab.status();
                    if s.config_generation > start_generation + i as u64 && s.last_reload.ok {
                        Ok(())
                    } else {
                        Err(format!(
                            "generation {} {:?}",
                            s.config_generation, s.last_reload
                        ))
                    }
                },
            )
            .unwrap_or_else(|e| panic!("{e}\n{}", lab.log()));
        }
        if rewrites == 0 {
            std::thread::sleep(Duration::from_secs(6)); // the baseline's traffic window
        }
        let churn = churn.stop();
        let seq = seq.stop(Duration::from_secs(2));
        let generations = lab.status().config_generation - start_generation;
        (churn, seq, generations)
    };
    let (base_churn, base_seq, _) = run(0);
    eprintln!("baseline:\n{base_churn}\n{base_seq}");
    let (churn, seq, generations) = run(20);
    eprintln!("20 truncate-then-rewrites:\n{churn}\n{seq}");
    assert_eq!(generations, 20, "every rewrite applied once");
    assert_eq!(churn.failed, 0, "{churn}");
    assert!(churn.ok > 20, "{churn}");
    assert!(seq.sent > 500, "{seq}");
    assert_eq!(seq.wrong_source, 0, "{seq}");
    assert!(
        seq.lost <= base_seq.lost,
        "UDP lost {} across the rewrites, {} without",
        seq.lost,
        base_seq.lost
    );
    let log = lab.log();
    let rejected = log.matches("rejected").count();
    eprintln!("reloads rejected while the file was half-written: {rejected}");
}

/// `--check-config`: a bad file gets every error and exit 1; a good one is
/// compared with the running rivorad (added, removed, changed backends)
/// while nothing changes in the running one.
#[test]
fn check_config_validates_and_compares_without_touching_anything() {
    let mut lab = Lab::new("check");
    let w = [(1, 1), (2, 1), (3, 2)];
    lab.write_config(&[
        vip_yaml("web4", VIP4, 80, "tcp", &backends_yaml(false, &w)),
        vip_yaml("dns4", VIP4, 53, "udp", &backends_yaml(false, &w)),
    ]);
    lab.start(&[]);
    let before = lab.status();
    let sock = lab.socket.display().to_string();
    let candidate = lab.work.join("candidate.yaml");
    let check = |text: &str| {
        std::fs::write(&candidate, text).unwrap();
        let out = lab
            .topo
            .lb
            .within(|| {
                std::process::Command::new(env!("CARGO_BIN_EXE_rivorad"))
                    .args([
                        "--check-config",
                        &candidate.display().to_string(),
                        "--api-socket",
                        &sock,
                    ])
                    .output()
            })
            .unwrap()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, _, err) = check("vips:\n  - name: web4\n    address: 10.200.100.1\n    port: 70000\n");
    assert!(
        !ok && err.contains(":4:") && err.contains("vips[0].port"),
        "{err}"
    );
    let (ok, _, err) = check("");
    assert!(!ok && err.contains("`vips: []`"), "{err}");

    let text = format!(
        "vips:\n{}{}",
        vip_yaml(
            "web4",
            VIP4,
            80,
            "tcp",
            &backends_yaml(false, &[(1, 1), (2, 3)])
        ),
        vip_yaml("echo4", VIP4, 7, "tcp", &backends_yaml(false, &[(1, 1)]))
    );
    let (ok, out, err) = check(&text);
    eprintln!("{out}{err}");
    assert!(ok, "{err}");
    let b = |i| format!("{}:{BACKEND_PORT}", rivora_lab::topology::backend_v4(i));
    for line in [
        "valid (2 VIP(s), 3 backend(s))".to_string(),
        "+ echo4: added, 10.200.100.1:7/tcp nat (kernel) with 1 backend(s)".to_string(),
        format!(
            "~ web4: backend {} weight 1 -> 3; backend {} removed",
            b(2),
            b(3)
        ),
        "- dns4: removed (10.200.100.1:53/udp)".to_string(),
        "nothing was changed".to_string(),
    ] {
        assert!(out.contains(&line), "missing {line:?} in:\n{out}");
    }
    // The running file against itself: no change.
    let running = std::fs::read_to_string(&lab.config).unwrap();
    let (ok, out, _) = check(&running);
    assert!(ok && out.contains("no change to the VIPs"), "{out}");
    let after = lab.status();
    assert_eq!(after.config_generation, before.config_generation);
    assert_eq!(after.vip_count, 2);
    assert!(lab.tcp(VIP4, 80, 20000, 50).all_ok());
}

/// `--flow-table-size`: the tables are created at the asked size (shown by
/// the stats), traffic flows, and a restart asking for another size than
/// the pinned tables is refused with the size to use.
#[test]
fn flow_table_size_is_set_at_start_and_kept_across_restarts() {
    let mut lab = Lab::new("flowsz");
    lab.write_config(&[vip_yaml(
        "web4",
        VIP4,
        80,
        "tcp",
        &backends_yaml(false, &[(1, 1), (2, 1)]),
    )]);
    lab.start(&["--flow-table-size", "1048576"]);
    let pid = lab.rivorad.as_ref().unwrap().pid();
    let tables = lab.stats().tables;
    assert_eq!(tables.len(), 4, "{tables:?}");
    assert!(tables.iter().all(|t| t.capacity == 1 << 20), "{tables:?}");
    assert!(lab.tcp(VIP4, 80, 20000, 100).all_ok());
    // Kernel memory of the flow tables: the memlock of rivorad's map fds
    // pinned under the flow tables' names.
    let own = rivora_lab::memory::ProcessMemory::of(pid).unwrap();
    let maps = rivora_lab::memory::BpfMaps::of_process(pid, Some(&lab.pin_dir)).unwrap();
    let flow: Vec<_> = maps
        .pinned_as(&rivora_dataplane::compat::FLOW_TABLES)
        .collect();
    let memlock: u64 = flow.iter().map(|m| m.memlock).sum();
    eprintln!(
        "rivorad with 1,048,576-flow tables: VmHWM {} kB; the four flow tables hold {} MiB of \
         kernel memory, all {} maps {} MiB",
        own.vm_hwm_kib,
        memlock >> 20,
        maps.maps.len(),
        maps.memlock() >> 20
    );
    assert_eq!(
        flow.len(),
        4,
        "rivorad holds the four flow tables: {maps:?}"
    );
    assert!(
        flow.iter().all(|m| m.max_entries == 1 << 20),
        "created at the asked size: {flow:?}"
    );
    assert!(memlock > 0, "the flow tables' memory is visible in fdinfo");

    lab.kill(libc::SIGKILL); // leaves the pins, as a crash would
    let cfg = lab.config.display().to_string();
    let pin = lab.pin_dir.display().to_string();
    let sock = lab.socket.display().to_string();
    let (ok, err) = lab.run_rivorad(&daemon_args(&cfg, &pin, &sock));
    eprintln!("restart with the default size:\n{err}");
    assert!(!ok && err.contains("--flow-table-size 1048576"), "{err}");
    lab.start(&["--flow-table-size", "1048576"]);
    assert!(
        lab.log().contains("adopted the maps pinned"),
        "{}",
        lab.log()
    );
    assert!(lab.tcp(VIP4, 80, 21000, 50).all_ok());
    let (ok, err) = lab.run_rivorad(&["--flow-table-size", "100", "--check-config", &cfg]);
    assert!(
        !ok && err.contains("--flow-table-size"),
        "a size below the minimum: {err}"
    );
}
