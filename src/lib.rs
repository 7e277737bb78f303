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
//! # Layers
//! `src/` is built in layers, bottom to top: a file imports from its own layer and the ones
//! below it, never from above, but for the one import upward named below the table. Read it
//! bottom first. `tests/it/layers.rs` reads this table and every `crate::`/`super::` path in
//! `src/` (unit-test modules aside: they may use the whole crate), and fails on an import
//! against it, on a file in no layer, or on an import circle of more than 3 files.
//!
//! | layer | files | one job |
//! | --- | --- | --- |
//! | 1 base | `error.rs`, `keys.rs`, `scripts.rs`, `url.rs` | [`Error`]/[`ErrorKind`]; key rules ([`key_slot`], [`fair_queue_keys`], [`MAX_KEY_LEN`]); the Lua scripts ([`scripts`]); parsing and redacting Redis URLs ([`parse_url`], [`redact_url`]) |
//! | 2 wire | `resp.rs`, `command.rs` | RESP: where a reply ends ([`resp::frame_len`]), writing commands; a command lockkit encodes itself |
//! | 3 data | `options/`, `lock.rs` | options ([`ClientOptions`] with its [`WaitMode`] in `mod.rs`, [`LockOptions`] in `lock.rs`, [`RetryOptions`] in `retry.rs`, [`WatchdogOptions`] in `watchdog.rs`); the [`Lock`] data, tokens, the `SET NX PX` command and its reply, the outcomes of release, extend and fair attempts, [`LossReason`] |
//! | 4 metrics | `metrics.rs` | [`metrics`]: what every path reports |
//! | 5 connection | `connection/` | `mod.rs`: opening connections (server, proxy, cluster), [`Topology`]; `link/`: lockkit's own pipelined connection to one server (`mod.rs` the handle and its shared reconnect, `endpoint.rs` where and how it connects, `wire.rs` the write buffer and the queue of requests, `reply_slot.rs` what a request waits for, `driver.rs` the task that owns the socket); `connector.rs` ([`net`]): opening a socket and logging in ([`net::Connector`], also `lockkit proxy`'s upstream); `pool/`: a client's connections and what goes with them (`mod.rs` opening them, the release hub; `affinity.rs` which connection a call takes, by task and by token; `script_cache.rs` the script cache, `EVALSHA`/`NOSCRIPT`, batches; `script_cmd.rs` a script call's encoding; `stats.rs` the counters); `hub.rs`: the release-notification connection and its liveness (`subscriber.rs`: its protocol); `cluster.rs`: a Redis Cluster's connections (redis-rs's); `notify.rs` ([`wait`]): waiting for a busy lock, woken by its release, polling as the fallback, fair mode's turns |
//! | 6 lockers | `locker.rs`, `client/`, `redlock/` | the [`Locker`] trait; [`LockClient`] (`client/mod.rs`) with the clean-up of acquires whose outcome is unknown (`cleanup.rs`), pipelined `acquire_many`/`release_many` (`batch.rs`), fair mode (`fair.rs`, [`LockOptionsBuilder::fair`]) and fencing tokens (`fencing.rs`, [`LockClient::try_acquire_fenced`]), [`Semaphore`] (`semaphore.rs`, with what every shared primitive shares) and [`RwLock`] (`rwlock.rs`); [`Redlock`] (`redlock/mod.rs`): a quorum over independent masters, its rounds (`acquire.rs`, `release.rs`, `extend.rs`), votes decided at quorum, per-node circuit breakers (`quorum.rs`) |
//! | 7 policies | `retry.rs`, `guard.rs` | [`retry`]: the one retry loop; [`LockGuard`] and its watchdog |
//! | 8 top | `probe.rs`, `middleware/`, `lib.rs` | target probing ([`probe()`]); the `tower` layer (feature `tower`); this crate root |
//!
//! The one import upward: `locker.rs` → `retry.rs`, `guard.rs` (the [`Locker`] trait's
//! provided methods, `acquire` and `lock`, run the retry loop and start a guard, as std's
//! `Iterator` reaches its adapters). They form the one import circle, of 3 files.
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
//! // End every guard with release().await (a dropped one is released as well as lockkit can).
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
//!   ([`LockClient::try_acquire_fenced`]; a semaphore's permits are fenced per permit slot,
//!   [`Semaphore::try_acquire_fenced`], and a read-write lock's holds by one counter for readers
//!   and writers, [`RwLocker::try_acquire_fenced`]).
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

// The modules, bottom layer first (see "# Layers" above).
mod error;
mod keys;
pub mod scripts;
mod url;

mod command;
pub mod resp;

mod lock;
mod options;

pub mod metrics;

mod connection;
pub use connection::connector as net;
pub use connection::notify as wait;

mod client;
mod locker;
mod redlock;

mod guard;
pub mod retry;

#[cfg(feature = "tower")]
pub mod middleware;
mod probe;

pub use client::rwlock::{RwLock, RwLocker};
pub use client::semaphore::Semaphore;
pub use client::LockClient;
pub use connection::pool::ClientStats;
pub use connection::Topology;
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
pub use redlock::{quorum_of, Redlock, RedlockAttempt, RedlockOptions, RedlockRelease};
pub use retry::{AcquireObserver, AttemptOutcome, NoObserver};
pub use url::{parse_url, redact_url};
pub use wait::Waiter;

/// The README's examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The examples of the README's chapters in `docs/` compile as doctests too (the chapters of
/// other crates, `docs/HARNESS.md` and `docs/PROXY.md`, are not the library's).
#[cfg(doctest)]
#[doc = include_str!("../docs/LIBRARY.md")]
#[doc = include_str!("../docs/MIDDLEWARE.md")]
#[doc = include_str!("../docs/SECURITY.md")]
#[doc = include_str!("../docs/METRICS.md")]
#[doc = include_str!("../docs/EXAMPLES.md")]
#[doc = include_str!("../docs/BENCH.md")]
pub struct ChapterDoctests;
