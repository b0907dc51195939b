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
//! apt-get when they are missing.

mod support;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use rivora_bgp::{PeerConfig, Prefix, SpeakerConfig};
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

struct Bird {
    daemon: Daemon,
    sock: String,
    birdc: std::path::PathBuf,
}

impl Bird {
    fn start(lab: &Lab, config: &str) -> Bird {
        let bird = ensure_tool("bird", "bird2");
        let birdc = ensure_tool("birdc", "bird2");
        let conf = lab.dir.join("bird.conf");
        std::fs::write(&conf, config).unwrap();
        let sock = lab.dir.join("bird.ctl").display().to_string();
        let mut cmd = Command::new(bird);
        cmd.arg("-f")
            .arg("-c")
            .arg(&conf)
            .arg("-s")
            .arg(&sock)
            .arg("-P")
            .arg(lab.dir.join("bird.pid"));
        let daemon = Daemon::spawn(&lab.peer, "bird", cmd, lab.dir.join("bird.log"));
        let mut b = Bird {
            daemon,
            sock,
            birdc,
        };
        wait_for("birdc to answer", Duration::from_secs(10), || {
            b.daemon.assert_running();
            b.cli(&["show", "status"])
        });
        b
    }

    /// `birdc -s SOCK ARGS...`; the control socket is a path, so this works
    /// from the root namespace.
    fn cli(&self, args: &[&str]) -> Result<String, String> {
        run(Command::new(&self.birdc)
            .arg("-s")
            .arg(&self.sock)
            .args(args))
    }

    fn protocol_established(&self, proto: &str) -> Result<String, String> {
        let out = self.cli(&["show", "protocols", proto])?;
        if out.contains("Established") {
            Ok(out)
        } else {
            Err(out)
        }
    }

    /// `show route all protocol PROTO` as prefix -> route block.
    fn routes(&self, proto: &str) -> BTreeMap<Prefix, String> {
        let out = self
            .cli(&["show", "route", "all", "protocol", proto])
            .unwrap();
        parse_bird_routes(&out)
    }
}

fn parse_bird_routes(out: &str) -> BTreeMap<Prefix, String> {
    let mut m: BTreeMap<Prefix, String> = BTreeMap::new();
    let mut cur: Option<Prefix> = None;
    for line in out.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if !line.starts_with(char::is_whitespace) && first.contains('/') {
            cur = first.parse().ok();
        }
        if let Some(p) = cur {
            let e = m.entry(p).or_default();
            e.push_str(line);
            e.push('\n');
        }
    }
    m
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
    let bird = Bird::start(&lab, &bird_config(None));
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
            let r = bird.routes(proto);
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
                let r = bird.routes(proto);
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
        let out = wait_for(
            "BIRD to notice the shutdown",
            Duration::from_secs(10),
            || match bird.protocol_established(proto) {
                Ok(o) => Err(o),
                Err(o) => Ok(o),
            },
        );
        assert!(bird.routes(proto).is_empty());
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
    let bird = Bird::start(&lab, &bird_config(Some(PASSWORD)));
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
        let n = bird.routes("rivora_v4").len();
        if n == 4 { Ok(()) } else { Err(n.to_string()) }
    });
    host.shutdown();

    // A wrong password: the session stays down and we say why.
    p.password = Some("not-the-password".into());
    let host = SpeakerHost::start(&lab.us, speaker_config(OUR_AS, vec![p]));
    host.set_routes(test_routes());
    assert_md5_mismatch_stays_down(&host);
    assert!(bird.protocol_established("rivora_v4").is_err());
    assert!(bird.routes("rivora_v4").is_empty());
    drop(host);
}

// ---------------------------------------------------------------------------
// GoBGP

/// gRPC port of gobgpd; per namespace, so parallel tests do not clash.
const GOBGP_API_PORT: u16 = 50051;

struct GoBgp<'a> {
    daemon: Daemon,
    ns: &'a rivora_lab::Netns,
    gobgp: std::path::PathBuf,
}

