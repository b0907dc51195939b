//! A background capture of every frame on some interfaces, with arrival times.
//!
//! Why: failover tests must show *who* sent each ARP reply and neighbour advertisement on a
//! segment for the whole test, not sample it. A capture on the switch's port towards each
//! node sees every frame that node sends, whatever its destination, so the sender of a frame
//! is its port, not a MAC address it could claim.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Result, bail};

use crate::netns::Netns;

/// One captured frame.
#[derive(Debug, Clone)]
pub struct Frame {
    /// When it was read (monotonic).
    pub at: Instant,
    /// The interface it was captured on.
    pub interface: String,
    /// The frame, from the Ethernet header.
    pub bytes: Vec<u8>,
}

/// Captures frames *received* on interfaces of a namespace (a switch port receives what the
/// node behind it sends) until dropped.
pub struct Sniffer {
    stop: Arc<AtomicBool>,
    frames: Arc<Mutex<Vec<Frame>>>,
    threads: Vec<JoinHandle<()>>,
}

impl Sniffer {
    /// Starts one capture thread per interface of `interfaces` in `ns`; returns once every
    /// socket is bound (so nothing sent after this returns is missed).
    pub fn start(ns: &Netns, interfaces: &[&str]) -> Result<Sniffer> {
        let stop = Arc::new(AtomicBool::new(false));
        let frames = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for name in interfaces {
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let owned = name.to_string();
            let (stop, frames) = (Arc::clone(&stop), Arc::clone(&frames));
            threads.push(ns.enter_thread(move || {
                let name = owned;
                let sock = match open(&name) {
                    Ok(s) => {
                        let _ = ready_tx.send(Ok(()));
                        s
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                capture(&sock, &name, &stop, &frames);
            }));
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => bail!("capturing on {name}: {e}"),
                Err(_) => bail!("the capture thread for {name} died"),
            }
        }
        Ok(Sniffer {
            stop,
            frames,
            threads,
        })
    }

    /// Every frame captured so far, in arrival order.
    pub fn frames(&self) -> Vec<Frame> {
        let mut v = self
            .frames
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        v.sort_by_key(|f| f.at);
        v
    }
}

impl Drop for Sniffer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

struct Socket {
    fd: OwnedFd,
    ifindex: i32,
}

fn open(name: &str) -> Result<Socket> {
    let c = std::ffi::CString::new(name)?;
    // SAFETY: a valid NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if ifindex == 0 {
        bail!("no interface {name}");
    }
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket call; the fd is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            i32::from(proto),
        )
    };
    if fd < 0 {
        bail!("socket: {}", std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: zeroed sockaddr_ll is valid; bind gets its exact size.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const sll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if rc != 0 {
        bail!("bind: {}", std::io::Error::last_os_error());
    }
    Ok(Socket {
        fd,
        ifindex: ifindex as i32,
    })
}

fn capture(sock: &Socket, name: &str, stop: &AtomicBool, frames: &Mutex<Vec<Frame>>) {
    let mut buf = vec![0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        let mut pfd = libc::pollfd {
            fd: sock.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; 50 ms so a stop is noticed promptly.
        let rc = unsafe { libc::poll(&mut pfd, 1, 50) };
        if rc <= 0 {
            continue;
        }
        // SAFETY: buffers valid for the lengths passed.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        let n = unsafe {
            libc::recvfrom(
                sock.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
                (&raw mut sll).cast(),
                &mut len,
            )
        };
        if n <= 0 || sll.sll_ifindex != sock.ifindex || sll.sll_pkttype == libc::PACKET_OUTGOING {
            continue;
        }
        frames
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Frame {
                at: Instant::now(),
                interface: name.to_string(),
                bytes: buf[..n as usize].to_vec(),
            });
    }
}
