//! Which CustomResourceDefinitions appear, so that a kind whose CRD was absent is served as
//! soon as its CRD is installed.
//!
//! Why: the node agent watches optional kinds (Gateway API's, Meridio-2's) that a cluster may
//! not have. Their watches wait minutes between lists while the API server answers 404
//! (backoff.rs), which keeps an absent kind from costing a steady load, but would also leave a
//! CRD installed later unserved for those minutes. One metadata-only watch of the CRDs (names,
//! no schemas: cheap however many CRDs the cluster has) bumps a counter whenever a CRD name
//! not seen before appears; the absent kinds' waits end then. If the CRDs cannot be watched
//! (RBAC of an older install), that is logged once and the waits run their course.

use std::collections::BTreeSet;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::backoff::with_backoff;

/// The names seen so far, and what a list in progress has listed.
#[derive(Debug, Default)]
pub struct Seen {
    names: BTreeSet<String>,
    listing: Option<BTreeSet<String>>,
    listed_once: bool,
}

impl Seen {
    /// Takes one watch event (its object's name); true when a CRD appeared that was not there
    /// before (never for the first list: what exists at start is not news).
    pub fn event(&mut self, ev: watcher::Event<String>) -> bool {
        match ev {
            watcher::Event::Init => {
                self.listing = Some(BTreeSet::new());
                false
            }
            watcher::Event::InitApply(name) => {
                if let Some(l) = &mut self.listing {
                    l.insert(name);
                }
                false
            }
            watcher::Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let new = self.listed_once && listed.iter().any(|n| !self.names.contains(n));
                self.names = listed;
                self.listed_once = true;
                new
            }
            watcher::Event::Apply(name) => self.names.insert(name) && self.listed_once,
            watcher::Event::Delete(name) => {
                self.names.remove(&name);
                false
            }
        }
    }
}

/// Starts the watch on the current runtime; the counter goes up each time a new CRD appears.
pub fn watch_new(client: Client) -> watch::Receiver<u64> {
    let (tx, rx) = watch::channel(0u64);
    // Metadata only: names, not the (large) schemas.
    let api: Api<PartialObjectMeta<CustomResourceDefinition>> = Api::all(client);
    let stream = with_backoff(watcher(api, watcher::Config::default()));
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        let mut seen = Seen::default();
        let mut failing = false;
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => {
                    failing = false;
                    let named = match ev {
                        watcher::Event::Init => watcher::Event::Init,
                        watcher::Event::InitDone => watcher::Event::InitDone,
                        watcher::Event::InitApply(o) => watcher::Event::InitApply(o.name_any()),
                        watcher::Event::Apply(o) => watcher::Event::Apply(o.name_any()),
                        watcher::Event::Delete(o) => watcher::Event::Delete(o.name_any()),
                    };
                    if seen.event(named) {
                        info!(
                            "a CustomResourceDefinition appeared: listing the absent kinds again"
                        );
                        tx.send_modify(|n| *n += 1);
                    }
                }
                Err(e) => {
                    if !failing {
                        warn!(
                            error = %e,
                            "cannot watch CustomResourceDefinitions: a kind whose CRD is \
                             installed later is served after its retry wait (minutes) \
                             instead of at once (logged once until it works)"
                        );
                    }
                    failing = true;
                }
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use watcher::Event as E;

    #[test]
    fn only_a_crd_that_was_not_there_before_is_news() {
        let mut s = Seen::default();
        // The first list: what exists at start is not news.
        assert!(!s.event(E::Init));
        assert!(!s.event(E::InitApply("a.x".into())));
        assert!(!s.event(E::InitDone));
        assert!(s.event(E::Apply("gateways.gateway.networking.k8s.io".into())));
        // Its status changes are not news.
        assert!(!s.event(E::Apply("gateways.gateway.networking.k8s.io".into())));
        // A relist that finds one more is news; the same list again is not.
        s.event(E::Init);
        s.event(E::InitApply("a.x".into()));
        s.event(E::InitApply("gateways.gateway.networking.k8s.io".into()));
        s.event(E::InitApply("l34routes.meridio-2.nordix.org".into()));
        assert!(s.event(E::InitDone));
        s.event(E::Init);
        s.event(E::InitApply("a.x".into()));
        assert!(!s.event(E::InitDone), "fewer is not news");
        // Deleted and installed again: news.
        s.event(E::Delete("a.x".into()));
        assert!(s.event(E::Apply("a.x".into())));
    }
}
