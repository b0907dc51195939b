//! Gateway API status as rivora-controller writes it: GatewayClass `Accepted`, Gateway
//! `status.addresses` and conditions, `status.listeners[]`, and Rivora's entries of TCPRoute and
//! UDPRoute `status.parents[]`. Pure functions of the evaluation ([`rivora_gateway::evaluate()`]),
//! the address assignment, the RivoraNode reports and the previous status: the API calls are in
//! [`crate::gateway_run`].
//!
//! Every condition carries `observedGeneration` (the object's `metadata.generation`) and keeps
//! its `lastTransitionTime` while its status (True/False) does not change; "is current"
//! compares everything but `lastTransitionTime`, so a pass with nothing new writes nothing.
//!
//! # `Programmed`, precisely
//!
//! A node "programs a listener" when its RivoraNode (`status.gateways[]`, written by rivorad)
//! lists the Gateway with `generation` equal to the Gateway's current `metadata.generation`
//! and, for a listener the evaluation gives an active route (the oldest attached one), either
//! - (today's compact report) the listener is not listed by name and the Gateway's `digest`
//!   equals [`rivora_k8s_api::listeners_digest`] of the listeners the evaluation gives active
//!   routes, less those the node lists, each with its route (`namespace/name`) and the VIPs
//!   `ADDRESS:PORT/PROTO` (Rust's `SocketAddr` form, `[v6]:port` for IPv6, as every RivoraNode
//!   VIP is written) of exactly the addresses in the Gateway's `status.addresses` at the
//!   listener's port and protocol; or
//! - (a rivorad before it, which listed every listener) a listener entry of that name whose
//!   `route` is that route, whose `vips` hold those VIPs, and whose `programmed` is true.
//!
//! A listener without an active route has nothing to program: the Gateway at the current
//! generation is enough. Only nodes whose `Ready` condition is True count: a node that is down
//! does not hold every Gateway back, and it is not forwarding either.
//!
//! A listener a Ready node reports at the current generation with `programmed: false` and
//! reason `PortUnavailable` (its VIP key is held by a Service or an older Gateway) is not
//! Accepted (False/`PortUnavailable`, the node's message), and the Gateway's `Accepted` follows
//! ([`rivora_gateway::gateway_accepted`]).
//!
//! Listener `Programmed`, first match wins:
//! 1. the Gateway is not Accepted: False/`Invalid`; the listener is Conflicted: False with the
//!    conflict's reason (`ProtocolConflict`, `HostnameConflict`); it is not Accepted otherwise:
//!    False/`Invalid`;
//! 2. the Gateway has no address: False/`Pending`;
//! 3. no RivoraNode is Ready: False/`Pending`;
//! 4. a Ready node reports the listener at the current generation with `programmed: false`:
//!    False/`Invalid`, with the node's message (the node tried and failed; waiting will not fix
//!    it);
//! 5. a Ready node does not (yet) program it as above: False/`Pending`, naming the node and
//!    what it lacks;
//! 6. otherwise True/`Programmed`.
//!
//! Gateway `Programmed`, first match wins:
//! 1. not Accepted: False/`Invalid`;
//! 2. no address: False/`AddressNotUsable` when `spec.addresses` cannot be served as written (a
//!    malformed or second address of a family, an address outside every pool it may use, held
//!    by another claimant), else False/`AddressNotAssigned` (pools exhausted, no pool, the
//!    requested pool unusable, not yet assigned);
//! 3. no RivoraNode is Ready: False/`Pending`;
//! 4. a listener is False/`Invalid` by listener rule 4: False/`Invalid` (a route the status
//!    calls Accepted is not forwarded: the summary must not say otherwise);
//! 5. a Ready node lags (the Gateway, at the current generation, or an Accepted listener, as
//!    above): False/`Pending`;
//! 6. otherwise True/`Programmed`. Listeners that are not Accepted do not hold it back (they
//!    are by design not programmed, and `Accepted` says `ListenersNotValid`).
//!
//! # Route parents
//!
//! `status.parents` is an atomic list: [`route_parents`] keeps every entry whose
//! `controllerName` is not Rivora's byte for byte, in its order, and appends Rivora's, one per
//! parentRef naming a Gateway of Rivora's classes, in `spec.parentRefs` order; entries of ours
//! for parents that no longer name one are dropped. The caller writes the list with a merge
//! patch carrying the route's `resourceVersion` (optimistic concurrency).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use gateway_api::gatewayclasses::{
    GatewayClass, GatewayClassStatus, GatewayClassStatusSupportedFeatures,
};
use gateway_api::gateways::{
    Gateway, GatewayStatus, GatewayStatusAddresses, GatewayStatusListeners,
    GatewayStatusListenersSupportedKinds,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use rivora_gateway::view::GATEWAY_GROUP;
use rivora_gateway::{GatewayEval, ListenerEval, ObjKey, RouteKind, RouteParentEval};
use rivora_k8s_api::rivora_node::condition::READY;
use rivora_k8s_api::rivora_node::{LISTENER_PORT_UNAVAILABLE, STALE_AFTER_SECS};
use rivora_k8s_api::{
    DigestListener, GatewayReport, ParentReference, RivoraNode, RouteParentStatus, listeners_digest,
};

use crate::ipam::{Assignment, Failure};
use crate::observe::GATEWAY_ADDRESS_TYPE_IP;

/// One RivoraNode as the `Programmed` rules read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    /// The node's name.
    pub name: String,
    /// Its `Ready` condition is True.
    pub ready: bool,
    /// The Gateways it reports, by key.
    pub gateways: BTreeMap<ObjKey, GatewayReport>,
}

