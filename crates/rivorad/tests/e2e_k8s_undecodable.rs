//! Issue 40: one object a watch cannot decode never stalls the node agent. For every custom
//! kind the node agent watches (Rivora's ServicePolicy and BGPPeer, Gateway API's GatewayClass,
//! Gateway, TCPRoute, UDPRoute and ReferenceGrant, Meridio-2's DistributionGroup, L34Route and
//! LoadBalancerEndpointSlice), the real API server holds one object the Rust type refuses,
//! written as an older or looser schema admitted it (the CRD is loosened, the object created,
//! the shipped CRD put back: the API server keeps serving what it stored). The real
//! `rivorad --kubernetes --announce bgp --gateway ...` (every watch on) then:
//! - programs a Service beside them;
//! - names each object once in its log, in `rivoractl status` and in its RivoraNode
//!   (`undecodable`, `undecodableTotal`), and records one Warning Event on each;
//! - records a Warning Event on a Service it cannot program (an endpoint that is another
//!   Service's VIP), and on one whose VIP the datapath refuses alone (more
//!   `loadBalancerSourceRanges` than one VIP may hold), while the other Services' changes
//!   still reach the datapath;
//! - forgets an undecodable object once it is deleted.
//!
//! Core kinds (Service, EndpointSlice, Node, Namespace, Secret) are left out: the API server
//! validates them against the same schema k8s-openapi decodes, so no such object can exist.
//! Needs root and the test dependencies (scripts/build-testdeps.sh).

mod k8s_common;

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use rivora_k8s_api::RivoraNode;
use rivora_kube_testbed::GatewayChannel;
use rivora_lab::cluster::Cluster;
use serde_json::json;

use k8s_common::*;

/// One custom kind the node agent watches.
struct Custom {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
}

const CUSTOM: &[Custom] = &[
    Custom {
        group: "rivora.dev",
        version: "v1alpha1",
        kind: "ServicePolicy",
        plural: "servicepolicies",
        namespaced: true,
    },
    Custom {
        group: "rivora.dev",
        version: "v1alpha1",
        kind: "BGPPeer",
        plural: "bgppeers",
        namespaced: false,
    },
    Custom {
        group: "gateway.networking.k8s.io",
        version: "v1",
        kind: "GatewayClass",
        plural: "gatewayclasses",
        namespaced: false,
    },
    Custom {
        group: "gateway.networking.k8s.io",
        version: "v1",
        kind: "Gateway",
        plural: "gateways",
        namespaced: true,
    },
    Custom {
        group: "gateway.networking.k8s.io",
        version: "v1",
        kind: "TCPRoute",
        plural: "tcproutes",
        namespaced: true,
    },
    Custom {
        group: "gateway.networking.k8s.io",
        version: "v1",
        kind: "UDPRoute",
        plural: "udproutes",
        namespaced: true,
    },
    Custom {
        group: "gateway.networking.k8s.io",
        version: "v1",
        kind: "ReferenceGrant",
        plural: "referencegrants",
        namespaced: true,
    },
    Custom {
        group: "meridio-2.nordix.org",
        version: "v1alpha1",
        kind: "DistributionGroup",
        plural: "distributiongroups",
        namespaced: true,
    },
    Custom {
        group: "meridio-2.nordix.org",
        version: "v1alpha1",
        kind: "L34Route",
        plural: "l34routes",
        namespaced: true,
    },
    Custom {
        group: "meridio-2.nordix.org",
        version: "v1alpha1",
        kind: "LoadBalancerEndpointSlice",
        plural: "loadbalancerendpointslices",
        namespaced: true,
    },
];

impl Custom {
    fn api(&self, client: &Client, ns: &str) -> Api<DynamicObject> {
        let ar = ApiResource {
            group: self.group.into(),
            version: self.version.into(),
            api_version: format!("{}/{}", self.group, self.version),
            kind: self.kind.into(),
            plural: self.plural.into(),
        };
        if self.namespaced {
            Api::namespaced_with(client.clone(), ns, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        }
    }

    fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }
}

