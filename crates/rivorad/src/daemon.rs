//! Start-up, the run loop and shutdown of rivorad, as the steps they are:
//! [`preflight`], [`load_and_adopt`], [`first_apply`], [`attach`],
//! [`start_state`], [`serve_api`], [`run_loop`] over a [`Source`], and
//! [`shutdown`]. Everything after choosing the source (the YAML file, or
//! Kubernetes with `--kubernetes`) is generic over it, so both run every
//! step the same way.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use rivora_api::ReloadInfo;
use rivora_dataplane::{
    AdoptReport, ApplyReport, AttachOptions, Attachment, Datapath, Dataplane, LoadOptions,
    LoadOutcome, XdpModeRequest, ensure_bpffs, remove_link_pins, remove_pins,
};
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::apply::{self, warn_if_crowded};
use crate::instance::InstanceLock;
use crate::source::file::FileSource;
use crate::source::kubernetes::KubernetesSource;
use crate::source::{Programmed, Reading, Source, Trigger};
use crate::state::{Shared, StateSource, programs};
use crate::{Args, XdpModeArg, announce};
use rivora_dataplane::BackendKey;
use rivora_desired::{ApplyMode, DesiredState};
use rivora_health::{Prober, Transition};

/// Seconds since the epoch, for the API.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `--maglev-table-size`, or else the pinned table's length (a restart or an upgrade keeps
/// it, whatever this build's default), or else the default.
fn maglev_table_size(args: &Args) -> u32 {
    if let Some(size) = args.maglev_table_size {
        return size;
    }
    match rivora_dataplane::compat::pinned_maglev_table_len(&args.pin_dir) {
        Some(pinned) if pinned != rivora_abi::MAGLEV_TABLE_DEFAULT => {
            info!(
                pinned,
                default = rivora_abi::MAGLEV_TABLE_DEFAULT,
                "keeping the pinned Maglev table's length (no --maglev-table-size given); \
                 --maglev-table-size with --reset-pinned-state changes it"
            );
            pinned
        }
        _ => rivora_abi::MAGLEV_TABLE_DEFAULT,
    }
}

/// Runs the daemon until SIGTERM or SIGINT.
pub async fn run(args: Args) -> anyhow::Result<()> {
    preflight(&args)?;
    if args.uninstall {
        let Some(_lock) = InstanceLock::for_uninstall(&args.pin_dir)? else {
            info!(
                "nothing to uninstall: {} does not exist",
                args.pin_dir.display()
            );
            return Ok(());
        };
        return uninstall(&args.pin_dir);
    }
    let interface = args.interface.clone().expect("clap requires --interface");
    // Before anything is read or written: a second rivorad on this pin
    // directory or API socket would wreck the running one's datapath.
    let _instance = InstanceLock::for_daemon(&args.pin_dir, &args.api_socket)?;
    // A socket left by a killed rivorad goes now, not when the API is bound after the
    // datapath: until then clients see this rivorad starting (it holds the lock), never a
    // dead socket that a script could take for the new one.
    rivora_api::remove_stale_socket(&args.api_socket)
        .with_context(|| format!("API socket {}", args.api_socket.display()))?;
    if args.kubernetes {
        // Reads the kubeconfig or the in-cluster config; connects to nothing.
        let source = KubernetesSource::new(&args).await?;
        return run_with(&args, &interface, source).await;
    }
    let config_path = args.config.clone().expect("clap requires --config");
    run_with(&args, &interface, FileSource::new(&config_path)).await
}

