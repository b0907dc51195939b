//! Turns the validated YAML model into the dataplane's desired state. The
//! Kubernetes path will produce the same `VipSpec`s from its own objects.

use rivora_config::{
    Config, Mode as CfgMode, NatForwarding, RateLimit as CfgRateLimit, SessionAffinity,
};
use rivora_dataplane::model::RateLimit;
use rivora_dataplane::{BackendKey, BackendSpec, Mode, VipKey, VipSpec};

fn rate_limit(l: CfgRateLimit) -> RateLimit {
    RateLimit {
        rate: l.rate,
        burst: l.burst,
    }
}

/// The VIPs `config` asks for. A VIP's own `synRateLimit` becomes its
/// per-service limit; the node-wide one is [`node_syn_rate_limit`].
pub fn from_config(config: &Config) -> Vec<VipSpec> {
    config
        .vips
        .iter()
        .map(|v| VipSpec {
            name: v.name.clone(),
            key: VipKey::range(
                v.address,
                v.ports.first,
                v.ports.last,
                v.protocol.ip_proto(),
            ),
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
                    // Port 0 (range VIPs): keep the client's destination
                    // port, in the config and the datapath alike.
                    key: BackendKey {
                        addr: b.address,
                        port: b.port,
                    },
                    weight: b.weight,
                    mac: b.mac.unwrap_or([0; 6]),
                })
                .collect(),
            affinity_client_ip: v.session_affinity == SessionAffinity::ClientIp,
            syn_rate_limit: v.syn_rate_limit.map(rate_limit),
            nat_fib: v.nat_forwarding == NatForwarding::Fib,
        })
        .collect()
}

/// The node-wide SYN rate limit `config` asks for (`settings.synRateLimit`),
/// for [`rivora_dataplane::Dataplane::set_node_syn_rate_limit`].
// TODO(daemon.rs): remove this allow once the daemon calls it after each
// successful apply (start and reload).
pub fn node_syn_rate_limit(config: &Config) -> Option<RateLimit> {
    config.settings.syn_rate_limit.map(rate_limit)
}

/// The outer source addresses of L3 DSR tunnels (`settings.tunnelSource`).
pub fn tunnel_source(config: &Config) -> (Option<std::net::Ipv4Addr>, Option<std::net::Ipv6Addr>) {
    let v4 = match config.settings.tunnel_source_v4 {
        Some(std::net::IpAddr::V4(a)) => Some(a),
        _ => None,
    };
    let v6 = match config.settings.tunnel_source_v6 {
        Some(std::net::IpAddr::V6(a)) => Some(a),
        _ => None,
    };
    (v4, v6)
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
                port_last: 80,
                proto: 17
            }
        );
        assert!(v.key.is_exact());
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
        assert!(!v.affinity_client_ip);
        assert_eq!(v.syn_rate_limit, None);
        assert_eq!(node_syn_rate_limit(&cfg), None);
    }

    #[test]
    fn ranges_affinity_and_rate_limits_map() {
        let cfg = rivora_config::parse(
            "settings:\n  synRateLimit: { rate: 20, burst: 30 }\nvips:\n  - name: range\n    address: 2001:db8::1\n    port: 8000-8099\n    sessionAffinity: clientIP\n    synRateLimit: { rate: 5 }\n    backends:\n      - { address: 2001:db8::11 }\n      - { address: 2001:db8::12, port: 9000 }\n  - name: all\n    address: 10.0.0.2\n    port: any\n    protocol: udp\n",
            "t.yaml",
        )
        .unwrap();
        let specs = from_config(&cfg);
        let range = &specs[0];
        assert_eq!(
            range.key,
            VipKey::range("2001:db8::1".parse().unwrap(), 8000, 8099, 6)
        );
        assert_eq!(range.key.to_string(), "[2001:db8::1]:8000-8099/tcp");
        assert!(range.affinity_client_ip);
        assert_eq!(range.syn_rate_limit, Some(RateLimit { rate: 5, burst: 5 }));
        assert!(range.backends[0].key.keeps_destination_port());
        assert_eq!(range.backends[1].key.port, 9000);
        let all = &specs[1];
        assert!(all.key.is_any_port());
        assert_eq!(all.key.to_string(), "10.0.0.2:any/udp");
        assert!(!all.affinity_client_ip);
        assert_eq!(
            node_syn_rate_limit(&cfg),
            Some(RateLimit {
                rate: 20,
                burst: 30
            })
        );
    }
}
