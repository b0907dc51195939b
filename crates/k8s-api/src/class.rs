//! Which `type: LoadBalancer` Services are Rivora's.
//!
//! Why it lives here and not in one binary: rivora-controller decides from it which Services get
//! an address, and every rivorad node decides from it which Services it programs. Two copies could
//! disagree (a controller assigning an address no node forwards, or a node forwarding a Service
//! another implementation owns), so both read this one function.

use k8s_openapi::api::core::v1::Service;

/// `spec.loadBalancerClass` that marks a Service as Rivora's.
pub const LOAD_BALANCER_CLASS: &str = "rivora.dev/lb";

/// The `spec.controllerName` of Rivora's GatewayClasses: rivora-controller writes their status
/// (and their Gateways' and routes' parent entries), rivorad programs their Gateways. A
/// domain-prefixed path, as Gateway API requires; immutable once a GatewayClass names it.
pub const GATEWAY_CONTROLLER_NAME: &str = "rivora.dev/gateway-controller";

/// The name of the GatewayClass the chart installs (any GatewayClass naming
/// [`GATEWAY_CONTROLLER_NAME`] is served the same way).
pub const GATEWAY_CLASS_NAME: &str = "rivora";

/// Which Services are Rivora's (the `--load-balancer-class` and `--default-class` flags of
/// rivora-controller and rivorad).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassConfig {
    /// The class Services name (`spec.loadBalancerClass`).
    pub class: String,
    /// Whether Services without a class are Rivora's too (Rivora is the cluster's default).
    pub default_class: bool,
    /// The `controllerName` of the GatewayClasses that are Rivora's (`--gateway-controller-name`;
    /// [`GATEWAY_CONTROLLER_NAME`] by default). A flag, like the Service class, so two Rivora
    /// installations can share a cluster and each serve its own Gateways.
    pub gateway_controller: String,
}

impl Default for ClassConfig {
    fn default() -> Self {
        ClassConfig {
            class: LOAD_BALANCER_CLASS.into(),
            default_class: false,
            gateway_controller: GATEWAY_CONTROLLER_NAME.into(),
        }
    }
}

/// Whether the Service is a `type: LoadBalancer` Service of Rivora's class.
pub fn is_ours(svc: &Service, cfg: &ClassConfig) -> bool {
    let Some(spec) = &svc.spec else { return false };
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return false;
    }
    match spec.load_balancer_class.as_deref() {
        Some(c) => c == cfg.class,
        None => cfg.default_class,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(value: serde_json::Value) -> Service {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn only_load_balancers_of_our_class_are_ours() {
        let cfg = ClassConfig::default();
        let default = ClassConfig {
            default_class: true,
            ..ClassConfig::default()
        };
        let lb = service(json!({"spec": {"type": "LoadBalancer"}}));
        let ours = service(
            json!({"spec": {"type": "LoadBalancer", "loadBalancerClass": LOAD_BALANCER_CLASS}}),
        );
        let other = service(json!({"spec": {"type": "LoadBalancer", "loadBalancerClass": "x/y"}}));
        let cluster_ip = service(json!({"spec": {"type": "ClusterIP"}}));
        let no_spec = service(json!({"metadata": {"name": "x"}}));
        assert!(is_ours(&ours, &cfg) && is_ours(&ours, &default));
        assert!(!is_ours(&lb, &cfg) && is_ours(&lb, &default));
        assert!(!is_ours(&other, &default));
        assert!(!is_ours(&cluster_ip, &default));
        assert!(!is_ours(&no_spec, &default));
    }
}
