//! The allocator's rules over plain values.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::*;

fn pool(name: &str, addresses: &[&str]) -> PoolView {
    PoolView {
        name: name.into(),
        addresses: addresses.iter().map(|a| a.to_string()).collect(),
        auto_assign: true,
        avoid_buggy_ips: false,
        service_selector: None,
        namespace_selector: None,
        priority: 0,
        disabled: false,
        created: "2026-01-01T00:00:00Z".into(),
    }
}

fn selecting(mut p: PoolView, key: &str, value: &str) -> PoolView {
    p.service_selector = Some(LabelSelector {
        match_labels: Some([(key.to_string(), value.to_string())].into()),
        match_expressions: None,
    });
    p
}

fn svc(name: &str) -> ClaimView {
    ClaimView {
        kind: ClaimKind::Service,
        namespace: "ns".into(),
        name: name.into(),
        labels: BTreeMap::new(),
        namespace_labels: BTreeMap::new(),
        families: vec![Family::V4],
        family_policy: FamilyPolicy::SingleStack,
        requested: Vec::new(),
        requested_pool: None,
        current: Vec::new(),
        unsupported: None,
        sharing: None,
    }
}

/// A Gateway as [`crate::observe::gateway_view`] maps one without `spec.addresses`: IPv4 then
/// IPv6, PreferDualStack, never sharing.
fn gw(name: &str) -> ClaimView {
    ClaimView {
        kind: ClaimKind::Gateway,
        families: vec![Family::V4, Family::V6],
        family_policy: FamilyPolicy::PreferDualStack,
        ..svc(name)
    }
}

/// A Gateway requesting one address (SingleStack of its family, as the mapping makes it).
fn gw_requesting(name: &str, addr: &str) -> ClaimView {
    let a = ip(addr);
    ClaimView {
        families: vec![Family::of(&a)],
        family_policy: FamilyPolicy::SingleStack,
        requested: vec![a],
        ..gw(name)
    }
}

fn skey(name: &str) -> ClaimKey {
    ClaimKey::service("ns", name)
}

fn gkey(name: &str) -> ClaimKey {
    ClaimKey::gateway("ns", name)
}

