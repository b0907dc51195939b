//! Shared harness of the packet tests: a datapath loaded into the real
//! kernel with its own pin directory, frame builders, and an independent
//! parser (etherparse) that checks every checksum of a frame the programs
//! emit.

#![allow(dead_code)]

pub mod raw;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use etherparse::{
    IpHeaders, Ipv4Header, NetSlice, PacketBuilder, SlicedPacket, TransportSlice, VlanId,
};
use rivora_dataplane::{
    AdoptReport, BackendKey, BackendSpec, Datapath, Dataplane, LoadOptions, LoadOutcome, Mode,
    VipKey, VipSpec, ensure_bpffs, proto, remove_pins,
};

pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;
pub const TCX_NEXT: i32 = -1;

pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xc1];
pub const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x1b];

/// A datapath loaded for one test, with its pins removed on drop (unless
/// `keep_pins`, which simulates a daemon that died and left them).
pub struct Rig {
    pub datapath: Datapath,
    pub dataplane: Dataplane,
    pub pin_dir: PathBuf,
    pub keep_pins: bool,
}

impl Drop for Rig {
    fn drop(&mut self) {
        if !self.keep_pins {
            let _ = remove_pins(&self.pin_dir);
        }
    }
}

/// A fresh, unique pin directory path for `test`.
pub fn pin_dir(test: &str) -> PathBuf {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "packet tests load BPF programs into the kernel and must run as root"
    );
    ensure_bpffs(std::path::Path::new("/sys/fs/bpf")).expect("bpffs");
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = PathBuf::from(format!(
        "/sys/fs/bpf/rivora-test-{test}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    remove_at_exit(&dir);
    dir
}

/// Every pin directory this binary handed out, removed (if still there) when it exits: a test
/// that fails while no [`Rig`] owns its pins (between a `keep_pins` drop and the next load, say)
/// must not leave them in bpffs.
static HANDED_OUT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

fn remove_at_exit(dir: &std::path::Path) {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        extern "C" fn remove_all() {
            let dirs = HANDED_OUT.lock().map(|d| d.clone()).unwrap_or_default();
            for d in dirs.iter().filter(|d| d.exists()) {
                let _ = remove_pins(d);
            }
        }
        // SAFETY: registering a plain `extern "C" fn()` with atexit(3).
        unsafe { libc::atexit(remove_all) };
    });
    HANDED_OUT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(dir.to_path_buf());
}

/// Loads the programs over `pin_dir` and adopts what is pinned there.
pub fn rig_at(pin_dir: &std::path::Path) -> (Rig, LoadOutcome, AdoptReport) {
    rig_at_with_table(pin_dir, rivora_abi::MAGLEV_TABLE_DEFAULT)
}

/// [`rig_at`] over pins whose Maglev table has `size` slots.
pub fn rig_at_with_table(pin_dir: &std::path::Path, size: u32) -> (Rig, LoadOutcome, AdoptReport) {
    pin_to_cpu0();
    let (datapath, maps, outcome) = Datapath::load(&LoadOptions {
        pin_dir: pin_dir.to_path_buf(),
        maglev_table_size: size,
        flow_table_size: rivora_abi::MAX_FLOWS,
        reset_incompatible: false,
        object_dir: None,
    })
    .expect("load datapath");
    let (dataplane, report) = Dataplane::adopt(maps).expect("adopt");
    (
        Rig {
            datapath,
            dataplane,
            pin_dir: pin_dir.to_path_buf(),
            keep_pins: false,
        },
        outcome,
        report,
    )
}

/// Loads the real programs into a fresh pin directory. Panics (fails the
/// test) without root: packet tests must never be skipped silently.
///
/// Every rig pins the calling thread to CPU 0: BPF_PROG_TEST_RUN runs the program on the
/// caller's CPU, and per-CPU state (a UDP flow's "seen before" tag, the new-flow guard's
/// window) must see all of a test's packets on one CPU, wherever the scheduler would move the
/// thread. Threads a test starts itself (`Netns::within`) pin themselves.
pub fn rig(test: &str) -> Rig {
    pin_to_cpu0();
    let dir = pin_dir(test);
    let (datapath, maps, outcome) = Datapath::load(&LoadOptions {
        pin_dir: dir.clone(),
        maglev_table_size: rivora_abi::MAGLEV_TABLE_DEFAULT,
        flow_table_size: rivora_abi::MAX_FLOWS,
        reset_incompatible: false,
        object_dir: None,
    })
    .expect("load datapath");
    assert_eq!(outcome, LoadOutcome::Fresh);
    Rig {
        datapath,
        dataplane: Dataplane::new(maps),
        pin_dir: dir,
        keep_pins: false,
    }
}

/// [`rig`] with a Maglev table of `size` slots instead of the default.
pub fn rig_with_table(test: &str, size: u32) -> Rig {
    pin_to_cpu0();
    let dir = pin_dir(test);
    let (datapath, maps, _) = Datapath::load(&LoadOptions {
        pin_dir: dir.clone(),
        maglev_table_size: size,
        flow_table_size: rivora_abi::MAX_FLOWS,
        reset_incompatible: false,
        object_dir: None,
    })
    .expect("load datapath");
    Rig {
        datapath,
        dataplane: Dataplane::new(maps),
        pin_dir: dir,
        keep_pins: false,
    }
}

