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

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::client::Connections;
use crate::error::{Error, Result};
use crate::guard::{Holder, LockGuard};
use crate::lock::{
    check_key, new_token, validity_deadline, ExtendOutcome, Lock, LockClient, ReleaseOutcome,
};
use crate::options::{validate_ttl, ClientOptions, LockOptions, WatchdogOptions};

/// Options for a [`Redlock`].
#[derive(Debug, Clone)]
#[must_use]
pub struct RedlockOptions {
    pub(crate) node_timeout: Duration,
    pub(crate) client: ClientOptions,
}

impl Default for RedlockOptions {
    fn default() -> Self {
        RedlockOptions {
            node_timeout: Duration::from_millis(50),
            client: ClientOptions::default(),
        }
    }
}

impl RedlockOptions {
    /// 50 ms per node; default client options otherwise.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long one node may take to answer one command before it counts as failed. Keep it small
    /// against the TTL (a 10 s TTL with a 50 ms node timeout is typical).
    pub fn node_timeout(mut self, d: Duration) -> Self {
        self.node_timeout = d;
        self
    }

    /// Options for each node's connection (its timeouts are replaced by the node timeout).
    pub fn client(mut self, c: ClientOptions) -> Self {
        self.client = c;
        self
    }
}

/// One node's failure in a Redlock operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeError {
    /// The node's URL, password redacted.
    pub node: String,
    /// What went wrong (an error or a timeout).
    pub error: String,
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.node, self.error)
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

/// A Redlock client over N independent masters. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Redlock {
    nodes: Arc<[LockClient]>,
    node_timeout: Duration,
}

enum NodeReply<T> {
    Ok(T),
    Failed(NodeError),
}

impl Redlock {
    /// Connects to every node (`redis://...` each) with default options.
    pub async fn connect<S: AsRef<str>>(urls: &[S]) -> Result<Redlock> {
        Self::connect_with(urls, RedlockOptions::default()).await
    }

