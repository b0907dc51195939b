//! From Gateways of Rivora's GatewayClasses and their TCPRoutes/UDPRoutes to the VIPs this node
//! programs: one VIP per (Gateway address, listener port, protocol), fed by the backends of the
//! listener's active route.
//!
//! Why the same evaluation as rivora-controller ([`rivora_gateway::evaluate`]): the route the
//! controller's status calls the one carrying traffic (the oldest attached) is the route this
//! node forwards for, and a backendRef the status calls unresolved is the one whose share this
//! node refuses. The rules beyond the evaluation:
//!
//! - Addresses: the Gateway's `status.addresses` of type `IPAddress` (what rivora-controller
//!   bound from an AddressPool); none yet: nothing to program, not an error.
//! - Endpoints: each backendRef's Service port (by number and the listener's protocol) is joined to the Service's
//!   EndpointSlices by the ServicePort's name and the listener's protocol, exactly as a Service
//!   VIP's endpoints are ([`crate::endpoints`], [`crate::select`]): the slice ports carry the
//!   resolved targetPort, terminating endpoints drain or fall back as kube-proxy has them.
//! - Locality: a Gateway has no `externalTrafficPolicy`; the annotation
//!   [`ANNOTATION_TRAFFIC_POLICY`] (`Cluster`, the default, or `Local`) plays its part: with
//!   `Cluster` endpoints on other nodes get this node's address as source (as a Service's do),
//!   with `Local` only this node's endpoints are used and clients' addresses are kept.
//! - Weights ([`share_weights`]): a backendRef's weight is its share of new flows; it is split
//!   evenly over that Service's endpoints that take new flows, so per-endpoint Maglev weight =
//!   route weight / endpoint count (scaled to integers). Weight 0 gets no slot at all. A
//!   backendRef that does not resolve, and one whose Service has no endpoint taking new flows
//!   here, keep their share: the VIP's `reject_weight`, which the datapath refuses (TCP reset,
//!   other packets dropped), as Gateway API requires. A VIP with no backend at all refuses every
//!   new flow.
//! - Conflicts: Services are translated first; a listener whose VIP key a Service or an older
//!   Gateway holds fails (the IPAM never gives one address to both, so this needs a Service
//!   asking for a Gateway's address by hand).
//! - Failures are per listener: a failing listener keeps its last good VIPs (the caller's
//!   [`crate::convert::LastGood`]) and holds the initial-sync gate; the Gateway's other
//!   listeners are programmed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{Namespace, Service};
use rivora_dataplane::{BackendKey, BackendSpec, VipKey, VipSpec, proto};
use rivora_gateway::{ActiveRoute, ObjKey, RouteKind};
use rivora_k8s_api::gateway_view;
use rivora_k8s_api::{TcpRoute, UdpRoute};

use crate::endpoints::{self, Family, PortSelector};
use crate::select::{self, TrafficPolicy};
use crate::translate::{
    Announce, BackendMeta, GatewayOrigin, K8sVip, NodeIdentity, Snapshot, TranslateError, VipOrigin,
};

/// Gateway annotation choosing endpoint locality, as `externalTrafficPolicy` does for a
/// Service: `Cluster` (default) or `Local`.
pub const ANNOTATION_TRAFFIC_POLICY: &str = "rivora.dev/traffic-policy";

/// The Gateway API objects a node reads, as the reflector stores hand them out.
#[derive(Clone, Debug, Default)]
pub struct GatewayObjects {
    /// Every GatewayClass (ours are those naming the configured controllerName).
    pub classes: Vec<Arc<GatewayClass>>,
    /// Every Gateway.
    pub gateways: Vec<Arc<Gateway>>,
    /// Every TCPRoute (v1).
    pub tcp_routes: Vec<Arc<TcpRoute>>,
    /// Every UDPRoute (v1).
    pub udp_routes: Vec<Arc<UdpRoute>>,
    /// Every ReferenceGrant.
    pub grants: Vec<Arc<ReferenceGrant>>,
    /// Every Namespace (for `allowedRoutes` selectors).
    pub namespaces: Vec<Arc<Namespace>>,
}

/// One listener that carries a route here, and what it translates to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerOutcome {
    /// The listener's name.
    pub name: String,
    /// The route it forwards for.
    pub route: ObjKey,
    /// Its VIPs (one per Gateway address), or why none could be made.
    pub result: Result<Vec<K8sVip>, TranslateError>,
}

/// What a Gateway of ours translates to on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayOutcome {
    /// `metadata.generation`.
    pub generation: i64,
    /// The listeners with an active route (the others have nothing to program).
    pub listeners: Vec<ListenerOutcome>,
}

