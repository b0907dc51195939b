//! Packet tests of the flow filter (bpf/flow_filter.h, flow_filter.rs): the
//! datapath sets the bit of every affinity entry it makes, at the place the
//! control plane's copy of the hash computes (so a rebuild and the datapath
//! agree); a clear bit in an exact filter really makes a SYN skip the
//! lookup; a rebuild keeps the bit of every entry the tables hold, also
//! while the datapath keeps making and evicting entries, and drops the bits
//! of entries that are gone. Frames go through the real programs
//! (BPF_PROG_TEST_RUN) over maps written by the real map writer; emitted
//! frames are checked by an independent parser.

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use aya::maps::{Array, Map, MapData};
use common::raw::{TCP, UDP, frame, tcp};
use common::*;
use rivora_abi as abi;
use rivora_dataplane::{BackendKey, Datapath, LoadOptions, LoadOutcome, proto};

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn addrs(v6: bool) -> (IpAddr, IpAddr) {
    if v6 {
        (ip("fd00:230::2"), ip("fd00:230:100::1"))
    } else {
        (ip("10.230.0.2"), ip("10.230.100.1"))
    }
}

fn backends(v6: bool) -> Vec<rivora_dataplane::BackendSpec> {
    (11..14)
        .map(|i| {
            if v6 {
                backend(&format!("fd00:230:1::{i}"), 8080, 1)
            } else {
                backend(&format!("10.230.1.{i}"), 8080, 1)
            }
        })
        .collect()
}

/// One segment or datagram to `vip:80` (common::send_flow).
fn send(r: &mut Rig, client: IpAddr, sport: u16, vip: IpAddr, l4: u8, flags: u8) -> BackendKey {
    send_flow(r, client, sport, vip, 80, l4, flags)
}

/// The flow hash of the affinity key of `client:sport -> vip:80`, built
/// here from the addresses (not read back from the map).
fn hash(client: IpAddr, sport: u16, vip: IpAddr, l4: u8) -> u32 {
    match (client, vip) {
        (IpAddr::V4(c), IpAddr::V4(v)) => abi::flow_filter_hash4(&abi::Flow4 {
            src: u32::from_ne_bytes(c.octets()),
            dst: u32::from_ne_bytes(v.octets()),
            sport: sport.to_be(),
            dport: 80u16.to_be(),
            proto: l4,
            pad: [0; 3],
        }),
        (IpAddr::V6(c), IpAddr::V6(v)) => abi::flow_filter_hash6(&abi::Flow6 {
            src: c.octets(),
            dst: v.octets(),
            sport: sport.to_be(),
            dport: 80u16.to_be(),
            proto: l4,
            pad: [0; 3],
        }),
        _ => unreachable!(),
    }
}

/// Where hash `h` lives in a half of `words` words (word, bit).
fn place(h: u32, words: u32) -> (u32, u32) {
    ((h >> 6) & (words - 1), h & 63)
}

/// Whether hash `h`'s bit is set in the filter's active half.
fn bit(r: &Rig, h: u32) -> bool {
    r.dataplane.maps().flow_filter.has(h).unwrap()
}

fn ctl_of(r: &Rig) -> abi::FlowFilterCtl {
    r.dataplane.maps().flow_filter.ctl().unwrap()
}

#[test]
fn the_datapath_sets_the_bit_of_every_entry_it_makes() {
    for v6 in [false, true] {
        let mut r = rig("ffbits");
        let (client, vip_addr) = addrs(v6);
        let vip_s = vip_addr.to_string();
        r.dataplane
            .apply(&[
                vip("tcp", &vip_s, 80, proto::TCP, backends(v6)),
                vip("udp", &vip_s, 80, proto::UDP, backends(v6)),
            ])
            .unwrap();
        let ctl = ctl_of(&r);
        assert_eq!(
            (ctl.words, ctl.exact),
            (
                rivora_dataplane::compat::flow_filter_words(abi::MAX_FLOWS),
                1
            ),
            "fresh maps: an empty filter, exact at once"
        );
        assert_eq!(r.dataplane.maps().flow_filter.ones(ctl.active), 0);

        // A SYN and a UDP flow's first datagram make no entry: no bit.
        for sport in 30000..30050u16 {
            send(&mut r, client, sport, vip_addr, TCP, SYN);
            send(&mut r, client, sport, vip_addr, UDP, 0);
        }
        assert_eq!(
            r.dataplane.maps().flow_filter.ones(ctl.active),
            0,
            "SYNs and first datagrams set bits"
        );
        // The handshake's ACK and a UDP flow's second datagram make the
        // entry and its bit, at the place the Rust hash computes.
        let mut places = BTreeSet::new();
        for sport in 30000..30050u16 {
            let a = send(&mut r, client, sport, vip_addr, TCP, ACK);
            let b = send(&mut r, client, sport, vip_addr, UDP, 0);
            assert_eq!(a, send(&mut r, client, sport, vip_addr, TCP, ACK));
            assert_eq!(b, send(&mut r, client, sport, vip_addr, UDP, 0));
            for l4 in [TCP, UDP] {
                let h = hash(client, sport, vip_addr, l4);
                assert!(
                    bit(&r, h),
                    "v6={v6}: the bit of {client}:{sport} proto {l4} is not set"
                );
                places.insert(place(h, ctl.words));
            }
        }
        assert_eq!(
            r.dataplane.maps().flow_filter.ones(ctl.active),
            places.len() as u64,
            "exactly the entries' bits are set"
        );
        // Both halves: the idle one may be under rebuild.
        assert_eq!(
            r.dataplane.maps().flow_filter.ones(1 - ctl.active),
            places.len() as u64
        );
        eprintln!("v6={v6}: 100 entries, {} bits in each half", places.len());
    }
}

