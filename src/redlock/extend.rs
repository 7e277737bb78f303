//! Extend: compare-and-`PEXPIRE` on every node the lock may be on, granted on a quorum.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::quorum::{count, Node, NodeReply};
use super::release::never_sent;
use super::Redlock;
use crate::error::{Error, Result};
use crate::lock::{ExtendOutcome, Lock};
use crate::options::validate_ttl;

impl Redlock {
    /// The extend round of [`Locker::extend`], uncounted.
    pub(super) async fn extend_round(
        &self,
        lock: &mut Lock,
        ttl: Duration,
    ) -> Result<ExtendOutcome> {
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
