//! Which Lease the controller elects its leader through. rivora-controller takes it from its
//! command line (`--lease-name`, `--lease-namespace`, defaults `rivora-controller` in its own
//! namespace), and the chart's `controller.extraArgs` may set both: so `rivora status` reads them
//! from the running Deployment's arguments, else from the release's values, instead of assuming
//! the default and reporting "no Lease" while a leader holds another one.

use k8s_openapi::api::apps::v1::Deployment;
use serde_json::Value;

use super::report::LEASE_NAME;

/// A Lease by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRef {
    /// Its namespace (`--lease-namespace`, else the controller's namespace).
    pub namespace: String,
    /// Its name (`--lease-name`, else [`LEASE_NAME`]).
    pub name: String,
}

impl std::fmt::Display for LeaseRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl LeaseRef {
    /// rivora-controller's defaults for a controller running in `namespace`.
    pub fn default_in(namespace: &str) -> LeaseRef {
        LeaseRef {
            namespace: namespace.to_string(),
            name: LEASE_NAME.to_string(),
        }
    }

    /// The Lease a controller with these arguments uses (`--flag=value` or `--flag value`, the
    /// last one winning), running in `namespace`.
    pub fn from_args<'a>(args: impl IntoIterator<Item = &'a str>, namespace: &str) -> LeaseRef {
        let mut lease = LeaseRef::default_in(namespace);
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f, Some(v)),
                None => (arg, None),
            };
            let slot = match flag {
                "--lease-name" => &mut lease.name,
                "--lease-namespace" => &mut lease.namespace,
                _ => continue,
            };
            if let Some(value) = inline
                .map(str::to_string)
                .or_else(|| args.next().map(str::to_string))
            {
                *slot = value;
            }
        }
        lease
    }

    /// From the release's values (`controller.extraArgs`), for a release in `namespace`.
    pub fn from_values(values: &Value, namespace: &str) -> LeaseRef {
        let args = values["controller"]["extraArgs"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>())
            .unwrap_or_default();
        LeaseRef::from_args(args, namespace)
    }

    /// From the controller Deployment's container `controller` (else its first one): what the
    /// running replicas were started with, whoever installed them.
    pub fn from_deployment(d: &Deployment, namespace: &str) -> Option<LeaseRef> {
        let containers = &d.spec.as_ref()?.template.spec.as_ref()?.containers;
        let c = containers
            .iter()
            .find(|c| c.name == "controller")
            .or(containers.first())?;
        let args = c.command.iter().flatten().chain(c.args.iter().flatten());
        Some(LeaseRef::from_args(args.map(String::as_str), namespace))
    }
}