pub fn backend(addr: &str, port: u16, weight: u32) -> BackendSpec {
    let mut b = BackendSpec::new(addr.parse().unwrap(), port);
    b.weight = weight;
    b
}

pub fn vip(name: &str, addr: &str, port: u16, proto: u8, backends: Vec<BackendSpec>) -> VipSpec {
    VipSpec {
        name: name.into(),
        key: VipKey::exact(addr.parse().unwrap(), port, proto),
        mode: Mode::Nat,
        backends,
        reject_weight: 0,
        affinity_client_ip: false,
        syn_rate_limit: None,
        nat_fib: false,
        source_ranges: None,
        stateless_reverse: true,
        draining: Default::default(),
        snat: Default::default(),
        affinity_timeout: None,
    }
}

/// A NAT VIP on the ports `first..=last` of `addr` (0..=65535: `any`).
pub fn range_vip(
    name: &str,
    addr: &str,
    first: u16,
    last: u16,
    proto: u8,
    backends: Vec<BackendSpec>,
) -> VipSpec {
    VipSpec::new(
        name,
        VipKey::range(addr.parse().unwrap(), first, last, proto),
        backends,
    )
}

/// VLAN tags to put in front of the IP header.
#[derive(Clone, Copy, Debug)]
pub enum Vlans {
    None,
    One(u16),
    Two(u16, u16),
}

/// What a test frame carries.
#[derive(Clone, Debug)]
pub struct FrameSpec {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub vlans: Vlans,
    pub ipv4_options: bool,
    pub payload: Vec<u8>,
    /// TCP: a SYN (opens a connection: balanced, creates no affinity
    /// entry) instead of a segment without flags (creates one when none
    /// exists).
    pub syn: bool,
}

impl FrameSpec {
    pub fn new(src: &str, sport: u16, dst: &str, dport: u16, proto: u8) -> Self {
        Self {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            sport,
            dport,
            proto,
            vlans: Vlans::None,
            ipv4_options: false,
            payload: b"rivora test payload".to_vec(),
            syn: false,
        }
    }

    /// The same frame as a TCP SYN.
    pub fn syn(mut self) -> Self {
        self.syn = true;
        self
    }

    pub fn vlans(mut self, v: Vlans) -> Self {
        self.vlans = v;
        self
    }

    pub fn with_options(mut self) -> Self {
        self.ipv4_options = true;
        self
    }

    /// A well-formed Ethernet frame with correct checksums.
    pub fn build(&self) -> Vec<u8> {
        let eth = PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC);
        let ip = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut h = Ipv4Header::new(
                    0,
                    64,
                    etherparse::IpNumber(self.proto),
                    s.octets(),
                    d.octets(),
                )
                .unwrap();
                if self.ipv4_options {
                    // Two NOPs, a record-route-shaped option, end of list.
                    h.options = [1u8, 1, 7, 7, 4, 0, 0, 0, 0, 0, 0, 0][..]
                        .try_into()
                        .unwrap();
                }
                IpHeaders::Ipv4(h, Default::default())
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => IpHeaders::Ipv6(
                etherparse::Ipv6Header {
                    traffic_class: 0,
                    flow_label: Default::default(),
                    payload_length: 0,
                    next_header: etherparse::IpNumber(self.proto),
                    hop_limit: 64,
                    source: s.octets(),
                    destination: d.octets(),
                },
                Default::default(),
            ),
            _ => panic!("mixed address families"),
        };
        let step = match self.vlans {
            Vlans::None => eth.ip(ip),
            Vlans::One(id) => eth.single_vlan(VlanId::try_new(id).unwrap()).ip(ip),
            Vlans::Two(o, i) => eth
                .double_vlan(VlanId::try_new(o).unwrap(), VlanId::try_new(i).unwrap())
                .ip(ip),
        };
        let mut out = Vec::new();
        match self.proto {
            proto::TCP if self.syn => step
                .tcp(self.sport, self.dport, 1000, 64240)
                .syn()
                .write(&mut out, &self.payload)
                .unwrap(),
            proto::TCP => step
                .tcp(self.sport, self.dport, 1000, 64240)
                .write(&mut out, &self.payload)
                .unwrap(),
            proto::UDP => step
                .udp(self.sport, self.dport)
                .write(&mut out, &self.payload)
                .unwrap(),
            p => panic!("unsupported proto {p}"),
        }
        out
    }
}

/// A frame as the independent parser reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub vlan_ids: Vec<u16>,
    pub payload: Vec<u8>,
    pub udp_checksum: Option<u16>,
}

