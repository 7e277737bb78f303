//! `MULTI`/`EXEC` in front of a cluster: the proxy queues a client's transaction itself and
//! answers each command as a cluster node would while queueing (`+QUEUED`; `-CROSSSLOT` when
//! its keys are not all in the slot of the transaction's first keys; Redis's refusal of a
//! command it does not know or with the wrong number of arguments), then sends `MULTI`, the
//! queued commands and `EXEC` in one write on the shared connection to that slot's master
//! (nothing of another client comes between them) and passes `EXEC`'s reply on. A transaction
//! that failed while queueing answers `-EXECABORT` without going anywhere. A `MOVED` or `ASK`
//! of a queued command sends the whole transaction again to the new master. Under a `WATCH`
//! the transaction is queued in the watched slot and runs on the watching connection
//! ([`super::own`]).

use lockkit_resp::Request;

use super::keys::{key_positions, keys_of, Keys};
use super::merge::Merge;
use super::up::{ClusterUp, Part, CROSSSLOT};
use crate::client::spec::CommandSpec;
use crate::upstream::RespVersion;

/// Redis's reply to `EXEC` after a command failed while queueing.
const EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";
const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";

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
                self.tx = None;
                self.unwatch();
                b"+OK\r\n".to_vec()
            }
            (Some("EXEC"), Some(_)) => {
                let Some(tx) = self.tx.take() else {
                    return false;
                };
                let watched = self.watched().is_some();
                if tx.failed {
                    self.unwatch();
                    EXECABORT.to_vec()
                } else if self.watch_broken() {
                    // The WATCH was not held where the transaction would run: it fails.
                    self.unwatch();
                    match self.resp {
                        RespVersion::Resp2 => b"*-1\r\n".to_vec(),
                        RespVersion::Resp3 => b"_\r\n".to_vec(),
                    }
                } else if watched {
                    self.exec_watched(Part::exec(tx.slot, tx.body, tx.n));
                    return true;
                } else {
                    self.push(vec![Part::exec(tx.slot, tx.body, tx.n)], Merge::One);
                    return true;
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
                            if let Keys::Slot(s) = keys {
                                tx.slot = Some(s);
                            }
                            tx.body.extend_from_slice(frame);
                            tx.n += 1;
                            b"+QUEUED\r\n".to_vec()
                        }
                    }
                }
            },
        };
        self.ready(reply);
        true
    }

    /// A `RESET` or a new connection: no transaction any more.
    pub(crate) fn forget_transaction(&mut self) {
        self.tx = None;
        self.own = None;
    }
}
