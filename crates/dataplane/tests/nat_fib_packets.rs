//! NAT VIPs with `natForwarding: fib` through the real program: the
//! rewritten packet is routed by xdp_ingress itself (bpf_fib_lookup in a
//! namespace with a real route and neighbour, XDP_REDIRECT), with the TTL /
//! hop limit lowered and the checksums right (checked by an independent
//! parser); everything the FIB cannot route goes to the kernel untouched
//! beyond the NAT rewrite, counted as `passed_nat_to_kernel`.

mod common;

use common::*;
use rivora_abi as abi;
use rivora_dataplane::proto;

const XDP_REDIRECT: u32 = 4;
const NEXT_HOP_MAC: [u8; 6] = rivora_lab::fib::BACKEND_HOP_MAC;

/// The FIB namespace of rivora_lab::fib (the backends 10.200.1.0/24 and
/// fd00:200:1::/64 via a next hop with a permanent neighbour entry), with
/// the ifindex of the interface the test frames claim to arrive on.
fn fib_ns(name: &str) -> (rivora_lab::Netns, u32) {
    let lab = rivora_lab::fib::FibLab::new(name).unwrap();
    (lab.ns, lab.ingress_ifindex)
}

/// A datapath with one fib-forwarded NAT VIP per family (TCP port 80 to
/// backend port 8080) and one kernel-forwarded NAT VIP (port 81).
fn fib_rig(name: &str) -> Rig {
    let mut r = rig(name);
    let mut v4 = vip(
        "f4",
        "10.200.100.1",
        80,
        proto::TCP,
        vec![backend("10.200.1.11", 8080, 1)],
    );
    let mut v6 = vip(
        "f6",
        "fd00:200:100::1",
        80,
        proto::TCP,
        vec![backend("fd00:200:1::11", 8080, 1)],
    );
    v4.nat_fib = true;
    v6.nat_fib = true;
    let k4 = vip(
        "k4",
        "10.200.100.1",
        81,
        proto::TCP,
        vec![backend("10.200.1.12", 8080, 1)],
    );
    r.dataplane.apply(&[v4, v6, k4]).unwrap();
    r
}

/// TTL (IPv4) or hop limit (IPv6) of an untagged frame.
fn ttl(frame: &[u8]) -> u8 {
    if frame[12..14] == [0x86, 0xdd] {
        frame[14 + 7]
    } else {
        frame[14 + 8]
    }
}

/// Sets the TTL / hop limit of an untagged frame (IPv4 header checksum
/// recomputed).
fn with_ttl(mut frame: Vec<u8>, value: u8) -> Vec<u8> {
    if frame[12..14] == [0x86, 0xdd] {
        frame[14 + 7] = value;
    } else {
        frame[14 + 8] = value;
        frame[24] = 0;
        frame[25] = 0;
        let c = common::raw::checksum(&frame[14..34], 0);
        frame[24..26].copy_from_slice(&c.to_be_bytes());
    }
    frame
}

#[test]
fn fib_forwarding_routes_the_rewritten_packet() {
    let (ns, up1) = fib_ns("natfib");
    let mut r = fib_rig("natfib");
    let cases = [
        ("10.200.0.2", "10.200.100.1", "10.200.1.11"),
        ("fd00:200::2", "fd00:200:100::1", "fd00:200:1::11"),
    ];
    let results = ns
        .within(|| {
            pin_to_cpu0();
            cases
                .iter()
                .map(|(client, vip, _)| {
                    let frame = FrameSpec::new(client, 40000, vip, 80, proto::TCP).build();
                    // The first packet asks the FIB (and fills the next-hop
                    // cache), the second takes the inlined cached path.
                    let first = r.datapath.run_xdp_on(&frame, up1).unwrap();
                    let second = r.datapath.run_xdp_on(&frame, up1).unwrap();
                    (frame, first, second)
                })
                .collect::<Vec<_>>()
        })
        .unwrap();
    for ((client, vip, backend), (frame, (verdict, out), second)) in cases.iter().zip(results) {
        assert_eq!(
            second,
            (verdict, out.clone()),
            "{vip}: the cached path forwards exactly like the FIB path"
        );
        assert_eq!(verdict, XDP_REDIRECT, "{vip}: routed by xdp_ingress itself");
        assert_eq!(out.len(), frame.len(), "{vip}: same size");
        let p = parse_checked(&out);
        assert_eq!(p.dst.to_string(), *backend, "{vip}: NATed to the backend");
        assert_eq!(p.dport, 8080);
        assert_eq!(p.src.to_string(), *client, "{vip}: client address kept");
        assert_eq!(p.sport, 40000);
        assert_eq!(ttl(&out), ttl(&frame) - 1, "{vip}: TTL lowered by one");
        assert_eq!(&out[0..6], &NEXT_HOP_MAC, "{vip}: to the next hop's MAC");
        // `ip -o link show up0`: "N: up0: <...> ... link/ether MAC brd ...".
        let link = ns.run(&["ip", "-o", "link", "show", "up0"]).unwrap();
        let up0_mac = link
            .split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .unwrap()
            .to_string();
        let src_mac: Vec<String> = out[6..12].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(src_mac.join(":"), up0_mac, "{vip}: from the egress MAC");
    }
    let events = r.dataplane.drop_counters().unwrap();
    assert_eq!(
        events[abi::drop_reason::PASS_NAT_TO_KERNEL as usize],
        0,
        "nothing went to the kernel"
    );
}

