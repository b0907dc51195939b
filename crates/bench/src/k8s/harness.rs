//! What every Kubernetes benchmark runs against: the test bed's real API server (with an audit
//! log, so requests can be counted per component), the shipped CRDs and RBAC, rivora-controller
//! as a process, and node agents (`rivorad --kubernetes`) in namespaces attached to the test
//! bed. Same identities and flags as the chart deploys, so the figures are the product's.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use rivora_kube_testbed::{Options, TestBed, unique_name};
use rivora_lab::{Netns, Rivorad};
use serde_json::{Value, json};

/// The binaries under test.
#[derive(Clone, Debug)]
pub struct Bins {
    /// rivorad (the node agent).
    pub rivorad: PathBuf,
    /// rivora-controller.
    pub controller: PathBuf,
}

/// One run's API server and who talks to it.
pub struct Ctx {
    /// etcd + kube-apiserver, audit log on.
    pub bed: TestBed,
    /// Cluster admin (the benchmark's own writes: Services, slices, pools).
    pub admin: Client,
    /// The binaries under test.
    pub bins: Bins,
    /// `--quick`: smaller counts.
    pub quick: bool,
    /// Scratch directory (kubeconfigs, logs), removed on drop.
    pub work: PathBuf,
}

/// The CRDs the chart ships (deploy/chart/crds), embedded so the binary needs no checkout.
const CRDS: &[&str] = &[
    include_str!("../../../../deploy/chart/crds/rivora.dev_addresspools.yaml"),
    include_str!("../../../../deploy/chart/crds/rivora.dev_bgppeers.yaml"),
    include_str!("../../../../deploy/chart/crds/rivora.dev_rivoranodes.yaml"),
    include_str!("../../../../deploy/chart/crds/rivora.dev_servicepolicies.yaml"),
];
/// The controller's shipped RBAC.
const CONTROLLER_RBAC: &str = include_str!("../../../../deploy/rbac/rivora-controller.yaml");
/// The node agent's shipped RBAC.
const RIVORAD_RBAC: &str = include_str!("../../../../deploy/rbac/rivorad.yaml");

impl Ctx {
    /// Starts a test bed of its own (audit log on) and installs the shipped CRDs.
    pub async fn start(bins: Bins, quick: bool) -> Result<Ctx> {
        let bed = tokio::task::spawn_blocking(|| {
            TestBed::start_with(&Options {
                audit_log: true,
                ..Options::default()
            })
        })
        .await
        .context("starting the test bed")??;
        let admin = bed.admin_client().await?;
        for crd in CRDS {
            bed.install_crd_yaml(crd).await?;
        }
        let work = std::env::temp_dir().join(unique_name("rivora-bench-k8s"));
        std::fs::create_dir_all(&work)?;
        Ok(Ctx {
            bed,
            admin,
            bins,
            quick,
            work,
        })
    }

