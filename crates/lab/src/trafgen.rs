//! A running trafgen (netsniff-ng's packet generator) inside a lab
//! namespace.
//!
//! Why here: the benchmark (crates/bench) and the SYN-flood end-to-end test
//! both drive trafgen the same way, pinned to one CPU (the two CPUs of
//! these machines are shared by the sender and everything it measures),
//! in a process group of its own and stopped by PID, never by name.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::netns::Netns;

/// How long [`Trafgen::stop`] waits for trafgen to exit after SIGINT
/// before it kills the group.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// A trafgen process; stopped (SIGINT to its process group, then SIGKILL)
/// by [`Trafgen::stop`] and on drop.
pub struct Trafgen {
    child: Child,
}

impl Trafgen {
    /// Starts `trafgen -o IFNAME -P N -i CONF` in `ns`, one process per CPU
    /// of `cpus` and pinned to them, with its output in `log` (its summary
    /// and its errors).
    ///
    /// Why pinned, and a count: trafgen forks a worker per online CPU by
    /// default, which would take every CPU from the path it feeds; callers
    /// choose how many it may have.
    pub fn start(
        ns: &Netns,
        ifname: &str,
        cpus: &[u32],
        conf: &Path,
        log: &Path,
    ) -> Result<Trafgen> {
        if cpus.is_empty() {
            bail!("trafgen needs at least one CPU");
        }
        let list: Vec<String> = cpus.iter().map(u32::to_string).collect();
        let out = std::fs::File::create(log)?;
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", &list.join(","), "trafgen", "-o", ifname, "-P"])
            .arg(cpus.len().to_string())
            .arg("-i")
            .arg(conf)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            // Its own process group: trafgen forks a worker per CPU, and
            // the whole group is stopped together.
            .process_group(0);
        let child = ns.spawn(&mut cmd)?;
        Ok(Trafgen { child })
    }

    /// PID of the process started (its process group's ID too).
    ///
    /// Why: CPU accounting from /proc/PID reads the sender's own time.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether trafgen is still running.
    ///
    /// Why: trafgen exits when a send fails (e.g. a full veth ring), and a
    /// measurement window it did not survive must not be reported as one.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Stops trafgen: SIGINT to its process group, up to [`STOP_GRACE`],
    /// then SIGKILL to the group (forked workers may outlive the parent).
    ///
    /// Why SIGINT first: trafgen then flushes its ring and prints its
    /// summary into the log.
    pub fn stop(&mut self) {
        let pgid = self.child.id() as libc::pid_t;
        if self.running() {
            // SAFETY: signals to the process group of our own child.
            unsafe { libc::kill(-pgid, libc::SIGINT) };
            let deadline = Instant::now() + STOP_GRACE;
            while self.running() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // SAFETY: as above; ESRCH when the group is gone is fine.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for Trafgen {
    fn drop(&mut self) {
        self.stop();
    }
}
