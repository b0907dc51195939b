//! The announcement lab: the balancer on a shared L2 segment with a client
//! and a router, a second client behind the router, backends behind the
//! balancer.
//!
//! ```text
//!                 switch ns: bridge br0
//!        +-------------+--------------+---------------+
//!   client eth0     lb eth0         router eth0
//!   10.200.0.2      10.200.0.1      10.200.0.3          router eth1 10.201.0.1 --- remote eth0 10.201.0.2
//!   fd00:200::2     fd00:200::1     fd00:200::3                     fd00:201::1          fd00:201::2
//!                   lb br0 10.200.1.1 --- b{i} eth0 10.200.1.(10+i)   (as in the standard topology)
//! ```
//!
//! Nothing routes the VIPs: `client` reaches a VIP of the segment's subnet
//! (10.200.0.0/24, fd00:200::/64) only if something answers ARP/NDP for
//! it, and `remote` reaches other VIPs only if the router learned a route
//! for them (BGP). The lb routes the remote subnet via the router, so
//! replies to `remote` go back the way its requests came.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::link;
use crate::netns::Netns;
use crate::topology::{HOST_IF, LB_BRIDGE, LB_BRIDGE_V4, LB_BRIDGE_V6, backend_v4, backend_v6};

/// lb address on the segment (IPv4); also its BGP session address.
pub const SEG_LB_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);
/// lb address on the segment (IPv6).
pub const SEG_LB_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 1);
/// The on-link client (IPv4).
pub const SEG_CLIENT_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
/// The on-link client (IPv6).
pub const SEG_CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 2);
/// The router on the segment (IPv4); the lb's BGP peer.
pub const SEG_ROUTER_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 3);
/// The router on the segment (IPv6).
pub const SEG_ROUTER_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 3);
/// The router on the remote subnet (IPv4); the remote client's gateway.
pub const REMOTE_GW_V4: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 1);
/// The router on the remote subnet (IPv6).
pub const REMOTE_GW_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x201, 0, 0, 0, 0, 0, 1);
/// The client behind the router (IPv4).
pub const REMOTE_V4: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 2);
/// The client behind the router (IPv6).
pub const REMOTE_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x201, 0, 0, 0, 0, 0, 2);
/// The remote subnet (IPv4).
pub const REMOTE_NET_V4: &str = "10.201.0.0/24";
/// The remote subnet (IPv6).
pub const REMOTE_NET_V6: &str = "fd00:201::/64";

/// The built announcement lab. Dropping it deletes every namespace.
#[derive(Debug)]
pub struct Segment {
    /// Holds the bridge that is the shared segment.
    pub switch: Netns,
    /// The client on the segment (no routes beyond its subnets).
    pub client: Netns,
    /// The balancer: `eth0` on the segment, `br0` to the backends.
    pub lb: Netns,
    /// The router: `eth0` on the segment, `eth1` to `remote`; forwards.
    pub router: Netns,
    /// The client behind the router (default routes via it).
    pub remote: Netns,
    /// Backend hosts `b1..bN` (addresses as in [`crate::topology`]).
    pub backends: Vec<Netns>,
    /// The lb interface on the segment (XDP, ARP/NDP, BGP).
    pub lb_if: String,
}

impl Segment {
    /// Builds the lab with `backends` backends (1..=20) and checks that the
    /// lb reaches every backend and the router, and the remote client
    /// reaches the lb.
    pub fn build(tag: &str, backends: usize) -> Result<Segment> {
        if backends == 0 || backends > 20 {
            bail!("backend count must be 1..=20, got {backends}");
        }
        crate::ensure_bpffs()?;
        let tag = crate::lab_tag(tag);
        let seg = Segment {
            switch: Netns::new(&format!("{tag}s"))?,
            client: Netns::new(&format!("{tag}c"))?,
            lb: Netns::new(&format!("{tag}l"))?,
            router: Netns::new(&format!("{tag}r"))?,
            remote: Netns::new(&format!("{tag}x"))?,
            backends: (0..backends)
                .map(|_| Netns::new(&format!("{tag}b")))
                .collect::<Result<_>>()?,
            lb_if: HOST_IF.to_string(),
        };
        seg.wire().context("building the segment lab")?;
        seg.verify(Duration::from_secs(10))
            .context("the segment lab is not reachable")?;
        Ok(seg)
    }

    fn all(&self) -> impl Iterator<Item = &Netns> {
        [
            &self.switch,
            &self.client,
            &self.lb,
            &self.router,
            &self.remote,
        ]
        .into_iter()
        .chain(self.backends.iter())
    }

