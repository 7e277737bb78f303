//! Bad input through the built `lockkit` binary: each case gives one clear message naming the
//! cause, a non-zero exit (2 for bad input, 3 for a target that cannot be used, 1 for the
//! rest), no panic, and no file written or damaged.

use crate::common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::time::Duration;

use common::{files_in, lockkit, Run};

use lockkit_test_support::{free_port, RedisServer, ServerOptions};

/// Fails unless the run failed with `code`, printed `fragment` in an `error: ` line on stderr,
/// and did not panic.
fn assert_fails(r: &Run, code: i32, fragment: &str) {
    let all = format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        r.code, r.stdout, r.stderr
    );
    assert_eq!(r.code, Some(code), "{all}");
    assert!(!r.stderr.contains("panicked"), "{all}");
    assert!(!r.stdout.contains("panicked"), "{all}");
    assert!(r.stderr.starts_with("error: "), "{all}");
    assert!(r.stderr.contains(fragment), "want {fragment:?}\n{all}");
}

/// The error is one line (clap's usage errors add a `For more information` hint after it).
fn assert_one_error_line(r: &Run) {
    let lines: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", r.stderr);
}

/// A URL on a loopback port where nothing listens.
fn dead_url() -> String {
    format!("redis://127.0.0.1:{}", free_port().unwrap())
}

/// Bench flags that keep any run that does start short.
const SHORT: [&str; 6] = ["--duration", "1s", "--warmup", "0", "--clients", "2"];

#[test]
fn malformed_urls_and_unknown_schemes_are_refused_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    for (url, shown) in [
        ("not-a-url", "`not-a-url` is not a valid Redis URL"),
        (
            "http://127.0.0.1:6379/",
            "`http://127.0.0.1:6379/` is not a valid Redis URL",
        ),
        ("ftp://host/x", "`ftp://host/x` is not a valid Redis URL"),
        ("redis://", "`redis://` is not a valid Redis URL"),
        ("redis://127.0.0.1:99999", "is not a valid Redis URL"),
        (
            "redis://:pw-in-bad-url@127.0.0.1:99999",
            "`redis://:***@127.0.0.1:99999` is not a valid Redis URL",
        ),
    ] {
        let r = lockkit(&["bench", "--url", url, "--out", &out, "--quiet"], None);
        assert_fails(&r, 2, shown);
        assert_one_error_line(&r);
        assert!(!r.stderr.contains("pw-in-bad-url"), "{}", r.stderr);
    }
    assert!(files_in(dir.path()).is_empty(), "nothing written");

    for url in ["http://127.0.0.1:6379/", "not-a-url"] {
        let r = lockkit(&["probe", "--url", url], None);
        assert_fails(
            &r,
            2,
            &format!("probing {url}: invalid option `url`: `{url}` is not a valid Redis URL"),
        );
        assert_one_error_line(&r);
        let r = lockkit(&["lua", "exec", "--url", url, "-"], Some("PING\n"));
        assert_fails(&r, 2, &format!("connecting to {url}"));
        assert!(r.stdout.is_empty());
    }
}

fn auth_server() -> RedisServer {
    let server = RedisServer::start_with(ServerOptions {
        extra_args: vec!["--requirepass".into(), "right-pw".into()],
        password: Some("right-pw".into()),
        ..ServerOptions::default()
    });
    let ok = server
        .inline("ACL SETUSER locker on >locker-pw ~lock:* +@all")
        .unwrap();
    assert!(ok.starts_with("+OK"), "{ok}");
    server
}

