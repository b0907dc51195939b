//! The adoption gate: when rivorad may remove the VIPs it adopted from the pinned datapath but
//! nothing claimed.
//!
//! Why a gate: after a restart the maps still forward for every VIP of the previous run. A VIP
//! that no Service claims may be stale (its Service was deleted while rivorad was down) or may
//! only look unclaimed because the watches have not delivered everything yet. Removing it too
//! early breaks traffic that should keep flowing; so nothing is removed until the picture is
//! complete (Cilium's "initializers", kube-rs's `InitDone`; research notes §5).
//!
//! The gate opens when both hold:
//! - every watched kind has delivered its first full list (the reflector's first `InitDone`);
//! - every Service present in the first full list of Services has translated once
//!   successfully ([`Outcome::reconciled`]: translated, refused or not ours), or has been
//!   deleted since.
//!
//! Services created after that list never hold it. A Service that keeps failing holds it
//! closed (nothing is removed, by spec) and [`InitialSync::blockers`] names it. Translations
//! made before every kind was listed do not count: they may lack endpoints or policies. Once
//! open the gate stays open: a relist (watch expired, partition) is diffed like any other
//! snapshot and never closes it again.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use rivora_gateway::ObjKey;

use crate::gateway::GatewayOutcome;
use crate::translate::{Outcome, ServiceKey};

/// A watched kind whose first full list the gate waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// core/v1 Service.
    Service,
    /// discovery.k8s.io/v1 EndpointSlice.
    EndpointSlice,
    /// rivora.dev ServicePolicy.
    ServicePolicy,
    /// core/v1 Node (this node's).
    Node,
    /// gateway.networking.k8s.io GatewayClass.
    GatewayClass,
    /// gateway.networking.k8s.io Gateway.
    Gateway,
    /// gateway.networking.k8s.io TCPRoute (v1).
    TcpRoute,
    /// gateway.networking.k8s.io UDPRoute (v1).
    UdpRoute,
    /// gateway.networking.k8s.io ReferenceGrant.
    ReferenceGrant,
    /// core/v1 Namespace (labels, for `allowedRoutes` selectors).
    Namespace,
    /// rivora.dev BGPPeer (BGP mode only).
    BgpPeer,
    /// core/v1 Secret of the BGP passwords' namespace (BGP mode only).
    Secret,
    /// meridio-2.nordix.org DistributionGroup (`--gateway` only).
    DistributionGroup,
    /// meridio-2.nordix.org L34Route (`--gateway` only).
    L34Route,
    /// meridio-2.nordix.org LoadBalancerEndpointSlice (`--gateway` only).
    LoadBalancerEndpointSlice,
    /// discovery.k8s.io/v1 EndpointSlice labelled with a distribution group (`--gateway` only:
    /// Meridio-2's older endpoint form).
    GroupEndpointSlice,
}

impl Kind {
    /// The kinds the node agent always watches.
    pub const ALL: [Kind; 10] = [
        Kind::Service,
        Kind::EndpointSlice,
        Kind::ServicePolicy,
        Kind::Node,
        Kind::GatewayClass,
        Kind::Gateway,
        Kind::TcpRoute,
        Kind::UdpRoute,
        Kind::ReferenceGrant,
        Kind::Namespace,
    ];

    /// The kinds watched besides [`Kind::ALL`] when the node announces by BGP: the peers and
    /// the Secrets of their passwords. Listed before the first offer, so a speaker never starts
    /// from a partial list (a peer seen before its Secret would come up without its password).
    pub const BGP: [Kind; 2] = [Kind::BgpPeer, Kind::Secret];

    /// The kinds watched besides [`Kind::ALL`] when rivorad serves a Meridio-2 Gateway
    /// (`--gateway`), all in the Gateway's namespace.
    pub const MERIDIO: [Kind; 4] = [
        Kind::DistributionGroup,
        Kind::L34Route,
        Kind::LoadBalancerEndpointSlice,
        Kind::GroupEndpointSlice,
    ];

