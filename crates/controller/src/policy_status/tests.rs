use super::*;
use rivora_k8s_api::class::LOAD_BALANCER_CLASS;
use serde_json::{Value, json};

const NS: &str = "shop";

fn service(name: &str, spec: Value) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": NS, "name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// A LoadBalancer Service of our class with the given ports (`[name, port]`).
fn lb(name: &str, ports: &[(&str, i32)]) -> Service {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(n, p)| {
            if n.is_empty() {
                json!({"port": p, "protocol": "TCP"})
            } else {
                json!({"name": n, "port": p, "protocol": "TCP"})
            }
        })
        .collect();
    service(
        name,
        json!({"type": "LoadBalancer", "loadBalancerClass": LOAD_BALANCER_CLASS, "ports": ports}),
    )
}

fn policy(name: &str, created: &str, generation: i64, spec: Value) -> ServicePolicy {
    serde_json::from_value(json!({
        "apiVersion": "rivora.dev/v1alpha1", "kind": "ServicePolicy",
        "metadata": {"namespace": NS, "name": name, "creationTimestamp": created,
                     "generation": generation},
        "spec": spec,
    }))
    .unwrap()
}

fn to(name: &str) -> Value {
    json!({"group": "", "kind": "Service", "name": name})
}

fn to_port(name: &str, section: &str) -> Value {
    json!({"group": "", "kind": "Service", "name": name, "sectionName": section})
}

fn now() -> Timestamp {
    "2026-12-01T10:00:00Z".parse().unwrap()
}

/// The status of `p` among `all` over `services`, with the default class.
fn status_of(
    p: &ServicePolicy,
    all: &[&ServicePolicy],
    services: &[Service],
) -> ServicePolicyStatus {
    let index = ServiceIndex::new(services);
    desired_status(
        p,
        all.iter().copied(),
        &index,
        &ClassConfig::default(),
        now(),
    )
}

/// (status, reason, message) of each target's Accepted condition.
fn verdicts(s: &ServicePolicyStatus) -> Vec<(String, String, String)> {
    s.targets
        .iter()
        .map(|t| {
            assert_eq!(t.conditions.len(), 1, "{t:?}");
            let c = &t.conditions[0];
            assert_eq!(c.type_, "Accepted");
            (c.status.clone(), c.reason.clone(), c.message.clone())
        })
        .collect()
}

fn one(s: &ServicePolicyStatus) -> (String, String, String) {
    let v = verdicts(s);
    assert_eq!(v.len(), 1, "{v:?}");
    v.into_iter().next().unwrap()
}

#[test]
fn a_policy_on_an_lb_service_of_ours_is_accepted_with_its_generation() {
    let svc = lb("web", &[("http", 80)]);
    let p = policy(
        "p",
        "2026-01-01T00:00:00Z",
        3,
        json!({"targetRefs": [to("web")], "synRateLimit": {"rate": 100}}),
    );
    let s = status_of(&p, &[&p], &[svc]);
    assert_eq!(
        one(&s),
        (
            "True".into(),
            "Accepted".into(),
            "applies to Service shop/web".into()
        )
    );
    let c = &s.targets[0].conditions[0];
    assert_eq!(c.observed_generation, Some(3));
    assert_eq!(c.last_transition_time, Time(now()));
    assert_eq!(s.targets[0].target_ref.name, "web");
}

#[test]
fn a_missing_service_or_port_is_target_not_found() {
    let svc = lb("web", &[("http", 80)]);
    let p = policy(
        "p",
        "2026-01-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("gone"), to_port("web", "https"), to_port("web", "http")]}),
    );
    let v = verdicts(&status_of(&p, &[&p], &[svc]));
    assert_eq!(
        v,
        [
            (
                "False".into(),
                "TargetNotFound".into(),
                "Service shop/gone not found".into()
            ),
            (
                "False".into(),
                "TargetNotFound".into(),
                "Service shop/web has no port named \"https\" (sectionName)".into()
            ),
            (
                "True".into(),
                "Accepted".into(),
                "applies to Service shop/web".into()
            ),
        ]
    );
}

