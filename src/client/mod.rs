//! [`LockClient`]: locks on one server, a proxy in front of servers, or a Redis Cluster.
//! Acquire is one `SET NX PX`; release and extend run the scripts.

mod batch;
mod cleanup;
mod fair;
mod fencing;
mod locker_impl;
pub(crate) mod rwlock;
pub(crate) mod semaphore;

pub(crate) use cleanup::Unheard;

use std::time::{Duration, Instant};

use crate::connection::pool::{ClientStats, Connections};
use crate::connection::Conn;
use crate::error::{unknown_outcome, Result};
use crate::keys::check_key;
use crate::lock::{
    extend_outcome, release_outcome, resent_outcome, set_nx_taken, ttl_ms, ExtendOutcome, Hold,
    Lock, ReleaseOutcome, SetNx,
};
use crate::options::{validate_ttl, ClientOptions, LockOptions, WaitMode};
use crate::scripts;

/// A Redis lock client: acquire, release, extend, pipelined batches, guards with a watchdog.
///
/// Cheap to clone (the connections are shared). Every call goes over one of the client's
/// multiplexed connections, which pipeline concurrent calls and reconnect by themselves.
#[derive(Debug, Clone)]
pub struct LockClient {
    pub(crate) conns: Connections,
}

impl LockClient {
    /// Connects to `url` (`redis://`, `rediss://`, `redis+unix://`; user and password in the URL)
    /// with default options, and preloads the scripts.
    ///
    /// ```no_run
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = lockkit::LockClient::connect("redis://127.0.0.1:6379").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A malformed URL, a server that does not answer, or a refused AUTH.
    pub async fn connect(url: &str) -> Result<LockClient> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects with explicit options (validated here, once).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{ClientOptions, LockClient};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let opts = ClientOptions::new().response_timeout(Some(Duration::from_millis(500)));
    /// let client = LockClient::connect_with("redis://127.0.0.1:6379", opts).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`connect`](Self::connect), and [`Error::InvalidOptions`](crate::Error::InvalidOptions) for bad options.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<LockClient> {
        Ok(LockClient {
            conns: Connections::connect(url, options).await?,
        })
    }

    /// The target URL with the password redacted.
    pub fn target(&self) -> &str {
        self.conns.target()
    }

    /// What the target is: one server, a proxy, or a cluster (detected at connect).
    pub fn topology(&self) -> crate::Topology {
        self.conns.topology()
    }

    /// Whether the target is treated as a proxy (configured, or detected at connect).
    pub fn is_proxy(&self) -> bool {
        self.conns.is_proxy()
    }

    /// What the client has counted so far (NOSCRIPT recoveries, unknown-outcome clean-ups).
    pub fn stats(&self) -> ClientStats {
        self.conns.stats()
    }

    /// How acquires with retries wait for a busy lock: [`WaitMode::Notify`] when woken by
    /// releases; [`WaitMode::Poll`] otherwise, with the reason when notification was asked for
    /// and is unavailable here (a proxy, a cluster, an ACL without the release channels).
    ///
    /// ```no_run
    /// use lockkit::{LockClient, WaitMode};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// match client.wait_mode() {
    ///     (WaitMode::Notify, _) => println!("waiters are woken by releases"),
    ///     (_, Some(why)) => println!("waiters poll: {why}"),
    ///     (mode, None) => println!("waiters {}", mode.name()),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait_mode(&self) -> (WaitMode, Option<&str>) {
        match self.conns.hub() {
            Some(_) => (WaitMode::Notify, None),
            None => (WaitMode::Poll, self.conns.polling_because()),
        }
    }

    async fn attempt_once(&self, key: &str, opts: &LockOptions) -> Result<Option<Lock>> {
        check_key(key)?;
        let token = self.conns.task_token();
        let conn = self.conns.conn_for(&token);
        let start = Instant::now();
        let sent = [(key, token.as_str())];
        // Armed until the outcome is settled, clean-ups included (see `cleanup`).
        let unheard = Unheard::arm(self, &sent, start, Hold::Lock);
        // In a block: nothing of the round trip is kept across the rare awaits below.
        let taken = {
            let get = self.conns.set_nx_get();
            let set = SetNx {
                key,
                token: &token,
                ttl: opts.ttl,
                get,
            };
            match conn.query_with(&set).await {
                Ok(v) => set_nx_taken(&v, &token, get),
                Err(e) if unknown_outcome(&e) => {
                    // Boxed: a rare path; inline it would enlarge every attempt's future.
                    Box::pin(unheard.clean_up(conn)).await;
                    return Err(e.into());
                }
                Err(e) => Err(e.into()),
            }
        };
        if !matches!(taken, Ok(true)) {
            unheard.disarm();
            return taken.map(|_| None);
        }
        // No `Lock` is built before the check: one kept across the rare await costs its size
        // in every attempt's future.
        if let Some(e) = spent(key, opts, opts.valid_until(start)) {
            // Boxed: a rare path; inline it would enlarge every attempt's future.
            let e = Box::pin(self.refuse_spent(conn, key, &token, e, Hold::Lock)).await;
            unheard.disarm();
            return Err(e);
        }
        unheard.disarm();
        Ok(Some(Lock::acquired(key, token, opts, start, None)))
    }

    /// `SET key token NX PX ttl` with a given token (Redlock sends one token to every node).
    pub(crate) async fn set_nx(&self, key: &str, token: &str, ttl: Duration) -> Result<bool> {
        let conn = self.conns.conn_for(token);
        let set = SetNx {
            key,
            token,
            ttl,
            get: false,
        };
        let reply = conn.query_with(&set).await?;
        set_nx_taken(&reply, token, false)
    }

    /// [`set_nx`](Self::set_nx), with the number of the connection it went out on
    /// ([`Conn::query_on`]).
    pub(crate) async fn set_nx_on(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<(bool, u64)> {
        let conn = self.conns.conn_for(token);
        let set = SetNx {
            key,
            token,
            ttl,
            get: false,
        };
        let (reply, epoch) = conn.query_on(&set).await?;
        Ok((set_nx_taken(&reply, token, false)?, epoch))
    }

    /// How long the server has been up (`uptime_in_seconds` of `INFO server`), asked over
    /// `token`'s connection, with that connection's number ([`Conn::query_on`]).
    pub(crate) async fn server_uptime(&self, token: &str) -> Result<(Duration, u64)> {
        let conn = self.conns.conn_for(token);
        let (reply, epoch) = conn.query_on(redis::cmd("INFO").arg("server")).await?;
        let info = match &reply {
            redis::Value::BulkString(b) => String::from_utf8_lossy(b),
            redis::Value::VerbatimString { text, .. } => text.as_str().into(),
            other => {
                return Err(crate::Error::UnexpectedReply {
                    what: "INFO server",
                    reply: format!("{other:?}"),
                })
            }
        };
        let uptime = info
            .lines()
            .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs)
            .ok_or_else(|| crate::Error::UnexpectedReply {
                what: "INFO server",
                reply: "no uptime_in_seconds field".into(),
            })?;
        Ok((uptime, epoch))
    }

    /// `lock`, just taken over `conn`, if more than its `min_validity` is left now; otherwise it
    /// is given back (over `conn`, behind the command that took it; in the background if that
    /// fails) and the answer is [`Error::TooLittleValidity`](crate::Error::TooLittleValidity):
    /// no single attempt hands back a lock its caller cannot use. `hold`: what `lock` holds.
    pub(crate) async fn keep_if_valid(&self, conn: &Conn, lock: Lock, hold: Hold) -> Result<Lock> {
        match spent(&lock.key, &lock.options, lock.valid_until) {
            None => Ok(lock),
            // Boxed: a rare path; inline it would enlarge every attempt's future.
            Some(e) => {
                Err(Box::pin(self.refuse_spent(conn, &lock.key, &lock.token, e, hold)).await)
            }
        }
    }

    /// Gives back the lock of `token` that [`spent`] refused; its error is the answer.
    pub(crate) async fn refuse_spent(
        &self,
        conn: &Conn,
        key: &str,
        token: &str,
        e: crate::Error,
        hold: Hold,
    ) -> crate::Error {
        self.give_back(conn, key, token, hold).await;
        e
    }

    /// Compare-and-delete of `key` for `token` over `conn`, by what it holds: a lock taken in
    /// fair mode (its release names the queue's head), a semaphore's permit, a read-write lock.
    pub(crate) async fn release_on(
        &self,
        conn: &Conn,
        key: &str,
        token: &str,
        hold: Hold,
    ) -> Result<ReleaseOutcome> {
        // Boxed: the other primitives' releases would enlarge every plain release's future.
        match hold {
            Hold::Lock | Hold::Fair => {}
            Hold::Permit => return Box::pin(self.release_permit(conn, key, token)).await,
            Hold::Read | Hold::Write => {
                return Box::pin(self.release_rw(conn, key, token, hold == Hold::Write)).await
            }
        }
        let channel = self.conns.release_channel(key);
        let marker = self.conns.released_marker(key);
        let (marker, channel) = (marker.as_deref(), channel.as_deref());
        let v = if hold == Hold::Fair {
            // Boxed: the fair release's keys would enlarge every plain release's future.
            Box::pin(async {
                let [key, queue, leases] = &self.fair_script_keys(key)?;
                let r = self
                    .conns
                    .release_args(&[key, queue, leases], token, marker, channel);
                self.conns
                    .run_script(conn, &scripts::RELEASE_FAIR, r.keys(), r.args())
                    .await
            })
            .await?
        } else {
            let r = self.conns.release_args(&[key], token, marker, channel);
            self.conns
                .run_script(conn, &scripts::RELEASE, r.keys(), r.args())
                .await?
        };
        release_outcome(&v)
    }
}

