//! The pure evaluation: from [`Observed`] to the [`Report`] (its sections and its problems).
//!
//! Every problem names the object, says why it is wrong and what to look at or do, so the
//! operator can act on the line alone.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use rivora_k8s_api::rivora_node::{STALE_AFTER_SECS, condition as node_condition};
use rivora_k8s_api::{
    AddressCounts, AddressPool, RivoraNode, address_pool::condition as pool_condition,
};
use serde::Serialize;

use super::{Lookup, Observed};

/// The name of the rivorad DaemonSet the chart installs.
pub const RIVORAD_NAME: &str = "rivorad";
/// The name of the rivora-controller Deployment the chart installs.
pub const CONTROLLER_NAME: &str = "rivora-controller";
/// The name of the controller's leader-election Lease unless its `--lease-name` says otherwise
/// ([`super::LeaseRef`]).
pub const LEASE_NAME: &str = "rivora-controller";
/// The Service condition rivora-controller writes (rivora-controller's `observe::CONDITION_TYPE`).
pub const SERVICE_CONDITION: &str = "rivora.dev/AddressAssigned";

/// What `rivora status` found.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The release namespace.
    pub namespace: String,
    /// The chart version of the release (`None`: no release record).
    pub chart_version: Option<String>,
    /// The rivorad DaemonSet and the rivora-controller Deployment.
    pub components: Vec<Component>,
    /// The controller's leader.
    pub leader: Leader,
    /// One row per node that runs a rivorad or has a report.
    pub nodes: Vec<NodeRow>,
    /// One row per AddressPool.
    pub pools: Vec<PoolRow>,
    /// How many Services of ours there are (`None`: not read).
    pub services: Option<usize>,
    /// How many Gateways of ours there are (`None`: not read or Gateway API not installed).
    pub gateways: Option<usize>,
    /// Services and Gateways of ours without an address.
    pub unaddressed: Vec<Unaddressed>,
    /// Facts worth knowing that are not wrong (Gateway API not installed, a disabled pool...).
    pub notes: Vec<String>,
    /// What is wrong: each names the object, why, and what to do. Empty: healthy.
    pub problems: Vec<String>,
}

/// A workload of the chart.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Component {
    /// `DaemonSet` or `Deployment`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Whether it exists.
    pub present: bool,
    /// Pods it should run (DaemonSet: desiredNumberScheduled; Deployment: spec.replicas).
    pub desired: i32,
    /// Pods ready.
    pub ready: i32,
    /// Pods of the current template.
    pub updated: i32,
    /// Pods available.
    pub available: i32,
}

/// The controller's leader, from its Lease.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Leader {
    /// Whether the Lease exists.
    pub lease_present: bool,
    /// `spec.holderIdentity` (the leading Pod).
    pub holder: Option<String>,
    /// `spec.renewTime`.
    pub renewed: Option<String>,
    /// When the Lease runs out unless renewed (renewTime + leaseDurationSeconds).
    pub expires: Option<String>,
    /// Whether it ran out already (or cannot be told to be alive).
    pub expired: bool,
}

/// One node.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    /// The node (and RivoraNode) name.
    pub name: String,
    /// The rivorad Pod on it, if any.
    pub pod: Option<String>,
    /// Whether it has a RivoraNode report.
    pub reported: bool,
    /// Whether the report is older than [`STALE_AFTER_SECS`].
    pub stale: bool,
    /// Seconds since the report's heartbeat (absent from an older rivorad).
    pub heartbeat_age_secs: Option<i64>,
    /// Whether the datapath is attached.
    pub datapath_attached: bool,
    /// The interface it is attached to.
    pub interface: Option<String>,
    /// `native` or `generic`.
    pub xdp_mode: Option<String>,
    /// VIPs programmed.
    pub vips: i64,
    /// `bgp`, `l2` or `none` (absent: not reported).
    pub announce_mode: Option<String>,
    /// BGP sessions Established.
    pub bgp_established: usize,
    /// BGP sessions configured.
    pub bgp_total: usize,
    /// The L2 Lease holder as this node saw it.
    pub l2_holder: Option<String>,
    /// Whether this node answers ARP/NDP now.
    pub l2_answering: bool,
    /// Whether the node is excluded from external load balancers.
    pub excluded: bool,
    /// What the report says is failing.
    pub errors: Vec<String>,
}