#[test]
fn a_service_of_another_namespace_is_not_found() {
    let other: Service = serde_json::from_value(json!({
        "metadata": {"namespace": "elsewhere", "name": "web"},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": LOAD_BALANCER_CLASS,
                 "ports": [{"port": 80}]},
    }))
    .unwrap();
    let p = policy(
        "p",
        "2026-01-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("web")]}),
    );
    assert_eq!(one(&status_of(&p, &[&p], &[other])).1, "TargetNotFound");
}

#[test]
fn a_service_the_nodes_do_not_serve_is_invalid_naming_why() {
    let cluster_ip = service(
        "internal",
        json!({"type": "ClusterIP", "ports": [{"port": 80}]}),
    );
    let no_type = service("plain", json!({"ports": [{"port": 80}]}));
    let foreign = service(
        "foreign",
        json!({"type": "LoadBalancer", "loadBalancerClass": "other.io/lb", "ports": [{"port": 80}]}),
    );
    let classless = service(
        "classless",
        json!({"type": "LoadBalancer", "ports": [{"port": 80}]}),
    );
    let p = policy(
        "p",
        "2026-01-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("internal"), to("plain"), to("foreign"), to("classless")]}),
    );
    let services = [cluster_ip, no_type, foreign, classless];
    let v = verdicts(&status_of(&p, &[&p], &services));
    let reasons: Vec<&str> = v
        .iter()
        .map(|(s, r, _)| {
            assert_eq!(s, "False");
            r.as_str()
        })
        .collect();
    assert_eq!(reasons, ["Invalid"; 4]);
    assert_eq!(
        v[0].2,
        "Service shop/internal is type ClusterIP, not LoadBalancer"
    );
    assert_eq!(
        v[1].2,
        "Service shop/plain is type ClusterIP, not LoadBalancer"
    );
    assert!(
        v[2].2
            .contains("loadBalancerClass other.io/lb, not rivora.dev/lb"),
        "{}",
        v[2].2
    );
    assert!(v[3].2.contains("no loadBalancerClass"), "{}", v[3].2);
    // With Rivora as the default class, the classless one is served.
    let index = ServiceIndex::new(&services);
    let default = ClassConfig {
        default_class: true,
        ..ClassConfig::default()
    };
    let s = desired_status(&p, [&p], &index, &default, now());
    assert_eq!(verdicts(&s)[3].1, "Accepted");
}

#[test]
fn a_value_the_nodes_refuse_is_invalid_naming_the_field() {
    let svc = lb("web", &[("http", 80)]);
    for (spec, field) in [
        (
            json!({"healthCheck": {"type": "http", "path": "/has space"}}),
            "healthCheck.path: ",
        ),
        (
            json!({"healthCheck": {"type": "http", "host": "two words"}}),
            "healthCheck.host: ",
        ),
        (
            json!({"synRateLimit": {"rate": 2000000}}),
            "synRateLimit.rate 2000000 ",
        ),
        (
            json!({"synRateLimit": {"rate": 5, "burst": 0}}),
            "synRateLimit.burst 0 ",
        ),
    ] {
        let mut spec = spec;
        spec["targetRefs"] = json!([to("web")]);
        let p = policy("p", "2026-01-01T00:00:00Z", 1, spec.clone());
        let (status, why, message) = one(&status_of(&p, &[&p], std::slice::from_ref(&svc)));
        assert_eq!(
            (status.as_str(), why.as_str()),
            ("False", "Invalid"),
            "{spec}"
        );
        assert!(message.starts_with(field), "{spec}: {message}");
        // Exactly what the node agent refuses: the shared check says the same.
        assert_eq!(
            message,
            format!(
                "{}; the nodes do not apply this policy",
                policy_check::check(&p.spec).unwrap_err()
            )
        );
    }
    // `type: none` is not probed, so its fields do not make it invalid (as on the nodes).
    let p = policy(
        "p",
        "2026-01-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("web")], "healthCheck": {"type": "none", "port": 0}}),
    );
    assert_eq!(one(&status_of(&p, &[&p], &[svc])).1, "Accepted");
}

