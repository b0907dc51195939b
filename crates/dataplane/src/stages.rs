//! xdp_ingress's tail-call stages (`bpf/stages.h`): loading them, filling
//! the program array they are reached through, and keeping that array
//! alive exactly as long as an attached xdp_ingress may jump through it.
//!
//! Why the array is pinned, and per load: the kernel empties a program
//! array when its last user reference (fd or pin) goes, even while a loaded
//! program still holds the map (measured: docs/design/verifier-headroom.md).
//! A `--persist-datapath` rivorad exits with xdp_ingress attached, so the
//! array must be pinned or every rare path would fall through to the
//! kernel. It is not pinned by name like the maps, because a new rivorad
//! filling a shared array with its stages would let the *old* xdp_ingress,
//! still attached until the link update, jump into the new object's
//! stages. So each load has its own array, pinned as
//! `stages_<xdp_ingress program ID>` before that program is attached; the
//! previous load's array is unpinned only after the link update plus a
//! grace period ([`RETIRE_DELAY`]), so an old-program invocation still in
//! flight on another CPU finds its stages.

use std::path::{Path, PathBuf};
use std::time::Duration;

use aya::Ebpf;
use aya::maps::{Map, MapData, ProgramArray};
use aya::programs::Xdp;

use crate::Error;

/// The stage programs by their `stage_map` slot (`enum rv_stage` of
/// bpf/stages.h; the verifier-budget and packet tests fail if the two
/// disagree: a stage reached through the wrong slot re-parses a shape
/// that is not its own and hands the packet to the kernel).
pub const STAGES: &[(u32, &str)] = &[
    (0, "xdp_stage_icmp4"),
    (1, "xdp_stage_icmp6"),
    (2, "xdp_stage_frag4"),
    (3, "xdp_stage_frag6"),
    (4, "xdp_stage_route4"),
    (5, "xdp_stage_route6"),
    (6, "xdp_stage_snat4"),
    (7, "xdp_stage_snat6"),
    (8, "xdp_stage_snat_reply4"),
    (9, "xdp_stage_snat_reply6"),
    (10, "xdp_stage_reset4"),
    (11, "xdp_stage_reset6"),
    (12, "xdp_stage_cls4"),
    (13, "xdp_stage_cls6"),
];

/// The program array's name in the object.
pub const STAGE_MAP: &str = "stage_map";

/// Name prefix of the stage-array pins in the pin directory.
pub const PIN_PREFIX: &str = "stages_";

/// How long a replaced program's stage array stays pinned after the link
/// update: far longer than an RCU grace period, after which no invocation
/// of the old program can still be running (an XDP program runs within
/// one softirq's RCU read section).
pub const RETIRE_DELAY: Duration = Duration::from_secs(1);

/// The pin name of the stage array used by the xdp_ingress of kernel
/// program ID `xdp_program_id`.
pub fn pin_name(xdp_program_id: u32) -> String {
    format!("{PIN_PREFIX}{xdp_program_id}")
}

/// Loads every stage program of `xdp` (already loaded xdp_ingress's
/// object) and fills its `stage_map`, before anything can run xdp_ingress
/// (attach, or BPF_PROG_TEST_RUN in tests). An object without
/// `stage_map` has no stages (an older build given by `--bpf-object-dir`).
/// A stage program this table does not know, or one it lists missing from
/// an object that has the array, is an error: the object and this loader
/// are of different builds. Public for tools that load the object
/// themselves (rivora-bench runs it in its harness).
pub fn fill(xdp: &mut Ebpf) -> Result<(), Error> {
    let in_object: Vec<String> = xdp
        .programs()
        .map(|(n, _)| n.to_string())
        .filter(|n| n.starts_with("xdp_stage_"))
        .collect();
    if xdp.map(STAGE_MAP).is_none() {
        return match in_object.first() {
            None => Ok(()),
            Some(n) => Err(Error::Invalid(format!(
                "the xdp_ingress object has stage program {n} but no {STAGE_MAP}"
            ))),
        };
    }
    if let Some(n) = in_object
        .iter()
        .find(|n| !STAGES.iter().any(|(_, s)| s == n))
    {
        return Err(Error::Invalid(format!(
            "the xdp_ingress object has stage program {n}, which this rivorad does not know \
             (object and rivorad of different builds)"
        )));
    }
    let mut fds = Vec::with_capacity(STAGES.len());
    for &(slot, name) in STAGES {
        let prog: &mut Xdp = xdp
            .program_mut(name)
            .ok_or(Error::MissingProgram(name))?
            .try_into()
            .map_err(|e| Error::Program {
                name,
                source: Box::new(e),
            })?;
        prog.load().map_err(|e| Error::Program {
            name,
            source: Box::new(e),
        })?;
        let fd = prog
            .fd()
            .map_err(|e| Error::Program {
                name,
                source: Box::new(e),
            })?
            .try_clone()
            .map_err(|e| Error::Io {
                what: format!("duplicate the fd of {name}"),
                source: e,
            })?;
        fds.push((slot, fd));
    }
    let map = xdp.map_mut(STAGE_MAP).expect("checked above");
    if let Map::ProgramArray(data) = &*map {
        let slots = data.info().map(|i| i.max_entries()).unwrap_or(0);
        if slots as usize != STAGES.len() {
            return Err(Error::Invalid(format!(
                "the xdp_ingress object's {STAGE_MAP} has {slots} slots, this rivorad fills {} \
                 (object and rivorad of different builds)",
                STAGES.len()
            )));
        }
    }
    let mut array: ProgramArray<&mut MapData> = map.try_into().map_err(|e| Error::Map {
        map: STAGE_MAP,
        source: e,
    })?;
    for (slot, fd) in &fds {
        array.set(*slot, fd, 0).map_err(|e| Error::Map {
            map: STAGE_MAP,
            source: e,
        })?;
    }
    Ok(())
}

