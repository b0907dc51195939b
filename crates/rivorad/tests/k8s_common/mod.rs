//! The node-agent test harness shared by the Kubernetes tests: the shipped CRDs and RBAC,
//! bounded waits, and [`NodeAgent`], the real `rivorad --kubernetes` in a node namespace
//! attached to the test bed, as the ServiceAccount bound to deploy/rbac/rivorad.yaml.

#![allow(dead_code)]

pub mod gateway;

use std::ffi::OsStr;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rivora_kube_testbed::{TestBed, unique_name};
use rivora_lab::{Netns, Rivorad};
use serde_json::json;

pub const FM: &str = "rivora-test";
pub const WAIT: Duration = Duration::from_secs(30);

/// Installs the CRDs exactly as shipped in deploy/chart/crds.
pub async fn install_shipped_crds(bed: &TestBed) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/chart/crds");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        bed.install_crd_yaml(&text).await.unwrap();
    }
}

/// Applies deploy/rbac/rivorad.yaml: its ClusterRoles bound (under a binding name of this
/// test's) to ServiceAccount `sa_ns/rivorad`, its namespaced Roles (Secrets, Leases) created in
/// `sa_ns` (the test's stand-in for rivora-system: pass `--namespace sa_ns`) and
/// bound there. Returns a token of that ServiceAccount once RBAC lets it list Services.
pub async fn rivorad_identity(bed: &TestBed, admin: &Client, sa_ns: &str) -> (String, Client) {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/rbac/rivorad.yaml"),
    )
    .unwrap();
    rivora_kube_testbed::ensure_namespace(admin, sa_ns)
        .await
        .unwrap();
    let pp = PatchParams::apply(FM).force();
    let (mut cluster_roles, mut roles) = (0, 0);
    let subjects = json!([{"kind": "ServiceAccount", "name": "rivorad", "namespace": sa_ns}]);
    for doc in serde_norway::Deserializer::from_str(&text) {
        let mut v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        match v["kind"].as_str() {
            Some("ClusterRole") => {
                let cr: ClusterRole = serde_json::from_value(v).unwrap();
                let name = cr.name_any();
                Api::<ClusterRole>::all(admin.clone())
                    .patch(&name, &pp, &Patch::Apply(&cr))
                    .await
                    .unwrap();
                let binding = format!("{name}-{sa_ns}");
                let b: ClusterRoleBinding = serde_json::from_value(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": binding},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                    "subjects": subjects,
                }))
                .unwrap();
                Api::<ClusterRoleBinding>::all(admin.clone())
                    .patch(&binding, &pp, &Patch::Apply(&b))
                    .await
                    .unwrap();
                cluster_roles += 1;
            }
            Some("Role") => {
                assert_eq!(
                    v["metadata"]["namespace"], "rivora-system",
                    "the shipped Roles live in Rivora's namespace"
                );
                v["metadata"]["namespace"] = json!(sa_ns);
                let role: Role = serde_json::from_value(v).unwrap();
                let name = role.name_any();
                Api::<Role>::namespaced(admin.clone(), sa_ns)
                    .patch(&name, &pp, &Patch::Apply(&role))
                    .await
                    .unwrap();
                let b: RoleBinding = serde_json::from_value(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": name, "namespace": sa_ns},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                    "subjects": subjects,
                }))
                .unwrap();
                Api::<RoleBinding>::namespaced(admin.clone(), sa_ns)
                    .patch(&name, &pp, &Patch::Apply(&b))
                    .await
                    .unwrap();
                roles += 1;
            }
            other => panic!("deploy/rbac/rivorad.yaml: unexpected kind {other:?}"),
        }
    }
    assert_eq!((cluster_roles, roles), (1, 1));
    let token = bed.service_account_token(sa_ns, "rivorad").await.unwrap();
    let client = bed.service_account_client(sa_ns, "rivorad").await.unwrap();
    wait_for("the ServiceAccount can list Services", WAIT, || async {
        Api::<Service>::all(client.clone())
            .list(&ListParams::default().limit(1))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
    (token, client)
}

/// Polls `f` every 100 ms until it is Ok or `timeout` passes; then panics with what it last
/// said.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => {
                panic!("{what}: not within {timeout:?}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// A node of a lab that [`NodeAgent::in_lab`] runs rivorad on.
pub struct LabNode<'a> {
    /// Its Node name.
    pub name: &'a str,
    /// Its namespace.
    pub ns: &'a Netns,
    /// The interface rivorad attaches to.
    pub uplink: &'a str,
    /// Its InternalIPs.
    pub addrs: &'a [IpAddr],
}

/// One node agent: rivorad --kubernetes in a node namespace attached to the test bed's bridge,
/// with its uplink, pin directory, socket and kubeconfig, and the Node object it stands for.
pub struct NodeAgent {
    /// The Node's name (`--node-name`).
    pub name: String,
    /// The `--load-balancer-class` it programs.
    pub class: String,
    /// The namespaces it made for itself ([`NodeAgent::new`]): the node and its uplink's
    /// peer. None when it runs in a namespace of a lab ([`NodeAgent::in_lab`]).
    own: Option<(Netns, Netns)>,
    /// The interface rivorad attaches to.
    uplink: String,
    work: PathBuf,
    pin_dir: PathBuf,
    /// rivorad's API socket.
    pub socket: PathBuf,
    kubeconfig: PathBuf,
    rivorad: Option<Rivorad>,
    /// `--backend-retire-secs` (0 by default: removed backends go at once).
    pub retire_secs: String,
}

impl NodeAgent {
    /// A node of its own: a namespace on the test bed's bridge and an uplink veth `up0` (to a
    /// peer namespace) for rivorad to attach to, and its Node object.
    pub async fn new(bed: &TestBed, admin: &Client, tag: &str, token: &str) -> NodeAgent {
        let name = unique_name(tag);
        let node_ns = Netns::new("k8sn").unwrap();
        let peer_ns = Netns::new("k8sp").unwrap();
        rivora_lab::link::veth(&node_ns, "up0", &peer_ns, "up1").unwrap();
        rivora_lab::link::up(&node_ns, "up0").unwrap();
        rivora_lab::link::up(&peer_ns, "up1").unwrap();
        let mut agent = Self::prepare(bed, admin, name, &node_ns, "up0", &[], token).await;
        agent.own = Some((node_ns, peer_ns));
        agent
    }

    /// A node of a lab (rivorad in `node.ns` on `node.uplink`), registered as Node
    /// `node.name` with `node.addrs` as its InternalIPs, programming Services of `class`.
    pub async fn in_lab(
        bed: &TestBed,
        admin: &Client,
        node: LabNode<'_>,
        class: &str,
        token: &str,
    ) -> NodeAgent {
        let mut agent = Self::prepare(
            bed,
            admin,
            node.name.to_string(),
            node.ns,
            node.uplink,
            node.addrs,
            token,
        )
        .await;
        agent.class = class.to_string();
        agent
    }

    async fn prepare(
        bed: &TestBed,
        admin: &Client,
        name: String,
        ns: &Netns,
        uplink: &str,
        addrs: &[IpAddr],
        token: &str,
    ) -> NodeAgent {
        bed.attach(ns, "kapi").unwrap();
        let work = std::env::temp_dir().join(format!("rivora-e2e-{name}"));
        std::fs::create_dir_all(&work).unwrap();
        let kubeconfig = work.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            bed.token_kubeconfig(&bed.in_cluster_url(), token),
        )
        .unwrap();
        // The Node, as a kubelet would register it.
        let addresses: Vec<serde_json::Value> = addrs
            .iter()
            .map(|a| json!({"type": "InternalIP", "address": a.to_string()}))
            .collect();
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        }))
        .unwrap();
        let nodes = Api::<Node>::all(admin.clone());
        nodes.create(&PostParams::default(), &node).await.unwrap();
        if !addresses.is_empty() {
            nodes
                // A merge patch, as the kubelet writes them: server-side apply refuses two
                // InternalIPs (the schema keys addresses by type, though a dual-stack node
                // has one of each family).
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"addresses": addresses}})),
                )
                .await
                .unwrap();
        }
        rivora_lab::ensure_bpffs().unwrap();
        NodeAgent {
            class: format!("rivora.dev/{name}"),
            pin_dir: PathBuf::from(format!("/sys/fs/bpf/rivora-e2e-{name}")),
            socket: work.join("api.sock"),
            name,
            own: None,
            uplink: uplink.to_string(),
            work,
            kubeconfig,
            rivorad: None,
            retire_secs: "0".into(),
        }
    }

    /// Starts rivorad in the node's own namespace ([`NodeAgent::new`]).
    pub fn start(&mut self) {
        let ns = &self.own.as_ref().expect("a node of its own").0;
        let d = self.spawn(ns, &[]);
        self.rivorad = Some(d);
    }

    /// Starts rivorad in the node's own namespace ([`NodeAgent::new`]) with `extra` arguments.
    pub fn start_with(&mut self, extra: &[&str]) {
        let ns = &self.own.as_ref().expect("a node of its own").0;
        let d = self.spawn(ns, extra);
        self.rivorad = Some(d);
    }

    /// Starts rivorad in `ns` (the lab's node namespace), with `extra` arguments.
    pub fn start_in(&mut self, ns: &Netns, extra: &[&str]) {
        let d = self.spawn(ns, extra);
        self.rivorad = Some(d);
    }

    fn spawn(&self, ns: &Netns, extra: &[&str]) -> Rivorad {
        let mut args: Vec<&OsStr> = vec![
            "--kubernetes".as_ref(),
            "--node-name".as_ref(),
            self.name.as_ref(),
            "--kubeconfig".as_ref(),
            self.kubeconfig.as_os_str(),
            "--load-balancer-class".as_ref(),
            self.class.as_ref(),
            "--backend-retire-secs".as_ref(),
            self.retire_secs.as_ref(),
            // The node's own loopback: no other test shares it.
            "--metrics-listen".as_ref(),
            "127.0.0.1:9469".as_ref(),
        ];
        args.extend(extra.iter().map(|a| OsStr::new(*a)));
        let mut d = Rivorad::start_with(
            ns,
            &self.uplink,
            Path::new(env!("CARGO_BIN_EXE_rivorad")),
            &self.pin_dir,
            &self.socket,
            &self.work,
            &args,
        )
        .unwrap();
        d.wait_ready(&self.socket, WAIT)
            .unwrap_or_else(|e| panic!("rivorad --kubernetes did not start: {e}"));
        d
    }

    /// The node's own namespace ([`NodeAgent::new`]).
    pub fn node_ns(&self) -> &Netns {
        &self.own.as_ref().expect("a node of its own").0
    }

    /// SIGKILL: the pins stay, as after a crash.
    pub fn kill(&mut self) {
        let mut d = self.rivorad.take().unwrap();
        d.signal_and_wait(libc::SIGKILL).unwrap();
    }

    /// SIGTERM, and waits for rivorad to exit (a graceful stop); returns its log.
    pub fn stop(&mut self) -> String {
        let mut d = self.rivorad.take().unwrap();
        d.signal_and_wait(libc::SIGTERM).unwrap();
        d.log()
    }

    pub fn log(&self) -> String {
        self.rivorad.as_ref().map(|d| d.log()).unwrap_or_default()
    }

    pub fn api(&self) -> rivora_api::Client {
        rivora_api::Client::new(&self.socket)
    }

    pub async fn vips(&self) -> Result<Vec<rivora_api::VipInfo>, String> {
        self.api().vips().await.map_err(|e| e.to_string())
    }

    pub async fn kubernetes(&self) -> Result<rivora_api::KubernetesStatus, String> {
        let s = self.api().status().await.map_err(|e| e.to_string())?;
        s.kubernetes
            .ok_or_else(|| "status has no kubernetes section".to_string())
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        // A failed test's agent log goes with the work directory: show its end first.
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(80)..];
            eprintln!(
                "--- rivorad of node {} (last {} lines of its log) ---\n{}",
                self.name,
                tail.len(),
                tail.join("\n")
            );
        }
        if let Some(mut d) = self.rivorad.take() {
            let _ = d.stop();
        }
        let _ = rivora_dataplane::remove_pins(&self.pin_dir);
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// GET `path` from `addr`, from inside `ns`: (status, the X-Load-Balancing-Endpoint-Weight
/// header, body).
pub fn http_get_in(
    ns: &Netns,
    addr: SocketAddr,
    path: &str,
) -> Result<(u16, String, String), String> {
    let r = rivora_lab::http::http_get(ns, addr, path)?;
    let weight = r.header("X-Load-Balancing-Endpoint-Weight").to_string();
    Ok((r.status, weight, r.body))
}

