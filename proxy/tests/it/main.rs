//! The proxy's integration tests: one test binary (`cargo test -p lockkit-proxy --all-features
//! --test it`), one module per area, against real redis-servers, clusters and twemproxy started
//! by `tests/support`. One binary links the world once instead of once per file (issue 43); a
//! new area is a file here and a `mod` line below. `tests/health.rs` stays a binary of its own:
//! it installs the process-wide metrics recorder and reads counters that the other modules'
//! proxies would move too.
//!
//! Run one area with a filter: `cargo test -p lockkit-proxy --all-features --test it -- tls::`.

// Shared helpers (raw connections, Redis's suite, `redis-cli`).
mod common;

mod auth;
mod cluster;
mod cluster_commands;
mod cluster_failover;
mod cluster_own;
mod cluster_server;
mod cluster_suite;
mod command_table;
mod defects;
mod faults;
mod guard_example;
mod isolation;
mod lua_plugins;
mod observe;
mod observe_top;
mod passthrough;
mod protocol;
mod redis_suite;
mod replication;
mod same_replies;
mod secrets;
mod setup;
mod shared;
mod slow_client;
mod slow_plugin;
mod tls;
