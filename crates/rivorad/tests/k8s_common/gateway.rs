//! The Gateway API harness: one test's GatewayClass (with a controllerName of its own), its
//! AddressPool, the real rivora-controller (in process, as the ServiceAccount of
//! deploy/rbac/rivora-controller.yaml, leading over its own Lease), backend Services and their
//! EndpointSlices, routes, and waits on the statuses the conformance suite checks.
//!
//! Why tests take [`SERIAL`]: AddressPools are cluster-wide and every controller writes the
//! status of every pool, so two controllers on one API server would overwrite each other's
//! pool counts. The tests of one binary therefore run one after the other; each still has its
//! own controllerName, namespace, pool, lab and node agents, so nothing one test leaves
//! behind is read by the next.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use gateway_api::gateways::Gateway;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use rivora_controller::leader::LeaderConfig;
use rivora_controller::run::{self, Settings};
use rivora_k8s_api::class::ClassConfig;
use rivora_k8s_api::{AddressPool, TcpRoute, UdpRoute};
use rivora_kube_testbed::{GatewayChannel, unique_name};
use serde_json::{Value, json};
use tokio::sync::{Mutex, MutexGuard};

use super::{FM, K8sTest, WAIT, wait_for};

/// Held by each Gateway test for its whole run (see the module doc).
pub static SERIAL: Mutex<()> = Mutex::const_new(());

/// The API group of Gateway API.
pub const GW_GROUP: &str = "gateway.networking.k8s.io";

/// One Gateway test's corner of the API server, and its controller.
pub struct GatewayTest {
    /// The Service-side test corner (namespace, class, rivorad's token).
    pub t: K8sTest,
    /// The GatewayClass's controllerName (the agents' `--gateway-controller-name`).
    pub controller_name: String,
    /// The GatewayClass's name.
    pub class_name: String,
    /// The AddressPool its Gateways take addresses from.
    pub pool: String,
    lease_ns: String,
    controller: Option<tokio::task::JoinHandle<()>>,
    /// A client with the controller's identity (deploy/rbac/rivora-controller.yaml).
    pub controller_client: Client,
    /// The running replica's metrics.
    metrics: Arc<rivora_controller::metrics::Metrics>,
    _serial: MutexGuard<'static, ()>,
}

