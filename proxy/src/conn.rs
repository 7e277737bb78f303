//! One client connection, served by one task: commands are split (not decoded) and forwarded
//! as the very bytes read, replies are split and matched to their commands in order, so
//! plugins see each declared command with its reply.
//!
//! Commands go to a shared upstream connection ([`crate::upstream::link`]) while every one so far was
//! stateless ([`crate::stateless`]); the first that is not moves the client to a connection of
//! its own, for good, once every reply owed on the shared one has reached it. With sharing
//! off, each client has its own from the start.
//!
//! Replies stop being matched (the bytes still flow) once the connection enters a mode where
//! they no longer pair one-to-one with commands: pub/sub, MONITOR, CLIENT REPLY OFF/SKIP (all
//! of which happen on a connection of the client's own). A malformed request is answered as
//! Redis answers it ([`crate::protocol`]) and the connection closes.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fnv::FnvHashMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::auth::{Gate, Login};
use crate::health::may_block;
use crate::plugin::{Action, ConnInfo, PluginCommand};
use crate::resp;
use crate::setup::{Setup, SetupAction};
use crate::shared::ProxyShared;
use crate::stateless::is_stateless;
use crate::upstream::route::{Up, WINDOW};

/// Command counts are handed to the shared table at least this often.
const FLUSH_EVERY: Duration = Duration::from_millis(500);

/// A command forwarded upstream and not answered yet.
#[derive(Debug)]
enum InFlight {
    /// This many commands no plugin waits on.
    Plain(u32),
    /// A command plugins want the reply of.
    Tracked(Box<Tracked>),
    /// A command a plugin answered itself: its reply goes out once all before it have.
    Local(Vec<u8>),
    /// A command whose reply is lost: the connection closes when it comes.
    Lose,
    /// A `CONFIG GET` whose reply has its secrets blanked ([`crate::auth`]).
    Scrub,
    /// Replies stop pairing with commands once those before this are in.
    Unmatch,
    /// The connection closes once the replies before this are out (after a protocol error).
    Close,
    /// RESET: once its reply is out, a fresh upstream connection replaces this one.
    Reset,
    /// A command of the proxy's own (the client's name on its new connection): its reply is
    /// not passed on.
    Swallow,
}

#[derive(Debug)]
struct Tracked {
    frame: Vec<u8>,
    inline: bool,
    name: String,
    plugins: Vec<usize>,
    sent: Instant,
    index: u64,
    arrived: Instant,
}

impl InFlight {
    /// Whether a reply from upstream answers it.
    fn awaits_upstream(&self) -> bool {
        !matches!(
            self,
            InFlight::Local(_) | InFlight::Unmatch | InFlight::Close
        )
    }
}

/// The state of one proxied connection.
struct ClientConn {
    shared: Arc<ProxyShared>,
    info: ConnInfo,
    pending: VecDeque<InFlight>,
    /// Replies no longer pair with commands: copy blindly.
    unmatched: bool,
    in_multi: bool,
    /// A reply is being lost: nothing more is read from the client.
    losing: bool,
    /// Commands read from the client so far.
    commands: u64,
    /// Complete commands wait in the client's buffer until replies owed on the shared
    /// connection come back ([`WINDOW`]): nothing more is read from the client meanwhile.
    backlog: bool,
    counts: FnvHashMap<Vec<u8>, u64>,
    last_flush: Instant,
    /// On a connection of its own: since when replies are owed with none coming back (`None`:
    /// none owed).
    owed_since: Option<Instant>,
    /// A command that may block is owed a reply: no operation timeout until all are answered.
    patient: bool,
    login: Login,
    /// RESET went upstream: nothing more is read from the client until its reply is in.
    resetting: bool,
    /// What the client set up while on the shared connections.
    setup: Setup,
}

/// What the client's bytes asked for besides forwarding.
enum Next {
    Continue,
    Close,
    /// RESET's reply is out: the client goes on from a fresh upstream connection.
    Reset,
}

