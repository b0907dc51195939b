//! Keeps the neighbour entry of every classifier target's next hop resolved,
//! with the kernel's "managed" neighbour entries (Linux 5.16).
//!
//! Why: the classifier forwards a packet to its target as next hop with
//! `bpf_fib_lookup`, which fills in the destination MAC from the kernel's
//! neighbour table. XDP cannot resolve a neighbour: when the FIB has the
//! route but no valid entry (`BPF_FIB_LKUP_RET_NO_NEIGH`) the packet is
//! dropped, and nothing else would ever send the ARP request or neighbour
//! solicitation, since XDP traffic never reaches the stack's output path.
//! No MAC is configured for a target (targets may sit on a secondary
//! network, behind a gateway), so rivorad must resolve the neighbour itself,
//! proactively, before and while traffic flows.
//!
//! A managed entry (`ip neigh add ADDR dev DEV managed`: `NDA_FLAGS_EXT` =
//! `NTF_EXT_MANAGED`) does exactly that: the kernel starts resolving it at
//! once and re-probes it from its own work queue every
//! `interval_probe_time_ms` (5 s by default), so it is kept reachable (and
//! re-resolved after a failure) without any traffic. What this module does:
//! [`next_hop`] asks the FIB which neighbour a target needs (like
//! `ip route get`), [`ensure_managed`] makes that entry managed without ever
//! breaking a static one, [`is_resolved`] says whether `bpf_fib_lookup`
//! would find it usable, and [`release`] removes what [`ensure_managed`]
//! made. Everything works in the calling thread's network namespace, over a
//! fresh NETLINK_ROUTE socket per call.
//!
//! Managed entries are not fully exempt from garbage collection (Linux 6.18
//! exempts only PERMANENT and externally learned/validated ones): the
//! periodic collector never gets them, as the re-probing keeps them in use,
//! but a forced collection under neighbour-table pressure (more than
//! `gc_thresh2` entries) can. [`ensure_managed`] is cheap when the entry is
//! already managed (one RTM_GETNEIGH), so call it on every reconcile.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

// include/uapi/linux/rtnetlink.h
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_DELNEIGH: u16 = 29;
const RTM_GETNEIGH: u16 = 30;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_VIA: u16 = 18;
const RTN_UNICAST: u8 = 1;
const RTN_LOCAL: u8 = 2;
// include/uapi/linux/neighbour.h
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const NDA_FLAGS_EXT: u16 = 15;
const NTF_EXT_MANAGED: u32 = 1 << 0;
const NUD_REACHABLE: u16 = 0x02;
const NUD_STALE: u16 = 0x04;
const NUD_DELAY: u16 = 0x08;
const NUD_PROBE: u16 = 0x10;
const NUD_NOARP: u16 = 0x40;
const NUD_PERMANENT: u16 = 0x80;
const NUD_NONE: u16 = 0x00;
/// The kernel's `NUD_VALID` (include/net/neighbour.h): the states in which
/// `bpf_fib_lookup` uses an entry's MAC instead of answering NO_NEIGH.
const NUD_VALID: u16 =
    NUD_PERMANENT | NUD_NOARP | NUD_REACHABLE | NUD_PROBE | NUD_STALE | NUD_DELAY;
// include/uapi/linux/netlink.h
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x01;
const NLM_F_MULTI: u16 = 0x02;
const NLM_F_ACK: u16 = 0x04;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;
const NETLINK_CAP_ACK: libc::c_int = 10;
const NETLINK_EXT_ACK: libc::c_int = 11;
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLA_TYPE_MASK: u16 = 0x3fff;
const NLMSG_HDRLEN: usize = 16;
/// sizeof(struct rtmsg) and sizeof(struct ndmsg).
const RTMSG_LEN: usize = 12;
const NDMSG_LEN: usize = 12;

