//! A tiny positioned YAML tree built from `saphyr-parser` events.
//!
//! serde-based YAML deserializers stop at the first error and lose the
//! position of a value once it has been deserialized, so a semantic check
//! ("this port is out of range") cannot say where the value was. Instead we
//! build our own minimal tree in which every node remembers the line and
//! column it started at, and the decoder (`decode.rs`) walks that tree by
//! hand, collecting every error it finds in one pass.
//!
//! Scalars are resolved with the YAML 1.2 core schema (so `02:00:00:00:00:01`
//! is a string, not a YAML 1.1 sexagesimal number, and `yes` is a string, not
//! a boolean).

use std::borrow::Cow;
use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span, StrInput, Tag};

/// Deepest nesting accepted. A valid config is four levels deep; the limit
/// only keeps a hostile file from overflowing the stack of the recursive
/// tree builder.
const MAX_DEPTH: usize = 64;

/// Most nodes that alias expansion (`*name`) may copy in total. Aliases can
/// refer to nodes that themselves contain aliases, so without a budget a
/// small file could expand exponentially ("billion laughs").
const MAX_ALIAS_NODES: usize = 1_000_000;

/// 1-based line and column of the first character of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pos {
    pub line: usize,
    pub column: usize,
}

impl Pos {
    fn from_span(span: &Span) -> Pos {
        Pos {
            line: span.start.line(),
            // saphyr-parser columns are 0-based; editors count from 1.
            column: span.start.col() + 1,
        }
    }
}

/// One node of the document, with where it starts.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub pos: Pos,
    pub value: Value,
    /// An explicit tag (`!foo`, `!!str`) written on the node, if any.
    pub tag: Option<Tag>,
    /// Number of nodes in this subtree, for the alias expansion budget.
    size: usize,
}

/// The content of a [`Node`].
#[derive(Debug, Clone)]
pub(crate) enum Value {
    Scalar { text: String, style: ScalarStyle },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

/// What a node means after YAML 1.2 core schema resolution.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind<'n> {
    Null,
    Bool(&'n str),
    /// Source text and value (`None` if it does not fit an `i128`).
    Int(&'n str, Option<i128>),
    Float(&'n str),
    Str(&'n str),
    Seq(&'n [Node]),
    Map(&'n [(Node, Node)]),
}

impl Node {
    /// Resolves the node's type the way YAML 1.2's core schema does: quoted
    /// and block scalars are strings, plain scalars may be null, booleans,
    /// integers or floats. `!!str` forces a string.
    pub fn kind(&self) -> Kind<'_> {
        match &self.value {
            Value::Seq(items) => Kind::Seq(items),
            Value::Map(pairs) => Kind::Map(pairs),
            Value::Scalar { text, style } => {
                let forced_str = self
                    .tag
                    .as_ref()
                    .is_some_and(|t| t.is_yaml_core_schema() && t.suffix == "str");
                if forced_str || *style != ScalarStyle::Plain {
                    Kind::Str(text)
                } else {
                    resolve_plain(text)
                }
            }
        }
    }

    /// The text of a scalar node, whatever its resolved type.
    pub fn scalar_text(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }

    /// Human description of the node for "expected X, found Y" messages.
    pub fn describe(&self) -> String {
        match self.kind() {
            Kind::Null => "an empty value (null)".to_string(),
            Kind::Bool(t) => format!("the boolean `{t}`"),
            Kind::Int(t, _) => format!("the integer `{t}`"),
            Kind::Float(t) => format!("the number `{t}`"),
            Kind::Str(t) => format!("the string {t:?}"),
            Kind::Seq(_) => "a list".to_string(),
            Kind::Map(_) => "a mapping".to_string(),
        }
    }
}

fn resolve_plain(text: &str) -> Kind<'_> {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Kind::Null,
        "true" | "True" | "TRUE" | "false" | "False" | "FALSE" => return Kind::Bool(text),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" | "-.inf" | "-.Inf" | "-.INF"
        | ".nan" | ".NaN" | ".NAN" => return Kind::Float(text),
        _ => {}
    }
    if let Some(value) = parse_int(text) {
        return Kind::Int(text, value);
    }
    if is_float(text) {
        return Kind::Float(text);
    }
    Kind::Str(text)
}

/// Core schema integers: `[-+]?[0-9]+`, `0o[0-7]+`, `0x[0-9a-fA-F]+`.
/// Returns `Some(None)` for an integer too large to represent.
fn parse_int(text: &str) -> Option<Option<i128>> {
    let (digits, radix) = if let Some(hex) = text.strip_prefix("0x") {
        (hex, 16)
    } else if let Some(oct) = text.strip_prefix("0o") {
        (oct, 8)
    } else {
        (text, 10)
    };
    let unsigned = if radix == 10 {
        digits.strip_prefix(['-', '+']).unwrap_or(digits)
    } else {
        digits
    };
    if unsigned.is_empty() || !unsigned.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    Some(i128::from_str_radix(digits, radix).ok())
}

/// Core schema floats: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn is_float(text: &str) -> bool {
    let s = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (int_part, frac_part) = match mantissa.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (mantissa, None),
    };
    let all_digits = |p: &str| p.chars().all(|c| c.is_ascii_digit());
    let mantissa_ok = match frac_part {
        None => !int_part.is_empty() && all_digits(int_part),
        Some(f) => all_digits(int_part) && all_digits(f) && !(int_part.is_empty() && f.is_empty()),
    };
    let exponent_ok = match exponent {
        None => true,
        Some(e) => {
            let e = e.strip_prefix(['-', '+']).unwrap_or(e);
            !e.is_empty() && all_digits(e)
        }
    };
    mantissa_ok && exponent_ok
}

/// Why the text could not be turned into a tree: a syntax error, or a
/// structural limit.
#[derive(Debug)]
pub(crate) struct LoadError {
    pub pos: Pos,
    pub message: String,
}

impl From<ScanError> for LoadError {
    fn from(e: ScanError) -> Self {
        LoadError {
            pos: Pos {
                line: e.marker().line(),
                column: e.marker().col() + 1,
            },
            message: format!("YAML syntax error: {}", e.info()),
        }
    }
}

/// Parses `text` into a tree. `Ok(None)` means the stream holds no document
/// at all (an empty file, or only comments).
pub(crate) fn load(text: &str) -> Result<Option<Node>, LoadError> {
    let mut loader = Loader {
        parser: Parser::new_from_str(text),
        anchors: HashMap::new(),
        alias_budget: MAX_ALIAS_NODES,
        last_pos: Pos { line: 1, column: 1 },
    };
    loader.stream()
}

struct Loader<'input> {
    parser: Parser<'input, StrInput<'input>>,
    anchors: HashMap<usize, Node>,
    alias_budget: usize,
    last_pos: Pos,
}

