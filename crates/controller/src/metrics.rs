//! rivora-controller's Prometheus metrics, served at `GET /metrics` (OpenMetrics text).
//!
//! | name | type | labels |
//! |---|---|---|
//! | `rivora_controller_leader` | gauge (0/1) | |
//! | `rivora_controller_pool_addresses` | gauge | `pool`, `family`, `state` (`total`, `used`) |
//! | `rivora_controller_services` | gauge | `state` (`assigned`, `failed`) |
//! | `rivora_controller_service_failures` | gauge | `reason` (Services failing for it now) |
//! | `rivora_controller_passes_total` | counter | |
//! | `rivora_controller_status_writes_total` | counter | `kind` (`service`, `pool`, `servicepolicy`, `gatewayclass`, `gateway`, `route`) |
//! | `rivora_controller_gateway_status_write_failures_total` | counter | `reason` (`error`: refused and logged; `conflict`: a route changed under the write, retried next pass) |
//! | `rivora_controller_undecodable_objects` | gauge | `kind` (objects left out of the watch of that kind because they do not decode; every replica, leader or not) |
//!
//! Why gauges of the current state for pools and failures: they are recomputed from the whole
//! snapshot on every pass, so a gauge is exactly what the last pass saw (a counter of failures
//! would grow with the number of passes, not of problems).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::ipam::Outcome;
use crate::ipam::blocks;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
    family: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

/// Status writes of one pass, by kind of object.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StatusWrites {
    /// Service status writes.
    pub service: usize,
    /// AddressPool status writes.
    pub pool: usize,
    /// ServicePolicy status writes.
    pub policy: usize,
}

