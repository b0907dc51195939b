//! The endpoints of one Service port, from its EndpointSlices, joined as kube-proxy's
//! EndpointSliceCache joins them (kubernetes `pkg/proxy/endpointslicecache.go`).
//!
//! Why kube-proxy's rules and not our own: operators and controllers write EndpointSlices for
//! kube-proxy. Reading them any other way (another port join, another duplicate rule) would
//! make the same cluster forward differently on a Rivora node.
//!
//! - A slice belongs to a Service through its `kubernetes.io/service-name` label, in the
//!   Service's namespace.
//! - A ServicePort and a slice port match by (name, protocol); an empty name and an absent one
//!   are the same (the EndpointSlice controller writes `""` for an unnamed port). The slice's
//!   port number is the backend port, which may differ from the Service port and from slice to
//!   slice (a named targetPort resolving to different numbers per pod).
//! - Only `addresses[0]` of an endpoint is used, and only slices whose `addressType` is the
//!   VIP's family (FQDN slices never).
//! - Duplicates (same IP and port in two slices, while an endpoint moves between slices or a
//!   new pod reuses a terminating pod's IP) are merged: the non-terminating copy wins, else the
//!   first seen (slices are read in name order, so the result does not depend on store order).
//! - Conditions: absent `ready` and `serving` mean true; `terminating` only when true.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// An address family; a VIP is fed by the endpoints of its own family only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// IPv4 (`addressType: IPv4`).
    V4,
    /// IPv6 (`addressType: IPv6`).
    V6,
}

impl Family {
    /// The family of an address.
    pub fn of(addr: IpAddr) -> Self {
        if addr.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }

    /// The EndpointSlice `addressType` of this family.
    pub fn address_type(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }
}

/// The object an endpoint stands for (its `targetRef`), usually a Pod; what rivoractl shows per
/// backend.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetRef {
    /// `Pod`, or whatever kind the slice's writer named.
    pub kind: String,
    /// Its namespace, when given.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl fmt::Display for TargetRef {
    /// `Pod ns/name` (or `Pod name` without a namespace).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// One endpoint of one Service port after the join: an address, the backend port and the
/// conditions that decide its role (see [`crate::select`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `addresses[0]`.
    pub addr: IpAddr,
    /// The slice port's number: what packets are rewritten to.
    pub port: u16,
    /// `conditions.ready`, absent meaning true.
    pub ready: bool,
    /// `conditions.serving`, absent meaning true.
    pub serving: bool,
    /// `conditions.terminating`, absent meaning false.
    pub terminating: bool,
    /// `nodeName`: where the endpoint runs (decides local or remote).
    pub node: Option<String>,
    /// `targetRef`: the Pod behind it.
    pub target: Option<TargetRef>,
    /// The slice it was read from, for messages.
    pub slice: String,
}

/// Why the endpoints of a Service port cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// An endpoint's first address does not parse as an IP address of any family.
    #[error("EndpointSlice {namespace}/{slice}: endpoint address {address:?} is not an IP address")]
    UnparsableAddress {
        /// The slice's namespace.
        namespace: String,
        /// The slice's name.
        slice: String,
        /// The address as written.
        address: String,
    },
}

/// The Service port endpoints are joined for: its name (None or `""` when unnamed) and protocol
/// (`TCP` when absent, as the API server defaults it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortSelector<'a> {
    /// `ServicePort.name`.
    pub name: Option<&'a str>,
    /// `ServicePort.protocol`.
    pub protocol: &'a str,
}

/// Every EndpointSlice grouped by the Service it belongs to (namespace and
/// `kubernetes.io/service-name`), each group in name order. Built once per snapshot so that
/// finding a Service's slices costs a lookup, not a scan of every slice in the cluster: with
/// one scan per Service, a pass over 2,000 Services compared strings 4 million times and took
/// a quarter of a second, all of it on the path from an endpoint change to forwarding.
#[derive(Clone, Debug, Default)]
pub struct SliceIndex {
    by_service: HashMap<(String, String), Vec<Arc<EndpointSlice>>>,
}

