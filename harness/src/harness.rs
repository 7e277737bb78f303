//! [`Harness`]: the public entry point — run commands and scripts, set keys, move the clock.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::commands::{self, Run};
use crate::keyspace::{Entry, Value};
use crate::reply::Reply;
use crate::script::{Engine, FunctionLibrary, Limits};
use crate::server::{Caller, LogLine, Server};

/// Why a harness could not be built or a file could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// The Lua state could not be set up.
    #[error("setting up Lua: {0}")]
    Lua(#[from] mlua::Error),
    /// A script file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Redis refused the script (compile error, bad shebang...).
    #[error("{path}: {reply}")]
    Script {
        /// The file.
        path: String,
        /// Redis's error reply.
        reply: Reply,
    },
    /// An option is out of range.
    #[error("invalid harness option {field}: {reason}")]
    InvalidOptions {
        /// Which field.
        field: &'static str,
        /// Why.
        reason: &'static str,
    },
}

/// The default keyspace limit: 256 MiB.
pub const DEFAULT_KEYSPACE_LIMIT: usize = 256 << 20;

/// Options for a [`Harness`].
#[derive(Debug, Clone)]
pub struct HarnessOptions {
    time_limit: Duration,
    memory_limit: usize,
    keyspace_limit: usize,
    start: Option<SystemTime>,
}

impl Default for HarnessOptions {
    fn default() -> Self {
        HarnessOptions {
            time_limit: Duration::from_secs(5),
            memory_limit: 256 << 20,
            keyspace_limit: DEFAULT_KEYSPACE_LIMIT,
            start: None,
        }
    }
}

impl HarnessOptions {
    /// The defaults: 5 s per script (Redis's `busy-reply-threshold`), a 256 MiB Lua heap, the
    /// clock starting at the current wall-clock time.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wall-clock time after which a running script is stopped with an error.
    #[must_use]
    pub fn time_limit(mut self, d: Duration) -> Self {
        self.time_limit = d;
        self
    }

    /// Bytes the Lua heap may use; a script that needs more fails with an error. Function
    /// libraries run in a Lua state of their own (as in Redis) under the same cap, apart.
    #[must_use]
    pub fn memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// Bytes the keyspace may use (Redis's `maxmemory` with the `noeviction` policy): past
    /// it, commands that may grow memory answer `OOM command not allowed when used memory >
    /// 'maxmemory'.` as Redis does. Default [`DEFAULT_KEYSPACE_LIMIT`]; 0 for none. Sizes are
    /// counted approximately: the bytes of keys and values plus a fixed cost per key and per
    /// element.
    #[must_use]
    pub fn keyspace_limit(mut self, bytes: usize) -> Self {
        self.keyspace_limit = bytes;
        self
    }

    /// Where the virtual clock starts (default: now).
    #[must_use]
    pub fn start_time(mut self, t: SystemTime) -> Self {
        self.start = Some(t);
        self
    }
}

/// A key's value and remaining time to live, as [`Harness::snapshot`] reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct KeySnapshot {
    /// The value.
    pub value: Value,
    /// The remaining time to live, if the key expires.
    pub ttl: Option<Duration>,
}

/// Redis 7.0 scripting, offline: an in-memory keyspace, a virtual clock and Lua 5.1.
///
/// ```
/// use lockkit_harness::{Harness, Reply};
/// use std::time::Duration;
///
/// let mut h = Harness::new().unwrap();
/// h.set("lock", "tok");
/// let release = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
/// assert_eq!(h.eval(release, &["lock"], &["other"]), Reply::Int(0));
/// assert_eq!(h.eval(release, &["lock"], &["tok"]), Reply::Int(1));
/// assert!(h.get("lock").is_none());
///
/// h.call(&["SET", "k", "v", "PX", "100"]);
/// h.advance(Duration::from_millis(101));
/// assert_eq!(h.call(&["GET", "k"]), Reply::Nil);
/// ```
#[derive(Debug)]
pub struct Harness {
    engine: Engine,
}

fn unix_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}

impl Harness {
    /// A harness with the default options.
    ///
    /// # Errors
    /// When the Lua state cannot be created (out of memory).
    pub fn new() -> Result<Harness, HarnessError> {
        Self::with_options(HarnessOptions::default())
    }

