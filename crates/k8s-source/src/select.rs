//! Which endpoints of a Service port take traffic on this node, as kube-proxy's
//! `CategorizeEndpoints` decides it (kubernetes `pkg/proxy/topology.go`, KEP-1669 "proxy
//! terminating endpoints").
//!
//! Why the fallback: during a rollout the last ready pod may turn terminating before its
//! replacement is ready. Dropping new connections then would fail them, while the terminating
//! pod still serves; kube-proxy therefore uses serving-terminating endpoints when, and only
//! when, nothing ready is left.
//!
//! - `externalTrafficPolicy: Cluster`: the ready endpoints of the whole cluster; if there are
//!   none, the serving and terminating ones (the fallback).
//! - `externalTrafficPolicy: Local`: this node's ready endpoints; else this node's serving and
//!   terminating ones; else none (the VIP drops, and healthCheckNodePort says 503 so that
//!   external balancers stop sending here).
//! - Serving and terminating endpoints outside the fallback stay listed as [`Role::Draining`]:
//!   rivorad programs them draining, so established flows finish and new flows go elsewhere.
//! - Everything else (not serving, or another node's endpoint under Local) is not listed.
//!
//! Topology hints and `trafficDistribution` are not applied (kube-proxy applies them to
//! ClusterIP traffic; load-balancer traffic from outside the cluster has no zone).

use k8s_openapi::api::core::v1::ServiceSpec;

use crate::endpoints::Endpoint;

/// `spec.externalTrafficPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TrafficPolicy {
    /// Endpoints on every node (the default).
    Cluster,
    /// This node's endpoints only; the client address is kept.
    Local,
}

impl TrafficPolicy {
    /// The policy of a Service: `Local` when it says so, `Cluster` otherwise (absent, `Cluster`,
    /// or the pre-1.22 spelling `Global`).
    pub fn of(spec: &ServiceSpec) -> Self {
        match spec.external_traffic_policy.as_deref() {
            Some("Local") => TrafficPolicy::Local,
            _ => TrafficPolicy::Cluster,
        }
    }

    /// `Cluster` or `Local`, as the Service spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TrafficPolicy::Cluster => "Cluster",
            TrafficPolicy::Local => "Local",
        }
    }
}

/// What a listed endpoint is used for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Ready: takes new flows.
    Active,
    /// Serving and terminating, taking new flows because no ready endpoint is left in its pool
    /// (the terminating fallback).
    Fallback,
    /// Serving and terminating while ready endpoints exist: established flows only.
    Draining,
}

impl Role {
    /// Whether new flows may be sent to it.
    pub fn takes_new_flows(self) -> bool {
        !matches!(self, Role::Draining)
    }
}

/// A listed endpoint with its role and whether it runs on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selected {
    /// The endpoint as joined.
    pub endpoint: Endpoint,
    /// What it is used for.
    pub role: Role,
    /// `nodeName` is this node.
    pub local: bool,
}

/// The endpoints a VIP lists on node `node_name`, in the order given (sorted by address and
/// port when they come from [`crate::endpoints::join`]).
pub fn categorize(endpoints: &[Endpoint], policy: TrafficPolicy, node_name: &str) -> Vec<Selected> {
    let is_local = |e: &Endpoint| e.node.as_deref() == Some(node_name);
    let pool: Vec<&Endpoint> = endpoints
        .iter()
        .filter(|e| policy == TrafficPolicy::Cluster || is_local(e))
        .collect();
    let any_ready = pool.iter().any(|e| e.ready);
    pool.into_iter()
        .filter_map(|e| {
            let role = if e.ready {
                Role::Active
            } else if e.serving && e.terminating {
                if any_ready {
                    Role::Draining
                } else {
                    Role::Fallback
                }
            } else {
                return None;
            };
            Some(Selected {
                endpoint: e.clone(),
                role,
                local: is_local(e),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    /// (last address octet, node, ready, serving, terminating)
    fn ep(n: u8, node: Option<&str>, ready: bool, serving: bool, terminating: bool) -> Endpoint {
        Endpoint {
            addr: IpAddr::from([10, 1, 0, n]),
            port: 8080,
            ready,
            serving,
            terminating,
            node: node.map(str::to_string),
            target: None,
            slice: "s".into(),
        }
    }

    fn roles(s: &[Selected]) -> Vec<(u8, Role, bool)> {
        s.iter()
            .map(|s| match s.endpoint.addr {
                IpAddr::V4(a) => (a.octets()[3], s.role, s.local),
                IpAddr::V6(_) => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn the_policy_is_read_from_the_spec() {
        let spec = |p: Option<&str>| ServiceSpec {
            external_traffic_policy: p.map(str::to_string),
            ..Default::default()
        };
        assert_eq!(TrafficPolicy::of(&spec(None)), TrafficPolicy::Cluster);
        assert_eq!(
            TrafficPolicy::of(&spec(Some("Cluster"))),
            TrafficPolicy::Cluster
        );
        assert_eq!(
            TrafficPolicy::of(&spec(Some("Local"))),
            TrafficPolicy::Local
        );
    }

    #[test]
    fn cluster_uses_ready_endpoints_everywhere_and_drains_terminating_ones() {
        let eps = [
            ep(1, Some("me"), true, true, false),
            ep(2, Some("other"), true, true, false),
            ep(3, Some("other"), false, true, true),
            ep(4, Some("me"), false, false, true),
            ep(5, None, true, true, false),
            ep(6, Some("me"), false, true, false),
        ];
        assert_eq!(
            roles(&categorize(&eps, TrafficPolicy::Cluster, "me")),
            [
                (1, Role::Active, true),
                (2, Role::Active, false),
                (3, Role::Draining, false),
                (5, Role::Active, false),
            ]
        );
    }

    #[test]
    fn cluster_falls_back_to_serving_terminating_endpoints() {
        let eps = [
            ep(1, Some("me"), false, true, true),
            ep(2, Some("other"), false, true, true),
            ep(3, Some("other"), false, false, true),
        ];
        assert_eq!(
            roles(&categorize(&eps, TrafficPolicy::Cluster, "me")),
            [(1, Role::Fallback, true), (2, Role::Fallback, false)]
        );
        assert!(Role::Fallback.takes_new_flows() && !Role::Draining.takes_new_flows());
    }

    #[test]
    fn local_uses_this_nodes_endpoints_with_its_own_fallback() {
        let eps = [
            ep(1, Some("me"), false, true, true),
            ep(2, Some("other"), true, true, false),
            ep(3, None, true, true, false),
        ];
        // Another node's ready endpoint does not stop this node's fallback.
        assert_eq!(
            roles(&categorize(&eps, TrafficPolicy::Local, "me")),
            [(1, Role::Fallback, true)]
        );
        let with_ready = [
            ep(1, Some("me"), false, true, true),
            ep(4, Some("me"), true, true, false),
        ];
        assert_eq!(
            roles(&categorize(&with_ready, TrafficPolicy::Local, "me")),
            [(1, Role::Draining, true), (4, Role::Active, true)]
        );
        // Nothing local: nothing listed (an endpoint without nodeName is never local).
        assert!(categorize(&eps[1..], TrafficPolicy::Local, "me").is_empty());
        assert!(categorize(&eps[2..], TrafficPolicy::Local, "").is_empty());
    }
}
