//! The direct-server-return lab: a client segment shared by the client, the
//! balancer, a router and L2 DSR backends; L3 DSR backends one routed hop
//! away behind the router; and (optionally) a full-NAT backend behind the
//! balancer. Replies of DSR backends reach the client without entering the
//! balancer's namespace.
//!
//! ```text
//!                    switch ns: bridge br0 (10.200.0.0/24, fd00:200::/64)
//!   client eth0 .2 ----+---- lb eth0 .1 (XDP)          lb eth1 10.200.9.1 ---- router eth1 10.200.9.2
//!                      +---- router eth0 .3                                    router br1 10.200.1.1
//!                      +---- L2 backend l{i} eth0 .(20+i)                        +-- L3 backend r{i} eth0 10.200.1.(10+i)
//!   lb eth2 10.200.3.1 ---- NAT backend n1 eth0 10.200.3.11 (default via lb)
//! ```
//!
//! The client routes the VIP ranges via the balancer (10.200.0.1). The
//! balancer routes the L3 backends via the router (the tunnel path,
//! tunnel source 10.200.9.1 / fd00:200:9::1). L3 backends route everything
//! via the router, which reaches the client segment directly: their replies
//! go backend -> router -> switch -> client. L2 backends answer the client
//! on the segment. IPv6 uses the same layout under fd00:200:...
//!
//! Every veth end has its offloads off (see [`link::disable_offloads`]), so
//! every hop verifies real checksums.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::link;
use crate::netns::Netns;
use crate::topology::{backend_v4, backend_v6};

/// The balancer's interface on the client segment (where XDP runs).
pub const LB_IF: &str = "eth0";
/// The switch's bridge port facing the client: its ingress sees the
/// client's packets as they are on the wire.
pub const CLIENT_PORT: &str = "pc";
/// Client address (IPv4).
pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
/// Client address (IPv6).
pub const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 2);
/// Balancer on the client segment (IPv4): the client's route to the VIPs.
pub const LB_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);
/// Balancer on the client segment (IPv6).
pub const LB_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 1);
/// Router on the client segment (IPv4).
pub const ROUTER_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 3);
/// Router on the client segment (IPv6).
pub const ROUTER_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 3);
/// Balancer's end of the tunnel link (IPv4): the `tunnelSource`.
pub const TUNNEL_SRC_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 9, 1);
/// Balancer's end of the tunnel link (IPv6): the `tunnelSource`.
pub const TUNNEL_SRC_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 9, 0, 0, 0, 0, 1);
/// Router's end of the tunnel link (IPv4).
pub const ROUTER_TUN_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 9, 2);
/// Router's end of the tunnel link (IPv6).
pub const ROUTER_TUN_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 9, 0, 0, 0, 0, 2);
/// Router on the L3 backends' segment (IPv4): their default gateway.
pub const ROUTER_BE_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 1, 1);
/// Router on the L3 backends' segment (IPv6).
pub const ROUTER_BE_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 1, 0, 0, 0, 0, 1);
/// Balancer on the NAT backend's link (IPv4): its default gateway.
pub const LB_NAT_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 3, 1);
/// Balancer on the NAT backend's link (IPv6).
pub const LB_NAT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 3, 0, 0, 0, 0, 1);
/// The NAT backend (IPv4).
pub const NAT_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 3, 11);
/// The NAT backend (IPv6).
pub const NAT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 3, 0, 0, 0, 0, 0x11);
/// VIP ranges the client routes via the balancer.
pub const VIP_NET_V4: &str = "10.200.100.0/24";
/// VIP range (IPv6).
pub const VIP_NET_V6: &str = "fd00:200:100::/64";

/// L2 backend `i` (1-based) on the client segment (IPv4): 10.200.0.(20+i).
pub fn l2_v4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 200, 0, 20 + i as u8)
}

/// L2 backend `i` on the client segment (IPv6): fd00:200::(20+i), digits
/// read like the IPv4 octet.
pub fn l2_v6(i: usize) -> Ipv6Addr {
    let group = u16::from_str_radix(&(20 + i).to_string(), 16).expect("decimal digits are hex");
    Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, group)
}

/// L3 backend `i` (IPv4): 10.200.1.(10+i), as in the standard topology.
pub fn l3_v4(i: usize) -> Ipv4Addr {
    backend_v4(i)
}

/// L3 backend `i` (IPv6): fd00:200:1::(10+i).
pub fn l3_v6(i: usize) -> Ipv6Addr {
    backend_v6(i)
}

