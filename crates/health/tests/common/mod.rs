//! Loopback servers for the probe and prober tests.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A TCP listener that accepts, counts and closes connections.
pub struct Counting {
    pub addr: SocketAddr,
    pub count: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Counting {
    /// Binds `addr` (port 0 for a free port).
    pub async fn bind(addr: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let count = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&count);
        let task = tokio::spawn(async move {
            loop {
                if let Ok((stream, _)) = listener.accept().await {
                    c.fetch_add(1, Ordering::SeqCst);
                    drop(stream);
                }
            }
        });
        Ok(Counting { addr, count, task })
    }

    /// Rebinds a closed listener's address.
    pub async fn rebind(addr: SocketAddr) -> Self {
        Counting::bind(&addr.to_string()).await.expect("rebind")
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Closes the listening socket and returns its address; connections are
    /// refused from then on.
    pub async fn close(self) -> SocketAddr {
        self.task.abort();
        let _ = self.task.await;
        self.addr
    }
}

/// A port with nothing listening on it.
pub async fn closed_port() -> SocketAddr {
    Counting::bind("127.0.0.1:0").await.unwrap().close().await
}

/// What a test HTTP server does with each connection after reading the
/// request head.
#[derive(Clone)]
pub enum Reply {
    /// Writes these bytes (one write each, with a short pause between) and
    /// closes.
    Chunks(Vec<&'static [u8]>),
    /// Writes `HTTP/1.1 {status} X` with the status read at that moment.
    Status(Arc<AtomicU16>),
    /// Never answers; holds the connection open.
    Silent,
    /// Closes without answering.
    Close,
}

/// A tiny HTTP server on 127.0.0.1 recording the request heads it receives.
pub struct Http {
    pub addr: SocketAddr,
    pub requests: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl Drop for Http {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Http {
    pub async fn start(reply: Reply) -> Self {
        Http::start_on("127.0.0.1:0", reply).await.unwrap()
    }

    pub async fn start_on(addr: &str, reply: Reply) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let reqs = Arc::clone(&requests);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(serve(stream, reply.clone(), Arc::clone(&reqs)));
            }
        });
        Ok(Http {
            addr,
            requests,
            task,
        })
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

async fn serve(mut stream: TcpStream, reply: Reply, requests: Arc<Mutex<Vec<String>>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    requests
        .lock()
        .unwrap()
        .push(String::from_utf8_lossy(&head).into_owned());
    match reply {
        Reply::Chunks(chunks) => {
            for (i, c) in chunks.iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                if stream.write_all(c).await.is_err() {
                    return;
                }
            }
        }
        Reply::Status(status) => {
            let s = status.load(Ordering::SeqCst);
            let resp = format!("HTTP/1.1 {s} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            let _ = stream.write_all(resp.as_bytes()).await;
        }
        Reply::Silent => tokio::time::sleep(Duration::from_secs(30)).await,
        Reply::Close => {}
    }
}
