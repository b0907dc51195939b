//! What a running process costs in memory: its own peak resident set and
//! the kernel memory of the BPF maps it holds open.
//!
//! Why both: the kernel allocates rivorad's flow tables whole when it
//! creates them, so their cost never shows in the daemon's RSS. The e2e test
//! of `--flow-table-size` and the benchmark read the two figures the same
//! way, from /proc, without bpftool.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::sys;

/// Resident memory of a process, from `/proc/PID/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessMemory {
    /// Peak resident set size (`VmHWM`), KiB.
    pub vm_hwm_kib: u64,
    /// Current resident set size (`VmRSS`), KiB.
    pub vm_rss_kib: u64,
}

impl ProcessMemory {
    /// Reads `VmHWM` and `VmRSS` of `pid`.
    pub fn of(pid: u32) -> Result<ProcessMemory> {
        let path = format!("/proc/{pid}/status");
        let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let field = |key: &str| -> Result<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse().ok())
                .with_context(|| format!("no {key} in {path}"))
        };
        Ok(ProcessMemory {
            vm_hwm_kib: field("VmHWM:")?,
            vm_rss_kib: field("VmRSS:")?,
        })
    }

    /// Peak resident set in MiB.
    pub fn hwm_mib(&self) -> f64 {
        self.vm_hwm_kib as f64 / 1024.0
    }
}

/// One BPF map, as its fdinfo describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BpfMapMemory {
    /// The kernel's map ID (the same through every fd and pin of the map).
    pub id: u32,
    /// `enum bpf_map_type` value.
    pub map_type: u32,
    /// Capacity.
    pub max_entries: u32,
    /// Kernel memory charged to the map, bytes (`memlock`).
    pub memlock: u64,
    /// How many of the process's fds refer to this map: summing memlock
    /// per fd instead of per map counts such a map more than once.
    pub fds: u32,
    /// Pin name, when the map is pinned in the directory given to
    /// [`BpfMaps::of_process`].
    pub pin_name: Option<String>,
}

/// The distinct BPF maps a process holds open (a map reached through
/// several fds counts once).
#[derive(Clone, Debug, Default)]
pub struct BpfMaps {
    /// By map ID.
    pub maps: Vec<BpfMapMemory>,
}

impl BpfMaps {
    /// Every map among `pid`'s fds (`/proc/PID/fdinfo` entries with a
    /// `map_type`), named by their pins in `pin_dir` if given.
    pub fn of_process(pid: u32, pin_dir: Option<&Path>) -> Result<BpfMaps> {
        let dir = format!("/proc/{pid}/fdinfo");
        let mut by_id = BTreeMap::new();
        for entry in std::fs::read_dir(&dir).with_context(|| format!("listing {dir}"))? {
            let path = entry?.path();
            // An fd closed since the listing is simply gone.
            let Ok(info) = std::fs::read_to_string(&path) else {
                continue;
            };
            if let Some(map) = parse_map_fdinfo(&info) {
                by_id
                    .entry(map.id)
                    .and_modify(|m: &mut BpfMapMemory| m.fds += 1)
                    .or_insert(map);
            }
        }
        if let Some(pins) = pin_dir {
            for (name, id) in pinned_map_ids(pins)? {
                if let Some(m) = by_id.get_mut(&id) {
                    m.pin_name = Some(name);
                }
            }
        }
        Ok(BpfMaps {
            maps: by_id.into_values().collect(),
        })
    }

    /// Sum of `memlock` over all the maps, bytes.
    pub fn memlock(&self) -> u64 {
        self.maps.iter().map(|m| m.memlock).sum()
    }

    /// How many fds of the process refer to these maps.
    pub fn fds(&self) -> u32 {
        self.maps.iter().map(|m| m.fds).sum()
    }

    /// The maps pinned under `names`, in that order (names without such a
    /// map are skipped).
    pub fn pinned_as<'a>(&'a self, names: &'a [&str]) -> impl Iterator<Item = &'a BpfMapMemory> {
        names
            .iter()
            .filter_map(|n| self.maps.iter().find(|m| m.pin_name.as_deref() == Some(*n)))
    }
}

/// A map's fdinfo (`map_type`, `max_entries`, `memlock`, `map_id`, tab
/// separated); `None` for fds that are not maps.
fn parse_map_fdinfo(info: &str) -> Option<BpfMapMemory> {
    let field = |key: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .map(str::trim)
    };
    Some(BpfMapMemory {
        id: field("map_id")?.parse().ok()?,
        map_type: field("map_type")?.parse().ok()?,
        max_entries: field("max_entries")?.parse().ok()?,
        memlock: field("memlock")?.parse().ok()?,
        fds: 1,
        pin_name: None,
    })
}

/// Map ID of every map pinned directly in `dir`, by pin name (other pins,
/// such as links, are skipped).
fn pinned_map_ids(dir: &Path) -> Result<Vec<(String, u32)>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        // Links and programs refuse a read-only open: not maps.
        let Ok(fd) = sys::bpf_obj_get_rdonly(&path) else {
            continue;
        };
        let fdinfo = format!("/proc/self/fdinfo/{}", fd.as_raw_fd());
        let info = std::fs::read_to_string(&fdinfo).with_context(|| format!("reading {fdinfo}"))?;
        if let Some(map) = parse_map_fdinfo(&info) {
            out.push((entry.file_name().to_string_lossy().into_owned(), map.id));
        }
    }
    if out.is_empty() {
        bail!("no BPF map pinned in {}", dir.display());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_fdinfo_is_parsed_and_other_fds_are_not_maps() {
        let map = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nmap_type:\t9\n\
                   key_size:\t16\nvalue_size:\t40\nmax_entries:\t1048576\nmap_flags:\t0x0\n\
                   map_extra:\t0x0\nmemlock:\t230686720\nmap_id:\t312\nfrozen:\t0\n";
        assert_eq!(
            parse_map_fdinfo(map),
            Some(BpfMapMemory {
                id: 312,
                map_type: 9,
                max_entries: 1_048_576,
                memlock: 230_686_720,
                fds: 1,
                pin_name: None,
            })
        );
        let prog = "pos:\t0\nflags:\t02000002\nprog_type:\t6\nprog_jited:\t1\n\
                    memlock:\t4096\nprog_id:\t40\n";
        assert_eq!(parse_map_fdinfo(prog), None);
        assert_eq!(parse_map_fdinfo("pos:\t0\nflags:\t02\nmnt_id:\t1\n"), None);
    }
}
