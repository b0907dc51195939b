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

mod admit;
mod rounds;
mod validate;
pub use rounds::RefusedVip;
use rounds::{Rounds, wants_resize};
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

/// What a start found in pinned maps and took over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdoptReport {
    /// VIPs adopted with their service ID, slice and backends.
    pub vips: usize,
    /// Backends adopted with their ID, generation and state.
    pub backends: usize,
    /// Adopted backends no VIP uses: they retire (drain) as after a removal.
    pub retiring: usize,
    /// Inconsistent entries that were removed instead, and why.
    pub dropped: Vec<String>,
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

/// What an apply changed, for logs and the API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// VIPs added.
    pub added: Vec<String>,
    /// VIPs removed.
    pub removed: Vec<String>,
    /// VIPs whose backends, weights or mode changed (slice rebuilt).
    pub rebuilt: Vec<String>,
    /// VIPs only renamed.
    pub renamed: Vec<String>,
    /// VIPs whose session affinity, SYN rate limit, FIB forwarding or
    /// source ranges changed (service entry rewritten, slice kept), or only
    /// how their replies are matched (`stateless_reverse`: the endpoint
    /// table changes) or which backends their source drains (`draining`:
    /// health states change).
    pub reconfigured: Vec<String>,
    /// Adopted VIPs whose maps already held exactly what the config asks
    /// for: kept as they were (same service ID, slice and backend IDs).
    pub adopted: Vec<String>,
    /// VIPs whose backends did not change but whose slice was sized anew to
    /// its share of the table: shrunk because more VIPs share it now, or
    /// grown back because fewer do.
    pub resized: Vec<String>,
    /// VIPs left out because they did not fit or broke a rule of their own
    /// (refuse-alone mode only, see [`Dataplane::set_refuse_alone`]): a new
    /// one is not programmed, a programmed one keeps what it had. Everything
    /// else was applied.
    pub refused: Vec<RefusedVip>,
    /// Backends that got a new ID.
    pub backends_added: usize,
    /// Backends whose ID was released.
    pub backends_removed: usize,
    /// Backends no VIP lists any more, kept draining for the retire grace.
    pub backends_retired: usize,
    /// Retiring backends listed again before their grace ran out.
    pub backends_revived: usize,
    /// UDP affinity entries deleted because their backend left the VIP
    /// (see [`Dataplane::forget_udp_flows`]).
    pub udp_flows_forgotten: usize,
}

impl ApplyReport {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        *self == ApplyReport::default()
    }
}

/// How many names of one list [`ApplyReport`]'s Display shows before
/// "and N more": with thousands of VIPs a full list made one log line (and
/// the status row built from it) over 20,000 characters.
pub const REPORT_NAMES_SHOWN: usize = 10;

/// `names` joined with commas, the first `shown` of them only, then
/// " and N more" (N with thousands separators) for the rest.
pub fn summarize_names(names: &[String], shown: usize) -> String {
    if names.len() <= shown {
        return names.join(",");
    }
    format!(
        "{} and {} more",
        names[..shown].join(","),
        thousands((names.len() - shown) as u64)
    )
}

/// `n` with a comma every three digits: 3990 -> "3,990".
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The one-line summary logged after every apply: each list shows at most
/// [`REPORT_NAMES_SHOWN`] names; the alternate form (`{:#}`) shows them all.
impl fmt::Display for ApplyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return write!(f, "no change");
        }
        let shown = if f.alternate() {
            usize::MAX
        } else {
            REPORT_NAMES_SHOWN
        };
        let mut parts = Vec::new();
        for (label, list) in [
            ("added", &self.added),
            ("removed", &self.removed),
            ("rebuilt", &self.rebuilt),
            ("renamed", &self.renamed),
            ("reconfigured", &self.reconfigured),
            ("kept from pinned maps", &self.adopted),
            ("resized", &self.resized),
        ] {
            if !list.is_empty() {
                parts.push(format!("{label} {}", summarize_names(list, shown)));
            }
        }
        if self.backends_added > 0 {
            parts.push(format!("{} new backend(s)", self.backends_added));
        }
        if self.backends_removed > 0 {
            parts.push(format!("{} backend(s) released", self.backends_removed));
        }
        if self.backends_retired > 0 {
            parts.push(format!(
                "{} backend(s) retiring (draining)",
                self.backends_retired
            ));
        }
        if self.backends_revived > 0 {
            parts.push(format!(
                "{} retiring backend(s) revived",
                self.backends_revived
            ));
        }
        if self.udp_flows_forgotten > 0 {
            parts.push(format!(
                "{} UDP flow(s) of removed backends re-balanced",
                self.udp_flows_forgotten
            ));
        }
        if !self.refused.is_empty() {
            let names: Vec<String> = self.refused.iter().map(|r| r.name.clone()).collect();
            parts.push(format!("refused {}", summarize_names(&names, shown)));
        }
        write!(f, "{}", parts.join("; "))
    }
}

/// Summed (over CPUs) counters of one VIP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VipCounters {
    /// VIP name.
    pub name: String,
    /// Service ID.
    pub service_id: u32,
    /// Counters summed over CPUs.
    pub stats: abi::VipStats,
    /// Its drops by reason (index `rivora_abi::drop_reason`, COUNT
    /// entries; all zero, and not read, while `stats.drops` is 0), so an
    /// operator sees why this VIP drops, e.g. `source_range`.
    pub drops_by_reason: Vec<u64>,
}

/// Summed (over CPUs) counters of one backend (`backend_stats_map`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendCounters {
    /// The backend.
    pub key: BackendKey,
    /// Its backend ID.
    pub id: u32,
    /// Client->backend packets, every mode, every VIP that lists it.
    pub packets: u64,
    /// Their frame sizes as received.
    pub bytes: u64,
    /// Flows whose backend was chosen: this one.
    pub new_flows: u64,
    /// The largest last-packet jiffies over CPUs (0: no packet since the ID
    /// was given to this backend).
    pub last_jiffies: u64,
}

impl BackendCounters {
    /// How long before `clock` was read the backend's latest packet was
    /// (one tick resolution); None with no packet since the backend got its
    /// ID (see [`crate::jiffies`]).
    pub fn last_packet_age(&self, clock: &crate::jiffies::Clock) -> Option<Duration> {
        clock.age_of(self.last_jiffies)
    }
}

/// The state of the VIP index (vip_index_map), for the API and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VipIndexStatus {
    /// The program uses the index (vip_index_ctl_map says it is complete).
    pub complete: bool,
    /// The half in use.
    pub half: u32,
    /// Exact VIPs in the half in use.
    pub vips: usize,
    /// Builds (in this process) in which some VIP could not be placed within
    /// the probe window, so the index was switched off (the program then
    /// looks exact VIPs up in vip_map: correct, slower).
    pub incomplete_builds: u64,
}

/// What this process wrote to vip_index_map and vip_index_ctl_map (read
/// back at adoption), so a rebuild writes only the slots that change.
struct IndexShadow {
    halves: [Vec<abi::VipSlot>; 2],
    ctl: abi::VipIndexCtl,
    incomplete_builds: u64,
}

impl IndexShadow {
    /// The content of freshly created (all-zero) maps.
    fn zeroed() -> Self {
        let half = vec![abi::VipSlot::default(); abi::VIP_INDEX_SLOTS as usize];
        Self {
            halves: [half.clone(), half],
            ctl: abi::VipIndexCtl::default(),
            incomplete_builds: 0,
        }
    }
}

/// The index slot of an exact VIP.
fn index_slot(key: &VipKey, service_id: u32) -> abi::VipSlot {
    match key.addr {
        IpAddr::V4(a) => abi::VipSlot::v4(&abi::VipKey4::new(a, key.port, key.proto), service_id),
        IpAddr::V6(a) => abi::VipSlot::v6(&abi::VipKey6::new(a, key.port, key.proto), service_id),
    }
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
    /// The classifier groups and rules the last apply refused alone.
    cls_refused: Vec<crate::classifier::RefusedObject>,
}

/// An endpoint entry read back from either family's map.
enum EpValue {
    V4(abi::NatEpValue4),
    V6(abi::NatEpValue6),
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

    /// The state of the VIP index.
    pub fn vip_index_status(&self) -> VipIndexStatus {
        let half = self.index.ctl.half & 1;
        VipIndexStatus {
            complete: self.index.ctl.flags & abi::vip_index_flags::COMPLETE != 0,
            half,
            vips: self.index.halves[half as usize]
                .iter()
                .filter(|s| s.used())
                .count(),
            incomplete_builds: self.index.incomplete_builds,
        }
    }

    /// Rebuilds the VIP index for the programmed VIPs except `leaving` and
    /// switches the program to it.
    ///
    /// While the index in use is complete, the new one is written into the
    /// other half and the switch is one vip_index_ctl_map update. While it
    /// is not (fresh maps, a failed placement), nothing reads the slots and
    /// the half it names is rewritten in place before being switched on.
    /// Either way a reader that sees `half` and `flags` of different updates
    /// still gets a correct answer: it never pairs COMPLETE with a half that
    /// was not complete. A half switched away from is rewritten no earlier
    /// than the next change, long after any program run that read it (runs
    /// last microseconds).
    ///
    /// If a VIP cannot be placed within the probe window, the index is
    /// switched off instead: the program looks exact VIPs up in vip_map.
    fn sync_vip_index(&mut self, leaving: &BTreeSet<VipKey>) -> Result<(), Error> {
        use abi::vip_index_flags::{COMPLETE, RANGES4, RANGES6};
        let mut entries = Vec::new();
        let mut flags = COMPLETE;
        for (key, v) in self.vips.iter().filter(|(k, _)| !leaving.contains(k)) {
            if key.is_exact() {
                entries.push(index_slot(key, v.service_id));
            } else if key.addr.is_ipv4() {
                flags |= RANGES4;
            } else {
                flags |= RANGES6;
            }
        }
        let placement = vip_index::place(&entries, abi::VIP_INDEX_SLOTS, abi::VIP_INDEX_PROBES);
        let cur = self.index.ctl;
        if !placement.complete() {
            self.index.incomplete_builds += 1;
            tracing::warn!(
                vips = entries.len(),
                unplaced = placement.unplaced,
                "VIP index: some VIPs do not fit within {} probes of their home slot; \
                 exact VIPs are looked up in vip_map instead (correct, slower)",
                abi::VIP_INDEX_PROBES
            );
            return self.write_index_ctl(abi::VipIndexCtl {
                half: cur.half,
                flags: 0,
            });
        }
        let half = if cur.flags & COMPLETE != 0
            && self.index.halves[cur.half as usize] != placement.slots
        {
            cur.half ^ 1
        } else {
            cur.half
        };
        for (i, slot) in placement.slots.iter().enumerate() {
            if self.index.halves[half as usize][i] != *slot {
                self.maps
                    .vip_index
                    .set(half * abi::VIP_INDEX_SLOTS + i as u32, *slot, 0)
                    .map_err(|e| map_err("vip_index_map", e))?;
                self.index.halves[half as usize][i] = *slot;
            }
        }
        self.write_index_ctl(abi::VipIndexCtl { half, flags })
    }

    /// Switches the VIP index off (the program falls back to vip_map).
    fn disable_vip_index(&mut self) -> Result<(), Error> {
        let half = self.index.ctl.half;
        self.write_index_ctl(abi::VipIndexCtl { half, flags: 0 })
    }

    fn write_index_ctl(&mut self, ctl: abi::VipIndexCtl) -> Result<(), Error> {
        if ctl != self.index.ctl {
            self.maps
                .vip_index_ctl
                .set(0, ctl, 0)
                .map_err(|e| map_err("vip_index_ctl_map", e))?;
            self.index.ctl = ctl;
        }
        Ok(())
    }

    /// Reads the VIP index maps back (adoption).
    fn read_vip_index(&mut self) -> Result<(), Error> {
        let mut ctl = self
            .maps
            .vip_index_ctl
            .get(&0, 0)
            .map_err(|e| map_err("vip_index_ctl_map", e))?;
        for half in 0..2u32 {
            for i in 0..abi::VIP_INDEX_SLOTS {
                self.index.halves[half as usize][i as usize] = self
                    .maps
                    .vip_index
                    .get(&(half * abi::VIP_INDEX_SLOTS + i), 0)
                    .map_err(|e| map_err("vip_index_map", e))?;
            }
        }
        if ctl.half > 1 {
            // Not something this writer produces: switch it off.
            ctl = abi::VipIndexCtl::default();
            self.maps
                .vip_index_ctl
                .set(0, ctl, 0)
                .map_err(|e| map_err("vip_index_ctl_map", e))?;
        }
        self.index.ctl = ctl;
        Ok(())
    }

    /// Sets the new-flow guard (bpf/guard.h) to `rate` state entries per
    /// second node-wide (0: off), split over the online CPUs; returns what
    /// was written. The kernel's tick rate must be known (jiffies.rs).
    pub fn set_flow_guard(&mut self, rate: u64) -> Result<abi::FlowGuardConfig, Error> {
        let hz = crate::jiffies::hz().ok_or_else(|| {
            Error::Invalid(
                "new-flow guard: the kernel's tick rate (HZ) is unknown, so no window can be set"
                    .into(),
            )
        })?;
        let cpus = aya::util::online_cpus().map(|c| c.len()).unwrap_or(1) as u32;
        let cfg = crate::guard::config(rate, hz, cpus);
        self.maps
            .flow_guard
            .set(0, cfg, 0)
            .map_err(|e| map_err("flow_guard_config_map", e))?;
        Ok(cfg)
    }

    /// The new-flow guard as the map holds it.
    pub fn flow_guard(&self) -> Result<abi::FlowGuardConfig, Error> {
        self.maps
            .flow_guard
            .get(&0, 0)
            .map_err(|e| map_err("flow_guard_config_map", e))
    }

    /// Sets (or, with None, removes) the node-wide SYN rate limit in
    /// rl_config_map: it applies to every VIP without a limit of its own.
    pub fn set_node_syn_rate_limit(&mut self, limit: Option<RateLimit>) -> Result<(), Error> {
        if let Some(l) = limit {
            check_rate_limit(&l, "node-wide SYN rate limit")?;
        }
        let value = limit.map(RateLimit::abi).unwrap_or_default();
        self.maps
            .rl_config
            .set(0, value, 0)
            .map_err(|e| map_err("rl_config_map", e))?;
        self.node_syn_rate_limit = limit;
        Ok(())
    }

    /// The node-wide SYN rate limit in force (read back from the maps by
    /// [`Dataplane::adopt`]).
    pub fn node_syn_rate_limit(&self) -> Option<RateLimit> {
        self.node_syn_rate_limit
    }

    /// How long a backend that no VIP lists any more keeps its ID in the
    /// draining state, so that its established flows can finish instead of
    /// being re-balanced mid-connection. Zero releases it at once.
    pub fn set_retire_grace(&mut self, grace: Duration) {
        self.retire_grace = grace;
    }

    /// Releases retiring backends whose grace has run out; returns how many.
    /// Called periodically by the daemon.
    pub fn release_retired(&mut self) -> Result<usize, Error> {
        let now = Instant::now();
        let grace = self.retire_grace;
        let expired: Vec<BackendKey> = self
            .backends
            .values()
            .filter(|b| b.retired_at.is_some_and(|t| now.duration_since(t) >= grace))
            .map(|b| b.key)
            .collect();
        for key in &expired {
            self.release_backend(*key)?;
        }
        // Shared endpoints serving one VIP for a grace become exclusive;
        // nothing to plan while none waits for that.
        if self.endpoints.values().any(|e| e.single_since.is_some()) {
            self.sync_endpoints()?;
        }
        if !expired.is_empty() {
            self.sync_backend_filter(&[])?;
        }
        Ok(expired.len())
    }

