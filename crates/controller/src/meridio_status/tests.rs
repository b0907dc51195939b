use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::*;

const NS: &str = "red";

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn class(name: &str, controller: &str) -> Arc<GatewayClass> {
    obj(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": name},
        "spec": {"controllerName": controller},
    }))
}

fn gateway(ns: &str, name: &str, class: &str) -> Arc<Gateway> {
    obj(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"gatewayClassName": class,
                 "listeners": [{"name": "tcp", "port": 80, "protocol": "TCP"}]},
    }))
}

fn group(ns: &str, name: &str, max: i32, parent: Option<&str>) -> Arc<DistributionGroup> {
    let mut spec = json!({"type": "Maglev", "maglev": {"maxEndpoints": max}});
    if let Some(p) = parent {
        spec["parentRefs"] = json!([{"name": p}]);
    }
    obj(json!({
        "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "DistributionGroup",
        "metadata": {"name": name, "namespace": ns, "generation": 3, "uid": format!("uid-{name}")},
        "spec": spec,
    }))
}

fn route(ns: &str, name: &str, gw: &str, dg: &str) -> Arc<rivora_k8s_api::meridio::L34Route> {
    obj(json!({
        "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "L34Route",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parentRefs": [{"name": gw}],
            "backendRefs": [{"group": "meridio-2.nordix.org", "kind": "DistributionGroup", "name": dg}],
            "destinationCIDRs": ["10.0.0.1/32"],
            "protocols": ["TCP"],
            "priority": 1,
        },
    }))
}

/// A slice of group `dg` for Gateway `gw` with ready endpoints at these identifiers.
fn slice(
    dg: &str,
    gw: &str,
    ids: &[i32],
) -> Arc<rivora_k8s_api::meridio::LoadBalancerEndpointSlice> {
    let eps: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({
                "target": {"name": format!("pod-{id}"), "uid": format!("pod-uid-{id}")},
                "addresses": [{"ip": format!("10.1.0.{}", id + 1), "family": "IPv4"}],
                "identifier": id, "ready": true,
            })
        })
        .collect();
    obj(json!({
        "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "LoadBalancerEndpointSlice",
        "metadata": {"name": format!("{dg}-1"), "namespace": NS},
        "spec": {"distributionGroupName": dg, "gatewayRef": {"name": gw, "namespace": NS},
                 "endpoints": eps},
    }))
}

fn classes() -> Vec<Arc<GatewayClass>> {
    vec![
        class("meridio", GATEWAY_CONTROLLER_NAME),
        class("rivora", rivora_k8s_api::class::GATEWAY_CONTROLLER_NAME),
    ]
}

