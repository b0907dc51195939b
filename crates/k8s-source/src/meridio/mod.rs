//! Meridio-2's LoadBalancer resource model, for the one Gateway rivorad serves
//! (`--gateway NS/NAME`), to the classifier's desired state
//! ([`rivora_dataplane::classifier::ClassifierSpec`]) and the DistributionGroup conditions that
//! say how it went.
//!
//! Why pure, like the rest of this crate: every Meridio-2 rule below (which groups belong to the
//! Gateway, which slices feed a group, which endpoint takes a slot) is tested from real objects
//! without an API server, and the whole spec is recomputed from each snapshot, so no event order
//! can leave a stale rule or target behind.
//!
//! The rules are Meridio-2's load balancer's (`shared/research/meridio2.md` §1, §2.1, §2.2):
//!
//! - Only objects in the Gateway's namespace are read (Meridio-2's load balancer caches that
//!   namespace only).
//! - A DistributionGroup belongs to the Gateway through an L34Route attached to the Gateway whose
//!   backendRef names it, or through its own `spec.parentRefs`. One that more than one Gateway
//!   reaches is not served (`Ready=False/MultipleGateways`), nor are its routes.
//! - A group's targets come from its LoadBalancerEndpointSlices and from the older core
//!   EndpointSlices (slot in `zone: maglev:<N>`), both forms giving the same targets
//!   ([`endpoints`]).
//! - Each attached route is one classifier rule; a route or group that does not parse, or that
//!   the datapath's validation refuses, is left out alone, with a problem naming it
//!   ([`translate()`]).
//! - Each group gets Meridio-2's `Ready` and `CapacityExceeded` conditions ([`status`]).
//!
//! - [`mod@translate`]: the snapshot to a [`MeridioOutcome`] ([`translate()`]).
//! - [`endpoints`]: a group's targets from both endpoint forms.
//! - [`status`]: the conditions, and their `lastTransitionTime` from the previous ones.

pub mod endpoints;
pub mod status;
pub mod translate;

#[cfg(test)]
mod fixtures;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use gateway_api::gateways::Gateway;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use rivora_dataplane::classifier::ClassifierSpec;
use rivora_k8s_api::meridio::{DistributionGroup, L34Route, LoadBalancerEndpointSlice};

pub use translate::translate;

/// DistributionGroup annotation choosing how the group hashes SCTP: `ports` (the default,
/// nfqlb's and so Meridio-2's: the paths of a multihomed association reach one target) or
/// `five-tuple` (addresses too, like TCP and UDP). Meridio-2's API has no such field, hence an
/// annotation.
pub const ANNOTATION_SCTP_HASH: &str = "rivora.dev/sctp-hash";

/// The Gateway this rivorad serves (`--gateway NS/NAME`): the one whose groups and routes are
/// translated. Gateway API Gateways are namespaced, so both parts are needed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GatewayRef {
    /// The Gateway's namespace, which is also where its groups, routes and slices are read.
    pub namespace: String,
    /// The Gateway's name.
    pub name: String,
}

impl GatewayRef {
    /// `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        GatewayRef {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for GatewayRef {
    /// `namespace/name`, as `--gateway` takes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl FromStr for GatewayRef {
    type Err = String;

    /// `NS/NAME`, both parts non-empty (the form of `--gateway`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(GatewayRef::new(ns, name))
            }
            _ => Err(format!(
                "gateway {s:?}: expected NAMESPACE/NAME (a Gateway is namespaced)"
            )),
        }
    }
}

/// What the watches hold at one moment: the input of [`translate()`]. `Arc`s because that is
/// what the reflector stores hand out, so a snapshot copies no object. Objects outside the
/// Gateway's namespace may be present; they are ignored.
#[derive(Clone, Debug, Default)]
pub struct MeridioSnapshot {
    /// Gateway API Gateways: a reference to a Gateway counts towards `MultipleGateways` only
    /// when the Gateway exists (acceptance is not looked at).
    pub gateways: Vec<Arc<Gateway>>,
    /// Every DistributionGroup.
    pub distribution_groups: Vec<Arc<DistributionGroup>>,
    /// Every L34Route.
    pub routes: Vec<Arc<L34Route>>,
    /// Every LoadBalancerEndpointSlice (the current endpoint form).
    pub lb_slices: Vec<Arc<LoadBalancerEndpointSlice>>,
    /// Core EndpointSlices labelled `meridio-2.nordix.org/distribution-group` (the older form;
    /// others are ignored).
    pub core_slices: Vec<Arc<EndpointSlice>>,
}

/// What one DistributionGroup of the Gateway came to, for its status and for rivoractl.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupReport {
    /// The group's namespace (the Gateway's).
    pub namespace: String,
    /// The group's name.
    pub name: String,
    /// Whether its group is in the returned spec (false: MultipleGateways, or refused).
    pub served: bool,
    /// Usable targets in the spec (ready, with a slot below maxEndpoints and an address).
    pub ready_targets: usize,
    /// Ready endpoints left out because their identifier is not below maxEndpoints.
    pub excluded: usize,
    /// The conditions this source owns on the group, `lastTransitionTime` unset
    /// ([`status::UNSET_TIME`]; [`status::stamp`] fills it). A type this source owns but that
    /// is absent here (`CapacityExceeded` of a group not served) is to be removed, as Meridio-2
    /// removes it.
    pub conditions: Vec<Condition>,
}

/// What a snapshot translates to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MeridioOutcome {
    /// The classifier's desired state; it always passes
    /// [`rivora_dataplane::classifier::validate::validate`].
    pub spec: ClassifierSpec,
    /// One report per DistributionGroup that belongs to the Gateway, by name.
    pub groups: Vec<GroupReport>,
    /// Objects (or parts of them) left out, each naming the object, the field and why; a bad
    /// object never keeps the others out.
    pub problems: Vec<String>,
}

impl MeridioOutcome {
    /// The report of group `name`, if it belongs to the Gateway.
    pub fn group(&self, name: &str) -> Option<&GroupReport> {
        self.groups.iter().find(|g| g.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_refs_parse_as_namespace_slash_name() {
        let g: GatewayRef = "red/gw-a".parse().unwrap();
        assert_eq!(g, GatewayRef::new("red", "gw-a"));
        assert_eq!(g.to_string(), "red/gw-a");
        for bad in ["gw-a", "/gw-a", "red/", "red/gw/a", ""] {
            let e = bad.parse::<GatewayRef>().unwrap_err();
            assert!(e.contains("expected NAMESPACE/NAME"), "{bad:?}: {e}");
        }
    }
}
