//! Which listeners of one Gateway are _Conflicted_ (indistinct), by Gateway API v1.6's rules
//! for `spec.listeners` (the "Distinct Listeners" and "Handling indistinct Listeners" sections
//! of its godoc):
//!
//! - listeners of one protocol must differ in port, or (HTTP, HTTPS, TLS) in hostname: two TCP
//!   or two UDP listeners on one port, or two HTTP/HTTPS/TLS listeners of one protocol, port and
//!   hostname, are all conflicted (`ProtocolConflict` for TCP and UDP, which have no hostname;
//!   `HostnameConflict` for the others);
//! - an implementation that serves TCP listeners must not accept an HTTP, HTTPS or TLS listener
//!   on the port of a TCP listener: every listener sharing a port with a TCP listener is
//!   conflicted (`ProtocolConflict`), the TCP listener too;
//! - plain HTTP and TLS (HTTPS, TLS) on one port cannot be told apart by a client's first bytes
//!   in the way the implementations that serve them need (Envoy Gateway and others refuse it the
//!   same way): `ProtocolConflict`.
//!
//! TCP and UDP on one port are distinct (Rivora keys every VIP by protocol), and HTTPS beside
//! TLS on one port is distinct when the hostnames differ (SNI tells them apart; with the same
//! hostname it cannot, so that is a `HostnameConflict` too).
//!
//! No conflicted listener is picked as a winner: all of them are not Accepted (reason as their
//! `Conflicted` condition says), as the godoc requires and upstream's ListenerSet conformance
//! tests assert (Accepted False, Programmed False and Conflicted True, all `ProtocolConflict`).

use crate::view::ListenerView;

/// `Conflicted` reason: listeners on one port whose protocols cannot share it.
pub const PROTOCOL_CONFLICT: &str = "ProtocolConflict";
/// `Conflicted` reason: listeners of one protocol and port with the same hostname.
pub const HOSTNAME_CONFLICT: &str = "HostnameConflict";

/// The transport a listener protocol rides on; None for a protocol Gateway API does not define
/// (such a listener is `UnsupportedProtocol` and takes part in no conflict).
fn transport(protocol: &str) -> Option<&'static str> {
    match protocol {
        "TCP" | "HTTP" | "HTTPS" | "TLS" => Some("TCP"),
        "UDP" => Some("UDP"),
        _ => None,
    }
}

fn is_tls(protocol: &str) -> bool {
    matches!(protocol, "HTTPS" | "TLS")
}

/// Why `a` and `b` (two listeners of one Gateway, on one port and transport) conflict, if they
/// do.
fn pair(a: &ListenerView, b: &ListenerView) -> Option<&'static str> {
    if a.protocol == "TCP" || b.protocol == "TCP" || a.protocol == "UDP" {
        // TCP beside anything on its port; UDP beside UDP (the transport is equal here).
        return Some(PROTOCOL_CONFLICT);
    }
    if a.protocol == "HTTP" && is_tls(&b.protocol) || is_tls(&a.protocol) && b.protocol == "HTTP" {
        return Some(PROTOCOL_CONFLICT);
    }
    let host = |l: &ListenerView| l.hostname.clone().unwrap_or_default();
    let same_kind = a.protocol == b.protocol || is_tls(&a.protocol) && is_tls(&b.protocol);
    (same_kind && host(a) == host(b)).then_some(HOSTNAME_CONFLICT)
}

