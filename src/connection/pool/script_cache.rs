//! The script cache: scripts preloaded with `SCRIPT LOAD` (or the function library with
//! `FUNCTION LOAD`), called with `EVALSHA`/`FCALL`, and `NOSCRIPT` recovered in one extra round
//! trip; batches of script calls, one round trip per slot.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use futures_util::future::join_all;
use redis::{Cmd, Value};

use super::script_cmd::{script_cmd, ScriptCall, ScriptCmd};
use super::Connections;
use crate::connection::{Conn, Topology};
use crate::error::{Error, Result};
use crate::keys;
use crate::options::ScriptMode;
use crate::scripts::{self, LuaScript};

impl Connections {
    /// Whether `e` says the script (or the Function library) is not on the server.
    pub(crate) fn is_missing_script(e: &redis::RedisError) -> bool {
        is_missing_script(e)
    }

    /// Makes the scripts available on the server(s): `SCRIPT LOAD` (EVALSHA mode) or
    /// `FUNCTION LOAD REPLACE` (function mode). The script cache is per server, not per
    /// connection, so this is one pipelined round trip per client; in a cluster each command is
    /// sent on its own, which routes it to every node.
    pub(super) async fn preload(&self) -> Result<()> {
        let mut conn = self.conn();
        let cluster = self.topology() == Topology::Cluster;
        match self.0.options.script_mode {
            ScriptMode::Eval => Ok(()),
            ScriptMode::EvalSha if !self.0.options.preload || self.is_proxy() => Ok(()),
            ScriptMode::EvalSha => {
                let loaded: redis::RedisResult<Vec<String>> = if cluster {
                    let mut shas = Vec::new();
                    for s in scripts::ALL {
                        shas.push(s.load_cmd().query_async::<String>(&mut conn).await?);
                    }
                    Ok(shas)
                } else {
                    let mut pipe = redis::pipe();
                    for s in scripts::ALL {
                        pipe.add_command(s.load_cmd());
                    }
                    pipe.query_async(&mut conn).await
                };
                match loaded {
                    Ok(shas) => {
                        for (sha, s) in shas.iter().zip(scripts::ALL) {
                            if sha != s.sha() {
                                return Err(Error::UnexpectedReply {
                                    what: "SCRIPT LOAD",
                                    reply: format!("{sha} for {} (expected {})", s.name(), s.sha()),
                                });
                            }
                        }
                        Ok(())
                    }
                    Err(e) if is_auth_error(&e) => Err(e.into()),
                    Err(e) => {
                        self.warn_preload_refused(&e);
                        Ok(())
                    }
                }
            }
            ScriptMode::Function => {
                scripts::function_load_cmd()
                    .query_async::<String>(&mut conn)
                    .await?;
                Ok(())
            }
        }
    }

