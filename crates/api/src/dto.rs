//! Wire types of the rivorad local API.
//!
//! These structs are the JSON contract between `rivorad` (server) and
//! `rivoractl` (client). Both sides are built from this one module so they
//! cannot drift apart; any field change here is an API change and should be
//! made additively (new optional fields) where possible so an older
//! `rivoractl` can still talk to a newer `rivorad`.

use serde::{Deserialize, Serialize};

/// Daemon-wide health snapshot returned by `GET /v1/status`.
///
/// Exists so an operator can answer "is the load balancer attached, to
/// what, in which mode, and did the last config reload work?" with a single
/// call, without reading BPF state by hand.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Status {
    /// rivorad build version, to spot mismatched daemon/CLI deployments.
    pub version: String,
    /// Version of the BPF map ABI the daemon was built against, so pinned maps
    /// left behind by a different build can be recognised as incompatible.
    pub abi_version: u32,
    /// Name of the network interface the dataplane is attached to.
    pub interface: String,
    /// Kernel ifindex of `interface`; names can be reused, ifindexes identify
    /// the exact device the programs are bound to.
    pub ifindex: u32,
    /// XDP mode asked for in the config (e.g. `native`, `generic`, `auto`),
    /// shown next to the actual mode so silent fallbacks are visible.
    pub xdp_mode_requested: String,
    /// XDP mode actually in effect: `native` or `generic`. Generic mode is
    /// much slower, so operators must be able to see when it was chosen.
    pub xdp_mode: String,
    /// bpffs directory holding the pinned maps/links, needed when inspecting
    /// or cleaning up state with bpftool.
    pub pin_dir: String,
    /// Path of the config file the daemon loads and reloads from.
    pub config_path: String,
    /// Monotonic counter bumped on every successfully applied config, so
    /// callers can tell whether a reload took effect.
    pub config_generation: u64,
    /// Outcome of the most recent reload attempt (successful or not), since a
    /// failed reload leaves the previous config running silently otherwise.
    pub last_reload: ReloadInfo,
    /// Number of VIPs currently programmed into the dataplane.
    pub vip_count: u32,
    /// Number of distinct backends currently programmed into the dataplane.
    pub backend_count: u32,
    /// Daemon start time (seconds since the Unix epoch), to compute uptime and
    /// detect unexpected restarts.
    pub started_at_unix: u64,
    /// BPF programs the daemon has loaded and attached, with kernel ids so
    /// they can be cross-checked with `bpftool prog`/`bpftool link`.
    pub programs: Vec<ProgramInfo>,
    /// Whether the datapath is left running (pinned links) when rivorad
    /// stops.
    #[serde(default)]
    pub persist_datapath: bool,
    /// What this start found and did: a fresh datapath, or pinned state
    /// adopted and programs swapped into pinned links.
    #[serde(default)]
    pub start: String,
    /// Slots of the node's one Maglev table, which every VIP's slice shares (0 from an older
    /// rivorad): with [`Status::maglev_slots_used`], how full it is.
    #[serde(default)]
    pub maglev_table_size: u32,
    /// Slots the VIPs' slices hold now.
    #[serde(default)]
    pub maglev_slots_used: u64,
    /// The Kubernetes source's state (`rivorad --kubernetes`); absent for a
    /// node that runs the YAML file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesStatus>,
}

