//! The [`Responder`]: answers ARP and neighbour solicitations for a set of
//! VIPs on one interface and announces them.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::frame::{
    self, ETHERTYPE_ARP, ETHERTYPE_IPV6, MacAddr, arp_reply, gratuitous_arp, na_reply,
    parse_arp_request, parse_neighbor_solicitation, solicited_node, unsolicited_na,
};
use crate::packet_socket::{self, PacketSocket, Received};

/// The default [`ResponderOptions::announce_interval`]: one minute.
///
/// Why a minute: neighbour caches (Linux `gc_stale_time`, switches' MAC
/// tables of 300 s) are refreshed well before they age out, at a cost of two
/// small frames per VIP per minute.
pub const DEFAULT_ANNOUNCE_INTERVAL: Duration = Duration::from_secs(60);

/// After a failed announcement (link down, queue full) the next attempt
/// comes this soon (or after the interval, if that is shorter), so a VIP is
/// announced promptly once the link works again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// The default [`ResponderOptions::takeover_burst`]: three more
/// announcements after the first.
pub const DEFAULT_TAKEOVER_BURST: u32 = 3;

/// Spacing of the takeover burst's announcements.
///
/// Why a second: a neighbour or switch that dropped the first frame (a
/// queue full during the failover, an FDB being flushed) gets another
/// chance well within the time a client retries its connection, and three
/// repeats cost a handful of frames per VIP once per takeover.
pub const BURST_SPACING: Duration = Duration::from_secs(1);

/// Frames handled per wake-up of one socket before the task looks at its
/// other sockets and timers again, so a flood on one cannot starve the rest.
const RECV_BUDGET: usize = 64;

/// Receive buffer: every frame we accept is under 100 bytes; anything longer
/// than an Ethernet MTU is cut and ignored.
const RECV_BUF: usize = 2048;

/// How a [`Responder`] behaves.
///
/// Why a struct: the options are expected to grow (a burst of announcements
/// on failover, say) without changing `start`'s signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponderOptions {
    /// How often every answered VIP is announced again (gratuitous ARP for
    /// IPv4, unsolicited neighbour advertisement for IPv6), counted per VIP
    /// from its previous announcement. Must not be zero; a huge value (e.g.
    /// `Duration::MAX`) announces only when a VIP starts being answered.
    ///
    /// Why periodic: a neighbour that missed the first announcement (a
    /// switch that was rebooting, a host whose entry pointed to a previous
    /// speaker) is corrected within one interval, without waiting for its
    /// entry to age out.
    pub announce_interval: Duration,
    /// How many extra announcements follow the first one when a VIP starts
    /// being answered (on takeover, or when it is added), [`BURST_SPACING`]
    /// apart, before the periodic `announce_interval` takes over.
    ///
    /// Why: one gratuitous ARP is easily lost during exactly the event that
    /// needs it (a failover); neighbours that miss it would keep sending to
    /// the previous speaker until their entry goes stale.
    pub takeover_burst: u32,
}

impl Default for ResponderOptions {
    /// [`DEFAULT_ANNOUNCE_INTERVAL`]: the options for production use.
    fn default() -> Self {
        ResponderOptions {
            announce_interval: DEFAULT_ANNOUNCE_INTERVAL,
            takeover_burst: DEFAULT_TAKEOVER_BURST,
        }
    }
}

/// One VIP the responder is currently answering for, as reported by
/// [`Responder::answered`].
///
/// Why: `rivoractl speaker` shows operators which VIPs this node speaks for,
/// since when, and whether requests actually arrive and get answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VipAnnounceStatus {
    /// The VIP.
    pub vip: IpAddr,
    /// When this node started answering for the VIP: when the VIP was added
    /// to the set, or when the responder last became active, whichever is
    /// later. The counters below count from this moment.
    pub since: SystemTime,
    /// ARP replies (IPv4) or neighbour advertisements (IPv6) sent in answer
    /// to requests for the VIP.
    pub replies_sent: u64,
    /// Gratuitous ARPs or unsolicited advertisements sent for the VIP.
    pub announcements_sent: u64,
    /// When the last announcement was sent successfully; `None` if none has
    /// been sent yet (e.g. the link was down).
    pub last_announce: Option<SystemTime>,
}

