//! Connection-setup commands that client libraries send as they connect (`CLIENT SETINFO`,
//! `CLIENT SETNAME`/`GETNAME`, `HELLO 2`, `SELECT` of the URL's database) are answered so that
//! the clients keep sharing the upstream connections.

use crate::common;

use std::io::Write;

use common::*;
use lockkit_test_support::{connections_received, RedisServer};

const TWENTY_CLIENTS: &str = r#"
import sys, redis
port = int(sys.argv[1])
# RESP2 here; RESP3 clients (redis-py 8's default) share too, on shared connections of their
# protocol (tests/it/isolation.rs).
clients = [redis.Redis(host="127.0.0.1", port=port, protocol=2, client_name=f"app{i}") for i in range(20)]
for i, c in enumerate(clients):
    c.set(f"k{i}", i)
for i, c in enumerate(clients):
    assert int(c.get(f"k{i}")) == i
    assert c.client_getname() in (f"app{i}", f"app{i}".encode()), c.client_getname()
    assert c.execute_command("SELECT", 0) in (True, b"OK", "OK")
print("ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_redis_py_clients_share_a_handful_of_upstream_connections() {
    let server = RedisServer::start();
    let proxy = start_proxy(&server.url(), vec![]).await;
    let before = connections_received(&server);
    let port = proxy.addr().port().to_string();
    assert_eq!(run_python(TWENTY_CLIENTS, &[&port]).await, "ok\n");
    // Those the proxy opened (the one asking is not counted).
    let opened = connections_received(&server) - before - 1;
    assert!(opened <= 2, "20 clients made {opened} upstream connections");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_set_while_shared_follows_the_client_to_its_own_connection() {
    let server = RedisServer::start();
    let proxy = start_proxy(&server.url(), vec![]).await;
    let port = proxy.addr().port();
    let out = redis_cli(
        port,
        &[],
        "CLIENT SETINFO LIB-NAME lockkit-test\nCLIENT SETNAME app7\nCLIENT GETNAME\nSELECT 0\nHELLO 2\nMULTI\nEXEC\nCLIENT GETNAME\nCLIENT INFO\n",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..4], ["OK", "OK", "app7", "OK"], "{out}");
    assert!(out.contains("proto\n2\n"), "HELLO 2 answered: {out}");
    assert!(
        out.contains("OK\n\napp7\n"),
        "MULTI, EXEC, then the name: {out}"
    );
    assert!(out.contains(" name=app7 "), "set upstream too: {out}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resp3_client_keeps_its_protocol_as_it_moves_and_reset_brings_back_resp2() {
    let server = RedisServer::start();
    let proxy = start_proxy(&server.url(), vec![]).await;
    let port = proxy.addr().port();
    tokio::task::spawn_blocking(move || {
        let mut c = raw_conn(port);
        let mut r = Replies::default();
        let mut ask = |args: &[&str]| {
            c.write_all(&cmd(args)).unwrap();
            String::from_utf8_lossy(&r.next(&mut c).unwrap()).into_owned()
        };
        assert!(ask(&["HELLO", "3", "SETNAME", "r3"]).contains("proto\r\n:3\r\n"));
        // On the shared connections of RESP3: a RESP3 null.
        assert_eq!(ask(&["GET", "setup:none"]), "_\r\n");
        assert_eq!(ask(&["CLIENT", "GETNAME"]), "$2\r\nr3\r\n");
        // A transaction moves it to a connection of its own, in RESP3, named.
        assert_eq!(ask(&["MULTI"]), "+OK\r\n");
        assert_eq!(ask(&["GET", "setup:none"]), "+QUEUED\r\n");
        assert_eq!(ask(&["EXEC"]), "*1\r\n_\r\n");
        assert_eq!(ask(&["CLIENT", "GETNAME"]), "$2\r\nr3\r\n");
        assert!(ask(&["CLIENT", "INFO"]).contains(" resp=3"));
        // RESET: back to RESP2 and the shared connections, as a new client.
        assert_eq!(ask(&["RESET"]), "+RESET\r\n");
        assert_eq!(ask(&["GET", "setup:none"]), "$-1\r\n");
        assert_eq!(ask(&["CLIENT", "GETNAME"]), "$-1\r\n");
        // And to RESP3 again, then RESP2, both shared.
        assert!(ask(&["HELLO", "3"]).starts_with("%7\r\n"));
        assert_eq!(ask(&["GET", "setup:none"]), "_\r\n");
        assert!(ask(&["HELLO", "2"]).starts_with("*14\r\n"));
        assert_eq!(ask(&["GET", "setup:none"]), "$-1\r\n");
    })
    .await
    .unwrap();
    proxy.stop().await;
}