#[test]
fn of_two_policies_on_one_service_the_older_is_accepted_and_the_newer_conflicted() {
    let svc = lb("web", &[("http", 80), ("", 53)]);
    // Names against age: the newer sorts first by name, so only age can decide.
    let older = policy(
        "zz-old",
        "2026-01-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("web")]}),
    );
    let newer = policy(
        "aa-new",
        "2026-02-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("web")]}),
    );
    let all = [&newer, &older];
    let services = [svc];
    assert_eq!(one(&status_of(&older, &all, &services)).1, "Accepted");
    let (status, why, message) = one(&status_of(&newer, &all, &services));
    assert_eq!((status.as_str(), why.as_str()), ("False", "Conflicted"));
    assert_eq!(
        message,
        "Service shop/web: ServicePolicy shop/zz-old applies to ports http, 53/TCP instead (it is older)"
    );
    // The same rule the node agent uses decides.
    let winner = attached_policy(all, NS, "web", Some("http")).unwrap();
    assert_eq!(winner.metadata.name.as_deref(), Some("zz-old"));
}

#[test]
fn equal_ages_fall_back_to_the_name_as_on_the_nodes() {
    let svc = lb("web", &[("http", 80)]);
    let a = policy(
        "a",
        "2026-01-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("web")]}),
    );
    let b = policy(
        "b",
        "2026-01-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("web")]}),
    );
    let all = [&b, &a];
    let services = [svc];
    assert_eq!(one(&status_of(&a, &all, &services)).1, "Accepted");
    let (_, why, message) = one(&status_of(&b, &all, &services));
    assert_eq!(why, "Conflicted");
    assert!(
        message.contains(
            "ServicePolicy shop/a applies to port http instead (it is as old and first by name)"
        ),
        "{message}"
    );
}

#[test]
fn a_section_reference_takes_its_port_and_leaves_the_older_whole_service_policy_the_rest() {
    let svc = lb("web", &[("http", 80), ("https", 443)]);
    let whole = policy(
        "whole",
        "2026-01-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("web")]}),
    );
    let https = policy(
        "https-only",
        "2026-03-01T00:00:00Z",
        1,
        json!({"targetRefs": [to_port("web", "https")]}),
    );
    let all = [&whole, &https];
    let services = [svc];
    assert_eq!(
        one(&status_of(&https, &all, &services)),
        (
            "True".into(),
            "Accepted".into(),
            "applies to Service shop/web".into()
        )
    );
    assert_eq!(
        one(&status_of(&whole, &all, &services)),
        (
            "True".into(),
            "Accepted".into(),
            "applies to Service shop/web, except: ServicePolicy shop/https-only applies to port \
             https instead (it names the port by sectionName)"
                .into()
        )
    );
    // A second, newer section reference to the same port loses to the older one.
    let late = policy(
        "late",
        "2026-04-01T00:00:00Z",
        1,
        json!({"targetRefs": [to_port("web", "https")]}),
    );
    let all = [&whole, &https, &late];
    let (status, why, message) = one(&status_of(&late, &all, &services));
    assert_eq!((status.as_str(), why.as_str()), ("False", "Conflicted"));
    assert!(
        message
            .contains("ServicePolicy shop/https-only applies to port https instead (it is older)"),
        "{message}"
    );
}

#[test]
fn an_invalid_winner_still_wins_because_the_nodes_pick_before_they_check() {
    // The nodes pick the attached policy first and then refuse its values (the Service fails),
    // so the valid newer policy does not apply either: Conflicted, naming the invalid one.
    let svc = lb("web", &[("http", 80)]);
    let bad = policy(
        "bad",
        "2026-01-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("web")], "healthCheck": {"type": "http", "path": "/a b"}}),
    );
    let good = policy(
        "good",
        "2026-02-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("web")]}),
    );
    let all = [&bad, &good];
    let services = [svc];
    assert_eq!(one(&status_of(&bad, &all, &services)).1, "Invalid");
    let (_, why, message) = one(&status_of(&good, &all, &services));
    assert_eq!(why, "Conflicted");
    assert!(message.contains("shop/bad"), "{message}");
}

