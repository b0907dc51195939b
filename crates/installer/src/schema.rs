//! Checks values against the chart's values.schema.json before anything is rendered or applied,
//! so a typo (`rivorad.anounce`) or a bad value (`announce: bpg`) is refused naming the field,
//! as helm refuses it, and nothing is half-applied.
//!
//! The JSON Schema keywords our schema uses are supported (type, enum, minimum, maximum,
//! minLength, maxLength, pattern, properties, additionalProperties, required, items); an unknown
//! keyword is ignored, as JSON Schema prescribes.

use serde_json::Value;

/// Every violation, each as `path: reason` (path `rivorad.l2.leaseDuration`, `(root)` for the
/// top); empty when the values are valid.
pub fn validate(schema: &Value, values: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    check(schema, values, "", &mut errors);
    errors
}

fn check(schema: &Value, v: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(s) = schema.as_object() else {
        if schema == &Value::Bool(false) {
            errors.push(format!("{}: not allowed", shown(path)));
        }
        return;
    };
    let at = shown(path);
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(|x| x.as_str()).collect(),
            _ => vec![],
        };
        if !types.is_empty() && !types.iter().any(|t| is_type(v, t)) {
            errors.push(format!(
                "{at}: must be {} (got {}){}",
                types.join(" or "),
                crate::values::kind(v),
                hint(&types, v)
            ));
            return;
        }
    }
    if let Some(Value::Array(allowed)) = s.get("enum")
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(short).collect();
        errors.push(format!(
            "{at}: must be one of {} (got {})",
            list.join(", "),
            short(v)
        ));
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            errors.push(format!("{at}: must be at least {min} (got {n})"));
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            errors.push(format!("{at}: must be at most {max} (got {n})"));
        }
    }
    if let Some(text) = v.as_str() {
        let len = text.chars().count() as u64;
        if let Some(min) = s.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            errors.push(format!("{at}: must be at least {min} characters long"));
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            errors.push(format!("{at}: must be at most {max} characters long"));
        }
        if let Some(p) = s.get("pattern").and_then(Value::as_str) {
            match regex::Regex::new(p) {
                Ok(re) if !re.is_match(text) => {
                    errors.push(format!("{at}: {text:?} does not match {p}"));
                }
                Ok(_) => {}
                Err(e) => errors.push(format!("{at}: the schema's pattern {p} is invalid: {e}")),
            }
        }
    }
    if let Some(map) = v.as_object() {
        if let Some(Value::Array(required)) = s.get("required") {
            for r in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(r) {
                    errors.push(format!("{}: required", join(path, r)));
                }
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, child) in map {
            let sub = join(path, k);
            match props.and_then(|p| p.get(k)) {
                Some(child_schema) => check(child_schema, child, &sub, errors),
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        let known: Vec<&str> = props
                            .map(|p| p.keys().map(String::as_str).collect())
                            .unwrap_or_default();
                        errors.push(format!(
                            "{sub}: unknown key (known here: {})",
                            known.join(", ")
                        ));
                    }
                    Some(extra @ Value::Object(_)) => check(extra, child, &sub, errors),
                    _ => {}
                },
            }
        }
    }
    if let (Some(list), Some(items)) = (v.as_array(), s.get("items")) {
        for (i, item) in list.iter().enumerate() {
            check(items, item, &format!("{path}[{i}]"), errors);
        }
    }
}

/// Why a string was not taken for the boolean or number it looks like: quoted in a values file,
/// or given to `--set`, which types only `true`/`false` and decimal integers.
fn hint(types: &[&str], v: &Value) -> String {
    let Some(s) = v.as_str() else {
        return String::new();
    };
    if types.contains(&"boolean") {
        format!(
            " {s:?}: write true or false (unquoted in a values file; `yes`/`on` are booleans only \
             there, not in --set)"
        )
    } else if types.iter().any(|t| matches!(*t, "integer" | "number")) {
        format!(" {s:?}: write the number unquoted (--set takes decimal integers)")
    } else {
        String::new()
    }
}

