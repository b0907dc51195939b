//! `probe()` against loopback servers.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{Counting, Http, Reply, closed_port};
use rivora_health::{ProbeKind, ProbeSpec, probe};
use tokio::net::{TcpSocket, TcpStream};

fn tcp(target: SocketAddr, timeout_ms: u64) -> ProbeSpec {
    ProbeSpec {
        kind: ProbeKind::Tcp,
        target,
        interval: Duration::from_secs(1),
        timeout: Duration::from_millis(timeout_ms),
        rise: 1,
        fall: 1,
    }
}

fn http(target: SocketAddr, path: &str, expect: (u16, u16), host: Option<&str>) -> ProbeSpec {
    ProbeSpec {
        kind: ProbeKind::Http {
            path: path.into(),
            expect,
            host: host.map(Into::into),
        },
        ..tcp(target, 1000)
    }
}

fn reply(bytes: &'static [u8]) -> Reply {
    Reply::Chunks(vec![bytes])
}

#[tokio::test]
async fn tcp_ok() {
    let l = Counting::bind("127.0.0.1:0").await.unwrap();
    let out = probe(&tcp(l.addr, 1000)).await;
    assert!(out.ok, "{out:?}");
    assert_eq!(out.detail, "ok");
    assert!(out.latency < Duration::from_secs(1));
    for _ in 0..100 {
        if l.count() == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("listener saw {} connections", l.count());
}

#[tokio::test]
async fn tcp_refused() {
    let out = probe(&tcp(closed_port().await, 1000)).await;
    assert!(!out.ok);
    assert_eq!(out.detail, "connect: Connection refused");
}

#[tokio::test]
async fn tcp_timeout_when_accept_queue_is_full() {
    // A listener with backlog 0 that never accepts: once its queue holds a
    // connection, the kernel drops further SYNs and connects hang.
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    let mut full = false;
    for _ in 0..8 {
        match tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
            Ok(Ok(s)) => held.push(s),
            Ok(Err(e)) => panic!("connect: {e}"),
            Err(_) => {
                full = true;
                break;
            }
        }
    }
    if !full {
        eprintln!("accept queue never filled; skipping");
        return;
    }
    let out = probe(&tcp(addr, 300)).await;
    assert!(!out.ok);
    assert_eq!(out.detail, "timeout after 300ms");
    assert!(out.latency >= Duration::from_millis(300), "{out:?}");
    assert!(out.latency < Duration::from_secs(2), "{out:?}");
}

#[tokio::test]
async fn tcp_ipv6_loopback() {
    let Ok(l) = Counting::bind("[::1]:0").await else {
        eprintln!("no IPv6 loopback; skipping");
        return;
    };
    let out = probe(&tcp(l.addr, 1000)).await;
    assert!(out.ok, "{out:?}");
    let out = probe(&tcp(l.close().await, 1000)).await;
    assert_eq!(out.detail, "connect: Connection refused");
}

