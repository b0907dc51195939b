//! The watches of the node agent (Services, EndpointSlices, ServicePolicies, this node's Node,
//! and Gateway API's GatewayClasses, Gateways, TCPRoutes, UDPRoutes, ReferenceGrants with the
//! Namespaces their `allowedRoutes` selectors read), and in BGP mode the BGPPeers and the
//! Secrets of one namespace (their passwords), with `--gateway` the Meridio-2 objects of the
//! served Gateway's namespace, each a reflector store, and what each has delivered so far.
//!
//! Why Gateway API kinds may be absent: a cluster without Gateway API's CRDs answers 404 to their
//! list. That is not a reason to hold the initial-sync gate forever, so a 404 on a kind of
//! [`Kind::OPTIONAL`] counts as an empty first list ([`WatchState::absent`]); the watch keeps
//! retrying, and once the CRDs are installed its objects arrive like any others.
//!
//! Why record the first full list: the initial-sync gate ([`crate::initsync`]) may only open
//! once every kind has been listed completely, and the keys of the first Service list are the
//! ones it waits for. kube's watcher says so with its first `InitDone`, after which the store
//! holds exactly that list.
//!
//! Nothing here blocks on the API server: building the client does not connect, the watches
//! retry with kube's default backoff, and a watch error is counted and shown, never fatal.
//! `managedFields` are stripped on the way in: every EndpointSlice of the cluster is stored,
//! and they are most of an object's size.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{Namespace, Node, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use rivora_k8s_api::meridio::{
    DISTRIBUTION_GROUP_LABEL, DistributionGroup, L34Route, LoadBalancerEndpointSlice,
};
use rivora_k8s_api::{BGPPeer, ServicePolicy, TcpRoute, UdpRoute};
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::backoff::{is_absent, with_backoff_woken};
use crate::initsync::Kind;
use crate::lenient::{BadObject, Decoded, Undecodable, decoded_event};
use crate::translate::ServiceKey;

/// The label that joins an EndpointSlice to its Service; slices without it are not watched.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What one watch has delivered: shown in `rivoractl status` and the metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchState {
    /// The keys (`namespace/name`) of the first full list, once it arrived.
    pub first_list: Option<Vec<ServiceKey>>,
    /// Events received (objects applied or deleted, list pages).
    pub events: u64,
    /// Watch errors (each followed by a retry after a backoff).
    pub errors: u64,
    /// The last error, until the next successful event.
    pub last_error: Option<String>,
    /// The API server does not serve the kind (404 on its list; only kinds of
    /// [`Kind::OPTIONAL`]): counted as listed and empty until it is served.
    pub absent: bool,
    /// Objects that do not decode (left out of the store, see lenient.rs), by
    /// `namespace/name`: their resourceVersion, uid and why.
    pub undecodable: BTreeMap<String, BadObject>,
}

/// The stores and their watch states.
#[derive(Clone)]
pub struct Stores {
    /// Every Service.
    pub services: Store<Service>,
    /// Every EndpointSlice with the [`SERVICE_NAME_LABEL`] label.
    pub slices: Store<EndpointSlice>,
    /// Every ServicePolicy.
    pub policies: Store<ServicePolicy>,
    /// This node's Node (at most one object).
    pub nodes: Store<Node>,
    /// Every GatewayClass.
    pub gateway_classes: Store<GatewayClass>,
    /// Every Gateway.
    pub gateways: Store<Gateway>,
    /// Every TCPRoute (v1).
    pub tcp_routes: Store<TcpRoute>,
    /// Every UDPRoute (v1).
    pub udp_routes: Store<UdpRoute>,
    /// Every ReferenceGrant.
    pub grants: Store<ReferenceGrant>,
    /// Every Namespace.
    pub namespaces: Store<Namespace>,
    /// Every BGPPeer (BGP mode only).
    pub bgp_peers: Option<Store<BGPPeer>>,
    /// The Secrets of the BGP passwords' namespace (BGP mode only; RBAC lets rivorad read no
    /// others).
    pub secrets: Option<Store<Secret>>,
    /// The served Meridio-2 Gateway's namespace's objects (`--gateway` only).
    pub meridio: Option<MeridioStores>,
    states: Arc<Mutex<Vec<(Kind, WatchState)>>>,
}

/// What a Meridio-2 Gateway's load balancer reads, from the Gateway's namespace only (as
/// Meridio-2's own load balancer caches it).
#[derive(Clone)]
pub struct MeridioStores {
    /// Its DistributionGroups.
    pub groups: Store<DistributionGroup>,
    /// Its L34Routes.
    pub routes: Store<L34Route>,
    /// Its LoadBalancerEndpointSlices.
    pub lb_slices: Store<LoadBalancerEndpointSlice>,
    /// Its EndpointSlices labelled with a distribution group (the older endpoint form).
    pub core_slices: Store<EndpointSlice>,
}

