//! How an acquire retries a busy lock.

use std::time::Duration;

use crate::error::{Error, Result};

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
