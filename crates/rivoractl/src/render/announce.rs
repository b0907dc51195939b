//! `rivoractl bgp` and `rivoractl speaker`: how VIPs are announced, by BGP
//! sessions and routes, or by answering ARP/NDP on the local link.
//!
//! Separate because announcement (rivorad's `--announce`) is its own
//! concern: these views read the announcers' status and the Kubernetes
//! BGPPeer and L2 Lease state, nothing the other views show.

use std::fmt::Write as _;

use rivora_api::{BgpStatus, SpeakerStatus};

use super::NONE;
use super::format::{ago, duration, endpoint, finish, right_align, table};

/// `rivoractl bgp`: the speaker, one row per peer, then the announced routes. With
/// Kubernetes (`k8s`), each peer is named by its BGPPeer and refused BGPPeers are listed.
pub fn bgp(b: &BgpStatus, k8s: Option<&rivora_api::KubernetesStatus>) -> String {
    let peer_names = k8s.map(|k| k.bgp_peers.as_slice()).unwrap_or_default();
    let problems = k8s.map(|k| k.bgp_problems.as_slice()).unwrap_or_default();
    if !b.enabled {
        let mut out = match k8s {
            Some(k) if k.announce == "bgp" => {
                "BGP: no BGPPeer selects this node (or none is usable).\n".to_string()
            }
            Some(k) => format!("BGP is off (rivorad --announce {}).\n", k.announce),
            None => "BGP is not configured (no `bgp:` section in the config file).\n".into(),
        };
        for p in problems {
            let _ = writeln!(out, "Refused: {p}");
        }
        return out;
    }
    let mut out = format!(
        "Local AS {}, router ID {}\n",
        b.local_as
            .map_or_else(|| NONE.to_string(), |a| a.to_string()),
        b.router_id.as_deref().unwrap_or(NONE)
    );
    let mut t = table();
    let named = !peer_names.is_empty();
    let mut header = vec![
        "PEER",
        "AS",
        "STATE",
        "UPTIME",
        "PREFIXES SENT",
        "LAST ERROR",
    ];
    if named {
        header.insert(0, "BGPPEER");
    }
    t.set_header(header);
    for (i, p) in b.peers.iter().enumerate() {
        let mut row = Vec::new();
        if named {
            row.push(
                peer_names
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| NONE.to_string()),
            );
        }
        row.extend([
            endpoint(&p.address, p.port, None),
            p.remote_as.to_string(),
            p.state.clone(),
            p.uptime_secs.map_or_else(|| NONE.to_string(), duration),
            p.prefixes_sent.to_string(),
            p.last_error.clone().unwrap_or_else(|| NONE.to_string()),
        ]);
        t.add_row(row);
    }
    right_align(&mut t, if named { &[2, 5] } else { &[1, 4] });
    out.push_str(&finish(t));
    for p in problems {
        let _ = writeln!(out, "Refused: {p}");
    }
    if b.routes.is_empty() {
        out.push_str("\nNo routes announced (no advertised VIP has a healthy backend).\n");
    } else {
        let mut r = table();
        r.set_header(vec!["ROUTE", "COMMUNITIES", "VIPS"]);
        for route in &b.routes {
            r.add_row(vec![
                route.prefix.clone(),
                if route.communities.is_empty() {
                    NONE.to_string()
                } else {
                    route.communities.join(" ")
                },
                route.vips.join(", "),
            ]);
        }
        out.push_str("\nAnnounced routes:\n");
        out.push_str(&finish(r));
    }
    out
}