/// Writes `name` of `c` with a `spec` that is not an object (no Rust type decodes it): the CRD
/// loosened to admit anything, the object created, the CRD as it was put back.
async fn plant(admin: &Client, c: &Custom, ns: &str, name: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let original = crds.get(&c.crd_name()).await.unwrap();
    let mut loose = original.clone();
    for v in &mut loose.spec.versions {
        v.schema = Some(
            serde_json::from_value(json!({"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": true,
            }}))
            .unwrap(),
        );
        v.subresources = None;
        // Field paths the loose schema no longer names.
        v.selectable_fields = None;
        v.additional_printer_columns = None;
    }
    loose.metadata.managed_fields = None;
    crds.replace(&c.crd_name(), &PostParams::default(), &loose)
        .await
        .unwrap_or_else(|e| panic!("loosening {}: {e}", c.crd_name()));
    let mut meta = json!({"name": name});
    if c.namespaced {
        meta["namespace"] = json!(ns);
    }
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/{}", c.group, c.version), "kind": c.kind,
        "metadata": meta, "spec": "written by an older tool",
    }))
    .unwrap();
    let api = c.api(admin, ns);
    // The API server takes the new schema a moment after the CRD update.
    wait_for(&format!("{} {name} created", c.kind), WAIT, || async {
        api.create(&PostParams::default(), &obj)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
    let mut back = crds.get(&c.crd_name()).await.unwrap();
    back.spec = original.spec.clone();
    back.metadata.managed_fields = None;
    crds.replace(&c.crd_name(), &PostParams::default(), &back)
        .await
        .unwrap_or_else(|e| panic!("restoring {}: {e}", c.crd_name()));
    // Served back as stored, under the shipped schema.
    wait_for(&format!("{} {name} read back", c.kind), WAIT, || async {
        let crd = crds.get(&c.crd_name()).await.map_err(|e| e.to_string())?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        let got = api.get(name).await.map_err(|e| e.to_string())?;
        if established && got.data["spec"] == json!("written by an older tool") {
            Ok(())
        } else {
            Err(format!(
                "established {established}, spec {}",
                got.data["spec"]
            ))
        }
    })
    .await;
}

/// The Warning Events recorded by rivorad, by (regarding kind, name, reason): how many.
async fn rivorad_warnings(admin: &Client) -> BTreeMap<(String, String, String), usize> {
    let events: Api<Event> = Api::all(admin.clone());
    let mut out = BTreeMap::new();
    for e in events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| {
            e.reporting_controller.as_deref() == Some(rivora_k8s_api::rivora_node::FIELD_MANAGER)
                && e.type_.as_deref() == Some("Warning")
        })
    {
        let r = e.regarding.clone().unwrap_or_default();
        *out.entry((
            r.kind.unwrap_or_default(),
            r.name.unwrap_or_default(),
            e.reason.clone().unwrap_or_default(),
        ))
        .or_default() += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_that_do_not_decode_are_left_out_named_and_warned_about_alone() {
    let t = K8sTest::new("undec").await;
    t.bed
        .install_gateway_api(GatewayChannel::Standard)
        .await
        .expect("installing Gateway API's standard CRDs");
    for crd in rivora_k8s_api::meridio::crds() {
        t.bed
            .install_crd_yaml(&serde_json::to_string(&crd).unwrap())
            .await
            .unwrap();
    }
    let tag = t.ns.clone();
    let bad_name = |c: &Custom| format!("odd-{}-{}", c.kind.to_lowercase(), tag);
    for c in CUSTOM {
        plant(&t.admin, c, &t.ns, &bad_name(c)).await;
    }

    // Two Services: one to program beside the bad objects, one this node cannot program (its
    // endpoint is the first one's VIP).
    let lab = Cluster::build("kud", &[1]).expect("building the cluster lab");
    let mut agent = t.agent(&lab, 1).await;
    let node = agent.name.clone();
    let vip = "10.99.40.1";
    t.service("web", vip, http_port(), json!({})).await;
    let pod: IpAddr = "10.202.0.1".parse().unwrap();
    t.slice("web", &ready(&[pod], &node), http_slice_port())
        .await;
    t.service("loop", "10.99.40.2", http_port(), json!({}))
        .await;
    t.slice(
        "loop",
        &ready(&[vip.parse().unwrap()], &node),
        http_slice_port(),
    )
    .await;
    // More source ranges than a VIP holds (256): translated, then refused by the datapath
    // alone (before issue 40's fix it failed the whole apply: nothing was programmed).
    let ranges: Vec<String> = (0..257)
        .map(|i| format!("10.98.{}.{}/32", i / 200, i % 200))
        .collect();
    t.service(
        "ranges",
        "10.99.40.3",
        http_port(),
        json!({"loadBalancerSourceRanges": ranges}),
    )
    .await;
    t.slice("ranges", &ready(&[pod], &node), http_slice_port())
        .await;
    let gateway = format!("{}/gw", t.ns);
    agent.start_in(
        &lab.node(1).unwrap().ns,
        &[
            "--announce",
            "bgp",
            "--namespace",
            &t.sa_ns,
            "--gateway",
            &gateway,
        ],
    );

    // The Service beside them is programmed.
    wait_for("web programmed beside the bad objects", WAIT, || async {
        let vips = agent.vips().await?;
        match vips.iter().find(|v| v.address == vip) {
            Some(v) if v.backends.iter().any(|b| b.address == pod.to_string()) => Ok(()),
            _ => Err(format!(
                "VIPs {:?}",
                vips.iter().map(|v| &v.address).collect::<Vec<_>>()
            )),
        }
    })
    .await;

    // Each bad object is named in the status, once per kind.
    let watches = wait_for("every bad object named in the status", WAIT, || async {
        let k = agent.kubernetes().await?;
        let named: Vec<String> = k
            .watches
            .iter()
            .flat_map(|w| w.undecodable.iter().map(move |u| format!("{} {u}", w.kind)))
            .collect();
        if named.len() == CUSTOM.len() {
            Ok(k.watches)
        } else {
            Err(format!("{named:#?}"))
        }
    })
    .await;
    for c in CUSTOM {
        let w = watches
            .iter()
            .find(|w| w.kind == c.kind)
            .unwrap_or_else(|| panic!("no {} watch", c.kind));
        assert_eq!(w.undecodable.len(), 1, "{}: {:?}", c.kind, w.undecodable);
        assert!(
            w.undecodable[0].contains(&bad_name(c)),
            "{}: {:?}",
            c.kind,
            w.undecodable
        );
        assert!(w.last_error.is_none(), "{}: {:?}", c.kind, w.last_error);
    }

    // The RivoraNode names them too.
    let nodes: Api<RivoraNode> = Api::all(t.admin.clone());
    let report = wait_for("the RivoraNode lists them", WAIT, || async {
        let s = nodes
            .get(&node)
            .await
            .map_err(|e| e.to_string())?
            .status
            .ok_or("no status yet")?;
        if s.undecodable_total == CUSTOM.len() as i64 {
            Ok(s)
        } else {
            Err(format!("{} {:?}", s.undecodable_total, s.undecodable))
        }
    })
    .await;
    for c in CUSTOM {
        assert!(
            report
                .undecodable
                .iter()
                .any(|u| u.starts_with(&format!("{} ", c.kind)) && u.contains(&bad_name(c))),
            "{}: {:?}",
            c.kind,
            report.undecodable
        );
    }

    // One Warning Event on each bad object, and one on the Service this node cannot program.
    let events = wait_for("the Warning Events", WAIT, || async {
        let w = rivorad_warnings(&t.admin).await;
        let missing: Vec<String> = CUSTOM
            .iter()
            .map(|c| (c.kind.to_string(), bad_name(c), "Undecodable".to_string()))
            .chain([
                (
                    "Service".to_string(),
                    "loop".to_string(),
                    "EndpointIsVIP".to_string(),
                ),
                (
                    "Service".to_string(),
                    "ranges".to_string(),
                    "InvalidVIP".to_string(),
                ),
            ])
            .filter(|k| !w.contains_key(k))
            .map(|k| format!("{k:?}"))
            .collect();
        if missing.is_empty() {
            Ok(w)
        } else {
            Err(format!("missing {missing:?}; seen {w:?}"))
        }
    })
    .await;
    for ((kind, name, reason), n) in &events {
        if name.ends_with(&tag) || name == "loop" || name == "ranges" {
            assert_eq!(*n, 1, "{kind} {name} {reason}: {n} Events");
        }
    }
    let log = agent.log();
    for c in CUSTOM {
        let lines = log
            .lines()
            .filter(|l| l.contains("cannot decode this object") && l.contains(&bad_name(c)))
            .count();
        assert_eq!(lines, 1, "{}: {lines} log lines\n{log}", c.kind);
    }

    // The refused VIP is named with its reason in rivoractl status's view of the Service,
    // counted as failing, and a change of another Service still reaches the datapath.
    let k = agent.kubernetes().await.unwrap();
    assert_eq!(k.services.get("failing"), Some(&2), "{:?}", k.services);
    let second: IpAddr = "10.202.0.2".parse().unwrap();
    t.slice("web", &ready(&[pod, second], &node), http_slice_port())
        .await;
    wait_for(
        "web's new endpoint programmed beside the refused VIP",
        WAIT,
        || async {
            let vips = agent.vips().await?;
            let web = vips.iter().find(|v| v.address == vip).ok_or("no web VIP")?;
            if web.backends.iter().any(|b| b.address == second.to_string()) {
                Ok(())
            } else {
                Err(format!("{:?}", web.backends))
            }
        },
    )
    .await;
    assert!(
        !agent
            .vips()
            .await
            .unwrap()
            .iter()
            .any(|v| v.address == "10.99.40.3"),
        "the refused VIP is not programmed"
    );
    let refused_lines = agent
        .log()
        .lines()
        .filter(|l| l.contains("refused alone") && l.contains("/ranges/"))
        .count();
    assert_eq!(
        refused_lines,
        1,
        "one log line for the refusal\n{}",
        agent.log()
    );

    // A deleted bad object leaves the lists.
    let peer = &CUSTOM[1];
    peer.api(&t.admin, &t.ns)
        .delete(&bad_name(peer), &Default::default())
        .await
        .unwrap();
    wait_for("the deleted BGPPeer forgotten", WAIT, || async {
        let k = agent.kubernetes().await?;
        let w = k
            .watches
            .iter()
            .find(|w| w.kind == "BGPPeer")
            .ok_or("no BGPPeer watch")?;
        let s = nodes
            .get(&node)
            .await
            .map_err(|e| e.to_string())?
            .status
            .ok_or("no status")?;
        if w.undecodable.is_empty() && s.undecodable_total == CUSTOM.len() as i64 - 1 {
            Ok(())
        } else {
            Err(format!(
                "{:?}; report {}",
                w.undecodable, s.undecodable_total
            ))
        }
    })
    .await;
    // Everything else was served throughout.
    assert!(agent.vips().await.unwrap().iter().any(|v| v.address == vip));
}
