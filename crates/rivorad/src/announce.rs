//! Announcing VIPs to the network: the BGP speaker (rivora-bgp) and the
//! ARP/NDP responder (rivora-speaker), driven by the desired state and
//! the backends' health.
//!
//! What is announced when:
//!
//! * BGP: a host route (/32, /128) for each VIP address that has at least
//!   one VIP with `advertise` on and at least one backend in state
//!   *healthy* on this node (with a health check: once its first probe
//!   has decided, so a new VIP is not announced before it is known to
//!   work). A draining backend (operator drain, or one
//!   that left the config and is retiring) and a down backend do not
//!   count: such a VIP takes no new flows here, so this node should not
//!   attract them. The route's communities are the union of the
//!   communities of those VIPs. Recomputed after every config apply,
//!   every health verdict, every drain and on every config-poll tick.
//! * Classifier VIPs (Meridio-2's rules and groups): a host route for each
//!   VIP while a rule for it leads to a group with a target of its family,
//!   withdrawn at once when none does; the other VIPs of the same rules
//!   stay. Meridio-2's `lb-ready-<group>` files follow the groups
//!   ([`crate::readiness`]).
//! * L2: ARP and NDP are answered for every VIP address with `advertise`
//!   on, healthy or not (static mode: the responder is always active), and
//!   for every classifier VIP that can forward.
//!
//! A change of the node's BGP peers (the file's `bgp:` section, or the
//! BGPPeers and their Secrets in Kubernetes) is applied in place: only the
//! sessions of peers that changed or went away are closed (routes withdrawn,
//! Cease sent), the others stay up; a new local AS or router ID restarts the
//! speaker (the old one withdraws its routes and sends Cease first); a change of its L2 settings (`l2Announce:`) starts a new
//! responder before the old one stops. Neither touches the datapath.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rivora_abi::backend_state;
use rivora_api::{BgpPeerInfo, BgpRouteInfo, BgpStatus, SpeakerStatus, SpeakerVipInfo};
use rivora_bgp::{Prefix, RouteAttrs, Speaker, SpeakerConfig};
use rivora_dataplane::{BackendKey, Dataplane};
use rivora_desired::{AnnouncePolicy, Community, DesiredState};
use rivora_health::Prober;
use rivora_speaker::{Responder, ResponderOptions};
use tracing::{error, info, warn};

use crate::state::Shared;

/// The responder's settings in force: interface and announce interval.
type L2Settings = (String, Duration);

/// The speaker, the responder and what the desired state asks of them.
#[derive(Default)]
pub struct Announcer {
    /// The BGP settings in force (the speaker's config).
    bgp_config: Option<SpeakerConfig>,
    speaker: Option<Arc<Speaker>>,
    /// The L2 settings in force, the interface resolved.
    l2_config: Option<L2Settings>,
    responder: Option<Responder>,
    /// Why the responder is not running, if it should be.
    l2_error: Option<String>,
    /// Per VIP name: advertise and communities.
    policy: BTreeMap<String, AnnouncePolicy>,
    /// Which VIPs each announced prefix stands for (for the API).
    announced: BTreeMap<Prefix, Vec<String>>,
    /// Kubernetes L2 mode: until when the responder may answer (the Lease election); None:
    /// it answers whenever it runs (static mode).
    pub l2_gate: Option<tokio::sync::watch::Receiver<Option<std::time::Instant>>>,
    /// Why the datapath does not forward (its XDP link detached or gone); while set, nothing
    /// is announced: BGP routes are withdrawn and a static responder goes quiet (with
    /// Kubernetes the L2 Lease is given up instead).
    datapath_problem: Option<String>,
    /// Meridio-2's readiness files (`--readiness-dir`), if kept.
    pub readiness: Option<crate::readiness::ReadinessFiles>,
}

