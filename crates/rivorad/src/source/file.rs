//! The static YAML source: [`from_config`] turns the validated file model
//! into the source-neutral [`DesiredState`] every subsystem reads (pure, no
//! I/O), and [`FileSource`] is the run loop's [`Source`] for `--config`:
//! the file re-read on SIGHUP and whenever it changes. This is the only
//! place that knows the YAML model; the Kubernetes source will produce the
//! same [`DesiredState`] from its own objects.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use rivora_bgp::{PeerConfig, SpeakerConfig};
use rivora_config::{
    CheckKind, Config, HealthCheck, Mode as CfgMode, NatForwarding, RateLimit as CfgRateLimit,
    SessionAffinity,
};
use rivora_dataplane::model::RateLimit;
use rivora_dataplane::{BackendKey, BackendSpec, Mode, VipKey, VipSpec};
use rivora_desired::{
    AnnouncePolicy, ApplyMode, BackendMeta, Community, DesiredState, DesiredVip, L2Settings,
    NodeSettings, Origin, TunnelSource,
};
use rivora_health::{ProbeKind, ProbeSpec};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tracing::info;

use super::watch::ConfigWatch;
use super::{Candidate, Programmed, Reading, Source, Trigger};

/// What a reload reports when the file is back to the text in force after
/// a rejected one: nothing to apply, and the failure is over.
const BACK_IN_FORCE: &str = "no change (the file is back to the configuration in force)";

/// `--config FILE` as a source: its token is the file's text, so a file
/// whose text is in force is not applied again unless forced.
pub struct FileSource {
    watch: ConfigWatch,
    hup: Option<Signal>,
}

impl FileSource {
    /// The source for `path` (nothing is read yet).
    pub fn new(path: &Path) -> Self {
        Self {
            watch: ConfigWatch::new(path),
            hup: None,
        }
    }
}

impl Source for FileSource {
    type Token = String;

    fn describe(&self) -> String {
        self.watch.path().display().to_string()
    }

    fn initial(&mut self) -> anyhow::Result<Candidate<String>> {
        let (config, text) = self
            .watch
            .read_and_parse()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(Candidate {
            desired: from_config(&config),
            // The file is the whole desired set: leftovers go at once.
            mode: ApplyMode::Prune,
            same_as_applied: false,
            token: text,
        })
    }

    fn listen(&mut self) -> anyhow::Result<()> {
        self.hup = Some(signal(SignalKind::hangup())?);
        Ok(())
    }

