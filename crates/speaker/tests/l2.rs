//! End-to-end tests of the L2 responder in network namespaces (root
//! required; never skipped).
//!
//! Topology: a client namespace and an lb namespace joined by a veth
//! (`eth0` on both ends, 10.77.0.0/24 and fd77::/64, on one L2 segment).
//! The responder runs in the lb namespace on its own thread and tokio
//! runtime, answering for VIPs that are configured on no interface. The
//! client reaches the VIPs through `ip route add VIP dev eth0`, so its
//! kernel resolves the VIP itself with ARP / neighbour solicitation; a UDP
//! datagram to the VIP triggers that. What the client's kernel puts in its
//! neighbour table, and what an AF_PACKET capture on the client's `eth0`
//! sees (parsed with etherparse and an independent RFC 1071 checksum), are
//! the evidence.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use etherparse::{Icmpv6Type, LinkSlice, NetSlice, SlicedPacket, TransportSlice};
use rivora_lab::sniff::{Frame, Sniffer};
use rivora_lab::{Netns, link};
use rivora_speaker::{Responder, ResponderOptions};

const VIP4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
const NON_VIP4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);
const NON_VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x11);
/// The solicited-node group of VIP6 on Ethernet, as `ip maddr` prints it.
const VIP6_GROUP: &str = "33:33:ff:00:00:10";

/// Fails (never skips) when not root, with a message saying why.
fn root() {
    if let Err(e) = rivora_lab::require_root() {
        panic!("THIS TEST NEEDS ROOT, refusing to skip: {e:#}");
    }
}

fn vips(list: &[IpAddr]) -> std::collections::BTreeSet<IpAddr> {
    list.iter().copied().collect()
}

/// client -- lb over one veth, plus optionally a second client (`other`)
/// on the lb's `eth1`.
struct Lab {
    client: Netns,
    lb: Netns,
    other: Option<Netns>,
    lb_mac: String,
}

/// Makes neighbour resolution give up after ~0.3 s instead of ~3 s, so the
/// "not answered" tests are quick.
fn fast_neigh(ns: &Netns) {
    ns.sysctl("net/ipv4/neigh/eth0/retrans_time_ms", "100")
        .unwrap();
    ns.sysctl("net/ipv6/neigh/eth0/retrans_time_ms", "100")
        .unwrap();
}

/// Routes `ip` straight onto the client's segment: the client resolves the
/// VIP itself, as a router on the VIP's segment would.
fn on_link(ns: &Netns, ip: IpAddr) {
    ns.run(&["ip", "route", "add", &ip.to_string(), "dev", "eth0"])
        .unwrap();
}

impl Lab {
    fn new(with_other: bool) -> Lab {
        root();
        let client = Netns::new("spc").unwrap();
        let lb = Netns::new("spl").unwrap();
        link::veth(&client, "eth0", &lb, "eth0").unwrap();
        link::addr(&client, "eth0", "10.77.0.1/24").unwrap();
        link::addr(&client, "eth0", "fd77::1/64").unwrap();
        link::addr(&lb, "eth0", "10.77.0.2/24").unwrap();
        link::addr(&lb, "eth0", "fd77::2/64").unwrap();
        link::up(&client, "eth0").unwrap();
        link::up(&lb, "eth0").unwrap();
        fast_neigh(&client);
        for ip in [
            IpAddr::V4(VIP4),
            IpAddr::V6(VIP6),
            IpAddr::V4(NON_VIP4),
            IpAddr::V6(NON_VIP6),
        ] {
            on_link(&client, ip);
        }
        let other = with_other.then(|| {
            let other = Netns::new("spo").unwrap();
            link::veth(&other, "eth0", &lb, "eth1").unwrap();
            link::addr(&other, "eth0", "10.78.0.1/24").unwrap();
            link::addr(&other, "eth0", "fd78::1/64").unwrap();
            link::addr(&lb, "eth1", "10.78.0.2/24").unwrap();
            link::addr(&lb, "eth1", "fd78::2/64").unwrap();
            link::up(&other, "eth0").unwrap();
            link::up(&lb, "eth1").unwrap();
            fast_neigh(&other);
            on_link(&other, IpAddr::V4(VIP4));
            on_link(&other, IpAddr::V6(VIP6));
            link::wait_ipv6_settled(&other, Duration::from_secs(5)).unwrap();
            other
        });
        link::wait_ipv6_settled(&client, Duration::from_secs(5)).unwrap();
        link::wait_ipv6_settled(&lb, Duration::from_secs(5)).unwrap();
        let lb_mac = link::mac(&lb, "eth0").unwrap();
        // The VIPs are configured on no interface of any namespace.
        for ns in [&client, &lb] {
            let addrs = ns.run(&["ip", "-o", "addr", "show"]).unwrap();
            assert!(!addrs.contains("192.0.2."), "{addrs}");
            assert!(!addrs.contains("2001:db8:"), "{addrs}");
        }
        Lab {
            client,
            lb,
            other,
            lb_mac,
        }
    }

