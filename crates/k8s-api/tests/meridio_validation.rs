//! Meridio-2's CRDs (DistributionGroup, L34Route, LoadBalancerEndpointSlice), installed from the
//! chart template exactly as `meridio.installCRDs=true` ships them, in a real kube-apiserver: every
//! invalid object of the table is refused with a message naming the field, immutable fields stay
//! put, the valid objects are accepted and read back as the Rust types with the defaults filled in,
//! the slices' selectable fields filter lists, and Table listings show the printer columns.
//! Needs root and `scripts/build-testdeps.sh` (the test bed says so when missing).

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use rivora_k8s_api::meridio::{
    self, DistributionGroup, IpFamily, L34Route, LoadBalancerEndpointSlice, TransportProtocol,
};
use rivora_kube_testbed::{TestBed, ensure_namespace, unique_name};
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Group,
    Route,
    Slice,
}

impl Kind {
    fn resource(self) -> ApiResource {
        match self {
            Kind::Group => ApiResource::erase::<DistributionGroup>(&()),
            Kind::Route => ApiResource::erase::<L34Route>(&()),
            Kind::Slice => ApiResource::erase::<LoadBalancerEndpointSlice>(&()),
        }
    }

    fn api(self, client: kube::Client, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(client, namespace, &self.resource())
    }

    fn object(self, name: &str, spec: Value) -> DynamicObject {
        let ar = self.resource();
        serde_json::from_value(json!({
            "apiVersion": ar.api_version,
            "kind": ar.kind,
            "metadata": { "name": name },
            "spec": spec,
        }))
        .unwrap()
    }
}

/// `base` with the keys of `extra` set (a `null` removes the key).
fn with(base: &Value, extra: Value) -> Value {
    let mut spec = base.clone();
    for (k, v) in extra.as_object().unwrap() {
        if v.is_null() {
            spec.as_object_mut().unwrap().remove(k);
        } else {
            spec[k] = v.clone();
        }
    }
    spec
}

fn route() -> Value {
    json!({
        "parentRefs": [{"name": "gw-a"}],
        "backendRefs": [{"group": "meridio-2.nordix.org", "kind": "DistributionGroup", "name": "dg-a"}],
        "destinationCIDRs": ["20.0.0.1/32"],
        "protocols": ["TCP"],
        "priority": 1
    })
}

fn slice() -> Value {
    json!({
        "distributionGroupName": "dg-a",
        "gatewayRef": {"name": "gw-a", "namespace": "red"},
        "endpoints": [endpoint(json!([{"ip": "169.111.100.3", "family": "IPv4"}]))]
    })
}

fn endpoint(addresses: Value) -> Value {
    json!({
        "target": {"name": "target-a-0", "uid": "0b7a4c8e-0000-4000-8000-000000000001"},
        "addresses": addresses,
        "identifier": 0,
        "ready": true
    })
}

