//! The status of this node's `RivoraNode` (pure): what the last applied desired state holds,
//! whether the apply succeeded, the gate, the datapath. The agent writes it (SSA, on change, at
//! most once a second); this module only computes it, so its caps and conditions are tested
//! without an API server.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use rivora_gateway::ObjKey;
use rivora_k8s_api::rivora_node::{LISTENER_PORT_UNAVAILABLE, REPORT_BUDGET_BYTES, condition};
use rivora_k8s_api::{
    AnnounceReport, BgpSessionReport, DatapathSummary, DigestListener, GatewayReport,
    ListenerReport, RivoraNodeStatus, ServiceReport, listeners_digest,
};

use crate::agent::Announcing;
use crate::bgp_peers::NodeBgp;
use crate::gateway::GatewayOutcome;
use crate::l2_lease::Election;
use crate::translate::{Outcome, ServiceKey, TranslateError};

/// Everything the report is made of.
pub struct Inputs<'a> {
    /// The translation results of the snapshot last offered.
    pub results: &'a BTreeMap<ServiceKey, Outcome>,
    /// The Gateways' results of the same snapshot.
    pub gateways: &'a BTreeMap<ObjKey, GatewayOutcome>,
    /// The GatewayClass controllerName this node serves.
    pub gateway_controller: &'a str,
    /// Whether the gate is open, and what holds it when not.
    pub gate_open: bool,
    /// The gate's blockers, as shown.
    pub blockers: &'a [String],
    /// The outcome of the last apply rivorad reported: None before the first, else Ok or the
    /// error. Only an apply of the last offered state counts.
    pub applied: Option<Result<(), String>>,
    /// The datapath, once rivorad said.
    pub datapath: Option<DatapathSummary>,
    /// VIPs programmed and adopted VIPs not claimed, as rivorad last reported.
    pub vip_count: usize,
    /// See `vip_count`.
    pub unclaimed: usize,
    /// The conditions last written, whose transition times are kept while unchanged.
    pub previous: &'a [Condition],
    /// Now.
    pub now: Timestamp,
    /// How the node announces (None: `--announce none`).
    pub announce: Option<AnnounceReport>,
    /// The objects the watches leave out, `Kind namespace/name: why`, sorted.
    pub undecodable: &'a [String],
}

/// What the `announce` part of the report is made of.
pub struct AnnounceInputs<'a> {
    /// `--announce`.
    pub mode: &'static str,
    /// The node's BGP configuration from the cluster.
    pub bgp: &'a NodeBgp,
    /// The Node carries the exclusion label.
    pub excluded: bool,
    /// What rivorad's announcers last said.
    pub announcing: &'a Announcing,
    /// Per session, its state and since when (the agent's record).
    pub since: &'a BTreeMap<(IpAddr, u16), (String, Timestamp)>,
    /// L2 mode: the Lease election's state.
    pub election: Option<&'a Election>,
    /// L2 mode: the ETP Local Services without a local ready endpoint (`namespace/name`).
    pub unserved: Vec<String>,
}

/// The report's `announce`: sessions named by their BGPPeer (the speaker's peers are in
/// `bgp.peers` order), refused peers, routes, the L2 holder.
pub fn announce(i: &AnnounceInputs<'_>) -> AnnounceReport {
    let names: BTreeMap<(IpAddr, u16), &str> = i
        .bgp
        .config
        .iter()
        .flat_map(|c| &c.peers)
        .zip(&i.bgp.peers)
        .map(|(p, n)| ((p.address, p.port), n.as_str()))
        .collect();
    AnnounceReport {
        mode: i.mode.to_string(),
        excluded: i.excluded,
        bgp_sessions: i
            .announcing
            .sessions
            .iter()
            .map(|s| BgpSessionReport {
                peer: names
                    .get(&(s.address, s.port))
                    .map(|n| n.to_string())
                    .unwrap_or_default(),
                address: s.address.to_string(),
                port: i32::from(s.port),
                state: s.state.clone(),
                since: i
                    .since
                    .get(&(s.address, s.port))
                    .filter(|(st, _)| *st == s.state)
                    .map(|(_, t)| Time(*t)),
                prefixes_sent: s.prefixes_sent as i64,
                last_error: s.last_error.clone(),
            })
            .collect(),
        bgp_problems: i.bgp.problems.iter().map(|p| p.to_string()).collect(),
        announced_routes: i.announcing.routes as i64,
        l2_holder: i.election.and_then(|e| e.holder.clone()),
        l2_answering: i.announcing.l2_answering,
        l2_ineligible: i.election.and_then(|e| e.ineligible.clone()),
        l2_error: i.election.and_then(|e| e.error.clone()),
        l2_unserved: if i.announcing.l2_answering {
            i.unserved.clone()
        } else {
            Vec::new()
        },
    }
}

