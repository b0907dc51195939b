//! A namespace whose FIB can answer `bpf_fib_lookup` for test frames run
//! with BPF_PROG_TEST_RUN, without any real peer: two next hops with
//! permanent neighbour entries.
//!
//! Why: the programs route some packets themselves (natForwarding fib, L3
//! DSR, source-translated flows and their replies) and only do so when the
//! FIB answers; packet tests and the bench need the same small routing
//! table, so it is built in one place.
//!
//! ```text
//! up1 (the frames' ingress) <-> up0: 10.200.9.1/24, fd00:200:9::1/64 (the node)
//!   backends 10.200.1.0/24, fd00:200:1::/64 via .2 (MAC 02:99:00:00:00:02)
//!   clients  10.200.0.0/24, fd00:200::/64   via .3 (MAC 02:99:00:00:00:03)
//! ```

use anyhow::{Context, Result};

use crate::netns::Netns;

/// The node's address on `up0` (IPv4): the source of translated flows.
pub const NODE4: &str = "10.200.9.1";
/// The node's address on `up0` (IPv6).
pub const NODE6: &str = "fd00:200:9::1";
/// The MAC of the backends' next hop.
pub const BACKEND_HOP_MAC: [u8; 6] = [0x02, 0x99, 0, 0, 0, 0x02];
/// The MAC of the clients' next hop.
pub const CLIENT_HOP_MAC: [u8; 6] = [0x02, 0x99, 0, 0, 0, 0x03];

/// The namespace (removed on drop) and the ifindex of `up1`, the interface
/// test frames claim to arrive on.
pub struct FibLab {
    /// The namespace; run the programs inside it (`Netns::within`).
    pub ns: Netns,
    /// Ifindex of `up1`.
    pub ingress_ifindex: u32,
}

impl FibLab {
    /// Builds it in a new namespace `name` (forwarding on: the FIB answers
    /// only for interfaces that forward).
    pub fn new(name: &str) -> Result<FibLab> {
        let ns = Netns::new(name)?;
        ns.sysctl("net.ipv4.ip_forward", "1")?;
        ns.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        for cmd in [
            "ip link add up0 type veth peer name up1",
            "ip link set up0 up",
            "ip link set up1 up",
            "ip addr add 10.200.9.1/24 dev up0",
            "ip addr add fd00:200:9::1/64 dev up0 nodad",
            "ip route add 10.200.1.0/24 via 10.200.9.2 dev up0",
            "ip -6 route add fd00:200:1::/64 via fd00:200:9::2 dev up0",
            "ip route add 10.200.0.0/24 via 10.200.9.3 dev up0",
            "ip -6 route add fd00:200::/64 via fd00:200:9::3 dev up0",
            "ip neigh add 10.200.9.2 lladdr 02:99:00:00:00:02 dev up0 nud permanent",
            "ip -6 neigh add fd00:200:9::2 lladdr 02:99:00:00:00:02 dev up0 nud permanent",
            "ip neigh add 10.200.9.3 lladdr 02:99:00:00:00:03 dev up0 nud permanent",
            "ip -6 neigh add fd00:200:9::3 lladdr 02:99:00:00:00:03 dev up0 nud permanent",
        ] {
            ns.run(&cmd.split(' ').collect::<Vec<_>>())
                .with_context(|| format!("fib lab: {cmd}"))?;
        }
        let out = ns.run(&["ip", "-o", "link", "show", "up1"])?;
        let ingress_ifindex = out
            .split(':')
            .next()
            .and_then(|i| i.trim().parse().ok())
            .context("ifindex of up1")?;
        Ok(FibLab {
            ns,
            ingress_ifindex,
        })
    }
}