/// The reports of the nodes that serve `controller_name` (their `gatewayController`), sorted
/// by node name (so messages name the same node every pass). Nodes of another installation,
/// and nodes whose rivorad does not serve Gateways, are not waited for; a node whose heartbeat
/// is older than [`STALE_AFTER_SECS`] at `now` counts as not Ready (its rivorad is gone: it
/// must not hold every Gateway's `Programmed` back).
pub fn node_views<'a>(
    controller_name: &str,
    nodes: impl IntoIterator<Item = &'a RivoraNode>,
    now: Timestamp,
) -> Vec<NodeView> {
    let mut out: Vec<NodeView> = nodes
        .into_iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.gateway_controller.as_deref())
                == Some(controller_name)
        })
        .map(|n| {
            let status = n.status.as_ref();
            NodeView {
                name: n.metadata.name.clone().unwrap_or_default(),
                ready: status.is_some_and(|s| {
                    let fresh = s
                        .heartbeat_time
                        .as_ref()
                        .is_none_or(|t| now.as_second() - t.0.as_second() <= STALE_AFTER_SECS);
                    fresh
                        && s.conditions
                            .iter()
                            .any(|c| c.type_ == READY && c.status == "True")
                }),
                gateways: status
                    .map(|s| {
                        s.gateways
                            .iter()
                            .map(|g| (ObjKey::new(&g.namespace, &g.name), g.clone()))
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// What the address side says about one Gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addressing {
    /// What the allocator gave it (no addresses and no failures: not assigned yet).
    Assigned(Assignment),
    /// `spec.addresses` cannot be served as written (the message names the entry).
    Refused(String),
}

fn time(now: Timestamp) -> Time {
    Time(now)
}

/// A condition with `lastTransitionTime` kept from `previous` (same type) when its status is
/// unchanged.
fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: i64,
    previous: &[Condition],
    now: Timestamp,
) -> Condition {
    let status = if status { "True" } else { "False" };
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| time(now));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: Some(generation),
        last_transition_time,
    }
}

fn from_eval(
    c: &rivora_gateway::Condition,
    generation: i64,
    previous: &[Condition],
    now: Timestamp,
) -> Condition {
    condition(
        c.type_, c.status, c.reason, &c.message, generation, previous, now,
    )
}

/// Whether `current` holds every condition of `want` (type, status, reason, message,
/// observedGeneration; not lastTransitionTime).
pub fn conditions_match(current: &[Condition], want: &[Condition]) -> bool {
    want.iter().all(|w| {
        current.iter().any(|c| {
            c.type_ == w.type_
                && c.status == w.status
                && c.reason == w.reason
                && c.message == w.message
                && c.observed_generation == w.observed_generation
        })
    })
}

/// The Gateway API release Rivora is built and tested for (its CRDs' `bundle-version` starts
/// with this and a dot).
pub const SUPPORTED_RELEASE: &str = "v1.6";

/// The features a GatewayClass of Rivora's publishes in `status.supportedFeatures` (sorted, as
/// the spec requires): what Gateway API's conformance suite runs for it (profiles GATEWAY-TCP and
/// GATEWAY-UDP) and what it passes, docs/conformance/. Not claimed: anything of HTTPRoute,
/// TLSRoute or GRPCRoute (Rivora forwards L4 only), and `GatewayInfrastructurePropagation`
/// (Rivora makes no object per Gateway that `spec.infrastructure` could label).
pub const SUPPORTED_FEATURES: [&str; 7] = [
    "Gateway",
    "GatewayAddressEmpty",
    "GatewayPort8080",
    "GatewayStaticAddresses",
    "ReferenceGrant",
    "TCPRoute",
    "UDPRoute",
];

/// `SupportedVersion` for the installed release: True when it is of [`SUPPORTED_RELEASE`];
/// otherwise False/`UnsupportedVersion` naming both (Rivora still serves the class: "best
/// effort", as the spec allows, since the kinds it reads are v1 and stable).
fn supported_version(installed: &Result<String, String>) -> (bool, &'static str, String) {
    match installed {
        Ok(v) if v.starts_with(&format!("{SUPPORTED_RELEASE}.")) => (
            true,
            "SupportedVersion",
            format!(
                "the installed Gateway API CRDs are {v}; Rivora supports {SUPPORTED_RELEASE}.x"
            ),
        ),
        Ok(v) => (
            false,
            "UnsupportedVersion",
            format!(
                "the installed Gateway API CRDs are {v}; Rivora supports {SUPPORTED_RELEASE}.x \
                 (served on a best-effort basis)"
            ),
        ),
        Err(why) => (
            false,
            "UnsupportedVersion",
            format!(
                "the installed Gateway API release is not known ({why}); Rivora supports {SUPPORTED_RELEASE}.x"
            ),
        ),
    }
}

/// A GatewayClass's status: `Accepted` as the evaluation decided it, `SupportedVersion` for the
/// installed Gateway API release, and [`SUPPORTED_FEATURES`].
pub fn class_status(
    class: &GatewayClass,
    accepted: &rivora_gateway::Condition,
    installed: &Result<String, String>,
    now: Timestamp,
) -> GatewayClassStatus {
    let previous = class
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let generation = class.metadata.generation.unwrap_or(0);
    let (ok, reason, message) = supported_version(installed);
    GatewayClassStatus {
        conditions: Some(vec![
            from_eval(accepted, generation, &previous, now),
            condition(
                "SupportedVersion",
                ok,
                reason,
                &message,
                generation,
                &previous,
                now,
            ),
        ]),
        supported_features: Some(
            SUPPORTED_FEATURES
                .iter()
                .map(|f| GatewayClassStatusSupportedFeatures { name: (*f).into() })
                .collect(),
        ),
    }
}

/// Whether the GatewayClass already says what `want` says (conditions, supported features).
pub fn class_status_is_current(class: &GatewayClass, want: &GatewayClassStatus) -> bool {
    let cur = class.status.as_ref();
    let conditions = cur
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let features = |s: Option<&GatewayClassStatus>| -> Vec<String> {
        s.and_then(|s| s.supported_features.as_ref())
            .into_iter()
            .flatten()
            .map(|f| f.name.clone())
            .collect()
    };
    conditions_match(conditions, want.conditions.as_deref().unwrap_or_default())
        && features(cur) == features(Some(want))
}

/// How the Ready nodes stand on one listener (or, without a listener, on the Gateway).
#[derive(Debug, Clone, PartialEq, Eq)]
enum OnNodes {
    Programmed(usize),
    Pending(String),
    Failed(String),
}

fn protocol_name(kind: Option<RouteKind>) -> &'static str {
    match kind {
        Some(RouteKind::Udp) => "UDP",
        _ => "TCP",
    }
}