    async fn woken(&mut self) -> Trigger {
        match &mut self.hup {
            Some(hup) => {
                hup.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
        info!("SIGHUP: re-reading {}", self.describe());
        Trigger::Forced
    }

    async fn polled(&mut self) -> Option<Trigger> {
        if self.watch.changed() && self.watch.settled().await {
            info!("{} changed: re-reading", self.describe());
            Some(Trigger::Changed)
        } else {
            None
        }
    }

    fn read(&mut self, trigger: Trigger) -> Reading<String> {
        match self.watch.read_and_parse() {
            Err(e) => Reading::Invalid(e.to_string()),
            Ok((_, text)) if trigger == Trigger::Changed && self.watch.is_applied(&text) => {
                Reading::InForce(BACK_IN_FORCE)
            }
            Ok((config, text)) => Reading::New(Candidate {
                desired: from_config(&config),
                mode: ApplyMode::Prune,
                same_as_applied: self.watch.is_applied(&text),
                token: text,
            }),
        }
    }

    fn applied(&mut self, text: String, _: Programmed) {
        self.watch.mark_applied(text);
    }
}

fn rate_limit(l: CfgRateLimit) -> RateLimit {
    RateLimit {
        rate: l.rate,
        burst: l.burst,
    }
}

/// Everything `config` asks for, as the desired state of the node. A VIP's
/// own `synRateLimit` becomes its per-service limit; `settings.synRateLimit`
/// the node-wide one.
pub fn from_config(config: &Config) -> DesiredState {
    DesiredState {
        vips: config.vips.iter().map(vip).collect(),
        node: NodeSettings {
            syn_rate_limit: config.settings.syn_rate_limit.map(rate_limit),
            tunnel_source: tunnel_source(config),
            // Static VIPs have no backends on other nodes.
            snat: Default::default(),
            bgp: config.bgp.as_ref().map(speaker_config),
            l2: config.l2_announce.as_ref().map(|l| L2Settings {
                interface: l.interface.clone(),
                announce_interval: l.announce_interval,
            }),
        },
        classifier: config.classifier.clone(),
    }
}

fn vip(v: &rivora_config::VipConfig) -> DesiredVip {
    let spec = VipSpec {
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
        // A static VIP lists only real backends: nothing refused.
        reject_weight: 0,
        affinity_client_ip: v.session_affinity == SessionAffinity::ClientIp,
        syn_rate_limit: v.syn_rate_limit.map(rate_limit),
        nat_fib: v.nat_forwarding == NatForwarding::Fib,
        source_ranges: None,
        stateless_reverse: true,
        draining: Default::default(),
        snat: Default::default(),
        affinity_timeout: None,
    };
    DesiredVip {
        spec,
        origin: Origin::File,
        backends: v
            .backends
            .iter()
            .map(|b| BackendMeta {
                check: b
                    .health_check
                    .as_ref()
                    .map(|hc| probe_spec(hc, b.address, b.port)),
                ..BackendMeta::new(BackendKey {
                    addr: b.address,
                    port: b.port,
                })
            })
            .collect(),
        announce: AnnouncePolicy {
            advertise: v.advertise,
            communities: v.communities.iter().map(|c| Community(c.0)).collect(),
        },
    }
}

/// The probe a backend's effective `healthCheck` describes: to the
/// backend's own address, on the check's port if it names one.
fn probe_spec(hc: &HealthCheck, addr: IpAddr, port: u16) -> ProbeSpec {
    ProbeSpec {
        kind: match &hc.kind {
            CheckKind::Tcp => ProbeKind::Tcp,
            CheckKind::Http { path, expect, host } => ProbeKind::Http {
                path: path.clone(),
                expect: *expect,
                host: host.clone(),
            },
        },
        target: SocketAddr::new(addr, hc.port.unwrap_or(port)),
        interval: hc.interval,
        timeout: hc.timeout,
        rise: hc.rise,
        fall: hc.fall,
    }
}

/// The outer source addresses of L3 DSR tunnels (`settings.tunnelSource`).
fn tunnel_source(config: &Config) -> TunnelSource {
    TunnelSource {
        v4: match config.settings.tunnel_source_v4 {
            Some(IpAddr::V4(a)) => Some(a),
            _ => None,
        },
        v6: match config.settings.tunnel_source_v6 {
            Some(IpAddr::V6(a)) => Some(a),
            _ => None,
        },
    }
}

/// The speaker config the `bgp:` section describes.
fn speaker_config(bgp: &rivora_config::BgpConfig) -> SpeakerConfig {
    SpeakerConfig {
        local_as: bgp.local_as,
        router_id: bgp.router_id,
        peers: bgp
            .peers
            .iter()
            .map(|p| {
                let mut c = PeerConfig::new(p.address, p.remote_as);
                c.port = p.port;
                c.password = p.password.clone();
                c.hold_time = p.hold_time;
                c.next_hop_v4 = p.next_hop_v4;
                c.next_hop_v6 = p.next_hop_v6;
                c.local_address = p.local_address;
                c
            })
            .collect(),
    }
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
        let specs = from_config(&cfg).specs();
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
        assert_eq!(from_config(&cfg).node.syn_rate_limit, None);
    }

    #[test]
    fn ranges_affinity_and_rate_limits_map() {
        let cfg = rivora_config::parse(
            "settings:\n  synRateLimit: { rate: 20, burst: 30 }\nvips:\n  - name: range\n    address: 2001:db8::1\n    port: 8000-8099\n    sessionAffinity: clientIP\n    synRateLimit: { rate: 5 }\n    backends:\n      - { address: 2001:db8::11 }\n      - { address: 2001:db8::12, port: 9000 }\n  - name: all\n    address: 10.0.0.2\n    port: any\n    protocol: udp\n",
            "t.yaml",
        )
        .unwrap();
        let specs = from_config(&cfg).specs();
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
            from_config(&cfg).node.syn_rate_limit,
            Some(RateLimit {
                rate: 20,
                burst: 30
            })
        );
    }

