//! Rivora's dataplane crate: loads the BPF programs (embedded, built from
//! `bpf/`), attaches them, and is the one writer of their maps.
//!
//! Both the static-YAML path and (later) the Kubernetes path hand a desired
//! set of [`VipSpec`]s to [`Dataplane::apply`]; everything about IDs, Maglev
//! slices and write ordering lives here so the two paths cannot diverge.

pub mod alloc;
pub mod bpffs;
pub mod classifier;
pub mod compat;
pub mod endpoints;
pub mod flow_filter;
pub mod guard;
pub mod holder;
pub mod imbalance;
pub mod jiffies;
pub mod linkinfo;
pub mod loader;
pub mod maps;
pub mod mmap;
pub mod model;
pub mod neighbours;
pub mod objects;
pub mod snat;
pub mod stages;
pub mod view;
pub mod vip_index;
pub mod writer;

pub use bpffs::{ensure_bpffs, private_bpffs_reason};
pub use loader::{
    AttachOptions, Attachment, BridgeRole, Datapath, LoadOptions, LoadOutcome, XdpModeActual,
    XdpModeRequest, auto_xdp_mode, bridge_role, interface_driver, interface_index, interface_mac,
    remove_link_pins, remove_map_pins, remove_pins,
};
pub use maps::Maps;
pub use model::{
    BackendKey, BackendSpec, KEEP_DESTINATION_PORT, Mode, RateLimit, SourceRange, VipKey, VipSpec,
    proto,
};
pub use writer::{
    AdoptReport, ApplyPhases, ApplyReport, BackendCounters, BackendState, Dataplane, RefusedVip,
    VipCounters, VipIndexStatus, VipState,
};

/// Everything that can go wrong loading or programming the datapath. Each
/// message names the object, map or limit involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The embedded object lacks a map (build mismatch).
    #[error("BPF object has no map {0}")]
    MissingMap(&'static str),
    /// The embedded object lacks a program (build mismatch).
    #[error("BPF object has no program {0}")]
    MissingProgram(&'static str),
    /// Parsing or creating maps for an object failed.
    #[error("loading {what}: {source}")]
    Load {
        /// Which object.
        what: &'static str,
        /// Cause.
        source: Box<aya::EbpfError>,
    },
    /// The verifier or the kernel refused a program.
    #[error("program {name}: {source}")]
    Program {
        /// Program name.
        name: &'static str,
        /// Cause.
        source: Box<aya::programs::ProgramError>,
    },
    /// Attaching failed.
    #[error("attaching {what}: {cause}")]
    Attach {
        /// What to where.
        what: String,
        /// The kernel's answer in one line (each cause once: aya's own
        /// wrappers repeat it) and, when another program holds the hook,
        /// which one and how to free it (see [`holder`]).
        cause: String,
    },
    /// A map operation failed.
    #[error("map {map}: {source}")]
    Map {
        /// Map name.
        map: &'static str,
        /// Cause.
        source: aya::maps::MapError,
    },
    /// BPF_PROG_TEST_RUN failed.
    #[error("test run: {0}")]
    TestRun(Box<aya::programs::ProgramError>),
    /// The interface does not exist.
    #[error("no such interface: {0}")]
    NoInterface(String),
    /// A capacity (IDs, table slots) would be exceeded; nothing was changed.
    #[error("capacity exceeded, nothing changed: {0}")]
    Capacity(String),
    /// The desired state is inconsistent; nothing was changed.
    #[error("invalid desired state, nothing changed: {0}")]
    Invalid(String),
    /// Pinned maps exist that this build cannot adopt; nothing was changed.
    #[error(
        "the maps pinned in {} cannot be adopted by this rivorad:\n  {}\nStop any rivorad using them, then \
         either start the rivorad version that wrote them, or start this one with --reset-pinned-state \
         (empties the flow tables: NAT connections in progress break), or remove the pins with \
         rivorad --uninstall (see docs/restarts.md)",
        pin_dir.display(),
        problems.join("\n  ")
    )]
    Incompatible {
        /// The pin directory.
        pin_dir: std::path::PathBuf,
        /// One line per problem.
        problems: Vec<String>,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// Cause.
        source: std::io::Error,
    },
}
