//! The Kubernetes lab: "nodes" on a shared segment with a client, each with
//! "pods" behind it, routed the way a simple routed CNI (Calico-style, no
//! overlay) does it. rivorad runs in a node's namespace and attaches to its
//! uplink; the API server is reached over a separate link (kube-testbed's
//! `TestBed::attach`), never over the uplink.
//!
//! ```text
//!                      switch ns: bridge br0 (the segment)
//!        +----------------------+------------------------+
//!   client eth0            node1 eth0               node2 eth0  ...
//!   10.220.0.2             10.220.0.11              10.220.0.12
//!   fd00:220::2            fd00:220::11             fd00:220::12
//!                          |  vp1 ... vpM           |
//!                     pod 1-1 eth0             pod 2-1 eth0
//!                     10.244.1.11/32           10.244.2.11/32
//!                     fd00:244:1::11/128       fd00:244:2::11/128
//! ```
//!
//! - A pod has one /32 and one /128 and a default route via the node
//!   (169.254.1.1 and fe80::1 on every pod-facing veth of the node, as
//!   Calico does), so replies leave through the pod's own node.
//! - A node routes each of its pods' addresses to the pod's veth and every
//!   other node's pod ranges (10.244.K.0/24, fd00:244:K::/64) via that
//!   node's uplink address. So a node that sends a client's packet to a
//!   pod on another node sees the reply come back only if it translated the
//!   source (ETP Cluster); the other node otherwise answers the client
//!   directly, with the pod's address.
//! - The clients route each node's pod range via that node (as a router
//!   peering with the CNI would) and reach VIPs through the node a test
//!   chooses ([`Cluster::route_vip_via`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::link;
use crate::netns::Netns;
use crate::topology::HOST_IF;

/// The client on the segment (IPv4).
pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(10, 220, 0, 2);
/// The client on the segment (IPv6).
pub const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x220, 0, 0, 0, 0, 0, 2);
/// A second client on the segment (IPv4): tests that need a client outside
/// some range (loadBalancerSourceRanges) use it.
pub const CLIENT2_V4: Ipv4Addr = Ipv4Addr::new(10, 220, 0, 3);
/// The second client (IPv6).
pub const CLIENT2_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x220, 0, 0, 0, 0, 0, 3);
/// The pods' gateway on every pod-facing veth of a node (IPv4).
pub const POD_GW_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);
/// The pods' gateway (IPv6 link-local).
pub const POD_GW_V6: &str = "fe80::1";

/// Node `n`'s (1-based) uplink address (IPv4).
pub fn node_v4(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 220, 0, 10 + n as u8)
}

/// Node `n`'s uplink address (IPv6).
pub fn node_v6(n: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x220, 0, 0, 0, 0, 0, 0x10 + n as u16)
}

/// Pod `m` (1-based) of node `n`: IPv4 address.
pub fn pod_v4(n: usize, m: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, n as u8, 10 + m as u8)
}

/// Pod `m` of node `n`: IPv6 address.
pub fn pod_v6(n: usize, m: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x244, n as u16, 0, 0, 0, 0, 0x10 + m as u16)
}

/// Node `n`'s pod range (IPv4), as a CNI would give it.
pub fn pod_cidr_v4(n: usize) -> String {
    format!("10.244.{n}.0/24")
}

/// Node `n`'s pod range (IPv6).
pub fn pod_cidr_v6(n: usize) -> String {
    format!("fd00:244:{n:x}::/64")
}

/// One pod: its namespace and addresses.
#[derive(Debug)]
pub struct Pod {
    /// The pod's namespace (`eth0` towards its node).
    pub ns: Netns,
    /// Its name in the lab (`pod-N-M`), which an IdentityServer in it
    /// should answer with.
    pub name: String,
    /// Its IPv4 address (/32).
    pub v4: Ipv4Addr,
    /// Its IPv6 address (/128).
    pub v6: Ipv6Addr,
}

/// One node: its namespace, uplink and pods.
#[derive(Debug)]
pub struct Node {
    /// The node's namespace: `eth0` on the segment, `vpM` to pod M.
    pub ns: Netns,
    /// The node's name (`node-N`), as its Kubernetes Node object is named.
    pub name: String,
    /// Uplink address (IPv4); the node's InternalIP.
    pub v4: Ipv4Addr,
    /// Uplink address (IPv6).
    pub v6: Ipv6Addr,
    /// Its pods.
    pub pods: Vec<Pod>,
}

