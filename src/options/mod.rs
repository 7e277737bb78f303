//! Options types: built with `new()`/`Default` and consuming setters, validated once.
//! Here: how a client connects ([`ClientOptions`], [`ScriptMode`], [`WaitMode`]); one lock's
//! options in `lock.rs` ([`LockOptions`]), the retry policy in `retry.rs` ([`RetryOptions`]),
//! the watchdog's in `watchdog.rs` ([`WatchdogOptions`]).

use std::time::Duration;

use crate::error::{Error, Result};

mod lock;
mod retry;
mod watchdog;

pub use lock::{LockOptions, LockOptionsBuilder, DEFAULT_QUEUE_LEASE};
pub use retry::RetryOptions;
pub use watchdog::WatchdogOptions;

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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::error::invalid_field as field;

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
}
