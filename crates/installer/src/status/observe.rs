//! The API reads of `rivora status`: the only async part. Each read's failure is kept in its
//! [`Lookup`] (a missing object or CRD, a forbidden list) so one failed read never hides the
//! others; [`super::evaluate`] turns them into problems.

use std::collections::BTreeSet;

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client};
use rivora_k8s_api::class::{ClassConfig, is_ours};
use rivora_k8s_api::{AddressPool, RivoraNode};

use super::report::{CONTROLLER_NAME, RIVORAD_NAME};
use super::{LeaseRef, Lookup, Observed};

/// Whether an API error says the object (or, for a list, the resource type) does not exist.
fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn one<T>(r: kube::Result<Option<T>>) -> Lookup<T> {
    match r {
        Ok(Some(t)) => Lookup::Found(t),
        Ok(None) => Lookup::Missing,
        Err(e) if not_found(&e) => Lookup::Missing,
        Err(e) => Lookup::Unreadable(e.to_string()),
    }
}

fn list<T: Clone>(r: kube::Result<kube::api::ObjectList<T>>) -> Lookup<Vec<T>> {
    match r {
        Ok(l) => Lookup::Found(l.items),
        Err(e) if not_found(&e) => Lookup::Missing,
        Err(e) => Lookup::Unreadable(e.to_string()),
    }
}

/// The label selector of the rivorad Pods: the DaemonSet's own, or the chart's labels.
fn pod_selector(ds: &Lookup<DaemonSet>) -> String {
    ds.found()
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.selector.match_labels.as_ref())
        .filter(|m| !m.is_empty())
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_else(|| {
            format!("app.kubernetes.io/name=rivora,app.kubernetes.io/component={RIVORAD_NAME}")
        })
}

/// Reads Observed from the cluster (namespace = the release namespace; `class` selects our
/// Services, class-less ones too when the release is the default class, and our Gateways).
/// The controller's Lease is the one the Deployment's arguments name, else `lease` (from the
/// release's values). Missing CRDs/objects are reported as findings, not errors.
pub async fn observe(
    client: &kube::Client,
    namespace: &str,
    class: &ClassConfig,
    chart_version: Option<String>,
    lease: LeaseRef,
) -> anyhow::Result<Observed> {
    let gateway_controller_name = class.gateway_controller.as_str();
    let c: &Client = client;
    let daemonsets: Api<DaemonSet> = Api::namespaced(c.clone(), namespace);
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), namespace);
    let lp = ListParams::default();

    let (daemonset, deployment, nodes, pools, services) = futures::join!(
        async { one(daemonsets.get_opt(RIVORAD_NAME).await) },
        async { one(deployments.get_opt(CONTROLLER_NAME).await) },
        async { list(Api::<RivoraNode>::all(c.clone()).list(&lp).await) },
        async { list(Api::<AddressPool>::all(c.clone()).list(&lp).await) },
        async { list(Api::<Service>::all(c.clone()).list(&lp).await) },
    );
    let lease_ref = deployment
        .found()
        .and_then(|d| LeaseRef::from_deployment(d, namespace))
        .unwrap_or(lease);
    let leases: Api<Lease> = Api::namespaced(c.clone(), &lease_ref.namespace);
    let pods_params = ListParams::default().labels(&pod_selector(&daemonset));
    let (lease, rivorad_pods, classes, gateways) = futures::join!(
        async { one(leases.get_opt(&lease_ref.name).await) },
        async {
            list(
                Api::<Pod>::namespaced(c.clone(), namespace)
                    .list(&pods_params)
                    .await,
            )
        },
        async { list(Api::<GatewayClass>::all(c.clone()).list(&lp).await) },
        async { list(Api::<Gateway>::all(c.clone()).list(&lp).await) },
    );

    let services = match services {
        Lookup::Found(all) => {
            Lookup::Found(all.into_iter().filter(|s| is_ours(s, class)).collect())
        }
        other => other,
    };
    let gateways = match (classes, gateways) {
        (Lookup::Found(classes), Lookup::Found(gateways)) => {
            let ours: BTreeSet<String> = classes
                .into_iter()
                .filter(|gc| gc.spec.controller_name == gateway_controller_name)
                .filter_map(|gc| gc.metadata.name)
                .collect();
            Lookup::Found(
                gateways
                    .into_iter()
                    .filter(|g| ours.contains(&g.spec.gateway_class_name))
                    .collect(),
            )
        }
        (Lookup::Unreadable(e), _) | (_, Lookup::Unreadable(e)) => Lookup::Unreadable(e),
        _ => Lookup::Missing,
    };

    Ok(Observed {
        namespace: namespace.to_string(),
        chart_version,
        now: Timestamp::now(),
        daemonset,
        deployment,
        lease_ref,
        lease,
        rivorad_pods,
        nodes,
        pools,
        services,
        gateways,
    })
}
