//! One lock's options: its TTL, retry policy, validity (drift allowance and minimum) and fair
//! queue, and their builder.

use std::time::{Duration, Instant};

use super::{validate_ttl, RetryOptions};
use crate::error::{Error, Result};

/// Everything about one lock: its TTL, how to retry, how much of the TTL counts as valid, and
/// whether to wait in a fair queue. Checked: every `LockOptions` comes from
/// [`new`](Self::new) or [`LockOptionsBuilder::build`], which check it once, so acquiring with
/// it checks nothing again.
///
/// ```
/// use std::time::Duration;
/// use lockkit::{LockOptions, RetryOptions};
/// let opts = LockOptions::builder(Duration::from_secs(5))
///     .retry(RetryOptions::new().deadline(Some(Duration::from_secs(2))))
///     .drift_factor(0.01)
///     .drift_fixed(Duration::from_millis(5))
///     .min_validity(Duration::from_millis(500))
///     .build()?;
/// assert_eq!(opts.ttl(), Duration::from_secs(5));
/// assert_eq!(opts.drift(), Duration::from_millis(55));
/// assert_eq!(opts.min_validity(), Duration::from_millis(500));
/// assert!(!opts.is_fair());
/// // The drift allowance and min_validity eat a 50 ms TTL.
/// assert!(opts.to_builder().ttl(Duration::from_millis(50)).build().is_err());
/// # Ok::<(), lockkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LockOptions {
    pub(crate) ttl: Duration,
    pub(crate) retry: RetryOptions,
    pub(crate) validity: Validity,
    pub(crate) fair: FairQueue,
}

/// How much of the TTL a lock counts on: the TTL minus a clock-drift allowance
/// (`drift_factor x TTL + drift_fixed`, Redlock's formula), and the least that must be left of
/// it when the lock is acquired.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Validity {
    drift_factor: f64,
    drift_fixed: Duration,
    pub(crate) min: Duration,
}

impl Validity {
    /// The drift allowance for a lock with this TTL.
    fn drift(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.drift_factor) + self.drift_fixed
    }

    fn validate(&self, ttl: Duration) -> Result<()> {
        let factor = self.drift_factor;
        if !(0.0..0.5).contains(&factor) || factor.is_nan() {
            return Err(Error::invalid("drift_factor", "must be in 0.0..0.5"));
        }
        let drift = self.drift(ttl);
        if drift + self.min >= ttl {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "{ttl:?} leaves no validity after the drift allowance {drift:?} and min_validity {:?}",
                    self.min
                ),
            ));
        }
        Ok(())
    }
}

/// Fair mode: whether [`acquire`](crate::Locker::acquire) waits its turn in the queue in Redis,
/// and how long a waiter's place in it lasts without a new attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FairQueue {
    pub(crate) on: bool,
    pub(crate) lease: Duration,
}

impl FairQueue {
    fn validate(&self) -> Result<()> {
        if !self.on {
            return Ok(());
        }
        validate_ttl("queue_lease", self.lease)?;
        if self.lease < Duration::from_millis(10) {
            return Err(Error::invalid(
                "queue_lease",
                format!(
                    "{:?} is too short: a waiter renews its place every third of it",
                    self.lease
                ),
            ));
        }
        Ok(())
    }
}

/// How long a fair waiter's place in the queue lasts without a new attempt (default 5 s).
pub const DEFAULT_QUEUE_LEASE: Duration = Duration::from_secs(5);

impl LockOptions {
    /// A lock with this TTL; default retry policy; drift allowance `0.01 x TTL + 2 ms`
    /// (Redlock's); no minimum validity; not fair.
    ///
    /// ```
    /// use std::time::Duration;
    /// let o = lockkit::LockOptions::new(Duration::from_secs(10))?;
    /// assert_eq!(o.retry(), &lockkit::RetryOptions::new());
    /// # Ok::<(), lockkit::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`LockOptionsBuilder::build`]: a TTL out of range or eaten by the drift allowance.
    pub fn new(ttl: Duration) -> Result<Self> {
        Self::builder(ttl).build()
    }