    /// What an operator should know when the API server does not serve this kind.
    pub fn absent_hint(self) -> &'static str {
        match self {
            Kind::TcpRoute | Kind::UdpRoute => {
                "Rivora reads TCPRoute/UDPRoute gateway.networking.k8s.io/v1, which Gateway API \
                 v1.6 and later serve (standard and experimental channels); older CRDs that \
                 serve only v1alpha2 are not read: upgrade them"
            }
            Kind::DistributionGroup | Kind::L34Route | Kind::LoadBalancerEndpointSlice => {
                "install Meridio-2's CRDs (or the chart's with meridio.installCRDs=true) to serve \
                 a Meridio-2 Gateway"
            }
            _ => "install Gateway API's CRDs to use Gateways",
        }
    }

    /// Kinds a cluster may not serve (Gateway API's CRDs are optional): a 404 on their list
    /// counts as an empty list.
    pub const OPTIONAL: [Kind; 8] = [
        Kind::GatewayClass,
        Kind::Gateway,
        Kind::TcpRoute,
        Kind::UdpRoute,
        Kind::ReferenceGrant,
        Kind::DistributionGroup,
        Kind::L34Route,
        Kind::LoadBalancerEndpointSlice,
    ];
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::ServicePolicy => "ServicePolicy",
            Kind::Node => "Node",
            Kind::GatewayClass => "GatewayClass",
            Kind::Gateway => "Gateway",
            Kind::TcpRoute => "TCPRoute",
            Kind::UdpRoute => "UDPRoute",
            Kind::ReferenceGrant => "ReferenceGrant",
            Kind::Namespace => "Namespace",
            Kind::BgpPeer => "BGPPeer",
            Kind::Secret => "Secret",
            Kind::DistributionGroup => "DistributionGroup",
            Kind::L34Route => "L34Route",
            Kind::LoadBalancerEndpointSlice => "LoadBalancerEndpointSlice",
            Kind::GroupEndpointSlice => "EndpointSlice (distribution group)",
        })
    }
}

/// What keeps the gate closed; shown in logs, metrics and `rivoractl status`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Blocker {
    /// The kind's first full list has not arrived.
    NotListed(Kind),
    /// The Service was in the first list and has not translated yet.
    Pending(ServiceKey),
    /// The Service was in the first list and its last translation failed.
    Failing {
        /// The Service.
        service: ServiceKey,
        /// The error, as reported.
        error: String,
    },
    /// The Gateway was in the first list and has not translated yet.
    GatewayPending(ObjKey),
    /// The Gateway was in the first list and a listener of it failed to translate.
    GatewayFailing {
        /// The Gateway.
        gateway: ObjKey,
        /// The first failing listener's error.
        error: String,
    },
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::NotListed(kind) => write!(f, "waiting for the first list of {kind}s"),
            Blocker::Pending(s) => write!(f, "Service {s} not translated yet"),
            Blocker::Failing { service, error } => write!(f, "Service {service} fails: {error}"),
            Blocker::GatewayPending(g) => write!(f, "Gateway {g} not translated yet"),
            Blocker::GatewayFailing { gateway, error } => {
                write!(f, "Gateway {gateway} fails: {error}")
            }
        }
    }
}

/// The gate's state machine. Feed it the first full list of each kind and every translation
/// result; ask it whether it is open.
#[derive(Clone, Debug)]
pub struct InitialSync {
    /// Kinds whose first full list has not arrived.
    unlisted: BTreeSet<Kind>,
    /// Services of the first full list not reconciled yet (None before that list), with the
    /// last error of those that failed.
    pending: Option<BTreeMap<ServiceKey, Option<String>>>,
    /// The same for the Gateways of the first full list of Gateways.
    pending_gateways: Option<BTreeMap<ObjKey, Option<String>>>,
    open: bool,
}

impl InitialSync {
    /// A closed gate waiting for the first list of each of `kinds` (which must include
    /// [`Kind::Service`]; [`Kind::ALL`] for the node agent).
    pub fn new(kinds: impl IntoIterator<Item = Kind>) -> Self {
        let mut unlisted: BTreeSet<Kind> = kinds.into_iter().collect();
        unlisted.insert(Kind::Service);
        // Without a Gateway watch there are no Gateways to wait for.
        let pending_gateways = (!unlisted.contains(&Kind::Gateway)).then(BTreeMap::new);
        InitialSync {
            unlisted,
            pending: None,
            pending_gateways,
            open: false,
        }
    }

    /// The first full list of a kind other than Services and Gateways has arrived (later
    /// lists: no effect).
    pub fn listed(&mut self, kind: Kind) {
        if kind != Kind::Service && kind != Kind::Gateway {
            self.unlisted.remove(&kind);
        }
    }

    /// The first full list of Gateways has arrived (empty when the kind is not served). Only
    /// the first call counts. Gateways not of Rivora's classes never block: they get no result
    /// and count as reconciled.
    pub fn gateways_listed(&mut self, keys: impl IntoIterator<Item = ObjKey>) {
        if self.pending_gateways.is_none() && !self.open {
            self.pending_gateways = Some(keys.into_iter().map(|k| (k, None)).collect());
            self.unlisted.remove(&Kind::Gateway);
        }
    }

    /// The first full list of Services has arrived, holding these keys. Only the first call
    /// counts: the keys of a relist do not become blockers.
    pub fn services_listed(&mut self, keys: impl IntoIterator<Item = ServiceKey>) {
        if self.pending.is_none() && !self.open {
            self.pending = Some(keys.into_iter().map(|k| (k, None)).collect());
            self.unlisted.remove(&Kind::Service);
        }
    }

