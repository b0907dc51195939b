//! rivora-controller: assigns LoadBalancer addresses from AddressPools, as the one leader of its
//! replicas.
//!
//! * [`ipam`]: the allocator, a pure function of observed pools and Services;
//! * [`leader`]: leader election over a `coordination.k8s.io` Lease (kube-lease-manager).

#![warn(missing_docs)]

pub mod ipam;
pub mod leader;