impl Stores {
    /// Starts the watches; `changed` is notified after every event and every error.
    /// `bgp_secrets`: in BGP mode, the namespace whose Secrets hold the BGP passwords (the
    /// BGPPeers and those Secrets are watched too).
    pub fn watch(
        client: &Client,
        node_name: &str,
        changed: Arc<Notify>,
        bgp_secrets: Option<&str>,
        meridio_namespace: Option<&str>,
    ) -> Stores {
        let kinds = Kind::ALL
            .iter()
            .chain(bgp_secrets.map(|_| Kind::BGP.iter()).into_iter().flatten())
            .chain(
                meridio_namespace
                    .map(|_| Kind::MERIDIO.iter())
                    .into_iter()
                    .flatten(),
            );
        let states = Arc::new(Mutex::new(
            kinds
                .map(|k| (*k, WatchState::default()))
                .collect::<Vec<_>>(),
        ));
        // A CRD appearing cuts short the wait of a kind whose CRD was absent (backoff.rs).
        let crds = crate::crds::watch_new(client.clone());
        let slices = watcher::Config::default().labels(SERVICE_NAME_LABEL);
        let nodes = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
        Stores {
            services: spawn(
                Kind::Service,
                Api::all(client.clone()),
                watcher::Config::default(),
                &states,
                &changed,
                &crds,
            ),
            slices: spawn(
                Kind::EndpointSlice,
                Api::all(client.clone()),
                slices,
                &states,
                &changed,
                &crds,
            ),
            policies: spawn(
                Kind::ServicePolicy,
                Api::all(client.clone()),
                watcher::Config::default(),
                &states,
                &changed,
                &crds,
            ),
            nodes: spawn(
                Kind::Node,
                Api::all(client.clone()),
                nodes,
                &states,
                &changed,
                &crds,
            ),
            gateway_classes: spawn(
                Kind::GatewayClass,
                Api::all(client.clone()),
                watcher::Config::default(),
                &states,
                &changed,
                &crds,
            ),
            gateways: spawn(
                Kind::Gateway,
                Api::all(client.clone()),
                watcher::Config::default(),
                &states,
                &changed,
                &crds,
            ),
            tcp_routes: spawn(
                Kind::TcpRoute,
                Api::all(client.clone()),
                watcher::Config::default(),
                &states,
                &changed,
                &crds,
            ),
            udp_routes: spawn(
                Kind::UdpRoute,
                Api::all(client.clone()),
                watcher::Config::default(),
                &states,
                &changed,
                &crds,
            ),
            grants: spawn(
                Kind::ReferenceGrant,
                Api::all(client.clone()),
                watcher::Config::default(),
                &states,
                &changed,
                &crds,
            ),
            namespaces: spawn(
                Kind::Namespace,
                Api::all(client.clone()),
                watcher::Config::default(),
                &states,
                &changed,
                &crds,
            ),
            bgp_peers: bgp_secrets.map(|_| {
                spawn(
                    Kind::BgpPeer,
                    Api::all(client.clone()),
                    watcher::Config::default(),
                    &states,
                    &changed,
                    &crds,
                )
            }),
            secrets: bgp_secrets.map(|ns| {
                spawn(
                    Kind::Secret,
                    Api::namespaced(client.clone(), ns),
                    watcher::Config::default(),
                    &states,
                    &changed,
                    &crds,
                )
            }),
            meridio: meridio_namespace.map(|ns| MeridioStores {
                groups: spawn(
                    Kind::DistributionGroup,
                    Api::namespaced(client.clone(), ns),
                    watcher::Config::default(),
                    &states,
                    &changed,
                    &crds,
                ),
                routes: spawn(
                    Kind::L34Route,
                    Api::namespaced(client.clone(), ns),
                    watcher::Config::default(),
                    &states,
                    &changed,
                    &crds,
                ),
                lb_slices: spawn(
                    Kind::LoadBalancerEndpointSlice,
                    Api::namespaced(client.clone(), ns),
                    watcher::Config::default(),
                    &states,
                    &changed,
                    &crds,
                ),
                core_slices: spawn(
                    Kind::GroupEndpointSlice,
                    Api::namespaced(client.clone(), ns),
                    watcher::Config::default().labels(DISTRIBUTION_GROUP_LABEL),
                    &states,
                    &changed,
                    &crds,
                ),
            }),
            states,
        }
    }

    /// Each watched kind's state, in [`Kind::ALL`] order (then [`Kind::BGP`]).
    pub fn states(&self) -> Vec<(Kind, WatchState)> {
        self.states.lock().expect("watch states").clone()
    }

    /// The objects each watch leaves out because they do not decode (kinds with none are
    /// left out): cheaper than [`Stores::states`], which copies the first lists.
    pub fn undecodable(&self) -> Vec<(Kind, BTreeMap<String, BadObject>)> {
        self.states
            .lock()
            .expect("watch states")
            .iter()
            .filter(|(_, s)| !s.undecodable.is_empty())
            .map(|(k, s)| (*k, s.undecodable.clone()))
            .collect()
    }

    /// The kinds watched.
    pub fn kinds(&self) -> Vec<Kind> {
        self.states().into_iter().map(|(k, _)| k).collect()
    }

