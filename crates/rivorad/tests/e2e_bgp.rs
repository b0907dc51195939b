//! End-to-end announcement of VIPs: the real rivorad on a shared L2 segment
//! (rivora-lab's `Segment`) answering ARP/NDP for VIPs configured on no
//! interface, and peering over BGP with a real BIRD 2 on the segment's
//! router, which installs the routes so a client behind it reaches the VIPs.

mod segment_lab;

use segment_lab::*;
use std::path::Path;
use std::time::{Duration, Instant};

use rivora_lab::segment::{SEG_LB_V4, SEG_LB_V6, SEG_ROUTER_V4};
use rivora_lab::topology::backend_v4;
use rivora_lab::{Netns, RoundReport, bgp_peers, link};

/// BIRD 2 in the router namespace: one passive eBGP session with the lb
/// (TCP-MD5), IPv4 and IPv6 over it, learned routes exported to the
/// router's kernel so the remote client's packets follow them. Started and
/// queried by `rivora_lab::bgp_peers`, as the GoBGP and FRR tests and the
/// rivora-bgp interop tests are.
struct Bird(bgp_peers::Bird);

impl Bird {
    fn start(ns: &Netns, dir: &Path) -> Bird {
        let config = format!(
            r#"router id {SEG_ROUTER_V4};
log stderr all;
protocol device {{ scan time 1; }}
protocol kernel k4 {{ ipv4 {{ import none; export all; }}; }}
protocol kernel k6 {{ ipv6 {{ import none; export all; }}; }}
protocol bgp rivora {{
    local {SEG_ROUTER_V4} as {ROUTER_AS};
    neighbor {SEG_LB_V4} as {OUR_AS};
    passive on;
    hold time 9;
    error wait time 1, 5;
    password "{PASSWORD}";
    ipv4 {{ import all; export none; }};
    ipv6 {{ import all; export none; }};
}}
"#
        );
        Bird(bgp_peers::Bird::start(ns, dir, &config).unwrap_or_else(|e| panic!("{e:#}")))
    }

    fn protocol(&self) -> String {
        self.0
            .cli(&["show", "protocols", "all", "rivora"])
            .unwrap_or_default()
    }

    fn established(&self) -> bool {
        self.0.protocol_established("rivora").is_ok()
    }

    /// `show route all protocol rivora` as prefix -> its block of lines.
    fn routes(&self) -> std::collections::BTreeMap<String, String> {
        self.0.routes("rivora").unwrap_or_default()
    }

    fn wait_routes(&self, what: &str, limit: Duration, pred: impl Fn(&[String]) -> bool) {
        wait_for(what, limit, || {
            let r: Vec<String> = self.routes().into_keys().collect();
            if pred(&r) {
                Ok(())
            } else {
                Err(format!("{r:?}"))
            }
        });
    }
}

fn assert_all_ok(r: &RoundReport, what: &str, log: &str) {
    assert!(
        r.all_ok(),
        "{what}: exchanges failed:\n{r}\nrivorad log:\n{log}"
    );
    assert_eq!(r.wrong_peer, 0, "{what}: {r}");
}

/// The lladdr of `addr` in `ns`'s neighbour table, if it has a usable one.
fn neighbour_mac(ns: &Netns, addr: &str) -> Option<String> {
    let out = ns.run(&["ip", "neigh", "show", addr]).ok()?;
    let words: Vec<&str> = out.split_whitespace().collect();
    let i = words.iter().position(|w| *w == "lladdr")?;
    words.get(i + 1).map(|m| m.to_string())
}

// ---------------------------------------------------------------------------

const L2_V4: &str = "10.200.0.100";
const L2_V6: &str = "fd00:200::100";
const L2_DARK: &str = "10.200.0.101";

