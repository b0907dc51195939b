//! Typed client for the rivorad local API, used by `rivoractl`.
//!
//! One HTTP/1.1 connection per call: calls are rare (a human running a
//! command, or `rivoractl watch` about once a second) and a fresh
//! connection keeps the client stateless.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;

use crate::dto::{
    ApiError, BackendInfo, BgpStatus, ClassifierStatus, DrainRequest, SpeakerStatus, Stats, Status,
    VipInfo,
};
use crate::{DEFAULT_SOCKET, paths};

/// Default per-call deadline, so a wedged daemon cannot hang the CLI.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an API call failed, phrased so the CLI can print it as-is.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No socket file: the daemon is not running or uses another path.
    #[error("rivorad is not running? no socket at {}", path.display())]
    NotRunning {
        /// Socket path that was tried.
        path: PathBuf,
    },
    /// The socket file exists but nothing listens on it (crashed daemon).
    #[error(
        "rivorad is not running? socket {} exists but nothing is listening on it (stale socket)",
        path.display()
    )]
    Stale {
        /// Socket path that was tried.
        path: PathBuf,
    },
    /// Nothing answers on the socket yet (or any more), but a rivorad holds its lock file:
    /// it is starting (loading, adopting, programming the datapath; the socket answers
    /// once it forwards) or stopping. A restart's first seconds look like this.
    #[error(
        "rivorad {} is starting or stopping: it owns {} but does not answer on it yet \
         (it answers once its datapath is programmed; wait with `rivoractl --wait SECONDS`)",
        holder.describe(),
        path.display()
    )]
    Starting {
        /// Socket path that was tried.
        path: PathBuf,
        /// The rivorad holding the socket's lock file.
        holder: crate::instance::Holder,
    },
    /// The socket is root-only and the caller is not root.
    #[error(
        "permission denied connecting to {}: the rivorad API socket is root-only; run as root (e.g. with sudo)",
        path.display()
    )]
    PermissionDenied {
        /// Socket path that was tried.
        path: PathBuf,
    },
    /// Any other failure to connect.
    #[error("cannot connect to rivorad at {}: {source}", path.display())]
    Connect {
        /// Socket path that was tried.
        path: PathBuf,
        /// Underlying OS error.
        #[source]
        source: io::Error,
    },
    /// The daemon accepted the connection but did not answer in time.
    #[error("rivorad at {} did not answer within {}s", path.display(), timeout.as_secs_f64())]
    Timeout {
        /// Socket path that was used.
        path: PathBuf,
        /// Deadline that expired.
        timeout: Duration,
    },
    /// The HTTP exchange broke (connection reset, malformed response...).
    #[error("HTTP exchange with rivorad failed: {0}")]
    Http(#[from] hyper::Error),
    /// The daemon answered with an error status.
    #[error("rivorad returned HTTP {status}: {message}")]
    Api {
        /// HTTP status code.
        status: u16,
        /// Message from the [`ApiError`] body (or the raw body).
        message: String,
    },
    /// The answer was not the JSON we expected, most likely a
    /// rivoractl/rivorad version mismatch.
    #[error(
        "cannot decode rivorad response from {endpoint}: {source} (rivoractl and rivorad versions differ?)"
    )]
    Decode {
        /// Endpoint that was called.
        endpoint: &'static str,
        /// JSON error.
        #[source]
        source: serde_json::Error,
    },
}

/// Client for the rivorad local API over a Unix socket.
#[derive(Debug, Clone)]
pub struct Client {
    path: PathBuf,
    timeout: Duration,
    wait: Duration,
}

impl Default for Client {
    /// Client for [`DEFAULT_SOCKET`] with [`DEFAULT_TIMEOUT`].
    fn default() -> Self {
        Client::new(DEFAULT_SOCKET)
    }
}

