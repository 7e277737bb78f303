//! Requests read from a client's bytes exactly as redis-server 7.0 reads its query buffer
//! (`networking.c`: `processInputBuffer`, `processMultibulkBuffer`, `processInlineBuffer`).
//!
//! Every quirk of Redis's reader is kept on purpose, because a proxy that reads the same bytes
//! differently from the server behind it can be made to forward something other than what it
//! checked (the attack this crate exists to close):
//! - a count or length line ends at the first `\r`, and the byte after it is skipped whatever
//!   it is (`$3\rXabc` is a length of 3); the two bytes after a bulk are skipped unchecked too;
//! - those searches stop at a NUL byte, as C's `strchr` does: a line with a NUL before its
//!   `\r` (or an inline line with one before its `\n`) never ends, until the 64 KiB limit;
//! - a request of no command (`*0`, `*-5`, an empty or blank inline line) is read and ignored
//!   without a reply; `*-0`, `*01`, `*+1` are not numbers (see [`crate::number::string2ll`]);
//! - before login, at most 10 elements of at most 16 KiB each.
//!
//! A request whose bytes are not the plain encoding of its arguments is reported as such
//! ([`Request::is_canonical`]): whoever forwards it sends [`Request::write_canonical`]'s bytes,
//! so the next reader cannot read it any other way.

use std::ops::Range;

use crate::inline::split_args;
use crate::number::string2ll;

/// The longest inline request, and the longest count or length line, before the newline
/// (Redis's `PROTO_INLINE_MAX_SIZE`).
pub const INLINE_MAX: usize = 64 * 1024;
/// The most elements of a request (Redis: `INT_MAX`).
pub const MULTIBULK_MAX: i64 = i32::MAX as i64;
/// Before login, at most this many elements... (Redis 7.0's fixed limits for a client whose
/// login is required and not done).
pub const UNAUTH_MULTIBULK_MAX: i64 = 10;
/// ... of at most this many bytes each.
pub const UNAUTH_BULK_MAX: i64 = 16 * 1024;
/// The default longest bulk string (Redis's `proto-max-bulk-len`).
pub const DEFAULT_MAX_BULK: usize = 512 * 1024 * 1024;
/// Argument slots reserved ahead of a request's arguments, and kept between requests, at most.
const SPARE_MAX: usize = 1024;

/// A request that breaks the protocol. Redis answers [`ProtocolError::reply`] and closes the
/// connection; so must whoever reads with this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtocolError {
    /// An inline request longer than [`INLINE_MAX`] with no newline yet.
    TooBigInlineRequest,
    /// An inline request with a quote that is not closed, or closed before a non-blank.
    UnbalancedQuotes,
    /// A count line longer than [`INLINE_MAX`] with no `\r` yet.
    TooBigMbulkCount,
    /// A count that is not a number, or above [`MULTIBULK_MAX`].
    InvalidMultibulkLength,
    /// A count above [`UNAUTH_MULTIBULK_MAX`] before login.
    UnauthenticatedMultibulkLength,
    /// A length line longer than [`INLINE_MAX`] with no `\r` yet.
    TooBigBulkCount,
    /// An element that does not start with `$`: the byte it starts with.
    ExpectedDollar(u8),
    /// A length that is not a number, negative, or above the bulk limit.
    InvalidBulkLength,
    /// A length above [`UNAUTH_BULK_MAX`] before login.
    UnauthenticatedBulkLength,
}

