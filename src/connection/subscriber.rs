//! The release-notification hub's connection, as its commands and replies see it: what each
//! command waits for, and what each frame read is. The hub (`hub.rs`) owns the socket and its
//! liveness; this file knows the protocol.
//!
//! The connection's replies come in the order its commands went out, beside pushed messages:
//! each `SUBSCRIBE` (one channel each), `UNSUBSCRIBE` (one reply per channel, or one error) and
//! `PING` queues what it waits for, and every frame that is not a message answers the oldest.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis::Value;
use tokio::sync::{oneshot, Notify};

use crate::resp::parse_frame;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a command on the subscribed connection waits for.
pub(crate) enum SubExpect {
    /// One `SUBSCRIBE` confirmation (or its refusal), for whoever waits.
    Subscribe(Option<oneshot::Sender<Result<(), String>>>),
    /// This many more `UNSUBSCRIBE` replies (or one refusal).
    Unsubscribe(usize),
    Ping,
}

/// The commands side of a live subscribed connection, shared by waiters and the hub's task.
pub(crate) struct SubLink {
    pub(crate) generation: u64,
    out: Mutex<SubOutgoing>,
    /// Something was queued: the task writes it.
    pub(crate) wake: Notify,
}

#[derive(Default)]
struct SubOutgoing {
    bytes: Vec<u8>,
    expect: VecDeque<SubExpect>,
    /// The connection ended: nothing more is queued.
    dead: bool,
}

impl SubLink {
    pub(crate) fn new(generation: u64) -> SubLink {
        SubLink {
            generation,
            out: Mutex::new(SubOutgoing::default()),
            wake: Notify::new(),
        }
    }

    /// Queues `args` as one command waiting for `expect`; `false` once the connection ended.
    pub(crate) fn send(&self, args: &[&[u8]], expect: SubExpect) -> bool {
        {
            let mut out = lock(&self.out);
            if out.dead {
                return false;
            }
            crate::resp::write_array_len(&mut out.bytes, args.len());
            for a in args {
                crate::resp::write_bulk(&mut out.bytes, a);
            }
            out.expect.push_back(expect);
        }
        self.wake.notify_one();
        true
    }

    /// `SUBSCRIBE channel`: the confirmation (or refusal) comes through the receiver.
    pub(crate) fn subscribe(&self, channel: &str) -> Option<oneshot::Receiver<Result<(), String>>> {
        let (tx, rx) = oneshot::channel();
        self.send(
            &[b"SUBSCRIBE", channel.as_bytes()],
            SubExpect::Subscribe(Some(tx)),
        )
        .then_some(rx)
    }

    pub(crate) fn unsubscribe(&self, channels: &[String]) {
        let mut args: Vec<&[u8]> = vec![b"UNSUBSCRIBE"];
        args.extend(channels.iter().map(|c| c.as_bytes()));
        self.send(&args, SubExpect::Unsubscribe(channels.len()));
    }

    pub(crate) fn ping(&self) {
        self.send(&[b"PING"], SubExpect::Ping);
    }

    /// The bytes queued since the last call.
    pub(crate) fn take_out(&self) -> Vec<u8> {
        std::mem::take(&mut lock(&self.out).bytes)
    }

    /// A reply (not a message) came: it answers the oldest command still waiting.
    pub(crate) fn answered(&self, reply: Result<(), String>) {
        let mut out = lock(&self.out);
        let done = match out.expect.front_mut() {
            Some(SubExpect::Subscribe(tx)) => {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(reply);
                }
                true
            }
            Some(SubExpect::Unsubscribe(left)) => {
                *left = left.saturating_sub(1);
                reply.is_err() || *left == 0
            }
            Some(SubExpect::Ping) => true,
            None => false,
        };
        if done {
            out.expect.pop_front();
        }
    }

    /// The connection ended: whoever waits for a confirmation is told (its sender dropped).
    pub(crate) fn end(&self) {
        let mut out = lock(&self.out);
        out.dead = true;
        out.expect.clear();
        out.bytes.clear();
    }
}

/// What one frame on the subscribed connection is.
pub(crate) enum SubFrame {
    /// A published message: its channel and payload.
    Message(Vec<u8>, Vec<u8>),
    /// An answer to a command.
    Answer,
    Refused(String),
    /// Something to ignore (a pattern message).
    Other,
}

/// Reads one frame: RESP2 arrays, or RESP3 pushes (`>`), read as arrays.
pub(crate) fn reply(frame: &[u8]) -> redis::RedisResult<SubFrame> {
    let value = if frame.first() == Some(&b'>') {
        let mut array = frame.to_vec();
        array[0] = b'*';
        parse_frame(&array)?
    } else {
        parse_frame(frame)?
    };
    Ok(match value {
        Value::Array(items) => {
            let kind = match items.first() {
                Some(Value::BulkString(k)) => k.as_slice(),
                Some(Value::SimpleString(k)) => k.as_bytes(),
                _ => b"",
            };
            match (kind, items.get(1), items.get(2)) {
                (b"message", Some(Value::BulkString(ch)), Some(Value::BulkString(payload))) => {
                    SubFrame::Message(ch.clone(), payload.clone())
                }
                (b"pmessage" | b"smessage", _, _) => SubFrame::Other,
                _ => SubFrame::Answer,
            }
        }
        Value::ServerError(e) => SubFrame::Refused(format!("{e:?}")),
        _ => SubFrame::Answer,
    })
}
