//! Interop tests against real BGP implementations from Debian: BIRD 2,
//! GoBGP and FRR. Each test builds two network namespaces joined by a veth,
//! runs the peer daemon (foreground, its own config, control socket and log
//! in a temp dir) in one and our speaker (own thread and tokio runtime) in
//! the other, and asserts on what the *daemon* learned: session state,
//! routes and their next hops and attributes, withdrawals, re-advertisement
//! after a restart of our speaker, and a session that stays down with a
//! wrong TCP-MD5 password.
//!
//! Why real daemons: they are what Rivora peers with in production, and
//! each has its own strictness; a speaker that only talks to itself proves
//! little. Needs root (fails loudly without); installs the daemons with
//! apt-get when they are missing. The daemons are started and queried by
//! `rivora_lab::bgp_peers`, as rivorad's end-to-end BGP tests do.

mod support;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use rivora_bgp::{PeerConfig, Prefix, SpeakerConfig};
use rivora_lab::bgp_peers::{Bird, Frr, GoBgp};
use support::*;

const OUR_AS: u32 = 65010;
const PEER_AS: u32 = 65000;
const PASSWORD: &str = "rivora-md5-secret";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn peer(address: &str, remote_as: u32) -> PeerConfig {
    PeerConfig::new(ip(address), remote_as)
}

fn speaker_config(local_as: u32, peers: Vec<PeerConfig>) -> SpeakerConfig {
    SpeakerConfig {
        local_as,
        router_id: US_V4.parse().unwrap(),
        peers,
    }
}

/// Waits until a wrong-password speaker has reported its connect timeout,
/// then checks it never got further than Connect/Active and said why.
fn assert_md5_mismatch_stays_down(host: &SpeakerHost) {
    let st = wait_for(
        "the TCP-MD5 hint in last_error",
        Duration::from_secs(12),
        || {
            let p = host.peers().remove(0);
            match &p.last_error {
                Some(e) if e.contains("MD5") => Ok(p),
                _ => Err(format!("{p:?}")),
            }
        },
    );
    assert!(
        st.state == "Connect" || st.state == "Active",
        "wrong password, yet {st:?}"
    );
    assert_eq!(st.uptime_secs, None);
    let log = host.logs.text();
    assert!(
        log.contains("timed out") && log.contains("TCP-MD5") && log.contains("password"),
        "the speaker's log should explain the MD5 mismatch:\n{log}"
    );
    eprintln!("wrong password -> {}: {}", st.state, st.last_error.unwrap());
}

// ---------------------------------------------------------------------------
// BIRD 2

/// Starts BIRD with `config` in the peer namespace, its files in the
/// lab's temp dir; panics (with its log) if it does not come up.
fn start_bird(lab: &Lab, config: &str) -> Bird {
    Bird::start(&lab.peer, lab.dir.path(), config).unwrap_or_else(|e| panic!("{e:#}"))
}

/// `Bird::routes` keyed by prefix (a line whose first word does not parse
/// as one starts no block); panics if `birdc` fails.
fn bird_routes(bird: &Bird, proto: &str) -> BTreeMap<Prefix, String> {
    bird.routes(proto)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .filter_map(|(p, block)| Some((p.parse().ok()?, block)))
        .collect()
}

/// Waits until BIRD's protocol `proto` is no longer Established and holds
/// no route from us; returns its `show protocols` line.
///
/// Why one wait for both: BIRD leaves Established when the session closes
/// and flushes the protocol's routes after that, asynchronously; checking
/// the table right after the state changed races with the flush. The
/// timeout names the state and the routes last seen.
fn wait_bird_down_and_empty(bird: &Bird, proto: &str) -> String {
    wait_for(
        "BIRD to notice the shutdown and flush our routes",
        Duration::from_secs(10),
        || {
            let state = bird.protocol_established(proto);
            let routes = bird_routes(bird, proto);
            match state {
                Err(out) if routes.is_empty() => Ok(out),
                s => Err(format!("{proto}: {s:?}, routes {routes:#?}")),
            }
        },
    )
}