/// Whether every Ready node programs the Gateway at `generation` and, given `listener`, that
/// listener as the module doc says.
fn on_nodes(
    key: &ObjKey,
    generation: i64,
    listener: Option<&ListenerEval>,
    eval: &GatewayEval,
    addresses: &[IpAddr],
    nodes: &[NodeView],
) -> OnNodes {
    let ready: Vec<&NodeView> = nodes.iter().filter(|n| n.ready).collect();
    if ready.is_empty() {
        return OnNodes::Pending("no RivoraNode is Ready".into());
    }
    let mut pending = None;
    for n in &ready {
        let lag = |why: String| Some(format!("RivoraNode {} {why}", n.name));
        let Some(report) = n.gateways.get(key) else {
            pending = pending.or_else(|| lag("does not report this Gateway yet".into()));
            continue;
        };
        if report.generation != generation {
            pending = pending.or_else(|| {
                lag(format!(
                    "programmed generation {}, not {generation}",
                    report.generation
                ))
            });
            continue;
        }
        let Some(l) = listener else { continue };
        let Some(active) = &l.active else { continue };
        let Some(lr) = report.listeners.iter().find(|r| r.name == l.name) else {
            // The compact report: a listener programmed as asked is in the digest.
            let want = expected_digest(eval, addresses, report);
            if report.digest.as_deref() != Some(want.as_str()) {
                pending = pending.or_else(|| {
                    lag(format!(
                        "has not programmed listener {} as evaluated yet (route {}, {} \
                         address(es); digest {}, expected {want})",
                        l.name,
                        active.route,
                        addresses.len(),
                        report.digest.as_deref().unwrap_or("none"),
                    ))
                });
            }
            continue;
        };
        let want_route = active.route.to_string();
        if lr.route.as_deref() != Some(want_route.as_str()) {
            pending = pending.or_else(|| {
                lag(format!(
                    "forwards listener {} for route {}, not {want_route}",
                    l.name,
                    lr.route.as_deref().unwrap_or("(none)")
                ))
            });
            continue;
        }
        if !lr.programmed {
            return OnNodes::Failed(format!(
                "RivoraNode {} failed to program listener {}: {}",
                n.name,
                l.name,
                lr.message.as_deref().unwrap_or("no reason given")
            ));
        }
        let proto = protocol_name(l.kind);
        if let Some(missing) = addresses
            .iter()
            .map(|a| format!("{}/{proto}", SocketAddr::new(*a, l.port)))
            .find(|v| !lr.vips.contains(v))
        {
            pending = pending.or_else(|| lag(format!("has not programmed {missing} ({})", l.name)));
        }
    }
    match pending {
        Some(p) => OnNodes::Pending(p),
        None => OnNodes::Programmed(ready.len()),
    }
}

