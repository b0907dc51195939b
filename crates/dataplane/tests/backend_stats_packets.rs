//! Per-backend counters (backend_stats_map) through the real program: every
//! frame xdp_ingress sends to a backend is counted for that backend, in
//! every mode, with its size as received and one new flow per flow; and a
//! backend ID handed to a new backend starts from zero. Which backend a
//! frame went to is read from the frame the program emitted (destination
//! address, MAC or outer header), not from the program's own maps.

mod common;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use common::*;
use rivora_dataplane::jiffies::Clock;
use rivora_dataplane::{BackendCounters, BackendKey, Mode, proto};

const VIP4: &str = "10.201.100.1";
const VIP6: &str = "fd00:201:100::1";
const XDP_TX: u32 = 3;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Backends with distinct MACs, so an L2 DSR frame names its backend (the
/// DSR modes keep the VIP's port, so each VIP has its own set).
fn backends(v6: bool, port: u16) -> Vec<rivora_dataplane::BackendSpec> {
    (0..3u8)
        .map(|i| {
            let addr = if v6 {
                format!("fd00:201:1::{}", 11 + i)
            } else {
                format!("10.201.1.{}", 11 + i)
            };
            let mut b = backend(&addr, port, 1 + u32::from(i));
            b.mac = [0x02, 0xbb, 0, 0, 0, 0x11 + i];
            b
        })
        .collect()
}

/// Expected counters of one backend, tallied from the emitted frames.
#[derive(Default, Debug, PartialEq, Eq)]
struct Tally {
    packets: u64,
    bytes: u64,
    new_flows: u64,
}

fn counters_by_key(r: &Rig) -> BTreeMap<BackendKey, BackendCounters> {
    r.dataplane
        .backend_counters()
        .unwrap()
        .into_iter()
        .map(|c| (c.key, c))
        .collect()
}

/// Which backend an emitted frame is for, by the mode's own addressing.
fn chosen(mode: Mode, out: &[u8], bs: &[rivora_dataplane::BackendSpec]) -> BackendKey {
    let found = match mode {
        Mode::Nat => {
            let p = parse_checked(out);
            bs.iter()
                .find(|b| b.key.addr == p.dst && b.key.port == p.dport)
        }
        Mode::Dsr => bs.iter().find(|b| out[0..6] == b.mac),
        // IPv4 outer header right after an untagged Ethernet header.
        Mode::DsrIpip | Mode::DsrGre => {
            let dst = Ipv4Addr::new(out[30], out[31], out[32], out[33]);
            bs.iter().find(|b| b.key.addr == IpAddr::V4(dst))
        }
    };
    found.expect("the frame is addressed to a backend").key
}

/// Sends `flows` flows of 1 to 4 frames each (sizes vary with the flow)
/// through `mode` and checks each backend's counters against the frames.
fn check_mode(mode: Mode, v6: bool, name: &str) {
    let mut r = rig(name);
    r.dataplane.set_interface(LB_MAC, 1).unwrap();
    r.dataplane
        .set_tunnel_source(
            Some("10.201.9.1".parse().unwrap()),
            Some("fd00:201:9::1".parse().unwrap()),
        )
        .unwrap();
    let (bs_tcp, bs_udp) = (backends(v6, 80), backends(v6, 53));
    let vip_addr = if v6 { VIP6 } else { VIP4 };
    let mut tcp = vip("t", vip_addr, 80, proto::TCP, bs_tcp.clone());
    let mut udp = vip("u", vip_addr, 53, proto::UDP, bs_udp.clone());
    tcp.mode = mode;
    udp.mode = mode;
    r.dataplane.apply(&[tcp, udp]).unwrap();
    assert!(
        counters_by_key(&r)
            .values()
            .all(|c| c.packets == 0 && c.bytes == 0 && c.new_flows == 0 && c.last_jiffies == 0),
        "new backends start at zero"
    );

    let mut want: BTreeMap<BackendKey, Tally> = BTreeMap::new();
    let flows = 120u16;
    let mut sent = 0u64;
    for i in 0..flows {
        let (port, p, bs) = if i % 2 == 0 {
            (80, proto::TCP, &bs_tcp)
        } else {
            (53, proto::UDP, &bs_udp)
        };
        let client = if v6 {
            format!("fd00:201::{:x}", 2 + i / 7)
        } else {
            format!("10.201.0.{}", 2 + i / 7)
        };
        let mut first = true;
        for k in 0..(1 + i % 4) {
            let mut f = FrameSpec::new(&client, 20000 + i, vip_addr, port, p);
            // A connection opens with its SYN, the new flow it counts.
            f.syn = first && p == proto::TCP;
            f.payload = vec![0x5a; 10 + usize::from(i % 13) * 37 + usize::from(k)];
            let frame = f.build();
            let (verdict, out) = r.datapath.run_xdp(&frame).unwrap();
            let want_verdict = match mode {
                Mode::Nat | Mode::DsrIpip | Mode::DsrGre => XDP_PASS,
                Mode::Dsr => XDP_TX,
            };
            assert_eq!(verdict, want_verdict, "{name} flow {i} frame {k}");
            let t = want.entry(chosen(mode, &out, bs)).or_default();
            t.packets += 1;
            t.bytes += frame.len() as u64;
            t.new_flows += u64::from(first);
            first = false;
            sent += 1;
        }
    }
    let got = counters_by_key(&r);
    assert!(want.len() > 1, "{name}: traffic reached several backends");
    for b in bs_tcp.iter().chain(&bs_udp) {
        let c = &got[&b.key];
        let w = want.remove(&b.key).unwrap_or_default();
        assert_eq!(
            (c.packets, c.bytes, c.new_flows),
            (w.packets, w.bytes, w.new_flows),
            "{name}: backend {} (id {})",
            b.key,
            c.id
        );
        if w.packets > 0 {
            assert_ne!(c.last_jiffies, 0, "{name}: {} has a last packet", b.key);
            let clock = Clock::read().expect("the kernel's jiffies are readable");
            let age = c.last_packet_age(&clock).expect("a packet was recorded");
            assert!(age < Duration::from_secs(60), "{name}: age {age:?}");
        } else {
            assert_eq!(c.last_jiffies, 0);
            assert_eq!(c.last_packet_age(&Clock::read().unwrap()), None);
        }
    }
    // The backends' sums are the VIPs' counters.
    let vips = r.dataplane.vip_counters().unwrap();
    let sum = |f: fn(&BackendCounters) -> u64| got.values().map(f).sum::<u64>();
    assert_eq!(sum(|c| c.packets), sent);
    assert_eq!(
        sum(|c| c.packets),
        vips.iter().map(|v| v.stats.packets).sum::<u64>()
    );
    assert_eq!(
        sum(|c| c.bytes),
        vips.iter().map(|v| v.stats.bytes).sum::<u64>()
    );
    assert_eq!(sum(|c| c.new_flows), u64::from(flows));
    eprintln!(
        "{name}: {sent} frames of {flows} flows; per backend (packets/bytes/new flows): {:?}",
        got.values()
            .map(|c| (c.key.to_string(), c.packets, c.bytes, c.new_flows))
            .collect::<Vec<_>>()
    );
}

#[test]
fn nat_frames_are_counted_per_backend() {
    check_mode(Mode::Nat, false, "bsnat4");
    check_mode(Mode::Nat, true, "bsnat6");
}

#[test]
fn dsr_frames_are_counted_per_backend() {
    check_mode(Mode::Dsr, false, "bsdsr");
}

#[test]
fn tunnelled_frames_are_counted_per_backend_as_received() {
    check_mode(Mode::DsrIpip, false, "bsipip");
    check_mode(Mode::DsrGre, false, "bsgre");
}

#[test]
fn a_reassigned_backend_id_starts_from_zero() {
    let mut r = rig("bsreuse");
    let old = backend("10.201.2.1", 8080, 1);
    let fresh = backend("10.201.2.2", 8080, 1);
    // Every other backend ID is taken, so the ID `old` gives up is the only
    // one `fresh` can get.
    let fillers: Vec<_> = (0..rivora_abi::MAX_BACKENDS - 1)
        .map(|i| {
            backend(
                &format!("10.{}.{}.{}", 210 + i / 65536, (i / 256) % 256, i % 256),
                9,
                1,
            )
        })
        .collect();
    let filler_vip = vip("fill", "10.201.100.9", 80, proto::TCP, fillers);
    r.dataplane
        .apply(&[
            vip("web", VIP4, 80, proto::TCP, vec![old.clone()]),
            filler_vip.clone(),
        ])
        .unwrap();
    let id_of =
        |r: &Rig, k: &BackendKey| r.dataplane.backends().find(|b| b.key == *k).map(|b| b.id);
    let old_id = id_of(&r, &old.key).unwrap();
    for i in 0..25u16 {
        let f = FrameSpec::new("10.201.0.2", 30000 + i, VIP4, 80, proto::TCP).build();
        assert_eq!(r.datapath.run_xdp(&f).unwrap().0, XDP_PASS);
    }
    assert_eq!(counters_by_key(&r)[&old.key].packets, 25);

    // `old` leaves (released at once: no retire grace), `fresh` comes.
    r.dataplane
        .apply(&[vip("web", VIP4, 80, proto::TCP, vec![]), filler_vip.clone()])
        .unwrap();
    assert_eq!(id_of(&r, &old.key), None, "old backend released");
    r.dataplane
        .apply(&[
            vip("web", VIP4, 80, proto::TCP, vec![fresh.clone()]),
            filler_vip,
        ])
        .unwrap();
    assert_eq!(id_of(&r, &fresh.key), Some(old_id), "the ID was reused");
    let c = &counters_by_key(&r)[&fresh.key];
    assert_eq!(
        (c.packets, c.bytes, c.new_flows, c.last_jiffies),
        (0, 0, 0, 0),
        "a reused ID starts from zero"
    );
    // From there on it counts its own traffic only.
    let mut bytes = 0;
    for i in 0..7u16 {
        let f = FrameSpec::new("10.201.0.3", 31000 + i, VIP4, 80, proto::TCP)
            .syn()
            .build();
        bytes += f.len() as u64;
        let (v, out) = r.datapath.run_xdp(&f).unwrap();
        assert_eq!(v, XDP_PASS);
        assert_eq!(parse_checked(&out).dst, ip("10.201.2.2"));
    }
    let c = &counters_by_key(&r)[&fresh.key];
    assert_eq!((c.packets, c.bytes, c.new_flows), (7, bytes, 7));
}

/// ABI 7 only added backend_stats_map: maps pinned by an ABI 6 rivorad (no
/// such map, version 6 in rivora_meta) are adopted as they are, with their
/// flows, and the new map is created empty.
#[test]
fn abi_6_maps_are_upgraded_in_place() {
    let dir = pin_dir("bsupgrade");
    let (mut r, _, _) = rig_at(&dir);
    let b = backends(false, 8080);
    r.dataplane
        .apply(&[vip("web", VIP4, 80, proto::TCP, b.clone())])
        .unwrap();
    let flow = FrameSpec::new("10.201.0.9", 40000, VIP4, 80, proto::TCP).build();
    let (_, out) = r.datapath.run_xdp(&flow).unwrap();
    let first = parse_checked(&out).dst;
    r.keep_pins = true;
    drop(r);

    // What an ABI 6 rivorad leaves behind.
    std::fs::remove_file(dir.join("backend_stats_map")).unwrap();
    {
        let data = aya::maps::MapData::from_pin(dir.join("rivora_meta")).unwrap();
        let mut meta: aya::maps::Array<_, rivora_abi::Meta> =
            aya::maps::Map::Array(data).try_into().unwrap();
        let mut m = meta.get(&0, 0).unwrap();
        m.abi_version = 6;
        meta.set(0, m, 0).unwrap();
    }
    assert_eq!(
        rivora_dataplane::compat::inspect(&dir, &rivora_dataplane::compat::TableSizes::defaults()),
        rivora_dataplane::compat::PinnedState::Upgradable(6)
    );
    let (mut r, outcome, report) = rig_at(&dir);
    assert_eq!(outcome, rivora_dataplane::LoadOutcome::Reused);
    assert_eq!((report.vips, report.backends), (1, 3));
    assert_eq!(
        rivora_dataplane::compat::read_meta(&dir)
            .unwrap()
            .abi_version,
        rivora_abi::ABI_VERSION
    );
    assert_eq!(
        rivora_dataplane::compat::inspect(&dir, &rivora_dataplane::compat::TableSizes::defaults()),
        rivora_dataplane::compat::PinnedState::Compatible
    );
    // The flow kept its backend (the affinity table was adopted) and is
    // counted from zero, as an established flow: no new flow.
    let (_, out) = r.datapath.run_xdp(&flow).unwrap();
    assert_eq!(parse_checked(&out).dst, first, "the flow kept its backend");
    let c = counters_by_key(&r);
    let mine: Vec<_> = c.values().filter(|c| c.packets > 0).collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].key.addr, first);
    assert_eq!(
        (mine[0].packets, mine[0].bytes, mine[0].new_flows),
        (1, flow.len() as u64, 0)
    );
    r.keep_pins = false;
}
