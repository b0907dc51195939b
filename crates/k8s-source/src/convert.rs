//! From the per-Service translation results to the one source-neutral [`DesiredState`] rivorad
//! applies.
//!
//! Why a module of its own: [`crate::translate`] speaks Kubernetes (Services, roles, targets);
//! rivorad's subsystems speak [`rivora_desired`]. This is the one place that maps one onto the
//! other, and the one place that decides what a failing Service contributes: its last good
//! VIPs (what was forwarding keeps forwarding), unless an older Service holds their keys now.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rivora_dataplane::{SourceRange, VipKey, VipSpec};
use rivora_desired::{
    AnnouncePolicy, BackendMeta, Community, DesiredState, DesiredVip, GatewayRef, NodeSettings,
    Origin, ServiceRef, SnatAddresses,
};

use rivora_gateway::ObjKey;

use crate::gateway::GatewayOutcome;
use crate::translate::{K8sVip, Outcome, ServiceKey, ServiceVips, Translation, VipOrigin};

/// The desired VIP of one translated VIP. Draining endpoints (serving and terminating while
/// ready ones exist) are marked `terminating`; fallback endpoints (terminating, used because no
/// ready endpoint is left) are not, since they take new flows.
pub fn desired_vip(v: &K8sVip) -> DesiredVip {
    DesiredVip {
        spec: dataplane_spec(v),
        origin: match &v.origin {
            VipOrigin::Service(o) => Origin::Service(ServiceRef {
                namespace: o.service.namespace.clone(),
                name: o.service.name.clone(),
                port_name: o.port_name.clone(),
                uid: o.uid.clone().unwrap_or_default(),
                resource_version: o.resource_version.clone().unwrap_or_default(),
            }),
            VipOrigin::Gateway(o) => Origin::Gateway(GatewayRef {
                namespace: o.gateway.namespace.clone(),
                name: o.gateway.name.clone(),
                listener: o.listener.clone(),
                route: o.route.to_string(),
                uid: o.uid.clone().unwrap_or_default(),
                generation: o.generation,
            }),
        },
        backends: v
            .backends
            .iter()
            .map(|b| BackendMeta {
                check: b.check.clone(),
                terminating: b.draining(),
                target: b.target.as_ref().map(|t| t.to_string()),
                node: b.node.clone(),
                ..BackendMeta::new(b.key)
            })
            .collect(),
        announce: AnnouncePolicy {
            advertise: v.announce.advertise,
            communities: communities(&v.announce.communities),
        },
    }
}

/// The VIP as the dataplane programs it: the translated spec plus what the datapath enforces
/// for a Kubernetes VIP beyond addresses and weights.
/// - `source_ranges`: loadBalancerSourceRanges of the VIP's family (a family without ranges
///   in a restricted Service is closed: an empty list).
/// - `stateless_reverse` off: a pod's other traffic (pod-to-pod, ClusterIP replies) leaves
///   through the same node, and the stateless rewrite of every packet from an endpoint that
///   serves one VIP would turn those into the VIP's; per-flow reverse entries touch only the
///   VIP's own flows.
/// - `draining`: serving-but-terminating endpoints while ready ones exist: established flows
///   finish on them, new flows go to the ready ones (kube-proxy's terminating semantics).
/// - `affinity_timeout`: sessionAffinity ClientIP's timeoutSeconds (a client's new flows stay
///   on its backend through backend changes while it keeps coming back within it).
/// - `snat`: endpoints on other nodes of an ETP Cluster Service. Their replies would leave
///   through their own node, straight to the client; with this node's address as the flows'
///   source (bpf/snat.h) they come back here. They see the node's address, local endpoints
///   the client's, as kube-proxy does it.
/// - `reject_weight`: a Gateway listener's share of new flows whose backendRefs do not resolve
///   (or have no endpoint): refused by the datapath (crates/k8s-source/src/gateway.rs).
pub fn dataplane_spec(v: &K8sVip) -> VipSpec {
    let mut spec = v.spec.clone();
    spec.reject_weight = v.reject_weight;
    spec.affinity_timeout = v.affinity_timeout;
    spec.snat = v
        .backends
        .iter()
        .filter(|b| b.snat)
        .map(|b| b.key)
        .collect();
    spec.source_ranges = v.source_ranges.as_ref().map(|nets| {
        nets.iter()
            .map(|n| SourceRange::new(n.addr(), n.prefix_len()))
            .collect()
    });
    spec.stateless_reverse = false;
    spec.draining = v
        .backends
        .iter()
        .filter(|b| b.draining())
        .map(|b| b.key)
        .collect();
    spec
}

