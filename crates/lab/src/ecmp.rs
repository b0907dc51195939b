//! The ECMP lab: two balancers behind one BGP router that spreads flows
//! over both, and targets that own the VIPs and answer clients directly
//! (Meridio-2's shape: stateless LB replicas behind ECMP, no NAT).
//!
//! ```text
//!  client ns                 router ns (BIRD 2, ECMP, L4 hash)
//!  eth0 10.210.0.2  -------- eth0 10.210.0.1
//!       fd00:210::2               fd00:210::1
//!                            eth1 10.210.1.1 ---+  LB network (bridge br0 in the lsw ns)
//!                                 fd00:210:1::1 |
//!        +--------------------------------------+--------------------+
//!   lb1 eth0 10.210.1.11     lb2 eth0 10.210.1.12          probe eth0 10.210.1.100
//!            fd00:210:1::11           fd00:210:1::12             fd00:210:1::100
//!   lb1 eth1 10.210.2.2      lb2 eth1 10.210.2.3
//!            fd00:210:2::2            fd00:210:2::3
//!        +--------------------------------------+--------------------+
//!                            eth2 10.210.2.1 ---+  target network (bridge br0 in the tsw ns)
//!                                 fd00:210:2::1 |
//!                         t{i} eth0 10.210.2.(10+i), fd00:210:2::(10+i), default via the router
//! ```
//!
//! Nothing routes a VIP at first: the router learns each VIP from the
//! balancers over BGP (BIRD's `merge paths on` installs one multipath
//! route when both announce it), and spreads flows over the next hops with
//! an L4 hash (`fib_multipath_hash_policy=1`, both families). Note: flows
//! spread per connection, but `ip route get ... sport S dport D` does not
//! predict the balancer a flow takes (measured: it named the wrong one for
//! 63 of 120 flows). By the kernel's code, `fib_multipath_hash` reuses an
//! L4 hash a forwarded packet already carries, and across a veth that is
//! the client socket's `sk_txhash`: random per connection, re-drawn by TCP
//! after a retransmission timeout. [`tcp_endpoints`] on a capture of the
//! target network's switch ports tells which balancer carries a flow.
//!
//! A balancer forwards a VIP's packets to a target on the target network
//! as next hop; the target owns the VIP on its loopback and replies
//! straight to the router (its default route), never through a balancer.
//! `probe` sits on the LB network, default route via the router and no
//! BGP: a test gives it static VIP routes via one balancer, so its traffic
//! shows whether that balancer's datapath forwards whatever BIRD thinks.
//! The balancers have no default route: a packet a balancer's kernel would
//! have to route (its datapath gone) is dropped there, not bounced back to
//! the router.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::link;
use crate::netns::Netns;
use crate::segment::reach_all;
use crate::topology::HOST_IF;

/// The router's AS (BIRD).
pub const ROUTER_AS: u32 = 65000;
/// The balancers' AS (both: their routes are equal, so BIRD merges them).
pub const LB_AS: u32 = 65010;
/// How many balancers the lab has.
pub const LBS: usize = 2;

/// The client (IPv4).
pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(10, 210, 0, 2);
/// The client (IPv6).
pub const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x210, 0, 0, 0, 0, 0, 2);
/// The router on the client's link (IPv4); the client's gateway.
pub const ROUTER_CLIENT_V4: Ipv4Addr = Ipv4Addr::new(10, 210, 0, 1);
/// The router on the client's link (IPv6).
pub const ROUTER_CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x210, 0, 0, 0, 0, 0, 1);
/// The router on the LB network (IPv4): the balancers' BGP peer.
pub const ROUTER_LBNET_V4: Ipv4Addr = Ipv4Addr::new(10, 210, 1, 1);
/// The router on the LB network (IPv6).
pub const ROUTER_LBNET_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x210, 1, 0, 0, 0, 0, 1);
/// The router on the target network (IPv4): the targets' gateway.
pub const ROUTER_TNET_V4: Ipv4Addr = Ipv4Addr::new(10, 210, 2, 1);
/// The router on the target network (IPv6).
pub const ROUTER_TNET_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x210, 2, 0, 0, 0, 0, 1);
/// The probe on the LB network (IPv4).
pub const PROBE_V4: Ipv4Addr = Ipv4Addr::new(10, 210, 1, 100);
/// The probe on the LB network (IPv6).
pub const PROBE_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x210, 1, 0, 0, 0, 0, 0x100);

