//! `rivorad --check-config FILE`: validates a file without touching the
//! datapath, and shows what applying it would change against the
//! configuration a running rivorad forwards with (read over its API). This
//! is the safe way to "try a config": starting a second rivorad is refused.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use rivora_api::VipInfo;
use rivora_dataplane::{Mode, VipSpec};

use crate::source::file::from_config;
use crate::state::{proto_name, syn_rate_limit};

/// What an operator compares between the file and the running VIPs: the
/// fields `GET /v1/vips` reports, derived the same way from both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VipView {
    /// Address, ports and protocol as `10.0.0.1:80/tcp`.
    pub endpoint: String,
    /// Forwarding mode, plus `natForwarding` for NAT VIPs.
    pub mode: String,
    /// `none` or `clientIP`.
    pub affinity: String,
    /// The SYN limit in force, as the API shows it.
    pub syn_rate_limit: String,
    /// Backend `addr:port` to weight.
    pub backends: BTreeMap<String, u32>,
}

fn endpoint(addr: &str, port: u16, port_last: u16, proto: &str) -> String {
    let host = if addr.contains(':') {
        format!("[{addr}]")
    } else {
        addr.to_string()
    };
    let ports = match (port, port_last) {
        (0, 65535) => "any".to_string(),
        (p, l) if l == 0 || l == p => p.to_string(),
        (p, l) => format!("{p}-{l}"),
    };
    format!("{host}:{ports}/{proto}")
}

fn backend_key(addr: &str, port: u16) -> String {
    if addr.contains(':') {
        format!("[{addr}]:{port}")
    } else {
        format!("{addr}:{port}")
    }
}

fn mode_text(mode: &str, nat_forwarding: &str) -> String {
    if nat_forwarding.is_empty() {
        mode.to_string()
    } else {
        format!("{mode} ({nat_forwarding})")
    }
}

impl VipView {
    /// The view of a VIP the file asks for, under `node_limit`.
    pub fn of_spec(s: &VipSpec, node_limit: Option<rivora_dataplane::model::RateLimit>) -> Self {
        let proto = proto_name(s.key.proto);
        let nat_forwarding = match (s.mode, s.nat_fib) {
            (Mode::Nat, true) => "fib",
            (Mode::Nat, false) => "kernel",
            _ => "",
        };
        Self {
            endpoint: endpoint(&s.key.addr.to_string(), s.key.port, s.key.port_last, proto),
            mode: mode_text(s.mode.as_str(), nat_forwarding),
            affinity: if s.affinity_client_ip {
                "clientIP"
            } else {
                "none"
            }
            .to_string(),
            syn_rate_limit: syn_rate_limit(s.key.proto, s.syn_rate_limit, node_limit),
            backends: s
                .backends
                .iter()
                .map(|b| (backend_key(&b.key.addr.to_string(), b.key.port), b.weight))
                .collect(),
        }
    }

    /// The view of a VIP a running rivorad reports.
    pub fn of_info(v: &VipInfo) -> Self {
        Self {
            endpoint: endpoint(&v.address, v.port, v.port_last, &v.protocol),
            mode: mode_text(&v.mode, &v.nat_forwarding),
            affinity: v.session_affinity.clone(),
            syn_rate_limit: v.syn_rate_limit.clone(),
            backends: v
                .backends
                .iter()
                .map(|b| (backend_key(&b.address, b.port), b.weight))
                .collect(),
        }
    }
}

/// The changes of one VIP present on both sides, in words.
fn vip_changes(old: &VipView, new: &VipView) -> Vec<String> {
    let mut out = Vec::new();
    for (what, a, b) in [
        ("address", &old.endpoint, &new.endpoint),
        ("mode", &old.mode, &new.mode),
        ("sessionAffinity", &old.affinity, &new.affinity),
        ("synRateLimit", &old.syn_rate_limit, &new.syn_rate_limit),
    ] {
        if a != b {
            out.push(format!("{what} {a} -> {b}"));
        }
    }
    for (b, w) in &new.backends {
        match old.backends.get(b) {
            None => out.push(format!("backend {b} added (weight {w})")),
            Some(o) if o != w => out.push(format!("backend {b} weight {o} -> {w}")),
            Some(_) => {}
        }
    }
    for b in old
        .backends
        .keys()
        .filter(|b| !new.backends.contains_key(*b))
    {
        out.push(format!("backend {b} removed (drains for the retire grace)"));
    }
    out
}

/// What applying `file` (name to view) over `running` would change, as
/// report lines; empty when nothing would.
pub fn diff(running: &BTreeMap<String, VipView>, file: &BTreeMap<String, VipView>) -> Vec<String> {
    let mut out = Vec::new();
    for (name, new) in file {
        match running.get(name) {
            None => out.push(format!(
                "+ {name}: added, {} {} with {} backend(s)",
                new.endpoint,
                new.mode,
                new.backends.len()
            )),
            Some(old) => {
                let changes = vip_changes(old, new);
                if !changes.is_empty() {
                    out.push(format!("~ {name}: {}", changes.join("; ")));
                }
            }
        }
    }
    for (name, old) in running {
        if !file.contains_key(name) {
            out.push(format!("- {name}: removed ({})", old.endpoint));
        }
    }
    out
}