/// `rivoractl speaker`: the ARP/NDP responder and its VIPs. With Kubernetes (`k8s`), the L2
/// Lease's holder and why this node does not compete, if it does not.
pub fn speaker(
    s: &SpeakerStatus,
    k8s: Option<&rivora_api::KubernetesStatus>,
    now_unix: u64,
) -> String {
    let lease = k8s.filter(|k| k.announce == "l2").map(|k| {
        let mut l = format!(
            "L2 Lease held by {}",
            k.l2_holder.as_deref().unwrap_or("nobody")
        );
        if let Some(why) = &k.l2_ineligible {
            let _ = write!(l, "; this node does not compete: {why}");
        }
        l.push('\n');
        l
    });
    if !s.enabled {
        return match (k8s, lease) {
            (_, Some(l)) => format!("{l}The ARP/NDP responder is not running yet.\n"),
            (Some(k), None) => format!(
                "L2 announcement is off (rivorad --announce {}).\n",
                k.announce
            ),
            (None, None) => {
                "L2 announcement is not configured (no `l2Announce:` section in the config file).\n"
                    .into()
            }
        };
    }
    let mut out = format!(
        "Interface {} ({}), {}, announcing every {}\n",
        s.interface.as_deref().unwrap_or(NONE),
        s.mac.as_deref().unwrap_or("no MAC"),
        if s.active { "active" } else { "INACTIVE" },
        duration(s.announce_interval_secs)
    );
    if let Some(l) = &lease {
        out.insert_str(0, l);
    }
    if s.link_up == Some(false) {
        out.push_str("The interface is down or has no carrier.\n");
    }
    if s.fenced > 0 {
        let _ = writeln!(
            out,
            "Stopped answering {} time(s) because the Lease was not renewed in time (slow or unreachable API server).",
            s.fenced
        );
    }
    if let Some(e) = &s.error {
        let _ = writeln!(out, "Error: {e}");
    }
    if s.vips.is_empty() {
        out.push_str("No VIP addresses to answer for.\n");
        return out;
    }
    let mut t = table();
    t.set_header(vec![
        "VIP",
        "ANSWERING",
        "SINCE",
        "REPLIES",
        "ANNOUNCEMENTS",
        "LAST ANNOUNCEMENT",
    ]);
    for v in &s.vips {
        t.add_row(vec![
            v.address.clone(),
            if v.answering { "yes" } else { "no" }.to_string(),
            v.since_unix
                .map_or_else(|| NONE.to_string(), |t| ago(t, now_unix)),
            v.replies_sent.to_string(),
            v.announcements_sent.to_string(),
            v.last_announce_unix
                .map_or_else(|| NONE.to_string(), |t| ago(t, now_unix)),
        ]);
    }
    right_align(&mut t, &[3, 4]);
    out.push_str(&finish(t));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::test_support::row;

    #[test]
    fn bgp_table_shows_peers_and_routes() {
        use rivora_api::{BgpPeerInfo, BgpRouteInfo};
        assert!(bgp(&BgpStatus::default(), None).contains("BGP is not configured"));
        let b = BgpStatus {
            enabled: true,
            local_as: Some(65010),
            router_id: Some("192.0.2.2".into()),
            peers: vec![
                BgpPeerInfo {
                    address: "192.0.2.1".into(),
                    port: 179,
                    remote_as: 65000,
                    state: "Established".into(),
                    uptime_secs: Some(125),
                    prefixes_sent: 2,
                    last_error: None,
                },
                BgpPeerInfo {
                    address: "2001:db8::1".into(),
                    port: 1179,
                    remote_as: 65001,
                    state: "Active".into(),
                    uptime_secs: None,
                    prefixes_sent: 0,
                    last_error: Some("TCP-MD5 is configured".into()),
                },
            ],
            routes: vec![BgpRouteInfo {
                prefix: "203.0.113.10/32".into(),
                communities: vec!["65010:100".into(), "65010:200".into()],
                vips: vec!["web".into(), "web-tls".into()],
            }],
        };
        let out = bgp(&b, None);
        assert!(
            out.starts_with("Local AS 65010, router ID 192.0.2.2\n"),
            "{out}"
        );
        assert_eq!(
            row(&out, "192.0.2.1:179"),
            ["192.0.2.1:179", "65000", "Established", "2m 5s", "2", "-"]
        );
        assert_eq!(
            row(&out, "[2001:db8::1]:1179"),
            [
                "[2001:db8::1]:1179",
                "65001",
                "Active",
                "-",
                "0",
                "TCP-MD5 is configured"
            ]
        );
        assert_eq!(
            row(&out, "203.0.113.10/32"),
            ["203.0.113.10/32", "65010:100 65010:200", "web, web-tls"]
        );
        // Kubernetes: each session named by its BGPPeer, refused ones listed.
        let k = rivora_api::KubernetesStatus {
            announce: "bgp".into(),
            bgp_peers: vec!["tor-a".into(), "tor-b".into()],
            bgp_problems: vec![
                "BGPPeer tor-c: spec.passwordSecretRef: Secret x/y not found".into(),
            ],
            ..Default::default()
        };
        let out = bgp(&b, Some(&k));
        assert_eq!(
            row(&out, "tor-a"),
            [
                "tor-a",
                "192.0.2.1:179",
                "65000",
                "Established",
                "2m 5s",
                "2",
                "-"
            ]
        );
        assert_eq!(row(&out, "tor-b")[1], "[2001:db8::1]:1179");
        assert!(
            out.contains("Refused: BGPPeer tor-c: spec.passwordSecretRef"),
            "{out}"
        );
        let off = bgp(&BgpStatus::default(), Some(&k));
        assert!(
            off.starts_with("BGP: no BGPPeer selects this node"),
            "{off}"
        );
        assert!(off.contains("Refused: BGPPeer tor-c"), "{off}");
        let none = bgp(
            &BgpStatus {
                routes: vec![],
                ..b
            },
            None,
        );
        assert!(none.contains("No routes announced"), "{none}");
    }

    #[test]
    fn speaker_table_shows_vips() {
        use rivora_api::SpeakerVipInfo;
        assert!(speaker(&SpeakerStatus::default(), None, 0).contains("not configured"));
        let s = SpeakerStatus {
            enabled: true,
            interface: Some("eth0".into()),
            mac: Some("02:00:00:00:00:01".into()),
            active: true,
            announce_interval_secs: 60,
            vips: vec![
                SpeakerVipInfo {
                    address: "10.0.0.100".into(),
                    answering: true,
                    since_unix: Some(1000),
                    replies_sent: 4,
                    announcements_sent: 2,
                    last_announce_unix: Some(1050),
                },
                SpeakerVipInfo {
                    address: "fd00::100".into(),
                    answering: false,
                    since_unix: None,
                    replies_sent: 0,
                    announcements_sent: 0,
                    last_announce_unix: None,
                },
            ],
            error: None,
            link_up: None,
            fenced: 0,
        };
        let out = speaker(&s, None, 1060);
        assert!(
            out.starts_with("Interface eth0 (02:00:00:00:00:01), active, announcing every 1m 0s\n"),
            "{out}"
        );
        assert_eq!(
            row(&out, "10.0.0.100"),
            ["10.0.0.100", "yes", "1m ago", "4", "2", "10s ago"]
        );
        assert_eq!(
            row(&out, "fd00::100"),
            ["fd00::100", "no", "-", "0", "0", "-"]
        );
    }
}
