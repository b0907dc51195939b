//! The standard lab topology: client -- lb -- bridge -- backends.
//!
//! ```text
//!  client ns            lb ns                          backend ns (i = 1..=N)
//!  eth0 10.200.0.2 ---- eth0 10.200.0.1
//!       fd00:200::2          fd00:200::1
//!                       br0  10.200.1.1 --- b{i} ---- eth0 10.200.1.(10+i)
//!                            fd00:200:1::1            fd00:200:1::(10+i)
//! ```
//!
//! VIPs live in 10.200.100.0/24 and fd00:200:100::/64, which the client
//! routes via the lb, so the balancer's XDP program on lb `eth0` sees them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::link;
use crate::netns::Netns;

/// Interface on the lb host that faces the client and carries VIP traffic;
/// the one the balancer attaches its XDP program to.
pub const LB_IF: &str = "eth0";
/// Bridge on the lb host that the backends hang off.
pub const LB_BRIDGE: &str = "br0";
/// Client-side interface name (also the backends' interface name).
pub const HOST_IF: &str = "eth0";
/// IPv4 VIP range routed from the client to the lb.
pub const VIP_NET_V4: &str = "10.200.100.0/24";
/// IPv6 VIP range routed from the client to the lb.
pub const VIP_NET_V6: &str = "fd00:200:100::/64";
/// The first IPv4 VIP, used by the demo.
pub const VIP_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 100, 1);
/// The first IPv6 VIP, used by the demo.
pub const VIP_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0x100, 0, 0, 0, 0, 1);
/// Client address on the client--lb link (IPv4).
pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
/// Client address on the client--lb link (IPv6).
pub const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 2);
/// lb address on the client--lb link (IPv4); the client's gateway.
pub const LB_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);
/// lb address on the client--lb link (IPv6); the client's gateway.
pub const LB_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 1);
/// lb bridge address (IPv4); the backends' default gateway.
pub const LB_BRIDGE_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 1, 1);
/// lb bridge address (IPv6); the backends' default gateway.
pub const LB_BRIDGE_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 1, 0, 0, 0, 0, 1);
/// Backend IPv4 subnet behind the lb bridge.
pub const BACKEND_NET_V4: &str = "10.200.1.0/24";
/// Backend IPv6 subnet behind the lb bridge.
pub const BACKEND_NET_V6: &str = "fd00:200:1::/64";
/// Default number of backends.
pub const DEFAULT_BACKENDS: usize = 3;
/// Upper bound on backends so addresses stay inside 10.200.1.11-.254.
pub const MAX_BACKENDS: usize = 200;

/// IPv4 address of backend `i` (1-based): 10.200.1.(10+i).
pub fn backend_v4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 200, 1, 10 + i as u8)
}

/// IPv6 address of backend `i` (1-based): `fd00:200:1::{10+i}`, where the
/// last group is written with the same digits as the IPv4 octet (backend 1
/// is `fd00:200:1::11`, i.e. 0x11), so v4 and v6 addresses read alike.
pub fn backend_v6(i: usize) -> Ipv6Addr {
    let group = u16::from_str_radix(&(10 + i).to_string(), 16).expect("decimal digits are hex");
    Ipv6Addr::new(0xfd00, 0x200, 1, 0, 0, 0, 0, group)
}

/// A built client/lb/backends lab, dual-stack, verified reachable.
///
/// Why one fixed shape: every end-to-end test and the README demo talk about
/// the same addresses, so configs and assertions can be shared and a failing
/// test can be reproduced by hand. Dropping it deletes all namespaces (and
/// with them every veth and bridge).
#[derive(Debug)]
pub struct Topology {
    /// The traffic source; routes the VIP ranges and backend subnets via lb.
    pub client: Netns,
    /// The load-balancer host: forwarding on, rp_filter off, `eth0` towards
    /// the client, `br0` towards the backends.
    pub lb: Netns,
    /// Backend hosts `b1..bN`, in order; backend i is `backends[i-1]`.
    pub backends: Vec<Netns>,
    /// Backend IPv4 addresses, same order as `backends`.
    pub backend_v4: Vec<Ipv4Addr>,
    /// Backend IPv6 addresses, same order as `backends`.
    pub backend_v6: Vec<Ipv6Addr>,
    /// Client IPv4 address.
    pub client_v4: Ipv4Addr,
    /// Client IPv6 address.
    pub client_v6: Ipv6Addr,
    /// Name of the lb interface facing the client (XDP attach point).
    pub lb_if: String,
}

