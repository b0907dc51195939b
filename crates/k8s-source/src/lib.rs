//! rivorad's Kubernetes source. Its middle is pure: functions of observed objects (Services,
//! EndpointSlices, ServicePolicies) to the VIPs this node programs, plus the initial-sync gate,
//! the healthCheckNodePort answer and the node report. Its edge ([`stores`], [`agent`]) watches
//! the API server, feeds snapshots through the middle and offers rivorad each new desired
//! state; rivorad applies it and says how that went.
//!
//! Why pure: every rule here (kube-proxy's endpoint semantics, policy attachment, key
//! conflicts, the gate) is tested from real k8s-openapi objects without an API server, and the
//! whole desired state is recomputed from each snapshot, as rivora-controller does, so no
//! event ordering can leave a stale VIP behind.
//!
//! - [`bgp_peers`]: BGPPeers to this node's speaker configuration (not wired yet).
//! - [`endpoints`]: the EndpointSlice join (kube-proxy's EndpointSliceCache).
//! - [`select`]: which endpoints take traffic (kube-proxy's CategorizeEndpoints).
//! - [`translate`]: a snapshot to VIPs per Service, with policies, conflicts and failures.
//! - [`memo`]: the last translation of each Service, reused while nothing it reads changed.
//! - [`gateway`]: Gateways of Rivora's GatewayClasses and their routes to VIPs.
//! - [`initsync`]: the gate before adopted VIPs nothing claimed are removed.
//! - [`healthz`]: the healthCheckNodePort answer (kube-proxy's status, headers and body).
//! - [`convert`]: translation results to the source-neutral [`rivora_desired::DesiredState`].
//! - [`report`]: the status of this node's `RivoraNode`.
//! - [`stores`] (edge): the watches and their first full lists.
//! - [`lenient`] (edge): watches that leave out, and name, objects they cannot decode.
//! - [`backoff`] (edge): waits between a watch's failed attempts that grow (to minutes for an
//!   absent CRD) instead of starting over at every relist.
//! - [`crds`] (edge): a CRD appearing ends an absent kind's wait.
//! - [`agent`] (edge): debounce, snapshot, translate, offer; the `RivoraNode` writer.
//! - [`healthz_server`] (edge): one listener per healthCheckNodePort.
//! - [`warnings`]: the Warning Events on objects this node cannot serve, and their recorder.

#![warn(missing_docs)]

pub mod agent;
pub mod backoff;
pub mod bgp_peers;
pub mod convert;
pub mod crds;
pub mod endpoints;
pub mod gateway;
pub mod healthz;
pub mod healthz_server;
pub mod initsync;
pub mod l2_lease;
pub mod lenient;
pub mod memo;
pub mod meridio;
pub mod report;
pub mod select;
pub mod stores;
pub mod translate;
pub mod warnings;
