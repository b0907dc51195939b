//! AddressPool IPAM as a pure function: observed pools and claimants in, the addresses every
//! claimant should have (or why it has none) and each pool's counts and conditions out.
//!
//! A claimant is a `type: LoadBalancer` Service of ours or a Gateway of Rivora's GatewayClass
//! ([`ClaimKind`]). Both draw from the same pools under the same rules, so one allocator (not
//! two that would have to agree) decides every address; the kind is part of the key, so a
//! Service and a Gateway with the same namespace and name are two claimants.
//!
//! Why pure: the rules that matter (no restart or failover ever moves an address, a requested
//! address is never given to someone else, a freed address goes to whoever waits) are then
//! proven by unit tests over plain values; the Kubernetes side only observes objects and writes
//! the result back.
//!
//! Order of work, every time (so the result depends on the objects, not on event order):
//! 1. pools are parsed; a pool overlapping an older one (creation time, then name) is marked
//!    `Overlapping` and gives out nothing new; a pool two of whose own blocks overlap (IPv6
//!    ranges, which the CRD's rules cannot compare) is invalid and gives out nothing new either,
//!    but keeps what it already gave; a pool's counts count each address once;
//! 2. **import**: every address a claimant already has (a Service's
//!    `status.loadBalancer.ingress`, a Gateway's `status.addresses`) is kept if it is still
//!    acceptable for it (in a pool it may use, of a family it wants, requested if it requests
//!    addresses, not kept by a claimant earlier in [`ClaimKey`] order) — before anything new is
//!    allocated, so nothing already assigned can be taken;
//! 3. claimants requesting specific addresses get them (before generic requests, so a waiting
//!    generic claimant never takes an address somebody asked for);
//! 4. the rest get the first free address of the best pool for each missing family.

pub mod blocks;
/// Label-selector matching, shared with the nodes (BGPPeer node selectors).
pub use rivora_k8s_api::selector;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::IpAddr;

use blocks::{Block, Family, buggy_count, first_overlap, from_int, is_buggy, union};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A pool as the allocator needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolView {
    /// The AddressPool's name.
    pub name: String,
    /// `spec.addresses`, unparsed (a bad entry makes the pool invalid, it does not panic).
    pub addresses: Vec<String>,
    /// `spec.autoAssign`.
    pub auto_assign: bool,
    /// `spec.avoidBuggyIPs`.
    pub avoid_buggy_ips: bool,
    /// `spec.serviceSelector`.
    pub service_selector: Option<LabelSelector>,
    /// `spec.namespaceSelector`.
    pub namespace_selector: Option<LabelSelector>,
    /// `spec.priority` (higher is tried first).
    pub priority: i32,
    /// `spec.disabled`.
    pub disabled: bool,
    /// `metadata.creationTimestamp` as sortable text (RFC 3339); decides which of two
    /// overlapping pools wins.
    pub created: String,
}

/// `spec.ipFamilyPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilyPolicy {
    /// One address, of the first family in `ipFamilies`.
    SingleStack,
    /// One address per family in `ipFamilies` where possible; one is enough.
    PreferDualStack,
    /// One address per family, both or none.
    RequireDualStack,
}

/// What kind of object claims addresses.
///
/// The derived order (Service before Gateway) is the last tie-break of [`ClaimKey`]; it only
/// matters when both kinds of the same namespace/name show the same address in their status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClaimKind {
    /// A `type: LoadBalancer` Service of Rivora's class (`status.loadBalancer.ingress`).
    Service,
    /// A Gateway of Rivora's GatewayClass (`status.addresses`).
    Gateway,
}

impl fmt::Display for ClaimKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClaimKind::Service => "Service",
            ClaimKind::Gateway => "Gateway",
        })
    }
}

/// Who claims: kind, namespace and name. Results and conditions are reported per key, and the
/// allocator works through claimants in this order (namespace, name, kind), so the result does
/// not depend on the order objects were listed in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Service or Gateway.
    pub kind: ClaimKind,
}

impl ClaimKey {
    /// The key of a Service.
    pub fn service(namespace: &str, name: &str) -> ClaimKey {
        ClaimKey {
            namespace: namespace.into(),
            name: name.into(),
            kind: ClaimKind::Service,
        }
    }

