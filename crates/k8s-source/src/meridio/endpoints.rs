//! The targets of one DistributionGroup: which endpoint holds which Maglev slot, with which
//! addresses, from both endpoint forms Meridio-2 has written.
//!
//! Why both forms, read to the same result: Meridio-2 published a group's targets in core
//! EndpointSlices (slot in `endpoint.zone: maglev:<N>`) until its #178, and in
//! LoadBalancerEndpointSlices (an `identifier` field) since; a cluster may run either, or both
//! while it migrates. The same endpoints written either way give the same targets, so the
//! Maglev table, and every flow's target, do not move when the form changes.
//!
//! The rules are Meridio-2's load balancer's (`shared/research/meridio2.md` §2.1):
//!
//! - LoadBalancerEndpointSlices: in the group's namespace, `spec.distributionGroupName` the
//!   group, `spec.gatewayRef` the served Gateway (slots are per group per Gateway), and
//!   controlled by the group (a controller ownerReference with the group's UID). Meridio-2
//!   requires the ownerReference; here a slice with no controller at all is read too (a user
//!   may write slices by hand), but one controlled by anything else is not (a slice of an
//!   earlier group of the same name, waiting for garbage collection).
//! - Core EndpointSlices: in the group's namespace, labelled
//!   `meridio-2.nordix.org/distribution-group=<group>`; addresses of the slice's
//!   `addressType`; `conditions.ready` absent means ready, as Kubernetes defines it.
//! - Slices are read in name order, LoadBalancerEndpointSlices first (the current form wins).
//!   Endpoints not ready, or without an identifier, are skipped.
//! - The first endpoint to hold an identifier keeps it; a later one for the same target (the
//!   other family's slice of the older form) adds the families the slot has no address of yet,
//!   one address per family. A later one for another target is ignored (Meridio-2: "first
//!   occurrence wins", a transient while Pods are replaced).
//! - An identifier not below maxEndpoints gets no slot; such endpoints are counted for
//!   `CapacityExceeded`.
//! - An address must parse as an address of its declared family; one that does not is ignored
//!   (with a problem), the endpoint's other addresses are still used.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rivora_dataplane::classifier::TargetSpec;
use rivora_k8s_api::meridio::{
    DISTRIBUTION_GROUP_LABEL, DistributionGroup, IpFamily, LoadBalancerEndpointSlice,
    parse_maglev_zone,
};

use super::GatewayRef;

/// A group's targets and what was left out on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupTargets {
    /// One per slot, ascending by slot, each with at least one address.
    pub targets: Vec<TargetSpec>,
    /// Distinct identifiers of the ready endpoints read, those excluded included (the total of
    /// the `CapacityExceeded` message).
    pub considered: usize,
    /// Distinct identifiers of ready endpoints not below maxEndpoints: no slot for them.
    pub excluded: usize,
    /// Endpoints, addresses and slices ignored, each naming the object and why.
    pub problems: Vec<String>,
}

/// One slot being filled: its addresses, the target holding it, and where each came from.
#[derive(Default)]
struct Slot {
    target: Option<String>,
    origin: String,
    v4: Option<(Ipv4Addr, String)>,
    v6: Option<(Ipv6Addr, String)>,
}

/// Gathers endpoints, in reading order, into slots.
struct Collector {
    max_endpoints: u16,
    slots: BTreeMap<u16, Slot>,
    considered: BTreeSet<i32>,
    excluded: BTreeSet<i32>,
    problems: Vec<String>,
}

/// One address of an endpoint, as written, with its declared family.
struct RawAddress<'a> {
    ip: &'a str,
    v6: bool,
}

fn family_name(v6: bool) -> &'static str {
    if v6 { "IPv6" } else { "IPv4" }
}

