//! Lua plugins (`--plugin FILE.lua[:ARGS]`), hosted on the harness's sandbox
//! ([`lockkit_harness::Sandbox`]): Redis's scripting environment with no IO, a time limit per
//! hook call and a memory cap. The API is in `docs/PROXY.md`; in short, the file returns a table:
//!
//! ```lua
//! local seen = 0
//! return {
//!   commands = { "GET" },                         -- what it wants; "*" for everything
//!   on_command = function(conn, cmd, args) seen = seen + 1 end,  -- nil: pass it on
//!   report = function() return { gets = seen } end,
//! }
//! ```
//!
//! A hook that raises an error, runs past its time limit or its memory cap is a plugin fault:
//! it is logged (the first few, then every thousandth) and counted, and the command passes as
//! if the plugin had not been there.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use lockkit_harness::{Reply, Sandbox};
use mlua::{Function, Table, Value};

use crate::plugin::{Action, ConnInfo, Plugin, PluginCommand, ReportCtx};
use crate::resp;

/// How long one hook call may run.
pub const HOOK_TIME_LIMIT: Duration = Duration::from_millis(50);
/// How long the file's top level may run when it loads.
pub const LOAD_TIME_LIMIT: Duration = Duration::from_millis(500);
/// Bytes the plugin's Lua heap may use.
pub const MEMORY_LIMIT: usize = 64 << 20;
/// Faults logged one by one before only every thousandth is.
const LOGGED_FAULTS: u64 = 10;

/// A plugin written in Lua.
#[derive(Debug)]
pub struct LuaPlugin {
    name: String,
    commands: Vec<String>,
    wants_replies: bool,
    /// `rewrite_replies = true` in the file: `on_reply` may return `{reply = V}`.
    rewrites: bool,
    inner: Mutex<LuaHooks>,
    faults: AtomicU64,
}

#[derive(Debug)]
struct LuaHooks {
    sandbox: Sandbox,
    on_command: Option<Function>,
    on_reply: Option<Function>,
    on_tick: Option<Function>,
    on_connect: Option<Function>,
    on_close: Option<Function>,
    report: Option<Function>,
    encode: Function,
}

fn hook(t: &Table, name: &str) -> anyhow::Result<Option<Function>> {
    match t.raw_get::<Value>(name) {
        Ok(Value::Nil) => Ok(None),
        Ok(Value::Function(f)) => Ok(Some(f)),
        Ok(other) => anyhow::bail!("`{name}` must be a function, not a {}", other.type_name()),
        Err(e) => anyhow::bail!("reading `{name}`: {e}"),
    }
}