#[test]
fn an_exact_filter_skips_the_lookup_and_a_rebuild_brings_the_entry_back() {
    let mut r = rig("ffskip");
    let (client, vip_addr) = addrs(false);
    let bs = backends(false);
    r.dataplane
        .apply(&[vip(
            "tcp",
            &vip_addr.to_string(),
            80,
            proto::TCP,
            bs.clone(),
        )])
        .unwrap();
    // A connection from a port whose SYN Maglev sends to bs[0].
    let sport = (40000..41000u16)
        .find(|p| send(&mut r, client, *p, vip_addr, TCP, SYN) == bs[0].key)
        .expect("some port hashes to the first backend");
    r.dataplane
        .set_backend_state(&bs[0].key, abi::backend_state::DRAINING)
        .unwrap();
    // An entry for that 5-tuple naming the draining backend, written as an
    // older program would have: the filter does not know it.
    let id = r
        .dataplane
        .backends()
        .find(|b| b.key == bs[0].key)
        .map(|b| (b.id, b.generation))
        .unwrap();
    let key = abi::Flow4 {
        src: match client {
            IpAddr::V4(a) => u32::from_ne_bytes(a.octets()),
            _ => unreachable!(),
        },
        dst: match vip_addr {
            IpAddr::V4(a) => u32::from_ne_bytes(a.octets()),
            _ => unreachable!(),
        },
        sport: sport.to_be(),
        dport: 80u16.to_be(),
        proto: proto::TCP,
        pad: [0; 3],
    };
    r.dataplane
        .maps_mut()
        .affinity
        .insert(
            key,
            abi::Affinity {
                backend_id: id.0,
                backend_generation: id.1,
                nat_checked: 0,
            },
            0,
        )
        .unwrap();
    assert!(!bit(&r, abi::flow_filter_hash4(&key)));

    // Exact filter, clear bit: the SYN does not look the entry up, so it
    // does not re-point it, and the ACK follows the stale entry to the
    // draining backend. (This is the state the filter must never be in;
    // it shows the filter is what decides.)
    let to = send(&mut r, client, sport, vip_addr, TCP, SYN);
    assert_ne!(to, bs[0].key, "a SYN went to a draining backend");
    assert_eq!(
        send(&mut r, client, sport, vip_addr, TCP, ACK),
        bs[0].key,
        "the SYN looked the entry up although the filter's bit is clear"
    );

    // A rebuild reads the entry from the table: the next SYN re-points it.
    let report = r.dataplane.rebuild_flow_filter().unwrap();
    assert_eq!(report.keys, 1);
    assert!(bit(&r, abi::flow_filter_hash4(&key)));
    let to = send(&mut r, client, sport, vip_addr, TCP, SYN);
    assert_ne!(to, bs[0].key);
    assert_eq!(
        send(&mut r, client, sport, vip_addr, TCP, ACK),
        to,
        "after the rebuild the SYN re-pointed the entry and the ACK follows it"
    );
}

