//! Redlock: one lock over N independent Redis masters, granted by a quorum (N/2 + 1).
//!
//! Each attempt sends `SET key token NX PX ttl` with one token to every node in parallel, each
//! bounded by a per-node timeout small against the TTL. The lock is granted when a quorum
//! answered `OK` and validity is left: `validity = TTL − elapsed − drift` (drift =
//! 0.01 × TTL + 2 ms by default), measured on the monotonic clock. Otherwise it is released on
//! every node (also those that timed out: their `SET` may have landed) and retried after a random
//! delay. Extend succeeds only on a quorum; release goes to every node.
//!
//! # Answering at quorum
//! A round (acquire, extend, release) returns as soon as its outcome is settled: a quorum has
//! granted, or so many nodes refused or failed that a quorum is impossible. It does not wait
//! for the slowest node, so one frozen node (a GC pause, SIGSTOP, a black-holed network) no
//! longer costs every call the whole node timeout. Nodes still to answer finish in the
//! background, each bounded by the node timeout. An acquire's or a release's request goes
//! straight onto the node's connection, whose task hands the reply to the round, or to what
//! follows the round once it is decided (`direct.rs`): no task waits for a late node.
//! - a grant that arrives after a lost round is released at once (a reply that was lost is
//!   released too, retried for a few seconds: its `SET` may have landed);
//! - a grant that arrives after a won round is simply part of the lock (the holder's release
//!   goes to every node, that one included).
//!
//! Why the spec's validity arithmetic stays right: validity is `TTL − (t_quorum − t_start) −
//! drift`, where `t_start` is taken before the first `SET` is sent and `t_quorum` is the moment
//! the quorum was complete. Every node of that quorum received its `SET` after `t_start`, so its
//! key lives at least until `t_start + TTL` (up to the drift allowance) on that node's clock, whatever any other
//! node does later. Mutual exclusion needs only that a quorum of nodes hold our key until the
//! validity ends, and two quorums always share a node. A node that answers late can only add a
//! key that lives longer (it was set later), never shorten the quorum's; and the elapsed time
//! we subtract is the time we actually waited, so deciding earlier leaves more validity, never
//! an overestimate of it.
//!
//! # Circuit breaker
//! A node that timed out 3 times in a row, without any answer for at least two node timeouts,
//! is skipped by acquire and extend for a short back-off ([`RedlockOptions::breaker_backoff`],
//! 1 s by default): its vote counts as failed at once, without a request. After the back-off one
//! request goes to it as a trial (half-open) while the others still skip it: the trial's
//! timeout reopens the breaker, its answer closes it. A skipped vote can never help form a
//! quorum, so skipping is always on the safe side.
//!
//! A lock remembers the nodes its `SET` skipped: it cannot be on them, so its extends and its
//! release leave them out too (counted as "not held" there, see [`RedlockRelease::not_held`]).
//! Otherwise release goes to every node, open breaker or not (it still returns at quorum): a
//! release left out would leave the key held on that node for its whole TTL. A lock is released
//! through the Redlock that took it (or a clone, or one over the same URLs in the same order):
//! nodes are known by their place in the list.
//!
//! # Limitations and caveats
//! Redlock assumes bounded clock drift and bounded pauses. A holder paused past its validity can
//! still overlap with the next holder, and fencing tokens cannot be made strictly increasing
//! across independent nodes without consensus: where a stale write must be impossible, keep a
//! fencing check in a store that is itself consistent (see `LockClient::try_acquire_fenced`).

mod acquire;
mod direct;
mod extend;
mod options;
mod quorum;
mod release;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::connection::pool::Connections;
use crate::error::{Error, Result};
use crate::lock::{ExtendOutcome, Lock, ReleaseOutcome};
use crate::locker::Locker;
use crate::options::LockOptions;
use crate::{ClientStats, LockClient};
pub use acquire::RedlockAttempt;
pub use options::RedlockOptions;
pub use quorum::quorum_of;
use quorum::{Node, Nodes};
pub use release::RedlockRelease;

