//! End-to-end tests: a real server on a temp-dir Unix socket, driven by the
//! real client (and by raw HTTP where the client cannot express the case).

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener as StdUnixListener, UnixStream as StdUnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rivora_api::*;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct FakeSource {
    stats_fail: bool,
}

fn sample_status() -> Status {
    Status {
        version: "0.1.0".into(),
        abi_version: 3,
        interface: "eth0".into(),
        ifindex: 2,
        xdp_mode_requested: "auto".into(),
        xdp_mode: "generic".into(),
        pin_dir: "/sys/fs/bpf/rivora".into(),
        config_path: "/etc/rivora/rivora.yaml".into(),
        config_generation: 7,
        last_reload: ReloadInfo {
            at_unix: 1_700_000_100,
            ok: false,
            error: Some("vip web: port 0 is invalid".into()),
            changes: None,
        },
        vip_count: 2,
        backend_count: 3,
        started_at_unix: 1_700_000_000,
        persist_datapath: false,
        start: String::new(),
        programs: vec![
            ProgramInfo {
                name: "rivora_xdp".into(),
                attach: "xdp generic on eth0".into(),
                program_id: 41,
                link_id: Some(9),
                link_pinned: false,
                loaded_at_unix: 0,
            },
            ProgramInfo {
                name: "rivora_tc_egress".into(),
                attach: "tcx egress on eth0".into(),
                program_id: 42,
                link_id: None,
                link_pinned: false,
                loaded_at_unix: 0,
            },
        ],
    }
}

fn sample_vips() -> Vec<VipInfo> {
    vec![
        VipInfo {
            name: "web".into(),
            address: "10.0.0.10".into(),
            port: 80,
            protocol: "tcp".into(),
            mode: "ipip".into(),
            service_id: 1,
            maglev_offset: 0,
            maglev_size: 65537,
            worst_imbalance_pct: 0.37,
            backends: vec![VipBackend {
                address: "192.168.1.10".into(),
                port: 8080,
                weight: 100,
                backend_id: 1,
                state: "healthy".into(),
            }],
        },
        VipInfo {
            name: "dns6".into(),
            address: "2001:db8::53".into(),
            port: 53,
            protocol: "udp".into(),
            mode: "dsr".into(),
            service_id: 2,
            maglev_offset: 65537,
            maglev_size: 251,
            worst_imbalance_pct: 12.5,
            backends: vec![],
        },
    ]
}

fn sample_backends() -> Vec<BackendInfo> {
    vec![BackendInfo {
        backend_id: 1,
        address: "192.168.1.10".into(),
        port: 8080,
        state: "draining".into(),
        vips: vec!["web".into(), "api".into()],
    }]
}

fn sample_stats() -> Stats {
    Stats {
        vips: vec![VipStats {
            name: "web".into(),
            service_id: 1,
            packets: u64::MAX,
            bytes: 1_234_567_890,
            new_flows: 42,
            drops: 1,
            reply_packets: 10,
            reply_bytes: 1000,
        }],
        drops: vec![DropCount {
            reason: "no_backend".into(),
            packets: 5,
        }],
    }
}

impl ApiSource for FakeSource {
    fn status(&self) -> Status {
        sample_status()
    }
    fn vips(&self) -> Vec<VipInfo> {
        sample_vips()
    }
    fn backends(&self) -> Vec<BackendInfo> {
        sample_backends()
    }
    fn stats(&self) -> Result<Stats, String> {
        if self.stats_fail {
            Err("reading stats map failed: EPERM".into())
        } else {
            Ok(sample_stats())
        }
    }
}

/// A unique scratch directory (no tempfile dependency), removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "rivora-api-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Running {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn stop(mut self) -> std::io::Result<()> {
        self.stop.take().unwrap().send(()).unwrap();
        self.task.await.unwrap()
    }
}

fn start(path: &Path, stats_fail: bool) -> Running {
    let sock = bind(path).expect("bind");
    let (tx, rx) = oneshot::channel::<()>();
    let source: Arc<dyn ApiSource> = Arc::new(FakeSource { stats_fail });
    let task = tokio::spawn(sock.serve(source, async {
        let _ = rx.await;
    }));
    Running {
        stop: Some(tx),
        task,
    }
}

