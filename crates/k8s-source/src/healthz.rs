//! The answer of a Service's `healthCheckNodePort`, as kube-proxy gives it (kubernetes
//! `pkg/proxy/healthcheck/service_health.go`, `hcHandler.ServeHTTP`; counting in
//! `pkg/proxy/endpointschangetracker.go`, `LocalReadyEndpoints`).
//!
//! Why byte for byte: external balancers and cloud health checkers are configured against
//! kube-proxy's answer (status code, and some read the weight header). A node running Rivora
//! instead must look the same to them, so that they send ETP Local traffic only to nodes with
//! local endpoints.
//!
//! - Status 200 when the node has at least one local ready endpoint and the proxy is healthy,
//!   else 503; the same headers and body either way.
//! - Headers `Content-Type: application/json`, `X-Content-Type-Options: nosniff`,
//!   `X-Load-Balancing-Endpoint-Weight: <count>` (the HTTP server adds Date and
//!   Content-Length, as Go's does).
//! - Body: tab-indented JSON without a trailing newline:
//!   `{"service": {"namespace", "name"}, "localEndpoints": N, "serviceProxyHealthy": bool}`.
//! - The count is of distinct local endpoint addresses (an address serving two ports counts
//!   once) that are ready. Terminating endpoints do not count, so a node whose last local pod
//!   starts terminating answers 503 and is drained by the external balancer while the pod
//!   still serves its established connections.

use std::collections::BTreeSet;

use crate::endpoints::Endpoint;
use crate::translate::ServiceKey;

/// Distinct addresses of the endpoints on node `node` that are ready and not terminating.
pub fn local_endpoints(endpoints: &[Endpoint], node: &str) -> usize {
    endpoints
        .iter()
        .filter(|e| e.node.as_deref() == Some(node) && e.ready && !e.terminating)
        .map(|e| e.addr)
        .collect::<BTreeSet<_>>()
        .len()
}

/// One health check answer: what the HTTP server sends for any request on the port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// 200 or 503.
    pub status: u16,
    /// Header names and values, in kube-proxy's order.
    pub headers: Vec<(&'static str, String)>,
    /// The JSON body.
    pub body: String,
}

impl Response {
    /// The status line's reason phrase.
    pub fn reason(&self) -> &'static str {
        if self.status == 200 {
            "OK"
        } else {
            "Service Unavailable"
        }
    }
}

/// The answer for Service `service` with `local_endpoints` local ready endpoints; `healthy` is
/// whether this node's proxy works (datapath attached, initial sync done, last apply good), as
/// kube-proxy's `serviceProxyHealthy`.
pub fn response(service: &ServiceKey, local_endpoints: usize, healthy: bool) -> Response {
    let status = if local_endpoints != 0 && healthy {
        200
    } else {
        503
    };
    let body = format!(
        "{{\n\t\"service\": {{\n\t\t\"namespace\": {},\n\t\t\"name\": {}\n\t}},\n\t\"localEndpoints\": {},\n\t\"serviceProxyHealthy\": {}\n}}",
        quote(&service.namespace),
        quote(&service.name),
        local_endpoints,
        healthy
    );
    Response {
        status,
        headers: vec![
            ("Content-Type", "application/json".into()),
            ("X-Content-Type-Options", "nosniff".into()),
            (
                "X-Load-Balancing-Endpoint-Weight",
                local_endpoints.to_string(),
            ),
        ],
        body,
    }
}

/// A double-quoted string as Go's `%q` writes the names it is given. Kubernetes names are
/// DNS labels (lowercase letters, digits, `-`), so only `"` and `\` could need escaping, and
/// JSON and Go agree on those; anything else non-printable is written as a JSON `\u` escape.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn key() -> ServiceKey {
        ServiceKey {
            namespace: "shop".into(),
            name: "web".into(),
        }
    }

    #[test]
    fn the_body_and_headers_are_kube_proxys() {
        let r = response(&key(), 2, true);
        assert_eq!(r.status, 200);
        assert_eq!(r.reason(), "OK");
        // kube-proxy's template, dedented and trimmed of its surrounding newlines.
        let expected = "{\n\
            \t\"service\": {\n\
            \t\t\"namespace\": \"shop\",\n\
            \t\t\"name\": \"web\"\n\
            \t},\n\
            \t\"localEndpoints\": 2,\n\
            \t\"serviceProxyHealthy\": true\n\
            }";
        assert_eq!(r.body, expected);
        assert_eq!(
            r.headers,
            [
                ("Content-Type", "application/json".to_string()),
                ("X-Content-Type-Options", "nosniff".to_string()),
                ("X-Load-Balancing-Endpoint-Weight", "2".to_string()),
            ]
        );
    }

    #[test]
    fn no_local_endpoint_or_an_unhealthy_proxy_is_503_with_the_same_body_shape() {
        let none = response(&key(), 0, true);
        assert_eq!((none.status, none.reason()), (503, "Service Unavailable"));
        assert!(
            none.body.contains("\t\"localEndpoints\": 0,\n"),
            "{}",
            none.body
        );
        assert_eq!(none.headers[2].1, "0");
        let sick = response(&key(), 3, false);
        assert_eq!(sick.status, 503);
        assert!(
            sick.body.ends_with("\t\"serviceProxyHealthy\": false\n}"),
            "{}",
            sick.body
        );
        assert_eq!(sick.headers[2].1, "3");
    }

    #[test]
    fn names_are_quoted() {
        assert_eq!(quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(quote("x\ny"), "\"x\\u000ay\"");
    }

    fn ep(
        addr: [u8; 4],
        port: u16,
        node: Option<&str>,
        ready: bool,
        terminating: bool,
    ) -> Endpoint {
        Endpoint {
            addr: IpAddr::from(addr),
            port,
            ready,
            serving: true,
            terminating,
            node: node.map(str::to_string),
            target: None,
            slice: "s".into(),
        }
    }

    #[test]
    fn the_count_is_distinct_local_ready_non_terminating_addresses() {
        let eps = [
            ep([10, 0, 0, 1], 80, Some("me"), true, false),
            ep([10, 0, 0, 1], 443, Some("me"), true, false),
            ep([10, 0, 0, 2], 80, Some("me"), false, true),
            // Inconsistent but possible in a hand-written slice: ready and terminating.
            ep([10, 0, 0, 3], 80, Some("me"), true, true),
            ep([10, 0, 0, 4], 80, Some("other"), true, false),
            ep([10, 0, 0, 5], 80, None, true, false),
            ep([10, 0, 0, 6], 80, Some("me"), false, false),
        ];
        assert_eq!(local_endpoints(&eps, "me"), 1);
        assert_eq!(local_endpoints(&eps, "other"), 1);
        assert_eq!(local_endpoints(&eps[2..4], "me"), 0);
    }
}