/// What `rivorad --kubernetes` sees of the cluster: its watches, the
/// initial-sync gate and the Services it cannot program.
///
/// Exists because a node whose gate stays closed keeps VIPs whose Services
/// may be gone (by design: nothing is removed while the picture is
/// incomplete), and an operator must be able to see why from the node.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct KubernetesStatus {
    /// The node's name (`--node-name`).
    pub node: String,
    /// The API server rivorad talks to.
    pub api_server: String,
    /// One entry per watched kind.
    pub watches: Vec<WatchInfo>,
    /// Whether the initial sync is complete: adopted VIPs nothing claimed
    /// have been removed, and leftovers are removed at once from now on.
    pub initial_sync_complete: bool,
    /// What keeps the initial sync from completing.
    #[serde(default)]
    pub blocking: Vec<String>,
    /// VIPs adopted from pinned maps that no Service claimed yet.
    pub unclaimed_vips: u32,
    /// Services of ours by state: `programmed`, `refused`, `failing`.
    #[serde(default)]
    pub services: std::collections::BTreeMap<String, u64>,
    /// Failing Services by reason (e.g. `endpoint_is_vip`).
    #[serde(default)]
    pub failures: std::collections::BTreeMap<String, u64>,
    /// Gateway listeners carrying a route, by state: `programmed`, `failing`.
    #[serde(default)]
    pub gateway_listeners: std::collections::BTreeMap<String, u64>,
    /// The failing Services, `NAMESPACE/NAME: error`, then the failing Gateway listeners,
    /// `gateway NAMESPACE/NAME listener L: error` (the first few).
    #[serde(default)]
    pub failing: Vec<String>,
    /// Generation of the last desired state the cluster gave (0: none yet,
    /// e.g. while the API server is unreachable).
    pub offered_generation: u64,
    /// Services whose translation a pass reused because nothing it reads changed, since the
    /// start (the agent translates only what changed).
    #[serde(default)]
    pub translations_reused: u64,
    /// Services translated (new or changed), since the start.
    #[serde(default)]
    pub translations_done: u64,
    /// Writes of this node's RivoraNode status that succeeded.
    pub node_report_writes: u64,
    /// Writes of it that failed.
    pub node_report_write_failures: u64,
    /// The last failed write's error, until one succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_report_error: Option<String>,
    /// The healthCheckNodePorts of the ETP Local Services, served as
    /// kube-proxy serves them.
    #[serde(default)]
    pub health_check_node_ports: Vec<HealthCheckPortInfo>,
    /// healthCheckNodePort requests answered, by status code (`200`, `503`).
    #[serde(default)]
    pub health_check_requests: std::collections::BTreeMap<String, u64>,
    /// `--announce`: `none`, `bgp` or `l2`.
    #[serde(default)]
    pub announce: String,
    /// BGP mode: the BGPPeer of each session of `GET /v1/bgp`, in the same order.
    #[serde(default)]
    pub bgp_peers: Vec<String>,
    /// BGP mode: BGPPeers selected for this node and refused, and why.
    #[serde(default)]
    pub bgp_problems: Vec<String>,
    /// L2 mode: the holder of the speaker Lease as this node last saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_holder: Option<String>,
    /// L2 mode: why this node does not compete for the Lease now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_ineligible: Option<String>,
}

/// One healthCheckNodePort.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct HealthCheckPortInfo {
    /// The port.
    pub port: u16,
    /// Its Service, `NAMESPACE/NAME`.
    pub service: String,
    /// Local ready, non-terminating endpoints it counts (200 when above 0).
    pub local_endpoints: u64,
    /// Whether rivorad listens on it.
    pub serving: bool,
    /// Why not (e.g. another process holds the port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One watch of the Kubernetes source.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct WatchInfo {
    /// `Service`, `EndpointSlice`, `ServicePolicy` or `Node`.
    pub kind: String,
    /// Whether its first full list arrived.
    pub listed: bool,
    /// Objects it holds.
    pub objects: u64,
    /// Events received.
    pub events: u64,
    /// Errors (each retried after a backoff).
    pub errors: u64,
    /// The last error, until the next event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Not served by the API server (an optional kind whose CRD is not installed, e.g. Gateway
    /// API's): counted as empty, not as an error. Absent from an older rivorad.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub absent: bool,
    /// Objects left out because they do not decode (`namespace/name: why`; the rest of the
    /// kind is served). Absent from an older rivorad.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecodable: Vec<String>,
}

