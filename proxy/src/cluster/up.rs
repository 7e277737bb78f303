//! A client's side of the cluster ([`ClusterUp`]): each request is routed by its keys' slot to
//! that slot's master on the shared connection to it, split per slot and merged for the
//! multi-key commands that allow it, sent to every master for the server-wide ones, or
//! answered in the proxy (`-CROSSSLOT`, `PING`, `CLUSTER`, a transaction's queueing,
//! [`super::multi`]). Replies come back in the order of
//! the requests whatever node answers first; a `-MOVED`, `-ASK`, `-TRYAGAIN` or
//! `-CLUSTERDOWN` is dealt with here and never reaches the client.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

mod redirect;

use lockkit_resp::Request;
use tokio::sync::mpsc;

use super::keys::{key_positions, keys_of, Keys};
use super::merge::{bulk, Merge};
use super::Router;
use crate::client::command::ClientCommand;
use crate::resp;
use crate::upstream::link::{Delivery, DeliveryTx, Pool, UpstreamRequest};
use crate::upstream::outbuf::OutBuf;
use crate::upstream::RespVersion;

/// Redis's reply to a multi-key command over several slots.
pub(crate) const CROSSSLOT: &[u8] = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";
/// A standalone server's reply to `CLUSTER`, `READONLY`, `READWRITE` and `ASKING`.
pub(crate) const NO_CLUSTER: &[u8] = b"-ERR This instance has cluster support disabled\r\n";

/// The `DEBUG` subcommands that name a key: to its master (the rest go to every master).
const DEBUG_KEYED: [&[u8]; 6] = [
    b"OBJECT",
    b"DIGEST-VALUE",
    b"HTSTATS-KEY",
    b"LISTPACK",
    b"QUICKLIST",
    b"SDSLEN",
];
/// The multi-key commands split per slot.
const SPLIT: [&str; 6] = ["MGET", "MSET", "DEL", "UNLINK", "EXISTS", "TOUCH"];
/// Sent to every master; the first error, else the first reply, is the answer.
pub(super) const EVERY_MASTER: [&str; 11] = [
    "FLUSHALL",
    "FLUSHDB",
    "SCRIPT|LOAD",
    "SCRIPT|FLUSH",
    "SCRIPT|KILL",
    "FUNCTION|LOAD",
    "FUNCTION|FLUSH",
    "FUNCTION|DELETE",
    "FUNCTION|KILL",
    "CONFIG|SET",
    "CONFIG|RESETSTAT",
];

/// One part of a request, on one node.
#[derive(Debug)]
pub(super) struct Part {
    frame: Vec<u8>,
    /// The slot of its keys (`None`: keyless).
    slot: Option<u16>,
    /// Where it goes whatever the slot (a server-wide command on every master, a redirection).
    pub(super) to: Option<String>,
    /// Commands sent just before it, their replies dropped (`ASKING`, the `SCRIPT LOAD` of
    /// a script a node did not have, a transaction's `MULTI` and queued commands).
    pub(super) prefix: Option<Vec<u8>>,
    /// How many commands `prefix` holds.
    pub(super) prefix_n: u32,
    /// An `EXEC`'s `MULTI` and queued commands (and their count): its prefix wherever it goes.
    tx: Option<(Vec<u8>, u32)>,
    /// The SHA1 an `EVALSHA` names.
    sha: Option<String>,
    rx: Option<mpsc::UnboundedReceiver<Delivery>>,
    got: Vec<u8>,
    got_n: u32,
    want: u32,
    pub(super) done: Option<Vec<u8>>,
    redirects: u32,
    retry_at: Option<Instant>,
    /// Goes on the client's own connection to its node ([`super::own`]): a blocking command,
    /// `WATCH`, `CLIENT ...`.
    pub(super) own: bool,
    /// May block: the long allowance of the client's own connection.
    pub(super) blocking: bool,
    /// Its reply is passed on as it comes, redirections included (`WATCH` and its
    /// transaction: sent again elsewhere they would not be watched).
    pub(super) pinned: bool,
    /// A command of a transaction sent to its node as it is queued ([`super::multi`]): its
    /// reply is the node's, whatever it is.
    pub(super) queued: bool,
}

