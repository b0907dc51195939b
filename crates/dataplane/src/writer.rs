//! The map writer: the one place that turns a desired set of VIPs into map
//! contents. A change is planned on copies of the allocators first; only when
//! every ID and slice could be allocated are the maps written, in an order
//! that never lets a packet see a half-built VIP:
//!
//! 1. new backends get their address entry and health before any slice
//!    names them;
//! 2. a new or changed VIP's Maglev slice is written into free slots, then
//!    its own SYN rate limit (svc_rl_config_map) and source ranges (into the
//!    bank of src_range_map(6) not in force), then its service entry is
//!    rewritten in one update (the flip, which also carries the affinity,
//!    rate-limit and source-range flags and the bank), then the other bank
//!    is emptied, then a new VIP's vip_map entry (exact VIPs) or its
//!    vip_range_map prefixes (port ranges) are inserted;
//! 3. the VIP index (vip_index_map, the inlined copy of vip_map that the
//!    program reads: see [`crate::vip_index`]) is rebuilt for the new set in
//!    the half not in use and switched to in one vip_index_ctl_map update,
//!    so it points at added VIPs only once they are complete and stops
//!    pointing at removed ones before anything of them is cleared;
//! 4. removed VIPs lose their vip_map entry or range prefixes before their
//!    service entry, and that before their rate limit and source ranges;
//! 5. only then are old slices, service IDs and backend IDs released.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use aya::maps::PerCpuValues;
use rivora_abi as abi;
use rivora_maglev::{self as maglev, MaglevBackend};

use crate::Error;
use crate::alloc::{IdAllocator, Slice, SliceAllocator};
use crate::endpoints::{self, Demand, Endpoint, EndpointEntry};
use crate::maps::{self, Maps};
use crate::model::{BackendKey, BackendSpec, Mode, RateLimit, SourceRange, VipKey, VipSpec};
use crate::vip_index;

// One module per concern, each an `impl Dataplane` block over the maps it writes and the
// shadow state that explains them; this file holds the shared state, the types the modules share,
// and the read-only views. Where to look:
mod adopt; // reading pinned maps back into the bookkeeping (a restart)
mod apply; // one apply: validate, plan on copies, write in the order above
mod backends; // backend_map, health, retire grace
mod endpoint_table; // nat_endpoint_map(6), nat_backend_filter_map (replies, reverse NAT)
mod flows; // flow guard, SYN rate limit, flow filter, forgetting affinity and UDP flows
mod index; // vip_map, vip_range_map(6) prefixes, the VIP index
mod report; // ApplyReport, AdoptReport
mod services; // service_map entries and Maglev slices
mod sources; // tunnel source, SNAT source and ports, interface
mod src_ranges; // loadBalancerSourceRanges banks
mod stats; // counters, table usage, zeroing on reuse

mod admit;
mod rounds;
mod validate;
use flows::*;
pub use index::*;
pub use report::*;
pub use rounds::RefusedVip;
use rounds::{Rounds, wants_resize};
pub use services::*;
use src_ranges::*;
pub use stats::*;
use validate::{check_range_capacity, check_rate_limit, validate};

/// A programmed VIP.
#[derive(Clone, Debug)]
pub struct VipState {
    /// The spec it was programmed from (backends in canonical order).
    pub spec: VipSpec,
    /// Its service ID (index of service_config_map and stats_map).
    pub service_id: u32,
    /// Its slice of the Maglev table.
    pub slice: Slice,
    /// Generation written with its service entry.
    pub generation: u32,
    /// Worst relative deviation of a backend's slot share from its weight
    /// share (0.01 = 1%), reported because crowded tables shrink slices.
    pub worst_imbalance: f64,
    /// Read back from pinned maps at start and not yet matched with the
    /// configuration: name and weights are unknown until then.
    pub adopted: bool,
    /// The bank of src_range_map(6) its source ranges are in (0 or 1,
    /// service flag `SOURCE_BANK`); 0 without source ranges.
    pub src_bank: u32,
}

