//! BGP-4 messages on the wire: encoding and decoding, nothing else.
//!
//! Why a pure module: every byte the speaker sends or accepts goes through
//! here, so it is the part that most needs exhaustive tests (unit tests, a
//! property test against an independent parser, and a fuzz test), and those
//! are only cheap and deterministic when there are no sockets or clocks in
//! the way. The session logic (`session.rs`) decides *what* to send; this
//! module only knows *how* it looks on the wire.
//!
//! Covered: the message header, OPEN with optional parameters and
//! capabilities (RFC 4271, RFC 5492; multiprotocol RFC 4760, route refresh
//! RFC 2918, 4-octet AS RFC 6793), UPDATE with the RFC 4271 attributes plus
//! COMMUNITIES (RFC 1997) and MP_REACH_NLRI / MP_UNREACH_NLRI for IPv4 and
//! IPv6 unicast, NOTIFICATION, KEEPALIVE and ROUTE-REFRESH.
//!
//! Decoding validates as RFC 4271 section 6 asks and reports a problem as the
//! [`Notification`] that must be sent back (error code, subcode and data), so
//! the session never has to second-guess an error. Unknown optional
//! attributes and unknown capabilities are kept as opaque values.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::prefix::Prefix;

/// The 16 all-ones bytes that start every message.
pub const MARKER: [u8; 16] = [0xff; 16];
/// Length of the fixed header: marker, 2-byte length, 1-byte type.
pub const HEADER_LEN: usize = 19;
/// Largest message without the extended-message capability (RFC 8654,
/// which this speaker does not advertise).
pub const MAX_MESSAGE_LEN: usize = 4096;
/// The only protocol version spoken.
pub const BGP_VERSION: u8 = 4;
/// The 2-octet stand-in for a 4-octet AS number (RFC 6793).
pub const AS_TRANS: u16 = 23456;
/// Address family identifier for IPv4.
pub const AFI_IPV4: u16 = 1;
/// Address family identifier for IPv6.
pub const AFI_IPV6: u16 = 2;
/// Subsequent address family identifier for unicast.
pub const SAFI_UNICAST: u8 = 1;

/// Minimum lengths of each message type, header included (RFC 4271 4.x).
const MIN_OPEN_LEN: usize = 29;
const MIN_UPDATE_LEN: usize = 23;
const MIN_NOTIFICATION_LEN: usize = 21;
const ROUTE_REFRESH_LEN: usize = 23;

/// Message type codes (RFC 4271 4.1, RFC 2918).
pub mod kind {
    /// OPEN.
    pub const OPEN: u8 = 1;
    /// UPDATE.
    pub const UPDATE: u8 = 2;
    /// NOTIFICATION.
    pub const NOTIFICATION: u8 = 3;
    /// KEEPALIVE.
    pub const KEEPALIVE: u8 = 4;
    /// ROUTE-REFRESH (RFC 2918).
    pub const ROUTE_REFRESH: u8 = 5;
}

/// Path attribute type codes.
pub mod attr {
    /// ORIGIN (well-known mandatory).
    pub const ORIGIN: u8 = 1;
    /// AS_PATH (well-known mandatory).
    pub const AS_PATH: u8 = 2;
    /// NEXT_HOP (well-known mandatory for IPv4 NLRI).
    pub const NEXT_HOP: u8 = 3;
    /// MULTI_EXIT_DISC (optional non-transitive).
    pub const MED: u8 = 4;
    /// LOCAL_PREF (well-known, iBGP).
    pub const LOCAL_PREF: u8 = 5;
    /// ATOMIC_AGGREGATE (well-known discretionary).
    pub const ATOMIC_AGGREGATE: u8 = 6;
    /// AGGREGATOR (optional transitive).
    pub const AGGREGATOR: u8 = 7;
    /// COMMUNITIES (optional transitive, RFC 1997).
    pub const COMMUNITIES: u8 = 8;
    /// MP_REACH_NLRI (optional non-transitive, RFC 4760).
    pub const MP_REACH_NLRI: u8 = 14;
    /// MP_UNREACH_NLRI (optional non-transitive, RFC 4760).
    pub const MP_UNREACH_NLRI: u8 = 15;
}

/// Path attribute flag bits.
pub mod flag {
    /// The attribute is optional (not well-known).
    pub const OPTIONAL: u8 = 0x80;
    /// The attribute is transitive.
    pub const TRANSITIVE: u8 = 0x40;
    /// Partial: an optional transitive attribute was passed on unrecognised.
    pub const PARTIAL: u8 = 0x20;
    /// The length field is two octets.
    pub const EXTENDED_LENGTH: u8 = 0x10;
}

/// Capability codes (RFC 5492 registry).
pub mod cap {
    /// Multiprotocol extensions (RFC 4760).
    pub const MULTIPROTOCOL: u8 = 1;
    /// Route refresh (RFC 2918).
    pub const ROUTE_REFRESH: u8 = 2;
    /// 4-octet AS numbers (RFC 6793).
    pub const FOUR_OCTET_AS: u8 = 65;
}

/// NOTIFICATION error codes and subcodes.
pub mod err {
    /// Message Header Error.
    pub const HEADER: u8 = 1;
    /// OPEN Message Error.
    pub const OPEN: u8 = 2;
    /// UPDATE Message Error.
    pub const UPDATE: u8 = 3;
    /// Hold Timer Expired.
    pub const HOLD_TIMER_EXPIRED: u8 = 4;
    /// Finite State Machine Error.
    pub const FSM: u8 = 5;
    /// Cease.
    pub const CEASE: u8 = 6;

    /// Header: the marker is not all ones.
    pub const CONNECTION_NOT_SYNCHRONIZED: u8 = 1;
    /// Header: the length is out of range or does not fit the type.
    pub const BAD_MESSAGE_LENGTH: u8 = 2;
    /// Header: unknown message type.
    pub const BAD_MESSAGE_TYPE: u8 = 3;

    /// OPEN (and others): no more specific subcode applies.
    pub const UNSPECIFIC: u8 = 0;
    /// OPEN: version is not 4.
    pub const UNSUPPORTED_VERSION: u8 = 1;
    /// OPEN: the AS is not the configured one.
    pub const BAD_PEER_AS: u8 = 2;
    /// OPEN: the BGP identifier is unusable.
    pub const BAD_BGP_ID: u8 = 3;
    /// OPEN: an optional parameter type other than capabilities.
    pub const UNSUPPORTED_OPTIONAL_PARAMETER: u8 = 4;
    /// OPEN: hold time 1 or 2 seconds.
    pub const UNACCEPTABLE_HOLD_TIME: u8 = 6;

