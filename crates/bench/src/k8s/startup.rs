//! 5c. Node-agent restart with adopted VIPs: the agent of 5b (2,000 VIPs, `--persist-datapath`)
//! is stopped (SIGTERM), one EndpointSlice changes while it is down, and it starts again; timed
//! to its API socket, to its initial sync complete (the gate that removes VIPs nothing claims),
//! and to that change in the datapath. Beside each, the same agent's cold start in 5b, and a
//! check that the VIPs kept their backends in the datapath while no rivorad ran.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;

use super::endpoints::{Serving, all_forwarding, initial_sync, until_forwarding};
use super::fleet::{Ep, vip_key};
use super::harness::{Ctx, ms};
use crate::report::{Row, Section};
use crate::stats::{fmt_ratio, ratio};

/// VIPs checked in the datapath while the agent is down (spread over all of them).
const SAMPLES: usize = 100;

/// Runs 5c on 5b's agent.
pub async fn run(ctx: &Ctx, serving: &mut Serving) -> Result<Section> {
    let Serving {
        agent,
        fleet,
        flags,
        cold,
    } = serving;
    let services = fleet.len();
    let step = (services / SAMPLES).max(1);
    let samples: Vec<usize> = (0..services).step_by(step).collect();

    agent.stop().context("stopping rivorad (SIGTERM)")?;
    // While no rivorad runs: the pinned datapath still holds every sampled VIP's backends.
    let view = agent.view()?;
    let mut kept = 0;
    for &s in &samples {
        if view.new_flow_backends(&vip_key(s))?.as_ref() == Some(&fleet.expected(s)) {
            kept += 1;
        }
    }
    // The change made while it is down: a new ready endpoint on the last Service.
    let changed = services - 1;
    let pod = fleet.spare_pod();
    fleet.eps[changed].push(Ep {
        pod,
        ready: true,
        serving: true,
        terminating: false,
    });
    let slices: Api<EndpointSlice> = Api::namespaced(ctx.admin.clone(), &fleet.ns);
    fleet.write_slice(&slices, changed).await?;

    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let t = Instant::now();
    let to_socket = agent
        .start(&ctx.bins.rivorad, &flag_refs)
        .with_context(|| agent.log_tail())?;
    let view = agent.view()?;
    let to_change = until_forwarding(&view, fleet, changed, Duration::from_secs(120))
        .await
        .with_context(|| agent.log_tail())?
        - t;
    let to_sync = initial_sync(agent, t).await?;
    // Everything else is as it was (nothing adopted was lost by the restart).
    let to_all = all_forwarding(&view, fleet, t).await?;
    let status = agent.kubernetes().await.map_err(anyhow::Error::msg)?;
    let programmed = status.services.get("programmed").copied().unwrap_or(0);

    let mut sec = Section {
        title: "5c. Kubernetes: node agent restart with adopted VIPs".into(),
        ratio_label: "vs cold start".into(),
        method: format!(
            "5b's node agent ({services} VIPs, `--persist-datapath`) stopped with SIGTERM; while \
             it was down, {} sampled VIPs were read through the pins (their new-flow backends \
             unchanged) and one EndpointSlice changed (a ready endpoint added to the last \
             Service). Then the same rivorad started again, adopting the pinned maps and \
             links. Times from the exec: to its API socket (polled every 50 ms), to its status \
             saying initial sync complete (polled every 20 ms), to the change made while it \
             was down showing in the datapath's new-flow pick (polled every 1 ms). Baseline: \
             the same agent's cold start in 5b (empty pins, same {services} Services already \
             in the API server).",
            samples.len()
        ),
        ..Default::default()
    };
    let [cold_socket, cold_sync, cold_all] = *cold;
    sec.rows.push(
        Row::info("restart to API socket", format!("{:.0} ms", ms(to_socket)))
            .ratio(fmt_ratio(ratio(ms(to_socket), ms(cold_socket))))
            .evidence(format!("cold start {:.0} ms", ms(cold_socket))),
    );
    sec.rows.push(
        Row::info(
            "restart to initial sync complete",
            format!("{:.0} ms", ms(to_sync)),
        )
        .ratio(fmt_ratio(ratio(ms(to_sync), ms(cold_sync))))
        .evidence(format!("cold start {:.0} ms", ms(cold_sync))),
    );
    sec.rows.push(
        Row::info(
            "restart to the first change programmed",
            format!("{:.0} ms", ms(to_change)),
        )
        .ratio(fmt_ratio(ratio(ms(to_change), ms(cold_all))))
        .evidence(format!(
            "the slice written while rivorad was down; cold start to all {services} VIPs \
             forwarding {:.0} ms",
            ms(cold_all)
        )),
    );
    sec.rows.push(
        Row::info(
            "VIPs forwarding while rivorad was down",
            format!("{kept} of {}", samples.len()),
        )
        .target("all", kept == samples.len())
        .evidence(format!(
            "sampled every {step}th VIP; after the restart all {services} matched again \
             ({:.0} ms), {programmed} Services programmed",
            ms(to_all)
        )),
    );
    if kept != samples.len() {
        sec.notes.push(format!(
            "With rivorad stopped, {} of {} sampled VIPs had lost their backends in the pinned \
             datapath: --persist-datapath did not keep them forwarding (a defect).",
            samples.len() - kept,
            samples.len()
        ));
    }
    Ok(sec)
}
