//! Redlock: one lock over N independent Redis masters, granted by a quorum (N/2 + 1).
//!
//! Each attempt sends `SET key token NX PX ttl` with one token to every node in parallel, each
//! bounded by a per-node timeout small against the TTL. The lock is granted when a quorum
//! answered `OK` and validity is left: `validity = TTL − elapsed − drift` (drift =
//! 0.01 × TTL + 2 ms by default), measured on the monotonic clock. Otherwise it is released on
//! every node (also those that timed out: their `SET` may have landed) and retried after a random
//! delay. Extend succeeds only on a quorum; release goes to every node.
//!
//! # Limitations and caveats
//! Redlock assumes bounded clock drift and bounded pauses. A holder paused past its validity can
//! still overlap with the next holder, and fencing tokens cannot be made strictly increasing
//! across independent nodes without consensus: where a stale write must be impossible, keep a
//! fencing check in a store that is itself consistent (see `LockClient::try_acquire_fenced`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::connections::Connections;
use crate::error::{Error, NodeError, Result};
use crate::lock::{check_key, new_token, ExtendOutcome, Lock, ReleaseOutcome};
use crate::locker::Locker;
use crate::options::{validate_ttl, ClientOptions, LockOptions};
use crate::{ClientStats, LockClient};

/// Options for a [`Redlock`].
///
/// ```
/// use std::time::Duration;
/// use lockkit::{ClientOptions, RedlockOptions};
/// let opts = RedlockOptions::new()
///     .node_timeout(Duration::from_millis(20))
///     .client(ClientOptions::new())
///     .restart_rule(true);
/// # let _ = opts;
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct RedlockOptions {
    pub(crate) node_timeout: Duration,
    pub(crate) client: ClientOptions,
    pub(crate) restart_rule: bool,
}

impl Default for RedlockOptions {
    fn default() -> Self {
        RedlockOptions {
            node_timeout: Duration::from_millis(50),
            client: ClientOptions::default(),
            restart_rule: true,
        }
    }
}

impl RedlockOptions {
    /// 50 ms per node; default client options otherwise.
    pub fn new() -> Self {
        Self::default()
    }

    setters! {
        /// How long one node may take to answer one command before it counts as failed. Keep it small
        /// against the TTL (a 10 s TTL with a 50 ms node timeout is typical).
        node_timeout: Duration => node_timeout;

        /// Options for each node's connection (its timeouts are replaced by the node timeout).
        client: ClientOptions => client;

        /// The delayed-restart rule (on by default): a node that restarted more recently than the
        /// lock's TTL ago may have forgotten a live lock (a restart without persistence), so its vote
        /// does not count toward a quorum; it is reported as a node error
        /// ([`Error::NodeRestarted`]). The node's uptime (`INFO server`) is read when lockkit first
        /// uses the node and again after any error from it (a restart drops the connection), not on
        /// every acquire. Turn it off only where every node persists every write (`appendfsync
        /// always`) or restarts are delayed by operations.
        restart_rule: bool => restart_rule;
    }
}

/// A node's client and what lockkit knows of when the node last started.
#[derive(Debug)]
struct Node {
    client: LockClient,
    /// When the node started (as of its last `INFO server`), or `None` when it must be read
    /// again (first use, or an error since: the node may have restarted).
    started: Mutex<Option<Instant>>,
}

impl Node {
    fn new(client: LockClient) -> Node {
        Node {
            client,
            started: Mutex::new(None),
        }
    }