    /// Deletes the ClientIP timeout's entries of `services` (service IDs)
    /// that name a backend the service's VIP no longer has (all of them for
    /// a service no VIP holds, or one whose timeout changed and is gone).
    /// Returns how many were deleted. Why and how as for
    /// [`Self::forget_udp_flows`]: the datapath does not check that a
    /// client's backend is still the VIP's (a lookup per new flow).
    fn forget_clients(&mut self, services: &BTreeSet<u32>) -> usize {
        let members: BTreeMap<u32, BTreeSet<u32>> = self
            .vips
            .values()
            .filter(|v| services.contains(&v.service_id) && v.spec.affinity_timeout.is_some())
            .map(|v| {
                let ids = v
                    .spec
                    .backends
                    .iter()
                    .filter_map(|b| self.backends.get(&b.key).map(|s| s.id))
                    .collect();
                (v.service_id, ids)
            })
            .collect();
        let stale = |service_id: u32, backend_id: u32| {
            services.contains(&service_id)
                && members
                    .get(&service_id)
                    .is_none_or(|ids| !ids.contains(&backend_id))
        };
        let bound = 4 * abi::MAX_CLIENTS as usize;
        let doomed4: Vec<abi::ClientKey4> = self
            .maps
            .client_affinity
            .iter()
            .take(bound)
            .map_while(|e| {
                e.map_err(|e| tracing::warn!("reading client_affinity_map: {e}"))
                    .ok()
            })
            .filter(|(k, a)| stale(k.service_id, a.backend_id))
            .map(|(k, _)| k)
            .collect();
        let doomed6: Vec<abi::ClientKey6> = self
            .maps
            .client_affinity6
            .iter()
            .take(bound)
            .map_while(|e| {
                e.map_err(|e| tracing::warn!("reading client_affinity_map6: {e}"))
                    .ok()
            })
            .filter(|(k, a)| stale(k.service_id, a.backend_id))
            .map(|(k, _)| k)
            .collect();
        // Already gone (evicted meanwhile) is fine.
        let gone4 = doomed4
            .iter()
            .filter(|k| self.maps.client_affinity.remove(k).is_ok())
            .count();
        let gone6 = doomed6
            .iter()
            .filter(|k| self.maps.client_affinity6.remove(k).is_ok())
            .count();
        gone4 + gone6
    }

    /// Deletes the UDP affinity entries of `vips` whose backend is no
    /// longer one of the VIP's (all of them for a VIP no longer programmed);
    /// returns how many.
    ///
    /// Why: UDP has no opening packet, so the datapath cannot tell a new
    /// flow from an established one; it follows an entry while its backend
    /// is healthy or draining (drain lets established flows finish) and
    /// does not check VIP membership, which would take a lookup per packet.
    /// A backend removed from the VIP (retiring, or still in another VIP
    /// and so still healthy) must not keep getting a VIP's datagrams, so its
    /// entries are removed here, after the new slice is in place, and the
    /// flows' next datagrams are balanced over the VIP's healthy members.
    /// TCP entries stay: a connection on a removed backend finishes there
    /// (the retire grace), and a new connection's SYN never follows an entry.
    ///
    /// Best effort: the VIPs are already programmed, so a failed read ends
    /// the sweep with a warning instead of failing the apply. The scan is
    /// bounded (the LRU may restart a walk whose key the datapath evicted).
    pub fn forget_udp_flows(&mut self, vips: &BTreeSet<VipKey>) -> usize {
        let members: BTreeMap<VipKey, Option<BTreeSet<u32>>> = vips
            .iter()
            .map(|k| {
                let ids = self.vips.get(k).map(|v| {
                    v.spec
                        .backends
                        .iter()
                        .filter_map(|b| self.backends.get(&b.key).map(|s| s.id))
                        .collect()
                });
                (*k, ids)
            })
            .collect();
        // Whether a flow to (addr, port) of `vip`'s must leave `backend_id`.
        let stale = |addr: IpAddr, port: u16, backend_id: u32| {
            members.iter().any(|(k, ids)| {
                k.addr == addr
                    && (k.port..=k.port_last).contains(&port)
                    && ids.as_ref().is_none_or(|ids| !ids.contains(&backend_id))
            })
        };
        let bound = 4 * self.maps.flow_capacity as usize;
        let mut forgotten = 0;
        if members.keys().any(|k| k.addr.is_ipv4()) {
            let doomed: Vec<abi::Flow4> = self
                .maps
                .affinity
                .iter()
                .take(bound)
                .map_while(|e| {
                    e.map_err(|e| tracing::warn!("reading connection_affinity_map: {e}"))
                        .ok()
                })
                .filter(|(f, a)| {
                    f.proto == crate::proto::UDP
                        && stale(
                            abi::addr4_from_be(f.dst).into(),
                            abi::port_from_be(f.dport),
                            a.backend_id,
                        )
                })
                .map(|(f, _)| f)
                .collect();
            for f in &doomed {
                // Already gone (evicted meanwhile) is fine.
                if self.maps.affinity.remove(f).is_ok() {
                    forgotten += 1;
                }
            }
        }
        if members.keys().any(|k| k.addr.is_ipv6()) {
            let doomed: Vec<abi::Flow6> = self
                .maps
                .affinity6
                .iter()
                .take(bound)
                .map_while(|e| {
                    e.map_err(|e| tracing::warn!("reading connection_affinity_map6: {e}"))
                        .ok()
                })
                .filter(|(f, a)| {
                    f.proto == crate::proto::UDP
                        && stale(
                            Ipv6Addr::from(f.dst).into(),
                            abi::port_from_be(f.dport),
                            a.backend_id,
                        )
                })
                .map(|(f, _)| f)
                .collect();
            for f in &doomed {
                if self.maps.affinity6.remove(f).is_ok() {
                    forgotten += 1;
                }
            }
        }
        forgotten
    }

    fn release_backend(&mut self, key: BackendKey) -> Result<(), Error> {
        let gone: Vec<Endpoint> = self
            .endpoints
            .iter()
            .filter(|(_, e)| e.backend == key)
            .map(|(ep, _)| *ep)
            .collect();
        for ep in gone {
            self.remove_endpoint(ep)?;
        }
        let b = self.backends.remove(&key).expect("caller checked");
        self.set_health(b.id, abi::backend_state::NONE)?;
        self.clear_backend(key, b.id)?;
        self.backend_ids.release(b.id);
        Ok(())
    }

    /// Brings nat_endpoint_map(6) to what the programmed VIPs ask
    /// (endpoints.rs `plan`): entries written or removed one by one, each
    /// change safe on its own (a missing entry means per-flow entries).
    fn sync_endpoints(&mut self) -> Result<(), Error> {
        let demand = Demand::of(self.vips.values().map(|v| (&v.spec, v.service_id)));
        let backends = &self.backends;
        let next = endpoints::plan(
            &self.endpoints,
            &demand,
            |b| backends.contains_key(b),
            Instant::now(),
            self.retire_grace,
            abi::MAX_NAT_ENDPOINTS as usize,
        );
        let gone: Vec<Endpoint> = self
            .endpoints
            .keys()
            .filter(|ep| !next.contains_key(ep))
            .copied()
            .collect();
        for ep in gone {
            self.remove_endpoint(ep)?;
        }
        for (ep, entry) in next {
            if self.endpoints.get(&ep) != Some(&entry) {
                self.write_endpoint(ep, entry)?;
            }
        }
        Ok(())
    }

    /// Writes nat_backend_filter_map so it has the bit of every programmed
    /// backend address and of `coming` (about to be programmed), and no
    /// other: a word is written only when it changes.
    fn sync_backend_filter(&mut self, coming: &[BackendKey]) -> Result<(), Error> {
        let words = (abi::NAT_FILTER_BITS / 64) as usize;
        let mut want = vec![0u64; words];
        for key in self.backends.keys().chain(coming) {
            let (bytes, v6) = match key.addr {
                IpAddr::V4(a) => {
                    let mut b = [0u8; 16];
                    b[..4].copy_from_slice(&a.octets());
                    (b, false)
                }
                IpAddr::V6(a) => (a.octets(), true),
            };
            let bit = abi::nat_backend_bit(&bytes, v6);
            want[(bit / 64) as usize] |= 1u64 << (bit % 64);
        }
        let have = match self.backend_filter.take() {
            Some(h) => h,
            None => (0..words as u32)
                .map(|i| self.maps.nat_backend_filter.get(&i, 0).unwrap_or(0))
                .collect(),
        };
        for (i, (w, h)) in want.iter().zip(&have).enumerate() {
            if w != h {
                self.maps
                    .nat_backend_filter
                    .set(i as u32, *w, 0)
                    .map_err(|e| map_err("nat_backend_filter_map", e))?;
            }
        }
        self.backend_filter = Some(want);
        Ok(())
    }

    /// The endpoint table as the writer last wrote it.
    pub fn nat_endpoints(&self) -> &BTreeMap<Endpoint, EndpointEntry> {
        &self.endpoints
    }

    fn write_endpoint(&mut self, ep: Endpoint, entry: EndpointEntry) -> Result<(), Error> {
        let t = entry.target;
        let same_map_entry = self
            .endpoints
            .get(&ep)
            .is_some_and(|cur| cur.flags == entry.flags && cur.target == entry.target);
        if entry.flags == 0 {
            // Remembered, not written (endpoints.rs): no map entry.
            if self.endpoints.get(&ep).is_some_and(|cur| cur.flags != 0) {
                self.remove_endpoint(ep)?;
            }
        } else if !same_map_entry {
            match (ep.addr, t.vip) {
                (IpAddr::V4(a), IpAddr::V4(v)) => self
                    .maps
                    .nat_endpoint
                    .insert(
                        abi::NatEpKey4 {
                            addr: abi::be_addr4(a),
                            port: ep.port.to_be(),
                            proto: ep.proto,
                            pad: 0,
                        },
                        abi::NatEpValue4 {
                            vip: abi::be_addr4(v),
                            vip_port: t.vip_port.to_be(),
                            flags: entry.flags,
                            pad: 0,
                            service_id: t.service_id,
                        },
                        0,
                    )
                    .map_err(|e| map_err("nat_endpoint_map", e))?,
                (IpAddr::V6(a), IpAddr::V6(v)) => self
                    .maps
                    .nat_endpoint6
                    .insert(
                        abi::NatEpKey6 {
                            addr: a.octets(),
                            port: ep.port.to_be(),
                            proto: ep.proto,
                            pad: 0,
                        },
                        abi::NatEpValue6 {
                            vip: v.octets(),
                            vip_port: t.vip_port.to_be(),
                            flags: entry.flags,
                            pad: 0,
                            service_id: t.service_id,
                        },
                        0,
                    )
                    .map_err(|e| map_err("nat_endpoint_map6", e))?,
                // A VIP and its backends are of one family (validate).
                _ => return Ok(()),
            }
        }
        self.endpoints.insert(ep, entry);
        Ok(())
    }

    fn remove_endpoint(&mut self, ep: Endpoint) -> Result<(), Error> {
        let r = match ep.addr {
            IpAddr::V4(a) => self.maps.nat_endpoint.remove(&abi::NatEpKey4 {
                addr: abi::be_addr4(a),
                port: ep.port.to_be(),
                proto: ep.proto,
                pad: 0,
            }),
            IpAddr::V6(a) => self.maps.nat_endpoint6.remove(&abi::NatEpKey6 {
                addr: a.octets(),
                port: ep.port.to_be(),
                proto: ep.proto,
                pad: 0,
            }),
        };
        if let Err(e) = absent_ok(r) {
            return Err(map_err("nat_endpoint_map", e));
        }
        self.endpoints.remove(&ep);
        Ok(())
    }

    /// Reads nat_endpoint_map(6) back at adoption; each entry is tied to
    /// the adopted backend of its address with its port, or with port 0
    /// (a backend that keeps the destination port). Entries of no adopted
    /// backend are removed.
    fn adopt_endpoints(&mut self) -> Result<(), Error> {
        let mut found: Vec<(Endpoint, EpValue)> = Vec::new();
        for item in self.maps.nat_endpoint.iter() {
            let (k, v) = item.map_err(|e| map_err("nat_endpoint_map", e))?;
            found.push((
                Endpoint {
                    addr: IpAddr::V4(abi::addr4_from_be(k.addr)),
                    port: u16::from_be(k.port),
                    proto: k.proto,
                },
                EpValue::V4(v),
            ));
        }
        for item in self.maps.nat_endpoint6.iter() {
            let (k, v) = item.map_err(|e| map_err("nat_endpoint_map6", e))?;
            found.push((
                Endpoint {
                    addr: IpAddr::V6(k.addr.into()),
                    port: u16::from_be(k.port),
                    proto: k.proto,
                },
                EpValue::V6(v),
            ));
        }
        for (ep, v) in found {
            let exact = BackendKey {
                addr: ep.addr,
                port: ep.port,
            };
            let any = BackendKey {
                addr: ep.addr,
                port: crate::model::KEEP_DESTINATION_PORT,
            };
            let backend = [exact, any]
                .into_iter()
                .find(|k| self.backends.contains_key(k));
            let (target, flags) = match v {
                EpValue::V4(v) => (
                    endpoints::Target {
                        vip: IpAddr::V4(abi::addr4_from_be(v.vip)),
                        vip_port: u16::from_be(v.vip_port),
                        service_id: v.service_id,
                    },
                    v.flags,
                ),
                EpValue::V6(v) => (
                    endpoints::Target {
                        vip: IpAddr::V6(v.vip.into()),
                        vip_port: u16::from_be(v.vip_port),
                        service_id: v.service_id,
                    },
                    v.flags,
                ),
            };
            match backend {
                Some(backend) if flags != 0 => {
                    self.endpoints.insert(
                        ep,
                        EndpointEntry {
                            target,
                            flags,
                            backend,
                            single_since: None,
                        },
                    );
                }
                _ => self.remove_endpoint(ep)?,
            }
        }
        Ok(())
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

    fn generation(&mut self) -> u32 {
        let g = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        g
    }

    /// Refuses the whole set when one VIP needs a node address that is not set (strict mode:
    /// [`Self::missing_node_address`] says which).
    fn check_node_addresses<'a>(
        &self,
        specs: impl Iterator<Item = &'a VipSpec>,
    ) -> Result<(), Error> {
        for spec in specs {
            if let Some(why) = self.missing_node_address(spec) {
                return Err(Error::Invalid(why));
            }
        }
        Ok(())
    }

