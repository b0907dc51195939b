//! Which listeners a route's parentRef reaches, and which of them admit it.

use crate::view::{
    AllowedNamespaces, GATEWAY_GROUP, GatewayView, ListenerView, NamespaceView, ParentRefView,
    RouteView,
};

/// The route kinds Gateway API defines for a listener protocol (what `supportedKinds` lists for
/// it), or None for a protocol it does not define (then the listener is `UnsupportedProtocol`).
///
/// Why HTTP, HTTPS and TLS are here although Rivora forwards only TCPRoute and UDPRoute: they
/// are listener protocols of Gateway API's core, its conformance suite builds its Gateway tests
/// on them and expects them Accepted with their kinds listed, and a Gateway that mixes them
/// with TCP listeners is a valid Gateway. Rivora accepts such a listener, lists its kinds, and
/// programs nothing for it (no route of those kinds is Rivora's to attach).
pub fn protocol_kinds(protocol: &str) -> Option<&'static [&'static str]> {
    match protocol {
        "TCP" => Some(&["TCPRoute"]),
        "UDP" => Some(&["UDPRoute"]),
        "HTTP" | "HTTPS" => Some(&["HTTPRoute"]),
        "TLS" => Some(&["TLSRoute"]),
        _ => None,
    }
}

/// The route kinds a listener supports (`status.listeners[].supportedKinds`),
/// and whether its `allowedRoutes.kinds` named any it cannot carry (then
/// `ResolvedRefs=False, InvalidRouteKinds`, the valid ones still listed). A
/// protocol Gateway API does not define supports nothing.
pub fn supported_kinds(l: &ListenerView) -> (Vec<&'static str>, bool) {
    let Some(kinds) = protocol_kinds(&l.protocol) else {
        return (Vec::new(), false);
    };
    if l.kinds.is_empty() {
        return (kinds.to_vec(), false);
    }
    let mut valid = Vec::new();
    let mut invalid = false;
    for (group, kind) in &l.kinds {
        let group_ok = group.is_empty() || group == GATEWAY_GROUP;
        match kinds.iter().find(|k| group_ok && **k == kind.as_str()) {
            Some(k) if !valid.contains(k) => valid.push(*k),
            Some(_) => {}
            None => invalid = true,
        }
    }
    (valid, invalid)
}

/// Whether the listener's `allowedRoutes.namespaces` lets a route of
/// `route_ns` attach to a listener of a Gateway in `gateway_ns`.
pub fn namespace_allowed(
    l: &ListenerView,
    gateway_ns: &str,
    route_ns: &str,
    namespaces: &[NamespaceView],
) -> bool {
    match &l.namespaces {
        AllowedNamespaces::Same => gateway_ns == route_ns,
        AllowedNamespaces::All => true,
        AllowedNamespaces::Selector(sel) => namespaces
            .iter()
            .find(|n| n.name == route_ns)
            .is_some_and(|n| sel.matches(&n.labels)),
    }
}

/// Whether the parentRef selects the listener: its sectionName and port,
/// both when both are set; any listener when neither is.
pub fn selects(parent: &ParentRefView, l: &ListenerView) -> bool {
    parent.section_name.as_ref().is_none_or(|s| *s == l.name)
        && parent.port.is_none_or(|p| p == l.port)
}

/// Whether the parentRef names this Gateway.
pub fn names_gateway(parent: &ParentRefView, gw: &GatewayView) -> bool {
    parent.group == GATEWAY_GROUP
        && parent.kind == "Gateway"
        && parent.namespace == gw.key.namespace
        && parent.name == gw.key.name
}

/// What one parentRef of a route gets from its Gateway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attachment {
    /// Attached to these listeners (indices into the Gateway's).
    Accepted(Vec<usize>),
    /// No listener has the sectionName and/or port (`NoMatchingParent`).
    NoMatchingParent,
    /// Listeners were selected but none admits the route: its kind (a TCPRoute on an HTTP
    /// listener), its namespace, a protocol Gateway API does not define, or a listener that is
    /// conflicted and so not accepted (`NotAllowedByListeners`).
    NotAllowedByListeners,
}

/// Attaches `route` through `parent` to `gw` (which `parent` names). `conflicted[i]` says
/// listener `i` is conflicted ([`crate::conflict::conflicts`]): it admits no route.
pub fn attach(
    route: &RouteView,
    parent: &ParentRefView,
    gw: &GatewayView,
    conflicted: &[bool],
    namespaces: &[NamespaceView],
) -> Attachment {
    let selected: Vec<usize> = gw
        .listeners
        .iter()
        .enumerate()
        .filter(|(_, l)| selects(parent, l))
        .map(|(i, _)| i)
        .collect();
    if selected.is_empty() {
        return Attachment::NoMatchingParent;
    }
    let admitted: Vec<usize> = selected
        .into_iter()
        .filter(|i| {
            let l = &gw.listeners[*i];
            !conflicted.get(*i).copied().unwrap_or(false)
                && supported_kinds(l).0.contains(&route.kind.as_str())
                && namespace_allowed(l, &gw.key.namespace, &route.key.namespace, namespaces)
        })
        .collect();
    if admitted.is_empty() {
        Attachment::NotAllowedByListeners
    } else {
        Attachment::Accepted(admitted)
    }
}
