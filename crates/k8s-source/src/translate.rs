//! From a snapshot of Services, EndpointSlices and ServicePolicies to the VIPs this node
//! programs, one result per Service.
//!
//! Why one pure function over the whole snapshot (and not one patch per event): the result is
//! a function of what the API server holds, so a missed or reordered event cannot leave a VIP
//! behind, and the rules that span Services (two Services claiming one VIP key, one backend
//! probed two ways) are decided in one place.
//!
//! - Only `type: LoadBalancer` Services of our class ([`rivora_k8s_api::class`], the same check
//!   as rivora-controller) are translated; the addresses are `status.loadBalancer.ingress[].ip`
//!   (no ingress yet: no VIP, not an error).
//! - One NAT VIP per (ingress address, ServicePort.port, protocol), fed by the endpoints of the
//!   address's family ([`crate::endpoints`], [`crate::select`]).
//! - SCTP ports and `ipMode: Proxy` addresses are refused with a [`Warning`]: the Service is
//!   reconciled (it does not hold the initial-sync gate) but nothing is programmed for them.
//! - Failures ([`TranslateError`]) keep the Service's previous VIPs (the caller's job) and hold
//!   the gate: an endpoint that is a VIP or this node's own address (a forwarding loop), an
//!   address that does not parse, a VIP key another (older) Service holds.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::jiff::Timestamp;
use rivora_dataplane::{BackendKey, BackendSpec, RateLimit, VipKey, VipSpec, proto};
use rivora_gateway::ObjKey;
use rivora_health::ProbeSpec;
use rivora_k8s_api::attachment::attached_policy;
use rivora_k8s_api::class::{ClassConfig, is_ours};
use rivora_k8s_api::policy_check;
use rivora_k8s_api::{HealthCheck, NatForwarding, ServicePolicy};

use crate::endpoints::{self, EndpointError, Family, PortSelector, TargetRef};
use crate::gateway::GatewayOutcome;
use crate::healthz;
use crate::memo::TranslateMemo;
use crate::select::{self, Role, TrafficPolicy};

/// `sessionAffinityConfig.clientIP.timeoutSeconds` when absent (the API's default, 3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: Duration = Duration::from_secs(10_800);

/// What the watches hold at one moment: the input of [`translate`]. `Arc`s because that is
/// what the reflector stores hand out, so a snapshot copies no object.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Every Service (the function picks ours).
    pub services: Vec<Arc<Service>>,
    /// Every EndpointSlice carrying the `kubernetes.io/service-name` label, by Service.
    pub slices: endpoints::SliceIndex,
    /// Every ServicePolicy.
    pub policies: Vec<Arc<ServicePolicy>>,
    /// The Gateway API objects.
    pub gateway_objects: crate::gateway::GatewayObjects,
}

/// Who "this node" is: its Node name (`nodeName` of local endpoints) and its own addresses,
/// which no endpoint may have (the rewritten packet would come back to this node).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeIdentity {
    /// `--node-name`.
    pub name: String,
    /// The node's addresses (its Node's addresses and those of the uplink).
    pub addresses: Vec<IpAddr>,
}

/// A Service's namespace and name, the key results are reported under.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl ServiceKey {
    /// The key of a Service object.
    pub fn of(svc: &Service) -> Self {
        ServiceKey {
            namespace: svc.metadata.namespace.clone().unwrap_or_default(),
            name: svc.metadata.name.clone().unwrap_or_default(),
        }
    }
}

impl fmt::Display for ServiceKey {
    /// `namespace/name`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Where a VIP comes from: what rivoractl and the node report show next to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceOrigin {
    /// The Service.
    pub service: ServiceKey,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion` (Services have no generation).
    pub resource_version: Option<String>,
    /// `ServicePort.name` (None when unnamed).
    pub port_name: Option<String>,
}

/// Where a Gateway VIP comes from: the Gateway, the listener and the route it forwards for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayOrigin {
    /// The Gateway.
    pub gateway: ObjKey,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.generation`.
    pub generation: i64,
    /// The listener's name.
    pub listener: String,
    /// The active route (the oldest attached to the listener).
    pub route: ObjKey,
}

/// What a VIP stands for: a Service port or a Gateway listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VipOrigin {
    /// A port of a `type: LoadBalancer` Service.
    Service(ServiceOrigin),
    /// A listener of a Gateway of Rivora's GatewayClasses.
    Gateway(GatewayOrigin),
}

impl VipOrigin {
    /// The Service's origin, for a Service VIP.
    pub fn service(&self) -> Option<&ServiceOrigin> {
        match self {
            VipOrigin::Service(s) => Some(s),
            VipOrigin::Gateway(_) => None,
        }
    }
}

/// Per-backend facts the VipSpec cannot carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendMeta {
    /// The backend, as in [`VipSpec::backends`].
    pub key: BackendKey,
    /// Active, fallback or draining ([`select::Role`]); rivorad programs `Draining` as draining.
    pub role: Role,
    /// The endpoint runs on this node.
    pub local: bool,
    /// Replies of this backend do not come back through this node unless the source is
    /// translated to the node's address (ETP Cluster, remote endpoint).
    pub snat: bool,
    /// The Pod (or other object) behind it.
    pub target: Option<TargetRef>,
    /// The node it runs on.
    pub node: Option<String>,
    /// The active health check of the attached ServicePolicy, if any.
    pub check: Option<ProbeSpec>,
}

impl BackendMeta {
    /// Whether rivorad programs it draining (established flows only).
    pub fn draining(&self) -> bool {
        self.role == Role::Draining
    }
}

/// The announcement settings of the attached ServicePolicy (used by part 4's announcers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announce {
    /// `advertise` (default true).
    pub advertise: bool,
    /// BGP communities (`AS:VALUE`).
    pub communities: Vec<String>,
}

impl Default for Announce {
    fn default() -> Self {
        Announce {
            advertise: true,
            communities: Vec::new(),
        }
    }
}

/// One VIP of a Service with what rivorad needs beyond the [`VipSpec`]; shaped so that it maps
/// one to one onto the source-neutral desired VIP (spec, origin, per-backend metadata,
/// announcement fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct K8sVip {
    /// What the map writer programs (NAT, backends in canonical order, weight 1 each).
    pub spec: VipSpec,
    /// The Service port or Gateway listener it comes from.
    pub origin: VipOrigin,
    /// `externalTrafficPolicy`.
    pub traffic_policy: TrafficPolicy,
    /// One entry per `spec.backends` entry, in the same order.
    pub backends: Vec<BackendMeta>,
    /// `loadBalancerSourceRanges` of the VIP's family. None: no restriction (the field is
    /// empty). Some(empty): the Service lists ranges, none of this family, so no source of this
    /// family may reach the VIP ("only listed sources").
    pub source_ranges: Option<Vec<IpNet>>,
    /// `sessionAffinity: ClientIP`: how long a client keeps its backend while idle (the
    /// VipSpec's `affinity_client_ip` is set too).
    pub affinity_timeout: Option<Duration>,
    /// `healthCheckNodePort` (ETP Local only).
    pub health_check_node_port: Option<u16>,
    /// The ServicePolicy applied to this port, `namespace/name`.
    pub policy: Option<String>,
    /// Announcement settings.
    pub announce: Announce,
    /// The share of new flows the VIP refuses (a Gateway route's backendRefs that do not
    /// resolve or have no endpoint), in the backends' weight units; 0 for Service VIPs.
    pub reject_weight: u32,
}

