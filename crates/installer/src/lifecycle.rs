//! install, upgrade and uninstall as sequences of the pure steps (values, render, diff) and the
//! API effects (apply), so the order is in one place: CRDs, then the objects, then the record.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use kube::Client;
use serde_json::Value;

use crate::apply;
use crate::chart::Chart;
use crate::diff;
use crate::release::{self, Release};
use crate::render::{self, Document, Manifest, ReleaseInfo};
use crate::{ValueInputs, effective_values};

/// Where and what to install, from the command line.
#[derive(Debug, Clone)]
pub struct Target {
    /// Release name.
    pub release: String,
    /// Release namespace.
    pub namespace: String,
}

/// How long to wait, and whether to wait for the workloads at all.
#[derive(Debug, Clone, Copy)]
pub struct Waiting {
    /// Wait for the DaemonSet and Deployment to be ready.
    pub wait: bool,
    /// Bound on each wait (CRDs Established, workloads ready).
    pub timeout: Duration,
}

fn spinner(msg: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("a valid template"));
    pb.enable_steady_tick(Duration::from_millis(120));
    pb.set_message(msg.to_string());
    pb
}

/// Renders for a release without touching the cluster (install --dry-run).
pub fn render_for(chart: &Chart, user: &Value, target: &Target, revision: u32) -> Result<Manifest> {
    release::check_name(&target.release)?;
    let values = effective_values(chart, user)?;
    render::render(
        chart,
        &values,
        &ReleaseInfo {
            name: target.release.clone(),
            namespace: target.namespace.clone(),
            revision,
            is_install: revision == 1,
        },
    )
}

/// Installs: refuses when the release exists (use upgrade), applies the CRDs and waits until
/// they are served, applies the objects, records the release, then optionally waits.
pub async fn install(
    client: &Client,
    chart: &Chart,
    inputs: &ValueInputs,
    extra_crds: &[Document],
    target: &Target,
    waiting: Waiting,
) -> Result<Manifest> {
    let user = inputs.user_values()?;
    let manifest = render_for(chart, &user, target, 1)?;
    apply::ensure_namespace(client, &target.namespace).await?;
    if let Some(r) =
        release::latest(apply::read_releases(client, &target.namespace, &target.release).await?)
    {
        bail!(
            "release {} already exists in {} (revision {}, chart {}): use `rivora upgrade`",
            target.release,
            target.namespace,
            r.version,
            r.chart.metadata.version
        );
    }
    apply_manifest(client, &manifest, extra_crds, target, waiting).await?;
    let record = Release::new(
        &target.release,
        &target.namespace,
        1,
        chart,
        user,
        manifest.objects_yaml(),
        manifest.notes.clone(),
        None,
        "Install complete",
    );
    apply::write_release(client, &record).await?;
    wait(client, &manifest, target, waiting).await?;
    Ok(manifest)
}

async fn apply_manifest(
    client: &Client,
    manifest: &Manifest,
    extra_crds: &[Document],
    target: &Target,
    waiting: Waiting,
) -> Result<()> {
    let crds: Vec<Document> = extra_crds.iter().chain(&manifest.crds).cloned().collect();
    let pb = spinner(&format!("applying {} CRDs", crds.len()));
    apply::apply_crds(client, &crds, waiting.timeout).await?;
    pb.println(format!("✓ {} CRDs applied and served", crds.len()));
    apply::apply_objects(
        client,
        &manifest.objects,
        &target.release,
        &target.namespace,
        |d| {
            pb.set_message(format!("applied {}", d.describe()));
        },
    )
    .await?;
    pb.finish_and_clear();
    eprintln!(
        "✓ {} objects applied (field manager {})",
        manifest.objects.len(),
        apply::FIELD_MANAGER
    );
    Ok(())
}

async fn wait(
    client: &Client,
    manifest: &Manifest,
    target: &Target,
    waiting: Waiting,
) -> Result<()> {
    if !waiting.wait {
        return Ok(());
    }
    let pb = spinner("waiting for the workloads");
    let result = apply::wait_ready(
        client,
        &manifest.objects,
        &target.namespace,
        waiting.timeout,
        |now| {
            let line: Vec<String> = now.iter().map(|r| r.to_string()).collect();
            pb.set_message(line.join("; "));
        },
    )
    .await;
    pb.finish_and_clear();
    result?;
    eprintln!("✓ every DaemonSet and Deployment is ready");
    Ok(())
}

/// What an upgrade was asked to do with the recorded values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValuesMode {
    /// Merge the new `-f`/`--set` over the recorded user values (the default, as cilium-cli).
    Reuse,
    /// Start from the chart's defaults (helm's `--reset-values`).
    Reset,
}

/// The outcome of an upgrade: what changed, and whether it was applied.
#[derive(Debug)]
pub struct UpgradePlan {
    /// The revision this upgrade writes.
    pub revision: u32,
    /// Object changes (printed before applying).
    pub changes: Vec<diff::Change>,
    /// The new manifest.
    pub manifest: Manifest,
}