#[test]
fn policies_of_another_namespace_never_conflict() {
    let svc = lb("web", &[("http", 80)]);
    let mut elsewhere = policy(
        "old",
        "2025-01-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("web")]}),
    );
    elsewhere.metadata.namespace = Some("elsewhere".into());
    let p = policy(
        "p",
        "2026-01-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("web")]}),
    );
    assert_eq!(one(&status_of(&p, &[&elsewhere, &p], &[svc])).1, "Accepted");
}

#[test]
fn a_reference_that_is_not_a_core_service_is_invalid() {
    let svc = lb("web", &[("http", 80)]);
    let p = policy(
        "p",
        "2026-01-01T00:00:00Z",
        1,
        json!({"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "web"}]}),
    );
    let (status, why, message) = one(&status_of(&p, &[&p], &[svc]));
    assert_eq!((status.as_str(), why.as_str()), ("False", "Invalid"));
    assert!(message.contains("\"Gateway\""), "{message}");
}

#[test]
fn the_transition_time_is_kept_while_the_status_stays_and_moves_when_it_changes() {
    let svc = lb("web", &[("http", 80)]);
    let earlier: Timestamp = "2026-11-01T00:00:00Z".parse().unwrap();
    let mut p = policy(
        "p",
        "2026-01-01T00:00:00Z",
        2,
        json!({"targetRefs": [to("web"), to("gone")]}),
    );
    let cond = |status: &str, why: &str| {
        json!([{"type": "Accepted", "status": status, "reason": why, "message": "old words",
                "observedGeneration": 1, "lastTransitionTime": "2026-11-01T00:00:00Z"}])
    };
    p.status = Some(
        serde_json::from_value(json!({"targets": [
            {"targetRef": to("web"), "conditions": cond("True", "Accepted")},
            {"targetRef": to("gone"), "conditions": cond("True", "Accepted")},
        ]}))
        .unwrap(),
    );
    let s = status_of(&p, &[&p], &[svc]);
    // web: still True, so the time stays (message and generation are refreshed).
    let web = &s.targets[0].conditions[0];
    assert_eq!(web.last_transition_time, Time(earlier));
    assert_eq!(web.observed_generation, Some(2));
    assert_eq!(web.message, "applies to Service shop/web");
    // gone: True to False, so the time is now.
    let gone = &s.targets[1].conditions[0];
    assert_eq!(
        (gone.status.as_str(), gone.reason.as_str()),
        ("False", "TargetNotFound")
    );
    assert_eq!(gone.last_transition_time, Time(now()));
    assert!(!status_is_current(&p, &s));
    // Written once, the same computation later finds nothing to write (no write storms).
    p.status = Some(s);
    let later: Timestamp = "2026-12-02T00:00:00Z".parse().unwrap();
    let again = desired_status(
        &p,
        [&p],
        &ServiceIndex::new(&[lb("web", &[("http", 80)])]),
        &ClassConfig::default(),
        later,
    );
    assert!(status_is_current(&p, &again), "{again:?}");
}

#[test]
fn entries_follow_target_refs_and_stop_at_the_schema_limit() {
    let refs: Vec<Value> = (0..20).map(|i| to(&format!("s{i}"))).collect();
    let p = policy("p", "2026-01-01T00:00:00Z", 1, json!({"targetRefs": refs}));
    let s = status_of(&p, &[&p], &[]);
    assert_eq!(s.targets.len(), MAX_TARGET_REFS);
    for (i, t) in s.targets.iter().enumerate() {
        assert_eq!(t.target_ref.name, format!("s{i}"));
    }
}

#[test]
fn the_status_round_trips_through_json_as_the_api_server_returns_it() {
    // What is written is compared with what is read back: equality must survive serde.
    let svc = lb("web", &[("http", 80)]);
    let p = policy(
        "p",
        "2026-01-01T00:00:00Z",
        1,
        json!({"targetRefs": [to("web"), to_port("web", "http")]}),
    );
    let s = status_of(&p, &[&p], &[svc]);
    let back: ServicePolicyStatus =
        serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
    assert_eq!(back, s);
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(v["targets"][1]["targetRef"]["sectionName"], "http");
    assert_eq!(v["targets"][0]["conditions"][0]["reason"], "Accepted");
}
