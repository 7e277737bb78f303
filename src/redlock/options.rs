//! The options of a [`Redlock`](super::Redlock).

use std::time::Duration;

use crate::options::ClientOptions;

/// Options for a [`Redlock`](crate::Redlock).
///
/// ```
/// use std::time::Duration;
/// use lockkit::{ClientOptions, RedlockOptions};
/// let opts = RedlockOptions::new()
///     .node_timeout(Duration::from_millis(20))
///     .breaker_backoff(Duration::from_millis(500))
///     .client(ClientOptions::new())
///     .restart_rule(true);
/// # let _ = opts;
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct RedlockOptions {
    pub(crate) node_timeout: Duration,
    pub(crate) breaker_backoff: Duration,
    pub(crate) client: ClientOptions,
    pub(crate) restart_rule: bool,
    pub(crate) longest_ttl: Duration,
}

impl Default for RedlockOptions {
    fn default() -> Self {
        RedlockOptions {
            node_timeout: Duration::from_millis(50),
            breaker_backoff: Duration::from_secs(1),
            client: ClientOptions::default(),
            restart_rule: true,
            longest_ttl: Duration::ZERO,
        }
    }
}

impl RedlockOptions {
    /// 50 ms per node, a 1 s breaker back-off; default client options otherwise.
    pub fn new() -> Self {
        Self::default()
    }

    setters! {
        /// How long one node may take to answer one command before it counts as failed. Keep it small
        /// against the TTL (a 10 s TTL with a 50 ms node timeout is typical).
        node_timeout: Duration => node_timeout;

        /// How long a node that timed out 3 times in a row is skipped (its vote counted as
        /// failed without a request); zero turns the circuit breaker off.
        breaker_backoff: Duration => breaker_backoff;

        /// Options for each node's connection (its timeouts are replaced by the node timeout).
        client: ClientOptions => client;

        /// The delayed-restart rule (on by default): a node that restarted less than the longest
        /// TTL in use ago ([`longest_ttl`](Self::longest_ttl)) may have forgotten a live lock (a
        /// restart without persistence), so its vote does not count toward a quorum; it is
        /// reported as a node error ([`Error::NodeRestarted`](crate::Error::NodeRestarted)). The node's uptime (`INFO
        /// server`) is read on each connection to the node when lockkit first uses it (so again
        /// whenever the connection was re-established, as it is after a restart, even one that
        /// happened while the client sat idle) and after any error from the node, not on every
        /// acquire. Turn it off only where every node persists every write (`appendfsync
        /// always`) or restarts are delayed by operations.
        restart_rule: bool => restart_rule;

        /// The longest TTL any client uses on these nodes (zero by default), for the restart
        /// rule: a restarted node may have forgotten a lock of that TTL, so it votes only once
        /// it has been up that long, whatever TTL the lock asking for its vote has. It is a
        /// floor: the rule uses the longest of this and every TTL this client has asked for
        /// (acquire or extend), which is all it can know without it. Set it when clients with
        /// longer TTLs share the nodes; freshly started nodes then refuse votes for that long
        /// ([`Redlock::restart_wait`](crate::Redlock::restart_wait) says how long is left).
        longest_ttl: Duration => longest_ttl;
    }
}