/// A programmed backend, shared by every VIP that lists it.
#[derive(Clone, Debug)]
pub struct BackendState {
    /// Address and port.
    pub key: BackendKey,
    /// Its backend ID.
    pub id: u32,
    /// Generation written with its entry (flows check it).
    pub generation: u32,
    /// MAC (DSR modes).
    pub mac: [u8; 6],
    /// Effective health state as written to the map
    /// (`rivora_abi::backend_state`): down if the probes say so, else
    /// draining if drained, terminating or retiring, else healthy.
    pub state: u32,
    /// Drained by an operator.
    pub drained: bool,
    /// Its source asks for no new flows (`VipSpec::draining`) in every VIP
    /// that lists it; kept across restarts in the health map's flags.
    pub terminating: bool,
    /// The health probes consider it down.
    pub probe_down: bool,
    /// A backend on another node: a VIP's flows to it get the node's
    /// address as source (`VipSpec::snat`, health flag SNAT).
    pub snat: bool,
    /// When `state` last changed in this process (None: not since start).
    pub last_change: Option<std::time::SystemTime>,
    /// VIPs that list it.
    pub vips: BTreeSet<VipKey>,
    /// Set when no VIP lists it any more: it keeps its ID (in the draining
    /// state, so established flows finish) until the retire grace passes.
    pub retired_at: Option<Instant>,
}

/// Owner of the maps and of the bookkeeping that explains them.
pub struct Dataplane {
    maps: Maps,
    vips: BTreeMap<VipKey, VipState>,
    backends: BTreeMap<BackendKey, BackendState>,
    service_ids: IdAllocator,
    backend_ids: IdAllocator,
    slices: SliceAllocator,
    next_generation: u32,
    retire_grace: Duration,
    node_syn_rate_limit: Option<RateLimit>,
    /// Outer source addresses of L3 DSR, as last set.
    tunnel_source: (Option<std::net::Ipv4Addr>, Option<std::net::Ipv6Addr>),
    /// The source of translated flows, as last set (snat.rs).
    snat_source: crate::snat::SnatSource,
    /// What the VIP index maps hold.
    index: IndexShadow,
    /// What nat_endpoint_map(6) hold (endpoints.rs).
    endpoints: BTreeMap<Endpoint, EndpointEntry>,
    /// What nat_backend_filter_map holds (None: not read or written yet).
    backend_filter: Option<Vec<u64>>,
    /// What src_range_map(6) hold, by key tag (service ID and bank).
    src_ranges: BTreeMap<u32, BTreeSet<SourceRange>>,
    /// The backend ID of the refusing pseudo-backend (health flag REJECT)
    /// while some VIP has a `reject_weight`; one for all of them.
    reject_id: Option<u32>,
    /// The classifier's bookkeeping (Meridio-2's rules and groups), next
    /// to the VIPs': its own maps, IDs and table.
    cls: crate::classifier::Classifier,
    /// A VIP that does not fit is refused alone instead of the whole apply
    /// ([`Dataplane::set_refuse_alone`]).
    refuse_alone: bool,
    /// The VIPs the last apply refused alone.
    refused: Vec<RefusedVip>,
    /// Where the last apply's time went.
    phases: ApplyPhases,
    /// The classifier groups and rules the last apply refused alone.
    cls_refused: Vec<crate::classifier::RefusedObject>,
}

enum VipChange {
    Add,
    Rebuild,
    /// Same backends, a new slice size: the VIP's share of the table moved
    /// far from what it holds ([`wants_resize`]). Optional: when the new
    /// slice cannot be placed, the VIP keeps the one it has.
    Resize,
    /// Affinity or rate limit changed: the service entry is rewritten with
    /// the same slice.
    Reconfigure,
    /// Only what the writer's own bookkeeping holds changed: the name,
    /// `stateless_reverse` (the endpoint table follows) or `draining` (the
    /// health map follows; the slice stays as it is).
    Rename,
    Adopt,
}

