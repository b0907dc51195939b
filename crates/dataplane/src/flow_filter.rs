//! The flow filter (`bpf/flow_filter.h`): one bit per 5-tuple hash telling
//! xdp_ingress that a SYN or a UDP datagram surely has no affinity entry,
//! so it skips the lookup that, with the tables full, costs two cache
//! misses. The datapath sets a flow's bit in both halves when it makes the
//! flow's entry and never clears one; entries leave without telling the
//! filter, so the bits of gone flows pile up and every lookup they stand
//! for is wasted. This module keeps the filter useful: when the active half
//! has too many bits set (or was never exact), it rebuilds the idle half
//! from the affinity tables' keys and switches to it.
//!
//! The rebuild never drops the bit of a live entry (the datapath may skip
//! the lookup only on a clear bit, so a lost bit would make a SYN miss an
//! entry it must re-point, or a UDP flow leave its backend):
//! 1. clear the idle half (the datapath keeps setting bits in both halves);
//! 2. read every key of `connection_affinity_map(6)` (batched, bucket by
//!    bucket, so concurrent inserts and evictions cannot restart it) and OR
//!    its bit into the idle half atomically, as the datapath does;
//! 3. switch halves with one update of `flow_filter_ctl_map`.
//!
//! An entry made before step 2 began is read by it; one made after step 1
//! ended has its bit set by the datapath itself. One made during step 1 is
//! both in the table before step 2 and (perhaps) wiped: step 2 puts it back.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aya::maps::{Array, HashMap, MapData};
use rivora_abi as abi;

use crate::Error;
use crate::mmap::MappedMap;

/// Fraction of the active half's bits (1 in N) above which it is rebuilt:
/// with tables full of live flows one bit in 32 is set
/// ([`abi::FLOW_FILTER_BITS_PER_FLOW`] per entry, both families), so a
/// rebuild happens after at least as many new entries again as the tables
/// hold, and a SYN's lookup is wasted at most one time in 16.
pub const REBUILD_WHEN_ONE_BIT_IN: u64 = 16;

/// How long after the filter is first asked to become exact the first
/// rebuild may run: pins adopted from an ABI without the filter were filled
/// by programs that set no bits, and one of them may still be finishing a
/// packet just after the link was swapped to this build's program.
pub const FIRST_REBUILD_AFTER: Duration = Duration::from_secs(1);

/// How often the active half's bits are counted at most.
pub const COUNT_EVERY: Duration = Duration::from_secs(1);

/// What a rebuild did, for logs and `rivoractl stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RebuildReport {
    /// Affinity keys read (both families).
    pub keys: u64,
    /// Bits set in the new active half when it was switched to.
    pub ones: u64,
    /// Bits set in the half it replaced.
    pub ones_before: u64,
    /// Whether the half it replaced was exact.
    pub was_exact: bool,
    /// How long the rebuild took.
    pub took: Duration,
}

/// The filter's state, for the API and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterStatus {
    /// Bits per half.
    pub bits: u64,
    /// Bits set in the active half, as last counted.
    pub ones: u64,
    /// Whether a clear bit lets the datapath skip the lookup.
    pub exact: bool,
    /// Rebuilds since this process started.
    pub rebuilds: u64,
}

/// `flow_filter_map`, mapped into our address space, and its control word.
pub struct FlowFilter {
    mapping: MappedMap,
    ptr: *const AtomicU64,
    /// 64-bit words per half.
    words: u32,
    ctl: Array<MapData, abi::FlowFilterCtl>,
    /// When the filter was first found not exact (see FIRST_REBUILD_AFTER).
    inexact_since: Option<Instant>,
    next_count: Option<Instant>,
    status: FilterStatus,
}

// SAFETY: the mapping is owned by this value; every access to it is an
// atomic operation (the kernel side writes it concurrently, which is the
// point), and mutation of our own fields goes through &mut self.
unsafe impl Send for FlowFilter {}
unsafe impl Sync for FlowFilter {}

