//! Keeping the classifier targets' next hops resolved.
//!
//! The classifier forwards to a target's address as next hop with
//! `bpf_fib_lookup`, and XDP cannot resolve a neighbour: without a valid
//! entry the packet is dropped (`no_neighbour`). No MAC is configured for
//! a target, so rivorad asks the kernel to keep a *managed* neighbour
//! entry for the next hop of each (rivora_dataplane::neighbours): resolved
//! before the first packet and kept reachable by the kernel. Entries are
//! re-ensured on every apply and every [`REENSURE`] (the kernel's
//! emergency garbage collection may drop one), and released when no
//! target uses them any more.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use rivora_dataplane::classifier::ClassifierSpec;
use rivora_dataplane::neighbours::{self, NextHop};
use tracing::{info, warn};

/// How often every entry is ensured again between applies.
pub const REENSURE: Duration = Duration::from_secs(10);

/// The next hops rivorad keeps managed, by the target address that needs
/// them, and the problems last seen (logged once per change).
#[derive(Debug, Default)]
pub struct TargetNeighbours {
    hops: BTreeMap<IpAddr, NextHop>,
    problems: BTreeMap<IpAddr, String>,
    last: Option<Instant>,
}

fn targets(spec: &ClassifierSpec) -> BTreeSet<IpAddr> {
    spec.groups
        .iter()
        .flat_map(|g| g.targets.iter())
        .flat_map(|t| [t.v4.map(IpAddr::V4), t.v6.map(IpAddr::V6)])
        .flatten()
        .collect()
}

impl TargetNeighbours {
    /// Ensures a managed entry for the next hop of every target of `spec`
    /// and releases the ones no target needs any more.
    pub fn sync(&mut self, spec: &ClassifierSpec) {
        let want = targets(spec);
        let mut hops = BTreeMap::new();
        for addr in &want {
            let result = neighbours::next_hop(*addr).and_then(|hop| {
                neighbours::ensure_managed(&hop)?;
                Ok(hop)
            });
            match result {
                Ok(hop) => {
                    if self.problems.remove(addr).is_some() || !self.hops.contains_key(addr) {
                        info!(target = %addr, via = %hop.via, ifindex = hop.ifindex, "target's next hop kept resolved (managed neighbour)");
                    }
                    hops.insert(*addr, hop);
                }
                Err(e) => {
                    let e = e.to_string();
                    if self.problems.get(addr) != Some(&e) {
                        warn!(target = %addr, "cannot keep the target's next hop resolved: {e}; its packets are dropped as no_route or no_neighbour");
                    }
                    self.problems.insert(*addr, e);
                }
            }
        }
        self.problems.retain(|a, _| want.contains(a));
        let used: BTreeSet<NextHop> = hops.values().copied().collect();
        for (addr, hop) in &self.hops {
            if !used.contains(hop) {
                info!(target = %addr, via = %hop.via, "no target uses this next hop any more: managed neighbour released");
                neighbours::release(hop);
            }
        }
        self.hops = hops;
        self.last = Some(Instant::now());
    }

    /// [`Self::sync`] again when [`REENSURE`] has passed since the last one.
    pub fn maintain(&mut self, spec: &ClassifierSpec) {
        if self.last.is_some_and(|t| t.elapsed() >= REENSURE) {
            self.sync(spec);
        }
    }
}
