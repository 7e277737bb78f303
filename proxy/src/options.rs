//! How a [`Proxy`](crate::Proxy) runs: [`ProxyOptions`].

use std::time::Duration;

use crate::auth::ClientAuth;
use crate::tls::ListenerTls;

/// Shared upstream connections by default.
pub const DEFAULT_SHARED_CONNECTIONS: usize = 1;

/// Clients served at once by default: Redis's `maxclients` (`lockkit proxy` lowers it to what
/// the open-file limit allows).
pub const DEFAULT_MAX_CLIENTS: usize = 10_000;

/// How long a known-slow command (a script, a function, KEYS, FLUSHALL, ...) may keep a
/// shared upstream connection without a reply by default.
pub const DEFAULT_SLOW_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest request held by default (Redis's default `client-query-buffer-limit`, 1 GiB).
pub const DEFAULT_QUERY_BUFFER_LIMIT: usize = 1 << 30;

/// How long a client may take to log in by default (when clients have to).
pub const DEFAULT_LOGIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How a [`Proxy`](crate::Proxy) runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyOptions {
    pub(crate) shared_connections: usize,
    pub(crate) op_timeout: Duration,
    pub(crate) drain_timeout: Duration,
    pub(crate) client_auth: ClientAuth,
    pub(crate) tls: Option<ListenerTls>,
    pub(crate) max_clients: usize,
    pub(crate) login_timeout: Duration,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) slow_timeout: Duration,
    pub(crate) query_buffer_limit: usize,
    pub(crate) output_buffer_limit: Option<usize>,
    pub(crate) maxmemory_clients: Option<usize>,
    pub(crate) seeds: Vec<String>,
}

impl Default for ProxyOptions {
    fn default() -> Self {
        ProxyOptions {
            shared_connections: DEFAULT_SHARED_CONNECTIONS,
            op_timeout: crate::DEFAULT_OP_TIMEOUT,
            drain_timeout: crate::DEFAULT_DRAIN_TIMEOUT,
            client_auth: ClientAuth::default(),
            tls: None,
            max_clients: DEFAULT_MAX_CLIENTS,
            login_timeout: DEFAULT_LOGIN_TIMEOUT,
            idle_timeout: None,
            slow_timeout: DEFAULT_SLOW_TIMEOUT,
            query_buffer_limit: DEFAULT_QUERY_BUFFER_LIMIT,
            output_buffer_limit: None,
            maxmemory_clients: None,
            seeds: Vec::new(),
        }
    }
}

impl ProxyOptions {
    /// The defaults: [`DEFAULT_SHARED_CONNECTIONS`] shared upstream connections.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many upstream connections the stateless commands of all clients share (`0`: none,
    /// every client gets a connection of its own, as before sharing existed).
    ///
    /// The commands that mean the same on any connection share them; there is a set for each
    /// protocol (RESP2, and RESP3 for clients that said `HELLO 3`). A client moves to a
    /// connection of its own on its first command whose meaning depends on the connection
    /// (MULTI, blocking commands, SUBSCRIBE, AUTH, SELECT of another database, most of CLIENT,
    /// ..., and any command Redis 7.0 does not know) and keeps it.
    #[must_use]
    pub fn shared_connections(mut self, n: usize) -> Self {
        self.shared_connections = n;
        self
    }

    /// The users clients log in as at the proxy (none by default: every client is let in).
    /// Every user reaches the upstream as the upstream URL's user.
    #[must_use]
    pub fn client_auth(mut self, auth: ClientAuth) -> Self {
        self.client_auth = auth;
        self
    }

    /// TLS on the listener (`None`, the default: plain TCP).
    #[must_use]
    pub fn tls(mut self, tls: Option<ListenerTls>) -> Self {
        self.tls = tls;
        self
    }

    /// More nodes of the same cluster, as URLs (`lockkit proxy --upstream` given again): asked
    /// in turn, after the upstream itself, whether they run in cluster mode when the proxy
    /// starts, and asked for the topology later when the masters known do not answer. Their
    /// user, password and database are not used: every node is reached as the upstream URL says.
    #[must_use]
    pub fn seeds(mut self, urls: Vec<String>) -> Self {
        self.seeds = urls;
        self
    }

