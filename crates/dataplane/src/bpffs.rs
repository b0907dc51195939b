//! Making sure a BPF filesystem is mounted where pins go. A fresh machine
//! has none at /sys/fs/bpf; like Cilium, rivorad mounts it rather than
//! failing, because pinning is what lets the datapath outlive the daemon.

use std::ffi::CString;
use std::path::Path;

use crate::Error;

const BPF_FS_MAGIC: i64 = 0xcafe4a11;

/// Whether `path` is on a mounted bpffs.
pub fn is_bpffs(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs into a zeroed, properly sized struct.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC
    }
}

/// Mounts bpffs at `mount_point` (normally /sys/fs/bpf) unless one is
/// already there. Returns whether it mounted one.
pub fn ensure_bpffs(mount_point: &Path) -> Result<bool, Error> {
    if is_bpffs(mount_point) {
        return Ok(false);
    }
    std::fs::create_dir_all(mount_point).map_err(|e| Error::Io {
        what: format!("create {}", mount_point.display()),
        source: e,
    })?;
    let target = CString::new(mount_point.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::Invalid(format!("bad path {}", mount_point.display())))?;
    let fstype = CString::new("bpf").expect("static");
    // SAFETY: plain mount(2) with NUL-terminated strings.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(Error::Io {
            what: format!("mount bpffs at {}", mount_point.display()),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(true)
}
