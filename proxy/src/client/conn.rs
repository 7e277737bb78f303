//! One client connection's state ([`ClientConn`], [`Mode`]) and the task that serves it: read
//! the client's bytes and the upstream's, one at a time, until either side closes, the
//! operation timeout fires or the proxy stops (then drain: no more commands are read, every
//! reply owed for those forwarded is passed on).

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fnv::FnvHashMap;
use lockkit_resp::RequestParser;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Sleep;

use super::login::Login;
use super::metered::ConnMetrics;
use super::owed::{Owed, OwedReply};
use super::setup::Setup;
use crate::plugin::ConnInfo;
use crate::resp;
use crate::shared::ProxyShared;
use crate::upstream::route::Up;
use crate::upstream::RespVersion;

/// Command counts are handed to the shared table at least this often.
const FLUSH_EVERY: Duration = Duration::from_millis(500);

/// Where a connection stands: how its replies pair with its commands, and whether its
/// commands are read. One value, so that no two flags can disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Replies pair one-to-one with commands; the proxy may answer in turn.
    Paired,
    /// Inside MULTI: replies pair, and the client waits for `QUEUED`, so the proxy answers
    /// nothing in the server's place. `config_get`: the transaction queued a `CONFIG GET`, so
    /// its `EXEC` reply is scrubbed.
    Transaction {
        /// A `CONFIG GET` is queued.
        config_get: bool,
    },
    /// Replies no longer pair with commands (pub/sub, MONITOR, replication, the Lua debugger):
    /// once the replies owed before are in, bytes are copied as they come.
    Unpaired,
    /// RESET went upstream: nothing is read from the client until its reply is in
    /// (`unpaired`: it has to be found among bytes that no longer pair).
    Resetting {
        /// Replies no longer paired when RESET went.
        unpaired: bool,
    },
    /// The connection closes once the replies owed are out (after a protocol error, a reply a
    /// plugin loses, QUIT): nothing more is read.
    Closing,
}

impl Mode {
    /// Whether an answer of the proxy's own, or a rewritten reply, is in turn: replies pair and
    /// the client is not waiting for `QUEUED`.
    pub(crate) fn answerable(self) -> bool {
        self == Mode::Paired
    }

    /// Whether replies pair with commands.
    pub(crate) fn paired(self) -> bool {
        matches!(self, Mode::Paired | Mode::Transaction { .. })
    }
}

/// `CLIENT REPLY`, carried out by the proxy: which replies the client does not want.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ReplyControl {
    /// `CLIENT REPLY OFF`.
    pub(crate) off: bool,
    /// `CLIENT REPLY SKIP`: the next request's reply.
    pub(crate) skip: bool,
}

impl ReplyControl {
    /// Whether the reply to the request being read is left out; a skip is spent by any
    /// request, an empty one included (as Redis's `resetClient` spends it).
    pub(crate) fn hide_next(&mut self) -> bool {
        let hide = self.off || self.skip;
        self.skip = false;
        hide
    }
}

/// What the client's or the upstream's bytes asked for besides forwarding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    Continue,
    Close,
    /// RESET's reply is out: the client goes on from a fresh upstream connection.
    Reset,
}

/// The state of one proxied connection.
pub(crate) struct ClientConn {
    pub(crate) shared: Arc<ProxyShared>,
    pub(crate) info: ConnInfo,
    /// The client's bytes, read as redis-server reads them.
    pub(crate) parser: RequestParser,
    pub(crate) owed: Owed,
    pub(crate) mode: Mode,
    /// Complete commands wait in the client's buffer (for replies owed on the shared
    /// connection, [`crate::upstream::route::WINDOW`], or for RESET's reply): nothing more is
    /// read from the client meanwhile.
    pub(crate) held: bool,
    /// Commands read from the client so far.
    pub(crate) commands: u64,
    counts: FnvHashMap<Vec<u8>, u64>,
    last_flush: Instant,
    /// On a connection of its own: since when replies are owed with none coming back.
    owed_since: Option<Instant>,
    pub(crate) login: Login,
    /// What the client set up while on the shared connections.
    pub(crate) setup: Setup,
    pub(crate) replies: ReplyControl,
    /// The protocol the client speaks.
    pub(crate) resp: RespVersion,
    /// Room to re-encode a request that is not forwarded as read.
    pub(crate) scratch: Vec<u8>,
    /// The command metrics, counted and timed here (`--metrics-listen`).
    pub(crate) metered: Option<ConnMetrics>,
}

