//! End-to-end packet shapes: fragmented datagrams through a NAT VIP in both
//! directions, and an ICMP "fragmentation needed" from a router on the
//! client's side reaching the backend that owns the connection.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use common::*;

/// Acceptance: 4 KB UDP datagrams (fragmented on the 1500-byte path) to a
/// NAT VIP, IPv4 and IPv6, get their 4 KB answers back.
#[test]
fn fragmented_udp_crosses_a_nat_vip_both_ways() {
    let mut lab = Lab::new("frag");
    let w = [(1, 1), (2, 1), (3, 1)];
    lab.write_config(&[
        vip_yaml("dns4", VIP4, 53, "udp", &backends_yaml(false, &w)),
        vip_yaml("dns6", VIP6, 53, "udp", &backends_yaml(true, &w)),
    ]);
    lab.start(&[]);
    for vip in [VIP4, VIP6] {
        let target = SocketAddr::new(vip.parse().unwrap(), 53);
        let replies = lab
            .topo
            .client
            .within(move || {
                let mut got = Vec::new();
                for i in 0..20 {
                    let any: IpAddr = if target.is_ipv4() {
                        "0.0.0.0".parse().unwrap()
                    } else {
                        "::".parse().unwrap()
                    };
                    let s = UdpSocket::bind(SocketAddr::new(any, 0)).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                    let payload = format!("{i:04}{}", "x".repeat(4000));
                    s.send_to(payload.as_bytes(), target).unwrap();
                    let mut buf = vec![0u8; 65536];
                    let (n, from) = s.recv_from(&mut buf).expect("a 4 KB reply");
                    assert_eq!(from, target, "the reply comes from the VIP");
                    let reply = String::from_utf8_lossy(&buf[..n]).into_owned();
                    assert!(reply.ends_with(&payload), "the whole 4 KB came back");
                    got.push(n);
                }
                got
            })
            .unwrap();
        assert_eq!(replies.len(), 20);
        assert!(replies.iter().all(|&n| n > 4000), "{replies:?}");
    }
    let stats = lab.stats();
    for name in ["dns4", "dns6"] {
        let s = stats.vips.iter().find(|v| v.name == name).unwrap();
        // 20 datagrams of 3 fragments each in, 3 fragments each back.
        assert!(
            s.packets >= 60 && s.reply_packets >= 60,
            "{name}: every fragment was handled: {s:?}"
        );
    }
    let unmatched = stats
        .drops
        .iter()
        .find(|d| d.reason == "passed_unmatched_fragment")
        .unwrap();
    assert_eq!(
        unmatched.packets, 0,
        "no fragment arrived without its first"
    );
}

