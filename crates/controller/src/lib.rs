//! rivora-controller: assigns LoadBalancer and Gateway addresses from AddressPools, reports
//! whether each ServicePolicy applies to its targets, and writes the status of Rivora's
//! GatewayClasses, their Gateways and the routes attached to them, as the one leader of its
//! replicas.
//!
//! * [`ipam`]: the allocator, a pure function of observed pools and claimants (Services and
//!   Gateways);
//! * [`leader`]: leader election over a `coordination.k8s.io` Lease (kube-lease-manager);
//! * [`observe`]: Kubernetes objects (Services, Gateways) to the allocator's views and back to
//!   status (pure);
//! * [`policy_status`]: ServicePolicy status, per target reference (pure);
//! * [`pool_status`]: AddressPool conditions and counts from the allocator's report (pure);
//! * [`gateway_status`]: GatewayClass, Gateway, listener and route status from the Gateway API
//!   evaluation, the addresses and the RivoraNode reports (pure);
//! * [`gateway_families`]: whether each Gateway address reaches a backend of its family, per
//!   listener (pure);
//! * [`gateway_run`]: the Gateway API watches and status writes of the leader's pass;
//! * [`meridio_status`]: DistributionGroup status for Meridio-2's Gateways (opt-in,
//!   `--distribution-group-status`): which Gateways are Meridio-2's and what each group's
//!   conditions are (pure), and the watches and writes of the leader's pass;
//! * [`run`]: the watches and the leader's write loop;
//! * [`undecodable`]: the objects the watches leave out, and the leader's Warning Events on them;
//! * [`metrics`]: what `/metrics` serves.

#![warn(missing_docs)]

pub mod gateway_families;
pub mod gateway_run;
pub mod gateway_status;
pub mod ipam;
pub mod l2_reach;
pub mod leader;
pub mod meridio_status;
pub mod metrics;
pub mod observe;
pub mod policy_status;
pub mod pool_status;
pub mod run;
pub mod undecodable;
