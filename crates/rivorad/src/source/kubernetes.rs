//! `--kubernetes` as a source: the node agent of `rivora-k8s-source` (watches, translation,
//! initial-sync gate, `RivoraNode` report) runs in tasks of its own and offers a desired state
//! with an apply mode whenever the cluster changes; this glue hands the offers to the run loop
//! and tells the agent what became of them.
//!
//! rivorad never waits for the API server: the client is built from the kubeconfig (or the
//! in-cluster config) without connecting, the first desired state is empty with
//! [`ApplyMode::KeepUnclaimed`] (every adopted VIP keeps forwarding, unclaimed), and nothing
//! else is applied until the agent has listed every watched kind. An API server that cannot be
//! reached therefore changes nothing in the maps.

use std::time::{Duration, Instant};

use anyhow::Context;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use rivora_dataplane::Attachment;
use rivora_desired::{ApplyMode, DesiredState};
use rivora_k8s_api::DatapathSummary;
use rivora_k8s_api::class::ClassConfig;
use rivora_k8s_source::agent::{
    self, AgentStatus, AnnounceMode, Announcing, Feedback, Handles, SessionState,
};
use rivora_k8s_source::l2_lease::LeaseTiming;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tracing::info;

use super::{Candidate, Programmed, Reading, Source, StatusReader, Trigger};
use crate::{AnnounceArg, Args};

/// How long after a refused apply the same offer is tried again (a capacity refusal may clear
/// up when other Services shrink; the agent only offers states that differ).
const RETRY_REJECTED: Duration = Duration::from_secs(10);

/// The Kubernetes source. Its token is the offer's generation (0: the start's empty state).
pub struct KubernetesSource {
    client: Client,
    config: agent::Config,
    api_server: String,
    handles: Option<Handles>,
    hup: Option<Signal>,
    /// Generation in force.
    in_force: u64,
    /// Generation last read, and when it was refused if it was.
    last_read: u64,
    rejected_at: Option<Instant>,
    /// What the announcers last reported to the agent.
    announcing: Option<Announcing>,
}

impl KubernetesSource {
    /// Reads `--kubeconfig`, else `KUBECONFIG`, else the in-cluster ServiceAccount config, and
    /// builds the client;
    /// nothing is connected yet.
    pub async fn new(args: &Args) -> anyhow::Result<Self> {
        let node = args
            .node_name
            .clone()
            .context("--kubernetes needs --node-name (or NODE_NAME)")?;
        let config = match &args.kubeconfig {
            Some(path) => {
                let kc = Kubeconfig::read_from(path)
                    .with_context(|| format!("--kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .with_context(|| format!("--kubeconfig {}", path.display()))?
            }
            // As kubectl and rivora-controller: KUBECONFIG (one file or a list) before the
            // in-cluster config.
            None if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty()) => {
                kube::Config::from_kubeconfig(&KubeConfigOptions::default())
                    .await
                    .context("KUBECONFIG")?
            }
            None => kube::Config::incluster().context(
                "no --kubeconfig, no KUBECONFIG and no in-cluster config \
                 (KUBERNETES_SERVICE_HOST and the ServiceAccount token)",
            )?,
        };
        let api_server = config.cluster_url.to_string();
        let client = Client::try_from(config).context("building the Kubernetes client")?;
        let mut config = agent::Config::new(
            node,
            ClassConfig {
                class: args.load_balancer_class.clone(),
                default_class: args.default_class,
                gateway_controller: args.gateway_controller_name.clone(),
            },
        );
        config.announce = match args.announce {
            AnnounceArg::None => AnnounceMode::None,
            AnnounceArg::Bgp => AnnounceMode::Bgp {
                secrets_namespace: args.namespace.clone(),
            },
            AnnounceArg::L2 => {
                let timing = LeaseTiming {
                    duration: args.l2_lease_duration,
                    renew_deadline: args.l2_renew_deadline,
                    retry_period: args.l2_retry_period,
                };
                timing.validate().map_err(|e| {
                    anyhow::anyhow!(
                        "--l2-lease-duration, --l2-renew-deadline, --l2-retry-period: {e}"
                    )
                })?;
                if args.l2_refresh_interval.is_zero() {
                    anyhow::bail!("--l2-refresh-interval must be more than zero");
                }
                AnnounceMode::L2 {
                    namespace: args.namespace.clone(),
                    lease: args.l2_lease_name.clone(),
                    timing,
                    refresh: args.l2_refresh_interval,
                }
            }
        };
        if let Some(g) = &args.gateway {
            config.gateway = Some(
                g.parse()
                    .map_err(|e| anyhow::anyhow!("--gateway {g}: {e}"))?,
            );
        }
        Ok(KubernetesSource {
            client,
            config,
            announcing: None,
            api_server,
            handles: None,
            hup: None,
            in_force: 0,
            last_read: 0,
            rejected_at: None,
        })
    }

    fn feedback(&self, f: Feedback) {
        if let Some(h) = &self.handles {
            // The agent ends only with rivorad.
            let _ = h.feedback.send(f);
        }
    }
}

impl Source for KubernetesSource {
    type Token = u64;

