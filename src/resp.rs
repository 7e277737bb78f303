//! Where a RESP2/RESP3 reply ends, found without copying or allocating.
//!
//! lockkit's own connections read every reply through [`frame_len`] before they parse it, and
//! `lockkit proxy` forwards the bytes it read by the same boundaries. Only the lengths are
//! read here; what a reply means is for redis-rs's parser (and lockkit's fast path for the
//! reply kinds lock traffic gets).

use redis::{RedisError, RedisResult, Value};

/// Largest element count or bulk length accepted (Redis's own limit on a bulk is 512 MB).
const MAX_LEN: i64 = 1 << 32;

/// How the frame that starts with a given type byte goes on after its first line.
enum Shape {
    /// Nothing more: `+OK`, `:1`, `_`...
    Line,
    /// The line is a length; that many bytes and a CRLF follow (`-1`: nothing).
    Blob,
    /// The line is a count `n`; `per * n + extra` frames follow.
    Items { per: i64, extra: i64 },
}

/// The length of the one complete reply at the start of `buf` (RESP2 or RESP3, an attribute
/// map counted with the reply it describes), or `None` when more bytes are needed.
///
/// ```
/// use lockkit::resp::frame_len;
/// assert_eq!(frame_len(b"+OK\r\n:1\r\n").unwrap(), Some(5));
/// assert_eq!(frame_len(b"*2\r\n$3\r\nfoo\r\n:4").unwrap(), None);
/// assert_eq!(frame_len(b"%1\r\n+a\r\n_\r\nrest").unwrap(), Some(11));
/// assert!(frame_len(b"HTTP/1.1 400 Bad Request\r\n").is_err());
/// ```
///
/// # Errors
/// A parse error ([`redis::ErrorKind::Parse`]) for bytes that are not RESP: an unknown type
/// byte, a length that is not a number or is over 2^32, a bulk string not followed by CRLF, or
/// a streamed RESP3 aggregate (which Redis never sends).
pub fn frame_len(buf: &[u8]) -> RedisResult<Option<usize>> {
    let mut pos = 0usize;
    // Frames still to read, nesting flattened: only the total length matters.
    let mut remaining: i64 = 1;
    while remaining > 0 {
        let Some(&kind) = buf.get(pos) else {
            return Ok(None);
        };
        let shape = match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Shape::Line,
            b'$' | b'!' | b'=' => Shape::Blob,
            b'*' | b'~' | b'>' => Shape::Items { per: 1, extra: 0 },
            b'%' => Shape::Items { per: 2, extra: 0 },
            // An attribute map comes before the reply it describes: both are one frame here.
            b'|' => Shape::Items { per: 2, extra: 1 },
            other => {
                return Err(not_resp(format!(
                    "unexpected reply type byte {:?}",
                    other as char
                )))
            }
        };
        let Some(end) = find_crlf(buf, pos + 1) else {
            return Ok(None);
        };
        let line = &buf[pos + 1..end];
        pos = end + 2;
        remaining -= 1;
        match shape {
            Shape::Line => {}
            Shape::Blob => {
                let n = parse_len(line)?;
                if n >= 0 {
                    let stop = pos + n as usize;
                    if buf.len() < stop + 2 {
                        return Ok(None);
                    }
                    if &buf[stop..stop + 2] != b"\r\n" {
                        return Err(not_resp("a bulk string does not end in CRLF".into()));
                    }
                    pos = stop + 2;
                }
            }
            Shape::Items { per, extra } => {
                remaining = remaining.saturating_add(per * parse_len(line)?.max(0) + extra);
            }
        }
    }
    Ok(Some(pos))
}

/// Where the first CRLF at or after `from` starts (`None`: not there yet).
///
/// ```
/// use lockkit::resp::find_crlf;
/// assert_eq!(find_crlf(b"$3\r\na\rb\r\n", 4), Some(7));
/// assert_eq!(find_crlf(b"+OK\r", 0), None);
/// ```
pub fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    let mut i = 0;
    while let Some(p) = rest[i..].iter().position(|&b| b == b'\r') {
        let at = i + p;
        match rest.get(at + 1) {
            Some(b'\n') => return Some(from + at),
            Some(_) => i = at + 1,
            None => return None,
        }
    }
    None
}

/// The number on a length or count line (what follows `$`, `*`, `%`...): an optional `-` and
/// at most 12 digits.
///
/// ```
/// use lockkit::resp::parse_len;
/// assert_eq!(parse_len(b"-1").unwrap(), -1);
/// assert!(parse_len(b"12a").is_err());
/// ```
///
/// # Errors
/// A parse error ([`redis::ErrorKind::Parse`]) for anything else, or a number over 2^32.
pub fn parse_len(line: &[u8]) -> RedisResult<i64> {
    let (neg, digits) = match line.split_first() {
        Some((b'-', d)) => (true, d),
        _ => (false, line),
    };
    if digits.is_empty() || digits.len() > 12 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(not_resp("a reply's length is not a number".into()));
    }
    let n = digits
        .iter()
        .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
    if n > MAX_LEN {
        return Err(not_resp(format!("a reply's length is over {MAX_LEN}")));
    }
    Ok(if neg { -n } else { n })
}

/// Bytes that are not RESP (another protocol on that port): a parse error, as redis-rs says.
fn not_resp(detail: String) -> RedisError {
    RedisError::from((redis::ErrorKind::Parse, "Parse error", detail))
}

