//! More clients in front of the balancer: the standard topology's client
//! namespace also becomes the switch of the client-side segment.
//!
//! ```text
//!  extra client i ns                client ns                          lb ns
//!  eth0 10.200.0.(2+i) ---- f{i} -+- bridge front 10.200.0.2
//!                                 +- eth0 ------------------------- eth0 10.200.0.1 (XDP)
//! ```
//!
//! Why: the balancer's XDP program is on one interface (lb `eth0`), whose
//! veth peer is the client's `eth0`. Tests that need several client hosts
//! (a flood from one, real clients on others) put them on a bridge there;
//! bridged frames never touch the client's own IP stack, so each client
//! keeps a host of its own.
//!
//! The segment is IPv4 only and quiet, so that every frame entering lb
//! `eth0` is one a test sent to a VIP: IPv6 is off on every client, ARP
//! entries are static on both sides, and the clients route only the IPv4
//! VIP range (the client's route to the backend subnet is removed).

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::link;
use crate::netns::Netns;
use crate::topology::{CLIENT_V4, HOST_IF, LB_IF, LB_V4, Topology, VIP_NET_V4};

/// The bridge in the client namespace that is the client-side segment.
pub const FRONT_BRIDGE: &str = "front";

/// Most extra clients (addresses 10.200.0.3 ..).
pub const MAX_FRONT_CLIENTS: usize = 50;

/// IPv4 address of extra client `i` (1-based): 10.200.0.(2+i).
pub fn front_client_v4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 200, 0, 2 + i as u8)
}

/// Extra client namespaces on the client-side segment. Dropping it deletes
/// them (and their veths); the client namespace keeps its bridge until the
/// topology goes.
#[derive(Debug)]
pub struct FrontClients {
    /// The extra clients, in order; client i is `clients[i-1]`, with
    /// `eth0` at [`front_client_v4`]`(i)`.
    pub clients: Vec<Netns>,
    /// MAC of each extra client's `eth0`, same order.
    pub macs: Vec<String>,
    /// MAC of lb `eth0`: the destination of frames a generator crafts.
    pub lb_mac: String,
}

impl FrontClients {
    /// Turns `topo`'s client `eth0` into a port of [`FRONT_BRIDGE`] (which
    /// takes the client's IPv4 address) and adds `n` clients on it, each
    /// with a route for the VIP range via the lb; then checks that every
    /// client reaches the lb.
    ///
    /// Why the client loses its IPv6 and backend routes: see the module
    /// documentation (a quiet segment).
    pub fn attach(topo: &Topology, tag: &str, n: usize) -> Result<FrontClients> {
        if n == 0 || n > MAX_FRONT_CLIENTS {
            bail!("extra client count must be 1..={MAX_FRONT_CLIENTS}, got {n}");
        }
        let client = &topo.client;
        for key in ["all", "default"] {
            client.sysctl(&format!("net.ipv6.conf.{key}.disable_ipv6"), "1")?;
        }
        client.run(&["ip", "addr", "flush", "dev", HOST_IF])?;
        link::bridge(client, FRONT_BRIDGE)?;
        link::enslave(client, HOST_IF, FRONT_BRIDGE)?;
        link::addr(client, FRONT_BRIDGE, &format!("{CLIENT_V4}/24"))?;
        link::up(client, FRONT_BRIDGE)?;
        link::route(client, VIP_NET_V4, &LB_V4.to_string())?;

        let mut clients = Vec::with_capacity(n);
        for i in 1..=n {
            let ns = Netns::new(&format!("{tag}k"))?;
            for key in ["all", "default"] {
                ns.sysctl(&format!("net.ipv6.conf.{key}.disable_ipv6"), "1")?;
            }
            let port = format!("f{i}");
            link::veth(client, &port, &ns, HOST_IF)?;
            link::enslave(client, &port, FRONT_BRIDGE)?;
            link::up(client, &port)?;
            link::addr(&ns, HOST_IF, &format!("{}/24", front_client_v4(i)))?;
            link::up(&ns, HOST_IF)?;
            link::disable_offloads(client, &port)?;
            link::disable_offloads(&ns, HOST_IF)?;
            link::route(&ns, VIP_NET_V4, &LB_V4.to_string())?;
            clients.push(ns);
        }

        // Static ARP both ways, read once every port is on the bridge (a
        // bridge takes the lowest MAC of its ports).
        let lb_mac = link::mac(&topo.lb, LB_IF)?;
        let lb_v4 = LB_V4.to_string();
        link::neigh_permanent(client, FRONT_BRIDGE, &lb_v4, &lb_mac)?;
        let front_mac = link::mac(client, FRONT_BRIDGE)?;
        link::neigh_permanent(&topo.lb, LB_IF, &CLIENT_V4.to_string(), &front_mac)?;
        let mut macs = Vec::with_capacity(n);
        for (idx, ns) in clients.iter().enumerate() {
            let mac = link::mac(ns, HOST_IF)?;
            link::neigh_permanent(ns, HOST_IF, &lb_v4, &lb_mac)?;
            let addr = front_client_v4(idx + 1).to_string();
            link::neigh_permanent(&topo.lb, LB_IF, &addr, &mac)?;
            macs.push(mac);
        }
        let me = FrontClients {
            clients,
            macs,
            lb_mac,
        };
        me.verify(topo, Duration::from_secs(10))
            .context("the extra clients cannot reach the lb")?;
        Ok(me)
    }

    /// A TCP connection attempt from every client (the topology's one and
    /// the extra ones) to the lb's own address: a refusal proves the path
    /// both ways.
    fn verify(&self, topo: &Topology, timeout: Duration) -> Result<()> {
        let target = SocketAddr::new(LB_V4.into(), 9);
        for ns in std::iter::once(&topo.client).chain(self.clients.iter()) {
            let last = ns.within(|| {
                let deadline = Instant::now() + timeout;
                loop {
                    let last = match TcpStream::connect_timeout(&target, Duration::from_millis(500))
                    {
                        Ok(_) => return None,
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return None,
                        Err(e) => e.to_string(),
                    };
                    if Instant::now() >= deadline {
                        return Some(last);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })?;
            if let Some(e) = last {
                bail!("{} cannot reach {target}: {e}", ns.name());
            }
        }
        Ok(())
    }
}
