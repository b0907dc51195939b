//! Server side of the local API: socket setup and HTTP routing.
//!
//! The daemon implements [`ApiSource`] over its live state and calls
//! [`serve`] (or [`bind`] + [`ApiSocket::serve`] when it wants socket errors
//! reported before it starts serving).
//!
//! Everything is read-only except `POST` [`paths::DRAIN`] /
//! [`paths::UNDRAIN`], which take a [`DrainRequest`] and reach the daemon
//! through [`ApiSource::set_drain`]; its [`ApiFailure`] picks the HTTP status.

use std::fs::{self, DirBuilder, Permissions};
use std::future::Future;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener as StdUnixListener, UnixStream as StdUnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use serde::Serialize;

use crate::dto::{
    ApiError, BackendInfo, BgpStatus, ClassifierStatus, DrainRequest, SpeakerStatus, Stats, Status,
    VipInfo,
};
use crate::paths;

/// Mode of the socket file: owner (root) read/write only, because the API
/// exposes topology and counters and file permissions are its only guard.
const SOCKET_MODE: u32 = 0o600;
/// Mode of the socket directory when we create it, for the same reason.
const DIR_MODE: u32 = 0o700;

/// Why a source call failed; decides the HTTP status of the answer, and its
/// message becomes the [`ApiError`] body, so phrase it for the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiFailure {
    /// The request cannot be acted on as given (e.g. a malformed backend
    /// selector): HTTP 400.
    #[error("{0}")]
    BadRequest(String),
    /// The request names something that does not exist (e.g. no backend
    /// matches): HTTP 404.
    #[error("{0}")]
    NotFound(String),
    /// This daemon does not implement the operation: HTTP 501.
    #[error("{0}")]
    NotSupported(String),
    /// The daemon failed while acting on a valid request (e.g. a BPF map
    /// update failed): HTTP 500.
    #[error("{0}")]
    Internal(String),
}

impl ApiFailure {
    /// HTTP status this failure is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiFailure::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiFailure::NotFound(_) => StatusCode::NOT_FOUND,
            ApiFailure::NotSupported(_) => StatusCode::NOT_IMPLEMENTED,
            ApiFailure::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The operator-facing message.
    pub fn message(&self) -> &str {
        match self {
            ApiFailure::BadRequest(m)
            | ApiFailure::NotFound(m)
            | ApiFailure::NotSupported(m)
            | ApiFailure::Internal(m) => m,
        }
    }
}

/// What the API serves: a view of the daemon's state, plus the one thing an
/// operator may change through it (draining backends).
///
/// The API crate knows nothing about BPF or config parsing; the daemon
/// implements this trait so the HTTP layer can be tested with a fake.
/// Methods are synchronous and are called on tokio's blocking pool, so
/// implementations may take locks or do syscalls (e.g. read BPF maps).
pub trait ApiSource: Send + Sync + 'static {
    /// Current daemon status, for `GET /v1/status`.
    fn status(&self) -> Status;
    /// VIPs as programmed into the dataplane, for `GET /v1/vips`.
    fn vips(&self) -> Vec<VipInfo>;
    /// Backends as programmed into the dataplane, for `GET /v1/backends`.
    fn backends(&self) -> Vec<BackendInfo>;
    /// Dataplane counters, for `GET /v1/stats`. Fallible because reading BPF
    /// maps can fail; the error string is returned to the client as a 500.
    fn stats(&self) -> Result<Stats, String>;
    /// Start (`drain == true`) or end an operator drain, for `POST
    /// /v1/backends/drain` and `/v1/backends/undrain`.
    ///
    /// `backend` is the client's [`DrainRequest::backend`] selector,
    /// trimmed and never empty (`ADDR:PORT`, `[V6]:PORT`, a bare `ADDR` or a
    /// numeric backend id); the source resolves it. Returns every backend the
    /// selector matched, in its new state. Unknown selectors should be
    /// [`ApiFailure::NotFound`], malformed ones [`ApiFailure::BadRequest`].
    ///
    /// The default answers [`ApiFailure::NotSupported`], so a source that
    /// predates draining keeps compiling and says so to the client.
    fn set_drain(&self, backend: &str, drain: bool) -> Result<Vec<BackendInfo>, ApiFailure> {
        Err(ApiFailure::NotSupported(format!(
            "this rivorad cannot {} backends (asked for {backend:?})",
            if drain { "drain" } else { "undrain" }
        )))
    }
    /// The BGP speaker, for `GET /v1/bgp`. The default answers
    /// [`ApiFailure::NotSupported`].
    fn bgp(&self) -> Result<BgpStatus, ApiFailure> {
        Err(ApiFailure::NotSupported(
            "this rivorad has no BGP speaker".into(),
        ))
    }
    /// The ARP/NDP responder, for `GET /v1/speaker`. The default answers
    /// [`ApiFailure::NotSupported`].
    fn speaker(&self) -> Result<SpeakerStatus, ApiFailure> {
        Err(ApiFailure::NotSupported(
            "this rivorad has no L2 speaker".into(),
        ))
    }
    /// The classifier (rules, groups, their VIPs and counters), for `GET
    /// /v1/classifier`. The default answers [`ApiFailure::NotSupported`].
    fn classifier(&self) -> Result<ClassifierStatus, ApiFailure> {
        Err(ApiFailure::NotSupported(
            "this rivorad has no classifier".into(),
        ))
    }
}