impl NodeRow {
    /// The announce column: BGP sessions established/total, or the L2 holder.
    pub fn announce(&self) -> String {
        let mut s = match self.announce_mode.as_deref() {
            None => "-".to_string(),
            Some("bgp") => format!(
                "BGP {}/{} established",
                self.bgp_established, self.bgp_total
            ),
            Some("l2") => match &self.l2_holder {
                Some(h) if self.l2_answering => format!("L2 holder {h} (this node)"),
                Some(h) => format!("L2 holder {h}"),
                None => "L2, no holder".to_string(),
            },
            Some(m) => m.to_string(),
        };
        if self.excluded {
            s.push_str(" (excluded)");
        }
        s
    }
}

/// One AddressPool.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PoolRow {
    /// Its name.
    pub name: String,
    /// IPv4 counts (absent: no IPv4 block, or not counted yet).
    pub ipv4: Option<AddressCounts>,
    /// IPv6 counts.
    pub ipv6: Option<AddressCounts>,
    /// Addresses assigned, both families (saturating).
    pub used: i64,
    /// Addresses in the pool, both families (saturating).
    pub total: i64,
    /// Nothing left to assign, of any family.
    pub exhausted: bool,
    /// No IPv4 address left in a pool that has some (`ipv4.available` is 0 of a non-zero
    /// total, or `Exhausted` has reason `IPv4Exhausted`).
    pub ipv4_exhausted: bool,
    /// No IPv6 address left in a pool that has some, as [`Self::ipv4_exhausted`].
    pub ipv6_exhausted: bool,
    /// `spec.disabled`.
    pub disabled: bool,
    /// `Valid` is not False.
    pub valid: bool,
    /// `Overlapping` is True.
    pub overlapping: bool,
    /// Whether rivora-controller has counted it (has a status with counts).
    pub counted: bool,
}

/// A Service or Gateway of ours without an address.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Unaddressed {
    /// `Service` or `Gateway`.
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Why, from its condition.
    pub reason: String,
}

impl Report {
    /// Nothing is wrong.
    pub fn healthy(&self) -> bool {
        self.problems.is_empty()
    }

    /// The report as JSON (`-o json`): every section, plus `healthy`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("a report always serialises");
        if let serde_json::Value::Object(m) = &mut v {
            m.insert("healthy".into(), self.healthy().into());
        }
        v
    }
}

/// The pure evaluation.
pub fn evaluate(o: &Observed) -> Report {
    let mut r = Report {
        namespace: o.namespace.clone(),
        chart_version: o.chart_version.clone(),
        components: Vec::new(),
        leader: Leader::default(),
        nodes: Vec::new(),
        pools: Vec::new(),
        services: o.services.found().map(Vec::len),
        gateways: o.gateways.found().map(Vec::len),
        unaddressed: Vec::new(),
        notes: Vec::new(),
        problems: Vec::new(),
    };
    if o.chart_version.is_none() {
        r.notes.push(format!(
            "no Helm release record of Rivora found in namespace {}: the chart version is unknown",
            o.namespace
        ));
    }
    components(o, &mut r);
    leader(o, &mut r);
    nodes(o, &mut r);
    pools(o, &mut r);
    services(o, &mut r);
    gateways(o, &mut r);
    r
}