impl<'a> GoBgp<'a> {
    fn start(lab: &'a Lab, config: &str) -> GoBgp<'a> {
        let gobgpd = ensure_tool("gobgpd", "gobgpd");
        let gobgp = ensure_tool("gobgp", "gobgpd");
        let conf = lab.dir.join("gobgpd.toml");
        std::fs::write(&conf, config).unwrap();
        let mut cmd = Command::new(gobgpd);
        cmd.arg("-f")
            .arg(&conf)
            .args(["-t", "toml", "-p", "--log-level=info", "--pprof-disable"])
            .arg(format!("--api-hosts=127.0.0.1:{GOBGP_API_PORT}"));
        let daemon = Daemon::spawn(&lab.peer, "gobgpd", cmd, lab.dir.join("gobgpd.log"));
        let mut g = GoBgp {
            daemon,
            ns: &lab.peer,
            gobgp,
        };
        wait_for("gobgp to answer", Duration::from_secs(10), || {
            g.daemon.assert_running();
            g.cli(&["global"])
        });
        g
    }

    /// `gobgp -p PORT ARGS...`, inside the namespace (the API is on its
    /// loopback).
    fn cli(&self, args: &[&str]) -> Result<String, String> {
        let port = GOBGP_API_PORT.to_string();
        let mut argv = vec![self.gobgp.to_str().unwrap(), "-p", &port];
        argv.extend_from_slice(args);
        self.ns.run(&argv).map_err(|e| format!("{e:#}"))
    }

    fn established(&self, neighbor: &str) -> Result<String, String> {
        let out = self.cli(&["neighbor", neighbor])?;
        if out.contains("BGP state = established") || out.contains("BGP state = ESTABLISHED") {
            Ok(out)
        } else {
            Err(out)
        }
    }

    /// `gobgp global rib -a FAMILY -j` as prefix -> (next hop, attrs JSON).
    fn rib(&self, family: &str) -> BTreeMap<Prefix, (String, serde_json::Value)> {
        let out = self.cli(&["global", "rib", "-a", family, "-j"]).unwrap();
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
        let mut m = BTreeMap::new();
        if let Some(obj) = v.as_object() {
            for (prefix, paths) in obj {
                let path = &paths[0];
                let attrs = path["attrs"].clone();
                let nh = attrs
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|a| a["type"] == 3 || a["type"] == 14)
                    .map(|a| a["nexthop"].as_str().unwrap_or("").to_string())
                    .unwrap_or_default();
                m.insert(prefix.parse().unwrap(), (nh, attrs));
            }
        }
        m
    }
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
    let g = GoBgp::start(&lab, &gobgp_config(PASSWORD));
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
            let r = g.rib(family);
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
    wait_for(
        "GoBGP to notice the shutdown",
        Duration::from_secs(10),
        || match g.established(US_V4) {
            Ok(o) => Err(o),
            Err(o) => Ok(o),
        },
    );
    assert!(g.rib("ipv4").is_empty() && g.rib("ipv6").is_empty());
    let host = SpeakerHost::start(&lab.us, cfg);
    host.set_routes(test_routes());
    host.wait_established(Duration::from_secs(20));
    rib("ipv4", 2);
    rib("ipv6", 2);
    host.shutdown();

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

struct Frr {
    daemon: Daemon,
    vty_dir: std::path::PathBuf,
    vtysh: std::path::PathBuf,
}

impl Frr {
    /// Runs FRR's bgpd alone (`-Z`: no zebra, nothing installed in a
    /// kernel; `-S`: no privilege switching, we are root in a throwaway
    /// namespace), with its vty socket, pid file and config in the temp dir.
    fn start(lab: &Lab, config: &str) -> Frr {
        let vtysh = ensure_tool("vtysh", "frr");
        let bgpd = ensure_tool("bgpd", "frr");
        let conf = lab.dir.join("bgpd.conf");
        std::fs::write(&conf, config).unwrap();
        let vty_dir = lab.dir.join("frr");
        std::fs::create_dir_all(&vty_dir).unwrap();
        let mut cmd = Command::new(bgpd);
        cmd.args(["-Z", "-S", "-P", "0", "--log", "stdout"])
            .arg("-f")
            .arg(&conf)
            .arg("-i")
            .arg(lab.dir.join("bgpd.pid"))
            .arg("--vty_socket")
            .arg(&vty_dir);
        let daemon = Daemon::spawn(&lab.peer, "bgpd", cmd, lab.dir.join("bgpd.log"));
        let mut f = Frr {
            daemon,
            vty_dir,
            vtysh,
        };
        wait_for("vtysh to answer", Duration::from_secs(15), || {
            f.daemon.assert_running();
            f.cli("show bgp summary")
        });
        f
    }

    /// `vtysh --vty_socket DIR -d bgpd -c CMD` (a Unix socket path, so from
    /// the root namespace).
    fn cli(&self, command: &str) -> Result<String, String> {
        run(Command::new(&self.vtysh)
            .arg("--vty_socket")
            .arg(&self.vty_dir)
            .args(["-d", "bgpd", "-c", command]))
    }

    fn json(&self, command: &str) -> serde_json::Value {
        let out = self.cli(command).unwrap();
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{command}: {e}: {out}"))
    }

    fn state(&self, neighbor: &str) -> String {
        let v = self.json(&format!("show bgp neighbors {neighbor} json"));
        v[neighbor]["bgpState"].as_str().unwrap_or("?").to_string()
    }

    /// `show bgp FAMILY unicast json`: prefix -> first path.
    fn routes(&self, family: &str) -> BTreeMap<Prefix, serde_json::Value> {
        let v = self.json(&format!("show bgp {family} unicast json"));
        let mut m = BTreeMap::new();
        if let Some(obj) = v["routes"].as_object() {
            for (p, paths) in obj {
                m.insert(p.parse().unwrap(), paths[0].clone());
            }
        }
        m
    }
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
    let frr = Frr::start(&lab, &frr_config(PASSWORD));
    let cfg = speaker_config(OUR_AS, vec![ebgp_peer(PASSWORD)]);
    let host = SpeakerHost::start(&lab.us, cfg.clone());
    host.set_routes(test_routes());
    host.wait_established(Duration::from_secs(15));
    wait_for("FRR Established", Duration::from_secs(10), || {
        let s = frr.state(US_V4);
        if s == "Established" { Ok(()) } else { Err(s) }
    });
    eprintln!("{}", frr.cli("show bgp summary").unwrap());
    let routes = |family: &str, n: usize| {
        wait_for("FRR to have the routes", Duration::from_secs(10), || {
            let r = frr.routes(family);
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
            let detail = frr.json(&format!("show bgp {family} unicast {p} json"));
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
    wait_for(
        "FRR to notice the shutdown",
        Duration::from_secs(10),
        || {
            let s = frr.state(US_V4);
            if s != "Established" { Ok(()) } else { Err(s) }
        },
    );
    assert!(frr.routes("ipv4").is_empty() && frr.routes("ipv6").is_empty());
    let n = frr.json(&format!("show bgp neighbors {US_V4} json"));
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

    let host = SpeakerHost::start(
        &lab.us,
        speaker_config(OUR_AS, vec![ebgp_peer("wrong-password")]),
    );
    host.set_routes(test_routes());
    assert_md5_mismatch_stays_down(&host);
    assert_ne!(frr.state(US_V4), "Established");
    drop(host);
    drop(frr);
}
