//! Inline requests (`PING\r\n` typed into telnet) split into words exactly as Redis's
//! `sdssplitargs` splits them: blanks between words, `"..."` with `\xHH`, `\n`, `\r`, `\t`,
//! `\b`, `\a` and `\<any>` escapes, `'...'` with `\'` only, and a closing quote that must be
//! followed by a blank or the end of the line.

/// C's `isspace` in the C locale: what `sdssplitargs` skips between words and accepts after a
/// closing quote.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The words of one inline line (without its line end), or `None` for unbalanced quotes
/// (Redis answers `Protocol error: unbalanced quotes in request`). The line holds no NUL byte
/// when it comes from [`crate::RequestParser`]; one here ends the line, as it does in C.
///
/// ```
/// use lockkit_resp::inline::split_args;
/// let words = split_args(br#"set "a\x41\n" 'it\'s' x"y z""#).unwrap();
/// assert_eq!(words, vec![&b"set"[..], b"aA\n", b"it's", b"xy z"]);
/// assert_eq!(split_args(br#"get "a"b"#), None);
/// assert_eq!(split_args(b"  \t "), Some(vec![]));
/// ```
#[must_use]
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    // C reads the line as a string: it ends at the first NUL.
    let line = match line.iter().position(|&b| b == 0) {
        Some(nul) => &line[..nul],
        None => line,
    };
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut words = Vec::new();
    let mut p = 0;
    loop {
        while p < line.len() && is_space(line[p]) {
            p += 1;
        }
        if p >= line.len() {
            return Some(words);
        }
        let mut word = Vec::new();
        let (mut in_double, mut in_single) = (false, false);
        loop {
            let c = at(p);
            if in_double {
                if c == b'\\' && at(p + 1) == b'x' {
                    if let (Some(hi), Some(lo)) = (hex(at(p + 2)), hex(at(p + 3))) {
                        word.push(hi * 16 + lo);
                        p += 4;
                        continue;
                    }
                }
                if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    word.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    word.push(c);
                }
            } else if in_single {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    word.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    word.push(c);
                }
            } else {
                match c {
                    // Not C's isspace: a vertical tab or form feed inside a word is kept.
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        if c != 0 {
                            p += 1;
                        }
                        break;
                    }
                    b'"' => in_double = true,
                    b'\'' => in_single = true,
                    other => word.push(other),
                }
            }
            p += 1;
        }
        words.push(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(line: &[u8]) -> Option<Vec<String>> {
        split_args(line).map(|v| {
            v.into_iter()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .collect()
        })
    }

    #[test]
    fn words_split_as_sdssplitargs_splits_them() {
        assert_eq!(
            w(b"a  b\tc"),
            Some(vec!["a".into(), "b".into(), "c".into()])
        );
        assert_eq!(w(b"\"\""), Some(vec![String::new()]));
        assert_eq!(w(b"''"), Some(vec![String::new()]));
        // An escape that is not hex keeps the escaped byte; \x without two hex digits is 'x'.
        assert_eq!(w(br#""\q\xZZ""#), Some(vec!["qxZZ".into()]));
        // In single quotes only \' is an escape.
        assert_eq!(w(br"'a\nb'"), Some(vec![r"a\nb".into()]));
        // A vertical tab separates words at their start but not inside them.
        assert_eq!(w(b"\x0ba\x0bb"), Some(vec!["a\x0bb".into()]));
        // A closing quote followed by a vertical tab is accepted (C's isspace).
        assert_eq!(w(b"'a'\x0bb"), Some(vec!["a".into(), "b".into()]));
    }

    #[test]
    fn unbalanced_quotes_are_refused() {
        for bad in [&b"\"a"[..], b"'a", b"\"a\"b", b"'a'b", b"\"a\\\"", b"a\"b"] {
            assert_eq!(split_args(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_nul_ends_the_line_as_in_c() {
        assert_eq!(w(b"get a\0b c"), Some(vec!["get".into(), "a".into()]));
        assert_eq!(split_args(b"\"a\0\""), None);
    }
}
