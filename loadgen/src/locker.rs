//! The locker every worker drives: the target's own ([`LockClient`] or [`lockkit::Redlock`]),
//! passed through, plus the two things the bench adds to it.
//! - `--fencing`: each attempt is the primitive's fenced one ([`Fencer`]), so the lock carries
//!   a fencing token (and a semaphore's permit its slot); the retry loop, the guard and the
//!   watchdog stay the library's.
//! - `--primitive rwlock`: each cycle reads or writes ([`BenchLocker::set_writing`]); its
//!   attempts, extends and release go to that side of the [`RwLock`].
//! - A paused holder (`--faults holder-pause`) is a paused process: its renewals do not go out
//!   until it runs again, so its watchdog cannot keep the lock alive meanwhile.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lockkit::{
    ClientStats, ExtendOutcome, Lock, LockClient, LockOptions, Locker, ReleaseOutcome, RwLock,
    RwLocker, Semaphore,
};

/// With `--fencing`: what draws the fencing tokens, one per primitive.
#[derive(Debug, Clone)]
pub enum Fencer {
    /// A mutex: [`LockClient::try_acquire_fenced`], one counter per key.
    Mutex(LockClient),
    /// A semaphore: [`Semaphore::try_acquire_fenced`], a counter per permit slot.
    Semaphore(Semaphore),
    /// A read-write lock: [`RwLocker::try_acquire_fenced`] on the side the cycle takes, one
    /// counter per key for readers and writers.
    RwLock,
}

/// One worker's view of the target.
#[derive(Debug, Clone)]
pub struct BenchLocker<L> {
    inner: L,
    /// With `--fencing`: what draws the tokens, on one server (Redlock cannot).
    fenced: Option<Fencer>,
    /// Where the fencing counters live: `PREFIXfence:{KEY}` (same cluster slot as KEY; a hash
    /// of the slots' counters for a semaphore).
    fence_prefix: Arc<str>,
    /// Until when this worker's process is "paused" (no renewal goes out).
    paused_until: Arc<Mutex<Option<Instant>>>,
    /// `--primitive rwlock`: the lock, whose side this worker's cycle takes instead of `inner`.
    rw: Option<RwLock>,
    /// This worker's cycle writes (rwlock).
    writing: Arc<AtomicBool>,
}

impl<L: Locker> BenchLocker<L> {
    /// Wraps `inner`; with `fenced`, every attempt draws a fencing token from it.
    pub fn new(inner: L, fenced: Option<Fencer>, key_prefix: &str) -> Self {
        BenchLocker {
            inner,
            fenced,
            fence_prefix: format!("{key_prefix}fence:").into(),
            paused_until: Arc::new(Mutex::new(None)),
            rw: None,
            writing: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Takes the read or write side of `rw` instead of `inner` (`--primitive rwlock`).
    pub fn with_rwlock(mut self, rw: Option<RwLock>) -> Self {
        self.rw = rw;
        self
    }

    /// Whether this is a read-write lock's bench.
    pub fn is_rwlock(&self) -> bool {
        self.rw.is_some()
    }

    /// The next cycle writes (`true`) or reads; set only between cycles.
    pub fn set_writing(&self, write: bool) {
        self.writing.store(write, Ordering::Relaxed);
    }

    /// Whether this cycle's hold is exclusive: a writer's, or any hold of another primitive.
    pub fn is_writing(&self) -> bool {
        self.rw.is_none() || self.writing.load(Ordering::Relaxed)
    }

    /// The fencing counter of `key`: `PREFIXfence:{KEY}`.
    fn fence_key(&self, key: &str) -> String {
        format!("{}{{{key}}}", self.fence_prefix)
    }

    fn side(&self) -> Option<RwLocker> {
        self.rw.as_ref().map(|rw| {
            if self.writing.load(Ordering::Relaxed) {
                rw.writer()
            } else {
                rw.reader()
            }
        })
    }

    /// Stops this worker for `d` as a GC or VM pause would: the calling task does not run and
    /// the renewals of its locks wait until the pause is over. Not cut short by the run's end.
    pub async fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        *self.paused() = Some(until);
        tokio::time::sleep_until(until.into()).await;
        *self.paused() = None;
    }

    fn paused(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<L: Locker> Locker for BenchLocker<L> {
    async fn attempt(&self, key: &str, opts: &LockOptions) -> lockkit::Result<Option<Lock>> {
        // Boxed: inline, the rwlock and the fenced paths would enlarge every attempt's future.
        if let Some(side) = self.side() {
            if self.fenced.is_some() {
                let fence_key = self.fence_key(key);
                return Box::pin(side.try_acquire_fenced_with(key, &fence_key, opts)).await;
            }
            return Box::pin(side.attempt(key, opts)).await;
        }
        match &self.fenced {
            Some(Fencer::Mutex(client)) => {
                let fence_key = self.fence_key(key);
                Box::pin(client.try_acquire_fenced_with(key, &fence_key, opts)).await
            }
            Some(Fencer::Semaphore(sem)) => {
                let fence_key = self.fence_key(key);
                Box::pin(sem.try_acquire_fenced_with(key, &fence_key, opts)).await
            }
            Some(Fencer::RwLock) | None => self.inner.attempt(key, opts).await,
        }
    }

    async fn release(&self, lock: &Lock) -> lockkit::Result<ReleaseOutcome> {
        match self.side() {
            Some(side) => Box::pin(side.release(lock)).await,
            None => self.inner.release(lock).await,
        }
    }

    async fn extend(&self, lock: &mut Lock, ttl: Duration) -> lockkit::Result<ExtendOutcome> {
        let until = *self.paused();
        if let Some(until) = until {
            tokio::time::sleep_until(until.into()).await;
        }
        match self.side() {
            Some(side) => Box::pin(side.extend(lock, ttl)).await,
            None => self.inner.extend(lock, ttl).await,
        }
    }

    fn acquire_many(
        &self,
        keys: &[&str],
        ttl: Duration,
    ) -> impl Future<Output = lockkit::Result<Vec<Option<Lock>>>> + Send {
        // Batches are refused with --fencing and holder pauses: pass straight through.
        self.inner.acquire_many(keys, ttl)
    }

    fn release_many(
        &self,
        locks: &[Lock],
    ) -> impl Future<Output = lockkit::Result<Vec<ReleaseOutcome>>> + Send {
        self.inner.release_many(locks)
    }

    fn mode(&self) -> &'static str {
        self.inner.mode()
    }

    fn stats(&self) -> ClientStats {
        self.inner.stats()
    }

    fn waiter(&self, key: &str) -> lockkit::Waiter {
        match self.side() {
            Some(side) => side.waiter(key),
            None => self.inner.waiter(key),
        }
    }

    fn fair_unavailable(&self) -> Option<&'static str> {
        self.inner.fair_unavailable()
    }

    fn attempt_fair(
        &self,
        key: &str,
        opts: &LockOptions,
        ticket: &str,
    ) -> impl Future<Output = lockkit::Result<lockkit::FairAttempt>> + Send {
        // --wait fair with --fencing was refused by BenchConfig::validate.
        self.inner.attempt_fair(key, opts, ticket)
    }

    fn leave_queue(
        &self,
        key: &str,
        ticket: &str,
    ) -> impl Future<Output = lockkit::Result<()>> + Send {
        self.inner.leave_queue(key, ticket)
    }
}
