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
//! background, each bounded by the node timeout:
//! - a grant that arrives after a lost round is released (so is a reply that was lost: its `SET`
//!   may have landed);
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

mod quorum;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::connection::pool::Connections;
use crate::error::{Error, NodeError, Result};
use crate::keys::check_key;
use crate::lock::{new_token, ExtendOutcome, Lock, ReleaseOutcome};
use crate::locker::Locker;
use crate::options::{validate_ttl, ClientOptions, LockOptions};
use crate::{ClientStats, LockClient};
pub use quorum::quorum_of;
use quorum::{count, settled, Node, NodeReply, Nodes, Tally};

/// Options for a [`Redlock`].
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
        /// reported as a node error ([`Error::NodeRestarted`]). The node's uptime (`INFO
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
        /// ([`Redlock::restart_wait`] says how long is left).
        longest_ttl: Duration => longest_ttl;
    }
}

/// The result of one Redlock acquire round.
#[derive(Debug)]
pub struct RedlockAttempt {
    /// The lock, when a quorum granted it with validity left.
    pub lock: Option<Lock>,
    /// How many nodes answered `OK` by the time the round was decided.
    pub acquired: usize,
    /// Nodes that failed, timed out or were skipped by their circuit breaker, one entry each.
    pub node_errors: Vec<NodeError>,
    /// Nodes whose answer was not waited for: the round was decided without them, and their
    /// request finishes in the background.
    pub pending: usize,
}

/// The result of a Redlock release.
#[derive(Debug, Default)]
pub struct RedlockRelease {
    /// Nodes that still held our token and deleted it.
    pub released: usize,
    /// Nodes where the key was gone, and those the lock's `SET` was never sent to (skipped by
    /// their circuit breaker when the lock was taken), which were not asked.
    pub not_held: usize,
    /// Nodes where another token was in the key (left untouched).
    pub held_by_other: usize,
    /// Nodes that failed, timed out or were skipped by their circuit breaker.
    pub node_errors: Vec<NodeError>,
    /// Nodes whose answer was not waited for (a quorum had already released, or could no
    /// longer); their release finishes in the background.
    pub pending: usize,
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

    /// One round: `SET NX PX` on every node; granted on a quorum with validity left, otherwise
    /// released everywhere. Node failures are listed, not raised.
    ///
    /// The round ends as soon as a quorum has granted or a quorum has become impossible; nodes
    /// still to answer then are counted in [`RedlockAttempt::pending`] and finish in the
    /// background (bounded by the node timeout).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockOptions, Redlock};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let redlock = Redlock::connect(&["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"]).await?;
    /// let round = redlock.try_acquire("cron:tick", &LockOptions::new(Duration::from_secs(10))?).await?;
    /// println!("granted on {} nodes; {} failed", round.acquired, round.node_errors.len());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A bad key; node failures are not errors here, they are listed.
    pub async fn try_acquire(&self, key: &str, opts: &LockOptions) -> Result<RedlockAttempt> {
        Ok(self.round(key, opts).await?.0)
    }

    /// One round, and the validity that was left when a quorum granted the lock with no more
    /// than `min_validity` of it (the round was lost for that alone, and given back).
    async fn round(
        &self,
        key: &str,
        opts: &LockOptions,
    ) -> Result<(RedlockAttempt, Option<Duration>)> {
        check_key(key)?;
        // On the task's own connection of each node (the nodes share the connection options).
        let token = self
            .nodes
            .nodes
            .first()
            .map_or_else(new_token, |n| n.client.conns.task_token());
        let (ttl, min_validity) = (opts.ttl, opts.validity.min);
        let longest = self.restart_rule.then(|| self.longest_ttl(ttl));
        let shared: Arc<(String, String)> = Arc::new((key.to_string(), token.clone()));
        let start = Instant::now();
        let valid_until = opts.valid_until(start);
        let nodes = Arc::clone(&self.nodes);
        let late_key = Arc::clone(&shared);
        let unheard = RoundUnheard {
            nodes: &self.nodes,
            key,
            token: &token,
            sent: start,
            armed: true,
        };
        let (won, mut tally) = self
            .nodes
            .vote(
                true,
                |_| None,
                |node| {
                    let kt = Arc::clone(&shared);
                    async move { node.set_nx_checked(&kt.0, &kt.1, ttl, longest).await }
                },
                // Validity is measured up to the moment the quorum is complete.
                |replies| {
                    settled(replies, |taken| *taken).map(|granted| {
                        granted
                            && valid_until.saturating_duration_since(Instant::now()) > min_validity
                    })
                },
                // A grant (or an unknown outcome) after a lost round is given back; after a won
                // round it is simply part of the lock.
                move |i, reply, won: &bool| {
                    if !*won && may_hold(&reply) {
                        nodes.undo_in_background(i, &late_key.0, &late_key.1, start);
                    }
                },
            )
            .await;
        let (acquired, _) = count(&tally.replies, |taken| *taken);
        // A quorum granted, and the round was lost all the same: too little validity was left.
        let spent = (!won && acquired >= self.quorum())
            .then(|| valid_until.saturating_duration_since(Instant::now()));
        // The round's guard still holds the token: the lock gets a copy.
        let mut lock = Lock::acquired(key, token.clone(), opts, start, None);
        lock.unsent = skipped_nodes(&tally);
        if !won {
            // Still armed: a round dropped while it undoes its grants leaves the undo to the
            // background, as one dropped mid-vote does.
            self.undo_answered(&tally, &lock).await;
        }
        unheard.disarm();
        let attempt = RedlockAttempt {
            lock: won.then_some(lock),
            acquired,
            pending: tally.pending(),
            node_errors: tally.errors(),
        };
        Ok((attempt, spent))
    }