/// Result of the last configuration reload.
///
/// Exists because reloads happen asynchronously (SIGHUP / file change) and
/// their errors would otherwise only be visible in the daemon log.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ReloadInfo {
    /// When the reload was attempted (seconds since the Unix epoch); 0 means
    /// no reload has happened since start-up.
    pub at_unix: u64,
    /// Whether the new config was validated and applied.
    pub ok: bool,
    /// Why the reload failed, when `ok` is false, so the operator can fix the
    /// config without digging through logs.
    pub error: Option<String>,
    /// Short human summary of what changed (e.g. "+1 vip, -2 backends"), so a
    /// successful reload can be confirmed to have done what was intended.
    pub changes: Option<String>,
}

/// One BPF program attached by the daemon.
///
/// Exists so operators can verify the attach point and correlate with the
/// kernel's view (`bpftool prog show id N`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ProgramInfo {
    /// Program name as loaded into the kernel.
    pub name: String,
    /// Human-readable attach point, e.g. `xdp generic on eth0` or
    /// `tcx egress on eth0`.
    pub attach: String,
    /// Kernel program id, for `bpftool prog show id`.
    pub program_id: u32,
    /// Kernel link id when attached through a bpf_link (None for legacy
    /// netlink attachment), for `bpftool link show id`.
    pub link_id: Option<u32>,
    /// The link is pinned in bpffs (`--persist-datapath`): it keeps the
    /// program forwarding while rivorad is down.
    #[serde(default)]
    pub link_pinned: bool,
    /// When the kernel loaded this program (it changes on every hot swap
    /// while the link id stays).
    #[serde(default)]
    pub loaded_at_unix: u64,
}

/// A virtual service as programmed into the dataplane (`GET /v1/vips`).
///
/// Exists to show how the config was translated into dataplane state:
/// service ids, Maglev table placement, and per-backend weights.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct VipInfo {
    /// Name of the VIP from the config file, the handle operators use.
    pub name: String,
    /// VIP address (IPv4 or IPv6 textual form, without brackets).
    pub address: String,
    /// VIP port, or the first port of its range (0 for `any`).
    pub port: u16,
    /// Last port of the VIP's range: equal to `port` for a single-port VIP
    /// (0, from an older rivorad, means single-port too); `port` 0 and
    /// `port_last` 65535 is `any` (every port of the address).
    #[serde(default)]
    pub port_last: u16,
    /// L4 protocol (`tcp` or `udp`).
    pub protocol: String,
    /// Forwarding mode (e.g. encapsulation / DSR flavour), which determines
    /// what backends must be configured to accept.
    pub mode: String,
    /// Dataplane service id; the key used in BPF maps and stats.
    pub service_id: u32,
    /// Start of this VIP's slice in the shared Maglev lookup array.
    pub maglev_offset: u32,
    /// Length of this VIP's Maglev slice (the Maglev table size M).
    pub maglev_size: u32,
    /// Worst deviation, in percent, between a backend's share of Maglev slots
    /// and its weight-proportional ideal share; shows how evenly traffic
    /// will be spread.
    pub worst_imbalance_pct: f64,
    /// Backends serving this VIP.
    pub backends: Vec<VipBackend>,
    /// The share of new flows the VIP refuses (TCP reset, other packets dropped), in the
    /// backends' weight units: a Gateway route's backendRefs that do not resolve. 0: none.
    #[serde(default)]
    pub reject_weight: u32,
    /// `none` (each flow balanced on its own) or `clientIP` (all flows of a
    /// client to one backend); empty from an older rivorad.
    #[serde(default)]
    pub session_affinity: String,
    /// NAT VIPs: who routes the rewritten packets on, `kernel` (XDP_PASS)
    /// or `fib` (xdp_ingress routes and redirects them, skipping netfilter's
    /// forward hooks); empty for the DSR modes and from an older rivorad.
    #[serde(default)]
    pub nat_forwarding: String,
    /// The TCP SYN rate limit per client address in force for this VIP:
    /// `100/s burst 200` (its own), `100/s burst 200 (node-wide)`, or
    /// `none`; empty from an older rivorad.
    #[serde(default)]
    pub syn_rate_limit: String,
    /// Where the VIP comes from, when it is not the file: `service
    /// NAMESPACE/NAME port PORT` for a Kubernetes VIP, `adopted, unclaimed`
    /// for a VIP kept from pinned maps that nothing claimed yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

