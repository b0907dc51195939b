//! Whether a rivorad owns an API socket, told by the lock file beside it.
//!
//! rivorad locks `SOCKET.lock` (`flock(2)`) before it touches anything and holds the lock
//! until it exits, while the socket itself answers only once the datapath is programmed. So
//! between a (re)start and the first answer, and between the socket's removal at a stop and
//! the exit, the lock is held but nothing answers: the client calls that "starting or
//! stopping" instead of "not running", and can wait for it (`Client::with_wait`). The lock
//! is found in /proc/locks, which names every lock's device, inode and PID, so looking never
//! takes the lock (a client taking it, even briefly, could make a starting rivorad refuse).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Who holds a lock, as far as /proc tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The holder's PID (in our PID namespace), if /proc/locks lists it.
    pub pid: Option<u32>,
    /// Its command line, if readable.
    pub command: Option<String>,
}

impl Holder {
    /// "PID 1234 (rivorad --interface eth0 ...)", or as much of it as is known.
    pub fn describe(&self) -> String {
        match (self.pid, &self.command) {
            (Some(pid), Some(cmd)) => format!("PID {pid} ({cmd})"),
            (Some(pid), None) => format!("PID {pid}"),
            _ => "another process (its PID is not visible from here)".to_string(),
        }
    }
}

/// The lock file that guards `socket`.
pub fn socket_lock_path(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The process holding a flock on `path`, if any: None when the file does not exist or no
/// lock on it is listed. A holder in another PID namespace is listed with a PID that means
/// nothing here (0 or a foreign number), so only the lock's existence is certain.
pub fn lock_holder(path: &Path) -> Option<Holder> {
    let meta = std::fs::metadata(path).ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = find_flock_holder(&locks, meta.dev(), meta.ino())?;
    Some(Holder {
        pid: (pid != 0).then_some(pid),
        command: command_line(pid),
    })
}

/// [`lock_holder`], for a caller that knows the lock is held (it was just refused it): a
/// holder with nothing known when /proc does not tell.
pub fn holder_of(path: &Path) -> Holder {
    lock_holder(path).unwrap_or(Holder {
        pid: None,
        command: None,
    })
}

/// The rivorad holding `socket`'s lock file while the socket does not answer: starting (or
/// stopping).
pub fn socket_owner(socket: &Path) -> Option<Holder> {
    lock_holder(&socket_lock_path(socket))
}

fn command_line(pid: u32) -> Option<String> {
    if pid == 0 {
        return None;
    }
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let text = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    (!text.is_empty()).then_some(text)
}

/// The PID of the FLOCK entry of /proc/locks text `locks` on (`dev`, `ino`). Lines read
/// `1: FLOCK  ADVISORY  WRITE 1234 00:27:16842 0 EOF`, the device as hexadecimal
/// major:minor.
pub fn find_flock_holder(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let want = format!("{:02x}:{:02x}:{ino}", major(dev), minor(dev));
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Blocked waiters are listed as "1: -> FLOCK ...": skip them.
        if fields.get(1) != Some(&"FLOCK") {
            return None;
        }
        (fields.get(5) == Some(&want.as_str()))
            .then(|| fields.get(4)?.parse().ok())
            .flatten()
    })
}

/// Linux's `major(3)` of a `dev_t` (glibc's encoding: 12 bits low, the rest high).
fn major(dev: u64) -> u64 {
    ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000)
}

/// Linux's `minor(3)` of a `dev_t`.
fn minor(dev: u64) -> u64 {
    (dev & 0xff) | ((dev >> 12) & 0xffff_ff00)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glibc's `makedev(3)`, to build the device numbers /proc/locks names.
    fn makedev(major: u64, minor: u64) -> u64 {
        ((major & 0xfffff000) << 32)
            | ((major & 0xfff) << 8)
            | ((minor & 0xffffff00) << 12)
            | (minor & 0xff)
    }

    #[test]
    fn finds_the_holder_by_device_and_inode() {
        let locks = "1: FLOCK  ADVISORY  WRITE 19832 fe:00:10119101 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 19878 00:27:16842 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 20000 00:27:16842 0 EOF\n\
                     3: POSIX  ADVISORY  WRITE 555 00:27:99 0 EOF\n";
        let dev = makedev(0, 0x27);
        assert_eq!(find_flock_holder(locks, dev, 16842), Some(19878));
        assert_eq!(
            find_flock_holder(locks, makedev(0xfe, 0), 10119101),
            Some(19832)
        );
        assert_eq!(
            find_flock_holder(locks, dev, 99),
            None,
            "POSIX locks are not ours"
        );
        assert_eq!(find_flock_holder(locks, dev, 1), None);
    }

    #[test]
    fn device_numbers_split_as_glibc_does() {
        for (ma, mi) in [(0, 0x27), (0xfe, 0), (259, 3), (0x1234, 0x56789)] {
            let dev = makedev(ma, mi);
            assert_eq!((major(dev), minor(dev)), (ma, mi), "{dev:#x}");
        }
    }

    #[test]
    fn a_held_lock_file_names_its_holder_and_a_free_one_none() {
        use std::os::fd::AsRawFd;
        let dir = std::env::temp_dir().join(format!("rivora-api-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("api.sock");
        assert_eq!(socket_owner(&socket), None, "no lock file: no owner");
        let file = std::fs::File::create(socket_lock_path(&socket)).unwrap();
        assert_eq!(socket_owner(&socket), None, "an unlocked file: no owner");
        // SAFETY: flock on an fd we own.
        assert_eq!(
            unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
            0
        );
        let owner = socket_owner(&socket).expect("held");
        assert_eq!(owner.pid, Some(std::process::id()));
        assert!(
            owner
                .describe()
                .starts_with(&format!("PID {}", std::process::id()))
        );
        drop(file);
        assert_eq!(socket_owner(&socket), None, "released with the file");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
