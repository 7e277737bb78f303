//! Redis replies as the harness produces them, and as a real server returns them.

use std::fmt;

/// One reply, as a RESP2 client (redis-cli, the transcripts) sees it.
///
/// `Map` and `Double` exist only inside a script that switched to RESP3 with `redis.setresp(3)`;
/// they reach a client flattened to an array and a bulk string, as Redis does for RESP2 clients.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`: a status line.
    Status(String),
    /// `-ERR ...`: an error, with its code (the first word).
    Error(String),
    /// `:1`: an integer.
    Int(i64),
    /// `$n`: a binary-safe string.
    Bulk(Vec<u8>),
    /// `$-1` or `*-1`: nothing.
    Nil,
    /// `*n`: an array of replies.
    Array(Vec<Reply>),
    /// A RESP3 map (flattened to an array for RESP2 clients).
    Map(Vec<(Reply, Reply)>),
    /// A RESP3 double (a bulk string formatted with `%.17g` for RESP2 clients).
    Double(f64),
    /// A RESP3 boolean (`:1` / `:0` for RESP2 clients).
    Bool(bool),
    /// A RESP3 big number, its digits (a bulk string for RESP2 clients).
    BigNumber(String),
    /// A RESP3 verbatim string: its three-letter format (`txt`) and text (a bulk string of the
    /// text for RESP2 clients).
    Verbatim(String, Vec<u8>),
    /// A RESP3 set (an array for RESP2 clients).
    Set(Vec<Reply>),
}

impl Reply {
    /// The `OK` status.
    pub fn ok() -> Reply {
        Reply::Status("OK".to_string())
    }

    /// An error reply; `msg` includes its code, e.g. `"ERR syntax error"`.
    pub fn err(msg: impl Into<String>) -> Reply {
        Reply::Error(msg.into())
    }

    /// A bulk string reply.
    pub fn bulk(b: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(b.as_ref().to_vec())
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// The reply as a RESP2 client receives it (maps flattened, doubles as strings).
    #[must_use]
    pub fn into_resp2(self) -> Reply {
        match self {
            Reply::Map(pairs) => Reply::Array(
                pairs
                    .into_iter()
                    .flat_map(|(k, v)| [k.into_resp2(), v.into_resp2()])
                    .collect(),
            ),
            Reply::Double(d) => Reply::Bulk(crate::number::format_double_reply(d).into_bytes()),
            Reply::Array(items) | Reply::Set(items) => {
                Reply::Array(items.into_iter().map(Reply::into_resp2).collect())
            }
            Reply::Bool(b) => Reply::Int(i64::from(b)),
            Reply::BigNumber(n) => Reply::Bulk(n.into_bytes()),
            Reply::Verbatim(_, text) => Reply::Bulk(text),
            other => other,
        }
    }
}

impl fmt::Display for Reply {
    /// Formats as `redis-cli --no-raw` prints it, without the final newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = crate::tooling::format::format_reply(self);
        f.write_str(text.strip_suffix('\n').unwrap_or(&text))
    }
}

/// Redis's error texts, shared by the commands.
pub(crate) mod errors {
    pub(crate) const WRONGTYPE: &str =
        "WRONGTYPE Operation against a key holding the wrong kind of value";
    pub(crate) const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
    pub(crate) const NOT_FLOAT: &str = "ERR value is not a valid float";
    pub(crate) const STRING_TOO_LONG: &str =
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
    pub(crate) const SYNTAX: &str = "ERR syntax error";
    pub(crate) const OVERFLOW: &str = "ERR increment or decrement would overflow";
}
