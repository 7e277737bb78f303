//! A client's own connection to one node of the cluster ([`Own`]), for the commands that
//! need one: `WATCH` and the transaction it guards, blocking commands, `CLIENT ...` and the
//! other keyless commands that are not shared.
//!
//! - **Which node**: the master of the command's keys' slot (a keyless one: the master the
//!   client's number picks). A client holds one at a time; a command that needs one on another
//!   node replaces it (a `WATCH` held moves with it, lost: its `EXEC` answers a null array).
//! - **What goes on it**: every command of the client to that node while it holds it, so that
//!   they run in the order sent, as on one connection to Redis; commands to other nodes go on
//!   the shared connections as before.
//! - **WATCH**: the keys of one slot (else `-CROSSSLOT`, and a later `WATCH` of another slot
//!   too); the transaction after it is queued in that slot and runs on the same connection;
//!   `EXEC`, `DISCARD` and `UNWATCH` end it and let the connection go. A `WATCH` (or its
//!   transaction) that meets a redirection is not sent again elsewhere: a `WATCH` answered
//!   `-MOVED` makes the `EXEC` after it answer a null array, and a queued command answered
//!   `-MOVED` makes `EXEC` answer `-EXECABORT`, as the node does (the transaction fails).
//! - **Blocking commands** wait there with an allowance of [`BLOCK_ALLOWANCE`], not the
//!   operation timeout.

use std::time::Duration;

use lockkit_resp::number::string2ll;
use lockkit_resp::Request;
use tokio::sync::mpsc;

use super::keys::{key_positions, keys_of, Keys};
use super::merge::Merge;
use super::up::{ClusterUp, Own, Part, CROSSSLOT};
use crate::client::command::{ClientCommand, Special};
use crate::client::spec::CommandSpec;
use crate::upstream::link::{UpstreamLink, UpstreamRequest};

/// How long a command at the head of a client's own connection may block (`BLPOP q 0` waits
/// for ever; the connection is given up after this).
pub(crate) const BLOCK_ALLOWANCE: Duration = Duration::from_secs(30 * 24 * 3600);

/// A cluster node's reply to `SELECT` of a database other than 0.
const SELECT_REFUSED: &[u8] = b"-ERR SELECT is not allowed in cluster mode\r\n";

impl ClusterUp {
    /// Whether a command that needs a connection of its own elsewhere is carried in front of a
    /// cluster: all but those after which replies no longer pair (pub/sub, `MONITOR`, ...)
    /// and `AUTH` or `HELLO` logging in upstream.
    pub(crate) fn takes(&self, cmd: &ClientCommand) -> bool {
        self.tx.is_some() || !(cmd.unpairs || matches!(cmd.special, Special::Auth | Special::Hello))
    }

    /// The name the client gave itself, set on its own connections (`CLIENT SETNAME`).
    pub(crate) fn set_name(&mut self, replay: Option<Vec<u8>>) {
        self.name = replay;
    }

    /// The link of the client's own connection to `addr`, if it holds one there.
    pub(super) fn own_link(&self, addr: &str) -> Option<UpstreamLink> {
        let own = self.own.as_ref().filter(|o| o.addr == addr)?;
        Some(own.pool.link(self.id, self.resp))
    }

    /// Makes sure the client holds its own connection to `addr` (the one it held elsewhere
    /// is let go, with its `WATCH`: the `EXEC` after it fails).
    pub(super) fn take_own(&mut self, addr: &str) {
        if self.own.as_ref().is_some_and(|o| o.addr == addr) {
            return;
        }
        let Some(pool) = self.router.own_pool(addr) else {
            return;
        };
        let before = self.own.take();
        let watch = before.as_ref().and_then(|o| o.watch);
        self.own = Some(Own {
            addr: addr.to_string(),
            pool,
            watch,
            broken: watch.is_some(),
        });
        if let Some(name) = self.name.clone() {
            self.send_unread(addr, name);
        }
    }

