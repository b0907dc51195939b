//! Rivora's CRDs in a real kube-apiserver: every invalid object of the table is refused with a
//! message naming the field, the valid ones are accepted, and a Table listing shows the printer
//! columns. Needs root and `scripts/build-testdeps.sh` (the test bed says so when missing).

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use rivora_kube_testbed::{TestBed, ensure_namespace, unique_name};
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Pool,
    Policy,
    Peer,
}

impl Kind {
    fn api(self, client: kube::Client, namespace: &str) -> Api<DynamicObject> {
        let (kind, plural) = match self {
            Kind::Pool => ("AddressPool", "addresspools"),
            Kind::Policy => ("ServicePolicy", "servicepolicies"),
            Kind::Peer => ("BGPPeer", "bgppeers"),
        };
        let gvk = GroupVersionKind::gvk(rivora_k8s_api::GROUP, rivora_k8s_api::VERSION, kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
        match self {
            Kind::Policy => Api::namespaced_with(client, namespace, &ar),
            _ => Api::all_with(client, &ar),
        }
    }

    fn object(self, name: &str, spec: Value) -> DynamicObject {
        let kind = match self {
            Kind::Pool => "AddressPool",
            Kind::Policy => "ServicePolicy",
            Kind::Peer => "BGPPeer",
        };
        serde_json::from_value(json!({
            "apiVersion": format!("{}/{}", rivora_k8s_api::GROUP, rivora_k8s_api::VERSION),
            "kind": kind,
            "metadata": { "name": name },
            "spec": spec,
        }))
        .unwrap()
    }
}

/// (what is wrong, kind, spec, the field the refusal must name, a fragment of the reason).
fn invalid_cases() -> Vec<(&'static str, Kind, Value, &'static str, &'static str)> {
    let svc = json!([{ "group": "", "kind": "Service", "name": "web" }]);
    let peer = |extra: Value| {
        let mut spec = json!({ "address": "192.0.2.1", "peerASN": 65001, "localASN": 65000 });
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        spec
    };
    let policy = |extra: Value| {
        let mut spec = json!({ "targetRefs": svc });
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        spec
    };
    vec![
        (
            "prefix length 33",
            Kind::Pool,
            json!({"addresses": ["10.0.0.0/33"]}),
            "spec.addresses",
            "must be a CIDR",
        ),
        (
            "not an address",
            Kind::Pool,
            json!({"addresses": ["not-an-ip"]}),
            "spec.addresses",
            "must be a CIDR",
        ),
        (
            "CIDR with host bits",
            Kind::Pool,
            json!({"addresses": ["10.0.0.1/24"]}),
            "spec.addresses",
            "host bits",
        ),
        (
            "range across families",
            Kind::Pool,
            json!({"addresses": ["10.0.0.1-fd00::1"]}),
            "spec.addresses",
            "one address family",
        ),
        (
            "range start above end",
            Kind::Pool,
            json!({"addresses": ["10.0.0.20-10.0.0.10"]}),
            "spec.addresses",
            "start of a range",
        ),
        (
            "overlapping IPv4 CIDRs",
            Kind::Pool,
            json!({"addresses": ["10.0.0.0/24", "10.0.0.128/25"]}),
            "spec.addresses",
            "IPv4 address blocks of one pool must not overlap",
        ),
        (
            "IPv4 range overlapping a CIDR",
            Kind::Pool,
            json!({"addresses": ["10.1.0.0/24", "10.1.0.200-10.1.1.5"]}),
            "spec.addresses",
            "IPv4 address blocks of one pool must not overlap",
        ),
        (
            "overlapping IPv4 ranges",
            Kind::Pool,
            json!({"addresses": ["10.2.0.1-10.2.0.9", "10.2.0.9-10.2.0.20"]}),
            "spec.addresses",
            "IPv4 address blocks of one pool must not overlap",
        ),
        (
            "overlapping IPv6 CIDRs",
            Kind::Pool,
            json!({"addresses": ["fd00::/64", "fd00::/120"]}),
            "spec.addresses",
            "IPv6 CIDRs of one pool must not overlap",
        ),
        (
            "IPv6 range inside an IPv6 CIDR",
            Kind::Pool,
            json!({"addresses": ["fd01::/120", "fd01::10-fd01::1:0"]}),
            "spec.addresses",
            "IPv6 range of a pool must not overlap",
        ),
        (
            "duplicate block",
            Kind::Pool,
            json!({"addresses": ["10.3.0.0/24", "10.3.0.0/24"]}),
            "spec.addresses[1]",
            "Duplicate value",
        ),
        (
            "no addresses",
            Kind::Pool,
            json!({"addresses": []}),
            "spec.addresses",
            "at least 1 item",
        ),
        (
            "addresses missing",
            Kind::Pool,
            json!({"autoAssign": true}),
            "spec.addresses",
            "Required value",
        ),
        (
            "negative priority",
            Kind::Pool,
            json!({"addresses": ["10.4.0.0/24"], "priority": -1}),
            "spec.priority",
            "greater than or equal to 0",
        ),
        (
            "autoAssign not a boolean",
            Kind::Pool,
            json!({"addresses": ["10.5.0.0/24"], "autoAssign": "yes"}),
            "spec.autoAssign",
            "boolean",
        ),
        (
            "targetRefs missing",
            Kind::Policy,
            json!({"natForwarding": "fib"}),
            "spec.targetRefs",
            "Required value",
        ),
        (
            "target is not a Service",
            Kind::Policy,
            json!({"targetRefs": [{"group": "", "kind": "Deployment", "name": "web"}]}),
            "spec.targetRefs[0].kind",
            "Services only",
        ),
        (
            "target in another API group",
            Kind::Policy,
            json!({"targetRefs": [{"group": "apps", "kind": "Service", "name": "web"}]}),
            "spec.targetRefs[0].group",
            "core API group",
        ),
        (
            "target listed twice",
            Kind::Policy,
            json!({"targetRefs": [{"kind": "Service", "name": "web"}, {"group": "", "kind": "Service", "name": "web"}]}),
            "spec.targetRefs",
            "listed once",
        ),
        (
            "unknown health-check type",
            Kind::Policy,
            policy(json!({"healthCheck": {"type": "udp"}})),
            "spec.healthCheck.type",
            "Unsupported value",
        ),
        (
            "path on a tcp check",
            Kind::Policy,
            policy(json!({"healthCheck": {"type": "tcp", "path": "/healthz"}})),
            "spec.healthCheck.path",
            "only for type: http",
        ),
        (
            "path without a slash",
            Kind::Policy,
            policy(json!({"healthCheck": {"type": "http", "path": "healthz"}})),
            "spec.healthCheck.path",
            "must start with /",
        ),
        (
            "interval too short",
            Kind::Policy,
            policy(json!({"healthCheck": {"type": "tcp", "interval": "50ms"}})),
            "spec.healthCheck.interval",
            "between 100ms and 1h",
        ),
        (
            "interval not a duration",
            Kind::Policy,
            policy(json!({"healthCheck": {"type": "tcp", "interval": "2 seconds"}})),
            "spec.healthCheck.interval",
            "should match",
        ),
        (
            "timeout above interval",
            Kind::Policy,
            policy(json!({"healthCheck": {"type": "tcp", "interval": "1s", "timeout": "3s"}})),
            "spec.healthCheck.timeout",
            "not be longer than interval",
        ),
        (
            "rise of 0",
            Kind::Policy,
            policy(json!({"healthCheck": {"type": "tcp", "rise": 0}})),
            "spec.healthCheck.rise",
            "greater than or equal to 1",
        ),
        (
            "health-check port 0",
            Kind::Policy,
            policy(json!({"healthCheck": {"type": "tcp", "port": 0}})),
            "spec.healthCheck.port",
            "greater than or equal to 1",
        ),
        (
            "status range reversed",
            Kind::Policy,
            policy(
                json!({"healthCheck": {"type": "http", "expectStatus": {"from": 500, "to": 200}}}),
            ),
            "spec.healthCheck.expectStatus.to",
            "from must not be above to",
        ),
        (
            "negative SYN rate",
            Kind::Policy,
            policy(json!({"synRateLimit": {"rate": -5}})),
            "spec.synRateLimit.rate",
            "greater than or equal to 1",
        ),
        (
            "SYN rate above the datapath limit",
            Kind::Policy,
            policy(json!({"synRateLimit": {"rate": 2_000_000}})),
            "spec.synRateLimit.rate",
            "less than or equal to 1000000",
        ),
        (
            "unknown natForwarding",
            Kind::Policy,
            policy(json!({"natForwarding": "xdp"})),
            "spec.natForwarding",
            "Unsupported value",
        ),
        (
            "community half above 65535",
            Kind::Policy,
            policy(json!({"communities": ["70000:1"]})),
            "spec.communities",
            "both numbers 0-65535",
        ),
        (
            "inline BGP password",
            Kind::Peer,
            peer(json!({"password": "s3cret"})),
            "spec.password",
            "inline password is not accepted",
        ),
        (
            "peer address not an IP",
            Kind::Peer,
            peer(json!({"address": "300.1.1.1"})),
            "spec.address",
            "IPv4 or IPv6 address",
        ),
        (
            "peer ASN 0",
            Kind::Peer,
            peer(json!({"peerASN": 0})),
            "spec.peerASN",
            "greater than or equal to 1",
        ),
        (
            "peer ASN above 32 bits",
            Kind::Peer,
            peer(json!({"peerASN": 4_294_967_296u64})),
            "spec.peerASN",
            "less than or equal to",
        ),
        (
            "local ASN missing",
            Kind::Peer,
            json!({"address": "192.0.2.1", "peerASN": 65001}),
            "spec.localASN",
            "Required value",
        ),
        (
            "hold time 2 s",
            Kind::Peer,
            peer(json!({"holdTimeSeconds": 2})),
            "spec.holdTimeSeconds",
            "0 or 3-65535",
        ),
        (
            "BGP port 70000",
            Kind::Peer,
            peer(json!({"port": 70000})),
            "spec.port",
            "less than or equal to 65535",
        ),
        (
            "local address of the other family",
            Kind::Peer,
            peer(json!({"localAddress": "fd00::1"})),
            "spec.localAddress",
            "same address family",
        ),
        (
            "next hop not an IP",
            Kind::Peer,
            peer(json!({"nextHops": ["router"]})),
            "spec.nextHops",
            "IPv4 or IPv6 address",
        ),
        (
            "Secret reference without namespace",
            Kind::Peer,
            peer(json!({"passwordSecretRef": {"name": "bgp"}})),
            "spec.passwordSecretRef.namespace",
            "Required value",
        ),
    ]
}

fn valid_cases() -> Vec<(&'static str, Kind, Value)> {
    vec![
        (
            "IPv4 pool",
            Kind::Pool,
            json!({"addresses": ["192.0.2.0/28"]}),
        ),
        (
            "IPv6 pool",
            Kind::Pool,
            json!({"addresses": ["2001:db8::/120"], "autoAssign": false, "priority": 10}),
        ),
        (
            "dual-stack pool with ranges and selectors",
            Kind::Pool,
            json!({
                "addresses": ["198.51.100.0/25", "198.51.100.200-198.51.100.210", "2001:db8:1::/124", "2001:db8:2::10-2001:db8:2::20"],
                "avoidBuggyIPs": true,
                "serviceSelector": {"matchLabels": {"tier": "edge"}},
                "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
                "disabled": true
            }),
        ),
        (
            "adjacent IPv4 blocks",
            Kind::Pool,
            json!({"addresses": ["203.0.113.0/25", "203.0.113.128-203.0.113.255"]}),
        ),
        (
            "minimal policy",
            Kind::Policy,
            json!({"targetRefs": [{"kind": "Service", "name": "web"}]}),
        ),
        (
            "full policy",
            Kind::Policy,
            json!({
                "targetRefs": [{"group": "", "kind": "Service", "name": "web", "sectionName": "https"}, {"group": "", "kind": "Service", "name": "api"}],
                "healthCheck": {"type": "http", "port": 8080, "path": "/healthz", "host": "web.example", "expectStatus": {"from": 200, "to": 204}, "interval": "500ms", "timeout": "250ms", "rise": 1, "fall": 5},
                "synRateLimit": {"rate": 100, "burst": 200},
                "natForwarding": "fib",
                "advertise": false,
                "communities": ["65000:100", "0:65535"]
            }),
        ),
        (
            "minimal peer",
            Kind::Peer,
            json!({"address": "2001:db8::1", "peerASN": 4_200_000_000u64, "localASN": 65000}),
        ),
        (
            "full peer",
            Kind::Peer,
            json!({
                "address": "192.0.2.1", "peerASN": 65001, "localASN": 65000, "port": 1179,
                "holdTimeSeconds": 0, "localAddress": "192.0.2.2",
                "passwordSecretRef": {"namespace": "rivora-system", "name": "bgp", "key": "md5"},
                "nodeSelector": {"matchLabels": {"rack": "r1"}},
                "nextHops": ["192.0.2.254", "2001:db8::fe"],
                "communities": ["65000:1"]
            }),
        ),
    ]
}

async fn setup() -> (&'static TestBed, kube::Client, String) {
    let bed = TestBed::shared();
    bed.install_crds(&rivora_k8s_api::crds()).await.unwrap();
    let client = bed.admin_client().await.unwrap();
    let namespace = unique_name("crd");
    ensure_namespace(&client, &namespace).await.unwrap();
    (bed, client, namespace)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_refuses_each_invalid_object_naming_the_field() {
    let (_bed, client, namespace) = setup().await;
    let cases = invalid_cases();
    let mut failures = Vec::new();
    for (i, (what, kind, spec, field, reason)) in cases.iter().enumerate() {
        let name = unique_name(&format!("bad{i}"));
        let api = kind.api(client.clone(), &namespace);
        match api
            .create(&PostParams::default(), &kind.object(&name, spec.clone()))
            .await
        {
            Ok(_) => failures.push(format!("{what}: accepted")),
            Err(kube::Error::Api(s)) => {
                let msg = s.message.clone();
                println!("{what:38} {} {msg}", s.code);
                if s.code != 422 || !msg.contains(field) || !msg.contains(reason) {
                    failures.push(format!(
                        "{what}: expected 422 naming {field} with {reason:?}, got {}: {msg}",
                        s.code
                    ));
                }
            }
            Err(e) => failures.push(format!("{what}: {e}")),
        }
    }
    println!(
        "{} invalid objects, {} not refused as expected",
        cases.len(),
        failures.len()
    );
    assert!(cases.len() >= 20);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_objects_are_accepted_with_defaults() {
    let (_bed, client, namespace) = setup().await;
    for (what, kind, spec) in valid_cases() {
        let name = unique_name("good");
        let api = kind.api(client.clone(), &namespace);
        let created = api
            .create(&PostParams::default(), &kind.object(&name, spec.clone()))
            .await
            .unwrap_or_else(|e| panic!("{what} refused: {e}"));
        // What the API server stored parses as the Rust type (the schema and types agree).
        let data = serde_json::to_value(&created).unwrap();
        match kind {
            Kind::Pool => {
                let p: rivora_k8s_api::AddressPool = serde_json::from_value(data).unwrap();
                if spec.get("autoAssign").is_none() {
                    assert!(p.spec.auto_assign, "{what}: autoAssign defaults to true");
                }
            }
            Kind::Policy => {
                let _: rivora_k8s_api::ServicePolicy = serde_json::from_value(data).unwrap();
            }
            Kind::Peer => {
                let p: rivora_k8s_api::BGPPeer = serde_json::from_value(data).unwrap();
                if spec.get("port").is_none() {
                    assert_eq!(p.spec.port, 179, "{what}: port defaults to 179");
                    assert_eq!(
                        p.spec.hold_time_seconds, 90,
                        "{what}: hold time defaults to 90"
                    );
                }
            }
        }
        println!("accepted {what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_listing_shows_the_printer_columns() {
    let (_bed, client, _namespace) = setup().await;
    let name = unique_name("cols");
    Kind::Pool
        .api(client.clone(), "")
        .create(
            &PostParams::default(),
            &Kind::Pool.object(
                &name,
                json!({"addresses": ["100.64.0.0/30", "fd64::/126"], "priority": 7}),
            ),
        )
        .await
        .unwrap();
    let req = http::Request::get(format!(
        "/apis/{}/{}/addresspools",
        rivora_k8s_api::GROUP,
        rivora_k8s_api::VERSION
    ))
    .header("Accept", "application/json;as=Table;g=meta.k8s.io;v=v1")
    .body(Vec::new())
    .unwrap();
    let table: Value = client.request(req).await.unwrap();
    assert_eq!(table["kind"], "Table", "{table}");
    let columns: Vec<String> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    println!("columns: {columns:?}");
    assert_eq!(
        columns,
        [
            "Name",
            "Addresses",
            "Auto Assign",
            "Priority",
            "Disabled",
            "IPv4 Free",
            "IPv6 Free",
            "Age"
        ]
    );
    let row = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == name.as_str())
        .unwrap_or_else(|| panic!("{name} not in {table}"));
    println!("row: {}", row["cells"]);
    assert_eq!(row["cells"][1], r#"["100.64.0.0/30","fd64::/126"]"#);
    assert_eq!(row["cells"][2], true);
    assert_eq!(row["cells"][3], 7);
    assert_eq!(row["cells"][4], false);
}
