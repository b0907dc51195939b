//! Direct server return through the real program: L2 DSR (MAC rewrite,
//! XDP_TX) and L3 DSR (IP-in-IP, IPv6-in-IPv6, GRE with a per-flow key),
//! with the FIB answering (redirect), not answering (to the kernel), and
//! the packet not fitting the tunnel (ICMP fragmentation needed / packet
//! too big, checked by an independent checksum and parser).

mod common;

use std::net::IpAddr;

use common::raw::*;
use common::*;
use rivora_abi as abi;
use rivora_dataplane::{Mode, proto};

const XDP_TX: u32 = 3;
const XDP_REDIRECT: u32 = 4;
const IFACE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x1b];
const BACKEND_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x11];

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn dsr_rig(name: &str, mode: Mode) -> Rig {
    let mut r = rig(name);
    r.dataplane.set_interface(IFACE_MAC, 1).unwrap();
    r.dataplane
        .set_tunnel_source(
            Some("10.200.9.1".parse().unwrap()),
            Some("fd00:200:9::1".parse().unwrap()),
        )
        .unwrap();
    let mut b4 = backend("10.200.1.11", 80, 1);
    b4.mac = BACKEND_MAC;
    let mut b6 = backend("fd00:200:1::11", 80, 1);
    b6.mac = BACKEND_MAC;
    let mut v4 = vip("d4", "10.200.100.1", 80, proto::TCP, vec![b4]);
    let mut v6 = vip("d6", "fd00:200:100::1", 80, proto::TCP, vec![b6]);
    v4.mode = mode;
    v6.mode = mode;
    r.dataplane.apply(&[v4, v6]).unwrap();
    r
}

fn request(v6: bool, vlans: &[u16], df: bool, payload: usize) -> Vec<u8> {
    let (c, v) = if v6 {
        (ip("fd00:200::2"), ip("fd00:200:100::1"))
    } else {
        (ip("10.200.0.2"), ip("10.200.100.1"))
    };
    let l4 = tcp(c, v, 40000, 80, 0x18, &vec![0x5a; payload]);
    if v6 {
        let mut p = ipv6(c, v, TCP, &[], l4.len());
        p.extend_from_slice(&l4);
        eth(0x86dd, vlans, &p)
    } else {
        let mut p = ipv4(c, v, TCP, 9, false, 0, &[], l4.len());
        if df {
            p[6] |= 0x40;
            let c = checksum(
                &{
                    let mut h = p[..20].to_vec();
                    h[10] = 0;
                    h[11] = 0;
                    h
                },
                0,
            );
            p[10..12].copy_from_slice(&c.to_be_bytes());
        }
        p.extend_from_slice(&l4);
        eth(0x0800, vlans, &p)
    }
}

#[test]
fn l2_dsr_rewrites_only_the_destination_mac() {
    let mut r = dsr_rig("dsrl2", Mode::Dsr);
    for v6 in [false, true] {
        for vlans in [&[][..], &[10][..], &[20, 30][..]] {
            let f = request(v6, vlans, false, 100);
            let (verdict, out) = r.datapath.run_xdp(&f).unwrap();
            assert_eq!(verdict, XDP_TX, "v6 {v6} vlans {vlans:?}");
            assert_eq!(&out[0..6], &BACKEND_MAC, "destination MAC is the backend's");
            assert_eq!(&out[6..12], &IFACE_MAC, "source MAC is ours");
            assert_eq!(
                &out[12..],
                &f[12..],
                "everything after the MACs is unchanged (VIP stays the destination)"
            );
        }
    }
    // The affinity is recorded like any other mode; nothing for tc_nat.
    assert!(r.dataplane.maps().affinity.keys().count() > 0);
    assert_eq!(
        r.dataplane.maps().nat_reverse.keys().count(),
        0,
        "DSR records no NAT state"
    );
}