/// Serves one client until it or the upstream server closes, or `stop` fires: then it drains
/// (reads no more commands, passes on every reply owed for those forwarded) and closes.
pub(crate) async fn serve<CR, CW>(
    shared: Arc<ProxyShared>,
    info: ConnInfo,
    (mut cr, mut cw): (CR, CW),
    mut up: Up,
    mut stop: watch::Receiver<bool>,
) where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
{
    let mut conn = ClientConn::new(shared, info);
    let mut cbuf: Vec<u8> = Vec::with_capacity(resp::READ_CHUNK);
    let mut ubuf: Vec<u8> = Vec::with_capacity(resp::READ_CHUNK);
    // Made once: a new `changed()` each turn of the loop registers with the watch again, on
    // every command.
    let stopped = stop.changed();
    tokio::pin!(stopped);
    // The operation timeout of a connection of its own; checked when it fires, not reset per
    // reply (a shared connection has its own, in its task).
    let op_timeout = conn.shared.op_timeout;
    let timer = tokio::time::sleep(op_timeout);
    tokio::pin!(timer);
    // Until its first login, a client that has to log in is closed at the login timeout.
    let mut login_due =
        (!conn.login.logged_in()).then(|| Instant::now() + conn.shared.login_timeout);
    let login_timer = tokio::time::sleep_until(login_due.unwrap_or_else(Instant::now).into());
    tokio::pin!(login_timer);
    // The idle timeout: checked when it fires, not reset per command.
    let idle = conn.shared.idle_timeout;
    let mut active = Instant::now();
    let idle_timer = tokio::time::sleep(idle.unwrap_or(Duration::MAX / 4));
    tokio::pin!(idle_timer);
    let mut draining = false;
    loop {
        if login_due.is_some() && conn.login.logged_in() {
            login_due = None;
        }
        let idles = idle.is_some() && !draining && conn.mode.paired() && !conn.owes(&up);
        if draining && !conn.owes(&up) {
            let _ = conn.send_local_replies(&mut cw).await;
            break;
        }
        resp::reserve(&mut cbuf);
        resp::reserve(&mut ubuf);
        let timed = conn.timed(&up);
        let step = tokio::select! {
            // Stopping first, then replies before new commands: what is owed goes out first.
            biased;
            _ = &mut stopped, if !draining => {
                draining = true;
                Ok(Next::Continue)
            }
            r = up.read(&mut ubuf) => match r {
                Ok(0) | Err(_) => {
                    if conn.owes(&up) && !up.killed() {
                        crate::metrics::upstream_error("lost");
                    }
                    Ok(Next::Close)
                }
                Ok(_) => match up.outbuf() {
                    // Closed for the replies held for it while it was writing one (it waits
                    // for the kill only when the write does not go through at once).
                    Some(out) => tokio::select! {
                        biased;
                        r = conn.on_upstream_readable(&mut ubuf, &mut cbuf, &mut up, &mut cw, draining) => r,
                        () = out.killed() => Ok(Next::Close),
                    },
                    // Read from its own connection and not yet written: past the limit, closed
                    // (as Redis closes a client whose reply passes its hard limit).
                    None => match conn.shared.output_buffer_limit {
                        Some(limit) if ubuf.len() > limit => {
                            conn.over_output_limit(ubuf.len(), limit);
                            Ok(Next::Close)
                        }
                        _ => conn.on_upstream_readable(&mut ubuf, &mut cbuf, &mut up, &mut cw, draining).await,
                    },
                },
            },
            () = &mut timer, if timed => conn.on_op_timer(timer.as_mut(), &mut cw).await,
            () = &mut login_timer, if login_due.is_some() => Ok(Next::Close),
            () = &mut idle_timer, if idles => {
                let limit = idle.unwrap_or(Duration::MAX / 4);
                if active.elapsed() >= limit {
                    Ok(Next::Close)
                } else {
                    idle_timer.as_mut().reset((active + limit).into());
                    Ok(Next::Continue)
                }
            }
            r = cr.read_buf(&mut cbuf), if !conn.held && !draining => match r {
                Ok(0) | Err(_) => Ok(Next::Close),
                Ok(_) => {
                    active = Instant::now();
                    let next = conn.on_client_bytes(&mut cbuf, &mut up, &mut cw).await;
                    conn.track_owed(&up, false);
                    next
                }
            },
        };
        match step {
            Ok(Next::Continue | Next::Reset) => {}
            Ok(Next::Close) | Err(_) => break,
        }
    }
    conn.flush_counts();
    up.shutdown().await;
    let _ = cw.shutdown().await;
}