    /// How many objects each watched kind's store holds, in [`Stores::states`] order.
    pub fn counts(&self) -> Vec<(Kind, usize)> {
        self.kinds()
            .iter()
            .map(|k| {
                let n = match k {
                    Kind::Service => self.services.len(),
                    Kind::EndpointSlice => self.slices.len(),
                    Kind::ServicePolicy => self.policies.len(),
                    Kind::Node => self.nodes.len(),
                    Kind::GatewayClass => self.gateway_classes.len(),
                    Kind::Gateway => self.gateways.len(),
                    Kind::TcpRoute => self.tcp_routes.len(),
                    Kind::UdpRoute => self.udp_routes.len(),
                    Kind::ReferenceGrant => self.grants.len(),
                    Kind::Namespace => self.namespaces.len(),
                    Kind::BgpPeer => self.bgp_peers.as_ref().map_or(0, Store::len),
                    Kind::Secret => self.secrets.as_ref().map_or(0, Store::len),
                    Kind::DistributionGroup => self.meridio.as_ref().map_or(0, |m| m.groups.len()),
                    Kind::L34Route => self.meridio.as_ref().map_or(0, |m| m.routes.len()),
                    Kind::LoadBalancerEndpointSlice => {
                        self.meridio.as_ref().map_or(0, |m| m.lb_slices.len())
                    }
                    Kind::GroupEndpointSlice => {
                        self.meridio.as_ref().map_or(0, |m| m.core_slices.len())
                    }
                };
                (*k, n)
            })
            .collect()
    }
}

/// The state of `kind`'s watch in the shared list.
fn state_of(all: &mut [(Kind, WatchState)], kind: Kind) -> &mut WatchState {
    &mut all
        .iter_mut()
        .find(|(k, _)| *k == kind)
        .expect("every kind has a state")
        .1
}

fn spawn<K>(
    kind: Kind,
    api: Api<Decoded<K>>,
    config: watcher::Config,
    states: &Arc<Mutex<Vec<(Kind, WatchState)>>>,
    changed: &Arc<Notify>,
    crds: &tokio::sync::watch::Receiver<u64>,
) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let reader = store.clone();
    // Each object decoded on its own: one that does not decode is left out and named
    // (lenient.rs), instead of failing the list and stalling the store.
    let mut bad = Undecodable::new();
    let kind_name = kind.to_string();
    let held = store.clone();
    let shown = Arc::clone(states);
    let told = Arc::clone(changed);
    let wake = Kind::OPTIONAL.contains(&kind).then(|| crds.clone());
    let decoded = with_backoff_woken(watcher(api, config), wake)
        .modify(|o: &mut Decoded<K>| o.managed_fields_mut().clear())
        .filter_map(move |ev| {
            let out = match ev {
                Ok(ev) => {
                    let e = decoded_event(&kind_name, ev, &held, &mut bad);
                    let mut all = shown.lock().expect("watch states");
                    let state = state_of(&mut all, kind);
                    // Shown once a relist is complete, so the report does not flicker.
                    if !bad.relisting() && state.undecodable != *bad.objects() {
                        state.undecodable = bad.objects().clone();
                        // An object left out reaches no store: say so here (the report,
                        // its Event).
                        told.notify_one();
                    }
                    e.map(Ok)
                }
                Err(e) => Some(Err(e)),
            };
            std::future::ready(out)
        });
    let stream = reflector(writer, decoded);
    let states = Arc::clone(states);
    let changed = Arc::clone(changed);
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            {
                let mut all = states.lock().expect("watch states");
                let state = state_of(&mut all, kind);
                match ev {
                    // A relist starting says nothing yet: the error it follows stands (and is
                    // not logged again) until objects arrive.
                    Ok(watcher::Event::Init) => {}
                    Ok(ev) => {
                        state.events += 1;
                        state.last_error = None;
                        state.absent = false;
                        if matches!(ev, watcher::Event::InitDone) && state.first_list.is_none() {
                            // The reflector applied the list before handing the event on: the
                            // store holds exactly the first full list now.
                            let keys: Vec<ServiceKey> = reader
                                .state()
                                .iter()
                                .map(|o| ServiceKey {
                                    namespace: o.namespace().unwrap_or_default(),
                                    name: o.name_any(),
                                })
                                .collect();
                            info!(kind = %kind, objects = keys.len(), "first full list");
                            state.first_list = Some(keys);
                        }
                    }
                    Err(e) => {
                        if Kind::OPTIONAL.contains(&kind) && is_absent(&e) {
                            if !state.absent {
                                warn!(
                                    kind = %kind,
                                    "not served by the API server (no CRD), counted as empty: {}",
                                    kind.absent_hint()
                                );
                            }
                            state.absent = true;
                            state.first_list.get_or_insert_with(Vec::new);
                            // Not an error of the watch: the kind is not served. The status
                            // says so (`absent`), and the line above said it once.
                            state.last_error = None;
                        } else {
                            state.errors += 1;
                            if state.last_error.is_none() {
                                warn!(kind = %kind, error = %e, "watch error (retrying with backoff)");
                            }
                            state.last_error = Some(e.to_string());
                        }
                    }
                }
            }
            changed.notify_one();
        }
    });
    store
}
