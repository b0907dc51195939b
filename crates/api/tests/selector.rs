//! Drain selectors resolved against programmed backends: every accepted
//! form, the unbracketed `IPV6:PORT` case (which is also a valid IPv6
//! address), and the messages for selectors that match nothing, which must
//! name the selector and the accepted forms (issue 14: a bare 404).

use std::net::IpAddr;

use rivora_api::selector::{BackendRef, FORMS, resolve};
use rivora_api::server::ApiFailure;

fn b(id: u32, addr: &str, port: u16) -> BackendRef {
    BackendRef {
        id,
        addr: addr.parse::<IpAddr>().unwrap(),
        port,
    }
}

fn backends() -> Vec<BackendRef> {
    vec![
        b(1, "10.0.0.1", 8080),
        b(2, "10.0.0.1", 9090),
        b(3, "fd77:2::11", 8080),
        b(4, "fd77:2::12", 80),
    ]
}

fn ids(r: Result<Vec<BackendRef>, ApiFailure>) -> Vec<u32> {
    r.unwrap_or_else(|e| panic!("{e:?}"))
        .iter()
        .map(|b| b.id)
        .collect()
}

#[test]
fn every_accepted_form_selects_its_backends() {
    let all = backends();
    assert_eq!(ids(resolve("2", &all)), [2]);
    assert_eq!(ids(resolve("10.0.0.1:8080", &all)), [1]);
    assert_eq!(ids(resolve(" 10.0.0.1 ", &all)), [1, 2]);
    assert_eq!(ids(resolve("[fd77:2::11]:8080", &all)), [3]);
    assert_eq!(ids(resolve("FD77:2:0::11", &all)), [3]);
    assert_eq!(ids(resolve("[fd77:2::12]", &all)), [4]);
}

#[test]
fn unbracketed_ipv6_with_port_is_taken_as_address_and_port_when_only_that_matches() {
    let all = backends();
    // fd77:2::11:8080 is a valid IPv6 address that no backend has, and
    // fd77:2::11 port 8080 is a backend.
    assert!("fd77:2::11:8080".parse::<IpAddr>().is_ok());
    assert_eq!(ids(resolve("fd77:2::11:8080", &all)), [3]);
    // A port no backend on that address has: not found, with the way to
    // write an address and port.
    let e = resolve("fd77:2::11:9999", &all).unwrap_err();
    assert!(matches!(e, ApiFailure::NotFound(_)), "{e:?}");
    assert_eq!(
        e.message(),
        format!(
            "no backend matches \"fd77:2::11:9999\" (as the IPv6 address fd77:2::11:9999, \
             nor as fd77:2::11 port 9999: write an IPv6 address with a port as \
             [fd77:2::11]:9999); accepted forms: {FORMS}"
        )
    );
}

#[test]
fn an_ipv6_address_that_is_a_backend_wins_and_both_readings_are_ambiguous() {
    // The whole text is a backend's address: it is that address.
    let mut all = backends();
    all.push(b(5, "fd77:2::11:8080", 443));
    // Now both readings match: refused, with both ways to write it.
    let e = resolve("fd77:2::11:8080", &all).unwrap_err();
    assert!(matches!(e, ApiFailure::BadRequest(_)), "{e:?}");
    assert!(
        e.message()
            .contains("write [fd77:2::11]:8080 for the port, or [fd77:2::11:8080] for the address"),
        "{}",
        e.message()
    );
    // Brackets settle it either way.
    assert_eq!(ids(resolve("[fd77:2::11:8080]", &all)), [5]);
    assert_eq!(ids(resolve("[fd77:2::11]:8080", &all)), [3]);
    // Without the port-reading backend, the address reading alone.
    all.retain(|x| x.id != 3);
    assert_eq!(ids(resolve("fd77:2::11:8080", &all)), [5]);
}

#[test]
fn no_match_and_malformed_selectors_name_the_selector_and_the_forms() {
    let all = backends();
    for (sel, kind_404) in [
        ("10.9.9.9", true),
        ("10.0.0.1:1", true),
        ("[fd77:2::99]:80", true),
        ("77", true),
        ("web", false),
        ("10.0.0.1:", false),
        ("[fd77:2::11", false),
    ] {
        let e = resolve(sel, &all).unwrap_err();
        assert_eq!(
            matches!(e, ApiFailure::NotFound(_)),
            kind_404,
            "{sel}: {e:?}"
        );
        assert!(
            e.message().contains(&format!("{sel:?}")),
            "{sel}: {}",
            e.message()
        );
        assert!(e.message().ends_with(FORMS), "{sel}: {}", e.message());
    }
}
