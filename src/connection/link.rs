//! One pipelined connection to one server, re-established when it drops.
//!
//! This replaces redis-rs's `ConnectionManager` → `MultiplexedConnection` stack on the hot path
//! (the stack stays for pub/sub and Redis Cluster). redis-rs still encodes every command
//! ([`Cmd::write_packed_command`]) and builds the reply [`Value`]s of every kind this file does
//! not read itself; what changes is the plumbing between the caller and the socket:
//!
//! - a call appends its encoded command straight to the connection's output buffer and queues
//!   a reply slot, under one short lock: no per-call buffer, no channel, no `Shared` future;
//! - one driver task per connection writes whatever has queued up since its last write in one
//!   system call, and hands out replies in order;
//! - the response timeout is one timer per connection, not one per call. Requests go out and
//!   are answered in order, so the timer only ever waits for the oldest request still waiting;
//!   a request that outlives the timeout fails with a timeout (an unknown outcome) and stays in
//!   line, so that its late reply, should it come, is read and dropped, never taken for the
//!   answer to another call (as redis-rs does).
//!
//! A connection that fails (closed by the server, an I/O error, a reply it cannot read) fails every call in
//! flight on it, as redis-rs did; the next call reconnects, with up to
//! `ClientOptions::reconnect_retries` retries and an exponential back-off from 100 ms.
//!
//! A reconnect is one attempt per connection, shared: the first caller that finds no live
//! socket starts it as a task of its own, and every caller that comes while it runs waits for
//! the same outcome (a failure is every waiter's error). A caller dropped on the way (its own
//! timeout, a Redlock vote's node timeout) does not cut the attempt short, so the next caller
//! does not start another: against a server that accepts TCP and never answers, calls that
//! each give up after a few milliseconds share one attempt at a time (each connect in it ends
//! at the connect timeout), instead of making one connect each.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, ConnectionInfo, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, Sleep};

use super::connector::{invalid, Connector, ServerStream};
use crate::error::{not_sent, unsent};
use crate::resp::{frame_len, parse_frame};

/// Numbers every connection this process makes, so that a number names one connection (and so
/// one server process) for good: see [`Link::query_on`].
static EPOCHS: AtomicU64 = AtomicU64::new(1);

/// A connection on which this many requests in a row timed out with nothing read, over at least
/// [`silence_limit`], is taken for dead and replaced: a peer gone without a reset (a host that
/// died, a NAT or load-balancer entry dropped, a failover behind a virtual IP) otherwise leaves
/// every call timing out until the kernel gives up on the socket, about 15 minutes.
const SILENT_TIMEOUTS: usize = 3;

/// How long a connection must have been silent (see [`SILENT_TIMEOUTS`]) before it is
/// replaced: two response timeouts, and at least a second, so that one burst of calls timing
/// out together on a briefly busy server does not cost the connection.
fn silence_limit(response_timeout: Duration) -> Duration {
    (response_timeout * 2).max(Duration::from_secs(1))
}

/// How many bytes of commands may wait for a server that does not read them (a frozen server, a
/// black-holed network) before further calls fail at once, unsent.
const MAX_BACKLOG: usize = 4 << 20;

/// How long after a connection was given up with requests in flight one of them may still
/// reach the server, as far as lockkit counts: the connection is aborted (`SO_LINGER` 0), so
/// our kernel drops what it had queued at once instead of retransmitting it for up to
/// `TCP_USER_TIMEOUT` (30 s, `connector.rs`); this bound covers that span and some margin, for
/// bytes some middlebox had already acknowledged. An acquire's clean-up keeps watching its key
/// this long ([`Link::late_delivery_until`]).
pub(crate) const LATE_DELIVERY: Duration = Duration::from_secs(35);

/// When a connection of a link was last given up with requests in flight (shared by the
/// link's endpoint and every driver it starts).
type GaveUp = Arc<Mutex<Option<std::time::Instant>>>;

/// Where and how to connect, read once from the URL and the client's options.
#[derive(Clone)]
pub(crate) struct Endpoint {
    connector: Connector,
    connect_timeout: Duration,
    response_timeout: Option<Duration>,
    retries: usize,
    /// Whether a connection that has gone silent is replaced ([`SILENT_TIMEOUTS`]).
    replace_silent: bool,
    /// The link's record of connections given up with requests in flight.
    gave_up: GaveUp,
}

impl Endpoint {
    pub(crate) fn new(
        info: ConnectionInfo,
        tls_root_ca: Option<&[u8]>,
        connect_timeout: Duration,
        response_timeout: Option<Duration>,
        retries: usize,
    ) -> RedisResult<Endpoint> {
        Ok(Endpoint {
            connector: Connector::new(info, tls_root_ca)?,
            connect_timeout,
            response_timeout,
            retries,
            replace_silent: true,
            gave_up: GaveUp::default(),
        })
    }

    /// This endpoint with a record of given-up connections of its own: one per link.
    fn for_one_link(mut self) -> Endpoint {
        self.gave_up = GaveUp::default();
        self
    }

    /// Keeps a silent connection (a test of what happens on it meanwhile).
    #[cfg(test)]
    fn keeping_silent_connections(mut self) -> Endpoint {
        self.replace_silent = false;
        self
    }