impl Topology {
    /// Builds the standard topology with [`DEFAULT_BACKENDS`] backends.
    ///
    /// Why it blocks until traffic flows: a test should fail here, with a
    /// setup error, rather than later as a mysterious load-balancing failure.
    pub fn build(tag: &str) -> Result<Topology> {
        Self::build_with(tag, DEFAULT_BACKENDS)
    }

    /// Builds the standard topology with `backends` backends (1..=200).
    ///
    /// Why a parameter: tests of weights, Maglev disruption or backend
    /// removal want more (or fewer) than three backends.
    pub fn build_with(tag: &str, backends: usize) -> Result<Topology> {
        if backends == 0 || backends > MAX_BACKENDS {
            bail!("backend count must be 1..={MAX_BACKENDS}, got {backends}");
        }
        crate::ensure_bpffs()?;
        let tag = crate::lab_tag(tag);
        // Each Netns cleans itself up if a later step fails.
        let client = Netns::new(&format!("{tag}c"))?;
        let lb = Netns::new(&format!("{tag}l"))?;
        let mut backend_ns = Vec::with_capacity(backends);
        for _ in 0..backends {
            backend_ns.push(Netns::new(&format!("{tag}b"))?);
        }
        let topo = Topology {
            client,
            lb,
            backends: backend_ns,
            backend_v4: (1..=backends).map(backend_v4).collect(),
            backend_v6: (1..=backends).map(backend_v6).collect(),
            client_v4: CLIENT_V4,
            client_v6: CLIENT_V6,
            lb_if: LB_IF.to_string(),
        };
        topo.wire().context("building lab topology")?;
        topo.verify_reachability(Duration::from_secs(10))
            .context("lab topology is not reachable")?;
        Ok(topo)
    }

    /// Names of all namespaces in the topology (client, lb, backends).
    ///
    /// Why: tests assert they are gone after drop; humans use them with
    /// `nsenter --net=/run/netns/NAME`.
    pub fn netns_names(&self) -> Vec<String> {
        let mut v = vec![self.client.name().to_string(), self.lb.name().to_string()];
        v.extend(self.backends.iter().map(|b| b.name().to_string()));
        v
    }

    /// Every veth end in the lab as (namespace, interface): client `eth0`,
    /// lb `eth0`, lb `b{i}` and backend `eth0`.
    ///
    /// Why: tests that tweak per-interface settings (offloads, XDP attach,
    /// counters) on all links need the full list without re-deriving it.
    pub fn veth_ends(&self) -> Vec<(&Netns, String)> {
        let mut v = vec![
            (&self.client, HOST_IF.to_string()),
            (&self.lb, LB_IF.to_string()),
        ];
        for (idx, b) in self.backends.iter().enumerate() {
            v.push((&self.lb, Self::backend_name(idx + 1)));
            v.push((b, HOST_IF.to_string()));
        }
        v
    }

    /// Turns GRO on or off on every veth end (see [`link::set_gro`]).
    ///
    /// Why: the topology is built with GRO off (and GRO off on a veth end
    /// means no NAPI there). Frames that an XDP program sends with XDP_TX,
    /// or XDP_REDIRECTs into a veth, are delivered to the *peer* end only if
    /// that peer has NAPI (GRO on or its own XDP program); otherwise the
    /// kernel drops them silently (TX "dropped" on the XDP device). Checked
    /// on this lab's 6.18 kernel: XDP_TX on lb `eth0` reached the client
    /// only after `gro on` on client `eth0`. Dataplane tests using XDP_TX or
    /// XDP_REDIRECT call `set_gro_all(true)` (GRO still verifies checksums).
    pub fn set_gro_all(&self, on: bool) -> Result<()> {
        for (ns, ifname) in self.veth_ends() {
            link::set_gro(ns, &ifname, on)?;
        }
        Ok(())
    }

