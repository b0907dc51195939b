//! Where the desired state comes from. A node has one source: the static
//! YAML file ([`file`]) or, later, Kubernetes. Each produces a whole
//! [`rivora_desired::DesiredState`]; everything after that is shared.

pub mod file;
pub mod watch;