fn components(o: &Observed, r: &mut Report) {
    let ns = &o.namespace;
    match &o.daemonset {
        Lookup::Found(ds) => {
            let st = ds.status.clone().unwrap_or_default();
            let c = Component {
                kind: "DaemonSet".into(),
                name: RIVORAD_NAME.into(),
                present: true,
                desired: st.desired_number_scheduled,
                ready: st.number_ready,
                updated: st.updated_number_scheduled.unwrap_or(0),
                available: st.number_available.unwrap_or(0),
            };
            let selector = format!("-l app.kubernetes.io/component={RIVORAD_NAME}");
            if c.desired == 0 {
                r.problems.push(format!(
                    "DaemonSet {ns}/{RIVORAD_NAME} schedules no Pods: no node matches its \
                     nodeSelector and tolerations (chart values rivorad.nodeSelector, \
                     rivorad.tolerations), so no node forwards VIP traffic"
                ));
            }
            if c.ready < c.desired {
                r.problems.push(format!(
                    "DaemonSet {ns}/{RIVORAD_NAME}: only {} of {} Pods are ready; see \
                     `kubectl -n {ns} get pods {selector} -o wide` and the logs of the ones not \
                     ready",
                    c.ready, c.desired
                ));
            }
            if c.updated < c.desired {
                r.problems.push(format!(
                    "DaemonSet {ns}/{RIVORAD_NAME}: only {} of {} Pods run the current \
                     template (a rollout in progress or stuck); see `kubectl -n {ns} rollout \
                     status daemonset/{RIVORAD_NAME}`",
                    c.updated, c.desired
                ));
            }
            r.components.push(c);
        }
        other => {
            r.problems.push(missing(
                "DaemonSet",
                ns,
                RIVORAD_NAME,
                other,
                "the node agent",
            ));
            r.components.push(absent("DaemonSet", RIVORAD_NAME));
        }
    }
    match &o.deployment {
        Lookup::Found(d) => {
            let st = d.status.clone().unwrap_or_default();
            let c = Component {
                kind: "Deployment".into(),
                name: CONTROLLER_NAME.into(),
                present: true,
                desired: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                ready: st.ready_replicas.unwrap_or(0),
                updated: st.updated_replicas.unwrap_or(0),
                available: st.available_replicas.unwrap_or(0),
            };
            if c.desired == 0 {
                r.problems.push(format!(
                    "Deployment {ns}/{CONTROLLER_NAME} is scaled to 0: nothing assigns addresses \
                     or writes status; set the chart value controller.replicas"
                ));
            } else if c.ready < c.desired {
                r.problems.push(format!(
                    "Deployment {ns}/{CONTROLLER_NAME}: only {} of {} replicas are ready; see \
                     `kubectl -n {ns} get pods -l app.kubernetes.io/component=controller` and \
                     their logs",
                    c.ready, c.desired
                ));
            }
            r.components.push(c);
        }
        other => {
            r.problems.push(missing(
                "Deployment",
                ns,
                CONTROLLER_NAME,
                other,
                "the controller (address assignment, status)",
            ));
            r.components.push(absent("Deployment", CONTROLLER_NAME));
        }
    }
}

fn absent(kind: &str, name: &str) -> Component {
    Component {
        kind: kind.into(),
        name: name.into(),
        present: false,
        desired: 0,
        ready: 0,
        updated: 0,
        available: 0,
    }
}

/// The problem of an object that could not be found or read.
fn missing<T>(kind: &str, ns: &str, name: &str, l: &Lookup<T>, what: &str) -> String {
    match l {
        Lookup::Unreadable(e) => format!(
            "could not read {kind} {ns}/{name}: {e}; check that your credentials may read it"
        ),
        _ => format!(
            "{kind} {ns}/{name} is missing: {what} is not installed in namespace {ns}; install \
             with `rivora install` (or give the release namespace)"
        ),
    }
}

