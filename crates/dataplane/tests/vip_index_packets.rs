//! The VIP index (vip_index_map, vip_index_ctl_map) through the real
//! programs: every exact VIP is found in it, non-VIPs miss, colliding keys
//! share a probe chain, halves switch without losing a VIP, and whenever
//! the index is off (cleared, or a placement that does not fit) the program
//! falls back to vip_map and the port-range tries exactly as before.

mod common;

use std::net::IpAddr;

use common::*;
use rivora_abi as abi;
use rivora_dataplane::maps::{RangeData4, lpm_key4};
use rivora_dataplane::{VipKey, VipSpec, proto};

const CLIENT4: &str = "10.250.0.2";
const CLIENT6: &str = "fd00:250::2";
const BE4: &str = "10.251.0.1";
const BE6: &str = "fd00:251::1";

/// An exact NAT VIP on `addr:port/tcp` with one backend of its family.
fn exact(name: &str, addr: IpAddr, port: u16) -> VipSpec {
    let be = if addr.is_ipv4() { BE4 } else { BE6 };
    let mut v = vip(
        name,
        "0.0.0.0",
        port,
        proto::TCP,
        vec![backend(be, 8080, 1)],
    );
    v.key = VipKey::exact(addr, port, proto::TCP);
    v
}

fn v4(i: u32) -> IpAddr {
    std::net::Ipv4Addr::from(0x0a40_0000 + i).into()
}

fn v6(i: u32) -> IpAddr {
    std::net::Ipv6Addr::from(0xfd00_0064_0000_0000_0000_0000_0000_0000u128 + i as u128).into()
}

/// Sends a TCP packet to `dst:port`: Some(backend address) if it was NATed
/// (the VIP matched), None if it passed untouched.
fn send(r: &mut Rig, dst: IpAddr, port: u16, sport: u16) -> Option<IpAddr> {
    let client = if dst.is_ipv4() { CLIENT4 } else { CLIENT6 };
    let mut f = FrameSpec::new(client, sport, client, port, proto::TCP);
    f.dst = dst;
    let frame = f.build();
    let (verdict, out) = r.datapath.run_xdp(&frame).unwrap();
    assert_eq!(verdict, XDP_PASS, "to {dst}:{port}");
    if out == frame {
        return None;
    }
    let p = parse_checked(&out);
    assert_eq!(p.dport, 8080);
    Some(p.dst)
}

#[track_caller]
fn assert_matches(r: &mut Rig, specs: &[VipSpec]) {
    for (n, s) in specs.iter().enumerate() {
        let want: IpAddr = if s.key.addr.is_ipv4() { BE4 } else { BE6 }
            .parse()
            .unwrap();
        let got = send(r, s.key.addr, s.key.port, 10000 + (n % 50000) as u16);
        assert_eq!(got, Some(want), "VIP {} ({}) must match", s.name, s.key);
    }
}

#[track_caller]
fn assert_misses(r: &mut Rig, addr: IpAddr, port: u16) {
    assert_eq!(send(r, addr, port, 40000), None, "{addr}:{port} is no VIP");
}

fn ctl(r: &Rig) -> abi::VipIndexCtl {
    r.dataplane.maps().vip_index_ctl.get(&0, 0).unwrap()
}

fn home(addr: IpAddr, port: u16) -> u32 {
    let (a, v6) = match addr {
        IpAddr::V4(a) => {
            let mut b = [0; 16];
            b[..4].copy_from_slice(&a.octets());
            (b, false)
        }
        IpAddr::V6(a) => (a.octets(), true),
    };
    abi::vip_index_hash(&a, abi::be_port(port), proto::TCP, v6) & (abi::VIP_INDEX_SLOTS - 1)
}

/// `n` IPv4 addresses (port 80) sharing one home slot.
fn colliding(n: usize) -> Vec<IpAddr> {
    let want = home(v4(0), 80);
    (0..2_000_000)
        .map(v4)
        .filter(|a| home(*a, 80) == want)
        .take(n)
        .collect()
}

#[test]
fn capacity_of_exact_vips_all_match_and_others_miss() {
    let mut r = rig("vidxcap");
    // 4,096 exact VIPs (the capacity): three quarters IPv4, a quarter IPv6.
    let specs: Vec<VipSpec> = (0..abi::MAX_VIPS)
        .map(|i| {
            let a = if i % 4 == 3 { v6(i) } else { v4(i) };
            exact(&format!("v{i}"), a, 443)
        })
        .collect();
    r.dataplane.apply(&specs).unwrap();
    let st = r.dataplane.vip_index_status();
    assert!(st.complete, "{st:?}");
    assert_eq!(st.vips, abi::MAX_VIPS as usize);
    let c = ctl(&r);
    assert_eq!(c.flags, abi::vip_index_flags::COMPLETE, "no range VIPs");
    assert_matches(&mut r, &specs);
    for i in 0..2000 {
        // Same addresses on another port, and addresses beyond the VIPs.
        assert_misses(&mut r, v4(i), 444);
        assert_misses(&mut r, v4(abi::MAX_VIPS + i), 443);
        assert_misses(&mut r, v6(abi::MAX_VIPS + i), 443);
    }
    // The program reads the index, not vip_map: an entry removed from
    // vip_map behind the writer's back still matches while the index is on.
    let k = abi::VipKey4::new("10.64.0.0".parse().unwrap(), 443, proto::TCP);
    r.dataplane.maps_mut().vip_map.remove(&k).unwrap();
    assert!(send(&mut r, v4(0), 443, 1).is_some());
    // ... and stops matching once the index is off (vip_map is the truth).
    r.dataplane
        .maps_mut()
        .vip_index_ctl
        .set(0, abi::VipIndexCtl::default(), 0)
        .unwrap();
    assert_misses(&mut r, v4(0), 443);
    assert_matches(&mut r, &specs[1..200]);
}