    /// A ServiceAccount `ns/name` bound to the roles of `rbac` (a shipped file), and a token of
    /// it once RBAC lets it list Services.
    async fn identity(&self, rbac: &str, ns: &str, name: &str) -> Result<String> {
        rivora_kube_testbed::ensure_namespace(&self.admin, ns).await?;
        rivora_kube_testbed::rbac::bind_rbac(&self.admin, rbac, ns, name).await?;
        let client = self.bed.service_account_client(ns, name).await?;
        wait_until(
            "RBAC lets the ServiceAccount list Services",
            Duration::from_secs(30),
            || {
                let c = client.clone();
                async move {
                    Api::<Service>::all(c)
                        .list(&ListParams::default().limit(1))
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            },
        )
        .await?;
        self.bed.service_account_token(ns, name).await
    }

    /// A kubeconfig file for rivora-controller's ServiceAccount in `ns`, pointing at the API
    /// server from the host (the controller runs in the host namespace).
    pub async fn controller_kubeconfig(&self, ns: &str) -> Result<PathBuf> {
        let token = self
            .identity(CONTROLLER_RBAC, ns, "rivora-controller")
            .await?;
        let path = self.work.join(format!("controller-{ns}.kubeconfig"));
        std::fs::write(&path, self.bed.token_kubeconfig(&self.bed.url(), &token))?;
        Ok(path)
    }

    /// A token of rivorad's ServiceAccount in `ns` (its Roles bound there).
    pub async fn rivorad_token(&self, ns: &str) -> Result<String> {
        self.identity(RIVORAD_RBAC, ns, "rivorad").await
    }

    /// The audit-log user name of ServiceAccount `ns/name`.
    pub fn sa_user(ns: &str, name: &str) -> String {
        format!("system:serviceaccount:{ns}:{name}")
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        if std::env::var_os("RIVORA_BENCH_KEEP_WORK").is_some() {
            eprintln!("part 5: kept {} (logs)", self.work.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// Polls `f` every 20 ms until it is Ok or `timeout` passes; the error says what was last
/// seen.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(last) if Instant::now() >= deadline => {
                bail!("{what}: not within {timeout:?}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// CPU time (user + system) a process has used so far, from `/proc/PID/stat`.
pub fn cpu_secs(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the parenthesised command (which may hold spaces): state is field 3,
    // utime 14 and stime 15, so 11 and 12 after it.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("/proc/{pid}/stat: no command field"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64> {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| anyhow!("/proc/{pid}/stat: field {}", i + 3))
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok((ticks(11)? + ticks(12)?) / hz)
}

/// Peak resident set of a process in MiB.
pub fn hwm_mib(pid: u32) -> Result<f64> {
    Ok(rivora_lab::memory::ProcessMemory::of(pid)?.hwm_mib())
}

/// One rivora-controller process (the binary as deployed), SIGKILLed by PID when dropped.
pub struct Controller {
    child: Child,
    log: PathBuf,
}

/// How one rivora-controller replica is started.
#[derive(Clone, Copy, Debug)]
pub struct Launch<'a> {
    /// `--identity` (also names its log).
    pub id: &'a str,
    /// `--load-balancer-class`.
    pub class: &'a str,
    /// `--lease-duration`, seconds.
    pub lease_secs: u64,
    /// `--lease-grace`, seconds (renewed this long before expiry).
    pub grace_secs: u64,
    /// Further flags (e.g. `--gateway-controller-name`).
    pub extra: &'a [&'a str],
}

impl Controller {
    /// Starts a replica with identity `id`, its Lease in `lease_ns` (`lease_secs` long, renewed
    /// 1 s before expiry), serving `class`, as the ServiceAccount of `kubeconfig`.
    pub fn start(
        ctx: &Ctx,
        kubeconfig: &Path,
        lease_ns: &str,
        id: &str,
        class: &str,
        lease_secs: u64,
    ) -> Result<Controller> {
        let launch = Launch {
            id,
            class,
            lease_secs,
            grace_secs: 1,
            extra: &[],
        };
        Controller::launch(ctx, kubeconfig, lease_ns, &launch)
    }

    /// Starts a replica as `launch` says, its Lease in `lease_ns`, as the ServiceAccount of
    /// `kubeconfig`. Its log (appended to, so a restarted replica keeps its history) is
    /// `controller-ID.log` in the scratch directory.
    pub fn launch(
        ctx: &Ctx,
        kubeconfig: &Path,
        lease_ns: &str,
        launch: &Launch,
    ) -> Result<Controller> {
        let log = ctx.work.join(format!("controller-{}.log", launch.id));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let lease = [launch.lease_secs, launch.grace_secs].map(|s| s.to_string());
        let child = Command::new(&ctx.bins.controller)
            .args(["--lease-namespace", lease_ns, "--identity", launch.id])
            .args(["--lease-duration", &lease[0], "--lease-grace", &lease[1]])
            .args(["--load-balancer-class", launch.class])
            // Any free loopback port: nothing scrapes it here.
            .args(["--metrics-address", "127.0.0.1:0"])
            .args(launch.extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", ctx.bins.controller.display()))?;
        Ok(Controller { child, log })
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it has exited (and then its log tail, for the error).
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(st)) => Some(format!(
                "rivora-controller exited ({st}): {}",
                rivora_lab::rivorad::tail(&self.log, 10)
            )),
            _ => None,
        }
    }

    /// Whether it exited, and its log's last lines: the context of an error.
    pub fn why(&mut self) -> String {
        self.exited()
            .unwrap_or_else(|| format!("controller log: {}", self.log_tail(8)))
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        rivora_lab::rivorad::tail(&self.log, n)
    }

    /// SIGKILL, as a crashed pod or a lost node.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One node agent: `rivorad --kubernetes` in a namespace of its own on the test bed's bridge,
/// attached (XDP) to an uplink veth whose peer sits in a second namespace, registered as a Node.
pub struct NodeAgent {
    /// The Node's name.
    pub name: String,
    /// The `--load-balancer-class` it programs.
    pub class: String,
    /// The node's namespace.
    pub ns: Netns,
    _peer: Netns,
    /// Its pin directory (read by [`rivora_dataplane::view::PinnedView`]).
    pub pin_dir: PathBuf,
    /// Its API socket.
    pub socket: PathBuf,
    work: PathBuf,
    kubeconfig: PathBuf,
    rivorad: Option<Rivorad>,
}

impl NodeAgent {
    /// The namespaces, the uplink, the Node object and a kubeconfig with `token`; not started.
    pub async fn new(ctx: &Ctx, tag: &str, class: &str, token: &str) -> Result<NodeAgent> {
        let name = unique_name(tag);
        let ns = Netns::new("bk8n")?;
        let peer = Netns::new("bk8p")?;
        rivora_lab::link::veth(&ns, "up0", &peer, "up1")?;
        rivora_lab::link::up(&ns, "up0")?;
        rivora_lab::link::up(&peer, "up1")?;
        ctx.bed.attach(&ns, "kapi")?;
        let work = ctx.work.join(&name);
        std::fs::create_dir_all(&work)?;
        let kubeconfig = work.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            ctx.bed.token_kubeconfig(&ctx.bed.in_cluster_url(), token),
        )?;
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        }))?;
        Api::<Node>::all(ctx.admin.clone())
            .create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating Node {name}"))?;
        rivora_lab::ensure_bpffs()?;
        Ok(NodeAgent {
            class: class.into(),
            pin_dir: PathBuf::from(format!("/sys/fs/bpf/rivora-bench-{name}")),
            socket: work.join("api.sock"),
            name,
            ns,
            _peer: peer,
            work,
            kubeconfig,
            rivorad: None,
        })
    }

