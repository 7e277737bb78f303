//! The one retry loop: every acquire with retries, on one server or on Redlock, in the library,
//! the guard, the middleware and the load generator, goes through `acquire_observed`.
//!
//! Between attempts the loop waits as the locker's [`Waiter`] says
//! ([`Locker::waiter`]): polling sleeps the policy's pause; a notified waiter wakes when the key
//! is released (or its holder's TTL runs out), and queues behind earlier waiters of the same
//! client.

use std::time::{Duration, Instant};

use crate::connection::notify::Waiter;
use crate::error::{Error, Result};
use crate::lock::{FairAttempt, Lock};
use crate::locker::Locker;
use crate::options::LockOptions;
pub use crate::options::RetryOptions;

/// What one acquire attempt came to, as the retry loop reports it to an [`AcquireObserver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// The lock was taken and is handed back.
    Acquired,
    /// The lock was taken with less than `min_validity` left; it was given back and retried.
    TooLittleValidity,
    /// Someone else holds the lock.
    Busy,
    /// The attempt failed with an error of this kind (retried when retryable).
    Failed(crate::ErrorKind),
}

/// Watches the retry loop: one call per attempt, with the instant the attempt was sent and how
/// long it took. The load generator records its latency histograms this way; metrics can too.
pub trait AcquireObserver: Send {
    /// One attempt has ended.
    fn on_attempt(&mut self, outcome: AttemptOutcome, sent: Instant, latency: Duration);

    /// Asked before each wait for a next attempt: `false` ends the loop with the outcome so far
    /// (a load generator stopping its run). The loop is never cancelled mid-attempt this way, so
    /// a lock that was taken is always handed back, never left behind.
    fn keep_trying(&mut self) -> bool {
        true
    }
}

/// An observer that records nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl AcquireObserver for NoObserver {
    fn on_attempt(&mut self, _: AttemptOutcome, _: Instant, _: Duration) {}
}

/// The retry loop.
///
/// Tries `key` until it is taken with more than `min_validity` left, a non-retryable error
/// comes, or the policy gives up: then the last attempt's error if it failed, otherwise
/// [`Error::AcquireTimeout`].
pub(crate) async fn acquire_observed<L: Locker>(
    locker: &L,
    key: &str,
    opts: &LockOptions,
    observer: &mut (impl AcquireObserver + ?Sized),
) -> Result<Lock> {
    let span = tracing::debug_span!("lockkit.acquire", key);
    crate::metrics::in_span(span, acquire_loop(locker, key, opts, observer)).await
}

