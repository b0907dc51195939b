//! A snapshot of Meridio-2's objects to the classifier spec of one Gateway, with a report per
//! DistributionGroup and the objects refused.
//!
//! Why one pure function over the whole snapshot: which groups belong to the Gateway, and
//! whether a group is reached by two Gateways, depend on every route of the namespace at once;
//! recomputing everything from each snapshot means no missed event can leave a rule or a target
//! behind.
//!
//! - Only objects in the Gateway's namespace are read (Meridio-2's load balancer caches that
//!   namespace only).
//! - Ownership (Meridio-2's `belongsToGateway`): a group belongs when an L34Route whose
//!   parentRefs name the Gateway (group `gateway.networking.k8s.io`, kind `Gateway`, namespace
//!   defaulting to the route's) has a backendRef to it (group `meridio-2.nordix.org`, kind
//!   `DistributionGroup`), or when its own `spec.parentRefs` name the Gateway. A group reached
//!   by another Gateway too (through its parentRefs or any route of the namespace) is not
//!   served: `Ready=False/MultipleGateways`, and its routes are refused. Another Gateway counts
//!   only if it exists in the snapshot (Meridio-2 counts the Gateways it can get; acceptance
//!   is not looked at here).
//! - Groups: named `NAMESPACE/NAME`; `max_endpoints` the effective `maglev.maxEndpoints` (102
//!   when the block is left out), refused above the datapath's
//!   [`MAX_SLOTS`]; SCTP hashing from the
//!   annotation [`ANNOTATION_SCTP_HASH`]; targets from [`super::endpoints`]. A served group is
//!   in the spec even without a route, so its table is ready when a route comes.
//! - Rules: one per route attached to the Gateway whose one backendRef is a served group; named
//!   `NAMESPACE/NAME`. `destinationCIDRs` must be host prefixes (the VIPs); `sourceCIDRs` that
//!   are all `/0` mean any source, as in Meridio-2 (`anyIPRange`); a port list holding `any`
//!   (0-65535) means any port (`anyPortRange`); byte matches parse as Meridio-2 writes them. A
//!   route with any field that does not parse is refused whole.
//! - Last, the spec is checked by the datapath's validation and whatever it refuses is left out
//!   (a target alone, else the group with its rules, or the rule), so the spec returned always
//!   validates and one bad object never keeps the others out.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rivora_dataplane::SourceRange;
use rivora_dataplane::classifier::validate::{self, MAX_SLOTS, Object, Problem};
use rivora_dataplane::classifier::{
    ByteMatch, ClassifierSpec, GroupSpec, PortRange, RuleProto, RuleSpec, SctpHash, TargetSpec,
};
use rivora_k8s_api::meridio::{
    DISTRIBUTION_GROUP_LABEL, DistributionGroup, L34Route, LoadBalancerEndpointSlice,
    TransportProtocol,
};
use rivora_k8s_api::route::{DEFAULT_PARENT_KIND, GATEWAY_GROUP};

use super::endpoints::group_targets;
use super::{
    ANNOTATION_SCTP_HASH, GatewayRef, GroupReport, MeridioOutcome, MeridioSnapshot, status,
};

/// What became of a group that belongs to the Gateway, before validation.
enum Fate {
    /// In the spec, with its capacity figures.
    Served {
        max_endpoints: u32,
        considered: usize,
        excluded: usize,
    },
    /// Reached by these Gateways (`NS/NAME`, sorted, the served one among them).
    Multiple(Vec<String>),
    /// Not servable, why.
    Refused(String),
}

fn name_of(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

fn namespace_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or_default()
}

/// The Gateways a route's parentRefs name (other kinds of parent are not Gateways).
fn route_gateways(route: &L34Route) -> impl Iterator<Item = GatewayRef> + '_ {
    let ns = namespace_of(&route.metadata);
    route
        .spec
        .parent_refs
        .iter()
        .filter(|p| {
            p.group_or_default() == GATEWAY_GROUP && p.kind_or_default() == DEFAULT_PARENT_KIND
        })
        .map(move |p| GatewayRef::new(p.namespace_or(ns), p.name.clone()))
}

/// Whether a route is attached to `gw`.
fn attached(route: &L34Route, gw: &GatewayRef) -> bool {
    route_gateways(route).any(|g| g == *gw)
}

/// Whether a route's backendRefs name group `namespace/name`.
fn sends_to(route: &L34Route, namespace: &str, name: &str) -> bool {
    let ns = namespace_of(&route.metadata);
    route
        .spec
        .backend_refs
        .iter()
        .any(|b| b.is_distribution_group() && b.namespace_or(ns) == namespace && b.name == name)
}

/// Every Gateway that reaches `dg`: its own parentRefs, and the parents of the routes to it.
fn gateways_of(dg: &DistributionGroup, routes: &[&L34Route]) -> BTreeSet<GatewayRef> {
    let ns = namespace_of(&dg.metadata);
    let name = name_of(&dg.metadata);
    let mut out: BTreeSet<GatewayRef> = dg
        .spec
        .parent_refs
        .iter()
        .filter(|p| {
            p.group_or_default() == GATEWAY_GROUP && p.kind_or_default() == DEFAULT_PARENT_KIND
        })
        .map(|p| GatewayRef::new(p.namespace_or(ns), p.name.clone()))
        .collect();
    for route in routes.iter().filter(|r| sends_to(r, ns, name)) {
        out.extend(route_gateways(route));
    }
    out
}

/// The group's SCTP hashing from [`ANNOTATION_SCTP_HASH`]; a bad value is a problem and means
/// the default.
fn sctp_hash_of(dg: &DistributionGroup, group: &str, problems: &mut Vec<String>) -> SctpHash {
    let value = dg
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_SCTP_HASH));
    match value.map(String::as_str) {
        None => SctpHash::default(),
        Some(v) if v == SctpHash::Ports.as_str() => SctpHash::Ports,
        Some(v) if v == SctpHash::FiveTuple.as_str() => SctpHash::FiveTuple,
        Some(other) => {
            problems.push(format!(
                "DistributionGroup {group}: annotation {ANNOTATION_SCTP_HASH}: {other:?} is not \
                 ports or five-tuple; ports is used"
            ));
            SctpHash::default()
        }
    }
}

