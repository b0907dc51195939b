//! The Maglev table shared by many VIPs, against the real writer, maps and program: slices
//! follow each VIP's share of the table as VIPs come and go (the freeze: 300 Services
//! of 5 endpoints arriving one pass at a time in a 65,537-slot table, the first ones holding
//! 503-slot slices until the 180th did not fit and every later apply was refused), and in
//! refuse-alone mode (the Kubernetes source) a VIP that cannot be placed is refused alone while
//! every other change still reaches the datapath.

mod common;

use common::*;
use rivora_dataplane::{VipSpec, proto};

/// `n` VIPs of 5 backends each (backends shared by groups of VIPs, as Pods back Services).
fn vips(n: u32) -> Vec<VipSpec> {
    (0..n)
        .map(|i| {
            let addr = format!("10.210.{}.{}", i / 250, i % 250 + 1);
            let backends = (0..5)
                .map(|b| backend(&format!("10.211.{}.{}", i % 40, b + 1), 8080, 1))
                .collect();
            vip(&format!("svc-{i}"), &addr, 80, proto::TCP, backends)
        })
        .collect()
}

/// The sum of the programmed slices, and the largest.
fn slices(r: &Rig) -> (u64, u32) {
    r.dataplane.vips().fold((0, 0), |(sum, max), v| {
        (sum + u64::from(v.slice.size), max.max(v.slice.size))
    })
}

#[test]
fn vips_arriving_one_pass_at_a_time_share_the_table_instead_of_freezing_it() {
    for refuse_alone in [false, true] {
        let mut r = rig_with_table("share", 65537);
        r.dataplane.set_refuse_alone(refuse_alone);
        let all = vips(300);
        let mut resized = 0;
        for n in 1..=all.len() {
            let report = r
                .dataplane
                .apply(&all[..n])
                .unwrap_or_else(|e| panic!("apply of {n} VIPs (refuse alone {refuse_alone}): {e}"));
            assert!(report.refused.is_empty(), "{n}: {report}");
            resized += report.resized.len();
        }
        assert_eq!(r.dataplane.vips().count(), 300);
        let (sum, largest) = slices(&r);
        // Half the table is the slices' budget (a rebuilt slice needs room for its copy);
        // 300 VIPs of 5 backends ask for 503 each, 150,900 in all: each gets about 109.
        assert!(sum <= 65537, "{sum} slots in slices");
        assert!(
            largest <= 2 * 110,
            "largest slice {largest}: early VIPs gave room back"
        );
        assert!(resized > 0, "the first VIPs' slices were shrunk");
        let worst = r
            .dataplane
            .vips()
            .map(|v| v.worst_imbalance)
            .fold(0.0, f64::max);
        eprintln!(
            "refuse alone {refuse_alone}: 300 VIPs in 65,537 slots: {sum} in slices, largest \
             {largest}, {resized} resizes, worst imbalance {:.1}%",
            worst * 100.0
        );
        // Fewer VIPs again: the rest grow back towards their preferred 503 slots.
        r.dataplane.apply(&all[..50]).unwrap();
        let report = r.dataplane.apply(&all[..50]).unwrap();
        assert!(report.is_empty(), "settled: {report}");
        assert!(
            r.dataplane.vips().all(|v| v.slice.size >= 251),
            "grown back: {:?}",
            r.dataplane.vips().map(|v| v.slice.size).collect::<Vec<_>>()
        );
    }
}

#[test]
fn the_default_table_holds_every_vip_at_its_preferred_slice() {
    let mut r = rig("share-default");
    let all = vips(4096);
    let report = r.dataplane.apply(&all).unwrap();
    assert_eq!(report.added.len(), 4096);
    let sizes: std::collections::BTreeSet<u32> = r.dataplane.vips().map(|v| v.slice.size).collect();
    assert_eq!(
        sizes.into_iter().collect::<Vec<_>>(),
        [503],
        "preferred slices"
    );
}