/// A backend as seen from one VIP.
///
/// Exists because weight is per VIP membership, not per backend.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct VipBackend {
    /// Backend address (IPv4 or IPv6 textual form, without brackets).
    pub address: String,
    /// Backend port; 0: packets keep the client's destination port (a
    /// backend of a port-range VIP without a port of its own).
    pub port: u16,
    /// Configured Maglev weight within this VIP.
    pub weight: u32,
    /// Dataplane backend id (key of the backend map).
    pub backend_id: u32,
    /// Current state (`healthy`, `draining`, `down`), which decides whether
    /// it receives new flows.
    pub state: String,
    /// What the backend is, when the source says (Kubernetes: `Pod NS/NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The node it runs on, when the source says (Kubernetes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The source says it is terminating (Kubernetes: serving and
    /// terminating while ready endpoints exist).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminating: bool,
    /// On another node: this VIP's flows to it leave with this node's
    /// address as source (Kubernetes ETP Cluster), so it sees the node, not
    /// the client.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub snat: bool,
}

/// A backend with all VIPs it serves (`GET /v1/backends`).
///
/// Exists to answer "which services are affected if this host goes away?".
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BackendInfo {
    /// Dataplane backend id (key of the backend map).
    pub backend_id: u32,
    /// Backend address (IPv4 or IPv6 textual form, without brackets).
    pub address: String,
    /// Backend port.
    pub port: u16,
    /// `healthy`, `draining` or `down`: whether it gets new flows.
    pub state: String,
    /// Names of the VIPs this backend is a member of.
    pub vips: Vec<String>,
    /// Drained by an operator (`rivoractl drain`); a failed probe still
    /// turns it down.
    #[serde(default)]
    pub drained: bool,
    /// Not listed by the config any more: draining until its retire grace
    /// ends, then released.
    #[serde(default)]
    pub retiring: bool,
    /// Active health checking of this backend; None when it has no check.
    #[serde(default)]
    pub probe: Option<ProbeInfo>,
    /// When `state` last changed (Unix seconds; 0 = not since start).
    #[serde(default)]
    pub last_change_unix: u64,
    /// What the datapath sent to it; None from an older rivorad or when the
    /// counters could not be read.
    #[serde(default)]
    pub counters: Option<BackendCounters>,
}

/// Traffic the datapath sent to one backend, summed over CPUs, since the
/// backend got its ID (counters survive rivorad restarts). A backend listed
/// by several VIPs counts them all.
///
/// Exists to show how traffic spreads over the backends (`ipvsadm -Ln
/// --stats`) and when a draining backend has gone quiet: a drain is over
/// when its last packet is older than the clients' idle time.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct BackendCounters {
    /// Client->backend packets forwarded, every mode.
    pub packets: u64,
    /// Their sizes as whole frames as received (before any encapsulation).
    pub bytes: u64,
    /// New flows (connections) whose backend was chosen: this one.
    pub new_flows: u64,
    /// How long ago its latest packet was, in milliseconds at the kernel
    /// tick's resolution (4 ms at HZ=250); None: no packet since it got its
    /// ID (or the kernel's clock could not be read).
    pub last_packet_age_ms: Option<u64>,
    /// When its latest packet was (Unix milliseconds; the read time minus
    /// the age).
    pub last_packet_unix_ms: Option<u64>,
}

/// One backend's counters in [`Stats`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct BackendStats {
    /// Dataplane backend id (key of backend_stats_map).
    pub backend_id: u32,
    /// Backend address (IPv4 or IPv6 textual form, without brackets).
    pub address: String,
    /// Backend port.
    pub port: u16,
    /// `healthy`, `draining` or `down`, so a drain's progress reads in one
    /// line.
    pub state: String,
    /// The counters.
    #[serde(flatten)]
    pub counters: BackendCounters,
}

