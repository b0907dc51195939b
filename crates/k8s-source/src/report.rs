//! The status of this node's `RivoraNode` (pure): what the last applied desired state holds,
//! whether the apply succeeded, the gate, the datapath. The agent writes it (SSA, on change, at
//! most once a second); this module only computes it, so its caps and conditions are tested
//! without an API server.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use rivora_gateway::ObjKey;
use rivora_k8s_api::rivora_node::{
    MAX_REPORTED_BLOCKERS, MAX_REPORTED_GATEWAYS, MAX_REPORTED_SERVICES, MAX_REPORTED_VIPS,
    condition,
};
use rivora_k8s_api::{
    DatapathSummary, GatewayReport, ListenerReport, RivoraNodeStatus, ServiceReport,
};

use crate::gateway::GatewayOutcome;
use crate::translate::{Outcome, ServiceKey};

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
    let conditions = vec![
        cond(condition::READY, ready.0, ready.1, ready.2, i),
        cond(condition::INITIAL_SYNC_COMPLETE, sync.0, sync.1, sync.2, i),
    ];
    let mut services = Vec::new();
    let mut total = 0usize;
    for (key, outcome) in i.results {
        let (vips, ready_b, draining_b, programmed, message, rv) = match outcome {
            Outcome::NotOurs => continue,
            Outcome::Translated(v) => {
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
                    v.vips
                        .iter()
                        .take(MAX_REPORTED_VIPS)
                        .map(|x| vip_label(&x.spec))
                        .collect(),
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
            Outcome::Failed(e) => (Vec::new(), 0, 0, false, Some(e.to_string()), None),
        };
        total += 1;
        if services.len() < MAX_REPORTED_SERVICES {
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
    }
    RivoraNodeStatus {
        conditions,
        datapath: i.datapath.clone(),
        blocking: i
            .blockers
            .iter()
            .take(MAX_REPORTED_BLOCKERS)
            .cloned()
            .collect(),
        vip_count: i.vip_count as i64,
        unclaimed_vips: i.unclaimed as i64,
        services,
        services_total: total as i64,
        // Set by the writer at the time of each write (agent.rs).
        heartbeat_time: None,
        gateway_controller: Some(i.gateway_controller.to_string()),
        gateways: gateway_reports(i, apply_ok),
        gateways_total: i.gateways.len() as i64,
    }
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

/// The first [`MAX_REPORTED_GATEWAYS`] Gateways: per listener with an active route, its VIPs
/// and whether they are programmed (translated, and the last apply succeeded).
fn gateway_reports(i: &Inputs<'_>, apply_ok: bool) -> Vec<GatewayReport> {
    i.gateways
        .iter()
        .take(MAX_REPORTED_GATEWAYS)
        .map(|(key, o)| GatewayReport {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            generation: o.generation,
            listeners: o
                .listeners
                .iter()
                .map(|l| {
                    let (vips, ready, programmed, message) = match &l.result {
                        Ok(v) => (
                            v.iter()
                                .take(MAX_REPORTED_VIPS)
                                .map(|x| vip_label(&x.spec))
                                .collect(),
                            v.iter()
                                .flat_map(|x| &x.backends)
                                .filter(|b| b.role.takes_new_flows())
                                .count() as i64,
                            apply_ok,
                            match &i.applied {
                                Some(Err(e)) => {
                                    Some(format!("not programmed: the last apply failed: {e}"))
                                }
                                _ => None,
                            },
                        ),
                        Err(e) => (Vec::new(), 0, false, Some(e.to_string())),
                    };
                    ListenerReport {
                        name: l.name.clone(),
                        route: Some(l.route.to_string()),
                        vips,
                        ready_backends: ready,
                        programmed,
                        message,
                    }
                })
                .collect(),
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
    use crate::translate::{ServiceVips, TranslateError};

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

    #[test]
    fn the_service_list_is_capped_and_the_total_says_so() {
        let n = MAX_REPORTED_SERVICES + 10;
        let results: BTreeMap<ServiceKey, Outcome> = (0..n)
            .map(|i| (key(i), Outcome::Translated(ServiceVips::default())))
            .collect();
        let no_gateways = BTreeMap::new();
        let s = status(&Inputs {
            results: &results,
            gateways: &no_gateways,
            gateway_controller: "rivora.dev/gateway-controller",
            gate_open: true,
            blockers: &[],
            applied: None,
            datapath: None,
            vip_count: 0,
            unclaimed: 0,
            previous: &[],
            now: Timestamp::from_second(1).unwrap(),
        });
        assert_eq!(s.services.len(), MAX_REPORTED_SERVICES);
        assert_eq!(s.services_total, n as i64);
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "NotAttached")
        );
        let json = serde_json::to_string(&s).unwrap();
        assert!(
            json.len() < 256 * 1024,
            "a capped status stays small: {} bytes",
            json.len()
        );
    }
}
