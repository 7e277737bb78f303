//! `INCRBYFLOAT` arithmetic. Redis adds two x87 `long double`s and prints `%.17Lf` without
//! trailing zeros. The harness adds exact decimals while the result stays below 64 in magnitude
//! (where a `long double`'s 64-bit mantissa rounds back to the same 17 decimals), and falls back
//! to `f64` beyond that, where the last digits may differ from Redis (see the crate docs).

/// An exact decimal: `mantissa * 10^-scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Decimal {
    mantissa: i128,
    scale: u32,
}

fn parse_decimal(b: &[u8]) -> Option<Decimal> {
    let s = std::str::from_utf8(b).ok()?;
    let (mant, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
        None => (s, 0),
    };
    let (neg, mant) = match mant.as_bytes().first() {
        Some(b'-') => (true, &mant[1..]),
        Some(b'+') => (false, &mant[1..]),
        _ => (false, mant),
    };
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit())
        || int.len() + frac.len() > 30
    {
        return None;
    }
    let mut m: i128 = format!("{int}{frac}").parse().ok()?;
    let mut scale = frac.len() as i32 - exp;
    while scale < 0 {
        m = m.checked_mul(10)?;
        scale += 1;
    }
    if scale > 34 {
        return None;
    }
    Some(Decimal {
        mantissa: if neg { -m } else { m },
        scale: scale as u32,
    })
}

fn add_exact(a: Decimal, b: Decimal) -> Option<Decimal> {
    let scale = a.scale.max(b.scale);
    let am = a
        .mantissa
        .checked_mul(10i128.checked_pow(scale - a.scale)?)?;
    let bm = b
        .mantissa
        .checked_mul(10i128.checked_pow(scale - b.scale)?)?;
    Some(Decimal {
        mantissa: am.checked_add(bm)?,
        scale,
    })
}

/// Prints with at most 17 decimals (half-even), trailing zeros and a bare `.` removed.
fn print_decimal(d: Decimal) -> String {
    let (mut m, mut scale) = (d.mantissa, d.scale);
    while scale > 17 {
        let q = m / 10;
        let r = (m % 10).abs();
        let up = r > 5 || (r == 5 && q % 2 != 0);
        m = if up { q + m.signum() } else { q };
        scale -= 1;
    }
    let neg = m < 0;
    let digits = m.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded = if digits.len() <= scale {
        format!("{}{digits}", "0".repeat(scale - digits.len() + 1))
    } else {
        digits
    };
    let (int, frac) = padded.split_at(padded.len() - scale);
    let frac = frac.trim_end_matches('0');
    let body = if frac.is_empty() {
        int.to_string()
    } else {
        format!("{int}.{frac}")
    };
    if neg && body != "0" {
        format!("-{body}")
    } else {
        body
    }
}

/// `cur + inc` printed as `INCRBYFLOAT` replies; `None` when the result is NaN or infinite.
/// Both inputs must already be valid floats.
pub fn add_long_double(cur: &[u8], inc: &[u8]) -> Option<String> {
    let exact = parse_decimal(cur)
        .zip(parse_decimal(inc))
        .and_then(|(a, b)| add_exact(a, b));
    if let Some(sum) = exact {
        let limit = 64i128.checked_mul(10i128.checked_pow(sum.scale)?)?;
        if sum.mantissa.abs() < limit {
            return Some(print_decimal(sum));
        }
    }
    let a = crate::number::parse_f64(cur)?;
    let b = crate::number::parse_f64(inc)?;
    let v = a + b;
    if !v.is_finite() {
        return None;
    }
    Some(crate::number::format_long_double_human(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_sums_are_exact_like_long_double() {
        assert_eq!(add_long_double(b"0", b"0.1").as_deref(), Some("0.1"));
        assert_eq!(add_long_double(b"10.5", b"0.1").as_deref(), Some("10.6"));
        assert_eq!(add_long_double(b"5.0e3", b"-5000").as_deref(), Some("0"));
        assert_eq!(add_long_double(b"-1.25", b"0.05").as_deref(), Some("-1.2"));
        assert_eq!(add_long_double(b"1", b"inf"), None);
    }
}
