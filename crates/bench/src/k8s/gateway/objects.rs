//! The objects 5e writes (GatewayClass, AddressPool, backend Services and their
//! EndpointSlices, Gateways of two listeners, one TCPRoute and one UDPRoute per Gateway), as
//! untyped objects of Gateway API v1, and what each Gateway's VIPs must forward to.
//!
//! Why untyped: the benchmark reads only a few status fields (addresses, conditions, route
//! parents) and the served schema is Gateway API's own CRDs, so `DynamicObject` keeps the
//! benchmark free of a second copy of the Gateway types.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};

use anyhow::Result;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use rivora_dataplane::{VipKey, proto};
use serde_json::{Value, json};

/// The API group of Gateway API.
pub const GW_GROUP: &str = "gateway.networking.k8s.io";
/// Backend Services per protocol; Gateway `g`'s routes use backend `g % BACKENDS`.
pub const BACKENDS: usize = 10;
/// Endpoints (pods) per backend Service.
pub const ENDPOINTS: usize = 3;
/// The port the pods listen on (TCP and UDP).
const TARGET_PORT: u16 = 8080;

/// One of a Gateway's two listeners, with its route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Listener {
    /// Listener `tcp`, port 80, a TCPRoute.
    Tcp,
    /// Listener `udp`, port 53, a UDPRoute.
    Udp,
}

impl Listener {
    /// Both, in order.
    pub const BOTH: [Listener; 2] = [Listener::Tcp, Listener::Udp];

    /// The listener's (and the route name's suffix) name.
    pub fn name(self) -> &'static str {
        match self {
            Listener::Tcp => "tcp",
            Listener::Udp => "udp",
        }
    }

    /// The listener's port (also the backend Service's port).
    pub fn port(self) -> u16 {
        match self {
            Listener::Tcp => 80,
            Listener::Udp => 53,
        }
    }

    fn protocol(self) -> &'static str {
        match self {
            Listener::Tcp => "TCP",
            Listener::Udp => "UDP",
        }
    }

    /// The route kind attached to it.
    pub fn route_kind(self) -> &'static str {
        match self {
            Listener::Tcp => "TCPRoute",
            Listener::Udp => "UDPRoute",
        }
    }

    /// The VIP the node programs for it at Gateway address `addr`.
    pub fn vip_key(self, addr: Ipv4Addr) -> VipKey {
        let p = match self {
            Listener::Tcp => proto::TCP,
            Listener::Udp => proto::UDP,
        };
        VipKey::exact(addr.into(), self.port(), p)
    }
}

/// Gateway `g`'s name (zero-padded, so the nodes' reports, sorted by name, list them in
/// creation order).
pub fn gateway_name(g: usize) -> String {
    format!("gw-{g:03}")
}

/// The warm-up Gateway's name: it sorts before every `gw-NNN`.
pub const WARM_UP: &str = "a-warm-up";

/// The route of Gateway `gw`'s listener `l`.
pub fn route_name(gw: &str, l: Listener) -> String {
    format!("{gw}-{}", l.name())
}

/// The address of endpoint `j` of backend `k`: 10.201.0.0/16 (never a VIP, never a node's).
fn pod_addr(k: usize, j: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 201, k as u8, j as u8 + 1)
}

/// What a new flow to any VIP of a Gateway whose routes use backend `k` may reach (both
/// protocols: the same pods).
pub fn expected(k: usize) -> BTreeSet<SocketAddr> {
    (0..ENDPOINTS)
        .map(|j| SocketAddr::new(pod_addr(k, j).into(), TARGET_PORT))
        .collect()
}

/// The dynamic API of Gateway API kind `kind` (plural `plural`), cluster-wide or in `ns`.
pub fn gw_api(client: &Client, ns: Option<&str>, kind: &str, plural: &str) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GW_GROUP, "v1", kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// The namespaced APIs 5e writes through.
#[derive(Clone)]
pub struct Apis {
    /// Gateways.
    pub gateways: Api<DynamicObject>,
    /// TCPRoutes.
    pub tcp: Api<DynamicObject>,
    /// UDPRoutes.
    pub udp: Api<DynamicObject>,
}

impl Apis {
    /// The APIs in namespace `ns`.
    pub fn new(client: &Client, ns: &str) -> Apis {
        Apis {
            gateways: gw_api(client, Some(ns), "Gateway", "gateways"),
            tcp: gw_api(client, Some(ns), "TCPRoute", "tcproutes"),
            udp: gw_api(client, Some(ns), "UDPRoute", "udproutes"),
        }
    }

    /// The API of the routes of listener `l`.
    pub fn routes(&self, l: Listener) -> &Api<DynamicObject> {
        match l {
            Listener::Tcp => &self.tcp,
            Listener::Udp => &self.udp,
        }
    }
}

/// A typed-looking object from JSON.
pub fn dynamic(v: Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(v)?)
}

/// Gateway `name` of `class`: listeners `tcp` (80/TCP) and `udp` (53/UDP), its address
/// from `pool` (the annotation the allocator reads).
pub fn gateway(name: &str, class: &str, pool: &str) -> Result<DynamicObject> {
    let listeners: Vec<Value> = Listener::BOTH
        .iter()
        .map(|l| json!({"name": l.name(), "port": l.port(), "protocol": l.protocol()}))
        .collect();
    dynamic(json!({
        "apiVersion": format!("{GW_GROUP}/v1"), "kind": "Gateway",
        "metadata": {"name": name, "annotations": {"rivora.dev/address-pool": pool}},
        "spec": {"gatewayClassName": class, "listeners": listeners},
    }))
}

/// The route of Gateway `gw`'s listener `l`, to backend `k`.
pub fn route(gw: &str, l: Listener, k: usize) -> Result<DynamicObject> {
    dynamic(json!({
        "apiVersion": format!("{GW_GROUP}/v1"), "kind": l.route_kind(),
        "metadata": {"name": route_name(gw, l)},
        "spec": {
            "parentRefs": [{"name": gw, "sectionName": l.name()}],
            "rules": [{"backendRefs": [{"name": backend_name(k, l), "port": l.port()}]}],
        },
    }))
}

fn backend_name(k: usize, l: Listener) -> String {
    format!("be-{}-{k}", l.name())
}

/// Backend `k`'s Service of listener `l`'s protocol (ClusterIP, port -> 8080) and its
/// EndpointSlice (every endpoint ready, on `node`).
pub fn backend(k: usize, l: Listener, node: &str) -> (Value, Value) {
    let name = backend_name(k, l);
    let svc = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"type": "ClusterIP", "ports": [{"name": "p", "port": l.port(),
                 "targetPort": TARGET_PORT, "protocol": l.protocol()}]},
    });
    let eps: Vec<Value> = (0..ENDPOINTS)
        .map(|j| {
            json!({"addresses": [pod_addr(k, j).to_string()], "nodeName": node,
                   "conditions": {"ready": true, "serving": true, "terminating": false}})
        })
        .collect();
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-0"),
                     "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "ports": [{"name": "p", "port": TARGET_PORT, "protocol": l.protocol()}],
        "endpoints": eps,
    });
    (svc, slice)
}
