//! The one abstraction over "something that takes locks": one server ([`LockClient`]),
//! Redlock over several ([`Redlock`]), or whatever comes later.
//!
//! A locker implements one attempt, release and extend; everything built on top (the retry loop,
//! the guard and its watchdog, batches, the middleware, the load generator) is written once, here
//! and in [`crate::retry`], and works for every locker.
//!
//! [`LockClient`]: crate::LockClient
//! [`Redlock`]: crate::Redlock

use std::future::Future;
use std::time::Duration;

use crate::connection::notify::Waiter;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::lock::{ExtendOutcome, FairAttempt, Lock, ReleaseOutcome};
use crate::options::{LockOptions, WatchdogOptions};
use crate::retry::{self, AcquireObserver, NoObserver};
use crate::ClientStats;

/// Takes, renews and gives back locks. Implemented by [`LockClient`](crate::LockClient) (one
/// server, a proxy or a cluster) and [`Redlock`](crate::Redlock) (a quorum of independent
/// servers). Bring it into scope (`use lockkit::Locker;`) to call its methods.
///
/// ```no_run
/// use std::time::Duration;
/// use lockkit::{LockClient, LockOptions, Locker};
///
/// // Works the same with a `Redlock`.
/// async fn once_per_tick<L: Locker>(locker: &L) -> lockkit::Result<()> {
///     let opts = LockOptions::new(Duration::from_secs(10))?;
///     let lock = locker.acquire("cron:nightly", &opts).await?;
///     // ... the job, inside lock.remaining_validity() ...
///     locker.release(&lock).await?;
///     Ok(())
/// }
/// # async fn demo() -> lockkit::Result<()> {
/// once_per_tick(&LockClient::connect("redis://127.0.0.1:6379").await?).await
/// # }
/// ```
pub trait Locker: Clone + Send + Sync + 'static {
    /// One acquire attempt: `Ok(None)` when someone else holds
    /// the lock. Redlock answers `Err(QuorumNotReached)` when node failures, not a busy lock,
    /// kept it from a quorum.
    ///
    /// # Errors
    /// A Redis error, a timeout, or (Redlock) a quorum lost to node failures.
    fn attempt(
        &self,
        key: &str,
        opts: &LockOptions,
    ) -> impl Future<Output = Result<Option<Lock>>> + Send;

    /// Releases the lock if it is still ours (compare-and-delete, never a bare `DEL`).
    ///
    /// [`ReleaseOutcome::Released`] means the lock was still ours when it was released: on one
    /// server, the key held our token; on Redlock, a quorum of nodes did. A release whose reply
    /// was lost (dropped connection, timeout) is sent once more; when that finds our token gone
    /// (the key free, or taken since by a waiter the first attempt woke) while the lock is still
    /// valid, the key cannot have expired and it is `Released` too.
    ///
    /// # Errors
    /// A Redis error or timeout; the outcome is then unknown (the key expires after its TTL).
    fn release(&self, lock: &Lock) -> impl Future<Output = Result<ReleaseOutcome>> + Send;

    /// Resets the lock's TTL to `ttl` if it is still ours (compare-and-`PEXPIRE`); on success the
    /// lock's validity is recomputed from this request's send time with the drift allowance of
    /// the options the lock was taken with. Never [`Extended`](ExtendOutcome::Extended) for a
    /// lock whose renewed validity had ended by the time the answer came back (a reply held up
    /// on the network): that is [`NotHeld`](ExtendOutcome::NotHeld), the lock left as it was.
    ///
    /// # Errors
    /// A Redis error or timeout, or a TTL out of range ([`Error::InvalidOptions`](crate::Error)).
    fn extend(
        &self,
        lock: &mut Lock,
        ttl: Duration,
    ) -> impl Future<Output = Result<ExtendOutcome>> + Send;

    /// Tries every key once: `Some(lock)` where taken, `None` where busy, in order. The default
    /// tries them one after the other; [`LockClient`](crate::LockClient) pipelines them all in one
    /// round trip. When an attempt fails, the locks already taken are released before the error
    /// is returned: a batch never leaks.
    ///
    /// # Errors
    /// Bad options or keys; the first attempt that failed.
    fn acquire_many(
        &self,
        keys: &[&str],
        ttl: Duration,
    ) -> impl Future<Output = Result<Vec<Option<Lock>>>> + Send {
        async move {
            let opts = LockOptions::new(ttl)?;
            let mut out = Vec::with_capacity(keys.len());
            for key in keys {
                match self.attempt(key, &opts).await {
                    Ok(lock) => out.push(lock),
                    Err(e) => {
                        let taken: Vec<Lock> = out.into_iter().flatten().collect();
                        let _ = self.release_many(&taken).await;
                        return Err(e);
                    }
                }
            }
            Ok(out)
        }
    }

    /// Releases every lock; one outcome per lock, in order. The default releases them one after
    /// the other (all of them, even after a failure); [`LockClient`](crate::LockClient) pipelines
    /// them in one round trip.
    ///
    /// # Errors
    /// The first release that failed, after all were tried.
    fn release_many(
        &self,
        locks: &[Lock],
    ) -> impl Future<Output = Result<Vec<ReleaseOutcome>>> + Send {
        async move {
            let mut out = Vec::with_capacity(locks.len());
            let mut first_error = None;
            for lock in locks {
                match self.release(lock).await {
                    Ok(o) => out.push(o),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            first_error.map_or(Ok(out), Err)
        }
    }

    /// `standalone`, `cluster`, `proxy` or `redlock`: what this locker talks to, for reports.
    fn mode(&self) -> &'static str;

    /// What the locker has counted so far (NOSCRIPT recoveries, unknown-outcome clean-ups).
    fn stats(&self) -> ClientStats {
        ClientStats::default()
    }

    /// Why this locker keeps no fair queue ([`LockOptionsBuilder::fair`](crate::LockOptionsBuilder::fair)), or `None` when it does. Where
    /// it does not, acquires in fair mode fall back to ordinary attempts (waiting as
    /// [`waiter`](Self::waiter) says) and this is the reason to show.
    ///
    /// ```no_run
    /// use lockkit::{LockClient, Locker};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// assert_eq!(client.fair_unavailable(), None);
    /// # Ok(()) }
    /// ```
    fn fair_unavailable(&self) -> Option<&'static str> {
        Some("this locker keeps no fair queue")
    }

    /// One attempt in `key`'s fair queue under `ticket` (the acquire's waiter ticket, which
    /// becomes the lock's token): taken when free and `ticket`'s turn, else queued (once) with
    /// its lease renewed. A lock already held under `ticket` is handed back with the validity
    /// its key has left. Options already validated. The default, for lockers without a queue,
    /// is one ordinary [`attempt`](Self::attempt).
    ///
    /// # Errors
    /// As [`attempt`](Self::attempt); in a cluster, a key whose queue can not share its slot.
    fn attempt_fair(
        &self,
        key: &str,
        opts: &LockOptions,
        ticket: &str,
    ) -> impl Future<Output = Result<FairAttempt>> + Send {
        let _ = ticket;
        async move {
            Ok(match self.attempt(key, opts).await? {
                Some(lock) => FairAttempt::Acquired(Box::new(lock)),
                None => FairAttempt::Queued {
                    place: 0,
                    holder_ttl: None,
                },
            })
        }
    }

    /// Takes `ticket` out of `key`'s fair queue: an acquire that gave up. The next waiter is
    /// woken when `ticket` was the head. A lock held under `ticket` is released too: the
    /// acquire never handed it back (its attempt's reply was lost, or its future dropped
    /// mid-attempt). The default (no queue) does nothing.
    ///
    /// # Errors
    /// A Redis error or timeout (the place then ends with its lease).
    fn leave_queue(&self, key: &str, ticket: &str) -> impl Future<Output = Result<()>> + Send {
        let _ = (key, ticket);
        async { Ok(()) }
    }

    /// How an acquire of `key` waits between attempts. The default polls (sleeps the retry
    /// pause); [`LockClient`](crate::LockClient) on one server is woken by the release instead
    /// (see [`WaitMode`](crate::WaitMode)).
    fn waiter(&self, key: &str) -> Waiter {
        let _ = key;
        Waiter::poll()
    }

    /// Acquires `key`, retrying a busy lock as `opts.retry` says (delay + jitter until a deadline
    /// or attempt count). A lock that would come back with less than `opts.min_validity` left is
    /// released and tried again, so a lock handed back is never already expired.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockClient, LockOptions, Locker, RetryOptions};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// let opts = LockOptions::builder(Duration::from_secs(5))
    ///     .retry(RetryOptions::new().deadline(Some(Duration::from_secs(2))))
    ///     .build()?;
    /// let lock = client.acquire("lock:order:42", &opts).await?;
    /// client.release(&lock).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::AcquireTimeout`](crate::Error::AcquireTimeout) when the lock stayed busy; the last
    /// attempt's error when attempts kept failing; a non-retryable error at once.
    fn acquire(&self, key: &str, opts: &LockOptions) -> impl Future<Output = Result<Lock>> + Send {
        async move { retry::acquire_observed(self, key, opts, &mut NoObserver).await }
    }

    /// [`acquire`](Self::acquire), telling `observer` about every attempt (its outcome, send
    /// time and latency): for latency histograms, metrics, or counting attempts per lock.
    ///
    /// ```no_run
    /// use std::time::{Duration, Instant};
    /// use lockkit::{AcquireObserver, AttemptOutcome, LockClient, LockOptions, Locker};
    ///
    /// #[derive(Default)]
    /// struct Count(u32);
    /// impl AcquireObserver for Count {
    ///     fn on_attempt(&mut self, _: AttemptOutcome, _: Instant, _: Duration) { self.0 += 1 }
    /// }
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// let mut attempts = Count::default();
    /// let opts = LockOptions::new(Duration::from_secs(5))?;
    /// let lock = client.acquire_observed("lock:a", &opts, &mut attempts).await?;
    /// println!("took {} attempts", attempts.0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    fn acquire_observed<O: AcquireObserver + ?Sized>(
        &self,
        key: &str,
        opts: &LockOptions,
        observer: &mut O,
    ) -> impl Future<Output = Result<Lock>> + Send {
        retry::acquire_observed(self, key, opts, observer)
    }

    /// Wraps an acquired lock in a guard; with `watchdog`, the guard renews the lock about every
    /// TTL/3 until it is released or dropped and tells the holder at once when it is lost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockClient, Locker, WatchdogOptions};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// if let Some(lock) = client.try_acquire("lock:a", Duration::from_secs(3)).await? {
    ///     let guard = client.guard(lock, Some(WatchdogOptions::new()))?;
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOptions`](crate::Error::InvalidOptions) when the watchdog options do not
    /// fit the lock's TTL.
    fn guard(&self, lock: Lock, watchdog: Option<WatchdogOptions>) -> Result<LockGuard<Self>> {
        LockGuard::start(self.clone(), lock, watchdog)
    }

    /// Acquires (with retries, as [`acquire`](Self::acquire)) and guards the lock with a watchdog.
    /// The watchdog options are checked before anything is acquired.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockClient, LockOptions, Locker, WatchdogOptions};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// let opts = LockOptions::new(Duration::from_secs(5))?;
    /// let guard = client.lock("lock:report", &opts, WatchdogOptions::new()).await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire) and [`guard`](Self::guard).
    fn lock(
        &self,
        key: &str,
        opts: &LockOptions,
        watchdog: WatchdogOptions,
    ) -> impl Future<Output = Result<LockGuard<Self>>> + Send {
        async move {
            watchdog.validate(opts.ttl)?;
            let lock = self.acquire(key, opts).await?;
            self.guard(lock, Some(watchdog))
        }
    }
}
