//! A real server as a [`Reply`] source, through the `redis` crate (sync API): for
//! `lua record`, `lua test --url`, `lua exec --url` and the differential tests.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
        // `req_command` keeps error replies nested in arrays (`query` would hoist the first
        // one to the top, which is not what redis-cli shows).
        match redis::ConnectionLike::req_command(&mut self.conn, &command(argv)) {
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

    /// [`call`](Self::call), with the server's clock just before it ran the command: `TIME` and
    /// the command go out in one write, so the server runs them back to back, microseconds
    /// apart. An emulator that must decide ties the way the server did (`EXPIRE ... GT` after an
    /// `EXPIRE` in the same millisecond) sets its clock to this; the client's own clock, read
    /// before sending, can be in the millisecond before the one the server ran the command in.
    ///
    /// Not for a connection inside `MULTI` or subscribed (`TIME` would be queued or refused).
    ///
    /// # Errors
    /// As [`call`](Self::call), and a `TIME` reply that is not two integers.
    pub fn call_timed(&mut self, argv: &[Vec<u8>]) -> redis::RedisResult<(Reply, SystemTime)> {
        let mut pipe = redis::pipe();
        pipe.cmd("TIME").add_command(command(argv));
        let mut replies = redis::ConnectionLike::req_packed_commands(
            &mut self.conn,
            &pipe.get_packed_pipeline(),
            0,
            2,
        )?
        .into_iter();
        let time = replies.next().and_then(|t| server_time(&t));
        match (time, replies.next()) {
            (Some(time), Some(reply)) => Ok((from_value(reply), time)),
            _ => Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "TIME did not answer two integers",
            ))),
        }
    }
}

fn command(argv: &[Vec<u8>]) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    for a in argv {
        cmd.arg(a.as_slice());
    }
    cmd
}

/// `TIME`'s reply, seconds and microseconds, as a point in time.
fn server_time(v: &redis::Value) -> Option<SystemTime> {
    let redis::Value::Array(parts) = v else {
        return None;
    };
    let num = |i: usize| match parts.get(i)? {
        redis::Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
        _ => None,
    };
    Some(UNIX_EPOCH + Duration::from_secs(num(0)?) + Duration::from_micros(num(1)?))
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
