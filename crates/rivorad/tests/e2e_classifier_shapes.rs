//! The classifier's two special traffic shapes end to end (the issue's
//! acceptance points 4 and 6), with the real rivorad on the lab's lb, its
//! static `classifier:` section, and targets that own the VIPs.
//!
//! **SCTP multihoming** (`sctp_multihomed_association_stays_on_one_target`):
//! one SCTP association between a client with two addresses (10.200.0.2,
//! 10.200.0.3) and two VIPs, Meridio-2's SCTP e2e rules (priority 30
//! `sctp[4:4]=0`, the INIT with verification tag 0, and a priority-20 SCTP
//! rule, both to one group of three targets, `sctpHash` left at its default
//! `ports`), 300 messages a second for 30 s, the primary path switched
//! between the VIPs every 5 s while heartbeats probe the idle path (interval
//! set to 200 ms, to which usrsctp adds the RTO, 1 s here). Proves: every packet of the association, on both paths, reached the
//! same single target (nft counters on every target, per address pair); no
//! packet was lost (the SCTP packets the client sent equal the packets that
//! one target received; no DATA was retransmitted, no T3 timeout; every
//! message arrived in order and was echoed); the INIT went through the
//! byte-match rule and every other packet through the SCTP rule (rivorad's
//! per-rule counters against the client's own count of vtag-0 packets).
//! The test does tell: with `sctpHash: five-tuple` the two paths went to two
//! targets for two client ports out of three tried, the second target
//! answered with ABORT and the test failed (checked by hand).
//!
//! This kernel has no SCTP (`CONFIG_IP_SCTP` unset, no module support), so
//! lksctp-tools, `socat`/`ncat --sctp` and kernel SCTP sockets cannot work
//! here. Both ends run usrsctp (Debian `libusrsctp2`, loaded with dlopen): the
//! FreeBSD SCTP stack in user space, over raw IP sockets, with real
//! multihoming (bindx, connectx, per-path heartbeats, SCTP_PRIMARY_ADDR). Two
//! deviations, both outside the lb: usrsctp does not answer an INIT to an
//! address on `lo` (checked: the same setup answers once the address is on
//! `eth0`), so the targets own the VIPs on their `eth0` as /32 (Meridio-2's
//! targets put them on their secondary interface, too); and usrsctp has no
//! routing table, so it sends every packet of an association from one bound
//! address: an nft rule in the client namespace gives each path the source
//! the kernel's SCTP would pick with routes `VIP_A src C1`, `VIP_B src C2`
//! (SCTP's CRC32c covers no IP address, so nothing else changes).
//!
//! **Low MTU** (`low_mtu_v4_…`, `low_mtu_v6_…`): the target network (the
//! lb's bridge and ports, the targets' `eth0`) has MTU 1200 (IPv4) or 1280
//! (IPv6's minimum). Proves: a 1400-byte ping with DF to a VIP is answered
//! with ICMP fragmentation-needed (3/4, next-hop MTU 1200) or ICMPv6
//! packet-too-big (MTU 1280) whose source is the VIP, and which quotes the
//! client's packet (captured with tcpdump in the client namespace, parsed
//! here with etherparse and the RFC 1071 checksum); a ping of exactly the
//! MTU gets its replies; and a 16 MiB TCP upload to a VIP completes through
//! path MTU discovery: the targets advertise MSS 1460 / 1440 (route
//! `advmss`), so the client's first segments are 1500 bytes, are answered
//! from the VIP, and the client's socket ends with path MTU 1200 / 1280.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use rivora_lab::Netns;
use rivora_lab::topology::{CLIENT_V4, CLIENT_V6, backend_v4, backend_v6};

// ---------------------------------------------------------------------------
// Helper processes and captures shared by both tests
// ---------------------------------------------------------------------------

/// A process the test started in a namespace, its stdout read line by line
/// on a thread; killed and reaped on drop if still running.
struct Proc {
    what: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Proc {
    fn start(ns: &Netns, what: &str, cmd: &mut Command) -> Proc {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = ns
            .spawn(cmd)
            .unwrap_or_else(|e| panic!("{what}: cannot start: {e:#}"));
        let stdin = child.stdin.take();
        let out = child.stdout.take().expect("piped stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            what: what.to_string(),
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (at most `limit`) for a line with `prefix`; returns it from there.
    fn wait_line(&mut self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                // libtest may print "test NAME ... " before a helper's line.
                Ok(l) if l.contains(prefix) => return l[l.find(prefix).unwrap()..].to_string(),
                Ok(l) => self.seen.push(l),
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: no `{prefix}` line within {limit:?}; state {:?}; last output: {:?}",
                    self.what,
                    self.child.try_wait(),
                    self.seen.iter().rev().take(10).collect::<Vec<_>>()
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "{}: exited ({:?}) without a `{prefix}` line; output: {:?}",
                    self.what,
                    self.child.wait(),
                    self.seen
                ),
            }
        }
    }

    /// Closes its stdin (the helpers' signal to report and exit).
    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits (at most `limit`) for it to exit; kills it after that.
    fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("{}: still running after {limit:?}, killed", self.what);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `key=value key=value` after the line's first word.
fn fields(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .skip(1)
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn num(f: &BTreeMap<String, String>, key: &str) -> u64 {
    f.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number `{key}` in {f:?}"))
}

/// nft counters of `table ip rvt`, chain `chain`, by rule comment.
fn nft_counters(ns: &Netns, chain: &str) -> BTreeMap<String, u64> {
    let out = ns
        .run(&["nft", "list", "chain", "ip", "rvt", chain])
        .expect("nft list");
    out.lines()
        .filter_map(|l| {
            let name = l
                .split("comment \"")
                .nth(1)?
                .trim_end()
                .trim_end_matches('"');
            let packets = l.split("packets ").nth(1)?.split_whitespace().next()?;
            Some((name.to_string(), packets.parse().ok()?))
        })
        .collect()
}

fn nft_load(ns: &Netns, dir: &Path, name: &str, text: &str) {
    let file = dir.join(format!("{name}.nft"));
    std::fs::write(&file, text).unwrap();
    ns.run(&["nft", "-f", file.to_str().unwrap()])
        .unwrap_or_else(|e| panic!("nft in {}: {e:#}\n{text}", ns.name()));
}

fn classifier_status(lab: &Lab) -> rivora_api::ClassifierStatus {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(lab.client().classifier())
        .expect("GET /v1/classifier")
}

// ---------------------------------------------------------------------------
// Acceptance point 4: SCTP multihoming
// ---------------------------------------------------------------------------

const SCTP_VIP_A: Ipv4Addr = Ipv4Addr::new(10, 200, 100, 31);
const SCTP_VIP_B: Ipv4Addr = Ipv4Addr::new(10, 200, 100, 32);
/// The client's second address, on the same link as its first.
const CLIENT2_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 3);
const SCTP_PORT: u16 = 7000;
const CLIENT_SCTP_PORT: u16 = 36412;
const SCTP_SECS: u64 = 30;
const SCTP_RATE: u64 = 300;
const SCTP_SWITCH_SECS: u64 = 5;
const PEER_ENV: &str = "RIVORA_SCTP_PEER";

/// usrsctp (Debian `libusrsctp2`), loaded at run time so that the test
/// binary links without it and a machine without it gets a clear message.
/// Constants and layouts are usrsctp.h's (0.9.5).
mod usrsctp {
    use std::ffi::{c_char, c_int, c_uint, c_void};
    use std::net::Ipv4Addr;
    use std::sync::OnceLock;

