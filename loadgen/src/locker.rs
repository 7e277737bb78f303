//! What the workers drive: a small trait over "a locker", so a Redlock client (several
//! independent masters) plugs in beside the single-node [`LockClient`].

use std::future::Future;
use std::time::Duration;

use lockkit::{
    ExtendOutcome, Lock, LockClient, LockGuard, LockOptions, Redlock, ReleaseOutcome,
    WatchdogOptions,
};

/// The operations a benchmark cycle needs, as the library offers them.
pub trait Locker: Clone + Send + Sync + 'static {
    /// A held lock.
    type Lock: Send + Sync + 'static;
    /// A held lock whose watchdog renews it.
    type Guard: Send + 'static;

    /// One attempt; `Ok(None)` when busy.
    fn try_acquire(
        &self,
        key: &str,
        ttl: Duration,
    ) -> impl Future<Output = lockkit::Result<Option<Self::Lock>>> + Send;

    /// Compare-and-delete.
    fn release(
        &self,
        lock: &Self::Lock,
    ) -> impl Future<Output = lockkit::Result<ReleaseOutcome>> + Send;

    /// Compare-and-`PEXPIRE`.
    fn extend(
        &self,
        lock: &mut Self::Lock,
        ttl: Duration,
    ) -> impl Future<Output = lockkit::Result<ExtendOutcome>> + Send;

    /// Many single attempts in one round trip.
    fn acquire_many(
        &self,
        keys: &[&str],
        ttl: Duration,
    ) -> impl Future<Output = lockkit::Result<Vec<Option<Self::Lock>>>> + Send;

    /// Many releases in one round trip.
    fn release_many(
        &self,
        locks: &[Self::Lock],
    ) -> impl Future<Output = lockkit::Result<Vec<ReleaseOutcome>>> + Send;

    /// Hands a held lock to the library's watchdog.
    fn guard(&self, lock: Self::Lock, watchdog: WatchdogOptions) -> lockkit::Result<Self::Guard>;

    /// Whether the watchdog found the lock lost.
    fn guard_lost(guard: &Self::Guard) -> bool;

    /// Stops the watchdog and releases.
    fn release_guard(
        guard: Self::Guard,
    ) -> impl Future<Output = lockkit::Result<ReleaseOutcome>> + Send;

    /// `standalone`, `redlock`, ... for the report.
    fn mode(&self) -> &'static str;

    /// The library's recovery counters (NOSCRIPT re-sends, unknown-outcome clean-ups), where
    /// the locker keeps them (`None` for Redlock, whose node clients are internal).
    fn client_stats(&self) -> Option<lockkit::ClientStats> {
        None
    }
}

impl Locker for LockClient {
    type Lock = Lock;
    type Guard = LockGuard;

    fn try_acquire(
        &self,
        key: &str,
        ttl: Duration,
    ) -> impl Future<Output = lockkit::Result<Option<Lock>>> + Send {
        LockClient::try_acquire(self, key, ttl)
    }

    fn release(&self, lock: &Lock) -> impl Future<Output = lockkit::Result<ReleaseOutcome>> + Send {
        LockClient::release(self, lock)
    }

    fn extend(
        &self,
        lock: &mut Lock,
        ttl: Duration,
    ) -> impl Future<Output = lockkit::Result<ExtendOutcome>> + Send {
        LockClient::extend(self, lock, ttl)
    }

    fn acquire_many(
        &self,
        keys: &[&str],
        ttl: Duration,
    ) -> impl Future<Output = lockkit::Result<Vec<Option<Lock>>>> + Send {
        LockClient::acquire_many(self, keys, ttl)
    }

    fn release_many(
        &self,
        locks: &[Lock],
    ) -> impl Future<Output = lockkit::Result<Vec<ReleaseOutcome>>> + Send {
        LockClient::release_many(self, locks)
    }

    fn guard(&self, lock: Lock, watchdog: WatchdogOptions) -> lockkit::Result<LockGuard> {
        LockClient::guard(self, lock, Some(watchdog))
    }

    fn guard_lost(guard: &LockGuard) -> bool {
        guard.is_lost().is_some()
    }

    fn release_guard(
        guard: LockGuard,
    ) -> impl Future<Output = lockkit::Result<ReleaseOutcome>> + Send {
        guard.release()
    }

    fn mode(&self) -> &'static str {
        "standalone"
    }

    fn client_stats(&self) -> Option<lockkit::ClientStats> {
        Some(self.stats())
    }
}

/// Redlock over several independent masters (`--url` repeated). A round that failed only because
/// nodes erred (not because the lock was busy) is an error, so node failures are counted; batches
/// are not offered (the library has no pipelined Redlock batch).
impl Locker for Redlock {
    type Lock = Lock;
    type Guard = LockGuard;

    async fn try_acquire(&self, key: &str, ttl: Duration) -> lockkit::Result<Option<Lock>> {
        let attempt = Redlock::try_acquire(self, key, &LockOptions::new(ttl)).await?;
        if attempt.lock.is_some() || attempt.node_errors.is_empty() {
            return Ok(attempt.lock);
        }
        Err(lockkit::Error::QuorumNotReached {
            key: key.to_string(),
            acquired: attempt.acquired,
            needed: self.quorum(),
            errors: attempt.node_errors.len(),
            node_errors: attempt
                .node_errors
                .iter()
                .map(ToString::to_string)
                .collect(),
        })
    }

    async fn release(&self, lock: &Lock) -> lockkit::Result<ReleaseOutcome> {
        let r = Redlock::release(self, lock).await?;
        Ok(if r.released >= self.quorum() {
            ReleaseOutcome::Released
        } else if r.held_by_other > 0 {
            ReleaseOutcome::HeldByOther
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    fn extend(
        &self,
        lock: &mut Lock,
        ttl: Duration,
    ) -> impl Future<Output = lockkit::Result<ExtendOutcome>> + Send {
        Redlock::extend(self, lock, ttl)
    }

    async fn acquire_many(
        &self,
        keys: &[&str],
        ttl: Duration,
    ) -> lockkit::Result<Vec<Option<Lock>>> {
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            out.push(Locker::try_acquire(self, k, ttl).await?);
        }
        Ok(out)
    }

    async fn release_many(&self, locks: &[Lock]) -> lockkit::Result<Vec<ReleaseOutcome>> {
        let mut out = Vec::with_capacity(locks.len());
        for l in locks {
            out.push(Locker::release(self, l).await?);
        }
        Ok(out)
    }

    fn guard(&self, lock: Lock, watchdog: WatchdogOptions) -> lockkit::Result<LockGuard> {
        Redlock::guard(self, lock, Some(watchdog))
    }

    fn guard_lost(guard: &LockGuard) -> bool {
        guard.is_lost().is_some()
    }

    fn release_guard(
        guard: LockGuard,
    ) -> impl Future<Output = lockkit::Result<ReleaseOutcome>> + Send {
        guard.release()
    }

    fn mode(&self) -> &'static str {
        "redlock"
    }
}
