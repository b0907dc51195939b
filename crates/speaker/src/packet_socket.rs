//! AF_PACKET sockets bound to one interface, and the interface look-ups the
//! responder needs. Every `unsafe` block of the crate lives here, next to
//! the reason it is sound.
//!
//! Why AF_PACKET: the VIP is not configured on any interface, so the kernel
//! neither answers ARP/NDP for it nor hands such requests to an ordinary
//! socket; a packet socket sees the raw frames of one interface and can send
//! raw frames back out of it.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, SockFilter, Socket, Type};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::frame::{ETH_HLEN, MacAddr};

/// What `recvfrom` reports about one received frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    /// Bytes copied into the buffer.
    pub len: usize,
    /// True when the frame was longer than the buffer (and cut).
    pub truncated: bool,
    /// `sll_pkttype`: host, broadcast, multicast, other host, outgoing.
    pub pkttype: u8,
    /// `sll_ifindex`: the interface the frame was seen on.
    pub ifindex: i32,
}

/// A non-blocking `AF_PACKET`/`SOCK_RAW` socket bound to one interface and
/// one EtherType, with a classic BPF filter.
#[derive(Debug)]
pub(crate) struct PacketSocket {
    sock: Socket,
    ifindex: i32,
}

impl PacketSocket {
    /// Opens a packet socket that receives only `ethertype` frames of
    /// interface `ifindex` that pass `filter`.
    ///
    /// Why in this order: the socket is created with protocol 0, which
    /// receives nothing; the filter is attached before `bind` sets the
    /// protocol and interface, so not a single frame from another interface
    /// or unfiltered frame can be queued in between.
    pub(crate) fn open(
        ifindex: u32,
        ethertype: u16,
        filter: &[libc::sock_filter],
    ) -> io::Result<Self> {
        let ifindex = i32::try_from(ifindex).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "interface index too large")
        })?;
        let sock = Socket::new(Domain::PACKET, Type::RAW, None)?;
        let filter: Vec<SockFilter> = filter
            .iter()
            .map(|i| SockFilter::new(i.code, i.jt, i.jf, i.k))
            .collect();
        sock.attach_filter(&filter)?;
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ethertype.to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: sll is a valid sockaddr_ll and the length passed is its size.
        let rc = unsafe {
            libc::bind(
                sock.as_raw_fd(),
                (&raw const sll).cast::<libc::sockaddr>(),
                mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        sock.set_nonblocking(true)?;
        Ok(PacketSocket { sock, ifindex })
    }

    /// Receives one frame without blocking (`WouldBlock` when none is queued).
    pub(crate) fn recv(&self, buf: &mut [u8]) -> io::Result<Received> {
        // SAFETY: zeroed sockaddr_ll is valid; recvfrom writes at most `len`
        // bytes into it and at most buf.len() bytes into buf.
        let mut sll: libc::sockaddr_ll = unsafe { mem::zeroed() };
        let mut len = mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        let n = unsafe {
            libc::recvfrom(
                self.sock.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                // MSG_TRUNC: return the real frame length, so a cut frame is
                // recognised instead of parsed.
                libc::MSG_TRUNC,
                (&raw mut sll).cast::<libc::sockaddr>(),
                &mut len,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        Ok(Received {
            len: n.min(buf.len()),
            truncated: n > buf.len(),
            pkttype: sll.sll_pkttype,
            ifindex: sll.sll_ifindex,
        })
    }

    /// Sends one complete Ethernet frame out of the bound interface.
    pub(crate) fn send(&self, frame: &[u8]) -> io::Result<()> {
        let n = self.sock.send(frame)?;
        if n != frame.len() {
            return Err(io::Error::other(format!(
                "short send: {n} of {} bytes",
                frame.len()
            )));
        }
        Ok(())
    }

    /// Adds (`join`) or removes a link-layer multicast address to/from the
    /// interface's receive filter, for as long as this socket lives.
    ///
    /// Why: neighbour solicitations go to the target's solicited-node group
    /// (`33:33:ff:xx:xx:xx` on Ethernet). A NIC only passes up multicast
    /// frames of groups in its filter; the VIP is not configured, so the
    /// kernel never joined its group. `PACKET_ADD_MEMBERSHIP` adds exactly
    /// that group (visible in `ip maddr`), unlike all-multicast mode, which
    /// would make the NIC pass every multicast frame of the segment up to
    /// the CPU. The kernel drops the membership when the socket closes, so a
    /// crashed responder leaves nothing behind.
    pub(crate) fn set_membership(&self, mac: MacAddr, join: bool) -> io::Result<()> {
        let mut addr = [0u8; 8];
        addr[..6].copy_from_slice(&mac.0);
        let mreq = libc::packet_mreq {
            mr_ifindex: self.ifindex,
            mr_type: libc::PACKET_MR_MULTICAST as u16,
            mr_alen: 6,
            mr_address: addr,
        };
        let opt = if join {
            libc::PACKET_ADD_MEMBERSHIP
        } else {
            libc::PACKET_DROP_MEMBERSHIP
        };
        // SAFETY: mreq is a valid packet_mreq and the length is its size.
        let rc = unsafe {
            libc::setsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_PACKET,
                opt,
                (&raw const mreq).cast(),
                mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl PacketSocket {
    /// Registers the socket with the current tokio runtime's reactor for
    /// readability (must be called within a runtime).
    pub(crate) fn into_async(self) -> io::Result<AsyncFd<PacketSocket>> {
        // SAFETY: PacketSocket owns its descriptor (socket2::Socket) and
        // closes it only when dropped, and as_raw_fd always returns that same
        // descriptor, so it stays open and unchanged for the AsyncFd's life.
        unsafe { AsyncFd::register_with_interest(self, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

/// Index of interface `name` in the calling thread's network namespace.
pub(crate) fn interface_index(name: &str) -> io::Result<u32> {
    let c = c_ifname(name)?;
    // SAFETY: c is NUL-terminated and outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        let e = io::Error::last_os_error();
        // ENODEV is what "no such interface" looks like; std maps it to
        // Uncategorized, callers want NotFound.
        let kind = if e.raw_os_error() == Some(libc::ENODEV) {
            io::ErrorKind::NotFound
        } else {
            e.kind()
        };
        return Err(io::Error::new(kind, format!("interface {name:?}: {e}")));
    }
    Ok(idx)
}

/// The MAC address of interface `name`, read with `SIOCGIFHWADDR` through
/// `fd` (any socket of the namespace).
///
/// Fails with `Unsupported` unless the interface is Ethernet-like (ARP
/// hardware type Ethernet): ARP and NDP frames are built for Ethernet.
pub(crate) fn interface_mac(fd: RawFd, name: &str) -> io::Result<MacAddr> {
    let c = c_ifname(name)?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(c.as_bytes_with_nul()) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: ifr is a valid ifreq with a NUL-terminated name; the kernel
    // fills ifru_hwaddr.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFHWADDR as _, &raw mut ifr) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("reading the MAC address of {name:?}: {e}"),
        ));
    }
    // SAFETY: SIOCGIFHWADDR succeeded, so the hwaddr member is the one set.
    let hw = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    if hw.sa_family != libc::ARPHRD_ETHER {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "interface {name:?} has link type {} (not Ethernet); ARP/NDP answers need an Ethernet interface",
                hw.sa_family
            ),
        ));
    }
    let mut mac = [0u8; 6];
    for (dst, src) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *dst = *src as u8;
    }
    Ok(MacAddr(mac))
}

/// Whether `name` is administratively up and has carrier (`IFF_UP` and
/// `IFF_RUNNING`), read with `SIOCGIFFLAGS` on `fd` (any socket of the
/// interface's network namespace).
pub(crate) fn interface_running(fd: RawFd, name: &str) -> io::Result<bool> {
    let c = c_ifname(name)?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(c.as_bytes_with_nul()) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: ifr is a valid ifreq with a NUL-terminated name; the kernel
    // fills ifru_flags.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &raw mut ifr) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("reading the flags of {name:?}: {e}"),
        ));
    }
    // SAFETY: SIOCGIFFLAGS succeeded, so the flags member is the one set.
    let flags = i32::from(unsafe { ifr.ifr_ifru.ifru_flags });
    let want = libc::IFF_UP | libc::IFF_RUNNING;
    Ok(flags & want == want)
}

