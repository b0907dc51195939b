//! Meridio-2's readiness contract: a file `lb-ready-<group>` in a
//! directory shared with the router container, present while the
//! distribution group has a target it can forward to, absent otherwise.
//! Meridio-2's router (BIRD) announces the Gateway's VIPs while any such
//! file exists, so a Meridio-2 deployment keeps working unchanged with
//! rivorad in the load balancer's place.
//!
//! rivorad's own BGP speaker gates per VIP instead (crate::announce); the
//! files are for the router that reads them. Unlike Meridio-2's load
//! balancer, rivorad removes the files when it stops without
//! `--persist-datapath` and when its datapath stops forwarding, so a
//! stopped load balancer is never still advertised as ready; with
//! `--persist-datapath` the datapath keeps forwarding and the files stay.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

/// Name prefix of the files (Meridio-2's).
pub const PREFIX: &str = "lb-ready-";

/// The directory and which files rivorad keeps there.
#[derive(Debug, Clone)]
pub struct ReadinessFiles {
    dir: PathBuf,
}

/// The file name part of a group: Kubernetes groups are `NAMESPACE/NAME`
/// and the file is named after NAME, as Meridio-2 names it (one Gateway's
/// groups share a namespace).
pub fn file_group(group: &str) -> &str {
    group.rsplit('/').next().unwrap_or(group)
}

impl ReadinessFiles {
    /// Files in `dir` (created if missing).
    pub fn new(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The groups that have a file now.
    pub fn present(&self) -> io::Result<BTreeSet<String>> {
        let mut out = BTreeSet::new();
        for e in std::fs::read_dir(&self.dir)? {
            let name = e?.file_name();
            if let Some(g) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) {
                out.insert(g.to_string());
            }
        }
        Ok(out)
    }

    /// Makes the files exactly `ready` (group names as the classifier has
    /// them): creates the missing ones, removes the others. Returns
    /// (created, removed) file-group names.
    pub fn sync<'a>(
        &self,
        ready: impl IntoIterator<Item = &'a str>,
    ) -> io::Result<(Vec<String>, Vec<String>)> {
        let want: BTreeSet<String> = ready
            .into_iter()
            .map(|g| file_group(g).to_string())
            .collect();
        let have = self.present()?;
        let mut created = Vec::new();
        for g in want.difference(&have) {
            std::fs::write(self.dir.join(format!("{PREFIX}{g}")), b"")?;
            created.push(g.clone());
        }
        let mut removed = Vec::new();
        for g in have.difference(&want) {
            match std::fs::remove_file(self.dir.join(format!("{PREFIX}{g}"))) {
                Ok(()) => removed.push(g.clone()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok((created, removed))
    }

    /// Removes every file: nothing is ready (rivorad stops, or its
    /// datapath does not forward).
    pub fn clear(&self) -> io::Result<Vec<String>> {
        self.sync(std::iter::empty()).map(|(_, removed)| removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_follow_the_ready_groups() {
        let dir = std::env::temp_dir().join(format!("rivora-readiness-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = ReadinessFiles::new(&dir).unwrap();
        std::fs::write(dir.join("unrelated"), b"x").unwrap();
        let (c, rm) = r.sync(["ns/dg-a", "ns/dg-b"]).unwrap();
        assert_eq!((c.len(), rm.len()), (2, 0));
        assert!(dir.join("lb-ready-dg-a").exists() && dir.join("lb-ready-dg-b").exists());
        let (c, rm) = r.sync(["ns/dg-b"]).unwrap();
        assert_eq!((c, rm), (vec![], vec!["dg-a".to_string()]));
        assert!(!dir.join("lb-ready-dg-a").exists());
        assert_eq!(r.clear().unwrap(), vec!["dg-b".to_string()]);
        assert!(
            dir.join("unrelated").exists(),
            "only lb-ready-* files are rivorad's"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
