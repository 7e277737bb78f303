//! The client's bytes, request by request: read once by [`lockkit_resp::RequestParser`] (as
//! redis-server reads them), classified once ([`ClientCommand`]), decided
//! ([`super::decide`]), shown to the plugins that declared them, and forwarded: the very bytes
//! read when they are the plain encoding of the request, its plain encoding otherwise, so the
//! server cannot read it any other way. Requests forwarded as read go upstream together, one
//! write per batch.

use std::borrow::Cow;
use std::ops::Range;
use std::time::{Duration, Instant};

use lockkit_resp::{ProtocolError, Request};
use tokio::io::AsyncWrite;

use super::command::{ClientCommand, ReplyMode, Special};
use super::conn::{ClientConn, Mode, Next, ReplyControl};
use super::decide::{Decision, ReplyHandling, Route};
use super::owed::{OwedReply, Tracked};
use crate::plugin::{Action, PluginCommand};
use crate::upstream::route::{Up, WINDOW};
use crate::upstream::RespVersion;

/// Requests read in one go and forwarded as read, not yet written upstream: `buf[from..]` up to
/// the current request, `sent` of them.
#[derive(Debug, Default)]
struct Batch {
    from: usize,
    sent: u32,
}

/// Whether to read on after a request.
enum Flow {
    Go,
    Stop(Next),
}

/// The name a command is counted and shown by: the table's, or (for a command Redis does not
/// know) its first argument upper case, at most 32 bytes.
fn unknown_name(name: &[u8]) -> Vec<u8> {
    name.iter().take(32).map(u8::to_ascii_uppercase).collect()
}

impl ClientConn {
    /// Reads the complete requests in `buf` and carries each out; keeps an incomplete tail.
    pub(crate) async fn on_client_bytes<CW: AsyncWrite + Unpin>(
        &mut self,
        buf: &mut Vec<u8>,
        up: &mut Up,
        cw: &mut CW,
    ) -> std::io::Result<Next> {
        match self.mode {
            Mode::Resetting { .. } => {
                self.held = true;
                return Ok(Next::Continue);
            }
            Mode::Closing => {
                buf.clear();
                return Ok(Next::Continue);
            }
            _ => self.held = false,
        }
        let mut batch = Batch::default();
        let mut pos = 0;
        let arrived = Instant::now();
        let mut next = Next::Continue;
        loop {
            if up.is_shared() && (up.owed() + batch.sent >= WINDOW || up.backlogged()) {
                self.held = true;
                break;
            }
            let req = match self.parser.parse(&buf[pos..], self.login.logged_in()) {
                Ok(Some(r)) => r,
                Ok(None) => {
                    let limit = self.shared.query_buffer_limit;
                    if self.parser.wanted() > limit {
                        eprintln!(
                            "lockkit proxy: client {} closed: its request needs {} bytes, over the query buffer limit of {limit}",
                            self.info.id,
                            self.parser.wanted()
                        );
                        next = Next::Close;
                    } else {
                        crate::resp::reserve_total(buf, pos + self.parser.wanted());
                    }
                    break;
                }
                Err(e) => {
                    self.flush(up, buf, &mut batch, pos).await?;
                    next = self.protocol_error(e, up);
                    pos = buf.len();
                    batch.from = pos;
                    break;
                }
            };
            let at = pos..pos + req.len();
            pos = at.end;
            let flow = self
                .on_request(&req, buf, at, &mut batch, up, cw, arrived)
                .await?;
            self.parser.recycle(req);
            if let Flow::Stop(n) = flow {
                next = n;
                break;
            }
        }
        if batch.from == 0 && pos == buf.len() && pos > crate::upstream::link::MOVE_OVER {
            // A big request, all of the buffer: moved on, not copied.
            let n = std::mem::take(&mut batch.sent);
            up.send_vec(&self.shared, self.info.id, std::mem::take(buf), n)
                .await?;
            pos = 0;
        }
        self.flush(up, buf, &mut batch, pos).await?;
        buf.drain(..pos);
        if let Some(m) = &mut self.metered {
            m.count();
        }
        self.send_local_replies(cw).await?;
        self.maybe_flush_counts();
        if self.closes_now() {
            return Ok(Next::Close);
        }
        Ok(next)
    }

