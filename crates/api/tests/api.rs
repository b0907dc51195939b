//! End-to-end tests: a real server on a temp-dir Unix socket, driven by the
//! real client (and by raw HTTP where the client cannot express the case).

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener as StdUnixListener, UnixStream as StdUnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rivora_api::server::ApiFailure;
use rivora_api::*;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct FakeSource {
    stats_fail: bool,
    /// Every `set_drain` call the server made: (selector, drain).
    drain_calls: Mutex<Vec<(String, bool)>>,
}

impl FakeSource {
    fn new(stats_fail: bool) -> Self {
        FakeSource {
            stats_fail,
            drain_calls: Mutex::new(Vec::new()),
        }
    }

    fn drain_calls(&self) -> Vec<(String, bool)> {
        self.drain_calls.lock().unwrap().clone()
    }
}

/// A source that predates draining: it relies on the default `set_drain`.
struct ReadOnlySource;

impl ApiSource for ReadOnlySource {
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
        Ok(sample_stats())
    }
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
        maglev_table_size: 0,
        maglev_slots_used: 0,
        persist_datapath: false,
        kubernetes: None,
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
            port_last: 80,
            protocol: "tcp".into(),
            mode: "ipip".into(),
            service_id: 1,
            maglev_offset: 0,
            maglev_size: 65537,
            worst_imbalance_pct: 0.37,
            reject_weight: 0,
            session_affinity: "none".into(),
            nat_forwarding: "kernel".into(),
            syn_rate_limit: "none".into(),
            origin: None,
            backends: vec![VipBackend {
                address: "192.168.1.10".into(),
                port: 8080,
                weight: 100,
                backend_id: 1,
                state: "healthy".into(),
                target: None,
                node: None,
                terminating: false,
                snat: false,
            }],
        },
        VipInfo {
            name: "dns6".into(),
            address: "2001:db8::53".into(),
            port: 53,
            port_last: 53,
            protocol: "udp".into(),
            mode: "dsr".into(),
            service_id: 2,
            maglev_offset: 65537,
            maglev_size: 251,
            worst_imbalance_pct: 12.5,
            reject_weight: 0,
            session_affinity: "none".into(),
            nat_forwarding: "kernel".into(),
            syn_rate_limit: "none".into(),
            origin: None,
            backends: vec![],
        },
    ]
}

fn sample_backends() -> Vec<BackendInfo> {
    vec![
        BackendInfo {
            backend_id: 1,
            address: "192.168.1.10".into(),
            port: 8080,
            state: "healthy".into(),
            vips: vec!["web".into(), "api".into()],
            drained: false,
            retiring: false,
            probe: Some(ProbeInfo {
                kind: "http".into(),
                target: "http://192.168.1.10:8080/healthz".into(),
                interval_ms: 2000,
                timeout_ms: 500,
                rise: 2,
                fall: 3,
                up: true,
                last_result: "ok".into(),
                last_latency_ms: 0.42,
                consecutive: 17,
                last_probe_unix: 1_700_000_200,
            }),
            last_change_unix: 1_700_000_050,
            counters: None,
        },
        BackendInfo {
            backend_id: 2,
            address: "192.168.1.10".into(),
            port: 8443,
            state: "down".into(),
            vips: vec!["api".into()],
            drained: false,
            retiring: false,
            probe: Some(ProbeInfo {
                kind: "tcp".into(),
                target: "192.168.1.10:8443".into(),
                interval_ms: 1000,
                timeout_ms: 300,
                rise: 1,
                fall: 1,
                up: false,
                last_result: "fail: connect: refused".into(),
                last_latency_ms: 0.1,
                consecutive: 4,
                last_probe_unix: 1_700_000_201,
            }),
            last_change_unix: 1_700_000_190,
            counters: None,
        },
        BackendInfo {
            backend_id: 3,
            address: "2001:db8::10".into(),
            port: 80,
            state: "draining".into(),
            vips: vec![],
            drained: false,
            retiring: true,
            probe: None,
            last_change_unix: 0,
            counters: None,
        },
    ]
}

/// How the fake resolves a drain selector: by id, `addr:port` (IPv6 in
/// brackets) or bare address, like the daemon.
fn selects(b: &BackendInfo, selector: &str) -> bool {
    let endpoint = if b.address.contains(':') {
        format!("[{}]:{}", b.address, b.port)
    } else {
        format!("{}:{}", b.address, b.port)
    };
    selector == b.backend_id.to_string() || selector == endpoint || selector == b.address
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
        at_unix_ms: 1_700_000_201_250,
        backends: vec![],
        tables: vec![
            TableUsage {
                name: "connection_affinity_map".into(),
                entries: 950_000,
                capacity: 1_000_000,
            },
            TableUsage {
                name: "snat_map".into(),
                entries: 0,
                capacity: 65_536,
            },
        ],
        flow_guard: Some(FlowGuard {
            rate_per_s: 100_000,
            per_cpu_limit: 5_000,
            window_ms: 100,
        }),
        flow_filter: Some(rivora_api::FlowFilter {
            bits: 4_194_304,
            bits_set: 12_345,
            exact: true,
            rebuilds: 1,
        }),
        snat: Some(rivora_api::SnatStats {
            source_v4: Some("10.220.0.11".into()),
            source_v6: None,
            ports: "61000-65535".into(),
            counters: [("allocated".to_string(), 3)].into(),
        }),
    }
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
            state: "Established".into(),
            uptime_secs: Some(42),
            prefixes_sent: 2,
            last_error: None,
        }],
        routes: vec![BgpRouteInfo {
            prefix: "203.0.113.10/32".into(),
            communities: vec!["65010:100".into()],
            vips: vec!["web".into()],
        }],
    }
}

