//! The one error type of the lock library, and its classification by kind.

use std::time::Duration;

/// Everything that can go wrong in lockkit, as a caller needs to tell it apart.
///
/// An expected outcome is not an error: a contended [`try_acquire`](crate::LockClient::try_acquire)
/// returns `Ok(None)`, a release of a lock that expired returns
/// [`ReleaseOutcome::NotHeld`](crate::ReleaseOutcome::NotHeld). A Redis error is always an `Err`,
/// never folded into `false`. Match on [`Error::kind`] to decide what to do; never on the text.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis answered with an error, or the connection failed or timed out.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),

    /// An option was out of range; `field` names it.
    #[error("invalid option `{field}`: {reason}")]
    InvalidOptions {
        /// The option's field name, e.g. `ttl` or `retry.delay`.
        field: &'static str,
        /// Why it was rejected and what would be accepted.
        reason: String,
    },

    /// A key was rejected before anything was sent (empty, or too long for Redis).
    #[error("invalid key: {reason}")]
    InvalidKey {
        /// Why.
        reason: String,
    },

    /// `acquire` gave up: the lock stayed busy until the retry deadline or attempt count ran out.
    #[error("lock `{key}` still busy after {attempts} attempts in {elapsed:?}")]
    AcquireTimeout {
        /// The key that was wanted.
        key: String,
        /// How many acquire attempts were made.
        attempts: u32,
        /// Time spent trying.
        elapsed: Duration,
    },

    /// Redlock: node failures (not a busy lock) left fewer grants than the quorum.
    #[error(
        "quorum not reached for `{key}`: {acquired} of {needed} needed ({} node errors{})",
        .node_errors.len(),
        fmt_node_errors(.node_errors)
    )]
    QuorumNotReached {
        /// The key.
        key: String,
        /// Nodes that granted it.
        acquired: usize,
        /// The quorum (N/2 + 1).
        needed: usize,
        /// One entry per node that failed, with its real error.
        node_errors: Vec<NodeError>,
    },

    /// Redlock's delayed-restart rule: the node restarted more recently than the longest TTL in
    /// use ago, so it may have forgotten a live lock; its vote does not count toward a quorum.
    #[error(
        "the node restarted {uptime:?} ago, less than the longest TTL in use {ttl:?}: it may have \
         forgotten a live lock, so its vote does not count (Redlock's delayed-restart rule; \
         RedlockOptions::restart_rule(false) turns it off)"
    )]
    NodeRestarted {
        /// How long ago the node started (whole seconds, as `INFO server` counts).
        uptime: Duration,
        /// The longest TTL in use ([`RedlockOptions::longest_ttl`](crate::RedlockOptions::longest_ttl),
        /// or the longest TTL this client asked for).
        ttl: Duration,
    },

    /// A single attempt took the lock, but the round trip left less than the lock options'
    /// `min_validity` of it (or none at all): it was given back, never handed out. A slow
    /// network or server; the retry loop tries again, a single attempt answers this.
    #[error(
        "lock `{key}` was taken with {left:?} of validity left, not more than min_validity \
         {min:?}: given back (a slow round trip; a longer TTL or a smaller min_validity helps)"
    )]
    TooLittleValidity {
        /// The key.
        key: String,
        /// The validity left when the reply came.
        left: Duration,
        /// The options' `min_validity`.
        min: Duration,
    },

    /// A read hold of an [`RwLock`](crate::RwLock) cannot become a write hold: two readers
    /// upgrading at once would each wait for the other forever. Release the read hold and
    /// acquire for writing (or hold for writing from the start, and downgrade).
    #[error(
        "read-write lock `{key}`: a read hold cannot be upgraded to a write hold (two readers \
         upgrading would wait for each other forever); release it and acquire for writing"
    )]
    UpgradeUnsupported {
        /// The lock's name.
        key: String,
    },

    /// A script or command answered with a reply lockkit does not understand.
    #[error("unexpected reply to {what}: {reply}")]
    UnexpectedReply {
        /// The operation.
        what: &'static str,
        /// The reply, as debug text.
        reply: String,
    },
}