/// A bound, root-only API socket that has not started serving yet.
///
/// Exists so the daemon can surface socket problems (another rivorad
/// running, bad path) at start-up before doing anything else. The socket
/// file is removed when this value is dropped (including after
/// [`ApiSocket::serve`] returns), but only if the path still refers to the
/// socket we created, so a successor's socket is never deleted.
#[derive(Debug)]
pub struct ApiSocket {
    listener: Option<StdUnixListener>,
    path: PathBuf,
    dev: u64,
    ino: u64,
}

/// Serve the API on `socket_path` until `shutdown` resolves.
///
/// Convenience for [`bind`] followed by [`ApiSocket::serve`]. Returns an
/// error without touching anything if the path is a live socket or not a
/// socket at all. The socket file is removed on return.
pub async fn serve(
    socket_path: &Path,
    source: Arc<dyn ApiSource>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    bind(socket_path)?.serve(source, shutdown).await
}

/// Create the API socket at `socket_path` with mode 0600.
///
/// * Creates the parent directory (mode 0700) if it does not exist.
/// * If something already exists at the path: a socket nobody answers on
///   (left by a crashed daemon) is removed; a socket that accepts
///   connections, or anything that is not a socket, is left alone and an
///   error is returned.
/// * The socket is bound and listening, with its mode set, under a
///   temporary name beside the path, then renamed onto it: the path never
///   names a socket that refuses connections (`bind(2)` creates the file
///   before `listen(2)`, and a client connecting in between would be
///   refused) or that has the wrong mode. So a socket file at the path
///   means a daemon that answers.
///
/// Does not need a tokio runtime; serving does.
pub fn bind(socket_path: &Path) -> io::Result<ApiSocket> {
    prepare_parent_dir(socket_path)?;
    remove_stale_socket(socket_path)?;

    let staging = staging_path(socket_path);
    let at = staging.as_deref().unwrap_or(socket_path);
    if staging.is_some() {
        // Ours from an earlier start that died between bind and rename.
        let _ = fs::remove_file(at);
    }
    let listener = StdUnixListener::bind(at).map_err(|e| {
        with_context(
            e,
            format!("cannot bind API socket {}", socket_path.display()),
        )
    })?;
    // Restrict access immediately after bind. We deliberately do not rely on
    // (process-global, racy) umask manipulation.
    if let Err(e) = fs::set_permissions(at, Permissions::from_mode(SOCKET_MODE)) {
        let _ = fs::remove_file(at);
        return Err(with_context(
            e,
            format!(
                "cannot set mode {SOCKET_MODE:o} on API socket {}",
                socket_path.display()
            ),
        ));
    }
    if staging.is_some()
        && let Err(e) = fs::rename(at, socket_path)
    {
        let _ = fs::remove_file(at);
        return Err(with_context(
            e,
            format!("cannot move the API socket into {}", socket_path.display()),
        ));
    }
    let meta = match fs::symlink_metadata(socket_path) {
        Ok(m) => m,
        Err(e) => {
            let _ = fs::remove_file(socket_path);
            return Err(with_context(
                e,
                format!("cannot stat API socket {}", socket_path.display()),
            ));
        }
    };
    // Ownership of the file is established from here on: dropping `sock`
    // removes it on every error path below.
    let sock = ApiSocket {
        listener: Some(listener),
        path: socket_path.to_path_buf(),
        dev: meta.dev(),
        ino: meta.ino(),
    };
    sock.listener
        .as_ref()
        .expect("listener present until serve")
        .set_nonblocking(true)?;
    Ok(sock)
}