#[test]
fn wrong_password_and_wrong_acl_user_fail_at_connect_with_the_fix() {
    let server = auth_server();
    let port = server.port();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    let auth_failed = "Password authentication failed";
    let hint = "check the user and password in the URL (redis://user:password@host:port)";
    for (url, shown) in [
        (
            format!("redis://:wrong-pw@127.0.0.1:{port}"),
            format!("connecting to redis://:***@127.0.0.1:{port}: {auth_failed}"),
        ),
        (
            format!("redis://nobody:locker-pw@127.0.0.1:{port}"),
            format!("connecting to redis://nobody:***@127.0.0.1:{port}: {auth_failed}"),
        ),
        (
            format!("redis://locker:wrong-pw@127.0.0.1:{port}"),
            format!("connecting to redis://locker:***@127.0.0.1:{port}: {auth_failed}"),
        ),
        (format!("redis://127.0.0.1:{port}"), "NOAUTH".to_string()),
    ] {
        let mut args = vec!["bench", "--url", &url, "--out", &out, "--quiet"];
        args.extend(SHORT);
        let r = lockkit(&args, None);
        assert_fails(&r, 3, &shown);
        assert_fails(&r, 3, hint);
        assert_one_error_line(&r);
        assert!(!r.stderr.contains("wrong-pw") && !r.stderr.contains("locker-pw"));

        let r = lockkit(&["probe", "--url", &url], None);
        assert_fails(&r, 3, "probing redis://");
        assert_one_error_line(&r);
        assert!(!r.stderr.contains("wrong-pw") && !r.stderr.contains("locker-pw"));
    }
    let r = lockkit(
        &[
            "lua",
            "exec",
            "--url",
            &format!("redis://:wrong-pw@127.0.0.1:{port}"),
            "-",
        ],
        Some("PING\n"),
    );
    assert_fails(
        &r,
        3,
        &format!("connecting to redis://:***@127.0.0.1:{port}: {auth_failed}"),
    );
    assert!(r.stdout.is_empty() && !r.stderr.contains("wrong-pw"));
    // TLS to a plain server: the handshake gets no answer; bounded, named, not a hang.
    let r = lockkit(
        &[
            "lua",
            "exec",
            "--url",
            &format!("rediss://:right-pw@127.0.0.1:{port}"),
            "-",
        ],
        Some("PING\n"),
    );
    assert_fails(&r, 3, &format!("connecting to rediss://:***@127.0.0.1:{port}: no answer within 5 s; is it a TLS (rediss://) URL to a plain server"));
    assert_one_error_line(&r);
    // Right user, but its ACL allows only `lock:*`: refused before the run, not a run of
    // NOPERM errors; with a prefix it may use, the run works.
    let locker = format!("redis://locker:locker-pw@127.0.0.1:{port}");
    let mut args = vec!["bench", "--url", &locker, "--out", &out, "--quiet"];
    args.extend(SHORT);
    let r = lockkit(&args, None);
    assert_fails(
        &r,
        3,
        &format!("error: redis://locker:***@127.0.0.1:{port} refused a lock on \"lockkit:bench:preflight\": redis: NoPerm"),
    );
    assert_fails(&r, 3, "or pick another --key-prefix");
    assert_one_error_line(&r);
    assert!(files_in(dir.path()).is_empty(), "nothing written");
    args.extend(["--key-prefix", "lock:bench:"]);
    let r = lockkit(&args, None);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!r.stderr.contains("locker-pw") && !r.stdout.contains("locker-pw"));
}

#[test]
fn a_port_with_no_redis_is_refused_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_url();
    let r = lockkit(
        &[
            "bench",
            "--url",
            &url,
            "--out",
            &dir.path().display().to_string(),
        ],
        None,
    );
    assert_fails(
        &r,
        3,
        &format!("connecting to {url}: Connection refused (os error 111); is the server running on that host and port?"),
    );
    assert_one_error_line(&r);
    assert!(files_in(dir.path()).is_empty());
    let r = lockkit(&["probe", "--url", &url], None);
    assert_fails(&r, 3, &format!("probing {url}: redis: Connection refused"));
    assert_one_error_line(&r);
    // Only bench starts a throwaway server without --url, so only bench suggests it.
    assert!(!r.stderr.contains("omit --url"), "{}", r.stderr);
    let r = lockkit(&["lua", "exec", "--url", &url, "-"], Some("PING\n"));
    assert_fails(&r, 3, &format!("connecting to {url}: Connection refused"));
    assert!(!r.stderr.contains("omit --url"), "{}", r.stderr);
}

