//! The Go builtin and Sprig/Helm functions that need no access to other
//! templates (those, `include`/`tpl`/`and`/`or`, live in `exec`), with Go's
//! argument type checks so charts that break under Helm break here too.

use std::collections::BTreeMap;

use crate::format::{go_quote, sprint, sprint_v, sprintf, sprintln};
use crate::json::to_go_json;
use crate::value::Value;
use crate::yaml::to_yaml;

/// Why a function call failed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FuncError {
    /// A type or argument problem; reported as `error calling NAME: reason`.
    Reason(String),
    /// `required` refused nil/"" with this chart message.
    Required(String),
    /// `fail` was called with this chart message.
    Fail(String),
}

type R = Result<Value, FuncError>;

fn reason<T>(s: impl Into<String>) -> Result<T, FuncError> {
    Err(FuncError::Reason(s.into()))
}

/// Functions evaluated by the executor itself (lazy arguments or templates).
pub(crate) const EXEC_FUNCS: &[&str] = &["and", "or", "include", "tpl"];

const FUNCS: &[&str] = &[
    "not",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "len",
    "index",
    "print",
    "printf",
    "println",
    "required",
    "fail",
    "default",
    "empty",
    "coalesce",
    "ternary",
    "quote",
    "squote",
    "toYaml",
    "toJson",
    "nindent",
    "indent",
    "trim",
    "trimSuffix",
    "trimPrefix",
    "trunc",
    "lower",
    "upper",
    "replace",
    "contains",
    "hasPrefix",
    "hasSuffix",
    "hasKey",
    "dict",
    "list",
    "join",
    "int",
    "int64",
    "toString",
    "b64enc",
];

/// Whether `name` is a function templates may call (checked at parse time, like Go).
pub(crate) fn is_defined(name: &str) -> bool {
    FUNCS.contains(&name) || EXEC_FUNCS.contains(&name)
}

fn arity(args: &[Value], want: usize) -> Result<(), FuncError> {
    if args.len() != want {
        return reason(format!(
            "wrong number of args: want {want} got {}",
            args.len()
        ));
    }
    Ok(())
}

fn at_least(args: &[Value], want: usize) -> Result<(), FuncError> {
    if args.len() < want {
        return reason(format!(
            "wrong number of args: want at least {want} got {}",
            args.len()
        ));
    }
    Ok(())
}

fn bad_type(want: &str, v: &Value) -> FuncError {
    match v {
        Value::Nil => FuncError::Reason(format!("invalid value; expected {want}")),
        v => FuncError::Reason(format!(
            "wrong type for value; expected {want}; got {}",
            v.type_name()
        )),
    }
}

/// A Go `string` parameter.
fn want_str(v: &Value) -> Result<&str, FuncError> {
    match v {
        Value::Str(s) => Ok(s),
        v => Err(bad_type("string", v)),
    }
}

/// A Go `int` parameter.
fn want_int(v: &Value) -> Result<i64, FuncError> {
    match v {
        Value::Int(i) => Ok(*i),
        v => Err(bad_type("int", v)),
    }
}

/// Sprig's `strval`: strings as they are, anything else through `%v`.
pub(crate) fn strval(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        v => sprint_v(v),
    }
}

/// `cast.ToInt64` as Sprig's `int`/`int64` use it: truncating floats,
/// parsing strings (0 when unparsable), bools as 0/1, nil as 0.
fn to_int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::Float(f) => *f as i64,
        Value::Bool(b) => i64::from(*b),
        Value::Str(s) => {
            // cast's trimZeroDecimal: "3.00" parses as 3.
            let t = match s.split_once('.') {
                Some((int, frac)) if !frac.is_empty() && frac.bytes().all(|c| c == b'0') => int,
                _ => s.as_str(),
            };
            let (neg, body) = t.strip_prefix('-').map_or((false, t), |b| (true, b));
            let parsed =
                if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
                    i64::from_str_radix(h, 16).ok()
                } else if body.len() > 1 && body.starts_with('0') {
                    i64::from_str_radix(&body[1..], 8).ok()
                } else {
                    body.parse::<i64>().ok()
                };
            parsed.map_or(0, |v| if neg { -v } else { v })
        }
        _ => 0,
    }
}

