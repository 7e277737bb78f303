//! Shared upstream connections in front of a real redis-server: many clients' pipelines on one
//! server connection each get exactly their own replies; a client moves to a connection of its
//! own on its first stateful command without losing the order; replies of a client that left
//! go to no one; a shared connection killed on the server fails only what was in flight on it;
//! SELECT, AUTH and ACL users stay per client; TLS and the URL's password and database hold.

use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use lockkit_proxy::{Proxy, ProxyOptions, Upstream};
use lockkit_test_support::{RedisServer, ServerOptions};

/// One command as RESP.
fn cmd(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

/// Sends `commands` in one write and checks that exactly `want` comes back.
fn expect(c: &mut TcpStream, commands: &[u8], want: &str) {
    let got = roundtrip(c, commands, want.len()).expect("replies, not a hang");
    assert_eq!(String::from_utf8_lossy(&got), want);
}

/// A server, and a proxy with one shared connection in front of it.
async fn server_and_proxy() -> (RedisServer, Proxy) {
    let server = RedisServer::start();
    let proxy = start(&server.url(), 1).await;
    (server, proxy)
}

async fn start(upstream: &str, shared_connections: usize) -> Proxy {
    let options = ProxyOptions::new().shared_connections(shared_connections);
    Proxy::start_with(
        "127.0.0.1:0",
        Upstream::from_url(upstream).expect("a valid URL"),
        vec![],
        options,
    )
    .await
    .expect("the proxy starts")
}

/// The server's client connections (one `CLIENT LIST` line each), the asking one left out.
fn server_clients(server_port: u16, args: &[&str]) -> Vec<String> {
    let out = redis_cli(server_port, args, "CLIENT LIST\n");
    out.lines()
        .filter(|l| l.starts_with("id=") && !l.contains("cmd=client|list"))
        .map(str::to_string)
        .collect()
}

/// `clients` threads, each pipelining `rounds` batches of SET/GET/INCR on keys of its own (under
/// `prefix`) with values of its own, every reply checked.
fn interleaved_pipelines(port: u16, prefix: &'static str, clients: usize, rounds: usize) {
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = raw_conn(port);
                for r in 0..rounds {
                    let mut batch = Vec::new();
                    let mut want = String::new();
                    for j in 0..10 {
                        let key = format!("{prefix}{i}:k{j}");
                        let value = format!("v{i}-{r}-{j}-{}", "x".repeat((i * 7 + j) % 40));
                        batch.extend(cmd(&["SET", &key, &value]));
                        batch.extend(cmd(&["GET", &key]));
                        want.push_str("+OK\r\n");
                        want.push_str(&bulk(&value));
                    }
                    batch.extend(cmd(&["INCR", &format!("{prefix}{i}:n")]));
                    want.push_str(&format!(":{}\r\n", r + 1));
                    expect(&mut c, &batch, &want);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("every client got exactly its own replies");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_pipelines_share_one_server_connection_and_get_their_own_replies() {
    let (server, proxy) = server_and_proxy().await;
    let (sport, port) = (server.port(), proxy.addr().port());
    // Held open while the others run: all of them on one server connection.
    let mut idle: Vec<TcpStream> = (0..10).map(|_| raw_conn(port)).collect();
    for c in &mut idle {
        expect(c, &cmd(&["PING"]), "+PONG\r\n");
    }
    tokio::task::spawn_blocking(move || interleaved_pipelines(port, "c", 20, 30))
        .await
        .unwrap();
    assert_eq!(
        server_clients(sport, &[]).len(),
        1,
        "ten clients, one shared server connection"
    );
    proxy.stop().await;

    // Sharing off: a server connection for each client.
    let proxy = start(&server.url(), 0).await;
    let port = proxy.addr().port();
    let mut own: Vec<TcpStream> = (0..10).map(|_| raw_conn(port)).collect();
    for c in &mut own {
        expect(c, &cmd(&["PING"]), "+PONG\r\n");
    }
    tokio::task::spawn_blocking(move || interleaved_pipelines(port, "own", 5, 5))
        .await
        .unwrap();
    assert_eq!(server_clients(sport, &[]).len(), 10);
    drop(own);
    drop(idle);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_moving_to_its_own_connection_mid_pipeline_keeps_its_reply_order() {
    let (_server, proxy) = server_and_proxy().await;
    let port = proxy.addr().port();
    // Other clients keep the shared connection busy meanwhile.
    let others = std::thread::spawn(move || interleaved_pipelines(port, "o", 4, 20));
    tokio::task::spawn_blocking(move || {
        // GETs on the shared connection, then a transaction in the same write.
        let mut c = raw_conn(port);
        let mut batch = Vec::new();
        let mut want = String::new();
        for j in 0..300 {
            batch.extend(cmd(&["SET", &format!("m:{j}"), &format!("val{j}")]));
            batch.extend(cmd(&["GET", &format!("m:{j}")]));
            want.push_str(&format!("+OK\r\n{}", bulk(&format!("val{j}"))));
        }
        for c in [
            &["MULTI"][..],
            &["SET", "m:t", "1"],
            &["INCR", "m:t"],
            &["EXEC"],
            &["GET", "m:t"],
        ] {
            batch.extend(cmd(c));
        }
        want.push_str("+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n:2\r\n$1\r\n2\r\n");
        expect(&mut c, &batch, &want);

        // Pipelined GETs, then a blocking pop in the same write.
        let mut c = raw_conn(port);
        let mut batch = Vec::new();
        let mut want = String::new();
        for j in 0..200 {
            batch.extend(cmd(&["GET", &format!("m:{j}")]));
            want.push_str(&bulk(&format!("val{j}")));
        }
        batch.extend(cmd(&["RPUSH", "m:q", "job"]));
        batch.extend(cmd(&["BLPOP", "m:q", "5"]));
        batch.extend(cmd(&["GET", "m:0"]));
        want.push_str(&format!(
            ":1\r\n*2\r\n{}{}{}",
            bulk("m:q"),
            bulk("job"),
            bulk("val0")
        ));
        expect(&mut c, &batch, &want);
    })
    .await
    .unwrap();
    others.join().unwrap();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_of_a_client_that_left_reach_no_one_else() {
    let (_server, proxy) = server_and_proxy().await;
    let port = proxy.addr().port();
    let big = "L".repeat(64 * 1024);
    let mut c = raw_conn(port);
    expect(&mut c, &cmd(&["SET", "leaver:big", &big]), "+OK\r\n");
    tokio::task::spawn_blocking(move || {
        let stayer = std::thread::spawn(move || interleaved_pipelines(port, "s", 4, 40));
        for _ in 0..30 {
            // 100 replies of 64 KB asked for, none read: the connection closes with them in
            // flight.
            let mut leaver = raw_conn(port);
            let gets: Vec<u8> = cmd(&["GET", "leaver:big"]).repeat(100);
            leaver.write_all(&gets).unwrap();
            drop(leaver);
        }
        stayer
            .join()
            .expect("no client got a reply of the one that left");
    })
    .await
    .unwrap();
    // The shared connection is still in step: a new client gets its own reply.
    let mut c = raw_conn(port);
    expect(&mut c, &cmd(&["ECHO", "still"]), &bulk("still"));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_shared_connection_fails_what_was_in_flight_and_the_next_command_works() {
    let (server, proxy) = server_and_proxy().await;
    let (sport, port) = (server.port(), proxy.addr().port());
    tokio::task::spawn_blocking(move || {
        let mut a = raw_conn(port);
        let mut b = raw_conn(port);
        expect(&mut a, &cmd(&["SET", "k", "before"]), "+OK\r\n");
        expect(&mut b, &cmd(&["GET", "k"]), &bulk("before"));
        // Writes wait on the server, so a's SET stays in flight on the shared connection.
        assert_eq!(
            redis_cli(sport, &["CLIENT", "PAUSE", "10000", "WRITE"], ""),
            "OK\n"
        );
        a.write_all(&cmd(&["SET", "k", "during"])).unwrap();
        let mut blocked = false;
        for _ in 0..400 {
            let info = redis_cli(sport, &["INFO", "clients"], "");
            if info.contains("blocked_clients:1") {
                blocked = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        assert!(blocked, "the SET never reached the server");
        let killed = redis_cli(
            sport,
            &[],
            "CLIENT KILL TYPE normal SKIPME yes\nCLIENT UNPAUSE\n",
        );
        assert_eq!(killed, "1\nOK\n", "exactly the shared connection");
        let got = roundtrip(&mut a, b"", 1).expect("an error reply, not a hang");
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with("-ERR lockkit proxy: connection to upstream redis://127.0.0.1:")
                && text.ends_with("\r\n"),
            "{text}"
        );
        // Both clients go on, on a new shared connection.
        expect(&mut a, &cmd(&["SET", "k", "after"]), "+OK\r\n");
        expect(&mut b, &cmd(&["GET", "k"]), &bulk("after"));
        assert_eq!(server_clients(sport, &[]).len(), 1);
    })
    .await
    .unwrap();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_on_one_client_leaves_the_others_on_their_database() {
    let (server, proxy) = server_and_proxy().await;
    let (sport, port) = (server.port(), proxy.addr().port());
    tokio::task::spawn_blocking(move || {
        let mut a = raw_conn(port);
        let mut b = raw_conn(port);
        expect(&mut a, &cmd(&["SET", "k", "a0"]), "+OK\r\n");
        expect(
            &mut a,
            &[cmd(&["SELECT", "1"]), cmd(&["SET", "k", "a1"])].concat(),
            "+OK\r\n+OK\r\n",
        );
        expect(&mut b, &cmd(&["GET", "k"]), &bulk("a0"));
        expect(&mut b, &cmd(&["SET", "k", "b0"]), "+OK\r\n");
        expect(&mut a, &cmd(&["GET", "k"]), &bulk("a1"));
        assert_eq!(redis_cli(sport, &["-n", "0", "GET", "k"], ""), "b0\n");
        assert_eq!(redis_cli(sport, &["-n", "1", "GET", "k"], ""), "a1\n");
    })
    .await
    .unwrap();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_users_stay_per_client() {
    let server = RedisServer::start();
    let sport = server.port();
    for user in ["alice", "bob"] {
        let out = redis_cli(
            sport,
            &[
                "ACL",
                "SETUSER",
                user,
                "on",
                &format!(">{user}-pw"),
                &format!("~{user}:*"),
                "+@all",
            ],
            "",
        );
        assert_eq!(out, "OK\n");
    }
    let proxy = start(&server.url(), 1).await;
    let port = proxy.addr().port();
    let open = tokio::task::spawn_blocking(move || {
        let mut alice = raw_conn(port);
        let mut bob = raw_conn(port);
        let mut anyone = raw_conn(port);
        // Before AUTH, on the shared connection as the URL's (default) user.
        expect(&mut alice, &cmd(&["SET", "bob:x", "1"]), "+OK\r\n");
        expect(
            &mut alice,
            &[
                cmd(&["AUTH", "alice", "alice-pw"]),
                cmd(&["SET", "alice:x", "a"]),
            ]
            .concat(),
            "+OK\r\n+OK\r\n",
        );
        expect(&mut bob, &cmd(&["AUTH", "bob", "bob-pw"]), "+OK\r\n");
        let got = roundtrip(&mut alice, &cmd(&["GET", "bob:x"]), 1).unwrap();
        assert!(
            got.starts_with(b"-NOPERM"),
            "{}",
            String::from_utf8_lossy(&got)
        );
        let got = roundtrip(&mut bob, &cmd(&["GET", "alice:x"]), 1).unwrap();
        assert!(
            got.starts_with(b"-NOPERM"),
            "{}",
            String::from_utf8_lossy(&got)
        );
        expect(&mut bob, &cmd(&["GET", "bob:x"]), &bulk("1"));
        expect(&mut anyone, &cmd(&["GET", "alice:x"]), &bulk("a"));
        expect(&mut alice, &cmd(&["ACL", "WHOAMI"]), &bulk("alice"));
        expect(&mut anyone, &cmd(&["ACL", "WHOAMI"]), &bulk("default"));
        [alice, bob, anyone]
    })
    .await
    .unwrap();
    let users: Vec<String> = server_clients(sport, &[])
        .iter()
        .filter_map(|l| {
            l.split(" user=")
                .nth(1)?
                .split(' ')
                .next()
                .map(str::to_string)
        })
        .collect();
    let mut users = users;
    users.sort();
    // alice, bob and `anyone` (moved by ACL WHOAMI) on connections of their own, and the
    // shared one.
    assert_eq!(users, ["alice", "bob", "default", "default"], "{users:?}");
    drop(open);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_connections_log_in_over_tls_with_the_urls_password_and_database() {
    let tmp = tempfile::Builder::new()
        .prefix("lockkit-proxy-tls-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    let status = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "ca.crt",
        ])
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl runs");
    assert!(status.success());
    // Self-signed: the certificate is its own CA.
    std::fs::copy(dir.join("ca.crt"), dir.join("server.crt")).unwrap();
    let tls_port = lockkit_test_support::free_port().unwrap();
    let mut args = lockkit_test_support::tls_args(tls_port, dir);
    args.extend(["--requirepass".into(), "s3cret".into()]);
    let server = RedisServer::start_with(ServerOptions {
        extra_args: args,
        password: Some("s3cret".into()),
        ..ServerOptions::default()
    });
    let url = format!("rediss://:s3cret@127.0.0.1:{tls_port}/3#insecure");
    let proxy = start(&url, 1).await;
    let port = proxy.addr().port();
    tokio::task::spawn_blocking(move || interleaved_pipelines(port, "c", 8, 10))
        .await
        .unwrap();
    let sport = server.port();
    let auth = ["--no-auth-warning", "-a", "s3cret"];
    assert_eq!(
        redis_cli(
            sport,
            &[&auth[..], &["-n", "3", "GET", "c7:n"]].concat(),
            ""
        ),
        "10\n"
    );
    assert_eq!(
        redis_cli(sport, &[&auth[..], &["-n", "0", "DBSIZE"]].concat(), ""),
        "0\n"
    );
    let clients = server_clients(sport, &auth);
    assert_eq!(clients.len(), 1, "{clients:?}");
    assert!(clients[0].contains(" db=3 "), "{clients:?}");
    proxy.stop().await;
}
