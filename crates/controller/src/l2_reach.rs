//! The `rivora.dev/L2Reachable` condition of an `externalTrafficPolicy: Local` Service when
//! the cluster announces by L2: one node (the holder of the speaker Lease) answers ARP/NDP for
//! every VIP, so all of a VIP's traffic arrives there, and with `Local` only that node's own
//! endpoints may serve it. A Service without a ready endpoint on the holder is unreachable
//! although it has an address and ready pods elsewhere; the condition (and an Event when it
//! turns False) says so, naming the node.
//!
//! Why the controller writes it: it is the one writer of Service status; the holder's
//! `RivoraNode` report lists the Services it answers for but cannot serve
//! (`status.announce.l2Unserved`), so this is a pure function of the reports.
//!
//! (The spec chose one cluster-wide Lease. One Lease per Service would let each Service's
//! speaker be a node with its endpoints, at the price of one elector per Service on every node
//! and Lease writes growing with the number of Services; docs/kubernetes.md, "Announcing".)

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use rivora_k8s_api::RivoraNode;

/// The condition's type.
pub const CONDITION_TYPE: &str = "rivora.dev/L2Reachable";
/// Its reason when the holder has no local ready endpoint (also the Event's reason).
pub const REASON_NO_LOCAL_ENDPOINT: &str = "NoLocalEndpointOnL2Speaker";

/// The node answering ARP/NDP for the VIPs, as its own report says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L2Speaker {
    /// Its Node name.
    pub node: String,
    /// The Services (`namespace/name`) it answers for but cannot serve.
    pub unserved: BTreeSet<String>,
}

/// The current L2 speaker: the one report in L2 mode that says it answers. None without L2
/// mode, while nobody answers (a failover), or if two reports claim it (a moment of a
/// hand-over seen through two stale reports): then the condition is left as it was.
pub fn speaker(nodes: &[Arc<RivoraNode>]) -> Option<L2Speaker> {
    let mut answering = nodes.iter().filter_map(|n| {
        let a = n.status.as_ref()?.announce.as_ref()?;
        (a.mode == "l2" && a.l2_answering).then(|| L2Speaker {
            node: n.name_any(),
            unserved: a.l2_unserved.iter().cloned().collect(),
        })
    });
    let first = answering.next()?;
    answering.next().is_none().then_some(first)
}

/// Whether any report is in L2 mode (so ETP Local Services get the condition at all).
pub fn l2_mode(nodes: &[Arc<RivoraNode>]) -> bool {
    nodes.iter().any(|n| {
        n.status
            .as_ref()
            .and_then(|s| s.announce.as_ref())
            .is_some_and(|a| a.mode == "l2")
    })
}

/// The condition `svc` should carry: None when it does not apply (not `Local`, no L2 mode, or
/// no address yet); `previous` is kept while no single speaker is known.
pub fn condition(
    svc: &Service,
    l2: bool,
    speaker: Option<&L2Speaker>,
    previous: Option<&Condition>,
    now: Timestamp,
) -> Option<Condition> {
    let local = svc
        .spec
        .as_ref()
        .and_then(|s| s.external_traffic_policy.as_deref())
        == Some("Local");
    if !l2 || !local {
        return None;
    }
    let Some(sp) = speaker else {
        return previous.cloned();
    };
    let key = format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any());
    let (status, reason, message) = if sp.unserved.contains(&key) {
        (
            "False",
            REASON_NO_LOCAL_ENDPOINT,
            format!(
                "externalTrafficPolicy Local: node {} answers ARP/NDP for every VIP (it holds the L2 speaker Lease) and has no ready endpoint of this Service, so its VIPs are not served; run an endpoint on that node or use externalTrafficPolicy Cluster",
                sp.node
            ),
        )
    } else {
        (
            "True",
            "LocalEndpointOnL2Speaker",
            format!(
                "node {} answers ARP/NDP for the VIPs and has a ready endpoint",
                sp.node
            ),
        )
    };
    let last_transition_time = previous
        .filter(|c| c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Some(Condition {
        type_: CONDITION_TYPE.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: svc.metadata.generation,
        last_transition_time,
    })
}

/// The Service's current L2Reachable condition.
pub fn current(svc: &Service) -> Option<&Condition> {
    crate::observe::service_condition(svc, CONDITION_TYPE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(name: &str, mode: &str, answering: bool, unserved: &[&str]) -> Arc<RivoraNode> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "rivora.dev/v1alpha1", "kind": "RivoraNode",
                "metadata": {"name": name}, "spec": {},
                "status": {"announce": {"mode": mode, "l2Answering": answering,
                    "l2Unserved": unserved}},
            }))
            .unwrap(),
        )
    }

    fn svc(etp: &str) -> Service {
        serde_json::from_value(json!({
            "metadata": {"namespace": "shop", "name": "web", "generation": 3},
            "spec": {"type": "LoadBalancer", "externalTrafficPolicy": etp},
        }))
        .unwrap()
    }

    #[test]
    fn the_holders_report_decides_and_names_the_node() {
        let now: Timestamp = "2026-12-02T10:00:00Z".parse().unwrap();
        let nodes = [
            report("n1", "l2", false, &["shop/web"]),
            report("n2", "l2", true, &["shop/web"]),
        ];
        let sp = speaker(&nodes).unwrap();
        assert_eq!(sp.node, "n2");
        let c = condition(&svc("Local"), l2_mode(&nodes), Some(&sp), None, now).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", REASON_NO_LOCAL_ENDPOINT)
        );
        assert!(c.message.contains("node n2"), "{}", c.message);
        assert_eq!(c.observed_generation, Some(3));
        // Served: True; the transition time moves only with the status.
        let served = L2Speaker {
            node: "n2".into(),
            unserved: BTreeSet::new(),
        };
        let later: Timestamp = "2026-12-02T10:01:00Z".parse().unwrap();
        let t = condition(&svc("Local"), true, Some(&served), Some(&c), later).unwrap();
        assert_eq!(t.status, "True");
        assert_eq!(t.last_transition_time.0, later);
        let again = condition(&svc("Local"), true, Some(&served), Some(&t), now).unwrap();
        assert_eq!(again.last_transition_time.0, later);
        // Cluster Services, and clusters without L2, get no such condition.
        assert!(condition(&svc("Cluster"), true, Some(&sp), None, now).is_none());
        assert!(condition(&svc("Local"), false, None, None, now).is_none());
        // No single speaker (a hand-over): what was there stays.
        assert_eq!(condition(&svc("Local"), true, None, Some(&c), now), Some(c));
    }

    #[test]
    fn no_or_two_answering_reports_mean_no_speaker() {
        assert!(speaker(&[report("n1", "l2", false, &[])]).is_none());
        assert!(speaker(&[report("n1", "l2", true, &[]), report("n2", "l2", true, &[])]).is_none());
        assert!(speaker(&[report("n1", "bgp", true, &[])]).is_none());
        assert!(!l2_mode(&[report("n1", "bgp", false, &[])]));
    }
}