fn leader(o: &Observed, r: &mut Report) {
    let ns = &o.namespace;
    let lease_ref = &o.lease_ref;
    let lease = match &o.lease {
        Lookup::Found(l) => l,
        Lookup::Missing => {
            r.leader.expired = true;
            r.problems.push(format!(
                "Lease {lease_ref} does not exist: no rivora-controller replica has joined \
                 the leader election, so none writes Service or Gateway status; check the \
                 Deployment {ns}/{CONTROLLER_NAME}"
            ));
            return;
        }
        Lookup::Unreadable(e) => {
            r.leader.expired = true;
            r.problems.push(format!(
                "could not read Lease {lease_ref}: {e}; the controller's leader is unknown"
            ));
            return;
        }
    };
    r.leader.lease_present = true;
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.filter(|h| !h.is_empty());
    r.leader.holder = holder.clone();
    let renewed = spec.renew_time.map(|t| t.0);
    r.leader.renewed = renewed.map(|t| t.to_string());
    let Some(holder) = holder else {
        r.leader.expired = true;
        r.problems.push(format!(
            "Lease {lease_ref} has no holder: no rivora-controller replica leads, so no \
             Service or Gateway status is written; check the controller Pods' logs"
        ));
        return;
    };
    match (renewed, spec.lease_duration_seconds) {
        (Some(renewed), Some(duration)) => {
            let expires = renewed.as_second().saturating_add(i64::from(duration));
            r.leader.expires = Timestamp::from_second(expires).ok().map(|t| t.to_string());
            let now = o.now.as_second();
            if expires < now {
                r.leader.expired = true;
                r.problems.push(format!(
                    "Lease {lease_ref} of {holder} expired {}s ago (renewed at {renewed}, \
                     leaseDurationSeconds {duration}): the leader stopped renewing and no other \
                     replica took over; check the controller Pods and their API server access",
                    now - expires
                ));
            }
        }
        _ => {
            r.leader.expired = true;
            r.problems.push(format!(
                "Lease {lease_ref} of {holder} has no renewTime or leaseDurationSeconds: \
                 whether its leader is alive cannot be told; check the controller Pods"
            ));
        }
    }
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn nodes(o: &Observed, r: &mut Report) {
    let ns = &o.namespace;
    // node name -> Pod name
    let mut pods: BTreeMap<String, String> = BTreeMap::new();
    match &o.rivorad_pods {
        Lookup::Found(list) => {
            for p in list {
                if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                    pods.insert(node, p.metadata.name.clone().unwrap_or_default());
                }
            }
        }
        Lookup::Missing => {}
        Lookup::Unreadable(e) => r.problems.push(format!(
            "could not list the rivorad Pods in {ns}: {e}; nodes without a report cannot be found"
        )),
    }
    let reports: BTreeMap<String, &RivoraNode> = match &o.nodes {
        Lookup::Found(list) => list
            .iter()
            .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
            .collect(),
        Lookup::Missing => {
            r.problems.push(
                "the RivoraNode CRD (rivoranodes.rivora.dev) is not installed: nodes cannot \
                 report what they program; reinstall the chart (its crds/) with `rivora install`"
                    .into(),
            );
            BTreeMap::new()
        }
        Lookup::Unreadable(e) => {
            r.problems.push(format!(
                "could not list RivoraNodes: {e}; the nodes' state is unknown"
            ));
            BTreeMap::new()
        }
    };
    let reports_read = o.nodes.found().is_some();
    let names: BTreeSet<&String> = pods.keys().chain(reports.keys()).collect();
    for name in names {
        let mut row = NodeRow {
            name: name.clone(),
            pod: pods.get(name).cloned(),
            ..NodeRow::default()
        };
        let Some(node) = reports.get(name) else {
            if reports_read {
                r.problems.push(format!(
                    "node {name} runs rivorad Pod {ns}/{pod} but has no RivoraNode report: its \
                     rivorad is starting or cannot write it; see `kubectl -n {ns} logs {pod}`",
                    pod = row.pod.as_deref().unwrap_or("?")
                ));
            }
            r.nodes.push(row);
            continue;
        };
        row.reported = true;
        let st = node.status.clone().unwrap_or_default();
        if let Some(hb) = &st.heartbeat_time {
            let age = o.now.as_second() - hb.0.as_second();
            row.heartbeat_age_secs = Some(age);
            row.stale = age > STALE_AFTER_SECS;
        }
        if let Some(dp) = &st.datapath {
            row.datapath_attached = true;
            row.interface = Some(dp.interface.clone());
            row.xdp_mode = Some(dp.xdp_mode.clone());
        }
        row.vips = st.vip_count;
        if let Some(a) = &st.announce {
            row.announce_mode = Some(a.mode.clone());
            row.excluded = a.excluded;
            row.bgp_total = a.bgp_sessions.len();
            row.bgp_established = a
                .bgp_sessions
                .iter()
                .filter(|s| s.state == "Established")
                .count();
            row.l2_holder = a.l2_holder.clone().filter(|h| !h.is_empty());
            row.l2_answering = a.l2_answering;
        }
        row.errors = node_errors(&st);

        if row.stale {
            r.problems.push(format!(
                "node {name}: its RivoraNode report is stale (last heartbeat {}s ago, more than \
                 {STALE_AFTER_SECS}s): its rivorad is gone or cut off from the API server{}",
                row.heartbeat_age_secs.unwrap_or_default(),
                if row.pod.is_some() {
                    format!(
                        "; see `kubectl -n {ns} logs {}`",
                        row.pod.as_deref().unwrap_or("")
                    )
                } else {
                    format!(
                        "; no rivorad Pod runs there: if the node was removed, `kubectl delete \
                         rivoranode {name}`"
                    )
                }
            ));
        }
        if !row.datapath_attached {
            r.problems.push(format!(
                "node {name}: the datapath is not attached (RivoraNode {name} reports none), so \
                 it forwards nothing; see its Ready condition (`kubectl get rivoranode {name} -o \
                 yaml`) and its rivorad's logs"
            ));
        }
        if !row.errors.is_empty() {
            r.problems.push(format!(
                "node {name} reports errors: {}; see `kubectl get rivoranode {name} -o yaml`",
                row.errors.join("; ")
            ));
        }
        if st.heartbeat_time.is_none() {
            r.notes.push(format!(
                "node {name}: its report has no heartbeat (an older rivorad), so whether it is \
                 stale cannot be told"
            ));
        }
        r.nodes.push(row);
    }
    if reports_read && o.rivorad_pods.found().is_some() && r.nodes.is_empty() {
        r.notes
            .push("no node runs rivorad and none has a report".into());
    }
}

