//! Runs the real `rivoractl` binary against a real API server with fake data:
//! checks exit codes, table and JSON output, and the one-line error.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use rivora_api::*;

struct Fake;

impl ApiSource for Fake {
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
            backend_count: 1,
            started_at_unix: 1_700_000_000,
            persist_datapath: false,
            start: String::new(),
            programs: vec![],
        }
    }
    fn vips(&self) -> Vec<VipInfo> {
        vec![VipInfo {
            name: "web".into(),
            address: "10.0.0.10".into(),
            port: 80,
            protocol: "tcp".into(),
            mode: "ipip".into(),
            service_id: 1,
            maglev_offset: 0,
            maglev_size: 251,
            worst_imbalance_pct: 1.0,
            backends: vec![VipBackend {
                address: "192.168.1.10".into(),
                port: 8080,
                weight: 1,
                backend_id: 1,
                state: "healthy".into(),
            }],
        }]
    }
    fn backends(&self) -> Vec<BackendInfo> {
        vec![BackendInfo {
            backend_id: 1,
            address: "192.168.1.10".into(),
            port: 8080,
            state: "healthy".into(),
            vips: vec!["web".into()],
        }]
    }
    fn stats(&self) -> Result<Stats, String> {
        Err("stats map unreadable".into())
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

#[test]
fn cli_against_live_server() {
    let dir: PathBuf = std::env::temp_dir().join(format!("rivoractl-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("rivorad.sock");

    let sock = bind(&socket).unwrap();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(sock.serve(Arc::new(Fake), async move {
            let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
        }))
    });

    let out = rivoractl(&socket, &["status"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("| Version "), "{text}");
    assert!(text.contains("| 9.9.9 "), "{text}");
    assert!(text.contains("| eth0 (ifindex 4) "), "{text}");

    let out = rivoractl(&socket, &["vips", "-o", "json"]);
    assert!(out.status.success(), "{out:?}");
    let vips: Vec<VipInfo> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(vips, Fake.vips());

    let out = rivoractl(&socket, &["-o", "table", "backends"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("| 192.168.1.10:8080 | healthy | web "),
        "{text}"
    );

    // Server-side failure: exit 1, one line on stderr, nothing on stdout.
    let out = rivoractl(&socket, &["stats"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "rivoractl: rivorad returned HTTP 500: stats map unreadable\n"
    );

    stop_tx.send(()).unwrap();
    server.join().unwrap().unwrap();
    assert!(!socket.exists());

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
    let _ = std::fs::remove_dir_all(&dir);
}