    fn forget_start(&self) {
        *self.started.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Refuses the node's vote if it started less than `ttl` ago.
    async fn check_restart(&self, ttl: Duration) -> Result<()> {
        let known = *self.started.lock().unwrap_or_else(PoisonError::into_inner);
        let started = match known {
            Some(at) => at,
            None => {
                let uptime = self.client.server_uptime().await?;
                // INFO counts whole seconds: assume the latest start it allows.
                let at = Instant::now()
                    .checked_sub(uptime)
                    .unwrap_or_else(Instant::now);
                *self.started.lock().unwrap_or_else(PoisonError::into_inner) = Some(at);
                at
            }
        };
        let uptime = started.elapsed();
        if uptime < ttl {
            return Err(Error::NodeRestarted { uptime, ttl });
        }
        Ok(())
    }
}

/// The result of one Redlock acquire round.
#[derive(Debug)]
pub struct RedlockAttempt {
    /// The lock, when a quorum granted it with validity left.
    pub lock: Option<Lock>,
    /// How many nodes answered `OK`.
    pub acquired: usize,
    /// Nodes that failed or timed out, one entry each.
    pub node_errors: Vec<NodeError>,
}

/// The result of a Redlock release.
#[derive(Debug, Default)]
pub struct RedlockRelease {
    /// Nodes that still held our token and deleted it.
    pub released: usize,
    /// Nodes where the key was gone.
    pub not_held: usize,
    /// Nodes where another token was in the key (left untouched).
    pub held_by_other: usize,
    /// Nodes that failed or timed out.
    pub node_errors: Vec<NodeError>,
}

impl RedlockRelease {
    /// What the release means for the lock, the one mapping used everywhere (the guard, the
    /// middleware, the load generator): [`Released`](ReleaseOutcome::Released) when a quorum of
    /// nodes still held our token (the lock was ours until released); otherwise
    /// [`HeldByOther`](ReleaseOutcome::HeldByOther) if any node had another token, else
    /// [`NotHeld`](ReleaseOutcome::NotHeld).
    ///
    /// ```
    /// use lockkit::{RedlockRelease, ReleaseOutcome};
    /// let r = RedlockRelease { released: 1, not_held: 2, ..Default::default() };
    /// assert_eq!(r.outcome(2), ReleaseOutcome::NotHeld);
    /// ```
    pub fn outcome(&self, quorum: usize) -> ReleaseOutcome {
        if self.released >= quorum {
            ReleaseOutcome::Released
        } else if self.held_by_other > 0 {
            ReleaseOutcome::HeldByOther
        } else {
            ReleaseOutcome::NotHeld
        }
    }
}

/// A Redlock client over N independent masters. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Redlock {
    nodes: Arc<[Node]>,
    node_timeout: Duration,
    restart_rule: bool,
}

enum NodeReply<T> {
    Ok(T),
    Failed(NodeError),
}

impl Redlock {
    /// Connects to every node (`redis://...` each) with default options.
    ///
    /// ```no_run
    /// # async fn demo() -> lockkit::Result<()> {
    /// let redlock = lockkit::Redlock::connect(&[
    ///     "redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379",
    /// ]).await?;
    /// assert_eq!((redlock.len(), redlock.quorum()), (3, 2));
    /// println!("{:?}", redlock.targets());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`connect_with`](Self::connect_with).
    pub async fn connect<S: AsRef<str>>(urls: &[S]) -> Result<Redlock> {
        Self::connect_with(urls, RedlockOptions::default()).await
    }

    /// Connects to every node in parallel. A node that is down now does not fail the call (it is
    /// connected lazily and counts as failed until it answers); a malformed URL or bad options do.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{Redlock, RedlockOptions};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let opts = RedlockOptions::new().node_timeout(Duration::from_millis(30));
    /// let redlock = Redlock::connect_with(&["redis://a:6379", "redis://b:6379", "redis://c:6379"], opts).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for no URL, a zero node timeout or bad client options; a
    /// malformed URL; a node that refuses authentication.
    pub async fn connect_with<S: AsRef<str>>(
        urls: &[S],
        options: RedlockOptions,
    ) -> Result<Redlock> {
        if urls.is_empty() {
            return Err(Error::invalid(
                "urls",
                "Redlock needs at least one node (3 or 5 are usual)",
            ));
        }
        if options.node_timeout.is_zero() {
            return Err(Error::invalid("node_timeout", "must be greater than zero"));
        }
        let client_opts = options
            .client
            .clone()
            .connect_timeout(options.node_timeout.max(Duration::from_millis(100)))
            .response_timeout(Some(options.node_timeout))
            .reconnect_retries(0);
        let attempts = urls.iter().map(|url| {
            let url = url.as_ref().to_string();
            let opts = client_opts.clone();
            async move {
                let connect = LockClient::connect_with(&url, opts.clone());
                match tokio::time::timeout(opts.connect_timeout * 2, connect).await {
                    Ok(Ok(c)) => Ok(c),
                    Ok(Err(e)) if !e.is_retryable() => Err(e),
                    _ => {
                        tracing::warn!(node = %crate::redact_url(&url), "Redlock node unreachable at start-up; will retry on use");
                        Ok(LockClient {
                            conns: Connections::lazy(&url, opts)?,
                        })
                    }
                }
            }
        });
        let nodes = join_all(attempts)
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        Ok(Redlock {
            nodes: nodes.into_iter().map(Node::new).collect(),
            node_timeout: options.node_timeout,
            restart_rule: options.restart_rule,
        })
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a Redlock has at least one node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The quorum: N/2 + 1.
    pub fn quorum(&self) -> usize {
        quorum_of(self.nodes.len())
    }

    /// The nodes' URLs, passwords redacted.
    pub fn targets(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.client.target().to_string())
            .collect()
    }

