//! What a client sees when its packet to a NAT VIP expires on the balancer
//! (issue 14, item 6; documented in docs/packet-shapes.md).
//!
//! Real kernel, real namespaces: client -- balancer -- backend, xdp_ingress
//! (generic) on the balancer's client-facing veth. The client sends a UDP
//! datagram to the VIP with TTL (hop limit) 1; xdp_ingress rewrites its
//! destination to the backend and hands it to the kernel, whose forwarding
//! expires it and sends ICMP time exceeded to the client, quoting the
//! rewritten packet (to the backend). Without tc_nat the client gets that
//! error from the balancer's own address, quoting the backend, and its
//! socket (connected to the VIP) never hears of it. With tc_nat on the
//! egress, the error leaves from the VIP, quoting what the client sent to
//! the VIP, so the client's socket gets it (IP_RECVERR: time exceeded,
//! offender = the VIP).

mod common;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use common::*;
use rivora_dataplane::{AttachOptions, XdpModeRequest, proto};
use rivora_lab::Netns;

struct Family {
    v6: bool,
    client: &'static str,
    lb_client_side: &'static str,
    lb_backend_side: &'static str,
    backend: &'static str,
    vip: &'static str,
    prefix: &'static str,
}

const V4: Family = Family {
    v6: false,
    client: "10.211.0.2",
    lb_client_side: "10.211.0.1",
    lb_backend_side: "10.211.1.1",
    backend: "10.211.1.11",
    vip: "10.211.100.1",
    prefix: "24",
};

const V6: Family = Family {
    v6: true,
    client: "fd00:211::2",
    lb_client_side: "fd00:211::1",
    lb_backend_side: "fd00:211:1::1",
    backend: "fd00:211:1::11",
    vip: "fd00:211:100::1",
    prefix: "64",
};

/// One ICMP time exceeded as the client's raw socket read it: outer source,
/// and the quoted packet's destination address and port.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    outer_src: IpAddr,
    quoted_dst: IpAddr,
    quoted_dport: u16,
}

fn sys(rc: i32, what: &str) -> i32 {
    assert!(rc >= 0, "{what}: {}", std::io::Error::last_os_error());
    rc
}

fn setopt(fd: i32, level: i32, name: i32, value: i32) {
    let v = value;
    sys(
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&v as *const i32).cast(),
                std::mem::size_of::<i32>() as u32,
            )
        },
        "setsockopt",
    );
}

/// Waits (bounded) until `fd` is readable (or has an error queued, with
/// `errqueue`); false on timeout.
fn wait_readable(fd: i32, errqueue: bool, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd {
            fd,
            events: if errqueue { 0 } else { libc::POLLIN },
            revents: 0,
        };
        let n = unsafe { libc::poll(&mut p, 1, left.as_millis() as i32) };
        if n > 0 && (p.revents & (libc::POLLIN | libc::POLLERR)) != 0 {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
    }
}

/// Reads ICMP(v6) messages from the raw socket until a time exceeded
/// arrives (bounded); returns what it quoted.
fn read_time_exceeded(raw: i32, v6: bool) -> Seen {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = String::from("nothing");
    while Instant::now() < deadline {
        if !wait_readable(raw, false, deadline - Instant::now()) {
            break;
        }
        let mut buf = [0u8; 2048];
        let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        let n = sys(
            unsafe {
                libc::recvfrom(
                    raw,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    (&mut from as *mut libc::sockaddr_storage).cast(),
                    &mut len,
                ) as i32
            },
            "recvfrom",
        ) as usize;
        // IPv4 raw sockets hand over the IP header; ICMPv6 ones start at ICMPv6.
        let (outer_src, icmp) = if v6 {
            let sa: libc::sockaddr_in6 =
                unsafe { std::ptr::read((&from as *const libc::sockaddr_storage).cast()) };
            (IpAddr::from(sa.sin6_addr.s6_addr), &buf[..n])
        } else {
            let hl = (buf[0] & 0xf) as usize * 4;
            let src: [u8; 4] = buf[12..16].try_into().unwrap();
            (IpAddr::from(src), &buf[hl..n])
        };
        let time_exceeded = if v6 { 3 } else { 11 };
        last = format!("ICMP type {} from {outer_src}", icmp[0]);
        if icmp[0] != time_exceeded {
            continue;
        }
        let q = &icmp[8..];
        let (dst, l4): (IpAddr, &[u8]) = if v6 {
            let d: [u8; 16] = q[24..40].try_into().unwrap();
            (IpAddr::from(d), &q[40..])
        } else {
            let qhl = (q[0] & 0xf) as usize * 4;
            let d: [u8; 4] = q[16..20].try_into().unwrap();
            (IpAddr::from(d), &q[qhl..])
        };
        return Seen {
            outer_src,
            quoted_dst: dst,
            quoted_dport: u16::from_be_bytes([l4[2], l4[3]]),
        };
    }
    panic!("no ICMP time exceeded within 5 s; last saw {last}");
}

