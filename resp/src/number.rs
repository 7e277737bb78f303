//! Integers as Redis reads them (`util.c`'s `string2ll`): the one checked routine for every
//! count, length and integer argument, so that no two places disagree on what a number is.

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        fn what_is_accepted_is_the_canonical_text_of_its_value(s in "-?[0-9]{0,21}") {
            if let Some(v) = string2ll(s.as_bytes()) {
                prop_assert_eq!(v.to_string(), s);
            }
        }
    }
}