    /// Writes the batch upstream, up to `to`.
    async fn flush(
        &mut self,
        up: &mut Up,
        buf: &[u8],
        batch: &mut Batch,
        to: usize,
    ) -> std::io::Result<()> {
        if batch.from < to {
            let n = std::mem::take(&mut batch.sent);
            up.send(&self.shared, self.info.id, &buf[batch.from..to], n)
                .await?;
        }
        batch.from = to;
        Ok(())
    }

    /// As Redis: the replies owed first, then the error, then the connection closes; nothing
    /// more is read from the client. With the error's reply turned off (`CLIENT REPLY OFF` or
    /// `SKIP`) Redis closes the connection only once it wrote something: after the replies owed,
    /// or never when none are (the connection stays open, read no more).
    fn protocol_error(&mut self, e: ProtocolError, up: &Up) -> Next {
        let hidden = self.replies.hide_next();
        let owes = self.owes(up);
        self.mode = Mode::Closing;
        if !hidden {
            self.owed.push(OwedReply::Local(e.reply()));
        }
        if !hidden || owes {
            self.owed.push(OwedReply::Close);
        }
        Next::Continue
    }

    /// Carries out one request, `buf[at]`.
    #[allow(clippy::too_many_arguments)]
    async fn on_request<CW: AsyncWrite + Unpin>(
        &mut self,
        req: &Request,
        buf: &[u8],
        at: Range<usize>,
        batch: &mut Batch,
        up: &mut Up,
        cw: &mut CW,
        arrived: Instant,
    ) -> std::io::Result<Flow> {
        let bytes = &buf[at.clone()];
        if req.is_empty() {
            // Redis reads it and does nothing, not even reply (a skipped reply is spent).
            self.replies.hide_next();
            self.flush(up, buf, batch, at.start).await?;
            batch.from = at.end;
            return Ok(Flow::Go);
        }
        let cmd = ClientCommand::classify(req, bytes);
        self.commands += 1;
        // Nothing is counted (or kept) for a client before it logged in.
        if self.login.logged_in() {
            match cmd.name() {
                Some(name) => self.count(name.as_bytes(), true),
                None => self.count(&unknown_name(req.arg(bytes, 0).unwrap_or_default()), false),
            }
        }
        // `CLIENT REPLY ON` is answered even when its own reply was to be skipped.
        let on = cmd.special == Special::ClientReply(Some(ReplyMode::On));
        let hidden = self.replies.hide_next() && !on;
        let decision = self.decide(&cmd, req, bytes, up);
        let forwarded = match decision {
            Decision::Forward(route) => (route, None),
            Decision::Instead(frame, route) => (route, Some(frame)),
            Decision::Hello(resp, frame) => {
                self.flush(up, buf, batch, at.start).await?;
                batch.from = at.end;
                if self.switch_resp(up, cw, resp).await? == Next::Close {
                    return Ok(Flow::Stop(Next::Close));
                }
                up.send(&self.shared, self.info.id, &frame, 1).await?;
                self.push_reply(hidden, ReplyHandling::Plain, None);
                return Ok(Flow::Go);
            }
            Decision::Reset => return self.on_reset(&cmd, req, buf, at, batch, up, cw).await,
            other => return self.answer(other, buf, at, batch, up, hidden).await,
        };
        let (route, instead) = forwarded;
        if route.own && up.is_cluster() && !up.cluster_takes(&cmd) {
            // In front of a cluster every command goes by its slot on the shared connections
            // (a transaction's commands too, queued in the proxy until EXEC).
            self.flush(up, buf, batch, at.start).await?;
            batch.from = at.end;
            self.push_local(crate::cluster::up::own_refusal(&cmd), hidden);
            return Ok(Flow::Go);
        }
        if route.own && up.is_shared() && !up.is_cluster() {
            self.flush(up, buf, batch, at.start).await?;
            if self.go_own(up, cw).await? == Next::Close {
                return Ok(Flow::Stop(Next::Close));
            }
        }
        if route.unpairs {
            self.unpair(up, buf, batch, at.start, hidden).await?;
        }
        match instead {
            Some(frame) => {
                self.flush(up, buf, batch, at.start).await?;
                batch.from = at.end;
                up.send(&self.shared, self.info.id, &frame, 1).await?;
                if self.mode.paired() {
                    self.push_reply(hidden, route.reply, None);
                }
                Ok(Flow::Go)
            }
            None => {
                let ctx = Forwarding {
                    cmd: &cmd,
                    req,
                    route,
                    hidden,
                    arrived,
                };
                self.forward(ctx, buf, at, batch, up).await
            }
        }
    }