    /// A file using every section: what each subsystem gets from it.
    const REPRESENTATIVE: &str = r#"
settings:
  synRateLimit: { rate: 50, burst: 100 }
  tunnelSource: { ipv4: 192.0.2.2, ipv6: "2001:db8::2" }
bgp:
  localAS: 65010
  routerID: 192.0.2.2
  peers:
    - { address: 192.0.2.1, as: 65000 }
l2Announce: { announceInterval: 30s }
vips:
  - name: web
    address: 10.0.0.1
    port: 80
    communities: ["65010:200", "65010:100"]
    healthCheck: { type: http, path: /healthz, interval: 500ms, timeout: 200ms, rise: 1, fall: 2, expectStatus: 200-299, host: web.example }
    backends:
      - { address: 10.1.0.1, port: 8080 }
      - { address: 10.1.0.2, port: 8080, healthCheck: { type: tcp, port: 9000 } }
      - { address: 10.1.0.3, port: 8080, healthCheck: { type: none } }
  - name: tunnel
    address: 10.0.0.2
    port: 8000-8099
    mode: dsr-ipip
    backends:
      - { address: 10.1.0.1, mac: "02:00:00:00:00:01", healthCheck: { type: tcp, port: 8080 } }
  - name: quiet
    address: "2001:db8::10"
    port: 53
    protocol: udp
    advertise: false
    backends:
      - { address: "2001:db8:1::1" }
"#;

    fn key(addr: &str, port: u16) -> BackendKey {
        BackendKey {
            addr: addr.parse().unwrap(),
            port,
        }
    }

    #[test]
    fn a_representative_file_gives_each_subsystem_what_it_read_from_the_file() {
        let cfg = rivora_config::parse(REPRESENTATIVE, "t.yaml").unwrap();
        let d = from_config(&cfg);
        assert_eq!(
            d.validate(),
            Ok(()),
            "the file source keeps the model's rules"
        );

        // The dataplane: three VIPs in file order, modes as written.
        let shown: Vec<String> = d
            .specs()
            .iter()
            .map(|s| format!("{} {} {}", s.name, s.key, s.mode.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                "web 10.0.0.1:80/tcp nat",
                "tunnel 10.0.0.2:8000-8099/tcp dsr-ipip",
                "quiet [2001:db8::10]:53/udp nat",
            ]
        );
        assert!(d.vips.iter().all(|v| v.origin == Origin::File));
        assert_eq!(
            d.vips[1].spec.backends,
            vec![BackendSpec {
                key: key("10.1.0.1", 0),
                weight: 1,
                mac: [2, 0, 0, 0, 0, 1]
            }]
        );

        // The node: SYN limit, tunnel source, BGP and L2 settings.
        assert_eq!(
            d.node.syn_rate_limit,
            Some(RateLimit {
                rate: 50,
                burst: 100
            })
        );
        assert_eq!(
            d.node.tunnel_source,
            TunnelSource {
                v4: Some("192.0.2.2".parse().unwrap()),
                v6: Some("2001:db8::2".parse().unwrap()),
            }
        );
        let bgp = d.node.bgp.as_ref().expect("bgp section");
        assert_eq!(
            (bgp.local_as, bgp.router_id.to_string()),
            (65010, "192.0.2.2".into())
        );
        assert_eq!(
            bgp.peers,
            vec![PeerConfig::new("192.0.2.1".parse().unwrap(), 65000)]
        );
        assert_eq!(bgp.peers[0].port, 179, "the default port");
        assert_eq!(
            d.node.l2,
            Some(L2Settings {
                interface: None,
                announce_interval: std::time::Duration::from_secs(30),
            }),
            "no interface: rivorad's own"
        );
        assert!(d.has_nat_vip());
        assert!(d.has_ipv4_l3_dsr_vip(), "tunnel is IPv4 dsr-ipip");

        // The prober: the VIP's HTTP check inherited, a TCP override on
        // another port, `type: none` unchecked, a range backend probed on
        // its check's port.
        let checks = d.checks();
        let http = ProbeSpec {
            kind: ProbeKind::Http {
                path: "/healthz".into(),
                expect: (200, 299),
                host: Some("web.example".into()),
            },
            target: "10.1.0.1:8080".parse().unwrap(),
            interval: std::time::Duration::from_millis(500),
            timeout: std::time::Duration::from_millis(200),
            rise: 1,
            fall: 2,
        };
        let tcp = |target: &str| ProbeSpec {
            kind: ProbeKind::Tcp,
            target: target.parse().unwrap(),
            interval: std::time::Duration::from_secs(2),
            timeout: std::time::Duration::from_secs(1),
            rise: 2,
            fall: 3,
        };
        assert_eq!(checks.len(), 3, "{checks:?}");
        assert_eq!(checks[&key("10.1.0.1", 8080)], &http);
        assert_eq!(checks[&key("10.1.0.2", 8080)], &tcp("10.1.0.2:9000"));
        assert_eq!(checks[&key("10.1.0.1", 0)], &tcp("10.1.0.1:8080"));
        assert!(!checks.contains_key(&key("10.1.0.3", 8080)));
        assert!(!checks.contains_key(&key("2001:db8:1::1", 53)));

        // The announcer: advertise and communities per VIP (sorted, in the
        // wire form), and the addresses L2 answers for.
        let p = d.announce_policies();
        assert_eq!(
            p["web"],
            AnnouncePolicy {
                advertise: true,
                communities: vec![Community(65010 << 16 | 100), Community(65010 << 16 | 200)],
            }
        );
        assert!(p["tunnel"].advertise && p["tunnel"].communities.is_empty());
        assert!(!p["quiet"].advertise);
        let l2: Vec<String> = d.l2_addresses().iter().map(|a| a.to_string()).collect();
        assert_eq!(l2, ["10.0.0.1", "10.0.0.2"]);
    }