/// The BGP routes the dataplane's state calls for, with the VIPs behind
/// each.
///
/// Healthy means: state healthy in the dataplane and, for a backend with
/// a health check, probes that say up. The second part keeps a new
/// backend whose first probe is still pending from attracting traffic, and
/// closes the window between a failed probe and its verdict reaching the
/// dataplane.
fn desired_routes(
    dp: &Dataplane,
    prober: &Prober<BackendKey>,
    policy: &BTreeMap<String, AnnouncePolicy>,
) -> BTreeMap<Prefix, (RouteAttrs, Vec<String>)> {
    let probes: BTreeMap<BackendKey, Option<bool>> = prober
        .snapshot()
        .into_iter()
        .map(|(k, st)| (k, st.up))
        .collect();
    let healthy: BTreeSet<BackendKey> = dp
        .backends()
        .filter(|b| {
            b.state == backend_state::HEALTHY
                && probes.get(&b.key).is_none_or(|up| *up == Some(true))
        })
        .map(|b| b.key)
        .collect();
    let mut routes = routes_for(
        dp.vips().map(|v| {
            (
                v.spec.name.as_str(),
                v.spec.key.addr,
                v.spec.backends.iter().map(|b| b.key).collect::<Vec<_>>(),
            )
        }),
        &healthy,
        policy,
    );
    add_classifier_routes(&mut routes, dp.classifier().applied());
    routes
}

/// A classifier VIP is announced while one of its rules leads to a group
/// with a target of its family (per VIP: Meridio-2's router announces all
/// of a Gateway's VIPs as soon as any group is ready). The route names the
/// VIP's rules.
fn add_classifier_routes(
    routes: &mut BTreeMap<Prefix, (RouteAttrs, Vec<String>)>,
    spec: &rivora_dataplane::classifier::ClassifierSpec,
) {
    for vip in spec.ready_vips() {
        let e = routes.entry(Prefix::host(vip)).or_default();
        e.1.extend(
            spec.rules_of(vip)
                .iter()
                .map(|r| format!("rule {}", r.name)),
        );
        e.1.sort();
    }
}

/// An address is announced when one of its VIPs advertises and has a
/// backend in `healthy`; its communities are the union of those VIPs'.
fn routes_for<'a>(
    vips: impl Iterator<Item = (&'a str, IpAddr, Vec<BackendKey>)>,
    healthy: &BTreeSet<BackendKey>,
    policy: &BTreeMap<String, AnnouncePolicy>,
) -> BTreeMap<Prefix, (RouteAttrs, Vec<String>)> {
    let mut out: BTreeMap<Prefix, (RouteAttrs, Vec<String>)> = BTreeMap::new();
    for (name, addr, backends) in vips {
        let Some(p) = policy.get(name) else {
            continue;
        };
        if !p.advertise || !backends.iter().any(|b| healthy.contains(b)) {
            continue;
        }
        let e = out.entry(Prefix::host(addr)).or_default();
        e.0.communities.extend(p.communities.iter().map(|c| c.0));
        e.1.push(name.to_string());
    }
    for (attrs, names) in out.values_mut() {
        attrs.communities.sort_unstable();
        attrs.communities.dedup();
        names.sort();
    }
    out
}

impl Announcer {
    /// Records whether the datapath forwards (None) or why not, logging changes.
    pub fn set_datapath_problem(&mut self, problem: Option<String>) {
        if problem == self.datapath_problem {
            return;
        }
        match &problem {
            Some(p) => error!(
                "{p}: announcing nothing until the datapath forwards again (restart rivorad to re-attach)"
            ),
            None => info!("the datapath forwards again: announcing"),
        }
        if self.l2_gate.is_none()
            && let Some(r) = &self.responder
        {
            r.set_active(problem.is_none());
        }
        if problem.is_some() {
            self.clear_readiness("the datapath does not forward");
        }
        self.datapath_problem = problem;
    }