/// `AS:VALUE` strings as wire communities, sorted and without duplicates. The CRD's schema
/// only admits that form; anything else is skipped rather than failing the Service.
fn communities(list: &[String]) -> Vec<Community> {
    let set: BTreeSet<Community> = list
        .iter()
        .filter_map(|c| {
            let (a, v) = c.split_once(':')?;
            let a: u16 = a.trim().parse().ok()?;
            let v: u16 = v.trim().parse().ok()?;
            Some(Community((u32::from(a) << 16) | u32::from(v)))
        })
        .collect();
    set.into_iter().collect()
}

/// Keeps, per Service and per Gateway listener, the last translation that succeeded: what it
/// contributes while it fails.
#[derive(Debug, Default, Clone)]
pub struct LastGood {
    by_service: BTreeMap<ServiceKey, Arc<ServiceVips>>,
    by_listener: BTreeMap<(ObjKey, String), Vec<K8sVip>>,
}

impl LastGood {
    /// Records `results`: successes replace the Service's entry, Services that are gone or not
    /// ours any more lose theirs, failures keep whatever was there.
    pub fn record(&mut self, results: &BTreeMap<ServiceKey, Outcome>) {
        // Entries that are still good stay as they are: a pass copies only what changed (a
        // copy of every Service's VIPs on every pass was an eighth of a pass at 2,000).
        self.by_service.retain(|k, _| {
            matches!(
                results.get(k),
                Some(Outcome::Failed(_) | Outcome::Translated(_))
            )
        });
        for (k, o) in results {
            if let Outcome::Translated(v) = o
                && self.by_service.get(k) != Some(v)
            {
                self.by_service.insert(k.clone(), v.clone());
            }
        }
    }

    /// The last good translation of a Service, if any.
    pub fn get(&self, key: &ServiceKey) -> Option<&ServiceVips> {
        self.by_service.get(key).map(Arc::as_ref)
    }

    /// Records the Gateways' results as [`LastGood::record`] does the Services': a listener
    /// that translated replaces its entry, a failing one keeps it, one that is gone (or whose
    /// Gateway is) loses it.
    pub fn record_gateways(&mut self, gateways: &BTreeMap<ObjKey, GatewayOutcome>) {
        let result = |(g, l): &(ObjKey, String)| {
            gateways
                .get(g)
                .and_then(|o| o.listeners.iter().find(|x| x.name == *l))
                .map(|x| &x.result)
        };
        self.by_listener.retain(|k, _| result(k).is_some());
        for (g, o) in gateways {
            for l in &o.listeners {
                if let Ok(v) = &l.result {
                    let key = (g.clone(), l.name.clone());
                    if self.by_listener.get(&key) != Some(v) {
                        self.by_listener.insert(key, v.clone());
                    }
                }
            }
        }
    }

    /// The last good VIPs of a Gateway listener, if any.
    pub fn listener(&self, gateway: &ObjKey, listener: &str) -> Option<&[K8sVip]> {
        self.by_listener
            .get(&(gateway.clone(), listener.to_string()))
            .map(Vec::as_slice)
    }
}