/// Everything after the source is chosen: start, serve, loop, stop.
async fn run_with<S: Source>(args: &Args, interface: &str, mut source: S) -> anyhow::Result<()> {
    // The first desired state must be valid: there is nothing older to keep.
    let first = source.initial()?;
    let desired = first.desired;

    let mut loaded = load_and_adopt(args, interface)?;
    let existed_before: BTreeSet<BackendKey> = loaded.dataplane.backends().map(|b| b.key).collect();
    let report = first_apply(
        &mut loaded,
        &desired,
        first.mode,
        interface,
        &source.describe(),
    )?;
    source.applied(first.token, Programmed::of(&loaded.dataplane));

    let attachment = attach(args, interface, &mut loaded, &desired)?;
    source.attached(&attachment);
    let Loaded {
        mut datapath,
        mut dataplane,
        outcome,
        adopted,
    } = loaded;
    let start = start_summary(&outcome, &adopted, &attachment);
    // The rest of the apply step, now that the datapath forwards.
    let (mut prober, transitions) = Prober::new();
    apply::probes(&desired, &mut dataplane, &mut prober, &existed_before);
    let shared = start_state(
        args,
        &source.describe(),
        dataplane,
        prober,
        &attachment,
        &report,
        start,
    );
    {
        let mut s = shared.lock().expect("state lock");
        s.source_status = source.status_reader();
        s.notes = crate::state::Notes::of(&desired);
        s.announcer.l2_gate = source.l2_gate();
        if let Some(dir) = &args.readiness_dir {
            s.announcer.readiness = Some(
                crate::readiness::ReadinessFiles::new(dir)
                    .map_err(|e| anyhow::anyhow!("--readiness-dir {}: {e}", dir.display()))?,
            );
        }
    }
    // BGP sessions and ARP/NDP answers: only once the datapath forwards.
    announce::reconfigure(&shared, &desired, interface).await;

    let services = serve_api(args, &shared, transitions).await?;
    info!(socket = %args.api_socket.display(), "rivorad ready");

    let poll = Duration::from_millis(args.config_poll_ms.max(50));
    run_loop(&mut source, &shared, &mut datapath, interface, poll).await?;
    shutdown(&shared, services, datapath, args).await;
    // Answering stopped in `shutdown`: now what others may take over (the L2 Lease).
    source.stopping().await;
    Ok(())
}

/// Checks that cannot wait for anything to be loaded: root, a prime Maglev
/// table, a bpffs that outlives this rivorad when that matters; mounts
/// bpffs if it is missing.
fn preflight(args: &Args) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("rivorad must run as root: it loads BPF programs and pins maps");
    }
    if let Some(size) = args.maglev_table_size
        && !rivora_maglev::is_prime(size)
    {
        bail!("--maglev-table-size {size} is not a prime; Maglev needs a prime table length");
    }
    if args.pin_dir.starts_with("/sys/fs/bpf")
        && let Some(why) = rivora_dataplane::private_bpffs_reason(Path::new("/sys/fs/bpf"))
    {
        // Pins in a private bpffs die with the namespace: a persistent
        // datapath would vanish at the first stop, adoption never happens.
        if args.persist_datapath || args.uninstall {
            bail!("refusing to run: {why}");
        }
        warn!("{why}; without --persist-datapath this rivorad works, but a restart adopts nothing");
    }
    if args.pin_dir.starts_with("/sys/fs/bpf") && ensure_bpffs(Path::new("/sys/fs/bpf"))? {
        info!("mounted bpffs at /sys/fs/bpf");
    }
    Ok(())
}

/// The datapath loaded (or found pinned) and its maps adopted, before
/// anything new is programmed.
struct Loaded {
    datapath: Datapath,
    dataplane: Dataplane,
    outcome: LoadOutcome,
    adopted: AdoptReport,
}

impl Loaded {
    /// Undoes what this start pinned, when a later step fails. Pins this
    /// start created are ours to remove; adopted ones may be what keeps a
    /// persistent datapath forwarding: never touch them.
    fn fail(&self) {
        fail_unpin(&self.datapath, &self.outcome);
    }
}

fn fail_unpin(datapath: &Datapath, outcome: &LoadOutcome) {
    if *outcome != LoadOutcome::Reused {
        let _ = datapath.unpin_all();
    }
}

