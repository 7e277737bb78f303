//! `lockkit-proxy`: the RESP pass-through proxy behind `lockkit proxy`, and its plugins.
//!
//! An application talks to the proxy as to its Redis. The proxy reads each request once,
//! exactly as redis-server 7.0.15 reads it (`lockkit_resp`, the workspace's one request
//! parser: where a request ends, its arguments, its protocol error), classifies it once from
//! Redis 7.0's command table, and every decision reads that one classification: the login,
//! the answers of the proxy's own, the scrubbing of secrets, the upstream connection it goes
//! on, the plugins. A request is forwarded as the very bytes read when they are its plain
//! encoding, re-encoded otherwise; a request of no command is dropped (Redis answers it
//! nothing); a malformed one gets Redis's own protocol error and the connection closes.
//!
//! The commands that mean the same on any connection share a few upstream connections
//! ([`ProxyOptions::shared_connections`], one set per protocol, so RESP2 and RESP3 clients both
//! share), written back to back so the server reads them in batches, each reply handed back to
//! its client in order; a client moves to an upstream connection of its own on its first
//! command whose meaning depends on the connection, so MULTI/EXEC, blocking commands, pub/sub,
//! `SELECT`, `CLIENT` and `AUTH` keep their meaning. Pipelined commands stay pipelined. A command
//! that gets no reply from Redis never reaches a shared connection.
//!
//! When the upstream is a Redis Cluster node (`INFO cluster`, asked at start, of the upstream
//! and then of [`ProxyOptions::seeds`]), each command goes to the master owning its keys'
//! slot and clients see one standalone server: redirections are followed inside, multi-key
//! commands over several slots are split and merged or answered `-CROSSSLOT`, server-wide
//! commands go to every master (`cluster`).
//!
//! Clients may have to log in at the proxy ([`ClientAuth`], [`ProxyOptions::client_auth`]:
//! Redis's refusals of unknown commands and wrong arities first, as Redis gives them, then
//! `-NOAUTH` before `AUTH`; every proxy user reaches the upstream as the URL's user), the
//! listener may serve TLS ([`ListenerTls`]), and `lockkit proxy` refuses a non-loopback listener
//! without client authentication (protected mode, checked by the binary). No reply through the
//! proxy holds the upstream's secrets: every `CONFIG GET` reply (in either protocol, inside
//! `EXEC` too) has `requirepass`, `masterauth` and the TLS key passphrases blanked, and any
//! value equal to the URL's password.
//!
//! Plugins ([`Plugin`]):
//! - [`observe`]: recognises lock traffic and measures how long the application really holds
//!   its locks, per key pattern, and writes `observe-<date>.json` (schema `lockkit.observe/1`);
//! - [`faults`]: network faults (delay with jitter, dropped connections, blackhole windows),
//!   seeded so that a run repeats;
//! - `FILE.lua`: a Lua plugin on the harness's sandbox ([`lua::LuaPlugin`]).
//!
//! The same `faults` plugin carries out `lockkit bench --faults delay=...,drop=...,blackhole=...`
//! (the `lockkit` binary starts one proxy per node, in-process, between the load generator and
//! it).
//!
//! For a proxy that runs for days: every upstream request has an operation timeout
//! ([`ProxyOptions::op_timeout`]; a silent connection is given up and its commands answered with
//! an error), plain TCP upstream connections have keepalive and `TCP_USER_TIMEOUT` ([`sock`]),
//! [`Proxy::stop`] drains (every forwarded command gets its reply, up to
//! [`ProxyOptions::drain_timeout`]), reports are written while it runs too ([`snapshot`]),
//! [`metrics`] serves Prometheus text, and a Lua plugin's hooks run on a thread of the plugin's
//! own ([`Plugin::offloaded`]), off the clients' path.
//!
//! ```no_run
//! use std::sync::Arc;
//! use lockkit_proxy::{observe::{Observe, ObserveOptions}, Plugin, Proxy, Upstream};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let observe = Arc::new(Observe::new(ObserveOptions::default()));
//! let plugins: Vec<Arc<dyn Plugin>> = vec![observe.clone()];
//! let proxy = Proxy::start("127.0.0.1:0", Upstream::from_url("redis://127.0.0.1:6379")?, plugins).await?;
//! println!("point the application at {}", proxy.addr());
//! // ... traffic ...
//! let ctx = proxy.stop().await;
//! println!("{}", observe.report(&ctx).unwrap());
//! # Ok(()) }
//! ```
//!
//! # Errors
//! Starting fails when the address cannot be bound. A client whose upstream connection cannot
//! be made gets an error reply (`-ERR lockkit proxy: upstream ... unusable: ...`) and is
//! closed. When a client's own upstream connection goes away later, the client is closed; when
//! a shared one does, each command in flight on it gets an error reply (it may or may not have
//! run) and the next command opens a new shared connection.
//!
//! # Limitations and caveats
//! - Replies are matched to commands only while they pair one-to-one: after SUBSCRIBE,
//!   PSUBSCRIBE, SSUBSCRIBE, MONITOR, SYNC/PSYNC, REPLCONF or SCRIPT DEBUG YES|SYNC, the
//!   connection's bytes still flow but plugins no longer see its replies and cannot answer in
//!   its place (`CONFIG GET` of a pattern is refused there: its reply could not be found to
//!   scrub). `CLIENT REPLY OFF|SKIP|ON` is carried out by the proxy, so replies keep pairing.
//! - A plugin's answer of its own is not used inside MULTI (the client waits for QUEUED).
//! - One frame is held whole in memory before it is forwarded: memory per connection is the
//!   largest command or reply in flight (plus 16 KB), not a fixed bound. A client that does not
//!   read its replies is pushed back: its connection reads nothing more from it (nor from its
//!   own upstream connection) until its replies can be written. On a shared connection the
//!   replies held for one client are bounded in bytes (32 MiB, or
//!   [`ProxyOptions::output_buffer_limit`]): past it the shared connection waits for that
//!   client, which is closed after the operation timeout if it takes none of them
//!   ([`ProxyOptions::maxmemory_clients`] caps all clients' together).
//! - `CLIENT SETINFO`, `CLIENT SETNAME`/`GETNAME`, `HELLO [2|3]` and `SELECT` of the URL's
//!   database are answered so that a client keeps sharing.
//! - In front of a Redis Cluster ([`ProxyOptions::seeds`], detected at start) the commands
//!   that need a connection of the client's own (transactions, blocking commands, pub/sub)
//!   are refused.

mod auth;
mod client;
mod cluster;
mod durations;
pub mod faults;
mod health;
pub mod lua;
pub mod metrics;
pub mod observe;
mod offload;
mod options;
mod plugin;
pub mod resp;
mod server;
mod shared;
pub mod snapshot;
pub mod sock;
pub mod tls;
mod upstream;

pub use auth::ClientAuth;
pub use health::{DEFAULT_DRAIN_TIMEOUT, DEFAULT_OP_TIMEOUT};
pub use options::{
    ProxyOptions, DEFAULT_LOGIN_TIMEOUT, DEFAULT_MAX_CLIENTS, DEFAULT_QUERY_BUFFER_LIMIT,
    DEFAULT_SHARED_CONNECTIONS, DEFAULT_SLOW_TIMEOUT,
};
pub use plugin::{Action, ConnInfo, Plugin, PluginCommand, ReportCtx};
pub use server::Proxy;
pub use shared::ProxyShared;
pub use tls::ListenerTls;
pub use upstream::{Upstream, CONNECT_TIMEOUT};