    /// Makes the readiness files follow the classifier's groups that have a
    /// target (none while the datapath does not forward).
    pub fn sync_readiness(&self, dp: &Dataplane) {
        let Some(files) = &self.readiness else {
            return;
        };
        if self.datapath_problem.is_some() {
            return self.clear_readiness("the datapath does not forward");
        }
        match files.sync(dp.classifier().applied().ready_groups()) {
            Ok((created, removed)) => {
                for g in created {
                    info!(group = g, dir = %files.dir().display(), "readiness file created: the group has a target");
                }
                for g in removed {
                    info!(group = g, dir = %files.dir().display(), "readiness file removed: the group has no target");
                }
            }
            Err(e) => error!(dir = %files.dir().display(), "readiness files: {e}"),
        }
    }

    /// Removes every readiness file, saying why.
    pub fn clear_readiness(&self, why: &str) {
        if let Some(files) = &self.readiness {
            match files.clear() {
                Ok(removed) if !removed.is_empty() => {
                    info!(groups = ?removed, "readiness files removed: {why}")
                }
                Ok(_) => {}
                Err(e) => error!(dir = %files.dir().display(), "readiness files: {e}"),
            }
        }
    }

    /// Why the datapath does not forward, if it does not.
    pub fn datapath_problem(&self) -> Option<&str> {
        self.datapath_problem.as_deref()
    }

    /// Recomputes the BGP routes from the dataplane's backend states and
    /// hands them to the speaker (a no-op when nothing changed); none while
    /// the datapath does not forward.
    pub fn refresh(&mut self, dp: &Dataplane, prober: &Prober<BackendKey>) {
        let Some(speaker) = &self.speaker else {
            self.announced.clear();
            return;
        };
        let want = if self.datapath_problem.is_some() {
            BTreeMap::new()
        } else {
            desired_routes(dp, prober, &self.policy)
        };
        let routes: BTreeMap<Prefix, RouteAttrs> =
            want.iter().map(|(p, (a, _))| (*p, a.clone())).collect();
        let before: BTreeSet<Prefix> = self.announced.keys().copied().collect();
        if speaker.set_routes(routes) {
            let now: BTreeSet<Prefix> = want.keys().copied().collect();
            for p in now.difference(&before) {
                info!(prefix = %p, vips = ?want[p].1, "BGP: announcing (a VIP on it has a healthy backend)");
            }
            for p in before.difference(&now) {
                info!(prefix = %p, "BGP: withdrawing (no VIP on it advertises with a healthy backend)");
            }
        }
        self.announced = want.into_iter().map(|(p, (_, n))| (p, n)).collect();
    }

    /// `GET /v1/bgp`.
    pub fn bgp_status(&self) -> BgpStatus {
        let (Some(cfg), Some(speaker)) = (&self.bgp_config, &self.speaker) else {
            return BgpStatus::default();
        };
        let routes = speaker.routes();
        BgpStatus {
            enabled: true,
            local_as: Some(cfg.local_as),
            router_id: Some(cfg.router_id.to_string()),
            peers: speaker
                .peers()
                .into_iter()
                .zip(&cfg.peers)
                .map(|(p, c)| BgpPeerInfo {
                    address: p.address.to_string(),
                    port: c.port,
                    remote_as: p.remote_as,
                    state: p.state,
                    uptime_secs: p.uptime_secs,
                    prefixes_sent: p.prefixes_sent as u64,
                    last_error: p.last_error,
                })
                .collect(),
            routes: routes
                .iter()
                .map(|(p, a)| BgpRouteInfo {
                    prefix: p.to_string(),
                    communities: a
                        .communities
                        .iter()
                        .map(|c| Community(*c).to_string())
                        .collect(),
                    vips: self.announced.get(p).cloned().unwrap_or_default(),
                })
                .collect(),
        }
    }

