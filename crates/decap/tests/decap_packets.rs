//! rivora-decap's program in the real kernel (BPF_PROG_TEST_RUN): exact
//! output bytes for every tunnel kind, packets that must pass untouched,
//! malformed ones, VLAN tags, and the round trip through the balancer's own
//! xdp_ingress (encapsulated by the real dsr-ipip / dsr-gre path, then
//! decapsulated: the inner packet is the client's packet, byte for byte).

#[path = "../../dataplane/tests/common/raw.rs"]
mod raw;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use raw::*;
use rivora_abi as abi;
use rivora_decap::{Decap, KindCounters, XDP_PASS};

const GRE: u8 = 47;
const IPIP: u8 = 4;
const IPV6: u8 = 41;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A loaded decap program with its own pin directory, removed on drop.
struct Rig {
    decap: Decap,
    dir: PathBuf,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = rivora_decap::remove_pins(&self.dir);
    }
}

fn rig(test: &str) -> Rig {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "packet tests load BPF programs into the kernel and must run as root"
    );
    rivora_dataplane::ensure_bpffs(std::path::Path::new("/sys/fs/bpf")).expect("bpffs");
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = PathBuf::from(format!(
        "/sys/fs/bpf/rivora-decap-test-{test}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let mut decap = Decap::load(&dir).expect("load decap");
    decap
        .maps()
        .set_addresses(&[ip("10.200.1.11"), ip("fd00:200:1::11")])
        .unwrap();
    Rig { decap, dir }
}

impl Rig {
    fn counters(&mut self, kind: u32) -> KindCounters {
        self.decap.maps().counters().unwrap()[kind as usize]
    }
}

/// The client's packet (what the backend must receive): TCP, v4 or v6.
fn inner(v6: bool, payload: usize) -> Vec<u8> {
    let (c, v) = if v6 {
        (ip("fd00:200::2"), ip("fd00:200:100::1"))
    } else {
        (ip("10.200.0.2"), ip("10.200.100.1"))
    };
    let l4 = tcp(c, v, 40000, 80, 0x18, &vec![0x5a; payload]);
    let mut p = if v6 {
        ipv6(c, v, TCP, &[], l4.len())
    } else {
        ipv4(c, v, TCP, 9, false, 0, &[], l4.len())
    };
    p.extend_from_slice(&l4);
    p
}

fn ethertype(v6: bool) -> u16 {
    if v6 { 0x86dd } else { 0x0800 }
}

/// GRE header: flags (C, K, S as booleans), protocol, and the optional
/// fields in RFC order.
fn gre(csum: bool, key: Option<u32>, seq: Option<u32>, proto: u16) -> Vec<u8> {
    let mut flags = 0u16;
    if csum {
        flags |= 0x8000;
    }
    if key.is_some() {
        flags |= 0x2000;
    }
    if seq.is_some() {
        flags |= 0x1000;
    }
    let mut g = flags.to_be_bytes().to_vec();
    g.extend_from_slice(&proto.to_be_bytes());
    if csum {
        g.extend_from_slice(&[0, 0, 0, 0]); // not verified by the program
    }
    if let Some(k) = key {
        g.extend_from_slice(&k.to_be_bytes());
    }
    if let Some(s) = seq {
        g.extend_from_slice(&s.to_be_bytes());
    }
    g
}

/// An outer IPv4 packet from the balancer to `dst` carrying `payload`.
fn outer4(dst: &str, proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = ipv4(
        ip("10.200.9.1"),
        ip(dst),
        proto,
        0,
        false,
        0,
        &[],
        payload.len(),
    );
    p.extend_from_slice(payload);
    p
}

/// An outer IPv6 packet from the balancer to `dst` carrying `payload`.
fn outer6(dst: &str, next: u8, exts: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut p = ipv6(ip("fd00:200:9::1"), ip(dst), next, exts, payload.len());
    p.extend_from_slice(payload);
    p
}

#[test]
fn every_tunnel_kind_is_stripped_to_the_exact_inner_packet() {
    let mut r = rig("kinds");
    struct Case {
        name: &'static str,
        frame: Vec<u8>,
        inner: Vec<u8>,
        inner_v6: bool,
        kind: u32,
    }
    let (i4, i6) = (inner(false, 300), inner(true, 300));
    let with = |mut g: Vec<u8>, i: &[u8]| {
        g.extend_from_slice(i);
        g
    };
    let cases = vec![
        Case {
            name: "IPv4-in-IPv4",
            frame: eth(0x0800, &[], &outer4("10.200.1.11", IPIP, &i4)),
            inner: i4.clone(),
            inner_v6: false,
            kind: abi::decap::IPIP,
        },
        Case {
            name: "IPv6-in-IPv4",
            frame: eth(0x0800, &[], &outer4("10.200.1.11", IPV6, &i6)),
            inner: i6.clone(),
            inner_v6: true,
            kind: abi::decap::IPIP,
        },
        Case {
            name: "IPv6-in-IPv6",
            frame: eth(0x86dd, &[], &outer6("fd00:200:1::11", IPV6, &[], &i6)),
            inner: i6.clone(),
            inner_v6: true,
            kind: abi::decap::IP6TNL,
        },
        Case {
            name: "IPv4-in-IPv6",
            frame: eth(0x86dd, &[], &outer6("fd00:200:1::11", IPIP, &[], &i4)),
            inner: i4.clone(),
            inner_v6: false,
            kind: abi::decap::IP6TNL,
        },
        Case {
            name: "IPv6-in-IPv6 after a Destination Options header (encapsulation limit)",
            frame: eth(
                0x86dd,
                &[],
                &outer6("fd00:200:1::11", DSTOPTS, &[IPV6, 0, 4, 1, 4, 1, 1, 0], &i6),
            ),
            inner: i6.clone(),
            inner_v6: true,
            kind: abi::decap::IP6TNL,
        },
        Case {
            name: "GRE over IPv4, no optional fields",
            frame: eth(
                0x0800,
                &[],
                &outer4(
                    "10.200.1.11",
                    GRE,
                    &with(gre(false, None, None, 0x0800), &i4),
                ),
            ),
            inner: i4.clone(),
            inner_v6: false,
            kind: abi::decap::GRE,
        },
        Case {
            name: "GRE over IPv4 with a key",
            frame: eth(
                0x0800,
                &[],
                &outer4(
                    "10.200.1.11",
                    GRE,
                    &with(gre(false, Some(0xdeadbeef), None, 0x0800), &i4),
                ),
            ),
            inner: i4.clone(),
            inner_v6: false,
            kind: abi::decap::GRE,
        },
        Case {
            name: "GRE over IPv4 with checksum, key and sequence, carrying IPv6",
            frame: eth(
                0x0800,
                &[],
                &outer4(
                    "10.200.1.11",
                    GRE,
                    &with(gre(true, Some(7), Some(99), 0x86dd), &i6),
                ),
            ),
            inner: i6.clone(),
            inner_v6: true,
            kind: abi::decap::GRE,
        },
        Case {
            name: "GRE over IPv6 with a key",
            frame: eth(
                0x86dd,
                &[],
                &outer6(
                    "fd00:200:1::11",
                    GRE,
                    &[],
                    &with(gre(false, Some(1), None, 0x86dd), &i6),
                ),
            ),
            inner: i6.clone(),
            inner_v6: true,
            kind: abi::decap::GRE6,
        },
        Case {
            name: "GRE over IPv6 with sequence, carrying IPv4",
            frame: eth(
                0x86dd,
                &[],
                &outer6(
                    "fd00:200:1::11",
                    GRE,
                    &[],
                    &with(gre(false, None, Some(5), 0x0800), &i4),
                ),
            ),
            inner: i4.clone(),
            inner_v6: false,
            kind: abi::decap::GRE6,
        },
    ];
    let mut want = [0u64; 4];
    for c in &cases {
        let (verdict, out) = r.decap.run(&c.frame).unwrap();
        assert_eq!(verdict, XDP_PASS, "{}", c.name);
        let expected = eth(ethertype(c.inner_v6), &[], &c.inner);
        assert_eq!(out, expected, "{}: Ethernet header + inner packet", c.name);
        want[c.kind as usize] += 1;
    }
    for kind in 0..4 {
        let got = r.counters(kind);
        assert_eq!(got.decapsulated, want[kind as usize], "{got:?}");
        assert_eq!(
            (got.passed, got.malformed, got.fragments),
            (0, 0, 0),
            "{got:?}"
        );
    }
}

#[test]
fn vlan_tags_in_front_of_the_outer_header_are_kept() {
    let mut r = rig("vlan");
    let i4 = inner(false, 64);
    let i6 = inner(true, 64);
    for tags in [&[10u16][..], &[20, 30][..]] {
        let f = eth(0x0800, tags, &outer4("10.200.1.11", IPIP, &i4));
        let (verdict, out) = r.decap.run(&f).unwrap();
        assert_eq!(verdict, XDP_PASS);
        assert_eq!(out, eth(0x0800, tags, &i4), "tags {tags:?}");
        let f = eth(0x86dd, tags, &outer6("fd00:200:1::11", IPIP, &[], &i4));
        let (_, out) = r.decap.run(&f).unwrap();
        assert_eq!(
            out,
            eth(0x0800, tags, &i4),
            "tags {tags:?}: the innermost EtherType becomes the inner packet's"
        );
        let mut g = gre(false, Some(3), None, 0x86dd);
        g.extend_from_slice(&i6);
        let f = eth(0x0800, tags, &outer4("10.200.1.11", GRE, &g));
        let (_, out) = r.decap.run(&f).unwrap();
        assert_eq!(out, eth(0x86dd, tags, &i6), "tags {tags:?}, GRE");
    }
    assert_eq!(r.counters(abi::decap::IPIP).decapsulated, 2);
    assert_eq!(r.counters(abi::decap::IP6TNL).decapsulated, 2);
    assert_eq!(r.counters(abi::decap::GRE).decapsulated, 2);
}

#[test]
fn packets_not_for_a_listed_endpoint_pass_unchanged() {
    let mut r = rig("pass");
    let i4 = inner(false, 64);
    let i6 = inner(true, 64);
    let other_gre = {
        let mut g = gre(false, None, None, 0x6558); // transparent Ethernet bridging
        g.extend_from_slice(&[0u8; 64]);
        g
    };
    let frames = [
        // tunnels to another address (a kernel tunnel device's, say)
        eth(0x0800, &[], &outer4("10.200.1.12", IPIP, &i4)),
        eth(
            0x0800,
            &[],
            &outer4("10.200.1.12", GRE, &{
                let mut g = gre(false, Some(1), None, 0x0800);
                g.extend_from_slice(&i4);
                g
            }),
        ),
        eth(0x86dd, &[], &outer6("fd00:200:1::12", IPV6, &[], &i6)),
        eth(
            0x86dd,
            &[],
            &outer6("fd00:200:1::12", GRE, &[], &{
                let mut g = gre(false, None, None, 0x86dd);
                g.extend_from_slice(&i6);
                g
            }),
        ),
        // GRE to us carrying something other than IP
        eth(0x0800, &[], &outer4("10.200.1.11", GRE, &other_gre)),
        // not tunnels at all: plain TCP to us, ARP, a frame too short for IPv4
        eth(0x0800, &[], &{
            let l4 = tcp(ip("10.200.0.2"), ip("10.200.1.11"), 1, 2, 0x02, b"");
            let mut p = ipv4(
                ip("10.200.0.2"),
                ip("10.200.1.11"),
                TCP,
                1,
                false,
                0,
                &[],
                l4.len(),
            );
            p.extend_from_slice(&l4);
            p
        }),
        eth(0x0806, &[], &[0u8; 28]),
        eth(0x0800, &[], &[0x45, 0, 0]), // IPv4 EtherType, header cut short
    ];
    for (i, f) in frames.iter().enumerate() {
        let (verdict, out) = r.decap.run(f).unwrap();
        assert_eq!(verdict, XDP_PASS, "frame {i}");
        assert_eq!(&out, f, "frame {i} unchanged");
    }
    assert_eq!(r.counters(abi::decap::IPIP).passed, 1);
    assert_eq!(r.counters(abi::decap::GRE).passed, 2);
    assert_eq!(r.counters(abi::decap::IP6TNL).passed, 1);
    assert_eq!(r.counters(abi::decap::GRE6).passed, 1);
    for kind in 0..4 {
        let c = r.counters(kind);
        assert_eq!((c.decapsulated, c.malformed), (0, 0), "{c:?}");
    }
}

#[test]
fn malformed_and_fragmented_tunnel_packets_pass_unchanged_and_are_counted() {
    let mut r = rig("bad");
    let i4 = inner(false, 64);
    let i6 = inner(true, 64);
    let good = eth(0x0800, &[], &outer4("10.200.1.11", IPIP, &i4));
    let mut bad_csum = good.clone();
    bad_csum[14 + 10] ^= 0xff;
    let mut long_total = good.clone();
    {
        // total length beyond the frame, checksum made right again
        let h = &mut long_total[14..34];
        h[2..4].copy_from_slice(&2000u16.to_be_bytes());
        h[10] = 0;
        h[11] = 0;
        let c = checksum(h, 0);
        h[10..12].copy_from_slice(&c.to_be_bytes());
    }
    let truncated = good[..14 + 20 + 10].to_vec(); // inner header cut short
    let wrong_version = eth(0x0800, &[], &outer4("10.200.1.11", IPIP, &i6)); // says IPv4, is IPv6
    let gre_v1 = eth(
        0x0800,
        &[],
        &outer4("10.200.1.11", GRE, &{
            let mut g = gre(false, None, None, 0x0800);
            g[1] |= 1; // version 1 (PPTP)
            g.extend_from_slice(&i4);
            g
        }),
    );
    let gre_routing = eth(
        0x0800,
        &[],
        &outer4("10.200.1.11", GRE, &{
            let mut g = gre(false, None, None, 0x0800);
            g[0] |= 0x40; // routing present (RFC 1701)
            g.extend_from_slice(&i4);
            g
        }),
    );
    let gre_short = eth(
        0x86dd,
        &[],
        &outer6("fd00:200:1::11", GRE, &[], &[0x20, 0, 0x86, 0xdd, 0]),
    ); // key bit, no key
    let v6_short = {
        let mut f = eth(0x86dd, &[], &outer6("fd00:200:1::11", IPV6, &[], &i6));
        f.truncate(f.len() - 10); // payload length beyond the frame
        f
    };
    let malformed = [
        ("bad outer checksum", bad_csum, abi::decap::IPIP),
        (
            "total length beyond the frame",
            long_total,
            abi::decap::IPIP,
        ),
        ("truncated inner header", truncated, abi::decap::IPIP),
        (
            "inner not the announced version",
            wrong_version,
            abi::decap::IPIP,
        ),
        ("GRE version 1", gre_v1, abi::decap::GRE),
        ("GRE routing bit", gre_routing, abi::decap::GRE),
        ("GRE header cut short", gre_short, abi::decap::GRE6),
        (
            "IPv6 payload beyond the frame",
            v6_short,
            abi::decap::IP6TNL,
        ),
    ];
    let mut want = [0u64; 4];
    for (name, f, kind) in &malformed {
        let (verdict, out) = r.decap.run(f).unwrap();
        assert_eq!(verdict, XDP_PASS, "{name}");
        assert_eq!(&out, f, "{name}: unchanged");
        want[*kind as usize] += 1;
    }
    for kind in 0..4 {
        let c = r.counters(kind);
        assert_eq!(c.malformed, want[kind as usize], "{c:?}");
        assert_eq!(c.decapsulated, 0, "{c:?}");
    }

    // Outer fragments: passed for the kernel, counted apart.
    let mut first = ipv4(
        ip("10.200.9.1"),
        ip("10.200.1.11"),
        IPIP,
        5,
        true,
        0,
        &[],
        48,
    );
    first.extend_from_slice(&i4[..48]);
    let mut later = ipv4(
        ip("10.200.9.1"),
        ip("10.200.1.11"),
        IPIP,
        5,
        false,
        6,
        &[],
        i4.len() - 48,
    );
    later.extend_from_slice(&i4[48..]);
    let frag6 = eth(
        0x86dd,
        &[],
        &outer6(
            "fd00:200:1::11",
            FRAGMENT,
            &frag_ext(IPV6, 0, true, 77),
            &i6[..48],
        ),
    );
    for f in [eth(0x0800, &[], &first), eth(0x0800, &[], &later), frag6] {
        let (verdict, out) = r.decap.run(&f).unwrap();
        assert_eq!((verdict, &out), (XDP_PASS, &f));
    }
    assert_eq!(r.counters(abi::decap::IPIP).fragments, 2);
    assert_eq!(r.counters(abi::decap::IP6TNL).fragments, 1);
}

#[test]
fn the_endpoint_set_is_replaced_not_merged() {
    let mut r = rig("addrs");
    r.decap
        .maps()
        .set_addresses(&[ip("10.200.1.12"), ip("10.200.1.11")])
        .unwrap();
    r.decap.maps().set_addresses(&[ip("10.200.1.12")]).unwrap();
    assert_eq!(r.decap.maps().addresses().unwrap(), vec![ip("10.200.1.12")]);
    let i4 = inner(false, 10);
    let f = eth(0x0800, &[], &outer4("10.200.1.11", IPIP, &i4));
    let (_, out) = r.decap.run(&f).unwrap();
    assert_eq!(out, f, "10.200.1.11 is no longer an endpoint");
    let f = eth(0x0800, &[], &outer4("10.200.1.12", IPIP, &i4));
    let (_, out) = r.decap.run(&f).unwrap();
    assert_eq!(out, eth(0x0800, &[], &i4));
}

/// Round trip: the balancer's real xdp_ingress encapsulates the client's
/// packet for a dsr-ipip / dsr-gre VIP (v4 and v6, VLAN-tagged on the client
/// side), and the real decap program turns that frame back into the
/// client's IP packet, byte for byte.
#[test]
fn round_trip_through_the_balancers_encapsulation() {
    use rivora_dataplane::{BackendSpec, Datapath, Dataplane, LoadOptions, Mode, VipKey, VipSpec};
    let mut d = rig("rt");
    for (mode, name) in [(Mode::DsrIpip, "ipip"), (Mode::DsrGre, "gre")] {
        static N: AtomicU32 = AtomicU32::new(0);
        let lb_dir = PathBuf::from(format!(
            "/sys/fs/bpf/rivora-decap-test-lb-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        struct Pins(PathBuf);
        impl Drop for Pins {
            fn drop(&mut self) {
                let _ = rivora_dataplane::remove_pins(&self.0);
            }
        }
        let _pins = Pins(lb_dir.clone());
        let (mut datapath, maps, _) = Datapath::load(&LoadOptions {
            pin_dir: lb_dir.clone(),
            maglev_table_size: 65537,
            flow_table_size: rivora_abi::MAX_FLOWS,
            reset_incompatible: false,
            object_dir: None,
        })
        .expect("load balancer");
        let mut dp = Dataplane::new(maps);
        dp.set_interface([2, 0, 0, 0, 0, 0x1b], 1).unwrap();
        dp.set_tunnel_source(
            Some("10.200.9.1".parse().unwrap()),
            Some("fd00:200:9::1".parse().unwrap()),
        )
        .unwrap();
        let spec = |vip: &str, be: &str| {
            let mut v = VipSpec::new(
                name,
                VipKey::exact(vip.parse().unwrap(), 80, TCP),
                vec![BackendSpec::new(be.parse().unwrap(), 80)],
            );
            v.name = format!("{name}-{vip}");
            v.mode = mode;
            v
        };
        dp.apply(&[
            spec("10.200.100.1", "10.200.1.11"),
            spec("fd00:200:100::1", "fd00:200:1::11"),
        ])
        .unwrap();
        for v6 in [false, true] {
            for tags in [&[][..], &[42u16][..]] {
                let client_packet = inner(v6, 500);
                let f = eth(ethertype(v6), tags, &client_packet);
                let (verdict, encapsulated) = datapath.run_xdp(&f).unwrap();
                assert_eq!(
                    verdict, XDP_PASS,
                    "{name} v6 {v6}: encapsulated for the kernel"
                );
                assert_ne!(encapsulated, f);
                let (verdict, out) = d.decap.run(&encapsulated).unwrap();
                assert_eq!(verdict, XDP_PASS);
                assert_eq!(
                    &out[12..14],
                    &ethertype(v6).to_be_bytes(),
                    "{name} v6 {v6}: EtherType of the inner packet"
                );
                assert_eq!(
                    &out[14..],
                    &client_packet[..],
                    "{name} v6 {v6} tags {tags:?}: the client's packet, byte for byte"
                );
            }
        }
    }
    let c = d.decap.maps().counters().unwrap();
    assert_eq!(c[abi::decap::IPIP as usize].decapsulated, 2);
    assert_eq!(c[abi::decap::IP6TNL as usize].decapsulated, 2);
    assert_eq!(c[abi::decap::GRE as usize].decapsulated, 2);
    assert_eq!(c[abi::decap::GRE6 as usize].decapsulated, 2);
}

/// The map layouts the loaded program declares match the Rust mirror (the
/// BTF check in crates/abi covers the header; this covers the object).
#[test]
fn loaded_maps_have_the_mirrored_sizes() {
    let r = rig("sizes");
    let info = |name: &str| aya::maps::MapInfo::from_pin(r.dir.join(name)).unwrap();
    let a4 = info("decap_addr4");
    assert_eq!(
        a4.key_size() as usize,
        std::mem::size_of::<abi::DecapAddr4>()
    );
    assert_eq!(a4.max_entries(), abi::decap::MAX_ADDRS);
    let a6 = info("decap_addr6");
    assert_eq!(
        a6.key_size() as usize,
        std::mem::size_of::<abi::DecapAddr6>()
    );
    let st = info("decap_stats");
    assert_eq!(
        st.value_size() as usize,
        std::mem::size_of::<abi::DecapStats>()
    );
    assert_eq!(st.max_entries(), abi::decap::KIND_COUNT);
    let m = info("decap_meta");
    assert_eq!(
        m.value_size() as usize,
        std::mem::size_of::<abi::DecapMeta>()
    );
}