/// (a) A client on the balancer's segment reaches an IPv4 and an IPv6 VIP
/// that no interface holds: rivorad's ARP/NDP responder answers for them
/// with the lb's MAC, which the client's neighbour table then shows. A VIP
/// with `advertise: false` is not answered for.
#[test]
fn l2_client_reaches_vips_answered_by_arp_and_ndp() {
    let mut lab = Lab::new("l2a", "BIRD", "/tmp/rve2e");
    let config_on = |iface: &str, with_v6: bool| {
        let mut s = format!("l2Announce: {{ announceInterval: 5s{iface} }}\nvips:\n");
        s.push_str(&vip("l2v4", L2_V4, &[1, 2], ""));
        if with_v6 {
            s.push_str(&vip("l2v6", L2_V6, &[1, 2], ""));
        }
        s.push_str(&vip("dark", L2_DARK, &[1], "    advertise: false\n"));
        s
    };
    let config = |with_v6: bool| config_on("", with_v6);
    lab.write_config(&config(true));
    lab.start(&["--metrics-listen", "127.0.0.1:9469"]);

    let lb_mac = link::mac(&lab.seg.lb, &lab.seg.lb_if).expect("lb MAC");
    let addrs = lab.seg.lb.run(&["ip", "addr"]).unwrap();
    for v in [L2_V4, L2_V6, L2_DARK] {
        assert!(
            !addrs.contains(v),
            "the VIP {v} must be on no interface:\n{addrs}"
        );
    }

    let sp = lab.speaker();
    assert!(sp.enabled && sp.active, "{sp:?}");
    assert_eq!(sp.interface.as_deref(), Some("eth0"));
    assert_eq!(sp.mac.as_deref(), Some(lb_mac.as_str()));
    let listed: Vec<&str> = sp.vips.iter().map(|v| v.address.as_str()).collect();
    assert_eq!(listed, [L2_V4, L2_V6], "advertise: false is not answered");

    let v4 = lab.tcp(&lab.seg.client, L2_V4, 200);
    assert_all_ok(&v4, "IPv4 VIP from the segment", &lab.log());
    let v6 = lab.tcp(&lab.seg.client, L2_V6, 200);
    assert_all_ok(&v6, "IPv6 VIP from the segment", &lab.log());
    eprintln!("segment client -> {L2_V4}: {v4}\nsegment client -> {L2_V6}: {v6}");
    assert!(v4.per_backend.len() == 2 && v6.per_backend.len() == 2);

    for v in [L2_V4, L2_V6] {
        assert_eq!(
            neighbour_mac(&lab.seg.client, v).as_deref(),
            Some(lb_mac.as_str()),
            "client's neighbour entry for {v}: {}",
            lab.seg.client.run(&["ip", "neigh"]).unwrap_or_default()
        );
    }
    let sp = lab.speaker();
    for v in &sp.vips {
        assert!(
            v.answering && v.replies_sent >= 1 && v.announcements_sent >= 1,
            "{v:?}"
        );
    }

    // Not advertised: nobody answers, the client cannot resolve it.
    let dark = lab.tcp(&lab.seg.client, L2_DARK, 2);
    assert_eq!(dark.ok, 0, "an unadvertised VIP was reached: {dark}");
    assert_eq!(neighbour_mac(&lab.seg.client, L2_DARK), None);

    // Reload without the IPv6 VIP: the responder drops it.
    lab.reload(&config(false));
    wait_for(
        "the responder without the IPv6 VIP",
        Duration::from_secs(5),
        || {
            let sp = lab.speaker();
            let listed: Vec<&str> = sp.vips.iter().map(|v| v.address.as_str()).collect();
            if listed == [L2_V4] {
                Ok(())
            } else {
                Err(format!("{sp:?}"))
            }
        },
    );
    let again = lab.tcp(&lab.seg.client, L2_V4, 50);
    assert_all_ok(&again, "IPv4 VIP after the reload", &lab.log());

    // An interface that does not exist: the error is shown and the running
    // responder keeps answering; once the interface exists, the next
    // reload starts the responder there.
    lab.reload(&config_on(", interface: late0", false));
    let sp = wait_for("the responder error", Duration::from_secs(5), || {
        let sp = lab.speaker();
        if sp.error.is_some() {
            Ok(sp)
        } else {
            Err(format!("{sp:?}"))
        }
    });
    assert_eq!(sp.interface.as_deref(), Some("eth0"), "{sp:?}");
    assert!(sp.active && sp.vips.len() == 1, "{sp:?}");
    let err = sp.error.unwrap_or_default();
    assert!(err.contains("late0"), "{err}");
    eprintln!("responder on a missing interface: {err}");
    link::veth(&lab.seg.lb, "late0", &lab.seg.switch, "late1").unwrap();
    link::up(&lab.seg.lb, "late0").unwrap();
    lab.reload(&config_on(", interface: late0", true));
    // The reload is counted before the announcements are reconfigured.
    let sp = wait_for("the responder on late0", Duration::from_secs(5), || {
        let sp = lab.speaker();
        if sp.interface.as_deref() == Some("late0") && sp.vips.len() == 2 {
            Ok(sp)
        } else {
            Err(format!("{sp:?}"))
        }
    });
    assert_eq!(sp.error, None);
    assert!(sp.active && sp.vips.iter().all(|v| v.answering), "{sp:?}");
    assert!(lab.stop(), "rivorad exits cleanly:\n{}", lab.log());
}