/// The `BGPEstablished` condition of a BGP-mode report: True only when every BGPPeer selected
/// for this node is configured and its session Established.
fn bgp_condition(a: &AnnounceReport) -> (bool, &'static str, String) {
    let down: Vec<String> = a
        .bgp_sessions
        .iter()
        .filter(|s| s.state != "Established")
        .map(|s| {
            let who = if s.peer.is_empty() {
                s.address.clone()
            } else {
                format!("{} ({})", s.peer, s.address)
            };
            match &s.last_error {
                Some(e) => format!("{who}: {}: {e}", s.state),
                None => format!("{who}: {}", s.state),
            }
        })
        .collect();
    if !a.bgp_problems.is_empty() {
        (false, "PeersRefused", summary(&a.bgp_problems))
    } else if a.bgp_sessions.is_empty() {
        (
            false,
            "NoPeers",
            "no BGPPeer selects this node: nothing is announced".into(),
        )
    } else if !down.is_empty() {
        (false, "SessionsDown", summary(&down))
    } else {
        (
            true,
            "Established",
            format!(
                "{} session(s) Established, {} route(s) announced",
                a.bgp_sessions.len(),
                a.announced_routes
            ),
        )
    }
}

/// The status to write.
pub fn status(i: &Inputs<'_>) -> RivoraNodeStatus {
    let apply_ok = matches!(i.applied, Some(Ok(())));
    let ready = match (&i.datapath, &i.applied) {
        (None, _) => (
            false,
            "NotAttached",
            "the datapath is not attached yet".to_string(),
        ),
        (_, None) => (false, "NotApplied", "nothing applied yet".to_string()),
        (_, Some(Err(e))) => (false, "ApplyFailed", format!("the last apply failed: {e}")),
        (_, Some(Ok(()))) => (
            true,
            "Applied",
            "the datapath forwards what the cluster asks".into(),
        ),
    };
    let sync = if i.gate_open {
        (
            true,
            "Complete",
            "every watched kind was listed and every Service of the first list translated once"
                .to_string(),
        )
    } else if i.blockers.iter().any(|b| b.contains("fails")) {
        (
            false,
            "Blocked",
            format!(
                "adopted VIPs nothing claims are kept: {}",
                summary(i.blockers)
            ),
        )
    } else {
        (
            false,
            "Pending",
            format!("waiting: {}", summary(i.blockers)),
        )
    };
    let mut conditions = vec![
        cond(condition::READY, ready.0, ready.1, ready.2, i),
        cond(condition::INITIAL_SYNC_COMPLETE, sync.0, sync.1, sync.2, i),
    ];
    if let Some(a) = i.announce.as_ref().filter(|a| a.mode == "bgp") {
        let (on, reason, message) = bgp_condition(a);
        conditions.push(cond(condition::BGP_ESTABLISHED, on, reason, message, i));
    }
    let mut services = Vec::new();
    let mut total = 0usize;
    let mut programmed_total = 0usize;
    for (key, outcome) in i.results {
        let (vips, ready_b, draining_b, programmed, message, rv) = match outcome {
            Outcome::NotOurs => continue,
            Outcome::Translated(v) => {
                total += 1;
                if v.warnings.is_empty() {
                    // Programmed as asked (counted), or not because the last apply failed,
                    // which the Ready condition says once for all: not listed
                    // (RivoraNodeStatus::services says why).
                    programmed_total += usize::from(apply_ok);
                    continue;
                }
                let mut ready = 0;
                let mut draining = 0;
                for vip in &v.vips {
                    for b in &vip.backends {
                        if b.draining() {
                            draining += 1;
                        } else {
                            ready += 1;
                        }
                    }
                }
                let warnings: Vec<String> = v.warnings.iter().map(|w| w.to_string()).collect();
                let message = match (&i.applied, warnings.is_empty()) {
                    (Some(Err(e)), _) => {
                        Some(format!("not programmed: the last apply failed: {e}"))
                    }
                    (_, false) => Some(warnings.join("; ")),
                    _ => None,
                };
                (
                    v.vips.iter().map(|x| vip_label(&x.spec)).collect(),
                    ready,
                    draining,
                    apply_ok,
                    message,
                    v.vips
                        .first()
                        .and_then(|x| x.origin.service())
                        .and_then(|o| o.resource_version.clone()),
                )
            }
            Outcome::Failed(e) => {
                total += 1;
                (Vec::new(), 0, 0, false, Some(e.to_string()), None)
            }
        };
        services.push(ServiceReport {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            resource_version: rv,
            vips,
            ready_backends: ready_b,
            draining_backends: draining_b,
            programmed,
            message,
        });
    }
    let mut out = RivoraNodeStatus {
        conditions,
        datapath: i.datapath.clone(),
        blocking: i.blockers.to_vec(),
        vip_count: i.vip_count as i64,
        unclaimed_vips: i.unclaimed as i64,
        services,
        services_total: total as i64,
        services_programmed: programmed_total as i64,
        // Set by the writer at the time of each write (agent.rs).
        heartbeat_time: None,
        gateway_controller: Some(i.gateway_controller.to_string()),
        gateways: gateway_reports(i, apply_ok),
        gateways_total: i.gateways.len() as i64,
        announce: i.announce.clone(),
        undecodable: i.undecodable.to_vec(),
        undecodable_total: i.undecodable.len() as i64,
        omitted: None,
    };
    keep_within_budget(&mut out, REPORT_BUDGET_BYTES);
    out
}

