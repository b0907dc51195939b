//! Whether a BPF link is still attached, read from the kernel by its ID.
//!
//! Why: rivorad's XDP link can be detached behind its back (`bpftool link detach`, the
//! interface removed and re-created); the program then runs nowhere and the node serves
//! nothing, while everything in rivorad looks fine. The announcers must know, so that a node
//! that cannot serve stops attracting traffic (withdraws its BGP routes, gives up the L2
//! Lease). A detached link keeps its ID and file descriptors but reports interface index 0.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_GET_FD_BY_ID: libc::c_long = 30;

#[repr(C)]
#[derive(Default)]
struct GetFdAttr {
    link_id: u32,
    next_id: u32,
    open_flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The head of `struct bpf_link_info` (UAPI): type, id, prog_id, then a union aligned to 8
/// whose XDP and TCX members start with the interface index.
#[repr(C)]
#[derive(Default)]
struct LinkInfo {
    type_: u32,
    id: u32,
    prog_id: u32,
    _pad: u32,
    ifindex: u32,
    _rest: [u32; 7],
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: attr is a valid, fully initialised bpf_attr prefix of the size passed, live for
    // the call; the kernel writes at most that many bytes.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// The interface index link `id` is attached to: `Ok(None)` when the link no longer exists,
/// `Ok(Some(0))` when it exists but was detached.
pub fn link_ifindex(id: u32) -> io::Result<Option<u32>> {
    let mut get = GetFdAttr {
        link_id: id,
        ..GetFdAttr::default()
    };
    let fd = match bpf(BPF_LINK_GET_FD_BY_ID, &mut get) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    // SAFETY: on success the kernel returned a fresh fd that we now own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let mut info = LinkInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: std::os::fd::AsRawFd::as_raw_fd(&fd) as u32,
        info_len: std::mem::size_of::<LinkInfo>() as u32,
        info: &mut info as *mut LinkInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(Some(info.ifindex))
}
