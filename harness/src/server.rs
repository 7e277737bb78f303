//! The emulated server's state outside Lua: the keyspace, the virtual clock, the log.

use crate::keyspace::Db;

/// One `redis.log` line a script wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// `redis.LOG_DEBUG` (0) to `redis.LOG_WARNING` (3).
    pub level: i64,
    /// The arguments joined with spaces, as Redis writes them.
    pub message: String,
}

/// The keyspace, the virtual clock and what scripts logged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Server {
    /// Database 0.
    pub db: Db,
    /// The virtual clock: Unix time in milliseconds. Frozen unless advanced.
    pub now_ms: i64,
    /// When the server started (Unix milliseconds): what LASTSAVE answers, as nothing is
    /// ever saved.
    pub start_ms: i64,
    /// Whether the command running was called by a script (SORT sorts a set's BY-constant
    /// result then, as Redis does).
    pub in_script: bool,
    /// The client whose own command runs speaks RESP3 (false for a script's call): XREAD
    /// and XREADGROUP answer it a map, as Redis does.
    pub client_resp3: bool,
    /// Microseconds past `now_ms` (DEBUG SLEEP and TIME have microsecond resolution).
    pub sub_ms_us: i64,
    /// `DEBUG SET-DISABLE-DENY-SCRIPTS 1`: scripts may call `noscript` commands.
    pub allow_noscript: bool,
    /// `CONFIG SET min-replicas-to-write`: above 0, writes answer `NOREPLICAS` (the server
    /// never has a replica).
    pub min_replicas_to_write: i64,
    /// `lockkit lua serve --strict-keys`: a script's command touching a key not in its KEYS
    /// fails with an error naming the key.
    pub strict_keys: bool,
    /// The KEYS of the script running (kept only with `strict_keys`).
    pub script_keys: Vec<Vec<u8>>,
    /// What `DEBUG SLEEP` inside the running script slept: the script's time is frozen, so
    /// the clock moves when it ends.
    pub slept_in_script_us: i64,
    /// Lines written by `redis.log`: the last [`MAX_LOG_LINES`], each cut at
    /// [`MAX_LOG_LINE`] bytes.
    pub log: Vec<LogLine>,
    /// Lines dropped from the front of `log` to keep it bounded.
    pub log_dropped: u64,
    /// What PUBLISH and SPUBLISH sent, in order: (channel, message); the last
    /// [`MAX_PUBLISHED`].
    pub published: Vec<(Vec<u8>, Vec<u8>)>,
    /// Delivers a PUBLISH to subscribers (`lua serve`) and answers how many received it.
    pub publisher: Option<Publisher>,
    /// Delivers an SPUBLISH to the shard channel's subscribers (`lua serve`).
    pub shard_publisher: Option<Publisher>,
    /// INFO commandstats: every command's calls, from clients and scripts.
    pub command_stats: crate::command_stats::CommandStats,
    /// `notify-keyspace-events`, as `crate::notify` reads it (0: none).
    pub notify_flags: u32,
    /// `maxmemory-policy`: which keys `maxmemory` evicts.
    pub eviction: crate::eviction::Policy,
}

/// Delivers `(channel, message)`; answers how many received it.
pub(crate) type Deliver = dyn Fn(&[u8], &[u8]) -> i64 + Send + Sync;

/// What PUBLISH calls to deliver a message.
#[derive(Clone)]
pub(crate) struct Publisher(pub std::sync::Arc<Deliver>);

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Publisher")
    }
}

/// How many `redis.log` lines are kept (the oldest go first).
pub(crate) const MAX_LOG_LINES: usize = 10_000;
/// How many published messages are kept (the oldest go first).
pub(crate) const MAX_PUBLISHED: usize = 10_000;
/// Bytes of one kept `redis.log` line; the rest is cut.
pub(crate) const MAX_LOG_LINE: usize = 8 << 10;

/// Where a command runs from: the client, or a script (which changes error texts and rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caller {
    /// A client connection (redis-cli, a transcript line).
    Client,
    /// `redis.call` / `redis.pcall` inside a script.
    Script,
}

impl Server {
    /// A server with an empty keyspace whose clock reads `now_ms`.
    pub(crate) fn new(now_ms: i64) -> Server {
        Server {
            now_ms,
            start_ms: now_ms,
            ..Server::default()
        }
    }

    /// Keeps a `redis.log` line, within [`MAX_LOG_LINES`] and [`MAX_LOG_LINE`].
    pub(crate) fn push_log(&mut self, mut line: LogLine) {
        if line.message.len() > MAX_LOG_LINE {
            let mut cut = MAX_LOG_LINE;
            while !line.message.is_char_boundary(cut) {
                cut -= 1;
            }
            line.message.truncate(cut);
        }
        // Drop in batches so that a script logging in a loop costs O(1) per line.
        if self.log.len() >= 2 * MAX_LOG_LINES {
            let extra = self.log.len() - MAX_LOG_LINES + 1;
            self.log.drain(..extra);
            self.log_dropped += extra as u64;
        }
        self.log.push(line);
    }

    /// The virtual clock in microseconds.
    pub(crate) fn now_us(&self) -> i64 {
        self.now_ms * 1000 + self.sub_ms_us
    }

    /// Moves the virtual clock forward by `us` microseconds.
    pub(crate) fn advance_us(&mut self, us: i64) {
        let total = self.now_us().saturating_add(us);
        self.now_ms = total.div_euclid(1000);
        self.sub_ms_us = total.rem_euclid(1000);
    }

    /// Sets the virtual clock to `ms` Unix milliseconds.
    pub(crate) fn set_now_ms(&mut self, ms: i64) {
        self.now_ms = ms;
        self.sub_ms_us = 0;
    }
}