fn c_ifname(name: &str) -> io::Result<std::ffi::CString> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', ' ']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a valid interface name"),
        ));
    }
    std::ffi::CString::new(name).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a valid interface name"),
        )
    })
}

// Classic BPF building blocks (linux/filter.h).
const BPF_LD_H_ABS: u16 = (libc::BPF_LD | libc::BPF_H | libc::BPF_ABS) as u16;
const BPF_LD_B_ABS: u16 = (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
/// Ancillary load of `skb->pkt_type` (SKF_AD_OFF + SKF_AD_PKTTYPE).
const SKF_PKTTYPE: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_PKTTYPE) as u32;
/// Accept: copy up to this many bytes (every frame we want is far shorter).
const ACCEPT: u32 = 0xffff;

/// Type of one classic BPF instruction.
type Insn = libc::sock_filter;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    libc::sock_filter { code, jt, jf, k }
}
fn ld_h(k: usize) -> Insn {
    insn(BPF_LD_H_ABS, 0, 0, k as u32)
}
fn ld_b(k: usize) -> Insn {
    insn(BPF_LD_B_ABS, 0, 0, k as u32)
}
fn ld_pkttype() -> Insn {
    insn(BPF_LD_B_ABS, 0, 0, SKF_PKTTYPE)
}
fn ret(k: u32) -> Insn {
    insn(BPF_RET_K, 0, 0, k)
}

