//! Options types: built with `new()`/`Default` and consuming setters, validated once.

use std::time::Duration;

use std::time::Instant;

use crate::error::{Error, Result};

/// The longest TTL lockkit accepts (Redis takes up to ~292 million years; a lock held a year is a bug).
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// How scripts are invoked on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ScriptMode {
    /// `SCRIPT LOAD` once per connection, then `EVALSHA`; on `NOSCRIPT` one `EVAL` re-caches it.
    #[default]
    EvalSha,
    /// `EVAL` with the full script text on every call (for comparison, or very restricted proxies).
    Eval,
    /// `FCALL` of the `lockkit` Function library, loaded with `FUNCTION LOAD REPLACE` at connect.
    Function,
}

impl ScriptMode {
    /// The name used in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ScriptMode::EvalSha => "evalsha",
            ScriptMode::Eval => "eval",
            ScriptMode::Function => "fcall",
        }
    }
}

/// How a [`LockClient`](crate::LockClient) waits between attempts on a busy lock.
///
/// ```
/// use lockkit::{ClientOptions, WaitMode};
/// let opts = ClientOptions::new().wait(WaitMode::Poll);
/// # let _ = opts;
/// assert_eq!(WaitMode::default(), WaitMode::Notify);
/// assert_eq!(WaitMode::Notify.name(), "notify");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WaitMode {
    /// Woken by the release (one subscribed connection per client), with polling as the fallback
    /// where the target can not notify.
    #[default]
    Notify,
    /// Sleep the retry options' delay plus jitter between attempts.
    Poll,
}

impl WaitMode {
    /// `notify` or `poll`.
    pub fn name(self) -> &'static str {
        match self {
            WaitMode::Notify => "notify",
            WaitMode::Poll => "poll",
        }
    }
}

/// Options for a [`LockClient`](crate::LockClient)'s connections.
///
/// ```
/// use std::time::Duration;
/// use lockkit::{ClientOptions, ScriptMode};
/// let opts = ClientOptions::new()
///     .connections(4)
///     .connect_timeout(Duration::from_secs(1))
///     .response_timeout(Some(Duration::from_millis(500)))
///     .script_mode(ScriptMode::EvalSha)
///     .preload_scripts(true)
///     .proxy(None)
///     .reconnect_retries(3)
///     .wait(lockkit::WaitMode::Notify);
/// # let _ = opts;
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct ClientOptions {
    pub(crate) connections: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Option<Duration>,
    pub(crate) script_mode: ScriptMode,
    pub(crate) preload: bool,
    pub(crate) reconnect_retries: usize,
    pub(crate) proxy: Option<bool>,
    pub(crate) tls_root_ca: Option<Vec<u8>>,
    pub(crate) wait: WaitMode,
    /// Whether a release publishes on the key's release channel (for waiters woken by it):
    /// off for a Redlock node's client, whose waiters poll.
    pub(crate) publish_releases: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connections: 1,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Some(Duration::from_secs(2)),
            script_mode: ScriptMode::EvalSha,
            preload: true,
            reconnect_retries: 3,
            proxy: None,
            tls_root_ca: None,
            wait: WaitMode::Notify,
            publish_releases: true,
        }
    }
}

impl ClientOptions {
    /// The defaults: one multiplexed connection, 2 s connect and response timeouts, EVALSHA.
    pub fn new() -> Self {
        Self::default()
    }

    setters! {
        /// How many multiplexed connections to spread calls over (default 1: one connection already
        /// pipelines concurrent calls; more help only when one socket is the bottleneck). Locks
        /// are spread by token: every command of one lock (its acquire, a clean-up, the release,
        /// the extends) goes over the same connection, so they reach the server in order. Each
        /// task keeps to one connection: its locks' tokens are drawn to land on it, so the
        /// commands of the tasks that one read of replies wakes go back out together, in one
        /// write.
        connections: usize => connections;

        /// How long establishing a connection may take.
        connect_timeout: Duration => connect_timeout;

        /// How long a reply may take before the call fails with a timeout (`None`: wait forever).
        response_timeout: Option<Duration> => response_timeout;

        /// How scripts are invoked.
        script_mode: ScriptMode => script_mode;

        /// Whether to `SCRIPT LOAD` the scripts at connect (default true). Turn off for proxies that
        /// refuse `SCRIPT LOAD` (twemproxy closes the connection on it): the first `EVALSHA` per backend
        /// then meets `NOSCRIPT` and one `EVAL` seeds that backend.
        preload_scripts: bool => preload;

        /// Whether the target is a proxy such as twemproxy that closes the connection on commands it
        /// does not know (`CLIENT SETINFO`, `SCRIPT LOAD`): `Some(true)` sends neither, so scripts
        /// reach each backend through one `EVAL` on its first `NOSCRIPT`, then `EVALSHA`.
        /// `None` (the default) detects it: a connection closed during the handshake is retried once
        /// in proxy mode, and said so in the log.
        proxy: Option<bool> => proxy;
    }