    /// Options to set field by field, checked by [`build`](LockOptionsBuilder::build).
    pub fn builder(ttl: Duration) -> LockOptionsBuilder {
        LockOptionsBuilder {
            options: LockOptions {
                ttl,
                retry: RetryOptions::default(),
                validity: Validity {
                    drift_factor: 0.01,
                    drift_fixed: Duration::from_millis(2),
                    min: Duration::ZERO,
                },
                fair: FairQueue {
                    on: false,
                    lease: DEFAULT_QUEUE_LEASE,
                },
            },
        }
    }

    /// A builder holding these options, to derive others from them.
    pub fn to_builder(&self) -> LockOptionsBuilder {
        LockOptionsBuilder { options: *self }
    }

    /// The drift allowance for this TTL: `ttl x drift_factor + drift_fixed`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let o = lockkit::LockOptions::new(Duration::from_secs(10))?;
    /// assert_eq!(o.drift(), Duration::from_millis(102));
    /// # Ok::<(), lockkit::Error>(())
    /// ```
    pub fn drift(&self) -> Duration {
        self.validity.drift(self.ttl)
    }

    /// The TTL these options give a lock.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The retry policy these options give [`acquire`](crate::Locker::acquire).
    pub fn retry(&self) -> &RetryOptions {
        &self.retry
    }

    /// The least validity [`acquire`](crate::Locker::acquire) hands a lock back with.
    pub fn min_validity(&self) -> Duration {
        self.validity.min
    }

    /// Whether [`acquire`](crate::Locker::acquire) waits in a fair queue
    /// ([`LockOptionsBuilder::fair`]).
    pub fn is_fair(&self) -> bool {
        self.fair.on
    }

    /// The lease of a place in the fair queue ([`LockOptionsBuilder::queue_lease`]).
    pub fn queue_lease(&self) -> Duration {
        self.fair.lease
    }

    /// The validity deadline of a lock whose acquiring (or extending) command was sent at `sent`:
    /// `sent + ttl − drift`, never before `sent`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let o = lockkit::LockOptions::new(Duration::from_secs(10))?;
    /// let t0 = Instant::now();
    /// assert_eq!(o.valid_until(t0) - t0, Duration::from_millis(9898));
    /// # Ok::<(), lockkit::Error>(())
    /// ```
    pub fn valid_until(&self, sent: Instant) -> Instant {
        sent + self.ttl.saturating_sub(self.drift())
    }

    /// The same options with another TTL, unchecked: an extend checks its TTL on its own and
    /// keeps the drift allowance the lock was taken with.
    pub(crate) fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The same options without fair mode (where the locker has no fair queue).
    pub(crate) fn without_fair(mut self) -> Self {
        self.fair.on = false;
        self
    }

    fn validate(&self) -> Result<()> {
        validate_ttl("ttl", self.ttl)?;
        self.fair.validate()?;
        self.retry.validate()?;
        self.validity.validate(self.ttl)
    }
}

/// Builds [`LockOptions`]: consuming setters, then [`build`](Self::build) checks every field once.
///
/// ```
/// use std::time::Duration;
/// let e = lockkit::LockOptions::builder(Duration::ZERO).build().unwrap_err();
/// assert!(matches!(e, lockkit::Error::InvalidOptions { field: "ttl", .. }));
/// ```
#[derive(Debug, Clone, Copy)]
#[must_use]
pub struct LockOptionsBuilder {
    options: LockOptions,
}