    /// UPDATE: lengths inconsistent, or an attribute repeated.
    pub const MALFORMED_ATTRIBUTE_LIST: u8 = 1;
    /// UPDATE: unknown attribute without the optional bit.
    pub const UNRECOGNIZED_WELL_KNOWN: u8 = 2;
    /// UPDATE: ORIGIN, AS_PATH or NEXT_HOP missing.
    pub const MISSING_WELL_KNOWN: u8 = 3;
    /// UPDATE: flags contradict the attribute type.
    pub const ATTRIBUTE_FLAGS: u8 = 4;
    /// UPDATE: length contradicts the attribute type.
    pub const ATTRIBUTE_LENGTH: u8 = 5;
    /// UPDATE: ORIGIN value not 0, 1 or 2.
    pub const INVALID_ORIGIN: u8 = 6;
    /// UPDATE: NEXT_HOP is not a usable host address.
    pub const INVALID_NEXT_HOP: u8 = 8;
    /// UPDATE: a recognised optional attribute is malformed.
    pub const OPTIONAL_ATTRIBUTE: u8 = 9;
    /// UPDATE: bad prefix in the NLRI or withdrawn routes.
    pub const INVALID_NETWORK_FIELD: u8 = 10;
    /// UPDATE: AS_PATH cannot be parsed.
    pub const MALFORMED_AS_PATH: u8 = 11;

    /// FSM (RFC 6608): unexpected message in OpenSent.
    pub const FSM_OPEN_SENT: u8 = 1;
    /// FSM (RFC 6608): unexpected message in OpenConfirm.
    pub const FSM_OPEN_CONFIRM: u8 = 2;
    /// FSM (RFC 6608): unexpected message in Established.
    pub const FSM_ESTABLISHED: u8 = 3;

    /// Cease (RFC 4486): administrative shutdown.
    pub const ADMINISTRATIVE_SHUTDOWN: u8 = 2;
}

/// Origin values.
pub mod origin {
    /// Learned from an interior protocol / configured: what we announce.
    pub const IGP: u8 = 0;
    /// Learned via EGP.
    pub const EGP: u8 = 1;
    /// Learned some other way.
    pub const INCOMPLETE: u8 = 2;
}

/// AS_PATH segment types (RFC 4271, RFC 5065).
pub mod segment {
    /// Unordered set.
    pub const AS_SET: u8 = 1;
    /// Ordered sequence.
    pub const AS_SEQUENCE: u8 = 2;
    /// Confederation sequence.
    pub const AS_CONFED_SEQUENCE: u8 = 3;
    /// Confederation set.
    pub const AS_CONFED_SET: u8 = 4;
}

/// Per-session facts that change how messages are laid out.
///
/// Why: AS numbers in AS_PATH and AGGREGATOR are two or four octets wide
/// depending on whether both sides advertised the 4-octet AS capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    /// Both sides advertised the 4-octet AS capability.
    pub four_octet_as: bool,
}

/// One BGP message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Starts a session and carries its parameters.
    Open(Open),
    /// Announces and withdraws routes.
    Update(Update),
    /// Reports an error (or a Cease) and ends the session.
    Notification(Notification),
    /// Proves liveness and acknowledges an OPEN.
    Keepalive,
    /// Asks the peer to send its routes again (RFC 2918).
    RouteRefresh(RouteRefresh),
}

/// The OPEN message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    /// Protocol version; always 4 when decoded successfully.
    pub version: u8,
    /// The 2-octet "My Autonomous System" field ([`AS_TRANS`] for big ASes).
    pub my_as: u16,
    /// Proposed hold time in seconds (0, or 3 and more).
    pub hold_time: u16,
    /// The sender's BGP identifier.
    pub bgp_id: Ipv4Addr,
    /// All capabilities from all capability optional parameters, in order.
    pub capabilities: Vec<Capability>,
}

impl Open {
    /// The sender's real AS: the 4-octet capability if present, else the
    /// 2-octet field (RFC 6793 4.1).
    pub fn peer_as(&self) -> u32 {
        self.four_octet_as().unwrap_or(u32::from(self.my_as))
    }

    /// The AS from the 4-octet AS capability, if advertised.
    pub fn four_octet_as(&self) -> Option<u32> {
        self.capabilities.iter().find_map(|c| match c {
            Capability::FourOctetAs(a) => Some(*a),
            _ => None,
        })
    }

    /// True if the capability list contains `(afi, safi)` multiprotocol.
    pub fn has_family(&self, afi: u16, safi: u8) -> bool {
        self.capabilities
            .contains(&Capability::Multiprotocol { afi, safi })
    }

    /// True if any multiprotocol capability is present (without one, IPv4
    /// unicast is implied, RFC 4760 8).
    pub fn has_any_family(&self) -> bool {
        self.capabilities
            .iter()
            .any(|c| matches!(c, Capability::Multiprotocol { .. }))
    }
}

/// One capability in an OPEN (RFC 5492).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capability {
    /// Multiprotocol extensions for one AFI/SAFI (RFC 4760).
    Multiprotocol {
        /// Address family.
        afi: u16,
        /// Subsequent address family.
        safi: u8,
    },
    /// Route refresh (RFC 2918).
    RouteRefresh,
    /// 4-octet AS numbers, carrying the speaker's AS (RFC 6793).
    FourOctetAs(u32),
    /// Anything else, kept verbatim (unknown capabilities are ignored).
    Unknown {
        /// Capability code.
        code: u8,
        /// Capability value.
        value: Vec<u8>,
    },
}

/// The ROUTE-REFRESH message (RFC 2918).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteRefresh {
    /// Address family to refresh.
    pub afi: u16,
    /// Reserved octet (subtype in RFC 7313; 0 for a plain refresh).
    pub subtype: u8,
    /// Subsequent address family to refresh.
    pub safi: u8,
}

/// The NOTIFICATION message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Error code (see [`err`]).
    pub code: u8,
    /// Error subcode (see [`err`]).
    pub subcode: u8,
    /// Diagnostic data, meaning depends on code and subcode.
    pub data: Vec<u8>,
}

