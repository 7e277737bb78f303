//! RESP for the server side: requests as Redis's `processMultibulkBuffer` and
//! `processInlineBuffer` read them (with their protocol-error texts), and replies in RESP2 or
//! RESP3.

use crate::reply::Reply;

/// Bytes an inline request or a count line may take before its newline (Redis's
/// `PROTO_INLINE_MAX_SIZE`).
pub const INLINE_MAX: usize = 64 * 1024;
/// The most elements of one request (Redis refuses more than `INT_MAX`; this server keeps
/// memory bounded at one million, what an unauthenticated Redis client may send).
pub const MAX_ARGS: i64 = 1024 * 1024;
/// The longest bulk string (Redis's default `proto-max-bulk-len`, 512 MiB).
pub const MAX_BULK: i64 = 512 * 1024 * 1024;

/// A request that breaks the protocol: Redis answers this text and closes the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError(pub String);

/// Reads requests from a growing buffer, as Redis reads a client's query buffer.
#[derive(Debug, Default)]
pub struct Parser {
    /// A multibulk in progress: its arguments so far and how many are left.
    pending: Option<(Vec<Vec<u8>>, usize)>,
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

fn parse_int(b: &[u8]) -> Option<i64> {
    crate::number::parse_i64(b)
}

impl Parser {
    /// Takes one request from the front of `buf` (removing its bytes): `Ok(None)` when more
    /// bytes are needed, `Ok(Some(argv))` (possibly empty: an empty inline line or `*0`).
    ///
    /// # Errors
    /// Redis's protocol-error text.
    pub fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, QueryError> {
        if self.pending.is_none() {
            match buf.first() {
                None => return Ok(None),
                Some(b'*') => {}
                Some(_) => return inline(buf),
            }
            let Some(end) = find_crlf(buf) else {
                if buf.len() > INLINE_MAX {
                    return Err(perr("too big mbulk count string"));
                }
                return Ok(None);
            };
            let n = match parse_int(&buf[1..end]) {
                Some(n) if n <= MAX_ARGS => n,
                _ => return Err(perr("invalid multibulk length")),
            };
            buf.drain(..end + 2);
            if n <= 0 {
                return Ok(Some(Vec::new()));
            }
            self.pending = Some((Vec::with_capacity((n as usize).min(1024)), n as usize));
        }
        let Some((args, left)) = self.pending.as_mut() else {
            return Ok(None);
        };
        let mut pos = 0;
        while *left > 0 {
            let rest = &buf[pos..];
            let Some(end) = find_crlf(rest) else {
                if rest.len() > INLINE_MAX {
                    buf.drain(..pos);
                    return Err(perr("too big bulk count string"));
                }
                break;
            };
            if rest[0] != b'$' {
                let got = String::from_utf8_lossy(&rest[..1]).into_owned();
                return Err(perr(&format!("expected '$', got '{got}'")));
            }
            let len = match parse_int(&rest[1..end]) {
                Some(l) if (0..=MAX_BULK).contains(&l) => l as usize,
                _ => return Err(perr("invalid bulk length")),
            };
            if rest.len() < end + 2 + len + 2 {
                break;
            }
            let start = end + 2;
            args.push(rest[start..start + len].to_vec());
            pos += start + len + 2;
            *left -= 1;
        }
        buf.drain(..pos);
        if *left == 0 {
            let (args, _) = self.pending.take().unwrap_or_default();
            return Ok(Some(args));
        }
        Ok(None)
    }
}

fn perr(what: &str) -> QueryError {
    QueryError(format!("ERR Protocol error: {what}"))
}

fn inline(buf: &mut Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, QueryError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > INLINE_MAX {
            return Err(perr("too big inline request"));
        }
        return Ok(None);
    };
    let mut line = &buf[..nl];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    let text = String::from_utf8_lossy(line).into_owned();
    buf.drain(..=nl);
    crate::cmdline::split_args(&text)
        .map(Some)
        .map_err(|_| perr("unbalanced quotes in request"))
}