/// The [`GatewayReport::digest`] of a node that programmed the Gateway as evaluated: over its
/// listeners with an active route, less those the node lists by name (failed ones, or every one
/// from a rivorad before the compact report), each with the VIP of every address at its port.
fn expected_digest(eval: &GatewayEval, addresses: &[IpAddr], report: &GatewayReport) -> String {
    listeners_digest(eval.listeners.iter().filter_map(|l| {
        let active = l.active.as_ref()?;
        if report.listeners.iter().any(|r| r.name == l.name) {
            return None;
        }
        let proto = protocol_name(l.kind);
        Some(DigestListener {
            name: l.name.clone(),
            route: active.route.to_string(),
            vips: addresses
                .iter()
                .map(|a| format!("{}/{proto}", SocketAddr::new(*a, l.port)))
                .collect(),
        })
    }))
}

/// Why a Gateway has no address, as its `Programmed` reason and message.
fn no_address(addressing: &Addressing) -> (&'static str, String) {
    match addressing {
        Addressing::Refused(m) => ("AddressNotUsable", m.clone()),
        Addressing::Assigned(a) => match a.failures.first() {
            Some(
                f @ (Failure::AddressOutsidePools(_)
                | Failure::AddressTaken(..)
                | Failure::SharingRefused(..)),
            ) => ("AddressNotUsable", f.to_string()),
            Some(f) => ("AddressNotAssigned", f.to_string()),
            None => ("AddressNotAssigned", "no address assigned yet".into()),
        },
    }
}

