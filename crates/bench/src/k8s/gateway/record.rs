//! What 5e times, recorded as it happens: watches on the Gateways and routes (when each
//! Gateway first had its address and `Programmed=True`, when each route was first `Accepted`
//! by the run's controller), and a thread polling the node agent's pins (when each VIP's
//! new-flow pick first equalled its backend's endpoints).
//!
//! Why watches and a poller rather than reads at the end: the figures are per Gateway, from its
//! creation to each event, so every first occurrence needs its own timestamp.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use rivora_dataplane::view::PinnedView;
use serde_json::Value;

use super::objects::{BACKENDS, Listener, WARM_UP, expected};

/// The warm-up Gateway's index in [`Times`].
pub const WARM: usize = usize::MAX;

/// The backend Gateway `g`'s routes use.
pub fn backend_of(g: usize) -> usize {
    g % BACKENDS
}

/// Gateway `name`'s index: `gw-NNN` is NNN, the warm-up is [`WARM`].
fn index_of(name: &str) -> Option<usize> {
    if name == WARM_UP {
        return Some(WARM);
    }
    name.strip_prefix("gw-")?.parse().ok()
}

/// When each event first happened, by Gateway index.
#[derive(Default)]
pub struct Times {
    /// When the Gateway and both its routes had been created (the last create's answer).
    pub created: HashMap<usize, Instant>,
    /// The Gateway's address (its `status.addresses`).
    pub addresses: HashMap<usize, Ipv4Addr>,
    /// When the Gateway was first `Programmed=True` for its generation.
    pub programmed: HashMap<usize, Instant>,
    /// The last `Programmed` condition seen while it was not True (for errors).
    pub not_programmed: HashMap<usize, String>,
    /// When the route of each listener was first `Accepted=True` by our controller.
    pub accepted: HashMap<(usize, Listener), Instant>,
    /// When the VIP of each listener first forwarded to its backend's endpoints.
    pub forwarding: HashMap<(usize, Listener), Instant>,
    /// What the pins last held for a VIP not forwarding yet (for errors).
    pub vip_seen: HashMap<(usize, Listener), String>,
    /// Why the pin poller stopped, if it failed.
    pub poller_failed: Option<String>,
}

impl Times {
    /// When both of Gateway `g`'s entries in `m` were there (the later one).
    pub fn both(m: &HashMap<(usize, Listener), Instant>, g: usize) -> Option<Instant> {
        let a = m.get(&(g, Listener::Tcp))?;
        let b = m.get(&(g, Listener::Udp))?;
        Some(*a.max(b))
    }

    /// Gateways among `0..total` whose routes are both Accepted, whose VIPs both forward, and
    /// that are Programmed.
    pub fn counts(&self, total: usize) -> (usize, usize, usize) {
        let n = |f: &dyn Fn(usize) -> bool| (0..total).filter(|g| f(*g)).count();
        (
            n(&|g| Self::both(&self.accepted, g).is_some()),
            n(&|g| Self::both(&self.forwarding, g).is_some()),
            n(&|g| self.programmed.contains_key(&g)),
        )
    }
}

/// The shared record.
pub type Shared = Arc<Mutex<Times>>;

/// Condition `type_` of `conds` as (status, reason: message), if it is for `generation`.
fn condition(conds: &Value, type_: &str, generation: Option<i64>) -> Option<(bool, String)> {
    let c = conds.as_array()?.iter().find(|c| c["type"] == type_)?;
    if c["observedGeneration"].as_i64() != generation {
        return None;
    }
    Some((
        c["status"] == "True",
        format!(
            "{}: {}",
            c["reason"].as_str().unwrap_or(""),
            c["message"].as_str().unwrap_or("")
        ),
    ))
}

fn on_gateway(o: &DynamicObject, now: Instant, t: &mut Times) {
    let Some(g) = index_of(&o.name_any()) else {
        return;
    };
    let status = &o.data["status"];
    if let Some(a) = status["addresses"]
        .as_array()
        .and_then(|a| a.iter().find_map(|a| a["value"].as_str()?.parse().ok()))
    {
        t.addresses.insert(g, a);
    }
    match condition(&status["conditions"], "Programmed", o.metadata.generation) {
        Some((true, _)) => {
            t.programmed.entry(g).or_insert(now);
        }
        Some((false, why)) => {
            t.not_programmed.insert(g, why);
        }
        None => {}
    }
}

fn on_route(o: &DynamicObject, l: Listener, controller: &str, now: Instant, t: &mut Times) {
    let name = o.name_any();
    let Some(gw) = name.strip_suffix(&format!("-{}", l.name())) else {
        return;
    };
    let Some(g) = index_of(gw) else {
        return;
    };
    let accepted = o.data["status"]["parents"].as_array().is_some_and(|ps| {
        ps.iter().any(|p| {
            p["controllerName"] == controller
                && p["parentRef"]["name"] == gw
                && condition(&p["conditions"], "Accepted", o.metadata.generation)
                    .is_some_and(|(ok, _)| ok)
        })
    });
    if accepted {
        t.accepted.entry((g, l)).or_insert(now);
    }
}

/// What a watch feeds: Gateways, or the routes of one listener.
#[derive(Clone, Copy)]
pub enum Watched {
    /// Gateways.
    Gateways,
    /// Routes of a listener.
    Routes(Listener),
}

/// Watches `api` and records the first occurrences; rides out dropped watches (with backoff).
pub async fn watch(api: Api<DynamicObject>, what: Watched, controller: String, t: Shared) {
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(ev) = stream.next().await {
        let now = Instant::now();
        let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev else {
            continue;
        };
        let mut t = t.lock().unwrap();
        match what {
            Watched::Gateways => on_gateway(&o, now, &mut t),
            Watched::Routes(l) => on_route(&o, l, &controller, now, &mut t),
        }
    }
}

/// Polls the pins in `pin_dir` every 20 ms, for every VIP of a Gateway with an address that is
/// not forwarding yet, until `stop`.
pub fn poll_vips(pin_dir: PathBuf, t: Shared, stop: Arc<AtomicBool>) {
    let view = match PinnedView::open(&pin_dir) {
        Ok(v) => v,
        Err(e) => {
            t.lock().unwrap().poller_failed = Some(format!("opening the pins: {e}"));
            return;
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let todo: Vec<(usize, Listener, Ipv4Addr)> = {
            let t = t.lock().unwrap();
            t.addresses
                .iter()
                .flat_map(|(g, a)| Listener::BOTH.map(|l| (*g, l, *a)))
                .filter(|(g, l, _)| !t.forwarding.contains_key(&(*g, *l)))
                .collect()
        };
        for (g, l, a) in todo {
            let got = match view.new_flow_backends(&l.vip_key(a)) {
                Ok(got) => got,
                Err(e) => {
                    t.lock().unwrap().poller_failed = Some(format!("reading the pins: {e}"));
                    return;
                }
            };
            let now = Instant::now();
            let mut t = t.lock().unwrap();
            if got.as_ref() == Some(&expected(backend_of(g))) {
                t.forwarding.insert((g, l), now);
            } else {
                let seen = got.map_or("no such VIP".into(), |b| format!("backends {b:?}"));
                t.vip_seen
                    .insert((g, l), format!("{a}:{}: {seen}", l.port()));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