/// One Kubernetes end-to-end test's own corner of the shared API server: the admin client,
/// the rivorad ServiceAccount's token, and a namespace and load-balancer class no other test
/// uses.
pub struct K8sTest {
    /// The API server of this test binary.
    pub bed: &'static TestBed,
    /// Cluster admin.
    pub admin: Client,
    /// A token of the rivorad ServiceAccount (deploy/rbac/rivorad.yaml).
    pub token: String,
    /// A client with that identity.
    pub rivorad: Client,
    /// The test's namespace (its Services and slices).
    pub ns: String,
    /// The rivorad ServiceAccount's namespace, where its Role (Secrets, Leases) is bound: the
    /// test's rivora-system (`--namespace`).
    pub sa_ns: String,
    /// The `--load-balancer-class` its Services and node agents use.
    pub class: String,
}

/// One endpoint of an EndpointSlice: its address, its node, whether it is terminating
/// (ready=false, serving=true, terminating=true) rather than ready.
pub struct Ep<'a> {
    /// The pod's address.
    pub addr: IpAddr,
    /// Its node's name.
    pub node: &'a str,
    /// Terminating (else ready).
    pub terminating: bool,
}

impl K8sTest {
    /// The CRDs and RBAC installed, a namespace `tag-...` and its class.
    pub async fn new(tag: &str) -> K8sTest {
        Self::new_on(TestBed::shared(), tag).await
    }

