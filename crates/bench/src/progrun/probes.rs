//! Part 1's probe rows: the cost of single map operations (hash and LRU
//! lookups and inserts) measured with the bench's probe programs, less the
//! parse-only probe. Separate because they time bench programs rather than
//! the dataplane's, and only price the operations the notes explain rows
//! with.

use anyhow::{Context, Result, ensure};
use aya::maps::MapData;

use super::harness::{CLIENT4, Hook, PROBES, Rig, Slot, VIP4, Vary, XDP_TX};
use crate::frames::{self, FrameSpec};
use crate::report::Row;
use crate::stats::fmt_count;

/// `struct bench_probe_key` (the layout of rv_flow4).
#[repr(C)]
#[derive(Clone, Copy)]
struct ProbeKey {
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    proto: u8,
    pad: [u8; 3],
}
// SAFETY: plain old data without implicit padding.
unsafe impl aya::Pod for ProbeKey {}

/// `struct bench_probe_value`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ProbeValue {
    a: u32,
    b: u32,
}
// SAFETY: plain old data.
unsafe impl aya::Pod for ProbeValue {}

/// Costs of single map operations, measured with the probe programs: each
/// probe parses the frame, builds a 16-byte flow key and does one
/// operation; the parse-only probe is subtracted. Returns the rows and the
/// five costs (hash lookup, LRU lookup, hash insert, LRU insert, per-CPU
/// LRU insert).
pub(super) fn probe_rows(rig: &mut Rig) -> Result<(Vec<Row>, Vec<f64>)> {
    let opts = rig.opts;
    let frame = frames::build(&FrameSpec::tcp(CLIENT4, 40000, VIP4, 80));
    let key = ProbeKey {
        src: CLIENT4.parse::<std::net::Ipv4Addr>()?.octets(),
        dst: VIP4.parse::<std::net::Ipv4Addr>()?.octets(),
        sport: 40000u16.to_be(),
        dport: 80u16.to_be(),
        proto: 6,
        pad: [0; 3],
    };
    for map in ["bench_probe_hash", "bench_probe_lru"] {
        let mut m: aya::maps::HashMap<&mut MapData, ProbeKey, ProbeValue> = rig
            .bench_xdp
            .map_mut(map)
            .context("probe map")?
            .try_into()?;
        m.insert(key, ProbeValue { a: 1, b: 2 }, 0)?;
    }
    let parse = rig.timed(Hook::Xdp, &frame, Vary::No, Slot::Probe(0), opts.repeat)?;
    ensure!(
        parse.retval == XDP_TX,
        "parse probe returned {}",
        parse.retval
    );
    let mut rows = vec![
        Row::info(
            "Probe: parse + build a 16-byte flow key (subtracted below)",
            format!("{:.1} ns", parse.net_ns),
        )
        .evidence(format!(
            "bench_probe_parse; runs' middle half {:.0}-{:.0} ns (0 within the noise)",
            parse.iqr.0, parse.iqr.1
        )),
    ];
    let new_frame = frames::build(&FrameSpec::tcp("10.160.0.1", 40000, VIP4, 80).syn());
    let specs: [(usize, &str, bool, Option<&str>); 5] = [
        (
            1,
            "Probe: one hash-map lookup, hit (BPF_MAP_TYPE_HASH)",
            false,
            None,
        ),
        (
            2,
            "Probe: one LRU-map lookup, hit (LRU_HASH, like the affinity/NAT tables)",
            false,
            None,
        ),
        (
            3,
            "Probe: one hash-map insert of a new flow (HASH, preallocated)",
            true,
            Some("bench_probe_hash"),
        ),
        (
            4,
            "Probe: one LRU-map insert of a new flow (LRU_HASH, common LRU list)",
            true,
            Some("bench_probe_lru"),
        ),
        (
            5,
            "Probe: one LRU-map insert of a new flow (LRU_HASH, BPF_F_NO_COMMON_LRU)",
            true,
            Some("bench_probe_lru_pcpu"),
        ),
    ];
    let mut costs = Vec::new();
    for (idx, label, insert, map) in specs {
        let (f, rep, vary) = if insert {
            (&new_frame, opts.repeat_new, Vary::New)
        } else {
            (&frame, opts.repeat, Vary::No)
        };
        let t = rig.timed(Hook::Xdp, f, vary, Slot::Probe(idx), rep)?;
        ensure!(t.retval == XDP_TX, "{} returned {}", PROBES[idx], t.retval);
        let mut ev = format!(
            "{} (every iteration {}), minus the parse probe; runs' middle half {:.0}-{:.0} ns",
            PROBES[idx],
            if insert { "a new key" } else { "the same key" },
            t.iqr.0,
            t.iqr.1
        );
        if let Some(map) = map {
            let m: aya::maps::HashMap<&MapData, ProbeKey, ProbeValue> =
                rig.bench_xdp.map(map).context("probe map")?.try_into()?;
            ev.push_str(&format!(
                "; map holds {} entries after",
                fmt_count(m.keys().count() as f64)
            ));
        }
        costs.push(t.net_ns - parse.net_ns);
        rows.push(Row::info(label, format!("{:.1} ns", t.net_ns - parse.net_ns)).evidence(ev));
    }
    Ok((rows, costs))
}
