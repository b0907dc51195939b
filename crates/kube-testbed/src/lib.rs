//! A real Kubernetes API server for Rivora's tests: etcd + kube-apiserver in a network namespace
//! of their own, started the way controller-runtime's envtest starts them.
//!
//! Why a real one: mocks prove nothing about watch semantics, server-side apply, status
//! subresources, CRD schema and CEL validation, RBAC or Leases, which is exactly what Rivora's
//! Kubernetes half depends on. There is no kubelet and no controller-manager: tests create
//! EndpointSlices and Nodes themselves, nothing is garbage-collected, and a deleted namespace
//! stays `Terminating` forever, so tests isolate themselves by namespace and object names
//! ([`unique_name`]) instead of cleaning up.
//!
//! Layout of one test bed:
//! * a network namespace `rvkapi-<pid>-<n>` (made with [`rivora_lab::Netns`]) holding a bridge
//!   `kapi0` with [`SERVER_V4`]/[`SERVER_V6`]; etcd listens on its loopback, kube-apiserver on
//!   port [`SERVER_PORT`] of every address in it;
//! * node namespaces a test creates join that bridge with [`TestBed::attach`] and reach the API
//!   server at [`TestBed::in_cluster_url`] (for `rivorad --kubernetes` later);
//! * the test process itself reaches it through a loopback relay ([`TestBed::url`]); see
//!   [`forward`] for why not a veth to the host;
//! * a directory under `$TMPDIR/rivora-kube-testbed/<pid>-<n>` with the throw-away PKI, etcd's
//!   data and both logs.
//!
//! Cleanup: an owned [`TestBed`] kills both processes by PID (SIGKILL through their `Child`
//! handles), deletes the namespace and removes the directory on drop, which also runs while a
//! panicking test unwinds. The per-binary [`TestBed::shared`] instance lives in a static, which
//! Rust never drops, so it registers an `atexit` handler that does the same when the test
//! binary exits. If the binary is killed outright (SIGKILL, abort), the processes still die:
//! they were started with `PR_SET_PDEATHSIG=SIGKILL` from a thread that lives as long as the
//! test bed; the namespace and directory left behind are reaped by the next start (their PID is
//! dead).
//!
//! Needs root (namespaces) and the binaries built by `scripts/build-testdeps.sh`; without either,
//! starting fails with a message that says so.

#![warn(missing_docs)]

pub mod assets;
pub mod audit;
pub mod cluster;
pub mod forward;
pub mod pki;
pub mod rbac;

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use rivora_lab::Netns;

pub use assets::{Assets, ConformanceAssets, GatewayChannel};
pub use rbac::bind_rbac;

/// The API server's IPv4 address on the test bed's bridge.
pub const SERVER_V4: Ipv4Addr = Ipv4Addr::new(10, 250, 0, 1);
/// The API server's IPv6 address on the test bed's bridge.
pub const SERVER_V6: Ipv6Addr = Ipv6Addr::new(0xfd72, 0x7669, 0x6b61, 0, 0, 0, 0, 1);
/// Prefix lengths of the bridge subnets ([`SERVER_V4`]/16, [`SERVER_V6`]/64).
pub const BRIDGE_PREFIX_V4: u8 = 16;
/// See [`BRIDGE_PREFIX_V4`].
pub const BRIDGE_PREFIX_V6: u8 = 64;
/// kube-apiserver's secure port inside the namespace (the namespace is ours, so it is fixed).
pub const SERVER_PORT: u16 = 6443;
/// ClusterIP ranges the API server allocates from (dual-stack, so dual-stack Services work).
pub const SERVICE_CIDRS: &str = "10.96.0.0/16,fd00:10:96::/108";
/// Field manager the test bed uses for what it applies (CRDs, ServiceAccounts).
pub const FIELD_MANAGER: &str = "rivora-kube-testbed";

const BRIDGE: &str = "kapi0";
const ETCD_CLIENT: &str = "http://127.0.0.1:2379";
const ETCD_PEER: &str = "http://127.0.0.1:2380";
/// How long a cold API server may take to become ready on a loaded 2-CPU machine.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a CRD may take to show up in discovery.
const CRD_TIMEOUT: Duration = Duration::from_secs(30);
/// Set to keep the directory (logs, etcd data) after the test bed stops.
const KEEP_ENV: &str = "RIVORA_TESTBED_KEEP";

