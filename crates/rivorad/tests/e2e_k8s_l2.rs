//! Issue 19, acceptance 2 and 3: one L2 speaker behind a Lease. Three nodes of the Kubernetes
//! lab (crates/lab cluster.rs: nodes and a client on one bridge, one pod per node) run the real
//! `rivorad --kubernetes --announce l2` against the real API server as the ServiceAccount of
//! deploy/rbac/rivorad.yaml, whose Role (Leases) is bound in the test's stand-in for
//! rivora-system. The VIPs are in the segment's own subnets, so the client resolves them with
//! ARP and NDP as a router on the segment would.
//!
//! Evidence is independent of rivorad: a capture on the switch's port towards each node (what
//! each node sends, whatever it claims as source MAC), parsed with etherparse, for the whole
//! test; the client's neighbour table (`ip neigh`); connections from the client every 100 ms.
//!
//! - The holder answers; the client's entry points at its MAC.
//! - SIGKILL the holder's rivorad: a new node takes over within the failover budget
//!   (`LeaseTiming::failover_budget`, printed with the measured time), and the client's entry
//!   moves to the new holder's MAC by its gratuitous ARP / unsolicited NA, with no ARP request
//!   or solicitation from the client in between; connections are refused or time out for no
//!   longer than the budget (both families).
//! - Cut the new holder's link (its switch port down): it steps down (no carrier) and the third
//!   node takes over, again within the budget; when the link comes back it stays silent.
//! - Periodic refresh: the client's entry deleted (the client accepts gratuitous ARP and
//!   unsolicited NA, as routers that learn from them do), the next refresh restores it without
//!   the client asking; the switch's FDB entry for the holder's MAC, deleted, comes back too
//!   (MetalLB #2910).
//! - The holder's Node labelled `node.kubernetes.io/exclude-from-external-load-balancers`: it
//!   steps down at once, saying why; SIGTERM of the holder: it releases the Lease; both times
//!   the next node takes over well before a Lease could expire.
//! - Throughout, no two nodes answer for a VIP at once: the senders of every ARP reply,
//!   gratuitous ARP and NA for a VIP form one run per holder, in takeover order.
//!
//! Needs root and the test dependencies (scripts/build-testdeps.sh).

mod k8s_common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etherparse::{Icmpv6Type, NetSlice, SlicedPacket, TransportSlice};
use k8s_common::*;
use rivora_k8s_source::l2_lease::LeaseTiming;
use rivora_lab::cluster::Cluster;
use rivora_lab::sniff::{Frame, Sniffer};
use rivora_lab::{Netns, link};
use serde_json::json;

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 220, 0, 100);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x220, 0, 0, 0, 0, 0, 0x100);
/// The Lease's timing in this test (short, so failovers take seconds).
const TIMING: LeaseTiming = LeaseTiming {
    duration: Duration::from_secs(4),
    renew_deadline: Duration::from_secs(3),
    retry_period: Duration::from_millis(500),
};
/// `--l2-refresh-interval`.
const REFRESH: Duration = Duration::from_secs(4);

/// The lab, its three agents, the pods' servers and the capture.
struct L2Lab {
    t: K8sTest,
    lab: Cluster,
    agents: Vec<NodeAgent>,
    macs: Vec<String>,
    sniffer: Sniffer,
    _servers: Vec<rivora_lab::IdentityServer>,
}

impl L2Lab {
    async fn new(tag: &str) -> L2Lab {
        let t = K8sTest::new(tag).await;
        let lab = Cluster::build(tag, &[1, 1, 1]).expect("building the cluster lab");
        let servers: Vec<_> = lab.nodes.iter().flat_map(identity_servers).collect();
        let mut agents = Vec::new();
        for n in 1..=lab.nodes.len() {
            agents.push(t.agent(&lab, n).await);
        }
        let macs = lab
            .nodes
            .iter()
            .map(|n| link::mac(&n.ns, &lab.uplink).unwrap())
            .collect();
        // Every frame each node sends (its switch port receives it), and the client's.
        let sniffer = Sniffer::start(&lab.switch, &["pn1", "pn2", "pn3", "pc"]).unwrap();
        // The client learns neighbours from gratuitous ARP and unsolicited NA as a router on
        // the segment does (RFC 9131; Linux learns untracked NAs only on a forwarding
        // interface); without it Linux only updates entries it already has.
        lab.client
            .sysctl("net.ipv4.conf.eth0.arp_accept", "1")
            .unwrap();
        lab.client
            .sysctl("net.ipv6.conf.eth0.forwarding", "1")
            .unwrap();
        lab.client
            .sysctl("net.ipv6.conf.eth0.accept_untracked_na", "1")
            .unwrap();
        L2Lab {
            t,
            lab,
            agents,
            macs,
            sniffer,
            _servers: servers,
        }
    }

