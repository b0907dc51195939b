//! The node agent's run loop: watch, debounce, snapshot, translate, offer a desired state to
//! rivorad, and report what rivorad applied in this node's `RivoraNode`.
//!
//! Why a loop over whole snapshots (and not one patch per event): the desired state is a
//! function of what the stores hold, so a missed or reordered event, a relist or a restart all
//! end in the same state (as rivora-controller does, `crates/controller/src/run.rs`).
//!
//! The agent never blocks rivorad: it runs in tasks of its own and hands each new desired
//! state over a `tokio::sync::watch` channel, which rivorad reads when it is ready; only the
//! latest offer matters. Nothing is offered before every kind has delivered its first full
//! list (a state computed from a partial picture would claim adopted VIPs with backends
//! missing), so an unreachable API server changes nothing in the maps. Until the initial-sync
//! gate opens the offer says [`ApplyMode::KeepUnclaimed`]; the first offer after it opens says
//! [`ApplyMode::Prune`], which removes what nothing claimed.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use rivora_dataplane::RefusedVip;
use rivora_desired::{ApplyMode, DesiredState, SnatAddresses};
use rivora_k8s_api::class::ClassConfig;
use rivora_k8s_api::rivora_node::FIELD_MANAGER;
use rivora_k8s_api::{DatapathSummary, RivoraNode, RivoraNodeStatus};
use serde_json::json;
use tokio::sync::{Notify, mpsc, watch};
use tracing::{info, warn};

use crate::bgp_peers::{NodeBgp, Passwords, node_bgp};
use crate::convert::{LastGood, desired_state};
use crate::gateway::{GatewayObjects, GatewayOutcome};
use crate::healthz_server::{Answer, HealthzServer, PortState};
use crate::initsync::{InitialSync, Kind};
use crate::l2_lease::{self, Election, LeaseConfig, LeaseTiming};
use crate::report;
use crate::stores::{Stores, WatchState};
use crate::translate::{
    NodeIdentity, Outcome, ServiceKey, ServiceState, TranslateError, translate_all_with,
};
use rivora_gateway::ObjKey;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// `--node-name`: this node's Node, the `nodeName` of local endpoints, the `RivoraNode`'s
    /// name.
    pub node_name: String,
    /// Which Services are ours (`--load-balancer-class`, `--default-class`).
    pub class: ClassConfig,
    /// Addresses of this node besides its Node's (the uplink's): no endpoint may have one.
    pub extra_node_addresses: Vec<IpAddr>,
    /// Quiet time after an event before translating (batches bursts).
    pub debounce: Duration,
    /// Longest wait after the first event of a burst, however busy the watches are.
    pub max_delay: Duration,
    /// Least time between two `RivoraNode` status writes.
    pub report_interval: Duration,
    /// How this node announces its VIPs (`--announce`).
    pub announce: AnnounceMode,
    /// `--gateway`: the Meridio-2 Gateway whose DistributionGroups and L34Routes this node's
    /// classifier serves (None: no classifier).
    pub gateway: Option<crate::meridio::GatewayRef>,
}

/// How a node announces its VIPs (`rivorad --announce`): chosen per deployment, as the spec
/// has it (BGP from every node, or one L2 speaker; they are alternatives).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AnnounceMode {
    /// Nothing announces (routes to the VIPs are someone else's business).
    #[default]
    None,
    /// Every node runs the BGP speaker with the BGPPeers that select it and announces the VIPs
    /// it can serve.
    Bgp {
        /// The namespace whose Secrets hold the peers' passwords (the only one rivorad's RBAC
        /// lets it read Secrets in).
        secrets_namespace: String,
    },
    /// The holder of one cluster-wide Lease answers ARP and NDP for every VIP.
    L2 {
        /// The Lease's namespace (rivorad's own) and name.
        namespace: String,
        /// The Lease's name.
        lease: String,
        /// The Lease's timing.
        timing: LeaseTiming,
        /// How often the holder announces every VIP again unasked.
        refresh: Duration,
    },
}

impl AnnounceMode {
    /// `none`, `bgp` or `l2` (the flag's value, the report's `mode`).
    pub fn as_str(&self) -> &'static str {
        match self {
            AnnounceMode::None => "none",
            AnnounceMode::Bgp { .. } => "bgp",
            AnnounceMode::L2 { .. } => "l2",
        }
    }
}

impl Config {
    /// The defaults: 10 ms quiet (an isolated change goes out at once; a burst of changes a few
    /// ms apart, such as a rollout, is one pass), at most 200 ms, one report a second.
    pub fn new(node_name: impl Into<String>, class: ClassConfig) -> Self {
        Config {
            node_name: node_name.into(),
            class,
            extra_node_addresses: Vec::new(),
            debounce: Duration::from_millis(10),
            max_delay: Duration::from_millis(200),
            report_interval: Duration::from_secs(1),
            announce: AnnounceMode::None,
            gateway: None,
        }
    }
}

/// A desired state for rivorad to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// Increases with every offer; rivorad names it in its [`Feedback`].
    pub generation: u64,
    /// What to program.
    pub desired: DesiredState,
    /// What to do with adopted VIPs nothing claims.
    pub mode: ApplyMode,
}

/// What rivorad tells the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Feedback {
    /// The datapath is attached.
    Datapath(DatapathSummary),
    /// The offer of this generation is in force; `vips` are programmed, `unclaimed` of them
    /// adopted and not claimed.
    Applied {
        /// The offer's generation.
        generation: u64,
        /// VIPs programmed.
        vips: usize,
        /// Adopted VIPs nothing claimed yet.
        unclaimed: usize,
        /// VIPs of the offer the datapath refused alone: they did not fit, or broke a rule of
        /// their own.
        refused: Vec<RefusedVip>,
        /// Classifier groups (DistributionGroups) and rules (L34Routes) refused alone.
        classifier_refused: Vec<rivora_dataplane::classifier::RefusedObject>,
    },
    /// The offer of this generation was refused; the previous state stays in force.
    Rejected {
        /// The offer's generation.
        generation: u64,
        /// Why.
        error: String,
    },
    /// What the announcers do now (sent when it changes).
    Announcing(Announcing),
}

