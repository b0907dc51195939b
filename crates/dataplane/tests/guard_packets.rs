//! The new-flow guard (bpf/guard.h) through the real program: beyond a
//! CPU's budget per window, flows without state are forwarded by Maglev
//! alone, counted, and create no entry; SYNs and first UDP datagrams never
//! spend the budget (they create nothing).

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::*;
use rivora_abi as abi;
use rivora_dataplane::proto;

const VIP4: &str = "10.200.100.1";

fn backends() -> Vec<rivora_dataplane::BackendSpec> {
    (11..14)
        .map(|i| backend(&format!("10.200.1.{i}"), 8080, 1))
        .collect()
}

fn guarded(r: &Rig) -> u64 {
    r.dataplane.drop_counters().unwrap()[abi::drop_reason::FLOW_GUARDED as usize]
}

fn entries(r: &Rig) -> u64 {
    r.dataplane.maps().affinity.keys().count() as u64
}

/// Sends one segment of a new flow `i` (`syn`: a SYN) and returns where it
/// went.
fn send(r: &mut Rig, i: u16, syn: bool) -> IpAddr {
    let mut f = FrameSpec::new("10.200.0.2", 20000 + i, VIP4, 80, proto::TCP);
    f.syn = syn;
    let (v, out) = r.datapath.run_xdp(&f.build()).unwrap();
    assert_eq!(v, XDP_PASS, "flow {i}");
    parse_checked(&out).dst
}

#[test]
fn beyond_the_budget_flows_are_forwarded_without_state_and_counted() {
    pin_to_one_cpu();
    let mut r = rig("guard");
    r.dataplane
        .apply(&[vip("web", VIP4, 80, proto::TCP, backends())])
        .unwrap();
    let addrs: BTreeSet<IpAddr> = backends().iter().map(|b| b.key.addr).collect();
    let cpus = aya::util::online_cpus().unwrap().len() as u64;
    // 10 entries per CPU per 100 ms window.
    let g = r.dataplane.set_flow_guard(100 * cpus).unwrap();
    assert_eq!(g.limit, 10, "{g:?}");

    // SYNs create nothing, so they never spend the budget.
    for i in 0..500 {
        assert!(addrs.contains(&send(&mut r, i, true)));
    }
    assert_eq!(
        (entries(&r), guarded(&r)),
        (0, 0),
        "SYNs: no entry, nothing guarded"
    );

    // 200 flows' next segments: the first 10 per window make entries, the
    // others are forwarded by Maglev to the backend their SYN got.
    let want: Vec<IpAddr> = (0..200).map(|i| send(&mut r, i, true)).collect();
    let t = Instant::now();
    for i in 0..200u16 {
        assert_eq!(
            send(&mut r, i, false),
            want[i as usize],
            "flow {i}: same backend, with or without state"
        );
    }
    let windows = (t.elapsed().as_millis() / 100) as u64 + 1;
    let (made, held) = (entries(&r), guarded(&r));
    eprintln!(
        "200 segments without state in {:?}: {made} entries made, {held} guarded",
        t.elapsed()
    );
    assert_eq!(
        made + held,
        200,
        "every segment made an entry or was counted"
    );
    assert!(
        (10..=10 * (windows + 1)).contains(&made),
        "{made} entries in {windows} window(s) of 10"
    );

    // A guarded flow gets its entry once the budget is back.
    let until = Instant::now() + Duration::from_secs(2);
    let before = entries(&r);
    while Instant::now() < until && entries(&r) == before {
        send(&mut r, 199, false);
    }
    assert_eq!(
        entries(&r),
        before + 1,
        "the flow was recorded in a later window"
    );

    // Off: every flow makes its entry.
    r.dataplane.set_flow_guard(0).unwrap();
    let held = guarded(&r);
    for i in 1000..1300u16 {
        send(&mut r, i, false);
    }
    assert_eq!(guarded(&r), held, "guard off");
    assert_eq!(entries(&r), before + 1 + 300);
}
