//! Unit tests of the writer's pure parts (reports, prefixes, validation, slices, flags).
use super::*;

#[test]
fn apply_report_summarizes_long_lists_and_alternate_shows_all() {
    let names: Vec<String> = (1..=4000).map(|i| format!("vip-{i}")).collect();
    let r = ApplyReport {
        added: names.clone(),
        removed: vec!["old".into()],
        backends_added: 28000,
        ..ApplyReport::default()
    };
    let line = r.to_string();
    assert_eq!(
        line,
        "added vip-1,vip-2,vip-3,vip-4,vip-5,vip-6,vip-7,vip-8,vip-9,vip-10 and 3,990 more; \
         removed old; 28000 new backend(s)"
    );
    let full = format!("{r:#}");
    assert!(full.starts_with(&format!("added {}; removed old", names.join(","))));
    // Exactly REPORT_NAMES_SHOWN names stay a plain list.
    assert_eq!(summarize_names(&names[..10], 10), names[..10].join(","));
    assert_eq!(
        summarize_names(&names[..11], 10),
        format!("{} and 1 more", names[..10].join(","))
    );
    assert_eq!(summarize_names(&[], 10), "");
}

#[test]
fn thousands_separators() {
    for (n, s) in [
        (0, "0"),
        (999, "999"),
        (1000, "1,000"),
        (3990, "3,990"),
        (65537, "65,537"),
        (1234567, "1,234,567"),
    ] {
        assert_eq!(thousands(n), s);
    }
}

/// An independent cover: walk the binary trie of 16-bit ports from the
/// root, taking every node wholly inside the range and descending into
/// nodes that straddle it. The nodes taken are the canonical (and
/// minimal) prefix cover.
fn trie_cover(first: u16, last: u16) -> Vec<(u16, u8)> {
    fn walk(lo: u32, bits: u8, first: u32, last: u32, out: &mut Vec<(u16, u8)>) {
        let hi = lo + (1u32 << (16 - bits)) - 1;
        if hi < first || lo > last {
            return;
        }
        if first <= lo && hi <= last {
            out.push((lo as u16, bits));
            return;
        }
        let half = 1u32 << (15 - bits);
        walk(lo, bits + 1, first, last, out);
        walk(lo + half, bits + 1, first, last, out);
    }
    let mut out = Vec::new();
    walk(0, 0, u32::from(first), u32::from(last), &mut out);
    out
}

/// Checks that `prefixes` are aligned, sorted, contiguous and cover
/// exactly `first..=last`, and equal the trie walk's cover.
#[track_caller]
fn check_cover(first: u16, last: u16) {
    let prefixes = port_range_prefixes(first, last);
    let mut next = u32::from(first);
    for &(value, bits) in &prefixes {
        assert!(bits <= 16, "{first}-{last}: {prefixes:?}");
        let size = 1u32 << (16 - bits);
        assert_eq!(
            u32::from(value) % size,
            0,
            "{first}-{last}: unaligned {value}/{bits}"
        );
        assert_eq!(
            u32::from(value),
            next,
            "{first}-{last}: gap or overlap at {value}/{bits}"
        );
        next += size;
    }
    assert_eq!(next, u32::from(last) + 1, "{first}-{last}: {prefixes:?}");
    assert!(
        prefixes.len() <= 30,
        "{first}-{last}: {} prefixes",
        prefixes.len()
    );
    assert_eq!(
        prefixes,
        trie_cover(first, last),
        "{first}-{last}: not minimal"
    );
}

#[test]
fn prefixes_of_known_ranges() {
    assert_eq!(port_range_prefixes(0, 65535), vec![(0, 0)]);
    assert_eq!(port_range_prefixes(80, 80), vec![(80, 16)]);
    assert_eq!(port_range_prefixes(8000, 8000), vec![(8000, 16)]);
    assert_eq!(port_range_prefixes(32768, 65535), vec![(32768, 1)]);
    assert_eq!(port_range_prefixes(1, 65535).len(), 16);
    assert_eq!(port_range_prefixes(1, 65534).len(), 30, "the worst case");
    assert_eq!(
        port_range_prefixes(8000, 8099),
        // 8000-8063, 8064-8095, 8096-8099.
        vec![(8000, 10), (8064, 11), (8096, 14)]
    );
    assert_eq!(port_range_prefixes(5, 4), vec![], "empty range");
}

#[test]
fn prefixes_cover_small_ranges_exactly() {
    // Every range within the bottom and the top 300 ports, where the
    // 0 and 65535 edges are.
    for first in 0..300u16 {
        for last in first..300 {
            check_cover(first, last);
        }
    }
    for first in 65235..=65535u16 {
        for last in first..=65535 {
            check_cover(first, last);
        }
    }
}