    fn start(&mut self, n: usize) {
        let ns = self.t.sa_ns.clone();
        let lease = format!("{}-speaker", self.t.ns);
        let duration = format!("{}s", TIMING.duration.as_secs());
        let renew = format!("{}ms", TIMING.renew_deadline.as_millis());
        let retry = format!("{}ms", TIMING.retry_period.as_millis());
        let refresh = format!("{}ms", REFRESH.as_millis());
        let node = &self.lab.nodes[n - 1];
        self.agents[n - 1].start_in(
            &node.ns,
            &[
                "--announce",
                "l2",
                "--namespace",
                &ns,
                "--l2-lease-name",
                &lease,
                "--l2-lease-duration",
                &duration,
                "--l2-renew-deadline",
                &renew,
                "--l2-retry-period",
                &retry,
                "--l2-refresh-interval",
                &refresh,
            ],
        );
    }

    /// The node (1-based) whose responder answers now, if exactly one does.
    async fn answering(&self, alive: &[usize]) -> Result<usize, String> {
        let mut on = Vec::new();
        for &n in alive {
            let s = self.agents[n - 1]
                .api()
                .speaker()
                .await
                .map_err(|e| e.to_string())?;
            if s.active {
                on.push(n);
            }
        }
        match on.as_slice() {
            [n] => Ok(*n),
            _ => Err(format!("answering: {on:?}")),
        }
    }

    /// The client's neighbour entry for `ip`: (lladdr, state).
    fn neigh(&self, ip: IpAddr) -> Option<(String, String)> {
        let out = self
            .lab
            .client
            .run(&["ip", "neigh", "show", &ip.to_string(), "dev", "eth0"])
            .ok()?;
        let words: Vec<&str> = out.split_whitespace().collect();
        let mac = words
            .windows(2)
            .find(|w| w[0] == "lladdr")
            .map(|w| w[1].to_string())?;
        Some((mac, words.last().unwrap_or(&"").to_string()))
    }

    fn mac_of(&self, n: usize) -> &str {
        &self.macs[n - 1]
    }

    fn logs(&self) -> String {
        self.agents
            .iter()
            .map(|a| format!("--- {} ---\n{}", a.name, a.log()))
            .collect()
    }
}

/// A frame about a VIP: an ARP reply or gratuitous ARP claiming it, or a neighbour
/// advertisement for it; or a request for it (ARP who-has, neighbour solicitation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Claim,
    Request,
}

/// What `f` says about `vip`, parsed with etherparse.
fn about(f: &[u8], vip: IpAddr) -> Option<Kind> {
    let p = SlicedPacket::from_ethernet(f).ok()?;
    match (vip, p.net.as_ref()) {
        (IpAddr::V4(v), Some(NetSlice::Arp(a))) => {
            let v4 = |b: &[u8]| -> Option<Ipv4Addr> {
                Some(Ipv4Addr::from(<[u8; 4]>::try_from(b).ok()?))
            };
            let spa = v4(a.sender_protocol_addr())?;
            let tpa = v4(a.target_protocol_addr())?;
            let op = a.operation().0;
            if spa == v && (op == 2 || tpa == v) {
                Some(Kind::Claim) // a reply, or a gratuitous request
            } else if tpa == v && op == 1 {
                Some(Kind::Request)
            } else {
                None
            }
        }
        (IpAddr::V6(v), Some(NetSlice::Ipv6(_))) => match p.transport {
            Some(TransportSlice::Icmpv6(icmp)) => {
                let payload = icmp.payload();
                let target = |o: usize| -> Option<Ipv6Addr> {
                    let b: [u8; 16] = payload.get(o..o + 16)?.try_into().ok()?;
                    Some(Ipv6Addr::from(b))
                };
                match icmp.icmp_type() {
                    Icmpv6Type::NeighborAdvertisement(_) if target(0) == Some(v) => {
                        Some(Kind::Claim)
                    }
                    Icmpv6Type::NeighborSolicitation if target(0) == Some(v) => Some(Kind::Request),
                    _ => None,
                }
            }
            _ => None,
        },
        _ => None,
    }
}