/// Raw request for cases the typed client cannot express.
fn raw_request(path: &Path, request_line: &str) -> (u16, String) {
    let mut s = StdUnixStream::connect(path).unwrap();
    write!(
        s,
        "{request_line} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status: u16 = out.split(' ').nth(1).unwrap().parse().unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_round_trips() {
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    let server = start(&path, false);
    let client = Client::new(&path);

    assert_eq!(client.status().await.unwrap(), sample_status());
    assert_eq!(client.vips().await.unwrap(), sample_vips());
    assert_eq!(client.backends().await.unwrap(), sample_backends());
    assert_eq!(client.stats().await.unwrap(), sample_stats());

    server.stop().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn works_on_current_thread_runtime() {
    // rivoractl uses a current_thread runtime; server and client share it here.
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    let server = start(&path, false);
    assert_eq!(Client::new(&path).status().await.unwrap(), sample_status());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn unknown_route_is_404_json() {
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    let server = start(&path, false);

    let p = path.clone();
    let (status, body) = tokio::task::spawn_blocking(move || raw_request(&p, "GET /v1/nope"))
        .await
        .unwrap();
    assert_eq!(status, 404);
    let err: ApiError = serde_json::from_str(&body).unwrap();
    assert!(
        err.error.contains("no such endpoint: GET /v1/nope"),
        "{err:?}"
    );

    let p = path.clone();
    let (status, body) = tokio::task::spawn_blocking(move || raw_request(&p, "POST /v1/status"))
        .await
        .unwrap();
    assert_eq!(status, 405);
    let err: ApiError = serde_json::from_str(&body).unwrap();
    assert!(err.error.contains("read-only"), "{err:?}");

    server.stop().await.unwrap();
}

#[tokio::test]
async fn source_error_is_500_with_message() {
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    let server = start(&path, true);

    let err = Client::new(&path).stats().await.unwrap_err();
    match &err {
        ClientError::Api { status, message } => {
            assert_eq!(*status, 500);
            assert_eq!(message, "reading stats map failed: EPERM");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "rivorad returned HTTP 500: reading stats map failed: EPERM"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn socket_is_0600_and_new_dir_is_0700() {
    let dir = TempDir::new();
    let sub = dir.0.join("run").join("rivora");
    let path = sub.join("rivorad.sock");
    let server = start(&path, false);

    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    let dmeta = std::fs::metadata(&sub).unwrap();
    assert_eq!(dmeta.permissions().mode() & 0o7777, 0o700);

    server.stop().await.unwrap();
}

#[tokio::test]
async fn socket_removed_on_clean_shutdown() {
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    let server = start(&path, false);
    assert!(path.exists());
    server.stop().await.unwrap();
    assert!(!path.exists(), "socket file left behind");
}

#[tokio::test]
async fn serve_fn_end_to_end() {
    // The one-call `serve()` entry point: bind + serve + cleanup.
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    let (tx, rx) = oneshot::channel::<()>();
    let p = path.clone();
    let task = tokio::spawn(async move {
        serve(&p, Arc::new(FakeSource { stats_fail: false }), async {
            let _ = rx.await;
        })
        .await
    });
    let client = Client::new(&path);
    let mut tries = 0;
    let vips = loop {
        match client.vips().await {
            Ok(v) => break v,
            Err(ClientError::NotRunning { .. }) if tries < 200 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(vips, sample_vips());
    tx.send(()).unwrap();
    task.await.unwrap().unwrap();
    assert!(!path.exists());
}

#[tokio::test]
async fn stale_socket_is_replaced() {
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    // A socket file whose listener is gone, as left by a crashed daemon.
    drop(StdUnixListener::bind(&path).unwrap());
    assert!(
        std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_socket()
    );
    assert!(matches!(
        Client::new(&path).status().await,
        Err(ClientError::Stale { .. })
    ));

    let server = start(&path, false);
    assert_eq!(Client::new(&path).status().await.unwrap(), sample_status());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn live_socket_is_not_replaced() {
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    let server = start(&path, false);
    let before = std::fs::symlink_metadata(&path).unwrap();

    let err = serve(&path, Arc::new(FakeSource { stats_fail: false }), async {})
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert!(err.to_string().contains("refusing to replace it"), "{err}");

    // The first server's socket is untouched and still answers.
    let after = std::fs::symlink_metadata(&path).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(before.ino(), after.ino());
    assert_eq!(Client::new(&path).status().await.unwrap(), sample_status());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn non_socket_file_is_refused() {
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    std::fs::write(&path, b"precious").unwrap();
    let err = bind(&path).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
    assert!(err.to_string().contains("is not a socket"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
}

#[tokio::test]
async fn dropping_unserved_socket_cleans_up_only_own_file() {
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    let sock = bind(&path).unwrap();
    assert_eq!(sock.path(), path);
    // Someone replaces the file: our drop must not delete theirs.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, b"theirs").unwrap();
    drop(sock);
    assert_eq!(std::fs::read(&path).unwrap(), b"theirs");

    std::fs::remove_file(&path).unwrap();
    let sock = bind(&path).unwrap();
    drop(sock);
    assert!(!path.exists());
}

#[tokio::test]
async fn missing_socket_error_is_clear() {
    let dir = TempDir::new();
    let path = dir.0.join("absent.sock");
    let err = Client::new(&path).status().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("rivorad is not running? no socket at {}", path.display())
    );
}

#[tokio::test]
async fn unresponsive_daemon_times_out() {
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    // Listens (so connect succeeds) but never answers.
    let _listener = StdUnixListener::bind(&path).unwrap();
    let err = Client::new(&path)
        .with_timeout(Duration::from_millis(200))
        .status()
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
    assert!(
        err.to_string().contains("did not answer within 0.2s"),
        "{err}"
    );
}