    async fn on_all<'a, T, F, Fut>(&'a self, f: F) -> Vec<NodeReply<T>>
    where
        F: Fn(&'a Node) -> Fut,
        Fut: std::future::Future<Output = Result<T>> + 'a,
    {
        let timeout = self.node_timeout;
        join_all(self.nodes.iter().map(|node| {
            let fut = f(node);
            async move {
                let error = match tokio::time::timeout(timeout, fut).await {
                    Ok(Ok(v)) => return NodeReply::Ok(v),
                    Ok(Err(e)) => e,
                    Err(_) => Error::timed_out("Redlock node", timeout),
                };
                if !matches!(error, Error::NodeRestarted { .. }) {
                    // The node may have restarted: read its uptime again before its next vote.
                    node.forget_start();
                }
                NodeReply::Failed(NodeError {
                    node: node.client.target().to_string(),
                    error: Box::new(error),
                })
            }
        }))
        .await
    }

    /// One round: `SET NX PX` on every node; granted on a quorum with validity left, otherwise
    /// released everywhere. Node failures are listed, not raised.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockOptions, Redlock};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let redlock = Redlock::connect(&["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"]).await?;
    /// let round = redlock.try_acquire("cron:tick", &LockOptions::new(Duration::from_secs(10))).await?;
    /// println!("granted on {} nodes; {} failed", round.acquired, round.node_errors.len());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Bad options or key; node failures are not errors here, they are listed.
    pub async fn try_acquire(&self, key: &str, opts: &LockOptions) -> Result<RedlockAttempt> {
        opts.validate()?;
        self.round(key, opts).await
    }

    async fn round(&self, key: &str, opts: &LockOptions) -> Result<RedlockAttempt> {
        check_key(key)?;
        let token = new_token();
        let start = Instant::now();
        let token_ref = token.as_str();
        let replies = self
            .on_all(|node| async move {
                if self.restart_rule {
                    node.check_restart(opts.ttl).await?;
                }
                node.client.set_nx(key, token_ref, opts.ttl).await
            })
            .await;
        let mut acquired = 0;
        let mut node_errors = Vec::new();
        for r in replies {
            match r {
                NodeReply::Ok(true) => acquired += 1,
                NodeReply::Ok(false) => {}
                NodeReply::Failed(e) => node_errors.push(e),
            }
        }
        let lock = Lock::acquired(key, token, opts, start, None);
        if acquired >= self.quorum() && lock.remaining_validity() > opts.min_validity {
            return Ok(RedlockAttempt {
                lock: Some(lock),
                acquired,
                node_errors,
            });
        }
        // Not granted: undo everywhere, including nodes whose reply was lost.
        if acquired > 0 || !node_errors.is_empty() {
            let _ = self.release_detailed(&lock).await;
        }
        Ok(RedlockAttempt {
            lock: None,
            acquired,
            node_errors,
        })
    }

    /// Releases on every node (compare-and-delete) and says, node by node, what happened.
    /// [`Locker::release`] gives the same as one [`ReleaseOutcome`] ([`RedlockRelease::outcome`]).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockOptions, Locker, Redlock};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let redlock = Redlock::connect(&["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"]).await?;
    /// let lock = redlock.acquire("cron:tick", &LockOptions::new(Duration::from_secs(10))).await?;
    /// let released = redlock.release_detailed(&lock).await?;
    /// println!("released on {} of {} nodes", released.released, redlock.len());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// None today (node failures are listed); kept fallible for future node checks.
    pub async fn release_detailed(&self, lock: &Lock) -> Result<RedlockRelease> {
        let replies = self
            .on_all(|node| Locker::release(&node.client, lock))
            .await;
        let mut out = RedlockRelease::default();
        for r in replies {
            match r {
                NodeReply::Ok(ReleaseOutcome::Released) => out.released += 1,
                NodeReply::Ok(ReleaseOutcome::NotHeld) => out.not_held += 1,
                NodeReply::Ok(ReleaseOutcome::HeldByOther) => out.held_by_other += 1,
                NodeReply::Failed(e) => out.node_errors.push(e),
            }
        }
        Ok(out)
    }
}

