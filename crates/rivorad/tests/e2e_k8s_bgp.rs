//! Issue 19, acceptance 1: announcing a cluster's VIPs by BGP from every node. Two nodes of
//! the Kubernetes lab (crates/lab cluster.rs, one pod each) run the real `rivorad --kubernetes
//! --announce bgp` against the real API server as the ServiceAccount of
//! deploy/rbac/rivorad.yaml (its Role bound in the test's stand-in for rivora-system, where the
//! password's Secret lives). The upstream router is a real BGP daemon in the lab's client
//! namespace, exporting what it learns to its kernel with ECMP; a client namespace behind it
//! (its own link, its own subnet) connects to the VIPs through it.
//!
//! With BIRD 2 (multipath through `merge paths`):
//! - ETP Cluster, pods on both nodes: BIRD holds both nodes' next hops for the VIP, its kernel
//!   an ECMP route, and the client's 600 connections all succeed, through both nodes;
//! - ETP Local with its pod on node 2 only: only node 2 announces it;
//! - node 1's rivorad SIGKILLed: BIRD drops its path within the hold time (printed), and new
//!   connections keep succeeding through node 2;
//! - TCP-MD5 from a Secret: the sessions come up with it; a wrong password in the Secret keeps
//!   them down with the hint in the node's API and report; the right one brings them back,
//!   all without restarting rivorad; a BGPPeer whose Secret is missing has no session and says
//!   so in the report; a BGPPeer added and removed reconfigures the speaker in place (the other
//!   session stays Established, its `since` unchanged).
//!
//! With FRR (bgpd alone, so its RIB is checked, not a kernel): the same announce (both next
//! hops, `maximum-paths`) and withdraw (the last endpoint gone) checks, and a Node labelled
//! `node.kubernetes.io/exclude-from-external-load-balancers` withdrawing (session kept), and a
//! node whose XDP link was detached behind its back withdrawing.
//!
//! Needs root and the test dependencies (scripts/build-testdeps.sh); installs bird2 and frr
//! when missing (rivora_lab::bgp_peers).

mod k8s_common;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use k8s_common::*;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, Patch, PatchParams};
use rivora_k8s_api::RivoraNode;
use rivora_lab::bgp_peers::{Bird, Frr};
use rivora_lab::cluster::{CLIENT_V4, Cluster};
use rivora_lab::{Netns, link, tcp_round};
use serde_json::json;

const ROUTER_AS: u32 = 64500;
const NODE_AS: u32 = 64512;
const PASSWORD: &str = "rivora-md5-k8s";
/// The hold time both sides propose (seconds): a dead node's path goes within it.
const HOLD: u64 = 9;
const FLOWS: usize = 600;
const TIMEOUT: Duration = Duration::from_secs(3);
/// The client behind the router, on a subnet of its own.
const BEHIND_V4: Ipv4Addr = Ipv4Addr::new(10, 221, 0, 2);
const BEHIND_GW_V4: Ipv4Addr = Ipv4Addr::new(10, 221, 0, 1);
const BEHIND_NET_V4: &str = "10.221.0.0/24";

/// The lab, its agents and the router's namespace extras of one test.
struct BgpLab {
    t: K8sTest,
    lab: Cluster,
    /// The client behind the router.
    behind: Netns,
    agents: Vec<NodeAgent>,
    /// The label value the test's BGPPeers select its Nodes by.
    selector: String,
    _servers: Vec<rivora_lab::IdentityServer>,
}

const SELECT_LABEL: &str = "rivora.test/bgp-lab";

