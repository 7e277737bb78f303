//! The upstream server: where it is (read once from the URL by [`lockkit::parse_url`]), and
//! connections to it (shared ones, and one per client that needs its own), opened by lockkit's
//! own [`Connector`] (TCP, TLS or a Unix socket), logged in with the URL's user and password
//! and switched to the URL's database before any client's traffic flows.

use std::time::Duration;

use lockkit::net::{Connector, ServerStream};
use redis::{ProtocolVersion, RedisError};

/// How long connecting (and logging in) to the upstream server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Where and how to connect upstream.
#[derive(Clone)]
pub struct Upstream {
    connector: Connector,
    shown: String,
    db: i64,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// Reads `url` (`redis://`, `rediss://`, `redis+unix://`, user and password in it).
    ///
    /// # Errors
    /// [`lockkit::Error::InvalidOptions`] for a URL that does not parse; its text names the URL
    /// with the password hidden.
    pub fn from_url(url: &str) -> lockkit::Result<Upstream> {
        let info = lockkit::parse_url(url)?;
        let db = info.redis_settings().db();
        // The clients' traffic flows as they sent it: the proxy names no library (no
        // `CLIENT SETINFO`) and speaks RESP2 until a client's own `HELLO 3`.
        let settings = info
            .redis_settings()
            .clone()
            .set_skip_set_lib_name()
            .set_protocol(ProtocolVersion::RESP2);
        let connector = Connector::new(info.set_redis_settings(settings), None)
            .map_err(lockkit::Error::Redis)?;
        Ok(Upstream {
            connector,
            shown: lockkit::redact_url(url),
            db,
        })
    }

    /// The URL with its password hidden.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The URL's database, which every upstream connection is switched to.
    pub fn db(&self) -> i64 {
        self.db
    }

    /// A new connection, logged in and on the URL's database.
    ///
    /// # Errors
    /// The connection failed, timed out, or the server refused the login or the database; the
    /// text never holds the password.
    pub async fn connect(&self) -> Result<ServerStream, String> {
        match tokio::time::timeout(CONNECT_TIMEOUT, self.connector.connect()).await {
            Ok(r) => r.map_err(|e| why(&e)),
            Err(_) => Err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())),
        }
    }
}

/// What went wrong, as the server said it (`WRONGPASS invalid username-password pair ...`,
/// `ERR DB index is out of range`) or as the system did (`Connection refused`, `TLS: ...`).
fn why(e: &RedisError) -> String {
    if e.kind() == redis::ErrorKind::AuthenticationFailed {
        if let Some(reply) = e.detail() {
            return reply.to_string();
        }
    }
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    }
}
