//! One rivorad per pin directory and per API socket. A second rivorad on the
//! same pin directory would rewrite the maps the first one is forwarding
//! with and then fail to attach (the interface is taken), leaving the first
//! one's datapath broken; `--uninstall` under a running rivorad would remove
//! the pins it relies on. Both take these locks before touching anything,
//! and refuse with the holder's PID when they cannot.
//!
//! The locks are `flock(2)` locks, held by the kernel for as long as the
//! process lives: a SIGKILLed rivorad never leaves a stale lock behind, so a
//! restart (with `--persist-datapath`, the zero-gap path) is never blocked.
//! The pin directory itself is locked (flock works on a bpffs directory);
//! the API socket by a `.lock` file beside it, because the socket file is
//! replaced on every start.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use rivora_api::instance::{Holder, holder_of, socket_lock_path};

/// The locks a running rivorad holds; released when dropped (or when the
/// process dies).
#[derive(Debug)]
pub struct InstanceLock {
    _pin_dir: File,
    _socket: Option<File>,
    /// The pin directory, when this lock created it: removed again on drop
    /// if it is still empty (a start that failed leaves nothing behind).
    created: Option<PathBuf>,
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        if let Some(dir) = &self.created {
            // Fails, as it should, when pins are in it.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

impl InstanceLock {
    /// Locks `api_socket`'s lock file, then `pin_dir` (created if missing),
    /// for a daemon that is about to load and attach. The socket goes first
    /// so that a refused start creates no pin directory.
    pub fn for_daemon(pin_dir: &Path, api_socket: &Path) -> anyhow::Result<Self> {
        let socket = lock_socket(api_socket).map_err(|e| {
            let holder = match e {
                LockError::Held(h) => h,
                LockError::Open(why) => return anyhow::anyhow!("{why}"),
            };
            anyhow::anyhow!(
                "another rivorad, {}, serves the API socket {}: refusing to start \
                 (give this rivorad its own --api-socket, or stop that one first)",
                holder.describe(),
                api_socket.display(),
            )
        })?;
        let created = (!pin_dir.exists()).then(|| pin_dir.to_path_buf());
        let pin = lock_pin_dir(pin_dir).map_err(|e| {
            let holder = match e {
                LockError::Held(h) => h,
                LockError::Open(why) => return anyhow::anyhow!("{why}"),
            };
            anyhow::anyhow!(
                "another rivorad, {}, is running on pin directory {}: refusing to start, \
                 because a second rivorad would rewrite the maps it forwards with. \
                 To change what it forwards, edit its config file (it is re-read on change \
                 and on SIGHUP); to check a file first, run `rivorad --check-config FILE`; \
                 to replace it, stop it first (kill -TERM {}; with --persist-datapath its \
                 datapath keeps forwarding and the next start adopts it); to run a second, \
                 separate rivorad, give it its own --pin-dir, --api-socket and --interface",
                holder.describe(),
                pin_dir.display(),
                holder.pid.map_or("PID".to_string(), |p| p.to_string()),
            )
        })?;
        Ok(Self {
            _pin_dir: pin,
            _socket: Some(socket),
            created,
        })
    }

    /// Locks `pin_dir` for `--uninstall`, which must not pull the pins from
    /// under a running rivorad. `Ok(None)`: there is nothing to uninstall.
    pub fn for_uninstall(pin_dir: &Path) -> anyhow::Result<Option<Self>> {
        if !pin_dir.exists() {
            return Ok(None);
        }
        let pin = lock_pin_dir(pin_dir).map_err(|e| {
            let holder = match e {
                LockError::Held(h) => h,
                LockError::Open(why) => return anyhow::anyhow!("{why}"),
            };
            anyhow::anyhow!(
                "rivorad {} is running on pin directory {}: refusing to uninstall under it \
                 (its links and maps would vanish while its status still claims them). \
                 Stop it first (kill -TERM {}); a rivorad without --persist-datapath removes \
                 its pins itself when it stops, one with it leaves them for `--uninstall`",
                holder.describe(),
                pin_dir.display(),
                holder.pid.map_or("PID".to_string(), |p| p.to_string()),
            )
        })?;
        Ok(Some(Self {
            _pin_dir: pin,
            _socket: None,
            created: None,
        }))
    }
}

/// Why a lock was not taken.
#[derive(Debug)]
enum LockError {
    /// Another process holds it.
    Held(Holder),
    /// The file to lock could not be opened (the reason, with the path).
    Open(String),
}

/// Opens (creating it) and exclusively locks the pin directory.
fn lock_pin_dir(dir: &Path) -> Result<File, LockError> {
    std::fs::create_dir_all(dir)
        .and_then(|()| File::open(dir))
        .map_err(|e| LockError::Open(format!("pin directory {}: {e}", dir.display())))
        .and_then(|f| try_lock(f, dir))
}

/// Opens (creating) `SOCKET.lock` and locks it exclusively.
fn lock_socket(socket: &Path) -> Result<File, LockError> {
    let path = socket_lock_path(socket);
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| LockError::Open(format!("API socket lock {}: {e}", path.display())))
        .and_then(|f| try_lock(f, &path))
}

fn try_lock(file: File, path: &Path) -> Result<File, LockError> {
    // SAFETY: flock on an fd we own.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(file);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Err(LockError::Held(holder_of(path)))
    } else {
        Err(LockError::Open(format!("locking {}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_a_directory_is_refused_and_names_us() {
        let dir = std::env::temp_dir().join(format!("rivorad-lock-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("api.sock");
        let first = InstanceLock::for_daemon(&dir, &socket).expect("first lock");
        let me = format!("PID {}", std::process::id());
        // Same pin directory, another socket.
        let err = InstanceLock::for_daemon(&dir, &dir.join("other.sock"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&me) && err.contains("pin directory"),
            "names the holder: {err}"
        );
        assert!(err.contains("--check-config"), "{err}");
        // Same socket, another pin directory (never created: refused first).
        let other_dir = dir.join("other-pins");
        let err = InstanceLock::for_daemon(&other_dir, &socket)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&me) && err.contains("API socket"), "{err}");
        assert!(
            !other_dir.exists(),
            "a refused lock creates no pin directory"
        );
        let err = InstanceLock::for_uninstall(&dir).unwrap_err().to_string();
        assert!(err.contains("refusing to uninstall"), "{err}");
        drop(first);
        let again = InstanceLock::for_daemon(&dir, &socket).expect("free again after drop");
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
