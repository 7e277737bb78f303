//! [`Semaphore`]: N permits per key, each a lease with its own token and TTL
//! (`lua/semaphore_*.lua`), and what every shared primitive (this one, [`RwLock`](crate::RwLock))
//! shares: one scripted attempt armed for clean-up, a release sent once more when its reply was
//! lost, an extend that renews the validity only while it is still ahead.

use std::time::{Duration, Instant};

use redis::Value;

use super::{spent, LockClient, Unheard};
use crate::connection::notify::Waiter;
use crate::connection::pool::ClientStats;
use crate::error::{Error, Result};
use crate::keys::check_key;
use crate::lock::{
    extend_outcome, release_outcome, resent_outcome, ttl_ms, ExtendOutcome, Hold, Lock,
    ReleaseOutcome,
};
use crate::locker::Locker;
use crate::options::{validate_ttl, LockOptions};
use crate::scripts::{self, LuaScript};

/// A counting semaphore in Redis: at most `permits` holders of one key at once, each holding
/// its permit as a lease of its own (its own token, its own TTL), renewable by the watchdog.
///
/// The key is one sorted set of holders' tokens scored by the end of their lease. Every
/// operation drops the leases that have ended, so a crashed holder's permit comes back when its
/// lease runs out, and keeps the key's TTL at the longest lease left: no key is ever left
/// without a TTL. Acquire is one round trip (`semaphore_acquire.lua`); a release wakes the
/// client's waiters on that key. Every holder of a key must use the same number of permits.
///
/// A permit is a [`Lock`]: it goes through the [`Locker`] trait like a mutex, so
/// [`acquire`](Locker::acquire), [`lock`](Locker::lock) (a guard whose watchdog renews the
/// permit), [`release`](Locker::release) and [`extend`](Locker::extend) work as they do for
/// [`LockClient`]. Give a permit back through the semaphore that took it (a
/// [`LockClient`]'s release does not know the sorted set).
///
/// ```no_run
/// use std::time::Duration;
/// use lockkit::{LockClient, Locker, Semaphore};
/// # async fn demo() -> lockkit::Result<()> {
/// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
/// let uploads = Semaphore::new(client, 3)?; // three uploads at once, cluster-wide
/// if let Some(permit) = uploads.try_acquire("sem:uploads", Duration::from_secs(30)).await? {
///     // ... the work, inside permit.remaining_validity() ...
///     uploads.release(&permit).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    client: LockClient,
    permits: u32,
}

impl Semaphore {
    /// A semaphore of `permits` permits per key, over `client`'s connections.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for zero permits.
    pub fn new(client: LockClient, permits: u32) -> Result<Semaphore> {
        if permits == 0 {
            return Err(Error::InvalidOptions {
                field: "permits",
                reason: "a semaphore needs at least 1 permit".into(),
            });
        }
        Ok(Semaphore { client, permits })
    }

    /// How many holders one key admits at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The client the semaphore runs over.
    pub fn client(&self) -> &LockClient {
        &self.client
    }

    /// One attempt for a permit of `key` with a lease of `ttl`: `Ok(None)` when every permit is
    /// held.
    ///
    /// # Errors
    /// A bad key or TTL, a key that is not a semaphore (`WRONGTYPE`), a Redis error or a
    /// timeout (the attempt's permit, should it have been taken, is then given back).
    pub async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lock>> {
        self.try_acquire_with(key, &LockOptions::new(ttl)?).await
    }

    /// [`try_acquire`](Self::try_acquire) with full options (drift allowance, min validity);
    /// the retry policy is not used (one attempt).
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_with(&self, key: &str, opts: &LockOptions) -> Result<Option<Lock>> {
        self.attempt(key, opts).await
    }

    /// One attempt for a permit of `key` that comes with a fencing token: `Ok(None)` when every
    /// permit is held.
    ///
    /// A single counter can not fence N holders at once (the newest token would refuse the
    /// other N − 1 live holders), so a fenced permit is one of N numbered *slots*
    /// ([`Lock::fencing_slot`], 1 to N), and each slot has its own counter: the permit takes a
    /// slot whose last holder's lease has ended and draws that slot's next token. A resource
    /// keeps the highest token it accepted *per slot* and refuses an older one: a holder paused
    /// past its lease is refused once the next holder of its slot has written, while the other
    /// slots' holders go on. `fence_key` is one hash holding every slot's counter (no TTL, at
    /// most two fields a permit); in Redis Cluster it must share `key`'s hash tag. Release and
    /// extend the permit as any other ([`Locker::release`], [`Locker::extend`]).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockClient, Locker, Semaphore};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// let uploads = Semaphore::new(client.clone(), 3)?;
    /// let ttl = Duration::from_secs(30);
    /// if let Some(permit) = uploads.try_acquire_fenced("{up}", "{up}:fence", ttl).await? {
    ///     let (token, slot) = (permit.fencing_token().unwrap(), permit.fencing_slot().unwrap());
    ///     // Each slot is fenced on its own: one stored highest token per slot.
    ///     let stored = format!("{{up}}:written:{slot}");
    ///     if !client.fenced_set(&stored, &format!("{stored}:fence"), token, b"v").await? {
    ///         eprintln!("a newer holder of slot {slot} wrote first: this permit is stale");
    ///     }
    ///     uploads.release(&permit).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire); keys in different cluster slots; a `fence_key`
    /// that is not a hash (`WRONGTYPE`).
    pub async fn try_acquire_fenced(
        &self,
        key: &str,
        fence_key: &str,
        ttl: Duration,
    ) -> Result<Option<Lock>> {
        self.try_acquire_fenced_with(key, fence_key, &LockOptions::new(ttl)?)
            .await
    }

