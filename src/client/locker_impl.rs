//! [`LockClient`] as a [`Locker`]: its one-attempt acquires, which go through the trait, and
//! the trait's methods over one server, proxy or cluster.

use std::time::Duration;

use super::LockClient;
use crate::connection::notify::Waiter;
use crate::connection::pool::ClientStats;
use crate::error::Result;
use crate::lock::{ExtendOutcome, Lock, ReleaseOutcome};
use crate::locker::Locker;
use crate::options::LockOptions;

impl LockClient {
    /// One attempt: `SET key token NX PX ttl`. `Ok(None)` when the lock is held by someone else.
    ///
    /// The returned lock is valid until request start + TTL − drift (0.01 × TTL + 2 ms).
    ///
    /// If the reply is lost (timeout, dropped connection) the SET may or may not have landed;
    /// lockkit then runs a compare-and-delete with this attempt's token before returning the
    /// error, so no ghost lock is left held for a whole TTL. An acquire dropped while the SET is
    /// on the wire gets the same compare-and-delete, in the background.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockClient, Locker};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// match client.try_acquire("lock:order:42", Duration::from_secs(5)).await? {
    ///     Some(lock) => { /* ... */ client.release(&lock).await?; }
    ///     None => println!("someone else holds it"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A bad key or TTL ([`Error::InvalidKey`](crate::Error::InvalidKey), [`Error::InvalidOptions`](crate::Error::InvalidOptions)), a Redis error or a
    /// timeout.
    pub async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lock>> {
        self.try_acquire_with(key, &LockOptions::new(ttl)?).await
    }

    /// [`try_acquire`](Self::try_acquire) with full options (drift allowance, min validity); the
    /// retry policy is not used (one attempt).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockClient, LockOptions};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// let opts = LockOptions::builder(Duration::from_secs(5))
    ///     .drift_fixed(Duration::from_millis(50))
    ///     .build()?;
    /// let lock = client.try_acquire_with("lock:order:42", &opts).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_with(&self, key: &str, opts: &LockOptions) -> Result<Option<Lock>> {
        self.attempt(key, opts).await
    }
}

impl Locker for LockClient {
    /// One attempt, timed and counted (metrics) inside a `lockkit.attempt` span.
    async fn attempt(&self, key: &str, opts: &LockOptions) -> Result<Option<Lock>> {
        crate::metrics::observe_attempt(self.mode(), key, self.attempt_once(key, opts)).await
    }

    /// Compare-and-delete, counted in the metrics (feature `metrics`).
    async fn release(&self, lock: &Lock) -> Result<ReleaseOutcome> {
        crate::metrics::observe_release(self.mode(), lock, self.release_node(lock)).await
    }

    async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<ExtendOutcome> {
        let key = lock.key.clone();
        crate::metrics::observe_extend(self.mode(), &key, self.extend_node(lock, ttl)).await
    }

    /// One pipelined round trip ([`LockClient::acquire_many`]).
    async fn acquire_many(&self, keys: &[&str], ttl: Duration) -> Result<Vec<Option<Lock>>> {
        LockClient::acquire_many(self, keys, ttl).await
    }

    /// One pipelined round trip ([`LockClient::release_many`]).
    async fn release_many(&self, locks: &[Lock]) -> Result<Vec<ReleaseOutcome>> {
        LockClient::release_many(self, locks).await
    }

    fn mode(&self) -> &'static str {
        self.topology().name()
    }

    /// One server, a proxy or a cluster keep the queue beside the key: `None`.
    fn fair_unavailable(&self) -> Option<&'static str> {
        None
    }

    async fn attempt_fair(
        &self,
        key: &str,
        opts: &LockOptions,
        ticket: &str,
    ) -> Result<crate::FairAttempt> {
        self.attempt_fair_counted(key, opts, ticket).await
    }

    async fn leave_queue(&self, key: &str, ticket: &str) -> Result<()> {
        self.leave_queue_once(key, ticket).await
    }

    fn waiter(&self, key: &str) -> Waiter {
        match self.conns.hub() {
            Some(hub) => Waiter::notify(hub.waiter(key, self.conns.conn())),
            None => Waiter::poll(),
        }
    }

    fn stats(&self) -> ClientStats {
        self.conns.stats()
    }
}