/// Longest path a Unix socket address holds (`sun_path`, less its NUL).
const SUN_PATH_MAX: usize = 107;

/// The temporary name the socket is bound under before it is renamed onto `socket_path`:
/// beside it (a rename stays on one filesystem), named by our PID. None when that name
/// would not fit a socket address: then the socket is bound in place.
fn staging_path(socket_path: &Path) -> Option<PathBuf> {
    let mut name = socket_path.as_os_str().to_owned();
    name.push(format!(".{}", std::process::id()));
    (name.len() <= SUN_PATH_MAX).then(|| PathBuf::from(name))
}

impl ApiSocket {
    /// Path of the socket file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serve the API until `shutdown` resolves, then finish in-flight
    /// requests, close the listener and remove the socket file.
    ///
    /// Must be called within a tokio runtime.
    pub async fn serve(
        mut self,
        source: Arc<dyn ApiSource>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        let std_listener = self.listener.take().expect("listener present until serve");
        let listener = tokio::net::UnixListener::from_std(std_listener)?;
        tracing::info!(socket = %self.path.display(), "local API listening");
        let result = axum::serve(listener, router(source))
            .with_graceful_shutdown(shutdown)
            .await;
        tracing::info!(socket = %self.path.display(), "local API stopped");
        result
        // `self` drops here and removes the socket file.
    }
}

impl Drop for ApiSocket {
    fn drop(&mut self) {
        // Close the listener (if serve never ran) before unlinking.
        drop(self.listener.take());
        match fs::symlink_metadata(&self.path) {
            Ok(m) if m.dev() == self.dev && m.ino() == self.ino => {
                if let Err(e) = fs::remove_file(&self.path) {
                    tracing::warn!(socket = %self.path.display(), error = %e,
                        "cannot remove API socket");
                }
            }
            // Gone already, or replaced by someone else: not ours to remove.
            _ => {}
        }
    }
}

fn with_context(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn prepare_parent_dir(socket_path: &Path) -> io::Result<()> {
    let Some(dir) = socket_path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    match fs::symlink_metadata(dir) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(dir)
                .map_err(|e| {
                    with_context(
                        e,
                        format!("cannot create API socket directory {}", dir.display()),
                    )
                })?;
            // DirBuilder's mode is filtered by umask; make it exact.
            fs::set_permissions(dir, Permissions::from_mode(DIR_MODE)).map_err(|e| {
                with_context(
                    e,
                    format!("cannot set mode {DIR_MODE:o} on {}", dir.display()),
                )
            })
        }
        Err(e) => Err(with_context(
            e,
            format!("cannot inspect API socket directory {}", dir.display()),
        )),
    }
}

