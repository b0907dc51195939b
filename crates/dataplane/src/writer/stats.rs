//! The per-VIP and per-backend counters (stats maps), the table usage and drop counters the
//! daemon exports, and zeroing a service's or backend's counters when its ID is reused.

use super::*;

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

impl Dataplane {
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

    pub(super) fn zero_backend_stats(&mut self, id: u32) -> Result<(), Error> {
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

    pub(super) fn zero_stats(&mut self, service_id: u32) -> Result<(), Error> {
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