/// (what is wrong, kind, spec, the field the refusal must name, a fragment of the reason).
fn invalid_cases() -> Vec<(&'static str, Kind, Value, &'static str, &'static str)> {
    let (r, s) = (route(), slice());
    vec![
        // DistributionGroup.
        (
            "maxEndpoints 0",
            Kind::Group,
            json!({"maglev": {"maxEndpoints": 0}}),
            "spec.maglev.maxEndpoints",
            "greater than or equal to 1",
        ),
        (
            "empty maglev block",
            Kind::Group,
            json!({"maglev": {}}),
            "spec.maglev.maxEndpoints",
            "Required value",
        ),
        (
            "unknown distribution type",
            Kind::Group,
            json!({"type": "Random"}),
            "spec.type",
            "Unsupported value",
        ),
        (
            "parent of kind Service",
            Kind::Group,
            json!({"parentRefs": [{"kind": "Service", "name": "web"}]}),
            "spec.parentRefs[0].kind",
            "must be of kind Gateway",
        ),
        (
            "two parent Gateways",
            Kind::Group,
            json!({"parentRefs": [{"name": "gw-a"}, {"name": "gw-b"}]}),
            "spec.parentRefs",
            "must have at most 1 item",
        ),
        (
            "parent without a name",
            Kind::Group,
            json!({"parentRefs": [{"name": ""}]}),
            "spec.parentRefs[0].name",
            "at least 1 chars long",
        ),
        (
            "selector not a LabelSelector",
            Kind::Group,
            json!({"selector": {"matchLabels": {"app": 1}}}),
            "spec.selector.matchLabels.app",
            "must be of type string",
        ),
        // L34Route.
        (
            "destinationCIDR a /24",
            Kind::Route,
            with(
                &r,
                json!({"destinationCIDRs": ["20.0.0.1/32", "20.0.1.0/24"]}),
            ),
            "spec.destinationCIDRs",
            "IPv4 /32 or an IPv6 /128",
        ),
        (
            "destinationCIDR an IPv6 /32",
            Kind::Route,
            with(&r, json!({"destinationCIDRs": ["fd00::/32"]})),
            "spec.destinationCIDRs",
            "IPv4 /32 or an IPv6 /128",
        ),
        (
            "destinationCIDR without prefix length",
            Kind::Route,
            with(&r, json!({"destinationCIDRs": ["20.0.0.1"]})),
            "spec.destinationCIDRs",
            "IPv4 /32 or an IPv6 /128",
        ),
        (
            "destinationCIDRs missing",
            Kind::Route,
            with(&r, json!({"destinationCIDRs": null})),
            "spec.destinationCIDRs",
            "Required value",
        ),
        (
            "destinationCIDR too long",
            Kind::Route,
            with(
                &r,
                json!({"destinationCIDRs": [format!("{}/32", "1".repeat(48))]}),
            ),
            "spec.destinationCIDRs[0]",
            "may not be more than 50",
        ),
        (
            "priority 0",
            Kind::Route,
            with(&r, json!({"priority": 0})),
            "spec.priority",
            "greater than or equal to 1",
        ),
        (
            "priority missing",
            Kind::Route,
            with(&r, json!({"priority": null})),
            "spec.priority",
            "Required value",
        ),
        (
            "protocol ICMP",
            Kind::Route,
            with(&r, json!({"protocols": ["TCP", "ICMP"]})),
            "spec.protocols[1]",
            "should match",
        ),
        (
            "protocol twice",
            Kind::Route,
            with(&r, json!({"protocols": ["UDP", "UDP"]})),
            "spec.protocols",
            "listed once",
        ),
        (
            "no protocols",
            Kind::Route,
            with(&r, json!({"protocols": []})),
            "spec.protocols",
            "at least 1 item",
        ),
        (
            "byteMatch of 3 bytes",
            Kind::Route,
            with(&r, json!({"byteMatches": ["sctp[4:3]=0"]})),
            "spec.byteMatches[0]",
            "should match",
        ),
        (
            "byteMatch of another protocol",
            Kind::Route,
            with(&r, json!({"byteMatches": ["icmp[0:1]=8"]})),
            "spec.byteMatches[0]",
            "should match",
        ),
        (
            "byteMatch with an upper-case mask",
            Kind::Route,
            with(&r, json!({"byteMatches": ["tcp[13:1] & 0xFF = 2"]})),
            "spec.byteMatches[0]",
            "should match",
        ),
        (
            "two backendRefs",
            Kind::Route,
            with(
                &r,
                json!({"backendRefs": [
                    {"group": "meridio-2.nordix.org", "kind": "DistributionGroup", "name": "dg-a"},
                    {"group": "meridio-2.nordix.org", "kind": "DistributionGroup", "name": "dg-b"}
                ]}),
            ),
            "spec.backendRefs",
            "must have at most 1 item",
        ),
        (
            "empty backendRefs",
            Kind::Route,
            with(&r, json!({"backendRefs": []})),
            "spec.backendRefs",
            "at least 1 item",
        ),
        (
            "no parentRefs",
            Kind::Route,
            with(&r, json!({"parentRefs": []})),
            "spec.parentRefs",
            "at least 1 item",
        ),
        (
            "two parentRefs",
            Kind::Route,
            with(
                &r,
                json!({"parentRefs": [{"name": "gw-a"}, {"name": "gw-b"}]}),
            ),
            "spec.parentRefs",
            "must have at most 1 item",
        ),
        (
            "Service backend without port",
            Kind::Route,
            with(&r, json!({"backendRefs": [{"name": "web"}]})),
            "spec.backendRefs[0].port",
            "needs a port",
        ),
        (
            "negative weight",
            Kind::Route,
            with(
                &r,
                json!({"backendRefs": [{"group": "meridio-2.nordix.org", "kind": "DistributionGroup", "name": "dg-a", "weight": -1}]}),
            ),
            "spec.backendRefs[0].weight",
            "greater than or equal to 0",
        ),
        (
            "sourceCIDR not a CIDR",
            Kind::Route,
            with(&r, json!({"sourceCIDRs": ["10.0.0.0/8", "10.0.0.300/32"]})),
            "spec.sourceCIDRs",
            "must be a CIDR",
        ),
        (
            "destination port 65536",
            Kind::Route,
            with(&r, json!({"destinationPorts": ["80", "65536"]})),
            "spec.destinationPorts[1]",
            "0-65535",
        ),
        (
            "source port range upside down",
            Kind::Route,
            with(&r, json!({"sourcePorts": ["2000-1000"]})),
            "spec.sourcePorts[0]",
            "N <= M",
        ),
        (
            "port list in one entry",
            Kind::Route,
            with(&r, json!({"destinationPorts": ["80,443"]})),
            "spec.destinationPorts[0]",
            "should match",
        ),
        (
            "21 port entries",
            Kind::Route,
            with(
                &r,
                json!({"destinationPorts": (1..=21).map(|p| p.to_string()).collect::<Vec<_>>()}),
            ),
            "spec.destinationPorts",
            "must have at most 20 items",
        ),
        // LoadBalancerEndpointSlice.
        (
            "two IPv4 addresses on one endpoint",
            Kind::Slice,
            with(
                &s,
                json!({"endpoints": [endpoint(json!([
                    {"ip": "169.111.100.3", "family": "IPv4"},
                    {"ip": "169.111.100.4", "family": "IPv4"}
                ]))]}),
            ),
            "spec.endpoints[0].addresses[1]",
            "Duplicate value",
        ),
        (
            "endpoint without addresses",
            Kind::Slice,
            with(&s, json!({"endpoints": [endpoint(json!([]))]})),
            "spec.endpoints[0].addresses",
            "at least 1 item",
        ),
        (
            "unknown address family",
            Kind::Slice,
            with(
                &s,
                json!({"endpoints": [endpoint(json!([{"ip": "169.111.100.3", "family": "ipv4"}]))]}),
            ),
            "spec.endpoints[0].addresses[0].family",
            "Unsupported value",
        ),
        (
            "address longer than 45",
            Kind::Slice,
            with(
                &s,
                json!({"endpoints": [endpoint(json!([{"ip": "x".repeat(46), "family": "IPv6"}]))]}),
            ),
            "spec.endpoints[0].addresses[0].ip",
            "may not be more than 45",
        ),
        (
            "empty distributionGroupName",
            Kind::Slice,
            with(&s, json!({"distributionGroupName": ""})),
            "spec.distributionGroupName",
            "at least 1 chars long",
        ),
        (
            "gatewayRef without namespace",
            Kind::Slice,
            with(&s, json!({"gatewayRef": {"name": "gw-a"}})),
            "spec.gatewayRef.namespace",
            "Required value",
        ),
        (
            "gatewayRef missing",
            Kind::Slice,
            with(&s, json!({"gatewayRef": null})),
            "spec.gatewayRef",
            "Required value",
        ),
        (
            "target without uid",
            Kind::Slice,
            with(
                &s,
                json!({"endpoints": [{"target": {"name": "p"}, "addresses": [{"ip": "10.0.0.1", "family": "IPv4"}], "ready": true}]}),
            ),
            "spec.endpoints[0].target.uid",
            "Required value",
        ),
        (
            "endpoint without ready",
            Kind::Slice,
            with(
                &s,
                json!({"endpoints": [{"target": {"name": "p", "uid": "u"}, "addresses": [{"ip": "10.0.0.1", "family": "IPv4"}]}]}),
            ),
            "spec.endpoints[0].ready",
            "Required value",
        ),
    ]
}