/// What rivorad's announcers report: the BGP sessions and routes, the L2 responder.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Announcing {
    /// Every BGP session, in the speaker's configuration order.
    pub sessions: Vec<SessionState>,
    /// Host routes handed to the speaker.
    pub routes: usize,
    /// Whether the ARP/NDP responder answers now.
    pub l2_answering: bool,
    /// Why this node cannot be the L2 speaker now (its interface has no carrier, the
    /// responder could not start, ...): the election releases the Lease while set.
    pub l2_problem: Option<String>,
}

/// One BGP session as the speaker reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionState {
    /// The peer's address.
    pub address: IpAddr,
    /// Its port.
    pub port: u16,
    /// The FSM state.
    pub state: String,
    /// Prefixes sent.
    pub prefixes_sent: u64,
    /// The last error.
    pub last_error: Option<String>,
}

/// One watch as the status shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchStatus {
    /// The kind.
    pub kind: Kind,
    /// Whether its first full list arrived.
    pub listed: bool,
    /// Objects in its store.
    pub objects: usize,
    /// Events and errors so far, and the last error until the next event.
    pub state: WatchState,
}

/// The agent's state for rivorad's status, logs and metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentStatus {
    /// `--node-name`.
    pub node: String,
    /// Each watch.
    pub watches: Vec<WatchStatus>,
    /// Whether the initial-sync gate is open.
    pub gate_open: bool,
    /// What keeps it closed.
    pub blockers: Vec<String>,
    /// Services of ours per state (programmed, refused, failing).
    pub services: BTreeMap<&'static str, usize>,
    /// Failing Services per reason (`rivora_k8s_service_failures{reason}`).
    pub failures: BTreeMap<&'static str, usize>,
    /// Failing Services and why (at most [`MAX_FAILING_SHOWN`]).
    pub failing: Vec<(ServiceKey, String)>,
    /// Gateway listeners carrying a route, per state (programmed, failing).
    pub gateway_listeners: BTreeMap<&'static str, usize>,
    /// Failing Gateway listeners, `gateway NS/NAME listener L`, and why (at most
    /// [`MAX_FAILING_SHOWN`]).
    pub failing_listeners: Vec<(String, String)>,
    /// The generation of the last offer (0: none yet).
    pub offered: u64,
    /// `RivoraNode` status writes that succeeded and that failed.
    pub report_writes: (u64, u64),
    /// The last failed write's error, until a write succeeds.
    pub report_error: Option<String>,
    /// The healthCheckNodePorts served (or that cannot be).
    pub health_ports: Vec<PortState>,
    /// `--announce`.
    pub announce_mode: &'static str,
    /// BGPPeers selected for this node and refused, and why.
    pub bgp_problems: Vec<String>,
    /// The BGPPeer of each session, in the speaker's order.
    pub bgp_peer_names: Vec<String>,
    /// L2 mode: the Lease's holder as last read.
    pub l2_holder: Option<String>,
    /// L2 mode: why this node does not compete for the Lease.
    pub l2_ineligible: Option<String>,
    /// Services whose last translation was reused, and those translated, since the start
    /// ([`crate::memo`]).
    pub translations: crate::memo::MemoStats,
}

/// Most failing Services named in [`AgentStatus::failing`].
pub const MAX_FAILING_SHOWN: usize = 16;

/// What [`start`] hands rivorad.
pub struct Handles {
    /// The latest offer (None before the first).
    pub offers: watch::Receiver<Option<Arc<Offer>>>,
    /// The agent's state, updated after every pass.
    pub status: watch::Receiver<AgentStatus>,
    /// Where rivorad reports what it did with the offers.
    pub feedback: mpsc::UnboundedSender<Feedback>,
    /// healthCheckNodePort requests answered 200 and 503 so far (read live).
    pub health_requests: Arc<[std::sync::atomic::AtomicU64; 2]>,
    /// L2 mode: the election's output and its stop switch.
    pub l2: Option<L2Handles>,
}

/// What rivorad needs of the L2 speaker election.
pub struct L2Handles {
    /// Until when this node may answer ARP/NDP (None: not at all): the responder follows it.
    pub answer_until: watch::Receiver<Option<Instant>>,
    /// The election's state (holder, errors), for status output.
    pub state: watch::Receiver<Election>,
    /// Set to true on shutdown: the elector releases the Lease and ends.
    pub stop: watch::Sender<bool>,
    /// The elector task (await it after `stop` for the release to be written).
    pub task: tokio::task::JoinHandle<()>,
}