    /// Records a translation of a whole snapshot (an entry per Service present, one per
    /// Gateway of ours). Returns true exactly once: when this result opens the gate (the caller
    /// then prunes what nothing claimed).
    pub fn observe(
        &mut self,
        results: &BTreeMap<ServiceKey, Outcome>,
        gateways: &BTreeMap<ObjKey, GatewayOutcome>,
    ) -> bool {
        if self.open || !self.unlisted.is_empty() {
            return false;
        }
        let (Some(pending), Some(pending_gw)) =
            (self.pending.as_mut(), self.pending_gateways.as_mut())
        else {
            return false;
        };
        pending_gw.retain(|key, last_error| match gateways.get(key) {
            None => false,
            Some(g) => match g.listeners.iter().find_map(|l| l.result.as_ref().err()) {
                Some(e) => {
                    *last_error = Some(e.to_string());
                    true
                }
                None => false,
            },
        });
        pending.retain(|key, last_error| match results.get(key) {
            // Deleted since the first list: done.
            None => false,
            Some(Outcome::Failed(e)) => {
                *last_error = Some(e.to_string());
                true
            }
            Some(_) => false,
        });
        if pending.is_empty() && pending_gw.is_empty() {
            self.open = true;
            self.pending = Some(BTreeMap::new());
            self.pending_gateways = Some(BTreeMap::new());
            return true;
        }
        false
    }

