//! End-to-end BGP against GoBGP and FRR: the same rivorad-level behaviour
//! that `e2e_bgp.rs` shows with BIRD, with the real rivorad on the balancer
//! of rivora-lab's `Segment` and the peer daemon (gobgpd, or FRR's bgpd
//! alone) on the segment's router. For each peer: the session comes up and
//! the peer's RIB holds the /32 and /128 VIP routes with the balancer as
//! next hop; a VIP whose backends all stop is withdrawn (latency printed);
//! removing a VIP from the YAML withdraws it; a SIGTERM and a new start of
//! rivorad re-establish the session and re-advertise; a wrong TCP-MD5
//! password keeps the session down.
//!
//! Needs root (fails loudly without); installs Debian's `gobgpd` and `frr`
//! with apt-get when missing. The daemons are started and queried by
//! `rivora_lab::bgp_peers`, as the rivora-bgp interop tests
//! (`crates/bgp/tests/interop.rs`) do; this file has only their configs.

mod segment_lab;

use segment_lab::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rivora_lab::bgp_peers::{Frr, GoBgp};
use rivora_lab::segment::{SEG_LB_V4, SEG_LB_V6, SEG_ROUTER_V4};

const WEB4: &str = "10.200.100.1";
const WEB6: &str = "fd00:200:100::1";
const SOLO4: &str = "10.200.100.3";

/// What the tests need from a peer daemon.
trait Peer {
    fn name(&self) -> &'static str;
    /// Whether the session with the balancer is Established (Err: the
    /// daemon's answer, when it is not).
    fn established(&self) -> Result<String, String>;
    /// The routes learned from the balancer: prefix -> next hop, both
    /// families.
    fn routes(&self) -> Result<BTreeMap<String, String>, String>;
    /// The daemon's own RIB listing, for the test output.
    fn show(&self) -> String;
    /// The daemon's log, for a failure's message.
    fn daemon_log(&self) -> String;
}

// ---------------------------------------------------------------------------
// GoBGP

/// gobgpd's config for the router namespace: one passive eBGP session
/// with the lb (TCP-MD5), IPv4 and IPv6 unicast over it.
fn gobgp_config() -> String {
    format!(
        r#"[global.config]
  as = {ROUTER_AS}
  router-id = "{SEG_ROUTER_V4}"
  port = 179

[[neighbors]]
  [neighbors.config]
    neighbor-address = "{SEG_LB_V4}"
    peer-as = {OUR_AS}
    auth-password = "{PASSWORD}"
  [neighbors.transport.config]
    passive-mode = true
  [neighbors.timers.config]
    hold-time = 9
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-unicast"
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv6-unicast"
"#
    )
}

impl Peer for GoBgp {
    fn name(&self) -> &'static str {
        "GoBGP"
    }

    fn established(&self) -> Result<String, String> {
        GoBgp::established(self, &SEG_LB_V4.to_string())
    }

    /// `gobgp global rib` of both families: prefix -> next hop.
    fn routes(&self) -> Result<BTreeMap<String, String>, String> {
        let mut m = BTreeMap::new();
        for family in ["ipv4", "ipv6"] {
            for (prefix, path) in self.rib(family)? {
                m.insert(prefix, path.next_hop);
            }
        }
        Ok(m)
    }

    fn show(&self) -> String {
        let mut s = String::new();
        for family in ["ipv4", "ipv6"] {
            s.push_str(
                &self
                    .cli(&["global", "rib", "-a", family])
                    .unwrap_or_else(|e| e),
            );
        }
        s
    }

    fn daemon_log(&self) -> String {
        self.log_text()
    }
}

// ---------------------------------------------------------------------------
// FRR

/// FRR bgpd's config for the router namespace: one passive eBGP session
/// with the lb (TCP-MD5), IPv4 and IPv6 unicast over it.
fn frr_config() -> String {
    format!(
        r#"frr defaults traditional
hostname rivora-router
log stdout informational
!
router bgp {ROUTER_AS}
 bgp router-id {SEG_ROUTER_V4}
 no bgp ebgp-requires-policy
 neighbor {SEG_LB_V4} remote-as {OUR_AS}
 neighbor {SEG_LB_V4} passive
 neighbor {SEG_LB_V4} password {PASSWORD}
 neighbor {SEG_LB_V4} timers 3 9
 !
 address-family ipv4 unicast
  neighbor {SEG_LB_V4} activate
 exit-address-family
 !
 address-family ipv6 unicast
  neighbor {SEG_LB_V4} activate
 exit-address-family
exit
!
"#
    )
}