impl SliceIndex {
    /// Indexes `slices` (slices without the label belong to no Service and are left out).
    pub fn new(slices: Vec<Arc<EndpointSlice>>) -> Self {
        let mut by_service: HashMap<(String, String), Vec<Arc<EndpointSlice>>> = HashMap::new();
        for s in slices {
            let owner = s
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
                .map(|svc| {
                    (
                        s.metadata.namespace.clone().unwrap_or_default(),
                        svc.clone(),
                    )
                });
            if let Some(owner) = owner {
                by_service.entry(owner).or_default().push(s);
            }
        }
        for group in by_service.values_mut() {
            group.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        }
        SliceIndex { by_service }
    }

    /// The slices of Service `namespace/service`, in name order.
    pub fn of(&self, namespace: &str, service: &str) -> Vec<&EndpointSlice> {
        self.by_service
            .get(&(namespace.to_string(), service.to_string()))
            .map(|g| g.iter().map(Arc::as_ref).collect())
            .unwrap_or_default()
    }
}

impl From<Vec<Arc<EndpointSlice>>> for SliceIndex {
    fn from(slices: Vec<Arc<EndpointSlice>>) -> Self {
        SliceIndex::new(slices)
    }
}

fn same_name(a: Option<&str>, b: Option<&str>) -> bool {
    a.unwrap_or("") == b.unwrap_or("")
}

