//! Local API of the per-node daemon `rivorad`, and the typed client used by
//! `rivoractl`.
//!
//! The API is plain HTTP/1.1 + JSON served over a Unix socket (default
//! [`DEFAULT_SOCKET`]) whose file mode is 0600, so only root can query it:
//! it exposes topology and counters, and file permissions are the simplest
//! access control that needs no tokens or TLS.
//!
//! Endpoints (all `GET`, all JSON):
//!
//! | path             | body                     |
//! |------------------|--------------------------|
//! | `/v1/status`     | [`Status`]               |
//! | `/v1/vips`       | `Vec<`[`VipInfo`]`>`     |
//! | `/v1/backends`   | `Vec<`[`BackendInfo`]`>` |
//! | `/v1/stats`      | [`Stats`]                |
//! | `/v1/bgp`        | [`BgpStatus`]            |
//! | `/v1/speaker`    | [`SpeakerStatus`]        |
//! | `/v1/classifier` | [`ClassifierStatus`]     |
//!
//! Every error response carries an [`ApiError`] body.

pub mod client;
pub mod dto;
pub mod instance;
pub mod metrics;
pub mod selector;
pub mod server;

pub use client::{Client, ClientError};
pub use dto::*;
pub use server::{ApiSocket, ApiSource, bind, remove_stale_socket, serve};

/// Where rivorad listens and rivoractl connects unless told otherwise; a
/// fixed well-known path means neither side needs configuration by default.
pub const DEFAULT_SOCKET: &str = "/run/rivora/rivorad.sock";

/// URL paths of the API, shared by server and client so they cannot disagree.
pub mod paths {
    /// Daemon status: [`crate::Status`].
    pub const STATUS: &str = "/v1/status";
    /// Programmed VIPs: `Vec<`[`crate::VipInfo`]`>`.
    pub const VIPS: &str = "/v1/vips";
    /// Programmed backends: `Vec<`[`crate::BackendInfo`]`>`.
    pub const BACKENDS: &str = "/v1/backends";
    /// Dataplane counters: [`crate::Stats`].
    pub const STATS: &str = "/v1/stats";
    /// BGP speaker, peers and announced routes: [`crate::BgpStatus`].
    pub const BGP: &str = "/v1/bgp";
    /// ARP/NDP responder: [`crate::SpeakerStatus`].
    pub const SPEAKER: &str = "/v1/speaker";
    /// The classifier's VIPs, rules and groups with their counters:
    /// [`crate::ClassifierStatus`].
    pub const CLASSIFIER: &str = "/v1/classifier";
    /// POST [`crate::DrainRequest`]: drain backends; returns the affected
    /// `Vec<`[`crate::BackendInfo`]`>`.
    pub const DRAIN: &str = "/v1/backends/drain";
    /// POST [`crate::DrainRequest`]: end a drain; returns the affected
    /// `Vec<`[`crate::BackendInfo`]`>`.
    pub const UNDRAIN: &str = "/v1/backends/undrain";
}
