//! Upstream health: the operation timeout every upstream request runs under and the back-off of
//! reconnects (the commands allowed to wait longer than the timeout, the blocking ones, are
//! told by the client side's classification).
//!
//! A shared connection whose oldest command waits longer than the timeout is given up: every
//! command on it gets an error reply (it may or may not have run) and the next request opens a
//! new one, after a back-off while connections keep failing. A client's own connection is given
//! up the same way, except while a blocking command (BLPOP, WAIT, XREAD BLOCK, ...) or pub/sub
//! may rightly keep it quiet: the client gets an error reply for each command owed, then its
//! connection closes (its state upstream is gone with it).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// How long an upstream request may wait for its reply, by default.
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(5);

/// How long stopping lets the commands already forwarded get their replies, by default.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The first wait before reconnecting after a failure; it doubles with each failure in a row.
const BACKOFF_FIRST: Duration = Duration::from_millis(50);
/// The longest wait before reconnecting.
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Failures in a row of the connections to one upstream.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    failures: AtomicU32,
}

impl Backoff {
    /// A connection could not be made, or was given up.
    pub(crate) fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// A reply came back: the upstream works.
    pub(crate) fn succeeded(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// How long to wait before the next connection: nothing after a success, then 50 ms,
    /// 100 ms, ... up to 2 s.
    pub(crate) fn delay(&self) -> Duration {
        match self.failures.load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            n => BACKOFF_FIRST
                .saturating_mul(1 << (n - 1).min(16))
                .min(BACKOFF_MAX),
        }
    }
}

/// `d` for an error text: `500 ms`, `5 s`.
pub(crate) fn shown(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_and_resets_on_success() {
        let b = Backoff::default();
        assert_eq!(b.delay(), Duration::ZERO);
        let mut seen = Vec::new();
        for _ in 0..8 {
            b.failed();
            seen.push(b.delay().as_millis());
        }
        assert_eq!(seen, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
        b.succeeded();
        assert_eq!(b.delay(), Duration::ZERO);
    }

    #[test]
    fn durations_read_as_written() {
        assert_eq!(shown(Duration::from_secs(5)), "5 s");
        assert_eq!(shown(Duration::from_millis(500)), "500 ms");
        assert_eq!(shown(Duration::from_millis(1500)), "1500 ms");
    }
}