    /// One planning and commit of `desired` ([`Dataplane::apply`]). With
    /// `refusals`, a VIP that does not fit (no service ID, no room for its
    /// slice) is listed there instead of failing the call, and the call
    /// returns `Ok(None)` having touched nothing, for the caller to plan
    /// again without it.
    fn apply_round(
        &mut self,
        desired: &[VipSpec],
        mut refusals: Option<&mut Vec<RefusedVip>>,
    ) -> Result<Option<ApplyReport>, Error> {
        let desired = validate(desired)?;
        if refusals.is_none() {
            // Refuse-alone mode admitted each VIP against these (a kept one has what it needs
            // in the maps already).
            self.check_node_addresses(desired.values())?;
        }
        // New prefixes are inserted before removed VIPs lose theirs, so the
        // tries must hold both at once.
        if let Some(found) = refusals.as_deref_mut() {
            let refused = self.trie_refusals(&desired);
            if !refused.is_empty() {
                found.extend(refused);
                return Ok(None);
            }
        } else {
            check_range_capacity(self.vips.keys().chain(desired.keys()), "while applying")?;
            self.check_src_range_capacity(&desired)?;
        }
        let mut report = ApplyReport::default();

        // --- plan: backends
        let mut wanted: BTreeMap<BackendKey, [u8; 6]> = BTreeMap::new();
        for spec in desired.values() {
            for b in &spec.backends {
                let mac = wanted.entry(b.key).or_insert(b.mac);
                if *mac == [0; 6] {
                    *mac = b.mac;
                }
            }
        }
        // A refused share needs the pseudo-backend (one ID for all VIPs).
        let needs_reject = desired.values().any(|s| s.reject_weight > 0);
        let new_reject = needs_reject && self.reject_id.is_none();
        // Retiring backends give their IDs up early when new ones need them.
        let needed = wanted
            .keys()
            .filter(|k| !self.backends.contains_key(k))
            .count() as u32
            + u32::from(new_reject);
        if needed > self.backend_ids.available() {
            let mut retiring: Vec<(Instant, BackendKey)> = self
                .backends
                .values()
                .filter(|b| !wanted.contains_key(&b.key))
                .filter_map(|b| b.retired_at.map(|t| (t, b.key)))
                .collect();
            retiring.sort();
            let short = (needed - self.backend_ids.available()) as usize;
            for (_, key) in retiring.into_iter().take(short) {
                self.release_backend(key)?;
                report.backends_removed += 1;
            }
        }
        // Refuse-alone mode: the VIPs whose new backends find no ID are refused alone.
        if needed > self.backend_ids.available()
            && let Some(found) = refusals.as_deref_mut()
        {
            let available = self
                .backend_ids
                .available()
                .saturating_sub(u32::from(new_reject));
            let refused = rounds::backend_id_refusals(
                &desired,
                |k| self.vips.contains_key(k),
                self.backends.keys(),
                available,
            );
            if !refused.is_empty() {
                found.extend(refused);
                return Ok(None);
            }
        }
        let mut backend_ids = self.backend_ids.clone();
        let mut new_backends: Vec<(BackendKey, u32, [u8; 6])> = Vec::new();
        let mut id_of: BTreeMap<BackendKey, u32> =
            self.backends.iter().map(|(k, b)| (*k, b.id)).collect();
        let reject_id = match self.reject_id {
            None if new_reject => Some(backend_ids.allocate().ok_or_else(|| {
                Error::Capacity(format!(
                    "backends: all {} backend IDs are in use (a refused share needs one)",
                    abi::MAX_BACKENDS
                ))
            })?),
            id => id,
        };
        for (key, mac) in &wanted {
            if !self.backends.contains_key(key) {
                let id = backend_ids.allocate().ok_or_else(|| {
                    Error::Capacity(format!(
                        "backends: all {} backend IDs are in use",
                        abi::MAX_BACKENDS
                    ))
                })?;
                new_backends.push((*key, id, *mac));
                id_of.insert(*key, id);
            }
        }
        let terminating_next = source_drained(&desired);
        let snat_next: BTreeSet<BackendKey> = desired
            .values()
            .flat_map(|s| s.snat.iter().copied())
            .collect();
        let mac_changes: Vec<(BackendKey, [u8; 6])> = wanted
            .iter()
            .filter(|(k, mac)| self.backends.get(*k).is_some_and(|b| b.mac != **mac))
            .map(|(k, m)| (*k, *m))
            .collect();

        // --- plan: VIPs
        let mut service_ids = self.service_ids.clone();
        let mut slices = self.slices.clone();
        let budget = slice_budget(&desired, self.slices.len());
        let mut planned: Vec<PlannedVip> = Vec::new();
        for (key, spec) in &desired {
            let change = match self.vips.get(key) {
                None => VipChange::Add,
                Some(cur) if cur.adopted => {
                    if !self.adopted_matches(cur, spec, &id_of, reject_id) {
                        VipChange::Rebuild
                    } else if same_options(&cur.spec, spec) {
                        VipChange::Adopt
                    } else {
                        VipChange::Reconfigure
                    }
                }
                Some(cur)
                    if cur.spec.backends != spec.backends
                        || cur.spec.reject_weight != spec.reject_weight
                        || cur.spec.mode != spec.mode =>
                {
                    VipChange::Rebuild
                }
                Some(cur) if !same_options(&cur.spec, spec) => VipChange::Reconfigure,
                Some(cur)
                    if cur.spec.name != spec.name
                        || cur.spec.stateless_reverse != spec.stateless_reverse
                        || cur.spec.draining != spec.draining =>
                {
                    VipChange::Rename
                }
                Some(cur)
                    if wants_resize(
                        cur.slice.size,
                        budget.get(key).copied(),
                        slices.largest_free(),
                    ) =>
                {
                    VipChange::Resize
                }
                Some(_) => continue,
            };
            let service_id = match (&change, self.vips.get(key)) {
                (VipChange::Add, _) => match service_ids.allocate() {
                    Some(id) => id,
                    None => {
                        let why = format!("VIPs: all {} service IDs are in use", abi::MAX_VIPS);
                        match refusals.as_deref_mut() {
                            Some(found) => {
                                found.push(RefusedVip::new(spec, why));
                                continue;
                            }
                            None => return Err(Error::Capacity(why)),
                        }
                    }
                },
                (_, Some(cur)) => cur.service_id,
                _ => unreachable!(),
            };
            if let VipChange::Rename | VipChange::Adopt | VipChange::Reconfigure = change {
                let cur = &self.vips[key];
                let worst_imbalance = if cur.adopted {
                    imbalance_of(spec, cur.slice.size)
                } else {
                    cur.worst_imbalance
                };
                planned.push(PlannedVip {
                    spec: spec.clone(),
                    change,
                    service_id,
                    slice: cur.slice,
                    table: Vec::new(),
                    worst_imbalance,
                });
                continue;
            }
            // A rebuilt VIP keeps its slice size while that size is still
            // reasonable (at least the backend count and close to its share,
            // [`rounds::within_share`]): a new size changes `hash % size` for
            // nearly every flow, a kept one moves only about 1/N of them.
            let target = budget.get(key).copied();
            let target = match (self.vips.get(key), target) {
                _ if matches!(change, VipChange::Resize) => target,
                (Some(cur), Some(t))
                    if cur.slice.size >= maglev_members(spec).0.len() as u32
                        && rounds::within_share(cur.slice.size, t) =>
                {
                    Some(cur.slice.size)
                }
                _ => target,
            };
            let (slice, table, worst_imbalance) =
                match plan_slice(spec, &id_of, reject_id, &mut slices, target) {
                    Ok(planned) => planned,
                    // A resize that finds no room waits: the slice it has works.
                    Err(Error::Capacity(_)) if matches!(change, VipChange::Resize) => continue,
                    Err(Error::Capacity(why)) if refusals.is_some() => {
                        if let Some(found) = refusals.as_deref_mut() {
                            found.push(RefusedVip::new(spec, why));
                        }
                        continue;
                    }
                    Err(e) => return Err(e),
                };
            planned.push(PlannedVip {
                spec: spec.clone(),
                change,
                service_id,
                slice,
                table,
                worst_imbalance,
            });
        }
        if refusals.as_deref().is_some_and(|f| !f.is_empty()) {
            // Nothing is written yet: the caller plans again without them.
            return Ok(None);
        }
        let removed: Vec<VipKey> = self
            .vips
            .keys()
            .filter(|k| !desired.contains_key(k))
            .copied()
            .collect();
        let leaving: BTreeSet<VipKey> = removed.iter().copied().collect();
        let udp_losing = udp_vips_losing_backends(&self.vips, &desired);
        let clients_losing = client_vips_losing_backends(&self.vips, &desired);

        // Backend endpoints that another VIP is about to reach stop being
        // exclusive first (endpoints.rs).
        let demand = Demand::of(desired.values().map(|spec| (spec, 0)));
        for (ep, entry) in endpoints::demotions(&self.endpoints, &demand, Instant::now()) {
            self.write_endpoint(ep, entry)?;
        }
        // tc_nat must know every backend address before a VIP can send it
        // a flow (reverse.h); released ones are cleared after the commit.
        let coming: Vec<BackendKey> = wanted.keys().copied().collect();
        self.sync_backend_filter(&coming)?;

        // --- commit
        self.backend_ids = backend_ids;
        self.service_ids = service_ids;
        // Slices allocated in the plan are now owned; frees happen below.
        self.slices = slices;
        if new_reject {
            let id = reject_id.expect("allocated in the plan");
            self.write_reject_backend(id)?;
            self.reject_id = Some(id);
        }
        for (key, id, mac) in new_backends {
            let generation = self.generation();
            // A reused ID must not hand its previous owner's counts on.
            self.zero_backend_stats(id)?;
            self.write_backend(key, id, mac, generation)?;
            self.backends.insert(
                key,
                BackendState {
                    key,
                    id,
                    generation,
                    mac,
                    state: abi::backend_state::NONE,
                    drained: false,
                    terminating: terminating_next.contains(&key),
                    probe_down: false,
                    snat: snat_next.contains(&key),
                    last_change: None,
                    vips: BTreeSet::new(),
                    retired_at: None,
                },
            );
            self.sync_health(&key)?;
            report.backends_added += 1;
        }
        let revived: Vec<BackendKey> = wanted
            .keys()
            .filter(|k| {
                self.backends
                    .get(*k)
                    .is_some_and(|b| b.retired_at.is_some())
            })
            .copied()
            .collect();
        for key in revived {
            self.backends
                .get_mut(&key)
                .expect("listed above")
                .retired_at = None;
            self.sync_health(&key)?;
            report.backends_revived += 1;
        }
        for (key, mac) in mac_changes {
            let b = self
                .backends
                .get_mut(&key)
                .expect("planned from current backends");
            b.mac = mac;
            let (id, generation) = (b.id, b.generation);
            self.write_backend(key, id, mac, generation)?;
        }
        // Sources' drains, before any new slice is written: a backend its
        // VIPs drain takes no new flow from them at any point.
        let keys: Vec<BackendKey> = self.backends.keys().copied().collect();
        for key in keys {
            let t = terminating_next.contains(&key);
            let b = self.backends.get_mut(&key).expect("listed above");
            // A backend no VIP lists any more (retiring) keeps its SNAT flag: its established
            // flows left with this node's address and must go on doing so until they end (or
            // the retire grace does), else their next packet reaches the pod with the client's
            // address and the pod answers the client directly: a stalled connection.
            let snat = if wanted.contains_key(&key) {
                snat_next.contains(&key)
            } else {
                b.snat
            };
            if b.terminating != t || b.snat != snat {
                b.terminating = t;
                b.snat = snat;
                self.sync_health(&key)?;
            }
        }
        let mut old_slices = Vec::new();
        for p in planned {
            let key = p.spec.key;
            match p.change {
                VipChange::Rename => {
                    let v = self.vips.get_mut(&key).expect("renamed VIP exists");
                    if v.spec.name != p.spec.name {
                        report.renamed.push(p.spec.name.clone());
                    } else {
                        report.reconfigured.push(p.spec.name.clone());
                    }
                    // What only the writer's bookkeeping holds: the name,
                    // and how replies are matched (sync_endpoints below).
                    v.spec.name = p.spec.name;
                    v.spec.stateless_reverse = p.spec.stateless_reverse;
                    v.spec.draining = p.spec.draining;
                    continue;
                }
                VipChange::Adopt => {
                    report.adopted.push(p.spec.name.clone());
                    let v = self.vips.get_mut(&key).expect("adopted VIP exists");
                    v.spec = p.spec;
                    v.adopted = false;
                    v.worst_imbalance = p.worst_imbalance;
                    continue;
                }
                VipChange::Reconfigure => {
                    report.reconfigured.push(p.spec.name.clone());
                    let generation = self.generation();
                    let cur = self.src_ranges_in_force(&key);
                    let bank =
                        self.write_service(p.service_id, p.slice, &p.spec, generation, cur)?;
                    let v = self.vips.get_mut(&key).expect("reconfigured VIP exists");
                    v.spec = p.spec;
                    v.generation = generation;
                    v.src_bank = bank;
                    v.adopted = false;
                    v.worst_imbalance = p.worst_imbalance;
                    continue;
                }
                VipChange::Add => report.added.push(p.spec.name.clone()),
                VipChange::Rebuild => report.rebuilt.push(p.spec.name.clone()),
                VipChange::Resize => report.resized.push(p.spec.name.clone()),
            }
            self.maps.maglev.write(p.slice.offset, &p.table);
            let generation = self.generation();
            let cur = self.src_ranges_in_force(&key);
            let src_bank = self.write_service(p.service_id, p.slice, &p.spec, generation, cur)?;
            if let VipChange::Add = p.change {
                self.insert_vip_key(&key, p.service_id)?;
            }
            if let Some(old) = self.vips.get(&key) {
                old_slices.push(old.slice);
                for b in &old.spec.backends {
                    if let Some(bs) = self.backends.get_mut(&b.key) {
                        bs.vips.remove(&key);
                    }
                }
            }
            for b in &p.spec.backends {
                self.backends
                    .get_mut(&b.key)
                    .expect("backend programmed above")
                    .vips
                    .insert(key);
            }
            self.vips.insert(
                key,
                VipState {
                    spec: p.spec,
                    service_id: p.service_id,
                    slice: p.slice,
                    generation,
                    worst_imbalance: p.worst_imbalance,
                    adopted: false,
                    src_bank,
                },
            );
        }
        // Added VIPs are complete (service entry, vip_map entry or range
        // prefixes): the index may point at them. Removed ones leave it
        // before anything of theirs is cleared.
        self.sync_vip_index(&leaving)?;
        for key in removed {
            let state = self.vips.remove(&key).expect("removed VIP exists");
            self.remove_vip_key(&key)?;
            self.maps
                .service_config
                .set(state.service_id, abi::Service::default(), 0)
                .map_err(|e| map_err("service_config_map", e))?;
            self.set_svc_rate_limit(state.service_id, None)?;
            for bank in [0, 1] {
                self.write_src_ranges(src_tag(state.service_id, bank), &BTreeSet::new())?;
            }
            self.zero_stats(state.service_id)?;
            self.service_ids.release(state.service_id);
            old_slices.push(state.slice);
            for b in &state.spec.backends {
                if let Some(bs) = self.backends.get_mut(&b.key) {
                    bs.vips.remove(&key);
                }
            }
            report.removed.push(state.spec.name);
        }
        for slice in old_slices {
            self.slices.release(slice);
        }
        // No slice names the pseudo-backend any more.
        if !needs_reject && let Some(id) = self.reject_id.take() {
            self.set_health(id, abi::backend_state::NONE)?;
            self.backend_ids.release(id);
        }
        self.sync_endpoints()?;
        self.sync_backend_filter(&[])?;
        // The slices no longer name the backends that left: no new entry can
        // point at them, so the old ones can go.
        if !udp_losing.is_empty() {
            report.udp_flows_forgotten = self.forget_udp_flows(&udp_losing);
        }
        // Likewise the ClientIP timeout's client entries (a backend still
        // healthy in another VIP would otherwise keep this VIP's clients).
        if !clients_losing.is_empty() {
            self.forget_clients(&clients_losing);
        }
        let unused: Vec<BackendKey> = self
            .backends
            .values()
            .filter(|b| b.vips.is_empty() && b.retired_at.is_none())
            .map(|b| b.key)
            .collect();
        for key in unused {
            if self.retire_grace.is_zero() {
                self.release_backend(key)?;
                report.backends_removed += 1;
            } else {
                self.backends
                    .get_mut(&key)
                    .expect("listed above")
                    .retired_at = Some(Instant::now());
                self.sync_health(&key)?;
                report.backends_retired += 1;
            }
        }
        Ok(Some(report))
    }

