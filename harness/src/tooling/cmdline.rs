//! Splitting a command line into arguments with redis-cli's quoting rules (`sdssplitargs`).

/// Why a line could not be split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitError {
    /// A short reason: unbalanced quotes, or a closing quote not followed by a space.
    pub reason: &'static str,
}

/// Splits `line` the way redis-cli does: blanks separate arguments; `"..."` takes `\n \r \t \b \a
/// \\ \" \xHH` escapes; `'...'` takes `\'`; a closing quote must be followed by a blank or the end.
///
/// ```
/// use lockkit_harness::tooling::cmdline::split_args;
/// let args = split_args(r#"SET "a b" 'c\'d' "\x41""#).unwrap();
/// assert_eq!(args, vec![b"SET".to_vec(), b"a b".to_vec(), b"c'd".to_vec(), b"A".to_vec()]);
/// ```
pub fn split_args(line: &str) -> Result<Vec<Vec<u8>>, SplitError> {
    let p = line.as_bytes();
    let at = |i: usize| p.get(i).copied().unwrap_or(0);
    let is_space = |c: u8| matches!(c, b' ' | b'\n' | b'\r' | b'\t' | 0x0b | 0x0c);
    let mut i = 0;
    let mut out = Vec::new();
    loop {
        while i < p.len() && is_space(p[i]) {
            i += 1;
        }
        if i >= p.len() {
            return Ok(out);
        }
        let (mut inq, mut insq) = (false, false);
        let mut cur = Vec::new();
        loop {
            let c = at(i);
            if inq {
                if c == b'\\'
                    && at(i + 1) == b'x'
                    && at(i + 2).is_ascii_hexdigit()
                    && at(i + 3).is_ascii_hexdigit()
                {
                    let hex = [at(i + 2), at(i + 3)];
                    let s = std::str::from_utf8(&hex).unwrap_or("00");
                    cur.push(u8::from_str_radix(s, 16).unwrap_or(0));
                    i += 3;
                } else if c == b'\\' && at(i + 1) != 0 {
                    i += 1;
                    cur.push(match at(i) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                } else if c == b'"' {
                    if at(i + 1) != 0 && !is_space(at(i + 1)) {
                        return Err(SplitError {
                            reason: "closing quote must be followed by a space",
                        });
                    }
                    i += 1;
                    break;
                } else if c == 0 && i >= p.len() {
                    return Err(SplitError {
                        reason: "unbalanced quotes",
                    });
                } else {
                    cur.push(c);
                }
            } else if insq {
                if c == b'\\' && at(i + 1) == b'\'' {
                    i += 1;
                    cur.push(b'\'');
                } else if c == b'\'' {
                    if at(i + 1) != 0 && !is_space(at(i + 1)) {
                        return Err(SplitError {
                            reason: "closing quote must be followed by a space",
                        });
                    }
                    i += 1;
                    break;
                } else if c == 0 && i >= p.len() {
                    return Err(SplitError {
                        reason: "unbalanced quotes",
                    });
                } else {
                    cur.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' => {
                        i += 1;
                        break;
                    }
                    0 if i >= p.len() => break,
                    b'"' => inq = true,
                    b'\'' => insq = true,
                    _ => {
                        // A run of plain bytes (NUL included) in one copy: a byte-at-a-time
                        // push was 13% of `lua exec`'s instructions.
                        let run = p[i..]
                            .iter()
                            .position(|&c| matches!(c, b' ' | b'\n' | b'\r' | b'\t' | b'"' | b'\''))
                            .unwrap_or(p.len() - i);
                        cur.extend_from_slice(&p[i..i + run]);
                        i += run;
                        continue;
                    }
                }
            }
            i += 1;
        }
        out.push(cur);
    }
}

/// Quotes one argument so that [`split_args`] gives it back unchanged.
pub fn quote_arg(arg: &[u8]) -> String {
    let plain = !arg.is_empty()
        && arg
            .iter()
            .all(|&c| c.is_ascii_graphic() && c != b'"' && c != b'\'' && c != b'\\');
    if plain {
        return String::from_utf8_lossy(arg).into_owned();
    }
    super::format::repr(arg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|x| x.as_bytes().to_vec()).collect()
    }

    #[test]
    fn splits_like_redis_cli() {
        assert_eq!(split_args("  GET  k ").unwrap(), s(&["GET", "k"]));
        assert!(split_args(r#"a"b c"d"#).is_err());
        assert_eq!(split_args(r#"a"b c""#).unwrap(), s(&["ab c"]));
        assert_eq!(split_args(r#""\n\q""#).unwrap(), s(&["\nq"]));
        assert_eq!(split_args("''").unwrap(), s(&[""]));
        assert!(split_args("\"abc").is_err());
        assert!(split_args("'abc").is_err());
        assert!(split_args("").unwrap().is_empty());
        // Plain runs copied at once: NUL and other bytes kept, quotes joining a token.
        assert_eq!(
            split_args("a\0b c\x0bd ab\"c d\" x'e f'").unwrap(),
            s(&["a\0b", "c\x0bd", "abc d", "xe f"])
        );
    }

    #[test]
    fn quote_round_trips() {
        for arg in [&b"plain"[..], b"with space", b"q\"uote", b"\x00\xff\n", b""] {
            let q = quote_arg(arg);
            assert_eq!(split_args(&q).unwrap(), vec![arg.to_vec()], "{q}");
        }
    }
}