/// Pins `xdp`'s stage array in `pin_dir` for the xdp_ingress of program ID
/// `xdp_program_id` (idempotent: an existing pin of that name is ours).
/// Returns the pin's name, or None when the object has no stages.
pub(crate) fn pin(
    xdp: &Ebpf,
    pin_dir: &Path,
    xdp_program_id: u32,
) -> Result<Option<String>, Error> {
    let Some(map) = xdp.map(STAGE_MAP) else {
        return Ok(None);
    };
    let name = pin_name(xdp_program_id);
    let path = pin_dir.join(&name);
    if path.exists() {
        return Ok(Some(name));
    }
    let Map::ProgramArray(data) = map else {
        return Err(Error::MissingMap(STAGE_MAP));
    };
    data.pin(&path).map_err(|e| Error::Io {
        what: format!("pin the stage array {}", path.display()),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(Some(name))
}

/// The stage-array pins in `pin_dir`, by name.
pub fn pinned(pin_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(pin_dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| is_stage_pin(n))
        .collect();
    names.sort();
    names
}

/// Whether `name` is one of ours: the prefix and a program ID.
fn is_stage_pin(name: &str) -> bool {
    name.strip_prefix(PIN_PREFIX)
        .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
}

/// Removes the stage-array pins of `pin_dir` except `keep`: returns the
/// names removed. Missing pins are not an error (another clean-up may have
/// been first).
pub fn remove_pins_except(pin_dir: &Path, keep: Option<&str>) -> Result<Vec<String>, Error> {
    let mut removed = Vec::new();
    for name in pinned(pin_dir) {
        if Some(name.as_str()) == keep {
            continue;
        }
        match std::fs::remove_file(pin_dir.join(&name)) {
            Ok(()) => removed.push(name),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::Io {
                    what: format!("remove stage array pin {}/{name}", pin_dir.display()),
                    source: e,
                });
            }
        }
    }
    Ok(removed)
}

/// Removes the stage arrays of earlier loads once the link no longer runs
/// their programs. `replaced`: the link was updated from another program
/// that may still be running on another CPU, so the removal waits
/// [`RETIRE_DELAY`] on a thread of its own (if the process ends first, the
/// next start removes them). Otherwise nothing attached from this pin
/// directory uses them (a crash between pinning and attaching) and they go
/// now.
pub(crate) fn retire_others(
    pin_dir: &Path,
    ours: Option<String>,
    replaced: bool,
) -> Result<(), Error> {
    let stale: Vec<String> = pinned(pin_dir)
        .into_iter()
        .filter(|n| Some(n) != ours.as_ref())
        .collect();
    if stale.is_empty() {
        return Ok(());
    }
    if !replaced {
        let removed = remove_pins_except(pin_dir, ours.as_deref())?;
        tracing::info!(?removed, "removed stage arrays left by earlier loads");
        return Ok(());
    }
    let dir: PathBuf = pin_dir.to_path_buf();
    std::thread::Builder::new()
        .name("rivora-stage-retire".into())
        .spawn(move || {
            std::thread::sleep(RETIRE_DELAY);
            for name in stale {
                match std::fs::remove_file(dir.join(&name)) {
                    Ok(()) => tracing::info!(
                        pin = name,
                        "removed the replaced program's stage array (grace period over)"
                    ),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::warn!(pin = name, error = %e, "cannot remove a stage array pin")
                    }
                }
            }
        })
        .map_err(|e| Error::Io {
            what: "start the stage-array retire thread".into(),
            source: e,
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_pins_are_recognised_by_prefix_and_id() {
        assert!(is_stage_pin(&pin_name(4711)));
        assert!(!is_stage_pin("stages_"));
        assert!(!is_stage_pin("stages_12x"));
        assert!(!is_stage_pin("stage_map"));
        assert!(!is_stage_pin("link_xdp_eth0"));
    }

    #[test]
    fn slots_are_dense_and_names_unique() {
        for (i, (slot, _)) in STAGES.iter().enumerate() {
            assert_eq!(*slot as usize, i);
        }
        let mut names: Vec<_> = STAGES.iter().map(|(_, n)| *n).collect();
        names.dedup();
        assert_eq!(names.len(), STAGES.len());
    }
}