    /// [`Dataplane::apply`], except that the programmed VIPs whose keys are
    /// in `keep` and that `desired` does not list stay exactly as they are:
    /// not removed, not rebuilt, their backends not retired, and an adopted
    /// one stays adopted (unclaimed), so a later apply that lists it claims
    /// it as after a restart. Keys of `keep` that `desired` lists, or that
    /// are not programmed, change nothing. The report does not name kept
    /// VIPs.
    ///
    /// Why: the Kubernetes source must not remove the VIPs it adopted from
    /// the pinned maps until its initial sync says nothing will claim them
    /// (rivora-architecture.txt, "State, restarts and adoption"); feeding
    /// their adopted specs back to `apply` instead would rebuild them
    /// (their weights are unknown, their names made up).
    ///
    /// How: each kept VIP stands in for itself. Its current spec (weight 1
    /// for an adopted one's unknown weights, a name no source can give) is
    /// added to `desired` and set
    /// as its bookkeeping for the duration of the call, so `apply` finds it
    /// unchanged and leaves its maps, its slice and its backends alone; its
    /// real spec and adopted mark are restored afterwards, whatever `apply`
    /// returned. A kept L3 DSR VIP does not need a tunnel source set (its
    /// outer source is still in the maps); a desired one still does.
    pub fn apply_keeping(
        &mut self,
        desired: &[VipSpec],
        keep: &BTreeSet<VipKey>,
    ) -> Result<ApplyReport, Error> {
        let admission = self.admit(desired, keep);
        let mut keep = keep.clone();
        keep.extend(admission.keep.iter().copied());
        let mut refused = admission.refused;
        let mut desired: Vec<VipSpec> = admission.admitted.into_owned();
        let mut so_far = ApplyReport::default();
        // An adopted VIP refused in a round is kept by a stand-in (its adopted spec, of
        // unknown weights, cannot be planned): each pass keeps at least one more, so this ends.
        let mut report = loop {
            match self.apply_kept(&desired, &keep)? {
                Rounds::Done(report) => break report,
                Rounds::Keep(keys, refusals, partial) => {
                    so_far.merge(partial);
                    refused.extend(refusals);
                    desired.retain(|s| !keys.contains(&s.key));
                    keep.extend(keys);
                }
            }
        };
        so_far.merge(std::mem::take(&mut report));
        let mut report = so_far;
        refused.append(&mut report.refused);
        report.refused = refused;
        self.refused = report.refused.clone();
        Ok(report)
    }

    /// [`Self::apply_keeping`] of VIPs admitted.
    fn apply_kept(
        &mut self,
        desired: &[VipSpec],
        keep: &BTreeSet<VipKey>,
    ) -> Result<Rounds, Error> {
        let listed: BTreeSet<VipKey> = desired.iter().map(|s| s.key).collect();
        let kept: Vec<VipKey> = keep
            .iter()
            .filter(|k| !listed.contains(k) && self.vips.contains_key(k))
            .copied()
            .collect();
        if kept.is_empty() {
            return self.apply_admitted(desired);
        }
        if !self.refuse_alone {
            self.check_node_addresses(desired.iter())?;
        }
        let mut all = desired.to_vec();
        let mut saved = Vec::with_capacity(kept.len());
        let tunnel = self.tunnel_source;
        let snat = self.snat_source.clone();
        for key in &kept {
            let v = self.vips.get_mut(key).expect("filtered above");
            let mut stand_in = v.spec.clone();
            // A name no source gives, so it cannot collide with a desired
            // VIP's (a kept VIP's own name may now belong to another key).
            stand_in.name = format!("\u{0}kept-{}", v.service_id);
            if v.adopted {
                for b in &mut stand_in.backends {
                    b.weight = 1;
                }
            }
            if matches!(stand_in.mode, Mode::DsrIpip | Mode::DsrGre) {
                // Only apply's check reads this field; the maps keep theirs.
                let unspecified = std::net::Ipv4Addr::UNSPECIFIED;
                if key.addr.is_ipv6() {
                    self.tunnel_source
                        .1
                        .get_or_insert(unspecified.to_ipv6_mapped());
                } else {
                    self.tunnel_source.0.get_or_insert(unspecified);
                }
            }
            if !stand_in.snat.is_empty() {
                // As for tunnels: only apply's check reads it; the map
                // keeps what it holds.
                if key.addr.is_ipv6() {
                    self.snat_source
                        .v6
                        .get_or_insert(std::net::Ipv6Addr::UNSPECIFIED);
                } else {
                    self.snat_source
                        .v4
                        .get_or_insert(std::net::Ipv4Addr::UNSPECIFIED);
                }
            }
            saved.push((
                *key,
                std::mem::replace(&mut v.spec, stand_in.clone()),
                v.adopted,
            ));
            v.adopted = false;
            all.push(stand_in);
        }
        let result = self.apply_admitted(&all);
        self.tunnel_source = tunnel;
        self.snat_source = snat;
        for (key, spec, adopted) in saved {
            if let Some(v) = self.vips.get_mut(&key) {
                v.spec = spec;
                v.adopted = adopted;
            }
        }
        result
    }

    /// Whether an adopted VIP's maps already hold exactly what `spec` asks
    /// for: same mode, same backends, and the slice content equals the table
    /// the spec's backends and weights give at the adopted slice size.
    fn adopted_matches(
        &self,
        cur: &VipState,
        spec: &VipSpec,
        id_of: &BTreeMap<BackendKey, u32>,
        reject_id: Option<u32>,
    ) -> bool {
        let same_set = cur
            .spec
            .backends
            .iter()
            .map(|b| b.key)
            .eq(spec.backends.iter().map(|b| b.key));
        // An adopted spec's reject_weight only says whether the slice has
        // a refused share (its weight is unknown, as the backends' are).
        let same_reject = (cur.spec.reject_weight > 0) == (spec.reject_weight > 0);
        if cur.spec.mode != spec.mode || !same_set || !same_reject {
            return false;
        }
        let (keys, weights) = maglev_members(spec);
        if keys.is_empty() {
            return cur.slice.size == 0;
        }
        let mb = maglev_backends(&keys, &weights);
        let Ok(table) = maglev::build(&mb, cur.slice.size) else {
            return false;
        };
        let Some(want) = member_ids(spec, &table, id_of, reject_id) else {
            return false;
        };
        want == self.maps.maglev.read(cur.slice.offset, cur.slice.size)
    }

