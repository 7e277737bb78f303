//! Blocking commands across connections (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP,
//! BZPOPMIN, BZPOPMAX, BZMPOP, XREAD and XREADGROUP with `BLOCK`) on the virtual clock.
//!
//! The harness runs them as Redis runs them where a client may not block (in MULTI, in a
//! script): they answer at once, a null when no key holds anything. A client's own command
//! answered that null blocks here: it is recorded (with the harness still held, so no write
//! comes in between), and after every command of any connection, with the harness held, the
//! blocked clients are served in the order they blocked (Redis serves the clients blocked on
//! a key first-come first-served) by running their command again, until one pass serves
//! nobody (a BLMOVE may feed another). A blocked XREAD runs again with its `$` IDs pinned
//! to the streams' last IDs at the call; a blocked XREADGROUP whose stream is deleted, or
//! whose group is gone when an entry is added, is answered Redis's error. A client whose
//! deadline the virtual clock reached (`LOCKKIT.CLOCK ADVANCE`, `DEBUG SLEEP`, the wall
//! clock with `--clock wall`) is answered its null. `CLIENT UNBLOCK` answers one early; a client that disconnects stops waiting.

use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::pubsub::Closing;
use super::shared::ServeShared;
use crate::commands::bpop;
use crate::harness::Harness;
use crate::keyspace::StreamId;
use crate::reply::Reply;

/// A blocked client.
#[derive(Debug)]
struct BlockedClient {
    client: u64,
    argv: Vec<Vec<u8>>,
    /// An XREADGROUP's streams' last IDs when it blocked.
    streams: Vec<Option<StreamId>>,
    resp3: bool,
    /// On the virtual clock (Unix ms); `None`: no timeout.
    deadline: Option<u64>,
    reply: oneshot::Sender<Reply>,
}

/// Every blocked client, in the order they blocked.
#[derive(Debug, Default)]
pub(super) struct Blocked {
    waiters: Vec<BlockedClient>,
}

/// What a blocked connection waits for.
#[derive(Debug)]
pub(super) struct Wait {
    reply: oneshot::Receiver<Reply>,
    /// The timeout's null is an array (`*-1` in RESP2).
    pub(super) null_array: bool,
    /// How long until its deadline on the clock as it was when it blocked.
    remaining: Option<Duration>,
}

fn now_ms(h: &Harness) -> u64 {
    h.now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Whether a blocked BLMOVE / BRPOPLPUSH that failed when run again failed on its destination
/// (its source is a list now): Redis answers it that error (WRONGTYPE) and unblocks it, the
/// element staying in the source.
fn moves_from_a_list(h: &mut Harness, argv: &[Vec<u8>]) -> bool {
    let moves =
        crate::commands::is(&argv[0], "blmove") || crate::commands::is(&argv[0], "brpoplpush");
    moves
        && matches!(
            h.call_uncounted(&[b"TYPE".to_vec(), argv[1].clone()], false),
            Reply::Status(t) if t == "list"
        )
}

impl Blocked {
    /// After a client's own command (not in MULTI) answered `reply`: the client blocks when
    /// it is a blocking command that found nothing.
    pub(super) fn block(
        &mut self,
        h: &mut Harness,
        client: u64,
        argv: &[Vec<u8>],
        resp3: bool,
        reply: &Reply,
    ) -> Option<Wait> {
        let ms = bpop::block_ms(argv)?;
        if !matches!(reply, Reply::Nil) {
            return None;
        }
        let deadline = (ms > 0).then(|| now_ms(h).saturating_add(ms));
        let (tx, rx) = oneshot::channel();
        self.waiters.push(BlockedClient {
            client,
            argv: h.blocked_argv(argv),
            streams: h.blocked_streams(argv),
            resp3,
            deadline,
            reply: tx,
        });
        Some(Wait {
            reply: rx,
            null_array: bpop::null_is_array(argv),
            remaining: (ms > 0).then(|| Duration::from_millis(ms)),
        })
    }

    /// Serves the blocked clients whose keys now hold something, first blocked first, and
    /// answers those past their deadline their null.
    pub(super) fn wake(&mut self, h: &mut Harness) {
        if self.waiters.is_empty() {
            return;
        }
        self.waiters.retain(|w| !w.reply.is_closed());
        loop {
            let mut served = false;
            let mut i = 0;
            while i < self.waiters.len() {
                let w = &self.waiters[i];
                let reply = match h.call_uncounted(&w.argv, w.resp3) {
                    Reply::Error(e) if moves_from_a_list(h, &w.argv) => Some(Reply::Error(e)),
                    Reply::Error(_) => h.blocked_failure(&w.argv, &w.streams),
                    Reply::Nil => None,
                    served => Some(served),
                };
                let Some(reply) = reply else {
                    i += 1;
                    continue;
                };
                let _ = self.waiters.remove(i).reply.send(reply);
                served = true;
            }
            if !served {
                break;
            }
        }
        let now = now_ms(h);
        let (late, waiting) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|w| w.deadline.is_some_and(|d| d <= now));
        self.waiters = waiting;
        for w in late {
            let _ = w.reply.send(Reply::Nil);
        }
    }

    /// How many clients are blocked (INFO's `blocked_clients`).
    pub(super) fn count(&self) -> usize {
        self.waiters.iter().filter(|w| !w.reply.is_closed()).count()
    }

    /// `CLIENT UNBLOCK id [TIMEOUT|ERROR]`.
    pub(super) fn unblock(&mut self, argv: &[Vec<u8>]) -> Reply {
        let Some(id) = crate::number::parse_i64(&argv[2]) else {
            return Reply::err(crate::reply::errors::NOT_INTEGER);
        };
        let error = match argv.get(3) {
            None => false,
            Some(o) if crate::commands::is(o, "timeout") => false,
            Some(o) if crate::commands::is(o, "error") => true,
            Some(_) => {
                return Reply::err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR");
            }
        };
        self.waiters.retain(|w| !w.reply.is_closed());
        let Some(i) = self.waiters.iter().position(|w| w.client as i64 == id) else {
            return Reply::Int(0);
        };
        let w = self.waiters.remove(i);
        let _ = w.reply.send(if error {
            Reply::err("UNBLOCKED client unblocked via CLIENT UNBLOCK")
        } else {
            Reply::Nil
        });
        Reply::Int(1)
    }
}

/// Waits for a blocked connection's reply; `None` when the client went away (or the server
/// stops). Requests the client sends meanwhile are kept in `buf` for after, as Redis keeps
/// them. With `--clock wall`, the clock is moved on at the deadline so that it times out.
pub(super) async fn wait(
    mut w: Wait,
    shared: &Arc<ServeShared>,
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    closing: &Closing,
) -> Option<Reply> {
    let wall = shared.wall_clock();
    let mut chunk = vec![0u8; 16 * 1024];
    let mut due = w.remaining.filter(|_| wall).map(|d| Instant::now() + d);
    loop {
        let sleep = tokio::time::sleep_until(due.unwrap_or_else(Instant::now).into());
        tokio::select! {
            r = &mut w.reply => return r.ok(),
            () = sleep, if due.is_some() => {
                shared.tick().await;
                due = Some(Instant::now() + Duration::from_millis(5));
            }
            r = socket.read(&mut chunk) => match r {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            },
            _ = stop.changed() => return None,
            () = closing.overflowed() => return None,
        }
    }
}
