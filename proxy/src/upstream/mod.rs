//! The upstream server: where it is (read once from the URL by [`lockkit::parse_url`]), and
//! connections to it (shared ones, and one per client that needs its own), opened by lockkit's
//! own [`Connector`] (TCP, TLS or a Unix socket), logged in with the URL's user and password
//! and switched to the URL's database before any client's traffic flows. Beside it: the shared
//! upstream connections ([`link`]) and where each client's commands go ([`route`]).

pub(crate) mod link;
pub(crate) mod outbuf;
pub(crate) mod route;

use std::time::Duration;

use lockkit::net::Connector;
use redis::{ConnectionAddr, ProtocolVersion, RedisError};

use crate::health::Backoff;
use crate::sock::{self, UpConn};

/// How long connecting (and logging in) to the upstream server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The protocol an upstream connection speaks: the proxy keeps shared connections of each, so
/// that a client that said `HELLO 3` shares as a RESP2 client does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum RespVersion {
    /// RESP2, what a connection speaks until `HELLO 3`.
    #[default]
    Resp2,
    /// RESP3 (`HELLO 3`).
    Resp3,
}

impl RespVersion {
    /// `HELLO`'s protocol version: 2 or 3.
    pub(crate) fn of(version: u8) -> RespVersion {
        if version == 3 {
            RespVersion::Resp3
        } else {
            RespVersion::Resp2
        }
    }
}

/// Where and how to connect upstream.
#[derive(Clone)]
pub struct Upstream {
    connector: Connector,
    /// The same, saying `HELLO 3` as it logs in.
    connector3: Connector,
    shown: String,
    /// `TCP_USER_TIMEOUT` of its plain TCP connections.
    user_timeout: Duration,
    db: i64,
    /// Failures in a row of the connections to it, shared by every clone: shared and own
    /// connections back off together.
    backoff: std::sync::Arc<Backoff>,
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
        let settings3 = settings.clone().set_protocol(ProtocolVersion::RESP3);
        let connector3 = Connector::new(info.clone().set_redis_settings(settings3), None)
            .map_err(lockkit::Error::Redis)?;
        let connector = Connector::new(info.set_redis_settings(settings), None)
            .map_err(lockkit::Error::Redis)?;
        Ok(Upstream {
            connector,
            connector3,
            shown: lockkit::redact_url(url),
            user_timeout: crate::DEFAULT_OP_TIMEOUT,
            db,
            backoff: std::sync::Arc::default(),
        })
    }

    /// The same server settings (user, password, database, TLS) at another address: a node
    /// of the cluster this upstream belongs to. Its connections back off on their own.
    pub(crate) fn at(&self, host: &str, port: u16) -> Upstream {
        let moved = |c: &Connector| {
            let info = c.info().clone();
            let mut addr = info.addr().clone();
            match &mut addr {
                ConnectionAddr::TcpTls {
                    host: h, port: p, ..
                } => {
                    *h = host.to_string();
                    *p = port;
                }
                other => *other = ConnectionAddr::Tcp(host.to_string(), port),
            }
            Connector::new(info.set_addr(addr), None).unwrap_or_else(|_| c.clone())
        };
        Upstream {
            connector: moved(&self.connector),
            connector3: moved(&self.connector3),
            shown: format!("{host}:{port}"),
            user_timeout: self.user_timeout,
            db: self.db,
            backoff: std::sync::Arc::default(),
        }
    }

    /// Its TCP host and port (`None` for a Unix socket).
    pub(crate) fn tcp_addr(&self) -> Option<(&str, u16)> {
        match self.connector.info().addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                Some((host.as_str(), *port))
            }
            _ => None,
        }
    }

    /// The URL with its password hidden.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The URL's database, which every upstream connection is switched to.
    pub fn db(&self) -> i64 {
        self.db
    }

    /// The same upstream, its plain TCP connections failing once sent data goes unacknowledged
    /// for `d` (at least 1 s; `TCP_USER_TIMEOUT`, Linux).
    pub(crate) fn with_user_timeout(mut self, d: Duration) -> Upstream {
        self.user_timeout = d.max(Duration::from_secs(1));
        self
    }

    /// The password the URL logs in with (never shown; the proxy blanks it in replies).
    pub(crate) fn password(&self) -> Option<&str> {
        self.connector.info().redis_settings().password()
    }

    /// The back-off of its connections: failures in a row, reset by a reply.
    pub(crate) fn backoff(&self) -> &Backoff {
        &self.backoff
    }

    /// A new connection, logged in and on the URL's database. A plain TCP one has keepalive on
    /// and, on Linux, `TCP_USER_TIMEOUT` ([`sock`]). While connections keep failing (connect
    /// errors, operation timeouts) it first waits: 50 ms, doubling, up to 2 s.
    ///
    /// # Errors
    /// The connection failed, timed out, or the server refused the login or the database; the
    /// text never holds the password.
    pub async fn connect(&self) -> Result<UpConn, String> {
        self.connect_as(RespVersion::Resp2).await
    }

    /// [`Upstream::connect`], the connection speaking `resp` (`HELLO 3` is part of its login).
    pub(crate) async fn connect_as(&self, resp: RespVersion) -> Result<UpConn, String> {
        let connector = match resp {
            RespVersion::Resp2 => &self.connector,
            RespVersion::Resp3 => &self.connector3,
        };
        let info = connector.info();
        let work = async {
            match info.addr() {
                ConnectionAddr::Tcp(host, port) => {
                    let mut s = sock::connect_tcp(host, *port, self.user_timeout)
                        .await
                        .map_err(RedisError::from)?;
                    lockkit::net::handshake(&mut s, info.redis_settings()).await?;
                    Ok(UpConn::Tcp(s))
                }
                _ => connector.connect().await.map(UpConn::Lib),
            }
        };
        tokio::time::sleep(self.backoff.delay()).await;
        let r = match tokio::time::timeout(CONNECT_TIMEOUT, work).await {
            Ok(r) => r.map_err(|e| why(&e)),
            Err(_) => Err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())),
        };
        if r.is_err() {
            self.backoff.failed();
        }
        r
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