    #[test]
    fn speaker_config_maps_every_field() {
        let cfg = rivora_config::parse(
            "bgp:\n  localAS: 65010\n  routerID: 192.0.2.2\n  peers:\n    - { address: 192.0.2.1, as: 65000, port: 1179, password: pw, holdTime: 30, nextHop: { ipv4: 192.0.2.3, ipv6: \"2001:db8::3\" }, localAddress: 192.0.2.2 }\nvips: []\n",
            "t.yaml",
        )
        .unwrap();
        let sc = from_config(&cfg).node.bgp.expect("bgp section");
        assert_eq!(sc.local_as, 65010);
        assert_eq!(sc.router_id.to_string(), "192.0.2.2");
        let p = &sc.peers[0];
        assert_eq!(p.address.to_string(), "192.0.2.1");
        assert_eq!((p.remote_as, p.port, p.hold_time), (65000, 1179, 30));
        assert_eq!(p.password.as_deref(), Some("pw"));
        assert_eq!(p.next_hop_v4.unwrap().to_string(), "192.0.2.3");
        assert_eq!(p.next_hop_v6.unwrap().to_string(), "2001:db8::3");
        assert_eq!(p.local_address.unwrap().to_string(), "192.0.2.2");
        assert!(
            sc.validate().is_ok(),
            "what the config accepts, the speaker accepts"
        );
    }

    #[test]
    fn the_file_source_reads_applies_and_tells_what_is_in_force() {
        let dir = std::env::temp_dir().join(format!("rivorad-file-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("vips.yaml");
        let one = "vips:\n  - { name: a, address: 10.0.0.1, port: 80 }\n";
        let two = "vips:\n  - { name: b, address: 10.0.0.2, port: 80 }\n";
        std::fs::write(&path, one).unwrap();
        let mut src = FileSource::new(&path);
        assert_eq!(src.describe(), path.display().to_string());
        let first = src.initial().unwrap();
        assert_eq!(first.desired.vips[0].spec.name, "a");
        assert!(!first.same_as_applied);
        assert_eq!(first.token, one);
        assert_eq!(first.mode, ApplyMode::Prune, "the file is the whole truth");
        let held = Programmed {
            vips: 1,
            unclaimed: 0,
            refused: Vec::new(),
            classifier_refused: Vec::new(),
        };
        src.applied(first.token, held.clone());

        // The text in force: nothing to apply unless forced; forced, it is
        // applied again and said to be the same input.
        assert!(matches!(src.read(Trigger::Changed), Reading::InForce(n) if n == BACK_IN_FORCE));
        match src.read(Trigger::Forced) {
            Reading::New(c) => assert!(c.same_as_applied && c.desired.vips[0].spec.name == "a"),
            _ => panic!("a forced read of a valid file offers it"),
        }

        // A new text is offered until applied; an invalid one names the field.
        std::fs::write(&path, two).unwrap();
        let Reading::New(c) = src.read(Trigger::Changed) else {
            panic!("a changed file is offered");
        };
        assert!(!c.same_as_applied);
        assert_eq!(c.desired.vips[0].spec.name, "b");
        assert_eq!(c.mode, ApplyMode::Prune);
        src.applied(c.token, held);
        assert!(matches!(src.read(Trigger::Changed), Reading::InForce(_)));
        std::fs::write(
            &path,
            "vips:\n  - { name: c, address: 10.0.0.3, port: 0 }\n",
        )
        .unwrap();
        match src.read(Trigger::Changed) {
            Reading::Invalid(e) => assert!(e.contains("vips[0].port"), "{e}"),
            _ => panic!("an invalid file is refused"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_minimal_file_sets_no_node_settings() {
        let cfg = rivora_config::parse("vips: []\n", "t.yaml").unwrap();
        assert_eq!(from_config(&cfg), DesiredState::default());
    }
}
