//! Differential fuzzing of the classifier stage (bpf/classify.h): 300,000
//! generated and mutated frames (TCP, UDP, SCTP, ICMP echo and the other
//! informational types, ICMP errors quoting a flow, fragmented datagrams,
//! other protocols, IPv6 extension chains, VLAN tags, expiring TTLs,
//! oversized packets; then truncations, bit flips, corrupted lengths and
//! header fields) go through the real xdp_ingress, inside a namespace whose
//! FIB knows the targets, and through an independent Rust model of the
//! documented decision (classify.h's header comment, docs/meridio.md,
//! the `rv_cls_*` comments of rivora_abi.h): pass untouched; drop with a
//! `cls_event` reason; forward to a target of a group (the model checks
//! membership: which target within the group is the Maglev table's
//! business, pinned only for the later fragments of a datagram); or answer
//! packet-too-big from the VIP. They must agree on every frame, on the
//! `cls_event` counters each frame moves (read after every frame), and at
//! the end the program's event counters and per-rule counters must equal
//! the model's tallies. Run on one CPU (per-CPU counters and scratch).
//!
//! A disagreement is collected, not asserted on the spot: the test ends
//! with every disagreement grouped by what the model saw in the frame, a
//! few examples each (frame in hex, expected and actual outcome), and,
//! where the frame has a shape the model flags (shapes the program once got
//! wrong), what is expected of it.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Instant;

use common::raw;
use common::*;
use rivora_abi as abi;
use rivora_dataplane::SourceRange;
use rivora_dataplane::classifier::{
    ByteMatch, ClassifierSpec, GroupSpec, PortRange, RuleProto, RuleSpec, SctpHash, TargetSpec,
};

const FRAMES: usize = 300_000;
const XDP_REDIRECT: u32 = 4;
const TCP: u8 = 6;
const UDP: u8 = 17;
const SCTP: u8 = 132;
const ICMP: u8 = 1;
const ICMP6: u8 = 58;

// ----------------------------------------------------------------------
// The classifier under test.
// ----------------------------------------------------------------------

/// VIPs by role, IPv4 and IPv6: A (overlapping rules of every kind),
/// B (sources and ports, echo by source), M (target behind a locked-MTU
/// route), N (target without a neighbour), R (target without a route),
/// C (one rule with sources, into a group with a v4-only target).
const VIP4: [&str; 6] = [
    "10.200.100.5",
    "10.200.100.6",
    "10.200.100.8",
    "10.200.100.9",
    "10.200.100.10",
    "10.200.100.11",
];
const VIP6: [&str; 6] = [
    "fd00:200:100::5",
    "fd00:200:100::6",
    "fd00:200:100::8",
    "fd00:200:100::9",
    "fd00:200:100::a",
    "fd00:200:100::b",
];
const NOT_VIP4: [&str; 2] = ["10.200.100.7", "10.200.100.200"];
const NOT_VIP6: [&str; 2] = ["fd00:200:100::7", "fd00:200:100::c8"];

/// The MAC of on-link target `n` (10.200.9.n, fd00:200:9::n in hex).
fn target_mac(n: u8) -> [u8; 6] {
    [0x02, 0xaa, 0, 0, 0, n]
}
/// On-link targets with a permanent neighbour entry of their own MAC.
const ON_LINK: [u8; 8] = [0x10, 0x11, 0x15, 0x16, 0x20, 0x21, 0x22, 0x30];
const MTU4: u32 = 1200;
const MTU6: u32 = 1300;
const IF_MTU: u32 = 1500;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn on_link(slot: u16, n: u8, v6: bool) -> TargetSpec {
    TargetSpec {
        slot,
        v4: Some(format!("10.200.9.{n}").parse().unwrap()),
        v6: v6.then(|| format!("fd00:200:9::{n:x}").parse().unwrap()),
    }
}

fn group(name: &str, max: u16, sctp_hash: SctpHash, targets: Vec<TargetSpec>) -> GroupSpec {
    GroupSpec {
        name: name.into(),
        max_endpoints: max,
        sctp_hash,
        targets,
    }
}

fn ports(list: &[(u16, u16)]) -> Vec<PortRange> {
    list.iter()
        .map(|&(first, last)| PortRange { first, last })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn rule(
    name: &str,
    priority: i32,
    group: &str,
    vips: &[usize],
    protos: &[RuleProto],
    sources: &[&str],
    sports: &[(u16, u16)],
    dports: &[(u16, u16)],
    bytes: &[&str],
) -> RuleSpec {
    RuleSpec {
        name: name.into(),
        priority,
        group: group.into(),
        vips: vips
            .iter()
            .flat_map(|&i| [ip(VIP4[i]), ip(VIP6[i])])
            .collect(),
        sources: sources
            .iter()
            .map(|s| s.parse::<SourceRange>().unwrap())
            .collect(),
        source_ports: ports(sports),
        destination_ports: ports(dports),
        protocols: protos.iter().copied().collect(),
        byte_matches: bytes
            .iter()
            .map(|b| b.parse::<ByteMatch>().unwrap())
            .collect(),
    }
}

/// Several VIPs, overlapping rules (priorities, equal priorities ordered
/// by name), source prefixes, port ranges, byte matches of 1, 2 and 4
/// bytes (TCP flags, SCTP verification tag, UDP checksum), a group without
/// targets, a group whose only target is IPv4, a group with a v4-only
/// target among dual-stack ones, a target behind a locked-MTU route, one
/// without a neighbour, one without a route.
fn spec() -> ClassifierSpec {
    use RuleProto::*;
    const A: usize = 0;
    const B: usize = 1;
    const M: usize = 2;
    const N: usize = 3;
    const R: usize = 4;
    const C: usize = 5;
    let groups = vec![
        group(
            "dg-a",
            32,
            SctpHash::Ports,
            vec![
                on_link(0, 0x10, true),
                on_link(1, 0x11, true),
                on_link(5, 0x15, false),
            ],
        ),
        group("dg-b", 4, SctpHash::Ports, vec![on_link(2, 0x20, true)]),
        group(
            "dg-five",
            8,
            SctpHash::FiveTuple,
            vec![on_link(0, 0x21, true), on_link(3, 0x22, true)],
        ),
        group("dg-empty", 8, SctpHash::Ports, vec![]),
        group(
            "dg-v4only",
            4,
            SctpHash::Ports,
            vec![on_link(1, 0x16, false)],
        ),
        group("dg-mtu", 2, SctpHash::Ports, vec![on_link(0, 0x30, true)]),
        group(
            "dg-nn",
            2,
            SctpHash::Ports,
            vec![TargetSpec {
                slot: 1,
                v4: Some("10.200.9.64".parse().unwrap()),
                v6: Some("fd00:200:9::40".parse().unwrap()),
            }],
        ),
        group(
            "dg-nr",
            2,
            SctpHash::Ports,
            vec![TargetSpec {
                slot: 0,
                v4: Some("10.200.77.1".parse().unwrap()),
                v6: Some("fd00:200:77::1".parse().unwrap()),
            }],
        ),
    ];
    let rules = vec![
        // VIP A, highest first.
        rule(
            "r-init",
            50,
            "dg-b",
            &[A],
            &[Sctp],
            &[],
            &[],
            &[],
            &["sctp[4:4]=0"],
        ),
        rule(
            "r-dead",
            40,
            "dg-empty",
            &[A],
            &[Udp],
            &[],
            &[],
            &[(9999, 9999)],
            &[],
        ),
        rule(
            "r-syn",
            30,
            "dg-b",
            &[A],
            &[Tcp],
            &[],
            &[],
            &[(80, 80), (443, 443)],
            &["tcp[13:1]&0x02=0x02"],
        ),
        // Equal priorities: r-eq-a before r-eq-b where both match (source
        // ports 1010-1019); IPv6 into dg-v4only is dropped there, never
        // falls through to r-eq-b.
        rule(
            "r-eq-b",
            25,
            "dg-five",
            &[A],
            &[Tcp, Udp],
            &[],
            &[(1010, 1039)],
            &[],
            &[],
        ),
        rule(
            "r-eq-a",
            25,
            "dg-v4only",
            &[A],
            &[Udp],
            &[],
            &[(1000, 1019)],
            &[],
            &[],
        ),
        rule(
            "r-src",
            20,
            "dg-b",
            &[A],
            &[Tcp, Udp],
            &["10.200.0.128/25", "fd00:200::8000/113"],
            &[],
            &[],
            &[],
        ),
        rule(
            "r-vtag",
            15,
            "dg-five",
            &[A],
            &[Tcp, Sctp],
            &[],
            &[],
            &[],
            &["sctp[4:4]&0xffff0000=0xdead0000", "tcp[13:1]&0x01=0x01"],
        ),
        rule(
            "r-low",
            10,
            "dg-a",
            &[A],
            &[Tcp, Udp, Sctp],
            &[],
            &[],
            &[(53, 53), (80, 80), (443, 443), (9000, 9100)],
            &[],
        ),
        // VIP B.
        rule(
            "r-port",
            5,
            "dg-a",
            &[B],
            &[Udp],
            &[],
            &[],
            &[(80, 80)],
            &[],
        ),
        rule(
            "r-bsrc",
            5,
            "dg-b",
            &[B],
            &[Tcp, Udp, Sctp],
            &[
                "10.200.0.0/26",
                "192.0.2.0/24",
                "fd00:200::/120",
                "fd00:201::/32",
            ],
            &[(1000, 1003), (2000, 2000)],
            &[],
            &[],
        ),
        rule(
            "r-ucsum",
            4,
            "dg-v4only",
            &[B],
            &[Udp],
            &[],
            &[],
            &[],
            &["udp[6:2]=0"],
        ),
        rule(
            "r-bsctp",
            3,
            "dg-five",
            &[B],
            &[Sctp],
            &[],
            &[],
            &[(9000, 9100)],
            &[],
        ),
        // M, N, R, C.
        rule("r-mtu", 1, "dg-mtu", &[M], &[Tcp, Udp], &[], &[], &[], &[]),
        rule(
            "r-nn",
            1,
            "dg-nn",
            &[N],
            &[Tcp, Udp, Sctp],
            &[],
            &[],
            &[],
            &[],
        ),
        rule("r-nr", 1, "dg-nr", &[R], &[Tcp, Udp], &[], &[], &[], &[]),
        rule(
            "r-csrc",
            7,
            "dg-v4only",
            &[C],
            &[Tcp, Udp],
            &["10.200.0.64/27", "fd00:200::/112"],
            &[],
            &[],
            &[],
        ),
    ];
    ClassifierSpec { groups, rules }
}

/// The namespace of rivora_lab::fib plus the targets: on-link ones with
/// permanent neighbours of their own MAC; 10.200.9.48 and fd00:200:9::30
/// behind host routes of locked MTU 1200 and 1300; 10.200.9.64 and
/// fd00:200:9::40 on-link without a neighbour; 10.200.77.0/24 and
/// fd00:200:77::/64 unreachable. Returns the namespace, the ingress
/// ifindex and the MAC of up0 (the frames' way out).
fn lab(name: &str) -> (rivora_lab::Netns, u32, [u8; 6]) {
    let lab = rivora_lab::fib::FibLab::new(name).unwrap();
    for n in ON_LINK {
        let mac = target_mac(n)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":");
        for addr in [format!("10.200.9.{n}"), format!("fd00:200:9::{n:x}")] {
            lab.ns
                .run(&[
                    "ip",
                    "neigh",
                    "add",
                    &addr,
                    "lladdr",
                    &mac,
                    "dev",
                    "up0",
                    "nud",
                    "permanent",
                ])
                .unwrap();
        }
    }
    for cmd in [
        "ip route add 10.200.9.48/32 dev up0 mtu lock 1200",
        "ip -6 route add fd00:200:9::30/128 dev up0 mtu lock 1300",
        "ip route add unreachable 10.200.77.0/24",
        "ip -6 route add unreachable fd00:200:77::/64",
    ] {
        lab.ns.run(&cmd.split(' ').collect::<Vec<_>>()).unwrap();
    }
    let link = lab.ns.run(&["ip", "-o", "link", "show", "up0"]).unwrap();
    let ether = link
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .expect("up0's MAC");
    let mut mac = [0u8; 6];
    for (i, b) in ether.split(':').enumerate() {
        mac[i] = u8::from_str_radix(b, 16).unwrap();
    }
    (lab.ns, lab.ingress_ifindex, mac)
}