fn sample_speaker() -> SpeakerStatus {
    SpeakerStatus {
        enabled: true,
        interface: Some("eth0".into()),
        mac: Some("02:00:00:00:00:01".into()),
        active: true,
        announce_interval_secs: 60,
        vips: vec![SpeakerVipInfo {
            address: "203.0.113.10".into(),
            answering: true,
            since_unix: Some(1_700_000_000),
            replies_sent: 3,
            announcements_sent: 1,
            last_announce_unix: Some(1_700_000_000),
        }],
        error: None,
        link_up: None,
        fenced: 0,
    }
}

impl ApiSource for FakeSource {
    fn status(&self) -> Status {
        sample_status()
    }
    fn bgp(&self) -> Result<BgpStatus, ApiFailure> {
        Ok(sample_bgp())
    }
    fn speaker(&self) -> Result<SpeakerStatus, ApiFailure> {
        Ok(sample_speaker())
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
    fn set_drain(&self, backend: &str, drain: bool) -> Result<Vec<BackendInfo>, ApiFailure> {
        self.drain_calls
            .lock()
            .unwrap()
            .push((backend.to_string(), drain));
        if backend == "bad" {
            return Err(ApiFailure::BadRequest(format!(
                "{backend:?} is not ADDR:PORT, ADDR or a backend id"
            )));
        }
        let hit: Vec<BackendInfo> = sample_backends()
            .into_iter()
            .filter(|b| selects(b, backend))
            .map(|mut b| {
                b.drained = drain;
                if drain || b.retiring {
                    b.state = "draining".into();
                }
                b
            })
            .collect();
        if hit.is_empty() {
            Err(ApiFailure::NotFound(format!(
                "no backend matches {backend}"
            )))
        } else {
            Ok(hit)
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
    /// The fake behind the server (when it is a [`FakeSource`]), to check
    /// what the server asked of it.
    fake: Option<Arc<FakeSource>>,
}

impl Running {
    async fn stop(mut self) -> std::io::Result<()> {
        self.stop.take().unwrap().send(()).unwrap();
        self.task.await.unwrap()
    }
}

fn start(path: &Path, stats_fail: bool) -> Running {
    let fake = Arc::new(FakeSource::new(stats_fail));
    let mut running = start_with(path, fake.clone());
    running.fake = Some(fake);
    running
}

fn start_with(path: &Path, source: Arc<dyn ApiSource>) -> Running {
    let sock = bind(path).expect("bind");
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(sock.serve(source, async {
        let _ = rx.await;
    }));
    Running {
        stop: Some(tx),
        task,
        fake: None,
    }
}

/// Raw request for cases the typed client cannot express.
fn raw_request(path: &Path, request_line: &str) -> (u16, String) {
    raw_request_with_body(path, request_line, "")
}

/// Raw request with a body, sent without a Content-Type header (which the
/// server must not require).
fn raw_request_with_body(path: &Path, request_line: &str, body: &str) -> (u16, String) {
    let mut s = StdUnixStream::connect(path).unwrap();
    write!(
        s,
        "{request_line} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
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
    assert_eq!(client.bgp().await.unwrap(), sample_bgp());
    assert_eq!(client.speaker().await.unwrap(), sample_speaker());

    server.stop().await.unwrap();
}

#[tokio::test]
async fn bgp_and_speaker_on_a_source_without_them_are_501() {
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    let server = start_with(&path, Arc::new(ReadOnlySource));
    let client = Client::new(&path);
    for (err, what) in [
        (client.bgp().await.unwrap_err(), "BGP speaker"),
        (client.speaker().await.unwrap_err(), "L2 speaker"),
    ] {
        match err {
            ClientError::Api { status, message } => {
                assert_eq!(status, 501);
                assert_eq!(message, format!("this rivorad has no {what}"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let p = path.clone();
    let (status, body) = tokio::task::spawn_blocking(move || raw_request(&p, "GET /v1/speaker"))
        .await
        .unwrap();
    assert_eq!(status, 501, "{body}");
    assert!(body.contains("\"error\""), "JSON error body: {body}");
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
    assert!(err.error.contains("POST /v1/backends/drain"), "{err:?}");

    let p = path.clone();
    let (status, body) =
        tokio::task::spawn_blocking(move || raw_request(&p, "GET /v1/backends/drain"))
            .await
            .unwrap();
    assert_eq!(status, 405);
    let err: ApiError = serde_json::from_str(&body).unwrap();
    assert_eq!(
        err.error,
        "method GET not allowed on /v1/backends/drain; it only accepts POST"
    );

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
        serve(&p, Arc::new(FakeSource::new(false)), async {
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

    let err = serve(&path, Arc::new(FakeSource::new(false)), async {})
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_and_undrain_round_trip() {
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    let server = start(&path, false);
    let client = Client::new(&path);

    // A bare address selects every backend on it.
    let drained = client.drain("192.168.1.10").await.unwrap();
    assert_eq!(
        drained
            .iter()
            .map(|b| (b.backend_id, b.drained, b.state.as_str()))
            .collect::<Vec<_>>(),
        [(1, true, "draining"), (2, true, "draining")]
    );
    // Everything else about the backends comes back unchanged.
    assert_eq!(drained[0].probe, sample_backends()[0].probe);
    assert_eq!(drained[1].last_change_unix, 1_700_000_190);

    let undrained = client.undrain("1").await.unwrap();
    assert_eq!(undrained.len(), 1);
    assert_eq!(undrained[0].port, 8080);
    assert!(!undrained[0].drained);
    assert_eq!(undrained[0].state, "healthy");

    // IPv6 in brackets; a retiring backend stays draining when undrained.
    let v6 = client.undrain("[2001:db8::10]:80").await.unwrap();
    assert_eq!(v6.len(), 1);
    assert!(v6[0].retiring && !v6[0].drained);
    assert_eq!(v6[0].state, "draining");

    // The selector reaches the source verbatim, with the right direction.
    assert_eq!(
        server.fake.as_ref().unwrap().drain_calls(),
        [
            ("192.168.1.10".to_string(), true),
            ("1".to_string(), false),
            ("[2001:db8::10]:80".to_string(), false),
        ]
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn drain_failures_map_to_http_status() {
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    let server = start(&path, false);
    let client = Client::new(&path);

    // ApiFailure::NotFound -> 404, message passed through.
    let err = client.drain("10.9.9.9:80").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "rivorad returned HTTP 404: no backend matches 10.9.9.9:80"
    );
    // ApiFailure::BadRequest -> 400.
    match client.undrain("bad").await.unwrap_err() {
        ClientError::Api { status, message } => {
            assert_eq!(status, 400);
            assert_eq!(message, r#""bad" is not ADDR:PORT, ADDR or a backend id"#);
        }
        other => panic!("unexpected {other:?}"),
    }

    // Malformed bodies are a 400 with a JSON ApiError, never reaching the
    // source; so is an empty selector.
    for body in [
        "not json",
        r#"{"backend": 7}"#,
        "{}",
        r#"{"backend": "  "}"#,
    ] {
        let p = path.clone();
        let (status, text) = tokio::task::spawn_blocking(move || {
            raw_request_with_body(&p, "POST /v1/backends/drain", body)
        })
        .await
        .unwrap();
        assert_eq!(status, 400, "{body}: {text}");
        let err: ApiError = serde_json::from_str(&text).unwrap();
        assert!(
            err.error.starts_with("invalid request body")
                || err.error.starts_with("no backend given"),
            "{body}: {err:?}"
        );
    }
    // Without a content type (`curl -d`), a valid body is accepted.
    let p = path.clone();
    let (status, text) = tokio::task::spawn_blocking(move || {
        raw_request_with_body(&p, "POST /v1/backends/undrain", r#"{"backend":"2"}"#)
    })
    .await
    .unwrap();
    assert_eq!(status, 200, "{text}");
    let hit: Vec<BackendInfo> = serde_json::from_str(&text).unwrap();
    assert_eq!(hit[0].backend_id, 2);

    assert_eq!(
        server.fake.as_ref().unwrap().drain_calls(),
        [
            ("10.9.9.9:80".to_string(), true),
            ("bad".to_string(), false),
            ("2".to_string(), false),
        ]
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn drain_on_source_without_support_is_501() {
    let dir = TempDir::new();
    let path = dir.0.join("rivorad.sock");
    let server = start_with(&path, Arc::new(ReadOnlySource));
    let client = Client::new(&path);

    match client.drain("192.168.1.10:8080").await.unwrap_err() {
        ClientError::Api { status, message } => {
            assert_eq!(status, 501);
            assert_eq!(
                message,
                r#"this rivorad cannot drain backends (asked for "192.168.1.10:8080")"#
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    let err = client.undrain("1").await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("rivorad returned HTTP 501: this rivorad cannot undrain"),
        "{err}"
    );
    // Reads are unaffected.
    assert_eq!(client.backends().await.unwrap(), sample_backends());
    server.stop().await.unwrap();
}

#[test]
fn api_failure_status_codes() {
    let cases = [
        (ApiFailure::BadRequest("b".into()), 400),
        (ApiFailure::NotFound("n".into()), 404),
        (ApiFailure::NotSupported("s".into()), 501),
        (ApiFailure::Internal("i".into()), 500),
    ];
    for (failure, code) in cases {
        assert_eq!(failure.status().as_u16(), code, "{failure:?}");
        assert_eq!(failure.to_string(), failure.message());
    }
}