/// The UPDATE message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Update {
    /// Withdrawn IPv4 unicast prefixes.
    pub withdrawn: Vec<Prefix>,
    /// Path attributes, in wire order.
    pub attributes: Vec<Attribute>,
    /// Announced IPv4 unicast prefixes.
    pub nlri: Vec<Prefix>,
}

/// One AS_PATH segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsSegment {
    /// Segment type (see [`segment`]).
    pub kind: u8,
    /// The AS numbers (1 to 255 of them).
    pub asns: Vec<u32>,
}

/// One path attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attribute {
    /// ORIGIN (see [`origin`]).
    Origin(u8),
    /// AS_PATH.
    AsPath(Vec<AsSegment>),
    /// NEXT_HOP for the IPv4 NLRI.
    NextHop(Ipv4Addr),
    /// MULTI_EXIT_DISC.
    Med(u32),
    /// LOCAL_PREF.
    LocalPref(u32),
    /// ATOMIC_AGGREGATE.
    AtomicAggregate,
    /// AGGREGATOR.
    Aggregator {
        /// The aggregating AS.
        asn: u32,
        /// The aggregating router's identifier.
        address: Ipv4Addr,
    },
    /// COMMUNITIES: 32-bit values, conventionally `AS:value`.
    Communities(Vec<u32>),
    /// MP_REACH_NLRI for IPv4 or IPv6 unicast.
    MpReach {
        /// Address family.
        afi: u16,
        /// Subsequent address family.
        safi: u8,
        /// One next hop, or for IPv6 a global and a link-local one.
        next_hops: Vec<IpAddr>,
        /// The announced prefixes.
        nlri: Vec<Prefix>,
    },
    /// MP_UNREACH_NLRI for IPv4 or IPv6 unicast (empty: End-of-RIB).
    MpUnreach {
        /// Address family.
        afi: u16,
        /// Subsequent address family.
        safi: u8,
        /// The withdrawn prefixes.
        withdrawn: Vec<Prefix>,
    },
    /// Any other attribute (and MP attributes of other families), verbatim.
    Other {
        /// Flags as received, without the extended-length bit (encoding
        /// sets it from the value's length).
        flags: u8,
        /// Type code.
        code: u8,
        /// Value.
        value: Vec<u8>,
    },
}

impl Attribute {
    /// The type code.
    pub fn code(&self) -> u8 {
        match self {
            Attribute::Origin(_) => attr::ORIGIN,
            Attribute::AsPath(_) => attr::AS_PATH,
            Attribute::NextHop(_) => attr::NEXT_HOP,
            Attribute::Med(_) => attr::MED,
            Attribute::LocalPref(_) => attr::LOCAL_PREF,
            Attribute::AtomicAggregate => attr::ATOMIC_AGGREGATE,
            Attribute::Aggregator { .. } => attr::AGGREGATOR,
            Attribute::Communities(_) => attr::COMMUNITIES,
            Attribute::MpReach { .. } => attr::MP_REACH_NLRI,
            Attribute::MpUnreach { .. } => attr::MP_UNREACH_NLRI,
            Attribute::Other { code, .. } => *code,
        }
    }
}

/// A message that could not be accepted, with the NOTIFICATION to answer it.
///
/// Why both: the notification is what the protocol needs, the reason is
/// what an operator reading the log needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (sending NOTIFICATION {})", notification.describe())]
pub struct DecodeError {
    /// What to send back.
    pub notification: Notification,
    /// Human-readable explanation.
    pub reason: String,
}

impl DecodeError {
    fn new(code: u8, subcode: u8, data: Vec<u8>, reason: impl Into<String>) -> DecodeError {
        DecodeError {
            notification: Notification {
                code,
                subcode,
                data,
            },
            reason: reason.into(),
        }
    }
}

// ---------------------------------------------------------------------------
// Framing

/// Looks at the header at the start of `buf`.
///
/// Returns `Ok(None)` while the message is incomplete, `Ok(Some(len))` when
/// `buf[..len]` is one whole message, or the header error. The header is
/// checked as soon as its bytes arrive, so garbage is rejected without
/// waiting for a length it announces.
pub fn frame(buf: &[u8]) -> Result<Option<usize>, DecodeError> {
    let marker_seen = buf.len().min(16);
    if buf[..marker_seen].iter().any(|&b| b != 0xff) {
        return Err(DecodeError::new(
            err::HEADER,
            err::CONNECTION_NOT_SYNCHRONIZED,
            Vec::new(),
            "message marker is not all ones",
        ));
    }
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let len = usize::from(u16::from_be_bytes([buf[16], buf[17]]));
    let kind = buf[18];
    let bad_len = |what: &str| {
        DecodeError::new(
            err::HEADER,
            err::BAD_MESSAGE_LENGTH,
            buf[16..18].to_vec(),
            format!("message length {len} {what}"),
        )
    };
    if !(HEADER_LEN..=MAX_MESSAGE_LEN).contains(&len) {
        return Err(bad_len("is outside 19..=4096"));
    }
    match kind {
        kind::OPEN if len < MIN_OPEN_LEN => return Err(bad_len("is too short for an OPEN")),
        kind::UPDATE if len < MIN_UPDATE_LEN => {
            return Err(bad_len("is too short for an UPDATE"));
        }
        kind::NOTIFICATION if len < MIN_NOTIFICATION_LEN => {
            return Err(bad_len("is too short for a NOTIFICATION"));
        }
        kind::KEEPALIVE if len != HEADER_LEN => return Err(bad_len("is wrong for a KEEPALIVE")),
        kind::ROUTE_REFRESH if len != ROUTE_REFRESH_LEN => {
            return Err(bad_len("is wrong for a ROUTE-REFRESH"));
        }
        kind::OPEN | kind::UPDATE | kind::NOTIFICATION | kind::KEEPALIVE | kind::ROUTE_REFRESH => {}
        other => {
            return Err(DecodeError::new(
                err::HEADER,
                err::BAD_MESSAGE_TYPE,
                vec![other],
                format!("unknown message type {other}"),
            ));
        }
    }
    Ok((buf.len() >= len).then_some(len))
}

/// Decodes exactly one whole message (header included).
///
/// `msg` must be what [`frame`] delimited; anything else is reported as a
/// header error too.
pub fn decode(msg: &[u8], ctx: Context) -> Result<Message, DecodeError> {
    match frame(msg)? {
        Some(len) if len == msg.len() => decode_body(msg[18], &msg[HEADER_LEN..], ctx),
        _ => Err(DecodeError::new(
            err::HEADER,
            err::BAD_MESSAGE_LENGTH,
            msg.get(16..18).map(<[u8]>::to_vec).unwrap_or_default(),
            format!("buffer of {} bytes is not one whole message", msg.len()),
        )),
    }
}