/// What to build.
#[derive(Clone, Copy, Debug)]
pub struct DsrLabSpec {
    /// L2 DSR backends on the client segment (0..=9).
    pub l2_backends: usize,
    /// L3 DSR backends behind the router (0..=9).
    pub l3_backends: usize,
    /// A full-NAT backend behind the balancer.
    pub nat_backend: bool,
}

/// A built DSR lab. Dropping it deletes every namespace.
#[derive(Debug)]
pub struct DsrLab {
    /// The traffic source.
    pub client: Netns,
    /// Holds the client segment's bridge.
    pub switch: Netns,
    /// The balancer host: forwarding on, rp_filter off.
    pub lb: Netns,
    /// Between the balancer and the L3 backends, and back to the client.
    pub router: Netns,
    /// L2 DSR backends (backend i is `l2[i-1]`), interface `eth0`.
    pub l2: Vec<Netns>,
    /// L3 DSR backends, interface `eth0`.
    pub l3: Vec<Netns>,
    /// The NAT backend, if built.
    pub nat: Option<Netns>,
}

impl DsrLab {
    /// Builds the lab and checks that every path works (client to the
    /// balancer, balancer to the L3 backends through the router, L3
    /// backends back to the client without the balancer, balancer to the
    /// NAT backend).
    pub fn build(tag: &str, spec: DsrLabSpec) -> Result<DsrLab> {
        if spec.l2_backends > 9 || spec.l3_backends > 9 {
            bail!("at most 9 backends of each kind");
        }
        crate::ensure_bpffs()?;
        let tag = crate::lab_tag(tag);
        let lab = DsrLab {
            client: Netns::new(&format!("{tag}c"))?,
            switch: Netns::new(&format!("{tag}s"))?,
            lb: Netns::new(&format!("{tag}l"))?,
            router: Netns::new(&format!("{tag}r"))?,
            l2: (0..spec.l2_backends)
                .map(|_| Netns::new(&format!("{tag}d")))
                .collect::<Result<_>>()?,
            l3: (0..spec.l3_backends)
                .map(|_| Netns::new(&format!("{tag}t")))
                .collect::<Result<_>>()?,
            nat: if spec.nat_backend {
                Some(Netns::new(&format!("{tag}n"))?)
            } else {
                None
            },
        };
        lab.wire().context("building the DSR lab")?;
        lab.verify(Duration::from_secs(10))
            .context("DSR lab is not reachable")?;
        Ok(lab)
    }

    fn all(&self) -> Vec<&Netns> {
        let mut v = vec![&self.client, &self.switch, &self.lb, &self.router];
        v.extend(self.l2.iter());
        v.extend(self.l3.iter());
        v.extend(self.nat.iter());
        v
    }

    /// Names of every namespace of the lab.
    pub fn netns_names(&self) -> Vec<String> {
        self.all().iter().map(|n| n.name().to_string()).collect()
    }

