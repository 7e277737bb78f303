//! The acquire round: `SET NX PX` with one token on every node, decided at quorum, and what
//! undoes it when it is lost (or dropped before it is decided).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use redis::{RedisResult, Value};

use super::direct::{Fallback, Read, Via, VoteRequest};
use super::quorum::{count, settled, Node, NodeReply, Nodes, Tally};
use super::Redlock;
use crate::command::Command;
use crate::error::{Error, NodeError, Result};
use crate::keys::check_key;
use crate::lock::{new_token, set_nx_taken, Lock, SetNx};
use crate::options::LockOptions;

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

impl Redlock {
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
        let request = SetNxVote {
            kt: shared,
            ttl,
            longest,
            start,
        };
        let (won, mut tally) = self
            .nodes
            .vote_direct(
                true,
                |_| None,
                request,
                // Validity is measured up to the moment the quorum is complete.
                |replies| {
                    settled(replies, |taken| *taken).map(|granted| {
                        granted
                            && valid_until.saturating_duration_since(Instant::now()) > min_validity
                    })
                },
                // A grant (or an unknown outcome) after a lost round is given back; after a won
                // round it is simply part of the lock. A grant is given back at once: its `SET`
                // has landed, and the key would otherwise refuse the next round for nothing.
                move |i, reply, won: &bool| match reply {
                    _ if *won => {}
                    NodeReply::Ok(true) => {
                        nodes.give_back_in_background(i, &late_key.0, &late_key.1)
                    }
                    r if may_hold(&r) => {
                        nodes.undo_in_background(i, &late_key.0, &late_key.1, start);
                    }
                    _ => {}
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

    /// The attempt of [`Locker::attempt`], uncounted.
    pub(super) async fn attempt_round(
        &self,
        key: &str,
        opts: &LockOptions,
    ) -> Result<Option<Lock>> {
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

/// Whether a node may hold our key after this reply: it granted, or its reply was lost.
fn may_hold(reply: &NodeReply<bool>) -> bool {
    match reply {
        NodeReply::Ok(taken) => *taken,
        NodeReply::Failed(e) => e.error.is_unknown_outcome(),
        NodeReply::Skipped(_) => false,
    }
}

impl Nodes {
    /// Compare-and-delete of `key`/`token` on node `i` in a task of its own, for a grant that
    /// answered after its round was lost, over the connection its `SET` went over (retried in
    /// the background when it fails).
    fn give_back_in_background(&self, i: usize, key: &str, token: &str) {
        // Called by the connection's task, which may be dropped as its runtime shuts down.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                key,
                "no runtime to give a late grant back on: the key stays until its TTL"
            );
            return;
        };
        let node = self.nodes[i].client.clone();
        let (key, token) = (key.to_string(), token.to_string());
        runtime.spawn(async move {
            let conn = node.conns.conn_for(&token);
            node.give_back(conn, &key, &token, crate::lock::Hold::Lock)
                .await;
        });
    }

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

/// A round's `SET key token NX PX ttl`, for [`Nodes::vote_direct`](super::quorum::Nodes).
struct SetNxVote {
    /// The key and the token.
    kt: Arc<(String, String)>,
    ttl: Duration,
    /// With the restart rule: the longest TTL in use on the nodes.
    longest: Option<Duration>,
    /// When the round began.
    start: Instant,
}

impl VoteRequest<bool> for SetNxVote {
    fn route<'a>(&self, node: &'a Node) -> Via<'a, bool> {
        let Some(link) = node.client.conns.conn_for(&self.kt.1).link() else {
            return Via::Future;
        };
        let Some(epoch) = link.epoch() else {
            return Via::Future;
        };
        if let Some(longest) = self.longest {
            // As `Node::set_nx_checked`, over the connection the `SET` goes out on.
            let Some(started) = node.start_on(epoch) else {
                return Via::Future;
            };
            if let Err(refused) = Node::restart_rule(started, self.start, longest) {
                return Via::Answered(Err(refused));
            }
        }
        Via::Direct(link, epoch)
    }

    fn write(&self, out: &mut Vec<u8>) {
        let set = SetNx {
            key: &self.kt.0,
            token: &self.kt.1,
            ttl: self.ttl,
            get: false,
        };
        set.write(out);
    }

    fn read(&self, reply: RedisResult<Value>) -> Read<bool> {
        Read::Answer(
            reply
                .and_then(Value::extract_error)
                .map_err(Error::from)
                .and_then(|v| set_nx_taken(&v, &self.kt.1, false)),
        )
    }

    fn fallback(&self, node: Arc<Node>, _after: Option<Error>) -> Fallback<bool> {
        let kt = Arc::clone(&self.kt);
        let (ttl, longest, start) = (self.ttl, self.longest, self.start);
        Box::pin(async move { node.set_nx_checked(&kt.0, &kt.1, ttl, longest, start).await })
    }
}