    pub const SONAME: &str = "libusrsctp.so.2";
    pub const IPPROTO_SCTP: c_int = 132;
    pub const SCTP_NODELAY: c_int = 0x04;
    pub const SCTP_PRIMARY_ADDR: c_int = 0x07;
    pub const SCTP_PEER_ADDR_PARAMS: c_int = 0x0a;
    pub const SCTP_GET_PEER_ADDR_INFO: c_int = 0x101;
    pub const SCTP_BINDX_ADD_ADDR: c_int = 0x8001;
    pub const SPP_HB_ENABLE: u32 = 0x01;
    pub const MSG_NOTIFICATION: c_int = 0x2000;
    /// `struct sctp_paddrparams`: 152 bytes; spp_address at 0 (a
    /// sockaddr_storage), spp_hbinterval at 132, spp_flags at 140.
    pub const PADDRPARAMS_LEN: usize = 152;
    /// `struct sctp_setprim`: ssp_addr at 0, ssp_assoc_id at 128.
    pub const SETPRIM_LEN: usize = 136;
    /// `struct sctp_paddrinfo`: spinfo_address at 0, then assoc_id,
    /// state (i32) at 132, cwnd 136, srtt 140, rto 144, mtu 148.
    pub const PADDRINFO_LEN: usize = 152;
    /// `struct sctpstat`: 166 u32 words; indices are offsetof / 4.
    pub const STAT_WORDS: usize = 166;
    pub const ST_ABORTED: usize = 7;
    pub const ST_OOTB: usize = 9;
    pub const ST_CHECKSUM_ERRORS: usize = 10;
    pub const ST_RECV_DATA: usize = 25;
    pub const ST_RECV_DUP_DATA: usize = 26;
    pub const ST_RECV_HB: usize = 27;
    pub const ST_RECV_HB_ACK: usize = 28;
    pub const ST_SEND_DATA: usize = 42;
    pub const ST_SEND_RETRANS_DATA: usize = 43;
    pub const ST_SEND_FAST_RETRANS: usize = 44;
    pub const ST_SEND_HB: usize = 46;
    pub const ST_SEND_ERRORS: usize = 49;
    pub const ST_TIMO_DATA: usize = 68;

    pub type Sock = *mut c_void;
    type Sa = *mut libc::sockaddr;

    pub struct Lib {
        pub init: unsafe extern "C" fn(u16, *const c_void, *const c_void),
        pub socket: unsafe extern "C" fn(
            c_int,
            c_int,
            c_int,
            *const c_void,
            *const c_void,
            u32,
            *mut c_void,
        ) -> Sock,
        pub setsockopt: unsafe extern "C" fn(Sock, c_int, c_int, *const c_void, u32) -> c_int,
        pub getsockopt: unsafe extern "C" fn(Sock, c_int, c_int, *mut c_void, *mut u32) -> c_int,
        pub bindx: unsafe extern "C" fn(Sock, Sa, c_int, c_int) -> c_int,
        pub connectx: unsafe extern "C" fn(Sock, *const libc::sockaddr, c_int, *mut u32) -> c_int,
        pub listen: unsafe extern "C" fn(Sock, c_int) -> c_int,
        pub accept: unsafe extern "C" fn(Sock, Sa, *mut u32) -> Sock,
        pub sendv: unsafe extern "C" fn(
            Sock,
            *const c_void,
            usize,
            Sa,
            c_int,
            *mut c_void,
            u32,
            c_uint,
            c_int,
        ) -> isize,
        pub recvv: unsafe extern "C" fn(
            Sock,
            *mut c_void,
            usize,
            Sa,
            *mut u32,
            *mut c_void,
            *mut u32,
            *mut c_uint,
            *mut c_int,
        ) -> isize,
        pub shutdown: unsafe extern "C" fn(Sock, c_int) -> c_int,
        pub close: unsafe extern "C" fn(Sock),
        pub get_stat: unsafe extern "C" fn(*mut u32),
        pub getpaddrs: unsafe extern "C" fn(Sock, u32, *mut Sa) -> c_int,
        pub freepaddrs: unsafe extern "C" fn(Sa),
    }

    static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();

    /// The library, loaded once.
    pub fn lib() -> Result<&'static Lib, String> {
        LIB.get_or_init(load).as_ref().map_err(Clone::clone)
    }

    fn load() -> Result<Lib, String> {
        // SAFETY: dlopen/dlsym with NUL-terminated names; every symbol is
        // converted to the function type usrsctp.h declares for it.
        unsafe {
            let h = libc::dlopen(c"libusrsctp.so.2".as_ptr(), libc::RTLD_NOW);
            if h.is_null() {
                let e = libc::dlerror();
                let why = if e.is_null() {
                    String::new()
                } else {
                    std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
                };
                return Err(format!("dlopen {SONAME}: {why}"));
            }
            unsafe fn sym<T: Copy>(h: *mut c_void, name: &str) -> Result<T, String> {
                assert_eq!(size_of::<T>(), size_of::<*mut c_void>());
                let c = std::ffi::CString::new(name).unwrap();
                // SAFETY: the caller names a symbol of type T.
                let p = unsafe { libc::dlsym(h, c.as_ptr() as *const c_char) };
                if p.is_null() {
                    return Err(format!("{SONAME}: no symbol {name}"));
                }
                // SAFETY: a function pointer and a data pointer have the
                // same size and representation on Linux.
                Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
            }
            Ok(Lib {
                init: sym(h, "usrsctp_init")?,
                socket: sym(h, "usrsctp_socket")?,
                setsockopt: sym(h, "usrsctp_setsockopt")?,
                getsockopt: sym(h, "usrsctp_getsockopt")?,
                bindx: sym(h, "usrsctp_bindx")?,
                connectx: sym(h, "usrsctp_connectx")?,
                listen: sym(h, "usrsctp_listen")?,
                accept: sym(h, "usrsctp_accept")?,
                sendv: sym(h, "usrsctp_sendv")?,
                recvv: sym(h, "usrsctp_recvv")?,
                shutdown: sym(h, "usrsctp_shutdown")?,
                close: sym(h, "usrsctp_close")?,
                get_stat: sym(h, "usrsctp_get_stat")?,
                getpaddrs: sym(h, "usrsctp_getpaddrs")?,
                freepaddrs: sym(h, "usrsctp_freepaddrs")?,
            })
        }
    }

    pub fn sin(addr: Ipv4Addr, port: u16) -> libc::sockaddr_in {
        libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(addr).to_be(),
            },
            sin_zero: [0; 8],
        }
    }

    /// `addr:port` as the first bytes of a sockaddr_storage field.
    pub fn put_sin(buf: &mut [u8], addr: Ipv4Addr, port: u16) {
        let s = sin(addr, port);
        // SAFETY: sockaddr_in is plain data of 16 bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(&s as *const _ as *const u8, size_of::<libc::sockaddr_in>())
        };
        buf[..bytes.len()].copy_from_slice(bytes);
    }

    /// A usrsctp socket pointer shared by the sender and receiver threads
    /// (usrsctp locks its sockets as the kernel does).
    #[derive(Clone, Copy)]
    pub struct Shared(pub Sock);
    // SAFETY: usrsctp sockets may be used from several threads.
    unsafe impl Send for Shared {}
    unsafe impl Sync for Shared {}

    /// The global statistics (`usrsctp_get_stat`).
    pub fn stats(lib: &Lib) -> Vec<u32> {
        let mut v = vec![0u32; STAT_WORDS];
        // SAFETY: the buffer has sizeof(struct sctpstat) bytes.
        unsafe { (lib.get_stat)(v.as_mut_ptr()) };
        v
    }

    /// The peer's addresses of the association on a one-to-one socket.
    pub fn peer_addrs(lib: &Lib, so: Sock) -> Vec<String> {
        let mut list: Sa = std::ptr::null_mut();
        // SAFETY: usrsctp fills `list` with `n` packed sockaddrs.
        let n = unsafe { (lib.getpaddrs)(so, 0, &mut list) };
        let mut out = Vec::new();
        let mut p = list as *const u8;
        for _ in 0..n.max(0) {
            // SAFETY: each entry starts with its family; sizes by family.
            unsafe {
                let fam = (*(p as *const libc::sockaddr)).sa_family as c_int;
                if fam == libc::AF_INET {
                    let s = &*(p as *const libc::sockaddr_in);
                    out.push(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)).to_string());
                    p = p.add(size_of::<libc::sockaddr_in>());
                } else if fam == libc::AF_INET6 {
                    out.push("v6".into());
                    p = p.add(size_of::<libc::sockaddr_in6>());
                } else {
                    break;
                }
            }
        }
        if !list.is_null() {
            // SAFETY: returned by getpaddrs.
            unsafe { (lib.freepaddrs)(list) };
        }
        out
    }
}