/// The registry and every metric in it.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    leader: Gauge,
    pool_addresses: Family<PoolLabels, Gauge>,
    services: Family<StateLabels, Gauge>,
    failures: Family<ReasonLabels, Gauge>,
    passes: Counter<u64, AtomicU64>,
    writes: Family<KindLabels, Counter<u64, AtomicU64>>,
    gateway_failures: Family<ReasonLabels, Counter<u64, AtomicU64>>,
    undecodable: Family<KindLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric registered (all zero).
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("rivora_controller");
        let m = Metrics {
            leader: Gauge::default(),
            pool_addresses: Family::default(),
            services: Family::default(),
            failures: Family::default(),
            passes: Counter::default(),
            writes: Family::default(),
            gateway_failures: Family::default(),
            undecodable: Family::default(),
            registry: Registry::default(),
        };
        registry.register("leader", "1 while this replica leads", m.leader.clone());
        registry.register(
            "pool_addresses",
            "Addresses per AddressPool and family (saturates at 2^63-1)",
            m.pool_addresses.clone(),
        );
        registry.register(
            "services",
            "Services of ours, by whether they have every address they want",
            m.services.clone(),
        );
        registry.register(
            "service_failures",
            "Services currently without (every) address, by reason",
            m.failures.clone(),
        );
        registry.register(
            "passes",
            "Allocation passes made as leader",
            m.passes.clone(),
        );
        registry.register(
            "status_writes",
            "Status writes, by kind of object",
            m.writes.clone(),
        );
        registry.register(
            "gateway_status_write_failures",
            "GatewayClass, Gateway and route status writes that did not go through, by reason",
            m.gateway_failures.clone(),
        );
        registry.register(
            "undecodable_objects",
            "Objects left out of a watch because they do not decode, by kind",
            m.undecodable.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The gauge of `kind`'s objects that do not decode, for its watch to set. (Two watches of
    /// one kind, such as GatewayClasses in the Gateway and Meridio-2 halves, see the same
    /// objects and set the same number.)
    pub fn undecodable_objects(&self, kind: &str) -> Gauge {
        self.undecodable
            .get_or_create(&KindLabels { kind: kind.into() })
            .clone()
    }

    /// Records the Gateway half of one pass (called before [`Metrics::record_pass`] counts the
    /// pass).
    pub fn record_gateway_writes(&self, w: &crate::gateway_run::GatewayWrites) {
        for (kind, n) in [
            ("gatewayclass", w.classes),
            ("gateway", w.gateways),
            ("route", w.routes),
        ] {
            self.writes
                .get_or_create(&KindLabels { kind: kind.into() })
                .inc_by(n as u64);
        }
        for (reason, n) in [("error", w.errors), ("conflict", w.conflicts)] {
            self.gateway_failures
                .get_or_create(&ReasonLabels {
                    reason: reason.into(),
                })
                .inc_by(n as u64);
        }
    }

    /// Records whether this replica leads.
    pub fn set_leader(&self, leads: bool) {
        self.leader.set(i64::from(leads));
    }

    /// Records one pass: what the allocator computed and how many status writes it took.
    pub fn record_pass(&self, outcome: &Outcome, writes: StatusWrites) {
        self.passes.inc();
        for (kind, n) in [
            ("service", writes.service),
            ("pool", writes.pool),
            ("servicepolicy", writes.policy),
        ] {
            self.writes
                .get_or_create(&KindLabels { kind: kind.into() })
                .inc_by(n as u64);
        }
        self.pool_addresses.clear();
        for (pool, r) in &outcome.pools {
            for (fam, total) in &r.total {
                let family = match fam {
                    blocks::Family::V4 => "ipv4",
                    blocks::Family::V6 => "ipv6",
                };
                let used = r.used.get(fam).copied().unwrap_or(0);
                for (state, n) in [("total", *total), ("used", used)] {
                    self.pool_addresses
                        .get_or_create(&PoolLabels {
                            pool: pool.clone(),
                            family: family.into(),
                            state: state.into(),
                        })
                        .set(i64::try_from(n).unwrap_or(i64::MAX));
                }
            }
        }
        // Services only: a Gateway's address problems are in its Programmed condition.
        let services: Vec<&crate::ipam::Assignment> = outcome
            .claims
            .iter()
            .filter(|(k, _)| k.kind == crate::ipam::ClaimKind::Service)
            .map(|(_, a)| a)
            .collect();
        let failed = services.iter().filter(|a| !a.failures.is_empty()).count();
        let assigned = services.len() - failed;
        for (state, n) in [("assigned", assigned), ("failed", failed)] {
            self.services
                .get_or_create(&StateLabels {
                    state: state.into(),
                })
                .set(n as i64);
        }
        self.failures.clear();
        for a in &services {
            if let Some(f) = a.failures.first() {
                self.failures
                    .get_or_create(&ReasonLabels {
                        reason: f.reason().into(),
                    })
                    .inc();
            }
        }
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("encoding into a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::{ClaimKind, ClaimView, PoolView, allocate};
    use std::collections::BTreeMap;

    #[test]
    fn a_pass_shows_up_in_the_text() {
        let pool = PoolView {
            name: "p".into(),
            addresses: vec!["10.0.0.0/31".into()],
            auto_assign: true,
            avoid_buggy_ips: false,
            service_selector: None,
            namespace_selector: None,
            priority: 0,
            disabled: false,
            created: String::new(),
        };
        let svc = |n: &str| ClaimView {
            kind: ClaimKind::Service,
            namespace: "ns".into(),
            name: n.into(),
            labels: BTreeMap::new(),
            namespace_labels: BTreeMap::new(),
            families: vec![blocks::Family::V4],
            family_policy: crate::ipam::FamilyPolicy::SingleStack,
            requested: vec![],
            requested_pool: None,
            current: vec![],
            unsupported: None,
            sharing: None,
        };
        let out = allocate(&[pool], &[svc("a"), svc("b"), svc("c")]);
        let m = Metrics::new();
        m.set_leader(true);
        m.record_pass(
            &out,
            StatusWrites {
                service: 3,
                pool: 1,
                policy: 2,
            },
        );
        m.record_gateway_writes(&crate::gateway_run::GatewayWrites {
            classes: 1,
            gateways: 2,
            routes: 4,
            errors: 1,
            conflicts: 3,
            not_leader: false,
        });
        m.undecodable_objects("AddressPool").set(2);
        let text = m.encode();
        for line in [
            "rivora_controller_undecodable_objects{kind=\"AddressPool\"} 2",
            "rivora_controller_status_writes_total{kind=\"gatewayclass\"} 1",
            "rivora_controller_status_writes_total{kind=\"gateway\"} 2",
            "rivora_controller_status_writes_total{kind=\"route\"} 4",
            "rivora_controller_gateway_status_write_failures_total{reason=\"error\"} 1",
            "rivora_controller_gateway_status_write_failures_total{reason=\"conflict\"} 3",
            "rivora_controller_leader 1",
            "rivora_controller_pool_addresses{pool=\"p\",family=\"ipv4\",state=\"total\"} 2",
            "rivora_controller_pool_addresses{pool=\"p\",family=\"ipv4\",state=\"used\"} 2",
            "rivora_controller_services{state=\"assigned\"} 2",
            "rivora_controller_services{state=\"failed\"} 1",
            "rivora_controller_service_failures{reason=\"PoolExhausted\"} 1",
            "rivora_controller_passes_total 1",
            "rivora_controller_status_writes_total{kind=\"service\"} 3",
            "rivora_controller_status_writes_total{kind=\"pool\"} 1",
            "rivora_controller_status_writes_total{kind=\"servicepolicy\"} 2",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
    }
}