impl GatewayOutcome {
    /// Whether every listener translated (what the initial-sync gate asks of a Gateway).
    pub fn reconciled(&self) -> bool {
        self.listeners.iter().all(|l| l.result.is_ok())
    }
}

/// The addresses a Gateway is bound to: its `status.addresses` of type `IPAddress` that parse,
/// in order, without repeats.
pub fn gateway_addresses(gw: &Gateway) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for ip in gateway_view::status_ip_addresses(gw) {
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}

/// The addresses of every Gateway of a Rivora GatewayClass (`controller_name`): no endpoint may
/// have one.
pub fn our_gateway_addresses(objects: &GatewayObjects, controller_name: &str) -> BTreeSet<IpAddr> {
    let ours: BTreeSet<&str> = objects
        .classes
        .iter()
        .filter(|c| c.spec.controller_name == controller_name)
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    objects
        .gateways
        .iter()
        .filter(|g| ours.contains(g.spec.gateway_class_name.as_str()))
        .flat_map(|g| gateway_addresses(g))
        .collect()
}

/// The VIP name of a listener on one address:
/// `gw/<namespace>/<gateway>/<listener>/<tcp|udp>/<address>` (unique: listener names are
/// unique in a Gateway; stable across restarts).
pub fn vip_name(gateway: &ObjKey, listener: &str, proto_name: &str, addr: IpAddr) -> String {
    format!(
        "gw/{}/{}/{listener}/{proto_name}/{addr}",
        gateway.namespace, gateway.name
    )
}

/// Largest common multiple of endpoint counts used to split weights exactly; beyond it the
/// split is rounded (to within 1/[`SPLIT_SCALE`] of a backendRef's weight per endpoint).
pub const SPLIT_SCALE: u64 = 1_000;
/// Largest per-endpoint weight handed to the dataplane (route weights go up to 1,000,000).
pub const MAX_ENDPOINT_WEIGHT: u64 = 1_000_000;

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Splits route weights over endpoints. `shares[i]` is (backendRef weight, endpoints of it
/// taking new flows, > 0); `refused` is the summed weight of the backendRefs whose share is
/// refused. Returns the per-endpoint weight of each share and the refused weight, in one
/// integer scale, reduced by their common divisor.
///
/// Exact when the least common multiple L of the endpoint counts is at most [`SPLIT_SCALE`]
/// (per-endpoint weight = weight x L / count, refused = refused x L); otherwise each is
/// rounded at scale [`SPLIT_SCALE`] (never below 1). Weights too large for the dataplane are
/// scaled down together to at most [`MAX_ENDPOINT_WEIGHT`].
pub fn share_weights(shares: &[(u32, usize)], refused: u32) -> (Vec<u32>, u32) {
    let mut l: u64 = 1;
    for (_, n) in shares {
        let n = *n as u64;
        l = l / gcd(l, n) * n;
        if l > SPLIT_SCALE {
            break;
        }
    }
    let mut per: Vec<u64> = if l <= SPLIT_SCALE {
        shares
            .iter()
            .map(|(w, n)| u64::from(*w) * l / *n as u64)
            .collect()
    } else {
        l = SPLIT_SCALE;
        shares
            .iter()
            .map(|(w, n)| ((u64::from(*w) * l + *n as u64 / 2) / *n as u64).max(1))
            .collect()
    };
    let mut rej = u64::from(refused) * l;
    let g = per.iter().chain([&rej]).fold(0, |g, x| gcd(g, *x));
    if g > 1 {
        per.iter_mut().for_each(|x| *x /= g);
        rej /= g;
    }
    let max = per.iter().chain([&rej]).copied().max().unwrap_or(0);
    if max > MAX_ENDPOINT_WEIGHT {
        let scale = |x: u64| {
            if x == 0 {
                0
            } else {
                (x * MAX_ENDPOINT_WEIGHT / max).max(1)
            }
        };
        per.iter_mut().for_each(|x| *x = scale(*x));
        rej = scale(rej);
    }
    (per.into_iter().map(|x| x as u32).collect(), rej as u32)
}

/// Everything a listener needs besides its route.
struct ListenerCtx<'a> {
    gateway: &'a Gateway,
    key: &'a ObjKey,
    name: &'a str,
    port: u16,
    kind: RouteKind,
    addresses: &'a [IpAddr],
    policy: TrafficPolicy,
}