/// Where packets for a target leave this host: the neighbour whose MAC
/// `bpf_fib_lookup` needs to forward to it.
///
/// Why a pair: neighbour entries are per interface, and the neighbour is the
/// gateway of the target's route (a target on a secondary network), or the
/// target itself when it is on-link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NextHop {
    /// The output interface of the route (`RTA_OIF`).
    pub ifindex: u32,
    /// The neighbour to resolve: the route's gateway, or the target itself
    /// when it is on-link. For an IPv4 route via an IPv6 gateway (`RTA_VIA`)
    /// this is the IPv6 gateway, as the kernel resolves it with NDP.
    pub via: IpAddr,
}

/// The next hop the kernel's FIB picks for `addr`, like `ip route get ADDR`
/// (RTM_GETROUTE).
///
/// Why: the neighbour `bpf_fib_lookup` will need for a target is the one of
/// the route the kernel actually selects (policy rules, multipath and
/// nexthop objects included), so ask the kernel instead of reading the
/// configuration. The answer is current only until routes change; callers
/// re-ask when they reconcile. Errors name the address and say what the
/// kernel answered (e.g. "no route to 10.1.2.3: Network is unreachable"); a
/// local address (not forwardable) or a route of another type than unicast
/// is an error as well.
pub fn next_hop(addr: IpAddr) -> io::Result<NextHop> {
    let mut rtm = [0u8; RTMSG_LEN];
    rtm[0] = family(addr);
    rtm[1] = if addr.is_ipv4() { 32 } else { 128 }; // rtm_dst_len
    let req = message(
        RTM_GETROUTE,
        NLM_F_REQUEST,
        &rtm,
        &attr(RTA_DST, &octets(addr)),
    );
    let answer = Rtnl::open()
        .and_then(|mut nl| nl.ask(req))
        .map_err(|e| annotate(e, format!("no route to {addr}")))?;
    let msg = answer
        .iter()
        .find(|m| u16_at(m, 4) == Some(RTM_NEWROUTE))
        .ok_or_else(|| invalid(format!("route to {addr}: the kernel answered no route")))?;
    let rtm_type = *msg
        .get(NLMSG_HDRLEN + 7)
        .ok_or_else(|| invalid(format!("route to {addr}: short answer")))?;
    match rtm_type {
        RTN_UNICAST => {}
        RTN_LOCAL => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{addr} is a local address of this host, not a next hop"),
            ));
        }
        t => {
            return Err(io::Error::new(
                io::ErrorKind::HostUnreachable,
                format!("no route to {addr}: the kernel's route is of type {t}, not unicast"),
            ));
        }
    }
    let mut oif = None;
    let mut gateway = None;
    for (kind, payload) in attributes(&msg[NLMSG_HDRLEN + RTMSG_LEN..]) {
        match kind {
            RTA_OIF => oif = u32_at(payload, 0),
            RTA_GATEWAY => gateway = ip_from(payload),
            // struct rtvia: a u16 address family, then the address.
            RTA_VIA if gateway.is_none() => gateway = payload.get(2..).and_then(ip_from),
            _ => {}
        }
    }
    let ifindex = oif.ok_or_else(|| {
        invalid(format!(
            "route to {addr}: no output interface in the answer"
        ))
    })?;
    Ok(NextHop {
        ifindex,
        via: gateway.unwrap_or(addr),
    })
}

