//! Where the desired state comes from, and the seam the run loop reads it
//! through. A node has one source: the static YAML file ([`file`]) or
//! Kubernetes ([`kubernetes`]). Each produces a whole
//! [`rivora_desired::DesiredState`] and says how to apply it
//! ([`ApplyMode`]); what happens to it after that (the apply step, the
//! status, the announcements) is the run loop's, shared by every source.

pub mod file;
pub mod kubernetes;
pub mod watch;

use rivora_dataplane::{Attachment, Dataplane};
use rivora_desired::{ApplyMode, DesiredState};

/// Why the run loop reads its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The operator asked (SIGHUP): apply even what is in force already,
    /// which also retries whatever failed around it.
    Forced,
    /// The source saw its input change.
    Changed,
}

/// A desired state a source offers for applying.
pub struct Candidate<T> {
    /// What to apply.
    pub desired: DesiredState,
    /// What to do with adopted VIPs `desired` does not list (the file
    /// source: remove them; Kubernetes: keep them until its initial sync
    /// completes).
    pub mode: ApplyMode,
    /// The source's input is what was last applied (a forced re-read of an
    /// unchanged file): if the apply changes nothing either, the
    /// configuration generation does not move (docs/metrics.md).
    pub same_as_applied: bool,
    /// What the source needs back in [`Source::applied`] once this is in
    /// force (the file's text).
    pub token: T,
}

/// What a read of the source gives.
pub enum Reading<T> {
    /// The input is invalid; the text names every problem. The running
    /// configuration stays in force.
    Invalid(String),
    /// The input is what is in force already: nothing to apply. The text
    /// is what the status says if this ends a failed reload.
    InForce(&'static str),
    /// Something to apply.
    New(Candidate<T>),
}

/// A producer of desired state for the run loop. The loop owns the
/// signals that stop rivorad and the housekeeping tick; a source adds its
/// own wake-ups ([`Source::woken`]), its own change detection on each tick
/// ([`Source::polled`]) and its reads, and hears what got applied.
pub trait Source {
    /// What the source hands back on success (see [`Candidate::token`]).
    type Token;

    /// Names the input in logs and in the API's status (the file's path).
    fn describe(&self) -> String;

    /// The desired state to start with. An error stops rivorad: at start
    /// there is nothing older to keep forwarding with.
    fn initial(&mut self) -> anyhow::Result<Candidate<Self::Token>>;

    /// Called once when the run loop starts, before any [`Source::woken`]:
    /// installs what the source listens to (the file source: SIGHUP, which
    /// until then keeps its default action).
    fn listen(&mut self) -> anyhow::Result<()>;

    /// Resolves when the source wants a read out of the tick (SIGHUP).
    /// Must be cancel-safe: the run loop drops it when something else
    /// happens first.
    async fn woken(&mut self) -> Trigger;

    /// Called on every housekeeping tick: whether the input changed and
    /// should be read now (the file source waits for a changed file to
    /// settle first).
    async fn polled(&mut self) -> Option<Trigger>;

    /// Reads the input for `trigger`.
    fn read(&mut self, trigger: Trigger) -> Reading<Self::Token>;

    /// The candidate whose token this is is now in force, and the
    /// dataplane holds `programmed`.
    fn applied(&mut self, token: Self::Token, programmed: Programmed);

    /// The candidate last read was refused (the dataplane or the model's
    /// rules); the previous state stays in force. The file source has
    /// nothing to do (the status says it); the Kubernetes source reports it.
    fn rejected(&mut self, _error: &str) {}

    /// The datapath is attached (once, at start).
    fn attached(&mut self, _attachment: &Attachment) {}

    /// What the announcers do now (BGP sessions and routes, the L2 responder) and why the
    /// datapath does not forward (None: it does), on every tick: the Kubernetes source puts it
    /// in the node's report when it changed, and gives up the L2 Lease while the node cannot
    /// serve.
    fn announcing(
        &mut self,
        _bgp: &rivora_api::BgpStatus,
        _speaker: &rivora_api::SpeakerStatus,
        _datapath_problem: Option<&str>,
    ) {
    }

    /// Kubernetes L2 mode: until when this node may answer ARP/NDP (the L2 speaker Lease's
    /// election). None: the responder answers whenever it runs (the static path).
    fn l2_gate(&self) -> Option<tokio::sync::watch::Receiver<Option<std::time::Instant>>> {
        None
    }

    /// rivorad is stopping and has stopped answering: give up what others may take over
    /// (the Kubernetes source releases the L2 Lease). Bounded in time.
    async fn stopping(&mut self) {}

    /// What the API's status and the metrics show of the source's own
    /// state, read on each request. None: nothing beyond its description.
    fn status_reader(&self) -> Option<StatusReader> {
        None
    }
}

/// What the dataplane holds after an apply, for the source's reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Programmed {
    /// VIPs programmed, adopted ones included.
    pub vips: usize,
    /// Adopted VIPs nothing claimed yet (kept by [`ApplyMode::KeepUnclaimed`]).
    pub unclaimed: usize,
    /// VIPs the last apply refused alone (they did not fit, or broke a rule of their own).
    pub refused: Vec<rivora_dataplane::RefusedVip>,
    /// Classifier groups and rules the last apply refused alone.
    pub classifier_refused: Vec<rivora_dataplane::classifier::RefusedObject>,
}

impl Programmed {
    /// What `dataplane` holds now.
    pub fn of(dataplane: &Dataplane) -> Self {
        Programmed {
            vips: dataplane.vips().count(),
            unclaimed: dataplane.vips().filter(|v| v.adopted).count(),
            refused: dataplane.refused().to_vec(),
            classifier_refused: dataplane.classifier_refused().to_vec(),
        }
    }
}

/// Reads a source's state for the API (see [`Source::status_reader`]),
/// given the dataplane it programs.
pub type StatusReader =
    Box<dyn Fn(&Dataplane) -> rivora_api::KubernetesStatus + Send + Sync + 'static>;
