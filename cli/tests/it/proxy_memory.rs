//! `lockkit proxy`'s memory bounds, as Redis's: the replies held for a client that does not
//! read are bounded in bytes (`client-output-buffer-limit`), all clients' together too
//! (`maxmemory-clients`), and one 100 MB value passes without being held three times over.
//! Each runs the built binary against a real redis-server and reads its peak RSS (`VmHWM`).

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{redis_cli, ProxyRun};
use lockkit_test_support::RedisServer;

const MIB: usize = 1 << 20;

fn connect(port: u16) -> TcpStream {
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c
}

fn cmd(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one reply: a bulk string's length (its bytes read and dropped), or the line of
/// another; `None` when the connection ended.
fn reply(r: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let line = line.trim_end().to_string();
    if let Some(n) = line.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
        let mut left = n + 2;
        let mut chunk = vec![0u8; MIB];
        while left > 0 {
            let got = r.read(&mut chunk[..left.min(MIB)]).ok()?;
            if got == 0 {
                return None;
            }
            left -= got;
        }
        return Some(format!("{n} bytes"));
    }
    Some(line)
}

/// `SET key <size bytes>` straight on the server.
fn set_on_server(server: &RedisServer, key: &str, size: usize) {
    let mut c = connect(server.port());
    c.write_all(&cmd(&[b"SET", key.as_bytes(), &vec![b'x'; size]]))
        .unwrap();
    let mut r = BufReader::new(c);
    assert_eq!(reply(&mut r).as_deref(), Some("+OK"));
}

/// 200 pipelined GETs of a 16 MiB value from a client that does not read: the proxy holds a
/// few of the replies, not every one (the server holds the rest, as it would without the
/// proxy); once the client reads, it gets all 200, in order.
#[test]
fn a_client_that_does_not_read_holds_a_bounded_window_of_replies() {
    let server = RedisServer::start();
    set_on_server(&server, "big", 16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--op-timeout", "30s"],
        dir.path(),
    );
    let mut c = connect(proxy.port);
    let get = cmd(&[b"GET", b"big"]);
    c.write_all(&get.repeat(200)).unwrap();
    for s in 1..=6 {
        std::thread::sleep(Duration::from_secs(1));
        eprintln!("{s} s: proxy VmRSS {} KiB", proxy.status_kib("VmRSS"));
    }
    let peak = proxy.status_kib("VmHWM");
    let started = Instant::now();
    let mut r = BufReader::new(c);
    let mut got = 0;
    while got < 200 {
        match reply(&mut r) {
            Some(line) => {
                assert_eq!(line, format!("{} bytes", 16 * MIB));
                got += 1;
            }
            None => break,
        }
    }
    eprintln!(
        "the client then read {got} replies in {:?}; peak RSS while it did not read: {peak} KiB",
        started.elapsed()
    );
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
    assert_eq!(got, 200, "{}", run.all());
    assert!(
        peak < 250 * 1024,
        "peak RSS {peak} KiB while a client did not read"
    );
}

