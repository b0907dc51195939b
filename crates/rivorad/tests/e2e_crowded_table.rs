//! End-to-end: a Maglev table too small for its VIPs gets one warning per
//! apply, not one per VIP, naming the table size that fixes it; and the
//! "programmed:" line of many VIPs stays short (issue 14, item 6). The
//! table is made small (--maglev-table-size 1009) so 30 VIPs are enough:
//! half the table split 30 ways gives 13-slot slices, 7 and 6 slots for two
//! backends, 7.7% imbalance each.

mod common;

use common::*;

fn vips(n: u16) -> Vec<String> {
    (0..n)
        .map(|i| {
            vip_yaml(
                &format!("v{i}"),
                VIP4,
                2000 + i,
                "tcp",
                &backends_yaml(false, &[(1, 1), (2, 1)]),
            )
        })
        .collect()
}

fn warnings(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("Maglev:") && l.contains("worst imbalance above"))
        .collect()
}

#[test]
fn a_crowded_table_warns_once_per_apply_with_the_fix() {
    let mut lab = Lab::new("crowd");
    lab.write_config(&vips(30));
    lab.start(&["--maglev-table-size", "1009"]);

    let log = lab.log();
    let w = warnings(&log);
    assert_eq!(w.len(), 1, "one warning at start:\n{log}");
    assert!(
        w[0].contains("Maglev: 30 of 30 VIPs have a worst imbalance above 5%")
            && w[0].contains("the 1,009-slot table leaves them about 13 slots each")
            && w[0].contains("restart rivorad with --maglev-table-size 15061 (a prime)"),
        "{}",
        w[0]
    );
    let programmed = log
        .lines()
        .find(|l| l.contains("programmed:"))
        .expect("a programmed line");
    assert!(
        programmed.contains("and 20 more") && programmed.len() < 400,
        "{} characters: {programmed}",
        programmed.len()
    );
    let vips_now = lab.vips();
    assert_eq!(vips_now.len(), 30);
    assert!(
        vips_now.iter().all(|v| v.worst_imbalance_pct > 5.0),
        "{vips_now:?}"
    );

    // A reload that changes something warns once more; the count follows.
    let generation = lab.status().config_generation;
    lab.write_config(&vips(31));
    lab.wait_reload(generation, u64::MAX);
    let log = lab.log();
    let w = warnings(&log);
    assert_eq!(w.len(), 2, "one more warning for the reload:\n{log}");
    assert!(w[1].contains("Maglev: 31 of 31 VIPs"), "{}", w[1]);
    assert!(lab.stop());
}