/// (what, kind, spec).
fn valid_cases() -> Vec<(&'static str, Kind, Value)> {
    let (r, s) = (route(), slice());
    vec![
        ("empty group (all defaults)", Kind::Group, json!({})),
        (
            "full group",
            Kind::Group,
            json!({
                "selector": {"matchLabels": {"app": "target-a"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]},
                "type": "Maglev",
                "maglev": {"maxEndpoints": 32},
                "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw-a", "namespace": "red"}]
            }),
        ),
        (
            "group with a very large maxEndpoints (no maximum)",
            Kind::Group,
            json!({"maglev": {"maxEndpoints": 100000}, "parentRefs": [{"name": "gw-a"}]}),
        ),
        ("minimal route", Kind::Route, r.clone()),
        (
            "route without backendRefs",
            Kind::Route,
            with(&r, json!({"backendRefs": null})),
        ),
        (
            "SCTP INIT route (Meridio-2's SCTP suite)",
            Kind::Route,
            with(
                &r,
                json!({
                    "destinationCIDRs": ["30.0.0.1/32", "fd00:cafe::1/128"],
                    "protocols": ["SCTP"],
                    "priority": 30,
                    "byteMatches": ["sctp[4:4]=0"]
                }),
            ),
        ),
        (
            "full route",
            Kind::Route,
            json!({
                "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw-a", "namespace": "red", "sectionName": "dummy", "port": 80}],
                "backendRefs": [{"group": "meridio-2.nordix.org", "kind": "DistributionGroup", "name": "dg-a", "namespace": "red", "port": 5000, "weight": 0}],
                "destinationCIDRs": ["20.0.0.1/32", "20.0.0.2/32", "2001:db8::1/128"],
                "sourceCIDRs": ["0.0.0.0/0", "10.0.0.0/8", "::/0"],
                "sourcePorts": ["any", "0-65535"],
                "destinationPorts": ["5000", "5001-5010", "65535"],
                "protocols": ["TCP", "UDP", "SCTP"],
                "priority": 2147483647,
                "byteMatches": ["tcp[13 : 1] & 0x12 = 0x02", "udp[8:2]=0x1234", "sctp[12:1]=1"]
            }),
        ),
        (
            "protocols in Meridio-2's lower case and mixed case",
            Kind::Route,
            with(&r, json!({"protocols": ["tcp", "Udp"]})),
        ),
        (
            "route to a Service backend with port",
            Kind::Route,
            with(&r, json!({"backendRefs": [{"name": "web", "port": 80}]})),
        ),
        ("slice with one IPv4 endpoint", Kind::Slice, s.clone()),
        (
            "slice with a dual-stack endpoint, a not-ready one and one without identifier",
            Kind::Slice,
            with(
                &s,
                json!({"endpoints": [
                    endpoint(json!([
                        {"ip": "169.111.100.3", "family": "IPv4"},
                        {"ip": "fd00:cafe::3", "family": "IPv6"}
                    ])),
                    {"target": {"name": "target-a-1", "uid": "u-1"}, "addresses": [{"ip": "fd00:cafe::4", "family": "IPv6"}], "identifier": 1, "ready": false},
                    {"target": {"name": "target-a-2", "uid": "u-2"}, "addresses": [{"ip": "169.111.100.5", "family": "IPv4"}], "ready": true}
                ]}),
            ),
        ),
        (
            "slice without endpoints",
            Kind::Slice,
            with(&s, json!({"endpoints": null})),
        ),
    ]
}

