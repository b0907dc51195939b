//! Chart values as helm computes them: the chart's values.yaml, then each `-f` file merged over
//! it, then each `--set` over that, so `rivora install` takes the same inputs as `helm install`.

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value};

/// Parses one YAML values document into JSON data as helm reads it (YAML 1.1 scalars: unquoted
/// `yes`/`off` are booleans, see [`crate::yaml`]); an empty file is an empty map (as helm).
pub fn parse_yaml(origin: &str, text: &str) -> Result<Value> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let value: Value =
        crate::yaml::from_str(text).with_context(|| format!("{origin}: not YAML"))?;
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Ok(Value::Object(Map::new())),
        other => bail!(
            "{origin}: values must be a mapping of keys, not {}",
            kind(&other)
        ),
    }
}

/// Merges `over` into `base`: maps merge key by key, anything else replaces (helm's
/// coalescing; a `null` over a key deletes it, as `--set key=null` does in helm).
pub fn merge(base: &mut Value, over: &Value) {
    merge_nulls(base, over, Nulls::Delete);
}

/// What a `null` in the values merged over does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nulls {
    /// Deletes the key (merging user values over the chart's defaults).
    Delete,
    /// Stays a `null`, to delete the default later (collecting `--set` user values).
    Keep,
}

/// [`merge`], with the treatment of `null`s chosen.
pub fn merge_nulls(base: &mut Value, over: &Value, nulls: Nulls) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                if v.is_null() && nulls == Nulls::Delete {
                    b.remove(k);
                    continue;
                }
                match b.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        merge_nulls(existing, v, nulls)
                    }
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// Parses one `--set` argument (`a.b=1,c[0]=x,d={x,y}`) into a values tree, typing scalars as
/// helm does: `true`/`false` booleans and `null` deletes (any case), decimal integers numbers,
/// anything else a string (`yes` too: helm's `--set` is not YAML).
/// `--set-string` passes `typed = false` and keeps every scalar a string.
pub fn parse_set(arg: &str, typed: bool) -> Result<Value> {
    let mut out = Value::Object(Map::new());
    for assignment in split_unescaped(arg, ',', true) {
        if assignment.is_empty() {
            continue;
        }
        let (path, raw) = assignment
            .split_once('=')
            .with_context(|| format!("--set {arg}: `{assignment}` is not key=value"))?;
        let path = parse_path(path).with_context(|| format!("--set {arg}"))?;
        let value = if raw.starts_with('{') && raw.ends_with('}') && raw.len() >= 2 {
            Value::Array(
                split_unescaped(&raw[1..raw.len() - 1], ',', false)
                    .iter()
                    .map(|s| scalar(s, typed))
                    .collect(),
            )
        } else {
            scalar(&unescape(raw), typed)
        };
        insert(&mut out, &path, value).with_context(|| format!("--set {arg}"))?;
    }
    Ok(out)
}

/// One step of a `--set` key path.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

fn parse_path(path: &str) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    for part in split_unescaped(path, '.', false) {
        let part = part.as_str();
        let (name, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if name.is_empty() && steps.is_empty() {
            bail!("key `{path}`: empty name");
        }
        if !name.is_empty() {
            steps.push(Step::Key(unescape(name)));
        }
        while let Some(r) = rest.strip_prefix('[') {
            let end = r
                .find(']')
                .with_context(|| format!("key `{path}`: unclosed ["))?;
            let index: usize = r[..end]
                .parse()
                .with_context(|| format!("key `{path}`: `{}` is not a list index", &r[..end]))?;
            if index > 65535 {
                bail!("key `{path}`: list index {index} is too large");
            }
            steps.push(Step::Index(index));
            rest = &r[end + 1..];
        }
        if !rest.is_empty() {
            bail!("key `{path}`: unexpected `{rest}`");
        }
    }
    if steps.is_empty() {
        bail!("empty key");
    }
    Ok(steps)
}

fn insert(into: &mut Value, path: &[Step], value: Value) -> Result<()> {
    let Some((first, rest)) = path.split_first() else {
        *into = value;
        return Ok(());
    };
    match first {
        Step::Key(k) => {
            if !into.is_object() {
                *into = Value::Object(Map::new());
            }
            let map = into.as_object_mut().expect("made a map");
            let slot = map.entry(k.clone()).or_insert(Value::Null);
            insert(slot, rest, value)
        }
        Step::Index(i) => {
            if !into.is_array() {
                *into = Value::Array(Vec::new());
            }
            let list = into.as_array_mut().expect("made a list");
            while list.len() <= *i {
                list.push(Value::Null);
            }
            insert(&mut list[*i], rest, value)
        }
    }
}