async fn acquire_loop<L: Locker>(
    locker: &L,
    key: &str,
    opts: &LockOptions,
    observer: &mut (impl AcquireObserver + ?Sized),
) -> Result<Lock> {
    let first = Instant::now();
    let mut attempts = 0u32;
    let (mut waiter, fair_unavailable) = waiter_for(locker, key, opts);
    let unfair;
    let opts = if fair_unavailable {
        unfair = opts.without_fair();
        &unfair
    } else {
        opts
    };
    let mut queue = FairTicket::draw(&waiter, locker, key);
    // The first attempt goes out now unless it waits behind earlier waiters first: one clock
    // read less on the uncontended path.
    let mut first_sent = Some(first);
    if waiter.is_notified() {
        first_sent = None;
        let pause = opts.retry.pause();
        // Waits are boxed (here and below): the uncontended path then carries a small future.
        Box::pin(
            waiter.before_first_attempt(pause, opts.retry.time_left(Duration::ZERO, opts.ttl)),
        )
        .await;
    }
    loop {
        attempts += 1;
        let sent = first_sent.take().unwrap_or_else(Instant::now);
        let result = match &queue.ticket {
            // Boxed, as the fair path's other awaits: a plain acquire then carries none of it.
            Some(ticket) => match Box::pin(locker.attempt_fair(key, opts, ticket)).await {
                Ok(FairAttempt::Acquired(lock)) => Ok(Some(*lock)),
                Ok(FairAttempt::Queued { place, holder_ttl }) => {
                    waiter.queued(place, holder_ttl);
                    Ok(None)
                }
                Err(e) => Err(e),
            },
            None => locker.attempt(key, opts).await,
        };
        // One clock read for the latency, the validity left and the time to acquire.
        let answered = Instant::now();
        let latency = answered - sent;
        let mut last_error = None;
        // Whether the next fair attempt needs a new ticket (see `Waiter::redraw_ticket`).
        let mut redraw = false;
        match result {
            Ok(Some(lock)) if lock.validity_left_at(answered) > opts.validity.min => {
                queue.taken();
                observer.on_attempt(AttemptOutcome::Acquired, sent, latency);
                crate::metrics::acquired(locker.mode(), answered - first);
                return Ok(lock);
            }
            Ok(Some(lock)) => {
                observer.on_attempt(AttemptOutcome::TooLittleValidity, sent, latency);
                // Too slow a round trip: the lock is (nearly) worthless; give it back. A release
                // that failed goes on in the background with the lock's token: a fair acquire
                // goes on under a new ticket (taking the lock took it out of the queue anyway).
                // Armed until it is done: dropped midway, it goes on in the background.
                let giving = GiveBack(Some((locker.clone(), lock)));
                Box::pin(giving.run()).await;
                redraw = true;
            }
            Ok(None) => observer.on_attempt(AttemptOutcome::Busy, sent, latency),
            Err(e) if e.kind() == crate::ErrorKind::TooLittleValidity => {
                // Given back already by the attempt (see `Ok(Some(lock))` above for the rest).
                observer.on_attempt(AttemptOutcome::TooLittleValidity, sent, latency);
                redraw = true;
            }
            Err(e) => {
                observer.on_attempt(AttemptOutcome::Failed(e.kind()), sent, latency);
                if !e.is_retryable() {
                    return Err(e);
                }
                tracing::debug!(key, error = %e, "acquire attempt failed; retrying");
                redraw = e.is_unknown_outcome();
                last_error = Some(e);
            }
        }
        if redraw {
            queue.redraw(&mut waiter, locker, key);
        }
        let elapsed = first.elapsed();
        let pause = opts
            .retry
            .next_pause(attempts, elapsed)
            .filter(|_| observer.keep_trying());
        let Some(pause) = pause else {
            if let Some(p) = queue.place.take() {
                let left = opts
                    .retry
                    .deadline
                    .map(|d| d.saturating_sub(first.elapsed()));
                Box::pin(p.leave_within(left)).await;
            }
            return Err(last_error.unwrap_or_else(|| Error::AcquireTimeout {
                key: key.to_string(),
                attempts,
                elapsed,
            }));
        };
        Box::pin(waiter.wait(pause, opts.retry.time_left(first.elapsed(), opts.ttl))).await;
    }
}

/// The waiter for an acquire of `key`, and whether the fair mode asked for is unavailable on
/// this locker (the acquire then goes on without it).
fn waiter_for<L: Locker>(locker: &L, key: &str, opts: &LockOptions) -> (Waiter, bool) {
    // A single attempt never waits: not even behind the client's earlier waiters for the key.
    let waiter = if opts.retry.max_attempts == Some(1) {
        Waiter::poll()
    } else {
        locker.waiter(key)
    };
    match (opts.fair.on, locker.fair_unavailable()) {
        (true, None) => (waiter.into_fair(opts.fair.lease), false),
        (true, Some(why)) => {
            tracing::debug!(key, why, "fair mode unavailable; acquiring without it");
            (waiter, true)
        }
        (false, _) => (waiter, false),
    }
}

/// A fair acquire's ticket and its place in the queue; neither without fair mode.
struct FairTicket<L: Locker> {
    ticket: Option<String>,
    place: Option<QueuePlace<L>>,
}

