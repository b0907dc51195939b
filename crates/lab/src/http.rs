//! A minimal HTTP/1.1 GET from inside a namespace: what the tests read health endpoints
//! (healthCheckNodePort, rivorad's probes and metrics) with, as a load balancer or a client
//! in that namespace would, with no HTTP client crate in the lab.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use crate::Netns;

/// One answer: the status code, the header lines and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpReply {
    /// The status code.
    pub status: u16,
    /// The header lines as (name, value), in order.
    pub headers: Vec<(String, String)>,
    /// The body, as text.
    pub body: String,
}

impl HttpReply {
    /// The value of header `name` (case-insensitive), or "" when it is absent.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }
}

/// GET `path` from `addr` inside `ns` with `Connection: close`; Err says what failed
/// (connect, read, or a reply that is not HTTP), for a poll to report.
pub fn http_get(ns: &Netns, addr: SocketAddr, path: &str) -> Result<HttpReply, String> {
    let path = path.to_string();
    ns.within(move || -> Result<HttpReply, String> {
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .map_err(|e| format!("write to {addr}: {e}"))?;
        let mut raw = String::new();
        s.read_to_string(&mut raw)
            .map_err(|e| format!("read from {addr}: {e}"))?;
        let (head, body) = raw
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("not an HTTP reply from {addr}: {raw:?}"))?;
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("no status line from {addr}: {head:?}"))?;
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
            .collect();
        Ok(HttpReply {
            status,
            headers,
            body: body.to_string(),
        })
    })
    .map_err(|e| e.to_string())?
}
