//! Splits a template source into text and action tokens, applying Go's
//! `{{-`/`-}}` whitespace trimming and dropping `{{/* */}}` comments here so
//! the parser never sees them.

/// One lexical item of a template; text between actions is a single item.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// Literal text outside actions, already trimmed by adjacent markers.
    Text(String),
    /// `{{` (with or without trim marker).
    Open,
    /// `}}` (with or without trim marker).
    Close,
    /// A bare word: function name or keyword (`if`, `range`, ...).
    Ident(String),
    /// `.name` (one element; chains are consecutive `Field`s without space).
    Field(String),
    /// A lone `.`.
    Dot,
    /// `$` or `$name`, including the `$`.
    Var(String),
    /// A quoted or raw string literal, unescaped.
    Str(String),
    /// An integer constant (decimal, hex, octal, binary or a 'c' rune).
    Int(i64),
    /// A floating-point constant.
    Float(f64),
    /// `true` / `false`.
    Bool(bool),
    /// `nil`.
    Nil,
    /// `|`.
    Pipe,
    /// `(`.
    LParen,
    /// `)`.
    RParen,
    /// `:=`.
    Declare,
    /// `=`.
    Assign,
    /// `,`.
    Comma,
}

/// A token with the source line it starts on and whether whitespace precedes
/// it (Go needs that to tell `.a.b` from `.a .b`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub tok: Tok,
    pub line: usize,
    pub space_before: bool,
}