    /// `GET /v1/speaker`.
    pub fn speaker_status(&self) -> SpeakerStatus {
        let Some((interface, interval)) = &self.l2_config else {
            return SpeakerStatus::default();
        };
        let unix = |t: SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        };
        let mut status = SpeakerStatus {
            enabled: true,
            interface: Some(interface.clone()),
            mac: None,
            active: false,
            announce_interval_secs: interval.as_secs(),
            vips: Vec::new(),
            error: self.l2_error.clone(),
            link_up: None,
            fenced: 0,
        };
        if let Some(r) = &self.responder {
            let answered: BTreeMap<IpAddr, _> =
                r.answered().into_iter().map(|a| (a.vip, a)).collect();
            status.mac = Some(r.mac().to_string());
            status.active = r.is_active();
            // An interface that cannot be read (it went away) counts as down.
            status.link_up = Some(r.link_running().unwrap_or(false));
            status.fenced = r.fenced();
            status.vips = r
                .vips()
                .into_iter()
                .map(|vip| match answered.get(&vip) {
                    Some(a) => SpeakerVipInfo {
                        address: vip.to_string(),
                        answering: true,
                        since_unix: Some(unix(a.since)),
                        replies_sent: a.replies_sent,
                        announcements_sent: a.announcements_sent,
                        last_announce_unix: a.last_announce.map(unix),
                    },
                    None => SpeakerVipInfo {
                        address: vip.to_string(),
                        answering: false,
                        since_unix: None,
                        replies_sent: 0,
                        announcements_sent: 0,
                        last_announce_unix: None,
                    },
                })
                .collect();
        }
        status
    }

    /// Prometheus view: per peer (`address:port`, AS, established,
    /// prefixes sent).
    pub fn peer_metrics(&self) -> Vec<(String, u32, bool, u64)> {
        let (Some(cfg), Some(speaker)) = (&self.bgp_config, &self.speaker) else {
            return Vec::new();
        };
        speaker
            .peers()
            .into_iter()
            .zip(&cfg.peers)
            .map(|(p, c)| {
                (
                    std::net::SocketAddr::new(p.address, c.port).to_string(),
                    p.remote_as,
                    p.state == "Established",
                    p.prefixes_sent as u64,
                )
            })
            .collect()
    }
}

