//! Batches on one server or cluster: many acquires pipelined in one round trip, many releases
//! in another. A batch never leaks: when part of it fails, what it took is released before the
//! error is returned, with the same clean-up path (and background retry) as a single acquire.

use std::time::{Duration, Instant};

use super::Unheard;
use crate::connection::pool::ScriptCall;
use crate::connection::Conn;
use crate::error::{Error, Result};
use crate::keys::check_key;
use crate::lock::{
    release_outcome, resent_outcome, set_nx_cmd, set_nx_taken, Hold, Lock, ReleaseOutcome,
};
use crate::options::LockOptions;
use crate::scripts;
use crate::{LockClient, Topology};

/// A lock to release in a batch: its key, its token, and whether it was taken in fair mode.
type Held<'a> = (&'a str, &'a str, bool);

impl LockClient {
    /// Tries every key once, all `SET NX PX` commands pipelined in one round trip (in a cluster,
    /// one pipeline per slot, sent at the same time).
    ///
    /// Returns one entry per key, in order: `Some(lock)` where taken, `None` where busy.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::LockClient;
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// let taken = client.acquire_many(&["sku:1", "sku:2"], Duration::from_secs(5)).await?;
    /// let held: Vec<_> = taken.into_iter().flatten().collect();
    /// client.release_many(&held).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A bad key or TTL; a Redis error for the batch or for any one key (`NOPERM`, `OOM`): then
    /// every key the batch took has been released (or is being released in the background)
    /// before the error is returned.
    pub async fn acquire_many(&self, keys: &[&str], ttl: Duration) -> Result<Vec<Option<Lock>>> {
        let opts = LockOptions::new(ttl)?;
        for k in keys {
            check_key(k)?;
        }
        // Drawn to land on the task's connection: the batch goes over its first token's, and
        // so, later, do each of its locks' own commands.
        let tokens: Vec<String> = keys.iter().map(|_| self.conns.task_token()).collect();
        let get = self.conns.set_nx_get();
        let cmds = keys
            .iter()
            .zip(&tokens)
            .map(|(key, token)| set_nx_cmd(key, token, ttl, get))
            .collect();
        let pairs: Vec<(&str, &str)> = keys
            .iter()
            .copied()
            .zip(tokens.iter().map(String::as_str))
            .collect();
        // One connection for the whole batch and anything that undoes it (`conn_for`).
        let Some(first) = tokens.first() else {
            return Ok(Vec::new());
        };
        let conn = self.conns.conn_for(first);
        let start = Instant::now();
        // Armed until the outcome is settled, clean-ups included (see `cleanup`).
        let mut unheard = Unheard::arm(self, &pairs, start, Hold::Lock).on(conn);
        let replies = match self.conns.query_each(conn, keys, cmds).await {
            Ok(r) => r,
            Err(e) => {
                // Any of them may have landed when the outcome is unknown; in a cluster, the
                // pipelines to the other slots' nodes went out beside the one that failed (a node
                // down) and took their keys.
                if e.is_unknown_outcome() || self.conns.topology() == Topology::Cluster {
                    unheard.count();
                    self.clean_up_pairs(conn, &pairs, Some(start)).await;
                }
                unheard.disarm();
                return Err(e);
            }
        };
        let mut taken = Vec::with_capacity(keys.len());
        let mut failure = None;
        for (reply, token) in replies.iter().zip(&tokens) {
            match set_nx_taken(reply, token, get) {
                Ok(t) => taken.push(t),
                Err(e) => {
                    taken.push(false);
                    failure.get_or_insert(e);
                }
            }
        }
        // Every lock of the batch was sent at `start`: one clock read says whether the round
        // trip left them any validity. If not, none is handed back (as a single attempt).
        let left = opts
            .valid_until(start)
            .saturating_duration_since(Instant::now());
        let spent = left.is_zero() && taken.contains(&true);
        if failure.is_some() || spent {
            let held: Vec<(&str, &str)> = pairs
                .iter()
                .zip(&taken)
                .filter(|(_, t)| **t)
                .map(|(p, _)| *p)
                .collect();
            if failure.is_some() {
                unheard.count();
            }
            // Their replies came: what they took is known, nothing lands later.
            self.clean_up_pairs(conn, &held, None).await;
            unheard.disarm();
            return Err(failure.unwrap_or_else(|| Error::TooLittleValidity {
                key: held[0].0.to_string(),
                left,
                min: opts.validity.min,
            }));
        }
        unheard.disarm();
        Ok(keys
            .iter()
            .zip(tokens)
            .zip(taken)
            .map(|((key, token), t)| t.then(|| Lock::acquired(key, token, &opts, start, None)))
            .collect())
    }

