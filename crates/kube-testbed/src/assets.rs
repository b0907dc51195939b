//! Where the test bed finds etcd, kube-apiserver, helm and the Gateway API CRDs, and a test
//! cluster its controller-manager, scheduler, kubelet, containerd, runc and CNI plugins.
//!
//! Why the versions come from `scripts/testdeps/*/go.mod` at compile time: that file is what
//! `scripts/build-testdeps.sh` builds from, so the two can never disagree about which cache
//! directory holds the binaries (a version bump in go.mod makes tests look for the new build).

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

const KUBERNETES_GO_MOD: &str = include_str!("../../../scripts/testdeps/kubernetes/go.mod");
const CONTAINERD_GO_MOD: &str = include_str!("../../../scripts/testdeps/containerd/go.mod");
const ETCD_GO_MOD: &str = include_str!("../../../scripts/testdeps/etcd/go.mod");
const GATEWAY_API_GO_MOD: &str = include_str!("../../../scripts/testdeps/gateway-api/go.mod");
const HELM_GO_MOD: &str = include_str!("../../../scripts/testdeps/helm/go.mod");
const CONFORMANCE_GO_MOD: &str =
    include_str!("../../../scripts/testdeps/gateway-conformance/go.mod");

/// Environment variable that moves the cache (the build script honours the same one).
pub const TESTDEPS_DIR_ENV: &str = "RIVORA_TESTDEPS_DIR";

/// The Gateway API release channel whose CRDs to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayChannel {
    /// `config/crd/standard`: TCPRoute/UDPRoute v1 only (v1alpha2 not served).
    Standard,
    /// `config/crd/experimental`: also the experimental kinds and versions.
    Experimental,
}

/// Located test dependencies, all checked to exist.
#[derive(Debug, Clone)]
pub struct Assets {
    /// The kube-apiserver binary.
    pub kube_apiserver: PathBuf,
    /// The etcd binary.
    pub etcd: PathBuf,
    /// `k8s.io/kubernetes` version it was built from (e.g. `v1.35.4`).
    pub kubernetes_version: String,
    /// etcd version (e.g. `v3.6.16`).
    pub etcd_version: String,
    /// Directory holding `standard/` and `experimental/` Gateway API CRD YAML files.
    pub gateway_api_crds: PathBuf,
    /// Gateway API version (e.g. `v1.6.3`).
    pub gateway_api_version: String,
    /// Where the helm binary is built (not checked by `locate`: only the chart tests need it, and
    /// they call [`Assets::helm`], which is).
    helm: PathBuf,
    /// `helm.sh/helm/v3` version it was built from (e.g. `v3.21.4`).
    pub helm_version: String,
}

impl Assets {
    /// Finds the binaries in the cache, or fails saying how to build them.
    pub fn locate() -> Result<Assets> {
        let cache = cache_dir();
        let kubernetes_version = required_version(KUBERNETES_GO_MOD, "k8s.io/kubernetes")?;
        let etcd_version = required_version(ETCD_GO_MOD, "go.etcd.io/etcd/server/v3")?;
        let gateway_api_version = required_version(GATEWAY_API_GO_MOD, "sigs.k8s.io/gateway-api")?;
        let kube_apiserver = cache
            .join(format!("kube-apiserver-{kubernetes_version}"))
            .join("kube-apiserver");
        let etcd = cache.join(format!("etcd-{etcd_version}")).join("etcd");
        let gateway_api_crds = cache.join(format!("gateway-api-{gateway_api_version}"));
        let helm_version = required_version(HELM_GO_MOD, "helm.sh/helm/v3")?;
        let helm = cache.join(format!("helm-{helm_version}")).join("helm");
        let missing: Vec<String> = [&kube_apiserver, &etcd, &gateway_api_crds.join("standard")]
            .iter()
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            bail!(
                "the Kubernetes test dependencies are not built: missing {}. Run \
                 `scripts/build-testdeps.sh` (or scripts/setup.sh --with-testdeps, which scripts/test runs) once; it builds kube-apiserver \
                 {kubernetes_version} and etcd {etcd_version} from their Go modules into {} \
                 (needs Go >= 1.26 and the Go module proxy)",
                missing.join(", "),
                cache.display()
            );
        }
        Ok(Assets {
            kube_apiserver,
            etcd,
            kubernetes_version,
            etcd_version,
            gateway_api_crds,
            gateway_api_version,
            helm,
            helm_version,
        })
    }

    /// The helm binary, which only the chart tests use (to compare `rivora`'s renderer with
    /// `helm template` and to run `helm lint`), or an error saying how to build it.
    pub fn helm(&self) -> Result<&Path> {
        if !self.helm.exists() {
            bail!(
                "helm {} is not built: missing {}. Run `scripts/build-testdeps.sh` once (scripts/test \
                 does); it builds helm from scripts/testdeps/helm/go.mod",
                self.helm_version,
                self.helm.display()
            );
        }
        Ok(&self.helm)
    }

    /// The CRD YAML files of one Gateway API channel, sorted by name.
    pub fn gateway_api_crd_files(&self, channel: GatewayChannel) -> Result<Vec<PathBuf>> {
        let dir = self.gateway_api_crds.join(match channel {
            GatewayChannel::Standard => "standard",
            GatewayChannel::Experimental => "experimental",
        });
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&dir)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", dir.display()))?
        {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "yaml") && is_crd_file(&path) {
                files.push(path);
            }
        }
        files.sort();
        Ok(files)
    }
}