/// The active health check of one backend and its latest result, so an
/// operator sees why a backend is down without reading logs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ProbeInfo {
    /// `tcp` or `http`.
    pub kind: String,
    /// What is probed, e.g. `10.0.0.1:8080` or `http://10.0.0.1:8080/healthz`.
    pub target: String,
    /// Probe interval in milliseconds.
    pub interval_ms: u64,
    /// Probe timeout in milliseconds.
    pub timeout_ms: u64,
    /// Consecutive successes needed to come back up.
    pub rise: u32,
    /// Consecutive failures needed to go down.
    pub fall: u32,
    /// Whether the probes currently consider it up.
    pub up: bool,
    /// `ok`, `fail: <reason>`, or `pending` before the first probe.
    pub last_result: String,
    /// Latency of the last probe in milliseconds (successful or not).
    pub last_latency_ms: f64,
    /// Current run of identical results.
    pub consecutive: u32,
    /// When the last probe finished (Unix seconds; 0 = none yet).
    pub last_probe_unix: u64,
}

/// Body of `POST /v1/backends/drain` and `/v1/backends/undrain`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DrainRequest {
    /// Which backends: `ADDR:PORT` (`[v6]:PORT`), a bare `ADDR` (every
    /// backend on that address), or a numeric backend ID.
    pub backend: String,
}

/// Dataplane counters (`GET /v1/stats`).
///
/// Exists so traffic and drops can be observed without bpftool and without
/// knowing the per-CPU map layout; the daemon sums per-CPU values.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Stats {
    /// Per-VIP traffic counters.
    pub vips: Vec<VipStats>,
    /// Global drop counters by reason, to diagnose why packets were lost.
    pub drops: Vec<DropCount>,
    /// When the counters were read (Unix milliseconds), so a client can
    /// turn two samples into rates.
    #[serde(default)]
    pub at_unix_ms: u64,
    /// Occupancy of the flow tables, to see one filling before it
    /// overflows (LRU tables then evict live flows).
    #[serde(default)]
    pub tables: Vec<TableUsage>,
    /// Per-backend counters, in backend id order (empty from an older
    /// rivorad).
    #[serde(default)]
    pub backends: Vec<BackendStats>,
    /// The new-flow guard's setting (None from an older rivorad); what it
    /// held back is the `flow_guarded` entry of `drops`.
    #[serde(default)]
    pub flow_guard: Option<FlowGuard>,
    /// The flow filter that lets SYNs and new UDP flows skip the affinity
    /// lookup (None from an older rivorad).
    #[serde(default)]
    pub flow_filter: Option<FlowFilter>,
    /// Source translation of flows to backends on other nodes (None from an
    /// older rivorad).
    #[serde(default)]
    pub snat: Option<SnatStats>,
}

/// Source translation (bpf/snat.h): flows to backends on other nodes (a
/// Kubernetes ETP Cluster Service's remote endpoints) leave with the node's
/// address and a node port as source. Shown so an operator can see that it
/// happens, from where, and whether node ports run out
/// (`snat_exhausted` in `drops`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct SnatStats {
    /// The IPv4 source, if set.
    pub source_v4: Option<String>,
    /// The IPv6 source, if set.
    pub source_v6: Option<String>,
    /// Node ports, `FIRST-LAST`.
    pub ports: String,
    /// The datapath's counters by name (`allocated`, `reused_idle`,
    /// `forwarded`, `replied`, `reply_unmatched`, `to_kernel`).
    pub counters: std::collections::BTreeMap<String, u64>,
}

/// The flow filter (`flow_filter_map`): one bit per 5-tuple hash, set for
/// every flow that has an affinity entry. A packet of a new flow whose bit
/// is clear skips the affinity lookup (the costliest part of a new flow
/// with full tables); bits of gone flows pile up until rivorad rebuilds the
/// filter from the tables. Shown so an operator can see it working (exact,
/// sparse) rather than take it on trust.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FlowFilter {
    /// Bits in the half in use.
    pub bits: u64,
    /// Bits set in it, as last counted (each one a flow that may have an
    /// entry: the share of them is the share of new flows still looked up).
    pub bits_set: u64,
    /// Whether a clear bit is trusted (false after an upgrade from an ABI
    /// without the filter, until the first rebuild).
    pub exact: bool,
    /// Rebuilds since rivorad started.
    pub rebuilds: u64,
}