/// The desired state of a translation (after [`LastGood::record`] and
/// [`LastGood::record_gateways`]): every VIP of every translated Service and Gateway listener,
/// plus the last good VIPs of failing ones whose keys nothing translated holds.
/// Sorted by name, so equal inputs give equal states (the agent offers a state only when it
/// differs from the last one). The one node-wide setting so far is `snat`, this node's
/// addresses as the source of flows to other nodes' endpoints (part 4 brings the announcers'
/// settings from the cluster).
pub fn desired_state(t: &Translation, last_good: &LastGood, snat: SnatAddresses) -> DesiredState {
    let results = &t.services;
    let mut vips: Vec<DesiredVip> = Vec::new();
    let mut taken: BTreeSet<VipKey> = BTreeSet::new();
    for o in results.values() {
        if let Outcome::Translated(v) = o {
            for k in &v.vips {
                taken.insert(k.spec.key);
                vips.push(desired_vip(k));
            }
        }
    }
    for l in t.gateways.values().flat_map(|g| &g.listeners) {
        if let Ok(v) = &l.result {
            for k in v {
                taken.insert(k.spec.key);
                vips.push(desired_vip(k));
            }
        }
    }
    for (g, o) in &t.gateways {
        for l in o.listeners.iter().filter(|l| l.result.is_err()) {
            for k in last_good
                .listener(g, &l.name)
                .unwrap_or_default()
                .iter()
                .filter(|k| taken.insert(k.spec.key))
            {
                vips.push(desired_vip(k));
            }
        }
    }
    for (key, o) in results {
        if let Outcome::Failed(_) = o
            && let Some(v) = last_good.get(key)
        {
            for k in v.vips.iter().filter(|k| taken.insert(k.spec.key)) {
                vips.push(desired_vip(k));
            }
        }
    }
    vips.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    DesiredState {
        vips,
        node: NodeSettings {
            snat,
            ..NodeSettings::default()
        },
        classifier: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::TargetRef;
    use crate::select::{Role, TrafficPolicy};
    use crate::translate::{Announce, BackendMeta as K8sBackend, ServiceOrigin, TranslateError};
    use rivora_dataplane::{BackendKey, BackendSpec, VipSpec, proto};

    fn services_only(results: &BTreeMap<ServiceKey, Outcome>) -> Translation {
        Translation {
            services: results.clone(),
            gateways: BTreeMap::new(),
        }
    }

    fn key(name: &str) -> ServiceKey {
        ServiceKey {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn k8s_vip(svc: &str, addr: &str, port: u16) -> K8sVip {
        let b = BackendKey {
            addr: "10.9.0.1".parse().unwrap(),
            port: 8080,
        };
        K8sVip {
            spec: VipSpec::new(
                format!("k8s/ns/{svc}/{port}/tcp/{addr}"),
                VipKey::exact(addr.parse().unwrap(), port, proto::TCP),
                vec![BackendSpec::new(b.addr, b.port)],
            ),
            origin: VipOrigin::Service(ServiceOrigin {
                service: key(svc),
                uid: Some("u1".into()),
                resource_version: Some("7".into()),
                port_name: Some("http".into()),
            }),
            traffic_policy: TrafficPolicy::Cluster,
            backends: vec![K8sBackend {
                key: b,
                role: Role::Draining,
                local: true,
                snat: false,
                target: Some(TargetRef {
                    kind: "Pod".into(),
                    namespace: Some("ns".into()),
                    name: "web-1".into(),
                }),
                node: Some("n2".into()),
                check: None,
            }],
            source_ranges: None,
            affinity_timeout: None,
            health_check_node_port: None,
            policy: None,
            announce: Announce {
                advertise: false,
                communities: vec!["65000:2".into(), "65000:1".into(), "65000:1".into()],
            },
            reject_weight: 0,
        }
    }

    fn translated(vips: Vec<K8sVip>) -> Outcome {
        Outcome::Translated(Arc::new(ServiceVips {
            vips,
            ..Default::default()
        }))
    }

    #[test]
    fn a_k8s_vip_maps_onto_the_desired_model() {
        let d = desired_vip(&k8s_vip("web", "192.0.2.1", 80));
        assert_eq!(
            d.origin.to_string(),
            "service ns/web port http",
            "{:?}",
            d.origin
        );
        let Origin::Service(s) = &d.origin else {
            panic!()
        };
        assert_eq!((s.uid.as_str(), s.resource_version.as_str()), ("u1", "7"));
        let b = &d.backends[0];
        assert!(b.terminating, "a draining endpoint is terminating");
        assert_eq!(b.target.as_deref(), Some("Pod ns/web-1"));
        assert_eq!(b.node.as_deref(), Some("n2"));
        assert!(!d.announce.advertise);
        assert_eq!(
            d.announce
                .communities
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>(),
            ["65000:1", "65000:2"]
        );
        let mut fallback = k8s_vip("web", "192.0.2.1", 80);
        fallback.backends[0].role = Role::Fallback;
        assert!(
            !desired_vip(&fallback).backends[0].terminating,
            "a fallback endpoint takes new flows"
        );
    }

    #[test]
    fn the_dataplane_spec_carries_ranges_stateful_replies_and_drains() {
        let mut v = k8s_vip("web", "192.0.2.1", 80);
        assert!(
            v.spec.stateless_reverse,
            "VipSpec::new's default, as the file source has it"
        );
        v.source_ranges = Some(vec!["198.51.100.0/24".parse().unwrap()]);
        let spec = desired_vip(&v).spec;
        assert_eq!(
            spec.source_ranges,
            Some(vec![SourceRange::new("198.51.100.0".parse().unwrap(), 24)])
        );
        assert!(
            !spec.stateless_reverse,
            "Kubernetes VIPs keep per-flow reverse entries"
        );
        assert_eq!(
            spec.draining,
            BTreeSet::from([v.backends[0].key]),
            "the draining endpoint is drained in the datapath"
        );
        v.backends[0].role = Role::Fallback;
        v.source_ranges = Some(vec![]);
        let spec = desired_vip(&v).spec;
        assert!(
            spec.draining.is_empty(),
            "a fallback endpoint takes new flows"
        );
        assert_eq!(
            spec.source_ranges,
            Some(vec![]),
            "a closed family stays closed"
        );
        v.source_ranges = None;
        assert_eq!(desired_vip(&v).spec.source_ranges, None);
        assert_eq!(desired_vip(&v).spec.reject_weight, 0);
        v.reject_weight = 3;
        assert_eq!(
            desired_vip(&v).spec.reject_weight,
            3,
            "a Gateway listener's refused share reaches the datapath"
        );
    }

    #[test]
    fn remote_endpoints_are_kept_and_marked_for_source_translation() {
        let mut v = k8s_vip("web", "192.0.2.1", 80);
        let remote = BackendKey {
            addr: "10.9.1.1".parse().unwrap(),
            port: 8080,
        };
        v.spec
            .backends
            .push(BackendSpec::new(remote.addr, remote.port));
        let mut b = v.backends[0].clone();
        (b.key, b.local, b.snat, b.role) = (remote, false, true, Role::Active);
        v.backends.push(b);
        let d = desired_vip(&v);
        assert_eq!(
            d.spec.backends.len(),
            2,
            "the remote endpoint is programmed"
        );
        assert_eq!(
            d.spec.snat,
            BTreeSet::from([remote]),
            "and only it is translated"
        );
        assert_eq!(d.backends.len(), 2, "rivoractl shows both");
        let node = SnatAddresses {
            v4: Some("10.220.0.11".parse().unwrap()),
            v6: None,
        };
        let results = BTreeMap::from([(key("web"), translated(vec![v]))]);
        let state = desired_state(&services_only(&results), &LastGood::default(), node);
        assert_eq!(
            state.node.snat, node,
            "the node's source goes with the VIPs"
        );
        let mut sticky = k8s_vip("web", "192.0.2.1", 80);
        sticky.spec.affinity_client_ip = true;
        sticky.affinity_timeout = Some(std::time::Duration::from_secs(60));
        assert_eq!(
            desired_vip(&sticky).spec.affinity_timeout,
            Some(std::time::Duration::from_secs(60)),
            "the ClientIP timeout reaches the datapath"
        );
    }

    #[test]
    fn a_failing_service_keeps_its_last_good_vips_unless_another_holds_the_key() {
        let mut last = LastGood::default();
        let first = BTreeMap::from([
            (key("a"), translated(vec![k8s_vip("a", "192.0.2.1", 80)])),
            (key("b"), translated(vec![k8s_vip("b", "192.0.2.2", 80)])),
        ]);
        last.record(&first);
        let names = |s: &DesiredState| -> Vec<String> {
            s.vips.iter().map(|v| v.spec.name.clone()).collect()
        };
        assert_eq!(
            names(&desired_state(
                &services_only(&first),
                &last,
                SnatAddresses::default()
            )),
            ["k8s/ns/a/80/tcp/192.0.2.1", "k8s/ns/b/80/tcp/192.0.2.2"]
        );
        // b fails: its VIP stays. c now translates to a's old key while a fails: c gets it.
        let failed = || Outcome::Failed(TranslateError::ServicePort(0));
        let second = BTreeMap::from([
            (key("a"), failed()),
            (key("b"), failed()),
            (key("c"), translated(vec![k8s_vip("c", "192.0.2.1", 80)])),
        ]);
        last.record(&second);
        assert_eq!(
            names(&desired_state(
                &services_only(&second),
                &last,
                SnatAddresses::default()
            )),
            ["k8s/ns/b/80/tcp/192.0.2.2", "k8s/ns/c/80/tcp/192.0.2.1"]
        );
        // b is deleted: its last good VIPs are forgotten.
        let third = BTreeMap::from([(key("a"), failed())]);
        last.record(&third);
        assert!(last.get(&key("b")).is_none());
        assert_eq!(
            names(&desired_state(
                &services_only(&third),
                &last,
                SnatAddresses::default()
            )),
            ["k8s/ns/a/80/tcp/192.0.2.1"]
        );
        // A Service that never translated contributes nothing.
        let mut fresh = LastGood::default();
        let only_failed = BTreeMap::from([(key("z"), failed())]);
        fresh.record(&only_failed);
        assert!(
            desired_state(
                &services_only(&only_failed),
                &fresh,
                SnatAddresses::default()
            )
            .vips
            .is_empty()
        );
    }
}