/// A tiny HTTP server on a loopback port: answers every request with `400 Bad Request` and
/// closes; serves at most 32 connections, then stops.
fn http_responder() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(32) {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    port
}

#[test]
fn a_port_speaking_http_is_named_as_not_redis() {
    let port = http_responder();
    let url = format!("redis://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let r = lockkit(
        &[
            "bench",
            "--url",
            &url,
            "--out",
            &dir.path().display().to_string(),
        ],
        None,
    );
    assert_fails(&r, 3, &format!("connecting to {url}: "));
    assert_fails(
        &r,
        3,
        "that port does not speak the Redis protocol; check the host and port",
    );
    assert_one_error_line(&r);
    assert!(files_in(dir.path()).is_empty());
    let r = lockkit(&["probe", "--url", &url], None);
    assert_fails(&r, 3, "that port does not speak the Redis protocol");
    assert_one_error_line(&r);
}

#[test]
fn absurd_ttls_durations_counts_and_rates_name_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    let url = dead_url();
    for (flags, code, shown) in [
        (&["--ttl", "0"][..], 2, "error: --ttl must be at least 3 ms"),
        (&["--ttl", "2ms"], 2, "error: --ttl must be at least 3 ms"),
        (
            &["--ttl", "9000h"],
            2,
            "error: --ttl must be at most a year",
        ),
        (
            &["--ttl", "500y"],
            2,
            "invalid value '500y' for '--ttl <DURATION>': `500y` is too long a duration",
        ),
        (
            &["--ttl", "99999999999999999999h"],
            2,
            "`99999999999999999999h` is too long a duration",
        ),
        (
            &["--duration", "10x"],
            2,
            "invalid value '10x' for '--duration <DURATION>': `10x` is not a duration",
        ),
        (
            &["--duration", "0"],
            2,
            "error: --duration 0: nothing would be measured",
        ),
        (&["--hold", "-5ms"], 2, "`-5ms` is not a duration"),
        (
            &["--clients", "-1"],
            2,
            "invalid value '-1' for '--clients <N>': `-1` is not a count",
        ),
        (
            &["--clients", "0"],
            2,
            "error: --clients must be between 1 and",
        ),
        (
            &["--clients", "1g"],
            2,
            "error: --clients must be between 1 and",
        ),
        (
            &["--keys", "99999999999999999999"],
            2,
            "`99999999999999999999` is too large a count",
        ),
        (&["--keys", "1.5"], 2, "`1.5` is not a whole count"),
        (
            &["--connections", "0"],
            2,
            "error: --connections must be between 1 and 1024",
        ),
        (
            &["--rate", "0"],
            2,
            "error: --rate 0: an open loop needs at least one cycle per second",
        ),
        (&["--rate", "-10"], 2, "`-10` is not a count"),
        (
            &["--key-prefix", ""],
            2,
            "error: --key-prefix must not be empty",
        ),
    ] {
        let mut args = vec!["bench", "--url", &url, "--out", &out];
        args.extend(flags);
        let r = lockkit(&args, None);
        assert_fails(&r, code, shown);
        assert_one_error_line(&r);
    }
    let huge = "k".repeat(70_000);
    let r = lockkit(
        &["bench", "--url", &url, "--out", &out, "--key-prefix", &huge],
        None,
    );
    assert_fails(&r, 2, "error: --key-prefix is longer than 60 KiB");
    assert!(files_in(dir.path()).is_empty(), "nothing written");

    let r = lockkit(&["ttl", "r.json", "--work-p99", "-1ms"], None);
    assert_fails(&r, 2, "`-1ms` is not a duration");
}