impl ProtocolError {
    /// The error's text as Redis writes it after `-ERR `.
    ///
    /// ```
    /// use lockkit_resp::ProtocolError;
    /// assert_eq!(ProtocolError::ExpectedDollar(b'+').message(), "Protocol error: expected '$', got '+'");
    /// ```
    #[must_use]
    pub fn message(&self) -> String {
        let what = match self {
            ProtocolError::TooBigInlineRequest => "too big inline request",
            ProtocolError::UnbalancedQuotes => "unbalanced quotes in request",
            ProtocolError::TooBigMbulkCount => "too big mbulk count string",
            ProtocolError::InvalidMultibulkLength => "invalid multibulk length",
            ProtocolError::UnauthenticatedMultibulkLength => "unauthenticated multibulk length",
            ProtocolError::TooBigBulkCount => "too big bulk count string",
            ProtocolError::InvalidBulkLength => "invalid bulk length",
            ProtocolError::UnauthenticatedBulkLength => "unauthenticated bulk length",
            ProtocolError::ExpectedDollar(b) => {
                // Redis maps CR and LF in an error to spaces; a byte above 127 goes out raw,
                // which a Rust string cannot hold, so it is shown as U+FFFD's lossy form.
                let shown = match b {
                    b'\r' | b'\n' => ' ',
                    b if b.is_ascii() => char::from(*b),
                    _ => char::REPLACEMENT_CHARACTER,
                };
                return format!("Protocol error: expected '$', got '{shown}'");
            }
        };
        format!("Protocol error: {what}")
    }

    /// The whole error reply, byte for byte as Redis sends it (a byte above 127 included).
    #[must_use]
    pub fn reply(&self) -> Vec<u8> {
        match self {
            ProtocolError::ExpectedDollar(b) if !b.is_ascii() => {
                let mut out = b"-ERR Protocol error: expected '$', got '".to_vec();
                out.push(*b);
                out.extend_from_slice(b"'\r\n");
                out
            }
            _ => format!("-ERR {}\r\n", self.message()).into_bytes(),
        }
    }
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for ProtocolError {}

/// What the reader accepts beyond Redis's fixed limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// The longest bulk string (Redis's `proto-max-bulk-len`, 512 MiB by default).
    pub max_bulk: usize,
}

impl Default for RequestLimits {
    fn default() -> RequestLimits {
        RequestLimits {
            max_bulk: DEFAULT_MAX_BULK,
        }
    }
}

/// One request, read from the front of the bytes given to [`RequestParser::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    len: usize,
    args: ArgStore,
    canonical: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ArgStore {
    /// A multibulk request's elements, where they are in the buffer.
    Spans(Vec<Range<usize>>),
    /// An inline request's words, unquoted and unescaped.
    Owned(Vec<Vec<u8>>),
}

impl Request {
    /// How many bytes of the buffer this request took.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no command (`*0`, `*-1`, an empty inline line): Redis reads it and
    /// does nothing, not even reply; whoever forwards must drop it.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.argc() == 0
    }

    /// How many arguments, the command's name included.
    #[must_use]
    pub fn argc(&self) -> usize {
        match &self.args {
            ArgStore::Spans(s) => s.len(),
            ArgStore::Owned(o) => o.len(),
        }
    }

    /// Whether it came as an inline line rather than a multibulk.
    #[must_use]
    pub fn is_inline(&self) -> bool {
        matches!(self.args, ArgStore::Owned(_))
    }

    /// Whether its bytes are exactly the multibulk encoding of its arguments (every line ends
    /// in `\r\n`, every bulk is followed by `\r\n`): then they can be forwarded as they came.
    /// Otherwise forward [`Request::write_canonical`]'s bytes.
    #[must_use]
    pub fn is_canonical(&self) -> bool {
        self.canonical
    }

    /// Argument `i` (0 is the command's name); `buf` is the buffer given to the parse.
    #[must_use]
    pub fn arg<'a>(&'a self, buf: &'a [u8], i: usize) -> Option<&'a [u8]> {
        match &self.args {
            ArgStore::Spans(s) => s.get(i).map(|r| &buf[r.clone()]),
            ArgStore::Owned(o) => o.get(i).map(Vec::as_slice),
        }
    }

    /// Every argument in order; `buf` is the buffer given to the parse.
    pub fn args<'a>(&'a self, buf: &'a [u8]) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
        (0..self.argc()).map(move |i| self.arg(buf, i).unwrap_or_default())
    }

    /// The arguments, copied out of the buffer.
    #[must_use]
    pub fn into_args(self, buf: &[u8]) -> Vec<Vec<u8>> {
        match self.args {
            ArgStore::Spans(s) => s.into_iter().map(|r| buf[r].to_vec()).collect(),
            ArgStore::Owned(o) => o,
        }
    }

    /// Appends the plain multibulk encoding of the arguments to `out`.
    pub fn write_canonical(&self, buf: &[u8], out: &mut Vec<u8>) {
        write_multibulk(out, self.args(buf));
    }
}

