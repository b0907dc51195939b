//! Backends: their address entries (backend_map), health (backend_health_map: drained, probe
//! down, the refusing pseudo-backend) and the grace before a retired backend's ID is reused.

use super::*;

impl Dataplane {
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

    pub(super) fn release_backend(&mut self, key: BackendKey) -> Result<(), Error> {
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

    pub(super) fn backend_mut(&mut self, key: &BackendKey) -> Result<&mut BackendState, Error> {
        self.backends
            .get_mut(key)
            .ok_or_else(|| Error::Invalid(format!("no backend {key}")))
    }

    /// Writes a backend's effective state and its reasons to the health map
    /// when they changed; returns whether the state changed.
    pub(super) fn sync_health(&mut self, key: &BackendKey) -> Result<bool, Error> {
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

    pub(super) fn write_backend(
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

    pub(super) fn clear_backend(&mut self, key: BackendKey, id: u32) -> Result<(), Error> {
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
    pub(super) fn write_reject_backend(&mut self, id: u32) -> Result<(), Error> {
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

    pub(super) fn set_health(&mut self, id: u32, state: u32) -> Result<(), Error> {
        self.maps
            .backend_health
            .set(id, abi::BackendHealth { state, flags: 0 }, 0)
            .map_err(|e| map_err("backend_health_map", e))
    }
}
