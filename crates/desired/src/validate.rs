//! The rules of a [`DesiredState`] that its types cannot express.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;

use rivora_dataplane::BackendKey;
use rivora_health::ProbeSpec;

use crate::DesiredState;

/// One broken rule, naming the VIP and backend so that the source's bug
/// can be found from the log line alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inconsistency {
    /// A backend entry for a backend the VIP's spec does not list.
    UnknownBackend {
        /// The VIP's name.
        vip: String,
        /// The backend.
        backend: BackendKey,
    },
    /// Two entries for one backend of one VIP.
    DuplicateBackend {
        /// The VIP's name.
        vip: String,
        /// The backend.
        backend: BackendKey,
    },
    /// A check that probes another address than its backend's: probes go
    /// to the backend itself, never to a VIP or a third host.
    CheckElsewhere {
        /// The VIP's name.
        vip: String,
        /// The backend.
        backend: BackendKey,
        /// Where the check would connect.
        target: SocketAddr,
    },
    /// A backend of several VIPs with different checks: it is probed once,
    /// so there must be one check.
    ConflictingChecks {
        /// The backend.
        backend: BackendKey,
        /// The VIP whose check came first.
        first: String,
        /// The VIP whose check differs.
        second: String,
    },
}

impl fmt::Display for Inconsistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Inconsistency::UnknownBackend { vip, backend } => write!(
                f,
                "VIP {vip}: backend {backend} has an entry but is not one of the VIP's backends"
            ),
            Inconsistency::DuplicateBackend { vip, backend } => {
                write!(f, "VIP {vip}: backend {backend} has two entries")
            }
            Inconsistency::CheckElsewhere {
                vip,
                backend,
                target,
            } => write!(
                f,
                "VIP {vip}: the health check of backend {backend} would probe {target}, \
                 not the backend's own address"
            ),
            Inconsistency::ConflictingChecks {
                backend,
                first,
                second,
            } => write!(
                f,
                "backend {backend} has different health checks in VIPs {first} and {second}; \
                 a backend is probed once, so its VIPs must agree"
            ),
        }
    }
}

pub(crate) fn validate(state: &DesiredState) -> Result<(), Vec<Inconsistency>> {
    let mut problems = Vec::new();
    let mut checks: BTreeMap<BackendKey, (&str, &ProbeSpec)> = BTreeMap::new();
    for vip in &state.vips {
        let name = vip.spec.name.as_str();
        let listed: BTreeSet<BackendKey> = vip.spec.backends.iter().map(|b| b.key).collect();
        let mut seen = BTreeSet::new();
        for b in &vip.backends {
            if !listed.contains(&b.key) {
                problems.push(Inconsistency::UnknownBackend {
                    vip: name.to_string(),
                    backend: b.key,
                });
            }
            if !seen.insert(b.key) {
                problems.push(Inconsistency::DuplicateBackend {
                    vip: name.to_string(),
                    backend: b.key,
                });
            }
            let Some(check) = &b.check else { continue };
            if check.target.ip() != b.key.addr {
                problems.push(Inconsistency::CheckElsewhere {
                    vip: name.to_string(),
                    backend: b.key,
                    target: check.target,
                });
            }
            match checks.get(&b.key) {
                Some((first, other)) if *other != check => {
                    problems.push(Inconsistency::ConflictingChecks {
                        backend: b.key,
                        first: first.to_string(),
                        second: name.to_string(),
                    });
                }
                Some(_) => {}
                None => {
                    checks.insert(b.key, (name, check));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}
