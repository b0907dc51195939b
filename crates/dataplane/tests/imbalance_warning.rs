//! The crowded-table warning against the real writer and maps: 4,000 VIPs
//! of 2 backends in a 65,537-slot table (the old default: half the table
//! split 4,000 ways gives 7-slot slices, 4 and 3 slots per backend, 14.3%
//! imbalance each) give one warning naming all of them and a table size; in
//! a table of that size, and in the default table, no VIP is over the
//! threshold. The apply report of that many VIPs stays one short line.

mod common;

use common::*;
use rivora_dataplane::imbalance::IMBALANCE_WARN_THRESHOLD;
use rivora_dataplane::{VipSpec, proto};

fn vips() -> Vec<VipSpec> {
    (0..4000u32)
        .map(|i| {
            let addr = format!("10.202.{}.{}", i / 250, i % 250 + 1);
            let backends = (1..=2)
                .map(|b| backend(&format!("10.203.0.{b}"), 8080, 1))
                .collect();
            vip(&format!("v{i}"), &addr, 80, proto::TCP, backends)
        })
        .collect()
}

#[test]
fn crowded_table_warns_once_with_a_table_size_that_fixes_it() {
    let mut r = rig_with_table("imbalance", 65537);
    let report = r.dataplane.apply(&vips()).unwrap();
    let line = report.to_string();
    assert!(
        line.starts_with("added v0,v1,v2,v3,v4,v5,v6,v7,v8,v9 and 3,990 more;"),
        "{line}"
    );
    assert!(line.len() < 200, "{} characters: {line}", line.len());

    let w = r
        .dataplane
        .imbalance_warning(IMBALANCE_WARN_THRESHOLD)
        .expect("a warning");
    eprintln!("{w}");
    assert_eq!((w.over, w.total), (4000, 4000), "{w}");
    assert_eq!(w.average_slots, 7, "{w}");
    assert!((w.worst.1 - 1.0 / 7.0).abs() < 1e-9, "{w}");
    let size = w.suggested_table_len.expect("a size");
    assert!(
        w.to_string()
            .contains(&format!("--maglev-table-size {size} (a prime)")),
        "{w}"
    );
    drop(r);

    // The suggested table, and the default one: every VIP gets its preferred slice, no
    // warning.
    for (tag, size) in [
        ("imbalance-big", size),
        ("imbalance-default", rivora_abi::MAGLEV_TABLE_DEFAULT),
    ] {
        preferred_everywhere(rig_with_table(tag, size));
    }
}

fn preferred_everywhere(mut big: Rig) {
    big.dataplane.apply(&vips()).unwrap();
    let worst = big
        .dataplane
        .vips()
        .map(|v| v.worst_imbalance)
        .fold(0.0, f64::max);
    let sizes: std::collections::BTreeSet<u32> =
        big.dataplane.vips().map(|v| v.slice.size).collect();
    let warning = big.dataplane.imbalance_warning(IMBALANCE_WARN_THRESHOLD);
    assert_eq!(warning, None, "worst {worst}");
    assert_eq!(
        sizes.into_iter().collect::<Vec<_>>(),
        [251],
        "preferred slices"
    );
    assert!(worst < 0.02, "{worst}");
}