/// Decodes the body of a message whose header [`frame`] already accepted.
///
/// Also safe on any other input: a body too short or long for its type is
/// reported as Bad Message Length.
pub fn decode_body(kind: u8, body: &[u8], ctx: Context) -> Result<Message, DecodeError> {
    let total = body.len() + HEADER_LEN;
    let len_ok = match kind {
        kind::OPEN => total >= MIN_OPEN_LEN,
        kind::UPDATE => total >= MIN_UPDATE_LEN,
        kind::NOTIFICATION => total >= MIN_NOTIFICATION_LEN,
        kind::KEEPALIVE => total == HEADER_LEN,
        kind::ROUTE_REFRESH => total == ROUTE_REFRESH_LEN,
        _ => true,
    };
    if !len_ok || total > MAX_MESSAGE_LEN {
        let field = u16::try_from(total).unwrap_or(u16::MAX);
        return Err(DecodeError::new(
            err::HEADER,
            err::BAD_MESSAGE_LENGTH,
            field.to_be_bytes().to_vec(),
            format!("message length {total} is wrong for type {kind}"),
        ));
    }
    match kind {
        kind::OPEN => decode_open(body).map(Message::Open),
        kind::UPDATE => decode_update(body, ctx).map(Message::Update),
        kind::NOTIFICATION => Ok(Message::Notification(Notification {
            code: body[0],
            subcode: body[1],
            data: body[2..].to_vec(),
        })),
        kind::KEEPALIVE => Ok(Message::Keepalive),
        kind::ROUTE_REFRESH => Ok(Message::RouteRefresh(RouteRefresh {
            afi: u16::from_be_bytes([body[0], body[1]]),
            subtype: body[2],
            safi: body[3],
        })),
        other => Err(DecodeError::new(
            err::HEADER,
            err::BAD_MESSAGE_TYPE,
            vec![other],
            format!("unknown message type {other}"),
        )),
    }
}

// ---------------------------------------------------------------------------
// OPEN

fn open_error(subcode: u8, data: Vec<u8>, reason: impl Into<String>) -> DecodeError {
    DecodeError::new(err::OPEN, subcode, data, reason)
}

fn decode_open(body: &[u8]) -> Result<Open, DecodeError> {
    // body.len() >= 10 is guaranteed by frame().
    let version = body[0];
    if version != BGP_VERSION {
        return Err(open_error(
            err::UNSUPPORTED_VERSION,
            u16::from(BGP_VERSION).to_be_bytes().to_vec(),
            format!("OPEN version {version}, only 4 is supported"),
        ));
    }
    let my_as = u16::from_be_bytes([body[1], body[2]]);
    let hold_time = u16::from_be_bytes([body[3], body[4]]);
    let bgp_id = Ipv4Addr::new(body[5], body[6], body[7], body[8]);
    let opt_len = usize::from(body[9]);
    let params = &body[10..];
    if params.len() != opt_len {
        // The header length disagrees with the optional parameters length:
        // the message length is what is wrong (as BIRD also reports it).
        let total = (body.len() + HEADER_LEN) as u16;
        return Err(DecodeError::new(
            err::HEADER,
            err::BAD_MESSAGE_LENGTH,
            total.to_be_bytes().to_vec(),
            format!(
                "OPEN optional parameters length {opt_len} but {} bytes follow",
                params.len()
            ),
        ));
    }
    let mut capabilities = Vec::new();
    let mut p = params;
    while !p.is_empty() {
        if p.len() < 2 || p.len() < 2 + usize::from(p[1]) {
            return Err(open_error(
                err::UNSPECIFIC,
                Vec::new(),
                "OPEN optional parameter overruns the parameters field",
            ));
        }
        let (ptype, plen) = (p[0], usize::from(p[1]));
        let value = &p[2..2 + plen];
        if ptype != 2 {
            return Err(open_error(
                err::UNSUPPORTED_OPTIONAL_PARAMETER,
                Vec::new(),
                format!("OPEN optional parameter type {ptype} is not supported"),
            ));
        }
        decode_capabilities(value, &mut capabilities)?;
        p = &p[2 + plen..];
    }
    Ok(Open {
        version,
        my_as,
        hold_time,
        bgp_id,
        capabilities,
    })
}