/// A VIP from a `destinationCIDRs` entry: an IPv4 /32 or IPv6 /128, as the CRD requires.
fn host_address(cidr: &str) -> Result<IpAddr, String> {
    let net: IpNet = cidr.parse().map_err(|_| {
        format!("{cidr:?} is not a CIDR (a VIP is written as an IPv4 /32 or an IPv6 /128)")
    })?;
    if net.prefix_len() != net.max_prefix_len() {
        return Err(format!(
            "{cidr} is not a single address (a VIP is an IPv4 /32 or an IPv6 /128)"
        ));
    }
    Ok(net.addr())
}

fn proto(p: TransportProtocol) -> RuleProto {
    match p {
        TransportProtocol::Tcp => RuleProto::Tcp,
        TransportProtocol::Udp => RuleProto::Udp,
        TransportProtocol::Sctp => RuleProto::Sctp,
    }
}

/// Port ranges of one side; a list holding 0-65535 (`any`) matches every port, which the rule
/// says with an empty list.
fn port_ranges(field: &str, list: &[String], errs: &mut Vec<(String, String)>) -> Vec<PortRange> {
    let mut out = Vec::new();
    for (i, p) in list.iter().enumerate() {
        match p.parse::<PortRange>() {
            Ok(r) => out.push(r),
            Err(why) => errs.push((format!("{field}[{i}]"), why)),
        }
    }
    if out.contains(&PortRange::ANY) {
        out.clear();
    }
    out
}

/// The rule of an attached route, or why it is refused (field, reason).
fn rule_fields(
    route: &L34Route,
    name: String,
    group: String,
) -> Result<RuleSpec, Vec<(String, String)>> {
    let spec = &route.spec;
    let mut errs: Vec<(String, String)> = Vec::new();
    let mut vips = Vec::new();
    for (i, c) in spec.destination_cidrs.iter().enumerate() {
        match host_address(c) {
            Ok(a) => vips.push(a),
            Err(why) => errs.push((format!("destinationCIDRs[{i}]"), why)),
        }
    }
    let mut sources = Vec::new();
    for (i, c) in spec.source_cidrs.iter().enumerate() {
        match c.parse::<IpNet>() {
            Ok(net) => sources.push(SourceRange::new(net.network(), net.prefix_len())),
            Err(_) => errs.push((format!("sourceCIDRs[{i}]"), format!("{c:?} is not a CIDR"))),
        }
    }
    if sources.iter().all(|s| s.prefix_len == 0) {
        sources.clear();
    }
    let source_ports = port_ranges("sourcePorts", &spec.source_ports, &mut errs);
    let destination_ports = port_ranges("destinationPorts", &spec.destination_ports, &mut errs);
    let mut byte_matches = Vec::new();
    for (i, m) in spec.byte_matches.iter().enumerate() {
        match m.parse::<ByteMatch>() {
            Ok(b) => byte_matches.push(b),
            Err(why) => errs.push((format!("byteMatches[{i}]"), why)),
        }
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    Ok(RuleSpec {
        name,
        priority: spec.priority,
        group,
        vips,
        sources,
        source_ports,
        destination_ports,
        protocols: spec.protocols.iter().copied().map(proto).collect(),
        byte_matches,
    })
}

/// The rule of route `name` (attached to the Gateway), or the problems that refuse it.
fn rule_of(
    route: &L34Route,
    ns: &str,
    fates: &BTreeMap<&str, (i64, Fate)>,
) -> Result<RuleSpec, Vec<String>> {
    let name = format!("{ns}/{}", name_of(&route.metadata));
    let refuse = |field: &str, why: String| {
        format!("L34Route {name}: {field}: {why}; the route is not used")
    };
    let backend = match route.spec.backend_refs.as_slice() {
        [b] => b,
        [] => {
            return Err(vec![refuse(
                "backendRefs",
                "no backendRef (a route sends to one DistributionGroup)".into(),
            )]);
        }
        more => {
            return Err(vec![refuse(
                "backendRefs",
                format!("{} backendRefs; a route has exactly one", more.len()),
            )]);
        }
    };
    if !backend.is_distribution_group() {
        return Err(vec![refuse(
            "backendRefs[0]",
            format!(
                "group {:?} kind {:?} is not a DistributionGroup (group meridio-2.nordix.org)",
                backend.group_or_default(),
                backend.kind_or_default()
            ),
        )]);
    }
    let backend_ns = backend.namespace_or(ns);
    let group = format!("{backend_ns}/{}", backend.name);
    if backend_ns != ns {
        return Err(vec![refuse(
            "backendRefs[0]",
            format!(
                "DistributionGroup {group} is not in the Gateway's namespace {ns} (only that \
                 namespace is read)"
            ),
        )]);
    }
    match fates.get(backend.name.as_str()).map(|(_, f)| f) {
        None => Err(vec![refuse(
            "backendRefs[0]",
            format!("DistributionGroup {group} not found"),
        )]),
        Some(Fate::Multiple(gws)) => Err(vec![refuse(
            "backendRefs[0]",
            format!(
                "DistributionGroup {group} is referenced by more than one Gateway ({}) and is \
                 not served",
                gws.join(", ")
            ),
        )]),
        Some(Fate::Refused(why)) => Err(vec![refuse(
            "backendRefs[0]",
            format!("DistributionGroup {group} is not served ({why})"),
        )]),
        Some(Fate::Served { .. }) => rule_fields(route, name.clone(), group)
            .map_err(|errs| errs.into_iter().map(|(f, why)| refuse(&f, why)).collect()),
    }
}

/// Where a validation problem is: `field`, `field[item]` or `field[item].sub`.
fn location(p: &Problem) -> String {
    let mut at = p.field.to_string();
    if let Some(i) = p.item {
        at.push_str(&format!("[{i}]"));
    }
    if let Some(sub) = p.sub {
        at.push('.');
        at.push_str(sub);
    }
    at
}

/// Whether `target` alone passes validation in a group of `max_endpoints` slots.
fn target_passes(target: TargetSpec, max_endpoints: u16) -> bool {
    let probe = ClassifierSpec {
        groups: vec![GroupSpec {
            name: "probe".into(),
            max_endpoints,
            sctp_hash: SctpHash::default(),
            targets: vec![target],
        }],
        rules: Vec::new(),
    };
    validate::problems(&probe).is_empty()
}

/// What is left of a refused target: its families that pass alone (a dual-stack endpoint with
/// one bad address keeps the other family), or None.
fn salvage(target: TargetSpec, max_endpoints: u16) -> Option<TargetSpec> {
    let v4 = target
        .v4
        .filter(|_| target_passes(TargetSpec { v6: None, ..target }, max_endpoints));
    let v6 = target
        .v6
        .filter(|_| target_passes(TargetSpec { v4: None, ..target }, max_endpoints));
    let kept = TargetSpec { v4, v6, ..target };
    // Unchanged means the problem is not in one family (say, the slot): drop it all.
    (kept != target && (v4.is_some() || v6.is_some())).then_some(kept)
}

/// Leaves out of `spec` whatever the datapath's validation refuses, until it validates: an
/// endpoint's bad address (or the endpoint) when only it is wrong, else the group (and its
/// rules), or the rule. Returns the groups left out, with why.
fn prune(spec: &mut ClassifierSpec, problems: &mut Vec<String>) -> BTreeMap<String, String> {
    let mut refused: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let found = validate::problems(spec);
        if found.is_empty() {
            return refused;
        }
        let mut drop_groups: BTreeSet<usize> = BTreeSet::new();
        let mut drop_rules: BTreeSet<usize> = BTreeSet::new();
        let mut bad_targets: BTreeMap<(usize, usize), Vec<&str>> = BTreeMap::new();
        for p in &found {
            match p.object {
                Object::Group(i) => match p.item.filter(|_| p.field == "targets") {
                    Some(k) => bad_targets.entry((i, k)).or_default().push(&p.message),
                    None => {
                        let g = &spec.groups[i];
                        drop_groups.insert(i);
                        let why = format!("{}: {}", location(p), p.message);
                        problems.push(format!(
                            "DistributionGroup {}: {why}; the group is not served",
                            g.name
                        ));
                        refused.entry(g.name.clone()).or_insert(why);
                    }
                },
                Object::Rule(i) => {
                    drop_rules.insert(i);
                    problems.push(format!(
                        "L34Route {}: {}: {}; the route is not used",
                        spec.rules[i].name,
                        location(p),
                        p.message
                    ));
                }
            }
        }
        let gone: BTreeSet<&str> = drop_groups
            .iter()
            .map(|&i| spec.groups[i].name.as_str())
            .collect();
        for (i, rule) in spec.rules.iter().enumerate() {
            if gone.contains(rule.group.as_str()) && drop_rules.insert(i) {
                problems.push(format!(
                    "L34Route {}: backendRefs[0]: DistributionGroup {} is not served; the route \
                     is not used",
                    rule.name, rule.group
                ));
            }
        }
        // Targets, last first so the indexes of the others hold.
        for (&(i, k), messages) in bad_targets.iter().rev() {
            if drop_groups.contains(&i) {
                continue;
            }
            let group = &mut spec.groups[i];
            let target = group.targets[k];
            let kept = salvage(target, group.max_endpoints);
            let outcome = match kept {
                Some(_) => "that address is not used",
                None => "the endpoint is not used",
            };
            for m in messages {
                problems.push(format!(
                    "DistributionGroup {}: the endpoint with identifier {}: {m}; {outcome}",
                    group.name, target.slot
                ));
            }
            match kept {
                Some(t) => group.targets[k] = t,
                None => {
                    group.targets.remove(k);
                }
            }
        }
        let mut i = 0;
        spec.groups.retain(|_| {
            i += 1;
            !drop_groups.contains(&(i - 1))
        });
        let mut i = 0;
        spec.rules.retain(|_| {
            i += 1;
            !drop_rules.contains(&(i - 1))
        });
    }
}

