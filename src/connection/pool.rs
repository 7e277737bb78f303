//! Connections and script invocation: preload with `SCRIPT LOAD`, call with `EVALSHA`, recover
//! from `NOSCRIPT` in one extra round trip.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use futures_util::future::join_all;

use redis::{Cmd, Value};

use super::hub::{open_hub, Hub};
use crate::command::Command;
use crate::connection::{self as conn, Conn, Topology};
use crate::error::{Error, Result};
use crate::keys;
use crate::lock::new_token;
use crate::options::{ClientOptions, ScriptMode, WaitMode};
use crate::scripts::{self, LuaScript};

/// Counters of what the client did, for tests, benchmarks and reports.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) noscript_recoveries: AtomicU64,
    pub(crate) unknown_outcome_cleanups: AtomicU64,
}

/// A snapshot of a client's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Calls that met `NOSCRIPT` (or a missing function) and re-sent the script.
    pub noscript_recoveries: u64,
    /// Acquires whose reply was lost and that ran a compare-and-delete to leave no ghost lock.
    pub unknown_outcome_cleanups: u64,
}

pub(crate) struct Inner {
    conns: Vec<Conn>,
    topology: Topology,
    next: AtomicUsize,
    pub(crate) options: ClientOptions,
    pub(crate) counters: Counters,
    target: String,
    warned_preload: AtomicBool,
    /// Acquire with `SET ... NX GET` (a Redis 7 cluster, whose client re-sends after a drop).
    set_nx_get: bool,
    /// The release notifications waiters are woken by (`None`: they poll).
    hub: Option<Hub>,
    /// Why waiters poll although notification was asked for.
    polling_because: Option<String>,
    /// How long a release's "released" marker lives, in ms ([`Connections::released_marker`]).
    marker_ms: String,
}

/// The connection side of a [`LockClient`](crate::LockClient): a set of auto-reconnecting
/// multiplexed connections, the script cache state and counters.
#[derive(Clone)]
pub(crate) struct Connections(pub(crate) Arc<Inner>);

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("target", &self.0.target)
            .field("connections", &self.0.conns.len())
            .field("script_mode", &self.0.options.script_mode)
            .finish()
    }
}

