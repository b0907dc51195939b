//! An AddressPool's `addresses` entries as inclusive integer intervals per address family.
//!
//! Why integers: membership, overlap between pools, "first free address" and counting are all
//! interval arithmetic; one `u128` form serves IPv4 and IPv6 alike.

use std::fmt;
use std::net::IpAddr;

/// IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// The family of an address.
    pub fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        })
    }
}

/// One `addresses` entry: every address from `first` to `last`, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// The family of both ends.
    pub family: Family,
    /// Lowest address, as an integer.
    pub first: u128,
    /// Highest address, as an integer.
    pub last: u128,
}

impl Block {
    /// Parses `10.0.0.0/24`, `fd00::/120` or `10.0.0.10-10.0.0.20` (the CRD's syntax).
    pub fn parse(s: &str) -> Result<Block, String> {
        if let Some((start, end)) = s.split_once('-') {
            let a: IpAddr = start
                .parse()
                .map_err(|_| format!("{s:?}: {start:?} is not an IP address"))?;
            let b: IpAddr = end
                .parse()
                .map_err(|_| format!("{s:?}: {end:?} is not an IP address"))?;
            if Family::of(&a) != Family::of(&b) {
                return Err(format!("{s:?}: the ends are of different families"));
            }
            let (first, last) = (to_int(a), to_int(b));
            if first > last {
                return Err(format!("{s:?}: the start is above the end"));
            }
            return Ok(Block {
                family: Family::of(&a),
                first,
                last,
            });
        }
        let (addr, len) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is neither a CIDR nor a range"))?;
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?}: {addr:?} is not an IP address"))?;
        let bits = match ip {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        let len: u32 = len
            .parse()
            .ok()
            .filter(|l| *l <= bits)
            .ok_or_else(|| format!("{s:?}: bad prefix length"))?;
        let host_bits = bits - len;
        let mask: u128 = if host_bits == 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        let first = to_int(ip);
        if first & mask != 0 {
            return Err(format!("{s:?} has host bits set"));
        }
        Ok(Block {
            family: Family::of(&ip),
            first,
            last: first | mask,
        })
    }

    /// Whether `ip` is in the block.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        Family::of(ip) == self.family && (self.first..=self.last).contains(&to_int(*ip))
    }

    /// Whether the two blocks share an address.
    pub fn overlaps(&self, other: &Block) -> bool {
        self.family == other.family && self.first <= other.last && other.first <= self.last
    }

    /// Number of addresses (saturating at `u128::MAX` for `::/0`).
    pub fn size(&self) -> u128 {
        (self.last - self.first).saturating_add(1)
    }
}

/// The first two entries of `blocks` (by index) that share an address, if any.
///
/// Why the controller checks this itself: the CRD refuses overlapping IPv4 blocks and IPv6
/// CIDRs of one pool, but CEL cannot compare IPv6 ranges, so two overlapping IPv6 ranges (or
/// any overlap in a pool written before the rules existed) reach the allocator.
pub fn first_overlap(blocks: &[Block]) -> Option<(usize, usize)> {
    (0..blocks.len()).find_map(|i| {
        (i + 1..blocks.len())
            .find(|j| blocks[i].overlaps(&blocks[*j]))
            .map(|j| (i, j))
    })
}

/// The distinct addresses of `blocks` per family, as disjoint blocks sorted by family and
/// start (overlapping and adjacent blocks merged).
///
/// Why: a pool's counts must count every address once; summing the blocks' sizes counts an
/// address in two overlapping blocks twice and shows addresses that do not exist as free.
pub fn union(blocks: &[Block]) -> Vec<Block> {
    let mut sorted = blocks.to_vec();
    sorted.sort_by_key(|b| (b.family, b.first, b.last));
    let mut out: Vec<Block> = Vec::new();
    for b in sorted {
        match out.last_mut() {
            Some(l) if l.family == b.family && b.first <= l.last.saturating_add(1) => {
                l.last = l.last.max(b.last);
            }
            _ => out.push(b),
        }
    }
    out
}

/// Whether an IPv4 address ends in .0 or .255 (MetalLB's `avoidBuggyIPs`: some clients and
/// routers treat them as network or broadcast addresses whatever the prefix).
pub fn is_buggy(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => matches!(v4.octets()[3], 0 | 255),
        IpAddr::V6(_) => false,
    }
}