    /// The number of shared upstream connections (`0`: sharing is off).
    pub fn shared_connection_count(&self) -> usize {
        self.shared_connections
    }

    /// How long an upstream request may wait for its reply (default
    /// [`crate::DEFAULT_OP_TIMEOUT`]): past it, its connection is given up and the commands on
    /// it get error replies. Blocking commands and pub/sub on a client's own connection may
    /// wait longer. Zero is taken as one millisecond.
    #[must_use]
    pub fn op_timeout(mut self, d: Duration) -> Self {
        self.op_timeout = d.max(Duration::from_millis(1));
        self
    }

    /// The largest request a client may send (default [`DEFAULT_QUERY_BUFFER_LIMIT`], Redis's
    /// `client-query-buffer-limit`): a request is held whole before it is forwarded, so a
    /// client that sends a bigger one is closed (as Redis closes it), with a line on stderr.
    /// At least 1 KiB.
    #[must_use]
    pub fn query_buffer_limit(mut self, bytes: usize) -> Self {
        self.query_buffer_limit = bytes.max(1024);
        self
    }

    /// The most the proxy holds of the replies owed to one client that it has not written yet
    /// (Redis's `client-output-buffer-limit` for normal clients, hard limit; `None`, the
    /// default, as Redis's `0 0 0`: no limit): a client past it is closed, with a line on
    /// stderr. On a shared connection the replies held for one client are bounded anyway: past
    /// 32 MiB (or this limit, if lower) the shared connection waits for the client to drain, and
    /// a client that takes none of its replies for the operation timeout meanwhile is closed.
    /// On a connection of its own a client's replies are read only as it takes them; the limit
    /// counts the reply being read. At least 1 KiB.
    #[must_use]
    pub fn output_buffer_limit(mut self, bytes: Option<usize>) -> Self {
        self.output_buffer_limit = bytes.map(|b| b.max(1024));
        self
    }

    /// The most the replies held for all clients together may take (Redis's
    /// `maxmemory-clients`; `None`, the default: no cap): past it, the client holding most is
    /// closed, with a line on stderr. At least 1 KiB.
    #[must_use]
    pub fn maxmemory_clients(mut self, bytes: Option<usize>) -> Self {
        self.maxmemory_clients = bytes.map(|b| b.max(1024));
        self
    }

    /// How long a known-slow command (`EVAL`, `EVALSHA`, `FCALL`, `KEYS`, `FLUSHALL`, ...)
    /// at the head of a shared upstream connection may take (default
    /// [`DEFAULT_SLOW_TIMEOUT`]; never less than the operation timeout). Other commands have
    /// the operation timeout counted from when the server sent its last bytes, so those
    /// queued behind a slow one wait for it, as with Redis direct.
    #[must_use]
    pub fn slow_timeout(mut self, d: Duration) -> Self {
        self.slow_timeout = d;
        self
    }

    /// How long [`Proxy::stop`](crate::Proxy::stop) lets the commands already forwarded get
    /// their replies (default [`crate::DEFAULT_DRAIN_TIMEOUT`]) before it closes what is left.
    #[must_use]
    pub fn drain_timeout(mut self, d: Duration) -> Self {
        self.drain_timeout = d;
        self
    }

    /// How many clients are served at once (default [`DEFAULT_MAX_CLIENTS`], Redis's
    /// `maxclients`): one more is answered `-ERR max number of clients reached` and closed, as
    /// Redis does. At least 1.
    #[must_use]
    pub fn max_clients(mut self, n: usize) -> Self {
        self.max_clients = n.max(1);
        self
    }

    /// How long a client that has to log in may stay connected without having done so
    /// (default [`DEFAULT_LOGIN_TIMEOUT`]); then it is closed. Zero is taken as one
    /// millisecond.
    #[must_use]
    pub fn login_timeout(mut self, d: Duration) -> Self {
        self.login_timeout = d.max(Duration::from_millis(1));
        self
    }

    /// Closes a client idle this long (Redis's `timeout`; `None`, the default: never): no
    /// command read and no reply owed. Clients in pub/sub, MONITOR or a blocking command are
    /// not idle.
    #[must_use]
    pub fn idle_timeout(mut self, d: Option<Duration>) -> Self {
        self.idle_timeout = d.filter(|d| !d.is_zero());
        self
    }
}