fn bird_config(password: Option<&str>) -> String {
    let pw = password
        .map(|p| format!("    password \"{p}\";\n"))
        .unwrap_or_default();
    format!(
        r#"# BIRD 2 side of the Rivora BGP interop test.
router id {PEER_V4};
log stderr all;

protocol device {{ scan time 1; }}

# Session over IPv4 carrying IPv4 and IPv6 routes.
protocol bgp rivora_v4 {{
    local {PEER_V4} as {PEER_AS};
    neighbor {US_V4} as {OUR_AS};
    passive on;        # Rivora connects; it never listens
    hold time 30;
    error wait time 1, 5;
{pw}    ipv4 {{ import all; export none; }};
    ipv6 {{ import all; export none; }};
}}

# Session over IPv6 carrying both families too.
protocol bgp rivora_v6 {{
    local {PEER_V6} as {PEER_AS};
    neighbor {US_V6} as {OUR_AS};
    passive on;
    error wait time 1, 5;
    ipv4 {{ import all; export none; }};
    ipv6 {{ import all; export none; }};
}}
"#
    )
}

fn check_bird_route(block: &str, via: &str) {
    assert!(
        block.contains(&format!("via {via} on eth0")),
        "expected next hop {via}:\n{block}"
    );
    assert!(
        block.contains(&format!("BGP.as_path: {OUR_AS}")),
        "AS_PATH:\n{block}"
    );
    assert!(block.contains("BGP.origin: IGP"), "{block}");
}

#[test]
fn bird_ebgp_over_ipv4_and_ipv6() {
    let lab = Lab::new("bird");
    let bird = start_bird(&lab, &bird_config(None));
    // Our side has two addresses per family: pin the session sources.
    let mut v4 = peer(PEER_V4, PEER_AS);
    v4.local_address = Some(ip(US_V4));
    v4.next_hop_v6 = Some(US_V6_ALT.parse().unwrap()); // IPv6 routes over an IPv4 session
    let mut v6 = peer(PEER_V6, PEER_AS);
    v6.local_address = Some(ip(US_V6));
    v6.next_hop_v4 = Some(US_V4_ALT.parse().unwrap()); // IPv4 routes over an IPv6 session
    let cfg = speaker_config(OUR_AS, vec![v4, v6]);

    let host = SpeakerHost::start(&lab.us, cfg.clone());
    host.set_routes(test_routes());
    let st = host.wait_established(Duration::from_secs(15));
    for proto in ["rivora_v4", "rivora_v6"] {
        let out = wait_for("BIRD Established", Duration::from_secs(10), || {
            bird.protocol_established(proto)
        });
        eprintln!("birdc show protocols {proto}:\n{out}");
    }
    // Expected next hops: session address, or the configured one.
    let want = [
        ("rivora_v4", "203.0.113.10/32", US_V4),
        ("rivora_v4", "203.0.113.11/32", US_V4),
        ("rivora_v4", "2001:db8:100::10/128", US_V6_ALT),
        ("rivora_v4", "2001:db8:100::11/128", US_V6_ALT),
        ("rivora_v6", "203.0.113.10/32", US_V4_ALT),
        ("rivora_v6", "203.0.113.11/32", US_V4_ALT),
        ("rivora_v6", "2001:db8:100::10/128", US_V6),
        ("rivora_v6", "2001:db8:100::11/128", US_V6),
    ];
    let routes = |proto: &str| {
        wait_for("BIRD to have the routes", Duration::from_secs(10), || {
            let r = bird_routes(&bird, proto);
            if r.len() == 4 {
                Ok(r)
            } else {
                Err(format!("{r:#?}"))
            }
        })
    };
    for proto in ["rivora_v4", "rivora_v6"] {
        let r = routes(proto);
        for (p, prefix, via) in want.iter().filter(|w| w.0 == proto) {
            let block = &r[&prefix.parse::<Prefix>().unwrap()];
            check_bird_route(block, via);
            if prefix.ends_with("10/32") || prefix.ends_with("10/128") {
                assert!(
                    block.contains("BGP.community: (65010,100) (65010,200)"),
                    "{p} {prefix}:\n{block}"
                );
            }
        }
        eprintln!(
            "birdc show route all protocol {proto}:\n{}",
            bird.cli(&["show", "route", "all", "protocol", proto])
                .unwrap()
        );
    }
    assert!(st.iter().all(|p| p.prefixes_sent == 4), "{st:?}");

    // Withdraw one route of each family.
    host.set_routes(fewer_routes());
    for proto in ["rivora_v4", "rivora_v6"] {
        wait_for(
            "BIRD to drop the withdrawn routes",
            Duration::from_secs(10),
            || {
                let r = bird_routes(&bird, proto);
                let keys: Vec<String> = r.keys().map(|p| p.to_string()).collect();
                if keys == ["203.0.113.10/32", "2001:db8:100::10/128"] {
                    Ok(())
                } else {
                    Err(format!("{keys:?}"))
                }
            },
        );
    }
    eprintln!(
        "after withdrawal:\n{}",
        bird.cli(&["show", "route", "protocol", "rivora_v4"])
            .unwrap()
    );

    // Restart our speaker: shutdown withdraws and ceases, a new one comes back.
    host.shutdown();
    for proto in ["rivora_v4", "rivora_v6"] {
        let out = wait_bird_down_and_empty(&bird, proto);
        eprintln!("after our shutdown: {}", out.lines().last().unwrap_or(""));
    }
    let all = bird
        .cli(&["show", "protocols", "all", "rivora_v4"])
        .unwrap();
    assert!(
        all.contains("Administrative shutdown") || all.contains("shutting down"),
        "BIRD should have seen our Cease:\n{all}"
    );
    let host = SpeakerHost::start(&lab.us, cfg);
    host.set_routes(test_routes());
    host.wait_established(Duration::from_secs(20));
    for proto in ["rivora_v4", "rivora_v6"] {
        routes(proto);
    }
    host.shutdown();
    drop(bird);
}

