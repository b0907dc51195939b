//! Translating only the Services whose inputs changed since the last pass.
//!
//! Why: a node agent's pass used to translate every Service of the cluster on every watch event,
//! so the cost of one endpoint change grew with the cluster (at 2,000 Services the pass took
//! 63 ms at p50, most of it translating Services nothing had touched). A Service's translation
//! is a pure function of its own object, its EndpointSlices, the ServicePolicies of its
//! namespace (a policy's `targetRefs` name Services of its own namespace only), and the node-wide
//! inputs (this node's identity, the set of VIP addresses an endpoint may not have, the class
//! settings). Every object the API server serves carries a `resourceVersion` that changes with
//! every write, so comparing the versions of those inputs tells whether the last result still
//! holds, at the cost of a few string comparisons instead of a translation.
//!
//! What is not cached: the cross-Service rules (an older Service keeps a contested VIP key; one
//! health check per backend), which [`crate::translate::translate_all_with`] applies to the
//! results every pass, as before. When a node-wide input changes, every entry is dropped.
//!
//! How it is kept honest: [`MemoStats`] counts reuses and translations (the node agent's metric
//! `rivora_k8s_translations_total`), and the tests below walk a sequence of changes through one
//! memo, comparing every step with a fresh translation.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use rivora_k8s_api::class::ClassConfig;

use crate::translate::{NodeIdentity, ServiceKey, ServiceVips, Snapshot, TranslateError};

/// A `(name, resourceVersion)` pair: an object as far as the cache needs to know it.
type Version = (String, Option<String>);

/// What one Service's translation read, by version.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ServiceInputs {
    uid: Option<String>,
    resource_version: Option<String>,
    slices: Vec<Version>,
    policies: Vec<Version>,
}

/// What every Service's translation read.
#[derive(Clone, Debug, PartialEq, Eq)]
struct NodeInputs {
    node: NodeIdentity,
    vip_addrs: BTreeSet<IpAddr>,
    class: ClassConfig,
}

/// How the cache fared, since the agent started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoStats {
    /// Services whose last translation was reused.
    pub hits: u64,
    /// Services translated (new, changed, or after a node-wide change).
    pub misses: u64,
    /// Times a node-wide input changed and every entry was dropped.
    pub flushes: u64,
}

/// The last translation of every Service, with the versions it was made from.
#[derive(Debug, Default)]
pub struct TranslateMemo {
    node: Option<NodeInputs>,
    entries: HashMap<ServiceKey, (ServiceInputs, Result<Arc<ServiceVips>, TranslateError>)>,
    /// ServicePolicy versions by namespace, for the pass under way.
    policies: HashMap<String, Vec<Version>>,
    stats: MemoStats,
}

fn version_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Version {
    (
        meta.name.clone().unwrap_or_default(),
        meta.resource_version.clone(),
    )
}

impl TranslateMemo {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hits, misses and flushes so far.
    pub fn stats(&self) -> MemoStats {
        self.stats
    }

    /// Starts a pass: drops every entry when a node-wide input changed, and indexes the
    /// snapshot's ServicePolicies by namespace.
    pub(crate) fn begin(
        &mut self,
        snapshot: &Snapshot,
        node: &NodeIdentity,
        vip_addrs: &BTreeSet<IpAddr>,
        class: &ClassConfig,
    ) {
        let now = NodeInputs {
            node: node.clone(),
            vip_addrs: vip_addrs.clone(),
            class: class.clone(),
        };
        if self.node.as_ref() != Some(&now) {
            if !self.entries.is_empty() {
                self.stats.flushes += 1;
            }
            self.entries.clear();
            self.node = Some(now);
        }
        self.policies.clear();
        for p in &snapshot.policies {
            self.policies
                .entry(p.metadata.namespace.clone().unwrap_or_default())
                .or_default()
                .push(version_of(&p.metadata));
        }
        for v in self.policies.values_mut() {
            v.sort();
        }
    }

