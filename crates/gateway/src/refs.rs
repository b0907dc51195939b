//! Whether a route's backendRefs resolve: core Services, cross-namespace
//! only with a ReferenceGrant, that exist with the port.

use crate::view::{BackendRefView, GATEWAY_GROUP, ReferenceGrantView, RouteView, ServiceView};

/// Why a backendRef does not resolve, with Gateway API's reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefProblem {
    /// Not a core Service (`InvalidKind`).
    InvalidKind(String),
    /// In another namespace without a ReferenceGrant there (`RefNotPermitted`).
    RefNotPermitted(String),
    /// No such Service, or it has no such port (`BackendNotFound`).
    BackendNotFound(String),
}

impl RefProblem {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            RefProblem::InvalidKind(_) => "InvalidKind",
            RefProblem::RefNotPermitted(_) => "RefNotPermitted",
            RefProblem::BackendNotFound(_) => "BackendNotFound",
        }
    }

    /// What it says.
    pub fn message(&self) -> &str {
        match self {
            RefProblem::InvalidKind(m)
            | RefProblem::RefNotPermitted(m)
            | RefProblem::BackendNotFound(m) => m,
        }
    }
}

/// Whether a grant in the backend's namespace lets the route refer to it.
/// Grants are ORed; a removed grant revokes at the next evaluation.
pub fn permitted(route: &RouteView, b: &BackendRefView, grants: &[ReferenceGrantView]) -> bool {
    b.namespace == route.key.namespace
        || grants.iter().any(|g| {
            g.namespace == b.namespace
                && g.from.iter().any(|(group, kind, ns)| {
                    group == GATEWAY_GROUP
                        && kind == route.kind.as_str()
                        && *ns == route.key.namespace
                })
                && g.to.iter().any(|(group, kind, name)| {
                    group.is_empty()
                        && kind == "Service"
                        && name.as_ref().is_none_or(|n| *n == b.name)
                })
        })
}

/// Checks one backendRef: kind first, then the grant, then the Service.
pub fn check(
    route: &RouteView,
    b: &BackendRefView,
    grants: &[ReferenceGrantView],
    services: &[ServiceView],
) -> Result<(), RefProblem> {
    let target = format!("{}/{}", b.namespace, b.name);
    if !(b.group.is_empty() && b.kind == "Service") {
        return Err(RefProblem::InvalidKind(format!(
            "backendRef {target}: kind {}{}{} is not a Service",
            b.group,
            if b.group.is_empty() { "" } else { "/" },
            b.kind
        )));
    }
    if !permitted(route, b, grants) {
        return Err(RefProblem::RefNotPermitted(format!(
            "backendRef {target}: no ReferenceGrant in namespace {} lets {} {} refer to it",
            b.namespace,
            route.kind.as_str(),
            route.key
        )));
    }
    let Some(svc) = services
        .iter()
        .find(|s| s.key.namespace == b.namespace && s.key.name == b.name)
    else {
        return Err(RefProblem::BackendNotFound(format!(
            "backendRef {target}: no such Service"
        )));
    };
    let protocol = route.kind.protocol();
    match b.port {
        Some(p) if svc.ports.iter().any(|(n, pr)| *n == p && pr == protocol) => Ok(()),
        Some(p) if svc.ports.iter().any(|(n, _)| *n == p) => {
            Err(RefProblem::BackendNotFound(format!(
                "backendRef {target}: the Service's port {p} is not {protocol} (a {} carries {protocol})",
                route.kind.as_str()
            )))
        }
        Some(p) => Err(RefProblem::BackendNotFound(format!(
            "backendRef {target}: the Service has no port {p}"
        ))),
        None => Err(RefProblem::BackendNotFound(format!(
            "backendRef {target}: a Service reference needs a port"
        ))),
    }
}