#[test]
fn bird_tcp_md5() {
    let lab = Lab::new("bmd5");
    let bird = start_bird(&lab, &bird_config(Some(PASSWORD)));
    // The right password.
    let mut p = peer(PEER_V4, PEER_AS);
    p.local_address = Some(ip(US_V4));
    p.next_hop_v6 = Some(US_V6.parse().unwrap());
    p.password = Some(PASSWORD.into());
    let host = SpeakerHost::start(&lab.us, speaker_config(OUR_AS, vec![p.clone()]));
    host.set_routes(test_routes());
    host.wait_established(Duration::from_secs(15));
    let out = wait_for("BIRD Established with MD5", Duration::from_secs(10), || {
        bird.protocol_established("rivora_v4")
    });
    eprintln!(
        "with the right password: {}",
        out.lines().last().unwrap_or("")
    );
    wait_for("routes", Duration::from_secs(10), || {
        let n = bird_routes(&bird, "rivora_v4").len();
        if n == 4 { Ok(()) } else { Err(n.to_string()) }
    });
    host.shutdown();
    // Before the wrong password: the right one's session and routes are
    // gone, so the checks below are about the wrong one.
    wait_bird_down_and_empty(&bird, "rivora_v4");

    // A wrong password: the session stays down and we say why.
    p.password = Some("not-the-password".into());
    let host = SpeakerHost::start(&lab.us, speaker_config(OUR_AS, vec![p]));
    host.set_routes(test_routes());
    assert_md5_mismatch_stays_down(&host);
    assert!(bird.protocol_established("rivora_v4").is_err());
    assert!(bird_routes(&bird, "rivora_v4").is_empty());
    drop(host);
}

// ---------------------------------------------------------------------------
// GoBGP

/// Starts gobgpd with `config` in the peer namespace, its files in the
/// lab's temp dir; panics (with its log) if it does not come up.
fn start_gobgp(lab: &Lab, config: &str) -> GoBgp {
    GoBgp::start(&lab.peer, lab.dir.path(), config).unwrap_or_else(|e| panic!("{e:#}"))
}

