//! A request's reply slot: what it waits for (one reply, or a pipeline's), what it has read
//! so far, and where its answer goes.

use std::sync::Arc;

use redis::{RedisError, RedisResult, Value};
use tokio::sync::oneshot;

/// Where a request's answer goes.
pub(super) type Answer<T> = oneshot::Sender<RedisResult<T>>;

/// Takes the answers of requests sent without a task waiting on each ([`Link::send_to`]): answer
/// `idx` is given once, a reply or an error (the connection failed, or the response timeout
/// passed). Called by the connection's driver, with no lock of the connection held (the
/// answers read under it wait in a [`Deferred`] until it is released: an answer may drop the
/// last handle to the connection, whose close takes that lock).
///
/// [`Link::send_to`]: super::Link::send_to
pub(crate) trait ReplySink: Send + Sync {
    fn answer(self: Arc<Self>, idx: usize, reply: RedisResult<Value>);
}

/// Sink answers taken under the connection's queue lock, to be given once it is released.
#[derive(Default)]
pub(super) struct Deferred(Vec<(Arc<dyn ReplySink>, usize, RedisResult<Value>)>);

impl Deferred {
    /// Gives every answer taken (call with no lock of the connection held).
    pub(super) fn give(self) {
        for (sink, idx, reply) in self.0 {
            sink.answer(idx, reply);
        }
    }
}

/// What a request waits for, what it has read so far, and who waits for its answer (`None`
/// once the request failed with a timeout: its replies are still read, and dropped).
pub(super) enum ReplySlot {
    One(Option<Answer<Value>>),
    /// One reply, handed to a sink as its answer `idx`.
    Sink(Option<(Arc<dyn ReplySink>, usize)>),
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

impl ReplySlot {
    pub(super) fn many(
        to: Answer<Vec<Value>>,
        skip: usize,
        take: usize,
        transaction: bool,
    ) -> ReplySlot {
        ReplySlot::Many {
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
    /// went out (a sink's: into `deferred`).
    pub(super) fn accept(&mut self, value: Value, deferred: &mut Deferred) -> bool {
        match self {
            ReplySlot::One(to) => {
                if let Some(to) = to.take() {
                    let _ = to.send(Ok(value));
                }
                true
            }
            ReplySlot::Sink(to) => {
                if let Some((sink, idx)) = to.take() {
                    deferred.0.push((sink, idx, Ok(value)));
                }
                true
            }
            ReplySlot::Many {
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

    /// Answers with an error (unless it was answered already), a sink's into `deferred`.
    pub(super) fn fail_deferred(
        &mut self,
        err: impl FnOnce() -> RedisError,
        deferred: &mut Deferred,
    ) {
        match self {
            ReplySlot::Sink(to) => {
                if let Some((sink, idx)) = to.take() {
                    deferred.0.push((sink, idx, Err(err())));
                }
            }
            other => other.fail(err),
        }
    }

    /// Answers with an error (unless it was answered already), a sink's at once: with no lock
    /// of the connection held.
    pub(super) fn fail(&mut self, err: impl FnOnce() -> RedisError) {
        match self {
            ReplySlot::One(to) => {
                if let Some(to) = to.take() {
                    let _ = to.send(Err(err()));
                }
            }
            ReplySlot::Sink(to) => {
                if let Some((sink, idx)) = to.take() {
                    sink.answer(idx, Err(err()));
                }
            }
            ReplySlot::Many { to, .. } => {
                if let Some(to) = to.take() {
                    let _ = to.send(Err(err()));
                }
            }
        }
    }
}