/// What kind of failure an [`Error`] is: the thing to match on to decide what to do
/// (retry, alert, fix the configuration), in the way redis-rs classifies its errors.
///
/// ```
/// use lockkit::{Error, ErrorKind};
/// let e = Error::AcquireTimeout { key: "k".into(), attempts: 3, elapsed: Default::default() };
/// assert_eq!(e.kind(), ErrorKind::Busy);
/// assert_eq!(e.kind().as_str(), "busy");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Bad options or a bad key: fix the call; retrying cannot help.
    InvalidInput,
    /// The lock stayed busy until the retry policy gave up.
    Busy,
    /// The server did not answer within the response (or node) timeout; the outcome is unknown.
    Timeout,
    /// The connection could not be made (refused, DNS, TLS handshake).
    ConnectionRefused,
    /// An established connection dropped, or another I/O error.
    Io,
    /// Authentication or permission failure (`NOAUTH`, `WRONGPASS`, `NOPERM`).
    Auth,
    /// The server refused the command for a transient reason (`LOADING`, `TRYAGAIN`,
    /// `MASTERDOWN`, `CLUSTERDOWN`, `READONLY` during a failover).
    Unavailable,
    /// The server refused the command (`OOM`, a script error, ...).
    Server,
    /// Redlock: node failures left too few grants for a quorum.
    QuorumNotReached,
    /// A reply lockkit does not understand (a proxy or server that speaks differently).
    UnexpectedReply,
    /// A single attempt took the lock with too little validity left and gave it back
    /// ([`Error::TooLittleValidity`]).
    TooLittleValidity,
}

impl ErrorKind {
    /// A short stable name (`timeout`, `busy`, ...) for logs, metrics labels and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::Busy => "busy",
            ErrorKind::Timeout => "timeout",
            ErrorKind::ConnectionRefused => "connection_refused",
            ErrorKind::Io => "io",
            ErrorKind::Auth => "auth",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Server => "server",
            ErrorKind::QuorumNotReached => "quorum_not_reached",
            ErrorKind::UnexpectedReply => "unexpected_reply",
            ErrorKind::TooLittleValidity => "too_little_validity",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One node's failure in a Redlock operation, with the real error.
#[derive(Debug, Clone)]
pub struct NodeError {
    /// The node's URL, password redacted.
    pub node: String,
    /// What went wrong; a node that did not answer in time is an [`ErrorKind::Timeout`].
    pub error: Box<Error>,
}

impl NodeError {
    /// The kind of the node's error.
    pub fn kind(&self) -> ErrorKind {
        self.error.kind()
    }
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.node, self.error)
    }
}

impl Error {
    /// What kind of failure this is.
    ///
    /// ```
    /// use lockkit::{Error, ErrorKind};
    /// let e = Error::InvalidKey { reason: "empty".into() };
    /// assert_eq!(e.kind(), ErrorKind::InvalidInput);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Redis(e) => redis_kind(e),
            Error::InvalidOptions { .. }
            | Error::InvalidKey { .. }
            | Error::UpgradeUnsupported { .. } => ErrorKind::InvalidInput,
            Error::AcquireTimeout { .. } => ErrorKind::Busy,
            Error::QuorumNotReached { .. } => ErrorKind::QuorumNotReached,
            Error::NodeRestarted { .. } => ErrorKind::Unavailable,
            Error::UnexpectedReply { .. } => ErrorKind::UnexpectedReply,
            Error::TooLittleValidity { .. } => ErrorKind::TooLittleValidity,
        }
    }

    /// Whether trying the same operation again may succeed (a connection or timeout problem,
    /// a server busy loading, a failover in progress, a busy lock, a missed quorum), as opposed
    /// to a permanent refusal (bad options, wrong password, missing permission).
    ///
    /// ```
    /// use lockkit::Error;
    /// assert!(!Error::InvalidKey { reason: "empty".into() }.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Busy
                | ErrorKind::Timeout
                | ErrorKind::ConnectionRefused
                | ErrorKind::Io
                | ErrorKind::Unavailable
                | ErrorKind::QuorumNotReached
                | ErrorKind::TooLittleValidity
        )
    }

    /// Whether the request may have reached the server without its reply reaching us
    /// (timeout or dropped connection): the command's effect is unknown.
    ///
    /// ```
    /// use lockkit::Error;
    /// assert!(!Error::InvalidKey { reason: "empty".into() }.is_unknown_outcome());
    /// ```
    pub fn is_unknown_outcome(&self) -> bool {
        match self {
            Error::Redis(e) => unknown_outcome(e),
            _ => false,
        }
    }

    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
        Error::InvalidOptions {
            field,
            reason: reason.into(),
        }
    }

    /// A node or response timeout as a real timeout error (`kind() == Timeout`).
    pub(crate) fn timed_out(what: &str, after: Duration) -> Error {
        Error::Redis(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{what}: no answer within {after:?}"),
        )))
    }
}

