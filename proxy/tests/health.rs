//! Upstream health against a real redis-server behind a loopback relay that goes silent (no
//! FIN, no RST: its connections stay open and what the proxy sends is lost), as a server that
//! vanished behind a dead network path does: the clients whose commands were on a silent
//! connection get an error reply within the operation timeout, never a hang, and succeed again
//! on a new connection once the path is back; a blocking command longer than the timeout is not
//! cut.

#[path = "it/common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::raw_conn;
use lockkit_proxy::{Proxy, ProxyOptions, Upstream};
use lockkit_test_support::{DelayRelay, RedisServer};

fn cmd(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// Sends one command and reads one line of reply (the tests' replies are one line); "" when the
/// proxy closed the connection.
fn ask(c: &mut TcpStream, args: &[&str]) -> String {
    if c.write_all(&cmd(args)).is_err() {
        return String::new();
    }
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n") {
        match c.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => got.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("no reply to {args:?}: {e} (a hang)"),
        }
    }
    String::from_utf8_lossy(&got).trim_end().to_string()
}

const OP_TIMEOUT: Duration = Duration::from_millis(400);

/// This test process's Prometheus recorder (one per process).
fn recorder() -> &'static metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    HANDLE.get_or_init(|| lockkit_proxy::metrics::install().unwrap())
}

/// The value of the series `name{...label...}` in the recorder's rendering (0 if absent).
fn series(name: &str, label: &str) -> f64 {
    recorder()
        .render()
        .lines()
        .find_map(|l| {
            let (s, v) = l.rsplit_once(' ')?;
            let (n, labels) = s.split_once('{').unwrap_or((s, ""));
            (n == name && labels.contains(label)).then(|| v.parse().unwrap())
        })
        .unwrap_or(0.0)
}

async fn proxy(upstream: &str, shared: usize) -> Proxy {
    let options = ProxyOptions::new()
        .shared_connections(shared)
        .op_timeout(OP_TIMEOUT);
    Proxy::start_with(
        "127.0.0.1:0",
        Upstream::from_url(upstream).unwrap(),
        vec![],
        options,
    )
    .await
    .unwrap()
}

fn relay_to(server: &RedisServer) -> DelayRelay {
    DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO).unwrap()
}