/// The new-flow guard (`--new-flow-guard-rate`): how many state entries
/// flows without state may create before they are forwarded by Maglev
/// alone, so a flood cannot evict established flows' entries.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FlowGuard {
    /// Node-wide entries per second; 0: the guard is off.
    pub rate_per_s: u64,
    /// What each CPU may create per window (the rate split over the CPUs).
    pub per_cpu_limit: u32,
    /// The window, in milliseconds.
    pub window_ms: u64,
}

/// Entries in use in one kernel table.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct TableUsage {
    /// Map name, e.g. `connection_affinity_map`.
    pub name: String,
    /// Entries in use.
    pub entries: u64,
    /// Capacity.
    pub capacity: u64,
}

/// Traffic counters of one VIP, summed over all CPUs since program load.
///
/// Exists to confirm a VIP receives (and answers) traffic.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct VipStats {
    /// VIP name from the config.
    pub name: String,
    /// Dataplane service id, to correlate with raw map contents.
    pub service_id: u32,
    /// Packets forwarded towards backends.
    pub packets: u64,
    /// Bytes forwarded towards backends.
    pub bytes: u64,
    /// Flows for which a backend was newly selected: TCP SYNs and
    /// connection-table misses.
    pub new_flows: u64,
    /// Packets addressed to this VIP that were dropped.
    pub drops: u64,
    /// Reply packets seen on the return path (when the mode routes replies
    /// through the balancer).
    pub reply_packets: u64,
    /// Reply bytes seen on the return path.
    pub reply_bytes: u64,
}

/// Count of dropped packets for one reason.
///
/// Exists because "packets vanish" is the most common load-balancer
/// complaint and the reason is the first thing to check.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DropCount {
    /// Machine-friendly drop reason (e.g. `no_backend`, `bad_header`).
    pub reason: String,
    /// Packets dropped for this reason.
    pub packets: u64,
}

/// Body of every non-2xx API response.
///
/// Exists so clients always get a machine-readable, human-meaningful message
/// instead of an empty body or an HTML error page.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ApiError {
    /// What went wrong, phrased for the operator.
    pub error: String,
}

/// What `GET /v1/bgp` returns: the BGP speaker, its peers and the routes it
/// announces.
///
/// Exists so an operator can see whether the sessions are up and which VIPs
/// this node attracts traffic for, without reading the router.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct BgpStatus {
    /// Whether the config has a `bgp:` section (a speaker runs).
    pub enabled: bool,
    /// Our AS number, when enabled.
    pub local_as: Option<u32>,
    /// Our BGP identifier, when enabled.
    pub router_id: Option<String>,
    /// Every configured peer, in configuration order.
    pub peers: Vec<BgpPeerInfo>,
    /// The routes announced to every Established peer (VIPs with
    /// `advertise` on and at least one healthy backend), in prefix order.
    pub routes: Vec<BgpRouteInfo>,
}

/// One BGP peer as `rivoractl bgp` shows it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct BgpPeerInfo {
    /// The peer's address.
    pub address: String,
    /// The peer's BGP port.
    pub port: u16,
    /// The peer's AS.
    pub remote_as: u32,
    /// RFC 4271 state: Idle, Connect, Active (waiting to retry), OpenSent,
    /// OpenConfirm or Established.
    pub state: String,
    /// Seconds since the session became Established.
    pub uptime_secs: Option<u64>,
    /// Prefixes currently announced to this peer.
    pub prefixes_sent: u64,
    /// The most recent problem (connect failure with an MD5 hint,
    /// NOTIFICATION sent or received, ...); kept after recovery.
    pub last_error: Option<String>,
}

