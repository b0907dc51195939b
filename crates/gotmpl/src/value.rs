//! The dynamic value a template works on, mirroring the Go types Helm's
//! values end up as (`interface{}`, `float64`, `map[string]interface{}`, ...).

use std::collections::BTreeMap;

/// A template value. `Map` keys are sorted, which is also the order Go's
/// `range`, `%v` and `encoding/json` use for `map[string]interface{}`.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Go's nil interface (a missing key, YAML `null`).
    Nil,
    /// Go `bool`.
    Bool(bool),
    /// Go `int`: template integer constants and results of `int`/`len`.
    Int(i64),
    /// Go `float64`: every number read from values (Helm goes through JSON).
    Float(f64),
    /// Go `string`.
    Str(String),
    /// Go `[]interface{}`.
    List(Vec<Value>),
    /// Go `map[string]interface{}`.
    Map(BTreeMap<String, Value>),
    /// Helm's `.Files`: chart file path to content, read with `.Files.Get`.
    Files(BTreeMap<String, String>),
}

impl Value {
    /// Helm semantics: values read from YAML/JSON have every number as float64
    /// (Helm unmarshals values through JSON).
    pub fn from_json_helm(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(0.0)),
            serde_json::Value::String(s) => Value::Str(s.clone()),
            serde_json::Value::Array(a) => {
                Value::List(a.iter().map(Value::from_json_helm).collect())
            }
            serde_json::Value::Object(o) => Value::Map(
                o.iter()
                    .map(|(k, v)| (k.clone(), Value::from_json_helm(v)))
                    .collect(),
            ),
        }
    }

    /// Converts to JSON for `toYaml`/callers; floats with integral values
    /// become JSON integers (as sigs.k8s.io/yaml writes them), non-finite
    /// floats become null.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Nil => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(f) => {
                if f.fract() == 0.0 && f.abs() < 9.0e15 {
                    serde_json::Value::from(*f as i64)
                } else {
                    serde_json::Number::from_f64(*f)
                        .map_or(serde_json::Value::Null, serde_json::Value::Number)
                }
            }
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::List(l) => serde_json::Value::Array(l.iter().map(Value::to_json).collect()),
            Value::Map(m) => {
                serde_json::Value::Object(m.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
            }
            Value::Files(f) => serde_json::Value::Object(
                f.iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect(),
            ),
        }
    }

    /// The Go type name, as Go's error messages print it.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Nil => "<nil>",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float64",
            Value::Str(_) => "string",
            Value::List(_) => "[]interface {}",
            Value::Map(_) => "map[string]interface {}",
            Value::Files(_) => "engine.files",
        }
    }

    /// Go text/template truth (`if`, `with`, `and`, `or`, `not`).
    pub(crate) fn is_true(&self) -> bool {
        match self {
            Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Map(m) => !m.is_empty(),
            Value::Files(_) => true,
        }
    }

    /// Sprig `empty` (used by `default`, `coalesce`): the negation of Go truth.
    pub(crate) fn is_empty(&self) -> bool {
        !self.is_true()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_numbers_become_floats_and_back_to_integers() {
        let j = serde_json::json!({"port": 8080, "ratio": 0.5, "list": [1, null, "x"], "t": true});
        let v = Value::from_json_helm(&j);
        let Value::Map(m) = &v else {
            panic!("expected map, got {v:?}")
        };
        assert_eq!(m.get("port"), Some(&Value::Float(8080.0)));
        assert_eq!(
            m.get("list"),
            Some(&Value::List(vec![
                Value::Float(1.0),
                Value::Nil,
                Value::Str("x".into())
            ]))
        );
        assert_eq!(v.to_json(), j);
        assert_eq!(
            v.to_json().to_string(),
            r#"{"list":[1,null,"x"],"port":8080,"ratio":0.5,"t":true}"#
        );
    }

    #[test]
    fn truth_like_go() {
        for v in [
            Value::Nil,
            Value::Bool(false),
            Value::Int(0),
            Value::Float(0.0),
            Value::Str(String::new()),
            Value::List(vec![]),
            Value::Map(BTreeMap::new()),
        ] {
            assert!(!v.is_true(), "{v:?} should be false");
            assert!(v.is_empty());
        }
        for v in [
            Value::Bool(true),
            Value::Int(-1),
            Value::Float(0.1),
            Value::Str("0".into()),
            Value::List(vec![Value::Nil]),
        ] {
            assert!(v.is_true(), "{v:?} should be true");
        }
    }
}