impl Part {
    pub(super) fn new(frame: Vec<u8>, slot: Option<u16>, to: Option<String>) -> Part {
        Part {
            frame,
            slot,
            to,
            prefix: None,
            prefix_n: 1,
            tx: None,
            sha: None,
            rx: None,
            got: Vec::new(),
            got_n: 0,
            want: 1,
            done: None,
            redirects: 0,
            retry_at: None,
            own: false,
            blocking: false,
            pinned: false,
            queued: false,
        }
    }
}

impl Part {
    /// An `EXEC` sent after `body`, the `MULTI` and `n` commands it queued.
    pub(super) fn exec(slot: Option<u16>, body: Vec<u8>, n: u32) -> Part {
        let mut p = Part::new(b"*1\r\n$4\r\nEXEC\r\n".to_vec(), slot, None);
        p.tx = Some((body, n + 1));
        p.set_prefix(None);
        p
    }

    /// What goes before it next: `first` (ASKING) if any, then a transaction's body.
    fn set_prefix(&mut self, first: Option<&[u8]>) {
        let mut prefix = first.map(<[u8]>::to_vec).unwrap_or_default();
        let mut n = u32::from(first.is_some());
        if let Some((body, m)) = &self.tx {
            prefix.extend_from_slice(body);
            n += m;
        }
        self.prefix_n = n.max(1);
        self.prefix = (n > 0).then_some(prefix);
    }
}

/// The client's own connection to one node.
#[derive(Debug)]
pub(crate) struct Own {
    /// The node.
    pub(super) addr: String,
    /// One connection (per protocol), opened when first needed.
    pub(super) pool: Pool,
    /// The slot `WATCH`ed on it, while a `WATCH` is held.
    pub(super) watch: Option<u16>,
    /// The `WATCH` is not held after all (moved, lost): the `EXEC` after it fails.
    pub(super) broken: bool,
}

/// One request owed a reply.
#[derive(Debug)]
pub(super) struct OwedCall {
    pub(super) parts: Vec<Part>,
    pub(super) merge: Merge,
    /// Answered by the proxy.
    pub(super) ready: Option<Vec<u8>>,
}

/// A client's side of the cluster.
pub(crate) struct ClusterUp {
    pub(super) router: Arc<Router>,
    pub(super) id: u64,
    pub(super) resp: RespVersion,
    /// The transaction being queued (`MULTI` read, no `EXEC` or `DISCARD` yet).
    pub(super) tx: Option<super::multi::Tx>,
    pending: VecDeque<OwedCall>,
    /// The client's own connection, to one node, if it holds one ([`super::own`]).
    pub(super) own: Option<Own>,
    /// `CLIENT SETNAME` of the name the client gave itself, for its own connections.
    pub(super) name: Option<Vec<u8>>,
    pub(super) out: Arc<OutBuf>,
    /// Bytes of replies taken since the last [`ClusterUp::written`].
    taken: usize,
    /// Where the output buffer says the client is closed.
    wake_rx: mpsc::UnboundedReceiver<Delivery>,
    slow: bool,
}

impl ClusterUp {
    pub(crate) fn new(router: Arc<Router>, id: u64, shared: &crate::ProxyShared) -> ClusterUp {
        let (tx, wake_rx): (DeliveryTx, _) = mpsc::unbounded_channel();
        let out = OutBuf::new(id, shared.output_buffer_limit, &shared.clients_memory, tx);
        ClusterUp {
            router,
            id,
            resp: RespVersion::Resp2,
            tx: None,
            pending: VecDeque::new(),
            own: None,
            name: None,
            out,
            taken: 0,
            wake_rx,
            slow: false,
        }
    }

    pub(crate) fn owed(&self) -> u32 {
        u32::try_from(self.pending.len()).unwrap_or(u32::MAX)
    }

    pub(crate) fn out(&self) -> &Arc<OutBuf> {
        &self.out
    }

    pub(crate) fn resp(&self) -> RespVersion {
        self.resp
    }

    pub(crate) fn set_resp(&mut self, resp: RespVersion) {
        self.resp = resp;
    }

    pub(crate) fn mark_slow(&mut self) {
        self.slow = true;
    }

    /// The replies taken were written.
    pub(crate) fn written(&mut self) {
        if self.taken > 0 {
            self.out.sub(std::mem::take(&mut self.taken));
        }
    }

