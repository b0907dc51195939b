//! The tokio speaker against a scripted peer on loopback (no root needed):
//! connection, status reporting, route changes, reconnect with backoff,
//! errors both ways, shutdown, and reconfiguration one peer at a time
//! (with per-peer communities).
//!
//! Why a scripted peer: it sees the exact bytes on a real TCP connection and
//! can misbehave on purpose, which the real daemons in `interop.rs` cannot.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use rivora_bgp::msg::{
    self, Attribute, Capability, Context, Message, Notification, Open, Update, decode, frame,
};
use rivora_bgp::{PeerConfig, PeerStatus, Prefix, RouteAttrs, Speaker, SpeakerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{sleep, timeout};

const C4: Context = Context {
    four_octet_as: true,
};

struct Peer {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Peer {
    async fn accept(l: &TcpListener) -> Peer {
        let (stream, _) = timeout(Duration::from_secs(10), l.accept())
            .await
            .expect("speaker connects within 10 s")
            .unwrap();
        Peer {
            stream,
            buf: Vec::new(),
        }
    }

    /// Next message, or None on EOF.
    async fn recv(&mut self) -> Option<Message> {
        loop {
            if let Some(len) = frame(&self.buf).expect("speaker sends valid headers") {
                let m = decode(&self.buf[..len], C4).expect("speaker sends valid messages");
                self.buf.drain(..len);
                return Some(m);
            }
            let mut b = [0u8; 4096];
            let n = timeout(Duration::from_secs(10), self.stream.read(&mut b))
                .await
                .expect("speaker says something within 10 s")
                .unwrap_or(0);
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&b[..n]);
        }
    }

    async fn send(&mut self, m: Message) {
        self.stream.write_all(&m.encode(C4)).await.unwrap();
    }

    /// Completes the OPEN exchange as AS `asn`.
    async fn establish(&mut self, asn: u32) -> Open {
        let Some(Message::Open(o)) = self.recv().await else {
            panic!("expected OPEN")
        };
        self.send(Message::Open(Open {
            version: 4,
            my_as: u16::try_from(asn).unwrap_or(msg::AS_TRANS),
            hold_time: 30,
            bgp_id: Ipv4Addr::new(127, 0, 0, 2),
            capabilities: vec![
                Capability::Multiprotocol { afi: 1, safi: 1 },
                Capability::Multiprotocol { afi: 2, safi: 1 },
                Capability::FourOctetAs(asn),
            ],
        }))
        .await;
        assert_eq!(self.recv().await, Some(Message::Keepalive));
        self.send(Message::Keepalive).await;
        o
    }

    /// Reads UPDATEs until both End-of-RIB markers arrived; returns the
    /// announced prefixes.
    async fn initial_table(&mut self) -> Vec<Prefix> {
        self.initial_rib().await.into_keys().collect()
    }

    /// Like `initial_table`, with each prefix's communities.
    async fn initial_rib(&mut self) -> BTreeMap<Prefix, Vec<u32>> {
        let mut got = BTreeMap::new();
        let mut eor = 0;
        while eor < 2 {
            match self.recv().await {
                Some(Message::Update(u)) => {
                    let v6_eor = vec![Attribute::MpUnreach {
                        afi: 2,
                        safi: 1,
                        withdrawn: vec![],
                    }];
                    if u == Update::default() || u.attributes == v6_eor {
                        eor += 1;
                    }
                    for p in announced(&u) {
                        got.insert(p, communities(&u));
                    }
                }
                Some(Message::Keepalive) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        got
    }

    /// Reads until an UPDATE announces `p`; returns its communities. Fails
    /// on a NOTIFICATION or the connection closing: the session must stay.
    async fn announcement_of(&mut self, p: Prefix) -> Vec<u32> {
        loop {
            match self.recv().await {
                Some(Message::Update(u)) if announced(&u).contains(&p) => {
                    return communities(&u);
                }
                Some(Message::Update(_) | Message::Keepalive) => {}
                other => panic!("expected the announcement of {p}, got {other:?}"),
            }
        }
    }

    /// Reads the goodbye of a stopped session: withdrawals, then a
    /// NOTIFICATION, then the close. Returns the sorted withdrawals and the
    /// NOTIFICATION, and closes our side.
    async fn goodbye(mut self) -> (Vec<Prefix>, Notification) {
        let mut w = Vec::new();
        loop {
            match self.recv().await {
                Some(Message::Update(u)) => w.extend(withdrawn(&u)),
                Some(Message::Notification(n)) => {
                    assert_eq!(self.recv().await, None, "closed after the NOTIFICATION");
                    w.sort();
                    return (w, n);
                }
                Some(Message::Keepalive) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

fn communities(u: &Update) -> Vec<u32> {
    u.attributes
        .iter()
        .find_map(|a| match a {
            Attribute::Communities(c) => Some(c.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// True if a connection is waiting on `l` right now (polled once, no wait).
fn pending_accept(l: &TcpListener) -> bool {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    l.poll_accept(&mut cx).is_ready()
}

fn announced(u: &Update) -> Vec<Prefix> {
    let mut v = u.nlri.clone();
    for a in &u.attributes {
        if let Attribute::MpReach { nlri, .. } = a {
            v.extend(nlri.iter().copied());
        }
    }
    v
}

fn withdrawn(u: &Update) -> Vec<Prefix> {
    let mut v = u.withdrawn.clone();
    for a in &u.attributes {
        if let Attribute::MpUnreach { withdrawn, .. } = a {
            v.extend(withdrawn.iter().copied());
        }
    }
    v
}

fn config(port: u16, remote_as: u32) -> SpeakerConfig {
    let mut p = PeerConfig::new(IpAddr::V4(Ipv4Addr::LOCALHOST), remote_as);
    p.port = port;
    p.next_hop_v6 = Some("2001:db8::1".parse().unwrap());
    SpeakerConfig {
        local_as: 65000,
        router_id: Ipv4Addr::new(127, 0, 0, 1),
        peers: vec![p],
    }
}

fn routes(list: &[&str]) -> BTreeMap<Prefix, RouteAttrs> {
    list.iter()
        .map(|p| (p.parse().unwrap(), RouteAttrs::with_communities([42])))
        .collect()
}

async fn wait_status(s: &Speaker, what: &str, f: impl Fn(&PeerStatus) -> bool) -> PeerStatus {
    wait_peer(s, 0, what, f).await
}

/// Waits (at most 10 s) until peer number `i` satisfies `f`.
async fn wait_peer(
    s: &Speaker,
    i: usize,
    what: &str,
    f: impl Fn(&PeerStatus) -> bool,
) -> PeerStatus {
    for _ in 0..200 {
        let st = s.peers().remove(i);
        if f(&st) {
            return st;
        }
        sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}: {:?}", s.peers());
}

#[tokio::test]
async fn session_lifecycle_on_loopback() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let s = std::sync::Arc::new(Speaker::start(config(port, 65001)));
    s.set_routes(routes(&["203.0.113.10/32", "2001:db8:100::10/128"]));

    let mut peer = Peer::accept(&l).await;
    let o = peer.establish(65001).await;
    assert_eq!(o.peer_as(), 65000);
    assert_eq!(o.hold_time, 90);
    assert_eq!(
        peer.initial_table().await,
        vec![
            "203.0.113.10/32".parse().unwrap(),
            "2001:db8:100::10/128".parse().unwrap()
        ]
    );
    let st = wait_status(&s, "Established", |p| p.state == "Established").await;
    assert_eq!(st.prefixes_sent, 2);
    assert!(st.uptime_secs.is_some());
    assert_eq!(st.address, IpAddr::V4(Ipv4Addr::LOCALHOST));

    // Unchanged set: nothing sent. Changed: one withdrawal, one announcement.
    assert!(!s.set_routes(routes(&["203.0.113.10/32", "2001:db8:100::10/128"])));
    assert!(s.set_routes(routes(&["203.0.113.10/32", "203.0.113.11/32"])));
    let mut w = Vec::new();
    let mut a = Vec::new();
    while w.is_empty() || a.is_empty() {
        match peer.recv().await {
            Some(Message::Update(u)) => {
                w.extend(withdrawn(&u));
                a.extend(announced(&u));
            }
            Some(Message::Keepalive) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(w, vec!["2001:db8:100::10/128".parse().unwrap()]);
    assert_eq!(a, vec!["203.0.113.11/32".parse().unwrap()]);

    // Shutdown: withdraw everything, then Cease, then the connection closes.
    let shared = std::sync::Arc::clone(&s);
    let shut = tokio::spawn(async move { shared.shutdown().await });
    let mut w = Vec::new();
    loop {
        match peer.recv().await {
            Some(Message::Update(u)) => w.extend(withdrawn(&u)),
            Some(Message::Notification(n)) => {
                assert_eq!((n.code, n.subcode), (6, 2));
                assert!(n.describe().contains("shutting down"), "{}", n.describe());
                break;
            }
            Some(Message::Keepalive) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    w.sort();
    assert_eq!(
        w,
        vec![
            "203.0.113.10/32".parse().unwrap(),
            "203.0.113.11/32".parse().unwrap()
        ]
    );
    assert_eq!(peer.recv().await, None);
    timeout(Duration::from_secs(6), shut)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn reconnects_after_refusal_and_peer_errors() {
    // Find a free port, then close it so the first attempts are refused.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let s = Speaker::start(config(port, 65001));
    let st = wait_status(&s, "a refusal", |p| p.last_error.is_some()).await;
    assert!(
        st.last_error.as_deref().unwrap().contains("refused"),
        "{st:?}"
    );
    assert!(st.state == "Active" || st.state == "Connect", "{st:?}");

    let l = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        .await
        .unwrap();
    // Wrong AS: the speaker answers with Bad Peer AS and retries.
    let mut peer = Peer::accept(&l).await;
    let _ = peer.recv().await; // OPEN
    peer.send(Message::Open(Open {
        version: 4,
        my_as: 65002,
        hold_time: 30,
        bgp_id: Ipv4Addr::new(127, 0, 0, 2),
        capabilities: vec![],
    }))
    .await;
    match peer.recv().await {
        Some(Message::Notification(n)) => assert_eq!((n.code, n.subcode), (2, 2)),
        other => panic!("expected Bad Peer AS, got {other:?}"),
    }
    let st = wait_status(&s, "the error", |p| {
        p.last_error
            .as_deref()
            .unwrap_or("")
            .contains("Bad Peer AS")
    })
    .await;
    assert!(st.last_error.unwrap().contains("65002"));

    // The peer resets the next session with a Cease; the speaker comes back.
    let mut peer = Peer::accept(&l).await;
    peer.establish(65001).await;
    wait_status(&s, "Established", |p| p.state == "Established").await;
    peer.send(Message::Notification(
        Notification::administrative_shutdown("peer maintenance"),
    ))
    .await;
    drop(peer);
    let st = wait_status(&s, "the Cease", |p| p.state != "Established").await;
    let st = if st.last_error.is_none() {
        wait_status(&s, "the Cease", |p| p.last_error.is_some()).await
    } else {
        st
    };
    assert!(
        st.last_error
            .as_deref()
            .unwrap()
            .contains("peer maintenance"),
        "{st:?}"
    );
    let mut peer = Peer::accept(&l).await;
    peer.establish(65001).await;
    wait_status(&s, "Established again", |p| p.state == "Established").await;
    s.shutdown().await;
}

#[tokio::test]
async fn hold_timer_expiry_closes_the_session() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let mut cfg = config(port, 65001);
    cfg.peers[0].hold_time = 3;
    let s = Speaker::start(cfg);
    let mut peer = Peer::accept(&l).await;
    peer.establish(65001).await;
    // Say nothing more: after 3 s the speaker sends Hold Timer Expired.
    let start = std::time::Instant::now();
    loop {
        match peer.recv().await {
            Some(Message::Notification(n)) => {
                assert_eq!(n.code, 4);
                break;
            }
            Some(Message::Keepalive | Message::Update(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(6),
        "{took:?}"
    );
    let st = wait_status(&s, "the expiry", |p| p.last_error.is_some()).await;
    assert!(st.last_error.unwrap().contains("hold timer expired"));
    s.shutdown().await;
}

/// A route change must reach an Established peer even when the peer's own
/// messages (here a stream of KEEPALIVEs) arrive at the same moment.
/// Regression: reading the peer's bytes used to mark the pending change as
/// seen without sending it, so it was lost until the next change (found by
/// rivorad's end-to-end test, where BIRD's End-of-RIB met a health change).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_changes_are_not_lost_while_the_peer_talks() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let s = Speaker::start(config(port, 65001));
    let mut peer = Peer::accept(&l).await;
    peer.establish(65001).await;
    assert!(peer.initial_table().await.is_empty());

    // The peer talks constantly from another task.
    let (mut rd, mut wr) = peer.stream.into_split();
    let mut pending = std::mem::take(&mut peer.buf);
    let talker = tokio::spawn(async move {
        let ka = Message::Keepalive.encode(C4);
        loop {
            if wr.write_all(&ka).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    });

    // The peer's view of what is announced.
    let mut rib: std::collections::BTreeSet<Prefix> = Default::default();
    for i in 0..200u32 {
        // Alternate between two sets that differ in one /32 each time.
        let p: Prefix = format!("203.0.113.{}/32", i % 250).parse().unwrap();
        let want: std::collections::BTreeSet<Prefix> = [p].into();
        assert!(s.set_routes(want.iter().map(|p| (*p, RouteAttrs::default())).collect()));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while rib != want {
            let m = loop {
                if let Some(len) = frame(&pending).unwrap() {
                    let m = decode(&pending[..len], C4).unwrap();
                    pending.drain(..len);
                    break m;
                }
                let mut b = [0u8; 4096];
                let n = tokio::time::timeout_at(deadline, rd.read(&mut b))
                    .await
                    .unwrap_or_else(|_| {
                        panic!("change {i} never reached the peer: it has {rib:?}, want {want:?}")
                    })
                    .unwrap();
                assert!(n > 0, "speaker closed the session");
                pending.extend_from_slice(&b[..n]);
            };
            if let Message::Update(u) = m {
                for w in withdrawn(&u) {
                    rib.remove(&w);
                }
                rib.extend(announced(&u));
            }
        }
    }
    talker.abort();
    drop(s);
}

/// Reconfiguring one peer leaves the other's session alone. Two scripted
/// peers A and B; A is tagged with a per-peer community. Changing B's hold
/// time resets B only (Cease, then a new connection whose OPEN has the new
/// hold time and which is sent the current routes) while A's connection
/// keeps carrying updates without a NOTIFICATION or a new connection;
/// removing B sends it a Cease and leaves A alone again.
#[tokio::test]
async fn reconfigure_resets_only_the_changed_peer() {
    const TAG: u32 = (65000 << 16) | 7;
    let la = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let lb = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut cfg = config(la.local_addr().unwrap().port(), 65001);
    let mut pb = cfg.peers[0].clone();
    pb.port = lb.local_addr().unwrap().port();
    cfg.peers[0].communities = vec![TAG, TAG];
    cfg.peers.push(pb);
    let key_a = SocketAddr::from((Ipv4Addr::LOCALHOST, cfg.peers[0].port));
    let key_b = SocketAddr::from((Ipv4Addr::LOCALHOST, cfg.peers[1].port));
    let s = Speaker::start(cfg.clone());
    let r10: Prefix = "203.0.113.10/32".parse().unwrap();
    let r11: Prefix = "203.0.113.11/32".parse().unwrap();
    s.set_routes(routes(&["203.0.113.10/32"]));

    let mut a = Peer::accept(&la).await;
    assert_eq!(a.establish(65001).await.hold_time, 90);
    let mut b = Peer::accept(&lb).await;
    assert_eq!(b.establish(65001).await.hold_time, 90);
    // The peer's community on A's routes only, merged with the route's.
    assert_eq!(a.initial_rib().await, [(r10, vec![42, TAG])].into());
    assert_eq!(b.initial_rib().await, [(r10, vec![42])].into());
    wait_peer(&s, 0, "A Established", |p| p.state == "Established").await;
    wait_peer(&s, 1, "B Established", |p| p.state == "Established").await;

    // Change only B's hold time.
    let mut changed = cfg.clone();
    changed.peers[1].hold_time = 30;
    let (r, (w, n)) = tokio::join!(s.reconfigure(changed.clone()), b.goodbye());
    let r = r.unwrap();
    assert_eq!((r.changed, r.kept), (vec![key_b], vec![key_a]));
    assert!(r.added.is_empty() && r.removed.is_empty());
    assert_eq!(w, vec![r10], "B's routes withdrawn before the Cease");
    assert_eq!((n.code, n.subcode), (6, 2));
    assert!(
        n.describe().contains("configuration changed"),
        "{}",
        n.describe()
    );
    // B comes back with the new hold time and the current routes.
    let mut b = Peer::accept(&lb).await;
    assert_eq!(b.establish(65001).await.hold_time, 30);
    assert_eq!(b.initial_rib().await, [(r10, vec![42])].into());
    wait_peer(&s, 1, "B Established again", |p| p.state == "Established").await;

    // A's original connection still carries the session: the next change
    // arrives on it, with no NOTIFICATION or close before it, and A's
    // listener never saw a second connection.
    s.set_routes(routes(&["203.0.113.10/32", "203.0.113.11/32"]));
    assert_eq!(a.announcement_of(r11).await, vec![42, TAG]);
    assert_eq!(b.announcement_of(r11).await, vec![42]);
    assert!(!pending_accept(&la), "A reconnected");
    assert_eq!(s.peers()[0].state, "Established");

    // Remove B: withdrawals and a Cease for B, nothing for A.
    let mut only_a = changed.clone();
    only_a.peers.truncate(1);
    let (r, (w, n)) = tokio::join!(s.reconfigure(only_a), b.goodbye());
    let r = r.unwrap();
    assert_eq!((r.removed, r.kept), (vec![key_b], vec![key_a]));
    assert!(r.added.is_empty() && r.changed.is_empty());
    assert_eq!(w, vec![r10, r11]);
    assert_eq!((n.code, n.subcode), (6, 2));
    assert!(n.describe().contains("removed"), "{}", n.describe());
    assert_eq!(s.peers().len(), 1);
    s.set_routes(routes(&["203.0.113.11/32"]));
    loop {
        match a.recv().await {
            Some(Message::Update(u)) if withdrawn(&u) == vec![r10] => break,
            Some(Message::Update(_) | Message::Keepalive) => {}
            other => panic!("expected the withdrawal of {r10}, got {other:?}"),
        }
    }
    assert!(!pending_accept(&la), "A reconnected");
    // B's task ended with the reconfiguration, so it cannot come back.
    assert!(!pending_accept(&lb), "removed B reconnected");

    // Shutdown still reaches A, started before any reconfiguration.
    let ((w, n), ()) = tokio::join!(a.goodbye(), s.shutdown());
    assert_eq!(w, vec![r11]);
    assert!(n.describe().contains("shutting down"), "{}", n.describe());
}