/// Outer headers of an encapsulated frame: (outer protocol, src, dst,
/// GRE key if any, inner packet).
fn decap(out: &[u8], v6: bool) -> (u8, IpAddr, IpAddr, Option<u32>, Vec<u8>) {
    assert_eq!(
        u16::from_be_bytes([out[12], out[13]]),
        if v6 { 0x86dd } else { 0x0800 },
        "no VLAN tag on the routed frame"
    );
    let o = &out[14..];
    let (proto, src, dst, hl) = if v6 {
        assert_eq!(o[0] >> 4, 6);
        let plen = u16::from_be_bytes([o[4], o[5]]) as usize;
        assert_eq!(plen, o.len() - 40, "outer payload length");
        (
            o[6],
            IpAddr::from(<[u8; 16]>::try_from(&o[8..24]).unwrap()),
            IpAddr::from(<[u8; 16]>::try_from(&o[24..40]).unwrap()),
            40,
        )
    } else {
        assert_eq!(o[0], 0x45);
        assert_eq!(checksum(&o[..20], 0), 0, "outer IPv4 header checksum");
        assert_eq!(
            u16::from_be_bytes([o[2], o[3]]) as usize,
            o.len(),
            "outer total length"
        );
        (
            o[9],
            IpAddr::from(<[u8; 4]>::try_from(&o[12..16]).unwrap()),
            IpAddr::from(<[u8; 4]>::try_from(&o[16..20]).unwrap()),
            20,
        )
    };
    if proto == GRE {
        let g = &o[hl..];
        assert_eq!(
            u16::from_be_bytes([g[0], g[1]]),
            0x2000,
            "GRE with the key bit"
        );
        assert_eq!(
            u16::from_be_bytes([g[2], g[3]]),
            if v6 { 0x86dd } else { 0x0800 }
        );
        let key = u32::from_be_bytes([g[4], g[5], g[6], g[7]]);
        return (proto, src, dst, Some(key), g[8..].to_vec());
    }
    (proto, src, dst, None, o[hl..].to_vec())
}

const GRE: u8 = 47;

#[test]
fn l3_dsr_encapsulates_and_hands_to_the_kernel_without_a_route() {
    for (mode, name) in [(Mode::DsrIpip, "ipip"), (Mode::DsrGre, "gre")] {
        let mut r = dsr_rig(&format!("dsr{name}"), mode);
        for v6 in [false, true] {
            let f = request(v6, &[7], false, 200);
            let inner = f[18..].to_vec(); // after Ethernet and one tag
            // No ingress interface in this test run: the FIB cannot answer,
            // so the packet goes to the kernel, encapsulated.
            let (verdict, out) = r.datapath.run_xdp(&f).unwrap();
            assert_eq!(verdict, XDP_PASS, "{name} v6 {v6}");
            assert_eq!(
                &out[0..6],
                &IFACE_MAC,
                "addressed to us for the kernel to route"
            );
            let (p, src, dst, key, got_inner) = decap(&out, v6);
            let want_proto = match (mode, v6) {
                (Mode::DsrGre, _) => GRE,
                (_, false) => 4,
                (_, true) => 41,
            };
            assert_eq!(p, want_proto, "{name} outer protocol");
            assert_eq!(
                src,
                if v6 {
                    ip("fd00:200:9::1")
                } else {
                    ip("10.200.9.1")
                },
                "outer source = tunnelSource"
            );
            assert_eq!(
                dst,
                if v6 {
                    ip("fd00:200:1::11")
                } else {
                    ip("10.200.1.11")
                },
                "outer destination = backend"
            );
            assert_eq!(got_inner, inner, "inner packet unchanged");
            if mode == Mode::DsrGre {
                assert!(key.is_some());
            }
        }
        let events = r.dataplane.drop_counters().unwrap();
        assert_eq!(events[abi::drop_reason::PASS_TUNNEL_TO_KERNEL as usize], 2);
    }
}

/// The per-flow GRE key / IPv6 flow label differ between flows (receive-
/// side scaling) and stay the same within one.
#[test]
fn outer_headers_carry_per_flow_entropy() {
    let mut r = dsr_rig("dsrent", Mode::DsrGre);
    let mut keys = std::collections::BTreeSet::new();
    for sport in 0..50u16 {
        let (c, v) = (ip("10.200.0.2"), ip("10.200.100.1"));
        let l4 = tcp(c, v, 30000 + sport, 80, 0x02, b"");
        let f = frame(c, v, TCP, &[], &l4);
        let (_, out) = r.datapath.run_xdp(&f).unwrap();
        let (_, _, _, key, _) = decap(&out, false);
        let (_, again) = r.datapath.run_xdp(&f).unwrap();
        assert_eq!(decap(&again, false).3, key, "same flow, same key");
        keys.insert(key.unwrap());
    }
    assert!(keys.len() >= 45, "keys vary per flow: {}", keys.len());
}

