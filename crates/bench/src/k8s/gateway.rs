//! 5e. Gateway API at scale: 1,000 Gateways x 2 listeners (80/TCP with a TCPRoute, 53/UDP with a
//! UDPRoute) created in bursts of 50 on the test bed's real API server serving Gateway API's
//! own v1.6 standard CRDs, served by the real rivora-controller (address, Gateway, listener
//! and route status) and one real node agent (the VIPs). Timed per Gateway from its creation
//! to both routes `Accepted`, to both VIPs forwarding (read through the agent's pins) and to
//! `Programmed` (which the controller sets from the node's report), and for the whole set from
//! the last creation.

mod objects;
mod record;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use rivora_k8s_api::{AddressPool, RivoraNode};
use rivora_kube_testbed::GatewayChannel;
use rivora_kube_testbed::audit::{AuditCursor, count_of};
use serde_json::json;

use super::harness::{
    Controller, Ctx, Launch, NodeAgent, apply, cpu_secs, hwm_mib, ms, wait_until,
};
use crate::report::{Row, Section};
use crate::stats::{fmt_ratio, quantile, ratio};
use objects::{Apis, BACKENDS, ENDPOINTS, Listener, WARM_UP, gateway, gateway_name, gw_api, route};
use record::{Shared, Times, WARM, Watched, backend_of};

/// The table's title.
pub const TITLE: &str = "5e. Kubernetes: Gateway API at scale";
/// Gateways per burst, all created concurrently.
const BURST: usize = 50;
/// The AddressPool the Gateways take their addresses from (1,024 addresses).
const POOL_CIDR: &str = "10.180.0.0/22";
/// The controller's and agent's loadBalancerClass (no Service of it exists here).
const LB_CLASS: &str = "rivora.dev/bench-gateway";
/// The 5a yardstick: everything done within this of the last creation.
const TARGET_AFTER_LAST: Duration = Duration::from_secs(10);
/// How long Programmed may lag behind the routes and VIPs before the run stops waiting for
/// it (it follows the node's report, written at most once a second).
const PROGRAMMED_GRACE: Duration = Duration::from_secs(30);

/// This run's names.
struct Run {
    /// The namespace of the Gateways, routes and backends (rivorad's own too).
    ns: String,
    /// The controller's Lease namespace (its ServiceAccount lives there).
    lease_ns: String,
    /// The GatewayClass's controllerName (both binaries' `--gateway-controller-name`).
    controller_name: String,
    /// The GatewayClass.
    class: String,
    /// The AddressPool.
    pool: String,
}

/// Runs 5e: 1,000 Gateways (100 with --quick).
pub async fn run(ctx: &Ctx) -> Result<Section> {
    let total = if ctx.quick { 100 } else { 1_000 };
    ctx.bed
        .install_gateway_api(GatewayChannel::Standard)
        .await
        .context("installing Gateway API's standard CRDs")?;
    let ns = rivora_kube_testbed::unique_name("bench-gw");
    let run = Run {
        lease_ns: rivora_kube_testbed::unique_name("bench-gw-ctl"),
        controller_name: format!("rivora.dev/{ns}"),
        class: format!("gc-{ns}"),
        pool: format!("pool-{ns}"),
        ns,
    };
    rivora_kube_testbed::ensure_namespace(&ctx.admin, &run.ns).await?;
    let kubeconfig = ctx.controller_kubeconfig(&run.lease_ns).await?;
    let token = ctx.rivorad_token(&run.ns).await?;
    let mut agent = NodeAgent::new(ctx, "bench-gw", LB_CLASS, &token).await?;
    let result = measure(ctx, &run, &mut agent, &kubeconfig, total).await;
    let cleaned = cleanup(ctx, &run, &mut agent).await;
    let sec = result?;
    cleaned?;
    Ok(sec)
}

