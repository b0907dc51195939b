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

/// Why pins made under `mount_point` would not outlive this process's mount
/// namespace, or None when they will.
///
/// Why: `ip netns exec` (and a container without the host's bpffs) runs the
/// command in a private mount namespace with a fresh /sys, where
/// /sys/fs/bpf is no bpffs. Mounting one there and pinning into it
/// "succeeds", but that bpffs instance, and every pinned link and map in
/// it, goes away when the namespace does: the program silently vanishes
/// from the interface. A pinning command must refuse that and say how to
/// run it instead (`nsenter --net=/run/netns/NAME`, which keeps the host's
/// mounts).
pub fn private_bpffs_reason(mount_point: &Path) -> Option<String> {
    if let Some(ns) = ip_netns_exec_name(&std::fs::read_to_string("/proc/self/mountinfo").ok()?) {
        if !is_bpffs(mount_point) {
            return Some(format!(
                "this runs under `ip netns exec {ns}`, which mounts a private /sys where {} \
                 is not the host's bpffs: pins made here would vanish when the command exits, \
                 and the attached program with them. Run it as \
                 `nsenter --net=/run/netns/{ns} ...` instead (it enters the network namespace \
                 only and keeps the host's bpffs)",
                mount_point.display()
            ));
        }
        return None;
    }
    let ours = std::fs::read_link("/proc/self/ns/mnt").ok()?;
    // Not readable (not root, no /proc of PID 1): nothing to compare with.
    let init = std::fs::read_link("/proc/1/ns/mnt").ok()?;
    if ours == init {
        return None;
    }
    if !is_bpffs(mount_point) {
        return Some(format!(
            "this process runs in a private mount namespace (not PID 1's, as under \
             `ip netns exec`, which mounts a fresh /sys) where {} is not a mounted bpffs: \
             pins made here would vanish with the namespace and the attached program with \
             them. Run the command with `nsenter --net=/run/netns/NAME ...` instead of \
             `ip netns exec NAME ...` (it enters the network namespace only and keeps the \
             host's bpffs), or mount the host's bpffs at {} in this namespace",
            mount_point.display(),
            mount_point.display()
        ));
    }
    // A bpffs is mounted here: is it the one PID 1 sees at the same place?
    let here = std::fs::metadata(mount_point).ok()?;
    let host = std::fs::metadata(
        Path::new("/proc/1/root").join(mount_point.strip_prefix("/").unwrap_or(mount_point)),
    )
    .ok()?;
    use std::os::unix::fs::MetadataExt;
    if here.dev() != host.dev() {
        return Some(format!(
            "{} in this mount namespace is another bpffs than PID 1's at the same place \
             (a private mount, e.g. made inside `ip netns exec`): pins made here vanish with \
             this namespace. Use `nsenter --net=/run/netns/NAME ...` instead of \
             `ip netns exec NAME ...`",
            mount_point.display()
        ));
    }
    None
}

/// The network namespace name when this process runs under `ip netns exec
/// NAME`: iproute2 mounts a fresh sysfs on /sys whose source is NAME (the
/// mount of /sys in `mountinfo` text reads `... /sys ... - sysfs NAME rw`).
pub fn ip_netns_exec_name(mountinfo: &str) -> Option<String> {
    let sys = mountinfo.lines().rev().find(|l| {
        let mut f = l.split_whitespace();
        f.nth(4) == Some("/sys")
    })?;
    let (_, tail) = sys.split_once(" - ")?;
    let mut f = tail.split_whitespace();
    let (fstype, source) = (f.next()?, f.next()?);
    (fstype == "sysfs" && source != "sysfs" && source != "none")
        .then(|| source.to_string())
        .filter(|name| Path::new("/run/netns").join(name).exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_sysfs_that_ip_netns_exec_mounts() {
        let host = "23 27 0:22 / /sys rw,relatime - sysfs sysfs rw\n\
                    42 23 0:39 / /sys/fs/bpf rw,relatime - bpf bpf rw\n";
        assert_eq!(ip_netns_exec_name(host), None);
        std::fs::create_dir_all("/run/netns").ok();
        let name = format!("rv-bpffs-unit-{}", std::process::id());
        let marker = Path::new("/run/netns").join(&name);
        if std::fs::write(&marker, b"").is_err() {
            return; // not root: the name check cannot be exercised
        }
        let inside = format!(
            "46 45 254:0 / / rw,relatime - ext4 /dev/vda rw\n49 46 0:40 / /sys rw,relatime - sysfs {name} rw\n"
        );
        assert_eq!(ip_netns_exec_name(&inside), Some(name.clone()));
        let unknown = "49 46 0:40 / /sys rw,relatime - sysfs no-such-netns-here rw\n";
        assert_eq!(ip_netns_exec_name(unknown), None);
        std::fs::remove_file(&marker).unwrap();
    }
}