/// Appends `reply` to `out` in RESP2 (`resp3 == false`) or RESP3.
pub fn encode(reply: &Reply, resp3: bool, out: &mut Vec<u8>) {
    match reply {
        Reply::Status(s) => line(out, b'+', s.as_bytes()),
        Reply::Error(e) => line(out, b'-', e.as_bytes()),
        Reply::Int(i) => line(out, b':', i.to_string().as_bytes()),
        Reply::Bulk(b) => {
            line(out, b'$', b.len().to_string().as_bytes());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Reply::Nil if resp3 => out.extend_from_slice(b"_\r\n"),
        Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
        Reply::Array(items) => {
            line(out, b'*', items.len().to_string().as_bytes());
            for i in items {
                encode(i, resp3, out);
            }
        }
        Reply::Map(pairs) if resp3 => {
            line(out, b'%', pairs.len().to_string().as_bytes());
            for (k, v) in pairs {
                encode(k, resp3, out);
                encode(v, resp3, out);
            }
        }
        Reply::Double(d) if resp3 => {
            line(out, b',', crate::number::format_double_reply(*d).as_bytes());
        }
        other => encode(&other.clone().into_resp2(), resp3, out),
    }
}

fn line(out: &mut Vec<u8>, kind: u8, body: &[u8]) {
    out.push(kind);
    // A status or error line cannot carry a newline (Redis replaces them with spaces).
    out.extend(
        body.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(bytes: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, QueryError> {
        let mut p = Parser::default();
        let mut buf = bytes.to_vec();
        let mut out = Vec::new();
        while let Some(args) = p.next(&mut buf)? {
            out.push(args);
        }
        Ok(out)
    }

    fn strs(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn multibulk_and_inline_requests_split_as_redis_reads_them() {
        let got = all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\nset a 'b c'\n").unwrap();
        assert_eq!(
            got,
            vec![
                strs(&["GET", "k"]),
                strs(&["PING"]),
                strs(&["set", "a", "b c"])
            ]
        );
    }

    #[test]
    fn a_request_split_across_reads_is_assembled() {
        let mut p = Parser::default();
        let mut buf = b"*2\r\n$3\r\nGE".to_vec();
        assert_eq!(p.next(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"T\r\n$1\r");
        assert_eq!(p.next(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"\nk\r\n");
        assert_eq!(p.next(&mut buf).unwrap(), Some(strs(&["GET", "k"])));
        assert!(buf.is_empty());
    }

    #[test]
    fn protocol_errors_use_redis_words() {
        let e = |b: &[u8]| all(b).unwrap_err().0;
        assert_eq!(e(b"*x\r\n"), "ERR Protocol error: invalid multibulk length");
        assert_eq!(
            e(b"*1\r\n+a\r\n"),
            "ERR Protocol error: expected '$', got '+'"
        );
        assert_eq!(
            e(b"*1\r\n$-3\r\n"),
            "ERR Protocol error: invalid bulk length"
        );
        assert_eq!(
            e(b"*1\r\n$536870913\r\n"),
            "ERR Protocol error: invalid bulk length"
        );
        assert_eq!(
            e(b"set a 'b\r\n"),
            "ERR Protocol error: unbalanced quotes in request"
        );
        assert_eq!(
            e(&vec![b'a'; INLINE_MAX + 1]),
            "ERR Protocol error: too big inline request"
        );
    }

    #[test]
    fn replies_encode_in_resp2_and_resp3() {
        let r = Reply::Array(vec![
            Reply::Nil,
            Reply::Map(vec![(Reply::bulk("a"), Reply::Double(1.5))]),
        ]);
        let mut two = Vec::new();
        encode(&r, false, &mut two);
        assert_eq!(two, b"*2\r\n$-1\r\n*2\r\n$1\r\na\r\n$3\r\n1.5\r\n");
        let mut three = Vec::new();
        encode(&r, true, &mut three);
        assert_eq!(three, b"*2\r\n_\r\n%1\r\n$1\r\na\r\n,1.5\r\n");
    }
}
