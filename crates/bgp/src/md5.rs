//! TCP-MD5 signatures (RFC 2385) through the Linux `TCP_MD5SIG` socket option.
//!
//! Why here and not in a crate: it is one `setsockopt` with a kernel struct
//! the `libc` crate does not define (`struct tcp_md5sig` from
//! `<linux/tcp.h>`), and getting its layout wrong silently breaks sessions,
//! so it is spelled out and size-checked in one place.

use std::io;
use std::mem;
use std::net::IpAddr;
use std::os::fd::RawFd;

/// Longest key the kernel accepts (`TCP_MD5SIG_MAXKEYLEN`).
pub const MAX_KEY_LEN: usize = 80;

/// `struct tcp_md5sig` from `<linux/tcp.h>`.
#[repr(C)]
struct TcpMd5Sig {
    tcpm_addr: libc::sockaddr_storage,
    tcpm_flags: u8,
    tcpm_prefixlen: u8,
    tcpm_keylen: u16,
    tcpm_ifindex: libc::c_int,
    tcpm_key: [u8; MAX_KEY_LEN],
}

// The kernel's struct is 216 bytes on every Linux ABI (128-byte sockaddr
// storage, 8 bytes of fields, 80-byte key).
const _: () = assert!(mem::size_of::<TcpMd5Sig>() == 216);

/// Makes the kernel sign (and require signatures on) every segment this
/// socket exchanges with `peer`, using `key`.
///
/// Why before connect/listen: the SYN must already carry the signature; a
/// peer that expects one drops unsigned (or wrongly signed) SYNs silently.
pub fn set_tcp_md5(fd: RawFd, peer: IpAddr, key: &[u8]) -> io::Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("TCP-MD5 key is {} bytes, at most {MAX_KEY_LEN}", key.len()),
        ));
    }
    // SAFETY: all-zero bytes are a valid value for this plain C struct.
    let mut sig: TcpMd5Sig = unsafe { mem::zeroed() };
    match peer {
        IpAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger than and suitably aligned
            // for sockaddr_in.
            let sin = unsafe {
                &mut *(&mut sig.tcpm_addr as *mut libc::sockaddr_storage as *mut libc::sockaddr_in)
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.octets());
        }
        IpAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe {
                &mut *(&mut sig.tcpm_addr as *mut libc::sockaddr_storage as *mut libc::sockaddr_in6)
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_addr.s6_addr = a.octets();
        }
    }
    sig.tcpm_keylen = key.len() as u16;
    sig.tcpm_key[..key.len()].copy_from_slice(key);
    // SAFETY: fd is a socket owned by the caller; the pointer and length
    // describe `sig`, which outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_MD5SIG,
            &sig as *const TcpMd5Sig as *const libc::c_void,
            mem::size_of::<TcpMd5Sig>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn rejects_long_keys() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let e = set_tcp_md5(s.as_raw_fd(), "127.0.0.1".parse().unwrap(), &[b'x'; 81]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn sets_a_key_on_a_tcp_socket() {
        // A TCP socket that is never connected: no traffic at all.
        let s = tokio_free_tcp_socket();
        set_tcp_md5(s, "127.0.0.1".parse().unwrap(), b"secret").unwrap();
        // SAFETY: we own s.
        unsafe { libc::close(s) };
    }

    fn tokio_free_tcp_socket() -> RawFd {
        // SAFETY: plain socket(2) call.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        assert!(fd >= 0);
        fd
    }
}