impl ClientConn {
    /// A fresh client on the paired path, logged in when no login is asked for.
    fn new(shared: Arc<ProxyShared>, info: ConnInfo) -> ClientConn {
        ClientConn {
            login: Login::new(&shared.client_auth()),
            metered: shared.command_metrics().map(|_| ConnMetrics::default()),
            shared,
            info,
            parser: RequestParser::default(),
            owed: Owed::default(),
            mode: Mode::Paired,
            held: false,
            commands: 0,
            counts: FnvHashMap::default(),
            last_flush: Instant::now(),
            owed_since: None,
            setup: Setup::default(),
            replies: ReplyControl::default(),
            resp: RespVersion::Resp2,
            scratch: Vec::new(),
        }
    }

    /// The operation timer of a connection of its own fired: past the timeout since the
    /// oldest owed reply, every owed command fails and the connection closes; else the timer
    /// is set for when it would be.
    async fn on_op_timer<CW: AsyncWrite + Unpin>(
        &mut self,
        timer: Pin<&mut Sleep>,
        cw: &mut CW,
    ) -> std::io::Result<Next> {
        let op_timeout = self.shared.op_timeout;
        let since = self.owed_since.unwrap_or_else(Instant::now);
        if since.elapsed() < op_timeout {
            timer.reset((since + op_timeout).into());
            return Ok(Next::Continue);
        }
        crate::metrics::upstream_error("timeout");
        eprintln!(
            "lockkit proxy: client {}: its own connection to upstream {} gave no reply within {}; closed",
            self.info.id,
            self.shared.upstream.shown(),
            crate::health::shown(op_timeout)
        );
        self.shared.upstream.backoff().failed();
        let _ = self.fail_owed(cw).await;
        Ok(Next::Close)
    }

    /// Replies came from upstream: pass them on, then take up the commands they held back.
    async fn on_upstream_readable<CW: AsyncWrite + Unpin>(
        &mut self,
        ubuf: &mut Vec<u8>,
        cbuf: &mut Vec<u8>,
        up: &mut Up,
        cw: &mut CW,
        draining: bool,
    ) -> std::io::Result<Next> {
        let written = self.on_upstream_bytes(ubuf, cw).await?;
        up.written();
        match written {
            Next::Continue => {}
            Next::Reset => match self.reset(up, cw).await? {
                Next::Continue => ubuf.clear(),
                other => return Ok(other),
            },
            Next::Close => return Ok(Next::Close),
        }
        if up.closing() {
            return Ok(Next::Close);
        }
        self.track_owed(up, true);
        if !up.is_shared() {
            self.shared.upstream.backoff().succeeded();
        }
        // Replies came back: commands held by the window may go now.
        if self.held && !draining {
            return self.on_client_bytes(cbuf, up, cw).await;
        }
        Ok(Next::Continue)
    }