/// A part of a Service that is not programmed, by design; it does not make the Service fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warning {
    /// A port of a protocol Rivora does not balance (SCTP).
    UnsupportedProtocol {
        /// The port's name, or number when unnamed.
        port: String,
        /// Its protocol.
        protocol: String,
    },
    /// An ingress address with `ipMode: Proxy`: the load balancer is expected to rewrite the
    /// destination before the node sees it, which a node-local balancer does not.
    ProxyIpMode {
        /// The address.
        address: IpAddr,
    },
    /// A backend probed differently by an older Service: the older Service's check is used
    /// for it (the prober keys on the backend, not on the VIP).
    CheckOverridden {
        /// The backend.
        backend: BackendKey,
        /// The Service whose check it gets.
        by: ServiceKey,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::UnsupportedProtocol { port, protocol } => write!(
                f,
                "port {port}: protocol {protocol} is not supported (TCP and UDP only), not programmed"
            ),
            Warning::ProxyIpMode { address } => write!(
                f,
                "ingress {address}: ipMode Proxy is not supported (the node receives packets for the VIP itself), not programmed"
            ),
            Warning::CheckOverridden { backend, by } => write!(
                f,
                "backend {backend}: probed with the health check of the older Service {by}"
            ),
        }
    }
}

/// The `healthCheckNodePort` of an ETP Local Service and what it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthCheckNodePort {
    /// The port.
    pub port: u16,
    /// Distinct local, ready, non-terminating endpoint addresses ([`healthz::local_endpoints`]).
    pub local_endpoints: usize,
}

/// What a Service translates to.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ServiceVips {
    /// Its VIPs, sorted by key.
    pub vips: Vec<K8sVip>,
    /// What was refused.
    pub warnings: Vec<Warning>,
    /// Its health check port, when it has one.
    pub health_check: Option<HealthCheckNodePort>,
}

/// Why a Service cannot be programmed; its previous VIPs stay, and it holds the gate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    /// An EndpointSlice cannot be read.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// `status.loadBalancer.ingress[].ip` does not parse.
    #[error("status.loadBalancer.ingress: {0:?} is not an IP address")]
    IngressAddress(String),
    /// `spec.loadBalancerSourceRanges` holds something that is not a CIDR.
    #[error("spec.loadBalancerSourceRanges: {0:?} is not a CIDR")]
    SourceRange(String),
    /// `spec.ports[].port` is outside 1-65535.
    #[error("spec.ports: port {0} is not a port number")]
    ServicePort(i32),
    /// An endpoint address is a VIP: packets would be balanced again, in a loop.
    #[error(
        "endpoint {endpoint} (EndpointSlice {slice}) is a VIP address: it would loop through the balancer"
    )]
    EndpointIsVip {
        /// The endpoint's address.
        endpoint: IpAddr,
        /// The slice naming it.
        slice: String,
    },
    /// An endpoint address is this node's: the rewritten packet would come back to this node.
    #[error("endpoint {endpoint} (EndpointSlice {slice}) is this node's address: it would loop")]
    EndpointIsNode {
        /// The endpoint's address.
        endpoint: IpAddr,
        /// The slice naming it.
        slice: String,
    },
    /// Another Service, older (creationTimestamp, then namespace/name), has the same VIP key.
    #[error("VIP {key} is already Service {holder}'s (older); this Service gets none of its VIPs")]
    KeyConflict {
        /// The contested key.
        key: VipKey,
        /// The Service that keeps it.
        holder: ServiceKey,
    },
    /// A Gateway listener's VIP key is held by a Service or an older Gateway.
    #[error("VIP {key} is already held by {holder}; this listener gets none of its VIPs")]
    KeyHeld {
        /// The contested key.
        key: VipKey,
        /// Who holds it (`Service ns/name`, `Gateway ns/name listener l`).
        holder: String,
    },
    /// The attached ServicePolicy has a value that cannot be applied.
    #[error("ServicePolicy {policy}: {reason}")]
    Policy {
        /// `namespace/name`.
        policy: String,
        /// What is wrong, naming the field.
        reason: String,
    },
    /// A VIP that the map writer would refuse.
    #[error("VIP {name}: {reason}")]
    InvalidVip {
        /// The VIP's name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A VIP this node's datapath refused alone because it did not fit (a capacity: service
    /// IDs, room in the Maglev table); the node's other VIPs are programmed. Only in views
    /// (status, report, metrics): the translation itself succeeded.
    #[error("VIP {name} is not programmed on this node: {reason}")]
    Capacity {
        /// The VIP's name.
        name: String,
        /// The capacity and why, as the datapath said.
        reason: String,
    },
}

/// The result for one Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not a LoadBalancer Service of our class: nothing to program (reconciled).
    NotOurs,
    /// Translated (possibly to no VIP, e.g. before the controller assigned an address). Shared
    /// with the translation memo ([`crate::memo`]): a pass that reuses a Service's translation
    /// copies a pointer, not its VIPs.
    Translated(Arc<ServiceVips>),
    /// Failed; see the error.
    Failed(TranslateError),
}

/// A coarse state per Service, for metrics (`rivora_k8s_services{state}`) and status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServiceState {
    /// Not ours.
    NotOurs,
    /// Translated with at least one VIP, or without anything refused.
    Programmed,
    /// Translated to no VIP because what it asks for is refused (SCTP only, ipMode Proxy), or
    /// a VIP of it refused by this node's datapath for a capacity.
    Refused,
    /// Failed.
    Failing,
}

impl Outcome {
    /// Whether the Service counts as reconciled for the initial-sync gate.
    pub fn reconciled(&self) -> bool {
        !matches!(self, Outcome::Failed(_))
    }

    /// The coarse state.
    pub fn state(&self) -> ServiceState {
        match self {
            Outcome::NotOurs => ServiceState::NotOurs,
            Outcome::Translated(v) if v.vips.is_empty() && !v.warnings.is_empty() => {
                ServiceState::Refused
            }
            Outcome::Translated(_) => ServiceState::Programmed,
            Outcome::Failed(TranslateError::Capacity { .. }) => ServiceState::Refused,
            Outcome::Failed(_) => ServiceState::Failing,
        }
    }
}

/// The VIP name: `k8s/<namespace>/<service>/<port name or number>/<tcp|udp>/<address>`; unique
/// (a Service's ports differ in name and in (number, protocol)) and stable across restarts.
pub fn vip_name(
    service: &ServiceKey,
    port: &ServicePort,
    proto_name: &str,
    addr: IpAddr,
) -> String {
    format!(
        "k8s/{}/{}/{}/{}/{}",
        service.namespace,
        service.name,
        port_label(port),
        proto_name,
        addr
    )
}

/// Everything one snapshot translates to on this node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Translation {
    /// Every Service, by key (see [`translate`]).
    pub services: BTreeMap<ServiceKey, Outcome>,
    /// Every Gateway of an accepted Rivora GatewayClass ([`crate::gateway`]).
    pub gateways: BTreeMap<ObjKey, GatewayOutcome>,
}

/// Translates every Service of the snapshot for this node. Every Service gets an entry.
pub fn translate(
    snapshot: &Snapshot,
    node: &NodeIdentity,
    class: &ClassConfig,
) -> BTreeMap<ServiceKey, Outcome> {
    translate_all(snapshot, node, class).services
}

/// Translates the Services, then the Gateways (Services keep a VIP key both ask for). No
/// endpoint may be a Service's or a Gateway's address.
pub fn translate_all(snapshot: &Snapshot, node: &NodeIdentity, class: &ClassConfig) -> Translation {
    translate_all_with(snapshot, node, class, &mut TranslateMemo::new())
}