    /// [`K8sTest::new`] on `bed` (one started with options of its own, such as an audit log).
    pub async fn new_on(bed: &'static TestBed, tag: &str) -> K8sTest {
        let admin = bed.admin_client().await.unwrap();
        install_shipped_crds(bed).await;
        let sa_ns = unique_name("rvd");
        let (token, rivorad) = rivorad_identity(bed, &admin, &sa_ns).await;
        let ns = unique_name(tag);
        rivora_kube_testbed::ensure_namespace(&admin, &ns)
            .await
            .unwrap();
        K8sTest {
            bed,
            admin,
            token,
            rivorad,
            class: format!("rivora.dev/{ns}"),
            ns,
            sa_ns,
        }
    }

    /// The name of the Node for node `n` (1-based) of the test's lab.
    pub fn node_name(&self, n: usize) -> String {
        format!("{}-node-{n}", self.ns)
    }

    /// rivorad for node `n` (1-based) of `lab`, on its uplink, registered as
    /// [`K8sTest::node_name`] with the node's addresses (not started).
    pub async fn agent(&self, lab: &rivora_lab::cluster::Cluster, n: usize) -> NodeAgent {
        let node = lab.node(n).unwrap();
        let name = self.node_name(n);
        let addrs = [IpAddr::V4(node.v4), IpAddr::V6(node.v6)];
        let lab_node = LabNode {
            name: &name,
            ns: &node.ns,
            uplink: &lab.uplink,
            addrs: &addrs,
        };
        NodeAgent::in_lab(self.bed, &self.admin, lab_node, &self.class, &self.token).await
    }

