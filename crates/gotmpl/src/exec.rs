//! Executes parsed templates with Go text/template semantics: variable
//! scoping, `if`/`with`/`range` truth and iteration order, field access with
//! Helm's missingkey=zero, and the functions that need the template set.

use std::collections::HashMap;

use crate::error::Error;
use crate::format::sprint_v;
use crate::funcs::{self, FuncError};
use crate::parse::{Arg, Cmd, Node, Pipe};
use crate::value::Value;

/// How deep `include`/`template` may nest before rendering gives up
/// (Helm allows 1000; this stays well inside a 2 MiB thread stack).
pub(crate) const MAX_DEPTH: usize = 100;

/// What Go prints for a nil interface; Helm removes it from the output.
pub(crate) const NO_VALUE: &str = "<no value>";

/// One named template: a file's body or a `define`, with the file it came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tmpl {
    pub file: String,
    pub nodes: Vec<Node>,
}

/// All templates by name; files and defines share one namespace, as in Helm.
pub(crate) type Set = HashMap<String, Tmpl>;

#[derive(Debug, PartialEq)]
enum Flow {
    Normal,
    Break,
    Continue,
}

static NIL: Value = Value::Nil;

struct Exec<'a> {
    set: &'a Set,
    vars: Vec<(String, Value)>,
    depth: usize,
}

fn exec_err(file: &str, line: usize, reason: impl Into<String>) -> Error {
    Error::Exec {
        name: file.to_string(),
        line,
        reason: reason.into(),
    }
}

/// Renders template `name` with `dot` as `.` and `$`; Go's "<no value>"
/// placeholders stay in (the caller strips them once, as Helm does).
pub(crate) fn execute(set: &Set, name: &str, dot: &Value, depth: usize) -> Result<String, Error> {
    let t = set
        .get(name)
        .ok_or_else(|| Error::NoTemplate(name.to_string()))?;
    let mut ex = Exec {
        set,
        vars: vec![("$".to_string(), dot.clone())],
        depth,
    };
    let mut out = String::new();
    ex.walk(&t.file, &t.nodes, dot, &mut out)?;
    Ok(out)
}

/// Follows `.a.b.c` from `recv`; the last element may be the method
/// `.Files.Get` taking `args`.
/// [`field_chain_inner`] with failures naming the expression, as Go's
/// `at <.Values.a.b>: ...` does.
fn field_chain(
    file: &str,
    line: usize,
    expr: &Arg,
    recv: &Value,
    names: &[String],
    args: Option<Vec<Value>>,
) -> Result<Value, Error> {
    field_chain_inner(file, line, recv, names, args).map_err(|e| match e {
        Error::Exec { name, line, reason } => Error::Exec {
            name,
            line,
            reason: format!("at <{}>: {reason}", expr.describe()),
        },
        e => e,
    })
}

fn field_chain_inner(
    file: &str,
    line: usize,
    recv: &Value,
    names: &[String],
    args: Option<Vec<Value>>,
) -> Result<Value, Error> {
    let mut cur = recv;
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        cur = match cur {
            Value::Files(files) if name == "Get" => {
                let a = args.as_deref().unwrap_or(&[]);
                if !last {
                    return Err(exec_err(
                        file,
                        line,
                        "can't evaluate field of a method result",
                    ));
                }
                let [Value::Str(path)] = a else {
                    return Err(exec_err(
                        file,
                        line,
                        format!(
                            "wrong number or type of args for Get: want 1 string, got {}",
                            a.len()
                        ),
                    ));
                };
                return Ok(Value::Str(files.get(path).cloned().unwrap_or_default()));
            }
            Value::Map(m) => {
                if last && args.is_some() {
                    return Err(exec_err(
                        file,
                        line,
                        format!("{name} is not a method but has arguments"),
                    ));
                }
                m.get(name).unwrap_or(&NIL)
            }
            Value::Nil => {
                return Err(exec_err(
                    file,
                    line,
                    format!("nil pointer evaluating interface {{}}.{name}"),
                ));
            }
            // Values reach templates as Go interface{}, which is the type Go names.
            _ => {
                return Err(exec_err(
                    file,
                    line,
                    format!("can't evaluate field {name} in type interface {{}}"),
                ));
            }
        };
    }
    if args.is_some() && names.is_empty() {
        return Err(exec_err(file, line, "can't give argument to non-function"));
    }
    Ok(cur.clone())
}

