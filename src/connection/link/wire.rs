//! The state a connection's callers and its driver share: the write buffer callers append
//! their encoded commands to, and the queue of requests waiting for replies.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::Waker;

use redis::{RedisError, RedisResult};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::reply_slot::{Answer, ReplySlot};

/// How many bytes of commands may wait for a server that does not read them (a frozen server, a
/// black-holed network) before further calls fail at once, unsent.
pub(super) const MAX_BACKLOG: usize = 4 << 20;

/// Why a request was not sent.
pub(super) enum Refused {
    Dead,
    Backlog,
}

/// The state a connection's callers and its driver share.
#[derive(Default)]
pub(super) struct Wire {
    /// This connection's number, unique in the process ([`Link::query_on`]).
    pub(super) epoch: u64,
    pub(super) queue: Mutex<Queue>,
    /// Set once, when the connection failed or closed; read without the lock.
    pub(super) dead: AtomicBool,
}

#[derive(Default)]
pub(super) struct Queue {
    /// Encoded commands the driver has not taken yet.
    pub(super) out: Vec<u8>,
    /// Requests in the order they were queued, each waiting for its replies.
    pub(super) pending: VecDeque<Pending>,
    /// How many of `pending` the driver has written.
    pub(super) written: usize,
    /// How many of `pending`, from the front, carry the time they were queued (the driver
    /// stamps new ones with one clock read: when it takes them to write, or when it finds the
    /// socket full).
    pub(super) stamped: usize,
    /// The driver, when it waits for something to write.
    pub(super) driver: Option<Waker>,
    /// How many of `pending`, from the front, already failed with a timeout (their replies are
    /// still to be read and dropped).
    pub(super) expired: usize,
    /// The last handle is gone: finish and close.
    pub(super) closing: bool,
    pub(super) dead: bool,
}

pub(super) struct Pending {
    pub(super) slot: ReplySlot,
    /// When it was queued (as the driver stamped it, see [`Queue::stamped`]): its response
    /// timeout counts from here, written or not (a request still waiting in `out` behind a
    /// server that reads nothing times out too).
    pub(super) queued: Option<Instant>,
}

impl Queue {
    /// Stamps the requests queued since the last stamp with the time now: one clock read for
    /// all of them, instead of one per call.
    pub(super) fn stamp(&mut self) {
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

impl Wire {
    /// Queues one request; refused (nothing sent) if the connection is dead or the server has
    /// left [`MAX_BACKLOG`] bytes unread.
    pub(super) fn send<T>(
        &self,
        write: &impl Fn(&mut Vec<u8>),
        slot: &impl Fn(Answer<T>) -> ReplySlot,
    ) -> Result<oneshot::Receiver<RedisResult<T>>, Refused> {
        let (tx, rx) = oneshot::channel();
        self.push(write, slot(tx))?;
        Ok(rx)
    }

    /// [`send`](Self::send) with the slot given: the answer goes wherever `slot` says.
    pub(super) fn push(
        &self,
        write: &impl Fn(&mut Vec<u8>),
        slot: ReplySlot,
    ) -> Result<(), Refused> {
        let waker = {
            let mut q = lock(&self.queue);
            if q.dead {
                return Err(Refused::Dead);
            }
            if q.out.len() >= MAX_BACKLOG {
                return Err(Refused::Backlog);
            }
            write(&mut q.out);
            q.pending.push_back(Pending { slot, queued: None });
            q.driver.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    pub(super) fn close(&self) {
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
    pub(super) fn fail(&self, err: impl Fn() -> RedisError) {
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
            p.slot.fail(&err);
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn dropped(what: &str) -> RedisError {
    io::Error::new(io::ErrorKind::ConnectionReset, what.to_string()).into()
}
