//! Differential fuzzing of xdp_ingress: 200,000 generated and mutated frames
//! (valid ones, truncated, corrupted headers and lengths, random IPv6
//! extension chains, fragments, ICMP errors) go through the real program and
//! through an independent Rust model of the documented decision (pass
//! untouched / drop with a reason / forward to backend X). They must agree
//! on every frame, and a forwarded frame's checksums must be exactly as
//! valid as the input's were (the datapath never breaks a checksum).

mod common;

use std::collections::HashMap;
use std::net::IpAddr;

use common::raw::*;
use common::*;
use rivora_dataplane::proto;

const FRAMES: usize = 200_000;

/// xorshift64*: deterministic, so a failure is reproducible from its index.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

// ----------------------------------------------------------------------
// The model: the datapath's documented rules, written from the spec.
// ----------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    Pass,
    Drop(u32),
    /// Forwarded: the backend the frame must now be addressed to.
    Forward(IpAddr, u16),
    /// An ICMP error forwarded to this backend (quote rewritten to it).
    ForwardIcmp(IpAddr, u16),
    /// Refused (a VIP's refused share) with this reset back to the client.
    Reset(ResetWant),
}

/// The reset a refused TCP segment must come back as (reset.h, RFC 793
/// section 3.4): from the VIP to the client, seq/ack from the segment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ResetWant {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    /// The flags byte: RST, or RST|ACK.
    flags: u8,
    /// Ethernet and VLAN tags, IP and a bare TCP header.
    len: usize,
}

/// (source, destination, source port, destination port, protocol): a flow
/// as the affinity table keys it; for an ICMP error, the quoted packet.
type FlowTuple = (Vec<u8>, Vec<u8>, u16, u16, u8);

#[derive(Clone)]
struct Svc {
    offset: u32,
    size: u32,
    /// loadBalancerSourceRanges as (address bytes, prefix length); None:
    /// any source.
    ranges: Option<Vec<(Vec<u8>, u8)>>,
    /// The refusing pseudo-backend's ID when the VIP has a refused share.
    reject: Option<u32>,
}

/// Whether the first `len` bits of `a` and `prefix` agree (both of one
/// family), computed bit by bit: independent of the writer's code.
fn in_prefix(a: &[u8], prefix: &[u8], len: u8) -> bool {
    a.len() == prefix.len()
        && (0..len as usize)
            .all(|i| (a[i / 8] >> (7 - i % 8)) & 1 == (prefix[i / 8] >> (7 - i % 8)) & 1)
}

struct Model {
    vips: HashMap<(Vec<u8>, u16, u8), Svc>,
    table: Vec<u32>,
    backends: HashMap<u32, (IpAddr, u16)>,
    affinity: HashMap<FlowTuple, u32>,
    frags: HashMap<(Vec<u8>, Vec<u8>, u32, u8), u32>,
    /// Backend ID to `rivora_abi::backend_state` (set part-way through the
    /// run, so that affinity entries of draining and down backends exist).
    states: HashMap<u32, u32>,
    /// SYNs whose 5-tuple's entry named a backend that was not healthy.
    stale_syns: usize,
    /// Frames a VIP's source ranges refused.
    refused: usize,
    /// The datapath's per-CPU UDP seen filter (balance.h
    /// rv_udp_seen_before), slot -> tag: the test runs on one CPU.
    udp_seen: Vec<u32>,
    /// UDP datagrams that made no entry because their flow was not seen
    /// before (first datagrams).
    udp_first: usize,
    /// The datapath's SYN hints (balance.h rv_syn_hint): slot -> (tag,
    /// backend, when). A hint is valid for two ticks of the datapath's
    /// clock, which the model does not read: younger than one tick it is
    /// valid, three ticks or older it is not, in between the program's own
    /// choice (either is right) is followed.
    syn_hints: HashMap<u32, (u32, u32, std::time::Instant)>,
    /// One datapath tick (2^7 jiffies).
    tick: std::time::Duration,
    /// TCP segments without an entry that followed their SYN's hint.
    hinted: usize,
    /// Frames of a refused share (reset or dropped, all counted as
    /// no_backend).
    rejected: usize,
}

