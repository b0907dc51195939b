//! The API effects of install, upgrade and uninstall: server-side apply of rendered objects
//! under one field manager, waiting for CRDs to be served and for workloads to be ready,
//! deleting, and reading and writing the release record. Everything here is a thin edge over
//! the pure parts (render, release), so what is applied is decided before anything is.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use serde_json::{Value, json};

use crate::diff::{self, Change};
use crate::release::{self, Release};
use crate::render::Document;

/// The field manager of everything `rivora` applies (what `kubectl get --show-managed-fields`
/// shows as owning the chart's fields).
pub const FIELD_MANAGER: &str = "rivora";

/// A client from `--kubeconfig`, else `$KUBECONFIG` / ~/.kube/config / the in-cluster config.
pub async fn connect(kubeconfig: Option<&std::path::Path>) -> Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .with_context(|| format!("kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no cluster: pass --kubeconfig, set KUBECONFIG or run in a Pod")?,
    };
    Client::try_from(config).context("building the API client")
}

/// Creates the release namespace when it does not exist (as `helm install --create-namespace`).
pub async fn ensure_namespace(client: &Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))?;
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}

/// Applies the CRDs and waits until each is Established (served), so the objects after them
/// (and the custom resources users create next) are accepted.
pub async fn apply_crds(client: &Client, crds: &[Document], timeout: Duration) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crds {
        api.patch(crd.name(), &pp, &Patch::Apply(&crd.object))
            .await
            .with_context(|| format!("applying {}", crd.describe()))?;
    }
    let deadline = Instant::now() + timeout;
    for crd in crds {
        loop {
            let current = api.get(crd.name()).await?;
            let established = current
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "{} is not Established after {}s (last conditions: {:?})",
                    crd.describe(),
                    timeout.as_secs(),
                    current.status.and_then(|s| s.conditions)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// The API for one rendered object (its kind looked up in discovery, so a kind the cluster
/// does not serve is named in the error).
async fn api_for(client: &Client, doc: &Document, namespace: &str) -> Result<Api<DynamicObject>> {
    let (group, version) = match doc.api_version().split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", doc.api_version()),
    };
    let gvk = GroupVersionKind::gvk(group, version, doc.kind());
    let (ar, caps) = discovery::pinned_kind(client, &gvk).await.map_err(|e| {
        anyhow!(
            "the cluster does not serve {} {} ({e}){}",
            doc.api_version(),
            doc.kind(),
            if group == "gateway.networking.k8s.io" {
                "; install the Gateway API CRDs first, or set gatewayAPI.gatewayClass.create=false"
            } else {
                ""
            }
        )
    })?;
    Ok(match caps.scope {
        Scope::Namespaced => {
            let ns = match doc.namespace() {
                "" => namespace,
                ns => ns,
            };
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        Scope::Cluster => Api::all_with(client.clone(), &ar),
    })
}

/// helm's ownership annotations, so `helm upgrade` could take the release over.
fn with_release_metadata(doc: &Document, release: &str, namespace: &str) -> Value {
    let mut obj = doc.object.clone();
    let meta = &mut obj["metadata"];
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    meta["annotations"]["meta.helm.sh/release-name"] = json!(release);
    meta["annotations"]["meta.helm.sh/release-namespace"] = json!(namespace);
    obj
}

/// Server-side applies every object, in order, under [`FIELD_MANAGER`] (forcing ownership of
/// the chart's fields; fields others own, e.g. status, are untouched).
pub async fn apply_objects(
    client: &Client,
    docs: &[Document],
    release: &str,
    namespace: &str,
    mut progress: impl FnMut(&Document),
) -> Result<()> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for doc in docs {
        let api = api_for(client, doc, namespace).await?;
        let obj = with_release_metadata(doc, release, namespace);
        api.patch(doc.name(), &pp, &Patch::Apply(&obj))
            .await
            .with_context(|| format!("applying {}", doc.describe()))?;
        progress(doc);
    }
    Ok(())
}

/// What applying `docs` and deleting `removed` would change in the cluster, object by object:
/// each object is applied as [`apply_objects`] applies it, but as a server-side dry run, and the
/// result compared with the live object, so drift from the chart (a ClusterRole someone edited)
/// shows as the change the upgrade makes. An object not live (or of a kind not served yet) is
/// created; a removed one that is live is deleted.
pub async fn plan_objects(
    client: &Client,
    docs: &[Document],
    removed: &[Document],
    release: &str,
    namespace: &str,
) -> Result<Vec<Change>> {
    let pp = PatchParams::apply(FIELD_MANAGER).force().dry_run();
    let mut changes = Vec::new();
    for doc in docs {
        let Ok(api) = api_for(client, doc, namespace).await else {
            changes.push(Change::Added(doc.describe()));
            continue;
        };
        let live = api
            .get_opt(doc.name())
            .await
            .with_context(|| format!("reading {}", doc.describe()))?;
        let Some(live) = live else {
            changes.push(Change::Added(doc.describe()));
            continue;
        };
        let obj = with_release_metadata(doc, release, namespace);
        let applied = api
            .patch(doc.name(), &pp, &Patch::Apply(&obj))
            .await
            .with_context(|| format!("applying {} (dry run)", doc.describe()))?;
        let (before, after) = (
            serde_json::to_value(&live)?,
            serde_json::to_value(&applied)?,
        );
        changes.extend(diff::live_change(doc.describe(), &before, &after));
    }
    for doc in removed.iter().filter(|d| !d.kept()) {
        let Ok(api) = api_for(client, doc, namespace).await else {
            continue;
        };
        if api.get_opt(doc.name()).await?.is_some() {
            changes.push(Change::Removed(doc.describe()));
        }
    }
    Ok(changes)
}

/// Deletes objects (in the given order; NotFound is fine), in the background (the garbage
/// collector removes a DaemonSet's Pods after it, as `kubectl delete` does). Objects marked
/// `helm.sh/resource-policy: keep` are left where they are, as Helm leaves them.
pub async fn delete_objects(
    client: &Client,
    docs: &[Document],
    namespace: &str,
    mut progress: impl FnMut(&Document),
) -> Result<()> {
    for doc in docs {
        if doc.kept() {
            eprintln!("✓ kept {} (helm.sh/resource-policy: keep)", doc.describe());
            continue;
        }
        let api = match api_for(client, doc, namespace).await {
            Ok(api) => api,
            // Its kind is gone (e.g. the Gateway API CRDs were removed): nothing to delete.
            Err(_) => continue,
        };
        match api.delete(doc.name(), &DeleteParams::background()).await {
            Ok(_) => progress(doc),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting {}", doc.describe())),
        }
    }
    Ok(())
}

/// The Gateways (`namespace/name`) whose `gatewayClassName` is `class`: a GatewayClass they use
/// is kept by `rivora uninstall`. None when the Gateway API is not served.
pub async fn gateways_of_class(client: &Client, class: &str) -> Result<Vec<String>> {
    let api: Api<gateway_api::gateways::Gateway> = Api::all(client.clone());
    let list = match api.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Vec::new()),
        Err(e) => return Err(e).context("listing the Gateways that may use the GatewayClass"),
    };
    Ok(list
        .items
        .into_iter()
        .filter(|g| g.spec.gateway_class_name == class)
        .map(|g| {
            format!(
                "{}/{}",
                g.metadata.namespace.unwrap_or_default(),
                g.metadata.name.unwrap_or_default()
            )
        })
        .collect())
}

