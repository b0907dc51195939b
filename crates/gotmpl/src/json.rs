//! `toJson` output byte-for-byte like Go's `encoding/json` (sorted keys,
//! HTML-safe escapes, Go's float layout), since Helm charts embed it in
//! annotations and ConfigMaps.

use crate::format::{exponent, fixed, float_digits};
use crate::value::Value;

/// A float64 the way `encoding/json` writes it; `None` for NaN/Inf (Go errors).
fn json_float(f: f64) -> Option<String> {
    if !f.is_finite() {
        return None;
    }
    let sign = if f < 0.0 { "-" } else { "" };
    let abs = f.abs();
    let (digits, dp) = float_digits(abs);
    let body = if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Go writes e-07 as e-7 but keeps e+21.
        let e = exponent(&digits, dp);
        match e.split_once("e-0") {
            Some((m, x)) => format!("{m}e-{x}"),
            None => e,
        }
    } else {
        fixed(&digits, dp)
    };
    Some(format!("{sign}{body}"))
}

/// Writes `s` as a JSON string literal with Go's escapes (also a valid YAML double-quoted scalar).
pub(crate) fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write(v: &Value, out: &mut String) -> Option<()> {
    match v {
        Value::Nil => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Float(f) => out.push_str(&json_float(*f)?),
        Value::Str(s) => json_string(s, out),
        Value::List(l) => {
            out.push('[');
            for (i, x) in l.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(x, out)?;
            }
            out.push(']');
        }
        Value::Map(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(k, out);
                out.push(':');
                write(x, out)?;
            }
            out.push('}');
        }
        Value::Files(f) => {
            let m = f
                .iter()
                .map(|(k, v)| (k.clone(), Value::Str(v.clone())))
                .collect();
            write(&Value::Map(m), out)?;
        }
    }
    Some(())
}

/// Compact JSON like Go's `json.Marshal`; `None` where Go fails (NaN/Inf),
/// for which Helm's `toJson` yields "".
pub(crate) fn to_go_json(v: &Value) -> Option<String> {
    let mut out = String::new();
    write(v, &mut out)?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    // Expected output printed by Go 1.26 json.Marshal (see /tmp/gofmtcheck).
    #[test]
    fn marshals_like_go() {
        let mut m = BTreeMap::new();
        m.insert("b".to_string(), Value::Str("<a&b>\u{2028}".into()));
        m.insert(
            "a".to_string(),
            Value::List(vec![
                Value::Float(1.0),
                Value::Float(1e21),
                Value::Float(1e-7),
                Value::Float(0.5),
                Value::Nil,
                Value::Bool(true),
            ]),
        );
        assert_eq!(
            to_go_json(&Value::Map(m)).as_deref(),
            Some(r#"{"a":[1,1e+21,1e-7,0.5,null,true],"b":"\u003ca\u0026b\u003e\u2028"}"#)
        );
        assert_eq!(json_float(1e20).as_deref(), Some("100000000000000000000"));
        assert_eq!(json_float(0.00003).as_deref(), Some("0.00003"));
        assert_eq!(to_go_json(&Value::Float(f64::NAN)), None);
    }
}
