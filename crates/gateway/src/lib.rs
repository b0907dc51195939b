//! Gateway API L4, as a pure function of the observed objects.
//!
//! Why a crate of its own: rivora-controller writes the Gateway, listener and
//! route status, rivorad on every node builds VIPs from the same attachment;
//! one function for both means a route the status calls Accepted is the route
//! the datapath forwards for, and a backend it calls invalid is the one whose
//! share the datapath rejects. No API calls, no Kubernetes types: the edges
//! (the controller, the node agent) turn their objects into the views of
//! [`view`] and the [`Evaluation`] back into status patches and VIPs, as
//! kube-rs's controller-rs keeps reconcilers pure.
//!
//! The rules, from Gateway API v1.6 (research: shared/research/kubernetes.md
//! section 3):
//! - [`attach`]: a parentRef's sectionName and port select listeners (both
//!   when both are set; every listener when neither); a listener admits a
//!   route whose kind it supports, from a namespace its `allowedRoutes`
//!   allows; a route is Accepted by a parent when at least one selected
//!   listener admits it (`NoMatchingParent`, `NotAllowedByListeners`).
//! - [`refs`]: backendRefs are core Services (`InvalidKind`), in another
//!   namespace only with a ReferenceGrant there (`RefNotPermitted`), that
//!   exist with the port (`BackendNotFound`); an invalid backend keeps its
//!   weight, and its share of new flows is refused.
//! - [`conflict`]: listeners that are not distinct (two on one port and protocol, anything on
//!   a TCP listener's port, plain HTTP beside HTTPS/TLS) are all `Conflicted` and none is
//!   Accepted.
//! - several routes on one TCP/UDP listener are all Accepted, and only the
//!   oldest (creationTimestamp, then namespace/name) carries traffic.

pub mod attach;
pub mod cond;
pub mod conflict;
pub mod evaluate;
pub mod refs;
pub mod view;

pub use cond::Condition;
pub use evaluate::{
    ActiveRoute, Evaluation, GatewayEval, ListenerEval, ResolvedBackend, RouteParentEval, evaluate,
    gateway_accepted,
};
pub use view::{
    AllowedNamespaces, BackendRefView, GatewayClassView, GatewayView, ListenerView, NamespaceView,
    ObjKey, ParentRefView, ReferenceGrantView, RouteKind, RouteView, Selector, ServiceView,
    Snapshot,
};

#[cfg(test)]
mod tests;