/// Every stored revision of release `name` in `namespace`.
pub async fn read_releases(client: &Client, namespace: &str, name: &str) -> Result<Vec<Release>> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default().labels(&release::selector(name)))
        .await
        .with_context(|| format!("listing release records in {namespace}"))?;
    list.items
        .iter()
        .filter(|s| s.type_.as_deref() == Some(release::SECRET_TYPE))
        .map(Release::from_secret)
        .collect()
}

/// Writes (creates or replaces) a revision's record.
pub async fn write_release(client: &Client, r: &Release) -> Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &r.namespace);
    let mut secret = serde_json::to_value(r.to_secret()?)?;
    secret["apiVersion"] = json!("v1");
    secret["kind"] = json!("Secret");
    api.patch(
        &r.secret_name(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&secret),
    )
    .await
    .with_context(|| format!("writing release record {}", r.secret_name()))?;
    Ok(())
}

/// Deletes every record of release `name`.
pub async fn delete_releases(client: &Client, namespace: &str, name: &str) -> Result<usize> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default().labels(&release::selector(name)))
        .await?;
    let mut n = 0;
    for s in list.items {
        let sname = s.metadata.name.unwrap_or_default();
        match api.delete(&sname, &DeleteParams::default()).await {
            Ok(_) => n += 1,
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting {sname}")),
        }
    }
    Ok(n)
}

