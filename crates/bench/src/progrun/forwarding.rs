//! Part 1's entry point, [`run`], and the rows it measures itself: the
//! reference rows (floor, harness alone, the pitfall), xdp_ingress's NAT
//! forwarding rows (established flows, VLAN tags, cold caches, non-VIP
//! pass-through, new flows with the tables filling and full,
//! `natForwarding: fib`) and DSR rows (L2, IPIP, GRE), and tc_nat's egress
//! rows. [`run`] also runs the other families at their place in the table
//! and ends with the notes that compare rows across families. Separate from
//! those families because it is the one function that orders the table;
//! these rows are written inline in it.

use anyhow::{Context, Result, anyhow, ensure};
use aya::programs::Xdp;
use rivora_dataplane::{Mode, proto};

use super::case::{Case, CaseResult, Expect, OutCheck, delta, run_case};
use super::classifier::{CLS_LABELS, cls_rows};
use super::flow_filter::flow_filter_rebuild_row;
use super::harness::{
    BACKENDS4, BACKENDS6, CLIENT4, CLIENT6, Hook, Opts, Rig, Slot, TCX_NEXT, VIP4, VIP6, Vary,
    XDP_PASS, XDP_REDIRECT, XDP_TX, addrs, backends, fib_lab, run_prog, vip,
};
use super::probes::probe_rows;
use super::snat::{SNAT_LABELS, snat_cases};
use crate::frames::{self, Frame, FrameSpec};
use crate::report::{Row, Section};
use crate::stats::{fmt_count, fmt_ratio, median, ratio};

/// Flows the cold-cache case cycles through (as many as part 2 sends).
const MANY_FLOWS: u32 = 24_576;