// ---------------------------------------------------------------------------

const WEB4: &str = "10.200.100.1";
const WEB6: &str = "fd00:200:100::1";
const DARK4: &str = "10.200.100.2";
const SOLO4: &str = "10.200.100.3";
const DEAD4: &str = "10.200.100.4";

fn bgp_config(password: &str, with_web6: bool) -> String {
    let check =
        "    healthCheck: { type: tcp, interval: 200ms, timeout: 100ms, fall: 2, rise: 1 }\n";
    let mut s = format!(
        "bgp:\n  localAS: {OUR_AS}\n  routerID: {SEG_LB_V4}\n  peers:\n    - address: {SEG_ROUTER_V4}\n      as: {ROUTER_AS}\n      password: \"{password}\"\n      holdTime: 9\n      nextHop: {{ ipv6: \"{SEG_LB_V6}\" }}\nvips:\n"
    );
    s.push_str(&vip(
        "web4",
        WEB4,
        &[1, 2],
        &format!("{check}    communities: [\"{OUR_AS}:100\", \"{OUR_AS}:200\"]\n"),
    ));
    if with_web6 {
        s.push_str(&vip("web6", WEB6, &[1, 2], check));
    }
    s.push_str(&vip(
        "dark4",
        DARK4,
        &[1],
        &format!("{check}    advertise: false\n"),
    ));
    s.push_str(&vip("solo4", SOLO4, &[3], check));
    // Nothing listens on b3:8081: its first probe fails, so it is never
    // announced (not even until that probe).
    s.push_str(&format!(
        "  - name: dead4\n    address: \"{DEAD4}\"\n    port: 80\n{check}    backends:\n      - {{ address: \"{}\", port: 8081 }}\n",
        backend_v4(3)
    ));
    s
}