/// [`translate_all`], reusing from `memo` the translation of every Service whose inputs did not
/// change since the pass that cached it ([`crate::memo`]); the node agent keeps one memo for its
/// life. The result is the same as [`translate_all`]'s.
pub fn translate_all_with(
    snapshot: &Snapshot,
    node: &NodeIdentity,
    class: &ClassConfig,
    memo: &mut TranslateMemo,
) -> Translation {
    let ours: Vec<&Service> = snapshot
        .services
        .iter()
        .map(Arc::as_ref)
        .filter(|s| is_ours(s, class))
        .collect();
    let mut vip_addrs: BTreeSet<IpAddr> = ours
        .iter()
        .flat_map(|s| ingress_ips(s))
        .filter_map(|ip| ip.parse().ok())
        .collect();
    vip_addrs.extend(crate::gateway::our_gateway_addresses(
        &snapshot.gateway_objects,
        &class.gateway_controller,
    ));
    memo.begin(snapshot, node, &vip_addrs, class);
    let mut out: BTreeMap<ServiceKey, Outcome> = snapshot
        .services
        .iter()
        .map(|s| (ServiceKey::of(s), Outcome::NotOurs))
        .collect();

    // Oldest first: it keeps contested keys and its health checks win.
    let mut ours = ours;
    ours.sort_by_key(|s| age_key(s));
    let mut claimed: BTreeMap<VipKey, ServiceKey> = BTreeMap::new();
    let mut checks: BTreeMap<BackendKey, (Option<ProbeSpec>, ServiceKey)> = BTreeMap::new();
    for svc in ours {
        let key = ServiceKey::of(svc);
        let translated = memo.get_or_translate(svc, snapshot, || {
            translate_service(svc, snapshot, node, &vip_addrs)
        });
        let outcome = match translated {
            Err(e) => Outcome::Failed(e),
            Ok(mut vips) => {
                if let Some(conflict) = vips.vips.iter().find_map(|v| {
                    claimed
                        .get(&v.spec.key)
                        .map(|holder| TranslateError::KeyConflict {
                            key: v.spec.key,
                            holder: holder.clone(),
                        })
                }) {
                    Outcome::Failed(conflict)
                } else {
                    for v in &vips.vips {
                        claimed.insert(v.spec.key, key.clone());
                    }
                    unify_checks(&key, &mut vips, &mut checks);
                    Outcome::Translated(vips)
                }
            }
        };
        out.insert(key, outcome);
    }
    memo.retain(
        &out.iter()
            .filter(|(_, o)| !matches!(o, Outcome::NotOurs))
            .map(|(k, _)| k.clone())
            .collect(),
    );
    let mut held: BTreeMap<VipKey, String> = claimed
        .into_iter()
        .map(|(k, s)| (k, format!("Service {s}")))
        .collect();
    let gateways = crate::gateway::translate_gateways(
        snapshot,
        &class.gateway_controller,
        node,
        &vip_addrs,
        &mut held,
    );
    Translation {
        services: out,
        gateways,
    }
}

/// One probe per backend: a backend already probed by an older Service (or an earlier port)
/// with another check gets that check, and the Service says so.
fn unify_checks(
    key: &ServiceKey,
    vips: &mut Arc<ServiceVips>,
    checks: &mut BTreeMap<BackendKey, (Option<ProbeSpec>, ServiceKey)>,
) {
    // Most Services agree with every older one: record their checks without copying their
    // (possibly shared) VIPs; copy only when a check is overridden.
    let mut differs = false;
    for v in &vips.vips {
        for b in &v.backends {
            let (winner, _) = checks
                .entry(b.key)
                .or_insert_with(|| (b.check.clone(), key.clone()));
            differs |= *winner != b.check;
        }
    }
    if !differs {
        return;
    }
    let vips = Arc::make_mut(vips);
    let mut warned = BTreeSet::new();
    for v in &mut vips.vips {
        for b in &mut v.backends {
            let (winner, holder) = checks
                .entry(b.key)
                .or_insert_with(|| (b.check.clone(), key.clone()));
            if *winner != b.check {
                b.check = winner.clone();
                if holder != key && warned.insert(b.key) {
                    vips.warnings.push(Warning::CheckOverridden {
                        backend: b.key,
                        by: holder.clone(),
                    });
                }
            }
        }
    }
}

/// Creation order: creationTimestamp (absent last), then namespace/name.
fn age_key(svc: &Service) -> (bool, Option<Timestamp>, ServiceKey) {
    let ts = svc.metadata.creation_timestamp.as_ref().map(|t| t.0);
    (ts.is_none(), ts, ServiceKey::of(svc))
}

fn ingress_ips(svc: &Service) -> impl Iterator<Item = &str> {
    svc.status
        .iter()
        .filter_map(|s| s.load_balancer.as_ref())
        .filter_map(|lb| lb.ingress.as_ref())
        .flatten()
        .filter_map(|i| i.ip.as_deref())
}

/// The settings of the ServicePolicy attached to one port.
struct PolicySettings<'a> {
    name: Option<String>,
    check: Option<&'a HealthCheck>,
    syn_rate_limit: Option<RateLimit>,
    nat_fib: bool,
    announce: Announce,
}

fn policy_settings(policy: Option<&ServicePolicy>) -> Result<PolicySettings<'_>, TranslateError> {
    let Some(p) = policy else {
        return Ok(PolicySettings {
            name: None,
            check: None,
            syn_rate_limit: None,
            nat_fib: false,
            announce: Announce::default(),
        });
    };
    let name = format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or(""),
        p.metadata.name.as_deref().unwrap_or("")
    );
    let bad = |reason: String| TranslateError::Policy {
        policy: name.clone(),
        reason,
    };
    // The same check rivora-controller reports as `Invalid` in the policy's status; made here
    // even when no backend is probed yet, so a node refuses what the status calls invalid.
    let checked = policy_check::check(&p.spec).map_err(bad)?;
    Ok(PolicySettings {
        check: checked.health_check,
        syn_rate_limit: checked.syn_rate_limit.map(|l| RateLimit {
            rate: l.rate,
            burst: l.burst,
        }),
        nat_fib: p.spec.nat_forwarding == Some(NatForwarding::Fib),
        announce: Announce {
            advertise: p.spec.advertise.unwrap_or(true),
            communities: p.spec.communities.clone(),
        },
        name: Some(name),
    })
}