/// How to start a [`TestBed`] beyond the defaults.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Write an audit log of every request (user, verb, resource) to [`TestBed::audit_log`]:
    /// the only place the API server says *who* made a request, which is what a benchmark
    /// counting a component's requests needs. Off by default: tests need no log.
    pub audit_log: bool,
    /// Run as the control plane of a real cluster ([`cluster::Cluster`]): kube-controller-manager
    /// and kube-scheduler beside the API server, which then authorizes kubelets (Node
    /// authorizer, NodeRestriction) and admits Pods with their ServiceAccount tokens. Off by
    /// default: the bare API server is what tests of the API edge want.
    pub cluster: bool,
}

static INSTANCE_COUNTER: AtomicU32 = AtomicU32::new(0);
static NAME_COUNTER: AtomicU32 = AtomicU32::new(0);
static SHARED: OnceLock<TestBed> = OnceLock::new();

/// One running etcd + kube-apiserver. See the crate documentation for its layout and cleanup.
#[derive(Debug)]
pub struct TestBed {
    assets: Assets,
    dir: PathBuf,
    netns_name: String,
    pki: pki::Pki,
    relay_addr: SocketAddr,
    /// Everything that needs stopping; `None` once stopped.
    running: Mutex<Option<Running>>,
    /// Next host number handed out by [`TestBed::attach`].
    next_host: AtomicU32,
    /// PIDs of etcd and kube-apiserver.
    pids: Vec<u32>,
}

#[derive(Debug)]
struct Running {
    netns: Arc<Netns>,
    relay: forward::Relay,
    keeper: JoinHandle<()>,
    stop: mpsc::Sender<()>,
}

/// What [`TestBed::attach`] gave a node namespace.
#[derive(Debug, Clone)]
pub struct Attachment {
    /// The node's IPv4 address on the test bed bridge.
    pub node_v4: Ipv4Addr,
    /// The node's IPv6 address on the test bed bridge.
    pub node_v6: Ipv6Addr,
    /// The interface name in the node namespace.
    pub ifname: String,
}

impl TestBed {
    /// Starts a fresh etcd + kube-apiserver and waits until `/readyz` answers `ok`.
    ///
    /// Blocking (it is safe to call from inside a tokio runtime: the waiting happens on a
    /// thread of its own). Fails with the log tail of whichever process did not come up.
    pub fn start() -> Result<TestBed> {
        Self::start_with(&Options::default())
    }

