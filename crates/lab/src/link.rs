//! Link, address and route helpers that operate inside a [`Netns`].
//!
//! Each is a thin wrapper around one `ip`/`ethtool` call so a topology reads
//! like the shell recipe it replaces, while errors carry the full command.

use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::netns::Netns;

/// Creates a veth pair with `a_if` in `a` and `b_if` in `b`.
///
/// Why directly in the namespaces (`ip link add A netns X type veth peer
/// name B netns Y`): the devices never exist in the root namespace, so
/// parallel tests can all use names like `eth0` without clashing there.
pub fn veth(a: &Netns, a_if: &str, b: &Netns, b_if: &str) -> Result<()> {
    let argv = [
        "ip",
        "link",
        "add",
        "name",
        a_if,
        "netns",
        a.name(),
        "type",
        "veth",
        "peer",
        "name",
        b_if,
        "netns",
        b.name(),
    ];
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .context("running `ip link add ... type veth`")?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Creates a Linux bridge `name` in `ns` and brings it up.
///
/// Why these options: STP off and forward delay 0 so ports forward at once
/// (no 15-30 s learning pause in tests), multicast snooping off so IPv6
/// neighbour discovery is always flooded and never depends on MLD state.
///
/// Why the address is then set to itself: a bridge whose address was never
/// set takes the lowest address of its ports, so a port joining or leaving
/// (a node namespace of another test going away) moves the bridge's own
/// address. Hosts that reach an address on the bridge keep the old one in
/// their neighbour cache and are cut off until it expires: 55 s measured,
/// the cause of RivoraNode writes unanswered for 20 s in the Kubernetes
/// tests. An address set explicitly never moves.
pub fn bridge(ns: &Netns, name: &str) -> Result<()> {
    ns.run(&[
        "ip",
        "link",
        "add",
        name,
        "type",
        "bridge",
        "stp_state",
        "0",
        "forward_delay",
        "0",
        "mcast_snooping",
        "0",
    ])?;
    let mac = mac(ns, name)?;
    ns.run(&["ip", "link", "set", "dev", name, "address", &mac])?;
    up(ns, name)
}

/// Makes interface `ifname` a port of bridge `bridge` (both in `ns`).
///
/// Why: backends hang off one L2 segment on the balancer host, like servers
/// on a rack switch behind a real balancer.
pub fn enslave(ns: &Netns, ifname: &str, bridge: &str) -> Result<()> {
    ns.run(&["ip", "link", "set", "dev", ifname, "master", bridge])?;
    Ok(())
}

/// Adds an address in CIDR form (`10.0.0.1/24`, `fd00::1/64`) to `ifname`.
///
/// Why `nodad` for IPv6: duplicate address detection keeps a new address
/// "tentative" (unusable for binding and sending) for about a second; there
/// can be no duplicates in a lab we built ourselves.
pub fn addr(ns: &Netns, ifname: &str, cidr: &str) -> Result<()> {
    let ip = parse_cidr_addr(cidr)?;
    let mut argv = vec!["ip", "addr", "add", cidr, "dev", ifname];
    if ip.is_ipv6() {
        argv.push("nodad");
    }
    ns.run(&argv)?;
    Ok(())
}

/// Sets `ifname` administratively up.
///
/// Why a helper: so topologies read as a list of steps.
pub fn up(ns: &Netns, ifname: &str) -> Result<()> {
    ns.run(&["ip", "link", "set", "dev", ifname, "up"])?;
    Ok(())
}

/// Sets `ifname` administratively down.
///
/// Why: tests cut a link this way (the far end of a veth loses its
/// carrier) to see how a daemon behind it reacts.
pub fn down(ns: &Netns, ifname: &str) -> Result<()> {
    ns.run(&["ip", "link", "set", "dev", ifname, "down"])?;
    Ok(())
}

/// Adds (or replaces) a route `dst` (CIDR or `default`) via gateway `via`.
///
/// Why the family comes from `via`: `default` alone is ambiguous between
/// IPv4 and IPv6. Uses `replace` so re-running a setup step is harmless.
pub fn route(ns: &Netns, dst: &str, via: &str) -> Result<()> {
    let gw: IpAddr = via
        .parse()
        .with_context(|| format!("route via {via:?}: not an IP address"))?;
    let family = if gw.is_ipv6() { "-6" } else { "-4" };
    ns.run(&["ip", family, "route", "replace", dst, "via", via])?;
    Ok(())
}

/// Turns off checksum and segmentation offloads on `ifname`:
/// `ethtool -K IF tx off rx off gso off tso off gro off`.
///
/// Why: the balancer's XDP program rewrites packets and patches checksums
/// incrementally. With TX checksum offload a veth hands out packets whose
/// L4 checksum is only partial (CHECKSUM_PARTIAL, never computed), and the
/// receiver trusts them, so a broken checksum update would go unnoticed.
/// With offloads off every packet carries a real checksum and every hop
/// verifies it, so an end-to-end test really tests the rewrite.
///
/// Note: on veth, GRO off (the default anyway) also means no NAPI on that
/// end; packets XDP_TX'ed or XDP_REDIRECTed *into* such a veth (i.e. sent by
/// its peer's XDP program) are dropped unless this end has an XDP program
/// attached or GRO enabled, see [`set_gro`].
pub fn disable_offloads(ns: &Netns, ifname: &str) -> Result<()> {
    ns.run(&[
        "ethtool", "-K", ifname, "tx", "off", "rx", "off", "gso", "off", "tso", "off", "gro", "off",
    ])?;
    Ok(())
}

/// Turns GRO on or off on `ifname`.
///
/// Why: on a veth, GRO on is what enables NAPI for that end when it has no
/// XDP program, and the peer's native-mode XDP_TX/XDP_REDIRECT can only
/// deliver frames to a veth end with NAPI. Dataplane tests that bounce
/// packets with XDP_TX can re-enable it here on the receiving ends. GRO
/// validates checksums, so it does not weaken [`disable_offloads`]' purpose.
pub fn set_gro(ns: &Netns, ifname: &str, on: bool) -> Result<()> {
    ns.run(&[
        "ethtool",
        "-K",
        ifname,
        "gro",
        if on { "on" } else { "off" },
    ])?;
    Ok(())
}

/// MAC address of `ifname` as `aa:bb:cc:dd:ee:ff`.
///
/// Why: tests that craft frames or check neighbour tables need the real
/// addresses of the random-MAC veths. Read over netlink (`ip -j`), since
/// /sys/class/net shows the namespace /sys was mounted in, not ours.
pub fn mac(ns: &Netns, ifname: &str) -> Result<String> {
    let out = ns.run(&["ip", "-j", "link", "show", "dev", ifname])?;
    let v: serde_json::Value =
        serde_json::from_str(&out).context("parsing `ip -j link show` output")?;
    v.get(0)
        .and_then(|l| l.get("address"))
        .and_then(|a| a.as_str())
        .map(str::to_string)
        .with_context(|| format!("no MAC address for {ifname} in netns {}", ns.name()))
}

/// Waits until no IPv6 address in `ns` is tentative (DAD finished).
///
/// Why: binding to or sending from a tentative address fails with
/// EADDRNOTAVAIL; `nodad` addresses are usable at once but link-local ones
/// may still run DAD, so tests wait for a settled namespace.
pub fn wait_ipv6_settled(ns: &Netns, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let out = ns.run(&["ip", "-6", "-o", "addr", "show", "tentative"])?;
        if out.trim().is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "IPv6 addresses in netns {} still tentative after {timeout:?}:\n{out}",
                ns.name()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn parse_cidr_addr(cidr: &str) -> Result<IpAddr> {
    let ip = cidr.split('/').next().unwrap_or(cidr);
    ip.parse()
        .with_context(|| format!("{cidr:?} is not an address in CIDR form"))
}

/// Packet counters of one interface, from the kernel's 64-bit link stats.
///
/// Why: tests that account for every frame (a flood's packets against the
/// balancer's counters) compare what a link sent, received and dropped.
/// On a veth with an XDP program, `rx_packets` counts every frame the
/// program ran on, whatever its verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames received.
    pub rx_packets: u64,
    /// Frames dropped on receive (e.g. a full queue or XDP ring).
    pub rx_dropped: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Frames dropped on send.
    pub tx_dropped: u64,
}

impl Counters {
    /// The increase from `earlier` to `self`.
    ///
    /// Why saturating: counters only grow while the interface exists; a
    /// smaller value means it was recreated, and 0 is then the honest
    /// "nothing known" rather than a wrapped huge number.
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            rx_packets: self.rx_packets.saturating_sub(earlier.rx_packets),
            rx_dropped: self.rx_dropped.saturating_sub(earlier.rx_dropped),
            tx_packets: self.tx_packets.saturating_sub(earlier.tx_packets),
            tx_dropped: self.tx_dropped.saturating_sub(earlier.tx_dropped),
        }
    }
}

