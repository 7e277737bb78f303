//! The task that owns a connection's socket: it writes what callers queued, reads and hands
//! out replies in order, and keeps the one response timer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use redis::RedisResult;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::reply_slot::Deferred;
use super::wire::{dropped, lock, Wire};
use crate::connection::connector::{invalid, ServerStream};
use crate::resp::{frame_len, parse_frame};

/// When a connection of a link was last given up with requests in flight (shared by the
/// link's endpoint and every driver it starts).
pub(super) type GaveUp = Arc<Mutex<Option<std::time::Instant>>>;

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

/// The task that owns the socket: writes what callers queued, reads and hands out replies,
/// and watches the oldest request's age.
pub(super) struct Driver {
    pub(super) stream: ServerStream,
    pub(super) wire: Arc<Wire>,
    /// Read bytes are `rbuf[..rlen]`; the rest is room for the next read.
    pub(super) rbuf: Vec<u8>,
    pub(super) rlen: usize,
    pub(super) wbuf: Vec<u8>,
    pub(super) wpos: usize,
    pub(super) timeout: Option<Duration>,
    pub(super) timer: Pin<Box<Sleep>>,
    pub(super) armed: bool,
    /// Writing was put off to the next poll (see [`Driver::write`]).
    pub(super) deferred: bool,
    /// Whether a silent connection is given up ([`SILENT_TIMEOUTS`]).
    pub(super) replace_silent: bool,
    /// Requests that timed out since anything was last read.
    pub(super) silent_timeouts: usize,
    /// When the first of them timed out.
    pub(super) silent_since: Option<Instant>,
    /// Where the link notes a connection given up with requests in flight.
    pub(super) gave_up: GaveUp,
    /// The driver has run to its end (rather than being dropped midway).
    pub(super) ended: bool,
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
        let mut deferred = Deferred::default();
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
            if p.slot.accept(value, &mut deferred) {
                q.pending.pop_front();
                q.written -= 1;
                q.stamped = q.stamped.saturating_sub(1);
                q.expired = q.expired.saturating_sub(1);
            }
        }
        drop(q);
        deferred.give();
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
            let mut deferred = Deferred::default();
            let mut q = lock(&self.wire.queue);
            let from = q.expired;
            let mut failed = 0;
            for p in q.pending.range_mut(from..) {
                match p.queued {
                    Some(queued) if queued + timeout <= now => {
                        let err = || {
                            io::Error::new(
                                io::ErrorKind::TimedOut,
                                format!("no reply within {timeout:?}"),
                            )
                            .into()
                        };
                        p.slot.fail_deferred(err, &mut deferred);
                        failed += 1;
                    }
                    _ => break,
                }
            }
            q.expired += failed;
            drop(q);
            deferred.give();
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
