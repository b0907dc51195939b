//! Where a VIP came from.

use std::fmt;

/// The source object a VIP was made from. The dataplane does not care;
/// operators do (`rivoractl` shows it), and so does a source that must
/// tell its own VIPs apart from adopted leftovers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A VIP of the static YAML file. The file has one VIP per name and
    /// its path is node-wide (the API's status shows it), so the VIP's name
    /// says everything else.
    File,
    /// A port of a Kubernetes Service (one VIP per ingress address, port
    /// and protocol).
    Service(ServiceRef),
    /// A listener of a Gateway API Gateway (one VIP per Gateway address,
    /// listener port and protocol), forwarding for its active route.
    Gateway(GatewayRef),
}

/// The Gateway listener a Kubernetes VIP stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayRef {
    /// The Gateway's namespace.
    pub namespace: String,
    /// The Gateway's name.
    pub name: String,
    /// The listener's name.
    pub listener: String,
    /// The route whose backends it forwards to, `namespace/name`.
    pub route: String,
    /// The Gateway's `metadata.uid`.
    pub uid: String,
    /// The Gateway's `metadata.generation` the VIP was made from.
    pub generation: i64,
}

/// The Service port a Kubernetes VIP stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// The ServicePort's name; None for the single unnamed port a Service
    /// may have.
    pub port_name: Option<String>,
    /// The Service's `metadata.uid`: tells a re-created Service of the
    /// same name from the one it replaced.
    pub uid: String,
    /// The Service's `metadata.resourceVersion` the VIP was made from
    /// (Services have no generation), for reporting what is programmed.
    pub resource_version: String,
}

impl fmt::Display for Origin {
    /// `file`, or `service NS/NAME` with `port NAME` when the port has one:
    /// what a log line or a table cell shows.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File => f.write_str("file"),
            Origin::Service(s) => {
                write!(f, "service {}/{}", s.namespace, s.name)?;
                if let Some(p) = &s.port_name {
                    write!(f, " port {p}")?;
                }
                Ok(())
            }
            Origin::Gateway(g) => write!(
                f,
                "gateway {}/{} listener {} route {}",
                g.namespace, g.name, g.listener, g.route
            ),
        }
    }
}
