//! 5a. Address assignment at scale: LoadBalancer Services created in bursts of 500 against
//! three AddressPools, timed from each Service's creation to the first status that gives it an
//! address, with rivora-controller's CPU, peak memory and API requests (from the audit log).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use rivora_k8s_api::AddressPool;
use rivora_kube_testbed::audit::{AuditCursor, count_of};
use serde_json::json;

use super::harness::{Controller, Ctx, apply, cpu_secs, hwm_mib, lb_service, ms, wait_until};
use crate::report::{Row, Section};
use crate::stats::quantile;

/// Services per burst (the figure).
const BURST: usize = 500;
/// Creations in flight at once within a burst (a client such as Helm or a CI job writes with
/// bounded concurrency, not 500 connections).
const IN_FLIGHT: usize = 32;
/// The three pools: name, CIDR (4,096 addresses each, enough for a third of 10,000).
const POOLS: [(&str, &str); 3] = [
    ("bench-a", "10.160.0.0/20"),
    ("bench-b", "10.161.0.0/20"),
    ("bench-c", "10.162.0.0/20"),
];
const CLASS: &str = "rivora.dev/bench-assign";

/// The pool a Service `i` selects (round robin) and the second octet its address must have.
fn pool_of(i: usize) -> (&'static str, u8) {
    let p = i % POOLS.len();
    (POOLS[p].0, 160 + p as u8)
}

/// Runs 5a: `total` Services (10,000; 2,000 with --quick).
pub async fn run(ctx: &Ctx) -> Result<Section> {
    let total = if ctx.quick { 2_000 } else { 10_000 };
    let ns = rivora_kube_testbed::unique_name("bench-assign");
    let lease_ns = rivora_kube_testbed::unique_name("bench-ctl");
    rivora_kube_testbed::ensure_namespace(&ctx.admin, &ns).await?;
    let kubeconfig = ctx.controller_kubeconfig(&lease_ns).await?;
    let pools: Api<AddressPool> = Api::all(ctx.admin.clone());
    for (name, cidr) in POOLS {
        let pool = json!({
            "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": name},
            "spec": {"addresses": [cidr], "autoAssign": true,
                     "serviceSelector": {"matchLabels": {"pool": name}}},
        });
        apply(&pools, pool).await?;
    }
    let services: Api<Service> = Api::namespaced(ctx.admin.clone(), &ns);
    let mut controller = Controller::start(ctx, &kubeconfig, &lease_ns, "bench-ctl-0", CLASS, 15)?;
    let result = measure(ctx, &services, &mut controller, total, &lease_ns).await;
    let tail = controller.log_tail(8);
    controller.kill();
    // Leave the API server as it was for the next part: one request removes them all.
    let _ = services
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    // ...and let the API server finish deleting before the next part loads it again.
    let gone = wait_until("5a's Services deleted", Duration::from_secs(300), || {
        let api = services.clone();
        async move {
            let left = api
                .list(&ListParams::default().limit(1))
                .await
                .map_err(|e| e.to_string())?;
            if left.items.is_empty() {
                Ok(())
            } else {
                Err("some left".to_string())
            }
        }
    })
    .await;
    for (name, _) in POOLS {
        let _ = pools.delete(name, &DeleteParams::default()).await;
    }
    let sec = result.with_context(|| format!("controller log: {tail}"))?;
    gone?;
    Ok(sec)
}

/// When each Service was created and when it first had an address.
#[derive(Default)]
struct Times {
    created: HashMap<String, Instant>,
    addressed: HashMap<String, (Instant, IpAddr)>,
}