#[test]
fn colliding_keys_resolve_and_a_removal_keeps_the_chain() {
    let mut r = rig("vidxcoll");
    let addrs = colliding(6);
    let specs: Vec<VipSpec> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| exact(&format!("c{i}"), *a, 80))
        .collect();
    r.dataplane.apply(&specs).unwrap();
    assert!(r.dataplane.vip_index_status().complete);
    assert_matches(&mut r, &specs);
    // Remove the first and a middle one of the chain: they stop matching,
    // their neighbours in the chain still match.
    let kept: Vec<VipSpec> = specs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 0 && *i != 3)
        .map(|(_, s)| s.clone())
        .collect();
    r.dataplane.apply(&kept).unwrap();
    assert!(r.dataplane.vip_index_status().complete);
    assert_misses(&mut r, addrs[0], 80);
    assert_misses(&mut r, addrs[3], 80);
    assert_matches(&mut r, &kept);
    // A key of the same home slot that is no VIP misses.
    let other = colliding(7)[6];
    assert_misses(&mut r, other, 80);
}

#[test]
fn a_chain_longer_than_the_window_turns_the_index_off_and_still_matches() {
    let mut r = rig("vidxfull");
    let n = abi::VIP_INDEX_PROBES as usize + 1;
    let addrs = colliding(n);
    let specs: Vec<VipSpec> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| exact(&format!("f{i}"), *a, 80))
        .collect();
    r.dataplane.apply(&specs[..n - 1]).unwrap();
    assert!(r.dataplane.vip_index_status().complete);
    assert_matches(&mut r, &specs[..n - 1]);
    // One more on the same home slot cannot be placed within the window.
    r.dataplane.apply(&specs).unwrap();
    let st = r.dataplane.vip_index_status();
    assert!(!st.complete, "{st:?}");
    assert_eq!(st.incomplete_builds, 1);
    assert_eq!(ctl(&r).flags, 0, "switched off");
    assert_matches(&mut r, &specs);
    assert_misses(&mut r, colliding(n + 1)[n], 80);
    // Back within the window: on again.
    r.dataplane.apply(&specs[1..]).unwrap();
    assert!(r.dataplane.vip_index_status().complete);
    assert_matches(&mut r, &specs[1..]);
    assert_misses(&mut r, addrs[0], 80);
}

#[test]
fn changing_the_set_switches_halves_and_never_loses_a_vip() {
    let mut r = rig("vidxflip");
    let all: Vec<VipSpec> = (0..300u32)
        .map(|i| {
            let a = if i % 2 == 0 { v4(i) } else { v6(i) };
            exact(&format!("s{i}"), a, 8000 + (i % 7) as u16)
        })
        .collect();
    let mut half = None;
    for round in 0..12usize {
        // A sliding window over the VIPs: each round adds some, drops some
        // and keeps most.
        let set: Vec<VipSpec> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| (i + round * 17) % 300 < 200)
            .map(|(_, s)| s.clone())
            .collect();
        r.dataplane.apply(&set).unwrap();
        let st = r.dataplane.vip_index_status();
        assert!(st.complete, "{st:?}");
        assert_eq!(st.vips, set.len());
        assert_ne!(Some(st.half), half, "a changed set switches halves");
        assert_eq!(ctl(&r).half, st.half);
        half = Some(st.half);
        assert_matches(&mut r, &set);
        for s in all.iter().filter(|s| !set.iter().any(|t| t.key == s.key)) {
            assert_misses(&mut r, s.key.addr, s.key.port);
        }
        // Applying the same set again writes nothing and keeps the half.
        r.dataplane.apply(&set).unwrap();
        assert_eq!(r.dataplane.vip_index_status().half, st.half);
    }
}

