//! The `lockkit` command's integration tests: one test binary (`cargo test -p lockkit-cli
//! --all-features --test it`), one module per area, running the built `lockkit` (and the load
//! generator in process) against real servers that `tests/support` starts. One binary links the
//! world once instead of once per file (issue 43); a new area is a file here and a `mod` line
//! below.
//!
//! Run one area with a filter: `cargo test -p lockkit-cli --test it -- bad_input::`.

// Shared helpers: running `lockkit`, `lua serve`, the client libraries' installs.
mod common;

// The options as `lockkit bench` parses them, and its fault-injecting proxy: the binary's own
// files, compiled in here once (the load generator itself takes a plain config).
#[path = "../../src/bench_args.rs"]
mod bench_args;
#[path = "../../src/bench_faults.rs"]
mod bench_faults_src;

mod bad_input;
mod bench_fault_schedule;
mod bench_faults;
mod bench_modes;
mod bench_primitives;
mod bench_runs;
mod bench_server_faults;
mod bench_smoke;
mod lua_cli;
mod lua_serve;
mod lua_serve_acl;
mod lua_serve_blocking;
mod lua_serve_clients;
mod lua_serve_cluster;
mod lua_serve_command;
mod lua_serve_libraries;
mod lua_serve_node_locks;
mod lua_serve_notify;
mod lua_serve_oom;
mod lua_serve_pubsub;
mod lua_serve_python_apps;
mod lua_serve_python_queues;
mod lua_serve_resp3_types;
mod lua_serve_speed;
mod lua_serve_streams;
mod lua_serve_strict_keys;
mod lua_serve_watch;
mod proxy_cli;
mod proxy_cluster;
mod proxy_limits;
mod proxy_memory;
mod proxy_ops;
mod proxy_reload;
mod readme;
mod report_browser;
mod sandbox;
mod sandbox_functions;
mod sandbox_holds;
mod sandbox_plugins;
mod sandbox_third;
mod secrets;
