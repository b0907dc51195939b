//! How a packet finds its VIP: exact VIPs in vip_map, port ranges as prefixes in vip_range_map(6),
//! and the VIP index (vip_index_map, the inlined copy of vip_map the program reads, rebuilt in the
//! half not in use and switched in one vip_index_ctl_map update), with the shadow of what they hold.

use super::*;

/// The state of the VIP index (vip_index_map), for the API and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VipIndexStatus {
    /// The program uses the index (vip_index_ctl_map says it is complete).
    pub complete: bool,
    /// The half in use.
    pub half: u32,
    /// Exact VIPs in the half in use.
    pub vips: usize,
    /// Builds (in this process) in which some VIP could not be placed within
    /// the probe window, so the index was switched off (the program then
    /// looks exact VIPs up in vip_map: correct, slower).
    pub incomplete_builds: u64,
}

/// What this process wrote to vip_index_map and vip_index_ctl_map (read
/// back at adoption), so a rebuild writes only the slots that change.
pub(super) struct IndexShadow {
    pub(super) halves: [Vec<abi::VipSlot>; 2],
    pub(super) ctl: abi::VipIndexCtl,
    pub(super) incomplete_builds: u64,
}

impl IndexShadow {
    /// The content of freshly created (all-zero) maps.
    pub(super) fn zeroed() -> Self {
        let half = vec![abi::VipSlot::default(); abi::VIP_INDEX_SLOTS as usize];
        Self {
            halves: [half.clone(), half],
            ctl: abi::VipIndexCtl::default(),
            incomplete_builds: 0,
        }
    }
}

/// The index slot of an exact VIP.
pub(super) fn index_slot(key: &VipKey, service_id: u32) -> abi::VipSlot {
    match key.addr {
        IpAddr::V4(a) => abi::VipSlot::v4(&abi::VipKey4::new(a, key.port, key.proto), service_id),
        IpAddr::V6(a) => abi::VipSlot::v6(&abi::VipKey6::new(a, key.port, key.proto), service_id),
    }
}

/// The fewest (value, bits) port prefixes that together cover exactly the
/// ports `first..=last`: each is the block of ports whose top `bits` bits
/// equal those of `value` (the other bits of `value` are zero). `0..=65535`
/// is the single prefix `(0, 0)`; an empty range (`first > last`) has none.
///
/// Greedy from the bottom: at each step take the largest block that starts
/// at the current port (aligned to its size) and does not pass `last`. That
/// is minimal (at most 30 prefixes for 16-bit ports).
pub fn port_range_prefixes(first: u16, last: u16) -> Vec<(u16, u8)> {
    let mut out = Vec::new();
    let mut start = u32::from(first);
    let end = u32::from(last) + 1; // exclusive
    while start < end {
        // Largest power of two the start is aligned to (0 is aligned to all).
        let mut size = if start == 0 {
            1 << 16
        } else {
            1u32 << start.trailing_zeros()
        };
        while size > end - start {
            size >>= 1;
        }
        out.push((start as u16, 16 - size.trailing_zeros() as u8));
        start += size;
    }
    out
}

/// The range `prefixes` cover when they are exactly the minimal cover of
/// one range (as [`port_range_prefixes`] writes it); they must be sorted.
pub(super) fn range_of(prefixes: &[RangePrefix]) -> Option<(u16, u16)> {
    let first = prefixes.first()?.port;
    let last_prefix = prefixes.last()?;
    let end = u32::from(last_prefix.port) + (1u32 << (16 - last_prefix.bits));
    let last = u16::try_from(end - 1).ok()?;
    let want = port_range_prefixes(first, last);
    let have: Vec<(u16, u8)> = prefixes.iter().map(|p| (p.port, p.bits)).collect();
    (want == have).then_some((first, last))
}

/// One entry of a port-range trie: an address, a protocol, and the ports
/// whose top `bits` bits equal those of `port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct RangePrefix {
    pub(super) addr: IpAddr,
    pub(super) proto: u8,
    pub(super) port: u16,
    pub(super) bits: u8,
}