/// The node number of a switch port (`pn2` -> 2), None for the client's.
fn port_node(f: &Frame) -> Option<usize> {
    f.interface.strip_prefix("pn")?.parse().ok()
}

/// The senders of every claim on `vip` since `from`, as runs: [(node, first, last, count)].
fn claim_runs(
    frames: &[Frame],
    vip: IpAddr,
    from: Instant,
) -> Vec<(usize, Instant, Instant, usize)> {
    let mut runs: Vec<(usize, Instant, Instant, usize)> = Vec::new();
    for f in frames.iter().filter(|f| f.at >= from) {
        let Some(n) = port_node(f) else { continue };
        if about(&f.bytes, vip) != Some(Kind::Claim) {
            continue;
        }
        match runs.last_mut() {
            Some(r) if r.0 == n => {
                r.2 = f.at;
                r.3 += 1;
            }
            _ => runs.push((n, f.at, f.at, 1)),
        }
    }
    runs
}

/// Requests for `vip` sent by the client between `from` and `to`.
fn client_requests(frames: &[Frame], vip: IpAddr, from: Instant, to: Instant) -> usize {
    frames
        .iter()
        .filter(|f| f.interface == "pc" && f.at >= from && f.at <= to)
        .filter(|f| about(&f.bytes, vip) == Some(Kind::Request))
        .count()
}

/// Connects to `target` every 100 ms (300 ms timeout each) from `ns` until stopped; records
/// (when, succeeded).
struct Prober {
    stop: Arc<AtomicBool>,
    results: Arc<Mutex<Vec<(Instant, bool)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Prober {
    fn start(ns: &Netns, target: SocketAddr) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let results = Arc::new(Mutex::new(Vec::new()));
        let (s, r) = (Arc::clone(&stop), Arc::clone(&results));
        let thread = ns.enter_thread(move || {
            while !s.load(Ordering::Relaxed) {
                let at = Instant::now();
                let ok = TcpStream::connect_timeout(&target, Duration::from_millis(300)).is_ok();
                r.lock().unwrap().push((at, ok));
                std::thread::sleep(
                    (at + Duration::from_millis(100)).saturating_duration_since(Instant::now()),
                );
            }
        });
        Prober {
            stop,
            results,
            thread: Some(thread),
        }
    }

    /// The longest stretch from a first failure to the next success, among attempts since
    /// `from`, and the number of failed attempts.
    fn longest_outage(&self, from: Instant) -> (Duration, usize) {
        let r = self.results.lock().unwrap();
        let mut longest = Duration::ZERO;
        let mut failed = 0;
        let mut down_since: Option<Instant> = None;
        for &(at, ok) in r.iter().filter(|(at, _)| *at >= from) {
            if ok {
                if let Some(t) = down_since.take() {
                    longest = longest.max(at - t);
                }
            } else {
                failed += 1;
                down_since.get_or_insert(at);
            }
        }
        if let (Some(t), Some((last, _))) = (down_since, r.last()) {
            longest = longest.max(*last - t);
        }
        (longest, failed)
    }

