//! The desired state of one Rivora node, independent of where it came from.
//!
//! rivorad has two sources of VIPs: the static YAML file (`--config`) and,
//! later, the Kubernetes reconcilers (`--kubernetes`). A node runs one or
//! the other, never both. Every subsystem of rivorad (the dataplane apply,
//! the kernel preparation, the health prober and the announcer) reads this
//! model and nothing source-specific, so a second source is one more
//! producer of a [`DesiredState`] and not a second copy of each subsystem.
//!
//! The model holds no parsing and no I/O: a source builds it, rivorad's
//! apply step consumes it. It reuses the types its consumers already speak
//! ([`rivora_dataplane::VipSpec`], [`rivora_health::ProbeSpec`],
//! [`rivora_bgp::SpeakerConfig`]) rather than mirroring them, so there is
//! nothing to translate twice and nothing to drift.
#![warn(missing_docs)]

mod announce;
mod backend;
mod node;
mod origin;
mod validate;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use rivora_dataplane::classifier::ClassifierSpec;
use rivora_dataplane::{BackendKey, Mode, VipSpec};
use rivora_health::ProbeSpec;

pub use announce::{AnnouncePolicy, Community};
pub use backend::BackendMeta;
pub use node::{L2Settings, NodeSettings, SnatAddresses, TunnelSource};
pub use origin::{GatewayRef, Origin, ServiceRef};
pub use validate::Inconsistency;

/// What an apply does with VIPs the maps hold that the desired state does
/// not list. A source says which with every state it hands over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApplyMode {
    /// Remove them: the state is the whole truth. The YAML source always
    /// applies this way (leftovers of the file are removed at once), and so
    /// does the Kubernetes source once its initial sync is complete.
    #[default]
    Prune,
    /// Leave the VIPs adopted from pinned maps that nothing has claimed yet
    /// exactly as they are (forwarding, unclaimed). The Kubernetes source
    /// applies this way until its initial sync completes, because until
    /// then a VIP may look unclaimed only because its Service has not been
    /// seen yet (rivora-architecture.txt, "State, restarts and adoption").
    KeepUnclaimed,
}

impl ApplyMode {
    /// `prune` or `keep-unclaimed`, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyMode::Prune => "prune",
            ApplyMode::KeepUnclaimed => "keep-unclaimed",
        }
    }
}

/// Everything a node should forward and announce: the VIPs and the
/// node-wide settings. Produced whole by a source on every change (never a
/// patch), so applying it is "make the node match this".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DesiredState {
    /// The VIPs, in the source's order (the file's order for the YAML
    /// source). Names are unique; the dataplane's apply checks the rest.
    pub vips: Vec<DesiredVip>,
    /// Settings that apply to the node as a whole, not to one VIP.
    pub node: NodeSettings,
    /// Meridio-2-style classifier VIPs (whole addresses sorted by rules
    /// into distribution groups); empty for most nodes. Its own model
    /// because its VIPs are not (address, port, protocol) services.
    pub classifier: ClassifierSpec,
}

/// One VIP: what the dataplane programs, plus what the other subsystems
/// need to know about it and its backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredVip {
    /// The VIP exactly as the dataplane programs it (name, key, mode,
    /// backends with their weights, affinity, SYN limit, NAT forwarding).
    pub spec: VipSpec,
    /// Where the VIP came from, for logs and the API.
    pub origin: Origin,
    /// What the source says about each backend beyond its dataplane spec
    /// (its health check, above all). At most one entry per backend key,
    /// each for a backend in `spec.backends`; a backend without an entry
    /// has no check and nothing else to say ([`BackendMeta::new`]).
    pub backends: Vec<BackendMeta>,
    /// Whether and how the VIP is announced to the network.
    pub announce: AnnouncePolicy,
}

impl DesiredVip {
    /// A VIP with one default [`BackendMeta`] per backend (no checks) and
    /// the default announcement policy: a starting point a source fills in.
    pub fn new(spec: VipSpec, origin: Origin) -> Self {
        let backends = spec
            .backends
            .iter()
            .map(|b| BackendMeta::new(b.key))
            .collect();
        Self {
            spec,
            origin,
            backends,
            announce: AnnouncePolicy::default(),
        }
    }

    /// What the source says about backend `key`, if anything.
    pub fn backend(&self, key: &BackendKey) -> Option<&BackendMeta> {
        self.backends.iter().find(|b| b.key == *key)
    }
}

impl DesiredState {
    /// The VIPs as the dataplane's apply takes them.
    pub fn specs(&self) -> Vec<VipSpec> {
        self.vips.iter().map(|v| v.spec.clone()).collect()
    }

    /// Whether any VIP is a NAT VIP, whose replies need the egress program
    /// (tc_nat): a node with only DSR VIPs does not attach it.
    pub fn has_nat_vip(&self) -> bool {
        self.vips.iter().any(|v| v.spec.mode == Mode::Nat)
    }

    /// Whether any IPv4 VIP uses an L3 DSR mode (IPIP or GRE), whose
    /// kernel-fallback packets need `accept_local` on the interface.
    pub fn has_ipv4_l3_dsr_vip(&self) -> bool {
        self.vips.iter().any(|v| {
            v.spec.key.addr.is_ipv4() && matches!(v.spec.mode, Mode::DsrIpip | Mode::DsrGre)
        })
    }

    /// Whether any IPv4 VIP has source-translated backends, whose
    /// kernel-fallback packets (sent before the FIB can route them) carry
    /// the node's address as source and need `accept_local` too.
    pub fn has_ipv4_snat_vip(&self) -> bool {
        self.vips
            .iter()
            .any(|v| v.spec.key.addr.is_ipv4() && !v.spec.snat.is_empty())
    }

    /// The health check of every checked backend, once per backend: a
    /// backend shared by several VIPs is probed once. When two VIPs give
    /// one backend a check, the later VIP's is returned; [`Self::validate`]
    /// refuses a state where those checks differ.
    pub fn checks(&self) -> BTreeMap<BackendKey, &ProbeSpec> {
        let mut out = BTreeMap::new();
        for vip in &self.vips {
            for b in &vip.backends {
                if let Some(check) = &b.check {
                    out.insert(b.key, check);
                }
            }
        }
        out
    }

    /// Per VIP name, its announcement policy (what BGP routes carry).
    pub fn announce_policies(&self) -> BTreeMap<String, AnnouncePolicy> {
        self.vips
            .iter()
            .map(|v| (v.spec.name.clone(), v.announce.clone()))
            .collect()
    }

    /// The addresses the ARP/NDP responder answers for: every address of
    /// an advertised VIP, once (several VIPs may share one address), and
    /// every classifier VIP that can forward (a rule leads to a group with
    /// a target of its family).
    pub fn l2_addresses(&self) -> BTreeSet<IpAddr> {
        self.vips
            .iter()
            .filter(|v| v.announce.advertise)
            .map(|v| v.spec.key.addr)
            .chain(self.classifier.ready_vips())
            .collect()
    }

    /// Checks what the types cannot: every backend entry belongs to a
    /// backend of its VIP and appears once, each check probes its own
    /// backend's address, and a backend shared by VIPs has one check. A
    /// source that breaks these has a bug; applying such a state would
    /// probe the wrong thing, so rivorad refuses it whole. Returns every
    /// problem found.
    pub fn validate(&self) -> Result<(), Vec<Inconsistency>> {
        validate::validate(self)
    }
}

#[cfg(test)]
mod tests;
