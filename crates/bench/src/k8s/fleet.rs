//! The Services a node agent serves in 5b and 5c: LoadBalancer Services with an address in
//! their status and one EndpointSlice each, written by the benchmark as rivora-controller and
//! the EndpointSlice controller would, and the model of what each VIP's new flows must reach.
//!
//! Why a model: "change to forwarding" ends when the datapath's new-flow pick (read through
//! the pins) equals what the endpoints say, so the benchmark must know that set exactly.
//!
//! rivorad's backend table holds 8,192 backends (`RV_MAX_BACKENDS`) and a backend is one
//! address:port, so 2,000 Services x 10 endpoints share pods: 9 of each Service's endpoints
//! are pods that back 5 Services, as pods behind several Services do in a cluster.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rivora_dataplane::{VipKey, proto};
use serde_json::json;

use super::harness::lb_service;

/// Endpoints per Service (the figure).
pub const ENDPOINTS: usize = 10;
/// How many Services each pod backs.
const SERVICES_PER_POD: usize = 5;
/// The port the endpoints listen on (the Services' targetPort).
const TARGET_PORT: u16 = 8080;
/// Writes in flight while populating.
const IN_FLIGHT: usize = 32;

/// One endpoint's address and conditions, as in an EndpointSlice.
#[derive(Clone, Copy, Debug)]
pub struct Ep {
    /// Index of its pod (its address is [`pod_addr`]).
    pub pod: usize,
    /// `conditions.ready`.
    pub ready: bool,
    /// `conditions.serving`.
    pub serving: bool,
    /// `conditions.terminating`.
    pub terminating: bool,
}

impl Ep {
    fn ready(pod: usize) -> Ep {
        Ep {
            pod,
            ready: true,
            serving: true,
            terminating: false,
        }
    }
}

/// The address of pod `i`: 10.200.0.0/16 (never a VIP, never the node's own address).
pub fn pod_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 200, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// The VIP of Service `s`: 10.170.0.0/16, port 80/TCP.
pub fn vip_of(s: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 170, (s / 250) as u8, (s % 250 + 1) as u8)
}

/// The exact VIP key of Service `s` in the datapath.
pub fn vip_key(s: usize) -> VipKey {
    VipKey::exact(vip_of(s).into(), 80, proto::TCP)
}

/// Every Service's endpoints, in the benchmark's namespace.
pub struct Fleet {
    /// The namespace holding the Services and slices.
    pub ns: String,
    /// The loadBalancerClass of the Services.
    pub class: String,
    /// The Node the endpoints run on.
    pub node: String,
    /// Endpoints of Service `s`, index `s`.
    pub eps: Vec<Vec<Ep>>,
    /// The next pod index never used (spares for added endpoints).
    next_pod: usize,
}

impl Fleet {
    /// `services` Services of 10 endpoints each, nothing written yet. Endpoint 0 of each is a
    /// pod of its own (the one the updates change: a pod that turns terminating does so in
    /// every slice that lists it, and the datapath drains a backend only when every VIP
    /// listing it does); the other 9 are shared, each pod backing 5 Services.
    pub fn new(ns: &str, class: &str, node: &str, services: usize) -> Fleet {
        Self::sized(ns, class, node, services, ENDPOINTS)
    }

    /// As [`Fleet::new`] with `endpoints` endpoints per Service (at least 2).
    pub fn sized(ns: &str, class: &str, node: &str, services: usize, endpoints: usize) -> Fleet {
        let shared = (services * (endpoints - 1))
            .div_ceil(SERVICES_PER_POD)
            .max(endpoints - 1);
        let eps = (0..services)
            .map(|s| {
                std::iter::once(Ep::ready(s))
                    .chain(
                        (1..endpoints)
                            .map(|j| Ep::ready(services + (s * (endpoints - 1) + j - 1) % shared)),
                    )
                    .collect()
            })
            .collect();
        let pods = services + shared;
        Fleet {
            ns: ns.into(),
            class: class.into(),
            node: node.into(),
            eps,
            next_pod: pods,
        }
    }

    /// How many Services.
    pub fn len(&self) -> usize {
        self.eps.len()
    }

    /// A pod index no endpoint used so far.
    pub fn spare_pod(&mut self) -> usize {
        self.next_pod += 1;
        self.next_pod - 1
    }

