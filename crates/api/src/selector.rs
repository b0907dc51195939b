//! Backend selectors of `rivoractl drain` / `undrain` (the
//! [`crate::DrainRequest::backend`] text) and how they resolve against the
//! programmed backends.
//!
//! Lives in the API crate so the daemon and any fake server in tests
//! resolve selectors the same way, and so the one ambiguous case has one
//! answer: an unbracketed IPv6 address followed by `:PORT`, such as
//! `fd77:2::11:8080`, is itself a valid IPv6 address. It is taken as that
//! address when a backend has it; otherwise, when the text before the last
//! colon is an IPv6 address with a backend on that port, as address and
//! port; when both readings match, it is refused as ambiguous. A selector
//! that matches nothing is answered with the selector, the accepted forms
//! and, for that IPv6 case, how to write the address and port.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use crate::server::ApiFailure;

/// The accepted selector forms, for error messages.
pub const FORMS: &str = "ADDR:PORT (10.0.0.1:8080), [IPV6]:PORT ([fd00::1]:8080), \
                         a bare ADDR or [IPV6] (every backend on that address), \
                         or a numeric backend id (see rivoractl backends)";

/// One programmed backend, as far as a selector can see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendRef {
    /// The backend's numeric id.
    pub id: u32,
    /// Its address.
    pub addr: IpAddr,
    /// Its port.
    pub port: u16,
}

/// The backends `selector` names among `backends`, in their order.
/// Malformed selectors are [`ApiFailure::BadRequest`], selectors matching
/// nothing [`ApiFailure::NotFound`]; both messages name the selector and
/// the accepted forms.
pub fn resolve(selector: &str, backends: &[BackendRef]) -> Result<Vec<BackendRef>, ApiFailure> {
    let s = selector.trim();
    let pick = |f: &dyn Fn(&BackendRef) -> bool| -> Vec<BackendRef> {
        backends.iter().copied().filter(|b| f(b)).collect()
    };
    let not_found = |hint: String| {
        ApiFailure::NotFound(format!(
            "no backend matches {s:?}{hint}; accepted forms: {FORMS}"
        ))
    };
    let found = if let Ok(id) = s.parse::<u32>() {
        pick(&|b| b.id == id)
    } else if let Ok(sa) = s.parse::<SocketAddr>() {
        pick(&|b| b.addr == sa.ip() && b.port == sa.port())
    } else if let Some(v6) = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|r| r.parse::<Ipv6Addr>().ok())
    {
        pick(&|b| b.addr == IpAddr::V6(v6))
    } else if let Ok(ip) = s.parse::<IpAddr>() {
        let as_address = pick(&|b| b.addr == ip);
        let split = ipv6_with_port(s);
        let as_endpoint = split
            .map(|(a, p)| pick(&|b| b.addr == IpAddr::V6(a) && b.port == p))
            .unwrap_or_default();
        match (as_address.is_empty(), as_endpoint.is_empty(), split) {
            (false, true, _) => as_address,
            (true, false, _) => as_endpoint,
            (false, false, Some((a, p))) => {
                return Err(ApiFailure::BadRequest(format!(
                    "{s:?} is ambiguous: backends have the address {ip} and backends have \
                     {a} port {p}; write [{a}]:{p} for the port, or [{ip}] for the address"
                )));
            }
            (_, _, Some((a, p))) => {
                return Err(not_found(format!(
                    " (as the IPv6 address {ip}, nor as {a} port {p}: write an IPv6 address \
                     with a port as [{a}]:{p})"
                )));
            }
            (_, _, None) => as_address,
        }
    } else {
        return Err(ApiFailure::BadRequest(format!(
            "{s:?} is not a backend selector; accepted forms: {FORMS}"
        )));
    };
    if found.is_empty() {
        return Err(not_found(String::new()));
    }
    Ok(found)
}

/// `text` read as an unbracketed IPv6 address and a decimal port after the
/// last colon, when both parts are valid: `fd77:2::11:8080` gives
/// (`fd77:2::11`, 8080).
fn ipv6_with_port(text: &str) -> Option<(Ipv6Addr, u16)> {
    let (addr, port) = text.rsplit_once(':')?;
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((addr.parse().ok()?, port.parse().ok()?))
}