/// Loads the programs and maps (adopting pinned ones), takes over what the
/// maps hold, and sets what does not depend on the desired state: the
/// retire grace, the new-flow guard, the interface's MAC and index.
fn load_and_adopt(args: &Args, interface: &str) -> anyhow::Result<Loaded> {
    let (datapath, maps, outcome) = Datapath::load(&LoadOptions {
        pin_dir: args.pin_dir.clone(),
        maglev_table_size: maglev_table_size(args),
        flow_table_size: args.flow_table_size,
        reset_incompatible: args.reset_pinned_state,
        object_dir: args.bpf_object_dir.clone(),
    })
    .context("loading the BPF datapath")?;
    if let LoadOutcome::Reset(why) = &outcome {
        warn!(
            "--reset-pinned-state: replaced incompatible pinned maps ({})",
            why.join("; ")
        );
    }
    let (mut dataplane, adopted) = match Dataplane::adopt(maps) {
        Ok(r) => r,
        Err(e) => {
            fail_unpin(&datapath, &outcome);
            return Err(e).context("adopting the pinned maps");
        }
    };
    if outcome == LoadOutcome::Reused {
        info!(
            vips = adopted.vips,
            backends = adopted.backends,
            retiring = adopted.retiring,
            "adopted the maps pinned in {}",
            args.pin_dir.display()
        );
        for d in &adopted.dropped {
            warn!("adoption: removed an inconsistent entry: {d}");
        }
    }
    dataplane.set_retire_grace(Duration::from_secs(args.backend_retire_secs));
    // Each VIP of the cluster is one object's: one that does not fit must not stop the
    // others (a config file stays applied whole or not at all).
    dataplane.set_refuse_alone(args.kubernetes);
    dataplane.set_snat_ports(args.snat_ports.clone())?;
    if let Some(w) = crate::kernel::snat_ports_overlap(&args.snat_ports) {
        warn!("{w}");
    }
    // The guard's window is counted in jiffies, so the kernel's tick rate
    // is needed now (it may have to be measured: 200 ms, once).
    match dataplane.set_flow_guard(args.new_flow_guard_rate) {
        Ok(g) if g.limit > 0 => info!(
            rate = g.rate,
            per_cpu_per_window = g.limit,
            window_jiffies = g.window_jiffies,
            "new-flow guard set"
        ),
        Ok(_) => info!("new-flow guard off (--new-flow-guard-rate 0)"),
        Err(e) => warn!(
            "new-flow guard not set: {e}; floods of unproven flows can evict established ones"
        ),
    }
    if rivora_dataplane::jiffies::hz().is_none() {
        warn!(
            "cannot read the kernel's jiffies (/proc/timer_list): backends' last-packet ages are not shown"
        );
    }
    // L2 DSR and ICMP answers leave with the interface's own MAC.
    let ifindex = rivora_dataplane::interface_index(interface).unwrap_or(0);
    match rivora_dataplane::interface_mac(interface) {
        Some(mac) => dataplane.set_interface(mac, ifindex)?,
        None => {
            warn!(interface = %interface, "cannot read the interface's MAC: L2 DSR will not work")
        }
    }
    Ok(Loaded {
        datapath,
        dataplane,
        outcome,
        adopted,
    })
}

/// The first apply's datapath part, before anything is attached, so the
/// first packet meets the programmed maps. A failure undoes this start's
/// pins (`source` names the input in the error).
fn first_apply(
    loaded: &mut Loaded,
    desired: &DesiredState,
    mode: ApplyMode,
    interface: &str,
    source: &str,
) -> anyhow::Result<ApplyReport> {
    let report = match apply::program(&mut loaded.dataplane, desired, mode, interface) {
        Ok(r) => r,
        Err(e) => {
            loaded.fail();
            return Err(e).context(format!("programming {source}"));
        }
    };
    info!(
        vips = desired.vips.len(),
        mode = mode.as_str(),
        "programmed: {report}"
    );
    let unclaimed = Programmed::of(&loaded.dataplane).unclaimed;
    if unclaimed > 0 {
        info!(
            unclaimed,
            "adopted VIPs kept forwarding, unclaimed: each is claimed when its Service is \
             translated; whatever nothing claims is removed once the initial sync completes"
        );
    }
    warn_if_crowded(&loaded.dataplane);
    Ok(report)
}

