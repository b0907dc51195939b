//! A real Kubernetes cluster of namespace nodes, for tests, the benchmark and the demo.
//!
//! The test bed's etcd and API server, plus kube-controller-manager and kube-scheduler
//! ([`control`]), plus nodes ([`node`]), each a network namespace with a mount namespace of its
//! own running containerd and a real kubelet. Pods are real containers (runc) from images
//! imported into each node's containerd (`scripts/image`; no registry), wired by Debian's CNI
//! plugins (ptp + host-local: a routed, Calico-like layout, pod range 10.244.N.0/24 and
//! fd00:244:N::/64 on node N).
//!
//! ```text
//!   test bed namespace: bridge kapi0, 10.250.0.1 (API server, controller-manager, scheduler)
//!        +----------------+------------------+------------------+
//!     client eth0      node-1 eth0        node-2 eth0   ...   (10.250.0.x: InternalIPs)
//!                        | ptp veths          | ptp veths
//!                      pods 10.244.1.x      pods 10.244.2.x
//! ```
//!
//! * Nodes route each other's pod ranges via their eth0 addresses; the client routes every
//!   node's pod range via that node (as a router peering with the CNI would) and a VIP via the
//!   node a test picks ([`Cluster::route_via`]), or learns it from Rivora's L2/BGP announcements.
//! * There is no kube-proxy: Rivora serves LoadBalancer traffic and nothing here needs
//!   ClusterIPs, except Pods that reach the API server through the `kubernetes` Service
//!   (10.96.0.1), which does not answer. Rivora's chart points its Pods at the API server's
//!   address instead (`kubernetes.apiServer`), as Cilium's does without kube-proxy.
//! * The kubelets authenticate as `system:node:NAME` (Node authorizer, NodeRestriction); the
//!   controller-manager mints ServiceAccount tokens and publishes kube-root-ca.crt.
//!
//! Cleanup: dropping the cluster stops the nodes (kubelet, containerd, then every process left in
//! the node's cgroup: shims and containers), unmounts their mount namespaces, removes their cgroups
//! and namespaces, then stops the test bed. A run that was SIGKILLed leaves cgroups and mount
//! namespaces behind; the next start reaps those whose PID is gone.

pub mod cgroup;
pub mod control;
pub mod images;
pub mod node;
pub mod spawner;
pub mod workload;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::Client;
use kube::api::{Api, ListParams};
use rivora_lab::Netns;

pub use crate::assets::NodeAssets;
use crate::{Attachment, Options, TestBed};
pub use node::{KubeNode, NODE_IF, PAUSE_IMAGE, pod_cidr_v4, pod_cidr_v6};

/// The backend image every test cluster's nodes have (`scripts/image echo`): the lab's identity
/// protocol on port 8080 (see images/echo/echo.c).
pub const ECHO_IMAGE: &str = "rivora.test/echo:1";
/// How long nodes may take to register and turn Ready on a loaded 2-CPU machine.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);

static CLUSTER_COUNTER: AtomicU32 = AtomicU32::new(0);

/// How to start a [`Cluster`].
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Number of nodes (each runs containerd and a kubelet).
    pub nodes: usize,
    /// OCI archives imported on every node besides the pause and echo images (e.g. Rivora's own
    /// image, from `scripts/image rivora`).
    pub images: Vec<PathBuf>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            nodes: 2,
            images: Vec::new(),
        }
    }
}

/// A running cluster. See the module documentation.
#[derive(Debug)]
pub struct Cluster {
    // Drop order is field order: nodes first (they need nothing else), the test bed last.
    nodes: Vec<KubeNode>,
    client: Netns,
    client_addresses: Attachment,
    assets: NodeAssets,
    /// The thread the node processes were forked from: it must outlive them.
    _spawner: spawner::Spawner,
    bed: TestBed,
}