impl Exec<'_> {
    fn walk(
        &mut self,
        file: &str,
        nodes: &[Node],
        dot: &Value,
        out: &mut String,
    ) -> Result<Flow, Error> {
        for node in nodes {
            let flow = match node {
                Node::Text(s) => {
                    out.push_str(s);
                    Flow::Normal
                }
                Node::Action { pipe, .. } => {
                    let v = self.pipeline(file, pipe, dot)?;
                    if pipe.decl.is_empty() {
                        match v {
                            Value::Nil => out.push_str(NO_VALUE),
                            v => out.push_str(&sprint_v(&v)),
                        }
                    }
                    Flow::Normal
                }
                Node::If {
                    pipe, then, els, ..
                } => {
                    let mark = self.vars.len();
                    let v = self.pipeline(file, pipe, dot)?;
                    let flow = if v.is_true() {
                        self.walk(file, then, dot, out)?
                    } else {
                        self.walk(file, els, dot, out)?
                    };
                    self.vars.truncate(mark);
                    flow
                }
                Node::With {
                    pipe, body, els, ..
                } => {
                    let mark = self.vars.len();
                    let v = self.pipeline(file, pipe, dot)?;
                    let flow = if v.is_true() {
                        self.walk(file, body, &v, out)?
                    } else {
                        self.walk(file, els, dot, out)?
                    };
                    self.vars.truncate(mark);
                    flow
                }
                Node::Range {
                    line,
                    pipe,
                    body,
                    els,
                } => self.range(file, *line, pipe, body, els, dot, out)?,
                Node::Template { line, name, pipe } => {
                    let d = match pipe {
                        Some(p) => self.pipeline(file, p, dot)?,
                        None => Value::Nil,
                    };
                    out.push_str(&self.call_template(file, *line, name, &d)?);
                    Flow::Normal
                }
                Node::Break { .. } => Flow::Break,
                Node::Continue { .. } => Flow::Continue,
            };
            if flow != Flow::Normal {
                return Ok(flow);
            }
        }
        Ok(Flow::Normal)
    }

    #[allow(clippy::too_many_arguments)]
    fn range(
        &mut self,
        file: &str,
        line: usize,
        pipe: &Pipe,
        body: &[Node],
        els: &[Node],
        dot: &Value,
        out: &mut String,
    ) -> Result<Flow, Error> {
        let mark = self.vars.len();
        let v = self.pipeline(file, pipe, dot)?;
        let items: Vec<(Value, Value)> = match v {
            Value::List(l) => l
                .into_iter()
                .enumerate()
                .map(|(i, x)| (Value::Int(i as i64), x))
                .collect(),
            Value::Map(m) => m.into_iter().map(|(k, x)| (Value::Str(k), x)).collect(),
            Value::Int(n) => {
                if pipe.decl.len() > 1 {
                    return Err(exec_err(
                        file,
                        line,
                        "can't use two variables when ranging over an int",
                    ));
                }
                (0..n.max(0))
                    .map(|i| (Value::Int(i), Value::Int(i)))
                    .collect()
            }
            Value::Nil => Vec::new(),
            other => {
                return Err(exec_err(
                    file,
                    line,
                    format!("range can't iterate over {}", sprint_v(&other)),
                ));
            }
        };
        if items.is_empty() {
            let flow = self.walk(file, els, dot, out)?;
            self.vars.truncate(mark);
            return Ok(flow);
        }
        let inner = self.vars.len();
        for (k, x) in items {
            if pipe.assign {
                let first = if pipe.decl.len() > 1 {
                    k.clone()
                } else {
                    x.clone()
                };
                if let Some(name) = pipe.decl.first() {
                    self.set_var(name, first);
                }
                if let Some(name) = pipe.decl.get(1) {
                    self.set_var(name, x.clone());
                }
            } else {
                if !pipe.decl.is_empty()
                    && let Some(slot) = self.vars.get_mut(inner - 1)
                {
                    slot.1 = x.clone();
                }
                if pipe.decl.len() > 1
                    && let Some(slot) = self.vars.get_mut(inner - 2)
                {
                    slot.1 = k;
                }
            }
            let flow = self.walk(file, body, &x, out)?;
            self.vars.truncate(inner);
            if flow == Flow::Break {
                break;
            }
        }
        self.vars.truncate(mark);
        Ok(Flow::Normal)
    }

    fn set_var(&mut self, name: &str, v: Value) {
        if let Some(slot) = self.vars.iter_mut().rev().find(|(n, _)| n == name) {
            slot.1 = v;
        }
    }

    fn call_template(
        &self,
        file: &str,
        line: usize,
        name: &str,
        dot: &Value,
    ) -> Result<String, Error> {
        if !self.set.contains_key(name) {
            return Err(exec_err(
                file,
                line,
                format!("no template {name:?} defined"),
            ));
        }
        if self.depth >= MAX_DEPTH {
            return Err(exec_err(
                file,
                line,
                format!(
                    "rendering template has a nested reference name: {name}: exceeded max depth {MAX_DEPTH}"
                ),
            ));
        }
        execute(self.set, name, dot, self.depth + 1)
    }

    fn pipeline(&mut self, file: &str, pipe: &Pipe, dot: &Value) -> Result<Value, Error> {
        let mut val = None;
        for cmd in &pipe.cmds {
            val = Some(self.command(file, pipe.line, cmd, dot, val.take())?);
        }
        let v = val.unwrap_or(Value::Nil);
        for name in &pipe.decl {
            if pipe.assign {
                self.set_var(name, v.clone());
            } else {
                self.vars.push((name.clone(), v.clone()));
            }
        }
        Ok(v)
    }

    fn args(
        &mut self,
        file: &str,
        line: usize,
        rest: &[Arg],
        dot: &Value,
        fin: Option<Value>,
    ) -> Result<Vec<Value>, Error> {
        let mut out = Vec::with_capacity(rest.len() + 1);
        for a in rest {
            out.push(self.arg(file, line, a, dot)?);
        }
        out.extend(fin);
        Ok(out)
    }

    fn command(
        &mut self,
        file: &str,
        line: usize,
        cmd: &Cmd,
        dot: &Value,
        fin: Option<Value>,
    ) -> Result<Value, Error> {
        let Some((first, rest)) = cmd.args.split_first() else {
            return Err(exec_err(file, line, "empty command"));
        };
        let has_args = !rest.is_empty() || fin.is_some();
        match first {
            Arg::Func(name) => self.call(file, line, name, rest, dot, fin),
            Arg::Field(names) => {
                let args = if has_args {
                    Some(self.args(file, line, rest, dot, fin)?)
                } else {
                    None
                };
                field_chain(file, line, first, dot, names, args)
            }
            Arg::Var(v, names) if !names.is_empty() => {
                let args = if has_args {
                    Some(self.args(file, line, rest, dot, fin)?)
                } else {
                    None
                };
                let recv = self.var(file, line, v)?;
                field_chain(file, line, first, &recv, names, args)
            }
            Arg::Chain(p, names) => {
                let recv = self.pipeline(file, p, dot)?;
                let args = if has_args {
                    Some(self.args(file, line, rest, dot, fin)?)
                } else {
                    None
                };
                field_chain(file, line, first, &recv, names, args)
            }
            Arg::Nil => Err(exec_err(file, line, "nil is not a command")),
            other => {
                if has_args {
                    return Err(exec_err(
                        file,
                        line,
                        format!("can't give argument to non-function {}", other.describe()),
                    ));
                }
                self.arg(file, line, other, dot)
            }
        }
    }

    fn var(&self, file: &str, line: usize, name: &str) -> Result<Value, Error> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| exec_err(file, line, format!("undefined variable: {name}")))
    }

    fn arg(&mut self, file: &str, line: usize, arg: &Arg, dot: &Value) -> Result<Value, Error> {
        Ok(match arg {
            Arg::Dot => dot.clone(),
            Arg::Nil => Value::Nil,
            Arg::Bool(b) => Value::Bool(*b),
            Arg::Int(i) => Value::Int(*i),
            Arg::Float(f) => Value::Float(*f),
            Arg::Str(s) => Value::Str(s.clone()),
            Arg::Field(names) => field_chain(file, line, arg, dot, names, None)?,
            Arg::Var(v, names) => {
                let recv = self.var(file, line, v)?;
                field_chain(file, line, arg, &recv, names, None)?
            }
            Arg::Func(name) => self.call(file, line, name, &[], dot, None)?,
            Arg::Chain(p, names) => {
                let recv = self.pipeline(file, p, dot)?;
                field_chain(file, line, arg, &recv, names, None)?
            }
            Arg::Pipe(p) => self.pipeline(file, p, dot)?,
        })
    }

    fn call(
        &mut self,
        file: &str,
        line: usize,
        name: &str,
        rest: &[Arg],
        dot: &Value,
        fin: Option<Value>,
    ) -> Result<Value, Error> {
        if name == "and" || name == "or" {
            let total = rest.len() + usize::from(fin.is_some());
            if total == 0 {
                return Err(exec_err(
                    file,
                    line,
                    format!("wrong number of args for {name}: want at least 1 got 0"),
                ));
            }
            let mut last = Value::Nil;
            for a in rest {
                let v = self.arg(file, line, a, dot)?;
                if (name == "and") != v.is_true() {
                    return Ok(v);
                }
                last = v;
            }
            return Ok(fin.unwrap_or(last));
        }
        let args = self.args(file, line, rest, dot, fin)?;
        match name {
            "include" => {
                let [Value::Str(tname), data] = args.as_slice() else {
                    return Err(exec_err(
                        file,
                        line,
                        "error calling include: want a template name and a value",
                    ));
                };
                if !self.set.contains_key(tname) {
                    return Err(exec_err(
                        file,
                        line,
                        format!("error calling include: no template {tname:?} defined"),
                    ));
                }
                Ok(Value::Str(self.call_template(file, line, tname, data)?))
            }
            "tpl" => {
                let [Value::Str(text), data] = args.as_slice() else {
                    return Err(exec_err(
                        file,
                        line,
                        "error calling tpl: want a template string and a value",
                    ));
                };
                let parsed = crate::parse_source(file, text).map_err(|e| match e {
                    Error::Parse { reason, .. } => {
                        exec_err(file, line, format!("error calling tpl: {reason}"))
                    }
                    e => e,
                })?;
                if !parsed.defines.is_empty() {
                    return Err(exec_err(
                        file,
                        line,
                        "error calling tpl: define inside tpl is not supported",
                    ));
                }
                if self.depth >= MAX_DEPTH {
                    return Err(exec_err(
                        file,
                        line,
                        "error calling tpl: exceeded max depth",
                    ));
                }
                let mut ex = Exec {
                    set: self.set,
                    vars: vec![("$".to_string(), data.clone())],
                    depth: self.depth + 1,
                };
                let mut out = String::new();
                ex.walk(file, &parsed.main, data, &mut out)?;
                Ok(Value::Str(out))
            }
            _ => funcs::call(name, &args).map_err(|e| match e {
                FuncError::Reason(r) => exec_err(file, line, format!("error calling {name}: {r}")),
                FuncError::Required(message) => Error::Required {
                    name: file.to_string(),
                    line,
                    message,
                },
                FuncError::Fail(message) => Error::Fail {
                    name: file.to_string(),
                    line,
                    message,
                },
            }),
        }
    }
}