/// A Redlock client over N independent masters. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Redlock {
    nodes: Arc<Nodes>,
    restart_rule: bool,
    /// [`RedlockOptions::longest_ttl`].
    longest_floor: Duration,
    /// The longest TTL this client (and its clones) asked for, in microseconds.
    longest_used: Arc<AtomicU64>,
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
        let mut client_opts = options
            .client
            .clone()
            .connect_timeout(options.node_timeout.max(Duration::from_millis(100)))
            .response_timeout(Some(options.node_timeout))
            .reconnect_retries(0);
        // Redlock's waiters poll: a node's client opens no subscriber connection, and its
        // release publishes to nobody.
        client_opts.wait = crate::WaitMode::Poll;
        client_opts.publish_releases = false;
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
        let clients = join_all(attempts)
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        let nodes = clients
            .into_iter()
            .map(|client| {
                crate::metrics::redlock_node_added(client.target());
                Arc::new(Node::new(
                    client,
                    options.node_timeout,
                    options.breaker_backoff,
                ))
            })
            .collect();
        Ok(Redlock {
            nodes: Arc::new(Nodes {
                nodes,
                timeout: options.node_timeout,
            }),
            restart_rule: options.restart_rule,
            longest_floor: options.longest_ttl,
            longest_used: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.nodes.len()
    }

    /// Always false: a Redlock has at least one node.
    pub fn is_empty(&self) -> bool {
        self.nodes.nodes.is_empty()
    }

    /// The quorum: N/2 + 1.
    pub fn quorum(&self) -> usize {
        quorum_of(self.len())
    }

    /// The nodes' URLs, passwords redacted.
    pub fn targets(&self) -> Vec<String> {
        self.nodes
            .nodes
            .iter()
            .map(|n| n.client.target().to_string())
            .collect()
    }

    /// The longest TTL in use as far as this client knows: the longest of
    /// [`RedlockOptions::longest_ttl`] and every TTL it asked for, `ttl` included (which counts
    /// as asked for from now on).
    fn longest_ttl(&self, ttl: Duration) -> Duration {
        let us = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX);
        let used = self.longest_used.fetch_max(us, Ordering::Relaxed).max(us);
        Duration::from_micros(used).max(self.longest_floor)
    }

    /// How long until every node that answers has been up for the longest TTL in use
    /// ([`RedlockOptions::longest_ttl`], or the longest TTL this client asked for): zero when
    /// they all vote now, or when the restart rule is off. Freshly started nodes refuse votes
    /// for that long; a caller that starts its nodes itself (a benchmark, a test) waits this
    /// long instead of counting refusals. A node that does not answer is left out.
    ///
    /// ```no_run
    /// # async fn demo() -> lockkit::Result<()> {
    /// let redlock = lockkit::Redlock::connect(&["redis://a:6379", "redis://b:6379", "redis://c:6379"]).await?;
    /// tokio::time::sleep(redlock.restart_wait().await?).await;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// None today (a node that fails is left out); kept fallible for future node checks.
    pub async fn restart_wait(&self) -> Result<Duration> {
        if !self.restart_rule {
            return Ok(Duration::ZERO);
        }
        let longest = self.longest_ttl(Duration::ZERO);
        let waits = join_all(self.nodes.nodes.iter().map(|n| {
            tokio::time::timeout(
                self.nodes.timeout.max(Duration::from_secs(1)),
                n.restart_wait(longest),
            )
        }))
        .await;
        Ok(waits
            .into_iter()
            .filter_map(|w| w.ok().and_then(Result::ok))
            .max()
            .unwrap_or(Duration::ZERO))
    }

    /// How many node votes were skipped so far because the node's circuit breaker was open
    /// (it had timed out repeatedly); each counted as a failed vote without being waited for.
    pub fn skipped_votes(&self) -> u64 {
        self.nodes.skipped()
    }
}

/// Redlock as a [`Locker`]: the retry loop, the guard and its watchdog, the middleware and the
/// load generator drive it exactly as they drive one server.
impl Locker for Redlock {
    /// One round. Busy (`Ok(None)`) when the nodes that refused already make a quorum
    /// impossible; [`Error::QuorumNotReached`] when node failures, not refusals, kept it from a
    /// quorum (had the failed nodes granted, it would have been won);
    /// [`Error::TooLittleValidity`] when a quorum granted it with no more than `min_validity`
    /// left (given back on every node), as for every single attempt.
    async fn attempt(&self, key: &str, opts: &LockOptions) -> Result<Option<Lock>> {
        crate::metrics::observe_attempt(self.mode(), key, self.attempt_round(key, opts)).await
    }

    /// Released when a quorum of nodes still held our token ([`RedlockRelease::outcome`]).
    /// # Errors
    /// [`Error::QuorumNotReached`] when node failures left it undecided: fewer than a quorum
    /// released, and fewer than a quorum answered that our token was gone (a frozen or
    /// unreachable node may still hold it until its TTL).
    async fn release(&self, lock: &Lock) -> Result<ReleaseOutcome> {
        let release = async {
            let r = self.release_detailed(lock).await?;
            let quorum = self.quorum();
            if r.released >= quorum || r.not_held + r.held_by_other > self.len() - quorum {
                return Ok(r.outcome(quorum));
            }
            Err(Error::QuorumNotReached {
                key: lock.key.clone(),
                acquired: r.released,
                needed: quorum,
                node_errors: r.node_errors,
            })
        };
        crate::metrics::observe_release(self.mode(), lock, release).await
    }

    /// Extends on every node; succeeds only when a quorum extended with validity left, and then
    /// recomputes the lock's validity from this round's start.
    ///
    /// # Errors
    /// [`Error::QuorumNotReached`] when node failures (not refusals) left too few answers.
    async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<ExtendOutcome> {
        let key = lock.key.clone();
        crate::metrics::observe_extend(self.mode(), &key, self.extend_round(lock, ttl)).await
    }

    /// Redlock keeps no fair queue: one queue per node would not give one order across the
    /// nodes, and a queue on one node would make it a single point of failure.
    fn fair_unavailable(&self) -> Option<&'static str> {
        Some("Redlock keeps no fair queue (one per node would not give one order)")
    }

    fn mode(&self) -> &'static str {
        "redlock"
    }

    /// The sum over the nodes' clients.
    fn stats(&self) -> ClientStats {
        self.nodes
            .nodes
            .iter()
            .fold(ClientStats::default(), |sum, n| {
                let s = n.client.stats();
                ClientStats {
                    noscript_recoveries: sum.noscript_recoveries + s.noscript_recoveries,
                    unknown_outcome_cleanups: sum.unknown_outcome_cleanups
                        + s.unknown_outcome_cleanups,
                }
            })
    }
}