impl RangePrefix {
    /// The prefixes of a range VIP (none for an exact VIP).
    pub(super) fn of(key: &VipKey) -> Vec<RangePrefix> {
        if key.is_exact() {
            return Vec::new();
        }
        port_range_prefixes(key.port, key.port_last)
            .into_iter()
            .map(|(port, bits)| RangePrefix {
                addr: key.addr,
                proto: key.proto,
                port,
                bits,
            })
            .collect()
    }

    /// Bits of the key before the port: protocol and address.
    pub(super) fn head_bits(addr: IpAddr) -> u32 {
        8 + if addr.is_ipv4() { 32 } else { 128 }
    }

    pub(super) fn key4(&self, a: Ipv4Addr) -> abi::VipRangeKey4 {
        abi::VipRangeKey4 {
            prefixlen: Self::head_bits(self.addr) + u32::from(self.bits),
            proto: self.proto,
            addr: a.octets(),
            port: self.port.to_be_bytes(),
            pad: 0,
        }
    }

    pub(super) fn key6(&self, a: Ipv6Addr) -> abi::VipRangeKey6 {
        abi::VipRangeKey6 {
            prefixlen: Self::head_bits(self.addr) + u32::from(self.bits),
            proto: self.proto,
            addr: a.octets(),
            port: self.port.to_be_bytes(),
            pad: 0,
        }
    }

    /// A trie entry read back, and why it cannot be one the writer made.
    pub(super) fn read(
        addr: IpAddr,
        proto: u8,
        prefixlen: u32,
        port: [u8; 2],
        pad: u8,
    ) -> (RangePrefix, Option<String>) {
        let head = Self::head_bits(addr);
        let bits = prefixlen.saturating_sub(head).min(16) as u8;
        let prefix = RangePrefix {
            addr,
            proto,
            port: u16::from_be_bytes(port),
            bits,
        };
        let mask = if bits == 0 {
            0
        } else {
            u16::MAX << (16 - bits)
        };
        let why = if prefixlen < head || prefixlen > head + 16 {
            Some(format!(
                "prefix length {prefixlen} does not cover a whole address"
            ))
        } else if prefix.port & !mask != 0 || pad != 0 {
            Some("port bits set beyond the prefix".to_string())
        } else {
            None
        };
        (prefix, why)
    }
}

impl fmt::Display for RangePrefix {
    /// `10.0.0.1 proto 6 port 8000/10`: the port prefix and its length.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} proto {} port {}/{}",
            self.addr, self.proto, self.port, self.bits
        )
    }
}

impl Dataplane {
    /// The state of the VIP index.
    pub fn vip_index_status(&self) -> VipIndexStatus {
        let half = self.index.ctl.half & 1;
        VipIndexStatus {
            complete: self.index.ctl.flags & abi::vip_index_flags::COMPLETE != 0,
            half,
            vips: self.index.halves[half as usize]
                .iter()
                .filter(|s| s.used())
                .count(),
            incomplete_builds: self.index.incomplete_builds,
        }
    }