fn redis_kind(e: &redis::RedisError) -> ErrorKind {
    use redis::ServerErrorKind as S;
    if e.is_timeout() {
        return ErrorKind::Timeout;
    }
    if e.is_connection_refusal() {
        return ErrorKind::ConnectionRefused;
    }
    if e.is_connection_dropped() || e.is_io_error() {
        return ErrorKind::Io;
    }
    if matches!(e.kind(), redis::ErrorKind::AuthenticationFailed)
        || e.code()
            .is_some_and(|c| matches!(c, "NOAUTH" | "WRONGPASS" | "NOPERM"))
    {
        return ErrorKind::Auth;
    }
    match e.kind() {
        redis::ErrorKind::Server(
            S::BusyLoading | S::TryAgain | S::MasterDown | S::ClusterDown | S::ReadOnly,
        ) => ErrorKind::Unavailable,
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension => ErrorKind::Server,
        _ if e.code().is_some() => ErrorKind::Server,
        _ => ErrorKind::UnexpectedReply,
    }
}

fn fmt_node_errors(errors: &[NodeError]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    format!(": {}", lines.join("; "))
}

/// Whether the command may have reached the server without its reply reaching us. A request
/// lockkit's own connection never sent (the connect failed or timed out, the connection was
/// dead, the send backlog full: [`not_sent`]) is not: nothing needs undoing.
pub(crate) fn unknown_outcome(e: &redis::RedisError) -> bool {
    !was_not_sent(e)
        && (e.is_timeout()
            || e.is_connection_dropped()
            || (e.is_io_error() && !e.is_connection_refusal()))
}

/// The reason inside the I/O error of a request that was never sent ([`not_sent`]).
#[derive(Debug)]
struct NotSent(String);

impl std::fmt::Display for NotSent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotSent {}

/// The error of a request that was never sent, as an I/O error of `kind` (so its
/// [`ErrorKind`] is what the failure was: a timeout, a refusal, a dropped connection), marked
/// so that it is never taken for an unknown outcome.
pub(crate) fn not_sent(kind: std::io::ErrorKind, what: impl Into<String>) -> redis::RedisError {
    std::io::Error::new(kind, NotSent(what.into())).into()
}

/// A connect failure as the error of the request that waited for it ([`not_sent`]): an I/O
/// error keeps its kind and text; any other (a refused login) is returned as it is.
pub(crate) fn unsent(e: redis::RedisError) -> redis::RedisError {
    if !e.is_io_error() || was_not_sent(&e) {
        return e;
    }
    let kind = if e.is_timeout() {
        std::io::ErrorKind::TimedOut
    } else if e.is_connection_refusal() {
        std::io::ErrorKind::ConnectionRefused
    } else {
        std::io::ErrorKind::ConnectionReset
    };
    not_sent(kind, e.to_string())
}

fn was_not_sent(e: &redis::RedisError) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::sync::Arc<dyn std::error::Error + Send + Sync>>())
        .and_then(|inner| inner.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::get_ref)
        .is_some_and(|reason| reason.is::<NotSent>())
}

/// The field an `InvalidOptions` error names (tests of the options types).
#[cfg(test)]
pub(crate) fn invalid_field<T: std::fmt::Debug>(r: Result<T>) -> &'static str {
    match r {
        Err(Error::InvalidOptions { field, .. }) => field,
        other => panic!("expected InvalidOptions, got {other:?}"),
    }
}

/// `Result` with lockkit's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_never_sent_keeps_its_kind_and_is_no_unknown_outcome() {
        let timeout: redis::RedisError =
            std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting").into();
        assert!(unknown_outcome(&timeout));
        let unsent_timeout = unsent(timeout);
        assert!(!unknown_outcome(&unsent_timeout));
        let e = Error::Redis(unsent_timeout);
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.is_retryable() && !e.is_unknown_outcome());
        assert!(e.to_string().contains("connecting"), "{e}");
        let refused = Error::Redis(unsent(
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(),
        ));
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
        assert!(!refused.is_unknown_outcome());
    }

    #[test]
    fn kinds_classify_timeouts_and_input() {
        let t = Error::timed_out("node", Duration::from_millis(50));
        assert_eq!(t.kind(), ErrorKind::Timeout);
        assert!(t.is_retryable());
        assert!(t.is_unknown_outcome());
        let io = Error::Redis(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into());
        assert_eq!(io.kind(), ErrorKind::ConnectionRefused);
        assert!(io.is_retryable());
        assert_eq!(Error::invalid("ttl", "x").kind(), ErrorKind::InvalidInput);
        let noperm = Error::Redis(redis::make_extension_error(
            "NOPERM".into(),
            Some("no".into()),
        ));
        assert_eq!(noperm.kind(), ErrorKind::Auth);
        assert!(!noperm.is_retryable());
        let oom = Error::Redis(redis::make_extension_error("OOM".into(), None));
        assert_eq!(oom.kind(), ErrorKind::Server);
    }
}