/// Shortens the diagnostic lists (`services`, then `undecodable`, then `blocking`) from
/// their ends until the status serializes to at most `budget` bytes, saying in `omitted` what
/// was left out; the lists the controller acts on are never touched. Halving, so a report of
/// any size takes a few serializations, not one per entry.
fn keep_within_budget(st: &mut RivoraNodeStatus, budget: usize) {
    let size = |st: &RivoraNodeStatus| serde_json::to_vec(st).map(|v| v.len()).unwrap_or(0);
    if size(st) <= budget {
        return;
    }
    let listed = (st.services.len(), st.undecodable.len(), st.blocking.len());
    for list in 0..3 {
        loop {
            let len = match list {
                0 => st.services.len(),
                1 => st.undecodable.len(),
                _ => st.blocking.len(),
            };
            if len == 0 || size(st) <= budget {
                break;
            }
            let keep = len / 2;
            match list {
                0 => st.services.truncate(keep),
                1 => st.undecodable.truncate(keep),
                _ => st.blocking.truncate(keep),
            }
        }
    }
    let mut said = Vec::new();
    for (what, before, now) in [
        ("services", listed.0, st.services.len()),
        ("undecodable", listed.1, st.undecodable.len()),
        ("blocking", listed.2, st.blocking.len()),
    ] {
        if now < before {
            said.push(format!("{what}: {now} of {before} listed"));
        }
    }
    st.omitted = Some(format!(
        "{} (the status is kept under {} KiB)",
        said.join(", "),
        budget / 1024
    ));
}