/// Removes a socket file at `path` that nobody answers on (a crashed or SIGKILLed daemon's);
/// refuses one that answers, or anything that is not a socket. A rivorad calls it as soon as
/// it holds the socket's lock, long before it binds, so that a socket file at the path always
/// means a rivorad that answers: tools that wait for the file (systemd's `ExecStartPost`,
/// scripts) do not take a dead daemon's socket for the new one's.
pub fn remove_stale_socket(path: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(with_context(
                e,
                format!("cannot inspect {}", path.display()),
            ));
        }
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; refusing to remove it",
                path.display()
            ),
        ));
    }
    match StdUnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "API socket {} is in use: another process (a second rivorad?) is \
                 accepting connections on it; refusing to replace it",
                path.display()
            ),
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => match fs::remove_file(path) {
            Ok(()) => {
                tracing::warn!(socket = %path.display(),
                        "removed stale API socket (nothing was listening on it)");
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(with_context(
                e,
                format!("cannot remove stale API socket {}", path.display()),
            )),
        },
        // Vanished between stat and connect: nothing to clean up.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!(
                "{} exists and whether it is still in use cannot be determined \
                 ({e}); refusing to replace it",
                path.display()
            ),
        )),
    }
}

type Src = State<Arc<dyn ApiSource>>;

fn router(source: Arc<dyn ApiSource>) -> Router {
    Router::new()
        .route(paths::STATUS, get(get_status))
        .route(paths::VIPS, get(get_vips))
        .route(paths::BACKENDS, get(get_backends))
        .route(paths::STATS, get(get_stats))
        .route(paths::BGP, get(get_bgp))
        .route(paths::SPEAKER, get(get_speaker))
        .route(paths::CLASSIFIER, get(get_classifier))
        .route(paths::DRAIN, post(post_drain))
        .route(paths::UNDRAIN, post(post_undrain))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(source)
}

async fn get_status(State(src): Src) -> Response {
    query(src, |s| Ok::<Status, ApiFailure>(s.status())).await
}

async fn get_vips(State(src): Src) -> Response {
    query(src, |s| Ok::<Vec<VipInfo>, ApiFailure>(s.vips())).await
}

async fn get_backends(State(src): Src) -> Response {
    query(src, |s| Ok::<Vec<BackendInfo>, ApiFailure>(s.backends())).await
}

async fn get_stats(State(src): Src) -> Response {
    query(src, |s| s.stats().map_err(ApiFailure::Internal)).await
}

async fn get_bgp(State(src): Src) -> Response {
    query(src, |s| s.bgp()).await
}

async fn get_speaker(State(src): Src) -> Response {
    query(src, |s| s.speaker()).await
}

async fn get_classifier(State(src): Src) -> Response {
    query(src, |s| s.classifier()).await
}

async fn post_drain(State(src): Src, body: Bytes) -> Response {
    set_drain(src, &body, true).await
}

async fn post_undrain(State(src): Src, body: Bytes) -> Response {
    set_drain(src, &body, false).await
}

/// Shared body of the drain endpoints. The body is parsed by hand rather
/// than with axum's `Json` extractor so that every rejection is a 400 with
/// an [`ApiError`] body, and so that `curl -d` without a content type works.
async fn set_drain(src: Arc<dyn ApiSource>, body: &[u8], drain: bool) -> Response {
    let request: DrainRequest = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                format!(
                    r#"invalid request body: {e}; expected JSON like {{"backend": "10.0.0.1:8080"}}"#
                ),
            );
        }
    };
    let backend = request.backend.trim().to_string();
    if backend.is_empty() {
        return error_response(
            StatusCode::BAD_REQUEST,
            "no backend given: expected ADDR:PORT, [V6]:PORT, ADDR or a backend id".into(),
        );
    }
    query(src, move |s| s.set_drain(&backend, drain)).await
}