    /// LoadBalancer Service `name` of the test's class with `ports` and the `extra` spec fields,
    /// and the status rivora-controller would give it (`vip`). Returns it as created (with
    /// what the API server allocated, such as a healthCheckNodePort).
    pub async fn service(
        &self,
        name: &str,
        vip: &str,
        ports: serde_json::Value,
        extra: serde_json::Value,
    ) -> Service {
        put_lb_service(&self.admin, &self.ns, &self.class, name, vip, ports, extra).await
    }

    /// The IPv4 EndpointSlice `<service>-1` of `service`: `endpoints` with `ports`, as the
    /// controller-manager writes it (replacing the last one).
    pub async fn slice(&self, service: &str, endpoints: &[Ep<'_>], ports: serde_json::Value) {
        self.slice_named(&format!("{service}-1"), "IPv4", service, endpoints, ports)
            .await
    }

    /// The IPv6 EndpointSlice `<service>-v6` of `service` (a dual-stack Service has one slice
    /// per family), as [`K8sTest::slice`] writes the IPv4 one.
    pub async fn slice6(&self, service: &str, endpoints: &[Ep<'_>], ports: serde_json::Value) {
        self.slice_named(&format!("{service}-v6"), "IPv6", service, endpoints, ports)
            .await
    }

    async fn slice_named(
        &self,
        name: &str,
        address_type: &str,
        service: &str,
        endpoints: &[Ep<'_>],
        ports: serde_json::Value,
    ) {
        let eps: Vec<serde_json::Value> = endpoints
            .iter()
            .map(|e| {
                json!({
                    "addresses": [e.addr.to_string()],
                    "nodeName": e.node,
                    "conditions": if e.terminating {
                        json!({"ready": false, "serving": true, "terminating": true})
                    } else {
                        json!({"ready": true, "serving": true, "terminating": false})
                    },
                })
            })
            .collect();
        let s: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
            "addressType": address_type, "endpoints": eps, "ports": ports,
        }))
        .unwrap();
        Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(
            self.admin.clone(),
            &self.ns,
        )
        .patch(name, &PatchParams::apply(FM).force(), &Patch::Apply(&s))
        .await
        .unwrap();
    }
}

/// The ports of a Service with one TCP port `http` 80 -> 8080.
pub fn http_port() -> serde_json::Value {
    json!([{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}])
}