#[test]
fn keys_with_newlines_and_resp_look_alikes_are_sent_binary_safe() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let prefix = "lk\r\n*3\r\n$3\r\nSET\r\n$8\r\ninjected\r\n$1\r\nx\r\n\té🔒:";
    let url = server.url();
    let mut args = vec![
        "bench",
        "--url",
        &url,
        "--key-prefix",
        prefix,
        "--keys",
        "10",
        "--quiet",
    ];
    args.extend(SHORT);
    let out = dir.path().display().to_string();
    args.extend(["--out", &out]);
    // (argv cannot carry a NUL; the library's own tests cover NUL in keys.) The prefix is sent
    // as bytes of the key: nothing in it is read by the server as a command.
    let r = lockkit(&args, None);
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert!(!r.stderr.contains("panicked"));
    assert!(server.inline("EXISTS injected").unwrap().starts_with(":0"));
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            files_in(dir.path())
                .into_iter()
                .find(|p| p.extension().is_some_and(|e| e == "json"))
                .unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    assert!(v["throughput"]["cycles"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["errors"]["total"], 0, "{v}");
}

#[test]
fn an_unwritable_results_folder_fails_before_the_run_and_damages_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Tests run as root, which ignores permission bits: a path under a regular file is what
    // no user can write.
    let file = dir.path().join("regular");
    std::fs::write(&file, "keep me").unwrap();
    let url = dead_url();
    let under = file.join("sub");
    let r = lockkit(
        &["bench", "--url", &url, "--out", under.to_str().unwrap()],
        None,
    );
    assert_fails(
        &r,
        2,
        &format!(
            "cannot write reports to {}; pick a writable folder with --out DIR",
            under.display()
        ),
    );
    assert_one_error_line(&r);
    let r = lockkit(
        &[
            "bench",
            "--url",
            &url,
            "--json",
            file.join("r.json").to_str().unwrap(),
        ],
        None,
    );
    assert_fails(
        &r,
        2,
        &format!("cannot write reports to {}", file.display()),
    );
    let r = lockkit(
        &[
            "bench",
            "--url",
            &url,
            "--json",
            dir.path().to_str().unwrap(),
        ],
        None,
    );
    assert_fails(&r, 2, "--json names a folder");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    assert_eq!(files_in(dir.path()), vec![file]);
}

/// A good interval log, written the way `lockkit bench` writes one (tagged `cycle`).
fn good_log() -> Vec<u8> {
    let mut log = lockkit_report::files::IntervalLog::starting(std::time::SystemTime::now());
    for second in 0..3u64 {
        let mut h = lockkit_report::stats::new_histogram();
        for us in 1..=500 {
            h.record(us * (second + 1)).unwrap();
        }
        log.push(Duration::from_secs(second), Duration::from_secs(1), h);
    }
    log.render("cycle").unwrap()
}

#[test]
fn a_corrupted_histogram_log_fails_merge_and_leaves_every_file_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let good = good_log();
    let text = String::from_utf8(good.clone()).unwrap();
    let good_path = dir.path().join("good.hlog");
    std::fs::write(&good_path, &good).unwrap();
    let merged = dir.path().join("merged.json");
    std::fs::write(&merged, "previous merge").unwrap();

    // The last field of an interval line is the base64 histogram.
    let first_interval = text
        .lines()
        .find(|l| !l.starts_with('#') && !l.starts_with('"') && l.contains(','))
        .unwrap();
    let (head, b64) = first_interval.rsplit_once(',').unwrap();
    let bad_b64 = text.replacen(
        first_interval,
        &format!("{head},{}!!{}", &b64[..8], &b64[10..]),
        1,
    );
    let not_a_histogram = text.replacen(
        first_interval,
        &format!("{head},QUJDREVGR0hJSktMTU5PUA=="),
        1,
    );
    let cut = text.find(first_interval).unwrap() + first_interval.len() / 2;
    let truncated = &text[..cut];
    let cases: [(&str, &[u8], &str); 5] = [
        (
            "bad-base64.hlog",
            bad_b64.as_bytes(),
            "an interval's histogram is not valid base64",
        ),
        (
            "not-a-histogram.hlog",
            not_a_histogram.as_bytes(),
            "an interval's histogram does not decode",
        ),
        (
            "truncated.hlog",
            truncated.as_bytes(),
            "not an HdrHistogram interval log",
        ),
        (
            "binary.hlog",
            b"\x00\x01\x02\xff garbage",
            "not an HdrHistogram interval log",
        ),
        ("empty.hlog", b"", "the logs hold no intervals"),
    ];
    for (name, bytes, shown) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        if name == "empty.hlog" {
            // An empty log next to a good one merges the good one; alone, it is refused.
            let r = lockkit(&["merge", path.to_str().unwrap()], None);
            assert_fails(&r, 1, shown);
            continue;
        }
        let r = lockkit(
            &[
                "merge",
                good_path.to_str().unwrap(),
                path.to_str().unwrap(),
                "--json",
                merged.to_str().unwrap(),
            ],
            None,
        );
        assert_fails(
            &r,
            1,
            &format!("error: reading {}: {shown}", path.display()),
        );
        assert_one_error_line(&r);
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{name} untouched");
    }
    assert_eq!(
        std::fs::read(&good_path).unwrap(),
        good,
        "good log untouched"
    );
    assert_eq!(std::fs::read_to_string(&merged).unwrap(), "previous merge");
    // No temporaries left behind.
    assert_eq!(files_in(dir.path()).len(), 2 + cases.len());
}