impl<L: Locker> FairTicket<L> {
    /// The waiter's ticket (if it is fair), and a place in the queue under it.
    fn draw(waiter: &Waiter, locker: &L, key: &str) -> Self {
        let ticket = waiter.ticket().map(str::to_owned);
        let place = ticket
            .as_deref()
            .map(|t| QueuePlace::new(locker.clone(), key, t));
        FairTicket { ticket, place }
    }

    /// The lock was taken: taking it took the ticket out of the queue.
    fn taken(&mut self) {
        if let Some(p) = &mut self.place {
            p.queued = false;
        }
    }

    /// A new ticket for the next attempt (see `Waiter::redraw_ticket`), if fair; the old place
    /// is left in the background (`QueuePlace`'s drop).
    fn redraw(&mut self, waiter: &mut Waiter, locker: &L, key: &str) {
        if self.ticket.is_none() {
            return;
        }
        drop(self.place.take());
        waiter.redraw_ticket();
        *self = FairTicket::draw(waiter, locker, key);
    }
}

/// A fair acquire's place in the queue. Given up when the acquire gives up; when the acquire
/// is dropped midway (its future cancelled), given up in the background, so the waiters behind
/// it do not wait out its lease, nor the TTL of a lock its last attempt took unheard (leaving
/// releases a lock held under the ticket).
struct QueuePlace<L: Locker> {
    locker: L,
    key: String,
    ticket: String,
    /// Possibly in the queue (cleared when the lock was taken).
    queued: bool,
}

impl<L: Locker> QueuePlace<L> {
    fn new(locker: L, key: &str, ticket: &str) -> Self {
        QueuePlace {
            locker,
            key: key.to_string(),
            ticket: ticket.to_string(),
            queued: true,
        }
    }

    /// Leaves, waiting at most `bound` (what is left of the deadline): against a server that
    /// does not answer, the leave must not carry the acquire past its deadline; it goes on in
    /// the background, and the place ends with its lease at the latest.
    async fn leave_within(self, bound: Option<Duration>) {
        let (Some(bound), Ok(runtime)) = (bound, tokio::runtime::Handle::try_current()) else {
            return self.leave().await;
        };
        let leaving = runtime.spawn(self.leave());
        if tokio::time::timeout(bound, leaving).await.is_err() {
            tracing::debug!("leaving the fair queue goes on past the deadline, in the background");
        }
    }

    async fn leave(mut self) {
        self.queued = false;
        if let Err(e) = self.locker.leave_queue(&self.key, &self.ticket).await {
            tracing::debug!(key = %self.key, error = %e, "leaving the fair queue failed; the place ends with its lease");
        }
    }
}

impl<L: Locker> Drop for QueuePlace<L> {
    fn drop(&mut self) {
        if !self.queued {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (locker, key, ticket) = (
            self.locker.clone(),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.ticket),
        );
        runtime.spawn(async move {
            let _ = locker.leave_queue(&key, &ticket).await;
        });
    }
}

/// A lock the retry loop gives back (taken with too little validity), the clean-up rule of
/// `client/cleanup.rs` for any locker: armed until the release is done; dropped midway (the
/// acquire's future dropped), the release goes on in the background, or the lock would stay
/// held for its whole TTL.
struct GiveBack<L: Locker>(Option<(L, Lock)>);

impl<L: Locker> GiveBack<L> {
    async fn run(mut self) {
        if let Some((locker, lock)) = &self.0 {
            if let Err(e) = locker.release(lock).await {
                tracing::debug!(key = %lock.key, error = %e, "giving back a lock with too little validity failed");
            }
        }
        self.0 = None;
    }
}

impl<L: Locker> Drop for GiveBack<L> {
    fn drop(&mut self) {
        let Some((locker, lock)) = self.0.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %lock.key, "no runtime to give back a lock on: it stays held until its TTL");
            return;
        };
        runtime.spawn(async move {
            let _ = locker.release(&lock).await;
        });
    }
}