    /// After a lost round: releases on the nodes that granted (awaited, they just answered;
    /// in the background when that fails) and, in the background, on those whose reply was
    /// lost (their `SET` may have landed).
    async fn undo_answered(&self, tally: &Tally<bool>, lock: &Lock) {
        let mut granted = Vec::new();
        for (i, reply) in tally.replies.iter().enumerate() {
            match reply {
                Some(NodeReply::Ok(true)) => granted.push(i),
                Some(r) if may_hold(r) => {
                    self.nodes
                        .undo_in_background(i, &lock.key, &lock.token, lock.acquired_at);
                }
                _ => {}
            }
        }
        let timeout = self.nodes.timeout;
        join_all(granted.into_iter().map(|i| async move {
            let node = &self.nodes.nodes[i].client;
            let undone = tokio::time::timeout(timeout, node.release_node(lock)).await;
            if !matches!(undone, Ok(Ok(_))) {
                self.nodes
                    .undo_in_background(i, &lock.key, &lock.token, lock.acquired_at);
            }
        }))
        .await;
    }

    /// Releases on every node (compare-and-delete) and says, node by node, what happened.
    /// Returns once a quorum has released, or once a quorum can no longer release; the other
    /// nodes finish in the background ([`RedlockRelease::pending`]).
    /// [`Locker::release`] gives the same as one [`ReleaseOutcome`] ([`RedlockRelease::outcome`]).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockOptions, Locker, Redlock};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let redlock = Redlock::connect(&["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"]).await?;
    /// let lock = redlock.acquire("cron:tick", &LockOptions::new(Duration::from_secs(10))?).await?;
    /// let released = redlock.release_detailed(&lock).await?;
    /// println!("released on {} of {} nodes", released.released, redlock.len());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// None today (node failures are listed); kept fallible for future node checks.
    pub async fn release_detailed(&self, lock: &Lock) -> Result<RedlockRelease> {
        let (quorum, n) = (self.quorum(), self.len());
        let lock_arc = Arc::new(lock.clone());
        let release = |node: Arc<Node>| {
            let lock = Arc::clone(&lock_arc);
            async move { node.client.release_node(&lock).await }
        };
        let (_, mut tally) = self
            .nodes
            .vote(
                false,
                |i| never_sent(lock, i).then_some(ReleaseOutcome::NotHeld),
                release,
                |replies| {
                    // Decided: a quorum released, or a quorum answered that our token is gone
                    // (the lock was lost), or every node answered. A failed node decides
                    // nothing: the lock may still be on it.
                    let (released, _) = count(replies, |o| *o == ReleaseOutcome::Released);
                    let (gone, _) = count(replies, |o| *o != ReleaseOutcome::Released);
                    let answered = replies.iter().flatten().count();
                    (released >= quorum || gone > n - quorum || answered == n).then_some(())
                },
                |_, _, _: &()| {},
            )
            .await;
        let mut out = RedlockRelease {
            pending: tally.pending(),
            node_errors: tally.errors(),
            ..RedlockRelease::default()
        };
        for reply in tally.replies.iter().flatten() {
            match reply {
                NodeReply::Ok(ReleaseOutcome::Released) => out.released += 1,
                NodeReply::Ok(ReleaseOutcome::NotHeld) => out.not_held += 1,
                NodeReply::Ok(ReleaseOutcome::HeldByOther) => out.held_by_other += 1,
                NodeReply::Failed(_) | NodeReply::Skipped(_) => {}
            }
        }
        Ok(out)
    }
}