/// A VIP with more members than the table has slots can never be placed: in refuse-alone mode
/// it is refused alone (named, with the reason), the others are programmed, and a later
/// backend change of another VIP reaches the datapath while the refusal stands. Strict mode
/// (the YAML file) refuses the whole apply, as before.
#[test]
fn a_vip_that_cannot_fit_is_refused_alone_and_other_changes_still_apply() {
    const TABLE: u32 = 1009;
    let web = |last: u8| {
        vip(
            "web",
            "10.212.0.1",
            80,
            proto::TCP,
            (1..=3)
                .map(|b| backend(&format!("10.213.0.{}", b + last), 8080, 1))
                .collect(),
        )
    };
    let huge = vip(
        "huge",
        "10.212.0.2",
        80,
        proto::TCP,
        (0..1100u32)
            .map(|b| backend(&format!("10.214.{}.{}", b / 200, b % 200 + 1), 8080, 1))
            .collect(),
    );

    let mut strict = rig_with_table("refuse-strict", TABLE);
    let err = strict
        .dataplane
        .apply(&[web(0), huge.clone()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("VIP huge") && err.contains("maglev_table"),
        "{err}"
    );
    assert_eq!(
        strict.dataplane.vips().count(),
        0,
        "strict: nothing applied"
    );
    drop(strict);

    let mut r = rig_with_table("refuse-alone", TABLE);
    r.dataplane.set_refuse_alone(true);
    let report = r.dataplane.apply(&[web(0), huge.clone()]).unwrap();
    assert_eq!(report.added, ["web"], "{report}");
    assert_eq!(report.refused.len(), 1, "{report}");
    assert_eq!(report.refused[0].name, "huge");
    assert!(
        report.refused[0]
            .reason
            .contains("needs at least 1100 contiguous free slots"),
        "{}",
        report.refused[0].reason
    );
    assert!(report.to_string().contains("refused huge"), "{report}");
    let picks = |r: &mut Rig| -> std::collections::BTreeSet<String> {
        (0..64u16)
            .map(|i| {
                let f = FrameSpec::new("10.215.0.9", 20000 + i, "10.212.0.1", 80, proto::TCP)
                    .syn()
                    .build();
                let (v, out) = r.datapath.run_xdp(&f).unwrap();
                assert_eq!(v, XDP_PASS);
                parse_checked(&out).dst.to_string()
            })
            .collect()
    };
    assert_eq!(
        picks(&mut r),
        ["10.213.0.1", "10.213.0.2", "10.213.0.3"]
            .map(String::from)
            .into(),
    );
    // web's endpoints change while huge stays refused: the change is programmed.
    let report = r.dataplane.apply(&[web(3), huge]).unwrap();
    assert_eq!(report.rebuilt, ["web"], "{report}");
    assert_eq!(report.refused.len(), 1, "{report}");
    assert_eq!(
        picks(&mut r),
        ["10.213.0.4", "10.213.0.5", "10.213.0.6"]
            .map(String::from)
            .into(),
    );
}

/// The backend table's capacity, refused alone too: nine VIPs of 1,000 backends each need
/// 9,000 backend IDs of 8,192. In refuse-alone mode the ninth is refused alone (named, with the
/// reason), the other eight are programmed, and a later backend change of one of them (a new
/// backend: one more ID) still reaches the datapath. Strict mode refuses the whole apply.
#[test]
fn a_vip_whose_backends_find_no_id_is_refused_alone() {
    let group = |v: u32, first: u32| {
        vip(
            &format!("g{v}"),
            &format!("10.216.0.{}", v + 1),
            80,
            proto::TCP,
            (first..first + 1000)
                .map(|b| {
                    backend(
                        &format!("10.{}.{}.{}", 100 + v, b / 250, b % 250 + 1),
                        8080,
                        1,
                    )
                })
                .collect(),
        )
    };
    let all: Vec<VipSpec> = (0..9).map(|v| group(v, 0)).collect();

    let mut strict = rig("ids-strict");
    let err = strict.dataplane.apply(&all).unwrap_err().to_string();
    assert!(err.contains("backend IDs are in use"), "{err}");
    assert_eq!(
        strict.dataplane.vips().count(),
        0,
        "strict: nothing applied"
    );
    drop(strict);

    let mut r = rig("ids-alone");
    r.dataplane.set_refuse_alone(true);
    let report = r.dataplane.apply(&all).unwrap();
    assert_eq!(report.added.len(), 8, "{report}");
    assert_eq!(report.refused.len(), 1, "{report}");
    assert_eq!(report.refused[0].name, "g8");
    assert!(
        report.refused[0].reason.contains("backend IDs are in use")
            && report.refused[0].reason.contains("needs 1000 more"),
        "{}",
        report.refused[0].reason
    );
    assert_eq!(r.dataplane.backends().count(), 8000);
    // g0 moves one backend along (one new ID): applied while g8 stays refused.
    let mut changed = all.clone();
    changed[0] = group(0, 1);
    let report = r.dataplane.apply(&changed).unwrap();
    assert_eq!(report.rebuilt, ["g0"], "{report}");
    assert_eq!(report.refused.len(), 1, "{report}");
    assert!(
        r.dataplane
            .vips()
            .find(|v| v.spec.name == "g0")
            .unwrap()
            .spec
            .backends
            .iter()
            .any(|b| b.key.addr.to_string() == "10.100.4.1"),
        "g0's new backend (index 1000) is programmed"
    );
    // With g8 gone, nothing is refused.
    let report = r.dataplane.apply(&changed[..8]).unwrap();
    assert!(report.refused.is_empty(), "{report}");
}

/// More VIPs than the service table holds (4,096): in refuse-alone mode the extra ones are
/// refused alone, those programmed first keep their place, and the others still apply; strict
/// mode refuses the whole apply.
#[test]
fn vips_beyond_the_service_table_are_refused_alone() {
    let all = vips(4100);
    let mut strict = rig("vips-strict");
    let err = strict.dataplane.apply(&all).unwrap_err().to_string();
    assert!(err.contains("4100 VIPs requested"), "{err}");
    drop(strict);

    let mut r = rig("vips-alone");
    r.dataplane.set_refuse_alone(true);
    // The last 100 first: they are programmed, so they keep their place.
    r.dataplane.apply(&all[4000..]).unwrap();
    let report = r.dataplane.apply(&all).unwrap();
    assert_eq!(r.dataplane.vips().count(), 4096);
    assert_eq!(report.refused.len(), 4, "{report}");
    assert!(
        report
            .refused
            .iter()
            .all(|v| v.reason.contains("holds at most 4096")),
        "{report}"
    );
    let programmed: std::collections::BTreeSet<String> =
        r.dataplane.vips().map(|v| v.spec.name.clone()).collect();
    assert!(
        (4000..4100).all(|i| programmed.contains(&format!("svc-{i}"))),
        "the VIPs programmed first keep their place"
    );
}

/// After a restart the VIPs are adopted (their weights unknown). A desired change of one of
/// them that does not fit (here 1,100 backends in a 1,009-slot table) refuses it alone: it keeps
/// forwarding as adopted, and the other adopted VIP is taken over as usual. (The retry round
/// kept the refused VIP by its adopted spec, whose unknown weights are 0, and failed the whole
/// apply on "weight 0".)
#[test]
fn an_adopted_vip_refused_for_capacity_keeps_forwarding() {
    const TABLE: u32 = 1009;
    let small = |name: &str, host: u8| {
        vip(
            name,
            &format!("10.217.0.{host}"),
            80,
            proto::TCP,
            (1..=3)
                .map(|b| backend(&format!("10.218.{host}.{b}"), 8080, 1))
                .collect(),
        )
    };
    let mut r = rig_with_table("adopt-refuse", TABLE);
    r.dataplane.apply(&[small("a", 1), small("b", 2)]).unwrap();
    r.keep_pins = true;
    let dir = r.pin_dir.clone();
    drop(r);
    let (mut r, _, adopted) = rig_at_with_table(&dir, TABLE);
    assert_eq!(adopted.vips, 2, "{adopted:?}");
    r.dataplane.set_refuse_alone(true);
    let mut huge = small("a", 1);
    huge.backends = (0..1100u32)
        .map(|b| backend(&format!("10.219.{}.{}", b / 200, b % 200 + 1), 8080, 1))
        .collect();
    let report = r.dataplane.apply(&[huge, small("b", 2)]).unwrap();
    assert_eq!(report.refused.len(), 1, "{report}");
    assert_eq!(report.refused[0].name, "a");
    let picks: std::collections::BTreeSet<String> = (0..64u16)
        .map(|i| {
            let f = FrameSpec::new("10.215.0.9", 20000 + i, "10.217.0.1", 80, proto::TCP)
                .syn()
                .build();
            let (v, out) = r.datapath.run_xdp(&f).unwrap();
            assert_eq!(v, XDP_PASS);
            parse_checked(&out).dst.to_string()
        })
        .collect();
    assert_eq!(
        picks,
        ["10.218.1.1", "10.218.1.2", "10.218.1.3"]
            .map(String::from)
            .into(),
        "a forwards as adopted"
    );
}
