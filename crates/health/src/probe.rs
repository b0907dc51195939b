//! One probe: a TCP connect or an HTTP/1.1 GET, bounded by the timeout.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::spec::{ProbeKind, ProbeSpec, check_http, request_path};

/// Longest status line accepted; a real one is under 40 bytes, and a bound
/// keeps a misbehaving backend from making the probe buffer grow.
const MAX_STATUS_LINE: usize = 1024;

/// The result of one probe, kept whole (not just a bool) so that operators can
/// see why a backend is down and how slow it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOutcome {
    /// Whether the probe counts as a success for [`crate::Tracker`].
    pub ok: bool,
    /// Time from the start of the probe to its result (connect for TCP, the
    /// status line for HTTP, about the timeout when it timed out).
    pub latency: Duration,
    /// Short reason: `ok`, `connect: Connection refused`, `timeout after 1s`,
    /// `http status 503`, ...
    pub detail: String,
}

/// Runs one probe against `spec.target` and reports the outcome; never
/// fails, because every failure is just a failed probe with a reason.
///
/// TCP: the connection must complete within the timeout; it is closed at
/// once. HTTP: connect, send
/// `GET {path} HTTP/1.1` with `Host` (the configured host, else the target
/// address), `Connection: close` and `User-Agent: rivora-health`, and read
/// the status line; the whole exchange must finish within the timeout and
/// the status must be within `expect`. The rest of the response is not read.
///
/// No source address is bound: the kernel chooses it (the VIP is not a local
/// address in NAT mode).
pub async fn probe(spec: &ProbeSpec) -> ProbeOutcome {
    let start = Instant::now();
    let result = tokio::time::timeout(spec.timeout, exchange(spec)).await;
    let latency = start.elapsed();
    let (ok, detail) = match result {
        Ok(Ok(())) => (true, "ok".to_owned()),
        Ok(Err(detail)) => (false, detail),
        Err(_) => (false, format!("timeout after {:?}", spec.timeout)),
    };
    ProbeOutcome {
        ok,
        latency,
        detail,
    }
}

/// The probe without its timeout; `Err` carries the failure detail.
async fn exchange(spec: &ProbeSpec) -> Result<(), String> {
    // Reject a malformed request before opening any connection.
    if let ProbeKind::Http { path, expect, host } = &spec.kind {
        check_http(path, *expect, host.as_deref()).map_err(|e| format!("invalid probe: {e}"))?;
    }
    let mut stream = TcpStream::connect(spec.target)
        .await
        .map_err(|e| format!("connect: {}", io_detail(&e)))?;
    let ProbeKind::Http { path, expect, host } = &spec.kind else {
        return Ok(());
    };
    // One small request: send it in one segment rather than waiting for Nagle.
    let _ = stream.set_nodelay(true);
    let host = match host {
        Some(h) => h.clone(),
        None => spec.target.to_string(),
    };
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nUser-Agent: rivora-health\r\n\r\n",
        request_path(path)
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("send: {}", io_detail(&e)))?;
    let line = read_status_line(&mut stream).await?;
    let status = parse_status_line(&line)?;
    if (expect.0..=expect.1).contains(&status) {
        Ok(())
    } else {
        Err(format!("http status {status}"))
    }
}

/// Reads up to the first `\n` and returns the line without its line ending.
async fn read_status_line(stream: &mut TcpStream) -> Result<Vec<u8>, String> {
    let mut buf = Vec::with_capacity(128);
    let mut chunk = [0u8; 512];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("recv: {}", io_detail(&e)))?;
        if n == 0 {
            return Err(if buf.is_empty() {
                "http: connection closed without a response".to_owned()
            } else {
                "http: connection closed inside the status line".to_owned()
            });
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.iter().position(|&b| b == b'\n') {
            buf.truncate(end);
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(buf);
        }
        if buf.len() > MAX_STATUS_LINE {
            return Err("http: status line too long".to_owned());
        }
    }
}

/// Parses `HTTP/x.y NNN[ reason]` and returns the status code.
fn parse_status_line(line: &[u8]) -> Result<u16, String> {
    let malformed = || {
        let shown = String::from_utf8_lossy(&line[..line.len().min(64)]).into_owned();
        format!("http: malformed status line {shown:?}")
    };
    let rest = line.strip_prefix(b"HTTP/").ok_or_else(malformed)?;
    let version_ok =
        rest.len() >= 3 && rest[0].is_ascii_digit() && rest[1] == b'.' && rest[2].is_ascii_digit();
    if !version_ok {
        return Err(malformed());
    }
    let rest = rest[3..].strip_prefix(b" ").ok_or_else(malformed)?;
    if rest.len() < 3 || !rest[..3].iter().all(u8::is_ascii_digit) {
        return Err(malformed());
    }
    if rest.len() > 3 && rest[3] != b' ' {
        return Err(malformed());
    }
    Ok(rest[..3]
        .iter()
        .fold(0u16, |n, d| n * 10 + u16::from(d - b'0')))
}

/// An I/O error as a short message: `Connection refused` rather than
/// `Connection refused (os error 111)`.
fn io_detail(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines() {
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK"), Ok(200));
        assert_eq!(
            parse_status_line(b"HTTP/1.0 503 Service Unavailable"),
            Ok(503)
        );
        assert_eq!(parse_status_line(b"HTTP/1.1 204"), Ok(204));
        assert_eq!(parse_status_line(b"HTTP/1.1 301 "), Ok(301));
        for bad in [
            &b""[..],
            b"HTTP/1.1",
            b"HTTP/1.1 ",
            b"HTTP/1.1 20",
            b"HTTP/1.1 2000",
            b"HTTP/1.1 2x0 OK",
            b"HTTP/11 200 OK",
            b"http/1.1 200 OK",
            b"HTTP/1.1  200 OK",
            b"SSH-2.0-OpenSSH_9.6",
            b"\xff\xfe",
        ] {
            let err = parse_status_line(bad).unwrap_err();
            assert!(err.starts_with("http: malformed status line"), "{err}");
        }
    }

    #[test]
    fn io_details_are_short() {
        let e = io::Error::from_raw_os_error(111);
        assert!(!io_detail(&e).contains("os error"), "{}", io_detail(&e));
        let e = io::Error::other("custom");
        assert_eq!(io_detail(&e), "custom");
    }
}