/// The GatewayClass, the AddressPool, and the backend Services with their EndpointSlices.
async fn populate(ctx: &Ctx, run: &Run, node: &str) -> Result<()> {
    let admin = &ctx.admin;
    apply(
        &gw_api(admin, None, "GatewayClass", "gatewayclasses"),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
               "metadata": {"name": run.class},
               "spec": {"controllerName": run.controller_name}}),
    )
    .await?;
    apply(
        &Api::<AddressPool>::all(admin.clone()),
        json!({"apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
               "metadata": {"name": run.pool},
               "spec": {"addresses": [POOL_CIDR], "autoAssign": false}}),
    )
    .await?;
    let services: Api<Service> = Api::namespaced(admin.clone(), &run.ns);
    let slices: Api<EndpointSlice> = Api::namespaced(admin.clone(), &run.ns);
    for k in 0..BACKENDS {
        for l in Listener::BOTH {
            let (svc, slice) = objects::backend(k, l, node);
            apply(&services, svc).await?;
            apply(&slices, slice).await?;
        }
    }
    Ok(())
}

/// Creates one object; a connection dropped before an answer is tried again (up to 3 times),
/// and then an AlreadyExists means the first try got through. Returns the round trip.
async fn create(api: &Api<DynamicObject>, obj: &DynamicObject) -> Result<Duration> {
    let t = Instant::now();
    let mut tries = 0;
    loop {
        tries += 1;
        match api.create(&PostParams::default(), obj).await {
            Ok(_) => return Ok(t.elapsed()),
            Err(kube::Error::Api(e)) if e.code == 409 && tries > 1 => return Ok(t.elapsed()),
            Err(e @ kube::Error::Api(_)) => return Err(e.into()),
            Err(e) if tries >= 3 => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Creates Gateway `name` and then its two routes (to backend `k`) at once; returns when the
/// last create was answered and the three round trips.
async fn create_gateway(
    apis: &Apis,
    run: &Run,
    name: &str,
    k: usize,
) -> Result<(Instant, [Duration; 3])> {
    let gw = create(&apis.gateways, &gateway(name, &run.class, &run.pool)?)
        .await
        .with_context(|| format!("creating Gateway {name}"))?;
    let one = |l: Listener| async move {
        create(apis.routes(l), &route(name, l, k)?)
            .await
            .with_context(|| format!("creating the {} of Gateway {name}", l.route_kind()))
    };
    let (tcp, udp) = futures::try_join!(one(Listener::Tcp), one(Listener::Udp))?;
    Ok((Instant::now(), [gw, tcp, udp]))
}

/// The watches and the pin poller, stopped when dropped.
struct Recorder {
    times: Shared,
    watches: Vec<tokio::task::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    poller: Option<std::thread::JoinHandle<()>>,
}

impl Recorder {
    fn start(apis: &Apis, controller_name: &str, pin_dir: &Path) -> Recorder {
        let times: Shared = Arc::new(Mutex::new(Times::default()));
        let watch = |api: &Api<DynamicObject>, what| {
            tokio::spawn(record::watch(
                api.clone(),
                what,
                controller_name.to_string(),
                Arc::clone(&times),
            ))
        };
        let watches = vec![
            watch(&apis.gateways, Watched::Gateways),
            watch(&apis.tcp, Watched::Routes(Listener::Tcp)),
            watch(&apis.udp, Watched::Routes(Listener::Udp)),
        ];
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (pins, t, stop) = (pin_dir.to_path_buf(), Arc::clone(&times), Arc::clone(&stop));
            std::thread::spawn(move || record::poll_vips(pins, t, stop))
        };
        Recorder {
            times,
            watches,
            stop,
            poller: Some(poller),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in &self.watches {
            w.abort();
        }
        if let Some(p) = self.poller.take() {
            let _ = p.join();
        }
    }
}

/// What is still missing for Gateway `g`, for errors.
fn missing(t: &Times, g: usize) -> String {
    let name = if g == WARM {
        WARM_UP.to_string()
    } else {
        gateway_name(g)
    };
    let mut out = format!("{name}: address {:?}", t.addresses.get(&g));
    for l in Listener::BOTH {
        if !t.accepted.contains_key(&(g, l)) {
            out += &format!("; {} not Accepted", l.route_kind());
        }
        if !t.forwarding.contains_key(&(g, l)) {
            out += &format!("; VIP {:?}", t.vip_seen.get(&(g, l)));
        }
    }
    if !t.programmed.contains_key(&g) {
        out += &format!("; Programmed {:?}", t.not_programmed.get(&g));
    }
    if let Some(why) = &t.poller_failed {
        out += &format!("; pin poller: {why}");
    }
    out
}

async fn measure(
    ctx: &Ctx,
    run: &Run,
    agent: &mut NodeAgent,
    kubeconfig: &Path,
    total: usize,
) -> Result<Section> {
    populate(ctx, run, &agent.name).await?;
    // rivorad's default flags (the chart's): its default Maglev table holds every slice.
    let flags = [
        "--namespace",
        &run.ns,
        "--gateway-controller-name",
        &run.controller_name,
    ];
    agent
        .start(&ctx.bins.rivorad, &flags)
        .with_context(|| agent.log_tail())?;
    // Its own controllerName: the stopped node agents of earlier sub-parts still count as
    // Ready for a while and would hold Programmed back for the default one.
    let launch = Launch {
        id: "bench-gw-ctl",
        class: LB_CLASS,
        lease_secs: 15,
        grace_secs: 5,
        extra: &["--gateway-controller-name", &run.controller_name],
    };
    let mut controller = Controller::launch(ctx, kubeconfig, &run.lease_ns, &launch)?;
    let apis = Apis::new(&ctx.admin, &run.ns);
    let rec = Recorder::start(&apis, &run.controller_name, &agent.pin_dir);
    let times = Arc::clone(&rec.times);

    // Warm-up: one Gateway through the whole path, so the figures below include neither the
    // controller's start and election nor the agent's initial sync.
    create_gateway(&apis, run, WARM_UP, backend_of(WARM)).await?;
    wait_until(
        "the warm-up Gateway: Programmed, routes Accepted, VIPs forwarding",
        Duration::from_secs(120),
        || {
            let t = Arc::clone(&times);
            async move {
                let t = t.lock().unwrap();
                let done = t.programmed.contains_key(&WARM)
                    && Times::both(&t.accepted, WARM).is_some()
                    && Times::both(&t.forwarding, WARM).is_some();
                if done { Ok(()) } else { Err(missing(&t, WARM)) }
            }
        },
    )
    .await
    .with_context(|| format!("{}; rivorad: {}", controller.why(), agent.log_tail()))?;

    let ctl_user = Ctx::sa_user(&run.lease_ns, "rivora-controller");
    let node_user = Ctx::sa_user(&run.ns, "rivorad");
    let mut audit = AuditCursor::at_end(&ctx.bed.audit_log())?;
    let agent_pid = agent.pid()?;
    let (cpu0, agent_cpu0) = (cpu_secs(controller.pid())?, cpu_secs(agent_pid)?);
    let t0 = Instant::now();
    let mut create_ms = Vec::with_capacity(3 * total);
    for burst in 0..total.div_ceil(BURST) {
        let started = Instant::now();
        let range = burst * BURST..((burst + 1) * BURST).min(total);
        let results: Vec<Result<(usize, Instant, [Duration; 3])>> = futures::stream::iter(range)
            .map(|g| {
                let apis = &apis;
                async move {
                    let (at, took) =
                        create_gateway(apis, run, &gateway_name(g), backend_of(g)).await?;
                    Ok((g, at, took))
                }
            })
            .buffer_unordered(BURST)
            .collect()
            .await;
        for r in results {
            let (g, at, took) = r?;
            times.lock().unwrap().created.insert(g, at);
            create_ms.extend(took.map(ms));
        }
        // The next burst 1 s after this one started (or at once if it took longer), as 5a.
        if let Some(rest) = Duration::from_secs(1).checked_sub(started.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
    let last_created = Instant::now();
    let creating = last_created - t0;

    let first_missing = |t: &Times, done: &dyn Fn(&Times, usize) -> bool| {
        (0..total)
            .find(|g| !done(t, *g))
            .map_or(String::new(), |g| missing(t, g))
    };
    let deadline = Duration::from_secs(if ctx.quick { 120 } else { 300 });
    let routes_and_vips = wait_until(
        "every route Accepted and every VIP forwarding",
        deadline,
        || {
            let t = Arc::clone(&times);
            async move {
                let t = t.lock().unwrap();
                let (acc, fwd, _) = t.counts(total);
                if acc == total && fwd == total {
                    Ok(())
                } else {
                    let both = |t: &Times, g| {
                        Times::both(&t.accepted, g).is_some()
                            && Times::both(&t.forwarding, g).is_some()
                    };
                    Err(format!(
                        "{acc} of {total} Gateways with both routes Accepted, {fwd} with both \
                         VIPs forwarding; first missing {}",
                        first_missing(&t, &both)
                    ))
                }
            }
        },
    )
    .await;
    let programmed = match &routes_and_vips {
        Ok(()) => {
            wait_until("every Gateway Programmed", PROGRAMMED_GRACE, || {
                let t = Arc::clone(&times);
                async move {
                    let t = t.lock().unwrap();
                    let n = t.counts(total).2;
                    if n == total {
                        Ok(())
                    } else {
                        let prog = |t: &Times, g| t.programmed.contains_key(&g);
                        Err(format!(
                            "{n} of {total} Programmed; first missing {}",
                            first_missing(&t, &prog)
                        ))
                    }
                }
            })
            .await
        }
        Err(_) => Ok(()),
    };
    let cpu = cpu_secs(controller.pid())? - cpu0;
    let agent_cpu = cpu_secs(agent_pid)? - agent_cpu0;
    let hwm = hwm_mib(controller.pid())?;
    let agent_hwm = hwm_mib(agent_pid)?;
    routes_and_vips
        .with_context(|| format!("{}; rivorad: {}", controller.why(), agent.log_tail()))?;
    let requests = audit.take()?;
    let by_controller = count_of(&requests, &ctl_user);
    let by_node = count_of(&requests, &node_user);
    let report = Api::<RivoraNode>::all(ctx.admin.clone())
        .get(&agent.name)
        .await
        .ok()
        .and_then(|n| n.status)
        .map(|s| (s.gateways.len(), s.gateways_total));
    drop(rec);

    let t = times.lock().unwrap();
    let figures = Figures::of(&t, total, last_created)?;
    let mut sec = Section {
        title: TITLE.into(),
        ratio_label: "vs baseline".into(),
        method: format!(
            "Gateway API v1.6 standard CRDs (Gateway API's own) on the test bed's real \
             kube-apiserver and etcd. One GatewayClass of a controllerName of this run's, one \
             AddressPool ({POOL_CIDR}, requested by annotation), {BACKENDS} backend Services per \
             protocol with one EndpointSlice of {ENDPOINTS} ready endpoints each. {total} \
             Gateways, each with listeners 80/TCP and 53/UDP and one route per listener (a \
             TCPRoute and a UDPRoute, to backend Services in turn), created in {} bursts of \
             {BURST} (a burst's Gateways at once: the Gateway, then its two routes together; a \
             burst starts 1 s after the previous one started), after a warm-up Gateway. One \
             rivora-controller (the release binary, as its shipped ServiceAccount and RBAC, \
             `--gateway-controller-name` of this run's) and one node agent (the release \
             rivorad, `--kubernetes` as its shipped ServiceAccount, XDP on a veth, otherwise \
             on its default flags). A Gateway counts as created when its last create \
             was answered. Watches in the benchmark record when each route first shows \
             Accepted=True from our controller for its Gateway, and when each Gateway first \
             shows Programmed=True for its generation (the controller sets it from the node's \
             RivoraNode report); a thread polls the agent's pins every 20 ms \
             (PinnedView, as 5b) until the VIP of each Gateway address and listener forwards \
             to exactly its backend's endpoints. CPU from /proc/PID/stat from the first \
             creation to the end; memory is VmHWM; requests are counted from the API server's \
             audit log. No target in the issue: the 5a yardsticks (done within 10 s of the \
             last creation, controller < 128 MiB) are used. Baselines: the API server's own \
             create round trip for the same objects, and the fewest status writes possible.",
            total.div_ceil(BURST)
        ),
        ..Default::default()
    };
    let (c50, c99) = (quantile(&create_ms, 0.5), quantile(&create_ms, 0.99));
    for (what, v) in [
        ("creation to both routes Accepted", &figures.to_accepted),
        ("creation to both VIPs forwarding", &figures.to_forwarding),
        ("creation to Programmed", &figures.to_programmed),
    ] {
        let (p50, p99) = (quantile(v, 0.5), quantile(v, 0.99));
        sec.rows.push(
            Row::info(
                format!("{what}, p50 / p99"),
                format!("{p50:.0} / {p99:.0} ms"),
            )
            .ratio(fmt_ratio(ratio(p99, c99)))
            .evidence(format!(
                "{} Gateways; ratio of p99s; baseline: create request p50 {c50:.1} / \
                     p99 {c99:.1} ms ({} creates)",
                v.len(),
                create_ms.len()
            )),
        );
    }
    let after = |d: Option<Duration>, what: &str, row: &str| {
        let row = Row::info(
            format!("{row}, after the last creation"),
            d.map_or("never".into(), |d| format!("{:.2} s", d.as_secs_f64())),
        )
        .target("<= 10 s (5a's)", d.is_some_and(|d| d <= TARGET_AFTER_LAST));
        row.evidence(format!(
            "{what}; creating took {:.1} s (baseline)",
            creating.as_secs_f64()
        ))
    };
    sec.rows.push(after(
        Some(figures.last_accepted),
        &format!("{} routes", 2 * total),
        "last route Accepted",
    ));
    sec.rows.push(after(
        Some(figures.last_forwarding),
        &format!(
            "{} VIPs on {} distinct addresses",
            2 * total,
            figures.addresses
        ),
        "last VIP forwarding",
    ));
    let reported = report.map_or("no RivoraNode report".into(), |(n, of)| {
        format!("the node's RivoraNode lists {n} of its {of} Gateways")
    });
    sec.rows.push(after(
        figures.last_programmed,
        &format!(
            "{} of {total} Programmed; {reported}",
            figures.to_programmed.len()
        ),
        "last Gateway Programmed",
    ));
    sec.rows.push(
        Row::info("controller CPU", format!("{cpu:.1} s")).evidence(format!(
            "{:.2} ms per Gateway (2 listeners, 2 routes)",
            cpu * 1e3 / total as f64
        )),
    );
    sec.rows.push(
        Row::info("controller peak RSS (VmHWM)", format!("{hwm:.1} MiB"))
            .target("< 128 MiB (5a's)", hwm < 128.0)
            .evidence(format!(
                "{} Gateways, {} routes, {} Services in its caches",
                total + 1,
                2 * (total + 1),
                2 * BACKENDS
            )),
    );
    sec.rows.push(
        Row::info(
            "node agent peak RSS (VmHWM) / CPU",
            format!("{agent_hwm:.1} MiB / {agent_cpu:.1} s"),
        )
        .evidence(format!("{} Gateway VIPs programmed", 2 * (total + 1))),
    );
    let status_writes: u64 = by_controller
        .iter()
        .filter(|(k, _)| {
            ["gateways/status", "tcproutes/status", "udproutes/status"]
                .iter()
                .any(|r| k.ends_with(&format!(" {r}")))
                && !k.starts_with("get ")
        })
        .map(|(_, v)| *v)
        .sum();
    let floor = 4 * total as u64;
    sec.rows.push(
        Row::info(
            "controller status writes (Gateways, routes)",
            format!("{status_writes}"),
        )
        .ratio(fmt_ratio(ratio(status_writes as f64, floor as f64)))
        .evidence(format!(
            "baseline {floor}: per Gateway two (its address, which the node needs, then \
                 Programmed) and one per route (audit log)"
        )),
    );
    for (who, counts) in [("controller", &by_controller), ("node agent", &by_node)] {
        sec.rows.push(
            Row::info(
                format!("{who} API requests, all"),
                format!("{}", counts.values().sum::<u64>()),
            )
            .evidence(summary(counts)),
        );
    }
    if let Err(e) = programmed {
        let mut note = format!(
            "Not every Gateway became Programmed within {PROGRAMMED_GRACE:?} of the last route \
             Accepted and VIP forwarding: {e:#}."
        );
        if let Some((n, of)) = report {
            note += &format!(" The node's RivoraNode lists {n} of its {of} Gateways.");
        }
        sec.notes.push(note);
    }
    for (what, d) in [
        ("route Accepted", Some(figures.last_accepted)),
        ("VIP forwarding", Some(figures.last_forwarding)),
        ("Gateway Programmed", figures.last_programmed),
    ] {
        if let Some(d) = d.filter(|d| *d > TARGET_AFTER_LAST) {
            sec.notes.push(format!(
                "The last {what} came {:.1} s after the last creation, {:.1} s over 5a's 10 s.",
                d.as_secs_f64(),
                (d - TARGET_AFTER_LAST).as_secs_f64()
            ));
        }
    }
    Ok(sec)
}

/// `verb resource: n` of the requests, the most frequent first.
fn summary(counts: &BTreeMap<String, u64>) -> String {
    let mut v: Vec<_> = counts.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1));
    v.iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The per-Gateway latencies (ms) and the last events after the last creation.
struct Figures {
    to_accepted: Vec<f64>,
    to_forwarding: Vec<f64>,
    to_programmed: Vec<f64>,
    last_accepted: Duration,
    last_forwarding: Duration,
    /// None when some Gateway never was.
    last_programmed: Option<Duration>,
    /// Distinct Gateway addresses.
    addresses: usize,
}

impl Figures {
    fn of(t: &Times, total: usize, last_created: Instant) -> Result<Figures> {
        let mut f = Figures {
            to_accepted: Vec::with_capacity(total),
            to_forwarding: Vec::with_capacity(total),
            to_programmed: Vec::with_capacity(total),
            last_accepted: Duration::ZERO,
            last_forwarding: Duration::ZERO,
            last_programmed: Some(Duration::ZERO),
            addresses: 0,
        };
        let mut seen = HashSet::new();
        for g in 0..total {
            let name = gateway_name(g);
            let created = *t
                .created
                .get(&g)
                .with_context(|| format!("{name} not created"))?;
            let since = |at: Instant| ms(at.saturating_duration_since(created));
            let after = |at: Instant| at.saturating_duration_since(last_created);
            let acc = Times::both(&t.accepted, g).with_context(|| missing(t, g))?;
            let fwd = Times::both(&t.forwarding, g).with_context(|| missing(t, g))?;
            f.to_accepted.push(since(acc));
            f.to_forwarding.push(since(fwd));
            f.last_accepted = f.last_accepted.max(after(acc));
            f.last_forwarding = f.last_forwarding.max(after(fwd));
            match t.programmed.get(&g) {
                Some(p) => {
                    f.to_programmed.push(since(*p));
                    f.last_programmed = f.last_programmed.map(|d| d.max(after(*p)));
                }
                None => f.last_programmed = None,
            }
            seen.insert(t.addresses.get(&g).copied());
        }
        f.addresses = seen.len();
        if f.addresses != total {
            anyhow::bail!(
                "{} distinct addresses for {total} Gateways: the controller handed one out twice",
                f.addresses
            );
        }
        Ok(f)
    }
}

/// Stops the agent and deletes every object 5e made, so later parts start clean (the
/// controller was stopped when `measure` returned).
async fn cleanup(ctx: &Ctx, run: &Run, agent: &mut NodeAgent) -> Result<()> {
    let stopped = agent.stop();
    let admin = &ctx.admin;
    let (dp, lp) = (DeleteParams::default(), ListParams::default());
    let apis = Apis::new(admin, &run.ns);
    for api in [&apis.gateways, &apis.tcp, &apis.udp] {
        let _ = api.delete_collection(&dp, &lp).await;
    }
    let services: Api<Service> = Api::namespaced(admin.clone(), &run.ns);
    let _ = services.delete_collection(&dp, &lp).await;
    let _ = Api::<EndpointSlice>::namespaced(admin.clone(), &run.ns)
        .delete_collection(&dp, &lp)
        .await;
    let _ = gw_api(admin, None, "GatewayClass", "gatewayclasses")
        .delete(&run.class, &dp)
        .await;
    let _ = Api::<AddressPool>::all(admin.clone())
        .delete(&run.pool, &dp)
        .await;
    // No garbage collector runs in the test bed: the RivoraNode goes with its Node by hand.
    let _ = Api::<RivoraNode>::all(admin.clone())
        .delete(&agent.name, &dp)
        .await;
    let _ = Api::<Node>::all(admin.clone())
        .delete(&agent.name, &dp)
        .await;
    wait_until("5e's objects deleted", Duration::from_secs(120), || {
        let (apis, services) = (apis.clone(), services.clone());
        async move {
            let one = ListParams::default().limit(1);
            let err = |e: kube::Error| e.to_string();
            let left = apis.gateways.list(&one).await.map_err(err)?.items.len()
                + apis.tcp.list(&one).await.map_err(err)?.items.len()
                + apis.udp.list(&one).await.map_err(err)?.items.len()
                + services.list(&one).await.map_err(err)?.items.len();
            if left == 0 {
                Ok(())
            } else {
                Err("some Gateways, routes or Services left".to_string())
            }
        }
    })
    .await?;
    stopped
}