impl Peer for Frr {
    fn name(&self) -> &'static str {
        "FRR"
    }

    fn established(&self) -> Result<String, String> {
        let n = self.neighbor(&SEG_LB_V4.to_string())?;
        let state = n["bgpState"].as_str().unwrap_or("?").to_string();
        if state == "Established" {
            Ok(state)
        } else {
            Err(format!("bgpState {state}: {n}"))
        }
    }

    /// `show bgp FAMILY unicast` of both families: prefix -> first path's
    /// first next hop (the global one for IPv6).
    fn routes(&self) -> Result<BTreeMap<String, String>, String> {
        let mut m = BTreeMap::new();
        for family in ["ipv4", "ipv6"] {
            for (p, path) in Frr::routes(self, family)? {
                let nh = path["nexthops"][0]["ip"].as_str().unwrap_or("").to_string();
                m.insert(p, nh);
            }
        }
        Ok(m)
    }

    fn show(&self) -> String {
        let mut s = String::new();
        for family in ["ipv4", "ipv6"] {
            s.push_str(
                &self
                    .cli(&format!("show bgp {family} unicast"))
                    .unwrap_or_else(|e| e),
            );
        }
        s
    }

    fn daemon_log(&self) -> String {
        self.log_text()
    }
}

// ---------------------------------------------------------------------------
// The lab

/// A VIP on port 80 whose backends are `b{i}:8080`, with a fast TCP check.
fn vip(name: &str, addr: &str, backends: &[usize]) -> String {
    segment_lab::vip(
        name,
        addr,
        backends,
        "    healthCheck: { type: tcp, interval: 200ms, timeout: 100ms, fall: 2, rise: 1 }\n",
    )
}

fn bgp_config(password: &str, with_web6: bool) -> String {
    let mut s = format!(
        "bgp:\n  localAS: {OUR_AS}\n  routerID: {SEG_LB_V4}\n  peers:\n    - address: {SEG_ROUTER_V4}\n      as: {ROUTER_AS}\n      password: \"{password}\"\n      holdTime: 9\n      nextHop: {{ ipv6: \"{SEG_LB_V6}\" }}\nvips:\n"
    );
    s.push_str(&vip("web4", WEB4, &[1, 2]));
    if with_web6 {
        s.push_str(&vip("web6", WEB6, &[1, 2]));
    }
    s.push_str(&vip("solo4", SOLO4, &[3]));
    s
}

fn p4(a: &str) -> String {
    format!("{a}/32")
}

fn p6(a: &str) -> String {
    format!("{a}/128")
}

/// Waits until the peer's RIB satisfies `pred`, returning it.
fn wait_rib(
    peer: &dyn Peer,
    lab: &Lab,
    what: &str,
    limit: Duration,
    pred: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    let name = peer.name();
    wait_for(&format!("{name}: {what}"), limit, || match peer.routes() {
        Ok(r) if pred(&r) => Ok(r),
        Ok(r) => Err(format!(
            "{name} RIB {r:?}\nsession: {:?}\nrivorad API: {:?}\nrivorad log:\n{}\n{name} log:\n{}",
            peer.established(),
            lab.rivorad.as_ref().map(|_| lab.bgp()),
            lab.log(),
            peer.daemon_log()
        )),
        Err(e) => Err(e),
    })
}

