//! `RivoraNode`: what one node's rivorad really programmed, written by that node only.
//!
//! Why an object per node: rivora-controller (and part 3's Programmed conditions, and
//! `rivora status`) must tell what the cluster forwards, not what it was asked to. Each rivorad
//! writes its own `RivoraNode` named after its Node, by server-side apply with the field
//! manager [`FIELD_MANAGER`], on change and at most once a second; it never writes Service or
//! Gateway status itself (rivora-controller is their one writer). Cluster-scoped because Nodes
//! are.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The field manager of everything rivorad writes.
pub const FIELD_MANAGER: &str = "rivorad";
/// How large (serialized JSON) the status may grow before rivorad leaves diagnostic entries out
/// of it ([`RivoraNodeStatus::omitted`] says which and how many). etcd refuses a request over
/// 1.5 MiB by default (`--max-request-bytes`); 1 MiB leaves room for metadata and managed
/// fields. Lists the controller acts on ([`RivoraNodeStatus::gateways`], the L2 `unserved`
/// Services, BGP sessions) are never shortened: only [`RivoraNodeStatus::services`],
/// [`RivoraNodeStatus::undecodable`] and [`RivoraNodeStatus::blocking`], whose totals and whose
/// objects' own Warning Events remain.
pub const REPORT_BUDGET_BYTES: usize = 1 << 20;
/// How often rivorad writes its report even when nothing changed (`status.heartbeatTime`).
pub const HEARTBEAT_SECS: i64 = 30;
/// A report whose heartbeat is older than this is stale: its rivorad is gone (or cut off), and
/// rivora-controller no longer waits for it. Three missed heartbeats and then some, so a slow
/// write never makes a node flap in and out.
pub const STALE_AFTER_SECS: i64 = 100;

/// One node's report. The spec is empty: nothing about a node is asked through this object;
/// the status says what the node does.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "rivora.dev",
    version = "v1alpha1",
    kind = "RivoraNode",
    plural = "rivoranodes",
    shortname = "rvnode",
    category = "rivora",
    status = "RivoraNodeStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Synced","type":"string","jsonPath":".status.conditions[?(@.type==\"InitialSyncComplete\")].status","description":"adopted VIPs nothing claims may be removed"}"#,
    printcolumn = r#"{"name":"VIPs","type":"integer","jsonPath":".status.vipCount"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RivoraNodeSpec {}

/// What the node programmed, as of the last apply.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RivoraNodeStatus {
    /// `Ready` (True: the datapath is attached and the last apply succeeded) and
    /// `InitialSyncComplete` (True: every watched kind was listed and every Service of the first
    /// list translated once; reasons `Pending`, `Blocked`, `Complete`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = crate::address_pool::conditions_schema)]
    pub conditions: Vec<Condition>,
    /// The datapath rivorad runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datapath: Option<DatapathSummary>,
    /// What keeps the initial sync from completing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocking: Vec<String>,
    /// VIPs programmed, adopted ones not yet claimed included.
    #[serde(default)]
    pub vip_count: i64,
    /// Adopted VIPs no Service has claimed yet (removed when the initial sync completes).
    #[serde(default)]
    pub unclaimed_vips: i64,
    /// Services of ours that are not programmed, or programmed with a warning, by namespace and
    /// name. A Service programmed as asked is only counted (`servicesProgrammed`): the report
    /// stays small at any number of Services, and what it lists is what needs a look (each also
    /// has a Warning Event; rivorad's API lists every VIP).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceReport>,
    /// How many Services of ours there are.
    #[serde(default)]
    pub services_total: i64,
    /// How many of them are programmed as asked, with no warning (not listed in `services`).
    #[serde(default)]
    pub services_programmed: i64,
    /// When rivorad last wrote this status: at least every [`HEARTBEAT_SECS`], so a report
    /// older than [`STALE_AFTER_SECS`] is known to be stale. Absent from an older rivorad.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// The GatewayClass `controllerName` this node serves (`--gateway-controller-name`): the
    /// controller of that name waits for this node's reports, and only that one (a node of
    /// another installation is not expected to program its Gateways). Absent from a rivorad
    /// without Gateway support.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_controller: Option<String>,
    /// Every Gateway of Rivora's GatewayClasses this node knows, by namespace and name, in the
    /// compact form of [`GatewayReport`]: what rivora-controller reads to set their
    /// `Programmed` conditions. Never shortened: about 80 bytes per Gateway, so 10,000 of them
    /// take about 0.8 MB, and a node programs at most 4,096 VIPs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<GatewayReport>,
    /// How many Gateways of ours there are (as many as `gateways` lists).
    #[serde(default)]
    pub gateways_total: i64,
    /// How this node announces its VIPs (`rivorad --announce`) and how that goes: its BGP
    /// sessions, or its part in the L2 Lease. Absent from a rivorad without announcing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub announce: Option<AnnounceReport>,
    /// Objects this node's watches leave out because they do not decode, as `Kind
    /// namespace/name: why` (`undecodableTotal` counts them). Everything else of their kind is
    /// served; each also gets a Warning Event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecodable: Vec<String>,
    /// How many objects do not decode.
    #[serde(default)]
    pub undecodable_total: i64,
    /// What was left out of `services`, `undecodable` and `blocking` to keep the status under
    /// [`REPORT_BUDGET_BYTES`] (e.g. `services: 1200 of 5904 listed`); absent when nothing was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted: Option<String>,
}