/// The classifier spec of Gateway `gw` from `snap`, with a report per group of the Gateway and
/// the objects refused (see the module documentation for the rules).
pub fn translate(gw: &GatewayRef, snap: &MeridioSnapshot) -> MeridioOutcome {
    let ns = gw.namespace.as_str();
    let mut groups: BTreeMap<&str, &DistributionGroup> = BTreeMap::new();
    for dg in &snap.distribution_groups {
        if namespace_of(&dg.metadata) == ns {
            groups.entry(name_of(&dg.metadata)).or_insert(dg);
        }
    }
    let mut routes: Vec<&L34Route> = snap
        .routes
        .iter()
        .map(AsRef::as_ref)
        .filter(|r| namespace_of(&r.metadata) == ns)
        .collect();
    routes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let existing: BTreeSet<GatewayRef> = snap
        .gateways
        .iter()
        .map(|g| GatewayRef::new(namespace_of(&g.metadata), name_of(&g.metadata)))
        .collect();

    // Slices by the group they name, so a group's are found without a scan of every slice.
    let mut lb_slices: BTreeMap<&str, Vec<Arc<LoadBalancerEndpointSlice>>> = BTreeMap::new();
    for s in snap
        .lb_slices
        .iter()
        .filter(|s| namespace_of(&s.metadata) == ns)
    {
        let group = s.spec.distribution_group_name.as_str();
        lb_slices.entry(group).or_default().push(Arc::clone(s));
    }
    let mut core_slices: BTreeMap<&str, Vec<Arc<EndpointSlice>>> = BTreeMap::new();
    for s in snap
        .core_slices
        .iter()
        .filter(|s| namespace_of(&s.metadata) == ns)
    {
        if let Some(group) = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(DISTRIBUTION_GROUP_LABEL))
        {
            core_slices
                .entry(group.as_str())
                .or_default()
                .push(Arc::clone(s));
        }
    }

    let mut problems: Vec<String> = Vec::new();
    let mut spec = ClassifierSpec::default();
    let mut fates: BTreeMap<&str, (i64, Fate)> = BTreeMap::new();
    for (&name, dg) in &groups {
        let reaching = gateways_of(dg, &routes);
        if !reaching.contains(gw) {
            continue;
        }
        let generation = dg.metadata.generation.unwrap_or(0);
        let group = format!("{ns}/{name}");
        let counted: Vec<String> = reaching
            .iter()
            .filter(|g| *g == gw || existing.contains(g))
            .map(ToString::to_string)
            .collect();
        if counted.len() > 1 {
            problems.push(format!(
                "DistributionGroup {group}: referenced by the Gateways {} (through spec.parentRefs \
                 or L34Routes); only a single Gateway is supported, so the group is not served",
                counted.join(", ")
            ));
            fates.insert(name, (generation, Fate::Multiple(counted)));
            continue;
        }
        let max_endpoints = dg.max_endpoints();
        let Some(max) = u16::try_from(max_endpoints)
            .ok()
            .filter(|m| *m <= MAX_SLOTS)
        else {
            let why = format!(
                "maglev.maxEndpoints {max_endpoints} is above {MAX_SLOTS}, the most slots a \
                 group may have (its Maglev table, the largest prime <= 100 x maxEndpoints, must \
                 fit the classifier's table)"
            );
            problems.push(format!(
                "DistributionGroup {group}: {why}; the group is not served"
            ));
            fates.insert(name, (generation, Fate::Refused(why)));
            continue;
        };
        let sctp_hash = sctp_hash_of(dg, &group, &mut problems);
        let t = group_targets(
            gw,
            dg,
            max,
            lb_slices.get(name).map_or(&[], Vec::as_slice),
            core_slices.get(name).map_or(&[], Vec::as_slice),
        );
        problems.extend(t.problems);
        spec.groups.push(GroupSpec {
            name: group,
            max_endpoints: max,
            sctp_hash,
            targets: t.targets,
        });
        fates.insert(
            name,
            (
                generation,
                Fate::Served {
                    max_endpoints,
                    considered: t.considered,
                    excluded: t.excluded,
                },
            ),
        );
    }

    for route in routes.iter().filter(|r| attached(r, gw)) {
        match rule_of(route, ns, &fates) {
            Ok(rule) => spec.rules.push(rule),
            Err(why) => problems.extend(why),
        }
    }

    let refused = prune(&mut spec, &mut problems);

    let reports = fates
        .into_iter()
        .map(|(name, (generation, fate))| {
            let group = format!("{ns}/{name}");
            let mut report = GroupReport {
                namespace: ns.to_string(),
                name: name.to_string(),
                served: false,
                ready_targets: 0,
                excluded: 0,
                conditions: Vec::new(),
            };
            match fate {
                Fate::Multiple(gws) => {
                    report.conditions = vec![status::multiple_gateways(&gws, generation)];
                }
                Fate::Refused(why) => report.conditions = vec![status::refused(why, generation)],
                Fate::Served { .. } if refused.contains_key(&group) => {
                    report.conditions = vec![status::refused(refused[&group].clone(), generation)];
                }
                Fate::Served {
                    max_endpoints,
                    considered,
                    excluded,
                } => {
                    let usable = spec
                        .groups
                        .iter()
                        .find(|g| g.name == group)
                        .map_or(0, |g| g.targets.len());
                    report.served = true;
                    report.ready_targets = usable;
                    report.excluded = excluded;
                    report.conditions = vec![
                        status::ready(usable, generation),
                        status::capacity(excluded, considered, max_endpoints, generation),
                    ];
                }
            }
            report
        })
        .collect();

    MeridioOutcome {
        spec,
        groups: reports,
        problems,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::meridio::fixtures::*;
    use rivora_dataplane::classifier::validate::validate;
    use rivora_k8s_api::meridio::{DistributionGroup, L34Route};
    use serde_json::{Value, json};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Translates for `red/gw-a`, checking what every outcome must be: a spec that validates,
    /// groups and rules in name order, a report per group in the spec.
    #[track_caller]
    fn run(snap: &MeridioSnapshot) -> MeridioOutcome {
        let out = translate(&gw(), snap);
        assert_eq!(validate(&out.spec), Ok(()), "{:#?}", out.problems);
        let names: Vec<&str> = out.spec.groups.iter().map(|g| g.name.as_str()).collect();
        assert!(names.is_sorted(), "{names:?}");
        let rules: Vec<&str> = out.spec.rules.iter().map(|r| r.name.as_str()).collect();
        assert!(rules.is_sorted(), "{rules:?}");
        for g in &out.spec.groups {
            let r = out
                .group(g.name.trim_start_matches("red/"))
                .expect("a report");
            assert!(r.served && r.ready_targets == g.targets.len());
        }
        out
    }

    fn snap(dgs: Vec<Arc<DistributionGroup>>, routes: Vec<Arc<L34Route>>) -> MeridioSnapshot {
        MeridioSnapshot {
            gateways: vec![gateway(NS, "gw-a"), gateway(NS, "gw-b")],
            distribution_groups: dgs,
            routes,
            ..MeridioSnapshot::default()
        }
    }

    fn group_names(out: &MeridioOutcome) -> Vec<&str> {
        out.spec.groups.iter().map(|g| g.name.as_str()).collect()
    }

    fn rule_names(out: &MeridioOutcome) -> Vec<&str> {
        out.spec.rules.iter().map(|r| r.name.as_str()).collect()
    }

    /// `(type, status, reason)` of a report's conditions.
    fn conds(r: &GroupReport) -> Vec<(&str, &str, &str)> {
        r.conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect()
    }

    #[track_caller]
    fn problem<'a>(out: &'a MeridioOutcome, starts: &str) -> &'a str {
        out.problems
            .iter()
            .find(|p| p.starts_with(starts))
            .unwrap_or_else(|| panic!("no problem starting {starts:?} in {:#?}", out.problems))
    }

    #[test]
    fn a_route_to_the_gateway_makes_its_group_ours() {
        let mut s = snap(
            vec![dg("dg-a", json!({}))],
            vec![route(
                "r1",
                route_spec("gw-a", "dg-a", &["20.0.0.1/32", "fd00:20::1/128"]),
            )],
        );
        s.lb_slices = vec![lbes(
            "dg-a-1",
            "dg-a",
            "gw-a",
            Some("uid-dg-a"),
            json!([lb_ep(
                "t0",
                Some(0),
                true,
                &["169.111.100.3", "fd00:100::3"]
            )]),
        )];
        let out = run(&s);
        assert!(out.problems.is_empty(), "{:#?}", out.problems);
        assert_eq!(
            out.spec.groups,
            [GroupSpec {
                name: "red/dg-a".into(),
                max_endpoints: 102,
                sctp_hash: SctpHash::Ports,
                targets: vec![TargetSpec {
                    slot: 0,
                    v4: Some("169.111.100.3".parse().unwrap()),
                    v6: Some("fd00:100::3".parse().unwrap()),
                }],
            }]
        );
        assert_eq!(
            out.spec.rules,
            [RuleSpec {
                name: "red/r1".into(),
                priority: 10,
                group: "red/dg-a".into(),
                vips: vec![ip("20.0.0.1"), ip("fd00:20::1")],
                sources: vec![],
                source_ports: vec![],
                destination_ports: vec![],
                protocols: BTreeSet::from([RuleProto::Tcp]),
                byte_matches: vec![],
            }]
        );
        let r = out.group("dg-a").unwrap();
        assert_eq!(
            (r.namespace.as_str(), r.ready_targets, r.excluded),
            ("red", 1, 0)
        );
        assert_eq!(
            conds(r),
            [
                ("Ready", "True", "EndpointsAvailable"),
                ("CapacityExceeded", "False", "WithinCapacity")
            ]
        );
        assert!(
            r.conditions.iter().all(|c| c.observed_generation == Some(3)
                && c.last_transition_time == status::UNSET_TIME)
        );
    }

    #[test]
    fn a_parent_ref_makes_a_group_ours_without_routes() {
        let out = run(&snap(
            vec![
                dg("dg-direct", json!({"parentRefs": [{"name": "gw-a"}]})),
                dg(
                    "dg-full",
                    json!({"maglev": {"maxEndpoints": 32}, "parentRefs": [{
                        "group": "gateway.networking.k8s.io", "kind": "Gateway",
                        "name": "gw-a", "namespace": "red"}]}),
                ),
                // Same name, another namespace: another Gateway.
                dg(
                    "dg-blue",
                    json!({"parentRefs": [{"name": "gw-a", "namespace": "blue"}]}),
                ),
                dg("dg-none", json!({})),
            ],
            vec![],
        ));
        assert_eq!(group_names(&out), ["red/dg-direct", "red/dg-full"]);
        assert_eq!(out.spec.groups[1].max_endpoints, 32);
        assert!(out.spec.rules.is_empty());
        assert_eq!(out.groups.len(), 2);
        assert_eq!(
            conds(out.group("dg-direct").unwrap())[0],
            ("Ready", "False", "NoEndpoints")
        );
    }

    #[test]
    fn other_gateways_and_namespaces_are_not_ours() {
        let mut blue_dg = dg(
            "dg-a",
            json!({"parentRefs": [{"name": "gw-a", "namespace": "red"}]}),
        );
        Arc::make_mut(&mut blue_dg).metadata.namespace = Some("blue".into());
        let mut blue_route = route("r-blue", route_spec("gw-a", "dg-a", &["20.0.0.9/32"]));
        Arc::make_mut(&mut blue_route).spec.parent_refs[0].namespace = Some("red".into());
        Arc::make_mut(&mut blue_route).metadata.namespace = Some("blue".into());
        let mut r_service = route_spec("gw-a", "dg-b", &["20.0.0.3/32"]);
        r_service["parentRefs"][0]["kind"] = json!("Service");
        let out = run(&snap(
            vec![dg("dg-b", json!({})), blue_dg],
            vec![
                route("r-b", route_spec("gw-b", "dg-b", &["20.0.0.2/32"])),
                route("r-not-gw", r_service),
                blue_route,
            ],
        ));
        assert!(out.spec.is_empty(), "{:?}", out.spec);
        assert!(out.groups.is_empty());
        assert!(out.problems.is_empty(), "{:#?}", out.problems);
    }

    #[test]
    fn a_group_of_two_gateways_is_not_served() {
        let out = run(&snap(
            vec![
                dg("dg-m", json!({})),
                dg("dg-p", json!({"parentRefs": [{"name": "gw-b"}]})),
                dg("dg-ok", json!({})),
            ],
            vec![
                route("r-a", route_spec("gw-a", "dg-m", &["20.0.0.1/32"])),
                route("r-b", route_spec("gw-b", "dg-m", &["20.0.0.2/32"])),
                route("r-p", route_spec("gw-a", "dg-p", &["20.0.0.3/32"])),
                route("r-ok", route_spec("gw-a", "dg-ok", &["20.0.0.4/32"])),
                // A Gateway that does not exist does not count.
                route("r-ghost", route_spec("gw-ghost", "dg-ok", &["20.0.0.5/32"])),
            ],
        ));
        assert_eq!(group_names(&out), ["red/dg-ok"]);
        assert_eq!(rule_names(&out), ["red/r-ok"]);
        for name in ["dg-m", "dg-p"] {
            let r = out.group(name).unwrap();
            assert!(!r.served);
            assert_eq!(conds(r), [("Ready", "False", "MultipleGateways")], "{name}");
            assert!(r.conditions[0].message.ends_with("(red/gw-a, red/gw-b)"));
        }
        assert!(
            problem(
                &out,
                "DistributionGroup red/dg-m: referenced by the Gateways red/gw-a, red/gw-b"
            )
            .ends_with("so the group is not served")
        );
        assert!(problem(&out, "L34Route red/r-a: backendRefs[0]: DistributionGroup red/dg-m is referenced by more than one Gateway")
            .ends_with("the route is not used"));
        problem(&out, "L34Route red/r-p: backendRefs[0]:");
        assert!(
            !out.problems.iter().any(|p| p.contains("r-b")),
            "not our route"
        );
        assert_eq!(out.problems.len(), 4, "{:#?}", out.problems);
    }

    /// The acceptance 7, at the translation: the same endpoints written as
    /// LoadBalancerEndpointSlices or as the older core EndpointSlices give the same spec.
    #[test]
    fn both_endpoint_forms_give_the_same_spec() {
        let base = snap(
            vec![dg("dg-a", json!({"maglev": {"maxEndpoints": 8}}))],
            vec![route(
                "r1",
                route_spec("gw-a", "dg-a", &["20.0.0.1/32", "fd00:20::1/128"]),
            )],
        );
        let mut current = base.clone();
        current.lb_slices = vec![
            lbes(
                "dg-a-0",
                "dg-a",
                "gw-a",
                Some("uid-dg-a"),
                json!([
                    lb_ep("t0", Some(0), true, &["169.111.100.3", "fd00:100::3"]),
                    lb_ep("t1", Some(5), true, &["169.111.100.4"]),
                    lb_ep("t2", Some(2), false, &["169.111.100.5", "fd00:100::5"]),
                    lb_ep("t3", Some(9), true, &["169.111.100.6", "fd00:100::6"]),
                ]),
            ),
            lbes(
                "dg-a-1",
                "dg-a",
                "gw-a",
                Some("uid-dg-a"),
                json!([lb_ep("t4", Some(3), true, &["fd00:100::7"])]),
            ),
        ];
        let mut older = base.clone();
        let not_ready = |a: &str, z: &str| {
            json!({"addresses": [a], "zone": z, "conditions": {"ready": false},
                   "targetRef": {"kind": "Pod", "name": "t2", "uid": "uid-t2"}})
        };
        older.core_slices = vec![
            core_slice(
                "dg-a-v4",
                "dg-a",
                "IPv4",
                json!([
                    core_ep_of("169.111.100.3", "maglev:0", "t0"),
                    core_ep_of("169.111.100.4", "maglev:5", "t1"),
                    not_ready("169.111.100.5", "maglev:2"),
                    core_ep_of("169.111.100.6", "maglev:9", "t3"),
                ]),
            ),
            core_slice(
                "dg-a-v6",
                "dg-a",
                "IPv6",
                json!([
                    core_ep_of("fd00:100::3", "maglev:0", "t0"),
                    not_ready("fd00:100::5", "maglev:2"),
                    core_ep_of("fd00:100::6", "maglev:9", "t3"),
                    core_ep_of("fd00:100::7", "maglev:3", "t4"),
                ]),
            ),
        ];
        let a = run(&current);
        let b = run(&older);
        assert_eq!(a.spec, b.spec);
        assert_eq!(a.groups, b.groups);
        assert!(
            a.problems.is_empty() && b.problems.is_empty(),
            "{:#?} {:#?}",
            a.problems,
            b.problems
        );
        let slots: Vec<(u16, bool, bool)> = a.spec.groups[0]
            .targets
            .iter()
            .map(|t| (t.slot, t.v4.is_some(), t.v6.is_some()))
            .collect();
        assert_eq!(slots, [(0, true, true), (3, false, true), (5, true, false)]);
        assert_eq!(a.group("dg-a").unwrap().excluded, 1);
        // And both together (a cluster migrating): still the same.
        let mut both = current.clone();
        both.core_slices = older.core_slices.clone();
        assert_eq!(run(&both).spec, a.spec);
    }

    #[test]
    fn identifiers_beyond_max_endpoints_exceed_capacity() {
        let eps: Vec<Value> = (0..37)
            .map(|i| {
                lb_ep(
                    &format!("t{i}"),
                    Some(i),
                    true,
                    &[&format!("169.111.100.{}", i + 1)],
                )
            })
            .collect();
        let mut s = snap(
            vec![dg("dg-a", json!({"maglev": {"maxEndpoints": 32}}))],
            vec![route("r1", route_spec("gw-a", "dg-a", &["20.0.0.1/32"]))],
        );
        s.lb_slices = vec![lbes("s", "dg-a", "gw-a", Some("uid-dg-a"), json!(eps))];
        let out = run(&s);
        assert_eq!(out.spec.groups[0].targets.len(), 32);
        assert_eq!(out.spec.groups[0].targets.last().unwrap().slot, 31);
        let r = out.group("dg-a").unwrap();
        assert_eq!((r.ready_targets, r.excluded), (32, 5));
        assert_eq!(
            conds(r),
            [
                ("Ready", "True", "EndpointsAvailable"),
                ("CapacityExceeded", "True", "MaglevCapacityExceeded")
            ]
        );
        assert_eq!(
            r.conditions[1].message,
            "5/37 endpoints excluded (32 capacity)"
        );
        assert!(out.problems.is_empty(), "{:#?}", out.problems);
    }

    #[test]
    fn a_group_too_big_for_the_datapath_is_refused_alone() {
        let out = run(&snap(
            vec![
                dg("dg-big", json!({"maglev": {"maxEndpoints": 5000}})),
                dg("dg-max", json!({"maglev": {"maxEndpoints": 4096}})),
            ],
            vec![
                route("r-big", route_spec("gw-a", "dg-big", &["20.0.0.1/32"])),
                route("r-max", route_spec("gw-a", "dg-max", &["20.0.0.2/32"])),
            ],
        ));
        assert_eq!(group_names(&out), ["red/dg-max"]);
        assert_eq!(rule_names(&out), ["red/r-max"]);
        let r = out.group("dg-big").unwrap();
        assert_eq!(conds(r), [("Ready", "False", "Refused")]);
        assert!(
            r.conditions[0]
                .message
                .starts_with("maglev.maxEndpoints 5000 is above 4096")
        );
        problem(
            &out,
            "DistributionGroup red/dg-big: maglev.maxEndpoints 5000 is above 4096",
        );
        problem(
            &out,
            "L34Route red/r-big: backendRefs[0]: DistributionGroup red/dg-big is not served (maglev.maxEndpoints 5000",
        );
        assert_eq!(out.problems.len(), 2, "{:#?}", out.problems);
    }

    #[test]
    fn route_fields_become_the_rule() {
        let out = run(&snap(
            vec![dg("dg-a", json!({})), dg("dg-init", json!({}))],
            vec![
                route(
                    "sctp-init",
                    json!({
                        "parentRefs": [{"name": "gw-a"}],
                        "backendRefs": [{"group": "meridio-2.nordix.org",
                                         "kind": "DistributionGroup", "name": "dg-init"}],
                        "destinationCIDRs": ["30.0.0.1/32"],
                        "sourceCIDRs": ["192.0.2.0/24", "198.51.100.7/32"],
                        "sourcePorts": ["1024-65535"],
                        "destinationPorts": ["9000", "9100-9200"],
                        "protocols": ["SCTP", "TCP"],
                        "priority": 30,
                        "byteMatches": ["sctp[4:4]=0", "tcp[13:1] & 0x02 = 0x02"],
                    }),
                ),
                route(
                    "any-of-it",
                    json!({
                        "parentRefs": [{"name": "gw-a", "namespace": "red"}],
                        "backendRefs": [{"group": "meridio-2.nordix.org",
                                         "kind": "DistributionGroup", "name": "dg-a",
                                         "namespace": "red"}],
                        "destinationCIDRs": ["30.0.0.1/32", "fd00:30::1/128"],
                        "sourceCIDRs": ["0.0.0.0/0", "::/0"],
                        "sourcePorts": ["any"],
                        "destinationPorts": ["80", "0-65535"],
                        "protocols": ["UDP"],
                        "priority": 1,
                    }),
                ),
            ],
        ));
        assert!(out.problems.is_empty(), "{:#?}", out.problems);
        let init = &out.spec.rules[1];
        assert_eq!(init.name, "red/sctp-init");
        assert_eq!((init.priority, init.group.as_str()), (30, "red/dg-init"));
        assert_eq!(init.vips, [ip("30.0.0.1")]);
        assert_eq!(
            init.sources,
            [
                SourceRange::new(ip("192.0.2.0"), 24),
                SourceRange::new(ip("198.51.100.7"), 32)
            ]
        );
        assert_eq!(
            init.source_ports,
            [PortRange {
                first: 1024,
                last: 65535
            }]
        );
        assert_eq!(
            init.destination_ports,
            [
                PortRange {
                    first: 9000,
                    last: 9000
                },
                PortRange {
                    first: 9100,
                    last: 9200
                }
            ]
        );
        assert_eq!(
            init.protocols,
            BTreeSet::from([RuleProto::Sctp, RuleProto::Tcp])
        );
        assert_eq!(
            init.byte_matches,
            [
                "sctp[4:4]=0".parse::<ByteMatch>().unwrap(),
                "tcp[13:1]&0x02=0x02".parse().unwrap()
            ]
        );
        // All-/0 sources and lists holding `any` mean no restriction.
        let any = &out.spec.rules[0];
        assert_eq!(any.name, "red/any-of-it");
        assert!(any.sources.is_empty() && any.source_ports.is_empty());
        assert!(any.destination_ports.is_empty());
        assert_eq!(any.vips, [ip("30.0.0.1"), ip("fd00:30::1")]);
    }

    #[test]
    fn a_bad_route_is_refused_alone() {
        let with = |f: &str, v: Value| {
            let mut s = route_spec("gw-a", "dg-a", &["20.0.0.1/32"]);
            s[f] = v;
            s
        };
        let out = run(&snap(
            vec![dg("dg-a", json!({}))],
            vec![
                route("good", route_spec("gw-a", "dg-a", &["20.0.0.1/32"])),
                route(
                    "net",
                    with("destinationCIDRs", json!(["20.0.0.1/32", "20.0.0.0/24"])),
                ),
                route("bare", with("destinationCIDRs", json!(["20.0.0.1"]))),
                route("src", with("sourceCIDRs", json!(["nope"]))),
                route("port", with("destinationPorts", json!(["80", "90-80"]))),
                route("bytes", with("byteMatches", json!(["tcp[19:2]=8"]))),
                route(
                    "svc",
                    with("backendRefs", json!([{"name": "web", "port": 80}])),
                ),
                route(
                    "two",
                    with(
                        "backendRefs",
                        json!([
                    {"group": "meridio-2.nordix.org", "kind": "DistributionGroup", "name": "dg-a"},
                    {"group": "meridio-2.nordix.org", "kind": "DistributionGroup", "name": "dg-a"}]),
                    ),
                ),
                route(
                    "gone",
                    with(
                        "backendRefs",
                        json!([
                    {"group": "meridio-2.nordix.org", "kind": "DistributionGroup", "name": "dg-x"}]),
                    ),
                ),
                route(
                    "far",
                    with(
                        "backendRefs",
                        json!([
                    {"group": "meridio-2.nordix.org", "kind": "DistributionGroup", "name": "dg-a",
                     "namespace": "blue"}]),
                    ),
                ),
                // Refused by the datapath's validation, not by parsing.
                route("loop", with("destinationCIDRs", json!(["127.0.0.1/32"]))),
                route("fam", with("sourceCIDRs", json!(["fd00::/8"]))),
                route("udpmatch", with("byteMatches", json!(["udp[0:2]=53"]))),
            ],
        ));
        assert_eq!(rule_names(&out), ["red/good"]);
        for (starts, has) in [
            (
                "L34Route red/net: destinationCIDRs[1]: ",
                "20.0.0.0/24 is not a single address",
            ),
            (
                "L34Route red/bare: destinationCIDRs[0]: ",
                "\"20.0.0.1\" is not a CIDR",
            ),
            (
                "L34Route red/src: sourceCIDRs[0]: ",
                "\"nope\" is not a CIDR",
            ),
            (
                "L34Route red/port: destinationPorts[1]: ",
                "port range 90-80: first port above last",
            ),
            (
                "L34Route red/bytes: byteMatches[0]: ",
                "reads past the 20-byte TCP header",
            ),
            (
                "L34Route red/svc: backendRefs[0]: ",
                "kind \"Service\" is not a DistributionGroup",
            ),
            (
                "L34Route red/two: backendRefs: ",
                "2 backendRefs; a route has exactly one",
            ),
            (
                "L34Route red/gone: backendRefs[0]: ",
                "DistributionGroup red/dg-x not found",
            ),
            (
                "L34Route red/far: backendRefs[0]: ",
                "blue/dg-a is not in the Gateway's namespace red",
            ),
            (
                "L34Route red/loop: destinationCIDRs[0]: ",
                "127.0.0.1 is a loopback address",
            ),
            (
                "L34Route red/fam: sourceCIDRs[0]: ",
                "fd00::/8 is IPv6 but every VIP of the rule is IPv4",
            ),
            (
                "L34Route red/udpmatch: byteMatches[0]: ",
                "matches UDP but the rule's protocols are [TCP]",
            ),
        ] {
            let p = problem(&out, starts);
            assert!(
                p.contains(has) && p.ends_with("the route is not used"),
                "{p}"
            );
        }
        assert_eq!(out.problems.len(), 12, "{:#?}", out.problems);
        assert!(out.group("dg-a").unwrap().served);
    }

    #[test]
    fn validation_leaves_out_a_bad_target_alone_and_extra_rules_per_vip() {
        let mut routes: Vec<Arc<L34Route>> = (0..33)
            .map(|i| {
                route(
                    &format!("r{i:02}"),
                    route_spec("gw-a", "dg-a", &["20.0.0.1/32"]),
                )
            })
            .collect();
        routes.push(route("s", route_spec("gw-a", "dg-a", &["20.0.0.2/32"])));
        let mut s = snap(vec![dg("dg-a", json!({}))], routes);
        s.lb_slices = vec![lbes(
            "s",
            "dg-a",
            "gw-a",
            None,
            json!([
                lb_ep("good", Some(0), true, &["169.111.100.3"]),
                lb_ep("lo", Some(1), true, &["127.0.0.1"]),
            ]),
        )];
        let out = run(&s);
        assert_eq!(out.spec.rules.len(), 33);
        assert!(!rule_names(&out).contains(&"red/r32"));
        problem(
            &out,
            "L34Route red/r32: destinationCIDRs[0]: VIP 20.0.0.1 is listed by 33 rules",
        );
        assert_eq!(out.spec.groups[0].targets.len(), 1);
        let p = problem(
            &out,
            "DistributionGroup red/dg-a: the endpoint with identifier 1: ",
        );
        assert!(p.contains("127.0.0.1 is a loopback address"), "{p}");
        assert_eq!(out.group("dg-a").unwrap().ready_targets, 1);
        assert_eq!(out.problems.len(), 2, "{:#?}", out.problems);
    }

    #[test]
    fn the_sctp_hash_comes_from_an_annotation() {
        let out = run(&snap(
            vec![
                dg_with(
                    "dg-5",
                    json!({"parentRefs": [{"name": "gw-a"}]}),
                    json!({ANNOTATION_SCTP_HASH: "five-tuple"}),
                ),
                dg_with(
                    "dg-bad",
                    json!({"parentRefs": [{"name": "gw-a"}]}),
                    json!({ANNOTATION_SCTP_HASH: "5-tuple"}),
                ),
                dg_with(
                    "dg-p",
                    json!({"parentRefs": [{"name": "gw-a"}]}),
                    json!({ANNOTATION_SCTP_HASH: "ports"}),
                ),
            ],
            vec![],
        ));
        let hashes: Vec<SctpHash> = out.spec.groups.iter().map(|g| g.sctp_hash).collect();
        assert_eq!(
            hashes,
            [SctpHash::FiveTuple, SctpHash::Ports, SctpHash::Ports]
        );
        assert_eq!(
            out.problems,
            [
                "DistributionGroup red/dg-bad: annotation rivora.dev/sctp-hash: \"5-tuple\" is not \
              ports or five-tuple; ports is used"
            ]
        );
    }

    #[test]
    fn a_snapshot_full_of_mistakes_still_validates() {
        // Every kind of mistake at once: the good objects are served, the spec validates.
        let mut s = snap(
            vec![
                dg("dg-a", json!({})),
                dg("dg-big", json!({"maglev": {"maxEndpoints": 100000}})),
                dg("dg-m", json!({"parentRefs": [{"name": "gw-b"}]})),
            ],
            vec![
                route(
                    "a",
                    route_spec("gw-a", "dg-a", &["20.0.0.1/32", "20.0.0.1/32"]),
                ),
                route("b", route_spec("gw-a", "dg-a", &["224.0.0.1/32"])),
                route("c", route_spec("gw-a", "dg-big", &["20.0.0.3/32"])),
                route("d", route_spec("gw-a", "dg-m", &["20.0.0.4/32"])),
                route("e", route_spec("gw-a", "dg-a", &[])),
                route("f", route_spec("gw-a", "dg-a", &["20.0.0.6/32"])),
            ],
        );
        s.lb_slices = vec![lbes(
            "s",
            "dg-a",
            "gw-a",
            None,
            json!([
                lb_ep("x", Some(0), true, &["0.0.0.0", "::"]),
                lb_ep("y", Some(1), true, &["::ffff:10.1.1.1"]),
                lb_ep("z", Some(2), true, &["169.111.100.9"]),
                lb_ep("w", Some(3), true, &["169.111.100.10", "::1"]),
            ]),
        )];
        let out = run(&s);
        assert_eq!(rule_names(&out), ["red/f"]);
        assert_eq!(group_names(&out), ["red/dg-a"]);
        // A dual-stack endpoint with one bad address keeps the other family.
        let targets: Vec<(u16, bool, bool)> = out.spec.groups[0]
            .targets
            .iter()
            .map(|t| (t.slot, t.v4.is_some(), t.v6.is_some()))
            .collect();
        assert_eq!(targets, [(2, true, false), (3, true, false)]);
        let p = problem(
            &out,
            "DistributionGroup red/dg-a: the endpoint with identifier 3: ",
        );
        assert!(
            p.ends_with(
                "::1 is a loopback address, not a target's address; that address is not used"
            ),
            "{p}"
        );
        let p = problem(
            &out,
            "DistributionGroup red/dg-a: the endpoint with identifier 1: ",
        );
        assert!(p.ends_with("IPv4-mapped IPv6 address (write 10.1.1.1), not a target's address; the endpoint is not used"), "{p}");
        assert_eq!(out.groups.len(), 3);
        assert_eq!(out.problems.len(), 11, "{:#?}", out.problems);
    }
}
