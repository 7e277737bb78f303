//! The one error type of the lock library.

use std::time::Duration;

/// Everything that can go wrong in lockkit, as a caller needs to tell it apart.
///
/// An expected outcome is not an error: a contended [`try_acquire`](crate::LockClient::try_acquire)
/// returns `Ok(None)`, a release of a lock that expired returns
/// [`ReleaseOutcome::NotHeld`](crate::ReleaseOutcome::NotHeld). A Redis error is always an `Err`,
/// never folded into `false`.
#[derive(Debug, thiserror::Error)]
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
        /// How many `SET NX` attempts were made.
        attempts: u32,
        /// Time spent trying.
        elapsed: Duration,
    },

    /// The lock is no longer held by this holder (it expired, or another token is in the key).
    #[error("lock `{key}` was lost")]
    LockLost {
        /// The key.
        key: String,
    },

    /// Redlock: fewer nodes than the quorum granted the lock in time.
    #[error(
        "quorum not reached for `{key}`: {acquired} of {needed} needed ({errors} node errors{})",
        fmt_node_errors(.node_errors)
    )]
    QuorumNotReached {
        /// The key.
        key: String,
        /// Nodes that granted it.
        acquired: usize,
        /// The quorum (N/2 + 1).
        needed: usize,
        /// Nodes that answered with an error or not at all.
        errors: usize,
        /// One line per failed node: `url: error`.
        node_errors: Vec<String>,
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

impl Error {
    /// Whether trying the same operation again may succeed (a connection or timeout problem,
    /// a server busy loading, a failover in progress), as opposed to a permanent refusal
    /// (bad options, wrong password, missing permission).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || matches!(
                        e.kind(),
                        redis::ErrorKind::Server(
                            redis::ServerErrorKind::BusyLoading
                                | redis::ServerErrorKind::TryAgain
                                | redis::ServerErrorKind::MasterDown
                                | redis::ServerErrorKind::ClusterDown
                                | redis::ServerErrorKind::ReadOnly
                        )
                    )
            }
            Error::AcquireTimeout { .. } | Error::QuorumNotReached { .. } => true,
            _ => false,
        }
    }

    /// Whether the request may have reached the server without its reply reaching us
    /// (timeout or dropped connection): the command's effect is unknown.
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
}

fn fmt_node_errors(errors: &[String]) -> String {
    if errors.is_empty() {
        String::new()
    } else {
        format!(": {}", errors.join("; "))
    }
}

pub(crate) fn unknown_outcome(e: &redis::RedisError) -> bool {
    e.is_timeout() || e.is_connection_dropped() || (e.is_io_error() && !e.is_connection_refusal())
}

/// `Result` with lockkit's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