#[derive(PartialEq)]
enum Kind {
    Bool,
    Int,
    Float,
    Str,
    Other,
}

fn kind(v: &Value) -> Kind {
    match v {
        Value::Bool(_) => Kind::Bool,
        Value::Int(_) => Kind::Int,
        Value::Float(_) => Kind::Float,
        Value::Str(_) => Kind::Str,
        _ => Kind::Other,
    }
}

/// Go's `eq arg1 arg2...`: true if arg1 equals any later argument.
fn eq(args: &[Value]) -> Result<bool, FuncError> {
    let Some((a, rest)) = args.split_first() else {
        return reason("missing argument for comparison");
    };
    if rest.is_empty() {
        return reason("missing argument for comparison");
    }
    for b in rest {
        let truth = match (a, b) {
            (Value::Bool(x), Value::Bool(y)) => x == y,
            (Value::Int(x), Value::Int(y)) => x == y,
            (Value::Float(x), Value::Float(y)) => x == y,
            (Value::Str(x), Value::Str(y)) => x == y,
            (Value::Nil, Value::Nil) => true,
            (Value::Nil, _) | (_, Value::Nil) => false,
            _ if kind(a) != kind(b) && (kind(a) != Kind::Other || kind(b) != Kind::Other) => {
                return reason(format!(
                    "incompatible types for comparison: {} and {}",
                    a.type_name(),
                    b.type_name()
                ));
            }
            _ => return reason(format!("non-comparable type {}", b.type_name())),
        };
        if truth {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Go's `lt a b` on basic types of the same kind.
fn lt(a: &Value, b: &Value) -> Result<bool, FuncError> {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Ok(x < y),
        (Value::Float(x), Value::Float(y)) => Ok(x < y),
        (Value::Str(x), Value::Str(y)) => Ok(x < y),
        _ if kind(a) == Kind::Other || kind(b) == Kind::Other || kind(a) == Kind::Bool => {
            reason("invalid type for comparison")
        }
        _ => reason(format!(
            "incompatible types for comparison: {} and {}",
            a.type_name(),
            b.type_name()
        )),
    }
}

fn two(args: &[Value]) -> Result<(&Value, &Value), FuncError> {
    arity(args, 2)?;
    Ok((&args[0], &args[1]))
}

fn index(args: &[Value]) -> R {
    at_least(args, 1)?;
    let mut item = args[0].clone();
    for ix in &args[1..] {
        item = match (&item, ix) {
            (Value::Nil, _) => return reason("index of untyped nil"),
            (Value::List(l), Value::Int(i)) => {
                match usize::try_from(*i).ok().and_then(|i| l.get(i)) {
                    Some(v) => v.clone(),
                    None => return reason(format!("index out of range: {i}")),
                }
            }
            (Value::Str(s), Value::Int(i)) => {
                match usize::try_from(*i).ok().and_then(|i| s.as_bytes().get(i)) {
                    Some(b) => Value::Int(i64::from(*b)),
                    None => return reason(format!("index out of range: {i}")),
                }
            }
            (Value::List(_) | Value::Str(_), ix) => {
                return reason(format!(
                    "cannot index slice/array with type {}",
                    ix.type_name()
                ));
            }
            (Value::Map(m), Value::Str(k)) => m.get(k).cloned().unwrap_or(Value::Nil),
            (Value::Map(_), Value::Nil) => return reason("value is nil; should be of type string"),
            (Value::Map(_), ix) => {
                return reason(format!(
                    "value has type {}; should be string",
                    ix.type_name()
                ));
            }
            (item, _) => return reason(format!("can't index item of type {}", item.type_name())),
        };
    }
    Ok(item)
}

fn len(v: &Value) -> R {
    Ok(Value::Int(match v {
        Value::Str(s) => s.len(),
        Value::List(l) => l.len(),
        Value::Map(m) => m.len(),
        Value::Files(f) => f.len(),
        v => return reason(format!("len of type {}", v.type_name())),
    } as i64))
}

fn indent(n: i64, s: &str) -> String {
    let pad = " ".repeat(usize::try_from(n).unwrap_or(0));
    format!("{pad}{}", s.replace('\n', &format!("\n{pad}")))
}

fn trunc(n: i64, s: &str) -> String {
    let len = s.len() as i64;
    let bytes = if n < 0 && len + n > 0 {
        &s.as_bytes()[(len + n) as usize..]
    } else if n >= 0 && len > n {
        &s.as_bytes()[..n as usize]
    } else {
        s.as_bytes()
    };
    String::from_utf8_lossy(bytes).into_owned()
}

/// Sprig's `strslice` for `join`: list items via `strval`, nils skipped.
fn strslice(v: &Value) -> Vec<String> {
    match v {
        Value::List(l) => l
            .iter()
            .filter(|x| !matches!(x, Value::Nil))
            .map(strval)
            .collect(),
        Value::Nil => Vec::new(),
        v => vec![strval(v)],
    }
}

/// Standard base64 with padding, as Go's `base64.StdEncoding`.
fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Calls function `name` (one of `FUNCS`) on evaluated arguments.
pub(crate) fn call(name: &str, args: &[Value]) -> R {
    let s = |x: String| Ok(Value::Str(x));
    let b = |x: bool| Ok(Value::Bool(x));
    match name {
        "not" => {
            arity(args, 1)?;
            b(!args[0].is_true())
        }
        "eq" => b(eq(args)?),
        "ne" => {
            let (x, y) = two(args)?;
            b(!eq(&[x.clone(), y.clone()])?)
        }
        "lt" => {
            let (x, y) = two(args)?;
            b(lt(x, y)?)
        }
        "le" => {
            let (x, y) = two(args)?;
            b(lt(x, y)? || eq(args)?)
        }
        "gt" => {
            let (x, y) = two(args)?;
            b(!(lt(x, y)? || eq(args)?))
        }
        "ge" => {
            let (x, y) = two(args)?;
            b(!lt(x, y)?)
        }
        "len" => {
            arity(args, 1)?;
            len(&args[0])
        }
        "index" => index(args),
        "print" => s(sprint(args)),
        "println" => s(sprintln(args)),
        "printf" => {
            at_least(args, 1)?;
            s(sprintf(want_str(&args[0])?, &args[1..]))
        }
        "required" => {
            arity(args, 2)?;
            let msg = want_str(&args[0])?;
            match &args[1] {
                Value::Nil => Err(FuncError::Required(msg.to_string())),
                Value::Str(x) if x.is_empty() => Err(FuncError::Required(msg.to_string())),
                v => Ok(v.clone()),
            }
        }
        "fail" => {
            arity(args, 1)?;
            Err(FuncError::Fail(want_str(&args[0])?.to_string()))
        }
        "default" => {
            at_least(args, 1)?;
            match args.get(1) {
                Some(v) if !v.is_empty() => Ok(v.clone()),
                _ => Ok(args[0].clone()),
            }
        }
        "empty" => {
            arity(args, 1)?;
            b(args[0].is_empty())
        }
        "coalesce" => Ok(args
            .iter()
            .find(|v| !v.is_empty())
            .cloned()
            .unwrap_or(Value::Nil)),
        "ternary" => {
            arity(args, 3)?;
            match &args[2] {
                Value::Bool(c) => Ok(if *c { args[0].clone() } else { args[1].clone() }),
                v => Err(bad_type("bool", v)),
            }
        }
        "quote" => s(args
            .iter()
            .filter(|v| !matches!(v, Value::Nil))
            .map(|v| go_quote(&strval(v)))
            .collect::<Vec<_>>()
            .join(" ")),
        "squote" => s(args
            .iter()
            .filter(|v| !matches!(v, Value::Nil))
            .map(|v| format!("'{}'", sprint_v(v)))
            .collect::<Vec<_>>()
            .join(" ")),
        "toYaml" => {
            arity(args, 1)?;
            s(to_yaml(&args[0]))
        }
        "toJson" => {
            arity(args, 1)?;
            s(to_go_json(&args[0]).unwrap_or_default())
        }
        "indent" | "nindent" => {
            arity(args, 2)?;
            let body = indent(want_int(&args[0])?, want_str(&args[1])?);
            s(if name == "nindent" {
                format!("\n{body}")
            } else {
                body
            })
        }
        "trim" => {
            arity(args, 1)?;
            s(want_str(&args[0])?.trim().to_string())
        }
        "trimSuffix" => {
            let (x, y) = two(args)?;
            let (suf, v) = (want_str(x)?, want_str(y)?);
            s(v.strip_suffix(suf).unwrap_or(v).to_string())
        }
        "trimPrefix" => {
            let (x, y) = two(args)?;
            let (pre, v) = (want_str(x)?, want_str(y)?);
            s(v.strip_prefix(pre).unwrap_or(v).to_string())
        }
        "trunc" => {
            let (x, y) = two(args)?;
            s(trunc(want_int(x)?, want_str(y)?))
        }
        "lower" => {
            arity(args, 1)?;
            s(want_str(&args[0])?.to_lowercase())
        }
        "upper" => {
            arity(args, 1)?;
            s(want_str(&args[0])?.to_uppercase())
        }
        "replace" => {
            arity(args, 3)?;
            let (old, new, src) = (
                want_str(&args[0])?,
                want_str(&args[1])?,
                want_str(&args[2])?,
            );
            s(src.replace(old, new))
        }
        "contains" | "hasPrefix" | "hasSuffix" => {
            let (x, y) = two(args)?;
            let (needle, hay) = (want_str(x)?, want_str(y)?);
            b(match name {
                "contains" => hay.contains(needle),
                "hasPrefix" => hay.starts_with(needle),
                _ => hay.ends_with(needle),
            })
        }
        "hasKey" => {
            let (m, k) = two(args)?;
            let key = want_str(k)?;
            match m {
                Value::Map(m) => b(m.contains_key(key)),
                v => Err(bad_type("map[string]interface {}", v)),
            }
        }
        "dict" => {
            let mut m = BTreeMap::new();
            for pair in args.chunks(2) {
                m.insert(
                    strval(&pair[0]),
                    pair.get(1).cloned().unwrap_or(Value::Str(String::new())),
                );
            }
            Ok(Value::Map(m))
        }
        "list" => Ok(Value::List(args.to_vec())),
        "join" => {
            let (sep, l) = two(args)?;
            s(strslice(l).join(want_str(sep)?))
        }
        "int" | "int64" => {
            arity(args, 1)?;
            Ok(Value::Int(to_int(&args[0])))
        }
        "toString" => {
            arity(args, 1)?;
            s(strval(&args[0]))
        }
        "b64enc" => {
            arity(args, 1)?;
            s(base64(want_str(&args[0])?.as_bytes()))
        }
        other => reason(format!("function {other:?} not defined")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(s: &str) -> Value {
        Value::Str(s.into())
    }

    #[test]
    fn comparisons_follow_go() {
        assert_eq!(
            call("eq", &[Value::Int(1), Value::Int(2), Value::Int(1)]),
            Ok(Value::Bool(true))
        );
        assert_eq!(call("eq", &[Value::Nil, st("x")]), Ok(Value::Bool(false)));
        assert_eq!(call("eq", &[Value::Nil, Value::Nil]), Ok(Value::Bool(true)));
        assert_eq!(
            call("eq", &[Value::Float(1.0), Value::Int(1)]),
            Err(FuncError::Reason(
                "incompatible types for comparison: float64 and int".into()
            ))
        );
        assert_eq!(call("lt", &[st("a"), st("b")]), Ok(Value::Bool(true)));
        assert_eq!(
            call("ge", &[Value::Float(2.0), Value::Float(2.0)]),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            call("gt", &[Value::Int(2), Value::Int(2)]),
            Ok(Value::Bool(false))
        );
        assert!(call("lt", &[Value::Int(1), Value::Float(2.0)]).is_err());
    }

    #[test]
    fn sprig_strings() {
        assert_eq!(
            call("quote", &[Value::Float(8080.0), Value::Nil, st("a\"b")]),
            Ok(st("\"8080\" \"a\\\"b\""))
        );
        assert_eq!(call("squote", &[Value::Float(1e6)]), Ok(st("'1e+06'")));
        assert_eq!(
            call("nindent", &[Value::Int(2), st("a\nb")]),
            Ok(st("\n  a\n  b"))
        );
        assert_eq!(
            call("nindent", &[Value::Float(2.0), st("a")]),
            Err(FuncError::Reason(
                "wrong type for value; expected int; got float64".into()
            ))
        );
        assert_eq!(call("trunc", &[Value::Int(3), st("abcdef")]), Ok(st("abc")));
        assert_eq!(call("trunc", &[Value::Int(-2), st("abcdef")]), Ok(st("ef")));
        assert_eq!(call("trimSuffix", &[st("-"), st("a-")]), Ok(st("a")));
        assert_eq!(
            call("replace", &[st("."), st("-"), st("a.b.c")]),
            Ok(st("a-b-c"))
        );
        assert_eq!(
            call(
                "join",
                &[
                    st(","),
                    Value::List(vec![st("a"), Value::Nil, Value::Float(2.0)])
                ]
            ),
            Ok(st("a,2"))
        );
        assert_eq!(call("b64enc", &[st("hello")]), Ok(st("aGVsbG8=")));
        assert_eq!(call("b64enc", &[st("ab")]), Ok(st("YWI=")));
        assert_eq!(call("upper", &[st("ab")]), Ok(st("AB")));
    }

    #[test]
    fn defaults_and_conversions() {
        for empty in [
            Value::Int(0),
            Value::Float(0.0),
            st(""),
            Value::Bool(false),
            Value::Nil,
        ] {
            assert_eq!(call("default", &[st("d"), empty]), Ok(st("d")));
        }
        assert_eq!(call("default", &[st("d")]), Ok(st("d")));
        assert_eq!(
            call("default", &[st("d"), Value::Float(3.0)]),
            Ok(Value::Float(3.0))
        );
        assert_eq!(call("int", &[Value::Float(3.9)]), Ok(Value::Int(3)));
        assert_eq!(call("int", &[st("42")]), Ok(Value::Int(42)));
        assert_eq!(call("int", &[st("x")]), Ok(Value::Int(0)));
        assert_eq!(call("toString", &[Value::Float(1.5)]), Ok(st("1.5")));
        assert_eq!(
            call("coalesce", &[Value::Nil, st(""), st("x")]),
            Ok(st("x"))
        );
        assert_eq!(
            call("ternary", &[st("a"), st("b"), Value::Bool(false)]),
            Ok(st("b"))
        );
        assert_eq!(
            call("required", &[st("need x"), st("")]),
            Err(FuncError::Required("need x".into()))
        );
    }

    #[test]
    fn collections() {
        let d = call("dict", &[st("a"), Value::Int(1), st("b")]).expect("dict");
        let Value::Map(m) = &d else {
            panic!("dict gives a map")
        };
        assert_eq!(m.get("b"), Some(&st("")));
        assert_eq!(call("hasKey", &[d.clone(), st("a")]), Ok(Value::Bool(true)));
        assert_eq!(call("index", &[d.clone(), st("zz")]), Ok(Value::Nil));
        let l = Value::List(vec![st("x"), st("y")]);
        assert_eq!(call("index", &[l.clone(), Value::Int(1)]), Ok(st("y")));
        assert_eq!(
            call("index", &[l.clone(), Value::Int(5)]),
            Err(FuncError::Reason("index out of range: 5".into()))
        );
        assert_eq!(call("len", &[l]), Ok(Value::Int(2)));
        assert_eq!(
            call("len", &[Value::Float(1.0)]),
            Err(FuncError::Reason("len of type float64".into()))
        );
    }
}