    /// A reply on the client's own connection is bigger than its output buffer limit.
    fn over_output_limit(&self, held: usize, limit: usize) {
        eprintln!(
            "lockkit proxy: client {} closed: {held} bytes of replies held for it, over the output buffer limit of {limit}",
            self.info.id
        );
        crate::metrics::client_closed_for_memory();
    }

    /// Whether the operation timeout runs: on a connection of its own, with replies owed that
    /// pair with commands, none of them from a command that may block.
    fn timed(&self, up: &Up) -> bool {
        !up.is_shared() && self.mode.paired() && !self.owed.blocking() && self.owed_since.is_some()
    }

    /// Whether replies to forwarded commands are still to come (unknown, so `false`, past a
    /// change to a mode where replies no longer pair with commands).
    pub(crate) fn owes(&self, up: &Up) -> bool {
        up.owed() > 0 || self.owed.awaits_upstream()
    }

    /// Follows the replies owed on a connection of its own (for its operation timeout):
    /// `replied` after replies came back.
    fn track_owed(&mut self, up: &Up, replied: bool) {
        if up.is_shared() {
            return;
        }
        if !self.owes(up) {
            self.owed_since = None;
        } else if replied || self.owed_since.is_none() {
            self.owed_since = Some(Instant::now());
        }
    }

    /// The connection of its own gave no reply within the operation timeout: every command owed
    /// gets an error reply (answers of the proxy's own keep their place), then it closes.
    async fn fail_owed<CW: AsyncWrite + Unpin>(&mut self, cw: &mut CW) -> std::io::Result<()> {
        let e = resp::error_reply(&format!(
            "ERR lockkit proxy: no reply from upstream {} within {}; the command may or may not have run",
            self.shared.upstream.shown(),
            crate::health::shown(self.shared.op_timeout)
        ));
        let mut out = Vec::new();
        for slot in self.owed.drain() {
            match slot {
                OwedReply::Plain(n) | OwedReply::Timed { n, .. } => {
                    (0..n).for_each(|_| out.extend_from_slice(&e));
                }
                OwedReply::Swallow(_) => {}
                OwedReply::Local(bytes) => out.extend_from_slice(&bytes),
                OwedReply::Unpair | OwedReply::Close => break,
                OwedReply::Blocking
                | OwedReply::Tracked(_)
                | OwedReply::Lose
                | OwedReply::Scrub
                | OwedReply::ScrubExec
                | OwedReply::Reset => out.extend_from_slice(&e),
            }
        }
        cw.write_all(&out).await?;
        cw.flush().await
    }

    /// Writes the answers of the proxy's own at the head of the queue (nothing upstream is owed
    /// before them).
    pub(crate) async fn send_local_replies<CW: AsyncWrite + Unpin>(
        &mut self,
        cw: &mut CW,
    ) -> std::io::Result<()> {
        while let Some(OwedReply::Local(_)) = self.owed.front() {
            if let Some(OwedReply::Local(bytes)) = self.owed.pop() {
                cw.write_all(&bytes).await?;
            }
        }
        Ok(())
    }

    /// Whether every reply owed before a protocol error (or QUIT, or a lost reply) is out: the
    /// connection closes.
    pub(crate) fn closes_now(&mut self) -> bool {
        matches!(self.owed.front(), Some(OwedReply::Close))
    }

    /// Counts one command by name (`known`: a name of Redis's table; the others share one
    /// bucket past the first few, so the table stays bounded).
    pub(crate) fn count(&mut self, name: &[u8], known: bool) {
        match self.counts.get_mut(name) {
            Some(c) => *c += 1,
            None => {
                let key = crate::shared::bounded_name(name, known, self.counts.len());
                *self.counts.entry(key).or_default() += 1;
            }
        }
    }

    /// Hands the counts to the shared table when it is time.
    pub(crate) fn maybe_flush_counts(&mut self) {
        if self.last_flush.elapsed() >= FLUSH_EVERY {
            self.flush_counts();
        }
    }

    fn flush_counts(&mut self) {
        self.last_flush = Instant::now();
        if self.counts.is_empty() {
            return;
        }
        self.shared.add_counts(&mut self.counts);
    }
}
