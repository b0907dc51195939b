//! Behavioural properties of the Maglev tables: balance, weights, order
//! independence, disruption on backend changes, interleaving, stability.
//! Measured figures are printed with `eprintln!` (see them with
//! `cargo test -p rivora-maglev -- --nocapture`).

use std::time::Instant;

use rivora_maglev::{
    MaglevBackend, build, fit_slice_size, preferred_slice_size, preferred_slice_size_for,
    slot_counts, worst_imbalance,
};

/// Stable identity of test backend `i`, shaped like real keys.
fn key(i: usize) -> String {
    format!("10.{}.{}.{}:8080", (i >> 16) & 255, (i >> 8) & 255, i & 255)
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(key).collect()
}

fn backends<'a>(keys: &'a [String], weights: &[u32]) -> Vec<MaglevBackend<'a>> {
    keys.iter()
        .zip(weights)
        .map(|(k, &w)| MaglevBackend {
            key: k.as_bytes(),
            weight: w,
        })
        .collect()
}

fn equal(keys: &[String]) -> Vec<MaglevBackend<'_>> {
    backends(keys, &vec![1; keys.len()])
}

/// The table as backend keys, so tables built from different inputs can be
/// compared by identity rather than by index.
fn by_key<'a>(table: &[u32], bs: &[MaglevBackend<'a>]) -> Vec<&'a [u8]> {
    table.iter().map(|&i| bs[i as usize].key).collect()
}

/// Small deterministic PRNG (splitmix64) so tests need no dependencies and
/// are reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

#[test]
fn evenness_equal_weights() {
    for n in [3usize, 10, 100] {
        let ks = keys(n);
        let bs = equal(&ks);
        let size = preferred_slice_size_for(&bs);
        let table = build(&bs, size).unwrap();
        let imb = worst_imbalance(&table, &bs);
        let counts = slot_counts(&table, n);
        eprintln!(
            "evenness: n={n} size={size} slots/backend min={} max={} worst_imbalance={:.3}%",
            counts.iter().min().unwrap(),
            counts.iter().max().unwrap(),
            imb * 100.0
        );
        assert!(imb < 0.01, "n={n}: imbalance {imb}");
        // Equal weights: counts differ by at most one slot (classic Maglev).
        assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);

        let big = build(&bs, 65_537).unwrap();
        let imb_big = worst_imbalance(&big, &bs);
        eprintln!(
            "evenness: n={n} size=65537 worst_imbalance={:.4}%",
            imb_big * 100.0
        );
        assert!(imb_big < 0.001);
    }
}

fn shares(table: &[u32], n: usize) -> Vec<f64> {
    slot_counts(table, n)
        .iter()
        .map(|&c| c as f64 / table.len() as f64)
        .collect()
}

#[test]
fn weights_honoured() {
    for weights in [
        vec![1u32, 1, 2],
        vec![1, 2, 3, 4, 5],
        vec![10, 10, 20],
        vec![1, 100],
    ] {
        let ks = keys(weights.len());
        let bs = backends(&ks, &weights);
        let size = preferred_slice_size_for(&bs);
        let table = build(&bs, size).unwrap();
        let total: u32 = weights.iter().sum();
        let got = shares(&table, bs.len());
        let want: Vec<f64> = weights.iter().map(|&w| w as f64 / total as f64).collect();
        let worst_pp = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs())
            .fold(0.0, f64::max);
        let imb = worst_imbalance(&table, &bs);
        eprintln!(
            "weights {weights:?}: size={size} counts={:?} worst share error={:.3} pp worst_imbalance={:.3}%",
            slot_counts(&table, bs.len()),
            worst_pp * 100.0,
            imb * 100.0
        );
        assert!(worst_pp < 0.01, "{weights:?}: shares {got:?} vs {want:?}");
        assert!(imb < 0.01, "{weights:?}: imbalance {imb}");
    }
}