/// Balancer `i` (1-based) on the LB network (IPv4): its BGP session
/// address and the next hop it announces.
pub fn lb_v4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 210, 1, 10 + i as u8)
}

/// Balancer `i` on the LB network (IPv6): its IPv6 next hop.
pub fn lb_v6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x210, 1, 0, 0, 0, 0, hexlike(10 + i))
}

/// Balancer `i` on the target network (IPv4).
pub fn lb_tnet_v4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 210, 2, 1 + i as u8)
}

/// Balancer `i` on the target network (IPv6).
pub fn lb_tnet_v6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x210, 2, 0, 0, 0, 0, hexlike(1 + i))
}

/// Target `i` (1-based) (IPv4): 10.210.2.(10+i).
pub fn target_v4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 210, 2, 10 + i as u8)
}

/// Target `i` (IPv6): `fd00:210:2::(10+i)`, written with the IPv4 digits.
pub fn target_v6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x210, 2, 0, 0, 0, 0, hexlike(10 + i))
}

/// `n` written in decimal digits read as hex (11 -> 0x11), so IPv6
/// addresses read like their IPv4 twins.
fn hexlike(n: usize) -> u16 {
    u16::from_str_radix(&n.to_string(), 16).expect("decimal digits are hex")
}

/// The built ECMP lab. Dropping it deletes every namespace (and kills what
/// still runs in them).
#[derive(Debug)]
pub struct EcmpLab {
    /// The client behind the router (default routes via it).
    pub client: Netns,
    /// The router: `eth0` client, `eth1` LB network, `eth2` target network.
    pub router: Netns,
    /// Holds the LB network's bridge.
    pub lb_switch: Netns,
    /// Holds the target network's bridge.
    pub target_switch: Netns,
    /// The balancers `lb1`, `lb2`: `eth0` on the LB network (XDP, BGP),
    /// `eth1` on the target network.
    pub lbs: Vec<Netns>,
    /// An on-link host of the LB network (default route via the router) that
    /// reaches no VIP until a test gives it static routes via a balancer.
    pub probe: Netns,
    /// Targets `t1..tN` on the target network.
    pub targets: Vec<Netns>,
}

impl EcmpLab {
    /// Builds the lab with `targets` targets (1..=20) and checks that the
    /// client reaches the router, every balancer reaches the router and
    /// every target, and every target reaches the client and the probe
    /// through the router.
    pub fn build(tag: &str, targets: usize) -> Result<EcmpLab> {
        if targets == 0 || targets > 20 {
            bail!("target count must be 1..=20, got {targets}");
        }
        crate::ensure_bpffs()?;
        let tag = crate::lab_tag(tag);
        let lab = EcmpLab {
            client: Netns::new(&format!("{tag}c"))?,
            router: Netns::new(&format!("{tag}r"))?,
            lb_switch: Netns::new(&format!("{tag}s"))?,
            target_switch: Netns::new(&format!("{tag}w"))?,
            lbs: (0..LBS)
                .map(|_| Netns::new(&format!("{tag}l")))
                .collect::<Result<_>>()?,
            probe: Netns::new(&format!("{tag}p"))?,
            targets: (0..targets)
                .map(|_| Netns::new(&format!("{tag}t")))
                .collect::<Result<_>>()?,
        };
        lab.wire().context("building the ECMP lab")?;
        lab.verify(Duration::from_secs(10))
            .context("the ECMP lab is not reachable")?;
        Ok(lab)
    }

    fn all(&self) -> impl Iterator<Item = &Netns> {
        [
            &self.client,
            &self.router,
            &self.lb_switch,
            &self.target_switch,
            &self.probe,
        ]
        .into_iter()
        .chain(self.lbs.iter())
        .chain(self.targets.iter())
    }

