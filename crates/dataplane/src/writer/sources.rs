//! The addresses the datapath writes as sources: L3 DSR's tunnel source, the SNAT source and port
//! range of translated flows, and the interface (MAC, ifindex) the program answers on.

use super::*;

impl Dataplane {
    /// Records the interface the programs are attached to: its MAC is the
    /// source of frames sent back out (L2 DSR, ICMP answers).
    pub fn set_interface(&mut self, mac: [u8; 6], ifindex: u32) -> Result<(), Error> {
        self.maps
            .iface
            .set(
                0,
                abi::Iface {
                    mac,
                    pad: 0,
                    ifindex,
                },
                0,
            )
            .map_err(|e| map_err("iface_mac_map", e))
    }

    /// The outer source addresses of L3 DSR tunnels in force.
    pub fn tunnel_source(&self) -> (Option<std::net::Ipv4Addr>, Option<std::net::Ipv6Addr>) {
        self.tunnel_source
    }

    /// Sets the outer source addresses of L3 DSR tunnels (`tunnelSource`).
    pub fn set_tunnel_source(
        &mut self,
        v4: Option<std::net::Ipv4Addr>,
        v6: Option<std::net::Ipv6Addr>,
    ) -> Result<(), Error> {
        let cfg = abi::TunnelConfig {
            src4: v4.map(abi::be_addr4).unwrap_or(0),
            src6: v6.map(|a| a.octets()).unwrap_or([0; 16]),
            flags: 0,
        };
        self.tunnel_source = (v4, v6);
        self.maps
            .tunnel
            .set(0, cfg, 0)
            .map_err(|e| map_err("tunnel_config_map", e))
    }

    /// The source of translated flows in force.
    pub fn snat_source(&self) -> &crate::snat::SnatSource {
        &self.snat_source
    }

    /// Sets the source of translated flows (the node's addresses, the
    /// port range, the idle times). Refused, with nothing changed, when the
    /// range is empty. Set it before the apply whose VIPs need it: apply
    /// refuses a VIP with translated backends of a family without an
    /// address (the daemon sets both, and restores both if apply fails).
    /// An idle time is converted to ticks with the kernel's HZ (1000 if it
    /// cannot be learnt: the longest hold in real time).
    pub fn set_snat_source(&mut self, source: crate::snat::SnatSource) -> Result<(), Error> {
        let hz = crate::jiffies::hz().unwrap_or(1000);
        let cfg = source.to_config(hz).map_err(Error::Invalid)?;
        self.maps
            .snat_config
            .set(0, cfg, 0)
            .map_err(|e| map_err("snat_config_map", e))?;
        self.snat_source = source;
        Ok(())
    }

    /// Sets the node ports of translated flows (`--snat-ports`) without
    /// writing the map: they take effect with the next
    /// [`Self::set_snat_source`], so a restarted daemon's adopted
    /// configuration keeps translating until its source has its addresses.
    pub fn set_snat_ports(&mut self, ports: std::ops::RangeInclusive<u16>) -> Result<(), Error> {
        if ports.is_empty() || *ports.start() == 0 {
            return Err(Error::Invalid(format!(
                "SNAT ports {}-{}: need a non-empty range of ports 1-65535",
                ports.start(),
                ports.end()
            )));
        }
        self.snat_source.ports = ports;
        Ok(())
    }

    /// Reads the adopted source of translated flows (addresses and ports;
    /// idle times stay the defaults until the next set).
    pub(super) fn read_snat_source(&mut self) -> Result<(), Error> {
        let c = self
            .maps
            .snat_config
            .get(&0, 0)
            .map_err(|e| map_err("snat_config_map", e))?;
        let s = &mut self.snat_source;
        s.v4 = (c.flags & abi::snat_config_flags::ADDR4 != 0).then(|| abi::addr4_from_be(c.addr4));
        s.v6 = (c.flags & abi::snat_config_flags::ADDR6 != 0)
            .then(|| std::net::Ipv6Addr::from(c.addr6));
        if c.port_min != 0 && c.port_min <= c.port_max {
            s.ports = c.port_min..=c.port_max;
        }
        Ok(())
    }

    /// The datapath's source-translation counters, summed over CPUs.
    pub fn snat_counters(&self) -> Result<crate::snat::SnatCounters, Error> {
        let mut out = [0u64; abi::snat_counter::COUNT as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            let per_cpu = self
                .maps
                .snat_stats
                .get(&(i as u32), 0)
                .map_err(|e| map_err("snat_stats_map", e))?;
            *slot = per_cpu.iter().sum();
        }
        Ok(out)
    }
}