    /// Starts rivorad (`bin`) with `extra` flags after the Kubernetes ones; returns the time
    /// until its API socket appeared.
    pub fn start(&mut self, bin: &Path, extra: &[&str]) -> Result<Duration> {
        let mut args: Vec<&OsStr> = vec![
            "--kubernetes".as_ref(),
            "--node-name".as_ref(),
            self.name.as_ref(),
            "--kubeconfig".as_ref(),
            self.kubeconfig.as_os_str(),
            "--load-balancer-class".as_ref(),
            self.class.as_ref(),
            "--backend-retire-secs".as_ref(),
            "0".as_ref(),
            "--metrics-listen".as_ref(),
            "127.0.0.1:9469".as_ref(),
        ];
        args.extend(extra.iter().map(OsStr::new));
        let t = Instant::now();
        let mut d = Rivorad::start_with(
            &self.ns,
            "up0",
            bin,
            &self.pin_dir,
            &self.socket,
            &self.work,
            &args,
        )?;
        d.wait_ready(&self.socket, Duration::from_secs(120))?;
        let took = t.elapsed();
        self.rivorad = Some(d);
        Ok(took)
    }

    /// Its PID, while running.
    pub fn pid(&self) -> Result<u32> {
        self.rivorad
            .as_ref()
            .map(Rivorad::pid)
            .ok_or_else(|| anyhow!("rivorad is not running"))
    }

