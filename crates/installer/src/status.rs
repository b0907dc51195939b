//! `rivora status`: is Rivora running, and is it doing what it was asked?
//!
//! Like `cilium status`, one look answers: the chart version, whether the rivorad DaemonSet and
//! the rivora-controller Deployment are ready, which controller replica leads, what each node's
//! rivorad reports it programmed (its `RivoraNode`), how full the AddressPools are, and which
//! Services and Gateways of ours have no address and why. Anything wrong is a *problem* (naming
//! the object, the reason and what to do) and makes the command exit non-zero.
//!
//! Three parts, so everything but the reads is tested without a cluster:
//! - [`observe`] (in `status/observe.rs`): the API reads, the only async part, into the plain
//!   data [`Observed`];
//! - [`evaluate`] (in `status/report.rs`): the pure rules, from [`Observed`] to a [`Report`];
//! - [`Report::render_table`] (in `status/table.rs`) and [`Report::to_json`]: the output.

use gateway_api::gateways::Gateway;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use rivora_k8s_api::{AddressPool, RivoraNode};

mod lease;
mod observe;
mod report;
mod table;
#[cfg(test)]
mod tests;

pub use lease::LeaseRef;
pub use observe::observe;
pub use report::{
    CONTROLLER_NAME, Component, LEASE_NAME, Leader, NodeRow, PoolRow, RIVORAD_NAME, Report,
    Unaddressed, evaluate,
};

/// One read of the API: the object (or list), or why there is none.
///
/// Why not `Option`/`Result`: "not there" (the object was never created, or the CRD is not
/// installed) and "could not read it" (RBAC, a timeout) lead to different advice, and neither
/// may stop the other sections from being shown.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup<T> {
    /// Read.
    Found(T),
    /// Does not exist (for a list: its resource type is not served, i.e. the CRD is missing).
    Missing,
    /// The read failed; the error as the API client said it.
    Unreadable(String),
}

impl<T> Lookup<T> {
    /// The value, if it was read.
    pub fn found(&self) -> Option<&T> {
        match self {
            Lookup::Found(t) => Some(t),
            _ => None,
        }
    }
}

/// Everything status shows, observed at one instant (plain data: tests build it by hand).
#[derive(Debug, Clone)]
pub struct Observed {
    /// The release namespace (where the DaemonSet, the Deployment and the Lease live).
    pub namespace: String,
    /// The chart version from the release record (`None`: no release record found).
    pub chart_version: Option<String>,
    /// When the observation was made: what Lease expiry and report staleness are measured
    /// against.
    pub now: Timestamp,
    /// The `rivorad` DaemonSet.
    pub daemonset: Lookup<DaemonSet>,
    /// The `rivora-controller` Deployment.
    pub deployment: Lookup<Deployment>,
    /// Which Lease the controller elects its leader through (its `--lease-name`).
    pub lease_ref: LeaseRef,
    /// That Lease.
    pub lease: Lookup<Lease>,
    /// The DaemonSet's Pods (which nodes run a rivorad, hence should have a report).
    pub rivorad_pods: Lookup<Vec<Pod>>,
    /// Every `RivoraNode` (one per node, written by that node's rivorad).
    pub nodes: Lookup<Vec<RivoraNode>>,
    /// Every `AddressPool`.
    pub pools: Lookup<Vec<AddressPool>>,
    /// The `type: LoadBalancer` Services of our `loadBalancerClass`.
    pub services: Lookup<Vec<Service>>,
    /// The Gateways of GatewayClasses with our `controllerName` (`Missing`: the Gateway API
    /// CRDs are not installed, which is allowed).
    pub gateways: Lookup<Vec<Gateway>>,
}