/// Attaches XDP (and tc_nat when `desired` has a NAT VIP) to `interface`,
/// hot-swapping pinned links if there are any.
fn attach(
    args: &Args,
    interface: &str,
    loaded: &mut Loaded,
    desired: &DesiredState,
) -> anyhow::Result<Attachment> {
    let request = match args.xdp_mode {
        XdpModeArg::Auto => XdpModeRequest::Auto,
        XdpModeArg::Native => XdpModeRequest::Native,
        XdpModeArg::Generic => XdpModeRequest::Generic,
    };
    let options = AttachOptions {
        interface: interface.to_string(),
        xdp_mode: request,
        persist: args.persist_datapath,
        // tc_nat only for NAT VIPs (the forwarding-modes spec: a node with
        // only DSR VIPs does not load it); a reload adds it when needed.
        // Adopted NAT VIPs kept unclaimed (Kubernetes) need it too.
        egress: desired.has_nat_vip()
            || loaded
                .dataplane
                .vips()
                .any(|v| v.spec.mode == rivora_dataplane::Mode::Nat),
    };
    let attachment = match loaded.datapath.attach(&options) {
        Ok(a) => a.clone(),
        Err(e) => {
            loaded.fail();
            return Err(e).context("attaching the datapath");
        }
    };
    info!(
        interface = %attachment.interface,
        xdp_mode = attachment.xdp_mode.as_str(),
        reason = %attachment.xdp_mode_reason,
        xdp_prog_id = attachment.xdp_program_id,
        xdp_link_id = attachment.xdp_link_id,
        tc_prog_id = attachment.tc_program_id,
        tc_link_id = attachment.tc_link_id,
        hot_swap = attachment.replaced_pinned_links,
        persistent = attachment.persistent,
        "datapath attached"
    );
    warn_if_not_forwarding(desired);
    Ok(attachment)
}

/// How this start began, for the API's status.
fn start_summary(outcome: &LoadOutcome, adopted: &AdoptReport, attachment: &Attachment) -> String {
    match (outcome, attachment.replaced_pinned_links) {
        (LoadOutcome::Reused, swapped) => format!(
            "adopted {} VIPs and {} backends from pinned maps{}",
            adopted.vips,
            adopted.backends,
            if swapped {
                "; programs swapped into the pinned links"
            } else {
                ""
            }
        ),
        (LoadOutcome::Reset(_), _) => {
            "incompatible pinned maps replaced (--reset-pinned-state)".to_string()
        }
        (LoadOutcome::Fresh, _) => "fresh datapath".to_string(),
    }
}

/// The verdicts of the prober, as it sends them.
type Transitions = tokio::sync::mpsc::UnboundedReceiver<Transition<BackendKey>>;

/// The shared state the run loop and the API work on: the dataplane, the
/// prober, and the first status (`source` names the input, `report` is
/// what the first apply changed, `start` how this start began).
fn start_state(
    args: &Args,
    source: &str,
    dataplane: Dataplane,
    prober: Prober<BackendKey>,
    attachment: &Attachment,
    report: &ApplyReport,
    start: String,
) -> Arc<Mutex<Shared>> {
    let started = now_unix();
    Arc::new(Mutex::new(Shared {
        dataplane,
        prober,
        status: rivora_api::Status {
            version: env!("CARGO_PKG_VERSION").to_string(),
            abi_version: rivora_abi::ABI_VERSION,
            vip_count: 0,
            backend_count: 0,
            interface: attachment.interface.clone(),
            ifindex: attachment.ifindex,
            xdp_mode_requested: format!("{:?}", args.xdp_mode).to_lowercase(),
            xdp_mode: attachment.xdp_mode.as_str().to_string(),
            pin_dir: args.pin_dir.display().to_string(),
            config_path: source.to_string(),
            config_generation: 1,
            last_reload: ReloadInfo {
                at_unix: started,
                ok: true,
                error: None,
                changes: Some(report.to_string()),
            },
            started_at_unix: started,
            maglev_table_size: 0,
            maglev_slots_used: 0,
            persist_datapath: attachment.persistent,
            start,
            programs: programs(attachment),
            kubernetes: None,
        },
        announcer: announce::Announcer::default(),
        source_status: None,
        notes: Default::default(),
        neighbours: Default::default(),
    }))
}

/// What [`serve_api`] started, for [`shutdown`] to stop.
struct Services {
    stop: tokio::sync::watch::Sender<bool>,
    api: JoinHandle<std::io::Result<()>>,
    metrics: Option<JoinHandle<std::io::Result<()>>>,
}

