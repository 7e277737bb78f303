//! Replies from upstream, each matched to the slot its command left in the queue of owed
//! replies ([`super::owed`]): passed on, shown to plugins, scrubbed of secrets, dropped, or
//! the end of a RESET; the proxy's own answers go out in their turn among them.

use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::conn::{ClientConn, Mode, Next};
use super::owed::{OwedReply, Tracked};
use crate::plugin::PluginCommand;
use crate::resp;

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

impl ClientConn {
    /// Splits the complete replies in `buf`, hands the awaited ones to their plugins and
    /// forwards everything to the client (what its slot says); keeps an incomplete tail.
    pub(crate) async fn on_upstream_bytes<CW: AsyncWrite + Unpin>(
        &mut self,
        buf: &mut Vec<u8>,
        cw: &mut CW,
    ) -> std::io::Result<Next> {
        let mut pos = 0;
        // Start of the bytes read but not yet written.
        let mut fwd = 0;
        let next = loop {
            match self.owed.front() {
                Some(OwedReply::Local(_) | OwedReply::Close) => {
                    self.record_timings();
                    cw.write_all(&buf[fwd..pos]).await?;
                    fwd = pos;
                    self.send_local_replies(cw).await?;
                    if self.closes_now() {
                        // The replies before it are out; whatever came after is not.
                        buf.clear();
                        return Ok(Next::Close);
                    }
                    continue;
                }
                Some(OwedReply::Unpair) => {
                    self.owed.pop();
                    continue;
                }
                _ => {}
            }
            if !self.mode.paired() && !self.owed.awaits_upstream() {
                // Every reply owed before replies stopped pairing is in: copy as they come.
                self.owed.clear();
                if self.mode != (Mode::Resetting { unpaired: true }) {
                    pos = buf.len();
                    break Next::Continue;
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
                break Next::Continue;
            }
            let len = match resp::frame_len(&buf[pos..]) {
                Ok(Some(l)) => l,
                Ok(None) => break Next::Continue,
                Err(_) => {
                    // Not RESP (a replication stream's payload): nothing pairs any more.
                    self.unpair_now();
                    pos = buf.len();
                    break Next::Continue;
                }
            };
            let start = pos;
            pos += len;
            if buf[start] == b'>' {
                // RESP3 push data (invalidations, pub/sub) answers no command.
                continue;
            }
            let frame = &buf[start..pos];
            let replaced = match self.owed.take_for_reply() {
                Some(OwedReply::Plain(_) | OwedReply::Blocking) => None,
                Some(OwedReply::Timed { label, sent, .. }) => {
                    if let Some(m) = &mut self.metered {
                        m.replied(label, sent);
                    }
                    None
                }
                Some(OwedReply::Tracked(t)) => {
                    if let (Some(m), Some(label)) = (&mut self.metered, t.timed) {
                        m.replied(label, t.sent);
                    }
                    self.reply_to_plugins(&t, frame).await
                }
                Some(OwedReply::Swallow(_)) => Some(Vec::new()),
                Some(OwedReply::Scrub) => Some(self.shared.secrets.scrub_config_reply(frame)),
                Some(OwedReply::ScrubExec) => Some(self.shared.secrets.scrub_exec_reply(frame)),
                Some(OwedReply::Reset) => {
                    self.record_timings();
                    cw.write_all(&buf[fwd..pos]).await?;
                    buf.clear();
                    return Ok(Next::Reset);
                }
                Some(OwedReply::Lose) => {
                    // The replies before it reach the client; this one and the rest never do.
                    self.record_timings();
                    cw.write_all(&buf[fwd..start]).await?;
                    buf.clear();
                    return Ok(Next::Close);
                }
                // More replies than commands (a mode this proxy did not foresee): stop
                // matching. (Local, Unpair and Close were taken care of above.)
                _ => {
                    self.unpair_now();
                    pos = buf.len();
                    break Next::Continue;
                }
            };
            if let Some(new) = replaced {
                self.record_timings();
                cw.write_all(&buf[fwd..start]).await?;
                cw.write_all(&new).await?;
                fwd = pos;
            }
        };
        self.record_timings();
        if fwd < pos {
            cw.write_all(&buf[fwd..pos]).await?;
        }
        buf.drain(..pos);
        Ok(next)
    }

    /// Hands the durations of the replies read so far to the recorder (before they are
    /// written: a client that scrapes `/metrics` after its reply finds it counted).
    fn record_timings(&mut self) {
        if let Some(m) = &mut self.metered {
            m.record();
        }
    }

    /// Replies stopped pairing without a command saying so: what is owed is forgotten and the
    /// bytes are copied as they come.
    fn unpair_now(&mut self) {
        self.owed.clear();
        if self.mode.paired() {
            self.mode = Mode::Unpaired;
        }
    }

    /// Hands `reply` to the plugins that wait for it; the reply to send instead, if one of
    /// them rewrote it (later plugins see the rewritten one).
    async fn reply_to_plugins(&self, t: &Tracked, reply: &[u8]) -> Option<Vec<u8>> {
        let latency = t.sent.elapsed();
        let args: Vec<&[u8]> = t.args.iter().skip(1).map(Vec::as_slice).collect();
        let cmd = PluginCommand {
            name: &t.name,
            args: &args,
            key: t.first_key.and_then(|k| t.args.get(k)).map(Vec::as_slice),
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
}