#[test]
fn weights_honoured_random_mixes() {
    let mut rng = Rng(7);
    let mut worst = 0.0f64;
    for round in 0..20 {
        let n = 2 + rng.below(60);
        let weights: Vec<u32> = (0..n).map(|_| 1 + rng.below(10) as u32).collect();
        let ks = keys(n);
        let bs = backends(&ks, &weights);
        let size = preferred_slice_size_for(&bs);
        let table = build(&bs, size).unwrap();
        let imb = worst_imbalance(&table, &bs);
        worst = worst.max(imb);
        assert!(
            imb < 0.01,
            "round {round}: n={n} size={size} imbalance {imb}"
        );
    }
    eprintln!(
        "random weight mixes (20 VIPs, 2..61 backends, weights 1..=10): worst_imbalance={:.3}%",
        worst * 100.0
    );
}

#[test]
fn order_independence() {
    let mut rng = Rng(42);
    for n in [2usize, 10, 100] {
        let ks = keys(n);
        let weights: Vec<u32> = (0..n).map(|i| 1 + (i % 4) as u32).collect();
        let bs = backends(&ks, &weights);
        let size = preferred_slice_size_for(&bs);
        let reference = by_key(&build(&bs, size).unwrap(), &bs);
        for _ in 0..5 {
            let mut shuffled = bs.clone();
            rng.shuffle(&mut shuffled);
            let t = build(&shuffled, size).unwrap();
            assert_eq!(by_key(&t, &shuffled), reference, "n={n}");
        }
        // Reversed input as well.
        let mut rev = bs.clone();
        rev.reverse();
        assert_eq!(by_key(&build(&rev, size).unwrap(), &rev), reference);
    }
}

/// Compares two tables by backend identity.
struct Diff {
    /// Slots of the backend that was removed (before) or added (after).
    changed_backend: usize,
    /// Slots whose owner changed between two backends present in both.
    collateral: usize,
}

fn diff(before: &[&[u8]], after: &[&[u8]], changed_key: &[u8]) -> Diff {
    let mut d = Diff {
        changed_backend: 0,
        collateral: 0,
    };
    for (b, a) in before.iter().zip(after) {
        if *b == changed_key || *a == changed_key {
            d.changed_backend += 1;
        } else if b != a {
            d.collateral += 1;
        }
    }
    d
}

/// Removing one of N backends.
///
/// The removed backend's slots (≈ 1/N) must all move. Maglev is not
/// perfectly minimal: when a backend disappears the remaining backends' turns
/// shift, so some of their slots change owner too; the paper accepts this in
/// exchange for balance and notes that disruption shrinks as the table grows
/// relative to N. Measured here: collateral of ~1.5-2.5% of the table at the
/// preferred size (~100 slots per backend) and ~0.3-0.6% at 65,537 slots. We
/// assert total moved <= 1/N + 3% at the preferred size and <= 1/N + 1% at
/// 65,537 slots, which leaves some margin over the measured worst case.
#[test]
fn disruption_remove_one() {
    for n in [10usize, 100] {
        let ks = keys(n);
        let bs = equal(&ks);
        let preferred = preferred_slice_size_for(&bs);
        for (size, slack) in [(preferred, 0.03), (65_537, 0.01)] {
            let before = build(&bs, size).unwrap();
            let before = by_key(&before, &bs);
            let mut worst_total = 0.0f64;
            let mut sum_collateral = 0.0f64;
            let victims: Vec<usize> = (0..n).step_by((n / 10).max(1)).collect();
            for &r in &victims {
                let rest: Vec<_> = bs
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != r)
                    .map(|(_, b)| *b)
                    .collect();
                let after = build(&rest, size).unwrap();
                let after = by_key(&after, &rest);
                let d = diff(&before, &after, bs[r].key);
                // Every slot of the removed backend moved (it no longer exists).
                assert!(after.iter().all(|k| *k != bs[r].key));
                let total = (d.changed_backend + d.collateral) as f64 / size as f64;
                worst_total = worst_total.max(total);
                sum_collateral += d.collateral as f64 / size as f64;
                assert!(
                    total <= 1.0 / n as f64 + slack,
                    "n={n} size={size} removed #{r}: moved {total:.4}"
                );
            }
            eprintln!(
                "remove 1 of {n} (size {size}): ideal 1/N={:.2}%, worst total moved={:.2}%, mean collateral (other backends' slots)={:.2}% of table over {} removals",
                100.0 / n as f64,
                worst_total * 100.0,
                sum_collateral / victims.len() as f64 * 100.0,
                victims.len()
            );
        }
    }
}