/// Not a test: the SCTP client or server process that
/// `sctp_multihomed_association_stays_on_one_target` starts in a namespace
/// (this binary, run with `--exact sctp_peer --ignored` and its role in
/// `RIVORA_SCTP_PEER`). Does nothing without that variable.
#[test]
#[ignore = "helper process of sctp_multihomed_association_stays_on_one_target"]
fn sctp_peer() {
    let Ok(role) = std::env::var(PEER_ENV) else {
        return;
    };
    let lib = match usrsctp::lib() {
        Ok(l) => l,
        Err(e) => {
            println!(
                "SCTP-REPORT error=no-usrsctp detail={}",
                e.replace(' ', "_")
            );
            return;
        }
    };
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let addrs =
        |k: &str| -> Vec<Ipv4Addr> { env(k).split(',').map(|a| a.parse().unwrap()).collect() };
    // SAFETY: raw sockets, no UDP encapsulation, no callbacks.
    unsafe { (lib.init)(0, std::ptr::null(), std::ptr::null()) };
    match role.as_str() {
        "server" => sctp_server(
            lib,
            &env("RIVORA_SCTP_NAME"),
            &addrs("RIVORA_SCTP_LOCAL"),
            env("RIVORA_SCTP_LPORT").parse().unwrap(),
        ),
        "client" => sctp_client(
            lib,
            &addrs("RIVORA_SCTP_LOCAL"),
            env("RIVORA_SCTP_LPORT").parse().unwrap(),
            &addrs("RIVORA_SCTP_REMOTE"),
            env("RIVORA_SCTP_RPORT").parse().unwrap(),
        ),
        other => panic!("unknown role {other}"),
    }
}

fn sctp_socket(lib: &usrsctp::Lib, bind: &[Ipv4Addr], port: u16) -> usrsctp::Sock {
    // SAFETY: calls as usrsctp.h documents them, with buffers of the
    // declared sizes.
    unsafe {
        let so = (lib.socket)(
            libc::AF_INET,
            libc::SOCK_STREAM,
            usrsctp::IPPROTO_SCTP,
            std::ptr::null(),
            std::ptr::null(),
            0,
            std::ptr::null_mut(),
        );
        assert!(
            !so.is_null(),
            "usrsctp_socket: {}",
            std::io::Error::last_os_error()
        );
        let one: libc::c_int = 1;
        (lib.setsockopt)(
            so,
            usrsctp::IPPROTO_SCTP,
            usrsctp::SCTP_NODELAY,
            &one as *const _ as *const libc::c_void,
            4,
        );
        let mut list: Vec<libc::sockaddr_in> =
            bind.iter().map(|a| usrsctp::sin(*a, port)).collect();
        let rc = (lib.bindx)(
            so,
            list.as_mut_ptr() as *mut libc::sockaddr,
            list.len() as libc::c_int,
            usrsctp::SCTP_BINDX_ADD_ADDR,
        );
        assert_eq!(
            rc,
            0,
            "usrsctp_bindx {bind:?}: {}",
            std::io::Error::last_os_error()
        );
        so
    }
}

#[derive(Default, Debug)]
struct ServerState {
    accepted: u64,
    msgs: u64,
    next: u64,
    gaps: u64,
    dups: u64,
    echo_errors: u64,
    closed: bool,
    peers: Vec<String>,
}

/// Accepts one association on `locals:port`, checks that the messages'
/// sequence numbers arrive in order, echoes each one's first 8 bytes, and
/// reports when its stdin closes.
fn sctp_server(lib: &'static usrsctp::Lib, name: &str, locals: &[Ipv4Addr], port: u16) {
    let so = sctp_socket(lib, locals, port);
    // SAFETY: a bound socket.
    assert_eq!(unsafe { (lib.listen)(so, 1) }, 0, "usrsctp_listen");
    let state = Arc::new(Mutex::new(ServerState::default()));
    {
        let state = Arc::clone(&state);
        let name = name.to_string();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            let s = state.lock().unwrap();
            let st = usrsctp::stats(lib);
            println!(
                "SCTP-REPORT name={name} accepted={} msgs={} gaps={} dups={} echo_errors={} closed={} \
                 peers={} recv_data={} retrans={} t3={} ootb={} aborted={} checksum_errors={} recv_hb={} send_hb={}",
                s.accepted,
                s.msgs,
                s.gaps,
                s.dups,
                s.echo_errors,
                s.closed as u8,
                if s.peers.is_empty() {
                    "-".to_string()
                } else {
                    s.peers.join(",")
                },
                st[usrsctp::ST_RECV_DATA],
                st[usrsctp::ST_SEND_RETRANS_DATA],
                st[usrsctp::ST_TIMO_DATA],
                st[usrsctp::ST_OOTB],
                st[usrsctp::ST_ABORTED],
                st[usrsctp::ST_CHECKSUM_ERRORS],
                st[usrsctp::ST_RECV_HB],
                st[usrsctp::ST_SEND_HB],
            );
            let _ = std::io::stdout().flush();
            std::process::exit(0);
        });
    }
    println!("SCTP-READY {name}");
    let _ = std::io::stdout().flush();
    // SAFETY: a listening socket; the address out-parameters may be null.
    let c = unsafe { (lib.accept)(so, std::ptr::null_mut(), std::ptr::null_mut()) };
    if !c.is_null() {
        {
            let mut s = state.lock().unwrap();
            s.accepted += 1;
            s.peers = usrsctp::peer_addrs(lib, c);
        }
        let one: libc::c_int = 1;
        // SAFETY: an int option.
        unsafe {
            (lib.setsockopt)(
                c,
                usrsctp::IPPROTO_SCTP,
                usrsctp::SCTP_NODELAY,
                &one as *const _ as *const libc::c_void,
                4,
            )
        };
        let mut buf = vec![0u8; 4096];
        loop {
            let (n, flags) = recv_msg(lib, c, &mut buf);
            if n <= 0 {
                state.lock().unwrap().closed = n == 0;
                break;
            }
            if flags & usrsctp::MSG_NOTIFICATION != 0 || n < 8 {
                continue;
            }
            let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
            {
                let mut s = state.lock().unwrap();
                s.msgs += 1;
                if seq == s.next {
                    s.next += 1;
                } else if seq < s.next {
                    s.dups += 1;
                } else {
                    s.gaps += seq - s.next;
                    s.next = seq + 1;
                }
            }
            // SAFETY: 8 bytes of buf, no send info.
            let rc = unsafe {
                (lib.sendv)(
                    c,
                    buf.as_ptr() as *const libc::c_void,
                    8,
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null_mut(),
                    0,
                    0,
                    0,
                )
            };
            if rc < 0 {
                state.lock().unwrap().echo_errors += 1;
            }
        }
    }
    // Report when the test closes stdin.
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// One message: (length or 0 at end of association or -1, msg_flags).
fn recv_msg(lib: &usrsctp::Lib, so: usrsctp::Sock, buf: &mut [u8]) -> (isize, libc::c_int) {
    let mut from = [0u8; 128];
    let mut fromlen: u32 = 128;
    let mut info = [0u8; 64];
    let mut infolen: u32 = 64;
    let mut infotype: libc::c_uint = 0;
    let mut flags: libc::c_int = 0;
    // SAFETY: every out-parameter points at a buffer of its stated size.
    let n = unsafe {
        (lib.recvv)(
            so,
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            from.as_mut_ptr() as *mut libc::sockaddr,
            &mut fromlen,
            info.as_mut_ptr() as *mut libc::c_void,
            &mut infolen,
            &mut infotype,
            &mut flags,
        )
    };
    (n, flags)
}