#[test]
fn a_malformed_transcript_names_file_and_line_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.txt");
    std::fs::write(&good, "> SET a 1\nOK\n").unwrap();
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "> SET b 1\nOK\n> GET \"b\n(nil)\n").unwrap();
    let r = lockkit(
        &["lua", "test", good.to_str().unwrap(), bad.to_str().unwrap()],
        None,
    );
    assert_fails(
        &r,
        1,
        &format!(
            "error: {}:3: cannot split command: unbalanced quotes",
            bad.display()
        ),
    );
    assert_one_error_line(&r);
    assert!(r.stdout.is_empty(), "no transcript ran: {}", r.stdout);

    std::fs::write(&bad, "# header\nstray reply\n").unwrap();
    let r = lockkit(&["lua", "test", bad.to_str().unwrap()], None);
    assert_fails(
        &r,
        1,
        &format!("{}:2: expected a command starting with '> '", bad.display()),
    );
    assert!(r.stdout.is_empty());

    let r = lockkit(
        &[
            "lua",
            "test",
            dir.path().join("missing.txt").to_str().unwrap(),
        ],
        None,
    );
    assert_fails(&r, 1, "missing.txt:0: cannot read");
}

#[test]
fn a_runaway_script_is_stopped_and_fails_the_run() {
    // Loops forever: the harness's time limit (5 s) stops it; nothing after it runs.
    let r = lockkit(
        &["lua", "exec", "-"],
        Some("EVAL \"while true do end\" 0\nPING\n"),
    );
    assert_fails(
        &r,
        1,
        "error: -:1: the harness stopped a runaway script (time limit or memory cap); nothing after it was run",
    );
    assert!(
        r.stdout.starts_with("(error) ERR harness: script ")
            && r.stdout.contains("ran past the time limit"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("PONG"), "{}", r.stdout);

    // pcall cannot swallow it.
    let r = lockkit(
        &["lua", "exec", "-"],
        Some("EVAL \"return pcall(function() while true do end end)\" 0\n"),
    );
    assert_fails(&r, 1, "-:1: the harness stopped a runaway script");

    // Allocates without end: the memory cap stops it.
    let r = lockkit(
        &["lua", "exec", "-"],
        Some("PING\nEVAL \"local s = 'x' while true do s = s .. s end\" 0\nPING\n"),
    );
    assert_fails(&r, 1, "error: -:2: the harness stopped a runaway script");
    assert!(
        r.stdout.starts_with("PONG\n(error) ERR harness: script "),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("exceeded the Lua memory cap"),
        "{}",
        r.stdout
    );
    assert_eq!(r.stdout.matches("PONG").count(), 1, "{}", r.stdout);
}
