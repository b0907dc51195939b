//! The node's side of source translation (bpf/snat.h): which address and
//! ports translated flows leave from, and how long an idle mapping holds
//! its port.
//!
//! Why here and not in a VIP: the source is the node's (a Kubernetes Node's
//! InternalIP), shared by every VIP that has backends on other nodes; a VIP
//! only says which of its backends need it (`VipSpec::snat`).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;
use std::time::Duration;

use rivora_abi as abi;

/// The default node ports: above Linux's default ephemeral range
/// (`net.ipv4.ip_local_port_range` 32768-60999), so the node's own
/// connections never take a port a translated flow holds.
pub const DEFAULT_PORTS: RangeInclusive<u16> = 61000..=65535;

/// How this node translates sources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnatSource {
    /// IPv4 source; None: no IPv4 VIP may have translated backends.
    pub v4: Option<Ipv4Addr>,
    /// IPv6 source.
    pub v6: Option<Ipv6Addr>,
    /// Node ports (inclusive). A port is unique per backend endpoint and
    /// protocol, so the range bounds the concurrent flows to one endpoint.
    pub ports: RangeInclusive<u16>,
    /// An open TCP mapping gives its port up after this long idle (the
    /// flow is presumed dead: Linux's default keepalive time, 2 h).
    pub tcp_idle: Duration,
    /// After a FIN or RST (long enough for the backend's TIME_WAIT).
    pub closed_idle: Duration,
    /// A UDP mapping (conntrack's stream timeout for UDP).
    pub udp_idle: Duration,
}

impl Default for SnatSource {
    fn default() -> Self {
        Self {
            v4: None,
            v6: None,
            ports: DEFAULT_PORTS,
            tcp_idle: Duration::from_secs(7200),
            closed_idle: Duration::from_secs(60),
            udp_idle: Duration::from_secs(120),
        }
    }
}

impl SnatSource {
    /// Whether VIPs of this family may have translated backends.
    pub fn has_family(&self, v6: bool) -> bool {
        if v6 {
            self.v6.is_some()
        } else {
            self.v4.is_some()
        }
    }

    /// The map entry, with idle times in datapath ticks at `hz`.
    pub fn to_config(&self, hz: u32) -> Result<abi::SnatConfig, String> {
        if self.ports.is_empty() || *self.ports.start() == 0 {
            return Err(format!(
                "SNAT ports {}-{}: need a non-empty range of ports 1-65535",
                self.ports.start(),
                self.ports.end()
            ));
        }
        let ticks = |d: Duration| crate::jiffies::ticks_at_least(d, hz);
        let mut flags = 0;
        if self.v4.is_some() {
            flags |= abi::snat_config_flags::ADDR4;
        }
        if self.v6.is_some() {
            flags |= abi::snat_config_flags::ADDR6;
        }
        Ok(abi::SnatConfig {
            addr4: self.v4.map(abi::be_addr4).unwrap_or(0),
            addr6: self.v6.map(|a| a.octets()).unwrap_or([0; 16]),
            port_min: *self.ports.start(),
            port_max: *self.ports.end(),
            flags,
            tcp_idle: ticks(self.tcp_idle),
            closed_idle: ticks(self.closed_idle),
            udp_idle: ticks(self.udp_idle),
        })
    }
}

/// `FIRST-LAST` (as `--snat-ports` takes it).
pub fn parse_ports(s: &str) -> Result<RangeInclusive<u16>, String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("{s}: expected FIRST-LAST, such as 61000-65535"))?;
    let first: u16 = a
        .trim()
        .parse()
        .map_err(|e| format!("{s}: first port: {e}"))?;
    let last: u16 = b
        .trim()
        .parse()
        .map_err(|e| format!("{s}: last port: {e}"))?;
    if first == 0 || first > last {
        return Err(format!("{s}: need 1 <= FIRST <= LAST <= 65535"));
    }
    Ok(first..=last)
}

/// The datapath's source-translation counters summed over CPUs, by
/// `abi::snat_counter` index.
pub type SnatCounters = [u64; abi::snat_counter::COUNT as usize];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_converts_idle_times_to_ticks_and_sets_families() {
        let s = SnatSource {
            v4: Some("10.0.0.1".parse().unwrap()),
            ..SnatSource::default()
        };
        let c = s.to_config(250).unwrap();
        assert_eq!(c.flags, abi::snat_config_flags::ADDR4);
        assert_eq!(c.addr4, abi::be_addr4("10.0.0.1".parse().unwrap()));
        assert_eq!((c.port_min, c.port_max), (61000, 65535));
        // 120 s at HZ=250 = 30,000 jiffies = 234.4 ticks of 128: 235, and
        // one more for the tick the mapping was last seen in.
        assert_eq!(c.udp_idle, 236);
        assert_eq!(c.closed_idle, 15_000_u32.div_ceil(128) + 1);
        let zero = SnatSource {
            udp_idle: Duration::ZERO,
            ..s.clone()
        };
        assert_eq!(zero.to_config(250).unwrap().udp_idle, 1, "the next tick");
    }

    #[test]
    fn ports_parse_and_refuse_bad_ranges() {
        assert_eq!(parse_ports("61000-65535").unwrap(), 61000..=65535);
        assert_eq!(parse_ports("5-5").unwrap(), 5..=5);
        assert!(parse_ports("0-10").unwrap_err().contains("1 <= FIRST"));
        assert!(parse_ports("10-5").unwrap_err().contains("1 <= FIRST"));
        assert!(parse_ports("61000").unwrap_err().contains("FIRST-LAST"));
        assert!(parse_ports("a-5").unwrap_err().contains("first port"));
    }
}
