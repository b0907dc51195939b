//! One long-lived thread that starts a cluster's node processes (containerd, kubelet).
//!
//! Why a thread of its own: the processes get `PR_SET_PDEATHSIG=SIGKILL`, which fires when the
//! *thread* that forked them ends. Started from a test's thread, or from a tokio blocking-pool
//! thread that retires after ten idle seconds, a kubelet would be killed mid-test; started
//! here, they live until the cluster is dropped, and die with the test binary if it is killed.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::thread::JoinHandle;

use anyhow::{Context, Result, anyhow};

type Request = (Command, mpsc::Sender<std::io::Result<Child>>);

/// The spawning thread; stops when dropped.
#[derive(Debug)]
pub struct Spawner {
    requests: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<()>>,
}

impl Spawner {
    /// Starts the thread.
    pub fn start() -> Result<Spawner> {
        let (tx, rx) = mpsc::channel::<Request>();
        let thread = std::thread::Builder::new()
            .name("kube-cluster-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .context("starting the cluster's spawner thread")?;
        Ok(Spawner {
            requests: Some(tx),
            thread: Some(thread),
        })
    }

    /// Spawns `cmd` from the spawner thread, inside `netns` and, when given, the mount
    /// namespace at `mount_ns` and the root directory `root` (opened here, before the child
    /// enters the namespace, e.g. /proc/PID/root of a process in it), with every cgroup.procs
    /// file in `cgroups` (opened here, written by the child) joined first, so the process and
    /// all it starts (containerd's shims, the containers) are found there at teardown.
    pub fn spawn(
        &self,
        netns: &rivora_lab::Netns,
        mount_ns: Option<&std::path::Path>,
        root: Option<&std::path::Path>,
        cgroups: &[std::path::PathBuf],
        mut cmd: Command,
    ) -> Result<Child> {
        let root: Option<OwnedFd> = match root {
            Some(p) => Some(OwnedFd::from(
                std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?,
            )),
            None => None,
        };
        let root_fd = root.as_ref().map(|f| f.as_raw_fd());
        let mnt: Option<OwnedFd> = match mount_ns {
            Some(p) => Some(OwnedFd::from(
                std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?,
            )),
            None => None,
        };
        let mut procs: Vec<OwnedFd> = Vec::new();
        for c in cgroups {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(c)
                .with_context(|| format!("opening {}", c.display()))?;
            procs.push(OwnedFd::from(f));
        }
        let mnt_fd = mnt.as_ref().map(|f| f.as_raw_fd());
        let proc_fds: Vec<i32> = procs.iter().map(|f| f.as_raw_fd()).collect();
        netns.attach_command(&mut cmd);
        // SAFETY: only async-signal-safe calls (write, setns, fchdir, chroot, chdir, prctl) on
        // fds that stay open in the parent until spawn returns; no allocation happens in the
        // child.
        unsafe {
            cmd.pre_exec(move || {
                for fd in &proc_fds {
                    // "0": the writing process itself (cgroup v1 and v2 both take it).
                    if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some(fd) = mnt_fd
                    && libc::setns(fd, libc::CLONE_NEWNS) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(fd) = root_fd
                    && (libc::fchdir(fd) != 0
                        || libc::chroot(c".".as_ptr()) != 0
                        || libc::chdir(c"/".as_ptr()) != 0)
                {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let program = cmd.get_program().to_string_lossy().into_owned();
        let (tx, rx) = mpsc::channel();
        self.requests
            .as_ref()
            .context("the spawner is stopped")?
            .send((cmd, tx))
            .map_err(|_| anyhow!("the spawner thread is gone"))?;
        let child = rx
            .recv()
            .map_err(|_| anyhow!("the spawner thread is gone"))?
            .with_context(|| format!("starting {program} in {}", netns.name()))?;
        drop((mnt, procs, root));
        Ok(child)
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        self.requests.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