/// `ADDRESS:PORT/PROTO`, as reports list VIPs.
fn vip_label(spec: &rivora_dataplane::VipSpec) -> String {
    format!(
        "{}/{}",
        std::net::SocketAddr::new(spec.key.addr, spec.key.port),
        if spec.key.proto == rivora_dataplane::proto::UDP {
            "UDP"
        } else {
            "TCP"
        }
    )
}

/// Every Gateway, compactly ([`GatewayReport`]'s doc says why): the digest of its listeners
/// programmed as asked, and the listeners that are not, with why. While the last apply failed
/// nothing is programmed as asked and the Ready condition says why: the entries carry only the
/// generation.
fn gateway_reports(i: &Inputs<'_>, apply_ok: bool) -> Vec<GatewayReport> {
    i.gateways
        .iter()
        .map(|(key, o)| {
            let mut programmed = Vec::new();
            let mut failed = Vec::new();
            for l in &o.listeners {
                match &l.result {
                    Ok(v) => programmed.push(DigestListener {
                        name: l.name.clone(),
                        route: l.route.to_string(),
                        vips: v.iter().map(|x| vip_label(&x.spec)).collect(),
                    }),
                    Err(e) => failed.push(ListenerReport {
                        name: l.name.clone(),
                        route: Some(l.route.to_string()),
                        vips: Vec::new(),
                        ready_backends: 0,
                        programmed: false,
                        message: Some(e.to_string()),
                        reason: matches!(e, TranslateError::KeyHeld { .. })
                            .then(|| LISTENER_PORT_UNAVAILABLE.to_string()),
                    }),
                }
            }
            GatewayReport {
                namespace: key.namespace.clone(),
                name: key.name.clone(),
                generation: o.generation,
                digest: apply_ok.then(|| listeners_digest(programmed)),
                listeners: if apply_ok { failed } else { Vec::new() },
            }
        })
        .collect()
}

fn summary(blockers: &[String]) -> String {
    match blockers.len() {
        0 => "nothing".into(),
        1 => blockers[0].clone(),
        n => format!("{} (and {} more)", blockers[0], n - 1),
    }
}