    fn describe(&self) -> String {
        format!(
            "kubernetes (node {}, API server {})",
            self.config.node_name, self.api_server
        )
    }

    fn initial(&mut self) -> anyhow::Result<Candidate<u64>> {
        info!(
            node = %self.config.node_name,
            api_server = %self.api_server,
            class = %self.config.class.class,
            default_class = self.config.class.default_class,
            "Kubernetes source: watching Services, EndpointSlices, ServicePolicies and this Node"
        );
        self.handles = Some(agent::start(self.client.clone(), self.config.clone()));
        Ok(Candidate {
            desired: DesiredState::default(),
            mode: ApplyMode::KeepUnclaimed,
            same_as_applied: false,
            token: 0,
        })
    }

    fn listen(&mut self) -> anyhow::Result<()> {
        // SIGHUP re-applies the latest offer (and must not kill rivorad, its default action).
        self.hup = Some(signal(SignalKind::hangup())?);
        Ok(())
    }

    async fn woken(&mut self) -> Trigger {
        let Self { handles, hup, .. } = self;
        let Some(h) = handles else {
            return std::future::pending().await;
        };
        tokio::select! {
            changed = h.offers.changed() => {
                if changed.is_err() {
                    // The agent is gone (it never ends before rivorad): nothing more comes.
                    return std::future::pending().await;
                }
                Trigger::Changed
            }
            _ = async {
                match hup {
                    Some(hup) => { hup.recv().await; }
                    None => std::future::pending::<()>().await,
                }
            } => {
                info!("SIGHUP: re-applying the cluster's desired state");
                Trigger::Forced
            }
        }
    }

    async fn polled(&mut self) -> Option<Trigger> {
        match self.rejected_at {
            Some(t) if t.elapsed() >= RETRY_REJECTED => {
                self.rejected_at = None;
                info!(
                    generation = self.last_read,
                    "trying the refused desired state again"
                );
                Some(Trigger::Forced)
            }
            _ => None,
        }
    }

    fn read(&mut self, trigger: Trigger) -> Reading<u64> {
        let Some(h) = &mut self.handles else {
            return Reading::InForce("the Kubernetes source has not started");
        };
        let offer = h.offers.borrow_and_update().clone();
        match offer {
            None => Reading::InForce("the cluster has not been listed yet: nothing to apply"),
            Some(o) if trigger == Trigger::Changed && o.generation == self.in_force => {
                Reading::InForce("no change (the cluster's state is in force)")
            }
            Some(o) => {
                self.last_read = o.generation;
                Reading::New(Candidate {
                    desired: o.desired.clone(),
                    mode: o.mode,
                    same_as_applied: o.generation == self.in_force,
                    token: o.generation,
                })
            }
        }
    }

    fn applied(&mut self, generation: u64, programmed: Programmed) {
        self.in_force = generation;
        self.rejected_at = None;
        self.feedback(Feedback::Applied {
            generation,
            vips: programmed.vips,
            unclaimed: programmed.unclaimed,
            refused: programmed.refused,
            classifier_refused: programmed.classifier_refused,
        });
    }

    fn rejected(&mut self, error: &str) {
        self.rejected_at = Some(Instant::now());
        self.feedback(Feedback::Rejected {
            generation: self.last_read,
            error: error.to_string(),
        });
    }

    fn attached(&mut self, a: &Attachment) {
        self.feedback(Feedback::Datapath(DatapathSummary {
            interface: a.interface.clone(),
            xdp_mode: a.xdp_mode.as_str().to_string(),
            abi_version: i64::from(rivora_abi::ABI_VERSION),
            persistent: a.persistent,
        }));
    }

    fn announcing(
        &mut self,
        bgp: &rivora_api::BgpStatus,
        speaker: &rivora_api::SpeakerStatus,
        datapath_problem: Option<&str>,
    ) {
        let now = Announcing {
            sessions: bgp
                .peers
                .iter()
                .filter_map(|p| {
                    Some(SessionState {
                        address: p.address.parse().ok()?,
                        port: p.port,
                        state: p.state.clone(),
                        prefixes_sent: p.prefixes_sent,
                        last_error: p.last_error.clone(),
                    })
                })
                .collect(),
            routes: bgp.routes.len(),
            l2_answering: speaker.active,
            l2_problem: datapath_problem
                .map(|p| format!("the datapath does not forward: {p}"))
                .or_else(|| l2_problem(speaker)),
        };
        if self.announcing.as_ref() != Some(&now) {
            self.feedback(Feedback::Announcing(now.clone()));
            self.announcing = Some(now);
        }
    }