fn sharing(mut s: ClaimView, key: &str, ports: &[(&str, i32)], etp: &str) -> ClaimView {
    s.sharing = Some(Sharing {
        key: key.into(),
        cross_namespace: Vec::new(),
        ports: ports.iter().map(|(p, n)| (p.to_string(), *n)).collect(),
        external_traffic_policy: etp.into(),
        selector: [("app".to_string(), s.name.clone())].into(),
    });
    s
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The addresses of a Service given as `namespace/name`.
fn addrs(out: &Outcome, key: &str) -> Vec<IpAddr> {
    let (ns, name) = key.split_once('/').unwrap();
    claim_addrs(out, &ClaimKey::service(ns, name))
}

fn claim_addrs(out: &Outcome, key: &ClaimKey) -> Vec<IpAddr> {
    out.claims[key].addresses.iter().map(|(a, _)| *a).collect()
}

/// Feeds an outcome back as the Services' current status (what the controller writes).
fn with_status(services: &mut [ClaimView], out: &Outcome) {
    for s in services {
        s.current = claim_addrs(out, &s.key());
    }
}

fn three_pools_and_200_services() -> (Vec<PoolView>, Vec<ClaimView>) {
    let pools = vec![
        selecting(pool("v4", &["10.10.0.0/25"]), "want", "v4"),
        selecting(pool("v6", &["fd00:10::/120"]), "want", "v6"),
        selecting(
            pool("dual", &["10.20.0.0-10.20.0.99", "fd00:20::/121"]),
            "want",
            "dual",
        ),
    ];
    let mut services = Vec::new();
    for i in 0..200 {
        let mut s = svc(&format!("s{i:03}"));
        let (want, fams, policy) = match i % 3 {
            0 => ("v4", vec![Family::V4], FamilyPolicy::SingleStack),
            1 => ("v6", vec![Family::V6], FamilyPolicy::SingleStack),
            _ => (
                "dual",
                vec![Family::V6, Family::V4],
                FamilyPolicy::RequireDualStack,
            ),
        };
        s.labels.insert("want".into(), want.into());
        s.families = fams;
        s.family_policy = policy;
        services.push(s);
    }
    (pools, services)
}

#[test]
fn two_hundred_services_get_distinct_addresses_from_the_right_pools() {
    let (pools, services) = three_pools_and_200_services();
    let out = allocate(&pools, &services);
    let mut seen = BTreeSet::new();
    for s in &services {
        let a = &out.claims[&s.key()];
        assert!(a.failures.is_empty(), "{}: {:?}", s.key(), a.failures);
        assert_eq!(a.addresses.len(), s.families.len(), "{}", s.key());
        for ((addr, from), fam) in a.addresses.iter().zip(&s.families) {
            assert_eq!(Family::of(addr), *fam, "{} in ipFamilies order", s.key());
            assert_eq!(from, &s.labels["want"], "{} from its pool", s.key());
            assert!(seen.insert(*addr), "{addr} given twice");
        }
    }
    assert_eq!(seen.len(), 67 + 67 + 66 * 2);
    let dual = &out.pools["dual"];
    assert_eq!(dual.total[&Family::V4], 100);
    assert_eq!(dual.used[&Family::V4], 66);
    assert_eq!(dual.used[&Family::V6], 66);
}

#[test]
fn existing_addresses_never_move_whatever_changes_around_them() {
    let (mut pools, mut services) = three_pools_and_200_services();
    let first = allocate(&pools, &services);
    with_status(&mut services, &first);
    // Restart with everything different around the old Services: new Services that sort
    // first, pools in another order with other priorities, Services listed in reverse.
    for i in 0..50 {
        let mut s = svc(&format!("a{i:02}"));
        s.labels.insert("want".into(), "v4".into());
        services.push(s);
    }
    services.reverse();
    pools.reverse();
    pools[0].priority = 100;
    let second = allocate(&pools, &services);
    for (key, a) in &first.claims {
        assert_eq!(second.claims[key].addresses, a.addresses, "{key} moved");
    }
    let new: Vec<IpAddr> = (0..50)
        .flat_map(|i| addrs(&second, &format!("ns/a{i:02}")))
        .collect();
    let old: BTreeSet<IpAddr> = first
        .claims
        .values()
        .flat_map(|a| a.addresses.iter().map(|x| x.0))
        .collect();
    assert!(
        new.iter().all(|a| !old.contains(a)),
        "a new Service got an old address"
    );
    assert_eq!(
        new.iter().collect::<BTreeSet<_>>().len(),
        50,
        "distinct new addresses"
    );
}

#[test]
fn a_requested_address_is_given_or_refused_with_the_reason() {
    let pools = vec![pool("p", &["10.0.0.0/29"])];
    let mut generic = svc("a-generic");
    generic.current = Vec::new();
    let mut wants = svc("b-wants");
    wants.requested = vec![ip("10.0.0.0")];
    let mut clash = svc("c-clash");
    clash.requested = vec![ip("10.0.0.0")];
    let mut outside = svc("d-outside");
    outside.requested = vec![ip("192.0.2.1")];
    let out = allocate(&pools, &[generic, wants, clash, outside]);
    // The generic Service sorts first but does not take the requested address.
    assert_eq!(addrs(&out, "ns/b-wants"), [ip("10.0.0.0")]);
    assert_eq!(addrs(&out, "ns/a-generic"), [ip("10.0.0.1")]);
    assert_eq!(
        out.claims[&skey("c-clash")].failures,
        [Failure::AddressTaken(ip("10.0.0.0"), skey("b-wants"))]
    );
    assert!(addrs(&out, "ns/c-clash").is_empty());
    assert_eq!(
        out.claims[&skey("d-outside")].failures,
        [Failure::AddressOutsidePools(ip("192.0.2.1"))]
    );
    assert_eq!(
        out.claims[&skey("d-outside")].failures[0].reason(),
        "AddressOutsidePools"
    );
}

#[test]
fn exhaustion_then_a_freed_address_goes_to_the_waiting_service() {
    let pools = vec![pool("small", &["10.1.0.0/30"])];
    let mut services: Vec<ClaimView> = (0..5).map(|i| svc(&format!("s{i}"))).collect();
    let out = allocate(&pools, &services);
    assert_eq!(
        out.claims[&skey("s4")].failures,
        [Failure::PoolExhausted(Family::V4)]
    );
    assert!(out.pools["small"].exhausted());
    with_status(&mut services, &out);
    let freed = addrs(&out, "ns/s1");
    services.retain(|s| s.name != "s1");
    let again = allocate(&pools, &services);
    assert_eq!(addrs(&again, "ns/s4"), freed);
    for k in ["ns/s0", "ns/s2", "ns/s3"] {
        assert_eq!(addrs(&again, k), addrs(&out, k), "{k} unchanged");
    }
}

#[test]
fn dual_stack_policies() {
    let v4_only = vec![pool("v4", &["10.2.0.0/24"])];
    let both = vec![pool("v4", &["10.2.0.0/24"]), pool("v6", &["fd00:2::/120"])];
    let mut prefer = svc("prefer");
    prefer.families = vec![Family::V4, Family::V6];
    prefer.family_policy = FamilyPolicy::PreferDualStack;
    let mut require = prefer.clone();
    require.name = "require".into();
    require.family_policy = FamilyPolicy::RequireDualStack;
    let mut single_family = require.clone();
    single_family.name = "one".into();
    single_family.families = vec![Family::V6];

    let out = allocate(
        &v4_only,
        &[prefer.clone(), require.clone(), single_family.clone()],
    );
    assert_eq!(addrs(&out, "ns/prefer"), [ip("10.2.0.0")]);
    assert!(out.claims[&skey("prefer")].failures.is_empty());
    assert!(addrs(&out, "ns/require").is_empty(), "both or none");
    assert_eq!(
        out.claims[&skey("require")].failures,
        [Failure::NoPool(Family::V6)]
    );
    assert_eq!(out.claims[&skey("one")].failures, [Failure::NotDualStack]);

    let out = allocate(&both, &[prefer, require]);
    assert_eq!(addrs(&out, "ns/prefer"), [ip("10.2.0.0"), ip("fd00:2::")]);
    assert_eq!(addrs(&out, "ns/require"), [ip("10.2.0.1"), ip("fd00:2::1")]);
}

#[test]
fn a_disabled_pool_keeps_its_addresses_and_gives_no_new_ones() {
    let mut pools = vec![pool("p", &["10.3.0.0/24"])];
    let mut services = vec![svc("old")];
    let out = allocate(&pools, &services);
    with_status(&mut services, &out);
    pools[0].disabled = true;
    services.push(svc("new"));
    let out2 = allocate(&pools, &services);
    assert_eq!(addrs(&out2, "ns/old"), addrs(&out, "ns/old"));
    assert_eq!(
        out2.claims[&skey("new")].failures,
        [Failure::NoPool(Family::V4)]
    );
    assert_eq!(out2.pools["p"].used[&Family::V4], 1);
}

#[test]
fn the_newer_of_two_overlapping_pools_gives_nothing() {
    let mut older = pool("zz-older", &["10.4.0.0/24"]);
    older.created = "2026-01-01T00:00:00Z".into();
    let mut newer = pool("aa-newer", &["10.4.0.128/25", "10.5.0.0/24"]);
    newer.created = "2026-02-01T00:00:00Z".into();
    newer.priority = 10;
    let out = allocate(&[newer, older], &[svc("s")]);
    assert_eq!(out.pools["aa-newer"].overlaps.as_deref(), Some("zz-older"));
    assert_eq!(
        out.claims[&skey("s")].addresses,
        [(ip("10.4.0.0"), "zz-older".into())]
    );
}

#[test]
fn avoid_buggy_ips_skips_dot_zero_and_dot_255() {
    let mut p = pool("p", &["10.6.0.255-10.6.1.1"]);
    p.avoid_buggy_ips = true;
    let out = allocate(&[p], &[svc("s")]);
    assert_eq!(addrs(&out, "ns/s"), [ip("10.6.1.1")]);
    assert_eq!(out.pools["p"].total[&Family::V4], 1);
}

#[test]
fn pool_choice_follows_requests_selectors_auto_assign_and_priority() {
    let low = pool("low", &["10.7.0.0/24"]);
    let mut high = pool("high", &["10.8.0.0/24"]);
    high.priority = 5;
    let mut manual = pool("manual", &["10.9.0.0/24"]);
    manual.auto_assign = false;
    let pools = vec![low, high, manual];
    let mut by_pool = svc("by-pool");
    by_pool.requested_pool = Some("manual".into());
    let mut missing_pool = svc("missing-pool");
    missing_pool.requested_pool = Some("nope".into());
    let mut sctp = svc("sctp");
    sctp.unsupported = Some(Unsupported::Protocol("SCTP".into()));
    let out = allocate(&pools, &[svc("plain"), by_pool, missing_pool, sctp]);
    assert_eq!(
        out.claims[&skey("plain")].addresses,
        [(ip("10.8.0.0"), "high".into())]
    );
    assert_eq!(
        out.claims[&skey("by-pool")].addresses,
        [(ip("10.9.0.0"), "manual".into())]
    );
    assert_eq!(
        out.claims[&skey("missing-pool")].failures,
        [Failure::PoolUnusable("nope".into())]
    );
    assert_eq!(
        out.claims[&skey("sctp")].failures,
        [Failure::UnsupportedProtocol("SCTP".into())]
    );
    assert!(addrs(&out, "ns/sctp").is_empty());
}

#[test]
fn compatible_services_share_an_address_and_incompatible_ones_do_not() {
    let pools = vec![pool("p", &["10.11.0.0/29"])];
    let tcp = sharing(svc("dns-tcp"), "dns", &[("TCP", 53)], "Cluster");
    let udp = sharing(svc("dns-udp"), "dns", &[("UDP", 53)], "Cluster");
    let clash = sharing(svc("dns-tcp2"), "dns", &[("TCP", 53)], "Cluster");
    let local = sharing(svc("dns-local"), "dns", &[("TCP", 853)], "Local");
    let mut other_ns = sharing(svc("dns-other"), "dns", &[("TCP", 5353)], "Cluster");
    other_ns.namespace = "elsewhere".into();
    let out = allocate(
        &pools,
        &[
            tcp.clone(),
            udp.clone(),
            clash.clone(),
            local.clone(),
            other_ns.clone(),
        ],
    );
    let a = addrs(&out, "ns/dns-tcp");
    assert_eq!(addrs(&out, "ns/dns-udp"), a, "TCP/53 and UDP/53 share");
    for k in ["ns/dns-tcp2", "ns/dns-local", "elsewhere/dns-other"] {
        assert_ne!(addrs(&out, k), a, "{k} must not share");
        assert_eq!(
            addrs(&out, k).len(),
            1,
            "{k} still gets an address of its own"
        );
    }
    assert_eq!(
        out.pools["p"].used[&Family::V4],
        4,
        "distinct addresses are counted once"
    );

    // Asking for the shared address explicitly: refused with the reason, or allowed across
    // namespaces when both opt in.
    let mut wants = clash.clone();
    wants.requested = vec![a[0]];
    let mut cross = other_ns.clone();
    cross.requested = vec![a[0]];
    if let Some(s) = cross.sharing.as_mut() {
        s.cross_namespace = vec!["ns".into()];
    }
    let mut tcp_open = tcp.clone();
    if let Some(s) = tcp_open.sharing.as_mut() {
        s.cross_namespace = vec!["*".into()];
    }
    // The sharers already hold it (imported first), the requests come after.
    tcp_open.current = a.clone();
    let mut udp = udp;
    udp.current = a.clone();
    // Every holder must opt in: the UDP sharer names the other namespace.
    if let Some(s) = udp.sharing.as_mut() {
        s.cross_namespace = vec!["elsewhere".into()];
    }
    let out = allocate(&pools, &[tcp_open, udp, wants, cross]);
    match &out.claims[&skey("dns-tcp2")].failures[..] {
        [Failure::SharingRefused(ip, by, why)] => {
            assert_eq!((*ip, by), (a[0], &skey("dns-tcp")));
            assert!(why.contains("TCP/53"), "{why}");
        }
        other => panic!("expected SharingRefused, got {other:?}"),
    }
    assert_eq!(
        addrs(&out, "elsewhere/dns-other"),
        a,
        "cross-namespace sharing when both allow it"
    );
}

#[test]
fn cross_namespace_sharing_needs_every_holder_to_opt_in() {
    let pools = vec![pool("p", &["10.13.0.0/29"])];
    let mut open = sharing(svc("open"), "k", &[("TCP", 80)], "Cluster");
    let mut closed = sharing(svc("closed"), "k", &[("TCP", 81)], "Cluster");
    let held = vec![ip("10.13.0.1")];
    open.current = held.clone();
    closed.current = held.clone();
    if let Some(s) = open.sharing.as_mut() {
        s.cross_namespace = vec!["*".into()];
    }
    let mut guest = sharing(svc("guest"), "k", &[("TCP", 82)], "Cluster");
    guest.namespace = "other".into();
    guest.requested = held.clone();
    if let Some(s) = guest.sharing.as_mut() {
        s.cross_namespace = vec!["ns".into()];
    }
    let out = allocate(&pools, &[open, closed, guest]);
    assert!(addrs(&out, "other/guest").is_empty());
    assert!(
        matches!(&out.claims[&ClaimKey::service("other", "guest")].failures[..], [Failure::SharingRefused(_, by, why)] if *by == skey("closed") && why.contains("namespaces")),
        "{:?}",
        out.claims[&ClaimKey::service("other", "guest")].failures
    );
}

#[test]
fn a_sharer_keeps_the_shared_address_across_restarts() {
    let pools = vec![pool("p", &["10.12.0.0/29"])];
    let mut services = vec![
        sharing(svc("b"), "k", &[("TCP", 80)], "Cluster"),
        sharing(svc("c"), "k", &[("TCP", 443)], "Cluster"),
        svc("a-plain"),
    ];
    let out = allocate(&pools, &services);
    assert_eq!(addrs(&out, "ns/b"), addrs(&out, "ns/c"));
    with_status(&mut services, &out);
    services.reverse();
    let again = allocate(&pools, &services);
    for s in &services {
        assert_eq!(
            claim_addrs(&again, &s.key()),
            claim_addrs(&out, &s.key()),
            "{}",
            s.key()
        );
    }
}

#[test]
fn gateways_and_services_share_pools_without_duplicate_addresses() {
    let pools = vec![
        pool("v4", &["10.14.0.0/29"]),
        pool("v6", &["fd00:14::/125"]),
    ];
    // A Service and a Gateway with the same namespace/name are two claimants; a Gateway never
    // shares, not even with a Service that has a sharing key.
    let claims = vec![
        svc("edge"),
        gw("edge"),
        sharing(svc("dns"), "k", &[("UDP", 53)], "Cluster"),
        sharing(svc("dns-tcp"), "k", &[("TCP", 53)], "Cluster"),
        gw("web"),
        gw_requesting("pinned", "10.14.0.6"),
    ];
    let out = allocate(&pools, &claims);
    assert_eq!(
        out.claims.len(),
        6,
        "one result per claimant: {:?}",
        out.claims
    );
    for c in &claims {
        assert!(
            out.claims[&c.key()].failures.is_empty(),
            "{}: {:?}",
            c.key(),
            out.claims[&c.key()].failures
        );
    }
    assert_eq!(
        claim_addrs(&out, &skey("dns")),
        claim_addrs(&out, &skey("dns-tcp")),
        "compatible Services still share"
    );
    // Every address held by a Gateway belongs to it alone.
    let mut holders: BTreeMap<IpAddr, Vec<ClaimKey>> = BTreeMap::new();
    for (k, a) in &out.claims {
        for (addr, _) in &a.addresses {
            holders.entry(*addr).or_default().push(k.clone());
        }
    }
    for (addr, by) in &holders {
        if by.iter().any(|k| k.kind == ClaimKind::Gateway) {
            assert_eq!(by.len(), 1, "{addr} held by {by:?}");
        }
    }
    // Gateways take an address of each family by default; the Service only IPv4.
    assert_eq!(claim_addrs(&out, &gkey("edge")).len(), 2);
    assert_eq!(claim_addrs(&out, &gkey("web")).len(), 2);
    assert_eq!(claim_addrs(&out, &gkey("pinned")), [ip("10.14.0.6")]);
    // Pool counts include both kinds: 2 Service addresses (two Services share one) + 3 Gateway
    // IPv4 ones.
    assert_eq!(out.pools["v4"].used[&Family::V4], 2 + 3);
    assert_eq!(out.pools["v6"].used[&Family::V6], 2);
}

#[test]
fn a_gateways_status_address_is_imported_before_a_new_service_can_take_it() {
    let pools = vec![pool("p", &["10.15.0.0/30"])];
    // The Gateway was given the pool's first address before a restart; after it, Services
    // that sort before it (namespace "a-...") and that ask for nothing in particular arrive,
    // and one asks for exactly that address.
    let mut gateway = gw("gw");
    gateway.families = vec![Family::V4];
    gateway.current = vec![ip("10.15.0.0")];
    let mut early = svc("early");
    early.namespace = "a-first".into();
    let mut thief = svc("thief");
    thief.namespace = "a-first".into();
    thief.requested = vec![ip("10.15.0.0")];
    let mut claims = vec![early, thief, gateway];
    let out = allocate(&pools, &claims);
    assert_eq!(claim_addrs(&out, &gkey("gw")), [ip("10.15.0.0")], "kept");
    assert_eq!(
        claim_addrs(&out, &ClaimKey::service("a-first", "early")),
        [ip("10.15.0.1")]
    );
    let thief_result = &out.claims[&ClaimKey::service("a-first", "thief")];
    assert!(thief_result.addresses.is_empty());
    assert_eq!(
        thief_result.failures,
        [Failure::AddressTaken(ip("10.15.0.0"), gkey("gw"))]
    );
    assert!(
        thief_result.failures[0]
            .to_string()
            .contains("assigned to Gateway ns/gw"),
        "{}",
        thief_result.failures[0]
    );
    // A failover with the status written back: nothing moves, in any input order.
    with_status(&mut claims, &out);
    claims.reverse();
    let again = allocate(&pools, &claims);
    assert_eq!(again, out);
}

#[test]
fn a_gateway_requesting_a_services_address_is_refused_with_the_reason() {
    let pools = vec![pool("p", &["10.16.0.0/29"])];
    // The Service holds the address and would share it (it has a sharing key): a Gateway
    // still may not, and the holder is named with its kind.
    let mut holder = sharing(svc("holder"), "k", &[("TCP", 80)], "Cluster");
    holder.current = vec![ip("10.16.0.3")];
    let wants = gw_requesting("wants", "10.16.0.3");
    let out = allocate(&pools, &[holder, wants]);
    assert_eq!(addrs(&out, "ns/holder"), [ip("10.16.0.3")]);
    let refused = &out.claims[&gkey("wants")];
    assert!(refused.addresses.is_empty());
    assert_eq!(
        refused.failures,
        [Failure::AddressTaken(ip("10.16.0.3"), skey("holder"))]
    );
    assert_eq!(refused.failures[0].reason(), "AddressInUse");

    // And the other way round: a sharing Service asking for a Gateway's address.
    let mut gateway = gw_requesting("owner", "10.16.0.4");
    gateway.current = vec![ip("10.16.0.4")];
    let mut asks = sharing(svc("asks"), "k", &[("TCP", 443)], "Cluster");
    asks.requested = vec![ip("10.16.0.4")];
    let out = allocate(&pools, &[gateway.clone(), asks.clone()]);
    assert_eq!(claim_addrs(&out, &gkey("owner")), [ip("10.16.0.4")]);
    assert_eq!(
        out.claims[&skey("asks")].failures,
        [Failure::AddressTaken(ip("10.16.0.4"), gkey("owner"))]
    );
    assert_eq!(
        Sharing::refusal(&asks, &gateway).as_deref(),
        Some("Gateway ns/owner never shares its address")
    );

    // An unsupported address type gets no address and its own reason.
    let mut hostname = gw("by-name");
    hostname.unsupported = Some(Unsupported::AddressType("Hostname".into()));
    let out = allocate(&pools, &[hostname]);
    let a = &out.claims[&gkey("by-name")];
    assert!(a.addresses.is_empty());
    assert_eq!(
        a.failures,
        [Failure::UnsupportedAddressType("Hostname".into())]
    );
    assert_eq!(a.failures[0].reason(), "UnsupportedAddress");
}

#[test]
fn a_gateway_gets_what_its_pools_offer_and_both_or_none_when_it_asks_for_both() {
    let v4_only = vec![pool("v4", &["10.17.0.0/30"])];
    let out = allocate(&v4_only, &[gw("auto")]);
    assert_eq!(claim_addrs(&out, &gkey("auto")), [ip("10.17.0.0")]);
    assert!(
        out.claims[&gkey("auto")].failures.is_empty(),
        "one family is enough without a request"
    );
    let mut both = gw("both");
    both.requested = vec![ip("10.17.0.1"), ip("fd00:17::1")];
    both.family_policy = FamilyPolicy::RequireDualStack;
    let out = allocate(&v4_only, &[both]);
    assert!(claim_addrs(&out, &gkey("both")).is_empty(), "both or none");
    assert_eq!(
        out.claims[&gkey("both")].failures,
        [Failure::AddressOutsidePools(ip("fd00:17::1"))]
    );
}

#[test]
fn the_order_of_work_is_deterministic_across_kinds() {
    // One address, a Service and a Gateway of the same namespace/name both waiting: whatever
    // the input order, the same one gets it (the Service: key order is namespace, name,
    // kind) and the other fails with the same reason.
    let pools = vec![pool("one", &["10.18.0.0/32"])];
    let mut g = gw("same");
    g.families = vec![Family::V4];
    let a = vec![svc("same"), g.clone()];
    let b = vec![g, svc("same")];
    let out_a = allocate(&pools, &a);
    let out_b = allocate(&pools, &b);
    assert_eq!(out_a, out_b);
    assert_eq!(addrs(&out_a, "ns/same"), [ip("10.18.0.0")]);
    assert_eq!(
        out_a.claims[&gkey("same")].failures,
        [Failure::PoolExhausted(Family::V4)]
    );
    assert!(skey("same") < gkey("same"));
    assert!(gkey("a") < skey("b"), "namespace and name first, kind last");

    // A larger mix, listed in several orders, gives one result.
    let pools = vec![
        pool("v4", &["10.19.0.0/28"]),
        pool("v6", &["fd00:19::/124"]),
    ];
    let mut mix: Vec<ClaimView> = Vec::new();
    for i in 0..12 {
        let mut s = if i % 2 == 0 {
            svc(&format!("c{}", i / 3))
        } else {
            gw(&format!("c{}", i / 3))
        };
        s.namespace = format!("ns{}", i % 3);
        mix.push(s);
    }
    let reference = allocate(&pools, &mix);
    assert_eq!(reference.claims.len(), mix.len());
    for rotation in 1..mix.len() {
        let mut other = mix.clone();
        other.rotate_left(rotation);
        if rotation % 2 == 1 {
            other.reverse();
        }
        assert_eq!(allocate(&pools, &other), reference, "rotation {rotation}");
    }
}

#[test]
fn overlapping_ipv6_ranges_of_one_pool_are_invalid_and_counted_once() {
    // 32 + 13 addresses listed, 33 distinct (the user's 45 against 33).
    let mut p = pool("p6", &["fd00:9::1-fd00:9::20", "fd00:9::15-fd00:9::21"]);
    p.created = "2026-01-01T00:00:00Z".into();
    let mut old = svc("old");
    old.families = vec![Family::V6];
    old.current = vec![ip("fd00:9::16")];
    let mut new = svc("new");
    new.families = vec![Family::V6];
    let out = allocate(&[p.clone()], &[old, new]);
    let r = &out.pools["p6"];
    let why = r.invalid.as_deref().expect("flagged invalid");
    assert!(
        why.contains("fd00:9::1-fd00:9::20") && why.contains("fd00:9::15-fd00:9::21"),
        "{why}"
    );
    assert_eq!(r.total[&Family::V6], 33);
    assert_eq!(r.available(Family::V6), 32);
    // What it gave stays; nothing new comes from it.
    assert_eq!(addrs(&out, "ns/old"), [ip("fd00:9::16")]);
    assert!(addrs(&out, "ns/new").is_empty());

    // A newer pool overlapping one of its IPv6 ranges is flagged as overlapping too.
    let mut newer = pool("newer", &["fd00:9::21-fd00:9::30"]);
    newer.created = "2026-02-01T00:00:00Z".into();
    let out = allocate(&[p, newer], &[]);
    assert_eq!(out.pools["newer"].overlaps.as_deref(), Some("p6"));
}

#[test]
fn overlapping_ipv6_ranges_of_two_pools_leave_the_newer_one_out() {
    let mut older = pool("b-older", &["fd00:8::1-fd00:8::20"]);
    older.created = "2026-01-01T00:00:00Z".into();
    let mut newer = pool("a-newer", &["fd00:8::10-fd00:8::40"]);
    newer.created = "2026-02-01T00:00:00Z".into();
    newer.priority = 10;
    let mut s = svc("s");
    s.families = vec![Family::V6];
    let out = allocate(&[newer, older], &[s]);
    assert_eq!(out.pools["a-newer"].overlaps.as_deref(), Some("b-older"));
    assert_eq!(out.pools["b-older"].overlaps, None);
    assert_eq!(
        out.claims[&skey("s")].addresses,
        [(ip("fd00:8::1"), "b-older".into())]
    );
}

#[test]
fn a_dual_stack_service_requesting_one_address_gets_that_family_or_the_true_reason() {
    let pools = vec![pool("dual", &["10.7.0.0/29", "fd00:7::/125"])];
    let dual = |name: &str, fams: Vec<Family>, policy: FamilyPolicy, req: &str| ClaimView {
        families: fams,
        family_policy: policy,
        requested: vec![ip(req)],
        ..svc(name)
    };
    let both = || vec![Family::V6, Family::V4];
    let holder = dual(
        "a-holder",
        vec![Family::V4],
        FamilyPolicy::SingleStack,
        "10.7.0.3",
    );
    let prefer = dual(
        "b-prefer",
        both(),
        FamilyPolicy::PreferDualStack,
        "10.7.0.1",
    );
    let prefer_taken = dual("c-taken", both(), FamilyPolicy::PreferDualStack, "10.7.0.3");
    let require = dual(
        "d-require",
        both(),
        FamilyPolicy::RequireDualStack,
        "10.7.0.2",
    );
    let single_v6 = dual(
        "e-v4-only",
        vec![Family::V4],
        FamilyPolicy::SingleStack,
        "fd00:7::1",
    );
    let out = allocate(&pools, &[holder, prefer, prefer_taken, require, single_v6]);
    // PreferDualStack: the requested family only, and no word about the other.
    assert_eq!(addrs(&out, "ns/b-prefer"), [ip("10.7.0.1")]);
    assert!(out.claims[&skey("b-prefer")].failures.is_empty());
    assert_eq!(
        out.claims[&skey("c-taken")].failures,
        [Failure::AddressTaken(ip("10.7.0.3"), skey("a-holder"))],
        "the request's own failure, not NoPool for IPv6 (the pool has IPv6)"
    );
    // RequireDualStack: both or none, and the reason is the request, not the pools.
    assert!(addrs(&out, "ns/d-require").is_empty());
    let f = &out.claims[&skey("d-require")].failures;
    assert_eq!(f, &[Failure::RequestNotDualStack(Family::V6)]);
    assert_eq!(f[0].reason(), "InvalidRequest");
    assert!(
        f[0].to_string().contains("no IPv6 address is requested"),
        "{}",
        f[0]
    );
    assert_eq!(
        out.claims[&skey("e-v4-only")].failures,
        [Failure::RequestedFamilyUnwanted(ip("fd00:7::1"))]
    );
    for (k, a) in &out.claims {
        assert!(
            !a.failures.iter().any(|f| matches!(f, Failure::NoPool(_))),
            "{k}: {:?}",
            a.failures
        );
    }
}

#[test]
fn a_dual_stack_pool_says_which_family_is_used_up() {
    let pools = vec![pool("dual", &["10.8.0.0/31", "fd00:8::/120"])];
    let services: Vec<ClaimView> = (0..3).map(|i| svc(&format!("s{i}"))).collect();
    let out = allocate(&pools, &services);
    let r = &out.pools["dual"];
    assert!(!r.exhausted(), "IPv6 is free");
    assert_eq!(r.exhausted_families(), [Family::V4]);
    assert_eq!((r.available(Family::V4), r.available(Family::V6)), (0, 256));
    assert_eq!(
        out.claims[&skey("s2")].failures,
        [Failure::PoolExhausted(Family::V4)]
    );
}