/// The evaluation with what only the nodes can see: a listener whose (address, port, protocol)
/// a Ready node finds held by another object (a Service given the Gateway's address by hand,
/// or an older Gateway) is not Accepted (`PortUnavailable`, Gateway API's reason for "the port
/// is already in use"), and the Gateway's `Accepted` is recomputed from its listeners'.
fn with_unavailable_ports(key: &ObjKey, eval: &GatewayEval, nodes: &[NodeView]) -> GatewayEval {
    let mut out = eval.clone();
    let mut changed = false;
    for l in out.listeners.iter_mut().filter(|l| l.accepted.status) {
        let held = nodes.iter().filter(|n| n.ready).find_map(|n| {
            let report = n.gateways.get(key)?;
            let lr = report.listeners.iter().find(|r| r.name == l.name)?;
            (report.generation == eval.generation
                && !lr.programmed
                && lr.reason.as_deref() == Some(LISTENER_PORT_UNAVAILABLE))
            .then(|| {
                format!(
                    "RivoraNode {}: {}",
                    n.name,
                    lr.message
                        .as_deref()
                        .unwrap_or("the port is held by another object")
                )
            })
        });
        if let Some(message) = held {
            l.accepted = rivora_gateway::Condition::no("Accepted", "PortUnavailable", message);
            changed = true;
        }
    }
    if changed {
        out.accepted = rivora_gateway::gateway_accepted(&out.listeners);
    }
    out
}