/// `GoBgp::rib` keyed by prefix, as (next hop, attributes JSON); panics
/// if `gobgp` fails or prints something that is not JSON.
fn gobgp_rib(g: &GoBgp, family: &str) -> BTreeMap<Prefix, (String, serde_json::Value)> {
    g.rib(family)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|(p, path)| (p.parse().unwrap(), (path.next_hop, path.attrs)))
        .collect()
}

/// Waits until GoBGP's neighbour (us) is no longer established and its
/// global RIB holds none of our routes.
///
/// Why one wait for both: gobgpd changes the neighbour state and drops
/// its paths in separate steps of its own goroutines; checking the RIB
/// right after the state changed races with that. The timeout names the
/// state and the routes last seen.
fn wait_gobgp_down_and_empty(g: &GoBgp) {
    wait_for(
        "GoBGP to notice the shutdown and drop our routes",
        Duration::from_secs(10),
        || {
            let state = g.established(US_V4);
            let v4 = gobgp_rib(g, "ipv4");
            let v6 = gobgp_rib(g, "ipv6");
            match state {
                Err(_) if v4.is_empty() && v6.is_empty() => Ok(()),
                s => Err(format!("{s:?}, ipv4 {v4:?}, ipv6 {v6:?}")),
            }
        },
    );
}

fn gobgp_config(password: &str) -> String {
    format!(
        r#"# GoBGP side of the Rivora BGP interop test (iBGP).
[global.config]
  as = {PEER_AS}
  router-id = "{PEER_V4}"
  port = 179

[[neighbors]]
  [neighbors.config]
    neighbor-address = "{US_V4}"
    peer-as = {PEER_AS}
    auth-password = "{password}"
  [neighbors.transport.config]
    passive-mode = true        # Rivora connects; it never listens
  [neighbors.timers.config]
    hold-time = 30
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-unicast"
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv6-unicast"
"#
    )
}

fn ibgp_peer(password: &str) -> PeerConfig {
    let mut p = peer(PEER_V4, PEER_AS);
    p.local_address = Some(ip(US_V4));
    p.next_hop_v6 = Some(US_V6.parse().unwrap());
    p.password = Some(password.into());
    p
}

fn attr(attrs: &serde_json::Value, t: u64) -> Option<&serde_json::Value> {
    attrs.as_array().unwrap().iter().find(|a| a["type"] == t)
}