#[test]
fn prefixes_cover_ranges_across_the_port_space() {
    // A deterministic spread of wide ranges (64-bit LCG).
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 48) as u16
    };
    for _ in 0..20_000 {
        let (a, b) = (next(), next());
        check_cover(a.min(b), a.max(b));
    }
    // Every range starting or ending on a power-of-two boundary (+-1).
    for i in 0..16 {
        for d in [0i32, 1, -1] {
            let p = ((1i32 << i) + d).clamp(0, 65535) as u16;
            check_cover(0, p);
            check_cover(p, 65535);
            check_cover(p, p);
        }
    }
}

fn prefixes(ports: &[(u16, u8)]) -> Vec<RangePrefix> {
    ports
        .iter()
        .map(|&(port, bits)| RangePrefix {
            addr: "10.0.0.1".parse().unwrap(),
            proto: 6,
            port,
            bits,
        })
        .collect()
}

#[test]
fn ranges_are_rebuilt_from_their_prefixes() {
    for (first, last) in [(8000, 8099), (0, 65535), (1, 65535), (100, 101), (7, 7)] {
        let p = prefixes(&port_range_prefixes(first, last));
        assert_eq!(range_of(&p), Some((first, last)));
    }
    // A gap, a split prefix (not minimal) and an overlap are no range.
    assert_eq!(range_of(&prefixes(&[(8000, 12), (8048, 12)])), None);
    assert_eq!(range_of(&prefixes(&[(0, 1), (32768, 2), (49152, 2)])), None);
    assert_eq!(range_of(&prefixes(&[(0, 1), (0, 2)])), None);
    assert_eq!(range_of(&[]), None);
}

#[test]
fn trie_keys_read_back() {
    let v4: IpAddr = "10.0.0.1".parse().unwrap();
    let v6: IpAddr = "2001:db8::1".parse().unwrap();
    let p = RangePrefix {
        addr: v4,
        proto: 6,
        port: 8000,
        bits: 12,
    };
    let k = p.key4("10.0.0.1".parse().unwrap());
    assert_eq!(k.prefixlen, 8 + 32 + 12);
    assert_eq!(k.port, 8000u16.to_be_bytes());
    assert_eq!(k.addr, [10, 0, 0, 1]);
    assert_eq!(
        RangePrefix::read(v4, 6, k.prefixlen, k.port, k.pad),
        (p, None)
    );
    let any6 = RangePrefix {
        addr: v6,
        proto: 17,
        port: 0,
        bits: 0,
    };
    let k = any6.key6("2001:db8::1".parse().unwrap());
    assert_eq!(k.prefixlen, 8 + 128);
    assert_eq!(
        RangePrefix::read(v6, 17, k.prefixlen, k.port, k.pad),
        (any6, None)
    );
    // Port bits beyond the prefix, or a prefix shorter than the address.
    assert!(
        RangePrefix::read(v4, 6, 52, 8001u16.to_be_bytes(), 0)
            .1
            .is_some()
    );
    assert!(RangePrefix::read(v4, 6, 39, [0, 0], 0).1.is_some());
    assert!(RangePrefix::read(v4, 6, 57, [0, 0], 0).1.is_some());
    assert!(RangePrefix::read(v4, 6, 56, [0, 80], 1).1.is_some());
}

fn spec(name: &str, key: VipKey, backend_port: u16) -> VipSpec {
    let backend = BackendSpec::new("10.1.0.1".parse().unwrap(), backend_port);
    VipSpec::new(name, key, vec![backend])
}

fn addr() -> IpAddr {
    "10.0.0.1".parse().unwrap()
}

#[test]
fn validate_rejects_overlapping_ranges() {
    let a = spec("a", VipKey::range(addr(), 8000, 8099, 6), 0);
    let b = spec("b", VipKey::range(addr(), 8099, 8199, 6), 0);
    let err = validate(&[a.clone(), b]).unwrap_err().to_string();
    assert!(
        err.contains("VIP b (10.0.0.1:8099-8199/tcp) overlaps VIP a (10.0.0.1:8000-8099/tcp)"),
        "{err}"
    );
    let all = spec("all", VipKey::any_port(addr(), 6), 0);
    assert!(validate(&[all.clone(), a.clone()]).is_err());
    // Fine: adjacent, another protocol or address, an exact VIP inside.
    let next = spec("next", VipKey::range(addr(), 8100, 8199, 6), 0);
    let udp = spec("udp", VipKey::range(addr(), 8000, 8099, 17), 0);
    let other = spec(
        "other",
        VipKey::range("10.0.0.2".parse().unwrap(), 8000, 8099, 6),
        0,
    );
    let exact = spec("exact", VipKey::exact(addr(), 8050, 6), 8080);
    assert_eq!(validate(&[a, next, udp, other, exact]).unwrap().len(), 5);
    let exact_in_any = spec("exact", VipKey::exact(addr(), 443, 6), 443);
    assert_eq!(validate(&[all, exact_in_any]).unwrap().len(), 2);
}

