//! An interface's XDP features from the kernel's `netdev` generic netlink
//! family (Linux 6.3): `NETDEV_CMD_DEV_GET` answers
//! `NETDEV_A_DEV_XDP_FEATURES`, the bits of [`crate::facts::xdp_act`]. It
//! says whether the driver runs XDP natively and whether the device takes
//! redirected frames (on a veth: whether its peer has XDP or GRO), without
//! attaching anything.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
const NLA_TYPE_MASK: u16 = 0x3fff;

fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + payload.len() + 3);
    v.extend_from_slice(&((payload.len() + 4) as u16).to_ne_bytes());
    v.extend_from_slice(&kind.to_ne_bytes());
    v.extend_from_slice(payload);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

/// A generic netlink request: nlmsghdr, genlmsghdr, attributes.
fn request(family: u16, cmd: u8, version: u8, attrs: &[u8]) -> Vec<u8> {
    let len = 16 + 4 + attrs.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&family.to_ne_bytes());
    m.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    m.extend_from_slice(&[cmd, version, 0, 0]);
    m.extend_from_slice(attrs);
    m
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The attributes of the first answer in `msg`: (type, payload); an
/// NLMSG_ERROR answer becomes its errno.
fn answer_attributes(msg: &[u8]) -> io::Result<Vec<(u16, Vec<u8>)>> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "short generic netlink answer");
    let len = u32_at(msg, 0).ok_or_else(bad)? as usize;
    let kind = u16_at(msg, 4).ok_or_else(bad)?;
    if kind == libc::NLMSG_ERROR as u16 {
        let errno = u32_at(msg, 16).ok_or_else(bad)? as i32;
        return Err(io::Error::from_raw_os_error(-errno));
    }
    if len > msg.len() || len < 20 {
        return Err(bad());
    }
    let mut out = Vec::new();
    let b = &msg[20..len];
    let mut at = 0;
    while let (Some(l), Some(t)) = (u16_at(b, at), u16_at(b, at + 2)) {
        let l = l as usize;
        if l < 4 || at + l > b.len() {
            break;
        }
        out.push((t & NLA_TYPE_MASK, b[at + 4..at + l].to_vec()));
        at += (l + 3) & !3;
    }
    Ok(out)
}

fn ask(sock: &OwnedFd, req: &[u8]) -> io::Result<Vec<(u16, Vec<u8>)>> {
    // SAFETY: req is a valid buffer of its length.
    let sent = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 16384];
    // SAFETY: buf is a valid writable buffer of its length.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    answer_attributes(&buf[..n as usize])
}

/// The XDP features of interface `ifindex` in the calling thread's network
/// namespace.
pub fn xdp_features(ifindex: u32) -> io::Result<u64> {
    // SAFETY: plain socket(2); the fd is owned right away.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_GENERIC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket(2).
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let tv = libc::timeval {
        tv_sec: 2,
        tv_usec: 0,
    };
    // SAFETY: setsockopt with a live timeval of the right size.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        );
    }
    let family = ask(
        &sock,
        &request(
            GENL_ID_CTRL,
            CTRL_CMD_GETFAMILY,
            1,
            &attr(CTRL_ATTR_FAMILY_NAME, b"netdev\0"),
        ),
    )?
    .into_iter()
    .find(|(t, _)| *t == CTRL_ATTR_FAMILY_ID)
    .and_then(|(_, v)| u16_at(&v, 0))
    .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no netdev netlink family"))?;
    ask(
        &sock,
        &request(
            family,
            NETDEV_CMD_DEV_GET,
            1,
            &attr(NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes()),
        ),
    )?
    .into_iter()
    .find(|(t, _)| *t == NETDEV_A_DEV_XDP_FEATURES)
    .and_then(|(_, v)| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)))
    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no xdp-features in the answer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_give_their_attributes_and_errors_their_errno() {
        let mut body = attr(NETDEV_A_DEV_IFINDEX, &7u32.to_ne_bytes());
        body.extend(attr(NETDEV_A_DEV_XDP_FEATURES, &0x23u64.to_ne_bytes()));
        let msg = request(0x22, NETDEV_CMD_DEV_GET, 1, &body);
        let a = answer_attributes(&msg).unwrap();
        assert_eq!(a[0], (NETDEV_A_DEV_IFINDEX, 7u32.to_ne_bytes().to_vec()));
        assert_eq!(
            a[1],
            (NETDEV_A_DEV_XDP_FEATURES, 0x23u64.to_ne_bytes().to_vec())
        );
        let mut err = vec![0u8; 36];
        err[0..4].copy_from_slice(&36u32.to_ne_bytes());
        err[4..6].copy_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        err[16..20].copy_from_slice(&(-libc::ENODEV).to_ne_bytes());
        assert_eq!(
            answer_attributes(&err).unwrap_err().raw_os_error(),
            Some(libc::ENODEV)
        );
    }
}