/// The matching slice port (`http`, 8080/TCP).
pub fn http_slice_port() -> serde_json::Value {
    json!([{"name": "http", "port": 8080, "protocol": "TCP"}])
}

/// Ready endpoints at `addrs` on `node`.
pub fn ready<'a>(addrs: &[IpAddr], node: &'a str) -> Vec<Ep<'a>> {
    addrs
        .iter()
        .map(|a| Ep {
            addr: *a,
            node,
            terminating: false,
        })
        .collect()
}

/// An IdentityServer on port 8080 of every pod of `node` (IPv4), named after the pod.
pub fn identity_servers(node: &rivora_lab::cluster::Node) -> Vec<rivora_lab::IdentityServer> {
    node.pods
        .iter()
        .map(|p| {
            rivora_lab::IdentityServer::start(
                &p.ns,
                &p.name,
                &[
                    SocketAddr::new(p.v4.into(), 8080),
                    SocketAddr::new(p.v6.into(), 8080),
                ],
            )
            .unwrap()
        })
        .collect()
}

/// The IPv4 addresses of `node`'s pods.
pub fn pod_addrs(node: &rivora_lab::cluster::Node) -> Vec<IpAddr> {
    node.pods.iter().map(|p| IpAddr::V4(p.v4)).collect()
}

/// LoadBalancer Service `name` in `ns` of `class` with `ports` and the `extra` spec fields, and
/// the status rivora-controller would give it (`vip`, or `"A,B"` for a dual-stack Service's
/// two addresses); returns it as created.
pub async fn put_lb_service(
    admin: &Client,
    ns: &str,
    class: &str,
    name: &str,
    vip: &str,
    ports: serde_json::Value,
    extra: serde_json::Value,
) -> Service {
    let api: Api<Service> = Api::namespaced(admin.clone(), ns);
    let mut spec = json!({
        "type": "LoadBalancer", "loadBalancerClass": class,
        "allocateLoadBalancerNodePorts": false, "ports": ports,
    });
    for (k, v) in extra.as_object().expect("extra spec fields as an object") {
        spec[k] = v.clone();
    }
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    let created = api
        .patch(name, &PatchParams::apply(FM).force(), &Patch::Apply(&svc))
        .await
        .unwrap();
    api.patch_status(
        name,
        &PatchParams::apply("rivora-controller").force(),
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "Service",
            "status": {"loadBalancer": {"ingress": vip
                .split(',')
                .map(|ip| json!({"ip": ip, "ipMode": "VIP"}))
                .collect::<Vec<_>>()}},
        })),
    )
    .await
    .unwrap();
    created
}

/// Drops the cluster lab and checks that none of its namespaces is left.
pub fn assert_lab_removed(lab: rivora_lab::cluster::Cluster) {
    let names = lab.netns_names();
    drop(lab);
    let left = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| names.contains(n))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "namespaces left: {left:?}");
}

/// Detaches BPF link `id` (BPF_LINK_DETACH), as `bpftool link detach` does: the program runs
/// nowhere any more, though rivorad still holds the link.
pub fn detach_link(id: u32) {
    #[repr(C)]
    struct GetFd {
        link_id: u32,
        next_id: u32,
        open_flags: u32,
    }
    #[repr(C)]
    struct Detach {
        link_fd: u32,
    }
    const BPF_LINK_GET_FD_BY_ID: libc::c_long = 30;
    const BPF_LINK_DETACH: libc::c_long = 34;
    let get = GetFd {
        link_id: id,
        next_id: 0,
        open_flags: 0,
    };
    // SAFETY: a valid bpf_attr prefix of the size passed, live for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_GET_FD_BY_ID,
            &get as *const GetFd,
            std::mem::size_of::<GetFd>() as libc::c_uint,
        )
    };
    assert!(fd >= 0, "link {id}: {}", std::io::Error::last_os_error());
    let attr = Detach { link_fd: fd as u32 };
    // SAFETY: as above.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_DETACH,
            &attr as *const Detach,
            std::mem::size_of::<Detach>() as libc::c_uint,
        )
    };
    let err = std::io::Error::last_os_error();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd as i32) };
    assert_eq!(rc, 0, "detaching link {id}: {err}");
}

/// The id of the XDP link of the rivorad behind `agent`.
pub async fn xdp_link_id(agent: &NodeAgent) -> u32 {
    agent
        .api()
        .status()
        .await
        .unwrap()
        .programs
        .iter()
        .find(|p| p.name == "xdp_ingress")
        .and_then(|p| p.link_id)
        .expect("the XDP link's id")
}