#[derive(Default, Debug)]
struct Parsed {
    v6: bool,
    src: Vec<u8>,
    dst: Vec<u8>,
    proto: u8,
    sport: u16,
    dport: u16,
    tcp_flags: u8,
    /// TCP: sequence and acknowledgment numbers, header length in bytes,
    /// and the L4 length the IP header claims (as the program computes it:
    /// a u32 that wraps when the claim is smaller than the headers).
    tcp_seq: u32,
    tcp_ack: u32,
    tcp_doff: u32,
    l4_len: u32,
    /// Offset of the IP header (after VLAN tags).
    l3_at: usize,
    first_frag: bool,
    later_frag: bool,
    frag_id: u32,
    icmp: Option<FlowTuple>,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Ports of a TCP/UDP header at `at`, requiring the whole header (20 / 8).
fn ports(b: &[u8], at: usize, proto: u8) -> Option<(u16, u16)> {
    let need = match proto {
        6 => 20,
        17 => 8,
        _ => return None,
    };
    if b.len() < at + need {
        return None;
    }
    Some((be16(b, at)?, be16(b, at + 2)?))
}

fn parse(b: &[u8]) -> Option<Parsed> {
    let mut et = be16(b, 12)?;
    let mut off = 14;
    for _ in 0..2 {
        if et != 0x8100 && et != 0x88a8 {
            break;
        }
        et = be16(b, off + 2)?;
        off += 4;
    }
    let mut p = Parsed {
        l3_at: off,
        ..Parsed::default()
    };
    let l4_at;
    match et {
        0x0800 => {
            let h = b.get(off..off + 20)?;
            if h[0] >> 4 != 4 || h[0] & 0xf < 5 {
                return None;
            }
            p.src = h[12..16].to_vec();
            p.dst = h[16..20].to_vec();
            p.proto = h[9];
            let frag = u16::from_be_bytes([h[6], h[7]]);
            if frag & 0x3fff != 0 {
                p.frag_id = u16::from_be_bytes([h[4], h[5]]) as u32;
                if frag & 0x1fff != 0 {
                    if p.proto != 6 && p.proto != 17 {
                        return None;
                    }
                    p.later_frag = true;
                    return Some(p);
                }
                p.first_frag = true;
            }
            l4_at = off + (h[0] & 0xf) as usize * 4;
            if l4_at > b.len() {
                return None;
            }
            p.l4_len =
                u32::from(u16::from_be_bytes([h[2], h[3]])).wrapping_sub((h[0] & 0xf) as u32 * 4);
        }
        0x86dd => {
            let h = b.get(off..off + 40)?;
            if h[0] >> 4 != 6 {
                return None;
            }
            p.v6 = true;
            p.src = h[8..24].to_vec();
            p.dst = h[24..40].to_vec();
            let mut nh = h[6];
            let mut cur = off + 40;
            let mut ext = 0usize;
            for _ in 0..4 {
                match nh {
                    0 | 60 => {
                        let len = (*b.get(cur + 1)? as usize + 1) * 8;
                        b.get(cur)?;
                        ext += len;
                        if ext > 248 {
                            return None;
                        }
                        nh = b[cur];
                        cur += len;
                    }
                    44 => {
                        let fh = b.get(cur..cur + 8)?;
                        ext += 8;
                        if ext > 248 {
                            return None;
                        }
                        let fo = u16::from_be_bytes([fh[2], fh[3]]);
                        nh = fh[0];
                        cur += 8;
                        if fo & 0xfff8 != 0 {
                            if nh != 6 && nh != 17 {
                                return None;
                            }
                            p.frag_id = u32::from_ne_bytes([fh[4], fh[5], fh[6], fh[7]]);
                            p.proto = nh;
                            p.later_frag = true;
                            return Some(p);
                        }
                        if fo & 1 != 0 {
                            p.frag_id = u32::from_ne_bytes([fh[4], fh[5], fh[6], fh[7]]);
                            p.first_frag = true;
                        }
                    }
                    _ => break,
                }
            }
            if matches!(nh, 0 | 60 | 44) || cur > b.len() {
                return None;
            }
            p.proto = nh;
            l4_at = cur;
            p.l4_len =
                u32::from(u16::from_be_bytes([h[4], h[5]])).wrapping_sub((cur - off - 40) as u32);
        }
        _ => return None,
    }
    let icmp_proto = if p.v6 { 58 } else { 1 };
    if p.proto == icmp_proto && !p.first_frag {
        let t = *b.get(l4_at + 7).map(|_| &b[l4_at])?;
        let is_err = if p.v6 {
            (1..=4).contains(&t)
        } else {
            matches!(t, 3 | 11 | 12)
        };
        if !is_err {
            return None;
        }
        let q = l4_at + 8;
        let (isrc, idst, iproto, il4) = if p.v6 {
            let h = b.get(q..q + 40)?;
            if h[0] >> 4 != 6 {
                return None;
            }
            (h[8..24].to_vec(), h[24..40].to_vec(), h[6], q + 40)
        } else {
            let h = b.get(q..q + 20)?;
            if h[0] >> 4 != 4 || h[0] & 0xf < 5 || u16::from_be_bytes([h[6], h[7]]) & 0x1fff != 0 {
                return None;
            }
            (
                h[12..16].to_vec(),
                h[16..20].to_vec(),
                h[9],
                q + (h[0] & 0xf) as usize * 4,
            )
        };
        if iproto != 6 && iproto != 17 {
            return None;
        }
        let (is, id) = (be16(b, il4)?, be16(b, il4 + 2)?);
        p.icmp = Some((isrc, idst, is, id, iproto));
        return Some(p);
    }
    let (sp, dp) = ports(b, l4_at, p.proto)?;
    p.sport = sp;
    p.dport = dp;
    if p.proto == 6 {
        p.tcp_flags = b[l4_at + 13];
        let word = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        p.tcp_seq = word(l4_at + 4);
        p.tcp_ack = word(l4_at + 8);
        p.tcp_doff = u32::from(b[l4_at + 12] >> 4) * 4;
    }
    Some(p)
}

fn mix(mut h: u32, mut k: u32) -> u32 {
    k = k.wrapping_mul(0xcc9e2d51);
    k = k.rotate_left(15);
    k = k.wrapping_mul(0x1b873593);
    h ^= k;
    h = h.rotate_left(13);
    h.wrapping_mul(5).wrapping_add(0xe6546b64)
}

fn fin(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85ebca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2ae35);
    h ^ (h >> 16)
}