    /// The answers of the proxy's own: nothing of the request goes upstream.
    async fn answer(
        &mut self,
        decision: Decision,
        buf: &[u8],
        at: Range<usize>,
        batch: &mut Batch,
        up: &mut Up,
        hidden: bool,
    ) -> std::io::Result<Flow> {
        self.flush(up, buf, batch, at.start).await?;
        batch.from = at.end;
        match decision {
            Decision::Nothing => {}
            Decision::Answer(reply) => self.push_local(reply, hidden),
            Decision::AnswerAndClose(reply) => {
                self.push_local(reply, hidden);
                self.close_after_owed();
                return Ok(Flow::Stop(Next::Continue));
            }
            Decision::CloseNow => return Ok(Flow::Stop(Next::Close)),
            Decision::Reset
            | Decision::Forward(_)
            | Decision::Instead(..)
            | Decision::Hello(..) => {}
        }
        Ok(Flow::Go)
    }

    /// An answer of the proxy's own, in turn (unless the client turned replies off).
    fn push_local(&mut self, reply: Vec<u8>, hidden: bool) {
        if !hidden {
            self.owed.push(OwedReply::Local(reply));
        }
    }

    /// The connection closes once the replies owed are out; nothing more is read.
    fn close_after_owed(&mut self) {
        self.owed.push(OwedReply::Close);
        self.mode = Mode::Closing;
    }

    /// Queues what becomes of a forwarded request's reply.
    fn push_reply(&mut self, hidden: bool, reply: ReplyHandling, tracked: Option<Tracked>) {
        self.push_timed_reply(hidden, reply, tracked, None);
    }

    /// As [`ClientConn::push_reply`], the reply timed by the command metrics when `timed`
    /// gives its label and the instant its read began.
    fn push_timed_reply(
        &mut self,
        hidden: bool,
        reply: ReplyHandling,
        tracked: Option<Tracked>,
        timed: Option<(u16, Instant)>,
    ) {
        if !self.mode.paired() {
            return;
        }
        let slot = match (hidden, reply, tracked, timed) {
            (true, ..) => OwedReply::Swallow(1),
            (false, _, Some(mut t), timed) => {
                t.timed = timed.map(|(label, _)| label);
                OwedReply::Tracked(Box::new(t))
            }
            (false, ReplyHandling::Plain, None, None) => {
                self.owed.push_plain();
                return;
            }
            (false, ReplyHandling::Plain, None, Some((label, sent))) => {
                self.owed.push_timed(label, sent);
                return;
            }
            (false, _, None, Some((label, sent))) => {
                OwedReply::Tracked(Box::new(Tracked::timed_only(label, self.commands, sent)))
            }
            (false, ReplyHandling::Blocking, None, None) => OwedReply::Blocking,
            (false, ReplyHandling::Scrub, None, None) => OwedReply::Scrub,
            (false, ReplyHandling::ScrubExec, None, None) => OwedReply::ScrubExec,
        };
        self.owed.push(slot);
    }

    /// From this request on replies no longer pair. `CLIENT REPLY OFF` or `SKIP` carried out
    /// by the proxy so far is handed to the server, which alone can tell its replies apart from
    /// here on.
    async fn unpair(
        &mut self,
        up: &mut Up,
        buf: &[u8],
        batch: &mut Batch,
        at: usize,
        hidden: bool,
    ) -> std::io::Result<()> {
        self.mode = Mode::Unpaired;
        let handed = if self.replies.off {
            Some(&b"*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$3\r\nOFF\r\n"[..])
        } else if hidden {
            Some(&b"*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$4\r\nSKIP\r\n"[..])
        } else {
            None
        };
        self.flush(up, buf, batch, at).await?;
        self.owed.push(OwedReply::Unpair);
        self.replies = ReplyControl::default();
        if let Some(frame) = handed {
            up.send(&self.shared, self.info.id, frame, 0).await?;
        }
        Ok(())
    }