/// Serves the local API, applies the prober's verdicts as they come, and
/// serves metrics if asked to.
async fn serve_api(
    args: &Args,
    shared: &Arc<Mutex<Shared>>,
    transitions: Transitions,
) -> anyhow::Result<Services> {
    let socket = rivora_api::bind(&args.api_socket)
        .with_context(|| format!("API socket {}", args.api_socket.display()))?;
    let (stop, mut stop_rx) = tokio::sync::watch::channel(false);
    let api = tokio::spawn(
        socket.serve(Arc::new(StateSource(shared.clone())), async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        }),
    );
    tokio::spawn(apply_transitions(transitions, shared.clone()));
    let metrics = match args.metrics_listen {
        None => None,
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--metrics-listen {addr}"))?;
            let for_scrape = shared.clone();
            let snapshot: Arc<rivora_api::metrics::SnapshotFn> =
                Arc::new(move || crate::metrics::snapshot(&for_scrape));
            let mut stop = stop.subscribe();
            info!(%addr, "Prometheus metrics at http://{addr}/metrics");
            Some(tokio::spawn(rivora_api::metrics::serve_metrics(
                listener,
                snapshot,
                async move {
                    let _ = stop.wait_for(|s| *s).await;
                },
            )))
        }
    };
    Ok(Services { stop, api, metrics })
}

/// Until SIGTERM or SIGINT: housekeeping on every tick (retired backends,
/// announcements, flow-table fill), and every desired state the source
/// offers applied.
async fn run_loop<S: Source>(
    source: &mut S,
    shared: &Arc<Mutex<Shared>>,
    datapath: &mut Datapath,
    interface: &str,
    poll: Duration,
) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    source.listen()?;
    let mut occupancy = FlowTableWatch::default();
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = term.recv() => { info!("SIGTERM: stopping"); break; }
            _ = int.recv() => { info!("SIGINT: stopping"); break; }
            trigger = source.woken() => {
                if let Some(desired) = reload(source, trigger, shared, datapath) {
                    announce::reconfigure(shared, &desired, interface).await;
                }
            }
            _ = tick.tick() => {
                {
                    let mut s = shared.lock().expect("state lock");
                    match s.dataplane.release_retired() {
                        Ok(0) => {}
                        Ok(n) => info!("released {n} retired backend(s) after the retire grace"),
                        Err(e) => error!("releasing retired backends: {e}"),
                    }
                    let Shared { dataplane, prober, announcer, neighbours, .. } = &mut *s;
                    neighbours.maintain(dataplane.classifier().applied());
                    announcer.set_datapath_problem(datapath.xdp_problem());
                    announcer.refresh(dataplane, prober);
                    occupancy.check(dataplane);
                    maintain_flow_filter(dataplane);
                    let (bgp, speaker) = (announcer.bgp_status(), announcer.speaker_status());
                    let broken = announcer.datapath_problem().map(str::to_string);
                    drop(s);
                    source.announcing(&bgp, &speaker, broken.as_deref());
                }
                if let Some(trigger) = source.polled().await
                    && let Some(desired) = reload(source, trigger, shared, datapath)
                {
                    announce::reconfigure(shared, &desired, interface).await;
                }
            }
        }
    }
    Ok(())
}

/// Stops in the order that keeps clients served longest: routes withdrawn
/// while the datapath still forwards, then the API and metrics, then the
/// datapath detached (or left forwarding with --persist-datapath).
async fn shutdown(
    shared: &Arc<Mutex<Shared>>,
    services: Services,
    datapath: Datapath,
    args: &Args,
) {
    // Withdraw the routes (Cease) while the datapath still forwards, so
    // routers move the traffic away before it stops being served here.
    announce::shutdown(shared).await;
    let _ = services.stop.send(true);
    if let Some(m) = services.metrics {
        let _ = tokio::time::timeout(Duration::from_secs(3), m).await;
    }
    match tokio::time::timeout(Duration::from_secs(3), services.api).await {
        Ok(Ok(Err(e))) => warn!("API server: {e}"),
        Err(_) => warn!("API server did not stop within 3 s"),
        _ => {}
    }
    if !args.persist_datapath {
        shared
            .lock()
            .expect("state lock")
            .announcer
            .clear_readiness("rivorad stops and its datapath with it");
    }
    if args.persist_datapath {
        drop(datapath); // the pinned links keep the programs attached
        info!(
            "datapath left forwarding (pinned links and maps in {}); bye",
            args.pin_dir.display()
        );
    } else {
        if let Err(e) = remove_pins(&args.pin_dir) {
            error!("removing pins: {e}");
        }
        drop(datapath); // closing the last link fds detaches XDP and TCX
        info!("datapath detached and pins removed; bye");
    }
}

