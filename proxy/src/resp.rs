//! Replies, as far as the proxy reads them: where one ends (lockkit's own [`frame_len`], the
//! scanner its connections use, RESP2 and RESP3, no copy and no allocation) and what kind it is
//! ([`reply_kind`], for plugins that read lock traffic). Requests are not read here: every
//! client's bytes are read by [`lockkit_resp`], the workspace's one reading of them, exactly as
//! redis-server reads them.

use lockkit::resp::find_crlf;
/// Where a reply ends: lockkit's own scanner, which its connections read replies with too.
pub use lockkit::resp::frame_len;

/// A length or count line's number, as lockkit reads it.
fn parse_len(line: &[u8]) -> Option<i64> {
    lockkit::resp::parse_len(line).ok()
}

/// What a reply is, as far as a plugin that reads lock traffic needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind<'a> {
    /// `+...` (its text).
    Status(&'a [u8]),
    /// `-...` or `!...` (the first line).
    Error(&'a [u8]),
    /// `:n`.
    Int(i64),
    /// `$n` with its bytes, or a verbatim string.
    Bulk(&'a [u8]),
    /// `$-1`, `*-1` or `_`.
    Nil,
    /// An array, set, map or anything else.
    Other,
}

/// Classifies a complete reply frame (attributes in front are skipped).
///
/// ```
/// use lockkit_proxy::resp::{reply_kind, ReplyKind};
/// assert_eq!(reply_kind(b"+OK\r\n"), ReplyKind::Status(b"OK"));
/// assert_eq!(reply_kind(b":-1\r\n"), ReplyKind::Int(-1));
/// assert_eq!(reply_kind(b"$-1\r\n"), ReplyKind::Nil);
/// assert_eq!(reply_kind(b"$2\r\nhi\r\n"), ReplyKind::Bulk(b"hi"));
/// ```
pub fn reply_kind(mut frame: &[u8]) -> ReplyKind<'_> {
    while frame.first() == Some(&b'|') {
        // Skip the attribute map: it is a frame of its own, minus the one reply it describes.
        let Some(end) = find_crlf(frame, 0) else {
            return ReplyKind::Other;
        };
        let Some(n) = parse_len(&frame[1..end]) else {
            return ReplyKind::Other;
        };
        let mut pos = end + 2;
        for _ in 0..2 * n.max(0) {
            match frame_len(&frame[pos..]) {
                Ok(Some(l)) => pos += l,
                _ => return ReplyKind::Other,
            }
        }
        frame = &frame[pos..];
    }
    let Some(end) = find_crlf(frame, 0) else {
        return ReplyKind::Other;
    };
    let line = &frame[1..end];
    match frame[0] {
        b'+' => ReplyKind::Status(line),
        b'-' => ReplyKind::Error(line),
        b':' => parse_int(line).map_or(ReplyKind::Other, ReplyKind::Int),
        b'_' => ReplyKind::Nil,
        b'$' | b'*' if line == b"-1" => ReplyKind::Nil,
        b'$' => ReplyKind::Bulk(&frame[end + 2..frame.len().saturating_sub(2).max(end + 2)]),
        b'!' => ReplyKind::Error(&frame[end + 2..frame.len().saturating_sub(2).max(end + 2)]),
        _ => ReplyKind::Other,
    }
}

/// A decimal integer as Redis writes them (`-12`), or `None`.
pub fn parse_int(s: &[u8]) -> Option<i64> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// An error reply `-{text}\r\n` (line breaks in `text` become spaces).
pub fn error_reply(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 3);
    out.push(b'-');
    out.extend(
        text.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
    out
}

/// Bytes read at a time; a buffer grows past this only to hold one larger frame.
pub(crate) const READ_CHUNK: usize = 16 * 1024;

/// Room for the next read; a partial frame bigger than the chunk keeps its bytes. A bulk
/// string at the start of `buf` whose length line is in gets room for all of it at once (a
/// buffer grown by doubling would hold old and new copies at once, and more than it needs).
pub(crate) fn reserve(buf: &mut Vec<u8>) {
    if let Some(total) = bulk_len(buf) {
        reserve_total(buf, total);
    }
    if buf.capacity() - buf.len() < READ_CHUNK / 4 {
        buf.reserve(READ_CHUNK);
    }
    // A buffer grown for one huge frame is given back once that frame is gone.
    if buf.is_empty() && buf.capacity() > 8 * READ_CHUNK {
        *buf = Vec::with_capacity(READ_CHUNK);
    }
}

/// Room for `total` bytes in `buf` (plus a chunk, so that reading them never grows it again),
/// given at once when that is big.
pub(crate) fn reserve_total(buf: &mut Vec<u8>, total: usize) {
    if total > 4 * READ_CHUNK && total + READ_CHUNK > buf.capacity() {
        buf.reserve_exact(total + READ_CHUNK - buf.len());
    }
}

/// The length of the bulk string reply `$N\r\n...\r\n` at the start of `buf`, once its length
/// line is in.
fn bulk_len(buf: &[u8]) -> Option<usize> {
    if buf.first() != Some(&b'$') {
        return None;
    }
    let end = find_crlf(&buf[..buf.len().min(24)], 0)?;
    let n = usize::try_from(parse_len(&buf[1..end])?).ok()?;
    n.checked_add(end + 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_big_bulk_gets_its_room_at_once() {
        assert_eq!(bulk_len(b"$5\r\nab"), Some(11));
        assert_eq!(bulk_len(b"$-1\r\n"), None);
        assert_eq!(bulk_len(b"+OK\r\n"), None);
        let mut buf = b"$1000000\r\nab".to_vec();
        reserve(&mut buf);
        assert!(buf.capacity() >= 1_000_012);
    }

    #[test]
    fn a_bulk_may_hold_crlf_and_binary() {
        let f = b"$6\r\na\r\nb\x00\xff\r\n";
        assert_eq!(reply_kind(f), ReplyKind::Bulk(b"a\r\nb\x00\xff"));
    }

    #[test]
    fn an_attribute_is_skipped_to_read_the_reply() {
        assert_eq!(reply_kind(b"|1\r\n+k\r\n:1\r\n:7\r\n"), ReplyKind::Int(7));
    }

    #[test]
    fn error_replies_stay_on_one_line() {
        assert_eq!(error_reply("ERR a\r\nb"), b"-ERR a  b\r\n");
    }
}