    /// Takes over maps pinned by an earlier rivorad: reads back every VIP's
    /// service ID, slice, backends, affinity and rate limit (exact VIPs from
    /// vip_map(6), port ranges from the prefixes in vip_range_map(6)), every
    /// backend's ID, generation and state, and the node-wide rate limit, so
    /// nothing is renumbered and no ID in use is handed out again.
    /// Flow tables and counters are left as they are. Entries that do not
    /// add up (a VIP whose service entry is inactive, whose slice overlaps
    /// another, or names unknown backends; range prefixes that do not form
    /// one range) are removed and reported; the configuration applied next
    /// re-creates what it lists.
    pub fn adopt(maps: Maps) -> Result<(Self, AdoptReport), Error> {
        let mut dp = Dataplane::new(maps);
        dp.cls = crate::classifier::Classifier::adopt(&dp.maps.cls)?;
        dp.read_vip_index()?;
        dp.read_snat_source()?;
        let mut report = AdoptReport::default();
        dp.read_src_ranges(&mut report)?;
        let mut max_generation = 0u32;

        // Backends: every ID whose health slot is set.
        let mut by_id: BTreeMap<u32, BackendState> = BTreeMap::new();
        let mut seen_keys: BTreeSet<BackendKey> = BTreeSet::new();
        for id in 0..abi::MAX_BACKENDS {
            let health = dp
                .maps
                .backend_health
                .get(&id, 0)
                .map_err(|e| map_err("backend_health_map", e))?;
            let state = health.state;
            if state == abi::backend_state::NONE {
                continue;
            }
            if health.flags & abi::backend_flags::REJECT != 0 {
                // The refusing pseudo-backend: no address by design. One
                // is all a writer makes; a second is stale.
                if dp.reject_id.is_some() {
                    report
                        .dropped
                        .push(format!("backend ID {id}: a second refusing pseudo-backend"));
                    dp.set_health(id, abi::backend_state::NONE)?;
                } else {
                    dp.reject_id = Some(id);
                }
                continue;
            }
            let b4 = dp
                .maps
                .backend_map
                .get(&id, 0)
                .map_err(|e| map_err("backend_map", e))?;
            let b6 = dp
                .maps
                .backend_map6
                .get(&id, 0)
                .map_err(|e| map_err("backend_map6", e))?;
            let (key, mac, generation) = if b4.generation != 0 {
                (
                    BackendKey {
                        addr: abi::addr4_from_be(b4.addr).into(),
                        port: abi::port_from_be(b4.port),
                    },
                    b4.mac,
                    b4.generation,
                )
            } else if b6.generation != 0 {
                (
                    BackendKey {
                        addr: std::net::Ipv6Addr::from(b6.addr).into(),
                        port: abi::port_from_be(b6.port),
                    },
                    b6.mac,
                    b6.generation,
                )
            } else {
                report
                    .dropped
                    .push(format!("backend ID {id}: health set but no address entry"));
                dp.set_health(id, abi::backend_state::NONE)?;
                continue;
            };
            if !seen_keys.insert(key) {
                report
                    .dropped
                    .push(format!("backend ID {id}: {key} already has another ID"));
                dp.set_health(id, abi::backend_state::NONE)?;
                dp.clear_backend(key, id)?;
                continue;
            }
            max_generation = max_generation.max(generation);
            by_id.insert(
                id,
                BackendState {
                    key,
                    id,
                    generation,
                    mac,
                    state,
                    drained: health.flags & abi::backend_flags::DRAINED != 0,
                    terminating: health.flags & abi::backend_flags::TERMINATING != 0,
                    probe_down: health.flags & abi::backend_flags::PROBE_DOWN != 0
                        || state == abi::backend_state::DOWN,
                    snat: health.flags & abi::backend_flags::SNAT != 0,
                    last_change: None,
                    vips: BTreeSet::new(),
                    retired_at: None,
                },
            );
        }

        // VIPs: every vip_map(6) entry and the service entry it points to.
        let mut entries: Vec<(VipKey, u32)> = Vec::new();
        for item in dp.maps.vip_map.iter() {
            let (k, v) = item.map_err(|e| map_err("vip_map", e))?;
            let key = VipKey::exact(
                abi::addr4_from_be(k.addr).into(),
                abi::port_from_be(k.port),
                k.proto,
            );
            entries.push((key, v.service_id));
        }
        for item in dp.maps.vip_map6.iter() {
            let (k, v) = item.map_err(|e| map_err("vip_map6", e))?;
            let key = VipKey::exact(
                Ipv6Addr::from(k.addr).into(),
                abi::port_from_be(k.port),
                k.proto,
            );
            entries.push((key, v.service_id));
        }
        let mut service_ids_used = BTreeSet::new();
        for (key, service_id) in entries {
            match dp.adopt_vip(key, service_id, &mut by_id, &service_ids_used) {
                Ok(generation) => {
                    service_ids_used.insert(service_id);
                    max_generation = max_generation.max(generation);
                    report.vips += 1;
                }
                Err(why) => {
                    report
                        .dropped
                        .push(format!("VIP {key} (service ID {service_id}): {why}"));
                    // The index may point at it: off until rebuilt below.
                    dp.disable_vip_index()?;
                    dp.remove_vip_key(&key)?;
                }
            }
        }
        // Port-range VIPs: the trie prefixes, grouped into ranges.
        let (groups, bad) = dp.read_range_prefixes()?;
        for (prefix, why) in bad {
            report
                .dropped
                .push(format!("vip_range_map prefix {prefix}: {why}"));
            dp.remove_prefix(&prefix)?;
        }
        for ((addr, proto, service_id), prefixes) in groups {
            let adopted = match range_of(&prefixes) {
                Some((first, last)) => {
                    let key = VipKey::range(addr, first, last, proto);
                    dp.adopt_vip(key, service_id, &mut by_id, &service_ids_used)
                        .map_err(|why| format!("VIP {key} (service ID {service_id}): {why}"))
                }
                None => Err(format!(
                    "vip_range_map prefixes of service ID {service_id} ({}) do not form one port range",
                    prefixes
                        .iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            };
            match adopted {
                Ok(generation) => {
                    service_ids_used.insert(service_id);
                    max_generation = max_generation.max(generation);
                    report.vips += 1;
                }
                Err(why) => {
                    report.dropped.push(why);
                    for prefix in &prefixes {
                        dp.remove_prefix(prefix)?;
                    }
                }
            }
        }
        // Source ranges of no adopted VIP's bank in force (a change that did
        // not finish, a removed VIP) are stale: clear them.
        let in_force: BTreeSet<u32> = dp
            .vips
            .values()
            .filter(|v| v.spec.source_ranges.is_some())
            .map(|v| src_tag(v.service_id, v.src_bank))
            .collect();
        let stale: Vec<u32> = dp
            .src_ranges
            .keys()
            .filter(|t| !in_force.contains(t))
            .copied()
            .collect();
        for tag in stale {
            dp.write_src_ranges(tag, &BTreeSet::new())?;
        }
        // Per-service rate limits nothing asks for are stale: clear them.
        let limited: BTreeSet<u32> = dp
            .vips
            .values()
            .filter(|v| v.spec.syn_rate_limit.is_some())
            .map(|v| v.service_id)
            .collect();
        for id in 0..abi::MAX_VIPS {
            if limited.contains(&id) {
                continue;
            }
            let rl = dp
                .maps
                .svc_rl_config
                .get(&id, 0)
                .map_err(|e| map_err("svc_rl_config_map", e))?;
            if rl != abi::RlConfig::default() {
                dp.set_svc_rate_limit(id, None)?;
            }
        }
        dp.node_syn_rate_limit = RateLimit::from_abi(
            dp.maps
                .rl_config
                .get(&0, 0)
                .map_err(|e| map_err("rl_config_map", e))?,
        );
        // Service entries no adopted VIP points to are stale: clear them.
        for id in 0..abi::MAX_VIPS {
            if service_ids_used.contains(&id) {
                continue;
            }
            let svc = dp
                .maps
                .service_config
                .get(&id, 0)
                .map_err(|e| map_err("service_config_map", e))?;
            if svc != abi::Service::default() {
                dp.maps
                    .service_config
                    .set(id, abi::Service::default(), 0)
                    .map_err(|e| map_err("service_config_map", e))?;
                report
                    .dropped
                    .push(format!("service ID {id}: entry without a VIP"));
            }
        }

        let now = Instant::now();
        for (_, mut b) in by_id {
            if b.vips.is_empty() {
                // Nothing routes new flows to it: it retires like a removed backend.
                b.retired_at = Some(now);
                report.retiring += 1;
            }
            report.backends += 1;
            let key = b.key;
            dp.backends.insert(key, b);
            dp.sync_health(&key)?;
        }
        // A pseudo-backend no adopted slice names (a VIP dropped above,
        // an apply that did not finish) is released.
        if let Some(id) = dp.reject_id
            && !dp.vips.values().any(|v| v.spec.reject_weight > 0)
        {
            dp.set_health(id, abi::backend_state::NONE)?;
            dp.reject_id = None;
        }
        let mut backend_ids: BTreeSet<u32> = dp.backends.values().map(|b| b.id).collect();
        backend_ids.extend(dp.reject_id);
        dp.backend_ids = IdAllocator::adopt(abi::MAX_BACKENDS, &backend_ids);
        dp.service_ids = IdAllocator::adopt(abi::MAX_VIPS, &service_ids_used);
        dp.next_generation = max_generation.wrapping_add(1).max(1);
        // The index of what was adopted: unchanged (nothing written) when
        // the pinned one already matches.
        dp.sync_vip_index(&BTreeSet::new())?;
        dp.adopt_endpoints()?;
        // stateless_reverse is not in the maps: a NAT VIP that some
        // endpoint serves exclusively was stateless; any other is taken as
        // stateful, the safe reading (a missing endpoint entry only costs
        // per-flow entries, a wrong exclusive one rewrites a pod's other
        // traffic), until a spec says otherwise. Matters while an adopted
        // VIP is kept unclaimed: the endpoint plan reads its spec.
        let exclusive: BTreeSet<u32> = dp
            .endpoints
            .values()
            .filter(|e| e.exclusive())
            .map(|e| e.target.service_id)
            .collect();
        for v in dp.vips.values_mut() {
            v.spec.stateless_reverse =
                v.spec.mode != Mode::Nat || exclusive.contains(&v.service_id);
        }
        // Maps of an older ABI have no filter yet: set it from the adopted
        // backends before the new tc_nat can see a reply.
        dp.sync_backend_filter(&[])?;
        Ok((dp, report))
    }

    /// Adopts one VIP; on Err nothing of it was taken.
    fn adopt_vip(
        &mut self,
        key: VipKey,
        service_id: u32,
        by_id: &mut BTreeMap<u32, BackendState>,
        taken: &BTreeSet<u32>,
    ) -> Result<u32, String> {
        if service_id >= abi::MAX_VIPS || taken.contains(&service_id) {
            return Err("service ID out of range or used twice".into());
        }
        let svc = self
            .maps
            .service_config
            .get(&service_id, 0)
            .map_err(|e| e.to_string())?;
        if svc.flags & abi::service_flags::ACTIVE == 0 {
            return Err("service entry is not active".into());
        }
        if (svc.flags & abi::service_flags::IPV6 != 0) != key.addr.is_ipv6() {
            return Err("service entry is of the other address family".into());
        }
        let mode = match svc.mode {
            abi::mode::NAT => Mode::Nat,
            abi::mode::DSR => Mode::Dsr,
            abi::mode::DSR_IPIP => Mode::DsrIpip,
            abi::mode::DSR_GRE => Mode::DsrGre,
            m => return Err(format!("unknown mode {m}")),
        };
        let affinity_timeout = if svc.flags & abi::service_flags::AFFINITY_CLIENT_IP != 0 {
            let t = self
                .maps
                .affinity_timeout
                .get(&service_id, 0)
                .map_err(|e| e.to_string())?;
            (t.ticks != 0).then(|| Duration::from_secs(u64::from(t.seconds)))
        } else {
            None
        };
        let syn_rate_limit = if svc.flags & abi::service_flags::SYN_RATE_LIMIT != 0 {
            let rl = self
                .maps
                .svc_rl_config
                .get(&service_id, 0)
                .map_err(|e| e.to_string())?;
            match RateLimit::from_abi(rl) {
                Some(l) if l.rate > 0 && l.burst > 0 => Some(l),
                _ => return Err("rate-limit flag set but no valid rate limit".into()),
            }
        } else {
            None
        };
        let slice = Slice {
            offset: svc.maglev_offset,
            size: svc.maglev_size,
        };
        if slice.offset as u64 + slice.size as u64 > self.slices.len() as u64 {
            return Err("Maglev slice beyond the table".into());
        }
        let slots = self.maps.maglev.read(slice.offset, slice.size);
        let ids: BTreeSet<u32> = slots.iter().copied().collect();
        if ids.len() != svc.backend_count as usize {
            return Err(format!(
                "slice names {} backends, entry says {}",
                ids.len(),
                svc.backend_count
            ));
        }
        let reject = self.reject_id.filter(|r| ids.contains(r));
        for id in ids.iter().filter(|id| Some(**id) != reject) {
            match by_id.get(id) {
                Some(b) if b.key.addr.is_ipv6() == key.addr.is_ipv6() => {}
                _ => {
                    return Err(format!(
                        "slice names backend ID {id}, which is not a backend of its family"
                    ));
                }
            }
        }
        if !self.slices.reserve(slice) {
            return Err("Maglev slice overlaps another VIP's".into());
        }
        let mut backends = Vec::new();
        let mut draining = BTreeSet::new();
        let mut snat = BTreeSet::new();
        for id in ids.iter().filter(|id| Some(**id) != reject) {
            let b = by_id.get_mut(id).expect("checked above");
            b.vips.insert(key);
            backends.push(BackendSpec {
                key: b.key,
                weight: 0,
                mac: b.mac,
            });
            if b.terminating {
                draining.insert(b.key);
            }
            if b.snat && svc.flags & abi::service_flags::SNAT != 0 {
                snat.insert(b.key);
            }
        }
        backends.sort();
        let src_bank = u32::from(
            source_ranges_set(svc.flags) && svc.flags & abi::service_flags::SOURCE_BANK != 0,
        );
        let source_ranges = source_ranges_set(svc.flags).then(|| {
            let tag = src_tag(service_id, src_bank);
            let list = self.src_ranges.get(&tag).cloned().unwrap_or_default();
            list.into_iter()
                .filter(|r| r.addr.is_ipv6() == key.addr.is_ipv6())
                .collect::<Vec<_>>()
        });
        self.vips.insert(
            key,
            VipState {
                spec: VipSpec {
                    name: format!("adopted-{service_id}"),
                    key,
                    mode,
                    backends,
                    // Its weight is unknown, like the backends' (0 there):
                    // 1 says the slice has a refused share.
                    reject_weight: u32::from(reject.is_some()),
                    affinity_client_ip: svc.flags & abi::service_flags::AFFINITY_CLIENT_IP != 0,
                    affinity_timeout,
                    syn_rate_limit,
                    nat_fib: svc.flags & abi::service_flags::NAT_FIB != 0,
                    source_ranges,
                    // Not in the maps: read from the endpoint entries once
                    // they are adopted (adopt), and the next apply's spec
                    // says it (nothing rewritten either way).
                    stateless_reverse: true,
                    draining,
                    snat,
                },
                service_id,
                slice,
                generation: svc.generation,
                worst_imbalance: 0.0,
                adopted: true,
                src_bank,
            },
        );
        Ok(svc.generation)
    }

    /// Records the interface the programs are attached to: its MAC is the
    /// source of frames sent back out (L2 DSR, ICMP answers).
    pub fn set_interface(&mut self, mac: [u8; 6], ifindex: u32) -> Result<(), Error> {
        self.maps
            .iface
            .set(
                0,
                abi::Iface {
                    mac,
                    pad: 0,
                    ifindex,
                },
                0,
            )
            .map_err(|e| map_err("iface_mac_map", e))
    }

    /// The outer source addresses of L3 DSR tunnels in force.
    pub fn tunnel_source(&self) -> (Option<std::net::Ipv4Addr>, Option<std::net::Ipv6Addr>) {
        self.tunnel_source
    }

    /// Sets the outer source addresses of L3 DSR tunnels (`tunnelSource`).
    pub fn set_tunnel_source(
        &mut self,
        v4: Option<std::net::Ipv4Addr>,
        v6: Option<std::net::Ipv6Addr>,
    ) -> Result<(), Error> {
        let cfg = abi::TunnelConfig {
            src4: v4.map(abi::be_addr4).unwrap_or(0),
            src6: v6.map(|a| a.octets()).unwrap_or([0; 16]),
            flags: 0,
        };
        self.tunnel_source = (v4, v6);
        self.maps
            .tunnel
            .set(0, cfg, 0)
            .map_err(|e| map_err("tunnel_config_map", e))
    }

    /// The source of translated flows in force.
    pub fn snat_source(&self) -> &crate::snat::SnatSource {
        &self.snat_source
    }

    /// Sets the source of translated flows (the node's addresses, the
    /// port range, the idle times). Refused, with nothing changed, when the
    /// range is empty. Set it before the apply whose VIPs need it: apply
    /// refuses a VIP with translated backends of a family without an
    /// address (the daemon sets both, and restores both if apply fails).
    /// An idle time is converted to ticks with the kernel's HZ (1000 if it
    /// cannot be learnt: the longest hold in real time).
    pub fn set_snat_source(&mut self, source: crate::snat::SnatSource) -> Result<(), Error> {
        let hz = crate::jiffies::hz().unwrap_or(1000);
        let cfg = source.to_config(hz).map_err(Error::Invalid)?;
        self.maps
            .snat_config
            .set(0, cfg, 0)
            .map_err(|e| map_err("snat_config_map", e))?;
        self.snat_source = source;
        Ok(())
    }

    /// Sets the node ports of translated flows (`--snat-ports`) without
    /// writing the map: they take effect with the next
    /// [`Self::set_snat_source`], so a restarted daemon's adopted
    /// configuration keeps translating until its source has its addresses.
    pub fn set_snat_ports(&mut self, ports: std::ops::RangeInclusive<u16>) -> Result<(), Error> {
        if ports.is_empty() || *ports.start() == 0 {
            return Err(Error::Invalid(format!(
                "SNAT ports {}-{}: need a non-empty range of ports 1-65535",
                ports.start(),
                ports.end()
            )));
        }
        self.snat_source.ports = ports;
        Ok(())
    }

    /// Reads the adopted source of translated flows (addresses and ports;
    /// idle times stay the defaults until the next set).
    fn read_snat_source(&mut self) -> Result<(), Error> {
        let c = self
            .maps
            .snat_config
            .get(&0, 0)
            .map_err(|e| map_err("snat_config_map", e))?;
        let s = &mut self.snat_source;
        s.v4 = (c.flags & abi::snat_config_flags::ADDR4 != 0).then(|| abi::addr4_from_be(c.addr4));
        s.v6 = (c.flags & abi::snat_config_flags::ADDR6 != 0)
            .then(|| std::net::Ipv6Addr::from(c.addr6));
        if c.port_min != 0 && c.port_min <= c.port_max {
            s.ports = c.port_min..=c.port_max;
        }
        Ok(())
    }

    /// The datapath's source-translation counters, summed over CPUs.
    pub fn snat_counters(&self) -> Result<crate::snat::SnatCounters, Error> {
        let mut out = [0u64; abi::snat_counter::COUNT as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            let per_cpu = self
                .maps
                .snat_stats
                .get(&(i as u32), 0)
                .map_err(|e| map_err("snat_stats_map", e))?;
            *slot = per_cpu.iter().sum();
        }
        Ok(out)
    }

    /// Records an operator's drain (or its end). Returns whether the
    /// effective state changed. A backend the probes consider down stays down.
    pub fn set_drained(&mut self, key: &BackendKey, drained: bool) -> Result<bool, Error> {
        self.backend_mut(key)?.drained = drained;
        self.sync_health(key)
    }

    /// Records the health probes' verdict. Returns whether the effective
    /// state changed. Slices are not rebuilt: the health map alone steers
    /// new flows, so a flapping backend reshuffles nobody else's flows.
    pub fn set_probe_down(&mut self, key: &BackendKey, down: bool) -> Result<bool, Error> {
        self.backend_mut(key)?.probe_down = down;
        self.sync_health(key)
    }

    /// Forces a state, for tests and tools: `HEALTHY` clears drain and
    /// probe verdict, `DRAINING` drains, `DOWN` marks the probes down. A
    /// source's drain (`VipSpec::draining`) is not touched: the next apply
    /// owns it.
    pub fn set_backend_state(&mut self, key: &BackendKey, state: u32) -> Result<(), Error> {
        let b = self.backend_mut(key)?;
        match state {
            abi::backend_state::HEALTHY => (b.drained, b.probe_down) = (false, false),
            abi::backend_state::DRAINING => (b.drained, b.probe_down) = (true, false),
            abi::backend_state::DOWN => b.probe_down = true,
            s => return Err(Error::Invalid(format!("state {s} cannot be set"))),
        }
        self.sync_health(key).map(|_| ())
    }

    fn backend_mut(&mut self, key: &BackendKey) -> Result<&mut BackendState, Error> {
        self.backends
            .get_mut(key)
            .ok_or_else(|| Error::Invalid(format!("no backend {key}")))
    }

    /// Writes a backend's effective state and its reasons to the health map
    /// when they changed; returns whether the state changed.
    fn sync_health(&mut self, key: &BackendKey) -> Result<bool, Error> {
        let b = self.backends.get(key).expect("caller checked");
        let state = if b.probe_down {
            abi::backend_state::DOWN
        } else if b.drained || b.terminating || b.retired_at.is_some() {
            abi::backend_state::DRAINING
        } else {
            abi::backend_state::HEALTHY
        };
        let mut flags = 0;
        if b.drained {
            flags |= abi::backend_flags::DRAINED;
        }
        if b.probe_down {
            flags |= abi::backend_flags::PROBE_DOWN;
        }
        if b.terminating {
            flags |= abi::backend_flags::TERMINATING;
        }
        if b.snat {
            flags |= abi::backend_flags::SNAT;
        }
        let id = b.id;
        let changed = b.state != state;
        self.maps
            .backend_health
            .set(id, abi::BackendHealth { state, flags }, 0)
            .map_err(|e| map_err("backend_health_map", e))?;
        let b = self.backends.get_mut(key).expect("caller checked");
        if changed {
            b.state = state;
            b.last_change = Some(std::time::SystemTime::now());
        }
        Ok(changed)
    }

    /// Per-VIP counters summed over CPUs, in VIP order.
    pub fn vip_counters(&self) -> Result<Vec<VipCounters>, Error> {
        let mut out = Vec::new();
        for v in self.vips.values() {
            let per_cpu = self
                .maps
                .stats
                .get(&v.service_id, 0)
                .map_err(|e| map_err("stats_map", e))?;
            let mut s = abi::VipStats::default();
            for c in per_cpu.iter() {
                s.packets += c.packets;
                s.bytes += c.bytes;
                s.new_flows += c.new_flows;
                s.drops += c.drops;
                s.reply_packets += c.reply_packets;
                s.reply_bytes += c.reply_bytes;
            }
            let mut drops_by_reason = vec![0u64; abi::drop_reason::COUNT as usize];
            if s.drops > 0 {
                for (reason, n) in drops_by_reason.iter_mut().enumerate() {
                    let idx = v.service_id * abi::DROP_REASON_SLOTS + reason as u32;
                    *n = self
                        .maps
                        .vip_drop_stats
                        .get(&idx, 0)
                        .map_err(|e| map_err("vip_drop_stats_map", e))?
                        .iter()
                        .map(|c| c.packets)
                        .sum();
                }
            }
            out.push(VipCounters {
                name: v.spec.name.clone(),
                service_id: v.service_id,
                stats: s,
                drops_by_reason,
            });
        }
        Ok(out)
    }

    /// Per-backend counters summed over CPUs (last-packet time: the latest
    /// CPU's), in backend order.
    pub fn backend_counters(&self) -> Result<Vec<BackendCounters>, Error> {
        let mut out = Vec::with_capacity(self.backends.len());
        for b in self.backends.values() {
            let per_cpu = self
                .maps
                .backend_stats
                .get(&b.id, 0)
                .map_err(|e| map_err("backend_stats_map", e))?;
            let mut c = BackendCounters {
                key: b.key,
                id: b.id,
                packets: 0,
                bytes: 0,
                new_flows: 0,
                last_jiffies: 0,
            };
            for s in per_cpu.iter() {
                c.packets += s.packets;
                c.bytes += s.bytes;
                c.new_flows += s.new_flows;
                c.last_jiffies = c.last_jiffies.max(s.last_jiffies);
            }
            out.push(c);
        }
        Ok(out)
    }

    /// Keeps the flow filter useful (flow_filter.rs): rebuilds it when it
    /// has too many stale bits or was never exact. Cheap when nothing is
    /// due (the bits are counted at most once a second), so rivorad calls
    /// it on every tick; call it only while this build's programs are the
    /// ones attached.
    pub fn maintain_flow_filter(
        &mut self,
    ) -> Result<Option<crate::flow_filter::RebuildReport>, Error> {
        let (filter, v4, v6) = self.maps.flow_filter_parts();
        filter.maintain(v4, v6)
    }

    /// Rebuilds the flow filter now, due or not (tests, benchmarks).
    pub fn rebuild_flow_filter(&mut self) -> Result<crate::flow_filter::RebuildReport, Error> {
        let (filter, v4, v6) = self.maps.flow_filter_parts();
        filter.rebuild(v4, v6)
    }

    /// The flow filter's size, fill and whether it is exact.
    pub fn flow_filter_status(&self) -> crate::flow_filter::FilterStatus {
        self.maps.flow_filter.status()
    }

    /// Entries in use in each flow table and its capacity, so an operator
    /// sees a table filling before LRU eviction starts dropping live flows.
    /// Counts by walking the keys: one syscall per entry, so call it at
    /// scrape or CLI rate, not in a loop.
    pub fn table_usage(&self) -> Vec<(&'static str, u64, u64)> {
        let cap = self.maps.flow_capacity as u64;
        vec![
            (
                "connection_affinity_map",
                self.maps.affinity.keys().count() as u64,
                cap,
            ),
            (
                "connection_affinity_map6",
                self.maps.affinity6.keys().count() as u64,
                cap,
            ),
            (
                "nat_reverse_map",
                self.maps.nat_reverse.keys().count() as u64,
                cap,
            ),
            (
                "nat_reverse_map6",
                self.maps.nat_reverse6.keys().count() as u64,
                cap,
            ),
        ]
    }

    /// Drop counters by reason (index = `rivora_abi::drop_reason`).
    pub fn drop_counters(&self) -> Result<Vec<u64>, Error> {
        (0..abi::drop_reason::COUNT)
            .map(|r| {
                let per_cpu = self
                    .maps
                    .drop_stats
                    .get(&r, 0)
                    .map_err(|e| map_err("drop_stats_map", e))?;
                Ok(per_cpu.iter().map(|c| c.packets).sum())
            })
            .collect()
    }

    fn write_backend(
        &mut self,
        key: BackendKey,
        id: u32,
        mac: [u8; 6],
        generation: u32,
    ) -> Result<(), Error> {
        let port = abi::be_port(key.port);
        match key.addr {
            IpAddr::V4(a) => self
                .maps
                .backend_map
                .set(
                    id,
                    abi::Backend4 {
                        addr: abi::be_addr4(a),
                        port,
                        mac,
                        generation,
                    },
                    0,
                )
                .map_err(|e| map_err("backend_map", e)),
            IpAddr::V6(a) => self
                .maps
                .backend_map6
                .set(
                    id,
                    abi::Backend6 {
                        addr: a.octets(),
                        port,
                        mac,
                        generation,
                    },
                    0,
                )
                .map_err(|e| map_err("backend_map6", e)),
        }
    }

    fn clear_backend(&mut self, key: BackendKey, id: u32) -> Result<(), Error> {
        match key.addr {
            IpAddr::V4(_) => self
                .maps
                .backend_map
                .set(id, abi::Backend4::default(), 0)
                .map_err(|e| map_err("backend_map", e)),
            IpAddr::V6(_) => self
                .maps
                .backend_map6
                .set(id, abi::Backend6::default(), 0)
                .map_err(|e| map_err("backend_map6", e)),
        }
    }

    /// Gives backend ID `id` to the refusing pseudo-backend: no address
    /// entry in either family (the program never forwards to it), state
    /// healthy (its slots are picked), flag REJECT (the program refuses
    /// what picks it; an adopting writer recognises it).
    fn write_reject_backend(&mut self, id: u32) -> Result<(), Error> {
        self.maps
            .backend_map
            .set(id, abi::Backend4::default(), 0)
            .map_err(|e| map_err("backend_map", e))?;
        self.maps
            .backend_map6
            .set(id, abi::Backend6::default(), 0)
            .map_err(|e| map_err("backend_map6", e))?;
        self.maps
            .backend_health
            .set(
                id,
                abi::BackendHealth {
                    state: abi::backend_state::HEALTHY,
                    flags: abi::backend_flags::REJECT,
                },
                0,
            )
            .map_err(|e| map_err("backend_health_map", e))
    }

    fn set_health(&mut self, id: u32, state: u32) -> Result<(), Error> {
        self.maps
            .backend_health
            .set(id, abi::BackendHealth { state, flags: 0 }, 0)
            .map_err(|e| map_err("backend_health_map", e))
    }

    /// Writes a service entry (with its flags) and the service's own rate
    /// limit and source ranges: the limit before the entry that flags it, a
    /// cleared limit after the entry that no longer does; a new list of
    /// source ranges into the bank not in force before the entry that
    /// switches to it, the bank left emptied after. `cur`: the VIP's source
    /// ranges and bank in force now (None: a new VIP). Returns the bank in
    /// force after.
    fn write_service(
        &mut self,
        service_id: u32,
        slice: Slice,
        spec: &VipSpec,
        generation: u32,
        cur: Option<(Option<Vec<SourceRange>>, u32)>,
    ) -> Result<u32, Error> {
        if spec.syn_rate_limit.is_some() {
            self.set_svc_rate_limit(service_id, spec.syn_rate_limit)?;
        }
        // Before the service entry, so a ClientIP VIP never runs without
        // the timeout it is given.
        self.set_affinity_timeout(service_id, spec.affinity_timeout)?;
        let bank = match (&spec.source_ranges, &cur) {
            (None, _) => 0,
            (Some(want), Some((Some(have), b))) if want == have => *b,
            (Some(_), Some((_, b))) => b ^ 1,
            (Some(_), None) => 0,
        };
        if let Some(want) = &spec.source_ranges {
            let want: BTreeSet<SourceRange> = want.iter().copied().collect();
            self.write_src_ranges(src_tag(service_id, bank), &want)?;
        }
        let entry = abi::Service {
            maglev_offset: slice.offset,
            maglev_size: slice.size,
            // The distinct IDs of the slice (Maglev gives every member a
            // slot), the refusing pseudo-backend included.
            backend_count: maglev_members(spec).0.len() as u16,
            mode: spec.mode.abi(),
            flags: service_flags(spec, bank) | self.kept_snat_flag(service_id, spec)?,
            generation,
        };
        self.maps
            .service_config
            .set(service_id, entry, 0)
            .map_err(|e| map_err("service_config_map", e))?;
        if spec.syn_rate_limit.is_none() {
            self.set_svc_rate_limit(service_id, None)?;
        }
        for b in [0, 1] {
            if spec.source_ranges.is_none() || b != bank {
                self.write_src_ranges(src_tag(service_id, b), &BTreeSet::new())?;
            }
        }
        Ok(bank)
    }

    /// The service SNAT flag a VIP keeps although its spec lists no backend on another node:
    /// while it had the flag and a backend flagged SNAT that it does not list (retiring, or
    /// removed from it) still exists, that backend's established flows of this VIP need the
    /// flag to keep leaving with this node's address. Costs such a VIP one array lookup per
    /// packet until its next write after those backends are released.
    fn kept_snat_flag(&self, service_id: u32, spec: &VipSpec) -> Result<u8, Error> {
        if !spec.snat.is_empty() {
            return Ok(0);
        }
        let had = self
            .maps
            .service_config
            .get(&service_id, 0)
            .map_err(|e| map_err("service_config_map", e))?
            .flags
            & abi::service_flags::SNAT
            != 0;
        let removed_remote = self
            .backends
            .values()
            .any(|b| b.snat && !spec.backends.iter().any(|sb| sb.key == b.key));
        Ok(if had && removed_remote {
            abi::service_flags::SNAT
        } else {
            0
        })
    }

    /// The source ranges and bank in force for a programmed VIP.
    fn src_ranges_in_force(&self, key: &VipKey) -> Option<(Option<Vec<SourceRange>>, u32)> {
        self.vips
            .get(key)
            .map(|v| (v.spec.source_ranges.clone(), v.src_bank))
    }

    /// Makes src_range_map(6) hold exactly `want` under `tag`: missing
    /// prefixes inserted, others of the tag removed.
    fn write_src_ranges(&mut self, tag: u32, want: &BTreeSet<SourceRange>) -> Result<(), Error> {
        let have = self.src_ranges.get(&tag).cloned().unwrap_or_default();
        let service_id = tag & !abi::SRC_RANGE_BANK;
        for r in want.difference(&have) {
            match r.addr {
                IpAddr::V4(a) => self
                    .maps
                    .src_range
                    .insert(&src_key4(tag, a, r.prefix_len), service_id, 0)
                    .map_err(|e| map_err("src_range_map", e))?,
                IpAddr::V6(a) => self
                    .maps
                    .src_range6
                    .insert(&src_key6(tag, a, r.prefix_len), service_id, 0)
                    .map_err(|e| map_err("src_range_map6", e))?,
            }
        }
        for r in have.difference(want) {
            let (res, map) = match r.addr {
                IpAddr::V4(a) => (
                    self.maps.src_range.remove(&src_key4(tag, a, r.prefix_len)),
                    "src_range_map",
                ),
                IpAddr::V6(a) => (
                    self.maps.src_range6.remove(&src_key6(tag, a, r.prefix_len)),
                    "src_range_map6",
                ),
            };
            absent_ok(res).map_err(|e| map_err(map, e))?;
        }
        if want.is_empty() {
            self.src_ranges.remove(&tag);
        } else {
            self.src_ranges.insert(tag, want.clone());
        }
        Ok(())
    }

    /// Reads src_range_map(6) back (adoption); entries the writer cannot
    /// have made (a prefix length beyond the tag and address) are removed.
    fn read_src_ranges(&mut self, report: &mut AdoptReport) -> Result<(), Error> {
        let mut bad4 = Vec::new();
        for item in self.maps.src_range.iter() {
            let (k, _) = item.map_err(|e| map_err("src_range_map", e))?;
            let (len, d) = (k.prefix_len(), k.data());
            match len.checked_sub(32).filter(|l| *l <= 32) {
                Some(l) => {
                    self.src_ranges
                        .entry(d.tag)
                        .or_default()
                        .insert(SourceRange::new(Ipv4Addr::from(d.addr).into(), l as u8));
                }
                None => bad4.push(k),
            }
        }
        let mut bad6 = Vec::new();
        for item in self.maps.src_range6.iter() {
            let (k, _) = item.map_err(|e| map_err("src_range_map6", e))?;
            let (len, d) = (k.prefix_len(), k.data());
            match len.checked_sub(32).filter(|l| *l <= 128) {
                Some(l) => {
                    self.src_ranges
                        .entry(d.tag)
                        .or_default()
                        .insert(SourceRange::new(Ipv6Addr::from(d.addr).into(), l as u8));
                }
                None => bad6.push(k),
            }
        }
        for k in bad4 {
            report.dropped.push(format!(
                "src_range_map entry of tag {:#x}: prefix length {} is not the writer's",
                k.data().tag,
                k.prefix_len()
            ));
            let _ = self.maps.src_range.remove(&k);
        }
        for k in bad6 {
            report.dropped.push(format!(
                "src_range_map6 entry of tag {:#x}: prefix length {} is not the writer's",
                k.data().tag,
                k.prefix_len()
            ));
            let _ = self.maps.src_range6.remove(&k);
        }
        Ok(())
    }

    /// Fails when the source ranges would not fit in the tries while
    /// applying `desired`: a VIP whose list changes holds its old and its
    /// new list at once, and removed VIPs keep theirs until after the added
    /// ones are written.
    fn check_src_range_capacity(&self, desired: &BTreeMap<VipKey, VipSpec>) -> Result<(), Error> {
        let mut need = [0usize; 2];
        let fam = |k: &VipKey| usize::from(k.addr.is_ipv6());
        for (k, v) in &self.vips {
            need[fam(k)] += v.spec.source_ranges.as_ref().map_or(0, Vec::len);
        }
        for (k, spec) in desired {
            let cur = self.vips.get(k).and_then(|v| v.spec.source_ranges.as_ref());
            if let Some(want) = &spec.source_ranges
                && cur != Some(want)
            {
                need[fam(k)] += want.len();
            }
        }
        for (map, n) in [("src_range_map", need[0]), ("src_range_map6", need[1])] {
            if n > abi::MAX_SRC_RANGES as usize {
                return Err(Error::Capacity(format!(
                    "{map}: source ranges need {n} prefixes while applying, at most {} fit",
                    abi::MAX_SRC_RANGES
                )));
            }
        }
        Ok(())
    }

    /// Writes a ClientIP VIP's timeout (None: no timeout), in ticks at the
    /// kernel's HZ (1000 if it cannot be learnt: the longest in real time).
    fn set_affinity_timeout(
        &mut self,
        service_id: u32,
        timeout: Option<Duration>,
    ) -> Result<(), Error> {
        let value = match timeout {
            None => abi::AffinityTimeout::default(),
            Some(d) => abi::AffinityTimeout {
                ticks: crate::jiffies::ticks_at_least(d, crate::jiffies::hz().unwrap_or(1000)),
                seconds: u32::try_from(d.as_secs()).unwrap_or(u32::MAX),
            },
        };
        self.maps
            .affinity_timeout
            .set(service_id, value, 0)
            .map_err(|e| map_err("svc_affinity_timeout_map", e))
    }

    fn set_svc_rate_limit(
        &mut self,
        service_id: u32,
        limit: Option<RateLimit>,
    ) -> Result<(), Error> {
        self.maps
            .svc_rl_config
            .set(service_id, limit.map(RateLimit::abi).unwrap_or_default(), 0)
            .map_err(|e| map_err("svc_rl_config_map", e))
    }

    /// Inserts a VIP: its vip_map(6) entry, or the prefixes of its range.
    fn insert_vip_key(&mut self, key: &VipKey, service_id: u32) -> Result<(), Error> {
        if !key.is_exact() {
            for prefix in RangePrefix::of(key) {
                self.insert_prefix(&prefix, service_id)?;
            }
            return Ok(());
        }
        let value = abi::VipValue { service_id };
        match key.addr {
            IpAddr::V4(a) => self
                .maps
                .vip_map
                .insert(abi::VipKey4::new(a, key.port, key.proto), value, 0)
                .map_err(|e| map_err("vip_map", e)),
            IpAddr::V6(a) => self
                .maps
                .vip_map6
                .insert(abi::VipKey6::new(a, key.port, key.proto), value, 0)
                .map_err(|e| map_err("vip_map6", e)),
        }
    }

    /// Removes a VIP's vip_map(6) entry, or the prefixes of its range that
    /// no programmed VIP uses (a new range sharing a prefix with a removed
    /// one has already overwritten it).
    fn remove_vip_key(&mut self, key: &VipKey) -> Result<(), Error> {
        if !key.is_exact() {
            let kept: BTreeSet<RangePrefix> = self
                .vips
                .keys()
                .filter(|k| k.addr == key.addr && k.proto == key.proto && !k.is_exact())
                .flat_map(RangePrefix::of)
                .collect();
            for prefix in RangePrefix::of(key) {
                if !kept.contains(&prefix) {
                    self.remove_prefix(&prefix)?;
                }
            }
            return Ok(());
        }
        let res = match key.addr {
            IpAddr::V4(a) => self
                .maps
                .vip_map
                .remove(&abi::VipKey4::new(a, key.port, key.proto)),
            IpAddr::V6(a) => self
                .maps
                .vip_map6
                .remove(&abi::VipKey6::new(a, key.port, key.proto)),
        };
        absent_ok(res).map_err(|e| map_err("vip_map", e))
    }

    fn insert_prefix(&mut self, prefix: &RangePrefix, service_id: u32) -> Result<(), Error> {
        let value = abi::VipValue { service_id };
        match prefix.addr {
            IpAddr::V4(a) => self
                .maps
                .vip_range_map
                .insert(&maps::lpm_key4(&prefix.key4(a)), value, 0)
                .map_err(|e| map_err("vip_range_map", e)),
            IpAddr::V6(a) => self
                .maps
                .vip_range_map6
                .insert(&maps::lpm_key6(&prefix.key6(a)), value, 0)
                .map_err(|e| map_err("vip_range_map6", e)),
        }
    }

    fn remove_prefix(&mut self, prefix: &RangePrefix) -> Result<(), Error> {
        let (res, map) = match prefix.addr {
            IpAddr::V4(a) => (
                self.maps
                    .vip_range_map
                    .remove(&maps::lpm_key4(&prefix.key4(a))),
                "vip_range_map",
            ),
            IpAddr::V6(a) => (
                self.maps
                    .vip_range_map6
                    .remove(&maps::lpm_key6(&prefix.key6(a))),
                "vip_range_map6",
            ),
        };
        absent_ok(res).map_err(|e| map_err(map, e))
    }

    /// Every prefix of both range tries, grouped by (address, protocol,
    /// service ID) and sorted by port, and the entries that cannot be ours
    /// (a prefix length or port outside what the writer produces).
    #[allow(clippy::type_complexity)]
    fn read_range_prefixes(
        &self,
    ) -> Result<
        (
            BTreeMap<(IpAddr, u8, u32), Vec<RangePrefix>>,
            Vec<(RangePrefix, String)>,
        ),
        Error,
    > {
        let mut raw: Vec<(RangePrefix, u32, Option<String>)> = Vec::new();
        for item in self.maps.vip_range_map.iter() {
            let (k, v) = item.map_err(|e| map_err("vip_range_map", e))?;
            let k = maps::abi_key4(&k);
            let (prefix, why) = RangePrefix::read(
                Ipv4Addr::from(k.addr).into(),
                k.proto,
                k.prefixlen,
                k.port,
                k.pad,
            );
            raw.push((prefix, v.service_id, why));
        }
        for item in self.maps.vip_range_map6.iter() {
            let (k, v) = item.map_err(|e| map_err("vip_range_map6", e))?;
            let k = maps::abi_key6(&k);
            let (prefix, why) = RangePrefix::read(
                Ipv6Addr::from(k.addr).into(),
                k.proto,
                k.prefixlen,
                k.port,
                k.pad,
            );
            raw.push((prefix, v.service_id, why));
        }
        let mut groups: BTreeMap<(IpAddr, u8, u32), Vec<RangePrefix>> = BTreeMap::new();
        let mut bad = Vec::new();
        for (prefix, service_id, why) in raw {
            match why {
                Some(why) => bad.push((prefix, why)),
                None => groups
                    .entry((prefix.addr, prefix.proto, service_id))
                    .or_default()
                    .push(prefix),
            }
        }
        for prefixes in groups.values_mut() {
            prefixes.sort();
        }
        Ok((groups, bad))
    }

    fn zero_backend_stats(&mut self, id: u32) -> Result<(), Error> {
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| Error::Io {
            what: what.to_string(),
            source: e,
        })?;
        let zeros =
            PerCpuValues::try_from(vec![abi::BackendStats::default(); cpus]).map_err(|e| {
                Error::Io {
                    what: "per-CPU backend stats buffer".into(),
                    source: e,
                }
            })?;
        self.maps
            .backend_stats
            .set(id, zeros, 0)
            .map_err(|e| map_err("backend_stats_map", e))
    }

    fn zero_stats(&mut self, service_id: u32) -> Result<(), Error> {
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| Error::Io {
            what: what.to_string(),
            source: e,
        })?;
        let zeros = PerCpuValues::try_from(vec![abi::VipStats::default(); cpus]).map_err(|e| {
            Error::Io {
                what: "per-CPU stats buffer".into(),
                source: e,
            }
        })?;
        self.maps
            .stats
            .set(service_id, zeros, 0)
            .map_err(|e| map_err("stats_map", e))?;
        for reason in 0..abi::DROP_REASON_SLOTS {
            let zeros =
                PerCpuValues::try_from(vec![abi::DropStats::default(); cpus]).map_err(|e| {
                    Error::Io {
                        what: "per-CPU drop stats buffer".into(),
                        source: e,
                    }
                })?;
            self.maps
                .vip_drop_stats
                .set(service_id * abi::DROP_REASON_SLOTS + reason, zeros, 0)
                .map_err(|e| map_err("vip_drop_stats_map", e))?;
        }
        Ok(())
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

fn source_drained(desired: &BTreeMap<VipKey, VipSpec>) -> BTreeSet<BackendKey> {
    let mut serving = BTreeSet::new();
    let mut drained = BTreeSet::new();
    for spec in desired.values() {
        for b in &spec.backends {
            if spec.draining.contains(&b.key) {
                drained.insert(b.key);
            } else {
                serving.insert(b.key);
            }
        }
    }
    drained.difference(&serving).copied().collect()
}

/// The UDP VIPs (programmed now) that `desired` removes or takes a backend
/// from: their flows on the backends that leave must be re-balanced.
/// The service IDs of ClientIP VIPs with a timeout (programmed now) whose
/// client entries may name a backend they no longer have: VIPs removed,
/// losing a backend, or changing their timeout (which restarts it).
fn client_vips_losing_backends(
    current: &BTreeMap<VipKey, VipState>,
    desired: &BTreeMap<VipKey, VipSpec>,
) -> BTreeSet<u32> {
    current
        .iter()
        .filter(|(_, cur)| cur.spec.affinity_timeout.is_some())
        .filter(|(k, cur)| match desired.get(*k) {
            None => true,
            Some(want) => {
                want.affinity_timeout != cur.spec.affinity_timeout
                    || cur
                        .spec
                        .backends
                        .iter()
                        .any(|b| !want.backends.iter().any(|w| w.key == b.key))
            }
        })
        .map(|(_, cur)| cur.service_id)
        .collect()
}

fn udp_vips_losing_backends(
    current: &BTreeMap<VipKey, VipState>,
    desired: &BTreeMap<VipKey, VipSpec>,
) -> BTreeSet<VipKey> {
    current
        .iter()
        .filter(|(k, _)| k.proto == crate::proto::UDP)
        .filter(|(k, cur)| match desired.get(*k) {
            None => true,
            Some(want) => cur
                .spec
                .backends
                .iter()
                .any(|b| !want.backends.iter().any(|w| w.key == b.key)),
        })
        .map(|(k, _)| *k)
        .collect()
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

/// Whether service flags turn source ranges on.
fn source_ranges_set(flags: u8) -> bool {
    flags & abi::service_flags::SOURCE_RANGES != 0
}

/// The tag of a VIP's source-range keys in `bank`.
fn src_tag(service_id: u32, bank: u32) -> u32 {
    if bank == 1 {
        service_id | abi::SRC_RANGE_BANK
    } else {
        service_id
    }
}

fn src_key4(tag: u32, a: Ipv4Addr, len: u8) -> aya::maps::lpm_trie::Key<maps::SrcRangeData4> {
    aya::maps::lpm_trie::Key::new(
        32 + u32::from(len),
        maps::SrcRangeData4 {
            tag,
            addr: a.octets(),
        },
    )
}

fn src_key6(tag: u32, a: Ipv6Addr, len: u8) -> aya::maps::lpm_trie::Key<maps::SrcRangeData6> {
    aya::maps::lpm_trie::Key::new(
        32 + u32::from(len),
        maps::SrcRangeData6 {
            tag,
            addr: a.octets(),
        },
    )
}

/// The service flags of a programmed VIP whose source ranges (if any) are
/// in `bank`.
fn service_flags(spec: &VipSpec, bank: u32) -> u8 {
    let mut flags = abi::service_flags::ACTIVE;
    if spec.key.addr.is_ipv6() {
        flags |= abi::service_flags::IPV6;
    }
    if spec.affinity_client_ip {
        flags |= abi::service_flags::AFFINITY_CLIENT_IP;
    }
    if spec.syn_rate_limit.is_some() {
        flags |= abi::service_flags::SYN_RATE_LIMIT;
    }
    if spec.nat_fib {
        flags |= abi::service_flags::NAT_FIB;
    }
    if !spec.snat.is_empty() {
        flags |= abi::service_flags::SNAT;
    }
    if spec.source_ranges.is_some() {
        flags |= abi::service_flags::SOURCE_RANGES;
        if bank == 1 {
            flags |= abi::service_flags::SOURCE_BANK;
        }
    }
    flags
}

/// The fewest (value, bits) port prefixes that together cover exactly the
/// ports `first..=last`: each is the block of ports whose top `bits` bits
/// equal those of `value` (the other bits of `value` are zero). `0..=65535`
/// is the single prefix `(0, 0)`; an empty range (`first > last`) has none.
///
/// Greedy from the bottom: at each step take the largest block that starts
/// at the current port (aligned to its size) and does not pass `last`. That
/// is minimal (at most 30 prefixes for 16-bit ports).
pub fn port_range_prefixes(first: u16, last: u16) -> Vec<(u16, u8)> {
    let mut out = Vec::new();
    let mut start = u32::from(first);
    let end = u32::from(last) + 1; // exclusive
    while start < end {
        // Largest power of two the start is aligned to (0 is aligned to all).
        let mut size = if start == 0 {
            1 << 16
        } else {
            1u32 << start.trailing_zeros()
        };
        while size > end - start {
            size >>= 1;
        }
        out.push((start as u16, 16 - size.trailing_zeros() as u8));
        start += size;
    }
    out
}

/// The range `prefixes` cover when they are exactly the minimal cover of
/// one range (as [`port_range_prefixes`] writes it); they must be sorted.
fn range_of(prefixes: &[RangePrefix]) -> Option<(u16, u16)> {
    let first = prefixes.first()?.port;
    let last_prefix = prefixes.last()?;
    let end = u32::from(last_prefix.port) + (1u32 << (16 - last_prefix.bits));
    let last = u16::try_from(end - 1).ok()?;
    let want = port_range_prefixes(first, last);
    let have: Vec<(u16, u8)> = prefixes.iter().map(|p| (p.port, p.bits)).collect();
    (want == have).then_some((first, last))
}

/// One entry of a port-range trie: an address, a protocol, and the ports
/// whose top `bits` bits equal those of `port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct RangePrefix {
    addr: IpAddr,
    proto: u8,
    port: u16,
    bits: u8,
}

impl RangePrefix {
    /// The prefixes of a range VIP (none for an exact VIP).
    fn of(key: &VipKey) -> Vec<RangePrefix> {
        if key.is_exact() {
            return Vec::new();
        }
        port_range_prefixes(key.port, key.port_last)
            .into_iter()
            .map(|(port, bits)| RangePrefix {
                addr: key.addr,
                proto: key.proto,
                port,
                bits,
            })
            .collect()
    }

    /// Bits of the key before the port: protocol and address.
    fn head_bits(addr: IpAddr) -> u32 {
        8 + if addr.is_ipv4() { 32 } else { 128 }
    }

    fn key4(&self, a: Ipv4Addr) -> abi::VipRangeKey4 {
        abi::VipRangeKey4 {
            prefixlen: Self::head_bits(self.addr) + u32::from(self.bits),
            proto: self.proto,
            addr: a.octets(),
            port: self.port.to_be_bytes(),
            pad: 0,
        }
    }

    fn key6(&self, a: Ipv6Addr) -> abi::VipRangeKey6 {
        abi::VipRangeKey6 {
            prefixlen: Self::head_bits(self.addr) + u32::from(self.bits),
            proto: self.proto,
            addr: a.octets(),
            port: self.port.to_be_bytes(),
            pad: 0,
        }
    }

    /// A trie entry read back, and why it cannot be one the writer made.
    fn read(
        addr: IpAddr,
        proto: u8,
        prefixlen: u32,
        port: [u8; 2],
        pad: u8,
    ) -> (RangePrefix, Option<String>) {
        let head = Self::head_bits(addr);
        let bits = prefixlen.saturating_sub(head).min(16) as u8;
        let prefix = RangePrefix {
            addr,
            proto,
            port: u16::from_be_bytes(port),
            bits,
        };
        let mask = if bits == 0 {
            0
        } else {
            u16::MAX << (16 - bits)
        };
        let why = if prefixlen < head || prefixlen > head + 16 {
            Some(format!(
                "prefix length {prefixlen} does not cover a whole address"
            ))
        } else if prefix.port & !mask != 0 || pad != 0 {
            Some("port bits set beyond the prefix".to_string())
        } else {
            None
        };
        (prefix, why)
    }
}

impl fmt::Display for RangePrefix {
    /// `10.0.0.1 proto 6 port 8000/10`: the port prefix and its length.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} proto {} port {}/{}",
            self.addr, self.proto, self.port, self.bits
        )
    }
}