    /// Rebuilds the VIP index for the programmed VIPs except `leaving` and
    /// switches the program to it.
    ///
    /// While the index in use is complete, the new one is written into the
    /// other half and the switch is one vip_index_ctl_map update. While it
    /// is not (fresh maps, a failed placement), nothing reads the slots and
    /// the half it names is rewritten in place before being switched on.
    /// Either way a reader that sees `half` and `flags` of different updates
    /// still gets a correct answer: it never pairs COMPLETE with a half that
    /// was not complete. A half switched away from is rewritten no earlier
    /// than the next change, long after any program run that read it (runs
    /// last microseconds).
    ///
    /// If a VIP cannot be placed within the probe window, the index is
    /// switched off instead: the program looks exact VIPs up in vip_map.
    pub(super) fn sync_vip_index(&mut self, leaving: &BTreeSet<VipKey>) -> Result<(), Error> {
        use abi::vip_index_flags::{COMPLETE, RANGES4, RANGES6};
        let mut entries = Vec::new();
        let mut flags = COMPLETE;
        for (key, v) in self.vips.iter().filter(|(k, _)| !leaving.contains(k)) {
            if key.is_exact() {
                entries.push(index_slot(key, v.service_id));
            } else if key.addr.is_ipv4() {
                flags |= RANGES4;
            } else {
                flags |= RANGES6;
            }
        }
        let placement = vip_index::place(&entries, abi::VIP_INDEX_SLOTS, abi::VIP_INDEX_PROBES);
        let cur = self.index.ctl;
        if !placement.complete() {
            self.index.incomplete_builds += 1;
            tracing::warn!(
                vips = entries.len(),
                unplaced = placement.unplaced,
                "VIP index: some VIPs do not fit within {} probes of their home slot; \
                 exact VIPs are looked up in vip_map instead (correct, slower)",
                abi::VIP_INDEX_PROBES
            );
            return self.write_index_ctl(abi::VipIndexCtl {
                half: cur.half,
                flags: 0,
            });
        }
        let half = if cur.flags & COMPLETE != 0
            && self.index.halves[cur.half as usize] != placement.slots
        {
            cur.half ^ 1
        } else {
            cur.half
        };
        for (i, slot) in placement.slots.iter().enumerate() {
            if self.index.halves[half as usize][i] != *slot {
                self.maps
                    .vip_index
                    .set(half * abi::VIP_INDEX_SLOTS + i as u32, *slot, 0)
                    .map_err(|e| map_err("vip_index_map", e))?;
                self.index.halves[half as usize][i] = *slot;
            }
        }
        self.write_index_ctl(abi::VipIndexCtl { half, flags })
    }

    /// Switches the VIP index off (the program falls back to vip_map).
    pub(super) fn disable_vip_index(&mut self) -> Result<(), Error> {
        let half = self.index.ctl.half;
        self.write_index_ctl(abi::VipIndexCtl { half, flags: 0 })
    }

    pub(super) fn write_index_ctl(&mut self, ctl: abi::VipIndexCtl) -> Result<(), Error> {
        if ctl != self.index.ctl {
            self.maps
                .vip_index_ctl
                .set(0, ctl, 0)
                .map_err(|e| map_err("vip_index_ctl_map", e))?;
            self.index.ctl = ctl;
        }
        Ok(())
    }

    /// Reads the VIP index maps back (adoption).
    pub(super) fn read_vip_index(&mut self) -> Result<(), Error> {
        let mut ctl = self
            .maps
            .vip_index_ctl
            .get(&0, 0)
            .map_err(|e| map_err("vip_index_ctl_map", e))?;
        for half in 0..2u32 {
            for i in 0..abi::VIP_INDEX_SLOTS {
                self.index.halves[half as usize][i as usize] = self
                    .maps
                    .vip_index
                    .get(&(half * abi::VIP_INDEX_SLOTS + i), 0)
                    .map_err(|e| map_err("vip_index_map", e))?;
            }
        }
        if ctl.half > 1 {
            // Not something this writer produces: switch it off.
            ctl = abi::VipIndexCtl::default();
            self.maps
                .vip_index_ctl
                .set(0, ctl, 0)
                .map_err(|e| map_err("vip_index_ctl_map", e))?;
        }
        self.index.ctl = ctl;
        Ok(())
    }

    /// Inserts a VIP: its vip_map(6) entry, or the prefixes of its range.
    pub(super) fn insert_vip_key(&mut self, key: &VipKey, service_id: u32) -> Result<(), Error> {
        if !key.is_exact() {
            for prefix in RangePrefix::of(key) {
                self.insert_prefix(&prefix, service_id)?;
            }
            return Ok(());
        }
        let value = abi::VipValue { service_id };
        match key.addr {
            IpAddr::V4(a) => self
                .maps
                .vip_map
                .insert(abi::VipKey4::new(a, key.port, key.proto), value, 0)
                .map_err(|e| map_err("vip_map", e)),
            IpAddr::V6(a) => self
                .maps
                .vip_map6
                .insert(abi::VipKey6::new(a, key.port, key.proto), value, 0)
                .map_err(|e| map_err("vip_map6", e)),
        }
    }