/// Armed while a round's `SET`s are on the wire: if the round is dropped before it is decided
/// (a timeout or `select!` around the acquire), each node may still take the key for nobody, so
/// a compare-and-delete follows on every node in the background.
struct RoundUnheard<'a> {
    nodes: &'a Nodes,
    key: &'a str,
    token: &'a str,
    /// When the round's `SET`s went out.
    sent: Instant,
    armed: bool,
}

impl RoundUnheard<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for RoundUnheard<'_> {
    fn drop(&mut self) {
        if self.armed {
            for i in 0..self.nodes.nodes.len() {
                self.nodes
                    .undo_in_background(i, self.key, self.token, self.sent);
            }
        }
    }
}

/// The nodes (bit `i` for node `i`) a round skipped: its `SET` never went there.
fn skipped_nodes<T>(tally: &Tally<T>) -> u64 {
    tally
        .replies
        .iter()
        .take(64)
        .enumerate()
        .filter(|(_, r)| matches!(r, Some(NodeReply::Skipped(_))))
        .fold(0, |mask, (i, _)| mask | 1 << i)
}

/// Whether `lock`'s `SET` never went to node `i` (its breaker was open): the lock cannot be there.
fn never_sent(lock: &Lock, i: usize) -> bool {
    i < 64 && lock.unsent & (1 << i) != 0
}

/// Whether a node may hold our key after this reply: it granted, or its reply was lost.
fn may_hold(reply: &NodeReply<bool>) -> bool {
    match reply {
        NodeReply::Ok(taken) => *taken,
        NodeReply::Failed(e) => e.error.is_unknown_outcome(),
        NodeReply::Skipped(_) => false,
    }
}

impl Nodes {
    /// Compare-and-delete of `key`/`token` on node `i`, in the background, for a grant (or an
    /// unknown outcome) of a `SET` sent at `sent` that belongs to a lost round: the node's
    /// client's background clean-up (`client/cleanup.rs`: retried for a few seconds, each try
    /// bounded by the node timeout, and watched while a connection given up may still deliver
    /// the `SET` late), over the connection the `SET` went over (`conn_for`): behind it, never
    /// before it.
    fn undo_in_background(&self, i: usize, key: &str, token: &str, sent: Instant) {
        let node = &self.nodes[i].client;
        node.clean_up_in_background(
            node.conns.conn_for(token),
            key,
            token,
            crate::lock::Hold::Lock,
            Some(sent),
            false,
        );
    }
}

impl Redlock {
    /// The attempt of [`Locker::attempt`], uncounted.
    async fn attempt_round(&self, key: &str, opts: &LockOptions) -> Result<Option<Lock>> {
        let (round, spent) = self.round(key, opts).await?;
        // Granted by a quorum and given back for too little validity: not "busy", as for
        // `LockClient`'s single attempt (the retry loop tries again).
        if let Some(left) = spent {
            return Err(Error::TooLittleValidity {
                key: key.to_string(),
                left,
                min: opts.validity.min,
            });
        }
        // Contended only when the nodes that answered "taken" alone deny the quorum. A round is
        // decided as soon as it can no longer be won, so nodes may still be pending: with two
        // nodes one failure decides it, and counting only the failures seen so far took such a
        // round for contention.
        let n = self.len();
        let refused = n - round.acquired - round.pending - round.node_errors.len();
        if round.lock.is_some() || round.node_errors.is_empty() || refused > n - self.quorum() {
            return Ok(round.lock);
        }
        Err(Error::QuorumNotReached {
            key: key.to_string(),
            acquired: round.acquired,
            needed: self.quorum(),
            node_errors: round.node_errors,
        })
    }

    /// The extend round of [`Locker::extend`], uncounted.
    async fn extend_round(&self, lock: &mut Lock, ttl: Duration) -> Result<ExtendOutcome> {
        validate_ttl("ttl", ttl)?;
        self.longest_ttl(ttl);
        let start = Instant::now();
        let snapshot = Arc::new(lock.clone());
        let extend = |node: Arc<Node>| {
            let mut l = (*snapshot).clone();
            async move { node.client.extend_node(&mut l, ttl).await }
        };
        let mut tally = self
            .nodes
            .vote_until_settled(
                true,
                |i| never_sent(lock, i).then_some(ExtendOutcome::NotHeld),
                extend,
                |o| o.is_extended(),
            )
            .await;
        let errors = tally.errors();
        let (extended, _) = count(&tally.replies, |o| o.is_extended());
        let other = tally
            .replies
            .iter()
            .flatten()
            .filter(|r| matches!(r, NodeReply::Ok(ExtendOutcome::HeldByOther)))
            .count();
        if extended >= self.quorum() && lock.renew_if_valid(ttl, start) {
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
