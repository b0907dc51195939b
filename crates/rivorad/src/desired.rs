//! Turns the validated YAML model into the dataplane's desired state. The
//! Kubernetes path will produce the same `VipSpec`s from its own objects.

use rivora_config::{Config, Mode as CfgMode};
use rivora_dataplane::{BackendKey, BackendSpec, Mode, VipKey, VipSpec};

/// The VIPs `config` asks for.
pub fn from_config(config: &Config) -> Vec<VipSpec> {
    config
        .vips
        .iter()
        .map(|v| VipSpec {
            name: v.name.clone(),
            key: VipKey {
                addr: v.address,
                port: v.port,
                proto: v.protocol.ip_proto(),
            },
            mode: match v.mode {
                CfgMode::Nat => Mode::Nat,
                CfgMode::Dsr => Mode::Dsr,
                CfgMode::DsrIpip => Mode::DsrIpip,
                CfgMode::DsrGre => Mode::DsrGre,
            },
            backends: v
                .backends
                .iter()
                .map(|b| BackendSpec {
                    key: BackendKey {
                        addr: b.address,
                        port: b.port,
                    },
                    weight: b.weight,
                    mac: b.mac.unwrap_or([0; 6]),
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_maps_field_by_field() {
        let cfg = rivora_config::parse(
            "vips:\n  - name: web\n    address: 10.0.0.1\n    port: 80\n    protocol: udp\n    backends:\n      - { address: 10.1.0.1, port: 8080, weight: 3, mac: \"02:00:00:00:00:01\" }\n      - { address: 10.1.0.2 }\n",
            "t.yaml",
        )
        .unwrap();
        let specs = from_config(&cfg);
        assert_eq!(specs.len(), 1);
        let v = &specs[0];
        assert_eq!(v.name, "web");
        assert_eq!(
            v.key,
            VipKey {
                addr: "10.0.0.1".parse().unwrap(),
                port: 80,
                proto: 17
            }
        );
        assert_eq!(v.mode, Mode::Nat);
        assert_eq!(
            v.backends[0].key,
            BackendKey {
                addr: "10.1.0.1".parse().unwrap(),
                port: 8080
            }
        );
        assert_eq!(v.backends[0].weight, 3);
        assert_eq!(v.backends[0].mac, [2, 0, 0, 0, 0, 1]);
        assert_eq!(
            v.backends[1].key.port, 80,
            "backend port defaults to the VIP's"
        );
        assert_eq!(v.backends[1].weight, 1);
    }
}