/// Retries `PING` on new connections until one answers (at most 5 s); how long it took.
fn pong_again(port: u16) -> Duration {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        let mut c = raw_conn(port);
        if ask(&mut c, &["PING"]) == "+PONG" {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no PONG within 5 s of the upstream going silent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_shared_connection_fails_its_commands_and_is_replaced() {
    let server = RedisServer::start();
    let timeouts = || series("lockkit_proxy_upstream_errors_total", "kind=\"timeout\"");
    let reconnects = || series("lockkit_proxy_upstream_reconnects_total", "");
    let (timeouts_before, reconnects_before) = (timeouts(), reconnects());
    let relay = relay_to(&server);
    let proxy = proxy(&relay.url(), 1).await;
    let port = proxy.addr().port();
    tokio::task::spawn_blocking(move || {
        let mut a = raw_conn(port);
        let mut b = raw_conn(port);
        assert_eq!(ask(&mut a, &["SET", "k", "1"]), "+OK");
        relay.swallow();
        // Both clients' commands are on the silent shared connection.
        let start = Instant::now();
        b.write_all(&cmd(&["INCR", "k"])).unwrap();
        let got = ask(&mut a, &["GET", "k"]);
        let a_waited = start.elapsed();
        assert!(
            got.starts_with("-ERR lockkit proxy: connection to upstream")
                && got.contains("no reply within 400 ms"),
            "{got}"
        );
        let mut line = String::new();
        let mut byte = [0u8; 1];
        while !line.ends_with("\r\n") {
            assert_eq!(b.read(&mut byte).unwrap(), 1, "b's reply, not a close");
            line.push(byte[0] as char);
        }
        assert!(line.starts_with("-ERR lockkit proxy"), "{line}");
        // Answered by the timeout, not by a kernel's give-up (minutes): within a few timeouts.
        assert!(a_waited >= OP_TIMEOUT, "{a_waited:?}");
        assert!(a_waited < OP_TIMEOUT * 5, "{a_waited:?}");
        // The path comes back: the same clients go on, on a new shared connection.
        relay.restore();
        let again = Instant::now();
        let mut ok = false;
        while again.elapsed() < Duration::from_secs(5) && !ok {
            ok = ask(&mut a, &["GET", "k"]) == "$1";
        }
        assert!(ok, "a's commands never succeeded again");
        assert_eq!(ask(&mut b, &["PING"]), "+PONG");
        pong_again(port);
        relay
    })
    .await
    .unwrap();
    proxy.stop().await;
    // The metrics saw it: a timeout, and a shared connection opened again.
    assert!(timeouts() > timeouts_before);
    assert!(reconnects() > reconnects_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_own_connection_answers_an_error_and_closes_then_clients_reconnect() {
    let server = RedisServer::start();
    let relay = relay_to(&server);
    let proxy = proxy(&relay.url(), 0).await;
    let port = proxy.addr().port();
    tokio::task::spawn_blocking(move || {
        let mut a = raw_conn(port);
        assert_eq!(ask(&mut a, &["PING"]), "+PONG");
        relay.swallow();
        let start = Instant::now();
        let got = ask(&mut a, &["PING"]);
        let waited = start.elapsed();
        assert!(
            got.starts_with("-ERR lockkit proxy: no reply from upstream")
                && got.contains("within 400 ms"),
            "{got}"
        );
        assert!(
            waited >= OP_TIMEOUT && waited < OP_TIMEOUT * 5,
            "{waited:?}"
        );
        assert_eq!(ask(&mut a, &["PING"]), "", "its connection closes");
        relay.restore();
        pong_again(port);
        relay
    })
    .await
    .unwrap();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_command_longer_than_the_timeout_is_not_cut() {
    let server = RedisServer::start();
    let proxy = proxy(&server.url(), 1).await;
    let port = proxy.addr().port();
    tokio::task::spawn_blocking(move || {
        let mut a = raw_conn(port);
        // BLPOP moves it to a connection of its own; it waits 1 s, past the 400 ms timeout.
        assert_eq!(ask(&mut a, &["BLPOP", "nothing", "1"]), "*-1");
        assert_eq!(ask(&mut a, &["PING"]), "+PONG");
    })
    .await
    .unwrap();
    proxy.stop().await;
}

#[tokio::test]
async fn upstream_tcp_connections_have_keepalive_and_a_user_timeout() {
    let server = RedisServer::start();
    let conn = Upstream::from_url(&server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let (keepalive, user_timeout) = lockkit_proxy::sock::socket_options(&conn).expect("plain TCP");
    assert!(keepalive);
    if cfg!(target_os = "linux") {
        assert_eq!(user_timeout, Some(lockkit_proxy::DEFAULT_OP_TIMEOUT));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_to_an_upstream_that_refuses_back_off() {
    // Nothing listens there: every connection is refused at once.
    let port = lockkit_test_support::free_port().unwrap();
    let proxy = proxy(&format!("redis://127.0.0.1:{port}"), 0).await;
    let pport = proxy.addr().port();
    let (waited, errors) = tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        let errors: Vec<String> = (0..5)
            .map(|_| ask(&mut raw_conn(pport), &["PING"]))
            .collect();
        (start.elapsed(), errors)
    })
    .await
    .unwrap();
    for e in &errors {
        assert!(e.starts_with("-ERR lockkit proxy: upstream"), "{e}");
    }
    // Refused at once, the five attempts still took the back-off's 50 + 100 + 200 + 400 ms.
    assert!(waited >= Duration::from_millis(750), "{waited:?}");
    proxy.stop().await;
}