/// The built lab. Dropping it deletes every namespace (pods, nodes,
/// clients, switch) and the processes started in them.
#[derive(Debug)]
pub struct Cluster {
    /// Holds the bridge that is the segment.
    pub switch: Netns,
    /// The client (pod ranges via their nodes; VIP routes per test).
    pub client: Netns,
    /// The second client.
    pub client2: Netns,
    /// The nodes, `node-1` first.
    pub nodes: Vec<Node>,
    /// The node interface on the segment (XDP, TCX).
    pub uplink: String,
}

impl Cluster {
    /// Builds the lab with `pods[i]` pods on node i+1 (1..=4 nodes, 0..=20
    /// pods each) and checks that the client reaches every node and every
    /// node reaches every pod.
    pub fn build(tag: &str, pods: &[usize]) -> Result<Cluster> {
        if pods.is_empty() || pods.len() > 4 || pods.iter().any(|p| *p > 20) {
            bail!("1..=4 nodes of 0..=20 pods each, got {pods:?}");
        }
        crate::ensure_bpffs()?;
        let tag = crate::lab_tag(tag);
        let mut nodes = Vec::new();
        for (i, count) in pods.iter().enumerate() {
            let n = i + 1;
            let mut ps = Vec::new();
            for m in 1..=*count {
                ps.push(Pod {
                    ns: Netns::new(&format!("{tag}p"))?,
                    name: format!("pod-{n}-{m}"),
                    v4: pod_v4(n, m),
                    v6: pod_v6(n, m),
                });
            }
            nodes.push(Node {
                ns: Netns::new(&format!("{tag}n"))?,
                name: format!("node-{n}"),
                v4: node_v4(n),
                v6: node_v6(n),
                pods: ps,
            });
        }
        let c = Cluster {
            switch: Netns::new(&format!("{tag}s"))?,
            client: Netns::new(&format!("{tag}c"))?,
            client2: Netns::new(&format!("{tag}d"))?,
            nodes,
            uplink: HOST_IF.to_string(),
        };
        c.wire().context("building the cluster lab")?;
        c.verify(Duration::from_secs(10))
            .context("the cluster lab is not reachable")?;
        Ok(c)
    }

    fn all(&self) -> impl Iterator<Item = &Netns> {
        [&self.switch, &self.client, &self.client2]
            .into_iter()
            .chain(self.nodes.iter().map(|n| &n.ns))
            .chain(self.nodes.iter().flat_map(|n| n.pods.iter().map(|p| &p.ns)))
    }

    /// Every namespace's name, for leak checks.
    pub fn netns_names(&self) -> Vec<String> {
        self.all().map(|ns| ns.name().to_string()).collect()
    }

