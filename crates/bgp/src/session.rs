//! One BGP session over one TCP connection, without the TCP connection.
//!
//! Why sans-I/O: the states after the TCP connection is up (OpenSent,
//! OpenConfirm, Established), the hold and keepalive timers, the error
//! handling and the Adj-RIB-Out are where protocol bugs hide, so they are
//! written as a plain state machine: bytes and clock readings go in, bytes to
//! send and a "closed" verdict come out. The tokio driver in `peer.rs` only
//! moves bytes and sleeps until [`Session::next_deadline`]; the fuzz test
//! feeds the very same code hundreds of thousands of byte streams without a
//! socket in sight.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use crate::RouteAttrs;
use crate::msg::{
    self, AFI_IPV4, AFI_IPV6, AS_TRANS, AsSegment, Attribute, BGP_VERSION, Capability, Context,
    DecodeError, HEADER_LEN, MAX_MESSAGE_LEN, Message, Notification, Open, SAFI_UNICAST, Update,
    err, kind,
};
use crate::prefix::Prefix;

/// The whole desired route set, as handed to `Speaker::set_routes`.
pub type Routes = BTreeMap<Prefix, RouteAttrs>;

/// Hold time used while waiting for the peer's OPEN (RFC 4271 8.2.2
/// suggests 4 minutes).
pub const OPEN_HOLD_TIME: Duration = Duration::from_secs(240);

/// LOCAL_PREF sent to iBGP peers: the common default, so our routes neither
/// win nor lose against other defaults by preference alone.
pub const DEFAULT_LOCAL_PREF: u32 = 100;

/// AS4_PATH attribute type (RFC 6793), sent only to peers without 4-octet AS
/// support when our AS does not fit in two octets.
const AS4_PATH: u8 = 17;

/// What a session needs to know about both ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    /// Our AS.
    pub local_as: u32,
    /// Our BGP identifier.
    pub router_id: Ipv4Addr,
    /// The AS the peer must have.
    pub remote_as: u32,
    /// Our proposed hold time (0, or 3 and more).
    pub hold_time: u16,
    /// NEXT_HOP for IPv4 routes (configured, else the session's local IPv4
    /// address); `None` means IPv4 routes cannot be announced.
    pub next_hop_v4: Option<Ipv4Addr>,
    /// Next hop for IPv6 routes (configured, else the session's local IPv6
    /// address); `None` means IPv6 routes cannot be announced.
    pub next_hop_v6: Option<Ipv6Addr>,
}

impl SessionConfig {
    /// True for iBGP (same AS on both ends).
    pub fn is_ibgp(&self) -> bool {
        self.local_as == self.remote_as
    }
}

/// The connection-level FSM states (the earlier ones live in the driver).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Our OPEN is sent, waiting for the peer's.
    OpenSent,
    /// OPENs exchanged, waiting for the peer's KEEPALIVE.
    OpenConfirm,
    /// Routes flow.
    Established,
    /// The session is over; see [`Session::closed`].
    Closed,
}

impl State {
    /// The RFC 4271 name.
    pub fn name(self) -> &'static str {
        match self {
            State::OpenSent => "OpenSent",
            State::OpenConfirm => "OpenConfirm",
            State::Established => "Established",
            State::Closed => "Idle",
        }
    }
}

/// What the two OPENs agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// min(ours, theirs); 0 means no timers at all.
    pub hold_time: u16,
    /// hold_time / 3.
    pub keepalive: u16,
    /// AS numbers are four octets wide on this session.
    pub four_octet_as: bool,
    /// IPv4 unicast routes may be sent.
    pub ipv4: bool,
    /// IPv6 unicast routes may be sent.
    pub ipv6: bool,
    /// The peer's BGP identifier.
    pub peer_id: Ipv4Addr,
}

/// Why and how a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// Human-readable reason, for logs and `PeerStatus::last_error`.
    pub reason: String,
    /// The NOTIFICATION we sent, if any.
    pub sent: Option<Notification>,
    /// The NOTIFICATION the peer sent, if any.
    pub received: Option<Notification>,
}

