//! Part 1: per-packet cost of the real XDP and TCX programs under
//! BPF_PROG_TEST_RUN, against a floor program measured in the same run.
//!
//! Every measured iteration goes through `bench_harness` (bpf/bench): it
//! writes the original frame back, optionally turns it into a flow never
//! seen before, counts itself and tail-calls the program under test. The
//! harness's own cost is measured by tail-calling `bench_sink` (returns
//! XDP_TX, or TC_ACT_OK) in runs interleaved with the measured ones, and
//! subtracted pairwise. The dataplane's own per-VIP counters then prove that
//! every iteration took the intended path (the classifier's rows: its own
//! per-VIP, per-rule and per-group counters and `cls_event_map`).
//!
//! The code is split by family of rows, over one shared harness:
//! `harness` (the rig: loading, map set-up, the timing loop), `case` (one
//! row: its measurement, counter proof and output check), `forwarding`
//! (the entry point, [`run`], with the NAT/DSR forwarding and egress rows
//! it measures itself), `classifier`, `snat`, `probes` and `flow_filter`.

mod case;
mod classifier;
mod flow_filter;
mod forwarding;
mod harness;
mod probes;
mod snat;

pub use forwarding::run;
pub use harness::Opts;