/// For each listener (in order): None when it is distinct, else the `Conflicted` reason and a
/// message naming the listeners it conflicts with. `ProtocolConflict` wins over
/// `HostnameConflict` when a listener has both.
pub fn conflicts(listeners: &[ListenerView]) -> Vec<Option<(&'static str, String)>> {
    listeners
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let t = transport(&l.protocol)?;
            let mut reason = None;
            let mut with = Vec::new();
            for (j, o) in listeners.iter().enumerate() {
                if i == j || o.port != l.port || transport(&o.protocol) != Some(t) {
                    continue;
                }
                if let Some(r) = pair(l, o) {
                    if reason != Some(PROTOCOL_CONFLICT) {
                        reason = Some(r);
                    }
                    with.push(format!("{} ({})", o.name, o.protocol));
                }
            }
            let reason = reason?;
            let why = if reason == PROTOCOL_CONFLICT {
                "a TCP or UDP listener must be alone on its port and protocol, and HTTP cannot \
                 share a port with HTTPS or TLS"
            } else {
                "listeners of one protocol and port need distinct hostnames"
            };
            Some((
                reason,
                format!(
                    "port {} ({}) is also the port of listener {}: {why}; none of them is accepted",
                    l.port,
                    l.protocol,
                    with.join(", ")
                ),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::AllowedNamespaces;

    fn l(name: &str, port: u16, protocol: &str, hostname: Option<&str>) -> ListenerView {
        ListenerView {
            name: name.into(),
            port,
            protocol: protocol.into(),
            hostname: hostname.map(Into::into),
            namespaces: AllowedNamespaces::Same,
            kinds: vec![],
        }
    }

    /// (listener name, reason) for every conflicted listener.
    fn conflicted(ls: &[ListenerView]) -> Vec<(String, &'static str)> {
        ls.iter()
            .zip(conflicts(ls))
            .filter_map(|(l, c)| c.map(|(r, _)| (l.name.clone(), r)))
            .collect()
    }

    #[test]
    fn anything_on_a_tcp_listeners_port_conflicts_with_it_and_udp_does_not() {
        let ls = [
            l("tcp", 80, "TCP", None),
            l("http", 80, "HTTP", Some("a.example")),
            l("udp", 80, "UDP", None),
            l("tcp-other", 81, "TCP", None),
            l("odd", 80, "SCTP", None),
        ];
        assert_eq!(
            conflicted(&ls),
            [
                ("tcp".into(), PROTOCOL_CONFLICT),
                ("http".into(), PROTOCOL_CONFLICT)
            ]
        );
        let msg = conflicts(&ls)[0].clone().unwrap().1;
        assert!(msg.contains("http (HTTP)"), "{msg}");
    }

    #[test]
    fn two_listeners_of_one_protocol_and_port_conflict() {
        let ls = [l("a", 53, "UDP", None), l("b", 53, "UDP", None)];
        assert_eq!(
            conflicted(&ls),
            [
                ("a".into(), PROTOCOL_CONFLICT),
                ("b".into(), PROTOCOL_CONFLICT)
            ]
        );
        let ls = [l("a", 5000, "TCP", None), l("b", 5000, "TCP", None)];
        assert_eq!(conflicted(&ls).len(), 2);
    }

    #[test]
    fn http_https_and_tls_are_distinct_by_hostname_but_plain_http_never_shares_with_tls() {
        let distinct = [
            l("web-a", 80, "HTTP", Some("a.example")),
            l("web-b", 80, "HTTP", Some("b.example")),
            l("https", 443, "HTTPS", Some("a.example")),
            l("tls", 443, "TLS", Some("b.example")),
        ];
        assert!(conflicted(&distinct).is_empty());
        let ls = [
            l("web", 443, "HTTP", None),
            l("https", 443, "HTTPS", Some("a.example")),
        ];
        assert_eq!(
            conflicted(&ls),
            [
                ("web".into(), PROTOCOL_CONFLICT),
                ("https".into(), PROTOCOL_CONFLICT)
            ]
        );
        let ls = [
            l("https", 443, "HTTPS", Some("a.example")),
            l("tls", 443, "TLS", Some("a.example")),
            l("any-1", 8080, "HTTP", None),
            l("any-2", 8080, "HTTP", None),
        ];
        assert_eq!(
            conflicted(&ls),
            [
                ("https".into(), HOSTNAME_CONFLICT),
                ("tls".into(), HOSTNAME_CONFLICT),
                ("any-1".into(), HOSTNAME_CONFLICT),
                ("any-2".into(), HOSTNAME_CONFLICT)
            ]
        );
    }
}
