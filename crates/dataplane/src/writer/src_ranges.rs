//! `loadBalancerSourceRanges` in src_range_map(6): two banks per service, the one not in force
//! written before the service entry flips to it; read back on adoption; capacity checked before
//! an apply.

use super::*;

/// Whether service flags turn source ranges on.
pub(super) fn source_ranges_set(flags: u8) -> bool {
    flags & abi::service_flags::SOURCE_RANGES != 0
}

/// The tag of a VIP's source-range keys in `bank`.
pub(super) fn src_tag(service_id: u32, bank: u32) -> u32 {
    if bank == 1 {
        service_id | abi::SRC_RANGE_BANK
    } else {
        service_id
    }
}

pub(super) fn src_key4(
    tag: u32,
    a: Ipv4Addr,
    len: u8,
) -> aya::maps::lpm_trie::Key<maps::SrcRangeData4> {
    aya::maps::lpm_trie::Key::new(
        32 + u32::from(len),
        maps::SrcRangeData4 {
            tag,
            addr: a.octets(),
        },
    )
}

pub(super) fn src_key6(
    tag: u32,
    a: Ipv6Addr,
    len: u8,
) -> aya::maps::lpm_trie::Key<maps::SrcRangeData6> {
    aya::maps::lpm_trie::Key::new(
        32 + u32::from(len),
        maps::SrcRangeData6 {
            tag,
            addr: a.octets(),
        },
    )
}

impl Dataplane {
    /// The source ranges and bank in force for a programmed VIP.
    pub(super) fn src_ranges_in_force(
        &self,
        key: &VipKey,
    ) -> Option<(Option<Vec<SourceRange>>, u32)> {
        self.vips
            .get(key)
            .map(|v| (v.spec.source_ranges.clone(), v.src_bank))
    }

    /// Makes src_range_map(6) hold exactly `want` under `tag`: missing
    /// prefixes inserted, others of the tag removed.
    pub(super) fn write_src_ranges(
        &mut self,
        tag: u32,
        want: &BTreeSet<SourceRange>,
    ) -> Result<(), Error> {
        let have = self.src_ranges.get(&tag).cloned().unwrap_or_default();
        let service_id = tag & !abi::SRC_RANGE_BANK;
        for r in want.difference(&have) {
            match r.addr {
                IpAddr::V4(a) => self
                    .maps
                    .src_range
                    .insert(&src_key4(tag, a, r.prefix_len), service_id, 0)
                    .map_err(|e| map_err("src_range_map", e))?,
                IpAddr::V6(a) => self
                    .maps
                    .src_range6
                    .insert(&src_key6(tag, a, r.prefix_len), service_id, 0)
                    .map_err(|e| map_err("src_range_map6", e))?,
            }
        }
        for r in have.difference(want) {
            let (res, map) = match r.addr {
                IpAddr::V4(a) => (
                    self.maps.src_range.remove(&src_key4(tag, a, r.prefix_len)),
                    "src_range_map",
                ),
                IpAddr::V6(a) => (
                    self.maps.src_range6.remove(&src_key6(tag, a, r.prefix_len)),
                    "src_range_map6",
                ),
            };
            absent_ok(res).map_err(|e| map_err(map, e))?;
        }
        if want.is_empty() {
            self.src_ranges.remove(&tag);
        } else {
            self.src_ranges.insert(tag, want.clone());
        }
        Ok(())
    }

    /// Reads src_range_map(6) back (adoption); entries the writer cannot
    /// have made (a prefix length beyond the tag and address) are removed.
    pub(super) fn read_src_ranges(&mut self, report: &mut AdoptReport) -> Result<(), Error> {
        let mut bad4 = Vec::new();
        for item in self.maps.src_range.iter() {
            let (k, _) = item.map_err(|e| map_err("src_range_map", e))?;
            let (len, d) = (k.prefix_len(), k.data());
            match len.checked_sub(32).filter(|l| *l <= 32) {
                Some(l) => {
                    self.src_ranges
                        .entry(d.tag)
                        .or_default()
                        .insert(SourceRange::new(Ipv4Addr::from(d.addr).into(), l as u8));
                }
                None => bad4.push(k),
            }
        }
        let mut bad6 = Vec::new();
        for item in self.maps.src_range6.iter() {
            let (k, _) = item.map_err(|e| map_err("src_range_map6", e))?;
            let (len, d) = (k.prefix_len(), k.data());
            match len.checked_sub(32).filter(|l| *l <= 128) {
                Some(l) => {
                    self.src_ranges
                        .entry(d.tag)
                        .or_default()
                        .insert(SourceRange::new(Ipv6Addr::from(d.addr).into(), l as u8));
                }
                None => bad6.push(k),
            }
        }
        for k in bad4 {
            report.dropped.push(format!(
                "src_range_map entry of tag {:#x}: prefix length {} is not the writer's",
                k.data().tag,
                k.prefix_len()
            ));
            let _ = self.maps.src_range.remove(&k);
        }
        for k in bad6 {
            report.dropped.push(format!(
                "src_range_map6 entry of tag {:#x}: prefix length {} is not the writer's",
                k.data().tag,
                k.prefix_len()
            ));
            let _ = self.maps.src_range6.remove(&k);
        }
        Ok(())
    }

    /// Fails when the source ranges would not fit in the tries while
    /// applying `desired`: a VIP whose list changes holds its old and its
    /// new list at once, and removed VIPs keep theirs until after the added
    /// ones are written.
    pub(super) fn check_src_range_capacity(
        &self,
        desired: &BTreeMap<VipKey, VipSpec>,
    ) -> Result<(), Error> {
        let mut need = [0usize; 2];
        let fam = |k: &VipKey| usize::from(k.addr.is_ipv6());
        for (k, v) in &self.vips {
            need[fam(k)] += v.spec.source_ranges.as_ref().map_or(0, Vec::len);
        }
        for (k, spec) in desired {
            let cur = self.vips.get(k).and_then(|v| v.spec.source_ranges.as_ref());
            if let Some(want) = &spec.source_ranges
                && cur != Some(want)
            {
                need[fam(k)] += want.len();
            }
        }
        for (map, n) in [("src_range_map", need[0]), ("src_range_map6", need[1])] {
            if n > abi::MAX_SRC_RANGES as usize {
                return Err(Error::Capacity(format!(
                    "{map}: source ranges need {n} prefixes while applying, at most {} fit",
                    abi::MAX_SRC_RANGES
                )));
            }
        }
        Ok(())
    }
}