#[test]
fn validate_checks_ports_and_limits() {
    let reversed = spec("r", VipKey::range(addr(), 9000, 8000, 6), 0);
    assert!(
        validate(&[reversed])
            .unwrap_err()
            .to_string()
            .contains("reversed")
    );
    let port0 = spec("p", VipKey::exact(addr(), 0, 6), 80);
    assert!(validate(&[port0]).is_err());
    // Port 0 backends keep the destination port: range VIPs only.
    let keep_exact = spec("k", VipKey::exact(addr(), 80, 6), 0);
    let err = validate(&[keep_exact]).unwrap_err().to_string();
    assert!(err.contains("only a port-range VIP"), "{err}");
    let mut limited = spec("l", VipKey::exact(addr(), 80, 6), 80);
    limited.syn_rate_limit = Some(RateLimit { rate: 0, burst: 1 });
    assert!(validate(&[limited.clone()]).is_err());
    limited.syn_rate_limit = Some(RateLimit { rate: 1, burst: 1 });
    assert!(validate(&[limited]).is_ok());
    // FIB forwarding of the rewritten packet: NAT only.
    let mut fib = spec("f", VipKey::exact(addr(), 80, 6), 80);
    fib.nat_fib = true;
    assert!(validate(std::slice::from_ref(&fib)).is_ok());
    fib.mode = Mode::Dsr;
    let err = validate(&[fib]).unwrap_err().to_string();
    assert!(err.contains("applies to mode nat, not dsr"), "{err}");
}

#[test]
fn the_refused_share_is_a_slice_member_only_with_a_weight() {
    let mut v = spec("w", VipKey::exact(addr(), 80, 6), 80);
    let (keys, weights) = maglev_members(&v);
    assert_eq!((keys, weights), (vec!["10.1.0.1:80".to_string()], vec![1]));
    v.reject_weight = 3;
    let (keys, weights) = maglev_members(&v);
    assert_eq!(
        (keys, weights),
        (
            vec!["10.1.0.1:80".to_string(), REJECT_MAGLEV_KEY.to_string()],
            vec![1, 3]
        )
    );
    assert!(validate(std::slice::from_ref(&v)).is_ok());
    // A VIP of nothing but a refused share is valid (it refuses all).
    v.backends.clear();
    assert!(validate(std::slice::from_ref(&v)).is_ok());
    assert_eq!(maglev_members(&v).0, vec![REJECT_MAGLEV_KEY.to_string()]);
    // The pseudo-backend counts towards the slice's 65,535 members.
    v.backends = (0..u16::MAX as u32)
        .map(|i| BackendSpec::new(Ipv4Addr::from(0x0a00_0000 + i).into(), 80))
        .collect();
    v.reject_weight = 0;
    assert!(validate(std::slice::from_ref(&v)).is_ok());
    v.reject_weight = 1;
    let err = validate(&[v]).unwrap_err().to_string();
    assert!(err.contains("too many backends"), "{err}");
}

#[test]
fn validate_bounds_the_range_tries() {
    // 1-65534 takes 30 prefixes: 547 such VIPs need 16,410 > 16,384.
    let many: Vec<VipSpec> = (0..547u32)
        .map(|i| {
            let a = IpAddr::from([10, 0, (i / 250) as u8, (i % 250 + 1) as u8]);
            spec(&format!("v{i}"), VipKey::range(a, 1, 65534, 6), 0)
        })
        .collect();
    let err = validate(&many).unwrap_err();
    assert!(matches!(err, Error::Capacity(_)), "{err}");
    assert!(
        err.to_string()
            .contains("vip_range_map: port-range VIPs need 16410 prefixes"),
        "{err}"
    );
    assert!(validate(&many[..546]).is_ok());
}

#[test]
fn flags_follow_the_spec() {
    let mut s = spec("s", VipKey::exact(addr(), 80, 6), 80);
    assert_eq!(service_flags(&s, 1), abi::service_flags::ACTIVE);
    s.affinity_client_ip = true;
    s.syn_rate_limit = Some(RateLimit { rate: 5, burst: 9 });
    s.key.addr = "2001:db8::1".parse().unwrap();
    assert_eq!(
        service_flags(&s, 0),
        abi::service_flags::ACTIVE
            | abi::service_flags::IPV6
            | abi::service_flags::AFFINITY_CLIENT_IP
            | abi::service_flags::SYN_RATE_LIMIT
    );
}
