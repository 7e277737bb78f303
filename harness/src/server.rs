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
pub struct Server {
    /// Database 0.
    pub db: Db,
    /// The virtual clock: Unix time in milliseconds. Frozen unless advanced.
    pub now_ms: i64,
    /// Microseconds past `now_ms` (DEBUG SLEEP and TIME have microsecond resolution).
    pub sub_ms_us: i64,
    /// Lines written by `redis.log`.
    pub log: Vec<LogLine>,
}

/// Where a command runs from: the client, or a script (which changes error texts and rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A client connection (redis-cli, a transcript line).
    Client,
    /// `redis.call` / `redis.pcall` inside a script.
    Script,
}

impl Server {
    /// A server with an empty keyspace whose clock reads `now_ms`.
    pub fn new(now_ms: i64) -> Server {
        Server {
            now_ms,
            ..Server::default()
        }
    }

    /// The virtual clock in microseconds.
    pub fn now_us(&self) -> i64 {
        self.now_ms * 1000 + self.sub_ms_us
    }

    /// Moves the virtual clock forward by `us` microseconds.
    pub fn advance_us(&mut self, us: i64) {
        let total = self.now_us().saturating_add(us);
        self.now_ms = total.div_euclid(1000);
        self.sub_ms_us = total.rem_euclid(1000);
    }

    /// Sets the virtual clock to `ms` Unix milliseconds.
    pub fn set_now_ms(&mut self, ms: i64) {
        self.now_ms = ms;
        self.sub_ms_us = 0;
    }
}
