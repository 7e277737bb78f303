//! The one retry loop: every acquire with retries, on one server or on Redlock, in the library,
//! the guard, the middleware and the load generator, goes through `acquire_observed`.
//!
//! Between attempts the loop waits as the locker's [`Waiter`] says
//! ([`Locker::waiter`]): polling sleeps the policy's pause; a notified waiter wakes when the key
//! is released (or its holder's TTL runs out), and queues behind earlier waiters of the same
//! client.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::fair::FairAttempt;
use crate::lock::Lock;
use crate::locker::Locker;
use crate::options::LockOptions;
use crate::wait::Waiter;

/// How [`acquire`](crate::Locker::acquire) retries a busy lock: a delay plus random jitter
/// between attempts, until a deadline and/or an attempt count runs out.
///
/// ```
/// use std::time::Duration;
/// use lockkit::RetryOptions;
/// let r = RetryOptions::new()
///     .delay(Duration::from_millis(20))
///     .jitter(Duration::from_millis(10))
///     .max_attempts(Some(5))
///     .deadline(Some(Duration::from_secs(1)));
/// let p = r.pause();
/// assert!(p >= Duration::from_millis(20) && p <= Duration::from_millis(30));
/// assert!(r.next_pause(5, Duration::ZERO).is_none()); // attempts used up
/// assert_eq!(RetryOptions::none().next_pause(1, Duration::ZERO), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use]
pub struct RetryOptions {
    pub(crate) delay: Duration,
    pub(crate) jitter: Duration,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) deadline: Option<Duration>,
}

impl Default for RetryOptions {
    fn default() -> Self {
        RetryOptions {
            delay: Duration::from_millis(50),
            jitter: Duration::from_millis(50),
            max_attempts: None,
            deadline: Some(Duration::from_secs(10)),
        }
    }
}

impl RetryOptions {
    /// 50 ms delay + up to 50 ms jitter, for at most 10 s.
    pub fn new() -> Self {
        Self::default()
    }

    /// A single attempt, no retry.
    pub fn none() -> Self {
        RetryOptions {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            max_attempts: Some(1),
            deadline: None,
        }
    }

    setters! {
        /// The fixed part of the pause between attempts.
        delay: Duration => delay;

        /// The random part added to each pause, uniform in `0..=jitter` (spreads out contenders).
        jitter: Duration => jitter;

        /// Stop after this many attempts (`None`: only the deadline counts).
        max_attempts: Option<u32> => max_attempts;

        /// Stop trying this long after the first attempt (`None`: only the attempt count counts).
        deadline: Option<Duration> => deadline;
    }

    /// The pause before the next attempt: `delay + uniform(0..=jitter)`.
    pub fn pause(&self) -> Duration {
        let jitter_us = self.jitter.as_micros().min(u128::from(u64::MAX)) as u64;
        let extra = if jitter_us == 0 {
            0
        } else {
            rand::random_range(0..=jitter_us)
        };
        self.delay + Duration::from_micros(extra)
    }

    /// The pause before attempt `attempts + 1`, or `None` when the attempt count is used up or
    /// the pause would end past the deadline (`elapsed` since the first attempt).
    pub fn next_pause(&self, attempts: u32, elapsed: Duration) -> Option<Duration> {
        if self.max_attempts.is_some_and(|m| attempts >= m) {
            return None;
        }
        let pause = self.pause();
        if self.deadline.is_some_and(|d| elapsed + pause > d) {
            return None;
        }
        Some(pause)
    }