/// Makes the speaker and the responder match `desired` (start, restart or
/// stop them) and announces what the dataplane calls for. Called after
/// every successful apply, the first one included. `default_interface` is
/// rivorad's `--interface`. The datapath is not touched.
pub async fn reconfigure(
    shared: &Arc<Mutex<Shared>>,
    desired: &DesiredState,
    default_interface: &str,
) {
    let want_bgp = desired.node.bgp.clone();
    let want_l2: Option<L2Settings> = desired.node.l2.as_ref().map(|l| {
        (
            l.interface
                .clone()
                .unwrap_or_else(|| default_interface.to_string()),
            l.announce_interval,
        )
    });
    let l2_vips = desired.l2_addresses();

    // 1. Under the lock: the new policy, and what changes for the speaker.
    let (bgp_change, l2_changed) = {
        let mut s = shared.lock().expect("state lock");
        let Shared {
            dataplane,
            neighbours,
            ..
        } = &mut *s;
        neighbours.sync(dataplane.classifier().applied());
        s.announcer.sync_readiness(&s.dataplane);
        let a = &mut s.announcer;
        a.policy = desired.announce_policies();
        let bgp_change = match (&a.speaker, &want_bgp) {
            _ if a.bgp_config == want_bgp => None,
            (Some(sp), Some(cfg)) => Some((Arc::clone(sp), Some(cfg.clone()))),
            (Some(sp), None) => Some((Arc::clone(sp), None)),
            (None, _) => None,
        };
        // Also retry a responder that could not start last time.
        let l2_changed = a.l2_config != want_l2 || (want_l2.is_some() && a.responder.is_none());
        (bgp_change, l2_changed)
    };

    // 2. A running speaker takes a new peer list in place: only the peers whose settings
    //    changed (password, hold time, ...) or that went away are closed (routes withdrawn,
    //    Cease sent); the others' sessions stay up. A new AS or router ID, or no BGP at all,
    //    stops it (the old speaker says goodbye before a new one connects to the same peers).
    if let Some((speaker, want)) = bgp_change {
        let outcome = match want {
            Some(cfg) => match speaker.reconfigure(cfg.clone()).await {
                Ok(r) => {
                    if !r.is_noop() {
                        info!("BGP: peers reconfigured in place: {r}");
                    }
                    Some(cfg)
                }
                Err(e) => {
                    info!("BGP: {e}: restarting the speaker (routes withdrawn, Cease sent)");
                    speaker.shutdown().await;
                    None
                }
            },
            None => {
                info!(
                    "BGP: no longer configured: stopping the speaker (routes withdrawn, Cease sent)"
                );
                speaker.shutdown().await;
                None
            }
        };
        let mut s = shared.lock().expect("state lock");
        let a = &mut s.announcer;
        match outcome {
            Some(cfg) => a.bgp_config = Some(cfg),
            None => {
                a.bgp_config = None;
                a.announced.clear();
                a.speaker = None;
            }
        }
    }

    // 3. The responder: a new one starts before the old one stops, so the
    //    VIPs stay answered across the change; if it cannot start, the old
    //    one keeps answering.
    let mut old_responder = None;
    if l2_changed {
        let started = match &want_l2 {
            None => Ok(None),
            Some((iface, interval)) => Responder::start(
                iface,
                ResponderOptions {
                    announce_interval: *interval,
                    ..ResponderOptions::default()
                },
            )
            .map(Some)
            .map_err(|e| format!("cannot start the ARP/NDP responder on {iface}: {e}")),
        };
        let mut s = shared.lock().expect("state lock");
        let a = &mut s.announcer;
        match started {
            Ok(mut new) => {
                // Its VIPs before the old one stops: no gap in answering.
                if let Some(r) = &mut new {
                    if let Err(e) = r.set_vips(l2_vips.clone()) {
                        warn!("L2 speaker: {e}");
                    }
                    // Kubernetes: only while this node holds the Lease.
                    match &a.l2_gate {
                        Some(gate) => r.follow(gate.clone()),
                        None => r.set_active(true),
                    }
                }
                old_responder = std::mem::replace(&mut a.responder, new);
                a.l2_config = want_l2.clone();
                a.l2_error = None;
            }
            Err(e) => {
                error!("{e}");
                if a.responder.is_none() {
                    a.l2_config = want_l2.clone();
                }
                a.l2_error = Some(e);
            }
        }
    }
    if let Some(r) = old_responder {
        r.stop().await;
    }

    // 4. Under the lock: the VIP set, a new speaker, the routes.
    let mut s = shared.lock().expect("state lock");
    let Shared {
        dataplane,
        prober,
        announcer: a,
        ..
    } = &mut *s;
    if let Some(r) = &a.responder
        && let Err(e) = r.set_vips(l2_vips)
    {
        warn!("L2 speaker: {e}");
    }
    if a.speaker.is_none()
        && let Some(cfg) = want_bgp
    {
        if let Err(e) = cfg.validate() {
            warn!("BGP: {e}");
        }
        info!(
            local_as = cfg.local_as,
            router_id = %cfg.router_id,
            peers = cfg.peers.len(),
            "BGP: starting the speaker"
        );
        a.speaker = Some(Arc::new(Speaker::start(cfg.clone())));
        a.bgp_config = Some(cfg);
    }
    a.refresh(dataplane, prober);
}

