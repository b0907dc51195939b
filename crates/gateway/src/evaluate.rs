//! The whole evaluation: GatewayClasses, Gateways and their listeners, the
//! routes' parent entries, and what each listener forwards.

use std::collections::BTreeMap;

use crate::attach::{self, Attachment};
use crate::cond::Condition;
use crate::conflict;
use crate::refs;
use crate::view::{GatewayView, ObjKey, ParentRefView, RouteKind, Snapshot};

/// A backend of the route a listener forwards for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedBackend {
    /// The Service.
    pub service: ObjKey,
    /// Its port (the Service port; the node agent maps it to endpoints by
    /// the Service's targetPort).
    pub port: u16,
    /// Its weight (0: no traffic).
    pub weight: u32,
    /// Whether it resolved. An invalid backend keeps its weight: its share
    /// of new connections is refused, its share of datagrams dropped.
    pub valid: bool,
}

/// The route a listener carries traffic for: the oldest of those attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveRoute {
    /// The route.
    pub route: ObjKey,
    /// Its rule's backends, in order.
    pub backends: Vec<ResolvedBackend>,
}

/// One listener's status and traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerEval {
    /// `name`.
    pub name: String,
    /// `port`.
    pub port: u16,
    /// The route kind it carries traffic for (None: a protocol Rivora does not forward:
    /// HTTP, HTTPS and TLS listeners are accepted in status only, others refused).
    pub kind: Option<RouteKind>,
    /// `supportedKinds`: the kind names its protocol and `allowedRoutes.kinds` admit.
    pub supported_kinds: Vec<&'static str>,
    /// `attachedRoutes`: routes Accepted through it.
    pub attached_routes: i32,
    /// `Accepted`.
    pub accepted: Condition,
    /// `ResolvedRefs`.
    pub resolved_refs: Condition,
    /// `Conflicted`.
    pub conflicted: Condition,
    /// What it forwards; None: nothing attached.
    pub active: Option<ActiveRoute>,
}

/// One Gateway of Rivora's classes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayEval {
    /// `metadata.generation` the conditions are for.
    pub generation: i64,
    /// `Accepted` (Programmed depends on addresses and on what the nodes
    /// report: the controller adds it).
    pub accepted: Condition,
    /// The listeners, in the Gateway's order.
    pub listeners: Vec<ListenerEval>,
}

/// One parent entry of a route (`status.parents[]`), for a Gateway of ours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteParentEval {
    /// The parentRef as the route wrote it (defaulted).
    pub parent: ParentRefView,
    /// `Accepted`.
    pub accepted: Condition,
    /// `ResolvedRefs`.
    pub resolved_refs: Condition,
}

/// Everything decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Evaluation {
    /// Rivora's GatewayClasses: their `Accepted`.
    pub classes: BTreeMap<String, Condition>,
    /// Gateways of accepted Rivora classes.
    pub gateways: BTreeMap<ObjKey, GatewayEval>,
    /// Routes with a parent entry of ours, by kind and key.
    pub routes: BTreeMap<(RouteKind, ObjKey), Vec<RouteParentEval>>,
}