fn cond(type_: &str, on: bool, reason: &str, message: String, i: &Inputs<'_>) -> Condition {
    let status = if on { "True" } else { "False" };
    let since = i
        .previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(i.now));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: None,
        last_transition_time: since,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::TranslateError;

    fn key(n: usize) -> ServiceKey {
        ServiceKey {
            namespace: "ns".into(),
            name: format!("s{n:04}"),
        }
    }

    #[test]
    fn conditions_follow_the_gate_and_the_apply_and_keep_their_transition_time() {
        let results = BTreeMap::from([
            (key(1), Outcome::Failed(TranslateError::ServicePort(0))),
            (key(2), Outcome::NotOurs),
        ]);
        let blockers =
            vec!["Service ns/s0001 fails: spec.ports: port 0 is not a port number".to_string()];
        let t0 = Timestamp::from_second(1_000).unwrap();
        let no_gateways = BTreeMap::new();
        let inputs = || Inputs {
            results: &results,
            gateways: &no_gateways,
            gateway_controller: "rivora.dev/gateway-controller",
            gate_open: false,
            blockers: &blockers,
            applied: Some(Ok(())),
            datapath: Some(DatapathSummary::default()),
            vip_count: 3,
            unclaimed: 2,
            previous: &[],
            now: t0,
            announce: None,
            undecodable: &[],
        };
        let s = status(&inputs());
        let c = |s: &RivoraNodeStatus, t: &str| {
            s.conditions.iter().find(|c| c.type_ == t).unwrap().clone()
        };
        assert_eq!(c(&s, "Ready").status, "True");
        let sync = c(&s, "InitialSyncComplete");
        assert_eq!(
            (sync.status.as_str(), sync.reason.as_str()),
            ("False", "Blocked")
        );
        assert!(sync.message.contains("ns/s0001 fails"), "{}", sync.message);
        assert_eq!(s.services.len(), 1, "not-ours Services are not listed");
        assert!(!s.services[0].programmed);
        assert_eq!((s.vip_count, s.unclaimed_vips), (3, 2));
        // Later, the same state: the transition time stays; the gate opens: it moves.
        let later = Timestamp::from_second(2_000).unwrap();
        let again = status(&Inputs {
            previous: &s.conditions,
            now: later,
            ..inputs()
        });
        assert_eq!(again, s);
        let open = status(&Inputs {
            previous: &s.conditions,
            now: later,
            gate_open: true,
            blockers: &[],
            ..inputs()
        });
        assert_eq!(
            c(&open, "InitialSyncComplete").last_transition_time,
            Time(later)
        );
        assert_eq!(c(&open, "Ready").last_transition_time, Time(t0));
    }

    /// Inputs of a node with nothing else going on: the gate closed, the last apply good, no
    /// datapath, no VIPs, no announcer, nothing undecodable.
    fn plain_inputs<'a>(
        results: &'a BTreeMap<ServiceKey, Outcome>,
        gateways: &'a BTreeMap<ObjKey, GatewayOutcome>,
    ) -> Inputs<'a> {
        Inputs {
            results,
            gateways,
            gateway_controller: "rivora.dev/gateway-controller",
            gate_open: false,
            blockers: &[],
            applied: Some(Ok(())),
            datapath: None,
            vip_count: 0,
            unclaimed: 0,
            previous: &[],
            now: Timestamp::from_second(1).unwrap(),
            announce: None,
            undecodable: &[],
        }
    }

    /// A listener whose VIP key another object holds is reported with reason PortUnavailable
    /// (rivora-controller makes that the listener's Accepted False); other failures carry no
    /// reason (Programmed False/Invalid).
    #[test]
    fn a_listener_whose_port_is_held_says_port_unavailable() {
        use crate::gateway::ListenerOutcome;
        let held = TranslateError::KeyHeld {
            key: rivora_dataplane::VipKey {
                addr: "10.0.0.1".parse().unwrap(),
                port: 80,
                port_last: 80,
                proto: 6,
            },
            holder: "Service ns/web".into(),
        };
        let other = TranslateError::EndpointIsVip {
            endpoint: "10.0.0.1".parse().unwrap(),
            slice: "ns/web-abc".into(),
        };
        let listener = |name: &str, e: TranslateError| ListenerOutcome {
            name: name.into(),
            route: ObjKey::new("ns", "r"),
            result: Err(e),
        };
        let gateways = BTreeMap::from([(
            ObjKey::new("ns", "gw"),
            GatewayOutcome {
                generation: 4,
                listeners: vec![listener("held", held), listener("other", other)],
            },
        )]);
        let no_results = BTreeMap::new();
        let reports = gateway_reports(&plain_inputs(&no_results, &gateways), true);
        let l = &reports[0].listeners;
        assert_eq!(
            (l[0].programmed, l[0].reason.as_deref()),
            (false, Some("PortUnavailable"))
        );
        assert!(l[0].message.as_deref().unwrap().contains("Service ns/web"));
        assert_eq!((l[1].programmed, l[1].reason.as_deref()), (false, None));
    }

    /// Services programmed as asked are counted, the others listed, at any number: 10,000
    /// programmed and 5,904 refused (what a node of 4,096 VIPs sees of 10,000 Services) fit.
    #[test]
    fn programmed_services_are_counted_and_every_problem_is_listed() {
        let (good, bad) = (10_000, 5_904);
        let results: BTreeMap<ServiceKey, Outcome> = (0..good + bad)
            .map(|i| {
                let o = if i < good {
                    Outcome::Translated(Default::default())
                } else {
                    Outcome::Failed(TranslateError::ServicePort(0))
                };
                (key(i), o)
            })
            .collect();
        let no_gateways = BTreeMap::new();
        let s = status(&plain_inputs(&results, &no_gateways));
        assert_eq!(s.services_total, (good + bad) as i64);
        assert_eq!(s.services_programmed, good as i64);
        assert_eq!(s.services.len(), bad, "every problem listed");
        assert!(
            s.services
                .iter()
                .all(|r| !r.programmed && r.message.is_some())
        );
        assert_eq!(s.omitted, None);
        let json = serde_json::to_vec(&s).unwrap();
        assert!(json.len() <= REPORT_BUDGET_BYTES, "{} bytes", json.len());
        // While the last apply fails, the Ready condition says so once: no Service is listed
        // for it, none counted programmed.
        let failing = status(&Inputs {
            applied: Some(Err("boom".into())),
            ..plain_inputs(&results, &no_gateways)
        });
        assert_eq!(
            (failing.services.len(), failing.services_programmed),
            (bad, 0)
        );
    }

    /// Every Gateway is reported (no cap: 10,000 with two listeners fit the budget), each with
    /// the digest of its programmed listeners; a failed apply leaves only the generation.
    #[test]
    fn every_gateway_is_reported_with_its_digest() {
        use crate::gateway::ListenerOutcome;
        let n = 10_000;
        let gateways: BTreeMap<ObjKey, GatewayOutcome> = (0..n)
            .map(|i| {
                let listener = |name: &str| ListenerOutcome {
                    name: name.into(),
                    route: ObjKey::new("apps", format!("route-{i:05}-{name}")),
                    result: Ok(Vec::new()),
                };
                (
                    ObjKey::new("apps", format!("gateway-{i:05}")),
                    GatewayOutcome {
                        generation: 3,
                        listeners: vec![listener("tcp"), listener("udp")],
                    },
                )
            })
            .collect();
        let no_results = BTreeMap::new();
        let s = status(&plain_inputs(&no_results, &gateways));
        assert_eq!((s.gateways.len(), s.gateways_total), (n, n as i64));
        let first = &s.gateways[0];
        let want = listeners_digest(["tcp", "udp"].map(|l| DigestListener {
            name: l.into(),
            route: format!("apps/route-00000-{l}"),
            vips: Vec::new(),
        }));
        assert_eq!(first.digest.as_deref(), Some(want.as_str()));
        assert!(
            first.listeners.is_empty(),
            "programmed listeners are in the digest"
        );
        let json = serde_json::to_vec(&s).unwrap();
        assert!(json.len() <= REPORT_BUDGET_BYTES, "{} bytes", json.len());
        assert_eq!(s.omitted, None);
        let failing = gateway_reports(
            &Inputs {
                applied: Some(Err("boom".into())),
                ..plain_inputs(&no_results, &gateways)
            },
            false,
        );
        assert_eq!(
            (failing[0].digest.as_ref(), failing[0].listeners.len()),
            (None, 0)
        );
        assert_eq!(failing[0].generation, 3);
    }

    /// Over the budget, only the diagnostic lists are shortened, and `omitted` says by how
    /// much; the Gateways stay whole.
    #[test]
    fn the_budget_shortens_only_diagnostics_and_says_so() {
        let results: BTreeMap<ServiceKey, Outcome> = (0..2_000)
            .map(|i| (key(i), Outcome::Failed(TranslateError::ServicePort(0))))
            .collect();
        let gateways: BTreeMap<ObjKey, GatewayOutcome> = (0..50)
            .map(|i| {
                (
                    ObjKey::new("apps", format!("gw-{i}")),
                    GatewayOutcome {
                        generation: 1,
                        listeners: Vec::new(),
                    },
                )
            })
            .collect();
        let undecodable: Vec<String> = (0..500)
            .map(|i| format!("Service ns/bad-{i}: spec.ports: invalid type"))
            .collect();
        let mut s = status(&Inputs {
            undecodable: &undecodable,
            ..plain_inputs(&results, &gateways)
        });
        assert_eq!(
            (s.services.len(), s.undecodable.len(), s.omitted.as_ref()),
            (2_000, 500, None)
        );
        let budget = 64 * 1024;
        keep_within_budget(&mut s, budget);
        let json = serde_json::to_vec(&s).unwrap();
        assert!(json.len() <= budget, "{} bytes", json.len());
        assert_eq!(
            s.gateways.len(),
            50,
            "what the controller acts on stays whole"
        );
        assert!(
            s.services.len() < 2_000 && !s.services.is_empty(),
            "{}",
            s.services.len()
        );
        assert_eq!(
            s.undecodable.len(),
            500,
            "shortened in order: services first"
        );
        let omitted = s.omitted.as_deref().unwrap();
        assert!(
            omitted.starts_with(&format!("services: {} of 2000 listed", s.services.len())),
            "{omitted}"
        );
        assert_eq!((s.services_total, s.undecodable_total), (2_000, 500));
    }

    #[test]
    fn bgp_sessions_are_named_by_their_peer_and_the_condition_says_what_is_down() {
        use crate::agent::SessionState;
        use rivora_bgp::{PeerConfig, SpeakerConfig};
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let bgp = NodeBgp {
            config: Some(SpeakerConfig {
                local_as: 64512,
                router_id: "10.0.0.9".parse().unwrap(),
                peers: vec![PeerConfig::new(a, 64500), PeerConfig::new(b, 64500)],
            }),
            peers: vec!["tor-a".into(), "tor-b".into()],
            problems: Vec::new(),
            announce: true,
        };
        let t0 = Timestamp::from_second(1_000).unwrap();
        let session = |addr, state: &str, err: Option<&str>| SessionState {
            address: addr,
            port: 179,
            state: state.into(),
            prefixes_sent: 2,
            last_error: err.map(String::from),
        };
        let announcing = Announcing {
            sessions: vec![
                session(a, "Established", None),
                session(b, "Active", Some("connection refused")),
            ],
            routes: 2,
            ..Announcing::default()
        };
        let since = BTreeMap::from([
            ((a, 179), ("Established".to_string(), t0)),
            // A record of an older state does not date the current one.
            ((b, 179), ("Connect".to_string(), t0)),
        ]);
        let r = announce(&AnnounceInputs {
            mode: "bgp",
            bgp: &bgp,
            excluded: false,
            announcing: &announcing,
            since: &since,
            election: None,
            unserved: Vec::new(),
        });
        let names: Vec<(&str, &str)> = r
            .bgp_sessions
            .iter()
            .map(|s| (s.peer.as_str(), s.state.as_str()))
            .collect();
        assert_eq!(names, [("tor-a", "Established"), ("tor-b", "Active")]);
        assert_eq!(r.bgp_sessions[0].since, Some(Time(t0)));
        assert_eq!(r.bgp_sessions[1].since, None);
        assert_eq!(r.announced_routes, 2);
        let (on, reason, message) = bgp_condition(&r);
        assert_eq!((on, reason), (false, "SessionsDown"));
        assert!(
            message.contains("tor-b (10.0.0.2): Active: connection refused"),
            "{message}"
        );

        let mut up = announcing.clone();
        up.sessions[1] = session(b, "Established", None);
        let r = announce(&AnnounceInputs {
            mode: "bgp",
            bgp: &bgp,
            excluded: false,
            announcing: &up,
            since: &since,
            election: None,
            unserved: Vec::new(),
        });
        assert_eq!(bgp_condition(&r).1, "Established");
        let refused = AnnounceReport {
            bgp_problems: vec!["BGPPeer x: spec.address: bad; no session".into()],
            ..r.clone()
        };
        assert_eq!(bgp_condition(&refused).1, "PeersRefused");
        let none = AnnounceReport {
            bgp_sessions: Vec::new(),
            ..r
        };
        assert_eq!(bgp_condition(&none).1, "NoPeers");
    }
}
