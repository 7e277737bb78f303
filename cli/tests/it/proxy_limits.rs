//! `lockkit proxy` under abuse, as Redis holds under it: nothing kept per client before login,
//! bounded per-name tables, a client limit that fits the descriptors, a login timeout.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{cmd, redis_cli, reply_line, ProxyRun};
use lockkit_test_support::RedisServer;

fn connect(port: u16) -> TcpStream {
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

/// 12,000 commands of distinct 16 KiB names before login: each is refused, and nothing of them
/// stays in the proxy (RSS, and the command counts of the report).
#[test]
fn distinct_names_before_login_cost_no_memory_and_are_not_counted() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--requirepass", "pw", "--plugin", "observe"],
        dir.path(),
    );
    let mut c = connect(proxy.port);
    let mut reader = c.try_clone().unwrap();
    const N: usize = 12_000;
    let read = std::thread::spawn(move || {
        let mut lines = 0;
        let mut buf = vec![0u8; 1 << 16];
        while lines < N {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => lines += buf[..n].iter().filter(|&&b| b == b'\n').count(),
            }
        }
        lines
    });
    for i in 0..N {
        let mut name = format!("{i:08}").into_bytes();
        name.resize(16 * 1024, b'x');
        let mut frame = format!("*1\r\n${}\r\n", name.len()).into_bytes();
        frame.extend_from_slice(&name);
        frame.extend_from_slice(b"\r\n");
        c.write_all(&frame).unwrap();
    }
    assert_eq!(read.join().unwrap(), N, "every command got its refusal");
    let peak = proxy.status_kib("VmHWM");
    let rss = proxy.status_kib("VmRSS");
    eprintln!("proxy after {N} names of 16 KiB before login: VmRSS {rss} KiB, VmHWM {peak} KiB");
    drop(c);
    assert_eq!(
        redis_cli(
            proxy.port,
            &["-a", "pw", "--no-auth-warning", "SET", "k", "v"]
        ),
        "OK\n"
    );
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
    assert!(peak < 100 * 1024, "peak RSS {peak} KiB");
    let report = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .expect("observe's report");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    let commands = report["commands"].as_object().unwrap();
    assert!(
        commands.len() <= 3,
        "counted before login: {} names",
        commands.len()
    );
    assert_eq!(report["commands"]["SET"], 1, "{}", report["commands"]);
}

/// After login, distinct names Redis does not know share one bucket in the metrics, so the
/// series stay bounded.
#[test]
fn unknown_names_share_one_metrics_series() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mport = lockkit_test_support::free_port().unwrap();
    let listen = format!("127.0.0.1:{mport}");
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--metrics-listen", &listen],
        dir.path(),
    );
    let mut c = connect(proxy.port);
    let mut all = Vec::new();
    for i in 0..2000 {
        all.extend_from_slice(&cmd(&[&format!("NOSUCH{i:05}")]));
    }
    c.write_all(&all).unwrap();
    for _ in 0..2000 {
        assert!(reply_line(&mut c).starts_with("-ERR unknown command"));
    }
    let mut m = connect(mport);
    m.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    m.read_to_string(&mut body).unwrap();
    let series = body
        .lines()
        .filter(|l| l.starts_with("lockkit_proxy_commands_total{"))
        .count();
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
    assert!(
        series < 50,
        "{series} series of lockkit_proxy_commands_total"
    );
}