impl LuaPlugin {
    /// Loads the plugin in `path`; `args` is passed to the file's top level as `...`.
    ///
    /// # Errors
    /// The file cannot be read, does not compile, fails or runs too long at load, or does not
    /// return a table of hooks with its `commands`.
    pub fn load(path: &Path, args: &str) -> anyhow::Result<LuaPlugin> {
        let code =
            std::fs::read(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        let name = path.file_stem().map_or_else(
            || "plugin".to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        let mut sandbox = Sandbox::new(LOAD_TIME_LIMIT, MEMORY_LIMIT)?;
        let chunk_name = format!("@{}", path.display());
        let table = match sandbox.load(&code, &chunk_name, args) {
            Ok(Value::Table(t)) => t,
            Ok(other) => anyhow::bail!(
                "{} must return a table of hooks (got {})",
                path.display(),
                other.type_name()
            ),
            Err(e) => anyhow::bail!("loading {}: {e}", path.display()),
        };
        let mut commands = Vec::new();
        match table.raw_get::<Value>("commands")? {
            Value::Nil => {}
            Value::Table(list) => {
                for v in list.sequence_values::<Value>() {
                    match v? {
                        Value::String(s) => commands.push(s.to_string_lossy().to_ascii_uppercase()),
                        other => anyhow::bail!(
                            "`commands` must list command names (strings), found a {}",
                            other.type_name()
                        ),
                    }
                }
            }
            other => anyhow::bail!(
                "`commands` must be a list of command names, not a {}",
                other.type_name()
            ),
        }
        let on_command = hook(&table, "on_command")?;
        let on_reply = hook(&table, "on_reply")?;
        if commands.is_empty() && (on_command.is_some() || on_reply.is_some()) {
            anyhow::bail!(
                "{} has on_command/on_reply but declares no `commands` (list the names, or \"*\" for all)",
                path.display()
            );
        }
        let encode: Function = sandbox
            .lua()
            .globals()
            .get::<Table>("cjson")?
            .get("encode")?;
        let wants_replies = on_reply.is_some();
        let rewrites = match table.raw_get::<Value>("rewrite_replies")? {
            Value::Nil | Value::Boolean(false) => false,
            Value::Boolean(true) => true,
            other => anyhow::bail!(
                "`rewrite_replies` must be true or false, not a {}",
                other.type_name()
            ),
        };
        // Later calls are hooks: each gets the shorter limit.
        sandbox.set_time_limit(HOOK_TIME_LIMIT);
        Ok(LuaPlugin {
            name,
            commands,
            wants_replies,
            rewrites,
            inner: Mutex::new(LuaHooks {
                on_tick: hook(&table, "on_tick")?,
                on_connect: hook(&table, "on_connect")?,
                on_close: hook(&table, "on_close")?,
                report: hook(&table, "report")?,
                on_command,
                on_reply,
                encode,
                sandbox,
            }),
            faults: AtomicU64::new(0),
        })
    }

    /// Plugin faults so far (errors, time-limit and memory stops).
    pub fn faults(&self) -> u64 {
        self.faults.load(Ordering::Relaxed)
    }

    fn fault(&self, hook: &str, why: &str) {
        let n = self.faults.fetch_add(1, Ordering::Relaxed) + 1;
        crate::metrics::plugin_fault(&self.name);
        if n <= LOGGED_FAULTS || n.is_multiple_of(1000) {
            eprintln!(
                "lockkit proxy: plugin {}: {hook} failed ({why}); the traffic passes as if the plugin were not there (fault {n})",
                self.name
            );
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, LuaHooks> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn conn_table(sb: &Sandbox, conn: &ConnInfo) -> mlua::Result<Table> {
    let t = sb.lua().create_table()?;
    t.raw_set("id", conn.id)?;
    if let Some(peer) = conn.peer {
        t.raw_set("addr", peer.to_string())?;
    }
    Ok(t)
}

fn args_table(sb: &Sandbox, args: &[&[u8]]) -> mlua::Result<Table> {
    let t = sb.lua().create_table_with_capacity(args.len(), 0)?;
    for (i, a) in args.iter().enumerate() {
        t.raw_set(i + 1, sb.lua().create_string(a)?)?;
    }
    Ok(t)
}

/// What `on_command` returned, as an action; `Err` for a value that means nothing.
fn action_of(sb: &Sandbox, v: &Value) -> Result<Action, String> {
    let t = match v {
        Value::Nil => return Ok(Action::Pass),
        Value::String(s) if s.as_bytes().as_ref() == b"pass" => return Ok(Action::Pass),
        Value::Table(t) => t,
        other => {
            return Err(format!(
                "on_command returned a {}; return nil, or a table with reply, delay_ms or close",
                other.type_name()
            ))
        }
    };
    if let Ok(Value::Boolean(true)) = t.raw_get::<Value>("close") {
        return Ok(Action::Close);
    }
    match t.raw_get::<Value>("reply") {
        Ok(Value::Nil) => {}
        Ok(r) => {
            let reply = sb
                .to_reply(&r)
                .ok_or("the reply is larger than the plugin's memory cap")?;
            let mut out = Vec::new();
            encode_reply(&reply.into_resp2(), &mut out);
            return Ok(Action::Reply(out));
        }
        Err(e) => return Err(e.to_string()),
    }
    match t.raw_get::<Value>("delay_ms") {
        Ok(Value::Integer(ms)) if ms >= 0 => Ok(Action::Delay(Duration::from_millis(ms as u64))),
        Ok(Value::Number(ms)) if ms >= 0.0 && ms.is_finite() => {
            Ok(Action::Delay(Duration::from_secs_f64(ms.min(3.6e6) / 1e3)))
        }
        Ok(Value::Nil) => Ok(Action::Pass),
        _ => Err("delay_ms must be a number of milliseconds, at least 0".into()),
    }
}

/// A reply as RESP2 bytes.
fn encode_reply(r: &Reply, out: &mut Vec<u8>) {
    let line = |out: &mut Vec<u8>, prefix: u8, text: &[u8]| {
        out.push(prefix);
        out.extend(
            text.iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        out.extend_from_slice(b"\r\n");
    };
    match r {
        Reply::Status(s) => line(out, b'+', s.as_bytes()),
        Reply::Error(e) => line(out, b'-', e.as_bytes()),
        Reply::Int(i) => line(out, b':', i.to_string().as_bytes()),
        Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
        Reply::Bulk(b) => {
            line(out, b'$', b.len().to_string().as_bytes());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Reply::Array(items) => {
            line(out, b'*', items.len().to_string().as_bytes());
            for i in items {
                encode_reply(i, out);
            }
        }
        other => encode_reply(&other.clone().into_resp2(), out),
    }
}

/// A reply frame as the harness's [`Reply`], which the sandbox hands to Lua as `redis.call`
/// would (status `{ok=...}`, error `{err=...}`, nil `false`).
fn decode_reply(frame: &[u8]) -> Reply {
    fn one(buf: &[u8], pos: &mut usize, depth: usize) -> Option<Reply> {
        let end = *pos + buf[*pos..].windows(2).position(|w| w == b"\r\n")?;
        let kind = buf[*pos];
        let line = &buf[*pos + 1..end];
        *pos = end + 2;
        let text = || String::from_utf8_lossy(line).into_owned();
        let bulk = |pos: &mut usize| -> Option<Vec<u8>> {
            let n: usize = std::str::from_utf8(line).ok()?.parse().ok()?;
            let b = buf.get(*pos..*pos + n)?.to_vec();
            *pos += n + 2;
            Some(b)
        };
        Some(match kind {
            b'+' => Reply::Status(text()),
            b'-' => Reply::Error(text()),
            b':' => Reply::Int(resp::parse_int(line)?),
            b'_' => Reply::Nil,
            b'$' | b'*' if line == b"-1" => Reply::Nil,
            b'$' | b'=' => Reply::Bulk(bulk(pos)?),
            b'!' => Reply::Error(String::from_utf8_lossy(&bulk(pos)?).into_owned()),
            b',' => Reply::Double(text().parse().ok()?),
            b'#' => Reply::Int(i64::from(line == b"t")),
            b'(' => Reply::Bulk(line.to_vec()),
            b'*' | b'~' | b'>' | b'%' if depth < 32 => {
                let n: usize = std::str::from_utf8(line).ok()?.parse().ok()?;
                let n = if kind == b'%' { 2 * n } else { n };
                let mut items = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    items.push(one(buf, pos, depth + 1)?);
                }
                Reply::Array(items)
            }
            b'|' if depth < 32 => {
                let n: usize = std::str::from_utf8(line).ok()?.parse().ok()?;
                for _ in 0..2 * n {
                    one(buf, pos, depth + 1)?;
                }
                one(buf, pos, depth + 1)?
            }
            _ => return None,
        })
    }
    let mut pos = 0;
    one(frame, &mut pos, 0).unwrap_or_else(|| Reply::Bulk(frame.to_vec()))
}

impl Plugin for LuaPlugin {
    fn name(&self) -> &str {
        &self.name
    }

    fn commands(&self) -> Vec<String> {
        self.commands.clone()
    }

    fn wants_reply(&self, _cmd: &PluginCommand<'_>) -> bool {
        self.wants_replies
    }

    fn on_command(&self, conn: &ConnInfo, cmd: &PluginCommand<'_>) -> Action {
        let inner = self.inner();
        let Some(f) = &inner.on_command else {
            return Action::Pass;
        };
        let sb = &inner.sandbox;
        let args = match (conn_table(sb, conn), args_table(sb, cmd.args)) {
            (Ok(c), Ok(a)) => (c, cmd.name, a),
            _ => {
                drop(inner);
                self.fault("on_command", "out of memory building its arguments");
                return Action::Pass;
            }
        };
        let outcome = sb
            .call(f, args)
            .map_err(|e| e.message)
            .and_then(|v| action_of(sb, &v));
        drop(inner);
        outcome.unwrap_or_else(|why| {
            self.fault("on_command", &why);
            Action::Pass
        })
    }

    fn on_reply(&self, conn: &ConnInfo, cmd: &PluginCommand<'_>, reply: &[u8], latency: Duration) {
        self.call_on_reply(conn, cmd, reply, latency, false);
    }

    fn rewrites_replies(&self) -> bool {
        self.rewrites
    }

    fn rewrite_reply(
        &self,
        conn: &ConnInfo,
        cmd: &PluginCommand<'_>,
        reply: &[u8],
        latency: Duration,
    ) -> Option<Vec<u8>> {
        self.call_on_reply(conn, cmd, reply, latency, true)
    }

    fn on_tick(&self) {
        let inner = self.inner();
        let Some(f) = &inner.on_tick else { return };
        let outcome = inner.sandbox.call(f, ());
        drop(inner);
        if let Err(e) = outcome {
            self.fault("on_tick", &e.message);
        }
    }

    fn on_connect(&self, conn: &ConnInfo) {
        self.conn_hook("on_connect", conn, |i| i.on_connect.as_ref());
    }

    fn on_close(&self, conn: &ConnInfo) {
        self.conn_hook("on_close", conn, |i| i.on_close.as_ref());
    }

    /// Lua hooks run on a thread of the plugin's own.
    fn offloaded(&self) -> bool {
        true
    }

    fn report(&self, ctx: &ReportCtx) -> Option<serde_json::Value> {
        let inner = self.inner();
        let mut body = serde_json::Value::Null;
        if let Some(f) = &inner.report {
            let outcome = inner.sandbox.call(f, ()).and_then(|v| {
                inner.sandbox.call(&inner.encode, v).map(|s| match s {
                    Value::String(s) => s.to_string_lossy(),
                    _ => "null".into(),
                })
            });
            match outcome {
                Ok(text) => body = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
                Err(e) => {
                    drop(inner);
                    self.fault("report", &e.message);
                    return Some(self.wrap(ctx, serde_json::Value::Null));
                }
            }
        }
        drop(inner);
        Some(self.wrap(ctx, body))
    }
}

impl LuaPlugin {
    /// Calls `on_reply`; with `rewrite`, what it returned as the reply to send instead (`nil`:
    /// the server's).
    fn call_on_reply(
        &self,
        conn: &ConnInfo,
        cmd: &PluginCommand<'_>,
        reply: &[u8],
        latency: Duration,
        rewrite: bool,
    ) -> Option<Vec<u8>> {
        let inner = self.inner();
        let f = inner.on_reply.as_ref()?;
        let sb = &inner.sandbox;
        let latency_us = latency.as_micros() as f64;
        let outcome = match (
            conn_table(sb, conn),
            args_table(sb, cmd.args),
            sb.reply_to_lua(decode_reply(reply)),
        ) {
            (Ok(c), Ok(a), Ok(r)) => sb
                .call(f, (c, cmd.name, a, r, latency_us))
                .map_err(|e| e.message),
            _ => Err("out of memory building its arguments".into()),
        };
        let outcome = match outcome {
            Ok(v) if rewrite => match action_of(sb, &v) {
                Ok(Action::Pass) => Ok(None),
                Ok(Action::Reply(bytes)) => Ok(Some(bytes)),
                Ok(_) => Err("on_reply may return nil or {reply = V}".to_string()),
                Err(e) => Err(e),
            },
            Ok(_) => Ok(None),
            Err(e) => Err(e),
        };
        drop(inner);
        outcome.unwrap_or_else(|why| {
            self.fault("on_reply", &why);
            None
        })
    }

    /// Calls the hook `pick` finds (if the file defined it) with the connection's table.
    fn conn_hook(
        &self,
        name: &str,
        conn: &ConnInfo,
        pick: impl Fn(&LuaHooks) -> Option<&Function>,
    ) {
        let inner = self.inner();
        let Some(f) = pick(&inner) else { return };
        let outcome = match conn_table(&inner.sandbox, conn) {
            Ok(c) => inner.sandbox.call(f, c).map(|_| ()).map_err(|e| e.message),
            Err(_) => Err("out of memory building its arguments".to_string()),
        };
        drop(inner);
        if let Err(why) = outcome {
            self.fault(name, &why);
        }
    }

    fn wrap(&self, ctx: &ReportCtx, report: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "schema": "lockkit.plugin/1",
            "plugin": self.name,
            "target": ctx.target,
            "duration_s": (ctx.duration.as_secs_f64() * 1000.0).round() / 1000.0,
            "faults": self.faults(),
            "report": report,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_decode_as_redis_call_returns_them() {
        assert_eq!(decode_reply(b"+OK\r\n"), Reply::Status("OK".into()));
        assert_eq!(decode_reply(b"$-1\r\n"), Reply::Nil);
        assert_eq!(
            decode_reply(b"*2\r\n:1\r\n$2\r\nhi\r\n"),
            Reply::Array(vec![Reply::Int(1), Reply::Bulk(b"hi".to_vec())])
        );
        assert_eq!(
            decode_reply(b"%1\r\n+a\r\n#t\r\n"),
            Reply::Array(vec![Reply::Status("a".into()), Reply::Int(1)])
        );
    }

    #[test]
    fn replies_encode_as_resp2() {
        let mut out = Vec::new();
        encode_reply(
            &Reply::Array(vec![
                Reply::Nil,
                Reply::Error("ERR no".into()),
                Reply::Int(3),
            ]),
            &mut out,
        );
        assert_eq!(out, b"*3\r\n$-1\r\n-ERR no\r\n:3\r\n");
    }
}