/// A client that takes none of its replies while its shared connection waits for it is closed
/// after the operation timeout (logged), and the other clients on that connection go on.
/// The timeout is 3 s, not 1 s: with 1 s, one CI run on a loaded 2-core machine saw the
/// shared connection given up ("no reply within 1 s", so the other client's SET failed); the
/// cause is not proven (a second without bytes read from the server while not waiting for the
/// client: most likely the debug build starved on the loaded machine).
#[test]
fn a_client_that_leaves_its_shared_connection_waiting_is_closed() {
    let server = RedisServer::start();
    set_on_server(&server, "big", 16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--op-timeout", "3s"],
        dir.path(),
    );
    let mut stuck = connect(proxy.port);
    stuck.write_all(&cmd(&[b"GET", b"big"]).repeat(50)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let other = connect(proxy.port);
    let mut w = other.try_clone().unwrap();
    w.write_all(&cmd(&[b"SET", b"k", b"v"])).unwrap();
    let mut r = BufReader::new(other);
    let first = reply(&mut r);
    let peak = proxy.status_kib("VmHWM");
    let run = proxy.stop();
    assert_eq!(first.as_deref(), Some("+OK"), "{}", run.all());
    assert!(
        run.stderr.contains("took none of its replies"),
        "{}",
        run.all()
    );
    assert!(peak < 250 * 1024, "peak RSS {peak} KiB");
}

/// --client-output-buffer-limit: a reply bigger than it closes its client, on a shared
/// connection and on one of its own (WATCH moves it there), with a line on stderr; the other
/// clients go on.
#[test]
fn a_client_past_its_output_buffer_limit_is_closed() {
    let server = RedisServer::start();
    set_on_server(&server, "v", 2 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--client-output-buffer-limit", "1mb"],
        dir.path(),
    );
    let mut seen = Vec::new();
    for own in [false, true] {
        let c = connect(proxy.port);
        let mut w = c.try_clone().unwrap();
        let mut r = BufReader::new(c);
        if own {
            w.write_all(&cmd(&[b"WATCH", b"w"])).unwrap();
            assert_eq!(reply(&mut r).as_deref(), Some("+OK"));
        }
        w.write_all(&cmd(&[b"GET", b"v"])).unwrap();
        seen.push(reply(&mut r));
    }
    assert_eq!(redis_cli(proxy.port, &["SET", "small", "v"]), "OK\n");
    assert_eq!(redis_cli(proxy.port, &["STRLEN", "v"]), "2097152\n");
    let run = proxy.stop();
    assert_eq!(seen, [None, None], "{}", run.all());
    assert_eq!(
        run.stderr.matches("over the output buffer limit").count(),
        2,
        "{}",
        run.all()
    );
}

/// --maxmemory-clients: when the replies held for all clients together pass it, the client
/// holding most is closed (logged); the others keep theirs.
#[test]
fn maxmemory_clients_closes_the_client_holding_most() {
    let server = RedisServer::start();
    set_on_server(&server, "v3", 3 * MIB);
    set_on_server(&server, "v1", MIB);
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &[
            "--quiet",
            "--shared-connections",
            "3",
            "--op-timeout",
            "30s",
            "--maxmemory-clients",
            "40mb",
        ],
        dir.path(),
    );
    // Three clients that do not read, each on a shared connection of its own: each holds what
    // it was handed (less what the kernel's socket buffers took) until its connection waits
    // for it (past 32 MiB): the first at most 20 MiB (twenty replies of 1 MiB), the others
    // more (replies of 3 MiB): past 40 MiB together, the one holding most is closed.
    let mut hogs = Vec::new();
    for key in [&b"v1"[..], b"v3", b"v3"] {
        let mut c = connect(proxy.port);
        c.write_all(&cmd(&[b"GET", key]).repeat(20)).unwrap();
        hogs.push(c);
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(redis_cli(proxy.port, &["PING"]), "PONG\n");
    let mut first = BufReader::new(hogs.remove(0));
    let got = reply(&mut first);
    let run = proxy.stop();
    assert_eq!(
        got.as_deref(),
        Some("1048576 bytes"),
        "the client holding least keeps its replies: {}",
        run.all()
    );
    assert!(
        run.stderr.contains("over --maxmemory-clients 41943040"),
        "{}",
        run.all()
    );
}

/// SET and GET of one 100 MiB value through the proxy, on a shared connection and on one of
/// its own: the proxy's peak RSS stays under 250 MB.
#[test]
fn one_100mb_value_passes_under_250mb() {
    let server = RedisServer::start();
    let value = vec![b'x'; 100 * MIB];
    for own in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let proxy = ProxyRun::start(&server.url(), &["--quiet"], dir.path());
        let c = connect(proxy.port);
        let mut w = c.try_clone().unwrap();
        let mut r = BufReader::new(c);
        if own {
            w.write_all(&cmd(&[b"WATCH", b"w"])).unwrap();
            assert_eq!(reply(&mut r).as_deref(), Some("+OK"));
        }
        w.write_all(&cmd(&[b"SET", b"big", &value])).unwrap();
        assert_eq!(reply(&mut r).as_deref(), Some("+OK"));
        let after_set = proxy.status_kib("VmHWM");
        w.write_all(&cmd(&[b"GET", b"big"])).unwrap();
        assert_eq!(reply(&mut r), Some(format!("{} bytes", 100 * MIB)));
        let peak = proxy.status_kib("VmHWM");
        let run = proxy.stop();
        let how = if own { "own" } else { "shared" };
        eprintln!("{how} connection: VmHWM after SET {after_set} KiB, after GET {peak} KiB");
        assert!(run.success(), "{}", run.all());
        assert!(
            peak < 250 * 1000,
            "{how} connection: peak RSS {peak} KiB for one 100 MiB value"
        );
    }
}