struct PlannedVip {
    spec: VipSpec,
    change: VipChange,
    service_id: u32,
    slice: Slice,
    table: Vec<u32>,
    worst_imbalance: f64,
}

impl Dataplane {
    /// Takes ownership of freshly loaded maps (empty bookkeeping).
    pub fn new(maps: Maps) -> Self {
        let table_len = maps.maglev.len();
        Self {
            maps,
            vips: BTreeMap::new(),
            backends: BTreeMap::new(),
            service_ids: IdAllocator::new(abi::MAX_VIPS),
            backend_ids: IdAllocator::new(abi::MAX_BACKENDS),
            slices: SliceAllocator::new(table_len),
            next_generation: 1,
            retire_grace: Duration::ZERO,
            tunnel_source: (None, None),
            snat_source: crate::snat::SnatSource::default(),
            node_syn_rate_limit: None,
            index: IndexShadow::zeroed(),
            endpoints: BTreeMap::new(),
            backend_filter: None,
            src_ranges: BTreeMap::new(),
            reject_id: None,
            cls: crate::classifier::Classifier::new(),
            refuse_alone: false,
            refused: Vec::new(),
            phases: ApplyPhases::default(),
            cls_refused: Vec::new(),
        }
    }

    /// Makes the classifier maps hold `spec` (see
    /// [`crate::classifier::writer`]). `prune` as [`crate::classifier::Classifier::apply`].
    pub fn apply_classifier(
        &mut self,
        spec: &crate::classifier::ClassifierSpec,
        prune: bool,
    ) -> Result<crate::classifier::ClsReport, Error> {
        self.cls.apply(&mut self.maps.cls, spec, prune)
    }

    /// Refuse-alone mode's [`Self::apply_classifier`]: the groups and rules of `spec` that are
    /// invalid or do not fit are refused alone ([`crate::classifier::Classifier::admit`];
    /// [`Self::classifier_refused`] lists them) and the rest is applied. When that apply gave
    /// room back (groups or rules removed or changed: their old tables and IDs are held until
    /// the change is complete), the refused ones are tried once more.
    pub fn apply_classifier_alone(
        &mut self,
        spec: &crate::classifier::ClassifierSpec,
        prune: bool,
    ) -> Result<crate::classifier::ClsReport, Error> {
        let (admitted, mut refused) = self.cls.admit(spec);
        let mut report = self.cls.apply(&mut self.maps.cls, &admitted, prune)?;
        let gave_back = report.groups_removed + report.groups_changed + report.rules_removed > 0;
        if !refused.is_empty() && gave_back {
            let (again, still) = self.cls.admit(spec);
            if again != admitted {
                let more = self.cls.apply(&mut self.maps.cls, &again, prune)?;
                report.groups_added += more.groups_added;
                report.groups_changed += more.groups_changed;
                report.groups_removed += more.groups_removed;
                report.rules_written += more.rules_written;
                report.rules_removed += more.rules_removed;
                report.vips_written += more.vips_written;
                report.vips_removed += more.vips_removed;
                report.legacy_freed += more.legacy_freed;
            }
            refused = still;
        }
        self.cls_refused = refused;
        Ok(report)
    }

    /// The classifier groups and rules the last [`Self::apply_classifier_alone`] refused.
    pub fn classifier_refused(&self) -> &[crate::classifier::RefusedObject] {
        &self.cls_refused
    }

    /// Whether this dataplane refuses a VIP, group or rule alone
    /// ([`Self::set_refuse_alone`]).
    pub fn refuses_alone(&self) -> bool {
        self.refuse_alone
    }

