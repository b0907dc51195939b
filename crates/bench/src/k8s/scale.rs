//! 5f. Services at cluster scale on default flags: a node agent (the release rivorad,
//! `--kubernetes` as its shipped ServiceAccount, with the chart's default flags: no
//! `--maglev-table-size`) that is already in sync takes a burst of 1,000 Services x 5 endpoints,
//! then, on a fresh agent, 4,096 x 3 (the spec's VIP capacity). Reported: how long until every
//! VIP forwards to exactly its endpoints, the applies that took, the balance the shared Maglev
//! table gives (slice sizes, worst imbalance), how full the table is, and memory.
//!
//! Why: with the chart's former 65,537-slot default a few hundred Services froze every node
//! (issue 40); the default table and slices that follow each VIP's share are what users get,
//! so they are what is measured.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rivora_dataplane::view::PinnedView;

use super::endpoints::{all_forwarding, initial_sync};
use super::fleet::Fleet;
use super::harness::{Ctx, NodeAgent, hwm_mib};
use crate::report::{Row, Section};
use crate::stats::quantile;

/// The section's title.
pub const TITLE: &str = "5f. Kubernetes: Services at scale on default flags";

/// One burst's figures.
struct Burst {
    services: usize,
    endpoints: usize,
    backends: usize,
    written: Duration,
    forwarding: Duration,
    applies: Vec<f64>,
    table: u32,
    used: u64,
    slice_min: u32,
    slice_max: u32,
    worst: f64,
    median_worst: f64,
    refused: u64,
    hwm: f64,
    memlock: u64,
}

/// Starts a fresh agent on default flags, waits for its initial sync, writes the burst and
/// waits until every VIP forwards as its slice says.
async fn burst(ctx: &Ctx, services: usize, endpoints: usize) -> Result<Burst> {
    let tag = format!("bench-scale-{services}");
    let class = format!("rivora.dev/{tag}");
    let ns = rivora_kube_testbed::unique_name(&tag);
    let token = ctx.rivorad_token(&ns).await?;
    let mut agent = NodeAgent::new(ctx, &tag, &class, &token).await?;
    // The chart's defaults (deploy/chart values.yaml): a persistent datapath and the flow
    // table it names; the Maglev table is rivorad's default.
    let flags = [
        "--namespace",
        &ns,
        "--persist-datapath",
        "--flow-table-size=65536",
    ];
    let t = Instant::now();
    agent
        .start(&ctx.bins.rivorad, &flags)
        .with_context(|| agent.log_tail())?;
    initial_sync(&agent, t).await?;
    let fleet = Fleet::sized(&ns, &class, &agent.name, services, endpoints);
    let view: PinnedView = agent.view()?;
    let mark = agent.log_mark();
    let t = Instant::now();
    let written = fleet.populate(&ctx.admin).await?;
    let forwarding = all_forwarding(&view, &fleet, t)
        .await
        .with_context(|| agent.log_tail())?;
    let applies = agent.took_ms_since(mark, "applied:")?;
    let status = agent.api().status().await?;
    let vips = agent.api().vips().await?;
    if vips.len() < services {
        bail!("{} VIPs programmed of {services}", vips.len());
    }
    let k = agent.kubernetes().await.map_err(anyhow::Error::msg)?;
    let mut worsts: Vec<f64> = vips.iter().map(|v| v.worst_imbalance_pct).collect();
    worsts.sort_by(f64::total_cmp);
    let pid = agent.pid()?;
    let burst = Burst {
        services,
        endpoints,
        backends: fleet.distinct_backends(),
        written,
        forwarding,
        applies,
        table: status.maglev_table_size,
        used: status.maglev_slots_used,
        slice_min: vips.iter().map(|v| v.maglev_size).min().unwrap_or(0),
        slice_max: vips.iter().map(|v| v.maglev_size).max().unwrap_or(0),
        worst: worsts.last().copied().unwrap_or(0.0),
        median_worst: quantile(&worsts, 0.5),
        refused: k.services.get("refused").copied().unwrap_or(0),
        hwm: hwm_mib(pid)?,
        memlock: rivora_lab::memory::BpfMaps::of_process(pid, Some(&agent.pin_dir))?.memlock(),
    };
    agent.stop()?;
    Ok(burst)
}

