//! Runs the real `rivoractl` binary against a real API server with fake data:
//! checks exit codes, table and JSON output, and the one-line error.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rivora_api::server::ApiFailure;
use rivora_api::*;

/// Fake daemon state. Stats grow by a fixed step per read, with read
/// timestamps 200 ms apart, so the rates the CLI computes are exact
/// whatever the real timing: 500 packets/s, 500 KiB/s, 50 new flows/s.
struct Fake {
    stats_fail: bool,
    backends: Mutex<Vec<BackendInfo>>,
    stats_reads: AtomicU64,
}

impl Fake {
    fn new(stats_fail: bool) -> Self {
        Fake {
            stats_fail,
            backends: Mutex::new(initial_backends()),
            stats_reads: AtomicU64::new(0),
        }
    }
}

fn initial_backends() -> Vec<BackendInfo> {
    vec![
        BackendInfo {
            backend_id: 1,
            address: "192.168.1.10".into(),
            port: 8080,
            state: "healthy".into(),
            vips: vec!["web".into()],
            drained: false,
            retiring: false,
            probe: Some(ProbeInfo {
                kind: "tcp".into(),
                target: "192.168.1.10:8080".into(),
                interval_ms: 1000,
                timeout_ms: 500,
                rise: 2,
                fall: 3,
                up: true,
                last_result: "ok".into(),
                last_latency_ms: 0.4,
                consecutive: 9,
                last_probe_unix: 1_700_000_000,
            }),
            last_change_unix: 0,
            counters: Some(BackendCounters {
                packets: 1_234_567,
                bytes: 3 << 30,
                new_flows: 4_321,
                last_packet_age_ms: Some(300),
                last_packet_unix_ms: Some(1_700_000_000_000),
            }),
        },
        BackendInfo {
            backend_id: 2,
            address: "2001:db8::10".into(),
            port: 80,
            state: "down".into(),
            vips: vec!["web".into()],
            drained: false,
            retiring: false,
            probe: Some(ProbeInfo {
                kind: "tcp".into(),
                target: "[2001:db8::10]:80".into(),
                interval_ms: 1000,
                timeout_ms: 500,
                rise: 2,
                fall: 3,
                up: false,
                last_result: "fail: connect: refused".into(),
                last_latency_ms: 0.2,
                consecutive: 5,
                last_probe_unix: 1_700_000_000,
            }),
            last_change_unix: 1_700_000_000,
            counters: Some(BackendCounters::default()),
        },
        BackendInfo {
            backend_id: 3,
            address: "192.168.1.11".into(),
            port: 8080,
            state: "healthy".into(),
            vips: vec!["web".into()],
            drained: false,
            retiring: false,
            probe: None,
            last_change_unix: 0,
            counters: None,
        },
    ]
}

fn sample_bgp() -> BgpStatus {
    BgpStatus {
        enabled: true,
        local_as: Some(65010),
        router_id: Some("192.0.2.2".into()),
        peers: vec![BgpPeerInfo {
            address: "192.0.2.1".into(),
            port: 179,
            remote_as: 65000,
            state: "Active".into(),
            uptime_secs: None,
            prefixes_sent: 0,
            last_error: Some(
                "TCP connection to 192.0.2.1:179 timed out after 5 s; TCP-MD5 is configured".into(),
            ),
        }],
        routes: vec![BgpRouteInfo {
            prefix: "203.0.113.10/32".into(),
            communities: vec!["65010:100".into()],
            vips: vec!["web".into()],
        }],
    }
}

impl ApiSource for Fake {
    fn bgp(&self) -> Result<BgpStatus, ApiFailure> {
        Ok(sample_bgp())
    }