/// The flow hash as the program computes it: 32-bit words as they sit in
/// memory (this test only runs on little-endian x86_64/aarch64).
fn flow_hash(src: &[u8], dst: &[u8], sport: u16, dport: u16, proto: u8) -> u32 {
    let mut h = 0x5bd1e995u32;
    for w in src.chunks(4).chain(dst.chunks(4)) {
        h = mix(h, u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
    }
    let sp = u16::from_ne_bytes(sport.to_be_bytes()) as u32;
    let dp = u16::from_ne_bytes(dport.to_be_bytes()) as u32;
    h = mix(h, (sp << 16) | dp);
    fin(mix(h, proto as u32))
}

impl Model {
    /// The backend of the flow's (5-tuple hash `h`) recent SYN, as the
    /// datapath would follow it.
    fn syn_hint(&self, h: u32, observed: Option<IpAddr>) -> Option<u32> {
        let (tag, id, at) = *self
            .syn_hints
            .get(&(h & (rivora_abi::SYN_HINT_SLOTS - 1)))?;
        let state = self.state(id);
        if tag != h >> 12
            || !(state == rivora_abi::backend_state::HEALTHY
                || state == rivora_abi::backend_state::DRAINING)
        {
            return None;
        }
        let age = at.elapsed();
        if age < self.tick {
            Some(id)
        } else if age < 3 * self.tick {
            (observed == Some(self.backends[&id].0)).then_some(id)
        } else {
            None
        }
    }

    fn state(&self, id: u32) -> u32 {
        self.states
            .get(&id)
            .copied()
            .unwrap_or(rivora_abi::backend_state::HEALTHY)
    }

    /// An affinity entry is followed while its backend is healthy or
    /// draining (established flows finish on a draining backend).
    fn usable(&self, id: u32) -> bool {
        self.state(id) != rivora_abi::backend_state::DOWN
    }

    /// Maglev: the first healthy backend within the probe window from the
    /// flow's slot. The refused share's slots are stepped over (a down
    /// backend's flows go to valid backends only); the flow's own slot
    /// being one is [`Model::refuses`]'s, asked first.
    fn pick(&self, svc: &Svc, h: u32) -> Option<u32> {
        let slot = h % svc.size;
        (0..rivora_abi::MAGLEV_PROBE_WINDOW)
            .map(|i| self.table[(svc.offset + (slot + i) % svc.size) as usize])
            .find(|id| {
                Some(*id) != svc.reject && self.state(*id) == rivora_abi::backend_state::HEALTHY
            })
    }

    /// Whether the flow's own slot is the VIP's refused share.
    fn refuses(&self, svc: &Svc, h: u32) -> bool {
        svc.reject.is_some() && Some(self.table[(svc.offset + h % svc.size) as usize]) == svc.reject
    }

    /// What a refused frame becomes: a reset for a TCP segment the reset
    /// stage can answer (not a reset, not a first fragment, lengths that
    /// add up), else a drop.
    fn refusal(&mut self, p: &Parsed) -> Decision {
        self.rejected += 1;
        if p.proto != 6
            || p.first_frag
            || p.tcp_flags & 0x04 != 0
            || p.tcp_doff < 20
            || p.l4_len < p.tcp_doff
            || p.l4_len > 0xffff
        {
            return Decision::Drop(rivora_abi::drop_reason::NO_BACKEND);
        }
        let addr = |b: &[u8]| match b.len() {
            4 => IpAddr::from(<[u8; 4]>::try_from(b).unwrap()),
            _ => IpAddr::from(<[u8; 16]>::try_from(b).unwrap()),
        };
        let has_ack = p.tcp_flags & 0x10 != 0;
        let seg_len = p.l4_len - p.tcp_doff
            + u32::from(p.tcp_flags & 0x02 != 0)
            + u32::from(p.tcp_flags & 0x01 != 0);
        Decision::Reset(ResetWant {
            src: addr(&p.dst),
            dst: addr(&p.src),
            sport: p.dport,
            dport: p.sport,
            seq: if has_ack { p.tcp_ack } else { 0 },
            ack: if has_ack {
                0
            } else {
                p.tcp_seq.wrapping_add(seg_len)
            },
            flags: if has_ack { 0x04 } else { 0x14 },
            len: p.l3_at + if p.v6 { 60 } else { 40 },
        })
    }

    /// balance.h rv_udp_seen_before: one tag per slot.
    fn udp_seen_before(&mut self, h: u32) -> bool {
        let slot = (h & (rivora_abi::UDP_SEEN_SLOTS - 1)) as usize;
        let tag = h | 1;
        if self.udp_seen[slot] == tag {
            return true;
        }
        self.udp_seen[slot] = tag;
        false
    }

    /// `observed`: where the program sent the frame, used only where either
    /// answer is right (a SYN hint of an age the model cannot place).
    fn decide(&mut self, frame: &[u8], observed: Option<IpAddr>) -> Decision {
        let Some(p) = parse(frame) else {
            return Decision::Pass;
        };
        if let Some((isrc, idst, isport, idport, iproto)) = &p.icmp {
            if !self.vips.contains_key(&(isrc.clone(), *isport, *iproto)) {
                return Decision::Pass;
            }
            let id =
                match self
                    .affinity
                    .get(&(idst.clone(), isrc.clone(), *idport, *isport, *iproto))
                {
                    Some(id) if self.usable(*id) => Some(*id),
                    // No entry: where Maglev sends the flow.
                    _ => {
                        let svc = &self.vips[&(isrc.clone(), *isport, *iproto)];
                        let h = flow_hash(idst, isrc, *idport, *isport, *iproto);
                        if svc.size == 0 || self.refuses(svc, h) {
                            None
                        } else {
                            self.pick(svc, h)
                        }
                    }
                };
            return match id {
                Some(id) => {
                    let (a, port) = self.backends[&id];
                    Decision::ForwardIcmp(a, if port == 0 { *isport } else { port })
                }
                None => Decision::Pass,
            };
        }
        if p.later_frag {
            return match self
                .frags
                .get(&(p.src.clone(), p.dst.clone(), p.frag_id, p.proto))
            {
                Some(id) if self.usable(*id) => Decision::Forward(self.backends[id].0, 0),
                _ => Decision::Pass,
            };
        }
        let Some(svc) = self.vips.get(&(p.dst.clone(), p.dport, p.proto)).cloned() else {
            return Decision::Pass;
        };
        // Source ranges: right after the VIP match, before anything else.
        if let Some(ranges) = &svc.ranges
            && !ranges.iter().any(|(pre, len)| in_prefix(&p.src, pre, *len))
        {
            self.refused += 1;
            return Decision::Drop(rivora_abi::drop_reason::SOURCE_RANGE);
        }
        if svc.size == 0 {
            return Decision::Drop(rivora_abi::drop_reason::NO_HEALTHY_BACKEND);
        }
        let flow = (p.src.clone(), p.dst.clone(), p.sport, p.dport, p.proto);
        // A SYN without ACK opens a connection: balanced, whatever the
        // affinity table holds for its 5-tuple.
        let opens = p.proto == 6 && p.tcp_flags & 0x12 == 0x02;
        if opens
            && self
                .affinity
                .get(&flow)
                .is_some_and(|id| self.state(*id) != rivora_abi::backend_state::HEALTHY)
        {
            self.stale_syns += 1;
        }
        let entry = self.affinity.get(&flow).copied();
        let id = match entry {
            Some(id) if !opens && self.usable(id) => id,
            _ => {
                let h = flow_hash(&p.src, &p.dst, p.sport, p.dport, p.proto);
                let hint = if p.proto == 6 && !opens {
                    self.syn_hint(h, observed)
                } else {
                    None
                };
                if hint.is_none() && self.refuses(&svc, h) {
                    return self.refusal(&p);
                }
                let Some(id) = hint.or_else(|| self.pick(&svc, h)) else {
                    return Decision::Drop(rivora_abi::drop_reason::NO_HEALTHY_BACKEND);
                };
                if hint.is_some() {
                    self.hinted += 1;
                }
                if opens {
                    self.syn_hints.insert(
                        h & (rivora_abi::SYN_HINT_SLOTS - 1),
                        (h >> 12, id, std::time::Instant::now()),
                    );
                }
                // Which packet makes a flow's entry (xdp_ingress.c): a SYN
                // only re-points one it finds; a UDP flow's second datagram
                // (or any, once it had an entry); any other TCP segment.
                if opens {
                    if entry.is_some() {
                        self.affinity.insert(flow, id);
                    }
                } else if p.proto == 17 && entry.is_none() && !self.udp_seen_before(h) {
                    self.udp_first += 1;
                } else {
                    self.affinity.insert(flow, id);
                }
                id
            }
        };
        if p.first_frag {
            self.frags
                .insert((p.src.clone(), p.dst.clone(), p.frag_id, p.proto), id);
        }
        let (a, port) = self.backends[&id];
        Decision::Forward(a, if port == 0 { p.dport } else { port })
    }
}

// ----------------------------------------------------------------------
// The generator.
// ----------------------------------------------------------------------

struct Gen {
    rng: Rng,
    vips4: Vec<IpAddr>,
    vips6: Vec<IpAddr>,
}

impl Gen {
    fn addr(&mut self, v6: bool, vip: bool) -> IpAddr {
        match (v6, vip) {
            (false, true) => *self.rng.pick(&self.vips4),
            (true, true) => *self.rng.pick(&self.vips6),
            (false, false) => format!("10.200.{}.{}", self.rng.below(2), 1 + self.rng.below(6))
                .parse()
                .unwrap(),
            (true, false) => format!("fd00:200::{:x}", 1 + self.rng.below(12))
                .parse()
                .unwrap(),
        }
    }

    fn l4(&mut self, src: IpAddr, dst: IpAddr, proto: u8) -> Vec<u8> {
        let sport = 1000 + self.rng.below(40) as u16;
        let dport = *self.rng.pick(&[80u16, 53, 443, 81]);
        self.l4_ports(src, dst, proto, sport, dport)
    }

    fn l4_ports(&mut self, src: IpAddr, dst: IpAddr, proto: u8, sport: u16, dport: u16) -> Vec<u8> {
        let payload = vec![self.rng.next() as u8; self.rng.below(40) as usize];
        if proto == TCP {
            let flags = *self.rng.pick(&[0x02u8, 0x10, 0x12, 0x18, 0x11]);
            tcp(src, dst, sport, dport, flags, &payload)
        } else {
            udp(src, dst, sport, dport, &payload)
        }
    }

    /// A well-formed frame of a random shape.
    fn frame(&mut self) -> Vec<u8> {
        let v6 = self.rng.chance(50);
        let vlans: Vec<u16> = (0..self.rng.below(3))
            .map(|_| self.rng.below(4000) as u16 + 1)
            .collect();
        let client = self.addr(v6, false);
        let to_vip = self.rng.chance(85);
        let vip = self.addr(v6, to_vip);
        let proto = if self.rng.chance(50) { TCP } else { UDP };
        let shape = self.rng.below(10);
        if shape == 0 {
            // An ICMP error about a reply vip -> client.
            // A reply VIP:service -> client:port, as a router would quote it.
            let (cport, vport) = (
                1000 + self.rng.below(40) as u16,
                *self.rng.pick(&[80u16, 53, 443, 81]),
            );
            let reply = self.l4_ports(vip, client, proto, vport, cport);
            let quote_len = if self.rng.chance(50) {
                reply.len()
            } else {
                8.min(reply.len())
            };
            let router = self.addr(v6, false);
            if v6 {
                let mut q = ipv6(vip, client, proto, &[], reply.len());
                q.extend_from_slice(&reply[..quote_len]);
                let t = *self.rng.pick(&[1u8, 2, 3, 4, 128]);
                let m = icmp6(router, vip, t, 0, [0, 0, 5, 0], &q);
                return frame(router, vip, ICMP6, &vlans, &m);
            }
            let mut q = ipv4(vip, client, proto, 1, false, 0, &[], reply.len());
            q.extend_from_slice(&reply[..quote_len]);
            let t = *self.rng.pick(&[3u8, 11, 12, 8]);
            let m = icmp4(t, 4, [0, 0, 5, 0], &q);
            return frame(router, vip, ICMP, &vlans, &m);
        }
        let l4 = self.l4(client, vip, proto);
        if v6 {
            // A random extension chain of 0-6 headers.
            let n = self.rng.below(if shape < 5 { 1 } else { 7 });
            let kinds: Vec<u8> = (0..n)
                .map(|_| *self.rng.pick(&[HOPOPTS, DSTOPTS, FRAGMENT, ROUTING, AH]))
                .collect();
            let mut exts = Vec::new();
            for (i, k) in kinds.iter().enumerate() {
                let next = *kinds.get(i + 1).unwrap_or(&proto);
                exts.extend(match *k {
                    HOPOPTS | DSTOPTS => opts_ext(next, 1 + self.rng.below(12) as usize),
                    FRAGMENT => {
                        let later = self.rng.chance(30);
                        frag_ext(
                            next,
                            if later { 185 } else { 0 },
                            self.rng.chance(70),
                            self.rng.below(8) as u32,
                        )
                    }
                    _ => plain_ext(next),
                });
            }
            let mut pk = ipv6(
                client,
                vip,
                *kinds.first().unwrap_or(&proto),
                &exts,
                l4.len(),
            );
            pk.extend_from_slice(&l4);
            return eth(0x86dd, &vlans, &pk);
        }
        let opts: Vec<u8> = if shape == 1 {
            vec![1; self.rng.below(41) as usize]
        } else {
            vec![]
        };
        let (more, offset) = match shape {
            2 => (true, 0),
            3 => (self.rng.chance(50), 185),
            _ => (false, 0),
        };
        let mut pk = ipv4(
            client,
            vip,
            proto,
            self.rng.below(8) as u16,
            more,
            offset,
            &opts,
            l4.len(),
        );
        pk.extend_from_slice(&l4);
        eth(0x0800, &vlans, &pk)
    }

    /// Damages a frame: truncation, byte flips in the headers, or a bogus
    /// length or IHL/ext-length byte. Returns whether checksums may break.
    fn mutate(&mut self, f: &mut Vec<u8>) {
        match self.rng.below(4) {
            0 => {
                // Down to a bare Ethernet header: the kernel refuses to run
                // XDP on less (and no NIC delivers less).
                let keep = 14 + self.rng.below(f.len() as u64 - 13) as usize;
                f.truncate(keep);
            }
            1 => {
                for _ in 0..1 + self.rng.below(3) {
                    let at = self.rng.below(f.len().min(120) as u64) as usize;
                    f[at] ^= 1 << self.rng.below(8);
                }
            }
            2 => {
                let l3 = l3_offset(f);
                if l3 < f.len() {
                    // version/IHL byte or a random header byte near the start
                    let at = l3 + *self.rng.pick(&[0usize, 2, 3, 6, 40, 41]);
                    if at < f.len() {
                        f[at] = self.rng.next() as u8;
                    }
                }
            }
            _ => {}
        }
    }
}

/// Whether a frame's IPv4 header checksum and its TCP/UDP checksum (when
/// the frame carries a whole, unfragmented segment) verify.
fn checksums_valid(f: &[u8]) -> Option<bool> {
    let p = etherparse::SlicedPacket::from_ethernet(f).ok()?;
    let mut ok = true;
    let net = p.net.as_ref()?;
    if let etherparse::NetSlice::Ipv4(ip) = net {
        let h = ip.header().to_header();
        ok &= h.header_checksum == h.calc_header_checksum();
    }
    match (p.transport.as_ref(), net) {
        (Some(etherparse::TransportSlice::Tcp(t)), etherparse::NetSlice::Ipv4(ip)) => {
            ok &= t
                .to_header()
                .calc_checksum_ipv4(&ip.header().to_header(), t.payload())
                .ok()?
                == t.checksum()
        }
        (Some(etherparse::TransportSlice::Tcp(t)), etherparse::NetSlice::Ipv6(ip)) => {
            ok &= t
                .to_header()
                .calc_checksum_ipv6(&ip.header().to_header(), t.payload())
                .ok()?
                == t.checksum()
        }
        (Some(etherparse::TransportSlice::Udp(u)), etherparse::NetSlice::Ipv4(ip))
            if u.checksum() != 0 =>
        {
            ok &= u
                .to_header()
                .calc_checksum_ipv4(&ip.header().to_header(), u.payload())
                .ok()?
                == u.checksum()
        }
        (Some(etherparse::TransportSlice::Udp(u)), etherparse::NetSlice::Ipv6(ip)) => {
            ok &= u
                .to_header()
                .calc_checksum_ipv6(&ip.header().to_header(), u.payload())
                .ok()?
                == u.checksum()
        }
        _ => {}
    }
    Some(ok)
}

fn dst_of(f: &[u8]) -> Option<IpAddr> {
    let l3 = l3_offset(f);
    match f.get(l3)? >> 4 {
        4 => Some(IpAddr::from(
            <[u8; 4]>::try_from(f.get(l3 + 16..l3 + 20)?).ok()?,
        )),
        6 => Some(IpAddr::from(
            <[u8; 16]>::try_from(f.get(l3 + 24..l3 + 40)?).ok()?,
        )),
        _ => None,
    }
}

#[test]
fn two_hundred_thousand_frames_agree_with_the_model() {
    // The UDP seen filter is per CPU: the model mirrors one CPU's.
    pin_to_one_cpu();
    let mut r = rig("fuzz");
    let b4: Vec<_> = (11..15)
        .map(|i| backend(&format!("10.200.1.{i}"), 8000 + i as u16, 1 + i as u32 % 3))
        .collect();
    let b6: Vec<_> = (11..15)
        .map(|i| {
            backend(
                &format!("fd00:200:1::{i}"),
                8000 + i as u16,
                1 + i as u32 % 2,
            )
        })
        .collect();
    let mut specs = Vec::new();
    for (n, a) in ["10.200.100.1", "10.200.100.2"].iter().enumerate() {
        specs.push(vip(&format!("t4{n}"), a, 80, proto::TCP, b4.clone()));
        specs.push(vip(&format!("u4{n}"), a, 53, proto::UDP, b4[..2].to_vec()));
        specs.push(vip(&format!("empty4{n}"), a, 443, proto::TCP, vec![]));
    }
    for (n, a) in ["fd00:200:100::1", "fd00:200:100::2"].iter().enumerate() {
        specs.push(vip(&format!("t6{n}"), a, 80, proto::TCP, b6.clone()));
        specs.push(vip(&format!("u6{n}"), a, 443, proto::UDP, b6[1..].to_vec()));
    }
    // Refused shares (reject_weight) on port 81: TCP and UDP, with
    // backends (some of which drain or go down later) and without.
    let refusing = [
        ("r4", "10.200.100.1", proto::TCP, b4[..3].to_vec(), 2),
        ("ru4", "10.200.100.1", proto::UDP, b4[..2].to_vec(), 1),
        ("r4only", "10.200.100.2", proto::TCP, vec![], 1),
        ("r6", "fd00:200:100::1", proto::TCP, b6.clone(), 3),
        ("ru6only", "fd00:200:100::2", proto::UDP, vec![], 1),
    ];
    for (name, a, l4, b, w) in refusing {
        let mut v = vip(name, a, 81, l4, b);
        v.reject_weight = w;
        specs.push(v);
    }
    // Source ranges on one TCP VIP per family: the generator's clients
    // (10.200.{0,1}.{1..6}, fd00:200::{1..c}) fall on both sides.
    let ranges: HashMap<&str, Vec<(&str, u8)>> = HashMap::from([
        ("t41", vec![("10.200.0.0", 24), ("10.200.1.4", 31)]),
        ("t61", vec![("fd00:200::", 125)]),
    ]);
    for s in specs.iter_mut() {
        if let Some(list) = ranges.get(s.name.as_str()) {
            s.source_ranges = Some(
                list.iter()
                    .map(|(a, len)| rivora_dataplane::SourceRange::new(a.parse().unwrap(), *len))
                    .collect(),
            );
        }
    }
    r.dataplane.apply(&specs).unwrap();

    let octets = |a: IpAddr| match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let mut model = Model {
        vips: HashMap::new(),
        table: r
            .dataplane
            .maps()
            .maglev
            .read(0, r.dataplane.maglev_table_len()),
        backends: r
            .dataplane
            .backends()
            .map(|b| (b.id, (b.key.addr, b.key.port)))
            .collect(),
        affinity: HashMap::new(),
        frags: HashMap::new(),
        states: HashMap::new(),
        stale_syns: 0,
        refused: 0,
        udp_seen: vec![0; rivora_abi::UDP_SEEN_SLOTS as usize],
        udp_first: 0,
        syn_hints: HashMap::new(),
        tick: std::time::Duration::from_secs_f64(
            128.0 / f64::from(rivora_dataplane::jiffies::hz().expect("the kernel's HZ")),
        ),
        hinted: 0,
        rejected: 0,
    };
    for v in r.dataplane.vips() {
        model.vips.insert(
            (octets(v.spec.key.addr), v.spec.key.port, v.spec.key.proto),
            Svc {
                offset: v.slice.offset,
                size: v.slice.size,
                ranges: ranges.get(v.spec.name.as_str()).map(|l| {
                    l.iter()
                        .map(|(a, len)| (octets(a.parse().unwrap()), *len))
                        .collect()
                }),
                reject: (v.spec.reject_weight > 0).then(|| {
                    r.dataplane
                        .reject_backend_id()
                        .expect("a refused share has its pseudo-backend")
                }),
            },
        );
    }
    let mut g = Gen {
        rng: Rng(0x9e37_79b9_7f4a_7c15),
        vips4: vec![
            "10.200.100.1".parse().unwrap(),
            "10.200.100.2".parse().unwrap(),
        ],
        vips6: vec![
            "fd00:200:100::1".parse().unwrap(),
            "fd00:200:100::2".parse().unwrap(),
        ],
    };
    let mut tally: HashMap<&'static str, usize> = HashMap::new();
    // A third of the way through, one backend of each family drains; two
    // thirds through, another goes down: from then on frames meet affinity
    // entries of draining and down backends, and SYNs reusing them.
    let id_of = |r: &Rig, b: &rivora_dataplane::BackendSpec| {
        r.dataplane.backends().find(|s| s.key == b.key).unwrap().id
    };
    let changes = [
        (
            FRAMES / 3,
            b4[0].clone(),
            rivora_abi::backend_state::DRAINING,
        ),
        (
            FRAMES / 3,
            b6[1].clone(),
            rivora_abi::backend_state::DRAINING,
        ),
        (
            2 * FRAMES / 3,
            b4[2].clone(),
            rivora_abi::backend_state::DOWN,
        ),
        (
            2 * FRAMES / 3,
            b6[3].clone(),
            rivora_abi::backend_state::DOWN,
        ),
    ];
    for i in 0..FRAMES {
        for (at, b, state) in &changes {
            if *at == i {
                r.dataplane.set_backend_state(&b.key, *state).unwrap();
                model.states.insert(id_of(&r, b), *state);
            }
        }
        let mut f = g.frame();
        if g.rng.chance(40) {
            g.mutate(&mut f);
        }
        let (verdict, out) = r.datapath.run_xdp(&f).unwrap();
        // A forwarded frame is rewritten (its destination is a backend's);
        // a passed one is untouched and may not parse at all.
        let observed = (verdict == XDP_PASS && out != f)
            .then(|| dst_of(&out))
            .flatten();
        let want = model.decide(&f, observed);
        let ctx = || {
            format!(
                "frame #{i}: model {want:?}, program verdict {verdict}\nin:  {f:02x?}\nout: {out:02x?}"
            )
        };
        match &want {
            Decision::Pass => {
                assert_eq!(verdict, XDP_PASS, "{}", ctx());
                assert_eq!(out, f, "{}", ctx());
                *tally.entry("pass").or_default() += 1;
            }
            Decision::Drop(reason) => {
                assert_eq!(verdict, XDP_DROP, "{}", ctx());
                let _ = reason;
                *tally.entry("drop").or_default() += 1;
            }
            Decision::Reset(w) => {
                assert_eq!(verdict, XDP_TX, "{}", ctx());
                assert_eq!(out.len(), w.len, "{}", ctx());
                assert_eq!(checksums_valid(&out), Some(true), "{}", ctx());
                let s = etherparse::SlicedPacket::from_ethernet(&out).expect("a reset parses");
                let Some(etherparse::TransportSlice::Tcp(t)) = s.transport.as_ref() else {
                    panic!("a reset is TCP; {}", ctx())
                };
                let got = parse(&out).expect("a reset parses");
                let addr = |b: &[u8]| match b.len() {
                    4 => IpAddr::from(<[u8; 4]>::try_from(b).unwrap()),
                    _ => IpAddr::from(<[u8; 16]>::try_from(b).unwrap()),
                };
                assert_eq!(
                    ResetWant {
                        src: addr(&got.src),
                        dst: addr(&got.dst),
                        sport: t.source_port(),
                        dport: t.destination_port(),
                        seq: t.sequence_number(),
                        ack: t.acknowledgment_number(),
                        flags: got.tcp_flags,
                        len: out.len(),
                    },
                    *w,
                    "{}",
                    ctx()
                );
                assert!(
                    t.payload().is_empty() && t.options().is_empty(),
                    "{}",
                    ctx()
                );
                *tally.entry("reset").or_default() += 1;
            }
            Decision::Forward(addr, _) | Decision::ForwardIcmp(addr, _) => {
                assert_eq!(verdict, XDP_PASS, "{}", ctx());
                assert_eq!(dst_of(&out), Some(*addr), "{}", ctx());
                assert_eq!(out.len(), f.len(), "{}", ctx());
                if let Decision::Forward(_, port) = want
                    && port != 0
                {
                    let p = parse(&out).expect("a forwarded frame still parses");
                    assert_eq!(p.dport, port, "{}", ctx());
                }
                // Checksums: exactly as valid after as before.
                assert_eq!(
                    checksums_valid(&out),
                    checksums_valid(&f),
                    "checksum validity changed; {}",
                    ctx()
                );
                *tally
                    .entry(if matches!(want, Decision::ForwardIcmp(..)) {
                        "icmp"
                    } else {
                        "forward"
                    })
                    .or_default() += 1;
            }
        }
    }
    eprintln!(
        "{FRAMES} frames, zero disagreements: {tally:?}; {} SYNs met an entry of a draining or down backend; {} UDP first datagrams made no entry; {} refused by source ranges; {} TCP segments followed their SYN's hint; {} met a refused share",
        model.stale_syns, model.udp_first, model.refused, model.hinted, model.rejected
    );
    assert!(
        model.refused > 1000,
        "too few frames met source ranges: {}",
        model.refused
    );
    // The program counted each refusal as source_range, as the model did.
    assert_eq!(
        r.dataplane.drop_counters().unwrap()[rivora_abi::drop_reason::SOURCE_RANGE as usize],
        model.refused as u64
    );
    assert!(
        model.udp_first > 1000,
        "too few first UDP datagrams: {}",
        model.udp_first
    );
    assert!(
        model.stale_syns > 100,
        "too few SYNs reused a stale entry to mean anything: {}",
        model.stale_syns
    );
    // Every refusal counted as no_backend (nothing else in this run has a
    // backend ID without an address).
    assert_eq!(
        r.dataplane.drop_counters().unwrap()[rivora_abi::drop_reason::NO_BACKEND as usize],
        model.rejected as u64
    );
    assert!(
        model.rejected > 1000,
        "too few frames met a refused share: {}",
        model.rejected
    );
    for k in ["pass", "forward", "icmp", "drop", "reset"] {
        assert!(
            tally.get(k).copied().unwrap_or(0) > 1000,
            "too few {k} frames to mean anything: {tally:?}"
        );
    }
}
