//! One node of a test cluster: a network namespace on the test bed's bridge, a mount namespace
//! of its own, containerd and a real kubelet.
//!
//! What a node sees, and why:
//! * its network namespace holds `eth0` on the test bed's bridge (the node's InternalIP, where
//!   the API server, the other nodes and the client segment are) and one ptp veth per pod (the
//!   CNI plugins Debian ships: `ptp` + `host-local`, a routed, Calico-like layout);
//! * its mount namespace (bound at `<dir>/mnt` and entered with `setns`; in a chroot, held by a
//!   process whose root the node's processes take, see `hold_mounts_in_chroot`) has a sysfs of its own
//!   network namespace at /sys (so /sys/class/net lists the node's links), a bpffs of its own at
//!   /sys/fs/bpf made *shared* (the chart mounts it into rivorad with Bidirectional
//!   propagation, which the kubelet only allows on a shared mount), and private /run/rivora,
//!   /run/containerd, /var/lib/kubelet, /var/lib/cni and /var/log, so two nodes on one host never
//!   share a pin, a socket, a pod directory or a log;
//! * its processes sit under the cgroup `/<cgroup root>` of every hierarchy: the kubelet puts
//!   pods under `<root>/kubepods`, containerd (and so every shim and container) starts in
//!   `<root>/runtime`, so stopping a node kills exactly what it started.
//!
//! Host facts this relies on (checked where they matter): cgroup v1 hierarchies (the kubelet
//! runs with the cgroupfs driver and `failCgroupV1: false`), no CAP_SYS_RESOURCE (containerd's
//! `restrict_oom_score_adj`, else runc fails to lower a sandbox's oom_score_adj).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rivora_lab::Netns;

use super::cgroup::Cgroup;
use super::control::cert_kubeconfig;
use super::spawner::Spawner;
use crate::assets::NodeAssets;
use crate::{Attachment, TestBed};

/// The interface a node has on the test bed's bridge (the chart's default `rivorad.interface`).
pub const NODE_IF: &str = "eth0";
/// How long containerd may take to open its socket.
const CONTAINERD_TIMEOUT: Duration = Duration::from_secs(30);
/// The sandbox image every node's containerd uses (built by `scripts/image pause`).
pub const PAUSE_IMAGE: &str = "rivora.test/pause:1";

/// Node `n`'s (1-based) pod range, IPv4.
pub fn pod_cidr_v4(n: usize) -> String {
    format!("10.244.{n}.0/24")
}

/// Node `n`'s (1-based) pod range, IPv6.
pub fn pod_cidr_v6(n: usize) -> String {
    format!("fd00:244:{n:x}::/64")
}

/// What a node needs from its cluster to start.
pub(crate) struct NodeContext<'a> {
    pub bed: &'a TestBed,
    pub assets: &'a NodeAssets,
    pub spawner: &'a Spawner,
    /// The cluster's directory; the node's is `<dir>/<name>`.
    pub dir: &'a Path,
    /// Prefix of the node's cgroup root (unique per cluster, with the test binary's PID).
    pub cgroup_prefix: &'a str,
    /// OCI archives imported into the node's containerd before the kubelet starts.
    pub images: &'a [PathBuf],
}

/// A running node. Dropping it stops the kubelet, containerd and every container, and removes
/// its mount namespace, cgroups and network namespace.
#[derive(Debug)]
pub struct KubeNode {
    name: String,
    index: usize,
    dir: PathBuf,
    /// The mount namespace's file (`<dir>/mnt`) on a plain host.
    mount_ns: PathBuf,
    /// In a chroot: the process that holds the node's mount namespace with the node's root
    /// (see [`KubeNode::prepare_mounts`]); every node process enters both through its /proc.
    holder: Mutex<Option<Child>>,
    holder_pid: std::sync::OnceLock<u32>,
    cgroup: Cgroup,
    eth0: Attachment,
    containerd: Mutex<Option<Child>>,
    kubelet: Mutex<Option<Child>>,
    /// Last: deleted once the processes inside are gone.
    ns: Netns,
}