    fn status(&self) -> Status {
        Status {
            version: "9.9.9".into(),
            abi_version: 1,
            interface: "eth0".into(),
            ifindex: 4,
            xdp_mode_requested: "native".into(),
            xdp_mode: "native".into(),
            pin_dir: "/sys/fs/bpf/rivora".into(),
            config_path: "/etc/rivora/rivora.yaml".into(),
            config_generation: 1,
            last_reload: ReloadInfo {
                at_unix: 0,
                ok: true,
                error: None,
                changes: None,
            },
            vip_count: 1,
            backend_count: 2,
            started_at_unix: 1_700_000_000,
            maglev_table_size: 0,
            maglev_slots_used: 0,
            persist_datapath: false,
            kubernetes: None,
            start: String::new(),
            programs: vec![],
        }
    }
    fn vips(&self) -> Vec<VipInfo> {
        vec![VipInfo {
            name: "web".into(),
            address: "10.0.0.10".into(),
            port: 80,
            port_last: 80,
            protocol: "tcp".into(),
            mode: "ipip".into(),
            service_id: 1,
            maglev_offset: 0,
            maglev_size: 251,
            worst_imbalance_pct: 1.0,
            reject_weight: 0,
            session_affinity: "none".into(),
            nat_forwarding: "kernel".into(),
            syn_rate_limit: "none".into(),
            origin: None,
            backends: vec![VipBackend {
                address: "192.168.1.10".into(),
                port: 8080,
                weight: 1,
                backend_id: 1,
                state: "healthy".into(),
                target: None,
                node: None,
                terminating: false,
                snat: false,
            }],
        }]
    }
    fn backends(&self) -> Vec<BackendInfo> {
        self.backends.lock().unwrap().clone()
    }
    fn stats(&self) -> Result<Stats, String> {
        if self.stats_fail {
            return Err("stats map unreadable".into());
        }
        let n = self.stats_reads.fetch_add(1, Ordering::SeqCst);
        // Backend 1 takes 300 packets/s and 30 new flows/s; backend 3 has
        // been quiet for 15 s (and stays so); backend 2 never had a packet.
        let state = |id: u32| self.backends.lock().unwrap()[id as usize - 1].state.clone();
        let backends = vec![
            BackendStats {
                backend_id: 1,
                address: "192.168.1.10".into(),
                port: 8080,
                state: state(1),
                counters: BackendCounters {
                    packets: 600 + 60 * n,
                    bytes: 61_440 * n,
                    new_flows: 6 * n,
                    last_packet_age_ms: Some(3),
                    last_packet_unix_ms: Some(1_700_000_000_000 + 200 * n),
                },
            },
            BackendStats {
                backend_id: 2,
                address: "2001:db8::10".into(),
                port: 80,
                state: state(2),
                counters: BackendCounters::default(),
            },
            BackendStats {
                backend_id: 3,
                address: "192.168.1.11".into(),
                port: 8080,
                state: state(3),
                counters: BackendCounters {
                    packets: 400,
                    bytes: 40_000,
                    new_flows: 4,
                    last_packet_age_ms: Some(15_000 + 200 * n),
                    last_packet_unix_ms: Some(1_699_999_985_000),
                },
            },
        ];
        Ok(Stats {
            vips: vec![VipStats {
                name: "web".into(),
                service_id: 1,
                packets: 1_000 + 100 * n,
                bytes: 102_400 * n,
                new_flows: 10 * n,
                drops: 0,
                reply_packets: 0,
                reply_bytes: 0,
            }],
            drops: vec![DropCount {
                reason: "flow_guarded".into(),
                packets: 7 * n,
            }],
            at_unix_ms: 1_700_000_000_000 + 200 * n,
            tables: vec![TableUsage {
                name: "connection_affinity_map".into(),
                entries: 95,
                capacity: 100,
            }],
            backends,
            flow_guard: Some(FlowGuard {
                rate_per_s: 100_000,
                per_cpu_limit: 5_000,
                window_ms: 100,
            }),
            flow_filter: Some(rivora_api::FlowFilter {
                bits: 4_194_304,
                bits_set: 41_943,
                exact: true,
                rebuilds: 2,
            }),
            snat: None,
        })
    }
    fn set_drain(&self, backend: &str, drain: bool) -> Result<Vec<BackendInfo>, ApiFailure> {
        // The daemon's own selector rules.
        let mut all = self.backends.lock().unwrap();
        let refs: Vec<rivora_api::selector::BackendRef> = all
            .iter()
            .map(|b| rivora_api::selector::BackendRef {
                id: b.backend_id,
                addr: b.address.parse().unwrap(),
                port: b.port,
            })
            .collect();
        let picked = rivora_api::selector::resolve(backend, &refs)?;
        let mut hit = Vec::new();
        for b in all.iter_mut() {
            if picked.iter().any(|p| p.id == b.backend_id) {
                b.drained = drain;
                if b.state != "down" {
                    b.state = if drain { "draining" } else { "healthy" }.into();
                }
                hit.push(b.clone());
            }
        }
        Ok(hit)
    }
}

/// A fake rivorad serving on its own thread and runtime.
struct Server {
    dir: PathBuf,
    socket: PathBuf,
    stop: std::sync::mpsc::Sender<()>,
    thread: JoinHandle<std::io::Result<()>>,
}