/// Slice-size targets for every desired VIP. Each VIP asks for Maglev's
/// preferred size (about 100 slots per backend, see rivora-maglev); when the
/// requests add up to more than half the table, all are scaled down in
/// proportion. Half, because a rebuilt slice is written into free slots
/// before the old one is released, so the table must have room for a second
/// copy of any slice.
fn slice_budget(desired: &BTreeMap<VipKey, VipSpec>, table_len: u32) -> BTreeMap<VipKey, u32> {
    let preferred: BTreeMap<VipKey, u32> = desired
        .iter()
        .filter(|(_, s)| !s.backends.is_empty() || s.reject_weight > 0)
        .map(|(k, s)| {
            let (keys, weights) = maglev_members(s);
            let mb = maglev_backends(&keys, &weights);
            (*k, maglev::preferred_slice_size_for(&mb))
        })
        .collect();
    let total: u64 = preferred.values().map(|&p| p as u64).sum();
    let half = (table_len / 2) as u64;
    if total <= half {
        return preferred;
    }
    preferred
        .into_iter()
        .map(|(k, p)| (k, ((p as u64 * half) / total).max(1) as u32))
        .collect()
}

/// The Maglev key of a VIP's refused share (`VipSpec::reject_weight`): a
/// fixed pseudo key, so the slice is a pure function of the backends, their
/// weights and the refused weight, and a restarted writer builds the same
/// slots. No backend's key can equal it: a backend's is its address and
/// port (`10.0.0.1:80`, `[2001:db8::1]:80`). Part of the slice layout:
/// changing it moves every refused slot (and some of the backends').
pub const REJECT_MAGLEV_KEY: &str = "rivora:reject";