    /// Identity name used for backend `i` (1-based): `b{i}`; also the name
    /// of its veth peer on the lb bridge.
    ///
    /// Why: the demo and tests label identity servers with it, so
    /// per-backend counts line up with the topology.
    pub fn backend_name(i: usize) -> String {
        format!("b{i}")
    }

    fn wire(&self) -> Result<()> {
        let all = std::iter::once(&self.client)
            .chain(std::iter::once(&self.lb))
            .chain(self.backends.iter());
        for ns in all {
            // No DAD anywhere (also for link-local addresses): nothing can
            // collide in a lab we built ourselves, and it removes waits.
            ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
            ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
        }
        let lb = &self.lb;
        link::router(lb)?;

        // client <-> lb
        link::veth(&self.client, HOST_IF, lb, LB_IF)?;
        link::addr(&self.client, HOST_IF, &format!("{CLIENT_V4}/24"))?;
        link::addr(&self.client, HOST_IF, &format!("{CLIENT_V6}/64"))?;
        link::addr(lb, LB_IF, &format!("{LB_V4}/24"))?;
        link::addr(lb, LB_IF, &format!("{LB_V6}/64"))?;
        link::up(&self.client, HOST_IF)?;
        link::up(lb, LB_IF)?;
        lb.sysctl(&format!("net.ipv4.conf.{LB_IF}.rp_filter"), "0")?;

        // lb bridge
        link::bridge(lb, LB_BRIDGE)?;
        link::addr(lb, LB_BRIDGE, &format!("{LB_BRIDGE_V4}/24"))?;
        link::addr(lb, LB_BRIDGE, &format!("{LB_BRIDGE_V6}/64"))?;
        lb.sysctl(&format!("net.ipv4.conf.{LB_BRIDGE}.rp_filter"), "0")?;

        // backends
        for (idx, b) in self.backends.iter().enumerate() {
            let i = idx + 1;
            let port = Self::backend_name(i);
            link::veth(lb, &port, b, HOST_IF)?;
            link::enslave(lb, &port, LB_BRIDGE)?;
            link::up(lb, &port)?;
            link::addr(b, HOST_IF, &format!("{}/24", backend_v4(i)))?;
            link::addr(b, HOST_IF, &format!("{}/64", backend_v6(i)))?;
            link::up(b, HOST_IF)?;
            link::route(b, "default", &LB_BRIDGE_V4.to_string())?;
            link::route(b, "default", &LB_BRIDGE_V6.to_string())?;
        }

        // Offloads off on every veth end (see link::disable_offloads).
        for (ns, ifname) in self.veth_ends() {
            link::disable_offloads(ns, &ifname)?;
        }

        // client routes: VIPs and backend subnets via the lb
        let c = &self.client;
        link::route(c, VIP_NET_V4, &LB_V4.to_string())?;
        link::route(c, VIP_NET_V6, &LB_V6.to_string())?;
        link::route(c, BACKEND_NET_V4, &LB_V4.to_string())?;
        link::route(c, BACKEND_NET_V6, &LB_V6.to_string())?;
        Ok(())
    }

    /// Checks client -> every backend (v4 and v6) with real TCP handshakes.
    ///
    /// A connection to a port nobody listens on still proves the path both
    /// ways: the SYN reached the backend and its RST came back through the
    /// lb. Retries until `timeout` to ride out neighbour resolution.
    fn verify_reachability(&self, timeout: Duration) -> Result<()> {
        for ns in std::iter::once(&self.client)
            .chain(std::iter::once(&self.lb))
            .chain(self.backends.iter())
        {
            link::wait_ipv6_settled(ns, timeout)?;
        }
        let targets: Vec<SocketAddr> = self
            .backend_v4
            .iter()
            .map(|a| IpAddr::V4(*a))
            .chain(self.backend_v6.iter().map(|a| IpAddr::V6(*a)))
            .map(|ip| SocketAddr::new(ip, 9))
            .collect();
        let failures: Vec<String> = self.client.within(|| {
            let deadline = Instant::now() + timeout;
            let mut failures = Vec::new();
            for t in &targets {
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
        })?;
        if !failures.is_empty() {
            bail!(
                "client {} cannot reach backends: {}",
                self.client.name(),
                failures.join("; ")
            );
        }
        Ok(())
    }
}
