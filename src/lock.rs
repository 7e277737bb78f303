//! The lock client: acquire with one `SET NX PX`, release and extend through the scripts.

use std::time::{Duration, Instant};

use redis::Value;

use crate::client::{ClientStats, Connections};
use crate::conn::Conn;
use crate::error::{unknown_outcome, Error, Result};
use crate::guard::{Holder, LockGuard};
use crate::options::{validate_ttl, ClientOptions, LockOptions, WatchdogOptions};
use crate::scripts;

/// Redis refuses keys longer than 512 MB; lockkit keeps lock keys to a sane size.
pub const MAX_KEY_LEN: usize = 64 * 1024;

/// A held lock: the key, the token that proves it is ours, and how long it is valid for.
///
/// A `Lock` is plain data; it does not release itself. Use [`LockGuard`] for that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub(crate) key: String,
    pub(crate) token: String,
    pub(crate) ttl: Duration,
    pub(crate) acquired_at: Instant,
    pub(crate) valid_until: Instant,
    pub(crate) fencing_token: Option<u64>,
}

impl Lock {
    /// The lock key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The random token (UUID v4, 32 hex digits) stored in the key; proves the lock is ours.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The TTL the key was last set or extended with.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// When the acquiring command was sent (the TTL cannot have started earlier).
    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// The instant after which the lock must be assumed gone: request start + TTL − drift.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// How much validity is left now (zero once it ran out).
    pub fn remaining_validity(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// Whether validity is left.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }

    /// The fencing token, when acquired with [`LockClient::try_acquire_fenced`].
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// The key held our token and was deleted.
    Released,
    /// The key was gone (our lock expired and nobody took it); nothing changed.
    NotHeld,
    /// Another token is in the key (our lock expired and someone else holds it now); untouched.
    HeldByOther,
}

/// What an extend did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtendOutcome {
    /// The key held our token; its TTL was reset.
    Extended,
    /// The key was gone; nothing changed (the lock was lost).
    NotHeld,
    /// Another token is in the key; untouched (the lock was lost).
    HeldByOther,
}

impl ReleaseOutcome {
    /// `true` for [`Released`](Self::Released).
    pub fn is_released(self) -> bool {
        self == ReleaseOutcome::Released
    }
}

impl ExtendOutcome {
    /// `true` for [`Extended`](Self::Extended).
    pub fn is_extended(self) -> bool {
        self == ExtendOutcome::Extended
    }
}

/// Reads a script's `1 / 0 / -1` reply.
fn ownership_reply(what: &'static str, v: &Value) -> Result<i64> {
    match v {
        Value::Int(n @ -1..=1) => Ok(*n),
        Value::ServerError(e) => Err(Error::Redis(e.clone().into())),
        other => Err(Error::UnexpectedReply {
            what,
            reply: format!("{other:?}"),
        }),
    }
}

pub(crate) fn release_outcome(v: &Value) -> Result<ReleaseOutcome> {
    Ok(match ownership_reply("release.lua", v)? {
        1 => ReleaseOutcome::Released,
        0 => ReleaseOutcome::NotHeld,
        _ => ReleaseOutcome::HeldByOther,
    })
}

pub(crate) fn extend_outcome(v: &Value) -> Result<ExtendOutcome> {
    Ok(match ownership_reply("extend.lua", v)? {
        1 => ExtendOutcome::Extended,
        0 => ExtendOutcome::NotHeld,
        _ => ExtendOutcome::HeldByOther,
    })
}

/// The acquire: `SET key token NX PX ttl`, one command.
fn set_nx_cmd(key: &str, token: &str, ttl: Duration) -> redis::Cmd {
    let mut c = redis::cmd("SET");
    c.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms(ttl));
    c
}

/// Reads a `SET NX` reply: taken (`OK`), busy (nil), or an error.
fn set_nx_taken(v: &Value) -> Result<bool> {
    match v {
        Value::Okay => Ok(true),
        Value::Nil => Ok(false),
        Value::ServerError(e) => Err(Error::Redis(e.clone().into())),
        other => Err(Error::UnexpectedReply {
            what: "SET NX PX",
            reply: format!("{other:?}"),
        }),
    }
}

