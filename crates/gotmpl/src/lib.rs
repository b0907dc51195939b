//! A renderer for the subset of Go `text/template` plus Sprig/Helm functions
//! that a normal Helm chart uses, so `rivora install` can render Rivora's
//! chart without a helm binary and get the same objects `helm template` does.
//!
//! Semantics follow Go (whitespace trimming, `%v` printing, truth, variable
//! scope, sorted map iteration) and Helm (values numbers are float64,
//! `missingkey=zero` with "<no value>" removed, defines shared by all files).
//!
//! Functions: Go's `and or not eq ne lt le gt ge len index print printf
//! println`; Sprig/Helm's `include tpl required fail default empty coalesce
//! ternary quote squote toYaml toJson nindent indent trim trimSuffix
//! trimPrefix trunc lower upper replace contains hasPrefix hasSuffix hasKey
//! dict list join int int64 toString b64enc`, and `.Files.Get`. Anything else
//! (e.g. `sha256sum`: no SHA-256 crate in the workspace) is a parse error
//! `function "x" not defined`, so an unsupported chart fails loudly.

mod error;
mod exec;
mod format;
mod funcs;
mod json;
mod lex;
mod parse;
mod value;
mod yaml;

#[cfg(test)]
mod tests;

pub use error::Error;
pub use value::Value;

use exec::{Set, Tmpl};
use parse::{Node, Parsed};

/// A chart's templates: every added file plus every `define` from any file,
/// in one namespace as Helm builds it.
#[derive(Debug, Clone, Default)]
pub struct Templates {
    set: Set,
}

/// Lexes and parses `source` for file `name`, turning failures into `Error::Parse`.
pub(crate) fn parse_source(name: &str, source: &str) -> Result<Parsed, Error> {
    let perr = |line, reason| Error::Parse {
        name: name.to_string(),
        line,
        reason,
    };
    let toks = lex::lex(source).map_err(|e| perr(e.line, e.reason))?;
    parse::parse(toks, &funcs::is_defined).map_err(|(line, reason)| perr(line, reason))
}

/// Go keeps an existing template when a redefinition is empty (whitespace only).
fn is_empty_tree(nodes: &[Node]) -> bool {
    nodes
        .iter()
        .all(|n| matches!(n, Node::Text(t) if t.trim().is_empty()))
}

impl Templates {
    /// An empty set.
    pub fn new() -> Templates {
        Templates::default()
    }

    fn insert(&mut self, name: String, t: Tmpl) {
        if is_empty_tree(&t.nodes) && self.set.contains_key(&name) {
            return;
        }
        self.set.insert(name, t);
    }

    /// Parses one file; its `{{ define }}`s become visible to every file
    /// (Helm shares them across the chart). A later definition of the same
    /// name replaces an earlier one unless it is empty.
    pub fn add(&mut self, name: &str, source: &str) -> Result<(), Error> {
        let parsed = parse_source(name, source)?;
        for (dname, nodes) in parsed.defines {
            self.insert(
                dname,
                Tmpl {
                    file: name.to_string(),
                    nodes,
                },
            );
        }
        self.insert(
            name.to_string(),
            Tmpl {
                file: name.to_string(),
                nodes: parsed.main,
            },
        );
        Ok(())
    }

    /// Executes file (or define) `name` with `data` as dot (and `$`), and
    /// removes Go's "<no value>" markers as Helm does.
    pub fn render(&self, name: &str, data: &Value) -> Result<String, Error> {
        let out = exec::execute(&self.set, name, data, 0)?;
        Ok(out.replace(exec::NO_VALUE, ""))
    }
}
