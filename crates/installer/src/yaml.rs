//! YAML as helm and kubectl read it: YAML 1.1 scalars (go-yaml v2, under sigs.k8s.io/yaml).
//!
//! serde_norway implements YAML 1.2, where `yes`, `on`, `n`, `0x1F` or `1_000` are strings; helm
//! reads values files and kubectl reads manifests with go-yaml v2's YAML 1.1 rules, where they are
//! booleans and numbers. So:
//! - [`from_str`] parses with serde_norway but types each *plain* (unquoted) scalar as go-yaml
//!   v2 does, and turns keys into strings as sigs.k8s.io/yaml does: `defaultClass: yes` is
//!   `true`, as helm takes it;
//! - [`to_string`] writes JSON data as YAML in which every string that a YAML 1.1 reader (go-yaml
//!   v2, PyYAML) or a YAML 1.2 reader would type as anything else is quoted: what `rivora install
//!   --dry-run` prints is what `kubectl apply -f` applies.

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Parses one YAML document into JSON data with go-yaml v2's (helm's, kubectl's) typing of
/// plain scalars. An error names the field (`a.b[2]`) where a value has no JSON form.
pub fn from_str(text: &str) -> Result<Value, serde_norway::Error> {
    let node = serde_norway::Deserializer::from_str(text);
    let seed = Seed {
        text,
        path: String::new(),
    };
    Ok(seed.deserialize(node)?.value)
}

/// A node read by [`Seed`]: its value, and whether it was a plain scalar `<<` (a merge key).
struct Node {
    value: Value,
    merge: bool,
}

impl Node {
    fn of(value: Value) -> Node {
        Node {
            value,
            merge: false,
        }
    }
}

/// Reads one node. `text` is the whole input: serde_norway hands a scalar over as a slice of it,
/// quoted or not alike, so whether it was quoted is read from the bytes around that slice.
#[derive(Clone)]
struct Seed<'t> {
    text: &'t str,
    path: String,
}