    fn wire(&self) -> Result<()> {
        for ns in self.all() {
            ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
            ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
        }
        // Forwarding on and rp_filter off before any interface exists, so
        // every interface inherits it (replies leave the targets by another
        // path than the requests took).
        link::router(&self.router)?;
        for lb in &self.lbs {
            link::router(lb)?;
        }
        // ECMP by L4 hash, so flows of one client spread by their ports.
        self.router
            .sysctl("net.ipv4.fib_multipath_hash_policy", "1")?;
        self.router
            .sysctl("net.ipv6.fib_multipath_hash_policy", "1")?;

        let mut ends: Vec<(&Netns, String)> = Vec::new();
        // client <-> router
        link::veth(&self.client, HOST_IF, &self.router, "eth0")?;
        link::addr(&self.client, HOST_IF, &format!("{CLIENT_V4}/24"))?;
        link::addr(&self.client, HOST_IF, &format!("{CLIENT_V6}/64"))?;
        link::addr(&self.router, "eth0", &format!("{ROUTER_CLIENT_V4}/24"))?;
        link::addr(&self.router, "eth0", &format!("{ROUTER_CLIENT_V6}/64"))?;
        link::up(&self.client, HOST_IF)?;
        link::up(&self.router, "eth0")?;
        link::route(&self.client, "default", &ROUTER_CLIENT_V4.to_string())?;
        link::route(&self.client, "default", &ROUTER_CLIENT_V6.to_string())?;
        ends.push((&self.client, HOST_IF.to_string()));
        ends.push((&self.router, "eth0".to_string()));

        // The LB network: router eth1, lb{i} eth0, probe eth0.
        let mut lbnet: Vec<(String, &Netns, &str, String, String)> = vec![(
            "pr".into(),
            &self.router,
            "eth1",
            ROUTER_LBNET_V4.to_string(),
            ROUTER_LBNET_V6.to_string(),
        )];
        for (idx, lb) in self.lbs.iter().enumerate() {
            let i = idx + 1;
            lbnet.push((
                format!("pl{i}"),
                lb,
                "eth0",
                lb_v4(i).to_string(),
                lb_v6(i).to_string(),
            ));
        }
        lbnet.push((
            "pp".into(),
            &self.probe,
            HOST_IF,
            PROBE_V4.to_string(),
            PROBE_V6.to_string(),
        ));
        self.segment(&self.lb_switch, &lbnet, &mut ends)?;

        // The target network: router eth2, lb{i} eth1, t{i} eth0.
        let mut tnet: Vec<(String, &Netns, &str, String, String)> = vec![(
            "pr".into(),
            &self.router,
            "eth2",
            ROUTER_TNET_V4.to_string(),
            ROUTER_TNET_V6.to_string(),
        )];
        for (idx, lb) in self.lbs.iter().enumerate() {
            let i = idx + 1;
            tnet.push((
                format!("pl{i}"),
                lb,
                "eth1",
                lb_tnet_v4(i).to_string(),
                lb_tnet_v6(i).to_string(),
            ));
        }
        for (idx, t) in self.targets.iter().enumerate() {
            let i = idx + 1;
            tnet.push((
                format!("pt{i}"),
                t,
                HOST_IF,
                target_v4(i).to_string(),
                target_v6(i).to_string(),
            ));
        }
        self.segment(&self.target_switch, &tnet, &mut ends)?;

        // The probe's own traffic (replies to it come from the targets)
        // goes through the router; a test adds VIP routes via one balancer.
        link::route(&self.probe, "default", &ROUTER_LBNET_V4.to_string())?;
        link::route(&self.probe, "default", &ROUTER_LBNET_V6.to_string())?;
        // Targets answer through the router, never through a balancer.
        for t in &self.targets {
            link::route(t, "default", &ROUTER_TNET_V4.to_string())?;
            link::route(t, "default", &ROUTER_TNET_V6.to_string())?;
        }
        // Real checksums on every hop (see link::disable_offloads).
        for (ns, ifname) in ends {
            link::disable_offloads(ns, &ifname)?;
        }
        Ok(())
    }