/// Builds an ICMPv4 "fragmentation needed" (next-hop MTU `mtu`) quoting
/// `quoted` (an IP header and the first bytes after it).
fn frag_needed(quoted: &[u8], mtu: u16) -> Vec<u8> {
    let mut m = vec![3, 4, 0, 0, 0, 0];
    m.extend_from_slice(&mtu.to_be_bytes());
    m.extend_from_slice(quoted);
    let mut sum = 0u32;
    for c in m.chunks(2) {
        sum += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = !(sum as u16);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// Acceptance: a router between the balancer and the client cannot forward
/// a backend's (VIP-sourced) segment and sends "fragmentation needed" to the
/// VIP, quoting it. The error must reach the backend that owns the
/// connection, rewritten so that its TCP stack accepts it: that backend (and
/// no other) then has a path-MTU entry for the client.
#[test]
fn fragmentation_needed_reaches_the_owning_backend() {
    let mut lab = Lab::new("pmtu");
    lab.write_config(&[vip_yaml(
        "web4",
        VIP4,
        80,
        "tcp",
        &backends_yaml(false, &[(1, 1), (2, 1), (3, 1)]),
    )]);
    lab.start(&[]);
    let vip: SocketAddr = format!("{VIP4}:80").parse().unwrap();

    // One connection; capture a data segment the backend sends through the
    // VIP, as a router would see it, and quote it.
    let (owner, error_sent) = lab
        .topo
        .client
        .within(move || {
            // SAFETY: raw sockets with checked return values.
            let pkt = unsafe {
                libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_DGRAM,
                    (libc::ETH_P_IP as u16).to_be() as i32,
                )
            };
            assert!(pkt >= 0, "packet socket");
            let tv = libc::timeval {
                tv_sec: 2,
                tv_usec: 0,
            };
            unsafe {
                libc::setsockopt(
                    pkt,
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    &tv as *const _ as *const libc::c_void,
                    16,
                );
            }
            let mut s = std::net::TcpStream::connect_timeout(&vip, Duration::from_secs(3)).unwrap();
            let local_port = s.local_addr().unwrap().port();
            let mut line = [0u8; 64];
            let n = s.read(&mut line).unwrap();
            let owner = String::from_utf8_lossy(&line[..n])
                .split(' ')
                .next()
                .unwrap()
                .to_string();
            s.write_all(&[b'y'; 1000]).unwrap(); // echoed back: a data segment from the VIP
            let mut quote = None;
            let mut buf = [0u8; 2048];
            for _ in 0..200 {
                let n =
                    unsafe { libc::recv(pkt, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
                if n <= 0 {
                    break;
                }
                let p = &buf[..n as usize];
                let ihl = (p[0] & 0xf) as usize * 4;
                let from_vip = p[9] == 6 && p[12..16] == [10, 200, 100, 1];
                let sport = u16::from_be_bytes([p[ihl], p[ihl + 1]]);
                let dport = u16::from_be_bytes([p[ihl + 2], p[ihl + 3]]);
                let len = u16::from_be_bytes([p[2], p[3]]) as usize;
                if from_vip && sport == 80 && dport == local_port && len > ihl + 20 + 500 {
                    quote = Some(p[..ihl + 8].to_vec());
                    break;
                }
            }
            let quote = quote.expect("captured a data segment from the VIP");
            let icmp = frag_needed(&quote, 1280);
            let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
            assert!(raw >= 0, "raw ICMP socket");
            let dst = libc::sockaddr_in {
                sin_family: libc::AF_INET as u16,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes([10, 200, 100, 1]),
                },
                sin_zero: [0; 8],
            };
            let sent = unsafe {
                libc::sendto(
                    raw,
                    icmp.as_ptr() as *const libc::c_void,
                    icmp.len(),
                    0,
                    &dst as *const _ as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in>() as u32,
                )
            };
            unsafe {
                libc::close(raw);
                libc::close(pkt);
            }
            let _ = s.as_raw_fd();
            (owner, sent == icmp.len() as isize)
        })
        .unwrap();
    assert!(error_sent);

    let client = "10.200.0.2";
    let route_to_client =
        |ns: &rivora_lab::Netns| ns.run(&["ip", "-4", "route", "get", client]).unwrap();
    // The error crosses the balancer to the owner's kernel asynchronously:
    // wait for the owner to have learnt the path MTU, then check that no
    // other backend was touched (the error is one packet, already delivered).
    let owner_ns = (1..=lab.topo.backends.len())
        .find(|i| format!("b{i}") == owner)
        .map(|i| &lab.topo.backends[i - 1])
        .unwrap_or_else(|| panic!("the VIP answered as {owner:?}, not as one of our backends"));
    rivora_lab::poll_until(
        &format!("{owner} (owner of the connection) to learn the path MTU"),
        Duration::from_secs(5),
        Duration::from_millis(50),
        || {
            let route = route_to_client(owner_ns);
            if route.contains("mtu 1280") {
                Ok(())
            } else {
                Err(route)
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for (i, ns) in lab.topo.backends.iter().enumerate() {
        let name = format!("b{}", i + 1);
        let route = route_to_client(ns);
        if name == owner {
            assert!(
                route.contains("mtu 1280"),
                "{name} owns the connection and learnt the path MTU: {route}"
            );
        } else {
            assert!(
                !route.contains("mtu 1280"),
                "{name} does not own it and must not be touched: {route}"
            );
        }
    }
    let stats = lab.stats();
    let unmatched = stats
        .drops
        .iter()
        .find(|d| d.reason == "passed_unmatched_icmp_error")
        .unwrap();
    assert_eq!(unmatched.packets, 0);
}