    /// Bytes the proxy made up (a `HELLO`, a name replayed): `n` keyless commands to a master.
    pub(crate) fn send_raw(&mut self, bytes: &[u8], n: u32) {
        if n == 0 {
            return;
        }
        let part = Part::new(bytes.to_vec(), None, None);
        self.push(vec![part], Merge::One);
    }

    /// Routes the request `req` (read from `bytes`, of row `row` in Redis's table; `refused`:
    /// the error Redis answers it with while queueing a transaction).
    pub(crate) fn route(
        &mut self,
        cmd: &ClientCommand,
        req: &Request,
        bytes: &[u8],
        refused: Option<Vec<u8>>,
    ) {
        let mut frame = Vec::with_capacity(bytes.len());
        if req.is_canonical() {
            frame.extend_from_slice(bytes);
        } else {
            req.write_canonical(bytes, &mut frame);
        }
        let row = cmd.spec;
        if self.transaction(row, req, bytes, &frame, refused) {
            return;
        }
        let Some(row) = row else {
            return self.push(vec![Part::new(frame, None, None)], Merge::One);
        };
        let name = row.name;
        if row.group == "cluster" {
            return self.ready(NO_CLUSTER.to_vec());
        }
        // What the proxy remembers of scripts, whatever the command's route.
        match name {
            "EVAL" | "EVAL_RO" | "SCRIPT|LOAD" => {
                let at = if name == "SCRIPT|LOAD" { 2 } else { 1 };
                if let Some(body) = req.arg(bytes, at) {
                    self.router.remember_script(body);
                }
            }
            "SCRIPT|FLUSH" => self.router.forget_scripts(),
            _ => {}
        }
        let known = |sha: &str| self.router.script(sha).is_some();
        if let Some(combine) = super::server::combine(name, req, bytes, known) {
            return self.every_master(&frame, Merge::By(combine));
        }
        match name {
            "PING" if req.argc() <= 2 => {
                return self.ready(match req.arg(bytes, 1) {
                    Some(a) => bulk(a),
                    None => b"+PONG\r\n".to_vec(),
                });
            }
            "SCAN" => return self.scan(req, bytes),
            "WATCH" => return self.watch(row, req, bytes, &frame),
            "SELECT" => return self.select(req, bytes),
            "DBSIZE" => return self.every_master(&frame, Merge::Sum),
            "KEYS" => return self.every_master(&frame, Merge::Concat),
            "INFO" => return self.every_master(&frame, Merge::Info),
            // DEBUG OBJECT, DIGEST-VALUE, HTSTATS-KEY, ... name a key; the rest
            // (SET-ACTIVE-EXPIRE, ...) is server-wide.
            "DEBUG" => {
                let sub = req.arg(bytes, 1).unwrap_or_default();
                let keyed = DEBUG_KEYED.iter().any(|s| sub.eq_ignore_ascii_case(s));
                if let (true, Some(k)) = (keyed, req.arg(bytes, 2)) {
                    let slot = Some(lockkit::key_slot(k));
                    return self.push(vec![Part::new(frame, slot, None)], Merge::One);
                }
                return self.every_master(&frame, Merge::First);
            }
            n if EVERY_MASTER.contains(&n) => return self.every_master(&frame, Merge::First),
            _ => {}
        }
        let positions = key_positions(row, req, bytes);
        let slot = match keys_of(&positions, req, bytes) {
            Keys::None => None,
            Keys::Slot(s) => Some(s),
            Keys::Cross(_) if SPLIT.contains(&name) => {
                return self.split(name, &positions, req, bytes)
            }
            Keys::Cross(_) => return self.ready(CROSSSLOT.to_vec()),
        };
        let mut part = Part::new(frame, slot, None);
        // Blocking commands, `CLIENT ...` and the like: on the client's own connection.
        part.own = !cmd.shareable;
        part.blocking = cmd.blocking;
        if matches!(name, "EVALSHA" | "EVALSHA_RO") {
            part.sha = (req.arg(bytes, 1)).map(|s| String::from_utf8_lossy(s).to_lowercase());
        }
        self.push(vec![part], Merge::One);
    }

