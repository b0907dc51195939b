use super::*;
use serde_json::{Value, json};

fn peer(name: &str, created: &str, spec: Value) -> Arc<BGPPeer> {
    let mut s = json!({"address": "192.0.2.1", "peerASN": 65000, "localASN": 65001});
    for (k, v) in spec.as_object().unwrap() {
        s[k] = v.clone();
    }
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "rivora.dev/v1alpha1", "kind": "BGPPeer",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": s,
        }))
        .unwrap(),
    )
}

fn node(labels: Value, addresses: Value) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": labels},
        "status": {"addresses": addresses},
    }))
    .unwrap()
}

fn secret(ns: &str, name: &str, key: &str, value: &[u8]) -> Arc<Secret> {
    let mut data = BTreeMap::new();
    data.insert(key.to_string(), k8s_openapi::ByteString(value.to_vec()));
    Arc::new(Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    })
}

const T0: &str = "2026-12-01T00:00:00Z";
const T1: &str = "2026-12-01T00:00:01Z";

#[test]
fn the_node_selector_picks_peers_and_the_oldest_sets_the_as() {
    let peers = [
        peer(
            "rack-b",
            T1,
            json!({"address": "192.0.2.2",
             "nodeSelector": {"matchLabels": {"rack": "b"}}}),
        ),
        peer(
            "everyone",
            T0,
            json!({"address": "192.0.2.1", "holdTimeSeconds": 9,
             "nextHops": ["10.0.0.9", "fd00::9"], "localAddress": "10.0.0.1"}),
        ),
        peer(
            "rack-a",
            T1,
            json!({"address": "2001:db8::1", "port": 1179,
             "nodeSelector": {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]}]}}),
        ),
    ];
    let n = node(
        json!({"rack": "a"}),
        json!([{"type": "InternalIP", "address": "10.0.0.1"}]),
    );
    let b = node_bgp(&peers, Some(&n), "n1", &Passwords::new("infra", &[]));
    assert_eq!(
        b.peers,
        ["everyone", "rack-a"],
        "oldest first, rack-b not selected"
    );
    assert!(b.problems.is_empty(), "{:?}", b.problems);
    assert!(b.announce);
    let c = b.config.expect("configured");
    assert_eq!(
        (c.local_as, c.router_id),
        (65001, Ipv4Addr::new(10, 0, 0, 1))
    );
    let e = &c.peers[0];
    assert_eq!(
        (e.hold_time, e.next_hop_v4, e.next_hop_v6, e.local_address),
        (
            9,
            Some("10.0.0.9".parse().unwrap()),
            Some("fd00::9".parse().unwrap()),
            Some("10.0.0.1".parse().unwrap())
        )
    );
    assert_eq!(
        (c.peers[1].port, c.peers[1].hold_time),
        (1179, 90),
        "defaults kept"
    );

    // Before the Node is known only selector-less peers apply.
    let early = node_bgp(&peers, None, "n1", &Passwords::new("infra", &[]));
    assert_eq!(early.peers, ["everyone"]);
    // No peer at all: no speaker.
    assert_eq!(
        node_bgp(&[], Some(&n), "n1", &Passwords::new("infra", &[])).config,
        None
    );
}

#[test]
fn a_password_comes_from_its_secret_and_a_missing_one_keeps_the_session_down() {
    let with_secret = |key: &str| {
        peer(
            "md5",
            T0,
            json!({"passwordSecretRef": {"namespace": "infra", "name": "bgp", "key": key}}),
        )
    };
    let secrets = [secret("infra", "bgp", "password", b"s3cret")];
    let b = node_bgp(
        &[with_secret("password")],
        None,
        "n1",
        &Passwords::new("infra", &secrets),
    );
    assert_eq!(
        b.config.unwrap().peers[0].password.as_deref(),
        Some("s3cret")
    );

    for (secrets, key, says) in [
        (vec![], "password", "Secret infra/bgp: not found"),
        (secrets.to_vec(), "other", "has no key \"other\""),
        (
            vec![secret("infra", "bgp", "password", &[0xff, 0xfe])],
            "password",
            "not UTF-8",
        ),
        (
            vec![secret("infra", "bgp", "password", &[b'x'; 81])],
            "password",
            "81 bytes",
        ),
    ] {
        let b = node_bgp(
            &[with_secret(key)],
            None,
            "n1",
            &Passwords::new("infra", &secrets),
        );
        assert_eq!(b.config, None, "no session without the password");
        let msg = b.problems[0].to_string();
        assert!(
            msg.contains(says) && msg.contains("spec.passwordSecretRef"),
            "{msg}"
        );
    }
}

