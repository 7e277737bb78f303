//! A held lock that renews itself: the watchdog extends it about every TTL/3 and tells the
//! holder at once when it finds the lock gone.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::Result;
use crate::lock::{ExtendOutcome, Lock, LossReason, ReleaseOutcome};
use crate::locker::Locker;
use crate::options::WatchdogOptions;
use crate::LockClient;

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
/// kept alive until then. Made by [`Locker::guard`] and [`Locker::lock`], for any locker (one
/// server by default, or a [`Redlock`](crate::Redlock)).
///
/// # The watchdog
/// Every renewal, the first included, is due no later than a tenth of the TTL before the lock's
/// validity ends, so it has time for its round trip; a guard over a lock with little validity
/// left renews at once, and one over a lock whose validity is already gone reports it lost at
/// once. The holder is told through the [`LossSignal`] no later than the validity's end, which
/// comes before the key can expire on the server (validity = TTL − drift).
///
/// Validity is measured on the monotonic clock ([`Instant`]), which on some platforms does not
/// advance while the machine is suspended: a laptop that sleeps through a TTL wakes up holding a
/// lock that expired on the server while its validity still looks positive. Do not hold locks
/// across a system suspend.
///
/// # Call `release().await`
/// End every guard with [`release`](Self::release)`.await`: it frees the key at once and says
/// whether the lock was still held. A guard that is dropped instead (a `?` on the way out, the
/// end of `main`, a cancelled future) is released as well as lockkit can, never blocking the
/// drop:
/// - inside a Tokio runtime, the drop stops the watchdog and spawns the compare-and-delete;
/// - when the runtime ends before that task has run (the guard dropped at the end of `main`, or
///   by `?` in it, on either runtime flavour), the cancelled task finishes the release on a
///   blocking thread of its own, which the runtime's shutdown waits for (at most 5 s);
/// - outside any runtime nothing can run it: the key stays held until the TTL it was last
///   given runs out (it is never extended again), and a `tracing` warning names the key.
///
/// A release that fails is logged with the key, and the key expires after its TTL.
///
/// ```no_run
/// use std::time::Duration;
/// use lockkit::{LockClient, LockOptions, Locker, WatchdogOptions};
/// # async fn demo() -> lockkit::Result<()> {
/// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
/// let guard = client.lock("lock:job", &LockOptions::new(Duration::from_secs(3))?, WatchdogOptions::new()).await?;
/// let mut lost = guard.loss_signal();
/// tokio::select! {
///     _ = tokio::time::sleep(Duration::from_secs(10)) => {}
///     reason = lost.lost() => eprintln!("{} lost: {reason:?}", guard.key()),
/// }
/// if guard.is_lost().is_none() {
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
pub struct LockGuard<L: Locker = LockClient> {
    client: L,
    shared: Arc<Shared>,
    lost_rx: watch::Receiver<Option<LossReason>>,
    /// The watchdog, or (without one) the task that signals the loss when the validity ends.
    task: Option<JoinHandle<()>>,
    watchdog: bool,
    done: bool,
}

impl<L: Locker> std::fmt::Debug for LockGuard<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lock = self.shared.snapshot();
        f.debug_struct("LockGuard")
            .field("key", &lock.key)
            .field("watchdog", &self.watchdog)
            .field("lost", &*self.lost_rx.borrow())
            .finish()
    }
}

