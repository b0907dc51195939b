//! The healthCheckNodePort listeners (edge): one TCP listener per port of the ETP Local
//! Services this node programs, answering every request with [`crate::healthz::response`].
//!
//! Why in rivorad: a node that runs Rivora instead of kube-proxy's load balancing must answer
//! the external balancer's health checks itself, or traffic for ETP Local Services is sent to
//! nodes without local endpoints. The listener binds `[::]:PORT`, which on Linux also accepts
//! IPv4 (as Go's listener does). A port another process holds (kube-proxy serving it too) is
//! reported, not fatal, and retried on the next pass.
//!
//! The HTTP handling is deliberately minimal: read the request head (bounded), answer with
//! kube-proxy's status, headers and body plus `Date` and `Content-Length`, close. Health
//! checkers send one request per connection.

use std::collections::BTreeMap;
use std::net::{Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::healthz;
use crate::translate::ServiceKey;

/// What one port answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The Service whose port it is.
    pub service: ServiceKey,
    /// Its local ready, non-terminating endpoint addresses.
    pub local_endpoints: usize,
}

/// One port as the status shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortState {
    /// The port.
    pub port: u16,
    /// Its Service.
    pub service: ServiceKey,
    /// Local endpoints counted.
    pub local_endpoints: usize,
    /// Whether the listener is bound.
    pub serving: bool,
    /// Why it is not, when it is not.
    pub error: Option<String>,
}

/// The listeners and what they answer.
pub struct HealthzServer {
    answers: Arc<Mutex<Answers>>,
    listeners: BTreeMap<u16, JoinHandle<()>>,
    errors: BTreeMap<u16, String>,
    /// Requests answered 200 and 503.
    pub requests: Arc<[AtomicU64; 2]>,
}

#[derive(Default)]
struct Answers {
    by_port: BTreeMap<u16, Answer>,
    healthy: bool,
}

impl Default for HealthzServer {
    fn default() -> Self {
        HealthzServer {
            answers: Arc::new(Mutex::new(Answers::default())),
            listeners: BTreeMap::new(),
            errors: BTreeMap::new(),
            requests: Arc::new([AtomicU64::new(0), AtomicU64::new(0)]),
        }
    }
}

impl HealthzServer {
    /// Serves exactly `wanted` from now on (binding new ports, closing dropped ones); `healthy`
    /// is kube-proxy's `serviceProxyHealthy` (datapath attached, initial sync complete, last
    /// apply good). Must run inside the tokio runtime.
    pub fn set(&mut self, wanted: BTreeMap<u16, Answer>, healthy: bool) {
        {
            let mut a = self.answers.lock().expect("healthz answers");
            a.by_port = wanted.clone();
            a.healthy = healthy;
        }
        let gone: Vec<u16> = self
            .listeners
            .keys()
            .filter(|p| !wanted.contains_key(p))
            .copied()
            .collect();
        for port in gone {
            if let Some(task) = self.listeners.remove(&port) {
                task.abort();
                info!(port, "healthCheckNodePort closed");
            }
        }
        self.errors.retain(|p, _| wanted.contains_key(p));
        for (port, answer) in &wanted {
            if self.listeners.contains_key(port) {
                continue;
            }
            match bind(*port) {
                Ok(listener) => {
                    info!(port, service = %answer.service, "serving healthCheckNodePort");
                    self.errors.remove(port);
                    let answers = Arc::clone(&self.answers);
                    let requests = Arc::clone(&self.requests);
                    self.listeners.insert(
                        *port,
                        tokio::spawn(serve(listener, *port, answers, requests)),
                    );
                }
                Err(e) => {
                    let e = format!("binding [::]:{port}: {e}");
                    if self.errors.get(port) != Some(&e) {
                        warn!(port, service = %answer.service, "cannot serve healthCheckNodePort: {e}");
                    }
                    self.errors.insert(*port, e);
                }
            }
        }
    }

    /// Every wanted port, bound or not.
    pub fn ports(&self) -> Vec<PortState> {
        let a = self.answers.lock().expect("healthz answers");
        a.by_port
            .iter()
            .map(|(port, ans)| PortState {
                port: *port,
                service: ans.service.clone(),
                local_endpoints: ans.local_endpoints,
                serving: self.listeners.contains_key(port),
                error: self.errors.get(port).cloned(),
            })
            .collect()
    }
}

impl Drop for HealthzServer {
    fn drop(&mut self) {
        for task in self.listeners.values() {
            task.abort();
        }
    }
}

fn bind(port: u16) -> std::io::Result<TcpListener> {
    let addr = SocketAddr::from((Ipv6Addr::UNSPECIFIED, port));
    let socket = tokio::net::TcpSocket::new_v6()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(128)
}

async fn serve(
    listener: TcpListener,
    port: u16,
    answers: Arc<Mutex<Answers>>,
    requests: Arc<[AtomicU64; 2]>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let answer = {
            let a = answers.lock().expect("healthz answers");
            a.by_port
                .get(&port)
                .map(|ans| healthz::response(&ans.service, ans.local_endpoints, a.healthy))
        };
        let Some(answer) = answer else { continue };
        requests[usize::from(answer.status != 200)].fetch_add(1, Ordering::Relaxed);
        tokio::spawn(reply(stream, answer));
    }
}

/// Reads the request head (at most 8 KiB, 5 s) and writes the answer.
async fn reply(mut stream: TcpStream, answer: healthz::Response) {
    let mut buf = vec![0u8; 8192];
    let mut len = 0;
    let read = async {
        while len < buf.len() {
            match stream.read(&mut buf[len..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    len += n;
                    if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    let _ = stream
        .write_all(http_bytes(&answer, Timestamp::now()).as_bytes())
        .await;
    let _ = stream.shutdown().await;
}

/// The whole HTTP/1.1 response: status line, kube-proxy's headers, `Date` and
/// `Content-Length` as Go's server adds them, and the body.
pub fn http_bytes(answer: &healthz::Response, now: Timestamp) -> String {
    let mut out = format!("HTTP/1.1 {} {}\r\n", answer.status, answer.reason());
    for (name, value) in &answer.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!(
        "Date: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        now.strftime("%a, %d %b %Y %H:%M:%S GMT"),
        answer.body.len()
    ));
    out.push_str(&answer.body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_is_http_with_kube_proxys_headers_and_gos_date() {
        let key = ServiceKey {
            namespace: "shop".into(),
            name: "web".into(),
        };
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let text = http_bytes(&healthz::response(&key, 2, true), now);
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(
            head.lines().collect::<Vec<_>>(),
            [
                "HTTP/1.1 200 OK",
                "Content-Type: application/json",
                "X-Content-Type-Options: nosniff",
                "X-Load-Balancing-Endpoint-Weight: 2",
                "Date: Tue, 14 Nov 2023 22:13:20 GMT",
                &format!("Content-Length: {}", body.len()),
                "Connection: close",
            ]
        );
        assert!(body.contains("\"localEndpoints\": 2"), "{body}");
        let text = http_bytes(&healthz::response(&key, 0, true), now);
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{text}"
        );
    }
}