    /// Whether the last attempt succeeded.
    fn last_ok(&self) -> bool {
        self.results.lock().unwrap().last().is_some_and(|r| r.1)
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Prints each prober's longest outage since `since` next to the failover budget, and
/// asserts it is within it.
fn assert_outages(event: &str, since: Instant, probers: &[(&str, &Prober)]) {
    let budget = TIMING.failover_budget();
    for (what, p) in probers {
        let (outage, failed) = p.longest_outage(since);
        eprintln!(
            "{event}, {what}: longest outage {:.2} s ({failed} failed attempts), budget {:.1} s",
            outage.as_secs_f64(),
            budget.as_secs_f64()
        );
        assert!(outage <= budget, "{what}: {outage:?} > {budget:?}");
    }
}

/// Waits for a node other than those in `not` to answer, and for the client's entries for
/// both VIPs to point at it; returns the node and when (after `since`) it answered.
async fn wait_takeover(
    l: &L2Lab,
    alive: &[usize],
    not: &[usize],
    since: Instant,
) -> (usize, Duration) {
    let budget = TIMING.failover_budget();
    let n = wait_for(
        "another node answers",
        budget + Duration::from_secs(5),
        || async {
            match l.answering(alive).await {
                Ok(n) if !not.contains(&n) => Ok(n),
                other => Err(format!("{other:?}\n{}", l.logs())),
            }
        },
    )
    .await;
    let answered = since.elapsed();
    let mac = l.mac_of(n).to_string();
    wait_for(
        "the client's entries point at the new holder",
        budget,
        || async {
            let (e4, e6) = (l.neigh(IpAddr::V4(VIP4)), l.neigh(IpAddr::V6(VIP6)));
            match (&e4, &e6) {
                (Some((m4, _)), Some((m6, _))) if *m4 == mac && *m6 == mac => Ok(()),
                _ => Err(format!("v4 {e4:?}, v6 {e6:?}, want {mac}")),
            }
        },
    )
    .await;
    eprintln!(
        "node {n} answers {:.2} s after the event; the client's entries moved {:.2} s after it",
        answered.as_secs_f64(),
        since.elapsed().as_secs_f64()
    );
    (n, answered)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_speaker_fails_over_within_the_budget_and_refreshes_neighbours() {
    let mut l = L2Lab::new("kl2").await;
    let ports = json!([{"name": "tcp", "port": 80, "protocol": "TCP", "targetPort": 8080}]);
    l.t.service(
        "web",
        &format!("{VIP4},{VIP6}"),
        ports,
        json!({
            "externalTrafficPolicy": "Cluster",
            "ipFamilyPolicy": "RequireDualStack",
            "ipFamilies": ["IPv4", "IPv6"],
        }),
    )
    .await;
    let names: Vec<String> = (1..=3).map(|n| l.t.node_name(n)).collect();
    let mut eps4 = Vec::new();
    let mut eps6 = Vec::new();
    for (node, name) in l.lab.nodes.iter().zip(&names) {
        for p in &node.pods {
            for (eps, addr) in [(&mut eps4, IpAddr::V4(p.v4)), (&mut eps6, IpAddr::V6(p.v6))] {
                eps.push(Ep {
                    addr,
                    node: name,
                    terminating: false,
                });
            }
        }
    }
    let ports8080 = json!([{"name": "tcp", "port": 8080, "protocol": "TCP"}]);
    l.t.slice("web", &eps4, ports8080.clone()).await;
    l.t.slice6("web", &eps6, ports8080).await;
    let t0 = Instant::now();
    for n in 1..=3 {
        l.start(n);
    }

    // 1. One holder; the client reaches both VIPs through it.
    let first = wait_for("one node answers", Duration::from_secs(30), || async {
        l.answering(&[1, 2, 3])
            .await
            .map_err(|e| format!("{e}\n{}", l.logs()))
    })
    .await;
    eprintln!(
        "node {first} holds the Lease {:.1} s after the agents started",
        t0.elapsed().as_secs_f64()
    );
    // No node took the Lease before its datapath was attached and its initial sync done (it
    // would have had to give it back at once): none released it at start.
    for (n, a) in l.agents.iter().enumerate() {
        let log = a.log();
        assert!(
            !log.contains("releasing the Lease"),
            "node {} took the Lease before it could serve, then released it:\n{log}",
            n + 1
        );
    }
    let v4 = SocketAddr::new(IpAddr::V4(VIP4), 80);
    let v6 = SocketAddr::new(IpAddr::V6(VIP6), 80);
    for target in [v4, v6] {
        wait_for(
            "the client connects to the VIP",
            Duration::from_secs(10),
            || async {
                let ok = l
                    .lab
                    .client
                    .within(|| {
                        TcpStream::connect_timeout(&target, Duration::from_millis(500)).is_ok()
                    })
                    .unwrap();
                if ok {
                    Ok(())
                } else {
                    Err(format!("{target} refused or timed out"))
                }
            },
        )
        .await;
    }
    for ip in [IpAddr::V4(VIP4), IpAddr::V6(VIP6)] {
        let e = l.neigh(ip).expect("an entry for the VIP");
        assert_eq!(e.0, l.mac_of(first), "{ip}: the holder's MAC");
    }
    let k = l.agents[first - 1].kubernetes().await.unwrap();
    assert_eq!(k.announce, "l2");
    assert_eq!(k.l2_holder.as_deref(), Some(names[first - 1].as_str()));
    for n in (1..=3).filter(|n| *n != first) {
        // Each node reads the Lease once a retry period (competing or not): its view follows
        // within one.
        wait_for(&format!("node {n}'s view of the holder"), WAIT, || async {
            let k = l.agents[n - 1].kubernetes().await?;
            if k.l2_holder.as_deref() == Some(names[first - 1].as_str()) {
                Ok(())
            } else {
                Err(format!("{:?}", k.l2_holder))
            }
        })
        .await;
        assert!(!l.agents[n - 1].api().speaker().await.unwrap().active);
    }

    // An ETP Local Service whose only endpoint is on another node than the holder: the
    // holder's report says it cannot serve it (rivora-controller turns that into the
    // Service's L2Reachable condition and an Event; crates/controller/tests/ipam_e2e.rs).
    let other = (1..=3).find(|n| *n != first).unwrap();
    l.t.service(
        "solo",
        "10.220.0.101",
        json!([{"name": "tcp", "port": 80, "protocol": "TCP", "targetPort": 8080}]),
        json!({"externalTrafficPolicy": "Local"}),
    )
    .await;
    let p = &l.lab.nodes[other - 1].pods[0];
    l.t.slice(
        "solo",
        &[Ep {
            addr: IpAddr::V4(p.v4),
            node: names[other - 1].as_str(),
            terminating: false,
        }],
        json!([{"name": "tcp", "port": 8080, "protocol": "TCP"}]),
    )
    .await;
    let want = vec![format!("{}/solo", l.t.ns)];
    wait_for("the holder reports what it cannot serve", WAIT, || async {
        let n = kube::Api::<rivora_k8s_api::RivoraNode>::all(l.t.admin.clone())
            .get(&names[first - 1])
            .await
            .map_err(|e| e.to_string())?;
        let a = n
            .status
            .and_then(|s| s.announce)
            .ok_or("no announce report")?;
        if a.l2_answering && a.l2_unserved == want {
            Ok(())
        } else {
            Err(format!("{a:?}"))
        }
    })
    .await;

    // From here the Service's one endpoint is the pod on the first holder's node: that node
    //    keeps routing to its pod when its rivorad dies, and no link cut below reaches it (a
    //    pod behind a cut link would fail the flows Maglev sends it until the
    //    controller-manager marked it not ready, which is not what this test is about).
    let only_first = |v6: bool| {
        let p = &l.lab.nodes[first - 1].pods[0];
        vec![Ep {
            addr: if v6 {
                IpAddr::V6(p.v6)
            } else {
                IpAddr::V4(p.v4)
            },
            node: names[first - 1].as_str(),
            terminating: false,
        }]
    };
    let slice_ports = json!([{"name": "tcp", "port": 8080, "protocol": "TCP"}]);
    l.t.slice("web", &only_first(false), slice_ports.clone())
        .await;
    l.t.slice6("web", &only_first(true), slice_ports).await;
    for a in &l.agents {
        wait_for("every node programs the one endpoint", WAIT, || async {
            let vips = a.vips().await?;
            let web = [VIP4.to_string(), VIP6.to_string()];
            let n: Vec<usize> = vips
                .iter()
                .filter(|v| web.contains(&v.address))
                .map(|v| v.backends.len())
                .collect();
            if n.len() == 2 && n.iter().all(|b| *b == 1) {
                Ok(())
            } else {
                Err(format!("{} backends per VIP: {n:?}", a.name))
            }
        })
        .await;
    }

    // 2. SIGKILL the holder's rivorad (its pins stay; its XDP link goes with the process, so
    //    the node routes the VIP's packets nowhere, and nothing answers ARP/NDP for it).
    let p4 = Prober::start(&l.lab.client, v4);
    let p6 = Prober::start(&l.lab.client, v6);
    std::thread::sleep(Duration::from_millis(500));
    // Still the holder after the Service changes above (a change must not move the Lease).
    assert_eq!(l.answering(&[1, 2, 3]).await, Ok(first));
    let killed = Instant::now();
    let killed_wall = std::time::SystemTime::now();
    l.agents[first - 1].kill();
    // The holder's last renewal, from the Lease itself (the nodes share this machine's clock).
    let lease = kube::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        l.t.admin.clone(),
        &l.t.sa_ns,
    )
    .get(&format!("{}-speaker", l.t.ns))
    .await
    .unwrap();
    let renewed = lease
        .spec
        .and_then(|s| s.renew_time)
        .map(|t| std::time::SystemTime::from(t.0))
        .expect("the holder's renewTime");
    let alive: Vec<usize> = (1..=3).filter(|n| *n != first).collect();
    let (second, answered) = wait_takeover(&l, &alive, &[first], killed).await;
    // A SIGKILLed holder releases nothing: the others wait until its last record is a lease
    // duration old on their clocks. They saw that record at the earliest when it was written,
    // so no one may take over before `renewTime + duration` (a renewal that came late on a
    // loaded machine makes that earlier than a retry period before the kill; 50 ms for the
    // timestamps' and the poll's granularity).
    let earliest = renewed + TIMING.duration - Duration::from_millis(50);
    let took = killed_wall + answered;
    assert!(
        took >= earliest,
        "taken over {answered:?} after the kill, {:?} before the Lease last renewed at \
         {renewed:?} could expire",
        earliest.duration_since(took).unwrap_or_default()
    );
    let moved = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        p4.last_ok() && p6.last_ok(),
        "connections through the new holder"
    );
    let frames = l.sniffer.frames();
    for ip in [IpAddr::V4(VIP4), IpAddr::V6(VIP6)] {
        let asked = client_requests(&frames, ip, killed, moved);
        assert_eq!(
            asked, 0,
            "{ip}: the client's entry moved by the announcement, not by asking"
        );
    }
    assert_outages(
        "SIGKILL of the holder",
        killed,
        &[("IPv4", &p4), ("IPv6", &p6)],
    );

    // 3. Cut the new holder's link: it has no carrier, steps down; the third node takes over.
    let third_expected: Vec<usize> = alive.iter().copied().filter(|n| *n != second).collect();
    let cut = Instant::now();
    link::down(&l.lab.switch, &format!("pn{second}")).unwrap();
    let (third, _) = wait_takeover(&l, &alive, &[second], cut).await;
    assert_eq!([third], third_expected.as_slice());
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        p4.last_ok() && p6.last_ok(),
        "connections through the third holder"
    );
    assert_outages(
        "link of the holder cut",
        cut,
        &[("IPv4", &p4), ("IPv6", &p6)],
    );
    let s = l.agents[second - 1].kubernetes().await.unwrap();
    assert!(
        s.l2_ineligible
            .as_deref()
            .is_some_and(|w| w.contains("carrier")),
        "node {second} says why it stepped down: {:?}",
        s.l2_ineligible
    );
    // The link comes back: the node that stepped down stays silent (the Lease is taken).
    let healed = Instant::now();
    link::up(&l.lab.switch, &format!("pn{second}")).unwrap();
    std::thread::sleep(REFRESH + Duration::from_secs(1));
    assert_eq!(l.answering(&alive).await.unwrap(), third);
    let frames = l.sniffer.frames();
    for ip in [IpAddr::V4(VIP4), IpAddr::V6(VIP6)] {
        let from_healed = claim_runs(&frames, ip, healed);
        assert!(
            from_healed.iter().all(|r| r.0 == third),
            "{ip}: only the holder claims the VIP after the link heals: {from_healed:?}"
        );
    }
    drop((p4, p6));