impl LockClient {
    /// Compare-and-delete is idempotent, so a release whose connection dropped or timed out is
    /// sent once more (on the re-established connection) before the error is returned, and then
    /// kept trying in the background for a few seconds.
    ///
    /// When the first attempt may have run ([`Error::is_unknown_outcome`]) and the second finds
    /// our token gone (the key free, or a waiter's since) while the lock is still valid, the
    /// outcome is [`ReleaseOutcome::Released`]: `resent_outcome` says why, and why no marker.
    pub(crate) async fn release_node(&self, lock: &Lock) -> Result<ReleaseOutcome> {
        // The retry uses the same connection: after a drop it is the one being re-established.
        let conn = self.conns.conn_for(&lock.token);
        let hold = Hold::mutex(lock.options.fair.on);
        match self.release_on(conn, &lock.key, &lock.token, hold).await {
            // Boxed: a rare path; inline it would enlarge every release's future.
            Err(e) if e.is_retryable() => Box::pin(self.release_node_again(lock, e)).await,
            other => other,
        }
    }

    /// The second attempt of [`release_node`](Self::release_node), after a first one that
    /// failed with `e` (retryable).
    pub(crate) async fn release_node_again(
        &self,
        lock: &Lock,
        e: crate::Error,
    ) -> Result<ReleaseOutcome> {
        tracing::debug!(key = %lock.key, error = %e, "release failed; sending it once more");
        let conn = self.conns.conn_for(&lock.token);
        let hold = Hold::mutex(lock.options.fair.on);
        let again = self.release_on(conn, &lock.key, &lock.token, hold).await;
        if matches!(&again, Err(e) if e.is_retryable()) {
            // Still unreachable: report the error, and keep trying for a few seconds so
            // the lock does not outlive its holder's intent by a whole TTL.
            self.release_in_background(&lock.key, &lock.token, hold);
        }
        again.map(|o| resent_outcome(&e, lock, o))
    }

