//! The pure middle of rivorad's Kubernetes source: functions of observed objects (Services,
//! EndpointSlices, ServicePolicies) to the VIPs this node programs, plus the initial-sync gate
//! and the healthCheckNodePort answer. No API calls, no I/O: the watches, the debounce and the
//! HTTP listener live at the edge (rivorad), which feeds snapshots in and applies what comes
//! out.
//!
//! Why pure: every rule here (kube-proxy's endpoint semantics, policy attachment, key
//! conflicts, the gate) is tested from real k8s-openapi objects without an API server, and the
//! whole desired state is recomputed from each snapshot, as rivora-controller does, so no
//! event ordering can leave a stale VIP behind.
//!
//! - [`endpoints`]: the EndpointSlice join (kube-proxy's EndpointSliceCache).
//! - [`select`]: which endpoints take traffic (kube-proxy's CategorizeEndpoints).
//! - [`translate`]: a snapshot to VIPs per Service, with policies, conflicts and failures.
//! - [`initsync`]: the gate before adopted VIPs nothing claimed are removed.
//! - [`healthz`]: the healthCheckNodePort answer (kube-proxy's status, headers and body).

#![warn(missing_docs)]

pub mod endpoints;
pub mod healthz;
pub mod initsync;
pub mod select;
pub mod translate;
