//! Placement of exact VIPs in `vip_index_map`, the open-addressing copy of
//! vip_map/vip_map6 that xdp_ingress reads without a helper call (an array
//! lookup is inlined by the verifier; a hash map lookup is a call, which
//! retpolines and the return-stack mitigation make cost about a third of an
//! established NAT packet).
//!
//! A VIP's home slot is [`abi::vip_index_hash`] modulo the half's size; the
//! program probes at most [`abi::VIP_INDEX_PROBES`] slots from there and
//! stops at the first unused one. Placement is Robin Hood linear probing
//! over the VIPs in sorted order: deterministic, and it keeps the longest
//! displacement short (plain first-come linear probing at 4,096 VIPs in
//! 16,384 slots nearly always pushes some VIP past a short window; Robin
//! Hood with 8 probes did not in simulation). If a VIP still lands outside
//! the window the placement is incomplete, and the writer switches the index
//! off (the program then uses vip_map, as before the index existed).

use rivora_abi as abi;

/// The content of one half of the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// One entry per slot (unused slots are all zero).
    pub slots: Vec<abi::VipSlot>,
    /// VIPs farther than the probe window from their home slot (or that
    /// did not fit at all): the program would not find them.
    pub unplaced: usize,
}

impl Placement {
    /// Whether every VIP can be found within the probe window.
    pub fn complete(&self) -> bool {
        self.unplaced == 0
    }
}

/// Sort key of a slot: its VIP without the service.
fn identity(s: &abi::VipSlot) -> ([u8; 16], u16, u8, u8) {
    (s.addr, s.port, s.proto, s.flags)
}

/// Places `entries` (used slots, one per exact VIP, keys distinct) in a
/// table of `slots` slots (a power of two) probed `probes` deep.
pub fn place(entries: &[abi::VipSlot], slots: u32, probes: u32) -> Placement {
    assert!(slots.is_power_of_two(), "slot count must be a power of two");
    let mask = slots - 1;
    let mut table = vec![abi::VipSlot::default(); slots as usize];
    if entries.len() >= slots as usize {
        return Placement {
            slots: table,
            unplaced: entries.len(),
        };
    }
    let mut sorted: Vec<abi::VipSlot> = entries.to_vec();
    sorted.sort_by_key(identity);
    // Home slot of each occupied slot, to know how far it was displaced.
    let mut home = vec![0u32; slots as usize];
    for entry in sorted {
        let mut cur = entry;
        let mut cur_home = cur.hash() & mask;
        let mut pos = cur_home;
        loop {
            let at = pos as usize;
            if !table[at].used() {
                table[at] = cur;
                home[at] = cur_home;
                break;
            }
            // Robin Hood: the VIP nearer its home gives the slot up to the
            // one farther from its own (ties keep the resident).
            let resident = pos.wrapping_sub(home[at]) & mask;
            let ours = pos.wrapping_sub(cur_home) & mask;
            if resident < ours {
                std::mem::swap(&mut table[at], &mut cur);
                std::mem::swap(&mut home[at], &mut cur_home);
            }
            pos = (pos + 1) & mask;
        }
    }
    let unplaced = (0..slots as usize)
        .filter(|&i| table[i].used() && ((i as u32).wrapping_sub(home[i]) & mask) >= probes)
        .count();
    Placement {
        slots: table,
        unplaced,
    }
}