impl Connections {
    pub(crate) async fn connect(url: &str, mut options: ClientOptions) -> Result<Connections> {
        let (conns, topology, set_nx_get) = conn::open_detecting(url, &options).await?;
        if topology == Topology::Proxy {
            options.proxy = Some(true);
        }
        let (hub, polling_because) = match options.wait {
            WaitMode::Poll => (None, None),
            WaitMode::Notify => match open_hub(url, &options, topology, conns[0].clone()).await? {
                Ok(hub) => (Some(hub), None),
                Err(why) => {
                    tracing::info!(target = %crate::url::redact_url(url), why, "release notification unavailable; waiters poll");
                    (None, Some(why))
                }
            },
        };
        let wait = (hub, polling_because);
        let this = Self::assemble(url, options, conns, topology, set_nx_get, wait);
        // Within the connect timeout too: a server that stops answering now fails the connect.
        let limit = this.0.options.connect_timeout;
        match tokio::time::timeout(limit, this.preload()).await {
            Ok(preloaded) => preloaded?,
            Err(_) => {
                return Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connecting: loading the scripts: no answer within the connect timeout ({limit:?})"),
                ))
                .into())
            }
        }
        Ok(this)
    }

    /// Connections that are established on first use (for a Redlock node that is down at
    /// start-up); scripts then reach the server through the `NOSCRIPT` recovery path.
    pub(crate) fn lazy(url: &str, options: ClientOptions) -> Result<Connections> {
        let conns = conn::open_lazy(url, &options)?;
        let topology = if options.proxy == Some(true) {
            Topology::Proxy
        } else {
            Topology::Standalone
        };
        Ok(Self::assemble(
            url,
            options,
            conns,
            topology,
            false,
            (None, None),
        ))
    }

    fn assemble(
        url: &str,
        options: ClientOptions,
        conns: Vec<Conn>,
        topology: Topology,
        set_nx_get: bool,
        (hub, polling_because): (Option<Hub>, Option<String>),
    ) -> Connections {
        let marker_ms = options.resend_window().as_millis().max(1).to_string();
        Connections(Arc::new(Inner {
            marker_ms,
            conns,
            next: AtomicUsize::new(0),
            options,
            counters: Counters::default(),
            target: crate::url::redact_url(url),
            warned_preload: AtomicBool::new(false),
            topology,
            set_nx_get,
            hub,
            polling_because,
        }))
    }

    /// The release notifications, when waiters are woken by them.
    pub(crate) fn hub(&self) -> Option<&Hub> {
        self.0.hub.as_ref()
    }

    /// Why waiters poll although notification was asked for.
    pub(crate) fn polling_because(&self) -> Option<&str> {
        self.0.polling_because.as_deref()
    }

    /// The channel a release of `key` publishes on: on one server only (a cluster would
    /// broadcast every release to all its nodes; a proxy does not carry pub/sub), and not for a
    /// Redlock node (Redlock's waiters poll: nobody would hear it).
    pub(crate) fn release_channel(&self, key: &str) -> Option<String> {
        (self.0.topology == Topology::Standalone && self.0.options.publish_releases)
            .then(|| super::notify::release_channel(key))
    }

    /// Where a release of `key` leaves its "released" marker: in a cluster only, whose client
    /// re-sends a command that may already have run (after a dropped connection or a timeout),
    /// so that the repeat answers "released" instead of "not held". `None` elsewhere (lockkit's
    /// own connections never re-send), and for a key whose braces make no hash tag (no name
    /// shares its slot).
    pub(crate) fn released_marker(&self, key: &str) -> Option<String> {
        if self.0.topology != Topology::Cluster {
            return None;
        }
        let marker = crate::keys::companion_key(key, "released");
        (keys::key_slot(marker.as_bytes()) == keys::key_slot(key.as_bytes())).then_some(marker)
    }

    /// A releasing script's keys and arguments: `keys`, then the marker; the token, the
    /// marker's lifetime when there is a marker, then the channel
    /// (`lua/release.lua`, `lua/release_fair.lua`). On the stack: every release builds them.
    /// `keys` holds at most three (a fair lock's).
    pub(crate) fn release_args<'a>(
        &'a self,
        keys: &[&'a str],
        token: &'a str,
        marker: Option<&'a str>,
        channel: Option<&'a str>,
    ) -> ReleaseArgs<'a> {
        let mut r = ReleaseArgs {
            keys: [""; 4],
            nkeys: keys.len(),
            args: [token.as_bytes(), b"", b""],
            nargs: 1,
        };
        r.keys[..keys.len()].copy_from_slice(keys);
        if let Some(marker) = marker {
            r.keys[r.nkeys] = marker;
            r.nkeys += 1;
            r.args[1] = self.0.marker_ms.as_bytes();
            r.nargs = 2;
        }
        if let Some(channel) = channel {
            r.args[r.nargs] = channel.as_bytes();
            r.nargs += 1;
        }
        r
    }

    /// What the target is: one server, a proxy, or a cluster.
    pub(crate) fn topology(&self) -> Topology {
        self.0.topology
    }

    pub(crate) fn target(&self) -> &str {
        &self.0.target
    }

    /// One connection of the set (each is multiplexed and cheap to clone). A task always gets
    /// the same one, chosen by its task id, so tasks spread evenly over the set. Keeping a task
    /// on one connection is cheaper than spreading its calls: the replies one read brings wake
    /// tasks whose next commands go back out on that same connection, in one write, instead of
    /// one write on each connection. Outside a task, round-robin.
    pub(crate) fn conn(&self) -> Conn {
        self.0.conns[self.home()].clone()
    }

    /// The index of the current task's connection ([`conn`](Self::conn)).
    fn home(&self) -> usize {
        let n = self.0.conns.len();
        if n == 1 {
            return 0;
        }
        let i = match tokio::task::try_id() {
            Some(id) => task_number(id),
            None => self.0.next.fetch_add(1, Ordering::Relaxed),
        };
        i % n
    }

    /// The connection for everything done under one token: the acquire, the clean-up of an
    /// acquire whose reply was lost (or that was dropped), the release, the extends. Always the
    /// same one, so they reach the server in the order they were sent: over another connection
    /// a compare-and-delete could overtake the `SET` it undoes (held up on the network), find
    /// nothing, and let the `SET` land afterwards for its whole TTL. Tokens are random, so
    /// locks still spread over every connection.
    pub(crate) fn conn_for(&self, token: &str) -> &Conn {
        let conns = &self.0.conns;
        if conns.len() == 1 {
            return &conns[0];
        }
        &conns[token_slot(token, conns.len())]
    }

    /// A fresh token for a lock the current task takes, drawn so that the lock's connection
    /// ([`conn_for`](Self::conn_for)) is the task's own ([`conn`](Self::conn)): a task's lock
    /// commands then go out with the other commands its connection's replies woke, in one write.
    /// It is a random UUID v4 like any other, drawn among those that land there (with `n`
    /// connections, `n` draws on average, log2(n) bits less to guess).
    pub(crate) fn task_token(&self) -> String {
        self.token_on(self.home())
    }

    /// A fresh token whose connection is `slot` (see [`task_token`](Self::task_token)).
    fn token_on(&self, slot: usize) -> String {
        let n = self.0.conns.len();
        if n == 1 {
            return new_token();
        }
        // Drawn into a buffer on the stack: only the token kept is allocated. n draws on
        // average; the bound is never reached in practice (p = (1 - 1/n)^(64 n)).
        let mut buf = [0u8; uuid::fmt::Simple::LENGTH];
        for _ in 0..64 * n {
            let token: &str = uuid::Uuid::new_v4().simple().encode_lower(&mut buf);
            if token_slot(token, n) == slot {
                return token.to_owned();
            }
        }
        new_token()
    }

    /// Counts one clean-up after a lost acquire reply.
    pub(crate) fn count_unknown_outcome_cleanup(&self) {
        self.0
            .counters
            .unknown_outcome_cleanups
            .fetch_add(1, Ordering::Relaxed);
    }

    /// A script call met `NOSCRIPT` (or a missing function): in the stats and the metrics.
    fn count_noscript_recovery(&self) {
        self.0
            .counters
            .noscript_recoveries
            .fetch_add(1, Ordering::Relaxed);
        crate::metrics::noscript_recovery();
    }

    pub(crate) fn stats(&self) -> ClientStats {
        ClientStats {
            noscript_recoveries: self.0.counters.noscript_recoveries.load(Ordering::Relaxed),
            unknown_outcome_cleanups: self
                .0
                .counters
                .unknown_outcome_cleanups
                .load(Ordering::Relaxed),
        }
    }

    /// Makes the scripts available on the server(s): `SCRIPT LOAD` (EVALSHA mode) or
    /// `FUNCTION LOAD REPLACE` (function mode). The script cache is per server, not per
    /// connection, so this is one pipelined round trip per client; in a cluster each command is
    /// sent on its own, which routes it to every node.
    async fn preload(&self) -> Result<()> {
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

    /// Whether acquires use `SET ... NX GET` to recognise their own re-sent `SET`.
    pub(crate) fn set_nx_get(&self) -> bool {
        self.0.set_nx_get
    }

    /// Whether the client treats its target as a proxy (set, or detected at connect).
    pub(crate) fn is_proxy(&self) -> bool {
        self.0.topology == Topology::Proxy
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

/// One script call of a batch ([`Connections::run_script_many`]): its keys (the first routes it
/// in a cluster; at least one) and arguments.
pub(crate) struct ScriptCall<'a> {
    pub(crate) script: &'a LuaScript,
    pub(crate) keys: Vec<&'a str>,
    pub(crate) args: Vec<&'a [u8]>,
}

pub(crate) fn script_cmd(
    mode: ScriptMode,
    script: &LuaScript,
    keys: &[&str],
    args: &[&[u8]],
) -> Cmd {
    let (name, first) = match mode {
        ScriptMode::EvalSha => ("EVALSHA", script.sha()),
        ScriptMode::Eval => ("EVAL", script.source()),
        ScriptMode::Function => ("FCALL", script.loaded_function_name()),
    };
    // Sized up front: the command is built once per lock operation, without regrowing.
    let data = name.len()
        + first.len()
        + 4
        + keys.iter().map(|k| k.len()).sum::<usize>()
        + args.iter().map(|a| a.len()).sum::<usize>();
    let mut cmd = Cmd::with_capacity(3 + keys.len() + args.len(), data);
    cmd.arg(name).arg(first).arg(keys.len()).arg(keys);
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

/// A releasing script's keys (the lock's, or the fair lock's three, then the marker) and
/// arguments, from [`Connections::release_args`].
pub(crate) struct ReleaseArgs<'a> {
    keys: [&'a str; 4],
    nkeys: usize,
    args: [&'a [u8]; 3],
    nargs: usize,
}

impl<'a> ReleaseArgs<'a> {
    pub(crate) fn keys(&self) -> &[&'a str] {
        &self.keys[..self.nkeys]
    }

    pub(crate) fn args(&self) -> &[&'a [u8]] {
        &self.args[..self.nargs]
    }
}

/// A script call (`EVALSHA`, `EVAL` or `FCALL`, by the client's script mode), encoded by
/// lockkit itself on the hot path ([`Command`]): the bytes of [`script_cmd`], without building it.
pub(crate) struct ScriptCmd<'a> {
    pub(crate) mode: ScriptMode,
    pub(crate) script: &'a LuaScript,
    pub(crate) keys: &'a [&'a str],
    pub(crate) args: &'a [&'a [u8]],
}

