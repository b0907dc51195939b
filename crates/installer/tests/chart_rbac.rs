//! The chart ships exactly the RBAC that parts 1-4 proved (deploy/rbac/*.yaml, which the
//! controller, node-agent and doctor tests bind and exercise): same roles, same rules, with
//! the Roles moved to the release namespace and each bound to its component's ServiceAccount.

use std::collections::BTreeMap;
use std::path::Path;

use rivora_installer::chart::Chart;
use rivora_installer::render::{ReleaseInfo, render, split_documents};
use serde_json::{Value, json};

fn shipped() -> BTreeMap<(String, String), Value> {
    let mut out = BTreeMap::new();
    for file in ["rivorad.yaml", "rivora-controller.yaml"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/rbac")
            .join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        for d in split_documents(file, &text).unwrap() {
            out.insert(
                (d.kind().to_string(), d.name().to_string()),
                d.object["rules"].clone(),
            );
        }
    }
    out
}

#[test]
fn chart_rbac_is_the_proven_rbac() {
    let chart = Chart::embedded();
    let release = ReleaseInfo {
        name: "rivora".into(),
        namespace: "lb".into(),
        revision: 1,
        is_install: true,
    };
    let m = render(&chart, &chart.default_values, &release).unwrap();
    let mut rendered = BTreeMap::new();
    let mut bindings = BTreeMap::new();
    for d in &m.objects {
        match d.kind() {
            "ClusterRole" | "Role" => {
                if d.kind() == "Role" {
                    assert_eq!(d.namespace(), "lb", "{}", d.describe());
                }
                rendered.insert(
                    (d.kind().to_string(), d.name().to_string()),
                    d.object["rules"].clone(),
                );
            }
            "ClusterRoleBinding" | "RoleBinding" => {
                bindings.insert(
                    d.object["roleRef"]["name"].as_str().unwrap().to_string() + " " + d.kind(),
                    d.object["subjects"].clone(),
                );
            }
            _ => {}
        }
    }
    assert_eq!(rendered, shipped());
    assert_eq!(bindings.len(), 4);
    for (role, subjects) in bindings {
        let sa = if role.starts_with("rivora-controller") {
            "rivora-controller"
        } else {
            "rivorad"
        };
        assert_eq!(
            subjects,
            json!([{"kind": "ServiceAccount", "name": sa, "namespace": "lb"}]),
            "{role}"
        );
    }
}
