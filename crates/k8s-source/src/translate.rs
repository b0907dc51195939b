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
mod tests;
