//! Where a client's commands go: a shared upstream connection ([`crate::upstream::link`]) while every
//! command so far was stateless, then a connection of the client's own.

use crate::sock::{UpConn as ServerStream, UpRead as ReadHalf, UpWrite as WriteHalf};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::cluster::up::ClusterUp;
use crate::resp;
use crate::shared::ProxyShared;
use crate::upstream::link::{Delivery, DeliveryTx, UpstreamLink, UpstreamRequest};
use crate::upstream::outbuf::OutBuf;
use crate::upstream::RespVersion;

/// Commands of one client in flight on a shared connection at most: a client that does not read
/// its replies holds at most this many in the proxy's memory.
pub(crate) const WINDOW: u32 = 128;

/// Where a client's commands go.
pub(crate) enum Up {
    /// A shared connection, while every command so far was stateless.
    Shared(SharedUp),
    /// A connection of the client's own.
    Own { r: ReadHalf, w: WriteHalf },
    /// Routed by slot to the masters of a cluster ([`crate::cluster`]); it shares as `Shared`.
    Cluster(Box<ClusterUp>),
}

/// A client's side of the shared connections.
pub(crate) struct SharedUp {
    /// The shared connection its commands in flight are on.
    link: Option<UpstreamLink>,
    tx: DeliveryTx,
    rx: mpsc::UnboundedReceiver<Delivery>,
    /// Replies still owed by the shared connection.
    owed: u32,
    /// The upstream server could not be reached: close once the error replies are out.
    closing: bool,
    /// The protocol of the shared connections it uses: the client's own.
    resp: RespVersion,
    /// The next send holds a known-slow command.
    slow: bool,
    /// The replies handed to it and not yet written (bounded in bytes).
    out: Arc<OutBuf>,
    /// Bytes of replies taken off the channel since the last [`Up::written`].
    taken: usize,
}

impl Up {
    /// Client `id` sharing, until a command needs a connection of its own (RESP2, as a new
    /// connection).
    pub(crate) fn shared(id: u64, shared: &ProxyShared) -> Up {
        let (tx, rx) = mpsc::unbounded_channel();
        let out = OutBuf::new(
            id,
            shared.output_buffer_limit,
            &shared.clients_memory,
            tx.clone(),
        );
        Up::Shared(SharedUp {
            link: None,
            tx,
            rx,
            owed: 0,
            closing: false,
            resp: RespVersion::Resp2,
            slow: false,
            out,
            taken: 0,
        })
    }

    /// Client `id` in front of a cluster.
    pub(crate) fn cluster(id: u64, shared: &ProxyShared) -> Option<Up> {
        let router = shared.cluster.clone()?;
        Some(Up::Cluster(Box::new(ClusterUp::new(router, id, shared))))
    }