fn translate_service(
    svc: &Service,
    snapshot: &Snapshot,
    node: &NodeIdentity,
    vip_addrs: &BTreeSet<IpAddr>,
) -> Result<ServiceVips, TranslateError> {
    let key = ServiceKey::of(svc);
    // Borrowed, not cloned: this runs for every Service on every pass.
    let no_spec = ServiceSpec::default();
    let spec = svc.spec.as_ref().unwrap_or(&no_spec);
    let traffic_policy = TrafficPolicy::of(spec);
    let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .and_then(|t| u64::try_from(t).ok())
            .map_or(DEFAULT_AFFINITY_TIMEOUT, Duration::from_secs)
    });
    let health_check_node_port = match traffic_policy {
        TrafficPolicy::Local => spec
            .health_check_node_port
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0),
        TrafficPolicy::Cluster => None,
    };
    let ranges: Option<Vec<IpNet>> = match spec.load_balancer_source_ranges.as_deref() {
        None | Some([]) => None,
        Some(list) => Some(
            list.iter()
                .map(|r| {
                    r.trim()
                        .parse::<IpNet>()
                        .map(|n| n.trunc())
                        .map_err(|_| TranslateError::SourceRange(r.clone()))
                })
                .collect::<Result<_, _>>()?,
        ),
    };

    let mut warnings = Vec::new();
    let mut addresses: Vec<IpAddr> = Vec::new();
    for ing in svc
        .status
        .iter()
        .filter_map(|s| s.load_balancer.as_ref())
        .filter_map(|lb| lb.ingress.as_ref())
        .flatten()
    {
        // A hostname-only entry names a balancer elsewhere: nothing for this node.
        let Some(ip) = ing.ip.as_deref() else {
            continue;
        };
        let addr: IpAddr = ip
            .parse()
            .map_err(|_| TranslateError::IngressAddress(ip.to_string()))?;
        if ing.ip_mode.as_deref() == Some("Proxy") {
            warnings.push(Warning::ProxyIpMode { address: addr });
            continue;
        }
        if !addresses.contains(&addr) {
            addresses.push(addr);
        }
    }

    let slices = snapshot.slices.of(&key.namespace, &key.name);
    let mut vips = Vec::new();
    for port in spec.ports.iter().flatten() {
        let protocol = port.protocol.as_deref().unwrap_or("TCP");
        let (proto_num, proto_name) = match protocol {
            "TCP" => (proto::TCP, "tcp"),
            "UDP" => (proto::UDP, "udp"),
            other => {
                warnings.push(Warning::UnsupportedProtocol {
                    port: port_label(port),
                    protocol: other.to_string(),
                });
                continue;
            }
        };
        let number = u16::try_from(port.port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or(TranslateError::ServicePort(port.port))?;
        let policy = attached_policy(
            snapshot.policies.iter().map(Arc::as_ref),
            &key.namespace,
            &key.name,
            port.name.as_deref(),
        );
        let settings = policy_settings(policy)?;
        let selector = PortSelector {
            name: port.name.as_deref(),
            protocol,
        };
        for &addr in &addresses {
            let family = Family::of(addr);
            let joined = endpoints::join(&slices, selector, family)?;
            refuse_loops(&joined, vip_addrs, node)?;
            let mut backends: Vec<BackendMeta> =
                select::categorize(&joined, traffic_policy, &node.name)
                    .into_iter()
                    .map(|s| {
                        let bkey = BackendKey {
                            addr: s.endpoint.addr,
                            port: s.endpoint.port,
                        };
                        let check = settings
                            .check
                            .map(|hc| {
                                policy_check::probe_spec(hc, SocketAddr::new(bkey.addr, bkey.port))
                            })
                            .transpose()
                            .map_err(|reason| TranslateError::Policy {
                                policy: settings.name.clone().unwrap_or_default(),
                                reason,
                            })?;
                        Ok(BackendMeta {
                            key: bkey,
                            role: s.role,
                            local: s.local,
                            snat: traffic_policy == TrafficPolicy::Cluster && !s.local,
                            target: s.endpoint.target,
                            node: s.endpoint.node,
                            check,
                        })
                    })
                    .collect::<Result<_, TranslateError>>()?;
            backends.sort_by_key(|b| b.key);
            let name = vip_name(&key, port, proto_name, addr);
            let mut vip = VipSpec::new(
                name,
                VipKey::exact(addr, number, proto_num),
                backends
                    .iter()
                    .map(|b| BackendSpec {
                        key: b.key,
                        weight: 1,
                        mac: [0; 6],
                    })
                    .collect(),
            );
            vip.affinity_client_ip = affinity_timeout.is_some();
            vip.syn_rate_limit = settings.syn_rate_limit.filter(|_| proto_num == proto::TCP);
            vip.nat_fib = settings.nat_fib;
            check_vip(&vip)?;
            // No endpoint to send a new flow to: kube-proxy rejects (the client sees
            // "connection refused" at once instead of SYN retransmits); the datapath's refused
            // share does so for TCP (a reset) and drops other packets. Not for ETP Local:
            // kube-proxy drops what has no local endpoint, so that the LB moves on.
            let refuse_all = backends.is_empty() && traffic_policy == TrafficPolicy::Cluster;
            vips.push(K8sVip {
                spec: vip,
                origin: VipOrigin::Service(ServiceOrigin {
                    service: key.clone(),
                    uid: svc.metadata.uid.clone(),
                    resource_version: svc.metadata.resource_version.clone(),
                    port_name: port.name.clone().filter(|n| !n.is_empty()),
                }),
                traffic_policy,
                backends,
                source_ranges: ranges.as_ref().map(|r| {
                    r.iter()
                        .filter(|n| Family::of(n.addr()) == family)
                        .copied()
                        .collect()
                }),
                affinity_timeout,
                health_check_node_port,
                policy: settings.name.clone(),
                announce: settings.announce.clone(),
                reject_weight: u32::from(refuse_all),
            });
        }
    }
    vips.sort_by_key(|v| v.spec.key);

    let health_check = health_check_node_port.map(|port| {
        // kube-proxy counts every local ready endpoint of the Service, over all its ports
        // and both families (an address counted once).
        let mut all = Vec::new();
        for p in spec.ports.iter().flatten() {
            let protocol = p.protocol.as_deref().unwrap_or("TCP");
            if protocol != "TCP" && protocol != "UDP" {
                continue;
            }
            let selector = PortSelector {
                name: p.name.as_deref(),
                protocol,
            };
            for family in [Family::V4, Family::V6] {
                all.extend(endpoints::join(&slices, selector, family).unwrap_or_default());
            }
        }
        HealthCheckNodePort {
            port,
            local_endpoints: healthz::local_endpoints(&all, &node.name),
        }
    });
    Ok(ServiceVips {
        vips,
        warnings,
        health_check,
    })
}

/// Refuses endpoints a rewritten packet would loop through: a VIP address (balanced again) or
/// this node's own address (sent back to this node).
pub(crate) fn refuse_loops(
    joined: &[endpoints::Endpoint],
    vip_addrs: &BTreeSet<IpAddr>,
    node: &NodeIdentity,
) -> Result<(), TranslateError> {
    for e in joined {
        if vip_addrs.contains(&e.addr) {
            return Err(TranslateError::EndpointIsVip {
                endpoint: e.addr,
                slice: e.slice.clone(),
            });
        }
        if node.addresses.contains(&e.addr) {
            return Err(TranslateError::EndpointIsNode {
                endpoint: e.addr,
                slice: e.slice.clone(),
            });
        }
    }
    Ok(())
}

fn port_label(port: &ServicePort) -> String {
    match port.name.as_deref() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => port.port.to_string(),
    }
}