    /// The distinct backends (address:port) all Services use now.
    pub fn distinct_backends(&self) -> usize {
        self.eps
            .iter()
            .flatten()
            .map(|e| e.pod)
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// What a new flow to Service `s`'s VIP may reach, by kube-proxy's rule: the ready
    /// endpoints, or, when none is ready, the serving terminating ones.
    pub fn expected(&self, s: usize) -> BTreeSet<SocketAddr> {
        let addr = |e: &Ep| SocketAddr::new(pod_addr(e.pod).into(), TARGET_PORT);
        let ready: BTreeSet<_> = self.eps[s].iter().filter(|e| e.ready).map(addr).collect();
        if !ready.is_empty() {
            return ready;
        }
        self.eps[s]
            .iter()
            .filter(|e| e.serving && e.terminating)
            .map(addr)
            .collect()
    }

    /// Service `s`'s name.
    pub fn service_name(s: usize) -> String {
        format!("svc-{s}")
    }

    /// Service `s`'s EndpointSlice as an apply patch.
    fn slice(&self, s: usize) -> serde_json::Value {
        let name = Self::service_name(s);
        let endpoints: Vec<_> = self.eps[s]
            .iter()
            .map(|e| {
                json!({
                    "addresses": [pod_addr(e.pod).to_string()],
                    "conditions": {"ready": e.ready, "serving": e.serving,
                                   "terminating": e.terminating},
                    "nodeName": self.node,
                })
            })
            .collect();
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-0"), "labels": {
                "kubernetes.io/service-name": name,
                "endpointslice.kubernetes.io/managed-by": "rivora-bench",
            }},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": TARGET_PORT, "protocol": "TCP"}],
            "endpoints": endpoints,
        })
    }

    /// Writes Service `s`'s EndpointSlice as the model holds it (server-side apply, as the
    /// EndpointSlice controller's update would replace it).
    pub async fn write_slice(&self, slices: &Api<EndpointSlice>, s: usize) -> Result<()> {
        let name = format!("{}-0", Self::service_name(s));
        let (pp, body) = (PatchParams::apply("rivora-bench").force(), self.slice(s));
        retry_transport(|| async { slices.patch(&name, &pp, &Patch::Apply(&body)).await })
            .await
            .with_context(|| format!("applying EndpointSlice {name}"))?;
        Ok(())
    }

    /// Creates every Service, gives each its address (status written under
    /// rivora-controller's field manager, as the controller does) and writes every slice.
    pub async fn populate(&self, admin: &kube::Client) -> Result<Duration> {
        let t = std::time::Instant::now();
        let services: Api<Service> = Api::namespaced(admin.clone(), &self.ns);
        let slices: Api<EndpointSlice> = Api::namespaced(admin.clone(), &self.ns);
        futures::stream::iter(0..self.len())
            .map(|s| {
                let (services, slices) = (services.clone(), slices.clone());
                async move {
                    let name = Self::service_name(s);
                    let svc = lb_service(&name, &self.class, json!({}))?;
                    retry_transport(|| async {
                        services.create(&PostParams::default(), &svc).await
                    })
                    .await
                    .with_context(|| format!("creating Service {name}"))?;
                    let status = json!({
                        "apiVersion": "v1", "kind": "Service",
                        "status": {"loadBalancer": {"ingress": [
                            {"ip": vip_of(s).to_string(), "ipMode": "VIP"}]}},
                    });
                    let pp = PatchParams::apply("rivora-controller").force();
                    retry_transport(|| async {
                        services
                            .patch_status(&name, &pp, &Patch::Apply(&status))
                            .await
                    })
                    .await
                    .with_context(|| format!("writing the status of Service {name}"))?;
                    self.write_slice(&slices, s).await
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(t.elapsed())
    }
}

/// Runs `f` again (up to 3 tries, 200 ms apart) when the connection failed before an answer:
/// a loaded API server on 2 cores closes connections now and then, and such a request never
/// reached it. An answer of the API server (any status) is returned as it is.
async fn retry_transport<T, F, Fut>(mut f: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut tries = 1;
    loop {
        match f().await {
            Err(kube::Error::Api(e)) => return Err(kube::Error::Api(e)),
            Err(_) if tries < 3 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_shared_within_the_backend_table_and_spares_are_new() {
        let mut f = Fleet::new("ns", "c", "n", 2_000);
        assert_eq!(f.distinct_backends(), 2_000 + 3_600);
        // Endpoint 0 (the one updates change) is each Service's own pod.
        let firsts: BTreeSet<usize> = f.eps.iter().map(|e| e[0].pod).collect();
        assert_eq!(firsts.len(), 2_000);
        assert!(
            f.eps
                .iter()
                .all(|e| e[1..].iter().all(|x| !firsts.contains(&x.pod)))
        );
        assert!(f.distinct_backends() < rivora_abi::MAX_BACKENDS as usize);
        let spare = f.spare_pod();
        assert!(f.eps.iter().flatten().all(|e| e.pod != spare));
        // Addresses stay inside 10.200/16 for every pod the benchmark can use.
        assert_eq!(pod_addr(spare), Ipv4Addr::new(10, 200, 22, 101));
    }

    #[test]
    fn expected_follows_kube_proxys_terminating_fallback() {
        let mut f = Fleet::new("ns", "c", "n", 1);
        assert_eq!(f.expected(0).len(), ENDPOINTS);
        f.eps[0][0].ready = false;
        f.eps[0][0].terminating = true;
        assert_eq!(f.expected(0).len(), ENDPOINTS - 1);
        for e in &mut f.eps[0] {
            e.ready = false;
            e.terminating = true;
        }
        // Nothing ready: the serving terminating endpoints take new flows.
        assert_eq!(f.expected(0).len(), ENDPOINTS);
        f.eps[0][1].serving = false;
        assert_eq!(f.expected(0).len(), ENDPOINTS - 1);
    }
}
