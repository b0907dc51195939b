//! `toYaml`: what sigs.k8s.io/yaml would produce for the value, up to
//! formatting (same data when parsed), without the trailing newline.
//!
//! The emitter is our own rather than serde_norway's: serde_norway writes
//! strings like `yes`/`on` unquoted (plain strings in YAML 1.2), but
//! Kubernetes decodes manifests with YAML 1.1 rules where they are booleans.
//! So any string that is not plainly a string is written double-quoted.

use crate::json::json_string;
use crate::value::Value;

fn has_non_finite(v: &Value) -> bool {
    match v {
        Value::Float(f) => !f.is_finite(),
        Value::List(l) => l.iter().any(has_non_finite),
        Value::Map(m) => m.values().any(has_non_finite),
        _ => false,
    }
}

/// Whether `s` reads back as this same string under YAML 1.1 and 1.2 when
/// written plain (conservative: anything unusual is quoted instead).
fn plain_ok(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if !(first.is_ascii_alphabetic() || first == '/' || first == '_') {
        return false;
    }
    if s.ends_with([' ', ':']) || s.contains(": ") || s.contains("  ") {
        return false;
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_./:- ".contains(c))
    {
        return false;
    }
    let special = [
        "y", "n", "yes", "no", "on", "off", "true", "false", "null", "nil",
    ];
    !special.contains(&s.to_ascii_lowercase().as_str())
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Nil => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(_) => v.to_json().to_string(),
        Value::Str(s) if plain_ok(s) => s.clone(),
        Value::Str(s) => {
            let mut out = String::new();
            json_string(s, &mut out);
            out
        }
        Value::List(_) => "[]".into(),
        Value::Map(_) | Value::Files(_) => "{}".into(),
    }
}

fn is_block(v: &Value) -> bool {
    match v {
        Value::List(l) => !l.is_empty(),
        Value::Map(m) => !m.is_empty(),
        Value::Files(f) => !f.is_empty(),
        _ => false,
    }
}

/// Writes a non-empty map or list in block style at `indent` spaces.
fn block(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Map(m) => {
            for (k, x) in m {
                out.push_str(&pad);
                out.push_str(&scalar(&Value::Str(k.clone())));
                out.push(':');
                if is_block(x) {
                    out.push('\n');
                    let child = if matches!(x, Value::List(_)) {
                        indent
                    } else {
                        indent + 2
                    };
                    block(x, child, out);
                } else {
                    out.push(' ');
                    out.push_str(&scalar(x));
                    out.push('\n');
                }
            }
        }
        Value::Files(f) => {
            let m = f
                .iter()
                .map(|(k, v)| (k.clone(), Value::Str(v.clone())))
                .collect();
            block(&Value::Map(m), indent, out);
        }
        Value::List(l) => {
            for x in l {
                if is_block(x) {
                    // Render the item two columns in and put "- " over its first indent.
                    let mut child = String::new();
                    block(x, indent + 2, &mut child);
                    out.push_str(&pad);
                    out.push_str("- ");
                    out.push_str(&child[indent + 2..]);
                } else {
                    out.push_str(&pad);
                    out.push_str("- ");
                    out.push_str(&scalar(x));
                    out.push('\n');
                }
            }
        }
        x => {
            out.push_str(&pad);
            out.push_str(&scalar(x));
            out.push('\n');
        }
    }
}

/// Helm's `toYaml`: YAML of the JSON form of `v` (integral floats written as
/// integers, keys sorted), trailing newline removed; "" where Go's JSON
/// marshalling fails (NaN/Inf), as Helm swallows that error.
pub(crate) fn to_yaml(v: &Value) -> String {
    if has_non_finite(v) {
        return String::new();
    }
    if !is_block(v) {
        return scalar(v);
    }
    let mut out = String::new();
    block(v, 0, &mut out);
    out.truncate(out.trim_end_matches('\n').len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(v: &Value) {
        let y = to_yaml(v);
        let back: serde_json::Value = serde_norway::from_str(&y).expect("toYaml output parses");
        assert_eq!(back, v.to_json(), "yaml was:\n{y}");
    }

    #[test]
    fn nested_values_round_trip() {
        let j = serde_json::json!({
            "resources": {"limits": {"cpu": "100m", "memory": 128}},
            "tolerations": [{"key": "a", "operator": "Exists"}, {"effect": "NoSchedule"}],
            "strings": ["yes", "no", "on", "off", "y", "n", "~", "null", "true", "1", "1.5", "0x10", "010", "1e3", "", " lead", "a: b", "- x", "#c", "multi\nline\n", "*ref", "&anchor", "!tag", "%x", "@x", "`x", "'q'", "\"dq\""],
            "ratio": 0.25,
            "empty": {},
            "none": null,
        });
        round_trip(&Value::from_json_helm(&j));
    }

    #[test]
    fn scalars_and_empties() {
        assert_eq!(to_yaml(&Value::Nil), "null");
        assert_eq!(to_yaml(&Value::Float(8080.0)), "8080");
        assert_eq!(to_yaml(&Value::Map(Default::default())), "{}");
        assert_eq!(to_yaml(&Value::List(vec![])), "[]");
        assert_eq!(to_yaml(&Value::Float(f64::NAN)), "");
    }

    #[test]
    fn block_layout() {
        let j = serde_json::json!({"a": {"b": [1, {"c": "d", "e": [true]}, []]}, "z": "yes"});
        assert_eq!(
            to_yaml(&Value::from_json_helm(&j)),
            "a:\n  b:\n  - 1\n  - c: d\n    e:\n    - true\n  - []\nz: \"yes\""
        );
    }

    #[test]
    fn yaml_1_1_booleans_are_quoted() {
        // Kubernetes decodes with YAML 1.1 rules, where these are booleans.
        for s in ["yes", "no", "on", "off", "y", "n", "Yes", "ON"] {
            let y = to_yaml(&Value::Str(s.into()));
            assert!(
                y.starts_with('\'') || y.starts_with('"'),
                "{s} must be quoted, got {y}"
            );
        }
    }
}
