//! rivora-bench: makes "the fastest software L4 balancer" measurable.
//!
//! Five parts, each printed as a table and written together as markdown
//! (docs/benchmarks.md by default):
//!
//! 1. per-packet cost of xdp_ingress and tc_nat under BPF_PROG_TEST_RUN,
//!    against a floor program measured in the same run;
//! 2. real traffic through veths in namespaces: generator ceiling, plain
//!    routing, nftables DNAT and Rivora NAT back to back, plus TCP request
//!    and connection rates;
//! 3. Maglev slice build time, imbalance and disruption;
//! 4. the control plane at the spec's capacities (rivorad and the dataplane
//!    API), config-change-to-forwarding latency, rivorad's peak RSS, and its
//!    memory (peak RSS plus the BPF maps) with the default and with
//!    1,048,576-flow tables;
//! 5. the Kubernetes control plane against the test bed's real kube-apiserver
//!    and etcd: address assignment at scale (rivora-controller), EndpointSlice
//!    change to forwarding and start-up on a node agent serving 2,000
//!    Services.
//!
//! Every figure is reported next to a baseline measured in the same run.
//! Needs root. Run by hand: `cargo run --release -p rivora-bench`; never
//! part of `cargo test`. `RIVORA_BENCH_XDP_OBJECT=PATH` runs part 1 with
//! another build of xdp_ingress.o (an A/B against another commit).

mod control;
mod frames;
mod k8s;
mod machine;
mod maglevbench;
mod progrun;
mod report;
mod stats;
mod traffic;
mod util;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Parser;

use report::{Row, Section, Verdict};

/// Command line.
#[derive(Parser, Debug)]
#[command(
    name = "rivora-bench",
    about = "Rivora's benchmarks: per-packet program cost, real traffic on veth, Maglev, control plane, \
             Kubernetes control plane. \
             Needs root; prints a table per part and writes them as markdown.",
    after_help = "Environment: RIVORA_BENCH_XDP_OBJECT=PATH runs part 1 with another build of \
                  xdp_ingress.o (same map layouts) in place of the embedded one, for an interleaved \
                  A/B against another commit's program. RIVORA_BENCH_KEEP_WORK=1 keeps part 5's \
                  scratch directory (the controllers' and node agents' logs, with each pass's and \
                  apply's took_ms) instead of removing it."
)]
struct Args {
    /// Fewer runs and shorter windows (about a minute instead of 3-4); the figures are noisier.
    #[arg(long)]
    quick: bool,

    /// Markdown output file. Default: docs/benchmarks.md for a full run, target/rivora-bench.md
    /// with --only.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,

    /// Run only these parts: 1|progs, 2|traffic, 3|maglev, 4|control, 5|kubernetes, or
    /// sub-parts of part 5: 5a (address assignment), 5b (EndpointSlice change to forwarding),
    /// 5c (node-agent restart; runs 5b first), 5d (failovers), 5e (Gateway API),
    /// 5f (Services at scale on default flags) (comma-separated).
    #[arg(long, value_name = "PART", value_delimiter = ',')]
    only: Vec<String>,

    /// rivorad binary to benchmark. Default: the rivorad next to this binary, built with
    /// `cargo build --release -p rivorad` first when run from the workspace.
    #[arg(long, value_name = "PATH")]
    rivorad: Option<PathBuf>,

    /// rivora-controller binary for part 5. Default: the one next to this binary, built with
    /// `cargo build --release -p rivora-controller` first when run from the workspace.
    #[arg(long, value_name = "PATH")]
    controller: Option<PathBuf>,
}

/// The parts `--only` selects, and for part 5 the sub-parts (empty: all of them).
fn parse_parts(only: &[String]) -> Result<(Vec<u8>, Vec<char>)> {
    if only.is_empty() {
        return Ok((vec![1, 2, 3, 4, 5], Vec::new()));
    }
    let mut v = Vec::new();
    let mut k8s = Vec::new();
    let mut k8s_all = false;
    for p in only {
        let n = match p.trim() {
            "1" | "progs" => 1,
            "2" | "traffic" => 2,
            "3" | "maglev" => 3,
            "4" | "control" => 4,
            "5" | "kubernetes" => {
                k8s_all = true;
                5
            }
            sub if sub.len() == 2
                && sub.starts_with('5')
                && k8s::SUBPARTS.contains(&sub.as_bytes()[1].to_ascii_lowercase().into()) =>
            {
                k8s.push(char::from(sub.as_bytes()[1].to_ascii_lowercase()));
                5
            }
            other => bail!(
                "unknown part {other:?}: use 1|progs, 2|traffic, 3|maglev, 4|control, \
                 5|kubernetes, or one of part 5's sub-parts 5a..5{}",
                k8s::SUBPARTS.last().expect("part 5 has sub-parts")
            ),
        };
        if !v.contains(&n) {
            v.push(n);
        }
    }
    v.sort();
    if k8s_all {
        k8s.clear();
    } else {
        k8s.sort();
        k8s.dedup();
    }
    Ok((v, k8s))
}