/// Runs the check: `Ok(text)` to print for a valid file, `Err(text)` with
/// every problem for an invalid one.
pub async fn run(file: &Path, api_socket: &Path) -> Result<String, String> {
    let config = rivora_config::load(file).map_err(|e| e.to_string())?;
    let desired = from_config(&config);
    let specs = desired.specs();
    let node_limit = desired.node.syn_rate_limit;
    let wanted: BTreeMap<String, VipView> = specs
        .iter()
        .map(|s| (s.name.clone(), VipView::of_spec(s, node_limit)))
        .collect();
    let mut out = format!(
        "{}: valid ({} VIP(s), {} backend(s))\n",
        file.display(),
        specs.len(),
        specs.iter().map(|s| s.backends.len()).sum::<usize>()
    );
    let client = rivora_api::Client::new(api_socket);
    match client.vips().await {
        Err(e) => {
            let _ = writeln!(
                out,
                "no running rivorad to compare with at {} ({e}); nothing was changed",
                api_socket.display()
            );
        }
        Ok(vips) => {
            let running: BTreeMap<String, VipView> = vips
                .iter()
                .map(|v| (v.name.clone(), VipView::of_info(v)))
                .collect();
            let lines = diff(&running, &wanted);
            if lines.is_empty() {
                let _ = writeln!(
                    out,
                    "against the running rivorad ({}): no change to the VIPs",
                    api_socket.display()
                );
            } else {
                let _ = writeln!(
                    out,
                    "against the running rivorad ({}), applying it would change:",
                    api_socket.display()
                );
                for l in &lines {
                    let _ = writeln!(out, "  {l}");
                }
            }
            let _ = writeln!(
                out,
                "(health checks and the bgp/l2Announce sections are validated, not compared); \
                 nothing was changed"
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(endpoint: &str, backends: &[(&str, u32)]) -> VipView {
        VipView {
            endpoint: endpoint.into(),
            mode: "nat (kernel)".into(),
            affinity: "none".into(),
            syn_rate_limit: "none".into(),
            backends: backends.iter().map(|(b, w)| (b.to_string(), *w)).collect(),
        }
    }

    #[test]
    fn diff_names_every_kind_of_change() {
        let running = BTreeMap::from([
            (
                "web".to_string(),
                view(
                    "10.0.0.1:80/tcp",
                    &[("10.1.0.1:8080", 1), ("10.1.0.2:8080", 1)],
                ),
            ),
            (
                "old".to_string(),
                view("10.0.0.2:53/udp", &[("10.1.0.3:53", 1)]),
            ),
            (
                "same".to_string(),
                view("10.0.0.3:80/tcp", &[("10.1.0.4:80", 1)]),
            ),
        ]);
        let mut web = view(
            "10.0.0.1:80/tcp",
            &[("10.1.0.1:8080", 3), ("[fd00::1]:8080", 1)],
        );
        web.affinity = "clientIP".into();
        let file = BTreeMap::from([
            ("web".to_string(), web),
            (
                "new".to_string(),
                view("10.0.0.9:443/tcp", &[("10.1.0.9:443", 1)]),
            ),
            (
                "same".to_string(),
                view("10.0.0.3:80/tcp", &[("10.1.0.4:80", 1)]),
            ),
        ]);
        let lines = diff(&running, &file);
        assert_eq!(
            lines,
            vec![
                "+ new: added, 10.0.0.9:443/tcp nat (kernel) with 1 backend(s)".to_string(),
                "~ web: sessionAffinity none -> clientIP; backend 10.1.0.1:8080 weight 1 -> 3; \
                 backend [fd00::1]:8080 added (weight 1); backend 10.1.0.2:8080 removed \
                 (drains for the retire grace)"
                    .to_string(),
                "- old: removed (10.0.0.2:53/udp)".to_string(),
            ]
        );
        assert!(
            diff(&file, &file).is_empty(),
            "a file against itself changes nothing"
        );
    }

    #[test]
    fn endpoints_show_ranges_any_and_ipv6() {
        assert_eq!(endpoint("fd00::1", 80, 80, "tcp"), "[fd00::1]:80/tcp");
        assert_eq!(
            endpoint("10.0.0.1", 8000, 8099, "udp"),
            "10.0.0.1:8000-8099/udp"
        );
        assert_eq!(endpoint("10.0.0.1", 0, 65535, "tcp"), "10.0.0.1:any/tcp");
        assert_eq!(endpoint("10.0.0.1", 53, 0, "udp"), "10.0.0.1:53/udp");
    }
}
