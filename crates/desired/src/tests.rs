//! Unit tests of the model's derived views and rules, on hand-built states
//! (no source involved).

use std::net::SocketAddr;
use std::time::Duration;

use rivora_dataplane::{BackendKey, BackendSpec, Mode, VipKey, VipSpec};
use rivora_health::{ProbeKind, ProbeSpec};

use super::*;

fn key(s: &str) -> BackendKey {
    let a: SocketAddr = s.parse().unwrap();
    BackendKey {
        addr: a.ip(),
        port: a.port(),
    }
}

fn vip(name: &str, addr: &str, mode: Mode, backends: &[&str]) -> DesiredVip {
    let mut spec = VipSpec::new(
        name,
        VipKey::range(addr.parse().unwrap(), 80, 80, 6),
        backends
            .iter()
            .map(|b| BackendSpec {
                key: key(b),
                weight: 1,
                mac: [0; 6],
            })
            .collect(),
    );
    spec.mode = mode;
    DesiredVip::new(spec, Origin::File)
}

fn tcp_check(target: &str, interval_ms: u64) -> ProbeSpec {
    ProbeSpec {
        kind: ProbeKind::Tcp,
        target: target.parse().unwrap(),
        interval: Duration::from_millis(interval_ms),
        timeout: Duration::from_millis(100),
        rise: 2,
        fall: 3,
    }
}

#[test]
fn new_vip_has_one_plain_entry_per_backend_and_is_advertised() {
    let v = vip(
        "a",
        "10.0.0.1",
        Mode::Nat,
        &["10.1.0.1:80", "10.1.0.2:8080"],
    );
    assert_eq!(
        v.backends,
        vec![
            BackendMeta::new(key("10.1.0.1:80")),
            BackendMeta::new(key("10.1.0.2:8080"))
        ]
    );
    assert!(
        v.backends
            .iter()
            .all(|b| b.check.is_none() && !b.terminating)
    );
    assert_eq!(
        v.announce,
        AnnouncePolicy {
            advertise: true,
            communities: vec![]
        }
    );
    assert!(v.backend(&key("10.1.0.2:8080")).is_some());
    assert!(v.backend(&key("10.1.0.3:80")).is_none());
}

#[test]
fn nat_and_ipv4_l3_dsr_are_told_apart() {
    let state = |vips: Vec<DesiredVip>| DesiredState {
        vips,
        node: NodeSettings::default(),
        classifier: Default::default(),
    };
    let s = state(vec![vip("a", "10.0.0.1", Mode::Dsr, &[])]);
    assert!(!s.has_nat_vip() && !s.has_ipv4_l3_dsr_vip());
    let s = state(vec![vip("a", "10.0.0.1", Mode::Nat, &[])]);
    assert!(s.has_nat_vip() && !s.has_ipv4_l3_dsr_vip());
    let s = state(vec![vip("a", "10.0.0.1", Mode::DsrGre, &[])]);
    assert!(!s.has_nat_vip() && s.has_ipv4_l3_dsr_vip());
    let s = state(vec![vip("a", "10.0.0.1", Mode::DsrIpip, &[])]);
    assert!(s.has_ipv4_l3_dsr_vip());
    // IPv6 L3 DSR needs no accept_local (an IPv4-only sysctl).
    let s = state(vec![vip("a", "fd00::1", Mode::DsrIpip, &[])]);
    assert!(!s.has_ipv4_l3_dsr_vip());
    assert!(!DesiredState::default().has_nat_vip());
}

#[test]
fn a_shared_backend_is_checked_once_and_l2_answers_each_address_once() {
    let mut a = vip("a", "10.0.0.1", Mode::Nat, &["10.1.0.1:80", "10.1.0.2:80"]);
    a.backends[0].check = Some(tcp_check("10.1.0.1:81", 500));
    let mut b = vip("b", "10.0.0.1", Mode::Nat, &["10.1.0.1:80"]);
    b.backends[0].check = Some(tcp_check("10.1.0.1:81", 500));
    let mut c = vip("c", "10.0.0.2", Mode::Nat, &[]);
    c.announce.advertise = false;
    c.announce.communities = vec![Community(65000 << 16 | 7)];
    let s = DesiredState {
        vips: vec![a, b, c],
        node: NodeSettings::default(),
        classifier: Default::default(),
    };
    assert_eq!(s.validate(), Ok(()));
    let checks = s.checks();
    assert_eq!(
        checks.len(),
        1,
        "one check for the shared backend: {checks:?}"
    );
    assert_eq!(
        checks[&key("10.1.0.1:80")].target,
        "10.1.0.1:81".parse().unwrap()
    );
    let l2: Vec<String> = s.l2_addresses().iter().map(|a| a.to_string()).collect();
    assert_eq!(
        l2,
        ["10.0.0.1"],
        "c is not advertised, a and b share one address"
    );
    let p = s.announce_policies();
    assert_eq!(p.len(), 3);
    assert!(!p["c"].advertise);
    assert_eq!(p["c"].communities[0].to_string(), "65000:7");
    let names: Vec<String> = s.specs().into_iter().map(|v| v.name).collect();
    assert_eq!(names, ["a", "b", "c"], "specs keep the source's order");
}

#[test]
fn validate_names_every_broken_rule() {
    let mut a = vip("a", "10.0.0.1", Mode::Nat, &["10.1.0.1:80"]);
    a.backends.push(BackendMeta::new(key("10.1.0.9:80"))); // not a backend of a
    a.backends.push(BackendMeta::new(key("10.1.0.1:80"))); // twice
    a.backends[0].check = Some(tcp_check("10.1.0.1:80", 500));
    let mut b = vip("b", "10.0.0.2", Mode::Nat, &["10.1.0.1:80", "10.1.0.3:80"]);
    b.backends[0].check = Some(tcp_check("10.1.0.1:80", 900)); // differs from a's
    b.backends[1].check = Some(tcp_check("10.0.0.2:80", 500)); // probes the VIP
    let s = DesiredState {
        vips: vec![a, b],
        node: NodeSettings::default(),
        classifier: Default::default(),
    };
    let problems = s.validate().unwrap_err();
    let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        text,
        [
            "VIP a: backend 10.1.0.9:80 has an entry but is not one of the VIP's backends",
            "VIP a: backend 10.1.0.1:80 has two entries",
            "backend 10.1.0.1:80 has different health checks in VIPs a and b; a backend is \
             probed once, so its VIPs must agree",
            "VIP b: the health check of backend 10.1.0.3:80 would probe 10.0.0.2:80, not the \
             backend's own address",
        ]
    );
}

#[test]
fn origins_and_communities_show_as_operators_read_them() {
    assert_eq!(Origin::File.to_string(), "file");
    let svc = |port_name: Option<&str>| {
        Origin::Service(ServiceRef {
            namespace: "shop".into(),
            name: "web".into(),
            port_name: port_name.map(str::to_string),
            uid: "0c9f".into(),
            resource_version: "42".into(),
        })
    };
    assert_eq!(
        svc(Some("https")).to_string(),
        "service shop/web port https"
    );
    assert_eq!(svc(None).to_string(), "service shop/web");
    assert_eq!(Community(65010 << 16 | 100).to_string(), "65010:100");
    assert_eq!(Community(0xffff_ffff).to_string(), "65535:65535");
}