    /// Connects to every node in parallel. A node that is down now does not fail the call (it is
    /// connected lazily and counts as failed until it answers); a malformed URL or bad options do.
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
            nodes: nodes.into(),
            node_timeout: options.node_timeout,
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
        self.nodes.iter().map(|n| n.target().to_string()).collect()
    }

    async fn on_all<'a, T, F, Fut>(&'a self, f: F) -> Vec<NodeReply<T>>
    where
        F: Fn(&'a LockClient) -> Fut,
        Fut: std::future::Future<Output = Result<T>> + 'a,
    {
        let timeout = self.node_timeout;
        join_all(self.nodes.iter().map(|node| {
            let fut = f(node);
            async move {
                match tokio::time::timeout(timeout, fut).await {
                    Ok(Ok(v)) => NodeReply::Ok(v),
                    Ok(Err(e)) => NodeReply::Failed(NodeError {
                        node: node.target().to_string(),
                        error: e.to_string(),
                    }),
                    Err(_) => NodeReply::Failed(NodeError {
                        node: node.target().to_string(),
                        error: format!("no answer within the node timeout {timeout:?}"),
                    }),
                }
            }
        }))
        .await
    }

    /// One round: `SET NX PX` on every node; granted on a quorum with validity left, otherwise
    /// released everywhere. Node failures are listed, not raised.
    pub async fn try_acquire(&self, key: &str, opts: &LockOptions) -> Result<RedlockAttempt> {
        opts.validate()?;
        check_key(key)?;
        let token = new_token();
        let start = Instant::now();
        let replies = self.on_all(|node| node.set_nx(key, &token, opts.ttl)).await;
        let mut acquired = 0;
        let mut node_errors = Vec::new();
        for r in replies {
            match r {
                NodeReply::Ok(true) => acquired += 1,
                NodeReply::Ok(false) => {}
                NodeReply::Failed(e) => node_errors.push(e),
            }
        }
        let lock = Lock {
            key: key.to_string(),
            token,
            ttl: opts.ttl,
            acquired_at: start,
            valid_until: validity_deadline(start, opts.ttl, opts.drift()),
            fencing_token: None,
        };
        if acquired >= self.quorum() && lock.remaining_validity() > opts.min_validity {
            return Ok(RedlockAttempt {
                lock: Some(lock),
                acquired,
                node_errors,
            });
        }
        // Not granted: undo everywhere, including nodes whose reply was lost.
        if acquired > 0 || !node_errors.is_empty() {
            let _ = self.release(&lock).await;
        }
        Ok(RedlockAttempt {
            lock: None,
            acquired,
            node_errors,
        })
    }

    /// Acquires with retries (random delay between rounds) until `opts.retry` runs out; then
    /// [`Error::QuorumNotReached`] with the last round's counts and per-node errors.
    pub async fn acquire(&self, key: &str, opts: &LockOptions) -> Result<Lock> {
        opts.validate()?;
        let first = Instant::now();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let attempt = self.try_acquire(key, opts).await?;
            if let Some(lock) = attempt.lock {
                return Ok(lock);
            }
            let Some(pause) = opts.retry.next_pause(attempts, first.elapsed()) else {
                return Err(Error::QuorumNotReached {
                    key: key.to_string(),
                    acquired: attempt.acquired,
                    needed: self.quorum(),
                    errors: attempt.node_errors.len(),
                    node_errors: attempt
                        .node_errors
                        .iter()
                        .map(ToString::to_string)
                        .collect(),
                });
            };
            tokio::time::sleep(pause).await;
        }
    }

    /// Releases on every node (compare-and-delete); says how many still held our token.
    pub async fn release(&self, lock: &Lock) -> Result<RedlockRelease> {
        let replies = self.on_all(|node| node.release(lock)).await;
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

    /// Extends on every node; succeeds only when a quorum extended with validity left, and then
    /// recomputes the lock's validity from this round's start.
    ///
    /// # Errors
    /// [`Error::QuorumNotReached`] when node failures (not refusals) left too few answers.
    pub async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<ExtendOutcome> {
        validate_ttl("ttl", ttl)?;
        let start = Instant::now();
        let snapshot = lock.clone();
        let replies = self
            .on_all(|node| {
                let mut l = snapshot.clone();
                async move { node.extend(&mut l, ttl).await }
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
        let drift = LockOptions::new(ttl).drift();
        let valid_until = validity_deadline(start, ttl, drift);
        if extended >= self.quorum() && Instant::now() < valid_until {
            lock.ttl = ttl;
            lock.valid_until = valid_until;
            return Ok(ExtendOutcome::Extended);
        }
        if extended + errors.len() >= self.quorum() && !errors.is_empty() {
            return Err(Error::QuorumNotReached {
                key: lock.key.clone(),
                acquired: extended,
                needed: self.quorum(),
                errors: errors.len(),
                node_errors: errors.iter().map(ToString::to_string).collect(),
            });
        }
        Ok(if other > 0 {
            ExtendOutcome::HeldByOther
        } else {
            ExtendOutcome::NotHeld
        })
    }

    /// Wraps an already acquired Redlock lock in a guard (`watchdog: None` for no renewal).
    pub fn guard(&self, lock: Lock, watchdog: Option<WatchdogOptions>) -> Result<LockGuard> {
        LockGuard::start(Holder::Redlock(self.clone()), lock, watchdog)
    }

    /// Acquires (with retries) and guards the lock with a watchdog that extends it on a quorum.
    pub async fn lock(
        &self,
        key: &str,
        opts: &LockOptions,
        watchdog: WatchdogOptions,
    ) -> Result<LockGuard> {
        // Checked before acquiring, so bad options never take a lock.
        watchdog.validate(opts.ttl)?;
        let lock = self.acquire(key, opts).await?;
        self.guard(lock, Some(watchdog))
    }
}

/// The majority of `n` nodes.
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