    /// A multi-key command over several slots, as one command per slot.
    fn split(&mut self, name: &str, positions: &[usize], req: &Request, bytes: &[u8]) {
        let pairs = name == "MSET";
        let mut slots: Vec<u16> = Vec::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut pick = Vec::new();
        for &k in positions {
            let s = lockkit::key_slot(req.arg(bytes, k).unwrap_or_default());
            let g = match slots.iter().position(|&x| x == s) {
                Some(g) => g,
                None => {
                    slots.push(s);
                    groups.push(Vec::new());
                    slots.len() - 1
                }
            };
            pick.push((g, groups[g].len()));
            groups[g].push(k);
        }
        let cmd = req.arg(bytes, 0).unwrap_or_default();
        let parts = (slots.iter().zip(&groups))
            .map(|(&s, keys)| {
                let mut args: Vec<&[u8]> = vec![cmd];
                for &k in keys {
                    args.push(req.arg(bytes, k).unwrap_or_default());
                    if pairs {
                        args.push(req.arg(bytes, k + 1).unwrap_or_default());
                    }
                }
                let mut frame = Vec::new();
                lockkit_resp::write_multibulk(&mut frame, args);
                Part::new(frame, Some(s), None)
            })
            .collect();
        let merge = match name {
            "MGET" => Merge::Pick(pick),
            "MSET" => Merge::First,
            _ => Merge::Sum,
        };
        self.push(parts, merge);
    }

    /// `SCAN cursor ...` over the masters one after the other: the client's cursor is the
    /// node's cursor times the number of masters plus the node's place among them (sorted by
    /// address), so that a cursor names its node.
    fn scan(&mut self, req: &Request, bytes: &[u8]) {
        let mut masters = self.router.masters();
        masters.sort();
        let n = masters.len().max(1) as u64;
        let cursor = req
            .arg(bytes, 1)
            .and_then(|c| std::str::from_utf8(c).ok()?.parse::<u64>().ok());
        let Some(cursor) = cursor else {
            return self.ready(b"-ERR invalid cursor\r\n".to_vec());
        };
        let (node, node_cursor) = (cursor % n, cursor / n);
        let Some(addr) = masters.get(node as usize).cloned() else {
            return self.ready(b"-ERR invalid cursor\r\n".to_vec());
        };
        let mut args: Vec<&[u8]> = req.args(bytes).collect();
        let c = node_cursor.to_string();
        args[1] = c.as_bytes();
        let mut frame = Vec::new();
        lockkit_resp::write_multibulk(&mut frame, args);
        self.push(
            vec![Part::new(frame, None, Some(addr))],
            Merge::Scan { node, n },
        );
    }

    fn every_master(&mut self, frame: &[u8], merge: Merge) {
        let parts = (self.router.masters().into_iter())
            .map(|m| Part::new(frame.to_vec(), None, Some(m)))
            .collect();
        self.push(parts, merge);
    }

    pub(super) fn ready(&mut self, reply: Vec<u8>) {
        self.pending.push_back(OwedCall {
            parts: Vec::new(),
            merge: Merge::One,
            ready: Some(reply),
        });
    }

    pub(super) fn push(&mut self, mut parts: Vec<Part>, merge: Merge) {
        let slow = std::mem::take(&mut self.slow);
        for p in &mut parts {
            self.dispatch(p, slow);
        }
        self.pending.push_back(OwedCall {
            parts,
            merge,
            ready: None,
        });
    }