fn decode_capabilities(mut v: &[u8], out: &mut Vec<Capability>) -> Result<(), DecodeError> {
    while !v.is_empty() {
        if v.len() < 2 || v.len() < 2 + usize::from(v[1]) {
            return Err(open_error(
                err::UNSPECIFIC,
                Vec::new(),
                "OPEN capability overruns its optional parameter",
            ));
        }
        let (code, len) = (v[0], usize::from(v[1]));
        let value = &v[2..2 + len];
        let malformed = |what: &str| {
            open_error(
                err::UNSPECIFIC,
                Vec::new(),
                format!("OPEN {what} capability has length {len}"),
            )
        };
        let c = match code {
            cap::MULTIPROTOCOL => {
                if len != 4 {
                    return Err(malformed("multiprotocol"));
                }
                Capability::Multiprotocol {
                    afi: u16::from_be_bytes([value[0], value[1]]),
                    safi: value[3],
                }
            }
            cap::ROUTE_REFRESH => {
                if len != 0 {
                    return Err(malformed("route refresh"));
                }
                Capability::RouteRefresh
            }
            cap::FOUR_OCTET_AS => {
                if len != 4 {
                    return Err(malformed("4-octet AS"));
                }
                Capability::FourOctetAs(u32::from_be_bytes([
                    value[0], value[1], value[2], value[3],
                ]))
            }
            _ => Capability::Unknown {
                code,
                value: value.to_vec(),
            },
        };
        out.push(c);
        v = &v[2 + len..];
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// UPDATE

fn update_error(subcode: u8, data: Vec<u8>, reason: impl Into<String>) -> DecodeError {
    DecodeError::new(err::UPDATE, subcode, data, reason)
}

fn decode_update(body: &[u8], ctx: Context) -> Result<Update, DecodeError> {
    // body.len() >= 4 is guaranteed by frame().
    let wlen = usize::from(u16::from_be_bytes([body[0], body[1]]));
    if 2 + wlen + 2 > body.len() {
        return Err(update_error(
            err::MALFORMED_ATTRIBUTE_LIST,
            Vec::new(),
            format!("UPDATE withdrawn routes length {wlen} overruns the message"),
        ));
    }
    let withdrawn_raw = &body[2..2 + wlen];
    let alen = usize::from(u16::from_be_bytes([body[2 + wlen], body[3 + wlen]]));
    if 4 + wlen + alen > body.len() {
        return Err(update_error(
            err::MALFORMED_ATTRIBUTE_LIST,
            Vec::new(),
            format!("UPDATE total path attribute length {alen} overruns the message"),
        ));
    }
    let attrs_raw = &body[4 + wlen..4 + wlen + alen];
    let nlri_raw = &body[4 + wlen + alen..];

    let withdrawn = decode_prefixes(withdrawn_raw, false).map_err(|why| {
        update_error(
            err::INVALID_NETWORK_FIELD,
            Vec::new(),
            format!("UPDATE withdrawn routes: {why}"),
        )
    })?;

    let mut attributes = Vec::new();
    let mut seen = [false; 256];
    let mut a = attrs_raw;
    while !a.is_empty() {
        let ext = a[0] & flag::EXTENDED_LENGTH != 0;
        let hdr = if ext { 4 } else { 3 };
        if a.len() < hdr {
            return Err(update_error(
                err::MALFORMED_ATTRIBUTE_LIST,
                Vec::new(),
                "UPDATE path attribute header overruns the attributes field",
            ));
        }
        let vlen = if ext {
            usize::from(u16::from_be_bytes([a[2], a[3]]))
        } else {
            usize::from(a[2])
        };
        if a.len() < hdr + vlen {
            return Err(update_error(
                err::MALFORMED_ATTRIBUTE_LIST,
                Vec::new(),
                format!(
                    "UPDATE path attribute {} of length {vlen} overruns the attributes field",
                    a[1]
                ),
            ));
        }
        let whole = &a[..hdr + vlen];
        let code = a[1];
        if seen[usize::from(code)] {
            return Err(update_error(
                err::MALFORMED_ATTRIBUTE_LIST,
                Vec::new(),
                format!("UPDATE path attribute {code} appears twice"),
            ));
        }
        seen[usize::from(code)] = true;
        attributes.push(decode_attribute(
            a[0],
            code,
            &a[hdr..hdr + vlen],
            whole,
            ctx,
        )?);
        a = &a[hdr + vlen..];
    }

    let nlri = decode_prefixes(nlri_raw, false).map_err(|why| {
        update_error(
            err::INVALID_NETWORK_FIELD,
            Vec::new(),
            format!("UPDATE NLRI: {why}"),
        )
    })?;

    let has = |c: u8| seen[usize::from(c)];
    // RFC 4760: an UPDATE carrying MP_REACH_NLRI still needs ORIGIN and
    // AS_PATH; NEXT_HOP only goes with IPv4 NLRI in the plain field.
    if !nlri.is_empty() || has(attr::MP_REACH_NLRI) {
        let mut required = vec![attr::ORIGIN, attr::AS_PATH];
        if !nlri.is_empty() {
            required.push(attr::NEXT_HOP);
        }
        for code in required {
            if !has(code) {
                return Err(update_error(
                    err::MISSING_WELL_KNOWN,
                    vec![code],
                    format!("UPDATE announces routes without mandatory attribute {code}"),
                ));
            }
        }
    }
    Ok(Update {
        withdrawn,
        attributes,
        nlri,
    })
}

/// Expected flags (optional, transitive) for the attributes we recognise,
/// and whether the partial bit may be set.
fn expected_flags(code: u8) -> Option<(bool, bool, bool)> {
    match code {
        attr::ORIGIN
        | attr::AS_PATH
        | attr::NEXT_HOP
        | attr::LOCAL_PREF
        | attr::ATOMIC_AGGREGATE => Some((false, true, false)),
        attr::MED | attr::MP_REACH_NLRI | attr::MP_UNREACH_NLRI => Some((true, false, false)),
        attr::AGGREGATOR | attr::COMMUNITIES => Some((true, true, true)),
        _ => None,
    }
}

fn decode_attribute(
    flags: u8,
    code: u8,
    v: &[u8],
    whole: &[u8],
    ctx: Context,
) -> Result<Attribute, DecodeError> {
    let optional = flags & flag::OPTIONAL != 0;
    let transitive = flags & flag::TRANSITIVE != 0;
    // Kept in `Attribute::Other`; the length encoding is not a property of
    // the attribute.
    let flags_kept = flags & !flag::EXTENDED_LENGTH;
    let partial = flags & flag::PARTIAL != 0;
    let data = || whole.to_vec();
    match expected_flags(code) {
        Some((o, t, partial_ok)) => {
            if optional != o || transitive != t || (partial && !partial_ok) {
                return Err(update_error(
                    err::ATTRIBUTE_FLAGS,
                    data(),
                    format!("UPDATE path attribute {code} has wrong flags {flags:#04x}"),
                ));
            }
        }
        None => {
            if !optional {
                return Err(update_error(
                    err::UNRECOGNIZED_WELL_KNOWN,
                    data(),
                    format!("UPDATE has unrecognized well-known attribute {code}"),
                ));
            }
            if !transitive && partial {
                return Err(update_error(
                    err::ATTRIBUTE_FLAGS,
                    data(),
                    format!(
                        "UPDATE optional non-transitive attribute {code} has the partial bit set"
                    ),
                ));
            }
        }
    }
    let bad_len = || {
        update_error(
            err::ATTRIBUTE_LENGTH,
            data(),
            format!("UPDATE path attribute {code} has wrong length {}", v.len()),
        )
    };
    let u32_at = |i: usize| u32::from_be_bytes([v[i], v[i + 1], v[i + 2], v[i + 3]]);
    Ok(match code {
        attr::ORIGIN => {
            if v.len() != 1 {
                return Err(bad_len());
            }
            if v[0] > origin::INCOMPLETE {
                return Err(update_error(
                    err::INVALID_ORIGIN,
                    data(),
                    format!("UPDATE ORIGIN value {} is undefined", v[0]),
                ));
            }
            Attribute::Origin(v[0])
        }
        attr::AS_PATH => {
            Attribute::AsPath(decode_as_path(v, ctx.four_octet_as).ok_or_else(|| {
                update_error(
                    err::MALFORMED_AS_PATH,
                    Vec::new(),
                    "UPDATE AS_PATH is malformed",
                )
            })?)
        }
        attr::NEXT_HOP => {
            if v.len() != 4 {
                return Err(bad_len());
            }
            let nh = Ipv4Addr::new(v[0], v[1], v[2], v[3]);
            if nh.is_unspecified() || nh.is_broadcast() || nh.is_multicast() {
                return Err(update_error(
                    err::INVALID_NEXT_HOP,
                    data(),
                    format!("UPDATE NEXT_HOP {nh} is not a host address"),
                ));
            }
            Attribute::NextHop(nh)
        }
        attr::MED | attr::LOCAL_PREF => {
            if v.len() != 4 {
                return Err(bad_len());
            }
            if code == attr::MED {
                Attribute::Med(u32_at(0))
            } else {
                Attribute::LocalPref(u32_at(0))
            }
        }
        attr::ATOMIC_AGGREGATE => {
            if !v.is_empty() {
                return Err(bad_len());
            }
            Attribute::AtomicAggregate
        }
        attr::AGGREGATOR => {
            let want = if ctx.four_octet_as { 8 } else { 6 };
            if v.len() != want {
                return Err(bad_len());
            }
            let (asn, rest) = if ctx.four_octet_as {
                (u32_at(0), &v[4..])
            } else {
                (u32::from(u16::from_be_bytes([v[0], v[1]])), &v[2..])
            };
            Attribute::Aggregator {
                asn,
                address: Ipv4Addr::new(rest[0], rest[1], rest[2], rest[3]),
            }
        }
        attr::COMMUNITIES => {
            if v.is_empty() || !v.len().is_multiple_of(4) {
                return Err(bad_len());
            }
            Attribute::Communities((0..v.len()).step_by(4).map(u32_at).collect())
        }
        attr::MP_REACH_NLRI => decode_mp_reach(flags_kept, v, whole)?,
        attr::MP_UNREACH_NLRI => decode_mp_unreach(flags_kept, v, whole)?,
        _ => Attribute::Other {
            flags: flags_kept,
            code,
            value: v.to_vec(),
        },
    })
}

fn decode_as_path(mut v: &[u8], four: bool) -> Option<Vec<AsSegment>> {
    let width = if four { 4 } else { 2 };
    let mut segs = Vec::new();
    while !v.is_empty() {
        if v.len() < 2 {
            return None;
        }
        let (kind, count) = (v[0], usize::from(v[1]));
        if !(segment::AS_SET..=segment::AS_CONFED_SET).contains(&kind) || count == 0 {
            return None;
        }
        let n = count * width;
        if v.len() < 2 + n {
            return None;
        }
        let asns = v[2..2 + n]
            .chunks_exact(width)
            .map(|c| {
                if four {
                    u32::from_be_bytes([c[0], c[1], c[2], c[3]])
                } else {
                    u32::from(u16::from_be_bytes([c[0], c[1]]))
                }
            })
            .collect();
        segs.push(AsSegment { kind, asns });
        v = &v[2 + n..];
    }
    Some(segs)
}

fn known_family(afi: u16, safi: u8) -> bool {
    safi == SAFI_UNICAST && (afi == AFI_IPV4 || afi == AFI_IPV6)
}

fn mp_error(whole: &[u8], reason: String) -> DecodeError {
    update_error(err::OPTIONAL_ATTRIBUTE, whole.to_vec(), reason)
}

fn decode_mp_reach(flags: u8, v: &[u8], whole: &[u8]) -> Result<Attribute, DecodeError> {
    if v.len() < 5 {
        return Err(mp_error(
            whole,
            format!("UPDATE MP_REACH_NLRI too short ({} bytes)", v.len()),
        ));
    }
    let afi = u16::from_be_bytes([v[0], v[1]]);
    let safi = v[2];
    let nhlen = usize::from(v[3]);
    if v.len() < 4 + nhlen + 1 {
        return Err(mp_error(
            whole,
            "UPDATE MP_REACH_NLRI next hop overruns the attribute".into(),
        ));
    }
    if !known_family(afi, safi) {
        return Ok(Attribute::Other {
            flags,
            code: attr::MP_REACH_NLRI,
            value: v.to_vec(),
        });
    }
    let nh = &v[4..4 + nhlen];
    let next_hops: Vec<IpAddr> = match (afi, nhlen) {
        (AFI_IPV4, 4) => vec![IpAddr::V4(Ipv4Addr::new(nh[0], nh[1], nh[2], nh[3]))],
        (AFI_IPV6, 16) => vec![IpAddr::V6(v6_at(nh, 0))],
        (AFI_IPV6, 32) => vec![IpAddr::V6(v6_at(nh, 0)), IpAddr::V6(v6_at(nh, 16))],
        _ => {
            return Err(mp_error(
                whole,
                format!("UPDATE MP_REACH_NLRI next hop length {nhlen} is invalid for AFI {afi}"),
            ));
        }
    };
    // One reserved octet (formerly SNPAs) after the next hop.
    let nlri = decode_prefixes(&v[4 + nhlen + 1..], afi == AFI_IPV6)
        .map_err(|why| mp_error(whole, format!("UPDATE MP_REACH_NLRI: {why}")))?;
    Ok(Attribute::MpReach {
        afi,
        safi,
        next_hops,
        nlri,
    })
}

fn decode_mp_unreach(flags: u8, v: &[u8], whole: &[u8]) -> Result<Attribute, DecodeError> {
    if v.len() < 3 {
        return Err(mp_error(
            whole,
            format!("UPDATE MP_UNREACH_NLRI too short ({} bytes)", v.len()),
        ));
    }
    let afi = u16::from_be_bytes([v[0], v[1]]);
    let safi = v[2];
    if !known_family(afi, safi) {
        return Ok(Attribute::Other {
            flags,
            code: attr::MP_UNREACH_NLRI,
            value: v.to_vec(),
        });
    }
    let withdrawn = decode_prefixes(&v[3..], afi == AFI_IPV6)
        .map_err(|why| mp_error(whole, format!("UPDATE MP_UNREACH_NLRI: {why}")))?;
    Ok(Attribute::MpUnreach {
        afi,
        safi,
        withdrawn,
    })
}

fn v6_at(b: &[u8], i: usize) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&b[i..i + 16]);
    Ipv6Addr::from(o)
}