/// How an upgrade treats the recorded values and whether it applies anything.
#[derive(Debug, Clone, Copy)]
pub struct UpgradeMode {
    /// Reuse or reset the recorded values.
    pub values: ValuesMode,
    /// Only compute the diff.
    pub dry_run: bool,
}

/// Upgrades: renders with the recorded values (plus the new ones), computes what applying it
/// changes in the live objects (a server-side dry run, so drift is seen), and unless `dry_run`
/// applies the CRDs and objects, deletes objects no longer rendered (never CRDs
/// or custom resources) and records the new revision.
pub async fn upgrade(
    client: &Client,
    chart: &Chart,
    inputs: &ValueInputs,
    extra_crds: &[Document],
    how: UpgradeMode,
    target: &Target,
    waiting: Waiting,
) -> Result<UpgradePlan> {
    let (mode, dry_run) = (how.values, how.dry_run);
    let releases = apply::read_releases(client, &target.namespace, &target.release).await?;
    let Some(previous) = release::latest(releases) else {
        bail!(
            "no release {} in namespace {}: use `rivora install`",
            target.release,
            target.namespace
        );
    };
    let mut user = match mode {
        ValuesMode::Reuse => previous.config.clone(),
        ValuesMode::Reset => Value::Object(Default::default()),
    };
    crate::values::merge(&mut user, &inputs.user_values()?);
    let revision = previous.version + 1;
    let manifest = render_for(chart, &user, target, revision)?;
    let old = render::split_documents("previous", &previous.manifest)
        .context("reading the previous revision's manifest")?;
    let removed: Vec<_> = old
        .iter()
        .filter(|o| {
            !manifest
                .objects
                .iter()
                .any(|n| n.api_version() == o.api_version() && n.describe() == o.describe())
        })
        .cloned()
        .collect();
    // Against the live objects, not the previous manifest: what the apply below changes,
    // drift from the chart included.
    let changes = apply::plan_objects(
        client,
        &manifest.objects,
        &removed,
        &target.release,
        &target.namespace,
    )
    .await?;
    if dry_run {
        return Ok(UpgradePlan {
            revision,
            changes,
            manifest,
        });
    }
    apply_manifest(client, &manifest, extra_crds, target, waiting).await?;
    apply::delete_objects(client, &removed, &target.namespace, |d| {
        eprintln!("✓ deleted {}", d.describe());
    })
    .await?;
    let mut superseded = previous.clone();
    superseded.info.status = release::ReleaseStatus::Superseded;
    apply::write_release(client, &superseded).await?;
    let record = Release::new(
        &target.release,
        &target.namespace,
        revision,
        chart,
        user,
        manifest.objects_yaml(),
        manifest.notes.clone(),
        Some(previous.info.first_deployed.clone()),
        "Upgrade complete",
    );
    apply::write_release(client, &record).await?;
    wait(client, &manifest, target, waiting).await?;
    Ok(UpgradePlan {
        revision,
        changes,
        manifest,
    })
}

/// What `rivora uninstall` may delete beyond the release's own objects.
#[derive(Debug, Clone, Copy, Default)]
pub struct UninstallMode {
    /// Delete the CRDs too (and with them every custom resource of theirs).
    pub delete_crds: bool,
    /// Delete the chart's GatewayClass even while Gateways use it.
    pub delete_gateway_class: bool,
}

/// Whether `doc` is a GatewayClass (which Gateways outside the release may use).
pub fn is_gateway_class(doc: &Document) -> bool {
    doc.kind() == "GatewayClass" && doc.api_version().starts_with("gateway.networking.k8s.io/")
}

/// The objects to delete and the ones kept with the reason: a GatewayClass that Gateways use
/// (`users`: the Gateways of each class) is kept unless `delete_gateway_class`, since deleting
/// it strands them (no controller serves a Gateway of a missing class, so they lose their
/// addresses and traffic).
pub fn partition_for_uninstall(
    docs: Vec<Document>,
    users: &std::collections::BTreeMap<String, Vec<String>>,
    delete_gateway_class: bool,
) -> (Vec<Document>, Vec<(Document, String)>) {
    let mut delete = Vec::new();
    let mut kept = Vec::new();
    for d in docs {
        let gateways = users.get(d.name()).filter(|g| !g.is_empty());
        match gateways {
            Some(g) if is_gateway_class(&d) && !delete_gateway_class => {
                let why = format!(
                    "Gateways use it ({}): delete them first, then `kubectl delete gatewayclass {}`, \
                     or uninstall with --delete-gateway-class",
                    g.join(", "),
                    d.name()
                );
                kept.push((d, why));
            }
            _ => delete.push(d),
        }
    }
    (delete, kept)
}