fn set_primary(lib: &usrsctp::Lib, so: usrsctp::Sock, addr: Ipv4Addr, port: u16) -> bool {
    let mut b = [0u8; usrsctp::SETPRIM_LEN];
    usrsctp::put_sin(&mut b, addr, port);
    // SAFETY: a struct sctp_setprim.
    unsafe {
        (lib.setsockopt)(
            so,
            usrsctp::IPPROTO_SCTP,
            usrsctp::SCTP_PRIMARY_ADDR,
            b.as_ptr() as *const libc::c_void,
            b.len() as u32,
        ) == 0
    }
}

/// (state, srtt ms, rto ms, cwnd) of the path to `addr`.
fn path_info(lib: &usrsctp::Lib, so: usrsctp::Sock, addr: Ipv4Addr, port: u16) -> [i64; 4] {
    let mut b = [0u8; usrsctp::PADDRINFO_LEN];
    usrsctp::put_sin(&mut b, addr, port);
    let mut len = b.len() as u32;
    // SAFETY: a struct sctp_paddrinfo.
    let rc = unsafe {
        (lib.getsockopt)(
            so,
            usrsctp::IPPROTO_SCTP,
            usrsctp::SCTP_GET_PEER_ADDR_INFO,
            b.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return [-1; 4];
    }
    let at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
    [
        at(132) as i32 as i64,
        at(140) as i64,
        at(144) as i64,
        at(136) as i64,
    ]
}

/// Associates from `locals:lport` with `remotes:rport`, sends SCTP_RATE
/// numbered 200-byte messages a second for SCTP_SECS, making each remote
/// the primary path in turn every SCTP_SWITCH_SECS, with heartbeats every
/// 200 ms, waits for every echo, shuts down and reports.
fn sctp_client(
    lib: &'static usrsctp::Lib,
    locals: &[Ipv4Addr],
    lport: u16,
    remotes: &[Ipv4Addr],
    rport: u16,
) {
    let so = sctp_socket(lib, locals, lport);
    let list: Vec<libc::sockaddr_in> = remotes.iter().map(|a| usrsctp::sin(*a, rport)).collect();
    let t0 = Instant::now();
    // SAFETY: a packed array of sockaddr_in; the assoc id may be null.
    let rc = unsafe {
        (lib.connectx)(
            so,
            list.as_ptr() as *const libc::sockaddr,
            list.len() as libc::c_int,
            std::ptr::null_mut(),
        )
    };
    if rc != 0 {
        println!(
            "SCTP-REPORT error=connectx errno={}",
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        );
        return;
    }
    let connect_ms = t0.elapsed().as_millis();
    // Heartbeats every 200 ms on every path (an AF_INET wildcard address
    // means all of them).
    let mut pp = [0u8; usrsctp::PADDRPARAMS_LEN];
    pp[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
    pp[132..136].copy_from_slice(&200u32.to_ne_bytes());
    pp[140..144].copy_from_slice(&usrsctp::SPP_HB_ENABLE.to_ne_bytes());
    // SAFETY: a struct sctp_paddrparams.
    let hb_ok = unsafe {
        (lib.setsockopt)(
            so,
            usrsctp::IPPROTO_SCTP,
            usrsctp::SCTP_PEER_ADDR_PARAMS,
            pp.as_ptr() as *const libc::c_void,
            pp.len() as u32,
        )
    } == 0;

    let echoed = Arc::new(AtomicU64::new(0));
    let out_of_order = Arc::new(AtomicU64::new(0));
    let shared = usrsctp::Shared(so);
    let receiver = {
        let (echoed, ooo) = (Arc::clone(&echoed), Arc::clone(&out_of_order));
        std::thread::spawn(move || {
            let shared = shared;
            let mut buf = vec![0u8; 4096];
            let mut next = 0u64;
            loop {
                let (n, flags) = recv_msg(lib, shared.0, &mut buf);
                if n <= 0 {
                    return n;
                }
                if flags & usrsctp::MSG_NOTIFICATION != 0 || n < 8 {
                    continue;
                }
                let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
                if seq != next {
                    ooo.fetch_add(1, Ordering::Relaxed);
                }
                next = seq + 1;
                echoed.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let interval = Duration::from_secs(1) / SCTP_RATE as u32;
    let mut msg = [0x5au8; 200];
    let mut sent = 0u64;
    let mut per_primary = vec![0u64; remotes.len()];
    let mut phase = usize::MAX;
    let mut switches = 0u64;
    let mut switch_failures = 0u64;
    let mut send_error = 0i32;
    let mut max_late = Duration::ZERO;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(SCTP_SECS) {
        let p = (start.elapsed().as_secs() / SCTP_SWITCH_SECS) as usize;
        if p != phase {
            phase = p;
            switches += 1;
            if !set_primary(lib, so, remotes[p % remotes.len()], rport) {
                switch_failures += 1;
            }
        }
        msg[..8].copy_from_slice(&sent.to_le_bytes());
        // SAFETY: the message buffer, no send info.
        let rc = unsafe {
            (lib.sendv)(
                so,
                msg.as_ptr() as *const libc::c_void,
                msg.len(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                0,
                0,
                0,
            )
        };
        if rc < 0 {
            send_error = std::io::Error::last_os_error().raw_os_error().unwrap_or(-1);
            break;
        }
        per_primary[phase % remotes.len()] += 1;
        sent += 1;
        let due = start + interval * sent as u32;
        let now = Instant::now();
        if now < due {
            std::thread::sleep(due - now);
        } else {
            max_late = max_late.max(now - due);
        }
    }
    let send_secs = start.elapsed().as_secs_f64();
    let wait = Instant::now();
    while echoed.load(Ordering::Relaxed) < sent && wait.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let paths: Vec<[i64; 4]> = remotes
        .iter()
        .map(|r| path_info(lib, so, *r, rport))
        .collect();
    let st = usrsctp::stats(lib);
    // SAFETY: a connected socket.
    unsafe { (lib.shutdown)(so, libc::SHUT_WR) };
    let closed_at = Instant::now();
    while !receiver.is_finished() && closed_at.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let shutdown_clean = receiver.is_finished() && receiver.join().unwrap_or(-1) == 0;
    let fmt_path = |i: usize| {
        let p = paths[i];
        format!(
            "path{i}={}:state={}:srtt_ms={}:rto_ms={}:cwnd={}",
            remotes[i], p[0], p[1], p[2], p[3]
        )
    };
    println!(
        "SCTP-REPORT error=none connect_ms={connect_ms} hb_set={} sent={sent} echoed={} out_of_order={} \
         send_secs={send_secs:.2} max_late_ms={} switches={switches} switch_failures={switch_failures} \
         per_primary={} send_error={send_error} shutdown_clean={} retrans={} fast_retrans={} t3={} \
         send_data={} recv_dup_data={} send_hb={} recv_hb_ack={} send_errors={} ootb={} aborted={} {} {}",
        hb_ok as u8,
        echoed.load(Ordering::Relaxed),
        out_of_order.load(Ordering::Relaxed),
        max_late.as_millis(),
        per_primary
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(","),
        shutdown_clean as u8,
        st[usrsctp::ST_SEND_RETRANS_DATA],
        st[usrsctp::ST_SEND_FAST_RETRANS],
        st[usrsctp::ST_TIMO_DATA],
        st[usrsctp::ST_SEND_DATA],
        st[usrsctp::ST_RECV_DUP_DATA],
        st[usrsctp::ST_SEND_HB],
        st[usrsctp::ST_RECV_HB_ACK],
        st[usrsctp::ST_SEND_ERRORS],
        st[usrsctp::ST_OOTB],
        st[usrsctp::ST_ABORTED],
        fmt_path(0),
        fmt_path(1),
    );
    let _ = std::io::stdout().flush();
    // SAFETY: closes our socket.
    unsafe { (lib.close)(so) };
}

fn sctp_config() -> String {
    let targets: String = (1..=3)
        .map(|i| {
            format!(
                "\n        - identifier: {}\n          addresses: [{}]",
                i - 1,
                backend_v4(i)
            )
        })
        .collect();
    format!(
        r#"vips: []
classifier:
  groups:
    - name: dg-sctp
      maxEndpoints: 32
      targets:{targets}
  rules:
    - name: sctp-init
      group: dg-sctp
      priority: 30
      destinationCIDRs: [{SCTP_VIP_A}/32, {SCTP_VIP_B}/32]
      protocols: [SCTP]
      byteMatches: ["sctp[4:4]=0"]
    - name: sctp-data
      group: dg-sctp
      priority: 20
      destinationCIDRs: [{SCTP_VIP_A}/32, {SCTP_VIP_B}/32]
      destinationPorts: ["{SCTP_PORT}"]
      protocols: [SCTP]
"#
    )
}

/// Counters of SCTP packets per (client address, VIP) pair, named
/// `c1-va`, `c1-vb`, `c2-va`, `c2-vb`, plus `init` (vtag 0) and `all`.
fn pair_counters(hook: &str, chain: &str, priority: &str) -> String {
    let (c1, c2, va, vb) = (CLIENT_V4, CLIENT2_V4, SCTP_VIP_A, SCTP_VIP_B);
    format!(
        "  chain {chain} {{\n    type filter hook {hook} priority {priority}; policy accept;\n\
         \x20   sctp vtag 0 counter comment \"init\"\n\
         \x20   ip saddr {c1} ip daddr {va} ip protocol sctp counter comment \"c1-va\"\n\
         \x20   ip saddr {c1} ip daddr {vb} ip protocol sctp counter comment \"c1-vb\"\n\
         \x20   ip saddr {c2} ip daddr {va} ip protocol sctp counter comment \"c2-va\"\n\
         \x20   ip saddr {c2} ip daddr {vb} ip protocol sctp counter comment \"c2-vb\"\n\
         \x20   ip protocol sctp counter comment \"all\"\n  }}\n"
    )
}

#[test]
fn sctp_multihomed_association_stays_on_one_target() {
    if let Err(e) = usrsctp::lib() {
        panic!(
            "this test needs usrsctp ({}; Debian package libusrsctp2, which scripts/setup.sh installs): {e}",
            usrsctp::SONAME
        );
    }
    let mut lab = Lab::new("clsctp");
    let client = &lab.topo.client;
    client
        .run(&[
            "ip",
            "addr",
            "add",
            &format!("{CLIENT2_V4}/24"),
            "dev",
            "eth0",
        ])
        .unwrap();
    // Per-path sources (see the module doc), then counters after them.
    nft_load(
        client,
        &lab.work,
        "client",
        &format!(
            "table ip rvt {{\n  chain out {{\n    type filter hook output priority 0; policy accept;\n\
             \x20   ip daddr {SCTP_VIP_A} ip protocol sctp ip saddr set {CLIENT_V4}\n\
             \x20   ip daddr {SCTP_VIP_B} ip protocol sctp ip saddr set {CLIENT2_V4}\n  }}\n{}}}\n",
            pair_counters("postrouting", "post", "100")
        ),
    );
    for (i, ns) in lab.topo.backends.iter().enumerate() {
        for vip in [SCTP_VIP_A, SCTP_VIP_B] {
            ns.run(&["ip", "addr", "add", &format!("{vip}/32"), "dev", "eth0"])
                .unwrap();
        }
        nft_load(
            ns,
            &lab.work,
            &format!("b{}", i + 1),
            &format!(
                "table ip rvt {{\n{}}}\n",
                pair_counters("prerouting", "pre", "-300")
            ),
        );
    }
    lab.write_raw_config(&sctp_config());
    lab.start(&[]);

    let exe = std::env::current_exe().unwrap();
    let helper = |role: &str| {
        let mut c = Command::new(&exe);
        c.args([
            "--exact",
            "sctp_peer",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PEER_ENV, role)
        .stderr(Stdio::inherit());
        c
    };
    let vips = format!("{SCTP_VIP_A},{SCTP_VIP_B}");
    let mut servers: Vec<Proc> = lab
        .topo
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            let name = format!("b{}", i + 1);
            let mut cmd = helper("server");
            cmd.env("RIVORA_SCTP_NAME", &name)
                .env("RIVORA_SCTP_LOCAL", &vips)
                .env("RIVORA_SCTP_LPORT", SCTP_PORT.to_string());
            Proc::start(ns, &format!("SCTP server on {name}"), &mut cmd)
        })
        .collect();
    for s in &mut servers {
        s.wait_line("SCTP-READY", Duration::from_secs(15));
    }
    let mut cmd = helper("client");
    cmd.env("RIVORA_SCTP_LOCAL", format!("{CLIENT_V4},{CLIENT2_V4}"))
        .env("RIVORA_SCTP_LPORT", CLIENT_SCTP_PORT.to_string())
        .env("RIVORA_SCTP_REMOTE", &vips)
        .env("RIVORA_SCTP_RPORT", SCTP_PORT.to_string());
    let mut cl = Proc::start(&lab.topo.client, "SCTP client", &mut cmd);
    let report = cl.wait_line("SCTP-REPORT", Duration::from_secs(SCTP_SECS + 45));
    cl.wait_exit(Duration::from_secs(10));
    eprintln!("client: {report}");
    let c = fields(&report);
    assert_eq!(c.get("error").map(String::as_str), Some("none"), "{report}");

    let mut reports = Vec::new();
    for s in &mut servers {
        s.close_stdin();
        let r = s.wait_line("SCTP-REPORT", Duration::from_secs(10));
        s.wait_exit(Duration::from_secs(10));
        eprintln!("server: {r}");
        reports.push(fields(&r));
    }
    let sent_pkts = nft_counters(&lab.topo.client, "post");
    let target_pkts: Vec<BTreeMap<String, u64>> = lab
        .topo
        .backends
        .iter()
        .map(|ns| nft_counters(ns, "pre"))
        .collect();
    let cls = classifier_status(&lab);
    eprintln!("client sent (nft): {sent_pkts:?}");
    for (i, t) in target_pkts.iter().enumerate() {
        eprintln!("b{} received (nft): {t:?}", i + 1);
    }

    // Exactly one target saw the association, all of it.
    let sent = num(&c, "sent");
    let served: Vec<usize> = (0..3)
        .filter(|i| num(&reports[*i], "accepted") > 0)
        .collect();
    assert_eq!(served.len(), 1, "exactly one target accepted: {reports:?}");
    let t = served[0];
    for (i, other) in reports.iter().enumerate().filter(|(i, _)| *i != t) {
        assert_eq!(num(other, "msgs"), 0, "b{}: {other:?}", i + 1);
        assert_eq!(
            num(other, "ootb"),
            0,
            "b{} got stray packets: {other:?}",
            i + 1
        );
        assert_eq!(
            target_pkts[i]["all"],
            0,
            "b{} received SCTP: {:?}",
            i + 1,
            target_pkts[i]
        );
    }
    let r = &reports[t];
    assert_eq!(num(r, "accepted"), 1, "{r:?}");
    assert_eq!(num(r, "msgs"), sent, "the target got every message: {r:?}");
    for key in [
        "gaps",
        "dups",
        "echo_errors",
        "retrans",
        "t3",
        "ootb",
        "aborted",
        "checksum_errors",
    ] {
        assert_eq!(num(r, key), 0, "server b{} {key}: {r:?}", t + 1);
    }
    assert_eq!(
        num(r, "closed"),
        1,
        "association ended by the client: {r:?}"
    );
    assert_eq!(
        r["peers"],
        format!("{CLIENT_V4},{CLIENT2_V4}"),
        "the target sees a multihomed client"
    );
    // The association carried every message, in order, without loss.
    assert!(
        sent >= SCTP_RATE * SCTP_SECS * 9 / 10,
        "the client sent {sent} messages in 30 s (wanted about {}): {report}",
        SCTP_RATE * SCTP_SECS
    );
    assert_eq!(num(&c, "echoed"), sent, "every message echoed: {report}");
    for key in [
        "out_of_order",
        "retrans",
        "fast_retrans",
        "t3",
        "recv_dup_data",
        "send_errors",
        "ootb",
        "aborted",
        "switch_failures",
    ] {
        assert_eq!(num(&c, key), 0, "client {key}: {report}");
    }
    assert_eq!(num(&c, "hb_set"), 1, "heartbeat interval set: {report}");
    assert_eq!(num(&c, "shutdown_clean"), 1, "graceful shutdown: {report}");
    assert!(num(&c, "recv_hb_ack") > 0, "heartbeats answered: {report}");
    let per_primary: Vec<u64> = c["per_primary"]
        .split(',')
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(
        per_primary
            .iter()
            .all(|n| *n >= SCTP_RATE * SCTP_SWITCH_SECS),
        "both VIPs were the primary path for at least 5 s each: {per_primary:?}"
    );
    for i in 0..2 {
        let p = &c[&format!("path{i}")];
        assert!(p.contains(":state=1:"), "path {i} active at the end: {p}");
    }

    // Both paths, each from its own client address, reached that target,
    // and every SCTP packet the client sent arrived there (0 loss).
    let got = &target_pkts[t];
    assert!(
        sent_pkts["c1-va"] > 0 && sent_pkts["c2-vb"] > 0,
        "the client used both paths: {sent_pkts:?}"
    );
    assert_eq!(
        sent_pkts["c1-va"] + sent_pkts["c2-vb"],
        sent_pkts["all"],
        "client packets only on the two paths: {sent_pkts:?}"
    );
    for k in ["init", "c1-va", "c1-vb", "c2-va", "c2-vb", "all"] {
        assert_eq!(
            got[k],
            sent_pkts[k],
            "{k}: the client sent {} packets, b{} received {}",
            sent_pkts[k],
            t + 1,
            got[k]
        );
    }
    // The INIT (vtag 0) took the priority-30 byte-match rule, the rest the
    // priority-20 SCTP rule; nothing dropped.
    let rule = |n: &str| {
        cls.rules
            .iter()
            .find(|r| r.name == n)
            .unwrap_or_else(|| panic!("rule {n}: {cls:?}"))
            .counters
    };
    let (init, data) = (rule("sctp-init"), rule("sctp-data"));
    assert!(sent_pkts["init"] >= 1, "{sent_pkts:?}");
    assert_eq!(
        init.packets, sent_pkts["init"],
        "INITs by sctp-init: {init:?}"
    );
    assert_eq!(
        data.packets,
        sent_pkts["all"] - sent_pkts["init"],
        "the rest by sctp-data: {data:?}"
    );
    assert_eq!(init.other + init.no_target + data.other + data.no_target, 0);
    let g = cls.groups.iter().find(|g| g.name == "dg-sctp").unwrap();
    assert_eq!(g.sctp_hash, "ports");

    eprintln!(
        "SCTP figures: target b{}; {sent} messages in {}s ({:.0}/s), primary per VIP {per_primary:?}; \
         packets client->VIP_A from {CLIENT_V4}: {}, client->VIP_B from {CLIENT2_V4}: {}, INIT: {}; \
         target received {} of {} client packets; heartbeats sent {} answered {}; \
         retransmissions {}, T3 timeouts {}; {} {}",
        t + 1,
        c["send_secs"],
        sent as f64 / c["send_secs"].parse::<f64>().unwrap(),
        sent_pkts["c1-va"],
        sent_pkts["c2-vb"],
        sent_pkts["init"],
        got["all"],
        sent_pkts["all"],
        c["send_hb"],
        c["recv_hb_ack"],
        c["retrans"],
        c["t3"],
        c["path0"],
        c["path1"],
    );
    assert!(lab.stop(), "rivorad stops cleanly");
}

// ---------------------------------------------------------------------------
// Acceptance point 6: low MTU on the target network
// ---------------------------------------------------------------------------

const BULK_PORT: u16 = 5001;
const UPLOAD: usize = 16 << 20;

/// A TCP sink on each given address: reads a connection to its end and
/// answers `NAME BYTES`.
struct BulkSink {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl BulkSink {
    fn start(ns: &Netns, name: &str, addrs: &[SocketAddr]) -> BulkSink {
        let listeners = ns
            .within(|| {
                addrs
                    .iter()
                    .map(TcpListener::bind)
                    .collect::<std::io::Result<Vec<_>>>()
            })
            .expect("enter namespace")
            .unwrap_or_else(|e| panic!("bind {addrs:?} in {}: {e}", ns.name()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = listeners
            .into_iter()
            .map(|l| {
                l.set_nonblocking(true).unwrap();
                let (stop, name) = (Arc::clone(&stop), name.to_string());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match l.accept() {
                            Ok((mut s, _)) => {
                                let _ = s.set_nonblocking(false);
                                let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
                                let mut buf = vec![0u8; 65536];
                                let mut total = 0u64;
                                loop {
                                    match s.read(&mut buf) {
                                        Ok(0) => break,
                                        Ok(n) => total += n as u64,
                                        Err(_) => break,
                                    }
                                }
                                let _ = writeln!(s, "{name} {total}");
                            }
                            Err(_) => std::thread::sleep(Duration::from_millis(20)),
                        }
                    }
                })
            })
            .collect();
        BulkSink { stop, threads }
    }
}

impl Drop for BulkSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// tcpdump writing every matching frame of an interface to a file at once.
struct Capture {
    proc: Proc,
    file: PathBuf,
}

impl Capture {
    fn start(ns: &Netns, ifname: &str, filter: &str, file: PathBuf) -> Capture {
        let mut cmd = Command::new("tcpdump");
        cmd.args(["-i", ifname, "-n", "--immediate-mode", "-U", "-w"])
            .arg(&file)
            .arg(filter)
            .stderr(Stdio::piped());
        cmd.stdin(Stdio::null());
        let mut child = ns
            .spawn(cmd.stdout(Stdio::null()))
            .unwrap_or_else(|e| panic!("tcpdump (scripts/setup.sh installs it): {e:#}"));
        // tcpdump says "tcpdump: listening on" once its socket is open.
        let err = child.stderr.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut proc = Proc {
            what: format!("tcpdump in {}", ns.name()),
            child,
            stdin: None,
            lines,
            seen: Vec::new(),
        };
        proc.wait_line("tcpdump: listening on", Duration::from_secs(10));
        Capture { proc, file }
    }

    /// Stops tcpdump (SIGTERM, it flushes) and returns the captured frames.
    fn stop(mut self) -> Vec<Vec<u8>> {
        // SAFETY: signals our own child, which has not been reaped.
        unsafe { libc::kill(self.proc.child.id() as libc::pid_t, libc::SIGTERM) };
        self.proc.wait_exit(Duration::from_secs(10));
        pcap_frames(&std::fs::read(&self.file).expect("capture file"))
    }
}

/// The frames of a pcap file (tcpdump's native-endian classic format,
/// Ethernet link type).
fn pcap_frames(b: &[u8]) -> Vec<Vec<u8>> {
    assert!(b.len() >= 24, "pcap file too short: {} bytes", b.len());
    let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
    assert!(
        magic == 0xa1b2_c3d4 || magic == 0xa1b2_3c4d,
        "not a little-endian pcap file: {magic:#x}"
    );
    let rd = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize;
    assert_eq!(rd(20), 1, "link type Ethernet");
    let mut out = Vec::new();
    let mut o = 24;
    while o + 16 <= b.len() {
        let len = rd(o + 8);
        let end = o + 16 + len;
        assert!(end <= b.len(), "truncated pcap record at {o}");
        out.push(b[o + 16..end].to_vec());
        o = end;
    }
    out
}

/// RFC 1071 one's-complement sum folded (0 over a message with a valid
/// checksum, the pseudo-header sum given as `init`).
fn ones_sum(data: &[u8], init: u32) -> u16 {
    let mut s = init;
    for c in data.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// An ICMP fragmentation-needed or ICMPv6 packet-too-big seen by the client.
#[derive(Debug)]
struct TooBig {
    src: IpAddr,
    dst: IpAddr,
    mtu: u32,
    checksum_ok: bool,
    /// The quoted packet: source, destination, protocol, total length.
    quoted: Option<(IpAddr, IpAddr, u8, usize)>,
}

fn too_bigs(frames: &[Vec<u8>]) -> Vec<TooBig> {
    use etherparse::{NetSlice, TransportSlice};
    let mut out = Vec::new();
    for f in frames {
        let Ok(p) = etherparse::SlicedPacket::from_ethernet(f) else {
            continue;
        };
        match (&p.net, &p.transport) {
            (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Icmpv4(icmp))) => {
                let m = icmp.slice();
                if m.len() < 8 || m[0] != 3 || m[1] != 4 {
                    continue;
                }
                let quoted = etherparse::Ipv4HeaderSlice::from_slice(icmp.payload())
                    .ok()
                    .map(|q| {
                        (
                            IpAddr::V4(q.source_addr()),
                            IpAddr::V4(q.destination_addr()),
                            q.protocol().0,
                            q.total_len() as usize,
                        )
                    });
                out.push(TooBig {
                    src: IpAddr::V4(ip.header().source_addr()),
                    dst: IpAddr::V4(ip.header().destination_addr()),
                    mtu: u32::from(u16::from_be_bytes([m[6], m[7]])),
                    checksum_ok: ones_sum(m, 0) == 0,
                    quoted,
                });
            }
            (Some(NetSlice::Ipv6(ip)), Some(TransportSlice::Icmpv6(icmp))) => {
                let m = icmp.slice();
                if m.len() < 8 || m[0] != 2 {
                    continue;
                }
                let (src, dst) = (ip.header().source_addr(), ip.header().destination_addr());
                let mut pseudo = 0u32;
                for a in [src.octets(), dst.octets()] {
                    for c in a.chunks(2) {
                        pseudo += u32::from(u16::from_be_bytes([c[0], c[1]]));
                    }
                }
                pseudo += m.len() as u32 + 58;
                let quoted = etherparse::Ipv6HeaderSlice::from_slice(icmp.payload())
                    .ok()
                    .map(|q| {
                        (
                            IpAddr::V6(q.source_addr()),
                            IpAddr::V6(q.destination_addr()),
                            q.next_header().0,
                            q.payload_length() as usize + 40,
                        )
                    });
                out.push(TooBig {
                    src: IpAddr::V6(src),
                    dst: IpAddr::V6(dst),
                    mtu: u32::from_be_bytes([m[4], m[5], m[6], m[7]]),
                    checksum_ok: ones_sum(m, pseudo) == 0,
                    quoted,
                });
            }
            _ => {}
        }
    }
    out
}

struct MtuCase {
    tag: &'static str,
    v6: bool,
    mtu: u32,
    ping_vip: IpAddr,
    tcp_vip: IpAddr,
    client: IpAddr,
    /// ping -s for a 1400-byte packet.
    big_payload: u32,
    /// ping -s for a packet of exactly the MTU.
    fit_payload: u32,
    /// The MSS the targets advertise: that of a 1500-byte path.
    advmss: u32,
}

fn ping(ns: &Netns, v6: bool, vip: IpAddr, payload: u32) -> (bool, String) {
    let mut cmd = Command::new("ping");
    if v6 {
        cmd.arg("-6");
    }
    cmd.args(["-n", "-M", "do", "-c", "3", "-i", "0.2", "-w", "4", "-s"])
        .arg(payload.to_string())
        .arg(vip.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = ns
        .spawn(&mut cmd)
        .expect("ping")
        .wait_with_output()
        .expect("ping output");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Uploads UPLOAD bytes to `to`; (the sink's answer, seconds, the socket's
/// path MTU, send MSS and retransmissions at the end).
fn upload(ns: &Netns, to: SocketAddr) -> (String, f64, libc::tcp_info) {
    ns.within(move || {
        let t0 = Instant::now();
        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect {to}: {e}"));
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let chunk = vec![0xa5u8; 65536];
        for _ in 0..UPLOAD / chunk.len() {
            s.write_all(&chunk)
                .unwrap_or_else(|e| panic!("upload to {to} after {:?}: {e}", t0.elapsed()));
        }
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer)
            .unwrap_or_else(|e| panic!("answer from {to}: {e}"));
        let secs = t0.elapsed().as_secs_f64();
        // SAFETY: TCP_INFO into a struct tcp_info of the given size.
        let info = unsafe {
            let mut info: libc::tcp_info = std::mem::zeroed();
            let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
            let rc = libc::getsockopt(
                s.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                &mut info as *mut _ as *mut libc::c_void,
                &mut len,
            );
            assert_eq!(rc, 0, "TCP_INFO");
            info
        };
        (answer.trim().to_string(), secs, info)
    })
    .expect("enter client namespace")
}

fn low_mtu(case: MtuCase) {
    let mut lab = Lab::new(case.tag);
    let lb = &lab.topo.lb;
    let mtu = case.mtu.to_string();
    // The target network: the bridge's ports and the targets first (a
    // bridge takes the smallest MTU of its ports), then the bridge itself.
    for (i, ns) in lab.topo.backends.iter().enumerate() {
        lb.run(&["ip", "link", "set", &format!("b{}", i + 1), "mtu", &mtu])
            .unwrap();
        ns.run(&["ip", "link", "set", "eth0", "mtu", &mtu]).unwrap();
    }
    lb.run(&["ip", "link", "set", "br0", "mtu", &mtu]).unwrap();
    let mut sinks = Vec::new();
    for (i, ns) in lab.topo.backends.iter().enumerate() {
        for vip in [case.ping_vip, case.tcp_vip] {
            let cmd = if case.v6 {
                format!("ip -6 addr add {vip}/128 dev lo nodad")
            } else {
                format!("ip addr add {vip}/32 dev lo")
            };
            ns.run(&cmd.split(' ').collect::<Vec<_>>()).unwrap();
        }
        // The targets advertise the MSS of a 1500-byte path, so the client
        // starts with segments too big for the target network and must
        // learn the path MTU from the lb's answers.
        let (fam, gw) = if case.v6 {
            ("-6", rivora_lab::topology::LB_BRIDGE_V6.to_string())
        } else {
            ("-4", rivora_lab::topology::LB_BRIDGE_V4.to_string())
        };
        ns.run(&[
            "ip",
            fam,
            "route",
            "change",
            "default",
            "via",
            &gw,
            "dev",
            "eth0",
            "advmss",
            &case.advmss.to_string(),
        ])
        .unwrap();
        let name = format!("b{}", i + 1);
        sinks.push(BulkSink::start(
            ns,
            &name,
            &[SocketAddr::new(case.tcp_vip, BULK_PORT)],
        ));
    }
    let targets: String = (1..=3)
        .map(|i| {
            let a = if case.v6 {
                format!("\"{}\"", backend_v6(i))
            } else {
                backend_v4(i).to_string()
            };
            format!(
                "\n        - identifier: {}\n          addresses: [{a}]",
                i - 1
            )
        })
        .collect();
    let (pl, vp, vt) = (if case.v6 { 128 } else { 32 }, case.ping_vip, case.tcp_vip);
    lab.write_raw_config(&format!(
        r#"vips: []
classifier:
  groups:
    - name: dg-mtu
      maxEndpoints: 8
      targets:{targets}
  rules:
    - name: mtu-tcp
      group: dg-mtu
      priority: 10
      destinationCIDRs: ["{vp}/{pl}", "{vt}/{pl}"]
      protocols: [TCP]
"#
    ));
    lab.start(&[]);

    let client = &lab.topo.client;
    let capture = Capture::start(
        client,
        "eth0",
        if case.v6 { "icmp6" } else { "icmp" },
        lab.work.join("client.pcap"),
    );
    // A 1400-byte DF ping: answered with "too big", never forwarded.
    let (big_ok, big_out) = ping(client, case.v6, case.ping_vip, case.big_payload);
    // A ping of exactly the MTU reaches a target and comes back.
    let (fit_ok, fit_out) = ping(client, case.v6, case.ping_vip, case.fit_payload);
    // A large upload through path MTU discovery.
    let (answer, secs, info) = upload(client, SocketAddr::new(case.tcp_vip, BULK_PORT));
    let frames = capture.stop();
    let route = client
        .run(&["ip", "route", "get", &case.tcp_vip.to_string()])
        .unwrap();
    let cls = classifier_status(&lab);
    let tb = too_bigs(&frames);
    eprintln!(
        "ping 1400 bytes:\n{big_out}\nping {} bytes:\n{fit_out}",
        case.mtu
    );
    eprintln!("client route to {}: {}", case.tcp_vip, route.trim());
    eprintln!("too-big messages captured by the client: {tb:#?}");

    assert!(
        !big_ok,
        "a 1400-byte DF ping must not be answered:\n{big_out}"
    );
    assert!(
        fit_ok && fit_out.contains(" 0% packet loss"),
        "a ping of exactly {} bytes is answered:\n{fit_out}",
        case.mtu
    );
    let from_lb = tb
        .iter()
        .filter(|t| t.src != case.ping_vip && t.src != case.tcp_vip)
        .collect::<Vec<_>>();
    assert!(
        from_lb.is_empty(),
        "too-big not sourced from a VIP: {from_lb:?}"
    );
    for t in &tb {
        assert_eq!(t.dst, case.client, "{t:?}");
        assert_eq!(t.mtu, case.mtu, "{t:?}");
        assert!(t.checksum_ok, "checksum: {t:?}");
        let q = t.quoted.expect("quotes the packet");
        assert_eq!(
            (q.0, q.1),
            (case.client, t.src),
            "quotes the packet to that VIP: {t:?}"
        );
    }
    let icmp_proto = if case.v6 { 58 } else { 1 };
    let ping_tb = tb
        .iter()
        .filter(|t| t.src == case.ping_vip && t.quoted.unwrap().2 == icmp_proto)
        .collect::<Vec<_>>();
    assert!(
        !ping_tb.is_empty() && ping_tb.iter().all(|t| t.quoted.unwrap().3 == 1400),
        "the 1400-byte echo answered from the ping VIP: {tb:?}"
    );
    let tcp_tb = tb
        .iter()
        .filter(|t| t.src == case.tcp_vip && t.quoted.unwrap().2 == 6)
        .collect::<Vec<_>>();
    assert!(
        !tcp_tb.is_empty()
            && tcp_tb
                .iter()
                .all(|t| t.quoted.unwrap().3 > case.mtu as usize),
        "the too-big TCP segments answered from the TCP VIP: {tb:?}"
    );

    let (who, bytes) = answer.split_once(' ').expect("NAME BYTES");
    assert_eq!(
        bytes,
        UPLOAD.to_string(),
        "the target got the whole upload: {answer}"
    );
    assert!(["b1", "b2", "b3"].contains(&who), "{answer}");
    assert_eq!(info.tcpi_pmtu, case.mtu, "the socket's path MTU");
    assert!(
        route.contains(&format!("mtu {}", case.mtu)),
        "the client cached the path MTU of {}: {route}",
        case.tcp_vip
    );
    let ev = |k: &str| cls.events.get(k).copied().unwrap_or(0);
    assert_eq!(
        ev("too_big_icmp"),
        tb.len() as u64,
        "rivorad's count of its answers: {:?}",
        cls.events
    );
    assert_eq!(ev("too_big_dropped"), 0);
    eprintln!(
        "low MTU {} figures: target MTU {}; {} too-big answers from the VIPs ({} to the 1400-byte ping, {} to TCP \
         segments of {:?} bytes), next-hop MTU {:?}; MTU-sized ping 0% loss; {} MiB upload to {} in {secs:.2}s \
         ({:.0} Mbit/s), path MTU {}, send MSS {}, retransmitted segments {}",
        if case.v6 { "IPv6" } else { "IPv4" },
        case.mtu,
        tb.len(),
        ping_tb.len(),
        tcp_tb.len(),
        tcp_tb
            .iter()
            .map(|t| t.quoted.unwrap().3)
            .collect::<Vec<_>>(),
        tb.iter()
            .map(|t| t.mtu)
            .collect::<std::collections::BTreeSet<_>>(),
        UPLOAD >> 20,
        who,
        UPLOAD as f64 * 8.0 / secs / 1e6,
        info.tcpi_pmtu,
        info.tcpi_snd_mss,
        info.tcpi_total_retrans,
    );
    drop(sinks);
    assert!(lab.stop(), "rivorad stops cleanly");
}

#[test]
fn low_mtu_v4_too_big_answered_from_the_vip_and_pmtud_works() {
    low_mtu(MtuCase {
        tag: "clsmtu4",
        v6: false,
        mtu: 1200,
        ping_vip: IpAddr::V4(Ipv4Addr::new(10, 200, 100, 41)),
        tcp_vip: IpAddr::V4(Ipv4Addr::new(10, 200, 100, 42)),
        client: IpAddr::V4(CLIENT_V4),
        big_payload: 1400 - 20 - 8,
        fit_payload: 1200 - 20 - 8,
        advmss: 1460,
    });
}

#[test]
fn low_mtu_v6_packet_too_big_from_the_vip_and_pmtud_works() {
    low_mtu(MtuCase {
        tag: "clsmtu6",
        v6: true,
        mtu: 1280,
        ping_vip: IpAddr::V6(Ipv6Addr::new(0xfd00, 0x200, 0x100, 0, 0, 0, 0, 0x41)),
        tcp_vip: IpAddr::V6(Ipv6Addr::new(0xfd00, 0x200, 0x100, 0, 0, 0, 0, 0x42)),
        client: IpAddr::V6(CLIENT_V6),
        big_payload: 1400 - 40 - 8,
        fit_payload: 1280 - 40 - 8,
        advmss: 1440,
    });
}