    // 4. Periodic refresh: entries deleted on the client and in the switch's FDB come back at
    //    the next refresh, without the client asking.
    let mac = l.mac_of(third).to_string();
    let deleted = Instant::now();
    for ip in [VIP4.to_string(), VIP6.to_string()] {
        l.lab
            .client
            .run(&["ip", "neigh", "del", &ip, "dev", "eth0"])
            .unwrap();
    }
    let _ = l.lab.switch.run(&[
        "bridge",
        "fdb",
        "del",
        &mac,
        "dev",
        &format!("pn{third}"),
        "master",
    ]);
    assert!(l.neigh(IpAddr::V4(VIP4)).is_none() && l.neigh(IpAddr::V6(VIP6)).is_none());
    wait_for(
        "the refresh restores the client's entries",
        REFRESH + Duration::from_secs(2),
        || async {
            let (e4, e6) = (l.neigh(IpAddr::V4(VIP4)), l.neigh(IpAddr::V6(VIP6)));
            match (&e4, &e6) {
                (Some((m4, _)), Some((m6, _))) if *m4 == mac && *m6 == mac => Ok(()),
                _ => Err(format!("v4 {e4:?}, v6 {e6:?}")),
            }
        },
    )
    .await;
    let restored = Instant::now();
    eprintln!(
        "refresh: the client's entries came back {:.2} s after deletion (refresh interval {:?})",
        (restored - deleted).as_secs_f64(),
        REFRESH
    );
    let frames = l.sniffer.frames();
    for ip in [IpAddr::V4(VIP4), IpAddr::V6(VIP6)] {
        assert_eq!(
            client_requests(&frames, ip, deleted, restored),
            0,
            "{ip}: restored without the client asking"
        );
    }
    let fdb = l
        .lab
        .switch
        .run(&["bridge", "fdb", "show", "br", "br0"])
        .unwrap();
    assert!(
        fdb.lines()
            .any(|line| line.starts_with(&mac) && line.contains(&format!("pn{third}"))),
        "the switch learnt the holder's MAC again: {fdb}"
    );