fn key(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

impl Collector {
    /// A ready endpoint with `identifier`, of `target` (when known), at `origin` (for
    /// messages).
    fn add(&mut self, identifier: i32, target: Option<&str>, origin: &str, addrs: &[RawAddress]) {
        if identifier < 0 {
            self.problems.push(format!(
                "{origin}: identifier {identifier} is negative (slots start at 0); the endpoint \
                 is not used"
            ));
            return;
        }
        self.considered.insert(identifier);
        if identifier >= i32::from(self.max_endpoints) {
            self.excluded.insert(identifier);
            return;
        }
        let slot_no = identifier as u16;
        let mut parsed: Vec<IpAddr> = Vec::new();
        for a in addrs {
            match a.ip.parse::<IpAddr>() {
                Ok(ip) if ip.is_ipv6() == a.v6 => parsed.push(ip),
                Ok(ip) => self.problems.push(format!(
                    "{origin}: address {ip} is not {} as declared; it is ignored",
                    family_name(a.v6)
                )),
                Err(_) => self.problems.push(format!(
                    "{origin}: address {:?} is not an {} address; it is ignored",
                    a.ip,
                    family_name(a.v6)
                )),
            }
        }
        if parsed.is_empty() {
            return;
        }
        let slot = self.slots.entry(slot_no).or_default();
        if slot.v4.is_none() && slot.v6.is_none() {
            slot.target = target.map(str::to_string);
            slot.origin = origin.to_string();
        } else if let (Some(had), Some(this)) = (slot.target.as_deref(), target)
            && had != this
        {
            self.problems.push(format!(
                "{origin}: identifier {identifier} is already held by target {had} ({}); the \
                 endpoint (target {this}) is ignored",
                slot.origin
            ));
            return;
        }
        for ip in parsed {
            let duplicate = match ip {
                IpAddr::V4(a) => match &slot.v4 {
                    None => {
                        slot.v4 = Some((a, origin.to_string()));
                        None
                    }
                    Some((had, _)) if *had == a => None,
                    Some((had, from)) => Some((IpAddr::V4(*had), from.clone())),
                },
                IpAddr::V6(a) => match &slot.v6 {
                    None => {
                        slot.v6 = Some((a, origin.to_string()));
                        None
                    }
                    Some((had, _)) if *had == a => None,
                    Some((had, from)) => Some((IpAddr::V6(*had), from.clone())),
                },
            };
            if let Some((had, from)) = duplicate {
                self.problems.push(format!(
                    "{origin}: identifier {identifier} already has {} address {had} ({from}); \
                     {ip} is ignored (one address per family)",
                    family_name(ip.is_ipv6())
                ));
            }
        }
    }

    fn finish(self) -> GroupTargets {
        GroupTargets {
            targets: self
                .slots
                .into_iter()
                .map(|(slot, s)| TargetSpec {
                    slot,
                    v4: s.v4.map(|(a, _)| a),
                    v6: s.v6.map(|(a, _)| a),
                })
                .filter(|t| t.v4.is_some() || t.v6.is_some())
                .collect(),
            considered: self.considered.len(),
            excluded: self.excluded.len(),
            problems: self.problems,
        }
    }
}

/// Whether a LoadBalancerEndpointSlice may feed `dg`: controlled by it, or by nothing. The
/// problem says why not.
fn controlled_by(slice: &LoadBalancerEndpointSlice, dg: &DistributionGroup) -> Result<(), String> {
    let controller = slice
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match controller {
        None => Ok(()),
        Some(o) if Some(&o.uid) == dg.metadata.uid.as_ref() => Ok(()),
        Some(o) => Err(format!(
            "LoadBalancerEndpointSlice {}: controlled by {} {} (uid {}), not by \
             DistributionGroup {} (uid {}); the slice is not used",
            key(&slice.metadata),
            o.kind,
            o.name,
            o.uid,
            key(&dg.metadata),
            dg.metadata.uid.as_deref().unwrap_or("unset"),
        )),
    }
}

/// The targets of `dg` (served by `gw`, with `max_endpoints` slots) from both endpoint forms.
pub fn group_targets(
    gw: &GatewayRef,
    dg: &DistributionGroup,
    max_endpoints: u16,
    lb_slices: &[Arc<LoadBalancerEndpointSlice>],
    core_slices: &[Arc<EndpointSlice>],
) -> GroupTargets {
    let namespace = dg.metadata.namespace.as_deref().unwrap_or_default();
    let name = dg.metadata.name.as_deref().unwrap_or_default();
    let mut c = Collector {
        max_endpoints,
        slots: BTreeMap::new(),
        considered: BTreeSet::new(),
        excluded: BTreeSet::new(),
        problems: Vec::new(),
    };

    let mut lbes: Vec<&LoadBalancerEndpointSlice> = lb_slices
        .iter()
        .map(Arc::as_ref)
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(namespace)
                && s.spec.distribution_group_name == name
                && s.spec.gateway_ref.namespace == gw.namespace
                && s.spec.gateway_ref.name == gw.name
        })
        .collect();
    lbes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for slice in lbes {
        if let Err(why) = controlled_by(slice, dg) {
            c.problems.push(why);
            continue;
        }
        let slice_key = key(&slice.metadata);
        for (i, ep) in slice.spec.endpoints.iter().enumerate() {
            let Some(identifier) = ep.active_slot() else {
                continue;
            };
            let origin = format!("LoadBalancerEndpointSlice {slice_key}: endpoints[{i}]");
            let mut addrs = Vec::new();
            let mut seen = BTreeSet::new();
            for a in &ep.addresses {
                let v6 = a.family == IpFamily::IPv6;
                if !seen.insert(v6) {
                    c.problems.push(format!(
                        "{origin}: a second {} address {:?} is ignored (one address per family)",
                        family_name(v6),
                        a.ip
                    ));
                    continue;
                }
                addrs.push(RawAddress { ip: &a.ip, v6 });
            }
            let target = Some(ep.target.uid.as_str())
                .filter(|u| !u.is_empty())
                .or(Some(ep.target.name.as_str()).filter(|n| !n.is_empty()));
            c.add(identifier, target, &origin, &addrs);
        }
    }

    let mut core: Vec<&EndpointSlice> = core_slices
        .iter()
        .map(Arc::as_ref)
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(namespace)
                && s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(DISTRIBUTION_GROUP_LABEL))
                    .is_some_and(|v| v == name)
        })
        .collect();
    core.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for slice in core {
        let slice_key = key(&slice.metadata);
        let v6 = match slice.address_type.as_str() {
            "IPv4" => false,
            "IPv6" => true,
            other => {
                c.problems.push(format!(
                    "EndpointSlice {slice_key}: addressType {other:?} is not IPv4 or IPv6; the \
                     slice is not used"
                ));
                continue;
            }
        };
        for (i, ep) in slice.endpoints.iter().enumerate() {
            let ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
            let Some(zone) = ep.zone.as_deref().filter(|_| ready) else {
                continue;
            };
            let origin = format!("EndpointSlice {slice_key}: endpoints[{i}]");
            let Some(identifier) = parse_maglev_zone(zone) else {
                c.problems.push(format!(
                    "{origin}: zone {zone:?} is not maglev:<N>; the endpoint has no identifier \
                     and is not used"
                ));
                continue;
            };
            let mut addrs: Vec<RawAddress> = Vec::new();
            for a in &ep.addresses {
                if addrs.is_empty() {
                    addrs.push(RawAddress { ip: a, v6 });
                } else {
                    c.problems.push(format!(
                        "{origin}: a second {} address {a:?} is ignored (one address per family)",
                        family_name(v6)
                    ));
                }
            }
            let target = ep.target_ref.as_ref().and_then(|r| {
                r.uid
                    .as_deref()
                    .filter(|u| !u.is_empty())
                    .or(r.name.as_deref().filter(|n| !n.is_empty()))
            });
            c.add(identifier, target, &origin, &addrs);
        }
    }
    c.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meridio::fixtures::*;
    use serde_json::json;

    fn t(slot: u16, v4: Option<&str>, v6: Option<&str>) -> TargetSpec {
        TargetSpec {
            slot,
            v4: v4.map(|a| a.parse().unwrap()),
            v6: v6.map(|a| a.parse().unwrap()),
        }
    }

    fn run(
        max: u16,
        lb: Vec<Arc<LoadBalancerEndpointSlice>>,
        core: Vec<Arc<EndpointSlice>>,
    ) -> GroupTargets {
        group_targets(&gw(), &dg("dg-a", json!({})), max, &lb, &core)
    }

    #[test]
    fn slices_of_another_group_gateway_or_namespace_are_not_read() {
        let ep = |id| lb_ep("p", Some(id), true, &["10.1.0.1"]);
        let mut elsewhere = lbes(
            "x-elsewhere",
            "dg-a",
            "gw-a",
            Some("uid-dg-a"),
            json!([ep(0)]),
        );
        Arc::make_mut(&mut elsewhere).metadata.namespace = Some("blue".into());
        let got = run(
            32,
            vec![
                lbes("a-other-dg", "dg-b", "gw-a", None, json!([ep(1)])),
                lbes("b-other-gw", "dg-a", "gw-b", None, json!([ep(2)])),
                elsewhere,
                lbes("c-ours", "dg-a", "gw-a", None, json!([ep(3)])),
            ],
            vec![core_slice(
                "d-other-dg",
                "dg-b",
                "IPv4",
                json!([core_ep("10.2.0.1", Some("maglev:4"), None)]),
            )],
        );
        assert_eq!(got.targets, [t(3, Some("10.1.0.1"), None)]);
        assert!(got.problems.is_empty(), "{:?}", got.problems);
    }

    #[test]
    fn only_slices_controlled_by_the_group_or_by_nothing_are_read() {
        let ep = |id, a| lb_ep(&format!("p{id}"), Some(id), true, &[a]);
        let got = run(
            32,
            vec![
                lbes(
                    "a",
                    "dg-a",
                    "gw-a",
                    Some("uid-dg-a"),
                    json!([ep(0, "10.1.0.1")]),
                ),
                lbes("b", "dg-a", "gw-a", None, json!([ep(1, "10.1.0.2")])),
                lbes(
                    "c",
                    "dg-a",
                    "gw-a",
                    Some("uid-old"),
                    json!([ep(2, "10.1.0.3")]),
                ),
            ],
            vec![],
        );
        assert_eq!(
            got.targets,
            [t(0, Some("10.1.0.1"), None), t(1, Some("10.1.0.2"), None)]
        );
        assert_eq!(got.problems.len(), 1);
        assert!(
            got.problems[0].starts_with("LoadBalancerEndpointSlice red/c: controlled by")
                && got.problems[0].contains("uid-old")
                && got.problems[0].contains("not by DistributionGroup red/dg-a (uid uid-dg-a)"),
            "{}",
            got.problems[0]
        );
    }

    #[test]
    fn duplicate_identifier_first_slice_by_name_wins() {
        // Listed in the other order: the name decides, not the store.
        let got = run(
            32,
            vec![
                lbes(
                    "s-2",
                    "dg-a",
                    "gw-a",
                    None,
                    json!([lb_ep("new", Some(4), true, &["10.1.0.9"])]),
                ),
                lbes(
                    "s-1",
                    "dg-a",
                    "gw-a",
                    None,
                    json!([lb_ep("old", Some(4), true, &["10.1.0.4"])]),
                ),
            ],
            vec![],
        );
        assert_eq!(got.targets, [t(4, Some("10.1.0.4"), None)]);
        assert_eq!(got.considered, 1);
        assert_eq!(got.problems.len(), 1);
        assert!(
            got.problems[0].contains("identifier 4 is already held by target uid-old")
                && got.problems[0].contains("s-2"),
            "{}",
            got.problems[0]
        );
        // The same in the older form: the first slice's endpoint keeps the slot.
        let got = run(
            32,
            vec![],
            vec![
                core_slice(
                    "s-2",
                    "dg-a",
                    "IPv4",
                    json!([core_ep("10.1.0.9", Some("maglev:4"), None)]),
                ),
                core_slice(
                    "s-1",
                    "dg-a",
                    "IPv4",
                    json!([core_ep("10.1.0.4", Some("maglev:4"), None)]),
                ),
            ],
        );
        assert_eq!(got.targets, [t(4, Some("10.1.0.4"), None)]);
        assert!(
            got.problems[0].contains("already has IPv4 address 10.1.0.4"),
            "{:?}",
            got.problems
        );
    }

    #[test]
    fn not_ready_and_identifierless_endpoints_are_skipped() {
        let got = run(
            32,
            vec![lbes(
                "s",
                "dg-a",
                "gw-a",
                None,
                json!([
                    lb_ep("down", Some(0), false, &["10.1.0.1"]),
                    lb_ep("noid", None, true, &["10.1.0.2"]),
                    lb_ep("up", Some(2), true, &["10.1.0.3"]),
                ]),
            )],
            vec![core_slice(
                "c",
                "dg-a",
                "IPv4",
                json!([
                    core_ep("10.2.0.1", Some("maglev:5"), Some(false)),
                    core_ep("10.2.0.2", None, Some(true)),
                    core_ep("10.2.0.3", Some("maglev:6"), None),
                    core_ep("10.2.0.4", Some("zone-a"), Some(true)),
                ]),
            )],
        );
        assert_eq!(
            got.targets,
            [t(2, Some("10.1.0.3"), None), t(6, Some("10.2.0.3"), None)],
            "absent ready is ready"
        );
        assert_eq!(got.considered, 2);
        // Only the malformed zone is worth a word; not ready and no identifier are normal.
        assert_eq!(got.problems.len(), 1, "{:?}", got.problems);
        assert!(got.problems[0].contains("zone \"zone-a\" is not maglev:<N>"));
    }

    #[test]
    fn identifiers_beyond_max_endpoints_are_excluded_and_counted() {
        let eps: Vec<_> = (0..6u16)
            .map(|i| {
                lb_ep(
                    &format!("p{i}"),
                    Some(i32::from(i)),
                    true,
                    &[&format!("10.1.0.{}", i + 1)],
                )
            })
            .collect();
        let got = run(4, vec![lbes("s", "dg-a", "gw-a", None, json!(eps))], vec![]);
        assert_eq!(
            got.targets.iter().map(|t| t.slot).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!((got.excluded, got.considered), (2, 6));
        // A dual-stack endpoint of the older form is one slot, counted once.
        let got = run(
            4,
            vec![],
            vec![
                core_slice(
                    "v4",
                    "dg-a",
                    "IPv4",
                    json!([core_ep("10.1.0.9", Some("maglev:9"), None)]),
                ),
                core_slice(
                    "v6",
                    "dg-a",
                    "IPv6",
                    json!([core_ep("fd00::9", Some("maglev:9"), None)]),
                ),
            ],
        );
        assert!(got.targets.is_empty());
        assert_eq!((got.excluded, got.considered), (1, 1));
        let got = run(
            4,
            vec![lbes(
                "s",
                "dg-a",
                "gw-a",
                None,
                json!([lb_ep("neg", Some(-1), true, &["10.1.0.1"])]),
            )],
            vec![],
        );
        assert!(got.targets.is_empty() && got.considered == 0);
        assert!(got.problems[0].contains("identifier -1 is negative"));
    }

    #[test]
    fn families_of_one_identifier_merge_one_address_each() {
        // The older form: one slice per family, the same Pod in both.
        let got = run(
            32,
            vec![],
            vec![
                core_slice(
                    "v4",
                    "dg-a",
                    "IPv4",
                    json!([
                        core_ep_of("10.1.0.1", "maglev:0", "pod-a"),
                        core_ep_of("10.1.0.2", "maglev:1", "pod-b")
                    ]),
                ),
                core_slice(
                    "v6",
                    "dg-a",
                    "IPv6",
                    json!([core_ep_of("fd00::1", "maglev:0", "pod-a")]),
                ),
            ],
        );
        assert_eq!(
            got.targets,
            [
                t(0, Some("10.1.0.1"), Some("fd00::1")),
                t(1, Some("10.1.0.2"), None)
            ]
        );
        assert!(got.problems.is_empty(), "{:?}", got.problems);
        // A second address of one family: the first stays.
        let got = run(
            32,
            vec![lbes(
                "s",
                "dg-a",
                "gw-a",
                None,
                json!([{"target": {"name": "p", "uid": "u"}, "identifier": 0, "ready": true,
                        "addresses": [{"ip": "10.1.0.1", "family": "IPv4"},
                                      {"ip": "10.1.0.2", "family": "IPv4"},
                                      {"ip": "fd00::1", "family": "IPv6"}]}]),
            )],
            vec![core_slice(
                "c",
                "dg-a",
                "IPv4",
                json!([{"addresses": ["10.1.0.1", "10.1.0.3"], "zone": "maglev:1"}]),
            )],
        );
        assert_eq!(
            got.targets,
            [
                t(0, Some("10.1.0.1"), Some("fd00::1")),
                t(1, Some("10.1.0.1"), None)
            ]
        );
        assert_eq!(got.problems.len(), 2, "{:?}", got.problems);
        assert!(got.problems[0].contains("a second IPv4 address \"10.1.0.2\" is ignored"));
        assert!(got.problems[1].contains("a second IPv4 address \"10.1.0.3\" is ignored"));
    }

    #[test]
    fn addresses_must_be_of_their_declared_family() {
        let got = run(
            32,
            vec![lbes(
                "s",
                "dg-a",
                "gw-a",
                None,
                json!([
                    {"target": {"name": "p0", "uid": "u0"}, "identifier": 0, "ready": true,
                     "addresses": [{"ip": "fd00::1", "family": "IPv4"},
                                   {"ip": "fd00::2", "family": "IPv6"}]},
                    {"target": {"name": "p1", "uid": "u1"}, "identifier": 1, "ready": true,
                     "addresses": [{"ip": "not-an-ip", "family": "IPv4"}]},
                ]),
            )],
            vec![
                core_slice(
                    "c",
                    "dg-a",
                    "IPv6",
                    json!([core_ep("10.2.0.1", Some("maglev:2"), None)]),
                ),
                core_slice(
                    "f",
                    "dg-a",
                    "FQDN",
                    json!([core_ep("a.example", Some("maglev:3"), None)]),
                ),
            ],
        );
        assert_eq!(got.targets, [t(0, None, Some("fd00::2"))]);
        let p = got.problems.join("\n");
        assert!(
            p.contains("endpoints[0]: address fd00::1 is not IPv4 as declared"),
            "{p}"
        );
        assert!(
            p.contains("endpoints[1]: address \"not-an-ip\" is not an IPv4 address"),
            "{p}"
        );
        assert!(
            p.contains("EndpointSlice red/c: endpoints[0]: address 10.2.0.1 is not IPv6"),
            "{p}"
        );
        assert!(
            p.contains("EndpointSlice red/f: addressType \"FQDN\" is not IPv4 or IPv6"),
            "{p}"
        );
    }

    #[test]
    fn the_current_form_wins_over_the_older_one() {
        let got = run(
            32,
            vec![lbes(
                "z",
                "dg-a",
                "gw-a",
                None,
                json!([lb_ep("new", Some(0), true, &["10.1.0.1"])]),
            )],
            vec![core_slice(
                "a",
                "dg-a",
                "IPv4",
                json!([core_ep_of("10.9.0.1", "maglev:0", "old")]),
            )],
        );
        assert_eq!(got.targets, [t(0, Some("10.1.0.1"), None)]);
        assert!(
            got.problems[0].contains("already held by target uid-new"),
            "{:?}",
            got.problems
        );
    }
}