/// A fresh token: UUID v4 as 32 lowercase hex digits.
pub fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidKey {
            reason: "the key is empty; give every lock a name, e.g. `lock:orders:42`".into(),
        });
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::InvalidKey {
            reason: format!(
                "the key is {} bytes; lock keys are limited to {MAX_KEY_LEN} bytes (hash long names first)",
                key.len()
            ),
        });
    }
    Ok(())
}

pub(crate) fn ttl_ms(ttl: Duration) -> u64 {
    ttl.as_millis().min(u128::from(u64::MAX)) as u64
}

/// The validity deadline of a lock whose acquiring command was sent at `start`.
pub(crate) fn validity_deadline(start: Instant, ttl: Duration, drift: Duration) -> Instant {
    start + ttl.saturating_sub(drift)
}

/// A Redis lock client: acquire, release, extend, pipelined batches, guards with a watchdog.
///
/// Cheap to clone (the connections are shared). Every call goes over one of the client's
/// multiplexed connections, which pipeline concurrent calls and reconnect by themselves.
#[derive(Debug, Clone)]
pub struct LockClient {
    pub(crate) conns: Connections,
}

impl LockClient {
    /// Connects to `url` (`redis://`, `rediss://`, `redis+unix://`; user and password in the URL)
    /// with default options, and preloads the scripts.
    ///
    /// # Errors
    /// A malformed URL, a server that does not answer, or a refused AUTH.
    pub async fn connect(url: &str) -> Result<LockClient> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects with explicit options (validated here, once).
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<LockClient> {
        Ok(LockClient {
            conns: Connections::connect(url, options).await?,
        })
    }

    /// The target URL with the password redacted.
    pub fn target(&self) -> &str {
        self.conns.target()
    }

    /// What the target is: one server, a proxy, or a cluster (detected at connect).
    pub fn topology(&self) -> crate::Topology {
        self.conns.topology()
    }

    /// Whether the target is treated as a proxy (configured, or detected at connect).
    pub fn is_proxy(&self) -> bool {
        self.conns.is_proxy()
    }

    /// What the client has counted so far (NOSCRIPT recoveries, unknown-outcome clean-ups).
    pub fn stats(&self) -> ClientStats {
        self.conns.stats()
    }

    /// One attempt: `SET key token NX PX ttl`. `Ok(None)` when the lock is held by someone else.
    ///
    /// The returned lock is valid until request start + TTL − drift (0.01 × TTL + 2 ms).
    ///
    /// If the reply is lost (timeout, dropped connection) the SET may or may not have landed;
    /// lockkit then runs a compare-and-delete with this attempt's token before returning the
    /// error, so no ghost lock is left held for a whole TTL.
    pub async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lock>> {
        let opts = LockOptions::new(ttl);
        // Also refuses a TTL the drift allowance eats whole: such a lock is born expired.
        opts.validate()?;
        self.attempt(key, &opts).await
    }