/// Looks `key` up in a half as the program does: probe from the home slot,
/// stop at an unused slot or the end of the window.
pub fn lookup(table: &[abi::VipSlot], probes: u32, key: &abi::VipSlot) -> Option<u32> {
    let mask = table.len() as u32 - 1;
    let h = key.hash();
    for i in 0..probes {
        let s = &table[(h.wrapping_add(i) & mask) as usize];
        if !s.used() {
            return None;
        }
        if identity(s) == identity(key) {
            return Some(s.service_id);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(i: u32, service_id: u32) -> abi::VipSlot {
        let a = Ipv4Addr::from(0x0a00_0000 + i);
        abi::VipSlot::v4(&abi::VipKey4::new(a, 80, 6), service_id)
    }

    fn v6(i: u32, service_id: u32) -> abi::VipSlot {
        let a = Ipv6Addr::from(0xfd00_0000_0000_0000_0000_0000_0000_0000u128 + i as u128);
        abi::VipSlot::v6(&abi::VipKey6::new(a, 443, 17), service_id)
    }

    #[track_caller]
    fn check_all_found(p: &Placement, entries: &[abi::VipSlot], probes: u32) {
        for e in entries {
            assert_eq!(lookup(&p.slots, probes, e), Some(e.service_id), "{e:?}");
        }
    }

    #[test]
    fn capacity_of_exact_vips_fits_the_window() {
        // 4,096 VIPs (the capacity), a mix of families, in the real table.
        let entries: Vec<_> = (0..abi::MAX_VIPS)
            .map(|i| if i % 3 == 0 { v6(i, i) } else { v4(i, i) })
            .collect();
        let p = place(&entries, abi::VIP_INDEX_SLOTS, abi::VIP_INDEX_PROBES);
        assert!(p.complete(), "{} unplaced", p.unplaced);
        check_all_found(&p, &entries, abi::VIP_INDEX_PROBES);
        assert_eq!(p.slots.iter().filter(|s| s.used()).count(), entries.len());
        // Non-VIPs miss.
        for i in abi::MAX_VIPS..abi::MAX_VIPS + 1000 {
            assert_eq!(lookup(&p.slots, abi::VIP_INDEX_PROBES, &v4(i, 0)), None);
        }
    }

    #[test]
    fn placement_is_deterministic_whatever_the_input_order() {
        let mut entries: Vec<_> = (0..500).map(|i| v4(i, i)).collect();
        let a = place(&entries, 1024, 4);
        entries.reverse();
        let b = place(&entries, 1024, 4);
        assert_eq!(a, b);
    }

    /// Keys of a small table whose home slot is `home`.
    fn with_home(home: u32, slots: u32, n: usize) -> Vec<abi::VipSlot> {
        (0..200_000)
            .map(|i| v4(i, i + 1))
            .filter(|s| s.hash() & (slots - 1) == home)
            .take(n)
            .collect()
    }

    #[test]
    fn colliding_keys_share_a_probe_chain() {
        let slots = 64;
        let same = with_home(5, slots, 4);
        assert_eq!(same.len(), 4);
        let p = place(&same, slots, 4);
        assert!(p.complete());
        check_all_found(&p, &same, 4);
        for i in 5..9 {
            assert!(p.slots[i].used(), "slot {i}");
        }
        // Removing the first of the chain: the others are placed again and
        // still found (the rebuild never leaves a hole in a chain).
        let p = place(&same[1..], slots, 4);
        check_all_found(&p, &same[1..], 4);
        assert_eq!(lookup(&p.slots, 4, &same[0]), None);
    }

    #[test]
    fn a_full_probe_window_is_incomplete() {
        let slots = 64;
        let same = with_home(9, slots, 5);
        assert_eq!(same.len(), 5);
        let p = place(&same, slots, 4);
        assert!(!p.complete());
        assert_eq!(p.unplaced, 1);
        // With a deeper window it fits.
        assert!(place(&same, slots, 5).complete());
        // More VIPs than slots never fit.
        let many: Vec<_> = (0..64).map(|i| v4(i, i)).collect();
        assert_eq!(place(&many, slots, 64).unplaced, 64);
    }

    #[test]
    fn chains_wrap_around_the_end_of_the_half() {
        let slots = 64;
        let last = with_home(63, slots, 3);
        let p = place(&last, slots, 4);
        assert!(p.complete());
        assert!(p.slots[63].used() && p.slots[0].used() && p.slots[1].used());
        check_all_found(&p, &last, 4);
    }
}