    /// One command on the client's own connection to `addr`, if it holds one there, whose
    /// reply is not the client's: nobody reads it (`CLIENT SETNAME`, a live transaction's
    /// `DISCARD`).
    pub(super) fn send_unread(&self, addr: &str, command: Vec<u8>) {
        if let Some(link) = self.own_link(addr) {
            let (to, _) = mpsc::unbounded_channel();
            let _ = link.send(UpstreamRequest {
                bytes: command,
                n: 1,
                slow: false,
                to,
                out: self.out.clone(),
            });
        }
    }

    /// The `WATCH` is not held: the `EXEC` after it fails.
    pub(super) fn watch_lost(&mut self) {
        if let Some(o) = self.own.as_mut().filter(|o| o.watch.is_some()) {
            o.broken = true;
        }
    }

    /// The slot watched, while a `WATCH` is held.
    pub(super) fn watched(&self) -> Option<u16> {
        self.own.as_ref().and_then(|o| o.watch)
    }

    /// Whether the `WATCH` held was lost (its `EXEC` answers a null array).
    pub(super) fn watch_broken(&self) -> bool {
        self.own
            .as_ref()
            .is_some_and(|o| o.watch.is_some() && o.broken)
    }

    /// `EXEC`, `DISCARD`, `UNWATCH` or `RESET`: nothing is watched any more, and the
    /// connection of its own is let go (it closes once its replies are in).
    pub(super) fn unwatch(&mut self) {
        if self.watched().is_some() {
            self.own = None;
        }
    }

    /// A transaction's `EXEC` under a `WATCH`: on the watching connection, its reply as it is.
    pub(super) fn exec_watched(&mut self, mut part: Part) {
        part.to = self.own.as_ref().map(|o| o.addr.clone());
        part.pinned = true;
        self.push(vec![part], Merge::One);
        self.unwatch();
    }

    /// `UNWATCH` outside a transaction.
    pub(super) fn unwatch_now(&mut self, frame: &[u8]) {
        let Some(addr) = self.own.as_ref().filter(|o| o.watch.is_some()) else {
            return self.ready(b"+OK\r\n".to_vec());
        };
        let mut part = Part::new(frame.to_vec(), None, Some(addr.addr.clone()));
        part.pinned = true;
        self.push(vec![part], Merge::One);
        self.unwatch();
    }

    /// `WATCH key...`: on the client's own connection to the keys' master.
    pub(super) fn watch(&mut self, row: &CommandSpec, req: &Request, bytes: &[u8], frame: &[u8]) {
        let slot = match keys_of(&key_positions(row, req, bytes), req, bytes) {
            Keys::Slot(s) => s,
            Keys::Cross(_) => return self.ready(CROSSSLOT.to_vec()),
            Keys::None => {
                return self.push(vec![Part::new(frame.to_vec(), None, None)], Merge::One)
            }
        };
        if self.watched().is_some_and(|w| w != slot) {
            return self.ready(CROSSSLOT.to_vec());
        }
        let mut part = Part::new(frame.to_vec(), Some(slot), None);
        part.own = true;
        part.pinned = true;
        let fresh = self.watched().is_none();
        self.push(vec![part], Merge::One);
        if let Some(o) = self.own.as_mut() {
            if fresh {
                o.broken = false;
            }
            o.watch = Some(slot);
        }
    }

    /// `SELECT db`: a cluster has database 0 only.
    pub(super) fn select(&mut self, req: &Request, bytes: &[u8]) {
        let db = req.arg(bytes, 1).and_then(string2ll);
        self.ready(match db {
            Some(0) => b"+OK\r\n".to_vec(),
            Some(d) if i32::try_from(d).is_ok() => SELECT_REFUSED.to_vec(),
            _ => b"-ERR value is not an integer or out of range\r\n".to_vec(),
        });
    }
}