    fn wire(&self) -> Result<()> {
        for ns in self.all() {
            ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
            ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
        }
        for ns in [&self.lb, &self.router] {
            link::router(ns)?;
        }

        // The segment: one bridge, three ports.
        let sw = &self.switch;
        link::bridge(sw, "br0")?;
        let mut ends: Vec<(&Netns, String)> = Vec::new();
        for (port, ns, v4, v6) in [
            ("pc", &self.client, SEG_CLIENT_V4, SEG_CLIENT_V6),
            ("pl", &self.lb, SEG_LB_V4, SEG_LB_V6),
            ("pr", &self.router, SEG_ROUTER_V4, SEG_ROUTER_V6),
        ] {
            link::veth(sw, port, ns, HOST_IF)?;
            link::enslave(sw, port, "br0")?;
            link::up(sw, port)?;
            link::addr(ns, HOST_IF, &format!("{v4}/24"))?;
            link::addr(ns, HOST_IF, &format!("{v6}/64"))?;
            link::up(ns, HOST_IF)?;
            ends.push((sw, port.to_string()));
            ends.push((ns, HOST_IF.to_string()));
        }
        self.lb
            .sysctl(&format!("net.ipv4.conf.{HOST_IF}.rp_filter"), "0")?;
        self.router
            .sysctl(&format!("net.ipv4.conf.{HOST_IF}.rp_filter"), "0")?;

        // router <-> remote
        link::veth(&self.router, "eth1", &self.remote, HOST_IF)?;
        link::addr(&self.router, "eth1", &format!("{REMOTE_GW_V4}/24"))?;
        link::addr(&self.router, "eth1", &format!("{REMOTE_GW_V6}/64"))?;
        link::up(&self.router, "eth1")?;
        link::addr(&self.remote, HOST_IF, &format!("{REMOTE_V4}/24"))?;
        link::addr(&self.remote, HOST_IF, &format!("{REMOTE_V6}/64"))?;
        link::up(&self.remote, HOST_IF)?;
        link::route(&self.remote, "default", &REMOTE_GW_V4.to_string())?;
        link::route(&self.remote, "default", &REMOTE_GW_V6.to_string())?;
        ends.push((&self.router, "eth1".to_string()));
        ends.push((&self.remote, HOST_IF.to_string()));

        // lb: replies to the remote subnet go back through the router.
        link::route(&self.lb, REMOTE_NET_V4, &SEG_ROUTER_V4.to_string())?;
        link::route(&self.lb, REMOTE_NET_V6, &SEG_ROUTER_V6.to_string())?;

        // lb bridge and backends, as in the standard topology.
        let lb = &self.lb;
        link::bridge(lb, LB_BRIDGE)?;
        link::addr(lb, LB_BRIDGE, &format!("{LB_BRIDGE_V4}/24"))?;
        link::addr(lb, LB_BRIDGE, &format!("{LB_BRIDGE_V6}/64"))?;
        lb.sysctl(&format!("net.ipv4.conf.{LB_BRIDGE}.rp_filter"), "0")?;
        for (idx, b) in self.backends.iter().enumerate() {
            let i = idx + 1;
            let port = format!("b{i}");
            link::veth(lb, &port, b, HOST_IF)?;
            link::enslave(lb, &port, LB_BRIDGE)?;
            link::up(lb, &port)?;
            link::addr(b, HOST_IF, &format!("{}/24", backend_v4(i)))?;
            link::addr(b, HOST_IF, &format!("{}/64", backend_v6(i)))?;
            link::up(b, HOST_IF)?;
            link::route(b, "default", &LB_BRIDGE_V4.to_string())?;
            link::route(b, "default", &LB_BRIDGE_V6.to_string())?;
            ends.push((lb, port));
            ends.push((b, HOST_IF.to_string()));
        }
        // Real checksums on every hop (see link::disable_offloads).
        for (ns, ifname) in ends {
            link::disable_offloads(ns, &ifname)?;
        }
        Ok(())
    }

    /// lb -> every backend, lb -> router and remote -> lb, with TCP
    /// handshakes (a refused connection proves the path both ways).
    fn verify(&self, timeout: Duration) -> Result<()> {
        for ns in self.all() {
            link::wait_ipv6_settled(ns, timeout)?;
        }
        let mut from_lb: Vec<SocketAddr> = (1..=self.backends.len())
            .flat_map(|i| [IpAddr::V4(backend_v4(i)), IpAddr::V6(backend_v6(i))])
            .map(|ip| SocketAddr::new(ip, 9))
            .collect();
        from_lb.push(SocketAddr::new(SEG_ROUTER_V4.into(), 9));
        from_lb.push(SocketAddr::new(SEG_ROUTER_V6.into(), 9));
        let from_remote = vec![
            SocketAddr::new(SEG_LB_V4.into(), 9),
            SocketAddr::new(SEG_LB_V6.into(), 9),
        ];
        for (ns, targets) in [(&self.lb, from_lb), (&self.remote, from_remote)] {
            let failures = ns.within(move || reach_all(&targets, timeout))?;
            if !failures.is_empty() {
                bail!("{} cannot reach: {}", ns.name(), failures.join("; "));
            }
        }
        Ok(())
    }
}

/// Connects to each of `targets` (a refused connection counts: it proves
/// the path both ways) until `timeout`; returns the unreachable ones with
/// the last error. Shared by the labs' self-checks.
pub(crate) fn reach_all(targets: &[SocketAddr], timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut failures = Vec::new();
    for t in targets {
        let mut last = String::new();
        let reached = loop {
            match TcpStream::connect_timeout(t, Duration::from_millis(500)) {
                Ok(_) => break true,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break true,
                Err(e) => last = e.to_string(),
            }
            if Instant::now() >= deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if !reached {
            failures.push(format!("{t}: {last}"));
        }
    }
    failures
}
