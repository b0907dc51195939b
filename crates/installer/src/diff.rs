//! What an upgrade changes, object by object, before it changes it: objects added, removed
//! (pruned) and changed, each change as a line diff of the object's YAML.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::render::Document;

/// One object's fate in an upgrade.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Rendered now, not before: created.
    Added(String),
    /// Rendered before, not now: deleted (never a CRD or a custom resource: neither is in a
    /// release's manifest).
    Removed(String),
    /// Rendered both times, differently: the lines (`-`/`+`/` `).
    Changed(String, Vec<String>),
}

/// The changes from `old` to `new` (unchanged objects are left out), ordered by object.
pub fn diff(old: &[Document], new: &[Document]) -> Vec<Change> {
    let key = |d: &Document| format!("{} {}", d.api_version(), d.describe());
    let old: BTreeMap<String, &Document> = old.iter().map(|d| (key(d), d)).collect();
    let new: BTreeMap<String, &Document> = new.iter().map(|d| (key(d), d)).collect();
    let mut out = Vec::new();
    for (k, n) in &new {
        match old.get(k) {
            None => out.push(Change::Added(n.describe())),
            Some(o) if o.object != n.object => {
                let a = crate::yaml::to_string(&o.object);
                let b = crate::yaml::to_string(&n.object);
                out.push(Change::Changed(n.describe(), line_diff(&a, &b)));
            }
            Some(_) => {}
        }
    }
    for (k, o) in &old {
        if !new.contains_key(k) {
            out.push(Change::Removed(o.describe()));
        }
    }
    out
}

/// What the API server keeps on an object besides its content, which an apply changes without
/// that being a change of the object (`generation`, the DaemonSet's template generation) or
/// which no apply sets (`status`, `managedFields`): left out before comparing live objects.
pub fn comparable(object: &Value) -> Value {
    let mut v = object.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    if let Some(meta) = v["metadata"].as_object_mut() {
        for k in [
            "managedFields",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "uid",
            "selfLink",
        ] {
            meta.remove(k);
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("deprecated.daemonset.template.generation");
        }
    }
    v
}

/// The change from the live object `before` to `after` (what applying the chart's object makes
/// of it), if any: [`comparable`] parts compared, the lines of their YAML shown.
pub fn live_change(what: String, before: &Value, after: &Value) -> Option<Change> {
    let (a, b) = (comparable(before), comparable(after));
    if a == b {
        return None;
    }
    let lines = line_diff(&crate::yaml::to_string(&a), &crate::yaml::to_string(&b));
    Some(Change::Changed(what, lines))
}

/// The diff as text, as `rivora upgrade --dry-run` prints it (changed lines with 2 lines of
/// context).
pub fn render(changes: &[Change]) -> String {
    if changes.is_empty() {
        return "no object changes\n".to_string();
    }
    let mut out = String::new();
    for c in changes {
        match c {
            Change::Added(what) => out.push_str(&format!("+ {what} (created)\n")),
            Change::Removed(what) => out.push_str(&format!("- {what} (deleted)\n")),
            Change::Changed(what, lines) => {
                out.push_str(&format!("~ {what}\n"));
                let near = |i: usize| {
                    lines[i.saturating_sub(2)..(i + 3).min(lines.len())]
                        .iter()
                        .any(|l| !l.starts_with(' '))
                };
                let mut skipped = false;
                for (i, l) in lines.iter().enumerate() {
                    if near(i) {
                        out.push_str(&format!("    {l}\n"));
                        skipped = false;
                    } else if !skipped {
                        out.push_str("    ...\n");
                        skipped = true;
                    }
                }
            }
        }
    }
    out
}

/// A longest-common-subsequence line diff (objects are small: quadratic is fine).
fn line_diff(a: &str, b: &str) -> Vec<String> {
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push(format!(" {}", a[i]));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] > lcs[i + 1][j]) {
            out.push(format!("+{}", b[j]));
            j += 1;
        } else {
            out.push(format!("-{}", a[i]));
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(kind: &str, name: &str, spec: serde_json::Value) -> Document {
        Document {
            source: "t".into(),
            object: json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "n"}, "spec": spec}),
        }
    }

    #[test]
    fn added_removed_and_changed_objects_are_told_apart() {
        let old = [
            doc("A", "same", json!({"x": 1})),
            doc("A", "gone", json!({})),
            doc("B", "edit", json!({"a": 1, "b": 2, "c": 3})),
        ];
        let new = [
            doc("A", "same", json!({"x": 1})),
            doc("A", "new", json!({})),
            doc("B", "edit", json!({"a": 1, "b": 5, "c": 3})),
        ];
        let changes = diff(&old, &new);
        assert_eq!(changes.len(), 3, "{changes:?}");
        assert!(changes.contains(&Change::Added("A n/new".into())));
        assert!(changes.contains(&Change::Removed("A n/gone".into())));
        let Some(Change::Changed(what, lines)) =
            changes.iter().find(|c| matches!(c, Change::Changed(..)))
        else {
            panic!("{changes:?}")
        };
        assert_eq!(what, "B n/edit");
        assert!(lines.contains(&"-  b: 2".to_string()), "{lines:?}");
        assert!(lines.contains(&"+  b: 5".to_string()), "{lines:?}");
        let text = render(&changes);
        assert!(
            text.contains("~ B n/edit\n") && text.contains("+ A n/new (created)"),
            "{text}"
        );
        assert_eq!(render(&diff(&old, &old)), "no object changes\n");
    }

    #[test]
    fn live_changes_ignore_what_the_server_keeps_and_show_the_rest() {
        let live = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "r", "resourceVersion": "7", "generation": 1,
                         "managedFields": [{"manager": "kubectl-edit"}]},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
        let mut applied = live.clone();
        applied["metadata"]["resourceVersion"] = json!("8");
        applied["metadata"]["managedFields"] = json!([{"manager": "rivora"}]);
        assert_eq!(live_change("ClusterRole r".into(), &live, &applied), None);
        applied["rules"][0]["verbs"] = json!(["get", "list"]);
        let Some(Change::Changed(what, lines)) =
            live_change("ClusterRole r".into(), &live, &applied)
        else {
            panic!("a change")
        };
        assert_eq!(what, "ClusterRole r");
        assert!(lines.contains(&"+  - list".to_string()), "{lines:?}");
    }
}
