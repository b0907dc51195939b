//! Keeps `rivoractl status` rows readable when a value carries a long list.
//!
//! With 4,000 VIPs the daemon's "Reload changes" text listed every VIP and
//! made one table row 23,513 characters. Daemons from this version
//! summarise their reports themselves, but an older daemon (or another long
//! value, such as a reload error listing many problems) still can send one,
//! so the table shortens lists and caps a row; `-o json` keeps everything.

/// Names of one comma-separated list shown before "and N more".
pub const NAMES_SHOWN: usize = 10;
/// Longest row value shown; longer ones are cut with a pointer to JSON.
pub const MAX_VALUE_CHARS: usize = 1000;

/// `value` with every comma-separated list of more than [`NAMES_SHOWN`]
/// names (the last word of a `; `-separated part, as in "added a,b,c")
/// cut to its first names and "and N more", then capped at
/// [`MAX_VALUE_CHARS`] characters.
pub fn row_value(value: &str) -> String {
    let parts: Vec<String> = value.split("; ").map(shorten_list).collect();
    cap(&parts.join("; "))
}

fn shorten_list(part: &str) -> String {
    let (head, list) = match part.rsplit_once(' ') {
        Some((h, l)) => (Some(h), l),
        None => (None, part),
    };
    let names: Vec<&str> = list.split(',').collect();
    if names.len() <= NAMES_SHOWN {
        return part.to_string();
    }
    let short = format!(
        "{} and {} more",
        names[..NAMES_SHOWN].join(","),
        thousands(names.len() - NAMES_SHOWN)
    );
    match head {
        Some(h) => format!("{h} {short}"),
        None => short,
    }
}

fn cap(value: &str) -> String {
    let total = value.chars().count();
    if total <= MAX_VALUE_CHARS {
        return value.to_string();
    }
    let kept: String = value.chars().take(MAX_VALUE_CHARS).collect();
    format!(
        "{kept}... ({} more characters; -o json shows all)",
        thousands(total - MAX_VALUE_CHARS)
    )
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lists_keep_ten_names_and_count_the_rest() {
        let names: Vec<String> = (1..=4000).map(|i| format!("v{i}")).collect();
        let value = format!("added {}; removed old; 7 new backend(s)", names.join(","));
        assert_eq!(
            row_value(&value),
            "added v1,v2,v3,v4,v5,v6,v7,v8,v9,v10 and 3,990 more; removed old; 7 new backend(s)"
        );
        // A list of exactly ten, and text without lists, are unchanged.
        let ten = format!("rebuilt {}", names[..10].join(","));
        assert_eq!(row_value(&ten), ten);
        assert_eq!(row_value("no change"), "no change");
        // A daemon-side summary is left alone.
        let done = "added a,b,c,d,e,f,g,h,i,j and 3,990 more";
        assert_eq!(row_value(done), done);
    }

    #[test]
    fn overlong_values_are_capped_with_a_pointer_to_json() {
        let value = "x".repeat(23_513);
        let row = row_value(&value);
        assert_eq!(
            row,
            format!(
                "{}... (22,513 more characters; -o json shows all)",
                "x".repeat(MAX_VALUE_CHARS)
            )
        );
        // Cut on characters, not bytes.
        let wide = "é".repeat(MAX_VALUE_CHARS + 1);
        assert!(row_value(&wide).starts_with(&"é".repeat(MAX_VALUE_CHARS)));
    }
}