/// What a test cluster runs beyond the API server and etcd, all checked to exist.
#[derive(Debug, Clone)]
pub struct NodeAssets {
    /// kube-controller-manager (same `k8s.io/kubernetes` version as the API server).
    pub kube_controller_manager: PathBuf,
    /// kube-scheduler.
    pub kube_scheduler: PathBuf,
    /// kubelet.
    pub kubelet: PathBuf,
    /// The directory with containerd, containerd-shim-runc-v2 and ctr (containerd finds its
    /// shim on PATH, so this directory goes first on containerd's PATH).
    pub containerd_dir: PathBuf,
    /// containerd version (e.g. `v2.4.2`).
    pub containerd_version: String,
    /// Debian's runc.
    pub runc: PathBuf,
    /// Debian's CNI plugins (ptp, host-local, loopback).
    pub cni_bin_dir: PathBuf,
}

impl NodeAssets {
    /// Finds them, or fails naming what is missing and how to get it.
    pub fn locate() -> Result<NodeAssets> {
        let cache = cache_dir();
        let k8s = required_version(KUBERNETES_GO_MOD, "k8s.io/kubernetes")?;
        let containerd_version =
            required_version(CONTAINERD_GO_MOD, "github.com/containerd/containerd/v2")?;
        let component = |name: &str| cache.join(format!("{name}-{k8s}")).join(name);
        let containerd_dir = cache.join(format!("containerd-{containerd_version}"));
        let runc = ["/usr/sbin/runc", "/usr/bin/runc"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("/usr/sbin/runc"));
        let assets = NodeAssets {
            kube_controller_manager: component("kube-controller-manager"),
            kube_scheduler: component("kube-scheduler"),
            kubelet: component("kubelet"),
            containerd_dir,
            containerd_version,
            runc,
            cni_bin_dir: PathBuf::from("/usr/lib/cni"),
        };
        let built: Vec<String> = [
            assets.kube_controller_manager.clone(),
            assets.kube_scheduler.clone(),
            assets.kubelet.clone(),
            assets.containerd(),
            assets.containerd_dir.join("containerd-shim-runc-v2"),
            assets.ctr(),
        ]
        .iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
        if !built.is_empty() {
            bail!(
                "the test cluster's components are not built: missing {}. Run \
                 `scripts/build-testdeps.sh` once (scripts/test does); it builds them from \
                 scripts/testdeps/{{kubernetes,containerd}}/go.mod into {}",
                built.join(", "),
                cache.display()
            );
        }
        let packaged: Vec<String> = [assets.runc.clone(), assets.cni_bin_dir.join("ptp")]
            .iter()
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !packaged.is_empty() {
            bail!(
                "the test cluster's runtime packages are missing: {}. Run scripts/setup.sh as \
                 root (it installs Debian's runc and containernetworking-plugins)",
                packaged.join(", ")
            );
        }
        Ok(assets)
    }