/// Applies the prober's verdicts to the dataplane as they arrive.
async fn apply_transitions(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<rivora_health::Transition<BackendKey>>,
    shared: Arc<Mutex<Shared>>,
) {
    while let Some(t) = rx.recv().await {
        let mut s = shared.lock().expect("state lock");
        if !s.dataplane.backends().any(|b| b.key == t.key) {
            continue; // removed meanwhile
        }
        match s.dataplane.set_probe_down(&t.key, !t.up) {
            Ok(changed) => {
                let state = s
                    .dataplane
                    .backends()
                    .find(|b| b.key == t.key)
                    .map(|b| b.state)
                    .unwrap_or(0);
                if t.up {
                    info!(backend = %t.key, changed, state, "health check passes again ({})", t.detail);
                } else {
                    warn!(backend = %t.key, changed, state, "health check failed: backend down ({})", t.detail);
                }
            }
            Err(e) => error!(backend = %t.key, "recording a health verdict: {e}"),
        }
        let Shared {
            dataplane,
            prober,
            announcer,
            ..
        } = &mut *s;
        announcer.refresh(dataplane, prober);
    }
}

/// `--uninstall`: removes the pinned links (which detaches the programs
/// once nothing else holds them) and the pinned maps.
fn uninstall(pin_dir: &Path) -> anyhow::Result<()> {
    if !pin_dir.exists() {
        info!("nothing to uninstall: {} does not exist", pin_dir.display());
        return Ok(());
    }
    let links = remove_link_pins(pin_dir)?;
    for l in &links {
        info!(
            "removed pinned link {l} (its program is detached unless a running rivorad holds it)"
        );
    }
    remove_pins(pin_dir)?;
    if pin_dir.exists() {
        warn!(
            "{} still holds files rivorad did not create; left in place",
            pin_dir.display()
        );
    } else {
        info!("removed {}", pin_dir.display());
    }
    Ok(())
}

/// Reads the source and applies what it offers; returns the applied
/// desired state, for the announcements. Anything invalid leaves the
/// running configuration untouched and is logged and reported in the API
/// status.
fn reload<S: Source>(
    source: &mut S,
    trigger: Trigger,
    shared: &Arc<Mutex<Shared>>,
    datapath: &mut Datapath,
) -> Option<DesiredState> {
    let mut s = shared.lock().expect("state lock");
    let mut applied = None;
    // Input that is in force already changes nothing: no new generation
    // (docs/metrics.md), but a failed reload before it is over.
    let mut same_input = false;
    // How long programming the maps took: the part of change-to-forwarding that is rivorad's.
    let mut took = None;
    let outcome = match source.read(trigger) {
        Reading::Invalid(e) => Err(e),
        Reading::InForce(note) => {
            if s.status.last_reload.ok {
                return None;
            }
            same_input = true;
            Ok(note.to_string())
        }
        Reading::New(candidate) => {
            let started = std::time::Instant::now();
            let result = apply::while_running(&mut s, datapath, &candidate.desired, candidate.mode);
            took = Some(started.elapsed());
            match result {
                Ok(report) => {
                    same_input = candidate.same_as_applied && report.is_empty();
                    source.applied(candidate.token, Programmed::of(&s.dataplane));
                    s.notes = crate::state::Notes::of(&candidate.desired);
                    applied = Some(candidate.desired);
                    Ok(report.to_string())
                }
                Err(e) => {
                    source.rejected(&e);
                    Err(e)
                }
            }
        }
    };
    let at_unix = now_unix();
    s.status.last_reload = match outcome {
        Ok(report) => {
            if same_input {
                info!(generation = s.status.config_generation, "re-read: {report}");
            } else {
                s.status.config_generation += 1;
                let took_ms = took.map(|d| d.as_secs_f64() * 1e3);
                // Where the apply's time went (admit, plan, write, ...): what grows with the
                // number of VIPs shows here first.
                let phases = s.dataplane.last_apply_phases().to_string();
                info!(
                    generation = s.status.config_generation,
                    took_ms, phases, "applied: {report}"
                );
            }
            ReloadInfo {
                at_unix,
                ok: true,
                error: None,
                changes: Some(report),
            }
        }
        Err(e) => {
            error!(
                "rejected {}; the running configuration stays in force:\n{e}",
                source.describe()
            );
            ReloadInfo {
                at_unix,
                ok: false,
                error: Some(e),
                changes: None,
            }
        }
    };
    applied
}