impl BgpLab {
    async fn new(tag: &str) -> BgpLab {
        let t = K8sTest::new(tag).await;
        let lab = Cluster::build(tag, &[1, 1]).expect("building the cluster lab");
        let servers: Vec<_> = lab.nodes.iter().flat_map(identity_servers).collect();
        // The client behind the router (the lab's client namespace, where the BGP daemon
        // runs): its own link and subnet; the router forwards with an L4 ECMP hash, and the
        // nodes route that subnet back through the router.
        let behind = Netns::new(&format!("{tag}b")).unwrap();
        link::veth(&behind, "eth0", &lab.client, "behind0").unwrap();
        link::addr(&behind, "eth0", &format!("{BEHIND_V4}/24")).unwrap();
        link::addr(&lab.client, "behind0", &format!("{BEHIND_GW_V4}/24")).unwrap();
        link::up(&behind, "eth0").unwrap();
        link::up(&lab.client, "behind0").unwrap();
        behind
            .run(&[
                "ip",
                "route",
                "add",
                "default",
                "via",
                &BEHIND_GW_V4.to_string(),
            ])
            .unwrap();
        lab.client.sysctl("net.ipv4.ip_forward", "1").unwrap();
        lab.client
            .sysctl("net.ipv4.fib_multipath_hash_policy", "1")
            .unwrap();
        for n in &lab.nodes {
            n.ns.run(&[
                "ip",
                "route",
                "add",
                BEHIND_NET_V4,
                "via",
                &CLIENT_V4.to_string(),
            ])
            .unwrap();
        }
        let mut agents = Vec::new();
        for n in 1..=lab.nodes.len() {
            agents.push(t.agent(&lab, n).await);
        }
        let selector = t.ns.clone();
        for a in &agents {
            Api::<Node>::all(t.admin.clone())
                .patch(
                    &a.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {SELECT_LABEL: selector}}})),
                )
                .await
                .unwrap();
        }
        BgpLab {
            t,
            lab,
            behind,
            agents,
            selector,
            _servers: servers,
        }
    }

    fn node_v4(&self, n: usize) -> String {
        self.lab.node(n).unwrap().v4.to_string()
    }

    /// The password's Secret in the rivorad ServiceAccount's namespace.
    async fn secret(&self, password: &str) {
        let s: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "tor-md5", "namespace": self.t.sa_ns},
            "stringData": {"password": password},
        }))
        .unwrap();
        Api::<Secret>::namespaced(self.t.admin.clone(), &self.t.sa_ns)
            .patch(
                "tor-md5",
                &PatchParams::apply(FM).force(),
                &Patch::Apply(&s),
            )
            .await
            .unwrap();
    }

    /// A BGPPeer named `name` (unique to this test) for the router at `address`, selecting the
    /// test's Nodes, with the password from `secret` (a Secret in the rivorad namespace).
    async fn peer(&self, name: &str, address: IpAddr, secret: Option<&str>) -> String {
        let name = format!("{}-{name}", self.t.ns);
        let mut spec = json!({
            "address": address.to_string(),
            "peerASN": ROUTER_AS,
            "localASN": NODE_AS,
            "holdTimeSeconds": HOLD,
            "nodeSelector": {"matchLabels": {SELECT_LABEL: self.selector}},
        });
        if let Some(s) = secret {
            spec["passwordSecretRef"] = json!({"namespace": self.t.sa_ns, "name": s});
        }
        let p: rivora_k8s_api::BGPPeer = serde_json::from_value(json!({
            "apiVersion": "rivora.dev/v1alpha1", "kind": "BGPPeer",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        Api::<rivora_k8s_api::BGPPeer>::all(self.t.admin.clone())
            .patch(&name, &PatchParams::apply(FM).force(), &Patch::Apply(&p))
            .await
            .unwrap();
        name
    }

    async fn delete_peer(&self, name: &str) {
        let _ = Api::<rivora_k8s_api::BGPPeer>::all(self.t.admin.clone())
            .delete(name, &Default::default())
            .await;
    }

    fn start_agents(&mut self) {
        let ns = self.t.sa_ns.clone();
        for (agent, node) in self.agents.iter_mut().zip(&self.lab.nodes) {
            agent.start_in(&node.ns, &["--announce", "bgp", "--namespace", &ns]);
        }
    }

    /// An ETP Cluster or Local Service `name` at `vip` on TCP 80 -> 8080, with its slice of
    /// the pods of `on` (node numbers).
    async fn service(&self, name: &str, vip: &str, local: bool, on: &[usize]) {
        let ports = json!([{"name": "tcp", "port": 80, "protocol": "TCP", "targetPort": 8080}]);
        let extra = if local {
            json!({"externalTrafficPolicy": "Local"})
        } else {
            json!({})
        };
        self.t.service(name, vip, ports, extra).await;
        self.slice(name, on).await;
    }

    async fn slice(&self, name: &str, on: &[usize]) {
        let names: Vec<String> = on.iter().map(|n| self.t.node_name(*n)).collect();
        let eps: Vec<Ep> = on
            .iter()
            .zip(&names)
            .flat_map(|(n, node)| {
                self.lab.node(*n).unwrap().pods.iter().map(move |p| Ep {
                    addr: IpAddr::V4(p.v4),
                    node,
                    terminating: false,
                })
            })
            .collect();
        self.t
            .slice(
                name,
                &eps,
                json!([{"name": "tcp", "port": 8080, "protocol": "TCP"}]),
            )
            .await;
    }

    /// 600 connections from the client behind the router: every one answered by a pod, and
    /// (ETP Cluster, source translated) which nodes carried them.
    fn connections(&self, vip: &str) -> BTreeSet<IpAddr> {
        let target = SocketAddr::new(vip.parse().unwrap(), 80);
        let r = tcp_round(&self.behind, target, FLOWS, 16, TIMEOUT);
        assert!(r.all_ok(), "{r}");
        assert_eq!(r.wrong_peer, 0, "{r}");
        r.seen_by_backend.values().flatten().copied().collect()
    }

    /// Node `n`'s report.
    async fn report(&self, n: usize) -> Result<rivora_k8s_api::RivoraNodeStatus, String> {
        Api::<RivoraNode>::all(self.t.admin.clone())
            .get(&self.t.node_name(n))
            .await
            .map_err(|e| e.to_string())?
            .status
            .ok_or("no status yet".to_string())
    }

    /// What node `n`'s rivorad says about the sessions and its report writer, for a failed
    /// wait on the report: whether the speaker, the agent's feedback or the write lags.
    async fn node_view(&self, n: usize) -> String {
        let api = self.agents[n - 1].api();
        let peers = match api.bgp().await {
            Ok(b) => b
                .peers
                .iter()
                .map(|p| format!("{} {}", p.address, p.state))
                .collect::<Vec<_>>()
                .join(", "),
            Err(e) => format!("bgp: {e}"),
        };
        let writer = match api.status().await.map(|s| s.kubernetes) {
            Ok(Some(k)) => format!(
                "offered generation {}, report writes {} ok / {} failed, last error {:?}",
                k.offered_generation,
                k.node_report_writes,
                k.node_report_write_failures,
                k.node_report_error
            ),
            Ok(None) => "no kubernetes status".into(),
            Err(e) => format!("status: {e}"),
        };
        // A report write that gets no answer (seen: both nodes' writes unanswered for 20 s
        // while reads were answered): the API server's own account of its slow requests.
        let server = if writer.contains("no answer") {
            format!(
                "\n--- kube-apiserver (last 40 lines) ---\n{}",
                self.t.bed.apiserver_log_tail(40)
            )
        } else {
            String::new()
        };
        format!("speaker peers [{peers}]; {writer}{server}")
    }

    fn logs(&self) -> String {
        self.agents
            .iter()
            .map(|a| format!("--- {} ---\n{}", a.name, a.log()))
            .collect()
    }
}

/// BIRD 2 in the router namespace: a passive eBGP session with each node (TCP-MD5), learned
/// routes merged into ECMP routes in its kernel.
fn bird_config(lab: &BgpLab) -> String {
    let mut c = format!(
        r#"router id {CLIENT_V4};
log stderr all;
protocol device {{ scan time 1; }}
protocol kernel k4 {{ ipv4 {{ import none; export all; }}; merge paths on; }}
template bgp node {{
    local {CLIENT_V4} as {ROUTER_AS};
    passive on;
    hold time {HOLD};
    error wait time 1, 5;
    password "{PASSWORD}";
    ipv4 {{ import all; export none; }};
}}
"#
    );
    for n in 1..=2 {
        c.push_str(&format!(
            "protocol bgp node{n} from node {{ neighbor {} as {NODE_AS}; }}\n",
            lab.node_v4(n)
        ));
    }
    c
}

/// BIRD's paths for `prefix`: the next hops of its routes from the nodes' sessions.
fn bird_next_hops(bird: &Bird, prefix: &str) -> Result<BTreeSet<String>, String> {
    let mut hops = BTreeSet::new();
    for proto in ["node1", "node2"] {
        if let Some(block) = bird.routes(proto)?.get(prefix) {
            let via = block
                .split_whitespace()
                .skip_while(|w| *w != "via")
                .nth(1)
                .ok_or_else(|| format!("{proto}: no next hop in {block}"))?;
            hops.insert(via.to_string());
        }
    }
    Ok(hops)
}

/// The router kernel's next hops for `vip` (one line per path of an ECMP route).
fn kernel_next_hops(ns: &Netns, vip: &str) -> BTreeSet<String> {
    let out = ns
        .run(&["ip", "-4", "route", "show", vip])
        .unwrap_or_default();
    out.split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "via")
        .map(|w| w[1].to_string())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bird_ecmp_local_announcements_failover_and_md5_from_a_secret() {
    let mut l = BgpLab::new("kbgb").await;
    let dir = tempfile_dir("kbgb");
    let bird =
        Bird::start(&l.lab.client, &dir, &bird_config(&l)).unwrap_or_else(|e| panic!("{e:#}"));
    l.secret(PASSWORD).await;
    let tor = l.peer("tor", IpAddr::V4(CLIENT_V4), Some("tor-md5")).await;
    // A peer whose Secret does not exist: no session, and the report says why.
    let orphan = l
        .peer(
            "orphan",
            "10.220.0.3".parse().unwrap(),
            Some("no-such-secret"),
        )
        .await;
    let (n1, n2) = (l.node_v4(1), l.node_v4(2));
    let cluster_vip = "10.99.19.1";
    let local_vip = "10.99.19.2";
    l.service("web", cluster_vip, false, &[1, 2]).await;
    l.service("solo", local_vip, true, &[2]).await;
    l.start_agents();

    // 1. ETP Cluster: both nodes' next hops in BIRD and an ECMP route in its kernel.
    let t0 = Instant::now();
    wait_for("both nodes announce the ETP Cluster VIP", WAIT, || async {
        let hops = bird_next_hops(&bird, &format!("{cluster_vip}/32"))?;
        if hops == set(&[&n1, &n2]) {
            Ok(())
        } else {
            Err(format!("BIRD next hops {hops:?}\n{}", l.logs()))
        }
    })
    .await;
    eprintln!(
        "both paths in BIRD {:.1} s after the agents started",
        t0.elapsed().as_secs_f64()
    );
    wait_for("an ECMP route in the router's kernel", WAIT, || async {
        let hops = kernel_next_hops(&l.lab.client, cluster_vip);
        if hops == set(&[&n1, &n2]) {
            Ok(())
        } else {
            Err(format!(
                "kernel next hops {hops:?}: {}",
                l.lab.client.run(&["ip", "route"]).unwrap_or_default()
            ))
        }
    })
    .await;
    // ETP Cluster: a pod sees the client's own address on flows its own node carried, and
    // the carrying node's address on flows another node sent it. Node 1's address at a pod
    // (necessarily node 2's) proves node 1 carried flows, and the other way round.
    let client: IpAddr = IpAddr::V4(BEHIND_V4);
    let carried = l.connections(cluster_vip);
    let want: BTreeSet<IpAddr> = [n1.parse().unwrap(), n2.parse().unwrap(), client].into();
    assert_eq!(
        carried, want,
        "the router spreads the client's flows over both nodes"
    );
    eprintln!("{FLOWS}/{FLOWS} connections through both nodes");

    // 2. ETP Local with its only pod on node 2: node 2 announces it, node 1 never does.
    wait_for("node 2 announces the ETP Local VIP", WAIT, || async {
        let hops = bird_next_hops(&bird, &format!("{local_vip}/32"))?;
        if hops == set(&[&n2]) {
            Ok(())
        } else {
            Err(format!("BIRD next hops {hops:?}"))
        }
    })
    .await;
    let routes1: Vec<String> = l.agents[0]
        .api()
        .bgp()
        .await
        .unwrap()
        .routes
        .iter()
        .map(|r| r.prefix.clone())
        .collect();
    assert_eq!(
        routes1,
        [format!("{cluster_vip}/32")],
        "node 1 has no local endpoint of the ETP Local Service: it does not announce it"
    );
    l.connections(local_vip);

    // The reports: the session named by its BGPPeer, Established; the orphan refused.
    let r = wait_for("node 1's report shows its session", WAIT, || async {
        let s = l.report(1).await?;
        let a = s.announce.clone().ok_or("no announce report")?;
        match a.bgp_sessions.first() {
            Some(x) if x.state == "Established" && a.announced_routes == 1 => Ok(s),
            _ => Err(format!("{a:?}")),
        }
    })
    .await;
    let a = r.announce.as_ref().unwrap();
    assert_eq!(a.mode, "bgp");
    assert_eq!(a.bgp_sessions.len(), 1, "{a:?}");
    assert_eq!(a.bgp_sessions[0].peer, tor);
    assert_eq!(a.bgp_sessions[0].address, CLIENT_V4.to_string());
    assert!(a.bgp_sessions[0].since.is_some());
    assert_eq!(a.bgp_problems.len(), 1, "{a:?}");
    assert!(
        a.bgp_problems[0].contains(&orphan)
            && a.bgp_problems[0].contains("no-such-secret")
            && a.bgp_problems[0].contains("not found"),
        "{:?}",
        a.bgp_problems
    );
    let c = r
        .conditions
        .iter()
        .find(|c| c.type_ == "BGPEstablished")
        .expect("a BGPEstablished condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "PeersRefused")
    );
    // Another BGPPeer going away leaves the established session alone (the speaker is
    // reconfigured in place, not restarted).
    let since = a.bgp_sessions[0].since.clone();
    let uptime = l.agents[0].api().bgp().await.unwrap().peers[0].uptime_secs;
    l.delete_peer(&orphan).await;
    let after = wait_for(
        "BGPEstablished turns True without the orphan",
        WAIT,
        || async {
            let s = l.report(1).await?;
            match s.conditions.iter().find(|c| c.type_ == "BGPEstablished") {
                Some(c) if c.status == "True" => Ok(s),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let kept = &after.announce.as_ref().unwrap().bgp_sessions;
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].since, since, "the tor session was not restarted");
    let now = l.agents[0].api().bgp().await.unwrap().peers[0].uptime_secs;
    assert!(now >= uptime, "uptime {uptime:?} then {now:?}");
    // A BGPPeer added and removed (a router at the second client's address, where nothing
    // listens): the speaker is reconfigured in place both times; the tor session stays up.
    let extra = l.peer("extra", "10.220.0.3".parse().unwrap(), None).await;
    wait_for("node 1 peers with the extra BGPPeer too", WAIT, || async {
        let s = l.report(1).await?;
        let n = s.announce.map(|a| a.bgp_sessions.len()).unwrap_or(0);
        if n == 2 {
            Ok(())
        } else {
            Err(format!(
                "{n} sessions in the report (heartbeat {:?}); {}",
                s.heartbeat_time,
                l.node_view(1).await
            ))
        }
    })
    .await;
    l.delete_peer(&extra).await;
    let after = wait_for("node 1 drops the extra BGPPeer", WAIT, || async {
        let s = l.report(1).await?;
        let n = s
            .announce
            .as_ref()
            .map(|a| a.bgp_sessions.len())
            .unwrap_or(0);
        if n == 1 {
            Ok(s)
        } else {
            Err(format!(
                "{n} sessions in the report (heartbeat {:?}); {}",
                s.heartbeat_time,
                l.node_view(1).await
            ))
        }
    })
    .await;
    let kept = &after.announce.as_ref().unwrap().bgp_sessions;
    assert_eq!(kept[0].peer, tor);
    assert_eq!(kept[0].state, "Established");
    assert_eq!(kept[0].since, since, "the tor session was not restarted");
    assert!(bird.protocol_established("node1").is_ok());
    assert_eq!(
        l.agents[0]
            .log()
            .matches("peers reconfigured in place")
            .count(),
        2,
        "{}",
        l.agents[0].log()
    );
    let k = l.agents[0].kubernetes().await.unwrap();
    assert_eq!(k.announce, "bgp");
    assert_eq!(k.bgp_peers, std::slice::from_ref(&tor));

    // 3. SIGKILL node 1's rivorad: BIRD drops its path within the hold time; new connections
    //    keep succeeding through node 2.
    let killed = Instant::now();
    l.agents[0].kill();
    let dropped = wait_for(
        "BIRD drops node 1's path",
        Duration::from_secs(HOLD + 10),
        || async {
            let hops = bird_next_hops(&bird, &format!("{cluster_vip}/32"))?;
            if hops == set(&[&n2]) {
                Ok(killed.elapsed())
            } else {
                Err(format!("BIRD next hops {hops:?}"))
            }
        },
    )
    .await;
    eprintln!(
        "node 1 SIGKILLed: BIRD dropped its path after {:.1} s (hold time {HOLD} s)",
        dropped.as_secs_f64()
    );
    assert!(
        dropped <= Duration::from_secs(HOLD + 1),
        "within the hold time: {dropped:?}"
    );
    wait_for("the kernel route follows", WAIT, || async {
        let hops = kernel_next_hops(&l.lab.client, cluster_vip);
        if hops == set(&[&n2]) {
            Ok(())
        } else {
            Err(format!("{hops:?}"))
        }
    })
    .await;
    let carried = l.connections(cluster_vip);
    assert_eq!(
        carried,
        [n2.parse::<IpAddr>().unwrap(), client].into(),
        "only node 2 carries flows (node 1's pod sees node 2, node 2's pod the client)"
    );
    eprintln!("{FLOWS}/{FLOWS} new connections through node 2");

    // 4. A wrong password in the Secret: node 2's session goes down (no restart of rivorad)
    //    with the hint in its API and its report; the right one brings it back.
    l.secret("not-the-password").await;
    let hint = wait_for(
        "the MD5 hint in node 2's report",
        Duration::from_secs(40),
        || async {
            let s = l.report(2).await?;
            let a = s.announce.ok_or("no announce report")?;
            match a.bgp_sessions.first() {
                Some(x)
                    if x.state != "Established"
                        && x.last_error.as_deref().is_some_and(|e| e.contains("MD5")) =>
                {
                    Ok(x.clone())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    eprintln!(
        "wrong password: state {}, last error: {}",
        hint.state,
        hint.last_error.as_deref().unwrap_or("")
    );
    assert!(
        bird.protocol_established("node2").is_err(),
        "BIRD has no session with the wrong key"
    );
    let cond = l
        .report(2)
        .await
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "BGPEstablished")
        .unwrap();
    assert_eq!(cond.status, "False");
    assert!(cond.message.contains("MD5"), "{}", cond.message);
    l.secret(PASSWORD).await;
    wait_for(
        "the session with the right password again",
        Duration::from_secs(40),
        || async {
            let hops = bird_next_hops(&bird, &format!("{cluster_vip}/32"))?;
            if hops == set(&[&n2]) {
                Ok(())
            } else {
                Err(format!(
                    "BIRD next hops {hops:?}: {:?}",
                    bird.protocol_established("node2")
                ))
            }
        },
    )
    .await;
    assert!(
        l.agents[1].log().matches("rivorad ready").count() == 1,
        "never restarted"
    );

    // A deleted BGPPeer: node 2 closes the session (Cease) without a restart.
    l.delete_peer(&tor).await;
    wait_for("a deleted BGPPeer closes the session", WAIT, || async {
        match bird.protocol_established("node2") {
            Err(_) => Ok(()),
            Ok(o) => Err(o),
        }
    })
    .await;
    drop(bird);
    assert_lab_removed(l.lab);
}

/// FRR bgpd in the router namespace: passive eBGP with both nodes, TCP-MD5, ECMP.
fn frr_config(lab: &BgpLab) -> String {
    let mut c = format!(
        "frr defaults traditional\nhostname rivora-tor\nlog stdout informational\n!\nrouter bgp {ROUTER_AS}\n bgp router-id {CLIENT_V4}\n no bgp ebgp-requires-policy\n"
    );
    for n in 1..=2 {
        let a = lab.node_v4(n);
        c.push_str(&format!(
            " neighbor {a} remote-as {NODE_AS}\n neighbor {a} passive\n neighbor {a} password {PASSWORD}\n neighbor {a} timers 3 {HOLD}\n"
        ));
    }
    c.push_str(" !\n address-family ipv4 unicast\n  maximum-paths 8\n");
    for n in 1..=2 {
        c.push_str(&format!("  neighbor {} activate\n", lab.node_v4(n)));
    }
    c.push_str(" exit-address-family\nexit\n!\n");
    c
}

/// FRR's next hops for `prefix`, over every path it holds.
fn frr_next_hops(frr: &Frr, prefix: &str) -> Result<BTreeSet<String>, String> {
    let v = frr.json("show bgp ipv4 unicast json")?;
    Ok(v["routes"][prefix]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["nexthops"][0]["ip"].as_str().map(String::from))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frr_sees_every_node_announce_and_withdraw() {
    let mut l = BgpLab::new("kbgf").await;
    let dir = tempfile_dir("kbgf");
    let frr = Frr::start(&l.lab.client, &dir, &frr_config(&l)).unwrap_or_else(|e| panic!("{e:#}"));
    l.secret(PASSWORD).await;
    l.peer("tor", IpAddr::V4(CLIENT_V4), Some("tor-md5")).await;
    let (n1, n2) = (l.node_v4(1), l.node_v4(2));
    let vip = "10.99.19.11";
    l.service("web", vip, false, &[1, 2]).await;
    l.start_agents();
    let prefix = format!("{vip}/32");
    wait_for("FRR holds both nodes' paths", WAIT, || async {
        let hops = frr_next_hops(&frr, &prefix)?;
        if hops == set(&[&n1, &n2]) {
            Ok(())
        } else {
            Err(format!("FRR next hops {hops:?}\n{}", l.logs()))
        }
    })
    .await;
    // Node 1 labelled node.kubernetes.io/exclude-from-external-load-balancers: it withdraws
    // (its session stays up, announcing nothing); unlabelled, it announces again.
    let exclude = |on: bool| {
        json!({"metadata": {"labels": {
            "node.kubernetes.io/exclude-from-external-load-balancers":
                if on { json!("") } else { serde_json::Value::Null }
        }}})
    };
    for (on, want) in [(true, set(&[&n2])), (false, set(&[&n1, &n2]))] {
        Api::<Node>::all(l.t.admin.clone())
            .patch(
                &l.agents[0].name,
                &PatchParams::default(),
                &Patch::Merge(exclude(on)),
            )
            .await
            .unwrap();
        wait_for("FRR follows the exclusion label", WAIT, || async {
            let hops = frr_next_hops(&frr, &prefix)?;
            if hops == want {
                Ok(())
            } else {
                Err(format!("FRR next hops {hops:?}, want {want:?}"))
            }
        })
        .await;
        if on {
            // The report follows within its write interval.
            wait_for("node 1's report says it is excluded", WAIT, || async {
                let a = l.report(1).await?.announce.ok_or("no announce report")?;
                let up = a
                    .bgp_sessions
                    .first()
                    .is_some_and(|s| s.state == "Established");
                if a.excluded && up && a.announced_routes == 0 {
                    Ok(())
                } else {
                    Err(format!("{a:?}"))
                }
            })
            .await;
        }
    }

    // The last endpoint goes: both nodes withdraw.
    let gone = Instant::now();
    l.slice("web", &[]).await;
    wait_for("both nodes withdraw", WAIT, || async {
        let hops = frr_next_hops(&frr, &prefix)?;
        if hops.is_empty() {
            Ok(())
        } else {
            Err(format!("FRR next hops {hops:?}"))
        }
    })
    .await;
    eprintln!(
        "last endpoint gone: FRR had no path {:.2} s later",
        gone.elapsed().as_secs_f64()
    );
    // Back on node 2 only: node 2 announces again (ETP Cluster: it could forward anywhere,
    // so both do).
    l.slice("web", &[2]).await;
    wait_for("both announce again", WAIT, || async {
        let hops = frr_next_hops(&frr, &prefix)?;
        if hops == set(&[&n1, &n2]) {
            Ok(())
        } else {
            Err(format!("FRR next hops {hops:?}"))
        }
    })
    .await;
    // Node 1's XDP link detached behind its back (it serves nothing): it withdraws.
    detach_link(xdp_link_id(&l.agents[0]).await);
    wait_for("node 1 withdraws without a datapath", WAIT, || async {
        let hops = frr_next_hops(&frr, &prefix)?;
        if hops == set(&[&n2]) {
            Ok(())
        } else {
            Err(format!("FRR next hops {hops:?}"))
        }
    })
    .await;
    drop(frr);
    assert_lab_removed(l.lab);
}

/// A directory of this test's for the daemon's files.
fn tempfile_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("rivora-{}", rivora_kube_testbed::unique_name(tag)));
    std::fs::create_dir_all(&d).unwrap();
    d
}
