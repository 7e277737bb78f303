//! Connection-setup commands that client libraries send as they connect (`CLIENT SETINFO`,
//! `CLIENT SETNAME`/`GETNAME`, `HELLO 2`, `SELECT` of the URL's database) are answered so that
//! the clients keep sharing the upstream connections.

mod common;

use common::*;
use lockkit_test_support::{connections_received, RedisServer};

const TWENTY_CLIENTS: &str = r#"
import sys, redis
port = int(sys.argv[1])
# redis-py 8 speaks RESP3 (HELLO 3) unless told otherwise: a RESP3 client has a connection of
# its own, since the shared ones speak RESP2.
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