/// Serves one client until it or the upstream server closes, or `stop` fires: then it drains
/// (reads no more commands, passes on every reply owed for those forwarded) and closes.
pub async fn serve<CR, CW>(
    shared: Arc<ProxyShared>,
    info: ConnInfo,
    (mut cr, mut cw): (CR, CW),
    mut up: Up,
    mut stop: watch::Receiver<bool>,
) where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
{
    let login = Login::new(&shared.client_auth);
    let mut conn = ClientConn {
        login,
        shared,
        info,
        pending: VecDeque::new(),
        unmatched: false,
        in_multi: false,
        losing: false,
        commands: 0,
        backlog: false,
        counts: FnvHashMap::default(),
        last_flush: Instant::now(),
        owed_since: None,
        patient: false,
        resetting: false,
        setup: Setup::default(),
    };
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
    let mut draining = false;
    loop {
        if draining && !conn.owes(&up) {
            let _ = conn.send_local_replies(&mut cw).await;
            break;
        }
        resp::reserve(&mut cbuf);
        resp::reserve(&mut ubuf);
        let timed = !up.is_shared() && !conn.unmatched && !conn.patient;
        let timed = timed && conn.owed_since.is_some();
        tokio::select! {
            // Stopping first, then replies before new commands: what is owed goes out first.
            biased;
            _ = &mut stopped, if !draining => draining = true,
            r = up.read(&mut ubuf) => {
                match r {
                    Ok(0) | Err(_) => {
                        if conn.owes(&up) {
                            crate::metrics::upstream_error("lost");
                        }
                        break;
                    }
                    Ok(_) => {}
                }
                match conn.on_upstream_bytes(&mut ubuf, &mut cw).await {
                    Ok(Next::Continue) => {}
                    Ok(Next::Reset) => match conn.reset(&mut up, &mut cw).await {
                        Ok(Next::Continue) => ubuf.clear(),
                        _ => break,
                    },
                    Ok(Next::Close) | Err(_) => break,
                }
                if up.closing() {
                    break;
                }
                conn.track_owed(&up, true);
                if !up.is_shared() {
                    conn.shared.upstream.backoff().succeeded();
                }
                // Replies came back: commands held by the window may go now.
                if conn.backlog && !draining {
                    match conn.on_client_bytes(&mut cbuf, &mut up, &mut cw).await {
                        Ok(Next::Continue | Next::Reset) => {}
                        Ok(Next::Close) | Err(_) => break,
                    }
                }
            }
            () = &mut timer, if timed => {
                let since = conn.owed_since.unwrap_or_else(Instant::now);
                if since.elapsed() >= op_timeout {
                    crate::metrics::upstream_error("timeout");
                    conn.shared.upstream.backoff().failed();
                    let _ = conn.fail_owed(&mut cw).await;
                    break;
                }
                timer.as_mut().reset((since + op_timeout).into());
            }
            r = cr.read_buf(&mut cbuf), if !conn.backlog && !draining => {
                match r {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                match conn.on_client_bytes(&mut cbuf, &mut up, &mut cw).await {
                    Ok(Next::Continue | Next::Reset) => {}
                    Ok(Next::Close) | Err(_) => break,
                }
                conn.track_owed(&up, false);
            }
        }
    }
    conn.flush_counts();
    up.shutdown().await;
    let _ = cw.shutdown().await;
}

/// Where RESET's reply (`+RESET`) ends among the complete frames at the start of `buf`, or
/// where those complete frames end when it is not among them (all of `buf` past bytes that are
/// not RESP).
fn reset_reply_end(buf: &[u8]) -> Result<usize, usize> {
    let mut pos = 0;
    loop {
        match resp::frame_len(&buf[pos..]) {
            Ok(Some(len)) => {
                pos += len;
                if &buf[pos - len..pos] == b"+RESET\r\n" {
                    return Ok(pos);
                }
            }
            Ok(None) => return Err(pos),
            Err(_) => return Err(buf.len()),
        }
    }
}

/// After these, replies no longer pair with commands: `UNSUBSCRIBE a b` gets one reply per
/// channel, subscribed or not; `SYNC` and `PSYNC` turn the connection into the replication
/// stream (an RDB payload that is not a RESP frame, then the writes).
const UNMATCHED_MODES: [&[u8]; 9] = [
    b"SYNC",
    b"PSYNC",
    b"SUBSCRIBE",
    b"PSUBSCRIBE",
    b"SSUBSCRIBE",
    b"MONITOR",
    b"UNSUBSCRIBE",
    b"PUNSUBSCRIBE",
    b"SUNSUBSCRIBE",
];

impl ClientConn {
    /// Splits the complete commands in `buf`, runs the plugins on the declared ones, forwards
    /// the rest untouched and keeps the incomplete tail.
    async fn on_client_bytes<CW: AsyncWrite + Unpin>(
        &mut self,
        buf: &mut Vec<u8>,
        up: &mut Up,
        cw: &mut CW,
    ) -> std::io::Result<Next> {
        self.backlog = self.resetting;
        if self.resetting {
            return Ok(Next::Continue);
        }
        if self.losing {
            buf.clear();
            return Ok(Next::Continue);
        }
        let mut pos = 0;
        // Start of the bytes read but not yet forwarded.
        let mut fwd = 0;
        let mut plain_run = 0u32;
        // Commands in `buf[fwd..pos]` the server answers.
        let mut sent_run = 0u32;
        let mut next = Next::Continue;
        let shared = self.shared.clone();
        let arrived = Instant::now();
        loop {
            if up.is_shared() && up.owed() + sent_run >= WINDOW {
                self.backlog = true;
                break;
            }
            let frame = match crate::protocol::request_frame(&buf[pos..], self.login.logged_in()) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    // As Redis: the replies owed first, then the error, then the connection
                    // closes; nothing more is read from the client.
                    self.push_plain(std::mem::take(&mut plain_run));
                    self.send(up, &buf[fwd..pos], std::mem::take(&mut sent_run))
                        .await?;
                    pos = buf.len();
                    fwd = pos;
                    if self.unmatched {
                        if let Some(reply) = e.reply() {
                            cw.write_all(&reply).await?;
                        }
                        return Ok(Next::Close);
                    }
                    if let Some(reply) = e.reply() {
                        self.pending.push_back(InFlight::Local(reply));
                    }
                    self.pending.push_back(InFlight::Close);
                    self.losing = true;
                    break;
                }
            };
            let start = pos;
            pos += frame.len;
            let name_raw = &buf[start + frame.name.start..start + frame.name.end];
            let mut upper = [0u8; 32];
            let name: &[u8] = if name_raw.len() <= upper.len() {
                upper[..name_raw.len()].copy_from_slice(name_raw);
                upper[..name_raw.len()].make_ascii_uppercase();
                &upper[..name_raw.len()]
            } else {
                name_raw
            };
            if name.is_empty() {
                // An empty inline line: Redis ignores it and answers nothing.
                continue;
            }
            let answerable = !(self.unmatched || self.in_multi);
            let gate = self.login.gate_frame(
                &shared.client_auth,
                name,
                &buf[start..pos],
                frame.inline,
                answerable,
            );
            if let Gate::Answer(reply) | Gate::Close(reply) = &gate {
                self.push_plain(std::mem::take(&mut plain_run));
                self.send(up, &buf[fwd..start], std::mem::take(&mut sent_run))
                    .await?;
                fwd = pos;
                self.count(name);
                self.pending.push_back(InFlight::Local(reply.clone()));
                if let Gate::Close(_) = gate {
                    next = Next::Close;
                    break;
                }
                continue;
            }
            if name == b"RESET" {
                self.count(name);
                self.commands += 1;
                self.push_plain(std::mem::take(&mut plain_run));
                self.setup = Setup::default();
                if up.is_shared() {
                    // Nothing of the client's lives upstream: the proxy answers.
                    self.send(up, &buf[fwd..start], std::mem::take(&mut sent_run))
                        .await?;
                    self.pending
                        .push_back(InFlight::Local(b"+RESET\r\n".to_vec()));
                    fwd = pos;
                    continue;
                }
                // The server resets the connection (and logs it out, back to database 0): once
                // its reply is in, the client goes on from a fresh connection, as a new client.
                self.send(up, &buf[fwd..pos], std::mem::take(&mut sent_run) + 1)
                    .await?;
                fwd = pos;
                if !self.unmatched {
                    self.pending.push_back(InFlight::Reset);
                }
                self.resetting = true;
                self.backlog = true;
                break;
            }
            if up.is_shared() && matches!(name, b"CLIENT" | b"SELECT" | b"HELLO") {
                let args = match &gate {
                    Gate::Forward(instead) => resp::command_args(instead, false),
                    _ => resp::command_args(&buf[start..pos], frame.inline),
                };
                if let Some(action) = self.setup.on_shared(name, &args, shared.upstream.db()) {
                    self.count(name);
                    self.commands += 1;
                    self.push_plain(std::mem::take(&mut plain_run));
                    self.send(up, &buf[fwd..start], std::mem::take(&mut sent_run))
                        .await?;
                    fwd = pos;
                    match action {
                        SetupAction::Answer(reply) => {
                            self.pending.push_back(InFlight::Local(reply))
                        }
                        SetupAction::Send(instead) => {
                            self.send(up, &instead, 1).await?;
                            self.push_plain(1);
                        }
                    }
                    continue;
                }
            }
            let forward = matches!(gate, Gate::Forward(_));
            if up.is_shared() && (forward || !is_stateless(name, &buf[start..pos], frame.inline)) {
                let runs = (&mut plain_run, &mut sent_run);
                if let Next::Close = self.go_own(up, cw, &buf[fwd..start], runs).await? {
                    return Ok(Next::Close);
                }
                fwd = start;
            }
            self.count(name);
            self.commands += 1;
            // Slots before a change of mode are queued before it.
            self.push_plain(std::mem::take(&mut plain_run));
            self.note_mode(name, &buf[start..pos], frame.inline);
            self.patient |= may_block(name);
            match gate {
                Gate::Forward(instead) => {
                    self.send(up, &buf[fwd..start], std::mem::take(&mut sent_run))
                        .await?;
                    self.send(up, &instead, 1).await?;
                    self.push_plain(1);
                    fwd = pos;
                    continue;
                }
                Gate::Scrub => {
                    sent_run += 1;
                    if !self.unmatched {
                        self.pending.push_back(InFlight::Scrub);
                    }
                    continue;
                }
                _ => {}
            }
            let plugins = shared.plugins_for(name);
            if plugins.is_empty() {
                plain_run += 1;
                sent_run += 1;
                continue;
            }
            let name_text = String::from_utf8_lossy(name).into_owned();
            let frame_bytes = &buf[start..pos];
            let all_args = resp::command_args(frame_bytes, frame.inline);
            let cmd = PluginCommand {
                name: &name_text,
                args: all_args.get(1..).unwrap_or_default(),
                index: self.commands,
                arrived,
            };
            // Delays of several plugins add up and holds take the latest instant; the first
            // plugin that answers, closes or loses the reply decides alone.
            let mut action = Action::Pass;
            let mut delay = Duration::ZERO;
            let mut until: Option<Instant> = None;
            for &p in plugins {
                match shared
                    .workers
                    .on_command(&shared.plugins, p, &self.info, &cmd)
                    .await
                {
                    Action::Pass => {}
                    Action::Delay(d) => delay += d,
                    Action::Hold(t) => until = until.max(Some(t)),
                    other => {
                        action = other;
                        break;
                    }
                }
            }
            if matches!(action, Action::Pass) && (until.is_some() || !delay.is_zero()) {
                action = Action::Delay(delay);
            }
            // An answer of the proxy's own is only in turn while replies pair with commands, and
            // inside MULTI the client waits for QUEUED.
            // Nor for the transaction's own commands: the server must see MULTI, EXEC and
            // DISCARD, or it stays in (or never enters) the transaction the client sees.
            let transaction = matches!(name, b"MULTI" | b"EXEC" | b"DISCARD");
            if (!answerable || self.unmatched || self.in_multi || transaction)
                && matches!(action, Action::Reply(_))
            {
                action = Action::Pass;
            }
            match action {
                Action::Pass | Action::Hold(_) => {}
                Action::Delay(d) => {
                    self.push_plain(std::mem::take(&mut plain_run));
                    self.send(up, &buf[fwd..start], std::mem::take(&mut sent_run))
                        .await?;
                    fwd = start;
                    if let Some(t) = until {
                        tokio::time::sleep_until(t.into()).await;
                    }
                    if !d.is_zero() {
                        tokio::time::sleep(d).await;
                    }
                }
                Action::LoseReply => {
                    self.push_plain(std::mem::take(&mut plain_run));
                    self.send(up, &buf[fwd..pos], std::mem::take(&mut sent_run) + 1)
                        .await?;
                    fwd = pos;
                    if self.unmatched {
                        next = Next::Close;
                    } else {
                        self.pending.push_back(InFlight::Lose);
                        self.losing = true;
                    }
                    break;
                }
                Action::Close => {
                    self.push_plain(std::mem::take(&mut plain_run));
                    self.send(up, &buf[fwd..start], std::mem::take(&mut sent_run))
                        .await?;
                    fwd = pos;
                    next = Next::Close;
                    break;
                }
                Action::Reply(bytes) => {
                    self.push_plain(std::mem::take(&mut plain_run));
                    self.send(up, &buf[fwd..start], std::mem::take(&mut sent_run))
                        .await?;
                    fwd = pos;
                    self.pending.push_back(InFlight::Local(bytes));
                    continue;
                }
            }
            sent_run += 1;
            if self.unmatched {
                continue;
            }
            let wants: Vec<usize> = plugins
                .iter()
                .copied()
                .filter(|&p| shared.plugins[p].wants_reply(&cmd))
                .collect();
            if wants.is_empty() {
                plain_run += 1;
            } else {
                self.push_plain(std::mem::take(&mut plain_run));
                self.pending.push_back(InFlight::Tracked(Box::new(Tracked {
                    frame: frame_bytes.to_vec(),
                    inline: frame.inline,
                    name: name_text,
                    plugins: wants,
                    sent: Instant::now(),
                    index: self.commands,
                    arrived,
                })));
            }
        }
        self.push_plain(plain_run);
        if fwd < pos {
            self.send(up, &buf[fwd..pos], sent_run).await?;
        }
        buf.drain(..pos);
        self.send_local_replies(cw).await?;
        if self.closes_now() {
            return Ok(Next::Close);
        }
        if self.last_flush.elapsed() >= FLUSH_EVERY {
            self.flush_counts();
        }
        Ok(next)
    }

    /// Splits the complete replies in `buf`, hands the awaited ones to their plugins and
    /// forwards everything to the client.
    async fn on_upstream_bytes<CW: AsyncWrite + Unpin>(
        &mut self,
        buf: &mut Vec<u8>,
        cw: &mut CW,
    ) -> std::io::Result<Next> {
        if self.unmatched && self.losing {
            // The reply to lose can no longer be told apart: lose everything from here.
            return Ok(Next::Close);
        }
        let mut pos = 0;
        let mut fwd = 0;
        loop {
            if self.unmatched && self.pending_matched() == 0 {
                // Every reply owed before the change of mode is in: copy blindly from here.
                self.pending.clear();
                if !self.resetting {
                    pos = buf.len();
                    break;
                }
                // Frames are split again to find RESET's reply among them; the complete ones
                // go on, a partial one waits for its end.
                match reset_reply_end(&buf[pos..]) {
                    Ok(end) => {
                        cw.write_all(&buf[fwd..pos + end]).await?;
                        buf.clear();
                        return Ok(Next::Reset);
                    }
                    Err(complete) => pos += complete,
                }
                break;
            }
            let len = match resp::frame_len(&buf[pos..]) {
                Ok(Some(l)) => l,
                Ok(None) => break,
                Err(_) => {
                    self.unmatched = true;
                    self.pending.clear();
                    pos = buf.len();
                    break;
                }
            };
            let frame = &buf[pos..pos + len];
            let frame_start = pos;
            pos += len;
            if frame[0] == b'>' {
                // RESP3 push data (invalidations, pub/sub) answers no command.
                continue;
            }
            match self.pending.pop_front() {
                Some(InFlight::Plain(n)) if n > 1 => {
                    self.pending.push_front(InFlight::Plain(n - 1))
                }
                Some(InFlight::Tracked(t)) => {
                    if let Some(new) = self.reply_to_plugins(&t, frame).await {
                        cw.write_all(&buf[fwd..frame_start]).await?;
                        cw.write_all(&new).await?;
                        fwd = pos;
                    }
                }
                Some(InFlight::Scrub) => {
                    cw.write_all(&buf[fwd..frame_start]).await?;
                    cw.write_all(&crate::auth::scrub_config_reply(frame))
                        .await?;
                    fwd = pos;
                }
                Some(InFlight::Swallow) => {
                    cw.write_all(&buf[fwd..frame_start]).await?;
                    fwd = pos;
                }
                Some(InFlight::Reset) => {
                    cw.write_all(&buf[fwd..pos]).await?;
                    buf.clear();
                    return Ok(Next::Reset);
                }
                Some(InFlight::Lose) => {
                    // The replies before it reach the client; this one and the rest never do.
                    cw.write_all(&buf[fwd..frame_start]).await?;
                    return Ok(Next::Close);
                }
                // More replies than commands (a mode this proxy did not foresee): stop matching.
                None => {
                    self.unmatched = true;
                    pos = buf.len();
                    break;
                }
                _ => {}
            }
            if matches!(
                self.pending.front(),
                Some(InFlight::Local(_) | InFlight::Close)
            ) {
                cw.write_all(&buf[fwd..pos]).await?;
                fwd = pos;
                self.send_local_replies(cw).await?;
                if self.closes_now() {
                    return Ok(Next::Close);
                }
            }
        }
        if fwd < pos {
            cw.write_all(&buf[fwd..pos]).await?;
        }
        buf.drain(..pos);
        Ok(Next::Continue)
    }

    /// Sends complete commands that get `n` replies upstream.
    async fn send(&self, up: &mut Up, bytes: &[u8], n: u32) -> std::io::Result<()> {
        up.send(&self.shared, self.info.id, bytes, n).await
    }

    /// Moves the client from the shared connection to one of its own: the commands read before
    /// (`unsent`, and the runs of plain and answered commands in it) go on the shared one, and
    /// every reply owed there reaches the client first, so the order holds.
    async fn go_own<CW: AsyncWrite + Unpin>(
        &mut self,
        up: &mut Up,
        cw: &mut CW,
        unsent: &[u8],
        (plain_run, sent_run): (&mut u32, &mut u32),
    ) -> std::io::Result<Next> {
        self.push_plain(std::mem::take(plain_run));
        self.send(up, unsent, std::mem::take(sent_run)).await?;
        let mut replies = Vec::new();
        while up.owed() > 0 {
            up.read(&mut replies).await?;
            if let Next::Close = self.on_upstream_bytes(&mut replies, cw).await? {
                return Ok(Next::Close);
            }
            if up.closing() {
                return Ok(Next::Close);
            }
        }
        match self.shared.upstream.connect().await {
            Ok(conn) => {
                *up = Up::own(conn);
                if let Some(name) = self.setup.replay() {
                    self.send(up, &name, 1).await?;
                    self.pending.push_back(InFlight::Swallow);
                }
                Ok(Next::Continue)
            }
            Err(e) => {
                crate::metrics::upstream_error("connect");
                self.send_local_replies(cw).await?;
                let msg = format!(
                    "ERR lockkit proxy: upstream {} unusable: {e}",
                    self.shared.upstream.shown()
                );
                cw.write_all(&resp::error_reply(&msg)).await?;
                Ok(Next::Close)
            }
        }
    }

    /// Hands `reply` to the plugins that wait for it; the reply to send instead, if one of
    /// them rewrote it (later plugins see the rewritten one).
    async fn reply_to_plugins(&self, t: &Tracked, reply: &[u8]) -> Option<Vec<u8>> {
        let latency = t.sent.elapsed();
        let all_args = resp::command_args(&t.frame, t.inline);
        let cmd = PluginCommand {
            name: &t.name,
            args: all_args.get(1..).unwrap_or_default(),
            index: t.index,
            arrived: t.arrived,
        };
        let (plugins, workers) = (&self.shared.plugins, &self.shared.workers);
        let mut rewritten: Option<Vec<u8>> = None;
        for &p in &t.plugins {
            let now = rewritten.as_deref().unwrap_or(reply);
            if plugins[p].rewrites_replies() {
                let new = workers.rewrite_reply(plugins, p, &self.info, &cmd, now, latency);
                if let Some(new) = new.await {
                    rewritten = Some(new);
                }
            } else {
                workers.on_reply(plugins, p, &self.info, &cmd, now, latency);
            }
        }
        rewritten
    }

    /// Writes the plugin answers at the head of the queue (nothing upstream is owed before them).
    async fn send_local_replies<CW: AsyncWrite + Unpin>(
        &mut self,
        cw: &mut CW,
    ) -> std::io::Result<()> {
        while let Some(InFlight::Local(_)) = self.pending.front() {
            if let Some(InFlight::Local(bytes)) = self.pending.pop_front() {
                cw.write_all(&bytes).await?;
            }
        }
        Ok(())
    }

    /// Whether replies to forwarded commands are still to come (unknown, so `false`, past a
    /// change to a mode where replies no longer pair with commands).
    fn owes(&self, up: &Up) -> bool {
        up.owed() > 0
            || (self.pending.iter())
                .take_while(|s| !matches!(s, InFlight::Unmatch))
                .any(InFlight::awaits_upstream)
    }

    /// Follows the replies owed on a connection of its own (for its operation timeout):
    /// `replied` after replies came back.
    fn track_owed(&mut self, up: &Up, replied: bool) {
        if up.is_shared() {
            return;
        }
        if !self.owes(up) {
            self.owed_since = None;
            self.patient = false;
        } else if replied || self.owed_since.is_none() {
            self.owed_since = Some(Instant::now());
        }
    }

    /// The connection of its own gave no reply within the operation timeout: every command owed
    /// gets an error reply (answers of the plugins' own keep their place), then it closes.
    async fn fail_owed<CW: AsyncWrite + Unpin>(&mut self, cw: &mut CW) -> std::io::Result<()> {
        let e = resp::error_reply(&format!(
            "ERR lockkit proxy: no reply from upstream {} within {}; the command may or may not have run",
            self.shared.upstream.shown(),
            crate::health::shown(self.shared.op_timeout)
        ));
        let mut out = Vec::new();
        for slot in self.pending.drain(..) {
            match slot {
                InFlight::Plain(n) => (0..n).for_each(|_| out.extend_from_slice(&e)),
                InFlight::Local(bytes) => out.extend_from_slice(&bytes),
                InFlight::Unmatch | InFlight::Close => break,
                InFlight::Tracked(_)
                | InFlight::Lose
                | InFlight::Scrub
                | InFlight::Reset
                | InFlight::Swallow => out.extend_from_slice(&e),
            }
        }
        cw.write_all(&out).await?;
        cw.flush().await
    }

    /// RESET's reply is out: the client's connection is replaced by a fresh one (back on the
    /// shared ones when there are), and the client's commands read meanwhile go on from there.
    async fn reset<CW: AsyncWrite + Unpin>(
        &mut self,
        up: &mut Up,
        cw: &mut CW,
    ) -> std::io::Result<Next> {
        up.shutdown().await;
        self.resetting = false;
        self.unmatched = false;
        self.in_multi = false;
        self.losing = false;
        self.pending.clear();
        self.setup = Setup::default();
        // The client's commands read meanwhile are taken up once the fresh connection is in place.
        self.backlog = true;
        if self.shared.pool.is_some() {
            *up = Up::shared();
            return Ok(Next::Continue);
        }
        match self.shared.upstream.connect().await {
            Ok(conn) => {
                *up = Up::own(conn);
                Ok(Next::Continue)
            }
            Err(e) => {
                let msg = format!(
                    "ERR lockkit proxy: upstream {} unusable: {e}",
                    self.shared.upstream.shown()
                );
                cw.write_all(&resp::error_reply(&msg)).await?;
                Ok(Next::Close)
            }
        }
    }

    /// Every reply owed before a protocol error is out: the connection closes.
    fn closes_now(&self) -> bool {
        matches!(self.pending.front(), Some(InFlight::Close))
    }

    fn push_plain(&mut self, n: u32) {
        if n == 0 || self.unmatched {
            return;
        }
        match self.pending.back_mut() {
            Some(InFlight::Plain(m)) => *m += n,
            _ => self.pending.push_back(InFlight::Plain(n)),
        }
    }

    /// Follows the commands that change how replies pair with commands.
    fn note_mode(&mut self, name: &[u8], frame: &[u8], inline: bool) {
        match name {
            b"MULTI" => self.in_multi = true,
            b"EXEC" | b"DISCARD" | b"RESET" => self.in_multi = false,
            b"CLIENT" => {
                let args = resp::command_args(frame, inline);
                let sub = args.get(1).map(|s| s.to_ascii_uppercase());
                let mode = args.get(2).map(|s| s.to_ascii_uppercase());
                if sub.as_deref() == Some(b"REPLY") && mode.as_deref() != Some(b"ON") {
                    self.go_unmatched();
                }
            }
            n if UNMATCHED_MODES.contains(&n) => self.go_unmatched(),
            _ => {}
        }
    }

    fn go_unmatched(&mut self) {
        // The replies owed before are still matched (plugins see them, answers of the proxy's
        // own keep their place among them); from the marker on, bytes are copied blindly.
        if !self.unmatched {
            self.unmatched = true;
            self.pending.push_back(InFlight::Unmatch);
        }
    }

    /// Slots still waiting for a reply from upstream before the change of mode.
    fn pending_matched(&self) -> usize {
        self.pending
            .iter()
            .take_while(|s| !matches!(s, InFlight::Unmatch))
            .filter(|s| !matches!(s, InFlight::Local(_)))
            .count()
    }

    fn count(&mut self, name: &[u8]) {
        match self.counts.get_mut(name) {
            Some(c) => *c += 1,
            None => {
                self.counts.insert(name.to_vec(), 1);
            }
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
