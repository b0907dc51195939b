//! Running rivorad in a namespace the way an operator would, with its log
//! captured, and stopping it by PID.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::{Netns, interrupted};

/// A running rivorad; stopped (SIGTERM, then SIGKILL) on drop. Shared by
/// the demo and the end-to-end tests so both start the daemon the same way.
pub struct Rivorad {
    child: Child,
    pin_dir: PathBuf,
    stderr_path: PathBuf,
    stopped: bool,
}

impl Rivorad {
    /// Starts `bin` inside `ns` (network namespace only, so bpffs pins stay
    /// visible) with its log in `work`; `extra_args` are appended.
    #[allow(clippy::too_many_arguments)] // each is a distinct rivorad flag or place
    pub fn start(
        ns: &Netns,
        interface: &str,
        bin: &Path,
        config: &Path,
        pin_dir: &Path,
        socket: &Path,
        work: &Path,
        extra_args: &[&str],
    ) -> Result<Rivorad> {
        let mut args: Vec<&std::ffi::OsStr> = vec!["--config".as_ref(), config.as_os_str()];
        args.extend(extra_args.iter().map(|a| std::ffi::OsStr::new(*a)));
        Self::start_with(ns, interface, bin, pin_dir, socket, work, &args)
    }

    /// Like [`Rivorad::start`] without `--config`: `args` name the source
    /// (`--kubernetes ...`) and anything else.
    pub fn start_with(
        ns: &Netns,
        interface: &str,
        bin: &Path,
        pin_dir: &Path,
        socket: &Path,
        work: &Path,
        args: &[&std::ffi::OsStr],
    ) -> Result<Rivorad> {
        // A socket left by a killed rivorad stays: the new one replaces it (and
        // `wait_ready` waits for an answer, not a file).
        let stdout_path = work.join("rivorad.stdout.log");
        let stderr_path = work.join("rivorad.stderr.log");
        let stdout = File::create(&stdout_path)?;
        let stderr = File::create(&stderr_path)?;
        let mut cmd = Command::new(bin);
        cmd.arg("--interface")
            .arg(interface)
            .arg("--pin-dir")
            .arg(pin_dir)
            .arg("--api-socket")
            .arg(socket)
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        let child = ns.spawn(&mut cmd)?;
        Ok(Rivorad {
            child,
            pin_dir: pin_dir.to_path_buf(),
            stderr_path,
            stopped: false,
        })
    }

    /// Waits until the API socket answers (rivorad binds it last, once the datapath is
    /// programmed), failing with the log tail if the daemon exits or the timeout passes.
    pub fn wait_ready(&mut self, socket: &Path, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            // An answering socket, not a file: a killed rivorad's socket file stays until
            // the next one replaces it.
            if std::os::unix::net::UnixStream::connect(socket).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                self.stopped = true;
                self.remove_pin_dir();
                bail!(
                    "rivorad exited with {status} before creating {}; stderr tail:\n{}",
                    socket.display(),
                    tail(&self.stderr_path, 20)
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "rivorad did not answer on {} within {timeout:?}; stderr tail:\n{}",
                    socket.display(),
                    tail(&self.stderr_path, 20)
                );
            }
            if interrupted() {
                bail!("interrupted while waiting for rivorad");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM by PID (our unreaped child, so the PID is still ours), wait up
    /// to 10 s, then SIGKILL; remove the pin dir if rivorad left it.
    pub fn stop(&mut self) -> Result<ExitStatus> {
        let status = if let Some(s) = self.child.try_wait()? {
            s
        } else {
            // SAFETY: plain kill(2) on the PID of our own child, not yet waited.
            unsafe {
                libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(s) = self.child.try_wait()? {
                    break s;
                }
                if Instant::now() >= deadline {
                    eprintln!("rivora-lab: rivorad ignored SIGTERM for 10 s, killing it");
                    self.child.kill()?;
                    break self.child.wait()?;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        self.stopped = true;
        self.remove_pin_dir();
        Ok(status)
    }

    /// Sends `signal` to the daemon and waits for it to exit, leaving its
    /// pins as it left them (restart tests: SIGKILL, or SIGTERM with
    /// `--persist-datapath`).
    pub fn signal_and_wait(&mut self, signal: i32) -> Result<ExitStatus> {
        if let Some(s) = self.child.try_wait()? {
            self.stopped = true;
            return Ok(s);
        }
        // SAFETY: kill(2) on the PID of our own child, not yet waited for.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, signal);
        }
        let status = self.child.wait()?;
        self.stopped = true;
        Ok(status)
    }

    /// PID of the daemon (for tests that signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The daemon's stderr so far (its log).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    fn remove_pin_dir(&self) {
        if self.pin_dir.exists()
            && let Err(e) = std::fs::remove_dir_all(&self.pin_dir)
        {
            eprintln!(
                "rivora-lab: could not remove pin dir {}: {e}",
                self.pin_dir.display()
            );
        }
    }
}

impl Drop for Rivorad {
    fn drop(&mut self) {
        if !self.stopped
            && let Err(e) = self.stop()
        {
            eprintln!("rivora-lab: stopping rivorad: {e:#}");
        }
    }
}

/// Last `n` lines of a log file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(s) => {
            let lines: Vec<&str> = s.lines().collect();
            let start = lines.len().saturating_sub(n);
            if lines.is_empty() {
                "(empty)".to_string()
            } else {
                lines[start..].join("\n")
            }
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}