    fn wire(&self) -> Result<()> {
        for ns in self.all() {
            ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
            ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
            ns.sysctl("net.ipv4.conf.all.rp_filter", "0")?;
            ns.sysctl("net.ipv4.conf.default.rp_filter", "0")?;
        }
        for ns in [&self.lb, &self.router] {
            for (k, v) in [
                ("net.ipv4.ip_forward", "1"),
                ("net.ipv6.conf.all.forwarding", "1"),
                ("net.ipv6.conf.default.forwarding", "1"),
                ("net.ipv4.conf.all.send_redirects", "0"),
                ("net.ipv4.conf.default.send_redirects", "0"),
            ] {
                ns.sysctl(k, v)?;
            }
        }
        let mut veths: Vec<(&Netns, String)> = Vec::new();
        let sw = &self.switch;
        link::bridge(sw, "br0")?;
        // A host on the client segment: veth `eth0` (or `ifname`) in `ns`,
        // its peer `port` a port of the switch's bridge.
        fn attach<'a>(
            veths: &mut Vec<(&'a Netns, String)>,
            sw: &'a Netns,
            ns: &'a Netns,
            ifname: &str,
            port: &str,
            addrs: &[String],
        ) -> Result<()> {
            link::veth(ns, ifname, sw, port)?;
            link::enslave(sw, port, "br0")?;
            link::up(sw, port)?;
            for a in addrs {
                link::addr(ns, ifname, a)?;
            }
            link::up(ns, ifname)?;
            veths.push((ns, ifname.to_string()));
            veths.push((sw, port.to_string()));
            Ok(())
        }
        attach(
            &mut veths,
            sw,
            &self.client,
            "eth0",
            CLIENT_PORT,
            &[format!("{CLIENT_V4}/24"), format!("{CLIENT_V6}/64")],
        )?;
        attach(
            &mut veths,
            sw,
            &self.lb,
            LB_IF,
            "plb",
            &[format!("{LB_V4}/24"), format!("{LB_V6}/64")],
        )?;
        attach(
            &mut veths,
            sw,
            &self.router,
            "eth0",
            "prt",
            &[format!("{ROUTER_V4}/24"), format!("{ROUTER_V6}/64")],
        )?;
        for (idx, b) in self.l2.iter().enumerate() {
            let i = idx + 1;
            attach(
                &mut veths,
                sw,
                b,
                "eth0",
                &format!("pl{i}"),
                &[format!("{}/24", l2_v4(i)), format!("{}/64", l2_v6(i))],
            )?;
        }

        // balancer <-> router: the tunnel path
        link::veth(&self.lb, "eth1", &self.router, "eth1")?;
        link::addr(&self.lb, "eth1", &format!("{TUNNEL_SRC_V4}/24"))?;
        link::addr(&self.lb, "eth1", &format!("{TUNNEL_SRC_V6}/64"))?;
        link::addr(&self.router, "eth1", &format!("{ROUTER_TUN_V4}/24"))?;
        link::addr(&self.router, "eth1", &format!("{ROUTER_TUN_V6}/64"))?;
        link::up(&self.lb, "eth1")?;
        link::up(&self.router, "eth1")?;
        veths.push((&self.lb, "eth1".into()));
        veths.push((&self.router, "eth1".into()));
        link::route(&self.lb, "10.200.1.0/24", &ROUTER_TUN_V4.to_string())?;
        link::route(&self.lb, "fd00:200:1::/64", &ROUTER_TUN_V6.to_string())?;

        // router <-> L3 backends
        link::bridge(&self.router, "br1")?;
        link::addr(&self.router, "br1", &format!("{ROUTER_BE_V4}/24"))?;
        link::addr(&self.router, "br1", &format!("{ROUTER_BE_V6}/64"))?;
        for (idx, b) in self.l3.iter().enumerate() {
            let i = idx + 1;
            let port = format!("r{i}");
            link::veth(&self.router, &port, b, "eth0")?;
            link::enslave(&self.router, &port, "br1")?;
            link::up(&self.router, &port)?;
            link::addr(b, "eth0", &format!("{}/24", l3_v4(i)))?;
            link::addr(b, "eth0", &format!("{}/64", l3_v6(i)))?;
            link::up(b, "eth0")?;
            link::route(b, "default", &ROUTER_BE_V4.to_string())?;
            link::route(b, "default", &ROUTER_BE_V6.to_string())?;
            veths.push((&self.router, port));
            veths.push((b, "eth0".into()));
        }

        // balancer <-> NAT backend
        if let Some(n) = &self.nat {
            link::veth(&self.lb, "eth2", n, "eth0")?;
            link::addr(&self.lb, "eth2", &format!("{LB_NAT_V4}/24"))?;
            link::addr(&self.lb, "eth2", &format!("{LB_NAT_V6}/64"))?;
            link::addr(n, "eth0", &format!("{NAT_V4}/24"))?;
            link::addr(n, "eth0", &format!("{NAT_V6}/64"))?;
            link::up(&self.lb, "eth2")?;
            link::up(n, "eth0")?;
            link::route(n, "default", &LB_NAT_V4.to_string())?;
            link::route(n, "default", &LB_NAT_V6.to_string())?;
            veths.push((&self.lb, "eth2".into()));
            veths.push((n, "eth0".into()));
        }

        for (ns, ifname) in &veths {
            link::disable_offloads(ns, ifname)?;
        }
        link::route(&self.client, VIP_NET_V4, &LB_V4.to_string())?;
        link::route(&self.client, VIP_NET_V6, &LB_V6.to_string())?;
        // The L3 backends' own addresses via the router (not used by DSR
        // traffic, which the client sends to the VIPs).
        link::route(&self.client, "10.200.1.0/24", &ROUTER_V4.to_string())?;
        link::route(&self.client, "fd00:200:1::/64", &ROUTER_V6.to_string())?;
        Ok(())
    }