impl KubeNode {
    /// Creates node `index` (1-based) named `name` and starts containerd and the kubelet; the
    /// caller waits for the Node to become Ready.
    pub(crate) fn start(ctx: &NodeContext<'_>, index: usize, name: &str) -> Result<KubeNode> {
        let ns = Netns::new(&format!("kn{index}"))?;
        let dir = ctx.dir.join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let eth0 = ctx.bed.attach(&ns, NODE_IF)?;
        let cgroup = Cgroup::create(&format!("{}-{name}", ctx.cgroup_prefix))?;
        let node = KubeNode {
            name: name.to_string(),
            index,
            mount_ns: dir.join("mnt"),
            holder: Mutex::new(None),
            holder_pid: std::sync::OnceLock::new(),
            dir,
            cgroup,
            eth0,
            containerd: Mutex::new(None),
            kubelet: Mutex::new(None),
            ns,
        };
        node.prepare_network()?;
        node.prepare_mounts(ctx)?;
        node.start_containerd(ctx)?;
        for image in ctx.images {
            node.import_image(ctx.assets, image)?;
        }
        node.start_kubelet(ctx)?;
        Ok(node)
    }

    /// The Node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// 1-based position in the cluster (its pod ranges are [`pod_cidr_v4`]`(index)`).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The node's network namespace.
    pub fn netns(&self) -> &Netns {
        &self.ns
    }

    /// `eth0`'s addresses: the Node's InternalIPs.
    pub fn addresses(&self) -> &Attachment {
        &self.eth0
    }

    /// The node's IPv4 InternalIP.
    pub fn v4(&self) -> Ipv4Addr {
        self.eth0.node_v4
    }

    /// The node's IPv6 InternalIP.
    pub fn v6(&self) -> Ipv6Addr {
        self.eth0.node_v6
    }

    /// The node's directory: logs (`containerd.log`, `kubelet.log`, `var-log/pods/...`),
    /// configuration, containerd's state.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The mount namespace file: `nsenter --mount=THIS --net=/run/netns/NS` gives a shell the
    /// node's view (its bpffs, /run/rivora, /var/log).
    pub fn mount_ns(&self) -> PathBuf {
        match self.holder_pid.get() {
            Some(pid) => PathBuf::from(format!("/proc/{pid}/ns/mnt")),
            None => self.mount_ns.clone(),
        }
    }

    /// The directory node processes take as their root: the holder's root in a chroot (see
    /// [`KubeNode::prepare_mounts`]), else none (the mount namespace's own root).
    fn root_dir(&self) -> Option<PathBuf> {
        self.holder_pid
            .get()
            .map(|pid| PathBuf::from(format!("/proc/{pid}/root")))
    }