#[test]
fn a_secret_outside_the_readable_namespace_is_named_as_such() {
    let p = peer(
        "md5",
        T0,
        json!({"passwordSecretRef": {"namespace": "elsewhere", "name": "bgp"}}),
    );
    let secrets = [secret("elsewhere", "bgp", "password", b"s3cret")];
    // Even if such a Secret were in the store, it is not read: RBAC grants one namespace.
    let b = node_bgp(&[p], None, "n1", &Passwords::new("infra", &secrets));
    assert_eq!(b.config, None);
    let msg = b.problems[0].to_string();
    assert!(
        msg.contains("Secret elsewhere/bgp")
            && msg.contains("only in namespace infra")
            && msg.contains("--namespace"),
        "{msg}"
    );
}

#[test]
fn conflicting_as_duplicates_and_bad_fields_are_refused_naming_the_field() {
    let peers = [
        peer("first", T0, json!({})),
        peer(
            "other-as",
            T1,
            json!({"address": "192.0.2.5", "localASN": 65999}),
        ),
        peer("twin", T1, json!({})),
        peer(
            "hold",
            T1,
            json!({"address": "192.0.2.6", "holdTimeSeconds": 2}),
        ),
        peer(
            "hops",
            T1,
            json!({"address": "192.0.2.7", "nextHops": ["10.0.0.1", "10.0.0.2"]}),
        ),
        peer(
            "family",
            T1,
            json!({"address": "192.0.2.8", "localAddress": "fd00::1"}),
        ),
        peer(
            "tags",
            T1,
            json!({"address": "192.0.2.9", "communities": ["65000:1", "65000:70000"]}),
        ),
    ];
    let b = node_bgp(&peers, None, "n1", &Passwords::new("infra", &[]));
    assert_eq!(b.peers, ["first"]);
    let said: Vec<String> = b.problems.iter().map(|p| p.to_string()).collect();
    for want in [
        "BGPPeer family: spec.localAddress: fd00::1 is not of spec.address's family",
        "BGPPeer hold: spec.holdTimeSeconds: 2 is neither 0 nor 3-65535",
        "BGPPeer hops: spec.nextHops: 10.0.0.2: at most one next hop per family",
        "BGPPeer other-as: spec.localASN 65999 differs from 65001 of the older BGPPeer first",
        "BGPPeer twin: the same address and port as the older BGPPeer first",
        "BGPPeer tags: spec.communities: \"65000:70000\" is not AS:VALUE (each 0-65535)",
    ] {
        assert!(
            said.iter().any(|s| s.starts_with(want)),
            "missing {want:?} in {said:#?}"
        );
    }
    assert_eq!(b.problems.len(), 6);
    // Well-formed communities go to that peer's sessions.
    let tagged = peer("tags", T1, json!({"communities": ["65000:1", "64512:300"]}));
    let b = node_bgp(&[tagged], None, "n1", &Passwords::new("infra", &[]));
    let cfg = b.config.expect("a speaker config");
    assert_eq!(
        cfg.peers[0].communities,
        [65000u32 << 16 | 1, 64512u32 << 16 | 300]
    );
}

#[test]
fn the_exclusion_label_keeps_sessions_but_announces_nothing() {
    let n = node(json!({EXCLUDE_LABEL: ""}), json!([]));
    let b = node_bgp(
        &[peer("p", T0, json!({}))],
        Some(&n),
        "n1",
        &Passwords::new("infra", &[]),
    );
    assert!(b.config.is_some() && !b.announce);
}

#[test]
fn the_router_id_is_an_ipv4_of_the_node_or_a_stable_number_from_its_name() {
    let n = node(
        json!({}),
        json!([{"type": "ExternalIP", "address": "198.51.100.1"},
                                   {"type": "InternalIP", "address": "fd00::1"},
                                   {"type": "InternalIP", "address": "10.0.0.7"}]),
    );
    assert_eq!(router_id(Some(&n), "n1"), Ipv4Addr::new(10, 0, 0, 7));
    let ext = node(
        json!({}),
        json!([{"type": "ExternalIP", "address": "198.51.100.1"}]),
    );
    assert_eq!(router_id(Some(&ext), "n1"), Ipv4Addr::new(198, 51, 100, 1));
    let v6 = node(
        json!({}),
        json!([{"type": "InternalIP", "address": "fd00::1"}]),
    );
    let a = router_id(Some(&v6), "worker-1");
    assert_eq!(
        a,
        router_id(None, "worker-1"),
        "from the name alone, the same every time"
    );
    assert_ne!(a, router_id(None, "worker-2"));
    assert_ne!(a, Ipv4Addr::UNSPECIFIED);
}