/// A VIP that cannot be announced, returned by [`Responder::set_vips`].
///
/// Why: an address such as `0.0.0.0`, a multicast group or `::1` must
/// never be claimed on a segment; answering ARP for it would disrupt
/// neighbours. The whole new set is rejected, the previous one stays.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{address} cannot be announced as a VIP: {reason}")]
pub struct InvalidVip {
    /// The offending address.
    pub address: IpAddr,
    /// Why it is refused.
    pub reason: &'static str,
}

/// Answers ARP requests and IPv6 neighbour solicitations for a set of VIPs
/// on one interface, with that interface's MAC address, and announces the
/// VIPs with gratuitous ARP and unsolicited neighbour advertisements.
///
/// Why: in L2 mode the VIPs are not configured on any interface (the XDP
/// program takes their packets before the stack would), so the kernel does
/// not answer for them; this is what makes neighbours on the segment send
/// VIP traffic to this node. Which node answers is decided outside: a static
/// configuration makes every responder [active](Responder::set_active); with
/// Kubernetes, the holder of a Lease is active and all others are not.
///
/// Runs as one task on the tokio runtime `start` is called in; the methods
/// are synchronous, cheap, and callable from any thread. Dropping the
/// responder stops it too (without waiting); [`Responder::stop`] waits.
#[derive(Debug)]
pub struct Responder {
    inner: Arc<Inner>,
    task: Option<JoinHandle<()>>,
    /// The task applying a gate ([`Responder::follow`]).
    follower: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Inner {
    interface: String,
    ifindex: u32,
    mac: MacAddr,
    interval: Duration,
    burst: u32,
    arp: AsyncFd<PacketSocket>,
    nd: AsyncFd<PacketSocket>,
    state: Mutex<State>,
    /// Tells the task that the set of answered VIPs (and so its next timer)
    /// changed, or that it must stop.
    wake: Notify,
}

#[derive(Debug, Default)]
struct State {
    active: bool,
    /// While active: the moment answering must stop unless it is extended
    /// ([`Responder::set_active_until`]); `None`: no deadline.
    active_until: Option<Instant>,
    /// How often a deadline ran out (the holder fenced itself).
    fenced: u64,
    stopped: bool,
    /// The configured set, answered or not.
    vips: BTreeSet<IpAddr>,
    /// What is answered right now: `vips` while active, else nothing.
    answered: BTreeMap<IpAddr, Answering>,
    /// Solicited-node groups joined on the interface, with the number of
    /// answered IPv6 VIPs that map to each.
    groups: BTreeMap<MacAddr, usize>,
}

#[derive(Debug)]
struct Answering {
    since: SystemTime,
    replies_sent: u64,
    announcements_sent: u64,
    last_announce: Option<SystemTime>,
    /// When the next periodic announcement is due; `None`: never.
    next_announce: Option<Instant>,
    /// Announcements of the takeover burst still to send.
    burst_left: u32,
}

impl Responder {
    /// Starts a responder on `interface` (in the calling thread's network
    /// namespace), inactive and with no VIPs.
    ///
    /// Why inactive: two nodes answering for one VIP make its neighbours'
    /// caches flap between them. A node must be told it is the speaker:
    /// static mode calls [`set_active(true)`](Responder::set_active) right
    /// away, Kubernetes mode only once it holds the Lease.
    ///
    /// Must be called within a tokio runtime (the responder task is spawned
    /// on it). Opens two AF_PACKET sockets bound to the interface (needs
    /// CAP_NET_RAW) and reads the interface's MAC address, which is used in
    /// every answer; the interface must be Ethernet-like. Fails with
    /// `InvalidInput` for a zero announce interval or a bad interface name,
    /// `NotFound` for an unknown interface.
    pub fn start(interface: &str, options: ResponderOptions) -> io::Result<Responder> {
        if options.announce_interval.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "announce_interval must not be zero",
            ));
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            io::Error::other(format!(
                "Responder::start must be called within a tokio runtime: {e}"
            ))
        })?;
        let ifindex = packet_socket::interface_index(interface)?;
        let ctx = |what: &str, e: io::Error| {
            let hint = if e.kind() == io::ErrorKind::PermissionDenied {
                " (AF_PACKET sockets need CAP_NET_RAW)"
            } else {
                ""
            };
            io::Error::new(e.kind(), format!("{what} on {interface}: {e}{hint}"))
        };
        let arp = PacketSocket::open(ifindex, ETHERTYPE_ARP, &packet_socket::arp_request_filter())
            .map_err(|e| ctx("opening the ARP packet socket", e))?;
        let nd = PacketSocket::open(
            ifindex,
            ETHERTYPE_IPV6,
            &packet_socket::neighbor_solicitation_filter(),
        )
        .map_err(|e| ctx("opening the IPv6 packet socket", e))?;
        let mac = packet_socket::interface_mac(arp.as_raw_fd(), interface)?;
        if !mac.is_unicast() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("interface {interface} has MAC address {mac}, not a unicast address"),
            ));
        }
        let inner = Arc::new(Inner {
            interface: interface.to_string(),
            ifindex,
            mac,
            interval: options.announce_interval,
            burst: options.takeover_burst,
            arp: arp.into_async()?,
            nd: nd.into_async()?,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
        });
        let task = runtime.spawn(run(Arc::clone(&inner)));
        info!(
            interface,
            %mac,
            interval = ?options.announce_interval,
            "L2 speaker started (inactive until set_active(true))"
        );
        Ok(Responder {
            inner,
            task: Some(task),
            follower: None,
        })
    }

    /// Replaces the set of VIPs to answer for with `vips` (the whole set).
    ///
    /// Why the whole set: callers (the static configuration, the Kubernetes
    /// reconciler) hold the desired state, so there is no add/remove
    /// bookkeeping to get out of step. While active, VIPs new to the set are
    /// announced at once, before this returns; removed ones are not answered
    /// from the moment it returns. While inactive the set is only stored.
    ///
    /// Fails, changing nothing, if any address can never be a VIP
    /// (unspecified, loopback, multicast, broadcast, IPv4-mapped IPv6).
    pub fn set_vips(&self, vips: BTreeSet<IpAddr>) -> Result<(), InvalidVip> {
        for &vip in &vips {
            check_vip(vip)?;
        }
        let mut st = self.inner.lock();
        if st.stopped {
            return Ok(());
        }
        st.vips = vips;
        self.inner.reconcile(&mut st);
        drop(st);
        self.inner.wake.notify_one();
        Ok(())
    }

    /// Makes this node the speaker for its VIPs (`true`) or not (`false`).
    ///
    /// Why: *who* answers is decided outside the responder. Static mode sets
    /// it active once after start; Kubernetes mode sets it from the speaker
    /// Lease (active while held). Inactive means nothing is answered and
    /// nothing is sent, from the moment this returns. Becoming active
    /// announces every VIP at once (that is what moves neighbours over from
    /// a previous speaker). Setting the current value again is a no-op, so
    /// it can be called on every Lease renewal.
    pub fn set_active(&self, active: bool) {
        self.set_state(active, None);
    }

    /// Makes this node the speaker until `until` (monotonic clock), or not
    /// at all (`None`); each call replaces the previous deadline.
    ///
    /// Why a deadline: with Kubernetes the speaker is the holder of a Lease
    /// that another node may take once it has not been renewed for its
    /// duration. The holder must stop answering *before* that, even if the
    /// task that renews the Lease is stuck or the API server unreachable;
    /// no fencing token exists, so the responder fences itself: before
    /// every answer and announcement it checks the deadline, and when it
    /// has passed it goes inactive on its own (counted in
    /// [`Responder::fenced`]). Extending the deadline while active announces
    /// nothing; becoming active again after it ran out announces at once.
    pub fn set_active_until(&self, until: Option<Instant>) {
        self.inner.set_until(until);
    }

    /// Follows `gate` from now on: each value is applied as by
    /// [`Responder::set_active_until`]; when the sender goes away the
    /// responder goes inactive. Replaces an earlier gate.
    ///
    /// Why: the Lease election publishes "answer until" on a watch
    /// channel; following it here keeps the fence inside the responder,
    /// whoever owns the responder.
    pub fn follow(&mut self, mut gate: tokio::sync::watch::Receiver<Option<Instant>>) {
        let inner = Arc::clone(&self.inner);
        let task = tokio::spawn(async move {
            loop {
                let until = *gate.borrow_and_update();
                inner.set_until(until);
                if gate.changed().await.is_err() {
                    inner.set_until(None);
                    return;
                }
            }
        });
        if let Some(old) = self.follower.replace(task) {
            old.abort();
        }
    }

    /// How often a deadline given to [`Responder::set_active_until`] ran
    /// out before it was extended.
    ///
    /// Why: a holder that fences itself is a sign of a slow or unreachable
    /// API server; status output shows it.
    pub fn fenced(&self) -> u64 {
        self.inner.lock().fenced
    }

    /// Whether `interface` is up with carrier (`IFF_UP` and `IFF_RUNNING`).
    ///
    /// Why: a node whose link is down cannot be the speaker; the Lease
    /// holder checks this and steps down so that another node takes over
    /// at once instead of after the Lease runs out.
    pub fn link_running(&self) -> io::Result<bool> {
        packet_socket::interface_running(
            self.inner.arp.get_ref().as_raw_fd(),
            &self.inner.interface,
        )
    }

    fn set_state(&self, active: bool, until: Option<Instant>) {
        self.inner.set_state(active, until);
    }

    /// Whether this responder is active (see [`Responder::set_active`]).
    ///
    /// Why: status output distinguishes "speaker" from "standby".
    pub fn is_active(&self) -> bool {
        let mut st = self.inner.lock();
        self.inner.fence(&mut st, Instant::now());
        st.active
    }

    /// The configured VIP set, answered or not.
    ///
    /// Why: on a standby node [`Responder::answered`] is empty, and the
    /// operator still wants to see what it would answer for.
    pub fn vips(&self) -> BTreeSet<IpAddr> {
        self.inner.lock().vips.clone()
    }

    /// The VIPs answered right now with their counters, in address order;
    /// empty while inactive.
    ///
    /// Why: the data behind `rivoractl speaker`.
    pub fn answered(&self) -> Vec<VipAnnounceStatus> {
        self.inner
            .lock()
            .answered
            .iter()
            .map(|(vip, a)| VipAnnounceStatus {
                vip: *vip,
                since: a.since,
                replies_sent: a.replies_sent,
                announcements_sent: a.announcements_sent,
                last_announce: a.last_announce,
            })
            .collect()
    }

    /// The interface the responder answers on.
    ///
    /// Why: shown next to the VIPs in status output.
    pub fn interface(&self) -> &str {
        &self.inner.interface
    }

    /// The MAC address put in every answer and announcement (the
    /// interface's, read at start).
    ///
    /// Why: lets operators and tests compare it with what neighbours have
    /// in their caches.
    pub fn mac(&self) -> MacAddr {
        self.inner.mac
    }

    /// Stops answering and announcing, leaves the multicast groups, and
    /// waits until the responder task has ended.
    ///
    /// Why async: when it returns, the sockets are closed and nothing more
    /// will be sent, so a new responder (another process, after a config
    /// change) can take over cleanly. Nothing is sent on stop: ARP and NDP
    /// have no way to withdraw an address; the next speaker's announcements
    /// move the neighbours over.
    pub async fn stop(mut self) {
        self.shutdown();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    fn shutdown(&mut self) {
        if let Some(f) = self.follower.take() {
            f.abort();
        }
        let mut st = self.inner.lock();
        if !st.stopped {
            st.stopped = true;
            self.inner.reconcile(&mut st);
            info!(interface = %self.inner.interface, "L2 speaker stopped");
        }
        drop(st);
        self.inner.wake.notify_one();
    }
}

