//! rivora-controller: assigns LoadBalancer addresses from AddressPools and reports whether each
//! ServicePolicy applies to its targets, as the one leader of its replicas.
//!
//! * [`ipam`]: the allocator, a pure function of observed pools and claimants (Services, and
//!   Gateways once part 3 feeds them in);
//! * [`leader`]: leader election over a `coordination.k8s.io` Lease (kube-lease-manager);
//! * [`observe`]: Kubernetes objects (Services, Gateways) to the allocator's views and back to
//!   status (pure);
//! * [`policy_status`]: ServicePolicy status, per target reference (pure);
//! * [`run`]: the watches and the leader's write loop;
//! * [`metrics`]: what `/metrics` serves.

#![warn(missing_docs)]

pub mod ipam;
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod policy_status;
pub mod run;