/// Evaluates the snapshot.
pub fn evaluate(s: &Snapshot<'_>) -> Evaluation {
    let mut out = Evaluation::default();
    for c in s
        .classes
        .iter()
        .filter(|c| c.controller_name == s.controller_name)
    {
        let cond = if c.has_parameters {
            Condition::no(
                "Accepted",
                "InvalidParameters",
                "spec.parametersRef: Rivora's GatewayClasses take no parameters",
            )
        } else {
            Condition::yes("Accepted", "Accepted", "handled by rivora-controller")
        };
        out.classes.insert(c.name.clone(), cond);
    }
    let ours: Vec<&GatewayView> = s
        .gateways
        .iter()
        .filter(|g| out.classes.get(&g.class).is_some_and(|c| c.status))
        .collect();
    // Per Gateway (as `ours`), per listener: its conflict, if any.
    let conflicts: Vec<Vec<Option<(&'static str, String)>>> = ours
        .iter()
        .map(|g| conflict::conflicts(&g.listeners))
        .collect();
    let conflicted: Vec<Vec<bool>> = conflicts
        .iter()
        .map(|c| c.iter().map(Option::is_some).collect())
        .collect();

    // Routes' attachments, oldest first (the first attached to a listener
    // carries its traffic).
    let mut routes: Vec<_> = s.routes.iter().collect();
    routes.sort_by(|a, b| a.age_key().cmp(&b.age_key()));
    // (gateway index, listener index) -> attached routes in age order.
    let mut attached: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
    for (ri, route) in routes.iter().enumerate() {
        let problems: Vec<refs::RefProblem> = route
            .backend_refs
            .iter()
            .filter_map(|b| refs::check(route, b, s.grants, s.services).err())
            .collect();
        let resolved = match problems.first() {
            None => Condition::yes("ResolvedRefs", "ResolvedRefs", "every backendRef resolves"),
            Some(p) => Condition::no("ResolvedRefs", p.reason(), p.message().to_string()),
        };
        let mut parents = Vec::new();
        let mut seen = Vec::new();
        for parent in &route.parent_refs {
            if seen.contains(&parent) {
                continue;
            }
            seen.push(parent);
            let Some((gi, gw)) = ours
                .iter()
                .enumerate()
                .find(|(_, g)| attach::names_gateway(parent, g))
            else {
                continue; // not one of ours (or not there): not ours to answer
            };
            let accepted = match attach::attach(route, parent, gw, &conflicted[gi], s.namespaces) {
                Attachment::Accepted(listeners) => {
                    for li in listeners {
                        attached.entry((gi, li)).or_default().push(ri);
                    }
                    Condition::yes("Accepted", "Accepted", "attached")
                }
                Attachment::NoMatchingParent => Condition::no(
                    "Accepted",
                    "NoMatchingParent",
                    format!(
                        "Gateway {} has no listener{}{}",
                        gw.key,
                        parent
                            .section_name
                            .as_ref()
                            .map(|n| format!(" named {n}"))
                            .unwrap_or_default(),
                        parent
                            .port
                            .map(|p| format!(" on port {p}"))
                            .unwrap_or_default()
                    ),
                ),
                Attachment::NotAllowedByListeners => Condition::no(
                    "Accepted",
                    "NotAllowedByListeners",
                    format!(
                        "no selected listener of Gateway {} admits a {} from namespace {}",
                        gw.key,
                        route.kind.as_str(),
                        route.key.namespace
                    ),
                ),
            };
            parents.push(RouteParentEval {
                parent: parent.clone(),
                accepted,
                resolved_refs: resolved.clone(),
            });
        }
        if !parents.is_empty() {
            out.routes.insert((route.kind, route.key.clone()), parents);
        }
    }

    for (gi, gw) in ours.iter().enumerate() {
        let mut listeners = Vec::new();
        for (li, l) in gw.listeners.iter().enumerate() {
            let kind = RouteKind::of_protocol(&l.protocol);
            let (supported, invalid_kinds) = attach::supported_kinds(l);
            let protocol_kinds = attach::protocol_kinds(&l.protocol);
            let conflicted = match &conflicts[gi][li] {
                Some((reason, message)) => Condition::yes("Conflicted", reason, message.clone()),
                None => Condition::no("Conflicted", "NoConflicts", ""),
            };
            let accepted = match (kind, protocol_kinds) {
                _ if conflicted.status => {
                    Condition::no("Accepted", conflicted.reason, conflicted.message.clone())
                }
                (Some(_), _) => Condition::yes("Accepted", "Accepted", "listening"),
                (None, Some(kinds)) => Condition::yes(
                    "Accepted",
                    "Accepted",
                    format!(
                        "accepted, but Rivora forwards TCPRoute and UDPRoute only: a {} on \
                         this listener carries no traffic through Rivora",
                        kinds.join(" or ")
                    ),
                ),
                (None, None) => Condition::no(
                    "Accepted",
                    "UnsupportedProtocol",
                    format!(
                        "protocol {}: not a listener protocol of Gateway API; Rivora forwards \
                         TCP and UDP listeners",
                        l.protocol
                    ),
                ),
            };
            let resolved_refs = if invalid_kinds {
                Condition::no(
                    "ResolvedRefs",
                    "InvalidRouteKinds",
                    format!(
                        "allowedRoutes.kinds: a {} listener carries {} only",
                        l.protocol,
                        protocol_kinds
                            .map(|k| k.join(", "))
                            .unwrap_or("nothing".into())
                    ),
                )
            } else {
                Condition::yes("ResolvedRefs", "ResolvedRefs", "")
            };
            let on_it = attached.get(&(gi, li)).cloned().unwrap_or_default();
            let active = on_it.first().map(|ri| {
                let route = routes[*ri];
                ActiveRoute {
                    route: route.key.clone(),
                    backends: route
                        .backend_refs
                        .iter()
                        .map(|b| ResolvedBackend {
                            service: ObjKey::new(&b.namespace, &b.name),
                            port: b.port.unwrap_or(0),
                            weight: b.weight,
                            valid: refs::check(route, b, s.grants, s.services).is_ok(),
                        })
                        .collect(),
                }
            });
            listeners.push(ListenerEval {
                name: l.name.clone(),
                port: l.port,
                kind,
                supported_kinds: supported,
                attached_routes: on_it.len() as i32,
                accepted,
                resolved_refs,
                conflicted,
                active,
            });
        }
        let accepted = gateway_accepted(&listeners);
        out.gateways.insert(
            gw.key.clone(),
            GatewayEval {
                generation: gw.generation,
                accepted,
                listeners,
            },
        );
    }
    out
}

/// A Gateway's `Accepted` from its listeners'. Some listeners invalid: True/`ListenersNotValid`
/// (the valid ones work); all invalid: False/`ListenersNotValid`, as Gateway API's
/// GatewayListenerUnsupportedProtocol asserts. HTTP-only and TLS-only Gateways are accepted
/// (their listeners are valid, they carry nothing), as its TCPRouteInvalidNonTCPListener needs.
/// Public because rivora-controller applies it again when a node finds a listener's port
/// unavailable (`PortUnavailable`), which only the nodes can see.
pub fn gateway_accepted(listeners: &[ListenerEval]) -> Condition {
    let invalid: Vec<&str> = listeners
        .iter()
        .filter(|l| !l.accepted.status)
        .map(|l| l.name.as_str())
        .collect();
    let not_valid = format!(
        "{} of {} listeners are not valid: {}",
        invalid.len(),
        listeners.len(),
        invalid.join(", ")
    );
    if invalid.is_empty() {
        Condition::yes("Accepted", "Accepted", "every listener is valid")
    } else if invalid.len() == listeners.len() {
        Condition::no("Accepted", "ListenersNotValid", not_valid)
    } else {
        Condition::yes("Accepted", "ListenersNotValid", not_valid)
    }
}
