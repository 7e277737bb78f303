//! Just enough of RESP2 and RESP3 to find where one frame ends, with no copy and no allocation:
//! the proxy forwards the bytes it read, so it only needs boundaries, a command's name and, for
//! the few commands a plugin asked for, its arguments.
//!
//! Why not a RESP crate: the ones that fit (`redis-protocol`) decode each array into a `Vec`
//! of frames; the proxy needs neither the frames nor the copy, only lengths and slices, and it
//! must also split Redis's inline commands (`PING\r\n` typed into telnet), which they refuse.
//! Where a reply ends is lockkit's own [`frame_len`], the scanner its connections use.

use std::ops::Range;

use lockkit::resp::find_crlf;
/// Where a reply ends: lockkit's own scanner, which its connections read replies with too.
pub use lockkit::resp::frame_len;

/// Bytes that do not follow the protocol; the connection falls back to blind copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameError(pub &'static str);

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "protocol error: {}", self.0)
    }
}

/// A length or count line's number, as lockkit reads it.
fn parse_len(line: &[u8]) -> Result<i64, FrameError> {
    lockkit::resp::parse_len(line).map_err(|_| FrameError("bad length"))
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
/// [`FrameError`] for an array whose elements are not bulk strings.
pub fn command_frame(buf: &[u8]) -> Result<Option<CommandFrame>, FrameError> {
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
            return Err(FrameError("command element is not a bulk string"));
        }
        let n = parse_len(&buf[pos + 1..end])?;
        if n < 0 {
            return Err(FrameError("null command element"));
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

/// Bytes read at a time; a buffer grows past this only to hold one larger frame.
pub(crate) const READ_CHUNK: usize = 16 * 1024;

/// Room for the next read; a partial frame bigger than the chunk keeps its bytes.
pub(crate) fn reserve(buf: &mut Vec<u8>) {
    if buf.capacity() - buf.len() < READ_CHUNK / 4 {
        buf.reserve(READ_CHUNK);
    }
    // A buffer grown for one huge frame is given back once that frame is gone.
    if buf.is_empty() && buf.capacity() > 8 * READ_CHUNK {
        *buf = Vec::with_capacity(READ_CHUNK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bulk_may_hold_crlf_and_binary() {
        let f = b"$6\r\na\r\nb\x00\xff\r\n";
        assert_eq!(reply_kind(f), ReplyKind::Bulk(b"a\r\nb\x00\xff"));
    }

    #[test]
    fn a_command_of_other_than_bulk_strings_is_a_protocol_error() {
        assert!(command_frame(b"*1\r\n:1\r\n").is_err());
        assert!(command_frame(b"*1\r\n$x\r\n").is_err());
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