    /// The key of a Gateway.
    pub fn gateway(namespace: &str, name: &str) -> ClaimKey {
        ClaimKey {
            namespace: namespace.into(),
            name: name.into(),
            kind: ClaimKind::Gateway,
        }
    }
}

/// `Service ns/name` or `Gateway ns/name`: how a holder is named in failure messages.
impl fmt::Display for ClaimKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Why a claimant is refused before any address is looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsupported {
    /// A Service port's protocol Rivora cannot forward (SCTP).
    Protocol(String),
    /// A Gateway `spec.addresses` type other than `IPAddress` (`Hostname`, `NamedAddress`, or
    /// an implementation-specific one).
    AddressType(String),
}

/// A claimant (Service or Gateway) as the allocator needs it. Only claimants of ours are
/// passed in: Services of our class ([`crate::observe::service_view`]) and Gateways of our
/// GatewayClass ([`crate::observe::gateway_view`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimView {
    /// Service or Gateway.
    pub kind: ClaimKind,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.labels` (what a pool's `serviceSelector` matches, for either kind).
    pub labels: BTreeMap<String, String>,
    /// Labels of its namespace.
    pub namespace_labels: BTreeMap<String, String>,
    /// Families in preference order: a Service's `spec.ipFamilies` (the API server always sets
    /// it for a Service with a ClusterIP); for a Gateway, see [`crate::observe::gateway_view`].
    pub families: Vec<Family>,
    /// A Service's `spec.ipFamilyPolicy`; for a Gateway, derived like `families`.
    pub family_policy: FamilyPolicy,
    /// Requested addresses: a Service's `spec.loadBalancerIP` or our annotation's list; a
    /// Gateway's `spec.addresses` of type `IPAddress` with a value.
    pub requested: Vec<IpAddr>,
    /// Requested pool (our annotation, on either kind).
    pub requested_pool: Option<String>,
    /// What its status holds now (`status.loadBalancer.ingress`, or a Gateway's
    /// `status.addresses`): imported before anything is allocated.
    pub current: Vec<IpAddr>,
    /// Why it cannot be served at all, if so (then it gets no address).
    pub unsupported: Option<Unsupported>,
    /// How it may share an address with other Services (None: it never shares; always None
    /// for a Gateway).
    pub sharing: Option<Sharing>,
}

/// What decides whether two Services may share one address (our sharing-key annotation).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sharing {
    /// The sharing key; only Services with the same key share.
    pub key: String,
    /// Namespaces whose Services may share with this one besides its own (`*`: any).
    pub cross_namespace: Vec<String>,
    /// (protocol, port) of every port: two sharers must not overlap.
    pub ports: Vec<(String, i32)>,
    /// `spec.externalTrafficPolicy` (`Cluster` when unset): must be the same.
    pub external_traffic_policy: String,
    /// `spec.selector`: with `Local`, sharers must select the same pods.
    pub selector: BTreeMap<String, String>,
}

impl Sharing {
    /// Why `a` and `b` may not share an address, or None if they may.
    pub fn refusal(a: &ClaimView, b: &ClaimView) -> Option<String> {
        if let Some(gw) = [a, b].into_iter().find(|c| c.kind == ClaimKind::Gateway) {
            return Some(format!("{} never shares its address", gw.key()));
        }
        let (Some(x), Some(y)) = (&a.sharing, &b.sharing) else {
            return Some(format!(
                "{} has no sharing key",
                if a.sharing.is_none() {
                    a.key()
                } else {
                    b.key()
                }
            ));
        };
        if x.key != y.key {
            return Some(format!("sharing keys differ ({:?} and {:?})", x.key, y.key));
        }
        let allows = |s: &Sharing, ns: &str| s.cross_namespace.iter().any(|n| n == "*" || n == ns);
        if a.namespace != b.namespace && !(allows(x, &b.namespace) && allows(y, &a.namespace)) {
            return Some("sharing across namespaces is not allowed by both Services".into());
        }
        if let Some((proto, port)) = x.ports.iter().find(|p| y.ports.contains(p)) {
            return Some(format!("both use {proto}/{port}"));
        }
        if x.external_traffic_policy != y.external_traffic_policy {
            return Some("their externalTrafficPolicy differs".into());
        }
        if x.external_traffic_policy == "Local"
            && (x.selector.is_empty() || x.selector != y.selector)
        {
            return Some("with externalTrafficPolicy Local they must select the same pods".into());
        }
        None
    }
}

/// Who holds each address (several Services when they share it).
#[derive(Default)]
struct Holders<'a> {
    by_ip: HashMap<IpAddr, Vec<&'a ClaimView>>,
}

impl<'a> Holders<'a> {
    fn is_free(&self, ip: &IpAddr) -> bool {
        self.by_ip.get(ip).is_none_or(Vec::is_empty)
    }

    /// Ok if `svc` may hold `ip` now (free, or shared compatibly with every holder).
    fn admits(&self, ip: &IpAddr, svc: &ClaimView) -> Result<(), Failure> {
        for h in self.by_ip.get(ip).into_iter().flatten() {
            if let Some(why) = Sharing::refusal(svc, h) {
                return Err(if svc.sharing.is_some() && h.sharing.is_some() {
                    Failure::SharingRefused(*ip, h.key(), why)
                } else {
                    Failure::AddressTaken(*ip, h.key())
                });
            }
        }
        Ok(())
    }

    fn take(&mut self, ip: IpAddr, svc: &'a ClaimView) {
        self.by_ip.entry(ip).or_default().push(svc);
    }

    fn release(&mut self, ip: &IpAddr, svc: &ClaimView) {
        if let Some(v) = self.by_ip.get_mut(ip) {
            v.retain(|h| h.key() != svc.key());
        }
    }

    /// An address already held by Services `svc` may share with, in one of `pools`.
    fn shareable(
        &self,
        svc: &ClaimView,
        fam: Family,
        pools: &[&Pool<'_>],
    ) -> Option<(IpAddr, String)> {
        svc.sharing.as_ref()?;
        let mut ips: Vec<&IpAddr> = self
            .by_ip
            .keys()
            .filter(|ip| Family::of(ip) == fam)
            .collect();
        ips.sort();
        for ip in ips {
            if self.is_free(ip) || self.admits(ip, svc).is_err() {
                continue;
            }
            if let Some(p) = pools.iter().find(|p| p.contains(ip)) {
                return Some((*ip, p.view.name.clone()));
            }
        }
        None
    }
}

impl ClaimView {
    /// Its key (kind, namespace, name).
    pub fn key(&self) -> ClaimKey {
        ClaimKey {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            kind: self.kind,
        }
    }

    /// The families it should get an address of.
    fn wanted_families(&self) -> Vec<Family> {
        let mut fams = self.families.clone();
        if fams.is_empty() {
            fams.push(Family::V4);
        }
        match self.family_policy {
            FamilyPolicy::SingleStack => fams.truncate(1),
            FamilyPolicy::PreferDualStack | FamilyPolicy::RequireDualStack => fams.truncate(2),
        }
        fams
    }
}

/// Why a claimant has no (or not every) address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No pool it may use has addresses of this family.
    NoPool(Family),
    /// The pools it may use have no free address of this family.
    PoolExhausted(Family),
    /// The requested pool does not exist, is disabled, overlapping or invalid.
    PoolUnusable(String),
    /// A requested address is kept by another claimant (address, holder).
    AddressTaken(IpAddr, ClaimKey),
    /// A requested address is in no pool the claimant may use.
    AddressOutsidePools(IpAddr),
    /// RequireDualStack but `ipFamilies` lists fewer than two families.
    NotDualStack,
    /// A port's protocol cannot be forwarded.
    UnsupportedProtocol(String),
    /// A Gateway asks for an address type Rivora cannot give (only `IPAddress`).
    UnsupportedAddressType(String),
    /// A requested address is held by a Service with the same sharing key that may not share
    /// it (address, holder, why).
    SharingRefused(IpAddr, ClaimKey, String),
    /// RequireDualStack, but no address of this family is requested while one of the other
    /// family is: requested addresses say which families it gets, and RequireDualStack wants
    /// both or none.
    RequestNotDualStack(Family),
    /// None of the requested addresses is of a family it wants (`ipFamilies` and
    /// `ipFamilyPolicy`); the first one.
    RequestedFamilyUnwanted(IpAddr),
}

impl Failure {
    /// Machine-readable reason, for the claimant's condition and the Event.
    pub fn reason(&self) -> &'static str {
        match self {
            Failure::NoPool(_) => "NoPool",
            Failure::PoolExhausted(_) => "PoolExhausted",
            Failure::PoolUnusable(_) => "PoolUnusable",
            Failure::AddressTaken(..) => "AddressInUse",
            Failure::AddressOutsidePools(_) => "AddressOutsidePools",
            Failure::NotDualStack => "NotDualStack",
            Failure::UnsupportedProtocol(_) => "UnsupportedProtocol",
            Failure::UnsupportedAddressType(_) => "UnsupportedAddress",
            Failure::SharingRefused(..) => "SharingRefused",
            Failure::RequestNotDualStack(_) | Failure::RequestedFamilyUnwanted(_) => {
                "InvalidRequest"
            }
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::NoPool(fam) => {
                write!(f, "no AddressPool that may serve it has {fam} addresses")
            }
            Failure::PoolExhausted(fam) => write!(
                f,
                "every AddressPool that may serve it is out of {fam} addresses"
            ),
            Failure::PoolUnusable(p) => write!(
                f,
                "the requested AddressPool {p} does not exist or gives out no addresses (disabled, invalid or overlapping)"
            ),
            Failure::AddressTaken(ip, by) => {
                write!(f, "the requested address {ip} is assigned to {by}")
            }
            Failure::AddressOutsidePools(ip) => write!(
                f,
                "the requested address {ip} is in no AddressPool that may serve it"
            ),
            Failure::NotDualStack => {
                f.write_str("ipFamilyPolicy RequireDualStack needs two ipFamilies")
            }
            Failure::UnsupportedProtocol(p) => write!(f, "protocol {p} is not supported by Rivora"),
            Failure::UnsupportedAddressType(t) => write!(
                f,
                "address type {t} is not supported by Rivora (only IPAddress)"
            ),
            Failure::SharingRefused(ip, by, why) => write!(
                f,
                "the requested address {ip} is assigned to {by}, which it may not share: {why}"
            ),
            Failure::RequestNotDualStack(fam) => write!(
                f,
                "ipFamilyPolicy RequireDualStack needs a requested address of each family, and no \
                 {fam} address is requested: request one, or no address at all, or use \
                 PreferDualStack"
            ),
            Failure::RequestedFamilyUnwanted(ip) => write!(
                f,
                "the requested address {ip} is {}, a family its ipFamilies and ipFamilyPolicy do \
                 not give it",
                Family::of(ip)
            ),
        }
    }
}

/// What one claimant should have.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    /// The addresses (with the pool each came from), in `ipFamilies` order.
    pub addresses: Vec<(IpAddr, String)>,
    /// Why it has none or fewer than wanted (empty: everything it wanted).
    pub failures: Vec<Failure>,
}

/// Counts and conditions of one pool.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolReport {
    /// Why the pool is invalid (a bad block, or two of its blocks sharing addresses), if it is.
    pub invalid: Option<String>,
    /// The older pool it overlaps, if any.
    pub overlaps: Option<String>,
    /// Usable addresses per family (after avoidBuggyIPs), each counted once however many of
    /// the pool's blocks hold it.
    pub total: BTreeMap<Family, u128>,
    /// Assigned addresses per family.
    pub used: BTreeMap<Family, u128>,
}

impl PoolReport {
    /// Whether no address of any family it has is left.
    pub fn exhausted(&self) -> bool {
        !self.total.is_empty()
            && self
                .total
                .iter()
                .all(|(f, t)| self.used.get(f).copied().unwrap_or(0) >= *t)
    }

    /// The families it has with no address left (both: [`PoolReport::exhausted`]). Why per
    /// family: a dual-stack pool out of IPv4 refuses every claimant that wants IPv4 while its
    /// IPv6 half is free, and the sum of both hides that.
    pub fn exhausted_families(&self) -> Vec<Family> {
        self.total
            .iter()
            .filter(|(f, t)| self.used.get(f).copied().unwrap_or(0) >= **t)
            .map(|(f, _)| *f)
            .collect()
    }

    /// Addresses of `family` not assigned (zero when it has none of the family).
    pub fn available(&self, family: Family) -> u128 {
        let total = self.total.get(&family).copied().unwrap_or(0);
        total.saturating_sub(self.used.get(&family).copied().unwrap_or(0))
    }
}

/// The whole result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// Per claimant, Services and Gateways alike.
    pub claims: BTreeMap<ClaimKey, Assignment>,
    /// Per pool name.
    pub pools: BTreeMap<String, PoolReport>,
}

struct Pool<'a> {
    view: &'a PoolView,
    blocks: Vec<Block>,
    /// Gives out new addresses (valid, not overlapping an older pool, not disabled).
    allocates: bool,
    /// May hold imported addresses (valid, not overlapping).
    usable: bool,
}

impl Pool<'_> {
    fn may_serve(&self, svc: &ClaimView) -> bool {
        selector::matches(self.view.service_selector.as_ref(), &svc.labels)
            && selector::matches(self.view.namespace_selector.as_ref(), &svc.namespace_labels)
    }

    fn contains(&self, ip: &IpAddr) -> bool {
        self.blocks.iter().any(|b| b.contains(ip)) && self.offers(ip)
    }

    /// Whether the pool hands out `ip` at all (avoidBuggyIPs), block membership aside.
    fn offers(&self, ip: &IpAddr) -> bool {
        !self.view.avoid_buggy_ips || !is_buggy(ip)
    }
}

/// Computes the assignments. See the module documentation for the order of work.
///
/// `claims` should hold each key once (the caller lists each object once); a duplicate key
/// is ignored after the first in key order.
pub fn allocate(pools: &[PoolView], claims: &[ClaimView]) -> Outcome {
    let mut out = Outcome::default();
    let pools = prepare_pools(pools, &mut out);
    let mut services: Vec<&ClaimView> = claims.iter().collect();
    services.sort_by_key(|c| c.key());
    services.dedup_by_key(|c| c.key());

    let mut taken = Holders::default();
    let mut kept: BTreeMap<ClaimKey, Vec<(IpAddr, String)>> = BTreeMap::new();

    // 2. Import what claimants already have.
    for svc in &services {
        if svc.unsupported.is_some() {
            continue;
        }
        let key = svc.key();
        let wanted = svc.wanted_families();
        let mut mine: Vec<(IpAddr, String)> = Vec::new();
        for ip in &svc.current {
            let fam = Family::of(ip);
            let acceptable = wanted.contains(&fam)
                && !mine.iter().any(|(m, _)| Family::of(m) == fam)
                && taken.admits(ip, svc).is_ok()
                && (svc.requested.is_empty() || svc.requested.contains(ip));
            if !acceptable {
                continue;
            }
            if let Some(pool) = pools
                .iter()
                .find(|p| p.usable && pool_allowed(p, svc) && p.contains(ip))
            {
                taken.take(*ip, svc);
                mine.push((*ip, pool.view.name.clone()));
            }
        }
        kept.insert(key, mine);
    }

    // 3 and 4: requested addresses first, then generic requests.
    let (with_requests, generic): (Vec<&ClaimView>, Vec<&ClaimView>) =
        services.iter().partition(|s| !s.requested.is_empty());
    for svc in with_requests.into_iter().chain(generic) {
        let key = svc.key();
        let mut assignment = Assignment {
            addresses: kept.remove(&key).unwrap_or_default(),
            failures: Vec::new(),
        };
        if let Some(u) = &svc.unsupported {
            assignment.failures.push(match u {
                Unsupported::Protocol(p) => Failure::UnsupportedProtocol(p.clone()),
                Unsupported::AddressType(t) => Failure::UnsupportedAddressType(t.clone()),
            });
            out.claims.insert(key, assignment);
            continue;
        }
        if svc.family_policy == FamilyPolicy::RequireDualStack && svc.families.len() < 2 {
            release(&mut assignment, &mut taken, svc);
            assignment.failures.push(Failure::NotDualStack);
            out.claims.insert(key, assignment);
            continue;
        }
        if let Some(name) = &svc.requested_pool
            && !pools.iter().any(|p| &p.view.name == name && p.allocates)
            && assignment.addresses.is_empty()
        {
            assignment
                .failures
                .push(Failure::PoolUnusable(name.clone()));
            out.claims.insert(key, assignment);
            continue;
        }
        let wanted = svc.wanted_families();
        for &fam in &wanted {
            if assignment
                .addresses
                .iter()
                .any(|(a, _)| Family::of(a) == fam)
            {
                continue;
            }
            if !svc.requested.is_empty() && !svc.requested.iter().any(|a| Family::of(a) == fam) {
                // The request names the families: no address of this one is asked for.
                if let Some(f) = unrequested_family(svc, fam, &wanted)
                    && !assignment.failures.contains(&f)
                {
                    assignment.failures.push(f);
                }
                continue;
            }
            match pick(&pools, svc, fam, &taken) {
                Ok((ip, pool)) => {
                    taken.take(ip, svc);
                    assignment.addresses.push((ip, pool));
                }
                Err(f) => assignment.failures.push(f),
            }
        }
        let satisfied = match svc.family_policy {
            FamilyPolicy::RequireDualStack => assignment.failures.is_empty(),
            _ => !assignment.addresses.is_empty(),
        };
        if !satisfied {
            release(&mut assignment, &mut taken, svc);
        }
        if svc.family_policy == FamilyPolicy::PreferDualStack && !assignment.addresses.is_empty() {
            // One family is enough; say nothing about a family that had no pool at all.
            assignment
                .failures
                .retain(|f| !matches!(f, Failure::NoPool(_)));
        }
        let order = svc.wanted_families();
        assignment
            .addresses
            .sort_by_key(|(a, _)| order.iter().position(|f| *f == Family::of(a)));
        out.claims.insert(key, assignment);
    }

    for pool in &pools {
        let report = out.pools.entry(pool.view.name.clone()).or_default();
        for ip in taken
            .by_ip
            .iter()
            .filter(|(_, h)| !h.is_empty())
            .map(|(ip, _)| ip)
        {
            if pool.usable && pool.contains(ip) {
                *report.used.entry(Family::of(ip)).or_default() += 1;
            }
        }
    }
    out
}

/// What to say about wanted family `fam` of a claimant that requests addresses, none of `fam`:
/// nothing when it requests one of another wanted family (PreferDualStack: the request decides),
/// the missing family under RequireDualStack (both or none), and when no requested address is
/// of a wanted family, that the request does not fit its families. Never `NoPool`: whether a
/// pool has the family is not the question.
fn unrequested_family(svc: &ClaimView, fam: Family, wanted: &[Family]) -> Option<Failure> {
    let fits = svc
        .requested
        .iter()
        .any(|a| wanted.contains(&Family::of(a)));
    match (fits, svc.family_policy) {
        (true, FamilyPolicy::RequireDualStack) => Some(Failure::RequestNotDualStack(fam)),
        (true, _) => None,
        (false, _) => svc
            .requested
            .first()
            .map(|a| Failure::RequestedFamilyUnwanted(*a)),
    }
}

fn release(assignment: &mut Assignment, taken: &mut Holders<'_>, svc: &ClaimView) {
    for (ip, _) in assignment.addresses.drain(..) {
        taken.release(&ip, svc);
    }
}

/// Whether the Service may have addresses of this pool (its request and the pool's selectors).
fn pool_allowed(pool: &Pool<'_>, svc: &ClaimView) -> bool {
    match &svc.requested_pool {
        Some(name) => &pool.view.name == name,
        None => pool.may_serve(svc),
    }
}

/// The address to give `svc` for family `fam`.
fn pick(
    pools: &[Pool<'_>],
    svc: &ClaimView,
    fam: Family,
    taken: &Holders<'_>,
) -> Result<(IpAddr, String), Failure> {
    let candidates: Vec<&Pool<'_>> = pools
        .iter()
        .filter(|p| p.allocates && pool_allowed(p, svc))
        .filter(|p| svc.requested_pool.is_some() || p.view.auto_assign || !svc.requested.is_empty())
        .collect();
    let requested: Vec<&IpAddr> = svc
        .requested
        .iter()
        .filter(|ip| Family::of(ip) == fam)
        .collect();
    if let Some(ip) = requested.first() {
        taken.admits(ip, svc)?;
        return candidates
            .iter()
            .find(|p| p.contains(ip))
            .map(|p| (**ip, p.view.name.clone()))
            .ok_or(Failure::AddressOutsidePools(**ip));
    }
    if let Some(other) = svc.requested.first() {
        // Requested addresses only of the other family ([`allocate`] does not ask then).
        return Err(Failure::RequestedFamilyUnwanted(*other));
    }
    if let Some(shared) = taken.shareable(svc, fam, &candidates) {
        return Ok(shared);
    }
    let mut any = false;
    for pool in candidates {
        for block in pool.blocks.iter().filter(|b| b.family == fam) {
            any = true;
            let mut n = block.first;
            loop {
                let ip = from_int(fam, n);
                if pool.offers(&ip) && taken.is_free(&ip) {
                    return Ok((ip, pool.view.name.clone()));
                }
                if n == block.last {
                    break;
                }
                n += 1;
            }
        }
    }
    Err(if any {
        Failure::PoolExhausted(fam)
    } else {
        Failure::NoPool(fam)
    })
}

/// Parses pools, settles overlaps (older wins) and sorts them by preference.
fn prepare_pools<'a>(views: &'a [PoolView], out: &mut Outcome) -> Vec<Pool<'a>> {
    let mut by_age: Vec<&PoolView> = views.iter().collect();
    by_age.sort_by(|a, b| (&a.created, &a.name).cmp(&(&b.created, &b.name)));
    let mut pools: Vec<Pool<'a>> = Vec::new();
    for view in by_age {
        let mut report = PoolReport::default();
        let parsed: Result<Vec<Block>, String> =
            view.addresses.iter().map(|a| Block::parse(a)).collect();
        let blocks = match parsed {
            Ok(b) => b,
            Err(e) => {
                report.invalid = Some(e);
                Vec::new()
            }
        };
        let parsed_ok = report.invalid.is_none();
        // Two blocks of this pool sharing addresses: what the CRD refuses for IPv4 (and IPv6
        // CIDRs) is refused here too. Nothing new is given out, but what is assigned stays
        // (like `disabled`): the blocks themselves are sound, and no address may move.
        let own_overlap = first_overlap(&blocks);
        if let Some((i, j)) = own_overlap {
            report.invalid = Some(format!(
                "spec.addresses {:?} and {:?} overlap: the blocks of one pool must not share \
                 addresses (nothing new is assigned from this pool until they are disjoint; \
                 addresses already assigned stay)",
                view.addresses[i], view.addresses[j]
            ));
        }
        if parsed_ok {
            report.overlaps = pools
                .iter()
                .filter(|p| p.usable)
                .find(|p| {
                    p.blocks
                        .iter()
                        .any(|a| blocks.iter().any(|b| a.overlaps(b)))
                })
                .map(|p| p.view.name.clone());
        }
        let usable = parsed_ok && report.overlaps.is_none();
        for b in union(&blocks) {
            let mut n = b.size();
            if view.avoid_buggy_ips && b.family == Family::V4 {
                n -= buggy_count(b.first, b.last);
            }
            let total = report.total.entry(b.family).or_default();
            *total = total.saturating_add(n);
        }
        out.pools.insert(view.name.clone(), report);
        pools.push(Pool {
            view,
            blocks,
            allocates: usable && own_overlap.is_none() && !view.disabled,
            usable,
        });
    }
    pools.sort_by(|a, b| {
        b.view
            .priority
            .cmp(&a.view.priority)
            .then_with(|| a.view.name.cmp(&b.view.name))
    });
    pools
}

#[cfg(test)]
mod tests;