#[test]
fn gobgp_ibgp_with_md5() {
    let lab = Lab::new("gobg");
    let g = start_gobgp(&lab, &gobgp_config(PASSWORD));
    let cfg = speaker_config(PEER_AS, vec![ibgp_peer(PASSWORD)]);
    let host = SpeakerHost::start(&lab.us, cfg.clone());
    host.set_routes(test_routes());
    host.wait_established(Duration::from_secs(15));
    let out = wait_for("GoBGP Established", Duration::from_secs(10), || {
        g.established(US_V4)
    });
    eprintln!("gobgp neighbor {US_V4}:\n{out}");
    let rib = |family: &str, n: usize| {
        wait_for("GoBGP to have the routes", Duration::from_secs(10), || {
            let r = gobgp_rib(&g, family);
            if r.len() == n {
                Ok(r)
            } else {
                Err(format!("{r:?}"))
            }
        })
    };
    for (family, via) in [("ipv4", US_V4), ("ipv6", US_V6)] {
        let r = rib(family, 2);
        for (p, (nh, attrs)) in &r {
            assert_eq!(nh, via, "{p}: {attrs}");
            // iBGP: empty AS_PATH, LOCAL_PREF 100.
            let asp = attr(attrs, 2).expect("AS_PATH");
            assert!(
                asp["as_paths"].is_null() || asp["as_paths"].as_array().unwrap().is_empty(),
                "{p}: {asp}"
            );
            assert_eq!(attr(attrs, 5).expect("LOCAL_PREF")["value"], 100, "{p}");
            let comm = attr(attrs, 8);
            if p.to_string().contains("10/") {
                let c = &comm.expect("COMMUNITIES")["communities"];
                assert_eq!(
                    c,
                    &serde_json::json!([(65010u32 << 16) | 100, (65010u32 << 16) | 200]),
                    "{p}"
                );
            } else {
                assert!(comm.is_none(), "{p}: {attrs}");
            }
        }
        eprintln!(
            "gobgp global rib -a {family}:\n{}",
            g.cli(&["global", "rib", "-a", family]).unwrap()
        );
    }

    // Withdraw one route per family.
    host.set_routes(fewer_routes());
    rib("ipv4", 1);
    rib("ipv6", 1);
    eprintln!(
        "after withdrawal:\n{}{}",
        g.cli(&["global", "rib", "-a", "ipv4"]).unwrap(),
        g.cli(&["global", "rib", "-a", "ipv6"]).unwrap()
    );

    // Restart our speaker.
    host.shutdown();
    wait_gobgp_down_and_empty(&g);
    let host = SpeakerHost::start(&lab.us, cfg);
    host.set_routes(test_routes());
    host.wait_established(Duration::from_secs(20));
    rib("ipv4", 2);
    rib("ipv6", 2);
    host.shutdown();
    // Before the wrong password: the right one's session is gone, so "not
    // established" below is about the wrong one.
    wait_gobgp_down_and_empty(&g);

    // A wrong password.
    let host = SpeakerHost::start(
        &lab.us,
        speaker_config(PEER_AS, vec![ibgp_peer("wrong-password")]),
    );
    host.set_routes(test_routes());
    assert_md5_mismatch_stays_down(&host);
    assert!(g.established(US_V4).is_err());
    drop(host);
    drop(g);
}

// ---------------------------------------------------------------------------
// FRR

/// Starts FRR's bgpd with `config` in the peer namespace, its files in the
/// lab's temp dir; panics (with its log) if it does not come up.
fn start_frr(lab: &Lab, config: &str) -> Frr {
    Frr::start(&lab.peer, lab.dir.path(), config).unwrap_or_else(|e| panic!("{e:#}"))
}

/// `Frr::json`, panicking if `vtysh` fails or its answer is not JSON.
fn frr_json(frr: &Frr, command: &str) -> serde_json::Value {
    frr.json(command).unwrap_or_else(|e| panic!("{e}"))
}

/// The neighbor's `bgpState` (`?` if FRR does not say).
fn frr_state(frr: &Frr, neighbor: &str) -> String {
    let n = frr.neighbor(neighbor).unwrap_or_else(|e| panic!("{e}"));
    n["bgpState"].as_str().unwrap_or("?").to_string()
}

/// `Frr::routes` keyed by prefix: prefix -> first path.
fn frr_routes(frr: &Frr, family: &str) -> BTreeMap<Prefix, serde_json::Value> {
    frr.routes(family)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|(p, path)| (p.parse().unwrap(), path))
        .collect()
}

/// Waits until FRR has both noticed our shutdown (the neighbour is no
/// longer Established) and cleared the routes it learned from us.
///
/// Why one wait for both: bgpd leaves Established when it reads our Cease,
/// but it clears the session's routes afterwards, in its own time (a work
/// queue); a check of the RIB right after the state changed can still see
/// 203.0.113.10/32. The timeout names the state and the routes last seen.
fn wait_frr_down_and_empty(frr: &Frr) {
    wait_for(
        "FRR to notice the shutdown and clear our routes",
        Duration::from_secs(10),
        || {
            let s = frr_state(frr, US_V4);
            let v4 = frr_routes(frr, "ipv4");
            let v6 = frr_routes(frr, "ipv6");
            if s != "Established" && v4.is_empty() && v6.is_empty() {
                Ok(())
            } else {
                Err(format!("bgpState {s}, ipv4 {v4:?}, ipv6 {v6:?}"))
            }
        },
    );
}