#[test]
fn a_cleared_ctl_falls_back_to_vip_map_and_the_tries() {
    let mut r = rig("vidxoff");
    let mut specs: Vec<VipSpec> = (0..50u32)
        .map(|i| exact(&format!("e{i}"), v4(i), 80))
        .collect();
    specs.push(exact("ipv6", v6(7), 80));
    r.dataplane.apply(&specs).unwrap();
    assert!(r.dataplane.vip_index_status().complete);
    // An incomplete index as an older writer or a fresh load leaves it.
    r.dataplane
        .maps_mut()
        .vip_index_ctl
        .set(0, abi::VipIndexCtl::default(), 0)
        .unwrap();
    assert_matches(&mut r, &specs);
    assert_misses(&mut r, v4(60), 80);
    assert_misses(&mut r, v6(8), 80);
    // Without the index the tries are consulted even though no range VIP
    // is configured: a prefix planted behind the writer's back matches.
    let sid = r.dataplane.vips().next().unwrap().service_id;
    plant_range(&mut r, "10.64.0.99", sid);
    assert!(send(&mut r, v4(99), 5555, 1).is_some());
    // With the index on and no IPv4 range VIP, the trie is skipped.
    r.dataplane
        .maps_mut()
        .vip_index_ctl
        .set(
            0,
            abi::VipIndexCtl {
                half: 0,
                flags: abi::vip_index_flags::COMPLETE,
            },
            0,
        )
        .unwrap();
    assert_misses(&mut r, v4(99), 5555);
    assert!(send(&mut r, v4(1), 80, 1).is_some());
}

/// Inserts a whole-address IPv4 prefix into vip_range_map directly.
fn plant_range(r: &mut Rig, addr: &str, service_id: u32) {
    let a: std::net::Ipv4Addr = addr.parse().unwrap();
    let k = abi::VipRangeKey4 {
        prefixlen: 8 + 32,
        proto: proto::TCP,
        addr: a.octets(),
        port: [0, 0],
        pad: 0,
    };
    let key: aya::maps::lpm_trie::Key<RangeData4> = lpm_key4(&k);
    r.dataplane
        .maps_mut()
        .vip_range_map
        .insert(&key, abi::VipValue { service_id }, 0)
        .unwrap();
}

#[test]
fn range_vips_set_their_family_flag_and_match() {
    let mut r = rig("vidxrange");
    let ex = exact("exact", v4(1), 8050);
    let ex6 = exact("exact6", v6(1), 80);
    let mut range = range_vip(
        "range",
        "10.64.0.1",
        8000,
        8099,
        proto::TCP,
        vec![backend(BE4, 8080, 1)],
    );
    range.name = "range".into();
    r.dataplane
        .apply(&[ex.clone(), ex6.clone(), range.clone()])
        .unwrap();
    let c = ctl(&r);
    assert_eq!(
        c.flags,
        abi::vip_index_flags::COMPLETE | abi::vip_index_flags::RANGES4
    );
    // The exact VIP inside the range, the range around it, the IPv6 VIP.
    assert_matches(&mut r, &[ex.clone(), ex6.clone()]);
    assert!(send(&mut r, v4(1), 8000, 1).is_some());
    assert!(send(&mut r, v4(1), 8099, 1).is_some());
    assert_misses(&mut r, v4(1), 8100);
    assert_misses(&mut r, v4(2), 8050);
    // An IPv6 range too; then the ranges go and so do the flags.
    let mut range6 = range_vip(
        "range6",
        "fd00:64::",
        9000,
        9001,
        proto::TCP,
        vec![backend(BE6, 8080, 1)],
    );
    range6.key.addr = v6(2);
    r.dataplane
        .apply(&[ex.clone(), ex6.clone(), range.clone(), range6])
        .unwrap();
    assert_eq!(
        ctl(&r).flags,
        abi::vip_index_flags::COMPLETE
            | abi::vip_index_flags::RANGES4
            | abi::vip_index_flags::RANGES6
    );
    assert!(send(&mut r, v6(2), 9001, 1).is_some());
    assert_misses(&mut r, v6(2), 9002);
    r.dataplane.apply(&[ex.clone(), ex6.clone()]).unwrap();
    assert_eq!(ctl(&r).flags, abi::vip_index_flags::COMPLETE);
    assert_misses(&mut r, v4(1), 8000);
    assert_misses(&mut r, v6(2), 9001);
    assert_matches(&mut r, &[ex, ex6]);
}

#[test]
fn a_restart_adopts_the_index_as_it_is() {
    let dir = pin_dir("vidxadopt");
    let specs: Vec<VipSpec> = (0..100u32)
        .map(|i| exact(&format!("a{i}"), v4(i), 80))
        .collect();
    let mut first = rig_at(&dir).0;
    first.dataplane.apply(&specs).unwrap();
    first.dataplane.apply(&specs[1..]).unwrap();
    first.dataplane.apply(&specs).unwrap();
    let before = (first.dataplane.vip_index_status(), ctl(&first));
    first.keep_pins = true;
    drop(first);
    let (mut second, _, report) = rig_at(&dir);
    assert!(report.dropped.is_empty(), "{report:?}");
    assert_eq!(
        (second.dataplane.vip_index_status(), ctl(&second)),
        before,
        "read back, nothing rebuilt"
    );
    assert_matches(&mut second, &specs);
    second.dataplane.apply(&specs).unwrap();
    assert_eq!(second.dataplane.vip_index_status(), before.0);
    assert_matches(&mut second, &specs);
}