    /// One connection, logged in, on the URL's database, within the connect timeout.
    async fn connect_once(&self) -> RedisResult<(Arc<Wire>, Driver)> {
        match tokio::time::timeout(self.connect_timeout, self.connect_inner()).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connecting: no answer within {:?}", self.connect_timeout),
            )
            .into()),
        }
    }

    async fn connect_inner(&self) -> RedisResult<(Arc<Wire>, Driver)> {
        let stream = self.connector.connect().await?;
        let wire = Arc::new(Wire {
            epoch: EPOCHS.fetch_add(1, Ordering::Relaxed),
            ..Wire::default()
        });
        let driver = Driver {
            stream,
            wire: wire.clone(),
            rbuf: vec![0; 16 * 1024],
            rlen: 0,
            wbuf: Vec::with_capacity(16 * 1024),
            wpos: 0,
            timeout: self.response_timeout,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed: false,
            deferred: false,
            replace_silent: self.replace_silent,
            silent_timeouts: 0,
            silent_since: None,
            gave_up: self.gave_up.clone(),
            ended: false,
        };
        Ok((wire, driver))
    }

    /// A connection, retrying a failed attempt up to `retries` times with a doubling pause.
    async fn connect(&self) -> RedisResult<Arc<Wire>> {
        let mut pause = Duration::from_millis(100);
        let mut attempt = 0;
        loop {
            match self.connect_once().await {
                Ok((wire, driver)) => {
                    tokio::spawn(driver);
                    return Ok(wire);
                }
                // A refused login or an unknown database does not get better by retrying.
                Err(e)
                    if attempt >= self.retries
                        || e.code().is_some()
                        || e.kind() == redis::ErrorKind::AuthenticationFailed =>
                {
                    return Err(e)
                }
                Err(_) => {
                    attempt += 1;
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

/// A connection that reconnects: cheap to clone, shared by every clone.
#[derive(Clone)]
pub(crate) struct Link {
    inner: Arc<LinkInner>,
}

struct LinkInner {
    endpoint: Endpoint,
    current: Mutex<Option<Arc<Wire>>>,
    /// The connect attempt under way, if any (locked before `current` when both are).
    attempt: Mutex<Option<Attempt>>,
}

/// Where a connect attempt's outcome appears (`None` until it ends).
type Attempt = watch::Receiver<Option<RedisResult<Arc<Wire>>>>;

impl Drop for LinkInner {
    fn drop(&mut self) {
        if let Some(wire) = self.current.get_mut().ok().and_then(Option::take) {
            wire.close();
        }
    }
}

impl Link {
    /// Connects now (errors are the caller's).
    pub(crate) async fn connect(endpoint: Endpoint) -> RedisResult<Link> {
        let endpoint = endpoint.for_one_link();
        let wire = endpoint.connect().await?;
        Ok(Link::with(endpoint, Some(wire)))
    }

    /// Connects on first use.
    pub(crate) fn lazy(endpoint: Endpoint) -> Link {
        Link::with(endpoint.for_one_link(), None)
    }

    /// Until when a command sent on this link at `sent` may still reach the server late:
    /// `Some` when one of its connections was given up with requests in flight after `sent`
    /// (its clean-up, sent over a newer connection, may have overtaken it), for
    /// [`LATE_DELIVERY`] from then; `None` when no connection was given up since.
    pub(crate) fn late_delivery_until(
        &self,
        sent: std::time::Instant,
    ) -> Option<std::time::Instant> {
        let at = (*lock(&self.inner.endpoint.gave_up))?;
        (at >= sent).then(|| at + LATE_DELIVERY)
    }

    fn with(endpoint: Endpoint, wire: Option<Arc<Wire>>) -> Link {
        Link {
            inner: Arc::new(LinkInner {
                endpoint,
                current: Mutex::new(wire),
                attempt: Mutex::new(None),
            }),
        }
    }

    /// A new connection (or the one another caller just opened): the outcome of the connect
    /// attempt under way, or of one started now.
    async fn reconnect(&self) -> RedisResult<Arc<Wire>> {
        let mut outcome = {
            let mut attempt = lock(&self.inner.attempt);
            if let Some(w) = self.live() {
                return Ok(w);
            }
            match &*attempt {
                // A closed channel with the slot still set: the task was dropped before it
                // ended (its runtime shut down), so start another.
                Some(rx) if !rx.is_closed() => rx.clone(),
                _ => {
                    let (tx, rx) = watch::channel(None);
                    *attempt = Some(rx.clone());
                    tokio::spawn(Link::attempt(
                        Arc::downgrade(&self.inner),
                        self.inner.endpoint.clone(),
                        tx,
                    ));
                    rx
                }
            }
        };
        // A caller waits for the attempt at most its response timeout (the attempt goes on for
        // the next caller): its own deadline is never stretched by connect cycles.
        let wait = outcome.wait_for(Option::is_some);
        let waited = match self.inner.endpoint.response_timeout {
            Some(limit) => match tokio::time::timeout(limit, wait).await {
                Ok(w) => w,
                Err(_) => {
                    return Err(not_sent(
                        io::ErrorKind::TimedOut,
                        format!("connecting: no connection within {limit:?}; not sent"),
                    ))
                }
            },
            None => wait.await,
        };
        let done = match waited.as_deref() {
            Ok(Some(done)) => done.clone(),
            _ => Err(not_sent(
                io::ErrorKind::ConnectionReset,
                "the connect attempt was dropped before it ended; not sent",
            )),
        };
        done.map_err(unsent)
    }

    /// One connect attempt, run to its end whoever still waits for it: the new connection
    /// becomes the link's (closed at once if the link is gone), and the outcome goes to every
    /// waiter.
    async fn attempt(
        link: Weak<LinkInner>,
        endpoint: Endpoint,
        tx: watch::Sender<Option<RedisResult<Arc<Wire>>>>,
    ) {
        let outcome = endpoint.connect().await;
        match link.upgrade() {
            Some(inner) => {
                let mut attempt = lock(&inner.attempt);
                if let Ok(wire) = &outcome {
                    *lock(&inner.current) = Some(wire.clone());
                }
                *attempt = None;
            }
            None => {
                if let Ok(wire) = &outcome {
                    wire.close();
                }
            }
        }
        tx.send_replace(Some(outcome));
    }

    fn live(&self) -> Option<Arc<Wire>> {
        lock(&self.inner.current)
            .as_ref()
            .filter(|w| !w.dead.load(Ordering::Acquire))
            .cloned()
    }

    /// Sends what `write` encodes; `waiter` says what it waits for and where the answer goes. A
    /// connection found dead before anything was sent is replaced and the request goes out on
    /// the new one. The answer comes with the number of the connection it went out on
    /// ([`query_on`](Self::query_on)).
    async fn request<T>(
        &self,
        write: impl Fn(&mut Vec<u8>),
        waiter: impl Fn(Answer<T>) -> Waiter,
    ) -> RedisResult<(T, u64)> {
        let mut tries = 0;
        let rx = loop {
            // Sent under the lock of the current connection, which it does not outlive: no
            // reference to it is taken and given back for every call.
            let sent = {
                let current = lock(&self.inner.current);
                current
                    .as_ref()
                    .filter(|w| !w.dead.load(Ordering::Acquire))
                    .map(|w| (w.send(&write, &waiter), w.epoch))
            };
            let (sent, epoch) = match sent {
                Some(sent) => sent,
                // Boxed: reconnecting is rare, and inline it would enlarge every call's future.
                None => {
                    let w = Box::pin(self.reconnect()).await?;
                    (w.send(&write, &waiter), w.epoch)
                }
            };
            match sent {
                Ok(rx) => break (rx, epoch),
                Err(Refused::Dead) if tries == 0 => tries += 1,
                Err(Refused::Dead) => {
                    return Err(not_sent(
                        io::ErrorKind::ConnectionReset,
                        "the connection closed before the request was sent",
                    ))
                }
                Err(Refused::Backlog) => {
                    return Err(not_sent(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the server has not read the last {} MiB of requests (backlog full); \
                             this one was not sent",
                            MAX_BACKLOG >> 20
                        ),
                    ))
                }
            }
        };
        let (rx, epoch) = rx;
        match rx.await {
            Ok(reply) => reply.map(|v| (v, epoch)),
            Err(_) => Err(dropped("the connection closed before the reply came")),
        }
    }

    /// The number of the live connection (`None` while there is none): a connection made
    /// later has another number.
    pub(crate) fn epoch(&self) -> Option<u64> {
        self.live().map(|w| w.epoch)
    }
}

fn dropped(what: &str) -> RedisError {
    io::Error::new(io::ErrorKind::ConnectionReset, what.to_string()).into()
}

/// Why a request was not sent.
enum Refused {
    Dead,
    Backlog,
}

/// Where a request's answer goes.
type Answer<T> = oneshot::Sender<RedisResult<T>>;

/// What a request waits for, what it has read so far, and who waits for its answer (`None`
/// once the request failed with a timeout: its replies are still read, and dropped).
enum Waiter {
    One(Option<Answer<Value>>),
    /// A pipeline: `skip` replies to drop (a transaction's `MULTI` and `QUEUED`s), then `take`.
    Many {
        to: Option<Answer<Vec<Value>>>,
        skip: usize,
        take: usize,
        transaction: bool,
        seen: usize,
        got: Vec<Value>,
        /// A transaction's first error among the skipped replies.
        error: Option<redis::ServerError>,
    },
}

impl Waiter {
    fn many(to: Answer<Vec<Value>>, skip: usize, take: usize, transaction: bool) -> Waiter {
        Waiter::Many {
            to: Some(to),
            skip,
            take,
            transaction,
            seen: 0,
            got: Vec::new(),
            error: None,
        }
    }

    /// Takes the next reply; `true` once the request has all of its replies and its answer
    /// went out.
    fn accept(&mut self, value: Value) -> bool {
        match self {
            Waiter::One(to) => {
                if let Some(to) = to.take() {
                    let _ = to.send(Ok(value));
                }
                true
            }
            Waiter::Many {
                to,
                skip,
                take,
                transaction,
                seen,
                got,
                error,
            } => {
                *seen += 1;
                if *seen > *skip {
                    got.push(value);
                } else if let Value::ServerError(e) = value {
                    if *transaction && error.is_none() {
                        *error = Some(e);
                    }
                }
                if *seen < *skip + *take {
                    return false;
                }
                if let Some(to) = to.take() {
                    let _ = to.send(match error.take() {
                        Some(e) => Err(e.into()),
                        None => Ok(std::mem::take(got)),
                    });
                }
                true
            }
        }
    }

    /// Answers with an error (unless it was answered already).
    fn fail(&mut self, err: impl FnOnce() -> RedisError) {
        match self {
            Waiter::One(to) => {
                if let Some(to) = to.take() {
                    let _ = to.send(Err(err()));
                }
            }
            Waiter::Many { to, .. } => {
                if let Some(to) = to.take() {
                    let _ = to.send(Err(err()));
                }
            }
        }
    }
}

impl Link {
    /// One command's reply (a server error still as a value, as `req_packed_command` gives it).
    pub(crate) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        self.query_with(|out| cmd.write_packed_command(out)).await
    }

    /// One command's reply, the command encoded by `write` into the write buffer.
    pub(crate) async fn query_with(&self, write: impl Fn(&mut Vec<u8>)) -> RedisResult<Value> {
        self.request(write, |to| Waiter::One(Some(to)))
            .await
            .map(|(v, _)| v)
    }

    /// [`query_with`](Self::query_with), with the number of the connection the command went
    /// out on. Every connection the process makes gets a new number, so two replies with one
    /// number came from one server process: what Redlock's restart rule needs to know that the
    /// node it read the start time of is the one that answered its `SET`.
    pub(crate) async fn query_on(&self, write: impl Fn(&mut Vec<u8>)) -> RedisResult<(Value, u64)> {
        self.request(write, |to| Waiter::One(Some(to))).await
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.query(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let packed = pipeline.get_packed_pipeline();
            let transaction = pipeline.is_transaction();
            self.request(
                |out| out.extend_from_slice(&packed),
                |to| Waiter::many(to, offset, count, transaction),
            )
            .await
            .map(|(v, _)| v)
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.endpoint.connector.info().redis_settings().db()
    }
}

/// The state a connection's callers and its driver share.
#[derive(Default)]
struct Wire {
    /// This connection's number, unique in the process ([`Link::query_on`]).
    epoch: u64,
    queue: Mutex<Queue>,
    /// Set once, when the connection failed or closed; read without the lock.
    dead: AtomicBool,
}

#[derive(Default)]
struct Queue {
    /// Encoded commands the driver has not taken yet.
    out: Vec<u8>,
    /// Requests in the order they were queued, each waiting for its replies.
    pending: VecDeque<Pending>,
    /// How many of `pending` the driver has written.
    written: usize,
    /// How many of `pending`, from the front, carry the time they were queued (the driver
    /// stamps new ones with one clock read: when it takes them to write, or when it finds the
    /// socket full).
    stamped: usize,
    /// The driver, when it waits for something to write.
    driver: Option<Waker>,
    /// How many of `pending`, from the front, already failed with a timeout (their replies are
    /// still to be read and dropped).
    expired: usize,
    /// The last handle is gone: finish and close.
    closing: bool,
    dead: bool,
}

struct Pending {
    waiter: Waiter,
    /// When it was queued (as the driver stamped it, see [`Queue::stamped`]): its response
    /// timeout counts from here, written or not (a request still waiting in `out` behind a
    /// server that reads nothing times out too).
    queued: Option<Instant>,
}

impl Queue {
    /// Stamps the requests queued since the last stamp with the time now: one clock read for
    /// all of them, instead of one per call.
    fn stamp(&mut self) {
        if self.stamped == self.pending.len() {
            return;
        }
        let now = Instant::now();
        let from = self.stamped;
        for p in self.pending.range_mut(from..) {
            p.queued = Some(now);
        }
        self.stamped = self.pending.len();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Wire {
    /// Queues one request; refused (nothing sent) if the connection is dead or the server has
    /// left [`MAX_BACKLOG`] bytes unread.
    fn send<T>(
        &self,
        write: &impl Fn(&mut Vec<u8>),
        waiter: &impl Fn(Answer<T>) -> Waiter,
    ) -> Result<oneshot::Receiver<RedisResult<T>>, Refused> {
        let (tx, rx) = oneshot::channel();
        let waker = {
            let mut q = lock(&self.queue);
            if q.dead {
                return Err(Refused::Dead);
            }
            if q.out.len() >= MAX_BACKLOG {
                return Err(Refused::Backlog);
            }
            write(&mut q.out);
            q.pending.push_back(Pending {
                waiter: waiter(tx),
                queued: None,
            });
            q.driver.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(rx)
    }

    fn close(&self) {
        let waker = {
            let mut q = lock(&self.queue);
            q.closing = true;
            q.driver.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Fails every request in flight with `err` and marks the connection dead.
    fn fail(&self, err: impl Fn() -> RedisError) {
        let pending = {
            let mut q = lock(&self.queue);
            q.dead = true;
            q.written = 0;
            q.stamped = 0;
            q.expired = 0;
            q.out = Vec::new();
            std::mem::take(&mut q.pending)
        };
        self.dead.store(true, Ordering::Release);
        for mut p in pending {
            p.waiter.fail(&err);
        }
    }
}

/// The task that owns the socket: writes what callers queued, reads and hands out replies,
/// and watches the oldest request's age.
struct Driver {
    stream: ServerStream,
    wire: Arc<Wire>,
    /// Read bytes are `rbuf[..rlen]`; the rest is room for the next read.
    rbuf: Vec<u8>,
    rlen: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    timeout: Option<Duration>,
    timer: Pin<Box<Sleep>>,
    armed: bool,
    /// Writing was put off to the next poll (see [`Driver::write`]).
    deferred: bool,
    /// Whether a silent connection is given up ([`SILENT_TIMEOUTS`]).
    replace_silent: bool,
    /// Requests that timed out since anything was last read.
    silent_timeouts: usize,
    /// When the first of them timed out.
    silent_since: Option<Instant>,
    /// Where the link notes a connection given up with requests in flight.
    gave_up: GaveUp,
    /// The driver has run to its end (rather than being dropped midway).
    ended: bool,
}

/// A driver dropped before it finished (the runtime it ran on shut down: a `static` client
/// first used by one `#[tokio::test]`, a runtime per request in a sync wrapper) takes its
/// connection with it: every call waiting on it fails now, as it would at its response timeout
/// (whose timer was the driver's), and the next call connects again on its own runtime. The
/// connection is given up as a silent one is ([`Driver::give_up`]).
impl Drop for Driver {
    fn drop(&mut self) {
        if !self.ended {
            self.give_up();
        }
        self.wire
            .fail(|| dropped("the connection's task is gone (its runtime shut down)"));
    }
}

enum Step {
    Progress,
    Idle,
    Done,
}

impl Future for Driver {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let mut may_write = std::mem::take(&mut this.deferred);
        // Bounded, so that one busy connection cannot starve the runtime's other tasks.
        for _ in 0..32 {
            let wrote = match this.write(cx, &mut may_write) {
                Step::Done => return this.end(),
                s => s,
            };
            let read = match this.read(cx) {
                Step::Done => return this.end(),
                s => s,
            };
            if this.check_timeout(cx) {
                this.give_up();
                this.ended = true;
                let silent = this.silent_timeouts;
                this.wire.fail(|| {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the connection went silent ({silent} requests in a row had no \
                             reply); it is replaced"
                        ),
                    )
                    .into()
                });
                return Poll::Ready(());
            }
            if matches!((wrote, read), (Step::Idle, Step::Idle)) {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Driver {
    /// The connection ended on its own: closed by the server or the client, an I/O error, or
    /// given up after a reply it could not read.
    fn end(&mut self) -> Poll<()> {
        self.ended = true;
        Poll::Ready(())
    }

    /// Gives the connection up while it may still be open: aborts the socket, so that the
    /// kernel drops what it still had queued (a graceful close would go on delivering it, for
    /// up to `TCP_USER_TIMEOUT` into a black hole), and notes the time on the link when
    /// requests were in flight: a command among them may still reach the server late through a
    /// middlebox, after its clean-up ran on another connection ([`Link::late_delivery_until`]).
    fn give_up(&mut self) {
        let in_flight = self.wpos < self.wbuf.len() || {
            let q = lock(&self.wire.queue);
            !q.pending.is_empty() || !q.out.is_empty()
        };
        if in_flight {
            *lock(&self.gave_up) = Some(std::time::Instant::now());
        }
        self.stream.abort();
    }

    /// Writes what callers queued. The first time new requests are found in a poll, writing
    /// them is put off once: the driver re-queues itself behind the tasks that are ready to
    /// run (typically the callers its last replies woke), so that their requests go out in the
    /// same system call instead of one by one. Fewer, larger writes cost the client and the
    /// server less CPU per request.
    fn write(&mut self, cx: &mut Context<'_>, may_write: &mut bool) -> Step {
        let mut progress = false;
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
            let mut q = lock(&self.wire.queue);
            if q.dead {
                return Step::Done;
            }
            if q.out.is_empty() {
                if q.closing && q.pending.is_empty() {
                    drop(q);
                    self.wire.fail(|| dropped("the client was dropped"));
                    return Step::Done;
                }
                match &q.driver {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => q.driver = Some(cx.waker().clone()),
                }
                return Step::Idle;
            }
            if !*may_write {
                if !self.deferred {
                    self.deferred = true;
                    cx.waker().wake_by_ref();
                }
                return Step::Idle;
            }
            *may_write = false;
            std::mem::swap(&mut q.out, &mut self.wbuf);
            q.written = q.pending.len();
            q.stamp();
        }
        while self.wpos < self.wbuf.len() {
            match Pin::new(&mut self.stream).poll_write(cx, &self.wbuf[self.wpos..]) {
                Poll::Ready(Ok(0)) => {
                    self.wire
                        .fail(|| dropped("the connection closed while writing"));
                    return Step::Done;
                }
                Poll::Ready(Ok(n)) => {
                    self.wpos += n;
                    progress = true;
                }
                Poll::Ready(Err(e)) => {
                    let kind = e.kind();
                    let text = e.to_string();
                    self.wire
                        .fail(|| io::Error::new(kind, format!("writing: {text}")).into());
                    return Step::Done;
                }
                Poll::Pending => {
                    // The socket is full (a server that reads nothing): calls queued meanwhile
                    // must wake this driver, which arms their response timeout.
                    let mut q = lock(&self.wire.queue);
                    q.stamp();
                    match &q.driver {
                        Some(w) if w.will_wake(cx.waker()) => {}
                        _ => q.driver = Some(cx.waker().clone()),
                    }
                    break;
                }
            }
        }
        if let Poll::Ready(Err(e)) = Pin::new(&mut self.stream).poll_flush(cx) {
            let kind = e.kind();
            let text = e.to_string();
            self.wire
                .fail(|| io::Error::new(kind, format!("writing: {text}")).into());
            return Step::Done;
        }
        if progress {
            Step::Progress
        } else {
            Step::Idle
        }
    }

    fn read(&mut self, cx: &mut Context<'_>) -> Step {
        if self.rbuf.len() - self.rlen < 4096 {
            let grown = self.rbuf.len() * 2;
            self.rbuf.resize(grown, 0);
        }
        let filled = {
            let mut buf = ReadBuf::new(&mut self.rbuf[self.rlen..]);
            match Pin::new(&mut self.stream).poll_read(cx, &mut buf) {
                Poll::Pending => return Step::Idle,
                Poll::Ready(Err(e)) => {
                    let kind = e.kind();
                    let text = e.to_string();
                    self.wire
                        .fail(|| io::Error::new(kind, format!("reading: {text}")).into());
                    return Step::Done;
                }
                Poll::Ready(Ok(())) => buf.filled().len(),
            }
        };
        if filled == 0 {
            self.wire
                .fail(|| dropped("the server closed the connection"));
            return Step::Done;
        }
        self.rlen += filled;
        self.silent_timeouts = 0;
        self.silent_since = None;
        match self.deliver() {
            Ok(()) => Step::Progress,
            Err(e) => {
                // Out of step with the server, whose connection is still open: what is in
                // flight on it still runs, after clean-ups sent over the next one.
                self.give_up();
                let text = e.to_string();
                self.wire.fail(|| {
                    io::Error::new(io::ErrorKind::InvalidData, format!("bad reply: {text}")).into()
                });
                Step::Done
            }
        }
    }

    /// Parses every complete reply in the read buffer and hands each to its request.
    fn deliver(&mut self) -> RedisResult<()> {
        let mut at = 0;
        let mut q = lock(&self.wire.queue);
        while let Some(len) = frame_len(&self.rbuf[at..self.rlen])? {
            let frame = &self.rbuf[at..at + len];
            at += len;
            if frame[0] == b'>' {
                continue; // a RESP3 push (no request waits for it)
            }
            let value = parse_frame(frame)?;
            if q.written == 0 {
                return Err(invalid("a reply came that no request waits for"));
            }
            let p = q.pending.front_mut().expect("written requests are pending");
            if p.waiter.accept(value) {
                q.pending.pop_front();
                q.written -= 1;
                q.stamped = q.stamped.saturating_sub(1);
                q.expired = q.expired.saturating_sub(1);
            }
        }
        drop(q);
        self.rbuf.copy_within(at..self.rlen, 0);
        self.rlen -= at;
        Ok(())
    }

    /// Fails the requests that outlived the response timeout. The one timer waits for the
    /// oldest request not yet failed; it is not moved as replies come, so it may fire early,
    /// and then re-arms for whichever request is oldest by then. `true` when the connection has
    /// gone silent and must be replaced ([`SILENT_TIMEOUTS`]).
    fn check_timeout(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(timeout) = self.timeout else {
            return false;
        };
        loop {
            if !self.armed {
                let q = lock(&self.wire.queue);
                // Not stamped yet: the driver stamps it when it writes it or finds the socket
                // full, then arms the timer.
                let Some(queued) = q.pending.get(q.expired).and_then(|p| p.queued) else {
                    return false;
                };
                drop(q);
                self.timer.as_mut().reset(queued + timeout);
                self.armed = true;
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            self.armed = false;
            let now = Instant::now();
            let mut q = lock(&self.wire.queue);
            let from = q.expired;
            let mut failed = 0;
            for p in q.pending.range_mut(from..) {
                match p.queued {
                    Some(queued) if queued + timeout <= now => {
                        p.waiter.fail(|| {
                            io::Error::new(
                                io::ErrorKind::TimedOut,
                                format!("no reply within {timeout:?}"),
                            )
                            .into()
                        });
                        failed += 1;
                    }
                    _ => break,
                }
            }
            q.expired += failed;
            drop(q);
            if failed > 0 && self.replace_silent {
                let since = *self.silent_since.get_or_insert(now);
                self.silent_timeouts += failed;
                // The first of them had waited a response timeout already.
                if self.silent_timeouts >= SILENT_TIMEOUTS
                    && now - since + timeout >= silence_limit(timeout)
                {
                    return true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockkit_test_support::{connections_received, connects_while_frozen};

    fn endpoint(url: &str, response_timeout: Option<Duration>) -> Endpoint {
        let info = crate::url::parse_url(url).unwrap();
        Endpoint::new(info, None, Duration::from_secs(2), response_timeout, 0).unwrap()
    }

    async fn link_to(
        server: &lockkit_test_support::RedisServer,
        response_timeout: Option<Duration>,
    ) -> Link {
        Link::connect(endpoint(&server.url(), response_timeout))
            .await
            .unwrap()
    }

    async fn query<T: redis::FromRedisValue>(link: &Link, cmd: &mut Cmd) -> RedisResult<T> {
        cmd.query_async(&mut link.clone()).await
    }

    #[tokio::test]
    async fn concurrent_calls_each_get_their_own_reply() {
        let server = lockkit_test_support::RedisServer::start();
        let link = link_to(&server, Some(Duration::from_secs(5))).await;
        let calls = (0..2_000).map(|i| {
            let link = link.clone();
            async move {
                let key = format!("k{i}");
                let value = format!("v{i}-{}", "x".repeat(i % 97));
                let () = query(&link, redis::cmd("SET").arg(&key).arg(&value))
                    .await
                    .unwrap();
                let got: String = query(&link, redis::cmd("GET").arg(&key)).await.unwrap();
                assert_eq!(got, value);
                i
            }
        });
        let done = futures_util::future::join_all(calls).await;
        assert_eq!(done.len(), 2_000);
        // A pipeline: its replies in order, as one call.
        let mut pipe = redis::pipe();
        pipe.cmd("GET")
            .arg("k1")
            .cmd("GET")
            .arg("k2")
            .cmd("INCR")
            .arg("n");
        let (a, b, n): (String, String, i64) = pipe.query_async(&mut link.clone()).await.unwrap();
        assert_eq!((a.as_str(), b.as_str(), n), ("v1-x", "v2-xx", 1));
        // A reply larger than the read buffer arrives in pieces.
        let big = "y".repeat(3 << 20);
        let () = query(&link, redis::cmd("SET").arg("big").arg(&big))
            .await
            .unwrap();
        let got: String = query(&link, redis::cmd("GET").arg("big")).await.unwrap();
        assert_eq!(got.len(), big.len());
    }

    #[tokio::test]
    async fn a_transaction_answers_with_its_replies_or_its_first_queueing_error() {
        let server = lockkit_test_support::RedisServer::start();
        let link = link_to(&server, Some(Duration::from_secs(5))).await;
        let mut tx = redis::pipe();
        tx.atomic().cmd("SET").arg("t").arg(5).cmd("INCR").arg("t");
        let (set, n): (String, i64) = tx.query_async(&mut link.clone()).await.unwrap();
        assert_eq!((set.as_str(), n), ("OK", 6));
        // Refused while queueing: the transaction is aborted, the refusal is the answer.
        let mut bad = redis::pipe();
        bad.atomic().cmd("INCR").arg("t").cmd("NO-SUCH-COMMAND");
        let err = bad
            .query_async::<Value>(&mut link.clone())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("unknown command"), "{err}");
        // Every reply of both was read: the next call gets its own.
        let n: i64 = query(&link, redis::cmd("GET").arg("t")).await.unwrap();
        assert_eq!(n, 6);
    }

    #[tokio::test]
    async fn a_late_reply_is_never_taken_for_the_next_calls_answer() {
        let server = lockkit_test_support::RedisServer::start();
        server.inline("SET k mine").unwrap();
        let link = link_to(&server, Some(Duration::from_millis(100))).await;
        // Answered after 300 ms: the call times out at 100 ms (an unknown outcome).
        let err = query::<Value>(&link, redis::cmd("DEBUG").arg("SLEEP").arg("0.3"))
            .await
            .unwrap_err();
        assert!(err.is_timeout(), "{err}");
        // The server is still asleep; once it is awake, the late `OK` is on its way.
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The next call on the same connection gets its own reply, not the late `OK`.
        let got: String = query(&link, redis::cmd("GET").arg("k")).await.unwrap();
        assert_eq!(got, "mine");
        // A call dropped before its reply came does not shift the replies either.
        let slow = redis::cmd("DEBUG").arg("SLEEP").arg("0.05").clone();
        let dropped = tokio::time::timeout(
            Duration::from_millis(5),
            query::<Value>(&link, &mut slow.clone()),
        )
        .await;
        assert!(dropped.is_err(), "the sleep outlasted 5 ms");
        let got: String = query(&link, redis::cmd("GET").arg("k")).await.unwrap();
        assert_eq!(got, "mine");
    }

    #[tokio::test]
    async fn calls_in_flight_fail_when_the_server_goes_and_the_next_reconnects() {
        let mut server = lockkit_test_support::RedisServer::start();
        let link = Link::connect(endpoint(&server.url(), None)).await.unwrap();
        let in_flight = tokio::spawn({
            let link = link.clone();
            async move { query::<Value>(&link, redis::cmd("DEBUG").arg("SLEEP").arg("2")).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        server.kill();
        let err = in_flight.await.unwrap().unwrap_err();
        assert!(crate::error::unknown_outcome(&err), "{err}");
        let err = query::<String>(&link, &mut redis::cmd("PING"))
            .await
            .unwrap_err();
        assert!(err.is_connection_refusal(), "{err}");
        server.restart();
        let pong: String = query(&link, &mut redis::cmd("PING")).await.unwrap();
        assert_eq!(pong, "PONG");
    }

    #[tokio::test]
    async fn callers_dropped_while_reconnecting_share_one_connect_attempt() {
        let server = lockkit_test_support::RedisServer::start();
        let link = link_to(&server, None).await;
        // The link's connection dies (SKIPME: not the connection that asks), so the next call
        // must reconnect.
        server.inline("CLIENT KILL TYPE normal").unwrap();
        for _ in 0..500 {
            if link.live().is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            link.live().is_none(),
            "the killed connection still looks live"
        );
        // Frozen: the kernel still completes the TCP handshake, the login is never answered.
        // Every call gives up long before the connect timeout (2 s): each is dropped while a
        // connect is under way.
        const CALLS: u64 = 50;
        let (dropped, connects) =
            connects_while_frozen(&server, CALLS, Duration::from_millis(10), |_| {
                let link = link.clone();
                async move { query::<Value>(&link, &mut redis::cmd("PING")).await }
            })
            .await;
        assert_eq!(dropped, CALLS, "a call to a frozen server ended on its own");
        assert!(
            connects <= 3,
            "{connects} connects for {CALLS} calls dropped while reconnecting"
        );
        // Once the server answers, the shared attempt (or a new one) gives a working link.
        let pong: String = query(&link, &mut redis::cmd("PING")).await.unwrap();
        assert_eq!(pong, "PONG");
    }

    #[tokio::test]
    async fn a_failed_connect_attempt_is_every_waiting_callers_error() {
        let server = lockkit_test_support::RedisServer::start();
        let info = crate::url::parse_url(&server.url()).unwrap();
        let endpoint = Endpoint::new(info, None, Duration::from_millis(500), None, 0).unwrap();
        let link = Link::lazy(endpoint);
        let before = connections_received(&server);
        server.pause().unwrap();
        // Twenty callers at once, none of them dropped: all wait for one attempt, which the
        // frozen server makes time out.
        let calls = (0..20).map(|_| {
            let link = link.clone();
            async move { query::<Value>(&link, &mut redis::cmd("PING")).await }
        });
        let outcomes = tokio::time::timeout(
            Duration::from_secs(30),
            futures_util::future::join_all(calls),
        )
        .await;
        server.resume().unwrap();
        let connects = connections_received(&server) - before - 1;
        let outcomes = outcomes.expect("callers still waited 30 s into a 500 ms connect timeout");
        for outcome in outcomes {
            let err = outcome.expect_err("a frozen server answered");
            assert!(
                err.is_timeout() && err.to_string().contains("connecting"),
                "{err}"
            );
        }
        assert!(connects <= 3, "{connects} connects for 20 waiting callers");
        // The failure is not remembered: the next call connects again.
        let pong: String = query(&link, &mut redis::cmd("PING")).await.unwrap();
        assert_eq!(pong, "PONG");
    }

    #[tokio::test]
    async fn a_frozen_server_does_not_make_the_client_buffer_without_bound() {
        let server = lockkit_test_support::RedisServer::start();
        // Kept although it goes silent: this is about what waits on it meanwhile.
        let endpoint = endpoint(&server.url(), Some(Duration::from_millis(50)));
        let link = Link::connect(endpoint.keeping_silent_connections())
            .await
            .unwrap();
        server.pause().unwrap();
        // 64 MiB of SETs at a server that reads nothing: the kernel's buffers fill, then
        // the connection's own backlog; past its cap calls fail at once, unsent.
        let value = "v".repeat(64 << 10);
        let mut refused = 0;
        for i in 0..1024 {
            let mut set = redis::cmd("SET");
            set.arg(format!("k{i}")).arg(&value);
            let call = query::<Value>(&link, &mut set);
            if let Ok(Err(e)) = tokio::time::timeout(Duration::from_millis(20), call).await {
                if e.to_string().contains("backlog") {
                    refused += 1;
                }
            }
        }
        let backlog = lock(&link.live().unwrap().queue).out.len();
        server.resume().unwrap();
        assert!(
            backlog <= MAX_BACKLOG + (64 << 10) + 100,
            "backlog {backlog}"
        );
        assert!(refused > 0, "no call was refused");
    }

    #[tokio::test]
    async fn a_call_waiting_behind_a_full_socket_still_times_out() {
        let server = lockkit_test_support::RedisServer::start();
        let link = Link::connect(endpoint(&server.url(), Some(Duration::from_millis(200))))
            .await
            .unwrap();
        server.pause().unwrap();
        // SETs the frozen server never reads, until the kernel's buffers are full and commands
        // wait in the connection's own buffer, unsent (each call is dropped after a moment).
        let value = "v".repeat(256 << 10);
        let mut queued_unsent = false;
        for i in 0..256 {
            let mut set = redis::cmd("SET");
            set.arg(format!("k{i}")).arg(&value);
            let _ = tokio::time::timeout(Duration::from_millis(5), query::<Value>(&link, &mut set))
                .await;
            if !lock(&link.live().unwrap().queue).out.is_empty() {
                queued_unsent = true;
                break;
            }
        }
        assert!(queued_unsent, "the kernel took 64 MiB of commands");
        // This call waits in the connection's buffer too: it must still fail with a timeout
        // once the response timeout has passed, not wait for as long as the server is frozen.
        let waited = tokio::time::timeout(
            Duration::from_secs(3),
            query::<Value>(&link, &mut redis::cmd("PING")),
        )
        .await;
        server.resume().unwrap();
        match waited {
            Ok(Err(e)) => assert!(e.is_timeout(), "{e}"),
            Ok(Ok(v)) => panic!("a frozen server answered: {v:?}"),
            Err(_) => panic!("the call still waited 3 s into a 200 ms response timeout"),
        }
    }

    /// Issue 35, defect 2: a silent connection that is given up is reset, not closed. A
    /// graceful close lets the kernel go on delivering what it had queued (for as long as
    /// `TCP_USER_TIMEOUT` when the network black-holed it): a `SET` delivered after its clean-up
    /// ran on the new connection holds its key for the whole TTL. An abort (`SO_LINGER` 0)
    /// drops what is queued. The server here accepts and reads, never answers, and reports how
    /// the connection ended.
    #[tokio::test]
    async fn a_silent_connection_that_is_given_up_is_reset_not_closed() {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let ended = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut buf = [0u8; 4096];
            loop {
                match s.read(&mut buf) {
                    Ok(0) => return "closed in order (FIN)".to_string(),
                    Ok(_) => continue,
                    Err(e) => return format!("{:?}", e.kind()),
                }
            }
        });
        // No password and no CLIENT SETINFO: the connection is up without a round trip.
        let info = crate::url::parse_url(&format!("redis://127.0.0.1:{port}")).unwrap();
        let quiet = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info.set_redis_settings(quiet);
        let endpoint = Endpoint::new(
            info,
            None,
            Duration::from_secs(2),
            Some(Duration::from_millis(100)),
            0,
        )
        .unwrap();
        let link = Link::connect(endpoint).await.unwrap();
        // Calls time out until the connection counts as silent and is given up (bounded).
        for _ in 0..100 {
            if ended.is_finished() {
                break;
            }
            let mut ping = redis::cmd("PING");
            let call = query::<Value>(&link, &mut ping);
            let _ = tokio::time::timeout(Duration::from_millis(300), call).await;
        }
        assert_eq!(ended.join().unwrap(), "ConnectionReset");
    }
}