/// Builds a program of `checks` (each a load and a jump that falls through
/// on success), then accept, then drop; fills in the jump distances.
fn program(checks: &[(Insn, u32, bool)]) -> Vec<Insn> {
    let mut p = Vec::with_capacity(checks.len() * 2 + 2);
    let n = checks.len();
    for (i, (load, k, must_equal)) in checks.iter().enumerate() {
        // Instructions left after this jump up to "ret drop": the remaining
        // (load, jump) pairs plus "ret accept".
        let to_drop = ((n - i - 1) * 2 + 1) as u8;
        p.push(*load);
        // `if A == k` falls through (0) or jumps to drop, or the reverse.
        p.push(if *must_equal {
            insn(BPF_JEQ_K, 0, to_drop, *k)
        } else {
            insn(BPF_JEQ_K, to_drop, 0, *k)
        });
    }
    p.push(ret(ACCEPT));
    p.push(ret(0));
    p
}

/// Socket filter passing only ARP requests for Ethernet/IPv4 addressed to
/// this host (broadcast, multicast or our MAC: not other hosts' unicast
/// frames seen in promiscuous mode, not frames of unknown VLANs, which the
/// kernel also marks as "other host").
///
/// Why a kernel filter: a busy segment carries many ARP frames; only
/// requests can need an answer, and dropping the rest in the kernel saves a
/// wake-up and a copy per frame. Userspace checks everything again.
pub(crate) fn arp_request_filter() -> Vec<Insn> {
    let a = ETH_HLEN;
    program(&[
        (ld_pkttype(), u32::from(libc::PACKET_OTHERHOST), false),
        (ld_pkttype(), u32::from(libc::PACKET_OUTGOING), false),
        (ld_h(12), 0x0806, true),
        (ld_h(a), 1, true),          // hardware type Ethernet
        (ld_h(a + 2), 0x0800, true), // protocol type IPv4
        (ld_h(a + 4), 0x0604, true), // address lengths 6 and 4
        (ld_h(a + 6), 1, true),      // operation: request
    ])
}