/// Run a source call on the blocking pool (it may take locks or read BPF
/// maps) and turn the outcome, including a panic, into a JSON response.
async fn query<T, F>(src: Arc<dyn ApiSource>, f: F) -> Response
where
    T: Serialize + Send + 'static,
    F: FnOnce(&dyn ApiSource) -> Result<T, ApiFailure> + Send + 'static,
{
    match tokio::task::spawn_blocking(move || f(&*src)).await {
        Ok(Ok(body)) => Json(body).into_response(),
        Ok(Err(failure)) => {
            let status = failure.status();
            error_response(status, failure.message().to_string())
        }
        Err(join_err) => {
            tracing::error!(error = %join_err, "API handler failed");
            error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error in rivorad while handling the request (see daemon log)".into(),
            )
        }
    }
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error_response(
        StatusCode::NOT_FOUND,
        format!(
            "no such endpoint: {method} {}; known endpoints: GET {}, GET {}, GET {}, GET {}, \
             GET {}, GET {}, GET {}, POST {}, POST {}",
            uri.path(),
            paths::STATUS,
            paths::VIPS,
            paths::BACKENDS,
            paths::STATS,
            paths::BGP,
            paths::SPEAKER,
            paths::CLASSIFIER,
            paths::DRAIN,
            paths::UNDRAIN,
        ),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    let path = uri.path();
    let allowed = if path == paths::DRAIN || path == paths::UNDRAIN {
        "it only accepts POST".to_string()
    } else {
        format!(
            "it is read-only (GET); only POST {} and POST {} change state",
            paths::DRAIN,
            paths::UNDRAIN
        )
    };
    error_response(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method {method} not allowed on {path}; {allowed}"),
    )
}

fn error_response(status: StatusCode, error: String) -> Response {
    (status, Json(ApiError { error })).into_response()
}

#[cfg(test)]
mod tests {
    //! The classifier route through a real socket and the real client (the
    //! other routes are exercised in `tests/api.rs`).

    use super::*;
    use crate::client::{Client, ClientError};
    use crate::dto::{
        ClsCounters, ClsGroupInfo, ClsRuleInfo, ClsTargetInfo, ClsVipInfo, ReloadInfo,
    };

    /// A source with (`Some`) or without (`None`, the trait's default)
    /// a classifier.
    struct Fake(Option<ClassifierStatus>);

    impl ApiSource for Fake {
        fn status(&self) -> Status {
            Status {
                version: "0.1.0".into(),
                abi_version: 14,
                interface: "eth0".into(),
                ifindex: 2,
                xdp_mode_requested: "auto".into(),
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
                vip_count: 0,
                backend_count: 0,
                started_at_unix: 1_700_000_000,
                maglev_table_size: 0,
                maglev_slots_used: 0,
                programs: vec![],
                persist_datapath: false,
                start: String::new(),
                kubernetes: None,
            }
        }
        fn vips(&self) -> Vec<VipInfo> {
            vec![]
        }
        fn backends(&self) -> Vec<BackendInfo> {
            vec![]
        }
        fn stats(&self) -> Result<Stats, String> {
            Err("not in this test".into())
        }
        fn classifier(&self) -> Result<ClassifierStatus, ApiFailure> {
            match &self.0 {
                Some(c) => Ok(c.clone()),
                None => Err(ApiFailure::NotSupported(
                    "this rivorad has no classifier".into(),
                )),
            }
        }
    }

    /// Leaves the trait's default in place.
    struct Plain;

    impl ApiSource for Plain {
        fn status(&self) -> Status {
            Fake(None).status()
        }
        fn vips(&self) -> Vec<VipInfo> {
            vec![]
        }
        fn backends(&self) -> Vec<BackendInfo> {
            vec![]
        }
        fn stats(&self) -> Result<Stats, String> {
            Err("not in this test".into())
        }
    }

