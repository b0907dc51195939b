//! The template syntax tree and the parser that builds it from tokens,
//! checking at parse time (as Go does) that functions and variables exist.

use crate::lex::{Tok, Token};

/// A node of a template body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// Literal text copied to the output.
    Text(String),
    /// `{{ pipeline }}`: printed unless it declares variables.
    Action { line: usize, pipe: Pipe },
    /// `{{ if }}`; `else if` chains are nested `If`s in `els`.
    If {
        line: usize,
        pipe: Pipe,
        then: Vec<Node>,
        els: Vec<Node>,
    },
    /// `{{ range }}` with its optional `else` body.
    Range {
        line: usize,
        pipe: Pipe,
        body: Vec<Node>,
        els: Vec<Node>,
    },
    /// `{{ with }}`; `else with` chains are nested `With`s in `els`.
    With {
        line: usize,
        pipe: Pipe,
        body: Vec<Node>,
        els: Vec<Node>,
    },
    /// `{{ template "name" pipeline }}`.
    Template {
        line: usize,
        name: String,
        pipe: Option<Pipe>,
    },
    /// `{{ break }}` inside a range.
    Break { line: usize },
    /// `{{ continue }}` inside a range.
    Continue { line: usize },
}

/// A pipeline with optional variable declarations (`$x :=`) or assignment (`$x =`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pipe {
    pub line: usize,
    pub decl: Vec<String>,
    pub assign: bool,
    pub cmds: Vec<Cmd>,
}

/// One command of a pipeline: a function, field or value and its arguments.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cmd {
    pub args: Vec<Arg>,
}

/// An operand of a command.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg {
    Dot,
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// `.a.b` relative to dot.
    Field(Vec<String>),
    /// `$x.a.b`.
    Var(String, Vec<String>),
    /// A function name.
    Func(String),
    /// `(pipeline).a.b`.
    Chain(Box<Pipe>, Vec<String>),
    /// `(pipeline)`.
    Pipe(Box<Pipe>),
}

impl Arg {
    /// How the operand is written, for error messages.
    pub(crate) fn describe(&self) -> String {
        let chain = |f: &[String]| f.iter().map(|s| format!(".{s}")).collect::<String>();
        match self {
            Arg::Dot => ".".into(),
            Arg::Nil => "nil".into(),
            Arg::Bool(b) => b.to_string(),
            Arg::Int(i) => i.to_string(),
            Arg::Float(f) => f.to_string(),
            Arg::Str(s) => format!("{s:?}"),
            Arg::Field(f) => chain(f),
            Arg::Var(v, f) => format!("{v}{}", chain(f)),
            Arg::Func(n) => n.clone(),
            Arg::Chain(_, f) => format!("(...){}", chain(f)),
            Arg::Pipe(_) => "(...)".into(),
        }
    }
}

/// The result of parsing one file: its own body and the `define`s it holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Parsed {
    pub main: Vec<Node>,
    pub defines: Vec<(String, Vec<Node>)>,
}

/// A parse failure: line and reason.
pub(crate) type ParseError = (usize, String);

/// What stopped a list: end of input, `{{end}}` or `{{else}}`.
enum Stop {
    Eof,
    End,
    Else,
}

struct Parser<'a> {
    toks: Vec<Token>,
    pos: usize,
    vars: Vec<String>,
    range_depth: usize,
    depth: usize,
    defines: Vec<(String, Vec<Node>)>,
    is_func: &'a dyn Fn(&str) -> bool,
}

/// Parses a token stream; `is_func` says which function names exist.
pub(crate) fn parse(
    toks: Vec<Token>,
    is_func: &dyn Fn(&str) -> bool,
) -> Result<Parsed, ParseError> {
    let mut p = Parser {
        toks,
        pos: 0,
        vars: vec!["$".into()],
        range_depth: 0,
        depth: 0,
        defines: Vec::new(),
        is_func,
    };
    let (main, end) = p.list()?;
    match end {
        Stop::Eof => Ok(Parsed {
            main,
            defines: p.defines,
        }),
        Stop::End => Err((p.line(), "unexpected {{end}}".into())),
        Stop::Else => Err((p.line(), "unexpected {{else}}".into())),
    }
}