impl FlowFilter {
    /// Maps `flow_filter_map` (created with BPF_F_MMAPABLE) and takes its
    /// control map.
    pub fn map(data: MapData, ctl: Array<MapData, abi::FlowFilterCtl>) -> Result<Self, Error> {
        let info = data.info().map_err(|e| Error::Map {
            map: "flow_filter_map",
            source: e,
        })?;
        let entries = info.max_entries();
        if entries < 2 || !(entries / 2).is_power_of_two() || entries % 2 != 0 {
            return Err(Error::Io {
                what: format!(
                    "flow_filter_map has {entries} entries, not two halves of a power of two"
                ),
                source: std::io::Error::from(std::io::ErrorKind::InvalidData),
            });
        }
        let mapping = MappedMap::new(data, entries as usize * 8, "flow_filter_map")?;
        let words = entries / 2;
        Ok(Self {
            ptr: mapping.ptr().cast(),
            mapping,
            words,
            ctl,
            inexact_since: None,
            next_count: None,
            status: FilterStatus {
                bits: u64::from(words) * 64,
                ..Default::default()
            },
        })
    }

    fn word(&self, index: usize) -> &AtomicU64 {
        assert!(
            index < 2 * self.words as usize && (index + 1) * 8 <= self.mapping.len(),
            "beyond flow_filter_map"
        );
        // SAFETY: in bounds (above); the mapping lives as long as self and
        // an AtomicU64 has the layout of the u64 the kernel stores there.
        unsafe { &*self.ptr.add(index) }
    }

    /// The control word as the datapath reads it.
    pub fn ctl(&self) -> Result<abi::FlowFilterCtl, Error> {
        self.ctl.get(&0, 0).map_err(|e| Error::Map {
            map: "flow_filter_ctl_map",
            source: e,
        })
    }

    fn set_ctl(&mut self, active: u32, exact: bool) -> Result<(), Error> {
        let ctl = abi::FlowFilterCtl {
            words: self.words,
            active,
            exact: u32::from(exact),
            pad: 0,
        };
        self.ctl.set(0, ctl, 0).map_err(|e| Error::Map {
            map: "flow_filter_ctl_map",
            source: e,
        })?;
        self.status.exact = exact;
        Ok(())
    }

    /// For maps just created with empty flow tables: an empty filter is
    /// exact at once.
    pub fn init_fresh(&mut self) -> Result<(), Error> {
        for i in 0..2 * self.words as usize {
            self.word(i).store(0, Ordering::Relaxed);
        }
        self.set_ctl(0, true)
    }

    /// For pinned maps: keeps a filter this build's datapath kept, and
    /// marks one it did not keep (a map just added by an upgrade, or a
    /// control word of another size) as recording but not exact, so the
    /// datapath sets bits from now on and looks every flow up until the
    /// first rebuild.
    pub fn init_adopted(&mut self) -> Result<(), Error> {
        let ctl = self.ctl()?;
        if ctl.words == self.words && ctl.active <= 1 {
            self.status.exact = ctl.exact == 1;
            return Ok(());
        }
        self.set_ctl(0, false)
    }

    /// Bits set in half `half`.
    pub fn ones(&self, half: u32) -> u64 {
        let base = half as usize * self.words as usize;
        (0..self.words as usize)
            .map(|i| u64::from(self.word(base + i).load(Ordering::Relaxed).count_ones()))
            .sum()
    }

    /// The filter's state as last seen.
    pub fn status(&self) -> FilterStatus {
        self.status.clone()
    }

    /// Rebuilds the filter when it needs it: when it is not exact (once
    /// [`FIRST_REBUILD_AFTER`] has passed since that was first seen) or when
    /// more than one bit in [`REBUILD_WHEN_ONE_BIT_IN`] of its active half
    /// is set. Must only be called while this build's programs are the ones
    /// attached (they set the bits of the entries they make). Returns what
    /// a rebuild did, None when none was due.
    pub fn maintain(
        &mut self,
        affinity: &HashMap<MapData, abi::Flow4, abi::Affinity>,
        affinity6: &HashMap<MapData, abi::Flow6, abi::Affinity>,
    ) -> Result<Option<RebuildReport>, Error> {
        let now = Instant::now();
        let ctl = self.ctl()?;
        let exact = ctl.exact == 1 && ctl.words == self.words;
        self.status.exact = exact;
        if !exact {
            let since = *self.inexact_since.get_or_insert(now);
            if now.duration_since(since) < FIRST_REBUILD_AFTER {
                return Ok(None);
            }
        } else {
            if self.next_count.is_some_and(|t| now < t) {
                return Ok(None);
            }
            self.next_count = Some(now + COUNT_EVERY);
            self.status.ones = self.ones(ctl.active & 1);
            if self.status.ones * REBUILD_WHEN_ONE_BIT_IN <= self.status.bits {
                return Ok(None);
            }
        }
        self.rebuild(affinity, affinity6).map(Some)
    }

