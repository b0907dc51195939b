//! Kubernetes label-selector matching (`matchLabels` and `matchExpressions`), one definition for
//! rivora-controller (AddressPool selectors) and the nodes (BGPPeer node selectors).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` match `selector`. `None` (no selector) matches everything; so does an empty
/// selector, as in the Kubernetes API. An unknown operator matches nothing (fail closed: a pool
/// is never handed to Services its owner did not mean).
pub fn matches(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(sel) = selector else {
        return true;
    };
    if let Some(ml) = &sel.match_labels
        && ml.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        let got = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" => got.is_some_and(|v| values.contains(v)),
            "NotIn" => got.is_none_or(|v| !values.contains(v)),
            "Exists" => got.is_some(),
            "DoesNotExist" => got.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
            match_labels: None,
        }
    }

    #[test]
    fn label_and_expression_semantics() {
        let l = labels(&[("tier", "edge"), ("team", "a")]);
        assert!(matches(None, &l));
        assert!(matches(Some(&LabelSelector::default()), &l));
        let ml = LabelSelector {
            match_labels: Some(labels(&[("tier", "edge")])),
            match_expressions: None,
        };
        assert!(matches(Some(&ml), &l));
        assert!(!matches(Some(&ml), &labels(&[("tier", "core")])));
        assert!(matches(Some(&expr("team", "In", &["a", "b"])), &l));
        assert!(!matches(Some(&expr("team", "NotIn", &["a"])), &l));
        assert!(matches(Some(&expr("zone", "NotIn", &["x"])), &l));
        assert!(matches(Some(&expr("team", "Exists", &[])), &l));
        assert!(!matches(Some(&expr("team", "DoesNotExist", &[])), &l));
        assert!(!matches(Some(&expr("team", "Gt", &["1"])), &l));
    }
}
