//! examples/plugins/guard.lua against the ways around it (issue 31): `FLUSHALL` queued inside
//! `MULTI` ran at `EXEC` although the guard's header said it is never forwarded, and a script's
//! body calls what it likes on the server.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use lockkit_proxy::lua::LuaPlugin;
use lockkit_proxy::{Plugin, Proxy};
use lockkit_test_support::RedisServer;

fn guard_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/plugins/guard.lua")
}

/// A real server behind a proxy running the guard (KEYS not delayed), and the proxy's port.
async fn guarded() -> (RedisServer, Arc<LuaPlugin>, Proxy, u16) {
    let server = RedisServer::start();
    let guard = Arc::new(LuaPlugin::load(&guard_file(), "0").unwrap());
    let proxy = start_proxy(&server.url(), vec![guard.clone()]).await;
    let port = proxy.addr().port();
    (server, guard, proxy, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_example_holds_inside_multi_exec() {
    let (_server, guard, proxy, port) = guarded().await;
    assert_eq!(redis_cli(port, &[], "SET k v\n"), "OK\n");
    // Inside MULTI the proxy cannot answer for the server (the client waits for QUEUED): the
    // guard closes the connection instead, and the server drops the transaction with it.
    let mut c = raw_conn(port);
    let got = roundtrip(
        &mut c,
        b"MULTI\r\nSET k2 v2\r\nFLUSHALL\r\nEXEC\r\n",
        usize::MAX,
    )
    .unwrap_or_default();
    let got = String::from_utf8_lossy(&got).into_owned();
    assert!(!got.contains("*2\r\n"), "EXEC ran: {got:?}");
    assert_eq!(
        redis_cli(port, &["--no-raw"], "GET k\nEXISTS k2\n"),
        "\"v\"\n(integer) 0\n",
        "the transaction never ran ({got:?})"
    );
    // A transaction without a refused command passes, and the guard forgets the closed one.
    assert_eq!(
        redis_cli(port, &[], "MULTI\nSET a 1\nEXEC\nFLUSHDB\nGET a\n"),
        "OK\nQUEUED\nOK\nERR FLUSHDB is refused by the proxy's guard plugin\n\n1\n"
    );
    let ctx = proxy.stop().await;
    let report = guard.report(&ctx).expect("a Lua plugin always reports");
    assert_eq!(report["report"]["refused"]["FLUSHALL"], 1, "{report:#}");
    assert_eq!(report["report"]["refused"]["FLUSHDB"], 1, "{report:#}");
    assert_eq!(report["faults"], 0, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_example_says_that_scripts_get_past_it() {
    // A script's body runs on the server: the guard sees `EVAL`, never the FLUSHALL inside
    // (and an EVALSHA or FCALL does not even carry the body). The example says so, and names
    // the server-side protection that does hold.
    let (_server, _guard, proxy, port) = guarded().await;
    let out = redis_cli(
        port,
        &[],
        "SET k v\nEVAL \"return redis.call('FLUSHALL')\" 0\nEXISTS k\n",
    );
    proxy.stop().await;
    assert_eq!(out, "OK\nOK\n0\n");
    let text = std::fs::read_to_string(guard_file()).unwrap();
    let header: String = text
        .lines()
        .take_while(|l| l.starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    for needed in ["EVAL", "FCALL", "ACL SETUSER", "MULTI"] {
        assert!(
            header.contains(needed),
            "the header names {needed}:\n{header}"
        );
    }
}