/// One BGP session (see the module documentation).
#[derive(Debug)]
pub struct Session {
    cfg: SessionConfig,
    state: State,
    rx: Vec<u8>,
    out: Vec<u8>,
    hold_deadline: Option<Instant>,
    keepalive_deadline: Option<Instant>,
    negotiated: Option<Negotiated>,
    ctx: Context,
    /// Adj-RIB-Out: what the peer has been told and not withdrawn.
    adj_out: Routes,
    closed: Option<Closed>,
    /// Operator-facing notes (for example "IPv6 routes not sent: ..."),
    /// drained by the driver.
    notes: Vec<String>,
    last_skip: [Option<String>; 2],
}

impl Session {
    /// Starts a session on a fresh connection: queues our OPEN and enters
    /// OpenSent.
    pub fn new(cfg: SessionConfig, now: Instant) -> Session {
        let mut s = Session {
            cfg,
            state: State::OpenSent,
            rx: Vec::new(),
            out: Vec::new(),
            hold_deadline: Some(now + OPEN_HOLD_TIME),
            keepalive_deadline: None,
            negotiated: None,
            ctx: Context {
                four_octet_as: false,
            },
            adj_out: Routes::new(),
            closed: None,
            notes: Vec::new(),
            last_skip: [None, None],
        };
        let open = s.our_open();
        s.send(&Message::Open(open), now);
        s
    }