    /// All or nothing: takes every key (one round trip) or, if any is busy, releases the ones it
    /// took (one more round trip) and returns `Ok(None)`.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::LockClient;
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// if let Some(locks) = client.acquire_all(&["seat:1", "seat:2"], Duration::from_secs(5)).await? {
    ///     client.release_many(&locks).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many), and a failed release of the partial batch.
    pub async fn acquire_all(&self, keys: &[&str], ttl: Duration) -> Result<Option<Vec<Lock>>> {
        let got = self.acquire_many(keys, ttl).await?;
        if got.iter().all(Option::is_some) {
            return Ok(Some(got.into_iter().flatten().collect()));
        }
        let taken: Vec<Lock> = got.into_iter().flatten().collect();
        if !taken.is_empty() {
            self.release_many(&taken).await?;
        }
        Ok(None)
    }

    /// Releases many locks in one pipelined round trip; one outcome per lock, in order.
    ///
    /// A batch whose connection dropped or timed out is sent once more; if that fails too, the
    /// error is returned and the releases go on in the background for a few seconds.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::LockClient;
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// let held: Vec<_> = client.acquire_many(&["a", "b"], Duration::from_secs(5)).await?
    ///     .into_iter().flatten().collect();
    /// let outcomes = client.release_many(&held).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A Redis error or timeout for the batch, or an error reply for one of its releases.
    pub async fn release_many(&self, locks: &[Lock]) -> Result<Vec<ReleaseOutcome>> {
        let held: Vec<Held<'_>> = locks
            .iter()
            .map(|l| (l.key.as_str(), l.token.as_str(), l.options.fair.on))
            .collect();
        let Some((_, first, _)) = held.first() else {
            return Ok(Vec::new());
        };
        // The retry uses the same connection: after a drop it is the one being re-established.
        let conn = self.conns.conn_for(first);
        match self.release_each(conn, &held).await {
            Err(e) if e.is_retryable() => {
                tracing::debug!(error = %e, "batch release failed; sending it once more");
                let again = self.release_each(conn, &held).await;
                if matches!(&again, Err(e) if e.is_retryable()) {
                    for (key, token, fair) in &held {
                        self.release_in_background_on(conn, key, token, Hold::mutex(*fair));
                    }
                }
                again.map(|outcomes| {
                    outcomes
                        .into_iter()
                        .zip(locks)
                        .map(|(o, lock)| resent_outcome(&e, lock, o))
                        .collect()
                })
            }
            other => other,
        }
    }

    /// One pipelined compare-and-delete per lock: `release.lua`, or for a lock taken in fair
    /// mode `release_fair.lua`, which names the queue's head (a plain release would wake every
    /// fair waiter of the key).
    async fn release_each(&self, conn: &Conn, held: &[Held<'_>]) -> Result<Vec<ReleaseOutcome>> {
        let channels: Vec<Option<String>> = held
            .iter()
            .map(|(k, _, _)| self.conns.release_channel(k))
            .collect();
        let markers: Vec<Option<String>> = held
            .iter()
            .map(|(k, _, _)| self.conns.released_marker(k))
            .collect();
        let fair_keys = held
            .iter()
            .map(|(k, _, fair)| fair.then(|| self.fair_script_keys(k)).transpose())
            .collect::<Result<Vec<_>>>()?;
        let calls: Vec<ScriptCall<'_>> = held
            .iter()
            .zip(&channels)
            .zip(&markers)
            .zip(&fair_keys)
            .map(|((((key, token, _), channel), marker), fair_keys)| {
                let (marker, channel) = (marker.as_deref(), channel.as_deref());
                let (script, keys) = match fair_keys {
                    Some(keys) => (
                        &scripts::RELEASE_FAIR,
                        keys.iter().map(String::as_str).collect(),
                    ),
                    None => (&scripts::RELEASE, vec![*key]),
                };
                let r = self.conns.release_args(&keys, token, marker, channel);
                ScriptCall {
                    script,
                    keys: r.keys().to_vec(),
                    args: r.args().to_vec(),
                }
            })
            .collect();
        let replies = self.conns.run_script_many(conn, &calls).await?;
        replies.iter().map(release_outcome).collect()
    }

    /// Gives back what a failed batch may hold: one pipelined compare-and-delete, and for each
    /// key it could not confirm, the background clean-up a single acquire gets; all over `conn`,
    /// the batch's connection, so none overtakes a command of the batch. `sent`: when the
    /// batch's outcome is unknown, when it was sent (a connection given up after that may still
    /// deliver it late, see `cleanup`).
    async fn clean_up_pairs(&self, conn: &Conn, pairs: &[(&str, &str)], sent: Option<Instant>) {
        if pairs.is_empty() {
            return;
        }
        let held: Vec<Held<'_>> = pairs.iter().map(|&(k, t)| (k, t, false)).collect();
        let outcomes = match self.release_each(conn, &held).await {
            Ok(outcomes) => outcomes,
            Err(e) => {
                tracing::warn!(error = %e, keys = pairs.len(), "batch clean-up failed; retrying in background");
                Vec::new()
            }
        };
        for (i, (key, token)) in pairs.iter().enumerate() {
            match outcomes.get(i) {
                Some(ReleaseOutcome::Released) => {}
                answered => self.clean_up_in_background(
                    conn,
                    key,
                    token,
                    Hold::Lock,
                    sent,
                    answered.is_some(),
                ),
            }
        }
    }
}