    /// Gives every DSR backend (L2 and L3) the VIP `vip` on `lo`. L2
    /// backends also get arp_ignore=1 / arp_announce=2, so they never answer
    /// ARP for it (IPv6: Linux does not answer neighbour solicitations for
    /// an address on `lo` arriving on another interface).
    pub fn own_vip_on_backends(&self, vip: IpAddr) -> Result<()> {
        let cidr = match vip {
            IpAddr::V4(a) => format!("{a}/32"),
            IpAddr::V6(a) => format!("{a}/128"),
        };
        for b in self.l2.iter().chain(self.l3.iter()) {
            link::addr(b, "lo", &cidr)?;
        }
        for b in &self.l2 {
            b.sysctl("net.ipv4.conf.all.arp_ignore", "1")?;
            b.sysctl("net.ipv4.conf.all.arp_announce", "2")?;
        }
        Ok(())
    }

    /// MAC address of L2 backend `i` (1-based).
    pub fn l2_mac(&self, i: usize) -> Result<String> {
        link::mac(&self.l2[i - 1], "eth0")
    }

    /// Sets the MTU of the balancer's tunnel link (both ends).
    pub fn set_tunnel_mtu(&self, mtu: u32) -> Result<()> {
        let m = mtu.to_string();
        self.lb.run(&["ip", "link", "set", "eth1", "mtu", &m])?;
        self.router.run(&["ip", "link", "set", "eth1", "mtu", &m])?;
        Ok(())
    }

    fn verify(&self, timeout: Duration) -> Result<()> {
        for ns in self.all() {
            link::wait_ipv6_settled(ns, timeout)?;
        }
        let mut checks: Vec<(&Netns, IpAddr)> =
            vec![(&self.client, LB_V4.into()), (&self.client, LB_V6.into())];
        for i in 1..=self.l3.len() {
            checks.push((&self.lb, l3_v4(i).into()));
            checks.push((&self.lb, l3_v6(i).into()));
            checks.push((&self.l3[i - 1], CLIENT_V4.into()));
            checks.push((&self.l3[i - 1], CLIENT_V6.into()));
        }
        for i in 1..=self.l2.len() {
            checks.push((&self.l2[i - 1], CLIENT_V4.into()));
            checks.push((&self.l2[i - 1], CLIENT_V6.into()));
        }
        if self.nat.is_some() {
            checks.push((&self.lb, NAT_V4.into()));
            checks.push((&self.lb, NAT_V6.into()));
        }
        for (ns, ip) in checks {
            reach(ns, SocketAddr::new(ip, 9), timeout)
                .with_context(|| format!("{} cannot reach {ip}", ns.name()))?;
        }
        Ok(())
    }
}

/// A TCP handshake (or its refusal, which proves the path both ways) from
/// `ns` to `target`, retried until `timeout` to ride out neighbour
/// resolution.
fn reach(ns: &Netns, target: SocketAddr, timeout: Duration) -> Result<()> {
    ns.within(|| {
        let deadline = Instant::now() + timeout;
        loop {
            match TcpStream::connect_timeout(&target, Duration::from_millis(500)) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Ok(()),
                Err(e) if Instant::now() >= deadline => return Err(anyhow::Error::from(e)),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    })?
}

/// Named nftables packet counters in a namespace (tables `inet rvlab` and
/// `netdev rvlab`), each behind a rule on one hook.
///
/// Why: an end-to-end DSR test has to show which way packets went (the
/// client's packets to a VIP, replies from it, anything from a VIP crossing
/// the balancer's stack), independently of the balancer's own counters.
/// The IP hooks of a sender see TCP's segmentation-offload super-packets;
/// an ingress hook on the receiving device counts packets as they were on
/// the wire.
pub struct Counters<'a> {
    ns: &'a Netns,
}

/// A hook a counter rule sits on.
#[derive(Clone, Debug)]
pub enum Hook {
    /// Locally generated packets leaving (inet output).
    Output,
    /// Packets delivered locally (inet input).
    Input,
    /// Every packet entering the IP stack, also forwarded ones (inet
    /// prerouting).
    Prerouting,
    /// Every frame a device receives (netdev ingress), before any IP
    /// processing: the wire's view.
    Ingress(String),
}