    /// SIGTERM and wait (a graceful stop, or with --persist-datapath one that leaves the
    /// datapath forwarding).
    pub fn stop(&mut self) -> Result<()> {
        if let Some(mut d) = self.rivorad.take() {
            d.signal_and_wait(libc::SIGTERM)?;
        }
        Ok(())
    }

    /// Its log, for errors.
    pub fn log_tail(&self) -> String {
        rivora_lab::rivorad::tail(&self.log_path(), 15)
    }

    /// Where rivorad's log goes.
    fn log_path(&self) -> PathBuf {
        self.work.join("rivorad.stderr.log")
    }

    /// How long its log is now (bytes): a mark for [`NodeAgent::took_ms_since`].
    pub fn log_mark(&self) -> u64 {
        std::fs::metadata(self.log_path()).map_or(0, |m| m.len())
    }

    /// The `took_ms` of the log lines after `mark` that contain `what`: the agent's passes
    /// ("new desired state") and rivorad's applies ("applied:") time themselves, which
    /// splits a change-to-forwarding figure into its parts.
    pub fn took_ms_since(&self, mark: u64, what: &str) -> Result<Vec<f64>> {
        let log = std::fs::read(self.log_path())
            .with_context(|| format!("reading {}", self.log_path().display()))?;
        let after = log.get(mark as usize..).unwrap_or_default();
        Ok(String::from_utf8_lossy(after)
            .lines()
            .filter(|l| l.contains(what))
            .filter_map(|l| l.split("took_ms=").nth(1))
            .filter_map(|v| v.split_whitespace().next()?.parse().ok())
            .collect())
    }

    /// Its local API.
    pub fn api(&self) -> rivora_api::Client {
        rivora_api::Client::new(&self.socket)
    }

    /// The Kubernetes section of its status.
    pub async fn kubernetes(&self) -> Result<rivora_api::KubernetesStatus, String> {
        let s = self.api().status().await.map_err(|e| e.to_string())?;
        s.kubernetes
            .ok_or_else(|| "status has no kubernetes section".to_string())
    }

    /// Its datapath as another process sees it through the pins.
    pub fn view(&self) -> Result<rivora_dataplane::view::PinnedView> {
        rivora_dataplane::view::PinnedView::open(&self.pin_dir)
            .map_err(|e| anyhow!("opening the pins in {}: {e}", self.pin_dir.display()))
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        if let Some(mut d) = self.rivorad.take() {
            let _ = d.stop();
        }
        crate::util::remove_pin_dir(&self.pin_dir);
    }
}

/// A LoadBalancer Service of `class`: one TCP port 80 -> 8080, IPv4 only, no node ports.
pub fn lb_service(name: &str, class: &str, labels: serde_json::Value) -> Result<Service> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "type": "LoadBalancer", "loadBalancerClass": class,
            "allocateLoadBalancerNodePorts": false,
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
        },
    }))?)
}

/// Milliseconds of a duration, as f64.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Server-side applies `obj` (JSON naming its kind and `metadata.name`) through `api` as the
/// benchmark's field manager, forcing ownership: every object a sub-part sets up goes this way.
pub async fn apply<K>(api: &Api<K>, obj: Value) -> Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + k8s_openapi::serde::de::DeserializeOwned,
{
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    api.patch(
        &name,
        &PatchParams::apply("rivora-bench").force(),
        &Patch::Apply(&obj),
    )
    .await
    .with_context(|| format!("applying {} {name}", obj["kind"]))?;
    Ok(())
}
