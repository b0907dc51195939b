//! Go `fmt` printing of values (`%v`, `print`, `printf`, `strconv.Quote`),
//! because rendered YAML must contain exactly what Helm prints, e.g. a
//! values number 1000000 prints as `1e+06`.

use crate::value::Value;

/// Shortest round-trip decimal digits of a finite non-negative `f` and the
/// position of the decimal point (`0.0123` is ("123", -1)).
pub(crate) fn float_digits(f: f64) -> (String, i32) {
    if f == 0.0 {
        return ("0".into(), 1);
    }
    let e = format!("{f:e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    (digits, exp.parse::<i32>().unwrap_or(0) + 1)
}

/// `%f` layout of digits with the point at `dp`, without exponent.
pub(crate) fn fixed(digits: &str, dp: i32) -> String {
    let nd = digits.len() as i32;
    if dp <= 0 {
        format!("0.{}{digits}", "0".repeat((-dp) as usize))
    } else if dp >= nd {
        format!("{digits}{}", "0".repeat((dp - nd) as usize))
    } else {
        format!("{}.{}", &digits[..dp as usize], &digits[dp as usize..])
    }
}

/// `%e` layout with shortest digits: `d.ddde±XX`.
pub(crate) fn exponent(digits: &str, dp: i32) -> String {
    let exp = dp - 1;
    let mut s = digits[..1].to_string();
    if digits.len() > 1 {
        s.push('.');
        s.push_str(&digits[1..]);
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{s}e{sign}{:02}", exp.abs())
}

fn non_finite(f: f64) -> Option<String> {
    if f.is_nan() {
        Some("NaN".into())
    } else if f.is_infinite() {
        Some(if f > 0.0 { "+Inf" } else { "-Inf" }.into())
    } else {
        None
    }
}

/// Go's `%v` of a float64: `strconv.FormatFloat(f, 'g', -1, 64)`, which uses
/// the exponent form when the exponent is < -4 or >= 6 (shortest precision
/// counts as 6 for that decision).
pub(crate) fn format_float(f: f64) -> String {
    if let Some(s) = non_finite(f) {
        return s;
    }
    let sign = if f.is_sign_negative() { "-" } else { "" };
    let (digits, dp) = float_digits(f.abs());
    let exp = dp - 1;
    let body = if !(-4..6).contains(&exp) {
        exponent(&digits, dp)
    } else {
        fixed(&digits, dp)
    };
    format!("{sign}{body}")
}

/// Go's `%v` of any value (`<nil>`, `[a b]`, `map[k:v]`).
pub(crate) fn sprint_v(v: &Value) -> String {
    match v {
        Value::Nil => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => format_float(*f),
        Value::Str(s) => s.clone(),
        Value::List(l) => format!("[{}]", l.iter().map(sprint_v).collect::<Vec<_>>().join(" ")),
        Value::Map(m) => format!(
            "map[{}]",
            m.iter()
                .map(|(k, v)| format!("{k}:{}", sprint_v(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Value::Files(f) => format!(
            "map[{}]",
            f.iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// Go's `fmt.Sprint`: operands printed with `%v`, a space between two
/// operands when neither is a string.
pub(crate) fn sprint(args: &[Value]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 && !matches!(a, Value::Str(_)) && !matches!(args[i - 1], Value::Str(_)) {
            out.push(' ');
        }
        out.push_str(&sprint_v(a));
    }
    out
}

/// Go's `fmt.Sprintln`: always spaces, then a newline.
pub(crate) fn sprintln(args: &[Value]) -> String {
    let mut s = args.iter().map(sprint_v).collect::<Vec<_>>().join(" ");
    s.push('\n');
    s
}

/// Whether Go's `strconv.IsPrint` holds (approximated: graphic characters
/// and the ASCII space; not other spaces, format or private-use characters).
fn is_print(c: char) -> bool {
    let u = c as u32;
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(u,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F
        | 0x202A..=0x202E | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF)
}

fn quote_with(s: &str, q: char) -> String {
    let mut out = String::new();
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if is_print(c) => out.push(c),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push(q);
    out
}

/// Go's `strconv.Quote` (what `%q` and Sprig's `quote` produce).
pub(crate) fn go_quote(s: &str) -> String {
    quote_with(s, '"')
}

fn bad_verb(verb: char, v: &Value) -> String {
    match v {
        Value::Nil => format!("%!{verb}(<nil>)"),
        v => format!("%!{verb}({}={})", v.type_name(), sprint_v(v)),
    }
}

/// Formats one argument for one verb, applying verbs element-wise to lists
/// and maps as Go does.
fn format_one(verb: char, prec: Option<usize>, v: &Value) -> String {
    let each = |items: Vec<String>| items.join(" ");
    match (verb, v) {
        ('v', _) => sprint_v(v),
        (_, Value::List(l)) if verb != 'T' => {
            format!(
                "[{}]",
                each(l.iter().map(|x| format_one(verb, prec, x)).collect())
            )
        }
        (_, Value::Map(m)) if verb != 'T' => format!(
            "map[{}]",
            each(
                m.iter()
                    .map(|(k, x)| format!(
                        "{}:{}",
                        format_one(verb, prec, &Value::Str(k.clone())),
                        format_one(verb, prec, x)
                    ))
                    .collect()
            )
        ),
        ('T', v) => v.type_name().to_string(),
        ('s', Value::Str(s)) => match prec {
            Some(p) => s.chars().take(p).collect(),
            None => s.clone(),
        },
        ('q', Value::Str(s)) => go_quote(s),
        ('q', Value::Int(i)) => match char::from_u32(*i as u32) {
            Some(c) if *i >= 0 => quote_with(&c.to_string(), '\''),
            _ => bad_verb(verb, v),
        },
        ('d', Value::Int(i)) => i.to_string(),
        ('x', Value::Int(i)) => format!("{i:x}"),
        ('X', Value::Int(i)) => format!("{i:X}"),
        ('x', Value::Str(s)) => s.bytes().map(|b| format!("{b:02x}")).collect(),
        ('t', Value::Bool(b)) => b.to_string(),
        ('f' | 'F', Value::Float(f)) => match non_finite(*f) {
            Some(s) => s,
            None => format!("{f:.*}", prec.unwrap_or(6)),
        },
        ('g', Value::Float(f)) if prec.is_none() => format_float(*f),
        ('e', Value::Float(f)) => match non_finite(*f) {
            Some(s) => s,
            None => {
                let s = format!("{f:.*e}", prec.unwrap_or(6));
                let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
                let e: i32 = e.parse().unwrap_or(0);
                format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
            }
        },
        _ => bad_verb(verb, v),
    }
}

/// Go's `fmt.Sprintf` for the verbs charts use (`%s %d %v %q %t %f %e %g %x %T %%`),
/// with widths, `-` and `0` flags, and Go's `%!d(string=x)`, `%!s(MISSING)`
/// and `%!(EXTRA ...)` markers for mismatched arguments.
pub(crate) fn sprintf(format: &str, args: &[Value]) -> String {
    let mut out = String::new();
    let mut chars = format.chars().peekable();
    let mut next_arg = 0usize;
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut minus = false;
        let mut zero = false;
        while let Some(&f) = chars.peek() {
            match f {
                '-' => minus = true,
                '0' => zero = true,
                '+' | '#' | ' ' => {}
                _ => break,
            }
            chars.next();
        }
        let mut width = String::new();
        while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(d);
            chars.next();
        }
        let mut prec = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            let mut p = String::new();
            while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                p.push(d);
                chars.next();
            }
            prec = Some(p.parse().unwrap_or(0));
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let s = match args.get(next_arg) {
            Some(a) => format_one(verb, prec, a),
            None => format!("%!{verb}(MISSING)"),
        };
        next_arg += 1;
        let width: usize = width.parse().unwrap_or(0);
        let pad = width.saturating_sub(s.chars().count());
        if pad == 0 {
            out.push_str(&s);
        } else if minus {
            out.push_str(&s);
            out.push_str(&" ".repeat(pad));
        } else if zero && !matches!(verb, 's' | 'q' | 'v' | 'T') {
            let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
            out.push_str(sign);
            out.push_str(&"0".repeat(pad));
            out.push_str(digits);
        } else {
            out.push_str(&" ".repeat(pad));
            out.push_str(&s);
        }
    }
    if next_arg < args.len() {
        let extra: Vec<String> = args[next_arg..]
            .iter()
            .map(|a| match a {
                Value::Nil => "<nil>".to_string(),
                a => format!("{}={}", a.type_name(), sprint_v(a)),
            })
            .collect();
        out.push_str(&format!("%!(EXTRA {})", extra.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    // Expected strings printed by Go 1.26 fmt.Sprint (see /tmp/gofmtcheck).
    #[test]
    fn floats_print_like_go() {
        let cases = [
            (1000000.0, "1e+06"),
            (65537.0, "65537"),
            (1.5, "1.5"),
            (1e21, "1e+21"),
            (1e20, "1e+20"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (123456.0, "123456"),
            (1234567.0, "1.234567e+06"),
            (100000.0, "100000"),
            (0.0, "0"),
            (3.0e-5, "3e-05"),
            (1.0 / 3.0, "0.3333333333333333"),
            (8080.0, "8080"),
            (-2.5, "-2.5"),
            (f64::INFINITY, "+Inf"),
        ];
        for (f, want) in cases {
            assert_eq!(format_float(f), want, "float {f}");
        }
    }

    #[test]
    fn composite_values_print_like_go() {
        let mut m = BTreeMap::new();
        m.insert("b".to_string(), Value::Float(1.0));
        m.insert("a".to_string(), Value::Nil);
        let l = Value::List(vec![
            Value::Int(1),
            Value::Str("a".into()),
            Value::Nil,
            Value::Float(2.5),
            Value::Map(m),
        ]);
        assert_eq!(sprint_v(&l), "[1 a <nil> 2.5 map[a:<nil> b:1]]");
        let args = [
            Value::Str("a".into()),
            Value::Int(1),
            Value::Int(2),
            Value::Str("b".into()),
            Value::Float(3.0),
            Value::Nil,
            Value::Nil,
        ];
        assert_eq!(sprint(&args), "a1 2b3 <nil> <nil>");
        assert_eq!(sprintln(&[Value::Str("a".into()), Value::Int(1)]), "a 1\n");
    }

    #[test]
    fn printf_like_go() {
        let l = |v: Vec<Value>| Value::List(v);
        assert_eq!(
            sprintf(
                "%d %s %v %q %d",
                &[
                    Value::Float(8080.0),
                    Value::Int(5),
                    Value::Nil,
                    l(vec![Value::Str("a".into()), Value::Int(1)]),
                    l(vec![Value::Int(1), Value::Str("x".into())])
                ]
            ),
            "%!d(float64=8080) %!s(int=5) <nil> [\"a\" '\\x01'] [1 %!d(string=x)]"
        );
        assert_eq!(
            sprintf("%s %d", &[Value::Str("a".into())]),
            "a %!d(MISSING)"
        );
        assert_eq!(
            sprintf(
                "%s",
                &[
                    Value::Str("a".into()),
                    Value::Int(3),
                    Value::Str("b".into())
                ]
            ),
            "a%!(EXTRA int=3, string=b)"
        );
        assert_eq!(sprintf("%s 100%%", &[Value::Nil]), "%!s(<nil>) 100%");
        assert_eq!(
            sprintf(
                "%5s|%-4d|%03d",
                &[Value::Str("ab".into()), Value::Int(7), Value::Int(-5)]
            ),
            "   ab|7   |-05"
        );
        assert_eq!(
            sprintf("%.2f", &[Value::Float(1.005)]),
            format!("{:.2}", 1.005)
        );
    }

    #[test]
    fn quote_like_strconv() {
        assert_eq!(
            go_quote("tab\there \"q\" \\ \u{1} é \u{a0} \u{200b}"),
            r#""tab\there \"q\" \\ \x01 é \u00a0 \u200b""#
        );
    }
}
