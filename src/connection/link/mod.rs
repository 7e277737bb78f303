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

mod driver;
mod endpoint;
mod reply_slot;
mod wire;

use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::sync::watch;

pub(crate) use self::reply_slot::ReplySink;
use self::reply_slot::{Answer, ReplySlot};
use self::wire::{dropped, lock, Refused, Wire, MAX_BACKLOG};
use crate::error::{not_sent, unsent};

pub(crate) use self::endpoint::{Endpoint, LATE_DELIVERY};

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
        self.with_live(Arc::clone)
    }

    /// `f` of the live connection, under the lock of the current one (`None` while there is
    /// none): no reference to it is taken and given back for a look.
    fn with_live<R>(&self, f: impl FnOnce(&Arc<Wire>) -> R) -> Option<R> {
        lock(&self.inner.current)
            .as_ref()
            .filter(|w| !w.dead.load(Ordering::Acquire))
            .map(f)
    }

    /// Sends what `write` encodes; `slot` says what it waits for and where the answer goes. A
    /// connection found dead before anything was sent is replaced and the request goes out on
    /// the new one. The answer comes with the number of the connection it went out on
    /// ([`query_on`](Self::query_on)).
    async fn request<T>(
        &self,
        write: impl Fn(&mut Vec<u8>),
        slot: impl Fn(Answer<T>) -> ReplySlot,
    ) -> RedisResult<(T, u64)> {
        let mut tries = 0;
        let rx = loop {
            // Sent under the lock of the current connection, which it does not outlive.
            let sent = self.with_live(|w| (w.send(&write, &slot), w.epoch));
            let (sent, epoch) = match sent {
                Some(sent) => sent,
                // Boxed: reconnecting is rare, and inline it would enlarge every call's future.
                None => {
                    let w = Box::pin(self.reconnect()).await?;
                    (w.send(&write, &slot), w.epoch)
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
                Err(Refused::Backlog) => return Err(backlog_full()),
            }
        };
        let (rx, epoch) = rx;
        match rx.await {
            Ok(reply) => reply.map(|v| (v, epoch)),
            Err(_) => Err(dropped("the connection closed before the reply came")),
        }
    }

    /// Sends what `write` encodes on the live connection if it is the one numbered `epoch`,
    /// and returns at once: the reply goes to `sink` as its answer `idx` (an error too: the
    /// connection failed, or the response timeout passed). `None` when there is no live
    /// connection or it has another number: nothing was sent, and [`query_on`](Self::query_on)
    /// is the way (it reconnects). Otherwise the number it went out on, or why it was not sent
    /// (the server has left the backlog unread).
    pub(crate) fn send_to(
        &self,
        epoch: u64,
        write: impl Fn(&mut Vec<u8>),
        sink: &Arc<dyn ReplySink>,
        idx: usize,
    ) -> Option<RedisResult<u64>> {
        let pushed = self.with_live(|w| {
            (w.epoch == epoch)
                .then(|| w.push(&write, ReplySlot::Sink(Some((Arc::clone(sink), idx)))))
        });
        match pushed.flatten()? {
            Ok(()) => Some(Ok(epoch)),
            Err(Refused::Dead) => None,
            Err(Refused::Backlog) => Some(Err(backlog_full())),
        }
    }

    /// The number of the live connection (`None` while there is none): a connection made
    /// later has another number.
    pub(crate) fn epoch(&self) -> Option<u64> {
        self.with_live(|w| w.epoch)
    }
}

/// Why a request was not sent: the server has left [`MAX_BACKLOG`] bytes unread.
fn backlog_full() -> redis::RedisError {
    not_sent(
        io::ErrorKind::TimedOut,
        format!(
            "the server has not read the last {} MiB of requests (backlog full); this one was \
             not sent",
            MAX_BACKLOG >> 20
        ),
    )
}

impl Link {
    /// One command's reply (a server error still as a value, as `req_packed_command` gives it).
    pub(crate) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        self.query_with(|out| cmd.write_packed_command(out)).await
    }

    /// One command's reply, the command encoded by `write` into the write buffer.
    pub(crate) async fn query_with(&self, write: impl Fn(&mut Vec<u8>)) -> RedisResult<Value> {
        self.request(write, |to| ReplySlot::One(Some(to)))
            .await
            .map(|(v, _)| v)
    }

    /// [`query_with`](Self::query_with), with the number of the connection the command went
    /// out on. Every connection the process makes gets a new number, so two replies with one
    /// number came from one server process: what Redlock's restart rule needs to know that the
    /// node it read the start time of is the one that answered its `SET`.
    pub(crate) async fn query_on(&self, write: impl Fn(&mut Vec<u8>)) -> RedisResult<(Value, u64)> {
        self.request(write, |to| ReplySlot::One(Some(to))).await
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
                |to| ReplySlot::many(to, offset, count, transaction),
            )
            .await
            .map(|(v, _)| v)
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.endpoint.connector.info().redis_settings().db()
    }
}

#[cfg(test)]
mod tests;