    fn wire(&self) -> Result<()> {
        for ns in self.all() {
            ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
            ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
        }
        let mut ends: Vec<(&Netns, String)> = Vec::new();
        let sw = &self.switch;
        link::bridge(sw, "br0")?;
        let mut ports = vec![
            (
                "pc".to_string(),
                &self.client,
                IpAddr::V4(CLIENT_V4),
                IpAddr::V6(CLIENT_V6),
            ),
            (
                "pd".to_string(),
                &self.client2,
                IpAddr::V4(CLIENT2_V4),
                IpAddr::V6(CLIENT2_V6),
            ),
        ];
        for (i, node) in self.nodes.iter().enumerate() {
            ports.push((
                format!("pn{}", i + 1),
                &node.ns,
                node.v4.into(),
                node.v6.into(),
            ));
        }
        for (port, ns, v4, v6) in ports {
            link::veth(sw, &port, ns, HOST_IF)?;
            link::enslave(sw, &port, "br0")?;
            link::up(sw, &port)?;
            link::addr(ns, HOST_IF, &format!("{v4}/24"))?;
            link::addr(ns, HOST_IF, &format!("{v6}/64"))?;
            link::up(ns, HOST_IF)?;
            ends.push((sw, port));
            ends.push((ns, HOST_IF.to_string()));
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let ns = &node.ns;
            link::router(ns)?;
            ns.sysctl(&format!("net.ipv4.conf.{HOST_IF}.rp_filter"), "0")?;
            for (j, pod) in node.pods.iter().enumerate() {
                let vp = format!("vp{}", j + 1);
                link::veth(ns, &vp, &pod.ns, HOST_IF)?;
                // The pods' gateway: the same link-local pair on every
                // pod-facing veth (the node answers ARP/NDP for it there).
                link::addr(ns, &vp, &format!("{POD_GW_V4}/32"))?;
                ns.run(&[
                    "ip",
                    "-6",
                    "addr",
                    "add",
                    &format!("{POD_GW_V6}/64"),
                    "dev",
                    &vp,
                    "nodad",
                ])?;
                link::up(ns, &vp)?;
                ns.sysctl(&format!("net.ipv4.conf.{vp}.rp_filter"), "0")?;
                ns.run(&[
                    "ip",
                    "-4",
                    "route",
                    "replace",
                    &format!("{}/32", pod.v4),
                    "dev",
                    &vp,
                ])?;
                ns.run(&[
                    "ip",
                    "-6",
                    "route",
                    "replace",
                    &format!("{}/128", pod.v6),
                    "dev",
                    &vp,
                ])?;
                let p = &pod.ns;
                link::addr(p, HOST_IF, &format!("{}/32", pod.v4))?;
                p.run(&[
                    "ip",
                    "-6",
                    "addr",
                    "add",
                    &format!("{}/128", pod.v6),
                    "dev",
                    HOST_IF,
                    "nodad",
                ])?;
                link::up(p, HOST_IF)?;
                p.run(&[
                    "ip",
                    "-4",
                    "route",
                    "replace",
                    &POD_GW_V4.to_string(),
                    "dev",
                    HOST_IF,
                    "scope",
                    "link",
                ])?;
                p.run(&[
                    "ip",
                    "-4",
                    "route",
                    "replace",
                    "default",
                    "via",
                    &POD_GW_V4.to_string(),
                    "dev",
                    HOST_IF,
                ])?;
                p.run(&[
                    "ip", "-6", "route", "replace", "default", "via", POD_GW_V6, "dev", HOST_IF,
                ])?;
                ends.push((ns, vp));
                ends.push((p, HOST_IF.to_string()));
            }
            for (k, other) in self.nodes.iter().enumerate() {
                if k != i {
                    link::route(ns, &pod_cidr_v4(k + 1), &other.v4.to_string())?;
                    link::route(ns, &pod_cidr_v6(k + 1), &other.v6.to_string())?;
                }
            }
        }
        // The clients route each node's pod range via that node, as a
        // router that peers with a routed CNI would: pods are reachable
        // directly (the lab's self-check, direct-to-pod tests).
        for (k, node) in self.nodes.iter().enumerate() {
            for c in [&self.client, &self.client2] {
                link::route(c, &pod_cidr_v4(k + 1), &node.v4.to_string())?;
                link::route(c, &pod_cidr_v6(k + 1), &node.v6.to_string())?;
            }
        }
        // Real checksums on every hop (see link::disable_offloads).
        for (ns, ifname) in ends {
            link::disable_offloads(ns, &ifname)?;
        }
        Ok(())
    }

    /// Routes `vip` (an address) from both clients via node `n` (1-based),
    /// replacing an earlier route: which node receives a VIP's traffic.
    pub fn route_vip_via(&self, vip: IpAddr, n: usize) -> Result<()> {
        let node = self.node(n)?;
        let (dst, via) = match vip {
            IpAddr::V4(a) => (format!("{a}/32"), node.v4.to_string()),
            IpAddr::V6(a) => (format!("{a}/128"), node.v6.to_string()),
        };
        for c in [&self.client, &self.client2] {
            link::route(c, &dst, &via)?;
        }
        Ok(())
    }

    /// Node `n` (1-based).
    pub fn node(&self, n: usize) -> Result<&Node> {
        self.nodes
            .get(n.wrapping_sub(1))
            .with_context(|| format!("no node {n} (the lab has {})", self.nodes.len()))
    }

    /// client -> every node, every node -> every pod (its own and the
    /// others'), every pod -> the client: TCP handshakes, where a refused
    /// connection proves the path both ways.
    fn verify(&self, timeout: Duration) -> Result<()> {
        for ns in self.all() {
            link::wait_ipv6_settled(ns, timeout)?;
        }
        let port = |ip: IpAddr| SocketAddr::new(ip, 9);
        let to_nodes: Vec<SocketAddr> = self
            .nodes
            .iter()
            .flat_map(|n| [port(n.v4.into()), port(n.v6.into())])
            .collect();
        let to_pods: Vec<SocketAddr> = self
            .nodes
            .iter()
            .flat_map(|n| {
                n.pods
                    .iter()
                    .flat_map(|p| [port(p.v4.into()), port(p.v6.into())])
            })
            .collect();
        let to_client = vec![port(CLIENT_V4.into()), port(CLIENT_V6.into())];
        let mut checks: Vec<(&Netns, Vec<SocketAddr>)> = vec![(&self.client, to_nodes)];
        for n in &self.nodes {
            checks.push((&n.ns, to_pods.clone()));
            for p in &n.pods {
                checks.push((&p.ns, to_client.clone()));
            }
        }
        for (ns, targets) in checks {
            let failures = ns.within(move || crate::segment::reach_all(&targets, timeout))?;
            if !failures.is_empty() {
                bail!("{} cannot reach: {}", ns.name(), failures.join("; "));
            }
        }
        Ok(())
    }
}