    /// Removes a VIP's vip_map(6) entry, or the prefixes of its range that
    /// no programmed VIP uses (a new range sharing a prefix with a removed
    /// one has already overwritten it).
    pub(super) fn remove_vip_key(&mut self, key: &VipKey) -> Result<(), Error> {
        if !key.is_exact() {
            let kept: BTreeSet<RangePrefix> = self
                .vips
                .keys()
                .filter(|k| k.addr == key.addr && k.proto == key.proto && !k.is_exact())
                .flat_map(RangePrefix::of)
                .collect();
            for prefix in RangePrefix::of(key) {
                if !kept.contains(&prefix) {
                    self.remove_prefix(&prefix)?;
                }
            }
            return Ok(());
        }
        let res = match key.addr {
            IpAddr::V4(a) => self
                .maps
                .vip_map
                .remove(&abi::VipKey4::new(a, key.port, key.proto)),
            IpAddr::V6(a) => self
                .maps
                .vip_map6
                .remove(&abi::VipKey6::new(a, key.port, key.proto)),
        };
        absent_ok(res).map_err(|e| map_err("vip_map", e))
    }

    pub(super) fn insert_prefix(
        &mut self,
        prefix: &RangePrefix,
        service_id: u32,
    ) -> Result<(), Error> {
        let value = abi::VipValue { service_id };
        match prefix.addr {
            IpAddr::V4(a) => self
                .maps
                .vip_range_map
                .insert(&maps::lpm_key4(&prefix.key4(a)), value, 0)
                .map_err(|e| map_err("vip_range_map", e)),
            IpAddr::V6(a) => self
                .maps
                .vip_range_map6
                .insert(&maps::lpm_key6(&prefix.key6(a)), value, 0)
                .map_err(|e| map_err("vip_range_map6", e)),
        }
    }

    pub(super) fn remove_prefix(&mut self, prefix: &RangePrefix) -> Result<(), Error> {
        let (res, map) = match prefix.addr {
            IpAddr::V4(a) => (
                self.maps
                    .vip_range_map
                    .remove(&maps::lpm_key4(&prefix.key4(a))),
                "vip_range_map",
            ),
            IpAddr::V6(a) => (
                self.maps
                    .vip_range_map6
                    .remove(&maps::lpm_key6(&prefix.key6(a))),
                "vip_range_map6",
            ),
        };
        absent_ok(res).map_err(|e| map_err(map, e))
    }

    /// Every prefix of both range tries, grouped by (address, protocol,
    /// service ID) and sorted by port, and the entries that cannot be ours
    /// (a prefix length or port outside what the writer produces).
    #[allow(clippy::type_complexity)]
    pub(super) fn read_range_prefixes(
        &self,
    ) -> Result<
        (
            BTreeMap<(IpAddr, u8, u32), Vec<RangePrefix>>,
            Vec<(RangePrefix, String)>,
        ),
        Error,
    > {
        let mut raw: Vec<(RangePrefix, u32, Option<String>)> = Vec::new();
        for item in self.maps.vip_range_map.iter() {
            let (k, v) = item.map_err(|e| map_err("vip_range_map", e))?;
            let k = maps::abi_key4(&k);
            let (prefix, why) = RangePrefix::read(
                Ipv4Addr::from(k.addr).into(),
                k.proto,
                k.prefixlen,
                k.port,
                k.pad,
            );
            raw.push((prefix, v.service_id, why));
        }
        for item in self.maps.vip_range_map6.iter() {
            let (k, v) = item.map_err(|e| map_err("vip_range_map6", e))?;
            let k = maps::abi_key6(&k);
            let (prefix, why) = RangePrefix::read(
                Ipv6Addr::from(k.addr).into(),
                k.proto,
                k.prefixlen,
                k.port,
                k.pad,
            );
            raw.push((prefix, v.service_id, why));
        }
        let mut groups: BTreeMap<(IpAddr, u8, u32), Vec<RangePrefix>> = BTreeMap::new();
        let mut bad = Vec::new();
        for (prefix, service_id, why) in raw {
            match why {
                Some(why) => bad.push((prefix, why)),
                None => groups
                    .entry((prefix.addr, prefix.proto, service_id))
                    .or_default()
                    .push(prefix),
            }
        }
        for prefixes in groups.values_mut() {
            prefixes.sort();
        }
        Ok((groups, bad))
    }
}