    /// RESET: answered by the proxy where the client has nothing upstream to reset (on the
    /// shared connections, or before login); otherwise it goes to the server, and the client
    /// goes on from a fresh connection once its reply is out (nothing more is read meanwhile).
    #[allow(clippy::too_many_arguments)]
    async fn on_reset<CW: AsyncWrite + Unpin>(
        &mut self,
        cmd: &ClientCommand,
        req: &Request,
        buf: &[u8],
        at: Range<usize>,
        batch: &mut Batch,
        up: &mut Up,
        cw: &mut CW,
    ) -> std::io::Result<Flow> {
        if up.is_shared() || !self.login.logged_in() {
            self.flush(up, buf, batch, at.start).await?;
            batch.from = at.end;
            // Back to RESP2: the replies owed on RESP3 connections come first.
            if self.switch_resp(up, cw, RespVersion::Resp2).await? == Next::Close {
                return Ok(Flow::Stop(Next::Close));
            }
            self.reset_state();
            up.forget_transaction();
            self.owed.push(OwedReply::Local(b"+RESET\r\n".to_vec()));
            return Ok(Flow::Go);
        }
        let unpaired = !self.mode.paired();
        self.send_request(cmd, req, buf, at, batch, up).await?;
        if !unpaired {
            self.owed.push(OwedReply::Reset);
        }
        self.mode = Mode::Resetting { unpaired };
        self.held = true;
        Ok(Flow::Stop(Next::Continue))
    }

    /// Forwards the request `buf[at]` as read when those bytes are its plain encoding (with
    /// the batch), its plain encoding otherwise.
    async fn send_request(
        &mut self,
        cmd: &ClientCommand,
        req: &Request,
        buf: &[u8],
        at: Range<usize>,
        batch: &mut Batch,
        up: &mut Up,
    ) -> std::io::Result<()> {
        if up.is_cluster() {
            self.flush(up, buf, batch, at.start).await?;
            batch.from = at.end;
            let refused = cmd.refusal_reply(req, &buf[at.clone()]);
            if !cmd.shareable {
                up.set_cluster_name(self.setup.replay());
            }
            up.route(cmd, req, &buf[at], refused);
            return Ok(());
        }
        // `buf[batch.from..at.start]` holds only requests forwarded as read (any other request
        // flushed the batch before it and moved `batch.from` past itself): this one joins them.
        if req.is_canonical() {
            batch.sent += 1;
            return Ok(());
        }
        self.flush(up, buf, batch, at.start).await?;
        batch.from = at.end;
        let mut frame = std::mem::take(&mut self.scratch);
        frame.clear();
        req.write_canonical(&buf[at], &mut frame);
        let sent = up.send(&self.shared, self.info.id, &frame, 1).await;
        self.scratch = frame;
        sent
    }
}

/// One request on its way upstream.
struct Forwarding<'a> {
    cmd: &'a ClientCommand,
    req: &'a Request,
    route: Route,
    hidden: bool,
    arrived: Instant,
}