    // 5. The holder's Node gets node.kubernetes.io/exclude-from-external-load-balancers: it
    //    steps down at once (releasing the Lease) and says why; the other node takes over.
    let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(l.t.admin.clone());
    let label = |on: bool| {
        json!({"metadata": {"labels": {
            "node.kubernetes.io/exclude-from-external-load-balancers":
                if on { json!("") } else { serde_json::Value::Null }
        }}})
    };
    let excluded = Instant::now();
    nodes
        .patch(
            &names[third - 1],
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(label(true)),
        )
        .await
        .unwrap();
    let (fourth, answered) = wait_takeover(&l, &alive, &[third], excluded).await;
    assert_eq!(fourth, second);
    assert!(
        answered < TIMING.duration,
        "released, not expired: {answered:?}"
    );
    let why = l.agents[third - 1]
        .kubernetes()
        .await
        .unwrap()
        .l2_ineligible;
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("exclude-from-external-load-balancers")),
        "{why:?}"
    );
    nodes
        .patch(
            &names[third - 1],
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(label(false)),
        )
        .await
        .unwrap();
    wait_for("the label's removal is seen", WAIT, || async {
        match l.agents[third - 1].kubernetes().await?.l2_ineligible {
            None => Ok(()),
            Some(w) => Err(w),
        }
    })
    .await;

    // 6. SIGTERM the holder: it stops answering, releases the Lease, and the other node takes
    //    over at its next look, long before the Lease could have expired.
    let stopped = Instant::now();
    let log = l.agents[fourth - 1].stop();
    let (fifth, answered) = wait_takeover(&l, &[third], &[fourth], stopped).await;
    assert_eq!(fifth, third);
    assert!(
        answered < TIMING.duration,
        "a released Lease is taken at once, not after it expires: {answered:?}"
    );
    assert!(
        log.contains("releasing the Lease"),
        "node {fourth} says it released the Lease:\n{log}"
    );

    // 7. The whole test: one run of claims per holder, in takeover order; never two at once.
    let frames = l.sniffer.frames();
    for ip in [IpAddr::V4(VIP4), IpAddr::V6(VIP6)] {
        let runs = claim_runs(&frames, ip, t0);
        let order: Vec<usize> = runs.iter().map(|r| r.0).collect();
        eprintln!(
            "{ip}: claims by node, in order: {order:?} ({:?} frames)",
            runs.iter().map(|r| r.3).collect::<Vec<_>>()
        );
        assert_eq!(
            order,
            [first, second, third, fourth, fifth],
            "{ip}: {runs:?}"
        );
        for w in runs.windows(2) {
            assert!(w[0].2 < w[1].1, "{ip}: overlapping claims {w:?}");
        }
    }
    assert_lab_removed(l.lab);
}