/// One complete reply (as [`frame_len`] measured it) as a [`Value`]: the kinds lock traffic
/// gets (simple strings, integers, bulk strings, arrays of them) read here; the rest by
/// redis-rs's own parser.
pub(crate) fn parse_frame(frame: &[u8]) -> RedisResult<Value> {
    let (value, used) = match fast_value(frame) {
        Some(v) => v,
        None => return redis::parse_redis_value(frame),
    };
    debug_assert_eq!(used, frame.len());
    Ok(value)
}

/// `(value, bytes used)` for RESP2 replies other than errors; `None` for anything else.
fn fast_value(buf: &[u8]) -> Option<(Value, usize)> {
    let end = find_crlf(buf, 1)?;
    let line = &buf[1..end];
    let after = end + 2;
    match buf[0] {
        b'+' if line == b"OK" => Some((Value::Okay, after)),
        b'+' => Some((
            Value::SimpleString(std::str::from_utf8(line).ok()?.to_string()),
            after,
        )),
        b':' => Some((
            Value::Int(std::str::from_utf8(line).ok()?.parse().ok()?),
            after,
        )),
        b'$' => {
            let n: i64 = std::str::from_utf8(line).ok()?.parse().ok()?;
            if n < 0 {
                return Some((Value::Nil, after));
            }
            let n = n as usize;
            let data = buf.get(after..after + n)?;
            Some((Value::BulkString(data.to_vec()), after + n + 2))
        }
        b'*' => {
            let n: i64 = std::str::from_utf8(line).ok()?.parse().ok()?;
            if n < 0 {
                return Some((Value::Nil, after));
            }
            let mut items = Vec::with_capacity(n as usize);
            let mut pos = after;
            for _ in 0..n {
                let (v, used) = fast_value(buf.get(pos..)?)?;
                items.push(v);
                pos += used;
            }
            Some((Value::Array(items), pos))
        }
        _ => None,
    }
}

/// Writes the header of a command of `n` arguments (a RESP array), as redis-rs's `Cmd` packs it.
/// lockkit's hot commands (the acquire's `SET`, the release's script call) are encoded with
/// these straight into the connection's write buffer: no `Cmd` and its two allocations per
/// call. Every other command goes through redis-rs's `Cmd`.
pub(crate) fn write_array_len(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Writes one argument (a RESP bulk string).
pub(crate) fn write_bulk(out: &mut Vec<u8>, arg: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(arg.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// Writes a number as one argument, in decimal.
pub(crate) fn write_bulk_uint(out: &mut Vec<u8>, n: u64) {
    write_bulk(out, itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_len_waits_for_whole_replies() {
        assert_eq!(frame_len(b"+OK\r\n").unwrap(), Some(5));
        assert_eq!(frame_len(b"+OK\r").unwrap(), None);
        assert_eq!(frame_len(b"$3\r\nabc\r\n+x").unwrap(), Some(9));
        assert_eq!(frame_len(b"$3\r\nab").unwrap(), None);
        assert_eq!(frame_len(b"$-1\r\n").unwrap(), Some(5));
        assert_eq!(frame_len(b"*2\r\n:1\r\n$1\r\na\r\n").unwrap(), Some(15));
        assert_eq!(frame_len(b"*2\r\n:1\r\n").unwrap(), None);
        assert_eq!(frame_len(b"%1\r\n+a\r\n:1\r\n").unwrap(), Some(12));
        assert_eq!(frame_len(b"*0\r\n").unwrap(), Some(4));
        assert_eq!(frame_len(b"").unwrap(), None);
    }

    #[test]
    fn every_prefix_of_a_frame_asks_for_more() {
        let frames: [&[u8]; 6] = [
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n",
            b"%2\r\n+a\r\n:1\r\n$1\r\nb\r\n*2\r\n#t\r\n,1.5\r\n",
            b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n",
            b"|1\r\n+ttl\r\n:3\r\n$2\r\nok\r\n",
            b"=15\r\ntxt:Some string\r\n",
            b"*-1\r\n",
        ];
        for f in frames {
            assert_eq!(frame_len(f).unwrap(), Some(f.len()), "{f:?}");
            for cut in 0..f.len() {
                assert_eq!(frame_len(&f[..cut]).unwrap(), None, "{f:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn a_bulk_may_hold_crlf_and_binary() {
        let f = b"$6\r\na\r\nb\x00\xff\r\n";
        assert_eq!(frame_len(f).unwrap(), Some(f.len()));
    }

    #[test]
    fn garbage_is_a_parse_error() {
        for garbage in [
            &b"?x\r\n"[..],
            b"$x\r\n",
            b"$abc\r\n",
            b"$2\r\nabcd\r\n",
            b"*99999999999999\r\n",
            b"*?\r\n",
            // A line break where a frame should start (this panicked `lockkit proxy`'s copy).
            b"\r\n",
            b"*1\r\n\r\n",
        ] {
            let e = frame_len(garbage).unwrap_err();
            assert_eq!(e.kind(), redis::ErrorKind::Parse, "{garbage:?}");
        }
        // An unknown type byte is refused before its line is complete.
        assert!(frame_len(b"H").is_err());
    }

    #[test]
    fn fast_values_match_redis_rs() {
        for frame in [
            &b"+OK\r\n"[..],
            b"+PONG\r\n",
            b":-42\r\n",
            b"$5\r\nhe\r\nl\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*3\r\n:1\r\n*1\r\n+OK\r\n$2\r\nab\r\n",
            b"-ERR no\r\n",
            b"_\r\n",
        ] {
            assert_eq!(frame_len(frame).unwrap(), Some(frame.len()));
            assert_eq!(
                parse_frame(frame).unwrap(),
                redis::parse_redis_value(frame).unwrap(),
                "{}",
                String::from_utf8_lossy(frame)
            );
        }
    }
}