/// Watches the flow tables' fill level and warns once when one passes
/// [`FLOW_TABLE_WARN_PCT`]: beyond full, every new flow evicts the least
/// recently used entry, which may belong to a live but idle connection.
/// Counting walks every key (one syscall each), so it runs every
/// [`FLOW_TABLE_CHECK_EVERY`], not every tick.
#[derive(Default)]
struct FlowTableWatch {
    next: Option<std::time::Instant>,
    warned: BTreeSet<&'static str>,
}

/// Fill level (percent) above which rivorad warns about a flow table.
const FLOW_TABLE_WARN_PCT: u64 = 90;
/// How often the flow tables are counted.
const FLOW_TABLE_CHECK_EVERY: Duration = Duration::from_secs(30);

impl FlowTableWatch {
    fn check(&mut self, dataplane: &rivora_dataplane::Dataplane) {
        let now = std::time::Instant::now();
        if self.next.is_some_and(|t| now < t) {
            return;
        }
        self.next = Some(now + FLOW_TABLE_CHECK_EVERY);
        for (name, entries, capacity) in dataplane.table_usage() {
            let full = capacity > 0 && entries * 100 >= capacity * FLOW_TABLE_WARN_PCT;
            if full && self.warned.insert(name) {
                warn!(
                    table = name,
                    entries,
                    capacity,
                    "flow table {name} is {}% full: once full, each new flow evicts the least \
                     recently used entry, which may be a live idle connection's; entries of \
                     closed flows also stay until evicted. If live flows exceed it, start with a \
                     larger --flow-table-size (docs/operations.md)",
                    entries * 100 / capacity
                );
            } else if !full && capacity > 0 && entries * 100 < capacity * (FLOW_TABLE_WARN_PCT - 10)
            {
                self.warned.remove(name);
            }
        }
    }
}

/// Keeps the flow filter that lets SYNs and new UDP flows skip the
/// affinity lookup exact and sparse (rivora_dataplane::flow_filter): a
/// rebuild is due after as many new flows as the tables hold.
fn maintain_flow_filter(dataplane: &mut rivora_dataplane::Dataplane) {
    match dataplane.maintain_flow_filter() {
        Ok(None) => {}
        Ok(Some(r)) if !r.was_exact => info!(
            keys = r.keys,
            took_ms = r.took.as_millis() as u64,
            "flow filter built from the adopted flow tables: SYNs and new UDP flows now skip \
             the affinity lookup when no entry can exist"
        ),
        Ok(Some(r)) => tracing::debug!(
            keys = r.keys,
            bits_before = r.ones_before,
            bits_after = r.ones,
            took_ms = r.took.as_millis() as u64,
            "flow filter rebuilt"
        ),
        Err(e) => warn!("rebuilding the flow filter: {e} (new flows keep their affinity lookup)"),
    }
}

/// Full NAT hands rewritten packets to the kernel to route: without IP
/// forwarding they die silently, which is the first thing to tell an operator.
fn warn_if_not_forwarding(desired: &DesiredState) {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim() == "1")
            .unwrap_or(false)
    };
    let specs = desired.specs();
    if specs.iter().any(|s| s.key.addr.is_ipv4()) && !read("/proc/sys/net/ipv4/ip_forward") {
        warn!(
            "net.ipv4.ip_forward is 0: NAT VIPs cannot forward (sysctl -w net.ipv4.ip_forward=1)"
        );
    }
    if specs.iter().any(|s| s.key.addr.is_ipv6()) && !read("/proc/sys/net/ipv6/conf/all/forwarding")
    {
        warn!(
            "net.ipv6.conf.all.forwarding is 0: IPv6 NAT VIPs cannot forward (sysctl -w net.ipv6.conf.all.forwarding=1)"
        );
    }
}