/// Translates every Gateway of an accepted GatewayClass whose controllerName is
/// `controller_name`. `claimed` holds the VIP keys already taken (by Services, then by older
/// Gateways as they go) and who holds them.
pub fn translate_gateways(
    snapshot: &Snapshot,
    controller_name: &str,
    node: &NodeIdentity,
    vip_addrs: &BTreeSet<IpAddr>,
    claimed: &mut BTreeMap<VipKey, String>,
) -> BTreeMap<ObjKey, GatewayOutcome> {
    let o = &snapshot.gateway_objects;
    let classes: Vec<_> = o
        .classes
        .iter()
        .map(|c| gateway_view::class_view(c))
        .collect();
    let gateways: Vec<_> = o
        .gateways
        .iter()
        .map(|g| gateway_view::gateway_view(g))
        .collect();
    let routes: Vec<_> = o
        .tcp_routes
        .iter()
        .map(|r| gateway_view::tcp_route_view(r))
        .chain(o.udp_routes.iter().map(|r| gateway_view::udp_route_view(r)))
        .collect();
    let grants: Vec<_> = o
        .grants
        .iter()
        .map(|g| gateway_view::grant_view(g))
        .collect();
    let namespaces: Vec<_> = o
        .namespaces
        .iter()
        .map(|n| gateway_view::namespace_view(n))
        .collect();
    let services: Vec<_> = snapshot
        .services
        .iter()
        .map(|s| gateway_view::service_view(s))
        .collect();
    let eval = rivora_gateway::evaluate(&rivora_gateway::Snapshot {
        controller_name,
        classes: &classes,
        gateways: &gateways,
        routes: &routes,
        grants: &grants,
        namespaces: &namespaces,
        services: &services,
    });

    // Oldest Gateway first: it keeps a contested key.
    let mut ours: Vec<(&Arc<Gateway>, ObjKey)> = o
        .gateways
        .iter()
        .map(|g| {
            let key = ObjKey::new(
                g.metadata.namespace.clone().unwrap_or_default(),
                g.metadata.name.clone().unwrap_or_default(),
            );
            (g, key)
        })
        .filter(|(_, k)| eval.gateways.contains_key(k))
        .collect();
    ours.sort_by(|a, b| {
        let ts = |g: &Gateway| g.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (ts(a.0).is_none(), ts(a.0), &a.1).cmp(&(ts(b.0).is_none(), ts(b.0), &b.1))
    });

    let mut out = BTreeMap::new();
    for (gw, key) in ours {
        let ge = &eval.gateways[&key];
        let addresses = gateway_addresses(gw);
        let policy = match gw
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_TRAFFIC_POLICY))
            .map(String::as_str)
        {
            Some("Local") => TrafficPolicy::Local,
            _ => TrafficPolicy::Cluster,
        };
        let mut listeners = Vec::new();
        for l in &ge.listeners {
            let (Some(kind), Some(active), true) = (l.kind, l.active.as_ref(), l.accepted.status)
            else {
                continue;
            };
            let ctx = ListenerCtx {
                gateway: gw,
                key: &key,
                name: &l.name,
                port: l.port,
                kind,
                addresses: &addresses,
                policy,
            };
            let mut result = translate_listener(&ctx, active, snapshot, node, vip_addrs);
            if let Ok(vips) = &result {
                if let Some((k, holder)) = vips
                    .iter()
                    .find_map(|v| claimed.get(&v.spec.key).map(|h| (v.spec.key, h.clone())))
                {
                    result = Err(TranslateError::KeyHeld { key: k, holder });
                } else {
                    for v in vips {
                        claimed.insert(v.spec.key, format!("Gateway {key} listener {}", l.name));
                    }
                }
            }
            listeners.push(ListenerOutcome {
                name: l.name.clone(),
                route: active.route.clone(),
                result,
            });
        }
        out.insert(
            key,
            GatewayOutcome {
                generation: ge.generation,
                listeners,
            },
        );
    }
    out
}

/// The per-endpoint entries of one backendRef before weights are split.
struct Share {
    weight: u32,
    backends: Vec<BackendMeta>,
}