impl Client {
    /// Client for the daemon listening on `path`, with [`DEFAULT_TIMEOUT`].
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Client {
            path: path.into(),
            timeout: DEFAULT_TIMEOUT,
            wait: Duration::ZERO,
        }
    }

    /// Replace the per-call deadline (connect + request + response body).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Wait up to `wait` for a rivorad to answer when none does yet (no socket, a stale one,
    /// or one starting: [`ClientError::is_not_answering`]), retrying the connection every
    /// 50 ms, before the call's own deadline starts. For scripts that restart rivorad and
    /// query it right after. Zero (the default) tries once.
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Socket path this client connects to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `GET /v1/bgp`: BGP speaker, peers and announced routes.
    pub async fn bgp(&self) -> Result<BgpStatus, ClientError> {
        self.get(paths::BGP).await
    }

    /// `GET /v1/speaker`: the ARP/NDP responder.
    pub async fn speaker(&self) -> Result<SpeakerStatus, ClientError> {
        self.get(paths::SPEAKER).await
    }

    /// `GET /v1/classifier`: the classifier's VIPs, rules and groups with
    /// their counters.
    pub async fn classifier(&self) -> Result<ClassifierStatus, ClientError> {
        self.get(paths::CLASSIFIER).await
    }

    /// `GET /v1/status`: daemon status.
    pub async fn status(&self) -> Result<Status, ClientError> {
        self.get(paths::STATUS).await
    }

    /// `GET /v1/vips`: VIPs as programmed into the dataplane.
    pub async fn vips(&self) -> Result<Vec<VipInfo>, ClientError> {
        self.get(paths::VIPS).await
    }

    /// `GET /v1/backends`: backends as programmed into the dataplane.
    pub async fn backends(&self) -> Result<Vec<BackendInfo>, ClientError> {
        self.get(paths::BACKENDS).await
    }

    /// `GET /v1/stats`: dataplane counters.
    pub async fn stats(&self) -> Result<Stats, ClientError> {
        self.get(paths::STATS).await
    }

    /// `POST /v1/backends/drain`: stop sending new flows to the backends
    /// matching `backend` (`ADDR:PORT`, `[V6]:PORT`, `ADDR` or a backend id)
    /// while their established flows continue. Returns the affected
    /// backends in their new state.
    pub async fn drain(&self, backend: &str) -> Result<Vec<BackendInfo>, ClientError> {
        self.post_drain(paths::DRAIN, backend).await
    }

    /// `POST /v1/backends/undrain`: end an operator drain of the backends
    /// matching `backend`. Returns the affected backends in their new state.
    pub async fn undrain(&self, backend: &str) -> Result<Vec<BackendInfo>, ClientError> {
        self.post_drain(paths::UNDRAIN, backend).await
    }

    async fn post_drain(
        &self,
        endpoint: &'static str,
        backend: &str,
    ) -> Result<Vec<BackendInfo>, ClientError> {
        let body = serde_json::to_vec(&DrainRequest {
            backend: backend.to_string(),
        })
        .expect("a struct of one string always serializes");
        self.call(Method::POST, endpoint, Some(body)).await
    }

    async fn get<T: DeserializeOwned>(&self, endpoint: &'static str) -> Result<T, ClientError> {
        self.call(Method::GET, endpoint, None).await
    }

    /// One request with a JSON body (when given), answered with JSON `T`.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        endpoint: &'static str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ClientError> {
        // The wait for a rivorad to answer comes before the call's own deadline.
        if !self.wait.is_zero() {
            drop(self.connect().await?);
        }
        let (status, body) =
            tokio::time::timeout(self.timeout, self.exchange(method, endpoint, body))
                .await
                .map_err(|_| ClientError::Timeout {
                    path: self.path.clone(),
                    timeout: self.timeout,
                })??;
        if status.is_success() {
            serde_json::from_slice(&body).map_err(|source| ClientError::Decode { endpoint, source })
        } else {
            Err(api_error(status, &body))
        }
    }

    async fn exchange(
        &self,
        method: Method,
        endpoint: &'static str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let stream = UnixStream::connect(&self.path)
            .await
            .map_err(|e| connect_error(&self.path, e))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let mut request = Request::builder()
            .method(method)
            .uri(endpoint)
            .header(HOST, "localhost")
            .header(ACCEPT, "application/json");
        if body.is_some() {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .expect("static request is well-formed");
        let call = async move {
            let response = sender.send_request(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            // `sender` drops here, which lets `conn` finish.
            Ok::<_, hyper::Error>((status, body))
        };
        // Drive the connection in-line instead of spawning it, so the client
        // works the same on any tokio runtime flavour and leaves no task.
        let (result, _conn_result) = tokio::join!(call, conn);
        // A connection error after a complete response is irrelevant; one
        // before it is already reported by `result`.
        Ok(result?)
    }
}

impl Client {
    /// Connects, waiting up to [`Client::with_wait`]'s time while nothing answers.
    async fn connect(&self) -> Result<UnixStream, ClientError> {
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            match UnixStream::connect(&self.path).await {
                Ok(s) => return Ok(s),
                Err(e) => {
                    let e = connect_error(&self.path, e);
                    if !e.is_not_answering() || tokio::time::Instant::now() >= deadline {
                        return Err(e);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl ClientError {
    /// No rivorad answers on the socket (none runs, a dead one left it, or one is starting
    /// or stopping), as opposed to one that answered, refused or timed out.
    pub fn is_not_answering(&self) -> bool {
        matches!(
            self,
            ClientError::NotRunning { .. }
                | ClientError::Stale { .. }
                | ClientError::Starting { .. }
        )
    }
}

/// Map an OS connect error to a message an operator can act on. Nothing answering while a
/// rivorad holds the socket's lock file is a start (or stop) under way, not a dead daemon.
fn connect_error(path: &Path, e: io::Error) -> ClientError {
    let path = path.to_path_buf();
    if matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
    ) && let Some(holder) = crate::instance::socket_owner(&path)
    {
        return ClientError::Starting { path, holder };
    }
    match e.kind() {
        io::ErrorKind::NotFound => ClientError::NotRunning { path },
        io::ErrorKind::ConnectionRefused => ClientError::Stale { path },
        io::ErrorKind::PermissionDenied => ClientError::PermissionDenied { path },
        _ => ClientError::Connect { path, source: e },
    }
}

fn api_error(status: StatusCode, body: &[u8]) -> ClientError {
    let message = match serde_json::from_slice::<ApiError>(body) {
        Ok(e) => e.error,
        Err(_) => {
            let raw = String::from_utf8_lossy(body).trim().to_string();
            if raw.is_empty() {
                status
                    .canonical_reason()
                    .unwrap_or("no details")
                    .to_string()
            } else {
                raw
            }
        }
    };
    ClientError::Api {
        status: status.as_u16(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_errors_are_actionable() {
        let p = Path::new("/run/rivora/rivorad.sock");
        let e = connect_error(p, io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(
            e.to_string(),
            "rivorad is not running? no socket at /run/rivora/rivorad.sock"
        );
        let e = connect_error(p, io::Error::from(io::ErrorKind::PermissionDenied));
        assert!(
            e.to_string()
                .starts_with("permission denied connecting to /run/rivora/rivorad.sock")
        );
        assert!(matches!(e, ClientError::PermissionDenied { .. }));
        let e = connect_error(p, io::Error::from(io::ErrorKind::ConnectionRefused));
        assert!(e.to_string().contains("nothing is listening"));
        let e = connect_error(p, io::Error::from(io::ErrorKind::TimedOut));
        assert!(matches!(e, ClientError::Connect { .. }));
    }

    #[test]
    fn api_error_prefers_json_body() {
        let e = api_error(StatusCode::NOT_FOUND, br#"{"error":"no such endpoint"}"#);
        assert_eq!(e.to_string(), "rivorad returned HTTP 404: no such endpoint");
        let e = api_error(StatusCode::BAD_GATEWAY, b"  upstream broke \n");
        assert_eq!(e.to_string(), "rivorad returned HTTP 502: upstream broke");
        let e = api_error(StatusCode::SERVICE_UNAVAILABLE, b"");
        assert_eq!(
            e.to_string(),
            "rivorad returned HTTP 503: Service Unavailable"
        );
    }
}
