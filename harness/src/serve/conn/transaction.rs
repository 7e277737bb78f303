//! MULTI / EXEC of one connection: the queued commands, and EXEC running them (runs of harness
//! commands atomically, the connection's own commands in between).

use super::{err, full_name, ServeConn};
use crate::commands::resolve;
use crate::reply::Reply;
use crate::server::Caller;

impl ServeConn {
    pub(super) fn queue(&mut self, argv: Vec<Vec<u8>>) -> Reply {
        let known = is_local(&argv) || resolve(&argv, Caller::Client).is_ok();
        let Some((queued, refused)) = self.multi.as_mut() else {
            return err("ERR harness: not in a transaction");
        };
        if !known {
            *refused = true;
            return resolve(&argv, Caller::Client)
                .err()
                .unwrap_or_else(|| err("ERR syntax error"));
        }
        queued.push(argv);
        Reply::Status("QUEUED".into())
    }

    pub(super) async fn exec(&mut self) -> Reply {
        let Some((queued, refused)) = self.multi.take() else {
            return err("ERR EXEC without MULTI");
        };
        if refused {
            self.ctx.shared.unwatch(self.id);
            return err("EXECABORT Transaction discarded because of previous errors.");
        }
        if let Some(abort) = super::super::refusals::refuse_exec(&self.ctx.shared, &queued).await {
            self.ctx.shared.unwatch(self.id);
            return abort;
        }
        // The watched keys are checked with the harness held for the first run of harness
        // commands (or on their own when the transaction starts with the connection's own).
        let mut watcher = self.ctx.shared.watching(self.id).then_some(self.id);
        if watcher.is_some() && queued.first().is_none_or(|a| is_local(a)) {
            match self
                .ctx
                .shared
                .execute_watched(Vec::new(), self.resp3, watcher.take())
                .await
            {
                Ok(Some(_)) => {}
                Ok(None) => return self.aborted(),
                Err(busy) => return busy,
            }
        }
        // Runs of harness commands go to the harness at once (atomically); the connection's
        // own commands (CLIENT SETNAME...) are answered in between.
        let arrays: Vec<bool> = queued
            .iter()
            .map(|a| super::super::nulls::null_is_array(a))
            .collect();
        let mut replies = Vec::with_capacity(queued.len());
        let mut run: Vec<Vec<Vec<u8>>> = Vec::new();
        self.executing = Some(queued.len());
        for argv in queued {
            if is_local(&argv) {
                if !run.is_empty() {
                    match self.batch(std::mem::take(&mut run), watcher.take()).await {
                        Some(r) => replies.extend(r),
                        None => return self.aborted(),
                    }
                }
                let name = full_name(&argv);
                let top = name.split('|').next().unwrap_or_default().to_string();
                replies.push(Box::pin(self.run(&top, &name, argv)).await);
            } else {
                run.push(argv);
            }
        }
        if !run.is_empty() {
            match self.batch(run, watcher.take()).await {
                Some(r) => replies.extend(r),
                None => return self.aborted(),
            }
        }
        self.executing = None;
        self.exec_nulls = super::super::nulls::exec_null_arrays(&arrays, &replies);
        Reply::Array(replies)
    }

    /// EXEC's answer when a watched key was written: a null array.
    pub(super) fn aborted(&mut self) -> Reply {
        self.executing = None;
        self.nil_array = true;
        Reply::Nil
    }

    /// Runs a transaction's commands on the harness; `None` when `watcher`'s watched keys
    /// were written (the EXEC answers a nil array).
    pub(super) async fn batch(
        &mut self,
        run: Vec<Vec<Vec<u8>>>,
        watcher: Option<u64>,
    ) -> Option<Vec<Reply>> {
        let n = run.len();
        match self
            .ctx
            .shared
            .execute_watched(run, self.resp3, watcher)
            .await
        {
            Ok(r) => r,
            Err(busy) => Some(vec![busy; n]),
        }
    }
}

/// Whether the connection answers `argv` itself (not the harness).
pub(super) fn is_local(argv: &[Vec<u8>]) -> bool {
    let name = full_name(argv);
    let top = name.split('|').next().unwrap_or_default();
    matches!(
        top,
        "hello" | "auth" | "quit" | "reset" | "select" | "lockkit.clock" | "unwatch" | "info"
    ) || matches!(name.as_str(), "acl|setuser" | "acl|deluser" | "acl|users")
        || matches!(
            name.as_str(),
            "client|id"
                | "client|getname"
                | "client|setname"
                | "client|setinfo"
                | "client|info"
                | "client|list"
                | "client|kill"
                | "config|get"
                | "config|set"
                | "config|resetstat"
                | "debug|log"
                | "debug|set-active-expire"
                | "debug|reload"
        )
}