/// Graceful stop: withdraw every route and send Cease to every peer, stop
/// answering ARP/NDP.
pub async fn shutdown(shared: &Arc<Mutex<Shared>>) {
    let (speaker, responder) = {
        let mut s = shared.lock().expect("state lock");
        let a = &mut s.announcer;
        a.bgp_config = None;
        a.l2_config = None;
        a.announced.clear();
        (a.speaker.take(), a.responder.take())
    };
    if let Some(sp) = speaker {
        info!("BGP: withdrawing all routes and closing the sessions (Cease)");
        sp.shutdown().await;
    }
    if let Some(r) = responder {
        r.stop().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_advertised_vips_with_a_healthy_backend_are_routed() {
        let cfg = rivora_config::parse(
            "vips:\n  - { name: a, address: 10.0.0.1, port: 80, communities: [\"65000:1\"] }\n  - { name: b, address: 10.0.0.1, port: 81, communities: [\"65000:2\", \"65000:1\"] }\n  - { name: c, address: \"2001:db8::1\", port: 80 }\n  - { name: d, address: 10.0.0.2, port: 80, advertise: false }\n  - { name: e, address: 10.0.0.3, port: 80 }\n",
            "t.yaml",
        )
        .unwrap();
        let pol = crate::source::file::from_config(&cfg).announce_policies();
        let key = |s: &str| BackendKey {
            addr: s.parse().unwrap(),
            port: 80,
        };
        let vips = || {
            vec![
                ("a", "10.0.0.1".parse().unwrap(), vec![key("10.1.0.1")]),
                ("b", "10.0.0.1".parse().unwrap(), vec![key("10.1.0.2")]),
                (
                    "c",
                    "2001:db8::1".parse().unwrap(),
                    vec![key("2001:db8:1::1")],
                ),
                ("d", "10.0.0.2".parse().unwrap(), vec![key("10.1.0.1")]),
                // e's only backend is draining or down: not in `healthy`.
                ("e", "10.0.0.3".parse().unwrap(), vec![key("10.1.0.9")]),
                (
                    "unknown",
                    "10.0.0.4".parse().unwrap(),
                    vec![key("10.1.0.1")],
                ),
            ]
            .into_iter()
        };
        let healthy: BTreeSet<BackendKey> =
            [key("10.1.0.1"), key("10.1.0.2"), key("2001:db8:1::1")].into();
        let r = routes_for(vips(), &healthy, &pol);
        let shown: Vec<String> = r
            .iter()
            .map(|(p, (a, n))| format!("{p} {:?} {n:?}", a.communities))
            .collect();
        assert_eq!(
            shown,
            [
                format!(
                    "10.0.0.1/32 [{}, {}] [\"a\", \"b\"]",
                    65000u32 << 16 | 1,
                    65000u32 << 16 | 2
                ),
                "2001:db8::1/128 [] [\"c\"]".to_string(),
            ]
        );
        // a loses its backend: b still holds the address up, with its own
        // communities only... which include 65000:1 too.
        let healthy: BTreeSet<BackendKey> = [key("10.1.0.2")].into();
        let r = routes_for(vips(), &healthy, &pol);
        assert_eq!(r.len(), 1);
        assert_eq!(r.values().next().unwrap().1, ["b"]);
        // Nothing healthy: nothing announced.
        assert!(routes_for(vips(), &BTreeSet::new(), &pol).is_empty());
    }

    #[test]
    fn l2_answers_every_advertised_address_once() {
        let cfg = rivora_config::parse(
            "vips:\n  - { name: a, address: 10.0.0.1, port: 80 }\n  - { name: b, address: 10.0.0.1, port: 81 }\n  - { name: c, address: \"2001:db8::1\", port: 80 }\n  - { name: d, address: 10.0.0.2, port: 80, advertise: false }\n",
            "t.yaml",
        )
        .unwrap();
        let desired = crate::source::file::from_config(&cfg);
        let v: Vec<String> = desired
            .l2_addresses()
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(v, ["10.0.0.1", "2001:db8::1"]);
        let p = desired.announce_policies();
        assert!(!p["d"].advertise);
        assert!(p["a"].advertise && p["a"].communities.is_empty());
    }
}
