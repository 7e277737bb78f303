//! [`RwLock`]: many readers or one writer per key, each holder with its own token and lease
//! (`lua/rw_*.lua`); a writer that waits keeps new readers out.

use std::time::Duration;

use super::LockClient;
use crate::connection::notify::Waiter;
use crate::connection::pool::ClientStats;
use crate::error::{Error, Result};
use crate::keys::companion_key;
use crate::lock::{release_outcome, ExtendOutcome, Hold, Lock, ReleaseOutcome};
use crate::locker::Locker;
use crate::options::LockOptions;
use crate::scripts;

/// The least a waiting writer's claim lasts (see [`RwLock`]).
const MIN_CLAIM: Duration = Duration::from_secs(1);

/// A read-write lock in Redis: many readers or one writer per key, each holder with its own
/// token and lease (TTL), renewable by the watchdog; release and extend only by the holder.
///
/// **No writer starvation.** A writer that finds the lock held leaves a *claim* (left again by
/// each of its attempts, lasting the larger of 1 s and four retry pauses), and no new reader
/// enters while a claim lasts: the readers inside drain and the writer gets in. A writer that
/// gets in clears every claim; one still waiting claims again at its next attempt (readers may
/// enter in between). A writer that gives up leaves its claim to end by itself, so readers
/// may wait up to that long after it. A single attempt ([`try_write`](Self::try_write))
/// leaves no claim.
///
/// **Downgrade** (write → read): [`downgrade`](Self::downgrade) turns a write hold into a read
/// hold under the same token in one step (no writer can slip in between); release it then with
/// [`reader`](Self::reader). **Upgrade** (read → write) is not offered: two readers upgrading
/// at once would wait for each other forever. [`upgrade`](Self::upgrade) says so with
/// [`Error::UpgradeUnsupported`]; release the read hold and acquire for writing instead.
///
/// Keys: the lock's name holds the readers (a sorted set scored by the end of each lease),
/// `{name}:lockkit-writer` the writer's token (its TTL the writer's lease) and
/// `{name}:lockkit-writers` the waiting writers' claims; all three share the name's hash slot
/// (a name with a hash tag keeps its own: `{orders:42}:rw`, `{orders:42}:rw:lockkit-writer`).
/// Every script drops ended leases and keeps each key's TTL at its longest entry.
///
/// ```no_run
/// use std::time::Duration;
/// use lockkit::{LockClient, LockOptions, Locker, RwLock};
/// # async fn demo() -> lockkit::Result<()> {
/// let rw = RwLock::new(LockClient::connect("redis://127.0.0.1:6379").await?);
/// let opts = LockOptions::new(Duration::from_secs(10))?;
/// let read = rw.reader().acquire("rw:catalog", &opts).await?;   // shared
/// rw.reader().release(&read).await?;
/// let mut write = rw.writer().acquire("rw:catalog", &opts).await?; // exclusive
/// rw.downgrade(&mut write).await?;                                // now a reader
/// rw.reader().release(&write).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    client: LockClient,
}

/// One side of an [`RwLock`], as a [`Locker`]: [`RwLock::reader`] takes shared holds,
/// [`RwLock::writer`] exclusive ones. Release and extend a hold through the side that took it.
#[derive(Debug, Clone)]
pub struct RwLocker {
    client: LockClient,
    write: bool,
}

impl RwLock {
    /// Read-write locks over `client`'s connections.
    pub fn new(client: LockClient) -> RwLock {
        RwLock { client }
    }

    /// The client the lock runs over.
    pub fn client(&self) -> &LockClient {
        &self.client
    }

    /// The reading side: shared holds.
    pub fn reader(&self) -> RwLocker {
        RwLocker {
            client: self.client.clone(),
            write: false,
        }
    }

    /// The writing side: exclusive holds.
    pub fn writer(&self) -> RwLocker {
        RwLocker {
            client: self.client.clone(),
            write: true,
        }
    }

    /// One attempt to read `key` for `ttl`: `Ok(None)` while a writer holds it or waits for it.
    ///
    /// # Errors
    /// A bad key or TTL, a Redis error or a timeout.
    pub async fn try_read(&self, key: &str, ttl: Duration) -> Result<Option<Lock>> {
        self.reader().attempt(key, &LockOptions::new(ttl)?).await
    }