/// A Gateway's whole status (what rivora-controller applies): addresses, `Accepted`,
/// `Programmed`, and every listener.
pub fn gateway_status(
    gw: &Gateway,
    eval: &GatewayEval,
    addressing: &Addressing,
    nodes: &[NodeView],
    now: Timestamp,
) -> GatewayStatus {
    let key = ObjKey::new(
        gw.metadata.namespace.clone().unwrap_or_default(),
        gw.metadata.name.clone().unwrap_or_default(),
    );
    let eval = &with_unavailable_ports(&key, eval, nodes);
    let generation = eval.generation;
    let prev = gw.status.as_ref();
    let prev_conditions = prev.and_then(|s| s.conditions.clone()).unwrap_or_default();
    let prev_listeners = prev.and_then(|s| s.listeners.clone()).unwrap_or_default();

    let unsupported = match addressing {
        Addressing::Assigned(a) => a.failures.iter().find_map(|f| match f {
            Failure::UnsupportedAddressType(_) => Some(f.to_string()),
            _ => None,
        }),
        Addressing::Refused(_) => None,
    };
    let accepted = match &unsupported {
        Some(m) => condition(
            "Accepted",
            false,
            "UnsupportedAddress",
            m,
            generation,
            &prev_conditions,
            now,
        ),
        None => from_eval(&eval.accepted, generation, &prev_conditions, now),
    };
    let is_accepted = accepted.status == "True";
    let addresses: Vec<IpAddr> = match addressing {
        Addressing::Assigned(a) if is_accepted => a.addresses.iter().map(|(ip, _)| *ip).collect(),
        _ => Vec::new(),
    };

    let mut listeners = Vec::new();
    let mut failed = None;
    let mut pending = None;
    for l in &eval.listeners {
        let prev_l: Vec<Condition> = prev_listeners
            .iter()
            .find(|p| p.name == l.name)
            .map(|p| p.conditions.clone())
            .unwrap_or_default();
        let (ok, reason, message) = if !is_accepted {
            (false, "Invalid", "the Gateway is not Accepted".to_string())
        } else if l.conflicted.status {
            // As Gateway API's own conformance tests (ListenerSetProtocolConflict) have it:
            // Programmed False with the conflict's reason.
            (false, l.conflicted.reason, l.conflicted.message.clone())
        } else if !l.accepted.status {
            (
                false,
                "Invalid",
                format!(
                    "not Accepted ({}): {}",
                    l.accepted.reason, l.accepted.message
                ),
            )
        } else if addresses.is_empty() {
            (false, "Pending", "the Gateway has no address yet".into())
        } else {
            match on_nodes(&key, generation, Some(l), eval, &addresses, nodes) {
                // An HTTP, HTTPS or TLS listener: accepted, nothing of it to forward.
                OnNodes::Programmed(n) if l.kind.is_none() => (
                    true,
                    "Programmed",
                    format!(
                        "nothing to program: Rivora forwards TCPRoute and UDPRoute only (the \
                         Gateway is programmed by every Ready RivoraNode, {n})"
                    ),
                ),
                OnNodes::Programmed(n) => (
                    true,
                    "Programmed",
                    format!("programmed by every Ready RivoraNode ({n})"),
                ),
                OnNodes::Pending(m) => {
                    pending = pending.or_else(|| Some(m.clone()));
                    (false, "Pending", m)
                }
                OnNodes::Failed(m) => {
                    failed = failed.or_else(|| Some(m.clone()));
                    (false, "Invalid", m)
                }
            }
        };
        let programmed = condition("Programmed", ok, reason, &message, generation, &prev_l, now);
        listeners.push(GatewayStatusListeners {
            name: l.name.clone(),
            attached_routes: l.attached_routes,
            supported_kinds: Some(
                l.supported_kinds
                    .iter()
                    .map(|k| GatewayStatusListenersSupportedKinds {
                        group: Some(GATEWAY_GROUP.into()),
                        kind: (*k).into(),
                    })
                    .collect(),
            ),
            conditions: vec![
                from_eval(&l.accepted, generation, &prev_l, now),
                programmed,
                from_eval(&l.resolved_refs, generation, &prev_l, now),
                from_eval(&l.conflicted, generation, &prev_l, now),
            ],
        });
    }

    let (ok, reason, message) = if !is_accepted {
        (false, "Invalid", "the Gateway is not Accepted".to_string())
    } else if addresses.is_empty() {
        let (r, m) = no_address(addressing);
        (false, r, m)
    } else if let Some(f) = failed {
        (false, "Invalid", f)
    } else {
        // The Gateway itself must be reported at this generation even when no listener has
        // anything to program.
        let whole = match on_nodes(&key, generation, None, eval, &addresses, nodes) {
            OnNodes::Programmed(n) => pending
                .map(OnNodes::Pending)
                .unwrap_or(OnNodes::Programmed(n)),
            other => other,
        };
        match whole {
            OnNodes::Programmed(n) => (
                true,
                "Programmed",
                format!("programmed by every Ready RivoraNode ({n})"),
            ),
            OnNodes::Pending(m) | OnNodes::Failed(m) => (false, "Pending", m),
        }
    };
    let programmed = condition(
        "Programmed",
        ok,
        reason,
        &message,
        generation,
        &prev_conditions,
        now,
    );
    GatewayStatus {
        addresses: Some(
            addresses
                .iter()
                .map(|ip| GatewayStatusAddresses {
                    r#type: Some(GATEWAY_ADDRESS_TYPE_IP.into()),
                    value: ip.to_string(),
                })
                .collect(),
        ),
        attached_listener_sets: None,
        conditions: Some(vec![accepted, programmed]),
        listeners: Some(listeners),
    }
}

/// Whether the Gateway's status already says what `want` says (addresses, conditions,
/// listeners; lastTransitionTime aside).
pub fn gateway_status_is_current(gw: &Gateway, want: &GatewayStatus) -> bool {
    let Some(cur) = gw.status.as_ref() else {
        return false;
    };
    let addr = |s: &GatewayStatus| -> Vec<(String, String)> {
        s.addresses
            .iter()
            .flatten()
            .map(|a| {
                (
                    a.r#type
                        .clone()
                        .unwrap_or_else(|| GATEWAY_ADDRESS_TYPE_IP.into()),
                    a.value.clone(),
                )
            })
            .collect()
    };
    let cur_l = cur.listeners.as_deref().unwrap_or_default();
    let want_l = want.listeners.as_deref().unwrap_or_default();
    let kinds = |l: &GatewayStatusListeners| -> Vec<(String, String)> {
        l.supported_kinds
            .iter()
            .flatten()
            .map(|k| {
                (
                    k.group.clone().unwrap_or_else(|| GATEWAY_GROUP.into()),
                    k.kind.clone(),
                )
            })
            .collect()
    };
    addr(cur) == addr(want)
        && conditions_match(
            cur.conditions.as_deref().unwrap_or_default(),
            want.conditions.as_deref().unwrap_or_default(),
        )
        && cur_l.len() == want_l.len()
        && want_l.iter().all(|w| {
            cur_l.iter().any(|c| {
                c.name == w.name
                    && c.attached_routes == w.attached_routes
                    && kinds(c) == kinds(w)
                    // Same count: a condition that is no longer wanted
                    // (gateway_families') must be removed.
                    && c.conditions.len() == w.conditions.len()
                    && conditions_match(&c.conditions, &w.conditions)
            })
        })
}

