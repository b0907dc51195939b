//! What a source says about a backend beyond its dataplane spec.

use rivora_dataplane::BackendKey;
use rivora_health::ProbeSpec;

/// One backend of a VIP as its source describes it. The dataplane part
/// (address, port, weight, MAC) is in the VIP's
/// [`rivora_dataplane::VipSpec::backends`]; this holds the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendMeta {
    /// The backend this describes (an entry of the VIP spec's backends).
    pub key: BackendKey,
    /// Its active health check, resolved to what the prober runs (the
    /// probed address is the backend's own, the port may differ). None:
    /// not probed, the backend counts as healthy.
    pub check: Option<ProbeSpec>,
    /// The source says the endpoint is going away but still serving
    /// (Kubernetes: serving and terminating). The YAML source never sets
    /// it, and rivorad does not act on it yet: the Kubernetes source, which
    /// sets it, also makes the apply step drain such backends.
    pub terminating: bool,
    /// What the backend is, for display (Kubernetes: `Pod NS/NAME`). None
    /// for the YAML source, whose backends are bare addresses.
    pub target: Option<String>,
    /// The node the backend runs on, for display and for telling local
    /// from remote endpoints. None when the source does not know.
    pub node: Option<String>,
}

impl BackendMeta {
    /// A backend with nothing to add: no check, not terminating, nothing
    /// to show.
    pub fn new(key: BackendKey) -> Self {
        Self {
            key,
            check: None,
            terminating: false,
            target: None,
            node: None,
        }
    }
}