    /// How long a waiter woken by releases may wait before its next attempt, `elapsed` after
    /// the first: what is left of the deadline, or (with only an attempt count) `fallback`.
    pub(crate) fn time_left(&self, elapsed: Duration, fallback: Duration) -> Duration {
        self.deadline
            .map_or(fallback, |d| d.saturating_sub(elapsed))
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.max_attempts.is_none() && self.deadline.is_none() {
            return Err(Error::invalid(
                "retry",
                "set a deadline or max_attempts, or retries would never end",
            ));
        }
        if self.max_attempts == Some(0) {
            return Err(Error::invalid("retry.max_attempts", "must be at least 1"));
        }
        if let Some(deadline) = self.deadline {
            if deadline.is_zero() && self.max_attempts.is_none() {
                return Err(Error::invalid(
                    "retry.deadline",
                    "must be greater than zero",
                ));
            }
            if self.delay > deadline {
                return Err(Error::invalid(
                    "retry.delay",
                    format!("{:?} is longer than the deadline {deadline:?}", self.delay),
                ));
            }
        }
        Ok(())
    }
}

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
    // A single attempt never waits: not even behind the client's earlier waiters for the key.
    let mut waiter = if opts.retry.max_attempts == Some(1) {
        Waiter::poll()
    } else {
        locker.waiter(key)
    };
    let unfair;
    let opts = match (opts.fair.on, locker.fair_unavailable()) {
        (true, None) => {
            waiter = waiter.into_fair(opts.fair.lease);
            opts
        }
        (true, Some(why)) => {
            tracing::debug!(key, why, "fair mode unavailable; acquiring without it");
            unfair = opts.without_fair();
            &unfair
        }
        (false, _) => opts,
    };
    let mut ticket = waiter.ticket().map(str::to_owned);
    let mut place = ticket
        .as_deref()
        .map(|t| QueuePlace::new(locker.clone(), key, t));
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
        let result = match &ticket {
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
                // Taking the lock took the ticket out of the queue.
                if let Some(p) = &mut place {
                    p.queued = false;
                }
                observer.on_attempt(AttemptOutcome::Acquired, sent, latency);
                crate::metrics::acquired(locker.mode(), answered - first);
                return Ok(lock);
            }
            Ok(Some(lock)) => {
                observer.on_attempt(AttemptOutcome::TooLittleValidity, sent, latency);
                // Too slow a round trip: the lock is (nearly) worthless; give it back. A release
                // that failed goes on in the background with the lock's token: a fair acquire
                // goes on under a new ticket (taking the lock took it out of the queue anyway).
                if let Err(e) = Box::pin(locker.release(&lock)).await {
                    tracing::debug!(key, error = %e, "giving back a lock with too little validity failed");
                }
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
        if redraw && ticket.is_some() {
            // The old place is left in the background (`QueuePlace`'s drop).
            drop(place.take());
            waiter.redraw_ticket();
            ticket = waiter.ticket().map(str::to_owned);
            place = ticket
                .as_deref()
                .map(|t| QueuePlace::new(locker.clone(), key, t));
        }
        let elapsed = first.elapsed();
        let pause = opts
            .retry
            .next_pause(attempts, elapsed)
            .filter(|_| observer.keep_trying());
        let Some(pause) = pause else {
            if let Some(p) = place.take() {
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::error::invalid_field as field;

    #[test]
    fn retry_delay_longer_than_deadline_is_rejected() {
        let retry = RetryOptions::new()
            .delay(Duration::from_secs(2))
            .deadline(Some(Duration::from_secs(1)));
        assert_eq!(field(retry.validate()), "retry.delay");
    }

    #[test]
    fn endless_retry_is_rejected() {
        let retry = RetryOptions::new().deadline(None).max_attempts(None);
        assert_eq!(field(retry.validate()), "retry");
        assert_eq!(
            field(RetryOptions::new().max_attempts(Some(0)).validate()),
            "retry.max_attempts"
        );
    }

    #[test]
    fn pause_stays_within_delay_plus_jitter() {
        let r = RetryOptions::new()
            .delay(Duration::from_millis(10))
            .jitter(Duration::from_millis(5));
        for _ in 0..1000 {
            let p = r.pause();
            assert!(
                p >= Duration::from_millis(10) && p <= Duration::from_millis(15),
                "{p:?}"
            );
        }
    }
}
