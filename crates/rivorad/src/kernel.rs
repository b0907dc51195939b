//! Kernel settings of the attached interface that the datapath relies on.
//!
//! L3 DSR has a kernel-fallback path: when `bpf_fib_lookup` cannot answer
//! (typically no neighbour entry for the next hop yet), xdp_ingress hands
//! the *encapsulated* packet to the kernel with XDP_PASS, so the kernel
//! routes it and resolves the neighbour for the packets after it. That
//! packet enters the stack on the XDP interface with the tunnel source as
//! its source address, which is usually one of this node's own addresses:
//! IPv4 drops such a packet as a martian unless `accept_local` is set on the
//! receiving interface, and strict reverse-path filtering drops it even
//! then. Without this, the first packets of an IPv4 L3 DSR VIP never reach
//! a backend whose neighbour entry is missing, and nothing ever creates it.
//!
//! Source-translated flows (bpf/snat.h: an ETP Cluster Service's endpoints
//! on other nodes) have the same fallback with the same source: the node's
//! own address.

use std::path::PathBuf;

use rivora_desired::DesiredState;

fn conf_path(interface: &str, key: &str) -> PathBuf {
    PathBuf::from(format!("/proc/sys/net/ipv4/conf/{interface}/{key}"))
}

fn read_u32(path: &PathBuf) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether `desired` has an IPv4 VIP whose kernel-fallback packets carry
/// a local source: an L3 DSR VIP, or one with source-translated backends.
pub fn needs_ipv4_tunnel_fallback(desired: &DesiredState) -> bool {
    desired.has_ipv4_l3_dsr_vip() || desired.has_ipv4_snat_vip()
}

/// What preparing the interface did, for the log.
#[derive(Debug, PartialEq, Eq)]
pub enum Prepared {
    /// Nothing needed or everything already in place.
    Unchanged,
    /// `accept_local` was switched on.
    AcceptLocalSet,
}

/// Sets `accept_local` on `interface` when `desired` has an IPv4 L3 DSR VIP
/// or source-translated IPv4 flows,
/// and reports (as an error string for a warning) a strict `rp_filter`, which
/// rivorad does not change: loosening it is the operator's decision.
/// Never switches anything off: another VIP set or another tool may need it.
pub fn prepare_tunnel_fallback(
    interface: &str,
    desired: &DesiredState,
) -> Result<Prepared, String> {
    if !needs_ipv4_tunnel_fallback(desired) {
        return Ok(Prepared::Unchanged);
    }
    let accept_local = conf_path(interface, "accept_local");
    let mut prepared = Prepared::Unchanged;
    if read_u32(&accept_local) != Some(1) {
        std::fs::write(&accept_local, "1").map_err(|e| {
            format!(
                "cannot set {} to 1 ({e}): the kernel-fallback packets of IPv4 L3 DSR VIPs and \
                 source-translated flows (sent before the next hop's neighbour entry exists) \
                 will be dropped as martians",
                accept_local.display()
            )
        })?;
        prepared = Prepared::AcceptLocalSet;
    }
    // The kernel uses the larger of the interface's and `all`'s value.
    let rp = [
        read_u32(&conf_path(interface, "rp_filter")),
        read_u32(&conf_path("all", "rp_filter")),
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(0);
    if rp == 1 {
        return Err(format!(
            "strict reverse-path filtering (rp_filter=1) on {interface} drops the kernel-fallback \
             packets of IPv4 L3 DSR VIPs and source-translated flows; set net.ipv4.conf.{interface}.rp_filter and \
             net.ipv4.conf.all.rp_filter to 2 (loose) or 0"
        ));
    }
    Ok(prepared)
}

/// Switches on forwarding where the classifier needs it, and says what it
/// changed (for the log). The classifier forwards packets to their target
/// as a router does, and `bpf_fib_lookup` answers only when the kernel
/// would forward them too: IPv4 checks the receiving interface's
/// `forwarding`, IPv6 the `all` one (BPF_FIB_LKUP_RET_FWD_DISABLED
/// otherwise, and every classifier packet would be dropped as no_route).
/// Never switches anything off.
pub fn prepare_forwarding(interface: &str, desired: &DesiredState) -> Result<Vec<String>, String> {
    let vips = desired.classifier.vips();
    let mut wanted = Vec::new();
    if vips.iter().any(|v| v.is_ipv4()) {
        wanted.push(conf_path(interface, "forwarding"));
    }
    if vips.iter().any(|v| v.is_ipv6()) {
        wanted.push(PathBuf::from("/proc/sys/net/ipv6/conf/all/forwarding"));
    }
    let mut set = Vec::new();
    for path in wanted {
        if read_u32(&path) == Some(1) {
            continue;
        }
        std::fs::write(&path, "1").map_err(|e| {
            format!(
                "cannot set {} to 1 ({e}): the classifier's packets for that family will be dropped                  as no_route (bpf_fib_lookup answers only where the kernel forwards)",
                path.display()
            )
        })?;
        set.push(path.display().to_string());
    }
    Ok(set)
}

/// Why a `--snat-ports` range that overlaps the kernel's ephemeral ports
/// (`net.ipv4.ip_local_port_range`) is a problem, or None when it does not.
/// The node's own connections to a pod on another node may then take a
/// port a translated flow to that pod holds, and xdp_ingress would hand
/// their replies to the translated flow's client.
pub fn snat_ports_overlap(ports: &std::ops::RangeInclusive<u16>) -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    overlap_message(ports, &text)
}