/// Runs part 1 on the calling thread.
pub fn run(opts: Opts) -> Result<Section> {
    let jit = std::fs::read_to_string("/proc/sys/net/core/bpf_jit_enable")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let mut rig = Rig::new(opts)?;
    let mut sec = Section {
        title: "1. Per-packet cost of the programs (BPF_PROG_TEST_RUN)".into(),
        ratio_label: "vs floor".into(),
        ..Default::default()
    };
    sec.method = format!(
        "Each figure is the median over {runs} runs of {rep} iterations (new-flow cases: {repn}) of \
         BPF_PROG_TEST_RUN with `repeat`, JIT on (`bpf_jit_enable` = {jit}), the bench thread pinned to \
         one CPU. Every iteration runs `bench_harness` (bpf/bench/bench_xdp.c, or bench_tc.c for TCX), \
         which writes the original frame back, counts itself and tail-calls the program under test; the \
         harness's own cost is measured in interleaved runs that tail-call `bench_sink` (only returns \
         XDP_TX / TC_ACT_OK) and subtracted run by run. The floor (`bench_floor`: parse Ethernet/VLAN/IP/L4, \
         one hash lookup on the 5-tuple, swap MACs, XDP_TX) is measured the same way on the same frame, \
         in the same runs: each run times the sink, the floor and the case in an order that rotates \
         from run to run, and the ratio is the median of the per-run ratios, so a burst of other load \
         on the machine hits both sides of it (new-flow rows, whose frame changes on every \
         iteration, too: their floor runs see the frame unchanged, the sink's and the case's a new \
         flow each time). The datapath's own per-VIP counters \
         (`stats_map`, `drop_stats_map`) and the harness's iteration counter are read before and after: \
         a row only appears if every iteration took the intended path (evidence column), and the frame \
         the last iteration left is checked with etherparse (addresses, checksums).\n\n\
         New flows: the harness adds 1 to the source address (IPv4, or the low 32 bits of IPv6) of its \
         stored frame before every iteration and patches the IP and L4 checksums, so each of the \
         N iterations is the first packet of a flow never seen before: `new_flows` must grow by \
         exactly N for a SYN or a UDP datagram (neither makes an entry), by 0 for the handshake-ACK row \
         (a segment without state: it makes the connection's affinity entry, the one insert a \
         connection now costs). The affinity and NAT tables are emptied first; the `table full` rows \
         first make 70,000 established flows (LRU, 65,536 entries), so an insert would evict.\n\n\
         Classifier rows (Meridio-2's model, bpf/classify.h, placed after the NAT row with \
         `natForwarding: fib`): the classifier forwards only by bpf_fib_lookup + redirect, so they run \
         like that row, with an ingress interface in a namespace whose FIB has the group's targets \
         on-link with permanent neighbour entries. Their proof is the classifier's own counters \
         (`cls_vip_stats_map`, `cls_rule_stats_map`, `cls_group_stats_map`, `cls_event_map`): the \
         VIP's, the matching rule's and its group's packets (and bytes) grow by exactly the iterations, \
         and every other rule, group, VIP and event counter by 0 (the no-rule row: `no_rule` and the \
         VIP's `other` by the iterations, nothing else); the NAT VIP, drop and snat counters must not \
         move either. The classifier is removed after these rows, so the rows after them run with no \
         classifier VIP, as before.",
        runs = opts.runs,
        rep = opts.repeat,
        repn = opts.repeat_new,
    );

    // Reference rows: the harness itself, the floor direct and through it.
    let est4 = frames::build(&FrameSpec::tcp(CLIENT4, 40000, VIP4, 80));
    rig.floor_key(Hook::Xdp, &est4, 1)?;
    let floor_ref = rig.timed(Hook::Xdp, &est4, Vary::No, Slot::Floor, opts.repeat)?;
    let mut direct = Vec::new();
    for _ in 0..opts.runs {
        let p: &Xdp = rig
            .bench_xdp
            .program("bench_floor")
            .context("floor")?
            .try_into()?;
        direct.push(run_prog(p, &est4.bytes, opts.repeat, None)?.1);
    }
    let floor_direct = median(&direct);
    sec.rows.push(
        Row::info(
            "Floor: parse, one hash lookup, swap MACs, XDP_TX (IPv4 TCP)",
            format!("{:.1} ns", floor_ref.net_ns),
        )
        .ratio("1.00x")
        .evidence(format!(
            "through the harness; run directly with repeat (valid: its path does not depend on the MAC \
             order it swaps) {floor_direct:.1} ns"
        )),
    );
    sec.rows.push(
        Row::info(
            "Harness alone: restore frame + tail call to XDP_TX",
            format!("{:.1} ns", floor_ref.harness_ns),
        )
        .evidence("subtracted from every row"),
    );

    let mut cases: Vec<Case> = Vec::new();
    let b4 = addrs(&BACKENDS4);
    let b6 = addrs(&BACKENDS6);
    let fwd = |vip: &str, new_flow: bool| Expect::Forward {
        vip: vip.into(),
        new_flow,
        event: None,
    };
    let est_cases = [
        (
            "NAT IPv4 TCP, established flow",
            FrameSpec::tcp(CLIENT4, 40000, VIP4, 80),
            "tcp4",
            2.0,
        ),
        (
            "NAT IPv4 UDP, established flow",
            FrameSpec::udp(CLIENT4, 40001, VIP4, 53),
            "udp4",
            3.0,
        ),
        (
            "NAT IPv6 TCP, established flow",
            FrameSpec::tcp(CLIENT6, 40002, VIP6, 80),
            "tcp6",
            3.0,
        ),
        (
            "NAT IPv4 TCP, 802.1Q VLAN tagged, established",
            FrameSpec::tcp(CLIENT4, 40003, VIP4, 80).vlans(&[100]),
            "tcp4",
            3.0,
        ),
        (
            "NAT IPv4 TCP, QinQ (802.1ad + 802.1Q), established",
            FrameSpec::tcp(CLIENT4, 40004, VIP4, 80).vlans(&[100, 200]),
            "tcp4",
            3.0,
        ),
        (
            "NAT IPv4 TCP, established flow, stateless_reverse off (per-flow reverse entry)",
            FrameSpec::tcp(CLIENT4, 40006, VIP4, 81),
            "tcp4sf",
            3.0,
        ),
    ];
    // (label, reply frame, VIP name, VIP port).
    let mut replies: Vec<(String, Frame, String, u16)> = Vec::new();
    for (label, spec, vipname, limit) in est_cases {
        let frame = frames::build(&spec);
        // Warm the flow: a TCP segment (no flags) through xdp_ingress
        // creates its affinity entry; a UDP flow needs two datagrams
        // (balance.h rv_udp_seen_before). Through the harness, so the
        // program under test (RIVORA_BENCH_XDP_OBJECT's, in an A/B) makes
        // the state it will find, and on the CPU the runs use.
        let warm = if spec.proto == proto::UDP { 2 } else { 1 };
        rig.set_frame(Hook::Xdp, &frame, Vary::No)?;
        rig.set_slot(Hook::Xdp, Slot::Real)?;
        let (v, _, out) = rig.harness_run(Hook::Xdp, &frame.bytes, warm)?;
        ensure!(v == XDP_PASS, "{label}: warm-up verdict {v}");
        let p = frames::parse_checked(&out)?;
        if spec.vlans.is_empty() && spec.proto == proto::TCP {
            // The backend's reply, for the egress cases.
            let mut r = FrameSpec::tcp("0.0.0.0", p.dport, "0.0.0.0", spec.sport);
            r.src = p.dst;
            r.dst = spec.src;
            let fam = if spec.src.is_ipv4() { "IPv4" } else { "IPv6" };
            let what = if vipname == "tcp4sf" {
                format!("{fam} TCP, stateless_reverse off (per-flow entry)")
            } else {
                format!("{fam} TCP")
            };
            replies.push((what, frames::build(&r), vipname.to_string(), spec.dport));
        }
        let set = if spec.src.is_ipv4() {
            b4.clone()
        } else {
            b6.clone()
        };
        cases.push(Case {
            label: label.into(),
            hook: Hook::Xdp,
            frame,
            vary: Vary::No,
            expect: fwd(vipname, false),
            repeat: opts.repeat,
            want_retval: XDP_PASS,
            out: OutCheck::DstIn(set),
            limit,
        });
    }
    // The same path over many flows: every lookup misses the CPU caches
    // the way it does under real traffic (part 2 uses as many flows).
    {
        let frame = frames::build(&FrameSpec::tcp("10.32.0.1", 40000, VIP4, 80));
        rig.set_frame(Hook::Xdp, &frame, Vary::Cycle(MANY_FLOWS))?;
        rig.set_slot(Hook::Xdp, Slot::Real)?;
        // Segments without flags: each makes its flow's affinity entry
        // (a SYN would make none).
        let (before, _) = rig.affinity_entries();
        rig.harness_run(Hook::Xdp, &frame.bytes, MANY_FLOWS)?;
        let (after, _) = rig.affinity_entries();
        ensure!(
            after - before == MANY_FLOWS as usize,
            "creating {MANY_FLOWS} flows made {} entries",
            after - before
        );
        cases.push(Case {
            label: format!(
                "NAT IPv4 TCP, established, {} flows in turn (cold caches)",
                fmt_count(MANY_FLOWS as f64)
            ),
            hook: Hook::Xdp,
            frame,
            vary: Vary::Cycle(MANY_FLOWS),
            expect: fwd("tcp4", false),
            repeat: opts.repeat,
            want_retval: XDP_PASS,
            out: OutCheck::DstIn(b4.clone()),
            limit: 3.0,
        });
    }
    cases.push(Case {
        label: "Non-VIP pass-through (IPv4 TCP to a backend address)".into(),
        hook: Hook::Xdp,
        frame: frames::build(&FrameSpec::tcp(CLIENT4, 40005, BACKENDS4[0], 8080)),
        vary: Vary::No,
        expect: Expect::Pass,
        repeat: opts.repeat,
        want_retval: XDP_PASS,
        out: OutCheck::Unchanged,
        limit: 3.0,
    });
    for (what, frame, vipname, vip_port) in &replies {
        let v4 = what.starts_with("IPv4");
        cases.push(Case {
            label: format!("Egress reply path, {what} (tc_nat restores the VIP)"),
            hook: Hook::Tc,
            frame: frame.clone(),
            vary: Vary::No,
            expect: Expect::Reply {
                vip: vipname.clone(),
            },
            repeat: opts.repeat,
            want_retval: TCX_NEXT,
            out: OutCheck::SrcIs(if v4 { VIP4 } else { VIP6 }.parse().unwrap(), *vip_port),
            limit: 3.0,
        });
    }
    // Egress that is no NAT reply: from an address that is no backend's
    // (the backend filter ends it), and from a backend's address on a port
    // that is no VIP's endpoint (endpoint and per-flow lookups both miss).
    for (label, src) in [
        (
            "Egress, not a NAT reply: from an address that is no backend's",
            "10.33.0.7",
        ),
        (
            "Egress, not a NAT reply: from a backend address, another port",
            BACKENDS4[0],
        ),
    ] {
        cases.push(Case {
            label: label.into(),
            hook: Hook::Tc,
            frame: frames::build(&FrameSpec::tcp(src, 9999, CLIENT4, 40000)),
            vary: Vary::No,
            expect: Expect::Pass,
            repeat: opts.repeat,
            want_retval: TCX_NEXT,
            out: OutCheck::Unchanged,
            limit: 3.0,
        });
    }

    let mut results: Vec<(String, f64, f64)> = Vec::new();
    for c in &cases {
        match run_case(&mut rig, c) {
            Ok(r) => {
                results.push((c.label.clone(), r.ns, r.ratio));
                sec.rows.push(r.row);
            }
            Err(e) => sec.rows.push(
                Row::info(c.label.clone(), "-")
                    .not_run()
                    .evidence(format!("not measured: {}", crate::util::short_error(&e))),
            ),
        }
    }
    // Egress reply rows use the TC floor; show what that floor costs.
    {
        let f = &replies.first().map(|r| r.1.clone());
        if let Some(f) = f {
            rig.floor_key(Hook::Tc, f, 1)?;
            let t = rig.timed(Hook::Tc, f, Vary::No, Slot::Floor, opts.repeat)?;
            sec.notes.push(format!(
                "The egress rows are compared with the same floor built as a TC program \
                 (`bench_tc_floor`, {:.1} ns on the IPv4 reply frame; TC harness {:.1} ns subtracted): \
                 a TCX program works on an skb, the XDP floor would not be a fair reference.",
                t.net_ns, t.harness_ns
            ));
        }
    }

    // The pitfall, demonstrated: xdp_ingress run directly with repeat=N.
    {
        let before = rig.snapshot(Hook::Xdp)?;
        let mut ns = Vec::new();
        for _ in 0..opts.runs {
            let p: &Xdp = rig
                ._real_xdp
                .program("xdp_ingress")
                .context("xdp_ingress")?
                .try_into()?;
            ns.push(run_prog(p, &est4.bytes, opts.repeat, None)?.1);
        }
        let after = rig.snapshot(Hook::Xdp)?;
        let d = delta(&before, &after, "tcp4");
        let m = median(&ns);
        sec.rows.push(
            Row::info(
                "Pitfall shown: xdp_ingress run directly with repeat=N, no restore",
                format!("{m:.1} ns"),
            )
            .ratio(fmt_ratio(ratio(m, floor_ref.net_ns)))
            .evidence(format!(
                "WRONG PATH, not a result: {} iterations but packets +{}: only the first iteration of \
                 each run saw the VIP, the rest saw their own rewritten frame (non-VIP pass-through)",
                fmt_count((opts.runs as u64 * opts.repeat as u64) as f64),
                d.packets
            )),
        );
    }

    // New flows last: they fill the flow tables.
    rig.clear_flow_tables()?;
    // (label, frame, VIP, backends, prefill the table first, counts as a
    // new flow, target in floors). A SYN and a UDP flow's first datagram
    // create no entry (balance.h); a TCP segment without state (the
    // handshake's ACK) makes the connection's one entry, the cost that
    // moved there from the SYN.
    let new_cases = [
        (
            "NAT IPv4 TCP, first packet of a new flow (SYN), table filling",
            FrameSpec::tcp("10.64.0.1", 40000, VIP4, 80).syn(),
            "tcp4",
            b4.clone(),
            false,
            true,
            8.0,
            false,
        ),
        (
            "NAT IPv6 TCP, first packet of a new flow (SYN), table filling",
            FrameSpec::tcp("fd00:64::1:0", 40000, VIP6, 80).syn(),
            "tcp6",
            b6.clone(),
            false,
            true,
            8.0,
            false,
        ),
        (
            "NAT IPv4 UDP, first datagram of a new flow, table filling",
            FrameSpec::udp("10.80.0.1", 40000, VIP4, 53),
            "udp4",
            b4.clone(),
            false,
            true,
            8.0,
            false,
        ),
        (
            // No target of its own: the cost that moved here from the SYN
            // (one LRU insert), shown so it is not hidden.
            "NAT IPv4 TCP, handshake ACK of a new connection (makes its entry), table filling",
            FrameSpec::tcp("10.72.0.1", 40000, VIP4, 80),
            "tcp4",
            b4.clone(),
            false,
            false,
            0.0,
            false,
        ),
        (
            "NAT IPv4 TCP, new flow (SYN), table full of established flows",
            FrameSpec::tcp("10.96.0.1", 40000, VIP4, 80).syn(),
            "tcp4",
            b4.clone(),
            true,
            true,
            12.0,
            false,
        ),
        (
            "NAT IPv4 UDP, first datagram of a new flow, table full of established flows",
            FrameSpec::udp("10.88.0.1", 40000, VIP4, 53),
            "udp4",
            b4.clone(),
            true,
            true,
            12.0,
            false,
        ),
        (
            // A VIP whose endpoints are never exclusive (a Kubernetes
            // VIP's): the SYN records the flow's reverse entry (guarded);
            // a first non-SYN packet with no SYN before it makes both the
            // affinity and the reverse entry.
            "NAT IPv4 TCP, first packet of a new flow (SYN), stateless_reverse off, tables emptied first",
            FrameSpec::tcp("10.104.0.1", 40000, VIP4, 81).syn(),
            "tcp4sf",
            b4.clone(),
            false,
            true,
            0.0,
            true,
        ),
        (
            "NAT IPv4 TCP, first non-SYN packet of a flow, stateless_reverse off (makes its affinity and reverse entries), tables emptied first",
            FrameSpec::tcp("10.112.0.1", 40000, VIP4, 81),
            "tcp4sf",
            b4.clone(),
            false,
            false,
            0.0,
            true,
        ),
    ];
    let mut rebuilt = false;
    for (label, spec, vipname, set, prefill, counts_new, limit, clear) in new_cases {
        let frame = frames::build(&spec);
        let mut extra = String::new();
        if clear {
            rig.clear_flow_tables()?;
        }
        if prefill {
            // Established flows (from 10.128.0.1 up: segments without
            // flags, each making its entry) fill the table first.
            let fill = frames::build(&FrameSpec::tcp("10.128.0.1", 40000, VIP4, 80));
            rig.set_frame(Hook::Xdp, &fill, Vary::New)?;
            rig.set_slot(Hook::Xdp, Slot::Real)?;
            rig.harness_run(Hook::Xdp, &fill.bytes, 70_000)?;
            let (n4, _) = rig.affinity_entries();
            extra = format!(
                "; affinity table held {} entries before",
                fmt_count(n4 as f64)
            );
        }
        let c = Case {
            label: label.into(),
            hook: Hook::Xdp,
            frame,
            vary: Vary::New,
            expect: fwd(vipname, counts_new),
            repeat: opts.repeat_new,
            want_retval: XDP_PASS,
            out: OutCheck::DstIn(set),
            limit,
        };
        match run_case(&mut rig, &c) {
            Ok(mut r) => {
                let (n4, n6) = rig.affinity_entries();
                r.row.evidence.push_str(&format!(
                    "{extra}; affinity tables after: {} (v4), {} (v6)",
                    fmt_count(n4 as f64),
                    fmt_count(n6 as f64)
                ));
                results.push((c.label.clone(), r.ns, r.ratio));
                sec.rows.push(r.row);
            }
            Err(e) => sec.rows.push(
                Row::info(c.label.clone(), "-")
                    .not_run()
                    .evidence(format!("not measured: {}", crate::util::short_error(&e))),
            ),
        }
        if prefill && !rebuilt {
            // What keeps the table-full rows cheap costs the control plane
            // this, at most once per table's worth of new flows.
            rebuilt = true;
            sec.rows.push(flow_filter_rebuild_row(&mut rig)?);
        }
    }

    // DSR modes. The L3 ones need the outer source address.
    rig.dp
        .set_tunnel_source(
            Some(std::net::Ipv4Addr::new(10, 200, 0, 1)),
            Some("fd00:200::1".parse()?),
        )
        .map_err(|e| anyhow!("{e}"))?;
    // The L3 modes' real path needs a FIB to route the outer packet: a
    // namespace with an ingress veth, a route to the backends and the next
    // hop's MAC; test_run then runs on a thread inside it with that ingress
    // interface. Their kernel-fallback path (no route: encapsulate, then
    // XDP_PASS) is measured too, as information.
    let fib = fib_lab();
    let cpu = crate::machine::cpu_count().saturating_sub(1);
    // The same FIB path serves NAT VIPs with `natForwarding: fib` (mode
    // nat below, with the VIP's nat_fib set).
    for (mode, addr, via_fib) in [
        (Mode::Nat, "10.200.101.4", true),
        (Mode::Dsr, "10.200.101.1", false),
        (Mode::DsrIpip, "10.200.101.2", true),
        (Mode::DsrGre, "10.200.101.3", true),
        (Mode::DsrIpip, "10.200.101.2", false),
        (Mode::DsrGre, "10.200.101.3", false),
    ] {
        let label = match (mode, via_fib) {
            (Mode::Nat, _) => {
                "NAT IPv4 TCP, established flow, natForwarding fib (FIB lookup + redirect)"
                    .to_string()
            }
            (Mode::Dsr, _) => "DSR (L2) IPv4 TCP, established flow".to_string(),
            (_, true) => format!(
                "{} IPv4 TCP, established flow (FIB lookup + redirect)",
                mode.as_str().to_uppercase()
            ),
            _ => format!(
                "{} IPv4 TCP, established flow, no route (kernel fallback: encapsulated, XDP_PASS)",
                mode.as_str().to_uppercase()
            ),
        };
        let mut desired = rig.desired.clone();
        let mut spec = vip(
            mode.as_str(),
            addr,
            80,
            proto::TCP,
            mode,
            backends(&BACKENDS4, if mode == Mode::Nat { 8080 } else { 80 }),
        );
        spec.nat_fib = mode == Mode::Nat;
        desired.push(spec);
        if let Err(e) = rig.dp.apply(&desired) {
            sec.rows
                .push(Row::info(label, "-").not_run().evidence(format!(
                    "not measured: the dataplane refused such a VIP: {e}"
                )));
            continue;
        }
        let frame = frames::build(&FrameSpec::tcp(CLIENT4, 41000, addr, 80));
        let case = |rig: &mut Rig| -> Result<CaseResult> {
            let (v, _) = match rig.ingress_ifindex {
                Some(i) => rig.datapath.run_xdp_on(&frame.bytes, i),
                None => rig.datapath.run_xdp(&frame.bytes),
            }
            .map_err(|e| anyhow!("{e}"))?;
            ensure!(
                v == if mode == Mode::Dsr {
                    XDP_TX
                } else if via_fib {
                    XDP_REDIRECT
                } else {
                    XDP_PASS
                },
                "unexpected verdict {v} in the warm-up"
            );
            let c = Case {
                label: label.clone(),
                hook: Hook::Xdp,
                frame: frame.clone(),
                vary: Vary::No,
                expect: Expect::Forward {
                    vip: mode.as_str().into(),
                    new_flow: false,
                    event: (mode != Mode::Dsr && !via_fib).then_some("passed_tunnel_to_kernel"),
                },
                repeat: opts.repeat,
                want_retval: v,
                out: if mode == Mode::Nat {
                    OutCheck::DstIn(addrs(&BACKENDS4))
                } else if mode == Mode::Dsr {
                    OutCheck::DsrL2(
                        addr.parse().unwrap(),
                        backends(&BACKENDS4, 80).iter().map(|b| b.mac).collect(),
                    )
                } else {
                    OutCheck::Encap(
                        if mode == Mode::DsrIpip { 4 } else { 47 },
                        addrs(&BACKENDS4),
                    )
                },
                // The fallback path is what a flow's first packets take
                // before the next hop's neighbour entry exists: shown, no
                // target (the FIB row is the mode's path).
                limit: if mode != Mode::Dsr && !via_fib {
                    0.0
                } else if mode == Mode::Nat {
                    2.0
                } else {
                    3.0
                },
            };
            run_case(rig, &c)
        };
        let r = if via_fib {
            match &fib {
                Ok((ns, ifindex)) => {
                    let ifindex = *ifindex;
                    let rig = &mut rig;
                    ns.within(move || {
                        let _ = crate::machine::pin_current_thread(cpu);
                        rig.ingress_ifindex = Some(ifindex);
                        let r = case(rig);
                        rig.ingress_ifindex = None;
                        r
                    })
                    .map_err(|e| anyhow!("{e}"))
                    .and_then(|r| r)
                }
                Err(e) => Err(anyhow!("no FIB namespace: {e}")),
            }
        } else {
            case(&mut rig)
        };
        match r {
            Ok(r) => {
                results.push((label.clone(), r.ns, r.ratio));
                sec.rows.push(r.row);
            }
            Err(e) => sec.rows.push(
                Row::info(label.clone(), "-")
                    .not_run()
                    .evidence(format!("not measured: {}", crate::util::short_error(&e))),
            ),
        }
        rig.dp
            .apply(&rig.desired.clone())
            .map_err(|e| anyhow!("{e}"))?;
        if mode == Mode::Nat {
            // The classifier (Meridio-2's model) next to the NAT row that
            // also leaves by FIB lookup + redirect: same namespace, same
            // ingress interface, measured right after it.
            for (label, r) in cls_rows(&mut rig, &fib, cpu)? {
                match r {
                    Ok(r) => {
                        results.push((label.to_string(), r.ns, r.ratio));
                        sec.rows.push(r.row);
                    }
                    Err(e) => sec.rows.push(
                        Row::info(label, "-")
                            .not_run()
                            .evidence(format!("not measured: {}", crate::util::short_error(&e))),
                    ),
                }
            }
        }
    }

    // Source translation (ETP Cluster, bpf/snat.h): translated packets
    // leave only by FIB redirect, so these rows run in the FIB namespace.
    let snat = match &fib {
        Ok((ns, ifindex)) => {
            let ifindex = *ifindex;
            let rig = &mut rig;
            ns.within(move || {
                let _ = crate::machine::pin_current_thread(cpu);
                rig.ingress_ifindex = Some(ifindex);
                let r = snat_cases(rig);
                rig.ingress_ifindex = None;
                r
            })
            .map_err(|e| anyhow!("{e}"))
            .and_then(|r| r)
        }
        Err(e) => Err(anyhow!("no FIB namespace: {e}")),
    };
    let snat = snat.unwrap_or_else(|e| {
        let e = crate::util::short_error(&e);
        SNAT_LABELS
            .iter()
            .map(|l| (*l, Err(anyhow!("{e}"))))
            .collect()
    });
    for (label, r) in snat {
        match r {
            Ok(r) => {
                results.push((label.to_string(), r.ns, r.ratio));
                sec.rows.push(r.row);
            }
            Err(e) => sec.rows.push(
                Row::info(label, "-")
                    .not_run()
                    .evidence(format!("not measured: {}", crate::util::short_error(&e))),
            ),
        }
    }
    rig.dp
        .apply(&rig.desired.clone())
        .map_err(|e| anyhow!("{e}"))?;

    let mut probes = Vec::new();
    match probe_rows(&mut rig) {
        Ok((rows, costs)) => {
            sec.rows.extend(rows);
            probes = costs;
        }
        Err(e) => sec.notes.push(format!(
            "Map-operation probes not measured: {}",
            crate::util::short_error(&e)
        )),
    }

    // Static sizes: evidence for where the cost is.
    let mut sizes = String::from("Program sizes (kernel's view): ");
    let parts: Vec<String> = rig
        .sizes
        .iter()
        .map(|(n, verified, xlated, jited)| {
            format!(
                "`{n}` {} BPF insns after verification ({} verifier-processed), {} bytes JITed",
                xlated.map(|x| (x / 8).to_string()).unwrap_or("?".into()),
                verified.map(|v| v.to_string()).unwrap_or("?".into()),
                jited
            )
        })
        .collect();
    sizes.push_str(&parts.join("; "));
    sec.notes.push(sizes);

    // Where the time goes: differences between rows, and the probes.
    let find = |prefix: &str| {
        results
            .iter()
            .find(|(l, _, _)| l.starts_with(prefix))
            .map(|r| (r.1, r.2))
    };
    let probe = |i: usize| probes.get(i).copied().unwrap_or(f64::NAN);
    let (hash_lookup, lru_lookup, lru_insert, lru_pcpu) = (probe(0), probe(1), probe(3), probe(4));
    if let (Some((est, est_r)), Some((pass, _))) = (
        find("NAT IPv4 TCP, established flow"),
        find("Non-VIP pass-through"),
    ) {
        let verdict = if est_r <= 2.0 {
            "within the target".to_string()
        } else {
            format!(
                "still {:.0} ns above 2x the floor: what remains beyond the floor's work is the \
                 affinity table's hash walk, the VIP index probe and three array lookups (all inlined), \
                 and the checksum rewrite",
                est - 2.0 * floor_ref.net_ns
            )
        };
        sec.notes.push(format!(
            "Established flow ({est_r:.2}x the floor; target 2x): a packet that matches no VIP costs \
             {pass:.1} ns (parse, and the VIP match: a probe of vip_index_map, the open-addressing copy of \
             vip_map read with array lookups the verifier inlines, so no helper call; the port-range \
             trie only if a range VIP of the family exists); an \
             established flow adds {:.1} ns: the service, backend and health array lookups, the affinity \
             lookup, one jiffies read (inlined by the verifier into a load; the coarse-clock helper it \
             replaced cost 15-20 ns), the rewrite and the counters. The reverse NAT entry is no \
             longer looked up on every packet: the affinity entry records the tick (128 jiffies, at most \
             about a second) of its last check, and only the first packet of a new tick looks it up (and \
             re-creates it if the LRU evicted it). The probes price a hash lookup at {hash_lookup:.0} ns \
             and an LRU lookup at {lru_lookup:.0} ns. Against the floor: {verdict}.",
            est - pass,
        ));
    }
    if let (Some((est, _)), Some((newf, new_r))) = (
        find("NAT IPv4 TCP, established flow"),
        find("NAT IPv4 TCP, first packet"),
    ) {
        let shown = |r: Option<(f64, f64)>| match r {
            Some((ns, x)) => format!("{ns:.0} ns, {x:.1}x the floor"),
            None => "not measured".to_string(),
        };
        let ack = shown(find("NAT IPv4 TCP, handshake ACK"));
        let udp = shown(find(
            "NAT IPv4 UDP, first datagram of a new flow, table filling",
        ));
        sec.notes.push(format!(
            "New flow ({new_r:.1}x the floor; target 8x): a SYN costs {:.0} ns more than an established \
             packet: the flow hash, the Maglev slot and health lookups and the backend endpoint's lookup \
             (bpf/reverse.h), but no map insert. A SYN creates no state (balance.h), and a backend \
             endpoint that serves one VIP needs no per-flow reverse entry, so a flood of SYNs can evict \
             nothing. A connection's one insert is its handshake ACK's affinity entry ({ack}; the probes \
             put one LRU insert at {lru_insert:.0} ns, {lru_pcpu:.0} ns with BPF_F_NO_COMMON_LRU). A UDP \
             flow's first datagram makes none either ({udp}): its second makes the entry, so a \
             one-datagram DNS query costs no insert. Backend endpoints that several VIPs share still \
             need the per-flow reverse entry (one insert on the SYN).",
            newf - est,
        ));
    }
    if let (Some((full, full_r)), Some((newf, _))) = (
        find("NAT IPv4 TCP, new flow (SYN), table full"),
        find("NAT IPv4 TCP, first packet"),
    ) {
        sec.notes.push(format!(
            "New flow with the table full of established flows ({full_r:.1}x the floor; target 12x): \
             nothing is inserted or evicted (the affinity table holds as many entries after as before, \
             evidence column), and the {:.0} ns more than with an empty table are the one lookup a SYN \
             keeps, in a table of 65,536 entries that no longer fits the CPU caches: a new 5-tuple's \
             bucket and chain are cold on every iteration (compare the established row that cycles \
             through many flows). The SYN needs that lookup to re-point an entry an earlier connection \
             on the same 5-tuple left behind (balance.h). A UDP flow's first datagram looks its entry \
             up the same way.",
            full - newf
        ));
    }
    if let (Some((cold, cold_r)), Some((est, _))) = (
        find("NAT IPv4 TCP, established, "),
        find("NAT IPv4 TCP, established flow"),
    ) {
        sec.notes.push(if cold > est * 1.1 {
            format!(
                "Cold caches: cycling through {} established flows costs {cold:.0} ns per packet \
                 against {est:.0} ns for one hot flow ({cold_r:.2}x a floor that also cycles through \
                 as many keys). Each packet then misses the CPU caches on the vip, affinity and NAT \
                 hash tables; this is closer to real traffic (part 2 sends as many flows, and its \
                 profile shows the program's cost there), and the reason why removing a hash lookup \
                 per packet (above) is worth more than its hot-cache price.",
                fmt_count(MANY_FLOWS as f64)
            )
        } else {
            format!(
                "Cold caches: cycling through {} established flows cost {cold:.0} ns per packet in \
                 this run, about what one hot flow costs ({est:.0} ns; {cold_r:.2}x a floor that also \
                 cycles through as many keys): in this tight loop the tables (a few MB) stay in the \
                 CPU caches. Under real traffic the rest of the network stack evicts them between \
                 two packets of a flow: part 2's profile measures that case.",
                fmt_count(MANY_FLOWS as f64)
            )
        });
    }
    if let Some((e4, e4r)) = find("Egress reply path, IPv4") {
        let other = |p: &str| {
            find(p)
                .map(|(ns, _)| format!("{ns:.0} ns"))
                .unwrap_or_else(|| "not measured".into())
        };
        sec.notes.push(format!(
            "Egress that is no NAT reply: {} from an address that is no backend's (one inlined array \
             lookup: the backend-address filter, bpf/reverse.h), {} from a backend's address on a port \
             that is no VIP's endpoint (the filter passes it; the endpoint and per-flow lookups both \
             miss).",
            other("Egress, not a NAT reply: from an address"),
            other("Egress, not a NAT reply: from a backend")
        ));
        sec.notes.push(format!(
            "Egress reply path ({e4r:.2}x the TC floor; target 3x): tc_nat costs {e4:.0} ns for the \
             backend filter, one nat_endpoint_map lookup (the backend serves one VIP, so its replies \
             need no per-flow entry) and the source rewrite. Addresses, port and the IPv4 header \
             checksum are written in place; the L4 checksum goes through bpf_l4_csum_replace with a \
             precomputed difference (one call for the address, a second only when the port changes), \
             because only the kernel knows whether a forwarded skb carries a partial (offloaded) \
             checksum, where only the pseudo-header part may change (an end-to-end test covers that \
             case). The first version made five skb helper calls and cost 186 ns (4.43x)."
        ));
    }
    if let (Some((v6, v6r)), Some((v4, _))) = (
        find("NAT IPv6 TCP, established"),
        find("NAT IPv4 TCP, established flow"),
    ) {
        sec.notes.push(if v6 > v4 * 1.1 {
            format!(
                "IPv6 established ({v6r:.2}x): {:.0} ns more than IPv4: 40-byte affinity and NAT \
                 keys (16 bytes for IPv4) are hashed and compared on each lookup, and the rewrite \
                 folds a 128-bit address into the checksum.",
                v6 - v4
            )
        } else {
            format!(
                "IPv6 established ({v6r:.2}x) cost about what IPv4 costs in this run ({v6:.0} vs \
                 {v4:.0} ns): the longer keys and the 128-bit checksum fold are within the noise."
            )
        });
    }
    if let (Some((fib, fib_r)), Some((nat, _))) = (
        find("NAT IPv4 TCP, established flow, natForwarding fib"),
        find("NAT IPv4 TCP, established flow"),
    ) {
        sec.notes.push(format!(
            "NAT with `natForwarding: fib` ({fib:.0} ns, {fib_r:.2}x; the NAT target is 2x): {:.0} ns \
             more than the same packet handed to the kernel, for the next-hop cache read (an inlined \
             per-CPU array lookup), the TTL decrement and bpf_redirect, a helper call. It is the one \
             NAT row above 2x, and the trade it makes shows in part 2: the kernel's routing of the \
             packet, which that XDP_PASS leaves to do, costs about two microseconds per packet there.",
            fib - nat
        ));
    }
    if let (Some((a, ar)), Some((fib, fib_r))) = (
        find(CLS_LABELS[0]),
        find("NAT IPv4 TCP, established flow, natForwarding fib"),
    ) {
        let shown = |l: &str| match find(l) {
            Some((ns, x)) => format!("{ns:.0} ns, {x:.2}x"),
            None => "not measured".to_string(),
        };
        let mpps = |l: &str| match find(l) {
            Some((ns, _)) if ns > 0.0 => format!("{:.1}", 1e3 / ns),
            _ => "?".to_string(),
        };
        let per_rule = |l: &str| match find(l) {
            Some((ns, _)) => format!("{:.0} ns", (ns - a) / 31.0),
            None => "not measured".to_string(),
        };
        sec.notes.push(format!(
            "Classifier (Meridio-2's model, bpf/classify.h; no spec target). A TCP packet to a \
             classifier VIP whose first rule matches costs {a:.0} ns ({ar:.2}x; IPv6 {}), {:+.0} ns \
             against the NAT VIP with `natForwarding: fib` ({fib:.0} ns, {fib_r:.2}x), which also \
             leaves by FIB lookup and redirect. The classifier rewrites no address and keeps no \
             flow state, but its packet goes through a stage of its own (xdp_ingress finds the VIP \
             in cls_vip_map, tail-calls the stage, which parses the frame again, looks the VIP up \
             again and copies its rule list to per-CPU scratch), runs the rule loop in bpf_loop, \
             hashes the flow into the group's Maglev table (two more hash lookups: group and \
             target), calls bpf_fib_lookup on every packet (natForwarding fib reads a per-backend \
             next-hop cache instead) and counts on the VIP, the rule and the group. Each rule that \
             misses adds about {} when its source prefix matches and every port range is read \
             (32 rules, the most a VIP can have, with the last matching: {}), {} when its source \
             prefix misses (one LPM lookup, a helper call; {}). A packet that matches no rule is \
             dropped and counted for {}. Per core, the program alone would run at {} Mpps \
             (first rule, IPv4), {} (IPv6), {} (32 rules, worst case), {} (no rule, dropped); \
             natForwarding fib {} Mpps. These are the program's costs only, with its maps in the \
             CPU caches: the driver's receive and the transmit of the redirected frame (which \
             BPF_PROG_TEST_RUN does not carry out) come on top, and part 2 has no classifier \
             phase, so no whole-path forwarding rate is measured for the classifier here.",
            shown(CLS_LABELS[3]),
            a - fib,
            per_rule(CLS_LABELS[1]),
            shown(CLS_LABELS[1]),
            per_rule(CLS_LABELS[2]),
            shown(CLS_LABELS[2]),
            shown(CLS_LABELS[4]),
            mpps(CLS_LABELS[0]),
            mpps(CLS_LABELS[3]),
            mpps(CLS_LABELS[1]),
            mpps(CLS_LABELS[4]),
            mpps("NAT IPv4 TCP, established flow, natForwarding fib"),
        ));
    }
    if let (Some((ipip, ipip_r)), Some((fb, _))) = (
        find("DSR-IPIP IPv4 TCP, established flow (FIB"),
        find("DSR-IPIP IPv4 TCP, established flow, no route"),
    ) {
        sec.notes.push(format!(
            "L3 DSR (dsr-ipip {ipip:.0} ns, {ipip_r:.2}x; dsr-gre in its row): these rows run with \
             an ingress interface in a namespace whose FIB routes the backends to a next hop with a \
             known MAC, so every iteration takes the mode's real path: the next hop (from the \
             per-backend cache, see below), bpf_xdp_adjust_head, the outer header and its checksum, \
             XDP_REDIRECT. The *no route* rows take the kernel fallback \
             instead (the FIB lookup fails at once; encapsulate and XDP_PASS, {fb:.0} ns for \
             dsr-ipip), and growing the frame plus a second IP header is what the fallback rows cost beyond L2 DSR. \
             The FIB rows measure the next-hop cache: the lookup's answer is kept per backend and \
             CPU for one tick (128 jiffies, at most about a second; read with an inlined load), so \
             all but the first packet of a tick skip bpf_fib_lookup."
        ));
    }
    if let (Some((e4, e4r)), Some((fib, _))) = (
        find(SNAT_LABELS[0]),
        find("NAT IPv4 TCP, established flow, natForwarding fib"),
    ) {
        let shown = |l: &str| match find(l) {
            Some((ns, x)) => format!("{ns:.0} ns, {x:.2}x"),
            None => "not measured".to_string(),
        };
        let v6_fib = match (
            find(SNAT_LABELS[3]),
            find(SNAT_LABELS[2]),
            find(SNAT_LABELS[1]),
        ) {
            (Some((r6, _)), Some((e6, _)), Some((r4, _))) => format!(
                " The IPv6 reply costs {:+.0} ns against the IPv6 forward direction, the IPv4 \
                 reply {:+.0} ns against its own: a reply needs no second parse in a stage of its \
                 own and reads its next hop from the per-CPU cache of client next hops. Without \
                 that cache (every reply asking the FIB) they cost about 90 and 180 ns.",
                r6 - e6,
                r4 - e4
            ),
            _ => String::new(),
        };
        let new_flow = match (
            find(SNAT_LABELS[4]),
            find("NAT IPv4 TCP, first packet of a new flow (SYN), table filling"),
        ) {
            (Some((n, nr)), Some((syn, _))) => format!(
                " A new flow's SYN costs {n:.0} ns ({nr:.1}x), {:.0} ns more than a NAT SYN: taking \
                 a node port is a reverse-mapping lookup that misses and two LRU inserts (the \
                 reverse mapping, then the flow's entry; the probe prices one LRU insert at \
                 {lru_insert:.0} ns), and the connection's handshake ACK then makes its affinity \
                 entry as for any NAT flow. Its VIP has 256 backend endpoints so that no port range \
                 runs out during the row (ports are per endpoint; the evidence says how full the \
                 fullest range got).",
                n - syn
            ),
            _ => String::new(),
        };
        sec.notes.push(format!(
            "Source translation (ETP Cluster, bpf/snat.h; no spec target: each row's evidence \
             says what its limit is built from). An established flow to a backend on another node \
             costs {e4:.0} ns ({e4r:.2}x; IPv6 {}), {:.0} ns more than the same NAT with \
             `natForwarding: fib`: one LRU lookup of the flow's mapping (the probe prices one at \
             {lru_lookup:.0} ns), and the stage it runs in: a tail call, a second parse of the \
             rewritten frame, the stage-state and config lookups and the source rewrite. Its reply \
             to the node's port costs {} (IPv6 {}): the reverse mapping's lookup, both ends \
             rewritten, and the client's next hop from a per-CPU cache of 256 slots keyed by \
             the client's address, learnt from bpf_fib_lookup once per tick (snat.h \
             rv_snat_reply_send).{v6_fib}{new_flow} The alternative considered for the \
             translation, an nftables masquerade rule, is not measured here: it would hand every \
             such packet to the kernel's forwarding path and conntrack (XDP_PASS), the path whose \
             per-packet cost part 2 shows for plain routing and nftables DNAT ((b), (c)).",
            shown(SNAT_LABELS[2]),
            e4 - fib,
            shown(SNAT_LABELS[1]),
            shown(SNAT_LABELS[3]),
        ));
    }
    sec.notes.push(
        "Noise: each row's evidence gives the middle half of its runs; rows of one frame shape \
         can differ by more than that from run to run of the bench on this shared machine \
         (compare the floor measured before each row)."
            .to_string(),
    );
    Ok(sec)
}