impl ClientConn {
    /// Runs the plugins that declared the request, then forwards it (unless a plugin answered,
    /// closed or held it).
    async fn forward(
        &mut self,
        f: Forwarding<'_>,
        buf: &[u8],
        at: Range<usize>,
        batch: &mut Batch,
        up: &mut Up,
    ) -> std::io::Result<Flow> {
        let bytes = &buf[at.clone()];
        let unknown;
        let name: &[u8] = match f.cmd.name() {
            Some(n) => n.as_bytes(),
            None => {
                unknown = unknown_name(f.req.arg(bytes, 0).unwrap_or_default());
                &unknown
            }
        };
        let timed = match (&mut self.metered, self.shared.command_metrics()) {
            (Some(m), Some(metrics)) => Some((m.command(metrics, f.cmd.name(), name), f.arrived)),
            _ => None,
        };
        if f.cmd.slow && up.is_shared() {
            // Sent on its own, so its longer allowance covers it alone.
            self.flush(up, buf, batch, at.start).await?;
            up.mark_slow();
        }
        let shared = self.shared.clone();
        let plugins = shared.plugins_for(name);
        if plugins.is_empty() {
            self.send_request(f.cmd, f.req, buf, at.clone(), batch, up)
                .await?;
            self.send_alone(&f, buf, at.end, batch, up).await?;
            self.push_timed_reply(f.hidden, f.route.reply, None, timed);
            return Ok(Flow::Go);
        }
        // A name of Redis's table is shown as it is; only another name is copied.
        let name_text: Cow<'static, str> = match f.cmd.name() {
            Some(n) => Cow::Borrowed(n),
            None => Cow::Owned(String::from_utf8_lossy(name).into_owned()),
        };
        let args: Vec<&[u8]> = f.req.args(bytes).collect();
        let cmd = PluginCommand {
            name: &name_text,
            args: args.get(1..).unwrap_or_default(),
            key: f.cmd.first_key.and_then(|k| args.get(k).copied()),
            index: self.commands,
            arrived: f.arrived,
        };
        let (action, until) = self.plugin_action(plugins, &cmd, f.cmd).await;
        match action {
            Action::Pass | Action::Hold(_) | Action::Delay(_) => {
                if let Some(t) = until {
                    self.flush(up, buf, batch, at.start).await?;
                    tokio::time::sleep_until(t.into()).await;
                }
                if let Action::Delay(d) = action {
                    self.flush(up, buf, batch, at.start).await?;
                    tokio::time::sleep(d).await;
                }
            }
            Action::LoseReply => {
                self.send_request(f.cmd, f.req, buf, at, batch, up).await?;
                if !self.mode.paired() {
                    return Ok(Flow::Stop(Next::Close));
                }
                self.owed.push(OwedReply::Lose);
                self.mode = Mode::Closing;
                return Ok(Flow::Stop(Next::Continue));
            }
            Action::Close => {
                self.flush(up, buf, batch, at.start).await?;
                batch.from = at.end;
                return Ok(Flow::Stop(Next::Close));
            }
            Action::Reply(bytes) => {
                self.flush(up, buf, batch, at.start).await?;
                batch.from = at.end;
                self.push_local(bytes, f.hidden);
                return Ok(Flow::Go);
            }
        }
        self.send_request(f.cmd, f.req, buf, at.clone(), batch, up)
            .await?;
        self.send_alone(&f, buf, at.end, batch, up).await?;
        if !self.mode.paired() {
            return Ok(Flow::Go);
        }
        let wants: Vec<usize> = (plugins.iter().copied())
            .filter(|&p| shared.plugins[p].wants_reply(&cmd))
            .collect();
        let tracked = (!wants.is_empty()).then(|| {
            Tracked::keep(
                &shared.plugins,
                wants,
                name_text.clone(),
                &args,
                f.cmd.first_key,
                self.commands,
                f.arrived,
            )
        });
        self.push_timed_reply(f.hidden, f.route.reply, tracked, timed);
        Ok(Flow::Go)
    }

    /// A known-slow command on a shared connection goes in a send of its own (the batch before
    /// it went when it was marked): the requests after it are not covered by its longer
    /// allowance.
    async fn send_alone(
        &mut self,
        f: &Forwarding<'_>,
        buf: &[u8],
        end: usize,
        batch: &mut Batch,
        up: &mut Up,
    ) -> std::io::Result<()> {
        if f.cmd.slow && up.is_shared() {
            self.flush(up, buf, batch, end).await?;
        }
        Ok(())
    }

    /// What the plugins that declared `cmd` decide, and the instant it is held to. Delays of
    /// several plugins add up and holds take the latest instant; the first plugin that
    /// answers, closes or loses the reply decides alone. An answer of a plugin's own is only used where it is
    /// in turn (replies pair, not inside MULTI) and never for MULTI, EXEC or DISCARD (the
    /// server must see them, or it stays in, or never enters, the transaction the client sees).
    async fn plugin_action(
        &self,
        plugins: &[usize],
        cmd: &PluginCommand<'_>,
        classified: &ClientCommand,
    ) -> (Action, Option<Instant>) {
        let shared = &self.shared;
        let mut action = Action::Pass;
        let mut delay = Duration::ZERO;
        let mut until: Option<Instant> = None;
        for &p in plugins {
            match shared
                .workers
                .on_command(&shared.plugins, p, &self.info, cmd)
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
        let transaction = matches!(
            classified.special,
            Special::Multi | Special::Exec | Special::Discard
        );
        if matches!(action, Action::Reply(_)) && (!self.mode.answerable() || transaction) {
            action = Action::Pass;
        }
        if !matches!(action, Action::Pass) {
            return (action, None);
        }
        if !delay.is_zero() {
            action = Action::Delay(delay);
        }
        (action, until)
    }
}