impl<L: Locker> LockGuard<L> {
    /// Checks the watchdog options against the lock's TTL, then starts the watchdog.
    pub(crate) fn start(
        client: L,
        lock: Lock,
        watchdog: Option<WatchdogOptions>,
    ) -> Result<LockGuard<L>> {
        if let Some(w) = &watchdog {
            w.validate(lock.ttl())?;
        }
        let (tx, rx) = watch::channel(None);
        let watched = watchdog.is_some();
        if !lock.is_valid() {
            // Nothing left to renew in time: the holder must stop now.
            match watched {
                true => report_loss(&tx, client.mode(), LossReason::Expired),
                false => drop(tx.send(Some(LossReason::Expired))),
            }
            return Ok(LockGuard {
                client,
                shared: Arc::new(Shared {
                    lock: Mutex::new(lock),
                }),
                lost_rx: rx,
                task: None,
                watchdog: watched,
                done: false,
            });
        }
        let shared = Arc::new(Shared {
            lock: Mutex::new(lock),
        });
        let task = Some(match watchdog {
            Some(opts) => tokio::spawn(run_watchdog(client.clone(), Arc::clone(&shared), tx, opts)),
            // Nothing renews the lock: it is lost when its validity ends, and the holder is
            // told then (unless the guard is released or dropped first, which ends this task).
            None => {
                let until = tokio::time::Instant::from_std(shared.snapshot().valid_until);
                tokio::spawn(async move {
                    tokio::time::sleep_until(until).await;
                    let _ = tx.send(Some(LossReason::Expired));
                })
            }
        });
        Ok(LockGuard {
            client,
            shared,
            lost_rx: rx,
            task,
            watchdog: watched,
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

    /// A fenced semaphore permit's slot ([`Lock::fencing_slot`]).
    pub fn fencing_slot(&self) -> Option<u32> {
        self.shared.snapshot().fencing_slot()
    }

    /// A handle that resolves when the lock is lost: when the watchdog finds it lost, or,
    /// without a watchdog, when its validity ends.
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
    ///
    /// If this future is dropped before it finishes (a `select!` or timeout that cancelled it),
    /// the guard's drop releases the lock in the background instead.
    ///
    /// # Errors
    /// As [`Locker::release`].
    pub async fn release(mut self) -> Result<ReleaseOutcome> {
        self.stop_watchdog();
        let lock = self.shared.snapshot();
        let outcome = self.client.release(&lock).await;
        self.done = true;
        outcome
    }

    /// Stops the watchdog and hands the lock back *without* releasing it: the key keeps this
    /// holder's token until the TTL it was last given runs out, or until the lock is released
    /// by hand. For work whose outcome is unknown, where freeing the key at once would let a
    /// retry run it again.
    pub fn into_lock(mut self) -> Lock {
        self.stop_watchdog();
        self.done = true;
        self.shared.snapshot()
    }

    fn stop_watchdog(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl<L: Locker> Drop for LockGuard<L> {
    fn drop(&mut self) {
        self.stop_watchdog();
        if self.done {
            return;
        }
        let lock = self.shared.snapshot();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                key = %lock.key,
                "a guard dropped outside a Tokio runtime cannot release its lock: it stays held \
                 until its TTL runs out (end guards with `release().await`)"
            );
            return;
        };
        let release = DroppedRelease {
            client: self.client.clone(),
            lock: Some(lock),
            handle: handle.clone(),
        };
        handle.spawn(release.run());
    }
}

/// The longest a dropped guard's release may hold up the shutdown of its runtime
/// ([`DroppedRelease`]).
const SHUTDOWN_RELEASE: Duration = Duration::from_secs(5);

/// The release of a dropped guard, run as a task. A runtime that ends (the guard dropped at the
/// end of `main`, or by `?` in it) cancels its tasks before they finish: dropped with its lock
/// still to release, it hands the release to a thread the ending runtime waits for (a task
/// spawned there would only be cancelled too), with a runtime of its own
/// ([`release_as_the_runtime_ends`]).
struct DroppedRelease<L: Locker> {
    client: L,
    /// `None` once the release has run.
    lock: Option<Lock>,
    /// The runtime the guard was dropped on.
    handle: tokio::runtime::Handle,
}

impl<L: Locker> DroppedRelease<L> {
    async fn run(mut self) {
        let mut pause = Duration::from_millis(50);
        if let Some(lock) = &self.lock {
            for tries_left in (0..3).rev() {
                match self.client.release(lock).await {
                    Ok(_) => break,
                    // A runtime that is ending cancels this task at the pause (and the
                    // release goes on in `drop`); a running one tries again.
                    Err(e) if e.is_retryable() && tries_left > 0 => {
                        tokio::time::sleep(pause).await;
                        pause *= 4;
                    }
                    Err(e) => {
                        tracing::warn!(key = %lock.key, error = %e, "release of a dropped guard failed; the lock expires after its TTL");
                        break;
                    }
                }
            }
        }
        self.lock = None;
    }
}

impl<L: Locker> Drop for DroppedRelease<L> {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            release_as_the_runtime_ends(&self.handle, self.client.clone(), lock);
        }
    }
}

/// Releases `lock` while the runtime of `handle` ends, on a thread that runtime waits for, with
/// a current-thread runtime of its own, for at most [`SHUTDOWN_RELEASE`]. On a blocking thread
/// of the runtime when it still takes one (a current-thread runtime drops its tasks before it
/// shuts its blocking pool); otherwise (a multi-thread runtime's workers drop its tasks while
/// the pool shuts down, and it refuses them) on a thread of its own, which the current thread
/// (a worker, whose exit the runtime waits for) joins before it exits. The lock's connections
/// on the ending runtime fail as its tasks go, and the release connects again on its own.
fn release_as_the_runtime_ends<L: Locker>(handle: &tokio::runtime::Handle, client: L, lock: Lock) {
    let pending = PendingRelease(Some(Box::new(move || {
        let key = lock.key.clone();
        let released = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
            .and_then(|rt| {
                // Built inside: this thread's context may still be the ending runtime's.
                let release =
                    async { tokio::time::timeout(SHUTDOWN_RELEASE, client.release(&lock)).await };
                match rt.block_on(release) {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("no answer within {SHUTDOWN_RELEASE:?}")),
                }
            });
        if let Err(error) = released {
            tracing::warn!(%key, %error, "release of a guard dropped as its runtime ended failed; the lock expires after its TTL");
        }
    })));
    // Refused, the closure is dropped here, unrun: `PendingRelease`'s drop takes over.
    drop(handle.spawn_blocking(move || pending.run()));
}

/// A release to run as a runtime ends: run by [`run`](Self::run), or, dropped unrun (its
/// runtime's blocking pool refused it), on a thread of its own joined when the current thread
/// exits ([`AWAITED`]).
struct PendingRelease(Option<Box<dyn FnOnce() + Send>>);