/// With a real route and neighbour the packet is redirected out of the
/// egress interface with the neighbour's MAC; a packet that does not fit the
/// tunnel path gets ICMP fragmentation needed / packet too big instead.
#[test]
fn l3_dsr_routes_with_the_fib_and_answers_too_big() {
    let ns = rivora_lab::Netns::new("dsrf").unwrap();
    ns.run(&[
        "ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1",
    ])
    .unwrap();
    // The FIB answers only for interfaces that forward (as a balancer's do).
    ns.sysctl("net.ipv4.ip_forward", "1").unwrap();
    ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
    ns.run(&["ip", "link", "set", "up0", "up"]).unwrap();
    ns.run(&["ip", "link", "set", "up1", "up"]).unwrap();
    ns.run(&["ip", "addr", "add", "10.200.9.1/24", "dev", "up0"])
        .unwrap();
    ns.run(&[
        "ip",
        "addr",
        "add",
        "fd00:200:9::1/64",
        "dev",
        "up0",
        "nodad",
    ])
    .unwrap();
    // The FIB lookup honours a route MTU only when it is locked (for IPv4,
    // also with ip_forward_use_pmtu).
    ns.run(&[
        "ip",
        "route",
        "add",
        "10.200.1.0/24",
        "via",
        "10.200.9.2",
        "dev",
        "up0",
        "mtu",
        "lock",
        "1300",
    ])
    .unwrap();
    ns.run(&[
        "ip",
        "-6",
        "route",
        "add",
        "fd00:200:1::/64",
        "via",
        "fd00:200:9::2",
        "dev",
        "up0",
        "mtu",
        "lock",
        "1400",
    ])
    .unwrap();
    ns.run(&[
        "ip",
        "neigh",
        "add",
        "10.200.9.2",
        "lladdr",
        "02:99:00:00:00:02",
        "dev",
        "up0",
        "nud",
        "permanent",
    ])
    .unwrap();
    ns.run(&[
        "ip",
        "-6",
        "neigh",
        "add",
        "fd00:200:9::2",
        "lladdr",
        "02:99:00:00:00:02",
        "dev",
        "up0",
        "nud",
        "permanent",
    ])
    .unwrap();
    let idx = |name: &str| -> u32 {
        let out = ns.run(&["ip", "-o", "link", "show", name]).unwrap();
        out.split(':').next().unwrap().trim().parse().unwrap()
    };
    let (up0, up1) = (idx("up0"), idx("up1"));
    let mut r = dsr_rig("dsrfib", Mode::DsrIpip);
    let results = ns
        .within(|| {
            let mut results = Vec::new();
            for v6 in [false, true] {
                // Fits: 1000 bytes of payload.
                results.push(
                    r.datapath
                        .run_xdp_on(&request(v6, &[], true, 1000), up1)
                        .unwrap(),
                );
                // Does not fit the route MTU (1300 for IPv4, 1400 for IPv6) minus
                // the outer header; DF set (IPv6 is never fragmented on the way).
                let big = if v6 { 1350 } else { 1250 };
                results.push(
                    r.datapath
                        .run_xdp_on(&request(v6, &[5], true, big), up1)
                        .unwrap(),
                );
            }
            // IPv4 without DF: encapsulated and left to the kernel to fragment.
            results.push(
                r.datapath
                    .run_xdp_on(&request(false, &[], false, 1250), up1)
                    .unwrap(),
            );
            results
        })
        .unwrap();
    let _ = up0;
    for (i, v6) in [(0usize, false), (2, true)] {
        let (verdict, out) = &results[i];
        assert_eq!(*verdict, XDP_REDIRECT, "fits: redirected (v6 {v6})");
        assert_eq!(
            &out[0..6],
            &[0x02, 0x99, 0, 0, 0, 0x02],
            "to the next hop's MAC"
        );
        let (_, src, dst, _, _) = decap(out, v6);
        assert_eq!(
            dst,
            if v6 {
                ip("fd00:200:1::11")
            } else {
                ip("10.200.1.11")
            }
        );
        assert_eq!(
            src,
            if v6 {
                ip("fd00:200:9::1")
            } else {
                ip("10.200.9.1")
            }
        );
    }
    // Too big: an ICMP error back to the client, from the VIP, same VLAN.
    for (i, v6) in [(1usize, false), (3, true)] {
        let (verdict, out) = &results[i];
        assert_eq!(*verdict, XDP_TX, "too big: answered (v6 {v6})");
        assert_eq!(
            u16::from_be_bytes([out[12], out[13]]),
            0x8100,
            "kept its VLAN tag"
        );
        assert_eq!(
            &out[0..6],
            &[0x02, 0, 0, 0, 0, 0xc1],
            "back to the client's MAC"
        );
        let l3 = 18;
        if v6 {
            let h = &out[l3..];
            assert_eq!(h[6], 58);
            let src = IpAddr::from(<[u8; 16]>::try_from(&h[8..24]).unwrap());
            let dst = IpAddr::from(<[u8; 16]>::try_from(&h[24..40]).unwrap());
            assert_eq!((src, dst), (ip("fd00:200:100::1"), ip("fd00:200::2")));
            let icmp = &h[40..];
            assert_eq!(icmp.len(), u16::from_be_bytes([h[4], h[5]]) as usize);
            assert_eq!(
                checksum(icmp, pseudo(src, dst, 58, icmp.len())),
                0,
                "ICMPv6 checksum"
            );
            assert_eq!(icmp[0], 2, "packet too big");
            let mtu = u32::from_be_bytes([icmp[4], icmp[5], icmp[6], icmp[7]]);
            assert_eq!(mtu, 1400 - 40, "room inside the tunnel");
            assert_eq!(
                &icmp[8 + 8..8 + 24],
                &h[24..40],
                "quotes the client's packet (its source)"
            );
        } else {
            let h = &out[l3..];
            assert_eq!(checksum(&h[..20], 0), 0, "IPv4 header checksum");
            assert_eq!(h[9], 1);
            assert_eq!(&h[12..16], &[10, 200, 100, 1], "from the VIP");
            assert_eq!(&h[16..20], &[10, 200, 0, 2], "to the client");
            let icmp = &h[20..];
            assert_eq!(icmp.len(), 8 + 20 + 8, "quotes the IP header and 8 bytes");
            assert_eq!(checksum(icmp, 0), 0, "ICMP checksum");
            assert_eq!((icmp[0], icmp[1]), (3, 4), "fragmentation needed");
            assert_eq!(
                u16::from_be_bytes([icmp[6], icmp[7]]),
                1300 - 20,
                "next-hop MTU"
            );
            let q = &icmp[8..];
            assert_eq!(&q[12..16], &[10, 200, 0, 2], "quoted source: the client");
            assert_eq!(
                u16::from_be_bytes([q[22], q[23]]),
                80,
                "quoted destination port"
            );
        }
    }
    let (verdict, out) = &results[4];
    assert_eq!(*verdict, XDP_PASS, "IPv4 without DF: to the kernel");
    let (_, _, dst, _, _) = decap(out, false);
    assert_eq!(dst, ip("10.200.1.11"));
    let events = r.dataplane.drop_counters().unwrap();
    assert_eq!(events[abi::drop_reason::TOO_BIG_ICMP as usize], 2);
    assert_eq!(
        events[abi::drop_reason::PASS_TOO_BIG_FRAGMENTED as usize],
        1
    );
}