    /// One bridge `br0` in `sw` with a port per `(port, ns, ifname, v4, v6)`.
    fn segment<'a>(
        &self,
        sw: &'a Netns,
        members: &[(String, &'a Netns, &str, String, String)],
        ends: &mut Vec<(&'a Netns, String)>,
    ) -> Result<()> {
        link::bridge(sw, "br0")?;
        for (port, ns, ifname, v4, v6) in members {
            link::veth(sw, port, ns, ifname)?;
            link::enslave(sw, port, "br0")?;
            link::up(sw, port)?;
            link::addr(ns, ifname, &format!("{v4}/24"))?;
            link::addr(ns, ifname, &format!("{v6}/64"))?;
            link::up(ns, ifname)?;
            ends.push((sw, port.clone()));
            ends.push((ns, ifname.to_string()));
        }
        Ok(())
    }

    /// client -> router, lb{i} -> router and every target, every target ->
    /// client and probe (through the router), with TCP handshakes (a refused
    /// connection proves the path both ways).
    fn verify(&self, timeout: Duration) -> Result<()> {
        for ns in self.all() {
            link::wait_ipv6_settled(ns, timeout)?;
        }
        let sock = |ip: IpAddr| SocketAddr::new(ip, 9);
        let mut checks: Vec<(&Netns, Vec<SocketAddr>)> = vec![(
            &self.client,
            vec![sock(ROUTER_CLIENT_V4.into()), sock(ROUTER_CLIENT_V6.into())],
        )];
        for lb in &self.lbs {
            let mut v = vec![sock(ROUTER_LBNET_V4.into()), sock(ROUTER_LBNET_V6.into())];
            for i in 1..=self.targets.len() {
                v.push(sock(target_v4(i).into()));
                v.push(sock(target_v6(i).into()));
            }
            checks.push((lb, v));
        }
        for t in &self.targets {
            checks.push((
                t,
                vec![
                    sock(CLIENT_V4.into()),
                    sock(CLIENT_V6.into()),
                    sock(PROBE_V4.into()),
                    sock(PROBE_V6.into()),
                ],
            ));
        }
        for (ns, targets) in checks {
            let failures = ns.within(move || reach_all(&targets, timeout))?;
            if !failures.is_empty() {
                bail!("{} cannot reach: {}", ns.name(), failures.join("; "));
            }
        }
        Ok(())
    }

    /// Puts `vips` on every target's loopback: each target owns them (a
    /// classifier forwards to the target unchanged, without NAT).
    pub fn targets_own(&self, vips: &[IpAddr]) -> Result<()> {
        for t in &self.targets {
            for v in vips {
                match v {
                    IpAddr::V4(a) => {
                        t.run(&["ip", "addr", "add", &format!("{a}/32"), "dev", "lo"])?
                    }
                    // nodad: a tentative address cannot be bound.
                    IpAddr::V6(a) => t.run(&[
                        "ip",
                        "-6",
                        "addr",
                        "add",
                        &format!("{a}/128"),
                        "dev",
                        "lo",
                        "nodad",
                    ])?,
                };
            }
        }
        Ok(())
    }
}

/// BIRD 2's config for the router: a passive eBGP session per balancer
/// (protocols `lb1`, `lb2`) carrying IPv4 and IPv6, `hold` seconds of hold
/// time, and kernel protocols that export the best routes *merged* with
/// their equals (`merge paths on`): one multipath kernel route per VIP
/// announced by both balancers.
pub fn bird_config(hold: u32) -> String {
    let mut s = format!(
        r#"router id {ROUTER_LBNET_V4};
log stderr all;
protocol device {{ scan time 1; }}
protocol kernel k4 {{ merge paths on; ipv4 {{ import none; export all; }}; }}
protocol kernel k6 {{ merge paths on; ipv6 {{ import none; export all; }}; }}
template bgp lbs {{
    local {ROUTER_LBNET_V4} as {ROUTER_AS};
    passive on;
    hold time {hold};
    error wait time 1, 5;
    ipv4 {{ import all; export none; }};
    ipv6 {{ import all; export none; }};
}}
"#
    );
    for i in 1..=LBS {
        s.push_str(&format!(
            "protocol bgp lb{i} from lbs {{ neighbor {} as {LB_AS}; }}\n",
            lb_v4(i)
        ));
    }
    s
}

/// The `bgp:` section of balancer `i`'s rivorad YAML, peering with the
/// router's BIRD.
pub fn rivorad_bgp_yaml(i: usize, hold: u32) -> String {
    format!(
        "bgp:\n  localAS: {LB_AS}\n  routerID: {}\n  peers:\n    - address: {ROUTER_LBNET_V4}\n      as: {ROUTER_AS}\n      holdTime: {hold}\n      nextHop: {{ ipv6: \"{}\" }}\n",
        lb_v4(i),
        lb_v6(i)
    )
}

/// One route of a prefix in BIRD's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BirdPath {
    /// The protocol that brought it (`lb1`).
    pub protocol: String,
    /// Its next hops (`10.210.1.11`), as the `via` lines under it show
    /// them (BIRD prints a multipath route with several).
    pub via: Vec<String>,
    /// Whether BIRD marked it best (`*`).
    pub best: bool,
}

/// Parses `birdc show route` (BIRD 2) into prefix -> its routes.
///
/// A route starts on a line with `[PROTOCOL ...]`, the prefix written on
/// the first route of a prefix only; its next hop follows on a `via` line.
pub fn parse_bird_routes(text: &str) -> BTreeMap<String, Vec<BirdPath>> {
    let mut out: BTreeMap<String, Vec<BirdPath>> = BTreeMap::new();
    let mut prefix: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("via ") {
            if let Some(p) = &prefix
                && let Some(last) = out.get_mut(p).and_then(|v| v.last_mut())
            {
                last.via
                    .push(trimmed.split_whitespace().nth(1).unwrap_or("").to_string());
            }
            continue;
        }
        let Some(open) = line.find('[') else {
            continue;
        };
        if !line.starts_with(char::is_whitespace) {
            let first = line.split_whitespace().next().unwrap_or("");
            if !first.contains('/') {
                continue;
            }
            prefix = Some(first.to_string());
        }
        let Some(p) = &prefix else { continue };
        let protocol = line[open + 1..]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string();
        let best = line[open..].contains("] *");
        out.entry(p.clone()).or_default().push(BirdPath {
            protocol,
            via: Vec::new(),
            best,
        });
    }
    out
}

