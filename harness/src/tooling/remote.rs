//! A real server as a [`Reply`] source, through the `redis` crate (sync API): for
//! `lua record`, `lua test --url`, `lua exec --url` and the differential tests.

use std::time::Duration;

use crate::reply::Reply;

/// How long connecting to a server (TCP, TLS, AUTH) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to a real Redis server.
pub struct Remote {
    conn: redis::Connection,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Remote")
    }
}

impl Remote {
    /// Connects to `url` (`redis://`, `rediss://`, `redis+unix://`).
    ///
    /// # Errors
    /// A malformed URL or a server that cannot be reached, or that does not finish the
    /// connection set-up (TLS handshake, AUTH, HELLO) within [`CONNECT_TIMEOUT`]: `rediss://`
    /// to a plain server used to wait forever for its TLS reply.
    pub fn connect(url: &str) -> redis::RedisResult<Remote> {
        let client = redis::Client::open(url)?;
        Ok(Remote {
            conn: client.get_connection_with_timeout(CONNECT_TIMEOUT)?,
        })
    }

    /// Sends one command and returns the reply, errors included, as redis-cli would show it.
    ///
    /// # Errors
    /// Only I/O and protocol failures; error replies are `Ok(Reply::Error(..))`.
    pub fn call(&mut self, argv: &[Vec<u8>]) -> redis::RedisResult<Reply> {
        let mut cmd = redis::Cmd::new();
        for a in argv {
            cmd.arg(a.as_slice());
        }
        // `req_command` keeps error replies nested in arrays (`query` would hoist the first
        // one to the top, which is not what redis-cli shows).
        match redis::ConnectionLike::req_command(&mut self.conn, &cmd) {
            Ok(v) => Ok(from_value(v)),
            Err(e)
                if matches!(
                    e.kind(),
                    redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
                ) =>
            {
                Ok(Reply::Error(error_text(e.code(), e.detail())))
            }
            Err(e) => Err(e),
        }
    }
}

fn error_text(code: Option<&str>, detail: Option<&str>) -> String {
    match (code, detail) {
        (Some(c), Some(d)) => format!("{c} {d}"),
        (Some(c), None) => c.to_string(),
        (None, Some(d)) => d.to_string(),
        (None, None) => String::new(),
    }
}

fn from_value(v: redis::Value) -> Reply {
    use redis::Value as V;
    match v {
        V::Nil => Reply::Nil,
        V::Int(i) => Reply::Int(i),
        V::BulkString(b) => Reply::Bulk(b),
        V::Array(items) | V::Set(items) => {
            Reply::Array(items.into_iter().map(from_value).collect())
        }
        V::SimpleString(s) => Reply::Status(s),
        V::Okay => Reply::ok(),
        V::Map(pairs) => Reply::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (from_value(k), from_value(v)))
                .collect(),
        ),
        V::Double(d) => Reply::Double(d),
        V::Boolean(b) => Reply::Int(i64::from(b)),
        V::VerbatimString { text, .. } => Reply::Bulk(text.into_bytes()),
        V::ServerError(e) => Reply::Error(error_text(Some(e.code()), e.details())),
        V::Attribute { data, .. } => from_value(*data),
        V::Push { data, .. } => Reply::Array(data.into_iter().map(from_value).collect()),
        _ => Reply::err("ERR harness: unsupported reply type"),
    }
}