impl LockOptionsBuilder {
    setters! {
        /// The TTL.
        ttl: Duration => options.ttl;

        /// The retry policy for [`acquire`](crate::Locker::acquire).
        retry: RetryOptions => options.retry;

        /// Clock-drift allowance as a fraction of the TTL (default 0.01).
        drift_factor: f64 => options.validity.drift_factor;

        /// Fixed clock-drift allowance (default 2 ms).
        drift_fixed: Duration => options.validity.drift_fixed;

        /// A lock whose remaining validity is below this when acquired is released and retried
        /// instead of returned (default 0: any positive validity).
        min_validity: Duration => options.validity.min;

        /// Fair mode (default off): [`acquire`](crate::Locker::acquire) waits its turn in a
        /// first-come-first-served queue kept in Redis, across every client and process that
        /// takes the same key in fair mode. Without it, waiters of one
        /// [`LockClient`](crate::LockClient) queue among themselves, while waiters of different
        /// clients race for each release.
        ///
        /// A waiter joins the queue on its first busy attempt (`lua/acquire_fair.lua`); the
        /// release (`lua/release_fair.lua`) wakes the queue's head by name, and only the head
        /// may take the lock while others wait. A waiter that gives up (its retry deadline, or
        /// its acquire future dropped) leaves the queue at once; one that crashed is dropped
        /// after [`queue_lease`](Self::queue_lease).
        ///
        /// ```no_run
        /// use std::time::Duration;
        /// use lockkit::{LockClient, LockOptions, Locker};
        /// # async fn demo() -> lockkit::Result<()> {
        /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
        /// let opts = LockOptions::builder(Duration::from_secs(5)).fair(true).build()?;
        /// let lock = client.acquire("lock:report", &opts).await?;
        /// client.release(&lock).await?; // wakes the next in line
        /// # Ok(()) }
        /// ```
        ///
        /// Every acquirer of a key must use fair mode for the order to hold: a plain acquire
        /// (`try_acquire`, or `acquire` without it) takes a free lock without looking at the
        /// queue. The queue lives in two keys beside the lock key, in its hash slot
        /// ([`fair_queue_keys`](crate::fair_queue_keys)). Redlock has no fair queue: its acquires
        /// ignore this setting ([`Locker::fair_unavailable`](crate::Locker::fair_unavailable)).
        /// Where releases can not notify (a proxy, a cluster), the queue still decides the order
        /// and waiters poll for their turn.
        ///
        /// [`build`](Self::build) refuses a [`queue_lease`](Self::queue_lease) below 10 ms or
        /// above [`MAX_TTL`](crate::MAX_TTL); in a cluster, an acquire of a key whose queue keys can not share
        /// its slot fails with [`Error::InvalidKey`](crate::Error::InvalidKey).
        fair: bool => options.fair.on;

        /// In fair mode, how long a waiter's place in the queue lasts without a new attempt
        /// (default 5 s). A waiting acquire renews it every third of it; a waiter that crashed
        /// holds up the ones behind it for at most this long.
        queue_lease: Duration => options.fair.lease;
    }

    /// Checks every field and hands back the options.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] naming the field: a TTL out of range or eaten by the drift
    /// allowance and `min_validity`, a drift factor outside `0.0..0.5`, a retry policy that
    /// never ends, or (in fair mode) a queue lease below 10 ms or above [`MAX_TTL`](crate::MAX_TTL).
    pub fn build(self) -> Result<LockOptions> {
        self.options.validate()?;
        Ok(self.options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::error::invalid_field as field;

    #[test]
    fn zero_ttl_is_rejected_naming_ttl() {
        assert_eq!(field(LockOptions::new(Duration::ZERO)), "ttl");
    }

    #[test]
    fn ttl_that_drift_eats_is_rejected() {
        // 2 ms fixed drift + 1% of 2 ms leaves nothing of a 2 ms TTL.
        assert_eq!(field(LockOptions::new(Duration::from_millis(2))), "ttl");
        assert!(LockOptions::new(Duration::from_millis(100)).is_ok());
    }

    #[test]
    fn fair_mode_checks_its_queue_lease() {
        let fair = LockOptions::builder(Duration::from_secs(1)).fair(true);
        assert!(fair.build().is_ok());
        let short = fair.queue_lease(Duration::from_millis(9));
        assert_eq!(field(short.build()), "queue_lease");
        // Not fair: the lease is not used, so not checked.
        assert!(short.fair(false).build().is_ok());
    }

    #[test]
    fn drift_follows_redlock_formula() {
        let o = LockOptions::new(Duration::from_secs(10)).unwrap();
        assert_eq!(o.drift(), Duration::from_millis(102));
    }
}