impl<'input> Loader<'input> {
    fn next(&mut self) -> Result<(Event<'input>, Span), LoadError> {
        match self.parser.next() {
            Some(Ok((event, span))) => {
                self.last_pos = Pos::from_span(&span);
                Ok((event, span))
            }
            Some(Err(e)) => Err(e.into()),
            None => Err(LoadError {
                pos: self.last_pos,
                message: "YAML syntax error: unexpected end of input".to_string(),
            }),
        }
    }

    fn stream(&mut self) -> Result<Option<Node>, LoadError> {
        let mut document = None;
        loop {
            let (event, span) = self.next()?;
            match event {
                Event::StreamStart | Event::Nothing => {}
                Event::StreamEnd => return Ok(document),
                Event::DocumentStart(_) => {
                    if document.is_some() {
                        return Err(LoadError {
                            pos: Pos::from_span(&span),
                            message: "the file holds more than one YAML document (`---`); \
                                      put the whole configuration in a single document"
                                .to_string(),
                        });
                    }
                    let first = self.next()?;
                    document = Some(self.node(first, 0)?);
                }
                Event::DocumentEnd => {}
                _ => return Err(unexpected(&span)),
            }
        }
    }

    fn node(
        &mut self,
        (event, span): (Event<'input>, Span),
        depth: usize,
    ) -> Result<Node, LoadError> {
        let pos = Pos::from_span(&span);
        if depth > MAX_DEPTH {
            return Err(LoadError {
                pos,
                message: format!("YAML nesting is deeper than {MAX_DEPTH} levels"),
            });
        }
        let (node, anchor) = match event {
            Event::Scalar(text, style, anchor, tag) => (
                Node {
                    pos,
                    value: Value::Scalar {
                        text: text.into_owned(),
                        style,
                    },
                    tag: tag.map(Cow::into_owned),
                    size: 1,
                },
                anchor,
            ),
            Event::SequenceStart(anchor, tag) => {
                let mut items = Vec::new();
                let mut size = 1;
                loop {
                    let next = self.next()?;
                    if matches!(next.0, Event::SequenceEnd) {
                        break;
                    }
                    let item = self.node(next, depth + 1)?;
                    size += item.size;
                    items.push(item);
                }
                let node = Node {
                    pos,
                    value: Value::Seq(items),
                    tag: tag.map(Cow::into_owned),
                    size,
                };
                (node, anchor)
            }
            Event::MappingStart(anchor, tag) => {
                let mut pairs = Vec::new();
                let mut size = 1;
                loop {
                    let next = self.next()?;
                    if matches!(next.0, Event::MappingEnd) {
                        break;
                    }
                    let key = self.node(next, depth + 1)?;
                    let next = self.next()?;
                    let value = self.node(next, depth + 1)?;
                    size += key.size + value.size;
                    pairs.push((key, value));
                }
                let node = Node {
                    pos,
                    value: Value::Map(pairs),
                    tag: tag.map(Cow::into_owned),
                    size,
                };
                (node, anchor)
            }
            Event::Alias(id) => {
                let Some(target) = self.anchors.get(&id) else {
                    // The parser itself rejects unknown anchors; this only
                    // guards against an alias to a node still being built.
                    return Err(LoadError {
                        pos,
                        message: "YAML alias refers to an anchor that is not defined before it"
                            .to_string(),
                    });
                };
                if target.size > self.alias_budget {
                    return Err(LoadError {
                        pos,
                        message: format!(
                            "YAML aliases expand to more than {MAX_ALIAS_NODES} nodes"
                        ),
                    });
                }
                self.alias_budget -= target.size;
                let mut node = target.clone();
                // Errors about the alias as a whole point at its use.
                node.pos = pos;
                return Ok(node);
            }
            _ => return Err(unexpected(&span)),
        };
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        Ok(node)
    }
}

fn unexpected(span: &Span) -> LoadError {
    LoadError {
        pos: Pos::from_span(span),
        message: "YAML syntax error: unexpected event".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(text: &str) -> String {
        format!("{:?}", resolve_plain(text))
    }

    #[test]
    fn core_schema_resolution() {
        assert_eq!(kind_of(""), "Null");
        assert_eq!(kind_of("~"), "Null");
        assert_eq!(kind_of("true"), "Bool(\"true\")");
        assert_eq!(kind_of("yes"), "Str(\"yes\")");
        assert_eq!(kind_of("80"), "Int(\"80\", Some(80))");
        assert_eq!(kind_of("-3"), "Int(\"-3\", Some(-3))");
        assert_eq!(kind_of("0x50"), "Int(\"0x50\", Some(80))");
        assert_eq!(kind_of("0o17"), "Int(\"0o17\", Some(15))");
        assert_eq!(
            kind_of("999999999999999999999999999999999999999999"),
            "Int(\"999999999999999999999999999999999999999999\", None)"
        );
        assert_eq!(kind_of("80.5"), "Float(\"80.5\")");
        assert_eq!(kind_of("1e3"), "Float(\"1e3\")");
        assert_eq!(kind_of(".5"), "Float(\".5\")");
        assert_eq!(kind_of("."), "Str(\".\")");
        assert_eq!(kind_of(".inf"), "Float(\".inf\")");
        assert_eq!(kind_of("10.0.0.1"), "Str(\"10.0.0.1\")");
        assert_eq!(kind_of("02:00:00:00:00:01"), "Str(\"02:00:00:00:00:01\")");
        assert_eq!(kind_of("0x"), "Str(\"0x\")");
        assert_eq!(kind_of("1e"), "Str(\"1e\")");
    }

    #[test]
    fn positions_are_one_based() {
        let node = load("a:\n  b: [1, 2]\n").unwrap().unwrap();
        let Value::Map(pairs) = &node.value else {
            panic!("not a map")
        };
        assert_eq!(pairs[0].0.pos, Pos { line: 1, column: 1 });
        let Value::Map(inner) = &pairs[0].1.value else {
            panic!("not a map")
        };
        assert_eq!(inner[0].0.pos, Pos { line: 2, column: 3 });
        let Value::Seq(items) = &inner[0].1.value else {
            panic!("not a seq")
        };
        assert_eq!(
            items[1].pos,
            Pos {
                line: 2,
                column: 10
            }
        );
    }

    #[test]
    fn empty_stream_has_no_document() {
        assert!(load("").unwrap().is_none());
        assert!(load("# only a comment\n").unwrap().is_none());
    }

    #[test]
    fn alias_bomb_is_bounded() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let err = load(&text).unwrap_err();
        assert!(err.message.contains("aliases expand"), "{}", err.message);
    }
}
