//! A stray XDP program attached with `ip link set dev IF xdp... obj`, the way
//! an operator's leftover would be, for tests of what Rivora says when the
//! XDP hook of an interface is taken.
//!
//! iproute2 creates a work directory in bpffs when it loads an object
//! (`tc/globals` and the `ip` and `xdp` links to it, at /sys/fs/bpf unless
//! `TC_BPF_MNT` says otherwise). The helper points it at a directory of its
//! own under /sys/fs/bpf and removes that with the object's scratch
//! directory, so a test leaves nothing in bpffs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, bail};

use crate::Netns;

const STRAY_C: &str = r#"
#define SEC(n) __attribute__((section(n), used))
struct xdp_md;
SEC("xdp") int stray_pass(struct xdp_md *ctx) { return 2; }
char _license[] SEC("license") = "GPL";
"#;

/// The attached program's object and iproute2's bpffs work directory;
/// both removed on drop (the program itself goes with its interface or
/// namespace, or `ip link set dev IF xdp... off`).
pub struct StrayXdp {
    scratch: PathBuf,
    bpffs: PathBuf,
}

impl StrayXdp {
    /// Compiles a program named `stray_pass` (XDP_PASS) and attaches it to
    /// `ifname` in `ns` in `mode` (`xdpgeneric` or `xdpdrv`) with `ip link`,
    /// i.e. by netlink, without a bpf_link.
    pub fn attach(ns: &Netns, ifname: &str, mode: &str) -> Result<StrayXdp> {
        static N: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "rivora-stray-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let stray = StrayXdp {
            scratch: std::env::temp_dir().join(&tag),
            bpffs: Path::new("/sys/fs/bpf").join(&tag),
        };
        std::fs::create_dir_all(&stray.scratch).context("stray program scratch directory")?;
        std::fs::create_dir_all(&stray.bpffs).context("iproute2 work directory in bpffs")?;
        let (src, obj) = (stray.scratch.join("stray.c"), stray.scratch.join("stray.o"));
        std::fs::write(&src, STRAY_C)?;
        let out = std::process::Command::new("clang-19")
            .args(["-O2", "-target", "bpf", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .output()
            .context("running clang-19 (the BPF build needs it too)")?;
        if !out.status.success() {
            bail!("clang-19: {}", String::from_utf8_lossy(&out.stderr));
        }
        let mnt = format!("TC_BPF_MNT={}", stray.bpffs.display());
        let obj = obj.display().to_string();
        ns.run(&[
            "env", &mnt, "ip", "link", "set", "dev", ifname, mode, "obj", &obj, "sec", "xdp",
        ])?;
        Ok(stray)
    }
}

impl Drop for StrayXdp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
        let _ = std::fs::remove_dir_all(&self.bpffs);
    }
}