/// Parses a frame with etherparse and asserts that the IPv4 header checksum
/// and the TCP/UDP checksum are correct.
pub fn parse_checked(frame: &[u8]) -> Parsed {
    let p = SlicedPacket::from_ethernet(frame).expect("frame parses");
    let mut vlan_ids = Vec::new();
    for v in p.link_exts.iter() {
        if let etherparse::LinkExtSlice::Vlan(v) = v {
            vlan_ids.push(v.vlan_identifier().value());
        }
    }
    let net = p.net.as_ref().expect("has IP");
    let (src, dst, proto): (IpAddr, IpAddr, u8) = match net {
        NetSlice::Ipv4(ip) => {
            let h = ip.header().to_header();
            assert_eq!(
                h.header_checksum,
                h.calc_header_checksum(),
                "IPv4 header checksum"
            );
            (
                Ipv4Addr::from(h.source).into(),
                Ipv4Addr::from(h.destination).into(),
                h.protocol.0,
            )
        }
        NetSlice::Ipv6(ip) => {
            let h = ip.header().to_header();
            (
                Ipv6Addr::from(h.source).into(),
                Ipv6Addr::from(h.destination).into(),
                h.next_header.0,
            )
        }
        _ => panic!("unexpected net slice"),
    };
    let transport = p.transport.as_ref().expect("has L4");
    let (sport, dport, payload, udp_checksum) = match transport {
        TransportSlice::Tcp(t) => {
            let h = t.to_header();
            let want = match net {
                NetSlice::Ipv4(ip) => h
                    .calc_checksum_ipv4(&ip.header().to_header(), t.payload())
                    .unwrap(),
                NetSlice::Ipv6(ip) => h
                    .calc_checksum_ipv6(&ip.header().to_header(), t.payload())
                    .unwrap(),
                _ => unreachable!(),
            };
            assert_eq!(h.checksum, want, "TCP checksum");
            (
                h.source_port,
                h.destination_port,
                t.payload().to_vec(),
                None,
            )
        }
        TransportSlice::Udp(u) => {
            let h = u.to_header();
            if h.checksum != 0 || matches!(net, NetSlice::Ipv6(_)) {
                let want = match net {
                    NetSlice::Ipv4(ip) => h
                        .calc_checksum_ipv4(&ip.header().to_header(), u.payload())
                        .unwrap(),
                    NetSlice::Ipv6(ip) => h
                        .calc_checksum_ipv6(&ip.header().to_header(), u.payload())
                        .unwrap(),
                    _ => unreachable!(),
                };
                assert_eq!(h.checksum, want, "UDP checksum");
            }
            (
                h.source_port,
                h.destination_port,
                u.payload().to_vec(),
                Some(h.checksum),
            )
        }
        _ => panic!("unexpected transport"),
    };
    Parsed {
        src,
        dst,
        sport,
        dport,
        proto,
        vlan_ids,
        payload,
        udp_checksum,
    }
}

/// Keeps the calling thread on CPU 0. The L3 next-hop cache is per CPU and
/// BPF_PROG_TEST_RUN runs on the calling CPU: a test that expects a cache
/// hit must not migrate between its packets.
pub fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t with one bit set, for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "pinning the test thread to CPU 0"
        );
    }
}

/// Pins the calling thread to the CPU it runs on, so that every
/// BPF_PROG_TEST_RUN of a test meets the same per-CPU maps (the UDP seen
/// filter, the new-flow guard's window).
pub fn pin_to_one_cpu() {
    // SAFETY: plain libc calls on a zeroed cpu_set_t of our own.
    unsafe {
        let cpu = libc::sched_getcpu();
        assert!(cpu >= 0, "sched_getcpu");
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "sched_setaffinity"
        );
    }
}

/// Sends one TCP segment (`flags`) or UDP datagram (`flags` ignored) from
/// `client:sport` to `vip:vport` through xdp_ingress and returns the backend
/// it was NATed to (checked: XDP_PASS, valid checksums, source unchanged).
pub fn send_flow(
    r: &mut Rig,
    client: IpAddr,
    sport: u16,
    vip: IpAddr,
    vport: u16,
    l4: u8,
    flags: u8,
) -> BackendKey {
    let seg = if l4 == raw::TCP {
        raw::tcp(client, vip, sport, vport, flags, b"rivora packet test")
    } else {
        raw::udp(client, vip, sport, vport, b"rivora packet test")
    };
    let (verdict, out) = r
        .datapath
        .run_xdp(&raw::frame(client, vip, l4, &[], &seg))
        .unwrap();
    assert_eq!(
        verdict, XDP_PASS,
        "{client}:{sport} -> {vip}:{vport} flags {flags:#x}"
    );
    let p = parse_checked(&out);
    assert_eq!((p.src, p.sport, p.proto), (client, sport, l4));
    BackendKey {
        addr: p.dst,
        port: p.dport,
    }
}

/// The keys of `connection_affinity_map` (read with the writer's handle,
/// while nothing else changes the table).
pub fn affinity_keys4(r: &Rig) -> Vec<rivora_abi::Flow4> {
    r.dataplane
        .maps()
        .affinity
        .keys()
        .map(|k| k.unwrap())
        .collect()
}