/// A parentRef as Rivora writes it in its status entry: the route's own, with the group and kind
/// the API server would default filled in (the namespace as the route wrote it).
fn status_parent_ref(p: &ParentReference) -> ParentReference {
    ParentReference {
        group: Some(p.group_or_default().into()),
        kind: Some(p.kind_or_default().into()),
        ..p.clone()
    }
}

fn same_parent_ref(a: &ParentReference, b: &ParentReference, route_ns: &str) -> bool {
    a.group_or_default() == b.group_or_default()
        && a.kind_or_default() == b.kind_or_default()
        && a.namespace_or(route_ns) == b.namespace_or(route_ns)
        && a.name == b.name
        && a.section_name == b.section_name
        && a.port == b.port
}

/// Whether the route's parentRef is the one an evaluated parent entry is about.
fn names(p: &ParentReference, route_ns: &str, e: &RouteParentEval) -> bool {
    let v = &e.parent;
    p.group_or_default() == v.group
        && p.kind_or_default() == v.kind
        && p.namespace_or(route_ns) == v.namespace
        && p.name == v.name
        && p.section_name == v.section_name
        && p.port.and_then(|p| u16::try_from(p).ok()) == v.port
}

/// Most entries of `status.parents` (the CRD's `maxItems`).
pub const MAX_PARENTS: usize = rivora_k8s_api::route::MAX_PARENTS;

/// The route's whole `status.parents` with the entries of `controller_name` (Rivora's) as they
/// should be, or None when
/// they already are (then nothing is written). `ours` is the evaluation's entries for the route
/// (None: no parent of it names a Gateway of Rivora's classes).
pub fn route_parents(
    controller_name: &str,
    route_ns: &str,
    generation: i64,
    spec_parents: &[ParentReference],
    current: &[RouteParentStatus],
    ours: Option<&[RouteParentEval]>,
    now: Timestamp,
) -> Option<Vec<RouteParentStatus>> {
    let (mine, others): (Vec<&RouteParentStatus>, Vec<&RouteParentStatus>) = current
        .iter()
        .partition(|p| p.controller_name == controller_name);
    let mut want: Vec<RouteParentStatus> = Vec::new();
    for e in ours.unwrap_or_default() {
        let Some(spec) = spec_parents.iter().find(|p| names(p, route_ns, e)) else {
            continue;
        };
        let parent_ref = status_parent_ref(spec);
        let previous: Vec<Condition> = mine
            .iter()
            .find(|m| same_parent_ref(&m.parent_ref, &parent_ref, route_ns))
            .map(|m| m.conditions.clone())
            .unwrap_or_default();
        want.push(RouteParentStatus {
            parent_ref,
            controller_name: controller_name.into(),
            conditions: vec![
                from_eval(&e.accepted, generation, &previous, now),
                from_eval(&e.resolved_refs, generation, &previous, now),
            ],
        });
    }
    want.truncate(MAX_PARENTS.saturating_sub(others.len()));
    let current_ok = mine.len() == want.len()
        && mine.iter().zip(&want).all(|(m, w)| {
            same_parent_ref(&m.parent_ref, &w.parent_ref, route_ns)
                && m.conditions.len() == w.conditions.len()
                && conditions_match(&m.conditions, &w.conditions)
        });
    if current_ok {
        return None;
    }
    Some(others.into_iter().cloned().chain(want).collect())
}

#[cfg(test)]
mod tests;
