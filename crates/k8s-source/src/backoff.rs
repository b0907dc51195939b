//! The back-off between a watch's failed attempts, for the node agent's and the controller's
//! watches.
//!
//! Why not kube's `default_backoff()`: it starts again from 800 ms after every successful item,
//! and kube's watcher yields `Event::Init` (a success) before every list it tries. A list that
//! keeps failing, such as that of a kind whose CRD is not installed (404), was therefore retried
//! every ~1.2 s for ever: 4.2 failed lists a second and 12.7 warnings a second per node with
//! the chart's defaults. Here only real progress (objects listed or watched) starts the
//! schedule again; a relist's `Init` does not. A kind the API server does not serve (404) backs
//! off up to [`ABSENT_MAX`]: it costs one list per kind every few minutes, not a steady load.

use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::watcher;

/// A log directive both binaries add (unless `RUST_LOG` names `kube_client` itself): kube's
/// client logs a WARN of its own for every error answer whose body is not a Status, such as
/// the plain-text 404 of a kind whose CRD is absent, at every retry; the error also reaches
/// the watch, which logs it once per cause.
pub const QUIET_KUBE_CLIENT: &str = "kube_client::client=error";

/// The first wait after a failure.
pub const FIRST: Duration = Duration::from_millis(800);
/// The longest wait after failures of a served kind (kube's default).
pub const MAX: Duration = Duration::from_secs(30);
/// The longest wait while the API server does not serve the kind (404: no CRD).
pub const ABSENT_MAX: Duration = Duration::from_secs(300);

/// The wait before the next attempt, given what the watch yielded.
#[derive(Debug, Clone)]
pub struct Schedule {
    next: Duration,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule { next: FIRST }
    }
}

impl Schedule {
    /// After `item`: how long to wait before polling the watch again (None: at once).
    pub fn after<K>(
        &mut self,
        item: &Result<watcher::Event<K>, watcher::Error>,
    ) -> Option<Duration> {
        match item {
            // A (re)list starting is not progress: the list may fail again.
            Ok(watcher::Event::Init) => None,
            Ok(_) => {
                self.next = FIRST;
                None
            }
            Err(e) => {
                let cap = if is_absent(e) { ABSENT_MAX } else { MAX };
                let wait = self.next.min(cap);
                self.next = (self.next * 2).min(cap);
                Some(jitter(wait))
            }
        }
    }
}

/// Whether the error says the API server does not serve the kind (its list answered 404).
pub fn is_absent(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404)
}

/// `wait` spread over 75-125% (the nanoseconds of the clock as the random part), so that the
/// nodes of a cluster do not retry in step.
fn jitter(wait: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let factor = 0.75 + f64::from(nanos % 1000) / 2000.0;
    wait.mul_f64(factor)
}

/// `watch` with [`Schedule`]'s waits: an error is passed on at once, and the watch is polled
/// again only after the wait.
pub fn with_backoff<K, S>(watch: S) -> impl Stream<Item = S::Item> + Send
where
    K: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    with_backoff_woken(watch, None)
}

/// [`with_backoff`], with the wait after "the kind is not served" (404) cut short when
/// `crds` says a CRD appeared (see [`crate::crds`]): the kind is listed again at once and the
/// waits start over, so a CRD installed later is served within a second or two instead of
/// after the minutes-long wait, and an absent kind still costs no steady load.
pub fn with_backoff_woken<K, S>(
    watch: S,
    crds: Option<tokio::sync::watch::Receiver<u64>>,
) -> impl Stream<Item = S::Item> + Send
where
    K: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    type Boxed<K> =
        Pin<Box<dyn Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static>>;
    let inner: Boxed<K> = Box::pin(watch);
    futures::stream::unfold(
        (inner, Schedule::default(), None::<(Duration, bool)>, crds),
        |(mut inner, mut schedule, wait, mut crds)| async move {
            match (wait, &mut crds) {
                (Some((w, true)), Some(rx)) => {
                    tokio::select! {
                        _ = tokio::time::sleep(w) => {}
                        r = rx.changed() => match r {
                            Ok(()) => schedule = Schedule::default(),
                            // The CRD watch ended: the plain wait.
                            Err(_) => {
                                crds = None;
                                tokio::time::sleep(w).await;
                            }
                        },
                    }
                }
                (Some((w, _)), _) => tokio::time::sleep(w).await,
                (None, _) => {}
            }
            let item = inner.next().await?;
            let absent = matches!(&item, Err(e) if is_absent(e));
            if absent && let Some(rx) = &mut crds {
                // Only a CRD that appears from now on cuts the coming wait short.
                rx.borrow_and_update();
            }
            let wait = schedule.after(&item).map(|w| (w, absent));
            Some((item, (inner, schedule, wait, crds)))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn absent() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(
            kube::core::Status::failure(
                "the server could not find the requested resource",
                "NotFound",
            )
            .with_code(404)
            .boxed(),
        ))
    }

    fn failed() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(
            kube::core::Status::failure("etcdserver: request timed out", "InternalError")
                .with_code(500)
                .boxed(),
        ))
    }

    /// The case: Init, 404, Init, 404, ...: the waits grow (to minutes for an absent
    /// kind) instead of starting over at every Init; real progress starts them over.
    #[test]
    fn a_relists_init_does_not_reset_the_waits_and_progress_does() {
        let mut s = Schedule::default();
        let mut waits = Vec::new();
        for _ in 0..12 {
            assert_eq!(s.after::<()>(&Ok(watcher::Event::Init)), None);
            waits.push(s.after::<()>(&Err(absent())).unwrap());
        }
        assert!(waits[0] >= FIRST.mul_f64(0.75) && waits[0] <= FIRST.mul_f64(1.25));
        assert!(waits[5] >= Duration::from_secs(19), "{waits:?}");
        assert!(
            waits[11] >= ABSENT_MAX.mul_f64(0.75) && waits[11] <= ABSENT_MAX.mul_f64(1.25),
            "an absent kind is retried every few minutes: {waits:?}"
        );
        // Listed at last: the next failure starts from the first wait again.
        assert_eq!(s.after::<()>(&Ok(watcher::Event::InitDone)), None);
        let w = s.after::<()>(&Err(failed())).unwrap();
        assert!(w <= FIRST.mul_f64(1.25), "{w:?}");
        // A served kind's failures stop growing at 30 s.
        for _ in 0..10 {
            s.after::<()>(&Err(failed()));
        }
        assert!(s.after::<()>(&Err(failed())).unwrap() <= MAX.mul_f64(1.25));
    }
}