/// How many IPv4 addresses in `first..=last` (as integers) end in .0 or .255, computed rather
/// than counted so a /8 costs nothing.
pub fn buggy_count(first: u128, last: u128) -> u128 {
    // Numbers n in 0..=x with n % 256 == r.
    let upto = |x: u128, r: u128| if x < r { 0 } else { (x - r) / 256 + 1 };
    let within = |r: u128| upto(last, r) - if first == 0 { 0 } else { upto(first - 1, r) };
    within(0) + within(255)
}

/// An address as an integer (IPv4 in the low 32 bits).
pub fn to_int(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The address of integer `n` in `family`.
pub fn from_int(family: Family, n: u128) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4((n as u32).into()),
        Family::V6 => IpAddr::V6(n.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cidrs_and_ranges() {
        let b = Block::parse("10.0.0.0/30").unwrap();
        assert_eq!((b.family, b.size()), (Family::V4, 4));
        assert!(b.contains(&"10.0.0.3".parse().unwrap()));
        assert!(!b.contains(&"10.0.0.4".parse().unwrap()));
        let r = Block::parse("fd00::10-fd00::1f").unwrap();
        assert_eq!((r.family, r.size()), (Family::V6, 16));
        assert_eq!(Block::parse("::/0").unwrap().size(), u128::MAX);
        assert_eq!(Block::parse("10.0.0.7/32").unwrap().size(), 1);
        for bad in [
            "10.0.0.1/24",
            "10.0.0.0/33",
            "x",
            "10.0.0.9-10.0.0.1",
            "10.0.0.1-fd00::1",
        ] {
            assert!(Block::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn overlap_is_per_family() {
        let a = Block::parse("10.0.0.0/24").unwrap();
        assert!(a.overlaps(&Block::parse("10.0.0.255-10.0.1.3").unwrap()));
        assert!(!a.overlaps(&Block::parse("10.0.1.0/24").unwrap()));
        assert!(!a.overlaps(&Block::parse("::a00:0/120").unwrap()));
    }

    #[test]
    fn overlaps_within_a_list_are_found_for_both_families() {
        let parse = |l: &[&str]| {
            l.iter()
                .map(|b| Block::parse(b).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            first_overlap(&parse(&[
                "10.0.0.0/24",
                "fd00::1-fd00::20",
                "fd00::15-fd00::21"
            ])),
            Some((1, 2))
        );
        assert_eq!(
            first_overlap(&parse(&["10.0.0.0/25", "10.0.0.127-10.0.0.130"])),
            Some((0, 1))
        );
        // The same numbers in two families are different addresses.
        assert_eq!(first_overlap(&parse(&["10.0.0.0/24", "::a00:0/120"])), None);
        assert_eq!(
            first_overlap(&parse(&["fd00::/120", "fd00::100/120"])),
            None
        );
    }

    #[test]
    fn the_union_counts_every_address_once() {
        let parse = |l: &[&str]| {
            l.iter()
                .map(|b| Block::parse(b).unwrap())
                .collect::<Vec<_>>()
        };
        // 32 + 13 addresses listed, 33 distinct.
        let u = union(&parse(&["fd00::1-fd00::20", "fd00::15-fd00::21"]));
        assert_eq!(u.iter().map(Block::size).sum::<u128>(), 33);
        // Adjacent blocks merge; families stay apart.
        let u = union(&parse(&["10.0.0.4/30", "10.0.0.0/30", "::a00:0/126"]));
        assert_eq!(u.len(), 2);
        assert_eq!((u[0].family, u[0].size()), (Family::V4, 8));
        assert_eq!((u[1].family, u[1].size()), (Family::V6, 4));
        // Ends of the address space do not overflow.
        assert_eq!(union(&parse(&["::/0", "::1-::2"]))[0].size(), u128::MAX);
    }

    #[test]
    fn buggy_count_matches_counting() {
        for (a, b) in [
            (0u128, 0u128),
            (0, 255),
            (1, 254),
            (255, 256),
            (10, 2000),
            (256, 511),
        ] {
            let counted = (a..=b)
                .filter(|i| is_buggy(&from_int(Family::V4, *i)))
                .count() as u128;
            assert_eq!(buggy_count(a, b), counted, "{a}..={b}");
        }
    }

    #[test]
    fn buggy_addresses_are_ipv4_dot_0_and_255() {
        assert!(is_buggy(&"10.0.1.0".parse().unwrap()));
        assert!(is_buggy(&"10.0.1.255".parse().unwrap()));
        assert!(!is_buggy(&"10.0.1.1".parse().unwrap()));
        assert!(!is_buggy(&"fd00::ff".parse().unwrap()));
    }
}