    /// One attempt to write `key` for `ttl`: `Ok(None)` while anyone holds it. Leaves no claim.
    ///
    /// # Errors
    /// As [`try_read`](Self::try_read).
    pub async fn try_write(&self, key: &str, ttl: Duration) -> Result<Option<Lock>> {
        let opts = LockOptions::new(ttl)?;
        let attempt = self
            .client
            .attempt_rw(key, &opts, true, Duration::ZERO, None);
        crate::metrics::observe_attempt(self.client.mode(), key, attempt).await
    }

    /// Turns the write hold `lock` into a read hold under the same token, with the same TTL,
    /// in one step; waiting readers are woken. [`Extended`](ExtendOutcome::Extended): it is a
    /// read hold now (release it with [`reader`](Self::reader)); `NotHeld`/`HeldByOther`: the
    /// write hold was lost and nothing changed.
    ///
    /// # Errors
    /// A Redis error or timeout.
    pub async fn downgrade(&self, lock: &mut Lock) -> Result<ExtendOutcome> {
        let writer = companion_key(&lock.key, "writer");
        let channel = self.client.conns.release_channel(&lock.key);
        let mut args: Vec<&[u8]> = Vec::new();
        if let Some(c) = &channel {
            args.push(c.as_bytes());
        }
        let (key, ttl) = (lock.key.clone(), lock.ttl());
        self.client
            .extend_hold(lock, ttl, &scripts::RW_DOWNGRADE, &[&key, &writer], &args)
            .await
    }

    /// Read → write is not offered: always [`Error::UpgradeUnsupported`] (see the type's docs).
    ///
    /// # Errors
    /// Always.
    pub fn upgrade(&self, lock: &Lock) -> Result<Lock> {
        Err(Error::UpgradeUnsupported {
            key: lock.key.clone(),
        })
    }
}

impl RwLocker {
    /// Whether this is the writing side.
    pub fn is_writer(&self) -> bool {
        self.write
    }

    /// One attempt at `key` on this side whose hold comes with a fencing token drawn from the
    /// counter `fence_key`: `Ok(None)` when busy. A single attempt, as
    /// [`RwLock::try_write`]: a writer leaves no claim.
    ///
    /// Readers and writers draw from the one counter, and a writer gets in only when no lease
    /// of anyone is live, so a writer's token is newer than every hold before it. The resource
    /// keeps the highest token of any access, a read's included, and refuses a *write* whose
    /// token is older than that (a writer paused past its lease, after a later reader or
    /// writer came in), and a *read* whose token is older than the highest write's (a reader
    /// paused past its lease, after a writer wrote). A resource that only takes writes
    /// ([`LockClient::fenced_set`]) covers the first half: writers against writers.
    /// `fence_key` has no TTL; in Redis Cluster it must share `key`'s hash tag.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockkit::{LockClient, Locker, RwLock};
    /// # async fn demo() -> lockkit::Result<()> {
    /// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
    /// let writer = RwLock::new(client.clone()).writer();
    /// let ttl = Duration::from_secs(5);
    /// if let Some(w) = writer.try_acquire_fenced("{cat}", "{cat}:fence", ttl).await? {
    ///     let token = w.fencing_token().unwrap();
    ///     client.fenced_set("{cat}:doc", "{cat}:doc:fence", token, b"v2").await?;
    ///     writer.release(&w).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A bad key or TTL, keys in different cluster slots, a Redis error or a timeout.
    pub async fn try_acquire_fenced(
        &self,
        key: &str,
        fence_key: &str,
        ttl: Duration,
    ) -> Result<Option<Lock>> {
        let opts = LockOptions::new(ttl)?;
        self.client.check_fence_key(key, fence_key)?;
        let attempt =
            self.client
                .attempt_rw(key, &opts, self.write, Duration::ZERO, Some(fence_key));
        crate::metrics::observe_attempt(self.mode(), key, attempt).await
    }

