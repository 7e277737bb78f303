//! `lockkit-harness`: Redis 7.0's Lua scripting, emulated offline on mlua's vendored Lua 5.1,
//! so that Redis scripts are unit-tested without a server — and proven against a real one.
//!
//! ```
//! use lockkit_harness::{Harness, Reply};
//! use std::time::Duration;
//!
//! let mut h = Harness::new().unwrap();
//! let release = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../lua/release.lua")).unwrap();
//! let sha = h.script_load(release.as_bytes()).unwrap();
//! h.set_with_ttl("lock:a", "tok-1", Duration::from_secs(5));
//! assert_eq!(h.evalsha(&sha, &["lock:a"], &["tok-2"]), Reply::Int(-1));
//! assert_eq!(h.evalsha(&sha, &["lock:a"], &["tok-1"]), Reply::Int(1));
//! assert_eq!(h.evalsha(&sha, &["lock:a"], &["tok-1"]), Reply::Int(0));
//! ```
//!
//! What is emulated, what is not, and how fidelity is checked: see `docs/HARNESS.md`.
//!
//! # Layout
//! - **The engine** (the modules at the root): the Lua environment (`script`, `scripting`),
//!   Redis's commands (`commands`), the keyspace and clock ([`keyspace`], `server`), number
//!   formatting ([`number`]), and the [`Harness`] API over them. It never touches a file, a
//!   terminal or a network.
//! - **The tooling** ([`tooling`]): redis-cli command lines and output, transcript files, a
//!   real server as a reply source, and the runner behind `lockkit lua`.
//! - **The server** (`serve`, feature `serve`, on tokio): the engine as a RESP2/RESP3 server,
//!   `lockkit lua serve`; in-process users build the crate without tokio.
//!
//! # Errors
//! Commands and scripts never fail in Rust: they answer a [`Reply::Error`] with Redis's exact
//! text. Only setting up a harness and reading files return [`HarnessError`].
//!
//! # Limitations and caveats
//! - Read-only globals are emulated with proxy tables: `rawset(_G, ...)`, `setmetatable(_G,...)`
//!   and writes are refused with Redis's messages, but `#` and `ipairs` on `_G` or a library
//!   table see an empty proxy.
//! - `cjson` configuration functions and `cmsgpack.unpack_one`/`unpack_limit` fail with an error
//!   naming them.
//! - `INCRBYFLOAT` is exact (like Redis's `long double`) while results stay below 64 in
//!   magnitude; beyond that the last of 17 decimals may differ from Redis.
//! - Hashes keep insertion order (Redis's listpack encoding, up to 128 fields); larger Redis
//!   hashes switch to an unordered dict and HGETALL order then differs.
//! - The time limit stops a runaway script with an error; Redis would keep it running and
//!   answer BUSY until `SCRIPT KILL` (the `serve` server answers BUSY and SCRIPT KILL, and
//!   stops the script at its own longer limit).

// The engine: Redis's scripting environment, its commands and its keyspace.
mod bignum;
mod command_stats;
mod commands;
mod decimal;
mod eviction;
mod function_admin;
mod harness;
pub mod keyspace;
#[cfg_attr(not(feature = "serve"), allow(dead_code))]
mod notify;
pub mod number;
mod reply;
mod sandbox;
mod script;
mod scripting;
mod server;

// The RESP server over the engine (`lockkit lua serve`), with tokio behind the `serve` feature.
#[cfg(feature = "serve")]
pub mod serve;

// The tooling: command lines, transcripts, redis-cli output, a real server, the runner.
pub mod tooling;
// The engine splits shebang flags and library metadata with redis's own `sdssplitargs`,
// which lives with the command-line tooling.
use tooling::cmdline;

pub use commands::{command_table, is_redis_command, CommandInfo};
pub use harness::{Harness, HarnessError, HarnessOptions, KeySnapshot, DEFAULT_KEYSPACE_LIMIT};
pub use reply::Reply;
pub use sandbox::{Sandbox, SandboxError};
pub use script::{sha1hex, FunctionInfo, FunctionLibrary, StopHandle, StopRefused, REDIS_VERSION};
pub use server::LogLine;
