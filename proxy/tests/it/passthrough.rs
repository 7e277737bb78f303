//! redis-cli and raw clients through the proxy in front of a real redis-server: transactions,
//! blocking commands, pub/sub, AUTH, RESP3, pipelining, an upstream that goes away, a slow
//! client.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use lockkit_test_support::{RedisServer, ServerOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_exec_blpop_and_hello_3_pass_through_redis_cli() {
    let server = RedisServer::start();
    let proxy = start_proxy(&server.url(), vec![]).await;
    let port = proxy.addr().port();
    let out = redis_cli(port, &[], "MULTI\nSET a 1\nINCR a\nEXEC\nGET a\n");
    assert_eq!(out, "OK\nQUEUED\nQUEUED\nOK\n2\n2\n", "{out}");
    // BLPOP waits on the upstream connection and wakes up when another client pushes.
    let waiter = std::thread::spawn(move || redis_cli(port, &["BLPOP", "jobs", "10"], ""));
    for _ in 0..200 {
        if redis_cli(port, &["CLIENT", "LIST"], "").contains("cmd=blpop") {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(redis_cli(port, &["LPUSH", "jobs", "j1"], ""), "1\n");
    assert_eq!(waiter.join().unwrap(), "jobs\nj1\n");
    let out = redis_cli(port, &[], "HELLO 3\nHSET h f 1\nHGETALL h\n");
    // redis-cli prints a RESP3 map as `key value` lines.
    assert!(out.contains("proto 3\n"), "{out}");
    assert!(out.ends_with("1\nf 1\n"), "{out}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_receives_what_is_published_through_the_proxy() {
    let server = RedisServer::start();
    let proxy = start_proxy(&server.url(), vec![]).await;
    let port = proxy.addr().port();
    let mut sub = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "SUBSCRIBE", "news"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli runs");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = sub.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut receivers = String::new();
    for _ in 0..100 {
        receivers = redis_cli(port, &["PUBLISH", "news", "hello"], "");
        if receivers.trim() == "1" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(receivers.trim(), "1", "the subscriber never subscribed");
    let mut lines = Vec::new();
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(10)) {
        let done = l == "hello";
        lines.push(l);
        if done {
            break;
        }
    }
    let _ = sub.kill();
    let _ = sub.wait();
    assert_eq!(
        lines,
        ["subscribe", "news", "1", "message", "news", "hello"]
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_passes_through_and_the_url_password_logs_the_proxy_in() {
    let server = RedisServer::start_with(ServerOptions {
        extra_args: vec!["--requirepass".into(), "s3cret".into()],
        password: Some("s3cret".into()),
        ..ServerOptions::default()
    });
    let plain = format!("redis://127.0.0.1:{}", server.port());
    let proxy = start_proxy(&plain, vec![]).await;
    let port = proxy.addr().port();
    assert!(redis_cli(port, &["PING"], "").contains("NOAUTH"));
    let out = redis_cli(port, &["--no-auth-warning", "-a", "s3cret", "PING"], "");
    assert_eq!(out, "PONG\n");
    let out = redis_cli(port, &[], "AUTH wrong\nAUTH s3cret\nPING\n");
    assert!(
        out.contains("WRONGPASS") && out.ends_with("OK\nPONG\n"),
        "{out}"
    );
    proxy.stop().await;

    let auth = ["--no-auth-warning", "-a", "s3cret"];
    redis_cli(server.port(), &auth, "CONFIG RESETSTAT\n");
    let with_password = format!("redis://:s3cret@127.0.0.1:{}/2", server.port());
    let proxy = start_proxy(&with_password, vec![]).await;
    let port = proxy.addr().port();
    let out = redis_cli(port, &[], "PING\nSET k v\nCLIENT INFO\n");
    assert!(out.starts_with("PONG\nOK\n"), "{out}");
    assert!(
        out.contains(" db=2 "),
        "the URL's database is selected: {out}"
    );
    // The proxy names no library upstream: no `CLIENT SETINFO` (which a server before 7.2
    // refuses, counting an error), no `lib-name`.
    assert!(!out.contains("lib-name=redis-rs"), "{out}");
    let errors = redis_cli(server.port(), &auth, "INFO errorstats\n");
    assert!(!errors.contains("errorstat_"), "{errors}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_commands_get_their_replies_in_order() {
    let server = RedisServer::start();
    let proxy = start_proxy(&server.url(), vec![]).await;
    let mut c = raw_conn(proxy.addr().port());
    let mut batch = Vec::new();
    let mut want = Vec::new();
    for i in 0..500 {
        batch.extend_from_slice(b"*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n");
        want.extend_from_slice(format!(":{}\r\n", i + 1).as_bytes());
        // An inline command in the middle, as telnet sends it.
        if i == 250 {
            batch.extend_from_slice(b"PING\r\n");
            want.extend_from_slice(b"+PONG\r\n");
        }
    }
    let got = roundtrip(&mut c, &batch, want.len()).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_goes_away_closes_clients_or_answers_an_error() {
    let mut server = RedisServer::start();
    let proxy = start_proxy(&server.url(), vec![]).await;
    let port = proxy.addr().port();
    let mut c = raw_conn(port);
    assert_eq!(roundtrip(&mut c, b"PING\r\n", 7).unwrap(), b"+PONG\r\n");
    server.kill();
    // The open connection gets an error reply naming the upstream, or is closed (end of
    // stream or a reset), never left hanging: the read timeout of raw_conn turns a hang into a
    // failure.
    match roundtrip(&mut c, b"PING\r\n", 1) {
        Ok(got) => assert!(
            got.is_empty() || got.starts_with(b"-ERR lockkit proxy: "),
            "{}",
            String::from_utf8_lossy(&got)
        ),
        Err(e) => assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "hung: {e}"),
    }
    // A new client gets one error reply naming the upstream, then the connection closes.
    let mut c = raw_conn(port);
    let got = roundtrip(&mut c, b"PING\r\n", 1 << 20).unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("-ERR lockkit proxy: upstream redis://127.0.0.1:"),
        "{text}"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_holds_up_nobody_else() {
    let server = RedisServer::start();
    let proxy = start_proxy(&server.url(), vec![]).await;
    let port = proxy.addr().port();
    let mut slow = raw_conn(port);
    let big = "x".repeat(1 << 20);
    let set = format!(
        "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${}\r\n{big}\r\n",
        big.len()
    );
    assert_eq!(roundtrip(&mut slow, set.as_bytes(), 5).unwrap(), b"+OK\r\n");
    // 64 MB of replies that this client never reads.
    let gets = "*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n".repeat(64);
    slow.write_all(gets.as_bytes()).unwrap();
    for i in 0..50 {
        let mut other = raw_conn(port);
        let echo = format!("*2\r\n$4\r\nECHO\r\n$3\r\n{i:03}\r\n");
        let got = roundtrip(&mut other, echo.as_bytes(), 9).unwrap();
        assert_eq!(got, format!("$3\r\n{i:03}\r\n").as_bytes());
    }
    drop(slow);
    proxy.stop().await;
}