impl Drop for Responder {
    /// Stops the responder without waiting (see [`Responder::stop`]).
    fn drop(&mut self) {
        self.shutdown();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Refuses addresses that must never be claimed on a segment.
fn check_vip(address: IpAddr) -> Result<(), InvalidVip> {
    let reason = match address {
        IpAddr::V4(a) if a.is_unspecified() => Some("unspecified address"),
        IpAddr::V4(a) if a.is_loopback() => Some("loopback address"),
        IpAddr::V4(a) if a.is_multicast() => Some("multicast address"),
        IpAddr::V4(a) if a.is_broadcast() => Some("broadcast address"),
        IpAddr::V6(a) if a.is_unspecified() => Some("unspecified address"),
        IpAddr::V6(a) if a.is_loopback() => Some("loopback address"),
        IpAddr::V6(a) if a.is_multicast() => Some("multicast address"),
        IpAddr::V6(a) if a.to_ipv4_mapped().is_some() => {
            Some("IPv4-mapped IPv6 address (use the IPv4 address)")
        }
        _ => None,
    };
    match reason {
        Some(reason) => Err(InvalidVip { address, reason }),
        None => Ok(()),
    }
}

impl Inner {
    fn set_until(&self, until: Option<Instant>) {
        match until {
            Some(t) if t > Instant::now() => self.set_state(true, Some(t)),
            _ => self.set_state(false, None),
        }
    }

    fn set_state(&self, active: bool, until: Option<Instant>) {
        let mut st = self.lock();
        if st.stopped {
            return;
        }
        st.active_until = if active { until } else { None };
        if st.active == active {
            drop(st);
            // A new deadline: the task's timer must follow it.
            self.wake.notify_one();
            return;
        }
        st.active = active;
        info!(
            interface = %self.interface,
            active,
            vips = st.vips.len(),
            "L2 speaker {}",
            if active { "active" } else { "inactive" }
        );
        self.reconcile(&mut st);
        drop(st);
        self.wake.notify_one();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave State inconsistent in
        // a way that matters more than stopping to answer would.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Goes inactive if the deadline of [`Responder::set_active_until`] has
    /// passed. Called under the lock before anything is sent.
    fn fence(&self, st: &mut State, now: Instant) {
        if st.active && st.active_until.is_some_and(|t| now >= t) {
            st.active = false;
            st.active_until = None;
            st.fenced += 1;
            warn!(
                interface = %self.interface,
                "L2 speaker: the Lease was not renewed in time; no longer answering (self-fence)"
            );
            self.reconcile(st);
        }
    }

    /// Brings `answered` (and the multicast groups) in line with `vips`,
    /// `active` and `stopped`, announcing VIPs that start being answered.
    ///
    /// Runs under the state lock, so sends and removals are ordered with
    /// respect to the frame handlers: once a caller's change returns, no
    /// answer for a removed VIP can go out.
    fn reconcile(&self, st: &mut State) {
        let want: BTreeSet<IpAddr> = if st.active && !st.stopped {
            st.vips.clone()
        } else {
            BTreeSet::new()
        };
        let gone: Vec<IpAddr> = st
            .answered
            .keys()
            .filter(|v| !want.contains(v))
            .copied()
            .collect();
        for vip in gone {
            st.answered.remove(&vip);
            if let IpAddr::V6(v6) = vip {
                self.leave_group(st, v6);
            }
            info!(interface = %self.interface, %vip, "no longer answering for VIP");
        }
        let now = Instant::now();
        for vip in want {
            if st.answered.contains_key(&vip) {
                continue;
            }
            if let IpAddr::V6(v6) = vip {
                self.join_group(st, v6);
            }
            let mut a = Answering {
                since: SystemTime::now(),
                replies_sent: 0,
                announcements_sent: 0,
                last_announce: None,
                next_announce: None,
                burst_left: self.burst,
            };
            info!(interface = %self.interface, %vip, mac = %self.mac, "answering for VIP");
            self.announce(vip, &mut a, now);
            st.answered.insert(vip, a);
        }
    }

    fn join_group(&self, st: &mut State, vip: Ipv6Addr) {
        let group = frame::ipv6_multicast_mac(solicited_node(vip));
        let n = st.groups.entry(group).or_insert(0);
        *n += 1;
        if *n == 1
            && let Err(e) = self.nd.get_ref().set_membership(group, true)
        {
            // Unicast solicitations (cache refreshes) still get answers;
            // only first-time resolution through the group may not.
            warn!(
                interface = %self.interface,
                %vip,
                %group,
                "could not join the solicited-node group: {e}"
            );
        }
    }

    fn leave_group(&self, st: &mut State, vip: Ipv6Addr) {
        let group = frame::ipv6_multicast_mac(solicited_node(vip));
        let Some(n) = st.groups.get_mut(&group) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            st.groups.remove(&group);
            if let Err(e) = self.nd.get_ref().set_membership(group, false) {
                warn!(interface = %self.interface, %group, "could not leave the solicited-node group: {e}");
            }
        }
    }

    /// Sends one announcement for `vip` and schedules the next.
    fn announce(&self, vip: IpAddr, a: &mut Answering, now: Instant) {
        let sent = match vip {
            IpAddr::V4(v4) => self.arp.get_ref().send(&gratuitous_arp(self.mac, v4)),
            IpAddr::V6(v6) => self.nd.get_ref().send(&unsolicited_na(self.mac, v6)),
        };
        match sent {
            Ok(()) => {
                a.announcements_sent += 1;
                a.last_announce = Some(SystemTime::now());
                a.next_announce = if a.burst_left > 0 {
                    a.burst_left -= 1;
                    now.checked_add(BURST_SPACING.min(self.interval))
                } else {
                    now.checked_add(self.interval)
                };
                debug!(interface = %self.interface, %vip, "announced VIP");
            }
            Err(e) => {
                a.next_announce = now.checked_add(self.interval.min(RETRY_AFTER_FAILURE));
                warn!(interface = %self.interface, %vip, "announcing VIP failed: {e}");
            }
        }
    }

    /// Sends the periodic announcements that are due.
    fn announce_due(&self) {
        let mut st = self.lock();
        let now = Instant::now();
        self.fence(&mut st, now);
        for (vip, a) in st.answered.iter_mut() {
            if a.next_announce.is_some_and(|t| t <= now) {
                self.announce(*vip, a, now);
            }
        }
    }

    /// The next moment the task must act: an announcement, or the fence
    /// deadline.
    fn next_due(&self) -> Option<Instant> {
        let st = self.lock();
        let fence = st.active_until.filter(|_| st.active);
        st.answered
            .values()
            .filter_map(|a| a.next_announce)
            .chain(fence)
            .min()
    }

    /// Whether a received frame may be a request to us at all.
    fn acceptable(&self, r: &Received) -> bool {
        !r.truncated
            && u32::try_from(r.ifindex) == Ok(self.ifindex)
            && r.pkttype != libc::PACKET_OTHERHOST
            && r.pkttype != libc::PACKET_OUTGOING
    }

    fn on_arp(&self, r: &Received, frame: &[u8]) {
        if !self.acceptable(r) {
            return;
        }
        let req = match parse_arp_request(frame) {
            Ok(req) => req,
            Err(why) => {
                debug!(interface = %self.interface, "ignoring ARP frame: {why}");
                return;
            }
        };
        if req.eth_src == self.mac || req.sender_mac == self.mac {
            return; // our own frame
        }
        let mut st = self.lock();
        self.fence(&mut st, Instant::now());
        if st.answered.contains_key(&IpAddr::V4(req.sender_ip)) {
            warn!(
                interface = %self.interface,
                vip = %req.sender_ip,
                other = %req.sender_mac,
                "another host uses a VIP this node answers for"
            );
        }
        if req.is_announcement() {
            return; // nobody expects an answer
        }
        let Some(a) = st.answered.get_mut(&IpAddr::V4(req.target_ip)) else {
            return;
        };
        if req.is_probe() {
            warn!(
                interface = %self.interface,
                vip = %req.target_ip,
                other = %req.sender_mac,
                "another host probes for a VIP this node answers for; defending it"
            );
        }
        match self.arp.get_ref().send(&arp_reply(self.mac, &req)) {
            Ok(()) => {
                a.replies_sent += 1;
                debug!(
                    interface = %self.interface,
                    vip = %req.target_ip,
                    to = %req.sender_ip,
                    mac = %req.sender_mac,
                    "answered ARP request"
                );
            }
            Err(e) => {
                warn!(interface = %self.interface, vip = %req.target_ip, "ARP reply failed: {e}")
            }
        }
    }

    fn on_nd(&self, r: &Received, frame: &[u8]) {
        if !self.acceptable(r) {
            return;
        }
        let ns = match parse_neighbor_solicitation(frame) {
            Ok(ns) => ns,
            Err(why) => {
                debug!(interface = %self.interface, "ignoring IPv6 frame: {why}");
                return;
            }
        };
        if ns.eth_src == self.mac || ns.source_lladdr == Some(self.mac) {
            return; // our own frame
        }
        let mut st = self.lock();
        self.fence(&mut st, Instant::now());
        let Some(a) = st.answered.get_mut(&IpAddr::V6(ns.target)) else {
            return;
        };
        if ns.src.is_unspecified() {
            warn!(
                interface = %self.interface,
                vip = %ns.target,
                other = %ns.eth_src,
                "another host probes (DAD) for a VIP this node answers for; defending it"
            );
        }
        match self.nd.get_ref().send(&na_reply(self.mac, &ns)) {
            Ok(()) => {
                a.replies_sent += 1;
                debug!(
                    interface = %self.interface,
                    vip = %ns.target,
                    to = %ns.src,
                    "answered neighbour solicitation"
                );
            }
            Err(e) => warn!(
                interface = %self.interface,
                vip = %ns.target,
                "neighbour advertisement failed: {e}"
            ),
        }
    }

    /// Reads and handles up to [`RECV_BUDGET`] queued frames of one socket.
    fn drain(
        &self,
        mut guard: AsyncFdReadyGuard<'_, PacketSocket>,
        buf: &mut [u8],
        handle: fn(&Inner, &Received, &[u8]),
    ) {
        for _ in 0..RECV_BUDGET {
            match guard.try_io(|s| s.get_ref().recv(buf)) {
                Ok(Ok(r)) => handle(self, &r, &buf[..r.len]),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => {
                    // A pending socket error (ENETDOWN when the link goes
                    // down, say) is reported once; the next frame wakes us.
                    warn!(interface = %self.interface, "receiving failed: {e}");
                    guard.clear_ready();
                    return;
                }
                Err(_would_block) => return,
            }
        }
    }
}

/// The responder task: waits for frames, for the next periodic
/// announcement, or for a change, until stopped.
async fn run(inner: Arc<Inner>) {
    let mut buf = vec![0u8; RECV_BUF];
    loop {
        if inner.lock().stopped {
            return;
        }
        let due = inner.next_due();
        let timer = async {
            match due {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = inner.wake.notified() => {}
            () = timer => inner.announce_due(),
            r = inner.arp.readable() => match r {
                Ok(guard) => inner.drain(guard, &mut buf, Inner::on_arp),
                Err(e) => {
                    warn!(interface = %inner.interface, "ARP socket failed, stopping: {e}");
                    return;
                }
            },
            r = inner.nd.readable() => match r {
                Ok(guard) => inner.drain(guard, &mut buf, Inner::on_nd),
                Err(e) => {
                    warn!(interface = %inner.interface, "IPv6 socket failed, stopping: {e}");
                    return;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_vips_are_refused() {
        for bad in [
            "0.0.0.0",
            "127.0.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "ff02::1",
            "::ffff:192.0.2.1",
        ] {
            let ip: IpAddr = bad.parse().unwrap();
            let e = check_vip(ip).unwrap_err();
            assert_eq!(e.address, ip);
            assert!(e.to_string().starts_with(bad), "{e}");
        }
        for good in ["192.0.2.10", "10.0.0.1", "2001:db8::10", "fd00::1"] {
            assert!(check_vip(good.parse().unwrap()).is_ok());
        }
    }

    #[test]
    fn default_interval_is_a_minute() {
        assert_eq!(
            ResponderOptions::default().announce_interval,
            Duration::from_secs(60)
        );
    }

    #[tokio::test]
    async fn start_rejects_bad_arguments() {
        let zero = ResponderOptions {
            announce_interval: Duration::ZERO,
            ..ResponderOptions::default()
        };
        let e = Responder::start("lo", zero).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = Responder::start("no/such", ResponderOptions::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn start_needs_a_runtime() {
        let e = Responder::start("lo", ResponderOptions::default()).unwrap_err();
        assert!(e.to_string().contains("tokio runtime"), "{e}");
    }
}