/// The gateways of `prefix` in `ns`'s kernel table (`ip -j route show`):
/// one for a plain route, each next hop's for a multipath one, none when
/// there is no such route. Sorted.
pub fn kernel_next_hops(ns: &Netns, prefix: &str) -> Result<Vec<String>> {
    let family = if prefix.contains(':') { "-6" } else { "-4" };
    let out = ns.run(&["ip", family, "-j", "route", "show", prefix])?;
    let v: serde_json::Value =
        serde_json::from_str(&out).with_context(|| format!("parsing `ip -j route`: {out}"))?;
    let mut hops = Vec::new();
    for r in v.as_array().into_iter().flatten() {
        if let Some(gw) = r["gateway"].as_str() {
            hops.push(gw.to_string());
        }
        for nh in r["nexthops"].as_array().into_iter().flatten() {
            if let Some(gw) = nh["gateway"].as_str() {
                hops.push(gw.to_string());
            }
        }
    }
    hops.sort();
    Ok(hops)
}

/// The TCP (source, destination) of an Ethernet frame carrying IPv4 or
/// IPv6 (no extension headers) and TCP; None for anything else.
///
/// Why: a capture on the target network's switch port of a balancer shows
/// which flows that balancer forwards (its XDP redirect bypasses its own
/// packet taps, the switch port's ingress does not).
pub fn tcp_endpoints(frame: &[u8]) -> Option<(SocketAddr, SocketAddr)> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let l3 = frame.get(14..)?;
    let (src, dst, l4): (IpAddr, IpAddr, &[u8]) = match ethertype {
        0x0800 => {
            let ihl = usize::from(l3.first()? & 0x0f) * 4;
            if *l3.get(9)? != 6 || ihl < 20 {
                return None;
            }
            let s: [u8; 4] = l3.get(12..16)?.try_into().ok()?;
            let d: [u8; 4] = l3.get(16..20)?.try_into().ok()?;
            (s.into(), d.into(), l3.get(ihl..)?)
        }
        0x86dd => {
            if *l3.get(6)? != 6 {
                return None;
            }
            let s: [u8; 16] = l3.get(8..24)?.try_into().ok()?;
            let d: [u8; 16] = l3.get(24..40)?.try_into().ok()?;
            (s.into(), d.into(), l3.get(40..)?)
        }
        _ => return None,
    };
    let sport = u16::from_be_bytes([*l4.first()?, *l4.get(1)?]);
    let dport = u16::from_be_bytes([*l4.get(2)?, *l4.get(3)?]);
    Some((SocketAddr::new(src, sport), SocketAddr::new(dst, dport)))
}

