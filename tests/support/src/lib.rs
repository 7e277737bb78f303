//! Test-only helpers for lockkit's real-server tests.
//!
//! The servers themselves come from [`lockkit_redis_proc`] (re-exported here, so a test writes
//! `use lockkit_test_support::RedisServer`): that crate is what `lockkit bench` uses at run time
//! too, while this one holds what only tests need, such as [`DelayRelay`], a slow network
//! between a client and a real server. Nothing here is a dependency of the `lockkit` binary.

mod python;
mod relay;

pub use lockkit_redis_proc::{
    free_port, Nutcracker, RedisCluster, RedisServer, ServerOptions, StartError,
};
pub use python::python_with_redis;
pub use relay::DelayRelay;

/// How many connections `server` has accepted since it started, from `INFO stats`
/// (`total_connections_received`; the connection that asks is counted too): connects a client
/// made, even those it gave up on before the server answered (a frozen server accepts them
/// once it runs again, before it reads the question).
///
/// # Panics
/// The server does not answer, or its reply has no such field.
pub fn connections_received(server: &RedisServer) -> u64 {
    let info = server
        .inline("INFO stats")
        .unwrap_or_else(|e| panic!("INFO stats: {e}"));
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total_connections_received in {info:?}"))
}

/// Freezes `server` (SIGSTOP), makes `calls` calls one after another (`call(i)`), each dropped
/// once it has taken `give_up`, and lets the server run again. Returns how many calls were
/// dropped and how many connections the server accepted meanwhile ([`connections_received`],
/// the question itself not counted): the connects the calls made to a server that never
/// answered them.
///
/// # Panics
/// The server cannot be frozen, resumed or asked.
pub async fn connects_while_frozen<F: std::future::Future>(
    server: &RedisServer,
    calls: u64,
    give_up: std::time::Duration,
    mut call: impl FnMut(u64) -> F,
) -> (u64, u64) {
    let before = connections_received(server);
    server.pause().unwrap_or_else(|e| panic!("SIGSTOP: {e}"));
    let mut dropped = 0;
    for i in 0..calls {
        if tokio::time::timeout(give_up, call(i)).await.is_err() {
            dropped += 1;
        }
    }
    server.resume().unwrap_or_else(|e| panic!("SIGCONT: {e}"));
    // Accepted in order: the connects made while frozen, before this question.
    let connects = connections_received(server) - before - 1;
    (dropped, connects)
}

/// The `redis-server` arguments that serve TLS on `tls_port` with `dir`'s `server.crt`,
/// `server.key` and `ca.crt`, not asking clients for a certificate (the plain port stays open
/// too).
pub fn tls_args(tls_port: u16, dir: &std::path::Path) -> Vec<String> {
    let p = |f: &str| dir.join(f).display().to_string();
    vec![
        "--tls-port".into(),
        tls_port.to_string(),
        "--tls-cert-file".into(),
        p("server.crt"),
        "--tls-key-file".into(),
        p("server.key"),
        "--tls-ca-cert-file".into(),
        p("ca.crt"),
        "--tls-auth-clients".into(),
        "no".into(),
    ]
}