/// Readiness of one workload, for `--wait` and its progress line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// `DaemonSet ns/rivorad`.
    pub what: String,
    /// Pods wanted.
    pub desired: i32,
    /// Pods of the current revision.
    pub updated: i32,
    /// Pods ready.
    pub ready: i32,
    /// The controller saw the latest spec.
    pub observed: bool,
}

impl Readiness {
    /// Done: every wanted Pod is of the current revision and ready.
    pub fn done(&self) -> bool {
        self.observed && self.updated >= self.desired && self.ready >= self.desired
    }
}

impl std::fmt::Display for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}/{} ready, {}/{} updated{}",
            self.what,
            self.ready,
            self.desired,
            self.updated,
            self.desired,
            if self.observed {
                ""
            } else {
                " (spec not yet observed)"
            }
        )
    }
}

/// DaemonSet readiness from its status.
pub fn daemonset_readiness(ds: &DaemonSet) -> Readiness {
    let st = ds.status.clone().unwrap_or_default();
    Readiness {
        what: format!(
            "DaemonSet {}/{}",
            ds.metadata.namespace.as_deref().unwrap_or_default(),
            ds.metadata.name.as_deref().unwrap_or_default()
        ),
        desired: st.desired_number_scheduled,
        updated: st.updated_number_scheduled.unwrap_or(0),
        ready: st.number_ready,
        observed: st.observed_generation.unwrap_or(0) >= ds.metadata.generation.unwrap_or(0)
            && ds.status.is_some(),
    }
}

/// Deployment readiness from its status.
pub fn deployment_readiness(d: &Deployment) -> Readiness {
    let st = d.status.clone().unwrap_or_default();
    Readiness {
        what: format!(
            "Deployment {}/{}",
            d.metadata.namespace.as_deref().unwrap_or_default(),
            d.metadata.name.as_deref().unwrap_or_default()
        ),
        desired: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        updated: st.updated_replicas.unwrap_or(0),
        ready: st.ready_replicas.unwrap_or(0),
        observed: st.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
            && d.status.is_some(),
    }
}

/// Polls the release's DaemonSets and Deployments until all are ready, reporting each change
/// through `progress`; fails after `timeout` with what was last seen.
pub async fn wait_ready(
    client: &Client,
    docs: &[Document],
    namespace: &str,
    timeout: Duration,
    mut progress: impl FnMut(&[Readiness]),
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last: Vec<Readiness> = Vec::new();
    loop {
        let mut now = Vec::new();
        for doc in docs {
            let ns = match doc.namespace() {
                "" => namespace,
                ns => ns,
            };
            match doc.kind() {
                "DaemonSet" => {
                    let api: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
                    now.push(daemonset_readiness(&api.get(doc.name()).await?));
                }
                "Deployment" => {
                    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
                    now.push(deployment_readiness(&api.get(doc.name()).await?));
                }
                _ => {}
            }
        }
        if now != last {
            progress(&now);
            last = now;
        }
        if last.iter().all(Readiness::done) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let waiting: Vec<String> = last
                .iter()
                .filter(|r| !r.done())
                .map(|r| r.to_string())
                .collect();
            bail!(
                "not ready after {}s: {}",
                timeout.as_secs(),
                waiting.join("; ")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