/// Starts the watches, the run loop and the report writer on the current tokio runtime.
/// Returns at once: nothing here waits for the API server.
pub fn start(client: Client, config: Config) -> Handles {
    let changed = Arc::new(Notify::new());
    let bgp_secrets = match &config.announce {
        AnnounceMode::Bgp { secrets_namespace } => Some(secrets_namespace.as_str()),
        _ => None,
    };
    let stores = Stores::watch(
        &client,
        &config.node_name,
        Arc::clone(&changed),
        bgp_secrets,
        config.gateway.as_ref().map(|g| g.namespace.as_str()),
    );
    let gate = InitialSync::new(stores.kinds());
    let (offer_tx, offers) = watch::channel(None);
    let (status_tx, status) = watch::channel(AgentStatus {
        node: config.node_name.clone(),
        ..AgentStatus::default()
    });
    let (feedback, feedback_rx) = mpsc::unbounded_channel();
    let (report_tx, report_rx) = watch::channel(None);
    let (writes_tx, writes_rx) = mpsc::unbounded_channel();
    let healthz = HealthzServer::default();
    let health_requests = Arc::clone(&healthz.requests);
    let election = match &config.announce {
        AnnounceMode::L2 {
            namespace,
            lease,
            timing,
            ..
        } => Some(l2_lease::start(
            client.clone(),
            LeaseConfig {
                namespace: namespace.clone(),
                name: lease.clone(),
                identity: config.node_name.clone(),
                timing: *timing,
            },
        )),
        _ => None,
    };
    let (l2, l2_ineligible, l2_state) = match election {
        Some(e) => (
            Some(L2Handles {
                answer_until: e.answer_until,
                state: e.state.clone(),
                stop: e.stop,
                task: e.task,
            }),
            Some(e.ineligible),
            Some(e.state),
        ),
        None => (None, None, None),
    };
    let (warnings_tx, warnings_rx) = watch::channel(Vec::new());
    tokio::spawn(crate::warnings::publish(
        client.clone(),
        config.node_name.clone(),
        warnings_rx,
    ));
    tokio::spawn(write_reports(
        client,
        config.node_name.clone(),
        config.report_interval,
        report_rx,
        writes_tx,
    ));
    let agent = Agent {
        config,
        stores,
        changed,
        gate,
        bgp: NodeBgp::default(),
        logged_bgp_problems: Vec::new(),
        announcing: Announcing::default(),
        heard_announcing: false,
        sessions_since: BTreeMap::new(),
        last_good: LastGood::default(),
        results: BTreeMap::new(),
        gateways: BTreeMap::new(),
        logged_gateway_failing: BTreeMap::new(),
        offered: None,
        generation: 0,
        applied: None,
        last_apply_ok: None,
        healthz,
        datapath: None,
        counts: (0, 0),
        refused_vips: BTreeMap::new(),
        refused_classifier: Vec::new(),
        conditions: Vec::new(),
        logged_blockers: Vec::new(),
        logged_failing: BTreeMap::new(),
        status: AgentStatus::default(),
        l2_ineligible,
        l2_state,
        logged_meridio_problems: Vec::new(),
        meridio_spec: Default::default(),
        meridio_groups: Vec::new(),
        memo: crate::memo::TranslateMemo::new(),
    };
    tokio::spawn(agent.run(
        offer_tx,
        status_tx,
        feedback_rx,
        report_tx,
        writes_rx,
        warnings_tx,
    ));
    Handles {
        offers,
        status,
        feedback,
        health_requests,
        l2,
    }
}

struct Agent {
    config: Config,
    stores: Stores,
    changed: Arc<Notify>,
    gate: InitialSync,
    last_good: LastGood,
    /// The results of the last pass.
    results: BTreeMap<ServiceKey, Outcome>,
    /// The Gateways' results of the last pass.
    gateways: BTreeMap<ObjKey, GatewayOutcome>,
    /// Failing Gateway listeners as last logged.
    logged_gateway_failing: BTreeMap<(ObjKey, String), String>,
    /// The last offer's state and mode.
    offered: Option<(DesiredState, ApplyMode)>,
    generation: u64,
    /// The last feedback on the last offer.
    applied: Option<Result<(), String>>,
    /// Whether the last apply of any offer succeeded (not reset by a new offer, so the
    /// healthCheckNodePorts do not flap while rivorad applies).
    last_apply_ok: Option<bool>,
    healthz: HealthzServer,
    datapath: Option<DatapathSummary>,
    /// (VIPs, unclaimed) as last reported.
    counts: (usize, usize),
    /// The VIPs rivorad last refused alone (by name), shown on their Services.
    refused_vips: BTreeMap<String, RefusedVip>,
    /// The classifier groups and rules rivorad last refused alone (Warning Events on them).
    refused_classifier: Vec<rivora_dataplane::classifier::RefusedObject>,
    conditions: Vec<Condition>,
    logged_blockers: Vec<String>,
    logged_failing: BTreeMap<ServiceKey, String>,
    status: AgentStatus,
    /// This node's BGP configuration of the last pass (BGP mode).
    bgp: NodeBgp,
    /// Refused BGPPeers as last logged.
    logged_bgp_problems: Vec<String>,
    /// What rivorad's announcers last reported.
    announcing: Announcing,
    /// Whether rivorad reported its announcers at all yet (before that, `announcing` is a
    /// default that says nothing about the L2 responder).
    heard_announcing: bool,
    /// When each session (address, port) entered its current state.
    sessions_since: BTreeMap<(IpAddr, u16), (String, Timestamp)>,
    /// L2 mode: why this node may not compete for the Lease (the elector reads it).
    l2_ineligible: Option<watch::Sender<Option<String>>>,
    /// L2 mode: the election's state.
    l2_state: Option<watch::Receiver<Election>>,
    /// `--gateway`: refused Meridio-2 objects as last logged, the last classifier, and the
    /// groups' reports of the last pass.
    logged_meridio_problems: Vec<String>,
    meridio_spec: rivora_dataplane::classifier::ClassifierSpec,
    meridio_groups: Vec<crate::meridio::GroupReport>,
    /// The last translation of each Service, reused while nothing it reads changes.
    memo: crate::memo::TranslateMemo,
}

/// The result of a report write, for the status.
type WriteResult = Result<(), String>;

/// A status to write, and the uid of this node's Node (the RivoraNode's owner, so it goes when
/// the Node goes) when the Node is known.
type Report = (RivoraNodeStatus, Option<String>);

