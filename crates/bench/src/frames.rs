//! Test frames for BPF_PROG_TEST_RUN, built by hand so the bench knows the
//! offset of every field the harness patches, and an independent check
//! (etherparse) of the frames the programs emit.

use std::net::IpAddr;

use anyhow::{Context, Result, bail};
use etherparse::{NetSlice, SlicedPacket, TransportSlice};

/// Client-side MAC in every test frame.
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xc1];
/// Balancer MAC in every test frame.
pub const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x1b];

/// TCP flag bits.
pub mod tcp_flags {
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// ACK.
    pub const ACK: u8 = 0x10;
    /// PSH.
    pub const PSH: u8 = 0x08;
}

/// What a frame carries.
#[derive(Clone, Debug)]
pub struct FrameSpec {
    /// Source address (the family decides IPv4 or IPv6).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// L4 source port.
    pub sport: u16,
    /// L4 destination port.
    pub dport: u16,
    /// 6 (TCP) or 17 (UDP).
    pub proto: u8,
    /// VLAN IDs, outermost first (0, 1 or 2; two make a QinQ frame).
    pub vlans: Vec<u16>,
    /// TCP flags (ignored for UDP).
    pub tcp_flags: u8,
    /// Payload bytes after the L4 header.
    pub payload_len: usize,
}

impl FrameSpec {
    /// A TCP segment with ACK|PSH and a small payload: an established flow.
    pub fn tcp(src: &str, sport: u16, dst: &str, dport: u16) -> Self {
        FrameSpec {
            src: src.parse().expect("address"),
            dst: dst.parse().expect("address"),
            sport,
            dport,
            proto: 6,
            vlans: Vec::new(),
            tcp_flags: tcp_flags::ACK | tcp_flags::PSH,
            payload_len: 32,
        }
    }

    /// A UDP datagram with a small payload.
    pub fn udp(src: &str, sport: u16, dst: &str, dport: u16) -> Self {
        FrameSpec {
            proto: 17,
            tcp_flags: 0,
            ..Self::tcp(src, sport, dst, dport)
        }
    }

    /// Same, as a bare SYN (the first packet of a TCP connection).
    pub fn syn(mut self) -> Self {
        self.tcp_flags = tcp_flags::SYN;
        self.payload_len = 0;
        self
    }

    /// Same, with VLAN tags (outermost first).
    pub fn vlans(mut self, v: &[u16]) -> Self {
        self.vlans = v.to_vec();
        self
    }
}

/// A built frame and where its patchable fields sit.
#[derive(Clone, Debug)]
pub struct Frame {
    /// The whole Ethernet frame.
    pub bytes: Vec<u8>,
    /// Offset of the 32-bit field the harness bumps to make a new flow: the
    /// IPv4 source address, or the last 4 bytes of the IPv6 one.
    pub vary_off: usize,
    /// Offset of the IPv4 header checksum (none for IPv6).
    pub ip_csum_off: Option<usize>,
    /// Offset of the TCP/UDP checksum.
    pub l4_csum_off: usize,
    /// Whether L4 is UDP.
    pub udp: bool,
}

/// One's-complement sum of big-endian 16-bit words (odd tail padded).
fn sum16(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Builds `spec` with correct IPv4 and L4 checksums.
pub fn build(spec: &FrameSpec) -> Frame {
    let mut b = Vec::with_capacity(128);
    b.extend_from_slice(&LB_MAC);
    b.extend_from_slice(&CLIENT_MAC);
    let inner_type: u16 = if spec.src.is_ipv4() { 0x0800 } else { 0x86dd };
    let tag_types: Vec<u16> = match spec.vlans.len() {
        0 => vec![],
        1 => vec![0x8100],
        _ => vec![0x88a8, 0x8100],
    };
    b.extend_from_slice(
        &tag_types
            .first()
            .copied()
            .unwrap_or(inner_type)
            .to_be_bytes(),
    );
    for (i, id) in spec.vlans.iter().take(2).enumerate() {
        b.extend_from_slice(&(id & 0x0fff).to_be_bytes());
        let next = tag_types.get(i + 1).copied().unwrap_or(inner_type);
        b.extend_from_slice(&next.to_be_bytes());
    }
    let l3 = b.len();
    let l4_len = if spec.proto == 6 { 20 } else { 8 } + spec.payload_len;
    let (vary_off, ip_csum_off, pseudo) = match (spec.src, spec.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = (20 + l4_len) as u16;
            b.extend_from_slice(&[0x45, 0]);
            b.extend_from_slice(&total.to_be_bytes());
            b.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, 64, spec.proto, 0, 0]);
            b.extend_from_slice(&s.octets());
            b.extend_from_slice(&d.octets());
            let c = fold(sum16(&b[l3..l3 + 20], 0));
            b[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
            let mut p = Vec::new();
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
            p.extend_from_slice(&[0, spec.proto]);
            p.extend_from_slice(&(l4_len as u16).to_be_bytes());
            (l3 + 12, Some(l3 + 10), p)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            b.extend_from_slice(&[0x60, 0, 0, 0]);
            b.extend_from_slice(&(l4_len as u16).to_be_bytes());
            b.extend_from_slice(&[spec.proto, 64]);
            b.extend_from_slice(&s.octets());
            b.extend_from_slice(&d.octets());
            let mut p = Vec::new();
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
            p.extend_from_slice(&(l4_len as u32).to_be_bytes());
            p.extend_from_slice(&[0, 0, 0, spec.proto]);
            (l3 + 8 + 12, None, p)
        }
        _ => panic!("mixed address families"),
    };
    let l4 = b.len();
    b.extend_from_slice(&spec.sport.to_be_bytes());
    b.extend_from_slice(&spec.dport.to_be_bytes());
    let l4_csum_off = if spec.proto == 6 {
        b.extend_from_slice(&0x1000_0000u32.to_be_bytes()); // seq
        b.extend_from_slice(&0x2000_0000u32.to_be_bytes()); // ack
        b.extend_from_slice(&[0x50, spec.tcp_flags]);
        b.extend_from_slice(&64240u16.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 0]);
        l4 + 16
    } else {
        b.extend_from_slice(&(l4_len as u16).to_be_bytes());
        b.extend_from_slice(&[0, 0]);
        l4 + 6
    };
    b.extend((0..spec.payload_len).map(|i| b'a' + (i % 26) as u8));
    let mut c = fold(sum16(&b[l4..], sum16(&pseudo, 0)));
    if c == 0 && spec.proto == 17 {
        c = 0xffff;
    }
    b[l4_csum_off..l4_csum_off + 2].copy_from_slice(&c.to_be_bytes());
    Frame {
        bytes: b,
        vary_off,
        ip_csum_off,
        l4_csum_off,
        udp: spec.proto == 17,
    }
}