/// Makes the neighbour entry of `hop` a managed one, so the kernel resolves
/// it now and keeps it resolved for as long as it exists.
///
/// Why: a target without a MAC is only reachable from XDP once the kernel
/// has resolved its next hop, and must stay so without traffic through the
/// stack (see the module documentation). Why the care: a static entry an
/// operator made (PERMANENT, or NOARP) is left as it is: it is resolved
/// anyway, and the kernel would turn a PERMANENT entry made managed into a
/// dynamic one (it drops NUD_PERMANENT and keeps nothing else) and
/// re-resolve it, replacing the operator's MAC with whoever answers. Any other entry is created or replaced the way
/// `ip neigh replace ADDR dev DEV managed` does (NUD_NONE plus
/// `NTF_EXT_MANAGED`): the kernel keeps an existing entry's state and MAC
/// (a REACHABLE entry stays usable), only adding the flag. Idempotent: an
/// entry that is already managed is not touched.
pub fn ensure_managed(hop: &NextHop) -> io::Result<()> {
    let what = || format!("managed neighbour {} on ifindex {}", hop.via, hop.ifindex);
    if let Some(entry) = lookup(hop).map_err(|e| annotate(e, what()))?
        && (entry.state & (NUD_PERMANENT | NUD_NOARP) != 0
            || entry.flags_ext & NTF_EXT_MANAGED != 0)
    {
        return Ok(());
    }
    let req = message(
        RTM_NEWNEIGH,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
        &ndmsg(hop, NUD_NONE),
        &[
            attr(NDA_DST, &octets(hop.via)),
            attr(NDA_FLAGS_EXT, &NTF_EXT_MANAGED.to_ne_bytes()),
        ]
        .concat(),
    );
    Rtnl::open()
        .and_then(|mut nl| nl.ask(req))
        .map(drop)
        .map_err(|e| annotate(e, what()))
}

/// Removes the managed neighbour entry of `hop`, if it is still managed.
///
/// Why: once no target needs `hop` any more, the kernel would otherwise
/// keep probing it every few seconds for as long as it exists. Only an entry
/// that still carries `NTF_EXT_MANAGED` is deleted, so an entry someone has
/// since made permanent (or otherwise replaced) stays. Best effort (this
/// runs when targets go away, where there is nobody to hand an error to):
/// failures are logged, an entry already gone is fine. The kernel has no
/// conditional delete, so an entry replaced between the check and the
/// delete could still go; it is re-learned on demand.
pub fn release(hop: &NextHop) {
    if let Err(e) = release_managed(hop) {
        tracing::warn!(
            "could not remove the managed neighbour {} on ifindex {}: {e}",
            hop.via,
            hop.ifindex
        );
    }
}

/// Whether the neighbour entry of `hop` is usable by `bpf_fib_lookup`:
/// its state is one of the kernel's NUD_VALID (REACHABLE, STALE, DELAY,
/// PROBE, PERMANENT, NOARP).
///
/// Why: a target whose next hop is not resolved would have its packets
/// dropped by XDP (NO_NEIGH); callers report it or hold the target back
/// until its neighbour is resolved. STALE, DELAY and PROBE count because
/// the entry still has its MAC and the kernel is only re-confirming it. No
/// entry at all is `Ok(false)`.
pub fn is_resolved(hop: &NextHop) -> io::Result<bool> {
    Ok(lookup(hop)
        .map_err(|e| {
            annotate(
                e,
                format!("neighbour {} on ifindex {}", hop.via, hop.ifindex),
            )
        })?
        .is_some_and(|e| e.state & NUD_VALID != 0))
}