    fn warn_preload_refused(&self, e: &redis::RedisError) {
        if !self.0.warned_preload.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target = %self.0.target,
                error = %e,
                "SCRIPT LOAD refused (a proxy?); scripts will be sent with EVAL on first use per server, EVALSHA after"
            );
        }
    }

    /// The command that runs `script` in the configured mode.
    pub(crate) fn script_cmd(&self, script: &LuaScript, keys: &[&str], args: &[&[u8]]) -> Cmd {
        script_cmd(self.0.options.script_mode, script, keys, args)
    }

    /// Runs a script and returns its reply; `NOSCRIPT` (or a missing function) is recovered by
    /// re-sending the script in one extra round trip (`EVAL` caches it again on the server).
    pub(crate) async fn run_script(
        &self,
        conn: &Conn,
        script: &LuaScript,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<Value> {
        let mode = self.0.options.script_mode;
        let call = ScriptCmd {
            mode,
            script,
            keys,
            args,
        };
        let reply = conn.query_with(&call).await;
        match reply {
            Ok(v) => Ok(v),
            Err(e) if is_missing_script(&e) => {
                self.count_noscript_recovery();
                // Boxed: a rare path; inline it would enlarge every script call's future.
                Box::pin(self.recover(conn, mode, script, keys, args)).await
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn recover(
        &self,
        conn: &Conn,
        mode: ScriptMode,
        script: &LuaScript,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<Value> {
        match mode {
            ScriptMode::Function => {
                // FUNCTION LOAD and the FCALL in one pipelined round trip.
                let mut pipe = redis::pipe();
                pipe.add_command(scripts::function_load_cmd())
                    .ignore()
                    .add_command(script_cmd(mode, script, keys, args));
                let (v,): (Value,) = pipe.query_async(&mut conn.clone()).await?;
                Ok(v)
            }
            _ => Ok(script_cmd(ScriptMode::Eval, script, keys, args)
                .query_async::<Value>(&mut conn.clone())
                .await?),
        }
    }

    /// Runs one command per key, pipelined, and returns every command's reply in order, a server
    /// error as `Value::ServerError` in its place.
    ///
    /// On one server this is one round trip. In a cluster, a pipeline must stay inside one slot,
    /// so commands are grouped by their key's slot and the groups are sent concurrently (each to
    /// the node owning it), which still costs about one round trip.
    ///
    /// Everything goes over `conn` (a batch's clean-up must follow its acquires on their
    /// connection, see [`Connections::conn_for`]).
    pub(crate) async fn query_each(
        &self,
        conn: &Conn,
        keys: &[&str],
        cmds: Vec<Cmd>,
    ) -> Result<Vec<Value>> {
        if self.topology() != Topology::Cluster {
            let mut pipe = redis::pipe();
            for c in cmds {
                pipe.add_command(c);
            }
            let mut conn = conn.clone();
            return Ok(pipe
                .ignore_errors()
                .query_async::<Vec<Value>>(&mut conn)
                .await?);
        }
        let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, key) in keys.iter().enumerate() {
            groups
                .entry(keys::key_slot(key.as_bytes()))
                .or_default()
                .push(i);
        }
        let mut cmds: Vec<Option<Cmd>> = cmds.into_iter().map(Some).collect();
        let sends = groups.into_values().map(|idxs| {
            let mut pipe = redis::pipe();
            for &i in &idxs {
                if let Some(c) = cmds[i].take() {
                    pipe.add_command(c);
                }
            }
            let mut conn = conn.clone();
            async move {
                let replies = pipe
                    .ignore_errors()
                    .query_async::<Vec<Value>>(&mut conn)
                    .await;
                (idxs, replies)
            }
        });
        let mut out = vec![Value::Nil; keys.len()];
        for (idxs, replies) in join_all(sends).await {
            for (i, v) in idxs.into_iter().zip(replies?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// Runs every call in one round trip (in a cluster, one per slot, routed by each call's
    /// first key); entries that met `NOSCRIPT` are re-sent with `EVAL` in one more round trip
    /// (function mode: the library is loaded again first).
    pub(crate) async fn run_script_many(
        &self,
        conn: &Conn,
        calls: &[ScriptCall<'_>],
    ) -> Result<Vec<Value>> {
        let keys: Vec<&str> = calls.iter().map(|c| c.keys[0]).collect();
        let cmds = calls
            .iter()
            .map(|c| self.script_cmd(c.script, &c.keys, &c.args))
            .collect();
        let mut replies = self.query_each(conn, &keys, cmds).await?;
        let missing: Vec<usize> = replies
            .iter()
            .enumerate()
            .filter(
                |(_, v)| matches!(v, Value::ServerError(e) if server_error_is_missing_script(e)),
            )
            .map(|(i, _)| i)
            .collect();
        if missing.is_empty() {
            return Ok(replies);
        }
        self.count_noscript_recovery();
        let mode = match self.0.options.script_mode {
            ScriptMode::Function => {
                scripts::function_load_cmd()
                    .query_async::<String>(&mut self.conn())
                    .await?;
                ScriptMode::Function
            }
            _ => ScriptMode::Eval,
        };
        let again_keys: Vec<&str> = missing.iter().map(|&i| keys[i]).collect();
        let again_cmds = missing
            .iter()
            .map(|&i| script_cmd(mode, calls[i].script, &calls[i].keys, &calls[i].args))
            .collect();
        let again = self.query_each(conn, &again_keys, again_cmds).await?;
        for (i, v) in missing.into_iter().zip(again) {
            replies[i] = v;
        }
        Ok(replies)
    }
}

fn is_missing_script(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
    ) || e
        .detail()
        .is_some_and(|d| d.starts_with("Function not found"))
}

fn server_error_is_missing_script(e: &redis::ServerError) -> bool {
    e.code() == "NOSCRIPT"
        || e.details()
            .is_some_and(|d| d.starts_with("Function not found"))
}

fn is_auth_error(e: &redis::RedisError) -> bool {
    matches!(e.kind(), redis::ErrorKind::AuthenticationFailed)
        || e.code().is_some_and(|c| c == "NOAUTH" || c == "WRONGPASS")
}
