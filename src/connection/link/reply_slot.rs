//! A request's reply slot: what it waits for (one reply, or a pipeline's), what it has read
//! so far, and where its answer goes.

use redis::{RedisError, RedisResult, Value};
use tokio::sync::oneshot;

/// Where a request's answer goes.
pub(super) type Answer<T> = oneshot::Sender<RedisResult<T>>;

/// What a request waits for, what it has read so far, and who waits for its answer (`None`
/// once the request failed with a timeout: its replies are still read, and dropped).
pub(super) enum ReplySlot {
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
    /// went out.
    pub(super) fn accept(&mut self, value: Value) -> bool {
        match self {
            ReplySlot::One(to) => {
                if let Some(to) = to.take() {
                    let _ = to.send(Ok(value));
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

    /// Answers with an error (unless it was answered already).
    pub(super) fn fail(&mut self, err: impl FnOnce() -> RedisError) {
        match self {
            ReplySlot::One(to) => {
                if let Some(to) = to.take() {
                    let _ = to.send(Err(err()));
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