/// Adding a backend to N: the newcomer takes ≈ 1/(N+1) of the slots, and
/// only a little collateral shuffling happens among the others. Same bounds
/// as for removal (the two are the same change seen from either side).
#[test]
fn disruption_add_one() {
    for n in [10usize, 100] {
        let ks = keys(n + 1);
        let all = equal(&ks);
        let old = &all[..n];
        let newcomer = all[n].key;
        let preferred = preferred_slice_size(n as u32, n as u64, 1);
        for (size, slack) in [(preferred, 0.03), (65_537, 0.01)] {
            let before = by_key(&build(old, size).unwrap(), old);
            let after = by_key(&build(&all, size).unwrap(), &all);
            let d = diff(&before, &after, newcomer);
            let new_share = d.changed_backend as f64 / size as f64;
            let total = (d.changed_backend + d.collateral) as f64 / size as f64;
            eprintln!(
                "add 1 to {n} (size {size}): ideal 1/(N+1)={:.2}%, newcomer share={:.2}%, collateral={:.2}%, total moved={:.2}%",
                100.0 / (n + 1) as f64,
                new_share * 100.0,
                d.collateral as f64 / size as f64 * 100.0,
                total * 100.0
            );
            let ideal = 1.0 / (n + 1) as f64;
            assert!((new_share - ideal).abs() < 0.01 * ideal + 1.0 / size as f64);
            assert!(total <= ideal + slack, "n={n} size={size}: moved {total}");
        }
    }
}

/// Doubling one backend's weight moves slots towards it and little else.
#[test]
fn disruption_weight_change() {
    let n = 10;
    let ks = keys(n);
    let before_bs = equal(&ks);
    let mut w = vec![1u32; n];
    w[3] = 2;
    let after_bs = backends(&ks, &w);
    let size = preferred_slice_size_for(&after_bs);
    let before = by_key(&build(&before_bs, size).unwrap(), &before_bs);
    let after = by_key(&build(&after_bs, size).unwrap(), &after_bs);
    let changed = before.iter().zip(&after).filter(|(b, a)| b != a).count();
    let gained = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b != a && **a == ks[3].as_bytes())
        .count();
    let moved = changed as f64 / size as f64;
    // Ideal: backend 3 goes from 1/10 to 2/11 of the table, +8.18%.
    let ideal = 2.0 / 11.0 - 1.0 / 10.0;
    eprintln!(
        "weight 1->2 for one of 10 (size {size}): ideal move={:.2}%, moved={:.2}% (to the reweighted backend {:.2}%)",
        ideal * 100.0,
        moved * 100.0,
        gained as f64 / size as f64 * 100.0
    );
    assert!(moved <= ideal + 0.03);
}

/// The dataplane probes the next slots when a backend is unhealthy, so runs
/// of one backend in consecutive slots must be short: neighbouring slots
/// should look like independent draws (P(same) ≈ 1/N, P(4-slot window all
/// one backend) ≈ N^-3). Plain offset/skip Maglev fails this (runs of 20-80
/// slots for some skips); the slot scramble in `build` fixes it.
#[test]
fn interleaving() {
    for (n, size, max_run) in [
        (3usize, 307u32, 12),
        (10, 1009, 7),
        (10, 65_537, 9),
        (100, 10_007, 5),
    ] {
        let mut worst_run = 0;
        let mut worst_p_same = 0.0f64;
        let mut worst_window = 0.0f64;
        // Several unrelated key sets, since a bad skip is a property of a key.
        for set in 0..20 {
            let ks: Vec<String> = (0..n).map(|i| format!("set{set}/{}", key(i))).collect();
            let bs = equal(&ks);
            let t = build(&bs, size).unwrap();
            let m = t.len();
            let mut run = 1;
            for w in t.windows(2) {
                run = if w[0] == w[1] { run + 1 } else { 1 };
                worst_run = worst_run.max(run);
            }
            let same_next = (0..m).filter(|&s| t[s] == t[(s + 1) % m]).count();
            let window4 = (0..m)
                .filter(|&s| (1..4).all(|j| t[(s + j) % m] == t[s]))
                .count();
            worst_p_same = worst_p_same.max(same_next as f64 / m as f64);
            worst_window = worst_window.max(window4 as f64 / m as f64);
        }
        let iid_same = 1.0 / n as f64;
        let iid_window = iid_same.powi(3);
        eprintln!(
            "interleaving n={n} size={size} (20 key sets): worst P(next slot same backend)={:.2}% (iid {:.2}%), worst P(4-slot window one backend)={:.4}% (iid {:.4}%), longest run={worst_run}",
            worst_p_same * 100.0,
            iid_same * 100.0,
            worst_window * 100.0,
            iid_window * 100.0,
        );
        assert!(
            worst_p_same < 1.5 * iid_same + 0.01,
            "n={n}: {worst_p_same}"
        );
        assert!(
            worst_window < 4.0 * iid_window + 0.002,
            "n={n}: {worst_window}"
        );
        assert!(
            worst_run <= max_run,
            "n={n} size={size}: longest run {worst_run}"
        );
    }
}