impl Seed<'_> {
    fn at(&self, step: String) -> Self {
        Seed {
            text: self.text,
            path: step,
        }
    }

    fn shown(&self) -> &str {
        if self.path.is_empty() {
            "(root)"
        } else {
            &self.path
        }
    }

    /// Whether the scalar `s` (borrowed from the input) was written without quotes: only a
    /// plain scalar may be typed. A scalar not borrowed from the input (escapes, folded lines,
    /// block scalars) is a string whatever it says; a plain one spanning lines holds a space and
    /// is a string by every rule anyway.
    fn is_plain(&self, s: &str) -> bool {
        let base = self.text.as_ptr() as usize;
        let start = s.as_ptr() as usize;
        if start < base || start + s.len() > base + self.text.len() {
            return false;
        }
        let (from, to) = (start - base, start - base + s.len());
        let bytes = self.text.as_bytes();
        let quoted = from > 0
            && matches!(bytes[from - 1], b'\'' | b'"')
            && bytes.get(to) == Some(&bytes[from - 1]);
        !quoted
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Node;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "YAML data at {}", self.shown())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::of(Value::Null))
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::of(Value::Null))
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Node, E> {
        Ok(Node::of(Value::Bool(b)))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Node, E> {
        Ok(Node::of(Value::from(n)))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Node, E> {
        Ok(Node::of(Value::from(n)))
    }

    fn visit_i128<E: de::Error>(self, n: i128) -> Result<Node, E> {
        self.visit_f64(n as f64)
    }

    fn visit_u128<E: de::Error>(self, n: u128) -> Result<Node, E> {
        self.visit_f64(n as f64)
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<Node, E> {
        match Number::from_f64(f) {
            Some(n) => Ok(Node::of(Value::Number(n))),
            None => Err(E::custom(format!(
                "{}: {f} has no JSON form (helm refuses it too)",
                self.shown()
            ))),
        }
    }

    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Node, E> {
        if !self.is_plain(s) {
            return Ok(Node::of(Value::String(s.to_string())));
        }
        if s == "<<" {
            return Ok(Node {
                value: Value::String(s.to_string()),
                merge: true,
            });
        }
        match resolve_plain(s) {
            Plain::Data(v) => Ok(Node::of(v)),
            Plain::NonFinite => self.visit_f64(f64::NAN),
        }
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Node, E> {
        Ok(Node::of(Value::String(s.to_string())))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Node, E> {
        Ok(Node::of(Value::String(s)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut out = Vec::new();
        while let Some(item) =
            seq.next_element_seed(self.at(format!("{}[{}]", self.path, out.len())))?
        {
            out.push(item.value);
        }
        Ok(Node::of(Value::Array(out)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut out = Map::new();
        let mut merged = Map::new();
        while let Some(key) = map.next_key_seed(self.at(self.path.clone()))? {
            if key.merge {
                let value = map.next_value_seed(self.at(self.path.clone()))?.value;
                let sources = match value {
                    Value::Array(list) => list,
                    one => vec![one],
                };
                for source in sources {
                    let Value::Object(m) = source else {
                        return Err(de::Error::custom(format!(
                            "{}: a merge key (<<) takes a mapping or a list of mappings",
                            self.shown()
                        )));
                    };
                    for (k, v) in m {
                        merged.entry(k).or_insert(v);
                    }
                }
                continue;
            }
            let name = key_string(&key.value).ok_or_else(|| {
                de::Error::custom(format!(
                    "{}: a key must be a string, number or boolean, not {}",
                    self.shown(),
                    crate::values::kind(&key.value)
                ))
            })?;
            let child = if self.path.is_empty() {
                name.clone()
            } else {
                format!("{}.{name}", self.path)
            };
            let value = map.next_value_seed(self.at(child))?.value;
            out.insert(name, value);
        }
        for (k, v) in merged {
            out.entry(k).or_insert(v);
        }
        Ok(Node::of(Value::Object(out)))
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, _data: A) -> Result<Node, A::Error> {
        Err(de::Error::custom(format!(
            "{}: a YAML tag (`!name`) is not supported in values or manifests",
            self.shown()
        )))
    }
}

/// A mapping key as sigs.k8s.io/yaml turns it into a JSON key: `yes:` is `"true"`, `1:` `"1"`.
fn key_string(key: &Value) -> Option<String> {
    match key {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// go-yaml v2's float syntax (after `_` are removed).
static V2_FLOAT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$").expect("a valid regex")
});

/// A plain scalar as go-yaml v2 types it.
#[derive(Debug, Clone, PartialEq)]
pub enum Plain {
    /// Its JSON form.
    Data(Value),
    /// `.inf`, `-.inf`, `.nan`: a float without a JSON form (helm fails on it too).
    NonFinite,
}

/// What go-yaml v2 (`resolve`, decoding into `interface{}`) makes of a plain scalar: its
/// booleans (`y`, `yes`, `on`, ... in three casings), nulls, integers as Go's `ParseInt(s, 0,
/// 64)` reads them once `_` are removed (`0x1F`, `0o17`, `017` octal, `0b101`), floats, and
/// strings for everything else (timestamps too: v2 keeps them strings for `interface{}`, and it
/// has no sexagesimal numbers: `12:30` is a string).
pub fn resolve_plain(s: &str) -> Plain {
    let data = match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            Value::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            Value::Bool(false)
        }
        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" | "-.inf" | "-.Inf" | "-.INF"
        | ".nan" | ".NaN" | ".NAN" => return Plain::NonFinite,
        _ => number_or_string(s),
    };
    Plain::Data(data)
}

fn number_or_string(s: &str) -> Value {
    let first = s.as_bytes()[0];
    if first == b'.' {
        return match s.parse::<f64>().ok().and_then(Number::from_f64) {
            Some(n) => Value::Number(n),
            None => Value::String(s.to_string()),
        };
    }
    if !(first.is_ascii_digit() || first == b'+' || first == b'-') {
        return Value::String(s.to_string());
    }
    let plain = s.replace('_', "");
    if let Some(n) = go_parse_int(&plain) {
        return n;
    }
    if V2_FLOAT.is_match(&plain)
        && let Some(n) = plain.parse::<f64>().ok().and_then(Number::from_f64)
    {
        return Value::Number(n);
    }
    Value::String(s.to_string())
}

/// Go's `strconv.ParseInt(s, 0, 64)`, then `ParseUint(s, 0, 64)`: an optional sign, then
/// `0x`/`0X` hex, `0o`/`0O` or a leading `0` octal, `0b`/`0B` binary, else decimal.
fn go_parse_int(s: &str) -> Option<Value> {
    let (negative, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits) = if let Some(r) = body.strip_prefix("0x").or(body.strip_prefix("0X")) {
        (16, r)
    } else if let Some(r) = body.strip_prefix("0o").or(body.strip_prefix("0O")) {
        (8, r)
    } else if let Some(r) = body.strip_prefix("0b").or(body.strip_prefix("0B")) {
        (2, r)
    } else if body.len() > 1 && body.starts_with('0') {
        (8, &body[1..])
    } else {
        (10, body)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u128::from_str_radix(digits, radix).ok()?;
    if negative {
        let n = i128::try_from(magnitude).ok()?.checked_neg()?;
        i64::try_from(n).ok().map(Value::from)
    } else if let Ok(n) = i64::try_from(magnitude) {
        Some(Value::from(n))
    } else {
        u64::try_from(magnitude).ok().map(Value::from)
    }
}

/// Writes JSON data as block YAML (maps sorted as serde_json keeps them, lists under a key at
/// the key's indentation, multi-line strings as literal blocks), quoting every string
/// [`needs_quotes`] says a reader would take for something else.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(m) if !m.is_empty() => map(&mut out, m, 0, false),
        Value::Array(l) if !l.is_empty() => seq(&mut out, l, 0, false),
        Value::String(s) if literal_ok(s) => literal(&mut out, s, 2),
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
    out
}

fn pad(out: &mut String, indent: usize, inline: bool) {
    if !inline {
        out.extend(std::iter::repeat_n(' ', indent));
    }
}

/// A non-empty mapping at `indent`; `inline`: its first line continues a `- ` already written.
fn map(out: &mut String, m: &Map<String, Value>, indent: usize, inline: bool) {
    for (i, (k, v)) in m.iter().enumerate() {
        pad(out, indent, inline && i == 0);
        out.push_str(&quoted_or_plain(k));
        out.push(':');
        value_after(out, v, indent, indent + 2);
    }
}

/// A non-empty sequence at `indent`; `inline` as for [`map`].
fn seq(out: &mut String, l: &[Value], indent: usize, inline: bool) {
    for (i, v) in l.iter().enumerate() {
        pad(out, indent, inline && i == 0);
        out.push('-');
        match v {
            Value::Object(m) if !m.is_empty() => {
                out.push(' ');
                map(out, m, indent + 2, true);
            }
            Value::Array(l) if !l.is_empty() => {
                out.push(' ');
                seq(out, l, indent + 2, true);
            }
            other => value_after(out, other, indent, indent + 2),
        }
    }
}

/// The rest of a line after `key:` or `-`: a scalar, or a nested block. `seq_indent` is where a
/// list under a key goes (the key's own column, as libyaml writes it), `indent` where a map or a
/// literal block's lines go.
fn value_after(out: &mut String, v: &Value, seq_indent: usize, indent: usize) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            map(out, m, indent, false);
        }
        Value::Array(l) if !l.is_empty() => {
            out.push('\n');
            seq(out, l, seq_indent, false);
        }
        Value::String(s) if literal_ok(s) => {
            out.push(' ');
            literal(out, s, indent);
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
}

/// A scalar or an empty collection on one line.
fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => quoted_or_plain(s),
        Value::Array(_) => "[]".into(),
        Value::Object(_) => "{}".into(),
    }
}

/// A number as every reader types it back: a float keeps a `.` and a signed exponent (PyYAML's
/// YAML 1.1 floats need both; `1e+20` alone is a string there).
fn number(n: &Number) -> String {
    let text = n.to_string();
    if !n.is_f64() {
        return text;
    }
    match text.split_once(['e', 'E']) {
        Some((mantissa, exp)) => {
            let mantissa = if mantissa.contains('.') {
                mantissa.to_string()
            } else {
                format!("{mantissa}.0")
            };
            let exp = if exp.starts_with(['-', '+']) {
                exp.to_string()
            } else {
                format!("+{exp}")
            };
            format!("{mantissa}e{exp}")
        }
        None if text.contains('.') => text,
        None => format!("{text}.0"),
    }
}

/// A multi-line string as a literal block (`|`, `|-` or `|+` by its trailing newlines), when
/// that reads back exactly: printable text whose first line does not start with a space, and no
/// line of only spaces.
fn literal_ok(s: &str) -> bool {
    s.contains('\n')
        && !s.starts_with([' ', '\t', '\n'])
        && s.chars().all(|c| c == '\n' || c == '\t' || printable(c))
        && s.split('\n').all(|l| l.is_empty() || !l.trim().is_empty())
        && !s
            .split('\n')
            .any(|l| l.starts_with("---") || l.starts_with("..."))
}

fn literal(out: &mut String, s: &str, indent: usize) {
    let body = s.trim_end_matches('\n');
    let trailing = s.len() - body.len();
    out.push_str(match trailing {
        0 => "|-",
        1 => "|",
        _ => "|+",
    });
    out.push('\n');
    for line in body.split('\n') {
        if !line.is_empty() {
            pad(out, indent, false);
            out.push_str(line);
        }
        out.push('\n');
    }
    for _ in 1..trailing {
        out.push('\n');
    }
}

/// Whether a character may stand in a YAML stream as itself.
fn printable(c: char) -> bool {
    !c.is_control()
        && !matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
        )
}

fn quoted_or_plain(s: &str) -> String {
    if !needs_quotes(s) {
        return s.to_string();
    }
    if s.chars().all(printable) {
        return format!("'{}'", s.replace('\'', "''"));
    }
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if printable(c) => out.push(c),
            c => out.push_str(&format!("\\u{:04X}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// PyYAML's implicit resolvers (YAML 1.1), for what go-yaml v2 types differently (`12:30` is
/// 750 there, `2024-01-02` a date, `=` a "value" PyYAML cannot even load safely).
static YAML11_TYPED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"^(?:",
        // bool
        r"yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF",
        // float
        r"|[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?",
        r"|\.[0-9_]+(?:[eE][-+][0-9]+)?",
        r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*",
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
        // int
        r"|[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+",
        r"|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+",
        // merge, null, value
        r"|<<|~|null|Null|NULL|=",
        // timestamp
        r"|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?",
        r"(?:(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?",
        r"(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)?",
        r")$"
    ))
    .expect("a valid regex")
});

/// Whether `s` written plain would not read back as this string in block context by a YAML 1.1
/// reader (go-yaml v2 as kubectl and helm use it, PyYAML) or a YAML 1.2 one (serde_norway), or
/// might not parse at all: then it is quoted. Conservative: quoting a string that did not need
/// it changes nothing a reader sees.
pub fn needs_quotes(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return true;
    };
    let syntax_ok = !s.starts_with([' ', '\t'])
        && !s.ends_with([' ', '\t', ':'])
        && !"?:,[]{}#&*!|>'\"%@`".contains(first)
        && !(first == '-' && (s.len() == 1 || s[1..].starts_with([' ', '\t'])))
        && !s.starts_with("---")
        && !s.starts_with("...")
        && !s.contains(": ")
        && !s.contains(" #")
        && !s.contains('\t')
        && s.chars().all(printable);
    if !syntax_ok {
        return true;
    }
    if YAML11_TYPED.is_match(s) || resolve_plain(s) != Plain::Data(Value::String(s.to_string())) {
        return true;
    }
    // YAML 1.2 (serde_norway's reading): `0o17`, `1e3`, anything it would not read back.
    !matches!(serde_norway::from_str::<Value>(s), Ok(Value::String(back)) if back == s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_scalars_are_typed_as_go_yaml_v2_types_them() {
        let v = from_str(concat!(
            "a: yes\nb: 'yes'\nc: \"on\"\nd: off\ne: n\nf: Y\ng: 0x1F\nh: 017\ni: 1_000\n",
            "j: 12:30\nk: 2024-01-02\nl: ~\nm: 1.5\nnn: 08\no: \"017\"\np: yEs\nq: 0o17\n",
            "r: -0b101\ns: +12\nt: |\n  yes\nu: [on, 'on']\nyes: key\n1: one\n",
        ))
        .unwrap();
        assert_eq!(
            v,
            json!({
                "a": true, "b": "yes", "c": "on", "d": false, "e": false, "f": true, "g": 31,
                "h": 15, "i": 1000, "j": "12:30", "k": "2024-01-02", "l": null, "m": 1.5,
                "nn": 8.0, "o": "017", "p": "yEs", "q": 15, "r": -5, "s": 12, "t": "yes\n",
                "u": [true, "on"], "true": "key", "1": "one",
            })
        );
    }

    #[test]
    fn merge_keys_and_anchors_merge_as_go_yaml_v2_merges() {
        let v = from_str("base: &b {x: 1, z: on}\nuse:\n  <<: *b\n  z: 2\n").unwrap();
        assert_eq!(v["use"], json!({"x": 1, "z": 2}));
        // `y` and `n` are YAML 1.1 booleans, keys too (sigs.k8s.io/yaml makes them "true"/"false").
        assert_eq!(
            from_str("y: 1\nn: 2\n").unwrap(),
            json!({"true": 1, "false": 2})
        );
    }

    #[test]
    fn values_without_a_json_form_are_refused_naming_the_field() {
        let e = from_str("a:\n  b: [1, .inf]\n").unwrap_err().to_string();
        assert!(e.contains("a.b[1]: "), "{e}");
    }

    #[test]
    fn strings_a_yaml_1_1_reader_would_retype_are_quoted() {
        for s in [
            "yes",
            "Yes",
            "on",
            "OFF",
            "y",
            "n",
            "NO",
            "12:30",
            "~",
            "null",
            "true",
            "False",
            "1",
            "-5",
            "0x1F",
            "0X1F",
            "017",
            "08",
            "1_000",
            "1.10",
            "1e3",
            ".5",
            "0o17",
            "=",
            "<<",
            "2024-01-02",
            ".inf",
            "",
            " x",
            "x ",
            "- x",
            "-",
            "a: b",
            "a #b",
            "#x",
            "*x",
            "&x",
            "!x",
            "x:",
            "@x",
            "`x",
            "'x",
            "\"x",
            "{x",
            "[x",
            "%x",
            "|x",
            ">x",
            "---",
            "a\tb",
        ] {
            assert!(needs_quotes(s), "{s:?} must be quoted");
        }
        for s in [
            "x",
            "yess",
            "linux",
            "--interface=eth0",
            "rivora.dev/lb",
            "192.0.2.0/28",
            "eth0",
            "a:b",
            "a#b",
            "v1.2.3",
            "-x",
            "IfNotPresent",
            "100m",
            "système",
        ] {
            assert!(!needs_quotes(s), "{s:?} is plain");
        }
    }

    #[test]
    fn what_is_written_reads_back_the_same_under_both_readers() {
        let data = json!({
            "metadata": {"name": "x", "labels": {"on": "yes", "n": "12:30", "k": "~"}},
            "spec": {
                "list": ["y", "NO", "null", "true", "1.10", "1", {"a": "off", "b": []}, ["x", "017"]],
                "empty": {}, "num": 3, "float": 0.5, "big": 1e20, "whole": 2.0, "flag": true,
                "nothing": null,
                "text": "line one\nline: two\n", "strip": "a\nb", "keep": "a\n\n",
                "weird": "tab\there\u{7f}", "quote": "it's", "indented": " a\nb",
            },
        });
        let text = to_string(&data);
        assert_eq!(from_str(&text).unwrap(), data, "{text}");
        let norway: Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(norway, data, "{text}");
        assert!(
            text.contains("on: 'yes'") || text.contains("'on': 'yes'"),
            "{text}"
        );
    }
}
