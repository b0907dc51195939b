//! Last ready endpoint gone to the BGP withdraw seen by the router: one node agent (`rivorad
//! --kubernetes --announce bgp`, the release binary as its shipped ServiceAccount) peers with
//! a real BIRD 2 in a namespace of its own, configured through a BGPPeer; its one Service has
//! one endpoint on the node. The endpoint's `ready` is flipped to false (and back) in the
//! EndpointSlice, and each flip is timed from just before the API write to BIRD's table
//! changing, read through BIRD's control socket.
//!
//! Why BIRD's own table: the withdraw is for the network, so it ends where a router has
//! dropped the route, not where rivorad decided to send the UPDATE.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use rivora_lab::bgp_peers::Bird;
use rivora_lab::{Netns, link};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::Measured;
use crate::k8s::fleet::{Fleet, vip_of};
use crate::k8s::harness::{Ctx, NodeAgent, apply, ms};
use crate::report::Row;
use crate::stats::{fmt_ratio, quantile, ratio};

/// The loadBalancerClass of this measurement's Service.
const CLASS: &str = "rivora.dev/bench-bgp";
/// The router's and the node's ASNs (eBGP).
const ROUTER_AS: u32 = 64500;
const NODE_AS: u32 = 64512;
/// The link between the node's namespace and the router's: node .1, router .2.
const NODE_ADDR: Ipv4Addr = Ipv4Addr::new(10, 252, 0, 1);
const ROUTER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 252, 0, 2);
/// The label the BGPPeer selects the node by.
const SELECT_LABEL: &str = "rivora.dev/bench-bgp";
/// How often BIRD's table is read.
const POLL: Duration = Duration::from_millis(5);
/// How long one flip may take to reach BIRD before the run fails (10x the budget).
const FLIP_DEADLINE: Duration = Duration::from_secs(3);
/// The node agent's batching of watch events, as it runs by default: its quiet time after an
/// event and the longest it waits after the first event of a burst (read from the product,
/// so the budget follows it).
fn agent_timing() -> (Duration, Duration) {
    let c = rivora_k8s_source::agent::Config::new("", Default::default());
    (c.debounce, c.max_delay)
}
/// The rest of the path: the watch event's delivery, the translation, rivorad's apply to the
/// maps, the UPDATE (the speaker sends at once: no MRAI) and BIRD's processing; milliseconds
/// each, 50 ms allowed.
const REST: Duration = Duration::from_millis(50);

/// Runs the last-endpoint-to-withdraw measurement (50 flips each way; 15 with --quick).
pub async fn run(ctx: &Ctx) -> Result<Measured> {
    let flips = if ctx.quick { 15 } else { 50 };
    let ns = rivora_kube_testbed::unique_name("bench-bgp");
    let token = ctx.rivorad_token(&ns).await?;
    let mut agent = NodeAgent::new(ctx, "bench-bgp", CLASS, &token).await?;
    let router = Netns::new("bk8r")?;
    link::veth(&agent.ns, "bgp0", &router, "bgp1")?;
    link::addr(&agent.ns, "bgp0", &format!("{NODE_ADDR}/30"))?;
    link::addr(&router, "bgp1", &format!("{ROUTER_ADDR}/30"))?;
    link::up(&agent.ns, "bgp0")?;
    link::up(&router, "bgp1")?;
    let dir = ctx.work.join(format!("bird-{ns}"));
    std::fs::create_dir_all(&dir)?;
    let bird = Bird::start(&router, &dir, &bird_config())?;

    Api::<Node>::all(ctx.admin.clone())
        .patch(
            &agent.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {SELECT_LABEL: ns}}})),
        )
        .await
        .context("labelling the Node")?;
    let peers: Api<rivora_k8s_api::BGPPeer> = Api::all(ctx.admin.clone());
    let peer = json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "BGPPeer",
        "metadata": {"name": ns},
        "spec": {
            "address": ROUTER_ADDR.to_string(), "peerASN": ROUTER_AS, "localASN": NODE_AS,
            "nodeSelector": {"matchLabels": {SELECT_LABEL: ns}},
        },
    });
    apply(&peers, peer).await?;
    let result = measure(ctx, &ns, &mut agent, &dir, flips).await;
    let bird_log = bird.log_text();
    let _ = peers.delete(&ns, &DeleteParams::default()).await;
    result.with_context(|| {
        format!(
            "rivorad: {}; BIRD: {}",
            agent.log_tail(),
            bird_log
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" / ")
        )
    })
}

