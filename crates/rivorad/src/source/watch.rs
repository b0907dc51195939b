//! Watching the config file. Polling (inode, size, mtime) is enough for a
//! file an operator edits by hand or a tool replaces by rename, and needs no
//! inotify plumbing; the content is compared too, so a touch is not a change.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rivora_config::{Config, ConfigError};
use tracing::warn;

/// How long a changed file must stay unchanged before it is read.
pub const SETTLE_QUIET: Duration = Duration::from_millis(100);
/// The longest a change waits for the file to settle (a file rewritten
/// without pause is read after this anyway).
pub const SETTLE_MAX: Duration = Duration::from_secs(2);

/// The file, what was last seen of it and what was last applied.
pub struct ConfigWatch {
    path: PathBuf,
    seen: Option<(u64, u64, i64, i64)>,
    applied: Option<String>,
    missing_logged: bool,
}

impl ConfigWatch {
    /// Watches `path`.
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            seen: None,
            applied: None,
            missing_logged: false,
        }
    }

    /// The watched path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn stamp(&self) -> Option<(u64, u64, i64, i64)> {
        std::fs::metadata(&self.path)
            .ok()
            .map(|m| (m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
    }

    /// Whether the file looks different from the last read.
    pub fn changed(&mut self) -> bool {
        match self.stamp() {
            None => {
                if !self.missing_logged {
                    warn!(
                        "{} is missing: keeping the running configuration",
                        self.path.display()
                    );
                    self.missing_logged = true;
                }
                false
            }
            Some(s) => {
                self.missing_logged = false;
                self.seen != Some(s)
            }
        }
    }

    /// Waits until the file has stopped changing: its (inode, size, mtime)
    /// the same over [`SETTLE_QUIET`], for at most [`SETTLE_MAX`]. A writer
    /// that truncates and rewrites in place (shell `>`, an editor saving in
    /// place, config management) is then read once it is done, not halfway.
    /// Returns false if the file vanished meanwhile (nothing to read).
    pub async fn settled(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + SETTLE_MAX;
        let mut last = self.stamp();
        loop {
            tokio::time::sleep(SETTLE_QUIET).await;
            let now = self.stamp();
            if now.is_none() {
                return false;
            }
            if now == last || tokio::time::Instant::now() >= deadline {
                return true;
            }
            last = now;
        }
    }

    /// Reads and validates the file; returns the config and its text.
    pub fn read_and_parse(&mut self) -> Result<(Config, String), ConfigError> {
        self.seen = self.stamp();
        rivora_config::load_with_text(&self.path)
    }

    /// Records `text` as the configuration in force.
    pub fn mark_applied(&mut self, text: String) {
        self.applied = Some(text);
    }

    /// Whether `text` is what is already in force.
    pub fn is_applied(&self, text: &str) -> bool {
        self.applied.as_deref() == Some(text)
    }
}