fn frr_config(password: &str) -> String {
    format!(
        r#"! FRR bgpd side of the Rivora BGP interop test (eBGP).
frr defaults traditional
hostname rivora-peer
log stdout informational
!
router bgp {PEER_AS}
 bgp router-id {PEER_V4}
 no bgp ebgp-requires-policy
 neighbor {US_V4} remote-as {OUR_AS}
 neighbor {US_V4} passive
 neighbor {US_V4} password {password}
 neighbor {US_V4} timers 10 30
 !
 address-family ipv4 unicast
  neighbor {US_V4} activate
 exit-address-family
 !
 address-family ipv6 unicast
  neighbor {US_V4} activate
 exit-address-family
exit
!
"#
    )
}

fn ebgp_peer(password: &str) -> PeerConfig {
    let mut p = peer(PEER_V4, PEER_AS);
    p.local_address = Some(ip(US_V4));
    p.next_hop_v6 = Some(US_V6.parse().unwrap());
    p.password = Some(password.into());
    p
}

#[test]
fn frr_ebgp_with_md5() {
    let lab = Lab::new("frr");
    let frr = start_frr(&lab, &frr_config(PASSWORD));
    let cfg = speaker_config(OUR_AS, vec![ebgp_peer(PASSWORD)]);
    let host = SpeakerHost::start(&lab.us, cfg.clone());
    host.set_routes(test_routes());
    host.wait_established(Duration::from_secs(15));
    wait_for("FRR Established", Duration::from_secs(10), || {
        let s = frr_state(&frr, US_V4);
        if s == "Established" { Ok(()) } else { Err(s) }
    });
    eprintln!("{}", frr.cli("show bgp summary").unwrap());
    let routes = |family: &str, n: usize| {
        wait_for("FRR to have the routes", Duration::from_secs(10), || {
            let r = frr_routes(&frr, family);
            if r.len() == n {
                Ok(r)
            } else {
                Err(format!("{r:?}"))
            }
        })
    };
    for (family, via) in [("ipv4", US_V4), ("ipv6", US_V6)] {
        let r = routes(family, 2);
        for (p, path) in &r {
            assert_eq!(path["nexthops"][0]["ip"], via, "{p}: {path}");
            assert_eq!(path["path"], OUR_AS.to_string(), "{p}: {path}");
            assert_eq!(path["valid"], true, "{p}: {path}");
            let detail = frr_json(&frr, &format!("show bgp {family} unicast {p} json"));
            let comm = &detail["paths"][0]["community"]["string"];
            if p.to_string().contains("10/") {
                assert_eq!(comm, "65010:100 65010:200", "{p}: {detail}");
            } else {
                assert!(comm.is_null(), "{p}: {detail}");
            }
        }
        eprintln!(
            "show bgp {family} unicast:\n{}",
            frr.cli(&format!("show bgp {family} unicast")).unwrap()
        );
    }

    host.set_routes(fewer_routes());
    routes("ipv4", 1);
    routes("ipv6", 1);
    eprintln!(
        "after withdrawal:\n{}",
        frr.cli("show bgp ipv4 unicast").unwrap()
    );

    host.shutdown();
    wait_frr_down_and_empty(&frr);
    let n = frr_json(&frr, &format!("show bgp neighbors {US_V4} json"));
    eprintln!(
        "FRR after our shutdown: lastNotificationReason={} lastShutdownDescription={}",
        n[US_V4]["lastNotificationReason"], n[US_V4]["lastShutdownDescription"]
    );
    let host = SpeakerHost::start(&lab.us, cfg);
    host.set_routes(test_routes());
    host.wait_established(Duration::from_secs(20));
    routes("ipv4", 2);
    routes("ipv6", 2);
    host.shutdown();
    // Before the wrong password: the session of the right one is gone, so
    // "not Established" below is about the wrong one.
    wait_frr_down_and_empty(&frr);

    let host = SpeakerHost::start(
        &lab.us,
        speaker_config(OUR_AS, vec![ebgp_peer("wrong-password")]),
    );
    host.set_routes(test_routes());
    assert_md5_mismatch_stays_down(&host);
    assert_ne!(frr_state(&frr, US_V4), "Established");
    drop(host);
    drop(frr);
}