    /// Runs `argv` in the node's network and mount namespaces (what a process on the node
    /// sees, e.g. `rivoractl` against the API socket in /run/rivora) and returns its stdout.
    pub fn exec(&self, argv: &[&str]) -> Result<String> {
        let mut cmd = Command::new("nsenter");
        match self.holder_pid.get() {
            // The holder's mount namespace, root and working directory.
            Some(pid) => cmd.args(["--target", &pid.to_string(), "--mount", "--root", "--wd"]),
            None => cmd.arg(format!("--mount={}", self.mount_ns.display())),
        };
        cmd.arg(format!("--net={}", self.ns.path().display()))
            .arg("--")
            .args(argv)
            .stdin(Stdio::null());
        let out = cmd
            .output()
            .with_context(|| format!("running {argv:?} on {}", self.name))?;
        if !out.status.success() {
            bail!(
                "{argv:?} on {} exited {}: {}",
                self.name,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The last `lines` lines of the kubelet's log, for failure messages.
    pub fn kubelet_log_tail(&self, lines: usize) -> String {
        crate::log_tail(&self.dir.join("kubelet.log"), lines)
    }

    /// The last `lines` lines of every container log on the node (`/var/log/pods`), newest
    /// restart of each container, for failure messages.
    pub fn container_log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        let pods = self.dir.join("var-log/pods");
        let Ok(entries) = std::fs::read_dir(&pods) else {
            return out;
        };
        let mut pod_dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        pod_dirs.sort();
        for pod in pod_dirs {
            let Ok(containers) = std::fs::read_dir(&pod) else {
                continue;
            };
            for c in containers.flatten() {
                let Ok(logs) = std::fs::read_dir(c.path()) else {
                    continue;
                };
                // `<restart count>.log`: the highest is the latest run.
                let latest = logs
                    .flatten()
                    .map(|l| l.path())
                    .filter(|l| l.extension().is_some_and(|e| e == "log"))
                    .max_by_key(|l| {
                        l.file_stem()
                            .and_then(|s| s.to_str())
                            .and_then(|s| s.parse::<u32>().ok())
                            .unwrap_or(0)
                    });
                if let Some(l) = latest {
                    out.push_str(&format!(
                        "--- {} {}:\n{}\n",
                        self.name,
                        l.strip_prefix(&pods).unwrap_or(&l).display(),
                        crate::log_tail(&l, lines)
                    ));
                }
            }
        }
        out
    }

    /// The last `lines` lines of containerd's log, for failure messages.
    pub fn containerd_log_tail(&self, lines: usize) -> String {
        crate::log_tail(&self.dir.join("containerd.log"), lines)
    }

    /// Stops the kubelet (SIGKILL), as a node that died would: its Pods keep running until
    /// [`KubeNode::stop`], and the Node goes NotReady once its Lease expires.
    pub fn kill_kubelet(&self) {
        if let Some(mut k) = self
            .kubelet
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = k.kill();
            let _ = k.wait();
        }
    }

    /// Imports the OCI archive `image` into the node's containerd (namespace `k8s.io`, where the
    /// kubelet looks): how an image built by `scripts/image` reaches a node without a registry.
    pub fn import_image(&self, assets: &NodeAssets, image: &Path) -> Result<()> {
        let image = image
            .to_str()
            .with_context(|| format!("{} is not UTF-8", image.display()))?;
        self.ctr(assets, &["images", "import", image])
            .with_context(|| format!("importing {image}"))
    }

    /// Sends `signal` (e.g. `SIGKILL`) to the main process of the container `container_id`
    /// (a Pod status's `containerID`, with or without its `containerd://`), as a crash or the
    /// OOM killer would: the kubelet sees the container exit and restarts it by its Pod's
    /// restartPolicy.
    pub fn signal_container(
        &self,
        assets: &NodeAssets,
        container_id: &str,
        signal: &str,
    ) -> Result<()> {
        let id = container_id
            .strip_prefix("containerd://")
            .unwrap_or(container_id);
        self.ctr(assets, &["tasks", "kill", "--signal", signal, id])
            .with_context(|| format!("sending {signal} to container {id}"))
    }

    /// Runs `ctr ARGS` against the node's containerd, namespace `k8s.io` (the kubelet's).
    fn ctr(&self, assets: &NodeAssets, args: &[&str]) -> Result<()> {
        let out = Command::new(assets.ctr())
            .arg(format!("--address={}", self.containerd_socket().display()))
            .arg("--namespace=k8s.io")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running ctr {args:?}"))?;
        if !out.status.success() {
            bail!(
                "ctr {args:?} on {} exited {}: {}",
                self.name,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Stops everything on the node and removes what it set up. Idempotent; drop calls it.
    pub fn stop(&self) {
        self.kill_kubelet();
        if let Some(mut c) = self
            .containerd
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(mut h) = self.holder.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = h.kill();
            let _ = h.wait();
        }
        if let Err(e) = self.cgroup.kill_all(Duration::from_secs(10)) {
            eprintln!("rivora-kube-testbed: node {}: {e:#}", self.name);
        }
        unmount_ns_file(&self.mount_ns);
        if let Err(e) = self.cgroup.remove(Duration::from_secs(5)) {
            eprintln!("rivora-kube-testbed: node {}: {e:#}", self.name);
        }
    }

    fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// Forwarding on, no DAD delays (addresses usable at once), `eth0` up with its addresses.
    fn prepare_network(&self) -> Result<()> {
        for (k, v) in [
            ("net.ipv4.ip_forward", "1"),
            ("net.ipv6.conf.all.forwarding", "1"),
            ("net.ipv6.conf.all.accept_dad", "0"),
            ("net.ipv6.conf.default.accept_dad", "0"),
        ] {
            self.ns.sysctl(k, v)?;
        }
        Ok(())
    }

    /// Creates the mount namespace and mounts the node's private views (module documentation).
    fn prepare_mounts(&self, ctx: &NodeContext<'_>) -> Result<()> {
        for d in [
            "var-lib-kubelet",
            "var-lib-cni",
            "var-log",
            "cni",
            "containerd",
            "cgroup-move",
        ] {
            std::fs::create_dir_all(self.dir.join(d))?;
        }
        // Mount points on the host; empty directories, created only if missing.
        for d in [
            "/run/rivora",
            "/run/containerd",
            "/var/lib/kubelet",
            "/var/lib/cni",
        ] {
            std::fs::create_dir_all(d).with_context(|| format!("creating mount point {d}"))?;
        }
        let d = self.dir.display();
        // sysfs is mounted from inside the node's network namespace, so it shows the node's
        // links; the cgroup tree mounted under the host's /sys is carried over first. The host's
        // /sys goes entirely (not just hidden): containerd finds a hostPath's mount by reading
        // mountinfo, and a hidden host bpffs at /sys/fs/bpf, private, would be the one it finds.
        let script = format!(
            "mount --rbind /sys/fs/cgroup {d}/cgroup-move
umount --recursive --lazy /sys
mount -t sysfs sysfs /sys
mount --move {d}/cgroup-move /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
mount --make-shared /sys/fs/bpf
mount -t tmpfs -o mode=0755 tmpfs /run/rivora
mount -t tmpfs -o mode=0711 tmpfs /run/containerd
mount --bind {d}/var-lib-kubelet /var/lib/kubelet
mount --bind {d}/var-lib-cni /var/lib/cni
mount --bind {d}/var-log /var/log
"
        );
        if in_chroot() {
            return self.hold_mounts_in_chroot(ctx, &script);
        }
        std::fs::write(&self.mount_ns, b"")?;
        let out = Command::new("unshare")
            .arg(format!("--mount={}", self.mount_ns.display()))
            .args(["--propagation", "private", "true"])
            .output()
            .context("running unshare (util-linux)")?;
        if !out.status.success() {
            bail!(
                "creating the mount namespace of {}: unshare exited {}: {}",
                self.name,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let out = Command::new("nsenter")
            .arg(format!("--mount={}", self.mount_ns.display()))
            .arg(format!("--net={}", self.ns.path().display()))
            .args(["--", "sh", "-ec", &script])
            .stdin(Stdio::null())
            .output()
            .context("running nsenter (util-linux)")?;
        if !out.status.success() {
            bail!(
                "mounting the private views of {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// The mount namespace in a chroot (fresh-machine-check runs the suite in one), where three
    /// things differ: "/" is not a mount point, so it cannot be made private (its propagation is
    /// kept: the chroot's root is a directory of a private mount, /sys a slave); runc refuses to
    /// set up a container where "/" is not a mount point (it makes it a slave first: EINVAL);
    /// and entering a mount namespace with setns(2) resets the root to the namespace's, outside
    /// the chroot. So a holder process unshares the namespace (keeping the chroot), mounts the
    /// node's views, binds "/" recursively onto `<dir>/root` and chroots into it; node
    /// processes enter its namespace and take its root through /proc/PID.
    fn hold_mounts_in_chroot(&self, ctx: &NodeContext<'_>, mounts: &str) -> Result<()> {
        let root = self.dir.join("root");
        let ready = self.dir.join("mounts-ready");
        let script = format!(
            "{mounts}mkdir -p {r}\nmount --rbind / {r}\ntouch {ready}\nexec chroot {r} sleep 2147483647\n",
            r = root.display(),
            ready = ready.display()
        );
        let log = std::fs::File::create(self.dir.join("mounts.log"))?;
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--mount",
            "--propagation",
            "unchanged",
            "--",
            "sh",
            "-ec",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
        let child = ctx.spawner.spawn(
            &self.ns,
            None,
            None,
            &self.cgroup.procs_files("holder")?,
            cmd,
        )?;
        let pid = child.id();
        *self.holder.lock().unwrap() = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ready.exists() {
            let exited = self
                .holder
                .lock()
                .unwrap()
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some());
            if exited || Instant::now() > deadline {
                bail!(
                    "mounting the private views of {}: {}",
                    self.name,
                    crate::log_tail(&self.dir.join("mounts.log"), 10)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // `exec chroot` comes right after the marker, and chroot execs sleep: once the holder
        // is sleep, its root is the bound one (a root's inode cannot tell: it is the same "/").
        while !std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|c| c.trim() == "sleep")
        {
            if Instant::now() > deadline {
                bail!(
                    "the mount holder of {} did not chroot: {}",
                    self.name,
                    crate::log_tail(&self.dir.join("mounts.log"), 10)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.holder_pid.set(pid);
        Ok(())
    }

    fn start_containerd(&self, ctx: &NodeContext<'_>) -> Result<()> {
        let d = &self.dir;
        let conflist = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "rivora-test",
            "plugins": [{
                "type": "ptp",
                "ipMasq": false,
                "ipam": {
                    "type": "host-local",
                    "ranges": [
                        [{"subnet": pod_cidr_v4(self.index)}],
                        [{"subnet": pod_cidr_v6(self.index)}],
                    ],
                    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                    "dataDir": d.join("ipam"),
                },
            }],
        });
        std::fs::write(
            d.join("cni/10-rivora-test.conflist"),
            serde_json::to_vec_pretty(&conflist)?,
        )?;
        let config = format!(
            r#"version = 3
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{PAUSE_IMAGE}"
[plugins.'io.containerd.cri.v1.runtime']
  # Pod network namespaces under the node's own state, not the host's /run/netns.
  netns_mounts_under_state_dir = true
  # No CAP_SYS_RESOURCE here: never ask runc for an oom_score_adj below containerd's own.
  restrict_oom_score_adj = true
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "{runc}"
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["{cni}"]
  conf_dir = "{conf}"
"#,
            root = d.join("containerd/root").display(),
            state = d.join("containerd/state").display(),
            sock = self.containerd_socket().display(),
            runc = ctx.assets.runc.display(),
            cni = ctx.assets.cni_bin_dir.display(),
            conf = d.join("cni").display(),
        );
        let config_path = d.join("containerd.toml");
        std::fs::write(&config_path, config)?;
        let mut cmd = Command::new(ctx.assets.containerd());
        cmd.arg(format!("--config={}", config_path.display())).env(
            "PATH",
            format!(
                "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                ctx.assets.containerd_dir.display()
            ),
        );
        let child = self.spawn_logged(ctx, cmd, "containerd.log", "runtime")?;
        *self.containerd.lock().unwrap() = Some(child);
        let deadline = Instant::now() + CONTAINERD_TIMEOUT;
        let sock = self.containerd_socket();
        while std::os::unix::net::UnixStream::connect(&sock).is_err() {
            if Instant::now() > deadline {
                bail!(
                    "containerd on {} did not open {} within {CONTAINERD_TIMEOUT:?}; its log ends:\n{}",
                    self.name,
                    sock.display(),
                    self.containerd_log_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn start_kubelet(&self, ctx: &NodeContext<'_>) -> Result<()> {
        let d = &self.dir;
        let pki = ctx.bed.pki();
        std::fs::write(d.join("ca.crt"), &pki.ca_cert_pem)?;
        let (cert, key) =
            pki.client_cert(&format!("system:node:{}", self.name), Some("system:nodes"))?;
        let kubeconfig = d.join("kubelet.kubeconfig");
        std::fs::write(
            &kubeconfig,
            cert_kubeconfig(&ctx.bed.in_cluster_url(), &pki.ca_cert_pem, &cert, &key),
        )?;
        let config = format!(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This host has cgroup v1 only; the kubelet refuses it unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /{cgroup}
containerRuntimeEndpoint: unix://{sock}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {ca}
authorization:
  mode: Webhook
address: {addr}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
failSwapOn: false
resolvConf: /etc/resolv.conf
# The disk is the host's, shared with everything else on it: evict only when it is really full.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
# Images come from `ctr images import`, not a registry: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"#,
            cgroup = self.cgroup.name(),
            sock = self.containerd_socket().display(),
            ca = d.join("ca.crt").display(),
            addr = self.eth0.node_v4,
        );
        let config_path = d.join("kubelet.yaml");
        std::fs::write(&config_path, config)?;
        let mut cmd = Command::new(&ctx.assets.kubelet);
        cmd.arg(format!("--config={}", config_path.display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--hostname-override={}", self.name))
            .arg(format!(
                "--node-ip={},{}",
                self.eth0.node_v4, self.eth0.node_v6
            ))
            .arg("--v=1");
        let child = self.spawn_logged(ctx, cmd, "kubelet.log", "kubelet")?;
        *self.kubelet.lock().unwrap() = Some(child);
        Ok(())
    }

    /// Starts `cmd` as a process of the node (its network and mount namespaces, its root, the
    /// node cgroup `<root>/<cgroup>`), with stdout and stderr going to `<dir>/<log>`.
    fn spawn_logged(
        &self,
        ctx: &NodeContext<'_>,
        mut cmd: Command,
        log: &str,
        cgroup: &str,
    ) -> Result<Child> {
        let log = std::fs::File::create(self.dir.join(log))?;
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        ctx.spawner.spawn(
            &self.ns,
            Some(&self.mount_ns()),
            self.root_dir().as_deref(),
            &self.cgroup.procs_files(cgroup)?,
            cmd,
        )
    }
}

impl Drop for KubeNode {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether this process runs in a chroot (fresh-machine-check runs the suite in one): its root
/// is not a mount point, so /proc/self/mountinfo, which lists mounts relative to the process's
/// root and skips those outside it, has no mount at `/`.
pub fn in_chroot() -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .is_ok_and(|m| !m.lines().any(|l| l.split(' ').nth(4) == Some("/")))
}

/// Unmounts a persistent mount-namespace file (lazily: nothing else may hold it by then).
pub(crate) fn unmount_ns_file(path: &Path) {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return;
    };
    // SAFETY: umount2 with a valid NUL-terminated path; failure (not mounted) is harmless.
    unsafe {
        libc::umount2(c.as_ptr(), libc::MNT_DETACH);
    }
}

/// The address family's InternalIP of a node, for routes.
pub(crate) fn node_addr(node: &KubeNode, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(node.v6())
    } else {
        IpAddr::V4(node.v4())
    }
}
