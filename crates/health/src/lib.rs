//! Active health checks of Rivora backends.
//!
//! The dataplane must stop sending new flows to a backend that no longer
//! answers, and must start again once it recovers. The control plane learns
//! this by probing every backend itself, because in NAT mode the backend's
//! replies are the only signal Rivora has and a silently dead backend would
//! otherwise black-hole its share of the Maglev table.
//!
//! The crate has three layers, each usable on its own:
//!
//! * [`Tracker`]: a pure state machine (no I/O, no clock) that turns a stream
//!   of probe results into up/down decisions with `rise`/`fall` hysteresis, so
//!   one lost probe does not move flows around.
//! * [`probe`]: one TCP connect or HTTP/1.1 `GET` against a [`ProbeSpec`],
//!   bounded by its timeout, returning a [`ProbeOutcome`] with a short
//!   human-readable detail for logs and `rivoractl`.
//! * [`Prober`]: the engine that runs one task per target on the current
//!   tokio runtime, reports [`Transition`]s over a channel and keeps a
//!   [`ProbeStatus`] per target for [`Prober::snapshot`].
//!
//! # One probe per backend
//!
//! A backend that serves several VIPs is still one machine with one health
//! state. The [`Prober`] does not know about VIPs: the caller gives each
//! distinct backend (address plus probe settings) one key, so it is probed
//! once however many VIPs use it, and applies each [`Transition`] to every
//! VIP that references the key.
//!
//! # Source addresses
//!
//! Probes never bind a source address: the kernel picks it from the route to
//! the backend. In NAT mode the VIP is not a local address, so binding to it
//! would fail, and the backend must see the probe coming from an address it
//! can answer directly.

#![warn(missing_docs)]

mod probe;
mod prober;
mod spec;
mod tracker;

pub use probe::{ProbeOutcome, probe};
pub use prober::{ProbeStatus, Prober, Transition};
pub use spec::{ProbeKind, ProbeSpec, SpecError};
pub use tracker::{Initial, Tracker};