/// Whether `r` failed with 403 Forbidden.
fn forbidden<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> bool {
    matches!(r, Err(kube::Error::Api(ref s)) if s.code == 403)
}

/// Acceptance 4: the shipped roles (deploy/rbac/rivorad.yaml, bound as the tests bind them)
/// let rivorad do what announcing needs (the e2e tests above run with exactly these) and no
/// more: Secrets only listed and watched, only in rivorad's namespace; the Lease only read,
/// created and updated there; BGPPeers only read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_roles_allow_announcing_and_no_more() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, DeleteParams, ListParams, PostParams};
    let t = K8sTest::new("kl2r").await;
    let sa = t.rivorad.clone();
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "md5"}, "stringData": {"password": "x"},
    }))
    .unwrap();
    for ns in [&t.sa_ns, &t.ns] {
        Api::<Secret>::namespaced(t.admin.clone(), ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    // Secrets: listed and watched in rivorad's namespace only; never read one by one.
    let own = Api::<Secret>::namespaced(sa.clone(), &t.sa_ns);
    let listed = own.list(&ListParams::default()).await.unwrap();
    assert!(
        listed
            .items
            .iter()
            .any(|s| s.metadata.name.as_deref() == Some("md5"))
    );
    assert!(forbidden(own.get("md5").await), "get of a Secret");
    assert!(forbidden(
        Api::<Secret>::namespaced(sa.clone(), &t.ns)
            .list(&ListParams::default())
            .await
    ));
    assert!(forbidden(
        Api::<Secret>::all(sa.clone())
            .list(&ListParams::default())
            .await
    ));
    assert!(forbidden(own.delete("md5", &DeleteParams::default()).await));

    // The Lease: get, create, update in rivorad's namespace; not deleted, not elsewhere.
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "rivora-l2-speaker"},
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 4},
    }))
    .unwrap();
    let leases = Api::<Lease>::namespaced(sa.clone(), &t.sa_ns);
    let mut created = leases.create(&PostParams::default(), &lease).await.unwrap();
    let got = leases.get("rivora-l2-speaker").await.unwrap();
    assert_eq!(got.spec.unwrap().holder_identity.as_deref(), Some("n1"));
    created.spec.as_mut().unwrap().holder_identity = Some("n2".into());
    leases
        .replace("rivora-l2-speaker", &PostParams::default(), &created)
        .await
        .unwrap();
    assert!(forbidden(
        leases
            .delete("rivora-l2-speaker", &DeleteParams::default())
            .await
    ));
    assert!(forbidden(
        Api::<Lease>::namespaced(sa.clone(), &t.ns)
            .create(&PostParams::default(), &lease)
            .await
    ));
    assert!(forbidden(
        Api::<Lease>::all(sa.clone())
            .list(&ListParams::default())
            .await
    ));

    // BGPPeers: read, never written.
    let peers = Api::<rivora_k8s_api::BGPPeer>::all(sa.clone());
    peers.list(&ListParams::default()).await.unwrap();
    let p: rivora_k8s_api::BGPPeer = serde_json::from_value(json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "BGPPeer",
        "metadata": {"name": format!("{}-p", t.ns)},
        "spec": {"address": "192.0.2.1", "peerASN": 65000, "localASN": 65001},
    }))
    .unwrap();
    assert!(forbidden(peers.create(&PostParams::default(), &p).await));
}