/// Steps 1-5 of the issue's acceptance against `peer`, which runs in the
/// router namespace of `lab`.
fn announce_withdraw_reload_restart_md5(lab: &mut Lab, peer: &dyn Peer) {
    let name = peer.name();
    lab.write_config(&bgp_config(PASSWORD, true));
    lab.start(&[]);

    // 1. Established, the /32s and the /128 with the balancer as next hop.
    let t0 = Instant::now();
    let rib = wait_rib(
        peer,
        lab,
        "all three VIP routes",
        Duration::from_secs(30),
        |r| r.len() == 3,
    );
    eprintln!(
        "{name} had all three routes {:?} after rivorad was ready:\n{}",
        t0.elapsed(),
        peer.show()
    );
    let out = wait_for(
        &format!("{name} Established"),
        Duration::from_secs(5),
        || peer.established(),
    );
    eprintln!("{name} session: {}", out.lines().next().unwrap_or(""));
    let lb4 = SEG_LB_V4.to_string();
    let lb6 = SEG_LB_V6.to_string();
    assert_eq!(rib.get(&p4(WEB4)), Some(&lb4), "{name}: {rib:?}");
    assert_eq!(rib.get(&p4(SOLO4)), Some(&lb4), "{name}: {rib:?}");
    assert_eq!(rib.get(&p6(WEB6)), Some(&lb6), "{name}: {rib:?}");
    let b = lab.bgp();
    assert_eq!(b.peers.len(), 1, "{b:?}");
    assert_eq!(b.peers[0].state, "Established", "{b:?}");
    assert_eq!(b.peers[0].prefixes_sent, 3, "{b:?}");

    // 2. The only backend of solo4 stops: the health check marks it down
    // (fall 2 x 200 ms, 100 ms timeout) and the route is withdrawn.
    let stopped = Instant::now();
    lab.servers[2] = None;
    wait_rib(
        peer,
        lab,
        "solo4 withdrawn after its backend stopped",
        Duration::from_secs(10),
        |r| !r.contains_key(&p4(SOLO4)) && r.len() == 2,
    );
    let withdraw = stopped.elapsed();
    eprintln!(
        "{name}: solo4 withdrawn {withdraw:?} after its only backend stopped \
         (probe bound about 500 ms; RIB polled every 50 ms plus the CLI's time)"
    );
    let started = Instant::now();
    lab.servers[2] = Some(start_server(&lab.seg, 3));
    wait_rib(
        peer,
        lab,
        "solo4 re-announced after its backend came back",
        Duration::from_secs(10),
        |r| r.contains_key(&p4(SOLO4)),
    );
    eprintln!(
        "{name}: solo4 back {:?} after its backend restarted",
        started.elapsed()
    );

    // 3. Removing web6 from the YAML withdraws its /128, the session stays.
    let t = Instant::now();
    lab.reload(&bgp_config(PASSWORD, false));
    wait_rib(
        peer,
        lab,
        "web6 withdrawn after its removal from the YAML",
        Duration::from_secs(10),
        |r| !r.contains_key(&p6(WEB6)) && r.contains_key(&p4(WEB4)) && r.len() == 2,
    );
    eprintln!(
        "{name}: web6 withdrawn {:?} after the YAML without it was written",
        t.elapsed()
    );
    assert!(
        peer.established().is_ok(),
        "{name}: a VIP change does not restart the session"
    );

    // 4. SIGTERM: the session closes and the routes go; a new start
    // re-establishes and re-advertises.
    assert!(lab.stop(), "rivorad exits cleanly");
    wait_for(
        &format!("{name} to see the session close"),
        Duration::from_secs(10),
        || match (peer.established(), peer.routes()) {
            (Err(_), Ok(r)) if r.is_empty() => Ok(()),
            (s, r) => Err(format!("{s:?} {r:?}")),
        },
    );
    let t = Instant::now();
    lab.start(&[]);
    wait_rib(
        peer,
        lab,
        "the routes after a restart",
        Duration::from_secs(40),
        |r| r.len() == 2 && r.get(&p4(WEB4)) == Some(&lb4) && r.get(&p4(SOLO4)) == Some(&lb4),
    );
    eprintln!(
        "{name}: re-advertised {:?} counted from launching rivorad again (its start-up included)",
        t.elapsed()
    );
    wait_for(
        &format!("{name} Established after the restart"),
        Duration::from_secs(5),
        || peer.established(),
    );

    // 5. A wrong TCP-MD5 password (by a reload) keeps the session down;
    // the right one brings the routes back.
    lab.reload(&bgp_config("not-the-password", true));
    wait_for(
        &format!("{name} to lose the session"),
        Duration::from_secs(15),
        || match (peer.established(), peer.routes()) {
            (Err(_), Ok(r)) if r.is_empty() => Ok(()),
            (s, r) => Err(format!("{s:?} {r:?}")),
        },
    );
    let p = lab.wait_md5_hint();
    eprintln!(
        "{name}, wrong password: rivorad state {}, last error: {}",
        p.state,
        p.last_error.as_deref().unwrap_or("")
    );
    assert!(p.state == "Connect" || p.state == "Active", "{p:?}");
    assert_eq!(p.prefixes_sent, 0, "{p:?}");
    assert!(peer.established().is_err(), "{name}: session up");
    assert!(
        peer.routes().is_ok_and(|r| r.is_empty()),
        "{name}: routes without a session"
    );
    lab.reload(&bgp_config(PASSWORD, true));
    wait_rib(
        peer,
        lab,
        "the routes with the right password again",
        Duration::from_secs(40),
        |r| r.len() == 3,
    );
    assert!(lab.stop(), "rivorad exits cleanly");
}

#[test]
fn gobgp_learns_and_loses_vip_routes_from_rivorad() {
    let mut lab = Lab::new("gob", "GoBGP", "/tmp/rvpeer");
    // Dropped before the lab (its namespaces), also on failure.
    let peer = GoBgp::start(&lab.seg.router, &lab.work, &gobgp_config())
        .unwrap_or_else(|e| panic!("{e:#}"));
    announce_withdraw_reload_restart_md5(&mut lab, &peer);
}

#[test]
fn frr_learns_and_loses_vip_routes_from_rivorad() {
    let mut lab = Lab::new("frr", "FRR", "/tmp/rvpeer");
    // Dropped before the lab (its namespaces), also on failure.
    let peer =
        Frr::start(&lab.seg.router, &lab.work, &frr_config()).unwrap_or_else(|e| panic!("{e:#}"));
    announce_withdraw_reload_restart_md5(&mut lab, &peer);
}