    /// [`try_acquire_fenced`](Self::try_acquire_fenced) with full options; the retry policy is
    /// not used (one attempt).
    ///
    /// # Errors
    /// As [`try_acquire_fenced`](Self::try_acquire_fenced).
    pub async fn try_acquire_fenced_with(
        &self,
        key: &str,
        fence_key: &str,
        opts: &LockOptions,
    ) -> Result<Option<Lock>> {
        self.client.check_fence_key(key, fence_key)?;
        self.attempt_permit(key, Some(fence_key), opts).await
    }

    /// One attempt at a permit of `key` (fenced when `fence` names the slots' hash), measured.
    async fn attempt_permit(
        &self,
        key: &str,
        fence: Option<&str>,
        opts: &LockOptions,
    ) -> Result<Option<Lock>> {
        let n = self.permits.to_string();
        let args = [n.as_bytes()];
        let keys: &[&str] = match fence {
            Some(fence_key) => &[key, fence_key],
            None => &[key],
        };
        let attempt = self.client.attempt_shared(
            key,
            opts,
            Hold::Permit,
            &scripts::SEMAPHORE_ACQUIRE,
            keys,
            &args,
        );
        crate::metrics::observe_attempt(self.mode(), key, attempt).await
    }

    /// How many live permits `key` has now (leases that ended are not counted).
    ///
    /// # Errors
    /// A bad key, a Redis error or a timeout.
    pub async fn holders(&self, key: &str) -> Result<u64> {
        check_key(key)?;
        let mut conn = self.client.conns.conn();
        // Counted from the server's time: ended leases not purged yet are not counted.
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await?;
        let now = secs * 1000 + micros / 1000;
        let live: u64 = redis::cmd("ZCOUNT")
            .arg(key)
            .arg(format!("({now}"))
            .arg("+inf")
            .query_async(&mut conn)
            .await?;
        Ok(live)
    }
}

impl Locker for Semaphore {
    async fn attempt(&self, key: &str, opts: &LockOptions) -> Result<Option<Lock>> {
        self.attempt_permit(key, None, opts).await
    }

    async fn release(&self, lock: &Lock) -> Result<ReleaseOutcome> {
        let release = self.client.release_hold(lock, Hold::Permit);
        crate::metrics::observe_release(self.mode(), lock, release).await
    }

    async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<ExtendOutcome> {
        let key = lock.key.clone();
        let keys = [key.as_str()];
        let extend = self
            .client
            .extend_hold(lock, ttl, &scripts::SEMAPHORE_EXTEND, &keys, &[]);
        crate::metrics::observe_extend(self.mode(), &key, extend).await
    }

    fn mode(&self) -> &'static str {
        self.client.mode()
    }

    fn stats(&self) -> ClientStats {
        self.client.stats()
    }

    /// Woken by a permit's release; polling the retry pause between releases, for the leases
    /// that end without one.
    fn waiter(&self, key: &str) -> Waiter {
        self.client.shared_waiter(key)
    }
}

/// What an acquiring script of a shared primitive took: its fencing token and (a semaphore's
/// permit) its slot, when fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    pub(crate) fencing_token: Option<u64>,
    pub(crate) slot: u32,
}

/// `{flag, n}`, the reply of an acquiring script (`{1, n, f}` or `{1, n, f, slot}` when
/// fenced): `None` busy, `Some` what it took.
pub(crate) fn taken(v: &Value, what: &'static str) -> Result<Option<Taken>> {
    let unexpected = || Error::UnexpectedReply {
        what,
        reply: format!("{v:?}"),
    };
    match v {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(0), Value::Int(_)] => Ok(None),
            [Value::Int(1), Value::Int(_), rest @ ..] => {
                let (fencing_token, slot) = match rest {
                    [] => (None, 0),
                    [Value::Int(f)] if *f > 0 => (Some(*f as u64), 0),
                    [Value::Int(f), Value::Int(i)] if *f > 0 && *i > 0 => (
                        Some(*f as u64),
                        u32::try_from(*i).map_err(|_| unexpected())?,
                    ),
                    _ => return Err(unexpected()),
                };
                Ok(Some(Taken {
                    fencing_token,
                    slot,
                }))
            }
            _ => Err(unexpected()),
        },
        Value::ServerError(e) => Err(Error::Redis(e.clone().into())),
        _ => Err(unexpected()),
    }
}

