//! Frames built byte by byte, for the shapes a packet library will not
//! build (extension-header chains, fragments, ICMP errors quoting a packet),
//! and a plain RFC 1071 checksum to verify what the programs emit. Both are
//! written from the RFCs, independently of the datapath's incremental
//! checksum code.

#![allow(dead_code)]

use std::net::IpAddr;

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const ICMP: u8 = 1;
pub const ICMP6: u8 = 58;
pub const HOPOPTS: u8 = 0;
pub const DSTOPTS: u8 = 60;
pub const ROUTING: u8 = 43;
pub const FRAGMENT: u8 = 44;
pub const AH: u8 = 51;
pub const ESP: u8 = 50;

/// One's-complement sum of 16-bit words (odd length padded), not inverted.
pub fn sum16(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [last] = chunks.remainder() {
        acc += (*last as u32) << 8;
    }
    acc
}

/// The Internet checksum of `data` with `acc` already summed in.
pub fn checksum(data: &[u8], acc: u32) -> u16 {
    let mut s = sum16(data, acc);
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn octets(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// Sum of the TCP/UDP/ICMPv6 pseudo-header.
pub fn pseudo(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> u32 {
    let mut acc = sum16(&octets(src), 0);
    acc = sum16(&octets(dst), acc);
    acc + proto as u32 + len as u32
}

/// A TCP segment (20-byte header) with a correct checksum.
pub fn tcp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&1000u32.to_be_bytes());
    s.extend_from_slice(&0u32.to_be_bytes());
    s.push(5 << 4);
    s.push(flags);
    s.extend_from_slice(&64240u16.to_be_bytes());
    s.extend_from_slice(&[0, 0, 0, 0]);
    s.extend_from_slice(payload);
    let c = checksum(&s, pseudo(src, dst, TCP, s.len()));
    s[16..18].copy_from_slice(&c.to_be_bytes());
    s
}

/// A UDP datagram with a correct checksum.
pub fn udp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let len = 8 + payload.len();
    let mut s = Vec::new();
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&(len as u16).to_be_bytes());
    s.extend_from_slice(&[0, 0]);
    s.extend_from_slice(payload);
    let mut c = checksum(&s, pseudo(src, dst, UDP, len));
    if c == 0 {
        c = 0xffff;
    }
    s[6..8].copy_from_slice(&c.to_be_bytes());
    s
}

/// An IPv4 header (with `options`, padded to 4 bytes) and checksum.
#[allow(clippy::too_many_arguments)]
pub fn ipv4(
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    id: u16,
    more: bool,
    offset8: u16,
    options: &[u8],
    payload_len: usize,
) -> Vec<u8> {
    let mut opts = options.to_vec();
    while !opts.len().is_multiple_of(4) {
        opts.push(0);
    }
    let ihl = 5 + opts.len() / 4;
    let mut h = vec![(4 << 4) | ihl as u8, 0];
    h.extend_from_slice(&((ihl * 4 + payload_len) as u16).to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    let frag = ((more as u16) << 13) | offset8;
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0]);
    h.extend_from_slice(&octets(src));
    h.extend_from_slice(&octets(dst));
    h.extend_from_slice(&opts);
    let c = checksum(&h, 0);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

/// An IPv6 header; `exts` are raw extension headers already chained
/// (their next-header bytes set), `first` the first next-header value.
pub fn ipv6(src: IpAddr, dst: IpAddr, first: u8, exts: &[u8], payload_len: usize) -> Vec<u8> {
    let mut h = vec![6 << 4, 0, 0, 0];
    h.extend_from_slice(&((exts.len() + payload_len) as u16).to_be_bytes());
    h.push(first);
    h.push(64);
    h.extend_from_slice(&octets(src));
    h.extend_from_slice(&octets(dst));
    h.extend_from_slice(exts);
    h
}

/// A Hop-by-Hop or Destination Options header of `len8` 8-byte units
/// (PadN-filled), followed by `next`.
pub fn opts_ext(next: u8, len8: usize) -> Vec<u8> {
    let mut e = vec![next, (len8 - 1) as u8, 1, (len8 * 8 - 4) as u8];
    e.resize(len8 * 8, 0);
    e
}

/// An IPv6 fragment header.
pub fn frag_ext(next: u8, offset8: u16, more: bool, id: u32) -> Vec<u8> {
    let mut e = vec![next, 0];
    e.extend_from_slice(&((offset8 << 3) | more as u16).to_be_bytes());
    e.extend_from_slice(&id.to_be_bytes());
    e
}

/// A generic 8-byte extension header with a next-header field (routing,
/// AH-shaped: these must be passed, so their inside does not matter).
pub fn plain_ext(next: u8) -> Vec<u8> {
    vec![next, 0, 0, 0, 0, 0, 0, 0]
}

/// Ethernet (client MAC -> balancer MAC) with VLAN tags.
pub fn eth(ethertype: u16, vlans: &[u16], rest: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x1b, 0x02, 0, 0, 0, 0, 0xc1];
    for (i, v) in vlans.iter().enumerate() {
        let tpid: u16 = if i == 0 && vlans.len() == 2 {
            0x88a8
        } else {
            0x8100
        };
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(rest);
    f
}

/// A whole frame: Ethernet + IP (+ exts for IPv6) + `l4` bytes.
pub fn frame(src: IpAddr, dst: IpAddr, proto: u8, vlans: &[u16], l4: &[u8]) -> Vec<u8> {
    match src {
        IpAddr::V4(_) => {
            let mut p = ipv4(src, dst, proto, 1, false, 0, &[], l4.len());
            p.extend_from_slice(l4);
            eth(0x0800, vlans, &p)
        }
        IpAddr::V6(_) => {
            let mut p = ipv6(src, dst, proto, &[], l4.len());
            p.extend_from_slice(l4);
            eth(0x86dd, vlans, &p)
        }
    }
}

/// An ICMPv4 error (type, code, 4 bytes of rest) quoting `quoted` (an IP
/// packet, possibly truncated), with a correct checksum.
pub fn icmp4(kind: u8, code: u8, rest: [u8; 4], quoted: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, code, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(quoted);
    let c = checksum(&m, 0);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// An ICMPv6 message with a correct checksum (pseudo-header included).
pub fn icmp6(src: IpAddr, dst: IpAddr, kind: u8, code: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, code, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(body);
    let c = checksum(&m, pseudo(src, dst, ICMP6, m.len()));
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// Offset of the IP header in a frame (after Ethernet and VLAN tags).
pub fn l3_offset(frame: &[u8]) -> usize {
    let mut off = 12;
    while u16::from_be_bytes([frame[off], frame[off + 1]]) == 0x8100
        || u16::from_be_bytes([frame[off], frame[off + 1]]) == 0x88a8
    {
        off += 4;
    }
    off + 2
}