impl Command for ScriptCmd<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        use crate::resp::{write_array_len, write_bulk, write_bulk_uint};
        write_array_len(out, 3 + self.keys.len() + self.args.len());
        match self.mode {
            ScriptMode::EvalSha => {
                write_bulk(out, b"EVALSHA");
                write_bulk(out, self.script.sha().as_bytes());
            }
            ScriptMode::Eval => {
                write_bulk(out, b"EVAL");
                write_bulk(out, self.script.source().as_bytes());
            }
            ScriptMode::Function => {
                write_bulk(out, b"FCALL");
                write_bulk(out, self.script.loaded_function_name().as_bytes());
            }
        }
        write_bulk_uint(out, self.keys.len() as u64);
        for k in self.keys {
            write_bulk(out, k.as_bytes());
        }
        for a in self.args {
            write_bulk(out, a);
        }
    }

    fn cmd(&self) -> Cmd {
        script_cmd(self.mode, self.script, self.keys, self.args)
    }
}

/// A script's arguments followed by the release channel it publishes on, when there is one
/// ([`Connections::release_channel`]): the last argument of every releasing script.
pub(crate) fn with_channel<'a>(mut args: Vec<&'a [u8]>, channel: Option<&'a str>) -> Vec<&'a [u8]> {
    args.extend(channel.map(str::as_bytes));
    args
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

/// Which of `n` connections the commands of `token` go over.
fn token_slot(token: &str, n: usize) -> usize {
    // The last eight bytes (random in every token lockkit draws), mixed by one multiplication:
    // a constant cost, where a hash of the whole token cost as much as the rest of choosing the
    // connection, twice per lock.
    let bytes = token.as_bytes();
    let tail = bytes[bytes.len().saturating_sub(8)..]
        .iter()
        .fold(0u64, |x, &b| x << 8 | u64::from(b));
    let mixed = tail.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    (mixed % n as u64) as usize
}

/// A task id as a number (tokio numbers tasks in the order they are spawned).
fn task_number(id: tokio::task::Id) -> usize {
    use std::hash::{Hash, Hasher};
    /// Keeps the last integer hashed: the id's own number.
    #[derive(Default)]
    struct Number(u64);
    impl Hasher for Number {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = self.0.rotate_left(8) ^ u64::from(*b);
            }
        }
        fn write_u64(&mut self, n: u64) {
            self.0 = n;
        }
    }
    let mut h = Number::default();
    id.hash(&mut h);
    h.finish() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_call_written_in_place_is_the_one_redis_rs_packs() {
        let keys: [&[&str]; 3] = [&["k"], &["k", "{k}:lockkit-released"], &[]];
        let args: [&[&[u8]]; 3] = [&[b"tok"], &[b"tok", b"2000", b"chan"], &[]];
        for mode in [ScriptMode::EvalSha, ScriptMode::Eval, ScriptMode::Function] {
            for (keys, args) in keys.iter().zip(args) {
                let call = ScriptCmd {
                    mode,
                    script: &scripts::RELEASE,
                    keys,
                    args,
                };
                let mut out = Vec::new();
                call.write(&mut out);
                let want = call.cmd().get_packed_command();
                assert_eq!(out, want, "{mode:?} {keys:?}");
            }
        }
    }

    #[test]
    fn evalsha_cmd_carries_sha_numkeys_and_args() {
        let cmd = script_cmd(ScriptMode::EvalSha, &scripts::RELEASE, &["k"], &[b"tok"]);
        let packed = String::from_utf8(cmd.get_packed_command()).unwrap();
        assert!(packed.contains("EVALSHA"));
        assert!(packed.contains(scripts::RELEASE.sha()));
        assert!(
            packed.contains("\r\n1\r\n") && packed.ends_with("k\r\n$3\r\ntok\r\n"),
            "{packed}"
        );
    }

    #[test]
    fn random_tokens_spread_evenly_over_the_connections() {
        for n in 2..=8usize {
            let mut counts = vec![0u32; n];
            let draws = 2000 * n as u32;
            for _ in 0..draws {
                counts[token_slot(&new_token(), n)] += 1;
            }
            // 2000 expected in each; a bias of a fifth is about nine standard deviations.
            assert!(
                counts.iter().all(|&c| (1600..=2400).contains(&c)),
                "{n} connections: {counts:?}"
            );
        }
        // Any string has a connection, short or empty.
        assert!(token_slot("", 3) < 3 && token_slot("ab", 3) < 3);
    }

    async fn client_id(mut conn: Conn) -> i64 {
        redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut conn)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_task_and_the_locks_it_takes_keep_to_one_connection_and_tasks_spread_over_all() {
        let server = lockkit_test_support::RedisServer::start();
        let conns = Connections::connect(&server.url(), ClientOptions::new().connections(3))
            .await
            .unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..30 {
            let conns = conns.clone();
            let ids = tokio::spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..4 {
                    ids.push(client_id(conns.conn()).await);
                    // The lock this task would take next: on the same connection.
                    let token = conns.task_token();
                    ids.push(client_id(conns.conn_for(&token).clone()).await);
                }
                ids
            })
            .await
            .unwrap();
            assert!(
                ids.iter().all(|&id| id == ids[0]),
                "one task, several connections: {ids:?}"
            );
            seen.insert(ids[0]);
        }
        assert_eq!(
            seen.len(),
            3,
            "thirty tasks should use all three connections: {seen:?}"
        );
    }
}