impl LockClient {
    /// A waiter for a key several holders share: woken by releases, and polling the retry
    /// pause meanwhile (a lease that ends sends nothing).
    pub(crate) fn shared_waiter(&self, key: &str) -> Waiter {
        match self.conns.hub() {
            Some(hub) => Waiter::notify(hub.shared_waiter(key, self.conns.conn())),
            None => Waiter::poll(),
        }
    }

    /// One attempt of a shared primitive: `script` with `keys`, then the token, the TTL in
    /// milliseconds and `args`, answering `{1, n}` taken or `{0, n}` busy. Armed for clean-up
    /// (`cleanup.rs`'s rules) as `hold` until its outcome is settled.
    pub(crate) async fn attempt_shared(
        &self,
        key: &str,
        opts: &LockOptions,
        hold: Hold,
        script: &LuaScript,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<Option<Lock>> {
        check_key(key)?;
        let token = self.conns.task_token();
        let conn = self.conns.conn_for(&token);
        let ms = ttl_ms(opts.ttl).to_string();
        let mut all: Vec<&[u8]> = Vec::with_capacity(2 + args.len());
        all.extend([token.as_bytes(), ms.as_bytes()]);
        all.extend_from_slice(args);
        let start = Instant::now();
        let sent = [(key, token.as_str())];
        // Armed until the outcome is settled, clean-ups included (see `cleanup`).
        let unheard = Unheard::arm(self, &sent, start, hold);
        let reply = self.conns.run_script(conn, script, keys, &all).await;
        let taken = match reply.and_then(|v| taken(&v, script.name())) {
            Ok(Some(taken)) => taken,
            Ok(None) => {
                unheard.disarm();
                return Ok(None);
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
        if let Some(e) = spent(key, opts, opts.valid_until(start)) {
            let e = self.refuse_spent(conn, key, &token, e, hold).await;
            unheard.disarm();
            return Err(e);
        }
        unheard.disarm();
        let mut lock = Lock::acquired(key, token, opts, start, taken.fencing_token);
        lock.fencing_slot = taken.slot;
        Ok(Some(lock))
    }

    /// The release of `lock`, held as `hold`; sent once more when its reply was lost, as a
    /// mutex's is ([`release_node`](Self::release_node)).
    pub(crate) async fn release_hold(&self, lock: &Lock, hold: Hold) -> Result<ReleaseOutcome> {
        let conn = self.conns.conn_for(&lock.token);
        match self.release_on(conn, &lock.key, &lock.token, hold).await {
            Err(e) if e.is_retryable() => {
                tracing::debug!(key = %lock.key, error = %e, "release failed; sending it once more");
                let again = self.release_on(conn, &lock.key, &lock.token, hold).await;
                if matches!(&again, Err(e) if e.is_retryable()) {
                    self.release_in_background(&lock.key, &lock.token, hold);
                }
                again.map(|o| resent_outcome(&e, lock, o))
            }
            other => other,
        }
    }

    /// The release script of a permit (`semaphore_release.lua`).
    pub(crate) async fn release_permit(
        &self,
        conn: &super::Conn,
        key: &str,
        token: &str,
    ) -> Result<ReleaseOutcome> {
        let channel = self.conns.release_channel(key);
        let mut args: Vec<&[u8]> = vec![token.as_bytes()];
        if let Some(c) = &channel {
            args.push(c.as_bytes());
        }
        let v = self
            .conns
            .run_script(conn, &scripts::SEMAPHORE_RELEASE, &[key], &args)
            .await?;
        release_outcome(&v)
    }

    /// An extend of a shared primitive: `script` with `keys`, the token, the TTL in
    /// milliseconds and `args`, answering `1`, `0` or `-1`; the lock's validity is renewed only
    /// while the renewed one is still ahead (as [`extend_node`](Self::extend_node)).
    pub(crate) async fn extend_hold(
        &self,
        lock: &mut Lock,
        ttl: Duration,
        script: &LuaScript,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<ExtendOutcome> {
        validate_ttl("ttl", ttl)?;
        let conn = self.conns.conn_for(&lock.token);
        let start = Instant::now();
        let ms = ttl_ms(ttl).to_string();
        let mut all: Vec<&[u8]> = vec![lock.token.as_bytes(), ms.as_bytes()];
        all.extend_from_slice(args);
        let v = self.conns.run_script(conn, script, keys, &all).await?;
        let outcome = extend_outcome(&v)?;
        if outcome.is_extended() && !lock.renew_if_valid(ttl, start) {
            tracing::debug!(key = %lock.key, "the extend's answer came after its validity ended");
            return Ok(ExtendOutcome::NotHeld);
        }
        Ok(outcome)
    }
}