    /// Trust this CA (PEM) for `rediss://` instead of the built-in web roots, e.g. a company CA
    /// or the one a managed Redis hands out. Verification stays on; it only changes whom to trust.
    pub fn tls_root_ca(mut self, pem: Vec<u8>) -> Self {
        self.tls_root_ca = Some(pem);
        self
    }

    setters! {
        /// How many times a dropped connection is re-established before calls fail (default 3).
        reconnect_retries: usize => reconnect_retries;

        /// How an acquire with retries waits for a busy lock (default
        /// [`WaitMode::Notify`](crate::WaitMode::Notify): woken by the release on one server,
        /// polling elsewhere).
        wait: WaitMode => wait;
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.connections == 0 || self.connections > 1024 {
            return Err(Error::invalid("connections", "must be between 1 and 1024"));
        }
        if self.connect_timeout.is_zero() {
            return Err(Error::invalid(
                "connect_timeout",
                "must be greater than zero",
            ));
        }
        if self.response_timeout.is_some_and(|d| d.is_zero()) {
            return Err(Error::invalid(
                "response_timeout",
                "must be greater than zero (use None to wait forever)",
            ));
        }
        Ok(())
    }

    /// How long after a command first reaches a cluster node the cluster client may still
    /// re-send it: one try and `reconnect_retries` more, each waiting up to a connect and a
    /// response timeout (10 s counted for none) and the cluster client's pause of about 1.3 s.
    /// A release's "released" marker lives this long (`lua/release.lua`).
    pub(crate) fn resend_window(&self) -> Duration {
        let attempt = self.connect_timeout
            + self.response_timeout.unwrap_or(Duration::from_secs(10))
            + Duration::from_millis(1300);
        attempt.saturating_mul(u32::try_from(self.reconnect_retries + 1).unwrap_or(u32::MAX))
    }
}

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
        /// above [`MAX_TTL`]; in a cluster, an acquire of a key whose queue keys can not share
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
    /// never ends, or (in fair mode) a queue lease below 10 ms or above [`MAX_TTL`].
    pub fn build(self) -> Result<LockOptions> {
        self.options.validate()?;
        Ok(self.options)
    }
}

/// Checks a TTL: at least 1 ms, whole milliseconds, at most [`MAX_TTL`].
pub(crate) fn validate_ttl(field: &'static str, ttl: Duration) -> Result<()> {
    if ttl < Duration::from_millis(1) {
        return Err(Error::invalid(
            field,
            format!("{ttl:?} is below the 1 ms Redis can express"),
        ));
    }
    if ttl > MAX_TTL {
        return Err(Error::invalid(
            field,
            format!("{ttl:?} is longer than a year; a lock that long is a bug"),
        ));
    }
    Ok(())
}

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
    fn watchdog_interval_not_below_ttl_is_rejected() {
        let ttl = Duration::from_secs(3);
        let wd = WatchdogOptions::new().interval(ttl);
        assert_eq!(field(wd.validate(ttl)), "watchdog.interval");
        assert_eq!(
            WatchdogOptions::new().interval_for(ttl),
            Duration::from_secs(1)
        );
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

    #[test]
    fn client_options_reject_zero_connections() {
        assert_eq!(
            field(ClientOptions::new().connections(0).validate()),
            "connections"
        );
        assert_eq!(
            field(
                ClientOptions::new()
                    .response_timeout(Some(Duration::ZERO))
                    .validate()
            ),
            "response_timeout"
        );
    }

    #[test]
    fn resend_window_covers_every_try_of_the_cluster_client() {
        // 4 tries of 2 s + 2 s + 1.3 s with the defaults.
        assert_eq!(
            ClientOptions::new().resend_window(),
            Duration::from_millis(21_200)
        );
        let none = ClientOptions::new()
            .response_timeout(None)
            .reconnect_retries(0);
        assert_eq!(none.resend_window(), Duration::from_millis(13_300));
    }

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