    /// Ends a pass: forgets Services that are no longer there.
    pub(crate) fn retain(&mut self, present: &BTreeSet<ServiceKey>) {
        self.entries.retain(|k, _| present.contains(k));
    }

    /// The translation of `svc`: the cached one when nothing it reads changed, else `translate`
    /// run now (and cached).
    pub(crate) fn get_or_translate(
        &mut self,
        svc: &Service,
        snapshot: &Snapshot,
        translate: impl FnOnce() -> Result<ServiceVips, TranslateError>,
    ) -> Result<Arc<ServiceVips>, TranslateError> {
        let key = ServiceKey::of(svc);
        let slices = snapshot.slices.of(&key.namespace, &key.name);
        let policies = self.policies.get(&key.namespace);
        // Compared in place: a hit allocates nothing.
        if let Some((was, result)) = self.entries.get(&key)
            && was.uid == svc.metadata.uid
            && was.resource_version == svc.metadata.resource_version
            && was.slices.len() == slices.len()
            && was.slices.iter().zip(&slices).all(|((name, rv), s)| {
                s.metadata.name.as_deref() == Some(name.as_str())
                    && *rv == s.metadata.resource_version
            })
            && was.policies.as_slice() == policies.map(Vec::as_slice).unwrap_or_default()
        {
            self.stats.hits += 1;
            return result.clone();
        }
        let inputs = ServiceInputs {
            uid: svc.metadata.uid.clone(),
            resource_version: svc.metadata.resource_version.clone(),
            slices: slices.iter().map(|s| version_of(&s.metadata)).collect(),
            policies: policies.cloned().unwrap_or_default(),
        };
        // Without resourceVersions (objects made by hand in tests) nothing can be compared: such
        // results are not kept, so they are never reused.
        let comparable = inputs.resource_version.is_some()
            && inputs
                .slices
                .iter()
                .chain(&inputs.policies)
                .all(|(_, rv)| rv.is_some());
        self.stats.misses += 1;
        let result = translate().map(Arc::new);
        if comparable {
            self.entries.insert(key, (inputs, result.clone()));
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use rivora_k8s_api::ServicePolicy;
    use serde_json::{Value, json};

    use super::*;
    use crate::translate::{Outcome, translate_all, translate_all_with};

    fn service(name: &str, rv: &str, ip: &str) -> Arc<Service> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"namespace": "shop", "name": name, "uid": format!("uid-{name}"),
                             "resourceVersion": rv,
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"type": "LoadBalancer", "loadBalancerClass": rivora_k8s_api::class::LOAD_BALANCER_CLASS,
                         "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
                "status": {"loadBalancer": {"ingress": [{"ip": ip}]}}
            }))
            .unwrap(),
        )
    }

    fn slice(service: &str, rv: &str, addrs: &[&str]) -> Arc<EndpointSlice> {
        let endpoints: Vec<Value> = addrs
            .iter()
            .map(|a| json!({"addresses": [a], "conditions": {"ready": true}, "nodeName": "node-b"}))
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"namespace": "shop", "name": format!("{service}-abc"),
                             "resourceVersion": rv,
                             "labels": {"kubernetes.io/service-name": service}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": endpoints
            }))
            .unwrap(),
        )
    }

    fn policy(rv: &str, target: &str) -> Arc<ServicePolicy> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "rivora.dev/v1alpha1", "kind": "ServicePolicy",
                "metadata": {"namespace": "shop", "name": "p", "resourceVersion": rv,
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": target}],
                         "synRateLimit": {"rate": 100, "burst": 10}}
            }))
            .unwrap(),
        )
    }

    fn node() -> NodeIdentity {
        NodeIdentity {
            name: "node-a".into(),
            addresses: vec!["192.0.2.10".parse().unwrap()],
        }
    }

    fn backends(out: &BTreeMap<ServiceKey, Outcome>, name: &str) -> Vec<String> {
        match &out[&ServiceKey {
            namespace: "shop".into(),
            name: name.into(),
        }] {
            Outcome::Translated(v) => v.vips[0]
                .backends
                .iter()
                .map(|b| b.key.addr.to_string())
                .collect(),
            other => panic!("{name}: {other:?}"),
        }
    }

    /// A sequence of cluster states through one memo gives, at every step, exactly what a fresh
    /// translation of that state gives, and translates only the Services whose inputs changed.
    #[test]
    fn only_what_changed_is_translated_again_and_the_result_is_a_fresh_translations() {
        let class = ClassConfig::default();
        let mut memo = TranslateMemo::new();
        let mut step = |services: Vec<Arc<Service>>,
                        slices: Vec<Arc<EndpointSlice>>,
                        policies: Vec<Arc<ServicePolicy>>,
                        node: NodeIdentity| {
            let snap = Snapshot {
                services,
                slices: slices.into(),
                policies,
                ..Snapshot::default()
            };
            let before = memo.stats();
            let got = translate_all_with(&snap, &node, &class, &mut memo);
            let fresh = translate_all(&snap, &node, &class);
            assert_eq!(got, fresh, "the memo changes nothing in the result");
            let after = memo.stats();
            (
                got.services,
                after.misses - before.misses,
                after.hits - before.hits,
            )
        };
        let web = |rv| service("web", rv, "203.0.113.1");
        let api = |rv| service("api", rv, "203.0.113.2");
        // The slices of both Services: first web has one endpoint; then (2) a second one.
        let slices_at = |version: u32| match version {
            1 => vec![
                slice("web", "10", &["10.0.0.1"]),
                slice("api", "20", &["10.0.1.1"]),
            ],
            _ => vec![
                slice("web", "11", &["10.0.0.1", "10.0.0.2"]),
                slice("api", "20", &["10.0.1.1"]),
            ],
        };

        let (out, translated, reused) =
            step(vec![web("1"), api("1")], slices_at(1), vec![], node());
        assert_eq!((translated, reused), (2, 0));
        assert_eq!(backends(&out, "web"), ["10.0.0.1"]);

        // Nothing changed: nothing translated.
        let (_, translated, reused) = step(vec![web("1"), api("1")], slices_at(1), vec![], node());
        assert_eq!((translated, reused), (0, 2));

        // One slice changed: only its Service is translated, and the new endpoint is there.
        let (out, translated, reused) =
            step(vec![web("1"), api("1")], slices_at(2), vec![], node());
        assert_eq!((translated, reused), (1, 1));
        assert_eq!(backends(&out, "web"), ["10.0.0.1", "10.0.0.2"]);

        // A ServicePolicy of the namespace appears: both Services are translated again (a
        // policy's targetRefs can name any Service of its namespace).
        let (out, translated, _) = step(
            vec![web("1"), api("1")],
            slices_at(2),
            vec![policy("30", "web")],
            node(),
        );
        assert_eq!(translated, 2);
        let Outcome::Translated(v) = &out[&ServiceKey {
            namespace: "shop".into(),
            name: "web".into(),
        }] else {
            panic!()
        };
        assert!(
            v.vips[0].spec.syn_rate_limit.is_some(),
            "the policy applies"
        );

        // The Service itself changed (its resourceVersion): translated again.
        let (_, translated, reused) = step(
            vec![web("2"), api("1")],
            slices_at(2),
            vec![policy("30", "web")],
            node(),
        );
        assert_eq!((translated, reused), (1, 1));

        // A node-wide input changed (this node's addresses): everything is translated again.
        let other = NodeIdentity {
            addresses: vec!["192.0.2.11".parse().unwrap()],
            ..node()
        };
        let (_, translated, reused) = step(
            vec![web("2"), api("1")],
            slices_at(2),
            vec![policy("30", "web")],
            other,
        );
        assert_eq!((translated, reused), (2, 0));

        // A Service goes away: its entry goes with it.
        step(
            vec![web("2")],
            vec![slice("web", "11", &["10.0.0.1", "10.0.0.2"])],
            vec![policy("30", "web")],
            node(),
        );
        assert_eq!(
            memo.stats().flushes,
            2,
            "this node's addresses changed twice"
        );
        assert_eq!(memo.entries.len(), 1);
    }
}