/// helm's strvals `typedVal`: `true`, `false` and `null` in any case, `0`, and decimal
/// integers not starting with `0` (a sign is allowed: `-05` is -5, `05` a string); anything else,
/// `yes` and `1.5` too, is a string.
fn scalar(raw: &str, typed: bool) -> Value {
    if !typed {
        return Value::String(raw.to_string());
    }
    if raw.eq_ignore_ascii_case("true") {
        return Value::Bool(true);
    }
    if raw.eq_ignore_ascii_case("false") {
        return Value::Bool(false);
    }
    if raw.eq_ignore_ascii_case("null") {
        return Value::Null;
    }
    if raw == "0" {
        return Value::from(0);
    }
    if !raw.starts_with('0')
        && let Some(n) = go_parse_decimal(raw)
    {
        return Value::from(n);
    }
    Value::String(raw.to_string())
}

/// Go's `strconv.ParseInt(s, 10, 64)`: an optional sign, then ASCII digits only.
fn go_parse_decimal(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Splits on `sep` unless escaped with `\`; with `braces`, separators inside `{...}` do not split.
fn split_unescaped(s: &str, sep: char, braces: bool) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut depth = 0u32;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '{' if braces => {
                depth += 1;
                cur.push(c);
            }
            '}' if braces => {
                depth = depth.saturating_sub(1);
                cur.push(c);
            }
            c if c == sep && depth == 0 => parts.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    parts.push(cur);
    parts
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A value's kind in messages ("a string", "a list", ...).
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_types_scalars_like_helm() {
        assert_eq!(
            parse_set("a.b=1,c=true,d=x,e=01,f=-3,g=null", true).unwrap(),
            json!({"a": {"b": 1}, "c": true, "d": "x", "e": "01", "f": -3, "g": null})
        );
        assert_eq!(
            parse_set("a=1,b=true", false).unwrap(),
            json!({"a": "1", "b": "true"})
        );
    }

    #[test]
    fn set_lists_indexes_and_escapes() {
        assert_eq!(
            parse_set("rivorad.extraArgs={--x,--y},l[1].name=n", true).unwrap(),
            json!({"rivorad": {"extraArgs": ["--x", "--y"]}, "l": [null, {"name": "n"}]})
        );
        assert_eq!(
            parse_set(r"nodeSelector.kubernetes\.io/os=linux,v=a\,b", true).unwrap(),
            json!({"nodeSelector": {"kubernetes.io/os": "linux"}, "v": "a,b"})
        );
    }

    #[test]
    fn bad_set_names_the_argument() {
        let e = parse_set("novalue", true).unwrap_err();
        assert!(
            format!("{e:#}").contains("`novalue` is not key=value"),
            "{e:#}"
        );
        let e = parse_set("a[x]=1", true).unwrap_err();
        assert!(format!("{e:#}").contains("not a list index"), "{e:#}");
    }

    #[test]
    fn merge_is_deep_for_maps_and_replaces_the_rest() {
        let mut base = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x", "gone": 1});
        merge(
            &mut base,
            &json!({"a": {"c": [3], "e": true}, "d": {"now": "a map"}, "gone": null}),
        );
        assert_eq!(
            base,
            json!({"a": {"b": 1, "c": [3], "e": true}, "d": {"now": "a map"}})
        );
    }

    #[test]
    fn values_files_are_read_with_helm_s_yaml_1_1_scalars() {
        let v = parse_yaml(
            "f.yaml",
            "defaultClass: yes\nrivorad:\n  persistDatapath: off\n  flowTableSize: 0x10000\n  \
             nodeSelector: {a: 'yes', b: \"12:30\", c: 12:30}\n",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"defaultClass": true, "rivorad": {"persistDatapath": false,
                   "flowTableSize": 65536, "nodeSelector": {"a": "yes", "b": "12:30", "c": "12:30"}}})
        );
    }

    #[test]
    fn set_types_scalars_as_helm_s_strvals() {
        assert_eq!(
            parse_set(
                "a=True,b=FALSE,c=NULL,d=+3,e=-05,f=yes,g=0,h=00,i=1.5,j=on",
                true
            )
            .unwrap(),
            json!({"a": true, "b": false, "c": null, "d": 3, "e": -5, "f": "yes", "g": 0,
                   "h": "00", "i": "1.5", "j": "on"})
        );
    }

    #[test]
    fn values_files_must_be_maps() {
        assert_eq!(parse_yaml("f", "").unwrap(), json!({}));
        let e = parse_yaml("f.yaml", "- a\n- b\n").unwrap_err();
        assert!(
            format!("{e:#}").contains("f.yaml: values must be a mapping"),
            "{e:#}"
        );
    }
}
