//! Thin, checked wrappers around the few raw Linux syscalls the lab needs.
//!
//! Kept in one private module so every `unsafe` block sits next to the
//! reasoning for why it is sound.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Moves the calling thread into the network namespace referred to by `fd`.
///
/// Only the calling thread changes namespace (network namespaces are
/// per-thread), which is what lets us run socket code "inside" a namespace
/// on a dedicated thread without affecting the rest of the process.
pub(crate) fn setns_net(fd: RawFd) -> io::Result<()> {
    // SAFETY: setns only reads the integer fd; an invalid fd yields EBADF.
    let rc = unsafe { libc::setns(fd, libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Opens a pidfd for `pid`.
///
/// A pidfd pins the identity of the process, so a later signal can never hit
/// an unrelated process that happens to reuse the PID.
pub(crate) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0 as libc::c_uint) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success the kernel returned a fresh fd that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) })
}

/// Sends `sig` through a pidfd. `ESRCH` (already exited) counts as success.
pub(crate) fn pidfd_signal(fd: &OwnedFd, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: plain syscall; siginfo NULL means "as if sent by kill(2)".
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0 as libc::c_uint,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(err)
    }
}

/// Waits until the process behind a pidfd has exited, or `timeout` passes.
/// Returns true when it exited.
pub(crate) fn pidfd_wait_exit(fd: &OwnedFd, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    loop {
        // SAFETY: pfd is a valid, initialised pollfd array of length 1.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc >= 0 {
            return rc > 0;
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return false;
        }
    }
}

/// Filesystem magic number from `statfs(2)` for `path`.
pub(crate) fn fs_magic(path: &str) -> io::Result<u64> {
    let c = std::ffi::CString::new(path)?;
    // SAFETY: statfs is a plain-old-data struct; zeroed is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is NUL-terminated, st is a valid out pointer.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    Ok(st.f_type as u64)
}

/// Mounts a filesystem (`mount -t fstype source target`).
pub(crate) fn mount(source: &str, target: &str, fstype: &str) -> io::Result<()> {
    let s = std::ffi::CString::new(source)?;
    let t = std::ffi::CString::new(target)?;
    let f = std::ffi::CString::new(fstype)?;
    // SAFETY: all strings are NUL-terminated and outlive the call.
    let rc = unsafe { libc::mount(s.as_ptr(), t.as_ptr(), f.as_ptr(), 0, std::ptr::null()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Opens (creating it if need be) the lock file at `path` and takes an
/// exclusive `flock` on it, released when the returned file is closed.
///
/// Used to serialise work across parallel test processes (the bpffs
/// mount, apt-get installs of peer daemons).
pub(crate) fn lock_file(path: &str) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    loop {
        // SAFETY: plain syscall on an fd we own.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(file);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// Effective user id; the lab needs root for namespaces, veths and bpffs.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// `bpf(BPF_OBJ_GET)` on a bpffs pin, read-only: an fd of our own on the
/// pinned map, whose `/proc/self/fdinfo` entry then says which map it is.
///
/// Why raw: bpffs files cannot be opened with open(2) as map fds, and the
/// lab does not otherwise need a BPF library.
pub(crate) fn bpf_obj_get_rdonly(path: &std::path::Path) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    /// The `BPF_OBJ_*` member of `union bpf_attr` (UAPI linux/bpf.h).
    #[repr(C)]
    struct ObjAttr {
        pathname: u64,
        bpf_fd: u32,
        file_flags: u32,
        path_fd: i32,
        pad: u32,
    }
    const BPF_OBJ_GET: libc::c_long = 7;
    const BPF_F_RDONLY: u32 = 1 << 3;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let attr = ObjAttr {
        pathname: c.as_ptr() as u64,
        bpf_fd: 0,
        file_flags: BPF_F_RDONLY,
        path_fd: 0,
        pad: 0,
    };
    // SAFETY: attr is a valid, fully initialised bpf_attr prefix of the
    // size passed; the path it points to is NUL-terminated and outlives
    // the call. The kernel only reads it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET,
            &attr as *const ObjAttr,
            std::mem::size_of::<ObjAttr>() as libc::c_uint,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success the kernel returned a fresh fd that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) })
}
