//! Small pure helpers: medians and the way figures and ratios are written.

/// Median of `v` (the mean of the two middle values for an even count);
/// `NaN` for an empty slice. NaNs in the input sort last.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The `q` quantile (0..=1) of `v` by linear interpolation; `NaN` if empty.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let pos = q.clamp(0.0, 1.0) * (s.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

/// `value / base`, or `NaN` when the base is zero or not finite.
pub fn ratio(value: f64, base: f64) -> f64 {
    if base == 0.0 || !base.is_finite() || !value.is_finite() {
        f64::NAN
    } else {
        value / base
    }
}

/// A ratio as `1.73x` (two decimals below 10, one above); `-` if not finite.
pub fn fmt_ratio(r: f64) -> String {
    if !r.is_finite() {
        "-".to_string()
    } else if r.abs() < 0.1 {
        format!("{r:.3}x")
    } else if r.abs() < 10.0 {
        format!("{r:.2}x")
    } else {
        format!("{r:.1}x")
    }
}

/// A fraction as a percentage: `0.0093` -> `0.93%`, `0.5` -> `50.0%`.
pub fn fmt_pct(f: f64) -> String {
    if !f.is_finite() {
        "-".to_string()
    } else if (f * 100.0).abs() < 10.0 {
        format!("{:.2}%", f * 100.0)
    } else {
        format!("{:.1}%", f * 100.0)
    }
}

/// A count with thousands separators: `1234567` -> `1,234,567`.
pub fn fmt_count(n: f64) -> String {
    if !n.is_finite() {
        return "-".to_string();
    }
    let neg = n < 0.0;
    let digits = format!("{:.0}", n.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if neg { format!("-{out}") } else { out }
}

/// A duration given in seconds, in the most readable unit.
pub fn fmt_secs(s: f64) -> String {
    if !s.is_finite() {
        "-".to_string()
    } else if s < 1e-3 {
        format!("{:.1} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
        // Outliers do not move it.
        assert_eq!(median(&[10.0, 11.0, 12.0, 1e9, 0.0]), 11.0);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.25), 2.0);
        assert_eq!(quantile(&[1.0, 2.0], 0.5), 1.5);
    }

    #[test]
    fn ratio_and_formatting() {
        assert_eq!(fmt_ratio(ratio(173.0, 100.0)), "1.73x");
        assert_eq!(fmt_ratio(ratio(1234.0, 100.0)), "12.3x");
        assert_eq!(fmt_ratio(ratio(1.0, 0.0)), "-");
        assert_eq!(fmt_ratio(f64::NAN), "-");
        assert_eq!(fmt_ratio(0.0042), "0.004x");
        assert_eq!(fmt_pct(0.0093), "0.93%");
        assert_eq!(fmt_pct(0.5), "50.0%");
        assert_eq!(fmt_count(1234567.0), "1,234,567");
        assert_eq!(fmt_count(999.0), "999");
        assert_eq!(fmt_count(-1000.0), "-1,000");
        assert_eq!(fmt_secs(0.0042), "4.20 ms");
        assert_eq!(fmt_secs(0.000_012_5), "12.5 µs");
        assert_eq!(fmt_secs(2.5), "2.50 s");
    }
}