    /// [`try_acquire_fenced`](Self::try_acquire_fenced) with full options, as one attempt of
    /// the retry loop ([`Locker::attempt`]): a writer that finds the lock busy leaves its
    /// claim, so readers coming and going can not keep it out. The retry policy itself is not
    /// used (one attempt).
    ///
    /// # Errors
    /// As [`try_acquire_fenced`](Self::try_acquire_fenced).
    pub async fn try_acquire_fenced_with(
        &self,
        key: &str,
        fence_key: &str,
        opts: &LockOptions,
    ) -> Result<Option<Lock>> {
        self.client.check_fence_key(key, fence_key)?;
        let attempt =
            self.client
                .attempt_rw(key, opts, self.write, claim_for(opts), Some(fence_key));
        crate::metrics::observe_attempt(self.mode(), key, attempt).await
    }

    fn hold(&self) -> Hold {
        if self.write {
            Hold::Write
        } else {
            Hold::Read
        }
    }

    fn side(&self) -> &'static [u8] {
        if self.write {
            b"write"
        } else {
            b"read"
        }
    }
}

impl Locker for RwLocker {
    async fn attempt(&self, key: &str, opts: &LockOptions) -> Result<Option<Lock>> {
        let attempt = self
            .client
            .attempt_rw(key, opts, self.write, claim_for(opts), None);
        crate::metrics::observe_attempt(self.mode(), key, attempt).await
    }

    async fn release(&self, lock: &Lock) -> Result<ReleaseOutcome> {
        let release = self.client.release_hold(lock, self.hold());
        crate::metrics::observe_release(self.mode(), lock, release).await
    }

    async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<ExtendOutcome> {
        let key = lock.key.clone();
        let writer = companion_key(&key, "writer");
        let (keys, args) = ([key.as_str(), writer.as_str()], [self.side()]);
        let extend = self
            .client
            .extend_hold(lock, ttl, &scripts::RW_EXTEND, &keys, &args);
        crate::metrics::observe_extend(self.mode(), &key, extend).await
    }

    fn mode(&self) -> &'static str {
        self.client.mode()
    }

    fn stats(&self) -> ClientStats {
        self.client.stats()
    }

    /// Woken by a release or a downgrade; polling the retry pause between them.
    fn waiter(&self, key: &str) -> Waiter {
        self.client.shared_waiter(key)
    }
}

/// How long a waiting writer's claim lasts: the larger of 1 s and four retry pauses.
fn claim_for(opts: &LockOptions) -> Duration {
    MIN_CLAIM.max((opts.retry.delay + opts.retry.jitter) * 4)
}

impl LockClient {
    /// One attempt at `key` for reading or (`write`) writing; a writer that finds it busy
    /// leaves a claim of `claim` (none when zero). With `fence_key`, the hold draws a fencing
    /// token from that counter.
    pub(crate) async fn attempt_rw(
        &self,
        key: &str,
        opts: &LockOptions,
        write: bool,
        claim: Duration,
        fence_key: Option<&str>,
    ) -> Result<Option<Lock>> {
        let writer = companion_key(key, "writer");
        let waiting = companion_key(key, "writers");
        let claim_ms = crate::lock::ttl_ms(claim).to_string();
        let (hold, args): (Hold, &[&[u8]]) = if write {
            (Hold::Write, &[b"write", claim_ms.as_bytes()])
        } else {
            (Hold::Read, &[b"read"])
        };
        let all: [&str; 4] = [key, &writer, &waiting, fence_key.unwrap_or_default()];
        let keys = if fence_key.is_some() {
            &all[..]
        } else {
            &all[..3]
        };
        self.attempt_shared(key, opts, hold, &scripts::RW_ACQUIRE, keys, args)
            .await
    }

    /// The release script of a read-write lock's hold (`rw_release.lua`).
    pub(crate) async fn release_rw(
        &self,
        conn: &super::Conn,
        key: &str,
        token: &str,
        write: bool,
    ) -> Result<ReleaseOutcome> {
        let writer = companion_key(key, "writer");
        let channel = self.conns.release_channel(key);
        let side: &[u8] = if write { b"write" } else { b"read" };
        let mut args: Vec<&[u8]> = vec![token.as_bytes(), side];
        if let Some(c) = &channel {
            args.push(c.as_bytes());
        }
        let v = self
            .conns
            .run_script(conn, &scripts::RW_RELEASE, &[key, &writer], &args)
            .await?;
        release_outcome(&v)
    }
}
