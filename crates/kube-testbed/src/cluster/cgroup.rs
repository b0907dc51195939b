//! A test node's cgroup root, in every hierarchy the host mounts under /sys/fs/cgroup.
//!
//! Why: the kubelet needs a cgroup root of its own per node (`cgroupRoot`), and containerd's
//! shims and containers outlive containerd (they are daemons by design), so the only reliable
//! way to stop exactly what a node started is to put it all under one cgroup and kill that
//! cgroup's members. The name carries the test binary's PID, so roots left by a killed run are
//! found and reaped ([`reap_stale`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

const CGROUP_FS: &str = "/sys/fs/cgroup";
/// Prefix of every test node's cgroup root: `rvk-<pid>-<cluster>-<node>`.
pub const PREFIX: &str = "rvk-";

/// One cgroup root (a directory of that name at the top of each hierarchy).
#[derive(Debug)]
pub struct Cgroup {
    name: String,
    hierarchies: Vec<PathBuf>,
}

impl Cgroup {
    /// Creates `/<name>` in every hierarchy. Fails on a host without the cgroup v1 `pids`
    /// hierarchy, which teardown reads members from.
    pub fn create(name: &str) -> Result<Cgroup> {
        let hierarchies = hierarchies()?;
        if !hierarchies.iter().any(|h| h.ends_with("pids")) {
            bail!(
                "the test cluster needs the cgroup v1 hierarchies under {CGROUP_FS} (pids among \
                 them): found {hierarchies:?}"
            );
        }
        let cg = Cgroup {
            name: name.to_string(),
            hierarchies,
        };
        cg.make("")?;
        Ok(cg)
    }

    /// The name, which is also the kubelet's `cgroupRoot` (with a leading `/`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Creates `/<name>/<sub>` everywhere and returns its `cgroup.procs` files, for a process
    /// to join at start ([`super::spawner::Spawner::spawn`]).
    pub fn procs_files(&self, sub: &str) -> Result<Vec<PathBuf>> {
        self.make(sub)?;
        Ok(self
            .hierarchies
            .iter()
            .map(|h| h.join(&self.name).join(sub).join("cgroup.procs"))
            .collect())
    }

    /// SIGKILLs every process under the root until none is left or `timeout` passes.
    pub fn kill_all(&self, timeout: Duration) -> Result<()> {
        kill_members(&self.name, timeout)
    }

    /// Removes the root everywhere, deepest first (the kernel frees a cgroup shortly after its
    /// last member exits, so a busy one is retried until `timeout`).
    pub fn remove(&self, timeout: Duration) -> Result<()> {
        remove_tree(&self.hierarchies, &self.name, timeout)
    }

    fn make(&self, sub: &str) -> Result<()> {
        for h in &self.hierarchies {
            let mut path = h.join(&self.name);
            let mut parts = vec![path.clone()];
            if !sub.is_empty() {
                path = path.join(sub);
                parts.push(path.clone());
            }
            for p in parts {
                if p.exists() {
                    continue;
                }
                std::fs::create_dir(&p).with_context(|| format!("creating {}", p.display()))?;
                // A v1 cpuset starts with no CPUs and no memory nodes: nothing could join it.
                if h.ends_with("cpuset") {
                    let parent = p.parent().unwrap_or(h);
                    for f in ["cpuset.cpus", "cpuset.mems"] {
                        let v = std::fs::read_to_string(parent.join(f))
                            .with_context(|| format!("reading {}", parent.join(f).display()))?;
                        std::fs::write(p.join(f), v.trim())
                            .with_context(|| format!("writing {}", p.join(f).display()))?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Every mounted hierarchy under /sys/fs/cgroup (v1 controllers, name=systemd, the unified one).
fn hierarchies() -> Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(CGROUP_FS).with_context(|| format!("listing {CGROUP_FS}"))? {
        let p = e?.path();
        if p.join("cgroup.procs").exists() {
            v.push(p);
        }
    }
    v.sort();
    Ok(v)
}

/// Every PID in `cgroup.procs` files under `dir`.
fn members(dir: &Path, out: &mut Vec<i32>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            members(&e.path(), out);
        }
    }
}

fn kill_members(name: &str, timeout: Duration) -> Result<()> {
    let root = Path::new(CGROUP_FS).join("pids").join(name);
    let deadline = Instant::now() + timeout;
    loop {
        let mut pids = Vec::new();
        members(&root, &mut pids);
        if pids.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("processes {pids:?} of cgroup {name} still alive after {timeout:?}");
        }
        for pid in pids {
            // SAFETY: kill(2) on a PID read from our own cgroup: processes this node started.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn remove_tree(hierarchies: &[PathBuf], name: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    for h in hierarchies {
        let root = h.join(name);
        loop {
            match remove_dirs(&root) {
                Ok(()) => break,
                Err(e) if Instant::now() > deadline => {
                    return Err(e).with_context(|| format!("removing cgroup {}", root.display()));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    Ok(())
}

/// rmdir `dir` and its subdirectories, deepest first (cgroup directories hold only control
/// files, which rmdir takes with them).
fn remove_dirs(dir: &Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_dirs(&e.path())?;
        }
    }
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Kills the members of, and removes, test-node cgroup roots whose test binary is gone (a run
/// that was SIGKILLed never dropped its nodes). Returns the names reaped.
pub fn reap_stale() -> Vec<String> {
    let Ok(hs) = hierarchies() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(Path::new(CGROUP_FS).join("pids")) else {
        return Vec::new();
    };
    let mut reaped = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ = kill_members(&name, Duration::from_secs(10));
        if remove_tree(&hs, &name, Duration::from_secs(5)).is_ok() {
            reaped.push(name);
        }
    }
    reaped
}