fn is_type(v: &Value, t: &str) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "string" => v.is_string(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "number" => v.is_number(),
        "integer" => v.as_f64().is_some_and(|n| n.fract() == 0.0),
        _ => true,
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn shown(path: &str) -> &str {
    if path.is_empty() { "(root)" } else { path }
}

fn short(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::Chart;
    use serde_json::json;

    fn with(over: Value) -> Vec<String> {
        let chart = Chart::embedded();
        let mut values = chart.default_values.clone();
        crate::values::merge(&mut values, &over);
        validate(chart.schema.as_ref().unwrap(), &values)
    }

    #[test]
    fn the_defaults_are_valid() {
        assert_eq!(with(json!({})), Vec::<String>::new());
    }

    #[test]
    fn violations_name_the_field_and_the_reason() {
        assert_eq!(
            with(json!({"rivorad": {"announce": "bpg"}})),
            vec![r#"rivorad.announce: must be one of "none", "bgp", "l2" (got "bpg")"#]
        );
        assert_eq!(
            with(json!({"rivorad": {"anounce": "bgp"}}))[0]
                .split(" (known")
                .next()
                .unwrap(),
            "rivorad.anounce: unknown key"
        );
        assert_eq!(
            with(json!({"controller": {"replicas": 0}})),
            vec!["controller.replicas: must be at least 1 (got 0)"]
        );
        assert_eq!(
            with(json!({"rivorad": {"l2": {"leaseDuration": "15"}}})),
            vec![r#"rivorad.l2.leaseDuration: "15" does not match ^[0-9]+(ms|s|m|h)$"#]
        );
        assert_eq!(
            with(json!({"rivorad": {"extraArgs": ["--x", 3]}})),
            vec!["rivorad.extraArgs[1]: must be string (got a number)"]
        );
        assert_eq!(
            with(json!({"defaultClass": "yes"})),
            vec![
                r#"defaultClass: must be boolean (got a string) "yes": write true or false (unquoted in a values file; `yes`/`on` are booleans only there, not in --set)"#
            ]
        );
        assert_eq!(
            with(json!({"controller": {"replicas": 1.5}})),
            vec!["controller.replicas: must be integer (got a number)"]
        );
    }
}

/// What a JSON schema cannot say: rules between two values, checked as the binaries check them
/// at start (rivorad's L2 Lease timing: `retryPeriod < renewDeadline < leaseDuration`), so an
/// install is refused up front instead of leaving every rivorad failing to start.
pub fn cross_field(values: &Value) -> Vec<String> {
    let l2 = &values["rivorad"]["l2"];
    let duration = |key: &str| -> Option<std::time::Duration> {
        let text = l2[key].as_str()?;
        let split = text.find(|c: char| !c.is_ascii_digit())?;
        let (digits, unit) = text.split_at(split);
        let n: u64 = digits.parse().ok()?;
        Some(match unit {
            "ms" => std::time::Duration::from_millis(n),
            "s" => std::time::Duration::from_secs(n),
            "m" => std::time::Duration::from_secs(n * 60),
            "h" => std::time::Duration::from_secs(n * 3600),
            _ => return None,
        })
    };
    let mut errors = Vec::new();
    let (lease, renew, retry) = (
        duration("leaseDuration"),
        duration("renewDeadline"),
        duration("retryPeriod"),
    );
    if let (Some(lease), Some(renew)) = (lease, renew)
        && renew >= lease
    {
        errors.push(format!(
            "rivorad.l2.renewDeadline ({renew:?}) must be shorter than rivorad.l2.leaseDuration \
             ({lease:?}): the holder must stop answering before another node may take the Lease"
        ));
    }
    if let (Some(renew), Some(retry)) = (renew, retry)
        && (retry.is_zero() || retry >= renew)
    {
        errors.push(format!(
            "rivorad.l2.retryPeriod ({retry:?}) must be more than zero and shorter than \
             rivorad.l2.renewDeadline ({renew:?}), so the holder renews before it fences itself"
        ));
    }
    errors
}

#[cfg(test)]
mod cross_field_tests {
    use super::cross_field;
    use serde_json::json;

    #[test]
    fn l2_timings_are_checked_against_each_other() {
        let l2 = |lease: &str, renew: &str, retry: &str| {
            json!({"rivorad": {"l2": {
                "leaseDuration": lease, "renewDeadline": renew, "retryPeriod": retry}}})
        };
        assert!(
            cross_field(&l2("15s", "10s", "2s")).is_empty(),
            "the chart's defaults"
        );
        let e = cross_field(&l2("15s", "20s", "2s"));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].contains(
                "rivorad.l2.renewDeadline (20s) must be shorter than rivorad.l2.leaseDuration (15s)"
            ),
            "{e:?}"
        );
        let e = cross_field(&l2("15s", "10s", "10s"));
        assert!(e[0].contains("rivorad.l2.retryPeriod (10s)"), "{e:?}");
        assert!(cross_field(&l2("1m", "59s", "500ms")).is_empty());
    }
}