/// The error queued on the client's UDP socket (IP_RECVERR), if any within
/// `within`: (ICMP type, offender address).
fn socket_error(sock: &UdpSocket, v6: bool, within: Duration) -> Option<(u8, IpAddr)> {
    let fd = sock.as_raw_fd();
    if !wait_readable(fd, true, within) {
        return None;
    }
    let mut data = [0u8; 512];
    let mut control = [0u8; 512];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len();
    if unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) } < 0 {
        return None;
    }
    let (level, kind) = if v6 {
        (libc::SOL_IPV6, libc::IPV6_RECVERR)
    } else {
        (libc::SOL_IP, libc::IP_RECVERR)
    };
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !c.is_null() {
        let h = unsafe { &*c };
        if h.cmsg_level == level && h.cmsg_type == kind {
            let ee = unsafe { libc::CMSG_DATA(c) } as *const libc::sock_extended_err;
            let ee_type = unsafe { (*ee).ee_type };
            let off = unsafe { libc::SO_EE_OFFENDER(ee) };
            let addr = if v6 {
                let sa: libc::sockaddr_in6 = unsafe { std::ptr::read(off.cast()) };
                IpAddr::from(sa.sin6_addr.s6_addr)
            } else {
                let sa: libc::sockaddr_in = unsafe { std::ptr::read(off.cast()) };
                IpAddr::from(sa.sin_addr.s_addr.to_ne_bytes())
            };
            return Some((ee_type, addr));
        }
        c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
    }
    None
}

/// Sends one datagram with TTL/hop limit 1 from a socket connected to the
/// VIP; returns what the raw socket saw and what the UDP socket got.
fn expire_one(f: &Family, sport: u16) -> (Seen, Option<(u8, IpAddr)>) {
    let (domain, icmp_proto) = if f.v6 {
        (libc::AF_INET6, libc::IPPROTO_ICMPV6)
    } else {
        (libc::AF_INET, libc::IPPROTO_ICMP)
    };
    let raw = sys(
        unsafe { libc::socket(domain, libc::SOCK_RAW | libc::SOCK_CLOEXEC, icmp_proto) },
        "raw socket",
    );
    let raw = unsafe { OwnedFd::from_raw_fd(raw) };
    let client: IpAddr = f.client.parse().unwrap();
    let vip: IpAddr = f.vip.parse().unwrap();
    let sock = UdpSocket::bind(SocketAddr::new(client, sport)).unwrap();
    sock.connect(SocketAddr::new(vip, 53)).unwrap();
    let fd = sock.as_raw_fd();
    if f.v6 {
        setopt(fd, libc::SOL_IPV6, libc::IPV6_RECVERR, 1);
        setopt(fd, libc::SOL_IPV6, libc::IPV6_UNICAST_HOPS, 1);
    } else {
        setopt(fd, libc::SOL_IP, libc::IP_RECVERR, 1);
        setopt(fd, libc::SOL_IP, libc::IP_TTL, 1);
    }
    sock.send(b"ttl one").unwrap();
    let seen = read_time_exceeded(raw.as_raw_fd(), f.v6);
    // The socket's error is queued in the same softirq that fed the raw
    // socket; a bounded wait covers the reader running on another CPU.
    let err = socket_error(&sock, f.v6, Duration::from_millis(500));
    (seen, err)
}

/// client c0 <-> l0 balancer l1 <-> b0 backend, forwarding on in the
/// balancer; returns (client, balancer, backend) namespaces.
fn topology(f: &Family, tag: &str) -> (Netns, Netns, Netns) {
    let c = Netns::new(&format!("ttl-{tag}-c")).unwrap();
    let l = Netns::new(&format!("ttl-{tag}-l")).unwrap();
    let b = Netns::new(&format!("ttl-{tag}-b")).unwrap();
    let ip = if f.v6 { "-6" } else { "-4" };
    l.run(&[
        "ip",
        "link",
        "add",
        "l0",
        "type",
        "veth",
        "peer",
        "name",
        "c0",
        "netns",
        c.name(),
    ])
    .unwrap();
    l.run(&[
        "ip",
        "link",
        "add",
        "l1",
        "type",
        "veth",
        "peer",
        "name",
        "b0",
        "netns",
        b.name(),
    ])
    .unwrap();
    let addr = |ns: &Netns, dev: &str, a: &str| {
        let cidr = format!("{a}/{}", f.prefix);
        let mut argv = vec!["ip", ip, "addr", "add", cidr.as_str(), "dev", dev];
        if f.v6 {
            argv.push("nodad");
        }
        ns.run(&argv).unwrap();
        ns.run(&["ip", "link", "set", dev, "up"]).unwrap();
    };
    addr(&c, "c0", f.client);
    addr(&l, "l0", f.lb_client_side);
    addr(&l, "l1", f.lb_backend_side);
    addr(&b, "b0", f.backend);
    c.run(&["ip", ip, "route", "add", f.vip, "via", f.lb_client_side])
        .unwrap();
    b.run(&[
        "ip",
        ip,
        "route",
        "add",
        "default",
        "via",
        f.lb_backend_side,
    ])
    .unwrap();
    if f.v6 {
        l.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
    } else {
        l.sysctl("net.ipv4.ip_forward", "1").unwrap();
    }
    (c, l, b)
}