    /// Whether it routes to a cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Up::Cluster(_))
    }

    /// Routes one request to a cluster (`false`: not in front of a cluster, nothing done).
    pub(crate) fn route(
        &mut self,
        cmd: &crate::client::command::ClientCommand,
        req: &lockkit_resp::Request,
        bytes: &[u8],
        refused: Option<Vec<u8>>,
    ) -> bool {
        match self {
            Up::Cluster(c) => {
                c.route(cmd, req, bytes, refused);
                true
            }
            _ => false,
        }
    }

    /// In front of a cluster: whether `cmd`, which needs a connection of its own, is carried
    /// ([`crate::cluster::own`]).
    pub(crate) fn cluster_takes(&self, cmd: &crate::client::command::ClientCommand) -> bool {
        matches!(self, Up::Cluster(c) if c.takes(cmd))
    }

    /// In front of a cluster: the `CLIENT SETNAME` of the client's name, for its own
    /// connections to the nodes.
    pub(crate) fn set_cluster_name(&mut self, replay: Option<Vec<u8>>) {
        if let Up::Cluster(c) = self {
            c.set_name(replay);
        }
    }

    /// In front of a cluster: the transaction being queued, if any, is dropped (`RESET`).
    pub(crate) fn forget_transaction(&mut self) {
        if let Up::Cluster(c) = self {
            c.forget_transaction();
        }
    }

    /// The replies read for the client were written: they are no longer held.
    pub(crate) fn written(&mut self) {
        if let Up::Cluster(c) = self {
            c.written();
        }
        if let Up::Shared(s) = self {
            if s.taken > 0 {
                s.out.sub(std::mem::take(&mut s.taken));
            }
        }
    }

    /// The output buffer of a sharing client.
    pub(crate) fn outbuf(&self) -> Option<Arc<OutBuf>> {
        match self {
            Up::Shared(s) => Some(s.out.clone()),
            Up::Cluster(c) => Some(c.out().clone()),
            Up::Own { .. } => None,
        }
    }

    /// A sharing client was closed for the replies held for it.
    pub(crate) fn killed(&self) -> bool {
        match self {
            Up::Shared(s) => s.out.is_killed(),
            Up::Cluster(c) => c.out().is_killed(),
            Up::Own { .. } => false,
        }
    }

    /// A sharing client holds so many replies not yet written that it sends no more commands
    /// until it drains.
    pub(crate) fn backlogged(&self) -> bool {
        match self {
            Up::Shared(s) => s.out.full(),
            Up::Cluster(c) => c.out().full(),
            Up::Own { .. } => false,
        }
    }

    /// Moves a sharing client to the shared connections of protocol `resp`. Only with nothing
    /// owed: the replies of two connections would race each other.
    pub(crate) fn set_resp(&mut self, resp: RespVersion) {
        if let Up::Cluster(c) = self {
            c.set_resp(resp);
        }
        if let Up::Shared(s) = self {
            debug_assert_eq!(s.owed, 0, "a protocol change with replies owed");
            if s.resp != resp {
                s.resp = resp;
                s.link = None;
            }
        }
    }

    /// The protocol of the shared connections a sharing client uses.
    pub(crate) fn resp(&self) -> Option<RespVersion> {
        match self {
            Up::Shared(s) => Some(s.resp),
            Up::Cluster(c) => Some(c.resp()),
            Up::Own { .. } => None,
        }
    }

    /// On a connection of its own.
    pub(crate) fn own(conn: ServerStream) -> Up {
        let (r, w) = conn.into_split();
        Up::Own { r, w }
    }

    /// Replies owed by a shared connection.
    pub(crate) fn owed(&self) -> u32 {
        match self {
            Up::Shared(s) => s.owed,
            Up::Cluster(c) => c.owed(),
            Up::Own { .. } => 0,
        }
    }

    /// The next send (on a shared connection) holds a known-slow command.
    pub(crate) fn mark_slow(&mut self) {
        if let Up::Cluster(c) = self {
            c.mark_slow();
        }
        if let Up::Shared(s) = self {
            s.slow = true;
        }
    }

    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, Up::Shared(_) | Up::Cluster(_))
    }

    /// The error replies of an unreachable upstream are out: the client's connection closes.
    pub(crate) fn closing(&self) -> bool {
        matches!(self, Up::Shared(s) if s.closing)
    }

    /// Reads what the upstream answered (complete frames when shared) into `buf`; 0 at the end.
    pub(crate) async fn read(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        match self {
            Up::Own { r, .. } => r.read_buf(buf).await,
            Up::Cluster(c) => c.read(buf).await,
            Up::Shared(s) => match s.rx.recv().await {
                // Closed for the replies held for it: none of them is passed on.
                Some(_) if s.out.is_killed() => {
                    Err(std::io::Error::other("closed for the replies held for it"))
                }
                Some(d) => Ok(s.accept(d, buf)),
                // It holds a sender of its own: never.
                None => std::future::pending().await,
            },
        }
    }

    /// Sends complete commands that get `n` replies.
    pub(crate) async fn send(
        &mut self,
        shared: &ProxyShared,
        id: u64,
        bytes: &[u8],
        n: u32,
    ) -> std::io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        match self {
            Up::Own { w, .. } => w.write_all(bytes).await,
            Up::Cluster(c) => {
                c.send_raw(bytes, n);
                Ok(())
            }
            Up::Shared(s) => {
                s.send(shared, id, bytes.to_vec(), n);
                Ok(())
            }
        }
    }

    /// [`Up::send`] of bytes it may keep (no copy on the way to a shared connection).
    pub(crate) async fn send_vec(
        &mut self,
        shared: &ProxyShared,
        id: u64,
        bytes: Vec<u8>,
        n: u32,
    ) -> std::io::Result<()> {
        match self {
            Up::Shared(s) if !bytes.is_empty() => {
                s.send(shared, id, bytes, n);
                Ok(())
            }
            _ => self.send(shared, id, &bytes, n).await,
        }
    }

    pub(crate) async fn shutdown(&mut self) {
        if let Up::Own { w, .. } = self {
            let _ = w.shutdown().await;
        }
    }
}

impl SharedUp {
    fn send(&mut self, shared: &ProxyShared, id: u64, bytes: Vec<u8>, n: u32) {
        // Only with nothing owed may it change connections: the replies of two connections
        // would race each other.
        if self.owed == 0 && self.link.as_ref().is_none_or(UpstreamLink::is_dead) {
            if let Some(pool) = &shared.pool {
                self.link = Some(pool.link(id, self.resp));
            }
        }
        let Some(link) = &self.link else { return };
        let req = UpstreamRequest {
            bytes,
            n,
            out: self.out.clone(),
            slow: std::mem::take(&mut self.slow),
            to: self.tx.clone(),
        };
        self.owed += n;
        if let Err(req) = link.send(req) {
            // The connection failed, and failed what it had taken before it closed: these,
            // never sent, are answered after them, in order.
            if req.n > 0 {
                let why = format!(
                    "ERR lockkit proxy: connection to upstream {} lost; the command was not sent",
                    shared.upstream.shown()
                );
                let _ = self.tx.send(Delivery::Failed {
                    n: req.n,
                    why: why.into(),
                    close: false,
                });
            }
        }
    }

    /// Appends a delivery's replies (or an error reply for each failed command) to `buf`.
    fn accept(&mut self, d: Delivery, buf: &mut Vec<u8>) -> usize {
        match d {
            Delivery::Replies(bytes, n) => {
                self.owed -= n;
                let len = bytes.len();
                self.taken += len;
                if buf.is_empty() && len > crate::upstream::link::MOVE_OVER {
                    // A big reply is moved, not copied.
                    *buf = bytes;
                } else {
                    buf.extend_from_slice(&bytes);
                }
                len
            }
            Delivery::Failed { n, why, close } => {
                self.owed -= n;
                self.closing |= close;
                let e = resp::error_reply(&why);
                for _ in 0..n {
                    buf.extend_from_slice(&e);
                }
                e.len() * n as usize
            }
            Delivery::Closed => 0,
        }
    }
}