/// Golden table: if this fails, the same backends now map to different slots
/// and an upgrade would move flows. Only update deliberately. (The values
/// were cross-checked against an independent straightforward re-implementation
/// of the algorithm when they were recorded.)
#[test]
fn golden_table() {
    let ks = [
        "10.0.0.1:8080",
        "10.0.0.2:8080",
        "10.0.0.3:8080",
        "[2001:db8::1]:443",
    ];
    let bs: Vec<_> = ks
        .iter()
        .zip([1u32, 1, 2, 3])
        .map(|(k, w)| MaglevBackend {
            key: k.as_bytes(),
            weight: w,
        })
        .collect();
    let t = build(&bs, 31).unwrap();
    eprintln!("golden table: {t:?}");
    assert_eq!(t, GOLDEN_31);
    // A checksum over a bigger table pins the weighted scheduling too.
    let t = build(&bs, 251).unwrap();
    let fnv = t.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &e| {
        (h ^ u64::from(e)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    eprintln!("golden table checksum (size 251): {fnv:#018x}");
    assert_eq!(fnv, GOLDEN_251_FNV);
}

const GOLDEN_31: [u32; 31] = [
    2, 1, 3, 2, 0, 3, 0, 2, 2, 2, 1, 3, 2, 3, 0, 3, 0, 3, 3, 3, 2, 3, 1, 3, 0, 2, 1, 2, 3, 3, 3,
];
const GOLDEN_251_FNV: u64 = 0xa65b_8a7a_c3da_9760;

/// Slices shrunk to fit a crowded shared table: report the imbalance the
/// caller would log.
#[test]
fn shrunk_slices_report_imbalance() {
    let ks = keys(10);
    let bs = equal(&ks);
    let preferred = preferred_slice_size_for(&bs);
    for available in [16u32, 64, 128, 512, 1009] {
        let size = fit_slice_size(preferred, 10, available).unwrap();
        let t = build(&bs, size).unwrap();
        eprintln!(
            "10 equal backends, {available} slots free -> size {size}: worst_imbalance={:.1}%",
            worst_imbalance(&t, &bs) * 100.0
        );
    }
    assert_eq!(fit_slice_size(preferred, 10, 10), None);
}

#[test]
fn build_time_1000_backends() {
    let ks = keys(1000);
    let weights: Vec<u32> = (0..1000).map(|i| 1 + (i % 3) as u32).collect();
    let bs = backends(&ks, &weights);
    for (label, bs) in [("equal", equal(&ks)), ("weights 1..=3", bs)] {
        let start = Instant::now();
        let t = build(&bs, 100_003).unwrap();
        let elapsed = start.elapsed();
        eprintln!(
            "build 1000 backends ({label}) x 100003 slots: {:.2} ms ({} build), worst_imbalance={:.3}%",
            elapsed.as_secs_f64() * 1e3,
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
            worst_imbalance(&t, &bs) * 100.0
        );
        assert_eq!(t.len(), 100_003);
        // Generous bound so unoptimised builds on slow CI pass too.
        assert!(elapsed.as_secs_f64() < 5.0);
    }
}