    fn sample() -> ClassifierStatus {
        ClassifierStatus {
            vips: vec![ClsVipInfo {
                address: "2001:db8::5".into(),
                stats_id: 3,
                rules: vec!["udp-range".into(), "web".into()],
                ready: true,
                counters: ClsCounters {
                    packets: u64::MAX,
                    bytes: 1 << 40,
                    no_target: 5,
                    other: 7,
                },
            }],
            rules: vec![ClsRuleInfo {
                name: "ns/web".into(),
                rule_id: 9,
                priority: 10,
                group: "dg-a".into(),
                vips: vec!["2001:db8::5".into()],
                sources: vec!["192.0.2.0/24".into()],
                source_ports: vec!["1024-65535".into()],
                destination_ports: vec!["80".into(), "443".into()],
                protocols: vec!["TCP".into(), "SCTP".into()],
                byte_matches: vec!["tcp[13:1]&0x12=0x2".into()],
                counters: ClsCounters::default(),
            }],
            groups: vec![ClsGroupInfo {
                name: "dg-a".into(),
                group_id: 0,
                max_endpoints: 32,
                table_size: 3191,
                sctp_hash: "ports".into(),
                targets: vec![ClsTargetInfo {
                    slot: 4,
                    v4: None,
                    v6: Some("fd00::4".into()),
                }],
                slots_v4: 0,
                slots_v6: 1,
                counters: ClsCounters {
                    packets: 1,
                    bytes: 100,
                    no_target: 2,
                    other: 0,
                },
            }],
            events: [("no_rule".to_string(), 7), ("no_target".to_string(), 5)].into(),
            unclaimed_vips: vec!["10.9.9.9".into()],
        }
    }

    struct Dir(std::path::PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn dir(tag: &str) -> Dir {
        let p =
            std::env::temp_dir().join(format!("rivora-api-server-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Dir(p)
    }

    /// Serves `source` until the returned sender is dropped or fired.
    async fn start(
        path: &Path,
        source: Arc<dyn ApiSource>,
    ) -> (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<io::Result<()>>,
    ) {
        let sock = bind(path).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(sock.serve(source, async {
            let _ = rx.await;
        }));
        (tx, task)
    }

    #[tokio::test]
    async fn classifier_round_trips() {
        let d = dir("cls");
        let path = d.0.join("rivorad.sock");
        let (stop, task) = start(&path, Arc::new(Fake(Some(sample())))).await;
        let got = Client::new(&path).classifier().await.unwrap();
        assert_eq!(got, sample());
        // An empty classifier: empty lists, and no `unclaimed_vips` key.
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
        let (stop, task) = start(&path, Arc::new(Fake(Some(ClassifierStatus::default())))).await;
        assert_eq!(
            Client::new(&path).classifier().await.unwrap(),
            ClassifierStatus::default()
        );
        let json = serde_json::to_value(ClassifierStatus::default()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"vips": [], "rules": [], "groups": [], "events": {}})
        );
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn classifier_on_a_source_without_one_is_501() {
        let d = dir("plain");
        let path = d.0.join("rivorad.sock");
        let (stop, task) = start(&path, Arc::new(Plain)).await;
        match Client::new(&path).classifier().await.unwrap_err() {
            ClientError::Api { status, message } => {
                assert_eq!(status, 501);
                assert_eq!(message, "this rivorad has no classifier");
            }
            other => panic!("unexpected {other:?}"),
        }
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn unknown_route_lists_the_classifier() {
        let d = dir("nope");
        let path = d.0.join("rivorad.sock");
        let (stop, task) = start(&path, Arc::new(Plain)).await;
        let p = path.clone();
        let body = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut s = StdUnixStream::connect(&p).unwrap();
            write!(
                s,
                "GET /v1/classifiers HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        })
        .await
        .unwrap();
        assert!(body.starts_with("HTTP/1.1 404"), "{body}");
        assert!(body.contains("GET /v1/classifier,"), "{body}");
        // POST on the read-only route: 405 with the usual hint.
        let p = path.clone();
        let body = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut s = StdUnixStream::connect(&p).unwrap();
            write!(
                s,
                "POST /v1/classifier HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
            )
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        })
        .await
        .unwrap();
        assert!(body.starts_with("HTTP/1.1 405"), "{body}");
        assert!(body.contains("read-only"), "{body}");
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
    }
}