    /// Sends `p` to its node (the one named, else its slot's master, else a master): on the
    /// client's own connection to that node when it holds one there or `p` needs one.
    fn dispatch(&mut self, p: &mut Part, slow: bool) {
        let addr = p.to.clone().or_else(|| match p.slot {
            Some(s) => self.router.master(s),
            None => {
                let masters = self.router.masters();
                let n = masters.len().max(1) as u64;
                masters.get((self.id % n) as usize).cloned()
            }
        });
        if let (true, Some(a)) = (p.own || p.blocking, &addr) {
            self.take_own(a);
        }
        // One that needs its own connection never goes on a shared one.
        let link = addr.and_then(|a| match self.own_link(&a) {
            Some(l) => Some(l),
            None if p.own || p.blocking => None,
            None => self.router.link(&a, self.id, self.resp),
        });
        let Some(link) = link else {
            self.router.refresh_soon();
            p.done = Some(b"-CLUSTERDOWN Hash slot not served\r\n".to_vec());
            return;
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let pre = p.prefix.as_deref().unwrap_or_default();
        let mut bytes = Vec::with_capacity(p.frame.len() + pre.len());
        bytes.extend_from_slice(pre);
        bytes.extend_from_slice(&p.frame);
        p.want = 1 + if p.prefix.is_some() { p.prefix_n } else { 0 };
        p.got.clear();
        p.got_n = 0;
        let req = UpstreamRequest {
            bytes,
            n: p.want,
            slow: slow || p.blocking,
            to: tx,
            out: self.out.clone(),
        };
        if link.send(req).is_err() {
            self.router.refresh_soon();
            p.done = Some(resp::error_reply(
                "ERR lockkit proxy: connection to a cluster node lost; the command was not sent",
            ));
            return;
        }
        p.rx = Some(rx);
    }

    /// Appends the next reply in order to `buf`; its length.
    pub(crate) async fn read(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        loop {
            let Some(entry) = self.pending.front_mut() else {
                return std::future::pending().await;
            };
            if let Some(bytes) = entry.ready.take() {
                self.pending.pop_front();
                buf.extend_from_slice(&bytes);
                return Ok(bytes.len());
            }
            let Some(i) = entry.parts.iter().position(|p| p.done.is_none()) else {
                let entry = self.pending.pop_front().unwrap_or_else(|| unreachable!());
                let replies = (entry.parts.into_iter())
                    .map(|p| (p.to.unwrap_or_default(), p.done.unwrap_or_default()))
                    .collect();
                let reply = super::merge::merge(entry.merge, replies);
                buf.extend_from_slice(&reply);
                return Ok(reply.len());
            };
            let p = &mut entry.parts[i];
            if let Some(at) = p.retry_at {
                tokio::time::sleep_until(at.into()).await;
                self.part(i).retry_at = None;
                self.resend(i);
                continue;
            }
            let Some(rx) = p.rx.as_mut() else {
                p.done = Some(resp::error_reply("ERR lockkit proxy: no reply"));
                continue;
            };
            let d = tokio::select! {
                biased;
                Some(_) = self.wake_rx.recv() => return Err(closed_for_replies()),
                d = rx.recv() => d,
            };
            if self.out.is_killed() {
                return Err(closed_for_replies());
            }
            let lost = self.receive(i, d)?;
            let p = self.part(i);
            if p.got_n >= p.want {
                self.settle(i, lost);
            }
        }
    }

    /// Part `i` of the oldest request.
    fn part(&mut self, i: usize) -> &mut Part {
        let entry = self.pending.front_mut().unwrap_or_else(|| unreachable!());
        &mut entry.parts[i]
    }

    /// Sends part `i` of the oldest request again (a redirection, a retry).
    fn resend(&mut self, i: usize) {
        let mut taken = std::mem::replace(self.part(i), Part::new(Vec::new(), None, None));
        self.dispatch(&mut taken, false);
        *self.part(i) = taken;
    }

    /// Adds what came for part `i` of the oldest request to its replies; true when its
    /// connection failed.
    fn receive(&mut self, i: usize, d: Option<Delivery>) -> std::io::Result<bool> {
        match d {
            Some(Delivery::Replies(bytes, n)) => {
                self.taken += bytes.len();
                let p = self.part(i);
                p.got.extend_from_slice(&bytes);
                p.got_n += n;
                Ok(false)
            }
            Some(Delivery::Failed { n, why, .. }) => {
                self.router.refresh_soon();
                let p = self.part(i);
                let e = resp::error_reply(&why);
                for _ in 0..n {
                    p.got.extend_from_slice(&e);
                }
                p.got_n += n;
                Ok(p.pinned)
            }
            Some(Delivery::Closed) | None => Err(closed_for_replies()),
        }
    }
}

fn closed_for_replies() -> std::io::Error {
    std::io::Error::other("closed for the replies held for it")
}

/// The reply to a command that needs a connection of the client's own (`WATCH`, a blocking
/// command, pub/sub, ...): not carried in front of a cluster.
pub(crate) fn own_refusal(cmd: &crate::client::command::ClientCommand) -> Vec<u8> {
    if cmd.spec.is_some_and(|s| s.group == "cluster") {
        return NO_CLUSTER.to_vec();
    }
    let name = cmd.spec.map_or("this command", |s| s.name);
    resp::error_reply(&format!(
        "ERR lockkit proxy: {name} is not available in front of a Redis Cluster (it needs a connection of its own)"
    ))
}