fn run_family(f: &Family, tag: &str) {
    let mut r = rig(&format!("ttl-{tag}"));
    r.dataplane
        .apply(&[vip(
            "u",
            f.vip,
            53,
            proto::UDP,
            vec![backend(f.backend, 5353, 1)],
        )])
        .unwrap();
    let (c, l, _b) = topology(f, tag);
    let attach = AttachOptions {
        interface: "l0".into(),
        xdp_mode: XdpModeRequest::Generic,
        persist: false,
        egress: false,
    };
    l.within(|| r.datapath.attach(&attach).map(|_| ()))
        .unwrap()
        .expect("attach xdp_ingress");

    let vip: IpAddr = f.vip.parse().unwrap();
    let lb: IpAddr = f.lb_client_side.parse().unwrap();
    let backend_addr: IpAddr = f.backend.parse().unwrap();

    // Without tc_nat: the kernel's error as it is.
    let (seen, err) = c.within(|| expire_one(f, 40300)).unwrap();
    eprintln!("{tag} without tc_nat: {seen:?}, socket error {err:?}");
    assert_eq!(
        seen,
        Seen {
            outer_src: lb,
            quoted_dst: backend_addr,
            quoted_dport: 5353
        },
        "the kernel expires the rewritten packet and quotes it"
    );
    assert_eq!(err, None, "a quote of the backend matches no client socket");

    // With tc_nat on the egress: from the VIP, quoting the VIP.
    l.within(|| r.datapath.attach_egress().map(|_| ()))
        .unwrap()
        .expect("attach tc_nat");
    let (seen, err) = c.within(|| expire_one(f, 40301)).unwrap();
    eprintln!("{tag} with tc_nat: {seen:?}, socket error {err:?}");
    assert_eq!(
        seen,
        Seen {
            outer_src: vip,
            quoted_dst: vip,
            quoted_dport: 53
        }
    );
    let time_exceeded = if f.v6 { 3 } else { 11 };
    assert_eq!(
        err,
        Some((time_exceeded, vip)),
        "the client's socket hears of it"
    );
    drop(r);
}

/// For comparison, the same packet through the kernel's own NAT
/// (nftables DNAT, conntrack): the error leaves from the original
/// destination too, quoting it.
fn run_family_nftables(f: &Family, tag: &str) {
    let (c, l, _b) = topology(f, tag);
    let (family, daddr, to) = if f.v6 {
        ("ip6", "ip6", format!("[{}]:5353", f.backend))
    } else {
        ("ip", "ip", format!("{}:5353", f.backend))
    };
    l.run(&["nft", "add", "table", family, "rivora_ttl"])
        .unwrap();
    l.run(&[
        "nft",
        "add",
        "chain",
        family,
        "rivora_ttl",
        "pre",
        "{ type nat hook prerouting priority dstnat ; }",
    ])
    .unwrap();
    l.run(&[
        "nft",
        "add",
        "rule",
        family,
        "rivora_ttl",
        "pre",
        daddr,
        "daddr",
        f.vip,
        "udp",
        "dport",
        "53",
        "dnat",
        "to",
        &to,
    ])
    .unwrap();
    let vip: IpAddr = f.vip.parse().unwrap();
    let (seen, err) = c.within(|| expire_one(f, 40302)).unwrap();
    eprintln!("{tag} through nftables DNAT: {seen:?}, socket error {err:?}");
    assert_eq!(
        seen,
        Seen {
            outer_src: vip,
            quoted_dst: vip,
            quoted_dport: 53
        }
    );
    let time_exceeded = if f.v6 { 3 } else { 11 };
    assert_eq!(err, Some((time_exceeded, vip)));
}

#[test]
fn nftables_dnat_answers_a_ttl_1_packet_the_same_way() {
    run_family_nftables(&V4, "n4");
    run_family_nftables(&V6, "n6");
}

#[test]
fn a_ttl_1_packet_to_a_nat_vip_expires_with_an_error_from_the_vip() {
    run_family(&V4, "v4");
}

#[test]
fn a_hop_limit_1_packet_to_a_nat_vip_expires_with_an_error_from_the_vip() {
    run_family(&V6, "v6");
}
