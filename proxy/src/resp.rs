//! Just enough of RESP2 and RESP3 to find where one frame ends, with no copy and no allocation:
//! the proxy forwards the bytes it read, so it only needs boundaries, a command's name and, for
//! the few commands a plugin asked for, its arguments.
//!
//! Why not a RESP crate: the ones that fit (`redis-protocol`) decode each array into a `Vec`
//! of frames; the proxy needs neither the frames nor the copy, only lengths and slices, and it
//! must also split Redis's inline commands (`PING\r\n` typed into telnet), which they refuse.

use std::ops::Range;

/// Largest element count or bulk length accepted (Redis's own limit on a bulk is 512 MB).
const MAX_LEN: i64 = 1 << 32;

/// Bytes that do not follow the protocol; the connection falls back to blind copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolError(pub &'static str);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "protocol error: {}", self.0)
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
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

fn parse_len(line: &[u8]) -> Result<i64, ProtocolError> {
    let (neg, digits) = match line.split_first() {
        Some((b'-', d)) => (true, d),
        _ => (false, line),
    };
    if digits.is_empty() || digits.len() > 12 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(ProtocolError("bad length"));
    }
    let n = digits
        .iter()
        .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
    if n > MAX_LEN {
        return Err(ProtocolError("length too large"));
    }
    Ok(if neg { -n } else { n })
}

/// The length of the one complete frame at the start of `buf` (a reply, RESP2 or RESP3), or
/// `None` when more bytes are needed.
///
/// ```
/// use lockkit_proxy::resp::frame_len;
/// assert_eq!(frame_len(b"+OK\r\n:1\r\n"), Ok(Some(5)));
/// assert_eq!(frame_len(b"*2\r\n$3\r\nfoo\r\n:4"), Ok(None));
/// assert_eq!(frame_len(b"%1\r\n+a\r\n_\r\nrest"), Ok(Some(11)));
/// ```
///
/// # Errors
/// [`ProtocolError`] for bytes that are not RESP (or streamed RESP3 aggregates, which Redis
/// never sends).
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
    let mut pos = 0usize;
    // Elements still to read, nesting flattened: only the total length matters.
    let mut remaining: i64 = 1;
    while remaining > 0 {
        let Some(end) = find_crlf(buf, pos) else {
            return Ok(None);
        };
        let kind = buf[pos];
        let line = &buf[pos + 1..end];
        pos = end + 2;
        remaining -= 1;
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {}
            b'$' | b'!' | b'=' => {
                let n = parse_len(line)?;
                if n >= 0 {
                    let stop = pos + n as usize;
                    if buf.len() < stop + 2 {
                        return Ok(None);
                    }
                    if &buf[stop..stop + 2] != b"\r\n" {
                        return Err(ProtocolError("bulk string without CRLF"));
                    }
                    pos = stop + 2;
                }
            }
            b'*' | b'~' | b'>' => remaining += parse_len(line)?.max(0),
            b'%' => remaining += 2 * parse_len(line)?.max(0),
            // An attribute map comes before the reply it describes: both are one frame here.
            b'|' => remaining += 2 * parse_len(line)?.max(0) + 1,
            _ => return Err(ProtocolError("unknown frame type")),
        }
    }
    Ok(Some(pos))
}

/// One command at the start of a client's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandFrame {
    /// Bytes of the whole command.
    pub len: usize,
    /// Where its name is, relative to the frame's start (empty for an empty inline line).
    pub name: Range<usize>,
    /// Whether it is an inline command (one text line) rather than a RESP array.
    pub inline: bool,
}