/// [`release`], with the outcome: whether an entry was deleted.
fn release_managed(hop: &NextHop) -> io::Result<bool> {
    let Some(entry) = lookup(hop)? else {
        return Ok(false);
    };
    if entry.flags_ext & NTF_EXT_MANAGED == 0 || entry.state & NUD_PERMANENT != 0 {
        return Ok(false);
    }
    let req = message(
        RTM_DELNEIGH,
        NLM_F_REQUEST | NLM_F_ACK,
        &ndmsg(hop, 0),
        &attr(NDA_DST, &octets(hop.via)),
    );
    match Rtnl::open().and_then(|mut nl| nl.ask(req)) {
        Ok(_) => Ok(true),
        Err(e) if e.errno == libc::ENOENT => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// One neighbour entry as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// NUD_* state.
    state: u16,
    /// `NDA_FLAGS_EXT` (NTF_EXT_*), 0 when absent.
    flags_ext: u32,
    /// The resolved link-layer address, if any.
    lladdr: Option<Vec<u8>>,
}

/// The neighbour entry of `hop` (RTM_GETNEIGH), `None` if there is none.
fn lookup(hop: &NextHop) -> Result<Option<Entry>, NlError> {
    let req = message(
        RTM_GETNEIGH,
        NLM_F_REQUEST,
        &ndmsg(hop, 0),
        &attr(NDA_DST, &octets(hop.via)),
    );
    let answer = match Rtnl::open().and_then(|mut nl| nl.ask(req)) {
        Ok(a) => a,
        Err(e) if e.errno == libc::ENOENT => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(msg) = answer.iter().find(|m| u16_at(m, 4) == Some(RTM_NEWNEIGH)) else {
        return Ok(None);
    };
    let state = u16_at(msg, NLMSG_HDRLEN + 8).ok_or_else(|| NlError::short("neighbour"))?;
    let mut entry = Entry {
        state,
        flags_ext: 0,
        lladdr: None,
    };
    for (kind, payload) in attributes(msg.get(NLMSG_HDRLEN + NDMSG_LEN..).unwrap_or(&[])) {
        match kind {
            NDA_FLAGS_EXT => entry.flags_ext = u32_at(payload, 0).unwrap_or(0),
            NDA_LLADDR => entry.lladdr = Some(payload.to_vec()),
            _ => {}
        }
    }
    Ok(Some(entry))
}

/// struct ndmsg for `hop` with `state`.
fn ndmsg(hop: &NextHop, state: u16) -> [u8; NDMSG_LEN] {
    let mut m = [0u8; NDMSG_LEN];
    m[0] = family(hop.via);
    m[4..8].copy_from_slice(&hop.ifindex.to_ne_bytes());
    m[8..10].copy_from_slice(&state.to_ne_bytes());
    m
}

fn family(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}

fn octets(addr: IpAddr) -> Vec<u8> {
    match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn ip_from(b: &[u8]) -> Option<IpAddr> {
    match b.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(b).ok()?))),
        16 => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).ok()?))),
        _ => None,
    }
}

fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + payload.len() + 3);
    v.extend_from_slice(&((payload.len() + 4) as u16).to_ne_bytes());
    v.extend_from_slice(&kind.to_ne_bytes());
    v.extend_from_slice(payload);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

/// A netlink request: nlmsghdr (sequence and port id filled in when sent),
/// the fixed family header, attributes.
fn message(kind: u16, flags: u16, header: &[u8], attrs: &[u8]) -> Vec<u8> {
    let len = NLMSG_HDRLEN + header.len() + attrs.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    m.extend_from_slice(header);
    m.extend_from_slice(attrs);
    m
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The attributes in `b`: (type, payload).
fn attributes(b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while let (Some(l), Some(t)) = (u16_at(b, at), u16_at(b, at + 2)) {
        let l = l as usize;
        if l < 4 || at + l > b.len() {
            break;
        }
        out.push((t & NLA_TYPE_MASK, &b[at + 4..at + l]));
        at += (l + 3) & !3;
    }
    out
}

/// What the kernel refused a request with: the errno and, when it said more
/// (extended ack), its message.
#[derive(Debug)]
struct NlError {
    errno: i32,
    message: Option<String>,
}

impl NlError {
    fn short(what: &str) -> NlError {
        NlError {
            errno: libc::EBADMSG,
            message: Some(format!("short {what} answer from the kernel")),
        }
    }

    fn last_os() -> NlError {
        NlError {
            errno: io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
            message: None,
        }
    }
}

impl std::fmt::Display for NlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The errno's text without io::Error's " (os error N)" suffix.
        let os = io::Error::from_raw_os_error(self.errno).to_string();
        let text = os.split(" (os error").next().unwrap_or(&os);
        match &self.message {
            Some(m) => write!(f, "{text} ({m})"),
            None => f.write_str(text),
        }
    }
}

impl From<NlError> for io::Error {
    fn from(e: NlError) -> io::Error {
        io::Error::new(io::Error::from_raw_os_error(e.errno).kind(), e.to_string())
    }
}