impl Server {
    fn start(name: &str, fake: Fake) -> Server {
        let dir = std::env::temp_dir().join(format!("rivoractl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let socket = dir.join("rivorad.sock");
        let sock = bind(&socket).unwrap();
        let (stop, stop_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(sock.serve(Arc::new(fake), async move {
                let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
            }))
        });
        Server {
            dir,
            socket,
            stop,
            thread,
        }
    }

    fn stop(self) -> PathBuf {
        self.stop.send(()).unwrap();
        self.thread.join().unwrap().unwrap();
        assert!(!self.socket.exists());
        let _ = std::fs::remove_dir_all(&self.dir);
        self.socket
    }
}

fn rivoractl(socket: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rivoractl"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .env_remove("RIVORA_SOCKET")
        .output()
        .unwrap()
}

fn stdout(out: Output) -> String {
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The trimmed cells of the table line whose first cell is `first`.
fn row(text: &str, first: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .find(|cells| cells[0] == first)
        .unwrap_or_else(|| panic!("no row starting with {first:?} in\n{text}"))
}

#[test]
fn cli_against_live_server() {
    let server = Server::start("read", Fake::new(true));
    let socket = server.socket.clone();

    let text = stdout(rivoractl(&socket, &["status"]));
    assert!(text.contains("| Version "), "{text}");
    assert!(text.contains("| 9.9.9 "), "{text}");
    assert!(text.contains("| eth0 (ifindex 4) "), "{text}");

    let out = rivoractl(&socket, &["vips", "-o", "json"]);
    let vips: Vec<VipInfo> = serde_json::from_slice(stdout(out).as_bytes()).unwrap();
    assert_eq!(vips, Fake::new(true).vips());

    let text = stdout(rivoractl(&socket, &["-o", "table", "backends"]));
    assert_eq!(
        row(&text, "1"),
        [
            "1",
            "192.168.1.10:8080",
            "healthy",
            "1234567",
            "3.0 GiB",
            "4321",
            "0.3s ago",
            "tcp 192.168.1.10:8080",
            "ok 0.4 ms",
            "-",
            "web"
        ]
    );
    let v6 = row(&text, "2");
    assert_eq!(
        v6[1..9],
        [
            "[2001:db8::10]:80",
            "down",
            "0",
            "0 B",
            "0",
            "never",
            "tcp [2001:db8::10]:80",
            "fail: connect: refused"
        ]
    );
    assert!(v6[9].ends_with(" ago"), "{v6:?}");
    // An older daemon: no counters, dashes.
    assert_eq!(row(&text, "3")[3..7], ["-", "-", "-", "-"]);
    // The counters are in the JSON too.
    let out = stdout(rivoractl(&socket, &["backends", "-o", "json"]));
    let bs: Vec<BackendInfo> = serde_json::from_str(&out).unwrap();
    assert_eq!(bs, initial_backends());

    let text = stdout(rivoractl(&socket, &["bgp"]));
    assert!(
        text.starts_with("Local AS 65010, router ID 192.0.2.2\n"),
        "{text}"
    );
    let peer = row(&text, "192.0.2.1:179");
    assert_eq!(peer[1..5], ["65000", "Active", "-", "0"], "{text}");
    assert!(peer[5].contains("TCP-MD5"), "{text}");
    assert_eq!(
        row(&text, "203.0.113.10/32"),
        ["203.0.113.10/32", "65010:100", "web"]
    );
    let out = rivoractl(&socket, &["bgp", "-o", "json"]);
    let b: BgpStatus = serde_json::from_slice(stdout(out).as_bytes()).unwrap();
    assert_eq!(b, sample_bgp());
    // This fake has no L2 speaker: the API's 501 becomes one line.
    let out = rivoractl(&socket, &["speaker"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "rivoractl: rivorad returned HTTP 501: this rivorad has no L2 speaker\n"
    );

    // Server-side failure: exit 1, one line on stderr, nothing on stdout.
    let out = rivoractl(&socket, &["stats"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "rivoractl: rivorad returned HTTP 500: stats map unreadable\n"
    );
    // Same for watch: it fails on the first read, before printing.
    let out = rivoractl(&socket, &["watch", "--count", "1", "--interval", "0.05"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());

    let socket = server.stop();

    // Daemon gone: exit 1 with the "not running" hint.
    let out = rivoractl(&socket, &["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!(
            "rivoractl: rivorad is not running? no socket at {}\n",
            socket.display()
        )
    );
}

/// A rivorad that holds its socket's lock but does not answer yet (it binds the socket once
/// its datapath is programmed): rivoractl says it is starting, naming its PID, and `--wait`
/// waits for the answer instead of failing.
#[test]
fn a_starting_rivorad_is_named_and_waited_for() {
    use std::os::fd::AsRawFd;
    let dir = std::env::temp_dir().join(format!("rivoractl-starting-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("rivorad.sock");
    // This test plays the starting rivorad: it holds the lock, as rivorad does first.
    let lock = std::fs::File::create(instance::socket_lock_path(&socket)).unwrap();
    // SAFETY: flock on an fd we own.
    assert_eq!(
        unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let out = rivoractl(&socket, &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!("rivorad PID {} ", std::process::id()))
            && err.contains("is starting or stopping")
            && err.contains("--wait"),
        "{err}"
    );
    // A script that restarted rivorad: `--wait` outlasts the start.
    let mut waiting = Command::new(env!("CARGO_BIN_EXE_rivoractl"))
        .arg("--socket")
        .arg(&socket)
        .args(["--wait", "20", "status", "-o", "json"])
        .env_remove("RIVORA_SOCKET")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "--wait gives up while the lock is held and nothing answers"
    );
    let sock = bind(&socket).unwrap();
    let (stop, stop_rx) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(sock.serve(Arc::new(Fake::new(true)), async move {
            let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
        }))
    });
    let status = wait_exit(&mut waiting, "rivoractl --wait");
    let mut stdout = String::new();
    std::io::Read::read_to_string(waiting.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    assert!(status.success(), "{status:?}: {stdout}");
    let s: Status = serde_json::from_str(&stdout).unwrap();
    assert_eq!(s.version, "9.9.9");
    stop.send(()).unwrap();
    server.join().unwrap().unwrap();
    drop(lock);
    // Nothing holds the lock any more and nothing answers: not running, at once.
    let out = rivoractl(&socket, &["--wait", "0", "status"]);
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("rivorad is not running?")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn drain_and_undrain() {
    let server = Server::start("drain", Fake::new(false));
    let socket = server.socket.clone();

    let text = stdout(rivoractl(&socket, &["drain", "192.168.1.10:8080"]));
    assert!(
        text.starts_with(
            "Drained 1 backend: established flows continue, no new flows are sent to it.\n"
        ),
        "{text}"
    );
    assert_eq!(row(&text, "1")[2], "draining (drained)");

    // The drain shows in `backends`; a down backend stays down when drained,
    // selected here by its (normalized) IPv6 address.
    let text = stdout(rivoractl(&socket, &["drain", "2001:DB8::10"]));
    assert_eq!(row(&text, "2")[2], "down (drained)");
    let text = stdout(rivoractl(&socket, &["backends"]));
    assert_eq!(row(&text, "1")[2], "draining (drained)");
    assert_eq!(row(&text, "2")[2], "down (drained)");

    // By id, JSON out.
    let out = stdout(rivoractl(&socket, &["undrain", "1", "-o", "json"]));
    let hit: Vec<BackendInfo> = serde_json::from_str(&out).unwrap();
    assert_eq!(hit.len(), 1);
    assert_eq!((hit[0].backend_id, hit[0].drained), (1, false));
    assert_eq!(hit[0].state, "healthy");
    let text = stdout(rivoractl(&socket, &["undrain", "[2001:db8::10]:80"]));
    assert!(text.starts_with("Undrained 1 backend"), "{text}");
    assert_eq!(row(&text, "2")[2], "down");

    // Unknown backend: one line naming the selector and the accepted
    // forms (not an HTTP status), exit 1.
    let out = rivoractl(&socket, &["drain", "10.9.9.9"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!(
            "rivoractl: no backend matches \"10.9.9.9\"; accepted forms: {}\n",
            rivora_api::selector::FORMS
        )
    );
    // Unbracketed IPv6 and port: 2001:db8::10:80 is also an IPv6 address,
    // but no backend has it and backend 2 is 2001:db8::10 port 80.
    let text = stdout(rivoractl(&socket, &["drain", "2001:db8::10:80"]));
    assert!(text.starts_with("Drained 1 backend"), "{text}");
    assert_eq!(row(&text, "2")[2], "down (drained)");
    // A port no backend has: the error says how to write it.
    let out = rivoractl(&socket, &["drain", "2001:db8::10:81"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(
            "rivoractl: no backend matches \"2001:db8::10:81\" (as the IPv6 address \
             2001:db8::10:81, nor as 2001:db8::10 port 81: write an IPv6 address with a \
             port as [2001:db8::10]:81); accepted forms: "
        ),
        "{err}"
    );
    // Not a selector at all: a usage error before any call.
    let out = rivoractl(&socket, &["drain", "web"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(r#""web" is not ADDR:PORT, [IPV6]:PORT, ADDR or a numeric backend id"#),
        "{err}"
    );

    server.stop();
}

#[test]
fn stats_rates_and_watch() {
    let server = Server::start("stats", Fake::new(false));
    let socket = server.socket.clone();

    let text = stdout(rivoractl(&socket, &["stats", "--interval", "0.2"]));
    assert!(
        text.starts_with("Totals since the programs were loaded; rates over the last 0.2s.\n"),
        "{text}"
    );
    let web = row(&text, "web");
    assert_eq!(web[3], "500/s", "{text}");
    assert_eq!(web[5], "500.0 KiB/s", "{text}");
    assert_eq!(web[7], "50/s", "{text}");
    assert_eq!(
        row(&text, "connection_affinity_map"),
        ["connection_affinity_map", "95", "100", "95.0% !"]
    );
    assert!(
        text.contains(
            "\nNew-flow guard: 100000 state entries/s node-wide (5000 per CPU per 100 ms); 7 packets guarded (forwarded without state)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "Flow filter: 41943 of 4194304 bits set (1.00%), exact: new flows whose bit is clear skip the affinity lookup; 2 rebuilds\n"
        ),
        "{text}"
    );
    // Per backend: totals of the later sample, rates over the interval.
    assert!(
        text.contains("\nBackends (client->backend traffic, every VIP that lists them):\n"),
        "{text}"
    );
    assert_eq!(
        row(&text, "1"),
        [
            "1",
            "192.168.1.10:8080",
            "healthy",
            "660",
            "300/s",
            "60.0 KiB",
            "300.0 KiB/s",
            "6",
            "30/s",
            "0.0s ago"
        ]
    );
    assert_eq!(
        row(&text, "2")[3..],
        ["0", "0/s", "0 B", "0 B/s", "0", "0/s", "never"]
    );
    assert_eq!(row(&text, "3")[4], "0/s");
    assert_eq!(row(&text, "3")[9], "15s ago");

    // Totals only: no wait, no rates.
    let out = stdout(rivoractl(
        &socket,
        &["stats", "--interval", "0", "-o", "json"],
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["interval_secs"], serde_json::Value::Null);
    assert_eq!(v["rates"], serde_json::json!([]));
    assert_eq!(v["vips"][0]["name"], "web");
    assert_eq!(v["tables"][0]["entries"], 95);

    let out = stdout(rivoractl(
        &socket,
        &["stats", "--interval", "0.2", "-o", "json"],
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["interval_secs"], 0.2);
    assert_eq!(v["rates"][0]["packets_per_sec"], 500.0);
    assert_eq!(v["backends"][0]["backend_id"], 1);
    // The fake's read number, from the sample's own timestamp.
    let n = (v["at_unix_ms"].as_u64().unwrap() - 1_700_000_000_000) / 200;
    assert_eq!(v["backends"][0]["packets"], 600 + 60 * n);
    assert_eq!(v["backends"][2]["last_packet_age_ms"], 15_000 + 200 * n);
    assert_eq!(v["backend_rates"][0]["packets_per_sec"], 300.0);
    assert_eq!(v["backend_rates"][0]["new_flows_per_sec"], 30.0);
    assert_eq!(v["backend_rates"][2]["packets_per_sec"], 0.0);

    // watch -o json: exactly one JSON object per line per refresh.
    let out = stdout(rivoractl(
        &socket,
        &["watch", "--count", "2", "--interval", "0.1", "-o", "json"],
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["stats"]["interval_secs"], 0.2);
        assert_eq!(v["stats"]["rates"][0]["packets_per_sec"], 500.0);
        assert_eq!(v["stats"]["rates"][0]["new_flows_per_sec"], 50.0);
        assert_eq!(v["stats"]["vips"][0]["name"], "web");
        assert_eq!(v["backends"].as_array().unwrap().len(), 3);
        assert_eq!(v["stats"]["backend_rates"][0]["packets_per_sec"], 300.0);
    }

    // Table watch into a pipe: no screen clearing, a separator between views.
    let text = stdout(rivoractl(
        &socket,
        &["watch", "--count", "2", "--interval", "0.1"],
    ));
    assert!(!text.contains('\x1b'), "{text:?}");
    assert_eq!(
        text.matches("rates over the last 0.2s (q or Ctrl-C to stop)")
            .count(),
        2
    );
    assert_eq!(text.lines().filter(|l| *l == "=".repeat(72)).count(), 1);
    assert_eq!(row(&text, "web")[1], "500/s");
    assert_eq!(row(&text, "1")[2], "healthy");
    assert_eq!(row(&text, "1")[3], "300/s");
    assert_eq!(row(&text, "1")[8], "-", "not draining");

    // Drains as watch shows them: backend 1 still gets packets, backend 3
    // has been quiet for 15 s and more: its drain is over.
    stdout(rivoractl(&socket, &["drain", "1"]));
    stdout(rivoractl(&socket, &["drain", "3"]));
    let text = stdout(rivoractl(
        &socket,
        &["watch", "--count", "1", "--interval", "0.1"],
    ));
    let one = row(&text, "1");
    assert_eq!(
        (one[2].as_str(), one[8].as_str()),
        ("draining (drained)", "active"),
        "{text}"
    );
    let three = row(&text, "3");
    assert_eq!(three[2], "draining (drained)", "{text}");
    assert_eq!(three[3], "0/s", "{text}");
    let quiet: u64 = three[8]
        .strip_prefix("quiet for ")
        .and_then(|q| q.strip_suffix('s'))
        .and_then(|q| q.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(quiet >= 15, "{text}");
    assert_eq!(row(&text, "2")[8], "-", "down, not draining: {text}");

    server.stop();
}

/// Waits (bounded) for `child` to exit; kills it and fails with `what` if
/// it does not.
fn wait_exit(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rivoractl still running 10 s after {what}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn watch_quits_on_q_from_a_pipe_and_from_a_terminal() {
    use std::io::{Read, Write};
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::process::Stdio;

    let server = Server::start("watchq", Fake::new(false));
    let socket = server.socket.clone();
    let watch = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rivoractl"));
        c.arg("--socket")
            .arg(&socket)
            .args(["watch", "--interval", "0.1"])
            .env_remove("RIVORA_SOCKET");
        c
    };

    // stdin a pipe: "q" quits a watch that has no --count.
    let mut child = watch()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.as_mut().unwrap().write_all(b"q\n").unwrap();
    let status = wait_exit(&mut child, "q on a pipe");
    assert!(status.success(), "{status:?}");

    // stdin and stdout a terminal (a pty): q without Enter quits, and the
    // terminal's canonical/echo mode is back afterwards.
    let (mut master, mut slave) = (0, 0);
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    let master = unsafe { OwnedFd::from_raw_fd(master) };
    let slave = unsafe { OwnedFd::from_raw_fd(slave) };
    let lflag = |fd: &OwnedFd| {
        use std::os::fd::AsRawFd;
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::tcgetattr(fd.as_raw_fd(), &mut t) }, 0);
        t.c_lflag
    };
    assert_ne!(lflag(&slave) & libc::ICANON, 0, "a fresh pty is canonical");
    let mut child = watch()
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Collect what the terminal shows until the first view is drawn.
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let mut reader = std::fs::File::from(master.try_clone().unwrap());
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    let mut screen = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !String::from_utf8_lossy(&screen).contains("(q or Ctrl-C to stop)") {
        match rx.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(b) => screen.extend(b),
            Err(_) if std::time::Instant::now() > deadline => {
                let _ = child.kill();
                panic!(
                    "no view on the pty; saw {:?}",
                    String::from_utf8_lossy(&screen)
                );
            }
            Err(_) => {}
        }
    }
    assert!(
        String::from_utf8_lossy(&screen).contains("\x1b[2J"),
        "redraws"
    );
    assert_eq!(
        lflag(&slave) & (libc::ICANON | libc::ECHO),
        0,
        "key mode while watching"
    );
    std::fs::File::from(master.try_clone().unwrap())
        .write_all(b"q")
        .unwrap();
    let status = wait_exit(&mut child, "q on a terminal");
    assert!(status.success(), "{status:?}");
    assert_eq!(
        lflag(&slave) & (libc::ICANON | libc::ECHO),
        libc::ICANON | libc::ECHO,
        "terminal mode restored"
    );

    server.stop();
}
