//! A held lock that renews itself: the watchdog extends it about every TTL/3 and tells the
//! holder at once when it finds the lock gone.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::Result;
use crate::lock::{ExtendOutcome, Lock, LockClient, ReleaseOutcome};
use crate::options::WatchdogOptions;
use crate::redlock::Redlock;

/// Why a guarded lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// An extend found the key gone (it expired, or was deleted behind our back).
    Expired,
    /// An extend found another token in the key.
    Stolen,
    /// Renewals kept failing (server unreachable) until the lock's validity ran out.
    Unreachable,
    /// The watchdog stopped renewing at `max_hold` and the lock ran out its TTL.
    MaxHoldReached,
}

/// A clonable handle that resolves when the guarded lock is lost; hand it to the guarded work
/// and `select!` on it to stop writing the moment the lock is gone.
#[derive(Debug, Clone)]
pub struct LossSignal {
    rx: watch::Receiver<Option<LossReason>>,
}

impl LossSignal {
    /// Waits until the lock is lost and says why. Never resolves while the lock is held; if the
    /// guard is released or dropped first, it never resolves at all (the lock was not *lost*).
    pub async fn lost(&mut self) -> LossReason {
        loop {
            if let Some(reason) = *self.rx.borrow_and_update() {
                return reason;
            }
            if self.rx.changed().await.is_err() {
                // Sender gone without a loss: the guard ended normally.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The loss, if it has happened.
    pub fn is_lost(&self) -> Option<LossReason> {
        *self.rx.borrow()
    }
}

/// Who renews and releases a guarded lock: one server, or a Redlock quorum.
#[derive(Debug, Clone)]
pub(crate) enum Holder {
    Single(LockClient),
    Redlock(Redlock),
}

impl Holder {
    async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<ExtendOutcome> {
        match self {
            Holder::Single(c) => c.extend(lock, ttl).await,
            Holder::Redlock(r) => r.extend(lock, ttl).await,
        }
    }

    async fn release(&self, lock: &Lock) -> Result<ReleaseOutcome> {
        match self {
            Holder::Single(c) => c.release(lock).await,
            Holder::Redlock(r) => {
                let out = r.release(lock).await?;
                Ok(if out.released > 0 {
                    ReleaseOutcome::Released
                } else if out.held_by_other > 0 {
                    ReleaseOutcome::HeldByOther
                } else {
                    ReleaseOutcome::NotHeld
                })
            }
        }
    }
}

struct Shared {
    lock: Mutex<Lock>,
}

impl Shared {
    fn snapshot(&self) -> Lock {
        self.lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A lock that is released when you call [`release`](Self::release) and, with a watchdog,
/// kept alive until then.
///
/// # Dropping without `release`
/// Drop never blocks: it stops the watchdog and, when called inside a Tokio runtime, spawns a
/// best-effort compare-and-delete in the background. Outside a runtime (or if that release fails)
/// the key simply expires after the TTL it was last given; it is never extended again.
pub struct LockGuard {
    client: Holder,
    shared: Arc<Shared>,
    lost_rx: watch::Receiver<Option<LossReason>>,
    task: Option<JoinHandle<()>>,
    done: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lock = self.shared.snapshot();
        f.debug_struct("LockGuard")
            .field("key", &lock.key)
            .field("watchdog", &self.task.is_some())
            .field("lost", &*self.lost_rx.borrow())
            .finish()
    }
}

impl LockGuard {
    /// Checks the watchdog options against the lock's TTL, then starts the watchdog.
    pub(crate) fn start(
        client: Holder,
        lock: Lock,
        watchdog: Option<WatchdogOptions>,
    ) -> Result<LockGuard> {
        if let Some(w) = &watchdog {
            w.validate(lock.ttl)?;
        }
        let (tx, rx) = watch::channel(None);
        let shared = Arc::new(Shared {
            lock: Mutex::new(lock),
        });
        let task = watchdog
            .map(|opts| tokio::spawn(run_watchdog(client.clone(), Arc::clone(&shared), tx, opts)));
        Ok(LockGuard {
            client,
            shared,
            lost_rx: rx,
            task,
            done: false,
        })
    }

    /// The lock as of now (validity updated by every successful renewal).
    pub fn lock(&self) -> Lock {
        self.shared.snapshot()
    }

    /// The lock key.
    pub fn key(&self) -> String {
        self.shared.snapshot().key
    }

    /// The fencing token, if the lock was acquired with one.
    pub fn fencing_token(&self) -> Option<u64> {
        self.shared.snapshot().fencing_token
    }

    /// A handle that resolves when the watchdog finds the lock lost.
    pub fn loss_signal(&self) -> LossSignal {
        LossSignal {
            rx: self.lost_rx.clone(),
        }
    }

    /// Waits until the lock is lost (see [`LossSignal::lost`]).
    pub async fn lost(&self) -> LossReason {
        self.loss_signal().lost().await
    }

    /// The loss, if the watchdog has seen one.
    pub fn is_lost(&self) -> Option<LossReason> {
        *self.lost_rx.borrow()
    }

    /// Stops the watchdog and releases the lock (compare-and-delete).
    pub async fn release(mut self) -> Result<ReleaseOutcome> {
        self.stop_watchdog();
        self.done = true;
        let lock = self.shared.snapshot();
        self.client.release(&lock).await
    }

    fn stop_watchdog(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.stop_watchdog();
        if self.done {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            let lock = self.shared.snapshot();
            handle.spawn(async move {
                if let Err(e) = client.release(&lock).await {
                    tracing::warn!(key = %lock.key, error = %e, "release of a dropped guard failed; the lock expires after its TTL");
                }
            });
        }
    }
}

async fn run_watchdog(
    client: Holder,
    shared: Arc<Shared>,
    tx: watch::Sender<Option<LossReason>>,
    opts: WatchdogOptions,
) {
    let first = shared.snapshot();
    let ttl = first.ttl;
    let interval = opts.interval_for(ttl);
    let hold_until = opts.max_hold.map(|d| first.acquired_at + d);
    let mut next = Instant::now() + interval;
    // Set once a renewal was shortened to end at the max-hold bound: there is no next one.
    let mut at_bound = false;
    loop {
        tokio::time::sleep_until(next.into()).await;
        let mut lock = shared.snapshot();
        // Under max_hold, the last renewal is shortened so the key expires at the bound.
        let this_ttl = match hold_until {
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now());
                if at_bound || left < Duration::from_millis(1) {
                    tokio::time::sleep_until(lock.valid_until.into()).await;
                    let _ = tx.send(Some(LossReason::MaxHoldReached));
                    return;
                }
                at_bound = left < ttl;
                left.min(ttl)
            }
            None => ttl,
        };
        // A renewal cannot take longer than the validity left: once that is gone the lock must be
        // presumed lost, whatever the response timeout says.
        let left = lock.valid_until.saturating_duration_since(Instant::now());
        let renewal = match tokio::time::timeout(left, client.extend(&mut lock, this_ttl)).await {
            Ok(r) => r,
            Err(_) => {
                tracing::warn!(key = %lock.key, "no renewal answer before the validity ran out");
                let _ = tx.send(Some(LossReason::Unreachable));
                return;
            }
        };
        match renewal {
            Ok(ExtendOutcome::Extended) => {
                let valid_until = lock.valid_until;
                *shared.lock.lock().unwrap_or_else(PoisonError::into_inner) = lock;
                // Never later than a tenth of the TTL before the validity ends, so an interval
                // chosen close to the TTL still leaves the renewal time for its round trip.
                next = (Instant::now() + interval)
                    .min(valid_until.checked_sub(ttl / 10).unwrap_or(valid_until));
            }
            Ok(ExtendOutcome::NotHeld) => {
                let _ = tx.send(Some(LossReason::Expired));
                return;
            }
            Ok(ExtendOutcome::HeldByOther) => {
                let _ = tx.send(Some(LossReason::Stolen));
                return;
            }
            Err(e) => {
                let now = Instant::now();
                if now >= lock.valid_until {
                    tracing::warn!(key = %lock.key, error = %e, "lock validity ran out while renewals failed");
                    let _ = tx.send(Some(LossReason::Unreachable));
                    return;
                }
                tracing::debug!(key = %lock.key, error = %e, "renewal failed; retrying soon");
                // Retry sooner than the interval, but do not pass the validity deadline unnoticed.
                next = (now + interval / 4).min(lock.valid_until);
            }
        }
    }
}
