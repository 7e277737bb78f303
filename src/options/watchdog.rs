//! The renewal policy of a guard's watchdog.

use std::time::Duration;

use crate::error::{Error, Result};

/// The renewal policy of a [`LockGuard`](crate::LockGuard)'s watchdog.
///
/// ```
/// use std::time::Duration;
/// use lockkit::WatchdogOptions;
/// let w = WatchdogOptions::new().interval(Duration::from_secs(1)).max_hold(Duration::from_secs(60));
/// assert_eq!(w.interval_for(Duration::from_secs(9)), Duration::from_secs(1));
/// assert_eq!(WatchdogOptions::new().interval_for(Duration::from_secs(9)), Duration::from_secs(3));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[must_use]
pub struct WatchdogOptions {
    pub(crate) interval: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
}

impl WatchdogOptions {
    /// Renew every TTL/3, without a bound on the total hold time.
    pub fn new() -> Self {
        Self::default()
    }

    /// Renew this often instead of every TTL/3; must be below the TTL.
    pub fn interval(mut self, d: Duration) -> Self {
        self.interval = Some(d);
        self
    }

    /// Stop renewing once the lock has been held this long; the lock then runs out its TTL and
    /// the holder is told it was lost ([`LossReason::MaxHoldReached`](crate::LossReason)).
    pub fn max_hold(mut self, d: Duration) -> Self {
        self.max_hold = Some(d);
        self
    }

    /// The interval that will be used for a lock with this TTL.
    pub fn interval_for(&self, ttl: Duration) -> Duration {
        self.interval.unwrap_or(ttl / 3)
    }

    pub(crate) fn validate(&self, ttl: Duration) -> Result<()> {
        let interval = self.interval_for(ttl);
        if interval.is_zero() {
            return Err(Error::invalid(
                "watchdog.interval",
                "must be greater than zero",
            ));
        }
        if interval >= ttl {
            return Err(Error::invalid(
                "watchdog.interval",
                format!("{interval:?} is not below the TTL {ttl:?}; the lock would expire between renewals"),
            ));
        }
        if self.max_hold.is_some_and(|d| d.is_zero()) {
            return Err(Error::invalid(
                "watchdog.max_hold",
                "must be greater than zero",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::error::invalid_field as field;

    #[test]
    fn watchdog_interval_not_below_ttl_is_rejected() {
        let ttl = Duration::from_secs(3);
        let wd = WatchdogOptions::new().interval(ttl);
        assert_eq!(field(wd.validate(ttl)), "watchdog.interval");
        assert_eq!(
            WatchdogOptions::new().interval_for(ttl),
            Duration::from_secs(1)
        );
    }
}
