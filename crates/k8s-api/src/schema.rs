//! Helpers that put Kubernetes-specific validation into the schemas schemars generates.
//!
//! Why by schemars `transform` functions next to the types: the rules live beside the field they
//! guard, the CRD YAML is still generated from the types alone, and each rule carries the message
//! and `fieldPath` the API server puts into its refusal, so an operator reads which field is wrong
//! and why.

use schemars::Schema;
use serde_json::{Value, json};

/// One `x-kubernetes-validations` entry.
pub(crate) struct Rule {
    /// The CEL expression; `self` is the value the schema describes.
    pub rule: String,
    /// What the API server says when the rule is false.
    pub message: &'static str,
    /// Where the API server points (relative to `self`, e.g. `.path`); None: at `self`.
    pub field_path: Option<&'static str>,
}

impl Rule {
    /// A rule reported at the schema's own field.
    pub(crate) fn new(rule: impl Into<String>, message: &'static str) -> Rule {
        Rule {
            rule: rule.into(),
            message,
            field_path: None,
        }
    }

    /// A rule reported at a sub-field (`.name`), for cross-field rules set on the parent.
    pub(crate) fn at(rule: impl Into<String>, message: &'static str, path: &'static str) -> Rule {
        Rule {
            rule: rule.into(),
            message,
            field_path: Some(path),
        }
    }
}

/// Appends `rules` to the schema's `x-kubernetes-validations`.
pub(crate) fn add_rules(schema: &mut Schema, rules: Vec<Rule>) {
    let list: Vec<Value> = rules
        .into_iter()
        .map(|r| {
            let mut v = json!({ "rule": r.rule, "message": r.message });
            if let Some(p) = r.field_path {
                v["fieldPath"] = json!(p);
            }
            v
        })
        .collect();
    let obj = schema.ensure_object();
    match obj.get_mut("x-kubernetes-validations") {
        Some(Value::Array(existing)) => existing.extend(list),
        _ => {
            obj.insert("x-kubernetes-validations".into(), Value::Array(list));
        }
    }
}

/// Sets plain schema keywords (`maxItems`, `x-kubernetes-list-type`, ...) on the schema.
pub(crate) fn set(schema: &mut Schema, pairs: &[(&str, Value)]) {
    let obj = schema.ensure_object();
    for (k, v) in pairs {
        obj.insert((*k).to_string(), v.clone());
    }
}

/// Sets keywords on the `items` schema of an array schema.
pub(crate) fn set_items(schema: &mut Schema, pairs: &[(&str, Value)]) {
    let obj = schema.ensure_object();
    let items = obj.entry("items").or_insert_with(|| json!({}));
    if let Value::Object(items) = items {
        for (k, v) in pairs {
            items.insert((*k).to_string(), v.clone());
        }
    }
}

/// CEL: the IPv4 address in string expression `s` as an integer (assumes `isIP(s)` and IPv4).
pub(crate) fn cel_ipv4_int(s: &str) -> String {
    format!(
        "(int({s}.split('.')[0]) * 16777216 + int({s}.split('.')[1]) * 65536 + \
         int({s}.split('.')[2]) * 256 + int({s}.split('.')[3]))"
    )
}

/// CEL: a Go-style duration string such as `2s` or `500ms` (checked by a pattern first, so
/// `duration()` in the rules never fails on bad input).
pub(crate) const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// An RFC 1997 community `AS:VALUE` with both halves 0-65535, as the static YAML writes them.
pub(crate) fn communities(schema: &mut Schema) {
    set(
        schema,
        &[
            ("maxItems", json!(32)),
            ("x-kubernetes-list-type", json!("set")),
        ],
    );
    set_items(
        schema,
        &[
            ("pattern", json!("^[0-9]{1,5}:[0-9]{1,5}$")),
            ("maxLength", json!(11)),
        ],
    );
    add_rules(
        schema,
        vec![Rule::new(
            "self.all(c, int(c.split(':')[0]) <= 65535 && int(c.split(':')[1]) <= 65535)",
            "each community is AS:VALUE with both numbers 0-65535 (RFC 1997)",
        )],
    );
}