#[test]
fn fib_forwarding_leaves_to_the_kernel_what_it_cannot_route() {
    let (ns, up1) = fib_ns("natfibk");
    let mut r = fib_rig("natfibk");
    let plain = FrameSpec::new("10.200.0.2", 40001, "10.200.100.1", 80, proto::TCP).build();
    let tagged = FrameSpec::new("10.200.0.2", 40002, "10.200.100.1", 80, proto::TCP)
        .vlans(Vlans::One(100))
        .build();
    let kernel_vip = FrameSpec::new("10.200.0.2", 40003, "10.200.100.1", 81, proto::TCP).build();
    let (expiring4, expiring6) = (
        with_ttl(plain.clone(), 1),
        with_ttl(
            FrameSpec::new("fd00:200::2", 40004, "fd00:200:100::1", 80, proto::TCP).build(),
            1,
        ),
    );
    let warm6 = FrameSpec::new("fd00:200::2", 40004, "fd00:200:100::1", 80, proto::TCP).build();
    // Outside the namespace the FIB has no route to the backends (asked
    // before the next hop is cached: the cache is per backend, not per
    // namespace).
    let outside = r.datapath.run_xdp(&plain).unwrap();
    let in_ns = ns
        .within(|| {
            // Next hops cached first: the exceptions must leave the cached
            // path too, not only the FIB one.
            pin_to_cpu0();
            for warm in [&plain, &warm6] {
                let (v, _) = r.datapath.run_xdp_on(warm, up1).unwrap();
                assert_eq!(v, XDP_REDIRECT, "warm-up routed");
            }
            let in_ns: Vec<_> = [&expiring4, &expiring6, &tagged, &kernel_vip]
                .into_iter()
                .map(|f| r.datapath.run_xdp_on(f, up1).unwrap())
                .collect();
            in_ns
        })
        .unwrap();
    for ((verdict, out), (what, original)) in in_ns.iter().zip([
        ("IPv4 TTL 1", &expiring4),
        ("IPv6 hop limit 1", &expiring6),
        ("VLAN tagged", &tagged),
        ("natForwarding kernel VIP", &kernel_vip),
    ]) {
        assert_eq!(*verdict, XDP_PASS, "{what}: handed to the kernel");
        let p = parse_checked(out);
        assert!(
            p.dst.to_string().starts_with("10.200.1.")
                || p.dst.to_string().starts_with("fd00:200:1:"),
            "{what}: still NATed to a backend ({})",
            p.dst
        );
        assert_eq!(&out[..12], &original[..12], "{what}: MACs untouched");
        if original[12..14] != [0x81, 0x00] {
            assert_eq!(
                ttl(out),
                ttl(original),
                "{what}: the kernel lowers the TTL, not us"
            );
        }
    }
    let (verdict, out) = outside;
    assert_eq!(verdict, XDP_PASS, "no route: handed to the kernel");
    assert_eq!(ttl(&out), ttl(&plain), "TTL left to the kernel");
    let events = r.dataplane.drop_counters().unwrap();
    assert_eq!(
        events[abi::drop_reason::PASS_NAT_TO_KERNEL as usize],
        4,
        "TTL 1 twice, the tagged frame and the unrouted one: passed_nat_to_kernel"
    );
}
