//! What a plugin is to the proxy: the commands it declares, its hooks and its report.
//!
//! Built-in plugins (`observe`, `faults`) implement [`Plugin`] in Rust; a `FILE.lua` plugin is
//! hosted by [`crate::lua::LuaPlugin`], which implements the same trait over the harness's
//! sandbox. A hook runs on the connection's task, so it must be quick, unless the plugin is
//! [`Plugin::offloaded`]: its hooks then run on a thread of its own while the connection that
//! caused them waits and the others go on.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The client connection a command came from.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    /// A number unique within this proxy run (1, 2, ...).
    pub id: u64,
    /// The client's address.
    pub peer: Option<SocketAddr>,
}

/// One command as a plugin sees it.
#[derive(Debug, Clone)]
pub struct PluginCommand<'a> {
    /// The command's name, upper case (`SET`).
    pub name: &'a str,
    /// Its arguments after the name, as Redis reads them (inline requests unquoted).
    pub args: &'a [&'a [u8]],
    /// Its first key, where Redis's command table puts one (`None` for a command without a
    /// key at a fixed place: `PING`, `PUBLISH`, `XREAD`; a script's first key when it has one).
    pub key: Option<&'a [u8]>,
    /// Its number on its connection: 1 for the connection's first command, then 2, ...
    pub index: u64,
    /// When the proxy read it from the client.
    pub arrived: Instant,
}

/// What to do with a command, as a plugin decides in [`Plugin::on_command`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Forward it to the upstream server.
    Pass,
    /// Do not forward it; answer the client with these bytes (one complete RESP reply).
    Reply(Vec<u8>),
    /// Forward it after this pause (the connection's later traffic waits behind it).
    Delay(Duration),
    /// Forward it not before this instant (the connection's later traffic waits behind it).
    /// Unlike [`Action::Delay`], commands read together wait for the same instant, not one
    /// after the other: this is how a slow network delays a pipeline.
    Hold(Instant),
    /// Forward it, then close the client's connection when its reply comes, without passing
    /// that reply on: the server ran the command and the client never hears of it. Later
    /// commands of the connection are not forwarded.
    LoseReply,
    /// Close the client's connection (and its upstream connection) without forwarding it.
    Close,
}

/// What a report is written from.
#[derive(Debug, Clone)]
pub struct ReportCtx {
    /// The upstream URL, password hidden.
    pub target: String,
    /// How long the proxy ran.
    pub duration: Duration,
    /// Commands seen, by upper-case name.
    pub commands: BTreeMap<String, u64>,
}

/// A plugin of the proxy.
pub trait Plugin: Send + Sync + std::fmt::Debug {
    /// Its name in logs and report file names (`observe`, `faults`, a file's stem).
    fn name(&self) -> &str;

    /// The upper-case command names it wants to see; `*` for every command. Other traffic
    /// never reaches it.
    fn commands(&self) -> Vec<String>;

    /// Whether [`Plugin::on_reply`] is wanted for this declared command (asked after
    /// [`Plugin::on_command`] passed it on). The proxy then keeps a copy of the command until its
    /// reply arrives; a command no plugin wants the reply of is forwarded and forgotten, so
    /// saying `false` for traffic a plugin ignores (a `SET` without `NX` to `observe`) keeps the
    /// hot path free of copies.
    fn wants_reply(&self, _cmd: &PluginCommand<'_>) -> bool {
        true
    }

    /// Whether [`Plugin::on_reply`] (and [`Plugin::rewrite_reply`]) read the command's
    /// arguments and key. The proxy keeps a copy of a command's arguments until its reply only
    /// for a plugin that reads them: one that counts or times commands by name alone (the
    /// built-in metrics) says `false` and is shown its replies with the name, `args` empty and
    /// `key` `None`, so a command nothing else looks at is copied nowhere.
    fn reply_reads_args(&self) -> bool {
        true
    }

    /// Whether this is the built-in command metrics: the proxy then does not route commands to
    /// it; each connection counts and times its commands itself, in batches, with the handles
    /// of [`Plugin::command_handles`].
    fn counts_commands(&self) -> bool {
        false
    }

    /// The recorder's counter and histogram of command `name`, when
    /// [`Plugin::counts_commands`].
    fn command_handles(&self, _name: &str) -> Option<(::metrics::Counter, ::metrics::Histogram)> {
        None
    }

    /// Called for each declared command before it is forwarded.
    fn on_command(&self, _conn: &ConnInfo, _cmd: &PluginCommand<'_>) -> Action {
        Action::Pass
    }

    /// Called with the reply to a declared command (one complete RESP frame) and the time from
    /// forwarding the command to reading its reply.
    fn on_reply(
        &self,
        _conn: &ConnInfo,
        _cmd: &PluginCommand<'_>,
        _reply: &[u8],
        _latency: Duration,
    ) {
    }

    /// Whether [`Plugin::rewrite_reply`] is called in place of [`Plugin::on_reply`]: the
    /// connection then waits for it before the reply goes on.
    fn rewrites_replies(&self) -> bool {
        false
    }

    /// [`Plugin::on_reply`] that may replace the reply: `Some(bytes)` (one complete RESP reply)
    /// is sent to the client instead. Only called when [`Plugin::rewrites_replies`].
    fn rewrite_reply(
        &self,
        conn: &ConnInfo,
        cmd: &PluginCommand<'_>,
        reply: &[u8],
        latency: Duration,
    ) -> Option<Vec<u8>> {
        self.on_reply(conn, cmd, reply, latency);
        None
    }

    /// Called about once a second.
    fn on_tick(&self) {}

    /// Called when a client connects, before its first command.
    fn on_connect(&self, _conn: &ConnInfo) {}

    /// Called when a client's connection is closed, after its last reply.
    fn on_close(&self, _conn: &ConnInfo) {}

    /// Whether its hooks may take long (a Lua plugin): they then run on a thread of the
    /// plugin's own, one at a time in the order they were called, never on a thread serving
    /// connections. A connection waits for the [`Plugin::on_command`] of its own command;
    /// [`Plugin::on_reply`], [`Plugin::on_tick`], [`Plugin::on_connect`] and
    /// [`Plugin::on_close`] are queued and nobody waits for them.
    fn offloaded(&self) -> bool {
        false
    }

    /// The report to write when the proxy stops: a JSON value (`None`: nothing to write).
    fn report(&self, _ctx: &ReportCtx) -> Option<serde_json::Value> {
        None
    }
}