    /// [`TestBed::start`] with `options` (an audit log for benchmarks that count requests).
    pub fn start_with(options: &Options) -> Result<TestBed> {
        rivora_lab::require_root().context("the Kubernetes test bed needs root")?;
        let assets = Assets::locate()?;
        reap_stale_dirs();
        if let Err(e) = Netns::reap_stale() {
            eprintln!("rivora-kube-testbed: reaping stale namespaces: {e:#}");
        }
        let dir = std::env::temp_dir()
            .join("rivora-kube-testbed")
            .join(format!(
                "{}-{}",
                std::process::id(),
                INSTANCE_COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir.join("pki"))
            .with_context(|| format!("creating {}", dir.display()))?;
        let bed = Self::start_in(assets, dir.clone(), options);
        if bed.is_err() && std::env::var_os(KEEP_ENV).is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        bed
    }

    fn start_in(assets: Assets, dir: PathBuf, options: &Options) -> Result<TestBed> {
        let netns = Arc::new(Netns::new("kapi")?);
        setup_bridge(&netns)?;
        let pki = pki::Pki::generate(&[
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V4(SERVER_V4),
            IpAddr::V6(SERVER_V6),
        ])?;
        let p = dir.join("pki");
        for (name, text) in [
            ("ca.crt", &pki.ca_cert_pem),
            ("apiserver.crt", &pki.serving_cert_pem),
            ("apiserver.key", &pki.serving_key_pem),
            ("sa.key", &pki.sa_key_pem),
            ("sa.pub", &pki.sa_pub_pem),
        ] {
            std::fs::write(p.join(name), text).with_context(|| format!("writing {name}"))?;
        }

        let (ready_tx, ready_rx) = mpsc::channel::<Result<Vec<u32>>>();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let mut commands = vec![
            etcd_command(&assets, &dir),
            apiserver_command(&assets, &dir, options, &pki)?,
        ];
        if options.cluster {
            commands.extend(cluster::control::commands(&dir, &pki)?);
        }
        let keeper_ns = Arc::clone(&netns);
        let keeper = std::thread::Builder::new()
            .name("kube-testbed-keeper".into())
            .spawn(move || keeper(keeper_ns, commands, ready_tx, stop_rx))
            .context("spawning the test bed keeper thread")?;
        let spawned = ready_rx
            .recv()
            .unwrap_or_else(|_| Err(anyhow!("the keeper thread died")));
        let relay =
            forward::Relay::start(&netns, SocketAddr::from((Ipv4Addr::LOCALHOST, SERVER_PORT)));
        let bed = TestBed {
            assets,
            dir,
            netns_name: netns.name().to_string(),
            pki,
            relay_addr: relay
                .as_ref()
                .map(|r| r.local_addr())
                .unwrap_or_else(|_| SocketAddr::from((Ipv4Addr::LOCALHOST, 0))),
            running: Mutex::new(None),
            next_host: AtomicU32::new(2),
            pids: spawned.as_ref().map(Clone::clone).unwrap_or_default(),
        };
        match relay {
            Ok(relay) => {
                *bed.running.lock().unwrap() = Some(Running {
                    netns,
                    relay,
                    keeper,
                    stop: stop_tx,
                });
            }
            Err(e) => {
                drop(stop_tx);
                let _ = keeper.join();
                return Err(e);
            }
        }
        spawned?;
        bed.wait_ready()?;
        Ok(bed)
    }

    /// The audit log's path (written only when started with [`Options::audit_log`]).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join(audit::LOG_FILE)
    }

