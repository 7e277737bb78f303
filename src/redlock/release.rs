//! Release: compare-and-delete on every node the lock may be on, decided at quorum.

use std::sync::Arc;

use redis::{RedisResult, Value};

use super::direct::{Fallback, Read, Via, VoteRequest};
use super::quorum::{count, Node, NodeReply};
use super::Redlock;
use crate::command::Command;
use crate::connection::pool::{Connections, ScriptCmd};
use crate::error::{Error, NodeError, Result};
use crate::lock::{release_outcome, Hold};
use crate::lock::{Lock, ReleaseOutcome};
use crate::options::ScriptMode;
use crate::scripts;

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

impl Redlock {
    /// Releases on every node (compare-and-delete) and says, node by node, what happened.
    /// Returns once a quorum has released, or once a quorum can no longer release; the other
    /// nodes finish in the background ([`RedlockRelease::pending`]).
    /// [`Locker::release`](crate::Locker::release) gives the same as one [`ReleaseOutcome`] ([`RedlockRelease::outcome`]).
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
        let release = ReleaseVote {
            lock: Arc::new(lock.clone()),
            // The nodes share their connection options.
            mode: self.nodes.nodes[0].client.conns.script_mode(),
        };
        let (_, mut tally) = self
            .nodes
            .vote_direct(
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

/// Whether `lock`'s `SET` never went to node `i` (its breaker was open): the lock cannot be there.
pub(super) fn never_sent(lock: &Lock, i: usize) -> bool {
    i < 64 && lock.unsent & (1 << i) != 0
}

/// A plain lock's compare-and-delete on every node, for
/// [`Nodes::vote_direct`](super::quorum::Nodes).
struct ReleaseVote {
    lock: Arc<Lock>,
    mode: ScriptMode,
}

impl VoteRequest<ReleaseOutcome> for ReleaseVote {
    fn route<'a>(&self, node: &'a Node) -> Via<'a, ReleaseOutcome> {
        let conns = &node.client.conns;
        // A fair lock's release, a marker or a channel: as `LockClient::release_on` does it.
        let plain = Hold::mutex(self.lock.options.fair.on) == Hold::Lock
            && conns.release_channel(&self.lock.key).is_none()
            && conns.released_marker(&self.lock.key).is_none();
        let link = conns.conn_for(&self.lock.token).link().filter(|_| plain);
        match link.and_then(|l| Some((l, l.epoch()?))) {
            Some((link, epoch)) => Via::Direct(link, epoch),
            None => Via::Future,
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        let call = ScriptCmd {
            mode: self.mode,
            script: &scripts::RELEASE,
            keys: &[self.lock.key.as_str()],
            args: &[self.lock.token.as_bytes()],
        };
        call.write(out);
    }

    fn read(&self, reply: RedisResult<Value>) -> Read<ReleaseOutcome> {
        match reply.and_then(Value::extract_error) {
            Ok(v) => Read::Answer(release_outcome(&v)),
            // The script never ran: the future path sends it again with its text.
            Err(e) if Connections::is_missing_script(&e) => Read::Again(None),
            Err(e) => {
                let e = Error::from(e);
                // As `LockClient::release_node`: sent once more, then kept trying.
                if e.is_retryable() {
                    Read::Again(Some(e))
                } else {
                    Read::Answer(Err(e))
                }
            }
        }
    }

    fn fallback(&self, node: Arc<Node>, after: Option<Error>) -> Fallback<ReleaseOutcome> {
        let lock = Arc::clone(&self.lock);
        Box::pin(async move {
            match after {
                None => node.client.release_node(&lock).await,
                Some(e) => node.client.release_node_again(&lock, e).await,
            }
        })
    }
}