/// "Stops answering ... also when its interface or datapath is broken": the holder's XDP link
/// detached behind rivorad's back (the program runs nowhere) makes it step down, saying why,
/// and the other node takes over at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_datapath_is_detached_steps_down() {
    let mut l = L2Lab::new("kl2d").await;
    l.t.service(
        "web",
        &format!("{VIP4},{VIP6}"),
        json!([{"name": "tcp", "port": 80, "protocol": "TCP", "targetPort": 8080}]),
        json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"]}),
    )
    .await;
    for n in 1..=2 {
        l.start(n);
    }
    let first = wait_for("one node answers", Duration::from_secs(30), || async {
        l.answering(&[1, 2])
            .await
            .map_err(|e| format!("{e}\n{}", l.logs()))
    })
    .await;
    let link = xdp_link_id(&l.agents[first - 1]).await;
    let detached = Instant::now();
    detach_link(link);
    let (next, answered) = wait_takeover(&l, &[1, 2], &[first], detached).await;
    eprintln!(
        "XDP link of node {first} detached: node {next} answers {:.2} s later",
        answered.as_secs_f64()
    );
    assert!(
        answered < TIMING.duration,
        "released, not expired: {answered:?}"
    );
    let why = l.agents[first - 1]
        .kubernetes()
        .await
        .unwrap()
        .l2_ineligible;
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("XDP link") && w.contains("detached")),
        "{why:?}"
    );
    assert!(
        l.agents[first - 1]
            .log()
            .contains("announcing nothing until the datapath forwards again")
    );
    assert_lab_removed(l.lab);
}