// ----------------------------------------------------------------------
// Deterministic randomness.
// ----------------------------------------------------------------------

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
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

// ----------------------------------------------------------------------
// The model: written from classify.h's header comment, docs/meridio.md and
// the rv_cls_* comments of rivora_abi.h (the shared parse limits from
// parse.h's header and rivora_abi.h), not from the C.
// ----------------------------------------------------------------------

/// What the FIB says about a target address (as the lab built it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fib {
    /// A route of this MTU; with or without a resolved neighbour.
    Up { mtu: u32, neigh: bool },
    /// Unreachable.
    NoRoute,
}

/// The lab's routing of a target address: (FIB answer, the MAC of a
/// frame forwarded to it).
fn fib_of(addr: IpAddr) -> (Fib, u8) {
    let o = match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let v6 = o.len() == 16;
    let last = o[o.len() - 1];
    let in_77 = if v6 { o[4..6] == [0, 0x77] } else { o[2] == 77 };
    if in_77 {
        return (Fib::NoRoute, 0);
    }
    match last {
        0x30 if v6 => (
            Fib::Up {
                mtu: MTU6,
                neigh: true,
            },
            last,
        ),
        48 if !v6 => (
            Fib::Up {
                mtu: MTU4,
                neigh: true,
            },
            0x30,
        ),
        0x40 if v6 => (
            Fib::Up {
                mtu: IF_MTU,
                neigh: false,
            },
            0,
        ),
        64 if !v6 => (
            Fib::Up {
                mtu: IF_MTU,
                neigh: false,
            },
            0,
        ),
        n => {
            assert!(ON_LINK.contains(&n), "{addr} is not in the lab");
            (
                Fib::Up {
                    mtu: IF_MTU,
                    neigh: true,
                },
                n,
            )
        }
    }
}

struct MGroup {
    name: String,
    /// Per family (0: IPv4, 1: IPv6): the MACs of its targets with an
    /// address of the family, and what the FIB says for them (one answer
    /// per group and family in this lab, so the model can predict it).
    macs: [Vec<u8>; 2],
    fib: [Option<Fib>; 2],
}

struct MRule {
    name: String,
    group: usize,
    protos: Vec<u8>,
    /// (prefix bytes, length); empty: any source.
    sources: Vec<(Vec<u8>, u8)>,
    sports: Vec<(u16, u16)>,
    dports: Vec<(u16, u16)>,
    bytes: Vec<ByteMatch>,
}

/// (IPv6, source, destination, identification, protocol or next header):
/// what makes fragments one datagram (RFC 791: source, destination,
/// protocol, ID; RFC 8200: source, destination, ID, with the Fragment
/// header's Next Header the same in every fragment).
type FragKey = (bool, Vec<u8>, Vec<u8>, u32, u8);

struct FragEntry {
    rule: usize,
    group: usize,
    /// The target the datagram's fragments go to, once one was seen.
    pin: Option<u8>,
    /// Flags of the first fragment that concern the later ones.
    notes: Vec<&'static str>,
}