/// A frame as etherparse reads it, checksums verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// L4 source port.
    pub sport: u16,
    /// L4 destination port.
    pub dport: u16,
    /// VLAN IDs found.
    pub vlans: usize,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
}

/// Parses `frame` and fails unless its IPv4 header checksum and its TCP/UDP
/// checksum are right.
pub fn parse_checked(frame: &[u8]) -> Result<Parsed> {
    let p = SlicedPacket::from_ethernet(frame).context("etherparse cannot parse the frame")?;
    let vlans = p.link_exts.len();
    let net = p.net.as_ref().context("no IP header")?;
    let (src, dst, ttl, v4, v6) = match net {
        NetSlice::Ipv4(ip) => {
            let h = ip.header().to_header();
            if h.header_checksum != h.calc_header_checksum() {
                bail!("bad IPv4 header checksum");
            }
            (
                IpAddr::from(h.source),
                IpAddr::from(h.destination),
                h.time_to_live,
                Some(h),
                None,
            )
        }
        NetSlice::Ipv6(ip) => {
            let h = ip.header().to_header();
            (
                IpAddr::from(h.source),
                IpAddr::from(h.destination),
                h.hop_limit,
                None,
                Some(h),
            )
        }
        _ => bail!("not IPv4 or IPv6"),
    };
    let (sport, dport) = match p.transport.as_ref().context("no L4 header")? {
        TransportSlice::Tcp(t) => {
            let h = t.to_header();
            let want = match (&v4, &v6) {
                (Some(h4), _) => h.calc_checksum_ipv4(h4, t.payload())?,
                (_, Some(h6)) => h.calc_checksum_ipv6(h6, t.payload())?,
                _ => unreachable!(),
            };
            if h.checksum != want {
                bail!("bad TCP checksum");
            }
            (h.source_port, h.destination_port)
        }
        TransportSlice::Udp(u) => {
            let h = u.to_header();
            if h.checksum != 0 || v6.is_some() {
                let want = match (&v4, &v6) {
                    (Some(h4), _) => h.calc_checksum_ipv4(h4, u.payload())?,
                    (_, Some(h6)) => h.calc_checksum_ipv6(h6, u.payload())?,
                    _ => unreachable!(),
                };
                if h.checksum != want {
                    bail!("bad UDP checksum");
                }
            }
            (h.source_port, h.destination_port)
        }
        _ => bail!("not TCP or UDP"),
    };
    Ok(Parsed {
        src,
        dst,
        sport,
        dport,
        vlans,
        ttl,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_frames_parse_with_correct_checksums() {
        for spec in [
            FrameSpec::tcp("10.0.0.2", 40000, "10.200.100.1", 80),
            FrameSpec::udp("10.0.0.2", 40000, "10.200.100.1", 53).vlans(&[7]),
            FrameSpec::tcp("fd00::2", 40000, "fd00:200:100::1", 80)
                .syn()
                .vlans(&[7, 8]),
            FrameSpec::udp("fd00::2", 1, "fd00::1", 2),
        ] {
            let f = build(&spec);
            let p = parse_checked(&f.bytes).unwrap();
            assert_eq!((p.src, p.dst), (spec.src, spec.dst));
            assert_eq!((p.sport, p.dport), (spec.sport, spec.dport));
            assert_eq!(p.vlans, spec.vlans.len());
            assert_eq!(p.ttl, 64);
            // The varied field is the (low 32 bits of the) source address.
            let tail: [u8; 4] = f.bytes[f.vary_off..f.vary_off + 4].try_into().unwrap();
            let src_tail = match spec.src {
                IpAddr::V4(a) => a.octets(),
                IpAddr::V6(a) => a.octets()[12..16].try_into().unwrap(),
            };
            assert_eq!(tail, src_tail);
        }
    }
}