fn tok_name(t: &Tok) -> String {
    match t {
        Tok::Text(_) => "text".into(),
        Tok::Open => "\"{{\"".into(),
        Tok::Close => "\"}}\"".into(),
        Tok::Ident(s) => format!("{s:?}"),
        Tok::Field(s) => format!("\".{s}\""),
        Tok::Dot => "\".\"".into(),
        Tok::Var(s) => format!("{s:?}"),
        Tok::Str(s) => format!("{s:?}"),
        Tok::Int(i) => i.to_string(),
        Tok::Float(f) => f.to_string(),
        Tok::Bool(b) => b.to_string(),
        Tok::Nil => "nil".into(),
        Tok::Pipe => "\"|\"".into(),
        Tok::LParen => "\"(\"".into(),
        Tok::RParen => "\")\"".into(),
        Tok::Declare => "\":=\"".into(),
        Tok::Assign => "\"=\"".into(),
        Tok::Comma => "\",\"".into(),
    }
}

impl Parser<'_> {
    fn line(&self) -> usize {
        self.toks
            .get(self.pos)
            .or_else(|| self.toks.last())
            .map_or(1, |t| t.line)
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }

    fn peek_at(&self, n: usize) -> Option<&Tok> {
        self.toks.get(self.pos + n).map(|t| &t.tok)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.toks.get(self.pos).cloned();
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    fn err<T>(&self, reason: impl Into<String>) -> Result<T, ParseError> {
        Err((self.line(), reason.into()))
    }

    fn expect_close(&mut self, context: &str) -> Result<(), ParseError> {
        match self.next() {
            Some(Token {
                tok: Tok::Close, ..
            }) => Ok(()),
            Some(t) => Err((
                t.line,
                format!("unexpected {} in {context}", tok_name(&t.tok)),
            )),
            None => self.err("unexpected EOF"),
        }
    }

    fn list(&mut self) -> Result<(Vec<Node>, Stop), ParseError> {
        let mut nodes = Vec::new();
        while let Some(t) = self.next() {
            match t.tok {
                Tok::Text(s) => nodes.push(Node::Text(s)),
                Tok::Open => {
                    let line = t.line;
                    match self.peek() {
                        Some(Tok::Ident(w)) if w == "end" => {
                            self.pos += 1;
                            self.expect_close("end")?;
                            return Ok((nodes, Stop::End));
                        }
                        Some(Tok::Ident(w)) if w == "else" => {
                            self.pos += 1;
                            return Ok((nodes, Stop::Else));
                        }
                        _ => {
                            if let Some(n) = self.action(line)? {
                                nodes.push(n);
                            }
                        }
                    }
                }
                other => return Err((t.line, format!("unexpected {}", tok_name(&other)))),
            }
        }
        Ok((nodes, Stop::Eof))
    }

    /// Parses the action after `{{`; `None` for `define` (stored aside).
    fn action(&mut self, line: usize) -> Result<Option<Node>, ParseError> {
        let keyword = match self.peek() {
            Some(Tok::Ident(w)) => w.clone(),
            _ => String::new(),
        };
        match keyword.as_str() {
            "if" | "range" | "with" => {
                self.pos += 1;
                self.control(&keyword, line).map(Some)
            }
            "define" => {
                self.pos += 1;
                if self.depth > 0 {
                    return self.err("unexpected define: only allowed at top level");
                }
                let name = self.template_name("define")?;
                self.expect_close("define")?;
                let body = self.definition()?;
                self.defines.push((name, body));
                Ok(None)
            }
            "block" => {
                self.pos += 1;
                if self.depth > 0 {
                    return self.err("unexpected block: only allowed at top level");
                }
                let name = self.template_name("block")?;
                let pipe = self.pipeline("block", false)?;
                self.expect_close("block")?;
                let body = self.definition()?;
                self.defines.push((name.clone(), body));
                Ok(Some(Node::Template {
                    line,
                    name,
                    pipe: Some(pipe),
                }))
            }
            "template" => {
                self.pos += 1;
                let name = self.template_name("template")?;
                let pipe = if self.peek() == Some(&Tok::Close) {
                    None
                } else {
                    Some(self.pipeline("template", false)?)
                };
                self.expect_close("template")?;
                Ok(Some(Node::Template { line, name, pipe }))
            }
            "break" | "continue" => {
                self.pos += 1;
                if self.range_depth == 0 {
                    return self.err(format!("{{{{{keyword}}}}} outside {{{{range}}}}"));
                }
                self.expect_close(&keyword)?;
                Ok(Some(if keyword == "break" {
                    Node::Break { line }
                } else {
                    Node::Continue { line }
                }))
            }
            _ => {
                let pipe = self.pipeline("command", false)?;
                self.expect_close("command")?;
                Ok(Some(Node::Action { line, pipe }))
            }
        }
    }

    fn template_name(&mut self, context: &str) -> Result<String, ParseError> {
        match self.next() {
            Some(Token {
                tok: Tok::Str(s), ..
            }) => Ok(s),
            Some(t) => Err((
                t.line,
                format!("unexpected {} in {context}", tok_name(&t.tok)),
            )),
            None => self.err("unexpected EOF"),
        }
    }

    /// Parses a `define`/`block` body up to its `end`, with fresh variables.
    fn definition(&mut self) -> Result<Vec<Node>, ParseError> {
        let saved = std::mem::replace(&mut self.vars, vec!["$".into()]);
        let saved_range = std::mem::replace(&mut self.range_depth, 0);
        self.depth += 1;
        let (body, end) = self.list()?;
        self.depth -= 1;
        self.vars = saved;
        self.range_depth = saved_range;
        match end {
            Stop::End => Ok(body),
            Stop::Else => self.err("unexpected {{else}} in define"),
            Stop::Eof => self.err("unexpected EOF in define"),
        }
    }

    fn control(&mut self, context: &str, line: usize) -> Result<Node, ParseError> {
        let mark = self.vars.len();
        self.depth += 1;
        let pipe = self.pipeline(context, context == "range")?;
        self.expect_close(context)?;
        if context == "range" {
            self.range_depth += 1;
        }
        let (body, end) = self.list()?;
        if context == "range" {
            self.range_depth -= 1;
        }
        let els = match end {
            Stop::End => Vec::new(),
            Stop::Eof => return self.err(format!("unexpected EOF in {context}")),
            Stop::Else => {
                let chained = matches!(self.peek(), Some(Tok::Ident(w)) if w == context && (w == "if" || w == "with"));
                if chained {
                    let l = self.line();
                    self.pos += 1;
                    vec![self.control(context, l)?]
                } else {
                    self.expect_close("else")?;
                    let (els, end) = self.list()?;
                    if !matches!(end, Stop::End) {
                        return self.err(format!("expected end in {context}"));
                    }
                    els
                }
            }
        };
        self.depth -= 1;
        self.vars.truncate(mark);
        Ok(match context {
            "if" => Node::If {
                line,
                pipe,
                then: body,
                els,
            },
            "range" => Node::Range {
                line,
                pipe,
                body,
                els,
            },
            _ => Node::With {
                line,
                pipe,
                body,
                els,
            },
        })
    }

    fn pipeline(&mut self, context: &str, allow_two: bool) -> Result<Pipe, ParseError> {
        let line = self.line();
        let mut decl = Vec::new();
        let mut assign = false;
        if let Some(Tok::Var(v)) = self.peek().cloned() {
            match (self.peek_at(1), self.peek_at(2), self.peek_at(3)) {
                (Some(Tok::Declare), ..) | (Some(Tok::Assign), ..) => {
                    assign = self.peek_at(1) == Some(&Tok::Assign);
                    decl.push(v);
                    self.pos += 2;
                }
                (Some(Tok::Comma), Some(Tok::Var(v2)), Some(Tok::Declare | Tok::Assign)) => {
                    if !allow_two {
                        return self.err(format!("too many declarations in {context}"));
                    }
                    assign = self.peek_at(3) == Some(&Tok::Assign);
                    decl.push(v);
                    decl.push(v2.clone());
                    self.pos += 4;
                }
                _ => {}
            }
        }
        for v in &decl {
            if assign {
                if !self.vars.contains(v) {
                    return self.err(format!("undefined variable {v:?}"));
                }
            } else {
                self.vars.push(v.clone());
            }
        }
        let mut cmds = Vec::new();
        loop {
            cmds.push(self.command()?);
            match self.peek() {
                Some(Tok::Pipe) => {
                    self.pos += 1;
                }
                _ => break,
            }
        }
        if cmds.iter().any(|c| c.args.is_empty()) {
            return self.err(format!("missing value for {context}"));
        }
        Ok(Pipe {
            line,
            decl,
            assign,
            cmds,
        })
    }

    fn command(&mut self) -> Result<Cmd, ParseError> {
        let mut args = Vec::new();
        while let Some(t) = self.peek() {
            if matches!(t, Tok::Pipe | Tok::Close | Tok::RParen) {
                break;
            }
            args.push(self.operand()?);
        }
        Ok(Cmd { args })
    }

    /// Field names directly attached (no space) to the previous operand.
    fn fields(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(t) = self.toks.get(self.pos) {
            match &t.tok {
                Tok::Field(name) if !t.space_before => {
                    out.push(name.clone());
                    self.pos += 1;
                }
                _ => break,
            }
        }
        out
    }

    fn operand(&mut self) -> Result<Arg, ParseError> {
        let Some(t) = self.next() else {
            return self.err("unexpected EOF");
        };
        Ok(match t.tok {
            Tok::Ident(name) => {
                if !(self.is_func)(&name) {
                    return Err((t.line, format!("function {name:?} not defined")));
                }
                Arg::Func(name)
            }
            Tok::Dot => Arg::Dot,
            Tok::Nil => Arg::Nil,
            Tok::Bool(b) => Arg::Bool(b),
            Tok::Int(i) => Arg::Int(i),
            Tok::Float(f) => Arg::Float(f),
            Tok::Str(s) => Arg::Str(s),
            Tok::Var(v) => {
                if !self.vars.contains(&v) {
                    return Err((t.line, format!("undefined variable {v:?}")));
                }
                Arg::Var(v, self.fields())
            }
            Tok::Field(first) => {
                let mut chain = vec![first];
                chain.extend(self.fields());
                Arg::Field(chain)
            }
            Tok::LParen => {
                let pipe = self.pipeline("parenthesized pipeline", false)?;
                match self.next() {
                    Some(Token {
                        tok: Tok::RParen, ..
                    }) => {}
                    _ => return Err((t.line, "unclosed left paren".into())),
                }
                let fields = self.fields();
                if fields.is_empty() {
                    Arg::Pipe(Box::new(pipe))
                } else {
                    Arg::Chain(Box::new(pipe), fields)
                }
            }
            other => {
                return Err((
                    t.line,
                    format!("unexpected {} in operand", tok_name(&other)),
                ));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lex::lex;

    fn p(src: &str) -> Result<Parsed, ParseError> {
        parse(lex(src).map_err(|e| (e.line, e.reason))?, &|n| {
            n == "f" || n == "g"
        })
    }

    #[test]
    fn pipeline_with_fields_and_parens() {
        let parsed = p("{{ .a.b | f (g $.c).d 1 }}").expect("parses");
        let Node::Action { pipe, .. } = &parsed.main[0] else {
            panic!("expected action, got {:?}", parsed.main);
        };
        assert_eq!(pipe.cmds.len(), 2);
        assert_eq!(
            pipe.cmds[0].args,
            vec![Arg::Field(vec!["a".into(), "b".into()])]
        );
        assert_eq!(pipe.cmds[1].args.len(), 3);
        assert!(matches!(&pipe.cmds[1].args[1], Arg::Chain(_, f) if f == &vec!["d".to_string()]));
    }

    #[test]
    fn else_if_chain_nests() {
        let parsed = p("{{if 1}}a{{else if 2}}b{{else}}c{{end}}").expect("parses");
        let Node::If { els, .. } = &parsed.main[0] else {
            panic!("expected if");
        };
        let Node::If {
            then, els: inner, ..
        } = &els[0]
        else {
            panic!("expected nested if");
        };
        assert_eq!(then, &vec![Node::Text("b".into())]);
        assert_eq!(inner, &vec![Node::Text("c".into())]);
    }

    #[test]
    fn defines_are_collected() {
        let parsed = p("x{{define \"a\"}}A{{end}}y").expect("parses");
        assert_eq!(
            parsed.main,
            vec![Node::Text("x".into()), Node::Text("y".into())]
        );
        assert_eq!(
            parsed.defines,
            vec![("a".to_string(), vec![Node::Text("A".into())])]
        );
    }

    #[test]
    fn parse_errors_name_the_problem() {
        assert_eq!(
            p("\n{{ nope 1 }}").expect_err("fails"),
            (2, "function \"nope\" not defined".into())
        );
        assert_eq!(
            p("{{ if 1 }}{{ $x := 1 }}{{ end }}{{ $x }}").expect_err("fails"),
            (1, "undefined variable \"$x\"".into())
        );
        assert_eq!(
            p("{{ break }}").expect_err("fails").1,
            "{{break}} outside {{range}}"
        );
        assert_eq!(
            p("{{ if 1 }}x").expect_err("fails").1,
            "unexpected EOF in if"
        );
        assert_eq!(p("{{ end }}").expect_err("fails").1, "unexpected {{end}}");
    }

    #[test]
    fn range_declares_two_variables() {
        let parsed = p("{{ range $k, $v := . }}{{ $k }}{{ end }}").expect("parses");
        let Node::Range { pipe, .. } = &parsed.main[0] else {
            panic!("expected range");
        };
        assert_eq!(pipe.decl, vec!["$k".to_string(), "$v".to_string()]);
        assert!(p("{{ $a, $b := 1 }}").is_err());
    }
}