    /// The instance shared by every test of this test binary, started on first use.
    ///
    /// Why shared: a cold kube-apiserver takes seconds to start and hundreds of MB; one per test
    /// binary is enough when tests isolate themselves by namespace and names. Cleanup happens in
    /// an `atexit` handler when the binary exits (see the crate documentation). Panics with the
    /// start error (e.g. "run scripts/build-testdeps.sh") so every test using it fails loudly.
    pub fn shared() -> &'static TestBed {
        SHARED.get_or_init(|| match TestBed::start() {
            Ok(bed) => {
                // SAFETY: registering a plain `extern "C" fn()` with atexit(3) has no
                // preconditions; the handler only touches the static, which outlives it.
                unsafe {
                    libc::atexit(stop_shared_at_exit);
                }
                bed
            }
            Err(e) => panic!("could not start the Kubernetes test bed: {e:#}"),
        })
    }

    /// `https://127.0.0.1:<port>`: the URL for clients in the test process (through the relay).
    pub fn url(&self) -> String {
        format!("https://{}", self.relay_addr)
    }

    /// `https://10.250.0.1:6443`: the URL for processes in namespaces joined with [`attach`].
    ///
    /// [`attach`]: TestBed::attach
    pub fn in_cluster_url(&self) -> String {
        format!("https://{SERVER_V4}:{SERVER_PORT}")
    }

    /// The test bed's network namespace (for `ip -n`, `nsenter --net=/run/netns/NAME`).
    pub fn netns_name(&self) -> &str {
        &self.netns_name
    }

    /// The directory with the PKI, etcd data and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// PIDs of etcd and kube-apiserver (for tests of the cleanup itself).
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// The binaries and versions in use.
    pub fn assets(&self) -> &Assets {
        &self.assets
    }

    /// The CA certificate (PEM) that signed the serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_cert_pem
    }

    /// The test bed's key material (a cluster signs its kubelets' certificates with it).
    pub fn pki(&self) -> &pki::Pki {
        &self.pki
    }

    /// The last `lines` lines of the kube-apiserver log, for failure messages.
    pub fn apiserver_log_tail(&self, lines: usize) -> String {
        log_tail(&self.dir.join("kube-apiserver.log"), lines)
    }

    /// A kubeconfig (YAML) for the admin identity (`system:masters`), pointing at `server`
    /// ([`TestBed::url`] or [`TestBed::in_cluster_url`]).
    pub fn admin_kubeconfig(&self, server: &str) -> String {
        kubeconfig_yaml(
            server,
            &self.pki.ca_cert_pem,
            serde_json::json!({
                "client-certificate-data": b64(self.pki.admin_cert_pem.as_bytes()),
                "client-key-data": b64(self.pki.admin_key_pem.as_bytes()),
            }),
        )
    }

    /// A kubeconfig (YAML) that authenticates with `token` (e.g. a ServiceAccount token).
    pub fn token_kubeconfig(&self, server: &str, token: &str) -> String {
        kubeconfig_yaml(
            server,
            &self.pki.ca_cert_pem,
            serde_json::json!({ "token": token }),
        )
    }

    /// A client with the admin identity. Create clients inside the runtime that uses them (a
    /// client's pooled connections belong to the runtime they were opened in).
    pub async fn admin_client(&self) -> Result<Client> {
        client_from_kubeconfig(&self.admin_kubeconfig(&self.url())).await
    }

    /// Makes sure ServiceAccount `namespace/name` exists, asks the TokenRequest API for a token
    /// of it (1 h), and returns a client that authenticates as it.
    ///
    /// Why TokenRequest: it is how a pod's projected token is minted, so RBAC sees exactly the
    /// identity `system:serviceaccount:<ns>:<name>` the deployed component will have.
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> Result<Client> {
        let token = self.service_account_token(namespace, name).await?;
        client_from_kubeconfig(&self.token_kubeconfig(&self.url(), &token)).await
    }

    /// The token [`TestBed::service_account_client`] uses, for kubeconfigs of other processes.
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> Result<String> {
        let admin = self.admin_client().await?;
        ensure_namespace(&admin, namespace).await?;
        let sas: Api<ServiceAccount> = Api::namespaced(admin, namespace);
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        sas.patch(name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&sa))
            .await
            .with_context(|| format!("applying ServiceAccount {namespace}/{name}"))?;
        let req = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let resp = sas
            .create_token_request(name, &PostParams::default(), &req)
            .await
            .with_context(|| format!("TokenRequest for ServiceAccount {namespace}/{name}"))?;
        resp.status
            .map(|s| s.token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| anyhow!("TokenRequest for {namespace}/{name} returned no token"))
    }

    /// Applies `crds` (server-side, as [`FIELD_MANAGER`]) and waits until each is `Established`
    /// and every served version of it is listed by discovery, as envtest does.
    ///
    /// Why both: `Established=False` (e.g. `NamesAccepted=False`, a name another CRD holds) is
    /// the reason a CRD never gets served, so a failure quotes its conditions; and a client that
    /// discovers resources (kube's `Discovery`, `kubectl`) only sees a CRD once the aggregated
    /// discovery document lists it, which happens after `Established`.
    pub async fn install_crds(&self, crds: &[CustomResourceDefinition]) -> Result<()> {
        let client = self.admin_client().await?;
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in crds {
            let name = crd
                .metadata
                .name
                .as_deref()
                .context("a CRD without a name")?;
            let mut crd = crd.clone();
            crd.metadata.resource_version = None;
            crd.metadata.managed_fields = None;
            crd.status = None;
            api.patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&crd),
            )
            .await
            .with_context(|| format!("applying CRD {name}"))?;
        }
        let deadline = Instant::now() + CRD_TIMEOUT;
        for crd in crds {
            let name = crd.metadata.name.as_deref().unwrap_or_default();
            loop {
                let last = match api.get(name).await {
                    Ok(got) => {
                        let conditions = got.status.and_then(|s| s.conditions).unwrap_or_default();
                        if conditions
                            .iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                        {
                            break;
                        }
                        format!(
                            "conditions: {:?}",
                            conditions
                                .iter()
                                .map(|c| format!(
                                    "{}={} ({}: {})",
                                    c.type_,
                                    c.status,
                                    c.reason.as_deref().unwrap_or(""),
                                    c.message.as_deref().unwrap_or("")
                                ))
                                .collect::<Vec<_>>()
                        )
                    }
                    Err(e) => e.to_string(),
                };
                if Instant::now() > deadline {
                    bail!("CRD {name} not Established after {CRD_TIMEOUT:?}; last seen {last}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        for crd in crds {
            let group = &crd.spec.group;
            let plural = &crd.spec.names.plural;
            for v in crd.spec.versions.iter().filter(|v| v.served) {
                let gv = format!("{group}/{}", v.name);
                loop {
                    let last = match client.list_api_group_resources(&gv).await {
                        Ok(list) if list.resources.iter().any(|r| &r.name == plural) => break,
                        Ok(list) => format!(
                            "served: {:?}",
                            list.resources.iter().map(|r| &r.name).collect::<Vec<_>>()
                        ),
                        Err(e) => e.to_string(),
                    };
                    if Instant::now() > deadline {
                        bail!(
                            "CRD {plural}.{group} version {} not served after {CRD_TIMEOUT:?}; \
                             last discovery answer: {last}",
                            v.name
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        Ok(())
    }

    /// Parses a multi-document YAML text of CRDs and installs them ([`TestBed::install_crds`]).
    pub async fn install_crd_yaml(&self, yaml: &str) -> Result<Vec<CustomResourceDefinition>> {
        let crds = parse_crds(yaml)?;
        self.install_crds(&crds).await?;
        Ok(crds)
    }

    /// Installs the Gateway API CRDs of `channel` from the cache (see `scripts/build-testdeps.sh`).
    pub async fn install_gateway_api(
        &self,
        channel: GatewayChannel,
    ) -> Result<Vec<CustomResourceDefinition>> {
        let mut all = Vec::new();
        for f in self.assets.gateway_api_crd_files(channel)? {
            let text =
                std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
            all.extend(parse_crds(&text).with_context(|| format!("parsing {}", f.display()))?);
        }
        self.install_crds(&all).await?;
        Ok(all)
    }

    /// Joins `node` to the test bed's bridge with a veth (`ifname` on the node side), gives it
    /// the next free addresses in 10.250.0.0/16 and fd72:7669:6b61::/64, and returns them.
    ///
    /// Why: later tests run `rivorad --kubernetes` in node namespaces; they reach the API server
    /// at [`TestBed::in_cluster_url`] over this link, and nothing leaves namespaces the test made.
    /// The veth disappears with the node namespace.
    pub fn attach(&self, node: &Netns, ifname: &str) -> Result<Attachment> {
        let guard = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let running = guard.as_ref().context("the test bed is stopped")?;
        let host = self.next_host.fetch_add(1, Ordering::Relaxed);
        if host >= 0xffff {
            bail!("the test bed bridge is out of host addresses");
        }
        let node_v4 = Ipv4Addr::new(10, 250, (host >> 8) as u8, (host & 0xff) as u8);
        let node_v6 = Ipv6Addr::new(0xfd72, 0x7669, 0x6b61, 0, 0, 0, 0, host as u16);
        let port = format!("n{host}");
        rivora_lab::link::veth(node, ifname, &running.netns, &port)?;
        rivora_lab::link::enslave(&running.netns, &port, BRIDGE)?;
        rivora_lab::link::up(&running.netns, &port)?;
        rivora_lab::link::addr(node, ifname, &format!("{node_v4}/{BRIDGE_PREFIX_V4}"))?;
        node.run(&[
            "ip",
            "addr",
            "add",
            &format!("{node_v6}/{BRIDGE_PREFIX_V6}"),
            "dev",
            ifname,
            "nodad",
        ])?;
        rivora_lab::link::up(node, ifname)?;
        Ok(Attachment {
            node_v4,
            node_v6,
            ifname: ifname.to_string(),
        })
    }

    /// Routes `dst` (a CIDR) from the test bed's namespace via `via` (an address on its bridge):
    /// how the API server answers Pods of a test cluster, whose pod ranges sit behind their nodes.
    pub fn route(&self, dst: &str, via: &str) -> Result<()> {
        // Through the namespace handle (setns), not `ip -n`, which remounts like `ip netns
        // exec` and fails in a chroot ("mount --make-rslave /": Invalid argument).
        let guard = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let running = guard.as_ref().context("the test bed is stopped")?;
        rivora_lab::link::route(&running.netns, dst, via)
    }

    /// Stops both processes, deletes the namespace and (unless `RIVORA_TESTBED_KEEP` is set)
    /// the directory. Idempotent; drop calls it.
    pub fn stop(&self) {
        let running = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(Running {
            netns,
            mut relay,
            keeper,
            stop,
        }) = running
        {
            let _ = stop.send(());
            let _ = keeper.join();
            relay.stop();
            drop(netns);
        }
        if std::env::var_os(KEEP_ENV).is_some() {
            eprintln!(
                "rivora-kube-testbed: kept {} ({KEEP_ENV} is set)",
                self.dir.display()
            );
        } else if self.dir.exists() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// Polls `/readyz` until it answers `ok`, or a process exits, or [`START_TIMEOUT`] passes.
    fn wait_ready(&self) -> Result<()> {
        let kubeconfig = self.admin_kubeconfig(&self.url());
        let dir = self.dir.clone();
        let netns = self.netns_name.clone();
        // A runtime of its own on a thread of its own: start() may be called from async code.
        let check = std::thread::spawn(move || -> Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let client = client_from_kubeconfig(&kubeconfig).await?;
                let deadline = Instant::now() + START_TIMEOUT;
                loop {
                    if let Some(exited) = read_exit_note(&dir) {
                        bail!(
                            "{exited} while the test bed was starting; kube-apiserver log:\n{}\netcd log:\n{}",
                            log_tail(&dir.join("kube-apiserver.log"), 30),
                            log_tail(&dir.join("etcd.log"), 15)
                        );
                    }
                    let req = http::Request::get("/readyz")
                        .body(Vec::new())
                        .expect("a static request");
                    let last = match client.request_text(req).await {
                        Ok(body) if body.trim() == "ok" => return Ok(()),
                        Ok(body) => body,
                        Err(e) => e.to_string(),
                    };
                    if Instant::now() > deadline {
                        bail!(
                            "kube-apiserver in netns {netns} not ready after {START_TIMEOUT:?}; \
                             last /readyz: {last}; log:\n{}",
                            log_tail(&dir.join("kube-apiserver.log"), 30)
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        });
        check
            .join()
            .map_err(|_| anyhow!("the readiness check panicked"))?
    }
}

impl Drop for TestBed {
    fn drop(&mut self) {
        self.stop();
    }
}

extern "C" fn stop_shared_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(bed) = SHARED.get() {
            bed.stop();
        }
    });
}

/// A name unique within this test binary: `<prefix>-<pid>-<n>` (lowercase, DNS-1123), for
/// namespaces and objects, so tests sharing one API server never collide.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NAME_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates namespace `name` unless it exists (no namespace controller runs, so namespaces are
/// created explicitly and never finish deleting).
pub async fn ensure_namespace(client: &Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.patch(name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&ns))
        .await
        .with_context(|| format!("applying namespace {name}"))?;
    Ok(())
}

/// Parses every `CustomResourceDefinition` document of a multi-document YAML text (other kinds
/// and empty documents are skipped).
pub fn parse_crds(yaml: &str) -> Result<Vec<CustomResourceDefinition>> {
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(yaml) {
        let value: serde_json::Value =
            serde::Deserialize::deserialize(doc).context("parsing a YAML document")?;
        if value.get("kind").and_then(|k| k.as_str()) != Some("CustomResourceDefinition") {
            continue;
        }
        out.push(serde_json::from_value(value).context("a CustomResourceDefinition document")?);
    }
    Ok(out)
}

async fn client_from_kubeconfig(yaml: &str) -> Result<Client> {
    let kc = Kubeconfig::from_yaml(yaml).context("parsing the generated kubeconfig")?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .context("loading the generated kubeconfig")?;
    Client::try_from(config).context("building a kube client")
}

pub(crate) fn kubeconfig_yaml(server: &str, ca_pem: &str, user: serde_json::Value) -> String {
    let kc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "testbed", "cluster": {
            "server": server,
            "certificate-authority-data": b64(ca_pem.as_bytes()),
        }}],
        "users": [{ "name": "user", "user": user }],
        "contexts": [{ "name": "testbed", "context": { "cluster": "testbed", "user": "user" } }],
        "current-context": "testbed",
    });
    serde_norway::to_string(&kc).expect("a JSON value always serialises")
}

fn setup_bridge(ns: &Netns) -> Result<()> {
    rivora_lab::link::bridge(ns, BRIDGE)?;
    rivora_lab::link::addr(ns, BRIDGE, &format!("{SERVER_V4}/{BRIDGE_PREFIX_V4}"))?;
    ns.run(&[
        "ip",
        "addr",
        "add",
        &format!("{SERVER_V6}/{BRIDGE_PREFIX_V6}"),
        "dev",
        BRIDGE,
        "nodad",
    ])?;
    Ok(())
}

fn etcd_command(assets: &Assets, dir: &Path) -> (String, Command, PathBuf) {
    let mut cmd = Command::new(&assets.etcd);
    cmd.arg("--name=testbed")
        .arg(format!("--data-dir={}", dir.join("etcd").display()))
        .arg(format!("--listen-client-urls={ETCD_CLIENT}"))
        .arg(format!("--advertise-client-urls={ETCD_CLIENT}"))
        .arg(format!("--listen-peer-urls={ETCD_PEER}"))
        .arg(format!("--initial-advertise-peer-urls={ETCD_PEER}"))
        .arg(format!("--initial-cluster=testbed={ETCD_PEER}"))
        // Throw-away data: no fsync (envtest does the same with etcd >= 3.5).
        .arg("--unsafe-no-fsync=true")
        .arg("--log-level=warn");
    ("etcd".into(), cmd, dir.join("etcd.log"))
}

fn apiserver_command(
    assets: &Assets,
    dir: &Path,
    options: &Options,
    pki: &pki::Pki,
) -> Result<(String, Command, PathBuf)> {
    let p = dir.join("pki");
    let f = |n: &str| p.join(n).display().to_string();
    let mut cmd = Command::new(&assets.kube_apiserver);
    cmd.arg(format!("--etcd-servers={ETCD_CLIENT}"))
        .arg("--bind-address=::")
        .arg(format!("--secure-port={SERVER_PORT}"))
        // No default route in the namespace, so the address to advertise must be given.
        .arg(format!("--advertise-address={SERVER_V4}"))
        .arg(format!("--cert-dir={}", p.display()))
        .arg(format!("--tls-cert-file={}", f("apiserver.crt")))
        .arg(format!("--tls-private-key-file={}", f("apiserver.key")))
        .arg(format!("--client-ca-file={}", f("ca.crt")))
        .arg(format!("--service-account-key-file={}", f("sa.pub")))
        .arg(format!(
            "--service-account-signing-key-file={}",
            f("sa.key")
        ))
        .arg("--service-account-issuer=https://kubernetes.default.svc")
        .arg(format!("--service-cluster-ip-range={SERVICE_CIDRS}"))
        .arg("--allow-privileged=true")
        .arg("--profiling=false")
        .arg("--v=1");
    if options.cluster {
        // Kubelets authenticate as system:node:NAME; the Node authorizer and NodeRestriction
        // limit each to its own Node and Pods, as on a real cluster. The API server reaches
        // kubelets (logs, exec) with a client certificate of its own.
        let (cert, key) =
            pki.client_cert("kube-apiserver-kubelet-client", Some("system:masters"))?;
        std::fs::write(p.join("kubelet-client.crt"), cert).context("writing kubelet-client.crt")?;
        std::fs::write(p.join("kubelet-client.key"), key).context("writing kubelet-client.key")?;
        cmd.arg("--authorization-mode=Node,RBAC")
            .arg("--enable-admission-plugins=NodeRestriction")
            .arg(format!(
                "--kubelet-client-certificate={}",
                f("kubelet-client.crt")
            ))
            .arg(format!("--kubelet-client-key={}", f("kubelet-client.key")))
            .arg("--kubelet-preferred-address-types=InternalIP");
    } else {
        // No controller-manager creates the `default` ServiceAccounts the admission plugin
        // wants for every Pod (envtest disables it too).
        cmd.arg("--authorization-mode=RBAC")
            .arg("--disable-admission-plugins=ServiceAccount");
    }
    if options.audit_log {
        let policy = dir.join(audit::POLICY_FILE);
        std::fs::write(&policy, audit::POLICY).context("writing the audit policy")?;
        cmd.arg(format!("--audit-policy-file={}", policy.display()))
            .arg(format!(
                "--audit-log-path={}",
                dir.join(audit::LOG_FILE).display()
            ))
            .arg("--audit-log-format=json")
            .arg("--audit-log-maxsize=0");
    }
    Ok(("kube-apiserver".into(), cmd, dir.join("kube-apiserver.log")))
}

/// The thread that owns the two processes. It starts them (so `PR_SET_PDEATHSIG`, which fires
/// when the *thread* that forked a child ends, ties them to this long-lived thread rather than
/// to a short test thread), notes an unexpected exit in the directory, and on a stop request
/// kills them by PID and reaps them.
fn keeper(
    netns: Arc<Netns>,
    commands: Vec<(String, Command, PathBuf)>,
    ready: mpsc::Sender<Result<Vec<u32>>>,
    stop: mpsc::Receiver<()>,
) {
    let mut children: Vec<(String, Child)> = Vec::new();
    let mut dir = None;
    for (name, mut cmd, log) in commands {
        dir = log.parent().map(Path::to_path_buf);
        let spawned = (|| -> Result<Child> {
            let out = std::fs::File::create(&log)
                .with_context(|| format!("creating {}", log.display()))?;
            cmd.stdin(Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out);
            // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and only affects the child.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            netns.spawn(&mut cmd)
        })();
        match spawned {
            Ok(child) => children.push((name, child)),
            Err(e) => {
                let _ = ready.send(Err(e.context(format!("starting {name}"))));
                kill_all(&mut children);
                return;
            }
        }
    }
    let _ = ready.send(Ok(children.iter().map(|(_, c)| c.id()).collect()));
    let mut noted = false;
    loop {
        match stop.recv_timeout(Duration::from_millis(100)) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if noted {
            continue;
        }
        for (name, child) in &mut children {
            if let Ok(Some(status)) = child.try_wait() {
                if let Some(d) = &dir {
                    let _ = std::fs::write(
                        d.join("exited"),
                        format!("{name} exited unexpectedly ({status})"),
                    );
                }
                eprintln!("rivora-kube-testbed: {name} exited unexpectedly ({status})");
                noted = true;
            }
        }
    }
    kill_all(&mut children);
}

/// SIGKILL by PID through the `Child` handles (not yet reaped, so the PIDs are still ours), API
/// server first, then wait for each.
fn kill_all(children: &mut Vec<(String, Child)>) {
    for (_, child) in children.iter_mut().rev() {
        let _ = child.kill();
    }
    for (_, child) in children.iter_mut() {
        let _ = child.wait();
    }
    children.clear();
}

fn read_exit_note(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join("exited")).ok()
}

pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(f) = std::fs::File::open(path) else {
        return format!("({} not readable)", path.display());
    };
    let all: Vec<String> = BufReader::new(f).lines().map_while(Result::ok).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Removes test bed directories whose creating process is gone (left by a killed test binary).
fn reap_stale_dirs() {
    let root = std::env::temp_dir().join("rivora-kube-testbed");
    let Ok(entries) = std::fs::read_dir(&root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

pub(crate) fn b64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(T[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(b64(plain.as_bytes()), enc, "{plain:?}");
        }
    }

    #[test]
    fn kubeconfig_parses_back() {
        let y = kubeconfig_yaml(
            "https://127.0.0.1:1",
            "CA",
            serde_json::json!({"token": "t"}),
        );
        let kc = Kubeconfig::from_yaml(&y).unwrap();
        assert_eq!(
            kc.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            Some("https://127.0.0.1:1")
        );
        assert_eq!(kc.current_context.as_deref(), Some("testbed"));
    }

    #[test]
    fn unique_names_differ() {
        assert_ne!(unique_name("t"), unique_name("t"));
    }
}
