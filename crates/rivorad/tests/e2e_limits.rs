//! End-to-end SYN rate limiting and client-IP affinity.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;

fn csum(data: &[u8], mut acc: u32) -> u16 {
    for c in data.chunks(2) {
        acc += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// A TCP SYN from `src:sport` to `dst:80` as a raw IPv4 packet.
fn syn(src: [u8; 4], dst: [u8; 4], sport: u16) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&80u16.to_be_bytes());
    t[4..8].copy_from_slice(&(sport as u32 * 7919).to_be_bytes());
    t[12] = 5 << 4;
    t[13] = 0x02;
    t[14..16].copy_from_slice(&64240u16.to_be_bytes());
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&[0, 6, 0, 20]);
    let mut acc = 0u32;
    for c in pseudo.chunks(2) {
        acc += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    let c = csum(&t, acc);
    t[16..18].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0];
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let c = csum(&ip, 0);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(&t);
    ip
}

/// Acceptance: a SYN flood from one source is held to its configured rate
/// while another client's connections all succeed.
#[test]
fn a_syn_flood_is_held_to_its_rate_and_others_are_served() {
    let (rate, burst) = (100u64, 200u64);
    let mut lab = Lab::new("synrl");
    let mut web = vip_yaml(
        "web4",
        VIP4,
        80,
        "tcp",
        &backends_yaml(false, &[(1, 1), (2, 1), (3, 1)]),
    );
    web.push_str(&format!(
        "    synRateLimit: {{ rate: {rate}, burst: {burst} }}\n"
    ));
    lab.write_config(&[web]);
    lab.start(&[]);
    lab.topo
        .client
        .run(&["ip", "addr", "add", "10.200.0.3/24", "dev", "eth0"])
        .unwrap();

    let flood_rate = 2000u64;
    let flood = {
        let ns = lab.topo.client.name().to_string();
        let _ = ns;
        let client = &lab.topo.client;
        std::thread::scope(|scope| {
            let flooder = scope.spawn(|| {
                client
                    .within(move || {
                        // SAFETY: a raw IPPROTO_RAW socket (IP_HDRINCL implied); checked.
                        let fd = unsafe {
                            libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW)
                        };
                        assert!(fd >= 0, "raw socket");
                        let dst = libc::sockaddr_in {
                            sin_family: libc::AF_INET as u16,
                            sin_port: 0,
                            sin_addr: libc::in_addr {
                                s_addr: u32::from_ne_bytes([10, 200, 100, 1]),
                            },
                            sin_zero: [0; 8],
                        };
                        let start = Instant::now();
                        let mut sent = 0u64;
                        while start.elapsed() < Duration::from_secs(3) {
                            let due = (start.elapsed().as_secs_f64() * flood_rate as f64) as u64;
                            while sent < due {
                                let p = syn(
                                    [10, 200, 0, 3],
                                    [10, 200, 100, 1],
                                    20000 + (sent % 40000) as u16,
                                );
                                let n = unsafe {
                                    libc::sendto(
                                        fd,
                                        p.as_ptr() as *const libc::c_void,
                                        p.len(),
                                        0,
                                        &dst as *const _ as *const libc::sockaddr,
                                        std::mem::size_of::<libc::sockaddr_in>() as u32,
                                    )
                                };
                                assert_eq!(n, p.len() as isize, "send a SYN");
                                sent += 1;
                            }
                            std::thread::sleep(Duration::from_micros(500));
                        }
                        unsafe { libc::close(fd) };
                        (sent, start.elapsed())
                    })
                    .unwrap()
            });
            std::thread::sleep(Duration::from_millis(500));
            // Meanwhile the other client connects normally.
            let target: SocketAddr = format!("{VIP4}:80").parse().unwrap();
            let legit = rivora_lab::tcp_round_from_ports(
                client,
                target,
                10000,
                100,
                4,
                Duration::from_secs(3),
            );
            (flooder.join().unwrap(), legit)
        })
    };
    let ((sent, elapsed), legit) = flood;
    assert!(
        legit.all_ok(),
        "the other client's connections all succeed:\n{legit}"
    );
    let stats = lab.stats();
    let limited = stats
        .drops
        .iter()
        .find(|d| d.reason == "rate_limited")
        .unwrap()
        .packets;
    let allowed = sent - limited;
    let expected = burst as f64 + rate as f64 * elapsed.as_secs_f64();
    eprintln!(
        "flood: {sent} SYNs in {elapsed:?} ({} /s), {limited} dropped, {allowed} let through (expected about {expected:.0})",
        sent as f64 / elapsed.as_secs_f64()
    );
    assert!(
        sent as f64 > 0.8 * flood_rate as f64 * 3.0,
        "the flood really ran: {sent}"
    );
    assert!(
        (allowed as f64) <= expected * 1.15 && (allowed as f64) >= expected * 0.85,
        "the flooding source was held to its rate: {allowed} let through, about {expected:.0} expected"
    );
    let web = stats.vips.iter().find(|v| v.name == "web4").unwrap();
    assert_eq!(web.drops, limited, "the drops are counted on the VIP");
}

/// Acceptance: with sessionAffinity clientIP, 100 connections of one client
/// all land on one backend.
#[test]
fn client_ip_affinity_keeps_a_client_on_one_backend() {
    let mut lab = Lab::new("cip");
    let mut web = vip_yaml(
        "web4",
        VIP4,
        80,
        "tcp",
        &backends_yaml(false, &[(1, 1), (2, 1), (3, 1)]),
    );
    web.push_str("    sessionAffinity: clientIP\n");
    let mut web6 = vip_yaml(
        "web6",
        VIP6,
        80,
        "tcp",
        &backends_yaml(true, &[(1, 1), (2, 1), (3, 1)]),
    );
    web6.push_str("    sessionAffinity: clientIP\n");
    lab.write_config(&[web, web6]);
    lab.start(&[]);
    for vip in [VIP4, VIP6] {
        let r = lab.tcp(vip, 80, 10000, 100);
        assert!(r.all_ok(), "{r}");
        assert_eq!(
            r.per_backend.len(),
            1,
            "every connection of the client on one backend:\n{r}"
        );
    }
    // Without the setting the same client spreads.
    let plain = vip_yaml(
        "web4",
        VIP4,
        80,
        "tcp",
        &backends_yaml(false, &[(1, 1), (2, 1), (3, 1)]),
    );
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let generation = lab.status().config_generation;
    lab.write_config(&[plain]);
    lab.wait_reload(generation, since);
    let r = lab.tcp(VIP4, 80, 11000, 100);
    assert!(r.all_ok() && r.per_backend.len() == 3, "{r}");
}