/// (status, reason, message) of condition `type_`.
fn cond(cs: &[Condition], type_: &str) -> Option<(String, String, String)> {
    cs.iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn triple(s: &str, r: &str, m: &str) -> Option<(String, String, String)> {
    Some((s.into(), r.into(), m.into()))
}

#[test]
fn meridio_gateways_are_those_of_meridios_classes() {
    let gws = vec![
        gateway(NS, "gw-b", "meridio"),
        gateway(NS, "gw-r", "rivora"),
        gateway("blue", "gw-a", "meridio"),
        gateway(NS, "gw-x", "no-such-class"),
    ];
    assert_eq!(
        meridio_gateways(&classes(), &gws),
        [GatewayRef::new("blue", "gw-a"), GatewayRef::new(NS, "gw-b")]
    );
    assert!(meridio_gateways(&[], &gws).is_empty());
}

#[test]
fn claimed_groups_get_meridios_conditions() {
    let snap = MeridioSnapshot {
        gateways: vec![
            gateway(NS, "gw-a", "meridio"),
            gateway(NS, "gw-b", "meridio"),
            gateway(NS, "gw-r", "rivora"),
        ],
        distribution_groups: vec![
            group(NS, "ready", 4, None),
            group(NS, "empty", 4, None),
            group(NS, "full", 2, None),
            group(NS, "shared", 4, Some("gw-b")),
            group(NS, "by-parent", 4, Some("gw-b")),
            group(NS, "mixed", 4, Some("gw-r")),
            group(NS, "rivoras", 4, None),
            group(NS, "orphan", 4, None),
            // A group of another namespace naming red/gw-a: Meridio-2 keeps a group with its
            // Gateway, and rivorad would not serve it, so nothing is said of it.
            obj(json!({
                "apiVersion": "meridio-2.nordix.org/v1alpha1", "kind": "DistributionGroup",
                "metadata": {"name": "far", "namespace": "blue", "generation": 1},
                "spec": {"parentRefs": [{"name": "gw-a", "namespace": NS}]},
            })),
        ],
        routes: vec![
            route(NS, "r-ready", "gw-a", "ready"),
            route(NS, "r-empty", "gw-a", "empty"),
            route(NS, "r-full", "gw-a", "full"),
            route(NS, "r-shared", "gw-a", "shared"),
            route(NS, "r-mixed", "gw-a", "mixed"),
            route(NS, "r-rivoras", "gw-r", "rivoras"),
        ],
        lb_slices: vec![
            slice("ready", "gw-a", &[0, 1]),
            // Identifiers 2 and 5 are not below maxEndpoints 2.
            slice("full", "gw-a", &[0, 2, 5]),
        ],
        core_slices: vec![],
    };
    let got = claimed_groups(&classes(), &snap);
    let keys: Vec<&str> = got.keys().map(|(_, n)| n.as_str()).collect();
    assert_eq!(
        keys,
        ["by-parent", "empty", "full", "mixed", "ready", "shared"],
        "the orphan, the group of Rivora's Gateway only and the far one are not claimed"
    );
    let c = |n: &str| &got[&(NS.to_string(), n.to_string())];

    let ready = c("ready");
    assert_eq!(ready.gateway, GatewayRef::new(NS, "gw-a"));
    let cs = &ready.report.conditions;
    assert_eq!(
        cond(cs, "Ready"),
        triple("True", "EndpointsAvailable", "2 endpoints available")
    );
    assert_eq!(
        cond(cs, "CapacityExceeded").map(|c| (c.0, c.1)),
        Some(("False".into(), "WithinCapacity".into()))
    );
    assert!(cs.iter().all(|c| c.observed_generation == Some(3)));

    assert_eq!(
        cond(&c("empty").report.conditions, "Ready"),
        triple("False", "NoEndpoints", "No endpoints available")
    );
    let full = &c("full").report.conditions;
    assert_eq!(
        cond(full, "Ready"),
        triple("True", "EndpointsAvailable", "1 endpoint available")
    );
    assert_eq!(
        cond(full, "CapacityExceeded"),
        triple(
            "True",
            "MaglevCapacityExceeded",
            "2/3 endpoints excluded (2 capacity)"
        )
    );

    // Reached by both Meridio-2 Gateways: reported once, not served, no CapacityExceeded.
    let shared = c("shared");
    assert_eq!(shared.gateway, GatewayRef::new(NS, "gw-a"));
    let (s, r, m) = cond(&shared.report.conditions, "Ready").unwrap();
    assert_eq!((s.as_str(), r.as_str()), ("False", "MultipleGateways"));
    assert!(m.ends_with("(red/gw-a, red/gw-b)"), "{m}");
    assert_eq!(cond(&shared.report.conditions, "CapacityExceeded"), None);
    // Reached by a Meridio-2 Gateway and Rivora's: rivorad would not serve it either.
    let (s, r, m) = cond(&c("mixed").report.conditions, "Ready").unwrap();
    assert_eq!((s.as_str(), r.as_str()), ("False", "MultipleGateways"));
    assert!(m.ends_with("(red/gw-a, red/gw-r)"), "{m}");
    // Through its own parentRefs only.
    assert_eq!(c("by-parent").gateway, GatewayRef::new(NS, "gw-b"));
    assert_eq!(
        cond(&c("by-parent").report.conditions, "Ready").map(|c| c.1),
        Some("NoEndpoints".into())
    );
}

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// `dg` with these conditions in its status, and managedFields saying this controller wrote
/// `owned` of them.
fn with_status(dg: &DistributionGroup, cs: Vec<Condition>, owned: &[&str]) -> DistributionGroup {
    let mut dg = dg.clone();
    dg.status = Some(rivora_k8s_api::meridio::DistributionGroupStatus { conditions: cs });
    let fields: serde_json::Map<String, Value> = owned
        .iter()
        .map(|ty| (format!("k:{}", json!({ "type": ty })), json!({})))
        .collect();
    dg.metadata.managed_fields = Some(vec![serde_json::from_value(json!({
        "manager": FIELD_MANAGER, "operation": "Apply", "apiVersion": "meridio-2.nordix.org/v1alpha1",
        "subresource": "status", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:conditions": fields}},
    }))
    .unwrap()]);
    dg
}

#[test]
fn status_updates_only_when_the_conditions_change_and_keep_their_time() {
    use rivora_k8s_source::meridio::status;
    let dg = group(NS, "g", 4, None);
    let earlier = t("2026-07-01T10:00:00Z");
    let now = t("2026-07-02T10:00:00Z");
    let desired = vec![status::ready(2, 3), status::capacity(0, 2, 4, 3)];

    // Nothing written yet: both, stamped now.
    let first = status_update(&dg, &desired, now).unwrap();
    assert_eq!(first.len(), 2);
    assert!(first.iter().all(|c| c.last_transition_time == Time(now)));

    // Written: nothing to do, whatever the time.
    let mut written = stamp(&desired, &[], earlier);
    let current = with_status(&dg, written.clone(), &["Ready", "CapacityExceeded"]);
    assert_eq!(status_update(&current, &desired, now), None);

    // Another target: Ready's message changes, its status and time do not.
    let more = vec![status::ready(3, 3), status::capacity(0, 3, 4, 3)];
    let got = status_update(&current, &more, now).unwrap();
    assert_eq!(got[0].message, "3 endpoints available");
    assert_eq!(got[0].last_transition_time, Time(earlier));
    assert_eq!(got[1].last_transition_time, Time(earlier));

    // A new generation is a change too (observedGeneration).
    let next = vec![status::ready(2, 4), status::capacity(0, 2, 4, 4)];
    assert!(status_update(&current, &next, now).is_some());

    // No endpoints: Ready turns False, now.
    let none = vec![status::ready(0, 3), status::capacity(0, 0, 4, 3)];
    let got = status_update(&current, &none, now).unwrap();
    assert_eq!(got[0].status, "False");
    assert_eq!(got[0].last_transition_time, Time(now));
    assert_eq!(got[1].last_transition_time, Time(earlier));

    // Not served any more (MultipleGateways): Ready only. The CapacityExceeded this
    // controller wrote must go, so the apply without it is due...
    let multiple = vec![status::multiple_gateways(
        &["red/gw-a".into(), "red/gw-b".into()],
        3,
    )];
    let got = status_update(&current, &multiple, now).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].reason, "MultipleGateways");
    // ...and once applied it is gone: nothing more.
    written = got.clone();
    let after = with_status(&dg, written, &["Ready"]);
    assert_eq!(status_update(&after, &multiple, now), None);
    // A CapacityExceeded someone else wrote cannot be removed by this writer: no endless
    // writes for it.
    let mut theirs = got;
    theirs.push(status::capacity(1, 2, 1, 3));
    let foreign = with_status(&dg, theirs, &["Ready"]);
    assert_eq!(status_update(&foreign, &multiple, now), None);
    assert!(owns_condition(&foreign.metadata, "Ready"));
    assert!(!owns_condition(&foreign.metadata, "CapacityExceeded"));
}

#[test]
fn the_apply_body_holds_the_conditions_only() {
    use rivora_k8s_source::meridio::status;
    let cs = stamp(&[status::ready(1, 2)], &[], t("2026-07-02T10:00:00Z"));
    let body = apply_body(&cs);
    assert_eq!(body["apiVersion"], "meridio-2.nordix.org/v1alpha1");
    assert_eq!(body["kind"], "DistributionGroup");
    assert_eq!(
        body["status"],
        json!({"conditions": [{
            "type": "Ready", "status": "True", "reason": "EndpointsAvailable",
            "message": "1 endpoint available", "observedGeneration": 2,
            "lastTransitionTime": "2026-07-02T10:00:00Z",
        }]})
    );
    assert!(body.get("spec").is_none() && body.get("metadata").is_none());
}