/// Decodes a sequence of (length, significant bytes) prefixes.
fn decode_prefixes(mut b: &[u8], v6: bool) -> Result<Vec<Prefix>, String> {
    let max = if v6 { 128 } else { 32 };
    let mut out = Vec::new();
    while !b.is_empty() {
        let len = b[0];
        if len > max {
            return Err(format!("prefix length {len} exceeds {max}"));
        }
        let n = usize::from(len).div_ceil(8);
        if b.len() < 1 + n {
            return Err(format!("prefix of length {len} is truncated"));
        }
        let addr = if v6 {
            let mut o = [0u8; 16];
            o[..n].copy_from_slice(&b[1..1 + n]);
            IpAddr::V6(Ipv6Addr::from(o))
        } else {
            let mut o = [0u8; 4];
            o[..n].copy_from_slice(&b[1..1 + n]);
            IpAddr::V4(Ipv4Addr::from(o))
        };
        // Bits past the length are not significant (RFC 4271 4.3): clear them.
        out.push(Prefix::new_masked(addr, len).ok_or_else(|| format!("bad prefix length {len}"))?);
        b = &b[1 + n..];
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Encoding

impl Message {
    /// The message type code.
    pub fn kind(&self) -> u8 {
        match self {
            Message::Open(_) => kind::OPEN,
            Message::Update(_) => kind::UPDATE,
            Message::Notification(_) => kind::NOTIFICATION,
            Message::Keepalive => kind::KEEPALIVE,
            Message::RouteRefresh(_) => kind::ROUTE_REFRESH,
        }
    }

    /// Encodes the message, header included.
    ///
    /// The caller keeps messages within [`MAX_MESSAGE_LEN`]; the update
    /// builder in the session sizes its UPDATEs so that they always fit.
    pub fn encode(&self, ctx: Context) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&MARKER);
        out.extend_from_slice(&[0, 0, self.kind()]);
        match self {
            Message::Open(o) => encode_open(o, &mut out),
            Message::Update(u) => encode_update(u, ctx, &mut out),
            Message::Notification(n) => {
                out.push(n.code);
                out.push(n.subcode);
                out.extend_from_slice(&n.data);
            }
            Message::Keepalive => {}
            Message::RouteRefresh(r) => {
                out.extend_from_slice(&r.afi.to_be_bytes());
                out.push(r.subtype);
                out.push(r.safi);
            }
        }
        let len = u16::try_from(out.len()).unwrap_or(u16::MAX);
        out[16..18].copy_from_slice(&len.to_be_bytes());
        out
    }
}