async fn measure(
    ctx: &Ctx,
    services: &Api<Service>,
    controller: &mut Controller,
    total: usize,
    lease_ns: &str,
) -> Result<Section> {
    // Warm-up: one Service through the whole path, so the figures below do not include the
    // controller's start and its first election.
    let warm = "warm-up";
    services
        .create(
            &PostParams::default(),
            &lb_service(warm, CLASS, json!({"pool": POOLS[0].0}))?,
        )
        .await?;
    let svc_api = services.clone();
    wait_until(
        "the warm-up Service gets an address",
        Duration::from_secs(60),
        || {
            let api = svc_api.clone();
            async move {
                let s = api.get(warm).await.map_err(|e| e.to_string())?;
                let ing = ingress_of(&s);
                if ing.is_empty() {
                    Err("no address yet".into())
                } else {
                    Ok(())
                }
            }
        },
    )
    .await
    .map_err(|e| match controller.exited() {
        Some(why) => anyhow::anyhow!("{e}; {why}"),
        None => e,
    })?;

    let times = Arc::new(Mutex::new(Times::default()));
    let watch = tokio::spawn(record_addresses(services.clone(), Arc::clone(&times)));
    let user = Ctx::sa_user(lease_ns, "rivora-controller");
    let mut audit = AuditCursor::at_end(&ctx.bed.audit_log())?;
    let cpu0 = cpu_secs(controller.pid())?;
    let t0 = Instant::now();
    let mut create_ms = Vec::with_capacity(total);
    for burst in 0..total.div_ceil(BURST) {
        let started = Instant::now();
        let range = burst * BURST..((burst + 1) * BURST).min(total);
        let results: Vec<Result<(String, Instant, Duration)>> = futures::stream::iter(range)
            .map(|i| {
                let api = services.clone();
                async move {
                    let name = format!("svc-{i}");
                    let svc = lb_service(&name, CLASS, json!({"pool": pool_of(i).0}))?;
                    let sent = Instant::now();
                    api.create(&PostParams::default(), &svc)
                        .await
                        .with_context(|| format!("creating Service {name}"))?;
                    let done = Instant::now();
                    Ok((name, done, done - sent))
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        {
            let mut t = times.lock().unwrap();
            for r in results {
                let (name, at, took) = r?;
                t.created.insert(name, at);
                create_ms.push(ms(took));
            }
        }
        // The next burst 1 s after this one started (or at once if it took longer).
        if let Some(rest) = Duration::from_secs(1).checked_sub(started.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
    let last_created = Instant::now();
    let creating = t0.elapsed();
    let deadline = Duration::from_secs(if ctx.quick { 120 } else { 300 });
    let waited = wait_until("every Service has an address", deadline, || {
        let t = Arc::clone(&times);
        async move {
            let n = t.lock().unwrap().addressed.len();
            if n >= total {
                Ok(())
            } else {
                Err(format!("{n} of {total} addressed"))
            }
        }
    })
    .await;
    let cpu = cpu_secs(controller.pid())? - cpu0;
    let hwm = hwm_mib(controller.pid())?;
    watch.abort();
    waited.map_err(|e| match controller.exited() {
        Some(why) => anyhow::anyhow!("{e}; {why}"),
        None => e,
    })?;
    let requests = audit.take()?;
    let by_controller = count_of(&requests, &user);

    let t = times.lock().unwrap();
    let mut latency = Vec::with_capacity(total);
    let mut last_addressed = t0;
    let mut seen: HashSet<IpAddr> = HashSet::new();
    let mut wrong_pool = 0usize;
    for (name, created) in &t.created {
        let (at, ip) = t
            .addressed
            .get(name)
            .with_context(|| format!("{name} has no address"))?;
        latency.push(ms(at.saturating_duration_since(*created)));
        last_addressed = last_addressed.max(*at);
        seen.insert(*ip);
        let i: usize = name.trim_start_matches("svc-").parse()?;
        if !matches!(ip, IpAddr::V4(v4) if v4.octets()[1] == pool_of(i).1) {
            wrong_pool += 1;
        }
    }
    if seen.len() != total {
        bail!(
            "{} distinct addresses for {total} Services: the controller handed one out twice",
            seen.len()
        );
    }
    let after_last = last_addressed.saturating_duration_since(last_created);
    let status_writes = by_controller
        .get("patch services/status")
        .copied()
        .unwrap_or(0);
    let all_requests: u64 = by_controller.values().sum();
    let writes_other: BTreeMap<&String, &u64> = by_controller
        .iter()
        .filter(|(k, _)| {
            !k.starts_with("get ") && !k.starts_with("list ") && !k.starts_with("watch ")
        })
        .collect();

    let bursts = total.div_ceil(BURST);
    let mut sec = Section {
        title: "5a. Kubernetes: address assignment".into(),
        ratio_label: "vs baseline".into(),
        method: format!(
            "{total} LoadBalancer Services (IPv4, one port, no node ports) created in {bursts} \
             bursts of {BURST} (at most {IN_FLIGHT} creations in flight; a burst starts 1 s after \
             the previous one started, or when it finished) against 3 AddressPools of 4,096 \
             addresses, each Service selecting one pool by label. One rivora-controller process \
             (the release binary, as its shipped ServiceAccount and RBAC) leads; the test bed's \
             real kube-apiserver and etcd. A watch in the benchmark records when each Service \
             first shows an address; latency is from the create's response to that event. The \
             controller's CPU is from /proc/PID/stat over the creation and assignment; its \
             memory is VmHWM; its requests are counted from the API server's audit log (user \
             `{user}`). Baselines: the API server's own create latency, measured by the same \
             requests, and the fewest status writes possible (one per Service)."
        ),
        ..Default::default()
    };
    let p50 = quantile(&latency, 0.5);
    let p99 = quantile(&latency, 0.99);
    let c50 = quantile(&create_ms, 0.5);
    let c99 = quantile(&create_ms, 0.99);
    sec.rows.push(
        Row::info("creation to address, p50", format!("{p50:.0} ms"))
            .ratio(crate::stats::fmt_ratio(crate::stats::ratio(p50, c50)))
            .evidence(format!(
                "{total} Services; create request p50 {c50:.1} ms (baseline)"
            )),
    );
    sec.rows.push(
        Row::info("creation to address, p99", format!("{p99:.0} ms"))
            .ratio(crate::stats::fmt_ratio(crate::stats::ratio(p99, c99)))
            .evidence(format!("create request p99 {c99:.1} ms (baseline)")),
    );
    sec.rows.push(
        Row::info(
            "last Service addressed, after the last creation",
            format!("{:.2} s", after_last.as_secs_f64()),
        )
        .target("<= 10 s", after_last <= Duration::from_secs(10))
        .evidence(format!(
            "creating took {:.1} s; {} distinct addresses, {wrong_pool} outside the selected pool",
            creating.as_secs_f64(),
            seen.len()
        )),
    );
    sec.rows.push(
        Row::info("controller CPU", format!("{cpu:.1} s")).evidence(format!(
            "{:.2} ms per Service over {:.1} s of wall time",
            cpu * 1e3 / total as f64,
            (last_addressed - t0).as_secs_f64()
        )),
    );
    sec.rows.push(
        Row::info("controller peak RSS (VmHWM)", format!("{hwm:.1} MiB"))
            .target("< 128 MiB", hwm < 128.0)
            .evidence(format!("{total} Services and 3 pools in its caches")),
    );
    sec.rows.push(
        Row::info("controller status writes", format!("{status_writes}"))
            .ratio(crate::stats::fmt_ratio(crate::stats::ratio(
                status_writes as f64,
                total as f64,
            )))
            .evidence(format!("baseline: {total}, one per Service (audit log)")),
    );
    sec.rows.push(
        Row::info("controller API requests, all", format!("{all_requests}")).evidence(
            by_controller
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join("; "),
        ),
    );
    if wrong_pool > 0 {
        sec.notes.push(format!(
            "{wrong_pool} Services got an address outside the pool their label selects: a \
             defect, not a figure."
        ));
    }
    if after_last > Duration::from_secs(10) {
        sec.notes.push(format!(
            "Assignment finished {:.1} s after the last creation, {:.1} s over the 10 s target. \
             Writes other than reads: {writes_other:?}.",
            after_last.as_secs_f64(),
            after_last.as_secs_f64() - 10.0
        ));
    }
    Ok(sec)
}

/// The addresses a Service's status gives it.
fn ingress_of(s: &Service) -> Vec<IpAddr> {
    s.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|ing| {
            ing.iter()
                .filter_map(|i| i.ip.as_deref()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Watches the namespace's Services and records when each first had an address.
async fn record_addresses(api: Api<Service>, times: Arc<Mutex<Times>>) -> Result<()> {
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    while let Some(ev) = stream.try_next().await? {
        let now = Instant::now();
        let objs: Vec<Service> = match ev {
            watcher::Event::Apply(s) | watcher::Event::InitApply(s) => vec![s],
            _ => Vec::new(),
        };
        for s in objs
            .into_iter()
            .filter(|s| s.name_any().starts_with("svc-"))
        {
            if let Some(ip) = ingress_of(&s).first() {
                times
                    .lock()
                    .unwrap()
                    .addressed
                    .entry(s.name_any())
                    .or_insert((now, *ip));
            }
        }
    }
    Ok(())
}