impl<'a> Counters<'a> {
    /// Creates the tables and the inet base chains in `ns`.
    pub fn new(ns: &'a Netns) -> Result<Counters<'a>> {
        ns.run(&["nft", "add", "table", "inet", "rvlab"])?;
        ns.run(&["nft", "add", "table", "netdev", "rvlab"])?;
        for (chain, hook) in [("out", "output"), ("in", "input"), ("pre", "prerouting")] {
            let def = format!("{{ type filter hook {hook} priority -300 ; }}");
            ns.run(&["nft", "add", "chain", "inet", "rvlab", chain, &def])?;
        }
        Ok(Counters { ns })
    }

    /// Adds counter `name` (unique in the namespace) counting packets that
    /// match `expr` (nft syntax, e.g. `ip daddr 10.200.100.1 tcp dport 80`)
    /// on `hook`.
    pub fn add(&self, name: &str, hook: Hook, expr: &str) -> Result<()> {
        let (family, chain) = match &hook {
            Hook::Output => ("inet", "out".to_string()),
            Hook::Input => ("inet", "in".to_string()),
            Hook::Prerouting => ("inet", "pre".to_string()),
            Hook::Ingress(dev) => {
                let chain = format!("in-{dev}");
                let def = format!("{{ type filter hook ingress device {dev} priority -300 ; }}");
                self.ns
                    .run(&["nft", "add", "chain", "netdev", "rvlab", &chain, &def])?;
                ("netdev", chain)
            }
        };
        self.ns
            .run(&["nft", "add", "counter", family, "rvlab", name])?;
        let mut argv = vec!["nft", "add", "rule", family, "rvlab", &chain];
        argv.extend(expr.split_whitespace());
        argv.extend(["counter", "name", name]);
        self.ns.run(&argv)?;
        Ok(())
    }

    /// Packets counted by `name` so far.
    pub fn packets(&self, name: &str) -> Result<u64> {
        for family in ["inet", "netdev"] {
            let Ok(out) = self
                .ns
                .run(&["nft", "-j", "list", "counter", family, "rvlab", name])
            else {
                continue;
            };
            let v: serde_json::Value = serde_json::from_str(&out).context("nft -j output")?;
            if let Some(n) = v["nftables"]
                .as_array()
                .and_then(|a| a.iter().find_map(|e| e["counter"]["packets"].as_u64()))
            {
                return Ok(n);
            }
        }
        bail!("no counter {name} in netns {}", self.ns.name())
    }
}

/// What [`tcp_upload`] saw.
#[derive(Clone, Debug)]
pub struct UploadReport {
    /// The identity of the backend that answered.
    pub backend: String,
    /// Bytes sent (and echoed back intact).
    pub bytes: usize,
}

/// Sends `bytes` bytes to an identity server behind `target` from `ns` and
/// checks that every byte comes back in order (the server echoes), while
/// both directions run at once.
///
/// Why: a bulk upload makes full-size segments, which is what a path-MTU
/// problem on the request path breaks; the echo proves the data arrived
/// intact. `timeout` bounds each read and write.
pub fn tcp_upload(
    ns: &Netns,
    target: SocketAddr,
    bytes: usize,
    timeout: Duration,
) -> Result<UploadReport> {
    use std::io::{BufRead, BufReader, Read, Write};
    ns.within(|| -> Result<UploadReport> {
        let s = TcpStream::connect_timeout(&target, timeout)
            .with_context(|| format!("connect {target}"))?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        anyhow::ensure!(s.peer_addr()? == target, "peer is not {target}");
        let mut reader = BufReader::new(s.try_clone()?);
        let mut line = String::new();
        reader.read_line(&mut line).context("identity line")?;
        let backend = line
            .split_whitespace()
            .next()
            .context("empty identity line")?
            .to_string();
        let pattern = |i: usize| (i % 251) as u8;
        let mut w = s.try_clone()?;
        let writer = std::thread::spawn(move || -> std::io::Result<()> {
            let chunk: Vec<u8> = (0..bytes).map(pattern).collect();
            w.write_all(&chunk)?;
            w.flush()
        });
        let mut got = 0usize;
        let mut buf = vec![0u8; 65536];
        while got < bytes {
            let n = reader.read(&mut buf).context("reading the echo")?;
            anyhow::ensure!(n > 0, "connection closed after {got} of {bytes} bytes");
            for (k, b) in buf[..n].iter().enumerate() {
                anyhow::ensure!(*b == pattern(got + k), "echoed byte {} differs", got + k);
            }
            got += n;
        }
        writer
            .join()
            .map_err(|_| anyhow::anyhow!("writer panicked"))?
            .context("writing")?;
        Ok(UploadReport { backend, bytes })
    })?
}