    /// Rebuilds the idle half from the affinity tables and switches to it
    /// (the module header says why no live entry loses its bit).
    pub fn rebuild(
        &mut self,
        affinity: &HashMap<MapData, abi::Flow4, abi::Affinity>,
        affinity6: &HashMap<MapData, abi::Flow6, abi::Affinity>,
    ) -> Result<RebuildReport, Error> {
        let started = Instant::now();
        let ctl = self.ctl()?;
        let was_exact = ctl.exact == 1 && ctl.words == self.words;
        let active = if ctl.words == self.words {
            ctl.active & 1
        } else {
            0
        };
        let idle = 1 - active;
        let base = idle as usize * self.words as usize;
        let ones_before = self.ones(active);
        for i in 0..self.words as usize {
            self.word(base + i).store(0, Ordering::SeqCst);
        }
        let mask = self.words - 1;
        let mut keys = 0u64;
        let mut add = |h: u32| {
            let w = base + ((h >> 6) & mask) as usize;
            self.word(w).fetch_or(1u64 << (h & 63), Ordering::SeqCst);
            keys += 1;
        };
        batch_keys::<abi::Flow4>(affinity, "connection_affinity_map", |k| {
            add(abi::flow_filter_hash4(k))
        })?;
        batch_keys::<abi::Flow6>(affinity6, "connection_affinity_map6", |k| {
            add(abi::flow_filter_hash6(k))
        })?;
        self.set_ctl(idle, true)?;
        self.inexact_since = None;
        self.status.rebuilds += 1;
        self.status.ones = self.ones(idle);
        self.next_count = Some(Instant::now() + COUNT_EVERY);
        Ok(RebuildReport {
            keys,
            ones: self.status.ones,
            ones_before,
            was_exact,
            took: started.elapsed(),
        })
    }

    /// Whether the bit of hash `h` is set in the active half (tests and
    /// `rivoractl`-style inspection).
    pub fn has(&self, h: u32) -> Result<bool, Error> {
        let ctl = self.ctl()?;
        let w = (ctl.active & 1) as usize * self.words as usize
            + ((h >> 6) & (self.words - 1)) as usize;
        Ok(self.word(w).load(Ordering::Relaxed) >> (h & 63) & 1 == 1)
    }
}

/// Keys per BPF_MAP_LOOKUP_BATCH call: more than any hash bucket holds.
const BATCH: u32 = 2048;

/// `union bpf_attr` for the BPF_MAP_*_BATCH commands.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// `BPF_MAP_LOOKUP_BATCH` (include/uapi/linux/bpf.h).
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// Calls `each` with every key of a hash map, read bucket by bucket with
/// BPF_MAP_LOOKUP_BATCH. Unlike get_next_key, whose walk starts over when
/// the key it stands on is evicted (which a full LRU table does all the
/// time), a batch walk goes forward through the buckets: a key that stays
/// in the map from start to end is seen.
fn batch_keys<K: aya::Pod + Default>(
    map: &HashMap<MapData, K, abi::Affinity>,
    name: &'static str,
    mut each: impl FnMut(&K),
) -> Result<(), Error> {
    let fd = aya::maps::IterableMap::map(map).fd().as_fd().as_raw_fd();
    let mut keys = vec![K::default(); BATCH as usize];
    let mut values = vec![abi::Affinity::default(); BATCH as usize];
    let mut token: u32 = 0;
    let mut first = true;
    loop {
        let mut next: u32 = 0;
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                &token as *const u32 as u64
            },
            out_batch: &mut next as *mut u32 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: BATCH,
            map_fd: fd as u32,
            ..Default::default()
        };
        // SAFETY: attr points at buffers of `count` keys and values of the
        // map's sizes and at two u32 batch tokens, all live for the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                &mut attr as *mut BatchAttr,
                std::mem::size_of::<BatchAttr>() as libc::c_uint,
            )
        };
        let err = (rc < 0).then(std::io::Error::last_os_error);
        let got = attr.count.min(BATCH) as usize;
        for k in &keys[..got] {
            each(k);
        }
        match err {
            None => {}
            Some(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Some(e) => {
                return Err(Error::Io {
                    what: format!("BPF_MAP_LOOKUP_BATCH on {name}"),
                    source: e,
                });
            }
        }
        token = next;
        first = false;
    }
}