/// Uninstalls: deletes the recorded objects in reverse install order and the release records;
/// the CRDs (and with them every custom resource of theirs) only when `how.delete_crds`, and a
/// GatewayClass that Gateways use only when `how.delete_gateway_class` (kept and said why
/// otherwise).
pub async fn uninstall(
    client: &Client,
    chart: &Chart,
    target: &Target,
    how: UninstallMode,
) -> Result<()> {
    let delete_crds = how.delete_crds;
    let releases = apply::read_releases(client, &target.namespace, &target.release).await?;
    match release::latest(releases) {
        Some(latest) => {
            let mut docs = render::split_documents("manifest", &latest.manifest)?;
            docs.reverse();
            let mut users = std::collections::BTreeMap::new();
            for d in docs.iter().filter(|d| is_gateway_class(d)) {
                users.insert(
                    d.name().to_string(),
                    apply::gateways_of_class(client, d.name()).await?,
                );
            }
            let (docs, kept) = partition_for_uninstall(docs, &users, how.delete_gateway_class);
            apply::delete_objects(client, &docs, &target.namespace, |d| {
                eprintln!("✓ deleted {}", d.describe())
            })
            .await?;
            for (d, why) in &kept {
                eprintln!("kept {}: {why}", d.describe());
            }
            let n = apply::delete_releases(client, &target.namespace, &target.release).await?;
            eprintln!("✓ deleted {n} release records");
        }
        // Nothing installed any more (an earlier uninstall): only the CRDs are left to delete.
        None if delete_crds => eprintln!(
            "no release {} in {}: deleting only the CRDs",
            target.release, target.namespace
        ),
        None => bail!(
            "no release {} in namespace {}",
            target.release,
            target.namespace
        ),
    }
    if delete_crds {
        let crds: Vec<_> = chart
            .crd_files()
            .map(|(p, t)| render::split_documents(p, t))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect();
        apply::delete_objects(client, &crds, &target.namespace, |d| {
            eprintln!("✓ deleted {}", d.describe())
        })
        .await?;
    } else {
        eprintln!(
            "kept the CRDs (and every AddressPool, ServicePolicy, BGPPeer and RivoraNode): \
             `rivora uninstall --delete-crds` removes them and all their objects"
        );
    }
    Ok(())
}

/// The group whose CRDs `--gateway-api-crds` may apply.
const GATEWAY_API_GROUP: &str = "gateway.networking.k8s.io";

/// Reads `--gateway-api-crds` paths (files, or directories of `*.yaml`, e.g. upstream's
/// `standard-install.yaml` or `config/crd/standard`): their Gateway API CRDs, other documents
/// (upstream ships a ValidatingAdmissionPolicy beside them) skipped. Any other CRD, or a path
/// without a Gateway API CRD, is refused: this flag installs Gateway API and nothing else.
pub fn read_gateway_api_crds(paths: &[std::path::PathBuf]) -> Result<Vec<Document>> {
    let mut out = Vec::new();
    for path in paths {
        let files = if path.is_dir() {
            let mut v: Vec<_> = std::fs::read_dir(path)
                .with_context(|| format!("--gateway-api-crds {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
                .collect();
            v.sort();
            v
        } else {
            vec![path.clone()]
        };
        let before = out.len();
        for file in files {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("--gateway-api-crds: reading {}", file.display()))?;
            for d in render::split_documents(&file.display().to_string(), &text)? {
                if d.kind() != "CustomResourceDefinition" {
                    continue;
                }
                let group = d.object["spec"]["group"].as_str().unwrap_or_default();
                if group != GATEWAY_API_GROUP {
                    bail!(
                        "--gateway-api-crds {}: {} is of group {group:?}, not {GATEWAY_API_GROUP}",
                        file.display(),
                        d.describe()
                    );
                }
                out.push(d);
            }
        }
        if out.len() == before {
            bail!(
                "--gateway-api-crds {}: no Gateway API CustomResourceDefinition in it",
                path.display()
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_gateway_class_in_use_is_kept_unless_asked() {
        let docs = render::split_documents(
            "m",
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: rivora}\n\
             ---\napiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: idle}\n\
             ---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: rivora}\n",
        )
        .unwrap();
        let users = [
            ("rivora".to_string(), vec!["apps/web".to_string()]),
            ("idle".to_string(), vec![]),
        ]
        .into_iter()
        .collect();
        let (delete, kept) = partition_for_uninstall(docs.clone(), &users, false);
        let deleted: Vec<String> = delete.iter().map(Document::describe).collect();
        assert_eq!(deleted, ["GatewayClass idle", "ServiceAccount rivora"]);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].0.describe(), "GatewayClass rivora");
        assert!(
            kept[0].1.contains("Gateways use it (apps/web)"),
            "{}",
            kept[0].1
        );
        assert!(
            kept[0].1.contains("--delete-gateway-class"),
            "{}",
            kept[0].1
        );
        let (delete, kept) = partition_for_uninstall(docs, &users, true);
        assert_eq!(delete.len(), 3);
        assert!(kept.is_empty());
    }

    #[test]
    fn gateway_api_crds_only() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let e = read_gateway_api_crds(&[repo.join("deploy/chart/crds")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("of group \"rivora.dev\", not gateway.networking.k8s.io"),
            "{e}"
        );
        let e = read_gateway_api_crds(&[repo.join("deploy/rbac")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("no Gateway API CustomResourceDefinition"),
            "{e:#}"
        );
        assert!(read_gateway_api_crds(&[]).unwrap().is_empty());
    }
}