/// One established TCP socket as `ss -tin` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpSocket {
    /// The local end (on a target: VIP:port).
    pub local: SocketAddr,
    /// The remote end (on a target: the client's address and port).
    pub peer: SocketAddr,
    /// `bytes_received` (payload bytes received so far).
    pub bytes_received: u64,
}

/// The established TCP sockets in `ns` whose local port is `port`, from
/// `ss -tinH state established`.
pub fn established(ns: &Netns, port: u16) -> Result<Vec<TcpSocket>> {
    let out = ns.run(&[
        "ss",
        "-tinH",
        "state",
        "established",
        &format!("( sport = :{port} )"),
    ])?;
    Ok(parse_ss(&out))
}

/// Parses `ss -tinH state established` (no state column): a socket line
/// `RECVQ SENDQ LOCAL PEER`, then a line of details (`bytes_received:N`).
pub fn parse_ss(text: &str) -> Vec<TcpSocket> {
    let mut out: Vec<TcpSocket> = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let addrs = (words.len() >= 4)
            .then(|| {
                let local = parse_ss_addr(words[2])?;
                let peer = parse_ss_addr(words[3])?;
                Some((local, peer))
            })
            .flatten();
        if let (false, Some((local, peer))) = (line.starts_with(char::is_whitespace), addrs) {
            out.push(TcpSocket {
                local,
                peer,
                bytes_received: 0,
            });
            continue;
        }
        if let Some(last) = out.last_mut() {
            for w in &words {
                if let Some(n) = w.strip_prefix("bytes_received:") {
                    last.bytes_received = n.parse().unwrap_or(0);
                }
            }
        }
    }
    out
}