/// `what: <the kernel's answer>`, keeping the error kind.
fn annotate(e: NlError, what: String) -> io::Error {
    io::Error::new(
        io::Error::from_raw_os_error(e.errno).kind(),
        format!("{what}: {e}"),
    )
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// A NETLINK_ROUTE socket in the calling thread's network namespace.
struct Rtnl {
    sock: OwnedFd,
    seq: u32,
}

impl Rtnl {
    fn open() -> Result<Rtnl, NlError> {
        // SAFETY: plain socket(2); the fd is owned right away.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(NlError::last_os());
        }
        // SAFETY: fd was just returned by socket(2).
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        let tv = libc::timeval {
            tv_sec: 2,
            tv_usec: 0,
        };
        let one: libc::c_int = 1;
        // SAFETY: setsockopt with live values of the right sizes. Extended
        // acks (the kernel's error text) and capped acks (no echo of the
        // request) are optional: failures are ignored.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            );
            for opt in [NETLINK_EXT_ACK, NETLINK_CAP_ACK] {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::SOL_NETLINK,
                    opt,
                    (&one as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as u32,
                );
            }
        }
        Ok(Rtnl { sock, seq: 0 })
    }

    /// Sends `req` and collects the answers to it: the data messages, until
    /// the ack (requests with NLM_F_ACK), NLMSG_DONE (dumps) or the one
    /// answer of a plain get. A refusal becomes the kernel's errno.
    fn ask(&mut self, mut req: Vec<u8>) -> Result<Vec<Vec<u8>>, NlError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        req[8..12].copy_from_slice(&seq.to_ne_bytes());
        let wants_ack = u16_at(&req, 6).unwrap_or(0) & NLM_F_ACK != 0;
        // SAFETY: req is a valid buffer of its length.
        let sent = unsafe { libc::send(self.sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
        if sent < 0 {
            return Err(NlError::last_os());
        }
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            // SAFETY: buf is a valid writable buffer of its length.
            let n = unsafe {
                libc::recv(
                    self.sock.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                return Err(NlError::last_os());
            }
            let n = n as usize;
            if n > buf.len() {
                return Err(NlError {
                    errno: libc::EMSGSIZE,
                    message: Some(format!("netlink answer of {n} bytes truncated")),
                });
            }
            let mut at = 0;
            while at + NLMSG_HDRLEN <= n {
                let b = &buf[at..n];
                let len = u32_at(b, 0).unwrap_or(0) as usize;
                if len < NLMSG_HDRLEN || len > b.len() {
                    return Err(NlError::short("netlink"));
                }
                let msg = &b[..len];
                at += (len + 3) & !3;
                if u32_at(msg, 8) != Some(seq) {
                    continue;
                }
                let kind = u16_at(msg, 4).unwrap_or(0);
                let flags = u16_at(msg, 6).unwrap_or(0);
                match kind {
                    NLMSG_ERROR => {
                        let errno = -(u32_at(msg, NLMSG_HDRLEN)
                            .ok_or_else(|| NlError::short("ack"))?
                            as i32);
                        if errno == 0 {
                            return Ok(out);
                        }
                        return Err(NlError {
                            errno,
                            message: ack_message(msg, flags),
                        });
                    }
                    NLMSG_DONE => {
                        let err = u32_at(msg, NLMSG_HDRLEN).map_or(0, |e| e as i32);
                        if err < 0 {
                            return Err(NlError {
                                errno: -err,
                                message: None,
                            });
                        }
                        return Ok(out);
                    }
                    _ => {
                        out.push(msg.to_vec());
                        if flags & NLM_F_MULTI == 0 && !wants_ack {
                            return Ok(out);
                        }
                    }
                }
            }
        }
    }
}