/// BIRD 2: a passive eBGP session with the node, everything it learns kept in its table.
fn bird_config() -> String {
    format!(
        r#"router id {ROUTER_ADDR};
log stderr all;
protocol device {{ scan time 1; }}
protocol bgp node {{
    local {ROUTER_ADDR} as {ROUTER_AS};
    neighbor {NODE_ADDR} as {NODE_AS};
    passive on;
    ipv4 {{ import all; export none; }};
}}
"#
    )
}

async fn measure(
    ctx: &Ctx,
    ns: &str,
    agent: &mut NodeAgent,
    dir: &Path,
    flips: usize,
) -> Result<Measured> {
    // One Service (its address written as rivora-controller would) with one ready endpoint on
    // this node.
    let mut fleet = Fleet::new(ns, CLASS, &agent.name, 1);
    fleet.eps[0].truncate(1);
    fleet.populate(&ctx.admin).await?;
    let vip = vip_of(0);
    let t = Instant::now();
    agent
        .start(&ctx.bins.rivorad, &["--announce", "bgp", "--namespace", ns])
        .with_context(|| agent.log_tail())?;
    let mut bird = BirdCli::connect(&dir.join("bird.ctl")).await?;
    bird.until(vip, true, Duration::from_secs(60))
        .await
        .context("the first announcement")?;
    let first = t.elapsed();

    let slices: Api<EndpointSlice> = Api::namespaced(ctx.admin.clone(), ns);
    let (mut withdraw, mut announce, mut write_ms) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..flips {
        for ready in [false, true] {
            // A pause of 0-290 ms first, so the flips meet the agent at every point of its
            // once-a-second report.
            tokio::time::sleep(Duration::from_millis(
                (k as u64 * 37 + 100 * ready as u64) % 300,
            ))
            .await;
            let e = &mut fleet.eps[0][0];
            (e.ready, e.serving) = (ready, ready);
            let sent = Instant::now();
            fleet.write_slice(&slices, 0).await?;
            write_ms.push(ms(sent.elapsed()));
            let at = bird
                .until(vip, ready, FLIP_DEADLINE)
                .await
                .with_context(|| {
                    format!(
                        "flip {k}: endpoint ready={ready}; node: {:?}",
                        agent.log_tail().lines().last()
                    )
                })?;
            if ready { &mut announce } else { &mut withdraw }.push(ms(at - sent));
        }
    }
    Ok(report(&withdraw, &announce, &write_ms, first))
}