/// A lexing failure: the line and the reason, before the file name is known.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LexError {
    pub line: usize,
    pub reason: String,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_alnum(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

fn lines_in(s: &str) -> usize {
    s.bytes().filter(|&b| b == b'\n').count()
}

/// Tokenises `src` completely.
pub(crate) fn lex(src: &str) -> Result<Vec<Token>, LexError> {
    let mut out = Vec::new();
    let bytes = src.as_bytes();
    let mut pos = 0usize;
    let mut line = 1usize;
    let mut trim_next_text = false;
    loop {
        let rest = &src[pos..];
        let open = rest.find("{{");
        let text_end = open.map_or(src.len(), |i| pos + i);
        let mut text = &src[pos..text_end];
        let trim_left = open.is_some()
            && bytes.get(text_end + 2) == Some(&b'-')
            && bytes.get(text_end + 3).is_some_and(|&b| is_space(b));
        let text_line = line;
        line += lines_in(text);
        if trim_next_text {
            text = text.trim_start_matches([' ', '\t', '\r', '\n']);
        }
        if trim_left {
            text = text.trim_end_matches([' ', '\t', '\r', '\n']);
        }
        if !text.is_empty() {
            // The line of the first kept character: count newlines trimmed away.
            let start = text.as_ptr() as usize - src.as_ptr() as usize;
            let l = text_line + lines_in(&src[pos..start]);
            out.push(Token {
                tok: Tok::Text(text.to_string()),
                line: l,
                space_before: false,
            });
        }
        let Some(_) = open else { break };
        pos = text_end + 2;
        if trim_left {
            pos += 2;
        }
        // Comment: `{{/*` or `{{- /*` ... `*/}}` or `*/ -}}`.
        if src[pos..].starts_with("/*") {
            let Some(end) = src[pos + 2..].find("*/") else {
                return Err(LexError {
                    line,
                    reason: "unclosed comment".into(),
                });
            };
            let after = pos + 2 + end + 2;
            line += lines_in(&src[pos..after]);
            let (close_len, trim) = at_close(bytes, after).ok_or_else(|| LexError {
                line,
                reason: "comment ends before closing delimiter".into(),
            })?;
            pos = after + close_len;
            trim_next_text = trim;
            continue;
        }
        out.push(Token {
            tok: Tok::Open,
            line,
            space_before: false,
        });
        let (next, new_line, trim) = lex_action(src, pos, line, &mut out)?;
        pos = next;
        line = new_line;
        trim_next_text = trim;
    }
    Ok(out)
}

/// If a closing delimiter starts at `i`, its length and whether it trims.
fn at_close(bytes: &[u8], i: usize) -> Option<(usize, bool)> {
    if bytes.get(i).is_some_and(|&b| is_space(b))
        && bytes.get(i + 1) == Some(&b'-')
        && bytes.get(i + 2) == Some(&b'}')
        && bytes.get(i + 3) == Some(&b'}')
    {
        return Some((4, true));
    }
    if bytes.get(i) == Some(&b'}') && bytes.get(i + 1) == Some(&b'}') {
        return Some((2, false));
    }
    None
}

/// Lexes the inside of one action starting at `pos`; returns the position
/// after the closing delimiter, the current line, and whether it trims.
fn lex_action(
    src: &str,
    mut pos: usize,
    mut line: usize,
    out: &mut Vec<Token>,
) -> Result<(usize, usize, bool), LexError> {
    let bytes = src.as_bytes();
    let mut space = false;
    loop {
        if let Some((len, trim)) = at_close(bytes, pos) {
            if trim {
                line += lines_in(&src[pos..pos + 1]);
            }
            out.push(Token {
                tok: Tok::Close,
                line,
                space_before: space,
            });
            return Ok((pos + len, line, trim));
        }
        let Some(c) = src[pos..].chars().next() else {
            return Err(LexError {
                line,
                reason: "unclosed action".into(),
            });
        };
        let start_line = line;
        let mut push = |tok: Tok, space: &mut bool| {
            out.push(Token {
                tok,
                line: start_line,
                space_before: *space,
            });
            *space = false;
        };
        match c {
            ' ' | '\t' | '\r' | '\n' => {
                if c == '\n' {
                    line += 1;
                }
                space = true;
                pos += 1;
            }
            '|' => {
                push(Tok::Pipe, &mut space);
                pos += 1;
            }
            '(' => {
                push(Tok::LParen, &mut space);
                pos += 1;
            }
            ')' => {
                push(Tok::RParen, &mut space);
                pos += 1;
            }
            ',' => {
                push(Tok::Comma, &mut space);
                pos += 1;
            }
            '=' => {
                push(Tok::Assign, &mut space);
                pos += 1;
            }
            ':' => {
                if bytes.get(pos + 1) != Some(&b'=') {
                    return Err(LexError {
                        line,
                        reason: "expected :=".into(),
                    });
                }
                push(Tok::Declare, &mut space);
                pos += 2;
            }
            '"' => {
                let (s, len) =
                    lex_quoted(&src[pos..]).map_err(|reason| LexError { line, reason })?;
                push(Tok::Str(s), &mut space);
                pos += len;
            }
            '`' => {
                let Some(end) = src[pos + 1..].find('`') else {
                    return Err(LexError {
                        line,
                        reason: "unterminated raw quoted string".into(),
                    });
                };
                let s = &src[pos + 1..pos + 1 + end];
                line += lines_in(s);
                push(Tok::Str(s.to_string()), &mut space);
                pos += end + 2;
            }
            '\'' => {
                let (v, len) = lex_char(&src[pos..]).map_err(|reason| LexError { line, reason })?;
                push(Tok::Int(v), &mut space);
                pos += len;
            }
            '$' => {
                let name_len = src[pos + 1..]
                    .find(|c: char| !is_alnum(c))
                    .unwrap_or(src.len() - pos - 1);
                push(
                    Tok::Var(src[pos..pos + 1 + name_len].to_string()),
                    &mut space,
                );
                pos += 1 + name_len;
            }
            '.' => {
                let next = src[pos + 1..].chars().next();
                if next.is_some_and(|c| c.is_ascii_digit()) {
                    let (tok, len) =
                        lex_number(&src[pos..]).map_err(|reason| LexError { line, reason })?;
                    push(tok, &mut space);
                    pos += len;
                } else if next.is_some_and(is_alnum) {
                    let name_len = src[pos + 1..]
                        .find(|c: char| !is_alnum(c))
                        .unwrap_or(src.len() - pos - 1);
                    push(
                        Tok::Field(src[pos + 1..pos + 1 + name_len].to_string()),
                        &mut space,
                    );
                    pos += 1 + name_len;
                } else {
                    push(Tok::Dot, &mut space);
                    pos += 1;
                }
            }
            '0'..='9' | '-' | '+' => {
                let (tok, len) =
                    lex_number(&src[pos..]).map_err(|reason| LexError { line, reason })?;
                push(tok, &mut space);
                pos += len;
            }
            c if is_alnum(c) => {
                let len = src[pos..]
                    .find(|c: char| !is_alnum(c))
                    .unwrap_or(src.len() - pos);
                let word = &src[pos..pos + len];
                let tok = match word {
                    "true" => Tok::Bool(true),
                    "false" => Tok::Bool(false),
                    "nil" => Tok::Nil,
                    w => Tok::Ident(w.to_string()),
                };
                push(tok, &mut space);
                pos += len;
            }
            c => {
                return Err(LexError {
                    line,
                    reason: format!("unrecognized character in action: {c:?}"),
                });
            }
        }
    }
}

/// Lexes a Go interpreted string literal at the start of `s`; returns the
/// value and the length consumed.
fn lex_quoted(s: &str) -> Result<(String, usize), String> {
    let mut out = String::new();
    let mut chars = s.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, i + 1)),
            '\n' => break,
            '\\' => {
                let Some((_, e)) = chars.next() else { break };
                match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'a' => out.push('\u{7}'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'v' => out.push('\u{b}'),
                    '\\' => out.push('\\'),
                    '"' => out.push('"'),
                    '\'' => out.push('\''),
                    'x' | 'u' | 'U' => {
                        let n = match e {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let hex: String = (0..n)
                            .filter_map(|_| chars.next().map(|(_, c)| c))
                            .collect();
                        let v = u32::from_str_radix(&hex, 16)
                            .map_err(|_| format!("invalid escape \\{e}{hex}"))?;
                        let ch = char::from_u32(v)
                            .ok_or_else(|| format!("invalid escape \\{e}{hex}"))?;
                        out.push(ch);
                    }
                    '0'..='7' => {
                        let mut oct = String::from(e);
                        for _ in 0..2 {
                            if let Some((_, c)) = chars.next() {
                                oct.push(c);
                            }
                        }
                        let v = u32::from_str_radix(&oct, 8)
                            .map_err(|_| format!("invalid escape \\{oct}"))?;
                        let ch =
                            char::from_u32(v).ok_or_else(|| format!("invalid escape \\{oct}"))?;
                        out.push(ch);
                    }
                    other => return Err(format!("unknown escape sequence \\{other}")),
                }
            }
            c => out.push(c),
        }
    }
    Err("unterminated quoted string".into())
}

