//! Parsing of ARP requests and neighbour solicitations, and building of the
//! ARP and neighbour-advertisement frames the responder sends.
//!
//! Why by hand and not with a packet library: the responder needs exactly
//! two input shapes and four output shapes, all fixed-size, and it must
//! reject anything that is not exactly one of those shapes (a malformed
//! request from the wire must never be answered, and never panic). Each
//! parser checks every length before it reads, and returns why it rejected a
//! frame, which the responder logs at debug level and the unit tests assert.
//! The tests check every built frame with an independent parser
//! (etherparse) and an independent checksum.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Length of an untagged Ethernet header.
pub(crate) const ETH_HLEN: usize = 14;
/// EtherType of ARP.
pub(crate) const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of IPv6.
pub(crate) const ETHERTYPE_IPV6: u16 = 0x86dd;
/// EtherType of IPv4, the ARP protocol type we answer for.
const ETHERTYPE_IPV4: u16 = 0x0800;
/// ARP hardware type of Ethernet.
const ARP_HTYPE_ETHERNET: u16 = 1;
/// ARP operation codes.
pub(crate) const ARP_OP_REQUEST: u16 = 1;
pub(crate) const ARP_OP_REPLY: u16 = 2;
/// Ethernet frames shorter than this (without FCS) are runts on the wire;
/// ARP frames are padded up to it.
pub(crate) const ETH_MIN_FRAME: usize = 60;
/// Length of an ARP packet for Ethernet/IPv4.
const ARP_LEN: usize = 28;
/// Length of an IPv6 header.
const IPV6_HLEN: usize = 40;
/// IPv6 next-header value of ICMPv6.
pub(crate) const IPPROTO_ICMPV6: u8 = 58;
/// ICMPv6 types of neighbour solicitation and advertisement (RFC 4861).
pub(crate) const ICMPV6_NS: u8 = 135;
pub(crate) const ICMPV6_NA: u8 = 136;
/// Neighbour discovery messages must carry hop limit 255 (RFC 4861 7.1),
/// proof that they were not forwarded by a router.
pub(crate) const ND_HOP_LIMIT: u8 = 255;
/// Fixed part of an NS or NA: type, code, checksum, 4 bytes, target.
const ND_FIXED_LEN: usize = 24;
/// ND option types (RFC 4861 4.6.1).
const ND_OPT_SOURCE_LLADDR: u8 = 1;
const ND_OPT_TARGET_LLADDR: u8 = 2;
/// NA flag bits in the first byte after the checksum (RFC 4861 4.4); the
/// Router flag (0x80) stays clear: the VIP is not a router.
pub(crate) const NA_FLAG_SOLICITED: u8 = 0x40;
pub(crate) const NA_FLAG_OVERRIDE: u8 = 0x20;
/// Length of the NAs we build: fixed part plus one target link-layer option.
const NA_ICMP_LEN: usize = ND_FIXED_LEN + 8;
/// Total length of an NA frame we build.
pub(crate) const NA_FRAME_LEN: usize = ETH_HLEN + IPV6_HLEN + NA_ICMP_LEN;

/// An Ethernet MAC address.
///
/// Why a type of its own: the responder's answers carry the interface's MAC,
/// and `rivoractl speaker` shows it; a newtype prints in the usual
/// `aa:bb:cc:dd:ee:ff` form and cannot be confused with other byte arrays.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// `ff:ff:ff:ff:ff:ff`, where ARP requests and announcements go.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// `00:00:00:00:00:00`, the "unknown" target hardware address of an ARP
    /// request.
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// True for an individual (unicast), non-zero address.
    ///
    /// Why: only such an address may be the destination of a reply; an ARP
    /// request claiming a multicast or zero sender address is bogus and must
    /// not make us send frames to a group.
    pub fn is_unicast(&self) -> bool {
        self.0[0] & 1 == 0 && *self != MacAddr::ZERO
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a frame was not accepted as a request; logged at debug level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reject(pub &'static str);

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// A well-formed ARP request (Ethernet hardware, IPv4 protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ArpRequest {
    /// Source MAC of the Ethernet header.
    pub eth_src: MacAddr,
    /// Sender hardware address: where the reply goes (RFC 826).
    pub sender_mac: MacAddr,
    /// Sender protocol address; 0.0.0.0 in an RFC 5227 probe.
    pub sender_ip: Ipv4Addr,
    /// The address being resolved.
    pub target_ip: Ipv4Addr,
}

impl ArpRequest {
    /// An RFC 5227 probe: a host checking whether `target_ip` is in use.
    pub(crate) fn is_probe(&self) -> bool {
        self.sender_ip.is_unspecified()
    }

    /// A gratuitous ARP / RFC 5227 announcement: the sender announces its
    /// own address; no answer is expected.
    pub(crate) fn is_announcement(&self) -> bool {
        self.sender_ip == self.target_ip
    }
}

/// A well-formed neighbour solicitation (RFC 4861 4.3, validated per 7.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NeighborSolicitation {
    /// Source MAC of the Ethernet header.
    pub eth_src: MacAddr,
    /// IPv6 source; `::` during duplicate address detection.
    pub src: Ipv6Addr,
    /// IPv6 destination: the target itself or its solicited-node group.
    pub dst: Ipv6Addr,
    /// The address being resolved.
    pub target: Ipv6Addr,
    /// The source link-layer address option, if present.
    pub source_lladdr: Option<MacAddr>,
}

