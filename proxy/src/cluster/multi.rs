//! `MULTI`/`EXEC` in front of a cluster. `MULTI` is answered by the proxy, and the keyless
//! commands after it are queued in the proxy (`+QUEUED`); at the transaction's first keyed
//! command, the `MULTI`, those commands and it go to its slot's master on the client's own
//! connection ([`super::own`]), and from then on every command of the transaction goes there as
//! it comes and the node answers it, as one Redis would (`+QUEUED`, or its refusal while
//! queueing, `-OOM` past `maxmemory` say, and `-EXECABORT` at `EXEC` after one). The proxy itself
//! answers `-CROSSSLOT` when a command's keys are not all in the transaction's slot, and Redis's
//! refusal of a command it does not know or with the wrong number of arguments; after one of
//! those the transaction is dropped on its node (`DISCARD`) and `EXEC` answers `-EXECABORT`.
//! A transaction with no key is sent whole at `EXEC` (`MULTI`, the commands, `EXEC` in one write
//! on the shared connection to one master). Under a `WATCH` the transaction is queued in the
//! proxy in the watched slot and runs on the watching connection at `EXEC`. A node's `-MOVED`
//! or `-ASK` to a command sent live is passed on (the node fails the transaction at `EXEC`, as a
//! cluster node does for a client that does not follow it).

use lockkit_resp::Request;

use super::keys::{key_positions, keys_of, Keys};
use super::merge::Merge;
use super::up::{ClusterUp, Part, CROSSSLOT};
use crate::client::spec::CommandSpec;
use crate::upstream::RespVersion;

/// Redis's reply to `EXEC` after a command failed while queueing.
const EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";
const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";
const DISCARD: &[u8] = b"*1\r\n$7\r\nDISCARD\r\n";

/// A transaction being queued.
#[derive(Debug)]
pub(crate) struct Tx {
    /// `MULTI` and the commands queued, as they go.
    body: Vec<u8>,
    /// Commands queued.
    n: u32,
    /// The slot of the keys queued so far.
    slot: Option<u16>,
    /// A command failed while queueing: `EXEC` answers `-EXECABORT`.
    failed: bool,
    /// The node the transaction went to at its first keyed command (outside a `WATCH`): its
    /// `MULTI`, the commands queued so far and every command after it are sent there as they
    /// come, on the client's own connection, and the node answers them.
    live: Option<String>,
}

impl ClusterUp {
    /// Answers or queues the request when it is a transaction's (`false`: routed as usual).
    pub(super) fn transaction(
        &mut self,
        row: Option<&CommandSpec>,
        req: &Request,
        bytes: &[u8],
        frame: &[u8],
        refused: Option<Vec<u8>>,
    ) -> bool {
        let name = row.map(|r| r.name);
        let reply = match (name, self.tx.as_mut()) {
            (Some("MULTI"), None) => {
                self.tx = Some(Tx {
                    body: MULTI.to_vec(),
                    n: 0,
                    // Under a WATCH, the watched slot's.
                    slot: self.watched(),
                    failed: false,
                    live: None,
                });
                b"+OK\r\n".to_vec()
            }
            (Some("MULTI"), Some(_)) => b"-ERR MULTI calls can not be nested\r\n".to_vec(),
            (Some("EXEC"), None) => b"-ERR EXEC without MULTI\r\n".to_vec(),
            (Some("DISCARD"), None) => b"-ERR DISCARD without MULTI\r\n".to_vec(),
            (Some("UNWATCH"), None) => {
                self.unwatch_now(frame);
                return true;
            }
            (_, None) => return false,
            (Some("DISCARD"), Some(_)) => {
                let tx = self.tx.take();
                self.unwatch();
                if let Some(addr) = tx.and_then(|t| t.live) {
                    self.send_live(frame.to_vec(), None, addr, None);
                    self.own = None;
                    return true;
                }
                b"+OK\r\n".to_vec()
            }
            (Some("EXEC"), Some(_)) => {
                let Some(tx) = self.tx.take() else {
                    return false;
                };
                match self.exec(tx, frame) {
                    Some(reply) => reply,
                    None => return true,
                }
            }
            (Some("WATCH"), Some(_)) => b"-ERR WATCH inside MULTI is not allowed\r\n".to_vec(),
            (_, Some(tx)) => match refused {
                Some(r) => {
                    tx.failed = true;
                    r
                }
                None => {
                    let keys = row.map_or(Keys::None, |row| {
                        keys_of(&key_positions(row, req, bytes), req, bytes)
                    });
                    match (keys, tx.slot) {
                        (Keys::Cross(_), _) => {
                            tx.failed = true;
                            CROSSSLOT.to_vec()
                        }
                        (Keys::Slot(s), Some(t)) if s != t => {
                            tx.failed = true;
                            CROSSSLOT.to_vec()
                        }
                        (keys, _) => {
                            let slot = match keys {
                                Keys::Slot(s) => Some(s),
                                _ => None,
                            };
                            tx.slot = tx.slot.or(slot);
                            tx.n += 1;
                            if let Some(addr) = tx.live.clone() {
                                self.send_live(frame.to_vec(), slot, addr, None);
                                return true;
                            }
                            let watched = self.watched().is_some();
                            let addr = slot.and_then(|s| self.router.master(s));
                            match (watched, addr, self.tx.as_mut()) {
                                (false, Some(addr), Some(tx)) => {
                                    // MULTI and what was queued before it, then this command.
                                    let before = (std::mem::take(&mut tx.body), tx.n);
                                    tx.live = Some(addr.clone());
                                    self.send_live(frame.to_vec(), slot, addr, Some(before));
                                    return true;
                                }
                                (_, _, Some(tx)) => {
                                    tx.body.extend_from_slice(frame);
                                    b"+QUEUED\r\n".to_vec()
                                }
                                (_, _, None) => return false,
                            }
                        }
                    }
                }
            },
        };
        self.ready(reply);
        true
    }