/// The members of a VIP's Maglev slice, keys and weights in the same
/// order: its backends, then the refused share's pseudo key with its
/// weight when `reject_weight` > 0 (absent otherwise, so a VIP without one
/// has exactly the slice it had before refused shares existed).
pub fn maglev_members(spec: &VipSpec) -> (Vec<String>, Vec<u32>) {
    let mut keys: Vec<String> = spec.backends.iter().map(|b| b.key.to_string()).collect();
    let mut weights: Vec<u32> = spec.backends.iter().map(|b| b.weight).collect();
    if spec.reject_weight > 0 {
        keys.push(REJECT_MAGLEV_KEY.to_string());
        weights.push(spec.reject_weight);
    }
    (keys, weights)
}

/// [`maglev_members`] as the Maglev builder takes them.
fn maglev_backends<'a>(keys: &'a [String], weights: &[u32]) -> Vec<MaglevBackend<'a>> {
    keys.iter()
        .zip(weights)
        .map(|(k, &weight)| MaglevBackend {
            key: k.as_bytes(),
            weight,
        })
        .collect()
}

/// The backend IDs of a table of member indices ([`maglev_members`]
/// order): a backend's ID, or the pseudo-backend's for the refused share.
/// None when the table has a refused share and `reject_id` is None.
fn member_ids(
    spec: &VipSpec,
    table: &[u32],
    id_of: &BTreeMap<BackendKey, u32>,
    reject_id: Option<u32>,
) -> Option<Vec<u32>> {
    table
        .iter()
        .map(|&i| match spec.backends.get(i as usize) {
            Some(b) => Some(id_of[&b.key]),
            None => reject_id,
        })
        .collect()
}

