//! Fencing tokens: a lock acquired together with a strictly increasing number, in one script.

use std::time::{Duration, Instant};

use redis::Value;

use super::Unheard;
use crate::error::{Error, Result};
use crate::keys::check_key;
use crate::lock::{ttl_ms, Hold, Lock};
use crate::options::LockOptions;
use crate::scripts;
use crate::{LockClient, Locker};

impl LockClient {
    /// Acquires with a fencing token in one atomic script (`SET NX PX` + `INCR fence_key`).
    ///
    /// `fence_key` holds the counter; give every lock its own (in Redis Cluster it must share the
    /// lock key's hash tag, e.g. `{orders:42}` and `{orders:42}:fence`). `Ok(None)` when busy.
    ///
    /// The resource the lock guards keeps the highest token it has seen and refuses writes that
    /// carry an older one: a holder paused past its TTL then cannot write after the next holder.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockClient, Locker};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// if let Some(lock) = client
    ///     .try_acquire_fenced("{orders:42}:lock", "{orders:42}:fence", Duration::from_secs(5))
    ///     .await?
    /// {
    ///     let token = lock.fencing_token().unwrap();
    ///     // UPDATE orders SET ..., fence = $token WHERE id = 42 AND fence < $token
    ///     client.release(&lock).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A bad key, a TTL the drift allowance eats whole, keys in different cluster slots, a Redis
    /// error or a timeout.
    pub async fn try_acquire_fenced(
        &self,
        key: &str,
        fence_key: &str,
        ttl: Duration,
    ) -> Result<Option<Lock>> {
        // Refuses a TTL at or below the drift allowance: such a lock would be born expired.
        self.try_acquire_fenced_with(key, fence_key, &LockOptions::new(ttl)?)
            .await
    }

    /// [`try_acquire_fenced`](Self::try_acquire_fenced) with full options (drift allowance,
    /// min validity); the retry policy is not used (one attempt).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockClient, LockOptions};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// let opts = LockOptions::new(Duration::from_secs(5))?;
    /// let lock = client.try_acquire_fenced_with("{a}:lock", "{a}:fence", &opts).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A bad key, keys in different cluster slots, a Redis error or a timeout.
    pub async fn try_acquire_fenced_with(
        &self,
        key: &str,
        fence_key: &str,
        opts: &LockOptions,
    ) -> Result<Option<Lock>> {
        let attempt = self.attempt_fenced(key, fence_key, opts);
        crate::metrics::observe_attempt(self.mode(), key, attempt).await
    }

    /// Writes `value` to `key` only if `fencing_token` is at least the highest token that
    /// wrote to it (kept in `fence_key`): the resource-side check that makes a fencing token
    /// worth having, for a resource that lives in Redis (`lua/fenced_set.lua`). `Ok(true)`:
    /// written; `Ok(false)`: refused, a newer holder wrote already (stop: this lock is stale).
    ///
    /// `fence_key` has no TTL; in Redis Cluster it must share `key`'s hash tag.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockClient, Locker};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// if let Some(lock) = client
    ///     .try_acquire_fenced("{doc:7}:lock", "{doc:7}:fence", Duration::from_secs(5))
    ///     .await?
    /// {
    ///     let token = lock.fencing_token().unwrap();
    ///     if !client.fenced_set("{doc:7}", "{doc:7}:written", token, b"v2").await? {
    ///         eprintln!("a newer holder wrote first: this lock is stale");
    ///     }
    ///     client.release(&lock).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A bad key, a zero token, keys in different cluster slots, a Redis error or a timeout.
    pub async fn fenced_set(
        &self,
        key: &str,
        fence_key: &str,
        fencing_token: u64,
        value: &[u8],
    ) -> Result<bool> {
        check_key(key)?;
        check_key(fence_key)?;
        if fencing_token == 0 {
            return Err(Error::InvalidOptions {
                field: "fencing_token",
                reason: "fencing tokens start at 1 (acquire_fenced draws them)".into(),
            });
        }
        if self.topology() == crate::Topology::Cluster
            && crate::key_slot(key.as_bytes()) != crate::key_slot(fence_key.as_bytes())
        {
            return Err(Error::InvalidKey {
                reason: format!(
                    "`{key}` and `{fence_key}` are in different hash slots; give them one hash \
                     tag, e.g. `{{{key}}}` and `{{{key}}}:fence`"
                ),
            });
        }
        let token = fencing_token.to_string();
        let conn = self.conns.conn_for(&token);
        let v = self
            .conns
            .run_script(
                conn,
                &scripts::FENCED_SET,
                &[key, fence_key],
                &[token.as_bytes(), value],
            )
            .await?;
        match v {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            Value::ServerError(e) => Err(Error::Redis(e.into())),
            other => Err(Error::UnexpectedReply {
                what: "fenced_set.lua",
                reply: format!("{other:?}"),
            }),
        }
    }

    /// `key` and its fencing counter `fence_key` are good keys, in one hash slot on a cluster.
    pub(crate) fn check_fence_key(&self, key: &str, fence_key: &str) -> Result<()> {
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
        Ok(())
    }

    /// One fenced attempt with validated options, uncounted.
    async fn attempt_fenced(
        &self,
        key: &str,
        fence_key: &str,
        opts: &LockOptions,
    ) -> Result<Option<Lock>> {
        let ttl = opts.ttl;
        self.check_fence_key(key, fence_key)?;
        let token = self.conns.task_token();
        let ms = ttl_ms(ttl).to_string();
        let conn = self.conns.conn_for(&token);
        let start = Instant::now();
        let sent = [(key, token.as_str())];
        // Armed until the outcome is settled, clean-ups included (see `cleanup`).
        let unheard = Unheard::arm(self, &sent, start, Hold::Lock);
        let reply = self
            .conns
            .run_script(
                conn,
                &scripts::ACQUIRE_FENCED,
                &[key, fence_key],
                &[token.as_bytes(), ms.as_bytes()],
            )
            .await;
        let fencing_token = match reply {
            Ok(Value::Int(0)) => None,
            Ok(Value::Int(n)) if n > 0 => Some(n as u64),
            Ok(other) => {
                unheard.disarm();
                return Err(Error::UnexpectedReply {
                    what: "acquire_fenced.lua",
                    reply: format!("{other:?}"),
                });
            }
            Err(e) if e.is_unknown_outcome() => {
                unheard.clean_up(conn).await;
                return Err(e);
            }
            Err(e) => {
                unheard.disarm();
                return Err(e);
            }
        };
        let Some(n) = fencing_token else {
            unheard.disarm();
            return Ok(None);
        };
        if let Some(e) = super::spent(key, opts, opts.valid_until(start)) {
            let e = self.refuse_spent(conn, key, &token, e, Hold::Lock).await;
            unheard.disarm();
            return Err(e);
        }
        unheard.disarm();
        Ok(Some(Lock::acquired(key, token, opts, start, Some(n))))
    }
}