/// How a node announces its VIPs.
///
/// Why in the node's report: a router that does not see a route, or a client whose ARP goes
/// unanswered, is explained node by node (which session is down and why, which node holds the
/// L2 Lease), without a shell on the node; `rivora status` and the controller read it here.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnnounceReport {
    /// `bgp`, `l2` or `none`.
    pub mode: String,
    /// The Node carries `node.kubernetes.io/exclude-from-external-load-balancers`: BGP
    /// sessions stay up but announce nothing; the node never takes the L2 Lease.
    #[serde(default)]
    pub excluded: bool,
    /// One per BGPPeer configured on this node's speaker (BGP mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bgp_sessions: Vec<BgpSessionReport>,
    /// BGPPeers selected for this node and refused, each with the field and the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bgp_problems: Vec<String>,
    /// Host routes (/32, /128) this node announces (BGP mode).
    #[serde(default)]
    pub announced_routes: i64,
    /// The holder of the L2 Lease as this node last saw it (L2 mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_holder: Option<String>,
    /// Whether this node answers ARP/NDP for the VIPs now (L2 mode: it holds the Lease and is
    /// within its renew deadline).
    #[serde(default)]
    pub l2_answering: bool,
    /// Why this node does not compete for the L2 Lease now (excluded, no carrier on its
    /// interface, no responder, before its initial sync); absent when it competes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_ineligible: Option<String>,
    /// The last failed request on the L2 Lease (absent once one succeeds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_error: Option<String>,
    /// While this node answers (L2 mode): the `externalTrafficPolicy: Local` Services
    /// (`namespace/name`) it answers ARP/NDP for but has no ready endpoint of, so their VIPs
    /// are not served (all of them). rivora-controller turns it into the Services'
    /// `rivora.dev/L2Reachable` condition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub l2_unserved: Vec<String>,
}

/// One BGP session of a node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpSessionReport {
    /// The BGPPeer.
    pub peer: String,
    /// The peer's address.
    pub address: String,
    /// The peer's port.
    pub port: i32,
    /// The BGP FSM state (`Idle`, `Connect`, `Active`, `OpenSent`, `OpenConfirm`,
    /// `Established`).
    pub state: String,
    /// When the session entered `state`, as this node saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Prefixes sent to the peer (Established only).
    #[serde(default)]
    pub prefixes_sent: i64,
    /// The last error (a NOTIFICATION, a refused connection, a wrong TCP-MD5 key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// One Gateway as this node programs it, compactly.
///
/// Why this shape: `Programmed` needs every node's word on every Gateway, so no Gateway may be
/// left out of the report, yet the report is one object rewritten on every change. A listener
/// programmed as asked is therefore not written out: [`listeners_digest`] of all of them (name,
/// route, VIPs) is, and rivora-controller computes the same digest from its own evaluation to
/// tell whether the node programmed what it expects. Only listeners that failed are listed,
/// with their reason (one listener can fail, a key another Gateway or Service holds, while the
/// others forward).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayReport {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The `metadata.generation` programmed.
    #[serde(default)]
    pub generation: i64,
    /// [`listeners_digest`] of its listeners programmed as asked (those with an active route
    /// and not in `listeners`); absent while the last apply failed (the node is not Ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Its listeners with an active route that are not programmed, with why. (A rivorad
    /// before the compact form listed every listener here, programmed or not, and no digest:
    /// rivora-controller reads both.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<ListenerReport>,
}

/// One programmed listener as [`listeners_digest`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DigestListener {
    /// The listener's `name`.
    pub name: String,
    /// The route it forwards for, `namespace/name`.
    pub route: String,
    /// Its VIPs, `ADDRESS:PORT/PROTO`, in any order.
    pub vips: Vec<String>,
}

/// The digest of a Gateway's programmed listeners, as [`GatewayReport::digest`] carries it:
/// 64-bit FNV-1a, in hex, of the listeners sorted by name, each as its name, route and sorted
/// VIPs. Stable across releases (rivorad and rivora-controller of different versions compare
/// it during an upgrade): change it only together with a new field.
pub fn listeners_digest(listeners: impl IntoIterator<Item = DigestListener>) -> String {
    let mut all: Vec<DigestListener> = listeners.into_iter().collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for l in &mut all {
        l.vips.sort();
        eat(l.name.as_bytes());
        eat(&[0x1f]);
        eat(l.route.as_bytes());
        for v in &l.vips {
            eat(&[0x1e]);
            eat(v.as_bytes());
        }
        eat(&[0x1d]);
    }
    format!("{h:016x}")
}