/// What a report says is failing.
fn node_errors(st: &rivora_k8s_api::RivoraNodeStatus) -> Vec<String> {
    let mut errors = Vec::new();
    if let Some(c) = condition(&st.conditions, node_condition::READY)
        && c.status == "False"
    {
        errors.push(format!("not Ready ({}): {}", c.reason, c.message));
    }
    if let Some(c) = condition(&st.conditions, node_condition::INITIAL_SYNC_COMPLETE)
        && c.status == "False"
        && c.reason == "Blocked"
    {
        let what = if st.blocking.is_empty() {
            c.message.clone()
        } else {
            st.blocking.join(", ")
        };
        errors.push(format!("initial sync blocked by {what}"));
    }
    if let Some(a) = &st.announce {
        for s in a.bgp_sessions.iter().filter(|s| s.state != "Established") {
            errors.push(format!(
                "BGP session to {} ({}:{}) is {}{}",
                s.peer,
                s.address,
                s.port,
                s.state,
                s.last_error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ));
        }
        for p in &a.bgp_problems {
            errors.push(format!("BGPPeer refused: {p}"));
        }
        if let Some(e) = &a.l2_error {
            errors.push(format!("L2 Lease: {e}"));
        }
    }
    for s in st.services.iter().filter(|s| !s.programmed) {
        errors.push(format!(
            "Service {}/{} not programmed{}",
            s.namespace,
            s.name,
            s.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ));
    }
    for g in &st.gateways {
        for l in g.listeners.iter().filter(|l| !l.programmed) {
            errors.push(format!(
                "Gateway {}/{} listener {} not programmed{}",
                g.namespace,
                g.name,
                l.name,
                l.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ));
        }
    }
    errors
}