    /// Multicast link-layer groups of the lb's eth0.
    fn lb_maddr(&self) -> String {
        self.lb
            .run(&["ip", "maddr", "show", "dev", "eth0"])
            .unwrap()
    }
}

/// A responder running in a namespace on its own thread with its own tokio
/// runtime (the thread joined the namespace with setns, so the responder's
/// sockets live there). Derefs to the [`Responder`]; dropping it stops the
/// responder (awaiting [`Responder::stop`]) and joins the thread.
struct Speaker {
    responder: Option<Responder>,
    back: Option<tokio::sync::oneshot::Sender<Responder>>,
    thread: Option<JoinHandle<()>>,
}

impl Speaker {
    /// A responder announcing every `interval`, without a takeover burst
    /// (so tests count exactly one announcement per start of answering).
    fn start(ns: &Netns, interface: &'static str, interval: Duration) -> Speaker {
        Speaker::start_with(
            ns,
            interface,
            ResponderOptions {
                announce_interval: interval,
                takeover_burst: 0,
            },
        )
    }

    fn start_with(ns: &Netns, interface: &'static str, options: ResponderOptions) -> Speaker {
        let (tx, rx) = mpsc::channel();
        let (back, back_rx) = tokio::sync::oneshot::channel::<Responder>();
        let thread = ns.enter_thread(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            rt.block_on(async move {
                match Responder::start(interface, options) {
                    Ok(r) => {
                        let _ = tx.send(Ok(r));
                        // Keep driving the responder until it comes back.
                        if let Ok(r) = back_rx.await {
                            r.stop().await;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
        });
        let responder = rx
            .recv()
            .expect("responder thread died")
            .expect("Responder::start");
        Speaker {
            responder: Some(responder),
            back: Some(back),
            thread: Some(thread),
        }
    }
}

impl std::ops::Deref for Speaker {
    type Target = Responder;
    fn deref(&self) -> &Responder {
        self.responder.as_ref().expect("responder present")
    }
}

impl Drop for Speaker {
    fn drop(&mut self) {
        if let (Some(r), Some(back)) = (self.responder.take(), self.back.take()) {
            let _ = back.send(r);
        }
        if let Some(t) = self.thread.take() {
            let res = t.join();
            if res.is_err() && !std::thread::panicking() {
                panic!("responder thread panicked");
            }
        }
    }
}

/// Every frame that arrives on one interface of a namespace (outgoing frames are left
/// out), read in windows: rivora-lab's [`Sniffer`] on that interface.
struct Capture {
    sniffer: Sniffer,
    /// How many of the sniffer's frames earlier windows returned.
    seen: std::cell::Cell<usize>,
}

impl Capture {
    fn open(ns: &Netns, ifname: &str) -> Capture {
        Capture {
            sniffer: Sniffer::start(ns, &[ifname]).unwrap(),
            seen: std::cell::Cell::new(0),
        }
    }

    /// Every frame that arrived since the previous window (or since `open`), waiting `dur`
    /// first.
    fn collect(&self, dur: Duration) -> Vec<Frame> {
        std::thread::sleep(dur);
        let all = self.sniffer.frames();
        let new = all[self.seen.get().min(all.len())..].to_vec();
        self.seen.set(all.len());
        new
    }
}

/// An ARP packet as an independent parser (etherparse) sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Arp {
    eth_src: [u8; 6],
    eth_dst: [u8; 6],
    op: u16,
    sha: [u8; 6],
    spa: Ipv4Addr,
    tha: [u8; 6],
    tpa: Ipv4Addr,
}

/// A neighbour advertisement as etherparse sees it, plus our own checksum
/// verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Na {
    eth_src: [u8; 6],
    eth_dst: [u8; 6],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    router: bool,
    solicited: bool,
    override_: bool,
    target: Ipv6Addr,
    /// Target link-layer address option.
    tlla: Option<[u8; 6]>,
    checksum_ok: bool,
}

/// RFC 1071 over the IPv6 pseudo-header and the ICMPv6 message, written
/// independently of the crate: the sum of a correct message is 0xffff.
fn icmpv6_checksum_ok(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> bool {
    let mut data = Vec::new();
    data.extend_from_slice(&src.octets());
    data.extend_from_slice(&dst.octets());
    data.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    data.extend_from_slice(&[0, 0, 0, 58]);
    data.extend_from_slice(msg);
    if data.len() % 2 == 1 {
        data.push(0);
    }
    let mut sum: u64 = 0;
    for w in data.chunks(2) {
        sum += (u64::from(w[0]) << 8) | u64::from(w[1]);
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

fn arp_of(f: &[u8]) -> Option<Arp> {
    let p = SlicedPacket::from_ethernet(f).ok()?;
    let Some(LinkSlice::Ethernet2(eth)) = &p.link else {
        return None;
    };
    let Some(NetSlice::Arp(arp)) = &p.net else {
        return None;
    };
    Some(Arp {
        eth_src: eth.source(),
        eth_dst: eth.destination(),
        op: arp.operation().0,
        sha: arp.sender_hw_addr().try_into().ok()?,
        spa: <[u8; 4]>::try_from(arp.sender_protocol_addr()).ok()?.into(),
        tha: arp.target_hw_addr().try_into().ok()?,
        tpa: <[u8; 4]>::try_from(arp.target_protocol_addr()).ok()?.into(),
    })
}

fn na_of(f: &[u8]) -> Option<Na> {
    let p = SlicedPacket::from_ethernet(f).ok()?;
    let Some(LinkSlice::Ethernet2(eth)) = &p.link else {
        return None;
    };
    let Some(NetSlice::Ipv6(ip)) = &p.net else {
        return None;
    };
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        return None;
    };
    let Icmpv6Type::NeighborAdvertisement(flags) = icmp.icmp_type() else {
        return None;
    };
    let h = ip.header();
    let (src, dst) = (h.source_addr(), h.destination_addr());
    let body = icmp.payload();
    let target = Ipv6Addr::from(<[u8; 16]>::try_from(body.get(..16)?).ok()?);
    // Walk the options for the target link-layer address (type 2).
    let mut tlla = None;
    let mut opts = &body[16..];
    while opts.len() >= 2 && opts[1] != 0 {
        let len = usize::from(opts[1]) * 8;
        let Some(opt) = opts.get(..len) else { break };
        if opt[0] == 2 && len == 8 {
            tlla = Some(opt[2..8].try_into().unwrap());
        }
        opts = &opts[len..];
    }
    Some(Na {
        eth_src: eth.source(),
        eth_dst: eth.destination(),
        src,
        dst,
        hop_limit: h.hop_limit(),
        router: flags.router,
        solicited: flags.solicited,
        override_: flags.r#override,
        target,
        tlla,
        checksum_ok: icmpv6_checksum_ok(src, dst, icmp.slice()),
    })
}

/// `aa:bb:cc:dd:ee:ff` -> bytes.
fn mac_bytes(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

/// Sends one UDP datagram from `ns` to `ip`: the client kernel must resolve
/// `ip` on eth0 first (the datagram waits in the neighbour queue).
fn trigger(ns: &Netns, ip: IpAddr) {
    ns.within(|| {
        let bind: SocketAddr = match ip {
            IpAddr::V4(_) => "0.0.0.0:0".parse().unwrap(),
            IpAddr::V6(_) => "[::]:0".parse().unwrap(),
        };
        let s = UdpSocket::bind(bind).unwrap();
        // An error here (EHOSTUNREACH from a previous failure) is fine: the
        // point is the resolution attempt, which is checked separately.
        let _ = s.send_to(b"resolve me", SocketAddr::new(ip, 9));
    })
    .unwrap();
}

fn neigh(ns: &Netns, ip: IpAddr) -> String {
    ns.run(&["ip", "neigh", "show", "to", &ip.to_string(), "dev", "eth0"])
        .unwrap()
        .trim()
        .to_string()
}

/// Waits until `ns` has resolved `ip` to `mac` (REACHABLE, STALE, DELAY or
/// PROBE), triggering resolution first.
fn assert_resolves(ns: &Netns, ip: IpAddr, mac: &str) {
    trigger(ns, ip);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = neigh(ns, ip);
        let resolved = ["REACHABLE", "STALE", "DELAY", "PROBE"]
            .iter()
            .any(|s| n.ends_with(s));
        if resolved {
            assert!(
                n.contains(&format!("lladdr {mac} ")),
                "{ip} resolved to the wrong MAC (want {mac}): {n}"
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ip} not resolved within 5 s: `{n}`"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Flushes `ip` from the neighbour table of `ns`, triggers resolution and
/// asserts that it fails: the entry must end FAILED (INCOMPLETE at worst)
/// and never carry a link-layer address.
fn assert_unresolved(ns: &Netns, ip: IpAddr) {
    ns.run(&["ip", "neigh", "flush", "to", &ip.to_string(), "dev", "eth0"])
        .unwrap();
    trigger(ns, ip);
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut last;
    loop {
        last = neigh(ns, ip);
        assert!(
            !last.contains("lladdr"),
            "{ip} was answered although it must not be: {last}"
        );
        if last.ends_with("FAILED") || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        last.ends_with("FAILED") || last.ends_with("INCOMPLETE"),
        "{ip}: unexpected neighbour state `{last}`"
    );
}

/// Frames in `frames` that answer for or announce `ip`: ARP with sender IP
/// `ip`, or an NA with target `ip`.
fn about(frames: &[Frame], ip: IpAddr) -> Vec<String> {
    frames
        .iter()
        .filter_map(|f| match ip {
            IpAddr::V4(v4) => arp_of(&f.bytes)
                .filter(|a| a.spa == v4)
                .map(|a| format!("{a:?}")),
            IpAddr::V6(v6) => na_of(&f.bytes)
                .filter(|n| n.target == v6)
                .map(|n| format!("{n:?}")),
        })
        .collect()
}

#[test]
fn answers_arp_and_ns_for_unconfigured_vip() {
    let lab = Lab::new(false);
    let speaker = Speaker::start(&lab.lb, "eth0", Duration::from_secs(60));
    assert_eq!(speaker.mac().to_string(), lab.lb_mac);
    assert_eq!(speaker.interface(), "eth0");
    speaker.set_active(true);
    speaker
        .set_vips(vips(&[IpAddr::V4(VIP4), IpAddr::V6(VIP6)]))
        .unwrap();

    // The lb joined the VIP's solicited-node group at the link layer only.
    assert!(lab.lb_maddr().contains(VIP6_GROUP), "{}", lab.lb_maddr());

    let cap = Capture::open(&lab.client, "eth0");
    assert_resolves(&lab.client, IpAddr::V4(VIP4), &lab.lb_mac);
    assert_resolves(&lab.client, IpAddr::V6(VIP6), &lab.lb_mac);
    let frames = cap.collect(Duration::from_millis(200));

    // The answers themselves, as the client received them.
    let client_mac = mac_bytes(&link::mac(&lab.client, "eth0").unwrap());
    let lb_mac = mac_bytes(&lab.lb_mac);
    let reply = frames
        .iter()
        .filter_map(|f| arp_of(&f.bytes))
        .find(|a| a.op == 2 && a.spa == VIP4)
        .expect("an ARP reply for the VIP");
    assert_eq!(
        reply,
        Arp {
            eth_src: lb_mac,
            eth_dst: client_mac,
            op: 2,
            sha: lb_mac,
            spa: VIP4,
            tha: client_mac,
            tpa: Ipv4Addr::new(10, 77, 0, 1),
        }
    );
    let na = frames
        .iter()
        .filter_map(|f| na_of(&f.bytes))
        .find(|n| n.target == VIP6 && n.solicited)
        .expect("a solicited NA for the VIP");
    assert_eq!(
        na,
        Na {
            eth_src: lb_mac,
            eth_dst: client_mac,
            src: VIP6,
            dst: "fd77::1".parse().unwrap(),
            hop_limit: 255,
            router: false,
            solicited: true,
            override_: true,
            target: VIP6,
            tlla: Some(lb_mac),
            checksum_ok: true,
        }
    );

    let status = speaker.answered();
    assert_eq!(status.len(), 2, "{status:?}");
    for s in &status {
        assert!(s.replies_sent >= 1, "{s:?}");
        assert_eq!(s.announcements_sent, 1, "{s:?}");
        assert!(s.last_announce.is_some(), "{s:?}");
    }
    drop(speaker);
    // Stopping the responder closed its socket and so left the group.
    assert!(!lab.lb_maddr().contains(VIP6_GROUP), "{}", lab.lb_maddr());
}

#[test]
fn announces_on_set_vips_and_periodically() {
    let lab = Lab::new(false);
    let interval = Duration::from_secs(1);
    let speaker = Speaker::start(&lab.lb, "eth0", interval);
    let cap = Capture::open(&lab.client, "eth0");
    speaker.set_active(true);
    // Active with no VIPs: nothing to announce.
    let quiet = cap.collect(Duration::from_millis(300));
    assert!(about(&quiet, IpAddr::V4(VIP4)).is_empty());
    assert!(about(&quiet, IpAddr::V6(VIP6)).is_empty());

    let t0 = Instant::now();
    speaker
        .set_vips(vips(&[IpAddr::V4(VIP4), IpAddr::V6(VIP6)]))
        .unwrap();
    // Long enough for the second announcement, too short for a third.
    let frames = cap.collect((t0 + interval * 3 / 2).saturating_duration_since(Instant::now()));
    let lb_mac = mac_bytes(&lab.lb_mac);

    let garps: Vec<(Instant, Arp)> = frames
        .iter()
        .filter_map(|f| arp_of(&f.bytes).map(|a| (f.at, a)))
        .filter(|(_, a)| a.spa == VIP4)
        .collect();
    let nas: Vec<(Instant, Na)> = frames
        .iter()
        .filter_map(|f| na_of(&f.bytes).map(|n| (f.at, n)))
        .filter(|(_, n)| n.target == VIP6)
        .collect();
    for (_, a) in &garps {
        assert_eq!(
            *a,
            Arp {
                eth_src: lb_mac,
                eth_dst: [0xff; 6],
                op: 1,
                sha: lb_mac,
                spa: VIP4,
                tha: [0; 6],
                tpa: VIP4,
            }
        );
    }
    for (_, n) in &nas {
        assert_eq!(
            *n,
            Na {
                eth_src: lb_mac,
                eth_dst: [0x33, 0x33, 0, 0, 0, 1],
                src: VIP6,
                dst: "ff02::1".parse().unwrap(),
                hop_limit: 255,
                router: false,
                solicited: false,
                override_: true,
                target: VIP6,
                tlla: Some(lb_mac),
                checksum_ok: true,
            }
        );
    }
    // One announcement at once, one after the interval.
    for (what, times) in [
        (
            "gratuitous ARP",
            garps.iter().map(|g| g.0).collect::<Vec<_>>(),
        ),
        ("unsolicited NA", nas.iter().map(|n| n.0).collect()),
    ] {
        assert_eq!(
            times.len(),
            2,
            "{what}: want 2 in the window, saw {times:?}"
        );
        let first = times[0] - t0;
        let gap = times[1] - times[0];
        assert!(
            first < Duration::from_millis(300),
            "{what}: first after {first:?}"
        );
        assert!(
            gap >= interval - Duration::from_millis(100) && gap < interval * 2,
            "{what}: second {gap:?} after the first, interval {interval:?}"
        );
    }
    for s in speaker.answered() {
        assert!(s.announcements_sent >= 2, "{s:?}");
        assert_eq!(s.replies_sent, 0, "{s:?}");
    }

    // Adding a VIP announces only that one at once.
    let vip2 = Ipv4Addr::new(192, 0, 2, 20);
    let t1 = Instant::now();
    speaker
        .set_vips(vips(&[
            IpAddr::V4(VIP4),
            IpAddr::V6(VIP6),
            IpAddr::V4(vip2),
        ]))
        .unwrap();
    let frames = cap.collect(Duration::from_millis(150));
    let new: Vec<_> = frames
        .iter()
        .filter_map(|f| arp_of(&f.bytes).map(|a| (f.at, a)))
        .filter(|(_, a)| a.spa == vip2)
        .collect();
    assert_eq!(new.len(), 1, "{new:?}");
    assert!(new[0].0 - t1 < Duration::from_millis(150));
    assert_eq!(new[0].1.tpa, vip2);
}

#[test]
fn removed_vip_is_no_longer_answered() {
    let lab = Lab::new(false);
    let speaker = Speaker::start(&lab.lb, "eth0", Duration::from_secs(60));
    speaker.set_active(true);
    speaker
        .set_vips(vips(&[IpAddr::V4(VIP4), IpAddr::V6(VIP6)]))
        .unwrap();
    assert_resolves(&lab.client, IpAddr::V4(VIP4), &lab.lb_mac);
    assert_resolves(&lab.client, IpAddr::V6(VIP6), &lab.lb_mac);
    assert!(lab.lb_maddr().contains(VIP6_GROUP));

    speaker.set_vips(vips(&[])).unwrap();
    assert!(speaker.answered().is_empty());
    assert!(
        !lab.lb_maddr().contains(VIP6_GROUP),
        "solicited-node group still joined: {}",
        lab.lb_maddr()
    );
    let cap = Capture::open(&lab.client, "eth0");
    assert_unresolved(&lab.client, IpAddr::V4(VIP4));
    assert_unresolved(&lab.client, IpAddr::V6(VIP6));
    let frames = cap.collect(Duration::from_millis(100));
    assert_eq!(about(&frames, IpAddr::V4(VIP4)), Vec::<String>::new());
    assert_eq!(about(&frames, IpAddr::V6(VIP6)), Vec::<String>::new());

    // Re-adding it answers again (and announces it).
    speaker
        .set_vips(vips(&[IpAddr::V4(VIP4), IpAddr::V6(VIP6)]))
        .unwrap();
    assert_resolves(&lab.client, IpAddr::V4(VIP4), &lab.lb_mac);
    assert_resolves(&lab.client, IpAddr::V6(VIP6), &lab.lb_mac);
}

#[test]
fn other_addresses_and_interfaces_are_not_answered() {
    let lab = Lab::new(true);
    let other = lab.other.as_ref().unwrap();
    let speaker = Speaker::start(&lab.lb, "eth0", Duration::from_secs(60));
    speaker.set_active(true);
    speaker
        .set_vips(vips(&[IpAddr::V4(VIP4), IpAddr::V6(VIP6)]))
        .unwrap();

    // Addresses next to the VIPs, on the responder's interface.
    let cap = Capture::open(&lab.client, "eth0");
    assert_unresolved(&lab.client, IpAddr::V4(NON_VIP4));
    assert_unresolved(&lab.client, IpAddr::V6(NON_VIP6));
    let frames = cap.collect(Duration::from_millis(100));
    assert_eq!(about(&frames, IpAddr::V4(NON_VIP4)), Vec::<String>::new());
    assert_eq!(about(&frames, IpAddr::V6(NON_VIP6)), Vec::<String>::new());

    // The VIPs themselves, asked on another interface of the lb.
    let cap = Capture::open(other, "eth0");
    assert_unresolved(other, IpAddr::V4(VIP4));
    assert_unresolved(other, IpAddr::V6(VIP6));
    let frames = cap.collect(Duration::from_millis(100));
    assert_eq!(about(&frames, IpAddr::V4(VIP4)), Vec::<String>::new());
    assert_eq!(about(&frames, IpAddr::V6(VIP6)), Vec::<String>::new());

    for s in speaker.answered() {
        assert_eq!(s.replies_sent, 0, "{s:?}");
    }
    // The same VIPs on the right interface are answered.
    assert_resolves(&lab.client, IpAddr::V4(VIP4), &lab.lb_mac);
    assert_resolves(&lab.client, IpAddr::V6(VIP6), &lab.lb_mac);
}

#[test]
fn inactive_responder_answers_and_sends_nothing() {
    let lab = Lab::new(false);
    let cap = Capture::open(&lab.client, "eth0");
    let speaker = Speaker::start(&lab.lb, "eth0", Duration::from_millis(300));
    // A fresh responder is inactive: the set is stored, nothing answered.
    assert!(!speaker.is_active());
    let set = vips(&[IpAddr::V4(VIP4), IpAddr::V6(VIP6)]);
    speaker.set_vips(set.clone()).unwrap();
    assert_eq!(speaker.vips(), set);
    assert!(speaker.answered().is_empty());
    assert!(!lab.lb_maddr().contains(VIP6_GROUP));
    assert_unresolved(&lab.client, IpAddr::V4(VIP4));
    assert_unresolved(&lab.client, IpAddr::V6(VIP6));
    // Longer than the announce interval: no periodic announcements either.
    let frames = cap.collect(Duration::from_millis(700));
    assert_eq!(about(&frames, IpAddr::V4(VIP4)), Vec::<String>::new());
    assert_eq!(about(&frames, IpAddr::V6(VIP6)), Vec::<String>::new());

    // Becoming active announces everything at once and answers.
    speaker.set_active(true);
    speaker.set_active(true); // idempotent: no second burst
    for s in speaker.answered() {
        assert_eq!(s.announcements_sent, 1, "{s:?}");
    }
    let frames = cap.collect(Duration::from_millis(200));
    assert_eq!(about(&frames, IpAddr::V4(VIP4)).len(), 1, "no GARP");
    assert_eq!(about(&frames, IpAddr::V6(VIP6)).len(), 1, "no NA");
    assert_resolves(&lab.client, IpAddr::V4(VIP4), &lab.lb_mac);
    assert_resolves(&lab.client, IpAddr::V6(VIP6), &lab.lb_mac);

    // Going inactive again silences it.
    speaker.set_active(false);
    assert!(speaker.answered().is_empty());
    assert!(!lab.lb_maddr().contains(VIP6_GROUP));
    let _ = cap.collect(Duration::from_millis(50)); // drop what came before
    assert_unresolved(&lab.client, IpAddr::V4(VIP4));
    assert_unresolved(&lab.client, IpAddr::V6(VIP6));
    let frames = cap.collect(Duration::from_millis(700));
    assert_eq!(about(&frames, IpAddr::V4(VIP4)), Vec::<String>::new());
    assert_eq!(about(&frames, IpAddr::V6(VIP6)), Vec::<String>::new());
}

#[test]
fn start_fails_for_unknown_interface() {
    root();
    let ns = Netns::new("spx").unwrap();
    let e = ns
        .within(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async { Responder::start("nosuch0", ResponderOptions::default()) })
                .unwrap_err()
        })
        .unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
    // `lo` is not Ethernet.
    let e = ns
        .within(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async { Responder::start("lo", ResponderOptions::default()) })
                .unwrap_err()
        })
        .unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
}

#[test]
fn takeover_burst_repeats_announcements_then_waits_for_the_interval() {
    let lab = Lab::new(false);
    let cap = Capture::open(&lab.client, "eth0");
    let speaker = Speaker::start_with(
        &lab.lb,
        "eth0",
        ResponderOptions {
            announce_interval: Duration::from_secs(60),
            takeover_burst: 3,
        },
    );
    speaker
        .set_vips(vips(&[IpAddr::V4(VIP4), IpAddr::V6(VIP6)]))
        .unwrap();
    let t0 = Instant::now();
    speaker.set_active(true);
    // The burst is 1 + 3 announcements one BURST_SPACING apart; after it
    // the next one is a minute away, so a window of 4.5 s holds exactly 4.
    let frames = cap.collect(Duration::from_millis(4500));
    for vip in [IpAddr::V4(VIP4), IpAddr::V6(VIP6)] {
        let times: Vec<Duration> = frames
            .iter()
            .filter(|f| match vip {
                IpAddr::V4(v) => arp_of(&f.bytes).is_some_and(|a| a.spa == v && a.tpa == v),
                IpAddr::V6(v) => na_of(&f.bytes).is_some_and(|n| n.target == v && !n.solicited),
            })
            .map(|f| f.at - t0)
            .collect();
        assert_eq!(times.len(), 4, "{vip}: announcements at {times:?}");
        assert!(times[0] < Duration::from_millis(300), "{vip}: {times:?}");
        for w in times.windows(2) {
            let gap = w[1] - w[0];
            assert!(
                gap >= rivora_speaker::BURST_SPACING - Duration::from_millis(100)
                    && gap < rivora_speaker::BURST_SPACING * 2,
                "{vip}: gaps of the burst {times:?}"
            );
        }
    }
    for s in speaker.answered() {
        assert_eq!(s.announcements_sent, 4, "{s:?}");
    }
}

#[test]
fn a_deadline_that_runs_out_silences_the_responder() {
    let lab = Lab::new(false);
    let speaker = Speaker::start(&lab.lb, "eth0", Duration::from_secs(60));
    speaker
        .set_vips(vips(&[IpAddr::V4(VIP4), IpAddr::V6(VIP6)]))
        .unwrap();
    let cap = Capture::open(&lab.client, "eth0");
    // Renewed every 100 ms with 400 ms of validity, as a Lease holder
    // would: active throughout, announced once (no announcement per
    // renewal).
    let renewing = Instant::now();
    while renewing.elapsed() < Duration::from_millis(1200) {
        speaker.set_active_until(Some(Instant::now() + Duration::from_millis(400)));
        assert!(speaker.is_active());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_resolves(&lab.client, IpAddr::V4(VIP4), &lab.lb_mac);
    assert_resolves(&lab.client, IpAddr::V6(VIP6), &lab.lb_mac);
    speaker.set_active_until(Some(Instant::now() + Duration::from_millis(400)));
    for s in speaker.answered() {
        assert_eq!(s.announcements_sent, 1, "{s:?}");
    }
    assert_eq!(speaker.fenced(), 0);

    // The renewals stop: once the last deadline passes, nothing is
    // answered, without anyone calling set_active(false).
    let deadline = Instant::now() + Duration::from_millis(400);
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
    let _ = cap.collect(Duration::from_millis(50)); // what came before
    assert!(!speaker.is_active());
    assert_eq!(speaker.fenced(), 1);
    assert!(speaker.answered().is_empty());
    assert!(!lab.lb_maddr().contains(VIP6_GROUP));
    lab.client
        .run(&["ip", "neigh", "flush", "dev", "eth0"])
        .unwrap();
    assert_unresolved(&lab.client, IpAddr::V4(VIP4));
    assert_unresolved(&lab.client, IpAddr::V6(VIP6));
    let frames = cap.collect(Duration::from_millis(300));
    assert_eq!(about(&frames, IpAddr::V4(VIP4)), Vec::<String>::new());
    assert_eq!(about(&frames, IpAddr::V6(VIP6)), Vec::<String>::new());

    // A deadline already in the past is inactive; a new one announces again.
    speaker.set_active_until(Some(Instant::now() - Duration::from_millis(1)));
    assert!(!speaker.is_active());
    speaker.set_active_until(Some(Instant::now() + Duration::from_secs(30)));
    assert_resolves(&lab.client, IpAddr::V4(VIP4), &lab.lb_mac);
    assert_resolves(&lab.client, IpAddr::V6(VIP6), &lab.lb_mac);
}

#[test]
fn link_running_follows_the_carrier() {
    let lab = Lab::new(false);
    let speaker = Speaker::start(&lab.lb, "eth0", Duration::from_secs(60));
    assert!(speaker.link_running().unwrap());
    // The far end of the veth goes down: the lb's eth0 loses its carrier.
    link::down(&lab.client, "eth0").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = speaker.link_running();
    while last.as_ref().is_ok_and(|up| *up) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        last = speaker.link_running();
    }
    assert!(
        !last.unwrap(),
        "carrier still reported 5 s after the peer went down"
    );
    link::up(&lab.client, "eth0").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = speaker.link_running();
    while last.as_ref().is_ok_and(|up| !*up) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        last = speaker.link_running();
    }
    assert!(last.unwrap(), "carrier not back 5 s after the peer came up");
}