/// What the model saw in a frame.
#[derive(Debug)]
enum Kind {
    Malformed(&'static str),
    /// NDP or MLD: the kernel's.
    Kernel,
    Later(FragKey),
    Other,
    L4 {
        proto: u8,
        sport: u16,
        dport: u16,
        hdr: Vec<u8>,
    },
    Echo,
    /// An ICMP error: the quoted flow turned back to the client's
    /// direction (client address, ports as the client sent them).
    Err {
        proto: u8,
        client: Vec<u8>,
        sport: u16,
        dport: u16,
    },
}

struct Pkt {
    v6: bool,
    src: Vec<u8>,
    ttl: u8,
    /// The length the IP header claims (IPv4 total length, IPv6 payload
    /// length + 40): what "over the route's MTU" is measured on.
    claimed: u32,
    df: bool,
    /// Offset of what follows the IP header(s) (the L4 header, or a later
    /// fragment's data): a too-big answer quotes up to here + 8 bytes.
    l4_at: usize,
    /// A first fragment of several: the datagram it starts.
    first: Option<FragKey>,
    /// The protocol at the end of the header chain.
    proto: u8,
    kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Want {
    /// Handed to the kernel untouched, no event.
    Pass,
    /// Handed to the kernel untouched, with this event (TTL expiring).
    Kernel(u32),
    Drop(u32),
    /// Forwarded to a target of this group (the pinned one for a
    /// fragment whose datagram was seen going there).
    Forward {
        group: usize,
        pin: Option<u8>,
    },
    /// Fragmentation needed / packet too big back to the sender, from the
    /// VIP, reporting `mtu`, quoting at least `quote_min` bytes of the IP
    /// packet.
    TooBig {
        mtu: u32,
        quote_min: usize,
    },
}

/// Shapes the model flags because the program once got them wrong (this
/// fuzzer found each), with what is expected and where classify.h does it:
/// a disagreement in one of them is a regression of that fix.
const NOTES: &[(&str, &str)] = &[
    (
        "v4-later-fragment-header-past-frame",
        "an IPv4 later fragment whose header (IHL) runs past the frame is a truncated header: malformed \
         (rv_cls_parse_ipv4 checks the header length before it looks at the fragment fields)",
    ),
    (
        "v6-header-after-fragment-header",
        "the later fragments of a datagram with a header after its Fragment header (Destination \
         Options in the fragmentable part) follow the first: both are keyed by the Fragment header's \
         next header (rv_cls_pkt.frag_proto), not the first fragment's final L4 protocol",
    ),
    (
        "later-fragment-too-big",
        "a later fragment over the target route's MTU (IPv4 with DF, IPv6) is answered like any \
         packet, quoting its IP header(s) and 8 bytes of its data (rv_cls_forward)",
    ),
    (
        "v6-extensions-over-248-bytes-with-fragment-header",
        "IPv6 extension headers beyond RV_MAX_IPV6_EXT_BYTES (248) in all, the Fragment header's 8 \
         bytes included, are malformed (rv_cls_parse_ipv6)",
    ),
    (
        "v6-claimed-length-over-65535",
        "an IPv6 packet whose payload length claims over 65,495 bytes is over every MTU: the length \
         handed to bpf_fib_lookup (16 bits) is capped at 65,535, never wrapped (rv_cls_forward)",
    ),
    (
        "icmp-counted-as-sent-but-not-forwarded",
        "echo / icmp_error count ICMP messages sent to a target: counted where the packet is \
         forwarded, not when its target is picked (no neighbour, no route, too big, TTL: not counted)",
    ),
    (
        "mldv2-report",
        "MLD (130-132, and MLDv2 reports, 143) and NDP (133-137) to a VIP are the kernel's \
         (rv_cls_parse_l4)",
    ),
];

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Whether the first `len` bits of `a` and `prefix` agree (one family),
/// bit by bit.
fn in_prefix(a: &[u8], prefix: &[u8], len: u8) -> bool {
    a.len() == prefix.len()
        && (0..len as usize)
            .all(|i| (a[i / 8] >> (7 - i % 8)) & 1 == (prefix[i / 8] >> (7 - i % 8)) & 1)
}

fn octets(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// ICMP errors (RFC 1122 3.2.2; RFC 4443's defined errors): they quote
/// the packet they are about. Every other type is informational.
fn icmp_error(v6: bool, t: u8) -> bool {
    if v6 {
        (1..=4).contains(&t)
    } else {
        matches!(t, 3 | 4 | 5 | 11 | 12)
    }
}

/// NDP (133-137) and MLD (130-132, MLDv2's 143).
fn ndp_or_mld(t: u8) -> bool {
    (130..=137).contains(&t) || t == 143
}

/// The fixed L4 header byte matches read (and a packet must carry).
fn header_len(proto: u8) -> Option<usize> {
    match proto {
        TCP => Some(20),
        UDP => Some(8),
        SCTP => Some(12),
        _ => None,
    }
}

#[derive(Default)]
struct Tally {
    events: [u64; abi::cls_event::COUNT as usize],
    /// Per rule: forwarded packets, no_target drops.
    rule_packets: Vec<u64>,
    rule_no_target: Vec<u64>,
    /// Echoes and errors whose target was picked but that were not
    /// forwarded (TTL, route, neighbour, MTU): not "sent to a target".
    icmp_picked_not_forwarded: [u64; 2],
    /// Outcomes and shapes seen, for the coverage report.
    outcomes: BTreeMap<String, u64>,
    shapes: BTreeMap<&'static str, u64>,
}

struct Model {
    vips: [HashMap<Vec<u8>, Vec<usize>>; 2],
    rules: Vec<MRule>,
    groups: Vec<MGroup>,
    frags: HashMap<FragKey, FragEntry>,
    frag_keys_made: usize,
    /// For the report only, never for a prediction: the keys a first
    /// fragment with a header after its Fragment header would have if it
    /// were keyed by its L4 protocol (what a disagreement on a later
    /// fragment of that key traces back to).
    suspect_keys: std::collections::HashSet<FragKey>,
    tally: Tally,
}

struct Decision {
    want: Want,
    notes: Vec<&'static str>,
    /// The datagram whose target the forwarded frame pins.
    pin_key: Option<FragKey>,
    rule: Option<usize>,
    /// ECHO or ICMP_ERROR, counted when the frame is forwarded.
    icmp_event: Option<u32>,
}

impl Decision {
    /// The `cls_event` counters the frame moves, per the docs: its drop or
    /// pass reason; too_big_icmp for an answer; echo / icmp_error for an
    /// ICMP message forwarded to a target.
    fn events(&self) -> Vec<u32> {
        match &self.want {
            Want::Pass => vec![],
            Want::Kernel(e) | Want::Drop(e) => vec![*e],
            Want::TooBig { .. } => vec![abi::cls_event::TOO_BIG_ICMP],
            Want::Forward { .. } => self.icmp_event.into_iter().collect(),
        }
    }
}

impl Model {
    fn new(spec: &ClassifierSpec) -> Model {
        let groups: Vec<MGroup> = spec
            .groups
            .iter()
            .map(|g| {
                let mut m = MGroup {
                    name: g.name.clone(),
                    macs: [vec![], vec![]],
                    fib: [None, None],
                };
                for t in &g.targets {
                    for (fam, a) in [(0, t.v4.map(IpAddr::V4)), (1, t.v6.map(IpAddr::V6))] {
                        let Some(a) = a else { continue };
                        let (fib, mac) = fib_of(a);
                        assert!(
                            m.fib[fam].is_none_or(|f| f == fib),
                            "one FIB answer per group and family"
                        );
                        m.fib[fam] = Some(fib);
                        m.macs[fam].push(mac);
                    }
                }
                m
            })
            .collect();
        let rules: Vec<MRule> = spec
            .rules
            .iter()
            .map(|r| MRule {
                name: r.name.clone(),
                group: groups.iter().position(|g| g.name == r.group).unwrap(),
                protos: r.protocols.iter().map(|p| p.number()).collect(),
                sources: r
                    .sources
                    .iter()
                    .map(|s| (octets(s.addr), s.prefix_len))
                    .collect(),
                sports: r.source_ports.iter().map(|p| (p.first, p.last)).collect(),
                dports: r
                    .destination_ports
                    .iter()
                    .map(|p| (p.first, p.last))
                    .collect(),
                bytes: r.byte_matches.clone(),
            })
            .collect();
        // A VIP's rules: priority high to low, equal priorities by name
        // (byte order), first wins.
        let mut vips: [HashMap<Vec<u8>, Vec<usize>>; 2] = [HashMap::new(), HashMap::new()];
        for (i, r) in spec.rules.iter().enumerate() {
            for v in &r.vips {
                vips[v.is_ipv6() as usize]
                    .entry(octets(*v))
                    .or_default()
                    .push(i);
            }
        }
        for list in vips.iter_mut().flat_map(|m| m.values_mut()) {
            list.sort_by(|&a, &b| {
                let (ra, rb) = (&spec.rules[a], &spec.rules[b]);
                rb.priority
                    .cmp(&ra.priority)
                    .then_with(|| ra.name.as_bytes().cmp(rb.name.as_bytes()))
            });
        }
        let n = rules.len();
        Model {
            vips,
            rules,
            groups,
            frags: HashMap::new(),
            frag_keys_made: 0,
            suspect_keys: Default::default(),
            tally: Tally {
                rule_packets: vec![0; n],
                rule_no_target: vec![0; n],
                ..Tally::default()
            },
        }
    }

    /// Parses a frame addressed to a classifier VIP of its family.
    fn parse(b: &[u8], v6: bool, notes: &mut Vec<&'static str>) -> Pkt {
        let mut p = Pkt {
            v6,
            src: vec![],
            ttl: 0,
            claimed: 0,
            df: false,
            l4_at: 0,
            first: None,
            proto: 0,
            kind: Kind::Other,
        };
        let (proto, at) = if v6 {
            p.src = b[22..38].to_vec();
            let dst = b[38..54].to_vec();
            p.ttl = b[21];
            p.claimed = u32::from(be16(b, 18)) + 40;
            // Up to 4 Hop-by-Hop, Destination Options and Fragment headers,
            // 248 bytes in all (parse.h, RV_MAX_IPV6_EXT_*).
            let mut nh = b[20];
            let mut cur = 54;
            let mut total = 0usize;
            let mut seen_fragment = false;
            for _ in 0..4 {
                match nh {
                    0 | 60 => {
                        if cur + 2 > b.len() {
                            p.kind = Kind::Malformed("extension header past the frame");
                            return p;
                        }
                        let len = (b[cur + 1] as usize + 1) * 8;
                        total += len;
                        if total > 248 {
                            p.kind = Kind::Malformed("extension headers over 248 bytes");
                            return p;
                        }
                        if cur + len > b.len() {
                            p.kind = Kind::Malformed("extension header past the frame");
                            return p;
                        }
                        nh = b[cur];
                        cur += len;
                    }
                    44 => {
                        if cur + 8 > b.len() {
                            p.kind = Kind::Malformed("fragment header past the frame");
                            return p;
                        }
                        // At most one Fragment header (RFC 8200 4.1): a
                        // second would give the datagram two identities.
                        if seen_fragment {
                            p.kind = Kind::Malformed("a second fragment header");
                            return p;
                        }
                        seen_fragment = true;
                        total += 8;
                        if total > 248 {
                            notes.push("v6-extensions-over-248-bytes-with-fragment-header");
                            p.kind = Kind::Malformed("extension headers over 248 bytes");
                            return p;
                        }
                        let off = be16(b, cur + 2);
                        let id =
                            u32::from_be_bytes([b[cur + 4], b[cur + 5], b[cur + 6], b[cur + 7]]);
                        let fnh = b[cur];
                        cur += 8;
                        let key = (true, p.src.clone(), dst.clone(), id, fnh);
                        if off & 0xfff8 != 0 {
                            p.l4_at = cur;
                            p.kind = Kind::Later(key);
                            return p;
                        }
                        if off & 1 != 0 {
                            p.first = Some(key);
                        }
                        nh = fnh;
                    }
                    _ => break,
                }
            }
            if matches!(nh, 0 | 60 | 44) {
                p.kind = Kind::Malformed("more than 4 extension headers");
                return p;
            }
            (nh, cur)
        } else {
            let hl = (b[14] & 0xf) as usize * 4;
            p.src = b[26..30].to_vec();
            p.ttl = b[22];
            p.claimed = u32::from(be16(b, 16));
            let frag = be16(b, 20);
            p.df = frag & 0x4000 != 0;
            let key = (
                false,
                p.src.clone(),
                b[30..34].to_vec(),
                u32::from(be16(b, 18)),
                b[23],
            );
            if 14 + hl > b.len() {
                if frag & 0x1fff != 0 {
                    notes.push("v4-later-fragment-header-past-frame");
                }
                p.kind = Kind::Malformed("IPv4 header past the frame");
                return p;
            }
            p.l4_at = 14 + hl;
            if frag & 0x1fff != 0 {
                p.kind = Kind::Later(key);
                return p;
            }
            if frag & 0x2000 != 0 {
                p.first = Some(key);
            }
            (b[23], 14 + hl)
        };
        p.l4_at = at;
        p.proto = proto;
        let rest = &b[at..];
        if let Some(len) = header_len(proto) {
            if rest.len() < len {
                p.kind = Kind::Malformed("L4 header past the frame");
                return p;
            }
            p.kind = Kind::L4 {
                proto,
                sport: be16(rest, 0),
                dport: be16(rest, 2),
                hdr: rest[..len].to_vec(),
            };
            return p;
        }
        if proto != if v6 { ICMP6 } else { ICMP } {
            p.kind = Kind::Other;
            return p;
        }
        if rest.len() < 8 {
            p.kind = Kind::Malformed("ICMP header past the frame");
            return p;
        }
        let t = rest[0];
        if icmp_error(v6, t) {
            p.kind = if p.first.is_some() {
                Kind::Malformed("fragmented ICMP error")
            } else {
                Self::quote(&rest[8..], v6)
            };
            return p;
        }
        if v6 && ndp_or_mld(t) {
            if t == 143 {
                notes.push("mldv2-report");
            }
            p.kind = Kind::Kernel;
            return p;
        }
        p.kind = Kind::Echo;
        p
    }

    /// An ICMP error's quote: a TCP, UDP or SCTP packet (IPv4 with options,
    /// not a later fragment; IPv6 without extension headers) with its
    /// ports, turned back to the client's direction.
    fn quote(q: &[u8], v6: bool) -> Kind {
        let (proto, client, ports_at) = if v6 {
            if q.len() < 40 || q[0] >> 4 != 6 {
                return Kind::Malformed("quote: no IPv6 header");
            }
            (q[6], q[24..40].to_vec(), 40)
        } else {
            if q.len() < 20 || q[0] >> 4 != 4 || q[0] & 0xf < 5 {
                return Kind::Malformed("quote: no IPv4 header");
            }
            if be16(q, 6) & 0x1fff != 0 {
                return Kind::Malformed("quote: a later fragment");
            }
            (q[9], q[16..20].to_vec(), (q[0] & 0xf) as usize * 4)
        };
        if header_len(proto).is_none() {
            return Kind::Malformed("quote: not TCP, UDP or SCTP");
        }
        if q.len() < ports_at + 4 {
            return Kind::Malformed("quote: no ports");
        }
        Kind::Err {
            proto,
            client,
            sport: be16(q, ports_at + 2),
            dport: be16(q, ports_at),
        }
    }

    fn rule_matches(r: &MRule, p: &Pkt) -> bool {
        let source_ok = |src: &[u8]| {
            r.sources.is_empty() || r.sources.iter().any(|(pre, len)| in_prefix(src, pre, *len))
        };
        let (proto, src, sport, dport, hdr, is_err) = match &p.kind {
            // Echo: addresses only, whatever the rule's protocols.
            Kind::Echo => return source_ok(&p.src),
            Kind::L4 {
                proto,
                sport,
                dport,
                hdr,
            } => (*proto, &p.src, *sport, *dport, Some(hdr), false),
            Kind::Err {
                proto,
                client,
                sport,
                dport,
            } => (*proto, client, *sport, *dport, None, true),
            _ => return false,
        };
        let in_ranges = |ranges: &[(u16, u16)], port: u16| {
            ranges.is_empty() || ranges.iter().any(|&(a, b)| a <= port && port <= b)
        };
        r.protos.contains(&proto)
            && source_ok(src)
            && in_ranges(&r.dports, dport)
            && in_ranges(&r.sports, sport)
            && r.bytes
                .iter()
                .filter(|m| m.proto.number() == proto)
                .all(|m| {
                    // An error's quote is the reply's header: a rule that
                    // inspects this protocol's bytes does not match it.
                    if is_err {
                        return false;
                    }
                    let h = hdr.unwrap();
                    let at = m.offset as usize;
                    let v = h[at..at + m.len as usize]
                        .iter()
                        .fold(0u32, |v, b| (v << 8) | u32::from(*b));
                    v & m.mask == m.value
                })
    }

    fn decide(&mut self, b: &[u8]) -> Decision {
        let mut d = Decision {
            want: Want::Pass,
            notes: vec![],
            pin_key: None,
            rule: None,
            icmp_event: None,
        };
        // Which frames reach the classifier: untagged or tagged IPv4/IPv6
        // whose fixed header is there and names a classifier VIP.
        let et = be16(b, 12);
        let mut l3 = 14;
        let mut ethertype = et;
        let mut tags = 0;
        while (ethertype == 0x8100 || ethertype == 0x88a8) && tags < 2 && b.len() >= l3 + 4 {
            ethertype = be16(b, l3 + 2);
            l3 += 4;
            tags += 1;
        }
        let v6 = match ethertype {
            0x0800 => false,
            0x86dd => true,
            _ => {
                self.shape("not IP");
                return d;
            }
        };
        let (fixed, dst) = if v6 { (40, 24..40) } else { (20, 16..20) };
        let recognised = b.len() >= l3 + fixed
            && b[l3] >> 4 == if v6 { 6 } else { 4 }
            && (v6 || b[l3] & 0xf >= 5);
        if !recognised || !self.vips[v6 as usize].contains_key(&b[l3 + dst.start..l3 + dst.end]) {
            self.shape(if recognised {
                "not a VIP"
            } else {
                "no IP header"
            });
            return d;
        }
        if tags > 0 {
            // VLAN-tagged: the kernel's (its VLAN device).
            self.shape("VLAN-tagged to a VIP");
            return d;
        }
        let vip = b[l3 + dst.start..l3 + dst.end].to_vec();
        let p = Self::parse(b, v6, &mut d.notes);
        let fam = v6 as usize;
        let (rule, group, pin) = match &p.kind {
            Kind::Malformed(why) => {
                self.shape(why);
                d.want = Want::Drop(abi::cls_event::MALFORMED);
                return d;
            }
            Kind::Kernel => {
                self.shape("NDP/MLD");
                return d;
            }
            Kind::Later(key) => {
                self.shape("later fragment");
                if self.suspect_keys.contains(key) {
                    d.notes.push("v6-header-after-fragment-header");
                }
                let Some(e) = self.frags.get(key) else {
                    d.want = Want::Drop(abi::cls_event::FRAG_UNMATCHED);
                    return d;
                };
                d.notes.extend(e.notes.iter().copied());
                d.pin_key = Some(key.clone());
                (e.rule, e.group, e.pin)
            }
            Kind::Other => {
                self.shape("other protocol");
                d.want = Want::Drop(abi::cls_event::NO_RULE);
                return d;
            }
            kind => {
                self.shape(match kind {
                    Kind::Echo => "ICMP informational",
                    Kind::Err { .. } => "ICMP error",
                    Kind::L4 { proto: TCP, .. } => "TCP",
                    Kind::L4 { proto: UDP, .. } => "UDP",
                    _ => "SCTP",
                });
                if p.first.is_some() {
                    self.shape("first fragment");
                }
                let found = self.vips[fam][&vip]
                    .iter()
                    .copied()
                    .find(|&i| Self::rule_matches(&self.rules[i], &p));
                let Some(rule) = found else {
                    d.want = Want::Drop(abi::cls_event::NO_RULE);
                    return d;
                };
                d.rule = Some(rule);
                let group = self.rules[rule].group;
                if self.groups[group].macs[fam].is_empty() {
                    // Dropped at this rule's priority: no fall through.
                    self.tally.rule_no_target[rule] += 1;
                    d.want = Want::Drop(abi::cls_event::NO_TARGET);
                    return d;
                }
                d.icmp_event = match kind {
                    Kind::Echo => Some(abi::cls_event::ECHO),
                    Kind::Err { .. } => Some(abi::cls_event::ICMP_ERROR),
                    _ => None,
                };
                if let Some(key) = &p.first {
                    // A header after the Fragment header (Destination
                    // Options, another Fragment header): the datagram's
                    // fragments carry that header's type, not the L4
                    // protocol's.
                    let mis_keyed = key.4 != p.proto;
                    if mis_keyed {
                        let (v6, src, dst, id, _) = key.clone();
                        self.suspect_keys.insert((v6, src, dst, id, p.proto));
                    }
                    // Classified and remembered, whatever happens next.
                    if !self.frags.contains_key(key) {
                        self.frag_keys_made += 1;
                    }
                    self.frags.insert(
                        key.clone(),
                        FragEntry {
                            rule,
                            group,
                            pin: None,
                            notes: if mis_keyed {
                                vec!["v6-header-after-fragment-header"]
                            } else {
                                vec![]
                            },
                        },
                    );
                    d.pin_key = Some(key.clone());
                }
                (rule, group, None)
            }
        };
        d.rule = Some(rule);
        // Forward as a router would: TTL first, then the FIB (route, the
        // route's MTU, the neighbour).
        // The FIB's answer for this packet: a router forwards no IPv6
        // packet from a multicast, link-local or loopback source (the
        // lookup is strict for those; RFC 4291 2.7, 2.5.6).
        let strict_source = p.v6
            && (p.src[0] == 0xff
                || (p.src[0] == 0xfe && p.src[1] & 0xc0 == 0x80)
                || p.src == octets(ip("::1")));
        let fib = if strict_source {
            Fib::NoRoute
        } else {
            self.groups[group].fib[fam].unwrap()
        };
        d.want = if p.ttl <= 1 {
            Want::Kernel(abi::cls_event::TTL_TO_KERNEL)
        } else {
            match fib {
                Fib::NoRoute => Want::Drop(abi::cls_event::NO_ROUTE),
                Fib::Up { mtu, .. } if p.claimed > mtu => {
                    if p.claimed > 0xffff {
                        d.notes.push("v6-claimed-length-over-65535");
                    }
                    if !p.v6 && !p.df {
                        Want::Drop(abi::cls_event::TOO_BIG_DROP)
                    } else if p.l4_at + 8 > b.len() {
                        // A frame shorter than the 8 data bytes an answer
                        // quotes can only be over the MTU by a lying
                        // length: nothing to quote, malformed.
                        Want::Drop(abi::cls_event::MALFORMED)
                    } else {
                        if matches!(p.kind, Kind::Later(_)) {
                            d.notes.push("later-fragment-too-big");
                        }
                        Want::TooBig {
                            mtu,
                            quote_min: p.l4_at + 8 - 14,
                        }
                    }
                }
                Fib::Up { neigh: false, .. } => Want::Drop(abi::cls_event::NO_NEIGH),
                Fib::Up { .. } => Want::Forward { group, pin },
            }
        };
        if !matches!(d.want, Want::Forward { .. })
            && let Some(e) = d.icmp_event
        {
            self.tally.icmp_picked_not_forwarded[(e == abi::cls_event::ICMP_ERROR) as usize] += 1;
        }
        d
    }

    fn shape(&mut self, s: &'static str) {
        *self.tally.shapes.entry(s).or_default() += 1;
    }

    /// Counts the model's outcome (whatever the program did).
    fn count(&mut self, d: &Decision) {
        for e in d.events() {
            self.tally.events[e as usize] += 1;
        }
        let name = match &d.want {
            Want::Pass => "pass untouched".to_string(),
            Want::Kernel(e) | Want::Drop(e) => {
                let kind = if matches!(d.want, Want::Kernel(_)) {
                    "pass"
                } else {
                    "drop"
                };
                format!("{kind} {}", abi::cls_event::NAMES[*e as usize])
            }
            Want::TooBig { .. } => "too big answered".to_string(),
            Want::Forward { .. } => {
                self.tally.rule_packets[d.rule.unwrap()] += 1;
                "forward".to_string()
            }
        };
        *self.tally.outcomes.entry(name).or_default() += 1;
    }
}

// ----------------------------------------------------------------------
// Checking the program's answer against the model's.
// ----------------------------------------------------------------------

/// RFC 1071: whether `data` sums to all ones (with `acc` summed in).
fn sums_ok(data: &[u8], acc: u32) -> bool {
    raw::checksum(data, acc) == 0
}

/// Whether a frame's IPv4 header checksum and its TCP/UDP checksum (when
/// the frame carries a whole, unfragmented segment) verify, as the
/// independent parser reads them.
fn checksums_valid(f: &[u8]) -> Option<bool> {
    use etherparse::{NetSlice, TransportSlice};
    let p = etherparse::SlicedPacket::from_ethernet(f).ok()?;
    let net = p.net.as_ref()?;
    let mut ok = true;
    if let NetSlice::Ipv4(ip) = net {
        let h = ip.header().to_header();
        ok &= h.header_checksum == h.calc_header_checksum();
    }
    match (p.transport.as_ref(), net) {
        (Some(TransportSlice::Tcp(t)), NetSlice::Ipv4(ip)) => {
            ok &= t
                .to_header()
                .calc_checksum_ipv4(&ip.header().to_header(), t.payload())
                .ok()?
                == t.checksum()
        }
        (Some(TransportSlice::Tcp(t)), NetSlice::Ipv6(ip)) => {
            ok &= t
                .to_header()
                .calc_checksum_ipv6(&ip.header().to_header(), t.payload())
                .ok()?
                == t.checksum()
        }
        (Some(TransportSlice::Udp(u)), NetSlice::Ipv4(ip)) if u.checksum() != 0 => {
            ok &= u
                .to_header()
                .calc_checksum_ipv4(&ip.header().to_header(), u.payload())
                .ok()?
                == u.checksum()
        }
        (Some(TransportSlice::Udp(u)), NetSlice::Ipv6(ip)) => {
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

/// Checks the program's (verdict, output) against `want`; on a forward,
/// the target it went to.
fn check(
    model: &Model,
    want: &Want,
    f: &[u8],
    verdict: u32,
    out: &[u8],
    up0: [u8; 6],
) -> Result<Option<u8>, String> {
    let v6 = f.len() > 13 && be16(f, 12) == 0x86dd;
    let fam = v6 as usize;
    macro_rules! ensure {
        ($c:expr, $($m:tt)*) => {
            if !$c {
                return Err(format!($($m)*));
            }
        };
    }
    match want {
        Want::Pass | Want::Kernel(_) => {
            ensure!(verdict == XDP_PASS, "verdict {verdict}, want XDP_PASS");
            ensure!(out == f, "passed, but changed");
            Ok(None)
        }
        Want::Drop(_) => {
            ensure!(verdict == XDP_DROP, "verdict {verdict}, want XDP_DROP");
            Ok(None)
        }
        Want::Forward { group, pin } => {
            ensure!(
                verdict == XDP_REDIRECT,
                "verdict {verdict}, want XDP_REDIRECT"
            );
            ensure!(out.len() == f.len(), "length {} != {}", out.len(), f.len());
            let mac = out[5];
            let g = &model.groups[*group];
            ensure!(
                out[0..5] == target_mac(0)[0..5] && g.macs[fam].contains(&mac),
                "to MAC {:02x?}, not a target of {} ({:x?})",
                &out[0..6],
                g.name,
                g.macs[fam]
            );
            if let Some(pin) = pin {
                ensure!(
                    mac == *pin,
                    "to .{mac:x}, but its datagram went to .{pin:x}"
                );
            }
            ensure!(out[6..12] == up0, "source MAC is not up0's");
            let ttl_at = if v6 { 21 } else { 22 };
            ensure!(
                out[ttl_at] == f[ttl_at].wrapping_sub(1),
                "TTL {} -> {}",
                f[ttl_at],
                out[ttl_at]
            );
            for i in 12..f.len() {
                let skip = i == ttl_at || (!v6 && (i == 24 || i == 25));
                ensure!(
                    skip || out[i] == f[i],
                    "byte {i} changed: {:02x} -> {:02x}",
                    f[i],
                    out[i]
                );
            }
            if !v6 {
                let hl = ((f[14] & 0xf) as usize * 4).min(f.len() - 14);
                ensure!(
                    sums_ok(&out[14..14 + hl], 0) == sums_ok(&f[14..14 + hl], 0),
                    "IPv4 header checksum validity changed"
                );
            }
            ensure!(
                checksums_valid(out) == checksums_valid(f),
                "checksum validity changed: {:?} -> {:?}",
                checksums_valid(f),
                checksums_valid(out)
            );
            Ok(Some(mac))
        }
        Want::TooBig { mtu, quote_min } => {
            ensure!(verdict == XDP_TX, "verdict {verdict}, want XDP_TX");
            ensure!(
                out.len() > 14 && out[0..6] == f[6..12] && out[6..12] == f[0..6],
                "not back to the sender's MAC"
            );
            ensure!(out[12..14] == f[12..14], "ethertype changed");
            let (src, dst, icmp, quote_at) = if v6 {
                ensure!(out.len() >= 62, "answer too short");
                ensure!(out[14] >> 4 == 6 && out[20] == ICMP6, "not ICMPv6 in IPv6");
                ensure!(
                    be16(out, 18) as usize == out.len() - 54,
                    "payload length {} of a {}-byte frame",
                    be16(out, 18),
                    out.len()
                );
                let icmp = &out[54..];
                let sum = raw::pseudo(
                    IpAddr::from(<[u8; 16]>::try_from(&out[22..38]).unwrap()),
                    IpAddr::from(<[u8; 16]>::try_from(&out[38..54]).unwrap()),
                    ICMP6,
                    icmp.len(),
                );
                ensure!(sums_ok(icmp, sum), "ICMPv6 checksum");
                ensure!(
                    icmp[0] == 2 && icmp[1] == 0,
                    "ICMPv6 {}/{}, want packet too big",
                    icmp[0],
                    icmp[1]
                );
                let m = u32::from_be_bytes([icmp[4], icmp[5], icmp[6], icmp[7]]);
                ensure!(m == (*mtu).max(1280), "MTU {m}, want {mtu}");
                (&out[22..38], &out[38..54], icmp, 62)
            } else {
                ensure!(out.len() >= 42, "answer too short");
                ensure!(
                    out[14] == 0x45 && out[23] == ICMP,
                    "not ICMP in a plain IPv4 header"
                );
                ensure!(sums_ok(&out[14..34], 0), "IPv4 header checksum");
                ensure!(
                    be16(out, 16) as usize == out.len() - 14,
                    "total length {} of a {}-byte frame",
                    be16(out, 16),
                    out.len()
                );
                let icmp = &out[34..];
                ensure!(sums_ok(icmp, 0), "ICMP checksum");
                ensure!(
                    icmp[0] == 3 && icmp[1] == 4,
                    "ICMP {}/{}, want fragmentation needed",
                    icmp[0],
                    icmp[1]
                );
                ensure!(
                    u32::from(be16(icmp, 6)) == *mtu,
                    "MTU {}, want {mtu}",
                    be16(icmp, 6)
                );
                (&out[26..30], &out[30..34], icmp, 42)
            };
            let (fsrc, fdst) = if v6 {
                (&f[22..38], &f[38..54])
            } else {
                (&f[26..30], &f[30..34])
            };
            ensure!(src == fdst, "not from the VIP");
            ensure!(dst == fsrc, "not to the sender");
            let quote = &out[quote_at..];
            ensure!(
                icmp.len() >= 8 && quote.len() >= *quote_min && f[14..].starts_with(quote),
                "quote of {} bytes is not the packet's first {}+ bytes",
                quote.len(),
                quote_min
            );
            Ok(None)
        }
    }
}

// ----------------------------------------------------------------------
// The generator.
// ----------------------------------------------------------------------

struct Gen {
    rng: Rng,
    /// Fragments waiting for their turn (later fragments after their
    /// first, or firsts after their later ones).
    pending: Vec<Vec<u8>>,
}

/// IPv4 header fields a frame varies.
struct H4 {
    ttl: u8,
    df: bool,
    more: bool,
    offset8: u16,
    id: u16,
    options: Vec<u8>,
}

fn ip4(src: IpAddr, dst: IpAddr, proto: u8, h: &H4, payload: &[u8]) -> Vec<u8> {
    let mut opts = h.options.clone();
    while !opts.len().is_multiple_of(4) {
        opts.push(0);
    }
    let ihl = 5 + opts.len() / 4;
    let mut p = vec![0x40 | ihl as u8, 0];
    p.extend_from_slice(&((ihl * 4 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&h.id.to_be_bytes());
    let frag = ((h.df as u16) << 14) | ((h.more as u16) << 13) | h.offset8;
    p.extend_from_slice(&frag.to_be_bytes());
    p.extend_from_slice(&[h.ttl, proto, 0, 0]);
    p.extend_from_slice(&octets(src));
    p.extend_from_slice(&octets(dst));
    p.extend_from_slice(&opts);
    let c = raw::checksum(&p, 0);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

fn ip6(src: IpAddr, dst: IpAddr, first: u8, exts: &[u8], hop: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = raw::ipv6(src, dst, first, exts, payload.len());
    p[7] = hop;
    p.extend_from_slice(payload);
    p
}

/// An SCTP packet: common header (the CRC32c is not checked by the
/// datapath) and a DATA-shaped chunk.
fn sctp(sport: u16, dport: u16, vtag: u32, payload: &[u8]) -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&vtag.to_be_bytes());
    s.extend_from_slice(&[0x5c, 0x3a, 0x11, 0x07]);
    s.extend_from_slice(&[0, 3]);
    s.extend_from_slice(&((4 + payload.len()) as u16).to_be_bytes());
    s.extend_from_slice(payload);
    s
}

/// Sets an IPv4 header's checksum right (`l3`: where it starts).
fn fix_ip4_checksum(f: &mut [u8], l3: usize) {
    let hl = (f[l3] & 0xf) as usize * 4;
    if f.len() >= l3 + hl.max(20) {
        f[l3 + 10] = 0;
        f[l3 + 11] = 0;
        let c = raw::checksum(&f[l3..l3 + hl.max(20)], 0);
        f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    }
}

impl Gen {
    fn vip(&mut self, v6: bool) -> IpAddr {
        // A 40%, B 20%, M 12%, N 8%, R 6%, C 14%.
        let i = match self.rng.below(100) {
            0..40 => 0,
            40..60 => 1,
            60..72 => 2,
            72..80 => 3,
            80..86 => 4,
            _ => 5,
        };
        ip(if v6 { VIP6[i] } else { VIP4[i] })
    }

    fn dst(&mut self, v6: bool) -> IpAddr {
        if self.rng.chance(8) {
            ip(self.rng.pick(if v6 { &NOT_VIP6 } else { &NOT_VIP4 }))
        } else {
            self.vip(v6)
        }
    }

    /// Clients on both sides of the rules' source prefixes (and their
    /// edges), sometimes anywhere in 10.200.0.0/24 or fd00:200::/112.
    fn client(&mut self, v6: bool) -> IpAddr {
        const C4: [&str; 15] = [
            "10.200.0.1",
            "10.200.0.2",
            "10.200.0.63",
            "10.200.0.64",
            "10.200.0.65",
            "10.200.0.95",
            "10.200.0.96",
            "10.200.0.127",
            "10.200.0.128",
            "10.200.0.129",
            "10.200.0.200",
            "10.200.0.255",
            "10.200.1.5",
            "192.0.2.77",
            "198.51.100.1",
        ];
        const C6: [&str; 12] = [
            "fd00:200::1",
            "fd00:200::2",
            "fd00:200::ff",
            "fd00:200::100",
            "fd00:200::7fff",
            "fd00:200::8000",
            "fd00:200::8001",
            "fd00:200::ffff",
            "fd00:200::1:0",
            "fd00:201::5",
            "fd00:202::1",
            "2001:db8::1",
        ];
        if self.rng.chance(2) {
            // Sources no router forwards from, or odd ones.
            return ip(if v6 {
                self.rng
                    .pick(&["ff02::1", "fe80::1", "::1", "::", "ff05::2", "febf::9"])
            } else {
                self.rng.pick(&[
                    "224.0.0.5",
                    "127.0.0.1",
                    "0.0.0.0",
                    "255.255.255.255",
                    "169.254.1.1",
                ])
            });
        }
        if self.rng.chance(20) {
            return if v6 {
                ip(&format!("fd00:200::{:x}", self.rng.below(65536)))
            } else {
                ip(&format!("10.200.0.{}", self.rng.below(256)))
            };
        }
        ip(if v6 {
            self.rng.pick(&C6)
        } else {
            self.rng.pick(&C4)
        })
    }

    /// Ports inside, outside and on the edges of the rules' ranges.
    fn port(&mut self) -> u16 {
        const P: [u16; 30] = [
            0, 1, 52, 53, 54, 79, 80, 81, 442, 443, 444, 999, 1000, 1003, 1004, 1009, 1010, 1019,
            1020, 1039, 1040, 2000, 8999, 9000, 9050, 9100, 9101, 9999, 10000, 65535,
        ];
        if self.rng.chance(15) {
            self.rng.next() as u16
        } else {
            self.rng.pick(&P)
        }
    }

    fn ttl(&mut self) -> u8 {
        if self.rng.chance(7) {
            self.rng.pick(&[0u8, 1, 1, 2])
        } else if self.rng.chance(10) {
            self.rng.next() as u8
        } else {
            64
        }
    }

    fn payload(&mut self, big: bool) -> Vec<u8> {
        let len = if big {
            1100 + self.rng.below(460)
        } else {
            self.rng.below(60)
        };
        let b = self.rng.next() as u8;
        (0..len).map(|i| b.wrapping_add(i as u8)).collect()
    }

    fn vlans(&mut self) -> Vec<u16> {
        if self.rng.chance(4) {
            (0..1 + self.rng.below(2))
                .map(|_| 1 + self.rng.below(4000) as u16)
                .collect()
        } else {
            vec![]
        }
    }

    /// A TCP (flags of the rules' byte matches and others), UDP (some
    /// without a checksum) or SCTP (verification tags inside and outside
    /// the byte matches) header and payload.
    #[allow(clippy::too_many_arguments)]
    fn l4(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        sport: u16,
        dport: u16,
        payload: &[u8],
    ) -> Vec<u8> {
        match proto {
            TCP => {
                let flags = if self.rng.chance(15) {
                    self.rng.next() as u8
                } else {
                    self.rng
                        .pick(&[0x02u8, 0x10, 0x12, 0x18, 0x11, 0x01, 0x03, 0x04, 0x19])
                };
                raw::tcp(src, dst, sport, dport, flags, payload)
            }
            UDP => {
                let mut u = raw::udp(src, dst, sport, dport, payload);
                if self.rng.chance(15) {
                    u[6] = 0;
                    u[7] = 0;
                }
                u
            }
            _ => {
                let vtag = match self.rng.below(5) {
                    0 => 0,
                    1 => 0xdead_0000 | (self.rng.next() as u32 & 0xffff),
                    2 => 0xdead_beef,
                    3 => 0xdeae_0000,
                    _ => self.rng.next() as u32,
                };
                sctp(sport, dport, vtag, payload)
            }
        }
    }

    /// An IPv6 extension chain of `kinds` ending in `last`.
    fn exts(&mut self, kinds: &[u8], last: u8) -> Vec<u8> {
        let mut e = Vec::new();
        for (i, k) in kinds.iter().enumerate() {
            let next = *kinds.get(i + 1).unwrap_or(&last);
            e.extend(match *k {
                raw::HOPOPTS | raw::DSTOPTS => {
                    let units = if self.rng.chance(5) {
                        20 + self.rng.below(12)
                    } else {
                        1 + self.rng.below(12)
                    };
                    raw::opts_ext(next, units as usize)
                }
                // In an unfragmented packet: an atomic fragment mostly,
                // sometimes a first fragment carrying all of it.
                raw::FRAGMENT => {
                    raw::frag_ext(next, 0, self.rng.chance(20), self.rng.below(12) as u32)
                }
                _ => raw::plain_ext(next),
            });
        }
        e
    }

    /// An IP packet (`v6` by `src`) in an Ethernet frame.
    #[allow(clippy::too_many_arguments)]
    fn packet(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        ttl: u8,
        vlans: &[u16],
        chain: bool,
        l4: &[u8],
    ) -> Vec<u8> {
        if src.is_ipv6() {
            let kinds: Vec<u8> = if chain && self.rng.chance(30) {
                (0..1 + self.rng.below(5))
                    .map(|_| {
                        self.rng.pick(&[
                            raw::HOPOPTS,
                            raw::DSTOPTS,
                            raw::DSTOPTS,
                            raw::FRAGMENT,
                            raw::ROUTING,
                            raw::AH,
                        ])
                    })
                    .collect()
            } else {
                vec![]
            };
            let e = self.exts(&kinds, proto);
            let first = *kinds.first().unwrap_or(&proto);
            return raw::eth(0x86dd, vlans, &ip6(src, dst, first, &e, ttl, l4));
        }
        let h = H4 {
            ttl,
            df: self.rng.chance(50),
            more: chain && self.rng.chance(3),
            offset8: 0,
            id: self.rng.below(12) as u16,
            options: if chain && self.rng.chance(10) {
                vec![1; 1 + self.rng.below(40) as usize]
            } else {
                vec![]
            },
        };
        raw::eth(0x0800, vlans, &ip4(src, dst, proto, &h, l4))
    }

    fn l4_frame(&mut self, v6: bool, dst: IpAddr, big: bool) -> Vec<u8> {
        let client = self.client(v6);
        let proto = match self.rng.below(100) {
            0..40 => TCP,
            40..75 => UDP,
            _ => SCTP,
        };
        let (sport, dport) = (self.port(), self.port());
        let payload = self.payload(big);
        let l4 = self.l4(client, dst, proto, sport, dport, &payload);
        let (ttl, vlans) = (self.ttl(), self.vlans());
        self.packet(client, dst, proto, ttl, &vlans, true, &l4)
    }

    fn echo_frame(&mut self, v6: bool, dst: IpAddr, big: bool) -> Vec<u8> {
        let client = self.client(v6);
        let payload = self.payload(big);
        let rest = [
            self.rng.next() as u8,
            self.rng.next() as u8,
            0,
            self.rng.below(8) as u8,
        ];
        let (ttl, vlans) = (self.ttl(), self.vlans());
        if v6 {
            let t = if self.rng.chance(10) {
                self.rng.next() as u8
            } else {
                self.rng.pick(&[
                    128u8, 128, 128, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 143, 139,
                    200,
                ])
            };
            let m = raw::icmp6(client, dst, t, 0, rest, &payload);
            return self.packet(client, dst, ICMP6, ttl, &vlans, true, &m);
        }
        let t = if self.rng.chance(10) {
            self.rng.next() as u8
        } else {
            self.rng.pick(&[8u8, 8, 8, 0, 13, 14, 17, 9, 10])
        };
        let m = raw::icmp4(t, 0, rest, &payload);
        self.packet(client, dst, ICMP, ttl, &vlans, true, &m)
    }

    /// An ICMP error from a router about a reply the VIP sent to a client
    /// (quoted whole, 8 or 4 L4 bytes, or too little), sometimes quoting
    /// something else, sometimes fragmented.
    fn error_frame(&mut self, v6: bool, dst: IpAddr, big: bool) -> Vec<u8> {
        let client = self.client(v6);
        let router = self.client(v6);
        let qproto = if self.rng.chance(85) {
            self.rng.pick(&[TCP, UDP, SCTP])
        } else {
            self.rng.pick(&[if v6 { ICMP6 } else { ICMP }, 47])
        };
        let (vport, cport) = (self.port(), self.port());
        let payload = self.payload(big);
        let reply = if header_len(qproto).is_some() {
            self.l4(dst, client, qproto, vport, cport, &payload)
        } else {
            let mut m = vec![0u8, 0, 0, 0];
            m.extend_from_slice(&vport.to_be_bytes());
            m.extend_from_slice(&cport.to_be_bytes());
            m.extend_from_slice(&payload);
            m
        };
        let (mut quote, hdr) = if v6 {
            let with_ext = self.rng.chance(8);
            let e = if with_ext {
                raw::opts_ext(qproto, 1)
            } else {
                vec![]
            };
            let first = if with_ext { raw::DSTOPTS } else { qproto };
            let q = ip6(dst, client, first, &e, 64, &reply);
            let hdr = 40 + e.len();
            (q, hdr)
        } else {
            let h = H4 {
                ttl: 64,
                df: true,
                more: false,
                offset8: if self.rng.chance(5) { 100 } else { 0 },
                id: 7,
                options: if self.rng.chance(10) {
                    vec![1; 1 + self.rng.below(12) as usize]
                } else {
                    vec![]
                },
            };
            let q = ip4(dst, client, qproto, &h, &reply);
            let hdr = q.len() - reply.len();
            (q, hdr)
        };
        let keep = match self.rng.below(10) {
            0..4 => quote.len(),
            4..7 => hdr + 8,
            7 => hdr + 4,
            8 => hdr + 2,
            _ => self.rng.below(hdr as u64) as usize,
        };
        quote.truncate(keep.min(quote.len()));
        let rest = [0, 0, 0x05, 0x00];
        let (ttl, vlans) = (self.ttl(), self.vlans());
        if v6 {
            let t = self.rng.pick(&[1u8, 2, 3, 4, 1]);
            let m = raw::icmp6(router, dst, t, 0, rest, &quote);
            if self.rng.chance(5) {
                // The error in a first fragment.
                let e = raw::frag_ext(ICMP6, 0, true, self.rng.below(12) as u32);
                return raw::eth(
                    0x86dd,
                    &vlans,
                    &ip6(router, dst, raw::FRAGMENT, &e, ttl, &m),
                );
            }
            return self.packet(router, dst, ICMP6, ttl, &vlans, true, &m);
        }
        let t = self.rng.pick(&[3u8, 3, 3, 11, 12, 4, 5]);
        let m = raw::icmp4(t, if t == 3 { 4 } else { 0 }, rest, &quote);
        if self.rng.chance(5) {
            let h = H4 {
                ttl,
                df: false,
                more: true,
                offset8: 0,
                id: self.rng.below(12) as u16,
                options: vec![],
            };
            return raw::eth(0x0800, &vlans, &ip4(router, dst, ICMP, &h, &m));
        }
        self.packet(router, dst, ICMP, ttl, &vlans, true, &m)
    }

    /// A fragmented datagram: returns one of its frames, queues the rest
    /// (first before its later fragments mostly; sometimes the later ones
    /// first, or without their first). IPv6 datagrams sometimes carry a
    /// Hop-by-Hop header before the Fragment header and a Destination
    /// Options header after it (in the fragmentable part, so the Fragment
    /// header's next header is Destination Options in every fragment).
    fn fragments(&mut self, v6: bool, dst: IpAddr, big: bool) -> Vec<u8> {
        // Few sources and IDs: datagrams collide on their keys.
        let client = if v6 {
            ip(self.rng.pick(&[
                "fd00:200::1",
                "fd00:200::8001",
                "fd00:201::5",
                "fd00:200::ffff",
            ]))
        } else {
            ip(self
                .rng
                .pick(&["10.200.0.2", "10.200.0.200", "10.200.0.70", "192.0.2.77"]))
        };
        let proto = match self.rng.below(100) {
            0..30 => TCP,
            30..60 => UDP,
            60..75 => SCTP,
            75..90 => {
                if v6 {
                    ICMP6
                } else {
                    ICMP
                }
            }
            _ => 47,
        };
        let (sport, dport) = (self.port(), self.port());
        let mut payload = self.payload(false);
        payload.extend_from_slice(&[0x42; 24]);
        let body = match proto {
            TCP | UDP | SCTP => self.l4(client, dst, proto, sport, dport, &payload),
            ICMP => raw::icmp4(8, 0, [0, 9, 0, 1], &payload),
            ICMP6 => raw::icmp6(client, dst, 128, 0, [0, 9, 0, 1], &payload),
            _ => payload.clone(),
        };
        let hl = header_len(proto).unwrap_or(8);
        // First fragment's share: whole 8-byte units, usually holding the
        // L4 header, sometimes not.
        let units = if self.rng.chance(10) {
            1
        } else {
            (hl as u64).div_ceil(8) + self.rng.below(3)
        };
        let split = ((units * 8) as usize).min(body.len() / 8 * 8).max(8);
        let mut tail = body[split..].to_vec();
        if big {
            let more = self.payload(true);
            tail.extend_from_slice(&more);
        }
        let ttl = self.ttl();
        let id = self.rng.below(12);
        let (first, later) = if v6 {
            let hop = self.rng.chance(20);
            let dst_opts = self.rng.chance(25);
            let before = if hop {
                raw::opts_ext(raw::FRAGMENT, 1)
            } else {
                vec![]
            };
            let fnh = if dst_opts { raw::DSTOPTS } else { proto };
            let head = if dst_opts {
                raw::opts_ext(proto, 1)
            } else {
                vec![]
            };
            let lead = if hop { raw::HOPOPTS } else { raw::FRAGMENT };
            let mut e1 = before.clone();
            e1.extend(raw::frag_ext(fnh, 0, true, id as u32));
            let mut p1 = head.clone();
            p1.extend_from_slice(&body[..split]);
            let mut e2 = before;
            let off = ((head.len() + split) / 8) as u16;
            e2.extend(raw::frag_ext(fnh, off, self.rng.chance(15), id as u32));
            (
                raw::eth(0x86dd, &[], &ip6(client, dst, lead, &e1, ttl, &p1)),
                raw::eth(0x86dd, &[], &ip6(client, dst, lead, &e2, ttl, &tail)),
            )
        } else {
            let df = self.rng.chance(if big { 60 } else { 10 });
            let mut h = H4 {
                ttl,
                df,
                more: true,
                offset8: 0,
                id: id as u16,
                options: if self.rng.chance(10) {
                    vec![1; 1 + self.rng.below(40) as usize]
                } else {
                    vec![]
                },
            };
            let f1 = raw::eth(0x0800, &[], &ip4(client, dst, proto, &h, &body[..split]));
            h.more = self.rng.chance(15);
            h.offset8 = (split / 8) as u16;
            let f2 = raw::eth(0x0800, &[], &ip4(client, dst, proto, &h, &tail));
            (f1, f2)
        };
        if self.pending.len() > 64 {
            self.pending.clear();
        }
        match self.rng.below(100) {
            0..60 => {
                self.pending.push(later);
                first
            }
            60..75 => later,
            75..90 => {
                self.pending.push(first);
                later
            }
            _ => {
                self.pending.push(later.clone());
                self.pending.push(later);
                first
            }
        }
    }

    fn other_frame(&mut self, v6: bool, dst: IpAddr) -> Vec<u8> {
        let client = self.client(v6);
        let proto = if self.rng.chance(30) {
            self.rng.next() as u8
        } else {
            self.rng.pick(&[47u8, 50, 51, 41, 89, 43, 59, 103])
        };
        let body = self.payload(false);
        let (ttl, vlans) = (self.ttl(), self.vlans());
        self.packet(client, dst, proto, ttl, &vlans, false, &body)
    }

    /// A well-formed frame of a random shape.
    fn frame(&mut self) -> Vec<u8> {
        if !self.pending.is_empty() && self.rng.chance(30) {
            let i = self.rng.below(self.pending.len() as u64) as usize;
            return self.pending.swap_remove(i);
        }
        let v6 = self.rng.chance(50);
        let shape = self.rng.below(100);
        // Oversized packets, mostly to the VIP behind the locked MTU.
        let big = shape >= 94;
        let dst = if big && self.rng.chance(70) {
            ip(if v6 { VIP6[2] } else { VIP4[2] })
        } else {
            self.dst(v6)
        };
        match if big { self.rng.below(88) } else { shape } {
            0..40 => self.l4_frame(v6, dst, big),
            40..52 => self.echo_frame(v6, dst, big),
            52..66 => self.error_frame(v6, dst, big),
            66..84 => self.fragments(v6, dst, big),
            84..88 => self.other_frame(v6, dst),
            _ => {
                let et = self.rng.pick(&[0x0806u16, 0x88cc, 0x8100, 0x86dd, 0x0800]);
                let len = self.rng.below(60) as usize;
                let junk: Vec<u8> = (0..len).map(|_| self.rng.next() as u8).collect();
                raw::eth(et, &[], &junk)
            }
        }
    }

    /// Damages a frame: truncation, bit flips, a random header byte, a
    /// corrupted length, random L4 header bytes, an expiring TTL.
    fn mutate(&mut self, f: &mut Vec<u8>) {
        let l3 = if f.len() >= 18 && matches!(be16(f, 12), 0x8100 | 0x88a8) {
            18
        } else {
            14
        };
        let v4 = f.len() >= l3 + 20 && f[l3] >> 4 == 4;
        match self.rng.below(6) {
            0 => {
                // Down to a bare Ethernet header at least (the kernel runs
                // XDP on no less).
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
                let at = l3
                    + self.rng.pick(&[
                        0usize, 0, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9, 20, 21, 33, 40, 41, 54, 55,
                    ]);
                if at < f.len() {
                    f[at] = self.rng.next() as u8;
                }
            }
            3 => {
                // A length field that lies (often over the MTUs).
                let at = if v4 { l3 + 2 } else { l3 + 4 };
                if at + 2 <= f.len() {
                    let v: u16 = match self.rng.below(8) {
                        0 => 0,
                        1 => 20,
                        2 => (f.len() - l3) as u16 + 1,
                        3 => (f.len() - l3) as u16 - 1,
                        4 => 1501,
                        5 => 1290,
                        6 => 0xffff,
                        _ => self.rng.next() as u16,
                    };
                    f[at..at + 2].copy_from_slice(&v.to_be_bytes());
                    if v4 && self.rng.chance(50) {
                        fix_ip4_checksum(f, l3);
                    }
                }
            }
            4 => {
                let base = l3 + if v4 { 20 } else { 40 };
                for _ in 0..1 + self.rng.below(2) {
                    let at = base + self.rng.below(20) as usize;
                    if at < f.len() {
                        f[at] = self.rng.next() as u8;
                    }
                }
            }
            _ => {
                let at = if v4 { l3 + 8 } else { l3 + 7 };
                if at < f.len() {
                    f[at] = self.rng.pick(&[0u8, 1, 2]);
                    if v4 {
                        fix_ip4_checksum(f, l3);
                    }
                }
            }
        }
    }
}

// ----------------------------------------------------------------------
// The run.
// ----------------------------------------------------------------------

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

struct Disagreement {
    index: usize,
    category: String,
    want: Want,
    why: String,
    verdict: u32,
    frame: Vec<u8>,
    out: Vec<u8>,
}

fn event_counts(r: &Rig) -> Vec<u64> {
    (0..abi::cls_event::COUNT)
        .map(|i| {
            r.dataplane
                .maps()
                .cls
                .events
                .get(&i, 0)
                .unwrap()
                .iter()
                .sum()
        })
        .collect()
}

fn rule_stats(r: &Rig, name: &str) -> (u64, u64) {
    let id = r.dataplane.classifier().rule_id(name).unwrap();
    r.dataplane
        .maps()
        .cls
        .rule_stats
        .get(&id, 0)
        .unwrap()
        .iter()
        .fold((0, 0), |(p, n), s| (p + s.packets, n + s.no_target))
}

#[test]
fn classifier_agrees_with_the_model_on_generated_and_mutated_frames() {
    let (ns, ifindex, up0) = lab("clsfuzz");
    let mut r = rig("clsfuzz");
    let spec = spec();
    r.dataplane.apply_classifier(&spec, true).unwrap();
    let mut model = Model::new(&spec);
    let mut g = Gen {
        rng: Rng(0x9e37_79b9_7f4a_7c15),
        pending: Vec::new(),
    };
    let started = Instant::now();
    let mut disagreements: Vec<Disagreement> = Vec::new();
    // (category -> count): what the model flagged in the frame, else its
    // outcome.
    let mut by_category: BTreeMap<String, usize> = BTreeMap::new();
    let mut mutated = 0usize;
    ns.within(|| {
        // Per-CPU maps (the scratch, the counters) read from one CPU.
        pin_to_one_cpu();
        let mut last = event_counts(&r);
        for i in 0..FRAMES {
            let mut f = g.frame();
            if g.rng.chance(35) {
                g.mutate(&mut f);
                mutated += 1;
            }
            let mut d = model.decide(&f);
            d.notes.sort();
            d.notes.dedup();
            model.count(&d);
            let (verdict, out) = r.datapath.run_xdp_on(&f, ifindex).unwrap();
            // The events this frame moved, against the model's.
            let now = event_counts(&r);
            let mut moved: Vec<u32> = Vec::new();
            for (e, (a, b)) in now.iter().zip(&last).enumerate() {
                moved.extend(std::iter::repeat_n(e as u32, (a - b) as usize));
            }
            last = now;
            let want_events = d.events();
            let checked = check(&model, &d.want, &f, verdict, &out, up0).and_then(|mac| {
                if moved == want_events {
                    return Ok(mac);
                }
                let names = |v: &[u32]| {
                    v.iter()
                        .map(|e| abi::cls_event::NAMES[*e as usize])
                        .collect::<Vec<_>>()
                };
                let icmp = [abi::cls_event::ECHO, abi::cls_event::ICMP_ERROR];
                if !matches!(d.want, Want::Forward { .. })
                    && moved.iter().any(|e| icmp.contains(e))
                    && !want_events.iter().any(|e| icmp.contains(e))
                {
                    d.notes.push("icmp-counted-as-sent-but-not-forwarded");
                }
                Err(format!(
                    "events {:?}, want {:?}",
                    names(&moved),
                    names(&want_events)
                ))
            });
            match checked {
                Ok(Some(mac)) => {
                    if let Some(e) = d.pin_key.as_ref().and_then(|k| model.frags.get_mut(k)) {
                        e.pin = Some(mac);
                    }
                }
                Ok(None) => {}
                Err(why) => {
                    let cat = if d.notes.is_empty() {
                        format!("model {:?}", d.want)
                            .split(['{', '('])
                            .next()
                            .unwrap()
                            .trim()
                            .to_string()
                    } else {
                        d.notes.join("+")
                    };
                    *by_category.entry(cat.clone()).or_default() += 1;
                    disagreements.push(Disagreement {
                        index: i,
                        category: cat,
                        want: d.want.clone(),
                        why,
                        verdict,
                        frame: f.clone(),
                        out,
                    });
                }
            }
        }
    })
    .unwrap();
    let elapsed = started.elapsed();

    let events = event_counts(&r);
    let t = &model.tally;
    // A category without a note is a disagreement the model cannot
    // explain: either side may be wrong.
    let unexplained = disagreements
        .iter()
        .filter(|d| d.category.starts_with("model "))
        .count();
    eprintln!(
        "{FRAMES} frames ({mutated} mutated) in {:.1} s, {} disagreements ({unexplained} in no flagged category)",
        elapsed.as_secs_f64(),
        disagreements.len()
    );
    eprintln!(
        "outcomes (model): {:?}; {} fragment keys",
        t.outcomes, model.frag_keys_made
    );
    eprintln!("shapes (model): {:?}", t.shapes);
    let mut counters = String::new();
    for (i, name) in abi::cls_event::NAMES.iter().enumerate() {
        let _ = writeln!(
            counters,
            "  {name:<20} program {:>7}  model {:>7}{}",
            events[i],
            t.events[i],
            if events[i] == t.events[i] {
                ""
            } else {
                "  <- differs"
            }
        );
    }
    eprintln!("cls_event counters:\n{counters}");
    let mut rules = String::new();
    let mut rules_differ = false;
    for (i, rule) in model.rules.iter().enumerate() {
        let got = rule_stats(&r, &rule.name);
        let want = (t.rule_packets[i], t.rule_no_target[i]);
        rules_differ |= got != want;
        let _ = writeln!(
            rules,
            "  {:<10} packets program {:>6} model {:>6}, no_target program {:>5} model {:>5}{}",
            rule.name,
            got.0,
            want.0,
            got.1,
            want.1,
            if got == want { "" } else { "  <- differs" }
        );
    }
    eprintln!("per-rule counters:\n{rules}");

    // Enough of each outcome and shape to mean something, and no eviction
    // from the fragment table the model does not know about.
    assert!(
        model.frag_keys_made < 12_000,
        "{} fragment keys: the LRU table (16384) may have evicted",
        model.frag_keys_made
    );
    for e in 0..abi::cls_event::COUNT {
        if e != abi::cls_event::NO_VIP {
            assert!(
                t.events[e as usize] >= 50,
                "too few {}: {:?}",
                abi::cls_event::NAMES[e as usize],
                t.events
            );
        }
    }
    for o in ["forward", "pass untouched", "too big answered"] {
        assert!(
            t.outcomes.get(o).copied().unwrap_or(0) >= 500,
            "too few {o}: {:?}",
            t.outcomes
        );
    }

    let mut report = String::new();
    if !disagreements.is_empty() {
        let _ = writeln!(
            report,
            "{} of {FRAMES} frames disagree with the model ({unexplained} in no flagged category). By category:",
            disagreements.len()
        );
        for (cat, n) in &by_category {
            let _ = writeln!(report, "\n[{cat}] {n} frames");
            for note in cat.split('+') {
                if let Some((_, hint)) = NOTES.iter().find(|(k, _)| *k == note) {
                    let _ = writeln!(report, "  expected (a known shape): {hint}");
                }
            }
            for d in disagreements.iter().filter(|d| d.category == *cat).take(3) {
                let _ = writeln!(
                    report,
                    "  frame #{}: model {:?}; program verdict {}: {}\n    in:  {}\n    out: {}",
                    d.index,
                    d.want,
                    d.verdict,
                    d.why,
                    hex(&d.frame),
                    hex(&d.out[..d.out.len().min(128)])
                );
            }
        }
    }
    if events != t.events {
        let _ = writeln!(
            report,
            "\ncls_event counters differ:\n{counters}  (the frames above moved them; of those, {} echoes and \
             {} errors had a target picked but were not forwarded, which the model does not count as \
             echo / icmp_error)",
            t.icmp_picked_not_forwarded[0], t.icmp_picked_not_forwarded[1]
        );
    }
    if rules_differ {
        let _ = writeln!(report, "\nper-rule counters differ:\n{rules}");
    }
    assert!(report.is_empty(), "classifier fuzz: {report}");
}