    /// Compare-and-`PEXPIRE` (the extend of one node, uncounted).
    pub(crate) async fn extend_node(
        &self,
        lock: &mut Lock,
        ttl: Duration,
    ) -> Result<ExtendOutcome> {
        validate_ttl("ttl", ttl)?;
        let conn = self.conns.conn_for(&lock.token);
        let start = Instant::now();
        let ms = ttl_ms(ttl).to_string();
        let v = self
            .conns
            .run_script(
                conn,
                &scripts::EXTEND,
                &[&lock.key],
                &[lock.token.as_bytes(), ms.as_bytes()],
            )
            .await?;
        let outcome = extend_outcome(&v)?;
        if outcome.is_extended() && !lock.renew_if_valid(ttl, start) {
            // Answered after the validity it brought had ended: the lock is lost.
            tracing::debug!(key = %lock.key, "the extend's answer came after its validity ended");
            return Ok(ExtendOutcome::NotHeld);
        }
        Ok(outcome)
    }
}

/// The error to answer instead of `lock` when no more than its `min_validity` is left now
/// ([`LockClient::keep_if_valid`]); `None` when it may be handed back.
fn spent(key: &str, opts: &LockOptions, valid_until: Instant) -> Option<crate::Error> {
    let left = valid_until.saturating_duration_since(Instant::now());
    let min = opts.validity.min;
    (left <= min).then(|| crate::Error::TooLittleValidity {
        key: key.to_string(),
        left,
        min,
    })
}