fn report(withdraw: &[f64], announce: &[f64], write_ms: &[f64], first: Duration) -> Measured {
    let (debounce, max_delay) = agent_timing();
    let budget = ms(max_delay + debounce + REST);
    let max = withdraw.iter().copied().fold(f64::NAN, f64::max);
    let (p50, p99) = (quantile(withdraw, 0.5), quantile(withdraw, 0.99));
    let target = format!(
        "< {budget:.0} ms (settle <= {:.0} + {:.0} ms, then {:.0} ms)",
        ms(max_delay),
        ms(debounce),
        ms(REST)
    );
    let mut m = Measured {
        method: format!(
            "Last ready endpoint to BGP withdraw: one node agent (the release rivorad, \
             `--kubernetes --announce bgp` as its shipped ServiceAccount, XDP on a veth) \
             peers over a veth of its own with BIRD 2 (Debian `bird2`, a passive eBGP \
             session, AS {NODE_AS} to AS {ROUTER_AS}), configured through a BGPPeer that \
             selects its Node. One LoadBalancer Service (ETP Cluster; its address written as \
             rivora-controller would) with one endpoint, on this node. {} times: the \
             endpoint's `ready` (and `serving`) set to false by a server-side apply of the \
             EndpointSlice, timed from just before the write to BIRD no longer having the \
             /32 (`show route for VIP` on BIRD's control socket, as birdc asks it, every {} \
             ms); then set back to true, timed to the route's return. Each flip waits 0-290 \
             ms first. Budget from the code: the node agent waits for {:.0} ms without \
             watch events, {:.0} ms at most after the first of a burst (so at most {:.0} ms \
             after the write), then translates and offers; rivorad applies the maps and \
             hands the routes to the speaker, which sends the UPDATE at once (no minimum \
             advertisement interval); {:.0} ms allowed for the event's delivery, that work \
             and BIRD. Baseline: the API write's own round trip, measured by the same \
             requests.",
            withdraw.len(),
            POLL.as_millis(),
            ms(debounce),
            ms(max_delay),
            ms(max_delay + debounce),
            ms(REST)
        ),
        ..Default::default()
    };
    let (w50, w99) = (quantile(write_ms, 0.5), quantile(write_ms, 0.99));
    m.rows.push(
        Row::info(
            "last ready endpoint unready to withdrawn in BIRD, p50",
            format!("{p50:.0} ms"),
        )
        .ratio(fmt_ratio(ratio(p50, budget)))
        .target(target.clone(), p50 < budget)
        .evidence(format!(
            "{} flips; API write p50 {w50:.1} ms (baseline); quiet-agent floor {:.0} ms (debounce)",
            withdraw.len(),
            ms(debounce)
        )),
    );
    m.rows.push(
        Row::info("  p99 / max", format!("{p99:.0} / {max:.0} ms"))
            .ratio(fmt_ratio(ratio(max, budget)))
            .target(target, max < budget)
            .evidence(format!("API write p99 {w99:.1} ms (baseline)")),
    );
    m.rows.push(
        Row::info(
            "endpoint ready again to route back in BIRD, p50 / p99",
            format!(
                "{:.0} / {:.0} ms",
                quantile(announce, 0.5),
                quantile(announce, 0.99)
            ),
        )
        .evidence(format!(
            "{} flips; first announcement {:.1} s after rivorad started (session set-up included)",
            announce.len(),
            first.as_secs_f64()
        )),
    );
    if max >= budget {
        m.notes.push(format!(
            "BGP withdraw: the slowest flip took {max:.0} ms, {:.0} ms over the {budget:.0} ms \
             budget (p99 {p99:.0} ms).",
            max - budget
        ));
    }
    m
}

/// BIRD's control socket, spoken to as birdc does: a command a line; each reply line starts
/// with a 4-digit code, `-` when more lines follow and a space on the last one.
///
/// Why not `birdc`: a process a poll would cost milliseconds of fork and exec every 5 ms, and
/// its start-up would blur the figure.
struct BirdCli {
    lines: Lines<BufReader<OwnedReadHalf>>,
    w: OwnedWriteHalf,
}

impl BirdCli {
    /// Connects and reads BIRD's greeting.
    async fn connect(sock: &Path) -> Result<BirdCli> {
        let s = UnixStream::connect(sock)
            .await
            .with_context(|| format!("connecting to {}", sock.display()))?;
        let (r, w) = s.into_split();
        let mut c = BirdCli {
            lines: BufReader::new(r).lines(),
            w,
        };
        c.reply().await?;
        Ok(c)
    }

    /// The lines of one reply.
    async fn reply(&mut self) -> Result<String> {
        let mut out = String::new();
        loop {
            let line = self
                .lines
                .next_line()
                .await?
                .ok_or_else(|| anyhow!("BIRD closed its control socket"))?;
            out.push_str(&line);
            out.push('\n');
            let b = line.as_bytes();
            if b.len() >= 4
                && b[..4].iter().all(u8::is_ascii_digit)
                && b.get(4).is_none_or(|c| *c == b' ')
            {
                return Ok(out);
            }
        }
    }

    /// Whether BIRD's table holds `vip`/32, and its answer.
    async fn has_route(&mut self, vip: Ipv4Addr) -> Result<(bool, String)> {
        self.w
            .write_all(format!("show route for {vip}\n").as_bytes())
            .await?;
        let out = self.reply().await?;
        Ok((out.contains(&format!("{vip}/32")), out))
    }

    /// Polls every [`POLL`] until the route to `vip` is there (`present`) or gone; the moment
    /// it was first seen so.
    async fn until(&mut self, vip: Ipv4Addr, present: bool, limit: Duration) -> Result<Instant> {
        let deadline = Instant::now() + limit;
        loop {
            let (has, out) = self.has_route(vip).await?;
            let now = Instant::now();
            if has == present {
                return Ok(now);
            }
            if now >= deadline {
                bail!(
                    "BIRD's route to {vip} not {} within {limit:?}; last answer: {}",
                    if present { "there" } else { "gone" },
                    out.trim()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
