//! Which listeners a route's parentRef reaches, and which of them admit it.

use crate::view::{
    AllowedNamespaces, GATEWAY_GROUP, GatewayView, ListenerView, NamespaceView, ParentRefView,
    RouteKind, RouteView,
};

/// The route kinds a listener supports (`status.listeners[].supportedKinds`),
/// and whether its `allowedRoutes.kinds` named any it cannot carry (then
/// `ResolvedRefs=False, InvalidRouteKinds`, the valid ones still listed). A
/// protocol Rivora does not serve supports nothing.
pub fn supported_kinds(l: &ListenerView) -> (Vec<RouteKind>, bool) {
    let Some(pk) = RouteKind::of_protocol(&l.protocol) else {
        return (Vec::new(), false);
    };
    if l.kinds.is_empty() {
        return (vec![pk], false);
    }
    let mut valid = Vec::new();
    let mut invalid = false;
    for (group, kind) in &l.kinds {
        let group_ok = group.is_empty() || group == GATEWAY_GROUP;
        if group_ok && kind == pk.as_str() {
            if !valid.contains(&pk) {
                valid.push(pk);
            }
        } else {
            invalid = true;
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
    /// Listeners were selected but none admits the route: its kind, its
    /// namespace, or a protocol Rivora does not serve
    /// (`NotAllowedByListeners`).
    NotAllowedByListeners,
}

/// Attaches `route` through `parent` to `gw` (which `parent` names).
pub fn attach(
    route: &RouteView,
    parent: &ParentRefView,
    gw: &GatewayView,
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
            supported_kinds(l).0.contains(&route.kind)
                && namespace_allowed(l, &gw.key.namespace, &route.key.namespace, namespaces)
        })
        .collect();
    if admitted.is_empty() {
        Attachment::NotAllowedByListeners
    } else {
        Attachment::Accepted(admitted)
    }
}