fn overlap_message(ports: &std::ops::RangeInclusive<u16>, range_text: &str) -> Option<String> {
    let mut it = range_text.split_whitespace().map(|w| w.parse::<u16>());
    let (Some(Ok(lo)), Some(Ok(hi))) = (it.next(), it.next()) else {
        return None;
    };
    (*ports.start() <= hi && lo <= *ports.end()).then(|| {
        format!(
            "--snat-ports {}-{} overlaps net.ipv4.ip_local_port_range {lo}-{hi}: this node's own \
             connections to pods on other nodes may take a port a translated flow holds; move \
             the range, or reserve it with net.ipv4.ip_local_reserved_ports",
            ports.start(),
            ports.end()
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn snat_ports_overlapping_the_ephemeral_range_are_named() {
        assert_eq!(overlap_message(&(61000..=65535), "32768\t60999\n"), None);
        let m = overlap_message(&(60000..=61000), "32768\t60999\n").unwrap();
        assert!(
            m.contains("60000-61000 overlaps") && m.contains("32768-60999"),
            "{m}"
        );
        assert_eq!(overlap_message(&(1..=2), "garbage"), None);
    }

    use super::*;

    fn config(text: &str) -> DesiredState {
        crate::source::file::from_config(
            &rivora_config::parse(text, "test.yaml").expect("valid config"),
        )
    }

    #[test]
    fn only_ipv4_l3_dsr_vips_need_the_fallback_settings() {
        let backends = "    backends: [ { address: \"10.0.1.1\", port: 80 } ]\n";
        let v4 = |mode: &str| {
            format!(
                "settings:\n  tunnelSource: {{ ipv4: \"10.0.0.1\", ipv6: \"fd00::1\" }}\nvips:\n  - name: a\n    \
                 address: \"10.0.0.100\"\n    port: 80\n    protocol: tcp\n    mode: {mode}\n{backends}"
            )
        };
        assert!(needs_ipv4_tunnel_fallback(&config(&v4("dsr-ipip"))));
        assert!(needs_ipv4_tunnel_fallback(&config(&v4("dsr-gre"))));
        assert!(!needs_ipv4_tunnel_fallback(&config(&v4("nat"))));
        let v6 = "settings:\n  tunnelSource: { ipv6: \"fd00::1\" }\nvips:\n  - name: a\n    \
                  address: \"fd00::100\"\n    port: 80\n    protocol: tcp\n    mode: dsr-ipip\n    \
                  backends: [ { address: \"fd00:1::1\", port: 80 } ]\n";
        assert!(!needs_ipv4_tunnel_fallback(&config(v6)));
    }
}