/// The counters of `ifname` in `ns` (`ip -s -j link show`).
///
/// Why netlink rather than /sys/class/net: /sys shows the namespace it was
/// mounted in, not the one the command runs in.
pub fn counters(ns: &Netns, ifname: &str) -> Result<Counters> {
    let out = ns.run(&["ip", "-s", "-j", "link", "show", "dev", ifname])?;
    let v: serde_json::Value =
        serde_json::from_str(&out).context("parsing `ip -s -j link show` output")?;
    let s = &v[0]["stats64"];
    let get = |dir: &str, key: &str| {
        s[dir][key].as_u64().with_context(|| {
            format!(
                "no stats64.{dir}.{key} for {ifname} in netns {}: {out}",
                ns.name()
            )
        })
    };
    Ok(Counters {
        rx_packets: get("rx", "packets")?,
        rx_dropped: get("rx", "dropped")?,
        tx_packets: get("tx", "packets")?,
        tx_dropped: get("tx", "dropped")?,
    })
}

/// Adds (or replaces) a permanent neighbour entry `addr` -> `lladdr` on
/// `ifname`.
///
/// Why: with static entries nobody sends ARP on a link, so every frame a
/// test counts on it is one of the test's own.
pub fn neigh_permanent(ns: &Netns, ifname: &str, addr: &str, lladdr: &str) -> Result<()> {
    ns.run(&[
        "ip",
        "neigh",
        "replace",
        addr,
        "lladdr",
        lladdr,
        "dev",
        ifname,
        "nud",
        "permanent",
    ])?;
    Ok(())
}

/// Makes `ns` a router: IPv4 and IPv6 forwarding on, reverse-path filter
/// and ICMP redirects off.
///
/// Why: every lab host that forwards (the balancer, a router, a node) needs
/// the same settings, and rp_filter would drop the asymmetric paths the
/// labs build on purpose (DSR replies, NAT hairpins).
pub fn router(ns: &Netns) -> Result<()> {
    for (k, v) in [
        ("net.ipv4.ip_forward", "1"),
        ("net.ipv6.conf.all.forwarding", "1"),
        ("net.ipv6.conf.default.forwarding", "1"),
        ("net.ipv4.conf.all.rp_filter", "0"),
        ("net.ipv4.conf.default.rp_filter", "0"),
        ("net.ipv4.conf.all.send_redirects", "0"),
        ("net.ipv4.conf.default.send_redirects", "0"),
    ] {
        ns.sysctl(k, v)?;
    }
    Ok(())
}
