//! Command-line values: counts like `10k`, durations like `250ms`, `30s`, `2m`.
//!
//! ```
//! use std::time::Duration;
//! use lockkit_report::units::{parse_count, parse_duration};
//!
//! assert_eq!(parse_count("10k").unwrap(), 10_000);
//! assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
//! assert!(parse_duration("10x").is_err());
//! ```

use std::borrow::Cow;
use std::time::Duration;

use humantime::DurationError;

/// The longest duration any flag takes (ten leap years).
const MAX_DURATION: Duration = Duration::from_secs(3600 * 24 * 366 * 10);

/// Parses a count: a whole number with an optional `k` (×1,000), `m` (×1,000,000) or
/// `g` (×1,000,000,000) suffix; `_` separators are allowed (`100_000`), and so is a decimal
/// part when a suffix makes the result whole (`1.5k`).
///
/// # Errors
/// A message naming the accepted forms.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let bad = || format!("`{s}` is not a count; use a whole number like 50, 10k or 1m");
    if t.is_empty() {
        return Err(bad());
    }
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1_000u64),
        Some((i, 'm' | 'M')) => (&t[..i], 1_000_000),
        Some((i, 'g' | 'G')) => (&t[..i], 1_000_000_000),
        _ => (t.as_str(), 1),
    };
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    match num.split_once('.') {
        None => num
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(mult))
            .ok_or_else(|| format!("`{s}` is too large a count")),
        Some((whole, frac)) => {
            if whole.is_empty() && frac.is_empty() || frac.contains('.') {
                return Err(bad());
            }
            let digits = format!("{whole}{frac}");
            let scale = 10u64
                .checked_pow(u32::try_from(frac.len()).map_err(|_| bad())?)
                .ok_or_else(bad)?;
            let n = digits.parse::<u64>().map_err(|_| bad())?;
            let total = u128::from(n) * u128::from(mult);
            if total % u128::from(scale) != 0 {
                return Err(format!("`{s}` is not a whole count"));
            }
            u64::try_from(total / u128::from(scale))
                .map_err(|_| format!("`{s}` is too large a count"))
        }
    }
}

/// Parses a duration with [`humantime`]: a number with a unit, `us`, `ms`, `s`, `m` (minutes),
/// `h` and humantime's longer spellings (`250ms`, `0.5s`, `.5s`, `2m`, `1h 30m`), at most ten
/// years. A bare `0` is accepted; any other bare number is refused, because its unit would be a
/// guess.
///
/// # Errors
/// A message naming the accepted units, or saying the duration is too long (over ten years) or
/// has more than nine decimal places (which humantime does not take).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_human(s).map_err(|e| match e {
        DurationError::NumberOverflow => too_long(s),
        _ => {
            format!("`{s}` is not a duration; use a number with a unit: 500us, 250ms, 30s, 2m, 1h")
        }
    })
}

/// Parses a line of a work-timings file: a duration with a unit, or a plain number of
/// milliseconds (`12`, `0.8`).
///
/// # Errors
/// A message saying the line is neither a duration nor a number of milliseconds.
pub fn parse_duration_or_ms(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() || !t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return parse_duration(t);
    }
    parse_human(&format!("{t}ms")).map_err(|e| match e {
        DurationError::NumberOverflow => too_long(s),
        _ => format!("`{s}` is not a number of milliseconds"),
    })
}

/// humantime, bounded to [`MAX_DURATION`], after [`pad_points`].
fn parse_human(s: &str) -> Result<Duration, DurationError> {
    let d = humantime::parse_duration(&pad_points(s.trim()))?;
    if d > MAX_DURATION {
        return Err(DurationError::NumberOverflow);
    }
    Ok(d)
}

fn too_long(s: &str) -> String {
    format!("`{s}` is too long a duration (at most 10 years) or has more than 9 decimal places")
}

/// humantime wants a digit on both sides of a decimal point; `.5s` and `5.s` have always been
/// accepted here, so the missing zero is put back (a lone `.` stays an error).
fn pad_points(t: &str) -> Cow<'_, str> {
    if !t.contains('.') {
        return Cow::Borrowed(t);
    }
    let bytes = t.as_bytes();
    let mut out = String::with_capacity(t.len() + 2);
    for (i, c) in t.char_indices() {
        if c != '.' {
            out.push(c);
            continue;
        }
        let before = i > 0 && bytes[i - 1].is_ascii_digit();
        let after = bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
        if after && !before {
            out.push('0');
        }
        out.push('.');
        if before && !after {
            out.push('0');
        }
    }
    Cow::Owned(out)
}