/// How many withdrawals BIRD received on the session (all channels).
fn withdrawals_received(bird: &Bird) -> u64 {
    bird.protocol()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Import withdraws:"))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// (b, c) BIRD learns the /32 and /128 of every advertised VIP with a
/// healthy backend, with the lb as next hop and the VIP's communities; a
/// client behind the router reaches them over real TCP. A VIP whose only
/// backend dies is withdrawn within the probe timings and comes back with
/// it; removing a VIP from the YAML withdraws it; stopping rivorad
/// withdraws everything with a Cease, and a restart re-advertises.
#[test]
fn bird_learns_healthy_vips_and_a_remote_client_reaches_them() {
    let mut lab = Lab::new("bgp", "BIRD", "/tmp/rve2e");
    // Declared after the lab, so dropped (stopped) before its namespaces.
    let bird = Bird::start(&lab.seg.router, &lab.work);
    lab.write_config(&bgp_config(PASSWORD, true));
    lab.start(&["--metrics-listen", "127.0.0.1:9469"]);

    let all = [
        format!("{WEB4}/32"),
        format!("{WEB6}/128"),
        format!("{SOLO4}/32"),
    ];
    let t0 = Instant::now();
    bird.wait_routes("BIRD to learn the VIPs", Duration::from_secs(30), |r| {
        all.iter().all(|p| r.contains(p))
    });
    eprintln!(
        "BIRD had all three routes {:?} after rivorad was ready",
        t0.elapsed()
    );
    let routes = bird.routes();
    eprintln!(
        "birdc show route all protocol rivora:\n{}",
        routes.values().cloned().collect::<String>()
    );
    assert!(
        !routes.contains_key(&format!("{DARK4}/32")),
        "advertise: false must not be announced: {routes:?}"
    );
    assert_eq!(routes.len(), 3, "{routes:?}");
    // Wait until dead4's first probe has decided (its backend is down in
    // the API), then check that it was never announced: not in BIRD's table
    // and nothing withdrawn. (A withdrawal sent at that decision would still
    // be in flight here; the count after solo4's withdrawal below catches it.)
    let dead = backend_v4(3).to_string();
    wait_for(
        "rivorad to mark dead4's backend down",
        Duration::from_secs(10),
        || {
            let all = lab
                .rt
                .block_on(lab.client().backends())
                .map_err(|e| e.to_string())?;
            match all.iter().find(|b| b.address == dead && b.port == 8081) {
                Some(b) if b.state == "down" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    );
    assert!(!bird.routes().contains_key(&format!("{DEAD4}/32")));
    let p = bird.protocol();
    assert!(p.contains("Import withdraws:"), "{p}");
    assert_eq!(withdrawals_received(&bird), 0, "{p}");
    let web4 = &routes[&format!("{WEB4}/32")];
    assert!(web4.contains(&format!("via {SEG_LB_V4} on eth0")), "{web4}");
    assert!(web4.contains(&format!("BGP.as_path: {OUR_AS}")), "{web4}");
    assert!(
        web4.contains(&format!("BGP.community: ({OUR_AS},100) ({OUR_AS},200)")),
        "{web4}"
    );
    let web6 = &routes[&format!("{WEB6}/128")];
    assert!(web6.contains(&format!("via {SEG_LB_V6} on eth0")), "{web6}");
    // The router's kernel follows them: BIRD's kernel protocol exports
    // them on its own, after its BGP table has them, so wait for that.
    wait_for(
        "the router's kernel to route the VIPs via the lb",
        Duration::from_secs(10),
        || {
            let get4 = lab.seg.router.run(&["ip", "route", "get", WEB4]);
            let get6 = lab.seg.router.run(&["ip", "-6", "route", "get", WEB6]);
            match (&get4, &get6) {
                (Ok(r4), Ok(r6))
                    if r4.contains(&format!("via {SEG_LB_V4}"))
                        && r6.contains(&format!("via {SEG_LB_V6}")) =>
                {
                    Ok(())
                }
                _ => Err(format!("{get4:?} {get6:?}")),
            }
        },
    );

    let b = lab.bgp();
    assert_eq!(b.local_as, Some(OUR_AS));
    assert_eq!(b.peers.len(), 1);
    assert_eq!(b.peers[0].state, "Established", "{b:?}");
    assert_eq!(b.peers[0].prefixes_sent, 3, "{b:?}");
    let prefixes: Vec<&str> = b.routes.iter().map(|r| r.prefix.as_str()).collect();
    assert_eq!(
        prefixes,
        [WEB4, SOLO4, WEB6].map(|a| if a.contains(':') {
            format!("{a}/128")
        } else {
            format!("{a}/32")
        }),
        "{b:?}"
    );
    let web4_route = &b.routes[0];
    assert_eq!(web4_route.vips, ["web4"]);
    assert_eq!(
        web4_route.communities,
        [format!("{OUR_AS}:100"), format!("{OUR_AS}:200")]
    );
    let m = lab.metrics();
    let peer = format!("peer=\"{SEG_ROUTER_V4}:179\",peer_as=\"{ROUTER_AS}\"");
    for line in [
        format!("rivora_bgp_peer_established{{{peer}}} 1"),
        format!("rivora_bgp_peer_prefixes_advertised{{{peer}}} 3"),
    ] {
        assert!(m.contains(&line), "no `{line}` in the metrics:\n{m}");
    }

    // (b) the client behind the router, over real TCP.
    for v in [WEB4, WEB6, SOLO4] {
        let r = lab.tcp(&lab.seg.remote, v, 100);
        assert_all_ok(&r, &format!("remote client -> {v}"), &lab.log());
        eprintln!("remote client -> {v}: {r}");
    }

    // (c) the only backend of solo4 dies: withdrawn within the probe
    // timings (fall 2 x 200 ms + 100 ms timeout), then back.
    let stopped = Instant::now();
    lab.servers[2] = None;
    bird.wait_routes(
        "solo4 withdrawn after its backend stopped",
        Duration::from_secs(10),
        |r| !r.contains(&format!("{SOLO4}/32")),
    );
    let withdraw = stopped.elapsed();
    eprintln!(
        "solo4 withdrawn from BIRD {withdraw:?} after its only backend stopped (probe bound 500 ms)"
    );
    assert!(
        bird.routes().contains_key(&format!("{WEB4}/32")),
        "others stay"
    );
    // BGP messages arrive in order: had dead4 been announced and withdrawn
    // when its probe failed, that withdrawal would have arrived before
    // solo4's, which BIRD has now processed.
    assert_eq!(
        withdrawals_received(&bird),
        1,
        "only solo4 was ever withdrawn:\n{}",
        bird.protocol()
    );
    let started = Instant::now();
    lab.servers[2] = Some(start_server(&lab.seg, 3));
    bird.wait_routes(
        "solo4 re-announced after its backend came back",
        Duration::from_secs(10),
        |r| r.contains(&format!("{SOLO4}/32")),
    );
    eprintln!(
        "solo4 back in BIRD {:?} after its backend restarted",
        started.elapsed()
    );

    // Removing web6 from the YAML withdraws its /128.
    lab.reload(&bgp_config(PASSWORD, false));
    bird.wait_routes(
        "web6 withdrawn after its removal from the YAML",
        Duration::from_secs(10),
        |r| !r.contains(&format!("{WEB6}/128")) && r.contains(&format!("{WEB4}/32")),
    );
    assert!(
        bird.established(),
        "a VIP change does not restart the session"
    );

    // Stopping rivorad withdraws everything and says why.
    assert!(lab.stop(), "rivorad exits cleanly");
    wait_for("the session to close", Duration::from_secs(10), || {
        let p = bird.protocol();
        if !p.contains("Established") && bird.routes().is_empty() {
            Ok(())
        } else {
            Err(p)
        }
    });
    let p = bird.protocol();
    eprintln!("after rivorad stopped: {p}");
    assert!(p.contains("Administrative shutdown"), "{p}");

    // A restart re-establishes and re-advertises.
    lab.start(&["--metrics-listen", "127.0.0.1:9469"]);
    let t = Instant::now();
    wait_for(
        "the routes after a restart",
        Duration::from_secs(30),
        || {
            let r = bird.routes();
            if r.len() == 2
                && r.contains_key(&format!("{WEB4}/32"))
                && r.contains_key(&format!("{SOLO4}/32"))
            {
                Ok(())
            } else {
                Err(format!(
                    "{:?}\nAPI: {:?}\nrivorad log:\n{}",
                    r.keys(),
                    lab.bgp(),
                    lab.log()
                ))
            }
        },
    );
    eprintln!("re-advertised {:?} after the restart", t.elapsed());
    let r = lab.tcp(&lab.seg.remote, WEB4, 50);
    assert_all_ok(&r, "remote client after the restart", &lab.log());
}

/// (c) A wrong TCP-MD5 password (changed by a reload) keeps the session
/// down: BIRD never sees it, the routes are gone, `rivoractl bgp` (the API)
/// and the log say why; the right password brings everything back.
#[test]
fn a_wrong_md5_password_keeps_the_session_down_and_says_why() {
    let mut lab = Lab::new("md5", "BIRD", "/tmp/rve2e");
    // Declared after the lab, so dropped (stopped) before its namespaces.
    let bird = Bird::start(&lab.seg.router, &lab.work);
    lab.write_config(&bgp_config(PASSWORD, true));
    lab.start(&["--metrics-listen", "127.0.0.1:9469"]);
    bird.wait_routes("the routes", Duration::from_secs(30), |r| r.len() == 3);

    // The segment client routes the VIPs to the lb statically: its traffic
    // does not depend on BGP, so it shows whether restarting the speaker
    // disturbs the datapath.
    link::route(&lab.seg.client, "10.200.100.0/24", &SEG_LB_V4.to_string()).unwrap();
    let before = lab.tcp(&lab.seg.client, WEB4, 50);
    assert_all_ok(&before, "static client before the change", &lab.log());

    lab.reload(&bgp_config("not-the-password", true));
    let during = lab.tcp(&lab.seg.client, WEB4, 100);
    assert_all_ok(
        &during,
        "static client around the speaker restart",
        &lab.log(),
    );
    // The old speaker withdraws and leaves; the new one cannot connect.
    wait_for("the session to go down", Duration::from_secs(10), || {
        if !bird.established() && bird.routes().is_empty() {
            Ok(())
        } else {
            Err(bird.protocol())
        }
    });
    let peer = lab.wait_md5_hint();
    eprintln!(
        "wrong password: state {}, last error: {}",
        peer.state,
        peer.last_error.as_deref().unwrap_or("")
    );
    assert!(
        peer.state == "Connect" || peer.state == "Active",
        "{peer:?}"
    );
    assert_eq!(peer.uptime_secs, None);
    assert_eq!(peer.prefixes_sent, 0);
    let log = lab.log();
    assert!(
        log.contains("TCP-MD5") && log.contains("password"),
        "the log explains the MD5 mismatch:\n{log}"
    );
    assert!(!bird.established());

    // Fixed: the session and the routes come back.
    lab.reload(&bgp_config(PASSWORD, true));
    bird.wait_routes("the routes again", Duration::from_secs(40), |r| {
        r.len() == 3
    });
    assert_eq!(lab.bgp().peers[0].state, "Established");
}