/// A table that says a part (or sub-part) could not run, and why.
pub(crate) fn failed(title: &str, e: &anyhow::Error) -> Section {
    Section {
        title: title.into(),
        ratio_label: "-".into(),
        rows: vec![
            Row::info("part failed", "-")
                .not_run()
                .evidence(crate::util::short_error(e)),
        ],
        ..Default::default()
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rivora-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<()> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "rivora-bench loads BPF programs and builds network namespaces: run it as root \
             (e.g. sudo -E cargo run --release -p rivora-bench)"
        );
    }
    rivora_lab::install_interrupt_handler();
    let (parts, k8s_parts) = parse_parts(&args.only)?;
    let out = args.out.clone().unwrap_or_else(|| {
        if args.only.is_empty() {
            PathBuf::from("docs/benchmarks.md")
        } else {
            PathBuf::from("target/rivora-bench.md")
        }
    });
    let started = Instant::now();
    let date = machine::now_utc();
    let load_before = machine::loadavg();
    let command = util::command_line();
    let quick = args.quick;

    let mut sections = Vec::new();
    for part in parts {
        if rivora_lab::interrupted() {
            bail!("interrupted");
        }
        let t = Instant::now();
        let secs = match part {
            1 => {
                let opts = progrun::Opts {
                    runs: if quick { 5 } else { 15 },
                    repeat: if quick { 20_000 } else { 100_000 },
                    repeat_new: if quick { 2_000 } else { 3_000 },
                };
                // One pinned thread: test_run runs on the calling CPU.
                let cpu = machine::cpu_count().saturating_sub(1);
                let r = std::thread::spawn(move || {
                    let _ = machine::pin_current_thread(cpu);
                    progrun::run(opts)
                })
                .join()
                .map_err(|_| anyhow::anyhow!("part 1 panicked"))
                .and_then(|r| r);
                vec![r.unwrap_or_else(|e| failed("1. Per-packet cost of the programs", &e))]
            }
            2 => {
                let rivorad = util::rivorad_binary(args.rivorad.as_deref());
                vec![
                    rivorad
                        .and_then(|b| traffic::run(&b, quick))
                        .unwrap_or_else(|e| failed("2. Real traffic on veth", &e)),
                ]
            }
            3 => vec![maglevbench::run(quick).unwrap_or_else(|e| failed("3. Maglev", &e))],
            4 => {
                let rivorad = util::rivorad_binary(args.rivorad.as_deref());
                vec![
                    rivorad
                        .and_then(|b| control::run(&b, quick))
                        .unwrap_or_else(|e| failed("4. Control plane", &e)),
                ]
            }
            5 => {
                let bins = util::rivorad_binary(args.rivorad.as_deref()).and_then(|rivorad| {
                    Ok(k8s::Bins {
                        rivorad,
                        controller: util::controller_binary(args.controller.as_deref())?,
                    })
                });
                bins.and_then(|b| k8s::run(b, quick, &k8s_parts))
                    .unwrap_or_else(|e| vec![failed("5. Kubernetes control plane", &e)])
            }
            _ => unreachable!(),
        };
        for sec in secs {
            sec.print();
            sections.push(sec);
        }
        eprintln!("(part {part} took {:.1} s)", t.elapsed().as_secs_f64());
    }

    let md = render_markdown(
        &sections,
        &date,
        &command,
        &load_before,
        started.elapsed().as_secs_f64(),
    );
    if let Some(dir) = out.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, md)?;
    println!(
        "\nwrote {} ({:.0} s in all)",
        out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn render_markdown(
    sections: &[Section],
    date: &str,
    command: &str,
    load_before: &str,
    secs: f64,
) -> String {
    let mut md = String::new();
    md.push_str(include_str!("intro.md"));
    md.push_str("\n## This run\n\n");
    md.push_str(&format!("- Date: {date}\n"));
    md.push_str(&format!("- Command: `{command}` ({secs:.0} s)\n"));
    for l in machine::describe() {
        md.push_str(&format!("- {l}\n"));
    }
    md.push_str(&format!(
        "- Load average before / after: {load_before} / {} (the machine is shared: other work may \
         have run at the same time, which is why every figure sits next to a baseline measured \
         back to back with it)\n\n",
        machine::loadavg()
    ));
    // Summary of targets.
    let mut met = Vec::new();
    let mut missed = Vec::new();
    for s in sections {
        for r in &s.rows {
            match r.verdict {
                Verdict::Met => met.push(format!("{} ({}: {})", r.case, r.target, r.figure)),
                Verdict::Missed => missed.push(format!(
                    "{}: {} (target {}{})",
                    r.case,
                    r.figure,
                    r.target,
                    if r.ratio.is_empty() {
                        String::new()
                    } else {
                        format!(", ratio {}", r.ratio)
                    }
                )),
                _ => {}
            }
        }
    }
    md.push_str(&format!(
        "### Targets\n\n{} met, {} missed.\n\n",
        met.len(),
        missed.len()
    ));
    if !missed.is_empty() {
        md.push_str("Missed (the notes under each table say by how much and why):\n\n");
        for m in &missed {
            md.push_str(&format!("- {m}\n"));
        }
        md.push('\n');
    }
    for s in sections {
        md.push_str(&s.markdown());
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_parse() {
        assert_eq!(parse_parts(&[]).unwrap(), (vec![1, 2, 3, 4, 5], vec![]));
        assert_eq!(
            parse_parts(&["kubernetes".into()]).unwrap(),
            (vec![5], vec![])
        );
        assert_eq!(
            parse_parts(&["maglev".into(), "1".into()]).unwrap(),
            (vec![1, 3], vec![])
        );
        assert_eq!(
            parse_parts(&["5D".into(), "5a".into(), "2".into()]).unwrap(),
            (vec![2, 5], vec!['a', 'd'])
        );
        // Part 5 whole wins over a sub-part of it.
        assert_eq!(
            parse_parts(&["5d".into(), "5".into()]).unwrap(),
            (vec![5], vec![])
        );
        assert!(parse_parts(&["6".into()]).is_err());
        assert!(parse_parts(&["5z".into()]).is_err());
    }
}
