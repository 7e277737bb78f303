//! lockkit: Redis distributed locks that are right and fast.
//!
//! - acquire is one `SET key token NX PX ttl` with a fresh UUID v4 token;
//! - release is a Lua compare-and-delete, extend a Lua compare-and-`PEXPIRE`, both preloaded with
//!   `SCRIPT LOAD` and called with `EVALSHA` (recovering from `NOSCRIPT` by itself);
//! - many acquires go out pipelined in one round trip ([`LockClient::acquire_many`]);
//! - a [`LockGuard`] renews its lock from a watchdog and tells you the moment it is lost;
//! - one [`Locker`] trait over one server ([`LockClient`]) and a Redlock quorum ([`Redlock`]),
//!   with one retry loop ([`retry`]) that every acquire goes through.
//!
//! # Module map
//! | module | one job |
//! | --- | --- |
//! | `conn`, `connections` | opening connections (server, proxy, cluster); the script cache and `EVALSHA`/`NOSCRIPT` |
//! | `url` | parsing and redacting Redis URLs ([`parse_url`], [`redact_url`]) |
//! | `lock` | the [`Lock`] data, tokens, release/extend outcomes |
//! | `locker` | the [`Locker`] trait |
//! | `client` | [`LockClient`]: one server, proxy or cluster |
//! | `batch` | pipelined `acquire_many` / `release_many` |
//! | [`retry`] | [`RetryOptions`] and the one retry loop |
//! | [`wait`] | waiting for a busy lock: woken by its release ([`WaitMode`]), polling as the fallback; fair mode ([`LockOptionsBuilder::fair`]) takes turns through a queue in Redis |
//! | `guard` | [`LockGuard`] and its watchdog |
//! | `redlock`, `quorum` | [`Redlock`]: a quorum over independent masters; votes decided at quorum, per-node circuit breakers |
//! | `fencing` | fencing tokens ([`LockClient::try_acquire_fenced`]) |
//! | `link`, [`net`], [`resp`] | lockkit's own pipelined connection to one server; opening a connection and logging in ([`net::Connector`], also `lockkit proxy`'s upstream); where a RESP reply ends ([`resp::frame_len`]) |
//! | `options`, `error`, [`scripts`], `probe` | options, [`Error`]/[`ErrorKind`], the Lua scripts, target probing |
//!
//! ```no_run
//! use std::time::Duration;
//! use lockkit::{LockClient, LockOptions, Locker, WatchdogOptions};
//!
//! # async fn demo() -> lockkit::Result<()> {
//! let client = LockClient::connect("redis://127.0.0.1:6379").await?;
//!
//! // One attempt: Ok(None) when someone else holds it.
//! if let Some(lock) = client.try_acquire("lock:order:42", Duration::from_secs(5)).await? {
//!     // ... the guarded work, well inside lock.remaining_validity() ...
//!     client.release(&lock).await?;
//! }
//!
//! // Retry until a deadline, and keep the lock alive while working.
//! let opts = LockOptions::new(Duration::from_secs(5))?;
//! let guard = client.lock("lock:nightly-report", &opts, WatchdogOptions::new()).await?;
//! let mut lost = guard.loss_signal();
//! tokio::select! {
//!     _ = tokio::time::sleep(Duration::from_secs(12)) => { /* the work */ }
//!     reason = lost.lost() => eprintln!("lock lost ({reason:?}); stop writing"),
//! }
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Errors
//! Every fallible call returns [`Error`]; a busy lock is `Ok(None)`, not an error, and a Redis
//! error is never turned into `false`. [`Error::is_retryable`] tells transient failures apart.
//!
//! # Limitations and caveats
//! - A lock is a lease: if the holder pauses (GC, swap, SIGSTOP) past the TTL, the key expires and
//!   another holder can enter while the first still thinks it holds it. The watchdog narrows the
//!   window; only a fencing token checked by the resource closes it
//!   ([`LockClient::try_acquire_fenced`]).
//! - Validity is measured with the client's monotonic clock from the moment the `SET` was sent,
//!   minus a drift allowance (0.01 × TTL + 2 ms); a server whose clock jumps can still expire a key
//!   early.
//! - That monotonic clock ([`std::time::Instant`]) does not advance while the machine is
//!   suspended on some platforms: a client that sleeps through a TTL wakes up with validity that
//!   still looks positive for a key the server has expired. Do not hold locks across a suspend
//!   (see [`LockGuard`]).
//! - With asynchronous replication, a failover can lose a freshly written lock key; a single Redis
//!   node is not a consensus system.
//! - A lock stops concurrent duplicates; only idempotency stops a later retry of the same request.

#![warn(missing_docs)]

/// Consuming setters for an options type, each `name(mut self, value) -> Self`, with its doc:
/// `setters! { /// Doc. name: Type => field; }` (or `=> inner.field` for a field of a field).
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty => $($field:ident).+;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, value: $ty) -> Self {
                self.$($field).+ = value;
                self
            }
        )*
    };
}

mod batch;
mod client;
mod command;
mod conn;
mod connections;
mod error;
mod fair;
mod fencing;
mod guard;
mod keys;
mod link;
mod lock;
mod locker;
pub mod metrics;
#[cfg(feature = "tower")]
pub mod middleware;
pub mod net;
mod options;
mod probe;
mod quorum;
mod redlock;
pub mod resp;
pub mod retry;
pub mod scripts;
mod url;
pub mod wait;

pub use client::LockClient;
pub use conn::Topology;
pub use connections::ClientStats;
pub use error::{Error, ErrorKind, NodeError, Result};
pub use guard::{LockGuard, LossSignal};
pub use keys::{fair_queue_keys, key_slot, MAX_KEY_LEN};
pub use lock::{new_token, ExtendOutcome, FairAttempt, Lock, LossReason, ReleaseOutcome};
pub use locker::Locker;
pub use net::tls_config;
pub use options::{
    ClientOptions, LockOptions, LockOptionsBuilder, RetryOptions, ScriptMode, WaitMode,
    WatchdogOptions, DEFAULT_QUEUE_LEASE, MAX_TTL,
};
pub use probe::{probe, ProbeReport, Support};
pub use quorum::quorum_of;
pub use redlock::{Redlock, RedlockAttempt, RedlockOptions, RedlockRelease};
pub use retry::{AcquireObserver, AttemptOutcome, NoObserver};
pub use url::{parse_url, redact_url};
pub use wait::Waiter;

/// The README's examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