fn pools(o: &Observed, r: &mut Report) {
    let list: &[AddressPool] = match &o.pools {
        Lookup::Found(l) => l,
        Lookup::Missing => {
            r.problems.push(
                "the AddressPool CRD (addresspools.rivora.dev) is not installed: no address can \
                 be assigned; reinstall the chart (its crds/) with `rivora install`"
                    .into(),
            );
            return;
        }
        Lookup::Unreadable(e) => {
            r.problems.push(format!("could not list AddressPools: {e}"));
            return;
        }
    };
    if list.is_empty() {
        r.notes.push(
            "no AddressPool exists: no Service or Gateway can get an address until one is \
             created"
                .into(),
        );
    }
    let mut rows: Vec<PoolRow> = list.iter().map(pool_row).collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    for row in &rows {
        let name = &row.name;
        let conds = list
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| p.status.as_ref())
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        if row.exhausted {
            r.problems.push(format!(
                "AddressPool {name} is exhausted ({}/{} addresses used): Services and Gateways \
                 that may only use it get no address; add blocks to its spec.addresses or \
                 create another pool",
                row.used, row.total
            ));
        }
        if !row.exhausted {
            let out = [
                ("IPv4", row.ipv4_exhausted, &row.ipv4, &row.ipv6, "IPv6"),
                ("IPv6", row.ipv6_exhausted, &row.ipv6, &row.ipv4, "IPv4"),
            ];
            for (fam, is_out, counts, other_counts, other) in out {
                if !is_out {
                    continue;
                }
                let used = match counts {
                    Some(c) => format!("{}/{} {fam} addresses used", c.used, c.total),
                    None => format!("{fam} not counted"),
                };
                let left = match other_counts {
                    Some(c) => format!("{} {other} left", c.available),
                    None => format!("no {other} block"),
                };
                r.problems.push(format!(
                    "AddressPool {name} is out of {fam} addresses ({used}, {left}): Services \
                     and Gateways that want {fam} and may only use it get no {fam} address; add \
                     {fam} addresses to its spec.addresses or create another pool with {fam} \
                     addresses"
                ));
            }
        }
        if !row.valid {
            let msg = condition(&conds, pool_condition::VALID)
                .map(|c| format!(" ({}): {}", c.reason, c.message))
                .unwrap_or_default();
            r.problems.push(format!(
                "AddressPool {name} is not valid{msg}; nothing is allocated from it until \
                 spec.addresses is fixed"
            ));
        }
        if row.overlapping {
            let msg = condition(&conds, pool_condition::OVERLAPPING)
                .map(|c| format!(": {}", c.message))
                .unwrap_or_default();
            r.problems.push(format!(
                "AddressPool {name} overlaps another pool{msg}; the newer of the two is not \
                 allocated from: make their blocks disjoint"
            ));
        }
        if row.disabled {
            r.notes.push(format!(
                "AddressPool {name} is disabled: no new allocations from it"
            ));
        }
    }
    r.pools = rows;
}

fn pool_row(p: &AddressPool) -> PoolRow {
    let st = p.status.clone().unwrap_or_default();
    let fams: Vec<AddressCounts> = st.ipv4.iter().chain(st.ipv6.iter()).copied().collect();
    let used = fams.iter().fold(0i64, |a, c| a.saturating_add(c.used));
    let total = fams.iter().fold(0i64, |a, c| a.saturating_add(c.total));
    let by_counts = !fams.is_empty() && fams.iter().all(|c| c.available <= 0);
    let exhausted_cond = condition(&st.conditions, pool_condition::EXHAUSTED);
    let exhausted = match exhausted_cond {
        Some(c) => c.status == "True",
        None => by_counts,
    };
    // A family is out when its counts say so (a pool without addresses of it is not "out"), or
    // when rivora-controller says so: a dual-stack pool out of one family keeps
    // `Exhausted=False` with reason `IPv4Exhausted`/`IPv6Exhausted`.
    let family_out = |counts: &Option<AddressCounts>, reason: &str| {
        counts.is_some_and(|c| c.total > 0 && c.available <= 0)
            || exhausted_cond.is_some_and(|c| c.reason == reason)
    };
    let ipv4_exhausted = family_out(&st.ipv4, "IPv4Exhausted");
    let ipv6_exhausted = family_out(&st.ipv6, "IPv6Exhausted");
    PoolRow {
        name: p.metadata.name.clone().unwrap_or_default(),
        ipv4: st.ipv4,
        ipv6: st.ipv6,
        used,
        total,
        exhausted,
        ipv4_exhausted,
        ipv6_exhausted,
        disabled: p.spec.disabled,
        valid: condition(&st.conditions, pool_condition::VALID).is_none_or(|c| c.status != "False"),
        overlapping: condition(&st.conditions, pool_condition::OVERLAPPING)
            .is_some_and(|c| c.status == "True"),
        counted: !fams.is_empty(),
    }
}