#[tokio::test]
async fn http_200_ok_and_request_format() {
    let s = Http::start(reply(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")).await;
    let out = probe(&http(s.addr, "/healthz", (200, 399), None)).await;
    assert!(out.ok, "{out:?}");
    assert_eq!(out.detail, "ok");
    let expected = format!(
        "GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nUser-Agent: rivora-health\r\n\r\n",
        s.addr
    );
    assert_eq!(s.requests(), vec![expected]);
}

#[tokio::test]
async fn http_host_header_and_default_path() {
    let s = Http::start(reply(b"HTTP/1.0 204 No Content\r\n\r\n")).await;
    let out = probe(&http(s.addr, "", (200, 299), Some("api.example"))).await;
    assert!(out.ok, "{out:?}");
    let reqs = s.requests();
    assert!(
        reqs[0].starts_with("GET / HTTP/1.1\r\nHost: api.example\r\n"),
        "{reqs:?}"
    );
}

#[tokio::test]
async fn http_503_fails() {
    let s = Http::start(reply(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")).await;
    let out = probe(&http(s.addr, "/", (200, 399), None)).await;
    assert!(!out.ok);
    assert_eq!(out.detail, "http status 503");
}

#[tokio::test]
async fn http_custom_status_range() {
    let s = Http::start(reply(
        b"HTTP/1.1 301 Moved Permanently\r\nLocation: /x\r\n\r\n",
    ))
    .await;
    let out = probe(&http(s.addr, "/", (200, 299), None)).await;
    assert!(!out.ok);
    assert_eq!(out.detail, "http status 301");
    let out = probe(&http(s.addr, "/", (300, 399), None)).await;
    assert!(out.ok, "{out:?}");
    let out = probe(&http(s.addr, "/", (301, 301), None)).await;
    assert!(out.ok, "{out:?}");
}

#[tokio::test]
async fn http_status_line_in_pieces() {
    let s = Http::start(Reply::Chunks(vec![b"HTTP/1.1 2", b"00 O", b"K\r\n\r\n"])).await;
    let out = probe(&http(s.addr, "/", (200, 200), None)).await;
    assert!(out.ok, "{out:?}");
}

#[tokio::test]
async fn http_malformed_response_fails() {
    for (body, want) in [
        (
            &b"garbage\r\n\r\n"[..],
            "http: malformed status line \"garbage\"",
        ),
        (
            b"HTTP/1.1 OK\r\n\r\n",
            "http: malformed status line \"HTTP/1.1 OK\"",
        ),
        (
            b"HTTP/1.1 200",
            "http: connection closed inside the status line",
        ),
    ] {
        let s = Http::start(Reply::Chunks(vec![body])).await;
        let out = probe(&http(s.addr, "/", (200, 399), None)).await;
        assert!(!out.ok);
        assert_eq!(out.detail, want);
    }
    let s = Http::start(Reply::Chunks(vec![&[b'x'; 2000][..]])).await;
    let out = probe(&http(s.addr, "/", (200, 399), None)).await;
    assert_eq!(out.detail, "http: status line too long");
}

#[tokio::test]
async fn http_closed_without_response_fails() {
    let s = Http::start(Reply::Close).await;
    let out = probe(&http(s.addr, "/", (200, 399), None)).await;
    assert!(!out.ok);
    assert_eq!(out.detail, "http: connection closed without a response");
}

#[tokio::test]
async fn http_timeout_when_server_never_answers() {
    let s = Http::start(Reply::Silent).await;
    let mut spec = http(s.addr, "/", (200, 399), None);
    spec.timeout = Duration::from_millis(300);
    let out = probe(&spec).await;
    assert!(!out.ok);
    assert_eq!(out.detail, "timeout after 300ms");
    assert!(out.latency >= Duration::from_millis(300), "{out:?}");
    assert!(out.latency < Duration::from_secs(2), "{out:?}");
    // The request was sent: the timeout covers the response, not the connect.
    assert_eq!(s.requests().len(), 1);
}

#[tokio::test]
async fn http_refused() {
    let out = probe(&http(closed_port().await, "/", (200, 399), None)).await;
    assert!(!out.ok);
    assert_eq!(out.detail, "connect: Connection refused");
}

#[tokio::test]
async fn http_invalid_path_is_not_sent() {
    let s = Http::start(reply(b"HTTP/1.1 200 OK\r\n\r\n")).await;
    let out = probe(&http(s.addr, "/a b\r\nX: y", (200, 399), None)).await;
    assert!(!out.ok);
    assert!(
        out.detail.starts_with("invalid probe: http path"),
        "{}",
        out.detail
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(s.requests().is_empty());
}

#[tokio::test]
async fn http_ipv6_loopback() {
    let Ok(s) = Http::start_on("[::1]:0", reply(b"HTTP/1.1 200 OK\r\n\r\n")).await else {
        eprintln!("no IPv6 loopback; skipping");
        return;
    };
    let spec = http(s.addr, "/h", (200, 200), None);
    assert_eq!(
        spec.target_display(),
        format!("http://[::1]:{}/h", s.addr.port())
    );
    let out = probe(&spec).await;
    assert!(out.ok, "{out:?}");
    assert!(s.requests()[0].contains(&format!("Host: [::1]:{}\r\n", s.addr.port())));
}