    fn l2_gate(&self) -> Option<tokio::sync::watch::Receiver<Option<std::time::Instant>>> {
        let l2 = self.handles.as_ref()?.l2.as_ref()?;
        Some(l2.answer_until.clone())
    }

    async fn stopping(&mut self) {
        let Some(l2) = self.handles.as_mut().and_then(|h| h.l2.take()) else {
            return;
        };
        let _ = l2.stop.send(true);
        if tokio::time::timeout(Duration::from_secs(3), l2.task)
            .await
            .is_err()
        {
            tracing::warn!(
                "L2 speaker: the Lease was not released within 3 s; others take it when it expires"
            );
        }
    }

    fn status_reader(&self) -> Option<StatusReader> {
        let handles = self.handles.as_ref()?;
        let status = handles.status.clone();
        let requests = std::sync::Arc::clone(&handles.health_requests);
        let api_server = self.api_server.clone();
        Some(Box::new(move |dp| {
            let mut k = dto(&status.borrow(), &api_server, Programmed::of(dp).unclaimed);
            for (code, n) in ["200", "503"].iter().zip(requests.iter()) {
                k.health_check_requests.insert(
                    code.to_string(),
                    n.load(std::sync::atomic::Ordering::Relaxed),
                );
            }
            k
        }))
    }
}

/// The API's view of the agent's state.
fn dto(a: &AgentStatus, api_server: &str, unclaimed: usize) -> rivora_api::KubernetesStatus {
    rivora_api::KubernetesStatus {
        node: a.node.clone(),
        api_server: api_server.to_string(),
        watches: a
            .watches
            .iter()
            .map(|w| rivora_api::WatchInfo {
                kind: w.kind.to_string(),
                listed: w.listed,
                objects: w.objects as u64,
                events: w.state.events,
                errors: w.state.errors,
                last_error: w.state.last_error.clone(),
                absent: w.state.absent,
                undecodable: w
                    .state
                    .undecodable
                    .iter()
                    .map(|(name, b)| format!("{name}: {}", b.error))
                    .collect(),
            })
            .collect(),
        initial_sync_complete: a.gate_open,
        blocking: a.blockers.clone(),
        unclaimed_vips: unclaimed as u32,
        services: a
            .services
            .iter()
            .map(|(k, n)| (k.to_string(), *n as u64))
            .collect(),
        failures: a
            .failures
            .iter()
            .map(|(k, n)| (k.to_string(), *n as u64))
            .collect(),
        gateway_listeners: a
            .gateway_listeners
            .iter()
            .map(|(k, n)| (k.to_string(), *n as u64))
            .collect(),
        failing: a
            .failing
            .iter()
            .map(|(k, e)| format!("{k}: {e}"))
            .chain(a.failing_listeners.iter().map(|(k, e)| format!("{k}: {e}")))
            .collect(),
        offered_generation: a.offered,
        translations_reused: a.translations.hits,
        translations_done: a.translations.misses,
        node_report_writes: a.report_writes.0,
        node_report_write_failures: a.report_writes.1,
        node_report_error: a.report_error.clone(),
        health_check_node_ports: a
            .health_ports
            .iter()
            .map(|p| rivora_api::HealthCheckPortInfo {
                port: p.port,
                service: p.service.to_string(),
                local_endpoints: p.local_endpoints as u64,
                serving: p.serving,
                error: p.error.clone(),
            })
            .collect(),
        health_check_requests: Default::default(),
        announce: a.announce_mode.to_string(),
        bgp_peers: a.bgp_peer_names.clone(),
        bgp_problems: a.bgp_problems.clone(),
        l2_holder: a.l2_holder.clone(),
        l2_ineligible: a.l2_ineligible.clone(),
    }
}

/// Why this node cannot be the L2 speaker, as rivorad sees it: no responder, or no carrier on
/// its interface (the agent adds the cluster's reasons: exclusion, initial sync).
fn l2_problem(speaker: &rivora_api::SpeakerStatus) -> Option<String> {
    let interface = speaker.interface.as_deref().unwrap_or("the interface");
    if let Some(e) = &speaker.error {
        return Some(e.clone());
    }
    if !speaker.enabled || speaker.mac.is_none() {
        return Some("the ARP/NDP responder is not running".to_string());
    }
    if speaker.link_up == Some(false) {
        return Some(format!("{interface} is down or has no carrier"));
    }
    None
}
