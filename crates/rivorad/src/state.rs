//! The daemon's state behind one lock (the dataplane's bookkeeping, the
//! prober, the announcer and the daemon's status), shared by the run loop
//! and the local API, and what the API reads of it. (Where the desired
//! state comes from is `source`.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rivora_abi as abi;
use rivora_api::server::ApiFailure;
use rivora_api::{
    ApiSource, BackendCounters, BackendInfo, BackendStats, ClassifierStatus, ClsCounters,
    ClsGroupInfo, ClsRuleInfo, ClsTargetInfo, ClsVipInfo, DropCount, Stats, Status, TableUsage,
    VipBackend, VipInfo, VipStats,
};
use rivora_dataplane::model::RateLimit;
use rivora_dataplane::{BackendKey, Dataplane, Mode, proto};

/// Everything behind the lock.
pub struct Shared {
    pub dataplane: Dataplane,
    /// Active health checks of the backends that have one.
    pub prober: rivora_health::Prober<BackendKey>,
    /// Daemon facts that are not in the maps; the counts are filled in on
    /// every read.
    pub status: Status,
    /// The BGP speaker and the ARP/NDP responder.
    pub announcer: crate::announce::Announcer,
    /// The source's own state for the status and metrics (Kubernetes:
    /// watches, initial sync, failing Services); None for the file.
    pub source_status: Option<crate::source::StatusReader>,
    /// What the source in force says about VIPs and backends beyond the
    /// maps (a Service, a pod, a node), for the API.
    pub notes: Notes,
    /// The classifier targets' next hops, kept resolved.
    pub neighbours: crate::neighbours::TargetNeighbours,
}

/// What the API shows about a VIP beyond the maps, kept only for the VIPs
/// whose source says more than the file does (Kubernetes: the Service, each
/// backend's pod and node, terminating). Not a copy of the desired state:
/// that held every VIP's spec and backend list a second time, 5.5 MiB of
/// the daemon's peak with 4,096 VIPs (rivora-bench part 4).
#[derive(Debug, Default)]
pub struct Notes {
    by_vip: BTreeMap<rivora_dataplane::VipKey, VipNote>,
}

#[derive(Debug)]
struct VipNote {
    origin: String,
    backends: BTreeMap<BackendKey, BackendNote>,
}

#[derive(Debug)]
struct BackendNote {
    target: Option<String>,
    node: Option<String>,
    terminating: bool,
}

impl Notes {
    /// The notes of `desired`: nothing for a VIP of the file.
    pub fn of(desired: &rivora_desired::DesiredState) -> Notes {
        let by_vip = desired
            .vips
            .iter()
            .filter(|v| v.origin != rivora_desired::Origin::File)
            .map(|v| {
                let backends = v
                    .backends
                    .iter()
                    .map(|b| {
                        (
                            b.key,
                            BackendNote {
                                target: b.target.clone(),
                                node: b.node.clone(),
                                terminating: b.terminating,
                            },
                        )
                    })
                    .collect();
                (
                    v.spec.key,
                    VipNote {
                        origin: v.origin.to_string(),
                        backends,
                    },
                )
            })
            .collect();
        Notes { by_vip }
    }
}

/// Every backend's counters in the API's form, read at one instant (the
/// kernel's clock is read once for all of them).
pub fn backend_counters(dp: &Dataplane) -> Result<BTreeMap<BackendKey, BackendCounters>, String> {
    let clock = rivora_dataplane::jiffies::Clock::read();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    Ok(dp
        .backend_counters()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|c| {
            let age_ms = clock
                .as_ref()
                .and_then(|k| c.last_packet_age(k))
                .map(|a| a.as_millis() as u64);
            let counters = BackendCounters {
                packets: c.packets,
                bytes: c.bytes,
                new_flows: c.new_flows,
                last_packet_age_ms: age_ms,
                last_packet_unix_ms: age_ms.map(|a| now_ms.saturating_sub(a)),
            };
            (c.key, counters)
        })
        .collect())
}