#[test]
fn dsr_configs_are_validated() {
    let mut r = rig("dsrval");
    let mut no_mac = vip(
        "d",
        "10.200.100.1",
        80,
        proto::TCP,
        vec![backend("10.200.1.11", 80, 1)],
    );
    no_mac.mode = Mode::Dsr;
    let e = r
        .dataplane
        .apply(std::slice::from_ref(&no_mac))
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs a mac"), "{e}");
    let mut other_port = vip(
        "d",
        "10.200.100.1",
        80,
        proto::TCP,
        vec![backend("10.200.1.11", 8080, 1)],
    );
    other_port.mode = Mode::DsrIpip;
    other_port.backends[0].mac = BACKEND_MAC;
    let e = r.dataplane.apply(&[other_port]).unwrap_err().to_string();
    assert!(e.contains("must use the VIP's port"), "{e}");
    let mut ipip = vip(
        "d",
        "10.200.100.1",
        80,
        proto::TCP,
        vec![backend("10.200.1.11", 80, 1)],
    );
    ipip.mode = Mode::DsrIpip;
    let e = r.dataplane.apply(&[ipip]).unwrap_err().to_string();
    assert!(e.contains("tunnelSource"), "{e}");
}

/// Fragments in DSR mode: the first fragment picks the backend, the later
/// ones (no ports) follow it to the same MAC; a later fragment without its
/// first is passed, not guessed.
#[test]
fn dsr_fragments_follow_their_first() {
    let mut r = dsr_rig("dsrfrag", Mode::Dsr);
    let (c, v) = (ip("10.200.0.2"), ip("10.200.100.1"));
    let l4 = tcp(c, v, 40000, 80, 0x18, &[0x42; 2000]);
    let mut a = ipv4(c, v, TCP, 77, true, 0, &[], 1480);
    a.extend_from_slice(&l4[..1480]);
    let mut b = ipv4(c, v, TCP, 77, false, 185, &[], l4.len() - 1480);
    b.extend_from_slice(&l4[1480..]);
    let (first, later) = (eth(0x0800, &[], &a), eth(0x0800, &[], &b));
    let mut orphan = later.clone();
    orphan[14 + 4] = 0x99; // another datagram id
    orphan[14 + 10] = 0;
    orphan[14 + 11] = 0;
    let c_sum = checksum(&orphan[14..34], 0);
    orphan[24..26].copy_from_slice(&c_sum.to_be_bytes());
    let (v0, o0) = r.datapath.run_xdp(&orphan).unwrap();
    assert_eq!(
        (v0, &o0),
        (XDP_PASS, &orphan),
        "a later fragment without its first is passed untouched"
    );
    for (name, f) in [("first", &first), ("later", &later)] {
        let (verdict, out) = r.datapath.run_xdp(f).unwrap();
        assert_eq!(verdict, XDP_TX, "{name} fragment");
        assert_eq!(
            &out[0..6],
            &BACKEND_MAC,
            "{name} fragment to the backend's MAC"
        );
        assert_eq!(&out[12..], &f[12..], "{name} fragment unchanged");
    }
    let events = r.dataplane.drop_counters().unwrap();
    assert_eq!(events[abi::drop_reason::PASS_FRAG_UNMATCHED as usize], 1);
}