/// The per-VIP checks of the map writer's validation that a translated VIP could fail
/// (`rivora_dataplane`'s `validate` is private; it runs again, whole-state, at apply time).
pub(crate) fn check_vip(vip: &VipSpec) -> Result<(), TranslateError> {
    let bad = |reason: String| TranslateError::InvalidVip {
        name: vip.name.clone(),
        reason,
    };
    if vip.backends.len() > usize::from(u16::MAX) {
        return Err(bad(format!(
            "{} backends, at most {}",
            vip.backends.len(),
            u16::MAX
        )));
    }
    let mut seen = BTreeSet::new();
    for b in &vip.backends {
        if b.key.addr.is_ipv6() != vip.key.addr.is_ipv6() {
            return Err(bad(format!(
                "backend {} is not of the VIP's address family",
                b.key
            )));
        }
        if b.key.port == 0 {
            return Err(bad(format!("backend {} has port 0", b.key)));
        }
        if !seen.insert(b.key) {
            return Err(bad(format!("backend {} listed twice", b.key)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::tests::slice;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use rivora_dataplane::Mode;
    use rivora_health::ProbeKind;
    use serde_json::{Value, json};

    const CLASS: &str = rivora_k8s_api::class::LOAD_BALANCER_CLASS;

    /// A Service of ours from its spec and ingress addresses, as the API server serves it.
    fn service(ns: &str, name: &str, created: &str, spec: Value, ingress: Value) -> Arc<Service> {
        let mut s = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": ns, "name": name, "creationTimestamp": created,
                         "uid": format!("uid-{name}"), "resourceVersion": "7"},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS},
            "status": {"loadBalancer": {"ingress": ingress}},
        });
        for (k, v) in spec.as_object().unwrap() {
            s["spec"][k] = v.clone();
        }
        Arc::new(serde_json::from_value(s).unwrap())
    }

    fn web(spec: Value, ingress: Value) -> Arc<Service> {
        service("shop", "web", "2026-01-01T00:00:00Z", spec, ingress)
    }

    fn http_port() -> Value {
        json!([{"name": "http", "port": 80, "protocol": "TCP"}])
    }

    fn v4_slice(name: &str, service: &str, port: u16, endpoints: Value) -> Arc<EndpointSlice> {
        slice(
            "shop",
            name,
            Some(service),
            json!({
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
                "endpoints": endpoints,
            }),
        )
    }

    fn ready(addr: &str, node: &str) -> Value {
        json!({"addresses": [addr], "conditions": {"ready": true}, "nodeName": node,
               "targetRef": {"kind": "Pod", "namespace": "shop", "name": format!("pod-{addr}")}})
    }

    fn terminating(addr: &str, node: &str) -> Value {
        json!({"addresses": [addr], "nodeName": node,
               "conditions": {"ready": false, "serving": true, "terminating": true}})
    }

    fn node() -> NodeIdentity {
        NodeIdentity {
            name: "node-a".into(),
            addresses: vec!["192.0.2.10".parse().unwrap()],
        }
    }

    fn run(
        services: Vec<Arc<Service>>,
        slices: Vec<Arc<EndpointSlice>>,
    ) -> BTreeMap<ServiceKey, Outcome> {
        run_with(services, slices, vec![])
    }

    fn run_with(
        services: Vec<Arc<Service>>,
        slices: Vec<Arc<EndpointSlice>>,
        policies: Vec<Arc<ServicePolicy>>,
    ) -> BTreeMap<ServiceKey, Outcome> {
        let snap = Snapshot {
            services,
            slices: slices.into(),
            policies,
            ..Snapshot::default()
        };
        translate(&snap, &node(), &ClassConfig::default())
    }

    fn key(ns: &str, name: &str) -> ServiceKey {
        ServiceKey {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn vips_of<'a>(
        out: &'a BTreeMap<ServiceKey, Outcome>,
        ns: &str,
        name: &str,
    ) -> &'a ServiceVips {
        match &out[&key(ns, name)] {
            Outcome::Translated(v) => v,
            other => panic!("{ns}/{name}: {other:?}"),
        }
    }

    fn error_of(out: &BTreeMap<ServiceKey, Outcome>, ns: &str, name: &str) -> TranslateError {
        match &out[&key(ns, name)] {
            Outcome::Failed(e) => e.clone(),
            other => panic!("{ns}/{name} did not fail: {other:?}"),
        }
    }

    fn backends(v: &K8sVip) -> Vec<String> {
        v.spec.backends.iter().map(|b| b.key.to_string()).collect()
    }

    #[test]
    fn one_nat_vip_per_address_port_and_protocol_with_the_slice_port_as_backend_port() {
        let svc = web(
            json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                             {"name": "dns", "port": 53, "protocol": "UDP"}]}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let s = slice(
            "shop",
            "web-1",
            Some("web"),
            json!({
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                          {"name": "dns", "port": 5353, "protocol": "UDP"}],
                "endpoints": [ready("10.1.0.2", "node-a"), ready("10.1.0.1", "node-b")],
            }),
        );
        let out = run(vec![svc], vec![s]);
        let v = vips_of(&out, "shop", "web");
        assert_eq!(out[&key("shop", "web")].state(), ServiceState::Programmed);
        let summary: Vec<_> = v
            .vips
            .iter()
            .map(|v| (v.spec.name.clone(), v.spec.key.to_string()))
            .collect();
        assert_eq!(
            summary,
            // Sorted by key: 53/udp before 80/tcp.
            [
                (
                    "k8s/shop/web/dns/udp/203.0.113.5".to_string(),
                    "203.0.113.5:53/udp".to_string()
                ),
                (
                    "k8s/shop/web/http/tcp/203.0.113.5".to_string(),
                    "203.0.113.5:80/tcp".to_string()
                ),
            ]
        );
        let http = &v.vips[1];
        assert_eq!(http.spec.mode, Mode::Nat);
        assert_eq!(backends(http), ["10.1.0.1:8080", "10.1.0.2:8080"]);
        assert!(http.spec.backends.iter().all(|b| b.weight == 1));
        assert_eq!(backends(&v.vips[0]), ["10.1.0.1:5353", "10.1.0.2:5353"]);
        // Metadata lines up with spec.backends.
        let meta: Vec<_> = http
            .backends
            .iter()
            .map(|b| (b.key.to_string(), b.local, b.snat, b.node.clone()))
            .collect();
        assert_eq!(
            meta,
            [
                (
                    "10.1.0.1:8080".to_string(),
                    false,
                    true,
                    Some("node-b".to_string())
                ),
                (
                    "10.1.0.2:8080".to_string(),
                    true,
                    false,
                    Some("node-a".to_string())
                ),
            ]
        );
        assert_eq!(
            http.backends[0].target.as_ref().unwrap().to_string(),
            "Pod shop/pod-10.1.0.1"
        );
        let origin = http.origin.service().expect("a Service VIP");
        assert_eq!(origin.service, key("shop", "web"));
        assert_eq!(origin.port_name.as_deref(), Some("http"));
        assert_eq!(origin.uid.as_deref(), Some("uid-web"));
        assert_eq!(origin.resource_version.as_deref(), Some("7"));
        assert_eq!(http.traffic_policy, TrafficPolicy::Cluster);
        assert_eq!(
            (
                http.source_ranges.clone(),
                http.affinity_timeout,
                http.health_check_node_port
            ),
            (None, None, None)
        );
        assert_eq!(http.announce, Announce::default());
        assert!(
            !http.spec.affinity_client_ip
                && !http.spec.nat_fib
                && http.spec.syn_rate_limit.is_none()
        );
    }

    #[test]
    fn dual_stack_gives_one_vip_set_per_family_fed_by_its_own_slices() {
        let svc = web(
            json!({"ports": http_port()}),
            json!([{"ip": "203.0.113.5"}, {"ip": "2001:db8::5"}]),
        );
        let v4 = v4_slice("web-4", "web", 8080, json!([ready("10.1.0.1", "node-a")]));
        let v6 = slice(
            "shop",
            "web-6",
            Some("web"),
            json!({
                "addressType": "IPv6",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": [ready("fd00::1", "node-a")],
            }),
        );
        let out = run(vec![svc], vec![v4, v6]);
        let v = vips_of(&out, "shop", "web");
        let got: Vec<_> = v
            .vips
            .iter()
            .map(|v| (v.spec.name.clone(), backends(v)))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "k8s/shop/web/http/tcp/203.0.113.5".to_string(),
                    vec!["10.1.0.1:8080".to_string()]
                ),
                (
                    "k8s/shop/web/http/tcp/2001:db8::5".to_string(),
                    vec!["[fd00::1]:8080".to_string()]
                ),
            ]
        );
    }

    #[test]
    fn only_our_load_balancers_with_an_address_get_vips() {
        let mut cluster_ip = (*web(json!({"type": "ClusterIP"}), json!([]))).clone();
        cluster_ip.metadata.name = Some("internal".into());
        let mut other_class = (*web(
            json!({"loadBalancerClass": "x/y", "ports": http_port()}),
            json!([{"ip": "203.0.113.9"}]),
        ))
        .clone();
        other_class.metadata.name = Some("theirs".into());
        let pending = service(
            "shop",
            "pending",
            "2026-01-01T00:00:00Z",
            json!({"ports": http_port()}),
            json!([]),
        );
        let hostname = service(
            "shop",
            "named",
            "2026-01-01T00:00:00Z",
            json!({"ports": http_port()}),
            json!([{"hostname": "lb.example.com"}]),
        );
        let out = run(
            vec![
                Arc::new(cluster_ip),
                Arc::new(other_class),
                pending,
                hostname,
            ],
            vec![],
        );
        assert_eq!(out[&key("shop", "internal")], Outcome::NotOurs);
        assert_eq!(out[&key("shop", "theirs")], Outcome::NotOurs);
        assert!(out[&key("shop", "theirs")].reconciled());
        for name in ["pending", "named"] {
            let v = vips_of(&out, "shop", name);
            assert!(v.vips.is_empty() && v.warnings.is_empty(), "{name}: {v:?}");
            assert_eq!(out[&key("shop", name)].state(), ServiceState::Programmed);
        }
        // The other class's address is not ours to protect: an endpoint may use it.
        let s = v4_slice(
            "pending-1",
            "pending",
            80,
            json!([ready("203.0.113.9", "node-a")]),
        );
        let assigned = service(
            "shop",
            "pending",
            "2026-01-01T00:00:00Z",
            json!({"ports": http_port()}),
            json!([{"ip": "203.0.113.1"}]),
        );
        let out = run(
            vec![
                assigned,
                web(
                    json!({"loadBalancerClass": "x/y"}),
                    json!([{"ip": "203.0.113.9"}]),
                ),
            ],
            vec![s],
        );
        assert_eq!(
            backends(&vips_of(&out, "shop", "pending").vips[0]),
            ["203.0.113.9:80"]
        );
    }

    #[test]
    fn sctp_and_proxy_ip_mode_are_refused_with_warnings_and_count_as_reconciled() {
        let mixed = web(
            json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                             {"name": "sig", "port": 3868, "protocol": "SCTP"}]}),
            json!([{"ip": "203.0.113.5"}, {"ip": "203.0.113.6", "ipMode": "Proxy"}]),
        );
        let out = run(vec![mixed], vec![]);
        let v = vips_of(&out, "shop", "web");
        assert_eq!(v.vips.len(), 1);
        assert_eq!(v.vips[0].spec.name, "k8s/shop/web/http/tcp/203.0.113.5");
        assert_eq!(
            v.warnings,
            [
                Warning::ProxyIpMode {
                    address: "203.0.113.6".parse().unwrap()
                },
                Warning::UnsupportedProtocol {
                    port: "sig".into(),
                    protocol: "SCTP".into()
                },
            ]
        );
        assert!(v.warnings[1].to_string().contains("SCTP is not supported"));
        let sctp_only = web(
            json!({"ports": [{"port": 3868, "protocol": "SCTP"}]}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let out = run(vec![sctp_only], vec![]);
        assert_eq!(out[&key("shop", "web")].state(), ServiceState::Refused);
        assert!(out[&key("shop", "web")].reconciled());
    }

    #[test]
    fn a_key_conflict_goes_to_the_older_service_then_to_the_lower_name() {
        let old = service(
            "b",
            "old",
            "2026-01-01T00:00:00Z",
            json!({"ports": http_port()}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let new = service(
            "a",
            "new",
            "2026-02-01T00:00:00Z",
            json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                                           {"name": "alt", "port": 81, "protocol": "TCP"}]}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let out = run(vec![new, old], vec![]);
        assert_eq!(vips_of(&out, "b", "old").vips.len(), 1);
        let err = error_of(&out, "a", "new");
        assert_eq!(
            err,
            TranslateError::KeyConflict {
                key: VipKey::exact("203.0.113.5".parse().unwrap(), 80, proto::TCP),
                holder: key("b", "old"),
            }
        );
        assert_eq!(
            err.to_string(),
            "VIP 203.0.113.5:80/tcp is already Service b/old's (older); this Service gets none of its VIPs"
        );
        assert!(!out[&key("a", "new")].reconciled());
        // Same age: namespace/name decides.
        let x = service(
            "x",
            "same",
            "2026-01-01T00:00:00Z",
            json!({"ports": http_port()}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let y = service(
            "y",
            "same",
            "2026-01-01T00:00:00Z",
            json!({"ports": http_port()}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let out = run(vec![y, x], vec![]);
        assert!(out[&key("x", "same")].reconciled());
        assert!(matches!(
            error_of(&out, "y", "same"),
            TranslateError::KeyConflict { .. }
        ));
        // A failed Service claims nothing: a third, younger one gets the key the loser wanted.
        let broken = service(
            "a",
            "broken",
            "2026-01-01T00:00:00Z",
            json!({"ports": http_port(), "loadBalancerSourceRanges": ["nope"]}),
            json!([{"ip": "203.0.113.7"}]),
        );
        let later = service(
            "a",
            "later",
            "2026-03-01T00:00:00Z",
            json!({"ports": http_port()}),
            json!([{"ip": "203.0.113.7"}]),
        );
        let out = run(vec![broken, later], vec![]);
        assert_eq!(
            error_of(&out, "a", "broken"),
            TranslateError::SourceRange("nope".into())
        );
        assert_eq!(vips_of(&out, "a", "later").vips.len(), 1);
    }

    #[test]
    fn source_ranges_are_split_by_family_and_a_family_without_ranges_is_closed() {
        let svc = web(
            json!({"ports": http_port(), "loadBalancerSourceRanges": ["10.0.0.0/8", " 192.168.1.7/24", "fd00::/8"]}),
            json!([{"ip": "203.0.113.5"}, {"ip": "2001:db8::5"}]),
        );
        let out = run(vec![svc], vec![]);
        let v = vips_of(&out, "shop", "web");
        let ranges: Vec<Vec<String>> = v
            .vips
            .iter()
            .map(|v| {
                v.source_ranges
                    .clone()
                    .unwrap()
                    .iter()
                    .map(|n| n.to_string())
                    .collect()
            })
            .collect();
        assert_eq!(
            ranges,
            [
                vec!["10.0.0.0/8".to_string(), "192.168.1.0/24".to_string()],
                vec!["fd00::/8".to_string()]
            ]
        );
        let v4_only = web(
            json!({"ports": http_port(), "loadBalancerSourceRanges": ["10.0.0.0/8"]}),
            json!([{"ip": "2001:db8::5"}]),
        );
        let out = run(vec![v4_only], vec![]);
        assert_eq!(
            vips_of(&out, "shop", "web").vips[0].source_ranges,
            Some(vec![])
        );
    }

    #[test]
    fn client_ip_affinity_carries_its_timeout() {
        let with = web(
            json!({"ports": http_port(), "sessionAffinity": "ClientIP",
                              "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let default = service(
            "shop",
            "dflt",
            "2026-01-01T00:00:00Z",
            json!({"ports": http_port(), "sessionAffinity": "ClientIP"}),
            json!([{"ip": "203.0.113.6"}]),
        );
        let none = service(
            "shop",
            "none",
            "2026-01-01T00:00:00Z",
            json!({"ports": http_port(), "sessionAffinity": "None"}),
            json!([{"ip": "203.0.113.7"}]),
        );
        let out = run(vec![with, default, none], vec![]);
        let w = &vips_of(&out, "shop", "web").vips[0];
        assert!(w.spec.affinity_client_ip);
        assert_eq!(w.affinity_timeout, Some(Duration::from_secs(60)));
        let d = &vips_of(&out, "shop", "dflt").vips[0];
        assert_eq!(d.affinity_timeout, Some(DEFAULT_AFFINITY_TIMEOUT));
        let n = &vips_of(&out, "shop", "none").vips[0];
        assert!(!n.spec.affinity_client_ip && n.affinity_timeout.is_none());
    }

    #[test]
    fn local_traffic_policy_lists_local_endpoints_and_counts_them_for_healthz() {
        let svc = web(
            json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                             {"name": "https", "port": 443, "protocol": "TCP"}],
                   "externalTrafficPolicy": "Local", "healthCheckNodePort": 31234}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let s = slice(
            "shop",
            "web-1",
            Some("web"),
            json!({
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                          {"name": "https", "port": 8443, "protocol": "TCP"}],
                "endpoints": [ready("10.1.0.1", "node-a"), ready("10.1.0.2", "node-b"),
                              terminating("10.1.0.3", "node-a")],
            }),
        );
        let out = run(vec![svc.clone()], vec![s.clone()]);
        let v = vips_of(&out, "shop", "web");
        let http = &v.vips[0];
        assert_eq!(http.traffic_policy, TrafficPolicy::Local);
        assert_eq!(backends(http), ["10.1.0.1:8080", "10.1.0.3:8080"]);
        let roles: Vec<_> = http
            .backends
            .iter()
            .map(|b| (b.role, b.local, b.snat, b.draining()))
            .collect();
        assert_eq!(
            roles,
            [
                (Role::Active, true, false, false),
                (Role::Draining, true, false, true)
            ]
        );
        assert_eq!(http.health_check_node_port, Some(31234));
        // 10.1.0.1 serves both ports and counts once; the terminating one does not count.
        assert_eq!(
            v.health_check,
            Some(HealthCheckNodePort {
                port: 31234,
                local_endpoints: 1
            })
        );

        // The last local ready endpoint starts terminating: healthz drops to 0, the fallback
        // keeps it serving new flows.
        let s2 = slice(
            "shop",
            "web-1",
            Some("web"),
            json!({
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": [terminating("10.1.0.1", "node-a"), ready("10.1.0.2", "node-b")],
            }),
        );
        let out = run(vec![svc], vec![s2]);
        let v = vips_of(&out, "shop", "web");
        assert_eq!(v.health_check.as_ref().unwrap().local_endpoints, 0);
        assert_eq!(v.vips[0].backends[0].role, Role::Fallback);
        assert!(
            v.vips[1].backends.is_empty(),
            "https has no slice port: no backend"
        );
    }

    #[test]
    fn cluster_policy_keeps_draining_endpoints_and_has_no_health_port() {
        let svc = web(
            json!({"ports": http_port(), "healthCheckNodePort": 31234}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let s = v4_slice(
            "web-1",
            "web",
            8080,
            json!([ready("10.1.0.1", "node-b"), terminating("10.1.0.2", "node-b"),
                                                       {"addresses": ["10.1.0.3"], "conditions": {"ready": false, "serving": false}}]),
        );
        let out = run(vec![svc], vec![s]);
        let v = vips_of(&out, "shop", "web");
        assert_eq!(backends(&v.vips[0]), ["10.1.0.1:8080", "10.1.0.2:8080"]);
        assert_eq!(v.vips[0].backends[1].role, Role::Draining);
        assert!(v.vips[0].backends.iter().all(|b| b.snat && !b.local));
        assert_eq!(
            (v.health_check.clone(), v.vips[0].health_check_node_port),
            (None, None)
        );
    }

    /// kube-proxy rejects a Service without any endpoint to use ("connection refused" at
    /// once); with ETP Local and no local endpoint it drops. The VIP's refused share does the
    /// first, and is absent for the second and whenever an endpoint is usable.
    #[test]
    fn no_endpoint_at_all_refuses_new_flows_but_local_without_local_endpoints_drops() {
        let ports = json!([{"name": "http", "port": 80, "protocol": "TCP"}]);
        let cluster = web(json!({"ports": ports}), json!([{"ip": "203.0.113.5"}]));
        let out = run(vec![cluster.clone()], vec![]);
        let v = &vips_of(&out, "shop", "web").vips[0];
        assert!(v.backends.is_empty());
        assert_eq!(v.reject_weight, 1, "no endpoint: refused");
        let s = v4_slice("web-1", "web", 8080, json!([ready("10.1.0.1", "node-b")]));
        let out = run(vec![cluster], vec![s.clone()]);
        assert_eq!(vips_of(&out, "shop", "web").vips[0].reject_weight, 0);
        // ETP Local, the only endpoint on another node: dropped, as kube-proxy does.
        let local = web(
            json!({"ports": ports, "externalTrafficPolicy": "Local", "healthCheckNodePort": 31234}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let out = run(vec![local], vec![s]);
        let v = &vips_of(&out, "shop", "web").vips[0];
        assert!(v.backends.is_empty());
        assert_eq!(
            v.reject_weight, 0,
            "ETP Local without a local endpoint drops"
        );
    }

    #[test]
    fn loops_and_unparsable_addresses_fail_the_service() {
        let a = service(
            "shop",
            "a",
            "2026-01-01T00:00:00Z",
            json!({"ports": http_port()}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let b = service(
            "shop",
            "b",
            "2026-01-01T00:00:00Z",
            json!({"ports": http_port()}),
            json!([{"ip": "203.0.113.6"}]),
        );
        // a's endpoint is b's VIP; b's endpoint is this node.
        let sa = v4_slice("a-1", "a", 80, json!([ready("203.0.113.6", "node-b")]));
        let sb = v4_slice("b-1", "b", 80, json!([ready("192.0.2.10", "node-a")]));
        let out = run(vec![a.clone(), b], vec![sa, sb]);
        assert_eq!(
            error_of(&out, "shop", "a").to_string(),
            "endpoint 203.0.113.6 (EndpointSlice a-1) is a VIP address: it would loop through the balancer"
        );
        assert!(matches!(
            error_of(&out, "shop", "b"),
            TranslateError::EndpointIsNode { .. }
        ));
        // Even an endpoint that is not ready is refused: the slice is wrong.
        let own_vip = v4_slice(
            "a-1",
            "a",
            80,
            json!([{"addresses": ["203.0.113.5"], "conditions": {"ready": false}}]),
        );
        let out = run(vec![a.clone()], vec![own_vip]);
        assert!(matches!(
            error_of(&out, "shop", "a"),
            TranslateError::EndpointIsVip { .. }
        ));
        let garbage = v4_slice("a-1", "a", 80, json!([{"addresses": ["not-an-ip"]}]));
        let out = run(vec![a], vec![garbage]);
        assert!(matches!(
            error_of(&out, "shop", "a"),
            TranslateError::Endpoint(EndpointError::UnparsableAddress { .. })
        ));
        let bad_ingress = service(
            "shop",
            "c",
            "2026-01-01T00:00:00Z",
            json!({"ports": http_port()}),
            json!([{"ip": "203.0.113"}]),
        );
        let out = run(vec![bad_ingress], vec![]);
        assert_eq!(
            error_of(&out, "shop", "c").to_string(),
            "status.loadBalancer.ingress: \"203.0.113\" is not an IP address"
        );
    }

    fn policy(name: &str, created: &str, spec: Value) -> Arc<ServicePolicy> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "rivora.dev/v1alpha1", "kind": "ServicePolicy",
                "metadata": {"namespace": "shop", "name": name, "creationTimestamp": created},
                "spec": spec,
            }))
            .unwrap(),
        )
    }

    #[test]
    fn service_policies_attach_per_port_with_section_name_first() {
        let svc = web(
            json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                             {"name": "dns", "port": 53, "protocol": "UDP"}]}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let s = slice(
            "shop",
            "web-1",
            Some("web"),
            json!({
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "dns", "port": 5353, "protocol": "UDP"}],
                "endpoints": [ready("10.1.0.1", "node-b")],
            }),
        );
        let whole = policy(
            "whole",
            "2026-01-01T00:00:00Z",
            json!({
                "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
                "healthCheck": {"type": "tcp", "port": 9000},
                "synRateLimit": {"rate": 100},
                "advertise": false, "communities": ["65000:1"],
            }),
        );
        let section = policy(
            "section",
            "2026-06-01T00:00:00Z",
            json!({
                "targetRefs": [{"group": "", "kind": "Service", "name": "web", "sectionName": "http"}],
                "healthCheck": {"type": "http", "path": "/ready", "interval": "500ms", "timeout": "250ms", "fall": 2},
                "synRateLimit": {"rate": 50, "burst": 80},
                "natForwarding": "fib",
            }),
        );
        let out = run_with(vec![svc], vec![s], vec![whole, section]);
        let v = vips_of(&out, "shop", "web");
        let (http, dns) = (&v.vips[1], &v.vips[0]);
        assert_eq!(http.spec.key.port, 80);
        assert_eq!(http.policy.as_deref(), Some("shop/section"));
        assert_eq!(
            http.spec.syn_rate_limit,
            Some(RateLimit {
                rate: 50,
                burst: 80
            })
        );
        assert!(http.spec.nat_fib);
        assert_eq!(http.announce, Announce::default());
        let check = http.backends[0].check.clone().unwrap();
        assert_eq!(check.target, "10.1.0.1:8080".parse().unwrap());
        assert_eq!(
            check.kind,
            ProbeKind::Http {
                path: "/ready".into(),
                expect: (200, 399),
                host: None
            }
        );
        assert_eq!(
            (check.interval, check.timeout, check.rise, check.fall),
            (Duration::from_millis(500), Duration::from_millis(250), 2, 2)
        );

        assert_eq!(dns.policy.as_deref(), Some("shop/whole"));
        // A SYN limit means nothing to UDP.
        assert_eq!(dns.spec.syn_rate_limit, None);
        assert!(!dns.spec.nat_fib);
        assert_eq!(
            dns.announce,
            Announce {
                advertise: false,
                communities: vec!["65000:1".into()]
            }
        );
        let check = dns.backends[0].check.clone().unwrap();
        assert_eq!(
            (check.kind, check.target),
            (ProbeKind::Tcp, "10.1.0.1:9000".parse().unwrap())
        );
        assert_eq!(
            (check.interval, check.timeout, check.rise, check.fall),
            (Duration::from_secs(2), Duration::from_secs(1), 2, 3)
        );
    }

    #[test]
    fn a_policy_with_type_none_probes_nothing_and_a_bad_one_fails_naming_the_field() {
        let svc = web(
            json!({"ports": http_port()}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let s = v4_slice("web-1", "web", 8080, json!([ready("10.1.0.1", "node-b")]));
        let none = policy(
            "none",
            "2026-01-01T00:00:00Z",
            json!({
                "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
                "healthCheck": {"type": "none"}, "synRateLimit": {"rate": 10},
            }),
        );
        let out = run_with(vec![svc.clone()], vec![s.clone()], vec![none]);
        let v = &vips_of(&out, "shop", "web").vips[0];
        assert_eq!(v.backends[0].check, None);
        assert_eq!(
            v.spec.syn_rate_limit,
            Some(RateLimit {
                rate: 10,
                burst: 10
            })
        );
        let bad = policy(
            "bad",
            "2026-01-01T00:00:00Z",
            json!({
                "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
                "healthCheck": {"type": "tcp", "interval": "soon"},
            }),
        );
        let out = run_with(vec![svc.clone()], vec![s], vec![bad]);
        let err = error_of(&out, "shop", "web").to_string();
        assert!(
            err.starts_with("ServicePolicy shop/bad: healthCheck.interval:"),
            "{err}"
        );
        // Refused with no backend to probe too (the same check rivora-controller reports as
        // Invalid), and naming the field the prober refuses.
        let bad_path = policy(
            "bad-path",
            "2026-01-01T00:00:00Z",
            json!({
                "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
                "healthCheck": {"type": "http", "path": "/has space"},
            }),
        );
        let out = run_with(vec![svc], vec![], vec![bad_path]);
        let err = error_of(&out, "shop", "web").to_string();
        assert!(
            err.starts_with("ServicePolicy shop/bad-path: healthCheck.path: "),
            "{err}"
        );
    }

    #[test]
    fn one_backend_in_two_services_is_probed_the_older_services_way() {
        let older = service(
            "shop",
            "older",
            "2026-01-01T00:00:00Z",
            json!({"ports": http_port()}),
            json!([{"ip": "203.0.113.5"}]),
        );
        let younger = service(
            "shop",
            "younger",
            "2026-02-01T00:00:00Z",
            json!({"ports": http_port()}),
            json!([{"ip": "203.0.113.6"}]),
        );
        let s1 = v4_slice(
            "older-1",
            "older",
            8080,
            json!([ready("10.1.0.1", "node-b")]),
        );
        let s2 = v4_slice(
            "younger-1",
            "younger",
            8080,
            json!([ready("10.1.0.1", "node-b"), ready("10.1.0.2", "node-b")]),
        );
        let p = policy(
            "p",
            "2026-01-01T00:00:00Z",
            json!({
                "targetRefs": [{"group": "", "kind": "Service", "name": "younger"}],
                "healthCheck": {"type": "tcp"},
            }),
        );
        let out = run_with(vec![younger, older], vec![s1, s2], vec![p]);
        let o = &vips_of(&out, "shop", "older").vips[0];
        assert_eq!(o.backends[0].check, None);
        let y = vips_of(&out, "shop", "younger");
        // The shared backend takes the older Service's (no) check; the other keeps its own.
        assert_eq!(y.vips[0].backends[0].check, None);
        assert!(y.vips[0].backends[1].check.is_some());
        assert_eq!(
            y.warnings,
            [Warning::CheckOverridden {
                backend: o.backends[0].key,
                by: key("shop", "older")
            }]
        );
        assert_eq!(
            out[&key("shop", "younger")].state(),
            ServiceState::Programmed
        );
    }

    #[test]
    fn vip_names_are_unique_across_services_and_unnamed_ports_use_the_number() {
        let a = service(
            "shop",
            "a",
            "2026-01-01T00:00:00Z",
            json!({"ports": [{"port": 80, "protocol": "TCP"}]}),
            json!([{"ip": "203.0.113.5"}, {"ip": "2001:db8::5"}]),
        );
        let b = service(
            "shop",
            "b",
            "2026-01-01T00:00:00Z",
            json!({"ports": [{"name": "web", "port": 80, "protocol": "TCP"}, {"name": "web-udp", "port": 80, "protocol": "UDP"}]}),
            json!([{"ip": "203.0.113.6"}]),
        );
        let out = run(vec![a, b], vec![]);
        let names: Vec<String> = out
            .values()
            .filter_map(|o| match o {
                Outcome::Translated(v) => Some(v.vips.iter().map(|v| v.spec.name.clone())),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(
            names,
            [
                "k8s/shop/a/80/tcp/203.0.113.5",
                "k8s/shop/a/80/tcp/2001:db8::5",
                "k8s/shop/b/web/tcp/203.0.113.6",
                "k8s/shop/b/web-udp/udp/203.0.113.6",
            ]
        );
        assert_eq!(names.iter().collect::<BTreeSet<_>>().len(), names.len());
    }
}