/// Redlock as a [`Locker`]: the retry loop, the guard and its watchdog, the middleware and the
/// load generator drive it exactly as they drive one server.
impl Locker for Redlock {
    /// One round. Busy (`Ok(None)`) when the nodes that refused already make a quorum
    /// impossible; [`Error::QuorumNotReached`] when node failures, not refusals, kept it from a
    /// quorum (had the failed nodes granted, it would have been won).
    async fn attempt(&self, key: &str, opts: &LockOptions) -> Result<Option<Lock>> {
        let round = self.round(key, opts).await?;
        if round.lock.is_some()
            || round.node_errors.is_empty()
            || round.acquired + round.node_errors.len() < self.quorum()
        {
            return Ok(round.lock);
        }
        Err(Error::QuorumNotReached {
            key: key.to_string(),
            acquired: round.acquired,
            needed: self.quorum(),
            node_errors: round.node_errors,
        })
    }

    /// Released when a quorum of nodes still held our token ([`RedlockRelease::outcome`]).
    async fn release(&self, lock: &Lock) -> Result<ReleaseOutcome> {
        Ok(self.release_detailed(lock).await?.outcome(self.quorum()))
    }

    /// Extends on every node; succeeds only when a quorum extended with validity left, and then
    /// recomputes the lock's validity from this round's start.
    ///
    /// # Errors
    /// [`Error::QuorumNotReached`] when node failures (not refusals) left too few answers.
    async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<ExtendOutcome> {
        validate_ttl("ttl", ttl)?;
        let start = Instant::now();
        let snapshot = lock.clone();
        let replies = self
            .on_all(|node| {
                let mut l = snapshot.clone();
                async move { Locker::extend(&node.client, &mut l, ttl).await }
            })
            .await;
        let (mut extended, mut other, mut errors) = (0, 0, Vec::new());
        for r in replies {
            match r {
                NodeReply::Ok(ExtendOutcome::Extended) => extended += 1,
                NodeReply::Ok(ExtendOutcome::HeldByOther) => other += 1,
                NodeReply::Ok(ExtendOutcome::NotHeld) => {}
                NodeReply::Failed(e) => errors.push(e),
            }
        }
        let mut renewed = lock.clone();
        renewed.extended(ttl, start);
        if extended >= self.quorum() && renewed.is_valid() {
            *lock = renewed;
            return Ok(ExtendOutcome::Extended);
        }
        if extended + errors.len() >= self.quorum() && !errors.is_empty() {
            return Err(Error::QuorumNotReached {
                key: lock.key.clone(),
                acquired: extended,
                needed: self.quorum(),
                node_errors: errors,
            });
        }
        Ok(if other > 0 {
            ExtendOutcome::HeldByOther
        } else {
            ExtendOutcome::NotHeld
        })
    }

    fn mode(&self) -> &'static str {
        "redlock"
    }

    /// The sum over the nodes' clients.
    fn stats(&self) -> ClientStats {
        self.nodes.iter().fold(ClientStats::default(), |sum, n| {
            let s = n.client.stats();
            ClientStats {
                noscript_recoveries: sum.noscript_recoveries + s.noscript_recoveries,
                unknown_outcome_cleanups: sum.unknown_outcome_cleanups + s.unknown_outcome_cleanups,
            }
        })
    }
}

/// The majority of `n` nodes.
///
/// ```
/// assert_eq!(lockkit::quorum_of(3), 2);
/// assert_eq!(lockkit::quorum_of(5), 3);
/// ```
pub fn quorum_of(n: usize) -> usize {
    n / 2 + 1
}

#[cfg(test)]
mod tests {
    use super::quorum_of;

    #[test]
    fn quorum_is_strict_majority() {
        for (n, q) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)] {
            assert_eq!(quorum_of(n), q, "n = {n}");
            // Two disjoint quorums cannot exist.
            assert!(2 * quorum_of(n) > n);
        }
    }
}