    /// `EXEC` of transaction `tx`: its reply when the proxy answers it (`-EXECABORT`, a
    /// broken `WATCH`'s nil), `None` when it went to a node.
    fn exec(&mut self, tx: Tx, frame: &[u8]) -> Option<Vec<u8>> {
        let watched = self.watched().is_some();
        if let Some(addr) = tx.live {
            // The node knows of its own refusals; not of the proxy's (CROSSSLOT, an
            // unknown command): the transaction is dropped there and fails here.
            if tx.failed {
                self.drop_live(&addr);
                Some(EXECABORT.to_vec())
            } else {
                self.send_live(frame.to_vec(), None, addr, None);
                self.own = None;
                None
            }
        } else if tx.failed {
            self.unwatch();
            Some(EXECABORT.to_vec())
        } else if self.watch_broken() {
            // The WATCH was not held where the transaction would run: it fails.
            self.unwatch();
            Some(match self.resp {
                RespVersion::Resp2 => b"*-1\r\n".to_vec(),
                RespVersion::Resp3 => b"_\r\n".to_vec(),
            })
        } else if watched {
            self.exec_watched(Part::exec(tx.slot, tx.body, tx.n));
            None
        } else {
            self.push(vec![Part::exec(tx.slot, tx.body, tx.n)], Merge::One);
            None
        }
    }

    /// `frame`, a command of a live transaction (`before`: the `MULTI` and the commands queued
    /// before it, and their count, sent first), on the client's own connection to `addr`: the
    /// node's reply is the client's.
    fn send_live(
        &mut self,
        frame: Vec<u8>,
        slot: Option<u16>,
        addr: String,
        before: Option<(Vec<u8>, u32)>,
    ) {
        let mut part = Part::new(frame, slot, Some(addr));
        if let Some((body, n)) = before {
            part.prefix = Some(body);
            part.prefix_n = n;
        }
        part.own = true;
        part.pinned = true;
        part.queued = true;
        self.push(vec![part], Merge::One);
    }

    /// A live transaction the proxy failed (`-CROSSSLOT`, an unknown command): dropped on its
    /// node with a `DISCARD` whose reply no one reads.
    fn drop_live(&mut self, addr: &str) {
        self.send_unread(addr, DISCARD.to_vec());
        self.own = None;
    }

    /// A `RESET` or a new connection: no transaction any more.
    pub(crate) fn forget_transaction(&mut self) {
        self.tx = None;
        self.own = None;
    }
}