/// `10.0.0.1:80` or `[fd00::1]:80` (an IPv4-mapped peer is unmapped).
fn parse_ss_addr(s: &str) -> Option<SocketAddr> {
    let a: SocketAddr = s.parse().ok()?;
    Some(match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => a,
        },
        v4 => v4,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bird_routes_with_two_paths() {
        let text = [
            "BIRD 2.0.12 ready.",
            "Table master4:",
            "10.210.100.1/32      unicast [lb1 10:00:00.123] * (100) [AS65010i]",
            "\tvia 10.210.1.11 on eth1",
            "                     unicast [lb2 10:00:00.456] (100) [AS65010i]",
            "\tvia 10.210.1.12 on eth1",
            "10.210.100.2/32      unicast [lb2 10:00:01.000] * (100) [AS65010i]",
            "\tvia 10.210.1.12 on eth1",
            "",
            "Table master6:",
            "fd00:210:100::1/128  unicast [lb1 10:00:00.123] * (100) [AS65010i]",
            "\tvia fd00:210:1::11 on eth1",
            "fd00:210:100::2/128  unicast [lb1 10:00:00.123] * (100) [AS65010i]",
            "\tvia fd00:210:1::11 on eth1",
            "\tvia fd00:210:1::12 on eth1",
        ]
        .join("\n");
        let r = parse_bird_routes(&text);
        assert_eq!(r.len(), 4, "{r:?}");
        let a = &r["10.210.100.1/32"];
        assert_eq!(a.len(), 2);
        assert_eq!(
            a[0],
            BirdPath {
                protocol: "lb1".into(),
                via: vec!["10.210.1.11".into()],
                best: true
            }
        );
        assert_eq!(a[1].protocol, "lb2");
        assert_eq!(a[1].via, ["10.210.1.12"]);
        assert!(!a[1].best);
        assert_eq!(r["10.210.100.2/32"][0].protocol, "lb2");
        assert_eq!(r["fd00:210:100::1/128"][0].via, ["fd00:210:1::11"]);
        assert_eq!(
            r["fd00:210:100::2/128"][0].via,
            ["fd00:210:1::11", "fd00:210:1::12"]
        );
    }

    #[test]
    fn parses_ss_sockets() {
        let text = "0      0      10.210.100.1:80      10.210.0.2:40000\n\
\t cubic wscale:7,7 rto:204 bytes_sent:120 bytes_acked:120 bytes_received:230 segs_out:9\n\
0      0      [fd00:210:100::1]:80      [fd00:210::2]:40001\n\
\t cubic bytes_received:17 lastrcv:12\n\
0 0 [::ffff:10.210.100.1]:80 [::ffff:10.210.0.2]:40002\n\t bytes_received:5\n";
        let s = parse_ss(text);
        assert_eq!(s.len(), 3, "{s:?}");
        assert_eq!(s[0].peer, "10.210.0.2:40000".parse().unwrap());
        assert_eq!(s[0].local, "10.210.100.1:80".parse().unwrap());
        assert_eq!(s[0].bytes_received, 230);
        assert_eq!(s[1].peer, "[fd00:210::2]:40001".parse().unwrap());
        assert_eq!(s[1].bytes_received, 17);
        assert_eq!(s[2].peer, "10.210.0.2:40002".parse().unwrap());
    }

    #[test]
    fn reads_tcp_endpoints_of_frames() {
        let mut f4 = vec![0u8; 14 + 20 + 20];
        f4[12..14].copy_from_slice(&[0x08, 0x00]);
        f4[14] = 0x45;
        f4[14 + 9] = 6;
        f4[14 + 12..14 + 16].copy_from_slice(&[10, 210, 0, 2]);
        f4[14 + 16..14 + 20].copy_from_slice(&[10, 210, 100, 1]);
        f4[34..36].copy_from_slice(&40000u16.to_be_bytes());
        f4[36..38].copy_from_slice(&80u16.to_be_bytes());
        assert_eq!(
            tcp_endpoints(&f4),
            Some((
                "10.210.0.2:40000".parse().unwrap(),
                "10.210.100.1:80".parse().unwrap()
            ))
        );
        let mut udp = f4.clone();
        udp[14 + 9] = 17;
        assert_eq!(tcp_endpoints(&udp), None);
        let mut f6 = vec![0u8; 14 + 40 + 20];
        f6[12..14].copy_from_slice(&[0x86, 0xdd]);
        f6[14 + 6] = 6;
        f6[14 + 8..14 + 24].copy_from_slice(&CLIENT_V6.octets());
        f6[14 + 24..14 + 40].copy_from_slice(&target_v6(1).octets());
        f6[54..56].copy_from_slice(&40001u16.to_be_bytes());
        f6[56..58].copy_from_slice(&80u16.to_be_bytes());
        let (s, d) = tcp_endpoints(&f6).unwrap();
        assert_eq!(s, SocketAddr::new(CLIENT_V6.into(), 40001));
        assert_eq!(d, SocketAddr::new(target_v6(1).into(), 80));
        assert_eq!(tcp_endpoints(&f6[..50]), None);
    }

    #[test]
    fn addresses_read_alike() {
        assert_eq!(lb_v6(1).to_string(), "fd00:210:1::11");
        assert_eq!(target_v6(3).to_string(), "fd00:210:2::13");
        assert_eq!(lb_tnet_v6(2).to_string(), "fd00:210:2::3");
        assert_eq!(lb_tnet_v4(1).to_string(), "10.210.2.2");
    }
}