/// Lexes a rune constant like `'a'` or `'\n'` (Go treats it as an integer).
fn lex_char(s: &str) -> Result<(i64, usize), String> {
    let end = s[1..].find('\'').ok_or("unterminated character constant")? + 1;
    let inner = &s[1..end];
    let (v, _) = lex_quoted(&format!("\"{}\"", inner.replace('"', "\\\"")))?;
    let mut cs = v.chars();
    match (cs.next(), cs.next()) {
        (Some(c), None) => Ok((c as i64, end + 1)),
        _ => Err(format!("malformed character constant: {}", &s[..end + 1])),
    }
}

/// Lexes a Go number constant; decides between int and float like Go does
/// (a `.`, `e` or `E` in decimal text makes it a float).
fn lex_number(s: &str) -> Result<(Tok, usize), String> {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+') | Some(b'-')) {
        i += 1;
    }
    let digits_start = i;
    let is_hex = s[i..].starts_with("0x") || s[i..].starts_with("0X");
    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
        // A sign is only allowed right after an exponent marker.
        i += 1;
        if i < b.len() && matches!(b[i], b'+' | b'-') && !is_hex && matches!(b[i - 1], b'e' | b'E')
        {
            i += 1;
        }
    }
    let text = &s[..i];
    if i == digits_start {
        return Err(format!("bad number syntax: {text:?}"));
    }
    let clean: String = text.chars().filter(|&c| c != '_').collect();
    let (neg, body) = match clean.strip_prefix('-') {
        Some(r) => (true, r.to_string()),
        None => (false, clean.trim_start_matches('+').to_string()),
    };
    let radix_int = |digits: &str, radix: u32| i64::from_str_radix(digits, radix).ok();
    let lower = body.to_ascii_lowercase();
    let int = if let Some(h) = lower.strip_prefix("0x") {
        radix_int(h, 16)
    } else if let Some(o) = lower.strip_prefix("0o") {
        radix_int(o, 8)
    } else if let Some(bn) = lower.strip_prefix("0b") {
        radix_int(bn, 2)
    } else if lower.len() > 1 && lower.starts_with('0') && lower.bytes().all(|c| c.is_ascii_digit())
    {
        radix_int(&lower[1..], 8)
    } else if lower.bytes().all(|c| c.is_ascii_digit()) {
        lower.parse::<i64>().ok()
    } else {
        None
    };
    if let Some(v) = int {
        return Ok((Tok::Int(if neg { -v } else { v }), i));
    }
    if !lower.starts_with("0x")
        && let Ok(f) = lower.parse::<f64>()
        && lower
            .bytes()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'+' | b'-'))
    {
        return Ok((Tok::Float(if neg { -f } else { f }), i));
    }
    Err(format!("bad number syntax: {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok> {
        lex(src)
            .expect("lexes")
            .into_iter()
            .map(|t| t.tok)
            .collect()
    }

    #[test]
    fn trim_markers_remove_all_adjacent_whitespace() {
        assert_eq!(
            toks("a \n {{- .x -}} \n\t b"),
            vec![
                Tok::Text("a".into()),
                Tok::Open,
                Tok::Field("x".into()),
                Tok::Close,
                Tok::Text("b".into())
            ]
        );
    }

    #[test]
    fn minus_without_space_is_a_number() {
        assert_eq!(toks("{{-3}}"), vec![Tok::Open, Tok::Int(-3), Tok::Close]);
    }

    #[test]
    fn comments_vanish_and_still_trim() {
        assert_eq!(
            toks("a\n{{- /* hi\n there */ -}}\nb"),
            vec![Tok::Text("a".into()), Tok::Text("b".into())]
        );
        assert_eq!(toks("{{/* x */}}"), Vec::<Tok>::new());
    }

    #[test]
    fn field_chains_and_variables() {
        let t = lex("{{ $x.a.b .c }}").expect("lexes");
        let kinds: Vec<(Tok, bool)> = t.into_iter().map(|t| (t.tok, t.space_before)).collect();
        assert_eq!(
            kinds,
            vec![
                (Tok::Open, false),
                (Tok::Var("$x".into()), true),
                (Tok::Field("a".into()), false),
                (Tok::Field("b".into()), false),
                (Tok::Field("c".into()), true),
                (Tok::Close, true),
            ]
        );
    }

    #[test]
    fn literals() {
        assert_eq!(
            toks(r#"{{ "a\n\"}}" `r\n` 1.5 0x10 1e3 'a' true nil }}"#),
            vec![
                Tok::Open,
                Tok::Str("a\n\"}}".into()),
                Tok::Str("r\\n".into()),
                Tok::Float(1.5),
                Tok::Int(16),
                Tok::Float(1000.0),
                Tok::Int(97),
                Tok::Bool(true),
                Tok::Nil,
                Tok::Close
            ]
        );
    }

    #[test]
    fn lines_are_counted() {
        let t = lex("a\nb\n{{ x }}\n{{\n y }}").expect("lexes");
        let lines: Vec<usize> = t.iter().map(|t| t.line).collect();
        assert_eq!(lines, vec![1, 3, 3, 3, 3, 4, 5, 5]);
    }

    #[test]
    fn unclosed_action_is_an_error() {
        let e = lex("x\n{{ .a ").expect_err("must fail");
        assert_eq!(e.line, 2);
        assert_eq!(e.reason, "unclosed action");
    }
}