impl PendingRelease {
    fn run(mut self) {
        if let Some(job) = self.0.take() {
            job();
        }
    }
}

impl Drop for PendingRelease {
    fn drop(&mut self) {
        let Some(job) = self.0.take() else { return };
        let thread = std::thread::Builder::new()
            .name("lockkit-release".into())
            .spawn(job);
        match thread {
            Ok(thread) => {
                let mut thread = Some(thread);
                let kept = AWAITED.try_with(|a| {
                    if let Some(t) = thread.take() {
                        a.0.borrow_mut().push(t);
                    }
                });
                // This thread is exiting already: wait here.
                if kept.is_err() {
                    if let Some(t) = thread {
                        let _ = t.join();
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "no thread to release a guard dropped as its runtime ended; the lock expires after its TTL")
            }
        }
    }
}

thread_local! {
    /// Releases of dropped guards running on threads of their own, joined when this thread
    /// exits: a multi-thread runtime's worker drops a guard's release task as the runtime ends,
    /// and the runtime waits for its workers to exit.
    static AWAITED: Awaited = Awaited::default();
}

#[derive(Default)]
struct Awaited(std::cell::RefCell<Vec<std::thread::JoinHandle<()>>>);

impl Drop for Awaited {
    fn drop(&mut self) {
        for thread in self.0.take() {
            let _ = thread.join();
        }
    }
}

/// When the next renewal is due: after `interval`, but never later than `margin` before the
/// validity ends (at once when that is already past).
fn renewal_due(
    now: Instant,
    interval: Duration,
    valid_until: Instant,
    margin: Duration,
) -> Instant {
    let latest = valid_until.checked_sub(margin).unwrap_or(now).max(now);
    (now + interval).min(latest)
}

/// Tells the holder (and the metrics) that the lock is lost.
fn report_loss(tx: &watch::Sender<Option<LossReason>>, mode: &'static str, reason: LossReason) {
    crate::metrics::watchdog_lost(mode, reason);
    let _ = tx.send(Some(reason));
}

async fn run_watchdog<L: Locker>(
    client: L,
    shared: Arc<Shared>,
    tx: watch::Sender<Option<LossReason>>,
    opts: WatchdogOptions,
) {
    let first = shared.snapshot();
    let ttl = first.ttl();
    let interval = opts.interval_for(ttl);
    // Room for a renewal's round trip before the validity ends.
    let margin = ttl / 10;
    let hold_until = opts.max_hold.map(|d| first.acquired_at + d);
    let mut next = renewal_due(Instant::now(), interval, first.valid_until, margin);
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
                    report_loss(&tx, client.mode(), LossReason::MaxHoldReached);
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
                report_loss(&tx, client.mode(), LossReason::Unreachable);
                return;
            }
        };
        match renewal {
            // A renewal read after the validity it brought had ended (a locker that does not
            // check it, or a stall between the answer and here) renews nothing: the lock is
            // lost, and no further renewal goes out for it (one arriving while the key still
            // held the token would keep it alive for a TTL after the holder was told).
            Ok(ExtendOutcome::Extended) if !lock.is_valid() => {
                tracing::warn!(key = %lock.key, "the renewal's answer came after its validity ended");
                report_loss(&tx, client.mode(), LossReason::Unreachable);
                return;
            }
            Ok(ExtendOutcome::Extended) => {
                let valid_until = lock.valid_until;
                *shared.lock.lock().unwrap_or_else(PoisonError::into_inner) = lock;
                next = renewal_due(Instant::now(), interval, valid_until, margin);
            }
            Ok(ExtendOutcome::NotHeld) => {
                report_loss(&tx, client.mode(), LossReason::Expired);
                return;
            }
            Ok(ExtendOutcome::HeldByOther) => {
                report_loss(&tx, client.mode(), LossReason::Stolen);
                return;
            }
            Err(e) => {
                let now = Instant::now();
                if now >= lock.valid_until {
                    tracing::warn!(key = %lock.key, error = %e, "lock validity ran out while renewals failed");
                    report_loss(&tx, client.mode(), LossReason::Unreachable);
                    return;
                }
                tracing::debug!(key = %lock.key, error = %e, "renewal failed; retrying soon");
                // Retry sooner than the interval, but do not pass the validity deadline unnoticed.
                next = (now + interval / 4).min(lock.valid_until);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_renewal_is_due_before_the_validity_ends() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        // Plenty of validity: the interval decides.
        assert_eq!(
            renewal_due(now, ms(100), now + ms(295), ms(30)),
            now + ms(100)
        );
        // A guard started late: due a margin before the validity ends, not after the interval.
        assert_eq!(
            renewal_due(now, ms(100), now + ms(75), ms(30)),
            now + ms(45)
        );
        // Less than the margin left: at once.
        assert_eq!(renewal_due(now, ms(100), now + ms(10), ms(30)), now);
        // An interval close to the TTL never passes the validity.
        assert_eq!(
            renewal_due(now, ms(290), now + ms(295), ms(30)),
            now + ms(265)
        );
    }
}