/// Under `ulimit -n 256`, 300 anonymous sockets: the client limit (lowered to fit the
/// descriptors, with a warning) refuses the extra ones with Redis's text, a logged-in client's
/// MULTI still gets its own upstream connection, a new client gets the error, not a hang.
#[test]
fn max_clients_fits_the_descriptors_and_refuses_with_redis_text() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start_with_nofile(
        256,
        &server.url(),
        &["--quiet", "--requirepass", "pw"],
        dir.path(),
    );
    let mut app = connect(proxy.port);
    app.write_all(&cmd(&["AUTH", "pw"])).unwrap();
    assert_eq!(reply_line(&mut app), "+OK");
    app.write_all(&cmd(&["SET", "k", "v"])).unwrap();
    assert_eq!(reply_line(&mut app), "+OK");
    let mut idle = Vec::new();
    for _ in 0..300 {
        match TcpStream::connect(("127.0.0.1", proxy.port)) {
            Ok(s) => idle.push(s),
            Err(e) => panic!("connect: {e}"),
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    app.write_all(&cmd(&["MULTI"])).unwrap();
    assert_eq!(
        reply_line(&mut app),
        "+OK",
        "MULTI on a connection of its own"
    );
    app.write_all(&cmd(&["INCR", "n"])).unwrap();
    assert_eq!(reply_line(&mut app), "+QUEUED");
    app.write_all(&cmd(&["EXEC"])).unwrap();
    assert_eq!(reply_line(&mut app), "*1");
    assert_eq!(reply_line(&mut app), ":1");
    let started = Instant::now();
    let mut new = connect(proxy.port);
    let _ = new.write_all(&cmd(&["PING"]));
    let line = reply_line(&mut new);
    assert_eq!(
        line,
        "-ERR max number of clients reached",
        "after {:?}",
        started.elapsed()
    );
    drop(idle);
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
    assert!(
        run.stderr.contains("--max-clients"),
        "a warning names the lowered limit: {}",
        run.all()
    );
}

/// A client that does not log in within `--login-timeout` is closed; a logged-in one stays.
#[test]
fn login_timeout_closes_who_does_not_log_in() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--requirepass", "pw", "--login-timeout", "500ms"],
        dir.path(),
    );
    let mut anon = connect(proxy.port);
    let mut app = connect(proxy.port);
    app.write_all(&cmd(&["AUTH", "pw"])).unwrap();
    assert_eq!(reply_line(&mut app), "+OK");
    // One byte a while: still no login.
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(5) {
        if anon.write_all(b"P").is_err() {
            closed = true;
            break;
        }
        anon.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut b = [0u8; 64];
        if matches!(anon.read(&mut b), Ok(0)) {
            closed = true;
            break;
        }
    }
    assert!(closed, "the anonymous client was never closed");
    assert!(started.elapsed() < Duration::from_secs(4));
    app.write_all(&cmd(&["PING"])).unwrap();
    assert_eq!(reply_line(&mut app), "+PONG");
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
}

/// A script that runs 3 s with `--op-timeout 2s`: the other clients' commands queued behind it
/// on the shared connection get their replies, as with Redis direct.
#[test]
fn a_slow_script_fails_no_other_clients_commands() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--op-timeout", "2s"],
        dir.path(),
    );
    const BUSY: &str =
        "local function now() local t = redis.call('TIME') return t[1] * 1000000 + t[2] end \
        local t0 = now() while now() - t0 < 3000000 do end return 'done'";
    let mut owner = connect(proxy.port);
    owner.write_all(&cmd(&["SET", "a", "1"])).unwrap();
    assert_eq!(reply_line(&mut owner), "+OK");
    let mut others: Vec<TcpStream> = (0..3).map(|_| connect(proxy.port)).collect();
    for o in &mut others {
        o.write_all(&cmd(&["SET", "warm", "1"])).unwrap();
        assert_eq!(reply_line(o), "+OK");
    }
    owner.write_all(&cmd(&["EVAL", BUSY, "0"])).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    for (i, o) in others.iter_mut().enumerate() {
        o.write_all(&cmd(&["SET", &format!("k{i}"), "v"])).unwrap();
    }
    for o in &mut others {
        assert_eq!(reply_line(o), "+OK", "a SET queued behind the script");
    }
    let script = reply_line(&mut owner);
    eprintln!("the script's owner got: {script}");
    assert!(script == "$4" || script.starts_with("-ERR"), "{script}");
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
}