/// The CRDs as the chart installs them: the body of the template's `if meridio.installCRDs`.
fn chart_crds_yaml() -> String {
    let template = meridio::chart_template().unwrap();
    let lines: Vec<&str> = template.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("{{- if .Values.meridio.installCRDs"))
        .unwrap();
    assert_eq!(lines.last(), Some(&"{{- end }}"));
    lines[start + 1..lines.len() - 1].join("\n")
}

async fn setup() -> (kube::Client, String) {
    let bed = TestBed::shared();
    let installed = bed.install_crd_yaml(&chart_crds_yaml()).await.unwrap();
    assert_eq!(installed.len(), 3);
    let client = bed.admin_client().await.unwrap();
    let namespace = unique_name("meridio");
    ensure_namespace(&client, &namespace).await.unwrap();
    (client, namespace)
}

/// The API server's refusal of `result` (422 naming `field` with `reason`), or what went wrong.
fn check_refusal<T>(
    what: &str,
    result: Result<T, kube::Error>,
    field: &str,
    reason: &str,
) -> Option<String> {
    match result {
        Ok(_) => Some(format!("{what}: accepted")),
        Err(kube::Error::Api(s)) => {
            let msg = s.message.clone();
            println!("{what:45} {} {msg}", s.code);
            (s.code != 422 || !msg.contains(field) || !msg.contains(reason)).then(|| {
                format!(
                    "{what}: expected 422 naming {field} with {reason:?}, got {}: {msg}",
                    s.code
                )
            })
        }
        Err(e) => Some(format!("{what}: {e}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_refuses_each_invalid_object_naming_the_field() {
    let (client, namespace) = setup().await;
    let cases = invalid_cases();
    let mut failures = Vec::new();
    for (i, (what, kind, spec, field, reason)) in cases.iter().enumerate() {
        let name = unique_name(&format!("bad{i}"));
        let result = kind
            .api(client.clone(), &namespace)
            .create(&PostParams::default(), &kind.object(&name, spec.clone()))
            .await;
        failures.extend(check_refusal(what, result, field, reason));
    }
    println!(
        "{} invalid objects, {} not refused as expected",
        cases.len(),
        failures.len()
    );
    assert!(cases.len() >= 30);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immutable_fields_refuse_changes_and_the_rest_may_change() {
    let (client, namespace) = setup().await;
    let pp = PatchParams::default();
    let mut failures = Vec::new();

    let groups = Kind::Group.api(client.clone(), &namespace);
    let dg = unique_name("dg");
    groups
        .create(
            &PostParams::default(),
            &Kind::Group.object(&dg, json!({"maglev": {"maxEndpoints": 32}})),
        )
        .await
        .unwrap();
    let result = groups
        .patch(
            &dg,
            &pp,
            &Patch::Merge(json!({"spec": {"maglev": {"maxEndpoints": 64}}})),
        )
        .await;
    failures.extend(check_refusal(
        "maxEndpoints 32 -> 64",
        result,
        "spec.maglev.maxEndpoints",
        "immutable",
    ));
    groups
        .patch(
            &dg,
            &pp,
            &Patch::Merge(json!({"spec": {"selector": {"matchLabels": {"app": "b"}}, "parentRefs": [{"name": "gw-b"}]}})),
        )
        .await
        .expect("selector and parentRefs may change");

    let slices = Kind::Slice.api(client.clone(), &namespace);
    let sl = unique_name("slice");
    slices
        .create(&PostParams::default(), &Kind::Slice.object(&sl, slice()))
        .await
        .unwrap();
    let result = slices
        .patch(
            &sl,
            &pp,
            &Patch::Merge(json!({"spec": {"distributionGroupName": "dg-b"}})),
        )
        .await;
    failures.extend(check_refusal(
        "distributionGroupName dg-a -> dg-b",
        result,
        "spec.distributionGroupName",
        "immutable",
    ));
    slices
        .patch(
            &sl,
            &pp,
            &Patch::Merge(json!({"spec": {"endpoints": [endpoint(json!([{"ip": "fd00::9", "family": "IPv6"}]))]}})),
        )
        .await
        .expect("endpoints may change");
    let typed: Api<LoadBalancerEndpointSlice> = Api::namespaced(client.clone(), &namespace);
    let got = typed.get(&sl).await.unwrap();
    assert_eq!(got.spec.distribution_group_name, "dg-a");
    assert_eq!(
        got.spec.endpoints[0].address(IpFamily::IPv6),
        Some("fd00::9")
    );
    let typed: Api<DistributionGroup> = Api::namespaced(client, &namespace);
    assert_eq!(typed.get(&dg).await.unwrap().max_endpoints(), 32);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_objects_are_accepted_with_defaults() {
    let (client, namespace) = setup().await;
    for (what, kind, spec) in valid_cases() {
        let name = unique_name("good");
        let created = kind
            .api(client.clone(), &namespace)
            .create(&PostParams::default(), &kind.object(&name, spec.clone()))
            .await
            .unwrap_or_else(|e| panic!("{what} refused: {e}"));
        // What the API server stored parses as the Rust type (the schema and types agree).
        let data = serde_json::to_value(&created).unwrap();
        match kind {
            Kind::Group => {
                let g: DistributionGroup = serde_json::from_value(data).unwrap();
                assert_eq!(g.spec.type_, meridio::DistributionGroupType::Maglev);
                if spec.get("maglev").is_none() {
                    assert_eq!(g.max_endpoints(), meridio::DEFAULT_MAX_ENDPOINTS, "{what}");
                    assert_eq!(created.data["spec"]["type"], "Maglev", "{what}: defaulted");
                }
                for p in &g.spec.parent_refs {
                    assert_eq!(p.group.as_deref(), Some("gateway.networking.k8s.io"));
                    assert_eq!(p.kind.as_deref(), Some("Gateway"), "{what}: defaulted");
                }
            }
            Kind::Route => {
                let r: L34Route = serde_json::from_value(data).unwrap();
                let p = &r.spec.parent_refs[0];
                assert_eq!(
                    (p.group.as_deref(), p.kind.as_deref()),
                    (Some("gateway.networking.k8s.io"), Some("Gateway")),
                    "{what}: parentRef defaults"
                );
                for b in &r.spec.backend_refs {
                    assert!(b.group.is_some() && b.kind.is_some(), "{what}: {b:?}");
                    if spec["backendRefs"][0].get("weight").is_none() {
                        assert_eq!(b.weight, Some(1), "{what}: weight defaults to 1");
                    }
                }
                if spec["byteMatches"] == json!(["sctp[4:4]=0"]) {
                    assert_eq!(r.spec.protocols, [TransportProtocol::Sctp]);
                    assert_eq!(r.spec.priority, 30);
                }
            }
            Kind::Slice => {
                let s: LoadBalancerEndpointSlice = serde_json::from_value(data).unwrap();
                assert_eq!(s.spec.distribution_group_name, "dg-a");
                if let Some(e) = s.spec.endpoints.first()
                    && e.addresses.len() == 2
                {
                    assert_eq!(e.address(IpFamily::IPv4), Some("169.111.100.3"));
                    assert_eq!(e.address(IpFamily::IPv6), Some("fd00:cafe::3"));
                    assert_eq!(e.active_slot(), Some(0));
                }
            }
        }
        println!("accepted {what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_are_listed_by_group_and_gateway_field_selectors() {
    let (client, namespace) = setup().await;
    let api: Api<LoadBalancerEndpointSlice> = Api::namespaced(client.clone(), &namespace);
    let dynamic = Kind::Slice.api(client, &namespace);
    for (dg, gw) in [("dg-a", "gw-a"), ("dg-a", "gw-b"), ("dg-b", "gw-a")] {
        let spec = with(
            &slice(),
            json!({"distributionGroupName": dg, "gatewayRef": {"name": gw, "namespace": "red"}}),
        );
        dynamic
            .create(
                &PostParams::default(),
                &Kind::Slice.object(&unique_name(&format!("{dg}-{gw}")), spec),
            )
            .await
            .unwrap();
    }
    let count = |selector: &'static str| {
        let api = api.clone();
        async move {
            let list = api
                .list(&ListParams::default().fields(selector))
                .await
                .unwrap_or_else(|e| panic!("{selector}: {e}"));
            list.items
                .iter()
                .map(|s| {
                    (
                        s.spec.distribution_group_name.clone(),
                        s.spec.gateway_ref.name.clone(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        count("spec.distributionGroupName=dg-b").await,
        [("dg-b".into(), "gw-a".into())]
    );
    let mut a = count("spec.distributionGroupName=dg-a").await;
    a.sort();
    assert_eq!(
        a,
        [
            ("dg-a".into(), "gw-a".into()),
            ("dg-a".into(), "gw-b".into())
        ]
    );
    assert_eq!(
        count("spec.distributionGroupName=dg-a,spec.gatewayRef.name=gw-b").await,
        [("dg-a".into(), "gw-b".into())]
    );
    // A field that is not selectable is refused, so the two above are really served.
    let e = api
        .list(&ListParams::default().fields("spec.gatewayRef.namespace=red"))
        .await
        .unwrap_err();
    println!("non-selectable field: {e}");
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 400), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_listings_show_the_printer_columns_and_status_is_a_subresource() {
    let (client, namespace) = setup().await;
    let dg = unique_name("cols");
    Kind::Group
        .api(client.clone(), &namespace)
        .create(&PostParams::default(), &Kind::Group.object(&dg, json!({})))
        .await
        .unwrap();
    let sl = unique_name("cols");
    Kind::Slice
        .api(client.clone(), &namespace)
        .create(&PostParams::default(), &Kind::Slice.object(&sl, slice()))
        .await
        .unwrap();
    for (plural, name, expected) in [
        ("distributiongroups", &dg, vec!["Name", "Type", "Age"]),
        (
            "loadbalancerendpointslices",
            &sl,
            vec!["Name", "Distribution-Group", "Gateway", "Age"],
        ),
    ] {
        let req = http::Request::get(format!(
            "/apis/{}/{}/namespaces/{namespace}/{plural}",
            meridio::GROUP,
            meridio::VERSION
        ))
        .header("Accept", "application/json;as=Table;g=meta.k8s.io;v=v1")
        .body(Vec::new())
        .unwrap();
        let table: Value = client.request(req).await.unwrap();
        let columns: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(columns, expected, "{plural}");
        let row = table["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["cells"][0] == name.as_str())
            .unwrap_or_else(|| panic!("{name} not in {table}"));
        println!("{plural}: {columns:?} {}", row["cells"]);
        if plural == "distributiongroups" {
            assert_eq!(row["cells"][1], "Maglev");
        } else {
            assert_eq!(row["cells"][1], "dg-a");
            assert_eq!(row["cells"][2], "gw-a");
        }
    }

    // Status goes through its subresource: a spec write does not change it, a status write does.
    let api: Api<DistributionGroup> = Api::namespaced(client, &namespace);
    let status = json!({"status": {"conditions": [{
        "type": meridio::distribution_group::condition::CAPACITY_EXCEEDED,
        "status": "True",
        "reason": meridio::distribution_group::condition::reason::MAGLEV_CAPACITY_EXCEEDED,
        "message": "5/37 pods excluded (32 capacity)",
        "lastTransitionTime": "2026-07-01T10:00:00Z"
    }]}});
    api.patch(&dg, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert!(api.get(&dg).await.unwrap().status.is_none());
    api.patch_status(&dg, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let got = api.get(&dg).await.unwrap();
    let c = &got.status.unwrap().conditions[0];
    assert_eq!(c.reason, "MaglevCapacityExceeded");
}