    /// Whether [`Self::apply_classifier`] would accept `spec` (valid, and
    /// within every capacity), without writing anything: lets a caller
    /// refuse a whole desired state before any of it is applied.
    pub fn check_classifier(&self, spec: &crate::classifier::ClassifierSpec) -> Result<(), Error> {
        self.cls.check(spec)
    }

    /// The classifier's bookkeeping (IDs of groups, rules and VIPs).
    pub fn classifier(&self) -> &crate::classifier::Classifier {
        &self.cls
    }

    /// The backend ID of the pseudo-backend that owns the VIPs' refused
    /// shares (`VipSpec::reject_weight`), while any VIP has one.
    pub fn reject_backend_id(&self) -> Option<u32> {
        self.reject_id
    }

    /// Programmed VIPs.
    pub fn vips(&self) -> impl Iterator<Item = &VipState> {
        self.vips.values()
    }

    /// Programmed backends.
    pub fn backends(&self) -> impl Iterator<Item = &BackendState> {
        self.backends.values()
    }

    /// The map handles, for readers such as tests and stats.
    pub fn maps(&self) -> &Maps {
        &self.maps
    }

    /// Mutable map handles (tests use it to plant odd states).
    pub fn maps_mut(&mut self) -> &mut Maps {
        &mut self.maps
    }

    /// Length of the shared Maglev table.
    pub fn maglev_table_len(&self) -> u32 {
        self.slices.len()
    }

    /// The one warning to log after an apply when VIPs balance worse than
    /// `threshold` because the table is crowded (see [`crate::imbalance`]).
    pub fn imbalance_warning(&self, threshold: f64) -> Option<crate::imbalance::ImbalanceWarning> {
        let vips: Vec<crate::imbalance::VipBalance> = self
            .vips
            .values()
            .map(|v| {
                let (_, weights) = maglev_members(&v.spec);
                crate::imbalance::VipBalance::new(
                    &v.spec.name,
                    v.worst_imbalance,
                    v.slice.size,
                    &weights,
                )
            })
            .collect();
        crate::imbalance::imbalance_warning(&vips, self.maglev_table_len(), threshold)
    }
}

/// The backends their source drains: listed as draining by every VIP of
/// `desired` that lists them. One health state per backend, and a VIP that
/// still serves from a backend wins over one that drains it: the serving
/// VIP may have nothing else (kube-proxy's terminating fallback lists
/// terminating endpoints as serving), while the draining one only sees a
/// terminating backend take new flows a little longer.
/// A map delete whose key was already gone counts as done: aya reports
/// that as KeyNotFound for some maps and as the syscall's ENOENT for others
/// (hash maps, tries), and the writer deletes idempotently (an endpoint it
/// only remembered, an entry another step already removed).
fn absent_ok(r: Result<(), aya::maps::MapError>) -> Result<(), aya::maps::MapError> {
    match r {
        Err(aya::maps::MapError::KeyNotFound) => Ok(()),
        Err(aya::maps::MapError::SyscallError(e))
            if e.io_error.raw_os_error() == Some(libc::ENOENT) =>
        {
            Ok(())
        }
        other => other,
    }
}

fn map_err(map: &'static str, source: aya::maps::MapError) -> Error {
    Error::Map { map, source }
}

/// Whether two specs of one VIP differ only in what the service entry's
/// flags and the rate-limit map carry (no slice rebuild needed).
fn same_options(a: &VipSpec, b: &VipSpec) -> bool {
    a.affinity_client_ip == b.affinity_client_ip
        && a.syn_rate_limit == b.syn_rate_limit
        && a.nat_fib == b.nat_fib
        && a.source_ranges == b.source_ranges
        && a.snat == b.snat
        && a.affinity_timeout == b.affinity_timeout
}

impl BackendSpec {
    /// A backend with weight 1 and no MAC.
    pub fn new(addr: IpAddr, port: u16) -> Self {
        Self {
            key: BackendKey { addr, port },
            weight: 1,
            mac: [0; 6],
        }
    }
}

#[cfg(test)]
mod tests;