/// Shows a duration the way a person reads it: `850us`, `12.3ms`, `4.50s`.
pub fn format_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1_000.0 {
        format!("{us:.0}us")
    } else if us < 10_000.0 {
        format!("{:.2}ms", us / 1e3)
    } else if us < 1_000_000.0 {
        format!("{:.1}ms", us / 1e3)
    } else {
        format!("{:.2}s", us / 1e6)
    }
}

/// Shows a rate with thousands separators: `123,456`.
pub fn format_rate(x: f64) -> String {
    let n = x.round() as u64;
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counts_take_suffixes_and_separators() {
        assert_eq!(parse_count("50"), Ok(50));
        assert_eq!(parse_count("10k"), Ok(10_000));
        assert_eq!(parse_count("1m"), Ok(1_000_000));
        assert_eq!(parse_count("1.5k"), Ok(1_500));
        assert_eq!(parse_count("100_000"), Ok(100_000));
        assert_eq!(parse_count("2G"), Ok(2_000_000_000));
    }

    #[test]
    fn bad_counts_are_refused_with_the_accepted_forms() {
        for s in ["", "k", "-1", "10x", "1.2.3", "1.0001k", "ten"] {
            let e = parse_count(s).unwrap_err();
            assert!(e.contains(&format!("`{s}`")), "{s}: {e}");
        }
        assert!(parse_count("99999999999999999999").is_err());
    }

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5.s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
    }

    #[test]
    fn bad_durations_name_the_units() {
        for s in ["10x", "10", "ms", "", "1..2s", "-1s", "s5", ".s", "."] {
            let e = parse_duration(s).unwrap_err();
            assert!(e.contains("250ms"), "{s}: {e}");
        }
    }

    #[test]
    fn work_timing_lines_default_to_milliseconds() {
        assert_eq!(parse_duration_or_ms("12"), Ok(Duration::from_millis(12)));
        assert_eq!(parse_duration_or_ms("0.8s"), Ok(Duration::from_millis(800)));
        assert_eq!(parse_duration_or_ms("12ms"), Ok(Duration::from_millis(12)));
        assert!(parse_duration_or_ms("abc").is_err());
    }

    #[test]
    fn formatting_is_readable() {
        assert_eq!(format_duration(Duration::from_micros(850)), "850us");
        assert_eq!(format_duration(Duration::from_micros(1_234)), "1.23ms");
        assert_eq!(format_duration(Duration::from_millis(450)), "450.0ms");
        assert_eq!(format_duration(Duration::from_millis(4_500)), "4.50s");
        assert_eq!(format_rate(1_234_567.4), "1,234,567");
        assert_eq!(format_rate(999.0), "999");
    }

    proptest! {
        #[test]
        fn count_round_trips(n in 0u64..1_000_000_000_000, suffix in 0usize..3) {
            let (text, want) = match suffix {
                0 => (n.to_string(), n),
                1 => (format!("{}k", n % 1_000_000_000), (n % 1_000_000_000) * 1_000),
                _ => (format!("{}m", n % 1_000_000), (n % 1_000_000) * 1_000_000),
            };
            prop_assert_eq!(parse_count(&text), Ok(want));
        }

        #[test]
        fn duration_round_trips(n in 0u64..10_000_000, unit in 0usize..4) {
            let (text, want) = match unit {
                0 => (format!("{n}us"), Duration::from_micros(n)),
                1 => (format!("{n}ms"), Duration::from_millis(n)),
                2 => (format!("{}s", n % 100_000), Duration::from_secs(n % 100_000)),
                _ => (format!("{}m", n % 10_000), Duration::from_secs(60 * (n % 10_000))),
            };
            prop_assert_eq!(parse_duration(&text), Ok(want));
        }

        #[test]
        fn parsers_never_panic(s in "\\PC{0,12}") {
            let _ = parse_count(&s);
            let _ = parse_duration(&s);
            let _ = parse_duration_or_ms(&s);
        }
    }
}
