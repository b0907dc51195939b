//! Meridio-2's LoadBalancer resource model (API group `meridio-2.nordix.org`, version
//! `v1alpha1`): [`DistributionGroup`], [`L34Route`] and [`LoadBalancerEndpointSlice`], with the
//! names, labels and defaults Meridio-2's controllers use.
//!
//! Why Rivora has them: Rivora can take the place of Meridio-2's stateless load balancer, which
//! reads these three kinds (plus Gateway API Gateways). The types are written from Meridio-2's
//! documented API (`shared/research/meridio2.md` §1), with the same JSON names, defaults and
//! API-server validation, so Rivora reads and writes exactly what Meridio-2's controllers do.
//! Where this crate's CRDs check more than upstream's, the item's documentation says so.
//!
//! Their CRDs are not in the chart's `crds/` directory (Helm always installs that, and a cluster
//! running Meridio-2 already has them, owned by Meridio-2's installation): they are the template
//! [`CHART_TEMPLATE`], installed only with the chart value `meridio.installCRDs=true`.
//! Regenerate it with `cargo run -p rivora-k8s-api --bin rivora-crdgen -- deploy/chart/crds`;
//! `tests/crd_yaml.rs` fails when it is stale.

pub mod distribution_group;
pub mod endpoint_slice;
pub mod l34_route;

use anyhow::bail;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use distribution_group::{
    DEFAULT_MAX_ENDPOINTS, DistributionGroup, DistributionGroupParentRef, DistributionGroupSpec,
    DistributionGroupStatus, DistributionGroupType, MaglevConfig,
};
pub use endpoint_slice::{
    EndpointAddress, EndpointTarget, GatewayRef, IpFamily, LoadBalancerEndpoint,
    LoadBalancerEndpointSlice, LoadBalancerEndpointSliceSpec,
};
pub use l34_route::{
    L34BackendRef, L34ParentReference, L34Route, L34RouteSpec, L34RouteStatus, TransportProtocol,
};

/// The API group of Meridio-2's resources.
pub const GROUP: &str = "meridio-2.nordix.org";
/// The version of these types.
pub const VERSION: &str = "v1alpha1";
/// `spec.controllerName` of the GatewayClass whose Gateways Meridio-2 serves.
pub const GATEWAY_CONTROLLER_NAME: &str = "meridio-2.nordix.org/gateway-controller";
/// The label naming a slice's DistributionGroup. On LoadBalancerEndpointSlices it is set but
/// informational (Meridio-2: not for controller logic; use `spec.distributionGroupName`); on
/// the older core EndpointSlices it was how a load balancer found a group's slices.
pub const DISTRIBUTION_GROUP_LABEL: &str = "meridio-2.nordix.org/distribution-group";
/// The prefix of `endpoint.zone` in the older core-EndpointSlice form, `maglev:<N>` with `N`
/// the endpoint's Maglev slot ([`parse_maglev_zone`]).
pub const MAGLEV_ZONE_PREFIX: &str = "maglev:";
/// The standard label saying which controller manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// [`MANAGED_BY_LABEL`]'s value on the slices Meridio-2's DistributionGroup controller writes.
pub const MANAGED_BY: &str = "distributiongroup-controller.meridio-2.nordix.org";

/// Where the CRDs go in the chart (relative to `deploy/chart`).
pub const CHART_TEMPLATE: &str = "templates/meridio-crds.yaml";
/// The chart value that installs them (default false).
pub const CHART_VALUE: &str = "meridio.installCRDs";

/// Meridio-2's three CRDs, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        DistributionGroup::crd(),
        L34Route::crd(),
        LoadBalancerEndpointSlice::crd(),
    ]
}

