//! The objects as the evaluation needs them: only the fields Gateway API's
//! L4 rules read, already defaulted (a parentRef's group and kind, a
//! backendRef's namespace), so the rules read like the specification.

use std::collections::BTreeMap;

/// Gateway API's API group.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// A namespaced object's key, ordered by namespace then name (the tie
/// break of "oldest first").
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjKey {
    /// `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ObjKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The route kinds an L4 listener can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    /// `TCPRoute`, for `TCP` listeners.
    Tcp,
    /// `UDPRoute`, for `UDP` listeners.
    Udp,
}

impl RouteKind {
    /// The protocol of the listeners and Service ports it carries: `TCP` or `UDP`.
    pub fn protocol(self) -> &'static str {
        match self {
            RouteKind::Tcp => "TCP",
            RouteKind::Udp => "UDP",
        }
    }

    /// The kind's name, as `supportedKinds` and `allowedRoutes.kinds` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteKind::Tcp => "TCPRoute",
            RouteKind::Udp => "UDPRoute",
        }
    }

    /// The route kind of a listener protocol Rivora serves (`TCP`, `UDP`).
    pub fn of_protocol(protocol: &str) -> Option<RouteKind> {
        match protocol {
            "TCP" => Some(RouteKind::Tcp),
            "UDP" => Some(RouteKind::Udp),
            _ => None,
        }
    }
}

/// A GatewayClass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayClassView {
    /// Its name (cluster-scoped).
    pub name: String,
    /// `spec.controllerName`.
    pub controller_name: String,
    /// `spec.parametersRef` is set (Rivora takes none).
    pub has_parameters: bool,
    /// `metadata.generation`, for observedGeneration.
    pub generation: i64,
}

/// `allowedRoutes.namespaces`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum AllowedNamespaces {
    /// The Gateway's own namespace (the default).
    #[default]
    Same,
    /// Every namespace.
    All,
    /// Namespaces whose labels match.
    Selector(Selector),
}

/// A label selector (`matchLabels` and `matchExpressions`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Selector {
    /// `matchLabels`.
    pub match_labels: BTreeMap<String, String>,
    /// `matchExpressions`: (key, operator `In`/`NotIn`/`Exists`/`DoesNotExist`, values).
    pub match_expressions: Vec<(String, String, Vec<String>)>,
}

impl Selector {
    /// Whether `labels` match; an operator it does not know matches nothing
    /// (as the API server would have refused it).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self
                .match_expressions
                .iter()
                .all(|(k, op, values)| match op.as_str() {
                    "In" => labels.get(k).is_some_and(|v| values.contains(v)),
                    "NotIn" => labels.get(k).is_none_or(|v| !values.contains(v)),
                    "Exists" => labels.contains_key(k),
                    "DoesNotExist" => !labels.contains_key(k),
                    _ => false,
                })
    }
}

/// A listener of a Gateway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerView {
    /// `name` (unique in its Gateway).
    pub name: String,
    /// `port`.
    pub port: u16,
    /// `protocol` as written (`TCP`, `UDP`, `HTTP`, ...).
    pub protocol: String,
    /// `hostname` (HTTP, HTTPS and TLS listeners only; None: any), for the distinctness rules
    /// of [`crate::conflict`].
    pub hostname: Option<String>,
    /// `allowedRoutes.namespaces`.
    pub namespaces: AllowedNamespaces,
    /// `allowedRoutes.kinds` as (group, kind); empty: the protocol's kind.
    pub kinds: Vec<(String, String)>,
}

/// A Gateway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayView {
    /// Its key.
    pub key: ObjKey,
    /// `spec.gatewayClassName`.
    pub class: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// The listeners.
    pub listeners: Vec<ListenerView>,
}

/// A parentRef, defaulted (group gateway.networking.k8s.io, kind Gateway,
/// namespace the route's).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ParentRefView {
    /// `group`.
    pub group: String,
    /// `kind`.
    pub kind: String,
    /// `namespace`.
    pub namespace: String,
    /// `name`.
    pub name: String,
    /// `sectionName`: a listener's name.
    pub section_name: Option<String>,
    /// `port`: a listener's port.
    pub port: Option<u16>,
}

/// A backendRef, defaulted (group "" and kind Service, namespace the
/// route's, weight 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendRefView {
    /// `group` ("" is the core group).
    pub group: String,
    /// `kind`.
    pub kind: String,
    /// `namespace`.
    pub namespace: String,
    /// `name`.
    pub name: String,
    /// `port` (a Service reference must have one).
    pub port: Option<u16>,
    /// `weight` (0..=1,000,000; 0: no traffic).
    pub weight: u32,
}

/// A TCPRoute or UDPRoute (v1: one rule).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteView {
    /// Which kind.
    pub kind: RouteKind,
    /// Its key.
    pub key: ObjKey,
    /// `metadata.creationTimestamp` as seconds since the epoch (None: not
    /// yet known, sorts last).
    pub created: Option<i64>,
    /// `metadata.generation`.
    pub generation: i64,
    /// `spec.parentRefs`.
    pub parent_refs: Vec<ParentRefView>,
    /// The rule's `backendRefs`.
    pub backend_refs: Vec<BackendRefView>,
}

impl RouteView {
    /// "Oldest first": creationTimestamp (unknown last), then namespace/name.
    pub fn age_key(&self) -> (bool, i64, &ObjKey) {
        (self.created.is_none(), self.created.unwrap_or(0), &self.key)
    }
}

/// A ReferenceGrant: lets objects of `from` refer to objects of `to` in its
/// own namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReferenceGrantView {
    /// Its namespace (the referred-to objects').
    pub namespace: String,
    /// `from[]`: (group, kind, namespace).
    pub from: Vec<(String, String, String)>,
    /// `to[]`: (group, kind, name; None: any).
    pub to: Vec<(String, String, Option<String>)>,
}

/// A namespace's labels (for `allowedRoutes` selectors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceView {
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// A Service a backendRef may name: that it exists, and its ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceView {
    /// Its key.
    pub key: ObjKey,
    /// `spec.ports[]`: each port's number and protocol (`TCP` when unset). A backendRef's port
    /// is the one of its route's protocol: 53/TCP and 53/UDP are two ports.
    pub ports: Vec<(u16, String)>,
}

/// Everything one evaluation reads.
#[derive(Clone, Copy, Debug)]
pub struct Snapshot<'a> {
    /// Rivora's `controllerName` (its GatewayClasses).
    pub controller_name: &'a str,
    /// GatewayClasses.
    pub classes: &'a [GatewayClassView],
    /// Gateways (of every class; only ours are evaluated).
    pub gateways: &'a [GatewayView],
    /// TCPRoutes and UDPRoutes.
    pub routes: &'a [RouteView],
    /// ReferenceGrants.
    pub grants: &'a [ReferenceGrantView],
    /// Namespaces with their labels.
    pub namespaces: &'a [NamespaceView],
    /// Services.
    pub services: &'a [ServiceView],
}
