//! Test-only helpers the views' tests share: reading a table's cells back
//! out of rendered text, and sample API answers (status, VIPs, backends).

use rivora_api::{
    BackendCounters, BackendInfo, ProbeInfo, ProgramInfo, ReloadInfo, Status, VipBackend, VipInfo,
};

/// The trimmed cells of the table line whose first cell is `first`.
pub(super) fn row(out: &str, first: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .find(|cells| cells[0] == first)
        .unwrap_or_else(|| panic!("no row starting with {first:?} in\n{out}"))
}

pub(super) fn rows(out: &str, first: &str) -> Vec<Vec<String>> {
    out.lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|cells| cells[0] == first)
        .collect()
}

pub(super) fn sample_status() -> Status {
    Status {
        version: "0.1.0".into(),
        abi_version: 3,
        interface: "eth0".into(),
        ifindex: 2,
        xdp_mode_requested: "native".into(),
        xdp_mode: "generic".into(),
        pin_dir: "/sys/fs/bpf/rivora".into(),
        config_path: "/etc/rivora/rivora.yaml".into(),
        config_generation: 7,
        last_reload: ReloadInfo {
            at_unix: 1_700_003_600,
            ok: true,
            error: None,
            changes: Some("+1 vip, -2 backends".into()),
        },
        vip_count: 2,
        backend_count: 3,
        started_at_unix: 1_700_000_000,
        maglev_table_size: 0,
        maglev_slots_used: 0,
        persist_datapath: false,
        kubernetes: None,
        start: String::new(),
        programs: vec![
            ProgramInfo {
                name: "rivora_xdp".into(),
                attach: "xdp generic on eth0".into(),
                program_id: 41,
                link_id: Some(9),
                link_pinned: false,
                loaded_at_unix: 0,
            },
            ProgramInfo {
                name: "rivora_egress".into(),
                attach: "tcx egress on eth0".into(),
                program_id: 42,
                link_id: None,
                link_pinned: false,
                loaded_at_unix: 0,
            },
        ],
    }
}

pub(super) fn sample_vips() -> Vec<VipInfo> {
    vec![
        VipInfo {
            name: "web".into(),
            address: "10.0.0.10".into(),
            port: 80,
            port_last: 80,
            protocol: "tcp".into(),
            mode: "ipip".into(),
            service_id: 1,
            maglev_offset: 0,
            maglev_size: 65537,
            worst_imbalance_pct: 0.372,
            reject_weight: 0,
            session_affinity: "clientIP".into(),
            nat_forwarding: "kernel".into(),
            syn_rate_limit: "100/s burst 200".into(),
            origin: None,
            backends: vec![
                VipBackend {
                    address: "192.168.1.10".into(),
                    port: 8080,
                    weight: 100,
                    backend_id: 1,
                    state: "healthy".into(),
                    target: None,
                    node: None,
                    terminating: false,
                    snat: false,
                },
                VipBackend {
                    address: "192.168.1.11".into(),
                    port: 8080,
                    weight: 50,
                    backend_id: 2,
                    state: "draining".into(),
                    target: None,
                    node: None,
                    terminating: false,
                    snat: false,
                },
            ],
        },
        VipInfo {
            name: "dns6".into(),
            address: "2001:db8::53".into(),
            port: 0,
            port_last: 65535,
            protocol: "udp".into(),
            mode: "dsr".into(),
            service_id: 2,
            maglev_offset: 65537,
            maglev_size: 251,
            worst_imbalance_pct: 12.5,
            reject_weight: 0,
            session_affinity: "none".into(),
            nat_forwarding: "kernel".into(),
            syn_rate_limit: "none".into(),
            origin: None,
            backends: vec![VipBackend {
                address: "2001:db8::1:10".into(),
                port: 0,
                weight: 1,
                backend_id: 3,
                state: "down".into(),
                target: None,
                node: None,
                terminating: false,
                snat: false,
            }],
        },
        VipInfo {
            name: "empty".into(),
            address: "10.0.0.11".into(),
            port: 8000,
            port_last: 8099,
            protocol: "tcp".into(),
            mode: "ipip".into(),
            service_id: 3,
            maglev_offset: 65788,
            maglev_size: 251,
            worst_imbalance_pct: 0.0,
            reject_weight: 0,
            backends: vec![],
            // As an older rivorad answers: no affinity or limit fields.
            session_affinity: String::new(),
            nat_forwarding: String::new(),
            syn_rate_limit: String::new(),
            origin: None,
        },
    ]
}

fn probe(kind: &str, target: &str, last_result: &str, latency: f64) -> ProbeInfo {
    ProbeInfo {
        kind: kind.into(),
        target: target.into(),
        interval_ms: 1000,
        timeout_ms: 500,
        rise: 2,
        fall: 3,
        up: last_result == "ok",
        last_result: last_result.into(),
        last_latency_ms: latency,
        consecutive: 1,
        last_probe_unix: 1_700_000_000,
    }
}

pub(super) fn sample_backends() -> Vec<BackendInfo> {
    vec![
        BackendInfo {
            backend_id: 1,
            address: "192.168.1.10".into(),
            port: 8080,
            state: "healthy".into(),
            vips: vec!["web".into(), "api".into()],
            drained: false,
            retiring: false,
            probe: Some(probe(
                "http",
                "http://192.168.1.10:8080/healthz",
                "ok",
                0.42,
            )),
            last_change_unix: 1_700_000_000 - 180,
            counters: Some(BackendCounters {
                packets: 1_234_567,
                bytes: 1_258_291,
                new_flows: 4_321,
                last_packet_age_ms: Some(300),
                last_packet_unix_ms: None,
            }),
        },
        BackendInfo {
            backend_id: 2,
            address: "192.168.1.11".into(),
            port: 8080,
            state: "draining".into(),
            vips: vec!["web".into()],
            drained: true,
            retiring: false,
            probe: Some(probe("tcp", "192.168.1.11:8080", "ok", 12.3)),
            last_change_unix: 1_700_000_000 - 45,
            counters: Some(BackendCounters {
                packets: 20,
                bytes: 2_000,
                new_flows: 2,
                last_packet_age_ms: Some(45_000),
                last_packet_unix_ms: None,
            }),
        },
        BackendInfo {
            backend_id: 3,
            address: "192.168.1.12".into(),
            port: 8080,
            state: "down".into(),
            vips: vec!["web".into()],
            drained: true,
            retiring: true,
            probe: Some(probe(
                "tcp",
                "192.168.1.12:8080",
                "fail: connect: refused",
                0.1,
            )),
            last_change_unix: 1_700_000_000 - 2 * 86_400,
            counters: Some(BackendCounters {
                packets: 0,
                bytes: 0,
                new_flows: 0,
                last_packet_age_ms: None,
                last_packet_unix_ms: None,
            }),
        },
        BackendInfo {
            backend_id: 4,
            address: "192.168.1.13".into(),
            port: 8080,
            state: "draining".into(),
            vips: vec![],
            drained: false,
            retiring: true,
            probe: Some(probe("tcp", "192.168.1.13:8080", "pending", 0.0)),
            last_change_unix: 1_700_000_000 - 7200,
            counters: Some(BackendCounters {
                packets: 9,
                bytes: 900,
                new_flows: 1,
                last_packet_age_ms: Some(7_200_000),
                last_packet_unix_ms: None,
            }),
        },
        BackendInfo {
            backend_id: 12,
            address: "2001:db8::1:10".into(),
            port: 53,
            state: "healthy".into(),
            vips: vec!["dns6".into()],
            drained: false,
            retiring: false,
            probe: None,
            last_change_unix: 0,
            counters: None,
        },
    ]
}