    /// A harness with `options`.
    ///
    /// # Errors
    /// An invalid option, or a Lua state that cannot be created.
    pub fn with_options(options: HarnessOptions) -> Result<Harness, HarnessError> {
        if options.time_limit.is_zero() {
            return Err(HarnessError::InvalidOptions {
                field: "time_limit",
                reason: "must be positive",
            });
        }
        if options.memory_limit < (1 << 20) {
            return Err(HarnessError::InvalidOptions {
                field: "memory_limit",
                reason: "must be at least 1 MiB",
            });
        }
        let now = unix_ms(options.start.unwrap_or_else(SystemTime::now));
        let limits = Limits {
            time_limit: options.time_limit,
            memory_limit: options.memory_limit,
        };
        let mut server = Server::new(now);
        server.db.set_max_memory(options.keyspace_limit);
        Ok(Harness {
            engine: Engine::new(server, limits)?,
        })
    }

    /// Runs one command, as a client would send it: `["SET", "k", "v"]`, `["EVAL", ...]`.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Reply {
        let argv: Vec<Vec<u8>> = args.iter().map(|a| a.as_ref().to_vec()).collect();
        self.call_argv(&argv)
    }

    /// [`call`](Self::call) with owned arguments.
    pub fn call_argv(&mut self, argv: &[Vec<u8>]) -> Reply {
        self.call_argv_as(argv, false)
    }

    /// [`call_argv`](Self::call_argv) for a RESP3 client (`resp3`): maps and doubles stay
    /// [`Reply::Map`] and [`Reply::Double`] instead of being flattened for RESP2.
    pub fn call_argv_as(&mut self, argv: &[Vec<u8>], resp3: bool) -> Reply {
        let stats = self.engine.server().command_stats.clone();
        let started = std::time::Instant::now();
        let reply = self.call_uncounted(argv, resp3);
        match commands::known_name(argv) {
            // Refused before it ran: wrong arity, over maxmemory, no replicas.
            Some(name)
                if commands::resolve(argv, Caller::Client).is_err()
                    || matches!(&reply, Reply::Error(e) if e.starts_with("OOM ") || e.starts_with("NOREPLICAS ")) =>
            {
                stats.rejected(name);
            }
            Some(name) => stats.called(name, started.elapsed(), matches!(reply, Reply::Error(_))),
            None => {}
        }
        reply
    }

    /// The commands' statistics (INFO commandstats), which `lua serve`'s connections count
    /// their own commands into.
    #[cfg(feature = "serve")]
    pub(crate) fn command_stats(&self) -> crate::command_stats::CommandStats {
        self.engine.server().command_stats.clone()
    }

    /// [`call_argv_as`](Self::call_argv_as) without counting the call (a blocked command
    /// tried again: Redis counts it once).
    pub(crate) fn call_uncounted(&mut self, argv: &[Vec<u8>], resp3: bool) -> Reply {
        self.engine.clear_stopped();
        self.engine.client_resp3.set(resp3);
        let spec = match commands::resolve(argv, Caller::Client) {
            Ok(s) => s,
            Err(e) => return e,
        };
        match spec.run {
            Run::Plain(f) => {
                let mut server = self.engine.server_mut();
                if spec.write && server.min_replicas_to_write > 0 {
                    // Redis checks memory first.
                    if let Err(e) = server.db.check_memory(spec.deny_oom, spec.name, argv) {
                        return Reply::Error(e);
                    }
                    return Reply::err(crate::keyspace::NOREPLICAS);
                }
                if let Err(e) = server.db.check_memory(spec.deny_oom, spec.name, argv) {
                    return Reply::Error(e);
                }
                let before = crate::notify::before(&server, spec.name, argv);
                server.client_resp3 = resp3;
                let reply = commands::run_caught(f, &mut server, argv);
                server.client_resp3 = false;
                if let Some(b) = before {
                    crate::notify::after(&server, spec.name, argv, &reply, b);
                }
                if resp3 {
                    reply
                } else {
                    reply.into_resp2()
                }
            }
            Run::Scripting => {
                // FUNCTION LOAD / RESTORE are deny-oom (EVAL and FCALL are not: the script's
                // flags decide, see `Engine::refused_for_oom`).
                if spec.deny_oom && self.engine.server_mut().db.over_config_max() {
                    return Reply::err(crate::keyspace::OOM);
                }
                let r = crate::scripting::dispatch(&mut self.engine, spec.command, argv);
                if resp3 {
                    r
                } else {
                    r.into_resp2()
                }
            }
        }
    }

    /// `CONFIG SET maxmemory`: past `bytes` (plus what the server itself is counted at),
    /// deny-oom commands and scripts without `allow-oom` answer Redis's OOM error; 0 lifts it.
    /// The keyspace's own bound ([`HarnessOptions::keyspace_limit`]) stays.
    pub fn set_config_maxmemory(&mut self, bytes: usize) {
        self.engine.server_mut().db.set_config_max_memory(bytes);
    }

    /// `CONFIG SET min-replicas-to-write`: above 0, write commands and scripts that may write
    /// answer `NOREPLICAS` (the harness never has replicas).
    pub fn set_min_replicas_to_write(&mut self, n: i64) {
        self.engine.server_mut().min_replicas_to_write = n;
    }

    /// `--strict-keys`: a script (EVAL, EVALSHA, FCALL) whose command touches a key it did not
    /// declare in KEYS gets an error naming the key, as Redis Cluster and Dragonfly refuse it.
    pub fn set_strict_keys(&mut self, on: bool) {
        self.engine.server_mut().strict_keys = on;
    }

    /// Whether `maxmemory` is set and the keyspace is past it: Redis refuses `denyoom`
    /// commands then, and every command queued inside MULTI.
    pub fn over_maxmemory(&mut self) -> bool {
        self.engine.server_mut().db.over_config_max()
    }

    /// `maxmemory` as `CONFIG GET` answers it.
    pub fn config_maxmemory(&self) -> usize {
        self.engine.server().db.config_max_memory()
    }

    /// Whether the harness stopped the script of the last command (time limit or memory cap).
    /// Redis would still be running it; what follows would not match Redis. A script's own
    /// error reply never sets this, whatever its text.
    pub fn stopped(&self) -> bool {
        self.engine.stopped()
    }

    /// Calls `hook` once in each run of Lua code that runs for longer than `after`, on the
    /// thread running it (`lua serve` lets another thread take over its sockets then).
    pub fn on_slow_script(&mut self, after: Duration, hook: impl Fn() + Send + Sync + 'static) {
        self.engine.on_slow_script(after, std::sync::Arc::new(hook));
    }

    /// A handle that stops the script running in this harness from another thread (what
    /// `SCRIPT KILL` does): the script ends with the time-limit error and
    /// [`stopped`](Self::stopped) is true.
    pub fn stop_handle(&self) -> crate::script::StopHandle {
        self.engine.stop_handle()
    }

    /// Figures INFO reports: (scripts in the cache, bytes of the Lua heap, approximate bytes
    /// of the keyspace, live keys).
    pub fn memory_figures(&self) -> (usize, usize, usize, usize) {
        let (scripts, lua) = self.engine.cache_figures();
        let mut s = self.engine.server_mut();
        let now = s.now_ms;
        let keys = s.db.len(now);
        (scripts, lua, s.db.used_memory(), keys)
    }

    /// `EVAL script numkeys keys... args...`.
    pub fn eval(&mut self, script: &str, keys: &[&str], args: &[&str]) -> Reply {
        let mut argv: Vec<&[u8]> = vec![b"EVAL", script.as_bytes()];
        let n = keys.len().to_string();
        argv.push(n.as_bytes());
        argv.extend(keys.iter().map(|k| k.as_bytes()));
        argv.extend(args.iter().map(|a| a.as_bytes()));
        self.call(&argv)
    }

    /// `EVALSHA sha numkeys keys... args...`.
    pub fn evalsha(&mut self, sha: &str, keys: &[&str], args: &[&str]) -> Reply {
        let mut argv: Vec<Vec<u8>> = vec![b"EVALSHA".to_vec(), sha.as_bytes().to_vec()];
        argv.push(keys.len().to_string().into_bytes());
        argv.extend(keys.iter().map(|k| k.as_bytes().to_vec()));
        argv.extend(args.iter().map(|a| a.as_bytes().to_vec()));
        self.call_argv(&argv)
    }

    /// `SCRIPT LOAD body`: the SHA-1, or Redis's error reply.
    pub fn script_load(&mut self, body: &[u8]) -> Result<String, Reply> {
        self.engine.load(body)
    }

    /// Reads a script file (e.g. `lua/release.lua`) and loads it: its SHA-1 for
    /// [`evalsha`](Self::evalsha).
    ///
    /// # Errors
    /// The file cannot be read, or Redis would refuse the script.
    pub fn load_script(&mut self, path: impl AsRef<Path>) -> Result<String, HarnessError> {
        let path = path.as_ref();
        let body = std::fs::read(path).map_err(|source| HarnessError::Io {
            path: path.display().to_string(),
            source,
        })?;
        self.engine
            .load(&body)
            .map_err(|reply| HarnessError::Script {
                path: path.display().to_string(),
                reply,
            })
    }

    /// Reads a function library file (`#!lua name=...`) and loads it with `FUNCTION LOAD REPLACE`.
    ///
    /// # Errors
    /// The file cannot be read, or Redis would refuse the library.
    pub fn load_library(&mut self, path: impl AsRef<Path>) -> Result<String, HarnessError> {
        let path = path.as_ref();
        let body = std::fs::read(path).map_err(|source| HarnessError::Io {
            path: path.display().to_string(),
            source,
        })?;
        match self.engine.function_load(&body, true) {
            Reply::Bulk(name) => Ok(String::from_utf8_lossy(&name).into_owned()),
            reply => Err(HarnessError::Script {
                path: path.display().to_string(),
                reply,
            }),
        }
    }

    /// The loaded function libraries.
    pub fn libraries(&self) -> Vec<FunctionLibrary> {
        self.engine.libraries()
    }

    /// Stores a string at `key` with no expiry.
    pub fn set(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        let mut s = self.engine.server_mut();
        s.db.set(key.as_ref(), Value::Str(value.as_ref().to_vec()), None);
    }

    /// Stores a string at `key` that expires after `ttl` on the virtual clock.
    pub fn set_with_ttl(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, ttl: Duration) {
        let mut s = self.engine.server_mut();
        let at = s.now_ms.saturating_add(ttl.as_millis() as i64);
        s.db.set(key.as_ref(), Value::Str(value.as_ref().to_vec()), Some(at));
    }

    /// The string at `key` (`None` when missing, expired, or not a string).
    pub fn get(&self, key: impl AsRef<[u8]>) -> Option<Vec<u8>> {
        let s = self.engine.server();
        match s.db.peek(key.as_ref(), s.now_ms) {
            Some(Entry {
                value: Value::Str(v),
                ..
            }) => Some(v.clone()),
            _ => None,
        }
    }

    /// The remaining time to live of `key`: `None` when missing, `Some(None)` without expiry.
    pub fn ttl(&self, key: impl AsRef<[u8]>) -> Option<Option<Duration>> {
        let s = self.engine.server();
        s.db.peek(key.as_ref(), s.now_ms).map(|e| {
            e.expire_at_ms
                .map(|t| Duration::from_millis((t - s.now_ms).max(0) as u64))
        })
    }

    /// Every live key with its value and TTL, sorted by key.
    pub fn snapshot(&self) -> BTreeMap<Vec<u8>, KeySnapshot> {
        let s = self.engine.server();
        s.db.iter(s.now_ms)
            .map(|(k, e)| {
                let ttl = e
                    .expire_at_ms
                    .map(|t| Duration::from_millis((t - s.now_ms).max(0) as u64));
                (
                    k.clone(),
                    KeySnapshot {
                        value: e.value.clone(),
                        ttl,
                    },
                )
            })
            .collect()
    }

    /// Moves the virtual clock forward (keys expire; scripts see the new time).
    pub fn advance(&mut self, d: Duration) {
        self.engine
            .server_mut()
            .advance_us(d.as_micros().min(i64::MAX as u128) as i64);
    }

    /// For `lua serve`: the command a client blocked on `argv` runs again when woken, with
    /// XREAD's `$` IDs pinned to each stream's last ID now (what `$` means to a blocked read).
    pub fn blocked_argv(&mut self, argv: &[Vec<u8>]) -> Vec<Vec<u8>> {
        commands::stream_group::pin_last_ids(&mut self.engine.server_mut(), argv)
    }

    /// For `lua serve`: the last ID of each stream a blocked XREADGROUP `argv` reads, for
    /// [`blocked_failure`](Self::blocked_failure).
    pub fn blocked_streams(&mut self, argv: &[Vec<u8>]) -> Vec<Option<crate::keyspace::StreamId>> {
        commands::stream_group::last_ids(&mut self.engine.server_mut(), argv)
    }

    /// For `lua serve`: what a client blocked on `argv` is answered when running it again
    /// failed (Redis 7.0's `UNBLOCKED` and `NOGROUP` for XREADGROUP; `since`: from
    /// [`blocked_streams`](Self::blocked_streams) when it blocked); `None`: it waits on.
    pub fn blocked_failure(
        &mut self,
        argv: &[Vec<u8>],
        since: &[Option<crate::keyspace::StreamId>],
    ) -> Option<Reply> {
        commands::stream_group::blocked_read_failed(&mut self.engine.server_mut(), argv, since)
    }

    /// Sets the virtual clock.
    pub fn set_time(&mut self, t: SystemTime) {
        self.engine.server_mut().set_now_ms(unix_ms(t));
    }

    /// The virtual clock.
    pub fn now(&self) -> SystemTime {
        let us = self.engine.server().now_us();
        if us >= 0 {
            UNIX_EPOCH + Duration::from_micros(us as u64)
        } else {
            UNIX_EPOCH - Duration::from_micros(us.unsigned_abs())
        }
    }

    /// What scripts wrote with `redis.log`: the last 10,000 lines, each cut at 8 KiB.
    pub fn log(&self) -> Vec<LogLine> {
        let s = self.engine.server();
        let keep = s.log.len().saturating_sub(crate::server::MAX_LOG_LINES);
        s.log[keep..].to_vec()
    }

    /// What PUBLISH and SPUBLISH sent (from a client or a script), in order (the last
    /// 10,000), as
    /// `(channel, message)`. Offline nobody is subscribed, so both answer 0.
    ///
    /// ```
    /// let mut h = lockkit_harness::Harness::new().unwrap();
    /// h.eval("return redis.call('PUBLISH', KEYS[1], ARGV[1])", &["lock:ch"], &["0"]);
    /// assert_eq!(h.published(), vec![(b"lock:ch".to_vec(), b"0".to_vec())]);
    /// ```
    pub fn published(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.engine.server().published.clone()
    }

    /// Records writes to `keys` only (what connections WATCH, for `lua serve`): see
    /// [`take_touched`](Self::take_touched).
    pub fn set_watched(&mut self, keys: std::collections::HashSet<Vec<u8>>) {
        self.engine.server_mut().db.set_watched(keys);
    }

    /// The watched keys written since the last call (by a command, a script, an expiry
    /// seen, FLUSHALL), each with whether it is still in the keyspace.
    pub fn take_touched(&mut self) -> Vec<(Vec<u8>, bool)> {
        self.engine.server_mut().db.take_touched()
    }

    /// Whether `key` is past its expiry on the virtual clock but not yet deleted (WATCH
    /// remembers it, and an EXEC fails when a watched key becomes so).
    pub fn is_stale(&self, key: &[u8]) -> bool {
        let s = self.engine.server();
        s.db.is_stale(key, s.now_ms)
    }

    /// Sets `notify-keyspace-events` (`lua serve`): keyspace notifications go to the
    /// publisher; an unknown character is refused (`None`).
    pub fn set_notify_flags(&mut self, flags: &[u8]) -> Option<()> {
        let f = crate::notify::parse_flags(flags)?;
        self.engine.server_mut().notify_flags = f;
        Some(())
    }

    /// Deletes the keys past their expiry with an `expired` notification each, when those
    /// are enabled, and evicts keys past `maxmemory` as `maxmemory-policy` allows (`lua serve`
    /// calls it after every command and when the clock moves).
    pub fn expire_due(&mut self) {
        let mut server = self.engine.server_mut();
        crate::notify::expire_due(&mut server);
        crate::eviction::evict_due(&mut server);
    }

    /// `CONFIG SET maxmemory-policy`: the name as `CONFIG GET` shows it, or Redis's error.
    ///
    /// # Errors
    /// A name that is no policy.
    pub fn set_maxmemory_policy(&mut self, name: &[u8]) -> Result<&'static str, String> {
        let (policy, name) = crate::eviction::parse(name).ok_or_else(crate::eviction::bad_name)?;
        self.engine.server_mut().eviction = policy;
        Ok(name)
    }

    /// Makes PUBLISH (from a client or a script) call `deliver(channel, message)`, which
    /// answers how many subscribers received it (`lua serve`'s subscribers). The messages
    /// are then no longer kept for [`published`](Self::published).
    pub fn set_publisher(&mut self, deliver: impl Fn(&[u8], &[u8]) -> i64 + Send + Sync + 'static) {
        self.engine.server_mut().publisher =
            Some(crate::server::Publisher(std::sync::Arc::new(deliver)));
    }

    /// Makes SPUBLISH (from a client or a script) call `deliver(shard channel, message)`,
    /// as [`set_publisher`](Self::set_publisher) does for PUBLISH.
    pub fn set_shard_publisher(
        &mut self,
        deliver: impl Fn(&[u8], &[u8]) -> i64 + Send + Sync + 'static,
    ) {
        self.engine.server_mut().shard_publisher =
            Some(crate::server::Publisher(std::sync::Arc::new(deliver)));
    }
}