/// Turns a failed bounds-checked read into a rejection.
fn need<T>(v: Option<T>) -> Result<T, Reject> {
    v.ok_or(Reject("truncated"))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn mac_at(b: &[u8], at: usize) -> Option<MacAddr> {
    Some(MacAddr(b.get(at..at + 6)?.try_into().ok()?))
}

fn ipv4_at(b: &[u8], at: usize) -> Option<Ipv4Addr> {
    let a: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(Ipv4Addr::from(a))
}

fn ipv6_at(b: &[u8], at: usize) -> Option<Ipv6Addr> {
    let a: [u8; 16] = b.get(at..at + 16)?.try_into().ok()?;
    Some(Ipv6Addr::from(a))
}

/// Parses an untagged Ethernet frame as an ARP request.
///
/// Anything else (other EtherType, other hardware or protocol type, wrong
/// address lengths, a reply, a truncated packet, a multicast or zero sender
/// hardware address) is rejected with the reason. Trailing bytes (Ethernet
/// padding) are ignored.
pub(crate) fn parse_arp_request(frame: &[u8]) -> Result<ArpRequest, Reject> {
    if frame.len() < ETH_HLEN + ARP_LEN {
        return Err(Reject("too short for Ethernet + ARP"));
    }
    if need(be16(frame, 12))? != ETHERTYPE_ARP {
        return Err(Reject("not an ARP frame"));
    }
    let a = ETH_HLEN;
    if need(be16(frame, a))? != ARP_HTYPE_ETHERNET {
        return Err(Reject("ARP hardware type is not Ethernet"));
    }
    if need(be16(frame, a + 2))? != ETHERTYPE_IPV4 {
        return Err(Reject("ARP protocol type is not IPv4"));
    }
    if frame[a + 4] != 6 || frame[a + 5] != 4 {
        return Err(Reject("ARP address lengths are not 6 and 4"));
    }
    if need(be16(frame, a + 6))? != ARP_OP_REQUEST {
        return Err(Reject("ARP operation is not a request"));
    }
    let req = ArpRequest {
        eth_src: need(mac_at(frame, 6))?,
        sender_mac: need(mac_at(frame, a + 8))?,
        sender_ip: need(ipv4_at(frame, a + 14))?,
        target_ip: need(ipv4_at(frame, a + 24))?,
    };
    if !req.sender_mac.is_unicast() {
        return Err(Reject("ARP sender hardware address is not unicast"));
    }
    Ok(req)
}

/// Builds an ARP packet (Ethernet/IPv4) in an Ethernet frame padded to the
/// 60-byte minimum.
fn arp_frame(
    eth_dst: MacAddr,
    eth_src: MacAddr,
    op: u16,
    sender_mac: MacAddr,
    sender_ip: Ipv4Addr,
    target_mac: MacAddr,
    target_ip: Ipv4Addr,
) -> [u8; ETH_MIN_FRAME] {
    let mut f = [0u8; ETH_MIN_FRAME];
    f[0..6].copy_from_slice(&eth_dst.0);
    f[6..12].copy_from_slice(&eth_src.0);
    f[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    let a = ETH_HLEN;
    f[a..a + 2].copy_from_slice(&ARP_HTYPE_ETHERNET.to_be_bytes());
    f[a + 2..a + 4].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    f[a + 4] = 6;
    f[a + 5] = 4;
    f[a + 6..a + 8].copy_from_slice(&op.to_be_bytes());
    f[a + 8..a + 14].copy_from_slice(&sender_mac.0);
    f[a + 14..a + 18].copy_from_slice(&sender_ip.octets());
    f[a + 18..a + 24].copy_from_slice(&target_mac.0);
    f[a + 24..a + 28].copy_from_slice(&target_ip.octets());
    f
}

/// The ARP reply saying `req.target_ip` is at `our_mac`, unicast to the
/// requester's sender hardware address (RFC 826).
///
/// For an RFC 5227 probe (sender IP 0.0.0.0) the reply's target IP is
/// 0.0.0.0 too, as Linux does when it defends its own addresses, so the
/// prober sees the address is taken.
pub(crate) fn arp_reply(our_mac: MacAddr, req: &ArpRequest) -> [u8; ETH_MIN_FRAME] {
    arp_frame(
        req.sender_mac,
        our_mac,
        ARP_OP_REPLY,
        our_mac,
        req.target_ip,
        req.sender_mac,
        req.sender_ip,
    )
}

/// A gratuitous ARP announcing `vip` at `our_mac`: a broadcast request with
/// sender and target IP both `vip` and a zero target MAC (the RFC 5227
/// "ARP Announcement" form).
///
/// Why the request form: every common stack updates an existing cache entry
/// from it (Linux, BSD, Windows, switches), and, unlike a broadcast reply,
/// it is what RFC 5227 specifies.
pub(crate) fn gratuitous_arp(our_mac: MacAddr, vip: Ipv4Addr) -> [u8; ETH_MIN_FRAME] {
    arp_frame(
        MacAddr::BROADCAST,
        our_mac,
        ARP_OP_REQUEST,
        our_mac,
        vip,
        MacAddr::ZERO,
        vip,
    )
}

/// The solicited-node multicast group of `addr`: `ff02::1:ff` + its low 24
/// bits (RFC 4291 2.7.1), where neighbour solicitations for it are sent.
pub(crate) fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// The Ethernet group address of an IPv6 multicast address: `33:33` + its
/// low 32 bits (RFC 2464 7).
pub(crate) fn ipv6_multicast_mac(group: Ipv6Addr) -> MacAddr {
    let o = group.octets();
    MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

/// The all-nodes group, destination of unsolicited advertisements.
pub(crate) const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// Adds `data` as big-endian 16-bit words to a one's-complement accumulator
/// (an odd last byte is padded with zero).
fn sum_words(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for w in &mut chunks {
        acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
        // Fold early so the accumulator can never overflow, whatever the
        // input length.
        acc = (acc & 0xffff) + (acc >> 16);
    }
    if let [b] = chunks.remainder() {
        acc += u32::from(u16::from_be_bytes([*b, 0]));
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The RFC 1071 sum of the ICMPv6 pseudo-header (RFC 8200 8.1) and `msg`,
/// not complemented. A message with a correct checksum sums to 0xffff.
fn icmpv6_sum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let mut acc = sum_words(0, &src.octets());
    acc = sum_words(acc, &dst.octets());
    // Upper-layer length (32 bits) and next header; msg is at most a frame.
    let len = u32::try_from(msg.len()).unwrap_or(u32::MAX);
    acc = sum_words(acc, &len.to_be_bytes());
    acc = sum_words(acc, &[0, 0, 0, IPPROTO_ICMPV6]);
    fold(sum_words(acc, msg))
}

/// The checksum to store in an ICMPv6 message whose checksum field is zero.
pub(crate) fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    !icmpv6_sum(src, dst, msg)
}

/// Parses an untagged Ethernet frame as a neighbour solicitation and applies
/// the validity checks of RFC 4861 7.1.1 that a receiver must apply: hop
/// limit 255, correct ICMPv6 checksum, code 0, length at least 24, target
/// not multicast, every option of non-zero length and inside the message,
/// and, for a DAD solicitation (source `::`), a solicited-node destination
/// and no source link-layer address option.
///
/// Additionally the destination must be the target itself (unicast, as in
/// neighbour unreachability detection) or the target's solicited-node group,
/// and the packet must have no extension headers (no NS in practice has any).
pub(crate) fn parse_neighbor_solicitation(frame: &[u8]) -> Result<NeighborSolicitation, Reject> {
    if frame.len() < ETH_HLEN + IPV6_HLEN + ND_FIXED_LEN {
        return Err(Reject("too short for Ethernet + IPv6 + NS"));
    }
    if need(be16(frame, 12))? != ETHERTYPE_IPV6 {
        return Err(Reject("not an IPv6 frame"));
    }
    let ip = &frame[ETH_HLEN..];
    if ip[0] >> 4 != 6 {
        return Err(Reject("IP version is not 6"));
    }
    let payload_len = usize::from(need(be16(ip, 4))?);
    if ip[6] != IPPROTO_ICMPV6 {
        return Err(Reject("next header is not ICMPv6"));
    }
    if ip[7] != ND_HOP_LIMIT {
        return Err(Reject("hop limit is not 255"));
    }
    let src = need(ipv6_at(ip, 8))?;
    let dst = need(ipv6_at(ip, 24))?;
    // Bytes after the payload (Ethernet padding) are not part of it.
    let msg = ip
        .get(IPV6_HLEN..IPV6_HLEN + payload_len)
        .ok_or(Reject("IPv6 payload length beyond the frame"))?;
    if msg.len() < ND_FIXED_LEN {
        return Err(Reject("ICMPv6 message shorter than an NS"));
    }
    if msg[0] != ICMPV6_NS {
        return Err(Reject("ICMPv6 type is not neighbour solicitation"));
    }
    if msg[1] != 0 {
        return Err(Reject("ICMPv6 code is not 0"));
    }
    if icmpv6_sum(src, dst, msg) != 0xffff {
        return Err(Reject("bad ICMPv6 checksum"));
    }
    if src.is_multicast() {
        return Err(Reject("source address is multicast"));
    }
    let target = need(ipv6_at(msg, 8))?;
    if target.is_multicast() {
        return Err(Reject("target is a multicast address"));
    }
    let mut source_lladdr = None;
    let mut opts = &msg[ND_FIXED_LEN..];
    while !opts.is_empty() {
        if opts.len() < 2 {
            return Err(Reject("truncated ND option"));
        }
        let len = usize::from(opts[1]) * 8;
        if len == 0 {
            return Err(Reject("ND option of length 0"));
        }
        let opt = opts
            .get(..len)
            .ok_or(Reject("ND option beyond the message"))?;
        if opt[0] == ND_OPT_SOURCE_LLADDR {
            // On Ethernet the option is exactly 8 bytes (RFC 2464 8).
            if len != 8 {
                return Err(Reject("source link-layer option is not 8 bytes"));
            }
            let mac = need(mac_at(opt, 2))?;
            if !mac.is_unicast() {
                return Err(Reject("source link-layer address is not unicast"));
            }
            source_lladdr = Some(mac);
        }
        opts = &opts[len..];
    }
    if src.is_unspecified() {
        if dst != solicited_node(target) {
            return Err(Reject(
                "DAD solicitation not sent to the solicited-node group",
            ));
        }
        if source_lladdr.is_some() {
            return Err(Reject("DAD solicitation with a source link-layer option"));
        }
    } else if dst != target && dst != solicited_node(target) {
        return Err(Reject(
            "destination is neither the target nor its solicited-node group",
        ));
    }
    let eth_src = need(mac_at(frame, 6))?;
    if !eth_src.is_unicast() {
        return Err(Reject("Ethernet source is not unicast"));
    }
    Ok(NeighborSolicitation {
        eth_src,
        src,
        dst,
        target,
        source_lladdr,
    })
}

/// Builds a neighbour advertisement for `target` at `our_mac`, with the
/// Override flag and a target link-layer address option, from source
/// address `target`.
///
/// Why the target as source address: the VIP is the address this node
/// speaks for, exactly as a host answering for its own address does; it does
/// not depend on the interface having a link-local address, and receivers
/// do not check NA source addresses beyond "not multicast".
fn neighbor_advertisement(
    our_mac: MacAddr,
    target: Ipv6Addr,
    eth_dst: MacAddr,
    ip_dst: Ipv6Addr,
    solicited: bool,
) -> [u8; NA_FRAME_LEN] {
    let mut f = [0u8; NA_FRAME_LEN];
    f[0..6].copy_from_slice(&eth_dst.0);
    f[6..12].copy_from_slice(&our_mac.0);
    f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    let ip = ETH_HLEN;
    f[ip] = 0x60; // version 6, traffic class 0, flow label 0
    f[ip + 4..ip + 6].copy_from_slice(&(NA_ICMP_LEN as u16).to_be_bytes());
    f[ip + 6] = IPPROTO_ICMPV6;
    f[ip + 7] = ND_HOP_LIMIT;
    f[ip + 8..ip + 24].copy_from_slice(&target.octets());
    f[ip + 24..ip + 40].copy_from_slice(&ip_dst.octets());
    let m = ip + IPV6_HLEN;
    f[m] = ICMPV6_NA;
    f[m + 1] = 0;
    f[m + 4] = NA_FLAG_OVERRIDE | if solicited { NA_FLAG_SOLICITED } else { 0 };
    f[m + 8..m + 24].copy_from_slice(&target.octets());
    f[m + 24] = ND_OPT_TARGET_LLADDR;
    f[m + 25] = 1; // in units of 8 bytes
    f[m + 26..m + 32].copy_from_slice(&our_mac.0);
    let csum = icmpv6_checksum(target, ip_dst, &f[m..]);
    f[m + 2..m + 4].copy_from_slice(&csum.to_be_bytes());
    f
}

/// The advertisement answering `ns` (RFC 4861 7.2.4): Solicited and
/// Override set, unicast to the solicitor's link-layer address (its option,
/// else the Ethernet source). For a DAD solicitation (source `::`) it goes to
/// all-nodes with Solicited clear, as the RFC requires.
pub(crate) fn na_reply(our_mac: MacAddr, ns: &NeighborSolicitation) -> [u8; NA_FRAME_LEN] {
    if ns.src.is_unspecified() {
        neighbor_advertisement(
            our_mac,
            ns.target,
            ipv6_multicast_mac(ALL_NODES),
            ALL_NODES,
            false,
        )
    } else {
        neighbor_advertisement(
            our_mac,
            ns.target,
            ns.source_lladdr.unwrap_or(ns.eth_src),
            ns.src,
            true,
        )
    }
}

/// An unsolicited advertisement of `vip` at `our_mac` to all-nodes, Override
/// set and Solicited clear (RFC 4861 7.2.6): neighbours that have an entry
/// for `vip` switch it to our MAC.
pub(crate) fn unsolicited_na(our_mac: MacAddr, vip: Ipv6Addr) -> [u8; NA_FRAME_LEN] {
    neighbor_advertisement(
        our_mac,
        vip,
        ipv6_multicast_mac(ALL_NODES),
        ALL_NODES,
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{
        ArpHardwareId, ArpOperation, ArpPacket, EtherType, Ethernet2Header, Icmpv6Type, IpNumber,
        SlicedPacket,
    };

    const OUR: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
    const PEER: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0b]);

    /// An independent RFC 1071 checksum over pseudo-header + message, written
    /// the textbook way (sum everything in a u64, then fold).
    fn reference_icmpv6_ok(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> bool {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&src.octets());
        bytes.extend_from_slice(&dst.octets());
        bytes.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 58]);
        bytes.extend_from_slice(msg);
        if bytes.len() % 2 == 1 {
            bytes.push(0);
        }
        let mut sum: u64 = bytes
            .chunks(2)
            .map(|w| u64::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum == 0xffff
    }

    fn arp_request_frame(
        eth_src: MacAddr,
        sender_mac: MacAddr,
        sender_ip: Ipv4Addr,
        target_ip: Ipv4Addr,
    ) -> Vec<u8> {
        arp_frame(
            MacAddr::BROADCAST,
            eth_src,
            ARP_OP_REQUEST,
            sender_mac,
            sender_ip,
            MacAddr::ZERO,
            target_ip,
        )[..42]
            .to_vec()
    }

    /// Builds an NS by hand (independently of `neighbor_advertisement`).
    fn ns_frame(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, slla: Option<MacAddr>) -> Vec<u8> {
        let mut msg = vec![ICMPV6_NS, 0, 0, 0, 0, 0, 0, 0];
        msg.extend_from_slice(&target.octets());
        if let Some(m) = slla {
            msg.extend_from_slice(&[1, 1]);
            msg.extend_from_slice(&m.0);
        }
        let c = icmpv6_checksum(src, dst, &msg);
        msg[2..4].copy_from_slice(&c.to_be_bytes());
        let mut f = Vec::new();
        f.extend_from_slice(&ipv6_multicast_mac(dst).0);
        f.extend_from_slice(&PEER.0);
        f.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        f.extend_from_slice(&[58, 255]);
        f.extend_from_slice(&src.octets());
        f.extend_from_slice(&dst.octets());
        f.extend_from_slice(&msg);
        f
    }

    /// Recomputes the ICMPv6 checksum of a hand-built NS after editing it.
    fn refresh_ns_checksum(f: &mut [u8]) {
        let src = ipv6_at(f, 22).unwrap();
        let dst = ipv6_at(f, 38).unwrap();
        let plen = usize::from(be16(f, 18).unwrap());
        f[56] = 0;
        f[57] = 0;
        let c = icmpv6_checksum(src, dst, &f[54..54 + plen]);
        f[56..58].copy_from_slice(&c.to_be_bytes());
    }

    fn v6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn mac_display_and_kinds() {
        assert_eq!(OUR.to_string(), "02:00:00:00:00:0a");
        assert_eq!(format!("{:?}", MacAddr::BROADCAST), "ff:ff:ff:ff:ff:ff");
        assert!(OUR.is_unicast());
        assert!(!MacAddr::BROADCAST.is_unicast());
        assert!(!MacAddr::ZERO.is_unicast());
        assert!(!MacAddr([0x33, 0x33, 0, 0, 0, 1]).is_unicast());
    }

    #[test]
    fn solicited_node_and_multicast_mac() {
        let a = v6("2001:db8::1234:5678");
        assert_eq!(solicited_node(a), v6("ff02::1:ff34:5678"));
        assert_eq!(
            ipv6_multicast_mac(solicited_node(a)),
            MacAddr([0x33, 0x33, 0xff, 0x34, 0x56, 0x78])
        );
        assert_eq!(
            ipv6_multicast_mac(ALL_NODES),
            MacAddr([0x33, 0x33, 0, 0, 0, 1])
        );
    }

    #[test]
    fn parses_arp_request_with_and_without_padding() {
        let vip = Ipv4Addr::new(192, 0, 2, 10);
        let client = Ipv4Addr::new(10, 0, 0, 1);
        let f = arp_request_frame(PEER, PEER, client, vip);
        let want = ArpRequest {
            eth_src: PEER,
            sender_mac: PEER,
            sender_ip: client,
            target_ip: vip,
        };
        assert_eq!(parse_arp_request(&f), Ok(want));
        let mut padded = f.clone();
        padded.resize(60, 0xee);
        assert_eq!(parse_arp_request(&padded), Ok(want));
        assert!(!want.is_probe() && !want.is_announcement());
    }

    #[test]
    fn rejects_non_request_arp() {
        let vip = Ipv4Addr::new(192, 0, 2, 10);
        let good = arp_request_frame(PEER, PEER, Ipv4Addr::new(10, 0, 0, 1), vip);
        let cases: &[(usize, u8, &str)] = &[
            (12, 0x08, "not an ARP frame"), // 0x0806 -> 0x0808
            (15, 6, "ARP hardware type is not Ethernet"),
            (17, 0xdd, "ARP protocol type is not IPv4"),
            (18, 8, "ARP address lengths are not 6 and 4"),
            (19, 16, "ARP address lengths are not 6 and 4"),
            (21, 2, "ARP operation is not a request"),
            (22, 0xff, "ARP sender hardware address is not unicast"),
        ];
        for &(at, val, why) in cases {
            let mut f = good.clone();
            if at == 12 {
                f[13] = val;
            } else {
                f[at] = val;
            }
            assert_eq!(parse_arp_request(&f), Err(Reject(why)), "byte {at}");
        }
        let mut zero_sha = good.clone();
        zero_sha[22..28].fill(0);
        assert!(parse_arp_request(&zero_sha).is_err());
        for n in 0..good.len() {
            assert!(parse_arp_request(&good[..n]).is_err(), "len {n}");
        }
    }

    #[test]
    fn arp_reply_is_correct_per_etherparse() {
        let vip = Ipv4Addr::new(192, 0, 2, 10);
        let client = Ipv4Addr::new(10, 0, 0, 1);
        let req = parse_arp_request(&arp_request_frame(PEER, PEER, client, vip)).unwrap();
        let f = arp_reply(OUR, &req);
        assert_eq!(f.len(), 60);
        let (eth, rest) = Ethernet2Header::from_slice(&f).unwrap();
        assert_eq!(eth.destination, PEER.0);
        assert_eq!(eth.source, OUR.0);
        assert_eq!(eth.ether_type, EtherType::ARP);
        let arp = ArpPacket::from_slice(rest).unwrap();
        assert_eq!(arp.hw_addr_type, ArpHardwareId::ETHERNET);
        assert_eq!(arp.proto_addr_type, EtherType::IPV4);
        let arp = arp.try_eth_ipv4().unwrap();
        assert_eq!(arp.operation, ArpOperation::REPLY);
        assert_eq!(arp.sender_mac, OUR.0);
        assert_eq!(arp.sender_ipv4, vip.octets());
        assert_eq!(arp.target_mac, PEER.0);
        assert_eq!(arp.target_ipv4, client.octets());
        // Our own parser does not take a reply for a request.
        assert!(parse_arp_request(&f).is_err());
    }

    #[test]
    fn arp_probe_reply_targets_zero_address() {
        let vip = Ipv4Addr::new(192, 0, 2, 10);
        let req =
            parse_arp_request(&arp_request_frame(PEER, PEER, Ipv4Addr::UNSPECIFIED, vip)).unwrap();
        assert!(req.is_probe());
        let f = arp_reply(OUR, &req);
        let arp = ArpPacket::from_slice(&f[14..])
            .unwrap()
            .try_eth_ipv4()
            .unwrap();
        assert_eq!(arp.target_ipv4, [0, 0, 0, 0]);
        assert_eq!(arp.target_mac, PEER.0);
        assert_eq!(&f[0..6], &PEER.0);
    }

    #[test]
    fn gratuitous_arp_is_an_announcement() {
        let vip = Ipv4Addr::new(192, 0, 2, 10);
        let f = gratuitous_arp(OUR, vip);
        let (eth, rest) = Ethernet2Header::from_slice(&f).unwrap();
        assert_eq!(eth.destination, [0xff; 6]);
        assert_eq!(eth.source, OUR.0);
        let arp = ArpPacket::from_slice(rest).unwrap().try_eth_ipv4().unwrap();
        assert_eq!(arp.operation, ArpOperation::REQUEST);
        assert_eq!(arp.sender_mac, OUR.0);
        assert_eq!(arp.sender_ipv4, vip.octets());
        assert_eq!(arp.target_mac, [0; 6]);
        assert_eq!(arp.target_ipv4, vip.octets());
        let parsed = parse_arp_request(&f).unwrap();
        assert!(parsed.is_announcement());
    }

    #[test]
    fn parses_ns_to_solicited_node_and_unicast() {
        let target = v6("2001:db8::10");
        let src = v6("fd00::1");
        let f = ns_frame(src, solicited_node(target), target, Some(PEER));
        let ns = parse_neighbor_solicitation(&f).unwrap();
        assert_eq!(ns.target, target);
        assert_eq!(ns.src, src);
        assert_eq!(ns.source_lladdr, Some(PEER));
        assert_eq!(ns.eth_src, PEER);
        // Unicast (NUD) solicitation, no option, with Ethernet padding.
        let mut f = ns_frame(src, target, target, None);
        f.extend_from_slice(&[0xaa; 8]);
        let ns = parse_neighbor_solicitation(&f).unwrap();
        assert_eq!(ns.dst, target);
        assert_eq!(ns.source_lladdr, None);
        // DAD solicitation.
        let f = ns_frame(Ipv6Addr::UNSPECIFIED, solicited_node(target), target, None);
        assert!(parse_neighbor_solicitation(&f).is_ok());
    }

    #[test]
    fn rejects_invalid_ns() {
        let target = v6("2001:db8::10");
        let src = v6("fd00::1");
        let good = ns_frame(src, solicited_node(target), target, Some(PEER));
        assert!(parse_neighbor_solicitation(&good).is_ok());
        let reject = |f: &[u8]| parse_neighbor_solicitation(f).unwrap_err().0;

        let mut f = good.clone();
        f[21] = 64; // hop limit
        assert_eq!(reject(&f), "hop limit is not 255");
        let mut f = good.clone();
        f[54 + 4] ^= 1; // reserved bits: checksum now wrong
        assert_eq!(reject(&f), "bad ICMPv6 checksum");
        let mut f = good.clone();
        f[55] = 1;
        refresh_ns_checksum(&mut f);
        assert_eq!(reject(&f), "ICMPv6 code is not 0");
        let mut f = good.clone();
        f[54] = 128; // echo request
        refresh_ns_checksum(&mut f);
        assert_eq!(reject(&f), "ICMPv6 type is not neighbour solicitation");
        let mut f = good.clone();
        f[20] = 17;
        assert_eq!(reject(&f), "next header is not ICMPv6");
        let mut f = good.clone();
        f[14] = 0x40;
        assert_eq!(reject(&f), "IP version is not 6");
        let mut f = good.clone();
        f[19] += 8; // payload length beyond the frame
        assert_eq!(reject(&f), "IPv6 payload length beyond the frame");
        let mut f = good.clone();
        f[79] = 0; // option length 0
        refresh_ns_checksum(&mut f);
        assert_eq!(reject(&f), "ND option of length 0");
        let mut f = good.clone();
        f[79] = 2; // option runs past the message
        refresh_ns_checksum(&mut f);
        assert_eq!(reject(&f), "ND option beyond the message");
        let f = ns_frame(src, solicited_node(target), v6("ff02::1"), Some(PEER));
        assert_eq!(reject(&f), "target is a multicast address");
        let f = ns_frame(src, v6("ff02::1"), target, Some(PEER));
        assert_eq!(
            reject(&f),
            "destination is neither the target nor its solicited-node group"
        );
        let f = ns_frame(Ipv6Addr::UNSPECIFIED, target, target, None);
        assert_eq!(
            reject(&f),
            "DAD solicitation not sent to the solicited-node group"
        );
        let f = ns_frame(
            Ipv6Addr::UNSPECIFIED,
            solicited_node(target),
            target,
            Some(PEER),
        );
        assert_eq!(
            reject(&f),
            "DAD solicitation with a source link-layer option"
        );
        let f = ns_frame(
            src,
            solicited_node(target),
            target,
            Some(MacAddr::BROADCAST),
        );
        assert_eq!(reject(&f), "source link-layer address is not unicast");
        for n in 0..good.len() {
            assert!(parse_neighbor_solicitation(&good[..n]).is_err(), "len {n}");
        }
    }

    /// Checks an NA frame with etherparse and the reference checksum.
    fn check_na(f: &[u8], eth_dst: MacAddr, ip_dst: Ipv6Addr, target: Ipv6Addr, solicited: bool) {
        let p = SlicedPacket::from_ethernet(f).unwrap();
        let Some(etherparse::LinkSlice::Ethernet2(eth)) = p.link else {
            panic!("no Ethernet header");
        };
        assert_eq!(eth.destination(), eth_dst.0);
        assert_eq!(eth.source(), OUR.0);
        let Some(etherparse::NetSlice::Ipv6(ip)) = p.net else {
            panic!("not IPv6");
        };
        let h = ip.header();
        assert_eq!(h.hop_limit(), 255);
        assert_eq!(h.next_header(), IpNumber::IPV6_ICMP);
        assert_eq!(h.source_addr(), target);
        assert_eq!(h.destination_addr(), ip_dst);
        let Some(etherparse::TransportSlice::Icmpv6(icmp)) = p.transport else {
            panic!("not ICMPv6");
        };
        let Icmpv6Type::NeighborAdvertisement(hdr) = icmp.icmp_type() else {
            panic!("not an NA: {:?}", icmp.icmp_type());
        };
        assert!(!hdr.router);
        assert_eq!(hdr.solicited, solicited);
        assert!(hdr.r#override);
        let payload = icmp.payload();
        assert_eq!(payload.len(), 24, "target + one option");
        assert_eq!(&payload[..16], &target.octets());
        assert_eq!(&payload[16..18], &[2, 1], "target link-layer option");
        assert_eq!(&payload[18..24], &OUR.0);
        let msg = &f[54..];
        assert!(reference_icmpv6_ok(target, ip_dst, msg), "bad checksum");
        // etherparse agrees on the checksum too.
        assert!(icmp.is_checksum_valid(target.octets(), ip_dst.octets()));
    }

    #[test]
    fn na_reply_to_solicitation() {
        let target = v6("2001:db8::10");
        let src = v6("fd00::1");
        let other = MacAddr([0x02, 0, 0, 0, 0, 0x0c]);
        let ns = NeighborSolicitation {
            eth_src: PEER,
            src,
            dst: solicited_node(target),
            target,
            source_lladdr: Some(other),
        };
        // The link-layer option wins over the Ethernet source.
        check_na(&na_reply(OUR, &ns), other, src, target, true);
        let ns = NeighborSolicitation {
            source_lladdr: None,
            ..ns
        };
        check_na(&na_reply(OUR, &ns), PEER, src, target, true);
    }

    #[test]
    fn na_reply_to_dad_goes_to_all_nodes() {
        let target = v6("2001:db8::10");
        let ns = NeighborSolicitation {
            eth_src: PEER,
            src: Ipv6Addr::UNSPECIFIED,
            dst: solicited_node(target),
            target,
            source_lladdr: None,
        };
        let all_nodes_mac = MacAddr([0x33, 0x33, 0, 0, 0, 1]);
        check_na(&na_reply(OUR, &ns), all_nodes_mac, ALL_NODES, target, false);
    }

    #[test]
    fn unsolicited_na_is_correct() {
        let vip = v6("2001:db8::abcd");
        let all_nodes_mac = MacAddr([0x33, 0x33, 0, 0, 0, 1]);
        check_na(
            &unsolicited_na(OUR, vip),
            all_nodes_mac,
            ALL_NODES,
            vip,
            false,
        );
        // Odd-valued bytes everywhere still give a correct checksum.
        let vip = v6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe");
        check_na(
            &unsolicited_na(OUR, vip),
            all_nodes_mac,
            ALL_NODES,
            vip,
            false,
        );
    }

    #[test]
    fn checksum_matches_reference_on_odd_lengths() {
        let src = v6("fe80::1");
        let dst = v6("ff02::1");
        for len in 0..64 {
            let mut msg: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            if msg.len() >= 4 {
                msg[2] = 0;
                msg[3] = 0;
                let c = icmpv6_checksum(src, dst, &msg);
                msg[2..4].copy_from_slice(&c.to_be_bytes());
                assert!(reference_icmpv6_ok(src, dst, &msg), "len {len}");
                assert_eq!(icmpv6_sum(src, dst, &msg), 0xffff);
            }
        }
    }

    /// xorshift64*: a tiny deterministic generator, so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    #[test]
    fn malformed_inputs_never_panic() {
        let target = v6("2001:db8::10");
        let seeds = [
            arp_request_frame(
                PEER,
                PEER,
                Ipv4Addr::new(10, 0, 0, 1),
                Ipv4Addr::new(1, 2, 3, 4),
            ),
            ns_frame(v6("fd00::1"), solicited_node(target), target, Some(PEER)),
            unsolicited_na(OUR, target).to_vec(),
            gratuitous_arp(OUR, Ipv4Addr::new(1, 2, 3, 4)).to_vec(),
        ];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut accepted = 0;
        for i in 0..200_000 {
            let mut f = seeds[i % seeds.len()].clone();
            match rng.next() % 4 {
                0 => {
                    // Flip a few bytes.
                    for _ in 0..1 + rng.next() % 4 {
                        let at = (rng.next() as usize) % f.len();
                        f[at] = rng.next() as u8;
                    }
                }
                1 => f.truncate((rng.next() as usize) % (f.len() + 1)),
                2 => {
                    for _ in 0..rng.next() % 80 {
                        f.push(rng.next() as u8);
                    }
                    let at = (rng.next() as usize) % f.len();
                    f[at] = rng.next() as u8;
                }
                _ => {
                    let len = (rng.next() % 128) as usize;
                    f = (0..len).map(|_| rng.next() as u8).collect();
                }
            }
            // Length fields pointing past the end are the interesting case.
            if f.len() > 19 && rng.next().is_multiple_of(8) {
                f[18] = rng.next() as u8;
                f[19] = rng.next() as u8;
            }
            if let Ok(r) = parse_arp_request(&f) {
                accepted += 1;
                let _ = arp_reply(OUR, &r);
            }
            if let Ok(ns) = parse_neighbor_solicitation(&f) {
                accepted += 1;
                let reply = na_reply(OUR, &ns);
                assert!(reference_icmpv6_ok(
                    ns.target,
                    ipv6_at(&reply, 38).unwrap(),
                    &reply[54..]
                ));
            }
        }
        // Some mutations keep the frame valid; the parsers are not just
        // rejecting everything.
        assert!(accepted > 1000, "only {accepted} accepted");
    }
}