/// Each item's text form (`Display`).
fn strings<'a, T: ToString + 'a>(items: impl IntoIterator<Item = &'a T>) -> Vec<String> {
    items.into_iter().map(ToString::to_string).collect()
}

/// One classifier counters slot, summed over CPUs.
fn cls_sum(per_cpu: &[abi::ClsStats]) -> ClsCounters {
    per_cpu.iter().fold(ClsCounters::default(), |mut c, s| {
        c.packets += s.packets;
        c.bytes += s.bytes;
        c.no_target += s.no_target;
        c.other += s.other;
        c
    })
}

/// The classifier as the API shows it: what the dataplane's classifier
/// programmed (groups, rules, VIPs by their IDs) with the per-CPU counters
/// of `cls_vip_stats_map`, `cls_rule_stats_map`, `cls_group_stats_map` and
/// `cls_event_map` summed. One syscall per object: call it at scrape or CLI
/// rate.
pub fn classifier_status(dp: &Dataplane) -> Result<ClassifierStatus, String> {
    let cls = dp.classifier();
    let maps = &dp.maps().cls;
    let ready = cls.applied().ready_vips();
    let rule_names: BTreeMap<u32, &str> = cls.rules().map(|(name, id, _)| (id, name)).collect();
    let vips = cls
        .vips()
        .map(|(addr, stats_id, rules)| {
            let per_cpu = maps
                .vip_stats
                .get(&stats_id, 0)
                .map_err(|e| format!("cls_vip_stats_map[{stats_id}] ({addr}): {e}"))?;
            Ok(ClsVipInfo {
                address: addr.to_string(),
                stats_id,
                rules: rules
                    .iter()
                    .map(|id| {
                        rule_names
                            .get(id)
                            .map_or_else(|| format!("#{id}"), |n| n.to_string())
                    })
                    .collect(),
                ready: ready.contains(&addr),
                counters: cls_sum(&per_cpu),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let rules = cls
        .rules()
        .map(|(name, rule_id, r)| {
            let per_cpu = maps
                .rule_stats
                .get(&rule_id, 0)
                .map_err(|e| format!("cls_rule_stats_map[{rule_id}] ({name}): {e}"))?;
            Ok(ClsRuleInfo {
                name: name.to_string(),
                rule_id,
                priority: r.priority,
                group: r.group.clone(),
                vips: strings(&r.vips),
                sources: strings(&r.sources),
                source_ports: strings(&r.source_ports),
                destination_ports: strings(&r.destination_ports),
                protocols: strings(&r.protocols),
                byte_matches: strings(&r.byte_matches),
                counters: cls_sum(&per_cpu),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let groups = cls
        .groups()
        .map(|(name, group_id, g, table_size)| {
            let per_cpu = maps
                .group_stats
                .get(&group_id, 0)
                .map_err(|e| format!("cls_group_stats_map[{group_id}] ({name}): {e}"))?;
            let mut targets: Vec<ClsTargetInfo> = g
                .targets
                .iter()
                .map(|t| ClsTargetInfo {
                    slot: t.slot,
                    v4: t.v4.map(|a| a.to_string()),
                    v6: t.v6.map(|a| a.to_string()),
                })
                .collect();
            targets.sort_by_key(|t| t.slot);
            Ok(ClsGroupInfo {
                name: name.to_string(),
                group_id,
                max_endpoints: g.max_endpoints,
                table_size,
                sctp_hash: g.sctp_hash.as_str().to_string(),
                targets,
                slots_v4: g.slots(false).len() as u32,
                slots_v6: g.slots(true).len() as u32,
                counters: cls_sum(&per_cpu),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let events = abi::cls_event::NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let per_cpu = maps
                .events
                .get(&(i as u32), 0)
                .map_err(|e| format!("cls_event_map[{i}] ({name}): {e}"))?;
            Ok((name.to_string(), per_cpu.iter().sum()))
        })
        .collect::<Result<BTreeMap<String, u64>, String>>()?;
    Ok(ClassifierStatus {
        vips,
        rules,
        groups,
        events,
        unclaimed_vips: cls.unclaimed().iter().map(|a| a.to_string()).collect(),
    })
}

/// The API's view of [`Shared`].
pub struct StateSource(pub Arc<Mutex<Shared>>);

fn unix_secs(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub fn state_name(state: u32) -> &'static str {
    match state {
        abi::backend_state::HEALTHY => "healthy",
        abi::backend_state::DRAINING => "draining",
        abi::backend_state::DOWN => "down",
        _ => "unknown",
    }
}

/// The SYN limit in force for a VIP: its own, else the node-wide one (TCP
/// VIPs only: SYNs are TCP).
pub fn syn_rate_limit(proto: u8, own: Option<RateLimit>, node: Option<RateLimit>) -> String {
    match (own, node) {
        (Some(l), _) => l.to_string(),
        (None, Some(l)) if proto == proto::TCP => format!("{l} (node-wide)"),
        _ => "none".to_string(),
    }
}

/// The protocol as the API writes it.
pub fn proto_name(p: u8) -> &'static str {
    match p {
        proto::TCP => "tcp",
        proto::UDP => "udp",
        _ => "other",
    }
}

impl ApiSource for StateSource {
    fn status(&self) -> Status {
        let s = self.0.lock().expect("state lock");
        Status {
            vip_count: s.dataplane.vips().count() as u32,
            backend_count: s.dataplane.backends().count() as u32,
            maglev_table_size: s.dataplane.maglev_table_len(),
            maglev_slots_used: s.dataplane.vips().map(|v| u64::from(v.slice.size)).sum(),
            kubernetes: s.source_status.as_ref().map(|read| read(&s.dataplane)),
            ..s.status.clone()
        }
    }

    fn vips(&self) -> Vec<VipInfo> {
        let s = self.0.lock().expect("state lock");
        let dp: &Dataplane = &s.dataplane;
        let backends: BTreeMap<_, _> = dp.backends().map(|b| (b.key, b)).collect();
        let node_limit = dp.node_syn_rate_limit();
        dp.vips()
            .map(|v| {
                let want = s.notes.by_vip.get(&v.spec.key).filter(|_| !v.adopted);
                VipInfo {
                    name: v.spec.name.clone(),
                    address: v.spec.key.addr.to_string(),
                    port: v.spec.key.port,
                    port_last: v.spec.key.port_last,
                    session_affinity: if v.spec.affinity_client_ip {
                        "clientIP"
                    } else {
                        "none"
                    }
                    .to_string(),
                    nat_forwarding: match (v.spec.mode, v.spec.nat_fib) {
                        (Mode::Nat, true) => "fib",
                        (Mode::Nat, false) => "kernel",
                        _ => "",
                    }
                    .to_string(),
                    syn_rate_limit: syn_rate_limit(
                        v.spec.key.proto,
                        v.spec.syn_rate_limit,
                        node_limit,
                    ),
                    origin: if v.adopted {
                        Some("adopted, unclaimed".to_string())
                    } else {
                        want.map(|n| n.origin.clone())
                    },
                    protocol: proto_name(v.spec.key.proto).to_string(),
                    mode: v.spec.mode.as_str().to_string(),
                    service_id: v.service_id,
                    maglev_offset: v.slice.offset,
                    maglev_size: v.slice.size,
                    worst_imbalance_pct: v.worst_imbalance * 100.0,
                    reject_weight: v.spec.reject_weight,
                    backends: v
                        .spec
                        .backends
                        .iter()
                        .map(|b| {
                            let st = backends.get(&b.key);
                            let meta = want.and_then(|n| n.backends.get(&b.key));
                            VipBackend {
                                target: meta.and_then(|m| m.target.clone()),
                                node: meta.and_then(|m| m.node.clone()),
                                terminating: meta.is_some_and(|m| m.terminating),
                                snat: v.spec.snat.contains(&b.key),
                                address: b.key.addr.to_string(),
                                port: b.key.port,
                                weight: b.weight,
                                backend_id: st.map(|s| s.id).unwrap_or(0),
                                state: st
                                    .map(|s| state_name(s.state))
                                    .unwrap_or("unknown")
                                    .to_string(),
                            }
                        })
                        .collect(),
                }
            })
            .collect()
    }

    fn backends(&self) -> Vec<BackendInfo> {
        let s = self.0.lock().expect("state lock");
        let names: BTreeMap<_, _> = s
            .dataplane
            .vips()
            .map(|v| (v.spec.key, v.spec.name.clone()))
            .collect();
        let probes: BTreeMap<BackendKey, rivora_health::ProbeStatus> =
            s.prober.snapshot().into_iter().collect();
        let mut counters = backend_counters(&s.dataplane).unwrap_or_default();
        let mut out: Vec<BackendInfo> = s
            .dataplane
            .backends()
            .map(|b| BackendInfo {
                backend_id: b.id,
                address: b.key.addr.to_string(),
                port: b.key.port,
                state: state_name(b.state).to_string(),
                vips: b
                    .vips
                    .iter()
                    .filter_map(|k| names.get(k).cloned())
                    .collect(),
                drained: b.drained,
                retiring: b.retired_at.is_some(),
                probe: probes.get(&b.key).map(crate::health::probe_info),
                last_change_unix: b.last_change.map(unix_secs).unwrap_or(0),
                counters: counters.remove(&b.key),
            })
            .collect();
        out.sort_by_key(|b| b.backend_id);
        out
    }

    fn stats(&self) -> Result<Stats, String> {
        let s = self.0.lock().expect("state lock");
        let vips = s
            .dataplane
            .vip_counters()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|c| VipStats {
                name: c.name,
                service_id: c.service_id,
                packets: c.stats.packets,
                bytes: c.stats.bytes,
                new_flows: c.stats.new_flows,
                drops: c.stats.drops,
                reply_packets: c.stats.reply_packets,
                reply_bytes: c.stats.reply_bytes,
            })
            .collect();
        let drops = s
            .dataplane
            .drop_counters()
            .map_err(|e| e.to_string())?
            .into_iter()
            .enumerate()
            .map(|(i, packets)| DropCount {
                reason: abi::drop_reason::NAMES[i].to_string(),
                packets,
            })
            .collect();
        let tables = s
            .dataplane
            .table_usage()
            .into_iter()
            .map(|(name, entries, capacity)| TableUsage {
                name: name.to_string(),
                entries,
                capacity,
            })
            .collect();
        let at_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let counters = backend_counters(&s.dataplane)?;
        let mut backends: Vec<BackendStats> = s
            .dataplane
            .backends()
            .filter_map(|b| {
                Some(BackendStats {
                    backend_id: b.id,
                    address: b.key.addr.to_string(),
                    port: b.key.port,
                    state: state_name(b.state).to_string(),
                    counters: counters.get(&b.key)?.clone(),
                })
            })
            .collect();
        backends.sort_by_key(|b| b.backend_id);
        let flow_guard = s.dataplane.flow_guard().ok().map(|g| {
            let hz = rivora_dataplane::jiffies::hz().unwrap_or(0);
            rivora_api::FlowGuard {
                rate_per_s: g.rate,
                per_cpu_limit: g.limit,
                window_ms: if hz == 0 {
                    0
                } else {
                    u64::from(g.window_jiffies) * 1000 / u64::from(hz)
                },
            }
        });
        let f = s.dataplane.flow_filter_status();
        let flow_filter = Some(rivora_api::FlowFilter {
            bits: f.bits,
            bits_set: f.ones,
            exact: f.exact,
            rebuilds: f.rebuilds,
        });
        let src = s.dataplane.snat_source();
        let snat = s
            .dataplane
            .snat_counters()
            .ok()
            .map(|c| rivora_api::SnatStats {
                source_v4: src.v4.map(|a| a.to_string()),
                source_v6: src.v6.map(|a| a.to_string()),
                ports: format!("{}-{}", src.ports.start(), src.ports.end()),
                counters: rivora_abi::snat_counter::NAMES
                    .iter()
                    .zip(c)
                    .map(|(n, v)| (n.to_string(), v))
                    .collect(),
            });
        Ok(Stats {
            vips,
            drops,
            at_unix_ms,
            tables,
            backends,
            flow_guard,
            flow_filter,
            snat,
        })
    }

    fn bgp(&self) -> Result<rivora_api::BgpStatus, ApiFailure> {
        Ok(self.0.lock().expect("state lock").announcer.bgp_status())
    }

    fn speaker(&self) -> Result<rivora_api::SpeakerStatus, ApiFailure> {
        Ok(self
            .0
            .lock()
            .expect("state lock")
            .announcer
            .speaker_status())
    }

    fn classifier(&self) -> Result<ClassifierStatus, ApiFailure> {
        let s = self.0.lock().expect("state lock");
        classifier_status(&s.dataplane).map_err(ApiFailure::Internal)
    }

    fn set_drain(&self, backend: &str, drain: bool) -> Result<Vec<BackendInfo>, ApiFailure> {
        let keys = {
            let mut s = self.0.lock().expect("state lock");
            let keys = select_backends(&s.dataplane, backend)?;
            for key in &keys {
                let changed = s
                    .dataplane
                    .set_drained(key, drain)
                    .map_err(|e| ApiFailure::Internal(e.to_string()))?;
                tracing::info!(
                    backend = %key,
                    changed,
                    "{} by the operator",
                    if drain { "drained" } else { "undrained" }
                );
            }
            // A drain can take a VIP's last healthy backend: re-announce.
            let Shared {
                dataplane,
                prober,
                announcer,
                ..
            } = &mut *s;
            announcer.refresh(dataplane, prober);
            keys
        };
        let wanted: std::collections::BTreeSet<String> =
            keys.iter().map(|k| k.to_string()).collect();
        Ok(self
            .backends()
            .into_iter()
            .filter(|b| {
                let addr: std::net::IpAddr = b.address.parse().expect("we print valid addresses");
                wanted.contains(&BackendKey { addr, port: b.port }.to_string())
            })
            .collect())
    }
}

/// Resolves an operator's backend selector (a backend ID, `ADDR:PORT`,
/// `[V6]:PORT` or a bare address meaning every backend on it) with the
/// API's shared rules, [`rivora_api::selector::resolve`].
fn select_backends(dp: &Dataplane, selector: &str) -> Result<Vec<BackendKey>, ApiFailure> {
    let all: Vec<rivora_api::selector::BackendRef> = dp
        .backends()
        .map(|b| rivora_api::selector::BackendRef {
            id: b.id,
            addr: b.key.addr,
            port: b.key.port,
        })
        .collect();
    Ok(rivora_api::selector::resolve(selector, &all)?
        .into_iter()
        .map(|b| BackendKey {
            addr: b.addr,
            port: b.port,
        })
        .collect())
}

/// The programs as the API shows them: xdp_ingress, and tc_nat when it is
/// attached.
pub fn programs(a: &rivora_dataplane::Attachment) -> Vec<rivora_api::ProgramInfo> {
    let mut v = vec![rivora_api::ProgramInfo {
        name: "xdp_ingress".into(),
        attach: format!("xdp {} on {}", a.xdp_mode.as_str(), a.interface),
        program_id: a.xdp_program_id,
        link_id: Some(a.xdp_link_id),
        link_pinned: a.persistent,
        loaded_at_unix: a.xdp_loaded_at_unix,
    }];
    if a.egress {
        v.push(rivora_api::ProgramInfo {
            name: "tc_nat".into(),
            attach: format!("tcx egress on {}", a.interface),
            program_id: a.tc_program_id,
            link_id: Some(a.tc_link_id),
            link_pinned: a.persistent,
            loaded_at_unix: a.tc_loaded_at_unix,
        });
    }
    v
}