fn encode_capability(c: &Capability, out: &mut Vec<u8>) {
    match c {
        Capability::Multiprotocol { afi, safi } => {
            out.extend_from_slice(&[cap::MULTIPROTOCOL, 4]);
            out.extend_from_slice(&afi.to_be_bytes());
            out.extend_from_slice(&[0, *safi]);
        }
        Capability::RouteRefresh => out.extend_from_slice(&[cap::ROUTE_REFRESH, 0]),
        Capability::FourOctetAs(a) => {
            out.extend_from_slice(&[cap::FOUR_OCTET_AS, 4]);
            out.extend_from_slice(&a.to_be_bytes());
        }
        Capability::Unknown { code, value } => {
            out.push(*code);
            out.push(value.len().min(255) as u8);
            out.extend_from_slice(&value[..value.len().min(255)]);
        }
    }
}

fn encode_open(o: &Open, out: &mut Vec<u8>) {
    out.push(o.version);
    out.extend_from_slice(&o.my_as.to_be_bytes());
    out.extend_from_slice(&o.hold_time.to_be_bytes());
    out.extend_from_slice(&o.bgp_id.octets());
    // All capabilities in one "capabilities" optional parameter. The
    // parameters field is at most 255 bytes (no RFC 9072 extended format);
    // our own OPEN needs 22.
    let mut caps: Vec<u8> = Vec::new();
    for c in &o.capabilities {
        encode_capability(c, &mut caps);
    }
    if caps.is_empty() {
        out.push(0);
    } else {
        out.push((caps.len() + 2).min(255) as u8);
        out.push(2);
        out.push(caps.len().min(253) as u8);
        out.extend_from_slice(&caps);
    }
}

/// Encodes `prefix` as NLRI: one length byte and the significant bytes.
pub fn encode_prefix(p: &Prefix, out: &mut Vec<u8>) {
    out.push(p.len());
    out.extend_from_slice(&p.significant_bytes());
}

/// Bytes [`encode_prefix`] produces for `p`.
pub fn prefix_wire_len(p: &Prefix) -> usize {
    1 + usize::from(p.len()).div_ceil(8)
}

fn encode_update(u: &Update, ctx: Context, out: &mut Vec<u8>) {
    let mut w = Vec::new();
    for p in &u.withdrawn {
        encode_prefix(p, &mut w);
    }
    out.extend_from_slice(&(w.len() as u16).to_be_bytes());
    out.extend_from_slice(&w);
    let mut a = Vec::new();
    for at in &u.attributes {
        encode_attribute(at, ctx, &mut a);
    }
    out.extend_from_slice(&(a.len() as u16).to_be_bytes());
    out.extend_from_slice(&a);
    for p in &u.nlri {
        encode_prefix(p, out);
    }
}

fn as_width(asn: u32, four: bool, out: &mut Vec<u8>) {
    if four {
        out.extend_from_slice(&asn.to_be_bytes());
    } else {
        let two = u16::try_from(asn).unwrap_or(AS_TRANS);
        out.extend_from_slice(&two.to_be_bytes());
    }
}