/// Appends `args` as one multibulk request (`*N\r\n` then `$len\r\narg\r\n` each).
///
/// ```
/// let mut out = Vec::new();
/// lockkit_resp::write_multibulk(&mut out, [&b"GET"[..], b"k"]);
/// assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
/// ```
pub fn write_multibulk<'a, I>(out: &mut Vec<u8>, args: I)
where
    I: IntoIterator<Item = &'a [u8]>,
    I::IntoIter: ExactSizeIterator,
{
    let args = args.into_iter();
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        out.push(b'$');
        out.extend_from_slice(a.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Reads requests one at a time, resuming where it stopped, so a request that arrives a byte at
/// a time costs time linear in its size.
///
/// The contract: [`RequestParser::parse`] is given the bytes from the current request's first
/// byte on; until it returns a request, each call gets the same bytes with more appended. When
/// it returns one, the caller drops [`Request::len`] bytes (or moves its offset past them)
/// before the next call. After an error the connection is to be closed.
///
/// ```
/// use lockkit_resp::RequestParser;
/// let mut p = RequestParser::default();
/// let wire = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n";
/// assert_eq!(p.parse(&wire[..10], true), Ok(None));
/// let get = p.parse(wire, true).unwrap().unwrap();
/// assert_eq!(get.args(wire).collect::<Vec<_>>(), [&b"GET"[..], b"k"]);
/// let rest = &wire[get.len()..];
/// let ping = p.parse(rest, true).unwrap().unwrap();
/// assert_eq!((ping.is_inline(), ping.arg(rest, 0)), (true, Some(&b"PING"[..])));
/// ```
#[derive(Debug, Default)]
pub struct RequestParser {
    limits: RequestLimits,
    state: ParseState,
    /// A finished request's argument list, kept for the next one ([`RequestParser::recycle`]).
    spare: Vec<Range<usize>>,
}

#[derive(Debug, Default)]
enum ParseState {
    /// Between requests, or inside a line not yet ended: how far it was searched.
    #[default]
    Start,
    /// The first line of a request was searched up to `scanned` without its end.
    Line { scanned: usize, stuck: bool },
    /// Inside a multibulk whose count was read.
    Multibulk(Partial),
}

#[derive(Debug)]
struct Partial {
    left: usize,
    args: Vec<Range<usize>>,
    /// Where the next length line or bulk starts.
    pos: usize,
    /// The length of the bulk at `pos`, once its line was read.
    bulk: Option<usize>,
    /// How far past `pos` the current length line was searched, and whether a NUL stopped it.
    scanned: usize,
    stuck: bool,
    canonical: bool,
}

/// Where C's `strchr(s, c)` finds `c` in `buf[from..]`, given that `buf[..scanned]` was
/// searched already: `Found(at)`, or not yet, with how far it looked and whether a NUL stopped
/// it for good.
enum Search {
    Found(usize),
    NotYet { scanned: usize, stuck: bool },
}

fn strchr(buf: &[u8], scanned: usize, stuck: bool, c: u8) -> Search {
    if stuck {
        return Search::NotYet {
            scanned: buf.len(),
            stuck,
        };
    }
    match buf[scanned..].iter().position(|&b| b == c || b == 0) {
        Some(i) if buf[scanned + i] == c => Search::Found(scanned + i),
        Some(_) => Search::NotYet {
            scanned: buf.len(),
            stuck: true,
        },
        None => Search::NotYet {
            scanned: buf.len(),
            stuck: false,
        },
    }
}

impl RequestParser {
    /// A reader with other limits than Redis's defaults.
    #[must_use]
    pub fn with_limits(limits: RequestLimits) -> RequestParser {
        RequestParser {
            limits,
            state: ParseState::Start,
            spare: Vec::new(),
        }
    }

    /// Hands back a request the caller is done with, so that the next one reuses its storage:
    /// a reader that recycles every request allocates nothing per request once warmed up.
    pub fn recycle(&mut self, request: Request) {
        if let ArgStore::Spans(mut spans) = request.args {
            if spans.capacity() <= SPARE_MAX && spans.capacity() > self.spare.capacity() {
                spans.clear();
                self.spare = spans;
            }
        }
    }

    /// Forgets a request in progress (after an error, or for a new connection).
    pub fn reset(&mut self) {
        self.state = ParseState::Start;
    }

    /// Whether a request is partly read.
    #[must_use]
    pub fn in_progress(&self) -> bool {
        !matches!(self.state, ParseState::Start)
    }

    /// The fewest bytes the buffer must hold (from the current request's start) before a call
    /// can make progress: a reader may reserve exactly this much for a big bulk.
    #[must_use]
    pub fn wanted(&self) -> usize {
        match &self.state {
            ParseState::Multibulk(p) => match p.bulk {
                Some(len) => p.pos + len + 2,
                None => p.pos + p.scanned + 1,
            },
            ParseState::Line { scanned, .. } => scanned + 1,
            ParseState::Start => 1,
        }
    }

    /// The request at the front of `buf`, `Ok(None)` while more bytes are needed.
    /// `authenticated`: whether the client may send more than Redis allows before login
    /// (false only while a login is required and not yet done, as Redis's `authRequired`).
    ///
    /// # Errors
    /// A [`ProtocolError`]: answer its reply and close the connection.
    pub fn parse(
        &mut self,
        buf: &[u8],
        authenticated: bool,
    ) -> Result<Option<Request>, ProtocolError> {
        let result = self.step(buf, authenticated);
        if !matches!(result, Ok(None)) {
            self.state = ParseState::Start;
        }
        result
    }

    fn step(&mut self, buf: &[u8], authenticated: bool) -> Result<Option<Request>, ProtocolError> {
        if let ParseState::Multibulk(p) = &mut self.state {
            return p.resume(buf, authenticated, &self.limits);
        }
        let Some(&first) = buf.first() else {
            return Ok(None);
        };
        let (scanned, stuck) = match self.state {
            ParseState::Line { scanned, stuck } => (scanned, stuck),
            _ => (0, false),
        };
        if first != b'*' {
            return match strchr(buf, scanned, stuck, b'\n') {
                Search::Found(nl) => inline(buf, nl).map(Some),
                Search::NotYet { scanned, stuck } => {
                    if buf.len() > INLINE_MAX {
                        return Err(ProtocolError::TooBigInlineRequest);
                    }
                    self.state = ParseState::Line { scanned, stuck };
                    Ok(None)
                }
            };
        }
        let cr = match strchr(buf, scanned, stuck, b'\r') {
            Search::Found(cr) => cr,
            Search::NotYet { scanned, stuck } => {
                if buf.len() > INLINE_MAX {
                    return Err(ProtocolError::TooBigMbulkCount);
                }
                self.state = ParseState::Line { scanned, stuck };
                return Ok(None);
            }
        };
        if cr + 2 > buf.len() {
            // The byte after the `\r` has not come yet; the search resumes at the `\r`.
            self.state = ParseState::Line {
                scanned: cr,
                stuck: false,
            };
            return Ok(None);
        }
        let count = match string2ll(&buf[1..cr]) {
            Some(n) if n <= MULTIBULK_MAX => n,
            _ => return Err(ProtocolError::InvalidMultibulkLength),
        };
        if count > UNAUTH_MULTIBULK_MAX && !authenticated {
            return Err(ProtocolError::UnauthenticatedMultibulkLength);
        }
        if count <= 0 {
            return Ok(Some(Request {
                len: cr + 2,
                args: ArgStore::Spans(Vec::new()),
                canonical: false,
            }));
        }
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        let mut args = std::mem::take(&mut self.spare);
        args.reserve(count.min(SPARE_MAX));
        let mut partial = Partial {
            left: count,
            args,
            pos: cr + 2,
            bulk: None,
            scanned: 0,
            stuck: false,
            canonical: buf[cr + 1] == b'\n',
        };
        let result = partial.resume(buf, authenticated, &self.limits);
        if matches!(result, Ok(None)) {
            self.state = ParseState::Multibulk(partial);
        }
        result
    }
}

impl Partial {
    fn resume(
        &mut self,
        buf: &[u8],
        authenticated: bool,
        limits: &RequestLimits,
    ) -> Result<Option<Request>, ProtocolError> {
        while self.left > 0 {
            let len = match self.bulk {
                Some(len) => len,
                None => {
                    let line = &buf[self.pos..];
                    let cr = match strchr(line, self.scanned, self.stuck, b'\r') {
                        Search::Found(cr) => cr,
                        Search::NotYet { scanned, stuck } => {
                            if line.len() > INLINE_MAX {
                                return Err(ProtocolError::TooBigBulkCount);
                            }
                            (self.scanned, self.stuck) = (scanned, stuck);
                            return Ok(None);
                        }
                    };
                    if cr + 2 > line.len() {
                        self.scanned = cr;
                        return Ok(None);
                    }
                    if line[0] != b'$' {
                        return Err(ProtocolError::ExpectedDollar(line[0]));
                    }
                    let len = match string2ll(&line[1..cr]) {
                        Some(n) if n >= 0 && n as u64 <= limits.max_bulk as u64 => n,
                        _ => return Err(ProtocolError::InvalidBulkLength),
                    };
                    if len > UNAUTH_BULK_MAX && !authenticated {
                        return Err(ProtocolError::UnauthenticatedBulkLength);
                    }
                    self.canonical &= line[cr + 1] == b'\n';
                    self.pos += cr + 2;
                    (self.scanned, self.stuck) = (0, false);
                    let len = usize::try_from(len).unwrap_or(usize::MAX);
                    self.bulk = Some(len);
                    len
                }
            };
            let end = self.pos + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            self.canonical &= &buf[end..end + 2] == b"\r\n";
            self.args.push(self.pos..end);
            self.pos = end + 2;
            self.bulk = None;
            self.left -= 1;
        }
        Ok(Some(Request {
            len: self.pos,
            args: ArgStore::Spans(std::mem::take(&mut self.args)),
            canonical: self.canonical,
        }))
    }
}

fn inline(buf: &[u8], nl: usize) -> Result<Request, ProtocolError> {
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let words = split_args(line).ok_or(ProtocolError::UnbalancedQuotes)?;
    Ok(Request {
        len: nl + 1,
        args: ArgStore::Owned(words),
        canonical: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every request in `wire`, fed whole, as argument lists; the error that stopped it, if any.
    fn read_all(wire: &[u8], authenticated: bool) -> (Vec<Vec<Vec<u8>>>, Option<ProtocolError>) {
        let mut p = RequestParser::default();
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            match p.parse(&wire[at..], authenticated) {
                Ok(Some(r)) => {
                    let len = r.len();
                    if !r.is_empty() {
                        out.push(r.into_args(&wire[at..]));
                    }
                    at += len;
                }
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    /// The same, fed one byte at a time.
    fn read_bytewise(
        wire: &[u8],
        authenticated: bool,
    ) -> (Vec<Vec<Vec<u8>>>, Option<ProtocolError>) {
        let mut p = RequestParser::default();
        let mut out = Vec::new();
        let mut start = 0;
        for end in 1..=wire.len() {
            loop {
                match p.parse(&wire[start..end], authenticated) {
                    Ok(Some(r)) => {
                        let len = r.len();
                        if !r.is_empty() {
                            out.push(r.into_args(&wire[start..end]));
                        }
                        start += len;
                    }
                    Ok(None) => break,
                    Err(e) => return (out, Some(e)),
                }
            }
        }
        (out, None)
    }

    fn words(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn redis_quirks_observed_on_redis_7_0_15_are_kept() {
        // Each case as redis-server 7.0.15 answered it (probed by hand on loopback).
        let ping = words(&["PING"]);
        // A length line ends at `\r`; the next byte is skipped unseen.
        assert_eq!(
            read_all(b"*1\rX$4\rYPING\r\n", true),
            (vec![ping.clone()], None)
        );
        // A bulk's two trailing bytes are skipped unseen.
        assert_eq!(
            read_all(b"*1\r\n$4\r\nPINGXY*1\r\n$4\r\nPING\r\n", true),
            (vec![ping.clone(), ping.clone()], None)
        );
        // A NUL before the line's end: the line never ends (Redis waits).
        assert_eq!(read_all(b"*1\x00\r\n$4\r\nPING\r\n", true), (vec![], None));
        assert_eq!(read_all(b"PI\x00NG\n", true), (vec![], None));
        assert_eq!(read_all(b"*1\r\n\x00\r\n", true), (vec![], None));
        // No command: read and ignored.
        assert_eq!(
            read_all(b"*-5\r\nPING\r\n", true),
            (vec![ping.clone()], None)
        );
        assert_eq!(
            read_all(b"\r\n\r\nPING\n\n", true),
            (vec![ping.clone()], None)
        );
        // An empty name is a command (Redis answers "unknown command ''").
        assert_eq!(
            read_all(b"*1\r\n$0\r\n\r\n", true),
            (vec![words(&[""])], None)
        );
        assert_eq!(read_all(b"\"\"\r\n", true), (vec![words(&[""])], None));
        // Not numbers.
        for bad in [&b"*-0\r\n"[..], b"*01\r\n", b"*+1\r\n", b"*1 \r\n"] {
            assert_eq!(
                read_all(bad, true).1,
                Some(ProtocolError::InvalidMultibulkLength)
            );
        }
        assert_eq!(
            read_all(b"*1\r\n$-0\r\n", true).1,
            Some(ProtocolError::InvalidBulkLength)
        );
        // `$4\r\r\n`: the length ends at the first `\r`, the second is skipped, the bulk
        // starts at the `\n`.
        assert_eq!(
            read_all(b"*1\r\n$4\r\r\nPING\r\n", true).0,
            vec![words(&["\nPIN"])]
        );
        assert_eq!(
            read_all(b"*1\r\n\r\n", true).1.map(|e| e.reply()),
            Some(b"-ERR Protocol error: expected '$', got ' '\r\n".to_vec())
        );
    }

    #[test]
    fn errors_read_as_redis_writes_them() {
        let e = |w: &[u8]| read_all(w, true).1.unwrap().message();
        assert_eq!(
            e(b"*3000000000\r\n"),
            "Protocol error: invalid multibulk length"
        );
        assert_eq!(
            e(b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n"),
            "Protocol error: expected '$', got 'f'"
        );
        for bad in ["$-10", "$2000000000", "$blabla", "$-1"] {
            let req = format!("*3\r\n$3\r\nSET\r\n$1\r\nx\r\n{bad}\r\n");
            assert_eq!(e(req.as_bytes()), "Protocol error: invalid bulk length");
        }
        assert_eq!(
            e(b"set \"\"\"test-key\"\"\" test-value\r\n"),
            "Protocol error: unbalanced quotes in request"
        );
        assert_eq!(
            e(&[b'A'; INLINE_MAX + 1]),
            "Protocol error: too big inline request"
        );
        let mut long = b"*".to_vec();
        long.extend([b'1'; INLINE_MAX + 1]);
        assert_eq!(e(&long), "Protocol error: too big mbulk count string");
        let mut long = b"*1\r\n$".to_vec();
        long.extend([b'1'; INLINE_MAX + 1]);
        assert_eq!(e(&long), "Protocol error: too big bulk count string");
        // A NUL-stuck line fails at the same size.
        let mut stuck = b"*1\x00".to_vec();
        stuck.extend([b'\r'; INLINE_MAX]);
        assert_eq!(e(&stuck), "Protocol error: too big mbulk count string");
    }

    #[test]
    fn before_login_requests_are_small() {
        let e = |w: &[u8]| read_all(w, false).1;
        assert_eq!(
            e(b"*11\r\n"),
            Some(ProtocolError::UnauthenticatedMultibulkLength)
        );
        assert_eq!(
            e(b"*2\r\n$4\r\nAUTH\r\n$16385\r\n"),
            Some(ProtocolError::UnauthenticatedBulkLength)
        );
        // Refused at the header, before a byte of the bulk came.
        assert_eq!(
            e(b"*1\r\n$300000000\r\n"),
            Some(ProtocolError::UnauthenticatedBulkLength)
        );
        assert_eq!(e(b"*10\r\n"), None);
        assert_eq!(read_all(b"*11\r\n", true).1, None);
        // An invalid count is invalid first, as in Redis.
        assert_eq!(
            e(b"*3000000000\r\n"),
            Some(ProtocolError::InvalidMultibulkLength)
        );
    }

    #[test]
    fn a_request_fed_a_byte_at_a_time_reads_as_fed_whole() {
        let wires: [&[u8]; 6] = [
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\nset a 'b c'\n",
            b"*1\rX$4\rYPING\r\n*0\r\n",
            b"*1\r\n$4\r\nPINGXY\"\"\r\n",
            b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n",
            b"*1\r\n$4\r\r\nPING\r\n",
            b"echo \"a\\x41\"\r\n*2\r\n$0\r\n\r\n$0\r\n\r\n",
        ];
        for w in wires {
            assert_eq!(read_bytewise(w, true), read_all(w, true), "{w:?}");
        }
    }

    #[test]
    fn canonical_requests_are_told_from_others() {
        let mut p = RequestParser::default();
        let plain = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        assert!(p.parse(plain, true).unwrap().unwrap().is_canonical());
        for odd in [
            &b"*2\r\n$3\rXGET\r\n$1\r\nk\r\n"[..],
            b"*2\rX$3\r\nGET\r\n$1\r\nk\r\n",
            b"*2\r\n$3\r\nGETXY$1\r\nk\r\n",
            b"GET k\r\n",
        ] {
            let r = p.parse(odd, true).unwrap().unwrap();
            assert!(!r.is_canonical(), "{odd:?}");
            let mut out = Vec::new();
            r.write_canonical(odd, &mut out);
            assert_eq!(out, plain, "{odd:?}");
        }
    }

    #[test]
    fn a_recycled_request_lends_its_storage_to_the_next() {
        let mut p = RequestParser::default();
        let wire = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$3\r\nGET\r\n$1\r\nj\r\n";
        let first = p.parse(wire, true).unwrap().unwrap();
        let len = first.len();
        p.recycle(first);
        let second = p.parse(&wire[len..], true).unwrap().unwrap();
        assert_eq!(second.arg(&wire[len..], 1), Some(&b"j"[..]));
        assert!(p.spare.capacity() == 0, "the spare is in use");
        p.recycle(second);
        assert!(p.spare.capacity() >= 2);
    }

    #[test]
    fn a_big_bulk_says_how_much_to_reserve() {
        let mut p = RequestParser::default();
        let head = b"*2\r\n$3\r\nSET\r\n$1000000\r\n";
        assert_eq!(p.parse(head, true), Ok(None));
        assert_eq!(p.wanted(), head.len() + 1_000_000 + 2);
    }
}