impl Agent {
    async fn run(
        mut self,
        offers: watch::Sender<Option<Arc<Offer>>>,
        status: watch::Sender<AgentStatus>,
        mut feedback: mpsc::UnboundedReceiver<Feedback>,
        report: watch::Sender<Option<Report>>,
        mut writes: mpsc::UnboundedReceiver<WriteResult>,
        warnings: watch::Sender<Vec<crate::warnings::Warning>>,
    ) {
        let mut election = self.l2_state.clone();
        loop {
            tokio::select! {
                Some(r) = async { match &mut election { Some(e) => Some(e.changed().await), None => None } } => {
                    if r.is_err() {
                        election = None;
                    }
                }
                _ = self.changed.notified() => {
                    self.settle().await;
                    let started = Instant::now();
                    if let Some(offer) = self.pass() {
                        info!(
                            generation = offer.generation,
                            vips = offer.desired.vips.len(),
                            mode = offer.mode.as_str(),
                            // Snapshot and translation: the agent's share of change-to-forwarding.
                            took_ms = started.elapsed().as_secs_f64() * 1e3,
                            "new desired state from the cluster"
                        );
                        offers.send_replace(Some(Arc::new(offer)));
                    }
                }
                f = feedback.recv() => match f {
                    None => return, // rivorad stopped
                    Some(f) => self.heard(f),
                },
                w = writes.recv() => {
                    let Some(w) = w else { return };
                    match w {
                        Ok(()) => {
                            self.status.report_writes.0 += 1;
                            self.status.report_error = None;
                        }
                        Err(e) => {
                            self.status.report_writes.1 += 1;
                            self.status.report_error = Some(e);
                        }
                    }
                }
            }
            self.serve_health_checks();
            self.l2_eligibility();
            self.publish(&status);
            // Only once rivorad said what became of the last offer: before that, what the
            // dataplane holds is not known, and a report would say the wrong thing.
            if self.offered.is_some() && self.applied.is_some() {
                let owner = self
                    .stores
                    .nodes
                    .state()
                    .first()
                    .and_then(|n| n.metadata.uid.clone());
                report.send_if_modified(|r| {
                    let next = (self.report(), owner);
                    if r.as_ref() == Some(&next) {
                        false
                    } else {
                        self.conditions = next.0.conditions.clone();
                        *r = Some(next);
                        true
                    }
                });
            }
            let now = crate::warnings::warnings(
                &self.config.node_name,
                &shown_results(&self.results, &self.refused_vips),
                &self.stores.services,
                &self.stores.undecodable(),
                &self.classifier_refusals(),
            );
            warnings.send_if_modified(|w| {
                if *w == now {
                    false
                } else {
                    *w = now;
                    true
                }
            });
        }
    }

    /// Waits until the watches are quiet for the debounce time, or the longest delay passed.
    async fn settle(&self) {
        let deadline = Instant::now() + self.config.max_delay;
        loop {
            let quiet = tokio::time::sleep(self.config.debounce);
            tokio::select! {
                _ = quiet => return,
                _ = self.changed.notified() => {
                    if Instant::now() >= deadline {
                        // Run now; the stored permit is cleared, the next event wakes the loop.
                        return;
                    }
                }
            }
        }
    }

    /// One pass over the stores; the offer, if it differs from the last one.
    fn pass(&mut self) -> Option<Offer> {
        let states = self.stores.states();
        for (kind, state) in &states {
            if let Some(keys) = &state.first_list {
                match kind {
                    Kind::Service => self.gate.services_listed(keys.iter().cloned()),
                    Kind::Gateway => self.gate.gateways_listed(
                        keys.iter()
                            .map(|k| ObjKey::new(k.namespace.clone(), k.name.clone())),
                    ),
                    k => self.gate.listed(*k),
                }
            }
        }
        if states.iter().any(|(_, s)| s.first_list.is_none()) {
            return None;
        }
        let snapshot = crate::translate::Snapshot {
            services: self.stores.services.state(),
            slices: self.stores.slices.state().into(),
            policies: self.stores.policies.state(),
            gateway_objects: GatewayObjects {
                classes: self.stores.gateway_classes.state(),
                gateways: self.stores.gateways.state(),
                tcp_routes: self.stores.tcp_routes.state(),
                udp_routes: self.stores.udp_routes.state(),
                grants: self.stores.grants.state(),
                namespaces: self.stores.namespaces.state(),
            },
        };
        let node = self.identity();
        let t = translate_all_with(&snapshot, &node, &self.config.class, &mut self.memo);
        self.status.translations = self.memo.stats();
        if self.gate.observe(&t.services, &t.gateways) {
            info!("initial sync complete: adopted VIPs nothing claimed are removed now");
        }
        self.last_good.record(&t.services);
        self.last_good.record_gateways(&t.gateways);
        self.log_failures(&t.services);
        self.log_gateway_failures(&t.gateways);
        let mut desired = desired_state(&t, &self.last_good, self.snat_addresses());
        desired.classifier = self.meridio_pass();
        self.announce_settings(&mut desired);
        self.results = t.services;
        self.gateways = t.gateways;
        let mode = if self.gate.is_open() {
            ApplyMode::Prune
        } else {
            ApplyMode::KeepUnclaimed
        };
        let next = (desired, mode);
        if self.offered.as_ref() == Some(&next) {
            return None;
        }
        self.generation += 1;
        self.applied = None;
        self.offered = Some(next.clone());
        Some(Offer {
            generation: self.generation,
            desired: next.0,
            mode: next.1,
        })
    }

    /// `--gateway`: the served Gateway's classifier from the Meridio-2 objects of its namespace
    /// (empty without `--gateway`). Refused objects are logged when what is refused changes.
    fn meridio_pass(&mut self) -> rivora_dataplane::classifier::ClassifierSpec {
        let (Some(gw), Some(m)) = (&self.config.gateway, &self.stores.meridio) else {
            return Default::default();
        };
        let snapshot = crate::meridio::MeridioSnapshot {
            gateways: self.stores.gateways.state(),
            distribution_groups: m.groups.state(),
            routes: m.routes.state(),
            lb_slices: m.lb_slices.state(),
            core_slices: m.core_slices.state(),
        };
        let outcome = crate::meridio::translate(gw, &snapshot);
        for p in outcome
            .problems
            .iter()
            .filter(|p| !self.logged_meridio_problems.contains(p))
        {
            warn!(gateway = %gw, "Meridio-2 object refused: {p}");
        }
        if outcome.spec != self.meridio_spec {
            info!(
                gateway = %gw,
                groups = outcome.spec.groups.len(),
                rules = outcome.spec.rules.len(),
                vips = outcome.spec.vips().len(),
                ready_groups = outcome.spec.ready_groups().len(),
                "Meridio-2 Gateway translated"
            );
            self.meridio_spec = outcome.spec.clone();
        }
        self.logged_meridio_problems = outcome.problems;
        self.meridio_groups = outcome.groups;
        outcome.spec
    }