/// The slot in an older core EndpointSlice's `endpoint.zone` (`maglev:<N>`, `N` a
/// non-negative int32); None for any other zone.
pub fn parse_maglev_zone(zone: &str) -> Option<i32> {
    let n = zone.strip_prefix(MAGLEV_ZONE_PREFIX)?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// The chart template [`CHART_TEMPLATE`]: [`crds`] inside `if .Values.meridio.installCRDs`, each
/// annotated `helm.sh/resource-policy: keep`.
///
/// Why keep: deleting a CRD deletes every object of its kind, so `helm uninstall` (or turning
/// the value off) must not take the cluster's DistributionGroups and routes with it.
pub fn chart_template() -> anyhow::Result<String> {
    let mut out = String::from(
        "{{- /* Meridio-2's CRDs (DistributionGroup, L34Route, LoadBalancerEndpointSlice) for \
         clusters without Meridio-2,\n     \
         when meridio.installCRDs is true (default false: a cluster running Meridio-2 has them, \
         owned by its installation).\n     \
         A template, not crds/, because Helm always installs crds/. Helm keeps them on uninstall \
         (resource-policy keep).\n     \
         Generated from crates/k8s-api/src/meridio by \
         `cargo run -p rivora-k8s-api --bin rivora-crdgen -- deploy/chart/crds`.\n     \
         Do not edit: change the Rust types and regenerate. */ -}}\n\
         {{- if .Values.meridio.installCRDs }}\n",
    );
    for mut crd in crds() {
        crd.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("helm.sh/resource-policy".into(), "keep".into());
        let body = serde_norway::to_string(&crd)?;
        if body.contains("{{") || body.contains("}}") {
            bail!(
                "{}: the YAML holds `{{{{` or `}}}}`, which the template engine would read as an action",
                crd.spec.names.kind
            );
        }
        out.push_str("---\n");
        out.push_str(&body);
    }
    out.push_str("{{- end }}\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_scopes_and_columns_are_meridios() {
        let crds = crds();
        let got: Vec<(&str, &str, &str)> = crds
            .iter()
            .map(|c| {
                (
                    c.spec.names.kind.as_str(),
                    c.spec.names.plural.as_str(),
                    c.spec.scope.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("DistributionGroup", "distributiongroups", "Namespaced"),
                ("L34Route", "l34routes", "Namespaced"),
                (
                    "LoadBalancerEndpointSlice",
                    "loadbalancerendpointslices",
                    "Namespaced"
                ),
            ]
        );
        for c in &crds {
            assert_eq!(c.spec.group, GROUP);
            assert_eq!(c.spec.versions.len(), 1);
            assert_eq!(c.spec.versions[0].name, VERSION);
        }
        let [dg, route, slice] = &crds[..] else {
            unreachable!()
        };
        assert_eq!(dg.spec.names.short_names, Some(vec!["distg".into()]));
        assert_eq!(slice.spec.names.short_names, Some(vec!["lbeslice".into()]));
        assert_eq!(route.spec.names.short_names, None);
        for c in [dg, slice] {
            assert_eq!(
                c.spec.names.categories,
                Some(vec!["meridio".into(), "all".into()])
            );
        }
        let columns = |c: &CustomResourceDefinition| -> Vec<(String, String)> {
            c.spec.versions[0]
                .additional_printer_columns
                .iter()
                .flatten()
                .map(|p| (p.name.clone(), p.json_path.clone()))
                .collect()
        };
        assert_eq!(
            columns(dg),
            [
                ("Type".into(), ".spec.type".into()),
                ("Age".into(), ".metadata.creationTimestamp".into())
            ]
        );
        assert_eq!(
            columns(slice),
            [
                (
                    "Distribution-Group".into(),
                    ".spec.distributionGroupName".into()
                ),
                ("Gateway".into(), ".spec.gatewayRef.name".into()),
                ("Age".into(), ".metadata.creationTimestamp".into())
            ]
        );
        assert!(columns(route).is_empty());
        let selectable: Vec<String> = slice.spec.versions[0]
            .selectable_fields
            .iter()
            .flatten()
            .map(|f| f.json_path.clone())
            .collect();
        assert_eq!(
            selectable,
            [".spec.distributionGroupName", ".spec.gatewayRef.name"]
        );
        // A status subresource for the two kinds with a status; the slice has none.
        let has_status = |c: &CustomResourceDefinition| {
            c.spec.versions[0]
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        };
        assert!(has_status(dg) && has_status(route) && !has_status(slice));
    }

    #[test]
    fn the_kube_attributes_match_the_constants() {
        use kube::Resource;
        assert_eq!(DistributionGroup::group(&()), GROUP);
        assert_eq!(L34Route::group(&()), GROUP);
        assert_eq!(LoadBalancerEndpointSlice::group(&()), GROUP);
        assert_eq!(LoadBalancerEndpointSlice::version(&()), VERSION);
        assert_eq!(
            L34Route::api_version(&()),
            format!("{GROUP}/{VERSION}").as_str()
        );
    }

    #[test]
    fn schema_carries_defaults_and_rules() {
        let dg = serde_json::to_value(DistributionGroup::crd()).unwrap();
        let spec = &dg["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let props = &spec["properties"];
        assert_eq!(props["type"]["default"], json!("Maglev"));
        assert_eq!(props["type"]["enum"], json!(["Maglev"]));
        assert_eq!(
            props["maglev"]["required"],
            json!(["maxEndpoints"]),
            "{spec}"
        );
        assert_eq!(props["parentRefs"]["maxItems"], json!(1));
        let parent = &props["parentRefs"]["items"]["properties"];
        assert_eq!(
            parent["group"]["default"],
            json!("gateway.networking.k8s.io")
        );
        assert_eq!(parent["kind"]["default"], json!("Gateway"));
        let route = serde_json::to_value(L34Route::crd()).unwrap();
        let rspec =
            &route["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let mut required: Vec<&str> = rspec["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        required.sort();
        assert_eq!(
            required,
            ["destinationCIDRs", "parentRefs", "priority", "protocols"]
        );
        assert_eq!(
            rspec["properties"]["protocols"]["items"]["pattern"],
            json!("^([Tt][Cc][Pp]|[Uu][Dd][Pp]|[Ss][Cc][Tt][Pp])$"),
            "any case, as Meridio-2's CRD (no enum) and its lower-casing load balancer"
        );
        let backend = &rspec["properties"]["backendRefs"]["items"]["properties"];
        assert_eq!(backend["weight"]["default"], json!(1));
        assert_eq!(backend["kind"]["default"], json!("Service"));
        assert_eq!(backend["group"]["default"], json!(""));
    }

    #[test]
    fn legacy_zones_name_the_slot() {
        assert_eq!(parse_maglev_zone("maglev:0"), Some(0));
        assert_eq!(parse_maglev_zone("maglev:101"), Some(101));
        for bad in [
            "",
            "maglev:",
            "maglev:-1",
            "maglev:+1",
            "maglev: 1",
            "maglev:1a",
            "Maglev:1",
            "zone-a",
            "maglev:99999999999",
        ] {
            assert_eq!(parse_maglev_zone(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_chart_template_is_gated_and_keeps_the_crds() {
        let t = chart_template().unwrap();
        let lines: Vec<&str> = t.lines().collect();
        let if_at = lines
            .iter()
            .position(|l| *l == "{{- if .Values.meridio.installCRDs }}")
            .expect("gated by meridio.installCRDs");
        assert_eq!(*lines.last().unwrap(), "{{- end }}");
        // Every line before the `if` is the template comment; none between holds an action.
        assert!(lines[..if_at].iter().all(|l| !l.contains("apiVersion")));
        let body = lines[if_at + 1..lines.len() - 1].join("\n");
        assert!(!body.contains("{{"));
        let docs: Vec<serde_json::Value> = body
            .split("\n---\n")
            .map(|d| serde_norway::from_str(d.trim_start_matches("---\n")).unwrap())
            .collect();
        assert_eq!(docs.len(), 3);
        for (doc, crd) in docs.iter().zip(crds()) {
            assert_eq!(doc["metadata"]["name"], json!(crd.metadata.name));
            assert_eq!(
                doc["metadata"]["annotations"]["helm.sh/resource-policy"],
                "keep"
            );
            assert_eq!(
                doc["spec"],
                serde_json::to_value(&crd).unwrap()["spec"],
                "the template holds the CRD as generated"
            );
        }
        assert_eq!(CHART_VALUE, "meridio.installCRDs");
    }
}