/// Encodes one path attribute with its canonical flags.
pub fn encode_attribute(a: &Attribute, ctx: Context, out: &mut Vec<u8>) {
    let mut v = Vec::new();
    let base_flags = match a {
        Attribute::Origin(o) => {
            v.push(*o);
            flag::TRANSITIVE
        }
        Attribute::AsPath(segs) => {
            for s in segs {
                v.push(s.kind);
                v.push(s.asns.len() as u8);
                for asn in &s.asns {
                    as_width(*asn, ctx.four_octet_as, &mut v);
                }
            }
            flag::TRANSITIVE
        }
        Attribute::NextHop(nh) => {
            v.extend_from_slice(&nh.octets());
            flag::TRANSITIVE
        }
        Attribute::Med(m) => {
            v.extend_from_slice(&m.to_be_bytes());
            flag::OPTIONAL
        }
        Attribute::LocalPref(l) => {
            v.extend_from_slice(&l.to_be_bytes());
            flag::TRANSITIVE
        }
        Attribute::AtomicAggregate => flag::TRANSITIVE,
        Attribute::Aggregator { asn, address } => {
            as_width(*asn, ctx.four_octet_as, &mut v);
            v.extend_from_slice(&address.octets());
            flag::OPTIONAL | flag::TRANSITIVE
        }
        Attribute::Communities(cs) => {
            for c in cs {
                v.extend_from_slice(&c.to_be_bytes());
            }
            flag::OPTIONAL | flag::TRANSITIVE
        }
        Attribute::MpReach {
            afi,
            safi,
            next_hops,
            nlri,
        } => {
            v.extend_from_slice(&afi.to_be_bytes());
            v.push(*safi);
            let mut nh = Vec::new();
            for h in next_hops {
                match h {
                    IpAddr::V4(a) => nh.extend_from_slice(&a.octets()),
                    IpAddr::V6(a) => nh.extend_from_slice(&a.octets()),
                }
            }
            v.push(nh.len() as u8);
            v.extend_from_slice(&nh);
            v.push(0); // reserved
            for p in nlri {
                encode_prefix(p, &mut v);
            }
            flag::OPTIONAL
        }
        Attribute::MpUnreach {
            afi,
            safi,
            withdrawn,
        } => {
            v.extend_from_slice(&afi.to_be_bytes());
            v.push(*safi);
            for p in withdrawn {
                encode_prefix(p, &mut v);
            }
            flag::OPTIONAL
        }
        Attribute::Other { flags, value, .. } => {
            v.extend_from_slice(value);
            flags & !flag::EXTENDED_LENGTH
        }
    };
    if v.len() > 255 {
        out.push(base_flags | flag::EXTENDED_LENGTH);
        out.push(a.code());
        out.extend_from_slice(&(v.len() as u16).to_be_bytes());
    } else {
        out.push(base_flags);
        out.push(a.code());
        out.push(v.len() as u8);
    }
    out.extend_from_slice(&v);
}

// ---------------------------------------------------------------------------
// Describing notifications

impl Notification {
    /// Builds a notification.
    pub fn new(code: u8, subcode: u8, data: Vec<u8>) -> Notification {
        Notification {
            code,
            subcode,
            data,
        }
    }

    /// Cease / Administrative Shutdown with a shutdown communication
    /// (RFC 8203/9003: a length byte and UTF-8 text that peers log).
    pub fn administrative_shutdown(text: &str) -> Notification {
        let mut t = text.as_bytes();
        if t.len() > 255 {
            let mut end = 255;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            t = &t[..end];
        }
        let mut data = vec![t.len() as u8];
        data.extend_from_slice(t);
        Notification::new(err::CEASE, err::ADMINISTRATIVE_SHUTDOWN, data)
    }

    /// "Code name / subcode name" plus decoded data where that helps, for
    /// logs and `rivoractl bgp`.
    pub fn describe(&self) -> String {
        let (code, sub) = names(self.code, self.subcode);
        let mut s = format!("{code} / {sub} ({}/{})", self.code, self.subcode);
        if self.code == err::CEASE
            && (self.subcode == err::ADMINISTRATIVE_SHUTDOWN || self.subcode == 4)
            && let Some((&n, rest)) = self.data.split_first()
            && usize::from(n) <= rest.len()
            && n > 0
        {
            let text = String::from_utf8_lossy(&rest[..usize::from(n)]);
            s.push_str(&format!(": {:?}", text));
        } else if !self.data.is_empty() {
            s.push_str(&format!(
                " data {}",
                hex(&self.data[..self.data.len().min(32)])
            ));
        }
        s
    }
}

impl fmt::Display for Notification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Names for error codes and subcodes (RFC 4271 4.5, RFC 4486, RFC 6608).
pub fn names(code: u8, subcode: u8) -> (&'static str, &'static str) {
    match code {
        err::HEADER => (
            "Message Header Error",
            match subcode {
                1 => "Connection Not Synchronized",
                2 => "Bad Message Length",
                3 => "Bad Message Type",
                _ => "unknown subcode",
            },
        ),
        err::OPEN => (
            "OPEN Message Error",
            match subcode {
                0 => "Unspecific",
                1 => "Unsupported Version Number",
                2 => "Bad Peer AS",
                3 => "Bad BGP Identifier",
                4 => "Unsupported Optional Parameter",
                6 => "Unacceptable Hold Time",
                7 => "Unsupported Capability",
                8 => "Role Mismatch",
                _ => "unknown subcode",
            },
        ),
        err::UPDATE => (
            "UPDATE Message Error",
            match subcode {
                1 => "Malformed Attribute List",
                2 => "Unrecognized Well-known Attribute",
                3 => "Missing Well-known Attribute",
                4 => "Attribute Flags Error",
                5 => "Attribute Length Error",
                6 => "Invalid ORIGIN Attribute",
                8 => "Invalid NEXT_HOP Attribute",
                9 => "Optional Attribute Error",
                10 => "Invalid Network Field",
                11 => "Malformed AS_PATH",
                _ => "unknown subcode",
            },
        ),
        err::HOLD_TIMER_EXPIRED => ("Hold Timer Expired", "Unspecific"),
        err::FSM => (
            "Finite State Machine Error",
            match subcode {
                0 => "Unspecific",
                1 => "Unexpected Message in OpenSent",
                2 => "Unexpected Message in OpenConfirm",
                3 => "Unexpected Message in Established",
                _ => "unknown subcode",
            },
        ),
        err::CEASE => (
            "Cease",
            match subcode {
                1 => "Maximum Number of Prefixes Reached",
                2 => "Administrative Shutdown",
                3 => "Peer De-configured",
                4 => "Administrative Reset",
                5 => "Connection Rejected",
                6 => "Other Configuration Change",
                7 => "Connection Collision Resolution",
                8 => "Out of Resources",
                9 => "Hard Reset",
                10 => "BFD Down",
                _ => "unknown subcode",
            },
        ),
        7 => ("ROUTE-REFRESH Message Error", "unknown subcode"),
        _ => ("unknown error code", "unknown subcode"),
    }
}

#[cfg(test)]
#[path = "msg_tests.rs"]
mod tests;
