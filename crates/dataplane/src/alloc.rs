//! Allocators for the datapath's ID spaces and for slices of the shared
//! Maglev table. They are plain values so a whole change can be planned on
//! a copy first and committed only when every allocation succeeded.

use std::collections::{BTreeMap, VecDeque};

/// Hands out IDs below a fixed capacity. Freed IDs are reused last-in-line
/// (FIFO), so a flow still pinned to a freed ID is unlikely to meet a new
/// owner before it ends (generations catch the rest).
#[derive(Clone, Debug)]
pub struct IdAllocator {
    capacity: u32,
    next_fresh: u32,
    free: VecDeque<u32>,
}

impl IdAllocator {
    /// IDs `0..capacity`.
    pub fn new(capacity: u32) -> Self {
        Self {
            capacity,
            next_fresh: 0,
            free: VecDeque::new(),
        }
    }

    /// An allocator whose `in_use` IDs are taken (restart adoption). IDs
    /// above the highest adopted one are handed out first, so a new object
    /// does not get an ID that was in use shortly before the restart; the
    /// gaps below are reused only after every fresh ID has been used.
    pub fn adopt(capacity: u32, in_use: &std::collections::BTreeSet<u32>) -> Self {
        let next_fresh = in_use
            .iter()
            .next_back()
            .map(|m| m + 1)
            .unwrap_or(0)
            .min(capacity);
        let free = (0..next_fresh).filter(|id| !in_use.contains(id)).collect();
        Self {
            capacity,
            next_fresh,
            free,
        }
    }

    /// A free ID, or None when all `capacity` are in use.
    pub fn allocate(&mut self) -> Option<u32> {
        if self.next_fresh < self.capacity {
            self.next_fresh += 1;
            return Some(self.next_fresh - 1);
        }
        self.free.pop_front()
    }

    /// Returns an ID to the pool.
    pub fn release(&mut self, id: u32) {
        debug_assert!(id < self.next_fresh && !self.free.contains(&id));
        self.free.push_back(id);
    }

    /// How many IDs are in use.
    pub fn in_use(&self) -> u32 {
        self.next_fresh - self.free.len() as u32
    }

    /// How many more IDs can be handed out.
    pub fn available(&self) -> u32 {
        self.capacity - self.in_use()
    }
}

/// A contiguous run of Maglev table slots owned by one service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slice {
    /// First slot.
    pub offset: u32,
    /// Number of slots (a prime, or 0 for a VIP without backends).
    pub size: u32,
}

/// First-fit allocator of slices in a table of `len` slots, with adjacent
/// free runs merged on release.
#[derive(Clone, Debug)]
pub struct SliceAllocator {
    len: u32,
    /// offset -> size of each free run
    free: BTreeMap<u32, u32>,
}

impl SliceAllocator {
    /// An empty table of `len` slots.
    pub fn new(len: u32) -> Self {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(0, len);
        }
        Self { len, free }
    }

    /// Total table length.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the table has no slots at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The longest free run: the biggest slice that can be allocated now.
    pub fn largest_free(&self) -> u32 {
        self.free.values().copied().max().unwrap_or(0)
    }

    /// Free slots in total.
    pub fn free_slots(&self) -> u32 {
        self.free.values().sum()
    }

    /// Takes `size` slots from the first free run that holds them.
    pub fn allocate(&mut self, size: u32) -> Option<Slice> {
        if size == 0 {
            return Some(Slice { offset: 0, size: 0 });
        }
        let (&offset, &run) = self.free.iter().find(|(_, run)| **run >= size)?;
        self.free.remove(&offset);
        if run > size {
            self.free.insert(offset + size, run - size);
        }
        Some(Slice { offset, size })
    }

    /// Marks an exact range as used (restart adoption of a known slice).
    pub fn reserve(&mut self, slice: Slice) -> bool {
        if slice.size == 0 {
            return true;
        }
        let Some((&off, &run)) = self.free.range(..=slice.offset).next_back() else {
            return false;
        };
        if slice.offset + slice.size > off + run {
            return false;
        }
        self.free.remove(&off);
        if slice.offset > off {
            self.free.insert(off, slice.offset - off);
        }
        let end = slice.offset + slice.size;
        if off + run > end {
            self.free.insert(end, off + run - end);
        }
        true
    }

    /// Gives a slice back, merging it with free neighbours.
    pub fn release(&mut self, slice: Slice) {
        if slice.size == 0 {
            return;
        }
        let mut offset = slice.offset;
        let mut size = slice.size;
        if let Some((&prev, &prev_size)) = self.free.range(..offset).next_back()
            && prev + prev_size == offset
        {
            self.free.remove(&prev);
            offset = prev;
            size += prev_size;
        }
        if let Some(&next_size) = self.free.get(&(offset + size)) {
            self.free.remove(&(offset + size));
            size += next_size;
        }
        self.free.insert(offset, size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_until_exhausted_then_reused_fifo() {
        let mut a = IdAllocator::new(3);
        assert_eq!(
            (a.allocate(), a.allocate(), a.allocate()),
            (Some(0), Some(1), Some(2))
        );
        assert_eq!(a.allocate(), None);
        a.release(1);
        a.release(0);
        assert_eq!(a.allocate(), Some(1));
        assert_eq!(a.allocate(), Some(0));
        assert_eq!(a.in_use(), 3);
    }

    #[test]
    fn adopted_ids_are_kept_and_fresh_ids_come_first() {
        let used: std::collections::BTreeSet<u32> = [1, 4].into_iter().collect();
        let mut a = IdAllocator::adopt(8, &used);
        assert_eq!(a.in_use(), 2);
        assert_eq!(
            (a.allocate(), a.allocate(), a.allocate()),
            (Some(5), Some(6), Some(7))
        );
        assert_eq!(
            (a.allocate(), a.allocate(), a.allocate()),
            (Some(0), Some(2), Some(3))
        );
        assert_eq!(a.allocate(), None);
    }

    #[test]
    fn slices_first_fit_and_merge_on_release() {
        let mut t = SliceAllocator::new(100);
        let a = t.allocate(30).unwrap();
        let b = t.allocate(30).unwrap();
        let c = t.allocate(30).unwrap();
        assert_eq!((a.offset, b.offset, c.offset), (0, 30, 60));
        assert_eq!(t.allocate(11), None);
        t.release(a);
        t.release(c);
        assert_eq!(t.largest_free(), 40);
        t.release(b);
        assert_eq!(t.largest_free(), 100);
        assert_eq!(t.free_slots(), 100);
    }

    #[test]
    fn reserve_takes_exactly_the_given_range() {
        let mut t = SliceAllocator::new(100);
        assert!(t.reserve(Slice {
            offset: 10,
            size: 20
        }));
        assert!(!t.reserve(Slice {
            offset: 25,
            size: 10
        }));
        assert_eq!(t.allocate(10).unwrap().offset, 0);
        assert_eq!(t.allocate(10).unwrap().offset, 30);
        assert_eq!(t.free_slots(), 60);
    }
}