/// `GET path` on the metrics port with `header`: the status line and the body.
fn http_get(port: u16, path: &str, header: &str) -> (String, String) {
    let mut c = connect(port);
    c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n{header}\r\n").as_bytes())
        .unwrap();
    let mut all = String::new();
    let _ = c.read_to_string(&mut all);
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or((&all, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// A metrics listener other hosts reach needs a token or an explicit opt-out; a token is
/// checked; /health and /ready answer; key names only with --metrics-keys.
#[test]
fn the_metrics_listener_is_protected() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let open = common::lockkit(
        &[
            "proxy",
            "--upstream",
            &server.url(),
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "0.0.0.0:0",
            "--duration",
            "1s",
            "--quiet",
        ],
        None,
    );
    assert_eq!(open.code, Some(2), "{}", open.all());
    assert!(open.stderr.contains("--metrics-token"), "{}", open.all());
    let mport = lockkit_test_support::free_port().unwrap();
    let listen = format!("127.0.0.1:{mport}");
    let proxy = ProxyRun::start(
        &server.url(),
        &[
            "--quiet",
            "--plugin",
            "observe:top=3",
            "--metrics-listen",
            &listen,
            "--metrics-token",
            "s3cret-token",
        ],
        dir.path(),
    );
    assert_eq!(
        redis_cli(proxy.port, &["SET", "customer:4711:ssn", "x"]),
        "OK\n"
    );
    let (status, _) = http_get(mport, "/metrics", "");
    assert!(status.contains(" 401"), "{status}");
    let (status, _) = http_get(mport, "/metrics", "Authorization: Bearer wrong\r\n");
    assert!(status.contains(" 401"), "{status}");
    let (status, _) = http_get(mport, "/health", "");
    assert!(status.contains(" 200"), "{status}");
    let (status, _) = http_get(mport, "/ready", "");
    assert!(status.contains(" 200"), "{status}");
    std::thread::sleep(Duration::from_millis(1500));
    let (status, body) = http_get(mport, "/metrics", "Authorization: Bearer s3cret-token\r\n");
    assert!(status.contains(" 200"), "{status}");
    assert!(body.contains("lockkit_proxy_commands_total"), "{body}");
    assert!(
        !body.contains("customer:4711"),
        "key names without --metrics-keys: {body}"
    );
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
}
/// SIGHUP re-reads the users file without dropping connections; a bad file keeps the old one.
#[test]
fn sighup_reloads_the_users_file_and_keeps_serving() {
    use std::os::unix::fs::PermissionsExt;
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, "app:pw1\n").unwrap();
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o600)).unwrap();
    let users_arg = users.to_string_lossy().into_owned();
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--users-file", &users_arg],
        dir.path(),
    );
    let mut app = connect(proxy.port);
    app.write_all(&cmd(&["AUTH", "app", "pw1"])).unwrap();
    assert_eq!(reply_line(&mut app), "+OK");
    std::fs::write(&users, "app:pw2\n").unwrap();
    proxy.send("HUP");
    std::thread::sleep(Duration::from_millis(500));
    app.write_all(&cmd(&["PING"])).unwrap();
    assert_eq!(reply_line(&mut app), "+PONG", "the logged-in client stays");
    let auth = |pw: &str| {
        let mut c = connect(proxy.port);
        c.write_all(&cmd(&["AUTH", "app", pw])).unwrap();
        reply_line(&mut c)
    };
    assert_eq!(auth("pw2"), "+OK");
    assert!(auth("pw1").starts_with("-WRONGPASS"));
    std::fs::write(&users, "no colon here\n").unwrap();
    proxy.send("HUP");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(auth("pw2"), "+OK", "a bad file keeps the users of before");
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
    assert!(run.stderr.contains("SIGHUP"), "{}", run.all());
    assert!(!run.stderr.contains("pw2"), "{}", run.all());
}

/// A users file others may write is refused (exit 2); one others may read is warned about.
#[test]
fn a_users_file_others_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, "app:s3cret\n").unwrap();
    let run_with = |mode: u32| {
        std::fs::set_permissions(&users, std::fs::Permissions::from_mode(mode)).unwrap();
        common::lockkit(
            &[
                "proxy",
                "--upstream",
                &server.url(),
                "--listen",
                "127.0.0.1:0",
                "--users-file",
                &users.to_string_lossy(),
                "--duration",
                "200ms",
                "--quiet",
            ],
            None,
        )
    };
    let writable = run_with(0o666);
    assert_eq!(writable.code, Some(2), "{}", writable.all());
    assert!(writable.stderr.contains("chmod 600"), "{}", writable.all());
    let readable = run_with(0o644);
    assert!(readable.success(), "{}", readable.all());
    assert!(
        readable.stderr.contains("readable by others"),
        "{}",
        readable.all()
    );
    let private = run_with(0o600);
    assert!(private.success(), "{}", private.all());
    assert!(
        !private.stderr.contains("readable by others"),
        "{}",
        private.all()
    );
    assert!(!writable.all().contains("s3cret"));
}

/// An upstream that is not up yet: the proxy starts, clients get a clear error, and once the
/// server is up the next client is served.
#[test]
fn the_proxy_starts_before_its_upstream() {
    let port = lockkit_test_support::free_port().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let upstream = format!("redis://127.0.0.1:{port}");
    let proxy = ProxyRun::start(&upstream, &["--quiet"], dir.path());
    let mut c = connect(proxy.port);
    c.write_all(&cmd(&["PING"])).unwrap();
    let first = reply_line(&mut c);
    assert!(first.starts_with("-ERR lockkit proxy: upstream"), "{first}");
    let mut server = std::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < Duration::from_secs(10) {
        let mut c = connect(proxy.port);
        c.write_all(&cmd(&["PING"])).unwrap();
        last = reply_line(&mut c);
        if last == "+PONG" {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = server.kill();
    let _ = server.wait();
    let run = proxy.stop();
    assert_eq!(last, "+PONG", "{}", run.all());
    assert!(run.stderr.contains("not reachable yet"), "{}", run.all());
}

/// A request over --client-query-buffer-limit closes its client, with a line on stderr; the
/// others go on.
#[test]
fn a_request_over_the_query_buffer_limit_closes_its_client() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--client-query-buffer-limit", "1mb"],
        dir.path(),
    );
    let mut big = connect(proxy.port);
    let value = "x".repeat(2 << 20);
    let _ = big.write_all(&cmd(&["SET", "big", &value]));
    assert_eq!(reply_line(&mut big), "", "closed without a reply");
    assert_eq!(redis_cli(proxy.port, &["SET", "small", "v"]), "OK\n");
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
    assert!(run.stderr.contains("query buffer limit"), "{}", run.all());
}
