//! A client changing upstream connections without losing the order of its replies: from the
//! shared connections to one of its own (for good), from one protocol's shared connections to
//! the other's (`HELLO 3`, `HELLO 2`), and to a fresh start after `RESET`. Each move first
//! waits until every reply owed where the client was has reached it.

use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::conn::{ClientConn, Mode, Next, ReplyControl};
use super::owed::OwedReply;
use super::setup::Setup;
use crate::resp;
use crate::upstream::route::Up;
use crate::upstream::RespVersion;

impl ClientConn {
    /// Waits until every reply owed on the shared connection has reached the client.
    async fn drain_shared<CW: AsyncWrite + Unpin>(
        &mut self,
        up: &mut Up,
        cw: &mut CW,
    ) -> std::io::Result<Next> {
        let mut replies = Vec::new();
        while up.owed() > 0 {
            up.read(&mut replies).await?;
            if self.on_upstream_bytes(&mut replies, cw).await? == Next::Close || up.closing() {
                return Ok(Next::Close);
            }
        }
        Ok(Next::Continue)
    }

    /// Moves the client from the shared connections to one of its own, speaking its protocol,
    /// named as it named itself. The commands read before went on the shared one already.
    pub(crate) async fn go_own<CW: AsyncWrite + Unpin>(
        &mut self,
        up: &mut Up,
        cw: &mut CW,
    ) -> std::io::Result<Next> {
        if self.drain_shared(up, cw).await? == Next::Close {
            return Ok(Next::Close);
        }
        match self.shared.upstream.connect_as(self.resp).await {
            Ok(conn) => {
                *up = Up::own(conn);
                if let Some(name) = self.setup.replay() {
                    up.send(&self.shared, self.info.id, &name, 1).await?;
                    self.owed.push(OwedReply::Swallow(1));
                }
                Ok(Next::Continue)
            }
            Err(e) => {
                crate::metrics::upstream_error("connect");
                self.send_local_replies(cw).await?;
                self.unusable(cw, &e).await?;
                Ok(Next::Close)
            }
        }
    }

    /// Tells the client the upstream cannot be used.
    async fn unusable<CW: AsyncWrite + Unpin>(
        &self,
        cw: &mut CW,
        why: &str,
    ) -> std::io::Result<()> {
        let msg = format!(
            "ERR lockkit proxy: upstream {} unusable: {why}",
            self.shared.upstream.shown()
        );
        cw.write_all(&resp::error_reply(&msg)).await
    }

    /// Moves a sharing client to the shared connections of protocol `resp`.
    pub(crate) async fn switch_resp<CW: AsyncWrite + Unpin>(
        &mut self,
        up: &mut Up,
        cw: &mut CW,
        resp: RespVersion,
    ) -> std::io::Result<Next> {
        if up.resp().is_some_and(|r| r != resp) {
            if self.drain_shared(up, cw).await? == Next::Close {
                return Ok(Next::Close);
            }
            up.set_resp(resp);
        }
        self.resp = resp;
        Ok(Next::Continue)
    }

    /// What `RESET` resets at the proxy: the login (with client passwords), the name, the
    /// protocol, `CLIENT REPLY`, the transaction.
    pub(crate) fn reset_state(&mut self) {
        self.login.reset(&self.shared.client_auth());
        self.setup = Setup::default();
        self.replies = ReplyControl::default();
        self.resp = RespVersion::Resp2;
        self.mode = Mode::Paired;
    }

    /// RESET's reply is out: the client's connection is replaced by a fresh one (back on the
    /// shared ones when there are), and the client's commands read meanwhile go on from there.
    pub(crate) async fn reset<CW: AsyncWrite + Unpin>(
        &mut self,
        up: &mut Up,
        cw: &mut CW,
    ) -> std::io::Result<Next> {
        up.shutdown().await;
        self.owed.clear();
        self.reset_state();
        // The client's commands read meanwhile are taken up once the fresh connection is in place.
        self.held = true;
        if self.shared.pool.is_some() {
            *up = Up::shared(self.info.id, &self.shared);
            return Ok(Next::Continue);
        }
        match self.shared.upstream.connect().await {
            Ok(conn) => {
                *up = Up::own(conn);
                Ok(Next::Continue)
            }
            Err(e) => {
                self.unusable(cw, &e).await?;
                Ok(Next::Close)
            }
        }
    }
}