/// The endpoints of one Service port in one family, from the slices of its Service (as
/// [`SliceIndex::of`] returns them), merged and sorted by (address, port).
pub fn join(
    slices: &[&EndpointSlice],
    port: PortSelector<'_>,
    family: Family,
) -> Result<Vec<Endpoint>, EndpointError> {
    let mut merged: BTreeMap<(IpAddr, u16), Endpoint> = BTreeMap::new();
    for slice in slices {
        if slice.address_type != family.address_type() {
            continue;
        }
        let slice_name = slice.metadata.name.clone().unwrap_or_default();
        for sp in slice.ports.iter().flatten() {
            let protocol = sp.protocol.as_deref().unwrap_or("TCP");
            if !same_name(sp.name.as_deref(), port.name) || protocol != port.protocol {
                continue;
            }
            // kube-proxy ignores a port without a number (it has no "all ports" meaning yet).
            let Some(number) = sp
                .port
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p != 0)
            else {
                continue;
            };
            for ep in &slice.endpoints {
                let Some(first) = ep.addresses.first() else {
                    continue;
                };
                let addr: IpAddr = first
                    .parse()
                    .map_err(|_| EndpointError::UnparsableAddress {
                        namespace: slice.metadata.namespace.clone().unwrap_or_default(),
                        slice: slice_name.clone(),
                        address: first.clone(),
                    })?;
                // A slice of this addressType holding another family's address: ignored, as
                // kube-proxy ignores "the incorrect IP version case".
                if Family::of(addr) != family {
                    continue;
                }
                let cond = ep.conditions.clone().unwrap_or_default();
                let candidate = Endpoint {
                    addr,
                    port: number,
                    ready: cond.ready != Some(false),
                    serving: cond.serving != Some(false),
                    terminating: cond.terminating == Some(true),
                    node: ep.node_name.clone(),
                    target: ep.target_ref.as_ref().map(|r| TargetRef {
                        kind: r.kind.clone().unwrap_or_else(|| "Pod".into()),
                        namespace: r.namespace.clone(),
                        name: r.name.clone().unwrap_or_default(),
                    }),
                    slice: slice_name.clone(),
                };
                // The first copy stays unless it is terminating and this one is not.
                let replaces = merged
                    .get(&(addr, number))
                    .is_none_or(|existing| existing.terminating && !candidate.terminating);
                if replaces {
                    merged.insert((addr, number), candidate);
                }
            }
        }
    }
    Ok(merged.into_values().collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A real EndpointSlice object from its JSON form, as the API server serves it.
    pub(crate) fn slice(
        ns: &str,
        name: &str,
        service: Option<&str>,
        body: Value,
    ) -> Arc<EndpointSlice> {
        let mut v = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"namespace": ns, "name": name},
        });
        if let Some(s) = service {
            v["metadata"]["labels"] = json!({SERVICE_NAME_LABEL: s});
        }
        for (k, val) in body.as_object().unwrap() {
            v[k] = val.clone();
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn port<'a>(name: Option<&'a str>, protocol: &'a str) -> PortSelector<'a> {
        PortSelector { name, protocol }
    }

    fn addrs(eps: &[Endpoint]) -> Vec<String> {
        eps.iter()
            .map(|e| format!("{}:{}", e.addr, e.port))
            .collect()
    }

    #[test]
    fn slices_are_joined_by_label_in_the_services_namespace() {
        let all = vec![
            slice(
                "ns",
                "web-b",
                Some("web"),
                json!({"addressType": "IPv4", "endpoints": []}),
            ),
            slice(
                "ns",
                "web-a",
                Some("web"),
                json!({"addressType": "IPv4", "endpoints": []}),
            ),
            slice(
                "other",
                "web-x",
                Some("web"),
                json!({"addressType": "IPv4", "endpoints": []}),
            ),
            slice(
                "ns",
                "db-a",
                Some("db"),
                json!({"addressType": "IPv4", "endpoints": []}),
            ),
            slice(
                "ns",
                "web-unlabelled",
                None,
                json!({"addressType": "IPv4", "endpoints": []}),
            ),
        ];
        let names: Vec<_> = SliceIndex::new(all)
            .of("ns", "web")
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["web-a", "web-b"]);
    }

    #[test]
    fn ports_join_by_name_and_protocol_and_the_slice_port_is_the_backend_port() {
        let s = slice(
            "ns",
            "web-1",
            Some("web"),
            json!({
                "addressType": "IPv4",
                "ports": [
                    {"name": "http", "port": 8080, "protocol": "TCP"},
                    {"name": "http", "port": 5353, "protocol": "UDP"},
                    {"name": "metrics", "port": 9090, "protocol": "TCP"},
                ],
                "endpoints": [{"addresses": ["10.1.0.1"]}]
            }),
        );
        let slices = [s.as_ref()];
        let http = join(&slices, port(Some("http"), "TCP"), Family::V4).unwrap();
        assert_eq!(addrs(&http), ["10.1.0.1:8080"]);
        let udp = join(&slices, port(Some("http"), "UDP"), Family::V4).unwrap();
        assert_eq!(addrs(&udp), ["10.1.0.1:5353"]);
        assert!(
            join(&slices, port(Some("https"), "TCP"), Family::V4)
                .unwrap()
                .is_empty()
        );
        assert!(
            join(&slices, port(None, "TCP"), Family::V4)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn an_empty_name_is_an_absent_one_and_protocol_defaults_to_tcp() {
        let s = slice(
            "ns",
            "web-1",
            Some("web"),
            json!({
                "addressType": "IPv4",
                "ports": [{"name": "", "port": 8080}],
                "endpoints": [{"addresses": ["10.1.0.1"]}]
            }),
        );
        let slices = [s.as_ref()];
        assert_eq!(
            addrs(&join(&slices, port(None, "TCP"), Family::V4).unwrap()),
            ["10.1.0.1:8080"]
        );
        assert_eq!(
            addrs(&join(&slices, port(Some(""), "TCP"), Family::V4).unwrap()),
            ["10.1.0.1:8080"]
        );
        assert!(
            join(&slices, port(None, "UDP"), Family::V4)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn two_slices_may_give_different_backend_ports() {
        let a = slice(
            "ns",
            "web-a",
            Some("web"),
            json!({
                "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["10.1.0.1"]}]
            }),
        );
        let b = slice(
            "ns",
            "web-b",
            Some("web"),
            json!({
                "addressType": "IPv4", "ports": [{"name": "http", "port": 8081, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["10.1.0.2"]}, {"addresses": ["10.1.0.1"]}]
            }),
        );
        let got = join(
            &[a.as_ref(), b.as_ref()],
            port(Some("http"), "TCP"),
            Family::V4,
        )
        .unwrap();
        assert_eq!(
            addrs(&got),
            ["10.1.0.1:8080", "10.1.0.1:8081", "10.1.0.2:8081"]
        );
    }

    #[test]
    fn a_duplicate_keeps_the_non_terminating_copy() {
        let body = |cond: Value, node: &str| {
            json!({
                "addressType": "IPv4", "ports": [{"name": "", "port": 80, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["10.1.0.1"], "conditions": cond, "nodeName": node}]
            })
        };
        let old = slice(
            "ns",
            "web-a",
            Some("web"),
            body(
                json!({"ready": false, "serving": true, "terminating": true}),
                "old",
            ),
        );
        let new = slice(
            "ns",
            "web-b",
            Some("web"),
            body(json!({"ready": true}), "new"),
        );
        // Either order: the terminating copy loses.
        for order in [[old.as_ref(), new.as_ref()], [new.as_ref(), old.as_ref()]] {
            let got = join(&order, port(None, "TCP"), Family::V4).unwrap();
            assert_eq!(got.len(), 1);
            assert!(!got[0].terminating && got[0].ready);
            assert_eq!(got[0].node.as_deref(), Some("new"));
        }
        // Two non-terminating copies: the first slice (by name) wins, whatever the store order.
        let a = slice("ns", "web-a", Some("web"), body(json!({}), "a"));
        let b = slice("ns", "web-b", Some("web"), body(json!({}), "b"));
        let store = SliceIndex::new(vec![b, a]);
        let got = join(&store.of("ns", "web"), port(None, "TCP"), Family::V4).unwrap();
        assert_eq!(got[0].node.as_deref(), Some("a"));
    }

    #[test]
    fn only_the_first_address_and_the_vips_family_count() {
        let v4 = slice(
            "ns",
            "web-4",
            Some("web"),
            json!({
                "addressType": "IPv4", "ports": [{"name": "", "port": 80, "protocol": "TCP"}],
                "endpoints": [
                    {"addresses": ["10.1.0.1", "10.1.0.99"]},
                    {"addresses": []},
                    {"addresses": ["fd00::7"]},
                ]
            }),
        );
        let v6 = slice(
            "ns",
            "web-6",
            Some("web"),
            json!({
                "addressType": "IPv6", "ports": [{"name": "", "port": 80, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["fd00::1"]}]
            }),
        );
        let fqdn = slice(
            "ns",
            "web-f",
            Some("web"),
            json!({
                "addressType": "FQDN", "ports": [{"name": "", "port": 80, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["example.com"]}]
            }),
        );
        let all = [v4.as_ref(), v6.as_ref(), fqdn.as_ref()];
        assert_eq!(
            addrs(&join(&all, port(None, "TCP"), Family::V4).unwrap()),
            ["10.1.0.1:80"]
        );
        assert_eq!(
            addrs(&join(&all, port(None, "TCP"), Family::V6).unwrap()),
            ["fd00::1:80"]
        );
    }

    #[test]
    fn conditions_default_as_the_api_documents() {
        let s = slice(
            "ns",
            "web-1",
            Some("web"),
            json!({
                "addressType": "IPv4", "ports": [{"name": "", "port": 80, "protocol": "TCP"}],
                "endpoints": [
                    {"addresses": ["10.1.0.1"]},
                    {"addresses": ["10.1.0.2"], "conditions": {"ready": false, "serving": true, "terminating": true}},
                    {"addresses": ["10.1.0.3"], "conditions": {"ready": false, "serving": false}},
                    {"addresses": ["10.1.0.4"], "conditions": {"terminating": false},
                     "nodeName": "n1", "targetRef": {"kind": "Pod", "namespace": "ns", "name": "web-0"}},
                ]
            }),
        );
        let got = join(&[s.as_ref()], port(None, "TCP"), Family::V4).unwrap();
        let conds: Vec<_> = got
            .iter()
            .map(|e| (e.ready, e.serving, e.terminating))
            .collect();
        assert_eq!(
            conds,
            [
                (true, true, false),
                (false, true, true),
                (false, false, false),
                (true, true, false)
            ]
        );
        assert_eq!(got[3].target.as_ref().unwrap().to_string(), "Pod ns/web-0");
        assert_eq!(got[3].node.as_deref(), Some("n1"));
        assert_eq!(got[0].slice, "web-1");
    }

    #[test]
    fn an_unparsable_address_is_an_error_naming_the_slice() {
        let s = slice(
            "ns",
            "web-1",
            Some("web"),
            json!({
                "addressType": "IPv4", "ports": [{"name": "", "port": 80, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["10.1.0.300"]}]
            }),
        );
        let err = join(&[s.as_ref()], port(None, "TCP"), Family::V4).unwrap_err();
        assert_eq!(
            err.to_string(),
            "EndpointSlice ns/web-1: endpoint address \"10.1.0.300\" is not an IP address"
        );
    }

    #[test]
    fn ports_without_a_number_are_ignored() {
        let s = slice(
            "ns",
            "web-1",
            Some("web"),
            json!({
                "addressType": "IPv4",
                "ports": [{"name": "", "protocol": "TCP"}, {"name": "", "port": 0, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["10.1.0.1"]}]
            }),
        );
        assert!(
            join(&[s.as_ref()], port(None, "TCP"), Family::V4)
                .unwrap()
                .is_empty()
        );
    }
}