/// Socket filter passing only ICMPv6 neighbour solicitations (IPv6 with
/// next header ICMPv6, no extension headers, hop limit 255, type 135)
/// addressed to this host.
///
/// Why: the IPv6 packet socket would otherwise wake the responder for every
/// IPv6 packet on the interface.
pub(crate) fn neighbor_solicitation_filter() -> Vec<Insn> {
    let ip = ETH_HLEN;
    program(&[
        (ld_pkttype(), u32::from(libc::PACKET_OTHERHOST), false),
        (ld_pkttype(), u32::from(libc::PACKET_OUTGOING), false),
        (ld_h(12), 0x86dd, true),
        (ld_b(ip + 6), 58, true),   // next header ICMPv6
        (ld_b(ip + 7), 255, true),  // hop limit 255
        (ld_b(ip + 40), 135, true), // neighbour solicitation
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny interpreter for the subset of classic BPF the filters use, so
    /// the programs (and their jump offsets) are tested without a socket.
    fn run(prog: &[Insn], pkt: &[u8], pkttype: u8) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0usize;
        loop {
            let ins = prog[pc];
            match ins.code {
                c if c == BPF_LD_H_ABS || c == BPF_LD_B_ABS => {
                    if ins.k == SKF_PKTTYPE {
                        a = u32::from(pkttype);
                    } else {
                        let k = ins.k as usize;
                        let w = if c == BPF_LD_H_ABS { 2 } else { 1 };
                        let Some(b) = pkt.get(k..k + w) else {
                            return 0; // out of bounds load: drop
                        };
                        a = b.iter().fold(0, |acc, x| (acc << 8) | u32::from(*x));
                    }
                    pc += 1;
                }
                c if c == BPF_JEQ_K => {
                    pc += 1 + usize::from(if a == ins.k { ins.jt } else { ins.jf });
                }
                c if c == BPF_RET_K => return ins.k,
                c => panic!("unexpected opcode {c:#x}"),
            }
        }
    }

    fn arp(op: u8) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, op]);
        f.resize(42, 0);
        f
    }

    fn ns(hop: u8, ty: u8) -> Vec<u8> {
        let mut f = vec![0x33; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x86, 0xdd, 0x60, 0, 0, 0, 0, 24, 58, hop]);
        f.resize(54, 0);
        f.push(ty);
        f.resize(78, 0);
        f
    }

    #[test]
    fn arp_filter_passes_only_requests_to_us() {
        let p = arp_request_filter();
        assert_eq!(run(&p, &arp(1), libc::PACKET_BROADCAST), ACCEPT);
        assert_eq!(run(&p, &arp(1), libc::PACKET_HOST), ACCEPT);
        assert_eq!(run(&p, &arp(2), libc::PACKET_HOST), 0);
        assert_eq!(run(&p, &arp(1), libc::PACKET_OTHERHOST), 0);
        assert_eq!(run(&p, &arp(1), libc::PACKET_OUTGOING), 0);
        let mut f = arp(1);
        f[19] = 16;
        assert_eq!(run(&p, &f, libc::PACKET_HOST), 0);
        assert_eq!(run(&p, &f[..20], libc::PACKET_HOST), 0);
        assert_eq!(run(&p, &ns(255, 135), libc::PACKET_HOST), 0);
    }

    #[test]
    fn ns_filter_passes_only_solicitations_to_us() {
        let p = neighbor_solicitation_filter();
        assert_eq!(run(&p, &ns(255, 135), libc::PACKET_MULTICAST), ACCEPT);
        assert_eq!(run(&p, &ns(255, 135), libc::PACKET_HOST), ACCEPT);
        assert_eq!(run(&p, &ns(64, 135), libc::PACKET_HOST), 0);
        assert_eq!(run(&p, &ns(255, 136), libc::PACKET_HOST), 0);
        assert_eq!(run(&p, &ns(255, 135), libc::PACKET_OTHERHOST), 0);
        let mut f = ns(255, 135);
        f[20] = 17;
        assert_eq!(run(&p, &f, libc::PACKET_HOST), 0);
        assert_eq!(run(&p, &f[..50], libc::PACKET_HOST), 0);
        assert_eq!(run(&p, &arp(1), libc::PACKET_HOST), 0);
    }

    #[test]
    fn bad_interface_names_are_rejected() {
        for n in ["", "a/b", "with space", "0123456789abcdef", "nul\0x"] {
            let e = interface_index(n).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{n:?}");
        }
    }
}