/// Sizes, places and fills one VIP's slice (on the planning copy).
fn plan_slice(
    spec: &VipSpec,
    id_of: &BTreeMap<BackendKey, u32>,
    reject_id: Option<u32>,
    slices: &mut SliceAllocator,
    target: Option<u32>,
) -> Result<(Slice, Vec<u32>, f64), Error> {
    let (keys, weights) = maglev_members(spec);
    if keys.is_empty() {
        return Ok((Slice { offset: 0, size: 0 }, Vec::new(), 0.0));
    }
    let count = keys.len() as u32;
    let mb = maglev_backends(&keys, &weights);
    let want = target
        .unwrap_or_else(|| maglev::preferred_slice_size_for(&mb))
        .max(count);
    let size = maglev::fit_slice_size(want, count, slices.largest_free()).ok_or_else(|| {
        Error::Capacity(format!(
            "maglev_table: VIP {} needs at least {count} contiguous free slots, the largest free run is {} of {}; \
             raise --maglev-table-size",
            spec.name,
            slices.largest_free(),
            slices.len()
        ))
    })?;
    let slice = slices
        .allocate(size)
        .expect("fit_slice_size checked the largest free run");
    let table =
        maglev::build(&mb, size).map_err(|e| Error::Invalid(format!("VIP {}: {e}", spec.name)))?;
    let worst_imbalance = maglev::worst_imbalance(&table, &mb);
    let ids = member_ids(spec, &table, id_of, reject_id)
        .expect("apply allocates the refusing pseudo-backend before planning slices");
    Ok((slice, ids, worst_imbalance))
}

/// The worst imbalance of `spec`'s table at `size` slots.
fn imbalance_of(spec: &VipSpec, size: u32) -> f64 {
    let (keys, weights) = maglev_members(spec);
    if keys.is_empty() {
        return 0.0;
    }
    let mb = maglev_backends(&keys, &weights);
    maglev::build(&mb, size)
        .map(|t| maglev::worst_imbalance(&t, &mb))
        .unwrap_or(f64::NAN)
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
mod tests {
    use super::*;

    #[test]
    fn apply_report_summarizes_long_lists_and_alternate_shows_all() {
        let names: Vec<String> = (1..=4000).map(|i| format!("vip-{i}")).collect();
        let r = ApplyReport {
            added: names.clone(),
            removed: vec!["old".into()],
            backends_added: 28000,
            ..ApplyReport::default()
        };
        let line = r.to_string();
        assert_eq!(
            line,
            "added vip-1,vip-2,vip-3,vip-4,vip-5,vip-6,vip-7,vip-8,vip-9,vip-10 and 3,990 more; \
             removed old; 28000 new backend(s)"
        );
        let full = format!("{r:#}");
        assert!(full.starts_with(&format!("added {}; removed old", names.join(","))));
        // Exactly REPORT_NAMES_SHOWN names stay a plain list.
        assert_eq!(summarize_names(&names[..10], 10), names[..10].join(","));
        assert_eq!(
            summarize_names(&names[..11], 10),
            format!("{} and 1 more", names[..10].join(","))
        );
        assert_eq!(summarize_names(&[], 10), "");
    }

    #[test]
    fn thousands_separators() {
        for (n, s) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (3990, "3,990"),
            (65537, "65,537"),
            (1234567, "1,234,567"),
        ] {
            assert_eq!(thousands(n), s);
        }
    }

    /// An independent cover: walk the binary trie of 16-bit ports from the
    /// root, taking every node wholly inside the range and descending into
    /// nodes that straddle it. The nodes taken are the canonical (and
    /// minimal) prefix cover.
    fn trie_cover(first: u16, last: u16) -> Vec<(u16, u8)> {
        fn walk(lo: u32, bits: u8, first: u32, last: u32, out: &mut Vec<(u16, u8)>) {
            let hi = lo + (1u32 << (16 - bits)) - 1;
            if hi < first || lo > last {
                return;
            }
            if first <= lo && hi <= last {
                out.push((lo as u16, bits));
                return;
            }
            let half = 1u32 << (15 - bits);
            walk(lo, bits + 1, first, last, out);
            walk(lo + half, bits + 1, first, last, out);
        }
        let mut out = Vec::new();
        walk(0, 0, u32::from(first), u32::from(last), &mut out);
        out
    }

    /// Checks that `prefixes` are aligned, sorted, contiguous and cover
    /// exactly `first..=last`, and equal the trie walk's cover.
    #[track_caller]
    fn check_cover(first: u16, last: u16) {
        let prefixes = port_range_prefixes(first, last);
        let mut next = u32::from(first);
        for &(value, bits) in &prefixes {
            assert!(bits <= 16, "{first}-{last}: {prefixes:?}");
            let size = 1u32 << (16 - bits);
            assert_eq!(
                u32::from(value) % size,
                0,
                "{first}-{last}: unaligned {value}/{bits}"
            );
            assert_eq!(
                u32::from(value),
                next,
                "{first}-{last}: gap or overlap at {value}/{bits}"
            );
            next += size;
        }
        assert_eq!(next, u32::from(last) + 1, "{first}-{last}: {prefixes:?}");
        assert!(
            prefixes.len() <= 30,
            "{first}-{last}: {} prefixes",
            prefixes.len()
        );
        assert_eq!(
            prefixes,
            trie_cover(first, last),
            "{first}-{last}: not minimal"
        );
    }

    #[test]
    fn prefixes_of_known_ranges() {
        assert_eq!(port_range_prefixes(0, 65535), vec![(0, 0)]);
        assert_eq!(port_range_prefixes(80, 80), vec![(80, 16)]);
        assert_eq!(port_range_prefixes(8000, 8000), vec![(8000, 16)]);
        assert_eq!(port_range_prefixes(32768, 65535), vec![(32768, 1)]);
        assert_eq!(port_range_prefixes(1, 65535).len(), 16);
        assert_eq!(port_range_prefixes(1, 65534).len(), 30, "the worst case");
        assert_eq!(
            port_range_prefixes(8000, 8099),
            // 8000-8063, 8064-8095, 8096-8099.
            vec![(8000, 10), (8064, 11), (8096, 14)]
        );
        assert_eq!(port_range_prefixes(5, 4), vec![], "empty range");
    }

    #[test]
    fn prefixes_cover_small_ranges_exactly() {
        // Every range within the bottom and the top 300 ports, where the
        // 0 and 65535 edges are.
        for first in 0..300u16 {
            for last in first..300 {
                check_cover(first, last);
            }
        }
        for first in 65235..=65535u16 {
            for last in first..=65535 {
                check_cover(first, last);
            }
        }
    }

    #[test]
    fn prefixes_cover_ranges_across_the_port_space() {
        // A deterministic spread of wide ranges (64-bit LCG).
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 48) as u16
        };
        for _ in 0..20_000 {
            let (a, b) = (next(), next());
            check_cover(a.min(b), a.max(b));
        }
        // Every range starting or ending on a power-of-two boundary (+-1).
        for i in 0..16 {
            for d in [0i32, 1, -1] {
                let p = ((1i32 << i) + d).clamp(0, 65535) as u16;
                check_cover(0, p);
                check_cover(p, 65535);
                check_cover(p, p);
            }
        }
    }

    fn prefixes(ports: &[(u16, u8)]) -> Vec<RangePrefix> {
        ports
            .iter()
            .map(|&(port, bits)| RangePrefix {
                addr: "10.0.0.1".parse().unwrap(),
                proto: 6,
                port,
                bits,
            })
            .collect()
    }

    #[test]
    fn ranges_are_rebuilt_from_their_prefixes() {
        for (first, last) in [(8000, 8099), (0, 65535), (1, 65535), (100, 101), (7, 7)] {
            let p = prefixes(&port_range_prefixes(first, last));
            assert_eq!(range_of(&p), Some((first, last)));
        }
        // A gap, a split prefix (not minimal) and an overlap are no range.
        assert_eq!(range_of(&prefixes(&[(8000, 12), (8048, 12)])), None);
        assert_eq!(range_of(&prefixes(&[(0, 1), (32768, 2), (49152, 2)])), None);
        assert_eq!(range_of(&prefixes(&[(0, 1), (0, 2)])), None);
        assert_eq!(range_of(&[]), None);
    }

    #[test]
    fn trie_keys_read_back() {
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let p = RangePrefix {
            addr: v4,
            proto: 6,
            port: 8000,
            bits: 12,
        };
        let k = p.key4("10.0.0.1".parse().unwrap());
        assert_eq!(k.prefixlen, 8 + 32 + 12);
        assert_eq!(k.port, 8000u16.to_be_bytes());
        assert_eq!(k.addr, [10, 0, 0, 1]);
        assert_eq!(
            RangePrefix::read(v4, 6, k.prefixlen, k.port, k.pad),
            (p, None)
        );
        let any6 = RangePrefix {
            addr: v6,
            proto: 17,
            port: 0,
            bits: 0,
        };
        let k = any6.key6("2001:db8::1".parse().unwrap());
        assert_eq!(k.prefixlen, 8 + 128);
        assert_eq!(
            RangePrefix::read(v6, 17, k.prefixlen, k.port, k.pad),
            (any6, None)
        );
        // Port bits beyond the prefix, or a prefix shorter than the address.
        assert!(
            RangePrefix::read(v4, 6, 52, 8001u16.to_be_bytes(), 0)
                .1
                .is_some()
        );
        assert!(RangePrefix::read(v4, 6, 39, [0, 0], 0).1.is_some());
        assert!(RangePrefix::read(v4, 6, 57, [0, 0], 0).1.is_some());
        assert!(RangePrefix::read(v4, 6, 56, [0, 80], 1).1.is_some());
    }

    fn spec(name: &str, key: VipKey, backend_port: u16) -> VipSpec {
        let backend = BackendSpec::new("10.1.0.1".parse().unwrap(), backend_port);
        VipSpec::new(name, key, vec![backend])
    }

    fn addr() -> IpAddr {
        "10.0.0.1".parse().unwrap()
    }

    #[test]
    fn validate_rejects_overlapping_ranges() {
        let a = spec("a", VipKey::range(addr(), 8000, 8099, 6), 0);
        let b = spec("b", VipKey::range(addr(), 8099, 8199, 6), 0);
        let err = validate(&[a.clone(), b]).unwrap_err().to_string();
        assert!(
            err.contains("VIP b (10.0.0.1:8099-8199/tcp) overlaps VIP a (10.0.0.1:8000-8099/tcp)"),
            "{err}"
        );
        let all = spec("all", VipKey::any_port(addr(), 6), 0);
        assert!(validate(&[all.clone(), a.clone()]).is_err());
        // Fine: adjacent, another protocol or address, an exact VIP inside.
        let next = spec("next", VipKey::range(addr(), 8100, 8199, 6), 0);
        let udp = spec("udp", VipKey::range(addr(), 8000, 8099, 17), 0);
        let other = spec(
            "other",
            VipKey::range("10.0.0.2".parse().unwrap(), 8000, 8099, 6),
            0,
        );
        let exact = spec("exact", VipKey::exact(addr(), 8050, 6), 8080);
        assert_eq!(validate(&[a, next, udp, other, exact]).unwrap().len(), 5);
        let exact_in_any = spec("exact", VipKey::exact(addr(), 443, 6), 443);
        assert_eq!(validate(&[all, exact_in_any]).unwrap().len(), 2);
    }

    #[test]
    fn validate_checks_ports_and_limits() {
        let reversed = spec("r", VipKey::range(addr(), 9000, 8000, 6), 0);
        assert!(
            validate(&[reversed])
                .unwrap_err()
                .to_string()
                .contains("reversed")
        );
        let port0 = spec("p", VipKey::exact(addr(), 0, 6), 80);
        assert!(validate(&[port0]).is_err());
        // Port 0 backends keep the destination port: range VIPs only.
        let keep_exact = spec("k", VipKey::exact(addr(), 80, 6), 0);
        let err = validate(&[keep_exact]).unwrap_err().to_string();
        assert!(err.contains("only a port-range VIP"), "{err}");
        let mut limited = spec("l", VipKey::exact(addr(), 80, 6), 80);
        limited.syn_rate_limit = Some(RateLimit { rate: 0, burst: 1 });
        assert!(validate(&[limited.clone()]).is_err());
        limited.syn_rate_limit = Some(RateLimit { rate: 1, burst: 1 });
        assert!(validate(&[limited]).is_ok());
        // FIB forwarding of the rewritten packet: NAT only.
        let mut fib = spec("f", VipKey::exact(addr(), 80, 6), 80);
        fib.nat_fib = true;
        assert!(validate(std::slice::from_ref(&fib)).is_ok());
        fib.mode = Mode::Dsr;
        let err = validate(&[fib]).unwrap_err().to_string();
        assert!(err.contains("applies to mode nat, not dsr"), "{err}");
    }

    #[test]
    fn the_refused_share_is_a_slice_member_only_with_a_weight() {
        let mut v = spec("w", VipKey::exact(addr(), 80, 6), 80);
        let (keys, weights) = maglev_members(&v);
        assert_eq!((keys, weights), (vec!["10.1.0.1:80".to_string()], vec![1]));
        v.reject_weight = 3;
        let (keys, weights) = maglev_members(&v);
        assert_eq!(
            (keys, weights),
            (
                vec!["10.1.0.1:80".to_string(), REJECT_MAGLEV_KEY.to_string()],
                vec![1, 3]
            )
        );
        assert!(validate(std::slice::from_ref(&v)).is_ok());
        // A VIP of nothing but a refused share is valid (it refuses all).
        v.backends.clear();
        assert!(validate(std::slice::from_ref(&v)).is_ok());
        assert_eq!(maglev_members(&v).0, vec![REJECT_MAGLEV_KEY.to_string()]);
        // The pseudo-backend counts towards the slice's 65,535 members.
        v.backends = (0..u16::MAX as u32)
            .map(|i| BackendSpec::new(Ipv4Addr::from(0x0a00_0000 + i).into(), 80))
            .collect();
        v.reject_weight = 0;
        assert!(validate(std::slice::from_ref(&v)).is_ok());
        v.reject_weight = 1;
        let err = validate(&[v]).unwrap_err().to_string();
        assert!(err.contains("too many backends"), "{err}");
    }

    #[test]
    fn validate_bounds_the_range_tries() {
        // 1-65534 takes 30 prefixes: 547 such VIPs need 16,410 > 16,384.
        let many: Vec<VipSpec> = (0..547u32)
            .map(|i| {
                let a = IpAddr::from([10, 0, (i / 250) as u8, (i % 250 + 1) as u8]);
                spec(&format!("v{i}"), VipKey::range(a, 1, 65534, 6), 0)
            })
            .collect();
        let err = validate(&many).unwrap_err();
        assert!(matches!(err, Error::Capacity(_)), "{err}");
        assert!(
            err.to_string()
                .contains("vip_range_map: port-range VIPs need 16410 prefixes"),
            "{err}"
        );
        assert!(validate(&many[..546]).is_ok());
    }

    #[test]
    fn flags_follow_the_spec() {
        let mut s = spec("s", VipKey::exact(addr(), 80, 6), 80);
        assert_eq!(service_flags(&s, 1), abi::service_flags::ACTIVE);
        s.affinity_client_ip = true;
        s.syn_rate_limit = Some(RateLimit { rate: 5, burst: 9 });
        s.key.addr = "2001:db8::1".parse().unwrap();
        assert_eq!(
            service_flags(&s, 0),
            abi::service_flags::ACTIVE
                | abi::service_flags::IPV6
                | abi::service_flags::AFFINITY_CLIENT_IP
                | abi::service_flags::SYN_RATE_LIMIT
        );
    }
}