/// One announced route.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct BgpRouteInfo {
    /// `203.0.113.10/32` or `2001:db8::10/128`.
    pub prefix: String,
    /// Communities, `AS:VALUE`.
    pub communities: Vec<String>,
    /// Names of the VIPs on this address that have a healthy backend.
    pub vips: Vec<String>,
}

/// What `GET /v1/speaker` returns: the ARP/NDP responder.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct SpeakerStatus {
    /// Whether the config has an `l2Announce:` section.
    pub enabled: bool,
    /// The interface answered on.
    pub interface: Option<String>,
    /// The MAC address put in answers.
    pub mac: Option<String>,
    /// Whether it answers (static mode: always, once started).
    pub active: bool,
    /// Seconds between periodic announcements of each VIP.
    pub announce_interval_secs: u64,
    /// Every VIP address it is configured for.
    pub vips: Vec<SpeakerVipInfo>,
    /// Why the responder is not running (e.g. the interface is missing).
    pub error: Option<String>,
    /// Whether the interface is up with carrier (None: not known, no responder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_up: Option<bool>,
    /// How often the responder stopped answering on its own because the Lease's renew
    /// deadline passed (Kubernetes L2 mode; a sign of a slow or unreachable API server).
    #[serde(default)]
    pub fenced: u64,
}

/// One VIP address of the L2 responder.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SpeakerVipInfo {
    /// The VIP.
    pub address: String,
    /// Whether ARP/NDP for it is answered right now.
    pub answering: bool,
    /// When answering started (seconds since the epoch).
    pub since_unix: Option<u64>,
    /// ARP replies / neighbour advertisements sent in answer to requests.
    pub replies_sent: u64,
    /// Gratuitous ARPs / unsolicited advertisements sent.
    pub announcements_sent: u64,
    /// When the last announcement went out (seconds since the epoch).
    pub last_announce_unix: Option<u64>,
}

/// What `GET /v1/classifier` returns: the classifier (Meridio-2's resource
/// model: whole-address VIPs whose packets ordered rules sort into
/// distribution groups of stable Maglev slots) as programmed, with the
/// datapath's counters summed over CPUs.
///
/// Exists because a classifier VIP that drops traffic can do so for several
/// reasons (no rule matched, the matched group has no target of the
/// packet's family, the target is unreachable) and the per-VIP, per-rule and
/// per-group counters are the only way to tell them apart without bpftool.
/// Empty lists (and no events) on a node without a `classifier:` section.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassifierStatus {
    /// Every classifier VIP, by address.
    pub vips: Vec<ClsVipInfo>,
    /// Every rule, by name.
    pub rules: Vec<ClsRuleInfo>,
    /// Every group, by name.
    pub groups: Vec<ClsGroupInfo>,
    /// Classifier-wide events by name (`no_rule`, `no_target`,
    /// `no_neighbour`, `no_route`, `too_big_icmp`, `too_big_dropped`,
    /// `ttl_to_kernel`, `fragment_unmatched`, `malformed`, `echo`,
    /// `icmp_error`, `vip_gone`), every one listed, so the reason of a drop
    /// that the per-object counters only call `other` can be found.
    pub events: std::collections::BTreeMap<String, u64>,
    /// VIPs adopted from pinned maps (an earlier rivorad's) that the
    /// current configuration has not claimed yet: they still forward, with
    /// the rules the earlier rivorad wrote, until the first apply that
    /// prunes removes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unclaimed_vips: Vec<String>,
}

/// What the datapath counted for one classifier VIP, rule or group, summed
/// over CPUs (`struct rv_cls_stats`). Counters start at zero when the
/// object gets its ID: when it is added, when a rule changes (it takes a
/// new ID), and at every rivorad start (the first apply writes the
/// classifier anew next to what the pinned maps hold).
///
/// Exists as one type so the three tables read the same way: forwarded,
/// then the two kinds of drops.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClsCounters {
    /// Packets forwarded to a target.
    pub packets: u64,
    /// Their sizes as whole frames as received.
    pub bytes: u64,
    /// Packets dropped because the rule's group had no target of the
    /// packet's family (a rule never lets them fall through to a lower one).
    pub no_target: u64,
    /// Packets dropped for any other reason. For a VIP: mostly packets that
    /// matched none of its rules, plus truncated headers, later fragments
    /// whose first was not seen, and packets whose target the FIB could not
    /// reach. For a rule or a group: only the last (no route or neighbour
    /// to the target, or over the route's MTU). `events` of
    /// [`ClassifierStatus`] says which.
    pub other: u64,
}