/// Runs 5f.
pub async fn run(ctx: &Ctx) -> Result<Section> {
    let sizes: &[(usize, usize)] = if ctx.quick {
        &[(300, 5), (1_000, 3)]
    } else {
        &[(1_000, 5), (4_096, 3)]
    };
    let mut sec = Section {
        title: TITLE.into(),
        ratio_label: String::new(),
        method: "For each size, a fresh node agent (the release rivorad, `--kubernetes` as its \
                 shipped ServiceAccount and RBAC, XDP on a veth, with the chart's default flags: \
                 `--persist-datapath --flow-table-size=65536` and no `--maglev-table-size`, so \
                 rivorad's default table) completes its initial sync on an empty class; then \
                 the benchmark creates every LoadBalancer Service, writes its status (as \
                 rivora-controller) and its one EndpointSlice (as the controller-manager), 32 \
                 writes in flight: one burst. Endpoint 0 of each Service is a pod of its own, \
                 the others are pods backing 5 Services each. Timed from the first write until \
                 every VIP's new-flow pick, read through rivorad's pins, equals its endpoints. \
                 Applies: rivorad's log's took_ms of each apply during the burst. Balance: each \
                 VIP's worst deviation of a backend's share of its Maglev slice from the ideal \
                 (`rivoractl vips`). Memory: rivorad's VmHWM at the end; BPF maps by their \
                 memlock."
            .into(),
        ..Default::default()
    };
    for &(services, endpoints) in sizes {
        let b = burst(ctx, services, endpoints)
            .await
            .with_context(|| format!("{services} Services x {endpoints} endpoints"))?;
        let label = format!("{} x {}", b.services, b.endpoints);
        sec.rows.push(
            Row::info(
                format!("{label}: burst written, then all forwarding"),
                format!(
                    "{:.1} s, {:.1} s",
                    b.written.as_secs_f64(),
                    b.forwarding.as_secs_f64()
                ),
            )
            .target("all programmed, none refused", b.refused == 0)
            .evidence(format!(
                "{} Services, {} EndpointSlices, {} distinct backends; {} refused",
                b.services, b.services, b.backends, b.refused
            )),
        );
        let max_apply = b.applies.iter().copied().fold(0.0, f64::max);
        sec.rows.push(
            Row::info(
                format!("{label}: applies during the burst, p50 / max"),
                format!("{:.1} / {max_apply:.1} ms", quantile(&b.applies, 0.5)),
            )
            .evidence(format!(
                "{} applies, {:.0} ms in all",
                b.applies.len(),
                b.applies.iter().sum::<f64>()
            )),
        );
        sec.rows.push(
            Row::info(
                format!("{label}: worst imbalance, median VIP / worst VIP"),
                format!("{:.2}% / {:.2}%", b.median_worst, b.worst),
            )
            .evidence(format!(
                "slices of {}..{} slots; the table holds {} of {} slots in slices ({:.1}%)",
                b.slice_min,
                b.slice_max,
                b.used,
                b.table,
                100.0 * b.used as f64 / f64::from(b.table.max(1))
            )),
        );
        sec.rows.push(
            Row::info(
                format!("{label}: rivorad peak RSS (VmHWM), BPF maps"),
                format!(
                    "{:.1} MiB, {:.1} MiB",
                    b.hwm,
                    b.memlock as f64 / (1024.0 * 1024.0)
                ),
            )
            .target("RSS < 512 MiB (the chart's limit)", b.hwm < 512.0)
            .evidence(format!(
                "BPF maps are kernel memory, outside the RSS; the Maglev table is {:.1} MiB \
                 of it",
                f64::from(b.table) * 4.0 / (1024.0 * 1024.0)
            )),
        );
    }
    Ok(sec)
}