fn translate_listener(
    ctx: &ListenerCtx<'_>,
    active: &ActiveRoute,
    snapshot: &Snapshot,
    node: &NodeIdentity,
    vip_addrs: &BTreeSet<IpAddr>,
) -> Result<Vec<K8sVip>, TranslateError> {
    let (proto_num, proto_name, protocol) = match ctx.kind {
        RouteKind::Tcp => (proto::TCP, "tcp", "TCP"),
        RouteKind::Udp => (proto::UDP, "udp", "UDP"),
    };
    let mut vips = Vec::new();
    for &addr in ctx.addresses {
        let family = Family::of(addr);
        let mut shares: Vec<Share> = Vec::new();
        let mut refused: u32 = 0;
        for rb in active.backends.iter().filter(|b| b.weight > 0) {
            let svc = rb.valid.then(|| {
                snapshot.services.iter().find(|s| {
                    s.metadata.namespace.as_deref() == Some(rb.service.namespace.as_str())
                        && s.metadata.name.as_deref() == Some(rb.service.name.as_str())
                })
            });
            let Some(Some(svc)) = svc else {
                refused = refused.saturating_add(rb.weight);
                continue;
            };
            let backends = service_backends(
                svc, rb.port, protocol, family, ctx.policy, snapshot, node, vip_addrs,
            )?;
            if backends.iter().any(|b| b.role.takes_new_flows()) {
                shares.push(Share {
                    weight: rb.weight,
                    backends,
                });
            } else {
                refused = refused.saturating_add(rb.weight);
            }
        }
        let counts: Vec<(u32, usize)> = shares
            .iter()
            .map(|s| {
                let n = s
                    .backends
                    .iter()
                    .filter(|b| b.role.takes_new_flows())
                    .count();
                (s.weight, n)
            })
            .collect();
        let (per, mut reject_weight) = share_weights(&counts, refused);
        // One entry per endpoint: an endpoint two backendRefs share gets both weights.
        let mut merged: BTreeMap<BackendKey, (u32, BackendMeta)> = BTreeMap::new();
        for (share, w) in shares.into_iter().zip(per) {
            for b in share.backends {
                let entry = merged.entry(b.key).or_insert((0, b.clone()));
                entry.0 = entry.0.saturating_add(w.max(1));
                if b.role.takes_new_flows() {
                    entry.1.role = b.role;
                }
            }
        }
        if merged.is_empty() {
            reject_weight = reject_weight.max(1);
        }
        let name = vip_name(ctx.key, ctx.name, proto_name, addr);
        let spec = VipSpec::new(
            name,
            VipKey::exact(addr, ctx.port, proto_num),
            merged
                .iter()
                .map(|(k, (w, _))| BackendSpec {
                    key: *k,
                    weight: *w,
                    mac: [0; 6],
                })
                .collect(),
        );
        crate::translate::check_vip(&spec)?;
        vips.push(K8sVip {
            spec,
            origin: VipOrigin::Gateway(GatewayOrigin {
                gateway: ctx.key.clone(),
                uid: ctx.gateway.metadata.uid.clone(),
                generation: ctx.gateway.metadata.generation.unwrap_or(0),
                listener: ctx.name.to_string(),
                route: active.route.clone(),
            }),
            traffic_policy: ctx.policy,
            backends: merged.into_values().map(|(_, b)| b).collect(),
            source_ranges: None,
            affinity_timeout: None,
            health_check_node_port: None,
            policy: None,
            announce: Announce::default(),
            reject_weight,
        });
    }
    vips.sort_by_key(|v| v.spec.key);
    Ok(vips)
}

/// The endpoints of one Service port (by number and the listener's protocol) for that family, as a
/// Service VIP would list them, with the same loop checks.
#[allow(clippy::too_many_arguments)]
fn service_backends(
    svc: &Service,
    port: u16,
    protocol: &str,
    family: Family,
    policy: TrafficPolicy,
    snapshot: &Snapshot,
    node: &NodeIdentity,
    vip_addrs: &BTreeSet<IpAddr>,
) -> Result<Vec<BackendMeta>, TranslateError> {
    // By number and protocol: a kube-dns-style Service lists 53/TCP before 53/UDP, and a UDP
    // listener's backendRef to port 53 means the UDP one.
    let Some(sp) = svc
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .find(|p| p.port == i32::from(port) && p.protocol.as_deref().unwrap_or("TCP") == protocol)
    else {
        return Ok(Vec::new());
    };
    let ns = svc.metadata.namespace.as_deref().unwrap_or_default();
    let name = svc.metadata.name.as_deref().unwrap_or_default();
    let slices = snapshot.slices.of(ns, name);
    let joined = endpoints::join(
        &slices,
        PortSelector {
            name: sp.name.as_deref(),
            protocol,
        },
        family,
    )?;
    crate::translate::refuse_loops(&joined, vip_addrs, node)?;
    Ok(select::categorize(&joined, policy, &node.name)
        .into_iter()
        .map(|s| BackendMeta {
            key: BackendKey {
                addr: s.endpoint.addr,
                port: s.endpoint.port,
            },
            role: s.role,
            local: s.local,
            snat: policy == TrafficPolicy::Cluster && !s.local,
            target: s.endpoint.target,
            node: s.endpoint.node,
            check: None,
        })
        .collect())
}

#[cfg(test)]
mod tests;
