//! Requests as redis-server 7.0 reads them (`processInlineBuffer`, `processMultibulkBuffer`):
//! where one ends, and the protocol errors it answers, with its very text and limits, before it
//! closes the connection. The proxy answers them itself, after the replies still owed, so a
//! malformed request never hangs a client nor grows a buffer without bound.

use crate::resp::CommandFrame;

/// The longest inline request, and the longest count line (Redis's `PROTO_INLINE_MAX_SIZE`).
pub const INLINE_MAX: usize = 64 * 1024;
/// The longest bulk string (Redis's default `proto-max-bulk-len`).
pub const BULK_MAX: i64 = 512 * 1024 * 1024;
/// The most elements of a multibulk request (Redis 7.0: `INT_MAX`).
pub const MULTIBULK_MAX: i64 = i32::MAX as i64;
/// Before login, at most this many elements... (Redis's limits for unauthenticated clients).
const UNAUTH_MULTIBULK_MAX: i64 = 10;
/// ... of at most this many bytes each.
const UNAUTH_BULK_MAX: i64 = 16 * 1024;
/// The largest request held (Redis's default `client-query-buffer-limit`): a client that sends
/// a bigger one is closed, as Redis closes it.
pub const REQUEST_MAX: usize = 1 << 30;

/// Why a request is refused: the error line's text after `-ERR ` (`Protocol error: ...`), or
/// `None` for a request too big to hold (closed without a reply, as Redis does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError(pub Option<String>);

impl RequestError {
    fn says(text: impl Into<String>) -> RequestError {
        RequestError(Some(format!("Protocol error: {}", text.into())))
    }

    /// The reply to send before closing, if any.
    pub fn reply(&self) -> Option<Vec<u8>> {
        self.0
            .as_ref()
            .map(|t| crate::resp::error_reply(&format!("ERR {t}")))
    }
}

/// Redis's `string2ll`: an optional `-`, then digits without leading zeros.
fn string2ll(s: &[u8]) -> Option<i64> {
    let digits = s.strip_prefix(b"-").unwrap_or(s);
    if digits.is_empty()
        || !digits.iter().all(u8::is_ascii_digit)
        || (digits.len() > 1 && digits[0] == b'0')
    {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// The request at the start of `buf`, `None` while more bytes are needed; a request with no
/// command in it (an empty line, `*0`, `*-1`) has an empty name. `logged_in`: Redis's tighter
/// limits for a client that has yet to log in do not apply.
///
/// ```
/// use lockkit_proxy::protocol::request_frame;
/// let f = request_frame(b"*1\r\n$4\r\nPING\r\n", true).unwrap().unwrap();
/// assert_eq!((f.len, f.name), (14, 8..12));
/// let e = request_frame(b"*1\r\nfoo\r\n", true).unwrap_err();
/// assert_eq!(e.0.as_deref(), Some("Protocol error: expected '$', got 'f'"));
/// ```
///
/// # Errors
/// A [`RequestError`] with Redis's text.
pub fn request_frame(buf: &[u8], logged_in: bool) -> Result<Option<CommandFrame>, RequestError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        return inline(buf);
    }
    let Some(cr) = buf.iter().position(|&b| b == b'\r') else {
        return if buf.len() > INLINE_MAX {
            Err(RequestError::says("too big mbulk count string"))
        } else {
            Ok(None)
        };
    };
    if cr + 2 > buf.len() {
        return Ok(None);
    }
    let count = match string2ll(&buf[1..cr]) {
        Some(n) if n <= MULTIBULK_MAX => n,
        _ => return Err(RequestError::says("invalid multibulk length")),
    };
    if count > UNAUTH_MULTIBULK_MAX && !logged_in {
        return Err(RequestError::says("unauthenticated multibulk length"));
    }
    let mut pos = cr + 2;
    let mut name = pos..pos;
    for i in 0..count.max(0) {
        let rest = &buf[pos..];
        let Some(cr) = rest.iter().position(|&b| b == b'\r') else {
            return if rest.len() > INLINE_MAX {
                Err(RequestError::says("too big bulk count string"))
            } else {
                Ok(None)
            };
        };
        if cr + 2 > rest.len() {
            return Ok(None);
        }
        if rest[0] != b'$' {
            return Err(RequestError::says(format!(
                "expected '$', got '{}'",
                char::from(rest[0])
            )));
        }
        let len = match string2ll(&rest[1..cr]) {
            Some(n) if (0..=BULK_MAX).contains(&n) => n as usize,
            _ => return Err(RequestError::says("invalid bulk length")),
        };
        if len as i64 > UNAUTH_BULK_MAX && !logged_in {
            return Err(RequestError::says("unauthenticated bulk length"));
        }
        let start = pos + cr + 2;
        let end = start + len + 2;
        if end > REQUEST_MAX {
            return Err(RequestError(None));
        }
        if buf.len() < end {
            return Ok(None);
        }
        if i == 0 {
            name = start..start + len;
        }
        pos = end;
    }
    Ok(Some(CommandFrame {
        len: pos,
        name,
        inline: false,
    }))
}

/// An inline request: one line, split as `sdssplitargs` splits it.
fn inline(buf: &[u8]) -> Result<Option<CommandFrame>, RequestError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > INLINE_MAX {
            Err(RequestError::says("too big inline request"))
        } else {
            Ok(None)
        };
    };
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    let Some(args) = split_args(line) else {
        return Err(RequestError::says("unbalanced quotes in request"));
    };
    let name = match args.first() {
        Some(first) => first.clone(),
        None => 0..0,
    };
    Ok(Some(CommandFrame {
        len: nl + 1,
        name,
        inline: true,
    }))
}