impl GatewayTest {
    /// Gateway API's standard CRDs, a GatewayClass of a controllerName of this test's, an
    /// AddressPool of `addresses`, and the controller running.
    pub async fn new(tag: &str, addresses: &[&str]) -> GatewayTest {
        let serial = SERIAL.lock().await;
        let t = K8sTest::new(tag).await;
        t.bed
            .install_gateway_api(GatewayChannel::Standard)
            .await
            .expect("installing Gateway API's standard CRDs");
        let controller_name = format!("rivora.dev/{}", t.ns);
        let class_name = format!("gc-{}", t.ns);
        apply(
            &t.admin,
            None,
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                "metadata": {"name": class_name},
                "spec": {"controllerName": controller_name},
            }),
        )
        .await;
        let pool = format!("pool-{}", t.ns);
        let p: AddressPool = serde_json::from_value(json!({
            "apiVersion": "rivora.dev/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": pool},
            "spec": {"addresses": addresses, "autoAssign": false},
        }))
        .unwrap();
        Api::<AddressPool>::all(t.admin.clone())
            .patch(&pool, &PatchParams::apply(FM).force(), &Patch::Apply(&p))
            .await
            .unwrap();
        let lease_ns = unique_name("gwlease");
        let rbac = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../deploy/rbac/rivora-controller.yaml"),
        )
        .unwrap();
        rivora_kube_testbed::ensure_namespace(&t.admin, &lease_ns)
            .await
            .unwrap();
        rivora_kube_testbed::bind_rbac(&t.admin, &rbac, &lease_ns, "rivora-controller")
            .await
            .unwrap();
        let controller_client = t
            .bed
            .service_account_client(&lease_ns, "rivora-controller")
            .await
            .unwrap();
        let mut g = GatewayTest {
            t,
            controller_name,
            class_name,
            pool,
            lease_ns,
            controller: None,
            metrics: Arc::new(rivora_controller::metrics::Metrics::new()),
            controller_client,
            _serial: serial,
        };
        g.start_controller("controller-1").await;
        g
    }

    /// Starts a controller replica named `identity` (it leads once the Lease is free).
    pub async fn start_controller(&mut self, identity: &str) {
        let leader = LeaderConfig {
            lease_name: "rivora-controller".into(),
            namespace: self.lease_ns.clone(),
            identity: identity.into(),
            duration: Duration::from_secs(4),
            grace: Duration::from_secs(1),
        };
        let settings = Settings {
            class: ClassConfig {
                class: self.t.class.clone(),
                default_class: false,
                gateway_controller: self.controller_name.clone(),
            },
            identity: identity.into(),
            debounce: Duration::from_millis(20),
            resync: Duration::from_secs(5),
            metrics: Arc::new(rivora_controller::metrics::Metrics::new()),
        };
        self.metrics = Arc::clone(&settings.metrics);
        let replica = run::replica(
            self.controller_client.clone(),
            leader,
            settings,
            std::future::pending(),
        );
        self.controller = Some(tokio::spawn(async move {
            if let Err(e) = replica.await {
                panic!("rivora-controller stopped: {e:#}");
            }
        }));
    }

    /// Stops the controller replica (as a crash would: no Lease release).
    pub fn stop_controller(&mut self) {
        if let Some(c) = self.controller.take() {
            c.abort();
        }
    }

    /// Passes the running replica finished while leading (`rivora_controller_passes_total`).
    pub fn passes(&self) -> u64 {
        self.metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix("rivora_controller_passes_total "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The agent flags for this test's GatewayClass.
    pub fn agent_args(&self) -> [&str; 2] {
        ["--gateway-controller-name", &self.controller_name]
    }

    /// Gateway `name` in the test's namespace with `listeners`, addresses from the test's pool,
    /// and `extra` fields merged into its spec (e.g. `addresses`).
    pub async fn gateway(&self, name: &str, listeners: Value, extra: Value) {
        let mut spec = json!({"gatewayClassName": self.class_name, "listeners": listeners});
        for (k, v) in extra.as_object().expect("extra spec fields as an object") {
            spec[k] = v.clone();
        }
        apply(
            &self.t.admin,
            Some(&self.t.ns),
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": name, "annotations": {"rivora.dev/address-pool": self.pool}},
                "spec": spec,
            }),
        )
        .await;
    }

    /// A TCPRoute (`kind` "TCPRoute") or UDPRoute in `ns` with `spec`.
    pub async fn route(&self, kind: &str, ns: &str, name: &str, spec: Value) {
        apply(
            &self.t.admin,
            Some(ns),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": kind,
                   "metadata": {"name": name}, "spec": spec}),
        )
        .await;
    }

    /// Deletes a route.
    pub async fn delete_route(&self, kind: &str, ns: &str, name: &str) {
        let dp = DeleteParams::default();
        match kind {
            "TCPRoute" => {
                Api::<TcpRoute>::namespaced(self.t.admin.clone(), ns)
                    .delete(name, &dp)
                    .await
                    .unwrap();
            }
            _ => {
                Api::<UdpRoute>::namespaced(self.t.admin.clone(), ns)
                    .delete(name, &dp)
                    .await
                    .unwrap();
            }
        }
    }

    /// A ClusterIP Service `name` in `ns` with one port `p` (`port` -> 8080) of `protocol`.
    pub async fn backend(&self, ns: &str, name: &str, port: u16, protocol: &str) {
        apply(
            &self.t.admin,
            Some(ns),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                   "spec": {"type": "ClusterIP", "ports": [
                       {"name": "p", "port": port, "targetPort": 8080, "protocol": protocol}]}}),
        )
        .await;
    }

    /// The IPv4 (or IPv6, by the addresses) EndpointSlice `<service>-<family>` in `ns`: the
    /// ready `pods` on `node`, port `p` 8080 of `protocol`.
    pub async fn endpoints(
        &self,
        ns: &str,
        service: &str,
        protocol: &str,
        pods: &[(IpAddr, &str)],
    ) {
        let v6 = pods.first().is_some_and(|(a, _)| a.is_ipv6());
        let name = format!("{service}-{}", if v6 { "v6" } else { "v4" });
        let eps: Vec<Value> = pods
            .iter()
            .map(|(a, node)| {
                json!({"addresses": [a.to_string()], "nodeName": node,
                       "conditions": {"ready": true, "serving": true, "terminating": false}})
            })
            .collect();
        apply(
            &self.t.admin,
            Some(ns),
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
                   "addressType": if v6 { "IPv6" } else { "IPv4" },
                   "endpoints": eps,
                   "ports": [{"name": "p", "port": 8080, "protocol": protocol}]}),
        )
        .await;
    }

    /// A ReferenceGrant in `ns` letting `kind`s of `from_ns` refer to Services there.
    pub async fn grant(&self, ns: &str, name: &str, kind: &str, from_ns: &str) {
        apply(
            &self.t.admin,
            Some(ns),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
                   "metadata": {"name": name},
                   "spec": {"from": [{"group": GW_GROUP, "kind": kind, "namespace": from_ns}],
                            "to": [{"group": "", "kind": "Service"}]}}),
        )
        .await;
    }

    /// Deletes a ReferenceGrant.
    pub async fn delete_grant(&self, ns: &str, name: &str) {
        Api::<gateway_api::referencegrants::ReferenceGrant>::namespaced(self.t.admin.clone(), ns)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// The Gateway as the API server has it.
    pub async fn get_gateway(&self, name: &str) -> Result<Gateway, String> {
        Api::<Gateway>::namespaced(self.t.admin.clone(), &self.t.ns)
            .get(name)
            .await
            .map_err(|e| e.to_string())
    }

    /// Waits until the Gateway has `n` addresses in its status; returns them.
    pub async fn addresses(&self, name: &str, n: usize) -> Vec<IpAddr> {
        wait_for("the Gateway's status.addresses", WAIT, || async {
            let g = self.get_gateway(name).await?;
            let a: Vec<IpAddr> = g
                .status
                .as_ref()
                .and_then(|s| s.addresses.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|a| a.value.parse().ok())
                .collect();
            if a.len() == n {
                Ok(a)
            } else {
                Err(format!("{a:?} ({:?})", g.status))
            }
        })
        .await
    }

    /// Waits until the Gateway's condition `type_` has `status` and `reason`.
    pub async fn gateway_condition(&self, name: &str, type_: &str, status: &str, reason: &str) {
        wait_for(
            &format!("Gateway {name} {type_}={status} ({reason})"),
            WAIT,
            || async {
                let g = self.get_gateway(name).await?;
                let c = g
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
                    .ok_or_else(|| format!("no {type_} condition: {:?}", g.status))?;
                // As upstream's conformance checks: for the Gateway's current generation.
                let current = c.observed_generation == g.metadata.generation;
                if c.status == status && c.reason == reason && current {
                    Ok(())
                } else {
                    Err(format!("{c:?} (generation {:?})", g.metadata.generation))
                }
            },
        )
        .await
    }

    /// Waits until listener `listener` of Gateway `name` has condition `type_` = `status`
    /// with `reason` and `attached` routes; returns the listener's status.
    pub async fn listener_condition(
        &self,
        name: &str,
        listener: &str,
        type_: &str,
        status: &str,
        reason: &str,
        attached: i32,
    ) -> Value {
        wait_for(
            &format!("listener {name}/{listener} {type_}={status} ({reason}), {attached} routes"),
            WAIT,
            || async {
                let g = self.get_gateway(name).await?;
                let l = g
                    .status
                    .as_ref()
                    .and_then(|s| s.listeners.as_ref())
                    .and_then(|ls| ls.iter().find(|l| l.name == listener))
                    .ok_or_else(|| format!("no listener status: {:?}", g.status))?;
                let v = serde_json::to_value(l).unwrap();
                let ok = l.attached_routes == attached
                    && l.conditions.iter().any(|c| {
                        c.type_ == type_
                            && c.status == status
                            && c.reason == reason
                            && c.observed_generation == g.metadata.generation
                    });
                if ok { Ok(v) } else { Err(v.to_string()) }
            },
        )
        .await
    }

    /// Waits until the route's `status.parents` entry of this test's controller for Gateway
    /// `gateway` (and `section`, when given) has condition `type_` = `status` with `reason`.
    #[allow(clippy::too_many_arguments)]
    pub async fn route_condition(
        &self,
        kind: &str,
        ns: &str,
        name: &str,
        gateway: &str,
        section: Option<&str>,
        type_: &str,
        status: &str,
        reason: &str,
    ) {
        wait_for(
            &format!("{kind} {ns}/{name} parent {gateway} {type_}={status} ({reason})"),
            WAIT,
            || async {
                let route = self.route_object(kind, ns, name).await?;
                let parents = route["status"]["parents"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                // As upstream's parentsForRouteMatch: group and kind written out, the name
                // (and section) as the route has them; conditions for its current generation.
                let p = parents
                    .iter()
                    .find(|p| {
                        p["controllerName"] == self.controller_name.as_str()
                            && p["parentRef"]["group"] == "gateway.networking.k8s.io"
                            && p["parentRef"]["kind"] == "Gateway"
                            && p["parentRef"]["name"] == gateway
                            && section.is_none_or(|s| p["parentRef"]["sectionName"] == s)
                    })
                    .ok_or_else(|| format!("no parent entry of ours: {parents:?}"))?;
                let generation = &route["metadata"]["generation"];
                let ok = p["conditions"].as_array().into_iter().flatten().any(|c| {
                    c["type"] == type_
                        && c["status"] == status
                        && c["reason"] == reason
                        && c["observedGeneration"] == *generation
                });
                if ok {
                    Ok(())
                } else {
                    Err(format!("{p} (generation {generation})"))
                }
            },
        )
        .await
    }

    /// The route's `status.parents`.
    pub async fn route_parents(
        &self,
        kind: &str,
        ns: &str,
        name: &str,
    ) -> Result<Vec<Value>, String> {
        let v = self.route_object(kind, ns, name).await?;
        Ok(v["status"]["parents"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// The route as JSON.
    pub async fn route_object(&self, kind: &str, ns: &str, name: &str) -> Result<Value, String> {
        Ok(match kind {
            "TCPRoute" => serde_json::to_value(
                Api::<TcpRoute>::namespaced(self.t.admin.clone(), ns)
                    .get(name)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            _ => serde_json::to_value(
                Api::<UdpRoute>::namespaced(self.t.admin.clone(), ns)
                    .get(name)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
        }
        .unwrap())
    }
}

impl Drop for GatewayTest {
    fn drop(&mut self) {
        self.stop_controller();
    }
}

/// Server-side applies `obj` (in `ns` when namespaced) as the test.
pub async fn apply(admin: &Client, ns: Option<&str>, obj: Value) {
    let gvk: kube::api::GroupVersionKind = {
        let av = obj["apiVersion"].as_str().unwrap();
        let (g, v) = av.rsplit_once('/').unwrap_or(("", av));
        kube::api::GroupVersionKind::gvk(g, v, obj["kind"].as_str().unwrap())
    };
    let ar = kube::discovery::ApiResource::from_gvk(&gvk);
    let ar = kube::discovery::ApiResource {
        plural: plural(&gvk.kind),
        ..ar
    };
    let api: Api<kube::api::DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(admin.clone(), ns, &ar),
        None => Api::all_with(admin.clone(), &ar),
    };
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let o: kube::api::DynamicObject = serde_json::from_value(obj).unwrap();
    api.patch(&name, &PatchParams::apply(FM).force(), &Patch::Apply(&o))
        .await
        .unwrap_or_else(|e| panic!("applying {name}: {e}"));
}

/// The plural resource name of the kinds these tests write.
fn plural(kind: &str) -> String {
    match kind {
        "GatewayClass" => "gatewayclasses".into(),
        "EndpointSlice" => "endpointslices".into(),
        k => format!("{}s", k.to_lowercase()),
    }
}

/// Timeout of one flow of a round.
pub const FLOW_TIMEOUT: Duration = Duration::from_secs(2);

/// The cluster lab with identity servers on every pod (8080, TCP and UDP) and a node agent
/// per node, started for the test's GatewayClass.
pub struct GwLab {
    /// The lab.
    pub lab: rivora_lab::cluster::Cluster,
    _servers: Vec<rivora_lab::IdentityServer>,
    /// The node agents, node 1 first.
    pub agents: Vec<super::NodeAgent>,
    /// Node 1's Node name.
    pub node: String,
}

impl GwLab {
    /// `pods[i]` pods on node i+1; agents keep removed backends for `--backend-retire-secs 0`.
    pub async fn new(g: &GatewayTest, tag: &str, pods: &[usize]) -> GwLab {
        Self::start(g, tag, pods, 0, &[]).await
    }

    /// As [`GwLab::new`], removed backends draining for `retire_secs`.
    pub async fn with_retire(
        g: &GatewayTest,
        tag: &str,
        pods: &[usize],
        retire_secs: u64,
    ) -> GwLab {
        Self::start(g, tag, pods, retire_secs, &[]).await
    }

    /// As [`GwLab::with_retire`], the agents started with `extra` flags too.
    pub async fn start(
        g: &GatewayTest,
        tag: &str,
        pods: &[usize],
        retire_secs: u64,
        extra: &[&str],
    ) -> GwLab {
        let lab = rivora_lab::cluster::Cluster::build(tag, pods).expect("building the cluster lab");
        let servers = lab.nodes.iter().flat_map(super::identity_servers).collect();
        let mut agents = Vec::new();
        for n in 1..=lab.nodes.len() {
            let mut agent = g.t.agent(&lab, n).await;
            agent.retire_secs = retire_secs.to_string();
            let mut args = g.agent_args().to_vec();
            args.extend_from_slice(extra);
            agent.start_in(&lab.nodes[n - 1].ns, &args);
            agents.push(agent);
        }
        let node = agents[0].name.clone();
        GwLab {
            lab,
            _servers: servers,
            agents,
            node,
        }
    }

    /// The pods over all nodes, node 1's first.
    fn pods(&self) -> impl Iterator<Item = (usize, &rivora_lab::cluster::Pod)> {
        self.lab
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(n, node)| node.pods.iter().map(move |p| (n, p)))
    }

    /// Pod `i`'s (0-based, over all nodes) IPv4 address.
    pub fn pod(&self, i: usize) -> IpAddr {
        IpAddr::V4(self.pods().nth(i).expect("no such pod").1.v4)
    }

    /// Pod `i`'s IPv6 address.
    pub fn pod6(&self, i: usize) -> IpAddr {
        IpAddr::V6(self.pods().nth(i).expect("no such pod").1.v6)
    }

    /// Pod `i`'s name (what its identity server answers).
    pub fn pod_name(&self, i: usize) -> String {
        self.pods().nth(i).expect("no such pod").1.name.clone()
    }

    /// The Node name of pod `i`'s node.
    pub fn node_of(&self, i: usize) -> String {
        self.agents[self.pods().nth(i).expect("no such pod").0]
            .name
            .clone()
    }

    /// `n` flows of `proto` to `addr:port` through node 1 from fixed source ports from `first`.
    pub fn round(
        &self,
        proto: &str,
        addr: IpAddr,
        port: u16,
        first: u16,
        n: usize,
    ) -> rivora_lab::RoundReport {
        self.lab.route_vip_via(addr, 1).unwrap();
        let target = std::net::SocketAddr::new(addr, port);
        match proto {
            "TCP" => rivora_lab::tcp_round_from_ports(
                &self.lab.client,
                target,
                first,
                n,
                16,
                FLOW_TIMEOUT,
            ),
            _ => rivora_lab::udp_round_from_ports(
                &self.lab.client,
                target,
                first,
                n,
                16,
                FLOW_TIMEOUT,
            ),
        }
    }

    /// Waits until every node programs `addr:port` for `proto` with backends `want` (port 8080).
    pub async fn programmed(&self, addr: IpAddr, port: u16, proto: &str, want: &[IpAddr]) {
        let mut want: Vec<String> = want
            .iter()
            .map(|a| std::net::SocketAddr::new(*a, 8080).to_string())
            .collect();
        want.sort();
        let proto = proto.to_lowercase();
        for agent in &self.agents {
            wait_for(
                &format!("{} programs {addr}:{port}/{proto}", agent.name),
                WAIT,
                || async {
                    let vips = agent.vips().await?;
                    let v = vips
                        .iter()
                        .find(|v| {
                            v.address == addr.to_string() && v.port == port && v.protocol == proto
                        })
                        .ok_or_else(|| format!("no such VIP: {:?}", vip_names(&vips)))?;
                    let mut got: Vec<String> = v
                        .backends
                        .iter()
                        .map(|b| {
                            std::net::SocketAddr::new(b.address.parse().unwrap(), b.port)
                                .to_string()
                        })
                        .collect();
                    got.sort();
                    if got == want {
                        Ok(())
                    } else {
                        Err(format!("backends {got:?}, want {want:?}"))
                    }
                },
            )
            .await
        }
    }
}

/// The VIPs' names.
pub fn vip_names(vips: &[rivora_api::VipInfo]) -> Vec<String> {
    vips.iter().map(|v| v.name.clone()).collect()
}

/// The route kind of a listener protocol.
pub fn kind(proto: &str) -> &'static str {
    if proto == "TCP" {
        "TCPRoute"
    } else {
        "UDPRoute"
    }
}

/// A listener.
pub fn listener(name: &str, port: u16, proto: &str) -> Value {
    json!({"name": name, "port": port, "protocol": proto})
}

/// A route spec with one parentRef and these backendRefs.
pub fn route_spec(parent: Value, backends: Value) -> Value {
    json!({"parentRefs": [parent], "rules": [{"backendRefs": backends}]})
}

/// Every flow answered, all by `pod`.
pub fn all_to(what: &str, r: &rivora_lab::RoundReport, pod: &str) {
    assert!(r.all_ok(), "{what}: {r}");
    assert_eq!(
        r.per_backend.keys().cloned().collect::<Vec<_>>(),
        [pod.to_string()],
        "{what}: {r}"
    );
}