    async fn attempt(&self, key: &str, opts: &LockOptions) -> Result<Option<Lock>> {
        check_key(key)?;
        let token = new_token();
        let mut conn = self.conns.conn();
        let start = Instant::now();
        let reply = set_nx_cmd(key, &token, opts.ttl)
            .query_async::<Value>(&mut conn)
            .await;
        match reply {
            Ok(v) => Ok(set_nx_taken(&v)?.then(|| Lock {
                key: key.to_string(),
                token,
                ttl: opts.ttl,
                acquired_at: start,
                valid_until: validity_deadline(start, opts.ttl, opts.drift()),
                fencing_token: None,
            })),
            Err(e) if unknown_outcome(&e) => {
                self.clean_up_unknown(&mut conn, key, &token).await;
                Err(e.into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// `SET key token NX PX ttl` with a given token (Redlock sends one token to every node).
    pub(crate) async fn set_nx(&self, key: &str, token: &str, ttl: Duration) -> Result<bool> {
        let mut conn = self.conns.conn();
        let reply = set_nx_cmd(key, token, ttl)
            .query_async::<Value>(&mut conn)
            .await?;
        set_nx_taken(&reply)
    }

    /// After an acquire whose reply was lost: delete the key if (and only if) it holds our token.
    ///
    /// The clean-up goes over the same connection as the lost command: after a drop, that
    /// connection is the one being re-established, while the next one in the rotation may have
    /// been closed by the same fault and not know it yet.
    async fn clean_up_unknown(&self, conn: &mut Conn, key: &str, token: &str) {
        self.conns
            .0
            .counters
            .unknown_outcome_cleanups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = self.release_on(conn, key, token).await {
            tracing::warn!(key, error = %e, "acquire outcome unknown and clean-up failed; retrying in background");
            self.release_in_background(key, token);
        }
    }

    /// Compare-and-delete of `key` for `token` over `conn`.
    async fn release_on(&self, conn: &mut Conn, key: &str, token: &str) -> Result<ReleaseOutcome> {
        let v = self
            .conns
            .run_script(conn, &scripts::RELEASE, &[key], &[token.as_bytes()])
            .await?;
        release_outcome(&v)
    }

    /// Keeps trying a compare-and-delete for a few seconds while the server is unreachable, so
    /// a lock whose release (or whose acquire's reply) was lost is not left for its whole TTL.
    /// Safe at any time: it deletes the key only while it still holds this token.
    fn release_in_background(&self, key: &str, token: &str) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        let (key, token) = (key.to_string(), token.to_string());
        runtime.spawn(async move {
            for delay_ms in [50u64, 200, 800, 2000] {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                let mut conn = this.conns.conn();
                match this.release_on(&mut conn, &key, &token).await {
                    Err(e) if e.is_retryable() => continue,
                    _ => return,
                }
            }
        });
    }

    /// Acquires `key`, retrying a busy lock with delay + jitter until `opts.retry`'s deadline or
    /// attempt count runs out ([`Error::AcquireTimeout`]).
    ///
    /// The lock's validity counts from the successful attempt's send time, minus the drift
    /// allowance; a lock that would come back with less than `min_validity` left is released and
    /// tried again, so a lock handed back is never already expired.
    pub async fn acquire(&self, key: &str, opts: &LockOptions) -> Result<Lock> {
        opts.validate()?;
        let first = Instant::now();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let result = self.attempt(key, opts).await;
            match result {
                Ok(Some(lock)) if lock.remaining_validity() > opts.min_validity => return Ok(lock),
                Ok(Some(lock)) => {
                    // Too slow a round trip: the lock is (nearly) worthless; give it back.
                    let _ = self.release(&lock).await;
                }
                Ok(None) => {}
                Err(e) if e.is_retryable() => {
                    tracing::debug!(key, error = %e, "acquire attempt failed; retrying");
                }
                Err(e) => return Err(e),
            }
            let elapsed = first.elapsed();
            let Some(pause) = opts.retry.next_pause(attempts, elapsed) else {
                return Err(Error::AcquireTimeout {
                    key: key.to_string(),
                    attempts,
                    elapsed,
                });
            };
            tokio::time::sleep(pause).await;
        }
    }

    /// Releases the lock if it is still ours (compare-and-delete, never a bare `DEL`).
    ///
    /// Compare-and-delete is idempotent, so a release whose connection dropped or timed out is
    /// sent once more (on the re-established connection) before the error is returned.
    pub async fn release(&self, lock: &Lock) -> Result<ReleaseOutcome> {
        // The retry uses the same connection: after a drop it is the one being re-established.
        let mut conn = self.conns.conn();
        match self.release_on(&mut conn, &lock.key, &lock.token).await {
            Err(e) if e.is_retryable() => {
                tracing::debug!(key = %lock.key, error = %e, "release failed; sending it once more");
                let again = self.release_on(&mut conn, &lock.key, &lock.token).await;
                if matches!(&again, Err(e) if e.is_retryable()) {
                    // Still unreachable: report the error, and keep trying for a few seconds so
                    // the lock does not outlive its holder's intent by a whole TTL.
                    self.release_in_background(&lock.key, &lock.token);
                }
                again
            }
            other => other,
        }
    }

    /// Resets the lock's TTL to `ttl` if it is still ours (compare-and-PEXPIRE); on success the
    /// lock's validity is recomputed from this request's send time.
    pub async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<ExtendOutcome> {
        validate_ttl("ttl", ttl)?;
        let mut conn = self.conns.conn();
        let start = Instant::now();
        let ms = ttl_ms(ttl).to_string();
        let v = self
            .conns
            .run_script(
                &mut conn,
                &scripts::EXTEND,
                &[&lock.key],
                &[lock.token.as_bytes(), ms.as_bytes()],
            )
            .await?;
        let outcome = extend_outcome(&v)?;
        if outcome.is_extended() {
            lock.ttl = ttl;
            lock.valid_until = validity_deadline(start, ttl, LockOptions::new(ttl).drift());
        }
        Ok(outcome)
    }

    /// Tries every key once, all `SET NX PX` commands pipelined in one round trip.
    ///
    /// Returns one entry per key, in order: `Some(lock)` where taken, `None` where busy.
    pub async fn acquire_many(&self, keys: &[&str], ttl: Duration) -> Result<Vec<Option<Lock>>> {
        LockOptions::new(ttl).validate()?;
        for k in keys {
            check_key(k)?;
        }
        let drift = LockOptions::new(ttl).drift();
        let tokens: Vec<String> = keys.iter().map(|_| new_token()).collect();
        let cmds = keys
            .iter()
            .zip(&tokens)
            .map(|(key, token)| set_nx_cmd(key, token, ttl))
            .collect();
        let start = Instant::now();
        let replies = match self.conns.query_each(keys, cmds).await {
            Ok(r) => r,
            Err(e) if e.is_unknown_outcome() => {
                let pairs: Vec<(&str, &str)> = keys
                    .iter()
                    .copied()
                    .zip(tokens.iter().map(String::as_str))
                    .collect();
                let _ = self.release_pairs(&pairs).await;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let valid_until = validity_deadline(start, ttl, drift);
        let mut out = Vec::with_capacity(keys.len());
        for ((key, token), reply) in keys.iter().zip(tokens).zip(replies) {
            out.push(set_nx_taken(&reply)?.then(|| Lock {
                key: key.to_string(),
                token,
                ttl,
                acquired_at: start,
                valid_until,
                fencing_token: None,
            }));
        }
        Ok(out)
    }

    /// All or nothing: takes every key (one round trip) or, if any is busy, releases the ones it
    /// took (one more round trip) and returns `Ok(None)`.
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
    pub async fn release_many(&self, locks: &[Lock]) -> Result<Vec<ReleaseOutcome>> {
        let pairs: Vec<(&str, &str)> = locks
            .iter()
            .map(|l| (l.key.as_str(), l.token.as_str()))
            .collect();
        self.release_pairs(&pairs).await
    }

    async fn release_pairs(&self, pairs: &[(&str, &str)]) -> Result<Vec<ReleaseOutcome>> {
        let calls: Vec<(&str, Vec<&[u8]>)> = pairs
            .iter()
            .map(|(k, t)| (*k, vec![t.as_bytes()]))
            .collect();
        let replies = self
            .conns
            .run_script_many(&scripts::RELEASE, &calls)
            .await?;
        replies.iter().map(release_outcome).collect()
    }

    /// Acquires (with retries, as [`acquire`](Self::acquire)) and wraps the lock in a guard whose
    /// watchdog extends it about every TTL/3 until the guard is released or dropped.
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

    /// Wraps an already acquired lock in a guard (`watchdog: None` for no renewal).
    pub fn guard(&self, lock: Lock, watchdog: Option<WatchdogOptions>) -> Result<LockGuard> {
        LockGuard::start(Holder::Single(self.clone()), lock, watchdog)
    }

    /// Acquires with a fencing token in one atomic script (`SET NX PX` + `INCR fence_key`).
    ///
    /// `fence_key` holds the counter; give every lock its own (in Redis Cluster it must share the
    /// lock key's hash tag, e.g. `{orders:42}` and `{orders:42}:fence`). `Ok(None)` when busy.
    pub async fn try_acquire_fenced(
        &self,
        key: &str,
        fence_key: &str,
        ttl: Duration,
    ) -> Result<Option<Lock>> {
        validate_ttl("ttl", ttl)?;
        check_key(key)?;
        check_key(fence_key)?;
        if self.topology() == crate::Topology::Cluster
            && crate::key_slot(key.as_bytes()) != crate::key_slot(fence_key.as_bytes())
        {
            return Err(Error::InvalidKey {
                reason: format!(
                    "`{key}` and `{fence_key}` are in different hash slots; in Redis Cluster the \
                     fencing counter must share the lock key's hash tag, e.g. `{{{key}}}` and \
                     `{{{key}}}:fence`"
                ),
            });
        }
        let token = new_token();
        let ms = ttl_ms(ttl).to_string();
        let mut conn = self.conns.conn();
        let start = Instant::now();
        let reply = self
            .conns
            .run_script(
                &mut conn,
                &scripts::ACQUIRE_FENCED,
                &[key, fence_key],
                &[token.as_bytes(), ms.as_bytes()],
            )
            .await;
        let v = match reply {
            Ok(v) => v,
            Err(e) if e.is_unknown_outcome() => {
                self.clean_up_unknown(&mut conn, key, &token).await;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        match v {
            Value::Int(0) => Ok(None),
            Value::Int(n) if n > 0 => Ok(Some(Lock {
                key: key.to_string(),
                token,
                ttl,
                acquired_at: start,
                valid_until: validity_deadline(start, ttl, LockOptions::new(ttl).drift()),
                fencing_token: Some(n as u64),
            })),
            other => Err(Error::UnexpectedReply {
                what: "acquire_fenced.lua",
                reply: format!("{other:?}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_fresh_uuid_v4_hex() {
        let a = new_token();
        let b = new_token();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        let parsed = uuid::Uuid::parse_str(&a).unwrap();
        assert_eq!(parsed.get_version_num(), 4);
    }

    #[test]
    fn validity_subtracts_drift_from_ttl() {
        let t0 = Instant::now();
        let d = validity_deadline(t0, Duration::from_secs(10), Duration::from_millis(102));
        assert_eq!(d - t0, Duration::from_millis(9898));
        // Drift larger than the TTL leaves no validity rather than wrapping.
        assert_eq!(
            validity_deadline(t0, Duration::from_millis(1), Duration::from_secs(1)),
            t0
        );
    }

    #[test]
    fn script_replies_map_to_distinct_outcomes() {
        assert_eq!(
            release_outcome(&Value::Int(1)).unwrap(),
            ReleaseOutcome::Released
        );
        assert_eq!(
            release_outcome(&Value::Int(0)).unwrap(),
            ReleaseOutcome::NotHeld
        );
        assert_eq!(
            release_outcome(&Value::Int(-1)).unwrap(),
            ReleaseOutcome::HeldByOther
        );
        assert_eq!(
            extend_outcome(&Value::Int(-1)).unwrap(),
            ExtendOutcome::HeldByOther
        );
        assert!(release_outcome(&Value::Int(7)).is_err());
        assert!(release_outcome(&Value::Nil).is_err());
    }

    #[test]
    fn empty_and_huge_keys_are_rejected() {
        assert!(matches!(check_key(""), Err(Error::InvalidKey { .. })));
        assert!(matches!(
            check_key(&"x".repeat(MAX_KEY_LEN + 1)),
            Err(Error::InvalidKey { .. })
        ));
        assert!(check_key("lock:a\nb\0c").is_ok());
    }
}