/// The kernel's error text (NLMSGERR_ATTR_MSG) in an NLMSG_ERROR answer.
fn ack_message(msg: &[u8], flags: u16) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    // struct nlmsgerr: the errno, then the request's nlmsghdr, followed by
    // the rest of the request unless the ack is capped.
    let mut at = NLMSG_HDRLEN + 4 + NLMSG_HDRLEN;
    if flags & NLM_F_CAPPED == 0 {
        let req_len = u32_at(msg, NLMSG_HDRLEN + 4)? as usize;
        at = NLMSG_HDRLEN + 4 + ((req_len + 3) & !3);
    }
    attributes(msg.get(at..)?)
        .into_iter()
        .find(|(t, _)| *t == NLMSGERR_ATTR_MSG)
        .map(|(_, v)| {
            String::from_utf8_lossy(v.split(|&c| c == 0).next().unwrap_or(v)).into_owned()
        })
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rivora_lab::{Netns, link};
    use std::time::Duration;

    const NUD_INCOMPLETE: u16 = 0x01;
    const NUD_FAILED: u16 = 0x20;

    const TARGET4: &str = "10.77.0.2";
    const TARGET6: &str = "fd00:77::2";

    /// How long the kernel gets to resolve a managed entry on a veth.
    const RESOLVE_LIMIT: Duration = Duration::from_secs(3);

    /// Our namespace (`v0`: 10.77.0.1/24, fd00:77::1/64) and a peer
    /// namespace owning the targets on the other end of the veth (`v1`:
    /// 10.77.0.2/24, fd00:77::2/64). Both are deleted on drop, also when a
    /// test panics.
    fn lab() -> (Netns, Netns) {
        rivora_lab::require_root().expect("these tests need root");
        let ns = Netns::new("nbr").expect("creating the test namespace");
        let peer = Netns::new("nbrp").expect("creating the peer namespace");
        link::veth(&ns, "v0", &peer, "v1").unwrap();
        link::addr(&ns, "v0", "10.77.0.1/24").unwrap();
        link::addr(&ns, "v0", "fd00:77::1/64").unwrap();
        link::addr(&peer, "v1", "10.77.0.2/24").unwrap();
        link::addr(&peer, "v1", "fd00:77::2/64").unwrap();
        link::up(&ns, "v0").unwrap();
        link::up(&peer, "v1").unwrap();
        (ns, peer)
    }

    fn ifindex(name: &str) -> u32 {
        crate::interface_index(name).expect("interface in this namespace")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn mac_text(mac: &[u8]) -> String {
        mac.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    }

    /// Human-readable NUD state, for messages.
    fn state_name(state: u16) -> String {
        if state == NUD_NONE {
            return "NONE".to_string();
        }
        [
            (NUD_INCOMPLETE, "INCOMPLETE"),
            (NUD_REACHABLE, "REACHABLE"),
            (NUD_STALE, "STALE"),
            (NUD_DELAY, "DELAY"),
            (NUD_PROBE, "PROBE"),
            (NUD_FAILED, "FAILED"),
            (NUD_NOARP, "NOARP"),
            (NUD_PERMANENT, "PERMANENT"),
        ]
        .iter()
        .filter(|(bit, _)| state & bit != 0)
        .map(|(_, name)| *name)
        .collect::<Vec<_>>()
        .join(",")
    }

    fn describe(e: &Option<Entry>) -> String {
        match e {
            None => "no entry".to_string(),
            Some(e) => format!(
                "{}{}{}",
                state_name(e.state),
                e.lladdr
                    .as_deref()
                    .map(|m| format!(" lladdr {}", mac_text(m)))
                    .unwrap_or_default(),
                if e.flags_ext & NTF_EXT_MANAGED != 0 {
                    " managed"
                } else {
                    ""
                }
            ),
        }
    }

    /// `ip -d neigh show ADDR dev v0`, run in `ns`.
    fn ip_neigh_show(ns: &Netns, addr: &str) -> String {
        ns.run(&["ip", "-d", "neigh", "show", addr, "dev", "v0"])
            .unwrap()
    }

    #[test]
    fn next_hop_is_the_target_on_link_and_the_gateway_behind_a_route() {
        let (ns, _peer) = lab();
        link::route(&ns, "10.78.0.0/24", TARGET4).unwrap();
        link::route(&ns, "fd00:78::/64", TARGET6).unwrap();
        // IPv4 over an IPv6 gateway: the kernel answers RTA_VIA.
        ns.run(&[
            "ip",
            "route",
            "add",
            "10.79.0.0/24",
            "via",
            "inet6",
            TARGET6,
            "dev",
            "v0",
        ])
        .unwrap();
        ns.within(|| {
            let v0 = ifindex("v0");
            for target in [TARGET4, TARGET6] {
                assert_eq!(
                    next_hop(ip(target)).unwrap(),
                    NextHop {
                        ifindex: v0,
                        via: ip(target)
                    },
                    "on-link target {target}"
                );
            }
            for (target, gateway) in [
                ("10.78.0.5", TARGET4),
                ("fd00:78::5", TARGET6),
                ("10.79.0.5", TARGET6),
            ] {
                assert_eq!(
                    next_hop(ip(target)).unwrap(),
                    NextHop {
                        ifindex: v0,
                        via: ip(gateway)
                    },
                    "{target} behind a route via {gateway}"
                );
            }
            let local = next_hop(ip("10.77.0.1")).unwrap_err();
            assert!(
                local.to_string().contains("10.77.0.1 is a local address"),
                "{local}"
            );
        })
        .unwrap();
    }

    #[test]
    fn no_route_is_an_error_naming_the_address() {
        rivora_lab::require_root().expect("these tests need root");
        let ns = Netns::new("nbrn").unwrap();
        ns.within(|| {
            for target in ["10.1.2.3", "fd00:99::1"] {
                let e = next_hop(ip(target)).unwrap_err();
                assert_eq!(
                    e.to_string(),
                    format!("no route to {target}: Network is unreachable")
                );
                assert_eq!(e.kind(), io::ErrorKind::NetworkUnreachable);
            }
            let nowhere = NextHop {
                ifindex: 4242,
                via: ip(TARGET4),
            };
            let e = ensure_managed(&nowhere).unwrap_err();
            assert!(e.to_string().contains(TARGET4), "{e}");
            assert!(e.to_string().contains("No such device"), "{e}");
        })
        .unwrap();
    }

    #[test]
    fn managed_entry_resolves_to_the_peer_and_release_removes_it() {
        let (ns, peer) = lab();
        let peer_mac = link::mac(&peer, "v1").unwrap();
        // Right after coming up, a veth loses the first IPv6 neighbour
        // solicitations for up to about two seconds (seen on 6.18; gone
        // once DAD has finished): the deadline below is for the managed
        // entry, not for the link coming up.
        for n in [&ns, &peer] {
            link::wait_ipv6_settled(n, Duration::from_secs(5)).unwrap();
        }
        for target in [TARGET4, TARGET6] {
            let hop = ns.within(|| next_hop(ip(target)).unwrap()).unwrap();
            let started = std::time::Instant::now();
            ns.within(|| {
                assert!(!is_resolved(&hop).unwrap(), "{target} resolved before");
                ensure_managed(&hop).unwrap();
                let mut last = None;
                let resolved = rivora_lab::poll_until(
                    &format!("the managed entry of {target} to resolve"),
                    RESOLVE_LIMIT,
                    Duration::from_millis(20),
                    || {
                        last = lookup(&hop).map_err(|e| e.to_string())?;
                        match is_resolved(&hop) {
                            Ok(true) => Ok(()),
                            Ok(false) => Err(describe(&last)),
                            Err(e) => Err(e.to_string()),
                        }
                    },
                );
                if let Err(e) = resolved {
                    panic!("{e}");
                }
                eprintln!("{target} resolved after {:?}", started.elapsed());
                let entry = lookup(&hop).unwrap().expect("the entry");
                assert_ne!(
                    entry.flags_ext & NTF_EXT_MANAGED,
                    0,
                    "{}",
                    describe(&Some(entry.clone()))
                );
                assert_eq!(
                    entry.lladdr.as_deref().map(mac_text).as_deref(),
                    Some(peer_mac.as_str()),
                    "{target}"
                );
                // Again: nothing to do, nothing broken.
                ensure_managed(&hop).unwrap();
                assert!(is_resolved(&hop).unwrap());
            })
            .unwrap();
            let shown = ip_neigh_show(&ns, target);
            assert!(
                shown.contains("managed") && shown.contains(&peer_mac),
                "`ip -d neigh show {target} dev v0`: {shown}"
            );
            ns.within(|| {
                assert!(release_managed(&hop).unwrap(), "release of {target}");
                assert_eq!(describe(&lookup(&hop).unwrap()), "no entry", "{target}");
                assert!(!is_resolved(&hop).unwrap());
                // Gone already: fine, and nothing to log.
                assert!(!release_managed(&hop).unwrap());
                release(&hop);
            })
            .unwrap();
            let shown = ip_neigh_show(&ns, target);
            assert!(shown.trim().is_empty(), "after release: {shown}");
        }
    }

    #[test]
    fn static_entries_are_left_alone_and_reachable_ones_stay_usable() {
        let (ns, peer) = lab();
        let peer_mac = link::mac(&peer, "v1").unwrap();
        for target in [TARGET4, TARGET6] {
            // Someone else's permanent entry (a MAC nobody has, so a probe
            // could never confirm it).
            link::neigh_permanent(&ns, "v0", target, "02:00:00:00:77:99").unwrap();
            ns.within(|| {
                let hop = next_hop(ip(target)).unwrap();
                ensure_managed(&hop).unwrap();
                let after = lookup(&hop).unwrap();
                assert_eq!(
                    describe(&after),
                    "PERMANENT lladdr 02:00:00:00:77:99",
                    "{target}"
                );
                assert!(is_resolved(&hop).unwrap());
                assert!(!release_managed(&hop).unwrap(), "{target}");
                release(&hop);
                assert_eq!(
                    describe(&lookup(&hop).unwrap()),
                    "PERMANENT lladdr 02:00:00:00:77:99",
                    "{target} after release"
                );
            })
            .unwrap();
            assert!(!ip_neigh_show(&ns, target).contains("managed"));
            // A dynamic REACHABLE entry becomes managed and stays usable
            // throughout (same state, same MAC).
            ns.run(&[
                "ip",
                "neigh",
                "replace",
                target,
                "lladdr",
                &peer_mac,
                "dev",
                "v0",
                "nud",
                "reachable",
            ])
            .unwrap();
            ns.within(|| {
                let hop = next_hop(ip(target)).unwrap();
                ensure_managed(&hop).unwrap();
                assert_eq!(
                    describe(&lookup(&hop).unwrap()),
                    format!("REACHABLE lladdr {peer_mac} managed"),
                    "{target}"
                );
                assert!(release_managed(&hop).unwrap());
            })
            .unwrap();
        }
    }

    #[test]
    fn extended_acks_give_the_kernels_message() {
        // A capped NLMSG_ERROR: nlmsghdr, errno, the request's header, TLVs.
        let text = b"Invalid NTF_* flag for permanent entry\0";
        let mut msg = Vec::new();
        let tlv = attr(NLMSGERR_ATTR_MSG, text);
        let len = (NLMSG_HDRLEN + 4 + NLMSG_HDRLEN + tlv.len()) as u32;
        msg.extend_from_slice(&len.to_ne_bytes());
        msg.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        msg.extend_from_slice(&(NLM_F_CAPPED | NLM_F_ACK_TLVS).to_ne_bytes());
        msg.extend_from_slice(&[0; 8]);
        msg.extend_from_slice(&(-libc::EINVAL).to_ne_bytes());
        msg.extend_from_slice(&message(RTM_NEWNEIGH, NLM_F_REQUEST, &[0; 12], &[])[..16]);
        msg.extend_from_slice(&tlv);
        assert_eq!(
            ack_message(&msg, NLM_F_CAPPED | NLM_F_ACK_TLVS).as_deref(),
            Some("Invalid NTF_* flag for permanent entry")
        );
        assert_eq!(ack_message(&msg, NLM_F_CAPPED), None);
        let e = NlError {
            errno: libc::EINVAL,
            message: Some("x".into()),
        };
        assert_eq!(e.to_string(), "Invalid argument (x)");
    }
}
