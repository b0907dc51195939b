//! The reverse translation tables: nat_endpoint_map(6) (endpoint -> VIP, so replies are
//! rewritten back) and nat_backend_filter_map, kept equal to what the programmed VIPs demand, and
//! read back on adoption.

use super::*;

/// An endpoint entry read back from either family's map.
pub(super) enum EpValue {
    V4(abi::NatEpValue4),
    V6(abi::NatEpValue6),
}

impl Dataplane {
    /// Brings nat_endpoint_map(6) to what the programmed VIPs ask
    /// (endpoints.rs `plan`): entries written or removed one by one, each
    /// change safe on its own (a missing entry means per-flow entries).
    pub(super) fn sync_endpoints(&mut self) -> Result<(), Error> {
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
    pub(super) fn sync_backend_filter(&mut self, coming: &[BackendKey]) -> Result<(), Error> {
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

    pub(super) fn write_endpoint(
        &mut self,
        ep: Endpoint,
        entry: EndpointEntry,
    ) -> Result<(), Error> {
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

    pub(super) fn remove_endpoint(&mut self, ep: Endpoint) -> Result<(), Error> {
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
    pub(super) fn adopt_endpoints(&mut self) -> Result<(), Error> {
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
}