/// One listener of a [`GatewayReport`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListenerReport {
    /// The listener's `name`.
    pub name: String,
    /// The route it forwards for, `namespace/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// Its VIPs, `ADDRESS:PORT/PROTO` (one per Gateway address).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vips: Vec<String>,
    /// Backends over its VIPs taking new flows.
    #[serde(default)]
    pub ready_backends: i64,
    /// Whether its VIPs are in the datapath as asked (false: failing, or the last apply
    /// failed).
    pub programmed: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Gateway API's listener reason for a failure the listener's status should name, when
    /// there is one: [`LISTENER_PORT_UNAVAILABLE`] (another object holds the listener's port on
    /// the Gateway's address). rivora-controller turns it into the listener's `Accepted`
    /// False with that reason; other failures are `Programmed` False/`Invalid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// [`ListenerReport::reason`] when another object (a Service, or an older Gateway) holds the
/// listener's (address, port, protocol) on this node.
pub const LISTENER_PORT_UNAVAILABLE: &str = "PortUnavailable";

/// The datapath of the node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatapathSummary {
    /// The interface XDP and TCX are attached to.
    pub interface: String,
    /// `native` or `generic`.
    pub xdp_mode: String,
    /// The map ABI version of the programs.
    pub abi_version: i64,
    /// Whether the links are pinned (`--persist-datapath`): the datapath forwards while rivorad
    /// is down.
    pub persistent: bool,
}

/// One Service as this node programs it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceReport {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The `metadata.resourceVersion` programmed (Services have no generation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Its VIPs, `ADDRESS:PORT/PROTO`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vips: Vec<String>,
    /// Backends over its VIPs taking new flows.
    #[serde(default)]
    pub ready_backends: i64,
    /// Backends over its VIPs that are terminating: established flows only.
    #[serde(default)]
    pub draining_backends: i64,
    /// Whether what it asks for is in the datapath (false: failing, or the last apply failed).
    pub programmed: bool,
    /// Why not, or what was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Condition types of [`RivoraNodeStatus::conditions`].
pub mod condition {
    /// The datapath is attached and the last apply succeeded.
    pub const READY: &str = "Ready";
    /// The initial sync is complete.
    pub const INITIAL_SYNC_COMPLETE: &str = "InitialSyncComplete";
    /// BGP mode only: every BGPPeer selected for this node has its session Established
    /// (reasons `Established`, `SessionsDown`, `PeersRefused`, `NoPeers`).
    pub const BGP_ESTABLISHED: &str = "BGPEstablished";
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(name: &str, route: &str, vips: &[&str]) -> DigestListener {
        DigestListener {
            name: name.into(),
            route: route.into(),
            vips: vips.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn the_digest_ignores_order_and_sees_every_field() {
        let base = listeners_digest([
            l("tcp", "ns/a", &["10.0.0.1:80/TCP", "[fd00::1]:80/TCP"]),
            l("udp", "ns/b", &["10.0.0.1:53/UDP"]),
        ]);
        // A golden value: the digest must not change between releases (see its doc).
        assert_eq!(base.len(), 16);
        assert_eq!(
            base,
            listeners_digest([
                l("udp", "ns/b", &["10.0.0.1:53/UDP"]),
                l("tcp", "ns/a", &["[fd00::1]:80/TCP", "10.0.0.1:80/TCP"]),
            ]),
            "listener and VIP order do not matter"
        );
        for other in [
            vec![
                l("tcp", "ns/a", &["10.0.0.1:80/TCP"]),
                l("udp", "ns/b", &["10.0.0.1:53/UDP"]),
            ],
            vec![
                l("tcp", "ns/c", &["10.0.0.1:80/TCP", "[fd00::1]:80/TCP"]),
                l("udp", "ns/b", &["10.0.0.1:53/UDP"]),
            ],
            vec![
                l("tcp2", "ns/a", &["10.0.0.1:80/TCP", "[fd00::1]:80/TCP"]),
                l("udp", "ns/b", &["10.0.0.1:53/UDP"]),
            ],
            vec![l("tcp", "ns/a", &["10.0.0.1:80/TCP", "[fd00::1]:80/TCP"])],
            // Field boundaries count: the same bytes split differently are another digest.
            vec![
                l("tcpns/a", "", &["10.0.0.1:80/TCP", "[fd00::1]:80/TCP"]),
                l("udp", "ns/b", &["10.0.0.1:53/UDP"]),
            ],
        ] {
            assert_ne!(base, listeners_digest(other.clone()), "{other:?}");
        }
        assert_eq!(
            listeners_digest([]),
            "cbf29ce484222325",
            "FNV-1a's offset basis"
        );
    }
}