    /// The node's announcing settings into `desired`: in BGP mode the speaker's configuration
    /// from the BGPPeers that select this Node; on a Node labelled
    /// [`crate::bgp_peers::EXCLUDE_LABEL`] no VIP is advertised (BGP sessions stay, no routes;
    /// no L2 answers).
    fn announce_settings(&mut self, desired: &mut DesiredState) {
        let node = self.stores.nodes.state().first().cloned();
        let excluded = self.excluded();
        self.bgp = match (
            &self.config.announce,
            &self.stores.bgp_peers,
            &self.stores.secrets,
        ) {
            (AnnounceMode::Bgp { secrets_namespace }, Some(peers), Some(secrets)) => node_bgp(
                &peers.state(),
                node.as_deref(),
                &self.config.node_name,
                &Passwords::new(secrets_namespace, &secrets.state()),
            ),
            _ => NodeBgp::default(),
        };
        desired.node.bgp = self.bgp.config.clone();
        desired.node.l2 = match &self.config.announce {
            AnnounceMode::L2 { refresh, .. } => Some(rivora_desired::L2Settings {
                interface: None,
                announce_interval: *refresh,
            }),
            _ => None,
        };
        if excluded {
            for v in &mut desired.vips {
                v.announce.advertise = false;
            }
        }
        let problems: Vec<String> = self.bgp.problems.iter().map(|p| p.to_string()).collect();
        for p in problems
            .iter()
            .filter(|p| !self.logged_bgp_problems.contains(p))
        {
            warn!("BGP: {p}");
        }
        self.logged_bgp_problems = problems;
    }

    /// This node's Node's addresses of the `types` (InternalIP, ...), in its order.
    fn node_addresses(&self, types: &[&str]) -> Vec<IpAddr> {
        self.stores
            .nodes
            .state()
            .iter()
            .filter_map(|n| n.status.as_ref())
            .filter_map(|s| s.addresses.as_ref())
            .flatten()
            .filter(|a| types.contains(&a.type_.as_str()))
            .filter_map(|a| a.address.parse().ok())
            .collect()
    }

    /// This node: its name, its Node's addresses and the extra ones.
    fn identity(&self) -> NodeIdentity {
        let mut addresses = self.node_addresses(&["InternalIP", "ExternalIP"]);
        addresses.extend(&self.config.extra_node_addresses);
        addresses.sort();
        addresses.dedup();
        NodeIdentity {
            name: self.config.node_name.clone(),
            addresses,
        }
    }

    /// This node's source for flows to other nodes' endpoints: its Node's first InternalIP of
    /// each family (the address other nodes route to), else the first extra (uplink) address
    /// of the family.
    fn snat_addresses(&self) -> SnatAddresses {
        let internal = self.node_addresses(&["InternalIP"]);
        let pick = |v6: bool| {
            internal
                .iter()
                .chain(&self.config.extra_node_addresses)
                .find(|a| a.is_ipv6() == v6)
                .copied()
        };
        SnatAddresses {
            v4: pick(false).and_then(|a| match a {
                IpAddr::V4(a) => Some(a),
                IpAddr::V6(_) => None,
            }),
            v6: pick(true).and_then(|a| match a {
                IpAddr::V6(a) => Some(a),
                IpAddr::V4(_) => None,
            }),
        }
    }

    /// Logs each failing Service once per error, each recovery once, and the gate's blockers
    /// when they change.
    fn log_failures(&mut self, results: &BTreeMap<ServiceKey, Outcome>) {
        let failing: BTreeMap<ServiceKey, String> = results
            .iter()
            .filter_map(|(k, o)| match o {
                Outcome::Failed(e) => Some((k.clone(), e.to_string())),
                _ => None,
            })
            .collect();
        for (k, e) in &failing {
            if self.logged_failing.get(k) != Some(e) {
                warn!(service = %k, "cannot program the Service (its previous VIPs stay): {e}");
            }
        }
        for k in self.logged_failing.keys() {
            if !failing.contains_key(k) && results.contains_key(k) {
                info!(service = %k, "the Service translates again");
            }
        }
        self.logged_failing = failing;
        let blockers: Vec<String> = self.gate.blockers().iter().map(|b| b.to_string()).collect();
        if blockers != self.logged_blockers && !self.gate.is_open() {
            warn!(
                blocking = blockers.len(),
                "initial sync not complete, adopted VIPs nothing claims are kept: {}",
                blockers.join("; ")
            );
        }
        self.logged_blockers = blockers;
    }

    /// Logs each failing Gateway listener once per error, and each recovery once.
    fn log_gateway_failures(&mut self, gateways: &BTreeMap<ObjKey, GatewayOutcome>) {
        let failing: BTreeMap<(ObjKey, String), String> = gateways
            .iter()
            .flat_map(|(g, o)| {
                o.listeners.iter().filter_map(move |l| {
                    l.result
                        .as_ref()
                        .err()
                        .map(|e| ((g.clone(), l.name.clone()), e.to_string()))
                })
            })
            .collect();
        for ((g, l), e) in &failing {
            if self.logged_gateway_failing.get(&(g.clone(), l.clone())) != Some(e) {
                warn!(gateway = %g, listener = %l, "cannot program the listener (its previous VIPs stay): {e}");
            }
        }
        for (g, l) in self.logged_gateway_failing.keys() {
            if !failing.contains_key(&(g.clone(), l.clone())) && gateways.contains_key(g) {
                info!(gateway = %g, listener = %l, "the listener translates again");
            }
        }
        self.logged_gateway_failing = failing;
    }

    fn heard(&mut self, f: Feedback) {
        match f {
            Feedback::Datapath(d) => self.datapath = Some(d),
            Feedback::Applied {
                generation,
                vips,
                unclaimed,
                refused,
                classifier_refused,
            } => {
                self.counts = (vips, unclaimed);
                self.refused_classifier = classifier_refused;
                self.refused_vips = refused.into_iter().map(|r| (r.name.clone(), r)).collect();
                self.last_apply_ok = Some(true);
                if generation == self.generation {
                    self.applied = Some(Ok(()));
                }
            }
            Feedback::Rejected { generation, error } => {
                self.last_apply_ok = Some(false);
                if generation == self.generation {
                    self.applied = Some(Err(error));
                }
            }
            Feedback::Announcing(a) => {
                let now = Timestamp::now();
                let mut since = BTreeMap::new();
                for s in &a.sessions {
                    let key = (s.address, s.port);
                    let entry = match self.sessions_since.remove(&key) {
                        Some((state, t)) if state == s.state => (state, t),
                        _ => (s.state.clone(), now),
                    };
                    since.insert(key, entry);
                }
                self.sessions_since = since;
                self.announcing = a;
                self.heard_announcing = true;
            }
        }
    }