    /// Whether unclaimed adopted VIPs may be removed.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// What keeps it closed, kinds first, then Services by key (empty when open).
    pub fn blockers(&self) -> Vec<Blocker> {
        if self.open {
            return Vec::new();
        }
        let mut out: Vec<Blocker> = self
            .unlisted
            .iter()
            .copied()
            .map(Blocker::NotListed)
            .collect();
        for (key, error) in self.pending.iter().flatten() {
            out.push(match error {
                None => Blocker::Pending(key.clone()),
                Some(e) => Blocker::Failing {
                    service: key.clone(),
                    error: e.clone(),
                },
            });
        }
        for (key, error) in self.pending_gateways.iter().flatten() {
            out.push(match error {
                None => Blocker::GatewayPending(key.clone()),
                Some(e) => Blocker::GatewayFailing {
                    gateway: key.clone(),
                    error: e.clone(),
                },
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::TranslateError;

    fn key(name: &str) -> ServiceKey {
        ServiceKey {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    /// A pass with Services only (no Gateway of ours).
    fn svc_only(g: &mut InitialSync, results: &BTreeMap<ServiceKey, Outcome>) -> bool {
        g.observe(results, &BTreeMap::new())
    }

    fn ok() -> Outcome {
        Outcome::Translated(Default::default())
    }

    fn failed() -> Outcome {
        Outcome::Failed(TranslateError::IngressAddress("x".into()))
    }

    fn results(entries: &[(&str, Outcome)]) -> BTreeMap<ServiceKey, Outcome> {
        entries.iter().map(|(n, o)| (key(n), o.clone())).collect()
    }

    /// A gate with every kind listed and Services a and b in the first list.
    fn listed_gate() -> InitialSync {
        let mut g = InitialSync::new(Kind::ALL);
        g.services_listed([key("a"), key("b")]);
        g.gateways_listed([]);
        for k in Kind::ALL {
            g.listed(k);
        }
        g
    }

    #[test]
    fn it_waits_for_every_kinds_first_list() {
        let mut g = InitialSync::new(Kind::ALL);
        assert_eq!(
            g.blockers(),
            Kind::ALL.map(Blocker::NotListed).to_vec(),
            "sorted as the enum"
        );
        g.services_listed([]);
        g.gateways_listed([]);
        for k in Kind::ALL.into_iter().filter(|k| *k != Kind::ServicePolicy) {
            g.listed(k);
        }
        // Everything translates, but ServicePolicies are not listed: results do not count.
        assert!(!svc_only(&mut g, &results(&[])));
        assert_eq!(g.blockers(), [Blocker::NotListed(Kind::ServicePolicy)]);
        g.listed(Kind::ServicePolicy);
        assert!(svc_only(&mut g, &results(&[])));
        assert!(g.is_open() && g.blockers().is_empty());
    }

    #[test]
    fn every_listed_service_must_translate_once_and_a_failing_one_holds_it() {
        let mut g = listed_gate();
        assert_eq!(
            g.blockers(),
            [Blocker::Pending(key("a")), Blocker::Pending(key("b"))]
        );
        assert!(!svc_only(&mut g, &results(&[("a", ok()), ("b", failed())])));
        assert!(!g.is_open());
        assert_eq!(
            g.blockers(),
            [Blocker::Failing {
                service: key("b"),
                error: "status.loadBalancer.ingress: \"x\" is not an IP address".into()
            }]
        );
        assert!(
            g.blockers()[0]
                .to_string()
                .starts_with("Service ns/b fails: ")
        );
        // a failing later does not matter: it translated once.
        assert!(!svc_only(
            &mut g,
            &results(&[("a", failed()), ("b", failed())])
        ));
        assert_eq!(g.blockers().len(), 1);
        assert!(svc_only(
            &mut g,
            &results(&[("a", failed()), ("b", Outcome::NotOurs)])
        ));
        assert!(g.is_open());
        // Opens once.
        assert!(!svc_only(&mut g, &results(&[("a", ok()), ("b", ok())])));
    }

    #[test]
    fn services_created_later_never_block_and_deleted_ones_count_as_done() {
        let mut g = listed_gate();
        // b was deleted after the list; c is new and failing.
        assert!(svc_only(&mut g, &results(&[("a", ok()), ("c", failed())])));
        assert!(g.is_open());
    }

    #[test]
    fn a_relist_never_closes_it_again() {
        let mut g = listed_gate();
        assert!(svc_only(&mut g, &results(&[("a", ok()), ("b", ok())])));
        // A relist of Services with a failing key, and a relist of another kind.
        g.services_listed([key("a"), key("z")]);
        g.listed(Kind::EndpointSlice);
        assert!(!svc_only(&mut g, &results(&[("z", failed())])));
        assert!(g.is_open() && g.blockers().is_empty());
    }

    #[test]
    fn only_the_first_service_list_sets_the_keys() {
        let mut g = InitialSync::new(Kind::ALL);
        g.services_listed([key("a")]);
        // A relist before the gate opened (watch expired): its new keys do not block.
        g.services_listed([key("a"), key("late")]);
        g.gateways_listed([]);
        for k in Kind::ALL {
            g.listed(k);
        }
        assert!(svc_only(
            &mut g,
            &results(&[("a", ok()), ("late", failed())])
        ));
    }

    #[test]
    fn results_before_the_service_list_do_not_count() {
        let mut g = InitialSync::new([Kind::Service]);
        assert!(!svc_only(&mut g, &results(&[])));
        assert_eq!(g.blockers(), [Blocker::NotListed(Kind::Service)]);
        g.services_listed([key("a")]);
        assert!(!svc_only(&mut g, &results(&[("a", failed())])));
        assert!(svc_only(&mut g, &results(&[("a", ok())])));
    }

    #[test]
    fn a_service_whose_slice_loops_holds_the_gate_until_the_slice_is_fixed() {
        use crate::endpoints::tests::slice;
        use crate::translate::{NodeIdentity, Snapshot, translate};
        use rivora_k8s_api::class::ClassConfig;
        use serde_json::json;
        use std::sync::Arc;

        let svc = |name: &str, ip: &str| {
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"namespace": "ns", "name": name,
                                 "creationTimestamp": "2026-01-01T00:00:00Z"},
                    "spec": {"type": "LoadBalancer",
                             "loadBalancerClass": rivora_k8s_api::class::LOAD_BALANCER_CLASS,
                             "ports": [{"port": 80, "protocol": "TCP"}]},
                    "status": {"loadBalancer": {"ingress": [{"ip": ip}]}},
                }))
                .unwrap(),
            )
        };
        let slice_to = |addr: &str| {
            slice(
                "ns",
                "f-1",
                Some("f"),
                json!({"addressType": "IPv4", "ports": [{"name": "", "port": 80, "protocol": "TCP"}],
                       "endpoints": [{"addresses": [addr]}]}),
            )
        };
        let node = NodeIdentity {
            name: "n1".into(),
            addresses: vec![],
        };
        let mut snap = Snapshot {
            services: vec![svc("a", "203.0.113.1"), svc("f", "203.0.113.2")],
            // f's endpoint is a's VIP.
            slices: vec![slice_to("203.0.113.1")].into(),
            policies: vec![],
            ..Snapshot::default()
        };
        let mut g = InitialSync::new(Kind::ALL);
        g.services_listed(snap.services.iter().map(|s| ServiceKey::of(s)));
        g.gateways_listed([]);
        for k in Kind::ALL {
            g.listed(k);
        }
        assert!(!svc_only(
            &mut g,
            &translate(&snap, &node, &ClassConfig::default())
        ));
        let blockers = g.blockers();
        assert_eq!(blockers.len(), 1, "{blockers:?}");
        assert!(
            blockers[0]
                .to_string()
                .starts_with("Service ns/f fails: endpoint 203.0.113.1"),
            "{}",
            blockers[0]
        );
        snap.slices = vec![slice_to("10.1.0.1")].into();
        assert!(svc_only(
            &mut g,
            &translate(&snap, &node, &ClassConfig::default())
        ));
    }
}