#[test]
fn a_rebuild_drops_the_bits_of_gone_entries_and_switches_halves() {
    let mut r = rig("ffgone");
    let (client, vip_addr) = addrs(false);
    let bs = backends(false);
    let vip_s = vip_addr.to_string();
    r.dataplane
        .apply(&[vip("udp", &vip_s, 80, proto::UDP, bs.clone())])
        .unwrap();
    let mut flows = Vec::new();
    for sport in 50000..50300u16 {
        send(&mut r, client, sport, vip_addr, UDP, 0);
        let b = send(&mut r, client, sport, vip_addr, UDP, 0);
        flows.push((sport, b));
    }
    let before = ctl_of(&r);
    // bs[0] leaves the VIP: the writer deletes its UDP flows' entries.
    r.dataplane
        .apply(&[vip("udp", &vip_s, 80, proto::UDP, bs[1..].to_vec())])
        .unwrap();
    let (gone, live): (Vec<_>, Vec<_>) = flows.iter().partition(|(_, b)| *b == bs[0].key);
    assert!(
        gone.len() >= 50 && live.len() >= 100,
        "{} gone, {} live",
        gone.len(),
        live.len()
    );
    // Their bits are still set: entries leave without telling the filter.
    for (sport, _) in &gone {
        assert!(bit(&r, hash(client, *sport, vip_addr, UDP)));
    }
    let report = r.dataplane.rebuild_flow_filter().unwrap();
    let after = ctl_of(&r);
    assert_eq!(
        (after.active, after.exact),
        (1 - before.active, 1),
        "switched to the rebuilt half"
    );
    assert_eq!(report.keys, live.len() as u64);
    let live_places: BTreeSet<_> = live
        .iter()
        .map(|(p, _)| place(hash(client, *p, vip_addr, UDP), after.words))
        .collect();
    assert_eq!(report.ones, live_places.len() as u64);
    for (sport, _) in &live {
        assert!(bit(&r, hash(client, *sport, vip_addr, UDP)));
    }
    let mut cleared = 0;
    for (sport, _) in &gone {
        let h = hash(client, *sport, vip_addr, UDP);
        if !live_places.contains(&place(h, after.words)) {
            assert!(!bit(&r, h), "a gone flow's bit survived");
            cleared += 1;
        }
    }
    assert!(
        cleared >= gone.len() - 2,
        "{cleared} of {} cleared",
        gone.len()
    );
    // The live flows keep their backends, their entries found again.
    for (sport, b) in &live {
        assert_eq!(send(&mut r, client, *sport, vip_addr, UDP, 0), *b);
    }
    eprintln!(
        "{} live, {} gone ({cleared} bits cleared), rebuild {:?}",
        live.len(),
        gone.len(),
        report.took
    );
}

/// A rebuild races a second copy of the program (loaded over the same
/// pins, as a hot swap leaves for a moment) that keeps making entries until
/// the table is full and then evicting: after many rebuilds, every entry
/// the table holds has its bit in the active half.
#[test]
fn rebuilds_while_the_datapath_fills_and_evicts_lose_no_entry() {
    let mut r = rig("ffrace");
    let (_, vip_addr) = addrs(false);
    r.dataplane
        .apply(&[vip(
            "tcp",
            &vip_addr.to_string(),
            80,
            proto::TCP,
            backends(false),
        )])
        .unwrap();
    let (mut other, _maps, outcome) = Datapath::load(&LoadOptions {
        pin_dir: r.pin_dir.clone(),
        maglev_table_size: rivora_abi::MAGLEV_TABLE_DEFAULT,
        flow_table_size: abi::MAX_FLOWS,
        reset_incompatible: false,
        object_dir: None,
    })
    .unwrap();
    assert_eq!(outcome, LoadOutcome::Reused);
    let stop = AtomicBool::new(false);
    let total = 100_000u32;
    let mut rebuilds = 0;
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for i in 0..total {
                // One entry per client address (10.231.x.y), each an ACK.
                let client = IpAddr::V4(std::net::Ipv4Addr::from(0x0ae7_0000 + i));
                let seg = tcp(client, vip_addr, 40000, 80, ACK, b"x");
                let (v, _) = other
                    .run_xdp(&frame(client, vip_addr, TCP, &[], &seg))
                    .unwrap();
                assert_eq!(v, XDP_PASS);
            }
            stop.store(true, Ordering::SeqCst);
        });
        while !stop.load(Ordering::SeqCst) {
            r.dataplane.rebuild_flow_filter().unwrap();
            rebuilds += 1;
        }
        writer.join().unwrap();
    });
    assert!(
        rebuilds >= 3,
        "only {rebuilds} rebuilds ran during the writes"
    );
    // No rebuild after the writes: the half the last one made, plus what
    // the datapath set since, must hold every entry.
    let keys: Vec<abi::Flow4> = affinity_keys4(&r);
    assert!(
        keys.len() as u32 > abi::MAX_FLOWS * 9 / 10,
        "the table filled: {} entries",
        keys.len()
    );
    let missing = keys
        .iter()
        .filter(|k| !bit(&r, abi::flow_filter_hash4(k)))
        .count();
    assert_eq!(
        missing, 0,
        "entries without their bit after {rebuilds} rebuilds"
    );
    let ctl = ctl_of(&r);
    let ones = r.dataplane.maps().flow_filter.ones(ctl.active);
    assert!(
        ones <= u64::from(total),
        "{ones} bits for {total} entries made"
    );
    eprintln!(
        "{total} entries made ({} held at the end), {rebuilds} rebuilds meanwhile, 0 missing, {ones} bits",
        keys.len()
    );
    // The ctl map of the second load is the same pin.
    let ctl2: Array<MapData, abi::FlowFilterCtl> =
        Map::Array(MapData::from_pin(r.pin_dir.join("flow_filter_ctl_map")).unwrap())
            .try_into()
            .unwrap();
    assert_eq!(ctl2.get(&0, 0).unwrap(), ctl);
}