    /// Our OPEN: version 4, our AS (AS_TRANS if it needs four octets), hold
    /// time, identifier, and the capabilities multiprotocol IPv4 and IPv6
    /// unicast, route refresh and 4-octet AS.
    pub fn our_open(&self) -> Open {
        Open {
            version: BGP_VERSION,
            my_as: u16::try_from(self.cfg.local_as).unwrap_or(AS_TRANS),
            hold_time: self.cfg.hold_time,
            bgp_id: self.cfg.router_id,
            capabilities: vec![
                Capability::Multiprotocol {
                    afi: AFI_IPV4,
                    safi: SAFI_UNICAST,
                },
                Capability::Multiprotocol {
                    afi: AFI_IPV6,
                    safi: SAFI_UNICAST,
                },
                Capability::RouteRefresh,
                Capability::FourOctetAs(self.cfg.local_as),
            ],
        }
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Set once the session is over; the connection should then be closed
    /// after [`Session::take_output`] has been written.
    pub fn closed(&self) -> Option<&Closed> {
        self.closed.as_ref()
    }

    /// What the OPENs agreed on (after OpenSent).
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// Number of prefixes currently announced to the peer.
    pub fn prefixes_sent(&self) -> usize {
        self.adj_out.len()
    }

    /// The Adj-RIB-Out (for tests and diagnostics).
    pub fn adj_rib_out(&self) -> &Routes {
        &self.adj_out
    }

    /// Bytes to write to the connection, in order.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Operator-facing notes produced since the last call.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// The earliest instant at which [`Session::tick`] has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.closed.is_some() {
            return None;
        }
        match (self.hold_deadline, self.keepalive_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Feeds bytes read from the connection. `routes` is the current desired
    /// set, needed when the session becomes Established or the peer asks for
    /// a route refresh.
    pub fn receive(&mut self, data: &[u8], now: Instant, routes: &Routes) {
        if self.closed.is_some() {
            return;
        }
        self.rx.extend_from_slice(data);
        let mut pos = 0;
        while self.closed.is_none() {
            let rest = &self.rx[pos..];
            match msg::frame(rest) {
                Ok(None) => break,
                Ok(Some(len)) => {
                    let k = rest[18];
                    let body = rest[HEADER_LEN..len].to_vec();
                    pos += len;
                    self.handle(k, &body, now, routes);
                }
                Err(e) => {
                    if rest.len() >= HEADER_LEN && rest[18] == kind::NOTIFICATION {
                        // RFC 4271 6.4: never answer a NOTIFICATION with one.
                        self.close(format!("peer sent a malformed NOTIFICATION: {}", e.reason));
                    } else {
                        self.fail(e);
                    }
                    break;
                }
            }
        }
        self.rx.drain(..pos);
    }

    /// Runs the timers: sends a KEEPALIVE when due and ends the session when
    /// the hold timer expires.
    pub fn tick(&mut self, now: Instant) {
        if self.closed.is_some() {
            return;
        }
        if self.hold_deadline.is_some_and(|d| d <= now) {
            let secs = match self.negotiated {
                Some(n) if self.state != State::OpenSent => u64::from(n.hold_time),
                _ => OPEN_HOLD_TIME.as_secs(),
            };
            self.fail(DecodeError {
                notification: Notification::new(err::HOLD_TIMER_EXPIRED, 0, Vec::new()),
                reason: format!("hold timer expired: nothing received from the peer for {secs} s"),
            });
            return;
        }
        if self.keepalive_deadline.is_some_and(|d| d <= now) {
            self.send(&Message::Keepalive, now);
        }
    }

    /// Brings the peer in line with `routes` (the whole desired set):
    /// withdraws what is gone, announces what is new or changed. A no-op
    /// before Established (the full set goes out on establishment).
    pub fn sync_routes(&mut self, routes: &Routes, now: Instant) {
        if self.state != State::Established || self.closed.is_some() {
            return;
        }
        let desired = self.sendable(routes);
        let mut withdraw = Vec::new();
        let mut announce = Vec::new();
        for p in self.adj_out.keys() {
            if !desired.contains_key(p) {
                withdraw.push(*p);
            }
        }
        for (p, a) in &desired {
            if self.adj_out.get(p) != Some(a) {
                announce.push((*p, a.clone()));
            }
        }
        if withdraw.is_empty() && announce.is_empty() {
            return;
        }
        self.send_withdrawals(&withdraw, now);
        self.send_announcements(&announce, now);
    }

    /// Ends the session politely: withdraws every announced route, then
    /// sends Cease / Administrative Shutdown with `text`.
    pub fn shutdown(&mut self, text: &str, now: Instant) {
        if self.closed.is_some() {
            return;
        }
        if self.state == State::Established {
            let all: Vec<Prefix> = self.adj_out.keys().copied().collect();
            self.send_withdrawals(&all, now);
        }
        let n = Notification::administrative_shutdown(text);
        self.send(&Message::Notification(n.clone()), now);
        self.state = State::Closed;
        self.closed = Some(Closed {
            reason: format!("shut down by us: {text}"),
            sent: Some(n),
            received: None,
        });
    }

    // -- internals ----------------------------------------------------------

    fn send(&mut self, m: &Message, now: Instant) {
        let bytes = m.encode(self.ctx);
        debug_assert!(bytes.len() <= MAX_MESSAGE_LEN, "oversized {:?}", m.kind());
        self.out.extend_from_slice(&bytes);
        // RFC 4271 10: the keepalive timer restarts whenever a KEEPALIVE or
        // UPDATE goes out; it only runs once OPENs are exchanged.
        if let Some(n) = self.negotiated
            && n.keepalive > 0
            && matches!(self.state, State::OpenConfirm | State::Established)
        {
            self.keepalive_deadline = Some(now + Duration::from_secs(u64::from(n.keepalive)));
        }
    }

    fn fail(&mut self, e: DecodeError) {
        let n = e.notification.clone();
        self.out
            .extend_from_slice(&Message::Notification(n.clone()).encode(self.ctx));
        self.state = State::Closed;
        self.closed = Some(Closed {
            reason: format!("{} (sent NOTIFICATION {})", e.reason, n.describe()),
            sent: Some(n),
            received: None,
        });
    }

    fn close(&mut self, reason: String) {
        self.state = State::Closed;
        self.closed = Some(Closed {
            reason,
            sent: None,
            received: None,
        });
    }

    fn restart_hold_timer(&mut self, now: Instant) {
        if let Some(n) = self.negotiated
            && self.state != State::OpenSent
        {
            self.hold_deadline =
                (n.hold_time > 0).then(|| now + Duration::from_secs(u64::from(n.hold_time)));
        }
    }

    fn fsm_error(&mut self, k: u8) {
        let (sub, st) = match self.state {
            State::OpenSent => (err::FSM_OPEN_SENT, "OpenSent"),
            State::OpenConfirm => (err::FSM_OPEN_CONFIRM, "OpenConfirm"),
            _ => (err::FSM_ESTABLISHED, "Established"),
        };
        self.fail(DecodeError {
            notification: Notification::new(err::FSM, sub, Vec::new()),
            reason: format!("unexpected message of type {k} in {st}"),
        });
    }

    fn handle(&mut self, k: u8, body: &[u8], now: Instant, routes: &Routes) {
        if k == kind::NOTIFICATION {
            if let Ok(Message::Notification(n)) = msg::decode_body(k, body, self.ctx) {
                self.state = State::Closed;
                self.closed = Some(Closed {
                    reason: format!("peer sent NOTIFICATION {}", n.describe()),
                    sent: None,
                    received: Some(n),
                });
            }
            return;
        }
        let expected = match self.state {
            State::OpenSent => k == kind::OPEN,
            State::OpenConfirm => k == kind::KEEPALIVE,
            State::Established => k != kind::OPEN,
            State::Closed => return,
        };
        if !expected {
            self.fsm_error(k);
            return;
        }
        let m = match msg::decode_body(k, body, self.ctx) {
            Ok(m) => m,
            Err(e) => {
                self.fail(e);
                return;
            }
        };
        match m {
            Message::Open(o) => self.on_open(o, now),
            Message::Keepalive if self.state == State::OpenConfirm => {
                self.state = State::Established;
                self.restart_hold_timer(now);
                self.sync_routes(routes, now);
                self.send_end_of_rib(now);
            }
            Message::Keepalive | Message::Update(_) => {
                // Inbound routes are validated (by decoding) and ignored:
                // this speaker only announces.
                self.restart_hold_timer(now);
            }
            Message::RouteRefresh(r) => {
                self.restart_hold_timer(now);
                self.on_route_refresh(r.afi, r.safi, now, routes);
            }
            Message::Notification(_) => {}
        }
    }

    fn on_open(&mut self, o: Open, now: Instant) {
        let open_err = |sub: u8, reason: String| DecodeError {
            notification: Notification::new(err::OPEN, sub, Vec::new()),
            reason,
        };
        let peer_as = o.peer_as();
        if peer_as != self.cfg.remote_as {
            self.fail(open_err(
                err::BAD_PEER_AS,
                format!(
                    "peer's OPEN says AS {peer_as}, configured remote AS is {}",
                    self.cfg.remote_as
                ),
            ));
            return;
        }
        if o.hold_time == 1 || o.hold_time == 2 {
            self.fail(open_err(
                err::UNACCEPTABLE_HOLD_TIME,
                format!("peer's OPEN proposes hold time {} s", o.hold_time),
            ));
            return;
        }
        if o.bgp_id.is_unspecified() || (self.cfg.is_ibgp() && o.bgp_id == self.cfg.router_id) {
            self.fail(open_err(
                err::BAD_BGP_ID,
                format!("peer's OPEN has unusable BGP identifier {}", o.bgp_id),
            ));
            return;
        }
        let hold = self.cfg.hold_time.min(o.hold_time);
        let (v4, v6) = if o.has_any_family() {
            (
                o.has_family(AFI_IPV4, SAFI_UNICAST),
                o.has_family(AFI_IPV6, SAFI_UNICAST),
            )
        } else {
            // No multiprotocol capability at all: IPv4 unicast is implied.
            (true, false)
        };
        let n = Negotiated {
            hold_time: hold,
            keepalive: hold / 3,
            four_octet_as: o.four_octet_as().is_some(),
            ipv4: v4,
            ipv6: v6,
            peer_id: o.bgp_id,
        };
        self.negotiated = Some(n);
        self.ctx = Context {
            four_octet_as: n.four_octet_as,
        };
        self.state = State::OpenConfirm;
        self.restart_hold_timer(now);
        self.send(&Message::Keepalive, now);
    }

    fn on_route_refresh(&mut self, afi: u16, safi: u8, now: Instant, routes: &Routes) {
        let Some(n) = self.negotiated else { return };
        let v6 = match (afi, safi) {
            (AFI_IPV4, SAFI_UNICAST) if n.ipv4 => false,
            (AFI_IPV6, SAFI_UNICAST) if n.ipv6 => true,
            // RFC 2918: a refresh for a family not negotiated is ignored.
            _ => return,
        };
        // Bring the Adj-RIB-Out up to date first, then resend all of it for
        // the family.
        self.sync_routes(routes, now);
        let again: Vec<(Prefix, RouteAttrs)> = self
            .adj_out
            .iter()
            .filter(|(p, _)| p.is_ipv4() != v6)
            .map(|(p, a)| (*p, a.clone()))
            .collect();
        self.send_announcements(&again, now);
    }

    /// The subset of `routes` this session can carry, noting (once per
    /// change) why a family is held back.
    fn sendable(&mut self, routes: &Routes) -> Routes {
        let Some(n) = self.negotiated else {
            return Routes::new();
        };
        let v4_why = if !n.ipv4 {
            Some("the peer did not negotiate IPv4 unicast".to_string())
        } else if self.cfg.next_hop_v4.is_none() {
            Some(
                "there is no IPv4 next hop (the session runs over IPv6; set next_hop_v4)"
                    .to_string(),
            )
        } else {
            None
        };
        let v6_why = if !n.ipv6 {
            Some("the peer did not negotiate IPv6 unicast".to_string())
        } else if self.cfg.next_hop_v6.is_none() {
            Some(
                "there is no IPv6 next hop (the session runs over IPv4; set next_hop_v6)"
                    .to_string(),
            )
        } else {
            None
        };
        let has_v4 = routes.keys().any(Prefix::is_ipv4);
        let has_v6 = routes.keys().any(|p| !p.is_ipv4());
        for (i, (why, has, fam)) in [(&v4_why, has_v4, "IPv4"), (&v6_why, has_v6, "IPv6")]
            .into_iter()
            .enumerate()
        {
            let note = if has { why.clone() } else { None };
            if note != self.last_skip[i] {
                if let Some(w) = &note {
                    self.notes.push(format!("{fam} routes are not sent: {w}"));
                }
                self.last_skip[i] = note;
            }
        }
        routes
            .iter()
            .filter(|(p, _)| {
                if p.is_ipv4() {
                    v4_why.is_none()
                } else {
                    v6_why.is_none()
                }
            })
            .map(|(p, a)| (*p, a.clone()))
            .collect()
    }

    fn send_end_of_rib(&mut self, now: Instant) {
        let Some(n) = self.negotiated else { return };
        if n.ipv4 {
            self.send(&Message::Update(Update::default()), now);
        }
        if n.ipv6 {
            let eor = Update {
                attributes: vec![Attribute::MpUnreach {
                    afi: AFI_IPV6,
                    safi: SAFI_UNICAST,
                    withdrawn: Vec::new(),
                }],
                ..Update::default()
            };
            self.send(&Message::Update(eor), now);
        }
    }

    fn send_withdrawals(&mut self, prefixes: &[Prefix], now: Instant) {
        let (v4, v6): (Vec<Prefix>, Vec<Prefix>) = prefixes.iter().partition(|p| p.is_ipv4());
        // Plain UPDATE: header, two length fields, withdrawn routes.
        for chunk in chunk_prefixes(&v4, MAX_MESSAGE_LEN - HEADER_LEN - 4) {
            let u = Update {
                withdrawn: chunk,
                ..Update::default()
            };
            self.send(&Message::Update(u), now);
        }
        // MP_UNREACH_NLRI: 4-byte attribute header, AFI and SAFI.
        for chunk in chunk_prefixes(&v6, MAX_MESSAGE_LEN - HEADER_LEN - 4 - 4 - 3) {
            let u = Update {
                attributes: vec![Attribute::MpUnreach {
                    afi: AFI_IPV6,
                    safi: SAFI_UNICAST,
                    withdrawn: chunk,
                }],
                ..Update::default()
            };
            self.send(&Message::Update(u), now);
        }
        for p in prefixes {
            self.adj_out.remove(p);
        }
    }

    /// The attributes every announcement carries, before NEXT_HOP /
    /// MP_REACH_NLRI: ORIGIN IGP, AS_PATH (empty for iBGP, our AS for eBGP),
    /// LOCAL_PREF for iBGP, COMMUNITIES when there are any.
    fn base_attributes(&self, attrs: &RouteAttrs) -> Vec<Attribute> {
        let mut v = vec![Attribute::Origin(msg::origin::IGP)];
        if self.cfg.is_ibgp() {
            v.push(Attribute::AsPath(Vec::new()));
        } else {
            v.push(Attribute::AsPath(vec![AsSegment {
                kind: msg::segment::AS_SEQUENCE,
                asns: vec![self.cfg.local_as],
            }]));
        }
        if !self.cfg.is_ibgp() && !self.ctx.four_octet_as && self.cfg.local_as > 0xffff {
            // The 2-octet AS_PATH carries AS_TRANS; the real AS goes in
            // AS4_PATH (RFC 6793 4.2.2).
            v.push(Attribute::Other {
                flags: msg::flag::OPTIONAL | msg::flag::TRANSITIVE,
                code: AS4_PATH,
                value: {
                    let mut b = vec![msg::segment::AS_SEQUENCE, 1];
                    b.extend_from_slice(&self.cfg.local_as.to_be_bytes());
                    b
                },
            });
        }
        if self.cfg.is_ibgp() {
            v.push(Attribute::LocalPref(DEFAULT_LOCAL_PREF));
        }
        if !attrs.communities.is_empty() {
            v.push(Attribute::Communities(attrs.communities.clone()));
        }
        v
    }

    fn send_announcements(&mut self, items: &[(Prefix, RouteAttrs)], now: Instant) {
        // Prefixes sharing attributes share UPDATEs.
        let mut groups: BTreeMap<(bool, &RouteAttrs), Vec<Prefix>> = BTreeMap::new();
        for (p, a) in items {
            groups.entry((p.is_ipv4(), a)).or_default().push(*p);
        }
        let mut msgs = Vec::new();
        for ((v4, attrs), prefixes) in groups {
            let mut base = self.base_attributes(attrs);
            if v4 {
                let Some(nh) = self.cfg.next_hop_v4 else {
                    continue;
                };
                base.push(Attribute::NextHop(nh));
                let fixed = encoded_attrs_len(&base, self.ctx);
                let budget = MAX_MESSAGE_LEN - HEADER_LEN - 4 - fixed;
                for chunk in chunk_prefixes(&prefixes, budget) {
                    msgs.push(Update {
                        withdrawn: Vec::new(),
                        attributes: base.clone(),
                        nlri: chunk,
                    });
                }
            } else {
                let Some(nh) = self.cfg.next_hop_v6 else {
                    continue;
                };
                let mp = |nlri: Vec<Prefix>| Attribute::MpReach {
                    afi: AFI_IPV6,
                    safi: SAFI_UNICAST,
                    next_hops: vec![IpAddr::V6(nh)],
                    nlri,
                };
                // Size with an empty NLRI, plus one byte in case the
                // attribute needs the extended length field.
                let mut sized = base.clone();
                sized.push(mp(Vec::new()));
                let fixed = encoded_attrs_len(&sized, self.ctx) + 1;
                let budget = MAX_MESSAGE_LEN - HEADER_LEN - 4 - fixed;
                for chunk in chunk_prefixes(&prefixes, budget) {
                    let mut attributes = base.clone();
                    attributes.push(mp(chunk));
                    msgs.push(Update {
                        withdrawn: Vec::new(),
                        attributes,
                        nlri: Vec::new(),
                    });
                }
            }
        }
        for u in msgs {
            self.send(&Message::Update(u), now);
        }
        for (p, a) in items {
            let nh_ok = if p.is_ipv4() {
                self.cfg.next_hop_v4.is_some()
            } else {
                self.cfg.next_hop_v6.is_some()
            };
            if nh_ok {
                self.adj_out.insert(*p, a.clone());
            }
        }
    }
}

fn encoded_attrs_len(attrs: &[Attribute], ctx: Context) -> usize {
    let mut b = Vec::new();
    for a in attrs {
        msg::encode_attribute(a, ctx, &mut b);
    }
    b.len()
}

/// Splits prefixes into runs whose NLRI encoding fits in `budget` bytes.
fn chunk_prefixes(prefixes: &[Prefix], budget: usize) -> Vec<Vec<Prefix>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut used = 0;
    for p in prefixes {
        let l = msg::prefix_wire_len(p);
        if used + l > budget && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
            used = 0;
        }
        cur.push(*p);
        used += l;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