    /// Points the healthCheckNodePort listeners at the Services of the last pass (a failing
    /// Service answers as its last good translation did). Healthy as kube-proxy's
    /// `serviceProxyHealthy`: the datapath is attached, the initial sync is complete and the last
    /// apply succeeded.
    fn serve_health_checks(&mut self) {
        let mut wanted: BTreeMap<u16, Answer> = BTreeMap::new();
        for (key, outcome) in &self.results {
            let hc = match outcome {
                Outcome::Translated(v) => v.health_check.as_ref(),
                Outcome::Failed(_) => self
                    .last_good
                    .get(key)
                    .and_then(|v| v.health_check.as_ref()),
                Outcome::NotOurs => None,
            };
            if let Some(hc) = hc {
                wanted.entry(hc.port).or_insert_with(|| Answer {
                    service: key.clone(),
                    local_endpoints: hc.local_endpoints,
                });
            }
        }
        let healthy =
            self.datapath.is_some() && self.gate.is_open() && self.last_apply_ok == Some(true);
        self.healthz.set(wanted, healthy);
    }

    fn publish(&mut self, status: &watch::Sender<AgentStatus>) {
        let counts = self.stores.counts();
        let s = &mut self.status;
        s.node = self.config.node_name.clone();
        s.watches = self
            .stores
            .states()
            .into_iter()
            .map(|(kind, state)| WatchStatus {
                kind,
                listed: state.first_list.is_some(),
                objects: counts
                    .iter()
                    .find(|(k, _)| *k == kind)
                    .map(|c| c.1)
                    .unwrap_or(0),
                state: WatchState {
                    // The keys are the gate's business, not the status's.
                    first_list: None,
                    ..state
                },
            })
            .collect();
        s.gate_open = self.gate.is_open();
        s.blockers = self.gate.blockers().iter().map(|b| b.to_string()).collect();
        s.services.clear();
        s.failures.clear();
        s.failing.clear();
        let results = shown_results(&self.results, &self.refused_vips);
        for (k, o) in results.iter() {
            let state = match o.state() {
                ServiceState::NotOurs => continue,
                ServiceState::Programmed => "programmed",
                ServiceState::Refused => "refused",
                ServiceState::Failing => "failing",
            };
            *s.services.entry(state).or_default() += 1;
            if let Outcome::Failed(e) = o {
                *s.failures.entry(reason(e)).or_default() += 1;
                if s.failing.len() < MAX_FAILING_SHOWN {
                    s.failing.push((k.clone(), e.to_string()));
                }
            }
        }
        s.gateway_listeners.clear();
        s.failing_listeners.clear();
        for (g, o) in &self.gateways {
            for l in &o.listeners {
                let state = if l.result.is_ok() {
                    "programmed"
                } else {
                    "failing"
                };
                *s.gateway_listeners.entry(state).or_default() += 1;
                if let Err(e) = &l.result
                    && s.failing_listeners.len() < MAX_FAILING_SHOWN
                {
                    s.failing_listeners
                        .push((format!("gateway {g} listener {}", l.name), e.to_string()));
                }
            }
        }
        s.offered = self.generation;
        s.health_ports = self.healthz.ports();
        s.announce_mode = self.config.announce.as_str();
        s.bgp_problems = self.logged_bgp_problems.clone();
        s.bgp_peer_names = self.bgp.peers.clone();
        if let Some(e) = &self.l2_state {
            let e = e.borrow();
            s.l2_holder = e.holder.clone();
            s.l2_ineligible = e.ineligible.clone();
        }
        status.send_if_modified(|old| {
            if *old == self.status {
                false
            } else {
                *old = self.status.clone();
                true
            }
        });
    }

    fn report(&self) -> RivoraNodeStatus {
        let blockers: Vec<String> = self.gate.blockers().iter().map(|b| b.to_string()).collect();
        let results = shown_results(&self.results, &self.refused_vips);
        let mut undecodable: Vec<String> = self
            .stores
            .undecodable()
            .into_iter()
            .flat_map(|(kind, objects)| {
                objects
                    .into_iter()
                    .map(move |(name, bad)| format!("{kind} {name}: {}", bad.error))
            })
            .collect();
        undecodable.sort();
        report::status(&report::Inputs {
            results: &results,
            gateways: &self.gateways,
            gateway_controller: &self.config.class.gateway_controller,
            gate_open: self.gate.is_open(),
            blockers: &blockers,
            applied: self.applied.clone(),
            datapath: self.datapath.clone(),
            vip_count: self.counts.0,
            unclaimed: self.counts.1,
            previous: &self.conditions,
            now: Timestamp::now(),
            announce: self.announce_report(),
            undecodable: &undecodable,
        })
    }

    /// The report's `announce` (None without announcing).
    fn announce_report(&self) -> Option<rivora_k8s_api::AnnounceReport> {
        let mode = self.config.announce.as_str();
        if self.config.announce == AnnounceMode::None {
            return None;
        }
        let election = self.l2_state.as_ref().map(|e| e.borrow().clone());
        Some(report::announce(&report::AnnounceInputs {
            mode,
            bgp: &self.bgp,
            excluded: self.excluded(),
            announcing: &self.announcing,
            since: &self.sessions_since,
            election: election.as_ref(),
            unserved: self.unserved_locally(),
        }))
    }

