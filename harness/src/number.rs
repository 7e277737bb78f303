//! Numbers the way Redis reads and writes them: `string2ll`, `strtod`, `%.17g`.

/// Parses an integer exactly as Redis's `string2ll`: optional `-`, digits, no leading zeros,
/// no `+`, no spaces, in `i64` range.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    if b == b"0" {
        return Some(0);
    }
    let (neg, digits) = match b[0] {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if neg {
        if v > (i64::MAX as u64) + 1 {
            None
        } else {
            Some((v as i128).wrapping_neg() as i64)
        }
    } else {
        i64::try_from(v).ok()
    }
}

/// Parses a float as Redis's `getDoubleFromObject` (strtod, whole string, no NaN, no
/// leading/trailing space, no overflow or underflow to zero).
pub fn parse_f64(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.len() > 5 * 1024 {
        return None;
    }
    let first = s.as_bytes()[0];
    let last = s.as_bytes()[s.len() - 1];
    if first.is_ascii_whitespace() || last.is_ascii_whitespace() {
        return None;
    }
    let v = strtod_full(s)?;
    if v.is_nan() {
        return None;
    }
    Some(v)
}

/// `strtod` over the whole string; `None` on junk, overflow to infinity or underflow to zero.
fn strtod_full(s: &str) -> Option<f64> {
    let lower = s.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    if lower.len() - unsigned.len() > 1 {
        return None;
    }
    if unsigned == "inf" || unsigned == "infinity" || unsigned == "nan" {
        return lower.replace("infinity", "inf").parse::<f64>().ok();
    }
    if unsigned.starts_with("0x") {
        return parse_hex_float(&lower);
    }
    if !unsigned
        .bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'+' | b'-'))
    {
        return None;
    }
    let v: f64 = lower.parse().ok()?;
    if v.is_infinite() {
        return None; // ERANGE overflow
    }
    if v == 0.0 {
        let mantissa = unsigned.split('e').next().unwrap_or("");
        if mantissa.bytes().any(|c| matches!(c, b'1'..=b'9')) {
            return None; // ERANGE underflow
        }
    }
    Some(v)
}

fn parse_hex_float(s: &str) -> Option<f64> {
    let (neg, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let rest = rest.strip_prefix("0x")?;
    let (mant, exp) = match rest.split_once('p') {
        Some((m, e)) => (m, e.parse::<i32>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut v = 0f64;
    for c in int.chars() {
        v = v * 16.0 + f64::from(c.to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for c in frac.chars() {
        v += f64::from(c.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    let v = v * 2f64.powi(exp);
    if v.is_infinite() {
        return None;
    }
    Some(if neg { -v } else { v })
}

/// C's `printf("%.*g", precision, v)` for finite and non-finite doubles (glibc spelling).
pub fn format_g(v: f64, precision: usize) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    let p = precision.max(1);
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // A whole number of at most `p` digits prints as itself: no rounding, no exponent, and
    // no float formatting (a script's `PX 30000` is a Lua number, turned into text per call).
    if v.fract() == 0.0 && v.abs() < 10f64.powi(p.min(18) as i32) {
        return (v as i64).to_string();
    }
    let sci = format!("{:.*e}", p - 1, v);
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= p as i32 {
        let mant = trim_zeros(mant);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        trim_zeros(&format!("{v:.decimals$}")).to_string()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// How Redis 7.0 formats a double reply for RESP2 clients (`%.17g`, `inf`/`-inf`).
pub fn format_double_reply(d: f64) -> String {
    format_g(d, 17)
}

/// C's `(long long)d` as x86-64 does it: truncation, and `i64::MIN` for NaN and out-of-range.
pub fn lua_number_to_i64(d: f64) -> i64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if !(-TWO_63..TWO_63).contains(&d) {
        i64::MIN
    } else {
        d.trunc() as i64
    }
}

/// `%.17Lf` with trailing zeros removed, as `INCRBYFLOAT` prints (see the crate docs: the
/// harness computes in `f64` or exact decimals, Redis in x87 `long double`).
pub fn format_long_double_human(v: f64) -> String {
    let s = format!("{v:.17}");
    let s = trim_zeros(&s);
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string2ll_is_strict() {
        assert_eq!(parse_i64(b"10"), Some(10));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        for bad in [&b"010"[..], b"+1", b" 1", b"-0", b"", b"-", b"1.0"] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn strtod_rules() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_f64(b"0x10"), Some(16.0));
        assert_eq!(parse_f64(b".5"), Some(0.5));
        for bad in [&b"nan"[..], b" 1", b"1 ", b"1e400", b"1e-400", b"abc", b""] {
            assert_eq!(parse_f64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn percent_g_matches_c() {
        assert_eq!(format_g(0.1, 17), "0.10000000000000001");
        assert_eq!(format_g(3.0, 17), "3");
        assert_eq!(format_g(1e20, 17), "1e+20");
        assert_eq!(format_g(1.0 / 3.0, 14), "0.33333333333333");
        assert_eq!(format_g(1e-5, 17), "1.0000000000000001e-05");
        assert_eq!(format_g(123456.0, 3), "1.23e+05");
        assert_eq!(format_g(-0.0, 17), "-0");
        // Whole numbers: as themselves up to `p` digits, in exponent form past them.
        assert_eq!(format_g(30000.0, 17), "30000");
        assert_eq!(format_g(-42.0, 17), "-42");
        assert_eq!(format_g(99999999999999999.0, 17), "1e+17");
        assert_eq!(format_g(9007199254740993.0, 17), "9007199254740992");
        assert_eq!(format_g(12345.0, 5), "12345");
        assert_eq!(format_g(123456.0, 5), "1.2346e+05");
        assert_eq!(format_g(1e18, 19), "1000000000000000000");
    }

    #[test]
    fn lua_number_cast_saturates_like_x86() {
        assert_eq!(lua_number_to_i64(1.9), 1);
        assert_eq!(lua_number_to_i64(-1.9), -1);
        assert_eq!(lua_number_to_i64(1e300), i64::MIN);
        assert_eq!(lua_number_to_i64(f64::NAN), i64::MIN);
    }
}