/// One classifier VIP.
///
/// Exists to show which rules a VIP's packets meet, in the order the
/// datapath evaluates them, and whether it can forward at all (what decides
/// whether it is announced).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ClsVipInfo {
    /// The VIP (a whole address, either family).
    pub address: String,
    /// Dataplane counters slot of the VIP (`cls_vip_stats_map` index).
    pub stats_id: u32,
    /// Names of its rules in evaluation order: priority high to low, then
    /// name; the first that matches wins.
    pub rules: Vec<String>,
    /// Whether some rule leads to a group with a target of the VIP's family:
    /// the VIP is announced (BGP, ARP/NDP) only while this holds.
    pub ready: bool,
    /// What the datapath did with the packets to it.
    pub counters: ClsCounters,
}

/// One classifier rule (Meridio-2's L34Route).
///
/// Exists so an operator can compare what the datapath evaluates with what
/// was meant, and see from its counters whether it matches anything.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ClsRuleInfo {
    /// Unique among the rules (Kubernetes: `NAMESPACE/NAME`).
    pub name: String,
    /// Dataplane rule ID (`cls_rule_map` index); a changed rule takes a new
    /// one.
    pub rule_id: u32,
    /// Higher wins; equal priorities are ordered by name.
    pub priority: i32,
    /// The group it sends matching packets to.
    pub group: String,
    /// The VIPs it applies to.
    pub vips: Vec<String>,
    /// Allowed source prefixes (`192.0.2.0/24`); empty: any source.
    pub sources: Vec<String>,
    /// Allowed source ports (`1024-65535`, `80`); empty: any.
    pub source_ports: Vec<String>,
    /// Allowed destination ports; empty: any.
    pub destination_ports: Vec<String>,
    /// `TCP`, `UDP`, `SCTP`.
    pub protocols: Vec<String>,
    /// Header byte matches as Meridio-2 writes them (`tcp[13:1]&0x12=0x2`),
    /// ANDed.
    pub byte_matches: Vec<String>,
    /// What the datapath did with the packets it matched.
    pub counters: ClsCounters,
}

/// One target of a group: the endpoint in a stable slot.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ClsTargetInfo {
    /// Its slot (Meridio-2's identifier), below the group's max_endpoints.
    pub slot: u16,
    /// IPv4 next hop, if it has one.
    pub v4: Option<String>,
    /// IPv6 next hop, if it has one.
    pub v6: Option<String>,
}

/// One distribution group.
///
/// Exists to show a group's capacity (slots, table length), which targets
/// hold which slot per family, and how much traffic went to it or was
/// dropped for want of a target.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ClsGroupInfo {
    /// Unique among the groups (Kubernetes: `NAMESPACE/NAME`).
    pub name: String,
    /// Dataplane group ID (`cls_group_map` key).
    pub group_id: u32,
    /// Its slots are 0..max_endpoints.
    pub max_endpoints: u16,
    /// Maglev table length per family: the largest prime <= 100 x
    /// max_endpoints, fixed whatever the number of targets.
    pub table_size: u32,
    /// How SCTP is hashed: `ports` or `five-tuple`.
    pub sctp_hash: String,
    /// The usable targets, by slot.
    pub targets: Vec<ClsTargetInfo>,
    /// Slots in the IPv4 table (targets with an IPv4 address); 0: IPv4
    /// packets its rules match are dropped (`no_target`).
    pub slots_v4: u32,
    /// Slots in the IPv6 table.
    pub slots_v6: u32,
    /// What the datapath did with the packets its rules sent it.
    pub counters: ClsCounters,
}