    /// Tells the L2 elector whether this node may hold the Lease: not when its Node is
    /// excluded, before the initial sync and the datapath, or when rivorad reports a problem
    /// (no carrier, no responder).
    fn l2_eligibility(&self) {
        let Some(tx) = &self.l2_ineligible else {
            return;
        };
        let why = if self.excluded() {
            Some(format!(
                "the Node is labelled {}",
                crate::bgp_peers::EXCLUDE_LABEL
            ))
        } else if !self.gate.is_open() {
            Some("the initial sync is not complete".to_string())
        } else if self.datapath.is_none() {
            Some("the datapath is not attached".to_string())
        } else if self.last_apply_ok.is_none() {
            // Ever applied, not "the latest offer applied": every new offer resets that, and
            // a holder must not step down for each Service change.
            Some("no desired state applied yet".to_string())
        } else if !self.heard_announcing {
            // A Lease taken now would be given back when rivorad first says its responder is
            // not running yet.
            Some("rivorad has not reported its ARP/NDP responder yet".to_string())
        } else {
            self.announcing.l2_problem.clone()
        };
        tx.send_if_modified(|cur| {
            if *cur == why {
                false
            } else {
                *cur = why;
                true
            }
        });
    }

    /// The ETP Local Services (`namespace/name`) with no ready endpoint on this node: what an
    /// L2 speaker answering for them cannot serve.
    fn unserved_locally(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .results
            .iter()
            .filter_map(|(k, o)| match o {
                Outcome::Translated(v) => v
                    .health_check
                    .as_ref()
                    .filter(|hc| hc.local_endpoints == 0)
                    .map(|_| k.to_string()),
                _ => None,
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Whether this node's Node carries the exclusion label.
    fn excluded(&self) -> bool {
        self.stores
            .nodes
            .state()
            .first()
            .and_then(|n| n.metadata.labels.clone())
            .is_some_and(|l| l.contains_key(crate::bgp_peers::EXCLUDE_LABEL))
    }
}

impl Agent {
    /// The classifier groups and rules rivorad refused alone, as the DistributionGroups and
    /// L34Routes they came from (`namespace/name`), with the Event reason and why.
    fn classifier_refusals(&self) -> Vec<crate::warnings::ObjectRefusal> {
        let Some(m) = &self.stores.meridio else {
            return Vec::new();
        };
        self.refused_classifier
            .iter()
            .filter_map(|r| {
                let (ns, name) = r.name.split_once('/')?;
                use kube::Resource;
                use kube::runtime::reflector::ObjectRef;
                let regarding = match r.kind {
                    "group" => m
                        .groups
                        .get(&ObjectRef::new(name).within(ns))?
                        .object_ref(&()),
                    _ => m
                        .routes
                        .get(&ObjectRef::new(name).within(ns))?
                        .object_ref(&()),
                };
                Some(crate::warnings::ObjectRefusal {
                    regarding,
                    reason: if r.capacity {
                        "CapacityExceeded"
                    } else {
                        "Invalid"
                    },
                    why: r.reason.clone(),
                })
            })
            .collect()
    }
}

/// The translation results as the status and the report show them: a Service with a VIP
/// rivorad refused alone (`refused`, by VIP name) shows that refusal instead of its
/// translation (refused for a capacity, or failing for a rule the VIP breaks). Only views: the
/// gate and the passes use the translation itself.
fn shown_results<'a>(
    results: &'a BTreeMap<ServiceKey, Outcome>,
    refused: &BTreeMap<String, RefusedVip>,
) -> std::borrow::Cow<'a, BTreeMap<ServiceKey, Outcome>> {
    if refused.is_empty() {
        return std::borrow::Cow::Borrowed(results);
    }
    let mut shown = results.clone();
    for (name, r) in refused {
        // `k8s/<namespace>/<service>/...` (translate::vip_name).
        let mut parts = name.splitn(4, '/');
        let (Some("k8s"), Some(namespace), Some(service)) =
            (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let key = ServiceKey {
            namespace: namespace.to_string(),
            name: service.to_string(),
        };
        if let Some(o @ Outcome::Translated(_)) = shown.get_mut(&key) {
            let (name, reason) = (name.clone(), r.reason.clone());
            *o = Outcome::Failed(if r.capacity {
                TranslateError::Capacity { name, reason }
            } else {
                // The datapath's reason names the VIP already.
                let prefix = format!("VIP {name}: ");
                let reason = reason.strip_prefix(&prefix).unwrap_or(&reason).to_string();
                TranslateError::InvalidVip { name, reason }
            });
        }
    }
    std::borrow::Cow::Owned(shown)
}

/// The `reason` label of a failure (`rivora_k8s_service_failures{reason}`).
pub fn reason(e: &TranslateError) -> &'static str {
    match e {
        TranslateError::Endpoint(_) => "endpoint",
        TranslateError::IngressAddress(_) => "ingress_address",
        TranslateError::SourceRange(_) => "source_range",
        TranslateError::ServicePort(_) => "service_port",
        TranslateError::EndpointIsVip { .. } => "endpoint_is_vip",
        TranslateError::EndpointIsNode { .. } => "endpoint_is_node",
        TranslateError::KeyConflict { .. } | TranslateError::KeyHeld { .. } => "key_conflict",
        TranslateError::Policy { .. } => "policy",
        TranslateError::InvalidVip { .. } => "invalid_vip",
        TranslateError::Capacity { .. } => "capacity",
    }
}

/// How often the report is written even when nothing changed (its `heartbeatTime`), so
/// rivora-controller can tell a node whose rivorad is gone from one with nothing new to say.
const HEARTBEAT: Duration = Duration::from_secs(rivora_k8s_api::rivora_node::HEARTBEAT_SECS as u64);

/// Longest a single report write may take before it counts as failed and is retried (a
/// request stuck on a dead connection must not silence the heartbeat).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Writes the `RivoraNode` status whenever it changes, at most once per `interval`, and at
/// least every [`HEARTBEAT`] (with `heartbeatTime` set to the time of the write): the object
/// is created (empty spec, owned by the Node once its uid is known) by server-side apply, then
/// its status applied, both as [`FIELD_MANAGER`]. A failed or timed-out write
/// ([`WRITE_TIMEOUT`]) is retried after `interval`.
///
/// One deadline drives the loop: the next heartbeat after a success, the retry after a
/// failure; a change of the report wakes it earlier.
async fn write_reports(
    client: Client,
    node: String,
    interval: Duration,
    mut reports: watch::Receiver<Option<Report>>,
    results: mpsc::UnboundedSender<WriteResult>,
) {
    let api: Api<RivoraNode> = Api::all(client);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let api_version = format!("{}/{}", rivora_k8s_api::GROUP, rivora_k8s_api::VERSION);
    // The owner the object was last applied with (None: not applied yet).
    let mut created: Option<Option<String>> = None;
    let mut written: Option<RivoraNodeStatus> = None;
    // When the next heartbeat is due (pushed on by every successful write).
    let mut beat_at = tokio::time::Instant::now();
    // When to look again without a change: the heartbeat, or a retry.
    let mut wake_at = beat_at + HEARTBEAT;
    loop {
        tokio::select! {
            r = reports.changed() => if r.is_err() { return },
            _ = tokio::time::sleep_until(wake_at) => {}
        }
        let Some((next, owner)) = reports.borrow_and_update().clone() else {
            wake_at = tokio::time::Instant::now() + HEARTBEAT;
            continue;
        };
        let beat_due = tokio::time::Instant::now() >= beat_at;
        if written.as_ref() == Some(&next) && created.as_ref() == Some(&owner) && !beat_due {
            wake_at = beat_at;
            continue;
        }
        let mut body = next.clone();
        body.heartbeat_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Timestamp::now(),
        ));
        let write = async {
            if created.as_ref() != Some(&owner) {
                let mut metadata = json!({"name": node});
                if let Some(uid) = &owner {
                    metadata["ownerReferences"] = json!([{
                        "apiVersion": "v1", "kind": "Node", "name": node, "uid": uid,
                    }]);
                }
                api.patch(
                    &node,
                    &pp,
                    &Patch::Apply(json!({
                        "apiVersion": api_version,
                        "kind": "RivoraNode",
                        "metadata": metadata,
                        "spec": {},
                    })),
                )
                .await
                .map_err(|e| format!("creating RivoraNode {node}: {e}"))?;
                created = Some(owner.clone());
            }
            api.patch_status(
                &node,
                &pp,
                &Patch::Apply(json!({
                    "apiVersion": api_version,
                    "kind": "RivoraNode",
                    "status": body,
                })),
            )
            .await
            .map_err(|e| format!("writing the status of RivoraNode {node}: {e}"))?;
            Ok::<(), String>(())
        };
        let outcome = match tokio::time::timeout(WRITE_TIMEOUT, write).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "writing RivoraNode {node}: no answer within {} s",
                WRITE_TIMEOUT.as_secs()
            )),
        };
        let now = tokio::time::Instant::now();
        match &outcome {
            Ok(()) => {
                written = Some(next);
                beat_at = now + HEARTBEAT;
                wake_at = beat_at;
            }
            Err(e) => {
                warn!("{e}");
                // Recreate next time: the object may have been deleted.
                created = None;
                wake_at = now + interval;
            }
        }
        if results.send(outcome).is_err() {
            return;
        }
        // At most one write per interval, however often the report changes.
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> ServiceKey {
        ServiceKey {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    /// A VIP rivorad refused alone shows on its Service (refused, with the datapath's reason),
    /// and on no other; without refusals the results are shown as translated.
    #[test]
    fn a_vip_refused_by_the_datapath_shows_on_its_service_alone() {
        let results: BTreeMap<ServiceKey, Outcome> = [
            (key("shop", "web"), Outcome::Translated(Default::default())),
            (key("shop", "db"), Outcome::Translated(Default::default())),
            (key("other", "x"), Outcome::NotOurs),
        ]
        .into();
        assert!(matches!(
            shown_results(&results, &BTreeMap::new()),
            std::borrow::Cow::Borrowed(_)
        ));
        let refusal = |name: &str, reason: &str, capacity: bool| {
            let r = RefusedVip {
                key: rivora_dataplane::VipKey::exact(
                    "203.0.113.5".parse().unwrap(),
                    80,
                    rivora_dataplane::proto::TCP,
                ),
                name: name.to_string(),
                reason: reason.to_string(),
                capacity,
            };
            (name.to_string(), r)
        };
        let refused: BTreeMap<String, RefusedVip> = [refusal(
            "k8s/shop/web/http/tcp/203.0.113.5",
            "maglev_table: VIP k8s/shop/web/http/tcp/203.0.113.5 needs at least 5 contiguous \
             free slots, the largest free run is 4 of 65537",
            true,
        )]
        .into();
        let shown = shown_results(&results, &refused);
        let web = &shown[&key("shop", "web")];
        assert_eq!(web.state(), ServiceState::Refused);
        let Outcome::Failed(e) = web else {
            panic!("{web:?}")
        };
        assert_eq!(reason(e), "capacity");
        assert!(
            e.to_string().starts_with(
                "VIP k8s/shop/web/http/tcp/203.0.113.5 is not programmed on this node: maglev_table"
            ),
            "{e}"
        );
        assert_eq!(shown[&key("shop", "db")].state(), ServiceState::Programmed);
        assert_eq!(shown[&key("other", "x")], Outcome::NotOurs);
        // A VIP that breaks a rule of its own fails its Service (not a capacity).
        let invalid: BTreeMap<String, RefusedVip> = [refusal(
            "k8s/shop/db/sql/tcp/203.0.113.6",
            "VIP k8s/shop/db/sql/tcp/203.0.113.6: source_ranges: 257 distinct ranges, at most \
             256 per VIP",
            false,
        )]
        .into();
        let shown_invalid = shown_results(&results, &invalid);
        let db = &shown_invalid[&key("shop", "db")];
        assert_eq!(db.state(), ServiceState::Failing);
        let Outcome::Failed(e) = db else {
            panic!("{db:?}")
        };
        assert_eq!(reason(e), "invalid_vip");
        assert_eq!(
            e.to_string(),
            "VIP k8s/shop/db/sql/tcp/203.0.113.6: source_ranges: 257 distinct ranges, at most \
             256 per VIP"
        );
        assert_eq!(crate::warnings::event_reason(e), "InvalidVIP");
        // The translation itself is untouched (the gate and the passes read it).
        assert_eq!(
            results[&key("shop", "web")].state(),
            ServiceState::Programmed
        );
    }
}