/// Where the words of an inline line are (Redis's `sdssplitargs`), or `None` for unbalanced
/// quotes. A quoted first word is reported by its span in the line, quotes included only when
/// it has escapes; the proxy needs its name for routing alone, and the server splits the line
/// again itself.
fn split_args(line: &[u8]) -> Option<Vec<std::ops::Range<usize>>> {
    let mut out = Vec::new();
    let mut p = 0;
    let is_space = |b: u8| matches!(b, b' ' | b'\n' | b'\r' | b'\t' | 0x0b | 0x0c);
    loop {
        while p < line.len() && is_space(line[p]) {
            p += 1;
        }
        if p == line.len() {
            return Some(out);
        }
        let start = p;
        let (mut inq, mut insq) = (false, false);
        let mut quoted_start = None;
        loop {
            if inq {
                match line.get(p) {
                    None => return None,
                    Some(b'\\')
                        if line.get(p + 1) == Some(&b'x')
                            && line.get(p + 2).is_some_and(u8::is_ascii_hexdigit)
                            && line.get(p + 3).is_some_and(u8::is_ascii_hexdigit) =>
                    {
                        p += 3;
                    }
                    Some(b'\\') if p + 1 < line.len() => p += 1,
                    Some(b'"') => {
                        // A closing quote must be followed by a space or the end.
                        if p + 1 < line.len() && !is_space(line[p + 1]) {
                            return None;
                        }
                        p += 1;
                        break;
                    }
                    Some(_) => {}
                }
            } else if insq {
                match line.get(p) {
                    None => return None,
                    Some(b'\\') if line.get(p + 1) == Some(&b'\'') => p += 1,
                    Some(b'\'') => {
                        if p + 1 < line.len() && !is_space(line[p + 1]) {
                            return None;
                        }
                        p += 1;
                        break;
                    }
                    Some(_) => {}
                }
            } else {
                match line.get(p) {
                    None => break,
                    Some(&b) if is_space(b) => break,
                    Some(b'"') => {
                        inq = true;
                        quoted_start.get_or_insert(p + 1);
                    }
                    Some(b'\'') => {
                        insq = true;
                        quoted_start.get_or_insert(p + 1);
                    }
                    Some(_) => {}
                }
            }
            p += 1;
        }
        // A word that is one quoted string is named by what is inside the quotes.
        match quoted_start {
            Some(q) if q == start + 1 && p > q => out.push(q..p - 1),
            _ => out.push(start..p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(buf: &[u8]) -> String {
        request_frame(buf, true).unwrap_err().0.unwrap()
    }

    #[test]
    fn errors_read_as_redis_writes_them() {
        assert_eq!(
            err(b"*3000000000\r\n"),
            "Protocol error: invalid multibulk length"
        );
        assert_eq!(
            err(b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n"),
            "Protocol error: expected '$', got 'f'"
        );
        for bad in ["$-10", "$2000000000", "$blabla"] {
            let req = format!("*3\r\n$3\r\nSET\r\n$1\r\nx\r\n{bad}\r\n");
            assert_eq!(err(req.as_bytes()), "Protocol error: invalid bulk length");
        }
        assert_eq!(
            err(b"set \"\"\"test-key\"\"\" test-value\r\n"),
            "Protocol error: unbalanced quotes in request"
        );
        let long = vec![b'A'; INLINE_MAX + 1];
        assert_eq!(err(&long), "Protocol error: too big inline request");
        let mut long = b"*".to_vec();
        long.extend(vec![b'1'; INLINE_MAX + 1]);
        assert_eq!(err(&long), "Protocol error: too big mbulk count string");
    }

    #[test]
    fn before_login_requests_are_small() {
        let e = request_frame(b"*11\r\n", false).unwrap_err();
        assert_eq!(
            e.0.unwrap(),
            "Protocol error: unauthenticated multibulk length"
        );
        let e = request_frame(b"*2\r\n$4\r\nAUTH\r\n$16385\r\n", false).unwrap_err();
        assert_eq!(e.0.unwrap(), "Protocol error: unauthenticated bulk length");
        assert!(request_frame(b"*11\r\n", true).unwrap().is_none());
    }

    #[test]
    fn empty_requests_have_no_name_and_partial_ones_wait() {
        for (buf, len) in [
            (&b"\r\n"[..], 2),
            (b"*-10\r\n", 6),
            (b"*0\r\n", 4),
            (b"   \n", 4),
        ] {
            let f = request_frame(buf, true).unwrap().unwrap();
            assert_eq!((f.len, f.name.is_empty()), (len, true), "{buf:?}");
        }
        let full = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        for cut in 1..full.len() {
            assert_eq!(request_frame(&full[..cut], true), Ok(None), "{cut}");
        }
    }

    #[test]
    fn inline_words_split_with_quotes() {
        let line = b"\"get\" 'a b' \"c\\\"d\"";
        let words = split_args(line).unwrap();
        assert_eq!(&line[words[0].clone()], b"get");
        assert_eq!(words.len(), 3);
        assert!(split_args(b"set \"a").is_none());
        assert!(split_args(b"set 'a'b").is_none());
    }
}