/// The command at the start of `buf`, or `None` when more bytes are needed.
///
/// ```
/// use lockkit_proxy::resp::command_frame;
/// let buf = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING";
/// let c = command_frame(buf).unwrap().unwrap();
/// assert_eq!((c.len, &buf[c.name.clone()]), (20, &b"GET"[..]));
/// let c = command_frame(b"ping\r\n").unwrap().unwrap();
/// assert_eq!((c.len, c.inline), (6, true));
/// ```
///
/// # Errors
/// [`ProtocolError`] for an array whose elements are not bulk strings.
pub fn command_frame(buf: &[u8]) -> Result<Option<CommandFrame>, ProtocolError> {
    if buf.first() != Some(&b'*') {
        let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
            return Ok(None);
        };
        let line = &buf[..nl];
        let start = line
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(line.len());
        let stop = line[start..]
            .iter()
            .position(|b| b.is_ascii_whitespace())
            .map_or(line.len(), |p| start + p);
        return Ok(Some(CommandFrame {
            len: nl + 1,
            name: start..stop,
            inline: true,
        }));
    }
    let Some(end) = find_crlf(buf, 0) else {
        return Ok(None);
    };
    let count = parse_len(&buf[1..end])?;
    let mut pos = end + 2;
    let mut name = pos..pos;
    for i in 0..count.max(0) {
        let Some(end) = find_crlf(buf, pos) else {
            return Ok(None);
        };
        if buf[pos] != b'$' {
            return Err(ProtocolError("command element is not a bulk string"));
        }
        let n = parse_len(&buf[pos + 1..end])?;
        if n < 0 {
            return Err(ProtocolError("null command element"));
        }
        let start = end + 2;
        let stop = start + n as usize;
        if buf.len() < stop + 2 {
            return Ok(None);
        }
        if i == 0 {
            name = start..stop;
        }
        pos = stop + 2;
    }
    Ok(Some(CommandFrame {
        len: pos,
        name,
        inline: false,
    }))
}

/// The arguments of a complete command frame (its name first), as slices of it.
///
/// ```
/// use lockkit_proxy::resp::command_args;
/// assert_eq!(command_args(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", false), vec![&b"GET"[..], b"k"]);
/// assert_eq!(command_args(b"set  a b\r\n", true), vec![&b"set"[..], b"a", b"b"]);
/// ```
pub fn command_args(frame: &[u8], inline: bool) -> Vec<&[u8]> {
    if inline {
        // Redis splits inline commands with quotes too; the proxy only reads names and keys of
        // lock commands here, which no client sends inline.
        return frame
            .split(|b| b.is_ascii_whitespace())
            .filter(|s| !s.is_empty())
            .collect();
    }
    let mut out = Vec::new();
    let Some(end) = find_crlf(frame, 0) else {
        return out;
    };
    let mut pos = end + 2;
    while let Some(end) = find_crlf(frame, pos) {
        let Ok(n) = parse_len(&frame[pos + 1..end]) else {
            break;
        };
        let start = end + 2;
        let stop = start + n.max(0) as usize;
        if stop > frame.len() {
            break;
        }
        out.push(&frame[start..stop]);
        pos = stop + 2;
    }
    out
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
        let Ok(n) = parse_len(&frame[1..end]) else {
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

/// Appends `items` as a RESP array of bulk strings (a command).
pub fn encode_command(out: &mut Vec<u8>, items: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
    for i in items {
        out.extend_from_slice(format!("${}\r\n", i.len()).as_bytes());
        out.extend_from_slice(i);
        out.extend_from_slice(b"\r\n");
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(frame_len(f), Ok(Some(f.len())), "{f:?}");
            for cut in 0..f.len() {
                assert_eq!(frame_len(&f[..cut]), Ok(None), "{f:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn a_bulk_may_hold_crlf_and_binary() {
        let f = b"$6\r\na\r\nb\x00\xff\r\n";
        assert_eq!(frame_len(f), Ok(Some(f.len())));
        assert_eq!(reply_kind(f), ReplyKind::Bulk(b"a\r\nb\x00\xff"));
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        assert!(frame_len(b"?x\r\n").is_err());
        assert!(frame_len(b"$abc\r\n").is_err());
        assert!(frame_len(b"$2\r\nabcd\r\n").is_err());
        assert!(command_frame(b"*1\r\n:1\r\n").is_err());
    }

    #[test]
    fn commands_split_in_a_pipeline() {
        let buf = b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n";
        let a = command_frame(buf).unwrap().unwrap();
        assert_eq!(&buf[a.name.clone()], b"PING");
        let b = command_frame(&buf[a.len..]).unwrap().unwrap();
        assert_eq!(a.len + b.len, buf.len());
        assert_eq!(
            command_args(&buf[a.len..], false),
            vec![&b"ECHO"[..], b"hi"]
        );
        for cut in 0..buf.len() - a.len {
            assert_eq!(command_frame(&buf[a.len..a.len + cut]), Ok(None));
        }
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