    /// The containerd daemon.
    pub fn containerd(&self) -> PathBuf {
        self.containerd_dir.join("containerd")
    }

    /// ctr, containerd's client (image import).
    pub fn ctr(&self) -> PathBuf {
        self.containerd_dir.join("ctr")
    }
}

/// Gateway API's conformance suite as scripts/build-testdeps.sh builds it: the suite's test
/// binary, the backends its manifests run (echo-basic, CoreDNS) and the image references those
/// manifests name (`images.txt`, what `scripts/image conformance` builds from the backends).
#[derive(Debug, Clone)]
pub struct ConformanceAssets {
    /// The directory holding all of it (`gateway-conformance-<version>`).
    pub dir: PathBuf,
    /// `sigs.k8s.io/gateway-api/conformance` version (e.g. `v1.6.3`).
    pub version: String,
}

impl ConformanceAssets {
    /// Finds them, or fails naming what is missing and how to build it.
    pub fn locate() -> Result<ConformanceAssets> {
        let version = required_version(CONFORMANCE_GO_MOD, "sigs.k8s.io/gateway-api/conformance")?;
        let dir = cache_dir().join(format!("gateway-conformance-{version}"));
        let assets = ConformanceAssets { dir, version };
        let missing: Vec<String> = ["gateway-conformance", "echo-basic", "coredns", "images.txt"]
            .iter()
            .map(|f| assets.dir.join(f))
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            bail!(
                "the Gateway API conformance suite is not built: missing {}. Run \
                 `scripts/build-testdeps.sh` once (scripts/test does); it builds it from \
                 scripts/testdeps/{{gateway-conformance,coredns}}/go.mod",
                missing.join(", ")
            );
        }
        Ok(assets)
    }

    /// The suite's test binary (`go test -c`; flags as upstream's `go test ./conformance`).
    pub fn suite(&self) -> PathBuf {
        self.dir.join("gateway-conformance")
    }
}

/// Gateway API ships a ValidatingAdmissionPolicy next to its CRDs; only CRD files are wanted.
fn is_crd_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| !n.contains("_vap_"))
}

/// `${RIVORA_TESTDEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rivora/testdeps}`, like the script.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(TESTDEPS_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache")
        });
    base.join("rivora").join("testdeps")
}

/// The version `go_mod` requires for `module` (from a require line; replace and tool blocks are
/// skipped), as the build script's `required_version` reads it.
fn required_version(go_mod: &str, module: &str) -> Result<String> {
    let mut skip = false;
    for line in go_mod.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.first() {
            Some(&"replace") | Some(&"tool") => {
                skip = fields.get(1) == Some(&"(");
                continue;
            }
            Some(&")") => {
                skip = false;
                continue;
            }
            _ if skip => continue,
            _ => {}
        }
        for pair in fields.windows(2) {
            if pair[0] == module && pair[1].starts_with('v') {
                return Ok(pair[1].to_string());
            }
        }
    }
    bail!("no `require {module} vX` in scripts/testdeps go.mod")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_the_go_mod_files() {
        let k = required_version(KUBERNETES_GO_MOD, "k8s.io/kubernetes").unwrap();
        assert!(k.starts_with("v1.35."), "{k}");
        let e = required_version(ETCD_GO_MOD, "go.etcd.io/etcd/server/v3").unwrap();
        assert!(e.starts_with("v3.6."), "{e}");
        let g = required_version(GATEWAY_API_GO_MOD, "sigs.k8s.io/gateway-api").unwrap();
        assert!(g.starts_with("v1.6."), "{g}");
        let h = required_version(HELM_GO_MOD, "helm.sh/helm/v3").unwrap();
        assert!(h.starts_with("v3."), "{h}");
    }

    #[test]
    fn replace_lines_are_not_requirements() {
        let m = "module x\nreplace (\n\tk8s.io/api => k8s.io/api v0.1.0\n)\nrequire k8s.io/api v0.2.0 // indirect\n";
        assert_eq!(required_version(m, "k8s.io/api").unwrap(), "v0.2.0");
        assert!(required_version("module x\n", "k8s.io/api").is_err());
    }
}
