//! A TCP relay from a loopback port in the test process's own namespace to the API server inside
//! the test bed's namespace.
//!
//! Why a relay instead of a veth to the host: a host-side address and route would be a shared,
//! machine-wide resource (several test binaries and developers run at once on one machine), and
//! test traffic must stay on loopback or inside namespaces the test made. The relay needs neither:
//! it listens on `127.0.0.1:<ephemeral>` here, and its outgoing sockets are created by a thread
//! that sits in the test bed's namespace (a socket belongs to the namespace of the thread that
//! made it), so bytes go loopback → process → loopback of the namespace. TLS passes through
//! untouched; the serving certificate names 127.0.0.1.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use rivora_lab::Netns;

/// A running relay; [`Relay::stop`] (or drop) stops accepting. Open connections end when the API
/// server goes away.
#[derive(Debug)]
pub struct Relay {
    local: SocketAddr,
    stopping: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

type DialReply = mpsc::Sender<std::io::Result<TcpStream>>;

impl Relay {
    /// Listens on 127.0.0.1 (ephemeral port) and relays every connection to `target` as seen from
    /// inside `ns`.
    pub fn start(ns: &Netns, target: SocketAddr) -> Result<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .context("binding the API server relay on 127.0.0.1")?;
        let local = listener.local_addr()?;
        let (dial_tx, dial_rx) = mpsc::channel::<DialReply>();
        // The dialer lives in the namespace; it ends when the acceptor drops its sender.
        ns.enter_thread(move || {
            for reply in dial_rx {
                let _ = reply.send(TcpStream::connect_timeout(&target, Duration::from_secs(5)));
            }
        });
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&stopping);
        let acceptor = std::thread::Builder::new()
            .name("testbed-relay".into())
            .spawn(move || accept_loop(listener, dial_tx, stop))
            .context("spawning the relay thread")?;
        Ok(Relay {
            local,
            stopping,
            acceptor: Some(acceptor),
        })
    }

    /// The loopback address clients in the test process connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Stops accepting and waits for the acceptor thread.
    pub fn stop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept().
        let _ = TcpStream::connect_timeout(&self.local, Duration::from_millis(200));
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: TcpListener, dial: mpsc::Sender<DialReply>, stopping: Arc<AtomicBool>) {
    for conn in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = conn else { continue };
        let (tx, rx) = mpsc::channel();
        if dial.send(tx).is_err() {
            return;
        }
        match rx.recv() {
            Ok(Ok(upstream)) => splice(client, upstream),
            // Not listening yet (still starting) or gone: the client sees its connection close,
            // exactly as if it had connected directly.
            Ok(Err(_)) => drop(client),
            Err(_) => return,
        }
    }
}

/// Copies both directions on two threads; each half-closes its write side at EOF so TLS
/// close_notify and HTTP/1 connection ends propagate.
fn splice(a: TcpStream, b: TcpStream) {
    let _ = a.set_nodelay(true);
    let _ = b.set_nodelay(true);
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("testbed-relay-up".into())
        .spawn(move || pump(a, b2));
    let _ = std::thread::Builder::new()
        .name("testbed-relay-down".into())
        .spawn(move || pump(b, a2));
}

fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
