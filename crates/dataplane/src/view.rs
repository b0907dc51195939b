//! A read-only view of a running datapath, from its pins: what a new flow to a VIP can reach
//! right now, read from the same maps, in the same order, as xdp_ingress's new-flow pick.
//!
//! Why: a control plane's own bookkeeping says what it meant to program; an operator (and a
//! benchmark timing "change to forwarding") needs what the kernel will actually do. The view
//! opens another process's pinned maps without loading anything, so it can watch a live
//! rivorad from outside while rivorad keeps writing.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use aya::maps::{Array, HashMap, Map, MapData};
use rivora_abi as abi;

use crate::Error;
use crate::maps::MaglevTable;
use crate::model::VipKey;

/// The maps a new flow's backend pick reads, opened from a pin directory.
pub struct PinnedView {
    vip_map: HashMap<MapData, abi::VipKey4, abi::VipValue>,
    vip_map6: HashMap<MapData, abi::VipKey6, abi::VipValue>,
    service_config: Array<MapData, abi::Service>,
    maglev: MaglevTable,
    backend_map: Array<MapData, abi::Backend4>,
    backend_map6: Array<MapData, abi::Backend6>,
    backend_health: Array<MapData, abi::BackendHealth>,
}

fn pinned(pin_dir: &Path, name: &'static str) -> Result<MapData, Error> {
    MapData::from_pin(pin_dir.join(name)).map_err(|e| Error::Map {
        map: name,
        source: e,
    })
}

fn typed<T>(pin_dir: &Path, name: &'static str, wrap: fn(MapData) -> Map) -> Result<T, Error>
where
    T: TryFrom<Map, Error = aya::maps::MapError>,
{
    wrap(pinned(pin_dir, name)?)
        .try_into()
        .map_err(|e| Error::Map {
            map: name,
            source: e,
        })
}

impl PinnedView {
    /// Opens the maps pinned in `pin_dir` (rivorad's `--pin-dir`).
    pub fn open(pin_dir: &Path) -> Result<PinnedView, Error> {
        Ok(PinnedView {
            vip_map: typed(pin_dir, "vip_map", Map::HashMap)?,
            vip_map6: typed(pin_dir, "vip_map6", Map::HashMap)?,
            service_config: typed(pin_dir, "service_config_map", Map::Array)?,
            maglev: MaglevTable::map(pinned(pin_dir, "maglev_table")?)?,
            backend_map: typed(pin_dir, "backend_map", Map::Array)?,
            backend_map6: typed(pin_dir, "backend_map6", Map::Array)?,
            backend_health: typed(pin_dir, "backend_health_map", Map::Array)?,
        })
    }

    /// The service ID of exact VIP `key`, None when it is not in vip_map/vip_map6.
    fn service_id(&self, key: &VipKey) -> Result<Option<u32>, Error> {
        let got = match key.addr {
            IpAddr::V4(a) => self
                .vip_map
                .get(&abi::VipKey4::new(a, key.port, key.proto), 0),
            IpAddr::V6(a) => self
                .vip_map6
                .get(&abi::VipKey6::new(a, key.port, key.proto), 0),
        };
        match got {
            Ok(v) => Ok(Some(v.service_id)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(Error::Map {
                map: "vip_map",
                source: e,
            }),
        }
    }

    /// The backends a new flow to exact VIP `key` can be sent to now: the distinct backend IDs
    /// of the VIP's Maglev slice whose health state is healthy, as addresses (the refusing
    /// pseudo-backend left out). None when the VIP is not in the maps; empty when it is but a
    /// new flow finds no backend (no backends, or an inactive service).
    pub fn new_flow_backends(&self, key: &VipKey) -> Result<Option<BTreeSet<SocketAddr>>, Error> {
        let Some(id) = self.service_id(key)? else {
            return Ok(None);
        };
        let svc = self.service_config.get(&id, 0).map_err(|e| Error::Map {
            map: "service_config_map",
            source: e,
        })?;
        if svc.backend_count == 0
            || svc.maglev_size == 0
            || svc.maglev_offset as u64 + svc.maglev_size as u64 > self.maglev.len() as u64
        {
            return Ok(Some(BTreeSet::new()));
        }
        let ids: BTreeSet<u32> = self
            .maglev
            .read(svc.maglev_offset, svc.maglev_size)
            .into_iter()
            .collect();
        let mut out = BTreeSet::new();
        for bid in ids {
            if bid >= abi::MAX_BACKENDS {
                continue;
            }
            let health = self.backend_health.get(&bid, 0).map_err(|e| Error::Map {
                map: "backend_health_map",
                source: e,
            })?;
            if health.state != abi::backend_state::HEALTHY
                || health.flags & abi::backend_flags::REJECT != 0
            {
                continue;
            }
            out.insert(self.backend_addr(key.addr.is_ipv4(), bid & 0xffff)?);
        }
        Ok(Some(out))
    }

    fn backend_addr(&self, v4: bool, bid: u32) -> Result<SocketAddr, Error> {
        let map_err = |map| move |e| Error::Map { map, source: e };
        Ok(if v4 {
            let b = self
                .backend_map
                .get(&bid, 0)
                .map_err(map_err("backend_map"))?;
            SocketAddr::new(
                IpAddr::V4(abi::addr4_from_be(b.addr)),
                abi::port_from_be(b.port),
            )
        } else {
            let b = self
                .backend_map6
                .get(&bid, 0)
                .map_err(map_err("backend_map6"))?;
            SocketAddr::new(IpAddr::V6(b.addr.into()), abi::port_from_be(b.port))
        })
    }
}
