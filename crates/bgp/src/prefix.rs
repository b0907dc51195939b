//! [`Prefix`]: an IP prefix (address plus length), the key of the route set.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IPv4 or IPv6 prefix such as `192.0.2.10/32` or `2001:db8::10/128`.
///
/// Why a type of our own: the route set handed to [`crate::Speaker::set_routes`]
/// is keyed by prefix, so it must be `Ord` (IPv4 sorts before IPv6, then by
/// address and length) and always canonical, so that two equal prefixes are
/// equal keys. Construction rejects host bits beyond the length instead of
/// silently masking them, because `10.0.0.1/24` is almost always a typo.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

/// Why a [`Prefix`] could not be built or parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// The length is longer than the address (33+ for IPv4, 129+ for IPv6).
    #[error("prefix length {len} is too long for {addr} (at most {max})")]
    TooLong {
        /// The address given.
        addr: IpAddr,
        /// The length given.
        len: u8,
        /// 32 or 128.
        max: u8,
    },
    /// Bits are set after the prefix length.
    #[error("{addr}/{len} has host bits set (did you mean {canonical}?)")]
    HostBits {
        /// The address given.
        addr: IpAddr,
        /// The length given.
        len: u8,
        /// The address with the host bits cleared.
        canonical: IpAddr,
    },
    /// Text that is not `ADDRESS` or `ADDRESS/LEN`.
    #[error("{0:?} is not a prefix (expected ADDRESS or ADDRESS/LEN)")]
    Syntax(String),
}

impl Prefix {
    /// Builds `addr/len`, rejecting a too-long length or set host bits.
    ///
    /// Why strict: see the type documentation.
    pub fn new(addr: IpAddr, len: u8) -> Result<Prefix, PrefixError> {
        let max = max_len(&addr);
        if len > max {
            return Err(PrefixError::TooLong { addr, len, max });
        }
        let canonical = mask(addr, len);
        if canonical != addr {
            return Err(PrefixError::HostBits {
                addr,
                len,
                canonical,
            });
        }
        Ok(Prefix { addr, len })
    }

    /// The host route for `addr`: `/32` for IPv4, `/128` for IPv6.
    ///
    /// Why: VIPs are announced as host routes; this is the common case.
    pub fn host(addr: IpAddr) -> Prefix {
        Prefix {
            addr,
            len: max_len(&addr),
        }
    }

    /// Builds `addr/len` with the host bits cleared (for decoding the wire,
    /// where trailing bits past the length are not significant).
    pub(crate) fn new_masked(addr: IpAddr, len: u8) -> Option<Prefix> {
        if len > max_len(&addr) {
            return None;
        }
        Some(Prefix {
            addr: mask(addr, len),
            len,
        })
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in bits.
    pub fn len(&self) -> u8 {
        self.len
    }

    /// True for the zero-length (default) prefix; present because clippy
    /// expects `is_empty` beside `len`, and "default route" is a real case.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True for IPv4 prefixes (which go in the plain NLRI field); IPv6 ones
    /// travel in MP_REACH_NLRI / MP_UNREACH_NLRI.
    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// The significant leading bytes of the address, as carried in NLRI.
    pub(crate) fn significant_bytes(&self) -> Vec<u8> {
        let n = usize::from(self.len).div_ceil(8);
        match self.addr {
            IpAddr::V4(a) => a.octets()[..n].to_vec(),
            IpAddr::V6(a) => a.octets()[..n].to_vec(),
        }
    }
}

impl From<IpAddr> for Prefix {
    /// The host route for the address (see [`Prefix::host`]).
    fn from(addr: IpAddr) -> Prefix {
        Prefix::host(addr)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;

    /// Parses `ADDRESS/LEN`, or a bare `ADDRESS` as its host route.
    fn from_str(s: &str) -> Result<Prefix, PrefixError> {
        let bad = || PrefixError::Syntax(s.to_string());
        match s.split_once('/') {
            None => Ok(Prefix::host(s.parse().map_err(|_| bad())?)),
            Some((a, l)) => {
                let addr: IpAddr = a.parse().map_err(|_| bad())?;
                if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                let len: u8 = l.parse().map_err(|_| bad())?;
                Prefix::new(addr, len)
            }
        }
    }
}

fn max_len(addr: &IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(len))
            };
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display() {
        let p: Prefix = "192.0.2.10".parse().unwrap();
        assert_eq!(p.to_string(), "192.0.2.10/32");
        let p: Prefix = "2001:db8::/32".parse().unwrap();
        assert_eq!(p.len(), 32);
        assert_eq!(p.to_string(), "2001:db8::/32");
        assert!(matches!(
            "10.0.0.1/24".parse::<Prefix>(),
            Err(PrefixError::HostBits { .. })
        ));
        assert!(matches!(
            "10.0.0.0/33".parse::<Prefix>(),
            Err(PrefixError::TooLong { .. })
        ));
        assert!("10.0.0.0/".parse::<Prefix>().is_err());
        assert!("10.0.0.0/+3".parse::<Prefix>().is_err());
        assert!("nope".parse::<Prefix>().is_err());
        assert!("0.0.0.0/0".parse::<Prefix>().unwrap().is_empty());
    }

    #[test]
    fn ordering_puts_ipv4_first() {
        let a: Prefix = "2001:db8::1".parse().unwrap();
        let b: Prefix = "203.0.113.1".parse().unwrap();
        assert!(b < a);
    }

    #[test]
    fn significant_bytes() {
        let p: Prefix = "10.1.0.0/17".parse().unwrap();
        assert_eq!(p.significant_bytes(), vec![10, 1, 0]);
        let p = Prefix::new_masked("10.1.255.255".parse().unwrap(), 16).unwrap();
        assert_eq!(p.to_string(), "10.1.0.0/16");
        assert!(Prefix::new_masked("10.1.255.255".parse().unwrap(), 40).is_none());
    }
}