impl Cluster {
    /// Starts the control plane and `options.nodes` nodes and waits until every Node is Ready
    /// and the controller-manager has created the `default` ServiceAccount (what every Pod
    /// needs to be admitted). Blocks while processes start; needs root and the test
    /// dependencies (`scripts/build-testdeps.sh`, `scripts/setup.sh`).
    pub async fn start(options: ClusterOptions) -> Result<Cluster> {
        if options.nodes == 0 || options.nodes > 200 {
            bail!("a test cluster has 1 to 200 nodes, not {}", options.nodes);
        }
        rivora_lab::require_root().context("the test cluster needs root")?;
        let assets = NodeAssets::locate()?;
        reap_stale();
        let bed = TestBed::start_with(&Options {
            cluster: true,
            ..Options::default()
        })?;
        let dir = bed.dir().join("nodes");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut images = images::test_images(&dir.join("images"))?;
        images.extend(options.images.iter().cloned());
        let spawner = spawner::Spawner::start()?;
        let client = Netns::new("kcl")?;
        let client_addresses = bed.attach(&client, NODE_IF)?;
        let prefix = format!(
            "{}{}-{}",
            cgroup::PREFIX,
            std::process::id(),
            CLUSTER_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let ctx = node::NodeContext {
            bed: &bed,
            assets: &assets,
            spawner: &spawner,
            dir: &dir,
            cgroup_prefix: &prefix,
            images: &images,
        };
        let mut nodes = Vec::new();
        for i in 1..=options.nodes {
            nodes.push(node::KubeNode::start(&ctx, i, &format!("node-{i}"))?);
        }
        let cluster = Cluster {
            nodes,
            client,
            client_addresses,
            assets,
            _spawner: spawner,
            bed,
        };
        cluster.route_pods()?;
        cluster.wait_ready(READY_TIMEOUT).await?;
        Ok(cluster)
    }

    /// The control plane (API server, its URLs, identities, CRD installation).
    pub fn bed(&self) -> &TestBed {
        &self.bed
    }

    /// The nodes, in order (`node-1` first).
    pub fn nodes(&self) -> &[KubeNode] {
        &self.nodes
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<&KubeNode> {
        self.nodes.iter().find(|n| n.name() == name)
    }

    /// The client's namespace: on the nodes' segment, outside the cluster.
    pub fn client(&self) -> &Netns {
        &self.client
    }

    /// The client's addresses.
    pub fn client_addresses(&self) -> &Attachment {
        &self.client_addresses
    }

    /// The binaries the nodes run.
    pub fn assets(&self) -> &NodeAssets {
        &self.assets
    }

    /// A client with the admin identity.
    pub async fn admin_client(&self) -> Result<Client> {
        self.bed.admin_client().await
    }

    /// Routes `dst` (a VIP) from the client via `node`, replacing an earlier route: which node
    /// receives a VIP's traffic when no announcement does it.
    pub fn route_via(&self, dst: IpAddr, node: &KubeNode) -> Result<()> {
        let (prefix, via) = match dst {
            IpAddr::V4(a) => (format!("{a}/32"), node.v4().to_string()),
            IpAddr::V6(a) => (format!("{a}/128"), node.v6().to_string()),
        };
        rivora_lab::link::route(&self.client, &prefix, &via)
    }

    /// Sends `signal` to container `container_id` on node `node` (see
    /// [`KubeNode::signal_container`]): a crash of one Pod's process, for restart tests.
    pub fn signal_container(&self, node: &str, container_id: &str, signal: &str) -> Result<()> {
        let n = self
            .node(node)
            .with_context(|| format!("no node {node} in this cluster"))?;
        n.signal_container(&self.assets, container_id, signal)
    }

    /// Imports the OCI archive `image` on every node (e.g. an upgrade's new image).
    pub fn import_image(&self, image: &Path) -> Result<()> {
        for n in &self.nodes {
            n.import_image(&self.assets, image)?;
        }
        Ok(())
    }

    /// Waits until every node's Node is Ready and the `default` ServiceAccount of namespace
    /// `default` exists; fails with what was last seen and the kubelets' log tails.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let client = self.admin_client().await?;
        let nodes: Api<Node> = Api::all(client.clone());
        let sas: Api<ServiceAccount> = Api::namespaced(client, "default");
        let deadline = Instant::now() + timeout;
        loop {
            let last;
            match nodes.list(&ListParams::default()).await {
                Ok(list) => {
                    let ready: Vec<String> = list
                        .items
                        .iter()
                        .filter(|n| node_ready(n))
                        .filter_map(|n| n.metadata.name.clone())
                        .collect();
                    let missing: Vec<&str> = self
                        .nodes
                        .iter()
                        .map(|n| n.name())
                        .filter(|n| !ready.iter().any(|r| r == n))
                        .collect();
                    let sa = sas.get_opt("default").await.ok().flatten().is_some();
                    if missing.is_empty() && sa {
                        return Ok(());
                    }
                    last = format!(
                        "not Ready: {missing:?}; default ServiceAccount: {}",
                        if sa { "present" } else { "missing" }
                    );
                }
                Err(e) => last = format!("listing Nodes: {e}"),
            }
            if Instant::now() > deadline {
                bail!(
                    "the test cluster was not ready within {timeout:?} ({last}).\n{}",
                    self.diagnostics(15)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The log tails of every node's kubelet, containerd and containers, for failure messages.
    pub fn diagnostics(&self, lines: usize) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            out.push_str(&format!(
                "--- {} kubelet.log:\n{}\n--- {} containerd.log:\n{}\n{}",
                n.name(),
                n.kubelet_log_tail(lines),
                n.name(),
                n.containerd_log_tail(lines),
                n.container_log_tails(lines)
            ));
        }
        out
    }

    /// Every node routes the others' pod ranges via their eth0; the client and the API server's
    /// namespace route each node's (Pods reach the API server at its own address: no kube-proxy).
    fn route_pods(&self) -> Result<()> {
        for n in &self.nodes {
            for other in self.nodes.iter().filter(|o| o.index() != n.index()) {
                for (cidr, v6) in [
                    (pod_cidr_v4(other.index()), false),
                    (pod_cidr_v6(other.index()), true),
                ] {
                    let via = node::node_addr(other, v6).to_string();
                    rivora_lab::link::route(n.netns(), &cidr, &via)?;
                }
            }
            for (cidr, v6) in [
                (pod_cidr_v4(n.index()), false),
                (pod_cidr_v6(n.index()), true),
            ] {
                let via = node::node_addr(n, v6).to_string();
                rivora_lab::link::route(&self.client, &cidr, &via)?;
                self.bed.route(&cidr, &via)?;
            }
        }
        Ok(())
    }
}

/// Whether the Node's Ready condition is True.
pub fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Reaps what SIGKILLed runs left: their nodes' cgroups (and the processes in them) and their
/// mount namespaces (bound under the test bed's directory, which cannot be removed while they
/// are mounted).
pub fn reap_stale() {
    let root = std::env::temp_dir().join("rivora-kube-testbed");
    if let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") {
        for line in mounts.lines() {
            let Some(target) = line.split(' ').nth(4) else {
                continue;
            };
            let Ok(rest) = Path::new(target).strip_prefix(&root) else {
                continue;
            };
            let owner = rest
                .components()
                .next()
                .and_then(|c| c.as_os_str().to_str())
                .and_then(|s| s.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = owner
                && pid != std::process::id()
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                node::unmount_ns_file(Path::new(target));
            }
        }
    }
    for name in cgroup::reap_stale() {
        eprintln!("rivora-kube-testbed: reaped the cgroup {name} of a run that is gone");
    }
}