/// L3 DSR routes a backend's outer packets from a per-backend next-hop
/// cache for one tick (jiffies-based, at most about a second) instead of a
/// FIB lookup per packet: a route removed within the tick still gets the
/// cached next hop; from the next tick on the FIB is asked again (here: no
/// route, so the kernel fallback).
#[test]
fn l3_dsr_caches_the_next_hop_for_a_tick() {
    let ns = rivora_lab::Netns::new("dsrnh").unwrap();
    ns.sysctl("net.ipv4.ip_forward", "1").unwrap();
    for cmd in [
        "ip link add up0 type veth peer name up1",
        "ip link set up0 up",
        "ip link set up1 up",
        "ip addr add 10.200.9.1/24 dev up0",
        "ip neigh add 10.200.9.2 lladdr 02:99:00:00:00:02 dev up0 nud permanent",
    ] {
        ns.run(&cmd.split(' ').collect::<Vec<_>>()).unwrap();
    }
    let route = ["10.200.1.0/24", "via", "10.200.9.2", "dev", "up0"];
    let out = ns.run(&["ip", "-o", "link", "show", "up1"]).unwrap();
    let up1: u32 = out.split(':').next().unwrap().trim().parse().unwrap();
    let mut r = dsr_rig("dsrnh", Mode::DsrIpip);
    let frame = request(false, &[], true, 100);

    let (within, after) = ns
        .within(|| {
            pin_to_cpu0();
            // Route, warm the cache, remove the route, send again: both in
            // one tick. The tick is in jiffies, which user space cannot
            // read, so a boundary between the two (a few ms apart in a tick
            // of 0.1-1.3 s) shows as a fallback verdict: tried again then.
            for _ in 0..5 {
                let mut add = vec!["ip", "route", "replace"];
                add.extend(route);
                ns.run(&add).unwrap();
                let (v1, _) = r.datapath.run_xdp_on(&frame, up1).unwrap();
                let mut del = vec!["ip", "route", "del"];
                del.extend(route);
                ns.run(&del).unwrap();
                let (v2, out2) = r.datapath.run_xdp_on(&frame, up1).unwrap();
                assert_eq!(v1, XDP_REDIRECT, "routed by the FIB");
                if v2 != XDP_REDIRECT {
                    continue;
                }
                // A later tick: the cache is stale, the FIB has no route.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                loop {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    let (v3, _) = r.datapath.run_xdp_on(&frame, up1).unwrap();
                    if v3 != XDP_REDIRECT {
                        return ((v2, out2), v3);
                    }
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the cached next hop still used after 10 s"
                    );
                }
            }
            panic!("the removed route's next hop never came from the cache in five tries");
        })
        .unwrap();
    assert_eq!(within.0, XDP_REDIRECT, "the same tick: the cached next hop");
    assert_eq!(
        &within.1[0..6],
        &[0x02, 0x99, 0, 0, 0, 0x02],
        "to the cached next hop's MAC"
    );
    assert_eq!(
        after, XDP_PASS,
        "next tick: asked the FIB again, which has no route"
    );
}