/// What to do about a Service condition reason of rivora-controller's.
fn service_hint(reason: &str) -> &'static str {
    match reason {
        "NoPool" => {
            "create an AddressPool whose selectors admit it and that has its address family"
        }
        "PoolExhausted" => "add addresses to a pool that may serve it, or free some",
        "PoolUnusable" => {
            "fix the rivora.dev/address-pool annotation, or the pool (disabled, invalid or overlapping)"
        }
        "AddressInUse" => "request another address, or release it from the other owner",
        "AddressOutsidePools" => "request an address inside an AddressPool that may serve it",
        "NotDualStack" => "add pools of both families, or relax spec.ipFamilyPolicy",
        "UnsupportedProtocol" => "Rivora forwards TCP and UDP only: remove the other ports",
        "UnsupportedAddress" => "Rivora assigns IP addresses only",
        "SharingRefused" => "make the Services sharing the key compatible, or drop the key",
        "InvalidRequest" => {
            "fix the annotation or spec.loadBalancerIP the message names: a requested address \
             (spec.loadBalancerIP, the rivora.dev/load-balancer-ips annotation) must be of a \
             family spec.ipFamilies and spec.ipFamilyPolicy give the Service, and \
             RequireDualStack needs one of each family or none; or change spec.ipFamilies or \
             spec.ipFamilyPolicy"
        }
        _ => "see the message, and rivora-controller's logs",
    }
}

fn services(o: &Observed, r: &mut Report) {
    let list = match &o.services {
        Lookup::Found(l) => l,
        Lookup::Missing => return,
        Lookup::Unreadable(e) => {
            r.problems.push(format!(
                "could not list Services: {e}; their addresses are unknown"
            ));
            return;
        }
    };
    let mut rows = Vec::new();
    for svc in list {
        let has_address = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .is_some_and(|i| {
                i.iter().any(|e| {
                    e.ip.as_deref().is_some_and(|s| !s.is_empty())
                        || e.hostname.as_deref().is_some_and(|s| !s.is_empty())
                })
            });
        if has_address {
            continue;
        }
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        let name = svc.metadata.name.clone().unwrap_or_default();
        let cond = svc
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == SERVICE_CONDITION));
        let (reason, hint) = match cond {
            Some(c) if c.status == "False" => (
                format!("{}: {}", c.reason, c.message),
                service_hint(&c.reason),
            ),
            Some(c) => (
                format!(
                    "{SERVICE_CONDITION} is {} ({}) but status.loadBalancer.ingress is empty",
                    c.status, c.reason
                ),
                "wait a moment; if it stays, see rivora-controller's logs",
            ),
            None => (
                format!("no {SERVICE_CONDITION} condition: rivora-controller has not handled it"),
                "check that rivora-controller runs and leads (above)",
            ),
        };
        r.problems.push(format!(
            "Service {ns}/{name} has no address: {reason}; {hint}"
        ));
        rows.push(Unaddressed {
            kind: "Service".into(),
            namespace: ns,
            name,
            reason,
        });
    }
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    r.unaddressed.extend(rows);
}

fn gateways(o: &Observed, r: &mut Report) {
    let list = match &o.gateways {
        Lookup::Found(l) => l,
        Lookup::Missing => {
            r.notes
                .push("the Gateway API CRDs are not installed: Gateways were not checked".into());
            return;
        }
        Lookup::Unreadable(e) => {
            r.problems.push(format!(
                "could not list Gateways: {e}; their addresses are unknown"
            ));
            return;
        }
    };
    let mut rows = Vec::new();
    for gw in list {
        let st = gw.status.clone().unwrap_or_default();
        if st
            .addresses
            .as_ref()
            .is_some_and(|a| a.iter().any(|a| !a.value.is_empty()))
        {
            continue;
        }
        let ns = gw.metadata.namespace.clone().unwrap_or_default();
        let name = gw.metadata.name.clone().unwrap_or_default();
        let conds = st.conditions.unwrap_or_default();
        let accepted = condition(&conds, "Accepted");
        let programmed = condition(&conds, "Programmed");
        let reason = match (accepted, programmed) {
            (Some(a), _) if a.status == "False" => {
                format!("not Accepted ({}): {}", a.reason, a.message)
            }
            (_, Some(p)) if p.status == "False" => {
                format!("not Programmed ({}): {}", p.reason, p.message)
            }
            (None, None) => {
                "no Accepted or Programmed condition: rivora-controller has not handled it".into()
            }
            _ => "status.addresses is empty".into(),
        };
        r.problems.push(format!(
            "Gateway {ns}/{name} has no address: {reason}; see `kubectl -n {ns} describe gateway \
             {name}` and rivora-controller's logs"
        ));
        rows.push(Unaddressed {
            kind: "Gateway".into(),
            namespace: ns,
            name,
            reason,
        });
    }
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    r.unaddressed.extend(rows);
}
