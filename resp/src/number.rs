//! Numbers as Redis reads them: `util.c`'s `string2ll` (the one checked routine for every
//! count, length and integer argument, so that no two places disagree on what a number is),
//! and C's `strtod`/`strtol`/`atoi` where Redis calls them on an argument (`DEBUG SLEEP`,
//! `DEBUG SET-DISABLE-DENY-SCRIPTS`).
//!
//! Every routine here reads bytes (never a lossy UTF-8 string, whose positions are not the
//! argument's), cannot panic, and runs in time linear in its input: a 200,000-digit argument
//! costs one pass over it.

/// The longest text `string2ll` looks at: Redis's `LONG_STR_SIZE` (21) minus one.
const MAX_LEN: usize = 20;

/// Parses `s` exactly as Redis's `string2ll`: an optional `-`, then `0` alone or digits that
/// start with `1`-`9`, all within `i64`; no `+`, no spaces, no leading zeros, no `-0`, at most
/// 20 bytes. Runs in time linear in at most 20 bytes whatever the input's length.
///
/// ```
/// use lockkit_resp::number::string2ll;
/// assert_eq!(string2ll(b"-42"), Some(-42));
/// assert_eq!(string2ll(b"-9223372036854775808"), Some(i64::MIN));
/// for bad in [&b""[..], b"-", b"-0", b"01", b"+1", b" 1", b"1 ", b"9223372036854775808"] {
///     assert_eq!(string2ll(bad), None, "{bad:?}");
/// }
/// ```
#[must_use]
pub fn string2ll(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > MAX_LEN {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
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
    if negative {
        // -(2^63) is the one value whose magnitude does not fit in i64.
        0i64.checked_sub_unsigned(v)
    } else {
        i64::try_from(v).ok()
    }
}

/// C's `isspace` in the "C" locale: what `strtod` and `strtol` skip first.
fn is_c_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// C's `strtod(s, &end)` as glibc reads `s` (up to its first NUL, as the C string Redis
/// passes): leading spaces, a sign, then `inf`/`infinity`, `nan` (with an optional
/// `(chars)`), a hex float (`0x1.8p3`) or a decimal one (`1.5e3`). Returns the value and how
/// many bytes were read; `(0.0, 0)` when no number starts the text. An overflow reads as an
/// infinity, as `strtod`'s `HUGE_VAL` does.
///
/// ```
/// use lockkit_resp::number::strtod;
/// assert_eq!(strtod(b"  1.5s"), (1.5, 5));
/// assert_eq!(strtod(b"1\xff"), (1.0, 1));
/// assert_eq!(strtod(b"0x10"), (16.0, 4));
/// assert_eq!(strtod(b"1e"), (1.0, 1));
/// assert_eq!(strtod(b"abc"), (0.0, 0));
/// assert!(strtod(b"-inFinity").0 == f64::NEG_INFINITY);
/// ```
#[must_use]
pub fn strtod(s: &[u8]) -> (f64, usize) {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let start = i;
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let signed = |v: f64| if negative { -v } else { v };
    let rest = &s[i..];
    if starts_with_ignore_case(rest, b"inf") {
        let len = if starts_with_ignore_case(rest, b"infinity") {
            8
        } else {
            3
        };
        return (signed(f64::INFINITY), i + len);
    }
    if starts_with_ignore_case(rest, b"nan") {
        let mut len = 3;
        if rest.get(3) == Some(&b'(') {
            let body = rest[4..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            if rest.get(4 + body) == Some(&b')') {
                len = 4 + body + 1;
            }
        }
        return (signed(f64::NAN), i + len);
    }
    if rest.len() > 2 && rest[0] == b'0' && matches!(rest[1], b'x' | b'X') {
        if let Some((v, len)) = hex_float(&rest[2..]) {
            return (signed(v), i + 2 + len);
        }
    }
    let digits = |from: usize| s[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let int_digits = digits(i);
    let mut end = i + int_digits;
    let mut frac_digits = 0;
    if s.get(end) == Some(&b'.') {
        frac_digits = digits(end + 1);
        if int_digits + frac_digits > 0 {
            end += 1 + frac_digits;
        }
    }
    if int_digits + frac_digits == 0 {
        return (0.0, 0);
    }
    if matches!(s.get(end), Some(b'e' | b'E')) {
        let mut e = end + 1;
        if matches!(s.get(e), Some(b'+' | b'-')) {
            e += 1;
        }
        let exp_digits = digits(e);
        if exp_digits > 0 {
            end = e + exp_digits;
        }
    }
    // The prefix is ASCII digits, '.', 'e' and signs in the order Rust's parser also accepts,
    // and that parser is linear and correctly rounded; it cannot refuse it.
    let text = std::str::from_utf8(&s[start..end]).unwrap_or("0");
    (text.parse::<f64>().unwrap_or(0.0), end)
}

/// The digits of a hex float after its `0x`: `None` when no hex digit follows (then `strtod`
/// reads only the `0`).
fn hex_float(s: &[u8]) -> Option<(f64, usize)> {
    let mut mantissa: u64 = 0;
    let mut exp2: i64 = 0;
    let mut seen = 0usize;
    let mut i = 0;
    let mut dot = false;
    while i < s.len() {
        let c = s[i];
        if c == b'.' && !dot {
            dot = true;
            i += 1;
            continue;
        }
        let Some(d) = (c as char).to_digit(16) else {
            break;
        };
        seen += 1;
        if mantissa >> 56 == 0 {
            mantissa = mantissa * 16 + u64::from(d);
            if dot {
                exp2 -= 4;
            }
        } else if !dot {
            exp2 += 4;
        }
        i += 1;
    }
    if seen == 0 {
        return None;
    }
    if matches!(s.get(i), Some(b'p' | b'P')) {
        let mut e = i + 1;
        let neg = match s.get(e) {
            Some(b'-') => {
                e += 1;
                true
            }
            Some(b'+') => {
                e += 1;
                false
            }
            _ => false,
        };
        let n = s[e..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n > 0 {
            let mut v: i64 = 0;
            for &c in &s[e..e + n] {
                v = (v * 10 + i64::from(c - b'0')).min(1 << 20);
            }
            exp2 += if neg { -v } else { v };
            i = e + n;
        }
    }
    // Two steps keep an exponent past f64's own range from overflowing `powi` early.
    let half = (exp2 / 2).clamp(-4000, 4000) as i32;
    let other = (exp2 - exp2 / 2).clamp(-4000, 4000) as i32;
    #[allow(clippy::cast_precision_loss)]
    let v = mantissa as f64 * 2f64.powi(half) * 2f64.powi(other);
    Some((v, i))
}

fn starts_with_ignore_case(s: &[u8], word: &[u8]) -> bool {
    s.len() >= word.len() && s[..word.len()].eq_ignore_ascii_case(word)
}

/// C's `strtol(s, &end, 10)`: leading spaces, a sign, decimal digits; the value clamped to
/// `i64` (`LONG_MIN`/`LONG_MAX` with `ERANGE`). Returns the value and how many bytes were
/// read; `(0, 0)` when no digit starts the text.
///
/// ```
/// use lockkit_resp::number::strtol;
/// assert_eq!(strtol(b" -12ab"), (-12, 4));
/// assert_eq!(strtol(b"99999999999999999999"), (i64::MAX, 20));
/// assert_eq!(strtol(b"+"), (0, 0));
/// ```
#[must_use]
pub fn strtol(s: &[u8]) -> (i64, usize) {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let n = s[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    if n == 0 {
        return (0, 0);
    }
    let mut v: i128 = 0;
    for &c in &s[i..i + n] {
        // Past i64's range the value only saturates: stop growing it.
        if v <= i128::from(i64::MAX) + 1 {
            v = v * 10 + i128::from(c - b'0');
        }
    }
    let v = if negative { -v } else { v };
    let clamped = v.clamp(i128::from(i64::MIN), i128::from(i64::MAX));
    (i64::try_from(clamped).unwrap_or(0), i + n)
}

/// C's `atoi(s)` as glibc has it: `(int) strtol(s, NULL, 10)`, the `long` cut to 32 bits.
///
/// ```
/// use lockkit_resp::number::atoi;
/// assert_eq!(atoi(b"1abc"), 1);
/// assert_eq!(atoi(b"4294967296"), 0);
/// assert_eq!(atoi(b"x"), 0);
/// ```
#[must_use]
pub fn atoi(s: &[u8]) -> i32 {
    #[allow(clippy::cast_possible_truncation)]
    let v = strtol(s).0 as i32;
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn strtod_reads_the_prefix_c_reads() {
        assert_eq!(strtod(b""), (0.0, 0));
        assert_eq!(strtod(b"."), (0.0, 0));
        assert_eq!(strtod(b"-"), (0.0, 0));
        assert_eq!(strtod(b"1."), (1.0, 2));
        assert_eq!(strtod(b".5x"), (0.5, 2));
        assert_eq!(strtod(b"1.e2"), (100.0, 4));
        assert_eq!(strtod(b"1e+"), (1.0, 1));
        assert_eq!(strtod(b"2E-1"), (0.2, 4));
        assert_eq!(strtod(b"\t\n+3"), (3.0, 4));
        assert_eq!(strtod(b"0x"), (0.0, 1));
        assert_eq!(strtod(b"0xg"), (0.0, 1));
        assert_eq!(strtod(b"0x1.8p1"), (3.0, 7));
        assert_eq!(strtod(b"0X1P-1"), (0.5, 6));
        assert_eq!(strtod(b"infinit"), (f64::INFINITY, 3));
        assert_eq!(strtod(b"nan(abc)").1, 8);
        assert_eq!(strtod(b"nan(abc").1, 3);
        assert_eq!(strtod(b"1\x001"), (1.0, 1));
        assert_eq!(strtod(b"1e400").0, f64::INFINITY);
    }

    #[test]
    fn strtod_of_a_huge_argument_is_one_pass() {
        let mut digits = vec![b'1'; 200_000];
        digits.push(0xff);
        let (v, n) = strtod(&digits);
        assert!(v.is_infinite());
        assert_eq!(n, 200_000);
        let mut small = b"0.".to_vec();
        small.extend(std::iter::repeat_n(b'0', 200_000));
        small.push(b'1');
        assert_eq!(strtod(&small), (0.0, 200_003));
        let mut exp = b"1e".to_vec();
        exp.extend(std::iter::repeat_n(b'9', 200_000));
        assert_eq!(strtod(&exp).0, f64::INFINITY);
        let mut hex = b"0x".to_vec();
        hex.extend(std::iter::repeat_n(b'f', 200_000));
        assert!(strtod(&hex).0.is_infinite());
    }

    #[test]
    fn strtol_and_atoi_clamp_and_cut_as_c_does() {
        assert_eq!(strtol(b"-99999999999999999999"), (i64::MIN, 21));
        assert_eq!(strtol(b"12"), (12, 2));
        assert_eq!(atoi(b"-1"), -1);
        assert_eq!(atoi(b"4294967297"), 1);
    }

    #[test]
    fn the_edges_of_i64_are_read_as_redis_reads_them() {
        assert_eq!(string2ll(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(string2ll(b"-9223372036854775809"), None);
        assert_eq!(string2ll(b"18446744073709551616"), None);
        assert_eq!(string2ll(b"00"), None);
        assert_eq!(string2ll(b"1\xff"), None);
        // 21 bytes is refused before any digit is looked at, even when it is a number.
        assert_eq!(string2ll(b"000000000000000000001"), None);
    }

    proptest! {
        #[test]
        fn every_i64_round_trips(v in any::<i64>()) {
            prop_assert_eq!(string2ll(v.to_string().as_bytes()), Some(v));
        }

        #[test]
        fn strtod_never_panics_and_reads_within_its_input(s in proptest::collection::vec(any::<u8>(), 0..64)) {
            let (_, n) = strtod(&s);
            prop_assert!(n <= s.len());
            let (_, n) = strtol(&s);
            prop_assert!(n <= s.len());
        }

        #[test]
        fn strtod_agrees_with_rust_on_plain_decimals(v in any::<f64>().prop_filter("finite", |v| v.is_finite())) {
            let text = format!("{v:e}");
            prop_assert_eq!(strtod(text.as_bytes()), (v, text.len()));
        }

        #[test]
        fn what_is_accepted_is_the_canonical_text_of_its_value(s in "-?[0-9]{0,21}") {
            if let Some(v) = string2ll(s.as_bytes()) {
                prop_assert_eq!(v.to_string(), s);
            }
        }
    }
}
