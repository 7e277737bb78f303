//! How Redis 7.0's `processCommand` refuses transactions: an EXEC it rejects (`BUSY` while a
//! script runs, `OOM`) answers `EXECABORT Transaction discarded because of: <reason>` and
//! ends the transaction (`execCommandAbort`). Past `maxmemory`,
//! every command queued inside MULTI is refused with `-OOM` (queueing may use memory without
//! bound; EXEC, DISCARD, QUIT and RESET still run) and flags the transaction, so that EXEC
//! answers `EXECABORT`; and an EXEC whose queue holds a `denyoom` command is refused with
//! `EXECABORT ... OOM`, while one of read-only commands runs.

use std::sync::Arc;

use super::shared::ServeShared;
use crate::commands::resolve;
use crate::reply::Reply;
use crate::server::Caller;

/// EXEC's answer when Redis rejects it for `reason` (an error reply).
pub(super) fn exec_abort(reason: &Reply) -> Reply {
    let text = match reason {
        Reply::Error(e) => e.as_str(),
        _ => "ERR",
    };
    Reply::err(format!(
        "EXECABORT Transaction discarded because of: {text}"
    ))
}

/// For a command about to be queued: the OOM reply when the keyspace is past `maxmemory`.
/// `None` for a command Redis does not know (its own error comes first) and when under.
pub(super) async fn refuse_queued(
    shared: &Arc<ServeShared>,
    argv: &[Vec<u8>],
    local: bool,
) -> Option<Reply> {
    if !local && resolve(argv, Caller::Client).is_err() {
        return None;
    }
    match shared.over_maxmemory().await {
        Ok(true) => Some(Reply::err(crate::keyspace::OOM)),
        Ok(false) => None,
        Err(busy) => Some(busy),
    }
}

/// For EXEC: the EXECABORT reply when one of the `queued` commands is `denyoom` and the
/// keyspace is past `maxmemory`.
pub(super) async fn refuse_exec(
    shared: &Arc<ServeShared>,
    queued: &[Vec<Vec<u8>>],
) -> Option<Reply> {
    let deny_oom = queued
        .iter()
        .any(|argv| resolve(argv, Caller::Client).is_ok_and(|s| s.deny_oom));
    if !deny_oom {
        return None;
    }
    match shared.over_maxmemory().await {
        Ok(true) => Some(exec_abort(&Reply::err(crate::keyspace::OOM))),
        Ok(false) => None,
        Err(busy) => Some(busy),
    }
}
